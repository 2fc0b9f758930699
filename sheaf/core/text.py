"""Accent- and case-insensitive comparison of names and words ("Muller" finds "Müller"), as
the full-text index folds them (FTS5 `remove_diacritics`)."""
from __future__ import annotations

import unicodedata


def fold(s: str) -> str:
    """`s` without diacritics, case-folded: "Müller" → "muller"."""
    if s.isascii():
        return s.casefold()
    return "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c)).casefold()


def fold_same_length(s: str) -> str:
    """Each character of `s` replaced by its base letter, so offsets into the result are
    offsets into `s` ("Müller" → "Muller"; a character with no single base letter stays)."""
    if s.isascii():
        return s
    out = []
    for c in s:
        if c.isascii():
            out.append(c)
            continue
        base = unicodedata.normalize("NFKD", c)
        out.append(base[0] if base and all(unicodedata.combining(x) for x in base[1:]) else c)
    return "".join(out)
