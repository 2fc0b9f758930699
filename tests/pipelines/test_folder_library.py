"""A folder of PDFs used as a user uses it: `sheaf build --library DIR`, `status`, `search`,
`retrieve` with `--collection` (sub-folders) and `--tag` (.bib keywords), then a rename (nothing
embedded again), a replaced file (only it rebuilt) and a removal."""
from __future__ import annotations

import shutil

import pytest

from tests.kits.papers import shared_pdfs
from tests.kits.pipeline import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.realdata]


def _cli(*argv: str) -> dict:
    code, env = run_cli([*argv, "--json"])
    assert code == 0, env
    return env


def test_a_folder_of_pdfs_built_searched_and_kept_current(shared_data, tmp_path, monkeypatch):
    lib = tmp_path / "My Papers"
    pdf = shared_pdfs(shared_data)
    (lib / "Systems").mkdir(parents=True)
    shutil.copy(pdf["mapreduce"], lib / "Systems" / "dean2008.pdf")
    shutil.copy(pdf["flp"], lib / "Impossibilité FLP.pdf")
    (lib / "refs.bib").write_text(
        "@article{dean2008, title = {MapReduce: Simplified Data Processing on Large Clusters},\n"
        "  author = {Dean, Jeffrey and Ghemawat, Sanjay}, year = 2008, keywords = {systems, batch}}\n"
        "@book{lost, title = {A Lost Book}, year = 1999, file = {:lost.pdf:PDF}}\n", encoding="utf-8")
    for k in ("SHEAF_INDEX_FILE", "SHEAF_EMBEDDING_MODEL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SHEAF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster_home"))
    monkeypatch.setenv("SHEAF_LIBRARY", str(lib))

    st = _cli("status")
    assert st["data"]["layout"] == "folder" and st["data"]["states"] == {"missing": 2}
    assert st["data"]["metadata_only"] == [{"paper": "lost", "reason": "file not found: lost.pdf"}]
    assert _cli("build")["data"]["states"] == {"built": 2}
    top = _cli("search", "MapReduce large clusters")["data"]["matches"][0]
    assert (top["zotero_key"], top["year"], top["first_author"]) == ("dean2008", 2008, "Jeffrey Dean")
    flp = [m["zotero_key"] for m in _cli("retrieve", "consensus with one faulty process", "--mode", "lexical")["data"]["matches"]]
    assert flp and flp[0].startswith("Impossibilit")
    systems = _cli("retrieve", "data processing", "--collection", "Systems", "--mode", "lexical")["data"]["matches"]
    assert {m["zotero_key"] for m in systems} == {"dean2008"}
    assert {m["zotero_key"] for m in _cli("search", "processing", "--tag", "batch")["data"]["matches"]} == {"dean2008"}

    (lib / "Impossibilité FLP.pdf").rename(lib / "fischer1985.pdf")
    env = _cli("build")
    assert len(env["data"]["sync"]["added"]) == 1 and len(env["data"]["sync"]["removed"]) == 1
    assert env["data"]["embeddings_computed"] == 0  # a rename embeds nothing again
    shutil.copy(pdf["zoo"], lib / "Systems" / "dean2008.pdf")  # the file replaced: same key, rebuilt
    env = _cli("build")
    assert set(env["data"]["planned"]) == {"dean2008"} and env["data"]["embeddings_computed"] > 0
    (lib / "fischer1985.pdf").unlink()
    env = _cli("build")
    assert env["data"]["sync"]["removed"] and env["data"]["states"] == {"built": 1}
