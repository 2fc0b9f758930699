"""The text layer's data: runs (one font, one size), lines and pages, and the small numeric
helpers every stage shares.
"""
from __future__ import annotations

from collections import Counter

from sheaf.formats.pdf.patterns import LIST_MARK, PUNCT


class Run:
    """Consecutive characters of one text object: one font, one size, one baseline."""

    __slots__ = ("text", "x0", "x1", "base", "size", "bold", "mono", "font", "chars")

    def __init__(self, text, x0, x1, base, size, bold, mono, font=0, chars=None):
        self.text, self.x0, self.x1, self.base = text, x0, x1, base
        self.size, self.bold, self.mono, self.font = size, bold, mono, font
        self.chars = chars  # (first, last) index of its characters in the page's text, while it is read


class Line:
    """Runs sharing a baseline; y grows downwards (top-of-page = 0), in points."""

    __slots__ = ("runs", "x0", "x1", "base", "size", "bold", "mono", "text", "nchars", "side", "page",
                 "top", "bottom", "bold_start", "bold_end", "band", "crowded", "top_size", "spans", "cell")

    def __init__(self, run: Run, page: int):
        self.runs = [run]
        self.page = page
        self.x0, self.x1, self.base, self.size = run.x0, run.x1, run.base, run.size
        self.side = "full"
        self.band = None
        self.crowded = False
        self.cell: tuple | None = None  # (page, table, row, column) of a table cell's line

    def fits(self, run: Run, mid: float) -> bool:
        big = max(self.size, run.size)
        db = run.base - self.base
        if abs(db) > 0.25 * big:
            small = min(self.size, run.size)
            if not (small < 0.85 * big and abs(db) <= 0.6 * big):
                return False
        gap = run.x0 - self.x1
        # a list item's marker alone ("1.", "•") takes its text at a tab stop up to 4 em away
        reach = 4.0 if len(self.runs) == 1 and LIST_MARK.match(self.runs[0].text.strip()) else 1.5
        if gap < -0.5 * big or gap > reach * big:
            return False
        if gap > 0.8 * big and self.x1 <= mid <= run.x0:  # do not bridge a column gutter
            return False
        return True

    def add(self, run: Run) -> None:
        self.runs.append(run)
        self.x0 = min(self.x0, run.x0)
        self.x1 = max(self.x1, run.x1)
        if run.size > self.size * 1.15 and len(run.text) > 1:  # the main text arrived after a superscript
            self.base, self.size = run.base, run.size

    def finish(self) -> None:
        runs = sorted(self.runs, key=lambda r: r.x0) if len(self.runs) > 1 else self.runs
        parts: list[str] = []
        spans: list[int] = []  # where each run starts in the joined text
        at = 0
        prev = None
        sizes: Counter[float] = Counter()
        bold = mono = total = 0
        for r in runs:
            if prev is not None:
                gap = r.x0 - prev.x1
                # ink-to-ink distance: letters of one word sit ~0.1 em apart, words >= 0.2 em
                if gap > 0.18 * max(r.size, prev.size) and not parts[-1].endswith(" ") and not r.text.startswith(" "):
                    parts.append(" ")
                    at += 1
            parts.append(r.text)
            spans.append(at)
            at += len(r.text)
            n = len(r.text) - r.text.count(" ")
            sizes[round(r.size, 1)] += n
            total += n
            bold += n * r.bold
            mono += n * r.mono
            prev = r
        self.runs = runs
        joined = "".join(parts)
        self.text = joined.strip()
        lead = len(joined) - len(joined.lstrip())
        self.spans = [a - lead for a in spans]
        self.nchars = total
        self.size = max(sizes.items(), key=lambda kv: (kv[1], kv[0]))[0] if sizes else self.size
        main = [r for r in runs if abs(r.size - self.size) < 0.6]
        if main:
            self.base = sorted(r.base for r in main)[len(main) // 2]
        # the largest size among word-like runs: small caps and sub/superscripts do not lower it
        self.top_size = max((r.size for r in runs if len(r.text) >= 2), default=self.size)
        self.bold = bold / total if total else 0.0
        self.mono = mono / total if total else 0.0
        self.bold_start = bool(runs and runs[0].bold)
        last = next((r for r in reversed(runs) if not r.text.isspace() and not PUNCT.match(r.text)), None)
        self.bold_end = bool(last and last.bold)  # a run-in heading ends in regular type
        self.top = self.base - 0.78 * self.size
        self.bottom = self.base + 0.25 * self.size


class Page:
    __slots__ = ("number", "x0", "y0", "width", "height", "lines", "chars", "two_col", "mid", "rotated",
                 "turned_up", "turned", "tabular", "picture")

    def __init__(self, number, x0, y0, width, height):
        self.number, self.x0, self.y0, self.width, self.height = number, x0, y0, width, height
        self.lines: list[Line] = []
        self.chars = 0
        self.rotated = 0  # characters skipped because their text runs vertically / upside down
        self.turned_up = 0  # of those, characters whose text runs upwards (a page turned left)
        self.turned = ""  # "up"/"down": read turned a quarter so that its text (running up/down) runs left to right
        self.two_col = False
        self.mid = x0 + width / 2
        self.tabular = False  # three or more column starts: a table may need reading cell by cell
        self.picture = 0.0  # share of the page the largest image covers (measured on pages with little text)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else 0.0
