"""The one JSON result envelope of every command (docs/result-envelope.schema.json) and its stable error codes."""
from __future__ import annotations

import json
import sys
from typing import Any

from sheaf import __version__

ERROR_CODES = (
    "INDEX_NOT_FOUND", "VECTOR_NOT_BUILT", "VECTOR_CORRUPTED", "MODEL_CHANGED", "BAD_QUERY",
    "NOT_FOUND", "BACKEND_UNAVAILABLE", "TIMEOUT", "INTERNAL_ERROR",
    "BAD_INPUT",  # an input file (OCR output, export) that cannot be read: names paper and file
    "LIBRARY_MISMATCH",  # a home given another library than the one it records (sheaf.core.home_record)
)


class SheafError(Exception):
    """An error with a stable code, a message and details for the envelope."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None,
                 hint: str | None = None) -> None:
        assert code in ERROR_CODES, code
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = dict(details or {})
        if hint:
            self.details.setdefault("hint", hint)


def ok(command: str, data: dict[str, Any], count: int | None = None,
       warnings: list[str] | None = None, next_actions: list[str] | None = None) -> dict[str, Any]:
    """A success envelope."""
    if count is None:
        matches = data.get("matches")
        count = len(matches) if isinstance(matches, list) else 0
    return {"ok": True, "command": command, "version": __version__, "data": data, "count": count,
            "warnings": list(warnings or []), "next_actions": list(next_actions or [])}


def error(command: str, code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """An error envelope."""
    return {"ok": False, "command": command, "version": __version__,
            "error": {"code": code, "message": message, "details": dict(details or {})}}


def emit(envelope: dict[str, Any]) -> None:
    """Write an envelope as one JSON line to stdout."""
    sys.stdout.write(json.dumps(envelope, ensure_ascii=False, sort_keys=False) + "\n")
