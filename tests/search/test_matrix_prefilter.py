"""The in-memory matrix's int8 prefilter (`sheaf.serve.server._Int8Scan`): its bounds are proven
(true cosine always within them), and the candidates they select re-rank to exactly what
the float32 scan, a brute-force exact ranking and sqlite-vec answer (ids, order, distances),
edge cases included; without onnxruntime the float32 scan answers the same."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from sheaf.store.sqlite import reader as rd
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite.memory_vectors import (
    MatrixAccelerator,
    _f32_sums,
    _Int8Scan,
    _kth_largest,
    _Matrix,
    _vec0_cosine,
)
from sheaf.vectors.identity import ModelIdentity, QueryVector

DIM = 48
IDENT = ModelIdentity("test/int8-prefilter", "e" * 64, DIM, True, 128, "{text}")


def _hard_rows(rng: np.random.Generator, n: int, dim: int, zero_rows: bool = False) -> np.ndarray:
    """Rows that make a prefilter's life hard: a shared direction (high, close cosines), norms
    over six decades, runs of exact duplicates, near-duplicates (a few ulps apart), rows with
    one dominant component (coarse int8 scale), and optionally zero rows."""
    X = rng.standard_normal((n, dim)) + 1.5 * rng.standard_normal(dim)
    X *= 10.0 ** rng.uniform(-3, 3, (n, 1))
    spiky = rng.choice(n, n // 20, replace=False)
    X[spiky, rng.integers(0, dim, len(spiky))] *= 40
    X = X.astype(np.float32)
    for a in range(0, n - 30, max(n // 9, 31)):
        X[a + 1:a + 9] = X[a]  # exact duplicates: ties broken by rowid
        X[a + 9:a + 14] = X[a] * np.float32(1 + 2 ** -22)  # same cosine, a few ulps away
        X[a + 14] = np.nextafter(X[a], np.float32(np.inf))
    if zero_rows:
        X[rng.choice(n, 5, replace=False)] = 0.0
    return X


def _banded_rows(rng: np.random.Generator, n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose cosines with a direction u all lie within ~1e-4 of each other (far less
    than the int8 error), and u: only a sound bound keeps the true nearest among the
    candidates; a bound a few times too tight misses some."""
    u = rng.standard_normal(dim)
    u /= np.linalg.norm(u)
    V = rng.standard_normal((n, dim))
    V -= np.outer(V @ u, u)
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    X = u + 0.5 * (1 + 1e-3 * rng.uniform(-1, 1, (n, 1))) * V
    X *= 10.0 ** rng.uniform(-2, 2, (n, 1))
    return X.astype(np.float32), u.astype(np.float32)


def _tight_rows(rng: np.random.Generator, n_plus: int, n_minus: int, dim: int = DIM,
                delta: float = 0.47) -> tuple[np.ndarray, np.ndarray]:
    """Rows on which the int8 bound is almost attained, and their query q (a sign vector):
    each row is s·(c + δ·sign(q)) off its first component, c its int8 codes, so its whole
    quantization error lies along q. The "plus" rows (+δ) have codes 22 lower in q·c than
    the "minus" rows (-δ) yet a higher true cosine: their upper bounds exceed the minus
    rows' lower bounds by ~3% of the bound only: a bound 3% too tight misses some of them."""
    sg = np.where(rng.random(dim) < 0.5, -1.0, 1.0)
    sg[0] = 1.0
    rows = []
    for j in range(n_plus + n_minus):
        plus = j < n_plus
        agree = np.zeros(dim - 1, dtype=bool)
        agree[rng.choice(dim - 1, (dim - 1) // 2, replace=False)] = True
        mag = np.full(dim - 1, 50.0)
        # 11 pairs (an agreeing and a disagreeing component): q·c -22 (plus) or +22 (minus),
        # the squared norm +22 either way
        a_idx = rng.choice(np.flatnonzero(agree), 11, replace=False)
        d_idx = rng.choice(np.flatnonzero(~agree), 11, replace=False)
        mag[a_idx] += -1 if plus else 1
        mag[d_idx] += 1 if plus else -1
        c = np.where(agree, sg[1:], -sg[1:]) * mag
        rows.append(np.concatenate([[127.0], c + delta * sg[1:] * (1 if plus else -1)]) * 0.01)
    order = rng.permutation(len(rows))
    return np.array(rows, dtype=np.float32)[order], (3 * sg).astype(np.float32)


def _queries(rng: np.random.Generator, X: np.ndarray, count: int):
    for i in range(count):
        if i % 4 == 0:
            q = X[(i * 131) % len(X)].copy()  # a query equal to a row (a duplicate run's head, often)
        elif i % 4 == 1:
            q = X[(i * 71) % len(X)] + rng.standard_normal(X.shape[1]).astype(np.float32) * 1e-3 * \
                np.abs(X[(i * 71) % len(X)]).max()
        elif i % 4 == 2:
            q = rng.standard_normal(X.shape[1])
            q[rng.integers(X.shape[1])] *= 30  # one dominant component: a coarse query scale
        else:
            q = rng.standard_normal(X.shape[1]) * 10.0 ** rng.uniform(-4, 4)
        yield np.asarray(q, dtype=np.float32)


def _matrix(X: np.ndarray, papers: int, *, int8: bool = True) -> _Matrix:
    n = len(X)
    pcode = (np.arange(n) * 7 % papers).astype(np.int32)
    m = _Matrix(IDENT, np.arange(1, n + 1, dtype=np.int64), X, pcode, [f"P{i:03d}" for i in range(papers)],
                (n, n, 0), int8=int8)
    assert (m.int8 is not None) == int8, m.int8_error
    return m


def _brute_force(m: _Matrix, q: np.ndarray, k: int, paper_ids) -> tuple[list[int], list[float]] | None:
    """sqlite-vec's ranking over every row (exact distances, ties by rowid)."""
    rows = np.arange(len(m.rowids))
    if paper_ids is not None:
        rows = rows[np.isin(m.pcode, [m.code[p] for p in paper_ids if p in m.code])]
    exact = _vec0_cosine(m.X[rows], q)
    order = np.lexsort((m.rowids[rows], exact))[:k]
    if not np.isfinite(exact[order]).all():
        return None
    return m.rowids[rows[order]].tolist(), exact[order].tolist()


def test_f32_sums_are_sequential_float32_sums():
    rng = np.random.default_rng(5)
    for n in (1, 128, 129, 700):
        P = (rng.standard_normal((n, 384)) * 10.0 ** rng.uniform(-6, 6, (n, 1))).astype(np.float32)
        assert np.array_equal(_f32_sums(P), np.cumsum(P, axis=1, dtype=np.float32)[:, -1])


def test_kth_largest():
    rng = np.random.default_rng(6)
    for m, k in ((10, 1), (10, 10), (5000, 1), (5000, 37), (5000, 300), (5000, 5000), (100_000, 120)):
        v = rng.standard_normal(m).astype(np.float32)
        v[rng.choice(m, m // 10)] = v[0]  # ties
        v[rng.choice(m, m // 50)] = -np.inf  # rows without a bound
        assert _kth_largest(v, k) == np.partition(v, m - k)[m - k]
    v = np.sort(rng.standard_normal(50_000).astype(np.float32))  # clustered: all top in one block
    assert _kth_largest(v, 200) == v[-200]


def test_int8_bounds_hold():
    rng = np.random.default_rng(1)
    for dim in (DIM, 384):
        X = _hard_rows(rng, 3000, dim, zero_rows=True)
        scan = _Int8Scan(X)
        X64 = X.astype(np.float64)
        norms = np.linalg.norm(X64, axis=1)
        for q in _queries(rng, X, 24):
            q64 = q.astype(np.float64)
            qn = float(np.linalg.norm(q))
            approx, rad = scan.bounds(q, qn)
            ok = norms > 0
            true = (X64[ok] @ q64) / norms[ok]  # cosine × ||q||, in float64
            err = np.abs(true - approx[ok].astype(np.float64))
            assert (err <= rad[ok]).all(), float((err - rad[ok]).max())
            assert np.isinf(rad[~ok]).all()  # zero rows: no bound, always candidates
            # and useful: a few % of the cosine's range (more for a query with one dominant
            # component: its quantization step is coarse)
            assert np.median(rad[ok]) < 0.1 * qn


def test_int8_prefilter_answers_what_float32_and_brute_force_answer():
    rng = np.random.default_rng(2)
    for n, papers in ((2500, 40), (300, 7)):
        X = _hard_rows(rng, n, DIM)
        m = _matrix(X, papers)
        for i, q in enumerate(_queries(rng, X, 60)):
            k = int(rng.choice([1, 2, 5, 9, 10, 14, 15, 40, 120, n - 3, n, n + 50]))
            paper_ids = None if i % 3 else [f"P{j:03d}" for j in rng.choice(papers, int(rng.integers(1, 5)),
                                                                             replace=False)] + ["absent"]
            want = _brute_force(m, q, k, paper_ids)
            got8 = m.ranked(q, k, paper_ids, 10**9, scan="int8")
            got32 = m.ranked(q, k, paper_ids, 10**9, scan="float32")
            assert want is not None and got8 == got32 == want, (n, i, k, paper_ids)
        assert m.ranked(X[0], 5, ["absent"], 10**9) == ([], [])
        # a query far from everything (the opposite of a row): still exact
        q = -X[n // 2]
        assert m.ranked(q, 10, None, 10**9, scan="int8") == _brute_force(m, q, 10, None)
    X, u = _banded_rows(rng, 2000, DIM)
    m = _matrix(X, 10)
    for i in range(12):
        q = (u + rng.standard_normal(DIM).astype(np.float32) * 1e-4) * np.float32(10.0 ** rng.uniform(-2, 2))
        k = [1, 10, 100, 500][i % 4]
        paper_ids = None if i % 3 else ["P003", "P007"]
        want = _brute_force(m, q, k, paper_ids)
        assert m.ranked(q, k, paper_ids, 10**9, scan="int8") == m.ranked(q, k, paper_ids, 10**9, scan="float32") \
            == want, (i, k)


def test_int8_prefilter_where_the_bound_is_tight():
    rng = np.random.default_rng(11)
    X, q = _tight_rows(rng, 100, 200)
    m = _matrix(X, 4)
    approx, rad = m.int8.bounds(q, float(np.linalg.norm(q)))
    X64 = X.astype(np.float64)
    true = X64 @ q.astype(np.float64) / np.linalg.norm(X64, axis=1)
    assert (np.abs(true - approx) <= rad).all() and (np.abs(true - approx) > 0.97 * rad).all()
    for k in (1, 10, 60, 100, 101, 150):
        for paper_ids in (None, ["P001", "P002"]):
            want = _brute_force(m, q, k, paper_ids)
            assert m.ranked(q, k, paper_ids, 10**9, scan="int8") == want, (k, paper_ids)
            assert m.ranked(q, k, paper_ids, 10**9, scan="float32") == want, (k, paper_ids)


def test_int8_prefilter_with_zero_rows():
    """sqlite-vec gives zero rows no distance (NULL): when one would be among the k nearest,
    both scans decline (None: sqlite-vec answers); otherwise they answer the exact ranking."""
    rng = np.random.default_rng(3)
    X = _hard_rows(rng, 800, DIM, zero_rows=True)
    m = _matrix(X, 9)
    assert m.null_rows is not None and m.null_rows.sum() == 5
    for i, q in enumerate(_queries(rng, X, 30)):
        k = int(rng.choice([1, 10, 100, 794, 795, 800]))
        paper_ids = None if i % 2 else ["P001", "P004"]
        want = _brute_force(m, q, k, paper_ids)
        got8 = m.ranked(q, k, paper_ids, 10**9, scan="int8")
        got32 = m.ranked(q, k, paper_ids, 10**9, scan="float32")
        assert got8 == got32 == want, (i, k, paper_ids)
    assert m.ranked(X[1], 800, None, 10**9) is None


def _degenerate_rows(rng: np.random.Generator, dim: int, n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Rows all near a unit query q (cosine ~0.99), and rows whose float32 squared norm
    underflows (norm ~1e-22: subnormal squares) or is rounded badly (~1e-19), or overflows
    (~1e20): sqlite-vec's float32 cosine of those is far from their true cosine (here it ranks
    the first one nearest, with a negative distance, though its true cosine is ~0.4)."""
    q = rng.standard_normal(dim).astype(np.float32)
    q /= np.linalg.norm(q)
    X = (q + 0.15 * rng.standard_normal((n, dim)).astype(np.float32) / np.sqrt(dim)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    for row, scale in ((0, 2e-22), (n // 3, 3e-19), (n // 2, 5e-20), (n - 1, 1e20)):
        v = (0.5 * q + rng.standard_normal(dim).astype(np.float32) / np.sqrt(dim)).astype(np.float32)
        X[row] = (v * np.float32(scale)).astype(np.float32)
    return X, q


def test_rows_with_degenerate_float32_norms_are_always_candidates(tmp_path):
    """Rows whose float32 squared norm underflows, is badly rounded or overflows are outside
    what the re-rank tolerance covers: always candidates (like zero rows), re-ranked exactly."""
    rng = np.random.default_rng(1)
    X, q = _degenerate_rows(rng, 384)
    n = len(X)
    assert _vec0_cosine(X[:1], q)[0] < 0  # sqlite-vec ranks row 1 first: true cosine ~0.4
    m8, m32 = _matrix(X, 3), _matrix(X, 3, int8=False)
    assert m8.null_rows is None  # no zero rows ...
    assert sorted(np.flatnonzero(m8.unbounded).tolist()) == [0, n // 3, n // 2, n - 1]  # ... but these
    for k in (1, 5, 50):
        for paper_ids in (None, ["P000"], ["P001", "P002"]):
            want = _brute_force(m8, q, k, paper_ids)
            if paper_ids is None:
                assert want is not None and want[0][0] == 1
            assert m8.ranked(q, k, paper_ids, 10**9, scan="int8") == want, (k, paper_ids)
            assert m8.ranked(q, k, paper_ids, 10**9, scan="float32") == want, (k, paper_ids)
            assert m32.ranked(q, k, paper_ids, 10**9) == want, (k, paper_ids)
    # and through the accelerator, against sqlite-vec itself
    ident = ModelIdentity("test/degenerate", "d" * 64, 384, True, 128, "{text}")
    from tests.kits.index import write_vector_index

    path = tmp_path / "i.db"
    write_vector_index(path, X, 3, ident)
    conn = ix.open_index(path, readonly=True)
    accs = [MatrixAccelerator(path), MatrixAccelerator(path, int8=False)]
    try:
        for acc in accs:
            assert acc.matrix(ident, wait=True) is not None
        for k in (1, 5, 50):
            for paper_ids in (None, ["P001"]):
                want = _agree(conn, accs, QueryVector(ident, q, "q"), k, paper_ids)
                if paper_ids is None:
                    assert want[0].passage_id == "u0#0"
        for acc in accs:
            assert acc.stats["answered"] == 6 and acc.stats["declined"] == 0 and not acc.disabled
    finally:
        conn.close()
        for acc in accs:
            acc.close()


def test_too_many_candidates_declines():
    X = np.tile(np.random.default_rng(4).standard_normal((1, DIM)).astype(np.float32), (500, 1))
    m = _matrix(X, 3)  # 500 identical rows: all of them candidates for any k
    assert m.ranked(X[0], 5, None, 100, scan="int8") is None
    assert m.ranked(X[0], 5, None, 100, scan="float32") is None
    assert m.ranked(X[0], 5, None, 500, scan="int8") == ([1, 2, 3, 4, 5], m.ranked(X[0], 5, None, 500)[1])


def test_without_onnxruntime_the_float32_scan_answers(monkeypatch):
    rng = np.random.default_rng(8)
    X = _hard_rows(rng, 1500, DIM)
    fast = _matrix(X, 20)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed: ImportError
    slow = _Matrix(IDENT, fast.rowids, X, fast.pcode, fast.papers, fast.signature)
    assert slow.int8 is None and "onnxruntime" in (slow.int8_error or "")
    off = _matrix(X, 20, int8=False)
    assert off.int8 is None and off.int8_error is None
    with pytest.raises(ValueError):
        off.ranked(X[0], 3, None, 10**9, scan="int8")
    for i, q in enumerate(_queries(rng, X, 20)):
        k = [1, 10, 50, 200][i % 4]
        papers = None if i % 2 else ["P002", "P011"]
        want = fast.ranked(q, k, papers, 10**9)
        assert want is not None and slow.ranked(q, k, papers, 10**9) == off.ranked(q, k, papers, 10**9) == want


# --- against sqlite-vec ---------------------------------------------------------------------------

def _agree(conn, accs, qv, k: int, paper_ids) -> list:
    """sqlite-vec's hits for `qv`; each accelerator must answer exactly the same."""
    want = rd.vector_search(conn, qv, k, paper_ids=paper_ids)
    for acc in accs:
        got = rd.vector_search(conn, qv, k, paper_ids=paper_ids, engine=acc)
        assert got == want, (k, paper_ids, acc.int8)
    return want


def _index(path, X: np.ndarray, papers: int) -> None:
    from tests.kits.index import write_vector_index

    write_vector_index(path, X, papers, IDENT)


def test_vec0_cosine_is_bit_exact_past_128_rows(tmp_path):
    """`_vec0_cosine` sums across rows when it has many (not with cumsum): still sqlite-vec's."""
    rng = np.random.default_rng(9)
    X = _hard_rows(rng, 600, DIM)
    _index(tmp_path / "i.db", X, 5)
    conn = ix.open_index(tmp_path / "i.db", readonly=True)
    for q in _queries(rng, X, 4):
        rows = conn.execute(f"SELECT passage_rowid, distance FROM {IDENT.vec_table} WHERE embedding MATCH ? "
                            "AND k = 400", (q.tobytes(),)).fetchall()
        ids = np.array([r[0] for r in rows]) - 1
        assert _vec0_cosine(X[ids], q).tolist() == [r[1] for r in rows]
    conn.close()


def _dataset(name: str, rng: np.random.Generator):
    """(rows, queries as [(vector, k, paper ids)]) for the comparison with sqlite-vec."""
    if name == "hard":
        X = _hard_rows(rng, 2000, DIM)
        qs = list(_queries(rng, X, 30))
    elif name == "tight":
        X, q = _tight_rows(rng, 100, 200)
        qs = [q * np.float32(s) for s in (1, 1e-3, 1e3)]
    else:
        X, u = _banded_rows(rng, 1500, DIM)
        qs = [u + rng.standard_normal(DIM).astype(np.float32) * 1e-4 for _ in range(6)]
    papers = 30 if name == "hard" else 6
    out = []
    for i, q in enumerate(qs):
        for k in ((int(rng.choice([1, 3, 9, 10, 15, 50, 200])),) if name == "hard" else (1, 10, 100, 150)):
            n_p = int(rng.integers(1, 6))
            ids = None if i % 3 else [f"P{j:03d}" for j in rng.choice(papers, n_p, replace=False)]
            out.append((q, k, ids))
    return X, papers, out


@pytest.mark.parametrize("name", ["hard", "tight", "banded"])
def test_accelerator_with_int8_prefilter_answers_what_sqlite_vec_answers(tmp_path, name):
    X, papers, queries = _dataset(name, np.random.default_rng(10))
    path = tmp_path / "i.db"
    _index(path, X, papers)
    conn = ix.open_index(path, readonly=True)
    accs = [MatrixAccelerator(path), MatrixAccelerator(path, int8=False)]
    mats = [a.matrix(IDENT, wait=True) for a in accs]
    assert mats[0] is not None and mats[0].int8 is not None
    assert mats[1] is not None and mats[1].int8 is None
    try:
        for i, (q, k, ids) in enumerate(queries):
            _agree(conn, accs, QueryVector(IDENT, q, "q"), k, ids)
        for acc in accs:
            assert acc.stats["answered"] == len(queries) and acc.stats["declined"] == 0 and not acc.disabled
    finally:
        conn.close()
        for acc in accs:
            acc.close()
