"""Reading a Zotero data directory (no Dagster): the three real ones in ../shared, and copies
changed the way Zotero changes them (WAL under an exclusive lock, a hot journal, a group
library, linked files, several PDFs, the trash), plus databases that cannot be read."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sheaf.core.envelope import SheafError
from sheaf.core.models import IngestError
from sheaf.formats import parse_paper, source_hash
from sheaf.library.discover import discover
from sheaf.library.metadata import export_files_metadata
from sheaf.library.zotero import base_dir_from_prefs, html_to_text, read_catalog
from tests.kits.zotero import ZOTERO_DIRS, ZoteroDb, copy_zotero_dir, tree_state

pytestmark = pytest.mark.realdata

SAN7O, FRANZI, PTHEMIS = ZOTERO_DIRS[1], ZOTERO_DIRS[0], ZOTERO_DIRS[2]


@pytest.fixture
def san7o(shared_data, tmp_path) -> Path:
    return copy_zotero_dir(shared_data, SAN7O, tmp_path / "zotero")


def _disc(lib: Path, mirror: Path, **kw):
    return discover(lib, mirror=mirror, **kw)


def _pdf(shared_data: Path) -> Path:
    return next((shared_data / "zotero_dirs" / SAN7O / "storage").rglob("Dean and Ghemawat*.pdf"))


# --- the real directories ------------------------------------------------------------------------

@pytest.mark.parametrize("name, papers, metadata_only", [(FRANZI, 27, 10), (SAN7O, 15, 1), (PTHEMIS, 7, 187)])
def test_every_live_item_of_a_real_directory_is_listed_and_the_directory_is_untouched(
        shared_data, tmp_path, name, papers, metadata_only):
    src = shared_data / "zotero_dirs" / name
    before = tree_state(src)
    d = _disc(src, tmp_path / "mirror")
    assert d.layout == "zotero"
    assert (len(d.papers), len(d.metadata_only)) == (papers, metadata_only)
    # every live regular item (the README's counts) is either a paper or metadata only
    con = sqlite3.connect(f"file:{src / 'zotero.sqlite'}?mode=ro", uri=True)
    live = {k for (k,) in con.execute(
        "SELECT i.key FROM items i JOIN itemTypesCombined t USING (itemTypeID) WHERE t.typeName NOT IN "
        "('attachment', 'note', 'annotation') AND i.itemID NOT IN (SELECT itemID FROM deletedItems)")}
    con.close()
    listed = {p.key for p in d.papers} | {k for k, _ in d.metadata_only}
    assert live <= listed
    assert tree_state(src) == before


def test_trash_is_excluded_with_the_attachments_of_trashed_parents(shared_data, tmp_path):
    src = shared_data / "zotero_dirs" / SAN7O
    con = sqlite3.connect(f"file:{src / 'zotero.sqlite'}?mode=ro", uri=True)
    trashed = {k for (k,) in con.execute("SELECT key FROM items WHERE itemID IN (SELECT itemID FROM deletedItems)")}
    orphans = {k for (k,) in con.execute(
        "SELECT i.key FROM itemAttachments a JOIN items i ON i.itemID = a.itemID WHERE a.parentItemID IN "
        "(SELECT itemID FROM deletedItems) AND a.itemID NOT IN (SELECT itemID FROM deletedItems)")}
    con.close()
    assert trashed and orphans  # the directory's own quirk: a trashed item whose attachment is not
    d = _disc(src, tmp_path / "m")
    keys = {p.key for p in d.papers} | {k for k, _ in d.metadata_only}
    assert not keys & (trashed | orphans)
    # the standalone PDF is a paper of its own, keyed by its attachment key
    assert "Y82DIS32" in keys


def test_titles_creators_and_collections_as_zotero_shows_them(shared_data, tmp_path):
    d = _disc(shared_data / "zotero_dirs" / SAN7O, tmp_path / "m")
    meta = export_files_metadata(d.metadata_files).by_key()
    mr = meta["YDQMNNXT"]
    assert mr.title == "MapReduce: simplified data processing on large clusters"
    assert mr.authors == ("Jeffrey Dean", "Sanjay Ghemawat") and mr.year == 2008
    assert all(m.collections == () or all(c for c in m.collections) for m in meta.values())
    nested = [c for m in meta.values() for c in m.collections if "/" in c]
    assert nested  # two levels of collections, as paths
    # Zotero 5's database: dates stored as "2020-09-00 2020-09" give the year
    f = _disc(shared_data / "zotero_dirs" / FRANZI, tmp_path / "m2")
    years = [m.year for m in export_files_metadata(f.metadata_files).papers]
    assert sum(y is not None for y in years) == len(years) - 4  # 4 items have no date


def test_annotations_and_notes_are_blocks_of_their_own_roles_on_their_pages(shared_data, tmp_path):
    d = _disc(shared_data / "zotero_dirs" / SAN7O, tmp_path / "m")
    p = parse_paper({x.key: x.path for x in d.papers}["YDQMNNXT"], "YDQMNNXT")
    ann = [b for b in p.blocks if b.role == "annotation"]
    assert [b.page for b in ann] == [1, 2]
    assert ann[0].text.startswith("Our abstraction is inspired by the map and reduce primitives")
    assert any(b.role == "heading" and b.text == "Zotero annotations" for b in p.blocks)


def test_a_missing_pdf_falls_back_to_zoteros_extracted_text_and_says_so(shared_data, tmp_path):
    d = _disc(shared_data / "zotero_dirs" / SAN7O, tmp_path / "m")
    p = parse_paper({x.key: x.path for x in d.papers}["8BVV9WNM"], "8BVV9WNM")
    assert any(".zotero-ft-cache" in w and "file missing" in w for w in p.warnings)
    assert all(".zotero-ft-cache" in (b.role_reason or "") for b in p.blocks if b.role == "body")


def test_an_empty_ft_cache_with_no_file_is_metadata_only_with_the_reason(shared_data, tmp_path):
    d = _disc(shared_data / "zotero_dirs" / FRANZI, tmp_path / "m")
    why = dict(d.metadata_only)
    assert "file missing from storage/LTLTQ9HS/" in why["WFCWIVXK"] and ".zotero-ft-cache is empty" in why["WFCWIVXK"]
    assert why["ES9F32AU"] == "no attachment: metadata only"


def test_an_unreadable_storage_folder_leaves_its_paper_metadata_only_with_the_reason(san7o, tmp_path):
    """A paper whose storage/<key>/ cannot be read (here a loop of links: the tests run as root,
    whom no permission bit stops) is metadata only, the reason naming the file and the system's
    error; the other papers are read as before and nothing is raised."""
    before = {p.key for p in _disc(san7o, tmp_path / "m0").papers}
    one = next(p for p in read_catalog(san7o).papers if not p.annotations and not p.notes
               and len(p.attachments) == 1 and p.attachments[0].file and p.attachments[0].storage_dir)
    folder = Path(one.attachments[0].storage_dir)
    shutil.rmtree(folder)
    folder.symlink_to(folder)  # every access: ELOOP
    d = _disc(san7o, tmp_path / "m1")
    why = dict(d.metadata_only)
    assert one.key in why and one.key not in {p.key for p in d.papers}
    assert f"{one.attachments[0].key}: file cannot be read (Too many levels of symbolic links)" in why[one.key]
    assert "cannot be read" in why[one.key].split(".zotero-ft-cache", 1)[1]
    assert {p.key for p in d.papers} == before - {one.key}


def test_a_scanned_pdf_with_no_ft_cache_text_fails_with_a_plain_reason(shared_data, tmp_path):
    d = _disc(shared_data / "zotero_dirs" / FRANZI, tmp_path / "m")
    with pytest.raises(IngestError, match="no text layer"):
        parse_paper({x.key: x.path for x in d.papers}["NAXPF7LZ"], "NAXPF7LZ")


def test_html_notes_become_text():
    assert html_to_text("<div><p>First <b>bold</b></p><p>Second&amp;third</p></div>") == "First bold\nSecond&third"


# --- copies changed as Zotero changes them --------------------------------------------------------

def test_zotero_10_wal_under_an_exclusive_lock_is_read_with_its_latest_writes(san7o, tmp_path):
    """Zotero 10 keeps the database in WAL mode under an exclusive lock: `mode=ro` fails with
    "database is locked" and `immutable=1` misses what is still in the WAL; the snapshot sees it."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sqlite3, sys
        c = sqlite3.connect({str(san7o / 'zotero.sqlite')!r}, isolation_level=None)
        c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA wal_autocheckpoint=0")
        c.execute("PRAGMA locking_mode=EXCLUSIVE")
        vid = c.execute("SELECT valueID FROM itemData d JOIN fieldsCombined f USING (fieldID) JOIN items i "
                        "USING (itemID) WHERE f.fieldName = 'title' AND i.key = 'YDQMNNXT'").fetchone()[0]
        c.execute("UPDATE itemDataValues SET value = 'MapReduce, renamed in Zotero' WHERE valueID = ?", (vid,))
        c.execute("BEGIN EXCLUSIVE"); c.execute("COMMIT")  # takes and keeps the exclusive lock
        print("ready", flush=True); sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert (san7o / "zotero.sqlite-wal").stat().st_size > 0
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            sqlite3.connect(f"file:{san7o / 'zotero.sqlite'}?mode=ro", uri=True).execute("SELECT count(*) FROM items").fetchone()
        before = tree_state(san7o)
        d = _disc(san7o, tmp_path / "m")
        meta = export_files_metadata(d.metadata_files).by_key()
        assert meta["YDQMNNXT"].title == "MapReduce, renamed in Zotero"
        assert tree_state(san7o) == before
    finally:
        holder.stdin.close()
        holder.wait(10)


def test_a_hot_rollback_journal_is_rolled_back_in_the_copy_not_in_zoteros_file(san7o, tmp_path):
    """Zotero ≤ 9 mid-transaction: the database file holds uncommitted pages and a hot journal lies
    beside it. The snapshot reads the last committed state; the user's files stay as they are."""
    subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, sqlite3
        c = sqlite3.connect({str(san7o / 'zotero.sqlite')!r}, isolation_level=None)
        c.execute("PRAGMA journal_mode=DELETE"); c.execute("PRAGMA cache_size=1")
        c.execute("BEGIN")
        c.execute("UPDATE itemDataValues SET value = 'uncommitted ' || value")
        c.execute("INSERT INTO itemDataValues (value) SELECT 'pad' || itemID || zeroblob(20000) FROM items")
        os._exit(0)  # killed mid-transaction: the pages spilled to the file, the journal is hot
    """)], check=True)
    journal = san7o / "zotero.sqlite-journal"
    assert journal.stat().st_size > 0
    before = tree_state(san7o)
    d = _disc(san7o, tmp_path / "m")
    titles = [m.title for m in export_files_metadata(d.metadata_files).papers]
    assert titles and not any(t.startswith("uncommitted") for t in titles)
    assert tree_state(san7o) == before


def test_a_group_library_items_are_keyed_apart_and_can_be_left_out(san7o, shared_data, tmp_path):
    with ZoteroDb(san7o) as z:
        lib = z.add_group(4711, "Lab Papers")
        iid = z.add_item("YDQMNNXT", "A group copy of MapReduce", library_id=lib)  # same key as a user item
        z.add_pdf(iid, "GRPPDF01", _pdf(shared_data), library_id=lib)
    d = _disc(san7o, tmp_path / "m")
    assert {"YDQMNNXT", "g4711_YDQMNNXT"} <= {p.key for p in d.papers}
    meta = export_files_metadata(d.metadata_files).by_key()
    assert meta["g4711_YDQMNNXT"].title == "A group copy of MapReduce"
    only_user = _disc(san7o, tmp_path / "m2", zotero_libraries="user")
    assert "g4711_YDQMNNXT" not in {p.key for p in only_user.papers}
    only_group = _disc(san7o, tmp_path / "m3", zotero_libraries="Lab Papers")
    assert [p.key for p in only_group.papers] == ["g4711_YDQMNNXT"]


def test_a_linked_file_through_the_base_directory(san7o, shared_data, tmp_path):
    base = tmp_path / "papers"
    (base / "sub").mkdir(parents=True)
    (base / "sub" / "mr.pdf").write_bytes(_pdf(shared_data).read_bytes())
    with ZoteroDb(san7o) as z:
        iid = z.add_item("LINKED01", "A linked MapReduce")
        z.add_pdf(iid, "LINKATT1", Path("unused"), linked="attachments:sub/mr.pdf")
    unknown = _disc(san7o, tmp_path / "m")
    assert "SHEAF_ZOTERO_BASE_DIR" in dict(unknown.metadata_only)["LINKED01"]
    d = _disc(san7o, tmp_path / "m2", zotero_base_dir=base)
    p = parse_paper({x.key: x.path for x in d.papers}["LINKED01"], "LINKED01")
    assert any("MapReduce" in b.text for b in p.blocks)
    # Zotero's prefs.js names the base directory of the profile whose data directory this is
    prof = tmp_path / "profile"
    prof.mkdir()
    (prof / "prefs.js").write_text(f'user_pref("extensions.zotero.dataDir", "{san7o}");\n'
                                   f'user_pref("extensions.zotero.baseAttachmentPath", "{base}");\n')
    assert base_dir_from_prefs(san7o, [prof]) == base
    assert base_dir_from_prefs(tmp_path, [prof]) is None


def test_an_item_with_two_pdfs_keeps_both_each_under_its_name(san7o, shared_data, tmp_path):
    gfs = next((shared_data / "zotero_dirs" / SAN7O / "storage").rglob("*Google file system*.pdf"), None) or \
        next(p for p in (shared_data / "zotero_dirs" / SAN7O / "storage").rglob("*.pdf") if "Dean" not in p.name)
    with ZoteroDb(san7o) as z:
        iid = z.add_item("TWOPDFS1", "Article with supplement")
        z.add_pdf(iid, "ARTICLE1", _pdf(shared_data), title="Article")
        z.add_pdf(iid, "SUPPLEM1", gfs, title="Supplement")
    d = _disc(san7o, tmp_path / "m")
    p = parse_paper({x.key: x.path for x in d.papers}["TWOPDFS1"], "TWOPDFS1")
    tops = [b.text for b in p.blocks if b.role == "heading" and b.heading_level == 1]
    assert tops[:2] == ["Article", "Supplement"]
    assert len({b.block_id for b in p.blocks}) == len(p.blocks)
    assert all(b.heading_level >= 2 for b in p.blocks if b.role == "heading" and b.text not in tops[:2])


def test_each_change_moves_only_its_papers_source(san7o, shared_data, tmp_path):
    """A title edit moves metadata only; a PDF added, a PDF deleted, a note added, an item
    trashed or restored move exactly that paper."""
    mirror = tmp_path / "m"

    def sources():
        d = _disc(san7o, mirror)
        return {p.key: p.path.read_bytes() for p in d.papers}, dict(d.metadata_only), export_files_metadata(d.metadata_files).by_key()

    s0, mo0, meta0 = sources()
    with ZoteroDb(san7o) as z:
        z.set_field(z.item_id("YDQMNNXT"), "title", "MapReduce (edited)")
    s1, _, meta1 = sources()
    assert s1 == s0 and meta1["YDQMNNXT"].title == "MapReduce (edited)"
    with ZoteroDb(san7o) as z:  # a PDF attached later to the metadata-only item
        z.add_pdf(z.item_id("QYKJ596D"), "LATERPDF", _pdf(shared_data))
    s2, mo2, _ = sources()
    assert set(s2) - set(s1) == {"QYKJ596D"} and "QYKJ596D" not in mo2
    assert {k: v for k, v in s2.items() if k != "QYKJ596D"} == s1
    (san7o / "storage" / "LATERPDF" / _pdf(shared_data).name).unlink()  # the PDF deleted on disk
    s3, mo3, _ = sources()
    assert "QYKJ596D" in mo3 and s3 == s1
    with ZoteroDb(san7o) as z:
        z.add_note(z.item_id("NLS4LGVR"), "NOTE0001", "<p>Consensus is impossible with one faulty process</p>")
    s4, _, _ = sources()
    assert {k for k in s4 if s4[k] != s1.get(k)} == {"NLS4LGVR"}
    with ZoteroDb(san7o) as z:
        z.trash(z.item_id("NLS4LGVR"))
    s5, _, _ = sources()
    assert set(s4) - set(s5) == {"NLS4LGVR"}
    with ZoteroDb(san7o) as z:
        z.restore(z.item_id("NLS4LGVR"))
    s6, _, _ = sources()
    assert s6 == s4


def test_an_unchanged_database_is_not_read_again_and_unchanged_files_not_rehashed(san7o, tmp_path, monkeypatch):
    import sheaf.library.zotero_mirror as zm

    mirror = tmp_path / "m"
    _disc(san7o, mirror)
    calls = []
    monkeypatch.setattr(zm, "read_catalog", lambda *a, **k: calls.append(1))
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda f, *a, **k: (opened.append(str(f)), real_open(f, *a, **k))[1])
    d = _disc(san7o, mirror)
    assert len(d.papers) == 15 and not calls
    assert not [f for f in opened if f.endswith(".pdf")]


def test_a_manifest_lost_from_the_mirror_is_written_again_on_an_unchanged_database(san7o, tmp_path):
    mirror = tmp_path / "m"
    d = _disc(san7o, mirror)
    lost = d.papers[0].path
    before = lost.read_bytes()
    lost.unlink()
    again = _disc(san7o, mirror)
    assert again.papers[0].path == lost and lost.read_bytes() == before


def _replace(file: Path, data: bytes) -> None:
    """`file` rewritten with `data`, its mtime a second later (coarse clocks)."""
    before = file.stat().st_mtime_ns
    file.write_bytes(data)
    os.utime(file, ns=(before + 10**9, before + 10**9))


def _hashes(lib: Path, mirror: Path) -> dict[str, str]:
    """Each paper's ocr_result_hash as the discovery hands it to the source scan, after checking
    it is the hash `source_hash` makes of the manifest on disk."""
    d = _disc(lib, mirror)
    assert {p.key: source_hash(p.path, p.key)[2] for p in d.papers} == dict(d.hashes)
    return dict(d.hashes)


def test_files_changed_under_an_unchanged_database_move_their_papers_hash(san7o, shared_data, tmp_path):
    """The database untouched (its catalog reused, each manifest's hash kept while its files are
    the same, unchanged): a PDF replaced by one of the same size, and an OCR output put beside
    a PDF (chosen before it), each move exactly that paper's hash."""
    mirror = tmp_path / "m"
    h0 = _hashes(san7o, mirror)
    assert _hashes(san7o, mirror) == h0
    manifest = json.loads((mirror / "zotero" / "papers" / "YDQMNNXT.zotero.json").read_bytes())
    pdf = Path(manifest["sources"][0]["path"])
    assert pdf.suffix == ".pdf"
    stamp = [(p, p.stat().st_mtime_ns) for p in san7o.glob("zotero.sqlite*")]
    data = bytearray(pdf.read_bytes())
    data[-2] ^= 1  # the same size, other bytes, a later mtime
    _replace(pdf, bytes(data))
    h1 = _hashes(san7o, mirror)
    assert {k for k in h0 if h1.get(k) != h0[k]} == {"YDQMNNXT"} and set(h1) == set(h0)
    (pdf.parent / "paper.md").write_text("# MapReduce\n\nOCR output kept beside the PDF, read first.\n")
    h2 = _hashes(san7o, mirror)
    assert {k for k in h1 if h2.get(k) != h1[k]} == {"YDQMNNXT"}
    again = json.loads((mirror / "zotero" / "papers" / "YDQMNNXT.zotero.json").read_bytes())
    assert again["sources"][0]["path"].endswith("paper.md")
    assert [(p, p.stat().st_mtime_ns) for p in san7o.glob("zotero.sqlite*")] == stamp  # the catalog was reused


def test_the_source_scan_takes_zotero_hashes_from_the_mirror_and_sees_a_replaced_pdf(san7o, tmp_path):
    """`scan_sources` reads no manifest (the mirror hands over their hashes), and a PDF replaced
    by one of the same size still changes that paper's hash."""
    from sheaf.core.settings import Settings
    from sheaf.library.sources import scan_sources

    settings = Settings(home=tmp_path / "home", library=san7o)
    first = scan_sources(settings, tmp_path / "stats.json")
    second = scan_sources(settings, tmp_path / "stats.json")
    assert second.hashes == first.hashes and second.hashed == 0 and not second.errors
    mirror = settings.home / "library-mirror" / "zotero"
    assert first.hashes == {p.key: source_hash(p.path, p.key)[2] for p in first.discovery.papers}
    manifest = json.loads((mirror / "papers" / "YDQMNNXT.zotero.json").read_bytes())
    pdf = Path(manifest["sources"][0]["path"])
    data = bytearray(pdf.read_bytes())
    data[-2] ^= 1
    _replace(pdf, bytes(data))
    third = scan_sources(settings, tmp_path / "stats.json")
    assert {k for k in first.hashes if third.hashes[k] != first.hashes[k]} == {"YDQMNNXT"}


def test_items_sharing_an_author_and_tags_go_in_as_zotero_keeps_them(san7o, tmp_path):
    with ZoteroDb(san7o) as z, z.transaction():
        coll = z.add_collection("BENCHC01", "Bench", None)
        for i, key in enumerate(("SAME2345", "SAME2346")):
            iid = z.add_item(key, f"Shared author {i}", author=("Grace", "Hopper"))
            z.add_tag(iid, "shared")
            z.add_to_collection(coll, iid)
            z.add_stored_file(iid, f"SAMEPDF{i}", "missing.pdf", ft_cache=f"Text of paper {i} on compilers.")
    cat = {p.key: p for p in read_catalog(san7o).papers}
    for key in ("SAME2345", "SAME2346"):
        p = cat[key]
        assert p.creators == [{"creatorType": "author", "firstName": "Grace", "lastName": "Hopper"}]
        assert p.tags == ["shared"] and p.collections == ["Bench"]
    d = _disc(san7o, tmp_path / "m")
    assert {"SAME2345", "SAME2346"} <= {p.key for p in d.papers}


def test_status_reads_never_write_the_home(san7o, tmp_path):
    mirror = tmp_path / "m"
    d = _disc(san7o, mirror, write=False)
    assert len(d.papers) == 15 and not mirror.exists()


# --- databases that cannot be read -----------------------------------------------------------------

def test_a_corrupt_database_is_a_clear_error_naming_the_file(tmp_path):
    lib = tmp_path / "zotero"
    lib.mkdir()
    (lib / "zotero.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(SheafError) as e:
        read_catalog(lib)
    assert e.value.code == "BAD_INPUT" and str(lib / "zotero.sqlite") in e.value.message
    assert "not a readable SQLite database" in e.value.message and e.value.details["hint"]


def test_a_zotero_4_database_is_refused_with_what_to_do(tmp_path):
    lib = tmp_path / "zotero"
    lib.mkdir()
    con = sqlite3.connect(lib / "zotero.sqlite")
    con.executescript("CREATE TABLE version (schema TEXT PRIMARY KEY, version INT);"
                      "INSERT INTO version VALUES ('userdata', 77);"
                      "CREATE TABLE items (itemID INTEGER PRIMARY KEY, itemTypeID INT, dateAdded, dateModified, "
                      "libraryID INT, key TEXT);"
                      "CREATE TABLE itemAttachments (itemID INT, sourceItemID INT, linkMode INT, mimeType TEXT, path TEXT);")
    con.close()
    with pytest.raises(SheafError) as e:
        read_catalog(lib)
    assert "older than Zotero 5" in e.value.message and "userdata schema 77" in e.value.message
    assert "Zotero 5 or later" in e.value.details["hint"]


def test_a_damaged_pdf_falls_back_to_the_ft_cache(san7o, tmp_path):
    pdf = next((san7o / "storage").rglob("Dean and Ghemawat*.pdf"))
    pdf.write_bytes(pdf.read_bytes()[:2000])  # truncated
    d = _disc(san7o, tmp_path / "m")
    p = parse_paper({x.key: x.path for x in d.papers}["YDQMNNXT"], "YDQMNNXT")
    assert any(".zotero-ft-cache" in w for w in p.warnings)
    assert sum(b.role == "body" for b in p.blocks) > 10
    assert json.loads({x.key: x.path for x in d.papers}["YDQMNNXT"].read_text())["sources"][0]["sha256"]


def test_the_benchmarks_synthetic_directory_reads_as_the_items_it_was_made_of(shared_data, tmp_path):
    from bench.build import zotero as bench

    made = bench.make_zotero_dir(tmp_path / "z", 401)
    assert (made["items"], made["real_pdfs"]) == (401, 3)
    d = _disc(tmp_path / "z", tmp_path / "m")
    assert len(d.papers) == 15 + 401  # the source's own papers and every item made
    first = json.loads(next(p.path for p in d.papers if p.key == bench.zkey("Q", 0)).read_bytes())
    assert first["sources"][0]["path"].endswith(".pdf")  # item 0: a real PDF copied
    other = json.loads(next(p.path for p in d.papers if p.key == bench.zkey("Q", 1)).read_bytes())
    assert other["sources"][0]["ft_cache"] and "path" not in other["sources"][0]  # missing PDF, Zotero's text
    cat = {p.key: p for p in read_catalog(tmp_path / "z").papers}
    p = cat[bench.zkey("Q", 1)]
    assert p.tags == ["field1", "tag1"] and p.collections == ["Topic 1"] and p.fields["DOI"] == "10.5555/bench.1"
    assert p.creators == [{"creatorType": "author", "firstName": "Ann1", "lastName": "Author1"}]
    assert cat[bench.zkey("Q", 5)].collections == ["Topic 1/Subtopic 1"]
