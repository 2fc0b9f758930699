"""GROBID TEI XML (`*.tei.xml`): header (title, authors, abstract), body divs, figures, references.

Reading order is the document order of the TEI: front matter from the `teiHeader`, then
`text/body` (sections, then the figures/tables and footnotes GROBID collects at its end),
then `text/back` (acknowledgements, annexes, the bibliography).

Pages come from `coords` attributes ("page,x,y,w,h;...", PDF points) when GROBID was run
with coordinates; an element without its own coords takes the page of its first
descendant that has them (e.g. a citation `ref` inside a paragraph), else the page of
the text before it. Boxes are normalized by the page sizes in `facsimile/surface`; with no
facsimile the bbox stays None. Without any coords every block is on page 1.

XML safety: a document with a DOCTYPE or ENTITY declaration is refused (billion laughs,
external entities); GROBID never writes one.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from sheaf.core.models import IngestError
from sheaf.formats.common import RawBlock, caption_kind, decode_text, file_head, heading_role, numbering_depth

VERSION = "1"

TEI_NS = "http://www.tei-c.org/ns/1.0"
_XML_NS = "http://www.w3.org/XML/1998/namespace"
_DECL_RE = re.compile(r"<!\s*(DOCTYPE|ENTITY)", re.I)
_ENC_RE = re.compile(rb"^\s*<\?xml[^>]*\bencoding\s*=\s*[\"']([A-Za-z0-9._-]+)[\"']")


def matches(path: Path) -> bool:
    """`*.tei.xml`, or an `.xml` file whose head declares the TEI namespace."""
    name = path.name.lower()
    if name.endswith(".tei.xml"):
        return True
    if not name.endswith(".xml"):
        return False
    return TEI_NS.encode() in file_head(path)


# --- small helpers ----------------------------------------------------------------------

def _local(tag: object) -> str:
    """Tag name without its namespace ('' for comments and processing instructions)."""
    if not isinstance(tag, str):
        return ""
    return tag.rsplit("}", 1)[-1]


def _kids(el: ET.Element, name: str | None = None) -> list[ET.Element]:
    return [c for c in el if _local(c.tag) and (name is None or _local(c.tag) == name)]


def _find(el: ET.Element | None, *path: str) -> ET.Element | None:
    """First element along a path of local names (namespace-agnostic)."""
    cur = el
    for name in path:
        if cur is None:
            return None
        cur = next((c for c in cur if _local(c.tag) == name), None)
    return cur


def _text(el: ET.Element | None, skip: frozenset[str] = frozenset()) -> str:
    """All text under `el` in document order, leaving out subtrees named in `skip`."""
    if el is None:
        return ""
    parts: list[str] = []

    def rec(e: ET.Element) -> None:
        if e.text:
            parts.append(e.text)
        for c in e:
            if _local(c.tag) not in skip:
                rec(c)
            if c.tail:
                parts.append(c.tail)

    rec(el)
    return re.sub(r"\s+", " ", "".join(parts)).strip()


def _decode(paper_id: str, path: Path, data: bytes, warnings: list[str]) -> str:
    """Text of the XML: its declared encoding if not UTF-8, else UTF-8 (invalid bytes warned)."""
    m = _ENC_RE.match(data[:200])
    enc = m.group(1).decode("ascii").lower() if m else "utf-8"
    if enc not in ("utf-8", "utf8"):
        try:
            return data.decode(enc)
        except (LookupError, UnicodeDecodeError):
            warnings.append(f"{path.name}: cannot decode as declared encoding {enc!r}; read as UTF-8")
    return decode_text(paper_id, path, data, warnings)


def parse_xml(paper_id: str, path: Path, data: bytes, warnings: list[str]) -> ET.Element:
    """The root element, or an IngestError; DOCTYPE/ENTITY declarations are refused."""
    text = _decode(paper_id, path, data, warnings)
    if _DECL_RE.search(text):
        raise IngestError(paper_id, str(path),
                          "XML with a DOCTYPE/ENTITY declaration refused (entity expansion is unsafe)")
    # the encoding was handled above: drop the declaration so ElementTree parses the str as is
    text = re.sub(r"^\s*<\?xml[^>]*\?>", "", text, count=1)
    try:
        return ET.fromstring(text)
    except ET.ParseError as e:
        line, col = getattr(e, "position", (0, 0))
        msg = str(e).split(":")[0]
        raise IngestError(paper_id, str(path), f"malformed XML: {msg} at line {line} column {col + 1}") from None


# --- pages and boxes --------------------------------------------------------------------

Box = tuple[int, float, float, float, float]  # page, x, y, w, h (PDF points, top-left origin)


def _coords(el: ET.Element) -> list[Box]:
    raw = el.get("coords")
    if not raw:
        return []
    out: list[Box] = []
    for part in raw.split(";"):
        bits = part.strip().split(",")
        if len(bits) != 5:
            continue
        try:
            page = int(float(bits[0]))
            x, y, w, h = (float(b) for b in bits[1:])
        except (ValueError, OverflowError):  # "inf" pages overflow int()
            continue
        if page >= 1:
            out.append((page, x, y, w, h))
    return out


def _subtree_coords(el: ET.Element) -> list[Box]:
    """Coords of `el`, else of its descendants (document order)."""
    own = _coords(el)
    if own:
        return own
    out: list[Box] = []
    for d in el.iter():
        if d is not el:
            out.extend(_coords(d))
    return out


class _Pages:
    """Page tracking: the current page and the page sizes from `facsimile/surface`."""

    def __init__(self, root: ET.Element) -> None:
        self.sizes: dict[int, tuple[float, float, float, float]] = {}
        fac = _find(root, "facsimile")
        for s in _kids(fac, "surface") if fac is not None else []:
            try:
                n = int(s.get("n", ""))
                ulx, uly = float(s.get("ulx", 0)), float(s.get("uly", 0))
                lrx, lry = float(s.get("lrx", "")), float(s.get("lry", ""))
            except ValueError:
                continue
            if lrx > ulx and lry > uly:
                self.sizes[n] = (ulx, uly, lrx - ulx, lry - uly)
        self.current = 1

    def locate(self, el: ET.Element, advance: bool = True) -> tuple[int, tuple[float, float, float, float] | None]:
        """(page, bbox) of an element; `advance` moves the current page on (not for floats)."""
        own = _coords(el)
        boxes = own or _subtree_coords(el)
        if not boxes:
            return self.current, None
        page = boxes[0][0]
        if advance:
            self.current = boxes[-1][0]
        bbox = None
        if own and page in self.sizes:
            ox, oy, pw, ph = self.sizes[page]
            same = [b for b in own if b[0] == page]
            x0 = min(b[1] for b in same)
            y0 = min(b[2] for b in same)
            x1 = max(b[1] + b[3] for b in same)
            y1 = max(b[2] + b[4] for b in same)
            bbox = ((x0 - ox) / pw, (y0 - oy) / ph, (x1 - ox) / pw, (y1 - oy) / ph)
        return page, bbox


# --- header -------------------------------------------------------------------------------

def _person(pers: ET.Element) -> str:
    names = [_text(c) for c in pers if _local(c.tag) in ("roleName", "forename", "surname", "genName")]
    name = " ".join(n for n in names if n)
    return name or _text(pers)


def _header(root: ET.Element, pages: _Pages, raws: list[RawBlock]) -> str | None:
    header = _find(root, "teiHeader")
    file_desc = _find(header, "fileDesc")
    title = None
    tstmt = _find(file_desc, "titleStmt")
    if tstmt is not None:
        titles = _kids(tstmt, "title")
        main = next((t for t in titles if t.get("type") == "main"), titles[0] if titles else None)
        title = _text(main) or None
    if title:
        raws.append(RawBlock(page=1, label="title", text=title, role="title"))

    analytic = _find(file_desc, "sourceDesc", "biblStruct", "analytic")
    authors: list[str] = []
    affiliations: list[str] = []
    for au in _kids(analytic, "author") if analytic is not None else []:
        pers = _find(au, "persName")
        if pers is not None and (name := _person(pers)):
            authors.append(name)
        for aff in _kids(au, "affiliation"):
            orgs = [_text(o) for o in _kids(aff, "orgName")]
            addr = _find(aff, "address")
            place = ", ".join(_text(a) for a in _kids(addr) if _text(a)) if addr is not None else ""
            text = ", ".join(o for o in orgs if o) or _text(aff)
            if place:
                text = f"{text}, {place}" if text else place
            if text and text not in affiliations:
                affiliations.append(text)
    if authors:
        raws.append(RawBlock(page=1, label="author", text=", ".join(authors), role="authors"))
    if affiliations:
        raws.append(RawBlock(page=1, label="affiliation", text="; ".join(affiliations), role="affiliation"))

    profile = _find(header, "profileDesc")
    abstract = _find(profile, "abstract")
    paras: list[tuple[ET.Element, str]] = []
    if abstract is not None:
        for el in abstract.iter():
            name = _local(el.tag)
            if name == "p":
                paras.append((el, _text(el)))
            elif name == "head" and _text(el):
                paras.append((el, _text(el)))
        if not paras and _text(abstract):
            paras.append((abstract, _text(abstract)))
    # a sub-heading inside the abstract ("Background") is joined to the paragraph after it
    merged: list[tuple[ET.Element, str]] = []
    carry = ""
    for el, text in paras:
        if _local(el.tag) == "head":
            carry = f"{carry} {text}".strip()
            continue
        merged.append((el, f"{carry}: {text}" if carry and text else carry or text))
        carry = ""
    if carry:
        merged.append((abstract, carry))
    merged = [(el, t) for el, t in merged if t]
    if merged:
        raws.append(RawBlock(page=1, label="abstract", text="Abstract", role="abstract_heading", heading_level=1))
        for el, text in merged:
            page, bbox = pages.locate(el)
            raws.append(RawBlock(page=page, label="abstract", text=text, bbox=bbox, role="abstract"))
    keywords = _find(profile, "textClass", "keywords")
    if keywords is not None:
        terms = [_text(t) for t in _kids(keywords, "term")] or [_text(keywords)]
        terms = [t for t in terms if t]
        if terms:
            raws.append(RawBlock(page=pages.current, label="keywords", text="Keywords: " + "; ".join(terms),
                                 role="abstract" if merged else "body"))
    return title


# --- body ---------------------------------------------------------------------------------

_CAPTION_SEP = re.compile(r"[\s:.|]+$")


class _Body:
    def __init__(self, pages: _Pages, raws: list[RawBlock], warnings: list[str]) -> None:
        self.pages = pages
        self.raws = raws
        self.warnings = warnings
        self.last_level = 0  # level of the last heading that had a number, 0 when none yet
        self.unknown: set[str] = set()

    def add(self, el: ET.Element, label: str, text: str, role: str | None, level: int | None = None,
            advance: bool = True) -> int:
        page, bbox = self.pages.locate(el, advance=advance)
        self.raws.append(RawBlock(page=page, label=label, text=text, bbox=bbox, role=role, heading_level=level))
        return len(self.raws) - 1

    def heading(self, head: ET.Element, kind: str) -> None:
        """A `head` → heading block; its `n` is prepended so numbering gives the depth."""
        text = _text(head)
        n = (head.get("n") or "").strip()
        if n and text and not re.match(rf"^{re.escape(n.rstrip('.'))}(?:[.\s)]|$)", text):
            text = f"{n} {text}"
        elif n and not text:
            text = n
        if not text:
            return
        role = heading_role(text)
        level = None
        if kind == "acknowledgement":
            role = "backmatter_heading"
        elif kind == "annex" and role == "heading" and not n:
            # an annex div's heading is back matter unless it reads like an appendix section
            if not re.match(r"^(appendix|supplement|[A-Z](?:\.\d+)*[.:]?\s)", text, re.I):
                role = "backmatter_heading"
        depth = numbering_depth(text)
        if role == "heading":
            if depth is not None:
                self.last_level = depth
            elif self.last_level:
                # an unnumbered head in a numbered paper is a run-in sub-heading of the last section
                level = self.last_level + 1
        self.add(head, "head", text, role, level)

    def div(self, div: ET.Element, kind: str = "body") -> None:
        """A `div`: its head, then its children in document order (nested divs recursed)."""
        body_role = "backmatter_body" if kind == "acknowledgement" else "body"
        heads = _kids(div, "head")
        if kind == "acknowledgement" and not heads and any(_text(c) for c in _kids(div, "p")):
            self.raws.append(RawBlock(page=self.pages.current, label="head", text="Acknowledgements",
                                      role="backmatter_heading", heading_level=1))
        for child in div:
            name = _local(child.tag)
            if not name:
                continue
            if name == "head":
                if child is heads[0]:
                    self.heading(child, kind)
                elif t := _text(child):  # a second head inside one div: a run-in heading
                    self.add(child, "head", t, body_role)
            else:
                self.element(child, kind, body_role)

    def element(self, el: ET.Element, kind: str, body_role: str) -> None:
        name = _local(el.tag)
        if name == "div":
            sub = el.get("type") or kind
            self.div(el, sub if sub in ("acknowledgement", "annex") else kind)
        elif name == "p" or name == "ab":
            if t := _text(el):
                self.add(el, name, t, body_role)
        elif name == "formula":
            label = " ".join(_text(lb) for lb in _kids(el, "label") if _text(lb))
            if t := " ".join(x for x in (_text(el, skip=frozenset({"label"})), label) if x):
                self.add(el, "formula", t, "equation")
        elif name == "list":
            for item in _kids(el, "item"):
                if t := _text(item):
                    self.add(item, "item", t, "list" if body_role == "body" else body_role)
        elif name == "figure":
            self.figure(el)
        elif name == "note":
            if t := _text(el):
                place = el.get("place") or ""
                self.add(el, "note", t, "footnote" if place in ("foot", "") or kind != "body" else body_role,
                         advance=False)
        elif name == "listBibl":
            self.bibliography(el)
        elif name in ("pb", "lb", "cb", "milestone", "graphic"):
            if name == "pb" and (n := el.get("n", "")).isdigit():
                self.pages.current = max(1, int(n))
        else:
            if t := _text(el):
                self.unknown.add(name)
                self.add(el, name, t, body_role)

    def figure(self, fig: ET.Element) -> None:
        """A figure/table → the object block, then its caption attached to it."""
        ftype = (fig.get("type") or "figure").lower()
        head = _text(_find(fig, "head"))
        label = _text(_find(fig, "label"))
        desc = _text(_find(fig, "figDesc"))
        note = " ".join(_text(n) for n in _kids(fig, "note") if _text(n))
        table = _find(fig, "table")
        kind = "table" if ftype == "table" else "figure"
        prefix = _CAPTION_SEP.sub("", head)
        if not prefix and label:
            prefix = f"{'Table' if kind == 'table' else 'Figure'} {label}"
        body = " ".join(t for t in (desc, note) if t)
        if prefix and body and not body.lower().startswith(prefix.lower()):
            caption = f"{prefix}: {body}"
        else:
            caption = body or prefix
        # the caption's own label is the best evidence of the object's kind
        kind = caption_kind(caption) or kind
        rows: list[str] = []
        if table is not None:
            for row in table.iter():
                if _local(row.tag) == "row":
                    cells = [_text(c) for c in _kids(row, "cell")]
                    if any(cells):
                        rows.append(" | ".join(cells))
            if not rows and _text(table):
                rows.append(_text(table))
        obj = self.add(fig, "figure" if ftype != "table" else "table", "\n".join(rows), kind, advance=False)
        if caption:
            page, bbox = self.raws[obj].page, self.raws[obj].bbox
            self.raws.append(RawBlock(page=page, label="figDesc", text=caption, bbox=bbox,
                                      role=f"{kind}_caption", attach_to=obj))

    def bibliography(self, lb: ET.Element) -> None:
        if not any(r.role == "reference_heading" for r in self.raws):
            self.raws.append(RawBlock(page=self.pages.current, label="listBibl", text="References",
                                      role="reference_heading", heading_level=1))
        for item in lb:
            name = _local(item.tag)
            if name == "biblStruct":
                text = format_reference(item)
            elif name in ("bibl", "biblFull"):
                text = _text(item)
            else:
                continue
            if text:
                self.add(item, name, text, "reference")


def _dehyphenate(text: str) -> str:
    """'in- terventions' → 'interventions' (line-break hyphens kept in GROBID's raw strings)."""
    return re.sub(r"(\w)- (?=[a-z])", r"\1", text)


def format_reference(bs: ET.Element) -> str:
    """A readable citation: GROBID's raw string when it kept one, else built from the fields."""
    raw = next((n for n in _kids(bs, "note") if n.get("type") == "raw_reference"), None)
    if raw is not None and _text(raw):
        return _dehyphenate(_text(raw))
    analytic = _find(bs, "analytic")
    monogr = _find(bs, "monogr")
    people = [p for p in (analytic if analytic is not None else monogr if monogr is not None else [])
              if _local(p.tag) == "author"]
    names = []
    for au in people:
        pers = _find(au, "persName")
        if pers is not None and (n := _person(pers)):
            names.append(n)
        elif (org := _find(au, "orgName")) is not None and _text(org):
            names.append(_text(org))
    authors = ", ".join(names[:10]) + (" et al." if len(names) > 10 else "")

    def title_of(el: ET.Element | None) -> str:
        if el is None:
            return ""
        ts = _kids(el, "title")
        main = next((t for t in ts if t.get("type") == "main"), ts[0] if ts else None)
        return _text(main)

    title = title_of(analytic) or title_of(monogr)
    venue = title_of(monogr) if analytic is not None and title_of(analytic) else ""
    if not venue and monogr is not None and (meeting := _find(monogr, "meeting")) is not None:
        venue = _text(meeting)
    imprint = _find(monogr, "imprint")
    year = ""
    details: list[str] = []
    if imprint is not None:
        for d in _kids(imprint, "date"):
            when = d.get("when") or _text(d)
            if m := re.search(r"\d{4}", when or ""):
                year = m.group(0)
                break
        scopes = {s.get("unit"): s for s in _kids(imprint, "biblScope")}
        if (v := scopes.get("volume")) is not None and _text(v):
            details.append(_text(v) + (f"({_text(scopes['issue'])})" if scopes.get("issue") is not None else ""))
        if (pg := scopes.get("page")) is not None:
            frm, to = pg.get("from"), pg.get("to")
            pages = f"{frm}-{to}" if frm and to else _text(pg) or frm or ""
            if pages:
                details.append(pages)
        publisher = _text(_find(imprint, "publisher"))
        if publisher and not venue:
            venue = publisher
    doi = next((_text(i) for i in bs.iter() if _local(i.tag) == "idno" and (i.get("type") or "").upper() == "DOI"), "")
    parts = []
    if authors:
        parts.append(authors + (f" ({year})." if year else "."))
    elif year:
        parts.append(f"({year}).")
    if title:
        parts.append(title.rstrip(".") + ".")
    if venue:
        parts.append(venue.rstrip(".") + (", " + ", ".join(details) if details else "") + ".")
    elif details:
        parts.append(", ".join(details) + ".")
    if doi:
        parts.append(f"doi:{doi}")
    text = " ".join(parts).strip()
    return text or _text(bs)


# --- entry point ----------------------------------------------------------------------------

def parse(paper_id: str, path: Path, data: bytes, warnings: list[str]) -> tuple[list[RawBlock], str | None]:
    """TEI → raw blocks in document order, and the paper's title."""
    root = parse_xml(paper_id, path, data, warnings)
    if _local(root.tag) not in ("TEI", "teiCorpus"):
        raise IngestError(paper_id, str(path), f"not a GROBID TEI document (root element <{_local(root.tag)}>)")
    if _local(root.tag) == "teiCorpus":
        first = next((c for c in root if _local(c.tag) == "TEI"), None)
        if first is None:
            raise IngestError(paper_id, str(path), "teiCorpus holds no TEI document")
        warnings.append("teiCorpus: only its first TEI document was read")
        root = first
    pages = _Pages(root)
    raws: list[RawBlock] = []
    title = _header(root, pages, raws)

    text = _find(root, "text")
    walker = _Body(pages, raws, warnings)
    if text is not None:
        for part in text:
            name = _local(part.tag)
            if name == "front":
                for child in part:
                    walker.element(child, "body", "body")
            elif name == "body":
                for child in part:
                    walker.element(child, "body", "body")
            elif name == "back":
                for child in part:
                    if _local(child.tag) == "div":
                        dtype = child.get("type") or "annex"
                        if dtype == "references":
                            for lb in child.iter():
                                if _local(lb.tag) == "listBibl":
                                    walker.bibliography(lb)
                                    break
                        else:
                            walker.div(child, "acknowledgement" if dtype.startswith("acknowledg") else "annex")
                    else:
                        walker.element(child, "annex", "body")
            elif name == "group":
                for child in part:
                    walker.element(child, "body", "body")
    if walker.unknown:
        warnings.append(f"TEI elements read as body text: {', '.join(sorted(walker.unknown))}")
    if not any(r.text.strip() for r in raws):
        raise IngestError(paper_id, str(path), "the TEI document has no text (no title, abstract or body)")
    return raws, title
