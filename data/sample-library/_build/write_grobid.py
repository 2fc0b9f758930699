"""GROBID TEI XML writer (shaped like GROBID 0.6.1 `processFulltextDocument` output).

The header holds title, authors with affiliations, journal imprint, DOI, keywords and
abstract. The body is a flat sequence of `<div>`s, one per heading, with `<head n="2.3.1">`
carrying the numbering (GROBID does not nest divs). Figures and tables are collected at the
end of the body, followed by foot notes; back matter goes into `<back>` as
`div type="acknowledgement"` and `div type="annex"`, then `div type="references"` with
`listBibl/biblStruct`. GROBID strips running headers, footers and page numbers.
"""
from __future__ import annotations

import re

from model import Eq, Fig, Foot, H, L, P, Paper, Tab, esc

NS = 'xmlns="http://www.tei-c.org/ns/1.0"'


def _inline(text: str, figs: dict[str, str], tabs: dict[str, str]) -> str:
    """Escape text and mark figure, table and numbered citation references as <ref>s."""
    out = esc(text)

    def fig(m: re.Match) -> str:
        target = figs.get(m.group(2))
        t = f' target="#{target}"' if target else ""
        return f'<ref type="figure"{t}>{m.group(0)}</ref>'

    def tab(m: re.Match) -> str:
        target = tabs.get(m.group(1))
        t = f' target="#{target}"' if target else ""
        return f'<ref type="table"{t}>{m.group(0)}</ref>'

    def bibr(m: re.Match) -> str:
        # "[1,2]" → one <ref> per number; separators stay with the following number
        toks = re.split(r"([,–])", m.group(1))
        res, pre = [], "["
        for tok in toks:
            if tok in (",", "–"):
                pre += tok
                continue
            res.append([tok, pre])
            pre = ""
        res[-1].append("]")
        return "".join(f'<ref type="bibr" target="#b{int(n) - 1}">{pre}{n}{"".join(post)}</ref>'
                       for n, pre, *post in res)

    out = re.sub(r"\b(Fig\.|Figure) (\d+)[A-Z]?", fig, out)
    out = re.sub(r"\bTable (\d+)", tab, out)
    out = re.sub(r"\[(\d+(?:[,–]\d+)*)\]", bibr, out)
    return out


def _persname(given: str, family: str) -> str:
    first, *middle = given.split()
    s = f'<persName {NS}><forename type="first">{esc(first)}</forename>'
    for m in middle:
        s += f'<forename type="middle">{esc(m)}</forename>'
    return s + f"<surname>{esc(family)}</surname></persName>"


def _pages(pages: str) -> str:
    if not pages:
        return ""
    a, _, b = pages.replace("–", "-").partition("-")
    return f'<biblScope unit="page" from="{a}" to="{b}" />' if b else f'<biblScope unit="page">{a}</biblScope>'


def write(paper: Paper) -> bytes:
    figs = {f.label.split()[-1]: f.xml_id for f in paper.body if isinstance(f, Fig)}
    tabs = {t.label.split()[-1]: t.xml_id for t in paper.body if isinstance(t, Tab)}
    o: list[str] = []
    w = o.append
    w('<?xml version="1.0" encoding="UTF-8"?>')
    w('<TEI xml:space="preserve" xmlns="http://www.tei-c.org/ns/1.0" ')
    w('xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" ')
    w('xsi:schemaLocation="http://www.tei-c.org/ns/1.0 /opt/grobid/grobid-home/schemas/xsd/Grobid.xsd"')
    w(' xmlns:xlink="http://www.w3.org/1999/xlink">')
    w('\t<teiHeader xml:lang="en">')
    w("\t\t<fileDesc>")
    w("\t\t\t<titleStmt>")
    w(f'\t\t\t\t<title level="a" type="main">{esc(paper.title)}</title>')
    w("\t\t\t</titleStmt>")
    w("\t\t\t<publicationStmt>")
    w("\t\t\t\t<publisher>Sheaf Sample Press</publisher>")
    w('\t\t\t\t<availability status="unknown"><p>Copyright Sheaf Sample Press (synthetic article)</p>')
    w("\t\t\t\t</availability>")
    w(f'\t\t\t\t<date type="published" when="{paper.date}">{paper.date}</date>')
    w("\t\t\t</publicationStmt>")
    w("\t\t\t<sourceDesc>")
    w("\t\t\t\t<biblStruct>")
    w("\t\t\t\t\t<analytic>")
    for i, (g, f) in enumerate(paper.authors):
        aff = paper.affiliations[min(i // 2, len(paper.affiliations) - 1)]
        dept, _, rest = aff.partition(", ")
        inst, _, place = rest.partition(", ")
        settlement = place.split(",")[0] if place else ""
        country = aff.rsplit(", ", 1)[-1]
        w("\t\t\t\t\t\t<author>")
        w(f"\t\t\t\t\t\t\t{_persname(g, f)}")
        if i == 0:
            w(f"\t\t\t\t\t\t\t<email>{esc(f.lower().replace(' ', ''))}@example.invalid</email>")
        w(f'\t\t\t\t\t\t\t<affiliation key="aff{min(i // 2, len(paper.affiliations) - 1)}">')
        w(f'\t\t\t\t\t\t\t\t<orgName type="department">{esc(dept)}</orgName>')
        w(f'\t\t\t\t\t\t\t\t<orgName type="institution">{esc(inst)}</orgName>')
        w("\t\t\t\t\t\t\t\t<address>")
        if settlement and settlement != country:
            w(f"\t\t\t\t\t\t\t\t\t<settlement>{esc(settlement)}</settlement>")
        w(f"\t\t\t\t\t\t\t\t\t<country>{esc(country)}</country>")
        w("\t\t\t\t\t\t\t\t</address>")
        w("\t\t\t\t\t\t\t</affiliation>")
        w("\t\t\t\t\t\t</author>")
    w(f'\t\t\t\t\t\t<title level="a" type="main">{esc(paper.title)}</title>')
    w("\t\t\t\t\t</analytic>")
    w("\t\t\t\t\t<monogr>")
    w(f'\t\t\t\t\t\t<title level="j" type="main">{esc(paper.journal)}</title>')
    if paper.journal_abbr:
        w(f'\t\t\t\t\t\t<title level="j" type="abbrev">{esc(paper.journal_abbr)}</title>')
    w("\t\t\t\t\t\t<imprint>")
    w("\t\t\t\t\t\t\t<publisher>Sheaf Sample Press</publisher>")
    if paper.volume:
        w(f'\t\t\t\t\t\t\t<biblScope unit="volume">{paper.volume}</biblScope>')
    if paper.issue:
        w(f'\t\t\t\t\t\t\t<biblScope unit="issue">{paper.issue}</biblScope>')
    if paper.pages:
        w(f"\t\t\t\t\t\t\t{_pages(paper.pages)}")
    w(f'\t\t\t\t\t\t\t<date type="published" when="{paper.date}" />')
    w("\t\t\t\t\t\t</imprint>")
    w("\t\t\t\t\t</monogr>")
    if paper.doi:
        w(f'\t\t\t\t\t<idno type="DOI">{paper.doi}</idno>')
    w("\t\t\t\t</biblStruct>")
    w("\t\t\t</sourceDesc>")
    w("\t\t</fileDesc>")
    w("\t\t<encodingDesc>")
    w("\t\t\t<appInfo>")
    w('\t\t\t\t<application version="0.6.1" ident="GROBID" when="2021-01-13T13:57+0000">')
    w("\t\t\t\t\t<desc>GROBID - A machine learning software for extracting information from scholarly documents</desc>")
    w('\t\t\t\t\t<ref target="https://github.com/kermitt2/grobid"/>')
    w("\t\t\t\t</application>")
    w("\t\t\t</appInfo>")
    w("\t\t</encodingDesc>")
    w("\t\t<profileDesc>")
    if paper.keywords:
        w("\t\t\t<textClass>")
        w("\t\t\t\t<keywords>")
        for k in paper.keywords:
            w(f"\t\t\t\t\t<term>{esc(k)}</term>")
        w("\t\t\t\t</keywords>")
        w("\t\t\t</textClass>")
    w("\t\t\t<abstract>")
    w(f"\t\t\t\t<p>{esc(paper.abstract)}</p>")
    w("\t\t\t</abstract>")
    w("\t\t</profileDesc>")
    w("\t</teiHeader>")
    w('\t<text xml:lang="en">')
    w("\t\t<body>")

    # body: one flat div per heading
    div: list[str] | None = None
    formula_n = 0
    floats: list[str] = []
    notes: list[str] = []

    def close() -> None:
        if div is not None:
            w(f"<div {NS}>" + "".join(div) + "</div>")

    for el in paper.body:
        if isinstance(el, H):
            close()
            n = f' n="{el.num}"' if el.num else ""
            div = [f"<head{n}>{esc(el.title)}</head>"]
        elif isinstance(el, P):
            div.append(f"<p>{_inline(el.text, figs, tabs)}</p>")
        elif isinstance(el, L):
            div.append("<list>" + "".join(f"<item>{_inline(i, figs, tabs)}</item>" for i in el.items) + "</list>")
        elif isinstance(el, Eq):
            lab = f"<label>({el.number})</label>" if el.number else ""
            div.append(f'<formula xml:id="formula_{formula_n}">{esc(el.plain or el.latex)}{lab}</formula>')
            formula_n += 1
        elif isinstance(el, Fig):
            num = el.label.split()[-1]
            floats.append(f'<figure {NS} xml:id="{el.xml_id}"><head>{esc(el.label)}</head><label>{num}</label>'
                          f"<figDesc>{esc(el.caption)}</figDesc></figure>")
        elif isinstance(el, Tab):
            num = el.label.split()[-1]
            rows = "".join("<row>" + "".join(f"<cell>{esc(c)}</cell>" for c in r) + "</row>" for r in el.rows)
            note = f"<note>{esc(el.note)}</note>" if el.note else "<note></note>"
            floats.append(f'<figure {NS} type="table" xml:id="{el.xml_id}"><head>{esc(el.label)} :</head>'
                          f"<label>{num}</label><figDesc>{esc(el.caption)}</figDesc><table>{rows}</table>{note}</figure>")
        elif isinstance(el, Foot):
            notes.append(f'\t\t\t<note {NS} place="foot">{esc(el.text)}</note>')
    close()
    for f in floats:
        w(f)
    for n in notes:
        w(n)
    w("\t\t</body>")
    w("\t\t<back>")
    w("")
    back = list(paper.backmatter)
    ack = [b for b in back if b[0].lower().startswith("acknowledg")]
    annex = [b for b in back if not b[0].lower().startswith("acknowledg")]
    for kind, items in (("acknowledgement", ack), ("annex", annex)):
        if not items:
            continue
        w(f'\t\t\t<div type="{kind}">')
        for title, paras in items:
            w(f"<div {NS}><head>{esc(title)}</head>" + "".join(f"<p>{esc(p)}</p>" for p in paras) + "</div>")
        w("\t\t\t</div>")
        w("")
    w('\t\t\t<div type="references">')
    w("")
    w("\t\t\t\t<listBibl>")
    w("")
    for i, r in enumerate(paper.references):
        w(f'<biblStruct xml:id="b{i}">')
        w("\t<analytic>")
        w(f'\t\t<title level="a" type="main">{esc(r.title)}</title>')
        for g, f in r.authors:
            w("\t\t<author>")
            w(f"\t\t\t{_persname(g, f)}")
            w("\t\t</author>")
        if r.doi:
            w(f'\t\t<idno type="DOI">{r.doi}</idno>')
        w("\t</analytic>")
        w("\t<monogr>")
        w(f'\t\t<title level="j">{esc(r.journal)}</title>')
        w("\t\t<imprint>")
        if r.volume:
            w(f'\t\t\t<biblScope unit="volume">{r.volume}</biblScope>')
        if r.pages:
            w(f"\t\t\t{_pages(r.pages)}")
        w(f'\t\t\t<date type="published" when="{r.year}" />')
        w("\t\t</imprint>")
        w("\t</monogr>")
        w(f'\t<note type="raw_reference">{esc(r.numbered(i + 1).split(". ", 1)[1])}</note>')
        w("</biblStruct>")
        w("")
    w("\t\t\t\t</listBibl>")
    w("\t\t\t</div>")
    w("\t\t</back>")
    w("\t</text>")
    w("</TEI>")
    return ("\n".join(o) + "\n").encode("utf-8")
