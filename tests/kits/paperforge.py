"""A PaperForge vault made from ../shared's real OCR outputs and Zotero export, for the plugin's tests
and the polling benchmark."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.kits.paths import SHARED_DATA

KEYS = ("37LK5T97", "5MAW65YD", "8CCATQE3", "VAMSAZMG")


def make_vault(dest: Path) -> Path:
    """A PaperForge vault: the OCR outputs where PaperForge keeps them, the real 26-item export
    with the four papers' Zotero records added (from their source_metadata.json), a note each."""
    export = json.loads((SHARED_DATA / "zotero" / "bbt_zotero_26items.json").read_text(encoding="utf-8"))
    notes = dest / "Literature" / "tissue-engineering"
    notes.mkdir(parents=True)
    for key in KEYS:
        src = SHARED_DATA / "paddleocr_vl" / key
        ocr = dest / "System" / "PaperForge" / "ocr" / key / "json"
        ocr.mkdir(parents=True)
        shutil.copyfile(src / "result.json", ocr / "result.json")
        meta = json.loads((src / "source_metadata.json").read_text(encoding="utf-8"))
        names = [a.rsplit(" ", 1) for a in meta.get("authors", [])]
        export["items"].append({
            "key": key, "itemType": "journalArticle", "title": meta["title"], "date": str(meta.get("year", "")),
            "publicationTitle": meta.get("journal", ""), "DOI": meta.get("doi", ""),
            "abstractNote": f"Abstract of {meta['title']}",
            "creators": [{"creatorType": "author", "firstName": n[0], "lastName": n[-1]} for n in names]})
        (notes / f"{key} note.md").write_text(f"---\nzotero_key: {key}\n---\n\n# Notes\n", encoding="utf-8")
    exports = dest / "System" / "PaperForge" / "exports"
    exports.mkdir(parents=True)
    (exports / "tissue-engineering.json").write_text(json.dumps(export), encoding="utf-8")
    return dest
