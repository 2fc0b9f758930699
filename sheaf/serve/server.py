"""`sheaf serve`: a warm query server on the loopback interface (its client: `sheaf.serve.client`).

A query command run cold pays for starting Python, opening the index and (for the semantic
and hybrid modes) loading the query encoder. `sheaf serve` pays once and keeps all of it
warm; the query commands (`search`, `retrieve`, `get`, `timeline`, `grep`) ask it first and
run locally when no server answers, so its use is invisible except in speed: the server
returns the very envelope the command would have printed (both run the same service
function, `sheaf.service.queries`; only ``data.engines.served_by`` tells them apart).

Protocol (HTTP/1.1, JSON, stdlib `http.server.ThreadingHTTPServer`, loopback only):

- ``POST /v1/<command>`` with the command's typed request as JSON (`sheaf.service.requests`:
  ``request.to_dict()``; absent fields take the CLI's defaults) → ``200`` and the envelope,
  with the command's exit code in the ``X-Sheaf-Exit`` header. A `SheafError` (a body with an
  unknown or ill-typed field among them: BAD_QUERY) is an error envelope (exit 2) like the CLI
  prints; an unexpected failure is ``500`` (the client then runs the command locally, where it
  fails the same way, with the CLI's own report).
- ``GET /v1/health`` → pid, version, index, uptime, requests served, loaded matrices.
- Every request carries the ``X-Sheaf-Token`` of the discovery file.

Discovery: ``<SHEAF_HOME>/serve.json`` (mode 0600) = {host, port, pid, index_path, token,
signature, ...}, written once the server listens and is warm, removed on exit. The client
(`try_server`, stdlib only: it runs before every query command) reads it and gives up at
once (None) when it is absent, when the pid is dead (then it removes the stale file), when
the server was started for another index, model or Sheaf version (`signature`), or when
the connection is not accepted within `CONNECT_TIMEOUT` (50 ms).

Vector search in the server uses `MatrixAccelerator`: the collection's vectors held in
memory as a numpy matrix, refreshed when the index changes (``PRAGMA data_version`` per
request, then a cheap signature of the passage table). It answers exactly what sqlite-vec
answers (candidates by ``X @ q``, then sqlite-vec's own cosine arithmetic, reproduced
bit for bit and checked against sqlite-vec when a matrix is loaded; ties by rowid as
`sheaf.store.sqlite.schema.vector_search` breaks them), only faster.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf import __version__
from sheaf.core.envelope import SheafError, error, ok
from sheaf.search.retriever import BODY_WEIGHTS, OBJECT_WEIGHTS, PAPER_WEIGHTS, Retriever
from sheaf.serve.client import (
    DISCOVERY_FILE,
    LOOPBACK_HOSTS,
    SERVED_COMMANDS,
    discovery_path,
    read_discovery,
    remove_discovery,
    server_signature,
)
from sheaf.service.queries import run_query
from sheaf.service.requests import Outcome, QueryRequest, request_from_dict
from sheaf.store.select import memory_engines, open_backend
from sheaf.vectors.identity import resolve_model_path
from sheaf.vectors.query_encoder import QueryEncoder

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

__all__ = [
    "SERVED_COMMANDS", "DISCOVERY_FILE", "discovery_path", "server_signature", "read_discovery",
    "answer", "RetrieverPool", "WARM_WEIGHTS", "WarmEngines", "SheafServer", "serve", "serve_command",
]


# --- one request ---------------------------------------------------------------------------------

def answer(command: str, body: Any, retrievers: Any) -> Outcome:
    """The answer to ``POST /v1/<command>`` with JSON `body`: the typed request it describes,
    run by the query service on a Retriever of `retrievers` (a body that does not fit is the
    command's BAD_QUERY envelope, exit 2, as the CLI prints it)."""
    try:
        req: QueryRequest = request_from_dict(command, body)
    except SheafError as e:
        return Outcome(error(command, e.code, e.message, e.details), 2)
    return run_query(req, retrievers, served_by="server")


# --- open Retrievers kept between queries ------------------------------------------------------

class RetrieverPool:
    """Open `Retriever`s (each its own read-only connection) lent to one request at a time
    and kept between requests: a query then skips opening the index (connection, sqlite-vec,
    schema check) and keeps what the Retriever remembers about the index content (the vector
    collection, the papers without vectors: `Retriever._memoized`).

    A Retriever is lent again only while its index is the one a fresh open would read: the
    same file (device and inode: a file replaced or removed is reopened, or reported as a
    fresh open reports it) and no commit since it was last lent (``PRAGMA data_version``);
    otherwise it is closed and a new one opened. Its per-query state (paper fields, parsed
    titles) starts empty for every request, as a fresh Retriever's does. Thread-safe."""

    def __init__(self, settings: Settings, max_idle: int = 4, *, query_encoder: QueryEncoder | None = None,
                 lexical_engine: Any = None, vector_engine: Any = None) -> None:
        self.settings = settings
        self.query_encoder = query_encoder
        self.lexical_engine = lexical_engine
        self.vector_engine = vector_engine
        self.path = Path(settings.index_path)
        self.max_idle = max_idle
        self._idle: list[tuple[Any, tuple[int, int], int]] = []  # (retriever, file id, data_version)
        self._lock = threading.Lock()
        self.stats = {"opened": 0, "reused": 0}

    def _file_id(self) -> tuple[Any, ...] | None:
        if self.settings.index_backend != "sqlite":  # a server's database: one identity, states by `state()`
            return (self.settings.index_backend, self.settings.index_location)
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    @staticmethod
    def _data_version(r: Any) -> Any:
        if r.index.kind != "sqlite":
            return r.index.state()
        return int(r.conn.execute("PRAGMA data_version").fetchone()[0])

    def _acquire(self) -> tuple[Any, tuple[int, int] | None, int | None]:
        fid = self._file_id()
        while True:
            with self._lock:
                item = self._idle.pop() if self._idle else None
            if item is None:
                break
            r, rfid, dv = item
            try:
                if fid is not None and rfid == fid and self._data_version(r) == dv:
                    r.clear_paper_cache()
                    with self._lock:
                        self.stats["reused"] += 1
                    return r, rfid, dv
            except Exception:  # noqa: BLE001 - a broken connection is just replaced
                pass
            self._close(r)
        # INDEX_NOT_FOUND etc., as a command's own open; every Retriever shares the pool's engines
        r = Retriever.open(self.settings, query_encoder=self.query_encoder, lexical_engine=self.lexical_engine,
                           vector_engine=self.vector_engine)
        with self._lock:
            self.stats["opened"] += 1
        try:
            return r, fid, self._data_version(r)
        except Exception:
            self._close(r)
            raise

    @staticmethod
    def _close(r: Any) -> None:
        try:
            r.close()
        except Exception:  # noqa: BLE001
            pass

    @contextlib.contextmanager
    def lease(self) -> Any:
        """``with pool.lease() as retriever:`` a Retriever for this request alone."""
        r, fid, dv = self._acquire()
        keep = False
        try:
            yield r
            keep = True
        except SheafError:  # a refused query: the Retriever is as good as before
            keep = True
            raise
        finally:
            with self._lock:
                if keep and fid is not None and len(self._idle) < self.max_idle:
                    self._idle.append((r, fid, dv))
                    r = None
            if r is not None:
                self._close(r)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for r, _, _ in idle:
            self._close(r)


# --- the warm engines ----------------------------------------------------------------------------

#: The index's full-text tables, each with the weights the query path ranks it with: the in-memory
#: bm25 has those ready at load.
WARM_WEIGHTS = {"body_units_fts": BODY_WEIGHTS, "object_units_fts": OBJECT_WEIGHTS, "papers_fts": PAPER_WEIGHTS}

class WarmEngines:
    """What a long-lived query process keeps warm, whatever its transport (`sheaf serve`'s
    HTTP, `sheaf mcp`'s Model Context Protocol): the query encoder, the in-memory vector matrix
    and full-text tables, and the pool of open Retrievers that share them. Every query is a
    typed request run by the query service (`run`) on a leased Retriever; a rebuild of the index
    between two requests is seen by the next one (the pool's file identity and
    ``PRAGMA data_version``; the accelerators' own signatures)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.lexical, self.accelerator = memory_engines(settings, WARM_WEIGHTS)
        # One query encoder for the process's life (the export is rechecked at most every 2 s).
        self.query_encoder = QueryEncoder(settings, status_ttl=2.0)
        self.retrievers = RetrieverPool(settings, query_encoder=self.query_encoder,
                                        lexical_engine=self.lexical, vector_engine=self.accelerator)

    def run(self, req: QueryRequest) -> Outcome:
        """The envelope of one typed query request, on a leased Retriever."""
        return run_query(req, self.retrievers.lease, served_by="server")

    def health(self) -> dict[str, Any]:
        return {"matrices": self.accelerator.loaded(), "retrievers": dict(self.retrievers.stats),
                "accelerator": dict(self.accelerator.stats), "accelerator_disabled": dict(self.accelerator.disabled),
                "lexical": {"tables_bytes": self.lexical.loaded(), "stats": dict(self.lexical.stats),
                            "disabled": dict(self.lexical.disabled)}}

    def warm(self) -> list[str]:
        """Load the query encoder, the vector matrix of the configured model's collection and
        the in-memory copy of the full-text tables now, not on the first query. Returns notes
        (nothing to warm yet, fallbacks)."""
        notes: list[str] = []
        if self.settings.index_backend != "sqlite":  # the server's database answers; the encoder warms
            try:
                with self.retrievers.lease() as r:
                    name = resolve_model_path(self.settings.embedding_model)[0]
                    mine = [c for c in r.index.collections().values() if c.name == name]
            except SheafError as e:
                return [f"index not ready ({e.code}): {e.message}; it is opened on the first query"]
            if mine:
                notes += self.query_encoder.encode("warm up the query encoder", mine[0])[1]
            return notes + [f"the index is on {self.settings.index_backend}: no in-memory copies"]
        try:
            index = open_backend(self.settings, readonly=True)
        except SheafError as e:
            return [f"index not ready ({e.code}): {e.message}; it is opened on the first query"]
        try:
            name = resolve_model_path(self.settings.embedding_model)[0]
            mine = [c for c in index.collections().values() if c.name == name]
        finally:
            index.close()
        for fts in WARM_WEIGHTS:  # the full-text tables, loaded in the background meanwhile
            self.lexical.table(fts)
        with contextlib.suppress(SheafError), self.retrievers.lease():
            pass  # the first query finds an open Retriever
        if not mine:
            notes.append("no vectors of the configured model yet: semantic queries will say so")
        else:
            ident = mine[0]
            _, warnings = self.query_encoder.encode("warm up the query encoder", ident)
            notes += warnings
            if self.accelerator.matrix(ident, wait=True) is None:
                notes.append(self.accelerator.disabled.get(ident.key, "vector matrix not loaded")
                             + ": vector search uses sqlite-vec")
        self.lexical.wait_idle()
        notes += [f"{fts}: {why}: full-text ranking uses FTS5" for fts, why in self.lexical.disabled.items()]
        return notes

    def close(self) -> None:
        self.retrievers.close()
        self.accelerator.close()
        self.lexical.close()


# --- the server ---------------------------------------------------------------------------------

def _handler_class() -> type:
    class Handler(BaseHTTPRequestHandler):
        server_version = "sheaf-serve"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet; the server counts instead
            pass

        def _send(self, status: int, payload: dict[str, Any], exit_code: int = 0) -> None:
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Sheaf-Exit", str(exit_code))
            self.end_headers()
            self.wfile.write(body)

        def _authorized(self) -> bool:
            srv: SheafServer = self.server  # type: ignore[assignment]
            if self.headers.get("X-Sheaf-Token") != srv.token:
                self._send(403, {"ok": False, "error": "bad or missing X-Sheaf-Token"})
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802
            srv: SheafServer = self.server  # type: ignore[assignment]
            if not self._authorized():
                return
            if self.path.rstrip("/") != "/v1/health":
                self._send(404, {"ok": False, "error": f"no such endpoint {self.path}"})
                return
            self._send(200, srv.health())

        def do_POST(self) -> None:  # noqa: N802
            srv: SheafServer = self.server  # type: ignore[assignment]
            if not self._authorized():
                return
            parts = self.path.strip("/").split("/")
            if len(parts) != 2 or parts[0] != "v1" or parts[1] not in SERVED_COMMANDS:
                self._send(404, {"ok": False, "error": f"no such command {self.path}"})
                return
            try:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n).decode("utf-8") or "{}") if n else {}
            except (ValueError, UnicodeDecodeError) as e:
                self._send(400, {"ok": False, "error": f"bad request body: {e}"})
                return
            try:
                out = srv.run(parts[1], body)
            except Exception as e:  # noqa: BLE001 - the client runs it locally and reports it
                srv.count("failed")
                self._send(500, {"ok": False, "error": f"{type(e).__name__}: {e}"})
                return
            self._send(200, out.envelope, out.exit_code)

    return Handler


class SheafServer:
    """A ThreadingHTTPServer bound to loopback, with the warm state and its discovery file."""

    def __init__(self, settings: Settings, host: str = "127.0.0.1", port: int = 0) -> None:
        if host not in LOOPBACK_HOSTS:
            raise SheafError("BAD_QUERY", f"sheaf serve listens on the loopback interface only, not {host!r}",
                             {"host": host}, hint="use --host 127.0.0.1 (or ::1)")
        self.settings = settings
        self.token = secrets.token_hex(16)
        self.started = time.time()
        self._counts: dict[str, int] = {}
        self._count_lock = threading.Lock()

        class _HTTPServer(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        if ":" in host:
            _HTTPServer.address_family = socket.AF_INET6
        self.httpd = _HTTPServer((host, port), _handler_class())
        self.httpd.token = self.token  # type: ignore[attr-defined]
        self.httpd.health = self.health  # type: ignore[attr-defined]
        self.httpd.run = self.run  # type: ignore[attr-defined]
        self.httpd.count = self.count  # type: ignore[attr-defined]
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self.engines = WarmEngines(settings)
        # the warm parts, by their names (health, tests)
        self.accelerator, self.lexical = self.engines.accelerator, self.engines.lexical
        self.query_encoder, self.retrievers = self.engines.query_encoder, self.engines.retrievers
        self.discovery = discovery_path(settings)

    # -- state ------------------------------------------------------------------------------------

    def count(self, what: str) -> None:
        with self._count_lock:
            self._counts[what] = self._counts.get(what, 0) + 1

    def run(self, command: str, body: Any) -> Outcome:
        """The answer to one ``POST /v1/<command>`` (see `answer`), on a leased Retriever."""
        out = answer(command, body, self.retrievers.lease)
        self.count(command)
        return out

    def health(self) -> dict[str, Any]:
        return {"ok": True, "pid": os.getpid(), "version": __version__,
                "index_path": self.settings.index_location, "uptime_s": round(time.time() - self.started, 1),
                "requests": dict(self._counts), **self.engines.health()}

    def warm(self) -> list[str]:
        return self.engines.warm()

    # -- discovery and lifecycle --------------------------------------------------------------------

    def write_discovery(self) -> None:
        info = {"host": self.host, "port": self.port, "pid": os.getpid(),
                "index_path": self.settings.index_location, "url": self.url, "token": self.token,
                "version": __version__, "started": self.started,
                "signature": server_signature(self.settings)}
        self.discovery.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.discovery.with_name(f".{DISCOVERY_FILE}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(info, f, indent=1)
        os.replace(tmp, self.discovery)

    def remove_discovery(self) -> None:
        remove_discovery(self.discovery, os.getpid())

    @property
    def url(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{h}:{self.port}"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        self.httpd.shutdown()

    def close(self) -> None:
        self.remove_discovery()
        self.httpd.server_close()
        self.engines.close()


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 0, *,
          announce: Any = None) -> dict[str, Any]:
    """Run the server until SIGINT/SIGTERM (or `shutdown()` from another thread); return a
    summary. Refuses to start when a live server already answers for this home."""
    other = read_discovery(settings)
    if other is not None and other.get("pid") != os.getpid():
        raise SheafError("BACKEND_UNAVAILABLE", f"a sheaf server already runs for this home "
                         f"(pid {other.get('pid')}, {other.get('url') or other.get('port')})",
                         {"discovery": str(discovery_path(settings)), "pid": other.get("pid")},
                         hint="stop it first (kill the pid), or use it: the query commands already do")
    srv = SheafServer(settings, host, port)
    previous: dict[int, Any] = {}
    try:
        notes = srv.warm()
        srv.write_discovery()
        if threading.current_thread() is threading.main_thread():
            def stop(signum: int, frame: Any) -> None:
                threading.Thread(target=srv.shutdown, daemon=True).start()
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, stop)
        if announce:
            announce(f"sheaf serve: {srv.url} (pid {os.getpid()}, index {settings.index_location}); "
                     "query commands use it automatically; Ctrl-C stops it")
            for n in notes:
                announce(f"  note: {n}")
        srv.serve_forever()
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)
        srv.close()
    return {"url": srv.url, "pid": os.getpid(), "uptime_s": round(time.time() - srv.started, 1),
            "requests": dict(srv._counts), "notes": notes if "notes" in locals() else []}


def serve_command(settings: Settings, host: str = "127.0.0.1", port: int = 0, *, announce: Any = None) -> Outcome:
    """`sheaf serve`: `serve` until stopped, then its summary as the envelope."""
    return Outcome(ok("serve", serve(settings, host, port, announce=announce), count=0))
