"""The CLI's client for a running `sheaf serve` (stdlib only: it runs before every query command):
discovery through ``<SHEAF_HOME>/serve.json``, and one request with a short connect timeout."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf import __version__
from sheaf.service.requests import REQUESTS, SERVED_COMMANDS, Outcome, QueryRequest

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

__all__ = ["SERVED_COMMANDS", "DISCOVERY_FILE", "CONNECT_TIMEOUT", "REQUEST_TIMEOUT", "LOOPBACK_HOSTS",
           "discovery_path", "server_signature", "read_discovery", "remove_discovery", "try_server"]

DISCOVERY_FILE = "serve.json"


CONNECT_TIMEOUT = 0.05  # s: no server (or a dead one) must cost the CLI almost nothing


REQUEST_TIMEOUT = 300.0  # s: a query that outlives this is abandoned and run locally


LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


def discovery_path(settings: Settings) -> Path:
    """``<SHEAF_HOME>/serve.json``."""
    return Path(settings.home) / DISCOVERY_FILE


def server_signature(settings: Settings) -> dict[str, Any]:
    """What must be equal between a client and the server for the server's answer to be the
    client's answer: Sheaf version, index file, home, library, model, query windowing."""
    return {"version": __version__,
            "index_path": (os.path.abspath(settings.index_path) if settings.index_backend == "sqlite"
                           else settings.index_location),
            "home": os.path.abspath(settings.home),
            "library": os.path.abspath(settings.library),
            "embedding_model": str(settings.embedding_model),
            "embed_overlap_tokens": int(settings.embed_overlap_tokens)}


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except OSError:
        return False
    return True


def read_discovery(settings: Settings) -> dict[str, Any] | None:
    """The discovery file of a live server for `settings`' home, or None (a stale file, whose
    pid is dead, is removed)."""
    path = discovery_path(settings)
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    if not _pid_alive(info.get("pid")):
        remove_discovery(path, info.get("pid"))
        return None
    return info


def remove_discovery(path: Path, pid: Any) -> None:
    """Remove the discovery file if it still names `pid` (never another server's)."""
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def try_server(request: QueryRequest, settings: Settings, *,
               timeout: float = REQUEST_TIMEOUT) -> Outcome | None:
    """The answer of a running `sheaf serve` to `request` (``POST /v1/<command>`` with
    ``request.to_dict()``; the exit code from ``X-Sheaf-Exit``), or None to run it locally.

    None, quickly, when: the request is not a query request; no discovery file; its pid is
    dead (the file is removed); the server serves another index/model/version; no connection
    within `CONNECT_TIMEOUT`; any transport or HTTP failure.
    """
    command = getattr(request, "command", None)
    if REQUESTS.get(command) is not type(request):
        return None
    info = read_discovery(settings)
    if info is None:
        return None
    try:
        if info.get("signature") != server_signature(settings):
            return None
        host, port, token = str(info["host"]), int(info["port"]), str(info["token"])
    except (KeyError, TypeError, ValueError):
        return None
    if host not in LOOPBACK_HOSTS:
        return None
    import http.client  # ~25 ms (the email package): only when a server may answer

    conn = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT)
    try:
        try:
            conn.connect()
        except OSError:
            if not _pid_alive(info.get("pid")):
                remove_discovery(discovery_path(settings), info.get("pid"))
            return None
        conn.sock.settimeout(timeout)
        body = json.dumps(request.to_dict(), ensure_ascii=False).encode("utf-8")
        conn.request("POST", f"/v1/{command}", body=body,
                     headers={"Content-Type": "application/json", "X-Sheaf-Token": token})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            return None
        env = json.loads(data.decode("utf-8"))
        if not isinstance(env, dict) or env.get("command") != command:
            return None
        return Outcome(env, int(resp.getheader("X-Sheaf-Exit", "0") or 0))
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()
