"""The format-neutral description of a sample paper.

Every paper in the sample library is written once as a `Paper` (see `content/`), then
rendered by one writer into the OCR/layout format that paper exercises. All text is our
own invented prose; the numbers, people, journals and DOIs (prefix 10.5555, the test
prefix) are fictional.
"""
from __future__ import annotations

from dataclasses import dataclass, field


# --- body elements --------------------------------------------------------------------

@dataclass
class H:
    """A section heading. `num` is its printed numbering ("2.1"), "" when unnumbered."""

    num: str
    title: str
    level: int = 0  # 0: from the numbering (1 + number of dots); unnumbered → 1

    def __post_init__(self) -> None:
        if not self.level:
            self.level = 1 + self.num.count(".") if self.num else 1

    def text(self, style: str = "plain") -> str:
        """The heading as printed: style 'plain' "2.1 Title", 'dot' "2.1. Title"."""
        if not self.num:
            return self.title
        if style == "dot":
            return f"{self.num}. {self.title}"
        return f"{self.num} {self.title}"


@dataclass
class P:
    text: str


@dataclass
class Fig:
    """A figure: `label` as printed ("Fig. 2.", "Figure 2:"), `kind` image or chart."""

    label: str
    caption: str
    kind: str = "image"
    height: float = 150.0  # points, at column width
    xml_id: str = ""

    @property
    def full(self) -> str:
        return f"{self.label} {self.caption}"


@dataclass
class Tab:
    label: str
    caption: str
    rows: list[list[str]]
    note: str = ""
    xml_id: str = ""

    @property
    def full(self) -> str:
        return f"{self.label} {self.caption}"

    def html(self, attrs: str = "") -> str:
        out = [f"<table{attrs}>"]
        for r in self.rows:
            out.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>")
        out.append("</table>")
        return "".join(out)


@dataclass
class Eq:
    latex: str
    number: str = ""  # "1"
    plain: str = ""  # the formula as plain text (what GROBID extracts)


@dataclass
class L:
    """A bulleted list."""

    items: list[str]


@dataclass
class Foot:
    """A footnote, placed at the bottom of the page where it occurs."""

    text: str


@dataclass
class Ref:
    authors: list[tuple[str, str]]  # (given, family)
    year: int
    title: str
    journal: str
    volume: str = ""
    pages: str = ""
    doi: str = ""

    def numbered(self, n: int) -> str:
        """Vancouver-like: "3. Müller J, Ito K. Title. Journal. 2019;12:1–9." """
        names = ", ".join(f"{fam} {''.join(g[0] for g in given.replace('-', ' ').split())}"
                          for given, fam in self.authors[:6])
        if len(self.authors) > 6:
            names += ", et al"
        vol = f";{self.volume}" if self.volume else ""
        pages = f":{self.pages}" if self.pages else ""
        return f"{n}. {names}. {self.title}. {self.journal}. {self.year}{vol}{pages}."

    def author_year(self) -> str:
        """ACL-like: "Jonas Müller and Kenji Ito. 2019. Title. Journal, 12:1–9." """
        names = [f"{g} {f}" for g, f in self.authors]
        if len(names) == 1:
            who = names[0]
        elif len(names) == 2:
            who = f"{names[0]} and {names[1]}"
        else:
            who = ", ".join(names[:-1]) + f", and {names[-1]}"
        vol = f", {self.volume}" if self.volume else ""
        pages = f":{self.pages}" if self.pages else ""
        return f"{who}. {self.year}. {self.title}. {self.journal}{vol}{pages}."

    def apa(self) -> str:
        """APA-like: "Müller, J., & Ito, K. (2019). Title. Journal, 12, 1–9." """
        names = [f"{f}, {' '.join(g[0] + '.' for g in given.replace('-', ' ').split())}"
                 for given, f in self.authors]
        who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + f", & {names[-1]}"
        vol = f", {self.volume}" if self.volume else ""
        pages = f", {self.pages}" if self.pages else ""
        doi = f" https://doi.org/{self.doi}" if self.doi else ""
        return f"{who} ({self.year}). {self.title}. {self.journal}{vol}{pages}.{doi}"


# --- the paper ------------------------------------------------------------------------

@dataclass
class Paper:
    key: str
    fmt: str  # paddleocr-vl | mineru | grobid | docling | pdf | markdown
    title: str
    authors: list[tuple[str, str]]  # (given, family)
    affiliations: list[str]
    date: str  # ISO
    journal: str
    abstract: str
    body: list  # H, P, Fig, Tab, Eq, L, Foot
    backmatter: list[tuple[str, list[str]]] = field(default_factory=list)
    references: list[Ref] = field(default_factory=list)
    ref_style: str = "numbered"  # numbered | author_year | apa
    keywords: list[str] = field(default_factory=list)
    volume: str = ""
    issue: str = ""
    pages: str = ""
    doi: str = ""
    journal_abbr: str = ""
    running_head: str = ""  # running journal header, repeated on every page
    running_title: str = ""  # short title / "Author et al." on alternate pages
    first_page: int = 1  # printed number of the first page
    item_type: str = "journalArticle"
    citation_key: str = ""
    tags: list[str] = field(default_factory=list)
    collections: list[str] = field(default_factory=list)
    language: str = "en"
    url: str = ""
    exercises: list[str] = field(default_factory=list)  # README notes
    extra_notes: list[str] = field(default_factory=list)  # Zotero child notes (HTML)
    layout: dict = field(default_factory=dict)  # writer options

    @property
    def year(self) -> str:
        return self.date[:4]

    def author_line(self) -> str:
        names = [f"{g} {f}" for g, f in self.authors]
        return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]

    def ref_strings(self) -> list[str]:
        if self.ref_style == "author_year":
            return [r.author_year() for r in self.references]
        if self.ref_style == "apa":
            return [r.apa() for r in self.references]
        return [r.numbered(i + 1) for i, r in enumerate(self.references)]


def esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
