"""Synthetic PaddleOCR-VL papers, one per class of a paper's edges (front and back matter).

Each builder returns the `result.json` content (a list with one result line holding the
pages); `write_all(folder)` writes them as `<folder>/<name>/result.json`. The committed copies
under `tests/formats/fixtures/edge_roles/` are what the tests read; a test checks that they
match these builders. Regenerate with `python -m tests.kits.edge_fixtures` from the root.

Pages are 1000 x 1400 pixels; boxes are given in pixels (x0, y0, x1, y1).
"""
from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "formats" / "fixtures" / "edge_roles"
W, H = 1000, 1400

_FILLER = (
    "The scaffold was seeded with marrow stromal cells and cultured for three weeks before it was "
    "implanted in the defect, where the cartilage template was replaced by bone over the following "
    "months while the vessels invaded the callus from its periphery and the graft remodelled."
)


def para(n: int) -> str:
    """A body paragraph (n sentences, numbered so that no two are alike)."""
    return " ".join(f"{_FILLER} Observation {n}.{k} held in every sample." for k in range(3))


def blk(label: str, text: str, box: tuple[int, int, int, int], order: int | None) -> dict:
    return {"block_label": label, "block_content": text, "block_bbox": list(box), "block_order": order}


def page(blocks: list[dict]) -> dict:
    for i, b in enumerate(blocks):
        b["block_id"] = i
    return {"prunedResult": {"width": W, "height": H, "parsing_res_list": blocks}}


def result(pages: list[dict]) -> list[dict]:
    return [{"layoutParsingResults": pages}]


def _body_page(n: int, heading: str | None = None, header: str = "SMITH ET AL.", number: int | None = None,
               extra_top: list[dict] | None = None) -> dict:
    """A two-column body page: a running header and page number, paragraphs, an optional heading."""
    blocks = [blk("header", header, (700, 40, 900, 60), None),
              blk("number", str(number or n), (100, 40, 140, 60), None)]
    blocks += extra_top or []
    order = 1
    y = 120
    if heading:
        blocks.append(blk("paragraph_title", heading, (100, y, 480, y + 30), order))
        order += 1
        y += 40
    for k in range(3):
        blocks.append(blk("text", para(100 * n + k), (100, y, 480, y + 300), order))
        order += 1
        y += 320
    for k in range(3):
        blocks.append(blk("text", para(100 * n + 10 + k), (520, 120 + 420 * k, 900, 520 + 420 * k), order))
        order += 1
    return page(blocks)


def _references_page(n: int, refs: list[str], tail: list[tuple[str, str]] = ()) -> dict:
    blocks = [blk("header", "SMITH ET AL.", (700, 40, 900, 60), None),
              blk("number", str(n), (100, 40, 140, 60), None),
              blk("paragraph_title", "References", (100, 100, 300, 130), 1)]
    order, y = 2, 140
    for r in refs:
        blocks.append(blk("reference_content", r, (100, y, 480, y + 60), order))
        order += 1
        y += 70
    for label, text in tail:
        blocks.append(blk(label, text, (520, 100 + 180 * (order - 2 - len(refs)), 900, 260 + 180 * (order - 2 - len(refs))),
                          order))
        order += 1
    return page(blocks)


REFS = [
    f"{k}. Author{chr(64 + k)} A, Writer B. A study of bone healing number {k}. J Bone Res {10 + k}, {100 + k}, 20{10 + k}."
    for k in range(1, 6)
]
PROSE_REF = ("6. Smith J. The role of mechanical loading in the remodelling of the fracture callus, as "
             "discussed at length in the proceedings of the annual meeting. In: Proceedings of the Society "
             "for Bone Research, vol. 3, pp. 1-20, 2012.")


def _title_page(title_blocks: list[dict], *, header: list[dict] | None = None) -> dict:
    """Page 1: what the builder gives above, then the abstract, 'Introduction' and text."""
    blocks = list(header or [])
    blocks += title_blocks
    order = 1 + sum(1 for b in title_blocks if b["block_order"] is not None)
    blocks.append(blk("abstract", "We studied how bone heals through a cartilage template. " * 6,
                      (100, 520, 900, 700), order))
    blocks.append(blk("paragraph_title", "Introduction", (100, 730, 300, 760), order + 1))
    blocks.append(blk("text", para(1), (100, 770, 480, 1200), order + 2))
    blocks.append(blk("text", para(2), (520, 770, 900, 1200), order + 3))
    blocks.append(blk("number", "1", (480, 1340, 520, 1360), None))
    return page(blocks)


# --- the classes -----------------------------------------------------------------------------

def banner_title() -> list[dict]:
    """1. A journal banner labelled as the document title above the real title."""
    first = _title_page([
        blk("doc_title", "SCIENTIFIC REPORTS", (100, 40, 600, 90), 1),
        blk("doc_title", "Cartilage templates guide the healing of large bone defects", (100, 200, 900, 300), 2),
        blk("text", "Alice Smith $ ^{1} $, Bob Jones $ ^{2} $ & Carol White $ ^{1} $", (250, 320, 750, 350), 3),
    ])
    return result([first, _body_page(2, "Methods"), _body_page(3, "Results"),
                   _references_page(4, REFS)])


def repeated_preproof() -> list[dict]:
    """2. "Journal Pre-proof" labelled as a paragraph title on every few pages."""
    pre = [blk("paragraph_title", "Journal Pre-proof", (400, 70, 600, 95), 0)]
    first = _title_page([
        blk("doc_title", "Cartilage templates guide the healing of large bone defects", (100, 200, 900, 300), 1),
        blk("text", "Alice Smith, Bob Jones, Carol White", (250, 320, 750, 350), 2),
    ])
    pages = [first, _body_page(2, "2. Methods", extra_top=pre), _body_page(3, extra_top=pre),
             _body_page(4, "3. Results"), _body_page(5, extra_top=pre), _body_page(6, "4. Discussion", extra_top=pre),
             _references_page(7, REFS)]
    return result(pages)


def cover_page() -> list[dict]:
    """3. An accepted manuscript's cover page before the paper."""
    cover = page([
        blk("text", "Journal Pre-proof", (100, 100, 500, 150), 1),
        blk("text", "Cartilage templates guide the healing of large bone defects", (100, 200, 900, 240), 2),
        blk("text", "Alice Smith, Bob Jones, Carol White", (100, 260, 900, 290), 3),
        blk("text", "PII: S0142-9612(20)30001-1\nDOI: https://doi.org/10.1016/j.example.2020.100001\n"
                    "Reference: JBMT 100001", (100, 320, 900, 420), 4),
        blk("text", "To appear in: An Example Journal of Biomaterials", (100, 440, 900, 470), 5),
        blk("text", "Received Date: 1 May 2020\nRevised Date: 2 June 2020\nAccepted Date: 3 July 2020",
            (100, 490, 900, 580), 6),
        blk("text", "Please cite this article as: A. Smith, B. Jones, C. White, Cartilage templates guide the "
                    "healing of large bone defects, An Example Journal of Biomaterials (2020), "
                    "doi: https://doi.org/10.1016/j.example.2020.100001.", (100, 600, 900, 700), 7),
        blk("text", "This is a PDF file of an article that has undergone enhancements after acceptance, such as "
                    "the addition of a cover page and metadata, and formatting for readability, but it is not yet "
                    "the definitive version of record. This version will undergo additional copyediting, "
                    "typesetting and review before it is published in its final form, but we are providing this "
                    "version to give early visibility of the article.", (100, 720, 900, 860), 8),
    ])
    first = _title_page([
        blk("doc_title", "Cartilage templates guide the healing of large bone defects", (100, 200, 900, 300), 1),
        blk("text", "Alice Smith, Bob Jones, Carol White", (250, 320, 750, 350), 2),
    ], header=[blk("header", "Journal Pre-proof", (400, 40, 600, 60), None)])
    pages = [cover, first]
    for n in (3, 4):
        pages.append(_body_page(n, "Methods" if n == 3 else "Results", header="Journal Pre-proof"))
    pages.append(_references_page(5, REFS))
    return result(pages)


def figure_text() -> list[dict]:
    """4. Labels of a diagram inside a figure's area, as paragraph titles and text; the caption
    (labelled `text`) stands beside the figure, and the labels above the image box."""
    p2 = page([
        blk("number", "2", (100, 40, 140, 60), None),
        blk("header", "SMITH ET AL.", (700, 40, 900, 60), None),
        blk("text", "FIG. 1. Bone heals in three overlapping phases: inflammation, repair and remodelling. "
                    "Each phase is driven by its own cells and signals.", (100, 130, 300, 620), 1),
        blk("paragraph_title", "Phase I: Inflammatory\n1. Hematoma\nWeek (0-1)", (320, 110, 470, 170), 2),
        blk("text", "Damaged vessels and marrow form a hematoma along with an influx of inflammatory cells.",
            (320, 180, 470, 280), 3),
        blk("text", "Phase III: Remodeling\n3. Remodeled Bone\nWeek (8+)", (750, 110, 900, 170), 4),
        blk("image", "", (330, 300, 890, 640), None),
        blk("text", "Figure 1a shows the three phases; " + para(21), (100, 700, 480, 1100), 5),
        blk("text", para(22), (100, 1110, 480, 1300), 6),
        blk("text", para(23), (520, 700, 900, 1300), 7),
    ])
    first = _title_page([
        blk("doc_title", "Cartilage templates guide the healing of large bone defects", (100, 200, 900, 300), 1),
        blk("text", "Alice Smith, Bob Jones, Carol White", (250, 320, 750, 350), 2),
    ])
    return result([first, p2, _body_page(3, "Methods"), _references_page(4, REFS)])


def biographies() -> list[dict]:
    """5. Biographies after the references, labelled `reference_content`."""
    bios = [
        ("reference_content", "Alice Smith received her Ph.D. degree in bioengineering from the University of "
                              "Example in 2010. She is currently an associate professor of orthopaedics, and her "
                              "research interests include cartilage repair and bone regeneration."),
        ("reference_content", "Bob Jones is a professor of materials science at the Institute of Examples. He "
                              "works on hydrogels for tissue engineering and has led the biomaterials laboratory "
                              "since 2015."),
    ]
    first = _title_page([
        blk("doc_title", "Cartilage templates guide the healing of large bone defects", (100, 200, 900, 300), 1),
        blk("text", "Alice Smith, Bob Jones, Carol White", (250, 320, 750, 350), 2),
    ])
    refs = _references_page(4, REFS + [PROSE_REF], tail=bios)
    return result([first, _body_page(2, "Methods"), _body_page(3, "Results"), refs])


def front_notes() -> list[dict]:
    """6. Front-matter notes among the body: dates, keywords, equal contribution, correspondence,
    an affiliation block labelled `algorithm`, a highlights list; a correspondence address
    after the references."""
    first = _title_page([
        blk("doc_title", "Cartilage templates guide the healing of large bone defects", (100, 200, 900, 300), 1),
        blk("text", "Alice Smith $ ^{1} $, Bob Jones $ ^{2} $, Carol White $ ^{1} $", (250, 320, 750, 350), 2),
        blk("text", "Keywords: bone healing; cartilage template; endochondral ossification", (100, 360, 900, 390), 3),
        blk("text", "These authors contributed equally to this work.", (100, 400, 900, 420), 4),
        blk("text", "* Correspondence: alice.smith@example.edu", (100, 430, 900, 450), 5),
        blk("text", "Received: 1 May 2020; Accepted: 2 June 2020; Published: 3 July 2020", (100, 460, 900, 490), 6),
    ])
    affil = blk("algorithm", "B. Jones\nDepartment of Physics\nExample University\nSpringfield 12345, USA\n"
                             "C. White\nSchool of Medicine\nExample Hospital\nShelbyville 54321, USA",
                (100, 1120, 480, 1330), 10)
    p2 = _body_page(2, "Highlights")
    blocks = p2["prunedResult"]["parsing_res_list"]
    blocks[3]["block_content"] = "• Cartilage templates heal large defects.\n• Vessels invade from the periphery."
    blocks.append(affil)
    for i, b in enumerate(blocks):
        b["block_id"] = i
    tail = [("text", "Address correspondence to:\nAlice Smith, PhD\nDepartment of Bioengineering\n"
                     "Example University\n1 Campus Road, Springfield 12345, USA"),
            ("text", "E-mail: alice.smith@example.edu")]
    return result([first, p2, _body_page(3, "Methods"), _references_page(4, REFS, tail=tail)])


def keep_right() -> list[dict]:
    """7. What is already right stays right: a running header labelled `text` (caught by
    repetition), page footers like "2315279 (3 of 5)", a reference that reads like prose, a
    body sentence that starts with "Figure 1a shows"."""
    first = _title_page([
        blk("doc_title", "Cartilage templates guide the healing of large bone defects", (100, 200, 900, 300), 1),
        blk("text", "Alice Smith, Bob Jones, Carol White", (250, 320, 750, 350), 2),
    ])
    pages = [first]
    for n in (2, 3, 4):
        pg = _body_page(n, "Results" if n == 3 else None)
        blocks = pg["prunedResult"]["parsing_res_list"]
        blocks[0]["block_label"] = "text"  # the running header, mislabelled
        blocks[0]["block_content"] = "CARTILAGE TEMPLATES AND BONE HEALING"
        blocks.append(blk("footer", f"2315279 ({n} of 5)", (450, 1340, 560, 1360), None))
        if n == 2:
            blocks[3]["block_content"] = "Figure 1a shows the callus at three weeks. " + para(90)
        for i, b in enumerate(blocks):
            b["block_id"] = i
        pages.append(pg)
    pages.append(_references_page(5, REFS + [PROSE_REF]))
    return result(pages)


BUILDERS = {
    "banner_title": banner_title, "repeated_preproof": repeated_preproof, "cover_page": cover_page,
    "figure_text": figure_text, "biographies": biographies, "front_notes": front_notes,
    "keep_right": keep_right,
}


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=1) + "\n"


def write_all(folder: Path = FIXTURES) -> None:
    for name, build in BUILDERS.items():
        d = folder / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "result.json").write_text(dumps(build()), encoding="utf-8")


if __name__ == "__main__":
    write_all()
