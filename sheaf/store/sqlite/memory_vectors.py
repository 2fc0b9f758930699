"""The warm server's vector engine: a collection's vectors held in memory as a float32 matrix (with
an int8 prefilter), answering exactly what sqlite-vec answers (candidates by ``X @ q``, then
sqlite-vec's own cosine arithmetic reproduced bit for bit, checked against sqlite-vec when a matrix
is loaded; ties by rowid), only faster. Refreshed when the index changes."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from sheaf.store.records import VectorHit
from sheaf.store.sqlite.db import connect, connected_to
from sheaf.store.sqlite.memory_bm25 import wait_for_loads
from sheaf.store.sqlite.reader import vector_search
from sheaf.store.sqlite.schema import VECTORS_EPOCH, collections
from sheaf.vectors.identity import QueryVector

# The query's uint8 codes are round(q / s_q) + 64 in [0, 128] (uint8 x int8 is MLAS's fast
# kernel). Not the full [0, 255]: without AVX-VNNI, MLAS multiplies with VPMADDUBSW, which
# saturates a pair of products past 32767; 2·128·127 = 32512 never does, on any CPU.
_INT8_ZERO_POINT = 64
_INT8_SLACK = 4e-6  # × ||q||: float32 rounding of the bounds (< 1e-6 ||q||, see `_Int8Scan`)


def _f32_sums(P: Any) -> Any:
    """Each row of `P` summed in float32 strictly in order (a C loop's ``s += p[i]``): along
    the rows for few of them, else across them, one column at a time (bit for bit the same)."""
    import numpy as np

    if len(P) <= 128:
        return np.cumsum(P, axis=1, dtype=np.float32)[:, -1]
    cols = np.ascontiguousarray(P.T, dtype=np.float32)
    acc = cols[0].copy()
    for c in cols[1:]:
        acc += c
    return acc


def _vec0_cosine(rows: Any, q: Any, sq_norms: Any = None) -> Any:
    """sqlite-vec's cosine distance, bit for bit: float32 products summed in order (dot and
    both squared norms), then ``1 - dot / (sqrt(a) * sqrt(b))`` in double, returned as float.
    `sq_norms`: the rows' squared norms so summed, if known (`_Matrix.sq_norms`)."""
    import numpy as np

    with np.errstate(over="ignore", under="ignore"):  # as in C: inf, subnormals
        dot = _f32_sums(rows * q)
        a = _f32_sums(rows * rows) if sq_norms is None else sq_norms
        b = np.cumsum(q * q, dtype=np.float32)[-1]
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero vector: NaN (vec0: NULL)
        d = 1.0 - dot.astype(np.float64) / (np.sqrt(a.astype(np.float64)) * np.sqrt(np.float64(b)))
    return d.astype(np.float32).astype(np.float64)


#: Norms (of rows and of the query) within which float32 products and squares of a vector's
#: components neither overflow nor lose more than dim·2**-150 absolute to underflow (relative
#: to ||x||·||q|| >= 1e-36: < dim·1e-9, far inside the tolerance's slack, see `_rerank_tolerance`).
_NORM_RANGE = (1e-18, 1e18)


def _rerank_tolerance(qn: float, dim: int, *, float32_scan: bool = False) -> float:
    """How far below the k-th best (on the cos·||q|| scale) a row must be for the candidate
    scan to drop it: the most sqlite-vec's float32 arithmetic can move two rows' order.

    sqlite-vec computes ``1 - dot / (sqrt(a) * sqrt(b))`` from float32 sums in order. Against
    the true cos·||q||, per row: the dot product is off by at most ~dim·2**-24·||q|| (the
    products' and sums' roundings, relative to sum |x_i q_i| <= ||x|| ||q||), sqrt(a) by half
    of a's relative error, at most ~dim·2**-24 for every row not in `_Matrix.unbounded` (checked
    at load), and b (the query's) scales every row alike: ~1.5·dim·2**-24·||q|| per row, ~3·dim·2**-24
    for two rows, plus the final rounding of the distance to float (2**-23: rows it would make
    equal fall to the rowid order). 4·dim·2**-24 covers all of it; 1e-4 (its value up to
    ~400 dimensions) is kept as a floor. The float32 scan's own ``X @ q`` approximation carries
    float32 errors of the same size (~dim·2**-24·||q|| per row, for both the row it drops and the
    rows it keeps): twice the band. The +1e-6 keeps a floor for tiny queries."""
    factor = 8 if float32_scan else 4
    return max(1e-4, factor * dim * 2.0 ** -24) * qn + 1e-6


def _degenerate_rows(X: Any, sq_norms: Any, *, chunk: int = 16384) -> Any:
    """bool (n,): the rows whose sqlite-vec cosine `_rerank_tolerance` does not cover: zero
    rows (no distance: NULL), norms outside `_NORM_RANGE` (float32 squares or products underflow
    or overflow), non-finite rows, and rows whose float32 squared norm (`sq_norms`, summed as
    sqlite-vec sums it) is off the float64 one by more than dim·2**-24 relative (more than a
    float32 sum in order can be off without underflow: subnormal squares). sqlite-vec's cosine of
    such a row may be far from the true one (even below -1): they are always candidates, ranked
    by their exact distance only."""
    import numpy as np

    n, dim = X.shape
    out = np.zeros(n, dtype=bool)
    lo, hi = _NORM_RANGE[0] ** 2, _NORM_RANGE[1] ** 2
    rel = max(1e-6, dim * 2.0 ** -24)
    for i in range(0, n, chunk):
        x = X[i:i + chunk].astype(np.float64)
        a64 = np.einsum("ij,ij->i", x, x)
        a32 = sq_norms[i:i + chunk].astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            ok = (a64 >= lo) & (a64 <= hi) & (np.abs(a32 - a64) <= rel * a64)
        out[i:i + chunk] = ~ok
    return out


class _Int8Scan:
    """The matrix quantized to int8, one scale per row, scanned by onnxruntime's integer
    matrix product: a proven bound on every row's cosine for the price of reading n x dim
    bytes (191k x 384: ~4 ms on one core, against ~25 ms for the float32 ``X @ q``).

    Row j is stored as int8 codes c_j with x̂_j = s_j c_j, s_j = max|x_j| / 127; the query
    as uint8 codes u with q̂ = s_q (u - 64), s_q = max|q| / 64. onnxruntime returns the
    exact integer dots I_j = (u - 64)·c_j, so q̂·x̂_j = s_q s_j I_j, and by Cauchy-Schwarz,
    with e_j = ||x_j - x̂_j|| (measured at load) and ||x̂_j|| <= ||x_j|| + e_j:

        |q·x_j - q̂·x̂_j| = |q·(x_j - x̂_j) + (q - q̂)·x̂_j| <= ||q|| e_j + ||q - q̂|| (||x_j|| + e_j)

    Divided by ||x_j||, on the float32 scan's scale (``(X @ q) * inv_norm`` = cosine·||q||):

        cos_j·||q|| = s_q I_j a_j ± ((||q|| + ||q - q̂||) r_j + ||q - q̂|| + slack)

    with a_j = s_j / ||x_j|| and r_j = e_j / ||x_j||, computed in float64 from the stored
    float32 vector, then stored as float32, r_j rounded up (r_j = inf for the `unbounded`
    rows: those sqlite-vec gives no finite distance, or one the tolerance does not cover, see
    `_degenerate_rows`: always candidates). The slack
    (`_INT8_SLACK` × ||q||) covers the float32 arithmetic of the bounds: a few roundings of
    relative size 2**-24 (a_j; I_j·a_j, exact I_j as float32 while dim <= 2064; ·s_q; the
    radius; ±) on quantities below (||q|| + ||q - q̂||)(1 + r_j) ~ 1.3 ||q||: < 1e-6 ||q||.

    onnxruntime holds the codes (as the session's initializer, prepacked for its kernel):
    no numpy copy is kept."""

    def __init__(self, X: Any, unbounded: Any = None, *, chunk: int = 16384) -> None:
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        n, dim = X.shape
        if n == 0 or not np.isfinite(X).all():
            raise ValueError("no rows, or non-finite values: the float32 scan serves them")
        codes = np.empty((dim, n), dtype=np.int8)  # B of A @ B: column j = row j's codes
        self.a = np.empty(n, dtype=np.float32)  # s_j / ||x_j||
        self.r = np.empty(n, dtype=np.float32)  # ||x_j - x̂_j|| / ||x_j||, rounded up
        for i in range(0, n, chunk):
            x = X[i:i + chunk]
            s = np.abs(x).max(axis=1) / np.float32(127)  # float32: the scale is what it is
            c = np.clip(np.rint(x / np.where(s > 0, s, 1)[:, None]), -127, 127)  # any codes do
            codes[:, i:i + len(x)] = c.T.astype(np.int8)
            x64, s64 = x.astype(np.float64), s.astype(np.float64)
            d = x64 - c.astype(np.float64) * s64[:, None]  # c·s is exact in float64
            e = np.sqrt(np.einsum("ij,ij->i", d, d))
            norm = np.sqrt(np.einsum("ij,ij->i", x64, x64))
            inv = np.divide(1.0, norm, out=np.zeros_like(norm), where=norm > 0)
            self.a[i:i + len(x)] = s64 * inv
            # rounded up past the float64 error (< 1e-13) and the cast to float32 (2**-24)
            r = np.nextafter((e * inv * (1 + 1e-9)).astype(np.float32), np.float32(np.inf))
            r[norm == 0] = np.inf
            self.r[i:i + len(x)] = r
        del x, c, x64, d
        if unbounded is not None:
            self.r[unbounded] = np.inf
        # a probe of the kernel (a few columns), checked once the session is built
        probe = np.random.default_rng(7).integers(0, 2 * _INT8_ZERO_POINT + 1, (1, dim), dtype=np.uint8)
        cols = np.unique(np.linspace(0, n - 1, min(n, 2048)).astype(np.int64))
        want = (probe.astype(np.int32) - _INT8_ZERO_POINT) @ codes[:, cols].astype(np.int32)
        init = numpy_helper.from_array(codes, "X")
        del codes  # onnxruntime keeps the only copy
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["q", "X", "zp"], ["dots"])], "sheaf_int8_scan",
            [helper.make_tensor_value_info("q", TensorProto.UINT8, [1, dim])],
            [helper.make_tensor_value_info("dots", TensorProto.INT32, [1, n])],
            initializer=[init, numpy_helper.from_array(np.array(_INT8_ZERO_POINT, np.uint8), "zp")])
        del init
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = min(model.ir_version, 8)  # any onnxruntime >= 1.10 reads it
        blob = model.SerializeToString()
        del model, graph
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = 2  # the lexical leg has mostly finished by then; memory-bound: 6.0 -> 4.6 ms at 191k rows
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.add_session_config_entry("session.inter_op.allow_spinning", "0")
        self.session = ort.InferenceSession(blob, sess_options=so, providers=["CPUExecutionProvider"])
        # onnxruntime's Python session keeps the model's bytes (a second copy of the codes)
        # only to rebuild itself on another provider after a failed run: no fallback, no copy
        self.session.disable_fallback()
        if getattr(self.session, "_model_bytes", None) is blob:
            self.session._model_bytes = None
        del blob
        got = self.session.run(None, {"q": probe})[0]
        if got.shape != (1, n) or not np.array_equal(got[0, cols], want[0]):
            raise RuntimeError("onnxruntime's integer product disagreed with numpy's")

    def bounds(self, q: Any, qn: float) -> tuple[Any, Any] | None:
        """(approximation, radius), float32 (n,): cos_j·||q|| lies within approximation ± radius
        (None for a query too small or too large for float32 scales; `qn`: float32's ||q||)."""
        import numpy as np

        q64 = q.astype(np.float64)
        zp = _INT8_ZERO_POINT
        sq = float(np.float32(np.abs(q64).max() / zp))  # exact in float32 and float64
        if not (sq > 1e-30 and qn < 1e30):
            return None
        u = np.clip(np.rint(q64 / sq), -zp, zp)
        eq = float(np.sqrt(np.square(q64 - u * sq).sum())) * (1 + 1e-9)  # ||q - q̂||, rounded up
        qn64 = float(np.sqrt(np.square(q64).sum())) * (1 + 1e-9)  # ||q||, not float32's estimate
        dots = self.session.run(None, {"q": (u + zp).astype(np.uint8).reshape(1, -1)})[0][0]
        approx = np.multiply(dots, self.a, dtype=np.float32)
        approx *= np.float32(sq)
        rad = self.r * np.float32(qn64 + eq)
        rad += np.float32(eq + _INT8_SLACK * qn64)
        return approx, rad


def _kth_largest(v: Any, k: int) -> Any:
    """The k-th largest of `v` (1 <= k <= len(v)) without a partition of all of it: the
    k-th largest of block maxima is a value with at least k elements at or above it (one per
    block), so the k-th largest lies among the (few) elements at or above it."""
    import numpy as np

    m = len(v)
    blocks = min(8 * k, m // 16)
    if blocks >= 4 * k:
        w = m // blocks
        maxima = v[:blocks * w].reshape(blocks, w).max(axis=1)
        v = v[v >= np.partition(maxima, blocks - k)[blocks - k]]
        m = len(v)
    return np.partition(v, m - k)[m - k]


class _Matrix:
    """One collection's vectors in memory: float32 as stored (the exact re-rank), and, with
    onnxruntime, an `_Int8Scan` that finds the candidates (else a float32 ``X @ q`` does)."""

    def __init__(self, identity: Any, rowids: Any, X: Any, paper_codes: Any, papers: list[str],
                 signature: tuple[Any, ...], *, int8: bool = True) -> None:
        import numpy as np

        self.identity = identity
        self.rowids = rowids  # int64 (n,)
        self.X = X  # float32 (n, dim), as stored
        with np.errstate(over="ignore", under="ignore"):  # `unbounded` rows: not used
            norms = np.linalg.norm(X, axis=1) if len(X) else np.zeros(0, np.float32)
            self.inv_norm = np.where(norms > 0, 1.0 / np.maximum(norms, 1e-30), 0.0).astype(np.float32)
        # sqlite-vec's squared norms (float32, summed in order): half of each exact distance
        with np.errstate(over="ignore", under="ignore"):  # inf / subnormal: as sqlite-vec's
            self.sq_norms = np.concatenate([_f32_sums(X[i:i + 16384] * X[i:i + 16384])
                                            for i in range(0, len(X), 16384)] or [np.zeros(0, np.float32)])
        # rows sqlite-vec gives no finite distance (NULL: zero vectors): candidates always,
        # so that a NaN among the k nearest declines the query (see `ranked`)
        self.null_rows = (self.sq_norms == 0) if (self.sq_norms == 0).any() else None
        # those and the rows whose sqlite-vec cosine is too far from the true one for the
        # tolerance (tiny or huge norms): candidates always, no bound (`_degenerate_rows`)
        bad = _degenerate_rows(X, self.sq_norms)
        self.unbounded = bad if bad.any() else None
        self.pcode = paper_codes  # int32 (n,)
        self.papers = papers
        self.code = {p: i for i, p in enumerate(papers)}
        self.signature = signature
        self.int8: _Int8Scan | None = None
        self.int8_error: str | None = None  # why the float32 scan serves (int8 was asked for)
        if int8 and len(X):
            try:
                self.int8 = _Int8Scan(X, self.unbounded)
            except Exception as e:  # noqa: BLE001 - no onnxruntime/onnx, or no fast kernel: float32
                self.int8_error = f"{type(e).__name__}: {e}"

    def _candidates_float32(self, q: Any, qn: float, kk: int, idx: Any) -> Any:
        """Rows (positions in `idx`, or in the matrix) that may be among the kk nearest: the
        float32 ``X @ q`` scan, within a tolerance of its kk-th best approximation."""
        import numpy as np

        with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # unbounded rows only
            approx = (self.X @ q) * self.inv_norm
        always = self.unbounded
        if always is not None:
            approx[always] = -np.inf
        if idx is not None:
            approx = approx[idx]
            always = None if always is None else always[idx]
        m = len(approx)
        kth = np.partition(approx, m - kk)[m - kk]
        keep = approx >= kth - _rerank_tolerance(qn, self.X.shape[1], float32_scan=True)
        return np.flatnonzero(keep if always is None else keep | always)

    def _candidates_int8(self, q: Any, qn: float, kk: int, idx: Any) -> Any:
        """The same guarantee from proven bounds: every row whose upper bound reaches the
        kk-th largest lower bound (less the tolerance for sqlite-vec's float32 rounding)."""
        import numpy as np

        assert self.int8 is not None
        bounds = self.int8.bounds(q, qn)
        if bounds is None:
            return self._candidates_float32(q, qn, kk, idx)
        approx, rad = bounds
        if idx is not None:
            approx, rad = approx[idx], rad[idx]
        floor = _kth_largest(approx - rad, kk) - np.float32(_rerank_tolerance(qn, self.X.shape[1]))
        return np.flatnonzero(approx + rad >= floor)

    def ranked(self, q: Any, k: int, paper_ids: Any, max_candidates: int, *,
               scan: str | None = None) -> tuple[list[int], list[float]] | None:
        """The k nearest rows as sqlite-vec ranks them: (rowids, distances), or None (more
        candidates than `max_candidates`, a zero query or one of a norm outside `_NORM_RANGE`,
        a zero vector among the k nearest). `scan` forces "int8" or "float32"."""
        import numpy as np

        q = np.ascontiguousarray(q, dtype=np.float32).reshape(-1)
        with np.errstate(over="ignore", under="ignore"):
            qn = float(np.linalg.norm(q))
        if not _NORM_RANGE[0] <= qn <= _NORM_RANGE[1]:
            # a zero vector: sqlite-vec's answer is its own business; a tiny or huge one: its
            # float32 products underflow or overflow, past what the tolerance covers
            return None
        idx = None
        if paper_ids is not None:
            codes = [c for c in (self.code.get(p) for p in paper_ids) if c is not None]
            if not codes:
                return [], []
            allowed = np.zeros(len(self.papers), dtype=bool)
            allowed[codes] = True
            idx = np.flatnonzero(allowed[self.pcode])
        m = len(self.rowids) if idx is None else len(idx)
        if m == 0:
            return [], []
        kk = min(int(k), m)
        use_int8 = self.int8 is not None if scan is None else scan == "int8"
        if use_int8 and self.int8 is None:
            raise ValueError(f"no int8 scan for this matrix: {self.int8_error}")
        cand = (self._candidates_int8 if use_int8 else self._candidates_float32)(q, qn, kk, idx)
        if len(cand) > max_candidates:
            return None
        rows = cand if idx is None else idx[cand]
        exact = _vec0_cosine(self.X[rows], q, self.sq_norms[rows])
        order = np.lexsort((self.rowids[rows], exact))[:kk]
        if not np.isfinite(exact[order]).all():
            return None  # sqlite-vec's NULL distances (zero vectors): its own business too
        return self.rowids[rows[order]].tolist(), exact[order].tolist()

    def search(self, conn: Any, q: Any, k: int, paper_ids: Any, max_candidates: int, *,
               scan: str | None = None) -> list[Any] | None:

        got = self.ranked(q, k, paper_ids, max_candidates, scan=scan)
        if got is None:
            return None
        sel, dist = got
        pt = self.identity.passages_table
        meta: dict[int, tuple[Any, ...]] = {}
        for i in range(0, len(sel), 500):
            chunk = sel[i:i + 500]
            for r in conn.execute(f"SELECT passage_rowid, passage_id, unit_id, unit_type, paper_id, ordinal "
                                  f"FROM {pt} WHERE passage_rowid IN ({','.join('?' * len(chunk))})", chunk):
                meta[r[0]] = r
        if len(meta) != len(sel):
            return None  # the index changed under us: let sqlite-vec answer
        return [VectorHit(meta[r][1], meta[r][2], meta[r][3], meta[r][4], meta[r][5], d, 1.0 - d)
                for r, d in zip(sel, dist)]


def single_thread_blas() -> None:
    """One BLAS thread for the matrix scan (unless OPENBLAS_NUM_THREADS says otherwise).
    OpenBLAS's worker threads busy-wait and meet at a barrier on every call: on 2 shared cores a
    2-thread ``X @ q`` was 3-12x slower than one thread."""
    import sys

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if "numpy" in sys.modules and os.environ["OPENBLAS_NUM_THREADS"] == "1":
        try:  # numpy already loaded OpenBLAS: limit its pool now (threadpoolctl, if present)
            from threadpoolctl import threadpool_limits

            threadpool_limits(1, user_api="blas")
        except Exception:  # noqa: BLE001 - only a speed matter
            pass


class MatrixAccelerator:
    """A vector engine (`sheaf.store.backend.VectorEngine`) for one index file: pass it to
    the index (`SqliteIndex(..., vector_engine=...)` or `Retriever.open(...)`). Thread-safe.
    Answers None (→ sqlite-vec) for a connection to another file, a collection it could not load or verify, any error, and
    while a matrix is being (re)loaded: a load runs in the background (except `matrix(...,
    wait=True)`, the server's warm-up), so a query never waits for one; during a build, whose
    every commit may change the vectors, queries are answered by sqlite-vec until the matrix
    catches up."""

    name = "matrix"

    def __init__(self, index_path: str | Path, *, busy_timeout_ms: int = 10_000,
                 max_candidates: int = 50_000, int8: bool = True) -> None:
        single_thread_blas()
        self.int8 = int8  # candidates by the int8 scan (`_Int8Scan`) when onnxruntime can
        self.path = Path(index_path).resolve()
        self.busy_timeout_ms = busy_timeout_ms
        self.max_candidates = max_candidates
        self._lock = threading.Lock()
        self._tls = threading.local()
        self._conn: Any = None
        self._file: tuple[int, int] | None = None
        self._data_version: int | None = None
        self._mats: dict[str, _Matrix] = {}
        self._loading: dict[str, threading.Thread] = {}
        self.disabled: dict[str, str] = {}  # collection key → why it is served by sqlite-vec
        self.stats = {"answered": 0, "declined": 0, "loads": 0, "load_seconds": 0.0}

    # -- freshness ----------------------------------------------------------------------------

    @staticmethod
    def _signature(conn: Any, identity: Any) -> tuple[Any, ...]:
        """The collection's state, in one statement (one snapshot): count, max and sum of the
        passage rowids, and the vectors epoch (`sheaf.store.sqlite.schema.VECTORS_EPOCH`, a token replaced
        on every vector write or delete). The rowids alone are not enough: re-embedding the
        paper that holds the highest rowids with as many passages reuses the very rowids
        (the writer allocates max + 1)."""

        return tuple(conn.execute(
            f"SELECT count(*), coalesce(max(passage_rowid), 0), coalesce(sum(passage_rowid), 0), "
            f"(SELECT value FROM meta WHERE key = ?) FROM {identity.passages_table}",
            (VECTORS_EPOCH,)).fetchone())

    def _connect(self) -> Any:

        return connect(self.path, readonly=True, busy_timeout_ms=self.busy_timeout_ms)

    def _refresh(self) -> None:
        """Called under the lock: reopen when the file was replaced; drop matrices whose
        collection changed since the last commit seen (PRAGMA data_version moved)."""
        st = os.stat(self.path)
        file_id = (st.st_dev, st.st_ino)
        if self._conn is None or file_id != self._file:
            if self._conn is not None:
                self._conn.close()
            self._conn = self._connect()
            self._file, self._data_version = file_id, None
            self._mats.clear()
            self.disabled.clear()
        dv = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if dv != self._data_version:
            self._data_version = dv
            for key, m in list(self._mats.items()):
                if self._signature(self._conn, m.identity) != m.signature:
                    del self._mats[key]
            self.disabled.clear()

    def _load(self, identity: Any, conn: Any) -> _Matrix | None:
        """Read and verify one collection's matrix over `conn` (no lock held)."""
        import numpy as np


        cols = collections(conn)
        if cols.get(identity.key) != identity:
            return None
        t0 = time.perf_counter()
        conn.execute("BEGIN")  # one snapshot: the signature matches the rows read
        try:
            sig = self._signature(conn, identity)
            rows = conn.execute(f"SELECT passage_rowid, embedding, paper_id FROM {identity.vec_table}").fetchall()
        finally:
            conn.execute("COMMIT")
        dim = identity.dimension
        rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        X = (np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), dim).copy()
             if rows else np.zeros((0, dim), np.float32))
        papers = sorted({r[2] for r in rows})
        code = {p: i for i, p in enumerate(papers)}
        pcode = np.fromiter((code[r[2]] for r in rows), dtype=np.int32, count=len(rows))
        del rows
        m = _Matrix(identity, rowids, X, pcode, papers, sig, int8=self.int8)
        why = self._verify(m, conn)
        with self._lock:
            self.stats["loads"] += 1
            self.stats["load_seconds"] = round(self.stats["load_seconds"] + time.perf_counter() - t0, 3)
            if why:
                self.disabled[identity.key] = why
        return None if why else m

    def _verify(self, m: _Matrix, conn: Any) -> str | None:
        """The matrix must answer exactly what sqlite-vec answers (ids, order, distances):
        checked on a few queries, with and without a paper filter."""
        import numpy as np


        if len(m.rowids) == 0 or self._signature(conn, m.identity) != m.signature:
            return None  # nothing to check, or changed already (the next refresh drops it)
        rng = np.random.default_rng(12345)
        self._tls.bypass = True
        try:
            for i in range(3):
                base = m.X[int(rng.integers(len(m.X)))]
                q = (base + rng.standard_normal(base.shape).astype(np.float32) * 0.05 * i).astype(np.float32)
                qv = QueryVector(m.identity, q / max(float(np.linalg.norm(q)), 1e-12), "")
                papers = None if i < 2 else m.papers[: max(1, len(m.papers) // 3)]
                want = vector_search(conn, qv, 25, paper_ids=papers)
                got = m.search(conn, qv.vector, 25, papers, self.max_candidates)
                if got is not None and got != want:
                    return "the in-memory matrix disagreed with sqlite-vec on a check query"
        finally:
            self._tls.bypass = False
        return None

    def _install(self, identity: Any, file_id: Any) -> None:
        """Background loader: load over its own connection, install if still current."""
        conn = None
        try:
            conn = self._connect()
            m = self._load(identity, conn)
            with self._lock:  # install only what matches the latest commit seen here
                if (m is not None and file_id == self._file and self._conn is not None
                        and self._signature(self._conn, identity) == m.signature):
                    self._mats[identity.key] = m
        except Exception as e:  # noqa: BLE001 - sqlite-vec keeps answering
            with self._lock:
                self.disabled[identity.key] = f"loading the vector matrix failed: {type(e).__name__}: {e}"
        finally:
            if conn is not None:
                conn.close()
            with self._lock:
                self._loading.pop(identity.key, None)

    def matrix(self, identity: Any, *, wait: bool = False) -> _Matrix | None:
        """The collection's current matrix, or None while it is (re)loaded in the background
        (`wait=True`: load it now)."""
        with self._lock:
            self._refresh()
            if identity.key in self.disabled:
                return None
            m = self._mats.get(identity.key)
            if m is not None and m.identity == identity:
                return m
            t = self._loading.get(identity.key)
            if t is None:
                t = threading.Thread(target=self._install, args=(identity, self._file), daemon=True,
                                     name=f"sheaf-matrix-{identity.key}")
                self._loading[identity.key] = t
                t.start()
        if wait:
            t.join()
            with self._lock:
                return self._mats.get(identity.key)
        return None

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait (bounded) for background loads to finish; True when none is left."""

        return wait_for_loads(self._lock, self._loading, timeout)

    # -- the hook -------------------------------------------------------------------------------

    def __call__(self, conn: Any, query: Any, k: int, paper_ids: Any) -> list[Any] | None:
        if getattr(self._tls, "bypass", False):
            return None
        hits = None
        try:

            if connected_to(conn, self.path):
                m = self.matrix(query.identity)
                if m is not None:
                    hits = m.search(conn, query.vector, k, paper_ids, self.max_candidates)
        except Exception:  # noqa: BLE001 - never worse than no accelerator
            hits = None
        with self._lock:
            self.stats["answered" if hits is not None else "declined"] += 1
        return hits

    def loaded(self) -> dict[str, int]:
        with self._lock:
            return {k: len(m.rowids) for k, m in self._mats.items()}

    def close(self) -> None:
        self.wait_idle(60.0)
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            self._mats.clear()
