#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Source: https://github.com/abstract-mcp/abstract (a vendored copy: this one file is the whole program)
"""Abstract: an MCP proxy that keeps large tool results out of the model's context.

Usage (from an MCP client's config, or a shell):

    python abstract.py [DIR ...]          serve MCP on stdin/stdout; DIRs are the allowed folders
    python abstract.py --check            start every configured upstream once and report
    python abstract.py --help | --version

Abstract reads the MCP client's own config file (env APP_CONFIG_PATH), starts the upstream
servers it names (env ABSTRACT_PROXY_SERVERS picks some; default: all but Abstract itself),
and offers the model a handful of tools to discover and call their tools. Results can be
stored as files in the allowed folders instead of flowing through the conversation.

Vendoring: this file depends on the Python standard library only (3.9 and later). Copy it
anywhere and run it with any python3; nothing else is needed.

Sections (grep -n '^# ==' abstract.py):
    1. Imports            2. Version and exports   3. Constants
    4. Errors             5. Helpers               6. Formats
    7. Sandbox and atomic writer                   8. JSON-RPC
    9. Upstreams (config, client, supervisor)      10. Settings
    12. Tools             13. Server               14. CLI
"""

# ==== 1. Imports ==================================================================

from __future__ import annotations

import argparse
import collections
import io
import itertools
import json
import logging
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
import urllib.request
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

# ==== 2. Version and exports ======================================================

__version__ = "0.1.0"
__all__ = [
    "Error",
    "ConfigError",
    "FormatError",
    "SandboxError",
    "RpcError",
    "UpstreamError",
    "Connection",
    "main",
]

# ==== 3. Constants ================================================================

HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
MODERN_VERSIONS = ("2026-07-28",)
_LINK_VERSIONS = ("2025-11-25", "2025-06-18") + MODERN_VERSIONS  # resource_link content exists
_SERVER_NAME = "abstract"

# JSON-RPC 2.0 and MCP error codes
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
CONNECTION_CLOSED = -32000  # SDK-local codes, reused for a dead or timed-out upstream
REQUEST_TIMEOUT = -32001
RESOURCE_NOT_FOUND = -32002  # legacy era; the modern era uses INVALID_PARAMS
UNSUPPORTED_VERSION = -32022

# Modern-era per-request _meta keys
_META_VERSION = "io.modelcontextprotocol/protocolVersion"
_META_CAPS = "io.modelcontextprotocol/clientCapabilities"
_META_INFO = "io.modelcontextprotocol/clientInfo"
_META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

_CALL_TIMEOUT_S = 120.0  # default deadline of an upstream tool call
_START_TIMEOUT_S = 30.0  # start-up and handshake
_SHUTDOWN_STEP_S = 1.5  # each of: stdin close -> wait, terminate -> wait (then kill)
_STDERR_TAIL_LINES = 20
_STDERR_LINE_MAX = 1000
_MAX_WORKERS = 256
_TOOLS_PAGE = 100
_CRASH_WINDOW_S = 10.0  # an upstream that dies this soon after starting counts as a quick crash
_BACKOFF_MAX_S = 60.0
_WINDOWS = sys.platform == "win32"
_MACOS = sys.platform == "darwin"

_log = logging.getLogger("abstract")

# ==== 4. Errors ===================================================================


class Error(Exception):
    """Root of every error Abstract raises on purpose."""


class ConfigError(Error, ValueError):
    """A config or settings file, or a command-line value, that cannot be used."""


class FormatError(Error, ValueError):
    """Data that cannot be parsed or converted; carries msg, doc, pos, lineno, colno like JSONDecodeError."""

    def __init__(self, msg: str, doc: str = "", pos: int = 0) -> None:
        lineno = doc.count("\n", 0, pos) + 1
        colno = pos - doc.rfind("\n", 0, pos)
        where = f": line {lineno} column {colno}" if doc else ""
        super().__init__(f"{msg}{where}")
        self.msg, self.doc, self.pos, self.lineno, self.colno = msg, doc, pos, lineno, colno


class SandboxError(Error, ValueError):
    """A path outside the allowed directories, or a name that is not a plain file name."""


class ToolError(Error):
    """A tool call that failed in a way the model can act on: becomes an isError result."""


class RpcError(Error):
    """A JSON-RPC error: code, message and optional data."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def to_dict(self) -> dict:
        """The `error` member of a response."""
        d: dict = {"code": self.code, "message": self.message}
        if self.data is not None:
            d["data"] = self.data
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "RpcError":
        """Build from a response's `error` member, tolerating malformed ones."""
        if not isinstance(d, dict):
            return cls(INTERNAL_ERROR, f"malformed error: {d!r}")
        code = d.get("code")
        return cls(code if isinstance(code, int) else INTERNAL_ERROR, str(d.get("message", "")), d.get("data"))


class UpstreamError(RpcError):
    """An upstream that is dead, cannot start, or did not answer in time."""

    def __init__(self, message: str, code: int = CONNECTION_CLOSED) -> None:
        super().__init__(code, message)


class _Cancelled(Error):
    """The client cancelled the request; nothing is sent back."""


# ==== 5. Helpers ==================================================================


def _dumps(obj: Any) -> str:
    """Compact JSON, non-ASCII kept (the wire and text items use this)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _settle(fut: Future, result: Any = None, exc: Optional[BaseException] = None) -> None:
    """Resolve a future once; later attempts (a late response, a race with cancel) are ignored."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
    except Exception:  # InvalidStateError (3.8+): already resolved or cancelled
        pass


def _text_result(text: str, structured: Any = None, is_error: bool = False) -> dict:
    """A tools/call result with one text item (and structuredContent when given)."""
    res: dict = {"content": [{"type": "text", "text": text}]}
    if structured is not None:
        res["structuredContent"] = structured
    if is_error:
        res["isError"] = True
    return res


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _names_list(names: List[str], limit: int = 40) -> str:
    """'a, b, c' for an error message, cut after `limit` names."""
    names = sorted(names)
    if not names:
        return "(none)"
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


class _Pool:
    """A bounded pool of daemon worker threads.

    concurrent.futures' pool threads are joined at interpreter exit, so one handler stuck on a
    dead pipe would keep the process alive after stdin EOF; daemon workers cannot.
    """

    def __init__(self, max_workers: int = _MAX_WORKERS, name: str = "abstract-worker") -> None:
        self._q: queue.Queue = queue.Queue()
        self._max, self._name = max_workers, name
        self._lock = threading.Lock()
        self._workers = 0
        self._idle = 0
        self._backlog = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args) on an idle worker, a new one, or (at the cap) the next one free."""
        with self._lock:
            spawn = False
            if self._idle > 0:
                self._idle -= 1  # reserved: that worker takes this job
            elif self._workers < self._max:
                self._workers += 1
                spawn = True
            else:
                self._backlog += 1
        self._q.put((fn, args))
        if spawn:
            threading.Thread(target=self._run, name=f"{self._name}-{self._workers}", daemon=True).start()

    def _run(self) -> None:
        while True:
            fn, args = self._q.get()
            try:
                fn(*args)
            except BaseException:  # a handler must never kill its worker
                _log.error("unhandled error in worker:\n%s", traceback.format_exc())
            with self._lock:  # free again: take a queued job first, else wait as idle
                if self._backlog:
                    self._backlog -= 1
                else:
                    self._idle += 1


class _Tail:
    """The last lines of a stream, bounded in count and length (for error messages)."""

    def __init__(self, lines: int = _STDERR_TAIL_LINES) -> None:
        self._lines: collections.deque = collections.deque(maxlen=lines)
        self._lock = threading.Lock()

    def add(self, line: str) -> None:
        if len(line) > _STDERR_LINE_MAX:
            line = line[:_STDERR_LINE_MAX] + " [...]"
        with self._lock:
            self._lines.append(line)

    def text(self, n: int = 5) -> str:
        with self._lock:
            return "\n".join(list(self._lines)[-n:])


def _iter_lines(stream: Any, limit: int = 1 << 16):
    """Yield the lines of a binary stream without ever holding more than `limit` bytes of one.

    Used for stderr, where a child may write megabytes without a newline; the excess of an
    overlong line is dropped, so memory stays bounded whatever the child does.
    """
    partial = b""
    read = getattr(stream, "read1", None) or stream.read
    while True:
        try:
            chunk = read(1 << 16)
        except (OSError, ValueError):
            chunk = b""
        if not chunk:
            if partial:
                yield partial
            return
        parts = (partial + chunk).split(b"\n")
        partial = parts.pop()
        yield from parts
        if len(partial) > limit:
            yield partial[:limit] + b" [...]"
            partial = b""


_VAR_RE = re.compile(r"\$\{(env:)?([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")


def _expand(value: str, env: Dict[str, str], missing: List[str]) -> str:
    """Expand ${VAR}, ${VAR:-default} and ${env:VAR}; names of unset variables go to `missing`."""

    def sub(m: "re.Match[str]") -> str:
        name, default = m.group(2), m.group(4)
        if env.get(name):
            return env[name]
        if m.group(3) is not None:
            return default or ""
        if name not in env:
            missing.append(name)
        return env.get(name, "")

    return _VAR_RE.sub(sub, value)


def _expand_path(value: str, env: Dict[str, str], missing: List[str]) -> str:
    """_expand, then `~` at the start (home directory)."""
    value = _expand(value, env, missing)
    if value == "~" or value.startswith(("~/", "~\\")):
        value = os.path.expanduser(value)
    return value


def _user_dir(kind: str) -> Path:
    """A per-user directory for Abstract's `kind` ("outputs", "cache", "data") on this platform."""
    home = Path.home()
    if _WINDOWS:
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local") / "Abstract"
    elif _MACOS:
        base = home / "Library" / "Application Support" / "Abstract"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share") / "abstract"
    return base / kind


def _file_uri(path: str) -> str:
    """A file:// URI for an absolute local path, right for the platform (C:\\x -> file:///C:/x)."""
    return Path(path).as_uri()


def _uri_to_path(uri: str) -> str:
    """The local path of a file:// URI (percent-decoded; Windows drive forms handled by url2pathname)."""
    parts = urllib.parse.urlparse(uri)
    if parts.scheme != "file":
        raise SandboxError(f"not a file:// URI: {uri!r}")
    if parts.netloc not in ("", "localhost"):
        raise SandboxError(f"file URI with a remote host is not supported: {uri!r}")
    return urllib.request.url2pathname(parts.path)

# ==== 6. Formats ==================================================================

# (filled in by the storage work: converters both ways)

# ==== 7. Sandbox and atomic writer ================================================


class Sandbox:
    """The allowed directories; every path Abstract reads or writes is checked here first.

    Containment is decided on fully resolved real paths (symlinks followed, `..` collapsed,
    case folded where the file system folds case), never on string prefixes.
    """

    def __init__(self, roots: List[str]) -> None:
        self.roots = [os.path.realpath(r) for r in roots]

    @property
    def default(self) -> str:
        return self.roots[0]

    def describe(self) -> dict:
        return {
            "allowed_directories": list(self.roots),
            "default_directory": self.default,
            "total_directories": len(self.roots),
        }


# ==== 8. JSON-RPC =================================================================
# Newline-delimited JSON-RPC 2.0 over binary streams. One Connection class serves both
# directions: Abstract's server side (client stdin/stdout) and each upstream session.


def _frame(msg: dict) -> bytes:
    data = _dumps(msg).encode("utf-8", "surrogatepass")
    assert b"\n" not in data  # json escapes newlines; a raw one would split the frame
    return data + b"\n"


def _error_response(mid: Any, err: RpcError) -> dict:
    return {"jsonrpc": "2.0", "id": mid, "error": err.to_dict()}


class _Request:
    """An incoming request being handled: its id, cancellation state and cancel hooks."""

    __slots__ = ("id", "method", "params", "cancelled", "_hooks", "_lock")

    def __init__(self, mid: Any, method: str, params: Any) -> None:
        self.id, self.method, self.params = mid, method, params
        self.cancelled = threading.Event()
        self._hooks: List[Callable[[], None]] = []
        self._lock = threading.Lock()

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """Run `hook` when the client cancels this request (at once if it already did)."""
        with self._lock:
            if not self.cancelled.is_set():
                self._hooks.append(hook)
                return
        hook()

    def cancel(self) -> None:
        with self._lock:
            self.cancelled.set()
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            try:
                hook()
            except Exception:
                _log.debug("cancel hook failed", exc_info=True)

    @property
    def meta(self) -> dict:
        m = self.params.get("_meta") if isinstance(self.params, dict) else None
        return m if isinstance(m, dict) else {}


Handler = Callable[[_Request], Any]


class Connection:
    """One JSON-RPC 2.0 peer over a pair of binary streams, usable in both directions.

    `requests` maps method names to handlers (run on a worker pool, or inline when no pool is
    given); `notifications` maps method names to callables run inline, in order, on the reader
    thread. `request()` sends a request and returns a Future for its result.
    """

    def __init__(
        self,
        rfile: Any,
        wfile: Any,
        *,
        name: str = "peer",
        requests: Optional[Dict[str, Handler]] = None,
        notifications: Optional[Dict[str, Callable[[Any], None]]] = None,
        pool: Optional[_Pool] = None,
        strict: bool = True,
        on_close: Optional[Callable[[], None]] = None,
    ) -> None:
        self.name = name
        self._rfile, self._wfile = rfile, wfile
        self.requests = requests if requests is not None else {}
        self.notifications = notifications if notifications is not None else {}
        self._pool = pool
        self._strict = strict  # answer garbage with JSON-RPC errors (server side) or just log it
        self._on_close = on_close
        self._wlock = threading.Lock()
        self._ids = itertools.count(1)
        self._plock = threading.Lock()
        self._pending: Dict[Any, Future] = {}
        self._inflight: Dict[Any, _Request] = {}
        self.closed = threading.Event()
        self.close_reason = "connection closed"

    # -- lifecycle
    def start(self) -> "Connection":
        threading.Thread(target=self._read_loop, name=f"rpc-read-{self.name}", daemon=True).start()
        return self

    def _read_loop(self) -> None:
        try:
            for line in iter(self._rfile.readline, b""):
                if line.strip():
                    self._on_line(line)
        except (OSError, ValueError) as e:  # a closed or broken pipe ends the session like EOF
            _log.debug("%s: read failed: %s", self.name, e)
        finally:
            self._shut(self.close_reason)

    def _shut(self, reason: str) -> None:
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.closed.set()
        with self._plock:
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            _settle(fut, exc=UpstreamError(reason))
        if self._on_close is not None:
            self._on_close()

    def fail_pending(self, reason: str) -> None:
        """Close the session from outside (process gone): pending requests fail with `reason`."""
        self._shut(reason)

    # -- writing
    def send(self, msg: dict) -> bool:
        """Write one message whole; False if the stream is gone."""
        data = _frame(msg)
        with self._wlock:
            try:
                self._wfile.write(data)
                self._wfile.flush()
                return True
            except (OSError, ValueError):
                return False

    def notify(self, method: str, params: Optional[dict] = None) -> bool:
        msg: dict = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        return self.send(msg)

    # -- outgoing requests
    def request(self, method: str, params: Optional[dict] = None) -> Tuple[int, Future]:
        """Send a request; return its id and a Future of its result (or RpcError)."""
        mid = next(self._ids)
        fut: Future = Future()
        with self._plock:
            if self.closed.is_set():
                _settle(fut, exc=UpstreamError(self.close_reason))
                return mid, fut
            self._pending[mid] = fut
        msg: dict = {"jsonrpc": "2.0", "id": mid, "method": method}
        if params is not None:
            msg["params"] = params
        if not self.send(msg):
            self.forget(mid, UpstreamError(f"{self.name}: cannot write to the stream ({self.close_reason})"))
        return mid, fut

    def forget(self, mid: Any, exc: Optional[BaseException] = None) -> None:
        """Stop waiting for `mid`; a late response to it is then dropped."""
        with self._plock:
            fut = self._pending.pop(mid, None)
        if fut is not None and exc is not None:
            _settle(fut, exc=exc)

    def call(self, method: str, params: Optional[dict] = None, timeout: float = _CALL_TIMEOUT_S) -> Any:
        """Send a request and wait for its result; on timeout, cancel it upstream and raise."""
        mid, fut = self.request(method, params)
        try:
            return fut.result(timeout)
        except FutureTimeout:
            self.notify("notifications/cancelled", {"requestId": mid, "reason": f"timed out after {timeout:g} s"})
            raise UpstreamError(f"{self.name}: no answer to {method} within {timeout:g} s", REQUEST_TIMEOUT) from None
        finally:
            self.forget(mid)

    # -- incoming
    def _on_line(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError as e:
            self._bad(line, PARSE_ERROR, f"Parse error: {e}")
            return
        if not isinstance(msg, dict):
            self._bad(line, INVALID_REQUEST, "Invalid Request: expected a JSON object (batches are not supported)")
            return
        method = msg.get("method")
        if method is None and "id" in msg and ("result" in msg or "error" in msg):
            self._on_response(msg)
        elif not isinstance(method, str) or msg.get("jsonrpc") != "2.0" or not self._valid_id(msg):
            self._bad(line, INVALID_REQUEST, "Invalid Request: needs jsonrpc '2.0', a string method and a string or integer id", msg.get("id"))
        elif "id" in msg:
            self._on_request(msg)
        else:
            self._on_notification(method, msg.get("params"))

    @staticmethod
    def _valid_id(msg: dict) -> bool:
        if "id" not in msg:
            return True
        mid = msg["id"]
        return isinstance(mid, str) or (isinstance(mid, int) and not isinstance(mid, bool))

    def _bad(self, line: bytes, code: int, message: str, mid: Any = None) -> None:
        shown = line[:200].decode("utf-8", "replace").rstrip()
        if self._strict:
            _log.warning("%s: %s: %s", self.name, message, shown)
            if not isinstance(mid, (str, int)) or isinstance(mid, bool):
                mid = None
            self.send(_error_response(mid, RpcError(code, message)))
        else:
            _log.warning("%s: skipped a line that is not JSON-RPC: %s", self.name, shown)

    def _on_response(self, msg: dict) -> None:
        with self._plock:
            fut = self._pending.pop(msg["id"], None)
        if fut is None:
            _log.warning("%s: dropped a response to unknown id %r", self.name, msg["id"])
        elif "error" in msg:
            _settle(fut, exc=RpcError.from_dict(msg["error"]))
        else:
            _settle(fut, msg.get("result"))

    def _on_notification(self, method: str, params: Any) -> None:
        if method == "notifications/cancelled":
            rid = params.get("requestId") if isinstance(params, dict) else None
            with self._plock:
                req = self._inflight.get(rid)
            if req is not None:
                req.cancel()
            return
        fn = self.notifications.get(method)
        if fn is None:
            return  # unknown notifications are ignored, as the spec allows
        try:
            fn(params)
        except Exception:
            _log.error("%s: notification %s failed:\n%s", self.name, method, traceback.format_exc())

    def _on_request(self, msg: dict) -> None:
        req = _Request(msg["id"], msg["method"], msg.get("params"))
        with self._plock:
            self._inflight[req.id] = req
        if self._pool is None:
            self._dispatch(req)
        else:
            self._pool.submit(self._dispatch, req)

    def _dispatch(self, req: _Request) -> None:
        """Run one request's handler and send its response: the one place errors become wire errors."""
        try:
            handler = self.requests.get(req.method)
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, f"Method not found: {req.method}")
            if req.params is not None and not isinstance(req.params, dict):
                raise RpcError(INVALID_PARAMS, "params must be an object")
            reply: dict = {"jsonrpc": "2.0", "id": req.id, "result": handler(req)}
        except _Cancelled:
            reply = {}
        except RpcError as e:
            reply = _error_response(req.id, e)
        except Exception as e:
            _log.error("%s: %s failed:\n%s", self.name, req.method, traceback.format_exc())
            reply = _error_response(req.id, RpcError(INTERNAL_ERROR, f"Internal error: {type(e).__name__}: {e}"))
        finally:
            with self._plock:
                self._inflight.pop(req.id, None)
        if reply and not req.cancelled.is_set():  # a cancelled request gets no response (spec)
            self.send(reply)

# ==== 9. Config and settings ======================================================
# The MCP client's own config file (APP_CONFIG_PATH) names the upstreams; Abstract's optional
# settings file (ABSTRACT_CONFIG) holds Abstract's own knobs.

_SERVER_KEYS = ("mcpServers", "servers", "mcp_servers")


class ServerSpec:
    """One upstream as the client config describes it, variables expanded.

    `problem` is set (and the rest may be partial) when the entry cannot be started: an
    unsupported transport, a disabled entry, an unset variable, an entry that runs Abstract.
    """

    __slots__ = ("name", "command", "args", "env", "cwd", "problem")

    def __init__(self, name: str, command: str = "", args: Optional[List[str]] = None,
                 env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None, problem: str = "") -> None:
        self.name, self.command, self.args = name, command, list(args or [])
        self.env, self.cwd, self.problem = dict(env or {}), cwd, problem

    def argv(self) -> List[str]:
        return [self.command] + self.args


def _read_json_file(path: str, what: str) -> Any:
    """Parse a JSON file; ConfigError names the file and, for bad JSON, the line and column."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"{what} {path} cannot be read: {e.strerror or e}") from None
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {path} is not UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{what} {path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


def _config_entries(doc: Any, path: str) -> Dict[str, Any]:
    """The server entries of a client config, whichever client wrote it."""
    if not isinstance(doc, dict):
        raise ConfigError(f"client config {path} must hold a JSON object, not {type(doc).__name__}")
    for key in _SERVER_KEYS:
        if key in doc:
            entries = doc[key]
            if not isinstance(entries, dict):
                raise ConfigError(f"client config {path}: '{key}' must be an object mapping names to servers")
            return entries
    raise ConfigError(f"client config {path} has no servers: expected a top-level key {' or '.join(_SERVER_KEYS)}")


def _runs_abstract(argv: List[str]) -> bool:
    """True when a config entry would start Abstract itself (never spawned: no recursion)."""
    me = os.path.realpath(__file__)
    for i, tok in enumerate(argv):
        base = os.path.basename(tok.replace("\\", "/")).lower()
        if base in ("abstract.py", "abstract.pyz") or (i == 0 and base in ("abstract", "abstract.exe")):
            return True
        if tok == "abstract" and i > 0 and argv[i - 1] == "-m":
            return True
        if os.path.isabs(tok) and os.path.realpath(tok) == me:
            return True
    return False


def _make_spec(name: str, entry: Any, environ: Dict[str, str], path: str) -> ServerSpec:
    """Validate and expand one config entry."""
    if not isinstance(entry, dict):
        return ServerSpec(name, problem=f"its entry in {path} is not an object")
    kind = entry.get("type", "stdio")
    if kind != "stdio" or ("url" in entry and "command" not in entry) or "serverUrl" in entry:
        return ServerSpec(name, problem=f"transport {kind if kind != 'stdio' else 'url'!r} is not supported yet (only stdio servers)")
    if entry.get("disabled") is True:
        return ServerSpec(name, problem=f"it is disabled in {path}")
    command, args = entry.get("command"), entry.get("args", [])
    env, cwd = entry.get("env", {}), entry.get("cwd")
    if not isinstance(command, str) or not command:
        return ServerSpec(name, problem=f"its entry in {path} has no 'command'")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return ServerSpec(name, problem=f"'args' in {path} must be a list of strings")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        return ServerSpec(name, problem=f"'env' in {path} must map names to strings")
    if cwd is not None and not isinstance(cwd, str):
        return ServerSpec(name, problem=f"'cwd' in {path} must be a string")
    missing: List[str] = []
    command = _expand_path(command, environ, missing)
    args = [_expand_path(a, environ, missing) for a in args]
    env = {k: _expand(v, environ, missing) for k, v in env.items()}
    cwd = _expand_path(cwd, environ, missing) if cwd else None
    spec = ServerSpec(name, command, args, env, cwd)
    if missing:
        names = ", ".join(sorted(set(missing)))
        spec.problem = f"environment variable {names} is not set (used in {path}); set it or write ${{NAME:-default}}"
    elif _runs_abstract(spec.argv()):
        spec.problem = "it runs Abstract itself, which would proxy itself forever"
    return spec


class ClientConfig:
    """The upstreams named by the client config, after selection by ABSTRACT_PROXY_SERVERS."""

    def __init__(self, path: Optional[str], selection: Optional[str], environ: Dict[str, str]) -> None:
        self.path = path or ""
        self.error = ""  # why there are no upstreams at all
        self.specs: Dict[str, ServerSpec] = {}  # selected servers, in config order
        self.unselected: List[str] = []  # in the file but not selected
        self.missing: List[str] = []  # selected but not in the file
        try:
            self._load(path, selection, environ)
        except ConfigError as e:
            self.error = str(e)

    def _load(self, path: Optional[str], selection: Optional[str], environ: Dict[str, str]) -> None:
        if not path:
            raise ConfigError("APP_CONFIG_PATH is not set: point it at your MCP client's config file "
                              "(for example claude_desktop_config.json)")
        entries = _config_entries(_read_json_file(path, "client config"), path)
        wanted = [s.strip() for s in (selection or "").split(",") if s.strip()]
        for name, entry in entries.items():
            spec = _make_spec(name, entry, environ, path)
            if wanted and name not in wanted:
                self.unselected.append(name)
            elif not wanted and spec.problem and (_runs_abstract(spec.argv()) or "disabled" in spec.problem):
                continue  # by default, quietly skip Abstract's own entry and disabled ones
            else:
                self.specs[name] = spec
        self.missing = [w for w in wanted if w not in entries]


_SETTINGS_DOC = "docs/reference.md#settings"
_ORGANIZE = ("flat", "by_server", "by_server_tool")


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


_GLOBAL_SETTINGS: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    "timeout_seconds": (_positive, "a number of seconds > 0", _CALL_TIMEOUT_S),
    "startup_timeout_seconds": (_positive, "a number of seconds > 0", _START_TIMEOUT_S),
    "organize": (lambda v: v in _ORGANIZE, f"one of {', '.join(_ORGANIZE)}", "flat"),
    "max_input_file_mb": (_positive, "a number of megabytes > 0", 10),
}
_SERVER_SETTINGS: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    "timeout_seconds": (_positive, "a number of seconds > 0", None),
    "startup_timeout_seconds": (_positive, "a number of seconds > 0", None),
}


def _check_keys(obj: Any, spec: Dict[str, Tuple[Callable[[Any], bool], str, Any]], where: str,
                extra: Tuple[str, ...] = ()) -> None:
    if not isinstance(obj, dict):
        raise ConfigError(f"{where or 'the top level'} must be an object")
    for key, value in obj.items():
        full = f"{where}.{key}" if where else key
        if key in extra:
            continue
        if key not in spec:
            raise ConfigError(f"unknown key '{full}' (known: {', '.join(sorted(list(spec) + list(extra)))})")
        ok, want, _ = spec[key]
        if not ok(value):
            raise ConfigError(f"key '{full}' must be {want}, not {_dumps(value)}")


class Settings:
    """Abstract's own settings (ABSTRACT_CONFIG, a JSON file); defaults work without one."""

    def __init__(self, data: Optional[dict] = None, environ: Optional[Dict[str, str]] = None) -> None:
        data = data or {}
        _check_keys(data, _GLOBAL_SETTINGS, "", extra=("servers",))
        servers = data.get("servers", {})
        if not isinstance(servers, dict):
            raise ConfigError("key 'servers' must be an object mapping server names to settings")
        for name, conf in servers.items():
            _check_keys(conf, _SERVER_SETTINGS, f"servers.{name}")
        self.data, self.servers = data, servers
        env_timeout = (environ or {}).get("ABSTRACT_TIMEOUT")
        self.env_timeout: Optional[float] = None
        if env_timeout:
            try:
                self.env_timeout = float(env_timeout)
                assert self.env_timeout > 0
            except (ValueError, AssertionError):
                raise ConfigError(f"ABSTRACT_TIMEOUT must be a number of seconds > 0, not {env_timeout!r}") from None

    @classmethod
    def load(cls, path: Optional[str], environ: Dict[str, str]) -> "Settings":
        if not path:
            return cls({}, environ)
        try:
            return cls(_read_json_file(path, "settings file"), environ)
        except ConfigError as e:
            msg = str(e)
            raise ConfigError(msg if msg.startswith("settings file") else f"settings file {path}: {msg}") from None

    def get(self, key: str) -> Any:
        return self.data.get(key, _GLOBAL_SETTINGS[key][2])

    def timeout(self, server: str) -> float:
        """Tool-call deadline: the server's setting, else ABSTRACT_TIMEOUT, else the global one."""
        own = self.servers.get(server, {}).get("timeout_seconds")
        if own is not None:
            return float(own)
        return self.env_timeout or float(self.get("timeout_seconds"))

    def startup_timeout(self, server: str) -> float:
        own = self.servers.get(server, {}).get("startup_timeout_seconds")
        return float(own if own is not None else self.get("startup_timeout_seconds"))

# ==== 10. Upstreams ===============================================================
# One long-lived process and session per upstream server, started on first need, shared by
# every call, restarted (with back-off after quick crashes) when it dies.


def _resolve_command(spec: ServerSpec, env: Dict[str, str]) -> str:
    """The executable to run, found with the PATH the upstream will see (PATHEXT on Windows)."""
    cmd = spec.command
    if os.path.dirname(cmd):  # a path: relative to the upstream's working directory
        full = cmd if os.path.isabs(cmd) else os.path.join(spec.cwd or os.getcwd(), cmd)
        if os.path.isfile(full):
            return full
        raise UpstreamError(f"command not found: {cmd!r} (no such file)")
    found = shutil.which(cmd, path=env.get("PATH", os.defpath))
    if found is None:
        raise UpstreamError(f"command not found: {cmd!r} is not on the PATH the server gets "
                            f"({env.get('PATH', '')[:300]}); use an absolute path or fix PATH in its env")
    return found


def _exit_text(code: Optional[int]) -> str:
    if code is None:
        return "is not answering"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class Upstream:
    """A supervised upstream MCP server: process, session, tool list, restart policy."""

    def __init__(self, spec: ServerSpec, settings: Settings, roots: Callable[[], List[dict]],
                 spawn: Callable[..., Any] = subprocess.Popen, clock: Callable[[], float] = time.monotonic) -> None:
        self.spec, self.settings, self._roots = spec, settings, roots
        self._spawn, self._clock = spawn, clock
        self._lock = threading.Lock()  # start/stop
        self._conn: Optional[Connection] = None
        self._proc: Any = None
        self._stderr_thread: Optional[threading.Thread] = None
        self.tail = _Tail()
        self._tools: Optional[List[dict]] = None
        self.protocol_version = ""
        self.modern = False
        self.start_ms = 0.0
        self._started_at = 0.0
        self._quick_crashes = 0
        self._retry_at = 0.0
        self._closing = False
        self._progress: Dict[str, Callable[[dict], None]] = {}
        self._tokens = itertools.count(1)

    @property
    def name(self) -> str:
        return self.spec.name

    # -- start
    def session(self) -> Connection:
        """The live session, starting the process first if needed."""
        with self._lock:
            if self._conn is not None and not self._conn.closed.is_set():
                return self._conn
            if self.spec.problem:
                raise UpstreamError(f"server '{self.name}' cannot be used: {self.spec.problem}")
            wait = self._retry_at - self._clock()
            if wait > 0:
                raise UpstreamError(f"server '{self.name}' crashed {_plural(self._quick_crashes, 'time')} right after "
                                    f"starting; next start attempt in {wait:.0f} s. Last error: {self.tail.text(3)}")
            self._start()
            return self._conn  # type: ignore[return-value]

    def _start(self) -> None:
        env = dict(os.environ)
        env.update(self.spec.env)
        t0 = self._clock()
        try:
            argv = [_resolve_command(self.spec, env)] + self.spec.args
            self._proc = self._popen(argv, env)
        except (OSError, UpstreamError) as e:
            self._note_crash(t0)
            msg = e.message if isinstance(e, UpstreamError) else (e.strerror or str(e))
            raise UpstreamError(f"server '{self.name}' could not start: {msg} (command: {self._cmdline()})") from None
        self._started_at = t0
        self._stderr_thread = threading.Thread(target=self._drain_stderr, args=(self._proc.stderr,),
                                               name=f"stderr-{self.name}", daemon=True)
        self._stderr_thread.start()
        conn = Connection(io.BufferedReader(self._proc.stdout, 1 << 16), io.BufferedWriter(self._proc.stdin, 1 << 16),
                          name=self.name, strict=False, on_close=self._on_close,
                          requests={"ping": lambda r: {}, "roots/list": lambda r: {"roots": self._roots()}},
                          notifications={"notifications/progress": self._on_progress,
                                         "notifications/tools/list_changed": self._on_tools_changed,
                                         "notifications/message": self._on_log})
        self._conn = conn.start()
        try:
            self._handshake(conn)
        except RpcError as e:
            self._kill()
            hint = "" if "stderr" in e.message else self._stderr_hint()
            raise UpstreamError(f"server '{self.name}' did not complete the MCP handshake: {e.message} "
                                f"(command: {self._cmdline()}){hint}") from None
        self.start_ms = (self._clock() - t0) * 1000
        self._tools = None

    def _popen(self, argv: List[str], env: Dict[str, str]) -> Any:
        kw: Dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE,
                              "bufsize": 0, "env": env, "cwd": self.spec.cwd or None}
        if _WINDOWS:  # no console window flashing up for each upstream
            kw["creationflags"] = getattr(subprocess, "CREATE_NO_WINDOW", 0)
        else:  # its own process group, so shutdown can signal the upstream's children too
            kw["start_new_session"] = True
        return self._spawn(argv, **kw)

    def _handshake(self, conn: Connection) -> None:
        limit = self.settings.startup_timeout(self.name)
        params = {"protocolVersion": HANDSHAKE_VERSIONS[0], "capabilities": {"roots": {"listChanged": False}},
                  "clientInfo": {"name": _SERVER_NAME, "version": __version__}}
        try:
            res = conn.call("initialize", params, timeout=limit)
        except UpstreamError:
            raise
        except RpcError as first:
            if not self._try_modern(conn, limit):
                raise first
            return
        if not isinstance(res, dict) or not isinstance(res.get("protocolVersion"), str):
            raise RpcError(INVALID_REQUEST, f"initialize result without protocolVersion: {str(res)[:200]}")
        self.protocol_version, self.modern = res["protocolVersion"], False
        conn.notify("notifications/initialized")

    def _try_modern(self, conn: Connection, limit: float) -> bool:
        """An upstream that refused initialize may speak only the stateless 2026-07-28 era."""
        try:
            res = conn.call("server/discover", {"_meta": self._modern_meta()}, timeout=limit)
        except RpcError:
            return False
        versions = res.get("supportedVersions", []) if isinstance(res, dict) else []
        if MODERN_VERSIONS[0] not in versions:
            return False
        self.protocol_version, self.modern = MODERN_VERSIONS[0], True
        return True

    @staticmethod
    def _modern_meta() -> dict:
        return {_META_VERSION: MODERN_VERSIONS[0], _META_CAPS: {},
                _META_INFO: {"name": _SERVER_NAME, "version": __version__}}

    def _params(self, params: dict) -> dict:
        if self.modern:
            params = dict(params)
            params["_meta"] = {**params.get("_meta", {}), **self._modern_meta()}
        return params

    # -- stderr, notifications, death
    def _drain_stderr(self, stream: Any) -> None:
        prefix = f"[{self.name}] "
        for raw in _iter_lines(stream):
            line = raw.decode("utf-8", "replace").rstrip("\r")
            self.tail.add(line)
            _log.info("%s%s", prefix, line)

    def _on_progress(self, params: Any) -> None:
        token = params.get("progressToken") if isinstance(params, dict) else None
        relay = self._progress.get(token) if isinstance(token, str) else None
        if relay is not None:
            relay(params)

    def _on_tools_changed(self, params: Any) -> None:
        self._tools = None

    def _on_log(self, params: Any) -> None:
        if isinstance(params, dict):
            _log.info("[%s] %s: %s", self.name, params.get("level", "info"), _dumps(params.get("data"))[:2000])

    def _on_close(self) -> str:
        """The upstream's stdout closed: say why, from its exit status and stderr tail."""
        proc, code = self._proc, None
        if proc is not None:
            try:
                code = proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                code = None
        if self._stderr_thread is not None:
            self._stderr_thread.join(timeout=0.5)
        if not self._closing:
            self._note_crash(self._started_at)
        state = _exit_text(code) if code is not None else "closed its output"
        return f"server '{self.name}' {state}{self._stderr_hint()}"

    def _note_crash(self, started: float) -> None:
        if self._clock() - started < _CRASH_WINDOW_S:
            self._quick_crashes += 1
        else:
            self._quick_crashes = 1
        if self._quick_crashes >= 2:
            self._retry_at = self._clock() + min(2.0 ** (self._quick_crashes - 2), _BACKOFF_MAX_S)

    def _stderr_hint(self) -> str:
        tail = self.tail.text(5)
        return f". Last stderr lines:\n{tail}" if tail else " (nothing on stderr)"

    def _cmdline(self) -> str:
        return " ".join(shlex.quote(a) for a in self.spec.argv())

    # -- requests
    def tools(self) -> List[dict]:
        """The upstream's tools (every page), cached until it says the list changed."""
        cached = self._tools
        if cached is not None:
            return cached
        conn, tools, cursor = self.session(), [], None
        for _ in range(10000):
            params = {"cursor": cursor} if cursor else {}
            res = conn.call("tools/list", self._params(params), timeout=self.settings.timeout(self.name))
            page = res.get("tools") if isinstance(res, dict) else None
            if not isinstance(page, list):
                raise UpstreamError(f"server '{self.name}' sent a tools/list result without a tools array")
            tools.extend(t for t in page if isinstance(t, dict) and isinstance(t.get("name"), str))
            cursor = res.get("nextCursor")
            if not cursor:
                break
        self._tools = tools
        return tools

    def call_tool(self, tool: str, args: dict, req: Optional[_Request] = None,
                  progress: Optional[Callable[[dict], None]] = None) -> dict:
        """tools/call upstream; the upstream result, or UpstreamError/RpcError/_Cancelled."""
        conn = self.session()
        params: dict = {"name": tool, "arguments": args}
        token = ""
        if progress is not None:
            token = f"abstract-{next(self._tokens)}"
            self._progress[token] = progress
            params["_meta"] = {"progressToken": token}
        mid, fut = conn.request("tools/call", self._params(params))
        if req is not None:
            def cancel() -> None:
                conn.notify("notifications/cancelled", {"requestId": mid, "reason": "cancelled by the client"})
                conn.forget(mid, _Cancelled())
            req.on_cancel(cancel)
        limit = self.settings.timeout(self.name)
        try:
            return fut.result(limit)
        except UpstreamError as e:  # the session died with the call in flight: never replayed
            raise UpstreamError(f"'{self.name}' tool '{tool}' failed while running: {e.message}\nThe call was not "
                                f"retried, because the server may have done part of the work; call it again if "
                                f"that is safe (the server is restarted on the next call).") from None
        except FutureTimeout:
            conn.notify("notifications/cancelled", {"requestId": mid, "reason": f"timed out after {limit:g} s"})
            raise UpstreamError(f"'{self.name}' tool '{tool}' did not answer within {limit:g} s, so the call was "
                                f"cancelled. Raise timeout_seconds for this server in Abstract's settings, "
                                f"or ABSTRACT_TIMEOUT, if it needs longer.", REQUEST_TIMEOUT) from None
        finally:
            conn.forget(mid)
            self._progress.pop(token, None)

    # -- stop
    def close(self) -> None:
        """Shut down: close stdin, wait, terminate, wait, kill (every wait bounded).

        Not under the start lock: a start stuck in its handshake must not delay shutdown.
        """
        self._closing = True
        self._kill()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except (OSError, ValueError):
            pass
        for step in (None, self._terminate, self._hard_kill):
            if step is not None:
                step(proc)
            try:
                proc.wait(timeout=_SHUTDOWN_STEP_S)
                break
            except subprocess.TimeoutExpired:
                continue
        if self._conn is not None:
            self._conn.fail_pending(f"server '{self.name}' was shut down")

    @staticmethod
    def _terminate(proc: Any) -> None:
        try:
            if _WINDOWS:
                proc.terminate()
            else:
                os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            pass

    @staticmethod
    def _hard_kill(proc: Any) -> None:
        try:
            if _WINDOWS:
                proc.kill()
            else:
                os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass


class Upstreams:
    """Every configured upstream: lookup by name with helpful errors, parallel start and stop."""

    def __init__(self, config: ClientConfig, settings: Settings, roots: Callable[[], List[dict]],
                 spawn: Callable[..., Any] = subprocess.Popen) -> None:
        self.config = config
        self._all = {n: Upstream(s, settings, roots, spawn) for n, s in config.specs.items()}

    def names(self) -> List[str]:
        return list(self._all)

    def get(self, name: str) -> Upstream:
        up = self._all.get(name)
        if up is not None:
            return up
        cfg = self.config
        if cfg.error:
            raise ToolError(f"No upstream servers are available: {cfg.error}. Fix it and restart Abstract.")
        if name in cfg.unselected:
            raise ToolError(f"Server '{name}' is in {cfg.path} but not in ABSTRACT_PROXY_SERVERS; "
                            f"available: {_names_list(self.names())}.")
        raise ToolError(f"Unknown server '{name}'. Available servers: {_names_list(self.names())} (from {cfg.path}).")

    def each(self, fn: Callable[[Upstream], Any], names: Optional[List[str]] = None) -> Dict[str, Any]:
        """fn(upstream) for several upstreams in parallel; maps name -> result or the exception."""
        targets = [self._all[n] for n in (names if names is not None else self.names())]
        out: Dict[str, Any] = {}

        def run(up: Upstream) -> None:
            try:
                out[up.name] = fn(up)
            except Exception as e:  # reported per server, never failing the others
                out[up.name] = e

        threads = [threading.Thread(target=run, args=(u,), daemon=True) for u in targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {u.name: out.get(u.name) for u in targets}

    def close(self) -> None:
        self.each(lambda up: up.close())

# ==== 12. Tools ===================================================================
# What the model sees: each tool's schema and description, and its handler. Handlers raise
# ToolError for anything the model can fix; it becomes an isError result with that text.


class _Call:
    """One tools/call being handled: the arguments, the client request, the server."""

    __slots__ = ("server", "req", "args")

    def __init__(self, server: "Server", req: _Request, args: dict) -> None:
        self.server, self.req, self.args = server, req, args

    def str(self, key: str, required: bool = False) -> Optional[str]:
        v = self.args.get(key)
        if v is None:
            if required:
                raise ToolError(f"Missing required argument '{key}' (a string).")
            return None
        if not isinstance(v, str) or (required and not v):
            raise ToolError(f"Argument '{key}' must be a non-empty string, not {_dumps(v)[:80]}.")
        return v

    def obj(self, key: str) -> dict:
        v = self.args.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ToolError(f"Argument '{key}' must be an object of the tool's arguments, not {_dumps(v)[:80]}.")
        return v

    def flag(self, key: str) -> bool:
        v = self.args.get(key, False)
        if not isinstance(v, bool):
            raise ToolError(f"Argument '{key}' must be true or false, not {_dumps(v)[:80]}.")
        return v


def _schema(props: dict, required: Tuple[str, ...] = ()) -> dict:
    s: dict = {"type": "object", "properties": props}
    if required:
        s["required"] = list(required)
    return s


_P_SERVER = {"type": "string", "description": "Upstream server name, as list_available_tools shows it."}
_P_TOOL = {"type": "string", "description": "Tool name on that server."}
_P_ARGS = {"type": "object", "description": "Arguments for the upstream tool, as its inputSchema describes.",
           "additionalProperties": True}


def _tool_list_available_tools(call: _Call) -> dict:
    ups = call.server.upstreams
    detailed, only = call.flag("detailed"), call.str("filter_by_server")
    names = ups.names()
    if only is not None:
        ups.get(only)  # unknown server: a ToolError naming the ones that exist
        names = [only]
    elif ups.config.error:
        raise ToolError(f"No upstream servers are available: {ups.config.error}. Fix it and restart Abstract.")
    entries: List[dict] = []
    failed: List[dict] = []
    for name, got in ups.each(lambda up: up.tools(), names).items():
        if isinstance(got, Exception):
            failed.append({"server": name, "error": getattr(got, "message", None) or str(got)})
            continue
        for t in got:
            e = {"server": name, "tool": t["name"], "description": t.get("description", "")}
            if detailed:
                e["inputSchema"] = t.get("inputSchema", {})
            entries.append(e)
    out: dict = {"tools": entries, "total_tools": len(entries)}
    if failed:
        out["failed_servers"] = failed
    return _text_result(_dumps(out), out)


def _find_tool(up: Upstream, tool: str) -> dict:
    """The upstream's definition of `tool`; a ToolError naming the tools that exist."""
    tools = up.tools()
    for t in tools:
        if t["name"] == tool:
            return t
    raise ToolError(f"Server '{up.name}' has no tool '{tool}'. Its tools: {_names_list([t['name'] for t in tools])}.")


def _tool_list_tool_details(call: _Call) -> dict:
    server, tool = call.str("server", True), call.str("tool_name", True)
    up = call.server.upstreams.get(server)  # type: ignore[arg-type]
    d = _find_tool(up, tool)  # type: ignore[arg-type]
    out = {"server": server, "tool": d}
    return _text_result(_dumps(out), out)


def _upstream_call(call: _Call, server: str, tool: str, args: dict) -> dict:
    """Call an upstream tool for the client: progress relayed, cancellation forwarded.

    Returns the upstream's result, or raises ToolError with a message that names the server and
    tool (a JSON-RPC error from the upstream, a timeout, a crash).
    """
    up = call.server.upstreams.get(server)
    _find_tool(up, tool)
    token = call.req.meta.get("progressToken")
    relay = None
    if isinstance(token, (str, int)) and not isinstance(token, bool):
        client = call.server.conn

        def relay(p: dict) -> None:
            fwd = {k: v for k, v in p.items() if k != "_meta"}
            fwd["progressToken"] = token
            client.notify("notifications/progress", fwd)
    try:
        res = up.call_tool(tool, args, call.req, relay)
    except UpstreamError as e:
        raise ToolError(e.message) from None
    except RpcError as e:
        raise ToolError(f"'{server}' tool '{tool}' answered with JSON-RPC error {e.code}: {e.message}"
                        + (f" (data: {_dumps(e.data)[:500]})" if e.data is not None else "")) from None
    if not isinstance(res, dict) or not isinstance(res.get("content", []), list):
        raise ToolError(f"'{server}' tool '{tool}' sent a malformed result: {_dumps(res)[:300]}")
    for k in ("resultType", "ttlMs", "cacheScope"):  # the era envelope is ours to set
        res.pop(k, None)
    return res


def _tool_call_tool(call: _Call) -> dict:
    server, tool = call.str("server", True), call.str("tool_name", True)
    return _upstream_call(call, server, tool, call.obj("tool_args"))  # type: ignore[arg-type]


def _tool_list_allowed_directories(call: _Call) -> dict:
    out = call.server.sandbox.describe()
    return _text_result(_dumps(out), out)


_TOOLS: List[Tuple[str, str, dict, Callable[[_Call], dict]]] = [
    ("list_available_tools",
     "List the tools of the upstream MCP servers Abstract can reach, as {server, tool, description}. "
     "Start here to find a tool. Set detailed=true to include each inputSchema (costs more context); "
     "filter_by_server limits the list to one server.",
     _schema({"detailed": {"type": "boolean", "description": "Include each tool's inputSchema.", "default": False},
              "filter_by_server": {"type": "string", "description": "Only this server's tools."}}),
     _tool_list_available_tools),
    ("list_tool_details",
     "Get one upstream tool's complete definition (description, inputSchema, outputSchema, annotations) "
     "before calling it.",
     _schema({"server": _P_SERVER, "tool_name": _P_TOOL}, ("server", "tool_name")),
     _tool_list_tool_details),
    ("call_tool",
     "Call an upstream tool and get its result here, in the conversation, unchanged. Use it for small "
     "results (status checks, short answers). For large results (lists, tables, documents, exports) "
     "use call_tool_and_store when it is available, so the data goes to a file instead of the context.",
     _schema({"server": _P_SERVER, "tool_name": _P_TOOL, "tool_args": _P_ARGS}, ("server", "tool_name")),
     _tool_call_tool),
    ("list_allowed_directories",
     "List the directories Abstract may store files in and read files from; the first is the default.",
     _schema({}),
     _tool_list_allowed_directories),
]

_INSTRUCTIONS = (
    "Abstract reaches other MCP servers' tools for you and keeps large results out of the conversation.\n"
    "- list_available_tools finds tools (server + tool name); list_tool_details shows one tool's arguments.\n"
    "- call_tool runs a tool and returns its result here: use it for small results.\n"
    "- list_allowed_directories shows where files may be stored and read."
)

# ==== 13. Server ==================================================================
# The MCP server the client talks to, in both protocol eras: the legacy handshake
# (initialize, 2024-11-05 .. 2025-11-25) and the modern stateless era (2026-07-28), decided per
# request: a request that carries the modern _meta is answered in the modern era.

_CACHEABLE = {"server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list",
              "resources/read"}


class Server:
    """Abstract's MCP server over one client connection."""

    def __init__(self, rfile: Any, wfile: Any, sandbox: Sandbox, upstreams: Upstreams, settings: Settings) -> None:
        self.sandbox, self.upstreams, self.settings = sandbox, upstreams, settings
        self.version = HANDSHAKE_VERSIONS[0]  # the negotiated legacy version (until initialize says)
        self.log_level = "info"
        self.tools = {t[0]: t for t in _TOOLS}
        methods: Dict[str, Callable[[_Request], dict]] = {
            "initialize": self._initialize,
            "server/discover": self._discover,
            "ping": lambda req: {},
            "logging/setLevel": self._set_level,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
        }
        self.conn = Connection(rfile, wfile, name="client", pool=_Pool(),
                               requests={m: self._enveloped(m, fn) for m, fn in methods.items()})

    def serve(self) -> None:
        """Answer the client until its stdin closes, then stop every upstream."""
        self.conn.start()
        self.conn.closed.wait()
        self.upstreams.close()

    # -- eras
    def _enveloped(self, method: str, fn: Callable[[_Request], dict]) -> Handler:
        def handle(req: _Request) -> dict:
            modern = self._is_modern(req)
            result = fn(req)
            if modern:
                result = dict(result)
                result["resultType"] = "complete"
                if method in _CACHEABLE:
                    result["ttlMs"], result["cacheScope"] = 0, "private"
            return result
        return handle

    @staticmethod
    def _is_modern(req: _Request) -> bool:
        """Validate the modern per-request _meta when present (server/discover always needs it)."""
        meta = req.meta
        if _META_VERSION not in meta and req.method != "server/discover":
            return False
        version = meta.get(_META_VERSION)
        if not isinstance(version, str):
            raise RpcError(INVALID_PARAMS, f"params._meta['{_META_VERSION}'] must be the protocol version string")
        if version not in MODERN_VERSIONS:
            raise RpcError(UNSUPPORTED_VERSION, f"Unsupported protocol version {version!r}",
                           {"supported": list(MODERN_VERSIONS) + list(HANDSHAKE_VERSIONS), "requested": version})
        if not isinstance(meta.get(_META_CAPS), dict):
            raise RpcError(INVALID_PARAMS, f"params._meta['{_META_CAPS}'] must be an object")
        return True

    def protocol_for(self, req: _Request) -> str:
        return MODERN_VERSIONS[0] if _META_VERSION in req.meta else self.version

    def _capabilities(self) -> dict:
        return {"tools": {"listChanged": False}, "logging": {}}

    # -- methods
    def _initialize(self, req: _Request) -> dict:
        params = req.params or {}
        asked = params.get("protocolVersion")
        if not isinstance(asked, str):
            raise RpcError(INVALID_PARAMS, "initialize needs params.protocolVersion (a string)")
        self.version = asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[0]
        return {"protocolVersion": self.version, "capabilities": self._capabilities(),
                "serverInfo": {"name": _SERVER_NAME, "version": __version__}, "instructions": _INSTRUCTIONS}

    def _discover(self, req: _Request) -> dict:
        return {"supportedVersions": list(MODERN_VERSIONS) + list(HANDSHAKE_VERSIONS),
                "capabilities": self._capabilities(), "instructions": _INSTRUCTIONS,
                "_meta": {_META_SERVER_INFO: {"name": _SERVER_NAME, "version": __version__}}}

    def _set_level(self, req: _Request) -> dict:
        level = (req.params or {}).get("level")
        if not isinstance(level, str):
            raise RpcError(INVALID_PARAMS, "logging/setLevel needs params.level (a string)")
        self.log_level = level
        return {}

    def _tools_list(self, req: _Request) -> dict:
        tools = [{"name": n, "description": d, "inputSchema": s} for n, d, s, _ in self.tools.values()]
        cursor = (req.params or {}).get("cursor")
        start = 0
        if cursor is not None:
            if not isinstance(cursor, str) or not cursor.isdigit() or int(cursor) > len(tools):
                raise RpcError(INVALID_PARAMS, f"Invalid cursor {cursor!r}: use the nextCursor of the previous page")
            start = int(cursor)
        result: dict = {"tools": tools[start:start + _TOOLS_PAGE]}
        if start + _TOOLS_PAGE < len(tools):
            result["nextCursor"] = str(start + _TOOLS_PAGE)
        return result

    def _tools_call(self, req: _Request) -> dict:
        params = req.params or {}
        name, args = params.get("name"), params.get("arguments")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "tools/call needs params.name (a string)")
        tool = self.tools.get(name)
        if tool is None:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}. Abstract's tools: {_names_list(list(self.tools))}")
        if args is not None and not isinstance(args, dict):
            raise RpcError(INVALID_PARAMS, "tools/call params.arguments must be an object")
        try:
            return tool[3](_Call(self, req, args or {}))
        except ToolError as e:
            return _text_result(str(e), is_error=True)

# ==== 14. CLI =====================================================================


def _prepare_dirs(dirs: List[str], say: Callable[[str], None]) -> List[str]:
    """Create missing allowed directories; ConfigError for one that cannot be used."""
    if not dirs:
        default = _user_dir("outputs")
        say(f"no directory given: storing in {default}")
        dirs = [str(default)]
    out = []
    for d in dirs:
        p = Path(os.path.expanduser(d)).absolute()
        if p.exists() and not p.is_dir():
            raise ConfigError(f"{p} is not a directory; give a directory to store files in")
        if not p.exists():
            try:
                p.mkdir(parents=True)
            except OSError as e:
                raise ConfigError(f"cannot create directory {p}: {e.strerror or e}") from None
            say(f"created directory {p}")
        out.append(str(p))
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="abstract",
        description="An MCP proxy that keeps large tool results out of the model's context. Reads the upstream "
                    "servers from the MCP client config named by APP_CONFIG_PATH.",
        epilog="Env: APP_CONFIG_PATH (client config file), ABSTRACT_PROXY_SERVERS (comma-separated names), "
               "ABSTRACT_CONFIG (Abstract's settings file), ABSTRACT_TIMEOUT (seconds per tool call). "
               "Docs: docs/reference.md")
    ap.add_argument("dirs", nargs="*", metavar="DIR", help="allowed storage directories (created if missing)")
    ap.add_argument("--check", action="store_true", help="start every selected upstream once, report, and exit")
    ap.add_argument("--version", action="version", version=f"abstract {__version__}")
    return ap


def _check(config: ClientConfig, upstreams: Upstreams, out: Any) -> int:
    """--check: start every selected upstream in parallel and report per server."""
    out.write(f"abstract {__version__} (Python {sys.version.split()[0]})\n")
    if config.error:
        out.write(f"config: {config.error}\n")
        return 1
    out.write(f"config: {config.path}: {_plural(len(config.specs), 'server')} selected\n")
    for name in config.missing:
        out.write(f"  {name}: FAILED: named in ABSTRACT_PROXY_SERVERS but not in the config\n")
    results = upstreams.each(lambda up: up.tools())
    width = max([len(n) for n in results] + [4])
    ok = not config.missing
    for name, got in results.items():
        up = upstreams.get(name)
        if isinstance(got, Exception):
            ok = False
            out.write(f"  {name:<{width}}  FAILED: {getattr(got, 'message', None) or got}\n")
        else:
            out.write(f"  {name:<{width}}  started  protocol {up.protocol_version}  "
                      f"{_plural(len(got), 'tool')}  {up.start_ms:.0f} ms\n")
    upstreams.close()
    return 0 if ok else 1


def main(argv: Optional[List[str]] = None, *, stdin: Any = None, stdout: Any = None, stderr: Any = None,
         environ: Optional[Dict[str, str]] = None) -> int:
    """Run Abstract: serve MCP on stdin/stdout (binary streams), or --check. Returns the exit code."""
    args = _parser().parse_args(argv)
    err = stderr if stderr is not None else sys.stderr
    env = dict(os.environ if environ is None else environ)
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("abstract: %(message)s"))
    _log.addHandler(handler)
    _log.setLevel(env.get("ABSTRACT_LOG_LEVEL", "INFO").upper())
    _log.propagate = False
    try:
        return _run(args, env, stdin, stdout, err)
    except ConfigError as e:
        err.write(f"abstract: {e}\n")
        return 2
    finally:
        _log.removeHandler(handler)


def _run(args: argparse.Namespace, env: Dict[str, str], stdin: Any, stdout: Any, err: Any) -> int:
    settings = Settings.load(env.get("ABSTRACT_CONFIG"), env)
    dirs = _prepare_dirs(args.dirs, lambda m: err.write(f"abstract: {m}\n"))
    sandbox = Sandbox(dirs)
    config = ClientConfig(env.get("APP_CONFIG_PATH"), env.get("ABSTRACT_PROXY_SERVERS"), env)
    roots = [{"uri": _file_uri(r), "name": os.path.basename(r) or r} for r in sandbox.roots]
    upstreams = Upstreams(config, settings, lambda: roots)
    if args.check:
        return _check(config, upstreams, stdout if stdout is not None else sys.stdout)
    if config.error:
        _log.warning("%s; tools that need upstream servers will say so", config.error)
    rfile = stdin if stdin is not None else sys.stdin.buffer
    wfile = stdout
    if wfile is None:  # keep the real stdout for protocol messages; a stray print goes to stderr
        wfile = sys.stdout.buffer
        sys.stdout = sys.stderr
    Server(rfile, wfile, sandbox, upstreams, settings).serve()
    return 0


# ==== 15. Entry point =============================================================

if __name__ == "__main__":
    sys.modules.setdefault("abstract", sys.modules["__main__"])
    sys.exit(main())
