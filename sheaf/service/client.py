"""The CLI's client for a running `sheaf serve` (stdlib only: it runs before every query command):
discovery through ``<SHEAF_HOME>/serve.json``, and one request with a short connect timeout."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


SERVED_COMMANDS = ("search", "retrieve", "get", "timeline", "grep")


DISCOVERY_FILE = "serve.json"


CONNECT_TIMEOUT = 0.05  # s: no server (or a dead one) must cost the CLI almost nothing


REQUEST_TIMEOUT = 300.0  # s: a query that outlives this is abandoned and run locally


LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


_NOT_ARGS = ("func", "command", "no_server")


def discovery_path(settings: Any) -> Path:
    """``<SHEAF_HOME>/serve.json``."""
    return Path(settings.home) / DISCOVERY_FILE


def server_signature(settings: Any) -> dict[str, Any]:
    """What must be equal between a client and the server for the server's answer to be the
    client's answer: Sheaf version, index file, home, library, model, query windowing."""
    from sheaf import __version__

    return {"version": __version__,
            "index_path": os.path.abspath(settings.index_path),
            "home": os.path.abspath(settings.home),
            "library": os.path.abspath(settings.library),
            "embedding_model": str(settings.embedding_model),
            "embed_overlap_tokens": int(settings.embed_overlap_tokens)}


def cli_args(ns: Any) -> dict[str, Any]:
    """A parsed CLI namespace as the JSON arguments of ``POST /v1/<command>``."""
    out: dict[str, Any] = {}
    for k, v in vars(ns).items():
        if k in _NOT_ARGS or callable(v):
            continue
        out[k] = str(v) if isinstance(v, Path) else v
    return out


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


def read_discovery(settings: Any) -> dict[str, Any] | None:
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
        _remove_discovery(path, info.get("pid"))
        return None
    return info


def _remove_discovery(path: Path, pid: Any) -> None:
    """Remove the discovery file if it still names `pid` (never another server's)."""
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def try_server(command: str, args: dict[str, Any], settings: Any, *,
               timeout: float = REQUEST_TIMEOUT) -> dict[str, Any] | None:
    """The envelope of `command` from a running `sheaf serve`, or None to run it locally.

    None, quickly, when: the command is not served; no discovery file; its pid is dead (the
    file is removed); the server serves another index/model/version; no connection within
    `CONNECT_TIMEOUT`; any transport or HTTP failure. A nonzero exit code comes back as the
    envelope's ``_exit`` (as the CLI's command functions return it).
    """
    if command not in SERVED_COMMANDS:
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
    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT)
    try:
        try:
            conn.connect()
        except OSError:
            if not _pid_alive(info.get("pid")):
                _remove_discovery(discovery_path(settings), info.get("pid"))
            return None
        conn.sock.settimeout(timeout)
        body = json.dumps(args, ensure_ascii=False).encode("utf-8")
        conn.request("POST", f"/v1/{command}", body=body,
                     headers={"Content-Type": "application/json", "X-Sheaf-Token": token})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            return None
        env = json.loads(data.decode("utf-8"))
        if not isinstance(env, dict) or env.get("command") != command:
            return None
        code = int(resp.getheader("X-Sheaf-Exit", "0") or 0)
        if code:
            env["_exit"] = code
        return env
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()
