"""Markdown fulltext writer (`paper.md`).

With headings: `# Title`, author and affiliation lines, `## Abstract`, `## 1 Introduction`,
`### 2.1 ...`, pipe tables preceded by their caption, `![...](...)` figures followed by
their caption, `$$ ... $$` equations, back-matter and reference sections, and optional
`<!-- page N -->` markers. A paper whose layout sets `no_headings` is written as bare
paragraphs only (the title then lives only in library.json).
"""
from __future__ import annotations

from model import Eq, Fig, Foot, H, L, P, Paper, Tab


def _table(t: Tab) -> str:
    rows = [[c.replace("|", "\\|") for c in r] for r in t.rows]
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join("---" for _ in rows[0]) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(out)


def write(paper: Paper) -> bytes:
    if not any(isinstance(e, H) for e in paper.body):
        return ("\n\n".join(e.text for e in paper.body if isinstance(e, P)) + "\n").encode("utf-8")
    breaks = dict(paper.layout.get("page_breaks", []))
    o: list[str] = [f"# {paper.title}", paper.author_line(), "*" + "; ".join(paper.affiliations) + "*",
                    "## Abstract", paper.abstract]
    if paper.keywords:
        o.append("**Keywords:** " + ", ".join(paper.keywords))
    fig_n = 0
    for el in paper.body:
        if isinstance(el, H):
            if el.num in breaks:
                o.append(f"<!-- page {breaks[el.num]} -->")
            o.append("#" * (el.level + 1) + " " + el.text())
        elif isinstance(el, P):
            o.append(el.text)
        elif isinstance(el, L):
            o.append("\n".join(f"- {i}" for i in el.items))
        elif isinstance(el, Eq):
            tag = f" \\tag{{{el.number}}}" if el.number else ""
            o.append(f"$$\n{el.latex}{tag}\n$$")
        elif isinstance(el, Fig):
            fig_n += 1
            o.append(f"![{el.label.rstrip('.:')}](figures/figure{fig_n}.png)")
            o.append(el.full)
        elif isinstance(el, Tab):
            o.append(el.full)
            o.append(_table(el))
            if el.note:
                o.append(el.note)
        elif isinstance(el, Foot):
            o.append(f"[^{len(o)}]: {el.text}")
    for title, paras in paper.backmatter:
        o.append(f"## {title}")
        o.extend(paras)
    if paper.references:
        o.append("## References")
        o.extend(paper.ref_strings())
    return ("\n\n".join(o) + "\n").encode("utf-8")
