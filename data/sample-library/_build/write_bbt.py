"""`library.json`: a Better BibTeX JSON export describing the sample papers.

Shaped like a Zotero 7 / Better BibTeX 7 "BetterBibTeX JSON" export with notes: a `config`
header, `version`, a `collections` map (key → name, parent, child collections, itemIDs) and
`items`. Regular items carry `itemKey` (= the paper folder name), `citationKey`, `uri`,
`select`, metadata fields, `tags`, `collections`, `notes` and `attachments`. As in real
exports, a standalone attachment keeps only the attachment fields (its key is only in
`uri`/`select`), and a standalone note is exported as an item of type `note`.
"""
from __future__ import annotations

import hashlib
import json

from model import Paper

USER = "http://zotero.org/users/local/sHf7Qm2X"
STORAGE = "/home/researcher/Zotero/storage"
KEYCHARS = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"

COLLECTIONS = {  # name → (key, parent name)
    "Sheaf sample library": ("K7QW3MZA", None),
    "Materials": ("C4MQTS8Z", "Sheaf sample library"),
    "Clinical medicine": ("C5KLNV2R", "Sheaf sample library"),
    "Language technology": ("C6NLPX3T", "Sheaf sample library"),
    "Ecology": ("C7ECGL9W", "Sheaf sample library"),
    "Neuroscience": ("C8NRVZ4E", "Sheaf sample library"),
    "Earth sciences": ("C9ERTH5S", "Ecology"),
    "Epidemiology": ("C3EPDM6Y", "Clinical medicine"),
    "Statistics": ("C2STAT7Q", "Sheaf sample library"),
}


def zkey(seed: str) -> str:
    """A deterministic Zotero-style key (8 characters of Zotero's key alphabet)."""
    h = hashlib.sha256(seed.encode()).digest()
    return "".join(KEYCHARS[b % len(KEYCHARS)] for b in h[:8])


def _stamp(n: int, minute: int = 0) -> str:
    day = 1 + n % 27
    month = 1 + (n * 5) % 12
    return f"2024-{month:02d}-{day:02d}T{8 + n % 9:02d}:{(17 * n + minute) % 60:02d}:{(31 * n) % 60:02d}Z"


def _date(p: Paper, i: int) -> str:
    """Zotero keeps the date as entered; vary the forms as real libraries do."""
    y, m, d = p.date.split("-")
    months = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
              "October", "November", "December"]
    form = i % 4
    if form == 0:
        return p.date
    if form == 1:
        return f"{months[int(m) - 1]} {int(d)}, {y}"
    if form == 2:
        return f"{y}-{m}"
    return y


def _attachment(p: Paper, i: int) -> dict:
    akey = zkey(p.key + ":pdf")
    first = p.authors[0][1]
    others = " et al." if len(p.authors) > 2 else (f" and {p.authors[1][1]}" if len(p.authors) == 2 else "")
    short = p.title.split(":")[0][:80].rstrip()
    fname = f"{first}{others} - {p.year} - {short}.pdf".replace("/", "-")
    return {"itemType": "attachment", "title": "Full Text PDF", "path": f"{STORAGE}/{akey}/{fname}",
            "uri": f"{USER}/items/{akey}", "select": f"zotero://select/library/items/{akey}",
            "dateAdded": _stamp(i, 1), "dateModified": _stamp(i, 1), "relations": [], "tags": [],
            "mimeType": "application/pdf"}


def item(p: Paper, i: int, item_id: int) -> dict:
    coll_keys = [COLLECTIONS[c][0] for c in p.collections]
    it: dict = {
        "itemID": item_id,
        "itemKey": p.key,
        "key": p.key,
        "libraryID": 1,
        "version": 100 + 7 * i,
        "uri": f"{USER}/items/{p.key}",
        "select": f"zotero://select/library/items/{p.key}",
        "citationKey": p.citation_key,
        "itemType": p.item_type,
        "title": p.title,
        "creators": [{"creatorType": "author", "firstName": g, "lastName": f} for g, f in p.authors],
        "date": _date(p, i),
        "abstractNote": p.abstract,
        "language": p.language,
        "libraryCatalog": "Sheaf sample library",
        "extra": "Synthetic article written for the Sheaf sample library; not a real publication.",
    }
    if p.item_type == "conferencePaper":
        it["proceedingsTitle"] = p.journal
        it["conferenceName"] = p.journal.replace("Proceedings of the ", "")
        it["publisher"] = "Sheaf Sample Press"
    else:
        it["publicationTitle"] = p.journal
        if p.journal_abbr:
            it["journalAbbreviation"] = p.journal_abbr
        if p.volume:
            it["volume"] = p.volume
        if p.issue:
            it["issue"] = p.issue
    if p.pages:
        it["pages"] = p.pages
    if p.doi:
        it["DOI"] = p.doi
        it["url"] = f"https://doi.org/{p.doi}"
        it["accessDate"] = _stamp(i, 3)
    it["dateAdded"] = _stamp(i)
    it["dateModified"] = _stamp(i, 9)
    it["tags"] = [{"tag": t} for t in p.tags] + [{"tag": k, "type": 1} for k in p.keywords[:3]]
    it["collections"] = coll_keys
    it["relations"] = []
    att = zkey(p.key + ":pdf")
    it["notes"] = [n.replace("{att}", att) for n in p.extra_notes]
    it["attachments"] = [_attachment(p, i)]
    return it


def write(papers: list[Paper]) -> bytes:
    items = []
    members: dict[str, list[int]] = {name: [] for name in COLLECTIONS}
    for i, p in enumerate(papers):
        item_id = 11 + 3 * i
        items.append(item(p, i, item_id))
        for c in p.collections:
            members[c].append(item_id)

    # a standalone attachment (a scanned protocol with no parent item): only attachment fields
    akey = "9XW2K7HA"
    items.append({
        "itemType": "attachment",
        "title": "Lab protocol scan 2019-03 (SPS furnace calibration).pdf",
        "path": f"{STORAGE}/{akey}/Lab protocol scan 2019-03 (SPS furnace calibration).pdf",
        "uri": f"{USER}/items/{akey}",
        "select": f"zotero://select/library/items/{akey}",
        "dateAdded": "2024-02-03T10:41:07Z",
        "dateModified": "2024-02-03T10:41:07Z",
        "relations": [],
        "tags": [{"tag": "unfiled"}],
        "mimeType": "application/pdf",
    })
    # a standalone note
    nkey = "N5J8Q3VD"
    items.append({
        "itemID": 97,
        "itemKey": nkey,
        "key": nkey,
        "libraryID": 1,
        "version": 188,
        "uri": f"{USER}/items/{nkey}",
        "select": f"zotero://select/library/items/{nkey}",
        "itemType": "note",
        "note": ("<div data-schema-version=\"9\"><h1>Reading list: creep and shrinkage</h1>"
                 "<p>Compare the yttrium saturation argument (Müller et al. 2021) with the way "
                 "heavy-tailed priors stop shrinking outliers (Åkesson et al. 2023): both are about "
                 "how much of a signal survives pooling.</p></div>"),
        "tags": [],
        "collections": [COLLECTIONS["Sheaf sample library"][0]],
        "relations": [],
        "dateAdded": "2024-03-18T16:22:51Z",
        "dateModified": "2024-03-19T08:05:12Z",
    })
    members["Sheaf sample library"].append(97)

    collections = {}
    for name, (key, parent) in COLLECTIONS.items():
        c = {"key": key, "name": name,
             "collections": [k for n, (k, par) in COLLECTIONS.items() if par == name],
             "items": members[name]}
        if parent:
            c["parent"] = COLLECTIONS[parent][0]
        collections[key] = c

    data = {
        "config": {
            "id": "36a3b0b5-bad0-4a04-b79b-441c7cef77db",
            "label": "BetterBibTeX JSON",
            "localeDateOrder": "ymd",
            "preferences": {
                "citekeyFormat": "auth.lower + shorttitle(3,3) + year",
                "skipFields": "",
                "bibtexURL": "url",
                "keyConflictPolicy": "change",
            },
            "options": {"exportNotes": True, "Items": True, "Preferences": True},
        },
        "version": {"zotero": "7.0.15", "bbt": "7.0.29"},
        "collections": collections,
        "items": items,
    }
    return (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
