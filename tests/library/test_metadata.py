"""Library metadata from Better BibTeX JSON and CSL-JSON exports."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sheaf.core.models import valid_paper_key
from sheaf.library.metadata import load_library_metadata, load_metadata_file, load_metadata_files
from sheaf.store.sqlite import reader as rd
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite import writer as wr

BULK = "zotero/bbt_zotero_library_bulk_1241items.json"


@pytest.mark.realdata
def test_bulk_export_loads(shared_data):
    got = load_metadata_file(shared_data / BULK)
    assert len(got.papers) == 1241 and got.warnings == ()
    assert len({p.key for p in got.papers}) == 1241
    assert all(valid_paper_key(p.key) for p in got.papers)
    by = got.by_key()
    first = by["10"]  # no Zotero key in this export: the item id is the key
    assert first.title == "Fremtidens bedre byrum - visioner og drømme"
    assert first.authors == ("Jan Gehl", "Stig L. Andersson") and first.first_author == "Jan Gehl"
    assert first.year == 2003 and first.domain == "bbt_zotero_library_bulk_1241items"
    assert by["Serres2007Parasite"].citation_key == "Serres2007Parasite"
    assert sum(p.year is not None for p in got.papers) >= 1180
    assert sum(p.journal is not None for p in got.papers) >= 500
    assert sum(p.doi is not None for p in got.papers) >= 80
    assert sum(p.abstract is not None for p in got.papers) >= 300


@pytest.mark.realdata
def test_malformed_items_named_and_skipped(shared_data, tmp_path):
    data = json.loads((shared_data / BULK).read_text())
    n_good = len(data["items"])
    data["items"] += [
        "not an object",
        {"itemID": 90001, "itemType": "journalArticle", "title": "Bad creators", "creators": "Smith"},
        {"itemID": 90002, "itemType": "journalArticle", "title": ["a", "list"]},
        {"key": "ABC/../x", "itemType": "book", "title": "Path key"},
        {"itemType": "book", "title": "No key at all"},
        {"itemID": 90003, "itemType": "book", "title": "Bad person", "creators": [{"lastName": 5}]},
        {"itemID": 90004, "itemType": "attachment", "title": "PDF"},
        {"itemID": 90005, "itemType": "note", "note": "<p>x</p>"},
        {"itemID": 90006, "itemType": "annotation"},
        {"itemID": 10, "itemType": "book", "title": "Duplicate of item 10"},
    ]
    f = tmp_path / "exports" / "urban.json"
    f.parent.mkdir()
    f.write_text(json.dumps(data))
    got = load_metadata_file(f)
    assert len(got.papers) == n_good
    assert got.skipped_non_papers == 3
    text = "\n".join(map(str, got.warnings))
    for needle in ("item #1241", "item 90001", "item 90002", "ABC/../x", "#1245", "item 90003",
                   "item 10: duplicate"):
        assert needle in text, (needle, text)
    assert len(got.warnings) == 7
    assert all(w.source == str(f) for w in got.warnings)
    assert {p.domain for p in got.papers} == {"urban"}


@pytest.mark.realdata
def test_csl_and_bbt_of_the_same_library_agree(shared_data):
    csl = load_metadata_file(shared_data / "zotero/bbt_csl_26items.csl.json")
    bbt = load_metadata_file(shared_data / "zotero/bbt_zotero_26items.json")
    assert len(csl.papers) == len(bbt.papers) == 26 and not csl.warnings and not bbt.warnings
    assert csl.papers[0].domain == "bbt_csl_26items"
    assert {p.title for p in csl.papers} == {p.title for p in bbt.papers}
    assert {p.doi for p in csl.papers} == {p.doi for p in bbt.papers}
    assert {(p.title, p.year) for p in csl.papers} == {(p.title, p.year) for p in bbt.papers}
    assert {(p.title, p.first_author) for p in csl.papers} == {(p.title, p.first_author) for p in bbt.papers}
    assert all(p.key == p.citation_key for p in csl.papers)


@pytest.mark.realdata
def test_bulk_export_into_the_index(shared_data, tmp_path):
    got = load_metadata_file(shared_data / BULK)
    conn = ix.open_index(tmp_path / "sheaf.db")
    assert wr.upsert_papers(conn, got.papers)["inserted"] == 1241
    assert wr.upsert_papers(conn, got.papers)["unchanged"] == 1241
    assert rd.counts(conn)["papers"] == rd.counts(conn)["papers_fts"] == 1241
    hits = rd.search_text(conn, "Latour", "papers", limit=100)
    assert hits and all("Latour" in " ".join(rd.get_paper(conn, h.ref).authors) or
                        "Latour" in (rd.get_paper(conn, h.ref).title or "") or
                        "Latour" in (rd.get_paper(conn, h.ref).abstract or "") for h in hits)
    conn.close()


def _bbt(items, collections=None):
    d = {"config": {"label": "BetterBibTeX JSON"}, "items": items}
    if collections is not None:
        d["collections"] = collections
    return d


def test_bbt_fields_and_collections(tmp_path):
    vault = tmp_path / "vault"
    exports = vault / "System/PaperForge/exports"
    exports.mkdir(parents=True)
    (exports / "bone.json").write_text(json.dumps(_bbt(
        [{"key": "37LK5T97", "itemID": 1, "itemType": "journalArticle", "citationKey": "dennis2015",
          "title": "Endochondral ossification", "date": "2015-03",
          "creators": [{"creatorType": "editor", "lastName": "Ed", "firstName": "E."},
                       {"creatorType": "author", "lastName": "Dennis", "firstName": "S. C."},
                       {"creatorType": "author", "name": "The Bone Consortium"}],
          "publicationTitle": "Tissue Engineering Part B", "DOI": "https://doi.org/10.1089/ten.teb.2014.0419",
          "extra": "PMID: 25178722\nPMCID: PMC123", "abstractNote": "Bone.", "collections": ["C2"],
          "attachments": [{"path": "x.pdf"}], "notes": ["n"]},
         {"itemKey": "ZZZZ0001", "itemType": "bookSection", "title": "A chapter", "bookTitle": "The Book",
          "date": "circa 1999", "extra": "DOI: 10.1000/abc.def."},
         {"key": "NOTE0001", "itemType": "note", "note": "x"}],
        {"C1": {"name": "Bone", "parent": False, "items": []},
         "C2": {"name": "Reviews", "parent": "C1", "items": ["ZZZZ0001"]}})))
    (exports / "neuro.json").write_text(json.dumps(
        [{"id": "http://zotero.org/users/1/items/NEURO001", "type": "article-journal",
          "title": "Synapses", "author": [{"family": "Lee", "given": "K."}, {"literal": "Neuro Group"}],
          "issued": {"date-parts": [["2021", 5]]}, "container-title": "Neuron", "PMID": "999",
          "abstract": "SPG302."}]))
    got = load_library_metadata(vault)
    assert not got.warnings and got.skipped_non_papers == 1
    by = got.by_key()
    a = by["37LK5T97"]
    assert (a.citation_key, a.year, a.journal, a.doi, a.pmid) == (
        "dennis2015", 2015, "Tissue Engineering Part B", "10.1089/ten.teb.2014.0419", "25178722")
    assert a.authors == ("S. C. Dennis", "The Bone Consortium") and a.first_author == "S. C. Dennis"
    assert a.collections == ("Bone/Reviews",) and a.domain == "bone"
    b = by["ZZZZ0001"]
    assert (b.journal, b.year, b.doi, b.collections, b.authors) == (
        "The Book", 1999, "10.1000/abc.def", ("Bone/Reviews",), ())
    n = by["NEURO001"]
    assert (n.domain, n.year, n.journal, n.pmid, n.authors) == ("neuro", 2021, "Neuron", "999",
                                                                ("K. Lee", "Neuro Group"))


def test_unreadable_files_warn_not_raise(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    odd = tmp_path / "odd.json"
    odd.write_text('"a string"')
    got = load_metadata_files([bad, odd, tmp_path / "missing.json"])
    assert got.papers == () and len(got.warnings) == 3
    assert load_library_metadata(tmp_path).papers == ()


def test_plain_library_json_has_no_domain(tmp_path):
    (tmp_path / "library.json").write_text(json.dumps([{"id": "smith2020", "type": "book", "title": "T"}]))
    got = load_library_metadata(tmp_path)
    assert [p.key for p in got.papers] == ["smith2020"] and got.papers[0].domain is None


def test_duplicate_keys_across_exports_keep_first(tmp_path):
    for name, title in (("a.json", "First"), ("b.json", "Second")):
        (tmp_path / name).write_text(json.dumps(_bbt([{"key": "K1", "itemType": "book", "title": title}])))
    got = load_metadata_files(sorted(tmp_path.glob("*.json")))
    assert [p.title for p in got.papers] == ["First"]
    assert "kept the first" in str(got.warnings[0]) and "K1" in str(got.warnings[0])


def test_default_domain_is_file_stem(tmp_path):
    p = tmp_path / "Neuro Science.json"
    p.write_text(json.dumps(_bbt([{"key": "K1", "itemType": "book", "title": "x"}])))
    assert load_metadata_file(p).papers[0].domain == "Neuro Science"
    assert load_metadata_file(p, domain=None).papers[0].domain is None
    assert isinstance(Path(load_metadata_file(p).papers[0].source), Path)


@pytest.mark.realdata
def test_loading_some_keys_gives_their_records_exactly(shared_data, tmp_path):
    """One paper's step reads only its own records (`keys`): the same records as a full load,
    from a Better BibTeX export and from a CSL-JSON one; keys it lacks give nothing."""
    full = load_metadata_file(shared_data / BULK)
    some = [p.key for p in full.papers[::97]] + ["NOSUCHKEY"]
    got = load_metadata_file(shared_data / BULK, keys=some)
    assert got.by_key() == {k: v for k, v in full.by_key().items() if k in some}
    csl = [{"id": f"http://zotero.org/users/1/items/K{i:07d}", "type": "article-journal", "title": f"T{i}",
            "author": [{"family": f"F{i}", "given": "G"}], "issued": {"date-parts": [[2000 + i % 20]]}}
           for i in range(300)] + [{"id": "K9999999", "citation-key": "cite9", "type": "book", "title": "B"}]
    (tmp_path / "lib.json").write_text(json.dumps(csl))
    full = load_metadata_file(tmp_path / "lib.json")
    want = ["K0000007", "K0000299", "K9999999"]
    assert load_metadata_file(tmp_path / "lib.json", keys=want).by_key() == \
        {k: v for k, v in full.by_key().items() if k in want}
    assert load_metadata_file(tmp_path / "lib.json", keys=[]).papers == ()
