#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Source: the Abstract repository (README.md, docs/); a vendored copy: this one file is the whole
# program.
# When vendoring, note here the repository URL and commit you copied it from.
"""Abstract: an MCP proxy that keeps large tool results out of the model's context.

Usage (from an MCP client's config, or a shell):

    python abstract.py [DIR ...]          serve MCP on stdin/stdout; DIRs are the allowed folders
    python abstract.py --check            start every configured upstream once and report
    python abstract.py --login NAME       log in to a remote server (OAuth); --logout NAME forgets
    python abstract.py --help | --version

Abstract reads the MCP client's own config file (env APP_CONFIG_PATH), starts the upstream
servers it names (env ABSTRACT_PROXY_SERVERS picks some; default: all but Abstract itself),
and offers the model a handful of tools to discover and call their tools. Results can be
stored as files in the allowed folders instead of flowing through the conversation.

Vendoring: this file depends on the Python standard library only (3.9 and later). Copy it
anywhere and run it with any python3; nothing else is needed.

The map. `grep -n '^# ==' abstract.py` prints the parts, in this order; each part uses only the
parts above it, and `# -- name` lines mark the pieces inside one. Nothing is public but __all__.

    Imports             the standard library only; the imports kept lazy (start-up) are named
    Version, exports and constants
                        __version__, __all__, protocol versions, JSON-RPC codes, shared limits
    Errors              Error and every exception under it (RpcError, UpstreamError, _ToolError)
    Helpers             _Pool (bounded workers), _Secrets (masking), _LogGate, _Signer, URLs
    Formats             _convert and the readers and writers: json, csv, yaml, xml, md, html
    Files               _Sandbox (allowed folders), _write_new (the atomic writer), the walker
    Wire                Connection (JSON-RPC 2.0, both directions), _frame
    Config              _ClientConfig (the client's config file), _Settings (Abstract's own)
    HTTP                _http_request, _HttpPool, _SseParser; _BoundedServerMixin, _PageMixin
                        and _HttpExchange (the server side); _HttpTransport (a remote upstream
                        session's wire)
    Remote auth         _OAuth (logins for remote upstreams), _TokenStore, _Loopback
    Upstreams           _Upstream (one server: start, back-off, tools, calls), _Run and
                        _HttpRun (one session, with its Connection), _Protocol (its era and
                        capabilities), _Listener (its 2026-07-28 subscription), _ClientLink
                        (the client as upstreams see it) and _QuestionRelay (one server's
                        questions to it, the calls held), _Upstreams (all of them)
    Results             _extract (the one path that takes a result apart), shapes and hints
    Output cache        _OutputCache (large results as files, read in windows), _serve_links
    Catalog             _Catalog (SQLite: stored files, outputs, memory), _ToolIndex
    Queries             _Tables and the locked-down worker process (_QUERY_WORKER)
    Tool calls          _ToolContext, _Call (one call's arguments, errors a model can act on)
    Storing             _store_result: sandbox and quota first, convert, write, record
    Tools               _Tool (one tool: name, description, schema, handler, aliases, needs),
                        @_tool on each handler, _TOOLS (tools/list's order), _offered
    Server              _Server (both protocol eras), _Transparent (direct mode)
    Serving             MCP over Streamable HTTP (--serve): the guard, the authorization
                        server, the sessions behind /mcp (_Sessions: one _Session each, a
                        _Server over the shared upstreams, its streams resumable: _Resumes,
                        _Replay; _Listens: 2026-07-28 clients' subscriptions/listen streams;
                        _OldSse: the 2024-11-05 /sse and /messages; _Serving: the run and
                        its end)
    CLI                 main(argv): flags, --check, --login, serving on stdin/stdout
    Entry point         _console (the `abstract` command), _exit_now

How a request flows: the client reader (Wire) parses a line and hands a request to the worker
pool; _Server checks its protocol era and runs the method's handler; tools/call builds a _Call
over the _ToolContext and the tool's _Tool checks its arguments and runs its handler (Tools),
which reaches an upstream through _Upstreams and _Upstream, whose session speaks over a pipe or
_HttpTransport. A large result is taken apart once (_extract), then cached (Output cache) or
stored (Storing, through Files) and recorded (Catalog). A _ToolError becomes an isError
result; any other exception becomes a JSON-RPC error in one place, Connection._dispatch. The
answer goes out on the client's writer.

Threads (no asyncio; docs/design.md has the long table): main (start, wait, shut down); the
client's reader and writer; a bounded worker pool; per upstream a reader, a writer, a stderr
drain, a watcher, a few threads for its own requests, a start thread while it starts and a
subscription listener (2026-07-28); per remote request in flight one thread (bounded); the
--http link server; a login's loopback; the cache sweep; the reaper (Linux); with --serve, one
thread per HTTP connection (kept alive between requests; bounded by http_max_connections; it
runs its requests' handlers) and one per answer that streams or is slow, per session the
_Server's reader, writer and pool, the idle-session sweep and a stdin watcher.
"""


# ==== Imports =====================================================================

from __future__ import annotations

import argparse
import base64
import binascii
import codecs
import collections
import contextlib
import csv
import errno
import fnmatch
import glob
import html
import io
import itertools
import json
import logging
import math
import mimetypes
import os
import queue
import re
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unicodedata
import urllib.parse
import xml.etree.ElementTree as ET
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as futures_wait
from pathlib import Path
from pathlib import PurePath
from pathlib import PurePosixPath
from pathlib import PureWindowsPath
from typing import (Any, Callable, Container, Dict, Iterable, Iterator, List, Mapping, NamedTuple,
                    Optional, Sequence, Set, Tuple)
# Imported where they are used, for start-up time (a client starts Abstract for each session):
# hashlib, hmac and secrets (OpenSSL: ~5 ms), socket, selectors and http.server (~40 ms, --http
# only), datetime (~3 ms, catalog dates), urllib.request (~16 ms: http.client, email and ssl),
# ssl, http.client, select and webbrowser (remote servers and their logins only); ipaddress
# and ssl (--serve only); fcntl (POSIX) and msvcrt (Windows), one or the other, for the lock on
# a saved login;
# zlib and gzip because a Python may be built without zlib (shutil guards it the same way).

try:  # optional in a Python built without it, as shutil treats zlib: the catalog is then off
    import sqlite3
except ImportError:  # pragma: no cover
    sqlite3 = None  # type: ignore[assignment]


# ==== Version, exports and constants ==============================================
# The version, the public surface (__all__: the errors, Connection and main; every other name is
# private), the protocol versions and JSON-RPC codes, and the limits every part shares.

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

_HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
_MODERN_VERSIONS = ("2026-07-28",)
_LINK_VERSIONS = ("2025-11-25", "2025-06-18") + _MODERN_VERSIONS  # resource_link content exists
_SERVER_NAME = "abstract"

# JSON-RPC 2.0 and MCP error codes
_PARSE_ERROR = -32700
_INVALID_REQUEST = -32600
_METHOD_NOT_FOUND = -32601
_INVALID_PARAMS = -32602
_INTERNAL_ERROR = -32603
_CONNECTION_CLOSED = -32000  # SDK-local codes, reused for a dead or timed-out upstream
# (JSON-RPC's first "server error" code) a peer's request over the bound held at once
_BUSY = -32000
_REQUEST_TIMEOUT = -32001
_RESOURCE_NOT_FOUND = -32002  # legacy era; the modern era uses INVALID_PARAMS
_UNSUPPORTED_VERSION = -32022

# Modern-era per-request _meta keys
_META_VERSION = "io.modelcontextprotocol/protocolVersion"
_META_CAPS = "io.modelcontextprotocol/clientCapabilities"
_META_INFO = "io.modelcontextprotocol/clientInfo"
_META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
_META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
_META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
# 2025-11-25 tasks: what a message about a task names it by (basic/utilities/tasks)
_RELATED_TASK = "io.modelcontextprotocol/related-task"

_CALL_TIMEOUT_S = 120.0  # default deadline of an upstream tool call
_START_TIMEOUT_S = 30.0  # start-up and handshake
# Shutdown budget (see docs/design.md). MCP clients close Abstract's stdin, SIGTERM it 2 s later
# and SIGKILL it 2 s after that; Abstract stops its upstreams itself within that grace.
_DRAIN_S = 1.0  # after stdin EOF, how long requests still running may take to answer
_STOP_EOF_S = 0.8  # then every upstream's stdin is closed at once; how long they get to exit
_STOP_TERM_S = 0.8  # then SIGTERM to the process groups still running
_STOP_KILL_S = 0.5  # then SIGKILL; how long to wait for the kill to be reaped
_ANSWER_GRACE_S = 0.5  # then for the calls failed by the stop to answer
_EXIT_BUDGET_S = 3.5  # from EOF (or SIGTERM) to exit, whatever the client and upstreams do
_STOP_JOIN_S = 5.0  # main() returning: the longest it waits for a helper thread it started to end
_OUTQ_NOTICES_MAX = 8 * 1024 * 1024  # a peer this far behind misses notifications, not answers
_ROOTS_TIMEOUT_S = 10.0  # how long an upstream's roots/list waits for the client's answer
# an upstream's own requests (sampling, elicitation, roots/list, ping) Abstract holds at once:
# answered by 4 workers, the rest wait their turn; more are refused at once (docs: reference.md)
_UPSTREAM_REQUESTS_MAX = 16
_ASK_TIMEOUT_S = 3600.0  # an upstream's sampling or elicitation request: a person may be answering
# a 2026-07-28 upstream's input_required rounds for one call before it is given up
_INPUT_ROUNDS = 10
_INPUT_REQUESTS_MAX = 16  # inputRequests in one input_required result
_STATE_TTL_S = 3600.0  # a requestState Abstract gives a 2026-07-28 client is good this long
_STATE_MAX = 1 << 20  # the longest requestState of an upstream's that Abstract carries for a client
_HOLD_S = 600.0  # a handshake-era upstream's call held for a 2026-07-28 client's follow-up
_STDERR_TAIL_LINES = 20
_STDERR_LINE_MAX = 1000
# an upstream's log lines on Abstract's stderr (its stderr lines and notifications/message
# together): a burst of this many, then this many a second; each cut to _LOG_LINE_CHARS
_LOG_BURST = 200
_LOG_RATE = 20.0
_LOG_LINE_CHARS = 2000
_MAX_WORKERS = 256
_MAX_MESSAGE_MB = 128  # longest JSON-RPC line read from an upstream (max_upstream_message_mb)
_MAX_CLIENT_MESSAGE_MB = 32  # ... and from the client (max_client_message_mb)
_TOOLS_PAGE = 100
_CRASH_WINDOW_S = 10.0  # an upstream that dies this soon after starting counts as a quick crash
_BACKOFF_MAX_S = 60.0
_START_BACKOFF_S = 5.0  # a failed start is not tried again for 5, 10, 20 ... s (at most 60)
# list_available_tools waits 5 s for servers still starting, then as long as they keep
# answering (one within the last 3 s), at most 30 s; --check likewise from 10 s
_LIST_WAIT_S = 5.0
_CHECK_WAIT_S = 10.0
_WAIT_QUIET_S = 3.0
_WAIT_MAX_S = 30.0
# 2026-07-28 upstreams: how long a stdio server's answer to the server/discover probe is awaited
# before it is taken for a handshake-era server that stays silent (docs/reference/protocol.md)
_PROBE_S = 5.0
_LISTEN_ACK_S = 10.0  # subscriptions/listen: the server's acknowledgment is awaited this long
_LISTEN_REOPENS = 5  # a dropped subscription is reopened this often in a row, then given up
_LISTEN_BACKOFF_MAX_S = 30.0  # ... after 2, 4, 8 ... seconds, at most this
_LISTEN_LATE_ACK_S = 1.0  # an acknowledgment may reach Abstract after its stream's end
_LISTEN_STEADY_S = 60.0  # ... and only one that lasted this long ends the row (resets the count)
_WINDOWS = sys.platform == "win32"
_MACOS = sys.platform == "darwin"

_log = logging.getLogger("abstract")


# ==== Errors ======================================================================
# Every exception Abstract raises on purpose, under one root (Error); each also inherits the
# nearest builtin, so a caller's generic except still works.


class Error(Exception):
    """Root of every error Abstract raises on purpose."""


class ConfigError(Error, ValueError):
    """A config or settings file, or a command-line value, that cannot be used."""


class FormatError(Error, ValueError):
    """Data that cannot be parsed or converted; carries msg, doc, pos, lineno, colno like
    JSONDecodeError."""

    def __init__(self, msg: str, doc: str = "", pos: int = 0) -> None:
        lineno = doc.count("\n", 0, pos) + 1
        colno = pos - doc.rfind("\n", 0, pos)
        where = f": line {lineno} column {colno}" if doc else ""
        super().__init__(f"{msg}{where}")
        self.msg, self.doc, self.pos, self.lineno, self.colno = msg, doc, pos, lineno, colno


class SandboxError(Error, ValueError):
    """A path outside the allowed directories, or a name that is not a plain file name."""


class _ToolError(Error):
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
            return cls(_INTERNAL_ERROR, f"malformed error: {d!r}")
        code = d.get("code")
        return cls(code if isinstance(code, int) else _INTERNAL_ERROR, str(d.get("message", "")),
                   d.get("data"))


class UpstreamError(RpcError):
    """An upstream that is dead, cannot start, or did not answer in time."""

    def __init__(self, message: str, code: int = _CONNECTION_CLOSED) -> None:
        super().__init__(code, message)


class _NotSent(UpstreamError):
    """A request to a remote server that did not run: refused before it was sent (too many
    waiting), or it never reached the server (_NotReached, _SessionGone). The message is all
    there is to say: no "the server may have done part of the work"."""


class _NotReached(_NotSent):
    """A request whose connection to the remote server could not be made (refused, no route, a
    failed TLS handshake): nothing of it was sent, so it cannot have run."""


class _SessionGone(_NotSent):
    """HTTP 404 to a request that carried Mcp-Session-Id: the server ended that session (it
    restarted, or expired it) and did not process the request (2025-11-25 spec, basic/transports
    #session-management). _Upstream._anew sends it once more, in a new session."""


class _StillStarting(UpstreamError):
    """An upstream whose start (in the background, _Upstream._current) has not answered within
    the wait: `since` is how long it has been starting, in seconds."""

    def __init__(self, message: str, since: float) -> None:
        super().__init__(message, _REQUEST_TIMEOUT)
        self.since = since


class _Cancelled(Error):
    """The client cancelled the request; nothing is sent back."""


class _InputRequired(Error):
    """A 2026-07-28 client must answer an upstream's questions first: `result` is the
    input_required result it gets instead of the answer (see _ClientLink.seal)."""

    def __init__(self, result: dict) -> None:
        super().__init__("input required")
        self.result = result


class _NotRegular(SandboxError):
    """Inside the sandbox, but not a regular file (a folder, FIFO, device): resources/read
    answers "not found" for it, as for a missing file."""


class _HttpError(Error, OSError):
    """An HTTP exchange that failed: no connection, TLS, a timeout, a refused redirect, a body
    over its bound, or (raised by callers through _HttpResponse.error) an unwanted status.
    `status` is 0 when no HTTP answer came; `url` is shown without credentials or query;
    `unsent`: no connection was made, so nothing of the request left (a refused connect)."""

    def __init__(self, message: str, url: str = "", status: int = 0, first_line: str = "",
                 unsent: bool = False) -> None:
        super().__init__(message)
        self.url, self.status, self.first_line = url, status, first_line
        self.unsent = unsent

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class _AuthError(_HttpError):
    """A remote server's login cannot go on, or must be done first: the message says what to do.
    An HttpError, so the transport reports it as it reports any failed request. `refused`: the
    authorization server turned a grant down (invalid_grant), as opposed to not being reached."""

    def __init__(self, message: str, refused: bool = False, login: bool = False) -> None:
        super().__init__(message)
        self.refused = refused
        self.login = login  # a login is needed (and has started, unless --check): no fault


class _LoginNeeded(UpstreamError):
    """A request to a remote server that waits for a login: the message says what to do. Not a
    fault of the server's: a handshake that fails with it does not count as a crash."""


class _ProbeFatal(UpstreamError):
    """A stdio server of unknown era that exited on the server/discover probe (many hand-rolled
    handshake-era servers exit on a method they do not know): _Upstream._start starts it again,
    once, straight to initialize."""


class _NotRecords(Error):
    """A text read in one pass (_scan_records) proved not to be a JSON array of objects: it is
    read the ordinary way instead (_extract)."""


class _Closed(Error):
    """The table was closed (evicted) before the query began to read it."""


# ==== Helpers =====================================================================


def _dumps(obj: Any) -> str:
    """Compact JSON, non-ASCII kept (the wire and text items use this)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _utc(t: Optional[float] = None, ms: bool = False, compact: bool = False) -> str:
    """A time (default: now) in UTC, ISO 8601: "2025-01-31T09:05:00Z"; with `ms`
    "2025-01-31T09:05:00.250Z" (the catalog's: sorts as text in time order); `compact`
    "20250131T090500Z" (file names)."""
    t = time.time() if t is None else t
    if ms:
        n = int(round(t * 1000))
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(n // 1000)) + f".{n % 1000:03d}Z"
    return time.strftime("%Y%m%dT%H%M%SZ" if compact else "%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


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


_SECRET_MIN = 4  # a shorter value is not masked: it would hide common words (and "***" itself)
# ... nor a shorter query or header value whose name does not say it is a secret: "?mode=full"
# or "X-Region: europe" would make every "full" and "europe" in every error "***"
_SECRET_PLAIN_MIN = 8
# OAuth tokens (in all their forms) remembered at once; past it the oldest (spent) are let go.
# The config's secrets are kept for good: the config bounds them.
_SECRETS_PASSING = 128
# the name of an environment variable whose value is a secret (GITHUB_TOKEN, OPENAI_API_KEY, ...)
# (and of a header or URL query value: Authorization, X-Api-Key, ?access_token=, ?sig=)
_SECRET_ENV_RE = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|AUTH|"
                            r"AUTHORIZATION|CREDENTIALS?|COOKIE|PAT|SIG|SIGNATURE)(?:_|$)",
                            re.IGNORECASE)
# a URL within a command line's argument or an env value (its secrets are masked: add_url)
_URL_IN_TEXT_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")
# C0 and C1 controls (a terminal's escape sequences, CR that overwrites a line, BEL, NUL), and
# the line separators and bidirectional overrides that make text show other than it is; tab and
# newline are kept
_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class _Secrets:
    """Every secret Abstract holds, in one place: the values of remote entries' headers, the
    credentials and query values of their URLs, secret-named env values of stdio entries, OAuth
    access and refresh tokens and client secrets (as they are loaded, received or set), and
    ABSTRACT_CACHE_SECRET. `mask` writes each as *** in a text: every error, log line and CLI
    report passes through it (_clean), whatever path made the text. Each secret is also known
    in the forms an echo may take (percent-encoded, JSON-escaped). Tokens are `passing`: at most
    _SECRETS_PASSING of their forms are kept, the oldest let go first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lasting: Dict[str, None] = {}
        self._passing: Dict[str, None] = {}  # insertion order: the oldest is let go first
        self._all: Tuple[str, ...] = ()  # both, the longest first (no secret masked in part)

    def add(self, *values: Any, passing: bool = False) -> None:
        """Remember secrets (non-strings and short ones are ignored); cheap when known (it runs
        for every request to a server with a login)."""
        new = [v for v in values if isinstance(v, str) and len(v) >= _SECRET_MIN
               and v not in self._lasting and v not in self._passing]
        if not new:
            return
        with self._lock:
            into = self._passing if passing else self._lasting
            for v in new:
                for form in self._forms(v):
                    into[form] = None
            while len(self._passing) > _SECRETS_PASSING:
                del self._passing[next(iter(self._passing))]
            self._all = tuple(sorted({**self._lasting, **self._passing}, key=len, reverse=True))

    @staticmethod
    def _forms(v: str) -> List[str]:
        """`v` as it is, percent-encoded (a URL echoed) and JSON-escaped (a document echoed)."""
        forms = [v, json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1]]
        with contextlib.suppress(UnicodeEncodeError):  # (a lone surrogate has no UTF-8)
            forms += [urllib.parse.quote(v, safe=""), urllib.parse.quote_plus(v)]
        return forms

    @staticmethod
    def _named(name: str, value: str, plain: bool = True) -> Optional[str]:
        """`value` if its name says it is a secret, or (`plain`) if it is long enough to be
        one."""
        secret = _SECRET_ENV_RE.search(name.replace("-", "_")) is not None
        return value if secret or (plain and len(value) >= _SECRET_PLAIN_MIN) else None

    def add_header(self, name: str, value: str) -> None:
        """A header value's secrets: the whole value (_named), its words if the name says it
        is a secret (a Bearer's token alone; not every word of a User-Agent), and a Basic
        credential's password (where a URL's user:password@ went)."""
        words = value.split() if self._named(name, value, plain=False) else ()
        self.add(self._named(name, value), *(w for w in words if len(w) >= 8))
        scheme, _, cred = value.partition(" ")
        if scheme.lower() == "basic":
            with contextlib.suppress(ValueError):  # (UnicodeDecodeError is one)
                self.add(base64.b64decode(cred.strip(), validate=True).decode().partition(":")[2])

    def add_url(self, url: str, plain: bool = True) -> None:
        """A URL's secrets: its password and its query's values (_named; not `plain`: only
        those named like secrets), decoded and as written."""
        with contextlib.suppress(ValueError):
            p = urllib.parse.urlsplit(url)
            raw = [part.partition("=")[::2] for part in p.query.split("&")]
            self.add(p.password, urllib.parse.unquote(p.password or ""),
                     *(self._named(k, v, plain) for k, v in urllib.parse.parse_qsl(p.query)),
                     *(self._named(urllib.parse.unquote(k), v, plain) for k, v in raw))

    def add_env(self, env: Dict[str, str]) -> None:
        """The values of the variables named like secrets (..._TOKEN, ..._API_KEY, ...), and
        the secrets of URLs among them (add_url: DATABASE_URL's password)."""
        self.add(*(v for k, v in env.items() if _SECRET_ENV_RE.search(k) and len(v) >= 8))
        self._add_urls(env.values())

    def _add_urls(self, values: Iterable[str]) -> None:
        """The secrets of the URLs in `values` (--db=postgresql://u:pw@h/db too): passwords and
        the query values named like secrets (?sslmode=verify-full is no secret)."""
        for v in values:
            for m in _URL_IN_TEXT_RE.finditer(v) if "://" in v else ():
                self.add_url(m.group(), plain=False)

    def add_args(self, args: List[str]) -> None:
        """The values of a command line's options named like secrets (--api-key V, --token=V),
        and the secrets of URLs among its arguments (add_url: a database URL's password)."""
        self._add_urls(args)
        for i, arg in enumerate(args):
            name, eq, value = arg.lstrip("-").replace("-", "_").partition("=")
            if arg.startswith("-") and _SECRET_ENV_RE.search(name):
                value = arg.partition("=")[2] if eq else (args[i + 1] if i + 1 < len(args)
                                                          else "")
                self.add(value if len(value) >= 8 else None)

    def mask(self, text: str) -> str:
        """`text` with every secret written ***. (str.find per secret: faster than one regex of
        them all, which sre tries branch by branch at every position, and nothing to compile.)"""
        for form in self._all:
            if form in text:
                text = text.replace(form, "***")
        return text

    def mask_json(self, value: Any) -> Any:
        """`mask` through a JSON value's strings, keys too (an upstream error's `data`). One
        nested too deeply to walk (the JSON parser takes more levels than a walk can recurse)
        is replaced by a note: it is not shown unmasked, and the error still reaches its call."""
        if not self._all:
            return value
        try:
            return self._mask_json(value)
        except RecursionError:
            return "(nested too deeply to be shown)"

    def _mask_json(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, list):
            return [self._mask_json(v) for v in value]
        if isinstance(value, dict):
            return {self.mask(k): self._mask_json(v) for k, v in value.items()}
        return value


_SECRETS = _Secrets()


def _escape_controls(text: str) -> str:
    """`text` with its control characters (_CONTROL_RE) written as \\x1b, \\u202e, ..."""
    return _CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                           else f"\\u{ord(m.group()):04x}", text)


def _clean(text: str) -> str:
    """Text fit to show: secrets masked, control characters escaped. For errors, log lines and
    CLI reports, which may carry what an upstream or an authorization server sent."""
    text = _SECRETS.mask(text)
    return _escape_controls(text) if _CONTROL_RE.search(text) else text


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n:,} {word}s"


def _word_cut(text: str, limit: int) -> int:
    """Where to cut `text` to at most `limit` characters: after the last whole word, unless
    that loses more than half (one very long word is cut inside)."""
    if len(text) <= limit:
        return len(text)
    cut = text.rfind(" ", 0, limit + 1)
    return cut if cut > limit // 2 else limit


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
        self._threads: List[threading.Thread] = []  # (at most max_workers: a worker ends on close)
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args) on an idle worker, a new one, or (at the cap) the next one free."""
        with self._lock:
            spawn, closed = False, self._closed
            if closed:  # none is expected: a thread of its own rather than a job no worker takes
                pass
            elif self._idle > 0:
                self._idle -= 1  # reserved: that worker takes this job
            elif self._workers < self._max:
                self._workers += 1
                spawn = True
            else:
                self._backlog += 1
            if not closed:  # queued under the lock: always ahead of close()'s stop marks
                self._q.put((fn, args))
        if closed:
            threading.Thread(target=self._job, args=(fn, args), name=f"{self._name}-late",
                             daemon=True).start()
        elif spawn:
            t = threading.Thread(target=self._run, name=f"{self._name}-{self._workers}",
                                 daemon=True)
            with self._lock:
                self._threads.append(t)
            t.start()

    def close(self) -> None:
        """Take no more jobs: each worker ends once the jobs queued before now are done (none is
        cut short). Called by whoever submits, once it has stopped submitting."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for _ in range(self._workers):
                self._q.put(None)

    def join(self, timeout: float) -> bool:
        """Wait at most `timeout` for the workers to end (after close); True if they all have."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    @staticmethod
    def _job(fn: Callable[..., Any], args: tuple) -> None:
        try:
            fn(*args)
        except BaseException:  # a handler must never kill its worker
            _log.error("unhandled error in worker:\n%s", traceback.format_exc())

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:  # close(): every job queued before it is done
                return
            self._job(*item)
            # not kept while idle: a request's objects (and through its cancel hooks, the
            # upstream's answer, a large one too) would live until the next job
            item = None
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
        """The last `n` lines, cleaned (_clean): an upstream's words, quoted in errors, answers
        and --check."""
        with self._lock:
            return _clean("\n".join(list(self._lines)[-n:]))


class _LogGate:
    """How many of one upstream's log lines reach Abstract's stderr: a token bucket of `burst`
    lines refilled at `rate` a second, for its stderr lines and its notifications/message alike,
    so a flood costs a bounded number of lines. Lines past it are counted, and the count is
    written ("dropped N log lines from '<server>'") before the next line that passes, and by
    flush(): at most once a second after a drop or a pause in its stderr, and at a run's end."""

    def __init__(self, name: str, rate: float = _LOG_RATE, burst: int = _LOG_BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._name, self._rate, self._burst, self._clock = name, rate, burst, clock
        self._tokens, self._at = float(burst), clock()
        self._dropped = 0
        self._told = float("-inf")  # when a count was last written
        self._later: Optional[threading.Timer] = None  # a pause's count, held back (flush)
        self._lock = threading.Lock()

    def write(self, text: Callable[[], str]) -> None:
        """Log the line text() at INFO (cut to _LOG_LINE_CHARS) if the bucket has room, else
        count it (text() is not called: a dropped line costs no formatting)."""
        if not _log.isEnabledFor(logging.INFO):
            return  # (hidden anyway: nothing is dropped)
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self._burst), self._tokens + (now - self._at) * self._rate)
            self._at = now
            passes = self._tokens >= 1
            if passes:
                self._tokens -= 1
                dropped, self._dropped = self._dropped, 0
                self._told = now if dropped else self._told
            else:
                self._dropped, dropped = self._dropped + 1, 0
        if dropped:
            self._say(dropped)
        if not passes:  # its count is written within a second, even if no line passes after
            self.flush(pause=True)
            return
        line = text()
        if len(line) > _LOG_LINE_CHARS:
            line = line[:_LOG_LINE_CHARS] + " [...]"
        _log.info("%s", line)

    def flush(self, pause: bool = False) -> None:
        """Write the count of the lines dropped since the last line that passed, if any. At a
        `pause` of its stderr, at most once a second: the reader of a steady flood it keeps up
        with pauses after every line, and would tell each dropped line on its own; a count
        held back is written when the second is up (one timer at a time)."""
        with self._lock:
            now = self._clock()
            wait = 1.0 - (now - self._told)
            if pause and wait > 0:
                if self._dropped and self._later is None:
                    self._later = threading.Timer(wait, self._flush_later)
                    self._later.daemon, self._later.name = True, f"log-count-{self._name}"
                    self._later.start()
                return
            dropped, self._dropped = self._dropped, 0
            self._told = now if dropped else self._told
        if dropped:
            self._say(dropped)

    def _flush_later(self) -> None:
        with self._lock:
            self._later = None
        self.flush()

    def _say(self, dropped: int) -> None:
        _log.warning("dropped %s from '%s' (more than %d at once, or %g a second)",
                     _plural(dropped, "log line"), self._name, self._burst, self._rate)


def _iter_lines(stream: Any, limit: int = 1 << 16,
                pause: Optional[Callable[[], None]] = None) -> Iterator[bytes]:
    """Yield the lines of a binary stream without ever holding more than `limit` bytes of one.

    Used for stderr, where a child may write megabytes without a newline: an overlong line is
    passed on in pieces of `limit` bytes (each marked " [...]"), so memory stays bounded
    whatever the child does. `pause` is called once the lines of a read that found less than
    it asked for are out: the stream had nothing more for now.
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
        while len(partial) > limit:
            yield partial[:limit] + b" [...]"
            partial = partial[limit:]
        if pause is not None and len(chunk) < 1 << 16:
            pause()


def _env_key(env: Dict[str, str], name: str) -> Optional[str]:
    """The key under which `env` holds the variable `name`, or None. Windows compares names
    without case (Path is PATH, AppData is APPDATA); a copy of os.environ is a plain dict."""
    if name in env:
        return name
    if _WINDOWS:
        upper = name.upper()
        return next((k for k in env if k.upper() == upper), None)
    return None


def _env_get(env: Dict[str, str], name: str, default: Any = None) -> Any:
    """env[name], its case ignored on Windows (_env_key); `default` when it is not set."""
    key = _env_key(env, name)
    return default if key is None else env[key]


def _env_merge(env: Dict[str, str], updates: Dict[str, str]) -> None:
    """Set `updates` in `env`, each replacing the variable of that name: on Windows a config's
    "Path" replaces the inherited PATH, where a dict update would give the child both."""
    for name, value in updates.items():
        if _WINDOWS:
            for key in [k for k in env if k.upper() == name.upper()]:
                del env[key]
        env[name] = value


# ${VAR}, ${VAR:-default}, ${env:VAR} (Cursor, VS Code, Windsurf), ${input:id} (VS Code prompts)
# and the editors' predefined names (${workspaceFolder}, ${userHome}, ${pathSeparator}, ${/}).
_VAR_RE = re.compile(r"\$\{(?:(env|input):)?([A-Za-z_][A-Za-z0-9_.-]*|/)(:-([^}]*))?\}")


def _expand(value: str, env: Dict[str, str], missing: List[str],
            known: Optional[Dict[str, str]] = None) -> str:
    """Expand the variables above. `known` holds the predefined names; unset variables go to
    `missing` as `NAME`, and ${input:id}, which only VS Code can answer, as `input:id`."""

    def sub(m: "re.Match[str]") -> str:
        kind, name, default = m.group(1), m.group(2), m.group(4)
        if kind == "input":
            if known and f"input:{name}" in known:
                return known[f"input:{name}"]
            missing.append(f"input:{name}")
            return ""
        if kind is None and known and name in known:
            return known[name]
        value = _env_get(env, name)
        if value:
            if _SECRET_ENV_RE.search(name) and len(value) >= 8:  # wherever it lands (args, a
                _SECRETS.add(value)  # URL, a header), a secret's value is masked in errors
            return value
        if m.group(3) is not None:
            return default or ""
        if value is None:
            missing.append(name)
        return value or ""

    return _VAR_RE.sub(sub, value)


def _expand_path(value: str, env: Dict[str, str], missing: List[str],
                 known: Optional[Dict[str, str]] = None) -> str:
    """_expand, then `~` at the start (home directory)."""
    value = _expand(value, env, missing, known)
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


def _file_uri(path: str, windows: bool = _WINDOWS) -> str:
    """A file:// URI for an absolute local path, right for the platform (C:\\x -> file:///C:/x,
    \\\\server\\share\\x -> file://server/share/x); `windows` picks the rules (tests set it)."""
    return (PureWindowsPath if windows else PurePosixPath)(path).as_uri()


def _uri_to_path(uri: str, windows: bool = _WINDOWS) -> str:
    """The local path of a file:// URI, percent-decoded: the inverse of _file_uri. On Windows a
    host names a UNC share (file://server/share/x and file:////server/share/x are
    \\\\server\\share\\x) and /C:/x (or /C|/x) is C:\\x; elsewhere a host other than
    localhost is refused (POSIX has no UNC paths)."""
    parts = urllib.parse.urlparse(uri)
    if parts.scheme != "file":
        raise SandboxError(f"not a file:// URI: {uri!r}")
    host = "" if parts.netloc.lower() == "localhost" else parts.netloc
    path = urllib.parse.unquote(parts.path)
    if not windows:
        if host:
            raise SandboxError(f"file URI with a remote host is not supported: {uri!r} (a "
                               f"file://server/share/... link names a Windows network share)")
        return path
    if host:
        return "\\\\" + host + path.replace("/", "\\")
    if re.match(r"/[A-Za-z][:|](?:/|\Z)", path):  # /C:/x: the drive, without the slash before it
        path = path[1] + ":" + (path[3:] or "/")
    return path.replace("/", "\\")


# Windows refuses to open, rename or delete a file another program holds without sharing it
# (an antivirus scanning a new file, a reader while a refresh replaces it): ERROR_ACCESS_DENIED
# (5) or ERROR_SHARING_VIOLATION (32), which pass once it lets go.
_SHARING_ERRORS = (5, 32)
_SHARING_WAIT_S = 5.0  # how long _retry_shared retries before the error stands


def _retry_shared(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """fn(*args, **kw), tried again for up to _SHARING_WAIT_S (backing off from 10 ms to 0.5 s)
    while it fails with a Windows sharing violation; any other error, or the same after the
    wait, is raised. Never retries elsewhere (no OSError carries a winerror there)."""
    deadline, pause = time.monotonic() + _SHARING_WAIT_S, 0.01
    while True:
        try:
            return fn(*args, **kw)
        except OSError as e:
            if (getattr(e, "winerror", None) not in _SHARING_ERRORS
                    or time.monotonic() + pause > deadline):
                raise
        time.sleep(pause)  # (Windows has no way to wait for another program's handle to close)
        pause = min(pause * 2, 0.5)


# -- URLs and signatures


def _safe_url(url: str) -> str:
    """A URL fit for logs and errors: scheme, host, port and path; no user:password, and a query
    (which may hold an API key) shown as `?…`."""
    try:
        p = urllib.parse.urlsplit(url)
        host = p.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{p.port}" if p.port else ""
    except ValueError:  # a malformed port
        return "(malformed URL)"
    return f"{p.scheme}://{host}{port}{p.path}" + ("?…" if p.query else "")


def _basic_auth(parts: urllib.parse.SplitResult) -> str:
    """The HTTP Basic credential of a URL's user:password@ (percent-decoded), as curl sends it."""
    pair = (f"{urllib.parse.unquote(parts.username or '')}:"
            f"{urllib.parse.unquote(parts.password or '')}")
    return "Basic " + base64.b64encode(pair.encode()).decode()


def _strip_userinfo(url: str) -> str:
    """`url` without its user:password@ (and without a fragment, which is never sent)."""
    p = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((p.scheme, p.netloc.rpartition("@")[2], p.path, p.query, ""))


def _url_origin(url: str) -> Tuple[str, str, int]:
    p = urllib.parse.urlsplit(url)
    return p.scheme, (p.hostname or "").lower(), p.port or (443 if p.scheme == "https" else 80)


def _parse_hostport(value: str, flag: str = "--http") -> Tuple[str, int]:
    """`flag`'s [HOST:]PORT ("8765", "0.0.0.0:80", "[::1]:9"): host 127.0.0.1 unless given, port
    0 for a free one; ConfigError naming the flag and the form otherwise."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    # not isdigit(): "²".isdigit() is True; a host of letters, digits, dots, hyphens and colons
    if (not re.fullmatch(r"[0-9]{1,5}", port) or int(port) > 65535
            or not re.fullmatch(r"[A-Za-z0-9._:-]+", host)):
        raise ConfigError(f"{flag} needs [HOST:]PORT such as 127.0.0.1:8765, not {value!r}")
    return host, int(port)


# what no URL of a metadata document may hold: whitespace, controls (a terminal's escape
# sequences, BEL) and the invisible or reordering characters that make a URL read as another
_URL_BAD_RE = re.compile("[\\s\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def _origin_key(text: str) -> Optional[Tuple[str, str, int]]:
    """An origin ("https://claude.ai", "http://[::1]:8080": scheme://host[:port], as a browser's
    Origin header writes it) as (scheme, host, port) for comparing, default ports filled in;
    None for anything else: a path, a query, user:password@, "null", another scheme."""
    text = text.strip()
    if _URL_BAD_RE.search(text) or not re.match(r"(?i)https?://", text):
        return None
    try:
        p = urllib.parse.urlsplit(text)
        p.port  # (ValueError for a malformed one)
    except ValueError:
        return None
    if not p.hostname or p.path not in ("", "/") or p.query or p.fragment or "@" in p.netloc:
        return None
    return _url_origin(text.lower())


class _Signer:
    """HMAC-SHA256 signatures over "{token}:{expires}": cache download links, and the requestState
    Abstract gives a 2026-07-28 client (_ClientLink.seal)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def sign(self, token: str, expires: int) -> str:
        import hashlib
        import hmac

        # surrogatepass: a client's requestState may hold a lone surrogate (it then fails check)
        return hmac.new(self._secret, f"{token}:{expires}".encode("utf-8", "surrogatepass"),
                        hashlib.sha256).hexdigest()

    def check(self, token: str, expires: int, sig: str) -> bool:
        import hmac

        # bytes: compare_digest raises TypeError for str with non-ASCII characters (%C3%A9 decoded)
        return hmac.compare_digest(self.sign(token, expires).encode(),
                                   sig.encode("utf-8", "replace"))


# ==== Formats =====================================================================
# Converts JSON values (dict, list, str, int, float, bool, None) to and from
# json, csv, tsv, md, txt, html, yaml and xml, the large ones in parts (never one huge string).
# Imports used here: csv, html, io, itertools, json, math, re, xml.etree.ElementTree as ET.

_FORMATS = ("json", "csv", "tsv", "md", "txt", "html", "yaml", "xml")
_READABLE = ("json", "jsonl", "csv", "tsv", "yaml", "xml", "txt")

# Compact JSON for nested table cells.  JSONEncoder.encode builds a new C
# encoder on every call, which made nested cells the main cost of writing CSV,
# so one is built here (same arguments as json/encoder.py passes, unchanged
# from 3.8 to 3.13).  It is checked on a probe value, and the public encoder
# is used wherever it is missing or differs (PyPy, a changed signature).
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _make_compact_encoder(public: json.JSONEncoder = _COMPACT_JSON) -> Any:
    """A fast function for what `public` (one line, non-ASCII kept) encodes, or its own encode
    when unsure: json's C encoder made once, not once a call as JSONEncoder.encode does."""
    make = getattr(json.encoder, "c_make_encoder", None)
    probe = [1, 2.5, float("inf"), "é\n\"", None, True, {"k": []}]
    try:
        encode = make(None, public.default, json.encoder.encode_basestring, None,
                      public.key_separator, public.item_separator, False, False, True)
        if "".join(encode(probe, 0)) == public.encode(probe):
            return lambda value: "".join(encode(value, 0))
    except Exception:  # any mismatch in the private API: use the public one
        pass
    return public.encode


_compact_json = _make_compact_encoder()
# ", " and ": " between members: the lines of a cached output's text view (_json_view)
_view_json = _make_compact_encoder(json.JSONEncoder(ensure_ascii=False))
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean_text(value: Any) -> Any:
    """A string UTF-8 can hold (SQLite, a file): lone surrogates replaced by U+FFFD."""
    return _LONE_SURROGATE.sub("\ufffd", value) if isinstance(value, str) else value


class _Converted(NamedTuple):
    """The result of _convert: how to render the text (in parts, so a large table is never
    one huge string) and what it holds."""
    render: Callable[[], Iterable[str]]
    fmt: str                      # the format actually written
    rows: Optional[int]           # record count when the data is tabular
    columns: Optional[List[str]]  # column names when the data is tabular
    notes: List[str]              # things the user should know

    @property
    def parts(self) -> Iterable[str]:
        """The text in parts, rendered afresh on each use."""
        return self.render()

    @property
    def text(self) -> str:
        return "".join(self.render())


def _line_offset(text: str, lineno: int) -> int:
    """Offset of the start of 1-based line lineno, for FormatError positions."""
    pos = 0
    for _ in range(lineno - 1):
        nl = text.find("\n", pos)
        if nl < 0:
            return len(text)
        pos = nl + 1
    return pos


# -- tabular detection

def _scalar_kind(value: Any) -> str:
    """How a lone scalar is named in the "not tabular" reason."""
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "null value" if value is None else "number"


def _records_key(data: Dict[str, Any]) -> Tuple[Optional[str], str]:
    """The one key of a wrapper object ({"results": [...], "total": 3}) holding records."""
    # Empty lists do not count: {"name": "x", "aliases": []} is one object,
    # not an empty table.
    keys = [k for k, v in data.items()
            if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)]
    if len(keys) == 1:
        return keys[0], ""
    if keys:
        return None, "an object with several lists of records (" + ", ".join(keys) + ")"
    return None, "a single object, not a list of records"


def _as_records(data: Any) -> Tuple[Optional[List[Dict[str, Any]]], str]:
    """(rows, "") when data is tabular, else (None, a reason a person can read)."""
    if isinstance(data, dict):
        key, reason = _records_key(data)
        return (data[key], "") if key is not None else (None, reason)
    if not isinstance(data, list):
        return None, f"a single {_scalar_kind(data)}, not a list of records"
    dicts = sum(1 for x in data if isinstance(x, dict))
    if dicts == len(data):
        return data, ""
    if dicts:
        return None, "a list mixing objects and other values"
    if any(isinstance(x, list) for x in data):
        return None, "a list holding nested lists, not records"
    return [{"value": x} for x in data], ""


# -- emitters: json, txt, csv

_VIEW_INDENT_MAX = 100_000  # JSON up to this many characters is written indented by two spaces


def _json_lines(data: Any, records_key: Optional[str] = None) -> Iterator[str]:
    """A non-empty list or object as JSON laid out a line per item: a list's items, or an
    object's members, one to a line, and the records of its `records_key` member one to a line
    too; each line by json's C encoder (_view_json): the pure-Python encoder that indenting
    needs before 3.14 takes twice as long and more."""
    encode = _view_json
    if isinstance(data, list):
        last = len(data) - 1
        yield "["
        for i, item in enumerate(data):
            yield ("\n" if i == 0 else ",\n") + encode(item) + ("\n]" if i == last else "")
        return
    last = len(data) - 1
    yield "{"
    for i, (key, value) in enumerate(data.items()):
        yield ("\n" if i == 0 else ",\n") + encode(key) + ": "
        if key == records_key:
            yield from _json_lines(value)
        else:
            yield encode(value)
        if i == last:
            yield "\n}"


def _json_longer(data: Any, limit: int) -> bool:
    """Whether a list's items (an object's members) take more than `limit` characters of JSON,
    encoding no more of them than it takes to know."""
    used = 0
    for item in data.items() if isinstance(data, dict) else data:
        used += len(_view_json(item)) + 2
        if used > limit:
            return True
    return False


def _dump_json_parts(data: Any, batch: int = 4096) -> Iterator[str]:
    """Pretty JSON (UTF-8 kept as is) ending with a newline, in parts of about `batch` encoder
    chunks, so a large value is never one huge string: indented by two spaces up to about
    _VIEW_INDENT_MAX characters; a larger list or object laid out a line per item, records one
    to a line (_json_lines), as a cached output's text is."""
    if isinstance(data, (list, dict)) and data and _json_longer(data, _VIEW_INDENT_MAX):
        chunks = _json_lines(data, _records_key(data)[0] if isinstance(data, dict) else None)
    else:
        chunks = json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(data)
    while True:
        text = "".join(itertools.islice(chunks, batch))
        if not text:
            yield "\n"
            return
        # ensure_ascii=False leaves lone surrogates raw, which no UTF-8 writer accepts; inside
        # JSON strings a \uXXXX escape reads back identically. (A string is never split
        # between parts: the encoder yields each one whole.)
        if _LONE_SURROGATE.search(text):
            text = _LONE_SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text)
        yield text


def _dump_json(data: Any) -> str:
    """Pretty JSON (indent 2, UTF-8 kept as is) ending with a newline."""
    return "".join(_dump_json_parts(data))


_PART_CHARS = 1 << 20  # characters of a long string encoded or written at a time


def _slices(text: str, size: int = _PART_CHARS) -> Iterator[str]:
    """A long text in slices of `size` characters (so its UTF-8 is never made whole at once)."""
    for start in range(0, len(text), size):
        yield text[start:start + size]


# Bytes of a long JSON string decoded at a time (_string_pieces): small, so that a piece's text
# (4 bytes a character once it holds an emoji) and its copies stay a few hundred KB, which the
# allocator hands back, rather than megabytes it keeps (measured: 1 MiB pieces cost about 30 MB
# of peak RSS more than 64 KiB ones when the cache reads 25 MB in a worker thread).
_PIECE_BYTES = 1 << 16
# A JSON string's escape that must not begin a piece: the low half of a surrogate pair, which
# json joins to the high half before it only when both are decoded together.
_LOW_SURROGATE = re.compile(rb"\\u[dD][c-fC-F]")


def _escape_cut(buf: Any, at: int, lo: int) -> int:
    """A position in (lo, len(buf)] near `at` where the content of a JSON string that began at
    or before `lo` (a boundary itself) can be cut so that each side decodes alone: never inside
    an escape, never between the halves of a surrogate pair. (A UTF-8 character cut in two is
    left to the decoder, which keeps its first bytes for the next piece.)"""
    n = len(buf)
    while at < n:
        s = buf.find(b"\\", at)
        s = n if s < 0 else s
        if s - at > 6:  # no backslash in [at, at + 6]: no escape covers at + 6 (one is 6 bytes)
            return at + 6
        r = s  # a run of backslashes starts at an escape's start (in valid JSON): cut before it
        while r > lo and buf[r - 1] == 0x5C:
            r -= 1
        if r > lo and not _LOW_SURROGATE.match(buf, r):
            return r
        while s < n and buf[s] == 0x5C:  # the run reaches back to lo, or is a low surrogate's:
            s += 1  # look past it
        at = s + 6
    return n


def _string_pieces(buf: Any, pos: int, size: int = _PIECE_BYTES) -> Iterator[Tuple[str, int]]:
    """The JSON string whose opening quote is buf[pos], decoded (UTF-8, lone surrogates kept, as
    json.loads reads bytes) a piece of at most about `size` bytes at a time, by json's own C
    scanner: (piece, the position after it); the last position is past the closing quote. The
    first pieces are small and grow, so a short string costs a short read. ValueError (or
    UnicodeDecodeError) where json.loads would fail on the string."""
    scan = json.decoder.scanstring  # type: ignore[attr-defined]
    pos += 1
    window = min(256, size)
    while True:
        cut = _escape_cut(buf, pos + window, pos) if pos + window < len(buf) else len(buf)
        text, used = codecs.utf_8_decode(buf[pos:cut], "surrogatepass", cut == len(buf))
        piece, end = scan(text + '"', 0, True)  # the quote added ends a string the piece doesn't
        if end <= len(text):  # the string ends in this piece
            yield piece, pos + len(text[:end].encode("utf-8", "surrogatepass"))
            return
        if not used:  # (the end of the input)
            raise ValueError(f"Unterminated string starting at {pos - 1}")
        pos += used
        yield piece, pos
        window = min(window * 8, size)


# a JSON string's bytes that are not control characters (which it never holds raw)
_NOT_CONTROL = bytes(range(0x20, 0x100))
_SIMPLE_ESCAPES = frozenset(b'"\\/bfnrt')  # (\u is not one: _plain_string leaves it to json)


def _plain_string(buf: Any, pos: int) -> Optional[Tuple[int, int, bool]]:
    """The JSON string whose opening quote is buf[pos], when it has few escapes and no \\u one,
    checked at C speed (UTF-8, no raw control character, each escape one json reads): (the
    position after its closing quote, its length in characters, whether it holds no \\/).
    None for any other string, valid or not: _string_pieces reads it, and says what is wrong.
    (json's scanner decodes at about 0.6 GB/s; bytes.find, translate and utf_8_decode are
    several times faster, and Python looks only at each escape.)"""
    start = at = pos + 1
    quote, escapes, slash = buf.find(b'"', at), 0, False
    while quote >= 0:
        back = buf.find(b"\\", at, quote)
        if back < 0:
            break
        kind = buf[back + 1]  # (back < quote: the quote is there at least)
        if kind not in _SIMPLE_ESCAPES or escapes > 64 + (back - start) // 256:
            return None  # \\u, not an escape, or escapes all along: json's scanner reads it
        escapes, slash, at = escapes + 1, slash or kind == 0x2F, back + 2
        if at > quote:  # that quote was escaped: the closing one is further on
            quote = buf.find(b'"', at)
    if quote < 0:
        return None
    utf8, chars = codecs.getincrementaldecoder("utf-8")("surrogatepass"), -escapes
    # pieces as bytes, a line read in pieces (_read_lines) too: bytearray's translate runs at
    # half the speed of bytes', more than the copy costs
    with memoryview(buf) as view:
        try:  # (a piece at a time: a string of emoji decoded whole is 4 bytes a character)
            for at in range(start, quote, _PIECE_BYTES):
                piece = bytes(view[at:min(at + _PIECE_BYTES, quote)])
                if piece.translate(None, _NOT_CONTROL):
                    return None
                chars += len(utf8.decode(piece))
            chars += len(utf8.decode(b"", True))
        except UnicodeDecodeError:
            return None
    return quote + 1, chars, not slash


# Where an escape _dumps never writes may be (\/, and \u but for a control character's, in
# lower-case hex: _CONTROL_ESCAPE): a peer's JSON may hold one where today's encoding writes
# something else. (A literal prefix: re scans for it at C speed, where bytes.find of two bytes
# is slower.) It is one only after an even run of backslashes: the second half of a \\ is not.
_ESCAPE_HINT = re.compile(rb"\\[u/]")
_CONTROL_ESCAPE = re.compile(rb"u00(?:0[0-7bef]|1[0-9a-f])")
# A surrogate as UTF-8 (read with "surrogatepass"): not UTF-8 a client may be sent
_UTF8_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")


class _JsonString:
    """A long string value of a JSON message left undecoded: the message's bytes (not copied)
    and where the string lies in them, with its length in characters (taken when the message
    was read, which also checked that it decodes). Its text comes in pieces, or whole from
    text(); its JSON as it came (the escapes the peer chose) from raw(), and as _dumps writes
    it from parts()."""

    __slots__ = ("buf", "start", "end", "chars", "plain")

    def __init__(self, buf: bytes, start: int, end: int, chars: int, plain: bool = False) -> None:
        self.buf, self.start, self.end, self.chars = buf, start, end, chars
        self.plain = plain  # known to hold no \\u or \\/ escape (_plain_string)

    def __len__(self) -> int:
        return self.chars

    def pieces(self) -> Iterator[str]:
        for piece, _ in _string_pieces(self.buf, self.start):
            yield piece

    def text(self) -> str:
        return "".join(self.pieces())

    def first_char(self) -> str:
        """The first character that is not JSON whitespace ("" if none)."""
        for piece in self.pieces():
            piece = piece.lstrip(" \t\n\r")
            if piece:
                return piece[0]
        return ""

    def raw(self) -> memoryview:
        """The string as JSON: its quotes and escapes as the peer sent them (a view, no copy)."""
        return memoryview(self.buf)[self.start:self.end]

    def verbatim(self) -> bool:
        """Whether raw() is, byte for byte, what _dumps writes for the string: no escape _dumps
        writes otherwise (_ESCAPE_HINT) and no surrogate (which _frame writes escaped). The
        string was checked when read (strict JSON: no raw control character, so no newline);
        the scans run at C speed, and Python looks only at the hints they find."""
        b, s, e = self.buf, self.start, self.end
        hint = None if self.plain else _ESCAPE_HINT.search(b, s, e)
        while hint is not None:
            at = run = hint.start()
            while b[run - 1] == 0x5C:  # (b[s] is the opening quote)
                run -= 1
            if (at - run) % 2 == 0 and not _CONTROL_ESCAPE.match(b, at + 1):
                return False
            hint = _ESCAPE_HINT.search(b, at + 2, e)
        return b.find(b"\xed", s, e) < 0 or not _UTF8_SURROGATE.search(b, s, e)

    def parts(self) -> Iterator[Any]:
        """The string as _dumps writes it: raw() where that is the same (verbatim), else its
        text encoded again a piece at a time (pieces never end inside an escape or a pair)."""
        if self.verbatim():
            yield self.raw()
            return
        yield '"'
        for piece in self.pieces():
            yield json.encoder.encode_basestring(piece)[1:-1]  # type: ignore[attr-defined]
        yield '"'

    def same(self, other: Any) -> bool:
        """Whether `other` is a _JsonString sent as the same bytes (so the same string)."""
        return (isinstance(other, _JsonString) and other.end - other.start == self.end - self.start
                and self.buf.startswith(other.raw(), self.start))


def _spliced_parts(value: Any) -> Iterator[Any]:
    """Compact JSON, as _dumps writes it, of a value that may hold _JsonStrings at any depth:
    the rest encoded at once by json (C speed), each _JsonString standing in it as a mark that
    cannot be forged (a random nonce), then cut out and given as its own parts."""
    found: List[_JsonString] = []
    mark = ""

    def stand_in(obj: Any) -> str:
        nonlocal mark
        if type(obj) is not _JsonString:
            raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")
        mark = mark or "\0" + os.urandom(8).hex() + ":"
        found.append(obj)
        return f"{mark}{len(found) - 1}"

    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=stand_in)
    if not found:
        yield text
        return
    cut = '"\\u0000' + mark[1:]  # the mark as json wrote it
    rest = text.split(cut)
    yield rest[0]
    for part in rest[1:]:  # "<i>" + the closing quote + what follows
        i = part.index('"')
        yield from found[int(part[:i])].parts()
        yield part[i + 1:]


def _json_chars(value: Any) -> int:
    """len(_dumps(value)), of a value that may hold _JsonStrings at any depth (a long text's
    twin, say, left undecoded): those are measured a piece at a time, never decoded whole."""
    n, utf8 = 0, codecs.getincrementaldecoder("utf-8")()
    for part in _spliced_parts(value):
        if type(part) is str:
            n += len(part)
            continue
        for at in range(0, len(part), _PIECE_BYTES):  # (a view: verbatim, so valid UTF-8)
            n += len(utf8.decode(part[at:at + _PIECE_BYTES]))
    return n


def _compact_parts(value: Any, depth: int = 4) -> Iterator[Any]:
    """Compact JSON, as _dumps writes it, in parts: small objects and arrays (up to 100 members)
    of the first `depth` levels member by member, and a long string a slice at a time (escaping
    works character by character), so a tool result holding one huge text ({"result": {"content":
    [{"text": ...}]}} is four levels) is never copied whole. A _JsonString, at any depth, is
    given as its parts(): a view of its bytes as they came when they are what _dumps writes."""
    if type(value) is _JsonString:
        yield from value.parts()
    elif type(value) is str and len(value) > _PART_CHARS:
        yield '"'
        for part in _slices(value):
            yield json.encoder.encode_basestring(part)[1:-1]  # type: ignore[attr-defined]
        yield '"'
    elif (depth and type(value) is dict and 0 < len(value) <= 100
          and all(type(k) is str for k in value)):
        for i, (key, item) in enumerate(value.items()):
            yield ("{" if i == 0 else ",") + _dumps(key) + ":"
            yield from _compact_parts(item, depth - 1)
        yield "}"
    elif depth and type(value) is list and 0 < len(value) <= 100:
        for i, item in enumerate(value):
            yield "[" if i == 0 else ","
            yield from _compact_parts(item, depth - 1)
        yield "]"
    else:
        yield from _spliced_parts(value)


def _dump_txt(data: Any) -> str:
    """Strings as they are (no quotes), anything else as pretty JSON."""
    return data if isinstance(data, str) else _dump_json(data)


def _cell_text(value: Any) -> str:
    """A table cell: strings bare, scalars as JSON writes them, nested values compact JSON."""
    if type(value) is str:
        return value
    if value is None:
        return ""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is float and math.isfinite(value):
        return repr(value)  # what json.dumps writes, without its call overhead
    return _compact_json(value)


def _csv_header(rows: List[Dict[str, Any]]) -> List[str]:
    """Union of the keys of all rows, in first-seen order."""
    seen: Dict[str, None] = {}
    for row in rows:
        # Most rows repeat known keys; this C-level subset test skips them.
        if seen.keys() >= row.keys():
            continue
        for key in row:
            if key not in seen:
                seen[key] = None
    return list(seen)


# csv.writer already writes these exactly as wanted (None as an empty cell).
_CSV_NATIVE = frozenset((str, int, type(None)))


def _csv_float(value: float) -> str:
    # value - value is 0.0 only when finite; inf and nan take JSON's spelling.
    return repr(value) if value - value == 0.0 else _compact_json(value)


def _csv_plan(types: Tuple[type, ...]) -> List[Tuple[int, Any]]:
    """(index, converter) for the cells of a row with these types that csv
    cannot write as they are."""
    plan: List[Tuple[int, Any]] = []
    for i, kind in enumerate(types):
        if kind is float:
            plan.append((i, _csv_float))
        elif kind not in _CSV_NATIVE:
            plan.append((i, _cell_text))
    return plan


def _csv_cells(rows: List[Dict[str, Any]], header: List[str]) -> Iterator[List[Any]]:
    """Rows as lists of cells.  Hot path: rows usually repeat one tuple of
    cell types, so the conversion plan is looked up, not rebuilt per cell."""
    plans: Dict[Tuple[type, ...], List[Tuple[int, Any]]] = {}
    for row in rows:
        cells = list(map(row.get, header))
        types = tuple(map(type, cells))
        plan = plans.get(types)
        if plan is None:
            plan = plans[types] = _csv_plan(types)
        for i, convert in plan:
            cells[i] = convert(cells[i])
        yield cells


def _dump_csv_parts(rows: List[Dict[str, Any]], delimiter: str = ",", batch: int = 2000,
                    header: Optional[List[str]] = None) -> Iterator[str]:
    """RFC 4180 CSV (or TSV with delimiter "\\t") with a header row, in parts of `batch` rows:
    small buffers are cheaper to fill and join than one for the whole table, and the caller
    can encode and write them one by one."""
    header = _csv_header(rows) if header is None else header  # (the caller may know it already)
    if not header:
        return
    cells = _csv_cells(rows, header)
    chunk: List[Any] = [header]
    while chunk:
        buf = io.StringIO()
        csv.writer(buf, delimiter=delimiter, lineterminator="\r\n",
                   quoting=csv.QUOTE_MINIMAL).writerows(chunk)
        yield buf.getvalue()
        chunk = list(itertools.islice(cells, batch))


# -- csv / tsv reader
# Cells are typed conservatively: only spellings that a writer of numbers
# would produce become numbers, so codes like "007" or "02134" stay text.

_CSV_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
# The exponent needs a sign unless there is a fraction: Python, JavaScript and
# spreadsheets write 1e+16, while text such as "1e3" or "2E1" is usually a code.
_CSV_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[eE][-+][0-9]+)")
_CSV_NUM_START = frozenset("-0123456789")
_CSV_BOOLS = {"true": True, "false": False, "True": True, "False": False}


def _csv_value(cell: str) -> Any:
    """Type one CSV cell: plain integers, decimals and true/false; a JSON array or object (as
    the CSV writer writes nested values) becomes that value again; all else stays text."""
    if cell[:1] in ("[", "{") and cell[-1:] in ("]", "}"):
        try:
            value = json.loads(cell, parse_constant=_reject_constant, parse_float=_finite_float)
        except (ValueError, RecursionError):
            return cell
        return value if isinstance(value, (list, dict)) else cell
    if cell[:1] in _CSV_NUM_START:
        if _CSV_INT.fullmatch(cell):
            return int(cell)
        if _CSV_FLOAT.fullmatch(cell):
            number = float(cell)
            return number if math.isfinite(number) else cell
        return cell
    return _CSV_BOOLS.get(cell, cell)


def _csv_check_header(header: List[str], text: str, lineno: int) -> None:
    """Refuse empty and duplicate column names: either would lose values
    silently when rows become dicts."""
    where = _line_offset(text, lineno)
    seen: Dict[str, int] = {}
    for i, name in enumerate(header, 1):
        if not name.strip():
            raise FormatError(f"column {i} of the header has no name", text, where)
        if name in seen:
            raise FormatError(f"column name {name!r} appears twice (columns {seen[name]} and {i})",
                              text, where)
        seen[name] = i


def _load_csv(text: str, delimiter: str = ",") -> List[Dict[str, Any]]:
    """Records from CSV/TSV text whose first row is the header."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    records: List[Dict[str, Any]] = []
    header: Optional[List[str]] = None
    start = 1  # first line of the record being read, for error positions
    try:
        for fields in reader:
            if not fields:  # a blank line
                pass
            elif header is None:
                _csv_check_header(fields, text, start)
                header = fields
            elif len(fields) > len(header):
                raise FormatError(f"row has {len(fields)} fields but the header has {len(header)}",
                                  text, _line_offset(text, start))
            else:
                values = [_csv_value(f) for f in fields]
                values += [""] * (len(header) - len(values))
                records.append(dict(zip(header, values)))
            start = reader.line_num + 1
    except csv.Error as err:
        raise FormatError(f"bad CSV: {err}", text, _line_offset(text, start)) from None
    return records


# -- YAML emitter
# Block style throughout.  A string is written plain only when YAML 1.2 core
# readers and YAML 1.1 readers (PyYAML) both read it back as that same string;
# else as a '|' literal when multi-line and safe, else double-quoted, which
# can hold any string through escapes.  Floats always carry a dot or are
# .inf/.nan, so no reader takes them for strings or ints.

# Words some YAML reader (1.1 or 1.2) takes for a bool, a null, a merge key or
# a "value" key; compared lower-cased so that every spelling gets quoted.
_YAML_WORDS = frozenset(("yes", "no", "on", "off", "y", "n", "true", "false",
                         "null", "~", "<<", "="))
_YAML_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
# Characters never left raw: C0/C1 controls (tab and newline included, they
# are escaped), BOM, non-characters, lone surrogates, and U+0085/2028/2029,
# which YAML 1.1 readers treat as line breaks.
_YAML_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")
_YAML_UNSAFE_BLOCK = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f"
                                "\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")
# Numbers in any YAML schema start with a digit, a sign or a dot before a
# digit; with only number-ish characters after that (1_000, 0x1F, 1:20 is
# sexagesimal in YAML 1.1) the string must be quoted.  So must dates.
_YAML_NUM_START = re.compile(r"[-+]?\.?[0-9]|\._")
_YAML_NUM_CHARS = re.compile(r"[0-9A-Za-z_.:+-]+")
_YAML_DATE = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}")
_YAML_INF_NAN = re.compile(r"[-+]?\.(?:inf|nan)", re.IGNORECASE)
_YAML_ESCAPES_OUT = {"\0": "\\0", "\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                     "\v": "\\v", "\f": "\\f", "\r": "\\r", "\x1b": "\\e", '"': '\\"',
                     "\\": "\\\\", "\x85": "\\N", "\u2028": "\\L", "\u2029": "\\P"}
_YAML_QUOTE_ME = re.compile('["\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]')
# YAML caps implicit keys at 1024 characters; longer ones use '? key'.
_YAML_MAX_KEY = 1000


def _yaml_plain_ok(s: str) -> bool:
    """Whether s can be written unquoted and read back as this same string."""
    if not s or s[0] in _YAML_INDICATORS or s[0] == " " or s[-1] == " ":
        return False
    if s.lower() in _YAML_WORDS or s.startswith("...") or s.endswith(":"):
        return False
    if ": " in s or " #" in s or _YAML_UNSAFE.search(s):
        return False
    if _YAML_NUM_START.match(s) and (_YAML_NUM_CHARS.fullmatch(s) or _YAML_DATE.match(s)):
        return False
    return not _YAML_INF_NAN.fullmatch(s)


def _yaml_escape_char(match: "re.Match[str]") -> str:
    """The double-quoted escape for one character: a named one, else \\xHH or \\uHHHH."""
    char = match.group()
    named = _YAML_ESCAPES_OUT.get(char)
    if named:
        return named
    code = ord(char)
    return "\\x%02X" % code if code < 0x100 else "\\u%04X" % code


def _yaml_quote(s: str) -> str:
    """Double-quoted scalar: always safe, every awkward character escaped."""
    return '"' + _YAML_QUOTE_ME.sub(_yaml_escape_char, s) + '"'


def _yaml_literal_ok(s: str) -> bool:
    """Whether a multi-line string survives as a '|' block (else it is double-quoted)."""
    return (s[0] not in " \n" and " \n" not in s and not s.endswith(" ")
            and not _YAML_UNSAFE_BLOCK.search(s))


def _yaml_str(s: str, indent: int) -> List[str]:
    """A string: [inline text] or ['|' header, content lines at column indent...]."""
    if _yaml_plain_ok(s):
        return [s]
    if "\n" not in s or not _yaml_literal_ok(s):
        return [_yaml_quote(s)]
    body = s.rstrip("\n")
    trailing = len(s) - len(body)
    # Chomping keeps exactly the trailing newlines: none, one, or all.
    head = "|-" if trailing == 0 else "|" if trailing == 1 else "|+"
    pad = " " * indent
    lines = [pad + line if line else "" for line in body.split("\n")]
    return [head] + lines + [""] * max(trailing - 1, 0)


def _yaml_float(x: float) -> str:
    """A float that YAML 1.1 and 1.2 readers both read back as this float."""
    if x != x:
        return ".nan"
    if math.isinf(x):
        return ".inf" if x > 0 else "-.inf"
    text = repr(x)
    if "e" in text and "." not in text:
        # YAML 1.1 readers need a dot: 1e+16 would read back as a string.
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _yaml_scalar(value: Any, indent: int) -> List[str]:
    """A scalar or empty container; more than one line only for '|' blocks."""
    if value is None:
        return ["null"]
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, int):
        return [str(value)]
    if isinstance(value, float):
        return [_yaml_float(value)]
    if isinstance(value, str):
        return _yaml_str(value, indent)
    if isinstance(value, dict):
        return ["{}"]
    if isinstance(value, (list, tuple)):
        return ["[]"]
    raise FormatError(f"cannot write a {type(value).__name__} as YAML")


def _yaml_key_text(key: Any) -> str:
    """A mapping key, plain when safe, else double-quoted."""
    if not isinstance(key, str):
        key = json.dumps(key)  # the key JSON would write
    return key if _yaml_plain_ok(key) else _yaml_quote(key)


def _yaml_entry(pad: str, key: Optional[str], item: Any, indent: int) -> List[str]:
    """Lines for one mapping entry (key given) or list item (key None) at column indent."""
    nested = isinstance(item, (dict, list, tuple)) and len(item) > 0
    if key is None and nested:
        # Compact form '- a: 1' / '- - x': the child's first indentation
        # becomes the dash.
        lines = _yaml_emit(item, indent + 2)
        lines[0] = pad + "- " + lines[0][indent + 2:]
        return lines
    lines = []
    if key is None:
        head = pad + "-"
    elif len(key) > _YAML_MAX_KEY:
        lines.append(pad + "? " + key)
        head = pad + ":"
    else:
        head = pad + key + ":"
    if nested:
        return lines + [head] + _yaml_emit(item, indent + 2)
    first, *rest = _yaml_scalar(item, indent + 2)
    return lines + [head + " " + first] + rest


def _yaml_emit(value: Any, indent: int) -> List[str]:
    """Lines for value as a block node at column indent."""
    pad = " " * indent
    if isinstance(value, dict) and value:
        lines: List[str] = []
        for key, item in value.items():
            lines.extend(_yaml_entry(pad, _yaml_key_text(key), item, indent))
        return lines
    if isinstance(value, (list, tuple)) and value:
        lines = []
        for item in value:
            lines.extend(_yaml_entry(pad, None, item, indent))
        return lines
    first, *rest = _yaml_scalar(value, indent + 2)
    return [pad + first] + rest


def _dump_yaml(data: Any) -> str:
    """Block-style YAML 1.2 for JSON data; yaml.safe_load and _load_yaml read it back equal."""
    return "\n".join(_yaml_emit(data, 0)) + "\n"


# -- YAML reader
# A recursive-descent reader over the whole text.  Block parsers take the
# position of a node's first character and return (position of the start of
# the line after the node, value).  Columns come from the position.

_YAML_SEP = ("", " ", "\t", "\n")  # what may follow '-', '?' or ':' as indicators
_YAML_SPACE = re.compile(r"[ \t]*")
_YAML_INDENT = re.compile(r" *")
_YAML_COMMENT = re.compile(r"[ \t]#")
_YAML_COLON = re.compile(r":(?:[ \t]|$)")
_YAML_FLOW_WS = re.compile(r"(?:[ \t\n]+|(?<=[ \t\n])#[^\n]*)*")
_YAML_FLOW_PLAIN = re.compile(r"(?:[^,\[\]{}\n:#]|:(?![ \t\n,\[\]{}]|$)|(?<![ \t])#)+")
_YAML_DQ_RUN = re.compile(r'[^"\\\n]*')
_YAML_SQ_RUN = re.compile(r"[^'\n]*")
_YAML_BLOCK_HEAD = re.compile(r"([|>])([-+][1-9]?|[1-9][-+]?)?(?:[ \t]+(?:#[^\n]*)?)?(?=\n|\Z)")
_YAML_ESCAPES_IN = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n",
                    "v": "\v", "f": "\f", "r": "\r", "e": "\x1b", " ": " ", '"': '"',
                    "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0", "L": "\u2028",
                    "P": "\u2029"}
_YAML_HEX_LEN = {"x": 2, "u": 4, "U": 8}
_YAML_HEX = re.compile(r"[0-9a-fA-F]*")
_YAML_VERSION = re.compile(r"%YAML[ \t]+1\.[0-9]+[ \t]*(?:#[^\n]*)?(?=\n|\Z)")

# YAML 1.2 core schema: everything else plain is a string (so yes/on too).
_YAML_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_YAML_BOOLS = {"true": True, "True": True, "TRUE": True,
               "false": False, "False": False, "FALSE": False}
_YAML_INT = re.compile(r"[-+]?[0-9]+")
_YAML_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_YAML_INF = re.compile(r"[-+]?\.(?:inf|Inf|INF)")
_YAML_NAN = re.compile(r"\.(?:nan|NaN|NAN)")


def _yaml_resolve(s: str) -> Any:
    """Type a plain scalar per the YAML 1.2 core schema."""
    if s in _YAML_NULLS:
        return None
    if s in _YAML_BOOLS:
        return _YAML_BOOLS[s]
    if _YAML_INT.fullmatch(s):
        return int(s)
    if s[:2] in ("0o", "0x") and len(s) > 2:
        try:
            return int(s[2:], 8 if s[1] == "o" else 16)
        except ValueError:
            return s
    if _YAML_FLOAT.fullmatch(s):
        return float(s)
    if _YAML_INF.fullmatch(s):
        return -math.inf if s[0] == "-" else math.inf
    return math.nan if _YAML_NAN.fullmatch(s) else s


def _yaml_eol(src: str, pos: int) -> int:
    """Position of the line break ending the line at pos (or the end of text)."""
    end = src.find("\n", pos)
    return len(src) if end < 0 else end


def _yaml_col(src: str, pos: int) -> int:
    """Column of pos; block structure is decided by columns."""
    return pos - src.rfind("\n", 0, pos) - 1


def _yaml_is_dash(src: str, pos: int) -> bool:
    """A block list item indicator: '-' followed by white space or the end ("-1" is a scalar)."""
    return src.startswith("-", pos) and src[pos + 1:pos + 2] in _YAML_SEP


def _yaml_marker(src: str, pos: int) -> bool:
    """A '---' or '...' document marker at line start pos."""
    return src.startswith(("---", "..."), pos) and src[pos + 3:pos + 4] in _YAML_SEP


def _yaml_next(src: str, pos: int) -> Tuple[int, int]:
    """From line start pos, skip blank and comment lines: (line start, indent)
    of the next content line; indent is -1 at the end or at a document marker."""
    n = len(src)
    while pos < n:
        eol = _yaml_eol(src, pos)
        ind = _YAML_INDENT.match(src, pos).end()
        if ind == eol or src[ind] == "#":
            pos = eol + 1
            continue
        if src[ind] == "\t":
            rest = src[ind:eol].lstrip(" \t")
            if rest and rest[0] != "#":
                raise FormatError("tab character used for indentation", src, ind)
            pos = eol + 1
            continue
        if ind == pos and _yaml_marker(src, pos):
            return pos, -1
        return pos, ind - pos
    return n, -1


def _yaml_line_end(src: str, pos: int) -> int:
    """After an inline value: allow only spaces and a comment; return the next line start."""
    p = _YAML_SPACE.match(src, pos).end()
    if p < len(src) and src[p] == "#" and p > pos:
        p = _yaml_eol(src, p)
    if p >= len(src):
        return len(src)
    if src[p] != "\n":
        what = ("unexpected ':' (write 'key: value' with a space; complex keys are not "
                "supported)" if src[p] == ":" else "unexpected text after a value")
        raise FormatError(what, src, p)
    return p + 1


def _yaml_check_plain_start(src: str, pos: int) -> None:
    """Refuse what cannot start a plain scalar, naming the unsupported feature."""
    c = src[pos]
    if c in "&*!":
        feature = {"&": "anchors", "*": "aliases", "!": "tags"}[c]
        raise FormatError(f"YAML {feature} ({c!r}) are not supported", src, pos)
    if c in "%@`,]}|>#\"'[{":
        raise FormatError(f"a plain value cannot start with {c!r}; quote it", src, pos)
    if c in "-?:" and src[pos + 1:pos + 2] in _YAML_SEP:
        raise FormatError(f"unexpected {c!r} (a list, key or value is not allowed here)", src, pos)


# -- quoted scalars

def _yaml_fold(src: str, pos: int, out: List[str], joiner: str) -> int:
    """At a line break inside a quoted scalar: skip it, empty lines and the next
    line's indentation; a lone break becomes joiner, each empty line a newline."""
    breaks = 0
    while True:
        pos = _YAML_SPACE.match(src, pos + 1).end()
        if pos < len(src) and src[pos] == "\n":
            breaks += 1
            continue
        out.append("\n" * breaks if breaks else joiner)
        return pos


def _yaml_dq_escape(src: str, pos: int, out: List[str]) -> int:
    """The escape sequence at src[pos] == '\\'; returns the position after it."""
    c = src[pos + 1:pos + 2]
    if c in _YAML_ESCAPES_IN:
        out.append(_YAML_ESCAPES_IN[c])
        return pos + 2
    if c == "\n":  # escaped line break: joins lines with nothing between
        return _yaml_fold(src, pos + 1, out, "")
    size = _YAML_HEX_LEN.get(c, 0)
    digits = _YAML_HEX.match(src, pos + 2, pos + 2 + size).group() if size else ""
    if not size or len(digits) != size or int(digits, 16) > 0x10FFFF:
        raise FormatError("invalid escape sequence in a double-quoted string", src, pos)
    out.append(chr(int(digits, 16)))
    return pos + 2 + size


def _parse_yaml_dq(src: str, pos: int) -> Tuple[int, str]:
    """A double-quoted scalar at pos, with escapes and line folding."""
    out: List[str] = []
    i = pos + 1
    while True:
        j = _YAML_DQ_RUN.match(src, i).end()
        out.append(src[i:j])
        if j >= len(src):
            raise FormatError("unterminated double-quoted string", src, pos)
        if src[j] == '"':
            return j + 1, "".join(out)
        if src[j] == "\n":
            out[-1] = out[-1].rstrip(" \t")  # folding drops trailing spaces
            i = _yaml_fold(src, j, out, " ")
        else:
            i = _yaml_dq_escape(src, j, out)


def _parse_yaml_sq(src: str, pos: int) -> Tuple[int, str]:
    """A single-quoted scalar at pos: '' is a quote, lines fold, no other escapes."""
    out: List[str] = []
    i = pos + 1
    while True:
        j = _YAML_SQ_RUN.match(src, i).end()
        out.append(src[i:j])
        if j >= len(src):
            raise FormatError("unterminated single-quoted string", src, pos)
        if src.startswith("''", j):
            out.append("'")
            i = j + 2
        elif src[j] == "'":
            return j + 1, "".join(out)
        else:
            out[-1] = out[-1].rstrip(" \t")
            i = _yaml_fold(src, j, out, " ")


def _parse_yaml_quoted(src: str, pos: int) -> Tuple[int, str]:
    """A quoted scalar of either kind; quoted scalars are never typed."""
    return _parse_yaml_dq(src, pos) if src[pos] == '"' else _parse_yaml_sq(src, pos)


# -- plain scalars

def _yaml_plain_line(src: str, pos: int) -> Tuple[int, str, bool]:
    """One line of a block plain scalar: (next line start, text, whether more
    lines may follow, i.e. no comment ended it)."""
    eol = _yaml_eol(src, pos)
    line = src[pos:eol]
    comment = _YAML_COMMENT.search(line)
    if comment:
        line = line[:comment.start()]
    colon = _YAML_COLON.search(line)
    if colon:
        raise FormatError("a 'key: value' is not allowed here (quote the value if it "
                          "contains ': ')", src, pos + colon.start())
    return eol + 1, line.rstrip(" \t"), comment is None


def _parse_yaml_plain(src: str, pos: int, parent: int) -> Tuple[int, Any]:
    """A block plain scalar; lines indented deeper than parent continue it."""
    pos, text, more = _yaml_plain_line(src, pos)
    parts = [text]
    n = len(src)
    while more and pos < n:
        breaks, p = 0, pos
        while p < n and not src[p:_yaml_eol(src, p)].strip(" \t"):
            breaks, p = breaks + 1, _yaml_eol(src, p) + 1
        if p >= n:
            break
        ind = _YAML_INDENT.match(src, p).end() - p
        start = _YAML_SPACE.match(src, p).end()
        if ind <= parent or src[start] == "#" or (ind == 0 and _yaml_marker(src, p)):
            break
        pos, text, more = _yaml_plain_line(src, start)
        parts += ["\n" * breaks if breaks else " ", text]
    return pos, _yaml_resolve("".join(parts))


# -- block scalars

def _yaml_block_indent(src: str, pos: int, parent: int) -> int:
    """Auto-detected content indentation of a block scalar: its first text line's."""
    longest_blank, blank_pos = 0, pos
    while pos < len(src):
        eol = _yaml_eol(src, pos)
        line = src[pos:eol]
        if not line.strip(" "):
            if len(line) > longest_blank:
                longest_blank, blank_pos = len(line), pos
            pos = eol + 1
            continue
        ind = len(line) - len(line.lstrip(" "))
        if ind <= parent:
            break
        if longest_blank > ind:
            raise FormatError("a leading blank line of a block scalar has more spaces "
                              "than its first text line", src, blank_pos)
        return ind
    return max(parent + 1, longest_blank)


def _yaml_block_lines(src: str, pos: int, indent: int) -> Tuple[int, List[str], bool]:
    """Content lines of a block scalar (indentation removed, blank lines as "");
    also whether the last one ended with a line break."""
    lines: List[str] = []
    broke = False
    while pos < len(src):
        eol = _yaml_eol(src, pos)
        line = src[pos:eol]
        if not line.strip(" "):
            lines.append(line[indent:])
        elif line[:indent].strip(" ") or (indent == 0 and _yaml_marker(src, pos)):
            break  # less indented: the scalar is over
        else:
            lines.append(line[indent:])
        broke = eol < len(src)
        pos = eol + 1
    return min(pos, len(src)), lines, broke


def _yaml_fold_lines(lines: List[str]) -> str:
    """Line folding of '>' scalars: a single break between two text lines
    becomes a space; breaks around more-indented lines are kept."""
    out: List[str] = []
    prev: Optional[str] = None
    empties = 0
    for line in lines:
        if not line:
            empties += 1
            continue
        if prev is None:
            out.append("\n" * empties)
        elif prev[0] not in " \t" and line[0] not in " \t":
            out.append("\n" * empties if empties else " ")
        else:
            out.append("\n" * (empties + 1))
        out.append(line)
        prev, empties = line, 0
    return "".join(out)


def _parse_yaml_block_scalar(src: str, pos: int, parent: int) -> Tuple[int, str]:
    """A '|' or '>' scalar whose header is at pos; parent is the enclosing column."""
    head = _YAML_BLOCK_HEAD.match(src, pos)
    if not head:
        raise FormatError("invalid block scalar header", src, pos)
    flags = head.group(2) or ""
    chomp = "+" if "+" in flags else "-" if "-" in flags else ""
    digit = "".join(c for c in flags if c.isdigit())
    start = min(head.end() + 1, len(src))
    # An explicit indentation digit counts from the parent's column, as PyYAML does.
    indent = max(parent, 0) + int(digit) if digit else _yaml_block_indent(src, start, parent)
    pos, lines, broke = _yaml_block_lines(src, start, indent)
    end = len(lines)
    while end and not lines[end - 1]:
        end -= 1
    body, trailing = lines[:end], len(lines) - end
    text = _yaml_fold_lines(body) if head.group(1) == ">" else "\n".join(body)
    if chomp == "-" or not (broke or trailing):
        return pos, text
    if chomp == "+":
        return pos, text + "\n" * (trailing + (1 if body else 0))
    return pos, text + "\n" if body else ""


# -- flow collections

def _parse_yaml_flow_node(src: str, pos: int, raw: bool = False) -> Tuple[int, Any]:
    """A node inside [...] or {...}; raw keeps a plain scalar untyped (for keys)."""
    if pos >= len(src):
        raise FormatError("unterminated flow collection", src, pos)
    c = src[pos]
    if c in "[{":
        return _parse_yaml_flow(src, pos)
    if c in "\"'":
        return _parse_yaml_quoted(src, pos)
    _yaml_check_plain_start(src, pos)
    match = _YAML_FLOW_PLAIN.match(src, pos)
    text = match.group().rstrip(" \t") if match else ""
    if not text:
        raise FormatError(f"unexpected {c!r}", src, pos)
    return pos + len(text), text if raw else _yaml_resolve(text)


def _yaml_flow_pair(src: str, pos: int, result: Dict[str, Any]) -> int:
    """One 'key: value' (or bare 'key') of a flow mapping, stored into result."""
    if src.startswith("?", pos) and src[pos + 1:pos + 2] in _YAML_SEP:
        pos = _YAML_FLOW_WS.match(src, pos + 1).end()  # explicit '? key' (PyYAML writes it)
    key_pos = pos
    pos, key = _parse_yaml_flow_node(src, pos, raw=True)
    if not isinstance(key, str):
        raise FormatError("complex keys are not supported", src, key_pos)
    if key in result:
        raise FormatError(f"duplicate key {key!r}", src, key_pos)
    pos = _YAML_FLOW_WS.match(src, pos).end()
    value = None
    if src.startswith(":", pos):
        pos = _YAML_FLOW_WS.match(src, pos + 1).end()
        if not src.startswith((",", "}"), pos):
            pos, value = _parse_yaml_flow_node(src, pos)
    result[key] = value
    return pos


def _parse_yaml_flow(src: str, pos: int) -> Tuple[int, Any]:
    """A flow collection starting at pos ('[' or '{'); it may span lines."""
    is_map = src[pos] == "{"
    close = "}" if is_map else "]"
    result: Any = {} if is_map else []
    pos = _YAML_FLOW_WS.match(src, pos + 1).end()
    while not src.startswith(close, pos):
        if is_map:
            pos = _yaml_flow_pair(src, pos, result)
        else:
            pos, item = _parse_yaml_flow_node(src, pos)
            result.append(item)
        pos = _YAML_FLOW_WS.match(src, pos).end()
        if src.startswith(",", pos):
            pos = _YAML_FLOW_WS.match(src, pos + 1).end()
        elif not src.startswith(close, pos):
            what = ("'key: value' pairs inside [...] are not supported" if src.startswith(":", pos)
                    else f"expected ',' or '{close}'")
            raise FormatError(what, src, pos)
    return pos + 1, result


# -- block structure

def _yaml_explicit_key(src: str, pos: int) -> Tuple[int, str]:
    """'? key' then ': value' below it: read for scalar keys only, as _dump_yaml
    writes keys over 1024 characters this way (and PyYAML writes '' this way)."""
    col = _yaml_col(src, pos)
    p = _YAML_SPACE.match(src, pos + 1).end()
    if p >= len(src) or src[p] in "\n#[{|>":
        raise FormatError("complex keys ('? ') are not supported", src, pos)
    if src[p] in "\"'":
        end, key = _parse_yaml_quoted(src, p)
        p = _yaml_line_end(src, end)
    else:
        _yaml_check_plain_start(src, p)
        p, key, _ = _yaml_plain_line(src, p)
    nxt, ind = _yaml_next(src, p)
    q = nxt + max(ind, 0)
    if ind != col or not src.startswith(":", q) or src[q + 1:q + 2] not in _YAML_SEP:
        raise FormatError("expected ': value' below a '? key' line", src, q)
    return q + 1, key


def _yaml_key_at(src: str, pos: int) -> Optional[Tuple[int, str]]:
    """If a 'key:' starts at pos, (position after its colon, key) else None.
    Keys stay text: JSON keys are strings, so '1: a' gives {"1": "a"}."""
    c = src[pos]
    if c == "?" and src[pos + 1:pos + 2] in _YAML_SEP:
        return _yaml_explicit_key(src, pos)
    if c in "\"'":
        end, key = _parse_yaml_quoted(src, pos)
        p = _YAML_SPACE.match(src, end).end()
        if "\n" not in src[pos:end] and src.startswith(":", p) and src[p + 1:p + 2] in _YAML_SEP:
            return p + 1, key
        return None
    if c in "[{":
        return None  # a flow key is refused by _yaml_line_end after the value
    line = src[pos:_yaml_eol(src, pos)]
    comment = _YAML_COMMENT.search(line)
    colon = _YAML_COLON.search(line[:comment.start()] if comment else line)
    if not colon:
        return None
    _yaml_check_plain_start(src, pos)
    return pos + colon.start() + 1, line[:colon.start()].rstrip(" \t")


def _parse_yaml_inline(src: str, pos: int, parent: int) -> Tuple[int, Any]:
    """A value starting mid-line: scalar, flow collection or block scalar."""
    c = src[pos]
    if c in "[{":
        pos, value = _parse_yaml_flow(src, pos)
        return _yaml_line_end(src, pos), value
    if c in "\"'":
        pos, value = _parse_yaml_quoted(src, pos)
        return _yaml_line_end(src, pos), value
    if c in "|>":
        return _parse_yaml_block_scalar(src, pos, parent)
    _yaml_check_plain_start(src, pos)
    return _parse_yaml_plain(src, pos, parent)


def _parse_yaml_block(src: str, pos: int, parent: int) -> Tuple[int, Any]:
    """The node at pos: a block list, a block mapping or an inline value."""
    if _yaml_is_dash(src, pos):
        return _parse_yaml_seq(src, pos, _yaml_col(src, pos))
    if _yaml_key_at(src, pos) is not None:
        return _parse_yaml_map(src, pos, _yaml_col(src, pos))
    return _parse_yaml_inline(src, pos, parent)


def _parse_yaml_value(src: str, pos: int, col: int, ctx: str) -> Tuple[int, Any]:
    """What follows 'key:' (ctx "key"), '-' ("dash") or '---' ("doc"); col is
    the key's or dash's column (-1 for the document)."""
    pos = _YAML_SPACE.match(src, pos).end()
    if pos >= len(src) or src[pos] in "\n#":
        nxt, ind = _yaml_next(src, _yaml_eol(src, pos) + 1)
        # A list may sit at its parent key's own indentation.
        if ind > col or (ctx == "key" and ind == col and _yaml_is_dash(src, nxt + ind)):
            return _parse_yaml_block(src, nxt + ind, col)
        return nxt, None
    if ctx == "dash" and (_yaml_is_dash(src, pos) or _yaml_key_at(src, pos) is not None):
        return _parse_yaml_block(src, pos, col)  # compact '- - x' or '- k: v'
    return _parse_yaml_inline(src, pos, col)


def _parse_yaml_seq(src: str, pos: int, col: int) -> Tuple[int, List[Any]]:
    """A block list whose dashes are at column col; pos is the first dash."""
    items: List[Any] = []
    while True:
        pos, item = _parse_yaml_value(src, pos + 1, col, "dash")
        items.append(item)
        nxt, ind = _yaml_next(src, pos)
        if ind > col:
            raise FormatError("bad indentation of a list item", src, nxt + ind)
        if ind < col or not _yaml_is_dash(src, nxt + ind):
            return nxt, items  # the parent decides whether what follows is valid
        pos = nxt + ind


def _parse_yaml_map(src: str, pos: int, col: int) -> Tuple[int, Dict[str, Any]]:
    """A block mapping whose keys are at column col; pos is the first key."""
    result: Dict[str, Any] = {}
    while True:
        found = _yaml_key_at(src, pos)
        if found is None:
            raise FormatError("expected 'key: value'", src, pos)
        after, key = found
        if key in result:
            raise FormatError(f"duplicate key {key!r}", src, pos)
        # After an explicit ': ' (at the map's own column) a compact '- x' or
        # 'k: v' may follow, as after '- '.
        explicit = _yaml_col(src, after - 1) == col
        pos, value = _parse_yaml_value(src, after, col, "dash" if explicit else "key")
        result[key] = value
        nxt, ind = _yaml_next(src, pos)
        if ind < col:
            return nxt, result
        if ind > col:
            raise FormatError("bad indentation of a mapping entry", src, nxt + ind)
        pos = nxt + ind


def _yaml_directives(src: str, pos: int, ind: int) -> Tuple[int, int]:
    """Skip %YAML directives, which must be followed by '---'."""
    seen = False
    while ind == 0 and src.startswith("%", pos):
        if not src.startswith("%YAML", pos):
            raise FormatError("YAML directives other than %YAML are not supported", src, pos)
        if not _YAML_VERSION.match(src, pos):
            raise FormatError("expected '%YAML 1.x'", src, pos)
        pos, ind = _yaml_next(src, _yaml_eol(src, pos) + 1)
        seen = True
    if seen and not (ind < 0 and src.startswith("---", pos)):
        raise FormatError("expected '---' after a %YAML directive", src, pos)
    return pos, ind


def _parse_yaml_document(src: str) -> Any:
    """The one document of src: optional directives, '---', a node, optional '...'."""
    pos, ind = _yaml_directives(src, *_yaml_next(src, 0))
    value = None
    if ind < 0 and src.startswith("---", pos):
        pos, value = _parse_yaml_value(src, pos + 3, -1, "doc")
    elif ind >= 0:
        pos, value = _parse_yaml_block(src, pos + ind, -1)
    pos, ind = _yaml_next(src, pos)
    if ind < 0 and src.startswith("...", pos):
        pos, ind = _yaml_next(src, _yaml_line_end(src, pos + 3))
    if pos < len(src):
        what = ("a second YAML document is not supported" if src.startswith("---", pos)
                else "unexpected content (check the indentation)")
        raise FormatError(what, src, pos + max(ind, 0))
    return value


def _load_yaml(text: str) -> Any:
    """Read the YAML people write by hand (and _dump_yaml writes) into JSON data.

    YAML 1.2 core schema; anchors, aliases, tags, several documents, complex
    keys and duplicate keys raise FormatError naming the line, never a guess."""
    src = text.replace("\r\n", "\n").replace("\r", "\n")
    if src.startswith("\ufeff"):
        src = src[1:]
    try:
        return _parse_yaml_document(src)
    except RecursionError:
        raise FormatError("YAML nested too deeply", src, 0) from None


# -- XML
# Own mapping: object keys become child elements, list items <item> children.
# A type attribute marks numbers, booleans, nulls, lists and empty objects;
# untyped elements are strings, or objects when they have children.  That is
# enough to read everything back exactly.  Any other XML gets the generic
# "@attr"/"#text" mapping on reading.

# ASCII names only: expat follows older Unicode name tables than XML 1.0 5th
# edition, and ':' would need a namespace; every other key becomes <entry key=..>.
_XML_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9._-]*")
_XML_BAD_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_XML_TEXT_ESC = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;", ord("\r"): "&#13;"}
# Parsers normalise raw tabs and line breaks in attributes to spaces.
_XML_ATTR_ESC = {**_XML_TEXT_ESC, ord('"'): "&quot;", ord("\n"): "&#10;", ord("\t"): "&#9;"}
_XML_DTD = re.compile(r"<!(?:DOCTYPE|ENTITY)", re.IGNORECASE)
_XML_INT = re.compile(r"-?[0-9]+")


def _xml_clean(text: str, replaced: List[int]) -> str:
    """text with characters XML 1.0 cannot hold replaced by U+FFFD (counted)."""
    text, count = _XML_BAD_CHAR.subn("\ufffd", text)
    replaced[0] += count
    return text


def _xml_child(parent: ET.Element, key: Any, replaced: List[int]) -> ET.Element:
    """The element for one object key: named after it when that name is safe."""
    if not isinstance(key, str):
        key = json.dumps(key)
    if _XML_NAME.fullmatch(key) and not key.lower().startswith("xml"):
        return ET.SubElement(parent, key)
    return ET.SubElement(parent, "entry", key=_xml_clean(key, replaced))


def _xml_fill(el: ET.Element, value: Any, replaced: List[int]) -> None:
    """Store value in el; type attributes make the mapping reversible."""
    if value is None:
        el.set("type", "null")
    elif isinstance(value, bool):
        el.set("type", "boolean")
        el.text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        el.set("type", "number")
        el.text = repr(value)
    elif isinstance(value, str):
        el.text = _xml_clean(value, replaced)
    elif isinstance(value, dict):
        if not value:  # an element with children is an object already
            el.set("type", "object")
        for key, item in value.items():
            _xml_fill(_xml_child(el, key, replaced), item, replaced)
    elif isinstance(value, (list, tuple)):
        el.set("type", "array")  # always: one <item> must not read as an object
        for item in value:
            _xml_fill(ET.SubElement(el, "item"), item, replaced)
    else:
        raise FormatError(f"cannot write a {type(value).__name__} as XML")


def _xml_write(el: ET.Element, depth: int, out: List[str]) -> None:
    """Serialise el indented; leaf text is written untouched, on the tag's line."""
    pad = "  " * depth
    attrs = "".join(f' {k}="{v.translate(_XML_ATTR_ESC)}"' for k, v in el.attrib.items())
    if len(el):
        out.append(f"{pad}<{el.tag}{attrs}>")
        for child in el:
            _xml_write(child, depth + 1, out)
        out.append(f"{pad}</{el.tag}>")
    elif el.text:
        out.append(f"{pad}<{el.tag}{attrs}>{el.text.translate(_XML_TEXT_ESC)}</{el.tag}>")
    else:
        out.append(f"{pad}<{el.tag}{attrs}/>")


def _dump_xml(data: Any) -> Tuple[str, List[str]]:
    """XML under <result generator="abstract">, and notes for the user."""
    replaced = [0]
    root = ET.Element("result", generator="abstract")
    _xml_fill(root, data, replaced)
    out = ['<?xml version="1.0" encoding="UTF-8"?>']
    _xml_write(root, 0, out)
    notes = []
    if replaced[0]:
        notes.append(f"{replaced[0]} character(s) that XML 1.0 cannot hold were "
                     "replaced with U+FFFD")
    return "\n".join(out) + "\n", notes


def _xml_number(text: str, tag: str) -> Any:
    """An int when written as one (JSON keeps 1 and 1.0 apart), else a float."""
    try:
        return int(text) if _XML_INT.fullmatch(text.strip()) else float(text)
    except ValueError:
        raise FormatError(f"<{tag} type=\"number\"> holds {text!r}, not a number") from None


def _xml_object(el: ET.Element) -> Dict[str, Any]:
    """An object from child elements; <entry key="..."> carries keys that are no XML name."""
    result: Dict[str, Any] = {}
    for child in el:
        key = child.get("key") if child.tag == "entry" and "key" in child.attrib else child.tag
        if key in result:
            raise FormatError(f"duplicate key {key!r} in <{el.tag}>")
        result[key] = _xml_decode(child)
    return result


def _xml_decode(el: ET.Element) -> Any:
    """Reverse _xml_fill for one element."""
    kind = el.get("type")
    text = el.text or ""
    if kind is None:
        return _xml_object(el) if len(el) else text
    if kind == "null":
        return None
    if kind == "boolean" and text in ("true", "false"):
        return text == "true"
    if kind == "number":
        return _xml_number(text, el.tag)
    if kind == "array":
        return [_xml_decode(child) for child in el]
    if kind == "object":
        return _xml_object(el)
    raise FormatError(f"<{el.tag}> has type={kind!r} with text {text!r}, which cannot be read")


def _xml_generic(el: ET.Element) -> Any:
    """Any XML: attributes as "@name", text as "#text", repeated tags as lists;
    a text-only element without attributes is its text (None when empty)."""
    if not len(el) and not el.attrib:
        return el.text
    result: Dict[str, Any] = {"@" + k: v for k, v in el.attrib.items()}
    for child in el:
        value = _xml_generic(child)
        if child.tag not in result:
            result[child.tag] = value
        elif isinstance(result[child.tag], list):  # generic values are never lists otherwise
            result[child.tag].append(value)
        else:
            result[child.tag] = [result[child.tag], value]
    # Text between child elements is indentation unless it has content.
    text = "".join([el.text or ""] + [c.tail or "" for c in el]) if len(el) else el.text or ""
    if text.strip():
        result["#text"] = text.strip() if len(el) else text
    return result


def _xml_to_data(text: str) -> Any:
    """Data from XML: an exact reversal of _dump_xml, or the generic mapping."""
    # Refused before parsing: no DTD means no external entities and no
    # entity-expansion bombs, whatever the expat version.
    if not text.strip():
        raise FormatError("the text is empty, not an XML document")
    dtd = _XML_DTD.search(text)
    if dtd:
        raise FormatError("XML with a DOCTYPE or ENTITY declaration is refused", text, dtd.start())
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        line, column = err.position
        msg = re.sub(r": line \d+, column \d+$", "", str(err))
        raise FormatError(f"bad XML: {msg}", text, _line_offset(text, line) + column) from None
    try:
        if root.tag == "result" and root.get("generator") == "abstract":
            return _xml_decode(root)
        return {root.tag: _xml_generic(root)}
    except RecursionError:  # both walk the tree recursively; expat itself parses any depth
        raise FormatError("XML nested too deeply", text, 0) from None


# -- Markdown and HTML
# Both show a list of objects (or a wrapper holding one) as a table; a list of
# scalars is not turned into a one-column table, it reads better as a list.

_MD_BREAK = re.compile(r"\r\n|\r|\n")
_MD_MAX_DEPTH = 3
_MD_MAX_NODES = 200


def _records_view(data: Any) -> Optional[Tuple[List[Dict[str, Any]], List[str], Dict[str, Any]]]:
    """(rows, columns, the wrapper's other fields) for data shown as a table:
    a non-empty list of objects, or a wrapper object holding one."""
    if isinstance(data, dict):
        key, _ = _records_key(data)
        if key is None:
            return None
        rows, extra = data[key], {k: v for k, v in data.items() if k != key}
    elif isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        rows, extra = data, {}
    else:
        return None
    columns = _csv_header(rows)
    return (rows, columns, extra) if columns else None


_MD_PIPE = re.compile(r"(\\*)\|")


def _md_cell(text: str) -> str:
    """Cell text that cannot break the table: pipes escaped, line breaks as <br>.
    A run of backslashes right before a pipe is doubled as well: GFM reads two backslashes
    as one escaped backslash, which would leave the pipe free to end the cell."""
    text = _MD_PIPE.sub(lambda m: m.group(1) * 2 + "\\|", text)
    return _MD_BREAK.sub("<br>", text)


def _md_table(rows: List[Dict[str, Any]], columns: List[str]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(_md_cell(c) for c in columns) + " |",
             "|" + "|".join(" --- " for _ in columns) + "|"]
    for row in rows:
        cells = (_md_cell(_cell_text(row.get(c))) for c in columns)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _md_shallow(data: Any, depth: int = 0, budget: Optional[List[int]] = None) -> bool:
    """Whether data reads well as bullets: few levels, few nodes, one-line strings."""
    budget = budget if budget is not None else [_MD_MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0 or depth > _MD_MAX_DEPTH:
        return False
    if isinstance(data, str):
        return "\n" not in data and "\r" not in data
    items = data.values() if isinstance(data, dict) else data if isinstance(data, list) else ()
    return all(_md_shallow(x, depth + 1, budget) for x in items)


def _md_bullets(value: Any, depth: int) -> List[str]:
    """Nested bullets: "**key**: value" for objects, plain items for lists."""
    pad = "  " * depth
    pairs = value.items() if isinstance(value, dict) else ((None, x) for x in value)
    lines = []
    for key, item in pairs:
        label = f"**{key}**: " if key is not None else ""
        if isinstance(item, (dict, list)) and item:
            lines.append(f"{pad}- {label}".rstrip())
            lines.extend(_md_bullets(item, depth + 1))
        else:
            text = item if isinstance(item, str) and item else json.dumps(item, ensure_ascii=False)
            lines.append(f"{pad}- {label}{text}")
    return lines


def _md_fence(body: str, lang: str = "json") -> str:
    """A fenced block whose fence is longer than any backtick run in body."""
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{body}{fence}\n"


def _dump_md(data: Any, title: str = "") -> str:
    """Markdown: a table for records, bullets for small data, else fenced JSON."""
    if isinstance(data, str):
        return data
    head = f"# {title}\n\n" if title else ""
    view = _records_view(data)
    if view is not None:
        rows, columns, extra = view
        lines = [f"- **{k}**: {_md_cell(_cell_text(v))}" for k, v in extra.items()]
        return head + ("\n".join(lines) + "\n\n" if lines else "") + _md_table(rows, columns)
    if isinstance(data, (dict, list)) and data and _md_shallow(data):
        return head + "\n".join(_md_bullets(data, 0)) + "\n"
    return head + _md_fence(_dump_json(data))


_HTML_CSS = ("body{font-family:system-ui,sans-serif;margin:2em}"
             "table{border-collapse:collapse}"
             "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;"
             "vertical-align:top;white-space:pre-wrap}"
             "th{background:#f4f4f4}pre{white-space:pre-wrap}")


def _html_table(rows: List[Dict[str, Any]], columns: List[str]) -> str:
    """An HTML table with a header row; cells hold escaped text only."""
    esc = html.escape
    out = ["<table>", "<thead><tr>" + "".join(f"<th>{esc(c)}</th>" for c in columns)
           + "</tr></thead>", "<tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{esc(_cell_text(row.get(c)))}</td>"
                                    for c in columns) + "</tr>")
    out.append("</tbody>\n</table>")
    return "\n".join(out) + "\n"


def _html_body(data: Any) -> str:
    """The page content: a table for records, else preformatted text or JSON."""
    if isinstance(data, str):
        return f"<pre>{html.escape(data)}</pre>\n"
    view = _records_view(data)
    if view is None:
        return f"<pre>{html.escape(_dump_json(data))}</pre>\n"
    rows, columns, extra = view
    fields = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(_cell_text(v))}</li>"
                     for k, v in extra.items())
    return (f"<ul>{fields}</ul>\n" if fields else "") + _html_table(rows, columns)


def _dump_html(data: Any, title: str = "") -> str:
    """A standalone HTML5 page; every piece of data goes through html.escape."""
    name = html.escape(title or "Abstract result")
    return ("<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{name}</title>\n<style>{_HTML_CSS}</style>\n</head>\n<body>\n"
            f"<h1>{name}</h1>\n{_html_body(data)}</body>\n</html>\n")


# -- dispatch
# _convert decides the format actually written and what to tell the user;
# _parse_text is its reverse for the formats that can be read.

def _convert(data: Any, fmt: str, title: str = "") -> _Converted:
    """Write data as fmt; csv/tsv fall back to text for a string, else to JSON, for data that is
    not tabular (with a note)."""
    if fmt not in _FORMATS:
        raise FormatError(f"unknown format {fmt!r}; valid formats: {', '.join(_FORMATS)}")
    records, reason = _as_records(data)
    rows = len(records) if records is not None else None
    columns = _csv_header(records) if records is not None else None
    notes: List[str] = []
    try:
        if fmt in ("csv", "tsv") and records is None and isinstance(data, str):
            notes.append(f"stored as text: {reason}; {fmt} needs a list of records")
            return _Converted(lambda: [data], "txt", None, None, notes)
        if fmt in ("csv", "tsv") and records is None:
            notes.append(f"stored as JSON: {reason}; {fmt} needs a list of records")
            return _Converted(lambda: _dump_json_parts(data), "json", None, None, notes)
        if fmt in ("csv", "tsv"):
            delimiter = "\t" if fmt == "tsv" else ","
            render = lambda: _dump_csv_parts(records or [], delimiter, header=columns)  # noqa: E731
            if rows and not columns:
                notes.append(f"the records have no fields, so the {fmt} is empty")
            if isinstance(data, dict):
                key, _ = _records_key(data)
                notes.append(f"{fmt} holds the records under {key!r}; the other fields are left "
                             f"out")
        elif fmt == "xml":
            text, notes = _dump_xml(data)
            render = lambda: [text]  # noqa: E731
        elif fmt in ("md", "html"):
            text = _dump_md(data, title) if fmt == "md" else _dump_html(data, title)
            render = lambda: [text]  # noqa: E731
        elif fmt == "json":
            render = lambda: _dump_json_parts(data)  # noqa: E731  (rendered while writing)
        else:
            text = {"txt": _dump_txt, "yaml": _dump_yaml}[fmt](data)
            render = lambda: [text]  # noqa: E731
    except RecursionError:
        raise FormatError(f"data nested too deeply to write as {fmt}") from None
    return _Converted(render, fmt, rows, columns, notes)


def _reject_constant(name: str) -> Any:
    """parse_constant hook: NaN and Infinity are not JSON, so "txt" keeps them as text."""
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    """parse_float hook: 1e999 would become infinity, which no JSON peer can read."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for JSON")
    return value


def _load_json(text: str) -> Any:
    """json.loads with errors as FormatError (line and column kept); NaN, Infinity and numbers
    too large for a double are refused, since the upstream could not read them."""
    if not text:  # JSONDecodeError would carry no line or column here
        raise FormatError("the text is empty, not a JSON value")
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as err:
        raise FormatError(err.msg, err.doc, err.pos) from None
    except RecursionError:
        raise FormatError("JSON nested too deeply", text, 0) from None
    # Python 3.11+ reads integers of at most 4300 digits (int_max_str_digits)
    except ValueError as err:
        why = (str(err) if "JSON" in str(err) else "a number in it has too many digits (more than "
                                                   "4300)")
        raise FormatError(why, text, 0) from None


def _load_jsonl(text: str) -> List[Any]:
    """The values of JSON Lines text (one JSON value a line; blank lines skipped)."""
    out = []
    pos = 0
    for line in text.split("\n"):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise FormatError(f"JSON Lines: {err.msg}", text, pos + err.pos) from None
            except (RecursionError, ValueError):
                raise FormatError("JSON Lines: a value nested too deeply or a number too long",
                                  text, pos) from None
        pos += len(line) + 1
    return out


def _parse_text(text: str, fmt: str) -> Any:
    """Data from text in one of the readable formats."""
    if fmt == "json":
        return _load_json(text)
    if fmt == "jsonl":
        return _load_jsonl(text)
    if fmt in ("csv", "tsv"):
        return _load_csv(text, "\t" if fmt == "tsv" else ",")
    if fmt == "yaml":
        return _load_yaml(text)
    if fmt == "xml":
        return _xml_to_data(text)
    if fmt == "txt":
        try:  # NaN/Infinity stay text: they are not JSON
            return json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            return text
    raise FormatError(f"cannot read format {fmt!r}; readable formats: {', '.join(_READABLE)}")


# ==== Files =======================================================================
# The one sandbox (allowed folders, checked on the opened file, not just the name) and the one
# atomic writer (a new file appears whole or not at all; nothing existing is overwritten), plus the
# bounded walker and the quota's usage count.


def _caseless(name: str) -> str:
    """`name` as the most forgiving file system could read it: case folded and in decomposed
    form (Unicode's canonical caseless match). A filter, never the decision: file systems fold
    less than this (NTFS does not fold the Kelvin sign, "ß" or "ſ"; a case-sensitive folder
    does not fold at all), so names equal here may still be different folders: _same_dir
    decides."""
    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", name).casefold())


def _same_dir(a: str, b: str) -> bool:
    """Whether the paths `a` and `b` name the same existing folder, as the file system says:
    the same file id (st_dev, st_ino; on Windows the volume serial and the file index). A file
    system that gives no ids (st_ino 0, some network shares) is never taken at its word."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (sa.st_ino != 0 and stat.S_ISDIR(sa.st_mode)
            and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino))


def _below(real: str, root: str, pure: type = PurePath,
           same: Optional[Callable[[str, str], bool]] = None) -> Optional[List[str]]:
    """The names of the components of `real` below `root` (both resolved paths of the flavour
    `pure`), or None when `real` is not `root` or inside it.

    Decided component by component, never on string prefixes or lengths (folding "Straße"
    makes it longer). Equal names are the same folder. Names that differ only in case or
    Unicode normalisation are one folder on one file system (macOS by default: "Out" and "OUT",
    NFC and NFD) and two on another (Linux, a case-sensitive NTFS folder; NTFS keeps "Desktop"
    and "Des\u212atop" apart though casefold makes them equal): the file system is asked
    (`same`, by default _same_dir: the file ids), never a folding table."""
    top, parts = pure(root).parts, pure(real).parts
    n = len(top)
    if len(parts) < n:
        return None
    if parts[:n] != top:
        if any(_caseless(a) != _caseless(b) for a, b in zip(parts[:n], top)):
            return None
        if not (same or _same_dir)(str(pure(*parts[:n])), root):
            return None
    return list(parts[n:])


def _unicode_problem(text: str) -> Optional[str]:
    """Why `text` cannot name a file, or be stored or queried: a lone surrogate (a \\ud800
    escape without its pair) has no UTF-8 form."""
    m = _LONE_SURROGATE.search(text)
    if m:
        return (f"is not valid Unicode (it holds a lone surrogate, \\u{ord(m.group()):04x} at "
                f"character {m.start()})")
    return None


_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"} | {
    f"{p}{i}" for p in ("COM", "LPT") for i in list("123456789") + ["¹", "²", "³"]}
_UNSAFE_NAME_CHARS = re.compile(r'[<>:"|?*\x00-\x1f\x7f]')
_MAX_NAME_BYTES = 200  # below every common file system's 255, leaving room for "-123.csv.gz"


def _safe_filename(name: str) -> str:
    """A plain file name (no extension) made from `name`, or SandboxError if it is a path.

    Separators, `..`, NUL and other control characters are refused (they are attempts to name
    a path); characters Windows cannot hold are replaced, trailing dots and spaces removed,
    reserved device names (CON, NUL, COM1, ...) suffixed, and overlong names shortened.
    """
    if not name or not name.strip():
        raise SandboxError(f"filename {name!r} is empty; give a name such as 'report' (the "
                           f"extension comes from the format)")
    if "/" in name or "\\" in name or name in (".", ".."):
        raise SandboxError(f"filename {name!r} is a path; give a plain name and put the folder in "
                           f"storage_path")
    if re.search(r"[\x00-\x1f\x7f]", name):
        raise SandboxError(f"filename {name!r} contains control characters (such as NUL or a "
                           f"newline)")
    if _unicode_problem(name):
        raise SandboxError(f"filename {name[:100]!r} {_unicode_problem(name)}")
    # Cut to the byte limit first (a character is at least one byte), so a huge name costs
    # one pass, not one re-encoding per character dropped.
    clean = _UNSAFE_NAME_CHARS.sub("_", name[:_MAX_NAME_BYTES + 2]).strip()
    while len(clean.encode("utf-8")) > _MAX_NAME_BYTES:
        clean = clean[:-1]
    clean = clean.rstrip(". ")
    if not clean or set(clean) <= {"."}:
        raise SandboxError(f"filename {name[:100]!r} has no usable characters")
    # Windows ignores trailing spaces before the extension too: "CON .txt" is the console.
    if clean.split(".")[0].rstrip(" ").upper() in _WINDOWS_RESERVED:
        clean = "_" + clean
        while len(clean.encode("utf-8")) > _MAX_NAME_BYTES:
            clean = clean[:-1].rstrip(". ")
    return clean


def _safe_part(text: str) -> str:
    """A file name made from a server or tool name, never an error: separators and control
    characters become "_" (a tool named "a/b" or ".." must not fail a store or make a folder)."""
    text = re.sub(r"[/\\\x00-\x1f\x7f]", "_", text)
    return _safe_filename(text if text.strip(". ") else "_" + text)


# Descriptor-relative calls (openat, mkdirat, linkat): POSIX has them, Windows does not. Where
# they exist, the sandbox decides a directory once and every later step goes through the open
# descriptor; a symlink or rename swapped into the tree afterwards changes nothing.
_DIR_FDS = (not _WINDOWS and hasattr(os, "O_DIRECTORY") and hasattr(os, "O_NOFOLLOW")
            and {os.open, os.mkdir, os.link, os.unlink, os.stat} <= os.supports_dir_fd)
_O_DIR = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
          | getattr(os, "O_CLOEXEC", 0))
# O_NONBLOCK: opening a FIFO swapped in for a file returns at once (fstat then refuses it)
# instead of waiting for a writer forever.
_O_READ = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
           | getattr(os, "O_CLOEXEC", 0)
           | getattr(os, "O_BINARY", 0))


class _Dir(str):
    """A directory the sandbox decided on: its real path and, where _DIR_FDS, the descriptor
    every write into it goes through (`with` closes it)."""

    fd: Optional[int] = None

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> "_Dir":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten `with` must not leak the descriptor
        self.close()


def _walk_failure(e: OSError) -> str:
    """A descriptor walk's OSError as the reason a refusal gives."""
    if e.errno in (errno.ELOOP, getattr(errno, "EMLINK", -1)):  # O_NOFOLLOW met a symlink
        return "a symbolic link is in the way (a loop, or the folder was changed while in use)"
    if e.errno == errno.ENOTDIR:
        return "a part of it is a file, not a directory"
    return e.strerror or str(e)


class _Sandbox:
    """The allowed directories; every path Abstract reads or writes is checked here first.

    Containment is decided on fully resolved real paths (symlinks followed, `..` collapsed),
    component by component (_below: other spellings of a name are asked of the file system),
    never on string prefixes, so a symlink pointing out is refused and /allowed-evil is not
    inside /allowed. On POSIX the decision is
    then used through descriptors (_Dir, open_read): the directory is opened from its root one
    component at a time without following symlinks, and files are created and opened relative
    to it, so nothing changed in the tree after the check can lead out.
    """

    def __init__(self, roots: List[str]) -> None:
        self.roots = [os.path.realpath(r) for r in roots]

    @property
    def default(self) -> str:
        return self.roots[0]

    def describe(self) -> dict:
        return {"allowed_directories": list(self.roots), "default_directory": self.default,
                "total_directories": len(self.roots)}

    def _refuse(self, path: str, why: str, kind: type = SandboxError) -> SandboxError:
        return kind(f"{path!r} {why}. Allowed directories: {', '.join(self.roots)}. Use a path "
                    f"inside "
                    f"one of them (relative paths are taken from {self.default}).")

    def _locate(self, real: str) -> Optional[Tuple[str, List[str]]]:
        """(the allowed root that contains the resolved path `real`, the names below it)."""
        for root in self.roots:
            below = _below(real, root)
            if below is not None:
                return root, below
        return None

    def root_of(self, real: str) -> Optional[str]:
        """The allowed root that contains the resolved path `real`, if any."""
        found = self._locate(real)
        return found[0] if found else None

    def resolve(self, path: str) -> str:
        """The real path of `path` (absolute, or relative to the first root) if it is inside a
        root."""
        if not isinstance(path, str) or not path.strip():
            raise self._refuse(str(path), "is empty")
        if re.search(r"[\x00-\x1f\x7f]", path):
            raise self._refuse(path, "contains control characters (such as NUL)")
        bad = _unicode_problem(path)
        if bad:
            raise self._refuse(path, bad)
        if not _WINDOWS and ("\\" in path or re.match(r"^[A-Za-z]:", path)):
            raise self._refuse(path, "is a Windows path; this machine uses / as the separator")
        full = os.path.join(self.default, os.path.expanduser(path))
        # realpath alone: abspath would collapse "link/.." before the link is followed, which is
        # not what the OS does (it follows the link, then goes up from its target).
        real = os.path.realpath(full)
        if self.root_of(real) is None:
            raise self._refuse(path, "is outside the allowed directories")
        return real

    def _walk(self, real: str, create: bool) -> int:
        """A descriptor of the directory `real` (inside a root), opened from the root one
        component at a time, never through a symlink; missing components are made if `create`."""
        found = self._locate(real)
        if found is None:
            raise self._refuse(real, "is outside the allowed directories")
        root, below = found
        fd = os.open(root, _O_DIR)
        try:
            for part in below:  # by name, as the request spelled it: the file system matches it
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                fd, parent = os.open(part, _O_DIR, dir_fd=fd), fd
                os.close(parent)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def make_dir(self, path: Optional[str]) -> _Dir:
        """Resolve a storage directory inside a root, creating missing subdirectories; where
        _DIR_FDS, the answer holds it open (close it, or use `with`)."""
        real = self.resolve(path) if path else self.default
        if os.path.exists(real) and not os.path.isdir(real):
            raise self._refuse(path or real, "is a file, not a directory")
        if _DIR_FDS:
            try:
                fd = self._walk(real, create=True)
            except OSError as e:
                raise self._refuse(path or real, f"cannot be created "
                                                 f"({_walk_failure(e)})") from None
            out = _Dir(real)
            out.fd = fd
            return out
        # Windows: no descriptor-relative calls; the path is checked again after creating it
        # (see docs/reference/sandbox.md for what this does not cover).
        try:
            os.makedirs(real, exist_ok=True)
        except OSError as e:
            raise self._refuse(path or real, f"cannot be created ({e.strerror or e})") from None
        again = os.path.realpath(real)  # a symlink swapped in while creating must not lead out
        if self.root_of(again) is None:
            raise self._refuse(path or real, "is outside the allowed directories")
        return _Dir(again)

    def open_read(self, path: str) -> Tuple[Any, str, int]:
        """(binary file, real path, size) of the regular file `path` inside a root.

        Where _DIR_FDS the file is opened relative to its directory's descriptor with
        O_NOFOLLOW | O_NONBLOCK, and the opened descriptor is checked: a symlink, FIFO or device
        swapped in after the check is refused, never read or waited on. A file with more than
        one hard link is refused everywhere: its other name may lie outside the allowed
        directories. Raises SandboxError, or FileNotFoundError when it does not exist.
        """
        real = self.resolve(path)
        if real in self.roots:
            raise self._refuse(path, "is an allowed directory, not a file", _NotRegular)
        try:
            if _DIR_FDS:
                dfd = self._walk(os.path.dirname(real), create=False)
                try:
                    fd = os.open(os.path.basename(real), _O_READ, dir_fd=dfd)
                finally:
                    os.close(dfd)
            else:  # Windows: the resolved path, opened once; the checks below use the handle
                fd = os.open(real, _O_READ)
        except (FileNotFoundError, PermissionError):
            raise
        except OSError as e:  # a symlink where the file was (a loop, or swapped in after the check)
            raise self._refuse(path, f"cannot be opened ({_walk_failure(e)})",
                               _NotRegular) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise self._refuse(path, "is not a regular file (it is a folder, FIFO or device)",
                               _NotRegular)
        if st.st_nlink > 1:
            os.close(fd)
            raise self._refuse(path, f"has {st.st_nlink} hard links; Abstract reads only files "
                                     f"with one (another name of it may lie outside the allowed "
                                     f"directories), so copy it instead")
        return os.fdopen(fd, "rb"), real, st.st_size


_UMASK: List[int] = []  # the process's umask, once read (_umask)


def _umask() -> int:
    """The process's umask: os.umask can only be read by setting it, so it is read once, by
    main() before any thread starts; later calls give what was read."""
    if not _UMASK:
        mask = os.umask(0o022)
        os.umask(mask)
        _UMASK.append(mask)
    return _UMASK[0]


def _own_folder(folder: Path, what: str) -> str:
    """`folder` (and its parents) made if missing, and made owner-only (0700): for secrets (the
    saved logins, --serve's token). ConfigError naming `what` if it is someone else's, a symlink,
    or cannot be made. Windows has no modes: the per-user profile folder it lies in (%APPDATA%)
    is private by its ACL, which the folder inherits."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
            raise ConfigError(f"{folder} is not a folder of your own; remove it or move it away")
        if not _WINDOWS:
            os.chmod(folder, 0o700)
    except OSError as e:
        raise ConfigError(f"cannot use {what} {folder}: {e.strerror or e}") from None
    return str(folder)


class _Temps:
    """The atomic writer's temporary files being written, so that a shutdown leaves none behind.
    After stop() a write under way ends at its next piece (or before its fsync) with ECANCELED,
    and none starts; sweep() deletes what a write still running at the exit left (one piece of
    hundreds of megabytes, a slow disk). The names are random: the full path is safe to delete
    even in a folder swapped meanwhile. Each Server has its own (the writes of its requests:
    _temps), so its shutdown stops no other session's writes in the same process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paths: Set[str] = set()
        self.stopping = False

    def check(self) -> None:
        if self.stopping:
            raise OSError(errno.ECANCELED, "Abstract is shutting down")

    def add(self, path: str) -> None:
        with self._lock:
            self.check()
            self._paths.add(path)

    def discard(self, path: str) -> None:
        with self._lock:
            self._paths.discard(path)

    def stop(self) -> None:
        """Writes end at their next piece from now on."""
        self.stopping = True

    def sweep(self) -> None:
        with self._lock:
            paths, self._paths = self._paths, set()
        for path in paths:
            with contextlib.suppress(OSError):
                os.unlink(path)


_TEMPS = _Temps()  # the writes made outside a Server's request (never stopped)
_WRITES = threading.local()  # .temps: the _Temps of the Server whose request this thread runs


def _temps() -> _Temps:
    """Where the write this thread makes is registered (_Server._enveloped sets it)."""
    return getattr(_WRITES, "temps", None) or _TEMPS


def _write_new(directory: str, stem: str, ext: str, data: Any, mode: Optional[int] = None,
               durable: bool = True, replace: bool = False) -> str:
    """Write `data` (bytes, or an iterable of bytes written in turn) as a new file `stem+ext`
    (or `stem-1+ext`, ...) atomically; never overwrite, unless `replace`: then the finished
    file takes the name `stem+ext` over whatever held it (os.replace; a reader sees the old
    file or the new one, never a mix). The file gets `mode`, by default what
    the user's umask gives a new file (mkstemp alone would leave it owner-only).

    The bytes go to a temporary file in the same directory first and are fsynced; only the
    complete file is then linked under its final name. os.link fails when the name exists, so
    two concurrent writers never take the same name and a crash never leaves a partial file
    under a final name. Not `durable` (the output cache's disposable files) skips the fsync:
    a crash of the process still leaves no partial file, a power loss may. Where hard links are
    unsupported (FAT, some network shares) the name is
    reserved with O_EXCL and the finished file renamed over the reservation.

    Where _DIR_FDS every step is relative to the directory's descriptor (the one a _Dir from
    _Sandbox.make_dir holds, else the directory opened here without following a symlink), so a
    folder renamed or replaced by a symlink meanwhile cannot send the file elsewhere.
    """
    held = getattr(directory, "fd", None)
    dfd = held if held is not None or not _DIR_FDS else os.open(directory, _O_DIR)
    try:
        return _write_in(dfd, str(directory), stem, ext, data, mode, durable, replace)
    finally:
        if dfd is not None and dfd != held:
            os.close(dfd)


def _write_in(dfd: Optional[int], directory: str, stem: str, ext: str, data: Any,
              mode: Optional[int], durable: bool = True, replace: bool = False) -> str:
    """_write_new's work: `dfd` is the directory's descriptor, or None (Windows: paths)."""
    import secrets  # lazy: see Imports

    def at(name: str) -> str:  # the name relative to dfd, or the full path without one
        return name if dfd is not None else os.path.join(directory, name)

    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_BINARY", 0))
    temps = _temps()
    for _ in range(100):
        tmp = f".abstract-{secrets.token_hex(8)}.tmp"
        temps.add(os.path.join(directory, tmp))  # (ECANCELED at shutdown)
        try:
            fd = os.open(at(tmp), flags | getattr(os, "O_CLOEXEC", 0), 0o600, dir_fd=dfd)
            break
        except OSError as e:
            temps.discard(os.path.join(directory, tmp))
            if not isinstance(e, FileExistsError):
                raise
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary file name (100 random names taken)",
                              directory)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in [data] if isinstance(data, (bytes, bytearray)) else data:
                temps.check()
                f.write(chunk)
            f.flush()
            temps.check()
            if durable:
                os.fsync(f.fileno())
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), 0o666 & ~_umask() if mode is None else mode)
            else:  # Windows: only the read-only bit exists, and the file is writable anyway
                os.chmod(at(tmp), 0o666 & ~_umask() if mode is None else mode)
            mine = os.fstat(f.fileno())
        if replace:
            # (Windows: a reader of the old file blocks the replace until it closes it)
            _retry_shared(os.replace, at(tmp), at(stem + ext), src_dir_fd=dfd, dst_dir_fd=dfd)
            return os.path.join(directory, stem + ext)
        for n in range(100000):
            final = f"{stem}{ext}" if n == 0 else f"{stem}-{n}{ext}"
            if _claim(dfd, at(tmp), at(final), mine):
                return os.path.join(directory, final)
        # every numbered name taken: a full folder, as a write error (not a refused path)
        raise FileExistsError(errno.EEXIST, f"no free file name for {stem}{ext} (100,000 numbered "
                              f"names are taken)", os.path.join(directory, f"{stem}{ext}"))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(at(tmp), dir_fd=dfd)
        temps.discard(os.path.join(directory, tmp))


_REPARSE_POINT = getattr(stat, "FILE_ATTRIBUTE_REPARSE_POINT", 0x400)


def _is_folder(entry: Any) -> bool:
    """Whether a walked entry (an os.DirEntry) is a folder the walk may enter: a symlink is not,
    and on Windows no reparse point is either. is_dir(follow_symlinks=False) is True for a
    junction (`mklink /J` needs no privilege), a mount point or a cloud placeholder folder, which
    may lead anywhere; their attributes come with the listing (no extra call), elsewhere they
    are absent (0)."""
    if not entry.is_dir(follow_symlinks=False):
        return False
    attributes = getattr(entry.stat(follow_symlinks=False), "st_file_attributes", 0)
    return not attributes & _REPARSE_POINT


def _walk_in(dfd: Optional[int], path: str, level: int, depth: int, hidden_dirs: bool
             ) -> Iterator[Tuple[Optional[int], str, str]]:
    """_bounded_walk's work for one folder: `dfd` is its descriptor, or None (Windows: paths)."""
    with os.scandir(path if dfd is None else dfd) as it:
        entries = sorted(it, key=lambda e: e.name)
    subdirs = []
    for entry in entries:
        try:
            is_dir = _is_folder(entry)  # a symlink or junction to a folder is listed, not walked
        except OSError:  # gone meanwhile
            continue
        if not is_dir:
            yield dfd, entry.name, os.path.join(path, entry.name)
        elif level < depth and (hidden_dirs or not entry.name.startswith(".")):
            subdirs.append(entry.name)
    for name in subdirs:
        sub = os.path.join(path, name)
        if dfd is None:  # Windows: by path (a junction swapped in after the listing is entered)
            with contextlib.suppress(OSError):
                yield from _walk_in(None, sub, level + 1, depth, hidden_dirs)
            continue
        try:  # O_NOFOLLOW | O_DIRECTORY: a folder swapped for a symlink, FIFO or file is skipped
            fd = os.open(name, _O_DIR, dir_fd=dfd)
        except OSError:
            continue
        try:
            yield from _walk_in(fd, sub, level + 1, depth, hidden_dirs)
        except OSError:  # unreadable (permissions) or removed while walked
            pass
        finally:
            os.close(fd)


def _bounded_walk(roots: List[str], depth: int = 3, scan: Optional[int] = 20000,
                  hidden_dirs: bool = True) -> Iterator[Tuple[Optional[int], str, str]]:
    """(folder descriptor, name, path) of each entry that is not a folder under `roots` (files,
    symlinks, FIFOs: the caller decides), at most `depth` levels down, in name order; the walk
    stops for good after `scan` of them, so a huge tree cannot stall whoever asked.

    The one walker. Where _DIR_FDS, each folder is opened relative to its parent's descriptor
    without following a symlink, so a folder swapped for a symlink while walking leads nowhere;
    act on an entry through (descriptor, name), valid until the next one. Where not (Windows)
    the descriptor is None and the path is all there is.
    """
    seen = 0
    for root in roots:
        try:
            top = os.open(root, _O_DIR) if _DIR_FDS else None
        except OSError:  # missing, or not a folder
            continue
        try:
            for item in _walk_in(top, root, 0, depth, hidden_dirs):
                seen += 1
                if scan is not None and seen > scan:
                    return
                yield item
        except OSError:
            continue
        finally:
            if top is not None:
                os.close(top)


def _at(dfd: Optional[int], name: str, path: str) -> str:
    """What names a walked entry: its name relative to `dfd`, or its path without one."""
    return name if dfd is not None else path


_USAGE_SCAN = 200000  # files a quota measurement looks at, at most


_USAGE_DEPTH = 100  # folders deeper than this below an allowed directory are not measured


def _dir_usage(root: str, cap: int = _USAGE_SCAN) -> Tuple[int, bool]:
    """Bytes of the regular files under `root` (symlinks not followed), and whether the walk saw
    them all: it stops after `cap` files, so a huge tree cannot stall a store."""
    total, seen = 0, 0
    for dfd, name, path in _bounded_walk([root], _USAGE_DEPTH, scan=cap + 1):
        seen += 1
        if seen > cap:
            return total, False
        try:
            st = os.stat(_at(dfd, name, path), dir_fd=dfd, follow_symlinks=False)
        except OSError:  # gone meanwhile
            continue
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
    return total, True


def _open_regular(name: str, dfd: Optional[int] = None) -> Tuple[Any, os.stat_result]:
    """(binary file, fstat) of `name` (relative to `dfd` when given), a regular file with one
    link: opened without following a symlink in its last part or waiting on a FIFO, and checked
    through the descriptor, so nothing swapped in after a walk or check is read. OSError else."""
    fd = os.open(name, _O_READ, dir_fd=dfd)
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
        return os.fdopen(fd, "rb"), st
    os.close(fd)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name)
    if stat.S_ISREG(st.st_mode):
        raise OSError(errno.EMLINK, f"has {st.st_nlink} hard links (Abstract reads only files with "
                                    f"one)", name)
    raise OSError(errno.EINVAL, "not a regular file (a FIFO or device)", name)


def _sweep_temps(roots: List[str], min_age: float = 3600.0, scan: int = 20000) -> int:
    """Delete the writer's own temporary files (.abstract-*.tmp) that a killed process left in
    the allowed directories, once an hour old. Nothing else is touched (a symlink of that name
    neither: only the link would go); the walk is bounded, and each file is checked and deleted
    through its folder's descriptor, never through a folder swapped in meanwhile."""
    removed, now = 0, time.time()
    for dfd, fn, path in _bounded_walk(roots, scan=scan):
        if not (fn.startswith(".abstract-") and fn.endswith(".tmp")):
            continue
        try:
            st = os.stat(_at(dfd, fn, path), dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > min_age:
                os.unlink(_at(dfd, fn, path), dir_fd=dfd)
                removed += 1
        except OSError:
            pass
    return removed


def _claim(dfd: Optional[int], tmp: str, final: str, mine: os.stat_result) -> bool:
    """Give the finished temporary file the name `final` unless that name exists (names are
    relative to `dfd` when it is given). The temporary name could have been replaced meanwhile
    by someone else's file or symlink: the link is not followed, and what got published is
    checked to be `mine` (the file written), else removed again.

    POSIX: a hard link claims the name and publishes in one call (rename would replace).
    Windows: rename, which never replaces there, so no second name is left that a program
    holding the temporary file (an antivirus) could keep alive. No hard links (FAT, exFAT,
    some shares): the name is reserved with O_EXCL and the file renamed over it."""
    if not _WINDOWS:
        try:  # (follow_symlinks=False is linkat without AT_SYMLINK_FOLLOW)
            os.link(tmp, final, src_dir_fd=dfd, dst_dir_fd=dfd,
                    **({} if dfd is None else {"follow_symlinks": False}))
        except FileExistsError:
            return False
        except (OSError, NotImplementedError):  # no hard links here
            return _claim_by_rename(dfd, tmp, final, mine)
        st = os.stat(final, dir_fd=dfd, follow_symlinks=False)
        if (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino):
            os.unlink(final, dir_fd=dfd)
            raise OSError(f"the temporary file for {os.path.basename(final)} was replaced while "
                          f"it was written")
        return True
    return _claim_by_rename(dfd, tmp, final, mine)


def _claim_by_rename(dfd: Optional[int], tmp: str, final: str, mine: os.stat_result) -> bool:
    """_claim by renaming: the temporary file is checked to be `mine` before it moves, and the
    published one after by kind and size only, since FAT and exFAT number a file by where its
    entry lies, so a rename may change its id (checking the id unlinked a good file)."""
    st = os.stat(tmp, dir_fd=dfd, follow_symlinks=False)
    if (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino):
        raise OSError(f"the temporary file for {os.path.basename(final)} was replaced while it "
                      f"was written")
    try:
        if _WINDOWS:  # a program holding the file (an antivirus scan) lets go soon: wait for it
            _retry_shared(os.rename, tmp, final)
        else:  # reserve the name (fails if it exists), then rename over the reservation
            flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0)
            os.close(os.open(final, flags, 0o644, dir_fd=dfd))
            os.replace(tmp, final, src_dir_fd=dfd, dst_dir_fd=dfd)
    except FileExistsError:
        return False
    except PermissionError as e:
        if getattr(e, "winerror", None) not in _SHARING_ERRORS:
            raise
        raise OSError(e.errno, f"another program (an antivirus?) held the new file for over "
                               f"{_SHARING_WAIT_S:g} s, so it could not be named "
                               f"{os.path.basename(final)}; nothing was stored, try again",
                      final) from None
    st = os.stat(final, dir_fd=dfd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode) or st.st_size != mine.st_size:
        os.unlink(final, dir_fd=dfd)
        raise OSError(f"the temporary file for {os.path.basename(final)} was replaced while it "
                      f"was written")
    return True


# ==== Wire ========================================================================
# Newline-delimited JSON-RPC 2.0 over binary streams. One Connection class serves both
# directions: Abstract's server side (client stdin/stdout) and each upstream session.


def _frame_parts(msg: dict) -> List[Any]:
    """_frame's parts, the newline not yet added."""
    try:
        return [p if type(p) is memoryview else p.encode("utf-8")
                for p in _compact_parts(msg, 0)]
    except UnicodeEncodeError:
        return [json.dumps(msg, ensure_ascii=True, separators=(",", ":"),
                           default=_JsonString.text).encode("ascii")]


def _null_nonfinite(msg: dict) -> bool:
    """Make null, in place, every float of `msg` that is not finite (as _no_nan reads NaN):
    json writes one as the bare word Infinity or NaN, which is no JSON. Whether there was one.
    (Iterative: a peer's message may nest deep.)"""
    stack: list = [msg]
    found = False
    while stack:
        node = stack.pop()
        for key, value in (node.items() if isinstance(node, dict) else enumerate(node)):
            if type(value) is float and not math.isfinite(value):
                node[key], found = None, True
            elif isinstance(value, (dict, list)):
                stack.append(value)
    return found


def _frame(msg: dict) -> List[Any]:
    """One message as a line of UTF-8, in parts for writelines: the long strings of a relayed
    answer that a peer sent as _dumps writes them (_JsonString.verbatim) are views of the
    peer's line, never decoded or copied; the rest is encoded by json at C speed. A lone
    surrogate (from a \\ud800 escape a peer sent) cannot be encoded as UTF-8; such a message
    goes out with every non-ASCII character escaped. A float that is not finite (a peer's
    1e999, read as infinity) goes out as null."""
    parts = _frame_parts(msg)
    if (any(b"Infinity" in p or b"NaN" in p for p in parts if type(p) is bytes)
            and _null_nonfinite(msg)):  # (or a string holds the word: nothing to change)
        parts = _frame_parts(msg)
    # json escapes newlines, and a view is of a string read as strict JSON from one line
    assert not any(b"\n" in p for p in parts if type(p) is bytes)
    if len(parts) == 1 and len(parts[0]) <= _PART_CHARS:
        return [parts[0] + b"\n"]  # (a small copy: one write)
    parts.append(b"\n")
    return parts


# bytes of a long line read at first: a line up to this comes as bytes, in one readline (whose
# pieces and their join are held at once: 8 MiB at most); a longer one grows a bytearray, by
# _LINE_MORE at a time (so that, at its largest, it is held with 2 MiB more, not 8)
_LINE_PIECE = 4 << 20
_LINE_MORE = 1 << 20


def _read_lines(rfile: Any, limit: int) -> Iterator[Tuple[bytes, bool]]:
    """(line, True) for each line of `rfile` up to `limit` bytes (newline not counted), and
    (its first 200 bytes, False) for a longer one as soon as it is known to be longer; reading
    on skips the rest of it in 64 KiB pieces. However long a line is, no more than `limit`
    bytes of it are ever held. A line longer than _LINE_PIECE is read a piece at a time into
    a bytearray that grows in place (a bytearray, then): readline(n) would hold its pieces
    and their join at once, twice the line."""
    piece = min(limit + 1, _LINE_PIECE)
    while True:
        line: Any = rfile.readline(piece)
        if not line:
            return
        if len(line) == piece and not line.endswith(b"\n"):
            line = bytearray(line)
            while len(line) <= limit and not line.endswith(b"\n"):
                more = rfile.readline(min(_LINE_MORE, limit + 1 - len(line)))
                if not more:
                    break
                line += more
        if len(line) <= limit or line.endswith(b"\n"):
            held, line = [line], b""  # handed over, not kept: the reader frees it once decoded
            yield held.pop(), True
            continue
        head, line = bytes(line[:200]), b""
        yield head, False
        while True:
            rest = rfile.readline(1 << 16)
            if not rest or rest.endswith(b"\n"):
                break


# The id of a request too long to read: taken only from where clients put it, first (or right
# after "jsonrpc"), so an "id" inside the params is never mistaken for it.
_HEAD_ID = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?'
                      rb'"id"\s*:\s*(-?[0-9]{1,18}|"[^"\\]{0,100}")\s*,')


def _no_nan(name: str) -> None:
    """parse_constant hook: NaN and Infinity are not JSON; they are read as null, so they are
    never passed on (a strict peer such as JSON.parse would reject the whole message)."""
    return None


def _error_response(mid: Any, err: RpcError) -> dict:
    """The response carrying `err`, cleaned (_clean): every error Abstract answers with."""
    d = err.to_dict()
    d["message"] = _clean(str(d["message"]))
    if "data" in d:
        d["data"] = _SECRETS.mask_json(d["data"])
    return {"jsonrpc": "2.0", "id": mid, "error": d}


# bytes: a longer string value in an answer to a request that takes them undecoded (request's
# `longs`) is left so: a tool result relayed whole writes it out as it came (_frame), and the
# cache reads it in pieces. Below this, decoding and encoding again cost less than the splice.
_LONG_STRING = 1 << 14
_LONG_LINE_STRINGS = 10000  # more strings than this in a long message: it is parsed whole
# a JSON string without escapes, in bytes (one class repeated: no backtracking state kept)
_PLAIN_STRING_BYTES = re.compile(rb'"[^"\\]*"')


def _may_hold_long(line: bytes, least: int) -> bool:
    """Whether a string of `line` may be over `least` bytes: such a string holds a whole window
    of least // 2 bytes (aligned) whose every quote is escaped, which counts at C speed show. A
    line of many short strings has none, and goes to json.loads without a string looked at."""
    size = max(least // 2, 1)
    for at in range(0, len(line), size):
        quotes = line.count(b'"', at, at + size)
        if quotes == 0 or quotes == line.count(b'\\"', max(at - 1, 0), at + size):
            return True
    return False


def _loads_long(line: bytes, least: int = _LONG_STRING) -> Optional[Tuple[Any, list]]:
    """A long message parsed with each string value over `least` bytes left undecoded: (the
    message, [(container, key, _JsonString, top-level key), ...]), so that neither the whole
    message as text nor the string as one str (4 bytes a character once it holds an emoji)
    ever exists. Each long string is checked and measured on the way (_plain_string, or decoded a
    piece at a time and dropped); the rest of the message, the long strings cut out, is parsed by
    json.loads. None when the message is not one to split (not UTF-8, a long key, over
    _LONG_LINE_STRINGS strings, no long string, not valid JSON): json.loads then reads it
    whole, and says what is wrong."""
    if (not line.startswith(b"{") or json.detect_encoding(line) != "utf-8"
            or not _may_hold_long(line, least)):
        return None
    longs: List[_JsonString] = []
    pos = 0
    try:
        for _ in range(_LONG_LINE_STRINGS):
            start = line.find(b'"', pos)  # (outside strings, a quote only ever opens one)
            if start < 0:
                break
            plain = _PLAIN_STRING_BYTES.match(line, start)
            if plain is not None and plain.end() - start <= least:
                pos = plain.end()  # a short string without escapes: json.loads checks it
                continue
            quick = _plain_string(line, start)
            if quick is not None:
                pos, chars, plain = quick
            else:
                chars, plain = 0, False
                for piece, pos in _string_pieces(line, start):
                    chars += len(piece)
            if pos - start > least:
                if line[pos:pos + 64].lstrip(b" \t\n\r").startswith(b":"):
                    return None  # a key
                longs.append(_JsonString(line, start, pos, chars, plain))
        else:
            return None
    except ValueError:
        return None
    if not longs:
        return None
    nonce = os.urandom(8).hex()  # what stands for a long string in the rest: "\0<nonce>:<i>"
    mark = "\0" + nonce + ":"
    parts, last = [], 0
    for i, big in enumerate(longs):
        parts += [line[last:big.start], b'"\\u0000%s:%d"' % (nonce.encode(), i)]
        last = big.end
    parts.append(line[last:])
    try:
        msg = json.loads(b"".join(parts), parse_constant=_no_nan)
    except (ValueError, RecursionError):
        return None
    if not isinstance(msg, dict):
        return None
    places: list = []
    stack: list = [(msg, None)]
    while stack:  # (the rest is small: at most _LONG_LINE_STRINGS strings)
        node, top = stack.pop()
        for key, value in (node.items() if isinstance(node, dict) else enumerate(node)):
            if isinstance(value, (dict, list)):
                stack.append((value, key if top is None else top))
            elif isinstance(value, str) and value.startswith(mark):
                places.append((node, key, longs[int(value[len(mark):])], top))
    if len(places) != len(longs):
        return None
    for node, key, big, _ in places:
        node[key] = big
    return msg, places


def _decode_long(places: Iterable[tuple]) -> None:
    """Put each long string _loads_long left undecoded in its place, decoded whole."""
    for node, key, big, *_ in places:
        node[key] = big.text()


class _Request:
    """An incoming request being handled: its id, cancellation state and cancel hooks."""

    __slots__ = ("id", "method", "params", "cancelled", "_hooks", "_lock", "_answer")

    def __init__(self, mid: Any, method: str, params: Any) -> None:
        self.id, self.method, self.params = mid, method, params
        self.cancelled = threading.Event()
        self._hooks: List[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._answer = threading.Lock()  # held by whoever answers it (claim)

    def claim(self) -> bool:
        """True once: the caller is the one to answer it (its handler, or the shutdown that
        gave up waiting for it: Connection.abandon)."""
        return self._answer.acquire(blocking=False)

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


_Handler = Callable[[_Request], Any]


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
        requests: Optional[Dict[str, _Handler]] = None,
        notifications: Optional[Dict[str, Callable[[Any], None]]] = None,
        pool: Optional[_Pool] = None,
        strict: bool = True,
        on_close: Optional[Callable[[], Optional[str]]] = None,
        queued: bool = False,
        max_line: int = _MAX_MESSAGE_MB << 20,
        half_close: bool = False,
        close_input: bool = False,
        max_requests: int = 0,
    ) -> None:
        self.name = name
        self._rfile, self._wfile = rfile, wfile
        self._close_input = close_input  # the reader closes rfile once read (a pipe it owns)
        self.requests = requests if requests is not None else {}
        self.notifications = notifications if notifications is not None else {}
        self._pool = pool
        self._strict = strict  # answer garbage with JSON-RPC errors (server side) or just log it
        self._on_close = on_close
        # bytes in one incoming message; a longer one is not read (_too_long)
        self.max_line = max_line
        self._wlock = threading.Lock()
        self._ids = itertools.count(1)
        self._plock = threading.Lock()
        self._pending: Dict[Any, Future] = {}
        # our requests whose answer may keep its long strings undecoded: id -> where to list them
        self._long: Dict[Any, list] = {}
        # keyed by arrival, not by the peer's id: a peer that reuses an id while the first request
        # still runs must not make either one uncancellable, or the connection idle too soon
        self._inflight: Dict[int, _Request] = {}
        self._arrivals = itertools.count()
        # incoming requests held at once (running or waiting for a worker); past it each is
        # refused at once (_refuse), so a peer's flood queues nothing. 0: no bound.
        self._max_requests = max_requests
        self._refused = 0  # refused since the last one accepted (for the log)
        self.closed = threading.Event()
        self.close_reason = "connection closed"
        self._shutting = False
        # queued: a writer thread does the writing, so no caller ever blocks on a peer that stops
        # reading (an upstream's full stdin pipe, a slow client), but a worker on its own answer
        # when nothing is queued (send's `direct`); stalled() tells how long a write has hung.
        # half_close: the end of the input does not end the output, so answers to requests
        # still running go out until finish() (the client side).
        self._outq: Optional[queue.Queue] = queue.Queue() if queued else None
        self._half_close = half_close
        self._out_done = False  # the writer was told to stop: nothing more is queued
        self._queued = 0  # bytes waiting in _outq
        self._writer: Optional[threading.Thread] = None
        self._write_started = 0.0
        self._idle = threading.Event()  # no incoming request is being handled
        self._idle.set()

    # -- lifecycle
    def start(self) -> "Connection":
        threading.Thread(target=self._read_loop, name=f"rpc-read-{self.name}", daemon=True).start()
        if self._outq is not None:
            self._writer = threading.Thread(target=self._write_loop, name=f"rpc-write-{self.name}",
                                            daemon=True)
            self._writer.start()
        return self

    @property
    def closing(self) -> bool:
        """The session is ending or over (`closed` follows once the reason is known)."""
        return self._shutting

    def wait_idle(self, timeout: float) -> bool:
        """Wait (bounded) until no incoming request is being handled and every answer has been
        handed to the writer; True if so."""
        return self._idle.wait(timeout)

    def finish(self, timeout: float) -> bool:
        """Stop the writer once everything queued is written; wait at most `timeout` for that.
        True if it all went out."""
        if self._outq is None:
            return True
        with self._plock:
            if not self._out_done:
                self._out_done = True
                self._outq.put(None)
        deadline = time.monotonic() + timeout
        if self._writer is not None and self._writer is not threading.current_thread():
            self._writer.join(max(0.0, timeout))
            if self._writer.is_alive():
                return False
        # (the writer itself, whose write failed, returns once this does)
        if not self._wlock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return False  # a worker's direct write (send) is still going out
        self._wlock.release()
        return True

    def lost(self) -> None:
        """The peer is gone though its stream did not close (a grandchild may hold it open):
        end the session as EOF would."""
        self._shut(self.close_reason, eof=True)

    def stalled(self, seconds: float) -> bool:
        """Whether a write has been stuck for more than `seconds` (the peer stopped reading)."""
        started = self._write_started
        return bool(started) and time.monotonic() - started > seconds

    def _read_loop(self) -> None:
        try:
            for line, whole in _read_lines(self._rfile, self.max_line):
                if not whole:
                    if self._too_long(line):
                        return
                elif not line.isspace():  # (strip() would copy a message of many megabytes)
                    box, line = [line], b""
                    self._on_line_safely(box)
                line = b""  # drop the bytes now, not when the next line arrives
        except (OSError, ValueError) as e:  # a closed or broken pipe ends the session like EOF
            _log.debug("%s: read failed: %s", self.name, e)
        finally:
            self._shut(self.close_reason, eof=True)
            if self._pool is not None:  # the reader was its only source of jobs
                self._pool.close()
            if self._close_input:
                with contextlib.suppress(OSError, ValueError):
                    self._rfile.close()

    def _too_long(self, head: bytes) -> bool:
        """A message over max_line bytes (skipped unread). From the client, its request (if its id
        is at the start) fails at once; from an upstream, the session ends, failing its pending
        calls at once, and is started afresh on next use. True: stop reading."""
        limit = f"{self.max_line:,} bytes"
        if self._strict:
            m = _HEAD_ID.match(head)
            mid = json.loads(m.group(1)) if m else None
            _log.warning("%s: a message over %s was dropped: %s", self.name, limit, head[:100])
            self.send(_error_response(mid, RpcError(_INVALID_REQUEST,
                                                    f"Request too large: more than {limit} in one "
                                                    f"message (max_client_message_mb in Abstract's "
                                                    f"settings)")))
            return False
        reason = (f"{self.name} sent a message of more than {limit} (max_upstream_message_mb in "
                  f"Abstract's settings); its session was ended and starts afresh on the next call")
        _log.warning("%s", reason)
        self._shut(reason)
        return True

    def _shut(self, reason: str, eof: bool = False) -> None:
        """End the session once: `closing` at once, then pending requests fail and `closed` is set.

        A second caller returns at once, possibly before `closed` is set: whoever decides whether
        a session can still be used must ask `closing`, never `closed`.
        """
        with self._plock:
            if self._shutting:
                return
            self._shutting = True
        # on_close runs first at EOF: its answer (an upstream's exit status and stderr tail) is
        # the reason pending requests fail with, instead of a bare "connection closed". A session
        # ended on purpose (fail_pending) already has its reason.
        said = self._on_close() if eof and self._on_close is not None else None
        if isinstance(said, str) and said:
            reason = said
        self.close_reason = reason
        with self._plock:
            self.closed.set()
            pending, self._pending = self._pending, {}
            self._long.clear()
        for fut in pending.values():
            _settle(fut, exc=UpstreamError(reason))
        if not self._half_close:
            self.finish(0)  # ends the writer (once a stuck write fails, when the peer dies)

    def abandon(self, reason: str) -> int:
        """Shutdown: answer every request still being handled with an error now (`reason`);
        its handler's answer, if it comes, is dropped. How many there were."""
        with self._plock:
            reqs = list(self._inflight.values())
        error = RpcError(_CONNECTION_CLOSED, reason)
        mine = [req for req in reqs if not req.cancelled.is_set() and req.claim()]
        for req in mine:
            self.send(_error_response(req.id, error))
        return len(mine)

    def fail_pending(self, reason: str) -> None:
        """Close the session from outside (process gone): pending requests fail with `reason`."""
        self._shut(reason)

    # -- writing
    def send(self, msg: dict, droppable: bool = False, direct: bool = False) -> bool:
        """Write one message whole (or queue it for the writer); False if the stream is gone, or
        if the message is `droppable` (a notification) and the peer is not keeping up.

        `direct` (a worker's answer): written by the caller when nothing is queued or being
        written, so it goes out in order without a hand-off to the writer thread; a caller
        that must never block on the peer (a reader thread) queues instead."""
        parts = _frame(msg)
        if self._outq is None:
            return self._write(parts)
        size = sum(len(p) for p in parts)
        with self._plock:
            if self._out_done or (droppable and self._queued > _OUTQ_NOTICES_MAX):
                return False
            self._queued += size  # (while it is written directly too: later messages queue)
            direct = direct and self._queued == size
            if not direct:
                self._outq.put(parts)
        if direct:
            self._written(self._write(parts), size)
        return True

    def _write(self, parts: List[Any]) -> bool:
        with self._wlock:
            self._write_started = time.monotonic()
            try:
                if len(parts) == 1:
                    self._wfile.write(parts[0])
                else:  # (a relayed answer's long strings: views of the upstream's line)
                    self._wfile.writelines(parts)
                self._wfile.flush()
                return True
            except (OSError, ValueError):
                return False
            finally:
                self._write_started = 0.0

    def _written(self, written: bool, size: int) -> bool:
        """Account for a message written (or not: the peer closed its input, so the session
        is over and the writer stops); True if it was."""
        with self._plock:
            self._queued -= size
            if not written and not self._out_done:
                self._out_done = True  # nothing more can go out
                self._outq.put(None)  # type: ignore[union-attr]
        if not written:
            self.lost()
        return written

    def _write_loop(self) -> None:
        while True:
            parts = self._outq.get()  # type: ignore[union-attr]
            if parts is None:
                return
            if not self._written(self._write(parts), sum(len(p) for p in parts)):
                return

    def notify(self, method: str, params: Optional[dict] = None) -> bool:
        """Send a notification; with a queued writer, dropped (False) when the peer has fallen
        more than _OUTQ_NOTICES_MAX bytes behind, so a peer that stops reading bounds the queue."""
        msg: dict = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        return self.send(msg, droppable=True)

    # -- outgoing requests
    def request(self, method: str, params: Optional[dict] = None,
                longs: Optional[list] = None) -> Tuple[int, Future]:
        """Send a request; return its id and a Future of its result (or RpcError).

        `longs`: a list that is given, before the result arrives, each string value of the
        result over _LONG_STRING bytes left undecoded (as _loads_long lists them) when the
        answer is such a long message; the caller reads them in pieces, or _decode_long()."""
        mid = next(self._ids)
        fut: Future = Future()
        with self._plock:
            if self.closed.is_set():
                _settle(fut, exc=UpstreamError(self.close_reason))
                return mid, fut
            self._pending[mid] = fut
            if longs is not None:
                self._long[mid] = longs
        msg: dict = {"jsonrpc": "2.0", "id": mid, "method": method}
        if params is not None:
            msg["params"] = params
        if not self.send(msg):
            self.forget(mid, UpstreamError(f"{self.name}: cannot write to the stream "
                                           f"({self.close_reason})"))
        return mid, fut

    def forget(self, mid: Any, exc: Optional[BaseException] = None) -> None:
        """Stop waiting for `mid`; a late response to it is then dropped."""
        with self._plock:
            fut = self._pending.pop(mid, None)
            self._long.pop(mid, None)
        if fut is not None and exc is not None:
            _settle(fut, exc=exc)

    def call(self, method: str, params: Optional[dict] = None,
             timeout: float = _CALL_TIMEOUT_S) -> Any:
        """Send a request and wait for its result; on timeout, cancel it upstream and raise."""
        mid, fut = self.request(method, params)
        try:
            return fut.result(timeout)
        except FutureTimeout:
            self.notify("notifications/cancelled", {"requestId": mid,
                                                    "reason": f"timed out after {timeout:g} s"})
            raise UpstreamError(f"{self.name}: no answer to {method} within {timeout:g} s",
                                _REQUEST_TIMEOUT) from None
        finally:
            self.forget(mid)

    # -- incoming
    def _on_line_safely(self, line: Any) -> None:
        """_on_line, but no message, however malformed, can end the session."""
        try:
            self._on_line(line)
        except Exception:
            _log.error("%s: a message could not be handled:\n%s", self.name, traceback.format_exc())

    def _on_line(self, line: Any) -> None:
        """One incoming message: its bytes, or a list holding them, which they are taken out of
        so that they are freed once decoded, and the text once parsed: of a message of many
        megabytes, bytes, text and the parsed message are never all held at once."""
        if isinstance(line, list):  # (the reader's: it keeps no other reference)
            line = line.pop()
        # what errors show, and where the id of an unreadable answer is found
        head = bytes(line[:1000])
        if self._long and len(line) > _LONG_STRING:  # an answer that may keep long strings as bytes
            got = _loads_long(line)
            if got is not None:
                self._on_message(self._kept(*got), head)
                return
        try:
            text = line.decode(json.detect_encoding(line), "surrogatepass")  # as json.loads(bytes)
            line = b""
            msg = json.loads(text, parse_constant=_no_nan)
        except (ValueError, RecursionError) as e:  # RecursionError: "[[[[..." nested past the limit
            self._bad(head, _PARSE_ERROR, f"Parse error: {str(e)[:200]}")
            return
        text = ""
        self._on_message(msg, head)

    def loads(self, raw: bytes) -> Any:
        """A message that arrives by another way than the input stream (a remote upstream's
        HTTP answers: _HttpTransport) parsed as a line read is: the long strings of an answer to a
        request that takes them (request's `longs`) left undecoded. ValueError (or
        RecursionError) when it is not JSON."""
        if self._long and len(raw) > _LONG_STRING:
            got = _loads_long(raw)
            if got is not None:
                return self._kept(*got)
        return json.loads(raw, parse_constant=_no_nan)

    def _kept(self, msg: dict, places: list) -> dict:
        """A message _loads_long read: the long strings of a result stay undecoded if the
        request it answers asked for that (request's `longs`); all others are decoded now."""
        mid = msg.get("id")
        sink = None
        if (isinstance(mid, (str, int)) and not isinstance(mid, bool) and "result" in msg
                and "error" not in msg):
            with self._plock:
                sink = self._long.pop(mid, None)
        keep = [p for p in places if p[3] == "result"] if sink is not None else []
        _decode_long(p for p in places if sink is None or p[3] != "result")
        if sink is not None:
            sink.extend(keep)
        return msg

    def deliver(self, msg: Any) -> None:
        """Handle one message that arrived by another way than the input stream (a remote
        upstream's HTTP answers: _HttpTransport), as if it had been read; never raises."""
        try:
            self._on_message(msg, b"(a message received over HTTP)")
        except Exception:
            _log.error("%s: a message could not be handled:\n%s", self.name, traceback.format_exc())

    def handle_here(self, msg: dict) -> None:
        """Handle one request that arrived by another way than the input stream on the calling
        thread, not the pool (--serve's HTTP thread, which would only wait for it): its answer
        is written (or queued behind what is) before this returns; never raises."""
        req = _Request(msg["id"], msg["method"], msg.get("params"))
        key = next(self._arrivals)
        with self._plock:
            self._inflight[key] = req
            self._idle.clear()
        self._dispatch(req, key)

    def waits_for(self, mid: Any) -> bool:
        """Whether a response to our request `mid` is still awaited."""
        with self._plock:
            return mid in self._pending

    def _on_message(self, msg: Any, line: bytes) -> None:
        if not isinstance(msg, dict):
            self._bad(line, _INVALID_REQUEST, "Invalid Request: expected a JSON object (batches "
                      "are not supported)")
            return
        method = msg.get("method")
        if method is None and "id" in msg and ("result" in msg or "error" in msg):
            self._on_response(msg)
        elif not isinstance(method, str) or msg.get("jsonrpc") != "2.0" or not self._valid_id(msg):
            self._bad(line, _INVALID_REQUEST, "Invalid Request: needs jsonrpc '2.0', a string "
                      "method and a string or integer id", msg.get("id"))
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
            m = _HEAD_ID.match(line) if b'"method"' not in line[:200] else None
            # an answer that cannot be read (nested too deeply, say) fails its call now, not at its
            # deadline
            if m:
                self.forget(json.loads(m.group(1)), RpcError(
                    _INTERNAL_ERROR, f"{self.name} answered with a message that cannot be read "
                    f"({message})"))

    def _on_response(self, msg: dict) -> None:
        if not self._valid_id(msg):
            _log.warning("%s: dropped a response whose id is neither a string nor an integer",
                         self.name)
            return
        with self._plock:
            fut = self._pending.pop(msg["id"], None)
            self._long.pop(msg["id"], None)
        if fut is None:
            _log.warning("%s: dropped a response to unknown id %r", self.name, msg["id"])
        elif "error" in msg:  # cleaned as it arrives: it may be shown anywhere from here on
            err = RpcError.from_dict(msg["error"])
            _settle(fut, exc=RpcError(err.code, _clean(err.message), _SECRETS.mask_json(err.data)))
        else:
            _settle(fut, msg.get("result"))

    def _on_notification(self, method: str, params: Any) -> None:
        if method == "notifications/cancelled":
            rid = params.get("requestId") if isinstance(params, dict) else None
            if not isinstance(rid, (str, int)):
                return  # not an id this side could have issued
            with self._plock:  # (type too: 1 and "1" are different ids)
                reqs = [r for r in self._inflight.values() if r.id == rid
                        and type(r.id) is type(rid)]
            for req in reqs:  # ids should be unique; a peer that reuses one cancels all its holders
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
        key = next(self._arrivals)
        with self._plock:
            full = 0 < self._max_requests <= len(self._inflight)
            if not full:
                self._inflight[key] = req
                self._idle.clear()
            refused, self._refused = self._refused, self._refused + 1 if full else 0
        if full:
            self._refuse(req, refused)
            return
        if refused:
            _log.warning("%s: refused %s while %d were being handled", self.name,
                         _plural(refused, "request"), self._max_requests)
        if self._pool is None:
            self._dispatch(req, key)
        else:
            self._pool.submit(self._dispatch, req, key)

    def _refuse(self, req: _Request, before: int) -> None:
        """A request over max_requests: an error at once, never queued. On the reader thread, so
        it never waits: the error is dropped, as a notification would be, when the peer is not
        reading its answers. Logged once per run of refusals, not per request."""
        if not before:
            _log.warning("%s: sent more than %d requests at once; refusing more until some are "
                         "answered", self.name, self._max_requests)
        self.send(_error_response(req.id, RpcError(
            _BUSY, f"Too many requests at once: Abstract holds at most {self._max_requests} "
                  f"requests from this server at a time ({req.method} refused); send it again "
                  f"once some are answered")), droppable=True)

    def _dispatch(self, req: _Request, key: int) -> None:
        """Run one request's handler and send its response: the one place errors become wire
        errors.

        1. An unknown method or params that are not an object: the JSON-RPC error for it.
        2. The handler's RpcError keeps its code; any other exception is logged with its
           traceback (stderr) and answered as -32603, so no handler can crash the server.
        3. A cancelled request gets no response, as the spec says.
        4. The request counts as in flight until its answer is written or queued: the shutdown
           waits for that (wait_idle), not for the handler alone.
        """
        try:
            handler = self.requests.get(req.method)
            if handler is None:
                raise RpcError(_METHOD_NOT_FOUND, f"Method not found: {req.method}")
            if req.params is not None and not isinstance(req.params, dict):
                raise RpcError(_INVALID_PARAMS, "params must be an object")
            reply: dict = {"jsonrpc": "2.0", "id": req.id, "result": handler(req)}
        except _Cancelled:
            reply = {}
        except RpcError as e:
            reply = _error_response(req.id, e)
        except Exception as e:
            _log.error("%s: %s failed:\n%s", self.name, req.method, traceback.format_exc())
            reply = _error_response(req.id, RpcError(_INTERNAL_ERROR,
                                                     f"Internal error: {type(e).__name__}: {e}"))
        try:
            # a cancelled request gets no response (spec); one abandoned was answered already
            if reply and not req.cancelled.is_set() and req.claim():
                self.send(reply, direct=self._pool is not None)
        finally:  # idle only once the answer is written (or queued): shutdown waits for it
            with self._plock:
                self._inflight.pop(key, None)
                if not self._inflight:
                    self._idle.set()


# ==== Config ======================================================================
# The MCP client's own config file (APP_CONFIG_PATH) names the upstreams; Abstract's optional
# settings file (ABSTRACT_CONFIG) holds Abstract's own knobs.

_SERVER_KEYS = ("mcpServers", "servers", "mcp_servers")


class _ServerSpec:
    """One upstream as the client config describes it, variables expanded.

    `problem` is set (and the rest may be partial) when the entry cannot be started: an
    unsupported transport, a disabled entry, an unset variable, an entry that runs Abstract.
    """

    __slots__ = ("name", "command", "args", "env", "cwd", "problem", "transport", "url", "headers")

    def __init__(self, name: str, command: str = "", args: Optional[List[str]] = None,
                 env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
                 problem: str = "", transport: str = "stdio", url: str = "",
                 headers: Optional[Dict[str, str]] = None) -> None:
        self.name, self.command, self.args = name, command, list(args or [])
        self.env, self.cwd, self.problem = dict(env or {}), cwd, problem
        # "stdio", or for a remote server "http" (Streamable HTTP), "sse" (the 2024-11-05
        # HTTP+SSE transport) or "auto" (no type given: Streamable HTTP, else HTTP+SSE)
        self.transport, self.url, self.headers = transport, url, dict(headers or {})

    @property
    def remote(self) -> bool:
        return self.transport != "stdio"

    def argv(self) -> List[str]:
        return [] if self.remote else [self.command] + self.args


# JSONC, as VS Code and Cursor write their configs: // and /* */ comments, trailing commas.
# Strings are matched first so that nothing inside them is touched.
# Each alternative matches in one way only (a // comment to its line's end, a /* */ comment to its
# first */), so the scan is linear and no bracket inside a comment makes a comma look trailing.
_JSONC_BLOCK = r"/\*(?:[^*]|\*(?!/))*\*/"
_JSONC_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|' + _JSONC_BLOCK
                       + r"|,(?=(?:\s|//[^\n]*\n|" + _JSONC_BLOCK + r")*[}\]])")


def _strip_jsonc(text: str) -> str:
    """JSON from JSONC: comments and trailing commas become spaces (newlines kept), so an
    error's line and column still point into the file as written."""

    def blank(m: "re.Match[str]") -> str:
        tok = m.group()
        return tok if tok.startswith('"') else re.sub(r"[^\n]", " ", tok)

    return _JSONC_RE.sub(blank, text)


def _read_json_file(path: str, what: str) -> Any:
    """Parse a JSON (or JSONC) file; ConfigError names the file and, for bad JSON, the line and
    column."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"{what} {path} cannot be read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8-sig")
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return json.loads(_strip_jsonc(text))  # plain JSON needs no scan; JSONC is read too
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {path} is not UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{what} {path} is not valid JSON: {e.msg} at line {e.lineno} column "
                          f"{e.colno}") from None
    except RecursionError:
        raise ConfigError(f"{what} {path} is nested too deeply to read") from None
    except ValueError:  # Python 3.11+: an integer of more than 4300 digits
        raise ConfigError(f"{what} {path} holds a number with too many digits") from None


def _config_entries(doc: Any, path: str) -> Dict[str, Any]:
    """The server entries of a client config, whichever client wrote it."""
    if not isinstance(doc, dict):
        raise ConfigError(f"client config {path} must hold a JSON object, not {type(doc).__name__}")
    for key in _SERVER_KEYS:
        if key in doc:
            entries = doc[key]
            if not isinstance(entries, dict):
                raise ConfigError(f"client config {path}: '{key}' must be an object mapping names "
                                  f"to servers")
            return entries
    raise ConfigError(f"client config {path} has no servers: expected a top-level key "
                      f"{' or '.join(_SERVER_KEYS)}")


def _runs_abstract(argv: List[str]) -> bool:
    """True when a config entry would start Abstract itself (never spawned: no recursion)."""
    me = os.path.realpath(__file__)
    for i, tok in enumerate(argv):
        base = os.path.basename(tok.replace("\\", "/")).lower()
        if (base in ("abstract.py", "abstract.pyz")
            or (i == 0 and base in ("abstract", "abstract.exe"))):
            return True
        if tok == "abstract" and i > 0 and argv[i - 1] == "-m":
            return True
        if os.path.isabs(tok) and os.path.realpath(tok) == me:
            return True
    return False


def _known_vars(path: str, environ: Dict[str, str], inputs: Dict[str, str]) -> Dict[str, str]:
    """The editors' predefined variables for a config file at `path`: ${workspaceFolder} is the
    folder holding .vscode/ or .cursor/ (else the file's own folder), and the settings' inputs
    answer VS Code's ${input:id} prompts."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.basename(folder).lower() in (".vscode", ".cursor"):
        folder = os.path.dirname(folder)
    home = _env_get(environ, "USERPROFILE" if _WINDOWS else "HOME") or os.path.expanduser("~")
    known = {"workspaceFolder": folder, "workspaceRoot": folder, "userHome": home,
             "pathSeparator": os.sep, "/": os.sep}
    known.update({f"input:{k}": v for k, v in inputs.items()})
    return known


def _missing_text(missing: List[str], path: str) -> str:
    """Why an entry cannot start when variables are not set, and how to set them."""
    asks = sorted({m[6:] for m in missing if m.startswith("input:")})
    names = sorted({m for m in missing if not m.startswith("input:")})
    out = []
    if names:
        out.append(f"environment variable {', '.join(names)} is not set (used in {path}); "
                   f"set it in Abstract's env, or write ${{{names[0]}:-default}}")
    if asks:
        out.append(f"${{input:{asks[0]}}} asks the editor to prompt for a value, which Abstract "
                   f"cannot do; give it in Abstract's settings file as \"inputs\": "
                   f"{{\"{asks[0]}\": \"...\"}}, or write ${{env:NAME}} in {path} and set NAME in "
                   f"Abstract's env")
    return "; ".join(out)


def _make_spec(name: str, entry: Any, environ: Dict[str, str], path: str,
               known: Optional[Dict[str, str]] = None) -> _ServerSpec:
    """Validate and expand one config entry."""
    if not isinstance(entry, dict):
        return _ServerSpec(name, problem=f"its entry in {path} is not an object")
    if entry.get("disabled") is True:
        return _ServerSpec(name, problem=f"it is disabled in {path}")
    kind = entry.get("type")
    if kind not in (None, "stdio") or ("command" not in entry
                                       and ("url" in entry or "serverUrl" in entry)):
        return _remote_spec(name, entry, environ, path, known)
    command, args = entry.get("command"), entry.get("args", [])
    env, cwd = entry.get("env", {}), entry.get("cwd")
    if not isinstance(command, str) or not command:
        return _ServerSpec(name, problem=f"its entry in {path} has no 'command'")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return _ServerSpec(name, problem=f"'args' in {path} must be a list of strings")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        return _ServerSpec(name, problem=f"'env' in {path} must map names to strings")
    if cwd is not None and not isinstance(cwd, str):
        return _ServerSpec(name, problem=f"'cwd' in {path} must be a string")
    missing: List[str] = []
    command = _expand_path(command, environ, missing, known)
    args = [_expand_path(a, environ, missing, known) for a in args]
    env = {k: _expand(v, environ, missing, known) for k, v in env.items()}
    _SECRETS.add_env(env)
    _SECRETS.add_args(args)
    cwd = _expand_path(cwd, environ, missing, known) if cwd else None
    spec = _ServerSpec(name, command, args, env, cwd)
    if missing:
        spec.problem = _missing_text(missing, path)
    elif _runs_abstract(spec.argv()):
        spec.problem = "it runs Abstract itself, which would proxy itself forever"
    return spec


# A remote entry's "type": Claude Code and VS Code write "http" or "sse"; others spell
# Streamable HTTP in these ways. No type with a url (Cursor, Windsurf's serverUrl) is "auto".
_REMOTE_TYPES = {"http": "http", "streamable-http": "http", "streamableHttp": "http",
                 "streamable_http": "http", "sse": "sse"}


def _remote_spec(name: str, entry: dict, environ: Dict[str, str], path: str,
                 known: Optional[Dict[str, str]]) -> _ServerSpec:
    """A remote server's entry: url (or Windsurf's serverUrl) and headers, variables expanded."""
    kind = entry.get("type")
    if kind is not None and kind not in _REMOTE_TYPES:
        return _ServerSpec(name, problem=f"its type {str(kind)[:40]!r} in {path} is not one "
                           f"Abstract knows (stdio, http, sse)")
    url, headers = entry.get("url", entry.get("serverUrl")), entry.get("headers", {})
    if not isinstance(url, str) or not url:
        return _ServerSpec(name, problem=f"its entry in {path} has no 'url' (a remote server needs "
                           f"one)")
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        return _ServerSpec(name, problem=f"'headers' in {path} must map header names to strings")
    missing: List[str] = []
    url = _expand(url, environ, missing, known)
    headers = {k: _expand(v, environ, missing, known) for k, v in headers.items()}
    _SECRETS.add_url(url)
    for k, v in headers.items():
        _SECRETS.add_header(k, v)
    spec = _ServerSpec(name, transport=_REMOTE_TYPES.get(kind, "auto"), url=url, headers=headers)
    # (a value as http.client sends it: Latin-1, no control character but tab)
    bad = [k for k, v in headers.items() if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", k)
           or not re.fullmatch(r"[\t\x20-\x7e\xa0-\xff]*", v)]
    if missing:
        spec.problem = _missing_text(missing, path)
    elif not url.lower().startswith(("http://", "https://")):
        spec.problem = f"its url in {path} is not an http:// or https:// URL: {_safe_url(url)}"
    elif _URL_BAD_RE.search(url) or _unicode_problem(url):  # (http.client's error quotes it)
        spec.problem = (f"its url in {path} holds whitespace, control characters or a lone "
                        f"surrogate ({_escape_controls(_safe_url(url))!r}): write them "
                        f"percent-encoded (%20, %0A)")
    elif bad:
        spec.problem = (f"header {bad[0][:40]!r} in {path} is not a valid HTTP header (a name of "
                        f"letters, digits and -, a value of Latin-1 characters without line "
                        f"breaks or other control characters)")
    else:
        _userinfo_to_header(spec, path)
    return spec


def _userinfo_to_header(spec: _ServerSpec, path: str) -> None:
    """user:password@ in a remote server's url is HTTP Basic auth to it, as in curl: it becomes
    the entry's Authorization header, and the url keeps no credentials (so no request line,
    proxy, log or error ever holds them, and no OAuth login is tried)."""
    try:
        p = urllib.parse.urlsplit(spec.url)
        p.port  # (a malformed port is refused here, not on the first call)
    except ValueError:
        spec.problem = f"its url in {path} is not a valid URL: {_safe_url(spec.url)}"
        return
    if p.username is None:
        return
    if any(k.lower() == "authorization" for k in spec.headers):
        spec.problem = (f"its url in {path} holds user:password@ and its headers an Authorization "
                        f"too; keep one of them")
        return
    spec.headers["Authorization"] = _basic_auth(p)
    _SECRETS.add_header("Authorization", spec.headers["Authorization"])
    spec.url = _strip_userinfo(spec.url)


class _ClientConfig:
    """The upstreams named by the client config, after selection by ABSTRACT_PROXY_SERVERS."""

    def __init__(self, path: Optional[str], selection: Optional[str], environ: Dict[str, str],
                 inputs: Optional[Dict[str, str]] = None) -> None:
        self.path = path or ""
        self._inputs = dict(inputs or {})  # answers to VS Code's ${input:id}, from the settings
        self.error = ""  # why there are no upstreams at all
        self.specs: Dict[str, _ServerSpec] = {}  # selected servers, in config order
        self.unselected: List[str] = []  # in the file but not selected
        self.missing: List[str] = []  # selected but not in the file
        try:
            self._load(path, selection, environ)
        except ConfigError as e:
            self.error = str(e)

    def _load(self, path: Optional[str], selection: Optional[str], environ: Dict[str, str]) -> None:
        if not path:
            raise ConfigError("APP_CONFIG_PATH is not set: point it at your MCP client's config "
                              "file (for example claude_desktop_config.json)")
        entries = _config_entries(_read_json_file(path, "client config"), path)
        wanted = [s.strip() for s in (selection or "").split(",") if s.strip()]
        known = _known_vars(path, environ, self._inputs)
        for name, entry in entries.items():
            spec = _make_spec(name, entry, environ, path, known)
            if wanted and name not in wanted:
                self.unselected.append(name)
            elif not wanted and spec.problem and (_runs_abstract(spec.argv())
                                                  or "disabled" in spec.problem):
                continue  # by default, quietly skip Abstract's own entry and disabled ones
            else:
                self.specs[name] = spec
        self.missing = [w for w in wanted if w not in entries]


_ORGANIZE = ("flat", "by_server", "by_server_tool")
_ROOTS_MODES = ("client", "allowed_directories", "none")


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)


_SECONDS = "a number of seconds > 0 and at most 10000000 (about 4 months)"


def _seconds(v: Any) -> bool:
    """A duration the clocks and waits can hold (a huge one overflows time_t in a wait)."""
    return _positive(v) and v <= 1e7


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


_MEGABYTES = "a number of megabytes > 0 and at most 4096"
_HTTP_SECONDS = "a number of seconds > 0 and at most 3600"
_GLOBAL_SETTINGS: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    "timeout_seconds": (_seconds, _SECONDS, _CALL_TIMEOUT_S),
    "startup_timeout_seconds": (_seconds, _SECONDS, _START_TIMEOUT_S),
    "organize": (lambda v: v in _ORGANIZE, f"one of {', '.join(_ORGANIZE)}", "flat"),
    "max_input_file_mb": (_positive, "a number of megabytes > 0", 10),
    # The roots upstreams are told of: the client's own (relayed; none when the client declares
    # none, so servers such as server-filesystem keep their configured folders), Abstract's
    # allowed directories, or none. share_roots is the older spelling: true/false.
    "roots": (lambda v: v in _ROOTS_MODES, f"one of {', '.join(_ROOTS_MODES)}", "client"),
    "share_roots": (lambda v: isinstance(v, bool), "true (allowed_directories) or false (none)",
                    None),
    # Transparent mode advertises upstream tools without their outputSchema, so that a large
    # result can be cached; true keeps the schemas (and relays those tools' results whole).
    "keep_output_schemas": (lambda v: isinstance(v, bool), "true or false", False),
    "cache_base_url": (lambda v: isinstance(v, str) and v.startswith(("http://", "https://")),
                       "an http:// or https:// URL", ""),
    # --http download links: time to send a request whole, longest stall of any read or write,
    # connections
    "http_header_timeout_seconds": (lambda v: _positive(v) and v <= 3600, _HTTP_SECONDS, 10),
    "http_idle_timeout_seconds": (lambda v: _positive(v) and v <= 3600, _HTTP_SECONDS, 30),
    "http_max_connections": (lambda v: _count(v) and 1 <= v <= 4096,
                             "a whole number from 1 to 4096", 64),
    "max_upstream_message_mb": (lambda v: _positive(v) and v <= 4096, _MEGABYTES, _MAX_MESSAGE_MB),
    "max_client_message_mb": (lambda v: _positive(v) and v <= 4096, _MEGABYTES,
                              _MAX_CLIENT_MESSAGE_MB),
}


def _patterns(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(p, str) and p for p in v)


_SERVER_SETTINGS: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    "timeout_seconds": (_seconds, _SECONDS, None),
    "startup_timeout_seconds": (_seconds, _SECONDS, None),
    # Which of the server's tools Abstract shows: names or shell-style patterns (fnmatch, case
    # sensitive) of the upstream's own names; deny wins over allow.
    "allow_tools": (_patterns, "a list of tool names or patterns such as \"read_*\"", None),
    "deny_tools": (_patterns, "a list of tool names or patterns such as \"delete_*\"", None),
    # --expose direct: what the server's tool and prompt names start with (default "<name>__")
    "prefix": (lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_-]{0,32}", v) is not None,
               "a name prefix of at most 32 characters from A-Z a-z 0-9 _ - (\"\" for none)",
               None),
}


# Output cache knobs; the same keys at every level (global, server, tool), the most specific wins.
_CACHE_POLICY: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    "enabled": (lambda v: isinstance(v, bool), "true or false", True),
    "min_size": (_count, "a number of characters >= 0", 50000),
    "preview_chars": (_count, "a number of characters >= 0", 500),
}
_CACHE_GLOBAL: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    **_CACHE_POLICY,
    "ttl_seconds": (_seconds, _SECONDS, 3600),
    "max_total_mb": (_positive, "a number of megabytes > 0", 1024),
    "max_window_chars": (lambda v: _count(v) and v > 0, "a number of characters > 0", 20000),
    "dir": (lambda v: isinstance(v, str) and bool(v), "a directory path", ""),
}
# The catalog: whether there is one, where it lives, how much text of each output it keeps.
_CATALOG_SETTINGS: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    "enabled": (lambda v: isinstance(v, bool), "true or false", True),
    "path": (lambda v: isinstance(v, str) and bool(v.strip()), "a file path", ""),
    "max_text_kb": (lambda v: _count(v) and 0 < v <= 1024, "a whole number of KiB from 1 to 1024",
                    64),
}
# query_output (the Queries part): how long one query may run, how large the loaded tables may be in
# all, the largest file it reads, the largest result it stores with file_format, and the memory
# of the worker process each query runs in.
_QUERY_SETTINGS: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    "timeout_seconds": (lambda v: _positive(v) and v <= 3600, "a number of seconds > 0 and at most "
                                                              "3600", 5),
    "max_memory_mb": (lambda v: _positive(v) and v <= 65536, "a number of megabytes > 0 and at "
                                                             "most 65536", 512),
    "max_file_mb": (lambda v: _positive(v) and v <= 4096, _MEGABYTES, 200),
    "max_result_mb": (lambda v: _positive(v) and v <= 4096, _MEGABYTES, 100),
    "worker_memory_mb": (lambda v: _positive(v) and 32 <= v <= 65536, "a number of megabytes "
                                                                      "from 32 to 65536", 256),
}
# --serve (the Serving part): the OAuth authorization server for web connectors (on unless
# false), the browser origins allowed besides the server's own (scheme://host[:port]), the
# public origin of a tunnel or reverse proxy in front of it (the name OAuth gives), how long
# a session may stay silent before it is ended, how many sessions at once, the largest request
# body.
_SERVE_SETTINGS: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    "oauth": (lambda v: isinstance(v, bool), "true or false", True),
    "origins": (lambda v: isinstance(v, list) and len(v) <= 100
                and all(isinstance(o, str) and _origin_key(o) for o in v),
                "a list of at most 100 origins such as \"https://claude.ai\" "
                "(scheme://host[:port], no path)", ()),
    "public_url": (lambda v: isinstance(v, str) and (not v or _origin_key(v) is not None),
                   "an origin such as \"https://tunnel.example.net\" (https://host[:port], no "
                   "path; \"\" for none)", ""),
    "idle_timeout_seconds": (_seconds, _SECONDS, 1800),
    "max_sessions": (lambda v: _count(v) and 1 <= v <= 4096, "a whole number from 1 to 4096", 64),
    "max_body_mb": (lambda v: _positive(v) and v <= 4096, _MEGABYTES, 4),
}
# Quotas of the allowed directories: storage.max_total_mb for each of them, or
# storage.directories.<dir>.max_total_mb for one. Abstract refuses a store then; it never deletes.
_QUOTA_SETTINGS: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    "max_total_mb": (_positive, "a number of megabytes > 0", None),
}


# The default output_cache.min_size by client (the clientInfo name it sends), from what each
# does with a big result (docs/reference/cache.md#the-threshold-by-client): Claude Code warns
# above 10,000 tokens (about 40,000 characters) and saves results over about 50,000 characters
# to a file by itself; Claude Desktop ("claude-ai") and Cursor put every result into the context,
# so less gets through there. Other clients keep 50,000.
_CLIENT_MIN_SIZE = (("claude-code", 40000), ("claude-ai", 20000), ("cursor", 20000))


def _client_min_size(client: str) -> int:
    """The default min_size for a client by its clientInfo name (a prefix, any case)."""
    name = client.strip().lower()
    return next((size for prefix, size in _CLIENT_MIN_SIZE if name.startswith(prefix)),
                _CACHE_POLICY["min_size"][2])


def _check_storage(conf: Any) -> None:
    _check_keys(conf, _QUOTA_SETTINGS, "storage", extra=("directories",))
    dirs = conf.get("directories", {})
    if not isinstance(dirs, dict):
        raise ConfigError("key 'storage.directories' must be an object mapping directories to "
                          "{\"max_total_mb\": N}")
    for directory, dconf in dirs.items():
        _check_keys(dconf, _QUOTA_SETTINGS, f"storage.directories.{directory}")


def _check_policy(value: Any, where: str) -> None:
    """A cache policy: an object of _CACHE_POLICY keys, or true/false as shorthand for enabled."""
    if not isinstance(value, bool):
        _check_keys(value, _CACHE_POLICY, where)


# Per tool, beside cache_output: `name` renames the tool (the upstream still gets its own name),
# `description` replaces the upstream's.
_TOOL_SETTINGS: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    "name": (lambda v: isinstance(v, str) and 0 < len(v) <= 128 and v.strip() == v,
             "a tool name (1 to 128 characters, no surrounding spaces)", None),
    "description": (lambda v: isinstance(v, str), "a string", None),
}


# servers.<name>.oauth, for a remote server that asks for an OAuth login (Remote auth): a client
# registered there beforehand, or the URL of a client metadata document the user published (else
# Abstract registers itself dynamically), the scope to ask for
# (else the server's), a fixed port for the loopback redirect (else a free one).
_OAUTH_SETTINGS: Dict[str, Tuple[Callable[[Any], bool], str, Any]] = {
    "client_id": (lambda v: isinstance(v, str) and 0 < len(v) <= 1000, "a client id (a string)",
                  None),
    "client_secret": (lambda v: isinstance(v, str) and 0 < len(v) <= 1000, "a string", None),
    # a client ID metadata document: an https URL with a path (the draft's rule for client_id)
    "client_metadata_url": (lambda v: isinstance(v, str) and len(v) <= 2000
                            and v.startswith("https://")
                            and len(urllib.parse.urlsplit(v).path) > 1,
                            "the https URL (with a path) of your client metadata document", None),
    "scope": (lambda v: isinstance(v, str) and len(v) <= 2000, "space-separated scopes", None),
    "redirect_port": (lambda v: _count(v) and 0 < v < 65536, "a port number from 1 to 65535", None),
}


def _check_server(name: str, conf: Any) -> None:
    where = f"servers.{name}"
    _check_keys(conf, _SERVER_SETTINGS, where, extra=("cache_outputs", "tools", "oauth"))
    if "oauth" in conf:
        _check_keys(conf["oauth"], _OAUTH_SETTINGS, f"{where}.oauth")
    if "cache_outputs" in conf:
        _check_policy(conf["cache_outputs"], f"{where}.cache_outputs")
    tools = conf.get("tools", {})
    if not isinstance(tools, dict):
        raise ConfigError(f"key '{where}.tools' must be an object mapping tool names to settings")
    renamed: Dict[str, str] = {}
    for tool, tconf in tools.items():
        _check_keys(tconf, _TOOL_SETTINGS, f"{where}.tools.{tool}", extra=("cache_output",))
        if "cache_output" in tconf:
            _check_policy(tconf["cache_output"], f"{where}.tools.{tool}.cache_output")
        new = tconf.get("name")
        if new is not None and new in renamed:
            raise ConfigError(f"keys '{where}.tools.{renamed[new]}.name' and "
                              f"'{where}.tools.{tool}.name' "
                              f"both rename to {new!r}; give each tool its own name")
        if new is not None:
            renamed[new] = tool


def _check_keys(obj: Any, spec: Dict[str, Tuple[Callable[[Any], bool], str, Any]], where: str,
                extra: Tuple[str, ...] = ()) -> None:
    if not isinstance(obj, dict):
        raise ConfigError(f"{where or 'the top level'} must be an object")
    for key, value in obj.items():
        full = f"{where}.{key}" if where else key
        if key in extra:
            continue
        if key not in spec:
            raise ConfigError(f"unknown key '{full}' (known: "
                              f"{', '.join(sorted(list(spec) + list(extra)))})")
        ok, want, _ = spec[key]
        if not ok(value):
            raise ConfigError(f"key '{full}' must be {want}, not {_dumps(value)}")


def _env_seconds(environ: Dict[str, str], name: str) -> Optional[float]:
    raw = environ.get(name)
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not _seconds(value):
        raise ConfigError(f"{name} must be {_SECONDS}, not {raw!r}")
    return value


class _Settings:
    """Abstract's own settings (ABSTRACT_CONFIG, a JSON file); defaults work without one."""

    def __init__(self, data: Optional[dict] = None,
                 environ: Optional[Dict[str, str]] = None) -> None:
        data = {} if data is None else data  # a file holding [] or 0 is an error, not "no settings"
        _check_keys(data, _GLOBAL_SETTINGS, "",
                    extra=("servers", "output_cache", "catalog", "storage", "inputs", "query",
                           "serve"))
        inputs = data.get("inputs", {})
        if not isinstance(inputs, dict) or not all(isinstance(v, str) for v in inputs.values()):
            raise ConfigError("key 'inputs' must be an object mapping VS Code input ids to strings")
        _check_keys(data.get("output_cache", {}), _CACHE_GLOBAL, "output_cache")
        _check_keys(data.get("catalog", {}), _CATALOG_SETTINGS, "catalog")
        _check_keys(data.get("query", {}), _QUERY_SETTINGS, "query")
        _check_keys(data.get("serve", {}), _SERVE_SETTINGS, "serve")
        _check_storage(data.get("storage", {}))
        servers = data.get("servers", {})
        if not isinstance(servers, dict):
            raise ConfigError("key 'servers' must be an object mapping server names to settings")
        for name, conf in servers.items():
            _check_server(name, conf)
        self.data, self.servers = data, servers
        self.env_timeout = _env_seconds(environ or {}, "ABSTRACT_TIMEOUT")

    @classmethod
    def load(cls, path: Optional[str], environ: Dict[str, str]) -> "_Settings":
        if not path:
            return cls({}, environ)
        _env_seconds(environ, "ABSTRACT_TIMEOUT")  # its own message, not blamed on the file
        try:
            return cls(_read_json_file(path, "settings file"), environ)
        except ConfigError as e:
            msg = str(e)
            raise ConfigError(msg if msg.startswith("settings file")
                              else f"settings file {path}: {msg}") from None

    def get(self, key: str) -> Any:
        return self.data.get(key, _GLOBAL_SETTINGS[key][2])

    def roots_mode(self) -> str:
        """roots, or the older share_roots: true is allowed_directories, false none."""
        if "roots" not in self.data and "share_roots" in self.data:
            return "allowed_directories" if self.data["share_roots"] else "none"
        return str(self.get("roots"))

    def prefix(self, server: str) -> Optional[str]:
        """servers.<name>.prefix (direct mode's names), None when not set."""
        return self.servers.get(server, {}).get("prefix")

    def timeout(self, server: str) -> float:
        """Tool-call deadline: the server's setting, else ABSTRACT_TIMEOUT, else the global one."""
        own = self.servers.get(server, {}).get("timeout_seconds")
        if own is not None:
            return float(own)
        return self.env_timeout or float(self.get("timeout_seconds"))

    def cache(self, key: str) -> Any:
        """A global output_cache setting."""
        return self.data.get("output_cache", {}).get(key, _CACHE_GLOBAL[key][2])

    def catalog(self, key: str) -> Any:
        """A catalog setting."""
        return self.data.get("catalog", {}).get(key, _CATALOG_SETTINGS[key][2])

    def query(self, key: str) -> Any:
        """A query_output setting."""
        return self.data.get("query", {}).get(key, _QUERY_SETTINGS[key][2])

    def serve(self, key: str) -> Any:
        """A --serve setting."""
        return self.data.get("serve", {}).get(key, _SERVE_SETTINGS[key][2])

    def quota_mb(self, root: str) -> Optional[float]:
        """The max_total_mb of the allowed directory `root` (a real path), if it has one."""
        storage = self.data.get("storage", {})
        for directory, conf in storage.get("directories", {}).items():
            if "max_total_mb" in conf and os.path.realpath(os.path.expanduser(directory)) == root:
                return float(conf["max_total_mb"])
        own = storage.get("max_total_mb")
        return None if own is None else float(own)

    def _shown(self, server: str, tool: str) -> bool:
        """Whether allow_tools and deny_tools let a tool (by its upstream name) be shown."""
        conf = self.servers.get(server, {})
        allow, deny = conf.get("allow_tools"), conf.get("deny_tools") or []
        if allow is not None and not any(fnmatch.fnmatchcase(tool, p) for p in allow):
            return False
        return not any(fnmatch.fnmatchcase(tool, p) for p in deny)

    def _renames(self, server: str) -> Dict[str, str]:
        """new name -> upstream name, for the renames of tools that are shown."""
        own = self.servers.get(server, {}).get("tools", {})
        return {c["name"]: t for t, c in own.items() if "name" in c and self._shown(server, t)}

    def upstream_tool(self, server: str, tool: str) -> str:
        """The upstream's own name of a tool that Abstract shows as `tool` (renamed or not)."""
        return self._renames(server).get(tool, tool)

    def shape_tools(self, server: str, tools: List[dict]) -> List[dict]:
        """The tools Abstract shows of an upstream's list: allow_tools/deny_tools applied, then
        each tool's name and description replaced where its settings say. A tool keeping its own
        name that a shown tool is renamed to is hidden (the rename wins), with a warning; renames
        may swap names."""
        own = self.servers.get(server, {}).get("tools", {})
        renames = self._renames(server)
        out = []
        for t in tools:
            name = t["name"]
            if not self._shown(server, name):
                continue
            tconf = own.get(name, {})
            if name in renames and renames[name] != name and "name" not in tconf:
                _log.warning("%s: tool %r is hidden: settings rename %r to that name",
                             server, name, renames[name])
                continue
            if "name" in tconf or "description" in tconf:
                t = {**t, "name": tconf.get("name", name)}
                if "description" in tconf:
                    t["description"] = tconf["description"]
            out.append(t)
        return out

    def cache_policy(self, server: str, tool: str, client: str = "") -> Dict[str, Any]:
        """enabled / min_size / preview_chars for one tool (by the name Abstract shows): tool,
        then server, then global, then the default for the client (its clientInfo name,
        _client_min_size)."""
        tool = self.upstream_tool(server, tool)  # settings are keyed by the upstream's name
        conf = self.servers.get(server, {})
        levels = [self.data.get("output_cache", {}), conf.get("cache_outputs", {}),
                  conf.get("tools", {}).get(tool, {}).get("cache_output", {})]
        policy = {k: spec[2] for k, spec in _CACHE_POLICY.items()}
        policy["min_size"] = _client_min_size(client)
        for level in levels:
            level = {"enabled": level} if isinstance(level, bool) else level
            policy.update({k: v for k, v in level.items() if k in _CACHE_POLICY})
        return policy

    def oauth(self, server: str) -> dict:
        """A remote server's OAuth settings (servers.<name>.oauth), {} when none."""
        return dict(self.servers.get(server, {}).get("oauth", {}))

    def startup_timeout(self, server: str) -> float:
        own = self.servers.get(server, {}).get("startup_timeout_seconds")
        return float(own if own is not None else self.get("startup_timeout_seconds"))


# ==== HTTP ========================================================================
# Everything HTTP: the client (requests, the keep-alive pool, TLS, proxies, the SSE parser), the
# server side (a bounded ThreadingHTTPServer: the --http link server and the OAuth loopback), and
# the MCP transport of a remote upstream session (Streamable HTTP, HTTP+SSE).


# -- client: requests, the keep-alive pool, TLS, proxies, SSE
# A small HTTP/1.1 client on http.client for remote upstreams (Streamable HTTP, HTTP+SSE) and
# for an auth provider: a connection per request, or one kept alive in a caller's _HttpPool
# (an upstream session's), every wait and every body bounded, TLS with
# the system's trust store (or SSL_CERT_FILE / SSL_CERT_DIR), HTTP(S)_PROXY and NO_PROXY
# honoured, and an incremental Server-Sent Events parser. http.client and ssl are imported on
# first use: they cost start-up time that a stdio-only configuration never needs.

_HTTP_CONNECT_S = 10.0  # TCP connect, proxy CONNECT and TLS handshake
_HTTP_READ_S = 60.0  # longest wait for any one read (a stream's keep-alives reset it)
_HTTP_BODY_MAX = 16 << 20  # a body read whole (errors, metadata documents) is at most this long
_HTTP_REDIRECTS = 5
# a kept-alive connection is used again only this soon: servers close idle ones after a few
# seconds (uvicorn and Node 5 s, gunicorn 2 s), and a request sent as one closes is lost
_HTTP_KEEP_S = 1.0
_HTTP_KEEP_MAX = 4  # idle connections a pool keeps for each origin
_REDIRECTS = (301, 302, 303, 307, 308)
# what a request keeps when a redirect takes it to another origin: nothing else of the caller's
# (static API-key headers, the session id) and nothing of the auth provider goes there
# what a remote server's JSON-RPC error says when it does not know the session id a request
# carried ("No valid session ID provided", "Mcp-Session-Id header is required", "Invalid or
# expired session ID"; not a tool's "session_id" argument), and the codes transports use for it
_SESSION_ID_RE = re.compile(r"\bsession[ -]id\b", re.IGNORECASE)
_SESSION_ERROR_CODES = (-32000, -32001, _INVALID_REQUEST)
_PORTABLE_HEADERS = ("accept", "content-type", "last-event-id", "mcp-protocol-version",
                     "user-agent")


def _no_proxy(host: str, port: int, environ: Dict[str, str]) -> bool:
    """Whether NO_PROXY (or no_proxy) exempts host:port: `*`, a host, a domain suffix
    (`example.com` and `.example.com` both cover `a.example.com`), optionally with `:port`."""
    raw = environ.get("no_proxy") or environ.get("NO_PROXY") or ""
    host = host.lower().strip("[]")
    for entry in (e.strip().lower() for e in raw.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        name, _, eport = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if eport and eport != str(port):
            continue
        name = name.strip("[]").lstrip(".")
        if host == name or host.endswith("." + name):
            return True
    return False


def _proxy_for(url: str, environ: Dict[str, str]) -> Optional[urllib.parse.SplitResult]:
    """The http:// proxy for `url` from https_proxy / HTTPS_PROXY or http_proxy / HTTP_PROXY
    (the lower-case name first, as curl and urllib read them), unless NO_PROXY exempts it."""
    scheme, host, port = _url_origin(url)
    raw = environ.get(f"{scheme}_proxy") or environ.get(f"{scheme.upper()}_PROXY") or ""
    if not raw or _no_proxy(host, port, environ):
        return None
    proxy = urllib.parse.urlsplit(raw if "://" in raw else "http://" + raw)
    if proxy.scheme != "http" or not proxy.hostname:
        raise _HttpError(f"{scheme.upper()}_PROXY {_safe_url(raw)} is not usable: only http:// "
                         f"proxies are supported (the tunnel to an https:// server is still "
                         f"encrypted)")
    return proxy


_TLS_CONTEXTS: Dict[Tuple[str, str], Any] = {}  # (under _TLS_LOCK)
_TLS_LOCK = threading.Lock()


def _tls_context(environ: Dict[str, str]) -> Any:
    """ssl.create_default_context(): the system's trust store, or SSL_CERT_FILE / SSL_CERT_DIR
    when set (they replace it, as in curl and requests). One context per pair, reused."""
    try:
        import ssl  # lazy: see Imports
    except ImportError:  # pragma: no cover - a Python built without OpenSSL
        raise _HttpError("this Python has no ssl module, so https:// servers cannot be "
                         "reached") from None
    key = (environ.get("SSL_CERT_FILE", ""), environ.get("SSL_CERT_DIR", ""))
    with _TLS_LOCK:  # (two first requests at once load the trust store once)
        ctx = _TLS_CONTEXTS.get(key)
        if ctx is None:
            try:
                ctx = ssl.create_default_context(cafile=key[0] or None, capath=key[1] or None)
            except (OSError, ssl.SSLError) as e:
                raise _HttpError(f"the certificates in SSL_CERT_FILE={key[0]!r} / "
                                 f"SSL_CERT_DIR={key[1]!r} cannot be loaded: {e}") from None
            _TLS_CONTEXTS[key] = ctx
    return ctx


def _net_error(e: BaseException, url: str, connect_timeout: float, read_timeout: float,
               connected: bool) -> _HttpError:
    """A failed exchange in words: what went wrong, at which URL, and what to check."""
    import ssl  # lazy: see Imports
    import socket  # lazy: see Imports

    where = _safe_url(url)
    if isinstance(e, ssl.SSLCertVerificationError):
        why = (f"its TLS certificate is not trusted ({e.verify_message}); for a private CA set "
               f"SSL_CERT_FILE to its certificate file")
    elif isinstance(e, ssl.SSLError):
        why = f"the TLS handshake failed ({e.reason or e})"
    elif isinstance(e, ConnectionRefusedError):
        why = "connection refused (is the server running, and is the port right?)"
    elif isinstance(e, socket.gaierror):
        why = f"its host name cannot be resolved ({e.strerror or e})"
    elif isinstance(e, (socket.timeout, TimeoutError)):
        why = (f"no answer within {read_timeout:g} s" if connected
               else f"no connection within {connect_timeout:g} s")
    elif isinstance(e, _HttpError):
        return e
    else:
        import http.client  # lazy: see Imports

        if isinstance(e, http.client.IncompleteRead):
            why = "the connection closed in the middle of the answer"
        elif isinstance(e, http.client.InvalidURL):  # (not quoted: it holds the query)
            why = ("its URL holds characters a request line cannot carry (spaces or control "
                   "characters): write them percent-encoded (%20, %0A)")
        elif isinstance(e, UnicodeEncodeError):  # (not quoted: it holds the header value)
            why = ("a header value holds characters HTTP cannot carry (only Latin-1, without "
                   "control characters), or the URL's path or query non-ASCII ones: write them "
                   "percent-encoded")
        elif isinstance(e, http.client.HTTPException):
            why = f"the answer is not valid HTTP ({type(e).__name__}: {str(e)[:100]})"
        else:
            why = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return _HttpError(f"cannot reach {where}: {why}", where, unsent=not connected)


def _abort(conn: Any, sock: Any = None) -> None:
    """Close an http.client connection; safe from another thread (a read or a write waiting on
    it ends at once), and more than once. `sock`, its socket, is given apart once an answer has
    begun: http.client hands it to the answer (conn.sock is None) when the server said
    Connection: close."""
    sock = sock if sock is not None else getattr(conn, "sock", None)
    if sock is not None:
        try:
            import socket  # lazy: see Imports

            sock.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked in recv on this socket
        except OSError:
            pass
    try:
        conn.close()
    except Exception:  # pragma: no cover
        pass


class _HttpPool:
    """Idle keep-alive connections, per origin (and proxy), for one user: an upstream session.
    A request takes the newest one kept less than _HTTP_KEEP_S ago whose server has not closed
    it; an answer read to its end gives its connection back (at most _HTTP_KEEP_MAX idle per
    origin). close() ends them all, and the pool keeps nothing after it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: Dict[tuple, List[Tuple[Any, float]]] = {}
        self._closed = False

    def take(self, key: tuple) -> Any:
        import select  # lazy: see Imports

        while True:
            with self._lock:
                idle = self._idle.get(key)
                if not idle:
                    return None
                conn, since = idle.pop()
            sock = getattr(conn, "sock", None)
            try:  # readable while idle: the server closed it (or sent what nobody asked for)
                if (sock is not None and time.monotonic() - since < _HTTP_KEEP_S
                        and not select.select([sock], [], [], 0)[0]):
                    return conn
            except (OSError, ValueError):  # closed meanwhile (or past select's FD_SETSIZE)
                pass
            _abort(conn)

    def give(self, key: tuple, conn: Any) -> None:
        with self._lock:
            idle = self._idle.get(key, []) if not self._closed else None
            if idle is not None and len(idle) < _HTTP_KEEP_MAX:
                self._idle[key] = idle + [(conn, time.monotonic())]
                return
        _abort(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn, _ in conns:
                _abort(conn)


class _Lease:
    """One exchange's use of a connection: it ends once, by abort() (from any thread) or by
    release() (the answer read to its end: the connection goes back to the pool, if any).
    `aborted` tells that abort() ended it (a cancel, when a watcher called it)."""

    def __init__(self, conn: Any, pool: Optional[_HttpPool], key: tuple) -> None:
        self.conn, self._pool, self._key = conn, pool, key
        self.sock: Any = None  # once open (kept apart: see _abort)
        self._lock = threading.Lock()
        self._over = False
        self.aborted = False

    def _end(self) -> bool:
        with self._lock:
            over, self._over = self._over, True
        return not over

    def abort(self) -> None:
        if self._end():
            self.aborted = True
            _abort(self.conn, self.sock)

    def release(self, resp: Any) -> None:
        if not self._end():
            return
        if resp.length == 0 and not resp.isclosed():  # an empty body nobody read (a 202)
            with contextlib.suppress(Exception):
                resp.read()
        if (self._pool is not None and resp.isclosed() and not resp.will_close
                and getattr(self.conn, "sock", None) is not None):
            self._pool.give(self._key, self.conn)
        else:
            _abort(self.conn, self.sock)


class _HttpResponse:
    """An HTTP answer whose body has not been read yet. Read it whole (`read`, bounded), by
    lines (`readline`), or as Server-Sent Events (`events`); close it when done (or use it as
    a context manager). `headers` is case-insensitive (an http.client.HTTPMessage)."""

    def __init__(self, url: str, lease: _Lease, resp: Any) -> None:
        self.url, self._lease, self._resp = url, lease, resp
        self._sock = lease.sock
        self.status: int = resp.status
        self.reason: str = resp.reason or ""
        self.headers = resp.headers
        self._head = b""  # body bytes already read by first_line()

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name, default)

    @property
    def content_type(self) -> str:
        return self.header("Content-Type").split(";")[0].strip().lower()

    def read(self, limit: int = _HTTP_BODY_MAX, within: Optional[float] = None) -> bytes:
        """The whole body; HttpError if it is longer than `limit` bytes (nothing more is read),
        or, with `within`, if it takes more than `within` seconds in all (each read's timeout
        alone lets a server that sends a byte at a time go on for hours)."""
        deadline = None if within is None else time.monotonic() + within
        parts, size = [self._head], len(self._head)
        try:
            while size <= limit:
                if deadline is not None and time.monotonic() > deadline:
                    self.close()
                    raise _HttpError(f"{_safe_url(self.url)} took more than {within:g} s to send "
                                     f"its answer", _safe_url(self.url), self.status)
                part = self._resp.read1(min(1 << 16, limit + 1 - size))
                if not part:
                    break
                parts.append(part)
                size += len(part)
        except _HttpError:
            raise
        except Exception as e:
            raise _net_error(e, self.url, 0, self._timeout(), True) from None
        data, self._head = b"".join(parts), b""
        if len(data) > limit:
            self.close()
            raise _HttpError(f"{_safe_url(self.url)} sent a body of more than {limit:,} bytes",
                             _safe_url(self.url), self.status)
        return data

    def readline(self, limit: int) -> bytes:
        """One line of the body, up to `limit` bytes (b"" at its end)."""
        try:
            return self._resp.readline(limit)
        except Exception as e:
            raise _net_error(e, self.url, 0, self._timeout(), True) from None

    def events(self, parser: "_SseParser") -> Iterator["_SseEvent"]:
        """The body's Server-Sent Events, read incrementally through `parser` (which keeps the
        last event id and retry delay across reconnections, and bounds each event)."""
        while True:
            line = self.readline(parser.max_event + 1)
            if not line:
                return
            ev = parser.feed(line)
            if ev is not None:
                yield ev

    def first_line(self, limit: int = 200) -> str:
        """The first non-blank line of the body (at most 4 KiB is read for it), for errors."""
        if not self._head:
            try:
                self._head = self._resp.read(4096)
            except Exception:
                return ""
        for line in self._head.decode("utf-8", "replace").splitlines():
            if line.strip():
                return line.strip()[:limit]
        return ""

    def error(self, what: str = "") -> _HttpError:
        """HttpError for an unwanted status: `what` (e.g. "server 'x'"), the status, the URL
        without secrets and the first line of the body."""
        line = self.first_line()
        where = _safe_url(self.url)
        msg = f"{what + ': ' if what else ''}HTTP {self.status} {self.reason} from {where}"
        return _HttpError(msg + (f": {line}" if line else ""), where, self.status, line)

    def _timeout(self) -> float:
        try:
            return (self._sock.gettimeout() if self._sock is not None else None) or 0.0
        except OSError:  # (closed)
            return 0.0

    def close(self) -> None:
        """Close the answer; safe from another thread (it ends a read that is waiting), and more
        than once. A connection whose answer was read to its end goes back to its pool."""
        self._lease.release(self._resp)

    def __enter__(self) -> "_HttpResponse":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _http_conn(p: urllib.parse.SplitResult, port: int,
               proxy: Optional[urllib.parse.SplitResult], proxy_auth: Dict[str, str],
               environ: Dict[str, str], connect_timeout: float) -> Any:
    """A new connection, not yet open, to the origin of `p`, through `proxy` if not None. It
    never opens itself (auto_open 0): one that was aborted (a cancel) fails to send instead
    of sending on a new socket that no cancel can reach."""
    import http.client  # lazy: see Imports

    kw: Dict[str, Any] = {"timeout": connect_timeout}
    if p.scheme == "https":
        kw["context"] = _tls_context(environ)
    cls = http.client.HTTPSConnection if p.scheme == "https" else http.client.HTTPConnection
    if proxy is None:
        conn = cls(p.hostname, port, **kw)
    else:
        conn = cls(proxy.hostname, proxy.port or 80, **kw)
        if p.scheme == "https":  # CONNECT tunnel: the proxy sees only the host name
            conn.set_tunnel(p.hostname, port, headers=proxy_auth)
    conn.auto_open = 0
    return conn


def _http_once(method: str, url: str, headers: Dict[str, str], body: Optional[bytes],
               environ: Dict[str, str], connect_timeout: float, read_timeout: float,
               watch: Optional[Callable[[Callable[[], None]], None]] = None,
               pool: Optional[_HttpPool] = None) -> _HttpResponse:
    """One request, on a connection kept alive in `pool` or on a new one (through the proxy if
    one applies); the answer's headers are read, its body is not."""
    import http.client  # lazy: see Imports

    p = urllib.parse.urlsplit(url)
    if p.scheme not in ("http", "https") or not p.hostname:
        raise _HttpError(f"not an http:// or https:// URL: {_safe_url(url)}", _safe_url(url))
    port = p.port or (443 if p.scheme == "https" else 80)
    target = urllib.parse.urlunsplit(("", "", p.path or "/", p.query, ""))
    proxy = _proxy_for(url, environ)
    hdrs = dict(headers)
    if p.username is not None and not any(k.lower() == "authorization" for k in hdrs):
        hdrs["Authorization"] = _basic_auth(p)  # user:password@ never goes on the wire as it is
    # user:password in the proxy URL: Basic, as curl does
    auth = {}
    if proxy is not None and proxy.username is not None:
        auth = {"Proxy-Authorization": _basic_auth(proxy)}
    if proxy is not None and p.scheme == "http":
        target = _strip_userinfo(url)  # absolute-form request line (http.client takes Host from it)
        hdrs.update(auth)
    key = (*_url_origin(url), proxy.geturl() if proxy else "")
    kept = pool.take(key) if pool is not None else None
    while True:
        conn = kept or _http_conn(p, port, proxy, auth, environ, connect_timeout)
        lease, connected = _Lease(conn, pool, key), kept is not None
        try:
            if kept is None:
                conn.connect()
                connected = True
            lease.sock = conn.sock
            lease.sock.settimeout(read_timeout)
            if watch is not None:
                watch(lease.abort)
            try:
                conn.request(method, target, body=body, headers=hdrs)
            except (OSError, http.client.HTTPException):
                if kept is None or lease.aborted:  # (a cancel's abort: never sent anew)
                    raise
                # a kept connection the server closed as it was taken: writing the request
                # failed, so its end never left, and no server can have run it: sent anew
                lease.abort()
                kept = None
                continue
            return _HttpResponse(url, lease, conn.getresponse())
        except Exception as e:
            cancelled = lease.aborted
            lease.abort()
            if cancelled:
                raise _HttpError(f"the request to {_safe_url(url)} was cancelled",
                                 _safe_url(url)) from None
            raise _net_error(e, url, connect_timeout, read_timeout, connected) from None


def _http_request(method: str, url: str, headers: Optional[Dict[str, str]] = None,
                  body: Optional[bytes] = None, *, auth: Any = None,
                  environ: Optional[Dict[str, str]] = None,
                  connect_timeout: float = _HTTP_CONNECT_S,
                  read_timeout: float = _HTTP_READ_S,
                  watch: Optional[Callable[[Callable[[], None]], None]] = None,
                  pool: Optional[_HttpPool] = None) -> _HttpResponse:
    """Send one HTTP request and return the answer with its body unread (an HttpResponse).

    Any status is returned (the caller decides what is an error; _HttpResponse.error words it);
    HttpError means no usable answer. Redirects: followed up to _HTTP_REDIRECTS times for GET,
    HEAD and DELETE (credentials are not carried to another origin); a POST follows only a 307
    or 308 to the same origin, as anything else could send its body, or the answer, elsewhere.
    `auth` (optional) is an auth provider: `auth.headers(url) -> dict` is added to every
    request, and on a 401 or 403 `auth.on_unauthorized(response) -> bool` is asked once
    whether to retry with fresh headers. `watch` (optional) is given, once each connection is
    open, a function that aborts the exchange from another thread (a cancelled request whose
    answer has not begun; aborted before its request is written, it is never sent: HttpError
    "was cancelled"). With `pool`, connections are kept alive there between requests.
    """
    environ = dict(os.environ) if environ is None else environ
    base = dict(headers or {})
    retried = False
    for _ in range(_HTTP_REDIRECTS + 2):
        hdrs = dict(base)
        if auth is not None:
            hdrs.update(auth.headers(url))
        resp = _http_once(method, url, hdrs, body, environ, connect_timeout, read_timeout,
                          watch, pool)
        location = resp.header("Location")
        if resp.status in _REDIRECTS and location:
            target = urllib.parse.urljoin(url, location)
            same = _url_origin(target) == _url_origin(url)
            if method == "POST" and not (same and resp.status in (307, 308)):
                resp.close()
                raise _HttpError(f"{_safe_url(url)} redirected a POST (HTTP {resp.status}) to "
                                 f"{_safe_url(target)}, which is not followed: put the final URL "
                                 f"in the config",
                                 _safe_url(url), resp.status)
            resp.close()
            if not same:  # credentials of this origin are not for the next one, nor the login's
                base = {k: v for k, v in base.items() if k.lower() in _PORTABLE_HEADERS}
                auth = None
            if resp.status == 303:
                method, body = "GET", None
            url = target
            continue
        if resp.status in (401, 403) and auth is not None and not retried:
            retried = True
            if auth.on_unauthorized(resp):
                resp.close()
                continue
        return resp
    raise _HttpError(f"{_safe_url(url)}: more than {_HTTP_REDIRECTS} redirects", _safe_url(url))


class _SseEvent(NamedTuple):
    """One Server-Sent Event: its type ("message" by default), data (bytes, the data lines
    joined by \\n) and id (None when it carried none)."""

    event: str
    data: bytes
    id: Optional[str]


class _SseParser:
    """Incremental Server-Sent Events parser (WHATWG HTML, "event stream interpretation"): feed
    it the stream's lines; it returns each event as its blank line arrives. `last_id` and
    `retry_ms` outlive a stream, for reconnecting with Last-Event-ID. No event may exceed
    `max_event` bytes of data (HttpError): memory stays bounded whatever the server sends."""

    def __init__(self, max_event: int = _HTTP_BODY_MAX) -> None:
        self.max_event = max_event
        self.last_id = ""
        self.retry_ms: Optional[int] = None
        self._reset()
        self._first = True

    def _reset(self) -> None:
        self._data: List[bytes] = []
        self._size = 0
        self._type = ""
        self._id: Optional[str] = None

    def feed(self, line: bytes) -> Optional[_SseEvent]:
        if self._first:
            self._first = False
            if line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
        if len(line) > self.max_event and not line.endswith(b"\n"):
            raise _HttpError(f"a Server-Sent Event of more than {self.max_event:,} bytes")
        line = line.rstrip(b"\n").rstrip(b"\r")
        if not line:
            return self._dispatch()
        if line.startswith(b":"):
            return None  # a comment (keep-alive)
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._size += len(value) + 1
            if self._size > self.max_event:
                raise _HttpError(f"a Server-Sent Event of more than {self.max_event:,} bytes")
            self._data.append(value)
        elif name == b"event":
            self._type = value.decode("utf-8", "replace")
        elif name == b"id" and b"\0" not in value:
            self._id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Optional[_SseEvent]:
        if self._id is not None:
            self.last_id = self._id  # kept even for an event without data (a "priming" event)
        ev = None
        if self._data:
            ev = _SseEvent(self._type or "message", b"\n".join(self._data), self._id)
        self._reset()
        return ev


# -- server side: the bounded ThreadingHTTPServer
# A ThreadingHTTPServer with bounds (connections, header deadline, idle timeout), shared by every
# HTTP server Abstract runs.


# --http link server at its cap: a connection is dropped to make room for a new one only when
# none has ended on its own for this long (idle or trickling connections hold every slot)
_EVICT_AFTER_S = 0.25


def _shut_rdwr() -> int:
    """socket.SHUT_RDWR (socket is imported lazily: see Imports)."""
    import socket  # lazy: see Imports

    return socket.SHUT_RDWR


class _BoundedServerMixin:
    """A ThreadingHTTPServer with bounds: at most `max_conn` connections at once, each given
    `header_s` to send its request whole (a watchdog shuts the socket after that), and a listen
    backlog that takes a burst of downloads. At the cap, the connection that has waited longest
    without sending a byte is dropped to make room (_evict), else the one whose request has been
    coming longest, so idle or trickling connections cannot keep a request waiting; when every
    one has its request in, the accept loop waits for a free slot, and more connections wait in
    the listen backlog, not in Abstract. A connection kept alive between requests (HTTP/1.1)
    counts as one that has sent nothing: it may be dropped to make room, and the watchdog closes
    it after `idle_s` without a request."""

    daemon_threads = True
    _header_s, _idle_s, _max_conn = 10.0, 30.0, 64  # (set by _bounded_server_class)
    # socketserver's 5 refuses connections in a burst (the kernel may cap it)
    request_queue_size = 1024

    def server_activate(self) -> None:
        self._slots = threading.Semaphore(self._max_conn)
        # connections whose request has not come whole, oldest first (dicts keep order)
        self._deadlines: Dict[Any, float] = {}
        self._spoke: set = set()  # ... of them, those that sent a byte (spoke())
        self._evicted: set = set()  # dropped to make room, their slot not yet freed
        self._freed: set = set()  # closed while their thread goes on, their slot freed (free)
        self._freed_at = time.monotonic()  # when a connection last ended on its own
        self._lock = threading.Lock()
        self._closing = threading.Event()  # shutdown() asked: the accept loop waits no more
        super().server_activate()
        self._stopped = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="abstract-http-watch",
                                         daemon=True)
        self._watcher.start()

    def server_close(self) -> None:
        super().server_close()
        watcher = getattr(self, "_watcher", None)  # (none when the port could not be bound)
        if watcher is not None:
            self._stopped.set()
            watcher.join(_STOP_JOIN_S)

    def process_request(self, request: Any, client_address: Any) -> None:
        # a slot is freed by a finished request, the watchdog, or _evict (at the cap)
        got = self._slots.acquire(blocking=False)
        while not got:
            if self._closing.is_set():  # stopping: closed unserved (it holds no slot)
                super().shutdown_request(request)
                return
            # only when no connection has ended on its own for _EVICT_AFTER_S: a burst of
            # downloads frees slots all the time, and its connections are never dropped
            if time.monotonic() - self._freed_at >= _EVICT_AFTER_S:
                self._evict()
            got = self._slots.acquire(timeout=0.05)
        with self._lock:
            self._deadlines[request] = time.monotonic() + self._header_s
        super().process_request(request, client_address)

    def shutdown(self) -> None:
        """Stop the accept loop, even one waiting for a free slot (every slot a download
        whose reader stalled would hold it up to http_idle_timeout_seconds). The connections
        kept alive that wait for a next request are closed."""
        self._closing.set()
        super().shutdown()
        with self._lock:
            idle = [r for r in self._deadlines if r not in self._spoke]
        for r in idle:  # (their handlers' waits end; a new one that sent nothing goes too)
            with contextlib.suppress(OSError):
                r.shutdown(_shut_rdwr())

    def spoke(self, request: Any, again: bool = False) -> None:
        """The connection sent the first byte of a request: dropped to make room only if none is
        silent. `again`: a request after the first on a connection kept alive, given the header
        deadline from now."""
        with self._lock:
            if again:
                self._deadlines[request] = time.monotonic() + self._header_s
            if request in self._deadlines:
                self._spoke.add(request)

    def kept(self, request: Any) -> bool:
        """An answer is out and the connection is kept alive for another request: until its first
        byte, the connection counts as one that has sent nothing (dropped to make room at the cap,
        the longest waiting first), and the watchdog closes it after the idle timeout. False when
        the server is stopping (the connection is closed)."""
        with self._lock:
            if self._closing.is_set():
                return False
            self._deadlines[request] = time.monotonic() + self._idle_s
            self._spoke.discard(request)
            return True

    def reading(self, request: Any) -> None:
        """The request's body is being read: until request_started says it is in, the
        connection counts again as one whose request has not come whole (the header deadline
        from now, and it may be dropped to make room at the cap)."""
        with self._lock:
            self._deadlines[request] = time.monotonic() + self._header_s
            self._spoke.add(request)

    def request_started(self, request: Any) -> bool:
        """The request line and headers are in: the header deadline no longer applies.
        False if the connection was dropped to make room just before (_evict): it is not
        answered."""
        with self._lock:
            self._deadlines.pop(request, None)
            self._spoke.discard(request)
            return request not in self._evicted

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        with self._lock:
            self._deadlines.pop(request, None)
            self._spoke.discard(request)
            early = request in self._freed
            self._freed.discard(request)
            if request in self._evicted:
                self._evicted.discard(request)
            else:
                self._freed_at = time.monotonic()
        if not early:
            self._slots.release()

    def free(self, request: Any) -> None:
        """Close a connection whose thread goes on (a request's handler still runs on it) and
        free its slot now, once (shutdown_request then frees none): a client that comes back
        (a resume) does not wait for that thread's end."""
        with self._lock:
            if request in self._freed:
                return
            self._freed.add(request)
        with contextlib.suppress(OSError):
            request.shutdown(_shut_rdwr())
        self._slots.release()

    def _evict(self) -> None:
        """Drop the connection that has waited longest without sending a byte (its handler
        has seen none, and none waits unread); if none is silent, the one whose handler has
        been reading its request longest (a byte a minute holds a slot as well as silence
        does; one whose bytes wait for a handler yet to run is not dropped). Not
        while one dropped before still holds its slot. Its request had not come whole, so
        nothing was asked on it: nothing is lost but the connection, and a download under
        way (its request in) is never dropped."""
        with self._lock:
            if self._evicted:
                return
            waiting = list(self._deadlines)  # (oldest first)
            idle = [r for r in waiting if r not in self._spoke]
            # (its handler reads it: not a whole request whose handler has yet to run)
            trickling = [r for r in waiting if r in self._spoke]
        victim = next((r for r in idle if self._silent(r)), trickling[0] if trickling else None)
        if victim is None:
            return
        with self._lock:
            if victim not in self._deadlines:
                return  # (its request came whole meanwhile)
            del self._deadlines[victim]
            self._evicted.add(victim)
        with contextlib.suppress(OSError):  # its handler's wait ends; the slot is freed
            victim.shutdown(_shut_rdwr())

    @staticmethod
    def _silent(request: Any) -> bool:
        """No byte waits unread on the connection (a look that does not wait or read:
        the handler thread may not have run yet)."""
        import selectors  # lazy: see Imports

        sel = selectors.DefaultSelector()  # (not select(): no FD_SETSIZE limit)
        try:
            sel.register(request, selectors.EVENT_READ)
            return not sel.select(0)
        except (OSError, ValueError):
            return False
        finally:
            sel.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a reader that hangs up mid-download, a stalled one timed out: no traceback on stderr
        _log.debug("http: connection from %s ended: %s", client_address, sys.exc_info()[1])

    def _watch(self) -> None:
        while not self._stopped.wait(0.25):  # a deadline is met within a quarter of a second
            now = time.monotonic()
            with self._lock:
                late = [r for r, t in self._deadlines.items() if t <= now]
                for r in late:
                    del self._deadlines[r]
            for r in late:  # the handler's blocked read returns; its thread ends
                with contextlib.suppress(OSError):
                    r.shutdown(_shut_rdwr())


def _bounded_server_class(base: Any, limits: Tuple[float, float, int]) -> Any:
    """_BoundedServerMixin over `base` (ThreadingHTTPServer, imported lazily) with the header
    deadline, the idle timeout of a connection kept alive and the connection cap of `limits`
    (header_s, idle_s, max_conn)."""
    header_s, idle_s, max_conn = limits
    return type("BoundedServer", (_BoundedServerMixin, base), {
        "_header_s": header_s, "_idle_s": idle_s, "_max_conn": max_conn})


# -- server side: the request reader
# HTTP/1.1 (RFC 9112) with connections kept alive between requests, each request read by a lean
# parser: http.server's reads headers with the email package, most of a small request's cost.

_HEAD_LINE_MAX = 65536  # bytes of the request line or of one header line (as http.server)
_HEADERS_MAX = 100  # header lines of one request (as http.client)
_HEADER_NAME_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a token (RFC 9110 section 5.1)


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DATE_NOW: List[Tuple[int, str]] = [(0, "")]  # the Date header of the current second


def _http_date() -> str:
    """The Date header's value now (RFC 9110 section 5.6.7; English names whatever the locale),
    made once a second."""
    now = int(time.time())
    second, text = _DATE_NOW[0]
    if second != now:
        t = time.gmtime(now)
        text = (f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
                f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")
        _DATE_NOW[0] = (now, text)
    return text


class _Headers(dict):
    """A request's headers by lowercased name, looked up in any case (get, [], in), each name's
    first value (as http.client's HTTPMessage.get gives it)."""

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name: str) -> Any:
        return dict.__getitem__(self, name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and dict.__contains__(self, name.lower())


def _read_head(rfile: Any) -> Tuple[Optional[_Headers], int, str]:
    """A request's header lines from `rfile`, up to the empty line: (headers, 0, ""), or (None,
    status, why): 431 for a line over _HEAD_LINE_MAX bytes or over _HEADERS_MAX lines, 400 for a
    line that is no header (a folded one too: RFC 9112 section 5.2), a request cut short, or two
    Content-Lengths that differ (the body's end would be ambiguous: RFC 9112 section 6.3). A
    value is trimmed of spaces and tabs only, and one holding a CR or a NUL is refused (RFC 9110
    section 5.5): a proxy in front may read "Content-Length: \\x0b5" or a bare CR otherwise."""
    headers = _Headers()
    for _ in range(_HEADERS_MAX + 1):
        line = rfile.readline(_HEAD_LINE_MAX + 1)
        if len(line) > _HEAD_LINE_MAX:
            return None, 431, "a header line is too long"
        if line in (b"\r\n", b"\n"):
            return headers, 0, ""
        name, colon, value = line.decode("latin-1").partition(":")
        value = value[:-2] if value.endswith("\r\n") else value.rstrip("\n")
        if not colon or not _HEADER_NAME_RE.fullmatch(name) or "\r" in value or "\0" in value:
            return None, 400, "a header line is malformed (or the request was cut short)"
        name, value = name.lower(), value.strip(" \t")
        if name == "content-length" and headers.get(name, value) != value:
            return None, 400, "two Content-Length headers differ"
        headers.setdefault(name, value)
    return None, 431, f"more than {_HEADERS_MAX} header lines"


class _PageMixin:
    """The request loop of _serve_http's handler, before http.server's BaseHTTPRequestHandler
    (imported lazily) in its bases: HTTP/1.1, the connection kept alive for the client's next
    request unless it asks `Connection: close` (or speaks HTTP/1.0), a body was left unread, or
    an answer has no length (an SSE stream ends with its connection); between requests the
    server's bounds hold (_BoundedServerMixin.kept). Headers by _read_head."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # (an answer's head and body may be two writes)
    body_read = False  # the request's body was taken (_HttpExchange.body)
    # http.server's, at run time (declared for the type checker)
    server: Any
    connection: Any
    rfile: Any
    wfile: Any
    raw_requestline: bytes
    handle_one_request: Any
    send_error: Any

    def handle(self) -> None:
        server, conn = self.server, self.connection
        again = False
        while True:
            # the first byte, waited for (buffered, not taken): from then on the connection
            # has sent something, and is dropped to make room for another only when none is
            # silent
            try:
                if not self.rfile.peek(1):
                    return
            except (OSError, ValueError):
                return
            server.spoke(conn, again)
            self.close_connection = True
            self.handle_one_request()
            if self.close_connection or self.body_unread() or not server.kept(conn):
                return
            again = True

    def body_unread(self) -> bool:
        """The request declared a body that was not read: what follows on the connection is
        not a request."""
        headers = getattr(self, "headers", None) or {}
        return not self.body_read and ("transfer-encoding" in headers
                                       or (headers.get("content-length") or "0") != "0")

    def parse_request(self) -> bool:
        """The request line (already read) and the headers (_read_head); False once refused
        (400, 431, 505: the connection closes)."""
        self.command, self.body_read, self.close_connection = None, False, True
        self.requestline = self.raw_requestline.decode("latin-1").rstrip("\r\n")
        words = self.requestline.split()
        self.request_version = words[2] if len(words) == 3 else "HTTP/1.0"
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            self.send_error(400, "Bad request line")
            return False
        if self.request_version not in ("HTTP/1.0", "HTTP/1.1"):
            self.request_version = "HTTP/1.0"
            self.send_error(505, "HTTP/1.0 and HTTP/1.1 only")
            return False
        self.command, self.path = words[0], words[1]
        headers, status, why = _read_head(self.rfile)
        if headers is None:
            self.send_error(status, why)
            return False
        self.headers = headers
        # (a chunked body is not read: its connection cannot be used again either)
        tokens = [t.strip() for t in headers.get("connection", "").lower().split(",")]
        self.close_connection = (self.request_version == "HTTP/1.0" or "close" in tokens
                                 or "transfer-encoding" in headers)
        return True


# (status, content type, body): body is bytes, or a function that opens what to stream and gives
# (binary file, size)
_HttpAnswer = Tuple[int, str, Any]


class _HttpExchange:
    """One request to a server of _serve_http given an `exchange` handler: its method, path,
    query and headers (case-insensitive), its body read within a bound (body), and one answer:
    whole (reply), or a stream of Server-Sent Events (stream, then event) for as long as the
    handler keeps writing. Each read and write is bounded by the server's idle timeout. The
    connection is kept alive for the next request after a whole answer (_PageMixin), unless the
    body could not be taken or the answer streamed (answered says whether one went out)."""

    def __init__(self, page: Any) -> None:
        self._page = page
        self.method = page.command
        target = page.requestline.split()[1] if " " in page.requestline else "/"
        self.path, _, self.query = target.partition("?")
        self.headers = page.headers  # (_Headers: get() ignores case)
        self.streaming = self.answered = False

    def body(self, limit: int) -> Tuple[Optional[bytes], Optional[Tuple[int, str]]]:
        """(the body, None), or (None, (status, why)) when it cannot be taken: no
        Content-Length (411; chunked bodies are not read), over `limit` bytes (413, unread: the
        connection closes after the answer), or cut short (400)."""
        length = self.headers.get("Content-Length") or ""  # (trimmed of SP and HTAB only)
        # (not isdigit(): "\xb2" is a digit to it, not to int())
        page = self._page
        page.body_read = True  # (taken, or refused: then the connection closes after the answer)
        if not re.fullmatch(r"[0-9]{1,15}", length) or "Transfer-Encoding" in self.headers:
            page.close_connection = True
            return None, (411, "the request needs a Content-Length header (a body that is not "
                               "chunked)")
        if int(length) > limit:
            page.close_connection = True
            return None, (413, f"the body is {int(length):,} bytes; this server takes at most "
                               f"{limit:,} (serve.max_body_mb in Abstract's settings)")
        if (self.headers.get("Expect") or "").lower() == "100-continue" and length != "0":
            page.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # (RFC 9110 section 10.1.1)
        # the body is part of the request: it must come whole within the header deadline, and
        # until it has, the connection may be dropped to make room (_BoundedServerMixin)
        server, conn = page.server, page.connection
        server.reading(conn)
        try:
            data = page.rfile.read(int(length))
        finally:
            whole = server.request_started(conn)
        if len(data) != int(length) or not whole:
            page.close_connection = True
            return None, (400, "the body ended before its Content-Length (or did not come "
                               "within http_header_timeout_seconds)")
        return data, None

    def reply(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        """The whole answer at once: head and body in one write (a small one: one packet)."""
        page = self._page
        page.close_connection = page.close_connection or page.body_unread()
        page.log_request(status, len(body))
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        close = "Connection: close\r\n" if page.close_connection else ""
        head = (f"{page.protocol_version} {status} {page.responses.get(status, ('',))[0]}\r\n"
                f"Server: {page.version_string()}\r\nDate: {_http_date()}\r\n{head}"
                f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
                f"X-Content-Type-Options: nosniff\r\n{close}\r\n").encode("latin-1")
        if len(body) <= 1 << 16:
            page.wfile.write(head + body)
        else:  # (not copied whole again)
            page.wfile.write(head)
            page.wfile.write(body)
        self.answered = True

    def stream(self, headers: Dict[str, str], retry_ms: int = 0) -> None:
        """Begin a text/event-stream answer (200, no length: it ends when the connection
        closes, which is never used for another request); `retry_ms`: the SSE retry field
        first (how long a client that lost the stream waits before resuming it)."""
        page = self._page
        page.close_connection = True
        page.send_response(200)
        # (X-Accel-Buffering: reverse proxies such as nginx pass each event on at once)
        for k, v in dict(headers, **{"Content-Type": "text/event-stream",
                                     "Cache-Control": "no-store",
                                     "X-Accel-Buffering": "no"}).items():
            page.send_header(k, v)
        page.send_header("X-Content-Type-Options", "nosniff")
        page.send_header("Connection", "close")
        page.end_headers()
        if retry_ms:
            page.wfile.write(f"retry: {retry_ms}\n\n".encode())
        page.wfile.flush()
        self.streaming = self.answered = True

    def event(self, data: bytes, event_id: str = "", kind: str = "") -> bool:
        """One SSE event (`data` holds no newline: compact JSON; `kind` its type when not
        "message"), or a comment line (keep-alive) when `data` is empty; False when the client
        is gone."""
        frame = (b": keep-alive\n\n" if not data else
                 (f"id: {event_id}\n".encode() if event_id else b"")
                 + (f"event: {kind}\n".encode() if kind else b"") + b"data: " + data + b"\n\n")
        try:
            self._page.wfile.write(frame)
            self._page.wfile.flush()
            return True
        except (OSError, ValueError):
            return False

    def release(self) -> None:
        """The answer is over (streamed, or its client went away) while the request's thread
        goes on: the connection is closed and its slot freed now (_BoundedServerMixin.free)."""
        self._page.close_connection = True
        self._page.server.free(self._page.connection)

    def gone(self) -> bool:
        """Whether the client closed its end (a look that neither waits nor reads: a request
        has no more bytes after its body, so a readable socket means EOF or a reset)."""
        import socket  # lazy: see Imports

        sock = self._page.connection
        if _BoundedServerMixin._silent(sock):
            return False
        try:
            return sock.recv(1, socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)) == b""
        except BlockingIOError:
            return False
        except ValueError:  # TLS: no peeking; a write (the keep-alive) finds the end instead
            return False
        except OSError:
            return True


def _serve_http(host: str, port: int, respond: Callable[[str], _HttpAnswer], name: str,
                limits: Tuple[float, float, int] = (10.0, 30.0, 64),
                exchange: Optional[Callable[[_HttpExchange], None]] = None,
                ssl_context: Any = None) -> Tuple[Any, Callable[[], None]]:
    """Serve GET `respond(target)` on a daemon thread `name`, bounded (_BoundedServerMixin):
    `limits` are the seconds to send the request, the seconds any read or write may stall, and
    the connections at once. Other methods get 405 (HEAD, OPTIONS: http.server's 501). Request
    targets are never logged with their query (a login's code, a link's signature). With
    `exchange`, GET, POST and DELETE all go to it instead (an _HttpExchange: bodies, streamed
    answers). `ssl_context` wraps each connection (TLS). Returns (server, stop); stop closes the
    listener and ends its thread (an answer under way ends on its own, bounded by `limits`)."""
    import http.server  # lazy: see Imports
    import socket  # lazy: see Imports

    class Page(_PageMixin, http.server.BaseHTTPRequestHandler):
        server_version = f"abstract/{__version__}"
        timeout = limits[1]  # every recv and send on the connection (StreamRequestHandler.setup)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if not self.server.request_started(self.connection):  # type: ignore[attr-defined]
                self.close_connection = True
                return
            if exchange is not None:
                self._exchange()
                return
            # The target as sent: http.server folds a leading "//" into "/" (3.11+, some 3.9/3.10
            # patch releases), and the answer must not depend on the Python version.
            _answer(self, *respond(self.requestline.split()[1]))

        def do_POST(self) -> None:  # noqa: N802
            if exchange is None:
                self.send_error(405)
            elif self.server.request_started(self.connection):  # type: ignore[attr-defined]
                self._exchange()
            else:
                self.close_connection = True

        def _exchange(self) -> None:
            ex = _HttpExchange(self)
            exchange(ex)  # type: ignore[misc]
            if not ex.answered:  # (the client went away, or stalled: nothing more is read)
                self.close_connection = True

        do_DELETE = do_POST

        def do_PUT(self) -> None:  # noqa: N802
            self.send_error(405)

        do_PATCH = do_PUT

        def log_request(self, code: Any = "-", size: Any = "-") -> None:
            target = self.requestline.split()[1] if " " in self.requestline else "?"
            _log.debug("http: %s %s %s", self.command, target.partition("?")[0], code)

        def log_message(self, fmt: str, *args: Any) -> None:
            _log.debug("http: " + fmt, *args)

    if exchange is not None:  # (without: http.server's 501, as for HEAD)
        Page.do_OPTIONS = Page.do_POST  # type: ignore[attr-defined]

    class Bounded(_bounded_server_class(http.server.ThreadingHTTPServer, limits)):  # type: ignore
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET  # [::1]:PORT too

    httpd = Bounded((host, port), Page)
    if ssl_context is not None:
        # the handshake on the handler's first read, not in the accept loop (bounded there by
        # the header deadline: a client that stalls it holds one slot, not the server)
        httpd.socket = ssl_context.wrap_socket(httpd.socket, server_side=True,
                                               do_handshake_on_connect=False)
    thread = threading.Thread(target=httpd.serve_forever, name=name, daemon=True)
    thread.start()

    def stop() -> None:
        httpd.shutdown()
        httpd.server_close()
        thread.join(_STOP_JOIN_S)

    return httpd, stop


def _answer(page: Any, status: int, ctype: str, body: Any) -> None:
    """Write one answer of _serve_http: bytes at once, or streamed from the file `body()`
    opens (a slow reader holds 64 KiB, not the whole of it)."""
    try:
        f, size = (None, len(body)) if isinstance(body, bytes) else body()
    except OSError:  # gone between the check and the open (a swept cache file)
        status, ctype = 404, "text/plain; charset=utf-8"
        body = b"not found (expired or evicted)\n"
        f, size = None, len(body)
    with f if f is not None else contextlib.nullcontext():
        page.send_response(status)
        page.send_header("Content-Type", ctype)
        page.send_header("Content-Length", str(size))
        page.send_header("Cache-Control", "private, no-store")
        page.send_header("X-Content-Type-Options", "nosniff")
        page.end_headers()
        if f is None:
            page.wfile.write(body)
        else:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                page.wfile.write(chunk)


# -- the MCP transport of a remote upstream session
# One remote upstream session's wire, shaped as the Connection's input and output.

_HTTP_POSTS_MAX = 32  # requests of one remote upstream in flight at once (more wait their turn)

_HTTP_WAITING_MAX = 64  # requests waiting for one of those; more are refused, unsent

_HTTP_NOTIFY_S = 30.0  # read deadline of a notification's or response's POST (answered by 202)

_HTTP_LISTEN_S = 300.0  # a quiet GET stream is reopened after this long

_SSE_RESUMES = 5  # reconnections (Last-Event-ID) of one answer's stream without a new event

_SSE_RETRY_MS = 1000  # wait before resuming when the server set no retry (spec: SHOULD set one)

_SSE_RETRY_MAX_MS = 60000

_LISTEN_MIN_MS = 500  # the server's GET stream is reopened no sooner than this

_MCP_NAME_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def _header_value(value: str) -> str:
    """A value for an Mcp-Name header: as it is when plain visible ASCII, else the 2026-07-28
    base64 sentinel form (=?base64?...?=)."""
    if value and value == value.strip() and all(" " <= c <= "~" for c in value):
        return value

    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


class _HttpTransport:
    """The wire of one remote upstream session, in the shape the Connection expects: it is the
    Connection's output (write: each message becomes a POST) and its input (readline ends, EOF,
    when the session does), and delivers what the server sends straight to the Connection.

    Streamable HTTP (https://modelcontextprotocol.io/specification/2025-11-25/basic/transports):
    a request's answer is a JSON body or an SSE stream read incrementally (a cut stream resumed
    with Last-Event-ID after the server's `retry`); Mcp-Session-Id kept and sent; the
    MCP-Protocol-Version header after initialize (2026-07-28: on every POST with Mcp-Method and
    Mcp-Name); the GET stream for the server's own messages; DELETE of the session at the end.
    HTTP+SSE (2024-11-05): GET the event stream, POST to its `endpoint`, answers on the stream.
    "auto" tries Streamable HTTP and falls back to HTTP+SSE on 400/404/405 to the first POST
    (the spec's backwards-compatibility rule). Notifications and responses are POSTed in order
    on the Connection's writer thread; requests on threads of their own, at most _HTTP_POSTS_MAX
    at once: more wait in a bounded queue that a finished request's thread drains, so the writer
    never waits for a request to end (a cancel, or the answer to the server's own request, would
    wait behind it). Nothing the server may have run is sent twice: a call whose answer is lost
    fails, naming the reason. Only a request the server did not process because it no longer
    knows the session (HTTP 404) fails as _SessionGone, which _Upstream._anew sends again, once,
    in a new session; one that never reached the server fails as _NotReached.
    """

    def __init__(self, spec: _ServerSpec, environ: Dict[str, str], read_timeout: float,
                 max_message: int, auth: Any = None) -> None:
        self.name, self.url, self.mode = spec.name, spec.url, spec.transport
        self.post_url = spec.url
        self._static = dict(spec.headers)
        self._environ, self.auth = environ, auth
        self._read_s, self.max_message = read_timeout, max_message
        self.session_id = ""
        self.version = ""  # the negotiated version, for MCP-Protocol-Version
        self._init_id: Any = None
        self._first = True  # no POST has been answered yet (auto: the fallback decision)
        self._conn: Optional[Connection] = None
        self._closed = threading.Event()
        self.reason = "ended its session"
        self.forgotten = False  # the server ended the session (HTTP 404): no crash of its own
        # id (or "listen", "events") -> what ends the exchange under way (its answer being read)
        self._open: Dict[Any, Callable[[], None]] = {}
        self._live: set = set()  # ids of the requests being sent or answered (on a thread)
        self._cancelled: set = set()  # those of them cancelled (so at most _HTTP_POSTS_MAX)
        self._olock = threading.Lock()
        self._pool = _HttpPool()  # connections kept alive between requests, closed at the end
        self._running = 0  # request threads (at most _HTTP_POSTS_MAX)
        self._waiting: "collections.deque[Tuple[dict, bytes]]" = collections.deque()
        self._fallback_lock = threading.Lock()
        self.delete_thread: Optional[threading.Thread] = None

    def where(self) -> str:
        return _safe_url(self.url)

    # -- the Connection's side
    def attach(self, conn: Connection) -> None:
        self._conn = conn

    def readline(self, limit: int = -1) -> bytes:
        """The Connection's input: nothing arrives here (answers are delivered); EOF when the
        session ends, so the Connection fails what is pending with `reason`."""
        self._closed.wait()
        return b""

    def flush(self) -> None:
        pass

    def writelines(self, parts: List[Any]) -> None:
        """One framed message given in parts (a large one: Connection._write)."""
        self.write(b"".join(parts))

    def write(self, data: bytes) -> int:
        """One framed message from the Connection's writer thread."""
        if self._closed.is_set():
            raise OSError(self.reason)
        msg = json.loads(data)
        method = msg.get("method")
        if method == "notifications/cancelled":
            rid = (msg.get("params") or {}).get("requestId")
            with self._olock:
                unsent = [w for w in self._waiting if w[0]["id"] == rid]
                for w in unsent:  # never sent: the server need not hear of it
                    self._waiting.remove(w)
                if rid in self._live:  # (a cancel after the answer leaves nothing behind)
                    self._cancelled.add(rid)
                stop = self._open.pop(rid, None)
            if stop is not None:  # stop reading an answer nobody waits for (or waiting for it)
                stop()
            if self.modern or unsent:  # 2026-07-28: closing the stream is the cancellation
                return len(data)
        if method is not None and "id" in msg:
            if method == "initialize":
                self._init_id = msg["id"]
            self._start_request(msg, data)
        else:
            self._post_one_way(msg, data)
        return len(data)

    def _start_request(self, msg: dict, data: bytes) -> None:
        """A request on a thread of its own, or queued for the next free one; refused, unsent,
        when _HTTP_WAITING_MAX already wait. It never blocks: it runs on the writer thread."""
        with self._olock:
            if self._running < _HTTP_POSTS_MAX:
                self._running += 1
                self._live.add(msg["id"])
                start = True
            elif len(self._waiting) < _HTTP_WAITING_MAX:
                self._waiting.append((msg, data))
                return
            else:
                start = False
        if start:
            threading.Thread(target=self._requests, args=(msg, data), name=f"http-{self.name}",
                             daemon=True).start()
            return
        self._fail(msg["id"], f"server '{self.name}' already has {_HTTP_POSTS_MAX} requests "
                              f"running and {_HTTP_WAITING_MAX} more waiting, so this one was not "
                              f"sent; try again when some have finished", _NotSent)

    def _requests(self, msg: dict, data: bytes) -> None:
        """Run a request, then those waiting for a thread, until none waits."""
        while True:
            self._request(msg, data)
            with self._olock:
                if not self._waiting or self._closed.is_set():
                    self._running -= 1
                    return
                msg, data = self._waiting.popleft()
                self._live.add(msg["id"])

    @property
    def modern(self) -> bool:
        return self.version in _MODERN_VERSIONS

    # -- sending
    def _send(self, method: str, url: str, body: Optional[bytes], extra: Dict[str, str],
              read_timeout: Optional[float] = None, mid: Any = None) -> _HttpResponse:
        """One request of the session; with `mid`, a cancel of that request aborts it even
        before its answer begins (a server that never answers keeps no thread)."""
        hdrs = dict(self._static)
        hdrs.update(extra)
        if self.session_id and not self.modern:
            hdrs["Mcp-Session-Id"] = self.session_id
        try:
            return _http_request(method, url, hdrs, body, auth=self.auth, environ=self._environ,
                                 read_timeout=read_timeout or self._read_s, pool=self._pool,
                                 watch=None if mid is None else lambda stop: self._watch(mid, stop))
        except _AuthError as e:  # of its own kind still: whether a login is needed matters
            raise _AuthError(_clean(str(e)), e.refused, e.login) from None
        except _HttpError as e:
            raise _HttpError(_clean(str(e)), e.url, e.status, unsent=e.unsent) from None

    def _post_headers(self, msg: dict) -> Dict[str, str]:
        hdrs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        version = meta.get(_META_VERSION) or self.version
        if isinstance(version, str) and version and self.mode != "sse":
            hdrs["MCP-Protocol-Version"] = version
        if version in _MODERN_VERSIONS and isinstance(msg.get("method"), str):
            hdrs["Mcp-Method"] = msg["method"]  # 2026-07-28: the request metadata headers
            key = _MCP_NAME_METHODS.get(msg["method"])
            if key and isinstance(params.get(key), str):
                hdrs["Mcp-Name"] = _header_value(params[key])
        return hdrs

    def _get_headers(self, last_id: str = "") -> Dict[str, str]:
        """A GET for an SSE stream: the server's own, or an answer's resumed after `last_id`;
        MCP-Protocol-Version on it too, as on every request after initialize."""
        hdrs = {"Accept": "text/event-stream"}
        if self.version:
            hdrs["MCP-Protocol-Version"] = self.version
        if last_id:
            hdrs["Last-Event-ID"] = last_id
        return hdrs

    def _post_one_way(self, msg: dict, data: bytes) -> None:
        """A notification or a response: POSTed in order, answered with 202."""
        try:
            with self._send("POST", self.post_url, data.rstrip(b"\n"), self._post_headers(msg),
                            _HTTP_NOTIFY_S) as resp:
                if resp.status == 404 and self.session_id:
                    self.forgotten = True
                    self._end("ended its session (HTTP 404); a new one starts on the next call")
                elif resp.status >= 300:
                    what = msg.get("method") or "a response"
                    refused = resp.error(f"server '{self.name}' refused {what}")
                    _log.warning("%s", _clean(str(refused)))
        except _HttpError as e:
            _log.warning("%s", e)
            return
        if msg.get("method") == "notifications/initialized" and self.mode == "http":
            threading.Thread(target=self._listen, name=f"http-listen-{self.name}",
                             daemon=True).start()

    def _request(self, msg: dict, data: bytes) -> None:
        mid = msg["id"]
        try:
            self._exchange(msg, data.rstrip(b"\n"), mid)
        except _AuthError as e:  # its text names the server too (for --login): once is enough
            text = str(e)
            text = text[len(self.name) + 2:] if text.startswith(f"{self.name}: ") else text
            self._fail(mid, f"server '{self.name}': {text}", _LoginNeeded if e.login else None)
        except _HttpError as e:
            if e.unsent:  # (a kept-alive connection the server had closed is replaced, in
                # _http_once: this is a server that does not take connections now)
                self._fail(mid, f"server '{self.name}': {e}. The request never reached the "
                                f"server, so nothing ran; call again once it is up", _NotReached)
            else:
                self._fail(mid, f"server '{self.name}': {e}")
        except Exception as e:  # a bug must fail the call, not leave it to its deadline
            _log.error("%s: HTTP request failed:\n%s", self.name, traceback.format_exc())
            self._fail(mid, f"server '{self.name}': {type(e).__name__}: {e}")
        finally:
            with self._olock:
                self._open.pop(mid, None)
                self._live.discard(mid)
                self._cancelled.discard(mid)

    def _exchange(self, msg: dict, body: bytes, mid: Any) -> None:
        with self._olock:  # cancelled before it was sent (its caller has its answer): never sent
            if mid in self._cancelled:
                return
        # (a subscription's stream may be quiet for long: reopened after _HTTP_LISTEN_S)
        resp = self._send("POST", self.post_url, body, self._post_headers(msg),
                          _HTTP_LISTEN_S if msg.get("method") == "subscriptions/listen" else None,
                          mid)
        first, self._first = self._first, False
        with resp:
            if not self._track(mid, resp):
                return
            if msg.get("method") == "initialize" and resp.header("Mcp-Session-Id"):
                self.session_id = resp.header("Mcp-Session-Id")
            if msg.get("method") == "server/discover":
                return self._probe_answer(resp, first, mid)
            if resp.status in (400, 404, 405) and first and self.mode == "auto":
                raw = self._small_body(resp)
                if self._rpc_error(raw) is None:  # not an MCP server's JSON-RPC error: try HTTP+SSE
                    resp.close()
                    self._fall_back(resp.status)
                    return self._exchange(msg, body, mid)
                return self._refused(resp, raw, mid)
            if (resp.status in (400, 404) and self.session_id and not self.modern
                    and msg.get("method") != "initialize"):  # (sent with the session id)
                raw = self._small_body(resp)
                if self._session_unknown(resp.status, raw, mid):
                    return self._forget_session(resp, raw, mid)
                return self._refused(resp, raw, mid)
            if resp.status >= 300:
                return self._refused(resp, self._small_body(resp), mid)
            if self.mode == "sse":  # HTTP+SSE: the answer comes on the event stream
                return
            if resp.content_type == "text/event-stream":
                return self._read_stream(resp, mid)
            if resp.content_type == "application/json":
                return self._deliver_bytes(resp.read(self.max_message), mid)
            self._fail(mid, f"server '{self.name}' answered with HTTP {resp.status} and "
                            f"Content-Type {resp.content_type or '(none)'!r} from {self.where()}, "
                            f"not JSON or an SSE stream")

    def _probe_answer(self, resp: _HttpResponse, first: bool, mid: Any) -> None:
        """The answer to the server/discover probe (2026-07-28 spec, basic/versioning#backward-
        compatibility-with-initialization-based-versions): its result, or a JSON-RPC error, is
        the server's own (-32022 names the versions it speaks); anything else (a 4xx or 5xx
        without a JSON-RPC error, a body that is not the answer, another Content-Type) marks a
        handshake-era server, and initialize follows (and after it, for an entry without a
        type, HTTP+SSE, as for a first POST). No connection, no answer in time or a login
        needed is no answer: raised, it fails the probe."""
        if resp.status < 300 and resp.content_type == "text/event-stream":
            return self._read_stream(resp, mid)
        raw = b""
        if resp.status >= 300:
            raw = self._small_body(resp)
        elif resp.content_type == "application/json":
            raw = resp.read(self.max_message)
        answer = self._json(raw)
        if (resp.status < 300 and isinstance(answer, dict) and answer.get("id") == mid
                and ("result" in answer or "error" in answer)):
            self._deliver_bytes(raw, mid)
        elif self._rpc_error(raw) is not None or self._conn is None:
            self._refused(resp, raw, mid)
        else:
            self._first = first
            ctype = resp.content_type or "no Content-Type"
            self._conn.forget(mid, RpcError(_INVALID_REQUEST, f"HTTP {resp.status} {resp.reason} "
                                            f"({ctype}) to server/discover"))

    @classmethod
    def _session_unknown(cls, status: int, raw: bytes, mid: Any) -> bool:
        """Whether an HTTP 400 or 404 to a request that carried Mcp-Session-Id says the server
        does not know the session (so the request was not processed and may be sent again), not
        that the request ran and failed. A 404 is the spec's answer, unless its body is the
        server's JSON-RPC answer to this very request (its id, not about the session id: a
        server that maps its tools' errors to statuses). A 400 is one only when its JSON-RPC
        error is a transport's code naming the session id (server-everything, and the servers
        built on the TypeScript SDK's example, answer an unknown session id with 400 -32000 "Bad
        Request: No valid session ID provided"), or its body, not JSON, names it. A tool's
        error that mentions a session of its own ("session_id 'x' is not open", "database
        session expired") is none: the call ran."""
        doc = cls._json(raw)
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(doc, dict) and "result" in doc:
            return False  # (an answer: the request ran)
        names = (isinstance(err, dict) and err.get("code") in _SESSION_ERROR_CODES
                 and _SESSION_ID_RE.search(str(err.get("message", ""))) is not None)
        if doc is None:  # not JSON, so no tool's answer: older releases of the Python SDK
            # answered 400 "Bad Request: No valid session ID provided" in plain text
            names = _SESSION_ID_RE.search(raw[:1000].decode("utf-8", "replace")) is not None
        if status == 404:
            return names or not isinstance(err, dict) or doc.get("id") != mid
        return names

    def _forget_session(self, resp: _HttpResponse, raw: bytes, mid: Any) -> None:
        """The server no longer knows the session the request named: the session is gone and
        the request was not processed (the spec's HTTP 404, basic/transports#session-management).
        The request fails with _SessionGone, which _Upstream._anew sends again in a new session;
        the run is no longer handed out from the moment `forgotten` is set. It fails before the
        session ends: the EOF that follows would fail it as a request that may have run."""
        self.forgotten = True
        said = ""
        if resp.status != 404:
            err = self._rpc_error(raw) or {"error": {}}
            said = f": {_clean(str(err['error'].get('message', ''))[:200])}"
        gone = (f"server '{self.name}' ended its session (HTTP {resp.status} from "
                f"{self.where()}{said})")
        with self._olock:  # those waiting for their turn were never sent: sent anew too
            unsent, self._waiting = list(self._waiting), collections.deque()
        for msg, _ in unsent:
            self._fail(msg["id"], f"{gone} before the request was sent", _SessionGone)
        self._fail(mid, f"{gone} without running the request", _SessionGone)
        self._end(f"ended its session (HTTP {resp.status}); a new one starts on the next call")

    def _watch(self, mid: Any, stop: Callable[[], None]) -> None:
        """Register how to abort a request whose answer is awaited (its connection is open), so
        a cancel ends it at once; aborted at once if already cancelled."""
        with self._olock:
            gone = mid in self._cancelled or self._closed.is_set()
            if not gone:
                self._open[mid] = stop
        if gone:
            stop()

    def _track(self, mid: Any, resp: _HttpResponse) -> bool:
        """Register an answer being read, so a cancel can close it; False if already cancelled."""
        with self._olock:
            if mid in self._cancelled or self._closed.is_set():
                resp.close()
                return False
            self._open[mid] = resp.close
        return True

    @staticmethod
    def _small_body(resp: _HttpResponse) -> bytes:
        try:
            return resp.read(1 << 16)
        except _HttpError:
            return b""

    @staticmethod
    def _json(raw: bytes) -> Any:
        """`raw` parsed, or None if it is not JSON."""
        try:
            return json.loads(raw, parse_constant=_no_nan)
        except (ValueError, RecursionError):
            return None

    @classmethod
    def _rpc_error(cls, raw: bytes) -> Optional[dict]:
        doc = cls._json(raw)
        return doc if isinstance(doc, dict) and isinstance(doc.get("error"), dict) else None

    def _refused(self, resp: _HttpResponse, raw: bytes, mid: Any) -> None:
        """An error status: the server's JSON-RPC error when the body is one (so a refused
        initialize can fall back to another era), else the status in words."""
        err = self._rpc_error(raw)
        if err is not None and self._conn is not None:
            e = RpcError.from_dict(err["error"])
            self._conn.forget(mid, RpcError(e.code, _clean(e.message),
                                            _SECRETS.mask_json(e.data)))
            return
        line = next((ln.strip() for ln in raw.decode("utf-8", "replace").splitlines()
                     if ln.strip()), "")
        hint = ""
        if resp.status in (401, 403) and self.auth is None:
            hint = "; the server wants credentials: give them in the entry's \"headers\""
        self._fail(mid, f"server '{self.name}': HTTP {resp.status} {resp.reason} from "
                        f"{self.where()}"
                        + (f": {_clean(line[:200])}" if line else "") + hint)

    # -- receiving
    def _fail(self, mid: Any, message: str, kind: Optional[type] = None) -> None:
        if self._conn is not None:
            self._conn.forget(mid, (kind or UpstreamError)(_clean(message)))

    def _deliver_bytes(self, raw: bytes, mid: Any) -> bool:
        """One JSON-RPC message from the server; True if it is the answer to `mid`."""
        if not raw.strip():
            return False
        try:
            msg = (self._conn.loads(raw) if self._conn is not None
                   else json.loads(raw, parse_constant=_no_nan))
        except (ValueError, RecursionError) as e:
            if mid is not None:
                self._fail(mid, f"server '{self.name}' sent an answer that is not JSON "
                                f"({str(e)[:100]})")
                return True
            _log.warning("%s: skipped a message that is not JSON: %s", self.name, raw[:200])
            return False
        answer = isinstance(msg, dict) and "method" not in msg and "id" in msg
        if answer and msg["id"] == self._init_id and isinstance(msg.get("result"), dict):
            version = msg["result"].get("protocolVersion")
            self.version = version if isinstance(version, str) else ""
        if isinstance(msg, dict) and msg.get("id") == mid and mid is not None and answer:
            self._first = False
        if self._conn is not None:
            self._conn.deliver(msg)
        return answer and mid is not None and msg.get("id") == mid

    def _deliver_events(self, resp: _HttpResponse, parser: _SseParser, mid: Any) -> bool:
        """Deliver a stream's messages until it ends; True once the answer to `mid` came."""
        answered = False
        for ev in resp.events(parser):
            if ev.event == "message" and self._deliver_bytes(ev.data, mid):
                answered = True
        return answered

    def _read_stream(self, resp: _HttpResponse, mid: Any) -> None:
        """An answer's SSE stream, resumed (GET with Last-Event-ID, after `retry`) when it is cut
        before the answer; the call fails, never re-sent, when it cannot be resumed."""
        parser = _SseParser(self.max_message)
        tries = 0
        while True:
            try:
                if self._deliver_events(resp, parser, mid):
                    return
                why = "the stream ended before the answer"
            except _HttpError as e:
                why = str(e).replace(f"{self.where()} sent ", "")
            resp.close()
            with self._olock:
                gone = mid in self._cancelled or self._closed.is_set()
            if gone or self._conn is None or not self._conn.waits_for(mid):
                return
            seen = parser.last_id
            if not seen or self.modern or tries >= _SSE_RESUMES:
                self._fail(mid, f"server '{self.name}' ({self.where()}): {why}; the call was not "
                                f"retried, as the server may have run it")
                return
            tries += 1
            delay = min(parser.retry_ms if parser.retry_ms is not None else _SSE_RETRY_MS,
                        _SSE_RETRY_MAX_MS)
            if self._closed.wait(delay / 1000):
                return
            try:
                resp = self._send("GET", self.url, None, self._get_headers(seen), mid=mid)
            except _HttpError as e:
                why = str(e)
                continue
            if not self._track(mid, resp):
                return
            if resp.status != 200 or resp.content_type != "text/event-stream":
                err = resp.error()
                resp.close()
                self._fail(mid, f"server '{self.name}' ({self.where()}): {why}, and resuming it "
                                f"failed ({err}); the call was not retried, as the server may have "
                                f"run it")
                return
            if parser.last_id != seen:
                tries = 0

    def _listen(self) -> None:
        """The GET stream for the server's own requests and notifications (optional: 405 means
        the server has none), reopened after `retry` while the session lasts."""
        parser, failures = _SseParser(self.max_message), 0
        while not self._closed.is_set() and failures < 5:
            try:
                with self._send("GET", self.url, None, self._get_headers(parser.last_id or ""),
                                _HTTP_LISTEN_S) as resp:
                    if resp.status == 404 and self.session_id:
                        self.forgotten = True
                        self._end("ended its session (HTTP 404); a new one starts on the next call")
                        return
                    if resp.status != 200 or resp.content_type != "text/event-stream":
                        return  # 405: no such stream, as the spec allows
                    if not self._track("listen", resp):
                        return
                    failures = 0
                    self._deliver_events(resp, parser, None)
            except _HttpError as e:
                failures += 1
                _log.debug("%s: GET stream: %s", self.name, e)
            delay = parser.retry_ms if parser.retry_ms is not None else 2000 * (failures + 1)
            # (at least _LISTEN_MIN_MS: a server that says retry: 0 and closes is no busy loop)
            delay = max(_LISTEN_MIN_MS, min(delay, _SSE_RETRY_MAX_MS))
            if self._closed.wait(delay / 1000):
                return

    # -- HTTP+SSE (2024-11-05)
    def open(self, timeout: float) -> None:
        """Before the first message: an "sse" server's event stream and its endpoint."""
        if self.mode == "sse":
            self._connect_sse(timeout)

    def _fall_back(self, status: int) -> None:
        with self._fallback_lock:
            if self.mode == "auto":
                _log.info("%s: HTTP %d to a POST: trying the older HTTP+SSE transport", self.name,
                          status)
                self._connect_sse(self._read_s)

    def _connect_sse(self, timeout: float) -> None:
        resp = self._send("GET", self.url, None, {"Accept": "text/event-stream"}, timeout)
        if resp.status != 200 or resp.content_type != "text/event-stream":
            err = resp.error()
            resp.close()
            raise _HttpError(_clean(f"{err} (expected an SSE event stream)"), self.where(),
                             err.status)
        parser = _SseParser(self.max_message)
        events = resp.events(parser)
        try:
            endpoint = next((ev.data for ev in events if ev.event == "endpoint"), None)
        except _HttpError:
            resp.close()
            raise
        if endpoint is None:
            resp.close()
            raise _HttpError(f"its event stream at {self.where()} ended before the 'endpoint' "
                             "event")
        target = urllib.parse.urljoin(self.url, endpoint.decode("utf-8", "replace").strip())
        if _url_origin(target) != _url_origin(self.url):
            resp.close()
            raise _HttpError(f"its endpoint {_safe_url(target)} is on another host than "
                             f"{self.where()}; not used")
        self.post_url, self.mode = target, "sse"
        with self._olock:
            self._open["events"] = resp.close
        threading.Thread(target=self._pump_sse, args=(resp, events), name=f"http-sse-{self.name}",
                         daemon=True).start()

    def _pump_sse(self, resp: _HttpResponse, events: Iterator[_SseEvent]) -> None:
        why = "its event stream ended"
        try:
            for ev in events:
                if ev.event == "message":
                    self._deliver_bytes(ev.data, None)
        except _HttpError as e:
            why = f"its event stream failed: {e}"
        self._end(why)

    # -- the end
    def ended(self) -> bool:
        """The session has ended (its Connection may not have read the EOF yet)."""
        return self._closed.is_set()

    def _end(self, reason: str) -> None:
        """End the session once: open answers are closed and the Connection sees EOF."""
        with self._olock:
            if self._closed.is_set():
                return
            self.reason = _clean(reason)
            self._closed.set()
            open_, self._open = list(self._open.values()), {}
            self._waiting.clear()  # (the Connection fails them at the EOF that follows)
        for stop in open_:
            stop()
        self._pool.close()

    def close(self, reason: str) -> None:
        """Shut down: DELETE the session (a thread; the caller bounds the wait), then end."""
        if (self.session_id and self.mode == "http" and not self.modern
            and not self._closed.is_set()):
            self.delete_thread = threading.Thread(target=self._delete,
                                                  name=f"http-delete-{self.name}",
                                                  daemon=True)
            self.delete_thread.start()
        self._end(reason)

    def _delete(self) -> None:
        try:
            self._send("DELETE", self.url, None, {"MCP-Protocol-Version": self.version}
                       if self.version else {},
                       _STOP_EOF_S).close()
        except _HttpError as e:
            _log.debug("%s: DELETE of the session: %s", self.name, e)


# ==== Remote auth =================================================================
# OAuth 2.1 for remote upstreams, as the MCP authorization spec describes it
# (https://modelcontextprotocol.io/specification/2025-06-18/basic/authorization and the newer
# revisions): a 401 names the protected resource metadata (RFC 9728), which names the
# authorization server, whose metadata (RFC 8414, else OpenID discovery) gives the endpoints.
# Abstract is a public client: PKCE S256 only, a loopback redirect (RFC 8252), the `resource`
# parameter (RFC 8707) on every authorization and token request, `iss` checked (RFC 9207).
# Tokens never go into logs, errors or answers: only their expiry is ever shown.

_OAUTH_REFRESH_MARGIN_S = 60.0  # refresh an access token this long before it expires
_OAUTH_LOGIN_WAIT_S = 600.0  # how long a login waits for the browser to come back
_OAUTH_DOC_MAX = 1024 * 1024  # largest metadata, registration or token answer read
_OAUTH_DOC_S = 30.0  # the longest such an answer may take to arrive, in all
_OAUTH_PATH = "/callback"
# the longest wait for another Abstract's use of a saved login (a refresh: its token request is
# bounded by the HTTP client's timeouts, well within this)
_OAUTH_LOCK_S = 120.0


def _span(seconds: float) -> str:
    """A duration for people: 45 s, 12 min, 3 h, 2 days."""
    if seconds < 90:
        return f"{max(0, int(seconds))} s"
    if seconds < 90 * 60:
        return f"{int(seconds // 60)} min"
    if seconds < 48 * 3600:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} days"


def _b64url(data: bytes) -> str:

    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _pkce() -> Tuple[str, str]:
    """(code_verifier, S256 code_challenge) as RFC 7636 section 4 makes them."""
    import hashlib  # lazy: see Imports
    import secrets  # lazy: see Imports

    verifier = secrets.token_urlsafe(48)  # 64 characters of the unreserved set (43..128 allowed)
    return verifier, _b64url(hashlib.sha256(verifier.encode("ascii")).digest())


_AUTH_PARAM_RE = re.compile(r'([A-Za-z0-9_.-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]*)')


def _www_authenticate(value: str) -> Dict[str, str]:
    """The parameters of the Bearer challenge in a WWW-Authenticate value (RFC 6750 section 3):
    resource_metadata, scope, error, ... ({} when there is no Bearer challenge)."""
    m = re.search(r"(?:^|,)\s*bearer(?:\s+|$)", value, re.IGNORECASE)
    if not m:
        return {}
    out: Dict[str, str] = {}
    pos = m.end()
    for p in _AUTH_PARAM_RE.finditer(value, pos):
        between = value[pos:p.start()].strip(" ,")
        if between:  # another scheme's name: its parameters are not the Bearer challenge's
            break
        raw = p.group(2)
        if raw.startswith('"'):
            raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
        out.setdefault(p.group(1).lower(), raw)
        pos = p.end()
    return out


def _url_base(url: str) -> str:
    p = urllib.parse.urlsplit(url)
    return f"{p.scheme.lower()}://{p.netloc.lower()}"


def _canonical_resource(url: str) -> str:
    """The server's canonical URI for `resource` (RFC 8707 section 2): lowercase scheme and host,
    no fragment, no trailing slash."""
    p = urllib.parse.urlsplit(url)
    parts = (p.scheme.lower(), p.netloc.lower(), p.path.rstrip("/"), p.query, "")
    return urllib.parse.urlunsplit(parts)


def _prm_urls(server_url: str, hinted: str = "") -> List[str]:
    """Where to look for the protected resource metadata, in the spec's order: the URL the 401's
    resource_metadata gave, else the well-known URL at the MCP endpoint's path, then at the root."""
    path = urllib.parse.urlsplit(server_url).path.rstrip("/")
    urls = [hinted] if hinted else []
    if path:
        urls.append(f"{_url_base(server_url)}/.well-known/oauth-protected-resource{path}")
    urls.append(f"{_url_base(server_url)}/.well-known/oauth-protected-resource")
    return urls


def _as_metadata_urls(issuer: str) -> List[str]:
    """Where an authorization server's metadata may be, in the spec's order: RFC 8414 (path
    inserted), then OpenID discovery (path inserted, then appended)."""
    path = urllib.parse.urlsplit(issuer).path.rstrip("/")
    origin = _url_base(issuer)
    if not path:
        return [f"{origin}/.well-known/oauth-authorization-server",
                f"{origin}/.well-known/openid-configuration"]
    return [f"{origin}/.well-known/oauth-authorization-server{path}",
            f"{origin}/.well-known/openid-configuration{path}",
            f"{origin}{path}/.well-known/openid-configuration"]


def _http_url(v: Any) -> bool:
    return isinstance(v, str) and v.startswith(("https://", "http://")) and len(v) < 4096


def _check_url(v: Any, what: str, name: str) -> None:
    """_AuthError when `v`, a URL an authorization or resource server gave (`what`: whose and
    which), holds whitespace or control characters: it is not shown raw, opened or used."""
    if isinstance(v, str) and _URL_BAD_RE.search(v):
        raise _AuthError(f"{name}: {what} holds whitespace or control characters "
                         f"({v[:200]!r}); Abstract does not use it. Ask the "
                         f"server's operator to fix its metadata")


# an access or refresh token Abstract takes: visible ASCII only, all an HTTP header value (or a
# form's field) can carry as it is (RFC 6750's b64token is narrower), at most 64 KiB (a JWT
# with many claims is a few KiB; each is kept in several forms to be masked: _Secrets)
_OAUTH_TOKEN_RE = re.compile("[!-~]{1,65536}")


def _token_problem(tokens: dict) -> str:
    """The kind of the first token in `tokens` a header cannot carry ("" if none)."""
    for kind in ("access_token", "refresh_token"):
        v = tokens.get(kind)
        if v is not None and not (isinstance(v, str) and _OAUTH_TOKEN_RE.fullmatch(v)):
            return kind
    return ""


def _check_as_metadata(doc: Any, issuer: str, name: str, legacy: bool = False) -> dict:
    """The authorization server's metadata, if Abstract can use it; else _AuthError saying why.

    The issuer in it must be the one its URL was built from (RFC 8414 section 3.3; `legacy`,
    metadata at the server's origin as the 2025-03-26 revision has it: any issuer on that
    origin, as that revision puts the metadata at the root whatever the issuer's path), and it
    must list S256 among code_challenge_methods_supported: without that PKCE cannot be relied
    on, and the spec says a client must refuse to go on."""
    got = doc.get("issuer") if isinstance(doc, dict) else None
    if legacy and _http_url(got) and _url_base(got) == issuer:
        issuer = got
    if not isinstance(doc, dict) or got != issuer:
        raise _AuthError(f"{name}: the authorization server's metadata names issuer {got!r}, "
                         f"not {issuer!r}; Abstract does not use it")
    for key in ("authorization_endpoint", "token_endpoint", "registration_endpoint",
                "revocation_endpoint"):
        _check_url(doc.get(key), f"the {key} of the authorization server {issuer}", name)
    for key in ("authorization_endpoint", "token_endpoint"):
        if not _http_url(doc.get(key)):
            raise _AuthError(f"{name}: the authorization server {issuer} gives no usable {key}")
    methods = doc.get("code_challenge_methods_supported")
    if not isinstance(methods, list) or "S256" not in methods:
        raise _AuthError(f"{name}: the authorization server {issuer} does not list PKCE S256 in "
                         f"its metadata (code_challenge_methods_supported: {_dumps(methods)}); "
                         f"Abstract logs in only where S256 is supported. Ask the server's "
                         f"operator to enable it")
    return doc


def _check_prm(doc: Any, server_url: str, name: str) -> Tuple[str, str]:
    """(resource, issuer) from protected resource metadata; _AuthError if it cannot be used.

    RFC 9728 section 3.3: the resource it names must be the server's (here: its URL or a
    prefix of it, as for metadata found at the root)."""
    servers = doc.get("authorization_servers") if isinstance(doc, dict) else None
    if isinstance(servers, list) and servers:
        _check_url(servers[0], "the authorization server its resource metadata names", name)
    if not isinstance(servers, list) or not servers or not _http_url(servers[0]):
        raise _AuthError(f"{name}: the server's protected resource metadata names no "
                         f"authorization server")
    resource = doc.get("resource")
    own = _canonical_resource(server_url)
    if not isinstance(resource, str) or not (own + "/").startswith(
            _canonical_resource(resource) + "/"):
        raise _AuthError(f"{name}: the server's protected resource metadata is for {resource!r}, "
                         f"not for {own}; Abstract does not log in there")
    return _canonical_resource(resource), servers[0]


def _token_auth_method(meta: dict, secret: Any, given: Any = None) -> str:
    """How a client authenticates at the token endpoint: the method its registration names
    (`given`), else, with a secret, the one the authorization server lists: client_secret_basic
    when listed or when the list is absent (RFC 8414 section 2's default; RFC 6749 section 2.3.1
    says servers must support it), else client_secret_post; without a secret, none."""
    if given in ("client_secret_basic", "client_secret_post", "none"):
        return given
    listed = meta.get("token_endpoint_auth_methods_supported")
    if not secret or (isinstance(listed, list) and listed == ["none"]):
        return "none"
    if isinstance(listed, list) and "client_secret_basic" not in listed and (
            "client_secret_post" in listed):
        return "client_secret_post"
    return "client_secret_basic"


def _client_auth(client: dict, form: Dict[str, str], headers: Dict[str, str]) -> None:
    """Put the client's credentials in a token or revocation request, by its method: an HTTP
    Basic header (RFC 6749 section 2.3.1: id and secret form-encoded first), the form, or only
    client_id (a public client)."""
    secret = client.get("client_secret")
    form["client_id"] = client["client_id"]
    method = client.get("token_endpoint_auth_method")
    if secret and method == "client_secret_basic":
        pair = (f"{urllib.parse.quote(client['client_id'], safe='')}:"
                f"{urllib.parse.quote(secret, safe='')}")
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    elif secret and method != "none":
        form["client_secret"] = secret


def _callback_params(url: str, state: str, issuer: str, iss_required: bool) -> str:
    """The authorization code from the redirect back to Abstract (the full URL or its query);
    _AuthError when it is not the answer to this login: another state (a forged or stale
    redirect), another issuer (RFC 9207: a mix-up), or an error the server sent."""
    import hmac  # lazy: see Imports

    query = urllib.parse.urlsplit(url.strip()).query if "?" in url else url.strip().lstrip("?")
    params = dict(urllib.parse.parse_qsl(query))
    if not hmac.compare_digest(params.get("state", "").encode(), state.encode()):
        raise _AuthError("the login's answer carries another state than the one Abstract sent (a "
                         "forged or stale redirect); nothing was accepted. Log in again")
    if "iss" in params and params["iss"] != issuer:
        raise _AuthError(f"the login's answer comes from issuer {params['iss']!r}, not {issuer!r} "
                         f"(RFC 9207); nothing was accepted")
    if "iss" not in params and iss_required:
        raise _AuthError(f"the login's answer lacks the iss its server {issuer} promises; "
                         f"nothing was accepted")
    if "error" in params:
        why = params.get("error_description") or params["error"]
        raise _AuthError(f"the authorization server refused the login: {why[:300]}")
    if not params.get("code"):
        raise _AuthError("the login's answer carries no authorization code; log in again")
    return params["code"]


def _config_home(environ: Optional[Dict[str, str]] = None) -> Path:
    """The user's config folder on this platform (where login tokens are kept)."""
    env = os.environ if environ is None else environ
    home = Path.home()
    if _WINDOWS:  # the roaming profile, where other tools keep their credentials too
        return Path(env.get("APPDATA") or home / "AppData" / "Roaming") / "Abstract"
    if _MACOS:
        return home / "Library" / "Application Support" / "Abstract"
    return Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "abstract"


def _try_lock(fd: int) -> bool:
    """Lock an open file for this process unless another process holds it (False then). The
    lock goes with the process, however it ends, so a crash leaves none behind. A file system
    that cannot lock (some network shares) is used unlocked, with a warning."""
    try:
        if _WINDOWS:  # msvcrt locks a byte range: the first byte stands for the whole file
            import msvcrt  # lazy: see Imports

            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            import fcntl  # lazy: see Imports

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as e:
        # held by another: EWOULDBLOCK (EAGAIN) from flock; EACCES or EDEADLOCK from msvcrt
        if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES,
                       getattr(errno, "EDEADLOCK", errno.EAGAIN)):
            return False
        _log.warning("the saved logins cannot be locked (%s): two Abstracts refreshing one "
                     "at the same moment may need a new login", e.strerror or e)
        return True


def _unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        if _WINDOWS:
            import msvcrt  # lazy: see Imports

            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        else:
            import fcntl  # lazy: see Imports

            fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


class _TokenStore:
    """Logins to remote servers: one JSON file per server (mode 0600) in a folder only the user
    can enter (0700), written whole by the atomic writer. A file holds, per authorization server
    (issuer), the client registration and the tokens, plus the resource they are for.

    Several Abstracts may share the folder (Claude Desktop's and Claude Code's, with the same
    servers): a refresh and every write of a login's file happen under `locked(name)`, which
    holds off other threads and other processes alike, so two of them never spend one rotating
    refresh token, and no write undoes another's."""

    def __init__(self, directory: Optional[str] = None,
                 environ: Optional[Dict[str, str]] = None) -> None:
        self.dir = Path(directory) if directory else _config_home(environ) / "oauth"
        self._guard = threading.Lock()
        self._locks: Dict[str, threading.RLock] = {}  # per login: this process's threads
        self._held: set = set()  # the logins whose lock file the thread holding their RLock has

    @contextlib.contextmanager
    def locked(self, name: str) -> Iterator[None]:
        """`name`'s login to this thread alone: other threads wait for its lock, other processes
        for the lock file next to its file (<file>.lock, 0600). Reentrant. A wait longer than
        _OAUTH_LOCK_S, for both together, raises _AuthError."""
        deadline = time.monotonic() + _OAUTH_LOCK_S
        with self._guard:
            lock = self._locks.setdefault(name, threading.RLock())
        if not lock.acquire(timeout=_OAUTH_LOCK_S):
            raise _AuthError(f"{name}: the saved login stayed busy for over {_OAUTH_LOCK_S:g} s "
                             f"in this Abstract; try again")
        try:
            if name in self._held:  # this thread has it already
                yield
                return
            fd = self._lock_file(name, deadline)
            self._held.add(name)
            try:
                yield
            finally:
                self._held.discard(name)
                _unlock(fd)
        finally:
            lock.release()

    def _lock_file(self, name: str, deadline: float) -> int:
        """The lock file, locked by this process before `deadline` (time.monotonic()), or
        _AuthError."""
        path = self._path(name).with_suffix(".lock")
        self._folder()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as e:
            raise _AuthError(f"{name}: cannot open the lock file {path}: "
                             f"{e.strerror or e}") from None
        waited = False
        while not _try_lock(fd):
            if not waited:
                waited = True
                _log.info("%s: waiting for another Abstract to finish with the saved login (%s)",
                          name, path)
            if time.monotonic() > deadline:
                os.close(fd)
                raise _AuthError(f"{name}: another program has held {path} for over "
                                 f"{_OAUTH_LOCK_S:g} s (another Abstract refreshing the login?); "
                                 f"try again, and end that program if it hangs")
            time.sleep(0.05)  # (flock cannot wait with a timeout: poll, briefly)
        return fd

    def _path(self, name: str) -> Path:
        import hashlib  # lazy: see Imports

        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64]
        return self.dir / f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}.json"

    def _folder(self) -> str:
        """The folder, made owner-only (_own_folder)."""
        return _own_folder(self.dir, "the login folder")

    def load(self, name: str) -> dict:
        """The login's file ({} when there is none, or it is unreadable: log in again); a file
        another program holds (Windows: another Abstract replacing it) is waited for, and one
        still held after _SHARING_WAIT_S is _AuthError, never {} (a save would lose it)."""
        try:
            with _retry_shared(open, self._path(name), "rb") as f:
                doc = json.loads(f.read(_OAUTH_DOC_MAX).decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            if getattr(e, "winerror", None) in _SHARING_ERRORS:
                raise _AuthError(f"{name}: the saved login {self._path(name)} stayed locked "
                                 f"for over {_SHARING_WAIT_S:g} s (another program holds it, "
                                 f"or it is not yours to read); try again") from None
            _log.warning("%s: the saved login in %s cannot be read (%s); log in again",
                         name, self._path(name), type(e).__name__)
            return {}
        if not isinstance(doc, dict):
            return {}
        # a file edited by hand: an issuer's entry that is not an object is left out
        issuers = doc.get("issuers") if isinstance(doc.get("issuers"), dict) else {}
        doc["issuers"] = {k: v for k, v in issuers.items() if isinstance(v, dict)}
        return doc

    def save(self, name: str, doc: dict) -> None:
        path = self._path(name)
        _write_new(self._folder(), path.stem, ".json", _dumps(doc).encode("utf-8"), 0o600,
                   replace=True)

    def forget(self, name: str) -> bool:
        if not self._path(name).exists():
            return False
        with self.locked(name):  # (a refresh under way elsewhere would write it back)
            try:
                os.unlink(self._path(name))
                return True
            except FileNotFoundError:
                return False


class _Loopback:
    """The one-shot HTTP server on 127.0.0.1 the browser is sent back to (RFC 8252 section 7.3).

    It answers every request with a short page and hands the first one on /callback to whoever
    waits (`wait`); a pasted redirect URL (`offer`) counts the same, for machines whose browser
    runs elsewhere."""

    def __init__(self, port: int = 0) -> None:
        self.got: "queue.Queue[str]" = queue.Queue(maxsize=1)
        # a connection that sends nothing (a browser's preconnect) is dropped after 10 s
        self.httpd, self._stop = _serve_http("127.0.0.1", port, self._respond,
                                             "abstract-oauth-callback", (10.0, 10.0, 16))
        self.port = self.httpd.server_address[1]
        self.redirect_uri = f"http://127.0.0.1:{self.port}{_OAUTH_PATH}"
        self._closed = False

    def _respond(self, target: str) -> _HttpAnswer:
        parts = urllib.parse.urlsplit(target)
        # a request without a state is no authorization server's answer (a stray page's <img>):
        # refused, and the login keeps waiting; a wrong state ends it (_finish)
        if parts.path != _OAUTH_PATH or "state" not in urllib.parse.parse_qs(parts.query):
            return 404, "text/html; charset=utf-8", b"not found"
        self.offer(target)
        return 200, "text/html; charset=utf-8", (
            b"<!doctype html><title>Abstract</title><p>Done: you can close this window and go "
            b"back to your MCP client.</p>")

    def offer(self, url: str) -> None:
        with contextlib.suppress(queue.Full):
            self.got.put_nowait(url)

    def wait(self, timeout: float) -> Optional[str]:
        try:
            return self.got.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        """Stop serving (idempotent); it waits for the server's loop to end (half a second)."""
        if not self._closed:
            self._closed = True
            self._stop()


def _open_browser(url: str) -> bool:
    """Open `url` in the user's browser (webbrowser's choice; $BROWSER first), without blocking
    the caller; False when none can be opened. On Linux without a display and without $BROWSER
    none is tried: webbrowser would fall back to a text browser, which takes over the terminal
    (or, serving, the MCP client's pipes). A browser command is run here rather than by
    webbrowser, with its stdin and stdout not Abstract's: serving, those are the MCP stream."""
    import webbrowser  # lazy: see Imports

    display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    headless = not (_WINDOWS or _MACOS or display)
    if headless and not os.environ.get("BROWSER"):
        return False
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return False
    if not isinstance(browser, webbrowser.GenericBrowser):  # macOS, Windows, known browsers
        threading.Thread(target=browser.open, args=(url,), name="abstract-browser",
                         daemon=True).start()
        return True
    argv = [browser.name] + [arg.replace("%s", url) for arg in browser.args]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, close_fds=True,
                                start_new_session=not _WINDOWS)
    except OSError:
        return False
    threading.Thread(target=proc.wait, name="abstract-browser", daemon=True).start()  # reaped
    return True


class _Attempt(NamedTuple):
    """One login under way: what its answer is checked against and exchanged with."""

    url: str  # the authorization URL the browser is sent to
    state: str
    verifier: str
    issuer: str
    resource: str
    entry: dict  # what is saved for the issuer: client, token_endpoint, iss_supported
    client: dict
    loopback: _Loopback
    scope: str


class _OAuth:
    """OAuth for one remote upstream: the hook its HTTP requests go through (`headers` before a
    request, `on_unauthorized` after a 401 or 403) and the login itself.

    `conf` is the server's `oauth` settings (client_id, client_secret, scope, redirect_port);
    `environ` is where _http_request finds proxies and certificates. The saved login is re-read
    from the store before each use, so a `--login` in a terminal is seen by a running Abstract
    at once."""

    def __init__(self, name: str, url: str, conf: Optional[dict], store: _TokenStore,
                 environ: Optional[Dict[str, str]] = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.name, self.url, self.conf = name, url, dict(conf or {})
        self.store, self.environ, self._clock = store, environ, clock
        self.lock = threading.Lock()  # one refresh or login start at a time
        self.login: Optional[threading.Thread] = None
        # set when the login under way has ended (tokens saved, or failed): "a login is running"
        # means this is not set, not that its thread lives (it may still be closing the loopback)
        self.login_done = threading.Event()
        self.login_done.set()
        self.login_url = ""
        self.stepped_up: set = set()  # the challenges' scopes a step-up was tried for (once each)
        self.sent = ""  # the access token last sent, to tell a stale 401 from a fresh one
        self.fresh = ""  # the access token the last 401 refreshed to: a 401 on it means log in
        self.start_logins = True  # False (--check): a needed login is reported, not started
        self._refused_saved = ""  # the saved token last refused (warned about once)
        _SECRETS.add(self.conf.get("client_secret"))
        self.asked = False  # the server asked for authorization (a 401, or a 403 for scopes)

    # -- the saved login

    def _saved(self) -> Tuple[dict, dict]:
        """(the server's file, the entry of its current issuer); empty when the saved login is for
        another URL (the config changed: those tokens are not this server's)."""
        doc = self.store.load(self.name)
        if doc.get("server_url") != self.url:
            return {}, {}
        entry = doc.get("issuers", {}).get(doc.get("issuer"), {})
        entry = entry if isinstance(entry, dict) else {}
        tokens = entry.get("tokens") if isinstance(entry.get("tokens"), dict) else {}
        _SECRETS.add((entry.get("client") or {}).get("client_secret"))
        _SECRETS.add(tokens.get("access_token"), tokens.get("refresh_token"), passing=True)
        bad = _token_problem(tokens)
        if bad:  # (a file edited by hand, or written by an older Abstract): as if logged out
            if self._refused_saved != str(tokens.get(bad)):
                self._refused_saved = str(tokens.get(bad))
                _log.warning("%s: the saved %s holds characters an HTTP header cannot carry; "
                             "it is not used: log in again", self.name, bad)
            entry = {k: v for k, v in entry.items() if k != "tokens"}
        return doc, entry

    def _save(self, issuer: str, resource: str, entry: dict) -> None:
        with self.store.locked(self.name):
            doc = self.store.load(self.name)
            if doc.get("server_url") != self.url:
                doc = {}
            issuers = doc.get("issuers") if isinstance(doc.get("issuers"), dict) else {}
            issuers[issuer] = entry
            self.store.save(self.name, {"server_url": self.url, "issuer": issuer,
                                        "resource": resource, "issuers": issuers})

    def status(self, reached: Optional[bool] = None) -> str:
        """One line for --check, with the token's expiry but never the token. Without a saved
        login: `reached` (--check started the server) tells a server that answered without
        asking for authorization from one that asked (a login is needed only for that one)."""
        try:
            _, entry = self._saved()
        except _AuthError as e:  # (a login file held by another program: Windows)
            return f"unknown, {e}"
        tokens = entry.get("tokens") or {}
        if not tokens.get("access_token"):
            if reached is not None and not self.asked:
                return ("no login needed (it answered without asking for one)" if reached
                        else "no saved login (the server was not reached)")
            return f"login needed: run python abstract.py --login {self.name}"
        expires = tokens.get("expires_at")
        left = "no expiry given" if not isinstance(expires, (int, float)) else (
            f"token expires in {_span(expires - self._clock())}" if expires > self._clock()
            else "token expired")
        renew = "refreshed when needed" if tokens.get("refresh_token") else "no refresh token"
        return f"logged in ({left}; {renew})"

    # -- the hook

    def headers(self, url: str = "") -> Dict[str, str]:
        """The Authorization header for a request to the server (none before a login); an access
        token about to expire is refreshed first, unless, once the login is locked, it turns out
        another Abstract (sharing the login folder) has just refreshed it."""
        _, entry = self._saved()
        tokens = entry.get("tokens") or {}
        if self._expiring(tokens):
            with self.lock:
                with contextlib.suppress(_AuthError):
                    with self.store.locked(self.name):
                        if self._expiring(self._saved()[1].get("tokens") or {}):
                            self._refresh()
                _, entry = self._saved()
                tokens = entry.get("tokens") or {}
        token = tokens.get("access_token")
        if not isinstance(token, str) or not token:
            return {}
        self.sent = token
        return {"Authorization": f"Bearer {token}"}

    def _expiring(self, tokens: dict) -> bool:
        """Whether the tokens can and should be refreshed now: a token that lives less than 4
        minutes is refreshed in its last quarter, others _OAUTH_REFRESH_MARGIN_S before they
        expire."""
        expires = tokens.get("expires_at")
        margin = min(_OAUTH_REFRESH_MARGIN_S, float(tokens.get("lifetime") or 0) / 4)
        return bool(tokens.get("refresh_token") and isinstance(expires, (int, float))
                    and expires - self._clock() < margin)

    def on_unauthorized(self, response: Any) -> bool:
        """After a 401 (or a 403): True when the request may be sent again (the token was
        refreshed); else _AuthError that says what the user must do: a login has started."""
        status = response.status
        challenge = _www_authenticate(response.header("WWW-Authenticate"))
        if status == 403 and challenge.get("error") != "insufficient_scope":
            return False  # not about scopes: the caller reports the 403 (and reads its body)
        response.close()  # neither a retry nor an _AuthError needs the body
        self.asked = True
        if status == 403:
            wanted = challenge.get("scope", "")
            with self.lock:
                if not self.login_done.is_set():  # a login is under way: its answer says so
                    raise self._start(challenge, step_up=True)
                if wanted in self.stepped_up:
                    raise _AuthError(f"{self.name} refuses the call even after a login with more "
                                     f"scopes ({wanted or 'none named'}); ask its operator for "
                                     f"access")
                self.stepped_up.add(wanted)  # a step-up login starts now: once per scope
                raise self._start(challenge, step_up=True)
        with self.lock:  # also around _start: concurrent calls open one login, not one each
            with self.store.locked(self.name):  # (and other Abstracts' refreshes wait)
                _, entry = self._saved()
                tokens = entry.get("tokens") or {}
                token = tokens.get("access_token")
                if token and token != self.sent:  # refreshed (or logged in) meanwhile: try it
                    return True
                if (token and token != self.fresh and tokens.get("refresh_token")
                        and self._refresh()):
                    _, entry = self._saved()
                    self.fresh = (entry.get("tokens") or {}).get("access_token", "")
                    return True
            raise self._start(challenge)

    # -- requests to the authorization server

    def _json(self, method: str, url: str, body: Optional[bytes] = None,
              headers: Optional[Dict[str, str]] = None) -> Tuple[int, Any]:
        """(status, parsed JSON or None) of one request; _AuthError when the server is not
        reached."""
        heads = {"Accept": "application/json", **(headers or {})}
        try:
            with _http_request(method, url, heads, body, environ=self.environ) as resp:
                status, raw = resp.status, resp.read(_OAUTH_DOC_MAX, _OAUTH_DOC_S)
        except _HttpError as e:
            if e.status:  # too long or too slow (_OAUTH_DOC_MAX, _OAUTH_DOC_S): no document
                return e.status, None
            raise _AuthError(f"{self.name}: cannot reach {_safe_url(url)} for the login: "
                             f"{e}") from None
        try:
            return status, json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return status, None

    def _discover(self, challenge: Dict[str, str]) -> Tuple[str, str, dict, dict]:
        """(resource, issuer, authorization server metadata, resource metadata).

        A server without protected resource metadata is one of the 2025-03-26 revision
        (https://modelcontextprotocol.io/specification/2025-03-26/basic/authorization): its
        origin is its authorization server, and without metadata there the default endpoints
        /authorize, /token and /register at the origin are used, as that revision says."""
        legacy = False
        _check_url(challenge.get("resource_metadata"), "the resource_metadata URL of its 401",
                   self.name)
        for url in _prm_urls(self.url, challenge.get("resource_metadata", "")):
            status, prm = self._json("GET", url)
            if status == 200 and isinstance(prm, dict):
                resource, issuer = _check_prm(prm, self.url, self.name)
                break
        else:
            legacy, prm = True, {}
            resource, issuer = _canonical_resource(self.url), _url_base(self.url)
        for url in _as_metadata_urls(issuer):
            status, meta = self._json("GET", url)
            if status == 200 and meta is not None:
                meta = _check_as_metadata(meta, issuer, self.name, legacy)
                return resource, meta["issuer"], meta, prm
        if not legacy:
            raise _AuthError(f"{self.name}: the authorization server {issuer} publishes no "
                             f"metadata (RFC 8414 or OpenID discovery)")
        # S256 is assumed: that revision makes PKCE a must, and OAuth 2.1 makes S256 the method
        # every server supports; with no metadata nothing could list it
        return resource, issuer, {
            "issuer": issuer, "authorization_endpoint": issuer + "/authorize",
            "token_endpoint": issuer + "/token", "registration_endpoint": issuer + "/register",
            "code_challenge_methods_supported": ["S256"], "defaults": True}, prm

    def _client(self, meta: dict, entry: dict, redirect_uri: str, scope: str) -> dict:
        """The client to log in as: the pre-registered one from the settings, the settings'
        client metadata document where the server takes those, the one registered before for
        this redirect (and scope), else a new dynamic registration (RFC 7591)."""
        if self.conf.get("client_id"):
            secret = self.conf.get("client_secret")
            return {"client_id": self.conf["client_id"], "client_secret": secret,
                    "token_endpoint_auth_method": _token_auth_method(meta, secret)}
        document = self.conf.get("client_metadata_url")
        if document and meta.get("client_id_metadata_document_supported") is True:
            # a client ID metadata document (SEP-991, draft-ietf-oauth-client-id-metadata-
            # document): the URL the user published it at is the client_id; no registration
            return {"client_id": document, "token_endpoint_auth_method": "none"}
        client = entry.get("client") or {}
        has = client.get("scope")
        if (client.get("client_id") and redirect_uri in client.get("redirect_uris", [])
                and (not isinstance(has, str) or set(scope.split()) <= set(has.split()))):
            return client
        endpoint = meta.get("registration_endpoint")
        if not _http_url(endpoint):
            raise _AuthError(f"{self.name}: its authorization server {meta['issuer']} offers no "
                             f"dynamic client registration; register a client there (redirect URI "
                             f"http://127.0.0.1{_OAUTH_PATH}, any port) and set "
                             f"servers.{self.name}.oauth.client_id in Abstract's settings")
        body = {"client_name": "Abstract", "redirect_uris": [redirect_uri],
                "application_type": "native",
                "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
                "token_endpoint_auth_method": "none", **({"scope": scope} if scope else {})}
        status, doc = self._json("POST", endpoint, _dumps(body).encode(),
                                 {"Content-Type": "application/json"})
        if status not in (200, 201) or not isinstance(doc, dict) or not doc.get("client_id"):
            why = (doc or {}).get("error_description") if isinstance(doc, dict) else None
            guess = (" (the server publishes no OAuth metadata, so this is the 2025-03-26 "
                     "revision's default endpoint; if the server takes a static token, give it "
                     "in the entry's \"headers\")") if meta.get("defaults") else ""
            raise _AuthError(f"{self.name}: the client registration at {endpoint} failed "
                             f"(HTTP {status}{': ' + str(why)[:200] if why else ''}){guess}")
        _SECRETS.add(doc.get("client_secret"))
        doc.setdefault("redirect_uris", [redirect_uri])
        # a confidential client after all (the server gave a secret): by the method it names
        doc["token_endpoint_auth_method"] = _token_auth_method(
            meta, doc.get("client_secret"), doc.get("token_endpoint_auth_method"))
        return doc

    def _token(self, entry: dict, client: dict, resource: str, form: Dict[str, str]) -> dict:
        """POST to the token endpoint; the tokens, with expires_at on this machine's clock."""
        form = {**form, "resource": resource}
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        _client_auth(client, form, headers)
        now = self._clock()
        status, doc = self._json("POST", entry["token_endpoint"],
                                 urllib.parse.urlencode(form).encode(), headers)
        doc = doc if isinstance(doc, dict) else {}
        if status != 200 or not isinstance(doc.get("access_token"), str):
            err, why = str(doc.get("error", ""))[:100], str(doc.get("error_description", ""))[:200]
            raise _AuthError(f"{self.name}: the token endpoint refused (HTTP {status}"
                             f"{': ' + err if err else ''}{': ' + why if why else ''})",
                             refused=err == "invalid_grant")
        _SECRETS.add(doc["access_token"], doc.get("refresh_token"), passing=True)
        bad = _token_problem(doc)
        if bad:
            raise _AuthError(f"{self.name}: the token endpoint's {bad} holds characters an HTTP "
                             f"header cannot carry (line breaks, controls, spaces or non-ASCII; "
                             f"or it is over 64 KiB); "
                             f"it was refused and not saved. Ask the server's operator to fix it")
        life = doc.get("expires_in")
        if not (isinstance(life, (int, float)) and not isinstance(life, bool) and 0 < life < 1e9):
            life = None
        return {"access_token": doc["access_token"], "refresh_token": doc.get("refresh_token"),
                "scope": doc.get("scope") if isinstance(doc.get("scope"), str) else None,
                "expires_at": now + life if life else None, "lifetime": life}

    def _refresh(self) -> bool:
        """Trade the refresh token for new tokens (keeping it unless a new one comes: rotation);
        False when the server refuses it, and the spent tokens are dropped. The caller holds
        self.lock and the store's lock of this login."""
        doc, entry = self._saved()
        tokens = entry.get("tokens") or {}
        if not tokens.get("refresh_token") or not entry.get("client"):
            return False
        try:
            grant = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]}
            new = self._token(entry, entry["client"], doc.get("resource", self.url), grant)
        except _AuthError as e:
            if not e.refused:  # the server not reached: the tokens may still be good
                raise
            _, now = self._saved()  # another Abstract may have rotated it a moment ago
            if (now.get("tokens") or {}).get("refresh_token") != tokens["refresh_token"]:
                return True
            _log.info("%s: the refresh token was refused; a new login is needed", self.name)
            self._save(doc["issuer"], doc.get("resource", ""), {**entry, "tokens": {}})
            return False
        new["refresh_token"] = new["refresh_token"] or tokens["refresh_token"]
        new["scope"] = new["scope"] or tokens.get("scope")
        self._save(doc["issuer"], doc.get("resource", ""), {**entry, "tokens": new})
        _log.info("%s: access token refreshed", self.name)
        return True

    # -- the login

    def _scope(self, challenge: Dict[str, str], prm: dict, entry: dict, step_up: bool) -> str:
        """The scope to ask for: the settings' if given; else the challenge's, else the resource's
        scopes_supported (the spec's order); a step-up adds the challenge's to what was granted."""
        if self.conf.get("scope"):
            base = str(self.conf["scope"])
        elif challenge.get("scope"):
            base = challenge["scope"]
        else:
            supported = prm.get("scopes_supported")
            supported = supported if isinstance(supported, list) else []
            base = " ".join(s for s in supported if isinstance(s, str))
        if step_up:
            before = (entry.get("tokens") or {}).get("scope") or entry.get("scope") or ""
            words = before.split() + base.split() + challenge.get("scope", "").split()
            base = " ".join(dict.fromkeys(words))
        return base

    def _begin(self, challenge: Dict[str, str], step_up: bool = False) -> _Attempt:
        """Everything up to the browser: discovery, the client, the loopback, PKCE, the URL."""
        import secrets  # lazy: see Imports

        resource, issuer, meta, prm = self._discover(challenge)
        doc, _ = self._saved()
        entry = doc.get("issuers", {}).get(issuer, {}) if doc else {}
        redirect = (entry.get("client") or {}).get("redirect_uris") or [""]
        port = urllib.parse.urlsplit(redirect[0]).port or int(self.conf.get("redirect_port") or 0)
        try:
            loopback = _Loopback(port)
        except OSError:  # that port is taken now: another one (and, if dynamic, a new registration)
            loopback = _Loopback(0)
        scope = self._scope(challenge, prm, entry, step_up)
        try:
            client = self._client(meta, entry, loopback.redirect_uri, scope)
        except BaseException:
            loopback.close()
            raise
        state = secrets.token_urlsafe(32)
        verifier, challenge_s256 = _pkce()
        query = {"response_type": "code", "client_id": client["client_id"],
                 "redirect_uri": loopback.redirect_uri, "code_challenge": challenge_s256,
                 "code_challenge_method": "S256", "state": state, "resource": resource}
        if scope:
            query["scope"] = scope
        endpoint = meta["authorization_endpoint"]
        url = endpoint + ("&" if "?" in endpoint else "?") + urllib.parse.urlencode(query)
        revoke = meta.get("revocation_endpoint")
        entry = {**entry, "client": client, "token_endpoint": meta["token_endpoint"],
                 "revocation_endpoint": revoke if _http_url(revoke) else None,
                 "iss_supported":
                     meta.get("authorization_response_iss_parameter_supported") is True}
        return _Attempt(url, state, verifier, issuer, resource, entry, client, loopback, scope)

    def _finish(self, attempt: _Attempt, answer: str) -> None:
        """Check the browser's answer and trade its code for tokens, which are saved."""
        code = _callback_params(answer, attempt.state, attempt.issuer,
                                attempt.entry["iss_supported"])
        tokens = self._token(attempt.entry, attempt.client, attempt.resource, {
            "grant_type": "authorization_code", "code": code,
            "redirect_uri": attempt.loopback.redirect_uri, "code_verifier": attempt.verifier})
        tokens["scope"] = tokens["scope"] or attempt.scope or None
        self._save(attempt.issuer, attempt.resource, {**attempt.entry, "tokens": tokens})

    def logout(self) -> str:
        """Forget the saved login; its tokens are first revoked at the authorization server
        (RFC 7009) where it offers that. What happened, in words."""
        doc, entry = self._saved()
        tokens, client = entry.get("tokens") or {}, entry.get("client") or {}
        endpoint, told = entry.get("revocation_endpoint"), ""
        if endpoint and client.get("client_id"):
            told = " and revoked at the server"
            for kind in ("refresh_token", "access_token"):
                if not tokens.get(kind):
                    continue
                form = {"token": tokens[kind], "token_type_hint": kind}
                headers = {"Content-Type": "application/x-www-form-urlencoded"}
                _client_auth(client, form, headers)
                # client_secret even when empty (RFC 6749 2.3.1 allows an empty one): the SDK's
                # revocation endpoint refuses a request without the parameter, Basic or not
                form.setdefault("client_secret", "")
                try:
                    status, _ = self._json("POST", endpoint, urllib.parse.urlencode(form).encode(),
                                           headers)
                except _AuthError as e:
                    status, told = 0, f" (the server could not be told: {e})"
                if status != 200 and status:
                    told = f" (the server refused to revoke it: HTTP {status})"
        if not self.store.forget(self.name) and not doc:
            return "no saved login"
        return "the saved login is forgotten" + told

    def _start(self, challenge: Dict[str, str], step_up: bool = False) -> _AuthError:
        """Start a login in the background (browser opened, answer awaited on a thread) unless
        one is under way; the error the call answers with, saying what to do."""
        if not self.start_logins:
            return _AuthError(f"login needed: run python abstract.py --login {self.name}",
                              login=True)
        if self.login_done.is_set():
            attempt = self._begin(challenge, step_up)
            self.login_url = attempt.url
            done = self.login_done = threading.Event()

            def wait() -> None:
                try:
                    answer = attempt.loopback.wait(_OAUTH_LOGIN_WAIT_S)
                    attempt.loopback.close()  # before the tokens: a next login may want its port
                    if answer is None:
                        done.set()
                        _log.warning("%s: the login was not finished within %d minutes", self.name,
                                     _OAUTH_LOGIN_WAIT_S // 60)
                        return
                    self._finish(attempt, answer)
                    done.set()  # before the log line: whoever reads it may call again at once
                    _log.info("%s: logged in", self.name)
                except _AuthError as e:
                    done.set()
                    _log.warning("%s: login failed: %s", self.name, e)
                finally:
                    done.set()
                    attempt.loopback.close()

            self.login = threading.Thread(target=wait, name=f"abstract-login-{self.name}",
                                          daemon=True)
            self.login.start()
            opened = _open_browser(attempt.url)
        else:
            opened = True
        how = "A browser window was opened for it" if opened else "No browser could be opened here"
        what = "More permissions are needed (a step-up login)" if step_up else "A login is needed"
        return _AuthError(f"{what}. {how}: finish the login there (or open {self.login_url} "
                          f"yourself), then call again. On a machine without a browser, run "
                          f"`python abstract.py --login {self.name}` in a terminal.", login=True)

    def login_cli(self, out: Any, lines: "queue.Queue[str]") -> None:
        """`--login`: the whole flow from a terminal. The URL is printed as well as opened; a
        redirect URL pasted into `lines` (the terminal's input) counts as the browser's answer,
        for a machine whose browser runs elsewhere (SSH). _AuthError when it fails."""
        status, www = 0, ""
        try:
            probe = _dumps({"jsonrpc": "2.0", "id": "abstract-login", "method": "ping"}).encode()
            with _http_request("POST", self.url, {"Content-Type": "application/json",
                                                  "Accept": "application/json, text/event-stream"},
                               probe) as resp:
                status, www = resp.status, resp.header("WWW-Authenticate")
        except _HttpError as e:
            raise _AuthError(f"{self.name}: cannot reach {_safe_url(self.url)}: {e}") from None
        if status != 401 and not self._saved()[0]:
            _log.info("%s answers HTTP %d without a login; looking for its login anyway",
                      self.name, status)
        attempt = self._begin(_www_authenticate(www) if status == 401 else {})
        try:
            opened = _open_browser(attempt.url)
            how = ("in the browser window just opened; if none opened, open this URL yourself"
                   if opened else "open this URL in a browser")
            out.write(f"Log in to {self.name} {how}:\n\n"
                      f"  {attempt.url}\n\nWaiting up to {int(_OAUTH_LOGIN_WAIT_S // 60)} minutes. "
                      f"If the browser runs on another machine (SSH), it ends on a page at "
                      f"{attempt.loopback.redirect_uri} that does not load: paste that page's "
                      f"whole address here and press Enter.\n")
            out.flush()

            def relay() -> None:  # the pasted line, if any, goes to the same place as the browser's
                with contextlib.suppress(queue.Empty):
                    while True:
                        line = lines.get(timeout=_OAUTH_LOGIN_WAIT_S)
                        if "code=" in line or "error=" in line:
                            attempt.loopback.offer(line.strip())
                            return

            threading.Thread(target=relay, name="abstract-login-paste", daemon=True).start()
            answer = attempt.loopback.wait(_OAUTH_LOGIN_WAIT_S)
            if answer is None:
                raise _AuthError(f"{self.name}: the login was not finished within "
                                 f"{int(_OAUTH_LOGIN_WAIT_S // 60)} minutes")
            self._finish(attempt, answer)
        finally:
            attempt.loopback.close()


# ==== Upstreams ===================================================================
# The upstream servers: how a local one is launched (and its whole process tree ended, on every
# platform), one session of it (_Run, over a pipe or HTTP), and its supervisor (_Upstream: start,
# back-off, restarts, the tool list, calls) with what it owns beside: what the server speaks
# (_Protocol), its 2026-07-28 subscription (_Listener), and its questions (sampling, elicitation)
# relayed to Abstract's own client (_QuestionRelay, through _ClientLink, which answers roots).


def _auth_provider(name: str, url: str, settings: _Settings,
                   environ: Optional[Dict[str, str]] = None) -> _OAuth:
    """The OAuth hook for a remote upstream (_http_request's `auth`), one per _Upstream: it keeps
    that server's refresh and login state; the tokens live in the per-user login folder."""
    return _OAuth(name, url, settings.oauth(name), _TokenStore(environ=environ), environ)
# One long-lived process and session per upstream server, started on first need, shared by
# every call, restarted (with back-off after quick crashes) when it dies.


# What CreateProcess can start, in PATHEXT's default order; PATHEXT's others (.JS, .VBS, .PY)
# need a host program and fail with WinError 193, as an extensionless npm shell script does.
_WIN_RUNNABLE = (".COM", ".EXE", ".BAT", ".CMD")


def _which_windows(cmd: str, dirs: List[str], env: Dict[str, str]) -> Optional[str]:
    """Windows: the first file in `dirs` that `cmd` names with a PATHEXT extension Windows can
    start, preferred always to an extensionless file of the name (npm puts a shell script `npx`
    beside `npx.cmd`, and shutil.which of Python 3.12.0-3.12.7 and 3.13.0 may return it:
    CPython gh-109590, gh-127001). The current folder is not searched."""
    raw = _env_get(env, "PATHEXT") or ";".join(_WIN_RUNNABLE)
    exts = [e for e in (x.strip().upper() for x in raw.split(";")) if e in _WIN_RUNNABLE]
    exts = exts or list(_WIN_RUNNABLE)
    if os.path.splitext(cmd)[1].upper() in exts:
        names = [cmd]
    else:  # lower case: a case-sensitive folder (WSL's, or a test's) holds npx.cmd, not npx.CMD
        names = [cmd + e.lower() for e in exts]
    for folder in dirs:
        for name in names:
            full = os.path.join(folder, name)
            if os.path.isfile(full):
                return full
    return None


def _resolve_command(spec: _ServerSpec, env: Dict[str, str]) -> str:
    """The executable to run, found with the PATH the upstream will see (PATHEXT on Windows,
    for a command with a folder part too: _which_windows)."""
    cmd = spec.command
    if os.path.dirname(cmd):  # a path: relative to the upstream's working directory
        full = cmd if os.path.isabs(cmd) else os.path.join(spec.cwd or os.getcwd(), cmd)
        found = (_which_windows(os.path.basename(full), [os.path.dirname(full)], env)
                 if _WINDOWS else full if os.path.isfile(full) else None)
        if found:
            return found
        raise UpstreamError(f"command not found: {cmd!r} (no such file"
                            f"{'; tried PATHEXT: .cmd, .exe, ...' if _WINDOWS else ''})")
    path = _env_get(env, "PATH", os.defpath)
    if _WINDOWS:  # (a PATH folder may be written in quotes, as cmd.exe accepts)
        found = _which_windows(cmd, [d.strip('"') for d in path.split(";") if d.strip('"')], env)
    else:
        found = shutil.which(cmd, path=path)
    if found is None:
        raise UpstreamError(f"command not found: {cmd!r} is not on the PATH the server gets "
                            f"({path[:300]}); use an absolute path or fix PATH in its env")
    return found


def _is_batch(path: str) -> bool:
    """Windows: whether CreateProcess would run `path` through cmd.exe (.bat, .cmd). Windows
    drops trailing dots and spaces and reads `name:stream` as the file `name`, so `x.cmd. ` and
    `x.cmd::$DATA` are batch files too."""
    name = re.split(r"[\\/]", re.sub(r"^[A-Za-z]:", "", path))[-1].split(":")[0].rstrip(". ")
    return os.path.splitext(name)[1].lower() in (".bat", ".cmd")


def _cmd_quote(arg: str) -> str:
    """One argument of a batch file's command line, quoted for cmd.exe and then for the program
    the batch hands `%*` to (the C runtime's rules), as Rust's std quotes it since BatBadBut
    (CVE-2024-24576; library/std/src/sys/args/windows.rs):
    - quotes around anything but ASCII letters, digits and #$*+-./:?@\\_, around an empty
      argument and one that ends in a backslash: inside quotes cmd takes & | < > ^ ( ) , ; =
      and spaces as text;
    - an embedded `"` doubled (`""` toggles cmd's quote state twice, so nothing is exposed;
      `\\"` would close the quotes for cmd), with the backslashes before it doubled, as those
      before the closing quote are;
    - `%` written `%%cd:~,%`: `%cd:~,%` is an empty slice of the always-defined CD (command
      extensions on), which keeps cmd from reading `%NAME%` even inside quotes.
    `!` stays text under /v:OFF. CR, LF and NUL cannot be passed (_batch_line refuses them)."""
    quote = not arg or arg.endswith("\\") or any(
        (c.isascii() and not (c.isalnum() or c in "#$*+-./:?@\\_")) or unicodedata.category(c)
        == "Cc" for c in arg)
    out, slashes = ['"'] if quote else [], 0
    for c in arg:
        if c == "\\":
            slashes += 1
        else:
            if c == '"':
                out.append("\\" * slashes + '"')
            elif c == "%":
                out.append("%%cd:~,")
            slashes = 0
        out.append(c)
    if quote:
        out.append("\\" * slashes + '"')
    return "".join(out)


def _batch_line(script: str, args: List[str], cmd_exe: str) -> str:
    """Windows: the whole command line that runs the batch file `script` with `args` through
    cmd.exe (Popen takes a string as it is). /d: no AutoRun commands; /e:ON for the %cd:~,%
    above; /v:OFF so `!` is text; /s /c "...": cmd drops exactly the outer quotes.
    UpstreamError for what cannot be passed safely, naming it."""
    if '"' in script or script.endswith("\\") or re.search(r"[\r\n\0]", script):
        raise UpstreamError(f"cannot run the batch file {script!r}: its path holds a quote, a "
                            f"line break or a trailing backslash")
    for i, arg in enumerate(args):
        if re.search(r"[\r\n\0]", arg):
            raise UpstreamError(
                f"args[{i}] ({arg[:40]!r}{'...' if len(arg) > 40 else ''}) holds a line break or "
                f"NUL, which cmd.exe cannot pass to the batch file {os.path.basename(script)} "
                f"(it would end the command there). Pass the value in the entry's \"env\" "
                f"instead, or run the program the batch file runs (node.exe ...) directly")
    words = ['"' + script.replace("%", "%%cd:~,%") + '"'] + [_cmd_quote(a) for a in args]
    return f'"{cmd_exe}" /d /e:ON /v:OFF /s /c "{" ".join(words)}"'


def _launch(path: str, args: List[str], environ: Dict[str, str]) -> Any:
    """What Popen runs for the resolved `path` and `args`: the argv list, or on Windows, for a
    batch file (npx.cmd, npm.cmd, every npm-installed server), _batch_line's string, since
    Python's list2cmdline quoting is not cmd.exe's (`a&b` would run b, %VAR% would expand).
    cmd.exe is the one of the system folder, never a cmd.exe found in the current folder."""
    if not (_WINDOWS and _is_batch(path)):
        return [path] + args
    root = _env_get(environ, "SystemRoot") or "C:\\Windows"
    return _batch_line(path, args, "\\".join([root.rstrip("\\/"), "System32", "cmd.exe"]))


def _start_process(spec: _ServerSpec, environ: Dict[str, str],
                   spawn: Callable[..., Any] = subprocess.Popen) -> Any:
    """Start a local upstream's process (`spawn`: subprocess.Popen's signature), its three
    pipes unbuffered; OSError or UpstreamError if it cannot."""
    # Abstract's own variables (ABSTRACT_CACHE_SECRET above all) stay with Abstract unless the
    # entry's env names them; upper(): Windows names ignore case.
    env = {k: v for k, v in environ.items() if not k.upper().startswith("ABSTRACT_")}
    _env_merge(env, spec.env)
    # an Abstract started through this one refuses to run
    env["ABSTRACT_PARENT"] = str(os.getpid())
    argv = _launch(_resolve_command(spec, env), spec.args, environ)  # (a str: batch files)
    kw: Dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE,
                          "stderr": subprocess.PIPE, "bufsize": 0, "env": env,
                          "cwd": spec.cwd or None}
    if _WINDOWS:  # no console window flashing up for each upstream
        kw["creationflags"] = getattr(subprocess, "CREATE_NO_WINDOW", 0)
    else:  # its own process group, so shutdown can signal the upstream's children too
        kw["start_new_session"] = True
    return spawn(argv, **kw)


def _exit_text(code: Optional[int]) -> str:
    """How the process ended, for an error message."""
    if code is None:
        return "closed its output"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class _Follow:
    """A 2026-07-28 client's request as the upstream call behind it sees it: the client's own
    capabilities (passed on in a modern upstream's _meta), what its follow-up brings for the
    upstream (inputResponses, the upstream's requestState), the held call it continues (a
    handshake-era upstream's, see _QuestionRelay.hold), the round it is, and whom the
    credential of its client names (--serve: _Caller.owner; a question asked for another's call
    is never handed to it)."""

    __slots__ = ("key", "caps", "retry", "hold", "round", "held", "asked", "owner")

    def __init__(self, key: str, caps: dict, retry: dict, hold: str = "", rnd: int = 0) -> None:
        self.key, self.caps, self.retry, self.hold, self.round = key, caps, retry, hold, rnd
        self.held = ""  # a call held for this request's client: the hold it is kept under
        self.asked: Future = Future()  # a handshake-era upstream's question handed to this call
        self.owner: Optional[str] = None  # (set as it waits: _QuestionRelay._wait_for_questions)


class _Question:
    """A handshake-era upstream's sampling/createMessage or elicitation/create put to a
    2026-07-28 client as an input_required result: its key there, the client's answer, and
    whose call it is for (the credential _Caller.owner names; None over stdio)."""

    __slots__ = ("key", "method", "params", "answer", "owner")

    def __init__(self, key: str, method: str, params: Any, owner: Optional[str] = None) -> None:
        self.key, self.method, self.params, self.owner = key, method, params, owner
        self.answer: Future = Future()


class _Caller:
    """The client session a call came from, when Abstract serves several at once (--serve): the
    capabilities it declared, ask(method, params) -> (connection, id, future), which puts a
    request to that session (on the stream of the call that caused it), and whom the credential
    that opened it names (`owner`; None without one, however the session says so: a
    handshake-era session's is "", the shared 2026-07-28 one's None, and both are no one's)."""

    __slots__ = ("caps", "ask", "owner")

    def __init__(self, caps: dict, ask: Callable[[str, Any], Tuple[Connection, int, Future]],
                 owner: Optional[str] = None) -> None:
        self.caps, self.ask, self.owner = caps, ask, owner or None


# the _Caller of the request the current thread is handling (set by the session serving it;
# unset over stdio, where there is one client)
_CALLER = threading.local()


def _caller() -> Optional[_Caller]:
    return getattr(_CALLER, "who", None)


class _ClientLink:
    """Abstract's own client as the upstreams see it (docs/reference/protocol.md): the client
    capabilities it declared in initialize and the logging level it set, passed on to each
    upstream, and the requests an upstream sends the client (roots/list, sampling/createMessage,
    elicitation/create), relayed to it as Abstract's own. Roots: in mode "client" an upstream is
    offered roots only when the client declared them, and its roots/list is relayed;
    "allowed_directories" offers Abstract's folders instead; "none" offers nothing."""

    # what an upstream may ask the client, and the capability the client must have declared
    QUESTIONS = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation"}

    def __init__(self, mode: str, allowed: List[dict], timeout: float = _ROOTS_TIMEOUT_S) -> None:
        self.mode, self.allowed, self._timeout = mode, allowed, timeout
        self._conn: Optional[Connection] = None  # the client's session, once it initialized
        # the client capabilities Abstract relays (roots, sampling, elicitation)
        self.caps: dict = {}
        self._asking = threading.BoundedSemaphore(4)  # an upstream's flood of roots/list: bounded
        # the client's logging/setLevel, passed on to every upstream (_Protocol.apply_level, or
        # in each 2026-07-28 request's _meta)
        self.log_level = ""
        self._states = _Signer(os.urandom(32))  # the requestStates given to 2026-07-28 clients
        self.shared = False  # several clients at once (serve_many)

    def serve_many(self) -> None:
        """Several client sessions share the upstreams (--serve): each upstream is offered
        sampling and elicitation whatever any one session declared (it decides once, in its
        initialize, whether it may ask), and roots in mode "client"; each question goes to the
        session of the call that caused it (_Caller), refused (-32601) when that session did
        not declare the capability."""
        self.shared = True
        self.caps = {"sampling": {}, "elicitation": {}}
        if self.mode == "client":
            self.caps["roots"] = {}

    def client_declared(self, caps: Any, conn: Connection) -> None:
        """The client's initialize: its capabilities, and the session to ask it through."""
        if self.shared:  # (each session keeps its own: _Caller)
            return
        caps = caps if isinstance(caps, dict) else {}
        self.caps = {k: caps[k] for k in ("roots", "sampling", "elicitation")
                     if isinstance(caps.get(k), dict)}
        self._conn = conn

    def modern_declared(self, caps: Any) -> None:
        """A 2026-07-28 client's request: its sampling and elicitation, offered to upstreams
        started from now on (their questions reach it as input_required results during a call;
        it has no session, so not roots). A handshake-era client's initialize wins."""
        if self._conn is None and isinstance(caps, dict) and not self.shared:
            self.caps = {k: caps[k] for k in ("sampling", "elicitation")
                         if isinstance(caps.get(k), dict)}

    def follow(self, req: Optional[_Request], key: str) -> Optional[_Follow]:
        """For a 2026-07-28 client's request (None for any other), keyed by what it asks
        (method, server, name): its capabilities, and what a follow-up brings. A requestState
        that Abstract did not give for this same request, or that expired, is refused."""
        meta = req.meta if req is not None else {}
        if _META_VERSION not in meta:
            return None
        got = meta.get(_META_CAPS) if isinstance(meta.get(_META_CAPS), dict) else {}
        caps = {k: got[k] for k in ("sampling", "elicitation", "roots")
                if isinstance(got.get(k), dict)}
        params: dict = req.params  # type: ignore[union-attr, assignment]  (modern: always params)
        retry: dict = {}
        if "inputResponses" in params:
            if not isinstance(params["inputResponses"], dict):
                raise UpstreamError("inputResponses must be an object of answers by the "
                                    "inputRequests' keys", _INVALID_PARAMS)
            retry["inputResponses"] = params["inputResponses"]
        if params.get("requestState") is None:
            return _Follow(key, caps, retry)
        state = self._open(params["requestState"], key)
        if isinstance(state.get("u"), str):
            retry["requestState"] = state["u"]  # the upstream's own, exactly as it gave it
        return _Follow(key, caps, retry, str(state.get("h") or ""), int(state.get("r") or 0))

    def _open(self, state: Any, key: str) -> dict:
        bad = UpstreamError("requestState is not one Abstract gave for this request (changed, for "
                            "another server, tool, prompt or resource, given to another "
                            "credential, or from an earlier run of Abstract); send the request "
                            "again without inputResponses and requestState", _INVALID_PARAMS)
        if not isinstance(state, str) or len(state) > 2 * _STATE_MAX or state.count(".") != 1:
            raise bad
        body, sig = state.split(".")
        if not self._states.check(self._bound(body), 0, sig):
            raise bad
        got = json.loads(base64.urlsafe_b64decode(body.encode("ascii")))
        if got.get("k") != key:
            raise bad
        if got.get("x", 0) < time.time():
            raise UpstreamError(f"requestState expired (Abstract's are good for "
                                f"{_STATE_TTL_S:g} s); send the request again without "
                                f"inputResponses and requestState", _INVALID_PARAMS)
        return got

    @staticmethod
    def _bound(body: str) -> str:
        """What a requestState's signature covers: its body and, over --serve, whom the
        credential of the call names (_Caller.owner), so that another credential's follow-up
        cannot continue the call (its held question is its caller's); the owner is not in
        the body, which the client reads."""
        who = _caller()
        return f"{body}\n{who.owner}" if who is not None and who.owner else body

    def seal(self, follow: _Follow, res: dict, what: str) -> dict:
        """The input_required result for a 2026-07-28 client: the upstream's inputRequests as
        they are, and a requestState of Abstract's own naming the request (follow.key) and
        carrying the upstream's requestState or the held call. Signed, so a client cannot change
        it to reach another server, tool, prompt or resource; no state is kept for it."""
        asks = res.get("inputRequests")
        if asks is not None and (not isinstance(asks, dict) or len(asks) > _INPUT_REQUESTS_MAX):
            raise UpstreamError(f"{what} answered input_required with inputRequests that are not "
                                f"an object of at most {_INPUT_REQUESTS_MAX} requests")
        if follow.round + 1 > _INPUT_ROUNDS:
            raise UpstreamError(f"{what} still asked for input after {_INPUT_ROUNDS} rounds, so "
                                f"the call was given up")
        state: dict = {"k": follow.key, "x": int(time.time() + _STATE_TTL_S), "r": follow.round + 1}
        theirs = res.get("requestState")
        if isinstance(theirs, str):
            if len(theirs) > _STATE_MAX:
                raise UpstreamError(f"{what} answered input_required with a requestState of "
                                    f"{len(theirs):,} characters; Abstract carries up to "
                                    f"{_STATE_MAX:,}")
            state["u"] = theirs
        if follow.held:
            state["h"] = follow.held
        body = base64.urlsafe_b64encode(_dumps(state).encode()).decode("ascii")
        out: dict = {"resultType": "input_required",
                     "requestState": f"{body}.{self._states.sign(self._bound(body), 0)}"}
        if asks:
            out["inputRequests"] = asks
        return out

    def roots_offered(self) -> bool:
        """Whether upstreams are told, in initialize, that Abstract has roots."""
        return self.mode == "allowed_directories" or (self.mode == "client"
                                                      and "roots" in self.caps)

    def offered(self) -> dict:
        """The capabilities an upstream starting now is given: the client's sampling and
        elicitation as the client declared them (elicitation's form/url modes included), and
        roots as the roots setting says."""
        caps = {k: v for k, v in self.caps.items() if k != "roots"}
        if self.roots_offered():
            caps["roots"] = {"listChanged": self.mode == "client"}
        return caps

    def list(self, who: Optional[_Caller] = None) -> dict:
        """The answer to an upstream's roots/list. Several sessions (shared): the roots of the
        session whose call is in flight at that upstream (`who`) when it declared roots, else
        Abstract's allowed folders."""
        if self.mode == "allowed_directories" or (self.shared and (
                who is None or "roots" not in who.caps)):
            return {"roots": list(self.allowed)}
        if self.shared:
            return self._roots_of(who)  # type: ignore[arg-type]
        if self._conn is None or self.mode != "client" or "roots" not in self.caps:
            raise RpcError(_METHOD_NOT_FOUND, "Method not found: roots/list (the client declared "
                           "no roots)")
        if not self._asking.acquire(blocking=False):
            raise RpcError(_BUSY, "too many roots/list requests at once; ask again when one is "
                           "answered")
        try:
            res = self._conn.call("roots/list", None, self._timeout)
        finally:
            self._asking.release()
        return self._roots(res)

    def _roots_of(self, who: _Caller) -> dict:
        """roots/list asked of one session (shared), within the same bounds."""
        if not self._asking.acquire(blocking=False):
            raise RpcError(_BUSY, "too many roots/list requests at once; ask again when one is "
                           "answered")
        try:
            conn, mid, fut = who.ask("roots/list", None)
            try:
                res = fut.result(self._timeout)
            except FutureTimeout:
                raise RpcError(_REQUEST_TIMEOUT, "the client did not answer roots/list in "
                               "time") from None
            finally:
                conn.forget(mid)
        finally:
            self._asking.release()
        return self._roots(res)

    @staticmethod
    def _roots(res: Any) -> dict:
        roots = res.get("roots") if isinstance(res, dict) else None
        if not isinstance(roots, list):
            raise RpcError(_INTERNAL_ERROR, "the client's roots/list answer holds no roots list")
        return {"roots": roots}

    def send(self, method: str, params: Any,
             who: Optional[_Caller] = None) -> Tuple[Connection, int, Future]:
        """Relay an upstream's sampling/createMessage or elicitation/create to the client as a
        request of Abstract's own (a fresh id); -32601 at once if the client cannot take it.
        Several sessions (shared): to the session `who` of the call that caused it."""
        cap = self.QUESTIONS[method]
        if self.shared:
            if who is None or cap not in who.caps:
                raise RpcError(_METHOD_NOT_FOUND, f"Method not found: {method} (" + (
                    f"the client session whose call caused it did not declare the {cap} "
                    f"capability)" if who is not None else "no client session has a call in "
                    "flight at this server to ask it for)"))
            return who.ask(method, params)
        conn = self._conn
        if conn is None and cap in self.caps:
            raise RpcError(_METHOD_NOT_FOUND, f"Method not found: {method} (Abstract's client "
                           f"speaks 2026-07-28, and is asked only during a call "
                           f"to this server)")
        if conn is None or cap not in self.caps:
            raise RpcError(_METHOD_NOT_FOUND, f"Method not found: {method} (Abstract's client did "
                           f"not declare the {cap} capability)")
        mid, fut = conn.request(method, params)
        return conn, mid, fut

    def fulfil(self, res: dict, req: Optional[_Request], what: str) -> dict:
        """The retry params (inputResponses, requestState) for a 2026-07-28 input_required result:
        each of its inputRequests asked of the client as the handshake-era request it is. `what`
        names the call for errors."""
        asks = res.get("inputRequests") or {}
        if not isinstance(asks, dict) or len(asks) > _INPUT_REQUESTS_MAX:
            raise UpstreamError(f"{what} answered input_required with inputRequests that are not "
                                f"an object of at most {_INPUT_REQUESTS_MAX} requests")
        answers = {}
        for key, ask in asks.items():
            method = ask.get("method") if isinstance(ask, dict) else None
            try:
                if method == "roots/list":
                    answers[key] = self.list(_caller())
                elif method in self.QUESTIONS:
                    answers[key] = self._ask(method, ask.get("params"), req)
                else:
                    raise RpcError(_METHOD_NOT_FOUND, f"{method!r} is not a request a server may "
                                   f"ask of a client")
            except RpcError as e:
                raise UpstreamError(f"{what} needs input from the client ({method}) that Abstract "
                                    f"could not get: {e.message}") from None
        out: dict = {"inputResponses": answers}
        if isinstance(res.get("requestState"), str):
            out["requestState"] = res["requestState"]  # echoed exactly (spec: opaque to clients)
        return out

    def _ask(self, method: str, params: Any, req: Optional[_Request]) -> Any:
        """One question asked for a call (not for a request of the upstream's): the client
        cancelling that call withdraws it."""
        conn, mid, fut = self.send(method, params if isinstance(params, dict) else {},
                                   _caller())
        if req is not None:
            req.on_cancel(lambda: None if fut.done() else self.withdraw(
                conn, mid, _Cancelled(), "the client cancelled the tool call that asked"))
        return self.wait(conn, mid, fut)

    def elicitation_complete(self, params: Any) -> None:
        """An upstream's notifications/elicitation/complete (a URL-mode elicitation finished out
        of band), passed to a client that declared URL-mode elicitation; its elicitationId is
        the upstream's own, which the client saw in the relayed elicitation/create."""
        conn, cap = self._conn, self.caps.get("elicitation")
        if (conn is not None and not self.shared and isinstance(cap, dict) and "url" in cap
                and isinstance(params, dict)):
            conn.notify("notifications/elicitation/complete", params)

    @staticmethod
    def withdraw(conn: Connection, mid: int, exc: BaseException, reason: str) -> None:
        """Cancel a relayed request: the client hears notifications/cancelled for our id."""
        conn.notify("notifications/cancelled", {"requestId": mid, "reason": reason})
        conn.forget(mid, exc)

    def wait(self, conn: Connection, mid: int, fut: Future) -> Any:
        """The client's answer to a relayed request, as it is (its error raised as RpcError).
        A person may be answering, so the wait is long, but bounded (_ASK_TIMEOUT_S)."""
        try:
            return fut.result(_ASK_TIMEOUT_S)
        except FutureTimeout:
            self.withdraw(conn, mid, _Cancelled(), f"no answer within {_ASK_TIMEOUT_S:g} s")
            raise RpcError(_REQUEST_TIMEOUT, f"Abstract's client did not answer within "
                           f"{_ASK_TIMEOUT_S:g} s") from None
        finally:
            conn.forget(mid)


class _Pending:
    """A tools/call sent upstream and not yet answered."""

    __slots__ = ("run", "conn", "mid", "fut", "token", "modern", "task", "task_id", "who")

    def __init__(self, run: _Run, mid: int, fut: Future, token: str, modern: bool,
                 task: bool) -> None:
        self.run, self.conn, self.mid, self.fut, self.token = run, run.conn, mid, fut, token
        self.who = _caller()  # the client session that made the call (--serve), or None
        self.modern = modern  # a 2026-07-28 client's call of a handshake-era upstream
        self.task = task  # sent as a task of Abstract's own, to be awaited (_Upstream._task_result)
        self.task_id = ""  # ... once the upstream made it


class _QuestionRelay:
    """One upstream's questions for the client (sampling/createMessage, elicitation/create), and
    the calls held for them: what it asks is relayed to Abstract's client (_ClientLink), and
    while a question is pending its calls do not time out (wait). During a 2026-07-28 client's
    call a handshake-era upstream's question is handed to that call instead, which holds (the
    call stays open upstream) and answers its client with input_required; the client's
    follow-up continues it (resume). A 2026-07-28 upstream's input_required rounds: rounds."""

    def __init__(self, name: str, client: _ClientLink, modern: Callable[[], bool]) -> None:
        # modern(): whether the upstream speaks 2026-07-28 (its _Protocol, as its run found it)
        self.name, self._client, self._modern = name, client, modern
        self._lock = threading.Lock()
        # questions relayed to the client and not yet answered (their withdraw functions), and
        # when the last one ended: the calls' deadlines wait for them
        self._questions: Dict[int, Callable[[str], None]] = {}
        self._answered_at = 0.0
        self._calls = 0  # tools/call requests in flight
        self._callers: List[_Caller] = []  # ... their client sessions (--serve), newest last
        # the tasks Abstract's calls became (2025-11-25), by taskId -> the call's client session:
        # a question that names its task (_RELATED_TASK) goes to that session
        self._tasks: Dict[str, _Caller] = {}
        # a 2026-07-28 client's calls of a handshake-era upstream: the upstream's questions are
        # handed to one waiting (_waiters) as input_required, or kept until one waits (_unclaimed);
        # the calls held for the client's follow-up (_holds), by hold key
        self._modern_calls = 0
        self._waiters: List[_Follow] = []
        self._unclaimed: List[_Question] = []
        self._holds: Dict[str, Tuple[_Pending, _Question]] = {}
        self._tokens = itertools.count(1)

    def handlers(self) -> Dict[str, _Handler]:
        """What Abstract answers when an upstream asks: ping, roots/list when roots are offered,
        and the questions for the client (sampling, elicitation), relayed (-32601 when the client
        cannot take them)."""
        methods: Dict[str, _Handler] = {"ping": lambda r: {}}
        if self._client.roots_offered():
            methods["roots/list"] = lambda r: self._client.list(self._roots_asker(r.params))
        for method in _ClientLink.QUESTIONS:
            methods[method] = self.question
        return methods

    # -- the calls in flight
    def sent(self, modern: bool) -> None:
        """A tools/call went upstream (`modern`: a 2026-07-28 client's call)."""
        who = _caller()
        with self._lock:
            self._calls += 1
            self._modern_calls += modern
            if who is not None:
                self._callers.append(who)

    def tasked(self, p: _Pending) -> None:
        """The call `p` became the upstream's task p.task_id: a question that names it goes to
        the call's session."""
        if p.who is not None:
            with self._lock:
                self._tasks[p.task_id] = p.who

    def done(self, p: _Pending) -> None:
        """A call sent upstream ended (answered, failed, or given up)."""
        with self._lock:
            self._calls -= 1
            self._modern_calls -= p.modern
            if p.who in self._callers:
                self._callers.remove(p.who)
            self._tasks.pop(p.task_id, None)
        p.conn.forget(p.mid)

    def _asker(self, params: Any = None) -> Optional[_Caller]:
        """The client session an upstream's question (its `params`) goes to (--serve): the
        session of the task it names (_meta's io.modelcontextprotocol/related-task, 2025-11-25),
        else the one whose call is in flight at this upstream; with several sessions' calls in
        flight at once (a request over stdio does not say which call it is for: an SDK's related
        request id stays in the SDK), the one whose call was sent last. A tool asks before it
        does its work, so the call that just started is the likeliest asker; a call that has been
        running a while (server-everything's long operation beside its elicitation tool) is not.
        A guess is made only among sessions of one credential (one user's): with calls of
        sessions opened with different ones in flight, the question is refused (-32601), since
        a wrong guess would ask one user another's question and hand its answer back."""
        meta = params.get("_meta") if isinstance(params, dict) else None
        task = meta.get(_RELATED_TASK) if isinstance(meta, dict) else None
        task_id = task.get("taskId") if isinstance(task, dict) else None
        with self._lock:
            if isinstance(task_id, str) and task_id in self._tasks:
                return self._tasks[task_id]
            if not self._callers:
                return None
            last = self._callers[-1]
            if any(c.owner != last.owner for c in self._callers):
                raise RpcError(_METHOD_NOT_FOUND, "Method not found: calls of several users' "
                               "sessions are in flight at this server and its request does not "
                               "say which call it is for, so no one is asked (Abstract --serve)")
            return last

    def _roots_asker(self, params: Any) -> Optional[_Caller]:
        """The session whose roots an upstream's roots/list gets (_asker); none (Abstract's
        allowed folders) when that is not known."""
        try:
            return self._asker(params)
        except RpcError:
            return None

    def withdraw_all(self, reason: str) -> None:
        """The client cancelled a call: the questions pending at the client are withdrawn when
        it was the only call in flight (with several, which call a question belongs to is not
        known: those are left for the upstream to cancel)."""
        with self._lock:
            questions = list(self._questions.values()) if self._calls <= 1 else []
        for withdraw in questions:
            withdraw(reason)

    # -- the upstream's questions
    def question(self, req: _Request) -> Any:
        """An upstream's sampling/createMessage or elicitation/create, asked of the client. While
        it is pending, this upstream's calls do not time out (wait); the upstream cancelling it
        cancels it at the client."""
        if req.cancelled.is_set():  # cancelled before a worker took it: nothing to relay
            raise _Cancelled()
        with self._lock:
            park = 0 < self._modern_calls == self._calls  # every call in flight: a modern client's
        if park:
            return self._park(req)
        conn, mid, fut = self._client.send(req.method, req.params, self._asker(req.params))
        key = next(self._tokens)

        def withdraw(reason: str, exc: Optional[BaseException] = None) -> None:
            self._client.withdraw(conn, mid, exc or RpcError(_INTERNAL_ERROR, reason), reason)

        with self._lock:
            self._questions[key] = withdraw
        req.on_cancel(lambda: withdraw(f"cancelled by server '{self.name}'", _Cancelled()))
        try:
            return self._client.wait(conn, mid, fut)
        finally:
            with self._lock:
                self._questions.pop(key, None)
                self._answered_at = time.monotonic()

    def _park(self, req: _Request) -> Any:
        """An upstream's question while only 2026-07-28 clients' calls are in flight: handed to
        one of them, which answers its client with input_required (hold); the
        client's follow-up brings the answer. -32601 at once if the client cannot take it; an
        error when it does not follow up within _HOLD_S (the call is then cancelled). Only a
        call of the asker's credential takes it (--serve: _asker; with calls of several
        credentials in flight, -32601)."""
        cap = _ClientLink.QUESTIONS[req.method]
        if cap not in self._client.caps:
            raise RpcError(_METHOD_NOT_FOUND, f"Method not found: {req.method} (Abstract's client "
                           f"did not declare the {cap} capability)")
        who = self._asker(req.params)
        q = _Question(f"{self.name}-{next(self._tokens)}", req.method, req.params,
                      who.owner if who is not None else None)

        def withdraw(reason: str, exc: Optional[BaseException] = None) -> None:
            _settle(q.answer, exc=exc or RpcError(_INTERNAL_ERROR, reason))

        with self._lock:
            self._questions[id(q)] = withdraw
            waiter = next((w for w in self._waiters
                           if not w.asked.done() and w.owner == q.owner), None)
            if waiter is None:
                self._unclaimed.append(q)
            else:
                waiter.asked.set_result(q)
        req.on_cancel(lambda: withdraw(f"cancelled by server '{self.name}'", _Cancelled()))
        try:
            return q.answer.result(_HOLD_S)
        except FutureTimeout:
            self._expire(q)
            raise RpcError(_REQUEST_TIMEOUT, f"Abstract's 2026-07-28 client did not follow up with "
                           f"an answer within {_HOLD_S:g} s") from None
        finally:
            with self._lock:
                self._questions.pop(id(q), None)
                self._answered_at = time.monotonic()
                if q in self._unclaimed:
                    self._unclaimed.remove(q)

    def _expire(self, q: _Question) -> None:
        """A question's client never followed up: the call held for it is cancelled."""
        with self._lock:
            key = next((k for k, (_, held) in self._holds.items() if held is q), "")
        self._release(key, "the client did not follow up")

    def _release(self, key: str, reason: str) -> None:
        """Give up a held call: its question is answered with an error, the call cancelled."""
        with self._lock:
            got = self._holds.pop(key, None)
        if got is not None:
            p, q = got
            _settle(q.answer, exc=RpcError(_INTERNAL_ERROR, reason))
            p.conn.notify("notifications/cancelled", {"requestId": p.mid, "reason": reason})
            self.done(p)

    def wait(self, fut: Future, limit: float, follow: Optional[_Follow] = None,
             spent: float = 0.0) -> Any:
        """fut's result within `limit` seconds (less the `spent` already: the wait for the
        server's start), not counting the wait for the user: while a question to the client is
        pending the deadline does not pass, and once one is answered the call gets `limit`
        seconds again, counted from the answer. For a 2026-07-28 client's call (`follow`), the
        upstream's question handed to it instead (a _Question), if one comes first."""
        import concurrent.futures

        asked = None if follow is None else self._wait_for_questions(follow)
        deadline = time.monotonic() + limit - spent
        took = False
        try:
            while True:
                if asked is None:  # (one future: its own wait, without wait()'s waiter object)
                    with contextlib.suppress(FutureTimeout):
                        fut.exception(max(0.0, deadline - time.monotonic()))
                else:
                    concurrent.futures.wait([fut, asked], max(0.0, deadline - time.monotonic()),
                                            concurrent.futures.FIRST_COMPLETED)
                if asked is not None and asked.done():
                    took = True
                    return asked.result()
                if fut.done():
                    return fut.result()
                with self._lock:
                    pending, answered = bool(self._questions), self._answered_at
                now = time.monotonic()
                if pending:
                    deadline = now + limit
                elif answered + limit > now:
                    deadline = answered + limit
                else:
                    raise FutureTimeout()
        finally:
            if follow is not None:
                self._stop_waiting(follow, took)

    def _wait_for_questions(self, follow: _Follow) -> Future:
        """Let this call take the upstream's next question for its credential (one kept for
        nobody, at once)."""
        follow.asked = Future()
        who = _caller()
        follow.owner = who.owner if who is not None else None
        with self._lock:
            kept = next((q for q in self._unclaimed if q.owner == follow.owner), None)
            if kept is not None:
                self._unclaimed.remove(kept)
                follow.asked.set_result(kept)
            else:
                self._waiters.append(follow)
        return follow.asked

    def _stop_waiting(self, follow: _Follow, took: bool) -> None:
        """The call stops waiting: when it got its result (or failed), a question handed to it
        meanwhile goes to the next call that waits."""
        with self._lock:
            if follow in self._waiters:
                self._waiters.remove(follow)
            q = follow.asked.result() if follow.asked.done() and not took else None
            if q is not None and not q.answer.done():
                self._unclaimed.insert(0, q)

    def hold(self, p: _Pending, q: _Question, follow: _Follow) -> dict:
        """A handshake-era upstream asked during a 2026-07-28 client's call: the call is held
        (still open upstream, its question waiting in _park) and the client gets the question
        as an input_required result; its follow-up continues the call (resume). The caller
        stops relaying its progress: the client's request it reported to is answered."""
        key = f"{next(self._tokens)}"
        with self._lock:
            self._holds[key] = (p, q)
        follow.held = key
        ask = {"method": q.method, "params": q.params}
        return {"resultType": "input_required", "inputRequests": {q.key: ask}}

    def resume(self, follow: _Follow) -> _Pending:
        """A 2026-07-28 client's follow-up to a held call: its answer goes to the upstream's
        question (a follow-up without it is asked the same question again); the held call."""
        with self._lock:
            got = self._holds.pop(follow.hold, None)
        if got is None:
            raise UpstreamError(f"the call this requestState continues is no longer held by "
                                f"Abstract (no follow-up within {_HOLD_S:g} s, already continued, "
                                f"or server '{self.name}' restarted); send the request again "
                                f"without inputResponses and requestState", _INVALID_PARAMS)
        p, q = got
        answers = follow.retry.get("inputResponses") or {}
        if q.key in answers:
            _settle(q.answer, answers[q.key])
        else:
            with self._lock:
                self._unclaimed.insert(0, q)  # asked again at once (_wait_for_questions)
        return p

    def rounds(self, req: Optional[_Request], key: str, what: str,
               once: Callable[[dict, Optional[_Follow]], Any]) -> Any:
        """once(retry, follow) until it completes. A 2026-07-28 upstream's input_required result
        is answered by asking a handshake-era client (the requests it understands) and the
        request retried with the answers; a 2026-07-28 client (`follow`) gets it instead, as
        _InputRequired with Abstract's requestState, and so does a handshake-era upstream's
        question during such a client's call (hold)."""
        follow = self._client.follow(req, key)
        retry = follow.retry if follow is not None else {}
        for _ in range(_INPUT_ROUNDS):
            res = once(retry, follow)
            if not (isinstance(res, dict) and res.get("resultType") == "input_required"):
                return res
            if follow is not None and (self._modern() or follow.held):
                try:
                    raise _InputRequired(self._client.seal(follow, res, what))
                except UpstreamError as e:  # (too many rounds)
                    self._release(follow.held, e.message)
                    raise
            if not self._modern():
                return res  # (the caller says why a handshake-era upstream's cannot be relayed)
            retry = self._client.fulfil(res, req, what)
        raise UpstreamError(f"{what} still asked for input after {_INPUT_ROUNDS} rounds, so the "
                            f"call was given up")


# -- what the upstreams start in turn (docs/design.md#descendants)

_PR_SET_CHILD_SUBREAPER = 36  # Linux, <linux/prctl.h>
_REAP_EVERY_S = 5.0  # Linux: how often the adopted orphans that exited are reaped
# Windows, <winnt.h>: SetInformationJobObject's JobObjectExtendedLimitInformation class, and the
# limit that ends every process of a job when its last handle closes
_JOB_EXTENDED_LIMITS = 9
_JOB_KILL_ON_CLOSE = 0x2000


def _job_limits_type() -> Any:
    """JOBOBJECT_EXTENDED_LIMIT_INFORMATION as a ctypes Structure: 144 bytes on 64-bit Windows,
    112 on 32-bit (https://learn.microsoft.com/windows/win32/api/winnt/
    ns-winnt-jobobject_extended_limit_information). LARGE_INTEGER and ULONGLONG are 64-bit,
    DWORD 32-bit, SIZE_T and ULONG_PTR the width of a pointer."""
    import ctypes  # lazy: see Imports

    class Basic(ctypes.Structure):  # JOBOBJECT_BASIC_LIMIT_INFORMATION
        _fields_ = [("PerProcessUserTimeLimit", ctypes.c_int64),
                    ("PerJobUserTimeLimit", ctypes.c_int64),
                    ("LimitFlags", ctypes.c_uint32),
                    ("MinimumWorkingSetSize", ctypes.c_size_t),
                    ("MaximumWorkingSetSize", ctypes.c_size_t),
                    ("ActiveProcessLimit", ctypes.c_uint32),
                    ("Affinity", ctypes.c_size_t),
                    ("PriorityClass", ctypes.c_uint32),
                    ("SchedulingClass", ctypes.c_uint32)]

    class Io(ctypes.Structure):  # IO_COUNTERS
        _fields_ = [(f"{what}{unit}", ctypes.c_uint64) for unit in ("OperationCount",
                                                                    "TransferCount")
                    for what in ("Read", "Write", "Other")]

    class Extended(ctypes.Structure):
        _fields_ = [("BasicLimitInformation", Basic), ("IoInfo", Io),
                    ("ProcessMemoryLimit", ctypes.c_size_t), ("JobMemoryLimit", ctypes.c_size_t),
                    ("PeakProcessMemoryUsed", ctypes.c_size_t),
                    ("PeakJobMemoryUsed", ctypes.c_size_t)]

    return Extended


def _kernel32() -> Any:
    """Windows: kernel32 with the prototypes of the Job Object calls (HANDLE as c_void_p, so a
    64-bit handle is never cut to an int)."""
    import ctypes  # lazy: see Imports

    k = getattr(ctypes, "WinDLL")("kernel32", use_last_error=True)  # (Windows only)
    handle, ok, dword = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32  # HANDLE, BOOL, DWORD
    for name, restype, argtypes in (
            ("CreateJobObjectW", handle, (ctypes.c_void_p, ctypes.c_wchar_p)),
            ("SetInformationJobObject", ok, (handle, ctypes.c_int, ctypes.c_void_p, dword)),
            ("AssignProcessToJobObject", ok, (handle, handle)),
            ("TerminateJobObject", ok, (handle, ctypes.c_uint)),
            ("CloseHandle", ok, (handle,))):
        fn = getattr(k, name)
        fn.restype, fn.argtypes = restype, argtypes
    return k


class _WinJob:
    """Windows: a Job Object holding one upstream's process and every process it starts from
    then on (a child is created in its parent's job), made with kill-on-close: when its last
    handle closes (close() at the run's end, or Abstract's exit, however it exits) every process
    still in it ends. The handle is not inheritable, so no upstream holds the job open.
    https://learn.microsoft.com/windows/win32/procthread/job-objects"""

    def __init__(self, kernel32: Any, handle: int) -> None:
        self._k, self._handle = kernel32, handle
        self._lock = threading.Lock()

    @classmethod
    def create(cls, kernel32: Any, limits: Any, proc: Any) -> "_WinJob":
        """A new job holding `proc` (a Popen: its process handle), or OSError."""
        import ctypes  # lazy: see Imports

        def failed(call: str) -> OSError:  # (get_last_error: Windows only)
            code = getattr(ctypes, "get_last_error", lambda: 0)()
            return OSError(f"{call} failed with Windows error {code}")

        handle = kernel32.CreateJobObjectW(None, None)  # no name, default (not inherited)
        if not handle:
            raise failed("CreateJobObjectW")
        job = cls(kernel32, handle)
        info = limits()
        info.BasicLimitInformation.LimitFlags = _JOB_KILL_ON_CLOSE
        for call, done in (
                ("SetInformationJobObject", lambda: kernel32.SetInformationJobObject(
                    handle, _JOB_EXTENDED_LIMITS, ctypes.byref(info), ctypes.sizeof(info))),
                ("AssignProcessToJobObject", lambda: kernel32.AssignProcessToJobObject(
                    handle, int(proc._handle)))):
            if not done():
                error = failed(call)
                job.close()
                raise error
        return job

    def terminate(self) -> None:
        """End every process in the job at once (exit code 1)."""
        with self._lock:
            if self._handle:
                self._k.TerminateJobObject(self._handle, 1)

    def close(self) -> None:
        """Close the handle (once): kill-on-close ends what is left in the job."""
        with self._lock:
            handle, self._handle = self._handle, 0
        if handle:
            self._k.CloseHandle(handle)


def _prctl_subreaper(on: bool) -> None:
    """Linux: make this process the subreaper of its descendants (or stop), or OSError."""
    import ctypes  # lazy: see Imports

    libc = ctypes.CDLL(None, use_errno=True)
    args = [ctypes.c_ulong(v) for v in (int(on), 0, 0, 0)]  # (prctl is variadic: unsigned long)
    if libc.prctl(ctypes.c_int(_PR_SET_CHILD_SUBREAPER), *args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _children_of(pid: int) -> Dict[int, Tuple[str, int, int]]:
    """Linux: each child of `pid` -> (its state letter ("Z": exited, not yet reaped), its session,
    its start time in clock ticks since boot), from /proc/<pid>/stat (its fields after the
    command's closing parenthesis: state, ppid, pgrp, session... starttime is the 20th). A zombie
    keeps all three: its start time tells it from a later process given the same pid."""
    out: Dict[int, Tuple[str, int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                if int(fields[1]) == pid:
                    out[int(name)] = (fields[0].decode("ascii", "replace"), int(fields[3]),
                                      int(fields[19]))
            except (OSError, IndexError, ValueError):
                pass  # gone meanwhile
    return out


def _an_upstreams(pid: int, parent: int) -> bool:
    """Linux: whether process `pid` descends from one of the upstreams of Abstract `parent`: its
    environment carries the ABSTRACT_PARENT=<parent> every upstream is started with."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False
    return b"\0ABSTRACT_PARENT=%d\0" % parent in b"\0" + env + b"\0"


class _Descendants:
    """The upstream processes Abstract started, and what they start in turn, which must not
    outlive Abstract (docs/design.md#descendants). An upstream's process group is signalled at
    shutdown; what leaves the group (setsid, a double fork) is handled here:

    - Linux, while Abstract serves its own stdio (adopt()): Abstract is the subreaper of its
      descendants (prctl PR_SET_CHILD_SUBREAPER), so an orphan becomes its child rather than
      init's. reap() reaps those that exited (a subreaper must, or they stay zombies), never a
      process Popen started (an upstream, a browser, a worker: its wait() takes its exit status);
      end() kills those left at the exit.
    - Windows: each upstream process is put in a Job Object of its own (_WinJob, kill-on-close).
    - macOS has neither: a descendant that leaves its upstream's process group can outlive
      Abstract (docs/reference.md#shutdown).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: Set[int] = set()  # the pid of each upstream process not released
        self._jobs: Dict[int, _WinJob] = {}  # Windows: pid -> its job
        self._win: Any = None  # Windows: (kernel32, the limits' Structure), once loaded
        # Linux: the children seen running with an upstream's mark (_an_upstreams): pid -> start
        self._marked: Dict[int, int] = {}
        self._stop = threading.Event()
        self._reaper: Optional[threading.Thread] = None
        self.adopting = False

    # -- each upstream process, from _Run.__init__ to _Run.watch
    def add(self, proc: Any) -> None:
        pid = getattr(proc, "pid", None)
        if not isinstance(pid, int):
            return
        with self._lock:
            self._procs.add(pid)
        if _WINDOWS:
            self._contain(proc)

    def _contain(self, proc: Any) -> None:
        try:
            if self._win is None:
                self._win = (_kernel32(), _job_limits_type())
            job = _WinJob.create(self._win[0], self._win[1], proc)
        except (ImportError, AttributeError, OSError, ValueError) as e:
            _log.warning("could not put upstream process %s in a Job Object (%s): what it starts "
                         "may outlive Abstract", proc.pid, e)
            return
        with self._lock:
            self._jobs[proc.pid] = job

    def release(self, proc: Any) -> None:
        """The process ended: forget it; Windows: close its job (ending what is left in it)."""
        pid: Any = getattr(proc, "pid", None)
        with self._lock:
            self._procs.discard(pid)
            job = self._jobs.pop(pid, None)
        if job is not None:
            job.close()

    def end_tree(self, proc: Any) -> bool:
        """Windows: end the process and all in its job at once; False if it has no job."""
        with self._lock:
            job = self._jobs.get(proc.pid)
        if job is None:
            return False
        job.terminate()
        return True

    # -- Linux: the subreaper
    def adopt(self) -> bool:
        """Become the subreaper of the upstreams' descendants, reaping every _REAP_EVERY_S;
        False (logged) where that cannot be done."""
        if not sys.platform.startswith("linux"):
            return False
        try:
            _prctl_subreaper(True)
        except (ImportError, AttributeError, OSError) as e:  # no ctypes, no prctl in libc
            _log.warning("could not become the subreaper of the upstreams' descendants (%s): "
                         "one that leaves its process group may outlive Abstract", e)
            return False
        self.adopting = True
        self._stop.clear()
        self._reaper = threading.Thread(target=self._reap_every, name="abstract-reaper",
                                        daemon=True)
        self._reaper.start()
        return True

    def _reap_every(self) -> None:
        while not self._stop.wait(_REAP_EVERY_S):
            self.reap()

    def reap(self) -> None:
        """Reap the adopted orphans that exited, and no other child: one that Popen started (an
        upstream, a browser, a worker) is reaped by its own wait(), which would otherwise return
        0 or fail with ChildProcessError. An exited child is an orphan when a pass saw it run
        with an upstream's mark (the same pid and start time), or when its session is neither
        Abstract's nor its own (a process Abstract starts stays in Abstract's session or leads a
        new one). One that ran less than a pass in a session of its own stays a zombie until
        Abstract exits (init reaps it then)."""
        me, sid = os.getpid(), os.getsid(0)
        kids = _children_of(me)
        with self._lock:
            procs, marked = set(self._procs), self._marked
        ripe, seen = [], {}
        for pid, (state, session, start) in kids.items():
            if pid in procs:
                continue
            if state != "Z":
                if marked.get(pid) == start or _an_upstreams(pid, me):
                    seen[pid] = start
            elif marked.get(pid) == start or session not in (sid, pid):
                ripe.append(pid)
        with self._lock:
            self._marked = seen
        for pid in ripe:
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)

    def end(self, timeout: float = _STOP_KILL_S) -> None:
        """At the exit (the upstreams stopped): SIGKILL every adopted child that descends from an
        upstream, again and again as their own children come to Abstract when they die, until
        none is left or `timeout`; reap them; stop being a subreaper."""
        if not self.adopting:
            return
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join(_STOP_JOIN_S)
        me, deadline = os.getpid(), time.monotonic() + timeout
        while True:
            live = {pid: start for pid, (state, _, start) in _children_of(me).items()
                    if state != "Z" and _an_upstreams(pid, me)}
            with self._lock:
                self._marked.update(live)  # (reaped once dead)
            for pid in live:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.reap()
            if not live or time.monotonic() > deadline:
                break
            time.sleep(0.01)  # for the killed to die (bounded by the deadline)
        self.reap()
        with contextlib.suppress(ImportError, AttributeError, OSError):
            _prctl_subreaper(False)
        self.adopting = False


_DESCENDANTS = _Descendants()


def _mask_error_result(res: dict) -> None:
    """An upstream's isError result is an error too: the secrets of its text items (an embedded
    resource's text too) and of its structuredContent (keys and values) are masked, in place
    (its long strings were decoded for it; a result that is no error is the upstream's data,
    relayed as it came: docs/reference/errors.md)."""
    content = res.get("content")
    for item in content if isinstance(content, list) else ():
        for part in (item, item.get("resource")) if isinstance(item, dict) else ():
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                part["text"] = _SECRETS.mask(part["text"])
    if "structuredContent" in res:
        res["structuredContent"] = _SECRETS.mask_json(res["structuredContent"])


def _taskkill(pid: int) -> None:
    """Windows: end a process and its descendants (taskkill /T /F), bounded in time: for an
    upstream that could not be put in a Job Object."""
    args = ["taskkill", "/T", "/F", "/PID", str(pid)]
    try:
        subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL,
                       timeout=_STOP_TERM_S,
                       creationflags=getattr(subprocess, "CREATE_NO_WINDOW", 0))
    except (OSError, subprocess.TimeoutExpired):
        pass


def _terminate(proc: Any) -> None:
    """SIGTERM to the process's group. Windows has no SIGTERM for a windowless console process
    (taskkill without /F does nothing to one): its whole tree is ended now, after the EOF wait."""
    try:
        if _WINDOWS:
            if not _DESCENDANTS.end_tree(proc):
                _taskkill(proc.pid)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
    except OSError:
        pass


def _hard_kill(proc: Any) -> None:
    """SIGKILL to the process's group (Windows: its job's processes, or a forced taskkill of its
    tree)."""
    try:
        if _WINDOWS:
            if not _DESCENDANTS.end_tree(proc):
                _taskkill(proc.pid)
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def _subscription_id(params: Any) -> Any:
    """The subscription a 2026-07-28 notification belongs to (its _meta's subscriptionId)."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get(_META_SUBSCRIPTION) if isinstance(meta, dict) else None


class _Listen:
    """A 2026-07-28 run's subscriptions/listen (one per run): its request's id and future, and
    what the server acknowledged (basic/patterns/subscriptions in the 2026-07-28 spec)."""

    __slots__ = ("id", "fut", "acked", "got", "ack_id", "tools")

    def __init__(self) -> None:
        self.id: Optional[int] = None
        self.fut: Optional[Future] = None
        self.acked = threading.Event()  # set by the acknowledgment, or by the request's end
        self.got = threading.Event()  # set by the acknowledgment only
        self.ack_id: Any = None  # the subscription id the acknowledgment named
        self.tools = False  # the server agreed to send notifications/tools/list_changed



class _Listener:
    """An upstream's listening to a 2026-07-28 server: one subscriptions/listen at a time (a
    _Listen each) for notifications/tools/list_changed (what Abstract relays to its client),
    for as long as each run lasts, on a thread of its own. What it hears goes to the upstream's
    tool list through three hooks: `tools()` asks for the list, `drop()` forgets the cached
    one (giving the last list asked for), `tell()` tells the client the list changed."""

    def __init__(self, name: str, params: Callable[[dict], dict], tools: Callable[[], List[dict]],
                 drop: Callable[[], Optional[List[dict]]], tell: Callable[[], None]) -> None:
        self.name, self._params = name, params
        self._tools, self._drop, self._tell = tools, drop, tell
        self._stop = threading.Event()  # shutdown: no subscription is reopened

    def start(self, run: _Run, ack_s: float) -> None:
        threading.Thread(target=self.listen, args=(run, ack_s), name=f"listen-{self.name}",
                         daemon=True).start()

    def stop(self) -> None:
        """Shutdown: no subscription is reopened from now on (each ends with its run)."""
        self._stop.set()

    def heard(self, params: Any, run: _Run) -> bool:
        """Whether a notifications/tools/list_changed is to be heard: a 2026-07-28 run's come
        only on its subscription, by its id; others are not listened to."""
        sub = run.listen
        if sub is not None and (_subscription_id(params) != sub.id or not sub.acked.is_set()):
            _log.debug("%s: tools/list_changed outside its subscription, ignored", self.name)
            return False
        return True

    @staticmethod
    def acknowledged(params: Any, run: _Run) -> None:
        """notifications/subscriptions/acknowledged: what the server agreed to send."""
        sub, sid = run.listen, _subscription_id(params)
        if sub is None or sub.got.is_set() or (sub.id is not None and sid != sub.id):
            return
        got = params.get("notifications") if isinstance(params, dict) else None
        sub.tools = isinstance(got, dict) and got.get("toolsListChanged") is True
        sub.ack_id = sid
        sub.got.set()
        sub.acked.set()

    @staticmethod
    def watched(run: Optional[_Run]) -> bool:
        """Whether the run's subscription is open and tells of tool changes."""
        sub = run.listen if run is not None else None
        return (sub is not None and sub.tools and sub.ack_id == sub.id and sub.fut is not None
                and not sub.fut.done())

    def _listening(self, run: _Run) -> bool:
        return not self._stop.is_set() and not run.ending and run.usable()

    def listen(self, run: _Run, ack_s: float) -> None:
        """The run's subscription, for as long as the run lasts.

        1. One subscription at a time; its acknowledgment is awaited up to `ack_s`
           (_LISTEN_ACK_S, or the startup timeout if shorter). A server that agrees keeps the
           tool list cached (_Upstream.tools) until it tells of a change; without that
           agreement, or when the server refuses subscriptions/listen with an error, the list
           is asked for each time.
        2. It ends with the run (the stream closed on HTTP, notifications/cancelled on stdio:
           _Run.end_listen). Ended otherwise (dropped, answered, or no acknowledgment), it is
           reopened after 2, 4, 8 ... s (at most _LISTEN_BACKOFF_MAX_S), up to _LISTEN_REOPENS
           times in a row; only one that lasted _LISTEN_STEADY_S ends the row (a server or proxy
           that acknowledges and then cuts every stream at once is not reopened forever).
        3. A dropped one may have missed a change: the cached list is dropped, and once the
           new subscription is acknowledged the list is asked for again and the client told only
           if it differs from the last one asked for before the drop (or none was). A reopen
           that fails tells the client at once: nothing tells of changes any more.
        """
        fails = 0
        # after a drop, until its reopen is acknowledged: [the last list asked for before it]
        missed: Optional[List[Optional[List[dict]]]] = None
        while self._listening(run):
            fut, acked, tells = self._open(run, ack_s)  # 1.
            if acked:
                since = time.monotonic()
                if not tells:
                    _log.info("%s: its subscription does not tell of tool changes: its tool list "
                              "is asked for each time", self.name)
                if missed is not None:  # 3.
                    self._recheck(missed[0])
                    missed = None
                while not fut.done() and self._listening(run):  # 2.
                    futures_wait([fut], 30.0)
                if time.monotonic() - since >= _LISTEN_STEADY_S:
                    fails = 0
            if not self._listening(run):
                return
            if not acked and missed is not None:  # 3. the reopen failed
                missed = None
                self._tell()
            refused = fut.done() and fut.exception() is not None
            if refused and not isinstance(fut.exception(), UpstreamError):
                _log.info("%s: refused subscriptions/listen (%s): its tool list is asked for each "
                          "time", self.name, fut.exception())
                return
            if acked:
                _log.info("%s: its subscription ended (%s); reopening", self.name,
                          "answered" if fut.exception() is None else fut.exception())
                missed = [self._drop()]  # (as for a list_changed, without telling the client yet)
            fails += 1
            if fails > _LISTEN_REOPENS:
                _log.warning("%s: subscriptions/listen failed %d times in a row; tool changes are "
                             "no longer listened for (its tool list is asked for each time)",
                             self.name, fails)
                if missed is not None:
                    self._tell()
                return
            if self._stop.wait(min(2.0 ** fails, _LISTEN_BACKOFF_MAX_S)):
                return

    def _open(self, run: _Run, ack_s: float) -> Tuple[Future, bool, bool]:
        """Open a subscription and await its acknowledgment: its future, whether it was
        acknowledged (maybe ended since), and whether it tells of tool changes. One not
        acknowledged within ack_s is cancelled."""
        sub = run.listen = _Listen()
        mid, fut = run.conn.request(
            "subscriptions/listen", self._params({"notifications": {"toolsListChanged": True}}))
        sub.id, sub.fut = mid, fut
        fut.add_done_callback(lambda _f: sub.acked.set())
        sub.acked.wait(ack_s)
        if fut.done() and not sub.got.is_set():
            # HTTP: a stream that ends right after its acknowledgment fails the request at once,
            # while the acknowledgment may still wait for the session's reader thread
            sub.got.wait(_LISTEN_LATE_ACK_S)
        if sub.ack_id != mid and not fut.done():
            _log.warning("%s: no acknowledgment of subscriptions/listen within %g s; cancelled",
                         self.name, ack_s)
            run.conn.notify("notifications/cancelled",
                            {"requestId": mid, "reason": "no acknowledgment"})
            run.conn.forget(mid)
        return fut, sub.ack_id == mid, sub.tools

    def _recheck(self, before: Optional[List[dict]]) -> None:
        """After a dropped subscription was reopened: the client is told of a change only if
        the tool list differs from `before` (the last one asked for before the drop; None:
        none was)."""
        try:
            now: Optional[List[dict]] = self._tools()
        except Error as e:
            _log.info("%s: its tool list could not be asked for after its subscription was "
                      "reopened: %s", self.name, e)
            now = None
        if before is None or now != before:
            self._tell()

class _Run:
    """One run of an upstream server: its process, session, stderr tail and threads.

    A run's teardown touches only that run, so stopping one (after a stall, a failed handshake,
    or at shutdown) can never reach the run started after it. Stopping is done in steps
    (end_listen, end_input, then signal) so that _stop_runs can take several runs through each
    step at once.
    """

    def __init__(self, name: str, proc: Any, started: float,
                 connect: Callable[["_Run"], Connection], gate: Optional[_LogGate] = None) -> None:
        self.name, self.proc, self.started = name, proc, started
        self.tail = _Tail()  # this run's stderr only
        self.gate = gate or _LogGate(name)  # its lines on Abstract's stderr (its _Upstream's)
        self.ready = False  # the handshake completed
        self.ending = False  # stopped on purpose (or stopping): never handed out again
        self.counted = False  # its failure was counted for the back-off (_Upstream._count_crash)
        self.listen: Optional[_Listen] = None  # a 2026-07-28 run's subscriptions/listen
        _DESCENDANTS.add(proc)  # (Windows: in a Job Object; released by watch)
        self._stderr = threading.Thread(target=self._drain_stderr, name=f"stderr-{name}",
                                        daemon=True)
        self._stderr.start()
        # its session, over the pipes (connect: _Upstream._connect; started by the caller)
        self.conn: Connection = connect(self)

    def usable(self) -> bool:
        return not self.ending and not self.conn.closing

    def forgotten(self) -> bool:
        """The server ended the session itself (a remote one's HTTP 404), which is no crash."""
        return False

    def streams(self) -> Tuple[Any, Any]:
        """What its Connection reads from and writes to."""
        return io.BufferedReader(self.proc.stdout,
                                 1 << 16), io.BufferedWriter(self.proc.stdin, 1 << 16)

    def hint(self) -> str:
        tail = self.tail.text(5)
        return f". Last stderr lines:\n{tail}" if tail else " (nothing on stderr)"

    def _drain_stderr(self) -> None:
        prefix = f"[{self.name}] "
        try:
            for raw in _iter_lines(self.proc.stderr, pause=lambda: self.gate.flush(pause=True)):
                line = raw.decode("utf-8", "replace").rstrip("\r")
                self.tail.add(line)
                self.gate.write(lambda: prefix + line)
        finally:  # read to its end (or broken): the pipe is closed here, by its only reader
            self.gate.flush()
            with contextlib.suppress(OSError):
                self.proc.stderr.close()

    def watch(self) -> None:
        """Notice the process's exit even when a child it left behind keeps its stdout open:
        pending calls then fail at once instead of waiting for their deadline. Then close its
        stdin, once the writer has stopped (its last writes fail at once: nobody reads them);
        stdout and stderr are closed by their readers: a crashed run leaves no pipe open."""
        conn = self.conn
        self.proc.wait()
        if not conn.closed.wait(0.5):
            _hard_kill(self.proc)  # the leftovers of its process group hold the pipe
            conn.lost()
        conn.finish(0.5)
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        _DESCENDANTS.release(self.proc)

    def exit_text(self) -> str:
        """How the run ended (its stdout closed), waiting briefly for the exit status. A process
        that closed its stdout but keeps running is of no further use: it is killed, so it
        cannot outlive Abstract."""
        code = None
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            _hard_kill(self.proc)
        self._stderr.join(timeout=0.5)
        return _exit_text(code)

    # -- stopping, in steps
    def end_listen(self) -> bool:
        """Step 0: end its subscription (stdio: notifications/cancelled, handed to the writer,
        which stops once it is written); True if there was one (end_input waits for the writer)."""
        self.ending = True
        sub = self.listen
        if sub is None or sub.id is None:
            return False
        self.conn.notify("notifications/cancelled", {"requestId": sub.id,
                                                     "reason": "Abstract is shutting down"})
        self.conn.finish(0)
        return True

    def end_input(self, reason: str, flush_by: float = 0.0) -> None:
        """Step 1: wait (until `flush_by`, a time.monotonic() deadline) for the writer to write
        what end_listen queued, close its stdin (a well-behaved server exits), and fail the
        calls waiting on it at once: nobody is left to read their answers."""
        self.ending = True
        if flush_by:
            self.conn.finish(flush_by - time.monotonic())
        # first: a server that exits at once on EOF must not make them fail as "exited" (the
        # reader's EOF) instead
        self.conn.fail_pending(reason)
        try:
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass

    def exited(self, timeout: float) -> bool:
        try:
            self.proc.wait(timeout=max(0.0, timeout))
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self, reason: str) -> None:
        """Stop this run alone (every wait bounded)."""
        _stop_runs([self], reason)


class _HttpRun(_Run):
    """One session with a remote upstream: no process; an _HttpTransport is its wire. Ending
    it fails what is pending and DELETEs the session (exited() waits for that, bounded)."""

    def __init__(self, name: str, transport: _HttpTransport, started: float,
                 connect: Callable[[_Run], Connection]) -> None:
        self.name, self.proc, self.started, self.transport = name, None, started, transport
        self.tail = _Tail()
        self.ready = self.ending = self.counted = False
        self.listen = None
        self.conn = connect(self)
        transport.attach(self.conn)

    def usable(self) -> bool:
        # the session's end is known here before its Connection has read the EOF: a call made
        # in between (right after the answer that ended it) starts a new session
        return super().usable() and not self.transport.ended() and not self.transport.forgotten

    def forgotten(self) -> bool:
        return self.transport.forgotten

    def streams(self) -> Tuple[Any, Any]:
        return self.transport, self.transport

    def hint(self) -> str:
        return ""

    def watch(self) -> None:
        pass

    def exit_text(self) -> str:
        return self.transport.reason

    def end_listen(self) -> bool:
        self.ending = True  # (its subscription's stream is closed with the transport)
        return False

    def end_input(self, reason: str, flush_by: float = 0.0) -> None:
        self.ending = True
        self.conn.fail_pending(reason)
        self.transport.close(reason)

    def exited(self, timeout: float) -> bool:
        t = self.transport.delete_thread
        if t is not None:
            t.join(max(0.0, timeout))
        return True


def _signal_all(step: Callable[[Any], None], runs: List[_Run]) -> None:
    """step(proc) for every run. POSIX signals are instant; on Windows each step is a taskkill
    process (up to _STOP_TERM_S), so they run side by side to stay within one step's budget."""
    if not _WINDOWS:
        for run in runs:
            step(run.proc)
        return
    threads = [threading.Thread(target=step, args=(run.proc,), daemon=True) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(_STOP_TERM_S + 0.5)


def _stop_runs(runs: List[_Run], reason: str) -> None:
    """Stop runs together: end every subscription (a cancel each, written within one shared
    _STOP_EOF_S / 4), close every stdin at once, then SIGTERM the process groups still running,
    then SIGKILL them. Each step waits for all runs against one deadline, so stopping ten
    stubborn servers takes as long as stopping one: at most
    _STOP_EOF_S * 1.25 + _STOP_TERM_S + _STOP_KILL_S."""
    listening = [run.end_listen() for run in runs]
    flush_by = time.monotonic() + _STOP_EOF_S / 4 if any(listening) else 0.0
    for run, flush in zip(runs, listening):
        run.end_input(reason, flush_by if flush else 0.0)
    left = list(runs)
    for step, wait in ((None, _STOP_EOF_S), (_terminate, _STOP_TERM_S), (_hard_kill, _STOP_KILL_S)):
        if step is not None:
            # (a remote run has no process to signal)
            left = [r for r in left if r.proc is not None]
            _signal_all(step, left)
        deadline = time.monotonic() + wait
        left = [r for r in left if not r.exited(deadline - time.monotonic())]
        if not left:
            break
    if not _WINDOWS:
        for run in (r for r in runs if r.proc is not None):
            _hard_kill(run.proc)  # children it left in its process group go too (ESRCH if none)


class _Protocol:
    """What one upstream server speaks, as the handshake of each of its runs found it: its era
    (kept across runs: the spec makes it a property of the server), protocol version and
    capabilities, and what a request carries in that era (params: a 2026-07-28 request's
    _meta, with the client's capabilities and logging level)."""

    def __init__(self, spec: _ServerSpec, client: _ClientLink) -> None:
        self.name, self.remote, self._client = spec.name, spec.remote, client
        self.version = ""  # the protocol version of the current (or last) run
        self.modern = False  # ... a 2026-07-28 one
        # the server's era as found by the probe: "", "modern" or "legacy", kept while Abstract
        # runs; a start that finds it wrong probes again
        self.era = ""
        # what the upstream said it offers (tools, prompts, resources...)
        self.capabilities: dict = {}
        self.roots_offered = False  # this session was told of roots (so it hears of changes)

    def handshake(self, run: _Run, limit: float) -> None:
        """Find the server's era and start talking to it, within startup_timeout_seconds
        (2026-07-28 spec, basic/versioning#backward-compatibility-with-initialization-based-
        versions).

        1. Offer what the client declared (roots, sampling, elicitation: _ClientLink), so that
           an upstream only asks for what the client can answer.
        2. Probe with server/discover first (_discover), unless this server was found to be of
           the handshake era before: a server that lists 2026-07-28 is spoken to in that era.
           On stdio a silent server is taken for a handshake-era one after _PROBE_S (every
           real one measured answers at once: docs/reference/protocol.md); one that exits on
           the probe, when its era is not known yet, is started again by _Upstream._start
           (_ProbeFatal).
        3. Otherwise initialize in the newest handshake-era version; the upstream answers with
           its own, and notifications/initialized completes the handshake.
        4. An initialize refused by a server not probed (the cached era was wrong), refused
           with -32022 (a slow server answered the probe after its wait: it speaks 2026-07-28
           now), or refused after a probe that got no answer (a slow 2026-07-28-only server,
           an npx download, may refuse it with any code), is followed by one probe; the first
           error stands if that fails too.
        """
        conn = run.conn
        self.roots_offered = self._client.roots_offered()
        # (HTTP+SSE, 2024-11-05, has no 2026-07-28 era: nothing to probe)
        sse = isinstance(run, _HttpRun) and run.transport.mode == "sse"
        probed = self.era != "legacy" and not sse
        silent = False  # the probe got no answer in time
        if probed:
            wait = limit if self.remote or self.era else min(limit, _PROBE_S)
            try:
                found = self._discover(run, wait)
                if found:
                    return
                silent = found is None
            except UpstreamError as e:  # a stdio server gone: maybe killed by the probe
                if self.remote or self.era or e.code == _REQUEST_TIMEOUT:
                    raise
                raise _ProbeFatal(e.message) from None
        caps = self._client.offered()
        params = {"protocolVersion": _HANDSHAKE_VERSIONS[0], "capabilities": caps,
                  "clientInfo": {"name": _SERVER_NAME, "version": __version__}}
        try:
            res = conn.call("initialize", params, timeout=limit)
        except UpstreamError:
            raise
        except RpcError as first:
            late = first.code == _UNSUPPORTED_VERSION or not probed
            # (after a silent probe the server is up now: a modern one answers a probe at once)
            if (sse or not (late or silent)
                    or not self._discover(run, limit if late else min(limit, _PROBE_S))):
                raise first
            return
        if not isinstance(res, dict) or not isinstance(res.get("protocolVersion"), str):
            raise RpcError(_INVALID_REQUEST, f"initialize result without protocolVersion: "
                           f"{str(res)[:200]}")
        self.version, self.modern, self.era = res["protocolVersion"], False, "legacy"
        caps = res.get("capabilities")
        self.capabilities = caps if isinstance(caps, dict) else {}
        conn.notify("notifications/initialized")

    def _discover(self, run: _Run, wait: float) -> Optional[bool]:
        """The server/discover probe: True when the server speaks a 2026-07-28 version Abstract
        speaks (adopted), False when it is of the handshake era: any error that is not -32022
        with a `supported` list, or a result listing no modern version Abstract speaks; None
        (taken for the handshake era too) when, on stdio, no answer came within `wait`. -32022
        naming another modern version of Abstract's is retried once with it; one naming only
        versions Abstract does not speak is an error."""
        conn = run.conn
        version = _MODERN_VERSIONS[0]
        for attempt in range(2):
            try:
                res = conn.call("server/discover", {"_meta": self.meta(version=version)},
                                timeout=wait)
            except UpstreamError as e:
                if e.code == _REQUEST_TIMEOUT and not self.remote:
                    _log.info("%s: no answer to server/discover within %g s: taken for a "
                              "handshake-era server", self.name, wait)
                    return None
                raise
            except RpcError as e:
                supported = e.data.get("supported") if isinstance(e.data, dict) else None
                if e.code != _UNSUPPORTED_VERSION or not isinstance(supported, list):
                    return False
                mutual = [v for v in _MODERN_VERSIONS if v in supported]
                if mutual and mutual[0] != version and attempt == 0:
                    version = mutual[0]
                    continue
                if any(v in _HANDSHAKE_VERSIONS for v in supported):
                    return False
                theirs = ", ".join(map(str, supported))[:200]
                ours = ", ".join(_MODERN_VERSIONS + _HANDSHAKE_VERSIONS)
                raise RpcError(_UNSUPPORTED_VERSION, f"the server speaks only {theirs}; Abstract "
                               f"speaks {ours}") from None
            versions = res.get("supportedVersions", []) if isinstance(res, dict) else []
            mutual = [v for v in _MODERN_VERSIONS if isinstance(versions, list) and v in versions]
            if not mutual:
                return False
            caps = res.get("capabilities")
            self.capabilities = caps if isinstance(caps, dict) else {}
            self.version, self.modern, self.era = mutual[0], True, "modern"
            if isinstance(run, _HttpRun):
                run.transport.version = mutual[0]  # (its headers; no resumption, no DELETE)
            return True
        return False

    def meta(self, caps: Optional[dict] = None, version: str = "") -> dict:
        # the client's capabilities, as in a legacy initialize (sampling and elicitation asked
        # for in an input_required result are asked of the client: _QuestionRelay.rounds), or a
        # 2026-07-28 client's own, which answers the upstream's questions itself
        caps = self._client.offered() if caps is None else caps
        version = version or (self.version if self.modern else _MODERN_VERSIONS[0])
        meta = {_META_VERSION: version, _META_CAPS: caps,
                _META_INFO: {"name": _SERVER_NAME, "version": __version__}}
        # (the modern era has no logging/setLevel: the level rides on each request)
        if self._client.log_level:
            meta[_META_LOG_LEVEL] = self._client.log_level
        return meta

    def params(self, params: dict, follow: Optional[_Follow] = None) -> dict:
        if self.modern:
            params = dict(params)
            meta = self.meta(follow.caps if follow else None)
            params["_meta"] = {**params.get("_meta", {}), **meta}
        return params

    def tasks_offered(self) -> bool:
        """Whether the upstream takes task-augmented tools/call (2025-11-25 tasks capability)."""
        tasks = self.capabilities.get("tasks")
        asks = tasks.get("requests") if isinstance(tasks, dict) else None
        tools = asks.get("tools") if isinstance(asks, dict) else None
        return isinstance(tools, dict) and "call" in tools

    def apply_level(self, conn: Connection, timeout: float) -> None:
        """The client's logging level (_ClientLink.log_level), set with logging/setLevel on a
        handshake-era run that declares logging."""
        # (modern: the level rides in each _meta)
        if not self._client.log_level or "logging" not in self.capabilities or self.modern:
            return
        try:
            conn.call("logging/setLevel", {"level": self._client.log_level}, timeout=timeout)
        except RpcError as e:
            _log.warning("server '%s' refused logging/setLevel: %s", self.name, e.message)



class _Upstream:
    """A supervised upstream MCP server: the long-lived policy (restart and back-off, the tool
    list, the calls) over a succession of runs (_Run), one at a time. Beside it, each with its
    own state: what the server speaks (_Protocol), its subscription (_Listener), its questions
    for the client and the calls held for them (_QuestionRelay). The logging level is the
    client's (_ClientLink.log_level); a remote server's login (`auth`, an _OAuth) outlives its
    sessions, so it is kept here and handed to each one's transport."""

    def __init__(self, spec: _ServerSpec, settings: _Settings, client: _ClientLink,
                 spawn: Callable[..., Any] = subprocess.Popen,
                 clock: Callable[[], float] = time.monotonic,
                 environ: Optional[Dict[str, str]] = None) -> None:
        self.spec, self.settings, self._client = spec, settings, client
        self._protocol = _Protocol(spec, client)  # what it speaks (its era, capabilities)
        # its questions for the client, and the calls held for them
        self._relay = _QuestionRelay(spec.name, client, lambda: self._protocol.modern)
        self._spawn, self._clock = spawn, clock
        self._lock = threading.Lock()  # starting a run
        self._run: Optional[_Run] = None  # the current run
        # the start under way in the background (_begin_start): when it began, and its outcome
        self._starting: Optional[Tuple[float, Future]] = None
        self._runs: List[_Run] = []  # every run not yet stopped (close() stops them all)
        self._runs_lock = threading.Lock()
        self.last_error = ""
        self._environ = dict(os.environ if environ is None else environ)
        self._tools: Optional[List[dict]] = None
        self._tools_gen = 0  # bumped by list_changed: a listing begun before it is not kept
        # the last list asked for, cached or not (a 2026-07-28 server's whose subscription keeps
        # dropping is never cached): what a dropped subscription's reopen compares with
        self._tools_seen: Optional[List[dict]] = None
        # a 2026-07-28 server's subscription to tool changes, run by run
        self._listener = _Listener(spec.name, self._protocol.params, self.tools,
                                   self._drop_tools, self._tell_tools_changed)
        self.start_ms = 0.0
        self._quick_crashes = 0
        self._retry_at = 0.0
        self._closing = False
        self._progress: Dict[str, Callable[[dict], None]] = {}
        self.on_tools_changed: Optional[Callable[[str], None]] = None
        self.on_log: Optional[Callable[[str, dict], None]] = None
        # the Server's (direct mode): its notifications/resources/updated, and each run once its
        # handshake is done (the client's resource subscriptions are made again on it)
        self.on_updated: Optional[Callable[[str, dict], None]] = None
        self.on_started: Optional[Callable[[str, Connection], None]] = None
        self._log_gate = _LogGate(spec.name)  # its lines on Abstract's stderr, across its runs
        self._tokens = itertools.count(1)
        # a remote server's auth provider (headers(url), on_unauthorized(response); see
        # _http_request): given to every HTTP request of its sessions. An OAuth login (_OAuth)
        # unless the entry sends its own Authorization header.
        self.auth: Any = None
        if spec.remote and spec.url and not any(k.lower() == "authorization" for k in spec.headers):
            self.auth = _auth_provider(spec.name, spec.url, settings, self._environ)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def protocol_version(self) -> str:
        return self._protocol.version

    @property
    def capabilities(self) -> dict:
        """What the upstream said it offers (tools, prompts, resources...)."""
        return self._protocol.capabilities

    @property
    def modern(self) -> bool:
        """It speaks the 2026-07-28 era."""
        return self._protocol.modern

    # -- start
    def session(self, wait: Optional[float] = None) -> Connection:
        """The live session, starting the process first if needed (see _current)."""
        return self._current(wait).conn

    def _current(self, wait: Optional[float] = None) -> _Run:
        """The usable run. Without one, a start begins in the background (one at a time, shared
        by every caller) and is waited for up to `wait` seconds (the call's own time limit when
        None): its run, its failure, or _StillStarting when it has not answered by then. A
        failed start is not tried again until its back-off has passed: the reason at once."""
        with self._lock:
            if self._closing:  # a handler still running at shutdown must not start a new run
                raise UpstreamError(self._shutting_down())
            run = self._run
            if run is not None and run.usable():
                return run
            starting = self._starting
            if starting is None:
                starting = self._begin_start()
        limit = self.settings.timeout(self.name) if wait is None else wait
        try:
            return starting[1].result(max(0.0, limit))
        except FutureTimeout:
            raise self.not_yet(None if wait is not None else limit) from None

    def not_yet(self, limit: Optional[float] = None) -> UpstreamError:
        """The error for a caller that stopped waiting: _StillStarting while a start is under way
        (for a call: `limit`, the time it waited), else the list it asked for is still coming."""
        starting = self._starting
        if starting is None:
            return UpstreamError(f"server '{self.name}' has not answered tools/list yet; it is "
                                 f"listed once it does", _REQUEST_TIMEOUT)
        took = self._clock() - starting[0]
        then = ("its tools will be listed once it answers" if limit is None else
                f"the call waited for it as long as its time limit allows ({limit:g} s), and "
                f"the start goes on: call again later")
        return _StillStarting(f"server '{self.name}' is still starting (since {took:.0f} s); "
                              f"{then}", took)

    def _begin_start(self) -> Tuple[float, Future]:
        """(Under _lock) a start on a thread of its own, so that no caller waits longer than it
        chose to; UpstreamError at once for an entry that cannot be used or a back-off."""
        if self.spec.problem:
            raise UpstreamError(f"server '{self.name}' cannot be used: {self.spec.problem}")
        wait = self.retry_in()
        if wait > 0:
            n = self._quick_crashes
            times = f" {n} times in a row" if n > 1 else ""
            raise UpstreamError(f"server '{self.name}' failed{times} right after starting, so it "
                                f"is not restarted for another {wait:.0f} s. Last failure: "
                                f"{self.last_error}")
        self._starting = (self._clock(), Future())
        threading.Thread(target=self._start_in_background, args=(self._starting,),
                         name=f"start-{self.name}", daemon=True).start()
        return self._starting

    def retry_in(self) -> float:
        """Seconds until a failed server may be started again (0: at the next call)."""
        return max(0.0, self._retry_at - self._clock())

    def _start_in_background(self, starting: Tuple[float, Future]) -> None:
        run: Optional[_Run] = None
        error: Optional[BaseException] = None
        try:
            run = self._start()
        except Exception as e:  # the callers get it (a bug too: the dispatcher logs it)
            error = e
        with self._lock:
            self._starting = None
            if run is not None:
                self._run = run
        _settle(starting[1], run, error)

    def _shutting_down(self) -> str:
        return f"server '{self.name}' is not available: Abstract is shutting down"

    def _start(self) -> _Run:
        """Start a run (_start_run); a server of unknown era that exits on the server/discover
        probe is taken for a handshake-era one and started again at once, going straight to
        initialize (once: the era is then known), its first exit not counted as a crash."""
        crashes, retry_at, error = self._quick_crashes, self._retry_at, self.last_error
        try:
            return self._start_run()
        except _ProbeFatal as e:
            _log.warning("%s: exited on the server/discover probe (%s); taken for a handshake-era "
                         "server and started again", self.name, e.message[:1000])
            self._protocol.era = "legacy"
            self._quick_crashes, self._retry_at, self.last_error = crashes, retry_at, error
            return self._start_run()

    def _start_run(self) -> _Run:
        """Start a run and complete the MCP handshake with it: the run, or UpstreamError.

        1. Spawn the process (in a process group of its own) and drain its stderr.
        2. Its Connection, built with the run (_connect), is started.
        3. A watcher notices the process's exit even when a child keeps its stdout open.
        4. The run is registered before the handshake, so a close() meanwhile stops it too; a
           close() already begun refuses it.
        5. The handshake; a failure stops the run and is kept as last_error (with the command
           and the stderr tail) for the model's error and for --check.
        6. A 2026-07-28 run: its subscription to tool changes (_Listener.listen).
        """
        t0 = self._clock()  # 1.
        run = self._spawn_run(t0)
        conn = run.conn.start()  # 2.
        threading.Thread(target=run.watch, name=f"watch-{self.name}", daemon=True).start()  # 3.
        with self._runs_lock:  # 4.
            self._runs.append(run)
            closing = self._closing
        try:
            if closing:  # close() began while this run was being spawned
                raise UpstreamError(self._shutting_down())
            self._protocol.handshake(run, self.settings.startup_timeout(self.name))  # 5.
        except _LoginNeeded as e:  # no fault: said as it is, and the next call starts afresh
            self._stop(run, f"server '{self.name}' waits for a login")
            self.last_error = e.message
            raise _LoginNeeded(e.message) from None
        except _ProbeFatal:
            self._stop(run, f"server '{self.name}' exited on the server/discover probe")
            raise
        except RpcError as e:
            self._count_crash(run, quick=True)  # (a server that never answers backs off too)
            self._stop(run, f"server '{self.name}' did not complete the MCP handshake")
            hint = "" if "stderr" in e.message else run.hint()
            self.last_error = (f"server '{self.name}' did not complete the MCP handshake "
                               f"({self._where()}): {e.message}{hint}")
            raise UpstreamError(self.last_error) from None
        run.ready = True
        self.start_ms = (self._clock() - t0) * 1000
        # (the client set a level before this run started)
        self._protocol.apply_level(conn, self.settings.timeout(self.name))
        self._drop_tools()
        if self.on_started is not None:
            self.on_started(self.name, conn)
        if self._protocol.modern:  # 6.
            self._listener.start(run, min(_LISTEN_ACK_S, self.settings.startup_timeout(self.name)))
        return run

    def _spawn_run(self, t0: float) -> _Run:
        """Start the process (its stderr drained from the start), or open a remote server's
        transport; UpstreamError if it cannot."""
        if self.spec.remote:
            return self._open_remote(t0)
        try:
            proc = _start_process(self.spec, self._environ, self._spawn)
        except (OSError, UpstreamError) as e:
            self._note_crash(t0, quick=True)
            msg = e.message if isinstance(e, UpstreamError) else (e.strerror or str(e))
            self.last_error = (f"server '{self.name}' could not start: {msg} "
                               f"({self._where()})")
            raise UpstreamError(self.last_error) from None
        return _Run(self.name, proc, t0, self._connect, self._log_gate)

    def _open_remote(self, t0: float) -> _Run:
        """A remote server's session: the transport (an "sse" server's event stream is opened
        here; Streamable HTTP needs nothing before the first POST)."""
        max_line = int(float(self.settings.get("max_upstream_message_mb")) * (1 << 20))
        transport = _HttpTransport(self.spec, self._environ, self.settings.timeout(self.name) + 5.0,
                                   max_line, auth=self.auth)
        try:
            transport.open(self.settings.startup_timeout(self.name))
        except _HttpError as e:
            self._note_crash(t0, quick=True)
            self.last_error = f"server '{self.name}' could not be reached: {e}"
            raise UpstreamError(self.last_error) from None
        return _HttpRun(self.name, transport, t0, self._connect)

    def _connect(self, run: _Run) -> Connection:
        """A run's Connection (built with it, not started). The upstream's own requests
        (roots/list, sampling, elicitation) run on a small pool of their own, off the reader, as
        they may wait for the client or a person while the reader must keep delivering
        responses."""
        rfile, wfile = run.streams()
        return Connection(rfile, wfile, name=self.name, strict=False,
                          on_close=lambda: self._on_close(run), queued=True,
                          close_input=not self.spec.remote,  # a pipe it owns
                          max_line=int(float(self.settings.get("max_upstream_message_mb"))
                                       * (1 << 20)),
                          requests=self._relay.handlers(), pool=_Pool(4, f"requests-{self.name}"),
                          max_requests=_UPSTREAM_REQUESTS_MAX,
                          notifications={
                              "notifications/progress": self._on_progress,
                              "notifications/tools/list_changed":
                                  lambda p: self._on_tools_changed(p, run),
                              "notifications/subscriptions/acknowledged":
                                  lambda p: self._listener.acknowledged(p, run),
                              "notifications/message": self._on_log,
                              "notifications/resources/updated": self._on_updated,
                              "notifications/elicitation/complete":
                                  self._client.elicitation_complete})

    # -- notifications, death
    def _on_progress(self, params: Any) -> None:
        token = params.get("progressToken") if isinstance(params, dict) else None
        relay = self._progress.get(token) if isinstance(token, str) else None
        if relay is not None:
            relay(params)

    def _on_tools_changed(self, params: Any, run: _Run) -> None:
        """notifications/tools/list_changed: the cached list is dropped and the client told (a
        2026-07-28 run's only on its subscription: _Listener.heard)."""
        if self._listener.heard(params, run):
            self._drop_tools()
            self._tell_tools_changed()

    def _drop_tools(self) -> Optional[List[dict]]:
        """Forget the cached tool list (a list_changed, a new run, a dropped subscription); a
        listing begun before is not kept either. The last list asked for, cached or not."""
        self._tools_gen += 1  # (only a run's reader thread, its listener and _start write it)
        self._tools = None
        return self._tools_seen

    def _tell_tools_changed(self) -> None:
        if self.on_tools_changed is not None:
            self.on_tools_changed(self.name)

    def _on_log(self, params: Any) -> None:
        if isinstance(params, dict):
            self._log_gate.write(lambda: f"[{self.name}] {params.get('level', 'info')}: "
                                         f"{_dumps(params.get('data'))[:_LOG_LINE_CHARS]}")
            if self.on_log is not None:
                self.on_log(self.name, params)

    def _on_updated(self, params: Any) -> None:
        if isinstance(params, dict) and self.on_updated is not None:
            self.on_updated(self.name, params)

    def _on_close(self, run: _Run) -> str:
        """A run's stdout closed: say why, from its exit status and stderr tail."""
        reason = f"server '{self.name}' {run.exit_text()}{run.hint()}"
        self._log_gate.flush()
        with self._runs_lock:
            if run in self._runs:
                self._runs.remove(run)
        if not self._closing and not run.ending and not run.forgotten():  # it died on its own
            self._count_crash(run, quick=not run.ready)
            self.last_error = reason
        return reason

    def _count_crash(self, run: _Run, quick: bool) -> None:
        """Count a run's failure once, whether its exit or its failed handshake is seen first."""
        with self._runs_lock:
            if run.counted:
                return
            run.counted = True
        self._note_crash(run.started, quick)

    def _note_crash(self, started: float, quick: bool = False) -> None:
        """Count a crash for the back-off. `quick`: a failed start, not tried again for
        _START_BACKOFF_S, doubled each time in a row (at most _BACKOFF_MAX_S); a run that dies
        within _CRASH_WINDOW_S: from the second in a row, 1, 2, 4 ... s."""
        if quick or self._clock() - started < _CRASH_WINDOW_S:
            self._quick_crashes += 1
        else:
            self._quick_crashes = 1
        n = self._quick_crashes
        wait = _START_BACKOFF_S * 2.0 ** (n - 1) if quick else 2.0 ** (n - 2) if n >= 2 else 0.0
        if wait:
            self._retry_at = self._clock() + min(wait, _BACKOFF_MAX_S)

    def _cmdline(self) -> str:
        return " ".join(shlex.quote(a) for a in self.spec.argv())

    def _where(self) -> str:
        """'command: ...' or, for a remote server, 'URL: ...' (without credentials), for errors."""
        return (f"URL: {_safe_url(self.spec.url)}" if self.spec.remote
                else f"command: {self._cmdline()}")

    # -- requests
    def tools(self, wait: Optional[float] = None) -> List[dict]:
        """The upstream's tools (every page) as Abstract shows them (_Settings.shape_tools: hidden
        ones left out, renamed ones renamed), cached until it says the list changed. `wait`:
        for a start, as _current."""
        cached = self._tools
        if cached is not None:
            return cached
        self._current(wait)  # (a start resets the list: read the generation after it)
        gen = self._tools_gen
        tools = self.settings.shape_tools(self.name, self.listing("tools/list", "tools"))
        self._tools_seen = tools
        # no list_changed (or new run) meanwhile: the list is current; a 2026-07-28 server's is
        # kept only while a subscription tells of changes (_Listener)
        if self._tools_gen == gen and (not self._protocol.modern
                                       or self._listener.watched(self._run)):
            self._tools = tools
        return tools

    def listing(self, method: str, key: str) -> List[dict]:
        """Every page of a paginated list (tools, resources, prompts), following nextCursor; from
        the first page again in a new session if the server forgot this one (_anew)."""
        return self._anew(lambda: self._pages(method, key))

    def _pages(self, method: str, key: str) -> List[dict]:
        conn, items, cursor = self.session(), [], None
        for _ in range(10000):
            params = {"cursor": cursor} if cursor else {}
            res = conn.call(method, self._protocol.params(params),
                            timeout=self.settings.timeout(self.name))
            page = res.get(key) if isinstance(res, dict) else None
            if not isinstance(page, list):
                raise UpstreamError(f"server '{self.name}' sent a {method} result without a {key} "
                                    f"array")
            items.extend(t for t in page if isinstance(t, dict))
            cursor = res.get("nextCursor")
            if not cursor:
                break
        return [t for t in items if key != "tools" or isinstance(t.get("name"), str)]

    def rpc(self, method: str, params: dict, req: Optional[_Request] = None) -> Any:
        """Any other request (resources/read, prompts/get, for the upstream's own `params["uri"]`
        or `params["name"]`), with the call deadline; input_required as for tools/call."""
        key = _dumps([method, self.name, params.get("uri", params.get("name"))])
        what = f"'{self.name}' {method} of {_dumps(params.get('uri', params.get('name')))[:200]}"
        limit = self.settings.timeout(self.name)
        return self._relay.rounds(req, key, what, lambda retry, follow: self._anew(
            lambda: self.session().call(method, self._protocol.params({**params, **retry}, follow),
                                        timeout=limit)))

    def call_tool(self, tool: str, args: dict, req: Optional[_Request] = None,
                  progress: Optional[Callable[[dict], None]] = None, task: Any = None,
                  longs: Optional[list] = None) -> dict:
        """tools/call upstream; the upstream result, or UpstreamError/RpcError/_Cancelled. For
        input_required, see _QuestionRelay.rounds. `task`: the client's own task request
        (transparent mode), passed on; its CreateTaskResult is the answer. `longs`: as for
        Connection.request."""
        key = _dumps(["tools/call", self.name, tool])

        def once(retry: dict, follow: Optional[_Follow]) -> Any:
            res = self._anew(lambda: self._call_once(tool, args, req, progress, retry, follow,
                                                     task, longs))
            if isinstance(res, dict) and res.get("isError") is True:
                if longs:  # (an error's long text is masked too: decoded, not relayed as it came)
                    _decode_long(longs)
                    del longs[:]
                _mask_error_result(res)
            if longs and isinstance(res, dict) and res.get("resultType") == "input_required":
                _decode_long(longs)  # (a question is relayed as it came, never cached)
                del longs[:]
            return res

        return self._relay.rounds(req, key, f"'{self.name}' tool '{tool}'", once)

    def _anew(self, send: Callable[[], Any]) -> Any:
        """send(), and once more if a remote server answered HTTP 404 to its session (it
        restarted, or expired the session): the request was not processed, and send() starts a
        new session for it (the old one is no longer usable). Once only, so it runs at most
        once; a second 404 is the answer."""
        try:
            return send()
        except _SessionGone as e:
            _log.info("%s; sending the request again, in a new session", e.message)
        try:
            return send()
        except _SessionGone as e:
            raise _SessionGone(f"{e.message}, twice (the second time in a new session); the "
                               f"request did not run") from None

    def _call_once(self, tool: str, args: dict, req: Optional[_Request],
                   progress: Optional[Callable[[dict], None]], retry: dict,
                   follow: Optional[_Follow] = None, task: Any = None,
                   longs: Optional[list] = None) -> dict:
        """One tools/call on the current run, by the upstream's own name of the tool.

        1. Sent (_send_call), or, for a 2026-07-28 client's follow-up of a held call, resumed
           (_QuestionRelay.resume): progress comes back under a token of Abstract's own.
        2. The client's cancellation of its request is forwarded as notifications/cancelled
           (tasks/cancel for a task).
        3. A handshake-era upstream's question during a 2026-07-28 client's call holds the call
           and goes to the client as input_required (hold); a task is awaited to its result.
        4. A session that dies with the call in flight fails it, and it is never replayed: the
           server may have done part of the work. A call that did not run (_NotSent: never
           sent, never reached the server, or refused with its session) says so instead; the
           caller sends one refused with its session again (_anew). Once it is a task, it ran:
           its tasks/result refused with the session is a call that died in flight.
        5. At the timeout the call is cancelled upstream, unless the upstream stopped reading
           its input: then nothing more can reach it, and the run is stopped.
        """
        begun = time.monotonic()
        if follow is not None and follow.hold:
            p = self._relay.resume(follow)
            if progress is not None and p.token:  # (its progress now goes to this request)
                self._progress[p.token] = progress
        else:
            p = self._send_call(tool, args, progress, retry, follow, task, longs)
        if req is not None:
            req.on_cancel(lambda: self._cancel_call(p.conn, p.mid, p.task_id))
        limit = self.settings.timeout(self.name)
        spent = time.monotonic() - begun  # (waiting for a start: within the call's limit)
        conn, run, held = p.conn, p.run, False
        try:
            while True:
                got = self._relay.wait(p.fut, limit, follow if p.modern else None, spent)
                spent = 0.0
                if isinstance(got, _Question) and follow is not None:
                    held = True
                    res = self._relay.hold(p, got, follow)
                    self._progress.pop(p.token, None)  # (the request it reported to is answered)
                    return res
                if not (p.task and not p.task_id and isinstance(got, dict) and "content" not in got
                        and isinstance(got.get("task"), dict)):
                    return got
                self._task_result(p, got["task"], tool)
        except UpstreamError as e:  # the session died with the call in flight: never replayed
            if isinstance(e, _NotSent) and not p.task_id:
                raise  # (the call did not run; a _NotSent of its task's tasks/result is no proof)
            raise UpstreamError(f"'{self.name}' tool '{tool}' failed while running: "
                                f"{e.message}\nThe call was not retried, because the server may "
                                f"have done part of the work; call it again if that is safe (the "
                                f"server is restarted on the next call).") from None
        except FutureTimeout:
            # a write stuck for half the limit when the call's time is up: it stopped reading its
            # input, and nothing more can reach it (not the whole limit: the write began a moment
            # after the clock of the call started)
            if conn.stalled(limit / 2):
                self._stop(run, f"server '{self.name}' stopped reading its input and was stopped")
                raise UpstreamError(f"'{self.name}' stopped reading its input: the request to tool "
                                    f"'{tool}' could not be delivered within {limit:g} s. The "
                                    f"server was stopped; the next call starts it "
                                    f"again.{run.hint()}", _REQUEST_TIMEOUT) from None
            self._cancel_call(conn, p.mid, p.task_id, f"timed out after {limit:g} s")
            raise UpstreamError(f"'{self.name}' tool '{tool}' did not answer within {limit:g} s, "
                                f"so the call was cancelled. Raise timeout_seconds for this server "
                                f"in Abstract's settings, or ABSTRACT_TIMEOUT, if it needs longer.",
                                _REQUEST_TIMEOUT) from None
        finally:
            if not held:
                self._done(p)

    def _send_call(self, tool: str, args: dict, progress: Optional[Callable[[dict], None]],
                   retry: dict, follow: Optional[_Follow], task: Any,
                   longs: Optional[list] = None) -> _Pending:
        run = self._current()
        conn = run.conn
        own = self.settings.upstream_tool(self.name, tool)  # a renamed tool: the upstream's name
        params: dict = {"name": own, "arguments": args, **retry}
        awaited = task is None and self._task_required(tool)
        if task is not None or awaited:
            params["task"] = {} if awaited else task
        token = ""
        if progress is not None:
            token = f"abstract-{next(self._tokens)}"
            self._progress[token] = progress
            params["_meta"] = {"progressToken": token}
        mid, fut = conn.request("tools/call", self._protocol.params(params, follow), longs)
        # a 2026-07-28 client's call of a handshake-era upstream: its questions are input_required
        modern = follow is not None and not self._protocol.modern
        self._relay.sent(modern)
        return _Pending(run, mid, fut, token, modern, awaited)

    def _task_required(self, tool: str) -> bool:
        """A tool the upstream runs only as a task (execution.taskSupport "required"): Abstract
        makes the call a task of its own and awaits its result, as any call."""
        if not self._protocol.tasks_offered():
            return False
        found = next((t for t in self.tools() if t["name"] == tool), {})
        execution = found.get("execution")
        return isinstance(execution, dict) and execution.get("taskSupport") == "required"

    def _task_result(self, p: _Pending, task: dict, tool: str) -> None:
        """The upstream made Abstract's call a task: wait for it with tasks/result (which
        answers when the task ends) in place of the call."""
        task_id = task.get("taskId")
        if not isinstance(task_id, str):
            raise UpstreamError(f"'{self.name}' tool '{tool}' answered a task-augmented call "
                                f"without a taskId: {_dumps(task)[:200]}")
        p.conn.forget(p.mid)
        p.task_id = task_id
        self._relay.tasked(p)  # (before tasks/result: the task's questions come during it)
        p.mid, p.fut = p.conn.request("tasks/result", self._protocol.params({"taskId": task_id}))

    def _done(self, p: _Pending) -> None:
        self._relay.done(p)
        self._progress.pop(p.token, None)

    def _cancel_call(self, conn: Connection, mid: int, task_id: str = "",
                     reason: str = "") -> None:
        """The client cancelled a tools/call (or its time is up, `reason`): tell the upstream
        (tasks/cancel too for a task of Abstract's), and withdraw the questions it has pending at
        the client (_QuestionRelay.withdraw_all)."""
        conn.notify("notifications/cancelled",
                    {"requestId": mid, "reason": reason or "cancelled by the client"})
        if task_id:
            conn.forget(conn.request("tasks/cancel", self._protocol.params({"taskId": task_id}))[0])
        if reason:
            return
        conn.forget(mid, _Cancelled())
        self._relay.withdraw_all("the client cancelled the tool call that asked")

    def apply_level(self) -> None:
        """The client's logging level (_ClientLink.log_level) changed: applied to the current
        run if it declares logging (a run started later gets it at its start)."""
        run = self._run
        if run is not None and run.usable():
            self._protocol.apply_level(run.conn, self.settings.timeout(self.name))

    def notify_roots_changed(self) -> None:
        """Relay the client's notifications/roots/list_changed, if this session was offered
        roots."""
        run = self._run
        if run is not None and run.usable() and self._protocol.roots_offered:
            run.conn.notify("notifications/roots/list_changed")

    # -- stop
    def _stop(self, run: _Run, reason: str) -> None:
        """Stop one run (and only that one): the next session() starts a new one."""
        with self._runs_lock:
            if run in self._runs:
                self._runs.remove(run)
        run.stop(reason)

    def closing_runs(self) -> List[_Run]:
        """Shutdown: refuse to start or hand out runs from now on; the runs left to stop."""
        self._listener.stop()
        with self._runs_lock:
            self._closing = True
            runs, self._runs = self._runs, []
        return runs

    def close(self) -> None:
        """Shut down: close stdin, wait, terminate, wait, kill (every wait bounded).

        Not under the start lock: a start stuck in its handshake must not delay shutdown.
        """
        _stop_runs(self.closing_runs(), f"server '{self.name}' was shut down")


class _Upstreams:
    """Every configured upstream: lookup by name with helpful errors, parallel start and stop."""

    def __init__(self, config: _ClientConfig, settings: _Settings, client: _ClientLink,
                 spawn: Callable[..., Any] = subprocess.Popen,
                 environ: Optional[Dict[str, str]] = None) -> None:
        self.config, self.client = config, client
        self._all = {n: _Upstream(s, settings, client, spawn, environ=environ) for n,
                     s in config.specs.items()}

    def listen(self, on_log: Optional[Callable[[str, dict], None]] = None,
               on_tools_changed: Optional[Callable[[str], None]] = None) -> None:
        """Where every upstream's log messages and tools/list_changed go. Set after construction:
        they go to the Server, which is built after the upstreams (--check uses them without
        one)."""
        for up in self._all.values():
            up.on_log, up.on_tools_changed = on_log, on_tools_changed

    def set_level(self, level: str) -> None:
        """The client's logging/setLevel: kept for every upstream (_ClientLink.log_level) and
        applied to the running ones at once, in parallel."""
        self.client.log_level = level
        self.each(lambda up: up.apply_level())

    def roots_changed(self) -> None:
        """The client's roots changed: tell every running upstream that was offered roots."""
        for up in self._all.values():
            up.notify_roots_changed()

    def names(self) -> List[str]:
        return list(self._all)

    def get(self, name: str) -> _Upstream:
        up = self._all.get(name)
        if up is not None:
            return up
        cfg = self.config
        if cfg.error:
            raise _ToolError(f"No upstream servers are available: {cfg.error}. Fix it and restart "
                             f"Abstract.")
        if name in cfg.unselected:
            raise _ToolError(f"Server '{name}' is in {cfg.path} but not in ABSTRACT_PROXY_SERVERS; "
                             f"available: {_names_list(self.names())}.")
        raise _ToolError(f"Unknown server '{name}'. Available servers: {_names_list(self.names())} "
                         f"(from {cfg.path}).")

    def each(self, fn: Callable[[_Upstream], Any], names: Optional[List[str]] = None,
             first: Optional[float] = None) -> Dict[str, Any]:
        """fn(upstream) for several upstreams in parallel; maps name -> result or the exception.
        `first`: wait for them all, but after `first` seconds only while they keep answering
        (one within the last _WAIT_QUIET_S) and at most _WAIT_MAX_S in all; one not done then
        maps to up.not_yet() (fn goes on, on its daemon thread, within its own bounds)."""
        targets = [self._all[n] for n in (names if names is not None else self.names())]
        out: Dict[str, Any] = {}
        done = threading.Condition()

        def run(up: _Upstream) -> None:
            try:
                got = fn(up)
            except Exception as e:  # reported per server, never failing the others
                got = e
            with done:
                out[up.name] = got
                done.notify_all()

        for u in targets:
            threading.Thread(target=run, args=(u,), name=f"each-{u.name}", daemon=True).start()
        t0 = last = time.monotonic()
        with done:
            while len(out) < len(targets):
                seen, now = len(out), time.monotonic()
                until = (float("inf") if first is None else
                         min(t0 + _WAIT_MAX_S, max(t0 + first, last + _WAIT_QUIET_S)))
                if now >= until:
                    break
                done.wait(None if until == float("inf") else until - now)
                last = time.monotonic() if len(out) > seen else last
            got = dict(out)
        return {u.name: got[u.name] if u.name in got else u.not_yet() for u in targets}

    def close(self) -> None:
        """Stop every upstream together (see _stop_runs): one budget for all, not one each."""
        runs = [run for up in self._all.values() for run in up.closing_runs()]
        if runs:
            _log.info("stopping %s", _plural(len(runs), "upstream server"))
        _stop_runs(runs, "Abstract is shutting down")


# ==== Results =====================================================================
# One path takes an upstream tools/call result apart (the MCP wrapper removed, binaries
# decoded); storing, caching and file input all build on it.

_MIME_EXT = {
    "image/png": ".png", "image/jpeg": ".jpg", "image/jpg": ".jpg", "image/gif": ".gif",
    "image/webp": ".webp",
    "image/svg+xml": ".svg", "image/bmp": ".bmp", "image/tiff": ".tiff", "image/x-icon": ".ico",
    "audio/wav": ".wav", "audio/x-wav": ".wav", "audio/wave": ".wav", "audio/mpeg": ".mp3",
    "audio/mp3": ".mp3",
    "audio/ogg": ".ogg", "audio/flac": ".flac", "audio/aac": ".aac", "audio/mp4": ".m4a",
    "audio/webm": ".weba",
    "application/pdf": ".pdf", "application/zip": ".zip", "application/gzip": ".gz",
    "application/json": ".json",
    "text/plain": ".txt", "text/csv": ".csv", "text/html": ".html", "text/markdown": ".md",
}


class _Blob:
    """A binary item of a result (image, audio, embedded blob), decoded."""

    __slots__ = ("data", "mime", "ext", "kind")

    def __init__(self, data: bytes, mime: str, kind: str) -> None:
        self.data, self.mime, self.kind = data, mime, kind
        self.ext = _MIME_EXT.get(mime.split(";")[0].strip().lower(), ".bin")


def _image_dims(data: bytes) -> Optional[Tuple[int, int]]:
    """(width, height) where an image's header says it cheaply (PNG, GIF, BMP, a JPEG's frame
    header within its first 64 KB); None for anything else."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data[:2] == b"BM" and len(data) >= 26:
        w, h = struct.unpack("<ii", data[18:26])
        return abs(w), abs(h)
    pos = 2 if data[:2] == b"\xff\xd8" else len(data)
    while pos + 9 <= min(len(data), 1 << 16) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # start of frame
            h, w = struct.unpack(">HH", data[pos + 5:pos + 9])
            return w, h
        pos += 2 + struct.unpack(">H", data[pos + 2:pos + 4])[0]
    return None


def _repeats_content(structured: Any, content: Any) -> bool:
    """Whether structuredContent only repeats the content items under one key, as
    server-filesystem's read_media_file does ({"content": [<the image item>]}): then it is no
    data of its own, and an image's base64 is not stored (or shown) a second time."""
    return (isinstance(structured, dict) and len(structured) == 1 and isinstance(content, list)
            and bool(content) and next(iter(structured.values())) == content)


class _Extracted:
    """What a tool result holds once the MCP wrapper is removed."""

    __slots__ = ("data", "blobs", "has_data")

    def __init__(self, data: Any, blobs: List[_Blob], has_data: bool) -> None:
        self.data, self.blobs, self.has_data = data, blobs, has_data


_LEADING_SPACE = re.compile(r"\s*")


def _json_or_text(text: str) -> Any:
    """A JSON value when the text is JSON (object, array, or a scalar), else the text itself."""
    start = _LEADING_SPACE.match(text).end()  # type: ignore[union-attr]  (no copy of a big text)
    head = text[start:start + 5]
    if head[:1] in ('{', '[', '"') or re.match(r"^(-?\d|true|false|null)", head):
        try:
            # json.loads allows surrounding whitespace; NaN/Infinity are not JSON: such text stays
            # text
            return json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            pass
    return text


def _b64(data: Any, what: str) -> bytes:

    try:
        return base64.b64decode(data or "", validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise _ToolError(f"the {what} item's data is not valid base64") from None


def _item_value(item: dict, blobs: List[_Blob]) -> Tuple[bool, Any]:
    """(True, value) for an item that carries data, (False, None) for one stored as a blob."""
    kind = item.get("type")
    if kind == "text":
        return True, _json_or_text(str(item.get("text", "")))
    if kind in ("image", "audio"):
        blobs.append(_Blob(_b64(item.get("data"), kind), str(item.get("mimeType") or ""), kind))
        return False, None
    if kind == "resource" and isinstance(item.get("resource"), dict):
        res = item["resource"]
        if "text" in res:
            return True, _json_or_text(str(res["text"]))
        blobs.append(_Blob(_b64(res.get("blob"), "resource"), str(res.get("mimeType") or ""),
                           "resource"))
        return False, None
    return True, item  # resource_link and anything unknown: kept as it is, in the JSON


def _wraps_text(structured: Any, text: Optional[str], value: Any) -> bool:
    """Whether structuredContent only wraps the result's one text item, as server-filesystem's
    {"content": "<the text>"} or an SDK's {"result": <the text's JSON>}: then the text is the
    payload, and the wrapper is not stored."""
    if text is None or not isinstance(structured, dict) or len(structured) != 1:
        return False
    key, inner = next(iter(structured.items()))
    if isinstance(inner, str):
        return inner == text or inner.strip() == text.strip()
    # Other values only as the Python SDK wraps a tool's plain return value: {"result": <value>}
    # ({"count": 3} beside a text "3" keeps its field name; True is no 1)
    return key == "result" and value is not text and type(inner) is type(value) and inner == value


def _extract(result: dict) -> _Extracted:
    """The data of a tool result, its MCP wrapper removed (docs/reference/formats.md):
    1. structuredContent, unless it only wraps the one text item (_wraps_text) or repeats the
       content items (_repeats_content);
    2. else the text items: JSON parsed when they are JSON, the text itself when not; several
       texts that are all plain text are joined by newlines, other mixes become a list;
    3. binary items (image, audio, blob resources) are decoded into blobs, stored beside."""
    blobs: List[_Blob] = []
    values, texts = [], []
    for item in result.get("content") or []:
        if isinstance(item, dict):
            keep, value = _item_value(item, blobs)
            if keep:
                values.append(value)
                texts.append(item.get("text") if item.get("type") == "text" else None)
    structured = result.get("structuredContent")
    if "structuredContent" in result and not _repeats_content(structured, result.get("content")):
        text = texts[0] if len(texts) == 1 and isinstance(texts[0], str) else None
        if not _wraps_text(structured, text, values[0] if values else None):
            return _Extracted(structured, blobs, True)
    if not values:
        return _Extracted(None, blobs, False)
    if len(values) > 1 and all(isinstance(v, str) and v is t for v, t in zip(values, texts)):
        return _Extracted("\n".join(values), blobs, True)  # plain texts: one text
    return _Extracted(values[0] if len(values) == 1 else values, blobs, True)


# Markdown's marks at a line's start (headings, fences, lists, tables) and links anywhere.
_MD_LINE = re.compile(r"^(?:#{1,6} |```|\s{0,3}[-*+] |\s{0,3}\d+\. |\|.*\|\s*$|> )", re.MULTILINE)
_MD_LINK = re.compile(r"\[[^\]\n]+\]\([^)\s]+\)")


def _looks_markdown(text: str) -> bool:
    """Text whose first 20,000 characters carry a heading and a few more Markdown marks."""
    head = text[:20000]
    marks = _MD_LINE.findall(head)
    headings = sum(1 for m in marks if m.startswith("#"))
    return headings >= 1 and len(marks) + len(_MD_LINK.findall(head)) >= 3


def _natural_format(data: Any) -> str:
    """The format that fits data when the model named none: JSON data stays JSON; text that is
    not JSON is stored as it is (.md when it reads as Markdown, else .txt)."""
    if isinstance(data, str):
        return "md" if _looks_markdown(data) else "txt"
    return "json"


def _suggested_format(data: Any) -> str:
    """The file format to suggest to the model for data: csv for records, else the natural one."""
    if isinstance(data, _Records) or not isinstance(data, str) and _as_records(data)[0] is not None:
        return "csv"
    return _natural_format(data)


def _delimited_rows(text: str, delimiter: str) -> Optional[List[Dict[str, Any]]]:
    """Text that is itself CSV or TSV (a read_text_file of a .csv) as records of its cells,
    strings kept exactly; None when it is not such a table (no delimiter in the header, ragged
    rows, a single line)."""
    first = text[:text.find("\n")] if "\n" in text else text
    if delimiter not in first:
        return None
    try:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
        rows = [r for r in reader if r]
    except csv.Error:
        return None
    width = len(rows[0]) if rows else 0
    if len(rows) < 2 or any(len(r) != width for r in rows) or len(set(rows[0])) != width:
        return None
    header = rows[0]
    return [dict(zip(header, r)) for r in rows[1:]]


def _tabular_text(data: Any, fmt: str) -> Any:
    """For csv/tsv asked of plain text: the rows the text holds as CSV or TSV, else the text."""
    if fmt not in ("csv", "tsv") or not isinstance(data, str):
        return data
    for delimiter in ("\t", ",") if fmt == "tsv" else (",", "\t"):
        rows = _delimited_rows(data, delimiter)
        if rows is not None:
            return rows
    return data


def _result_texts(result: dict) -> List[str]:
    """The texts of a result's text items."""
    return [str(i.get("text", "")) for i in result.get("content") or [] if isinstance(i, dict)
            and i.get("type") == "text"]


def _error_text(result: dict, limit: int = 2000) -> str:
    """An upstream's error result as text for the model: its first `limit` characters, cut after
    a whole word and saying how much was left out."""
    text = "\n".join(_result_texts(result))
    cut = _word_cut(text, limit)
    if cut < len(text):
        return (f"{text[:cut].rstrip()} … (cut here: {len(text) - cut:,} more characters of "
                f"{len(text):,})")
    return text or "(no message)"


def _json_view(data: Any) -> str:
    """The text view of JSON data (a cached output, a value a pointer picks), valid JSON that
    pages well by line: records one compact record per line (a list of objects, or the one
    list of records in an object, whose other members get a line each); other JSON up to
    _VIEW_INDENT_MAX characters indented by two spaces, larger a list's items or an object's
    members one to a line (_json_lines)."""
    if isinstance(data, list) and data:
        key, records = None, all(isinstance(x, dict) for x in data)
    elif isinstance(data, dict) and data:
        key = _records_key(data)[0]
        records = key is not None
    else:  # a scalar, [] or {}
        return _view_json(data)
    if records or _json_longer(data, _VIEW_INDENT_MAX):  # (measured without encoding it twice)
        return "".join(_json_lines(data, key))
    return json.dumps(data, indent=2, ensure_ascii=False)


def _text_view(data: Any) -> str:
    """The text the model reads of a result's data: text as it is, JSON laid out by _json_view."""
    return data if isinstance(data, str) else _json_view(data)


def _records_preview(data: Any, limit: int) -> Optional[Tuple[str, int, int]]:
    """(text, records shown, total records) showing the first records whole, or None."""
    rows, _ = (data.head, "") if isinstance(data, _Records) else _as_records(data)
    # scalars wrapped as {"value": x} are no records
    if not rows or (isinstance(data, list) and rows is not data):
        return None
    out, used = [], 0
    for row in rows:
        line = _dumps(row)
        if out and used + len(line) > limit:
            break
        out.append(line if len(line) <= max(limit, 200) * 2 else line[:max(limit, 200) * 2]
                   + " [...]")
        used += len(line)
    return "\n".join(out), len(out), data.count if isinstance(data, _Records) else len(rows)


_SHAPE_SCAN = 20000  # records a shape's types and counts are taken from


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "integer" if isinstance(value, int) else "number"
    return "text" if isinstance(value, str) else "array" if isinstance(value, list) else "object"


# The kind _json_kind names for each type json.loads makes (other types, from YAML or CSV, are
# looked up by _kind_of_type once each).
_TYPE_KINDS: Dict[type, str] = {type(None): "null", bool: "boolean", int: "integer",
                                float: "number", str: "text", list: "array", dict: "object"}


def _kind_of_type(kind: type) -> str:
    if kind not in _TYPE_KINDS:
        bases = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "text"),
                 (list, "array"))
        _TYPE_KINDS[kind] = next((name for base, name in bases if issubclass(kind, base)), "object")
    return _TYPE_KINDS[kind]


class _Columns:
    """The columns of the records seen so far (at most _SHAPE_SCAN): how often each key has each
    type of value, counted a row at a time in C (Counter over (key, type) pairs)."""

    __slots__ = ("pairs", "rows")

    def __init__(self) -> None:
        self.pairs: "collections.Counter[Tuple[Any, type]]" = collections.Counter()
        self.rows = 0

    def add(self, rows: List[Dict[str, Any]]) -> None:
        """Count a list of rows in one call: no Python frame a row."""
        pairs = map(zip, rows, map(map, itertools.repeat(type), map(dict.values, rows)))
        self.pairs.update(itertools.chain.from_iterable(pairs))
        self.rows += len(rows)

    def keys(self) -> List[Any]:
        """The keys in first-seen order."""
        return list(dict.fromkeys(key for key, _ in self.pairs))

    def describe(self, total: int) -> str:
        """"id integer, name text, tags array (3 null, 1 missing)": each column's kinds of value
        (most common first) and how many rows have it null or lack it; `total` rows in all."""
        kinds: Dict[Any, Dict[str, int]] = {}
        for (key, kind), n in self.pairs.items():
            seen = kinds.setdefault(key, {})
            name = _kind_of_type(kind)
            seen[name] = seen.get(name, 0) + n
        parts = []
        for key, seen in kinds.items():
            nulls = seen.pop("null", 0)
            missing = self.rows - nulls - sum(seen.values())
            # SQLite has no booleans: query_output's table holds them as 1 and 0 (_sql_value)
            counts = (["1/0 in SQL"] * ("boolean" in seen)
                      + [f"{nulls:,} null"] * bool(nulls and seen)
                      + [f"{missing:,} missing"] * bool(missing))
            parts.append(f"{key} {'|'.join(sorted(seen, key=lambda k: -seen[k])) or 'null'}"
                         + (f" ({', '.join(counts)})" if counts else ""))
        of = f" (types from the first {_SHAPE_SCAN:,})" if total > _SHAPE_SCAN else ""
        return ", ".join(parts) + of


def _columns_of(rows: List[Dict[str, Any]]) -> _Columns:
    columns = _Columns()
    columns.add(rows[:_SHAPE_SCAN])
    return columns


class _Records:
    """A JSON array of records as one pass over its text found it (_scan_records), never held
    whole as Python objects: how many, their columns (of the first _SHAPE_SCAN), the first few
    (as many as a preview of `head_chars` characters can show)."""

    __slots__ = ("count", "columns", "head", "head_chars", "_head_used")

    def __init__(self, head_chars: int) -> None:
        self.count, self.columns, self.head, self.head_chars = 0, _Columns(), [], head_chars
        self._head_used = 0

    def add(self, rows: List[Dict[str, Any]], count: int) -> None:
        """Take the next `count` records, a batch at a time: `rows` holds them while wants()."""
        if self.count < _SHAPE_SCAN:
            self.columns.add(rows[:_SHAPE_SCAN - self.count])
        for row in rows:
            if self._head_used > self.head_chars:  # (_records_preview measures compact JSON)
                break
            self.head.append(row)
            self._head_used += len(_dumps(row))
        self.count += count

    def wants(self) -> bool:
        """Whether the next records are still needed whole: for the shape, or the preview."""
        return self.count < _SHAPE_SCAN or self._head_used <= self.head_chars


_JSON_SPACE = re.compile(r"[ \t\n\r]*")  # what json.loads skips between values
_JSON_COMMA = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")  # between two values of an array


def _text_twin(structured: Any, text: Any) -> bool:
    """Whether structuredContent is only the text itself under one key, as server-filesystem's
    {"content": "<the text>"} (the narrowest case of _wraps_text, checked without decoding)."""
    if not isinstance(structured, dict) or len(structured) != 1:
        return False
    inner = next(iter(structured.values()))
    if isinstance(text, _JsonString):
        return text.same(inner)
    return type(inner) is str and inner == text


def _records_text(result: dict, min_chars: int = 0) -> Any:
    """The text of a result that is one text item and nothing else (or that and its twin in
    structuredContent: _text_twin), longer than `min_chars`, when it may be a JSON array (it
    starts with "["): its data is then that array, which the cache reads in one pass
    (_scan_records) rather than as a whole. A str, or the _JsonString a long answer left
    undecoded (Connection.request's `longs`)."""
    items = result.get("content")
    if not isinstance(items, list) or len(items) != 1:
        return None
    item = items[0]
    text = item.get("text") if isinstance(item, dict) and item.get("type") == "text" else None
    if not isinstance(text, (str, _JsonString)) or len(text) <= min_chars:
        return None
    if "structuredContent" in result and not _text_twin(result["structuredContent"], text):
        return None
    if isinstance(text, _JsonString):
        return text if text.first_char() == "[" else None
    start = _JSON_SPACE.match(text).end()  # type: ignore[union-attr]
    return text if text[start:start + 1] == "[" else None


class _Pieces:
    """A text given in pieces, read from the front by a scanner that needs whole values."""

    __slots__ = ("_rest",)

    def __init__(self, pieces: Iterable[str]) -> None:
        self._rest = iter(pieces)

    def more(self, text: str, pos: int) -> Optional[str]:
        """text[pos:] with the next pieces after it, added until it is at least twice as long as
        before (so a value spanning many pieces is scanned again only a few times); None when
        there are no more pieces."""
        kept = text[pos:]
        parts, size = [kept], len(kept)
        for piece in self._rest:
            parts.append(piece)
            size += len(piece)
            if size >= 2 * len(kept):
                break
        return "".join(parts) if len(parts) > 1 else None

    def skip(self, text: str, pos: int) -> Tuple[str, int]:
        """(text, position) past the JSON whitespace at `pos`, into the next pieces if need be."""
        pos = _JSON_SPACE.match(text, pos).end()  # type: ignore[union-attr]
        while pos == len(text):
            got = self.more(text, pos)
            if got is None:
                break
            text = got
            pos = _JSON_SPACE.match(text).end()  # type: ignore[union-attr]
        return text, pos


def _cut_short(e: BaseException, pos: int, end: int) -> bool:
    """Whether json's scanner failed on a value starting at `pos` only because its text stops
    at `end`: a string left open, or a failure within the last few characters (a number, a
    "true", an escape or a delimiter cut off); not a value that is wrong where it stands."""
    if isinstance(e, json.JSONDecodeError):
        return e.msg.startswith("Unterminated string") or e.pos >= end - 6
    at = e.value if isinstance(e, StopIteration) and isinstance(e.value, int) else pos
    return isinstance(e, StopIteration) and at >= end - 6  # (its value: where none was found)


def _one_line(text: str) -> bool:
    """Whether a JSON text is on one line and escapes nothing to \\u or \\/ (_scan_records): no
    escape but those _view_json writes too."""
    return "\n" not in text and "\r" not in text and "\\u" not in text and "\\/" not in text


def _scan_records(pieces: Iterable[str], records: _Records, batch: int = 250) -> Iterator[str]:
    """The text view of a JSON array of objects given in pieces (a str is one piece), in parts:
    laid out as _json_view lays out records (one a line), found one element at a time by json's
    C scanner, so no more than a batch of records (and about a piece of text) is ever held
    (250: their lines, 4 bytes a character once an emoji is in them, are joined and encoded a
    batch at a time); `records` is filled a batch at a time. A record's line is its own text
    when that is one line escaping nothing to \\u or \\/ (not encoded again, which took a third
    of the time), else as _json_view writes it.
    _NotRecords as soon as the text proves to be anything else (not JSON, an element that is no
    object, an empty array, more after the array): the caller reads it the ordinary way."""
    # json's C scanner, as _json_or_text parses (raw_decode without its wrapper)
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    scan = json.scanner.make_scanner(decoder)  # type: ignore[attr-defined]
    encode = _view_json  # as _json_view writes
    comma = _JSON_COMMA.match
    src = _Pieces(pieces)
    text, pos = src.skip("", 0)
    text, pos = src.skip(text, pos + 1)  # past the "[" (_records_text)
    plain = _one_line(text)
    lead, lines, rows, keep = "[\n", [], [], True
    while True:
        try:
            value, end = scan(text, pos)
        except (StopIteration, ValueError, RecursionError) as e:
            # the value may only be cut by the end of a piece: read more and scan it again
            got = src.more(text, pos) if _cut_short(e, pos, len(text)) else None
            if got is None:
                raise _NotRecords() from None
            text, pos, plain = got, 0, _one_line(got)
            continue
        if type(value) is not dict:  # (an object is whole once scanned: it ends with "}")
            raise _NotRecords()
        line = text[pos:end]  # the server's own text, when it is one line and escapes nothing
        if not plain and not _one_line(line):  # (one test for all the lines of a plain text)
            line = encode(value)
        lines.append(line)
        if keep:  # (the records the shape or the preview still needs)
            rows.append(value)
        after = comma(text, end)
        if after is not None and after.end() < len(text):  # (the common case: no call a record)
            pos, more = after.end(), ","
        else:  # the end of a piece, the array's end, or anything else
            was = text
            text, pos = src.skip(text, end)
            more = text[pos:pos + 1]
            if more == ",":
                text, pos = src.skip(text, pos + 1)
            if text is not was:  # (more pieces were read)
                plain = _one_line(text)
        if more == ",":
            if len(lines) >= batch:
                records.add(rows, len(lines))
                yield lead + ",\n".join(lines) + ",\n"
                lead, lines, rows, keep = "", [], [], records.wants()
            continue
        if more != "]":
            raise _NotRecords()
        rest, end = src.skip(text, pos + 1)
        if end != len(rest):  # more after the array
            raise _NotRecords()
        records.add(rows, len(lines))
        yield lead + ",\n".join(lines) + "\n]"
        return


def _view_count(f: Any, block: int = 1 << 20) -> Optional[int]:
    """How many records a text view holds when it lays out only records, one a line ("[", then
    a line per object, then "]"), counted by its lines a block at a time, none of them parsed
    (a line is one JSON value: one that starts with "{" is an object); None when the view is
    laid out otherwise. `f`: its binary file, read from the start."""
    if f.readline() != b"[\n":
        return None
    lines = objects = 0
    last = b"\n"
    while True:
        data = f.read(block)
        if not data:
            break
        lines += data.count(b"\n")
        objects += data.count(b"\n{") + (last == b"\n" and data[:1] == b"{")
        last = data[-1:]
    # every record's line ends with a newline, and the view with "]" (_json_lines)
    return objects if objects and lines == objects and last == b"]" else None


def _skip_view_lines(f: Any, count: int, block: int = 1 << 20) -> None:
    """Move `f` (a binary file) past `count` more lines, counted a block at a time, unparsed."""
    while count > 0:
        start = f.tell()
        data = f.read(block)
        if not data:
            return
        n = data.count(b"\n")
        if n < count:
            count -= n
            continue
        pos = -1
        for _ in range(count):
            pos = data.index(b"\n", pos + 1)
        f.seek(start + pos + 1)
        return


def _view_records(f: Any, block: int = 1 << 18, skip: int = 0) -> Iterator[Dict[str, Any]]:
    """The records of a text view that lays them out one a line (_json_view, _scan_records),
    read from its binary file `f` about `block` bytes of whole lines at a time (UTF-8, lone
    surrogates kept; 256 KiB: the text of a block is 4 bytes a character once it holds an emoji,
    and 1 MiB blocks cost a query table's load about 9 MB more peak memory, for no measurable
    speed), each record found by json's C scanner; _NotRecords at the first line
    that shows the view is laid out otherwise (indented, a list of other values, ...). `skip`:
    the first records passed over unparsed (fewer than the view holds: _view_count)."""
    if f.readline() != b"[\n":
        raise _NotRecords()
    _skip_view_lines(f, skip, block)
    scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[attr-defined]
    while True:
        text = b"".join(f.readlines(block)).decode("utf-8", "surrogatepass")
        if not text:
            raise _NotRecords()  # no "]": not a view this cache wrote
        pos, end = 0, len(text)
        while pos < end:
            if text[pos] == "]":  # the end: nothing may follow
                if pos + 1 != end or f.read(1):
                    raise _NotRecords()
                return
            try:
                row, pos = scan(text, pos)
            except (StopIteration, ValueError, RecursionError):  # StopIteration: no value here
                raise _NotRecords() from None
            if type(row) is not dict:
                raise _NotRecords()
            yield row
            if text.startswith(",\n", pos):
                pos += 2
            elif text.startswith("\n", pos) and (pos + 1 == end or text[pos + 1] == "]"):
                pos += 1  # the last record (its "]" may start the next block)
            else:
                raise _NotRecords()


def _list_kind(items: List[Any]) -> str:
    """"list of 12 objects", "list of 3 integers|texts" for a list's first 1,000 values."""
    kinds = sorted({_json_kind(v) for v in items[:1000]})
    return f"list of {len(items):,}" + (f" {'|'.join(k + 's' for k in kinds)}" if kinds else "")


def _tree_shape(data: Any, limit: int, depth: int = 0) -> List[str]:
    """The keys of nested objects as an indented tree, with each list's size, within `limit`
    characters (three levels, 20 keys a level)."""
    out: List[str] = []
    if not isinstance(data, dict):
        return out
    for key in list(data)[:20]:
        value = data[key]
        line = "  " * depth + f"{key}: " + (_list_kind(value) if isinstance(value, list) else
                                            f"object of {_plural(len(value), 'key')}"
                                            if isinstance(value, dict)
                                            else _json_kind(value))
        if sum(map(len, out)) + len(line) > limit:
            out.append("  " * depth + "...")
            return out
        out.append(line)
        if isinstance(value, dict) and depth < 2:
            out.extend(_tree_shape(value, limit - sum(map(len, out)), depth + 1))
    if len(data) > 20:
        out.append("  " * depth + f"... and {len(data) - 20:,} more keys")
    return out


def _shape(data: Any, limit: int, read_back: bool = False) -> str:
    """What the data is, for a preview: records with their columns' types, or the tree of an
    object's keys (the size of each list); "" for text and scalars. `read_back`: the records
    are stored as CSV or TSV, so their types are the ones reading the file back gives (text
    cells typed by _csv_value), which query_output and call_tool_with_file_content see."""
    if isinstance(data, _Records):
        return (f"Shape: {_plural(data.count, 'record')}; columns: "
                f"{data.columns.describe(data.count)}")[:max(limit, 200)]
    rows, _ = _as_records(data)
    if rows is not None and (not isinstance(data, list) or rows is data):
        where = f" under {_records_key(data)[0]!r}" if isinstance(data, dict) else ""
        scan = rows if not read_back else [
            {k: _csv_value(v) if isinstance(v, str) else v for k, v in r.items()}
            for r in rows[:_SHAPE_SCAN]]
        return (f"Shape: {_plural(len(rows), 'record')}{where}; columns: "
                f"{_columns_of(scan).describe(len(rows))}"[:max(limit, 200)])
    if isinstance(data, list):
        return f"Shape: a {_list_kind(data)}"
    if isinstance(data, dict):
        return "\n".join(["Shape: an object:"] + _tree_shape(data, limit))
    return ""


def _query_hint(source: str, data: Any) -> str:
    """How to ask the data with query_output instead of reading it: "" when it holds no records."""
    # a CSV or TSV table as text (a read_text_file of a .csv): its header decides
    if isinstance(data, str):
        head = data[:20000]
        head = head[:head.rfind("\n")] if len(data) > len(head) and "\n" in head else head
        data = _tabular_text(head, "csv")
        if isinstance(data, str):  # plain text: a row a line
            return (f'Ask it in SQL instead of reading it: query_output {{"source": '
                    f'{_dumps(source)}, "sql": "SELECT n, line FROM data WHERE line LIKE '
                    f'\'%error%\'"}} (table data; columns: n, line: a row a line, n numbered '
                    f'as start_line counts).')
    rows, _ = ([], "") if isinstance(data, _Records) else _as_records(data)
    pointer = ""
    if rows is None and isinstance(data, dict):
        lists = [k for k, v in data.items() if isinstance(v, list) and v
                 and all(isinstance(x, dict) for x in v)]
        if not lists:
            return ""
        pointer = ', "records_pointer": "/%s"' % lists[0].replace("~", "~0").replace("/", "~1")
        rows = data[lists[0]]
    if isinstance(data, _Records):
        columns = data.columns.keys()  # (the keys of the records the shape scanned)
    elif not rows or (isinstance(data, list) and rows is not data):
        return ""
    else:
        columns = list(dict.fromkeys(itertools.chain.from_iterable(rows[:_SHAPE_SCAN])))
    names = ", ".join(columns[:30]) + (", ..." if len(columns) > 30 else "")
    return (f'Ask it in SQL instead of reading it: query_output {{"source": '
            f'{_dumps(source)}{pointer}, "sql": "SELECT count(*) FROM data"}} (table data; '
            f'columns: {names}).')


# ==== Output cache ================================================================
# A large direct result is kept in a private cache directory; the client gets a preview and a
# token, and pulls windows of the rest with retrieve_cached_output (or over a signed URL).

_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{16,64}\Z")  # \Z: "$" would also match before a final newline
_CACHE_URI = "abstract://cache/"
# in every cache directory: Abstract made it, and may delete in it
_CACHE_MARKER = ".abstract-cache"
# The only names the cache ever deletes: its entries' files (a token of secrets.token_urlsafe(18)
# is 24 characters; "-<n>" numbers binary items and name collisions) and the writer's temporaries.
_CACHE_FILE_RE = re.compile(r"(?:[A-Za-z0-9_-]{24}(?:-[0-9]+){0,2}"
                            r"\.(?:json|txt|meta\.json|[a-z0-9]{1,5})"
                            r"|\.abstract-[A-Za-z0-9_]{1,32}\.tmp)\Z")


def _nested(a: str, b: str) -> bool:
    """Whether one of two resolved paths is the other or inside it."""
    if _WINDOWS or _MACOS:  # file systems that usually ignore case (and, on macOS, Unicode
        a, b = _caseless(a), _caseless(b)  # normalisation): err on the side of "nested"
    try:
        return os.path.commonpath([a, b]) in (a, b)
    except ValueError:  # different drives (Windows)
        return False


def _claim_cache_dir(directory: str, roots: Iterable[str] = ()) -> Optional[int]:
    """Make `directory` the output cache, or raise ConfigError saying why it cannot be; where
    _DIR_FDS, returns the directory held open (the caller closes it), else None.

    The cache deletes files in its directory, so it must be Abstract's own: apart from every
    allowed directory, not a symlink, owned by this user (POSIX), and new, empty, or marked by
    an earlier run. Only then is it set to owner-only (0700). Where _DIR_FDS the checks after
    the first are made on the opened descriptor (O_NOFOLLOW), so a symlink swapped in for the
    folder meanwhile is refused, never marked or chmodded.
    """
    real = os.path.realpath(directory)
    for root in roots:
        if _nested(real, os.path.realpath(root)):
            raise ConfigError(f"it is, holds or lies inside the allowed directory {root}")
    fd = None
    try:
        if not os.path.lexists(directory):
            os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.lstat(directory)
        if stat.S_ISLNK(st.st_mode):
            raise ConfigError("it is a symbolic link")
        if not stat.S_ISDIR(st.st_mode):
            raise ConfigError("it is not a directory")
        if _DIR_FDS:
            try:
                fd = os.open(directory, _O_DIR)
            except OSError as e:
                raise ConfigError(_walk_failure(e)) from None
            st = os.fstat(fd)
            if not os.path.samestat(st, os.stat(real)):  # the folder checked against the roots
                raise ConfigError("it was replaced while Abstract checked it; start again")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():  # no owner ids on Windows
            raise ConfigError(f"it belongs to another user (uid {st.st_uid})")
        _mark_cache_dir(directory, fd)
        if fd is not None:
            os.fchmod(fd, 0o700)
        elif not _WINDOWS:
            os.chmod(directory, 0o700)
        return fd
    except BaseException as e:
        if fd is not None:
            os.close(fd)
        if isinstance(e, OSError):
            raise ConfigError(e.strerror or str(e)) from None
        raise


def _mark_cache_dir(directory: str, dfd: Optional[int]) -> None:
    """Check for the marker, or write it into a directory that holds nothing else (or only names
    of the cache's own forms: a cache of a version that wrote no marker). `dfd`: the directory's
    descriptor, everything relative to it; None (Windows): paths."""
    marker = _at(dfd, _CACHE_MARKER, os.path.join(directory, _CACHE_MARKER))
    try:
        if stat.S_ISREG(os.stat(marker, dir_fd=dfd, follow_symlinks=False).st_mode):
            return
        raise ConfigError(f"its {_CACHE_MARKER} is not a regular file")
    except FileNotFoundError:
        pass
    names = os.listdir(directory if dfd is None else dfd)
    foreign = sorted(n for n in names if n != _CACHE_MARKER and not _CACHE_FILE_RE.match(n))
    if foreign:
        raise ConfigError(f"it already holds files that are not Abstract's "
                          f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}) and no "
                          f"{_CACHE_MARKER} marker")
    try:
        flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0))
        fd = os.open(marker, flags, 0o600, dir_fd=dfd)
    except FileExistsError:  # another Abstract process starting at the same moment
        return
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("This directory is Abstract's output cache: Abstract deletes expired entries in "
                "it.\n")


def _result_size(res: dict, bound: float = float("inf")) -> int:
    """Characters of content in a tool result (text, base64 data, embedded resources); the
    structuredContent is serialised to be measured only when the items are within `bound`."""
    total = 0
    for item in res.get("content") or []:
        if isinstance(item, dict):
            inner = item.get("resource") if isinstance(item.get("resource"), dict) else item
            for key in ("text", "data", "blob"):
                v = inner.get(key)
                if isinstance(v, (str, _JsonString)):
                    total += len(v)
    if "structuredContent" in res and total <= bound:
        total = max(total, _json_chars(res["structuredContent"]))
    return total


def _json_pointer(data: Any, pointer: str) -> Any:
    """The value at an RFC 6901 JSON Pointer ("" is the whole document)."""
    if pointer == "":
        return data
    if not pointer.startswith("/"):
        raise _ToolError(f"pointer {pointer!r} must start with '/' (RFC 6901), e.g. /results/0")
    node = data
    for raw in pointer[1:].split("/"):
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif (isinstance(node, list) and re.match(r"^(0|[1-9][0-9]*)$", key)
              and int(key) < len(node)):
            node = node[int(key)]
        else:
            where = f"an array of {len(node)}" if isinstance(node, list) else type(node).__name__
            raise _ToolError(f"pointer {pointer!r}: no {key!r} in {where}")
    return node


class _Written(NamedTuple):
    """What _write_parts wrote: characters, bytes, the SHA-256 of the bytes, the first part."""
    chars: int
    bytes: int
    sha256: str
    head: str


def _write_parts(d: _Dir, stem: str, ext: str, parts: Iterable[Any],
                 hashed: bool = True) -> _Written:
    """Write text given in parts (UTF-8, lone surrogates kept) as a new cache file, measuring
    and (if `hashed`) hashing it on the way, so no part is held longer than its write. A part
    may also be bytes or a memoryview, already UTF-8 (_compact_parts' _JsonString): counted in
    bytes only, not characters."""
    import hashlib

    digest, count, head = hashlib.sha256() if hashed else None, [0, 0], []

    def encoded() -> Iterator[bytes]:
        for part in parts:
            if isinstance(part, (bytes, memoryview)):
                data = part
            else:
                data = part.encode("utf-8", "surrogatepass")
                count[0] += len(part)
            count[1] += len(data)
            if digest is not None:
                digest.update(data)
            if not head:
                head.append(part)
            yield data

    _write_new(d, stem, ext, encoded(), 0o600, False)
    return _Written(count[0], count[1], digest.hexdigest() if digest is not None else "",
                    head[0] if head else "")


class _CacheEntry:
    """One cached result: metadata in memory, the result and its text view on disk."""

    __slots__ = ("token", "server", "tool", "created", "expires", "chars", "ctype", "bytes",
                 "files",
                 "sha256")

    def __init__(self, **kw: Any) -> None:
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    def info(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


class _OutputCache:
    """Large results, on disk in an owner-only directory, each under an unguessable token.

    Where _DIR_FDS the directory claimed is held open, and every read, write and delete goes
    through that descriptor: a folder renamed or replaced by a symlink meanwhile changes
    nothing. put() checks the path still names the folder held, and claims it again (with all
    of _claim_cache_dir's checks) when it was deleted or replaced.
    """

    def __init__(self, directory: str, settings: _Settings, clock: Callable[[], float] = time.time,
                 roots: Iterable[str] = ()) -> None:
        self.dir, self.settings, self.clock, self.roots = directory, settings, clock, list(roots)
        self._lock = threading.Lock()
        self._dir_lock = threading.Lock()  # guards _fd: replaced by put(), duplicated by every user
        self._entries: Dict[str, _CacheEntry] = {}
        # ConfigError: not a directory the cache may delete in
        self._fd: Optional[int] = _claim_cache_dir(directory, self.roots)
        self._load()

    def __del__(self) -> None:
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            os.close(fd)

    def _held(self, recheck: bool = False) -> _Dir:
        """The cache directory as a _Dir holding its own duplicate of the descriptor (use `with`),
        so a put() replacing the descriptor meanwhile closes nothing in use. `recheck`: first
        claim the folder at self.dir again if it is no longer the one held (ConfigError if it
        cannot be). Windows (no descriptor): only that check, on the path."""
        with self._dir_lock:
            if recheck:
                try:
                    st: Optional[os.stat_result] = os.lstat(self.dir)
                except OSError:
                    st = None
                same = (st is not None and os.path.samestat(st, os.fstat(self._fd))
                        if self._fd is not None
                        else st is not None and stat.S_ISDIR(st.st_mode))
                if not same:
                    fd, old = _claim_cache_dir(self.dir, self.roots), self._fd
                    self._fd = fd
                    if old is not None:
                        os.close(old)
            out = _Dir(self.dir)
            if self._fd is not None:
                out.fd = os.dup(self._fd)  # non-inheritable, like every descriptor Python makes
            return out

    def _names(self) -> List[str]:
        with self._held() as d:
            return os.listdir(d if d.fd is None else d.fd)

    def _open(self, name: str) -> Tuple[Any, os.stat_result]:
        """(binary file, fstat) of the cache's regular file `name` (OSError: gone, or not one)."""
        with self._held() as d:
            try:
                return _open_regular(_at(d.fd, name, os.path.join(d, name)), d.fd)
            except OSError as e:  # named by its path in errors, as the user knows it
                e.filename = os.path.join(d, name)
                raise

    def _load(self) -> None:
        """Pick up entries of an earlier run that have not expired; delete the expired ones."""
        for name in self._names():
            if name.endswith(".meta.json"):
                entry = self._read_meta(name)
                if entry is not None:
                    self._entries[entry.token] = entry
        self.sweep()
        self._drop_orphans()

    def _drop_orphans(self, min_age: float = 3600.0) -> None:
        """Delete files an interrupted put() left without metadata (and stale temporary files),
        once they are an hour old; only names of this cache's own forms are touched."""
        now = time.time()
        with self._held() as d:
            for name in os.listdir(d if d.fd is None else d.fd):
                if not _CACHE_FILE_RE.match(name) or name[:24] in self._entries:
                    continue  # not a name of the cache's forms, or a live entry's file
                at = _at(d.fd, name, os.path.join(d, name))
                try:  # a symlink or a folder is never deleted, whatever its name
                    st = os.stat(at, dir_fd=d.fd, follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and now - st.st_mtime > min_age:
                        os.unlink(at, dir_fd=d.fd)
                except OSError:
                    pass

    @staticmethod
    def _sound(entry: _CacheEntry, name: str) -> bool:
        """Metadata this cache wrote: its own file's token, numbers where numbers belong (a broken
        file is skipped, and its files are left alone, rather than stopping the start-up)."""
        def num(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        return (isinstance(entry.token, str) and bool(_TOKEN_RE.match(entry.token))
                and name == entry.token + ".meta.json" and isinstance(entry.ctype, str)
                and all(num(getattr(entry, k)) for k in ("created", "expires", "chars", "bytes"))
                and isinstance(entry.files, list) and all(isinstance(f, str) for f in entry.files)
                and isinstance(entry.sha256 or "", str))

    def put(self, res: dict, server: str, tool: str, head_chars: int = 500,
            longs: Iterable[tuple] = ()) -> Tuple[_CacheEntry, _Extracted, str]:
        """Cache a result; returns the entry, its extracted data and its text view.

        A result that is one large JSON array of objects is read in one pass (_scan_records),
        never whole: its data is then a _Records (the count, the columns, as many first records
        as a preview of `head_chars` characters shows), and the text returned only the view's
        first part (the rest is on disk). Its text may be a _JsonString (`longs`: the result's
        long strings left undecoded, Connection.request), read a piece at a time, so that it
        is never held whole either; any other result has them decoded first.

        A directory removed meanwhile (by a temp-dir cleaner, say) is made again. A write that
        fails (OSError: a full disk) or a directory that cannot be made again (ConfigError) is
        raised, and leaves none of the entry's files behind.
        """
        import secrets  # lazy: see Imports

        token = secrets.token_urlsafe(18)
        try:
            with self._held(recheck=True) as d:  # made again if removed, claimed again if replaced
                entry, ex, text = self._write(d, token, res, server, tool, head_chars, longs)
        except (OSError, ConfigError):
            with contextlib.suppress(OSError):  # the directory itself may be gone
                self._drop(token, [n for n in self._names() if n.startswith(token)])
            raise
        with self._lock:
            self._entries[token] = entry
        self._evict()
        return entry, ex, text

    def _write(self, d: _Dir, token: str, res: dict, server: str, tool: str, head_chars: int,
               longs: Iterable[tuple]) -> Tuple[_CacheEntry, _Extracted, str]:
        """Write one entry's files into `d`: binary items, its text view, the result, then the
        metadata. No fsync: the cache's files are disposable (swept anyway); one torn by a
        power loss reads as broken and is reported, and the tool is called again."""
        ex, files, view = None, [], None
        big = _records_text(res, _VIEW_INDENT_MAX)  # (a smaller array may be viewed indented)
        if big is not None:
            records = _Records(head_chars)
            try:
                pieces = big.pieces() if isinstance(big, _JsonString) else [big]
                view = _write_parts(d, token, ".txt", _scan_records(pieces, records))
                ex = _Extracted(records, [], True)
                # any other long string is decoded (the result's body is written below, and
                # only the shallow ones could be written as they came), but the text's twin
                twin = res.get("structuredContent")
                _decode_long(p for p in longs if p[2] is not big and p[0] is not twin)
            except _NotRecords:  # (its temporary file is gone): read the ordinary way
                pass
        if ex is None:
            _decode_long(longs)
            ex = _extract(res)
            files = [_write_new(d, f"{token}-{i}", b.ext, b.data, 0o600, False)
                     for i, b in enumerate(ex.blobs, 1)]
            if ex.has_data or not ex.blobs:
                text = _text_view(ex.data)
            else:  # binary items only: the text view says what they are and where their files are
                text = _json_view([{"type": b.kind, "mimeType": b.mime, "bytes": len(b.data),
                                    "path": f} for b, f in zip(ex.blobs, files)])
            view = _write_parts(d, token, ".txt", _slices(text))._replace(head=text)
        now = self.clock()
        body = _write_parts(d, token, ".json", _compact_parts({"result": res}), hashed=False)
        entry = _CacheEntry(token=token, server=server, tool=tool, created=now,
                            expires=now + float(self.settings.cache("ttl_seconds")),
                            chars=view.chars, files=files,
                            ctype="text/plain" if isinstance(ex.data, str) else "application/json",
                            bytes=body.bytes + view.bytes + sum(len(b.data) for b in ex.blobs),
                            sha256=view.sha256)  # for the catalog: no reading the file back
        _write_new(d, token, ".meta.json", _dumps(entry.info()).encode("utf-8"), 0o600, False)
        return entry, ex, view.head

    def get(self, token: Any) -> _CacheEntry:
        if not isinstance(token, str) or not _TOKEN_RE.match(token):
            raise _ToolError(f"{token!r} is not a cache token; tokens come from a cached call_tool "
                             f"answer.")
        with self._lock:
            entry = self._entries.get(token)
        if entry is None:
            entry = self._adopt(token)  # cached by another Abstract process sharing this directory
        if entry is None:
            raise _ToolError(f"No cached output with token {token}: it never existed, expired, or "
                             f"was evicted. Call the tool again.")
        if entry.expires <= self.clock():
            self._drop(token)
            raise _ToolError(f"The cached output {token} expired at {_utc(entry.expires)}. Call "
                             f"the tool again.")
        return entry

    def _adopt(self, token: str) -> Optional[_CacheEntry]:
        """An entry another process (sharing the cache directory) wrote after this one started."""
        entry = self._read_meta(token + ".meta.json")
        if entry is not None:
            with self._lock:
                self._entries[token] = entry
        return entry

    def _read_meta(self, name: str) -> Optional[_CacheEntry]:
        """The entry a metadata file describes, if it is sound (a broken one is skipped)."""
        try:
            with self._open(name)[0] as f:
                # metadata is a few hundred bytes
                entry = _CacheEntry(**json.loads(f.read(1 << 20)))
        except (OSError, ValueError, TypeError):
            return None
        return entry if self._sound(entry, name) else None

    def _read(self, entry: _CacheEntry, suffix: str) -> str:
        with self.opened(entry, suffix) as f:
            return f.read().decode("utf-8", "surrogatepass")

    def opened(self, entry: _CacheEntry, suffix: str = ".txt") -> Any:
        """One of an entry's files, open for reading in binary; ToolError when it is gone."""
        try:
            return self._open(entry.token + suffix)[0]
        except FileNotFoundError:  # removed meanwhile, e.g. by another process's sweep
            with self._lock:
                self._entries.pop(entry.token, None)
            raise _ToolError(f"The cached output {entry.token} is gone (expired or evicted). Call "
                             f"the tool again.") from None

    def text(self, entry: _CacheEntry) -> str:
        return self._read(entry, ".txt")

    def open_text(self, entry: _CacheEntry) -> Tuple[Any, int]:
        """(binary file, size) of an entry's text view as stored (UTF-8), for streaming it."""
        f, st = self._open(entry.token + ".txt")  # OSError: swept meanwhile
        return f, st.st_size

    def result(self, entry: _CacheEntry) -> dict:
        return json.loads(self._read(entry, ".json"))["result"]

    def entries(self) -> List[_CacheEntry]:
        now = self.clock()
        with self._lock:
            return sorted((e for e in self._entries.values() if e.expires > now),
                          key=lambda e: -e.created)

    def _drop(self, token: str, extra: Iterable[str] = ()) -> None:
        with self._lock:
            entry = self._entries.pop(token, None)
        # Only this cache's own names, joined to its own directory: a stale or crafted .meta.json
        # may list any path, and nothing outside the cache directory is ever deleted.
        blobs = [os.path.basename(f) for f in (entry.files if entry else [])] + list(extra)
        names = ([token + x for x in (".meta.json", ".json", ".txt")]
                 + [b for b in blobs if b.startswith(token + "-")])
        with self._held() as d:
            for name in names:
                if _CACHE_FILE_RE.match(name):
                    with contextlib.suppress(OSError):
                        os.unlink(_at(d.fd, name, os.path.join(d, name)), dir_fd=d.fd)

    def sweep(self) -> int:
        """Delete expired entries; returns how many."""
        now = self.clock()
        with self._lock:
            dead = [t for t, e in self._entries.items() if e.expires <= now]
        for t in dead:
            self._drop(t)
        return len(dead)

    def _evict(self) -> None:
        """Keep the cache under max_total_mb, dropping the oldest entries first."""
        cap = float(self.settings.cache("max_total_mb")) * 1024 * 1024
        with self._lock:
            order = sorted(self._entries.values(), key=lambda e: e.created)
            total = sum(e.bytes for e in order)
        for e in order[:-1]:  # the newest entry always stays
            if total <= cap:
                break
            total -= e.bytes
            self._drop(e.token)


def _link_response(cache: _OutputCache, signer: _Signer, raw_path: str) -> Tuple[int, str, Any]:
    """(status, content type, body) for one GET: 200 (body: a function opening the text as
    (binary file, size), to stream it), 403 bad signature, 404, 410 expired (body: bytes)."""
    # not urlsplit: it reads "//x" as a host and drops tabs and newlines
    path, _, raw_query = raw_path.partition("?")
    m = re.fullmatch(r"/cache/([A-Za-z0-9_-]{16,64})", path)
    query = urllib.parse.parse_qs(raw_query)
    if m is None:
        return 404, "text/plain; charset=utf-8", b"not found\n"
    token = m.group(1)
    try:
        expires, sig = int(query["expires"][0]), query["sig"][0]
    except (KeyError, ValueError, IndexError):
        return 403, "text/plain; charset=utf-8", b"missing or malformed expires/sig\n"
    if not signer.check(token, expires, sig):
        return 403, "text/plain; charset=utf-8", b"bad signature\n"
    if expires <= cache.clock():
        return 410, "text/plain; charset=utf-8", b"link expired\n"
    try:
        entry = cache.get(token)
        return 200, f"{entry.ctype}; charset=utf-8", lambda: cache.open_text(entry)
    except (_ToolError, OSError):  # OSError: swept between get and read
        return 404, "text/plain; charset=utf-8", b"not found (expired or evicted)\n"


def _serve_links(cache: _OutputCache, signer: _Signer, host: str, port: int, base: str,
                 limits: Tuple[float, float, int] = (10.0, 30.0, 64)
                 ) -> Tuple[Any, Callable[[_CacheEntry], str], Callable[[], None]]:
    """The --http link server (_serve_http) for GET /cache/{token}?expires=...&sig=...: returns
    (server, link(entry) -> its signed URL, stop). `limits` as _serve_http's."""
    httpd, stop = _serve_http(host, port, lambda target: _link_response(cache, signer, target),
                              "abstract-http", limits)
    netloc = f"[{host}]" if ":" in host else host
    real_base = base or f"http://{netloc}:{httpd.server_address[1]}"

    def link(entry: _CacheEntry) -> str:
        expires = int(entry.expires)
        sig = signer.sign(entry.token, expires)
        return f"{real_base.rstrip('/')}/cache/{entry.token}?expires={expires}&sig={sig}"

    return httpd, link, stop



# ==== Catalog =====================================================================
# One SQLite database per user records every stored file, every stored response and every cached
# output, so an output stored last week can be found today from any conversation; with --memory it
# also holds conversation memory. The design is seed 003's: WAL, FTS5 with bm25 ranking and
# snippets, schema migrations keyed on PRAGMA user_version, owner-only files, a corrupt database
# moved aside (never deleted). One connection serves every thread under a lock: SQLite serialises
# writers anyway, and one connection keeps a row and its FTS entry in one transaction.

_CATALOG_TEXT = 64 * 1024  # characters of each output kept as searchable text (catalog.max_text_kb)
_CATALOG_CHECK_S = 2.0  # start-up integrity check (PRAGMA quick_check) of the catalog, at most
_CATALOG_KINDS = ("stored", "response", "cached")
_ROLES = ("user", "assistant", "system")
_SEARCH_MODES = ("words", "phrase", "prefix")
_MAX_TERMS = 32  # words of a query that count: a pasted 10 KB query is not 1,500 AND terms
_MARKS = ("<mark>", "</mark>")
_SNIPPET_TOKENS = 24
# bm25 costs about a microsecond per matching row: a word found in nearly every output of a large
# catalog would take ~100 ms at 100k rows. Ranking is therefore done among the newest matches only,
# this many of them (a word that common says little about relevance anyway).
_RANK_WINDOW = 10000
_TEXT_FORMATS = frozenset(_FORMATS) | {"yml", "markdown", "htm", "log", "text", "ndjson", "jsonl"}
# Words as FTS5's default unicode61 tokenizer sees them: runs of letters and digits ("_" separates).
_WORD_RE = re.compile(r"[^\W_]+")

_CATALOG_MIGRATIONS = (
    # 1: outputs, conversations, messages. Times are ISO 8601 UTC text with milliseconds, which
    # sort as text; `n` (the rowid) breaks ties and is the FTS tables' content_rowid. `terms` is
    # filled only where FTS5 is missing: the words the fallback search matches with LIKE.
    """
    CREATE TABLE outputs (
        n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, created TEXT NOT NULL,
        server TEXT NOT NULL DEFAULT '', tool TEXT NOT NULL DEFAULT '', arguments TEXT,
        description TEXT NOT NULL DEFAULT '', kind TEXT NOT NULL, path TEXT, token TEXT,
        format TEXT NOT NULL DEFAULT '', bytes INTEGER, sha256 TEXT, nrows INTEGER,
        ncolumns INTEGER,
        text TEXT NOT NULL DEFAULT '', terms TEXT);
    CREATE INDEX outputs_created ON outputs(created, n);
    CREATE INDEX outputs_origin ON outputs(server, tool, created);
    CREATE INDEX outputs_path ON outputs(path);
    CREATE INDEX outputs_token ON outputs(token);
    CREATE TABLE conversations (
        n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, created TEXT NOT NULL,
        updated TEXT NOT NULL,
        title TEXT NOT NULL DEFAULT '');
    CREATE INDEX conversations_updated ON conversations(updated, n);
    CREATE TABLE messages (
        n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')), content TEXT NOT NULL,
        created TEXT NOT NULL, parent_message_id TEXT, metadata TEXT, terms TEXT);
    CREATE INDEX messages_conversation ON messages(conversation_id, n);
    """,
)
# The searchable columns of each table; bm25 weights favour a description or a name over body text.
_FTS_COLUMNS = {"outputs": ("text", "description", "server", "tool", "path"),
                "messages": ("content",)}
_FTS_WEIGHTS = {"outputs": "1.0, 4.0, 2.0, 2.0, 1.0", "messages": "1.0"}
_OUTPUT_FIELDS = ("id", "created", "server", "tool", "arguments", "description", "kind", "path",
                  "token",
                  "format", "bytes", "sha256", "nrows", "ncolumns", "text", "terms")
_OUTPUT_VIEW = ("o.n, o.id, o.created, o.server, o.tool, o.arguments, o.description, o.kind, "
                "o.path, o.token, o.format, o.bytes, o.nrows, o.ncolumns")


# ISO 8601 as the catalog tools take it, the same on every Python (fromisoformat reads more on
# 3.11+ than on 3.9): a date, extended (2025-01-31) or basic (20250131); then optionally T or a
# space, hh[:mm[:ss[.fraction]]] (or hhmmss), then Z or an offset (+01, +0100, +01:00).
_WHEN_RE = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})"
                      r"(?:[T ](\d{2})(?::?(\d{2})(?::?(\d{2})(?:[.,](\d+))?)?)?"
                      r"([zZ]|[+-](\d{2})(?::?(\d{2}))?)?)?", re.ASCII)


def _parse_when(value: str, key: str, end: bool = False) -> str:
    """An ISO 8601 date or date-time as catalog time text (no zone means UTC). With end=True,
    the first instant after it, so that an `until` date includes its whole day."""
    import datetime as dt  # lazy: see Imports

    m = _WHEN_RE.fullmatch(value.strip())
    if m is None:
        raise _ToolError(f"{key} {value[:60]!r} is not an ISO 8601 date or time; use e.g. "
                         f"2025-01-31 or 2025-01-31T09:00:00Z.")
    y, mo, d, h, mi, sec, frac, zone, zh, zm = m.groups()
    try:
        when = dt.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(sec or 0),
                           int((frac or "0")[:6].ljust(6, "0")))
        if zone and zone not in ("z", "Z"):  # local time = UTC + offset
            if int(zh) > 23 or int(zm or 0) > 59:
                raise ValueError(f"UTC offset {zone} is not between -23:59 and +23:59")
            offset = dt.timedelta(hours=int(zh), minutes=int(zm or 0))
            when = when - offset if zone[0] == "+" else when + offset
    except (ValueError, OverflowError) as e:
        raise _ToolError(f"{key} {value[:60]!r} is an ISO 8601 date or time, but out of range: "
                         f"{e}. Use a real date between 0001-01-01 and 9999-12-31 (UTC), e.g. "
                         f"2025-01-31.") from None
    if end:
        try:
            when += dt.timedelta(days=1) if h is None else dt.timedelta(milliseconds=1)
        except OverflowError:  # the end of 9999-12-31: the last instant there is
            when = dt.datetime.max
    return (f"{when.year:04d}-{when.month:02d}-{when.day:02d}T{when.hour:02d}:{when.minute:02d}:"
            f"{when.second:02d}.{when.microsecond // 1000:03d}Z")


def _new_id() -> str:
    import secrets  # lazy: see Imports

    return secrets.token_hex(8)


def _fold(word: str) -> str:
    """A word as unicode61 indexes it: lower case, diacritics removed (so café finds cafe)."""
    if word.isascii():
        return word.lower()

    return "".join(c for c in unicodedata.normalize("NFKD", word)
                   if not unicodedata.combining(c)).lower()


def _terms(*columns: Optional[str]) -> str:
    """The fallback search's view of a row: " w1 w2 | w3 " with folded words, " | " between columns
    so a phrase never runs from one column into the next (as in FTS5)."""
    return (" " + " | ".join(" ".join(_fold(w) for w in _WORD_RE.findall(c or "")) for c in columns)
            + " ")


def _query_words(query: str) -> List[str]:
    """The words of a user's query, at most _MAX_TERMS. Everything else (quotes, brackets, *, -,
    colons) only separates words, so no input can change the query's structure."""
    return _WORD_RE.findall(query)[:_MAX_TERMS]


def _fts_query(words: List[str], mode: str) -> str:
    """An FTS5 MATCH expression in which every word is a quoted string: AND, OR, NOT, NEAR and
    column names typed by a user are only ever words."""
    if mode == "phrase":
        return '"' + " ".join(words) + '"'
    quoted = ['"' + w + '"' for w in dict.fromkeys(words)]  # _WORD_RE words hold no quote
    return " ".join(q + "*" for q in quoted) if mode == "prefix" else " ".join(quoted)


def _like_patterns(words: List[str], mode: str) -> List[str]:
    """LIKE patterns over _terms() that match what _fts_query matches, for plain words."""
    folded = [re.sub(r"([\\%_])", r"\\\1", _fold(w)) for w in words]
    if mode == "phrase":
        return [f"% {' '.join(folded)} %"]
    return [f"% {w}%" if mode == "prefix" else f"% {w} %" for w in dict.fromkeys(folded)]


def _py_snippet(text: str, words: List[str], prefix: bool) -> str:
    """What FTS5's snippet() gives, for the fallback search: about _SNIPPET_TOKENS words around the
    first match, matching words marked."""
    want = {_fold(w) for w in words}

    def hit(m: "re.Match[str]") -> bool:
        w = _fold(m.group())
        return any(w.startswith(x) for x in want) if prefix else w in want

    spans = list(_WORD_RE.finditer(text))
    first = next((i for i, m in enumerate(spans) if hit(m)), None)
    if first is None:
        return ""
    lo = max(0, min(first - _SNIPPET_TOKENS // 4, len(spans) - _SNIPPET_TOKENS))
    hi = min(len(spans), lo + _SNIPPET_TOKENS)
    out, pos = [], spans[lo].start()
    for m in spans[lo:hi]:
        out.append(text[pos:m.start()])
        out.append(f"{_MARKS[0]}{m.group()}{_MARKS[1]}" if hit(m) else m.group())
        pos = m.end()
    return ("…" if lo else "") + "".join(out) + ("…" if hi < len(spans) else "")


def _statements(script: str) -> List[str]:
    """Split an SQL script into statements (sqlite3.complete_statement keeps trigger bodies whole),
    so a migration runs inside our own transaction: executescript would commit first."""
    out, buf = [], ""
    for part in script.split(";"):
        buf += part + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n;"):
                out.append(buf.strip())
            buf = ""
    return out


def _fts_schema(table: str) -> List[str]:
    """An external-content FTS5 table over `table` and the triggers that keep it in step."""
    cols = _FTS_COLUMNS[table]
    c = ", ".join(cols)
    new, old = ", ".join("new." + x for x in cols), ", ".join("old." + x for x in cols)
    fts = table + "_fts"
    add = f"INSERT INTO {fts}(rowid, {c}) VALUES (new.n, {new});"
    drop = f"INSERT INTO {fts}({fts}, rowid, {c}) VALUES ('delete', old.n, {old});"
    return [f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5({c}, content='{table}', "
            f"content_rowid='n')",
            f"CREATE TRIGGER {table}_ai AFTER INSERT ON {table} BEGIN {add} END",
            f"CREATE TRIGGER {table}_ad AFTER DELETE ON {table} BEGIN {drop} END",
            f"CREATE TRIGGER {table}_au AFTER UPDATE ON {table} BEGIN {drop} {add} END"]


def _has_fts5(db: Any) -> bool:
    """Whether this sqlite3 build has FTS5 (some system builds, older ones above all, lack it)."""
    try:
        db.execute("CREATE VIRTUAL TABLE temp.abstract_fts5_probe USING fts5(x)")
        db.execute("DROP TABLE temp.abstract_fts5_probe")
        return True
    except sqlite3.OperationalError:
        return False


def _is_corrupt(e: BaseException) -> bool:
    """SQLITE_NOTADB or SQLITE_CORRUPT; "database is locked" is a DatabaseError too, and is not."""
    msg = str(e).lower()
    return "not a database" in msg or "malformed" in msg or "corrupt" in msg


def _prepare_db_file(path: str, own_dir: bool) -> None:
    """Create the database's directory (0700 when it is Abstract's own) and the file, owner-only
    (0600) on POSIX, before SQLite opens it; its -wal and -shm files take the file's mode."""
    directory = os.path.dirname(path) or "."
    created = not os.path.isdir(directory)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if _WINDOWS:  # ACLs, not modes: the per-user profile directory is private already
        return
    if created or own_dir:
        os.chmod(directory, 0o700)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    try:
        os.chmod(path, 0o600)
    except PermissionError:  # someone else's file: SQLite will say whether it can be used
        pass


def _move_aside(path: str, close: Callable[[], None]) -> str:
    """Rename a corrupt database to <name>.corrupt-<UTC stamp>, its -wal (which may hold the last
    transactions) copied along first: SQLite deletes the -wal and -shm files when its last
    connection closes, and a database must be closed before Windows lets it be renamed."""
    target = f"{path}.corrupt-{_utc(compact=True)}"
    n = 1
    while os.path.exists(target):
        target = f"{path}.corrupt-{_utc(compact=True)}-{n}"
        n += 1
    if os.path.exists(path + "-wal"):
        shutil.copyfile(path + "-wal", target + "-wal")
    close()
    os.rename(path, target)
    return target


def _encode_cursor(when: str, n: int) -> str:
    return base64.urlsafe_b64encode(_dumps([when, n]).encode()).decode().rstrip("=")


def _decode_cursor(cursor: Any) -> Tuple[str, int]:

    try:
        when, n = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        # n is a rowid: sqlite3 raises OverflowError for an int past 64 bits
        if (isinstance(when, str) and isinstance(n, int) and not isinstance(n, bool)
            and 0 <= n < 2**63):
            return when, n
    # RecursionError: "[[[[..." nested deep
    except (TypeError, ValueError, RecursionError, binascii.Error):
        pass
    raise _ToolError(f"Invalid cursor {str(cursor)[:80]!r}: pass the next_cursor of the previous "
                     f"answer, or none for the first page.")


def _filters(alias: str, **conds: Any) -> Tuple[str, List[Any]]:
    """" AND o.server = ? ..." for the conditions that are set; since is inclusive, until
    exclusive."""
    ops = {"since": ("created", ">="), "until": ("created", "<")}
    sql, params = "", []
    for key, value in conds.items():
        if value is not None:
            col, op = ops.get(key, (key, "="))
            sql += f" AND {alias}.{col} {op} ?"
            params.append(value)
    return sql, params


def _file_facts(opened: Tuple[Any, int], path: str, fmt: str, max_text: int,
                sha256: str = "") -> dict:
    """bytes and sha256 of a file (the digest is computed unless the writer already did), and
    its first `max_text` bytes as text for a text format (decompressed for .gz); binary
    formats get no text. `opened`: (binary file, size), the file opened once by the caller
    (_Sandbox.open_read, _open_regular, the cache), read here and closed; `path` names it."""
    import gzip  # lazy: see Imports
    import hashlib  # lazy: see Imports
    import zlib  # lazy: see Imports

    f, size = opened
    with f:
        if not sha256:
            digest = hashlib.sha256()
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
            sha256 = digest.hexdigest()
        text = ""
        if fmt.lower() in _TEXT_FORMATS:
            try:
                f.seek(0)
                gz = path.lower().endswith(".gz")
                with gzip.GzipFile(fileobj=f) if gz else contextlib.nullcontext(f) as g:
                    # "ignore": a character cut at the end
                    text = g.read(max_text).decode("utf-8", "ignore")
            except (OSError, EOFError, zlib.error):
                text = ""
    return {"bytes": size, "sha256": sha256, "text": text}


def _title(content: str) -> str:
    """A conversation's title: the start of its first message, on one line."""
    line = " ".join(content.split())
    return line if len(line) <= 80 else line[:79] + "…"


class _Catalog:
    """The per-user SQLite catalog of outputs and (with --memory) conversations.

    `fts=False` forces the LIKE-based search that serves sqlite3 builds without FTS5 (tests use it);
    None detects FTS5. A file that is not a database, or a malformed one, is moved aside at
    start-up and a fresh database created; `moved_aside` then names the kept copy.
    """

    def __init__(self, path: str = ":memory:", *, fts: Optional[bool] = None,
                 max_text: int = _CATALOG_TEXT,
                 clock: Callable[[], float] = time.time, own_dir: bool = False,
                 check_s: float = _CATALOG_CHECK_S) -> None:
        if sqlite3 is None:
            raise Error("this Python has no sqlite3 module")
        self.path, self.max_text, self.clock = path, max_text, clock
        self.moved_aside = ""
        self._lock = threading.RLock()
        self._want_fts, self._db, self._own_dir = fts, None, own_dir
        if path != ":memory:":
            _prepare_db_file(path, own_dir)
        try:
            self._open()
            self._check(check_s)
        except sqlite3.DatabaseError as e:
            if path == ":memory:" or not _is_corrupt(e):
                raise
            self._set_aside(e)

    def _check(self, seconds: float) -> None:
        """PRAGMA quick_check, for at most `seconds` (a huge catalog is checked in part): damage
        inside a table (bad cell pointers, say) is not seen by opening the database, and would
        otherwise show up later as errors or, worse, as searches that quietly miss rows."""
        db = self._live()
        if seconds <= 0 or self.path == ":memory:":
            return
        deadline = time.monotonic() + seconds
        db.set_progress_handler(lambda: time.monotonic() > deadline, 10000)  # true: interrupt
        try:
            row = db.execute("PRAGMA quick_check(1)").fetchone()
        except sqlite3.OperationalError as e:
            if "interrupt" not in str(e).lower():
                raise
            _log.info("the catalog %s is too large to check in %g s at start-up; checked in part",
                      self.path, seconds)
            return
        finally:
            db.set_progress_handler(None, 0)
        if row is None or row[0] != "ok":
            raise sqlite3.DatabaseError(f"database disk image is malformed: "
                                        f"{' '.join(str(row and row[0]).split())[:300]}")

    def _set_aside(self, e: BaseException) -> None:
        """Move a damaged database aside (kept, never deleted) and start a fresh one."""
        with self._lock:
            self.moved_aside = _move_aside(self.path, self.close)
            _log.warning("the catalog %s is corrupt (%s): moved it aside to %s (kept, never "
                         "deleted) and started a fresh one; abstract --reindex adds the stored "
                         "files back", self.path, e,
                         self.moved_aside)
            _prepare_db_file(self.path, self._own_dir)
            self._open()

    @contextlib.contextmanager
    def _noticing_damage(self) -> Iterator[None]:
        """A query that finds the database damaged moves it aside (the error still goes up, so
        the caller can say so); the next query uses the fresh one."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            if self.path != ":memory:" and _is_corrupt(e) and self._db is not None:
                self._set_aside(e)
            raise

    def _open(self) -> None:
        self._db = sqlite3.connect(self.path, timeout=5.0, check_same_thread=False,
                                   isolation_level=None)
        self._db.row_factory = sqlite3.Row
        # WAL: readers never block the writer; several Abstracts (one per client) share the file.
        for pragma in ("busy_timeout = 5000", "journal_mode = WAL", "synchronous = NORMAL",
                       "foreign_keys = ON"):
            self._db.execute("PRAGMA " + pragma)
        self._migrate()
        self.fts = self._want_fts is not False and _has_fts5(self._db)
        self._setup_search()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                try:
                    self._db.close()
                except sqlite3.Error:
                    pass
                self._db = None

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        """One write transaction, taken at its start (BEGIN IMMEDIATE): a busy database then waits
        (busy_timeout) at the start instead of failing half way."""
        with self._lock, self._noticing_damage():
            db = self._live()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _live(self) -> Any:
        if self._db is None:  # a handler still running while Abstract shuts down
            raise sqlite3.ProgrammingError("the catalog is closed")
        return self._db

    def _rows(self, sql: str, params: Any = ()) -> List[dict]:
        with self._lock, self._noticing_damage():
            return [dict(r) for r in self._live().execute(sql, params).fetchall()]

    def _migrate(self) -> None:
        with self._tx() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > len(_CATALOG_MIGRATIONS):
                _log.warning("the catalog %s has schema version %d, newer than this Abstract's "
                             "(%d); using it as it is", self.path, version,
                             len(_CATALOG_MIGRATIONS))
                return
            for number, script in enumerate(_CATALOG_MIGRATIONS[version:], version + 1):
                for statement in _statements(script):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")

    def _setup_search(self) -> None:
        """With FTS5: its tables and triggers, rebuilt when they were missing (a fresh database, or
        one written while FTS5 was off). Without: the triggers dropped (they would fail) and the
        `terms` the fallback search reads filled in for rows written while FTS5 was on."""
        with self._tx() as db:
            triggers = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = "
                                                 "'trigger'")}
            for table, cols in _FTS_COLUMNS.items():
                if self.fts and table + "_ai" not in triggers:
                    for statement in _fts_schema(table):
                        db.execute(statement)
                    db.execute(f"INSERT INTO {table}_fts({table}_fts) VALUES ('rebuild')")
                elif not self.fts:
                    for name in sorted(triggers & {table + "_ai", table + "_ad", table + "_au"}):
                        db.execute(f"DROP TRIGGER {name}")
                    rows = db.execute(f"SELECT n, {', '.join(cols)} FROM {table} WHERE terms IS "
                                      f"NULL").fetchall()
                    db.executemany(f"UPDATE {table} SET terms = ? WHERE n = ?",
                                   [(_terms(*r[1:]), r[0]) for r in rows])

    # -- outputs
    def record_many(self, entries: List[dict]) -> List[str]:
        """Record outputs in one transaction; returns their ids. Keys: kind, server, tool,
        arguments, description, path, token, format, bytes, sha256, rows, columns, text, created
        (epoch seconds; default now)."""
        rows = [self._output_row(e) for e in entries]
        for attempt in (1, 2):
            try:
                with self._tx() as db:
                    db.executemany(f"INSERT INTO outputs ({', '.join(_OUTPUT_FIELDS)}) VALUES "
                                   f"({', '.join('?' * len(_OUTPUT_FIELDS))})", rows)
                break
            except sqlite3.DatabaseError as e:  # damaged: moved aside; recorded in the fresh one
                if attempt == 2 or not (_is_corrupt(e) and self.moved_aside):
                    raise
        return [r[0] for r in rows]

    def _output_row(self, e: dict) -> tuple:
        kind = e.get("kind", "stored")
        if kind not in _CATALOG_KINDS:
            raise ValueError(f"kind must be one of {', '.join(_CATALOG_KINDS)}, not {kind!r}")
        args = e.get("arguments")
        args = None if args is None else args if isinstance(args, str) else _dumps(args)
        # kept whole or not at all: cut JSON is no JSON
        if args is not None and len(args) > _CATALOG_TEXT:
            args = _dumps({"_truncated": True, "_chars": len(args)})
        text = (e.get("text") or "")[:self.max_text]
        server, tool = e.get("server") or "", e.get("tool") or ""
        desc, path = e.get("description") or "", e.get("path")
        when = e.get("created")
        created = _utc(self.clock() if when is None else when, ms=True)
        return (_new_id(), created, server, tool, args, desc, kind, path,
                e.get("token"), e.get("format") or "", e.get("bytes"), e.get("sha256"),
                e.get("rows"),
                e.get("columns"), text, None if self.fts
                else _terms(text, desc, server, tool, path))

    def count(self) -> int:
        return self._rows("SELECT count(*) AS n FROM outputs")[0]["n"]

    def known(self) -> Tuple[set, set]:
        """(paths, tokens) already recorded: --reindex adds only what is missing."""
        rows = self._rows("SELECT path, token FROM outputs")
        return {r["path"] for r in rows if r["path"]}, {r["token"] for r in rows if r["token"]}

    def _match(self, table: str, words: List[str], mode: str, where: str, params: List[Any],
               limit: int,
               offset: int) -> List[int]:
        """Row numbers matching `words`, best first (bm25, among the newest _RANK_WINDOW matches)
        with
        FTS5, newest first without."""
        if self.fts:
            fts, match = table + "_fts", _fts_query(words, mode)
            floor = self._rows(f"SELECT rowid AS n FROM {fts} WHERE {fts} MATCH ? ORDER BY rowid "
                               f"DESC LIMIT 1 OFFSET ?", (match, _RANK_WINDOW - 1))
            bound = f" AND {fts}.rowid >= {int(floor[0]['n'])}" if floor else ""
            rank = f"bm25({fts}, {_FTS_WEIGHTS[table]})"
            if where:  # the join costs: only when a filter needs the table's columns
                sql = (f"SELECT t.n FROM {fts} JOIN {table} t ON t.n = {fts}.rowid WHERE {fts} "
                       f"MATCH ?{bound}{where} ORDER BY {rank}, t.n DESC LIMIT ? OFFSET ?")
            else:
                sql = (f"SELECT rowid AS n FROM {fts} WHERE {fts} MATCH ?{bound} ORDER BY {rank}, "
                       f"rowid DESC LIMIT ? OFFSET ?")
            args = [match, *params, limit, offset]
        else:
            likes = _like_patterns(words, mode)
            cond = " AND ".join("t.terms LIKE ? ESCAPE '\\'" for _ in likes)
            sql = (f"SELECT t.n FROM {table} t WHERE {cond}{where} ORDER BY t.created DESC, t.n "
                   f"DESC LIMIT ? OFFSET ?")
            args = [*likes, *params, limit, offset]
        return [r["n"] for r in self._rows(sql, args)]

    def _snippet(self, table: str, n: int, words: List[str], mode: str) -> str:
        """The best bit of row `n` with the matching words marked (snippet() works only inside
        a MATCH query, so each of the page's rows gets its own small query)."""
        if self.fts:
            fts = table + "_fts"
            rows = self._rows(f"SELECT snippet({fts}, -1, ?, ?, '…', {_SNIPPET_TOKENS}) AS s "
                              f"FROM {fts} WHERE {fts} MATCH ? AND rowid = ?",
                              (*_MARKS, _fts_query(words, mode), n))
            return rows[0]["s"] if rows else ""
        cols = _FTS_COLUMNS[table]
        row = self._rows(f"SELECT {', '.join(cols)} FROM {table} WHERE n = ?", (n,))
        for col in cols if row else ():
            found = _py_snippet(row[0][col] or "", words, mode == "prefix")
            if found:
                return found
        return ""

    def search(self, query: str, mode: str = "words", *, server: Optional[str] = None,
               tool: Optional[str] = None,
               since: Optional[str] = None, until: Optional[str] = None, limit: int = 10,
               offset: int = 0) -> dict:
        """Outputs whose text, description, server, tool or path hold the query's words.
        Returns {"results": [row + snippet], "words": [...], "has_more": bool}."""
        if mode not in _SEARCH_MODES:
            raise _ToolError(f"mode must be one of {', '.join(_SEARCH_MODES)}, not {mode!r}.")
        words = _query_words(query)
        if not words:
            return {"results": [], "words": [], "has_more": False}
        where, params = _filters("t", server=server, tool=tool, since=since, until=until)
        found = self._match("outputs", words, mode, where, params, limit + 1, offset)
        rows = {r["n"]: r for r in self._rows(f"SELECT {_OUTPUT_VIEW} FROM outputs o WHERE o.n IN "
                                              f"({', '.join('?' * len(found[:limit]))})",
                                              found[:limit])}
        results = [dict(rows[n], snippet=self._snippet("outputs", n, words, mode))
                   for n in found[:limit] if n in rows]
        return {"results": results, "words": words, "has_more": len(found) > limit}

    def recent(self, *, server: Optional[str] = None, tool: Optional[str] = None,
               kind: Optional[str] = None,
               limit: int = 20, cursor: Optional[str] = None) -> Tuple[List[dict], Optional[str]]:
        """Outputs newest first, one page; the cursor (opaque) continues after the page's last."""
        where, params = _filters("o", server=server, tool=tool, kind=kind)
        if cursor is not None:
            when, n = _decode_cursor(cursor)
            where += " AND (o.created < ? OR (o.created = ? AND o.n < ?))"
            params += [when, when, n]
        rows = self._rows(f"SELECT {_OUTPUT_VIEW} FROM outputs o WHERE 1{where} ORDER BY o.created "
                          f"DESC, o.n DESC LIMIT ?", [*params, limit + 1])
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, _encode_cursor(rows[-1]["created"], rows[-1]["n"]) if more else None

    def retention(self, cutoff: str, server: Optional[str] = None, tool: Optional[str] = None,
                  cap: int = 100000) -> dict:
        """What a rule "remove stored files older than `cutoff`" would remove: files still there.
        Nothing is removed; cached outputs are left out (the cache's own ttl expires them)."""
        where, params = _filters("o", server=server, tool=tool, until=cutoff)
        rows = self._rows(f"SELECT o.path FROM outputs o WHERE o.kind != 'cached'{where} LIMIT ?",
                          [*params, cap])
        files, size = 0, 0
        for r in rows:
            try:
                size += os.stat(r["path"]).st_size
                files += 1
            except (OSError, TypeError, ValueError):
                continue
        return {"before": cutoff, "files": files, "bytes": size, "complete": len(rows) < cap}

    def describe(self) -> str:
        """The --check line."""
        engine = ("FTS5 search" if self.fts else "fallback search (this sqlite3 has no FTS5: "
                                                 "slower, plain words)")
        line = f"catalog: {self.path}: {_plural(self.count(), 'output')}, {engine}"
        if self.moved_aside:
            return (line + f"; it was corrupt and was moved aside to {self.moved_aside} (kept); a "
                           f"fresh one was created")

        kept = sorted(p for p in glob.glob(glob.escape(self.path) + ".corrupt-*")
                      if not p.endswith(("-wal", "-shm")))
        return line + (f"; corrupt copies kept from earlier runs: {', '.join(kept)}" if kept
                       else "")

    # -- conversation memory (--memory)
    def save_message(self, conversation_id: Optional[str], role: str, content: str,
                     parent_message_id: Optional[str] = None,
                     metadata: Optional[dict] = None) -> dict:
        """Add a message, creating the conversation when it does not exist yet."""
        if role not in _ROLES:
            raise _ToolError(f"role must be one of {', '.join(_ROLES)}, not {str(role)[:40]!r}.")
        cid, mid, now = conversation_id or _new_id(), _new_id(), _utc(self.clock(), ms=True)
        terms = None if self.fts else _terms(content)
        with self._tx() as db:
            created = db.execute("INSERT OR IGNORE INTO conversations (id, created, updated, "
                                 "title) VALUES (?, ?, ?, ?)",
                                 (cid, now, now, _title(content))).rowcount == 1
            if parent_message_id is not None:
                row = db.execute("SELECT conversation_id FROM messages WHERE id = ?",
                                 (parent_message_id,)).fetchone()
                if row is None or row[0] != cid:
                    raise _ToolError(f"parent_message_id {parent_message_id[:80]!r} is not a "
                                     f"message of conversation {cid[:80]!r}.")
            db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, cid))
            db.execute("INSERT INTO messages (id, conversation_id, role, content, created, "
                       "parent_message_id, metadata, terms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (mid, cid, role, content, now, parent_message_id,
                        None if metadata is None
                        else _dumps(metadata), terms))
        return {"conversation_id": cid, "message_id": mid, "created": now,
                "new_conversation": created}

    def _conversation(self, cid: str) -> dict:
        rows = self._rows("SELECT c.id, c.title, c.created, c.updated, (SELECT count(*) FROM "
                          "messages m WHERE m.conversation_id = c.id) AS message_count FROM "
                          "conversations c WHERE c.id = ?", (cid,))
        if not rows:
            raise _ToolError(f"No conversation {cid[:80]!r}; list_conversations shows the ones "
                             f"that exist.")
        return rows[0]

    @staticmethod
    def _message(row: dict) -> dict:
        out = {k: row[k] for k in ("id", "role", "content", "created")}
        if row.get("parent_message_id"):
            out["parent_message_id"] = row["parent_message_id"]
        if row.get("metadata"):
            out["metadata"] = json.loads(row["metadata"])
        return out

    def get_conversation(self, cid: str, limit: int = 100, before: Optional[str] = None) -> dict:
        """A conversation and its latest `limit` messages before message `before`, oldest first;
        next_before_message_id pages further back."""
        conv = self._conversation(cid)
        where, params = "", []
        if before is not None:
            row = self._rows("SELECT n FROM messages WHERE id = ? AND conversation_id = ?",
                             (before, cid))
            if not row:
                raise _ToolError(f"before_message_id {before[:80]!r} is not a message of "
                                 f"conversation {cid[:80]!r}.")
            where, params = " AND n < ?", [row[0]["n"]]
        rows = self._rows(f"SELECT * FROM messages WHERE conversation_id = ?{where} ORDER BY n "
                          f"DESC LIMIT ?",
                          [cid, *params, limit + 1])
        page = [self._message(r) for r in reversed(rows[:limit])]
        conv["messages"] = page
        conv["next_before_message_id"] = page[0]["id"] if len(rows) > limit else None
        return conv

    def list_conversations(self, limit: int = 20,
                           cursor: Optional[str] = None) -> Tuple[List[dict], Optional[str]]:
        """Conversations, the most recently updated first."""
        where, params = "", []
        if cursor is not None:
            when, n = _decode_cursor(cursor)
            where, params = " WHERE c.updated < ? OR (c.updated = ? AND c.n < ?)", [when, when, n]
        rows = self._rows(f"SELECT c.n, c.id, c.title, c.created, c.updated, (SELECT count(*) FROM "
                          f"messages m WHERE m.conversation_id = c.id) AS message_count FROM "
                          f"conversations c{where} ORDER BY c.updated DESC, c.n DESC LIMIT ?",
                          [*params, limit + 1])
        more = len(rows) > limit
        rows = rows[:limit]
        cursor = _encode_cursor(rows[-1]["updated"], rows[-1]["n"]) if more else None
        return [{k: v for k, v in r.items() if k != "n"} for r in rows], cursor

    def search_messages(self, query: str, mode: str = "words", *,
                        conversation_id: Optional[str] = None,
                        since: Optional[str] = None, until: Optional[str] = None, limit: int = 10,
                        offset: int = 0) -> dict:
        """Messages holding the query's words, best first, with snippets (like search)."""
        if mode not in _SEARCH_MODES:
            raise _ToolError(f"mode must be one of {', '.join(_SEARCH_MODES)}, not {mode!r}.")
        words = _query_words(query)
        if not words:
            return {"results": [], "words": [], "has_more": False}
        where, params = _filters("t", conversation_id=conversation_id, since=since, until=until)
        found = self._match("messages", words, mode, where, params, limit + 1, offset)
        page = found[:limit]
        rows = {r["n"]: r for r in self._rows(f"SELECT n, id, conversation_id, role, created FROM "
                                              f"messages WHERE n IN ({', '.join('?' * len(page))})",
                                              page)}
        results = [{"message_id": rows[n]["id"], "conversation_id": rows[n]["conversation_id"],
                    "role": rows[n]["role"],
                    "created": rows[n]["created"],
                    "snippet": self._snippet("messages", n, words, mode)}
                   for n in page if n in rows]
        return {"results": results, "words": words, "has_more": len(found) > limit}

    def delete_conversation(self, cid: str) -> int:
        """Delete a conversation; its messages go with it (ON DELETE CASCADE, and the FTS triggers
        fire for each). Returns how many messages were deleted."""
        with self._tx() as db:
            count = db.execute("SELECT count(*) FROM messages WHERE conversation_id = ?",
                               (cid,)).fetchone()[0]
            if db.execute("DELETE FROM conversations WHERE id = ?", (cid,)).rowcount == 0:
                raise _ToolError(f"No conversation {cid[:80]!r}; list_conversations shows the ones "
                                 f"that exist.")
        return count

    def export(self, cid: Optional[str] = None) -> List[dict]:
        """Conversations (one, or all, the most recently updated first) with all their messages."""
        if cid is not None:
            convs = [self._conversation(cid)]
        else:
            convs = self._rows("SELECT c.id, c.title, c.created, c.updated, (SELECT count(*) FROM "
                               "messages m WHERE m.conversation_id = c.id) AS message_count FROM "
                               "conversations c ORDER BY c.updated DESC, c.n DESC")
        for conv in convs:
            conv["messages"] = [self._message(r) for r in
                                self._rows("SELECT * FROM messages WHERE conversation_id = ? ORDER "
                                           "BY n", (conv["id"],))]
        return convs


def _conversations_markdown(convs: List[dict], exported: str) -> str:
    """An export as Markdown: one section per conversation, one subsection per message."""
    out = [f"# Conversations\n\nExported {exported}: {_plural(len(convs), 'conversation')}.\n"]
    for conv in convs:
        out.append(f"## {conv['title'] or conv['id']}\n\n- id: `{conv['id']}`\n- created: "
                   f"{conv['created']}\n- updated: {conv['updated']}\n- messages: "
                   f"{conv['message_count']}\n")
        for m in conv["messages"]:
            out.append(f"### {m['role']} · {m['created']}\n\n<!-- message {m['id']} "
                       f"-->\n\n{m['content']}\n")
    return "\n".join(out)


def _cache_record(cache: _OutputCache, entry: _CacheEntry, max_text: int, data: Any = None) -> dict:
    """The catalog entry of a cached output: its text view is the searchable text."""
    path = os.path.join(cache.dir, entry.token + ".txt")
    fmt = "json" if entry.ctype == "application/json" else "txt"
    return {"kind": "cached", "server": entry.server, "tool": entry.tool, "token": entry.token,
            "path": path, "format": fmt, "created": entry.created,
            "rows": (data.count if isinstance(data, _Records) else
                     len(data) if isinstance(data, list) else None),
            **_file_facts(cache.open_text(entry), path, fmt, max_text, entry.sha256 or "")}


# --reindex: what the files themselves tell. Default names are <server>-<tool>-<UTC stamp>, then
# -image/-audio/-resource[-i] for binary items and -N when the name was taken.
_DEFAULT_NAME = re.compile(r"(?P<origin>.+?)-\d{8}T\d{6}Z"
                           r"(?:-(?:image|audio|resource)(?:-\d+)?)?(?:-\d+)?")


def _origin(stem: str, folders: List[str], servers: List[str]) -> Tuple[str, str]:
    """(server, tool) guessed from a default file name: a by_server folder, else a known server
    name, else the first "-" splits them. ("", "") for a name the user chose."""
    m = _DEFAULT_NAME.fullmatch(stem)
    if m is None:
        return "", ""
    origin = m.group("origin")
    for server in folders[:1] + sorted(servers, key=len, reverse=True):
        if origin.startswith(server + "-") and len(origin) > len(server) + 1:
            return server, origin[len(server) + 1:]
    server, _, tool = origin.partition("-")
    return (server, tool) if tool else ("", "")


_REINDEX_DEPTH = 100  # folders deeper than this below an allowed directory are not reindexed


def _recovered(dfd: Optional[int], path: str, root: str, servers: List[str], max_text: int) -> dict:
    """A catalog entry for a file found by --reindex (`dfd`: its folder's descriptor from the
    walk, so the file read is the one walked to, never one behind a symlink swapped in)."""
    name = os.path.basename(path)
    f, st = _open_regular(_at(dfd, name, path), dfd)
    base = name[:-3] if name.lower().endswith(".gz") else name
    stem, ext = os.path.splitext(base)
    fmt = {"yml": "yaml", "": "bin"}.get(ext.lstrip(".").lower(), ext.lstrip(".").lower())
    folders = os.path.relpath(os.path.dirname(path), root).split(os.sep)
    server, tool = _origin(stem, [f for f in folders if f != "."], servers)
    return {"kind": "stored", "server": server, "tool": tool, "path": path, "format": fmt,
            "created": st.st_mtime, **_file_facts((f, st.st_size), path, fmt, max_text)}


def _reindex(catalog: _Catalog, roots: List[str], servers: List[str],
             cache: Optional[_OutputCache] = None) -> dict:
    """Add to the catalog every file in the allowed directories (and every live cached output) it
    does not hold yet. Rows already there keep what only the original call knew (arguments,
    description); rows whose files are gone stay and are shown as missing."""
    paths, tokens = catalog.known()
    summary = {"directories": len(roots), "added": 0, "known": 0, "unreadable": 0, "cached": 0}
    batch: List[dict] = []
    # hidden names (Abstract's .abstract-*.tmp too) and all but regular files skipped
    for root in roots:
        for dfd, name, path in _bounded_walk([root], _REINDEX_DEPTH, scan=None, hidden_dirs=False):
            try:
                regular = stat.S_ISREG(os.stat(_at(dfd, name, path), dir_fd=dfd,
                                               follow_symlinks=False).st_mode)
            except OSError:
                continue
            if name.startswith(".") or not regular:
                continue
            if path in paths:
                summary["known"] += 1
                continue
            try:
                batch.append(_recovered(dfd, path, root, servers, catalog.max_text))
            except OSError:
                summary["unreadable"] += 1
            if len(batch) >= 200:
                summary["added"] += len(catalog.record_many(batch))
                batch = []
    summary["added"] += len(catalog.record_many(batch)) if batch else 0
    live = [e for e in (cache.entries() if cache is not None else []) if e.token not in tokens]
    for entry in live:
        try:
            record = _cache_record(cache, entry, catalog.max_text)  # type: ignore[arg-type]
        except OSError:  # expired and swept meanwhile
            continue
        summary["cached"] += len(catalog.record_many([record]))
    summary["rows"] = catalog.count()
    return summary


# -- the tool index: list_available_tools' query
# An in-memory FTS5 index of every shown upstream tool, rebuilt when a tool list changes (each
# upstream keeps its list object until then, so "changed" is an identity test). Words are
# stemmed (porter) and OR-ed: a question about a tool's purpose shares only some words with it.

_TOOL_COLUMNS = ("name", "title", "description", "params")
_TOOL_WEIGHTS = "6.0, 4.0, 2.0, 1.0"
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Job words: what people call a tool's job where its description says it otherwise ("download a
# web page" for fetch's "Fetches a URL"). A query word of a group adds the group's other words to
# the search, each counting _JOB_WEIGHT of a word the query has. Kept short: each group is one job.
_JOB_GROUPS = (
    ("download", "fetch", "web", "webpage", "website", "page", "url", "http", "internet", "html"),
    ("read", "open", "view", "load"),
    ("file", "document"),
    ("folder", "directory"),
    ("find", "search", "lookup", "locate"),
    ("delete", "remove", "erase"),
    ("save", "write", "store"),
    ("edit", "modify", "change", "update"),
    ("image", "picture", "photo", "screenshot"),
    ("history", "log"),
)
_JOB_WEIGHT = 0.5
# A tool its description calls deprecated ranks below its replacement: its score is multiplied
# by _DEPRECATED_WEIGHT (and its summary keeps the warning, _tool_summary)
_DEPRECATED = re.compile(r"\bdeprecated\b", re.I)
_DEPRECATED_WEIGHT = 0.5


def _job_words(words: List[str]) -> List[str]:
    """The other words of the job groups the query's words belong to (not the query's own)."""
    have = {_fold(w) for w in words}
    extra = [w for group in _JOB_GROUPS if have.intersection(group) for w in group]
    return [w for w in dict.fromkeys(extra) if w not in have]


def _tool_text(tool: dict) -> Tuple[str, str, str, str]:
    """The indexed columns of a tool: its name (camelCase split too), title, description, and
    its parameters' names and descriptions."""
    name = str(tool.get("name", ""))
    schema, ann = tool.get("inputSchema"), tool.get("annotations")
    props = schema.get("properties") if isinstance(schema, dict) else None
    params = []
    for key, spec in props.items() if isinstance(props, dict) else ():
        params.append(str(key))
        if isinstance(spec, dict) and isinstance(spec.get("description"), str):
            params.append(spec["description"][:500])
    title = tool.get("title") or (ann.get("title") if isinstance(ann, dict) else None)
    # a server's lone surrogate (a \\ud800 escape) is U+FFFD here: SQLite takes only UTF-8
    words, heading, about, args = (_clean_text(c) for c in (
        name + " " + _CAMEL.sub(" ", name), str(title or ""),
        str(tool.get("description") or "")[:4000], " ".join(params)))
    return words, heading, about, args


class _ToolIndex:
    """Ranks tools for a query: FTS5 bm25 where sqlite3 has FTS5, else a count of the query's
    words found in each tool's text (`fts=False` forces that, for tests)."""

    def __init__(self, fts: Optional[bool] = None) -> None:
        self._want_fts = fts
        self._lock = threading.Lock()
        self._lists: List[List[dict]] = []  # the lists indexed (kept, so identity stays meaningful)
        self._rows: List[Tuple[str, dict]] = []  # rowid - 1 -> (server, tool)
        self._db: Any = None

    def search(self, lists: Dict[str, List[dict]], query: str,
               limit: int) -> List[Tuple[float, str, dict]]:
        """(score, server, tool) of the best matches, best first; [] when no word matches. The
        score adds the query's words and, at _JOB_WEIGHT, its job words (_job_words); a
        deprecated tool's is multiplied by _DEPRECATED_WEIGHT."""
        words = _query_words(query)
        if not words:
            return []
        with self._lock:  # a search of other lists may rebuild the index as soon as it is released
            self._refresh(lists)
            scores: Dict[int, float] = {}
            for terms, weight in ((words, 1.0), (_job_words(words), _JOB_WEIGHT)):
                rank = self._fts if self._db is not None else self._plain
                for i, score in rank(terms).items() if terms else ():
                    scores[i] = scores.get(i, 0.0) + score * weight
            for i in scores:
                desc = self._rows[i][1].get("description")
                if isinstance(desc, str) and _DEPRECATED.search(desc):
                    scores[i] *= _DEPRECATED_WEIGHT
            found = sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:limit]
            return [(round(score, 3), *self._rows[i]) for i, score in found]

    def _refresh(self, lists: Dict[str, List[dict]]) -> None:
        current = list(lists.values())
        if len(current) == len(self._lists) and all(a is b for a, b in zip(current, self._lists)):
            return
        self._lists, self._rows = current, [(s, t) for s, ts in lists.items() for t in ts]
        if self._db is None and sqlite3 is not None and self._want_fts is not False:
            db = sqlite3.connect(":memory:", check_same_thread=False)
            if _has_fts5(db):
                self._db = db
            else:
                db.close()
        if self._db is not None:
            cols = ", ".join(_TOOL_COLUMNS)
            self._db.execute("DROP TABLE IF EXISTS tools")
            self._db.execute(f"CREATE VIRTUAL TABLE tools USING fts5({cols}, tokenize='porter "
                             f"unicode61')")
            self._db.executemany(f"INSERT INTO tools(rowid, {cols}) VALUES (?, ?, ?, ?, ?)",
                                 [(i + 1, *_tool_text(t)) for i, (_, t) in enumerate(self._rows)])

    def _fts(self, words: List[str]) -> Dict[int, float]:
        """Row -> bm25 score (higher is better) of every tool that has one of the words."""
        match = " OR ".join('"' + w + '"' for w in dict.fromkeys(words))  # words hold no quote
        rows = self._db.execute(f"SELECT rowid, bm25(tools, {_TOOL_WEIGHTS}) FROM tools "
                                f"WHERE tools MATCH ?", (match,)).fetchall()
        return {rowid - 1: -r for rowid, r in rows}

    def _plain(self, words: List[str]) -> Dict[int, float]:
        """Row -> how many of the words the tool has (without FTS5)."""
        want = list(dict.fromkeys(_fold(w) for w in words))
        scored = {}
        for i, (_, t) in enumerate(self._rows):
            text = _terms(*_tool_text(t))
            hits = sum(1 for w in want if f" {w} " in text)
            if hits:
                scored[i] = float(hits)
        return scored


# ==== Queries =====================================================================
# query_output's engine. The records of an output load into a SQLite database file of their own
# (table `data`; one per source, kept for reuse within a size budget, least recently used dropped
# first), and each query runs in a worker process of its own (_QUERY_WORKER), which opens that
# file read-only: an authorizer allows reading `data` (and json_each/json_tree) and calling the
# functions of _QUERY_FUNCTIONS only, PRAGMA query_only is on, SQLite's heap is bounded, and
# Abstract kills the worker at the time limit or a cancel, so that no statement (not even one
# slow C function, which no progress handler interrupts) outlives them or blocks another query.

_QUERY_TABLE = "data"
_QUERY_VTABS = ("json_each", "json_tree")  # table-valued functions a query may read from
# The functions a query may call (the authorizer's allow-list): SQLite's aggregates and window
# functions, its string, math, date and time and JSON functions. Any other (fts3_tokenizer, which
# gives out a pointer; load_extension; zeroblob; sqlite_*) is refused by name.
_QUERY_FUNCTIONS = frozenset("""
    avg count group_concat max min string_agg sum total median percentile percentile_cont
    percentile_disc json_group_array json_group_object jsonb_group_array jsonb_group_object
    row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value
    nth_value
    char coalesce concat concat_ws format glob hex if ifnull iif instr length like likelihood
    likely lower ltrim nullif octet_length printf quote replace rtrim soundex substr substring trim
    typeof unhex unicode unistr unistr_quote unlikely upper
    abs acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log log10
    log2 mod pi pow power radians random round sign sin sinh sqrt tan tanh trunc
    date time datetime julianday unixepoch strftime timediff current_date current_time
    current_timestamp
    json json_array json_array_length json_error_position json_extract json_insert json_object
    json_patch json_pretty json_quote json_remove json_replace json_set json_type json_valid jsonb
    jsonb_array jsonb_extract jsonb_insert jsonb_object jsonb_patch jsonb_remove jsonb_replace
    jsonb_set -> ->>
    """.split())
# longest text or blob one expression may make (setlimit, 3.11+)
_QUERY_MAX_VALUE = 16 * 1024 * 1024
_QUERY_MAX_COLUMNS = 2000  # SQLite's default SQLITE_MAX_COLUMN: columns of a table (and a result)
_QUERY_CELL = 200  # characters of a cell in the answer's table
# Columns named as ids (id, user_id, orderId, ID) get an index when loaded: joins and lookups on
# them are the common case, and SQLite would otherwise build an automatic index at every query.
_ID_COLUMN = re.compile(r"(?:(?i:id)|.*_(?i:id)|.*[a-z0-9]Id)\Z")
_QUERY_CACHE_KB = 16384  # SQLite page cache of a query: sorts (GROUP BY, ORDER BY) stay in memory
_QUERY_KILL_S = 2.0  # how long a worker that sent its answer, or was killed, is waited for
_QUERY_WORKERS_MAX = 16  # queries running at once (each in a worker of query.worker_memory_mb)
_QUERY_IDLE_MAX = 4  # workers kept warm between queries (two a table at most)
# SQLite's authorizer action codes (sqlite3.h; stable since 3.8.3), named for the refusal message.
_SQL_ACTIONS = {1: "CREATE INDEX", 2: "CREATE TABLE", 3: "CREATE TEMP INDEX",
                4: "CREATE TEMP TABLE",
                5: "CREATE TEMP TRIGGER", 6: "CREATE TEMP VIEW", 7: "CREATE TRIGGER",
                8: "CREATE VIEW",
                9: "DELETE", 10: "DROP INDEX", 11: "DROP TABLE", 12: "DROP TEMP INDEX",
                13: "DROP TEMP TABLE",
                14: "DROP TEMP TRIGGER", 15: "DROP TEMP VIEW", 16: "DROP TRIGGER", 17: "DROP VIEW",
                18: "INSERT", 19: "PRAGMA", 20: "READ", 21: "SELECT", 22: "TRANSACTION",
                23: "UPDATE",
                24: "ATTACH", 25: "DETACH", 26: "ALTER TABLE", 27: "REINDEX", 28: "ANALYZE",
                29: "CREATE VIRTUAL TABLE", 30: "DROP VIRTUAL TABLE", 31: "FUNCTION",
                32: "SAVEPOINT",
                33: "RECURSIVE"}

# The program a query runs in (`python -I -S -c`, ~20 ms to start). It reads its job, one JSON
# line, on stdin, bounds itself (POSIX: address space and CPU time; everywhere: SQLite's heap,
# value length, attached databases), and writes JSON lines: the columns, the rows it sends (a
# blob {"x": hex, "n": bytes}, a text it cut {"s": start, "n": characters}), then the end:
# {"total": rows}, {"over": bytes} or {"error": message, "kind": class, "refused": [...]}.
# A row is fetched, counted against the byte budget and written one at a time.
_QUERY_WORKER = r'''
import json, os, sqlite3, sys, time
try:
    import resource
except ImportError:  # Windows: SQLite's heap limit, and the kill at the time limit
    resource = None


def limit(job, first):
    if resource is None:
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    # the CPU time: this job's share on top of what is used so far (the soft limit only, so the
    # next job can raise it); the address space once: what the interpreter maps, plus the budget
    todo = [(resource.RLIMIT_CPU, int(used.ru_utime + used.ru_stime) + job["cpu"], False)]
    if first:
        try:  # (Linux; elsewhere a generous allowance for the interpreter)
            with open("/proc/self/statm") as f:
                base = int(f.read().split()[0]) * resource.getpagesize()
        except (OSError, ValueError):
            base = 256 << 20
        todo.append((getattr(resource, "RLIMIT_AS", None), base + job["memory"], True))
        todo.append((resource.RLIMIT_CORE, 0, True))  # (SIGXCPU would dump a core)
    for what, value, hard_too in todo:
        try:  # (macOS accepts RLIMIT_AS but does not enforce it)
            hard = resource.getrlimit(what)[1]
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(what, (value, value if hard_too else hard))
        except (TypeError, ValueError, OSError):
            pass


def cell(value, room):
    """(the value to send, cut to `room` characters when None is not, its length as sent)."""
    if isinstance(value, bytes):
        cut = value if room is None or len(value) * 2 <= room else value[:room // 2]
        return {"x": cut.hex(), "n": len(value)}, len(cut) * 2 + 16
    if isinstance(value, str):
        if room is not None and len(value) > room:
            return {"s": value[:room], "n": len(value)}, room + 16
        return value, len(value) + 3
    return value, len(str(value)) + 1


def rows(cur, job, send):
    """Send the rows, one at a time: all of them within `budget` bytes (keep None), or the
    first `keep`, each cell cut to what is left of the budget (at least `floor` characters,
    what the answer's table shows) until they would fill the table (`width` characters)."""
    keep, budget, width, floor = job["keep"], job["budget"], job["cell"], job["floor"]
    total = sent = shown = 0
    for row in cur:
        total += 1
        if keep is not None and (total > keep or shown > width):
            continue
        cells, room = [], budget - sent
        for value in row:
            value, used = cell(value, None if keep is None else max(floor, min(width, room)))
            cells.append(value)
            room -= used
            shown += min(used, floor) + 3
        line = json.dumps(cells, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
        sent += len(line)
        if keep is None and sent > budget:
            return {"over": sent}
        send(line)
    return {"total": total}


def connect(job):
    db = sqlite3.connect(job["uri"], uri=True, isolation_level=None)
    # (a sort larger than the page cache goes on in temporary files, removed when the worker
    # ends however it ends: it takes no more memory; the table is read mapped, not copied)
    for pragma in ("query_only = ON", "hard_heap_limit = %d" % job["heap"],
                   "cache_size = -%d" % job["cache_kb"], "temp_store = FILE",
                   "mmap_size = %d" % job["mmap"]):
        db.execute("PRAGMA " + pragma)
    if hasattr(db, "enable_load_extension"):
        db.enable_load_extension(False)
    if hasattr(db, "setlimit"):  # Python 3.11+
        db.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, job["value"])
    # the schema, read before the authorizer is in place
    db.execute("SELECT * FROM data, json_each('[]'), json_tree('[]') LIMIT 0").fetchall()
    return db


def main():
    out = sys.stdout.buffer
    db = uri = None
    refused, deadline = [], [0.0]

    def authorize(action, arg1, arg2, dbname, source):
        if action in (21, 33):  # SELECT, RECURSIVE (a WITH RECURSIVE)
            return 0
        # READ of data's columns, the json functions' columns, or of no column (count(*))
        if action == 20 and (arg1 == job["table"] or arg1 in job["vtabs"] or arg2 == ""):
            return 0
        if action == 31 and str(arg2).lower() in allowed:
            return 0
        refused.append([action, arg1, arg2])
        return 1

    def send(obj):
        out.write(obj if isinstance(obj, bytes) else json.dumps(obj).encode() + b"\n")

    for line in sys.stdin.buffer:  # one job a line, until Abstract closes the pipe
        job = json.loads(line)
        limit(job, uri is None)
        allowed = frozenset(job["functions"])
        del refused[:]
        try:
            if uri != job["uri"]:
                db, uri = connect(job), job["uri"]
                db.set_authorizer(authorize)
                db.set_progress_handler(lambda: time.monotonic() > deadline[0], 1000)
            deadline[0] = time.monotonic() + job["timeout"]
            cur = db.execute(job["sql"])
            send({"columns": [str(d[0]) for d in cur.description or ()]})
            send(rows(cur, job, send))
            cur.close()
        except BaseException as e:  # MemoryError, sqlite3.Error, Warning: said, never raised
            send({"error": str(e)[:1000], "kind": type(e).__name__, "refused": refused[:20]})
        out.flush()
    os._exit(0)  # at once: the interpreter's finalization would only take time


main()
'''


def _sql_name(name: str) -> str:
    """An SQL identifier for any column name ("" doubled inside)."""
    return '"' + name.replace('"', '""') + '"'


def _sql_value(value: Any) -> Any:
    """A JSON value as SQLite stores it: booleans as 1 and 0 (as json_extract gives them),
    integers past 64 bits as text, objects and arrays as compact JSON text."""
    kind = type(value)
    if kind is str or kind is float or value is None:
        return value
    if kind is bool:
        return int(value)
    if kind is int:
        return value if -(1 << 63) <= value < (1 << 63) else str(value)
    return _compact_json(value)


def _sql_columns(keys: Iterable[str], seen: set) -> Tuple[List[str], List[str]]:
    """(column names for new keys, notes): SQLite folds the case of column names, so a key that
    differs from one before only in case (or is empty) gets a numbered name, and one SQLite
    cannot name (a NUL, a lone surrogate) has those replaced by U+FFFD. `seen`: the names taken
    so far, casefolded (added to)."""
    names, notes = [], []
    for key in keys:
        base = _clean_text(key).replace("\0", "\ufffd") or "column"
        name, n = base, 1
        while name.casefold() in seen:
            n += 1
            name = f"{base}_{n}"
        seen.add(name.casefold())
        names.append(name)
        if name != key:
            notes.append(f"key {key!r} is column {name}")
    return names, notes


class _Table:
    """One source's records in a database file of their own, read by the queries' workers.
    The file is removed once the table is closed (evicted) and no query reads it any more."""

    __slots__ = ("path", "columns", "rows", "size", "notes", "lock", "users", "closed", "load_s",
                 "booleans")

    def __init__(self, path: str, columns: List[str], rows: int, notes: List[str]) -> None:
        self.path, self.columns, self.rows, self.notes = path, columns, rows, notes
        self.booleans: List[str] = []  # columns of booleans (stored as 1/0) in the first records
        self.lock = threading.Lock()
        self.users = 0  # queries reading the file now
        self.closed = False
        # seconds its loading took, until the first query says so
        self.load_s: Optional[float] = None
        self.size = os.path.getsize(path)

    def acquire(self) -> bool:
        """Count one more query reading the file (False: closed already)."""
        with self.lock:
            if self.closed:
                return False
            self.users += 1
            return True

    def release(self) -> None:
        with self.lock:
            self.users -= 1
            gone = self.closed and not self.users
        if gone:
            self._remove()

    def close(self) -> None:
        """Drop the table: its file goes now, or when the last query reading it ends."""
        with self.lock:
            self.closed = True
            gone = not self.users
        if gone:
            self._remove()

    def _remove(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def _load_table(rows: Iterable[Dict[str, Any]], batch: int = 1000,
                folder: Optional[str] = None) -> _Table:
    """The records as table `data` in a new database file in `folder` (default: the temporary
    directory), which the queries' workers open read-only.

    The rows are read once, a batch at a time (a cached output's view is streamed in line by
    line): a key first seen in a later batch adds a column, null in the rows before, so the
    columns are the union of the keys in first-seen order however the rows come."""
    fd, path = tempfile.mkstemp(prefix="abstract-query-", suffix=".sqlite3", dir=folder)
    os.close(fd)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        for pragma in ("journal_mode = OFF", "synchronous = OFF",
                       f"cache_size = -{_QUERY_CACHE_KB}"):
            db.execute(f"PRAGMA {pragma}")
        names, notes, count, booleans = _fill_table(db, iter(rows), batch)
        db.close()
        table = _Table(os.path.abspath(path), names or ["value"], count, notes)
        table.booleans = booleans
        return table
    except BaseException:
        db.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def _fill_table(db: Any, it: Iterator[Dict[str, Any]], batch: int
                ) -> Tuple[List[str], List[str], int, List[str]]:
    """Create and fill table `data` from the rows: (column names, notes, rows, the columns of
    booleans in the first batch)."""
    keys: List[str] = []
    names: List[str] = []
    notes: List[str] = []
    seen: set = set()  # column names taken, casefolded
    known: set = set()  # keys that have a column
    count = keyless = 0  # rows in all; rows before the first key (all null, whatever the columns)
    bools: Optional[set] = None  # the keys of booleans in the first batch
    db.execute("BEGIN")
    while True:
        chunk = list(itertools.islice(it, batch))
        if bools is None:
            bools = {k for row in chunk for k, v in row.items() if v is True or v is False}
        new = [k for k in dict.fromkeys(itertools.chain.from_iterable(chunk))
               if isinstance(k, str) and k not in known]
        if new:
            if len(keys) + len(new) > _QUERY_MAX_COLUMNS:
                raise _ToolError(f"The records have more than {_QUERY_MAX_COLUMNS:,} distinct "
                                 f"keys, SQLite's limit of columns in a table. Give "
                                 f"records_pointer to a list of records with fewer keys.")
            added, said = _sql_columns(new, seen)
            if not keys:
                db.execute(f"CREATE TABLE {_QUERY_TABLE} ({', '.join(map(_sql_name, added))})")
            else:
                for name in added:
                    db.execute(f"ALTER TABLE {_QUERY_TABLE} ADD COLUMN {_sql_name(name)}")
            keys, names, notes = keys + new, names + added, notes + said
            known.update(new)
            if keyless:
                _insert(db, len(keys), [{}] * keyless, keys)
                keyless = 0
        count += len(chunk)
        if not keys:
            keyless += len(chunk)
        elif chunk:
            _insert(db, len(keys), chunk, keys)
        if len(chunk) < batch:
            break
    if not keys:  # no row has a key: one column, "value", null in every row
        db.execute(f"CREATE TABLE {_QUERY_TABLE} (value)")
        db.executemany(f"INSERT INTO {_QUERY_TABLE} VALUES (NULL)", itertools.repeat((), keyless))
    for i, name in enumerate(n for n in names if _ID_COLUMN.match(n)):
        db.execute(f"CREATE INDEX {_QUERY_TABLE}_id_{i} ON {_QUERY_TABLE} ({_sql_name(name)})")
    db.execute("COMMIT")
    return names, notes, count, [n for k, n in zip(keys, names) if k in (bools or ())]


def _insert(db: Any, width: int, rows: List[Dict[str, Any]], keys: List[str]) -> None:
    """Insert rows, their values for `keys` as _sql_value stores them."""
    insert = f"INSERT INTO {_QUERY_TABLE} VALUES ({', '.join('?' * width)})"
    values = [tuple(map(_sql_value, map(row.get, keys))) for row in rows]
    before = db.total_changes
    try:
        db.executemany(insert, values)
    except UnicodeEncodeError:  # a lone surrogate: the rows from there on with them replaced
        done = db.total_changes - before  # (the row that failed was not inserted)
        db.executemany(insert, [tuple(map(_clean_text, t)) for t in values[done:]])


def _start_worker() -> Any:
    """A query's worker process: this Python running _QUERY_WORKER, with pipes."""
    kw: Dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE,
                          "stderr": subprocess.DEVNULL}
    if _WINDOWS:  # no console window flashing up for each query
        kw["creationflags"] = getattr(subprocess, "CREATE_NO_WINDOW", 0)
    else:  # out of the terminal's process group: a Ctrl-C there goes to Abstract only
        kw["start_new_session"] = True
    if not sys.executable or getattr(sys, "frozen", False):  # (a frozen app is not a Python)
        raise _ToolError("query_output needs a Python interpreter to run its queries in, and "
                         "this Abstract has none (sys.executable is not one).")
    try:
        # -I: no PYTHON* variables, user site or script directory; -S: no site (faster start)
        return subprocess.Popen([sys.executable, "-I", "-S", "-c", _QUERY_WORKER], **kw)
    except (OSError, ValueError) as e:
        raise _ToolError(f"query_output could not start its worker process ({sys.executable!r}: "
                         f"{e}).") from None


def _end_worker(proc: Any, kill: bool = False) -> None:
    """End a worker and reap it: its stdin closed (an idle one ends by itself), killed when
    `kill` says so or when it does not end in _QUERY_KILL_S."""
    if kill:
        proc.kill()
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(_QUERY_KILL_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(_QUERY_KILL_S)
    proc.stdout.close()


class _Tables:
    """Loaded tables by source, within a size budget: the least recently used are closed
    first, and the newest always stays (a source bigger than the budget still answers).

    It also hands out the queries' workers: a warm one that answered a query on the same table
    before (its page cache is full: the next query is as quick as one in Abstract's own
    process), else one started ahead. At most _QUERY_WORKERS_MAX run at once, and
    _QUERY_IDLE_MAX (two a table) wait warm; a worker that failed or was killed is never kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: "collections.OrderedDict[Any, _Table]" = collections.OrderedDict()
        self._spare: Any = None  # a worker started ahead, waiting for its first job
        self._idle: List[Tuple[str, Any]] = []  # (table file, warm worker), oldest first
        self._live: set = set()  # the workers given out (those not ended yet)
        self._closed = False

    def worker(self, path: str) -> Any:
        """A worker for a query on the table file `path`; ToolError past _QUERY_WORKERS_MAX."""
        with self._lock:
            self._live = {p for p in self._live if p.poll() is None}
            if len(self._live) >= _QUERY_WORKERS_MAX:
                raise _ToolError(f"{_QUERY_WORKERS_MAX} queries are running already, the most at "
                                 f"once; run this one when one of them has answered (each ends "
                                 f"by query.timeout_seconds).")
            warm = [i for i, (p, proc) in enumerate(self._idle) if p == path]
            proc = self._idle.pop(warm[-1])[1] if warm else None
        if proc is None or proc.poll() is not None:
            spare = None if self._closed else _start_worker()
            with self._lock:
                proc, self._spare = self._spare, spare
            if proc is None or proc.poll() is not None:
                proc = _start_worker()
        with self._lock:
            self._live.add(proc)
        return proc

    def done(self, path: str, proc: Any, ok: bool) -> None:
        """A worker back from a query: kept warm for the next on the same table when it
        answered (`ok`) and there is room, else ended (killed unless `ok`)."""
        with self._lock:
            self._live.discard(proc)
            keep = (ok and not self._closed and sum(p == path for p, _ in self._idle) < 2
                    and any(t.path == path for t in self._tables.values()))
            if keep:
                self._idle.append((path, proc))
            ended = [] if keep else [proc]
            if len(self._idle) > _QUERY_IDLE_MAX:
                ended.append(self._idle.pop(0)[1])
        for p in ended:
            _end_worker(p, kill=p is proc and not ok)

    def _forget(self, tables: List[_Table]) -> None:
        """Close dropped tables, their warm workers ended first (Windows removes no open file)."""
        paths = {t.path for t in tables}
        with self._lock:
            ended = [proc for p, proc in self._idle if p in paths]
            self._idle = [(p, proc) for p, proc in self._idle if p not in paths]
        for proc in ended:
            _end_worker(proc)
        for t in tables:  # (a query reading one still ends normally: see _Table.close)
            t.close()

    def get(self, key: Any) -> Optional[_Table]:
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
            return table

    def put(self, key: Any, table: _Table, budget: int) -> None:
        with self._lock:
            if self._closed:  # a load that ended after the shutdown's close(): its file goes
                dropped = [table]
            else:
                old = self._tables.pop(key, None)
                self._tables[key] = table
                dropped = [old] if old is not None else []
                total = sum(t.size for t in self._tables.values())
                while total > budget and len(self._tables) > 1:
                    _, first = self._tables.popitem(last=False)
                    total -= first.size
                    dropped.append(first)
        self._forget(dropped)

    def drop(self, key: Any) -> None:
        with self._lock:
            table = self._tables.pop(key, None)
        self._forget([table] if table is not None else [])

    def close(self) -> None:
        """At shutdown: kill the running workers, end the others, remove every table's file."""
        with self._lock:
            tables = list(self._tables.values())
            self._tables.clear()
            spare, self._spare, self._closed = self._spare, None, True
            live = list(self._live)
        for proc in live:  # (their queries answer that they failed)
            proc.kill()
        if spare is not None:
            _end_worker(spare)
        self._forget(tables)


class _Cut(NamedTuple):
    """A value the worker sent cut: its start (a blob's as hex) and its whole length."""
    text: str
    length: int  # characters (text) or bytes (blob)
    blob: bool


class _QueryResult(NamedTuple):
    columns: List[str]
    rows: List[tuple]  # the rows kept (at most `keep`, within the byte budget)
    total: int  # rows the statement returned
    elapsed: float  # seconds


def _result_columns(names: Iterable[str]) -> List[str]:
    """The statement's column names, made unique ("id", "id_2") so rows can become records
    (each cut to _QUERY_CELL characters: a name is the SQL's own text, `SELECT '...long'`)."""
    out: List[str] = []
    seen = set()
    for name in names:
        name = str(name)[:_QUERY_CELL]
        unique, n = name, 1
        while unique in seen:
            n += 1
            unique = f"{name}_{n}"
        seen.add(unique)
        out.append(unique)
    return out


def _worker_cell(value: Any) -> Any:
    """A cell as the worker sent it: a blob back to bytes, a cut value as _Cut."""
    if not isinstance(value, dict):
        return value
    if "x" in value:
        hexed, n = str(value["x"]), int(value["n"])
        return bytes.fromhex(hexed) if len(hexed) == 2 * n else _Cut(hexed, n, True)
    return _Cut(str(value["s"]), int(value["n"]), False)


def _read_worker(out: Any, limit: int) -> Tuple[List[str], List[tuple], dict]:
    """(columns, rows, the end message) from a worker's stdout, at most `limit` bytes of it:
    the end is {} when it ended without one (killed, or it died)."""
    columns: List[str] = []
    rows: List[tuple] = []
    used = 0
    try:
        while True:
            line = out.readline(limit - used + 1)
            used += len(line)
            if not line or not line.endswith(b"\n"):
                return columns, rows, {"over": used} if used > limit else {}
            msg = json.loads(line.decode("utf-8", "replace"))
            if isinstance(msg, list):
                rows.append(tuple(map(_worker_cell, msg)))
            elif "columns" in msg:
                columns = _result_columns(msg["columns"])
            else:
                return columns, rows, msg
    except (ValueError, TypeError, KeyError, AttributeError, OSError):  # not its protocol
        return columns, rows, {}


def _in_worker(job: dict, limit: int, deadline: float,
               on_cancel: Optional[Callable[[Callable[[], None]], None]],
               take: Callable[[], Any], give: Callable[[Any, bool], None]
               ) -> Tuple[List[str], List[tuple], dict, List[str]]:
    """Run `job` in a worker from `take`, given back to `give` with whether it answered:
    (columns, rows, end, why it was killed: "time" at the deadline, "cancel" when the request
    is cancelled, or nothing)."""
    proc = take()
    stopped: List[str] = []
    guard = threading.Lock()
    answered: List[bool] = []  # set once the query is over: no kill after that

    def stop(why: str) -> None:
        with guard:
            if answered:
                return
            stopped.append(why)
        proc.kill()

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), stop, ("time",))
    timer.daemon = True
    timer.start()
    columns: List[str] = []
    rows: List[tuple] = []
    end: dict = {}
    try:
        if on_cancel is not None:
            on_cancel(lambda: stop("cancel"))
        try:
            proc.stdin.write(json.dumps(job).encode() + b"\n")
            proc.stdin.flush()
        except OSError:  # (a worker that died says nothing: the caller reports it)
            pass
        columns, rows, end = _read_worker(proc.stdout, limit)
    finally:
        timer.cancel()
        with guard:
            answered.append(True)
            # (it answered: rows, or SQLite's refusal; not when it ran out of memory or time)
            ok = not stopped and ("total" in end or "error" in end and end.get(
                "kind") != "MemoryError" and end.get("error") != "interrupted")
        give(proc, ok)
    return columns, rows, end, stopped


def _query_job(table: _Table, sql: str, keep: Optional[int], timeout: float, max_chars: int,
               memory_mb: float) -> dict:
    """What a worker is told: the file, the statement and every bound (see _QUERY_WORKER)."""
    memory = int(memory_mb * (1 << 20))
    return {"uri": Path(table.path).as_uri() + "?mode=ro&immutable=1", "sql": sql, "keep": keep,
            "budget": max_chars if keep is None else 4 * max_chars, "cell": max_chars,
            "floor": _QUERY_CELL, "timeout": timeout, "cpu": int(timeout) + 2, "memory": memory,
            "heap": memory // 2, "value": _QUERY_MAX_VALUE,
            # the page cache, and as much for a sort: within the heap, with room for values;
            # the table's file mapped (a quarter: mapping counts in the address space)
            "cache_kb": min(_QUERY_CACHE_KB, memory >> 13), "mmap": memory // 4,
            "functions": sorted(_QUERY_FUNCTIONS), "vtabs": _QUERY_VTABS, "table": _QUERY_TABLE}


def _run_query(table: _Table, sql: str, keep: Optional[int], timeout: float, max_chars: int,
               memory_mb: float = 256.0,
               on_cancel: Optional[Callable[[Callable[[], None]], None]] = None,
               tables: Optional[_Tables] = None) -> _QueryResult:
    """Run one read-only statement over `table` in a worker process (from `tables`; without,
    a new one, ended after): the first `keep` rows, cells cut to `max_chars` and fewer when they
    would not fit in the answer (see _QUERY_WORKER), or with keep None every row, within
    max_chars bytes of JSON; and the number of rows in all. The worker is killed at the time
    limit, or when the hook given to `on_cancel` runs (_Cancelled). ToolError for a refused
    statement, a syntax error, an unknown column, the time, memory or size limit."""
    if not table.acquire():
        raise _Closed()
    start = time.monotonic()
    job = _query_job(table, sql, keep, timeout, max_chars, memory_mb)
    path = table.path
    try:
        if tables is None:
            take, give = _start_worker, lambda proc, ok: _end_worker(proc, kill=not ok)
        else:
            take, give = lambda: tables.worker(path), lambda proc, ok: tables.done(path, proc, ok)
        # (the slack: rows of cells cut to _QUERY_CELL past the budget, a table's worth)
        columns, rows, end, stopped = _in_worker(job, job["budget"] + 64 * max_chars + (1 << 20),
                                                 start + timeout, on_cancel, take, give)
    finally:
        table.release()
    if "total" in end:
        return _QueryResult(columns, rows, int(end["total"]), time.monotonic() - start)
    if "cancel" in stopped:
        raise _Cancelled()
    if "time" in stopped or end.get("error") == "interrupted":
        raise _ToolError(f"The query ran longer than {timeout:g} s and was stopped "
                         f"(query.timeout_seconds in Abstract's settings). Narrow it: a WHERE, a "
                         f"LIMIT, fewer joins.")
    if "over" in end:
        raise _ToolError(f"The query's result is larger than {max_chars // (1 << 20)} MB "
                         f"(query.max_result_mb in Abstract's settings); select fewer rows or "
                         f"columns.")
    if "error" in end:
        raise _query_error(table.columns, end, sql, memory_mb)
    raise _ToolError(f"The query's worker process ended without an answer: most likely it needed "
                     f"more than {memory_mb:g} MB of memory (query.worker_memory_mb in Abstract's "
                     f"settings). Narrow it: fewer or shorter values, a LIMIT.")


def _sql_verb(sql: str) -> str:
    """What a schema-changing statement does, from its first words ("CREATE INDEX")."""
    m = re.match(r"\s*(CREATE|DROP|ALTER)\s+(?:(?:TEMP|TEMPORARY|UNIQUE|VIRTUAL)\s+)?([A-Za-z]+)",
                 sql, re.IGNORECASE)
    return f"{m.group(1)} {m.group(2)}".upper() if m else "changing the schema"


def _refusal(action: int, arg1: Any, arg2: Any, sql: str) -> str:
    """What the authorizer refused, for the model: "DELETE", "the function x()", ..."""
    if str(arg1).startswith("sqlite_") and action in (9, 18, 23):
        # (CREATE, DROP: the first thing a schema change asks for)
        return _sql_verb(sql)
    what = _SQL_ACTIONS.get(action, f"action {action}")
    return {20: f"reading table {arg1}", 31: f"the function {arg2}()", 19: f"PRAGMA {arg1}",
            24: "ATTACH"}.get(action, what)


def _query_error(columns: List[str], end: dict, sql: str, memory_mb: float) -> _ToolError:
    """A failed statement as the model's error: what was refused, or SQLite's own message."""
    msg = str(end.get("error"))
    cols = ", ".join(columns)
    refused = [r for r in end.get("refused") or () if isinstance(r, list) and len(r) == 3]
    if refused:
        said = dict.fromkeys(_refusal(int(a), b, c, sql) for a, b, c in refused)
        return _ToolError(f"Refused: {'; '.join(said)}. query_output runs one read-only "
                          f"SELECT (WITH allowed) over the table {_QUERY_TABLE}: it may read "
                          f"{_QUERY_TABLE} (and json_each/json_tree) and call SQLite's aggregate, "
                          f"window, string, math, date and time and JSON functions, nothing else.")
    if end.get("kind") == "MemoryError" or "out of memory" in msg:
        return _ToolError(f"The query needed more than {memory_mb:g} MB of memory and was stopped "
                          f"(query.worker_memory_mb in Abstract's settings). Narrow it: fewer or "
                          f"shorter values, a LIMIT.")
    if "too big" in msg:
        return _ToolError(f"The query made a value longer than {_QUERY_MAX_VALUE >> 20} MB, the "
                          f"longest a query may make (SQLite: {msg}).")
    if "one statement at a time" in msg:
        return _ToolError("Give one statement only (a single SELECT; a trailing ';' is fine).")
    if msg.startswith("no such column"):
        return _ToolError(f"SQLite: {msg}. The columns of {_QUERY_TABLE}: {cols}. Quote a name "
                          f"with spaces or capitals in double quotes; values go in single quotes.")
    if msg.startswith("no such table"):
        return _ToolError(f"SQLite: {msg}. The records are in the one table {_QUERY_TABLE} "
                          f"({cols}).")
    if "syntax error" in msg or "incomplete input" in msg or "unrecognized token" in msg:
        return _ToolError(f"SQL syntax error (SQLite: {msg}). Write one SELECT over the table "
                          f"{_QUERY_TABLE}.")
    return _ToolError(f"The query failed (SQLite: {msg[:500]}).")


# SQL's tokens, enough to find names, literals and the outermost select list: comments and
# blanks (skipped), strings, quoted names, words, numbers, then operators one or two characters.
_SQL_TOKEN = re.compile(r"""\s+|--[^\n]*|/\*.*?(?:\*/|\Z)|'(?:[^']|'')*'?|"(?:[^"]|"")*"?"""
                        r"""|\[[^\]]*\]?|`(?:[^`]|``)*`?|[^\W\d][\w$]*|\d[\w.]*"""
                        r"""|->>|->|\|\||[<>=!]=|<>|.""", re.S)


# Longest statement _sql_tokens reads (for _json_columns and _boolean_note): a longer one (a
# huge IN list) keeps every value as text and gets no note. Tokens cost ~100 bytes each: a 6 MB
# statement SQLite runs in 3 s took 7 s and 600 MB more to read.
_SQL_SCAN_MAX = 100_000


def _sql_tokens(sql: str) -> List[str]:
    """The statement's tokens, comments and blanks left out; none past _SQL_SCAN_MAX."""
    if len(sql) > _SQL_SCAN_MAX:
        return []
    return [t for t in _SQL_TOKEN.findall(sql) if not t[:1].isspace() and t[:2] not in ("--", "/*")]


def _sql_unquoted(token: str) -> str:
    """A name as SQLite reads it: quotes removed, case folded."""
    if token[:1] in ('"', "`", "[") and len(token) > 1:
        token = token[1:-1].replace(token[0] * 2, token[0]) if token[0] != "[" else token[1:-1]
    return token.casefold()


# Functions whose value SQLite marks as JSON (its JSON subtype, which Python cannot see): a
# result column that is a call of one of them, or an a -> b, holds JSON, not text.
_SQL_JSON_FUNCTIONS = frozenset(("json", "json_array", "json_object", "json_group_array",
                                 "json_group_object", "json_insert", "json_replace", "json_set",
                                 "json_remove", "json_patch", "json_quote"))
_SQL_CLAUSES = frozenset(("from", "where", "group", "having", "window", "order", "limit"))
_SQL_COMPOUND = frozenset(("union", "intersect", "except"))
# words that make an expression something other than its operands: a -> b AND c is no JSON
_SQL_WORD_OPERATORS = frozenset(("and", "or", "not", "is", "in", "like", "glob", "match",
                                 "regexp", "between", "escape", "collate", "case", "cast",
                                 "exists", "isnull", "notnull", "distinct"))


def _sql_depths(tokens: List[str]) -> List[int]:
    """The depth of parentheses each token is at (a bracket itself counts as outside)."""
    out, depth = [], 0
    for t in tokens:
        if t == ")":
            depth = max(depth - 1, 0)
        out.append(depth)
        if t == "(":
            depth += 1
    return out


def _sql_is_json(expr: List[str], depths: List[int]) -> bool:
    """Whether one result column (its tokens, an alias after it) is a JSON function's call or
    an a -> b: the two kinds of expression whose value SQLite makes as JSON."""
    top = [t for t, d in zip(expr, depths) if d == depths[0]]  # (a call's brackets, not inside)
    names = [t[:1] in '"`[_' or t[:1].isalpha() for t in top]
    if len(top) >= 2 and top[-2].casefold() == "as":
        top = top[:-2]
    elif len(top) >= 2 and names[-1] and top[-2].casefold() not in _SQL_WORD_OPERATORS and (
            top[-2] == ")" or names[-2] or top[-2][:1] in "'0123456789"):
        top = top[:-1]  # a bare alias: a name right after an operand
    if len(top) >= 3 and top[0].casefold() in _SQL_JSON_FUNCTIONS and top[1:3] == ["(", ")"]:
        rest = top[3:]  # FILTER (...) / OVER (...) / OVER name after an aggregate
        if not rest or rest[0].casefold() in ("filter", "over"):
            return True
    ops = [t for t in top if not (t[:1].isalnum() or t[:1] in "_'\"`[().")]
    words = {t.casefold() for t in top if t[:1].isalpha()}
    return bool(ops) and set(ops) == {"->"} and not words & _SQL_WORD_OPERATORS


def _json_columns(sql: str, width: int) -> List[int]:
    """The result columns (their indexes, of `width`) whose values SQLite made as JSON: in the
    outermost SELECT, a column that is a call of a JSON function (_SQL_JSON_FUNCTIONS) or an
    a -> b, in every SELECT of a compound; a * stands for the columns it must (one * at most)."""
    tokens = _sql_tokens(sql)
    depths = _sql_depths(tokens)
    flags: Optional[List[bool]] = None
    i = 0
    if tokens[:1] and tokens[0].casefold() == "with":  # to the main SELECT, past the CTEs
        while i < len(tokens) and not (depths[i] == 0 and tokens[i].casefold() == "select"):
            i += 1
    while i < len(tokens) and tokens[i].casefold() == "select" and depths[i] == 0:
        i += 1
        if i < len(tokens) and tokens[i].casefold() in ("distinct", "all"):
            i += 1
        items: List[Tuple[int, int]] = []
        start = i
        while i < len(tokens) and not (depths[i] == 0 and (tokens[i].casefold() in _SQL_CLAUSES
                                                           or tokens[i].casefold() in _SQL_COMPOUND
                                                           or tokens[i] == ";")):
            if depths[i] == 0 and tokens[i] == ",":
                items.append((start, i))
                start = i + 1
            i += 1
        items.append((start, i))
        arm = _arm_flags(tokens, depths, items, width)
        flags = arm if flags is None else [a and b for a, b in zip(flags, arm)]
        while i < len(tokens) and not (depths[i] == 0 and tokens[i].casefold() in _SQL_COMPOUND):
            i += 1  # past FROM ... to the next SELECT of a compound, if any
        i += 1
        if i < len(tokens) and tokens[i].casefold() == "all":
            i += 1
        if i < len(tokens) and tokens[i].casefold() != "select":  # VALUES: no JSON
            return []
    return [n for n, f in enumerate(flags or []) if f]


def _arm_flags(tokens: List[str], depths: List[int], items: List[Tuple[int, int]],
               width: int) -> List[bool]:
    """For one SELECT's result columns (token ranges): which of the `width` columns are JSON."""
    stars = [a for a, b in items if tokens[b - 1:b] == ["*"] and (b - a == 1 or
                                                                  tokens[b - 2] == ".")]
    if len(stars) > 1:  # where each * ends is unknown: none is taken for JSON
        return [False] * width
    flags: List[bool] = []
    for a, b in items:
        if a in stars:
            flags.extend([False] * max(width - (len(items) - 1), 0))
        else:
            flags.append(b > a and _sql_is_json(tokens[a:b], depths[a:b]))
    return (flags + [False] * width)[:width]


def _boolean_note(table: _Table, sql: str) -> str:
    """A note for a statement that names a column of booleans and quotes 'true' or 'false':
    SQLite holds them as 1 and 0, so the quoted word equals none of them. "true" counts too
    unless a column has that name: SQLite reads a double-quoted name that is no column as a
    string (https://sqlite.org/quirks.html#dblquote)."""
    if not table.booleans:
        return ""
    tokens = _sql_tokens(sql)
    columns = {c.casefold() for c in table.columns}
    if not any(t.casefold() in ("'true'", "'false'") or t[:1] == '"' and _sql_unquoted(t) in
               ("true", "false") and _sql_unquoted(t) not in columns for t in tokens):
        return ""
    names = {_sql_unquoted(t) for t in tokens}
    cols = [c for c in table.booleans if c.casefold() in names]
    if not cols:
        return ""
    c = cols[0] if re.fullmatch(r"[A-Za-z_]\w*", cols[0]) else _sql_name(cols[0])
    return (f"{', '.join(cols)} {'holds' if len(cols) == 1 else 'hold'} booleans as 1 (true) and "
            f"0 (false), so the text 'true' or 'false' equals none of them: write {c} = 1, "
            f"{c} = true (unquoted), or just WHERE {c}")


def _cell(value: Any) -> str:
    """A value on one line of the answer's table, cut at _QUERY_CELL characters."""
    if value is None:
        return "null"
    cut = isinstance(value, _Cut)
    if cut:
        value = "x'" + value.text[:_QUERY_CELL] + "'" if value.blob else value.text[:_QUERY_CELL]
    elif isinstance(value, bytes):
        value = "x'" + value[:_QUERY_CELL // 2].hex() + "'"
    text = str(value).replace("\\", "\\\\").replace("\n",
                                                    "\\n").replace("\r", "\\r").replace("|", "\\|")
    if len(text) > _QUERY_CELL or cut:
        return text[:_QUERY_CELL - 1] + "…"
    return text


def _json_cell(value: Any) -> Any:
    """A value for JSON: blobs as hex text, infinities as text (a cut value: its start)."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, _Cut):
        return value.text
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _result_records(res: _QueryResult, sql: str, count: int) -> List[Dict[str, Any]]:
    """The first `count` rows as records (structuredContent, a stored file): the cells of a
    column SQLite made as JSON (_json_columns) are the JSON values they hold, any other text
    stays text, however much it looks like JSON."""
    made = _json_columns(sql, len(res.columns))
    out = []
    for row in res.rows[:count]:
        cells = list(map(_json_cell, row))
        for i in made:
            if isinstance(row[i], str):  # (SQL NULL stays null; json('1e999') stays text)
                with contextlib.suppress(FormatError):
                    cells[i] = _load_json(row[i])
        out.append(dict(zip(res.columns, cells)))
    return out


def _query_table_text(columns: List[str], rows: List[tuple], limit: int) -> Tuple[str, int]:
    """(the rows as a compact table, how many of them fit in `limit` characters)."""
    lines = [" | ".join(map(_cell, columns))]
    used = len(lines[0])
    for n, row in enumerate(rows):
        line = " | ".join(map(_cell, row))
        if used + len(line) + 1 > limit:
            return "\n".join(lines), n
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines), len(rows)


# ==== Tool calls ==================================================================
# One tools/call being handled: its arguments, read and checked with the errors a model can act
# on. Storing and the tools build on it.


_ARG_INT_MAX = 10**9  # the largest offset, limit or line number a tool takes
_RETENTION_DAYS_MAX = 36500  # a hundred years


# Format names models often use, taken as the format they mean.
_FORMAT_ALIASES = {"yml": "yaml", "markdown": "md", "text": "txt", "htm": "html"}


class _ToolContext:
    """What the tools work with, built once by the Server: the sandbox, the settings, the
    upstreams, the cache and catalog (None when off), list_available_tools' index, query_output's
    tables, the tools offered (by name: a tool's answer suggests only those), `notify` (a
    notification to the client) and, with --http, `links` (a cached output's download link)."""

    __slots__ = ("sandbox", "settings", "upstreams", "cache", "catalog", "tool_index", "tables",
                 "offered", "notify", "links")

    def __init__(self, sandbox: _Sandbox, settings: _Settings, upstreams: _Upstreams,
                 cache: Optional[_OutputCache], catalog: Optional[_Catalog],
                 offered: Container[str], notify: Callable[[str, dict], Any],
                 links: Optional[Callable[[_CacheEntry], str]] = None) -> None:
        self.sandbox, self.settings, self.upstreams = sandbox, settings, upstreams
        self.cache, self.catalog = cache, catalog
        self.tool_index = _ToolIndex()  # list_available_tools' query
        self.tables = _Tables()  # query_output's loaded tables
        self.offered = offered
        self.notify = notify
        self.links = links  # --http: the signed download link of a cached output


def _text_arg(key: str, v: str) -> str:
    """`v` if it is text; a ToolError for a lone surrogate, which no file, database or UTF-8
    stream can hold."""
    why = _unicode_problem(v)
    if why:
        raise _ToolError(f"Argument '{key}' {why}: send valid Unicode text.")
    return v


class _Call:
    """One tools/call being handled: the arguments, the client request, the tools' context, and
    what the Server knows of the request's client: the protocol version it speaks and its name
    (clientInfo)."""

    __slots__ = ("ctx", "req", "args", "protocol", "client")

    def __init__(self, ctx: _ToolContext, req: _Request, args: dict, protocol: str = "",
                 client: str = "") -> None:
        self.ctx, self.req, self.args = ctx, req, args
        self.protocol, self.client = protocol, client

    def string(self, key: str) -> Optional[str]:
        """A string argument, or None when the call leaves it out."""
        v = self.args.get(key)
        if v is None:
            return None
        if not isinstance(v, str):
            raise _ToolError(f"Argument '{key}' must be a non-empty string, not {_dumps(v)[:80]}.")
        return _text_arg(key, v)

    def words(self, key: str) -> Optional[str]:
        """A string of words to look for, or None: any string is valid, a lone surrogate (no
        word holds one) read as U+FFFD."""
        v = self.args.get(key)
        if v is None or not isinstance(v, str):
            return self.string(key)  # (None, or the error for a wrong type)
        return _clean_text(v)

    def required(self, key: str) -> str:
        """A string argument the tool cannot do without: present and not empty."""
        v = self.args.get(key)
        if v is None:
            raise _ToolError(f"Missing required argument '{key}' (a string).")
        if not isinstance(v, str) or not v:
            raise _ToolError(f"Argument '{key}' must be a non-empty string, not {_dumps(v)[:80]}.")
        return _text_arg(key, v)

    def obj(self, key: str) -> dict:
        v = self.args.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise _ToolError(f"Argument '{key}' must be an object of the tool's arguments, not "
                             f"{_dumps(v)[:80]}.")
        return v

    def optional_int(self, key: str, minimum: int = 0, maximum: int = _ARG_INT_MAX
                     ) -> Optional[int]:
        """An integer argument in [minimum, maximum], or None when left out: huge ones are refused
        here, before sqlite3 (OverflowError past 2**63) or a slice sees them."""
        v = self.args.get(key)
        if v is None:
            return None
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise _ToolError(f"Argument '{key}' must be an integer >= {minimum}, not "
                             f"{_dumps(v)[:80]}.")
        if v > maximum:
            raise _ToolError(f"Argument '{key}' must be an integer from {minimum} to {maximum:,}; "
                             f"it is larger.")
        return v

    def integer(self, key: str, default: int, minimum: int = 0, maximum: int = _ARG_INT_MAX) -> int:
        """optional_int with a default for the left-out argument."""
        v = self.optional_int(key, minimum, maximum)
        return default if v is None else v

    def format(self, key: str) -> Optional[str]:
        """A file format argument, its common other names (yml, markdown, text, htm) accepted."""
        v = self.string(key)
        if v is None:
            return None
        fmt = v.strip().lower().lstrip(".")
        fmt = _FORMAT_ALIASES.get(fmt, fmt)
        if fmt not in _FORMATS:
            raise _ToolError(f"Argument '{key}' must be one of {', '.join(_FORMATS)}, not "
                             f"{_dumps(v)[:80]}.")
        return fmt

    def flag(self, key: str) -> bool:
        v = self.args.get(key, False)
        if not isinstance(v, bool):
            raise _ToolError(f"Argument '{key}' must be true or false, not {_dumps(v)[:80]}.")
        return v


@contextlib.contextmanager
def _sandboxed(hint: str = "") -> Iterator[None]:
    """A path the sandbox refuses (SandboxError) as the model's error, `hint` after the reason."""
    try:
        yield
    except SandboxError as e:
        raise _ToolError(f"{e}{hint}") from None


# ==== Storing =====================================================================
# The store path: a tool result (or a cached output) written as a file in an allowed directory,
# checked against the sandbox and the quota before the tool runs, recorded in the catalog.


class _Stored:
    """A file written by a store, for the answer."""

    __slots__ = ("path", "fmt", "size", "mime", "sha256", "dims")

    def __init__(self, path: str, fmt: str, size: int, mime: str, sha256: str = "",
                 dims: Optional[Tuple[int, int]] = None) -> None:
        self.path, self.fmt, self.size, self.mime, self.sha256 = path, fmt, size, mime, sha256
        self.dims = dims  # an image's (width, height), where its header tells it

    def about(self) -> str:
        """'image/png, 704 bytes, 120 x 80 pixels': a binary file for the model (never its
        bytes)."""
        dims = f", {self.dims[0]:,} x {self.dims[1]:,} pixels" if self.dims else ""
        return f"{self.mime}, {_plural(self.size, 'byte')}{dims}"


_FORMAT_MIME = {"json": "application/json", "csv": "text/csv", "tsv": "text/tab-separated-values",
                "md": "text/markdown", "txt": "text/plain", "html": "text/html",
                "yaml": "application/yaml", "xml": "application/xml"}


def _preview(text: str, limit: int = 600) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit]
    nl = cut.rfind("\n")
    return (cut[:nl] if nl > limit // 2 else cut) + "\n[...]"


def _store_blobs(directory: str, stem: str, blobs: List[_Blob]) -> List[_Stored]:
    import hashlib  # lazy: see Imports

    out = []
    for i, b in enumerate(blobs, 1):
        name = f"{stem}-{b.kind}" + (f"-{i}" if len(blobs) > 1 else "")
        path = _write_new(directory, name, b.ext, b.data)
        # for the catalog, without reading the file back
        digest = hashlib.sha256(b.data).hexdigest()
        mime = b.mime or "application/octet-stream"
        out.append(_Stored(path, b.ext.lstrip("."), len(b.data), mime, digest,
                           _image_dims(b.data)))
    return out


# -- the catalog's hooks (_Catalog): every stored file, stored response and cached output is
# recorded. A catalog failure is logged and never fails the call: the output
# itself is already safe on disk.


def _recorded_args(call: _Call) -> Any:
    """The arguments worth keeping with an output: a meta tool's own minus server and tool name
    (which have columns), or a transparent-mode call's upstream arguments as they are."""
    if "tool_name" in call.args:
        return {k: v for k, v in call.args.items() if k not in ("server", "tool_name")}
    return call.args


def _catalog_note(call: _Call, what: str, build: Callable[[int], List[dict]]) -> None:
    catalog = call.ctx.catalog
    if catalog is None:
        return
    try:
        catalog.record_many(build(catalog.max_text))
    except Exception as e:  # sqlite3.Error, OSError, anything: never the store's failure
        _log.warning("catalog: could not record %s: %s", what, e)


def _catalog_stored(call: _Call, server: str, tool: str, kind: str, description: str,
                    data_file: Optional[_Stored], conv: Any, blobs: List[_Stored]) -> None:
    """Record a store's files: the converted data (with rows/columns for tables) and each binary
    item."""

    def opened(path: str) -> Tuple[Any, int]:  # the file just stored, read back through the sandbox
        f, _, size = call.ctx.sandbox.open_read(path)
        return f, size

    def build(max_text: int) -> List[dict]:
        out = []
        for f in ([data_file] if data_file is not None else []) + blobs:
            e = {"kind": kind, "server": server, "tool": tool, "arguments": _recorded_args(call),
                 "description": description, "path": f.path, "format": f.fmt,
                 **_file_facts(opened(f.path), f.path, f.fmt, max_text, f.sha256)}
            if f is data_file and getattr(conv, "rows", None) is not None:
                e["rows"], e["columns"] = conv.rows, len(conv.columns or [])
            out.append(e)
        return out

    _catalog_note(call, f"the files of {server}.{tool}", build)


def _catalog_cached(call: _Call, cache: _OutputCache, entry: _CacheEntry, ex: _Extracted) -> None:
    _catalog_note(call, f"the cached output {entry.token}",
                  lambda max_text: [dict(_cache_record(cache, entry, max_text, ex.data),
                                         arguments=_recorded_args(call))])


def _mib(n: float) -> str:
    return f"{n / (1024 * 1024):,.1f} MB"


def _check_quota(call: _Call, directory: str) -> None:
    """Refuse, before the tool runs, a store into an allowed directory at or over its max_total_mb.
    The result's size is unknown until the tool answers, so one store may take a directory past
    its limit; the next is refused. Nothing is ever deleted to make room."""
    root = call.ctx.sandbox.root_of(directory)
    limit = call.ctx.settings.quota_mb(root) if root is not None else None
    if root is None or limit is None:
        return
    used, complete = _dir_usage(root)
    if used >= limit * 1024 * 1024:
        raise _ToolError(f"Not stored: the allowed directory {root} holds "
                         f"{'at least ' if not complete else ''}{_mib(used)}, at or over its limit "
                         f"of {limit:g} MB (max_total_mb in Abstract's settings, key 'storage'). "
                         f"Abstract never deletes files to make room: move or delete files there, "
                         f"store in another allowed directory (storage_path), or raise the limit.")


def _store_target(call: _Call, server: str, tool: str) -> Tuple[_Dir, str]:
    """(directory, file stem) for a store, checked against the sandbox before the tool runs."""
    sandbox, path, name = call.ctx.sandbox, call.string("storage_path"), call.string("filename")
    hint = (f". Allowed directories: {', '.join(sandbox.roots)}; the file goes in the first, "
            f"or in the folder storage_path names.")
    with _sandboxed(hint):  # the name first: a refused name must not leave new folders behind
        stem = (_safe_part(f"{server}-{tool}-{_utc(compact=True)}") if name is None
                else _safe_filename(name))
        exts = tuple("." + e for e in _FORMATS + ("yml", "gz"))
        while name is not None and stem.lower().endswith(exts):  # "report.csv.gz", "report.csv."
            head = stem[:stem.rindex(".")]
            if not head.strip(". "):  # ".csv" alone is the name, not an extension
                break
            stem = _safe_filename(head)
    with _sandboxed():
        if path is None:
            organize = call.ctx.settings.get("organize")
            parts = {"flat": [], "by_server": [server], "by_server_tool": [server, tool]}[organize]
            path = os.path.join(*(_safe_part(p) for p in parts)) if parts else None
        return sandbox.make_dir(path), stem


def _gzip_chunks(chunks: Any) -> Iterator[bytes]:
    """gzip-compress a stream of chunks without holding the whole file (wbits 31: gzip framing)."""
    import zlib  # lazy: see Imports

    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    for chunk in chunks:
        out = z.compress(chunk)
        if out:
            yield out
    yield z.flush()


def _write_converted(directory: str, stem: str, conv: _Converted, compress: bool
                     ) -> Tuple[_Stored, str]:
    """Write converted data part by part (a large table is never one huge string or bytes
    object); returns the file and the start of its text, for the preview."""
    head: List[str] = []

    def encoded() -> Iterator[bytes]:
        for part in conv.parts:
            if sum(map(len, head)) < 4000:
                head.append(part[:4000])
            yield part.encode("utf-8", "surrogatepass")

    import hashlib  # lazy: see Imports

    chunks: Any = encoded()
    ext = "." + conv.fmt
    mime = _FORMAT_MIME[conv.fmt]
    if compress:
        chunks, ext, mime = _gzip_chunks(chunks), ext + ".gz", "application/gzip"
    # of the bytes as written, so the catalog need not read the file again
    digest = hashlib.sha256()
    size = [0]  # (nor the path, which may lead elsewhere by now)

    def hashed() -> Iterator[bytes]:
        for chunk in chunks:
            digest.update(chunk)
            size[0] += len(chunk)
            yield chunk

    path = _write_new(directory, stem, ext, hashed())
    return _Stored(path, conv.fmt, size[0], mime, digest.hexdigest()), "".join(head)


def _write_error(directory: str, e: OSError, written: Optional[_Stored] = None) -> _ToolError:
    """A write that failed (a full disk, a folder removed or made read-only meanwhile) as the
    model's error, naming the folder."""
    also = f" ({written.path} was written before it failed)" if written is not None else ""
    if e.errno == errno.ECANCELED:  # _Temps.stop(): nothing to fix
        return _ToolError(f"The file was not written in {directory}: Abstract is shutting "
                          f"down{also}.")
    return _ToolError(f"Could not write a file in {directory}: {e.strerror or e}{also}. Free some "
                      f"space or fix the folder, or store in another allowed directory "
                      f"(storage_path).")


# stored formats query_output reads back as records
_QUERYABLE = ("json", "csv", "tsv", "yaml", "xml")


def _data_notes(call: _Call, data_file: Optional[_Stored], data: Any) -> List[str]:
    """The shape of stored data, and for records how to ask the file with query_output."""
    if data_file is None:
        return []
    if isinstance(data, str):
        lines = data.count("\n") + (1 if data and not data.endswith("\n") else 0)
        hint = _query_hint(data_file.path, data) if "query_output" in call.ctx.offered else ""
        return [f"Shape: text, {_plural(lines, 'line')}."] + [hint] * bool(hint)
    out = [_shape(data, 600, data_file.fmt in ("csv", "tsv"))] if data is not None else []
    if data_file.fmt in _QUERYABLE and "query_output" in call.ctx.offered:
        records = data if data_file.fmt not in ("csv", "tsv") else _as_records(data)[0]
        hint = _query_hint(data_file.path, records)
        out.append(hint)
    return [line for line in out if line]


def _store_answer(call: _Call, server: str, tool: str, description: str,
                  data_file: Optional[_Stored], conv: Any, blobs: List[_Stored], preview: str,
                  about: Sequence[str] = ()) -> dict:
    """The short answer to a store: text for the model, resource_link, structuredContent."""
    files = ([data_file] if data_file else []) + blobs
    first = files[0]
    lines = [f"Stored the result of {server}.{tool} as {first.fmt.upper()}: {first.path}"]
    info: dict = {"server": server, "tool": tool, "path": first.path, "uri": _file_uri(first.path),
                  "format": first.fmt, "bytes": first.size}
    if data_file is not None and conv.rows is not None:
        info["rows"], info["columns"] = conv.rows, len(conv.columns or [])
        lines.append(f"{_plural(conv.rows, 'row')} x {_plural(len(conv.columns or []), 'column')}, "
                     f"{first.size:,} bytes.")
    elif data_file is None:  # a binary: its type, size and dimensions, never its base64
        lines.append(first.about() + ".")
    else:
        lines.append(f"{_plural(first.size, 'byte')}.")
    if data_file is not None and data_file.path.lower().endswith(".gz"):
        info["compressed"] = True
    if blobs:
        info["files"] = [{"path": b.path, "uri": _file_uri(b.path), "mimeType": b.mime,
                          "bytes": b.size} for b in blobs]
        for b, entry in zip(blobs, info["files"]):
            if b.dims:
                entry["width"], entry["height"] = b.dims
        lines.extend(f"Also stored {b.about()}: {b.path}"
                     for b in (blobs if data_file else blobs[1:]))
    notes = list(getattr(conv, "notes", None) or [])
    if notes:
        info["notes"] = notes
        lines.extend(f"Note: {n}" for n in notes)
    lines.extend(a for a in about if not a.startswith("Ask it"))
    if preview:
        lines.append("Preview:\n" + preview)
    lines.extend(a for a in about if a.startswith("Ask it"))
    result = _text_result("\n".join(lines), info)
    if call.protocol in _LINK_VERSIONS:
        desc = description or f"Result of {server}.{tool}"
        result["content"] += [{"type": "resource_link", "uri": _file_uri(f.path),
                               "name": os.path.basename(f.path),
                               "mimeType": f.mime, "size": f.size, "description": desc[:500]}
                              for f in files]
    return result


def _store_result(call: _Call, server: str, tool: str, fmt: Optional[str],
                  fetch: Callable[[], dict], input_note: str = "") -> dict:
    """Store a tool result as a file: call_tool_and_store, file input's response_format, and
    cached outputs. `fmt` None: the format that fits the content; `fetch` gives the result;
    `input_note` (" for the data of X") marks file input's response.

    1. Read the options and decide the folder and the file name before the tool runs: a bad
       argument or a refused path costs no tool call (and no tool side effect).
    2. Hold the folder open (POSIX): however long the tool runs, the file goes into the folder
       checked in step 1, never into one swapped in meanwhile.
    3. _store_in does the rest in that folder.
    """
    compress, description = call.flag("compress"), call.string("description") or ""  # 1.
    directory, stem = _store_target(call, server, tool)
    with directory:  # 2.
        return _store_in(call, server, tool, fmt, fetch, input_note, directory, stem, compress,
                         description)


def _store_in(call: _Call, server: str, tool: str, fmt: Optional[str], fetch: Callable[[], dict],
              input_note: str, directory: str, stem: str, compress: bool, description: str) -> dict:
    """_store_result's work, in the held folder:

    1. Refuse a folder at or over its quota, still before the tool runs: nothing to undo.
    2. Fetch the result; an upstream error stores nothing.
    3. Take it apart (_extract) and drop the wrapper, so a large text is held once, not twice.
    4. Convert and write the data part by part, then each binary item; a failed write names
       the folder (and the file already written, if any). Nothing half-written is left: each
       file is written whole under a temporary name first (_write_new).
    5. Record the files in the catalog (a catalog failure is logged, never the store's), and
       answer with the path, the shape, a preview and how to query the file.
    """
    _check_quota(call, directory)  # 1.
    res = fetch()  # 2.
    if res.get("isError"):
        raise _ToolError(f"'{server}' tool '{tool}' reported an error{input_note}, so nothing was "
                         f"stored: {_error_text(res)}")
    ex = _extract(res)  # 3.
    del res  # the wrapper's copy of a large text is not needed once it is parsed
    data_file, conv, preview = None, None, ""
    try:  # 4.
        if ex.has_data or not ex.blobs:
            fmt = fmt or _natural_format(ex.data)
            try:
                data = _tabular_text(ex.data, fmt)
                conv = _convert(data, fmt, description or f"{server}.{tool}")
                data_file, head = _write_converted(directory, stem, conv, compress)
            except FormatError as e:
                raise _ToolError(f"the result could not be converted to {fmt}: {e}") from None
            except RecursionError:
                raise _ToolError(f"the result is nested too deeply to write as {fmt}") from None
            preview = _preview(head)
        blobs = _store_blobs(directory, stem, ex.blobs)
    except OSError as e:
        raise _write_error(directory, e, data_file) from None
    kind = "response" if input_note else "stored"  # 5. file input's response, or a stored result
    _catalog_stored(call, server, tool, kind, description, data_file, conv, blobs)
    data = _tabular_text(ex.data, data_file.fmt) if data_file is not None else None
    about = _data_notes(call, data_file, data)
    return _store_answer(call, server, tool, description, data_file, conv, blobs, preview, about)


# ==== Tools =======================================================================
# What the model sees: each tool is one record (_Tool) made by @_tool on its handler, with its
# name, description, schema, the other names models use for its arguments and what it needs to
# be offered; _TOOLS holds them in tools/list's order, _offered picks a server's. Handlers raise
# ToolError for anything the model can fix; it becomes an isError result with that text.


class _Tool(NamedTuple):
    """One of Abstract's tools: what tools/list shows (name, description, schema), the handler,
    `aliases` (another name models use for an argument -> the argument it means) and `needs`
    (offered only when all of these are there: "meta" (--expose meta or both), "cache",
    "catalog", "sqlite3", "memory" (--memory); see _offered)."""

    name: str
    description: str
    schema: dict
    handler: Callable[[_Call], dict]
    aliases: Dict[str, str]
    needs: Tuple[str, ...]

    def listed(self) -> dict:
        """The tool as tools/list shows it."""
        return {"name": self.name, "description": self.description, "inputSchema": self.schema}

    def arguments(self, args: dict) -> dict:
        """The arguments with aliases renamed; a ToolError for a name the tool does not take, so
        a misspelt argument is never silently ignored."""
        props = self.schema.get("properties", {})
        out = {}
        for key, value in args.items():
            target = key
            if key not in props:
                target = self.aliases.get(key, "")
                if not target:
                    raise _ToolError(f"{self.name} has no argument '{key}'. Its arguments: "
                                     f"{', '.join(props) or 'none'}.")
                if target in args or target in out:
                    given = target if target in args else next(
                        k for k in args if k != key and self.aliases.get(k) == target)
                    raise _ToolError(f"Give '{given}' or '{key}' (the same argument), not both.")
            out[target] = value
        return out

    def run(self, call: _Call) -> dict:
        """The handler over the call, its arguments checked and their aliases renamed."""
        call.args = self.arguments(call.args)
        return self.handler(call)


_TOOLS: List[_Tool] = []  # every tool, in the order tools/list shows them (@_tool appends)


def _tool(name: str, description: str, schema: dict, needs: Tuple[str, ...],
          aliases: Optional[Dict[str, str]] = None
          ) -> Callable[[Callable[[_Call], dict]], Callable[[_Call], dict]]:
    """Define a tool over the handler it decorates: its record joins _TOOLS."""
    def define(handler: Callable[[_Call], dict]) -> Callable[[_Call], dict]:
        _TOOLS.append(_Tool(name, description, schema, handler, dict(aliases or {}), needs))
        return handler
    return define


# Names models often use for the tools' arguments, taken as the argument they mean (never
# silently dropped); each tool lists those of its own arguments (docs/reference/tools.md names
# them). call_tool_with_file_content takes `path` as file_path, its input, and no `format`:
# that could mean output_format or response_format.
_ALIASES_SERVER = {"server_name": "server"}
_ALIASES_TOOL = {"tool": "tool_name", "name": "tool_name", **_ALIASES_SERVER}
_ALIASES_CALL = {"arguments": "tool_args", "args": "tool_args", "params": "tool_args",
                 **_ALIASES_TOOL}
_ALIASES_FORMAT = {"format": "file_format"}
_ALIASES_PATH = {"path": "file_path"}
_ALIASES_DIR = {"output_path": "storage_path", "directory": "storage_path"}


def _schema(props: dict, required: Tuple[str, ...] = ()) -> dict:
    s: dict = {"type": "object", "properties": props}
    if required:
        s["required"] = list(required)
    return s


_P_SERVER = {"type": "string", "description": "Upstream server name, as list_available_tools shows "
                                              "it."}
_P_TOOL = {"type": "string", "description": "Tool name on that server."}
_P_ARGS = {"type": "object", "description": "Arguments for the upstream tool, as its inputSchema "
                                            "describes.",
           "additionalProperties": True}


_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z0-9(`\"'\[])")


def _first_sentence(text: str, limit: int = 150) -> str:
    """A description's first sentence on one line, at most about `limit` characters."""
    text = " ".join(text[:limit * 8].split())
    m = _SENTENCE_END.search(text)
    if m is not None:
        text = text[:m.end()]
    if len(text) > limit:
        text = text[:_word_cut(text, limit - 1)].rstrip(",;:- ") + "…"
    return text


def _tool_summary(desc: str, limit: int = 150) -> str:
    """A tool's one-line summary: its first sentence, plus the sentence that says it is
    deprecated when that comes later ("DEPRECATED: Use read_text_file instead.")."""
    first = _first_sentence(desc, limit)
    m = _DEPRECATED.search(desc)
    if m is None or _DEPRECATED.search(first):
        return first
    dot = desc.rfind(". ", 0, m.start())
    start = max(dot + 2 if dot >= 0 else 0, desc.rfind("\n", 0, m.start()) + 1)
    warn = _first_sentence(desc[start:], limit // 2)
    return f"{_first_sentence(desc, limit - len(warn) - 1)} {warn}"


@_tool(
    "list_available_tools",
    "List the tools of the upstream MCP servers Abstract can reach: server, tool and the first "
    "sentence of its description. Start here to find a tool; with query, only the best matches "
    "for what you want to do. detailed=true adds full descriptions and each inputSchema (costs "
    "more context); filter_by_server limits the list to one server.",
    _schema({"query": {"type": "string", "description": "What you want to do, in words: the tools "
                                                        "that fit "
                       "best come first (searches names, descriptions and parameters)."},
             "detailed": {"type": "boolean", "description": "Include each tool's inputSchema.",
                          "default": False},
             "filter_by_server": {"type": "string", "description": "Only this server's tools."},
             "limit": {"type": "integer", "minimum": 1,
                       "description": "At most this many tools (with query: "
                       "default 10)."}}),
    needs=("meta",))
def _tool_list_available_tools(call: _Call) -> dict:
    """Every upstream's tools (or one server's, filter_by_server), asked of all at once; with
    `query`, ranked by the tool index. A server that fails is listed with its error (and when it
    is tried again) rather than failing the listing; one still starting after _LIST_WAIT_S (one
    server asked for by name: the call's own time limit) is named as such, its start going on.
    The compact form gives each tool's first sentence only."""
    ups = call.ctx.upstreams
    detailed, only = call.flag("detailed"), call.string("filter_by_server")
    query = call.words("query")
    limit = call.optional_int("limit", minimum=1)
    names = ups.names()
    if only is not None:
        ups.get(only)  # unknown server: a ToolError naming the ones that exist
        names = [only]
    elif ups.config.error:
        raise _ToolError(f"No upstream servers are available: {ups.config.error}. Fix it and "
                         f"restart Abstract.")
    lists: Dict[str, List[dict]] = {}
    failed: List[dict] = []
    # (one server asked for by name waits as a call does)
    wait = None if only is not None else _LIST_WAIT_S
    for name, got in ups.each(lambda up: up.tools(_WAIT_MAX_S if wait else None), names,
                              wait).items():
        if isinstance(got, _StillStarting):
            failed.append({"server": name, "starting": True, "since_s": round(got.since),
                           "error": got.message})
        elif isinstance(got, Exception):
            failed.append({"server": name,
                           "error": _clean(getattr(got, "message", None) or str(got))})
            retry = ups.get(name).retry_in()
            if retry:
                failed[-1]["retry_in_s"] = math.ceil(retry)
        else:
            lists[name] = got
    lists = {n: lists[n] for n in names if n in lists}  # config order, whichever answered first
    if query is not None:
        found = call.ctx.tool_index.search(lists, query, limit or 10)
        entries = [_tool_entry(server, t, detailed, score) for score, server, t in found]
    else:
        entries = [_tool_entry(server, t, detailed) for server, ts in lists.items() for t in ts]
    total = len(entries) if query is not None else sum(map(len, lists.values()))
    entries = entries[:limit]
    out: dict = {"tools": entries, "total_tools": total}
    if query is not None:
        out["query"] = query
    starting = [f for f in failed if f.get("starting")]
    if len(starting) < len(failed):
        out["failed_servers"] = [f for f in failed if not f.get("starting")]
    if starting:
        out["starting_servers"] = [{"server": f["server"], "since_s": f["since_s"]}
                                   for f in starting]
    if detailed:
        return _text_result(_dumps(out), out)
    return _text_result(_listing_text(entries, failed, query, total), out)


def _tool_entry(server: str, tool: dict, detailed: bool, score: Optional[float] = None) -> dict:
    """One tool in a listing: compact (the first sentence), or whole with its inputSchema."""
    desc = tool.get("description")
    desc = desc if isinstance(desc, str) else ""  # an upstream may send anything
    e: dict = {"server": server, "tool": tool["name"], "description": desc if detailed
               else _tool_summary(desc)}
    if score is not None:
        e["score"] = score
    if detailed:
        e["inputSchema"] = tool.get("inputSchema", {})
    return e


def _listing_text(entries: List[dict], failed: List[dict], query: Optional[str] = None,
                  total: int = 0) -> str:
    """The compact listing for the model: a line per tool under its server (search hits: best
    first, each with its server and score), then the servers that failed; control characters
    escaped (structuredContent keeps the names as the servers gave them)."""
    how = ("Call one with call_tool (server, tool_name, tool_args); list_tool_details shows its "
           "arguments.")
    if query is None:
        shown = (f"The first {len(entries)} of {total} tools" if total > len(entries)
                 else _plural(total, "tool"))
        lines = [f"{shown}. {how}"]
    elif entries:
        lines = [f"{_plural(len(entries), 'tool')} for {_dumps(query)[:200]}, best first. {how}"]
    else:
        lines = [f"No tool matches {_dumps(query)[:200]}. Try other words, or list_available_tools "
                 f"without query for every tool."]
    server = None
    for e in entries:
        line = f"{e['tool']}: {e['description']}" if e["description"] else e["tool"]
        if query is not None:
            lines.append(f"[{e['server']}] {line} (score {e['score']:g})")
            continue
        if e["server"] != server:
            server = e["server"]
            lines.append(f"[{server}]")
        lines.append(line)
    for f in failed:
        if f.get("starting"):
            lines.append(f"[{f['server']}] {f['error']}")
            continue
        again = f.get("retry_in_s")
        after = (f" It is started again on a call made {again} s from now or later."
                 if again and "not restarted for another" not in f["error"] else "")
        lines.append(f"[{f['server']}] not available: {f['error']}{after}")
    return _escape_controls("\n".join(lines))  # (the servers' names and words: ESC, BEL, ...)


def _find_tool(up: _Upstream, tool: str) -> dict:
    """The upstream's definition of `tool`; a ToolError naming the tools that exist."""
    try:
        tools = up.tools()
    except RpcError as e:  # cannot start, crashed, backing off: the model gets the reason
        raise _ToolError(e.message) from None
    for t in tools:
        if t["name"] == tool:
            return t
    raise _ToolError(f"Server '{up.name}' has no tool '{tool}'. Its tools: "
                     f"{_names_list([t['name'] for t in tools])}.")


@_tool(
    "list_tool_details",
    "Get one upstream tool's complete definition (description, inputSchema, outputSchema, "
    "annotations) before calling it.",
    _schema({"server": _P_SERVER, "tool_name": _P_TOOL}, ("server", "tool_name")),
    needs=("meta",), aliases=_ALIASES_TOOL)
def _tool_list_tool_details(call: _Call) -> dict:
    server, tool = call.required("server"), call.required("tool_name")
    up = call.ctx.upstreams.get(server)
    d = _find_tool(up, tool)
    out = {"server": server, "tool": d}
    return _text_result(_dumps(out), out)


def _progress_relay(call: _Call) -> Optional[Callable[[dict], None]]:
    """A relay of upstream progress to the client under the client's own token, if it sent one."""
    token = call.req.meta.get("progressToken")
    if not isinstance(token, (str, int)) or isinstance(token, bool):
        return None
    notify = call.ctx.notify

    def relay(p: dict) -> None:
        fwd = {k: v for k, v in p.items() if k != "_meta"}
        fwd["progressToken"] = token
        notify("notifications/progress", fwd)

    return relay


def _upstream_call(call: _Call, server: str, tool: str, args: dict,
                   longs: Optional[list] = None) -> dict:
    """Call an upstream tool for the client: progress relayed, cancellation forwarded.

    Returns the upstream's result, or raises ToolError with a message that names the server and
    tool (a JSON-RPC error from the upstream, a timeout, a crash). `longs`: as for
    Connection.request.
    """
    up = call.ctx.upstreams.get(server)
    _find_tool(up, tool)
    try:
        return _relayed_call(call, up, tool, args, longs=longs)
    except RpcError as e:
        raise _ToolError(f"'{server}' tool '{tool}' answered with JSON-RPC error {e.code}: "
                         f"{e.message}"
                         + (f" (data: {_dumps(e.data)[:500]})" if e.data is not None
                            else "")) from None


def _relayed_call(call: _Call, up: _Upstream, tool: str, args: dict, task: Any = None,
                  longs: Optional[list] = None) -> dict:
    """tools/call upstream with progress relayed and cancellation forwarded; the result with the
    era envelope removed (it is ours to set). Abstract's own failures (timeout, crash) become
    ToolError; the upstream's JSON-RPC errors are raised as RpcError for the caller to shape.
    `task`: a transparent-mode client's task request, passed on (see _Upstream.call_tool)."""
    try:
        res = up.call_tool(tool, args, call.req, _progress_relay(call), task, longs)
    except UpstreamError as e:
        raise _ToolError(e.message) from None
    if isinstance(res, dict) and res.get("resultType") == "input_required":
        # (a 2026-07-28 upstream's are answered in _Upstream.call_tool; this one spoke the
        # handshake era, where a server asks with a request instead)
        raise _ToolError(f"'{up.name}' tool '{tool}' answered with a 2026-07-28 input_required "
                         f"result in the {up.protocol_version} era it negotiated, where that "
                         f"result does not exist; Abstract cannot relay it, and the call did not "
                         "complete.")
    if not isinstance(res, dict) or not isinstance(res.get("content", []), list):
        _decode_long(longs or ())
        raise _ToolError(f"'{up.name}' tool '{tool}' sent a malformed result: {_dumps(res)[:300]}")
    for k in ("resultType", "ttlMs", "cacheScope"):
        res.pop(k, None)
    return res


def _cached_answer(entry: _CacheEntry, ex: _Extracted, text: str, preview_chars: int, link: str,
                   can_store: bool, can_query: bool = False) -> str:
    """What the model reads instead of a large result: its size and shape, a preview, and how
    to read on, ask it in SQL, or store it."""
    what = "JSON" if entry.ctype == "application/json" else "text"
    size = f"{entry.chars:,} characters of {what}"
    if what == "text" and ex.has_data:
        n_lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        size += f", {_plural(n_lines, 'line')}"
    if ex.blobs:
        size += (f" and {_plural(len(ex.blobs), 'binary item')} of "
                 f"{sum(len(b.data) for b in ex.blobs):,} bytes")
    if not ex.has_data and ex.blobs:
        size, preview_chars = f"{sum(len(b.data) for b in ex.blobs):,} bytes of binary items", 0
    lines = [f"The result of {entry.server}.{entry.tool} is large ({size}), so it was "
             f"cached instead of shown. Token: {entry.token} (expires {_utc(entry.expires)})."]
    shape = (_shape(ex.data, preview_chars) if entry.ctype == "application/json" and preview_chars
             else "")
    if shape:
        lines.append(shape)
        if not shape.startswith("Shape: a list"):  # (a list's shape is one short line)
            preview_chars = max(preview_chars - len(shape), 0)
    recs = (_records_preview(ex.data, preview_chars) if entry.ctype == "application/json"
            and preview_chars else None)
    if recs is not None:
        lines.append(f"Preview (first {recs[1]} of {recs[2]} records):\n{recs[0]}")
    elif preview_chars:
        lines.append(f"Preview:\n{text[:preview_chars]}" + (" [...]" if len(text) > preview_chars
                                                            else ""))
    for b, path in zip(ex.blobs, entry.files or []):
        lines.append(f"{b.mime or b.kind} item ({len(b.data):,} bytes) cached as {path}")
    lines.append(_more_hint(entry, ex.data, recs, min(preview_chars, len(text))))
    if isinstance(ex.data, str):
        lines.append(f'Find lines: retrieve_cached_output {{"token": "{entry.token}", "pattern": '
                     f'"error"}} gives the lines that contain it (case ignored), numbered, '
                     f'with 2 lines around each.')
    hint = _query_hint(entry.token, ex.data) if can_query and ex.has_data and not ex.blobs else ""
    if hint:
        lines.append(hint)
    if can_store:
        fmt = _suggested_format(ex.data) if ex.has_data else "json"
        lines.append(f'Save it as a file: call_tool_and_store {{"cache_token": "{entry.token}", '
                     f'"file_format": "{fmt}"}}.')
    if link:
        lines.append(f"Download (until it expires): {link}")
    return "\n".join(lines)


def _more_hint(entry: _CacheEntry, data: Any, recs: Optional[Tuple[str, int, int]],
               shown: int) -> str:
    """How to read on: the next record by JSON Pointer after a records preview, else by offset."""
    start = 'More: retrieve_cached_output {"token": "%s", ' % entry.token
    if recs is not None:
        return start + ('"record_offset": %d, "record_count": 20} reads the next records; '
                        "offset/length or start_line/end_line page through the whole text."
                        % recs[1])
    extra = (', or a "pointer" such as "/0" into the JSON' if entry.ctype == "application/json"
             else "")
    return start + '"offset": %d} (or start_line/end_line%s).' % (shown, extra)


def _maybe_cache(call: _Call, server: str, tool: str, res: dict, structured: bool = True,
                 longs: Sequence[tuple] = ()) -> dict:
    """The result itself when small; else cache it and answer with a preview and a token.

    1. The policy is the tool's, then the server's, then the global one, then the client's
       default (_Settings.cache_policy): clients differ in how much one answer may hold.
    2. The size is measured only up to min_size, so a small result costs no full count.
    3. A large result is written into the cache and recorded in the catalog; when the cache
       cannot take it, the model is told why and what to do, never handed the whole result.
    4. The answer: a preview, the shape and the token (`structured`: also as
       structuredContent, which transparent mode leaves out: the tool's own schema rules it).
    5. `longs`: the long strings of the result left undecoded (Connection.request). A result
       relayed whole keeps them so: the writer sends them as they came (_frame). The cache
       reads one long text of records in pieces (_OutputCache.put); any other is decoded.
    """
    cache = call.ctx.cache
    policy = call.ctx.settings.cache_policy(server, tool, call.client)
    size = _result_size(res, policy["min_size"]) if cache is not None and policy["enabled"] else 0
    if cache is None or not policy["enabled"] or size <= policy["min_size"]:
        return res
    if longs and _records_text(res, _VIEW_INDENT_MAX) is None:
        _decode_long(longs)
        longs = ()
    try:
        entry, ex, text = cache.put(res, server, tool, int(policy["preview_chars"]), longs)
    except (OSError, ConfigError) as e:  # a full disk, a cache directory removed and not made again
        return _uncached_answer(call, cache, server, tool, size, e)
    _catalog_cached(call, cache, entry, ex)
    link = call.ctx.links(entry) if call.ctx.links is not None else ""
    info = None
    if structured:
        info = {"cached": True, "token": entry.token, "total_chars": entry.chars,
                "content_type": entry.ctype, "expires_at": _utc(entry.expires),
                "uri": _CACHE_URI + entry.token}
        if link:
            info["retrieve_url"] = link
    can_store = "call_tool_and_store" in call.ctx.offered
    can_query = "query_output" in call.ctx.offered
    out = _text_result(_cached_answer(entry, ex, text, int(policy["preview_chars"]), link,
                                      can_store, can_query), info)
    if res.get("isError"):
        out["isError"] = True
    return out


def _uncached_answer(call: _Call, cache: _OutputCache, server: str, tool: str, size: int,
                     e: Exception) -> dict:
    """The isError answer for a large result the cache could not take: why, and what to do."""
    where = cache.dir
    why = (f"writing in {where} failed ({e.strerror or e})" if isinstance(e, OSError)
           else f"the cache directory {where} cannot be used ({e})")
    _log.warning("could not cache the result of %s.%s: %s", server, tool, why)
    text = (f"The result of {server}.{tool} is large ({size:,} characters), too large to show "
            f"here, and it could not be cached: {why}.")
    if "call_tool_and_store" in call.ctx.offered:
        text += " Call it with call_tool_and_store instead, to save the result to a file."
    else:
        text += (" Ask for less (narrower arguments), or ask the user to fix Abstract's cache "
                 "directory.")
    return _text_result(text, is_error=True)


@_tool(
    "call_tool",
    "Call an upstream tool and get its result here, in the conversation. Use it for small results "
    "(status checks, short answers), which come back as the tool gave them. A large result comes "
    "back as a preview and a token instead: read more with retrieve_cached_output. For results "
    "you know are large (lists, tables, documents, exports) use call_tool_and_store when it is "
    "available, so the data goes to a file.",
    _schema({"server": _P_SERVER, "tool_name": _P_TOOL, "tool_args": _P_ARGS},
            ("server", "tool_name")),
    needs=("meta",), aliases=_ALIASES_CALL)
def _tool_call_tool(call: _Call) -> dict:
    server, tool = call.required("server"), call.required("tool_name")
    longs: list = []  # the long strings of the answer, left undecoded (Connection.request)
    res = _upstream_call(call, server, tool, call.obj("tool_args"), longs)
    return _maybe_cache(call, server, tool, res, longs=longs)


@_tool(
    "list_allowed_directories",
    "List the directories Abstract may store files in and read files from; the first is the "
    "default.",
    _schema({}),
    needs=("meta",))
def _tool_list_allowed_directories(call: _Call) -> dict:
    out = call.ctx.sandbox.describe()
    return _text_result(_dumps(out), out)


def _cached_source(call: _Call) -> Optional[Tuple[_OutputCache, _CacheEntry]]:
    """(the cache, the cached output) named by cache_token, if the call gives one."""
    token = call.string("cache_token")
    if token is None:
        return None
    cache = call.ctx.cache
    if cache is None:
        raise _ToolError("cache_token needs the output cache, which is disabled in Abstract's "
                         "settings.")
    return cache, cache.get(token)


@_tool(
    "call_tool_and_store",
    "Call an upstream tool and save its result to a file in an allowed directory instead of the "
    "conversation; you get back the path, size, row/column counts and a short preview. Use it for "
    "large results. Pick file_format from what you know of the data: csv or tsv for lists of "
    "records, md for prose; without it the content decides (json for JSON data, text as it is in "
    ".txt or .md). Also yaml, xml, html.",
    _schema({"server": _P_SERVER, "tool_name": _P_TOOL, "tool_args": _P_ARGS,
             "file_format": {"type": "string", "enum": list(_FORMATS),
                             "description": "Format to convert the result to. Default: by "
                                            "content."},
             "description": {"type": "string", "description": "What the result is; kept with the "
                                                              "file."},
             "storage_path": {"type": "string", "description": "Directory to store in: absolute "
                                                               "inside an allowed "
                              "directory, or relative to the first one. Default: the first "
                              "allowed directory."},
             "filename": {"type": "string", "description": "File name; the extension comes from "
                                                           "file_format. "
                          "Default <server>-<tool>-<UTC time>. An existing file is never "
                          "overwritten: -1, -2... is added."},
             "compress": {"type": "boolean", "default": False,
                          "description": "Write gzip-compressed (.gz)."},
             "cache_token": {"type": "string", "description": "Store an output call_tool cached "
                                                              "(its token) "
                             "instead of calling a tool; server and tool_name are then not "
                             "needed."}}),
    needs=("meta",), aliases={**_ALIASES_CALL, **_ALIASES_FORMAT, **_ALIASES_DIR})
def _tool_call_tool_and_store(call: _Call) -> dict:
    fmt = call.format("file_format")
    cached = _cached_source(call)
    if cached is not None:  # a result cached earlier: stored without calling the tool again
        cache, entry = cached
        return _store_result(call, entry.server, entry.tool, fmt, lambda: cache.result(entry))
    server, tool = call.required("server"), call.required("tool_name")
    args = call.obj("tool_args")
    return _store_result(call, server, tool, fmt, lambda: _upstream_call(call, server, tool, args))


_INPUT_FORMATS = {".json": "json", ".csv": "csv", ".tsv": "tsv", ".yaml": "yaml", ".yml": "yaml",
                  ".xml": "xml", ".txt": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def _read_limited(f: Any, path: str, size: int, limit: int,
                  setting: str = "max_input_file_mb") -> bytes:
    """The bytes of the open file `f` (gunzipped for .gz), refusing more than `limit` bytes
    while reading, so a small archive cannot expand into gigabytes."""
    import gzip  # lazy: see Imports
    import zlib  # lazy: see Imports

    packed = path.lower().endswith(".gz")
    try:
        with (gzip.GzipFile(fileobj=f, mode="rb") if packed else f) as src:
            data = src.read(limit + 1)
    except (OSError, EOFError, zlib.error) as e:  # zlib.error (a corrupt stream) is no OSError
        what = "is not a valid gzip file" if packed else "could not be read"
        raise _ToolError(f"{path} {what}: {e}") from None
    if len(data) > limit:
        what = (f"({size:,} bytes) decompresses to more than {limit:,} bytes" if packed
                else f"is larger than {limit:,} bytes")
        raise _ToolError(f"{path} {what}; the input limit is {limit:,} bytes ({setting} in "
                         f"Abstract's settings).")
    return data


def _open_input(call: _Call, file_path: str, key: str = "file_path") -> Tuple[Any, str, int]:
    """(binary file, real path, size) of an input file inside the sandbox."""
    where = f"Allowed directories: {', '.join(call.ctx.sandbox.roots)}"
    try:
        with _sandboxed():
            return call.ctx.sandbox.open_read(file_path)
    except FileNotFoundError:
        raise _ToolError(f"{key} {file_path!r} does not exist. {where}; list_allowed_directories "
                         f"shows them.") from None
    except PermissionError:
        raise _ToolError(f"{key} {file_path!r} is not readable (permission denied)") from None


def _load_input(call: _Call, file_path: str, parse: bool = True) -> Tuple[Any, str, str]:
    """(data, format, real path) of an input file inside the sandbox (its text when not
    `parse`)."""
    f, path, size = _open_input(call, file_path)
    limit = float(call.ctx.settings.get("max_input_file_mb"))
    return _read_input(f, path, size, limit, "max_input_file_mb", parse) + (path,)


def _read_input(f: Any, path: str, size: int, limit_mb: float, setting: str,
                parse: bool = True) -> Tuple[Any, str]:
    """(data, format) of the open input file `f`, at most `limit_mb` megabytes (the setting
    named so), parsed by its extension (.gz unpacked first), or its text as it is when not
    `parse`; `f` is closed."""
    limit = int(limit_mb * 1024 * 1024)
    if size > limit:
        f.close()
        raise _ToolError(f"{path} is {size:,} bytes; the input limit is {limit:,} bytes ({setting} "
                         f"in Abstract's settings).")
    raw = _read_limited(f, path, size, limit, setting)
    base = path[:-3] if path.lower().endswith(".gz") else path
    fmt = _INPUT_FORMATS.get(os.path.splitext(base)[1].lower(), "txt")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _ToolError(f"{path} is not valid UTF-8: byte offset {e.start} "
                         f"(0x{raw[e.start]:02x}).") from None
    text = text[1:] if text.startswith("\ufeff") else text
    if not parse:
        return text, fmt
    try:
        return _parse_text(text, fmt), fmt
    except FormatError as e:
        raise _ToolError(f"{path} could not be read as {fmt.upper()}: {e}") from None
    # a reader without its own guard: still the model's error, not an internal one
    except RecursionError:
        raise _ToolError(f"{path} could not be read as {fmt.upper()}: nested too deeply") from None


_JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
               "array": (list,), "object": (dict,), "null": (type(None),)}


def _schema_kinds(tool: dict, key: str) -> List[str]:
    """The JSON types the tool's inputSchema declares for the argument `key` ([] if none)."""
    schema = tool.get("inputSchema")
    props = schema.get("properties") if isinstance(schema, dict) else None
    prop = props.get(key) if isinstance(props, dict) else None
    want = prop.get("type") if isinstance(prop, dict) else None
    if isinstance(want, list):
        return [k for k in want if isinstance(k, str)]
    return [want] if isinstance(want, str) else []


def _check_args(tool: dict, args: dict, source: str = "the file",
                hint: Tuple[str, str] = ("", "")) -> None:
    """Refuse arguments that miss a required property or have the wrong top-level type; the
    data comes from `source`, and a mismatch of the argument hint[0] adds hint[1]."""
    schema = tool.get("inputSchema")  # an upstream's: anything at all
    required = schema.get("required") if isinstance(schema, dict) else None
    missing = [k for k in required if isinstance(k, str) and k not in args] if isinstance(
        required, list) else []
    if missing:
        raise _ToolError(f"tool '{tool['name']}' requires {', '.join(missing)}, which neither "
                         f"{source} nor tool_args provides (use data_key to put {source}'s data "
                         f"under one argument).")
    for key, value in args.items():
        kinds = _schema_kinds(tool, key)
        types = tuple(t for k in kinds for t in _JSON_TYPES.get(k, ()))
        bad_bool = isinstance(value, bool) and bool not in types
        # JSON Schema counts 2.0 as an integer; CSV and YAML readers may well give one.
        whole = "integer" in kinds and isinstance(value, float) and value.is_integer()
        if types and (not isinstance(value, types) or bad_bool) and not whole:
            raise _ToolError(f"argument '{key}' of tool '{tool['name']}' must be "
                             f"{' or '.join(kinds)}, but {source} gives {type(value).__name__}"
                             + (f"; {hint[1]}" if key == hint[0] and hint[1] else "") + ".")


def _file_args(call: _Call, data: Any, path: str) -> dict:
    key, extra = call.string("data_key"), call.obj("tool_args")
    if key is None:
        if extra:
            raise _ToolError("tool_args needs data_key: say under which argument the file's data "
                             "goes, and tool_args supplies the others. Without data_key the file's "
                             "data is the whole arguments object.")
        if not isinstance(data, dict):
            raise _ToolError(f"{path} holds a {type(data).__name__}, not an object, so it cannot "
                             f"be the whole arguments; set data_key to the argument that should "
                             f"receive it.")
        return data
    if key in extra:
        raise _ToolError(f"tool_args already has '{key}', the data_key; rename one of them "
                         f"(nothing is overwritten).")
    return {**extra, key: data}


def _input_data(call: _Call, as_text: bool) -> Tuple[Any, str, str]:
    """(data, where it came from, what the answer calls that) for file input: a file in the
    sandbox, or a cached output; parsed, or its text as it is when `as_text` (a cached
    output's text: its text items, else its text view)."""
    cached = _cached_source(call)
    if cached is not None:
        if call.args.get("file_path") is not None:
            raise _ToolError("Give file_path or cache_token, not both.")
        cache, entry = cached
        where = f"cached output {entry.token}"
        res = cache.result(entry)
        if not as_text:
            return _extract(res).data, where, "the cached output"
        texts = _result_texts(res)
        return ("\n".join(texts) if texts else cache.text(entry)), where, "the cached output"
    data, _, path = _load_input(call, call.required("file_path"), parse=not as_text)
    return data, path, "the file"


def _data_as(call: _Call, spec: dict) -> bool:
    """Whether the data goes as text: data_as says, else the data_key argument's declared type
    (a string takes the text as it is)."""
    how, key = call.string("data_as"), call.string("data_key")
    if how not in (None, "text", "parsed"):
        raise _ToolError(f"data_as must be text or parsed, not {_dumps(how)[:40]}.")
    if how == "text" and key is None:
        raise _ToolError('data_as "text" needs data_key: the argument that receives the text.')
    if how is not None:
        return how == "text"
    return key is not None and {k for k in _schema_kinds(spec, key) if k != "null"} == {"string"}


@_tool(
    "call_tool_with_file_content",
    "Call an upstream tool with a file's data as its arguments, without reading the file into the "
    "conversation (for bulk inserts, uploads, or feeding a stored result into another tool). The "
    "file must be in an allowed directory; .json, .csv, .tsv, .yaml/.yml, .xml and .txt are "
    "parsed (also .gz). Without data_key the file must hold an object that is the whole "
    "arguments; with data_key the data goes under that argument, next to tool_args. An argument "
    "the tool declares a string gets the file's text as it is (data_as decides otherwise).",
    _schema({"server": _P_SERVER, "tool_name": _P_TOOL,
             "file_path": {"type": "string", "description": "The input file: absolute inside an "
                                                            "allowed directory, "
                           "or relative to the first one."},
             "data_key": {"type": "string", "description": "Argument that receives the file's "
                                                           "data."},
             "data_as": {"type": "string", "enum": ["text", "parsed"],
                         "description": "text: the file's text as it is (decompressed); "
                                        "parsed: its data, read by its extension. Default: "
                                        "text when the tool declares data_key a string."},
             "tool_args": {**_P_ARGS, "description": "Other arguments (needs data_key)."},
             "output_format": {"type": "string", "enum": ["json", "string"], "default": "json",
                               "description": "json: the whole upstream result as JSON; string: "
                                              "its text only."},
             "response_format": {"type": "string", "enum": list(_FORMATS),
                                 "description": "Store the response as "
                                 "call_tool_and_store would, in this format, instead of returning "
                                 "it."},
             "description": {"type": "string", "description": "What the stored response is."},
             "storage_path": {"type": "string", "description": "Where to store the response (with "
                                                               "response_format)."},
             "filename": {"type": "string", "description": "File name for the stored response; "
                                                           "the extension "
                          "comes from response_format."},
             "compress": {"type": "boolean", "default": False,
                          "description": "Store the response gzip-compressed (.gz), with "
                                         "response_format."},
             "cache_token": {"type": "string", "description": "Use an output call_tool cached "
                                                              "(its token) as "
                             "the data instead of a file."}},
            ("server", "tool_name")),
    needs=("meta",), aliases={**_ALIASES_CALL, **_ALIASES_PATH, **_ALIASES_DIR})
def _tool_call_tool_with_file_content(call: _Call) -> dict:
    """An upstream tool called with a file's data (or a cached output's) as one argument.

    1. The data is read through the sandbox, bounded, and parsed by its format (_input_data),
       so the model never has to carry it through its context.
    2. It goes under data_key in the arguments, checked against the tool's inputSchema before
       the call: a mismatch is reported without calling.
    3. With response_format the result is stored like call_tool_and_store's; else a large
       answer is cached like call_tool's, and a small one comes back as JSON or as text.
    """
    server, tool = call.required("server"), call.required("tool_name")
    out_fmt = call.string("output_format") or "json"
    if out_fmt not in ("json", "string"):
        raise _ToolError(f"output_format must be json or string, not {out_fmt!r}.")
    spec = _find_tool(call.ctx.upstreams.get(server), tool)
    as_text = _data_as(call, spec)
    data, source, what = _input_data(call, as_text)
    args = _file_args(call, data, source)
    key = call.string("data_key") or ""
    kinds = _schema_kinds(spec, key) if key else []
    hint = ('data_as "parsed" sends its data parsed' if as_text and set(kinds) - {"string"} else
            f'data_as "text" sends {what}\'s text as it is' if "string" in kinds else "")
    _check_args(spec, args, what, (key, hint))
    response_format = call.format("response_format")
    if response_format is not None:
        return _store_result(call, server, tool, response_format,
                             lambda: _upstream_call(call, server, tool, args),
                             f" for the data of {source}")
    res = _upstream_call(call, server, tool, args)
    if res.get("isError"):
        raise _ToolError(f"'{server}' tool '{tool}' reported an error for the data of {source}: "
                         f"{_error_text(res)}")
    cached = _maybe_cache(call, server, tool, res)
    if cached is not res:  # a large answer gets the same protection as call_tool's
        return cached
    if out_fmt == "string":
        return _text_result(_text_view(_extract(res).data))
    return _text_result(json.dumps(res, indent=2, ensure_ascii=False))


# -- retrieve_cached_output: windows on a cached output


def _skip_lines(text: str, count: int, step: int = 65536) -> int:
    """The offset of the start of the line after `count` newlines (len(text) when there are fewer):
    whole blocks are skipped by counting their newlines, and only the last is searched."""
    pos = 0
    while count > 0 and pos < len(text):
        n = text.count("\n", pos, pos + step)
        if n < count:
            count, pos = count - n, pos + step
            continue
        for _ in range(count):
            pos = text.find("\n", pos) + 1
        return pos
    return min(pos, len(text))


def _window(text: str, call: _Call, limit: int) -> Tuple[str, dict]:
    """A bounded window of `text` by line range or by character offset, and where it stands."""
    first = call.optional_int("start_line", minimum=1)
    last = call.optional_int("end_line", minimum=1)
    if first is not None or last is not None:
        if first is not None and last is not None and last < first:
            raise _ToolError(f"end_line ({last}) is before start_line ({first}).")
        # Lines end at "\n" (a "\r\n" stays in its line). No list of lines: str.count and str.find
        # walk the text in C, so a window of a large text costs no copy of it.
        total = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        first = first or 1
        last = min(last or total, total)
        out: List[str] = []
        used, n, cut, pos = 0, first, None, _skip_lines(text, first - 1)
        while n <= last:
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end + 1
            if out and used + (end - pos) > limit:
                break
            # a line longer than the window is cut; offset reads it all
            out.append(text[pos:min(end, pos + limit)])
            if end - pos > limit:
                cut = n
            used += len(out[-1])
            n, pos = n + 1, end
        more = n <= total
        where = {"start_line": first, "end_line": n - 1, "total_lines": total, "next_line": n
                 if more else None}
        if cut is not None:
            where["truncated_line"] = cut
        return "".join(out), where
    offset = call.integer("offset", 0)
    length = min(call.integer("length", limit, minimum=1), limit)
    chunk = text[offset:offset + length]
    end = offset + len(chunk)
    return chunk, {"offset": offset, "length": len(chunk), "total_chars": len(text),
                   "next_offset": end if end < len(text) else None}


_GREP_LINE = 2000  # characters of a line a pattern search shows (the rest: by start_line)
_GREP_PATTERN = 1000  # longest pattern


def _grep_block(text: str, rx: Any, start: int, n: int, lo: int, hi: int
                ) -> Tuple[List[str], List[int], int]:
    """Lines lo..hi around line `n` (which starts at offset `start`), numbered as grep -n does
    ("12: " a matching line, "11- " one around it), the numbers of those that match, and the
    offset after line hi."""
    pos = start
    for _ in range(n - lo):  # back to line lo
        pos = text.rfind("\n", 0, pos - 1) + 1
    out, hits = [], []
    for k in range(lo, hi + 1):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        line = text[pos:end].rstrip("\r")
        cut = line[:_GREP_LINE] + (" [...]" if len(line) > _GREP_LINE else "")
        hit = rx.search(line) is not None
        out.append(f"{k}{':' if hit else '-'} {cut}")
        hits.extend([k] * hit)
        pos = end + 1
    return out, hits, pos


def _grep_fit(lines: List[str], room: int, first: bool) -> int:
    """How many of `lines` (from the first) fit in `room` characters, a newline after each; at
    least one when they are the `first` shown (it is cut to the window)."""
    take = 0
    for line in lines:
        room -= len(line) + 1
        if room < 0 and (take or not first):
            break
        take += 1
    return take


def _grep_window(text: str, pattern: str, call: _Call, limit: int) -> Tuple[str, dict]:
    """The lines of `text` that contain `pattern` (case ignored; plain text, never a regular
    expression), with `context` lines around each, from start_line to end_line, within `limit`
    characters; the matches are found by re in C, a literal pattern costing linear time."""
    if not pattern or "\n" in pattern or len(pattern) > _GREP_PATTERN:
        raise _ToolError(f"pattern must be one line of 1 to {_GREP_PATTERN:,} characters (plain "
                         f"text, case ignored).")
    context = call.integer("context", 2, maximum=10)
    first = call.integer("start_line", 1, minimum=1)
    total = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    last = min(call.integer("end_line", total, minimum=1), total)
    if call.optional_int("end_line", minimum=1) is not None and last < first:
        raise _ToolError(f"end_line ({last}) is before start_line ({first}).")
    rx = re.compile(re.escape(pattern), re.IGNORECASE)
    pos, stop, n = _skip_lines(text, first - 1), _skip_lines(text, last), first
    out: List[str] = []
    hits: List[int] = []
    used, shown, more = 0, first - 1, None  # characters; the last line shown; where to go on
    while True:
        m = rx.search(text, pos, stop)
        if m is None:
            break
        start = text.rfind("\n", 0, m.start()) + 1
        n += text.count("\n", pos, start)
        lo, hi = max(n - context, shown + 1, first), min(n + context, last)
        block, found, after = _grep_block(text, rx, start, n, lo, hi)
        sep = ["--"] * bool(lo > shown + 1 and out)
        take = _grep_fit(block, limit - used - 3 * len(sep), not out)
        if take < len(block):  # the lines that fit; the next call starts at the first that did not
            more = lo + take
        if not take:
            break
        out.extend(sep + block[:take])
        used += sum(len(b) + 1 for b in sep + block[:take])
        hits.extend(k for k in found if k < lo + take)
        if more:
            break
        shown, pos, n = hi, min(after, len(text)), hi + 1
        if pos >= stop:
            break
    return "\n".join(out)[:limit], {
        "pattern": pattern, "start_line": first, "end_line": more - 1 if more else last,
        "total_lines": total, "matching_lines": hits, "next_line": more}


def _records_window(data: Any, call: _Call, limit: int) -> Tuple[str, dict]:
    """A window of the records the data holds (record_offset, record_count), one compact JSON
    record a line, within `limit` characters (a record longer than that is cut)."""
    rows, reason = _as_records(data)
    if rows is None or (isinstance(data, list) and rows is not data):
        what = reason or "a list of plain values"
        raise _ToolError(f"record_offset/record_count need a list of records; this data is {what}. "
                         f"Use pointer, offset or start_line.")
    first, count = call.integer("record_offset", 0), call.integer("record_count", 100, minimum=1)
    return _record_lines(itertools.islice(rows, first, first + count), first, len(rows), limit)


def _view_window(cache: _OutputCache, entry: _CacheEntry, call: _Call, limit: int
                 ) -> Optional[Tuple[str, dict]]:
    """_records_window read from the cached view itself when it lays out only records, one a
    line (_view_count): the records counted by their lines, and only the window's parsed, the
    rest of the file passed over unread; None when the view is laid out otherwise."""
    with cache.opened(entry) as f:
        total = _view_count(f)
        if total is None:
            return None
        first = call.integer("record_offset", 0)
        count = call.integer("record_count", 100, minimum=1)
        f.seek(0)
        rows = (itertools.islice(_view_records(f, skip=first), count) if first < total
                else iter(()))
        try:
            return _record_lines(rows, first, total, limit)
        except _NotRecords:  # (not a view this cache wrote)
            return None


def _record_lines(rows: Iterable[Dict[str, Any]], first: int, total: int, limit: int
                  ) -> Tuple[str, dict]:
    """The records of a window (from record `first` of `total`), one compact JSON record a line,
    within `limit` characters (a record longer than that is cut), and where the window stands;
    the rows are read only as far as the window goes."""
    out: List[str] = []
    used = 0
    for row in rows:
        line = _dumps(row)
        if out and used + len(line) + 1 > limit:
            break
        out.append(line if len(line) <= limit else line[:limit] + " [...]")
        used += len(out[-1]) + 1
    end = min(first, total) + len(out)
    return "\n".join(out), {"record_offset": first, "record_count": len(out),
                            "total_records": total,
                            "next_record_offset": end if end < total else None}


@_tool(
    "retrieve_cached_output",
    "Read part of a large result that call_tool cached instead of showing (its answer gives the "
    "token). Windows are bounded (20,000 characters by default): page with offset/length, or by "
    "line with start_line/end_line, or by record with record_offset/record_count, or for JSON "
    "take a sub-value with an RFC 6901 pointer such as /results/10; pattern gives only the "
    "lines that contain it, numbered. To filter or count, query_output is cheaper.",
    _schema({"token": {"type": "string", "description": "The token from the cached answer."},
             "offset": {"type": "integer", "minimum": 0, "default": 0,
                        "description": "First character."},
             "length": {"type": "integer", "minimum": 1,
                        "description": "Characters to return (capped)."},
             "start_line": {"type": "integer", "minimum": 1,
                            "description": "First line (1-based)."},
             "end_line": {"type": "integer", "minimum": 1,
                          "description": "Last line (inclusive)."},
             "pointer": {"type": "string", "description": "JSON Pointer into JSON data, e.g. "
                                                          "/results/10."},
             "record_offset": {"type": "integer", "minimum": 0,
                               "description": "For records: the first record "
                               "(0-based); records come one compact JSON object a line."},
             "record_count": {"type": "integer", "minimum": 1, "default": 100,
                              "description": "For records: how many (capped by the window)."},
             "pattern": {"type": "string", "description": "Only the lines that contain this "
                         "text (case ignored; not a regex), numbered, with context lines around "
                         "each; start_line/end_line limit where to search."},
             "context": {"type": "integer", "minimum": 0, "maximum": 10, "default": 2,
                         "description": "With pattern: lines shown before and after each "
                                        "match."}},
            ("token",)),
    needs=("cache",))
def _tool_retrieve_cached_output(call: _Call) -> dict:
    """A window of a cached output: by characters (offset/length), by lines
    (start_line/end_line), by records (record_offset/record_count), optionally inside the value
    a JSON Pointer picks. One way to page per call; every window is bounded by
    max_window_chars, and the status line says where the next one starts."""
    cache = call.ctx.cache
    if cache is None:
        raise _ToolError("The output cache is disabled (output_cache.enabled is false in "
                         "Abstract's settings).")
    entry = cache.get(call.required("token"))
    limit = int(call.ctx.settings.cache("max_window_chars"))
    pointer = call.string("pointer")
    by_record = "record_offset" in call.args or "record_count" in call.args
    if by_record and any(k in call.args for k in ("offset", "length", "start_line", "end_line")):
        raise _ToolError("Give record_offset/record_count, or offset/length, or "
                         "start_line/end_line: one way to page.")
    pattern = call.string("pattern")
    if pattern is not None:
        if any(k in call.args for k in ("offset", "length", "pointer", "record_offset",
                                        "record_count")):
            raise _ToolError("pattern searches lines: give it alone, or with start_line/end_line "
                             "(where to search) and context.")
        chunk, where = _grep_window(cache.text(entry), pattern, call, limit)
        return _grep_answer(entry, chunk, where)
    if "context" in call.args:
        raise _ToolError("context needs pattern: the lines around each line that matches it.")
    value: Any = None
    got = None
    if pointer is not None or by_record:
        if entry.ctype != "application/json":
            what = "pointer" if pointer is not None else "record_offset/record_count"
            raise _ToolError(f"{what} needs JSON data; the output {entry.token} is text. Use "
                             f"offset or start_line.")
        if pointer is None:  # a window of records: read from the view, when it allows, not whole
            got = _view_window(cache, entry, call, limit)
        if got is None:
            value = json.loads(cache.text(entry))  # the data the text view shows
        if pointer is not None:
            value = _json_pointer(value, pointer)
    if got is not None:
        chunk, where = got
    elif by_record:
        chunk, where = _records_window(value, call, limit)
    else:
        text = cache.text(entry) if pointer is None else _text_view(value)
        chunk, where = _window(text, call, limit)
    where.update({"token": entry.token, "expires_at": _utc(entry.expires)})
    if pointer is not None:
        where["pointer"] = pointer
    if by_record:
        last = where["record_offset"] + where["record_count"] - 1
        status = (f"[records {where['record_offset']}-{last} of {where['total_records']:,}"
                  + (f"; next: record_offset={where['next_record_offset']}]"
                     if where["next_record_offset"] is not None
                     else "; end of records]"))
    elif where.get("next_offset") is not None:
        status = (f"[characters {where['offset']:,} to {where['next_offset']:,} of "
                  f"{where['total_chars']:,} shown; next: offset={where['next_offset']}]")
    elif where.get("next_line") is not None:
        status = (f"[lines {where['start_line']}-{where['end_line']} of {where['total_lines']}; "
                  f"next: start_line={where['next_line']}]")
    else:
        status = "[end of data]"
    if "truncated_line" in where:
        status += (f" [line {where['truncated_line']} is longer than the window ({limit:,} "
                   f"characters) and was cut; read it whole by offset]")
    return {"content": [{"type": "text", "text": chunk}, {"type": "text", "text": status}],
            "structuredContent": where}


def _grep_answer(entry: _CacheEntry, chunk: str, where: dict) -> dict:
    """retrieve_cached_output's answer to a pattern: the lines, then where the search stands."""
    where.update({"token": entry.token, "expires_at": _utc(entry.expires)})
    hits = len(where["matching_lines"])
    span = (f"lines {where['start_line']:,}-{where['end_line']:,} of "
            f"{where['total_lines']:,}")
    if where["next_line"] is not None:
        status = (f"[{_plural(hits, 'line')} matching {_dumps(where['pattern'])} in {span}; "
                  f"more may follow: the same call with start_line={where['next_line']}]")
    else:
        status = (f"[{_plural(hits, 'line')} matching {_dumps(where['pattern'])} in {span}; "
                  f"end of the search]")
    return {"content": [{"type": "text", "text": chunk or "(no line matches)"},
                        {"type": "text", "text": status}],
            "structuredContent": where}


# -- query_output: SQL over a cached output or a stored file (the Queries part holds the engine)

_QUERY_LIMIT_MAX = 1000


def _text_lines(text: str) -> Iterator[Dict[str, Any]]:
    """Plain text as records, a line each: n (1-based, as start_line counts: lines end at
    "\n") and line (without its "\n" or "\r\n")."""
    for n, line in enumerate(io.StringIO(text, newline="\n"), 1):
        yield {"n": n, "line": line[:-2] if line.endswith("\r\n") else line.rstrip("\n")}


def _query_records(data: Any, pointer: Optional[str], label: str) -> Iterable[Dict[str, Any]]:
    """The records to load: the list at records_pointer, else the one list of records the data
    holds, as the store path finds it. Text that is a CSV or TSV table gives its rows (cells
    typed as the CSV file reader types them), JSON Lines text its lines, other text a record
    a line (_text_lines)."""
    if isinstance(data, str):
        rows = _tabular_text(data, "csv")
        if isinstance(rows, list):
            data = [{k: _csv_value(v) for k, v in r.items()} for r in rows]
        elif data.lstrip()[:1] in ("{", "["):
            try:
                data = _load_jsonl(data)
            except FormatError:
                pass
    if isinstance(data, str):
        if pointer is not None:
            raise _ToolError(f"records_pointer needs JSON data; {label} is text, queried a line "
                             f"a row (columns n, line).")
        return _text_lines(data)
    if pointer is not None:
        data = _json_pointer(data, pointer)
    rows, reason = _as_records(data)
    if rows is None:
        lists = ([k for k, v in data.items() if isinstance(v, list)] if isinstance(data, dict)
                 else [])
        where = pointer or "the top level"
        hint = (" Lists here: "
                + ", ".join("/" + k.replace("~", "~0").replace("/", "~1") for k in lists[:10]) + "."
                if lists else "")
        raise _ToolError(f"{label} holds at {where} {reason}. Give records_pointer, the JSON "
                         f"Pointer of the list of records to query (e.g. /items).{hint}")
    return rows


def _cached_table(cache: _OutputCache, entry: _CacheEntry, pointer: Optional[str], label: str
                  ) -> _Table:
    """The table of a cached output's records: a view laid out one record a line is read a line
    at a time, never parsed whole; any other view (or a records_pointer into it) is."""
    if entry.ctype == "application/json" and not pointer:
        with cache.opened(entry) as f:
            try:
                return _load_table(_view_records(f))
            except _NotRecords:
                pass
    return _load_table(_query_records(_cached_data(cache, entry), pointer, label))


def _cached_data(cache: _OutputCache, entry: _CacheEntry) -> Any:
    """A cached output's data, as its text view shows it (JSON parsed)."""
    text = cache.text(entry)
    return json.loads(text) if entry.ctype == "application/json" else text


def _query_table(call: _Call) -> Tuple[_Table, str]:
    """(the loaded table of the call's source, how the answer names the source): a table loaded
    earlier for the same token, or the same file (path, size, mtime), is used again."""
    source, pointer = call.required("source"), call.string("records_pointer")
    ctx = call.ctx
    tables, budget = ctx.tables, int(float(ctx.settings.query("max_memory_mb")) * (1 << 20))
    if _TOKEN_RE.match(source) and "." not in source and os.sep not in source:
        if ctx.cache is None:
            raise _ToolError("A cache token needs the output cache, which is disabled in "
                             "Abstract's settings.")
        entry = ctx.cache.get(source)
        label = f"cached output {entry.token} ({entry.server}.{entry.tool})"
        key: tuple = ("token", entry.token, pointer)
        table = tables.get(key)
        if table is None:
            start = time.monotonic()
            table = _cached_table(ctx.cache, entry, pointer, label)
            table.load_s = time.monotonic() - start
            tables.put(key, table, budget)
        return table, label
    f, path, size = _open_input(call, source, "source")
    with f:
        key = ("file", path, size, os.fstat(f.fileno()).st_mtime_ns, pointer)
        table = tables.get(key)
        if table is None:
            start = time.monotonic()
            data, _ = _read_input(f, path, size, float(ctx.settings.query("max_file_mb")),
                                  "query.max_file_mb")
            table = _load_table(_query_records(data, pointer, path))
            table.load_s = time.monotonic() - start
            tables.put(key, table, budget)
    return table, path


def _query(call: _Call, keep: Optional[int]) -> Tuple[_Table, str, _QueryResult]:
    """Load (or reuse) the source's table and run the call's SQL over it in a worker; a table
    dropped by another query's load meanwhile is loaded once more. With `keep`, cells are cut to
    the retrieval window (no more is ever shown); without, the result is bounded by
    query.max_result_mb."""
    sql = call.required("sql")
    settings = call.ctx.settings
    timeout = float(settings.query("timeout_seconds"))
    memory_mb = float(settings.query("worker_memory_mb"))
    if keep is None:
        max_chars = int(float(settings.query("max_result_mb")) * (1 << 20))
    else:
        max_chars = int(settings.cache("max_window_chars"))
    for attempt in (1, 2):
        table, label = _query_table(call)
        try:
            return table, label, _run_query(table, sql, keep, timeout, max_chars, memory_mb,
                                            call.req.on_cancel, call.ctx.tables)
        except _Closed:
            if attempt == 2:
                raise _ToolError("The loaded table was dropped to make room for another while this "
                                 "query waited (query.max_memory_mb in Abstract's settings); run "
                                 "it again.") from None
    raise AssertionError("unreachable")


def _cut_level(lengths: List[int], excess: int) -> int:
    """The longest length to cut strings of `lengths` to that removes `excess` characters, a
    cut one ending in "…" (one more character)."""
    low, high = 0, max(lengths, default=0)
    while low < high:  # the largest cap whose cut removes enough
        mid = (low + high + 1) // 2
        if sum(n - mid - 1 for n in lengths if n > mid) >= excess:
            low = mid
        else:
            high = mid - 1
    return low


def _fit_records(columns: List[str], rows: List[tuple], budget: int, made: Sequence[int] = ()
                 ) -> Tuple[List[dict], List[dict]]:
    """(the rows as records in about `budget` characters of JSON, the cells cut): past it the
    longest texts are cut to one length, the longest that fits, and end in "…" (as does a value
    the worker cut), then rows are left off the end. A cut cell: {"row", "column", "chars"}.
    The uncut cells of the columns `made` (SQLite made them as JSON) are the values they hold."""
    cells = [[_json_cell(v) for v in row] for row in rows]
    full = {(i, j): v.length * (2 if v.blob else 1) for i, row in enumerate(rows)
            for j, v in enumerate(row) if isinstance(v, _Cut)}
    excess = len(_compact_json([dict(zip(columns, r)) for r in cells])) - budget
    if excess > 0:
        cap = _cut_level([len(v) for r in cells for v in r if isinstance(v, str)], excess)
        for i, r in enumerate(cells):
            for j, v in enumerate(r):
                if isinstance(v, str) and len(v) > cap:
                    full.setdefault((i, j), len(v))
                    r[j] = v[:cap]
    for i, j in full:
        cells[i][j] += "…"
    for i, r in enumerate(cells):
        for j in made:
            if (i, j) not in full and isinstance(r[j], str):  # (json('1e999') stays text)
                with contextlib.suppress(FormatError):
                    r[j] = _load_json(r[j])
    records, used = [], 2
    for r in cells:
        record = dict(zip(columns, r))
        used += len(_compact_json(record)) + 1
        if used > budget and records:
            break
        records.append(record)
    cut = [{"row": i, "column": columns[j], "chars": n} for (i, j), n in sorted(full.items())
           if i < len(records)]
    return records, cut


def _query_answer(call: _Call, table: _Table, label: str, res: _QueryResult) -> dict:
    """The rows as a compact table within the retrieval window, and as records within it too
    (long cells cut and listed under "cut"; a column SQLite made as JSON as its values)."""
    sql = call.required("sql")
    window = int(call.ctx.settings.cache("max_window_chars"))
    shown_text, shown = _query_table_text(res.columns, res.rows, max(window - 500, 1000))
    ms = res.elapsed * 1000
    names = ", ".join(res.columns[:40]) + (f" and {len(res.columns) - 40} "
                                           f"more" if len(res.columns) > 40 else "")
    loaded, table.load_s = table.load_s, None
    after = (f" (after loading {_plural(table.rows, 'record')} in {loaded:.2f} "
             f"s)" if loaded is not None else "")
    lines = [f"{_plural(res.total, 'row')} in {ms:.1f} ms{after} from {label}; columns: {names}."]
    if res.rows:
        lines.append(shown_text)
    if shown < res.total:
        lines.append(f"[{shown:,} of {res.total:,} rows shown. For others: LIMIT/OFFSET in the "
                     f"SQL, or limit (at most {_QUERY_LIMIT_MAX:,}); to keep them all, file_format "
                     f"stores the whole result as a file.]")
    lines.extend(f"Note: {n}." for n in table.notes[:5] + [_boolean_note(table, sql)] if n)
    records, cut = _fit_records(res.columns, res.rows[:shown], max(window - 1000, 1000),
                                _json_columns(sql, len(res.columns)))
    info = {"source": label, "columns": res.columns[:_QUERY_MAX_COLUMNS], "rows": records,
            "row_count": res.total, "returned": len(records), "elapsed_ms": round(ms, 2)}
    if cut:
        info["cut"], info["cut_count"] = cut[:20], len(cut)
    if loaded is not None:
        info["load_ms"] = round(loaded * 1000, 2)
    return _text_result("\n".join(lines), info)


@_tool(
    "query_output",
    "Ask a large output a question in SQL instead of reading it: the records of a cached output "
    "(its token) or of a file in an allowed directory (.json, .jsonl, .csv, .tsv, .yaml, .xml, "
    "also .gz) are the table data, one column per field; nested values are JSON text "
    "(json_extract(col, '$.key') reads them); text is a row a line (n, line). One read-only "
    "SELECT (WITH allowed); returns at most limit rows, the row count and the columns. With "
    "file_format the whole result is stored as a file instead, and you get its path and a "
    "preview.",
    _schema({"source": {"type": "string", "description": "A cache token (from a cached answer), "
                                                         "or a file path: "
                        "absolute inside an allowed directory, or relative to the first one."},
             "sql": {"type": "string", "description": "One SELECT over the table data, e.g. "
                                                      "SELECT status, "
                     "count(*) AS n FROM data GROUP BY status ORDER BY n DESC."},
             "limit": {"type": "integer", "minimum": 0, "maximum": _QUERY_LIMIT_MAX, "default": 50,
                       "description": "Rows to return here (the count covers them all)."},
             "records_pointer": {"type": "string",
                                 "description": "JSON Pointer of the list of records to query "
                                 "when the data is not one list of records, e.g. /items."},
             "file_format": {"type": "string", "enum": list(_FORMATS),
                             "description": "Store the whole result as a file in this format "
                                            "instead."},
             "filename": {"type": "string", "description": "File name with file_format; default "
                          "abstract-query_output-<UTC time>. An existing file is never "
                          "overwritten."},
             "storage_path": {"type": "string", "description": "Directory for the file (with "
                                                               "file_format): "
                              "inside an allowed directory. Default: the first allowed "
                              "directory."}},
            ("source", "sql")),
    needs=("meta", "sqlite3"), aliases={**_ALIASES_FORMAT, **_ALIASES_DIR})
def _tool_query_output(call: _Call) -> dict:
    """SQL over a cached output or a stored file. Without file_format the rows come back as a
    bounded table (`limit` of them); with it, every row is stored as a file through the store
    path, the query standing in for the upstream call (a query with no rows stores nothing)."""
    limit = call.integer("limit", 50, maximum=_QUERY_LIMIT_MAX)
    fmt = call.format("file_format")
    if fmt is None:
        extra = [k for k in ("filename", "storage_path") if call.args.get(k) is not None]
        if extra:
            raise _ToolError(f"{' and '.join(extra)} need file_format: say which format to store "
                             f"the result in.")
        return _query_answer(call, *_query(call, limit))

    def fetch() -> dict:
        table, _, res = _query(call, None)
        if not res.rows:
            note = _boolean_note(table, call.required("sql"))
            raise _ToolError("The query returned no rows, so nothing was stored."
                             + (f" Note: {note}." if note else ""))
        records = _result_records(res, call.required("sql"), len(res.rows))
        return {"content": [], "structuredContent": records}

    return _store_result(call, "abstract", "query_output", fmt, fetch)


# -- the catalog's tools (search_stored_outputs, list_stored_outputs) and, with --memory, the
# conversation memory tools of seed 003


_P_QUERY = {"type": "string", "description": "Words to look for. Quotes, brackets and operators "
                                             "are just text; "
            "mode says how the words match."}
_P_MODE = {"type": "string", "enum": list(_SEARCH_MODES), "default": "words",
           "description": "words: every word, anywhere; phrase: the words next to each other, in "
                          "order; prefix: words that start with each one (repor finds report, "
                          "reports)."}
_P_LIMIT = {"type": "integer", "minimum": 1, "maximum": 100, "default": 10,
            "description": "Results per page."}
_P_OFFSET = {"type": "integer", "minimum": 0, "default": 0,
             "description": "Results to skip (next_offset pages on)."}
_P_CURSOR = {"type": "string", "description": "next_cursor of the previous answer; none for the "
                                              "first page."}
_P_CONV = {"type": "string", "description": "A conversation's id (from save_message or "
                                            "list_conversations)."}
_P_WHEN = "ISO 8601 UTC date or time, e.g. 2025-01-31 or 2025-01-31T09:00:00Z"


def _catalog_of(call: _Call) -> _Catalog:
    if call.ctx.catalog is None:
        raise _ToolError("The catalog is off (catalog.enabled is false in Abstract's settings, or "
                         "it could not be opened: see Abstract's stderr).")
    return call.ctx.catalog


def _db_errors(fn: Callable[[_Call], dict]) -> Callable[[_Call], dict]:
    """A catalog tool whose database fails (locked beyond busy_timeout, damaged while running)
    answers with an error the model can pass on, not an internal error."""
    def run(call: _Call) -> dict:
        try:
            return fn(call)
        except Exception as e:
            if sqlite3 is None or not isinstance(e, sqlite3.Error):
                raise
            catalog = _catalog_of(call)  # (there is one: fn used it)
            kept = catalog.moved_aside
            if _is_corrupt(e) and kept:
                raise _ToolError(f"The catalog database was damaged ({e}), so it was moved aside "
                                 f"to {kept} (kept, never deleted) and a fresh, empty one started. "
                                 f"Try again; outputs recorded before are found again after "
                                 f"`abstract --reindex DIR...`.") from None
            raise _ToolError(f"The catalog database {catalog.path} failed: {e}. Try again; if it "
                             f"persists, restart Abstract (a damaged database is moved aside at "
                             f"start-up).") from None
    return run


def _output_view(row: dict) -> dict:
    """One catalogued output for an answer: what it is, where it is, and whether it is still
    there."""
    out = {"id": row["id"], "time": row["created"], "kind": row["kind"], "server": row["server"],
           "tool": row["tool"],
           "format": row["format"], "bytes": row["bytes"]}
    if row["kind"] == "cached":
        out["token"], out["uri"] = row["token"], _CACHE_URI + (row["token"] or "")
    else:
        out["path"], out["uri"] = row["path"], _file_uri(row["path"]) if row["path"] else None
    if row.get("nrows") is not None:
        out["rows"] = row["nrows"]
    if row.get("ncolumns") is not None:
        out["columns"] = row["ncolumns"]
    if row.get("description"):
        out["description"] = row["description"]
    if row.get("arguments") and len(row["arguments"]) <= 1000:
        try:
            out["arguments"] = json.loads(row["arguments"])
        except ValueError:  # written by something other than Abstract
            pass
    out["missing"] = not (row["path"] and os.path.isfile(row["path"]))
    return out


def _search_args(call: _Call, max_limit: int = 100) -> Tuple[str, str, int, int]:
    """(query, mode, limit, offset) of a search tool; any string is a valid query."""
    query = call.args.get("query")
    if not isinstance(query, str):
        raise _ToolError("Missing required argument 'query' (a string of words to look for).")
    mode = call.string("mode") or "words"
    if mode not in _SEARCH_MODES:
        raise _ToolError(f"Argument 'mode' must be one of {', '.join(_SEARCH_MODES)}, not "
                         f"{_dumps(mode)[:40]}.")
    limit = min(call.integer("limit", 10, minimum=1), max_limit)
    return query, mode, limit, call.integer("offset", 0)


def _when(call: _Call, key: str, end: bool = False) -> Optional[str]:
    value = call.string(key)
    return None if not value else _parse_when(value, key, end)


def _output_line(i: int, item: dict) -> str:
    where = item.get("path") or f"cached output {item.get('token')} ({item['uri']})"
    size = f"{item['bytes']:,} bytes" if isinstance(item.get("bytes"), int) else "size unknown"
    rows = f", {_plural(item['rows'], 'row')}" if item.get("rows") is not None else ""
    origin = f"{item['server']}.{item['tool']}" if item["server"] else "(origin unknown)"
    gone = "  [missing: the file is no longer there]" if item["missing"] else ""
    return f"{i}. {item['time']}  {origin}  {item['format'] or '?'}, {size}{rows}  {where}{gone}"


@_tool(
    "search_stored_outputs",
    "Search every output Abstract has stored or cached, in this conversation or earlier ones: the "
    "files of call_tool_and_store, responses stored by call_tool_with_file_content, and cached "
    "call_tool results. Matches the first 64 KB of each output, its description, server, tool and "
    "path; best matches first, with a highlighted snippet, the path (or cache token) and whether "
    "the file still exists.",
    _schema({"query": _P_QUERY, "mode": _P_MODE,
             "server": {"type": "string", "description": "Only outputs of this server."},
             "tool": {"type": "string", "description": "Only outputs of this tool."},
             "since": {"type": "string", "description": f"Only outputs from this time on "
                                                        f"({_P_WHEN})."},
             "until": {"type": "string", "description": f"Only outputs up to this time; a date "
                                                        f"includes its day ({_P_WHEN})."},
             "limit": _P_LIMIT, "offset": _P_OFFSET}, ("query",)),
    needs=("meta", "catalog"), aliases=_ALIASES_SERVER)
@_db_errors
def _tool_search_stored_outputs(call: _Call) -> dict:
    catalog = _catalog_of(call)
    query, mode, limit, offset = _search_args(call)
    found = catalog.search(query, mode, server=call.string("server") or None,
                           tool=call.string("tool") or None, since=_when(call, "since"),
                           until=_when(call, "until", True), limit=limit, offset=offset)
    results = [dict(_output_view(r), snippet=r["snippet"]) for r in found["results"]]
    engine = "fts5" if catalog.fts else "fallback"
    out = {"results": results, "words": found["words"], "mode": mode, "engine": engine,
           "next_offset": offset + limit if found["has_more"] else None}
    if not found["words"]:
        text = ("The query has no words to look for (letters or digits); list_stored_outputs lists "
                "outputs newest first.")
    else:
        order = "best first" if catalog.fts else "newest first (no FTS5 here)"
        lines = [f"{_plural(len(results), 'stored output')} match {' '.join(found['words'])!r} "
                 f"({mode}, {order}):"]
        for i, item in enumerate(results, offset + 1):
            lines.append(_output_line(i, item))
            if item["snippet"]:
                lines.append("   " + " ".join(item["snippet"].split()))
        if found["has_more"]:
            lines.append(f"More: offset={offset + limit}")
        text = "\n".join(lines)
    return _text_result(text, out)


@_tool(
    "list_stored_outputs",
    "List the outputs Abstract has stored or cached, newest first (all conversations), with path "
    "or cache token, format, size and whether the file still exists. retention_days shows which "
    "stored files a retention rule of that many days would remove; Abstract itself never deletes "
    "them.",
    _schema({"server": {"type": "string", "description": "Only outputs of this server."},
             "tool": {"type": "string", "description": "Only outputs of this tool."},
             "kind": {"type": "string", "enum": list(_CATALOG_KINDS),
                      "description": "stored: call_tool_and_store; "
                      "response: call_tool_with_file_content's response_format; cached: large "
                      "call_tool results."},
             "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 20},
             "cursor": _P_CURSOR,
             "retention_days": {"type": "number", "exclusiveMinimum": 0,
                                "description": "Mark the files older "
                                "than this many days (would_remove) and total them. Nothing is "
                                "deleted."}}),
    needs=("meta", "catalog"), aliases=_ALIASES_SERVER)
@_db_errors
def _tool_list_stored_outputs(call: _Call) -> dict:
    catalog = _catalog_of(call)
    kind, days = call.string("kind") or None, call.args.get("retention_days")
    if kind is not None and kind not in _CATALOG_KINDS:
        raise _ToolError(f"Argument 'kind' must be one of {', '.join(_CATALOG_KINDS)}, not "
                         f"{_dumps(kind)[:40]}.")
    number = isinstance(days, (int, float)) and not isinstance(days, bool)
    if days is not None and not (number and 0 < days <= _RETENTION_DAYS_MAX):  # NaN compares False
        raise _ToolError(f"Argument 'retention_days' must be a number of days > 0 and <= "
                         f"{_RETENTION_DAYS_MAX}, not {_dumps(days)[:40]}.")
    server, tool = call.string("server") or None, call.string("tool") or None
    limit = min(call.integer("limit", 20, minimum=1), 200)
    rows, cursor = catalog.recent(server=server, tool=tool, kind=kind, limit=limit,
                                  cursor=call.string("cursor"))
    items = [_output_view(r) for r in rows]
    out: dict = {"outputs": items, "next_cursor": cursor}
    lines = [f"{_plural(len(items), 'stored output')}, newest "
             f"first:"] + [_output_line(i, x) for i, x in enumerate(items, 1)]
    if days is not None:
        # not before 1970: time.gmtime refuses negative times on Windows, and nothing is older
        since = _utc(max(0.0, catalog.clock() - float(days) * 86400), ms=True)
        rule = catalog.retention(since, server, tool)
        for item in items:
            item["would_remove"] = (item["kind"] != "cached" and item["time"] < rule["before"]
                                    and not item["missing"])
        out["retention"] = dict(rule, days=days)
        lines.append(f"A retention rule of {days:g} days would remove "
                     f"{_plural(rule['files'], 'file')} ({rule['bytes']:,} bytes) stored before "
                     f"{rule['before']}. Abstract never deletes them itself.")
    if cursor:
        lines.append(f'More: cursor="{cursor}"')
    return _text_result("\n".join(lines), out)


@_tool(
    "save_message",
    "Save a message to conversation memory, which lasts across conversations. Without "
    "conversation_id a new conversation is started; an id that does not exist yet is created. "
    "Returns conversation_id and message_id.",
    _schema({"conversation_id": _P_CONV, "role": {"type": "string", "enum": list(_ROLES)},
             "content": {"type": "string", "description": "The message text."},
             "parent_message_id": {"type": "string",
                                   "description": "The message this one answers (same "
                                                  "conversation)."},
             "metadata": {"type": "object", "description": "Anything to keep with the message.",
                          "additionalProperties": True}}, ("role", "content")),
    needs=("memory", "catalog"))
@_db_errors
def _tool_save_message(call: _Call) -> dict:
    content, meta = call.args.get("content"), call.args.get("metadata")
    if not isinstance(content, str):
        raise _ToolError("Missing required argument 'content' (the message text, a string).")
    if meta is not None and not isinstance(meta, dict):
        raise _ToolError(f"Argument 'metadata' must be an object, not {_dumps(meta)[:80]}.")
    out = _catalog_of(call).save_message(call.string("conversation_id") or None,
                                         call.required("role"), content,
                                         call.string("parent_message_id"), meta)
    what = "a new conversation" if out["new_conversation"] else "conversation"
    return _text_result(f"Saved message {out['message_id']} in {what} {out['conversation_id']}.",
                        out)


@_tool(
    "get_conversation",
    "Read a conversation from memory: its latest messages, oldest first. For earlier ones pass "
    "next_before_message_id as before_message_id.",
    _schema({"conversation_id": _P_CONV,
             "message_limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
             "before_message_id": {"type": "string",
                                   "description": "Only messages before this one."}},
            ("conversation_id",)),
    needs=("memory", "catalog"))
@_db_errors
def _tool_get_conversation(call: _Call) -> dict:
    limit = min(call.integer("message_limit", 100, minimum=1), 1000)
    conv = _catalog_of(call).get_conversation(call.required("conversation_id"), limit,
                                              call.string("before_message_id"))
    return _text_result(_dumps(conv), conv)


@_tool(
    "list_conversations",
    "List the conversations in memory, the most recently updated first, with titles and message "
    "counts.",
    _schema({"limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
             "cursor": _P_CURSOR}),
    needs=("memory", "catalog"))
@_db_errors
def _tool_list_conversations(call: _Call) -> dict:
    limit = min(call.integer("limit", 20, minimum=1), 100)
    rows, cursor = _catalog_of(call).list_conversations(limit, call.string("cursor"))
    out = {"conversations": rows, "next_cursor": cursor}
    return _text_result(_dumps(out), out)


@_tool(
    "search_messages",
    "Full-text search of the messages in memory, best matches first, with highlighted snippets.",
    _schema({"query": _P_QUERY, "mode": _P_MODE,
             "conversation_id": {**_P_CONV, "description": "Only this one."},
             "start_date": {"type": "string", "description": f"Messages from this time on "
                                                             f"({_P_WHEN})."},
             "end_date": {"type": "string", "description": f"Messages up to this time; a date "
                                                           f"includes its day ({_P_WHEN})."},
             "limit": _P_LIMIT, "offset": _P_OFFSET}, ("query",)),
    needs=("memory", "catalog"))
@_db_errors
def _tool_search_messages(call: _Call) -> dict:
    query, mode, limit, offset = _search_args(call)
    cid = call.string("conversation_id") or None
    found = _catalog_of(call).search_messages(query, mode, conversation_id=cid,
                                              since=_when(call, "start_date"),
                                              until=_when(call, "end_date", True),
                                              limit=limit, offset=offset)
    out = {"results": found["results"], "words": found["words"], "mode": mode,
           "next_offset": offset + limit if found["has_more"] else None}
    return _text_result(_dumps(out), out)


@_tool(
    "delete_conversation",
    "Delete a conversation and all its messages from memory, for good.",
    _schema({"conversation_id": _P_CONV}, ("conversation_id",)),
    needs=("memory", "catalog"))
@_db_errors
def _tool_delete_conversation(call: _Call) -> dict:
    cid = call.required("conversation_id")
    n = _catalog_of(call).delete_conversation(cid)
    out = {"conversation_id": cid, "deleted_messages": n}
    return _text_result(f"Deleted conversation {cid} and its {_plural(n, 'message')}.", out)


@_tool(
    "export_conversations",
    "Export conversation memory (all conversations, or one) as JSON or Markdown into a file in an "
    "allowed directory; returns its path, not the export.",
    _schema({"format": {"type": "string", "enum": ["json", "markdown"], "default": "json"},
             "conversation_id": {**_P_CONV, "description": "Only this conversation (default: "
                                                           "all)."},
             "storage_path": {"type": "string", "description": "Directory, inside an allowed one "
                                                               "(default: the first)."},
             "filename": {"type": "string", "description": "File name; default conversations-<UTC "
                                                           "time>. An "
                          "existing file is never overwritten."}}),
    needs=("memory", "catalog"), aliases=_ALIASES_DIR)
@_db_errors
def _tool_export_conversations(call: _Call) -> dict:
    fmt, cid = call.string("format") or "json", call.string("conversation_id") or None
    if fmt not in ("json", "markdown"):
        raise _ToolError(f"Argument 'format' must be json or markdown, not {_dumps(fmt)[:40]}.")
    convs = _catalog_of(call).export(cid)
    sandbox, name = call.ctx.sandbox, call.string("filename")
    with _sandboxed():
        directory = sandbox.make_dir(call.string("storage_path"))
        stem = _safe_filename(name) if name else f"conversations-{_utc(compact=True)}"
    with directory:
        return _export_in(call, directory, stem, fmt, convs)


def _export_in(call: _Call, directory: str, stem: str, fmt: str, convs: List[dict]) -> dict:
    _check_quota(call, directory)
    exported = _utc(time.time(), ms=True)
    if fmt == "json":
        body = json.dumps({"exported": exported, "conversations": convs}, indent=2,
                          ensure_ascii=False)
    else:
        body = _conversations_markdown(convs, exported)
    ext = ".json" if fmt == "json" else ".md"
    stem = stem[:-len(ext)] if stem.lower().endswith(ext) and len(stem) > len(ext) else stem
    data = body.encode("utf-8", "surrogatepass")
    try:
        path = _write_new(directory, stem, ext, data)
    except OSError as e:
        raise _write_error(directory, e) from None
    out: Dict[str, Any] = {"path": path, "uri": _file_uri(path), "format": fmt, "bytes": len(data),
                           "conversations": len(convs),
                           "messages": sum(len(c["messages"]) for c in convs)}
    what = (f"{_plural(out['conversations'], 'conversation')} "
            f"({_plural(out['messages'], 'message')})")
    result = _text_result(f"Exported {what} as {fmt}: {path}", out)
    if call.protocol in _LINK_VERSIONS:
        result["content"].append({"type": "resource_link", "uri": out["uri"],
                                  "name": os.path.basename(path),
                                  "mimeType": _FORMAT_MIME["json" if fmt == "json" else "md"],
                                  "size": out["bytes"]})
    return result


def _offered(expose: str, memory: bool, cache: Optional[_OutputCache],
             catalog: Optional[_Catalog]) -> Dict[str, _Tool]:
    """A server's tools by name, in tools/list's order: those whose needs are all met."""
    have = {"meta": expose != "direct", "cache": cache is not None,
            "catalog": catalog is not None, "sqlite3": sqlite3 is not None, "memory": memory}
    return {t.name: t for t in _TOOLS if all(have[n] for n in t.needs)}


_INSTRUCTIONS = (
    "Abstract reaches other MCP servers' tools for you and keeps large results out of the "
    "conversation.\n- list_available_tools finds tools (server + tool name); list_tool_details "
    "shows one tool's arguments.\n- call_tool returns a result here: only for small results.\n"
    "- call_tool_and_store saves a large result to a file (csv/tsv for records, md for prose, json "
    "if unsure) and returns its path and a preview; call_tool_with_file_content sends a file's "
    "data to a tool without you reading it.\n- A large call_tool result comes back as a preview "
    "and a token: read more with retrieve_cached_output, or pass the token as cache_token to "
    "call_tool_and_store or call_tool_with_file_content.\n- query_output answers a question about "
    "a cached output or a stored file with one SQL SELECT over its records (table data), so only "
    "the answer enters the conversation.\n- list_allowed_directories shows where files may be "
    "stored and read.\n- search_stored_outputs finds outputs stored or cached earlier, also in "
    "past conversations; list_stored_outputs lists them newest first."
)


# ==== Server ======================================================================
# The MCP server the client talks to, in both protocol eras: the legacy handshake
# (initialize, 2024-11-05 .. 2025-11-25) and the modern stateless era (2026-07-28), decided per
# request: a request that carries the modern _meta is answered in the modern era.

_TRANSPARENT_INSTRUCTIONS = (
    "The tools named <server>__<tool> are other MCP servers' tools, called through Abstract. A "
    "large result comes back as a preview and a token: read more of it with retrieve_cached_output."
)
_LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_TASKS_MAX = 10000  # transparent mode's tasks remembered for routing tasks/* (oldest forgotten)
# a 2026-07-28 follow-up's: Abstract routes it
_FOLLOW_UP_PARAMS = ("inputResponses", "requestState")
_CACHEABLE = {"server/discover", "tools/list", "prompts/list", "resources/list",
              "resources/templates/list",
              "resources/read"}


# base64 of this stays under the 10 MiB a TypeScript client accepts per message
_READ_MAX = 5 * 1024 * 1024


# one resources/read item as JSON, leaving room in the 10 MiB for the rest
_ITEM_MAX = 9 * 1024 * 1024


def _mime_of(path: str) -> str:
    if path.lower().endswith(".gz"):
        return "application/gzip"
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    return _FORMAT_MIME.get(ext) or mimetypes.guess_type(path)[0] or "application/octet-stream"


def _text_item(item: dict, text: str, data: Optional[bytes] = None) -> Optional[dict]:
    """`item` with the text, or, when JSON escaping would make it too long for one message
    (a control character becomes 6 bytes), with the base64 of its UTF-8 as a blob; None when
    even that is too long."""
    if len(text) * 6 <= _ITEM_MAX or len(  # (6: the most bytes one character escapes to)
            json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) <= _ITEM_MAX:
        return dict(item, text=text)
    data = text.encode("utf-8", "surrogatepass") if data is None else data
    if (len(data) + 2) // 3 * 4 > _ITEM_MAX:
        return None
    return dict(item, blob=base64.b64encode(data).decode("ascii"))


def _file_contents(f: Any, path: str, size: int, uri: str) -> dict:
    """One resources/read item from the open file `f`: text for UTF-8 files, base64 blob for
    anything else."""
    if size > _READ_MAX:
        raise RpcError(_INVALID_PARAMS, f"{path} is {size:,} bytes; resources/read serves files up "
                       f"to {_READ_MAX:,} bytes", {"uri": uri})
    try:
        data = f.read(_READ_MAX + 1)
    except OSError as e:
        raise RpcError(_INVALID_PARAMS, f"{path} cannot be read: {e.strerror or e}",
                       {"uri": uri}) from None
    item: dict = {"uri": uri, "mimeType": _mime_of(path)}
    text = None
    if not path.lower().endswith(".gz"):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    if text is not None and "\x00" not in text:
        # (never None for _READ_MAX bytes)
        return _text_item(item, text, data)  # type: ignore[return-value]
    item["blob"] = base64.b64encode(data).decode("ascii")
    return item


def _page(req: _Request, key: str, items: List[dict]) -> dict:
    """One page of a list answer; the cursor is an opaque offset into `items`."""
    cursor = (req.params or {}).get("cursor")
    start = 0
    if cursor is not None:
        if (not isinstance(cursor, str) or not re.fullmatch(r"[0-9]{1,9}", cursor)
            or int(cursor) > len(items)):
            raise RpcError(_INVALID_PARAMS, f"Invalid cursor {cursor!r}: use the nextCursor of the "
                           f"previous page")
        start = int(cursor)
    result: dict = {key: items[start:start + _TOOLS_PAGE]}
    if start + _TOOLS_PAGE < len(items):
        result["nextCursor"] = str(start + _TOOLS_PAGE)
    return result


def _name_chars(text: str) -> str:
    """text with every character outside [A-Za-z0-9_-] (what clients accept in names) as "_"."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


def _prefix_of(settings: _Settings, server: str) -> str:
    """What direct mode's names of a server's tools and prompts start with: its `prefix`
    setting, else `<server>__` in the characters clients accept."""
    own = settings.prefix(server)
    return _name_chars(server) + "__" if own is None else own


# a clash of direct mode's names: (the name, the one given instead, who holds the name, who else
# wanted it), each a (server, tool) pair; the holder's server is "" for Abstract's own tool
_Clash = Tuple[str, str, Tuple[str, str], Tuple[str, str]]


def _transparent_name(server: str, name: str, taken: Dict[str, Tuple[str, str]],
                      prefix: Optional[str] = None) -> str:
    """`prefix` (default `server__`) and the name, in the characters clients accept
    ([A-Za-z0-9_-]) and at most 64 long; a hash suffix keeps names apart that would otherwise
    collide (`taken`: name -> (server, tool)) or be cut."""
    import hashlib  # lazy: see Imports

    plain = (_name_chars(server) + "__" if prefix is None else prefix) + _name_chars(name)
    if plain and len(plain) <= 64 and taken.get(plain, (server, name)) == (server, name):
        return plain
    digest = hashlib.sha256(f"{server}\0{name}".encode()).hexdigest()[:8]
    return f"{plain[:55]}_{digest}"


def _transparent_names(lists: Dict[str, List[dict]], prefixes: Dict[str, str],
                       reserved: Iterable[str] = (),
                       clashes: Optional[List[_Clash]] = None) -> Dict[str, Tuple[str, dict]]:
    """Direct mode's names of every upstream's tools (or prompts): exposed name -> (server,
    definition), in config order and each server's own order, so the same lists always give the
    same names (_transparent_name, with each server's prefix). A name that is `reserved`
    (Abstract's own tools) or already given goes to the first; each clash is added to
    `clashes`."""
    mapping: Dict[str, Tuple[str, dict]] = {}
    taken: Dict[str, Tuple[str, str]] = {n: ("", n) for n in reserved}
    for server, items in lists.items():
        for t in items:
            key = (server, t["name"])
            exposed = _transparent_name(server, t["name"], taken, prefixes[server])
            plain = prefixes[server] + _name_chars(t["name"])
            if exposed != plain and taken.get(plain, key) != key and clashes is not None:
                clashes.append((plain, exposed, taken[plain], key))
            taken[exposed] = key
            mapping[exposed] = (server, t)
    return mapping


def _clash_text(clash: _Clash, what: str) -> str:
    """A clash of names (see _transparent_names) in words: who has the name, and the fix."""
    plain, exposed, (held_by, held), (server, name) = clash
    holder = ("that is the name of Abstract's own tool" if not held_by else
              f"server {held_by!r} (earlier in the client config) has that name already, for "
              f"its {what} {held!r}" if held_by != server else
              f"its {what} {held!r} has that name already")
    fix = (f"rename one with servers.{server}.tools.<tool>.name" if held_by == server
           and what == "tool" else f"set servers.{server}.prefix in Abstract's settings")
    return (f"{what} {name!r} of server {server!r} is listed as {exposed!r}, not {plain!r}: "
            f"{holder}; {fix} to choose its name")


# resources/read, subscriptions and completions of a URI that one of an upstream's resource
# templates matches: templates and URIs longer than this are not matched
_TEMPLATE_MAX = 2000
_URI_MATCH_MAX = 8192
_TEMPLATE_STEPS = 200000  # the most steps one URI's lookup among the templates takes (~0.1 s)
# RFC 6570: an expression's operator -> (its text's least length, characters it cannot hold).
# Level 1 ({var}) exactly: one or more characters, none of / ? #; levels 2-4 loosely.
_TEMPLATE_OPS = {"": (1, "/?#"), "+": (1, ""), "#": (0, ""), ".": (0, "/?#"), "/": (0, "?#"),
                 ";": (0, "/?#"), "?": (0, "#"), "&": (0, "#")}
_TEMPLATE_EXPR = re.compile(r"\{([+#./;?&]?)[A-Za-z0-9_%.,:*]+\}")


def _template_parts(template: Any) -> Optional[List[Any]]:
    """An RFC 6570 URI template as literal strings and (least length, stop characters) for
    each expression; None when it is no usable template."""
    if not isinstance(template, str) or not 0 < len(template) <= _TEMPLATE_MAX:
        return None
    parts: List[Any] = []
    pos = 0
    for m in _TEMPLATE_EXPR.finditer(template):
        parts += [template[pos:m.start()], _TEMPLATE_OPS[m.group(1)]]
        pos = m.end()
    parts.append(template[pos:])
    return [p for p in parts if p != ""]


def _template_matches(parts: List[Any], uri: str, budget: Optional[List[int]] = None) -> bool:
    """Whether `uri` is an expansion of the template (_template_parts): the positions each part
    can end at, in one pass per part (no backtracking: at most len(parts) * len(uri) steps).
    `budget` ([steps left], shared by the templates of one lookup) makes it False once spent,
    so that no upstream's templates make a lookup slow."""
    budget = [_TEMPLATE_STEPS] if budget is None else budget
    if len(uri) > _URI_MATCH_MAX:
        return False
    ends = [0]  # sorted positions the parts so far can end at
    for part in parts:
        budget[0] -= len(ends) + 1
        if budget[0] < 0:
            return False
        if isinstance(part, str):
            ends = [i + len(part) for i in ends if uri.startswith(part, i)]
        else:
            least, stops = part
            budget[0] -= len(uri) - ends[0]  # (the scan for stop characters)
            nxt: List[int] = []
            stop = 0  # the first stop character at or after i
            for i in ends:
                stop = max(stop, i)
                while stop < len(uri) and uri[stop] not in stops:
                    stop += 1
                nxt.extend(range(max(i + least, nxt[-1] + 1 if nxt else 0), stop + 1))
            ends = nxt
        if not ends:
            return False
    return ends[-1] == len(uri)


# resources/subscribe: the URIs the client may hold at once
_SUBSCRIPTIONS_MAX = 1000
_CLASHES_TOLD_MAX = 1000  # clashes of names told on stderr (each once), remembered


class _Transparent:
    """--expose direct: every selected upstream's tools, prompts and resources as Abstract's own."""

    def __init__(self, ctx: _ToolContext, own: Iterable[str] = ()) -> None:
        self.ctx = ctx
        self._own = own  # Abstract's own tools' names: an upstream's tool never takes one
        self._tools: Dict[str, Tuple[str, dict]] = {}  # exposed name -> (server, tool definition)
        self._prompts: Dict[str, Tuple[str, str]] = {}
        self._uris: Dict[str, str] = {}  # upstream resource URI -> server
        # every upstream's resource templates, in config order: (server, uriTemplate, parts)
        self._templates: List[Tuple[str, str, List[Any]]] = []
        self._subs: Dict[str, str] = {}  # the client's resource subscriptions: URI -> server
        self._clashes: Set[_Clash] = set()  # the clashes of names already told of on stderr
        # a transparent-mode client's tasks: taskId -> server, for its tasks/* requests
        self._tasks: "collections.OrderedDict[str, str]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def _gather(self, fn: Callable[[_Upstream], List[dict]],
                capability: str = "") -> Dict[str, List[dict]]:
        """fn over every upstream in parallel (only those that declared `capability`, when
        given); a server that fails is logged and left out."""
        def run(up: _Upstream) -> List[dict]:
            up.session()
            return fn(up) if not capability or capability in up.capabilities else []

        out = {}
        for name, got in self.ctx.upstreams.each(run).items():
            if isinstance(got, Exception):
                _log.warning("%s left out of the list: %s", name, getattr(got, "message", None)
                             or got)
            else:
                out[name] = got
        return out

    def _named(self, gathered: Dict[str, List[dict]], what: str,
               reserved: Iterable[str] = ()) -> Dict[str, Tuple[str, dict]]:
        """_transparent_names over the gathered lists, with each server's prefix; a clash is told
        on stderr once."""
        lists = {n: [t for t in gathered[n] if isinstance(t.get("name"), str)]
                 for n in self.ctx.upstreams.names() if n in gathered}
        clashes: List[_Clash] = []
        mapping = _transparent_names(lists, {n: _prefix_of(self.ctx.settings, n) for n in lists},
                                     reserved, clashes)
        for clash in clashes:
            if clash not in self._clashes and len(self._clashes) < _CLASHES_TOLD_MAX:
                self._clashes.add(clash)
                _log.warning("%s", _clash_text(clash, what))
        return mapping

    def tools(self) -> List[dict]:
        mapping = self._named(self._gather(lambda up: up.tools()), "tool", self._own)
        with self._lock:
            self._tools = mapping
        return [{**(t if self._keeps_schema(s, t) else {k: v for k, v in t.items()
                                                        if k != "outputSchema"}),
                 "name": n} for n, (s, t) in mapping.items()]

    def _keeps_schema(self, server: str, tool: dict) -> bool:
        """Whether a tool is listed with its outputSchema, and its results relayed whole. A client
        rejects a preview in place of the structuredContent a schema promises, so the schema is
        left out where a large result may be cached: unless keep_output_schemas is set, or
        caching is off for that tool."""
        if "outputSchema" not in tool or self.ctx.settings.get("keep_output_schemas"):
            return True
        policy = self.ctx.settings.cache_policy(server, tool["name"])
        return self.ctx.cache is None or not policy["enabled"]

    def names(self) -> List[str]:
        return list(self._tools)

    def lookup(self, name: str) -> Optional[Tuple[str, dict]]:
        """(server, tool definition) behind an exposed name, or None. One read of the map, which
        tools() may swap at any time (a list_changed, another client request)."""
        found = self._tools.get(name)
        if found is None:
            self.tools()  # a client may call without listing first (or after a change)
            found = self._tools.get(name)
        return found

    def call(self, call: _Call, target: Tuple[str, dict]) -> dict:
        """Call the upstream tool `target` (from lookup): its result as it is (cached when large),
        its JSON-RPC errors passed on with their codes, Abstract's own failures as isError
        results."""
        server, tool = target
        task = (call.req.params or {}).get("task")  # the client's task request: it polls itself
        task = task if isinstance(task, dict) else None
        longs: list = []  # the long strings of the answer, left undecoded (Connection.request)
        res = _relayed_call(call, self.ctx.upstreams.get(server), tool["name"], call.args, task,
                            longs)
        made = res.get("task") if task is not None and "content" not in res else None
        if isinstance(made, dict) and isinstance(made.get("taskId"), str):
            with self._lock:
                self._tasks[made["taskId"]] = server  # tasks/* for it go to this server
                while len(self._tasks) > _TASKS_MAX:
                    self._tasks.popitem(last=False)
            return res
        if "outputSchema" in tool and self._keeps_schema(server, tool):
            return res  # structuredContent must reach the client as the advertised schema says
        return _maybe_cache(call, server, tool["name"], res, structured=False, longs=longs)

    def prompts(self) -> List[dict]:
        mapping = self._named(self._gather(lambda up: up.listing("prompts/list", "prompts"),
                                           "prompts"), "prompt")
        self._prompts = {n: (s, p["name"]) for n, (s, p) in mapping.items()}
        return [{**p, "name": n} for n, (s, p) in mapping.items()]

    def _prompt(self, name: Any) -> Tuple[str, str]:
        """(server, its own name) of the prompt exposed as `name`; -32602 naming the prompts
        there are when there is none."""
        if name not in self._prompts:
            self.prompts()
        if name not in self._prompts:
            raise RpcError(_INVALID_PARAMS, f"Unknown prompt: {name}. Prompts: "
                           f"{_names_list(list(self._prompts))}")
        return self._prompts[name]

    def get_prompt(self, req: _Request) -> dict:
        params = {k: v for k, v in (req.params or {}).items() if k not in _FOLLOW_UP_PARAMS}
        server, real = self._prompt(params.get("name"))
        return self.ctx.upstreams.get(server).rpc("prompts/get", {**params, "name": real}, req)

    def resources(self) -> List[dict]:
        """Every upstream's resources, in config order; a URI two list is the first one's."""
        out, owners = [], {}
        for server, items in self._gather(lambda up: up.listing("resources/list", "resources"),
                                          "resources").items():
            for r in items:
                if isinstance(r.get("uri"), str):
                    owners.setdefault(r["uri"], server)
                    out.append(r)
        self._uris.update(owners)
        return out

    def templates(self) -> List[dict]:
        lists = self._gather(lambda up: up.listing("resources/templates/list", "resourceTemplates"),
                             "resources")
        found = []
        for server, items in lists.items():
            for t in items:
                parts = _template_parts(t.get("uriTemplate"))
                if parts is not None:
                    found.append((server, t["uriTemplate"], parts))
        self._templates = found
        return [t for items in lists.values() for t in items]

    def _matched(self, uri: str) -> Optional[str]:
        """The server of a listed URI, else of the first template (config order) it matches."""
        server = self._uris.get(uri)
        if server is None:
            budget = [_TEMPLATE_STEPS]
            server = next((s for s, _, parts in self._templates
                           if _template_matches(parts, uri, budget)), None)
            if budget[0] < 0:
                _log.warning("resource templates: matching %s against them took too long; "
                             "taken for no match", uri[:200])
        return server

    def owner(self, uri: str) -> Optional[str]:
        """The upstream behind a resource URI: the one whose resources/list gave it, else the first
        (in config order) with a resource template that matches it; both lists are asked again
        for a URI neither knows. None for Abstract's own URIs (file:, abstract://cache/) that no
        upstream listed, and for one no upstream has."""
        if uri.startswith(("file:", _CACHE_URI)):
            return self._uris.get(uri)
        server = self._matched(uri)
        if server is None:
            self.resources()
            self.templates()
            server = self._matched(uri)
        return server

    def owns(self, uri: str) -> bool:
        return self.owner(uri) is not None

    def task(self, req: _Request) -> dict:
        """tasks/get, tasks/result or tasks/cancel, for a task a <server>__<tool> call made:
        forwarded to that server as it is."""
        params = {k: v for k, v in (req.params or {}).items() if k != "_meta"}
        server = self._tasks.get(params.get("taskId"))  # type: ignore[arg-type]
        if server is None:
            raise RpcError(_INVALID_PARAMS, f"Unknown task {_dumps(params.get('taskId'))[:100]}: "
                           f"not one a <server>__<tool> call made through Abstract")
        return self.ctx.upstreams.get(server).rpc(req.method, params)

    def read(self, uri: str, req: _Request) -> dict:
        server = self.owner(uri)
        if server is None:  # (owns() said yes: a list changed since)
            raise RpcError(_INVALID_PARAMS, f"Resource not found: {uri}", {"uri": uri})
        return self.ctx.upstreams.get(server).rpc("resources/read", {"uri": uri}, req)

    # -- completion/complete
    def complete(self, req: _Request) -> dict:
        """completion/complete, for a prompt (by its exposed name) or a resource template (by its
        uriTemplate, or a URI it matches): forwarded to that prompt's or template's server with
        the prompt's own name, its answer as it is. A server that does not declare `completions`
        gets no request: the answer is no values."""
        params = {k: v for k, v in (req.params or {}).items() if k not in _FOLLOW_UP_PARAMS}
        ref, arg = params.get("ref"), params.get("argument")
        ref = ref if isinstance(ref, dict) else {}
        kind = ref.get("type")
        target = ref.get("name" if kind == "ref/prompt" else "uri" if kind == "ref/resource"
                         else "")
        if (not isinstance(target, str) or not isinstance(arg, dict)
                or not isinstance(arg.get("name"), str)):
            raise RpcError(_INVALID_PARAMS, 'completion/complete needs params.ref, {"type": '
                           '"ref/prompt", "name": "<prompt>"} or {"type": "ref/resource", "uri": '
                           '"<uriTemplate>"}, and params.argument, {"name": "<argument>", '
                           '"value": "<text so far>"}')
        if kind == "ref/prompt":
            server, real = self._prompt(target)
            ref = {**ref, "name": real}
        else:
            server = self._template_server(target)
        up = self.ctx.upstreams.get(server)
        up.session()
        if not isinstance(up.capabilities.get("completions"), dict):
            return {"completion": {"values": [], "hasMore": False}}
        return up.rpc("completion/complete", {**params, "ref": ref}, req)

    def _template_server(self, uri: str) -> str:
        """The server of a ref/resource: the one with that uriTemplate, else owner()'s."""
        for attempt in range(2):
            found = next((s for s, t, _ in self._templates if t == uri), None)
            if found is not None:
                return found
            if attempt == 0:
                self.templates()
        found = self.owner(uri)
        if found is None:
            raise RpcError(_INVALID_PARAMS, f"Unknown resource template: {uri[:200]}. Templates: "
                           f"{_names_list([t for _, t, _ in self._templates])}")
        return found

    # -- resources/subscribe and resources/unsubscribe
    def subscribe(self, req: _Request) -> dict:
        """resources/subscribe or resources/unsubscribe of an upstream's URI: forwarded to its
        server (one that declares resources.subscribe, in the handshake era), and the client's
        subscriptions kept (at most _SUBSCRIPTIONS_MAX), so that its
        notifications/resources/updated reach the client for those URIs only."""
        method, on = req.method, req.method == "resources/subscribe"
        uri = (req.params or {}).get("uri")
        if not isinstance(uri, str) or not uri:
            raise RpcError(_INVALID_PARAMS, f"{method} needs params.uri (a resource's URI)")
        server = self._subs.get(uri) or self.owner(uri)
        if server is None:
            raise RpcError(_INVALID_PARAMS, f"{method}: no upstream server has {uri[:200]} (not in "
                           f"resources/list, no resource template matches it); Abstract's own "
                           f"resources (files, cached outputs) have no subscriptions",
                           {"uri": uri})
        up = self.ctx.upstreams.get(server)
        up.session()
        why = self.no_subscriptions(up)
        if why:
            raise RpcError(_INVALID_PARAMS, f"server '{server}' has no resource subscriptions "
                           f"({why}); read {uri[:200]} again to see changes", {"uri": uri})
        with self._lock:
            had = uri in self._subs
            if on and not had and len(self._subs) >= _SUBSCRIPTIONS_MAX:
                raise RpcError(_INVALID_PARAMS, f"{method}: the client already holds "
                               f"{_SUBSCRIPTIONS_MAX} resource subscriptions, the most Abstract "
                               f"keeps; unsubscribe from some first", {"uri": uri})
            if on:  # before the request: the server may tell of a change before its answer
                self._subs[uri] = server
            else:
                self._subs.pop(uri, None)
        try:
            return up.rpc(method, {"uri": uri}, req)
        except Exception:
            if on and not had:
                with self._lock:
                    self._subs.pop(uri, None)
            raise

    @staticmethod
    def no_subscriptions(up: _Upstream) -> str:
        """Why an upstream takes no resources/subscribe; "" when it does."""
        caps = up.capabilities.get("resources")
        return ("it speaks 2026-07-28, which has no resources/subscribe" if up.modern else
                "" if isinstance(caps, dict) and caps.get("subscribe") is True else
                "its capabilities have no resources.subscribe")

    def subscribed(self, server: str, uri: Any) -> bool:
        """Whether the client subscribed to `uri` of `server` (an updated notice is relayed)."""
        return isinstance(uri, str) and self._subs.get(uri) == server

    def holds(self, uri: Any) -> bool:
        """Whether the client holds a subscription to `uri` (of any server)."""
        return isinstance(uri, str) and uri in self._subs

    def drop(self, uri: str) -> None:
        """Forget the client's subscription to `uri` without telling its server (another client
        of Abstract's still holds it: --serve)."""
        with self._lock:
            self._subs.pop(uri, None)

    def resubscribe(self, server: str, conn: Connection) -> List[str]:
        """A new run of `server` (a restart): the client's subscriptions to its URIs made again,
        not waited for (a refusal is logged); the URIs, which may have changed meanwhile."""
        with self._lock:
            uris = [u for u, s in self._subs.items() if s == server]

        def done(uri: str, fut: Future) -> None:
            if not fut.cancelled() and fut.exception() is not None:
                _log.warning("%s refused resources/subscribe of %s after its restart: %s",
                             server, uri[:200], fut.exception())

        for uri in uris:
            _, fut = conn.request("resources/subscribe", {"uri": uri})
            fut.add_done_callback(lambda f, u=uri: done(u, f))
        return uris

    def offers(self, has: Callable[[_Upstream], bool]) -> bool:
        """Whether an upstream may answer: one that `has` it, or one not started yet (what it
        offers is known only then)."""
        ups = [self.ctx.upstreams.get(n) for n in self.ctx.upstreams.names()]
        return any(not up.protocol_version or has(up) for up in ups)


def _recent_files(roots: List[str], limit: int = 500,
                  scan: int = 20000) -> List[Tuple[str, int, float]]:
    """(path, size, mtime) of the newest files in the allowed directories, newest first.

    The walk is bounded (`scan` entries, three levels deep, hidden names skipped) so a huge
    directory cannot stall the answer. A symlink is listed only when it leads to a file inside
    an allowed directory (resources/read would refuse the others anyway).
    """
    sandbox = _Sandbox(roots)
    found: List[Tuple[str, int, float]] = []
    for dfd, name, p in _bounded_walk(roots, scan=scan, hidden_dirs=False):
        if name.startswith("."):
            continue
        try:
            st = os.stat(_at(dfd, name, p), dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):  # listed only when it leads inside an allowed directory
                if sandbox.root_of(os.path.realpath(p)) is None:
                    continue
                st = os.stat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):  # not a FIFO or a device
            found.append((p, st.st_size, st.st_mtime))
    found.sort(key=lambda t: t[2], reverse=True)
    return found[:limit]


class _Terminated(BaseException):
    """Raised by _Server.on_signal into the main thread's wait (a BaseException, so no handler's
    `except Exception` can swallow it)."""


class _Server:
    """Abstract's MCP server over one client connection."""

    def __init__(self, rfile: Any, wfile: Any, sandbox: _Sandbox, upstreams: _Upstreams,
                 settings: _Settings,
                 cache: Optional[_OutputCache] = None, expose: str = "meta",
                 catalog: Optional[_Catalog] = None,
                 memory: bool = False, links: Optional[Callable[[_CacheEntry], str]] = None,
                 listen: bool = True) -> None:
        """`listen`: this server hears the upstreams' events itself (False: one session of
        several, told by _Sessions)."""
        self.sandbox, self.upstreams, self.settings = sandbox, upstreams, settings
        self.cache = cache
        self.catalog = catalog
        self.temps = _Temps()  # the files its requests are writing (_WRITES)
        self.client = ""  # the legacy client's clientInfo name (initialize)
        # the negotiated legacy version (until initialize says)
        self.version = _HANDSHAKE_VERSIONS[0]
        self.initialized = False  # a legacy session: server-to-client notifications are allowed
        self.log_level = "warning"  # upstream log messages at this level or above reach the client
        self.tools = _offered(expose, memory, cache, catalog)
        methods: Dict[str, Callable[[_Request], dict]] = {
            "initialize": self._initialize,
            "server/discover": self._discover,
            "ping": lambda req: {},
            "logging/setLevel": self._set_level,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
            "resources/list": self._resources_list,
            "resources/read": self._resources_read,
            "resources/templates/list": self._templates_list,
            "prompts/list": self._prompts_list,
            "prompts/get": self._prompts_get,
            "completion/complete": self._complete,
            "resources/subscribe": self._subscribe, "resources/unsubscribe": self._subscribe,
            "tasks/get": self._task, "tasks/result": self._task, "tasks/cancel": self._task,
        }
        # queued: handlers and upstream reader threads (progress, log, list_changed relays) only
        # queue their messages, so a slow client never holds up an upstream's reader
        self._pool = _Pool()  # the client's requests
        self.conn = Connection(rfile, wfile, name="client", pool=self._pool, queued=True,
                               half_close=True,
                               max_line=int(float(settings.get("max_client_message_mb"))
                                            * (1 << 20)),
                               requests={m: self._enveloped(m, fn) for m, fn in methods.items()},
                               notifications={"notifications/roots/list_changed":
                                              lambda params: upstreams.roots_changed()})
        self.ctx = _ToolContext(sandbox, settings, upstreams, cache, catalog, self.tools,
                                self.conn.notify, links)
        self.transparent: Optional[_Transparent] = None
        if expose in ("direct", "both"):
            self.transparent = _Transparent(self.ctx, self.tools)
        if listen:
            upstreams.listen(self.relay_log,
                             self.tools_changed if self.transparent is not None else None)
        for name in upstreams.names() if self.transparent is not None and listen else []:
            up = upstreams.get(name)
            up.on_updated, up.on_started = self.resource_updated, self.upstream_started
        self.terminated = 0  # the signal that ended serving (SIGTERM, SIGINT, SIGHUP), if any
        self._serving = self._stopping = False

    def serve(self) -> None:
        """Answer the client until its stdin closes (or a signal: _on_signals), then shut down
        within _EXIT_BUDGET_S of that moment (`since`); docs/design.md#shutdown has the timeline.

        1. Serve: the reader hands requests to the pool until EOF (or a signal).
        2. Drain: requests still running get _DRAIN_S to answer. From here on a signal only
           notes itself, so the shutdown is never cut short half way.
        3. Stop every upstream at once (_stop_runs), then kill what they left (_Descendants): a
           handler still waiting on one fails at once, rather than at its timeout, and a file
           being written stops at its next piece (_Temps)...
        4. ...and gets the rest of the drain (at least _ANSWER_GRACE_S) to queue its answer;
           one still running then (a long conversion) is answered with an error now
           (Connection.abandon), its own answer dropped.
        5. Write what is queued for the client, then end the request workers: all within the
           budget, before the client's SIGKILL. A file still being written is deleted.
        """
        since = 0.0
        try:
            try:
                self._serving = True
                if self.terminated:  # a signal came before serving began
                    raise _Terminated()
                self.conn.start()  # 1.
                # (Windows: a signal's handler runs only once the wait returns)
                while not self.conn.closed.wait(1.0 if _WINDOWS else None):
                    pass
                since = time.monotonic()
                self._stopping = True  # 2. the sequence has begun: a signal only notes itself
                self.conn.wait_idle(_DRAIN_S)  # their answers still go out
            finally:
                self._stopping = True  # (a signal ended serving: the same from here on)
        except _Terminated:
            pass
        since = since or time.monotonic()
        self.temps.stop()  # 3.
        self.upstreams.close()  # a handler still waiting on an upstream fails at once...
        # Linux, serving its own stdio: the upstreams' adopted descendants are killed now, in
        # the budget (before the client's SIGKILL) and while a signal only notes itself; at
        # undo's end a signal's default action could end Abstract before them
        _DESCENDANTS.end()
        left = since + _EXIT_BUDGET_S - time.monotonic()
        grace = max(since + _DRAIN_S - time.monotonic(), _ANSWER_GRACE_S)
        self.conn.wait_idle(max(0.0, min(grace, left - _ANSWER_GRACE_S)))  # 4. ...and says so
        if self.conn.abandon("Abstract is shutting down: the request did not finish in time"):
            _log.warning("answered the requests still running as not finished: Abstract is "
                         "shutting down")
        self.conn.finish(since + _EXIT_BUDGET_S - time.monotonic())  # 5.
        self._pool.close()  # (the reader closed it at EOF; after a signal it may still be reading)
        self._pool.join(max(0.0, since + _EXIT_BUDGET_S - time.monotonic()))
        self.temps.sweep()
        self.ctx.tables.close()  # query_output's workers killed, its tables' files removed

    def on_signal(self, signum: int) -> None:
        """SIGTERM, SIGINT or SIGHUP (called in the main thread by _on_signals' handler): stop
        serving as at EOF. Once the shutdown has begun it just goes on, neither starting over
        nor cut short; the first signal's number makes the exit status."""
        self.terminated = self.terminated or signum
        if self._serving and not self._stopping:
            raise _Terminated()

    # -- eras
    def _enveloped(self, method: str, fn: Callable[[_Request], dict]) -> _Handler:
        def handle(req: _Request) -> dict:
            outer = getattr(_WRITES, "temps", None)
            _WRITES.temps = self.temps  # its files: stopped and swept by this server's shutdown
            try:
                return enveloped(req)
            finally:
                _WRITES.temps = outer

        def enveloped(req: _Request) -> dict:
            modern = self._is_modern(req)
            if modern:  # its sampling and elicitation: offered to upstreams that start from now on
                self.upstreams.client.modern_declared(req.meta.get(_META_CAPS))
            try:
                result = fn(req)
            except _InputRequired as e:  # (only for a modern request: see _ClientLink.follow)
                return e.result
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
            raise RpcError(_INVALID_PARAMS, f"params._meta['{_META_VERSION}'] must be the protocol "
                           f"version string")
        if version not in _MODERN_VERSIONS:
            raise RpcError(_UNSUPPORTED_VERSION, f"Unsupported protocol version {version!r}",
                           {"supported": list(_MODERN_VERSIONS) + list(_HANDSHAKE_VERSIONS),
                            "requested": version})
        if not isinstance(meta.get(_META_CAPS), dict):
            raise RpcError(_INVALID_PARAMS, f"params._meta['{_META_CAPS}'] must be an object")
        return True

    def client_name(self, req: _Request) -> str:
        """The client's clientInfo name: the modern request's own, else initialize's."""
        info = req.meta.get(_META_INFO)
        name = info.get("name") if isinstance(info, dict) else None
        return name if isinstance(name, str) else self.client

    def protocol_for(self, req: _Request) -> str:
        return _MODERN_VERSIONS[0] if _META_VERSION in req.meta else self.version

    def _capabilities(self) -> dict:
        caps: dict = {"tools": {"listChanged": self.transparent is not None},
                      "resources": {"listChanged": False, "subscribe": False}, "logging": {}}
        if self.transparent is not None:
            caps["prompts"] = {"listChanged": False}
            # relayed: declared unless no upstream offers it (see _Transparent.offers)
            if self.transparent.offers(lambda up: isinstance(up.capabilities.get("completions"),
                                                             dict)):
                caps["completions"] = {}
            caps["resources"]["subscribe"] = self.transparent.offers(
                lambda up: not _Transparent.no_subscriptions(up))
            caps["tasks"] = {"cancel": {}, "requests": {"tools": {"call": {}}}}  # passed through
        return caps

    # -- methods
    def _initialize(self, req: _Request) -> dict:
        params = req.params or {}
        asked = params.get("protocolVersion")
        if not isinstance(asked, str):
            raise RpcError(_INVALID_PARAMS, "initialize needs params.protocolVersion (a string)")
        self.version = asked if asked in _HANDSHAKE_VERSIONS else _HANDSHAKE_VERSIONS[0]
        self.initialized = True
        info = params.get("clientInfo")
        self.client = str(info.get("name") or "")[:200] if isinstance(info, dict) else ""
        # roots, sampling and elicitation are the client's: upstreams are offered what it declared
        self.upstreams.client.client_declared(params.get("capabilities"), self.conn)
        return {"protocolVersion": self.version, "capabilities": self._capabilities(),
                "serverInfo": {"name": _SERVER_NAME, "version": __version__},
                "instructions": self._instructions()}

    def _discover(self, req: _Request) -> dict:
        return {"supportedVersions": list(_MODERN_VERSIONS) + list(_HANDSHAKE_VERSIONS),
                "capabilities": self._capabilities(), "instructions": self._instructions(),
                "_meta": {_META_SERVER_INFO: {"name": _SERVER_NAME, "version": __version__}}}

    def _instructions(self) -> str:
        if self.transparent is None:
            return _INSTRUCTIONS
        if "call_tool" not in self.tools:
            return _TRANSPARENT_INSTRUCTIONS
        return _INSTRUCTIONS + "\n" + _TRANSPARENT_INSTRUCTIONS

    def _set_level(self, req: _Request) -> dict:
        level = (req.params or {}).get("level")
        if level not in _LOG_LEVELS:
            raise RpcError(_INVALID_PARAMS, f"logging/setLevel needs params.level, one of "
                           f"{', '.join(_LOG_LEVELS)}")
        self.log_level = level
        self.upstreams.set_level(level)
        return {}

    def relay_log(self, server: str, params: dict) -> None:
        """An upstream's notifications/message, passed to a legacy client at or above its level."""
        level = params.get("level")
        if (self.initialized and level in _LOG_LEVELS
            and _LOG_LEVELS.index(level) >= _LOG_LEVELS.index(self.log_level)):
            logger = params.get("logger")
            # whose message
            logger = f"{server}/{logger}" if isinstance(logger, str) and logger else server
            self.conn.notify("notifications/message", {"level": level, "logger": logger,
                                                       "data": params.get("data")})

    def _tools_list(self, req: _Request) -> dict:
        tools = [t.listed() for t in self.tools.values()]
        if self.transparent is not None:
            tools += self.transparent.tools()
        return _page(req, "tools", tools)

    def _tools_call(self, req: _Request) -> dict:
        """tools/call: Abstract's own tool, or (transparent mode) an upstream's.

        1. A malformed request (no name, arguments not an object) is a JSON-RPC error.
        2. Abstract's tools get their arguments with aliases renamed and unknown names refused
           (_Tool.run), then their handler runs with a _Call over the tools' context.
        3. What the model can fix (ToolError) and a file operation that failed (OSError) come
           back as isError results it reads; anything else is the dispatcher's -32603.
        4. An unknown tool is a JSON-RPC error naming the tools there are.
        """
        params = req.params or {}
        name, args = params.get("name"), params.get("arguments")
        if not isinstance(name, str):
            raise RpcError(_INVALID_PARAMS, "tools/call needs params.name (a string)")
        if args is not None and not isinstance(args, dict):
            raise RpcError(_INVALID_PARAMS, "tools/call params.arguments must be an object")
        call = _Call(self.ctx, req, args or {}, self.protocol_for(req), self.client_name(req))
        tool = self.tools.get(name)
        try:
            if tool is not None:
                return tool.run(call)
            target = self.transparent.lookup(name) if self.transparent is not None else None
            if target is not None:
                return self.transparent.call(call, target)  # type: ignore[union-attr]
        except _ToolError as e:  # (cleaned: it may quote an upstream's or a server's words)
            return _text_result(_clean(str(e)), is_error=True)
        # a file operation no handler expected to fail: still an answer the model reads
        except OSError as e:
            _log.warning("tools/call %s: %s", name, e, exc_info=True)
            where = f" ({e.filename})" if isinstance(e.filename, str) else ""
            return _text_result(_clean(f"{name} failed: {e.strerror or e}{where}."),
                                is_error=True)
        names = list(self.tools)
        if self.transparent is not None:
            names += self.transparent.names()
        raise RpcError(_INVALID_PARAMS, f"Unknown tool: {name}. Tools: {_names_list(names)}")

    # -- prompts and resource templates: the upstreams' own, in transparent mode
    def _direct(self, req: _Request, offers: str) -> _Transparent:
        """The transparent side, or -32601 for a method Abstract answers in direct mode only."""
        if self.transparent is None:
            raise RpcError(_METHOD_NOT_FOUND, f"Method not found: {req.method} (Abstract "
                           f"{offers} with --expose direct)")
        return self.transparent

    def _prompts_list(self, req: _Request) -> dict:
        return _page(req, "prompts", self._direct(req, "offers prompts").prompts())

    def _prompts_get(self, req: _Request) -> dict:
        return self._direct(req, "offers prompts").get_prompt(req)

    def _task(self, req: _Request) -> dict:
        return self._direct(req, "passes tasks on").task(req)

    def _complete(self, req: _Request) -> dict:
        return self._direct(req, "relays completions of its upstreams' prompts").complete(req)

    def _subscribe(self, req: _Request) -> dict:
        direct = self._direct(req, "relays resource subscriptions")
        if _META_VERSION in req.meta:
            raise RpcError(_METHOD_NOT_FOUND, f"Method not found: {req.method} is not in protocol "
                           f"2026-07-28 (there, subscriptions/listen, which Abstract serves over "
                           f"HTTP, --serve); connect with initialize to subscribe")
        return direct.subscribe(req)

    def resource_updated(self, server: str, params: dict) -> None:
        """An upstream's notifications/resources/updated: passed to a legacy client when it
        subscribed to that URI of that server (through Abstract), else dropped."""
        if (self.initialized and self.transparent is not None
                and self.transparent.subscribed(server, params.get("uri"))):
            self.conn.notify("notifications/resources/updated",
                             {k: v for k, v in params.items() if k != "_meta"})

    def upstream_started(self, server: str, conn: Connection) -> None:
        """A new run of an upstream: after a restart, the client's subscriptions to its URIs are
        made again, and the client told each may have changed while the server was down."""
        for uri in self.transparent.resubscribe(server, conn) if self.transparent else []:
            if self.initialized:
                self.conn.notify("notifications/resources/updated", {"uri": uri})

    def _templates_list(self, req: _Request) -> dict:
        items = self.transparent.templates() if self.transparent is not None else []
        return _page(req, "resourceTemplates", items)

    def tools_changed(self, server: str) -> None:
        """An upstream's tools changed: tell a legacy client, whose tools list now differs."""
        if self.transparent is not None and self.initialized:
            self.conn.notify("notifications/tools/list_changed")

    # -- resources: files in the allowed directories, by file:// URI
    def _resources_list(self, req: _Request) -> dict:
        cached = [(_CACHE_URI + e.token, f"cached {e.server}.{e.tool}", e.ctype, e.chars)
                  for e in (self.cache.entries() if self.cache else [])]
        files = [(_file_uri(p), os.path.basename(p), _mime_of(p), size) for p, size,
                 _ in _recent_files(self.sandbox.roots)]
        items = [{"uri": u, "name": n, "mimeType": m, "size": size} for u, n, m, size in cached
                 + files]
        if self.transparent is not None:
            items = self.transparent.resources() + items
        return _page(req, "resources", items)

    def _resources_read(self, req: _Request) -> dict:
        """resources/read: an upstream's resource (transparent mode), a cached output, or a file
        in the allowed directories, read through the sandbox. A missing one is -32002 in the
        handshake era and -32602 in the 2026-07-28 era, as each era's spec says."""
        uri = (req.params or {}).get("uri")
        if not isinstance(uri, str):
            raise RpcError(_INVALID_PARAMS, "resources/read needs params.uri (a string)")
        missing = _INVALID_PARAMS if _META_VERSION in req.meta else _RESOURCE_NOT_FOUND
        if self.transparent is not None and self.transparent.owns(uri):
            return self.transparent.read(uri, req)
        if uri.startswith(_CACHE_URI) and self.cache is not None:
            return self._read_cached(uri, missing)
        try:
            f, path, size = self.sandbox.open_read(_uri_to_path(uri))
        except (FileNotFoundError, _NotRegular):
            raise RpcError(missing, f"Resource not found: {uri}", {"uri": uri}) from None
        except SandboxError as e:
            raise RpcError(_INVALID_PARAMS, str(e), {"uri": uri}) from None
        except OSError as e:
            raise RpcError(_INVALID_PARAMS, f"{uri} cannot be read: {e.strerror or e}",
                           {"uri": uri}) from None
        with f:
            return {"contents": [_file_contents(f, path, size, uri)]}

    def _read_cached(self, uri: str, missing: int) -> dict:
        try:
            entry = self.cache.get(uri[len(_CACHE_URI):])  # type: ignore[union-attr]
        except _ToolError as e:
            raise RpcError(missing, str(e), {"uri": uri}) from None
        too_big = RpcError(_INVALID_PARAMS, f"the cached output is {entry.chars:,} characters; "
                           f"read it in windows with retrieve_cached_output",
                           {"uri": uri})
        if entry.chars > _READ_MAX:
            raise too_big
        text = self.cache.text(entry)  # type: ignore[union-attr]
        item = _text_item({"uri": uri, "mimeType": entry.ctype}, text)
        if item is None:
            raise too_big
        return {"contents": [item]}


# ==== Serving =====================================================================
# Abstract as an MCP server over Streamable HTTP (--serve [HOST:]PORT, issue 28): the guard in
# front of every request (address, bearer token, Origin and Host, TLS), a small OAuth
# authorization server for web connectors, and the sessions behind /mcp, each a _Server of its
# own over the shared upstreams.


# -- the guard: addresses, tokens, Origin and Host, TLS
# What every request to --serve passes first (_ServeGuard.check), after the Streamable HTTP
# transport's security warning (Origin validated, loopback by default, authentication:
# https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#security-warning)
# and the resource server's 401 (basic/authorization; RFC 9728 section 5.1, RFC 6750 section 3).

_HttpReply = Tuple[int, Dict[str, str], bytes]  # status, headers, body

_SERVE_TOKEN_ENV = "ABSTRACT_SERVE_TOKEN"
_SERVE_TOKEN_MIN = 32  # characters of a token Abstract is given (a made one has 43: 256 bits)
_SERVE_TOKEN_FILE_MAX = 4096  # bytes of the token file read
_GUARD_HOSTS_KEPT = 64  # Host headers whose check is kept (past it, the kept ones are dropped)
# what a client without a token must reach while OAuth is on (the authorization server's
# paths, _AuthServer.handles; the well-known ones with their path suffixes too); the rest of
# the server asks for a token
_SERVE_OPEN_PATHS = ("/.well-known/oauth-protected-resource",
                     "/.well-known/oauth-authorization-server",
                     "/.well-known/openid-configuration", "/register", "/authorize", "/token",
                     "/revoke")


def _serve_address(text: str) -> Tuple[str, int]:
    """--serve's [HOST:]PORT ("8080", "127.0.0.1:8080", "[::1]:8080", "0.0.0.0:0"): host
    127.0.0.1 unless given; ConfigError naming the text and the form otherwise."""
    return _parse_hostport(text, "--serve")


def _is_loopback(host: str) -> bool:
    """Whether `host` (a name, or an address with IPv6 unbracketed) is this machine only:
    localhost, 127.0.0.0/8, ::1 (::ffff:127.0.0.1 too)."""
    import ipaddress  # lazy: see Imports

    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def _serve_url(host: str, port: int, tls: bool) -> str:
    """The server's base URL (no path): http://127.0.0.1:8080, https://[::1]:8443."""
    return f"{'https' if tls else 'http'}://{f'[{host}]' if ':' in host else host}:{port}"


def _serve_folder(environ: Dict[str, str]) -> Path:
    """Where --serve keeps its secrets (the token file): beside the saved logins, in the
    user's config folder (_config_home: %APPDATA%\\Abstract\\serve on Windows)."""
    return _config_home(environ) / "serve"


def _checked_token(token: str, where: str) -> str:
    """`token` if it is long enough and a header can carry it (then masked in every log line
    and error: _SECRETS); ConfigError naming `where` otherwise."""
    if len(token) < _SERVE_TOKEN_MIN or not _OAUTH_TOKEN_RE.fullmatch(token):
        raise ConfigError(f"{where} must hold a token of at least {_SERVE_TOKEN_MIN} visible ASCII "
                          f"characters without spaces (it has {len(token)} characters); make one "
                          f"with: python3 -c \"import secrets; print(secrets.token_urlsafe(32))\"")
    _SECRETS.add(token)
    return token


def _read_token(path: Path) -> Optional[str]:
    """The token file's token (None when there is no file); ConfigError if it cannot be read.
    One that others may read (POSIX) is used, with a warning."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(f"cannot read the --serve token file {path}: {e.strerror or e}; "
                          f"remove it, and a new token is made") from None
    with os.fdopen(fd, "rb") as f:
        if not _WINDOWS and os.fstat(f.fileno()).st_mode & 0o077:
            _log.warning("the --serve token file %s may be read by other users: chmod 600 it",
                         path)
        raw = f.read(_SERVE_TOKEN_FILE_MAX)
    return raw.decode("ascii", "replace").strip()


def _serve_token(environ: Dict[str, str]) -> str:
    """The bearer token --serve asks of its clients: ABSTRACT_SERVE_TOKEN when set (refused when
    shorter than _SERVE_TOKEN_MIN), else the token file in _serve_folder, made on first use
    (256 bits of secrets.token_urlsafe, 0600 in a 0700 folder, by the atomic writer) and never
    overwritten. On Windows the file's mode is not enforced: the per-user %APPDATA% it lies in
    is private by its ACL, as for the saved logins."""
    given = environ.get(_SERVE_TOKEN_ENV)
    if given:
        return _checked_token(given, _SERVE_TOKEN_ENV)
    path = _serve_folder(environ) / "token"
    token = _read_token(path)
    if token is None:
        import secrets  # lazy: see Imports

        folder = _own_folder(path.parent, "the --serve folder")
        made = _write_new(folder, "token", "", f"{secrets.token_urlsafe(32)}\n".encode(), 0o600)
        if made != str(path):  # another Abstract made the file meanwhile: its token stands
            os.unlink(made)
        else:
            _log.info("made the --serve token file %s (print the token: abstract --serve-token)",
                      path)
        token = _read_token(path) or ""
    return _checked_token(token, f"the --serve token file {path} (remove it, and a new token is "
                                 f"made)")


def _serve_tls(cert: str, key: str) -> Any:
    """The server side's ssl.SSLContext (TLS 1.2 at least) from a PEM certificate chain and its
    private key (`key` "" when `cert` holds both). ConfigError naming the file and the fix: one
    missing, not PEM, a key that does not match, or one protected by a passphrase (none is asked
    for: Abstract may run without a terminal)."""
    try:
        import ssl  # lazy: see Imports
    except ImportError:  # pragma: no cover (a Python built without OpenSSL)
        raise ConfigError("--serve-cert needs Python's ssl module, which this Python "
                          "lacks") from None
    for flag, path, what, mark in (
            ("--serve-cert", cert, "certificate (-----BEGIN CERTIFICATE-----)", b"CERTIFICATE--"),
            ("--serve-key" if key else "--serve-cert", key or cert,
             "private key (-----BEGIN PRIVATE KEY-----)", b"PRIVATE KEY--")):
        try:
            with open(path, "rb") as f:
                pem = f.read(1 << 20)
        except OSError as e:
            raise ConfigError(f"{flag} {path}: {e.strerror or e}") from None
        if mark not in pem:
            raise ConfigError(f"{flag} {path} holds no PEM {what}"
                              + ("; give the key with --serve-key" if not key else ""))

    def no_passphrase() -> str:
        raise ConfigError(f"--serve-key {key or cert} is protected by a passphrase, which Abstract "
                          f"does not ask for: write it without one (openssl pkey -in KEY -out "
                          f"NEWKEY), readable by you only")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key or None, password=no_passphrase)
    except ssl.SSLError as e:
        why = ("the key does not match the certificate" if "MISMATCH" in str(e)
               else f"they cannot be used ({e.reason or e})")
        raise ConfigError(f"--serve-cert {cert} and its key {key or cert}: {why}") from None
    return context


def _serve_refusal(host: str, tls: bool, auth: bool, insecure: bool) -> str:
    """"" when `host` may be served so; else the one-line reason: an address other machines can
    reach is served with TLS and authentication, or with --serve-insecure."""
    if _is_loopback(host) or insecure or (tls and auth):
        return ""
    lacking = " and no ".join(w for w, have in (("TLS", tls), ("authentication", auth)) if not have)
    return (f"--serve {host}: an address other machines can reach is served only with TLS and "
            f"authentication, and this one would have no {lacking}. Give --serve-cert FILE and "
            f"--serve-key FILE, or serve on 127.0.0.1 (behind a tunnel or a reverse proxy), or "
            f"add --serve-insecure if you mean it")


def _header(headers: Mapping[str, str], name: str) -> Optional[str]:
    """A request header by name, in any case (http.server's headers, or a plain dict)."""
    value = headers.get(name)
    if value is None:
        low = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == low), None)
    return value


def _split_host(value: str, default_port: int) -> Optional[Tuple[str, int]]:
    """A Host header's (name, port), the name lowercased and an IPv6 one unbracketed; None
    when malformed."""
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^\[\]:]+)(?::([0-9]{1,5}))?", value.strip())
    if m is None:
        return None
    return m.group(1).strip("[]").lower(), int(m.group(2)) if m.group(2) else default_port


def _shown(text: str) -> str:
    """A header value of a request, fit to quote in its answer (cut, no control character)."""
    return _escape_controls(text[:200])


def _bearer(value: Optional[str]) -> str:
    """The token of an Authorization header's Bearer credential ("Bearer" in any case), or
    ""."""
    scheme, _, token = (value or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _origin_keys(origins: Sequence[str]) -> List[Tuple[str, str, int]]:
    """The allowed origins as _origin_key compares them; ConfigError for one that is not an
    origin."""
    keys = []
    for given in origins:
        key = _origin_key(given)
        if key is None:
            raise ConfigError(f"--serve-origin needs an origin such as https://claude.ai "
                              f"(scheme://host[:port], no path), not {given!r}")
        keys.append(key)
    return keys


def _serve_public(args: argparse.Namespace, settings: _Settings) -> str:
    """The public origin of a tunnel or reverse proxy in front of --serve (--serve-public-url,
    else serve.public_url), lowercased, without a trailing slash; "" when neither is given.
    ConfigError for one that is not an origin, or that is http on a host other than loopback
    (OAuth's codes and tokens travel through it)."""
    flag = args.serve_public_url
    given, where = (flag, "--serve-public-url") if flag else (settings.serve("public_url"),
                                                              "serve.public_url")
    if not given:
        return ""
    key = _origin_key(given)
    if key is None:
        raise ConfigError(f"{where} needs the public origin of the tunnel or proxy, such as "
                          f"https://tunnel.example.net (https://host[:port]; no path, query or "
                          f"fragment), not {_shown(given)!r}")
    if key[0] != "https" and not _is_loopback(key[1]):
        raise ConfigError(f"{where} {_shown(given)}: a public URL must be https (http only on a "
                          f"loopback host such as localhost): OAuth's codes and tokens go "
                          f"through it")
    # rebuilt from its parts as a browser writes an origin (no default port, no stray "?", "#"
    # or ":"): a client compares the resource with the URL it was given (the Python SDK netloc
    # by netloc), so https://host:443 would be refused to one given https://host
    url = _serve_url(key[1], key[2], key[0] == "https")
    return url[:-len(f":{key[2]}")] if key[2] == (443 if key[0] == "https" else 80) else url


# the headers a proxy or tunnel adds: a request that carries one did not come from this machine
# directly, even when its Host is the bound loopback address (a proxy that rewrites Host)
_SERVE_FORWARDED = ("Forwarded", "X-Forwarded-Host", "X-Forwarded-For")


def _named_base(headers: Mapping[str, str], local: str, public: str) -> str:
    """The base URL a request is answered in the name of (the issuer, the resource, the
    resource metadata's address): the loopback name it reached this server by (localhost,
    127.0.0.1, [::1]) with the bound port, when it came through no proxy (a client checks that
    the resource and issuer are the address it connected to); else `public` (serve.public_url)
    when there is one; else `local`, the address bound. All name this one server: a token got
    by one works at all."""
    p = urllib.parse.urlsplit(local)
    port = p.port or (443 if p.scheme == "https" else 80)
    seen = _split_host(_header(headers, "Host") or "", port)
    if seen is not None and _is_loopback(seen[0]) and seen[1] == port and not any(
            _header(headers, h) is not None for h in _SERVE_FORWARDED):
        return _serve_url(seen[0], port, p.scheme == "https")
    return public or local


class _ServeGuard:
    """What every request to --serve passes first (`check`), in this order:

    1. Origin (DNS rebinding, the transport's MUST): a request that carries one must come from
       the server's own origin (scheme, a name of the bound address, the port; on loopback any
       loopback name) or one allowed by serve.origins / --serve-origin: else 403. A request
       without Origin (not from a browser) passes.
    2. Host, on a loopback address: a loopback name with the server's port, or the host of an
       allowed origin (a tunnel or reverse proxy that keeps the public Host): else 421
       (Misdirected Request, as the MCP Python SDK answers; RFC 9110 section 15.5.20).
    3. Authentication, unless `token` is "" and there is no `verify` (--serve-insecure):
       `Authorization: Bearer <token>`, the server's token (hmac.compare_digest) or an OAuth
       access token `verify` accepts: else 401 with WWW-Authenticate (RFC 6750: Bearer
       resource_metadata="<url>" when OAuth is on, realm="abstract" otherwise; error=
       "invalid_token" when a token was sent). CORS preflights (OPTIONS) and, while OAuth is
       on, the authorization server's paths (_SERVE_OPEN_PATHS) need none.

    `public` (serve.public_url: a tunnel's or reverse proxy's origin) is allowed as an origin
    and its host as a Host, and the 401 of a request that came through it names its metadata
    (_named_base). `who` names the credential a request carries (a session is bound to it).

    A refusal's body is a JSON-RPC error without id saying what to fix. No token is logged:
    refusals are logged at debug level, without the query."""

    def __init__(self, host: str, port: int, token: str, origins: Sequence[str] = (),
                 tls: bool = False, verify: Optional[Callable[[str], Any]] = None,
                 resource_metadata: str = "", public: str = "") -> None:
        if not 0 < port < 65536:  # (the Host and Origin checks compare it: the port bound)
            raise ValueError(f"_ServeGuard needs the port the server is bound to, not {port}")
        self.host, self.port, self.tls = host.lower(), port, tls
        self.loopback = _is_loopback(host)
        self.url = _serve_url(host, port, tls)  # (its origin; the MCP endpoint is url + "/mcp")
        self._scheme = "https" if tls else "http"
        self._token = token.encode("utf-8")
        self._verify, self._metadata, self.public = verify, resource_metadata, public
        keys = _origin_keys(list(origins) + ([public] if public else []))
        self._origins = set(keys)
        self._names = {k[1] for k in keys}  # the Host names a tunnel or proxy passes on
        self._hosts: Dict[Optional[str], bool] = {}  # _host_ok's answers (a client sends one)
        _SECRETS.add(token)

    @property
    def authenticates(self) -> bool:
        return bool(self._token) or self._verify is not None

    def check(self, method: str, path: str, headers: Mapping[str, str]) -> Optional[_HttpReply]:
        """None: go on. Else the reply to send instead (403, 421 or 401: see the class)."""
        host, origin = _header(headers, "Host"), _header(headers, "Origin")
        # the approval page's form: its page has Referrer-Policy no-referrer, so browsers send
        # `Origin: null` with its POST (Fetch: "append a request Origin header"); its ticket
        # and the server's token are what it needs (_AuthServer._approve)
        form = (method == "POST" and bool(self._metadata) and origin is not None
                and origin.strip() == "null" and path.partition("?")[0] == "/authorize")
        if origin is not None and not form and not self._origin_ok(origin, host):
            return self._refuse(method, path, 403, (
                f"Forbidden: requests from the web page at {_shown(origin)} are not allowed "
                f"(DNS rebinding protection). If that page is an MCP client you trust, start "
                f"Abstract with --serve-origin {_shown(origin)} (or add it to serve.origins in "
                f"its settings)"))
        if self.loopback and not self._host_ok(host):
            return self._refuse(method, path, 421, (
                f"Misdirected Request: Host {_shown(host or '')!r} is not this server, which "
                f"serves on {self.url} (DNS rebinding protection). Connect to {self.url}/mcp; "
                f"behind a tunnel or proxy that keeps its public Host, start Abstract with "
                f"--serve-origin <its public origin>"))
        if method == "OPTIONS" or self._open(path) or not self.authenticates:
            return None
        return self._authenticate(method, path, headers)

    def cors_origin(self, headers: Mapping[str, str]) -> str:
        """The request's Origin when it is one the guard allows (its answer may then be read
        by that page: CORS); "" otherwise, or without one."""
        origin = _header(headers, "Origin")
        ok = origin is not None and self._origin_ok(origin, _header(headers, "Host"))
        return origin.strip() if ok and origin is not None else ""

    def _origin_ok(self, origin: str, host: Optional[str]) -> bool:
        key = _origin_key(origin)
        if key is None or key in self._origins:
            return key is not None
        scheme, name, port = key
        if scheme != self._scheme or port != self.port:
            return False
        if self.loopback:
            return _is_loopback(name)
        # the name the browser reached this address by (every interface: any name; the Host
        # check is for loopback, where rebinding reaches a server that needs no address)
        seen = _split_host(host or "", self.port)
        return name == self.host or (seen is not None and seen == (name, port))

    def _host_ok(self, host: Optional[str]) -> bool:
        ok = self._hosts.get(host)
        if ok is None:  # (parsing the address is most of a small request's check: kept)
            seen = _split_host(host or "", 443 if self.tls else 80)
            ok = seen is not None and ((_is_loopback(seen[0]) and seen[1] == self.port)
                                       or seen[0] in self._names)
            if len(self._hosts) >= _GUARD_HOSTS_KEPT:
                self._hosts.clear()
            self._hosts[host] = ok
        return ok

    def _open(self, path: str) -> bool:
        """A path of the authorization server, reached without a token while OAuth is on."""
        path = path.partition("?")[0]
        return bool(self._metadata) and any(path == p or path.startswith(p + "/")
                                            for p in _SERVE_OPEN_PATHS)

    def who(self, headers: Mapping[str, str]) -> str:
        """Whom the request's credential names: "token" (the server's token), "oauth:<id>"
        (an OAuth access token: its approval's id, the same across refreshes), "" when
        authentication is off or the token is not accepted."""
        if not self.authenticates:
            return ""
        return self._identify(_bearer(_header(headers, "Authorization"))) or ""

    def _identify(self, token: str) -> Optional[str]:
        import hmac  # lazy: see Imports

        if not token:
            return None
        if self._token and hmac.compare_digest(token.encode("utf-8", "surrogatepass"),
                                               self._token):
            return "token"
        return self._verified(token)

    def _authenticate(self, method: str, path: str, headers: Mapping[str, str]
                      ) -> Optional[_HttpReply]:
        token = _bearer(_header(headers, "Authorization"))
        if self._identify(token) is not None:
            return None
        metadata, base = self._metadata, _named_base(headers, self.url, self.public)
        if metadata and base != self.url:
            metadata = base + urllib.parse.urlsplit(metadata).path
        params = ([f'resource_metadata="{metadata}"'] if metadata
                  else ['realm="abstract"']) + (['error="invalid_token"'] if token else [])
        how = ("or log in with OAuth (your client does it when it supports OAuth)"
               if self._metadata else "")
        why = ("the bearer token is wrong, or has expired" if token
               else "this server needs a bearer token")
        return self._refuse(method, path, 401, (
            f"Unauthorized: {why}. Send 'Authorization: Bearer <token>' with the server's token "
            f"(its user prints it with: abstract --serve-token){', ' + how if how else ''}"),
            {"WWW-Authenticate": "Bearer " + ", ".join(params)})

    def _verified(self, token: str) -> Optional[str]:
        """`verify`'s answer as whom the token names: "oauth:<id>" when it names the approval
        (a string), "oauth" for a bare yes; None for no, without `verify`, or when it raises
        (logged, without the token)."""
        verify = self._verify
        try:
            said = verify(token) if verify is not None else None
        except Exception as e:  # (the authorization server's bug is no way in)
            _log.warning("serve: checking an OAuth access token failed: %s", type(e).__name__)
            return None
        if not said:
            return None
        return f"oauth:{said}" if isinstance(said, str) else "oauth"

    @staticmethod
    def _refuse(method: str, path: str, status: int, message: str,
                headers: Optional[Dict[str, str]] = None) -> _HttpReply:
        _log.debug("serve: %s %s refused with %d", method, path.partition("?")[0][:200], status)
        # (the transport allows a JSON-RPC error response without id in such a body)
        body = _dumps({"jsonrpc": "2.0", "error": {"code": _INVALID_REQUEST, "message": message}})
        return status, {"Content-Type": "application/json", **(headers or {})}, body.encode()


def _serve_origins(args: argparse.Namespace, settings: _Settings) -> List[str]:
    """The browser origins allowed besides the server's own: serve.origins and --serve-origin
    (ConfigError for one of those that is not an origin)."""
    _origin_keys(args.serve_origin or [])
    return list(settings.serve("origins")) + list(args.serve_origin or [])


def _serve_flags(args: argparse.Namespace) -> None:
    """The --serve-* flags that go with --serve are given with it."""
    for flag, given in (("--serve-cert", args.serve_cert), ("--serve-key", args.serve_key),
                        ("--serve-origin", args.serve_origin),
                        ("--serve-public-url", args.serve_public_url),
                        ("--serve-insecure", args.serve_insecure)):
        if given and not args.serve:
            raise ConfigError(f"{flag} is an option of --serve [HOST:]PORT, which is not given")
    if args.serve_key and not args.serve_cert:
        raise ConfigError("--serve-key needs --serve-cert FILE (the certificate it goes with)")


def _serve_preflight(args: argparse.Namespace, settings: _Settings, environ: Dict[str, str]
                     ) -> Optional[Tuple[str, int, Any]]:
    """--serve checked before anything starts: (host, port, the TLS context or None), None
    without --serve. ConfigError for a --serve-* flag without it, a bad address, certificate,
    key or origin, a bad token in the environment, or an address that may not be served so
    (_serve_refusal)."""
    _serve_flags(args)
    if not args.serve:
        return None
    host, port = _serve_address(args.serve)
    tls = _serve_tls(args.serve_cert, args.serve_key or "") if args.serve_cert else None
    _serve_origins(args, settings)
    _serve_public(args, settings)
    why = _serve_refusal(host, tls is not None, not args.serve_insecure, args.serve_insecure)
    if why:
        raise ConfigError(why)
    if not args.serve_insecure and environ.get(_SERVE_TOKEN_ENV):
        _checked_token(environ[_SERVE_TOKEN_ENV], _SERVE_TOKEN_ENV)
    return host, port, tls


def _serve_guard(args: argparse.Namespace, settings: _Settings, environ: Dict[str, str],
                 host: str, port: int, tls: bool, verify: Optional[Callable[[str], Any]] = None,
                 resource_metadata: str = "") -> _ServeGuard:
    """The guard of --serve on host:port (the port bound: not 0), from the flags and settings:
    the token (_serve_token, made on first use), the origins, the public URL; `verify` and
    `resource_metadata` from the authorization server when OAuth is on. --serve-insecure turns
    authentication off, and says so loudly."""
    why = _serve_refusal(host, tls, not args.serve_insecure, args.serve_insecure)
    if why:
        raise ConfigError(why)
    origins, public = _serve_origins(args, settings), _serve_public(args, settings)
    if not args.serve_insecure:
        return _ServeGuard(host, port, _serve_token(environ), origins, tls, verify,
                           resource_metadata, public)
    url = _serve_url(host, port, tls)
    reach = ("any program on this machine" if _is_loopback(host)
             else f"anyone who can reach {host} over the network")
    _log.warning("--serve-insecure: AUTHENTICATION IS OFF%s: %s can use every upstream server "
                 "through Abstract at %s/mcp. Meant for the conformance suite and local "
                 "experiments; without --serve-insecure a bearer token is required",
                 "" if tls or _is_loopback(host) else " AND TLS IS OFF (all of it in clear text)",
                 reach, url)
    return _ServeGuard(host, port, "", origins, tls, public=public)


def _serve_lines(args: argparse.Namespace, settings: _Settings, environ: Dict[str, str],
                 host: str, port: int, tls: Any) -> List[str]:
    """--check: what --serve would serve (the address, TLS, authentication, OAuth, origins);
    no token file is made."""
    where = ("loopback: this machine only" if _is_loopback(host)
             else "other machines can reach it")
    if not port:
        where += "; port 0: a free one, named on stderr when serving"
    lines = [f"serve: {_serve_url(host, port, tls is not None)}/mcp ({where}); TLS "
             f"{'on: ' + args.serve_cert if tls is not None else 'off'}"]
    if args.serve_insecure:
        lines.append("serve: authentication: OFF (--serve-insecure)")
    elif environ.get(_SERVE_TOKEN_ENV):
        lines.append(f"serve: authentication: bearer token from {_SERVE_TOKEN_ENV}")
    else:
        path = _serve_folder(environ) / "token"
        made = "print it: abstract --serve-token" if path.exists() else "made on first use"
        lines.append(f"serve: authentication: bearer token in {path} ({made})")
    oauth = ("off (--serve-insecure)" if args.serve_insecure else "on" if settings.serve("oauth")
             else "off (serve.oauth is false)")
    lines.append(f"serve: OAuth for web connectors: {oauth}")
    origins = _serve_origins(args, settings)
    lines.append(f"serve: browser origins allowed besides its own: "
                 f"{', '.join(origins) if origins else 'none'}")
    public = _serve_public(args, settings)
    lines.append(f"serve: public URL (a tunnel or reverse proxy): {public}/mcp; OAuth names "
                 f"itself by it to clients that come through it" if public else
                 "serve: public URL (a tunnel or reverse proxy): none")
    return lines


# -- the authorization server (OAuth 2.1 for web connectors)
# Web connectors (claude.ai, ChatGPT) speak OAuth, not static tokens: when serving, Abstract is its
# own small authorization server (https://modelcontextprotocol.io/specification/2025-11-25/basic/
# authorization): protected resource metadata (RFC 9728), authorization server metadata (RFC
# 8414), dynamic registration of public clients (RFC 7591), the authorization code grant with
# PKCE S256 only (RFC 7636; OAuth 2.1), an approval page that asks for the server's token before a
# code is issued, rotating refresh tokens (OAuth 2.1 section 4.3.1) and revocation (RFC 7009).
# Only the sha256 of a code or token is kept; none is ever logged.

_AS_BODY_MAX = 64 * 1024  # largest request body (a form or a registration)
_AS_FILE_MAX = 8 * 1024 * 1024  # largest state file read back
_AS_CLIENTS_MAX = 1000  # clients kept (past it the unapproved, then the longest unused, go)
_AS_GRANTS_MAX = 1000  # approvals with live tokens (past it the oldest is revoked)
_AS_CODES_MAX = 256  # authorization codes in memory (issued in the last _AS_KEEP_S)
_AS_PENDING_MAX = 256  # approval pages open at once (past it the oldest expires)
_AS_ATTEMPTS = 5  # wrong tokens one approval page takes; then it is closed
_AS_CODE_S = 60.0  # an authorization code's life
_AS_KEEP_S = 600.0  # how long a used code (for reuse detection) and an approval page are kept
_AS_ACCESS_S = 3600.0  # an access token's life
_AS_REFRESH_S = 30 * 86400.0  # a refresh token's life from its last use
_AS_ACCESS_PER = 4  # live access tokens kept per approval (the oldest go first)
_AS_SPENT_PER = 16  # spent refresh tokens remembered per approval (their reuse revokes it)
_AS_URIS_MAX = 5  # redirect_uris per client
_AS_URI_LEN = 512  # characters in a redirect URI
_AS_NAME_LEN = 100  # characters of client_name kept (shown on the approval page)
_AS_STATE_LEN = 1024  # characters in the state passed back
_AS_REGISTER_MAX = 60  # registrations in _AS_REGISTER_S; past it 429 (with Retry-After)
_AS_REGISTER_S = 60.0
_AS_FILE = "authserver"  # its state: <folder>/authserver-<hash>.json (_TokenStore's names)
_AS_FORM = {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store",
            "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            # no form-action: browsers apply it to the redirect after the form's POST
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                       "frame-ancestors 'none'; base-uri 'none'"}
_AS_VERIFIER_RE = re.compile(r"[A-Za-z0-9._~-]{43,128}")  # RFC 7636 section 4.1
_AS_CHALLENGE_RE = re.compile(r"[A-Za-z0-9_-]{43}")  # base64url of a sha256, unpadded
_AS_LOOPBACK_RE = re.compile(r"localhost|::1|127(?:\.[0-9]{1,3}){3}", re.IGNORECASE)


def _as_sha(text: str) -> str:
    import hashlib  # lazy: see Imports

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _as_json(status: int, doc: Any, cache: bool = False) -> _HttpReply:
    """A JSON answer; never cached unless `cache` (metadata), as RFC 6749 section 5.1 asks."""
    head = {"Content-Type": "application/json"}
    head.update({"Cache-Control": "max-age=300"} if cache else
                {"Cache-Control": "no-store", "Pragma": "no-cache"})
    return status, head, _dumps(doc).encode("utf-8")


def _as_error(status: int, code: str, why: str) -> _HttpReply:
    """An OAuth error answer (RFC 6749 section 5.2, RFC 7591 section 3.2.2)."""
    return _as_json(status, {"error": code, "error_description": why})


def _as_form(body: bytes) -> Dict[str, str]:
    """A form's fields; ValueError for one given twice (RFC 6749 section 3.1) or bad UTF-8."""
    pairs = urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True,
                                   max_num_fields=50)
    form = dict(pairs)
    if len(form) != len(pairs):
        dup = sorted({k for k, _ in pairs if sum(1 for j, _ in pairs if j == k) > 1})[0]
        raise ValueError(f"the parameter {dup[:40]} is given more than once")
    return form


def _sans_port(uri: str) -> str:
    """A redirect URI compared as RFC 8252 section 7.3 says: on a loopback host any port."""
    try:
        p = urllib.parse.urlsplit(uri)
    except ValueError:
        return uri
    if p.scheme != "http" or not _AS_LOOPBACK_RE.fullmatch(p.hostname or ""):
        return uri
    host = f"[{p.hostname}]" if ":" in (p.hostname or "") else p.hostname
    return urllib.parse.urlunsplit(("http", host or "", p.path, p.query, ""))


def _redirect_problem(uri: Any) -> str:
    """Why `uri` cannot be a redirect URI ("" if it can): https, or http on a loopback host (RFC
    8252 section 7.3), no fragment or credentials (RFC 6749 section 3.1.2), bounded."""
    if not isinstance(uri, str) or not uri or len(uri) > _AS_URI_LEN or _URL_BAD_RE.search(uri):
        return (f"each redirect URI must be a URL of at most {_AS_URI_LEN} characters, without "
                f"spaces or control characters")
    try:
        p = urllib.parse.urlsplit(uri)
        p.port  # (raises ValueError for a bad one)
    except ValueError:
        return f"{uri[:100]} is not a valid URL"
    if "#" in uri or p.username is not None:
        return f"{uri[:100]} has a fragment or credentials; redirect URIs may have neither"
    if not (p.scheme == "https" and p.hostname) and not (
            p.scheme == "http" and _AS_LOOPBACK_RE.fullmatch(p.hostname or "")):
        return (f"{uri[:100]} is neither https nor http on a loopback host (127.0.0.1, [::1], "
                f"localhost)")
    return ""


def _as_client_ok(c: Any) -> bool:
    """Whether a client read back from the state file has the shape Abstract writes."""
    return (isinstance(c, dict) and isinstance(c.get("redirect_uris"), list)
            and all(isinstance(u, str) for u in c["redirect_uris"])
            and isinstance(c.get("client_name", ""), str)
            and isinstance(c.get("used", 0), (int, float)))


def _as_grant_ok(g: Any) -> bool:
    """Whether an approval read back from the state file has the shape Abstract writes."""
    num = (int, float)
    return (isinstance(g, dict) and isinstance(g.get("client_id"), str)
            and isinstance(g.get("refresh"), str) and isinstance(g.get("access"), dict)
            and all(isinstance(t, num) for t in g["access"].values())
            and isinstance(g.get("spent"), list) and all(isinstance(h, str) for h in g["spent"])
            and isinstance(g.get("refresh_expires"), num) and isinstance(g.get("used", 0), num))


def _approval_page(name: str, where: str, issuer: str, ticket: str, error: str = "") -> bytes:
    """The approval page: who asks, and a form for the server's token (all text escaped)."""
    esc = html.escape
    who = esc(_escape_controls(name) or "An unnamed app")
    note = f'<p class="err">{esc(error)}</p>' if error else ""
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Allow access to "
            f"Abstract?</title><style>body{{font:16px sans-serif;max-width:36em;margin:3em auto;"
            f"padding:0 1em}}.err{{color:#b00}}input{{width:100%;padding:.4em}}</style></head>"
            f"<body><h1>Allow {who} to use Abstract?</h1><p><b>{who}</b> (returning to "
            f"<code>{esc(where)}</code>) asks to use the MCP server at <code>{esc(issuer)}</code> "
            f"on your behalf: every tool it offers.</p><p>To allow it, enter this server's token "
            f"(<code>abstract --serve-token</code> prints it). Refuse if you did not start this."
            f"</p>{note}<form method=\"post\" action=\"/authorize\"><input type=\"hidden\" "
            f"name=\"ticket\" value=\"{esc(ticket)}\"><p><input type=\"password\" name=\"token\" "
            f"autocomplete=\"off\" autofocus aria-label=\"server token\"></p><p><button "
            f"name=\"decision\" value=\"allow\">Allow</button> <button name=\"decision\" "
            f"value=\"deny\">Refuse</button></p></form></body></html>").encode("utf-8")


def _refused_page(status: int, why: str) -> _HttpReply:
    """An authorization request that cannot be sent back to its client: told here instead."""
    page = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Abstract: authorization "
            f"refused</title></head><body><h1>Authorization refused</h1><p>"
            f"{html.escape(why)}</p></body></html>")
    return status, dict(_AS_FORM), page.encode("utf-8")


class _Registrations:
    """The clients registered and never approved, and the pace of /register (issue 28). Such a
    client is kept in memory only (_AS_CLIENTS_MAX at most: the oldest goes first) and is
    written to the state file when its user first approves it: registration needs no token, so
    a flood of them writes nothing to disk and cannot push out a client in use. At most
    _AS_REGISTER_MAX registrations in _AS_REGISTER_S, so that one waiting for its approval
    outlives its approval page (_AS_KEEP_S) even under a flood."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: "collections.OrderedDict[str, dict]" = collections.OrderedDict()
        self._times: "collections.deque[float]" = collections.deque()  # of the last ones

    def wait(self) -> float:
        """0.0 when a registration may come now (it is counted); else the seconds until one
        may."""
        now = self._clock()
        with self._lock:
            while self._times and (self._times[0] + _AS_REGISTER_S <= now
                                   or len(self._times) > _AS_REGISTER_MAX):
                self._times.popleft()
            if len(self._times) >= _AS_REGISTER_MAX:
                return float(max(1, math.ceil(self._times[0] + _AS_REGISTER_S - now)))
            self._times.append(now)
            return 0.0

    def add(self, cid: str, client: dict) -> None:
        with self._lock:
            self._clients[cid] = client
            while len(self._clients) > _AS_CLIENTS_MAX:
                self._clients.popitem(last=False)

    def get(self, cid: str) -> Optional[dict]:
        with self._lock:
            return self._clients.get(cid)

    def pop(self, cid: str) -> Optional[dict]:
        with self._lock:
            return self._clients.pop(cid, None)


class _AuthServer:
    """Abstract's authorization server for its HTTP clients (issue 28, item 3).

    `respond` answers the paths `handles` names; `verify` says whether a bearer token is an
    access token it issued and still live. Clients and approvals (hashed tokens) are kept in one
    JSON file in `folder`, written whole by the atomic writer under _TokenStore's lock file, so
    several Abstracts may share it and a restart keeps them; codes and open approval pages live
    in memory only. `approve(token)`: whether the token typed on the approval page is the
    server's. Every count is bounded; a damaged file is moved aside and started afresh.

    `public` (serve.public_url): a tunnel's or proxy's origin. A request that came through it
    is answered in its name (issuer, resource, the redirect's iss), one that came to the address
    bound in that one's (_named_base): both name this server, and tokens work at both.
    Registered clients stay in memory until first approved (_Registrations)."""

    def __init__(self, folder: str, issuer: str, resource: str,
                 approve: Callable[[str], bool], clock: Callable[[], float] = time.time,
                 public: str = "") -> None:
        self.issuer, self.resource, self.public = issuer.rstrip("/"), resource, public
        self.approve, self.clock = approve, clock
        self._fresh = _Registrations(lambda: self.clock())
        self._store = _TokenStore(folder)
        self._file = self._store._path(_AS_FILE)
        self._lock = threading.RLock()  # every field below
        self._doc: dict = {"clients": {}, "grants": {}}
        self._seen: Any = None  # the file's (mtime, size, inode) when last read or written
        self._access: Dict[str, Tuple[str, float]] = {}  # sha -> (grant id, expiry)
        self._refresh: Dict[str, str] = {}  # sha of a live refresh token -> grant id
        self._spent: Dict[str, str] = {}  # sha of a spent refresh token -> grant id
        self._codes: Dict[str, dict] = {}  # sha of a code -> its request (and grant, once used)
        self._pending: Dict[str, dict] = {}  # approval page ticket -> its authorization request
        prm = "/.well-known/oauth-protected-resource"
        self._routes: Dict[str, Callable[[str, str, Dict[str, str], bytes], _HttpReply]] = {
            prm: self._prm, prm + urllib.parse.urlsplit(resource).path.rstrip("/"): self._prm,
            "/.well-known/oauth-authorization-server": self._metadata,
            "/.well-known/openid-configuration": self._metadata,
            "/register": self._register, "/authorize": self._authorize, "/token": self._token,
            "/revoke": self._revoke}
        with self._lock:
            self._sync()

    def handles(self, path: str) -> bool:
        """Whether `path` is one of the authorization server's."""
        return path in self._routes

    def respond(self, method: str, path: str, query: str, headers: Mapping[str, str],
                body: bytes) -> _HttpReply:
        """The answer to one request on a path it `handles` (404 for another)."""
        route = self._routes.get(path)
        if route is None:
            return _as_error(404, "not_found", f"no such path here: {path[:100]}")
        if path == "/authorize":  # a page for the browser, never read by another site's script
            return self._answer(route, method, query, headers, body)
        # the rest is for clients, browser-based ones too (the Inspector): CORS, with no
        # credentials (RFC 8414 and 7591 data is public; tokens are bound by PKCE)
        cors = {"Access-Control-Allow-Origin": "*"}
        if method.upper() == "OPTIONS":
            return 204, dict(cors, **{"Access-Control-Allow-Methods": "GET, POST, OPTIONS",
                                      "Access-Control-Allow-Headers": "Content-Type, "
                                      "Authorization, MCP-Protocol-Version",
                                      "Access-Control-Max-Age": "600"}), b""
        status, head, data = self._answer(route, method, query, headers, body)
        return status, dict(head, **cors), data

    def _answer(self, route: Callable[[str, str, Dict[str, str], bytes], _HttpReply],
                method: str, query: str, headers: Mapping[str, str], body: bytes) -> _HttpReply:
        if len(body) > _AS_BODY_MAX:
            return _as_error(413, "invalid_request",
                             f"the request body is over {_AS_BODY_MAX} bytes")
        try:
            return route(method.upper(), query, {k.lower(): v for k, v in headers.items()},
                         body)
        except Exception:  # a fault of Abstract's: told as one, never a crash
            _log.exception("the authorization server failed on %s %s", method,
                           getattr(route, "__name__", "?"))
            return _as_error(500, "server_error", "the authorization server failed; see "
                             "Abstract's log")

    def verify(self, access_token: str) -> bool:
        """Whether `access_token` is a live access token of this server's."""
        return bool(self.grant_of(access_token))

    def grant_of(self, access_token: str) -> str:
        """The id of the approval a live access token of this server's belongs to (the same
        across its refreshes: what a session is bound to); "" for any other. Looked up by its
        sha256 (the token is never kept, and the lookup's timing tells nothing of it)."""
        if not isinstance(access_token, str) or not 0 < len(access_token) <= 512:
            return ""
        with self._lock:
            self._sync()
            found = self._access.get(_as_sha(access_token))
        return found[0] if found is not None and self.clock() < found[1] else ""

    def _base(self, headers: Mapping[str, str]) -> str:
        """The issuer the request is answered in the name of (_named_base)."""
        return _named_base(headers, self.issuer, self.public)

    def _resource_at(self, base: str) -> str:
        """This server's resource (its MCP endpoint) named from `base`."""
        return self.resource if base == self.issuer else (
            base + urllib.parse.urlsplit(self.resource).path)

    def close(self) -> None:
        """Forget the codes and approval pages in memory (the file keeps the rest)."""
        with self._lock:
            self._codes.clear()
            self._pending.clear()

    # the state file: clients and approvals, shared by every Abstract serving from the folder

    def _sync(self) -> None:
        """Read the file again if another Abstract (or this one) wrote it since (self._lock)."""
        try:
            st = os.stat(self._file)
            seen: Any = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            seen = None
        if seen == self._seen:
            return
        self._doc, self._seen = self._read(), seen
        self._index()

    def _read(self) -> dict:
        """The file's clients and approvals; a damaged one is moved aside (and said so)."""
        fresh: dict = {"clients": {}, "grants": {}}
        try:
            with _retry_shared(open, self._file, "rb") as f:  # (Windows: mid-replace)
                data = f.read(_AS_FILE_MAX + 1)
        except FileNotFoundError:
            return fresh
        except OSError as e:
            _log.warning("the authorization server cannot read %s (%s); clients must register "
                         "and be approved again", self._file, e.strerror or e)
            return fresh
        try:
            doc = json.loads(data.decode("utf-8")) if len(data) <= _AS_FILE_MAX else None
        except ValueError:
            doc = None
        if (not isinstance(doc, dict) or not isinstance(doc.get("clients"), dict)
                or not isinstance(doc.get("grants"), dict)):
            aside = self._file.with_name(self._file.stem + ".damaged.json")
            with contextlib.suppress(OSError):
                os.replace(self._file, aside)
            _log.warning("the authorization server's file %s is damaged; moved to %s and "
                         "started afresh: clients must register and be approved again",
                         self._file, aside)
            return fresh
        # an entry edited by hand into another shape is left out
        doc["clients"] = {k: v for k, v in doc["clients"].items() if _as_client_ok(v)}
        doc["grants"] = {k: v for k, v in doc["grants"].items() if _as_grant_ok(v)}
        return doc

    def _index(self) -> None:
        """The lookups by hash, from the document."""
        self._access, self._refresh, self._spent = {}, {}, {}
        for gid, g in self._doc["grants"].items():
            for digest, expires in g["access"].items():
                self._access[digest] = (gid, float(expires))
            if g.get("refresh"):
                self._refresh[str(g["refresh"])] = gid
            self._spent.update((str(h), gid) for h in g["spent"])

    @contextlib.contextmanager
    def _changing(self) -> Iterator[dict]:
        """The document, read afresh, to change; written back (pruned) when the block ends,
        all under this thread's lock and the folder's lock file (_TokenStore.locked)."""
        with self._lock, self._store.locked(_AS_FILE):
            self._sync()
            try:
                yield self._doc
            except BaseException:
                self._seen = None  # half changed: read the file again next time
                raise
            self._prune(self._doc)
            data = _dumps(self._doc).encode("utf-8")
            _write_new(self._store._folder(), self._file.stem, ".json", data, 0o600,
                       replace=True)
            st = os.stat(self._file)
            self._seen = (st.st_mtime_ns, st.st_size, st.st_ino)
            self._index()

    def _prune(self, doc: dict) -> None:
        """Drop what expired, and what is over the bounds: the least recently used approvals,
        then the clients never approved, then the longest unused (with their approvals)."""
        now = self.clock()
        grants = doc["grants"]
        for gid, g in list(grants.items()):
            g["access"] = {h: t for h, t in g["access"].items() if t > now}
            if g.get("refresh_expires", 0) <= now or g.get("client_id") not in doc["clients"]:
                del grants[gid]
        for gid in sorted(grants, key=lambda k: grants[k].get("used", 0))[:-_AS_GRANTS_MAX]:
            del grants[gid]
        clients = doc["clients"]
        # (the unapproved first: a flood of registrations cannot push out a client in use)
        approved = {g.get("client_id") for g in grants.values()}
        for cid in sorted(clients, key=lambda k: (k in approved, clients[k].get("used", 0))
                          )[:-_AS_CLIENTS_MAX]:
            del clients[cid]
            for gid in [k for k, g in grants.items() if g.get("client_id") == cid]:
                del grants[gid]

    def _revoke_grant(self, gid: str, why: str) -> None:
        with self._changing() as doc:
            self._drop(doc, gid, why)

    @staticmethod
    def _drop(doc: dict, gid: str, why: str) -> None:
        """Revoke approval `gid` of `doc` (in _changing): its tokens end at once."""
        gone = doc["grants"].pop(gid, None)
        if gone is not None:
            _log.warning("authorization server: an approval of client %s was revoked: %s",
                         gone.get("client_id"), why)

    # the endpoints

    def _prm(self, method: str, query: str, headers: Dict[str, str], body: bytes) -> _HttpReply:
        """RFC 9728 section 3.2."""
        if method not in ("GET", "HEAD"):
            return _as_error(405, "invalid_request", "use GET")
        base = self._base(headers)
        return _as_json(200, {"resource": self._resource_at(base), "authorization_servers": [base],
                              "bearer_methods_supported": ["header"],
                              "resource_name": "Abstract"}, cache=True)

    def _metadata(self, method: str, query: str, headers: Dict[str, str],
                  body: bytes) -> _HttpReply:
        """RFC 8414 section 2 (served at the OpenID discovery path as well)."""
        if method not in ("GET", "HEAD"):
            return _as_error(405, "invalid_request", "use GET")
        base = self._base(headers)
        return _as_json(200, {
            "issuer": base, "authorization_endpoint": base + "/authorize",
            "token_endpoint": base + "/token", "registration_endpoint": base + "/register",
            "revocation_endpoint": base + "/revoke", "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "revocation_endpoint_auth_methods_supported": ["none"],
            "authorization_response_iss_parameter_supported": True}, cache=True)

    def _register(self, method: str, query: str, headers: Dict[str, str],
                  body: bytes) -> _HttpReply:
        """RFC 7591: a public client (token_endpoint_auth_method none, whatever it asked)."""
        import secrets  # lazy: see Imports

        if method != "POST":
            return _as_error(405, "invalid_request", "register with a POST of JSON metadata")
        wait = self._fresh.wait()
        if wait:
            status, head, data = _as_error(429, "temporarily_unavailable", f"too many "
                                           f"registrations: at most {_AS_REGISTER_MAX} in "
                                           f"{_AS_REGISTER_S:g} s; try again in {wait:g} s")
            return status, dict(head, **{"Retry-After": f"{wait:g}"}), data
        try:
            meta = json.loads(body.decode("utf-8"))
            _dumps(meta).encode("utf-8")
        except UnicodeEncodeError:  # ("\ud800" in JSON: no text; it could not be answered)
            return _as_error(400, "invalid_client_metadata", "the metadata holds a lone "
                             "surrogate (\\ud800 to \\udfff), which is not text")
        except (ValueError, RecursionError):  # (RecursionError: "[[[[..." nested too deep)
            meta = None
        if not isinstance(meta, dict):
            return _as_error(400, "invalid_client_metadata", "the body must be a JSON object "
                             "of client metadata (RFC 7591 section 2)")
        uris = meta.get("redirect_uris")
        if not isinstance(uris, list) or not 0 < len(uris) <= _AS_URIS_MAX:
            return _as_error(400, "invalid_redirect_uri", f"redirect_uris must be a list of 1 "
                             f"to {_AS_URIS_MAX} URIs")
        why = next((w for w in map(_redirect_problem, uris) if w), "")
        if why:
            return _as_error(400, "invalid_redirect_uri", why)
        grants, types = meta.get("grant_types", []), meta.get("response_types", [])
        if not isinstance(grants, list) or not isinstance(types, list) or not set(
                map(str, grants)) <= {"authorization_code", "refresh_token"} or not set(
                map(str, types)) <= {"code"}:
            return _as_error(400, "invalid_client_metadata", "only the authorization_code and "
                             "refresh_token grants (response type code) are offered")
        name = meta.get("client_name")
        name = _escape_controls(name)[:_AS_NAME_LEN] if isinstance(name, str) else ""
        cid, now = secrets.token_urlsafe(24), self.clock()
        self._fresh.add(cid, {"redirect_uris": list(dict.fromkeys(uris)), "client_name": name,
                              "created": now, "used": now})
        _log.info("authorization server: client %s registered (%s)", cid, _clean(name))
        answer = {"client_id": cid, "client_id_issued_at": int(now), "redirect_uris": uris,
                  "token_endpoint_auth_method": "none", "response_types": ["code"],
                  "grant_types": ["authorization_code", "refresh_token"]}
        return _as_json(201, dict(answer, client_name=name) if name else answer)

    def _authorize(self, method: str, query: str, headers: Dict[str, str],
                   body: bytes) -> _HttpReply:
        """GET: the request checked, then the approval page; POST: the page's form."""
        if method == "POST":
            return self._approve(headers, body)
        if method != "GET":
            return _refused_page(405, "Open this address in a browser (GET).")
        try:
            ask = _as_form(query.encode("utf-8"))
        except ValueError as e:
            return _refused_page(400, f"The authorization request is malformed: {e}.")
        client = self._client(ask.get("client_id", ""))
        if client is None:
            return _refused_page(400, "The app's client_id is unknown here (never registered, "
                                 "or dropped since): the app must register again.")
        uri = ask.get("redirect_uri") or (client["redirect_uris"][0]
                                          if len(client["redirect_uris"]) == 1 else "")
        if _sans_port(uri) not in map(_sans_port, client["redirect_uris"]):
            return _refused_page(400, "The redirect_uri is not one the app registered; "
                                 "Abstract does not send anything there.")
        state = ask.get("state", "")
        state = state if len(state) <= _AS_STATE_LEN else ""
        base = self._base(headers)
        why = self._request_problem(ask, base)
        if why[0]:
            return self._back(uri, state, {"error": why[0], "error_description": why[1]}, base)
        import secrets  # lazy: see Imports

        ticket, now = secrets.token_urlsafe(32), self.clock()
        with self._lock:
            for t in [t for t, p in self._pending.items() if p["expires"] <= now]:
                del self._pending[t]
            while len(self._pending) >= _AS_PENDING_MAX:
                del self._pending[next(iter(self._pending))]
            self._pending[ticket] = {"client_id": ask["client_id"], "redirect_uri": uri,
                                     "sent": "redirect_uri" in ask,
                                     "state": state, "challenge": ask["code_challenge"],
                                     "expires": now + _AS_KEEP_S, "attempts": 0, "iss": base}
        page = _approval_page(client.get("client_name", ""), _url_base(uri), base, ticket)
        return 200, dict(_AS_FORM), page

    def _client(self, cid: str) -> Optional[dict]:
        """A client of the state file's, or one registered here and never approved."""
        with self._lock:
            self._sync()
            return self._doc["clients"].get(cid) or self._fresh.get(cid)

    def _keep(self, cid: str) -> None:
        """A client approved for the first time goes into the state file (kept across restarts,
        shared with the other Abstracts of the folder)."""
        client = self._fresh.pop(cid)
        if client is not None:
            with self._changing() as doc:
                doc["clients"][cid] = dict(client, used=self.clock())

    def _request_problem(self, ask: Dict[str, str], base: str) -> Tuple[str, str]:
        """(error, description) for an authorization request to refuse, else ("", "")."""
        if ask.get("response_type") != "code":
            return "unsupported_response_type", "response_type must be code"
        if not ask.get("code_challenge"):
            return "invalid_request", "code_challenge is required (PKCE, method S256)"
        if ask.get("code_challenge_method") != "S256":
            return "invalid_request", "code_challenge_method must be S256 (plain is refused)"
        if not _AS_CHALLENGE_RE.fullmatch(ask["code_challenge"]):
            return "invalid_request", "code_challenge must be the 43-character S256 value"
        if "resource" in ask and not self._ours(ask["resource"], base):
            return "invalid_target", f"resource must be {self._resource_at(base)}"
        if len(ask.get("state", "")) > _AS_STATE_LEN:
            return "invalid_request", f"state is over {_AS_STATE_LEN} characters"
        return "", ""

    def _ours(self, resource: str, base: str) -> bool:
        """Whether `resource` (RFC 8707) names this server's MCP endpoint: by the address bound,
        the public URL, or `base`, the name the request reached it by (one server)."""
        try:
            given = _canonical_resource(resource)
        except ValueError:  # not a URL ("http://[::1": urlsplit refuses it): not ours
            return False
        return given in {_canonical_resource(self._resource_at(b))
                         for b in (self.issuer, self.public, base) if b}

    @staticmethod
    def _back(uri: str, state: str, params: Dict[str, str], iss: str) -> _HttpReply:
        """The redirect to the client's (registered) `uri` with `params`, state and `iss`, the
        issuer it reached (RFC 9207)."""
        params = dict(params, **({"state": state} if state else {}), iss=iss)
        where = uri + ("&" if "?" in uri else "?") + urllib.parse.urlencode(params)
        return 302, {"Location": where, "Cache-Control": "no-store",
                     "Referrer-Policy": "no-referrer"}, b""

    def _approve(self, headers: Dict[str, str], body: bytes) -> _HttpReply:
        """The approval form: the server's token (approve) issues a code; a wrong one shows
        the page again, _AS_ATTEMPTS times at most."""
        origin = headers.get("origin")
        if origin and origin != "null" and _origin_key(origin) not in {
                _origin_key(b) for b in (self.issuer, self.public, self._base(headers)) if b}:
            return _refused_page(403, "This form may only be sent from Abstract's own page.")
        try:
            form = _as_form(body)
        except ValueError as e:
            return _refused_page(400, f"The form is malformed: {e}.")
        with self._lock:
            ask = self._pending.get(form.get("ticket", ""))
            if ask is None or ask["expires"] <= self.clock():
                self._pending.pop(form.get("ticket", ""), None)
                return _refused_page(400, "This approval page has expired or was used; start "
                                     "again from the app.")
            if form.get("decision") == "deny":
                del self._pending[form["ticket"]]
                return self._back(ask["redirect_uri"], ask["state"], {"error": "access_denied"},
                                  ask["iss"])
            if not self.approve(form.get("token", "")):
                ask["attempts"] += 1
                _log.warning("authorization server: a wrong token on the approval page "
                             "(client %s)", ask["client_id"])
                if ask["attempts"] >= _AS_ATTEMPTS:
                    del self._pending[form["ticket"]]
                    return _refused_page(403, f"{_AS_ATTEMPTS} wrong tokens: this approval "
                                         f"is refused. Start again from the app.")
                client = self._client(ask["client_id"]) or {}
                page = _approval_page(client.get("client_name", ""),
                                      _url_base(ask["redirect_uri"]), ask["iss"],
                                      form["ticket"], "That is not this server's token.")
                return 403, dict(_AS_FORM), page
            del self._pending[form["ticket"]]
        self._keep(ask["client_id"])
        return self._back(ask["redirect_uri"], ask["state"], {"code": self._new_code(ask)},
                          ask["iss"])

    def _new_code(self, ask: dict) -> str:
        import secrets  # lazy: see Imports

        code, now = secrets.token_urlsafe(32), self.clock()
        with self._lock:
            for h in [h for h, c in self._codes.items() if c["issued"] + _AS_KEEP_S <= now]:
                del self._codes[h]
            while len(self._codes) >= _AS_CODES_MAX:
                del self._codes[next(iter(self._codes))]
            self._codes[_as_sha(code)] = dict(ask, issued=now, grant="")
        _log.info("authorization server: client %s approved", ask["client_id"])
        return code

    def _token(self, method: str, query: str, headers: Dict[str, str],
               body: bytes) -> _HttpReply:
        """RFC 6749 section 3.2: the authorization_code and refresh_token grants."""
        if method != "POST":
            return _as_error(405, "invalid_request", "use POST with a form")
        try:
            form = _as_form(body)
        except ValueError as e:
            return _as_error(400, "invalid_request", str(e))
        grant = form.get("grant_type")
        base = self._base(headers)
        if "resource" in form and not self._ours(form["resource"], base):
            return _as_error(400, "invalid_target", f"resource must be {self._resource_at(base)}")
        if grant == "authorization_code":
            return self._code_grant(form)
        if grant == "refresh_token":
            return self._refresh_grant(form)
        if not grant:
            return _as_error(400, "invalid_request", "grant_type is missing")
        return _as_error(400, "unsupported_grant_type", "grant_type must be authorization_code "
                         "or refresh_token")

    def _code_grant(self, form: Dict[str, str]) -> _HttpReply:
        """A code for tokens: single use (a second use revokes what the first gave), within
        _AS_CODE_S, for its client and redirect_uri, with the verifier of its challenge."""
        missing = [k for k in ("code", "client_id", "code_verifier") if not form.get(k)]
        if missing:
            return _as_error(400, "invalid_request", f"missing: {', '.join(missing)}")
        if self._client(form["client_id"]) is None:
            return _as_error(401, "invalid_client", "unknown client_id: register again")
        with self._lock:
            ask = self._codes.get(_as_sha(form["code"]))
            if ask is not None and ask["grant"]:
                self._revoke_grant(ask["grant"], "its authorization code was used twice")
                return _as_error(400, "invalid_grant", "the code was used already; the tokens "
                                 "it gave are revoked. Authorize again")
            if ask is None or ask["issued"] + _AS_CODE_S <= self.clock():
                return _as_error(400, "invalid_grant", f"the code is unknown or expired (a code "
                                 f"lives {_AS_CODE_S:g} s); authorize again")
            # redirect_uri as the authorization request had it (RFC 6749 section 4.1.3)
            sent = ask["sent"] or "redirect_uri" in form
            if ask["client_id"] != form["client_id"] or (
                    sent and form.get("redirect_uri") != ask["redirect_uri"]):
                return _as_error(400, "invalid_grant", "client_id or redirect_uri is not the "
                                 "one of the authorization request")
            if not self._verifier_ok(form["code_verifier"], ask["challenge"]):
                return _as_error(400, "invalid_grant", "code_verifier does not match the "
                                 "code_challenge (PKCE S256)")
            import secrets  # lazy: see Imports

            gid, now = secrets.token_urlsafe(16), self.clock()
            with self._changing() as doc:
                g = doc["grants"][gid] = {"client_id": ask["client_id"], "created": now,
                                          "access": {}, "spent": [], "refresh": ""}
                tokens = self._rotate(doc, g)
            ask["grant"] = gid
        return _as_json(200, tokens)

    @staticmethod
    def _verifier_ok(verifier: str, challenge: str) -> bool:
        import hashlib  # lazy: see Imports
        import hmac  # lazy: see Imports

        if not _AS_VERIFIER_RE.fullmatch(verifier):
            return False
        made = _b64url(hashlib.sha256(verifier.encode("ascii")).digest())
        return hmac.compare_digest(made, challenge)

    def _rotate(self, doc: dict, g: dict) -> dict:
        """New access and refresh tokens for approval `g` of `doc` (in _changing); the refresh
        token it had is spent (rotation: its reuse revokes the approval)."""
        import secrets  # lazy: see Imports

        access, refresh, now = secrets.token_urlsafe(32), secrets.token_urlsafe(32), self.clock()
        if g["refresh"]:
            g["spent"] = (g["spent"] + [g["refresh"]])[-_AS_SPENT_PER:]
        g["access"][_as_sha(access)] = now + _AS_ACCESS_S
        g["access"] = dict(list(g["access"].items())[-_AS_ACCESS_PER:])
        g.update(refresh=_as_sha(refresh), refresh_expires=now + _AS_REFRESH_S, used=now)
        if g["client_id"] in doc["clients"]:
            doc["clients"][g["client_id"]]["used"] = now
        return {"access_token": access, "token_type": "Bearer",
                "expires_in": int(_AS_ACCESS_S), "refresh_token": refresh}

    def _refresh_grant(self, form: Dict[str, str]) -> _HttpReply:
        """A refresh token for new tokens; a spent one revokes its approval (OAuth 2.1 section
        4.3.1: a stolen refresh token is caught when either holder uses it next). Checked and
        rotated under the folder's lock: two Abstracts on one folder cannot both spend it."""
        if not form.get("refresh_token"):
            return _as_error(400, "invalid_request", "missing: refresh_token")
        digest, why, tokens = _as_sha(form["refresh_token"]), "", {}
        with self._changing() as doc:
            gid = self._refresh.get(digest, "")
            g = doc["grants"].get(gid)
            if not gid and digest in self._spent:
                self._drop(doc, self._spent[digest], "a spent refresh token was used again")
                why = ("the refresh token was used already (they rotate); every token of its "
                       "approval is revoked. Authorize again")
            elif g is None or g["refresh_expires"] <= self.clock():
                why = "the refresh token is unknown, revoked or expired; authorize again"
            elif form.get("client_id", g["client_id"]) != g["client_id"]:
                why = "the refresh token is another client's"
            else:
                tokens = self._rotate(doc, g)
        return _as_json(200, tokens) if tokens else _as_error(400, "invalid_grant", why)

    def _revoke(self, method: str, query: str, headers: Dict[str, str],
                body: bytes) -> _HttpReply:
        """RFC 7009: an access token ends alone; a refresh token ends its whole approval. An
        unknown token is answered 200 as well (section 2.2)."""
        if method != "POST":
            return _as_error(405, "invalid_request", "use POST with a form")
        try:
            token = _as_form(body).get("token")
        except ValueError as e:
            return _as_error(400, "invalid_request", str(e))
        if not token:
            return _as_error(400, "invalid_request", "missing: token")
        digest = _as_sha(token)
        with self._lock:
            self._sync()
            gid = self._refresh.get(digest)
            if gid is not None:
                self._revoke_grant(gid, "its refresh token was revoked")
            elif digest in self._access:
                with self._changing() as doc:
                    g = doc["grants"].get(self._access[digest][0])
                    if g is not None:
                        g["access"].pop(digest, None)
        return 200, {"Cache-Control": "no-store"}, b""


# -- sessions and the /mcp endpoint
# Each client session (initialize, then Mcp-Session-Id) is a _Server of its own over the shared
# upstreams; its Connection reads what the HTTP requests deliver and writes into _Sink, which
# routes every message to an HTTP stream: a response to the POST that asked, progress to the
# POST whose call it reports on, a question (sampling, elicitation, roots) to the POST of the
# call that caused it, anything else to the session's GET stream. docs/reference/serving.md.

_SERVE_PATH = "/mcp"
_SERVE_IDLE_S = 1800.0  # a session with no request, call or GET stream this long is ended
_SERVE_SESSIONS_MAX = 64  # sessions at once; past it initialize gets 503
_SERVE_ARM_S = 10.0  # a request that came in before the guard was built waits this long for it
_SERVE_STREAMS_MAX = 32  # a session's POSTs waiting for their answer at once; past it 429
_SERVE_EVENTS_MAX = 1000  # messages queued on one stream; past it the stream is closed
_SERVE_KEEPALIVE_S = 15.0  # an SSE stream's comment line when nothing else was sent this long
_SERVE_SWEEP_S = 30.0  # how often idle sessions are looked for (at most)
# a call whose handler runs on its HTTP thread gets a thread to write its answer after this long
# (to see a client that went away); a message before its result starts one at once
_SERVE_INLINE_S = 0.5
_SERVE_HANDLERS_S = 2.0  # shutdown: how long the streams get to say their last word
# resumable streams (2025-11-25 basic/transports, "Resumability and Redelivery"): what each
# stream of a session keeps for a client that resumes it (GET with Last-Event-ID)
_SERVE_REPLAY_EVENTS = 100  # the last events of a stream kept for replay...
_SERVE_REPLAY_BYTES = 1 << 20  # ...at most this many bytes of them (the last one always kept...
_SERVE_REPLAY_LAST = 8 << 20  # (...unless larger than this: such an event is not replayed)
# ...and the streams of every session together at most this many (_ReplayBudget)
_SERVE_REPLAY_TOTAL = 64 << 20
_SERVE_RESUME_S = 60.0  # a stream whose client went away is kept (its call goes on) this long
_SERVE_RESUMES_DONE = 8  # a session's streams kept after their end (the oldest forgotten first)
_SERVE_ATTACH_S = 3.0  # a resume waits this long for the stream's last reader to notice it left
_SERVE_RETRY_MS = 1000  # the SSE retry field: how long a client waits before resuming
_SESSION_HEADER = "Mcp-Session-Id"


def _rpc_key(value: Any) -> bool:
    """Whether `value` can be a JSON-RPC id or progress token (a string or an integer)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


class _ReplayBudget:
    """The bytes the replays of all of --serve's streams hold together: past `limit`, those
    written to least recently are emptied first (a client resuming one then gets nothing
    replayed, only what was not yet written). A replay may be counted for a while after it
    let go of its bytes (a race with its writer), never less than it holds."""

    def __init__(self, limit: Optional[int] = None) -> None:
        self.limit = _SERVE_REPLAY_TOTAL if limit is None else limit
        self._total = 0
        self._held: "collections.OrderedDict[_Replay, int]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def charge(self, replay: "_Replay", size: int) -> List["_Replay"]:
        """`replay` holds `size` bytes now; the others to empty to stay within the limit."""
        with self._lock:
            self._total += size - self._held.pop(replay, 0)
            if size:
                self._held[replay] = size  # (the most recent last)
            shed: List[_Replay] = []
            for other, held in self._held.items():
                if self._total <= self.limit:
                    break
                if other is not replay:
                    shed.append(other)
                    self._total -= held
            for other in shed:
                del self._held[other]
            return shed


class _Replay:
    """The events one stream sent, for a client that resumes it: the last _SERVE_REPLAY_EVENTS
    within _SERVE_REPLAY_BYTES (the last one always, up to _SERVE_REPLAY_LAST), and all
    streams' within their `budget`. Event ids are `<key>-<n>`: the stream's key (unique in its
    session), and the event's number on it."""

    def __init__(self, key: str, budget: Optional[_ReplayBudget] = None) -> None:
        self.key, self._n, self._size = key, 0, 0
        self._events: "collections.deque[Tuple[int, bytes]]" = collections.deque()
        self._lock = threading.Lock()
        self._budget = budget

    def add(self, data: bytes) -> str:
        """Keep `data` (before it is written: a write that fails is replayed too); its id."""
        with self._lock:
            self._n += 1
            if len(data) <= _SERVE_REPLAY_LAST:  # (a larger one is not held on after it is sent)
                self._events.append((self._n, data))
                self._size += len(data)
            while len(self._events) > 1 and (len(self._events) > _SERVE_REPLAY_EVENTS
                                             or self._size > _SERVE_REPLAY_BYTES):
                self._size -= len(self._events.popleft()[1])
            n, size = self._n, self._size
        for other in self._budget.charge(self, size) if self._budget is not None else ():
            other.clear()  # (outside this one's lock: two replays never wait for each other)
        return f"{self.key}-{n}"

    def clear(self) -> None:
        """Let go of every event kept (the stream is forgotten, or the budget is spent)."""
        with self._lock:
            self._events.clear()
            self._size = 0
        if self._budget is not None:
            self._budget.charge(self, 0)

    def sent(self) -> bool:
        with self._lock:
            return self._n > 0

    def after(self, n: int) -> List[Tuple[str, bytes]]:
        """The events kept that came after event `n` (those before the oldest kept are lost)."""
        with self._lock:
            return [(f"{self.key}-{i}", data) for i, data in self._events if i > n]


class _Stream:
    """The messages for one HTTP answer (a POST's, or a session's GET stream), bounded: a client
    that stops reading loses its stream (ended, `overflow`), never Abstract's memory. A
    session's stream is resumable (`replay`; _Resumes): `call` is the POST's request,
    `reading` whether a connection writes it out, `left_at` when the last one stopped."""

    def __init__(self, replay: Optional[_Replay] = None) -> None:
        self._items: "collections.deque[dict]" = collections.deque()
        self._cond = threading.Condition()
        self.ended = self.overflow = False
        self.replay = replay
        self.call: Optional[int] = None  # a POST's: its request (Abstract's id) in flight
        self.reading, self.left_at = True, 0.0
        # while its request's handler runs on the HTTP thread (_Sessions._answer), what starts
        # a thread to write the answer instead (once); the thread, once started
        self._pump: Optional[Callable[[], threading.Thread]] = None
        self.pumped: Optional[threading.Thread] = None

    def put(self, msg: dict) -> bool:
        with self._cond:
            if self.ended:
                return False
            if len(self._items) >= _SERVE_EVENTS_MAX:
                self.ended = self.overflow = True
                self._cond.notify_all()
                return False
            self._items.append(msg)
            self._cond.notify_all()
            if "method" in msg:  # (not the result: the handler that sends it writes it)
                self.pump()
            return True

    def pump(self) -> None:
        """While the handler runs on the HTTP thread: start the thread that writes the answer
        (a message came before the result, or the call is slow). Once."""
        with self._cond:
            if self._pump is not None:
                self.pumped, self._pump = self._pump(), None

    def running(self, pump: Optional[Callable[[], threading.Thread]]) -> Optional[threading.Thread]:
        """`pump` while the handler runs on the HTTP thread; None once it has returned: the
        pump thread started meanwhile, if any."""
        with self._cond:
            self._pump = pump
            return self.pumped

    def end(self) -> None:
        with self._cond:
            self.ended = True
            self._cond.notify_all()

    def get(self, timeout: float) -> Optional[dict]:
        """The next message, or None after `timeout` or once ended and drained."""
        with self._cond:
            if not self._items and not self.ended:
                self._cond.wait(timeout)
            return self._items.popleft() if self._items else None

    def event_id(self, data: bytes) -> str:
        """The id of the event `data` is about to be sent as ("" when not resumable)."""
        return self.replay.add(data) if self.replay is not None else ""


class _Resumes:
    """A session's resumable streams (2025-11-25 basic/transports, "Resumability and
    Redelivery"), by key: each live one, and each whose reader left, for _SERVE_RESUME_S
    (then `expired`); of those ended, the _SERVE_RESUMES_DONE latest. A resume (`attach`) is
    a new reader of the same stream: it gets what the replay kept after its Last-Event-ID,
    then the stream's messages still to come, the POST's answer among them. Ids are looked
    up in this session only: another session's never match."""

    def __init__(self, budget: Optional[_ReplayBudget] = None) -> None:
        self._keys = itertools.count(1)
        self._streams: "collections.OrderedDict[str, _Stream]" = collections.OrderedDict()
        self._cond = threading.Condition()
        self._budget = budget  # (what the replays of every session hold together)

    def new(self, kind: str) -> _Stream:
        """A new stream (`kind` "p" a POST's, "g" the GET stream), read from now."""
        with self._cond:
            key = f"{kind}{next(self._keys)}"
            stream = self._streams[key] = _Stream(_Replay(key, self._budget))
            done = [k for k, s in self._streams.items() if s.ended and not s.reading]
            for k in done:  # (answered as JSON, or nothing sent: nothing to resume)
                if not self._streams[k].replay.sent():  # type: ignore[union-attr]
                    del self._streams[k]
            done = [k for k in done if k in self._streams]
            gone = [self._streams.pop(k) for k in done[:max(0, len(done) - _SERVE_RESUMES_DONE)]]
        for old in gone:
            old.replay.clear()  # type: ignore[union-attr]
        return stream

    def find(self, last_id: str) -> Optional[Tuple[_Stream, int]]:
        """The stream an event id of this session's names, and the event's number."""
        key, _, n = last_id.rpartition("-")
        with self._cond:
            stream = self._streams.get(key)
        if stream is None or not re.fullmatch(r"[0-9]{1,15}", n):
            return None
        return stream, int(n)

    def attach(self, stream: _Stream, wait: float = _SERVE_ATTACH_S) -> bool:
        """A new reader for `stream`; False while another still reads it (after `wait` for
        one that is going: its client has just cut it)."""
        deadline = time.monotonic() + wait
        with self._cond:
            while stream.reading and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            if stream.reading:
                return False
            stream.reading, stream.left_at = True, 0.0
            return True

    def left(self, stream: _Stream) -> None:
        """Its reader stopped (the answer ended, or its client went away)."""
        with self._cond:
            stream.reading, stream.left_at = False, time.monotonic()
            self._cond.notify_all()

    def expired(self, now: float) -> List[_Stream]:
        """The streams left unread longer than _SERVE_RESUME_S (forgotten from now)."""
        with self._cond:
            old = [k for k, s in self._streams.items()
                   if not s.reading and now - s.left_at > _SERVE_RESUME_S]
            gone = [self._streams.pop(k) for k in old]
        for stream in gone:
            stream.replay.clear()  # type: ignore[union-attr]
        return gone

    def forget(self) -> None:
        """Let go of every stream's replay (the session ended: nothing of it is resumed)."""
        with self._cond:
            streams = list(self._streams.values())
            self._streams.clear()
        for stream in streams:
            stream.replay.clear()  # type: ignore[union-attr]


class _Feed:
    """A session Connection's input: nothing is read from it (the HTTP requests deliver each
    message: Connection.deliver); it reaches EOF when the session ends."""

    def __init__(self) -> None:
        self._ended = threading.Event()

    def readline(self, size: int = -1) -> bytes:
        self._ended.wait()
        return b""

    def close(self) -> None:
        self._ended.set()


class _Sink:
    """A session Connection's output (its writer thread's, or a worker's own answer, one at a
    time under the Connection's lock): each line is parsed and handed to `route`."""

    def __init__(self, route: Callable[[dict], None]) -> None:
        self._route = route
        self._buf = bytearray()

    def write(self, data: Any) -> int:
        self._buf += data
        while True:
            end = self._buf.find(b"\n")
            if end < 0:
                return len(data)
            line = bytes(self._buf[:end])
            del self._buf[:end + 1]
            try:
                self._route(json.loads(line))
            except Exception:  # never the writer's end: the message is lost, and said so
                _log.error("serve: a message could not be routed:\n%s", traceback.format_exc())

    def writelines(self, parts: Iterable[Any]) -> None:
        for part in parts:
            self.write(part)

    def flush(self) -> None:
        pass


class _Session:
    """One client session of --serve: its _Server (over the shared upstreams), and which HTTP
    stream each message of that server goes to (_route). The client's request ids are
    replaced by Abstract's own on the way in (a stateless client's may clash with another's)
    and put back on the answer."""

    def __init__(self, sid: str, make: Callable[[Any, Any], Any],
                 hub: Optional["_Sessions"] = None, owner: Optional[str] = None) -> None:
        self.sid, self._hub = sid, hub  # (hub: what the sessions share; None: stateless)
        # whom its credential names (_Sessions._who): a stateless one's is given (None: the
        # one shared by every client when there is no authentication)
        self.owner = hub.owner_of(sid) if hub is not None else owner
        self._lock = threading.Lock()
        self._feed = _Feed()
        self.server = make(self._feed, _Sink(self._route))
        self.caps: dict = {}  # roots, sampling, elicitation as initialize declared them
        self.level = ""  # what logging/setLevel asked
        self.used = time.monotonic()
        self.ended, self._why = False, ""  # (why: the reason end was given)
        self._claims = 0  # requests that found it and have not yet been answered (claim)
        self._ids = itertools.count(1)
        # Abstract's id of each request in flight -> (the client's id, its stream, progress token)
        self._calls: Dict[int, Tuple[Any, _Stream, Any]] = {}
        self._by_client: Dict[Any, int] = {}  # (a session's only: stateless clients' ids clash)
        # progress tokens, replaced by Abstract's id of the request on the way in (stateless
        # clients' tokens clash too) -> (the stream, the client's own token)
        self._tokens: Dict[int, Tuple[_Stream, Any]] = {}
        self._asked: Dict[int, _Stream] = {}  # our requests to the client -> the stream they took
        self._hints: "collections.deque[Optional[_Stream]]" = collections.deque()
        self._ask_lock = threading.Lock()
        self.get_stream: Optional[_Stream] = None
        # (a stateless client's: none)
        self.resumes = _Resumes(hub.replays) if hub is not None else None
        conn = self.server.conn
        conn.requests = {m: self._as_caller(m, fn) for m, fn in conn.requests.items()}
        conn.start()

    def _as_caller(self, method: str, fn: _Handler) -> _Handler:
        """The handler, run as this session's (_CALLER): an upstream's question during the call
        comes back to it, on the call's stream."""
        def handle(req: _Request) -> Any:
            if method == "initialize" and isinstance(req.params, dict):
                caps = req.params.get("capabilities")
                caps = caps if isinstance(caps, dict) else {}
                self.caps = {k: caps[k] for k in ("roots", "sampling", "elicitation")
                             if isinstance(caps.get(k), dict)}
            if method == "logging/setLevel" and isinstance(req.params, dict):
                self.level = str(req.params.get("level") or "")
            uri = req.params.get("uri") if isinstance(req.params, dict) else None
            direct = self.server.transparent
            if (method == "resources/unsubscribe" and direct is not None and direct.holds(uri)
                    and self._hub is not None and self._hub.held_elsewhere(self, uri)):
                direct.drop(uri)  # the upstream keeps it for the other sessions
                return {}
            with self._lock:
                got = self._calls.get(req.id)
            stream = got[1] if got is not None else None
            _CALLER.who = _Caller(self.caps, lambda m, p: self.ask(stream, m, p), self.owner)
            try:
                return fn(req)
            finally:
                _CALLER.who = None
                if method == "logging/setLevel" and self._hub is not None:
                    self._hub.relevel()
        return handle

    def ask(self, stream: Optional[_Stream], method: str,
            params: Any) -> Tuple[Connection, int, Future]:
        """A request to this session's client, on `stream` (the calling POST's) when it is
        still open. The hint is queued in the order the writer sends (one lock around both)."""
        conn = self.server.conn
        with self._ask_lock:
            self._hints.append(stream)
            mid, fut = conn.request(method, params)
        return conn, mid, fut

    # -- what the client sends
    def call(self, msg: dict, stream: _Stream, here: bool = False) -> int:
        """A request from the client: handled by the session's server (`here`: on this thread);
        its messages go to `stream`. Abstract's id for it."""
        params = msg.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        with self._lock:
            mine = next(self._ids)
            if self.ended:  # (it raced the session's end, which answered the calls it found)
                stream.put(_error_response(msg["id"], RpcError(_CONNECTION_CLOSED, self._why)))
                stream.end()
                return mine
            self._calls[mine] = (msg["id"], stream, mine if _rpc_key(token) else None)
            if self._hub is not None:
                self._by_client[msg["id"]] = mine
            if _rpc_key(token):
                self._tokens[mine] = (stream, token)
                msg = dict(msg, params=dict(params, _meta=dict(meta, progressToken=mine)))
            stream.call = mine
        if here:
            self.server.conn.handle_here(dict(msg, id=mine))
        else:
            self.server.conn.deliver(dict(msg, id=mine))
        return mine

    def tell(self, msg: dict) -> None:
        """A notification or a response from the client."""
        if msg.get("method") == "notifications/cancelled" and isinstance(msg.get("params"), dict):
            theirs = msg["params"].get("requestId")
            with self._lock:
                mine = self._by_client.get(theirs) if _rpc_key(theirs) else None
            if mine is None:
                return  # not in flight (answered already, or never asked)
            msg = dict(msg, params=dict(msg["params"], requestId=mine))
            self.server.conn.deliver(msg)
            got = self._close_call(mine)  # no answer is owed: its stream ends
            if got is not None:
                got[1].end()
            return
        elif "method" not in msg and _rpc_key(msg.get("id")):
            with self._lock:
                self._asked.pop(msg["id"], None)
        self.server.conn.deliver(msg)

    def cancel(self, mine: int, reason: str) -> None:
        """Cancel a request of the client's (its POST went away, or the session ended)."""
        with self._lock:
            got = self._calls.get(mine)
        if got is not None:
            self.server.conn.deliver({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                      "params": {"requestId": mine, "reason": reason}})
            self._close_call(mine)

    def _close_call(self, mine: int) -> Optional[Tuple[Any, _Stream, Any]]:
        with self._lock:
            got = self._calls.pop(mine, None)
            if got is not None:
                self._by_client.pop(got[0], None)
                if got[2] is not None:
                    self._tokens.pop(got[2], None)
        return got

    def busy(self) -> bool:
        """A request in flight or claimed, or a GET stream open."""
        with self._lock:
            return self._busy()

    def _busy(self) -> bool:  # (under _lock)
        return bool(self._calls) or self._claims > 0 or self.get_stream is not None

    def claim(self) -> bool:
        """A request found it: it is busy (never ended as idle) until release(); False once
        it has ended (the request goes elsewhere)."""
        with self._lock:
            if self.ended:
                return False
            self._claims += 1
            return True

    def release(self) -> None:
        """The request that claimed it is answered."""
        with self._lock:
            self._claims -= 1
        self.used = time.monotonic()

    def in_flight(self) -> int:
        with self._lock:
            return len(self._calls)

    def new_stream(self) -> _Stream:
        """A POST's stream: resumable in a session."""
        return self.resumes.new("p") if self.resumes is not None else _Stream()

    def open_get(self, last_id: Optional[str]) -> Tuple[Optional[_Stream], list]:
        """A GET's stream and the events to replay first: the stream `last_id` names, resumed
        after it; else (none, or not one of this session's) the session's GET stream, the one
        left by a reader that went away or a new one. None while it is read already."""
        assert self.resumes is not None
        found = self.resumes.find(last_id) if last_id else None
        if found is not None:
            stream, n = found
            return (stream, stream.replay.after(n)) if self.resumes.attach(  # type: ignore
                stream) else (None, [])
        with self._lock:
            stream = self.get_stream if self.get_stream and not self.get_stream.ended else None
            if stream is None:
                stream = self.get_stream = self.resumes.new("g")
                return stream, []
        return (stream, []) if self.resumes.attach(stream, 0.0) else (None, [])

    def left(self, stream: _Stream, mine: Optional[int] = None) -> None:
        """The reader of `stream` stopped: at its end, or because its client went away. Its
        POST's call (`mine`), if still in flight, is cancelled unless the stream can be resumed
        (an event with an id went out): then it goes on for _SERVE_RESUME_S."""
        if mine is not None and (stream.replay is None or not stream.replay.sent()):
            self.cancel(mine, "the client closed the connection")
        if self.resumes is not None:
            self.resumes.left(stream)
        self.used = time.monotonic()

    def expire(self, now: float) -> None:
        """Streams left unread past _SERVE_RESUME_S: a POST's call still in flight cancelled,
        the GET stream closed (the session may go idle)."""
        for stream in self.resumes.expired(now) if self.resumes is not None else []:
            if stream.call is not None:
                self.cancel(stream.call, f"the client closed its stream and did not resume it "
                                         f"within {_SERVE_RESUME_S:g} s")
            stream.end()
            with self._lock:
                if self.get_stream is stream:
                    self.get_stream = None

    # -- what the session's server sends
    def _route(self, msg: dict) -> None:
        method = msg.get("method")
        if method is None:  # an answer to the client's request: its stream's last message
            got = self._close_call(msg.get("id"))  # type: ignore[arg-type]
            if got is not None:
                got[1].put(dict(msg, id=got[0]))
                if got[1] is not self.get_stream:  # (a 2024-11-05 session's carries them all)
                    got[1].end()
            return
        if "id" in msg:  # a question for the client
            with self._ask_lock:
                hint = self._hints.popleft() if self._hints else None
            stream = self._open_stream(hint)
            if stream is None or not stream.put(msg):
                self.server.conn.forget(msg["id"], RpcError(
                    _METHOD_NOT_FOUND, f"Method not found: {method} (the client has no stream "
                    f"open to be asked on)"))
                return
            with self._lock:
                self._asked[msg["id"]] = stream
            return
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if method == "notifications/progress":
            with self._lock:
                got = self._tokens.get(params.get("progressToken"))
            stream = got[0] if got is not None else None
            msg = dict(msg, params=dict(params, progressToken=got[1])) if got else msg
        elif method == "notifications/cancelled":
            with self._lock:
                stream = self._asked.pop(params.get("requestId"), None)
        else:
            stream = self._open_stream(None)
        if stream is not None:
            stream.put(msg)

    def _open_stream(self, hint: Optional[_Stream]) -> Optional[_Stream]:
        """Where a message not tied to a request goes: `hint` while it is open, else the GET
        stream, else the newest POST stream being read, else the GET stream its client left
        (kept for its resume); a session's only, never another stateless client's."""
        if hint is not None and not hint.ended:
            return hint
        if self._hub is None:
            return None
        with self._lock:
            get = self.get_stream if self.get_stream and not self.get_stream.ended else None
            if get is not None and get.reading:
                return get
            live = [s for _, s, _ in self._calls.values() if not s.ended and s.reading]
        return live[-1] if live else get

    def end(self, reason: str) -> None:
        """End the session: its calls cancelled (each answered with an error on its stream),
        its streams closed, its server's connection ended (the upstreams stay)."""
        if self.retire(reason):
            self.finish()

    def retire(self, reason: str, idle: bool = False) -> bool:
        """Mark it ended (from now on a request it gets is answered with `reason`), unless it
        is already or, `idle`, it is busy: one check with the mark, so that a request that has
        just claimed it is served. Whether it did (then finish() ends the rest)."""
        with self._lock:
            if self.ended or (idle and self._busy()):
                return False
            self.ended, self._why = True, reason
            return True

    def finish(self) -> None:
        """What ending a retired session takes (end)."""
        with self._lock:
            calls, get, reason = list(self._calls.items()), self.get_stream, self._why
        conn = self.server.conn
        for mine, (theirs, stream, _) in calls:
            conn.deliver({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": mine, "reason": reason}})
            self._close_call(mine)
            stream.put(_error_response(theirs, RpcError(_CONNECTION_CLOSED, reason)))
            stream.end()
        if get is not None:
            get.end()
        self._feed.close()  # the Connection's EOF: its workers' pool closes
        conn.finish(_STOP_JOIN_S)
        if self.resumes is not None:
            self.resumes.forget()
        self.server.temps.stop()
        self.server.temps.sweep()
        self.server.ctx.tables.close()


_SERVE_LISTEN_URIS = 100  # resource URIs one subscriptions/listen may name (more are not honoured)
# subscriptions/listen streams at once (or serve.max_sessions if lower): each holds one of the
# http_max_connections (64) slots for as long as it is open, and other requests need some
_SERVE_LISTENS_MAX = 16


class _Listening:
    """One 2026-07-28 client's subscriptions/listen: its stream, its id (the subscription id of
    every message on it), and what Abstract agreed to send (the acknowledged filter)."""

    def __init__(self, sub: Any, tools: bool, uris: Dict[str, str]) -> None:
        self.sub, self.tools, self.uris = sub, tools, uris  # (uris: URI -> its server)
        self.stream = _Stream()
        self.acked = False  # nothing goes before the acknowledgment (the spec's MUST)

    def tell(self, method: str, params: Optional[dict] = None) -> None:
        self.stream.put({"jsonrpc": "2.0", "method": method, "params": dict(
            params or {}, _meta={_META_SUBSCRIPTION: self.sub})})


class _Listens:
    """The subscriptions/listen streams of 2026-07-28 clients (basic/patterns/subscriptions in
    the 2026-07-28 spec), at most `limit` at once. Each is acknowledged first with the part
    of its filter Abstract honours: toolsListChanged in direct mode, and resourceSubscriptions
    for the URIs of upstreams that take resources/subscribe (subscribed there, and
    unsubscribed when the last holder lets go); prompts and resource lists do not change
    (declared so: listChanged false). Then its stream carries those notifications, each with
    the subscription id, until its client closes it, or Abstract shuts down (a last result
    then: the graceful end)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._open: List[_Listening] = []
        self._stopped = False

    def open(self, msg: dict, direct: Optional[_Transparent]) -> Optional[_Listening]:
        """A new listen for the request `msg` (its stream's first message the acknowledgment),
        or None past the limit (or shutting down)."""
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        asked = params.get("notifications") if isinstance(params.get("notifications"),
                                                          dict) else {}
        with self._lock:
            if len(self._open) >= self.limit or self._stopped:
                return None
            listening = _Listening(msg["id"], asked.get("toolsListChanged") is True
                                   and direct is not None, {})
            self._open.append(listening)
        wanted = asked.get("resourceSubscriptions")
        # (the acknowledgment waits for them: those left after _LISTEN_ACK_S are not honoured)
        deadline = time.monotonic() + _LISTEN_ACK_S
        if direct is not None and isinstance(wanted, list):
            for uri in dict.fromkeys(u for u in wanted if isinstance(u, str) and u):
                if len(listening.uris) >= _SERVE_LISTEN_URIS or time.monotonic() > deadline:
                    break
                server = self._subscribe(direct, uri)
                if server:
                    listening.uris[uri] = server
        honoured: dict = {"toolsListChanged": True} if listening.tools else {}
        if listening.uris:
            honoured["resourceSubscriptions"] = list(listening.uris)
        listening.tell("notifications/subscriptions/acknowledged", {"notifications": honoured})
        listening.acked = True
        return listening

    @staticmethod
    def _subscribe(direct: _Transparent, uri: str) -> str:
        """The server `uri` was subscribed to, or "" when none takes it (logged)."""
        try:
            server = direct.owner(uri)
            if server is None:
                return ""
            up = direct.ctx.upstreams.get(server)
            up.session()
            if _Transparent.no_subscriptions(up):
                return ""
            up.rpc("resources/subscribe", {"uri": uri})
            return server
        except Error as e:
            _log.info("serve: subscriptions/listen: %s not subscribed to: %s", uri[:200], e)
            return ""

    def close(self, listening: _Listening, direct: Optional[_Transparent],
              held: Callable[[str], bool]) -> None:
        """Its client closed it: its URIs unsubscribed from where no one else holds them
        (`held`: a session or another listen does)."""
        with self._lock:
            if listening in self._open:
                self._open.remove(listening)
        listening.stream.end()
        for uri, server in listening.uris.items():
            if held(uri) or direct is None or self._stopped:  # (the upstreams stop anyway)
                continue
            with contextlib.suppress(Error):
                direct.ctx.upstreams.get(server).rpc("resources/unsubscribe", {"uri": uri})

    def _each(self) -> List[_Listening]:
        with self._lock:
            return [lis for lis in self._open if lis.acked]

    def holds(self, uri: Any) -> bool:
        with self._lock:
            return any(uri in lis.uris for lis in self._open)

    def tools_changed(self) -> None:
        for lis in self._each():
            if lis.tools:
                lis.tell("notifications/tools/list_changed")

    def resource_updated(self, server: str, params: dict) -> None:
        for lis in self._each():
            if lis.uris.get(params.get("uri")) == server:  # type: ignore[arg-type]
                lis.tell("notifications/resources/updated",
                         {k: v for k, v in params.items() if k != "_meta"})

    def upstream_started(self, server: str, conn: Connection) -> None:
        """A new run of `server`: its URIs subscribed to again (once each, not waited for), and
        each listener told they may have changed meanwhile."""
        uris: Dict[str, None] = {}
        for lis in self._each():
            for uri in [u for u, s in lis.uris.items() if s == server]:
                uris[uri] = None
                lis.tell("notifications/resources/updated", {"uri": uri})
        for uri in uris:
            conn.request("resources/subscribe", {"uri": uri})

    def end(self) -> None:
        """Shutdown: each stream's last message its result (the graceful end), then closed."""
        with self._lock:
            self._stopped = True
            ending, self._open = self._open, []
        for lis in ending:
            lis.stream.put({"jsonrpc": "2.0", "id": lis.sub, "result": {
                "resultType": "complete", "_meta": {_META_SUBSCRIPTION: lis.sub}}})
            lis.stream.end()


_OLD_SSE_PATH, _OLD_POST_PATH = "/sse", "/messages"  # the 2024-11-05 HTTP+SSE transport


class _OldSse:
    """The HTTP+SSE transport of 2024-11-05 (basic/transports in that spec), for old clients:
    `GET /sse` opens a session whose stream's first event is `endpoint`, the URL to POST to
    (`/messages?session_id=<the session's id>`); each message POSTed there gets 202, and its
    answer goes out on the stream, as everything of the session does. The session ends with
    its stream. The guard is the one in front of /mcp (_Sessions._exchange)."""

    def __init__(self, hub: "_Sessions") -> None:
        self._hub = hub

    def exchange(self, ex: _HttpExchange) -> None:
        if ex.path == _OLD_SSE_PATH and ex.method == "GET":
            self._stream(ex)
        elif ex.path == _OLD_POST_PATH and ex.method == "POST":
            self._message(ex)
        else:
            ex.reply(405, {"Content-Type": "text/plain; charset=utf-8", "Allow": "GET" if
                           ex.path == _OLD_SSE_PATH else "POST"}, b"method not allowed\n")

    def _stream(self, ex: _HttpExchange) -> None:
        hub = self._hub
        session = hub._open(hub._who(ex))
        if session is None:
            hub._refuse(ex, 503, f"Abstract serves at most {hub._max} sessions at once "
                                 f"(serve.max_sessions); end one or wait for an idle one to "
                                 f"time out", _BUSY)
            return
        stream = session.get_stream = _Stream()
        try:
            ex.stream({})
            url = f"{_OLD_POST_PATH}?session_id={session.sid}"
            if ex.event(url.encode(), kind="endpoint"):
                hub._pump(ex, stream, lambda: hub._lapsed(ex, session.sid))
        finally:
            hub._end(session, "the client closed its SSE stream (/sse)")

    def _message(self, ex: _HttpExchange) -> None:
        hub = self._hub
        sid = urllib.parse.parse_qs(ex.query).get("session_id", [""])[0]
        session = hub.named(sid, ex)
        if session is None or session.get_stream is None:
            hub._refuse(ex, 404, "Session not found (its /sse stream closed, or never opened): "
                                 "open GET /sse for a new one")
            return
        msg = hub.message(ex)
        if msg is None:
            return
        if not isinstance(msg.get("method"), str) or "id" not in msg:
            session.tell(msg)
        elif session.in_flight() >= _SERVE_STREAMS_MAX:
            hub._refuse(ex, 429, f"too many requests of this session in flight (at most "
                                 f"{_SERVE_STREAMS_MAX}); send more when some are answered",
                        _BUSY, msg["id"])
            return
        else:
            session.call(msg, session.get_stream)
        ex.reply(202, {"Content-Type": "text/plain; charset=utf-8"}, b"Accepted\n")


def _rpc_body(code: int, message: str, mid: Any = None) -> bytes:
    return _dumps(_error_response(mid, RpcError(code, message))).encode()


# CORS on /mcp, for an origin the guard allows (a browser page: the Inspector's web UI, a web
# app): what a preflight allows, and what an answer lets the page read. No credentials mode:
# the bearer token is a header the page sends, never a cookie.
_SERVE_CORS_PREFLIGHT = {
    "Access-Control-Allow-Methods": "GET, POST, DELETE",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, Accept, Mcp-Session-Id, "
                                    "MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name",
    "Access-Control-Max-Age": "600"}
_SERVE_CORS_EXPOSE = "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate"


class _WithHeaders:
    """An _HttpExchange whose every answer (reply, stream) carries `extra` headers too (CORS
    on /mcp); the rest is the exchange's own."""

    def __init__(self, ex: _HttpExchange, extra: Dict[str, str]) -> None:
        self._ex, self._extra = ex, extra

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ex, name)

    def reply(self, status: int, headers: Dict[str, str], body: bytes, *more: Any,
              **named: Any) -> Any:
        return self._ex.reply(status, dict(headers, **self._extra), body, *more, **named)

    def stream(self, headers: Dict[str, str], *more: Any, **named: Any) -> Any:
        return self._ex.stream(dict(headers, **self._extra), *more, **named)


class _Sessions:
    """--serve's sessions and its /mcp endpoint (exchange, given every HTTP request): the guard
    first, then the authorization server's paths, then MCP. Upstream events reach every
    session (list_changed, log messages by each one's level, resource updates by each one's
    subscriptions). 2026-07-28 requests name no session: each credential's are served by one
    of its own (_stateless_session), counted in serve.max_sessions with the others (_open)."""

    def __init__(self, make: Callable[[Any, Any], Any], upstreams: _Upstreams,
                 body_max: int, guard: Any = None, auth: Any = None,
                 idle_s: float = _SERVE_IDLE_S, max_sessions: int = _SERVE_SESSIONS_MAX,
                 armed: bool = True) -> None:
        self._make, self.upstreams, self._body_max = make, upstreams, body_max
        self._guard, self._auth = guard, auth
        # requests wait for the guard (built once the port is bound: arm) before anything
        self._armed = threading.Event()
        if armed:
            self._armed.set()
        self._idle_s, self._max = idle_s, max_sessions
        self._lock = threading.Lock()
        self._sessions: Dict[str, _Session] = {}
        self._owners: Dict[str, str] = {}  # session id -> whom its credential names (who)
        self.replays = _ReplayBudget()  # what the streams of all its sessions keep to resume
        # the sessions of 2026-07-28 requests (which name none), one per credential: whom it
        # names (_who) -> its session ("": no authentication, every client's; None: being made)
        self._stateless: Dict[str, Optional[_Session]] = {}
        self._making = threading.Lock()  # (one is made per credential, however many race)
        # their subscriptions/listen streams
        self.listens = _Listens(min(max_sessions, _SERVE_LISTENS_MAX))
        self._old = _OldSse(self)  # the 2024-11-05 transport's endpoints
        self._stopped = threading.Event()
        self._why_stopped = ""
        self._handlers = 0  # HTTP requests being answered
        self._quiet = threading.Condition(self._lock)
        self._inline: Dict[_Stream, float] = {}  # handlers running on HTTP threads: since when
        upstreams.client.serve_many()
        upstreams.listen(self._relay_log, self._tools_changed)
        for name in upstreams.names():
            up = upstreams.get(name)
            up.on_updated, up.on_started = self._resource_updated, self._upstream_started
        self._sweeper = threading.Thread(target=self._sweep, name="abstract-serve-sweep",
                                         daemon=True)
        self._sweeper.start()

    # -- upstream events, to every session
    def _each(self) -> List[_Session]:
        with self._lock:  # (None: a session being built)
            return [s for s in self._sessions.values() if s is not None and not s.ended]

    def _relay_log(self, server: str, params: dict) -> None:
        for s in self._each():
            s.server.relay_log(server, params)

    def _tools_changed(self, server: str) -> None:
        for s in self._each():
            s.server.tools_changed(server)
        self.listens.tools_changed()

    def _resource_updated(self, server: str, params: dict) -> None:
        for s in self._each():
            s.server.resource_updated(server, params)
        self.listens.resource_updated(server, params)

    def _upstream_started(self, server: str, conn: Connection) -> None:
        for s in self._each():
            s.server.upstream_started(server, conn)
        self.listens.upstream_started(server, conn)

    def held_elsewhere(self, session: Optional[_Session], uri: Any) -> bool:
        """Whether a session other than `session` holds a subscription to `uri` (the upstream
        is unsubscribed when the last one lets go), or a 2026-07-28 client's listen does."""
        return self.listens.holds(uri) or any(
            s is not session and s.server.transparent is not None
            and s.server.transparent.holds(uri) for s in self._each())

    def relevel(self) -> None:
        """The upstreams' logging level: the lowest any session asked for (each session
        gets only what its own level admits: _Server.relay_log)."""
        asked = [s.level for s in self._each() if s.level in _LOG_LEVELS]
        if asked:
            self.upstreams.set_level(min(asked, key=_LOG_LEVELS.index))

    # -- sessions
    def _open(self, owner: Optional[str] = None, stateless: bool = False) -> Optional[_Session]:
        """A new session, bound to the credential `owner` names (_who; None: unbound), or None
        when full. `stateless`: the session of that credential's 2026-07-28 requests (no id;
        _stateless_session). serve.max_sessions counts both kinds, but not the stateless one
        shared without authentication; at the bound, the stateless one used least recently
        with no request in flight is ended to make room."""
        import secrets  # lazy: see Imports

        key, victim = owner or "", None
        why = (f"a credential's 2026-07-28 session, idle, was ended to make room for another "
               f"(serve.max_sessions {self._max}); its next request starts a new one")
        with self._lock:
            if self._stopped.is_set():
                return None
            counted = [v for k, v in self._stateless.items() if k]
            if (key or not stateless) and len(self._sessions) + len(counted) >= self._max:
                # (retire: not one a request has just claimed, or is answered on)
                victim = next((v for v in sorted((v for v in counted if v is not None),
                                                 key=lambda v: v.used)
                               if v.retire(why, idle=True)), None)
                if victim is None:
                    return None
                del self._stateless[victim.owner or ""]
            sid = "" if stateless else secrets.token_urlsafe(32)  # 256 bits
            if stateless:
                self._stateless[key] = None  # (held while it is built)
            else:
                self._sessions[sid] = None  # type: ignore[assignment]
                if owner is not None:
                    self._owners[sid] = owner
        if victim is not None:
            self._end(victim, why, retired=True)
        try:
            session = (_Session(sid, self._make, None, key or None) if stateless
                       else _Session(sid, self._make, self))
        except BaseException:
            with self._lock:
                self._sessions.pop(sid, None)
                self._owners.pop(sid, None)
                if stateless:
                    self._stateless.pop(key, None)
            raise
        if stateless:
            session.claim()  # (its first request's: not ended as idle before that is answered)
        with self._lock:
            if stateless:
                self._stateless[key] = session
            else:
                self._sessions[sid] = session
            late = self._stopped.is_set()  # (close did not see it: it was being made)
        if late:
            self._end(session, self._why_stopped)
        return session

    def _end(self, session: _Session, reason: str, idle: bool = False,
             retired: bool = False) -> None:
        """End `session`; `idle` (the sweeper's): only if it is not busy, checked as it is
        marked ended (_Session.retire); `retired`: marked already."""
        with self._lock:
            mine = retired or session.retire(reason, idle)
            if idle and not mine:
                return  # (a request claimed it meanwhile: it is no longer idle)
            if self._sessions.get(session.sid) is session:
                del self._sessions[session.sid]
                self._owners.pop(session.sid, None)
            if not session.sid and self._stateless.get(session.owner or "") is session:
                del self._stateless[session.owner or ""]
        if mine:
            session.finish()
            _log.info("serve: a session ended: %s", reason)

    def _sweep(self) -> None:
        """End idle sessions and forget streams kept too long for a resume; start the answer's
        thread of a call slower than _SERVE_INLINE_S whose handler runs on its HTTP thread (it
        then sees a client that went away, and sends SSE keep-alives)."""
        every = min(_SERVE_SWEEP_S, self._idle_s / 4, _SERVE_RESUME_S / 4)
        due = time.monotonic() + every
        while not self._stopped.wait(min(_SERVE_INLINE_S, every)):
            now = time.monotonic()
            with self._lock:
                slow = [s for s, t in self._inline.items() if now - t >= _SERVE_INLINE_S]
            for stream in slow:
                stream.pump()
            if now < due:
                continue
            due = now + every
            with self._lock:  # (a credential's stateless session idles out too; not the shared)
                owned = [v for k, v in self._stateless.items() if k and v is not None]
            for s in self._each() + owned:
                s.expire(now)
                if not s.busy() and now - s.used > self._idle_s:
                    self._end(s, f"idle for {self._idle_s:g} s (serve.idle_timeout_seconds)",
                              idle=True)

    def close(self, reason: str) -> None:
        """Shutdown: every session ended (its calls answered with an error, its streams
        closed), and the HTTP answers under way given _SERVE_HANDLERS_S to finish."""
        self._why_stopped = reason  # (a session still being made is ended with it: _open)
        self._stopped.set()
        self.listens.end()
        with self._lock:
            sessions = [s for s in self._sessions.values() if s is not None]
            sessions += [s for s in self._stateless.values() if s is not None]
        for s in sessions:
            self._end(s, reason)
        deadline = time.monotonic() + _SERVE_HANDLERS_S
        with self._quiet:
            while self._handlers and time.monotonic() < deadline:
                self._quiet.wait(max(0.0, deadline - time.monotonic()))
        self._sweeper.join(_STOP_JOIN_S)

    # -- HTTP
    def exchange(self, ex: _HttpExchange) -> None:
        """One HTTP request (a thread of the server's): never raises."""
        with self._lock:
            self._handlers += 1
        try:
            self._exchange(ex)
        except (ConnectionError, TimeoutError) as e:  # the client went away or stalled
            _log.debug("serve: %s %s: the client is gone: %s", ex.method, ex.path, e)
        except Exception:
            _log.error("serve: %s %s failed:\n%s", ex.method, ex.path, traceback.format_exc())
            if not ex.streaming:
                with contextlib.suppress(OSError, ValueError):
                    ex.reply(500, {"Content-Type": "application/json"}, _rpc_body(
                        _INTERNAL_ERROR, "Internal error (Abstract's log on stderr says why)"))
        finally:
            with self._quiet:
                self._handlers -= 1
                self._quiet.notify_all()

    def arm(self, guard: Any, auth: Any) -> None:
        """The guard and the authorization server, once the port is bound: requests that came
        before (they waited) and after are checked by them."""
        self._guard, self._auth = guard, auth
        self._armed.set()

    def _exchange(self, ex: _HttpExchange) -> None:
        if not self._armed.wait(_SERVE_ARM_S):  # (never armed: start-up failed meanwhile)
            ex.reply(503, {"Content-Type": "text/plain; charset=utf-8"}, b"starting\n")
            return
        said = self._guard.check(ex.method, ex.path, ex.headers) if self._guard else None
        cors = getattr(self._guard, "cors_origin", None)
        origin = cors(ex.headers) if cors is not None and ex.path == _SERVE_PATH else ""
        if origin:  # (a refused Origin gets none: its page cannot read the 403)
            ex = _WithHeaders(ex, {"Access-Control-Allow-Origin": origin, "Vary": "Origin",
                                   "Access-Control-Expose-Headers": _SERVE_CORS_EXPOSE})
        if said is None and self._auth is not None and self._auth.handles(ex.path):
            body, why = ex.body(_AS_BODY_MAX) if ex.method == "POST" else (b"", None)
            said = ((why[0], {"Content-Type": "text/plain; charset=utf-8"}, why[1].encode())
                    if why else self._auth.respond(ex.method, ex.path, ex.query, ex.headers,
                                                   body))
        if said is not None:
            status, headers, body = said
            ex.reply(status, headers, body)
        elif ex.path in (_OLD_SSE_PATH, _OLD_POST_PATH):
            self._old.exchange(ex)
        elif ex.path != _SERVE_PATH:
            ex.reply(404, {"Content-Type": "text/plain; charset=utf-8"},
                     f"not found: MCP is served at {_SERVE_PATH}\n".encode())
        elif ex.method == "POST":
            self._post(ex)
        elif ex.method == "GET":
            self._get(ex)
        elif ex.method == "DELETE":
            self._delete(ex)
        elif ex.method == "OPTIONS":  # a CORS preflight (the guard refused a foreign Origin)
            ex.reply(204, dict(_SERVE_CORS_PREFLIGHT, Allow="GET, POST, DELETE, OPTIONS"), b"")
        else:
            ex.reply(405, {"Content-Type": "text/plain; charset=utf-8", "Allow":
                           "GET, POST, DELETE, OPTIONS"}, b"method not allowed\n")

    @staticmethod
    def _refuse(ex: _HttpExchange, status: int, message: str, code: int = _INVALID_REQUEST,
                mid: Any = None) -> None:
        ex.reply(status, {"Content-Type": "application/json"}, _rpc_body(code, message, mid))

    def owner_of(self, sid: str) -> Optional[str]:
        """Whom the credential that opened session `sid` names (None: unbound)."""
        with self._lock:
            return self._owners.get(sid)

    def named(self, sid: str, ex: _HttpExchange) -> Optional[_Session]:
        """The open session of that id, if any and if the request's credential opened it."""
        with self._lock:
            session = self._sessions.get(sid) if sid else None
            owner = self._owners.get(sid)
        if owner is not None and owner != self._who(ex):
            return None  # (another's: as unknown)
        return session if session is not None and not session.ended else None

    def _session_of(self, ex: _HttpExchange) -> Optional[_Session]:
        """The session the request names, or None once refused (400 without one, 404 for one
        that is not, or no longer, open: the client starts a new one with initialize)."""
        sid = ex.headers.get(_SESSION_HEADER)
        if not sid:
            self._refuse(ex, 400, f"Bad Request: the {_SESSION_HEADER} header is missing; send "
                                  f"initialize first and then the id its answer gave")
            return None
        with self._lock:
            session = self._sessions.get(sid)
            owner = self._owners.get(sid)
        # a session is its opener's: a request with another credential is told what one for
        # an unknown id is (the id is not confirmed to exist)
        theirs = session is None or owner is None or owner == self._who(ex)
        if not theirs:
            _log.info("serve: a request named a session opened with another credential: "
                      "refused as unknown")
        if session is None or session.ended or not theirs:
            self._refuse(ex, 404, "Session not found (ended, timed out or never opened): send "
                                  "initialize to start a new one")
            return None
        session.used = time.monotonic()
        return session

    def _who(self, ex: _HttpExchange) -> str:
        """Whom the request's credential names (_ServeGuard.who; "" without a guard that
        says)."""
        who = getattr(self._guard, "who", None)
        return who(ex.headers) if who is not None else ""

    def _version_ok(self, ex: _HttpExchange) -> bool:
        version = ex.headers.get("MCP-Protocol-Version")
        if version is None or version in _HANDSHAKE_VERSIONS + _MODERN_VERSIONS:
            return True
        self._refuse(ex, 400, f"Bad Request: unsupported MCP-Protocol-Version {version[:40]!r}; "
                              f"supported: {', '.join(_MODERN_VERSIONS + _HANDSHAKE_VERSIONS)}")
        return False

    def message(self, ex: _HttpExchange) -> Optional[dict]:
        """The one JSON-RPC message a POST's body holds, or None once refused."""
        body, why = ex.body(self._body_max)
        if why is not None:
            self._refuse(ex, why[0], why[1])
            return None
        try:
            msg = json.loads(body, parse_constant=_no_nan)  # type: ignore[arg-type]
        except (ValueError, RecursionError) as e:
            self._refuse(ex, 400, f"Parse error: {str(e)[:200]}", _PARSE_ERROR)
            return None
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or (
                "id" in msg and not _rpc_key(msg["id"])):
            self._refuse(ex, 400, "Invalid Request: one JSON-RPC 2.0 object a POST, its id a "
                                  "string or an integer (batches are not supported)")
            return None
        return msg

    def _post(self, ex: _HttpExchange) -> None:
        msg = self.message(ex)
        if msg is None or not self._version_ok(ex):
            return
        method = msg.get("method")
        params = msg.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(method, str) and "id" in msg and (
                method == "server/discover" or (isinstance(meta, dict) and _META_VERSION in meta)):
            self._stateless_post(ex, msg)
            return
        if method == "initialize" and "id" in msg:
            session = self._open(self._who(ex))
            if session is None:
                self._refuse(ex, 503, f"Abstract serves at most {self._max} sessions at once "
                                      f"(serve.max_sessions); end one (DELETE) or wait for an "
                                      f"idle one to time out", _BUSY, msg.get("id"))
                return
        else:
            session = self._session_of(ex)
            if session is None:
                return
        if not isinstance(method, str) or "id" not in msg:
            session.tell(msg)  # (a malformed one is answered by the Connection: its stream)
            ex.reply(202, {}, b"")
            return
        self._answer(ex, session, msg, {_SESSION_HEADER: session.sid})

    def _stateless_post(self, ex: _HttpExchange, msg: dict) -> None:
        """A 2026-07-28 request: no session; its Mcp-Method and Mcp-Name headers, when sent,
        must say what the body says."""
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        name = params.get("uri") if msg["method"] == "resources/read" else params.get("name")
        for header, want in (("Mcp-Method", msg["method"]), ("Mcp-Name", name)):
            got = ex.headers.get(header)
            if got is not None and got != want:
                self._refuse(ex, 400, f"Bad Request: the {header} header ({got[:100]!r}) is not "
                                      f"what the body says ({str(want)[:100]!r})",
                             _INVALID_REQUEST, msg.get("id"))
                return
        who = self._who(ex)
        if not who and getattr(self._guard, "authenticates", False):
            # (its credential lapsed since the guard passed it, an OAuth access token expiring
            # or revoked just then: never the unauthenticated clients' shared session) the
            # guard's 401 now, with its WWW-Authenticate
            said = self._guard.check(ex.method, ex.path, ex.headers) or (
                401, {"Content-Type": "application/json", "WWW-Authenticate":
                      'Bearer realm="abstract", error="invalid_token"'},
                _rpc_body(_INVALID_REQUEST, "Unauthorized: the bearer token expired or was "
                                            "revoked as this request came; send it again with a "
                                            "valid one", msg["id"]))
            ex.reply(*said)
            return
        session = self._stateless_session(who)
        if session is None:
            self._refuse(ex, 503, f"Abstract serves at most {self._max} sessions at once "
                                  f"(serve.max_sessions), the 2026-07-28 requests of each "
                                  f"credential counting as one, and each has a request in "
                                  f"flight; send this again once one is answered, or raise "
                                  f"serve.max_sessions", _BUSY, msg["id"])
        elif msg["method"] == "subscriptions/listen":
            session.release()  # (its stream is the hub's, not the session's: _Listens)
            self._listen(ex, msg, session)
        else:
            try:
                self._answer(ex, session, msg, {})
            finally:
                session.release()

    def _stateless_session(self, owner: str) -> Optional[_Session]:
        """The session of the 2026-07-28 requests of the credential `owner` names (_who; ""
        without authentication: every client's), made on first use; None when full (_open).
        Kept apart per credential: one's tasks, and its upstreams' questions, are its own.
        Claimed for the request (_Session.claim: release it once answered), so that neither
        the sweeper nor another's _open ends it meanwhile; one ended as this came is replaced."""
        with self._lock:
            session = self._stateless.get(owner)
        if session is None or not session.claim():
            with self._making:
                with self._lock:
                    session = self._stateless.get(owner)
                if session is None or not session.claim():
                    session = self._open(owner, stateless=True)
        if session is not None:
            session.used = time.monotonic()
        return session

    def _listen(self, ex: _HttpExchange, msg: dict, session: _Session) -> None:
        """A 2026-07-28 subscriptions/listen (`session`: its credential's): its SSE stream (the
        acknowledgment, then the notifications it asked for) until its client closes it or
        Abstract shuts down."""
        if "text/event-stream" not in (ex.headers.get("Accept") or "text/event-stream"):
            self._refuse(ex, 406, "Not Acceptable: subscriptions/listen is answered with a "
                                  "text/event-stream", _INVALID_REQUEST, msg["id"])
            return
        try:
            _Server._is_modern(_Request(msg["id"], msg["method"], msg.get("params")))
        except RpcError as e:
            ex.reply(200, {"Content-Type": "application/json"},
                     _dumps(_error_response(msg["id"], e)).encode())
            return
        direct = session.server.transparent
        listening = self.listens.open(msg, direct)
        if listening is None:
            self._refuse(ex, 503, f"Abstract serves at most {self.listens.limit} "
                                  f"subscriptions/listen streams at once; close one, or listen "
                                  f"again later", _BUSY, msg["id"])
            return
        try:
            ex.stream({})
            self._pump(ex, listening.stream)
        finally:
            self.listens.close(listening, direct, lambda uri: self.held_elsewhere(None, uri))

    def _answer(self, ex: _HttpExchange, session: _Session, msg: dict,
                headers: Dict[str, str]) -> None:
        """A request's answer: JSON when the result comes first; an SSE stream when the call
        sends something before it (progress, a log message, a question), the result last."""
        # (without authentication every client's 2026-07-28 requests share one session: a
        # larger bound; with it, a credential's have the bound of a session)
        shared = not session.sid and session.owner is None
        limit = _SERVE_STREAMS_MAX * (self._max if shared else 1)
        if session.in_flight() >= limit:
            whose = ("requests of this session" if session.sid else "2026-07-28 requests"
                     if shared else "2026-07-28 requests of this credential")
            self._refuse(ex, 429, f"too many {whose} in flight (at most {limit}); send more "
                                  f"when some are answered", _BUSY, msg["id"])
            return
        sse = "text/event-stream" in (ex.headers.get("Accept") or "text/event-stream")
        stream = session.new_stream()
        # the handler runs on this thread, which would only wait for it (two thread hand-offs
        # a call fewer); a message before the result, or a call slower than _SERVE_INLINE_S,
        # starts a thread that writes the answer meanwhile (_relay)
        args = (ex, session, msg, stream, headers, sse)
        stream.running(lambda: self._answering(*args))
        with self._lock:
            self._inline[stream] = time.monotonic()
        try:
            session.call(msg, stream, here=True)
        finally:
            with self._lock:
                self._inline.pop(stream, None)
            pumped = stream.running(None)
        if pumped is not None:
            pumped.join()
        else:
            self._relay(*args)

    def _answering(self, ex: _HttpExchange, session: _Session, msg: dict, stream: _Stream,
                   headers: Dict[str, str], sse: bool) -> threading.Thread:
        """A thread that writes a request's answer (_relay) while its handler runs."""
        def relay() -> None:
            try:
                self._relay(ex, session, msg, stream, headers, sse)
            except (ConnectionError, TimeoutError) as e:  # the client went away or stalled
                _log.debug("serve: %s: the client is gone: %s", msg.get("method"), e)
            except Exception:
                _log.error("serve: %s failed:\n%s", msg.get("method"), traceback.format_exc())
            finally:  # a stream, or a client gone: its slot is not held while the call goes on
                if ex.streaming or not ex.answered:
                    ex.release()
        thread = threading.Thread(target=relay, name="abstract-serve-answer", daemon=True)
        thread.start()
        return thread

    def _relay(self, ex: _HttpExchange, session: _Session, msg: dict, stream: _Stream,
               headers: Dict[str, str], sse: bool) -> None:
        """Write what comes on `stream` as the request's answer: JSON when the result comes
        first, else SSE until the result (event ids: a client may resume it); a client that
        went away is the session's to judge (_Session.left: cancelled at once when nothing
        was sent, else after the resume's grace). Its call's id is read when needed: the
        writer may start (_SERVE_INLINE_S) before _Session.call has set it."""
        try:
            while not ex.streaming:  # JSON when the answer comes first
                got = stream.get(1.0)
                if got is None:
                    if stream.ended:  # cancelled by its client (no answer owed), or overflowed
                        if stream.overflow:
                            session.cancel(stream.call or 0, "the client did not read its stream")
                        ex.reply(202, headers, b"")
                        return
                    if ex.gone():
                        return
                elif "method" not in got and got.get("id") == msg["id"]:
                    ex.reply(200, dict(headers, **{"Content-Type": "application/json"}),
                             _dumps(got).encode())
                    return
                elif sse:  # else a client that takes JSON only gets the result alone...
                    ex.stream(headers, _SERVE_RETRY_MS if stream.replay else 0)
                    data = _dumps(got).encode()
                    if not ex.event(data, stream.event_id(data)):
                        return
                elif "id" in got:  # ...and cannot be asked: the question fails at once
                    session.server.conn.forget(got["id"], RpcError(
                        _METHOD_NOT_FOUND, f"Method not found: {got.get('method')} (the "
                        f"client's Accept has no text/event-stream: it cannot be asked)"))
            self._pump(ex, stream)
            if stream.overflow:
                session.cancel(stream.call or 0, "the client did not read its stream")
        finally:  # (a call answered already is not cancelled: the same whatever ended it)
            session.left(stream, stream.call)

    def _get(self, ex: _HttpExchange) -> None:
        """The session's standalone stream (one at a time): what is not tied to a request."""
        if ex.headers.get(_SESSION_HEADER) is None and ex.headers.get("MCP-Protocol-Version") \
                in _MODERN_VERSIONS:
            ex.reply(405, {"Allow": "POST"}, b"")
            return
        if not self._version_ok(ex):
            return
        session = self._session_of(ex)
        if session is None:
            return
        if "text/event-stream" not in (ex.headers.get("Accept") or "text/event-stream"):
            self._refuse(ex, 406, "Not Acceptable: the GET stream is text/event-stream")
            return
        last_id = ex.headers.get("Last-Event-ID")
        stream, replay = session.open_get(last_id)
        if stream is None:
            self._refuse(ex, 409, "Conflict: the stream that Last-Event-ID names is being read "
                                  "already (one reader each)" if last_id else "Conflict: this "
                                  "session's GET stream is open already (one each)")
            return
        try:
            ex.stream({_SESSION_HEADER: session.sid}, _SERVE_RETRY_MS)
            if all(ex.event(data, eid) for eid, data in replay):
                # (a stream outlives no credential: _lapsed)
                self._pump(ex, stream, lambda: self._lapsed(ex, session.sid))
        finally:
            session.left(stream)

    @staticmethod
    def _pump(ex: _HttpExchange, stream: _Stream,
              lapsed: Optional[Callable[[], bool]] = None) -> bool:
        """`stream`'s messages as SSE events (a comment line when none went out for
        _SERVE_KEEPALIVE_S) until it ends and is drained (True) or the client is gone (or
        `lapsed()` says its credential is no longer accepted, checked each second)."""
        last = time.monotonic()
        while True:
            got = stream.get(1.0)
            if lapsed is not None and lapsed():
                return False
            if got is None:
                if stream.ended:
                    return True
                if ex.gone():
                    return False
                if time.monotonic() - last <= _SERVE_KEEPALIVE_S:
                    continue
                data = b""
            else:
                data = _dumps(got).encode()
            last = time.monotonic()
            if not ex.event(data, stream.event_id(data) if data else ""):
                return False

    def _lapsed(self, ex: _HttpExchange, sid: str) -> bool:
        """Whether the credential the request `ex` (a stream's) carries no longer names the
        owner of session `sid`: its OAuth access token expired or was revoked since."""
        with self._lock:
            owner = self._owners.get(sid)
        return owner is not None and owner != self._who(ex)

    def _delete(self, ex: _HttpExchange) -> None:
        session = self._session_of(ex)
        if session is not None:
            self._end(session, "the client ended the session (DELETE)")
            ex.reply(200, {}, b"")


def _serve_forever(address: Tuple[str, int], make: Callable[[Any, Any], Any],
                   upstreams: _Upstreams, settings: _Settings, watch: Any,
                   err: Any, guard: Any = None, auth: Any = None, tls: Any = None,
                   secure: Optional[Callable[[int], Tuple[Any, Any]]] = None) -> "_Serving":
    """Start serving MCP at http://HOST:PORT/mcp (https with `tls`, an ssl.SSLContext; the
    address said on `err`); the _Serving to wait on. `guard` (_ServeGuard) and `auth`
    (_AuthServer) answer first when given; or `secure(port)` makes them once the port is
    bound, and no request is answered before."""
    serving = _Serving(address, make, upstreams, settings, watch, guard, auth, tls,
                       armed=secure is None)
    host, port = serving.httpd.server_address[:2]
    if secure is not None:
        try:
            serving.sessions.arm(*secure(port))
        except BaseException:
            serving.close()
            raise
    shown = f"[{host}]" if ":" in host else host
    scheme = "https" if tls is not None else "http"
    err.write(f"abstract: serving MCP at {scheme}://{shown}:{port}{_SERVE_PATH}\n")
    err.flush()
    return serving


class _Serving:
    """--serve's run: the sessions, the HTTP server, and what ends them (a signal, or the EOF
    of `watch`, a pipe on stdin) for main's shutdown."""

    def __init__(self, address: Tuple[str, int], make: Callable[[Any, Any], Any],
                 upstreams: _Upstreams, settings: _Settings, watch: Any, guard: Any = None,
                 auth: Any = None, tls: Any = None, armed: bool = True) -> None:
        self.upstreams = upstreams
        limit = int(float(settings.serve("max_body_mb")) * (1 << 20))
        self.sessions = _Sessions(make, upstreams, limit, guard, auth,
                                  float(settings.serve("idle_timeout_seconds")),
                                  int(settings.serve("max_sessions")), armed)
        limits = (float(settings.get("http_header_timeout_seconds")),
                  float(settings.get("http_idle_timeout_seconds")),
                  int(settings.get("http_max_connections")))
        self.httpd, self._stop_http = _serve_http(
            address[0], address[1], lambda target: (405, "text/plain", b""), "abstract-serve",
            limits, exchange=self.sessions.exchange, ssl_context=tls)
        self.ended = threading.Event()
        self.terminated = 0
        self._serving = self._stopping = False
        if watch is not None:
            threading.Thread(target=self._watch, args=(watch,), name="abstract-serve-stdin",
                             daemon=True).start()

    def _watch(self, stream: Any) -> None:
        """stdin is a pipe: its end (the parent gone) ends serving. What comes on it is read
        and dropped, a piece at a time."""
        with contextlib.suppress(OSError, ValueError):
            while stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16):
                pass
        self.ended.set()

    def serve(self) -> None:
        """Serve until stdin's EOF or a signal, then: no new connection, every session ended
        (its calls cancelled and answered with an error, its streams closed), the upstreams
        stopped."""
        try:
            try:
                self._serving = True
                if self.terminated:
                    raise _Terminated()
                while not self.ended.wait(1.0 if _WINDOWS else None):
                    pass
            finally:
                self._stopping = True
        except _Terminated:
            pass
        self.close()
        self.upstreams.close()
        _DESCENDANTS.end()

    def close(self) -> None:
        """No new connection; every session ended (its calls cancelled, its streams closed)."""
        self._stop_http()
        self.sessions.close("Abstract is shutting down")

    def on_signal(self, signum: int) -> None:
        """As _Server.on_signal."""
        self.terminated = self.terminated or signum
        if self._serving and not self._stopping:
            raise _Terminated()


# ==== CLI =========================================================================
# main(argv): the flags, --check, --login/--logout, and serving on stdin/stdout.


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
        description="An MCP proxy that keeps large tool results out of the model's context. Reads "
                    "the upstream servers from the MCP client config named by APP_CONFIG_PATH.",
        epilog="Env: APP_CONFIG_PATH (client config file), ABSTRACT_PROXY_SERVERS (comma-separated "
               "names), ABSTRACT_CONFIG (Abstract's settings file), ABSTRACT_TIMEOUT (seconds per "
               "tool call), ABSTRACT_LOG_LEVEL (stderr detail), ABSTRACT_CACHE_SECRET (key for "
               "--http links), ABSTRACT_SERVE_TOKEN (--serve's bearer token). Docs: "
               "docs/reference.md")
    ap.add_argument("dirs", nargs="*", metavar="DIR", help=f"allowed storage directories (created "
                                                           f"if missing); default: "
                                                           f"{_user_dir('outputs')}")
    ap.add_argument("--check", action="store_true", help="start every selected upstream once, "
                                                         "report, and exit")
    ap.add_argument("--login", metavar="NAME", help="log in to the remote server NAME (OAuth, in a "
                    "browser; the URL is printed too, for a machine without one) and exit")
    ap.add_argument("--logout", metavar="NAME",
                    help="forget the saved login of the remote server NAME and exit")
    ap.add_argument("--expose", choices=("meta", "direct", "both"), default="meta",
                    help="meta: Abstract's own tools (default); direct: every upstream tool as "
                         "<server>__<tool>; both")
    ap.add_argument("--http", metavar="[HOST:]PORT", help="serve signed download links for cached "
                                                          "outputs "
                    "(default host 127.0.0.1; port 0 picks a free one)")
    ap.add_argument("--memory", action="store_true", help="offer the conversation memory tools "
                                                          "(save_message, "
                    "get_conversation, ...), kept in the catalog database")
    ap.add_argument("--reindex", action="store_true", help="add the files of the allowed "
                                                           "directories to the catalog "
                    "(after losing it, or a corrupt one), report, and exit")
    ap.add_argument("--serve", metavar="[HOST:]PORT", help="serve MCP over Streamable HTTP at "
                    "http://HOST:PORT/mcp to several clients at once (default host 127.0.0.1; port "
                    "0 picks a free one, said on stderr); clients send the bearer token "
                    "--serve-token prints, or log in with OAuth; docs/reference/serving.md")
    ap.add_argument("--serve-token", action="store_true", help="print the bearer token --serve "
                    "asks for (ABSTRACT_SERVE_TOKEN, else the token file, made on first use) and "
                    "exit")
    ap.add_argument("--serve-cert", metavar="FILE", help="--serve over TLS (https): the PEM "
                                                         "certificate chain")
    ap.add_argument("--serve-key", metavar="FILE", help="its PEM private key (unless "
                                                        "--serve-cert holds it)")
    ap.add_argument("--serve-origin", metavar="ORIGIN", action="append", help="a browser origin "
                    "(https://host[:port]) whose pages may call --serve; repeatable")
    ap.add_argument("--serve-public-url", metavar="URL", help="the public https origin of a "
                    "tunnel or reverse proxy in front of --serve (https://host[:port]): OAuth "
                    "names itself by it; its origin and Host are allowed")
    ap.add_argument("--serve-insecure", action="store_true", help="--serve without "
                    "authentication (any program that reaches it may use it), and on an address "
                    "other machines can reach without TLS too: for tests and experiments")
    ap.add_argument("--version", action="version", version=f"abstract {__version__}")
    return ap


def _open_cache(settings: _Settings, env: Dict[str, str],
                roots: Iterable[str] = ()) -> Optional[_OutputCache]:
    """The output cache (None when disabled), in a per-user directory under the temp dir by default.

    The cache deletes files in its directory, so it must be one of its own (_claim_cache_dir).
    An output_cache.dir that is not stops start-up (ConfigError); an unusable default one only
    turns the cache off, with a warning, since the user never chose it.
    """
    # off only when no policy turns it on: not the global one, nor a server's, nor a tool's
    # (tools by the names Abstract shows, as cache_policy takes them)
    policies = [settings.cache_policy("", "")] + [
        settings.cache_policy(server, name) for server, conf in settings.servers.items()
        for name in [""] + [t.get("name", n) for n, t in conf.get("tools", {}).items()]]
    if not any(p["enabled"] for p in policies):
        return None
    user = re.sub(r"[^A-Za-z0-9_.-]", "_", env.get("USER") or env.get("USERNAME")
                  or str(getattr(os, "getuid", lambda: "")()))
    configured = settings.cache("dir")
    directory = os.path.expanduser(configured) if configured else os.path.join(
        tempfile.gettempdir(), f"abstract-cache-{user or 'user'}")
    try:
        cache = _OutputCache(directory, settings, roots=roots)
    except (OSError, ConfigError) as e:
        why = (f"cannot use the output cache directory {directory}: "
               f"{getattr(e, 'strerror', None) or e}")
        if configured:
            raise ConfigError(f"{why}. Set output_cache.dir in Abstract's settings to a new or "
                              f"empty directory of your own, outside the allowed "
                              f"directories") from None
        _log.warning("%s; the output cache is off, so large results pass through whole. Set "
                     "output_cache.dir to a new or empty directory of your own to turn it on", why)
        return None
    return cache


@contextlib.contextmanager
def _sweeping(cache: Optional[_OutputCache]) -> Iterator[None]:
    """While serving, delete expired cache entries every minute, even when nobody asks for them;
    the thread is stopped and joined on the way out."""
    if cache is None:
        yield
        return
    stop = threading.Event()

    def sweeper() -> None:
        while not stop.wait(60.0):
            cache.sweep()

    thread = threading.Thread(target=sweeper, name="abstract-cache-sweep", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(_STOP_JOIN_S)  # (a sweep under way finishes first: it is bounded)


def _start_links(cache: Optional[_OutputCache], settings: _Settings, env: Dict[str, str], value: str
                 ) -> Tuple[Callable[[_CacheEntry], str], Callable[[], None]]:
    """Serve signed download links of cached outputs (--http): (the link maker, the stop)."""
    import secrets  # lazy: see Imports

    if cache is None:
        raise ConfigError("--http serves cached outputs, but the output cache is off "
                          "(output_cache.enabled is false in the settings, or its directory cannot "
                          "be used: see the line above)")
    host, port = _parse_hostport(value, "--http")
    secret = env.get("ABSTRACT_CACHE_SECRET", "").encode()
    if not secret:
        secret = secrets.token_bytes(32)
        _log.info("no ABSTRACT_CACHE_SECRET: links are signed with a random key and stop working "
                  "on restart")
    try:
        limits = (float(settings.get("http_header_timeout_seconds")),
                  float(settings.get("http_idle_timeout_seconds")),
                  int(settings.get("http_max_connections")))
        httpd, link, stop = _serve_links(cache, _Signer(secret), host, port,
                                         settings.get("cache_base_url"), limits)
    except OSError as e:
        raise ConfigError(f"--http {value}: cannot listen: {e.strerror or e}") from None
    _log.info("serving cached outputs on http://%s:%d/cache/", f"[{host}]" if ":" in host else host,
              httpd.server_address[1])
    return link, stop


def _open_catalog(settings: _Settings, needed_by: str = "") -> Tuple[Optional[_Catalog], str]:
    """The catalog, or None and the --check line saying why. Serving goes on without a catalog
    that cannot be opened (outputs are then not recorded); --reindex and --memory need one."""
    if not settings.catalog("enabled"):
        why = "off (catalog.enabled is false in the settings)"
    elif sqlite3 is None:
        why = "unavailable: this Python has no sqlite3 module"
    else:
        configured = settings.catalog("path")
        path = (os.path.abspath(os.path.expanduser(configured)) if configured
                else str(_user_dir("data") / "catalog.sqlite3"))
        try:
            return _Catalog(path, max_text=int(settings.catalog("max_text_kb")) * 1024,
                            own_dir=not configured), ""
        except (OSError, sqlite3.Error) as e:
            why = f"unavailable: cannot open {path}: {getattr(e, 'strerror', None) or e}"
    if needed_by:
        raise ConfigError(f"{needed_by} needs the catalog, which is {why}")
    if why.startswith("unavailable"):
        _log.warning("the catalog is %s; outputs are not recorded", why)
    return None, f"catalog: {why}"


def _reindex_report(catalog: _Catalog, sandbox: _Sandbox, config: _ClientConfig,
                    cache: Optional[_OutputCache],
                    out: Any) -> int:
    """--reindex: add the files of the allowed directories (and live cached outputs) to the
    catalog."""
    try:
        s = _reindex(catalog, sandbox.roots, list(config.specs) + config.unselected, cache)
    # a full disk, a database locked for longer than busy_timeout
    except (OSError, sqlite3.Error) as e:
        raise ConfigError(f"--reindex of {catalog.path} failed: "
                          f"{getattr(e, 'strerror', None) or e}") from None
    out.write(f"reindexed {catalog.path} from "
              f"{_plural(s['directories'], 'directory').replace('ys', 'ies')}: "
              f"{_plural(s['added'], 'file')} added, {s['known']:,} already catalogued, "
              f"{s['unreadable']:,} unreadable, {_plural(s['cached'], 'cached output')} added; the "
              f"catalog now holds {_plural(s['rows'], 'output')}\n")
    return 0


class _CleanText:
    """A text stream whose writes pass through _clean (no secret, no control character): what
    the CLI prints may quote a server's or an authorization server's words."""

    def __init__(self, out: Any) -> None:
        self._out = out

    def write(self, text: str) -> int:
        return self._out.write(_clean(text))

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._out.flush()


class _CleanFormatter(logging.Formatter):
    """Log lines through _clean, tracebacks too (their newlines are kept)."""

    def format(self, record: logging.LogRecord) -> str:
        return _clean(super().format(record))


def _to_text(stdout: Any, report: Callable[[Any], int]) -> int:
    """Run a report (--check, --reindex, --login) on main's binary stdout, or on sys.stdout,
    cleaned (_CleanText)."""
    if stdout is None:
        return report(_CleanText(sys.stdout))
    text = io.TextIOWrapper(stdout, "utf-8", newline="\n", write_through=True)
    try:
        return report(_CleanText(text))
    finally:
        text.detach()  # flush, but leave the caller's stream open


def _check(config: _ClientConfig, upstreams: _Upstreams, out: Any, catalog_line: str = "",
           serving: Sequence[str] = ()) -> int:
    """--check: start every selected upstream in parallel and report per server (after the
    catalog and what --serve would serve)."""
    out.write(f"abstract {__version__} (Python {sys.version.split()[0]})\n")
    if catalog_line:
        out.write(catalog_line + "\n")
    out.writelines(line + "\n" for line in serving)
    if config.error:
        out.write(f"config: {config.error}\n")
        return 1
    out.write(f"config: {config.path}: {_plural(len(config.specs), 'server')} selected\n")
    for name in config.missing:
        out.write(f"  {name}: FAILED: named in ABSTRACT_PROXY_SERVERS but not in the config\n")
    results = upstreams.each(lambda up: up.tools(_WAIT_MAX_S), None, _CHECK_WAIT_S)
    width = max([len(n) for n in results] + [4])
    ok = not config.missing
    for name, got in results.items():
        up = upstreams.get(name)
        if isinstance(got, _StillStarting):
            ok = False
            out.write(f"  {name:<{width}}  NOT ANSWERING: no answer within {got.since:.0f} s of "
                      f"starting ({up._where()}); a first start that downloads (npx, uvx) may "
                      f"take longer: run --check again\n")
        elif isinstance(got, Exception):
            ok = False
            out.write(f"  {name:<{width}}  FAILED: {getattr(got, 'message', None) or got}\n")
        else:
            verb = f"reachable at {_safe_url(up.spec.url)}" if up.spec.remote else "started"
            out.write(f"  {name:<{width}}  {verb}  protocol {up.protocol_version}  "
                      f"{_plural(len(got), 'tool')}  {up.start_ms:.0f} ms\n")
    # config order: the names as transparent mode gives them
    _context_report({n: results[n] for n in upstreams.names()
                     if n in results and not isinstance(results[n], Exception)},
                    {n: _prefix_of(upstreams.get(n).settings, n) for n in upstreams.names()},
                    out)
    upstreams.close()
    return 0 if ok else 1


def _kb_tokens(size: int) -> str:
    return f"{size / 1024:.1f} KB (~{size // 4:,} tokens)"  # ~4 bytes a token, for English and JSON


def _context_report(lists: Dict[str, List[dict]], prefixes: Dict[str, str], out: Any) -> None:
    """--check: what the tool definitions cost the client's context in each --expose mode, and
    the names transparent mode had to change to fit ^[a-zA-Z0-9_-]{1,64}$ or to be unique."""
    meta = len(_dumps([t.listed() for t in _TOOLS if "memory" not in t.needs]))
    clashes: List[_Clash] = []
    names = _transparent_names(lists, prefixes, ["retrieve_cached_output"], clashes)
    per: Dict[str, int] = {n: 0 for n in lists}
    for exposed, (server, t) in names.items():
        per[server] += len(_dumps({**{k: v for k, v in t.items() if k != "outputSchema"},
                                   "name": exposed}))
    out.write(f"context: --expose meta lists {_kb_tokens(meta)} of tool definitions, whatever the "
              f"servers; --expose direct {_kb_tokens(sum(per.values()))}\n")
    width = max([len(n) for n in per] + [4])
    for server, size in per.items():
        out.write(f"  {server:<{width}}  direct: {_plural(len(lists[server]), 'tool')}, "
                  f"{_kb_tokens(size)}\n")
    lines = [f"  server {s!r} is written {_name_chars(s)} in its tools' names\n"
             for s in lists if _name_chars(s) != s and prefixes[s] == _name_chars(s) + "__"]
    lines += [f"  {s}: {t['name']!r} -> {e}\n" for e, (s, t) in names.items()
              if e != f"{prefixes[s]}{t['name']}"]
    lines += [f"  {_clash_text(c, 'tool')}\n" for c in clashes]
    if lines:
        out.write("transparent mode renames (names must match ^[a-zA-Z0-9_-]{1,64}$ and be "
                  "unique):\n")
        out.writelines(lines)


def _print_serve_token(env: Dict[str, str], stdout: Any) -> int:
    """--serve-token: the token alone on stdout (for $(abstract --serve-token)); the only place
    Abstract shows it: not through _CleanText, which would mask it."""
    token = _serve_token(env)
    if env.get(_SERVE_TOKEN_ENV):
        _log.info("the --serve token from %s", _SERVE_TOKEN_ENV)
    else:
        _log.info("the --serve token kept in %s", _serve_folder(env) / "token")
    if stdout is None:
        sys.stdout.write(token + "\n")
        sys.stdout.flush()
    else:
        stdout.write(f"{token}\n".encode("ascii"))
        stdout.flush()
    return 0


def _remote_urls(config: _ClientConfig) -> Dict[str, str]:
    """name -> URL of each selected remote (http or sse) server of the client config."""
    return {n: s.url for n, s in config.specs.items() if s.remote and s.url and not s.problem}


def _login_cli(args: argparse.Namespace, settings: _Settings, env: Dict[str, str], stdin: Any,
               out: Any) -> int:
    """--login NAME / --logout NAME."""
    name = args.login or args.logout
    config = _ClientConfig(env.get("APP_CONFIG_PATH"), None, env, settings.data.get("inputs"))
    if config.error:
        raise ConfigError(config.error)
    urls = _remote_urls(config)
    if name not in urls:
        remote = ", ".join(sorted(urls)) or "none"
        raise ConfigError(f"{name!r} is not a remote (http or sse) server in {config.path}; remote "
                          f"servers there: {remote}")
    auth = _auth_provider(name, urls[name], settings, env)
    if args.logout:
        out.write(f"{name}: {auth.logout()}\n")
        return 0
    lines: "queue.Queue[str]" = queue.Queue()
    rfile = stdin if stdin is not None else sys.stdin.buffer

    def read() -> None:  # the terminal, for a pasted redirect URL
        with contextlib.suppress(OSError, ValueError):
            for line in iter(rfile.readline, b""):
                lines.put(line.decode("utf-8", "replace"))

    threading.Thread(target=read, name="abstract-login-stdin", daemon=True).start()
    try:
        auth.login_cli(out, lines)
    except _AuthError as e:
        raise ConfigError(f"login failed: {e}") from None
    out.write(f"{name}: {auth.status()}. The login is kept in {auth.store.dir}\n")
    return 0


def _auth_report(config: _ClientConfig, upstreams: _Upstreams, out: Any) -> None:
    """--check (after _check started the servers): the login state of each remote server
    (expiry shown; tokens never); a login is said to be needed only where the server asked."""
    urls = _remote_urls(config)
    if urls:
        out.write("logins (remote servers):\n")
    for name in urls:
        up = upstreams.get(name)
        if not isinstance(up.auth, _OAuth):
            out.write(f"  {name}: the entry's own Authorization header or user:password@ in its "
                      f"url (no OAuth login)\n")
        else:
            out.write(f"  {name}: {up.auth.status(reached=bool(up.protocol_version))}\n")


class _Replacing:
    """A text stream that cannot be reconfigured, writing what its encoding cannot show as
    `?` rather than raising."""

    def __init__(self, stream: Any, encoding: str) -> None:
        self._stream, self.encoding = stream, encoding

    def write(self, text: str) -> int:
        return self._stream.write(text.encode(self.encoding, "replace").decode(self.encoding))

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # buffer, fileno, isatty...: the stream's own
        return getattr(self._stream, name)


def _utf8_text(stream: Any, undo: contextlib.ExitStack) -> Any:
    """`stream` writing UTF-8, a character it cannot encode (a lone surrogate of a file name)
    written as \\udcxx: a redirected stdout or stderr on Windows is the ANSI code page, strict
    (cp1252: --check's report of a server named 'café ☃' raised UnicodeEncodeError), and logs
    read by a client came out as cp1252 or \\uXXXX. What is changed is put back by `undo`."""
    encoding = getattr(stream, "encoding", None)
    if not encoding:  # io.StringIO and the like: str in, nothing encoded
        return stream
    errors = getattr(stream, "errors", None) or "strict"
    if codecs.lookup(encoding).name == "utf-8" and errors != "strict":
        return stream
    try:
        stream.reconfigure(encoding="utf-8", errors="backslashreplace")
    except (AttributeError, ValueError, OSError, LookupError):
        return _Replacing(stream, encoding)
    undo.callback(stream.reconfigure, encoding=encoding, errors=errors)
    return stream


def main(argv: Optional[List[str]] = None, *, stdin: Any = None, stdout: Any = None,
         stderr: Any = None,
         environ: Optional[Dict[str, str]] = None) -> int:
    """Run Abstract: serve MCP on stdin/stdout (binary streams), or --check. Returns the exit
    code."""
    with contextlib.ExitStack() as undo:  # the streams as they were, for a caller in-process
        err = _utf8_text(stderr if stderr is not None else sys.stderr, undo)
        if stdout is None:  # --check, --login, --reindex write their reports there
            out = _utf8_text(sys.stdout, undo)
            if out is not sys.stdout:
                undo.enter_context(contextlib.redirect_stdout(out))
        args = _parser().parse_args(argv)
        return _main(args, stdin, stdout, err,
                     dict(os.environ if environ is None else environ))


def _main(args: argparse.Namespace, stdin: Any, stdout: Any, err: Any,
          env: Dict[str, str]) -> int:
    """main() once its streams are set: logging to `err`, then _run."""
    level = env.get("ABSTRACT_LOG_LEVEL", "INFO").upper()
    # setLevel would raise: a traceback, not a message
    if not isinstance(logging.getLevelName(level), int):
        err.write(f"abstract: ABSTRACT_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, not "
                  f"{level!r}\n")
        return 2
    handler = logging.StreamHandler(err)
    handler.setFormatter(_CleanFormatter("abstract: %(message)s"))
    was = _log.level, _log.propagate  # put back on return: a caller in-process keeps its logging
    _log.addHandler(handler)
    _log.setLevel(level)
    _log.propagate = False
    try:
        return _run(args, env, stdin, stdout, err)
    except ConfigError as e:
        err.write(_clean(f"abstract: {e}\n"))
        return 2
    finally:
        _log.removeHandler(handler)
        _log.setLevel(was[0])
        _log.propagate = was[1]


# SIGTERM (what MCP clients send 2 s after closing stdin), SIGINT (Ctrl-C), SIGHUP (its terminal
# closed; POSIX) and SIGBREAK (Ctrl-Break; Windows): those the platform has
_STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGBREAK")


@contextlib.contextmanager
def _on_signals(server: Any) -> Iterator[None]:
    """Each of _STOP_SIGNALS ends serving through the normal shutdown (the one EOF starts), so
    upstreams are stopped rather than orphaned and running calls are answered. Main thread only.

    The handler writes nothing and raises only into the main thread's wait (_Server.on_signal):
    a KeyboardInterrupt left to unwind instead ended the interpreter while the stdin reader
    held its buffer's lock ("Fatal Python error: _enter_buffered_busy", status -6). A signal
    ignored when Abstract started (`nohup` ignores SIGHUP; a shell ignores SIGINT for a job in
    the background) stays ignored, as Python leaves an ignored SIGINT."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        server.on_signal(signum)

    previous = {}
    for name in _STOP_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) != signal.SIG_IGN:
            previous[signum] = signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # (None: set outside Python, cannot be put back)
                signal.signal(signum, handler)


def _check_cli(config: _ClientConfig, upstreams: _Upstreams, out: Any, catalog: str,
               serving: Sequence[str] = ()) -> int:
    """--check: start every upstream once and report, then the login of each remote one
    (reported as needed, never started)."""
    for name in upstreams.names():
        auth = upstreams.get(name).auth
        if isinstance(auth, _OAuth):
            auth.start_logins = False
    code = _check(config, upstreams, out, catalog, serving)
    _auth_report(config, upstreams, out)
    return code


def _serve_security(args: argparse.Namespace, settings: _Settings, env: Dict[str, str],
                    host: str, port: int, tls: bool) -> Tuple[_ServeGuard, Optional[_AuthServer]]:
    """The guard of --serve on the port bound, and (serve.oauth, unless --serve-insecure) the
    authorization server web connectors log in with: its approval page asks for the server's
    token."""
    import hmac  # lazy: see Imports

    if args.serve_insecure or not settings.serve("oauth"):
        return _serve_guard(args, settings, env, host, port, tls), None
    token = _serve_token(env).encode("utf-8")
    issuer = _serve_url(host, port, tls)
    auth = _AuthServer(str(_serve_folder(env) / "oauth"), issuer, issuer + _SERVE_PATH,
                       lambda typed: hmac.compare_digest(typed.encode("utf-8"), token),
                       public=_serve_public(args, settings))
    metadata = f"{issuer}/.well-known/oauth-protected-resource{_SERVE_PATH}"
    return _serve_guard(args, settings, env, host, port, tls, auth.grant_of, metadata), auth


def _serve_cli(args: argparse.Namespace, address: Tuple[str, int, Any],
               make: Callable[[Any, Any], _Server], upstreams: _Upstreams,
               settings: _Settings, env: Dict[str, str], stdin: Any, err: Any) -> int:
    """--serve (checked by _serve_preflight: `address` is its host, port and TLS context): MCP
    over HTTP until a signal, or the EOF of stdin when it is a pipe (or the stream main() was
    given); the exit code."""
    watch = stdin
    if watch is None and sys.stdin is not None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            mode = os.fstat(sys.stdin.fileno()).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                watch = sys.stdin.buffer
    host, port, tls = address
    try:
        serving = _serve_forever((host, port), make, upstreams, settings, watch, err, tls=tls,
                                 secure=lambda bound: _serve_security(
                                     args, settings, env, host, bound, tls is not None))
    except OSError as e:
        raise ConfigError(f"--serve {args.serve}: cannot listen: {e.strerror or e}") from None
    with _on_signals(serving):
        serving.serve()
    return 128 + serving.terminated if serving.terminated else 0


def _own_stdout(stdout: Any, undo: contextlib.ExitStack) -> Any:
    """The stream protocol messages go to: `stdout` when main() was given one; else the real
    stdout's buffer, kept for them alone (a stray print goes to stderr until `undo`)."""
    if stdout is not None:
        return stdout
    undo.callback(setattr, sys, "stdout", sys.stdout)
    real, sys.stdout = sys.stdout.buffer, sys.stderr
    return real


def _run(args: argparse.Namespace, env: Dict[str, str], stdin: Any, stdout: Any, err: Any) -> int:
    """main()'s work once logging is set up; returns the exit code.

    1. Refuse to run under another Abstract (a client config entry that runs Abstract itself
       would start Abstracts without end).
    2. Load the settings, the allowed directories, the client's config, the upstreams (none
       is started yet) and the catalog.
    3. --reindex and --check report and return.
    4. Serve: keep the real stdout for protocol messages, sweep old temporary files, open the
       output cache (its sweeper, and --http's server), then answer until EOF or SIGTERM.
    5. On the way out `undo` stops what was started, last first, so that a caller of main()
       in-process gets its process back as it was (threads, sys.stdout). Serving its own
       stdio, Abstract is (Linux) the subreaper of its upstreams' descendants until then, and
       kills those left (_Descendants).
    """
    if env.get("ABSTRACT_PARENT") and not args.check:  # 1.
        raise ConfigError(f"this Abstract was started by another Abstract (pid "
                          f"{env['ABSTRACT_PARENT']}): an entry in the client config runs Abstract "
                          f"itself. Remove that entry, or leave it out of ABSTRACT_PROXY_SERVERS; "
                          f"it is not started, to avoid endless recursion.")
    _umask()  # 2. read once, before any thread starts
    _SECRETS.add(env.get("ABSTRACT_CACHE_SECRET"), env.get(_SERVE_TOKEN_ENV))
    settings = _Settings.load(env.get("ABSTRACT_CONFIG"), env)
    if args.serve_token:
        return _print_serve_token(env, stdout)
    serving = _serve_preflight(args, settings, env)  # (refused before anything starts)
    if args.login or args.logout:
        return _to_text(stdout, lambda out: _login_cli(args, settings, env, stdin, out))
    dirs = _prepare_dirs(args.dirs, lambda m: err.write(f"abstract: {m}\n"))
    sandbox = _Sandbox(dirs)
    config = _ClientConfig(env.get("APP_CONFIG_PATH"), env.get("ABSTRACT_PROXY_SERVERS"), env,
                           settings.data.get("inputs"))
    allowed = [{"uri": _file_uri(r), "name": os.path.basename(r) or r} for r in sandbox.roots]
    upstreams = _Upstreams(config, settings, _ClientLink(settings.roots_mode(), allowed),
                           environ=env)
    catalog, why = _open_catalog(settings, "--reindex" if args.reindex else "--memory"
                                 if args.memory else "")
    with contextlib.ExitStack() as undo:  # 5. what _run starts, it stops, last started first
        # serving the process's own stdio (not in-process): Linux, no descendant of an upstream
        # outlives Abstract (its subreaper; ended after the upstreams are stopped)
        if stdin is None and stdout is None and not args.reindex and _DESCENDANTS.adopt():
            undo.callback(_DESCENDANTS.end)  # (serve() ends them first: see there)
        if catalog is not None:
            undo.callback(catalog.close)
        if args.reindex:  # 3.
            def reindex(out: Any) -> int:
                cache = _open_cache(settings, env, sandbox.roots)
                assert catalog is not None  # (_open_catalog: --reindex needs one, or stops)
                return _reindex_report(catalog, sandbox, config, cache, out)

            return _to_text(stdout, reindex)
        if args.check:
            described = catalog.describe() if catalog else why
            lines = _serve_lines(args, settings, env, *serving) if serving else []
            return _to_text(stdout, lambda o: _check_cli(config, upstreams, o, described, lines))
        if config.error:
            _log.warning("%s; tools that need upstream servers will say so", config.error)
        rfile = stdin if stdin is not None else sys.stdin.buffer  # 4.
        wfile = _own_stdout(stdout, undo)
        temps = threading.Thread(target=_sweep_temps, args=(sandbox.roots,),
                                 name="abstract-temp-sweep", daemon=True)
        temps.start()
        undo.callback(temps.join, _STOP_JOIN_S)  # (a bounded walk)
        cache = _open_cache(settings, env, sandbox.roots)
        undo.enter_context(_sweeping(cache))
        link = None
        if args.http:
            link, stop_links = _start_links(cache, settings, env, args.http)
            undo.callback(stop_links)
        if args.serve:  # one _Server a session
            return _serve_cli(args, serving, lambda r, w: _Server(
                r, w, sandbox, upstreams, settings, cache, args.expose, catalog, args.memory, link,
                listen=False), upstreams, settings, env, stdin, err)
        server = _Server(rfile, wfile, sandbox, upstreams, settings, cache, args.expose, catalog,
                         args.memory, link)
        with _on_signals(server):
            server.serve()
        return 128 + server.terminated if server.terminated else 0


# ==== Entry point =================================================================

def _exit_now(code: Any) -> None:
    """Flush and leave without interpreter finalisation: at shutdown, a daemon reader thread still
    blocked on stdin would make CPython abort ("could not acquire lock ... at interpreter
    shutdown"); every resource Abstract owns is already closed when main() returns."""
    for stream in (sys.stderr, sys.__stdout__):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code if isinstance(code, int) else 1)


def _console() -> None:
    """The `abstract` command (pyproject's console script) and `python abstract.py`: main(),
    then _exit_now. Ctrl-C before serving begins (or after it ends) exits with 130 too."""
    try:
        _exit_now(main())
    except SystemExit as stop:  # --help, --version, usage errors
        _exit_now(0 if stop.code is None else stop.code)
    except KeyboardInterrupt:
        _exit_now(128 + int(signal.SIGINT))


if __name__ == "__main__":
    sys.modules.setdefault("abstract", sys.modules["__main__"])
    _console()
