"""A file that cannot be read is its paper's state, not a failed build: a truncated PDF makes its
paper `unreadable: <reason>` (with the fix) on every surface, the build warns once and exits 0,
the next build does not try it again until the file changes, and the paper stays findable by its
metadata. A reader's own failure (a bug) is still `failed`, exit 1."""
from __future__ import annotations

import shutil

import pytest

from sheaf.core.models import UNREADABLE_FIX, IngestError, unreadable_reason
from tests.kits.pipeline import SAMPLE, built_base, clone, run_cli

pytestmark = pytest.mark.slow

#: A sample paper that the base home's library lacks, but whose metadata its library.json has.
KEY = "T5GM2QWN"


def test_input_problems_are_unreadable_and_reader_bugs_are_not():
    assert unreadable_reason(IngestError("K", "a.pdf", "corrupt or truncated PDF")) == "corrupt or truncated PDF"
    assert unreadable_reason(IngestError("K", "a.pdf", "pdf: unexpected input (KeyError: 'x')", bug=True)) is None
    assert unreadable_reason(IngestError("K", None, "no units artifact", upstream=True)) is None
    assert unreadable_reason(FileNotFoundError(2, "No such file", "a.pdf")) == "file not found: a.pdf"
    assert unreadable_reason(ValueError("x")) is None


def test_a_truncated_pdf_is_unreadable_the_build_exits_0_and_does_not_retry(tmp_path_factory, tmp_path, monkeypatch):
    base, _ = built_base(tmp_path_factory)
    h = clone(base, tmp_path / "copy")
    pdf = SAMPLE / "papers" / KEY / "paper.pdf"
    (h.papers / KEY).mkdir()
    (h.papers / KEY / "paper.pdf").write_bytes(pdf.read_bytes()[:1500])  # cut off: no page can be read
    with monkeypatch.context() as mp:
        h.apply(mp)
        code, env = run_cli(["build", "--json"])
        assert code == 0, env
        assert env["data"]["states"].get("unreadable") == 1, env["data"]["states"]
        assert "failed" not in env["data"]["states"]
        said = [w for w in env["warnings"] if w.startswith(f"{KEY}: unreadable: ")]
        assert len(said) == 1 and "PDF" in said[0], env["warnings"]
        assert any(UNREADABLE_FIX in a for a in env["next_actions"]), env["next_actions"]

        code, st = run_cli(["status", "--json"])
        assert code == 0
        paper = next(p for p in st["data"]["papers"] if p["paper_id"] == KEY)
        assert paper["state"] == "unreadable" and "PDF" in paper["error"], paper
        assert paper["fix"] == UNREADABLE_FIX
        assert st["data"]["fresh"], st["data"]["verdict_reasons"]  # no build can do more
        assert any("unreadable" in r for r in st["data"]["verdict_reasons"])
        # PaperForge's `embed status` (polled every 2 s: the last build's record, no scan) and
        # `memory status` say the same
        from sheaf.paperforge.shapes import embed_status_data, memory_status_data
        from sheaf.service import builds

        s = h.settings()
        rows = embed_status_data(s, builds.index_probe(s), builds.build_state(s),
                                 builds.recorded_unreadable(s))["unreadable"]
        assert rows == [{"paper_id": KEY, "reason": paper["error"], "fix": UNREADABLE_FIX}]
        assert memory_status_data(st["data"])["unreadable"] == rows

        code, again = run_cli(["build", "--json"])  # the no-op: nothing retried, still exit 0
        assert code == 0, again
        assert KEY not in again["data"]["planned"]
        assert sum(w.startswith(f"{KEY}: unreadable: ") for w in again["warnings"]) == 1

        code, found = run_cli(["search", "solid-fuel", "--no-server", "--json"])  # by its metadata
        assert code == 0 and KEY in {m["zotero_key"] for m in found["data"]["matches"]}, found

        shutil.copy2(pdf, h.papers / KEY / "paper.pdf")  # the file replaced: built now
        code, fixed = run_cli(["build", "--json"])
        assert code == 0, fixed
        assert KEY in fixed["data"]["planned"]
        assert "unreadable" not in fixed["data"]["states"], fixed["data"]["states"]


def test_a_reader_that_fails_on_a_paper_is_still_a_failed_build(tmp_path_factory, tmp_path, monkeypatch):
    """The other side of the line: a reader raising what it did not foresee is a bug, the paper
    is `failed` and the build exits 1 (the fault is injected into the Markdown reader)."""
    import sheaf.formats.markdown as markdown

    base, _ = built_base(tmp_path_factory)
    h = clone(base, tmp_path / "copy")
    h.add_paper("F7RZ4JDB")  # Markdown
    real = markdown.parse

    def broken(paper_id, path, data, warnings):
        if paper_id == "F7RZ4JDB":
            raise KeyError("a reader bug")
        return real(paper_id, path, data, warnings)

    monkeypatch.setattr(markdown, "parse", broken)
    with monkeypatch.context() as mp:
        h.apply(mp)
        code, env = run_cli(["build", "--json"])
    assert code == 1, env
    paper = next(p for p in env["data"]["papers"] if p["paper_id"] == "F7RZ4JDB")
    assert paper["state"] == "failed" and "unexpected input (KeyError" in paper["error"], paper
