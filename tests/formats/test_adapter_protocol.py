"""Every input format sits behind the one `Adapter` protocol of `sheaf.formats`."""
from __future__ import annotations

import inspect

import pytest

from sheaf.formats import FORMATS, Adapter, adapter


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_each_format_module_is_an_adapter(fmt):
    mod = adapter(fmt)
    assert isinstance(mod.VERSION, str) and mod.VERSION
    for name in ("matches", "parse"):
        want = inspect.signature(getattr(Adapter, name))
        got = inspect.signature(getattr(mod, name))
        # past the protocol's, an adapter may take keyword-only options with defaults (the PDF's `ocr`)
        own = [k for k, p in got.parameters.items() if not (p.kind is p.KEYWORD_ONLY and p.default is not p.empty)]
        assert own == [p for p in want.parameters if p != "self"], (fmt, name)


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown format"):
        adapter("word")
