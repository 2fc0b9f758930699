"""A module imported on first attribute access (keeps numpy off the cold `sheaf search` path)."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands in for a module until an attribute is read; then imports it (once) and caches
    each attribute read on itself, so later reads cost a plain attribute lookup."""

    def __init__(self, name: str) -> None:
        self.__dict__["_lazy_name"] = name

    def _module(self) -> ModuleType:
        return importlib.import_module(self.__dict__["_lazy_name"])

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._module(), attr)
        self.__dict__[attr] = value
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_name']!r}>"


def lazy_module(name: str) -> Any:
    """`np = lazy_module("numpy")`: numpy is imported by the first `np.<attr>`."""
    return LazyModule(name)
