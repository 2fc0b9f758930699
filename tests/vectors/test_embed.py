"""Embeddings with the real offline MiniLM: identity, passages without truncation, the cache."""
from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from sheaf.core.envelope import SheafError
from sheaf.core.models import ObjectUnit
from sheaf.store.sqlite import reader as rd
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite import writer as wr
from sheaf.store.sqlite.backend import SqliteEmbeddingCache
from sheaf.vectors.embedder import Embedder
from sheaf.vectors.identity import DEFAULT_MODEL, ModelChangedError, resolve_model_path, unit_embedding_text
from tests.kits.papers import body_unit

pytestmark = pytest.mark.slow

WORDS = ("bone cartilage scaffold hypertrophic chondrocyte ossification collagen matrix vascular "
         "invasion osteoblast mineralization growth plate endochondral regeneration").split()


body = partial(body_unit, short_id_len=0, blocks=("p1:0",))


def numbered_words(n: int) -> str:
    """n distinct words (w0001-style tokens mixed with real words) so coverage is checkable."""
    return " ".join(f"{WORDS[i % len(WORDS)]}{i}" for i in range(n))


def test_identity_of_default_model(embedder):
    ident = embedder.identity
    assert ident.name == DEFAULT_MODEL
    assert ident.dimension == 384 and ident.max_tokens == 256 and ident.normalize
    assert re.fullmatch(r"[0-9a-f]{64}", ident.weights_sha256)
    assert re.fullmatch(r"[0-9a-f]{12}", ident.key) and ident.vec_table == f"vec_{ident.key}"
    assert os.environ.get("HF_HUB_OFFLINE") == "1" and os.environ.get("TRANSFORMERS_OFFLINE") == "1"
    assert resolve_model_path("all-MiniLM-L6-v2")[0] == DEFAULT_MODEL
    # every identity field changes the key
    for change in ({"name": "x"}, {"weights_sha256": "0" * 64}, {"dimension": 385},
                   {"normalize": False}, {"max_tokens": 512}, {"passage_template": "{text}"}):
        assert dataclasses.replace(ident, **change).key != ident.key


def test_long_section_passages_cover_every_word(embedder):
    text = numbered_words(2000)
    unit = body("P1", "s1", text, ("Results", "Histology"))
    ps = embedder.passages_for(unit, title="Endochondral bone regeneration")
    assert len(ps) > 1
    hf_tok = embedder.load().model.tokenizer
    for i, p in enumerate(ps):
        assert p.passage_id == f"{unit.unit_id}#{i}" and p.ordinal == i and p.unit_id == unit.unit_id
        assert p.text.startswith("Endochondral bone regeneration > Results > Histology\n")
        assert p.text.endswith(text[p.char_start:p.char_end])
        # measured with the model's own tokenizer: nothing the model would truncate
        assert len(hf_tok(p.text)["input_ids"]) <= 256
        assert p.n_tokens == len(hf_tok(p.text)["input_ids"])
    # every word of the section is inside some passage
    covered = [False] * len(text)
    for p in ps:
        for k in range(p.char_start, p.char_end):
            covered[k] = True
    for m in re.finditer(r"\S+", text):
        assert all(covered[m.start():m.end()]), m.group(0)
    words_in_passages = set()
    for p in ps:
        words_in_passages |= set(text[p.char_start:p.char_end].split())
    assert words_in_passages == set(text.split())
    # consecutive passages overlap, and windows start at a word
    for a, b in zip(ps, ps[1:]):
        assert b.char_start < a.char_end
        assert b.char_start == 0 or text[b.char_start - 1] == " "
    # deterministic
    assert [p.text_sha256 for p in embedder.passages_for(unit, "Endochondral bone regeneration")] == \
        [p.text_sha256 for p in ps]


def test_unbreakable_text_still_covered(embedder):
    text = "A" * 3000 + " " + "x" * 10
    ps = embedder.passages_for(body("P1", "s1", text), title=None)
    assert all(p.n_tokens <= 256 for p in ps)
    assert ps[0].char_start == 0 and ps[-1].char_end == len(text)
    for a, b in zip(ps, ps[1:]):
        assert b.char_start <= a.char_end


def test_short_units_and_objects(embedder):
    u = body("P1", "s0", "Short text.")
    o = ObjectUnit("P1:table:p2:1", "", "P1", "table", "Table 2", "Patient cohort.",
                   "age | n\n30 | 12", "Table 2 shows the cohort.", "s0", ("Methods",), 2, ("p2:1",))
    empty = ObjectUnit("P1:figure:p3:1", "", "P1", "figure", None, "", "", "", "s0", (), 3, ("p3:1",))
    ps = embedder.build_passages([u], [o, empty], title="T")
    assert [p.passage_id for p in ps] == ["P1:body:s0#0", "P1:table:p2:1#0"]
    assert unit_embedding_text(o).startswith("Table 2. Patient cohort.")
    assert ps[1].unit_type == "object" and "age | n" in ps[1].text
    assert ps[0].text == "T > Results\nShort text."


def test_unchanged_paper_needs_no_model_call(embedder, conn):
    units = [body("P1", f"s{i}", numbered_words(120 + 40 * i)) for i in range(4)]
    ps = embedder.build_passages(units, title="Paper")
    calls, encoded = embedder.model_calls, embedder.encoded_count
    ep = embedder.embed(ps, SqliteEmbeddingCache(conn))
    assert embedder.encoded_count - encoded == len({p.text_sha256 for p in ps}) == ep.encoded
    wr.replace_paper(conn, "P1", units, [], ep)
    # rebuild: same units → all vectors from the cache, zero model calls
    calls, encoded = embedder.model_calls, embedder.encoded_count
    ep2 = embedder.embed(embedder.build_passages(units, title="Paper"), SqliteEmbeddingCache(conn))
    assert embedder.model_calls == calls and embedder.encoded_count == encoded and ep2.encoded == 0
    assert np.array_equal(ep.vectors, ep2.vectors)
    wr.replace_paper(conn, "P1", units, [], ep2)
    assert rd.counts(conn, "P1")[ep.identity.vec_table] == len(ps)


def test_changing_one_paragraph_recomputes_only_its_passages(embedder, conn):
    units = [body("P1", f"s{i}", numbered_words(100 + 150 * i)) for i in range(4)]
    ep = embedder.embed(embedder.build_passages(units, title="Paper"), SqliteEmbeddingCache(conn))
    wr.replace_paper(conn, "P1", units, [], ep)
    changed = dataclasses.replace(units[2], text=units[2].text.replace("bone", "BONE", 1) + " new ending.")
    new_units = [*units[:2], changed, units[3]]
    new_ps = embedder.build_passages(new_units, title="Paper")
    expected = {p.text_sha256 for p in new_ps} - {p.text_sha256 for p in ep.passages}
    assert expected and {p.unit_id for p in new_ps if p.text_sha256 in expected} == {changed.unit_id}
    encoded = embedder.encoded_count
    ep2 = embedder.embed(new_ps, SqliteEmbeddingCache(conn))
    assert embedder.encoded_count - encoded == ep2.encoded == len(expected)
    wr.replace_paper(conn, "P1", new_units, [], ep2)
    # the cached vectors equal freshly computed ones (cache stores exactly what the model gave)
    fresh = embedder.encode([p.text for p in new_ps[:2]])
    assert np.allclose(fresh, ep2.vectors[:2], atol=1e-5)


def test_duplicate_texts_encoded_once(embedder):
    units = [body("P1", "s0", "identical text"), body("P2", "s0", "identical text")]
    ps = embedder.build_passages(units, title="Same")
    encoded = embedder.encoded_count
    ep = embedder.embed(ps)  # no cache connection
    assert embedder.encoded_count - encoded == 1 and ep.vectors.shape == (2, 384)
    assert ep.for_paper("P2").passages[0].unit_id == "P2:body:s0"


def test_long_query_is_not_truncated(embedder):
    q = embedder.embed_query(numbered_words(600))
    assert q.windows > 1
    assert abs(float(np.linalg.norm(q.vector)) - 1.0) < 1e-5
    assert embedder.embed_query("bone").windows == 1


def test_collection_of_one_model_refuses_a_query_of_another(embedder, conn, tmp_path):
    """A second, really loaded model (the same weights with a 128-token window, from another
    folder) has another identity; its query vectors are refused by the first collection."""
    src = resolve_model_path(DEFAULT_MODEL)[1]
    other = tmp_path / "minilm-128"
    other.mkdir()
    for entry in os.listdir(src):
        if entry != "sentence_bert_config.json":
            os.symlink(os.path.join(src, entry), other / entry)
    cfg = json.loads(Path(src, "sentence_bert_config.json").read_text())
    cfg["max_seq_length"] = 128
    (other / "sentence_bert_config.json").write_text(json.dumps(cfg))
    e2 = Embedder(model_name=str(other))
    assert e2.identity.max_tokens == 128 and e2.identity.name == "minilm-128"
    assert e2.identity.key != embedder.identity.key

    units = [body("P1", "s0", "Hypertrophic chondrocytes drive endochondral ossification.")]
    wr.replace_paper(conn, "P1", units, [], embedder.embed(embedder.build_passages(units, title="T"), SqliteEmbeddingCache(conn)))
    q2 = e2.embed_query("chondrocytes")
    with pytest.raises(ModelChangedError) as ei:
        rd.vector_search(conn, q2)
    err = ei.value
    assert err.code == "MODEL_CHANGED"
    assert "minilm-128" in err.message and DEFAULT_MODEL in err.message
    assert err.details["query_model"]["max_tokens"] == 128
    # the same query through the first model works
    assert rd.vector_search(conn, embedder.embed_query("chondrocytes"))[0].unit_id == "P1:body:s0"
    # the second model gets its own collection; the two never share vectors or cache rows
    wr.replace_paper(conn, "P1", units, [], [embedder.embed(embedder.build_passages(units, title="T"), SqliteEmbeddingCache(conn)),
                                             e2.embed(e2.build_passages(units, title="T"), SqliteEmbeddingCache(conn))])
    assert set(ix.collections(conn)) == {embedder.identity.key, e2.identity.key}
    assert rd.vector_search(conn, q2)[0].unit_id == "P1:body:s0"
    keys = {r[0] for r in conn.execute("SELECT DISTINCT model_key FROM embedding_cache")}
    assert keys == {embedder.identity.key, e2.identity.key}


def test_unknown_model_is_a_clear_error():
    from sheaf.core.envelope import SheafError

    with pytest.raises(SheafError) as ei:
        Embedder(model_name="no-such-org/no-such-model-xyz").load()
    assert ei.value.code == "BACKEND_UNAVAILABLE" and "offline" in ei.value.message


# --- the embedding device (SHEAF_EMBED_DEVICE) --------------------------------------------------

def test_embed_device_setting_is_checked():
    from sheaf.core.settings import get_settings

    assert get_settings(environ={"SHEAF_EMBED_DEVICE": "cuda:1"}).embed_device == "cuda:1"
    with pytest.raises(SheafError) as e:
        get_settings(environ={"SHEAF_EMBED_DEVICE": "gpu"})
    assert e.value.code == "BAD_INPUT" and "SHEAF_EMBED_DEVICE" in e.value.message and "'gpu'" in e.value.message


def test_auto_device_is_the_cpu_on_a_machine_without_a_gpu(embedder):
    from sheaf.vectors.embedder import _CPU_BATCH, gpu_present

    if gpu_present():
        pytest.skip("this machine has a GPU")
    embedder.load()
    assert embedder.device == "auto" and embedder.resolved_device == "cpu" and embedder.batch_size == _CPU_BATCH


def test_a_cpu_encodes_16_at_a_time_unless_the_setting_says_otherwise():
    """SHEAF_EMBED_BATCH_SIZE left at its default: a CPU encodes 16 passages a call (faster there
    than 32: torch fp32 by 22%, bf16 5%, onnxruntime 15%); a value set otherwise is kept."""
    from sheaf.core.settings import get_settings
    from sheaf.vectors.embedder import Embedder

    assert Embedder.from_settings(get_settings(environ={})).batch_size == 32  # until it loads
    emb = Embedder(device="cpu", batch_size=32, backend_setting="torch", precision="fp32")
    emb.load()
    assert emb.batch_size == 16
    emb = Embedder(device="cpu", batch_size=24, backend_setting="torch", precision="fp32")
    emb.load()
    assert emb.batch_size == 24


def test_a_gpu_device_this_machine_lacks_is_a_clear_error():
    from sheaf.vectors.embedder import gpu_present

    if gpu_present():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SheafError) as e:
        Embedder(device="cuda").load()
    assert e.value.code == "BACKEND_UNAVAILABLE" and "'cuda'" in e.value.message
    assert e.value.details["setting"] == "SHEAF_EMBED_DEVICE" and "SHEAF_EMBED_DEVICE=cpu" in e.value.details["hint"]


# --- counting a passage's tokens without tokenizing it again (word-local tokenizers) -------

TRICKY = [
    numbered_words(700),  # many windows, every cut between words
    "A" * 3000 + " " + "x" * 10,  # a word longer than half a window: cut mid-word
    " ".join(["naïve café Ωμέγα ΣΟΦΟΣ", "中文字符 测试", "end\u00a0to\u00a0end", "a\x00b c\x1cd",
              "[MASK] [SEP]token", "x\u0301y", "http://example.org/a_b?c=d", "e=mc^2;", "\ttab\r\nline"] * 40),
    "\x00\x00 leading control " + numbered_words(300) + " trailing\u3000",
    "\n\n" + "word, " * 400,
    "intro " + "x," * 500 + " outro",  # a run of tokens without whitespace: cut inside it
]


def test_minilm_tokenizer_is_word_local(embedder):
    assert embedder.load().word_local is True


def test_passages_counted_from_the_units_tokens_equal_passages_tokenized_again(embedder, shared_data):
    """A word-local tokenizer (MiniLM's) counts a passage cut between words from the unit's own
    tokens: every passage equals the one counted by tokenizing it again (text, span, count), on
    texts with control characters, no-break spaces, CJK, accents, special tokens and a word
    longer than a window, and on every real paper in ../shared (PaddleOCR-VL, MinerU)."""
    from sheaf.transform.chain import process_paper

    ld = embedder.load()
    units = [body("P1", f"s{i}", t, ("Results", f"Part {i}")) for i, t in enumerate(TRICKY)]
    papers = [(units, [], "Endochondral bone regeneration")]
    for path in [*sorted(shared_data.glob("paddleocr_vl/*/result.json")),
                 *sorted(shared_data.glob("mineru/*/content_list.json"))]:
        out = process_paper(path.parent, path.parent.name)
        papers.append((out.body_units, out.object_units, out.paper.title))
    assert len(papers) > 10
    try:
        fast = [embedder.build_passages(*p) for p in papers]
        ld.word_local = False
        slow = [embedder.build_passages(*p) for p in papers]
    finally:
        ld.word_local = True
    assert fast == slow
    assert sum(len(ps) for ps in fast) > 500 and max(p.n_tokens for ps in fast for p in ps) == 256



@contextmanager
def counting_tokenizer(embedder) -> Iterator[list[list[str]]]:
    """The embedder's tokenizer, wrapped for the block: each call's texts appended to the list
    yielded (one list a call, `encode` or `encode_batch`)."""
    ld = embedder.load()
    real = ld.tokenizer
    calls: list[list[str]] = []

    class Counting:
        def encode(self, text, add_special_tokens=True):
            calls.append([text])
            return real.encode(text, add_special_tokens=add_special_tokens)

        def encode_batch(self, texts, add_special_tokens=True):
            calls.append(list(texts))
            return real.encode_batch(texts, add_special_tokens=add_special_tokens)

    ld.tokenizer = Counting()
    try:
        yield calls
    finally:
        ld.tokenizer = real


def test_a_passage_cut_between_words_is_not_tokenized_again(embedder):
    """One tokenizer call for a paper's units and their contexts (a batch), none for a passage: a
    long unit of words costs 1 call of 2 texts, not 3 calls + one per passage (the context was
    tokenized twice, then once in a call of its own); a cut inside a run without whitespace is
    still tokenized again."""
    with counting_tokenizer(embedder) as calls:
        ps = embedder.passages_for(body("P1", "s1", numbered_words(2000)), title="Paper")
        words = list(calls)
        calls.clear()
        cut = embedder.passages_for(body("P1", "s2", "x," * 500), title=None)
        cuts = list(calls)
        calls.clear()
        paper = embedder.build_passages([body("P1", f"s{i}", numbered_words(300)) for i in range(4)], title="Paper")
    assert len(ps) > 5 and [len(c) for c in words] == [2]
    assert len(cut) > 1 and [len(c) for c in cuts] == [2] + [1] * len(cut)  # as above, then each window cut inside the run
    assert [len(c) for c in calls] == [4 + 1]  # four units' texts and their one context, in one call
    assert paper == [p for i in range(4) for p in embedder.passages_for(body("P1", f"s{i}", numbered_words(300)),
                                                                           title="Paper")]


@pytest.mark.parametrize("change, local", [
    ({}, True),
    ({"normalizer": None}, True),
    ({"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"},
                                                         {"type": "StripAccents"}]}}, True),
    ({"normalizer": {"type": "NFKC"}}, False),  # maps some characters to spaces
    ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}]}}, True),
    ({"pre_tokenizer": {"type": "Metaspace", "replacement": "▁"}}, False),  # SentencePiece
    ({"pre_tokenizer": {"type": "ByteLevel"}}, False),  # GPT-2 / RoBERTa: a word's tokens hold its space
    ({"pre_tokenizer": None}, False),
    ({"model": {"type": "BPE"}}, False),
    ({"added_tokens": [{"content": "new york"}]}, False),
])
def test_word_local_accepts_only_tokenizers_that_split_at_whitespace(embedder, change, local):
    from sheaf.vectors.identity import word_local

    cfg = json.loads(embedder.load().tokenizer.to_str())
    cfg.update(change)
    assert word_local(json.dumps(cfg)) is local
    assert word_local("not json") is False


def test_the_passages_of_several_papers_come_from_one_tokenizer_call(embedder):
    """`build_passages_of_papers`: the unit texts and distinct contexts of all the papers in one
    tokenizer call, and for each paper exactly the passages `build_passages` gives it alone
    (a paper without units gets none; two papers sharing a title share one context)."""
    papers = [([body(f"P{i}", f"s{j}", numbered_words(120 + 150 * j)) for j in range(3)], [],
               "Shared title" if i < 2 else f"Paper {i}") for i in range(4)]
    papers.append(([], [], "Empty"))
    alone = [embedder.build_passages(u, o, t) for u, o, t in papers]
    with counting_tokenizer(embedder) as calls:
        together = embedder.build_passages_of_papers(papers)
    assert together == alone and [len(ps) for ps in together][-1] == 0 and all(together[:4])
    assert [len(c) for c in calls] == [4 * 3 + 3]  # 12 unit texts, 3 distinct contexts


def test_a_stop_between_batches_ends_the_encoding_there(embedder):
    """A build's stop check runs before each batch: what it raises ends the encoding at once
    (the PaperForge plugin kills a build 5 s after asking it to stop)."""
    from sheaf.core.progress import StopRequested

    calls: list[int] = []

    def stop() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise StopRequested("stopped between two batches")

    before = embedder.encoded_count
    with pytest.raises(StopRequested):
        embedder.encode([f"passage number {i} about cartilage" for i in range(300)], between_batches=stop)
    assert len(calls) == 2 and embedder.encoded_count - before < 300  # the batches after the stop never ran


def test_paper_first_batches_finish_the_papers_in_order_with_similar_lengths():
    """The schedule of a group's texts: every text once, batches of at most `step`, each led by
    the earliest unfinished paper's longest text and filled with texts no longer than it; the
    first paper's texts go ahead of a later paper's of the same length."""
    from sheaf.vectors.embedder import paper_first_batches

    owners = [0] * 10 + [1] * 10 + [2] * 10
    lengths = [100] * 30
    batches = paper_first_batches(owners, lengths, 8)
    assert sorted(i for b in batches for i in b) == list(range(30)) and all(len(b) <= 8 for b in batches)
    done = [max(n for n, b in enumerate(batches) if any(owners[i] == p for i in b)) for p in range(3)]
    assert done == [1, 2, 3]  # paper 0 after 2 batches of 4, not after the group's last
    # mixed lengths: a batch never holds a text longer than the one leading it
    lengths = [(37 * i) % 250 + 5 for i in range(30)]
    for b in paper_first_batches(owners, lengths, 8):
        assert all(lengths[i] <= lengths[b[0]] for b in [b] for i in b)


def test_embed_papers_hands_out_each_paper_as_soon_as_its_vectors_are_there(embedder, conn):
    """`embed_papers`: the papers in their order, the first one after the first batch of three
    (not after the whole group), the same vectors as `embed`, a text two papers share encoded
    once and counted for the first, the cache read once and written as papers come out."""
    papers = [(f"P{n}", embedder.build_passages(
        [body(f"P{n}", f"s{j}", "a text two papers share" if j == 23 and n else f"{WORDS[j % len(WORDS)]} paper {n} unit {j:02d}")
         for j in range(24)], title="Title")) for n in range(3)]
    assert all(len(ps) == 24 for _, ps in papers)
    cache = SqliteEmbeddingCache(conn)
    calls = embedder.model_calls
    out = []
    for key, ep, seconds in embedder.embed_papers(papers, cache):
        out.append((key, ep, embedder.model_calls - calls))
        assert seconds >= 0
    assert [k for k, _, _ in out] == ["P0", "P1", "P2"]
    assert [c for _, _, c in out][0] < out[-1][2], [c for _, _, c in out]  # P0 out before the group's last batch
    for (_, ps), (_, ep, _) in zip(papers, out):
        assert np.allclose(ep.vectors, embedder.embed(ps).vectors, atol=1e-5)
    assert [ep.encoded for _, ep, _ in out] == [24, 24, 23]  # P2's last text is P1's
    again = list(embedder.embed_papers(papers, cache))
    assert [ep.encoded for _, ep, _ in again] == [0, 0, 0]


def test_torch_on_a_cpu_pads_batches_to_few_shapes_with_the_same_vectors(embedder):
    """On a CPU each batch is padded to a multiple of 32 tokens (few shapes: oneDNN compiles and
    keeps few kernels, the build's memory stays flat); the vectors are those of unpadded batches."""
    from sheaf.vectors.embedder import _PAD_MULTIPLE

    ld = embedder.load()
    if ld.model is None or embedder.resolved_device != "cpu":
        pytest.skip("torch on a CPU only")
    texts = ["bone density", "a passage of some more words about fracture risk in a cohort " * 3]
    features = ld.model.preprocess(texts)
    assert features["input_ids"].shape[1] % _PAD_MULTIPLE == 0
    padded = embedder.torch_encode(ld.model, texts)
    kwargs = ld.model[0].processing_kwargs["text"]
    kwargs.pop("pad_to_multiple_of")
    try:
        plain = embedder.torch_encode(ld.model, texts)
        assert ld.model.preprocess(texts)["input_ids"].shape[1] % _PAD_MULTIPLE != 0
    finally:
        kwargs["pad_to_multiple_of"] = _PAD_MULTIPLE
    assert float(np.sum(padded * plain, axis=1).min()) > 0.999999
