"""The light query encoder: ONNX export agrees with sentence-transformers, never imports torch,
and a missing or stale export falls back to sentence-transformers with a warning."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sheaf.core.settings import get_settings
from sheaf.vectors.identity import ModelIdentity
from sheaf.vectors.onnx import (
    EXPORT_JSON,
    OnnxQueryEncoder,
    _source_changed,
    export_dir,
    export_status,
    find_export,
    model_source_files,
)
from sheaf.vectors.onnx_export import ensure_onnx_export
from sheaf.vectors.query_encoder import FALLBACK_WARNING, QueryEncoder

pytestmark = [pytest.mark.slow, pytest.mark.heavy]
ROOT = Path(__file__).resolve().parents[2]


def _queries() -> list[str]:
    rng = np.random.default_rng(7)
    words = ("bone density osteoporosis denosumab fracture risk cohort trial placebo creep alumina "
             "yttrium theta gamma coupling hippocampus soil moisture Sentinel radar shrinkage prior "
             "pollinator elevation lichen glacier tokenization abbreviation electrolyte lithium").split()
    fixed = [
        "", " ", "?", "-", "…", "a", "SPG-302", "SPG302", "SPG 302", "QLN-482 cough frequency",
        "IL-6", "TNF-α", "p < 0.05", "CD4+ T cells", "HbA1c ≥ 6.5%", "COVID-19 mRNA-1273",
        "Müller Léa yttrium-doped alumina", "naïve Bayes", "Åkesson shrinkage", "σ⁰ backscatter",
        "µm ± 5 °C", "χ² test", "骨密度", "骨质疏松症的治疗", "日本語の論文を検索する",
        "한국어 질의", "Москва исследование", "θ–γ coupling in CA1", "   leading and trailing   ",
        "UPPER CASE QUERY ABOUT BONE", "emoji 🦴 bone", "tab\tseparated\nnew line",
        "10.5555/abc.2021.001", "doi:10.1000/xyz123", "https://example.org/paper?id=3",
        "what is the effect of denosumab discontinuation on vertebral fractures?",
    ]
    out = list(fixed)
    while len(out) < 80:  # short to medium random queries
        n = int(rng.integers(1, 25))
        out.append(" ".join(rng.choice(words, n)))
    for n in (200, 260, 300, 420, 600, 900, 1300):  # longer than the 256-piece window
        out.append(" ".join(rng.choice(words, n)))
    out.append("SPG-302 " * 150)
    out.append("日本語の論文を検索する。" * 40)
    out.append("x" * 3000)  # one huge "word"
    out.append(("α-synuclein β-amyloid " * 90).strip())
    while len(out) < 100:
        out.append(" ".join(rng.choice(words, int(rng.integers(30, 120)))) + " SPG-302 骨密度")
    return out


QUERIES = _queries()


@pytest.fixture(scope="module")
def export(embedder, onnx_export):
    """The default model exported once (session) into a temporary SHEAF_HOME."""
    settings = get_settings(home=onnx_export.parent.parent)
    assert onnx_export == export_dir(settings, embedder.identity)
    return settings, onnx_export


def test_queries_are_varied():
    assert len(QUERIES) == 100
    assert any(len(q) > 2000 for q in QUERIES)


def test_export_layout_and_second_call_is_cheap(export, embedder):
    settings, path = export
    assert {p.name for p in path.iterdir()} >= {"model.onnx", "tokenizer.json", EXPORT_JSON}
    meta = json.loads((path / EXPORT_JSON).read_text())
    assert meta["identity"] == embedder.identity.to_dict()
    assert meta["verified"]["min_cosine"] >= 0.9999
    again, exported = ensure_onnx_export(embedder, settings)
    assert again == path and not exported
    assert export_status(path, embedder.identity, settings.embedding_model).usable


def test_the_export_writes_attention_out_and_gives_the_model_back(export, embedder):
    """The attention is exported as plain operations (onnxruntime runs that graph faster than the
    fused call's); the loaded model, which the build may go on encoding with, keeps its own."""
    import onnx

    settings, path = export
    meta = json.loads((path / EXPORT_JSON).read_text())
    assert meta["exporter"]["attention"] == "eager"
    ops = {n.op_type for n in onnx.load(str(path / "model.onnx")).graph.node}
    assert "Softmax" in ops
    hf = embedder.load().model[0].auto_model
    assert hf.config._attn_implementation != "eager"


def test_onnx_agrees_with_sentence_transformers(export, embedder):
    settings, path = export
    enc = OnnxQueryEncoder.load(path, overlap_tokens=embedder.overlap_tokens)
    multi = 0
    for q in QUERIES:
        ref = embedder.embed_query(q)
        vec, windows = enc.encode_query(q)
        assert windows == ref.windows, q[:60]
        multi += windows > 1
        assert vec.shape == (embedder.identity.dimension,) and vec.dtype == np.float32
        cos = float(np.dot(vec, ref.vector))
        assert cos >= 0.9999, (q[:60], cos)
        assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5
    assert multi >= 8  # the long queries really went through the window averaging


def test_query_vector_uses_onnx(export, embedder):
    settings, _ = export
    qv, warnings = QueryEncoder(settings).encode("SPG-302 bone density", embedder.identity)
    assert warnings == []
    assert qv.identity == embedder.identity
    assert float(np.dot(qv.vector, embedder.embed_query("SPG-302 bone density").vector)) >= 0.9999


_CHILD = r"""
import json, sys
from sheaf.vectors.identity import ModelIdentity
from sheaf.vectors.query_encoder import QueryEncoder
from sheaf.core.settings import get_settings
ident = ModelIdentity(**json.loads(sys.argv[2]))
qv, warnings = QueryEncoder(get_settings(home=sys.argv[1])).encode(sys.argv[3], ident)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "sentence_transformers", "transformers"))
print(json.dumps({"vector": qv.vector.tolist(), "warnings": warnings, "heavy": heavy}))
"""


def test_onnx_query_never_imports_torch(export, embedder):
    settings, _ = export
    q = "denosumab discontinuation and vertebral fractures 骨密度"
    r = subprocess.run([sys.executable, "-c", _CHILD, str(settings.home), embedder.identity.to_json(), q],
                       capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["heavy"] == [] and out["warnings"] == []
    assert float(np.dot(np.asarray(out["vector"], np.float32), embedder.embed_query(q).vector)) >= 0.9999


def _stale_copy(src: Path, dst: Path, edit) -> None:
    dst.mkdir(parents=True)
    for p in src.iterdir():
        os.link(p, dst / p.name)  # a hard link: no 90 MB copy
    meta = json.loads((src / EXPORT_JSON).read_text())
    edit(meta)
    (dst / EXPORT_JSON).unlink()
    (dst / EXPORT_JSON).write_text(json.dumps(meta))


def _assert_fallback(settings, identity, embedder, reason_part: str) -> None:
    q = "yttrium-doped alumina creep"
    qv, warnings = QueryEncoder(settings).encode(q, identity)
    assert len(warnings) == 1 and warnings[0].startswith(FALLBACK_WARNING), warnings
    assert reason_part in warnings[0]
    assert qv.identity == embedder.identity  # the configured model's real identity
    assert float(np.dot(qv.vector, embedder.embed_query(q).vector)) >= 0.99999


def test_missing_export_falls_back_with_warning(embedder, tmp_path):
    _assert_fallback(get_settings(home=tmp_path), embedder.identity, embedder, "no ONNX export")
    _assert_fallback(get_settings(home=tmp_path), None, embedder, "no ONNX export")


def test_stale_export_identity_changed_falls_back(export, embedder, tmp_path):
    settings, path = export
    home = tmp_path / "home"
    stale = export_dir(get_settings(home=home), embedder.identity)

    def edit(meta):
        meta["identity"]["weights_sha256"] = "0" * 64  # exported from other weights
    _stale_copy(path, stale, edit)
    st = export_status(stale, embedder.identity, "all-MiniLM-L6-v2")
    assert not st.usable and "another model identity" in st.reason
    _assert_fallback(get_settings(home=home), embedder.identity, embedder, "another model identity")


def test_incomplete_export_falls_back(export, embedder, tmp_path):
    settings, path = export
    home = tmp_path / "home"
    stale = export_dir(get_settings(home=home), embedder.identity)

    def edit(meta):
        meta["onnx"]["size"] += 1
    _stale_copy(path, stale, edit)
    _assert_fallback(get_settings(home=home), embedder.identity, embedder, "incomplete")


def test_a_server_reuses_the_export_check_for_its_ttl(export, embedder, tmp_path, monkeypatch):
    """With a status period (a warm server: 2 s) the export is checked once per period, not on
    every query; a broken export is still noticed once the period is over."""
    import sheaf.vectors.query_encoder as qe

    settings, path = export
    home = tmp_path / "home"
    copy = export_dir(get_settings(home=home), embedder.identity)
    _stale_copy(path, copy, lambda meta: None)
    s = get_settings(home=home)
    calls = []
    real = qe.export_status
    monkeypatch.setattr(qe, "export_status", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    enc = QueryEncoder(s, status_ttl=30.0)
    assert enc.encode("alumina creep", embedder.identity)[1] == []
    (copy / "tokenizer.json").unlink()  # broken, but within the period the first check stands
    assert enc.encode("alumina creep", embedder.identity)[1] == [] and len(calls) == 1
    enc._status.clear()  # the period is over
    warnings = enc.encode("alumina creep", embedder.identity)[1]
    assert len(calls) == 2 and "tokenizer file is missing" in warnings[0]
    plain = QueryEncoder(s, embedder=None)
    plain._embedder = enc._embedder  # the fallback model is loaded already
    plain.encode("alumina creep", embedder.identity)
    plain.encode("alumina creep", embedder.identity)
    assert len(calls) == 4  # without a period: every query checks


def test_other_configured_model_does_not_use_export(export, embedder, tmp_path):
    settings, _ = export
    st = export_status(export_dir(settings, embedder.identity), embedder.identity,
                       str(tmp_path / "some-other-model"))
    assert not st.usable and "configured model" in st.reason


def test_changed_model_files_make_export_stale(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text('{"a": 1}')
    (d / "weights.bin").write_bytes(b"\0" * 100)
    rec = model_source_files(str(d))
    assert _source_changed(str(d), rec) is None
    os.utime(d / "weights.bin", ns=(1, 1))  # touched, same bytes: still fine
    assert _source_changed(str(d), rec) is None
    (d / "weights.bin").write_bytes(b"\1" * 100)  # same size, other bytes
    assert "weights.bin changed" in _source_changed(str(d), rec)
    (d / "config.json").unlink()
    assert "gone" in _source_changed(str(d), rec)


def test_model_files_touched_but_unchanged_are_hashed_once(export, embedder, tmp_path):
    """A reinstalled model package (same bytes, new mtimes) keeps the export usable, and the
    check records the new mtimes, so the next one is a stat per file instead of hashing ~90 MB
    in every query process and every build run."""
    _, path = export
    copy = tmp_path / path.name
    copy.mkdir()
    for f in path.iterdir():
        try:
            os.link(f, copy / f.name)
        except OSError:
            shutil.copy2(f, copy / f.name)
    (copy / EXPORT_JSON).unlink()
    meta = json.loads((path / EXPORT_JSON).read_text())
    real = {rel: rec["mtime_ns"] for rel, rec in meta["source_files"].items()}
    assert real
    for rec in meta["source_files"].values():
        rec["mtime_ns"] -= 10**9  # as if the package had been installed again a second later
    (copy / EXPORT_JSON).write_text(json.dumps(meta))
    assert export_status(copy, embedder.identity, "all-MiniLM-L6-v2").usable
    again = json.loads((copy / EXPORT_JSON).read_text())
    assert {rel: rec["mtime_ns"] for rel, rec in again["source_files"].items()} == real
    assert {k: v for k, v in again.items() if k != "source_files"} == {k: v for k, v in meta.items()
                                                                         if k != "source_files"}
    assert not [f for f in copy.iterdir() if f.name.startswith(".")]  # no temporary file left
    assert export_status(copy, embedder.identity, "all-MiniLM-L6-v2").usable


def test_identity_round_trip_of_export(export, embedder):
    _, path = export
    meta = json.loads((path / EXPORT_JSON).read_text())
    assert ModelIdentity(**meta["identity"]) == embedder.identity
    assert meta["identity_key"] == embedder.identity.key == path.name


# --- the build's embedder on the export (SHEAF_EMBED_BACKEND=onnx, the default) -------------

def test_build_embedder_encodes_with_the_export_same_passages_and_vectors(export, embedder, sample_index):
    """With an export in <home>/models, `Embedder.from_settings` never loads torch: same
    identity, the same passages (the export's tokenizer measures them), vectors within cosine
    0.9999 of sentence-transformers' for every passage of the sample library."""
    from sheaf.vectors.embedder import Embedder

    settings, _ = export
    onnx = Embedder.from_settings(settings)
    assert onnx.backend == "onnx" and onnx.backend_note is None
    assert onnx.identity == embedder.identity
    passages = []
    for out in sample_index.papers.values():
        a = embedder.build_passages(out.body_units, out.object_units, out.paper.title)
        b = onnx.build_passages(out.body_units, out.object_units, out.paper.title)
        assert a == b
        passages += a
    texts = [p.text for p in passages]
    ref = embedder.encode(texts)
    got = onnx.encode(texts)
    assert got.shape == ref.shape and onnx.encoded_count == len(texts)
    assert float(np.sum(ref * got, axis=1).min()) >= 0.9999
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_sentence_transformers_backend_setting(export):
    from sheaf.vectors.embedder import Embedder

    settings, _ = export
    st = Embedder.from_settings(get_settings(home=settings.home, embed_backend="sentence-transformers",
                                             embed_precision="fp32"))
    assert st.backend == "torch-fp32" and st.load().onnx is None
    with pytest.raises(Exception, match="SHEAF_EMBED_BACKEND must be one of auto, onnx, torch, sentence-transformers"):
        get_settings(home=settings.home, embed_backend="tensorflow")


def test_broken_export_is_not_loaded_and_says_why(export, embedder, tmp_path):
    """An export whose model file is damaged (right size, wrong bytes) is refused when
    loading: the embedder notes why and would load sentence-transformers and re-export."""
    from sheaf.vectors.embedder import Embedder

    _, path = export
    models = tmp_path / "models"
    dst = models / path.name
    dst.mkdir(parents=True)
    for p in path.iterdir():
        if p.name == "model.onnx":
            (dst / p.name).write_bytes(b"\0" * p.stat().st_size)
        else:
            os.link(p, dst / p.name)
    e = Embedder(models_dir=str(models))
    assert e._load_export() is None
    assert e.backend_note and "ONNX export unusable" in e.backend_note


_BUILD_CHILD = r"""
import json, sys
from sheaf.cli.app import main
try:
    code = main(["build", "--json"])
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


def test_build_of_a_changed_paper_never_imports_torch(export, tmp_path):
    """A home whose model is exported: `sheaf build` embeds a changed paper without torch."""
    from tests.kits.paths import link_onnx_export

    _, path = export
    link_onnx_export(path, tmp_path / "home")
    assert _build_in_child(tmp_path) == {"code": 0, "heavy": []}


def _build_in_child(tmp_path: Path, script: str = _BUILD_CHILD, **env_extra: str) -> dict:
    """`sheaf build --json` in a fresh interpreter on a one-paper library under `tmp_path` (home
    `tmp_path/home`; `script` runs it): its exit code and which heavy modules it imported."""
    import shutil

    from tests.kits.paths import SAMPLE_LIBRARY

    home, lib = tmp_path / "home", tmp_path / "lib"
    (lib / "papers").mkdir(parents=True)
    shutil.copytree(SAMPLE_LIBRARY / "papers" / "R4N8DWTE", lib / "papers" / "R4N8DWTE")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHEAF_HOME": str(home), "SHEAF_LIBRARY": str(lib),
           "DAGSTER_HOME": str(home / "dagster_home"), **env_extra}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["stderr"] = r.stderr[-2000:]
    if script is not _BUILD_CHILD:
        return out
    return {k: out[k] for k in ("code", "heavy")} if out["heavy"] == [] else out


def test_a_homes_first_build_exports_in_a_child_and_never_imports_torch(tmp_path):
    """A home with no export yet: the build exports the model in a process of its own and embeds
    with the export, so the build's process never holds torch (~0.55 GB, ~0.8 GB more while
    exporting, which it kept to its end: the first build peaked at 1.4-1.7 GB)."""
    assert _build_in_child(tmp_path) == {"code": 0, "heavy": []}
    [export] = [p for p in (tmp_path / "home" / "models").iterdir() if p.is_dir() and not p.name.startswith(".")]
    meta = json.loads((export / EXPORT_JSON).read_text())
    assert meta["verified"]["min_cosine"] >= 0.9999 and meta["exporter"]["dynamo"] is False


_ORDER_CHILD = _BUILD_CHILD.replace("from sheaf.cli.app import main", r"""
import threading
import assets.paper as paper_assets
import sheaf.vectors.embedder as em
events = []
real_ahead, real_child, real_parse = em.Embedder.export_ahead, em.export_in_child, paper_assets.chain.parse
def ahead(self):
    events.append(["ahead", threading.current_thread().name])
    return real_ahead(self)
def child(*a, **k):
    events.append(["export", threading.current_thread().name])
    return real_child(*a, **k)
def parse(*a, **k):
    events.append(["parse", threading.current_thread().name])
    return real_parse(*a, **k)
em.Embedder.export_ahead, em.export_in_child, paper_assets.chain.parse = ahead, child, parse
from sheaf.cli.app import main
""").replace('"heavy": heavy}', '"heavy": heavy, "events": events}')


def test_a_homes_first_build_starts_the_export_before_it_parses(tmp_path):
    """An empty machine cache and a new home: the build starts the model's export (a thread waiting
    on the export's child process) before it parses the first paper, so the two overlap; embedding
    then takes that export, and no second export is made."""
    out = _build_in_child(tmp_path, _ORDER_CHILD, SHEAF_CACHE_DIR=str(tmp_path / "cache"))
    assert out["code"] == 0 and out["heavy"] == [], out.get("stderr")
    events = out["events"]
    kinds = [e[0] for e in events]
    assert kinds.index("ahead") < kinds.index("parse")
    assert [e for e in events if e[0] == "export"] == [["export", "sheaf-export-ahead"]]
    assert find_export(tmp_path / "home" / "models", "all-MiniLM-L6-v2") is not None


def test_export_ahead_starts_nothing_where_there_is_nothing_to_make(onnx_export, tmp_path):
    from sheaf.vectors.embedder import Embedder
    from tests.kits.paths import link_onnx_export

    link_onnx_export(onnx_export, tmp_path / "home")
    assert Embedder.from_settings(get_settings(home=tmp_path / "home")).export_ahead() is None
    for env in ({"SHEAF_EMBED_BACKEND": "torch"}, {"SHEAF_EMBED_PRECISION": "bf16"}):
        assert Embedder.from_settings(get_settings(environ=env, home=tmp_path / "new")).export_ahead() is None
    assert Embedder().export_ahead() is None  # no home


def test_a_failed_export_child_says_why_and_the_embedder_falls_back(tmp_path, monkeypatch):
    """The export child failing (here: a model that does not exist) is an error naming the model
    and the child's last words; the build's embedder notes it and loads sentence-transformers."""
    from sheaf.core.envelope import SheafError
    from sheaf.vectors.embedder import Embedder
    from sheaf.vectors.onnx import export_in_child

    with pytest.raises(SheafError) as e:
        export_in_child(str(tmp_path / "no-such-model"), tmp_path / "models")
    assert e.value.code == "BACKEND_UNAVAILABLE" and "no-such-model" in e.value.message
    assert "Traceback" not in e.value.message
    emb = Embedder(model_name=str(tmp_path / "no-such-model"), models_dir=str(tmp_path / "models"))
    assert emb._load_export() is None and "exporting" in (emb.backend_note or "")


def test_an_export_killed_part_way_leaves_no_folder_behind(tmp_path):
    """The folders an export writes beside its result until it is complete (`.NAME.tmp-PID-T`,
    `.NAME.old-PID-T`) are swept once their process is gone (a build stopped while it exported
    kills the child before it can clean up); a running export's folder and the exports stay."""
    import os
    import subprocess
    import sys

    from sheaf.vectors.onnx import sweep_unfinished

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    models = tmp_path / "models"
    for name in (f".abc123.tmp-{dead}-1", f".abc123.old-{dead}-7", f".def456.tmp-{os.getpid()}-1", "abc123"):
        (models / name).mkdir(parents=True)
        (models / name / "model.onnx").write_bytes(b"x" * 10)
    gone = sweep_unfinished(models)
    assert sorted(p.name for p in gone) == [f".abc123.old-{dead}-7", f".abc123.tmp-{dead}-1"]
    assert sorted(p.name for p in models.iterdir()) == [f".def456.tmp-{os.getpid()}-1", "abc123"]
    assert sweep_unfinished(tmp_path / "missing") == []


def test_embed_threads_reach_the_onnx_session_and_change_no_vector(onnx_export, tmp_path):
    """SHEAF_EMBED_THREADS (or a build worker's share of the cores, given to `from_settings`) sets
    the encoder's intra-op threads; unset, the runtime's default (0: every core). The vectors are
    the same either way."""
    from sheaf.core.envelope import SheafError
    from sheaf.vectors.embedder import Embedder
    from tests.kits.paths import link_onnx_export

    link_onnx_export(onnx_export, tmp_path)
    one = Embedder.from_settings(get_settings(environ={"SHEAF_EMBED_THREADS": "1"}, home=tmp_path))
    default = Embedder.from_settings(get_settings(environ={}, home=tmp_path))
    assert (one.threads, default.threads) == (1, None)
    assert one.load().onnx is not None and default.load().onnx is not None
    assert one.load().onnx.session.get_session_options().intra_op_num_threads == 1
    assert default.load().onnx.session.get_session_options().intra_op_num_threads == 0
    texts = ["Aspirin lowers the risk of heart attack.", "A longer passage about the immune response " * 8]
    assert np.allclose(one.encode(texts), default.encode(texts), atol=1e-5)
    assert Embedder.from_settings(get_settings(environ={"SHEAF_EMBED_THREADS": "1"}, home=tmp_path),
                                  threads=2).threads == 2  # the caller's share wins
    with pytest.raises(SheafError) as e:
        get_settings(environ={"SHEAF_EMBED_THREADS": "-1"})
    assert e.value.code == "BAD_INPUT" and "SHEAF_EMBED_THREADS" in e.value.message
