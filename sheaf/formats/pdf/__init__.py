"""PDF: the text layer read with pypdfium2 (PDFium, Apache-2.0/BSD; never PyMuPDF).

What PDFium gives us per character (text, box, font size, font name/weight, matrix) is
grouped here into *runs* (consecutive characters of one PDF text object: one font, one
size), runs into *lines* (same baseline, horizontally adjacent), lines into reading order
(two- and three-column pages: column by column, full-width lines where they stand; a table
whose cells wrap over several lines: row by row, each cell's lines together; a page whose
text runs up or down, a landscape table, is read turned a quarter) and lines into
*blocks* (paragraphs, headings, captions, code). Ligature glyphs that a font maps to wrong
characters ("speciBc", "di'erent") are read as the ligatures the document's words need.

Roles come from typography: the body size is the size covering the most characters of
body-like lines; a heading is a short stand-alone block noticeably larger than the body,
or bold at body size and numbered / a known section name; its level comes from size
buckets (largest = 1) unless its numbering says otherwise (finalize: numbering wins); a
numbered line of its own in body type is one too. Never a heading, whatever its type: an
author line, a URL or DOI, a reference, an equation or numbered condition, a sentence cut at
the line's end (`blocks.never_heading`). Guards keep the structure plausible: the
body size counts running text before the references, a page or paper with far too many
type-size headings has them as paragraphs, a references heading needs reference-shaped text
after it. The largest text on page 1 is the title, never a banner ("Research Article") and
taken from page 2 behind a publisher's cover sheet. Page numbers and running headers/footers (text in the
top/bottom band repeated across pages) are furniture. A figure's picture has no text, so
every figure caption gets a synthetic `figure` block right before it (its text is whatever
text the figure itself contains, often nothing) for the caption to pair with.

Performance: the page text comes in one call, then one ctypes call per character (its
text object) plus a handful per run; 5-10 ms a page on these machines (a 20-page paper in
~0.15 s on one core). PDFium is not thread-safe: reading is serialised by a lock.

The package, one module per stage: `pdfium` (PDFium access), `geometry` (runs, lines, pages),
`text_layer` (characters into runs and lines), `glyphs` (ligatures and marks), `reading_order`,
`blocks` (lines into paragraphs, headings, captions, code), `roles` (typography into roles,
furniture, the title), `ocr` (the OCR engine and its per-machine cache), `ocr_int8` (its recognition model in 8-bit
integers, made once per machine), `scans` (which pages OCR
reads, its lines as the text layer's) and `adapter` (the stages in order); `patterns` holds the
text patterns they share.

Pages without a usable text layer (scans, picture-only pages, fonts without a Unicode map) are
read by OCR when the parse is given a `PageOcr` (`SHEAF_OCR`, default auto): their lines then go
through the same stages. Its public face is `parse`, `matches`, `VERSION` and `text_layer_problem`.
"""
from __future__ import annotations

from sheaf.formats.pdf.adapter import parse
from sheaf.formats.pdf.patterns import NO_TEXT_LAYER
from sheaf.formats.pdf.pdfium import matches, text_layer_problem

__all__ = ["NO_TEXT_LAYER", "READS_SCANS", "VERSION", "matches", "parse", "text_layer_problem"]

VERSION = "4"
#: `parse` takes `ocr=` (a `PageOcr`): the pages without a usable text layer are read by it.
READS_SCANS = True
