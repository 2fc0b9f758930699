"""A folder of PDFs as a library (no Dagster): keys, the three styles of a .bib `file` field,
metadata from the .bib or the PDF, sub-folders as collections, and what a rename, a replaced
file and a missing file do."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sheaf.core.models import valid_paper_key
from sheaf.library.discover import discover
from sheaf.library.folder import file_field_paths, path_key
from sheaf.library.metadata import export_files_metadata
from tests.kits.papers import shared_pdfs

pytestmark = pytest.mark.realdata


@pytest.fixture
def folder(shared_data, tmp_path) -> Path:
    lib = tmp_path / "papers"
    pdf = shared_pdfs(shared_data)
    (lib / "Systems" / "Consensus").mkdir(parents=True)
    (lib / "R").mkdir()
    shutil.copy(pdf["mapreduce"], lib / "Systems" / "dean2008.pdf")
    shutil.copy(pdf["flp"], lib / "Systems" / "Consensus" / "Fischer – Impossibilité (FLP) 1985.pdf")
    shutil.copy(pdf["zoo"], lib / "R" / "zoo.pdf")
    return lib


def test_file_fields_of_jabref_mendeley_and_better_bibtex():
    assert file_field_paths(":papers/a.pdf:PDF") == ["papers/a.pdf"]
    assert file_field_paths("Full Text:papers/a b.pdf:application/pdf;Supplement:s.pdf:PDF") == ["papers/a b.pdf", "s.pdf"]
    assert file_field_paths(r":C\:/Users/me/Mendeley/a.pdf:pdf") == ["C:/Users/me/Mendeley/a.pdf"]
    assert file_field_paths("/home/me/papers/a.pdf") == ["/home/me/papers/a.pdf"]
    assert file_field_paths("files/12/a.pdf;files/13/b.pdf") == ["files/12/a.pdf", "files/13/b.pdf"]


def test_keys_are_valid_stable_and_distinct_for_odd_names():
    names = ["Attention is all you need.pdf", "a/Attention is all you need.pdf", "Ünïcödé – ü.pdf", "日本語.pdf", "..pdf"]
    keys = [path_key(n) for n in names]
    assert all(valid_paper_key(k) for k in keys) and len(set(keys)) == len(keys)
    assert keys[0].startswith("Attention_is_all_you_need-") and keys == [path_key(n) for n in names]


def test_a_folder_of_pdfs_is_a_library_with_sub_folders_as_collections(folder, tmp_path):
    d = discover(folder, mirror=tmp_path / "m")
    assert d.layout == "folder" and len(d.papers) == 3
    meta = export_files_metadata(d.metadata_files).by_key()
    flp = next(m for m in meta.values() if "Fischer" in m.key or "Impossibilit" in m.key)
    assert flp.collections == ("Systems/Consensus",)
    zoo = next(m for m in meta.values() if m.key.startswith("zoo-"))
    assert zoo.title.startswith("zoo: An S3 Class") and zoo.authors[0] == "Achim Zeileis"  # the PDF's own metadata


@pytest.mark.parametrize("style", ["jabref", "mendeley", "bbt"])
def test_a_bib_entry_names_its_pdf_and_gives_key_and_metadata(folder, tmp_path, style):
    target = folder / "Systems" / "dean2008.pdf"
    field = {"jabref": ":Systems/dean2008.pdf:PDF",
             "mendeley": ":" + str(target).replace(":", "\\:") + ":pdf",
             "bbt": str(target)}[style]
    (folder / "library.bib").write_text(
        "@article{Dean:2008,\n  title = {{MapReduce}: Simplified Data Processing on Large Clusters},\n"
        "  author = {Dean, Jeffrey and Ghemawat, Sanjay}, year = {2008}, journal = {Commun. ACM},\n"
        "  keywords = {systems, distributed}, groups = {Classics},\n"
        f"  file = {{{field}}}\n}}\n"
        "@article{gone2019, title = {A paper whose PDF is gone}, year = 2019, file = {:missing/gone.pdf:PDF}}\n",
        encoding="utf-8")
    d = discover(folder, mirror=tmp_path / "m")
    keys = {p.key: p.path for p in d.papers}
    assert keys["Dean_2008"] == target and len(keys) == 3
    meta = export_files_metadata(d.metadata_files).by_key()["Dean_2008"]
    assert (meta.title, meta.authors, meta.year) == ("MapReduce: Simplified Data Processing on Large Clusters",
                                                      ("Jeffrey Dean", "Sanjay Ghemawat"), 2008)
    assert set(meta.collections) == {"Systems", "Classics"} and meta.tags == ("systems", "distributed")
    assert dict(d.metadata_only) == {"gone2019": "file not found: missing/gone.pdf"}
    assert any("gone2019" in n for n in d.notes)


def test_an_entry_without_a_file_field_finds_the_pdf_named_by_its_key(folder, tmp_path):
    (folder / "refs.bib").write_text("@article{dean2008, title = {MapReduce}, year = 2008}\n", encoding="utf-8")
    d = discover(folder, mirror=tmp_path / "m")
    assert {p.key: p.path.name for p in d.papers}["dean2008"] == "dean2008.pdf"


def test_rename_replace_and_remove(folder, tmp_path, shared_data):
    mirror = tmp_path / "m"
    before = {p.key: p.path for p in discover(folder, mirror=mirror).papers}
    (folder / "R" / "zoo.pdf").rename(folder / "R" / "zoo (2005).pdf")
    after = {p.key: p.path for p in discover(folder, mirror=mirror).papers}
    assert set(after) - set(before) == {path_key("R/zoo (2005).pdf")}
    assert set(before) - set(after) == {path_key("R/zoo.pdf")}
    shutil.copy(shared_pdfs(shared_data)["flp"], folder / "Systems" / "dean2008.pdf")  # replaced: same key
    assert {p.key for p in discover(folder, mirror=mirror).papers} == set(after)
    (folder / "Systems" / "dean2008.pdf").unlink()
    assert len(discover(folder, mirror=mirror).papers) == 2


def test_a_broken_bib_is_reported_not_fatal(folder, tmp_path):
    (folder / "broken.bib").write_text("@article{ok, title={Fine}, file={:R/zoo.pdf:PDF}}\n@article{bad, title={Never closed\n",
                                       encoding="utf-8")
    d = discover(folder, mirror=tmp_path / "m")
    assert "ok" in {p.key for p in d.papers}
    assert any("broken.bib" in n and "not a BibTeX entry" in n for n in d.notes)
