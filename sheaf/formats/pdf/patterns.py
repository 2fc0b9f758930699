"""The text patterns and constants the PDF reader's stages share: font names, page numbers,
bullets, captions, math, footers, affiliations, and the page band of running headers.
"""
from __future__ import annotations

import re

NO_TEXT_LAYER = "no text layer: run OCR first (PaddleOCR-VL, MinerU)"

#: Top/bottom share of the page where running headers, footers and page numbers live.
BAND = 0.07
LIGATURES = str.maketrans({
    "\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
    "\ufb05": "st", "\ufb06": "st", "\u00ad": "\x02", "\ufffe": "\x02",
})
CTRL = re.compile(r"[\x00\x01\x03-\x1f\x7f]")  # unmapped glyphs; \x02 is PDFium's line-end hyphen
BOLD_NAME = re.compile(
    r"bold|black|heavy|semibold|demi|medi|extrabold|ultrabold|cmbx|cmb\d|bx\d|-b$|,b$|\bbd\b|-bd|\.b$",
    re.I,
)
LIGHT_NAME = re.compile(r"regular|roman|book|light|italic|oblique|regu\b|-r$", re.I)
MONO_NAME = re.compile(r"mono|courier|consol|inconsolata|cmtt|sfmono|menlo|typewriter|code|lmtt|txtt", re.I)
PAGE_NUM = re.compile(
    r"^(?:page\s*)?(?:\d{1,4}|[ivxlc]{1,7})(?:\s*(?:of|/)\s*\d{1,4})?$|^[-\u2013\u2014]\s*\d{1,4}\s*[-\u2013\u2014]$",
    re.I,
)
BULLET = re.compile(
    r"^(?:[\u2022\u25cf\u25aa\u25e6\u2023\u2043\u2219\u00b7\u25a0\u25a1\u2013\u2014*-]\s|\(?\d{1,2}[.)]\s|\(?[a-z][.)]\s)"
)
#: A list item's or section's number standing alone as a run ("1.", "2.1.", "(a)", "iv)", "•"): its text follows
#: at a tab stop, further than a word space.
LIST_MARK = re.compile(
    r"^(?:\(?(?:\d{1,2}(?:\.\d{1,2}){0,3}|[a-zA-Z]|[ivx]{1,4})[.)]|[\u2022\u25cf\u25aa\u25e6\u2023\u2043\u2219\u00b7\u25a0\u25a1\u2013\u2014*-])$"
)
#: A caption: "Figure 3:", "Fig. 2.", "Table 1 |", "Table 4 -"; the label followed by punctuation.
CAPTION_START = re.compile(
    r"^\s*(?:fig(?:ure)?s?\.?|table|tab\.|scheme|chart|plate|supplementary (?:figure|table))"
    r"\s*(?:S?\d+[A-Za-z]?|[IVX]+)\s*(?:[:.|\u2013\u2014]|-\s)",
    re.I,
)
PUNCT = re.compile(r"^[\W_]+$")
MATH = re.compile(r"[=<>\u2190-\u21ff\u2200-\u22ff\u2300-\u23ff\u0391-\u03c9\u02c6\u02dc\u00af\u00b1\u00d7\u00b7^]")
EQ_NUM = re.compile(r"^\(\d{1,3}[a-z]?\)$")
NUMERIC = re.compile(r"^[-+\u2212\u00b1(]*(?:\d[\d.,]*|\.\d+)[%)*\u2020\u2021]*$|^[-\u2013\u2014/]$")
FOOTER_TEXT = re.compile(
    r"proceedings of|\u00a9|copyright|licen[cs]ed|creative commons|doi\.org|https?://|issn", re.I
)
AFFIL = re.compile(r"@|universit|institut|department|dept\.|school of|college|laborator|\blab\b|research|"
                    r"inc\.|corporation|hospital|centre|center|academy|faculty", re.I)
#: Text that is never a heading, whatever its type: a URL or DOI; an author line ("Member, IEEE",
#: two names with note marks: "Shimazaki1, ... Bhuiyan2"); a reference ("4. Moens, A.: Die
#: Pulscurve"); a relation (an equation, a numbered condition: "3. V(x) ≤ 0").
NOT_A_HEADING = re.compile(
    r"https?://|\bwww\.|\bdoi\s*:|\b10\.\d{4,9}/\S|"
    r"\b(?:Member|Fellow),?\s+IEEE\b|"
    r"(?:[a-z\u00e0-\u00ff][0-9*\u2020\u2021\u00a7]+(?:,\s*|\s+and\s+)\S.*){2}|"
    r"^\d{1,3}\.?\s+[A-Z\u00c0-\u00de][\w'\u2019-]+(?:\s[A-Z\u00c0-\u00de][\w'\u2019-]+)*,\s(?:[A-Z]\.\s?)+[:,]|"
    r"[=<>\u2264\u2265\u2260\u2248\u2261\u221e\u2208\u2209\u2282\u2286\u2283\u2192\u21d2\u2211\u220f\u222b]"
)
#: A line that ends on one of these stops mid-sentence: a heading never does (in lower case).
OPEN_END = frozenset("a an the of and or as to by with for in on that which where is are be can from at".split())
