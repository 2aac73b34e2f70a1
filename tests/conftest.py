"""Shared helpers: os pipes, a client-config writer pointing at fake_upstream.py, and `Proxy`,
which runs `python abstract.py DIR` as a real subprocess and speaks JSON-RPC lines to it.

Every wait has a timeout; nothing sleeps to synchronise. Teardown kills whatever a test started.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
ABSTRACT = ROOT / "abstract.py"
FAKE = TESTS / "fake_upstream.py"
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MODERN_VERSION = "2026-07-28"
WAIT = 10.0  # default bound on any single wait

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_OUR_ENV = ("APP_CONFIG_PATH", "ABSTRACT_PROXY_SERVERS", "ABSTRACT_CONFIG", "ABSTRACT_TIMEOUT", "ABSTRACT_LOG_LEVEL")


# -- small utilities


def wait_for(predicate: Callable[[], Any], timeout: float = WAIT, what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def pid_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone: PID 1 here may not reap orphans)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): kill(0) is all we know
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def read_lines(path: Path) -> List[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def read_events(path: Path) -> List[dict]:
    """The JSON-line events fake_upstream.py appended to its --state-file."""
    return [json.loads(line) for line in read_lines(path)]


def proc_status(pid: int, key: str) -> int:
    """A kB figure (VmRSS, VmHWM) from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def same_json(a: Any, b: Any) -> bool:
    """Equality of JSON values that also compares types (1, 1.0 and True differ), key order
    of objects, -0.0 against 0.0, and NaN as equal to NaN."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return a == b


def snapshot(root: Path, skip: tuple = ()) -> Dict[str, Any]:
    """Every entry under `root` (symlinks not followed) -> what it is: a directory, a
    symlink's target, or a file's size and SHA-256. Subtrees in `skip` are left out."""
    out: Dict[str, Any] = {}
    skipped = {os.path.realpath(p) for p in skip}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if os.path.realpath(os.path.join(dirpath, d)) not in skipped
                       or os.path.islink(os.path.join(dirpath, d))]
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("dir",)
            elif not os.path.isfile(p):  # a FIFO or socket: never opened (it could block)
                out[rel] = ("special",)
            else:
                data = Path(p).read_bytes()
                out[rel] = ("file", len(data), hashlib.sha256(data).hexdigest())
    return out


def files_under(root: Path) -> Dict[str, bytes]:
    """Relative path -> bytes of every regular file under root (symlinks, FIFOs, ... left out)."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p) and os.path.isfile(p):
                out[os.path.relpath(p, root)] = Path(p).read_bytes()
    return out


def pipe_pair():
    """(reader, writer) binary file objects over one os.pipe."""
    r, w = os.pipe()
    return os.fdopen(r, "rb", buffering=0), os.fdopen(w, "wb", buffering=0)


def text_of(result: dict) -> str:
    """The text of a tools/call result's first content item."""
    return result["content"][0]["text"]


def base_env(**extra: str) -> Dict[str, str]:
    """The test's environment without any Abstract variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in _OUR_ENV}
    env.update(extra)
    return env


# -- Abstract as a subprocess


class Proxy:
    """A running `python abstract.py ...` with a JSON-RPC line client on its stdin/stdout."""

    def __init__(self, args: List[str], env: Dict[str, str], script: Optional[Path] = None) -> None:
        """`script`: another copy of abstract.py to run (default: this checkout's)."""
        self.proc = subprocess.Popen([sys.executable, str(script or ABSTRACT), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     start_new_session=True)
        self.pid = self.proc.pid
        self._cond = threading.Condition()
        self.responses: Dict[str, dict] = {}  # json.dumps(id) -> response
        self.notifications: List[dict] = []
        self.server_requests: List[dict] = []
        self.bad_lines: List[bytes] = []  # stdout lines that are not JSON-RPC messages
        self.raw_lines: List[bytes] = []  # every stdout line as it came (the first 64 KB of each)
        self.stderr_lines: List[str] = []
        self._ids = iter(range(1, 1 << 30))
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._threads:
            t.start()

    # -- readers
    def _read_stdout(self) -> None:
        for line in iter(self.proc.stdout.readline, b""):
            try:
                msg = json.loads(line)
            except ValueError:
                msg = None
            with self._cond:
                self.raw_lines.append(line[:65536])
                self._file(msg, line)
                self._cond.notify_all()

    def _file(self, msg: Any, line: bytes) -> None:
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or not line.endswith(b"\n"):
            self.bad_lines.append(line[:500])
        elif "method" not in msg:
            self.responses[json.dumps(msg.get("id"))] = msg
        elif "id" in msg:
            self.server_requests.append(msg)
        else:
            self.notifications.append(msg)

    def _read_stderr(self) -> None:
        for line in iter(self.proc.stderr.readline, b""):
            with self._cond:
                self.stderr_lines.append(line[:10000].decode("utf-8", "replace").rstrip("\n"))
                self._cond.notify_all()

    @property
    def stderr(self) -> str:
        with self._cond:
            return "\n".join(self.stderr_lines)

    # -- writing
    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg: Any) -> None:
        self.write(json.dumps(msg).encode() + b"\n")

    def notify(self, method: str, params: Optional[dict] = None) -> None:
        msg: dict = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def send_request(self, method: str, params: Optional[dict] = None, rid: Any = None) -> Any:
        """Send a request without waiting; returns its id."""
        rid = next(self._ids) if rid is None else rid
        msg: dict = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return rid

    def wait_response(self, rid: Any, timeout: float = WAIT) -> dict:
        key = json.dumps(rid)
        with self._cond:
            if not self._cond.wait_for(lambda: key in self.responses, timeout):
                raise AssertionError(f"no response to id {rid!r} within {timeout} s; stderr:\n{self.stderr[-3000:]}")
            return self.responses[key]

    def has_response(self, rid: Any) -> bool:
        with self._cond:
            return json.dumps(rid) in self.responses

    def request(self, method: str, params: Optional[dict] = None, timeout: float = WAIT, rid: Any = None) -> dict:
        """Send a request and return the whole response message."""
        return self.wait_response(self.send_request(method, params, rid), timeout)

    def result(self, method: str, params: Optional[dict] = None, timeout: float = WAIT) -> Any:
        resp = self.request(method, params, timeout)
        assert "result" in resp, resp
        return resp["result"]

    def wait_stderr(self, text: str, timeout: float = WAIT) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: any(text in line for line in self.stderr_lines), timeout)
        assert ok, f"{text!r} not on Abstract's stderr within {timeout} s:\n{self.stderr[-3000:]}"

    # -- MCP helpers
    def initialize(self, version: str = LEGACY_VERSIONS[0], capabilities: Optional[dict] = None) -> dict:
        res = self.result("initialize", {"protocolVersion": version, "capabilities": capabilities or {},
                                         "clientInfo": {"name": "pytest", "version": "0"}})
        self.notify("notifications/initialized")
        return res

    def call_tool(self, name: str, args: Optional[dict] = None, timeout: float = WAIT,
                  meta: Optional[dict] = None) -> dict:
        params: dict = {"name": name, "arguments": args or {}}
        if meta is not None:
            params["_meta"] = meta
        return self.result("tools/call", params, timeout)

    def upstream(self, server: str, tool: str, args: Optional[dict] = None, timeout: float = WAIT) -> dict:
        """call_tool through Abstract: the upstream result (or Abstract's isError result)."""
        return self.call_tool("call_tool", {"server": server, "tool_name": tool, "tool_args": args or {}}, timeout)

    def listing(self, **args: Any) -> dict:
        """list_available_tools' structuredContent."""
        return self.call_tool("list_available_tools", args)["structuredContent"]

    # -- end
    def close_stdin(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def wait_exit(self, timeout: float = 5.0) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        """Close stdin, give Abstract a moment, then kill its process group; close every pipe."""
        self.close_stdin()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait(5)
        for t in self._threads:
            t.join(5)
        self.proc.stdout.close()
        self.proc.stderr.close()


# -- a test's world: config, settings, fakes, proxies


class World:
    """Builds a client config of fake upstreams, starts Proxies, and cleans up after the test."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.dir = tmp / "store"
        self.servers: Dict[str, Any] = {}
        self.settings: Optional[dict] = None
        self.proxies: List[Proxy] = []
        self.config_path = tmp / "client_config.json"

    def fake(self, name: str, *flags: str, env: Optional[Dict[str, str]] = None, **extra: Any) -> dict:
        """Add a fake_upstream.py server `name` with its own pidfile and state file."""
        args = [str(FAKE), *flags, "--pidfile", str(self.pidfile(name)), "--state-file", str(self.state(name))]
        entry: dict = {"command": sys.executable, "args": args, **extra}
        if env:
            entry["env"] = env
        self.servers[name] = entry
        return entry

    def pidfile(self, name: str) -> Path:
        return self.tmp / f"{name}.pids"

    def state(self, name: str) -> Path:
        return self.tmp / f"{name}.state"

    def pids(self, name: str) -> List[int]:
        return [int(p) for p in read_lines(self.pidfile(name))]

    def events(self, name: str, kind: Optional[str] = None) -> List[dict]:
        return [e for e in read_events(self.state(name)) if kind is None or e["event"] == kind]

    def write_config(self, key: str = "mcpServers") -> Path:
        self.config_path.write_text(json.dumps({key: self.servers}, indent=2))
        return self.config_path

    def env(self, write: bool = True, **extra: str) -> Dict[str, str]:
        """Abstract's environment: APP_CONFIG_PATH (written unless write=False), settings, extra."""
        if write:
            self.write_config()
        env = base_env(APP_CONFIG_PATH=str(self.config_path))
        settings = json.loads(json.dumps(self.settings or {}))  # the test's settings, never the user's cache
        if isinstance(settings, dict):
            settings.setdefault("output_cache", {}).setdefault("dir", str(self.tmp / "cache"))
            if isinstance(settings.get("catalog", {}), dict):  # never the user's own catalog either
                settings.setdefault("catalog", {}).setdefault("path", str(self.tmp / "catalog.sqlite3"))
        path = self.tmp / "settings.json"
        path.write_text(json.dumps(settings))
        env["ABSTRACT_CONFIG"] = str(path)
        env.update(extra)
        return env

    def start(self, *dirs: str, env: Optional[Dict[str, str]] = None, initialize: bool = True) -> Proxy:
        proxy = Proxy(list(dirs) or [str(self.dir)], env if env is not None else self.env())
        self.proxies.append(proxy)
        if initialize:
            proxy.initialize()
        return proxy

    def check(self, env: Optional[Dict[str, str]] = None, timeout: float = 30) -> subprocess.CompletedProcess:
        """`python abstract.py --check DIR`, run to the end."""
        return subprocess.run([sys.executable, str(ABSTRACT), "--check", str(self.dir)], env=env or self.env(),
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)

    def cleanup(self) -> None:
        for proxy in self.proxies:
            proxy.stop()
        for pidfile in self.tmp.glob("*.pids"):
            for pid in [int(p) for p in read_lines(pidfile)]:
                _kill_fake(pid)


def _kill_fake(pid: int) -> None:
    """SIGKILL a leftover fake upstream (checked by its command line, against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        cmdline = b"fake_upstream.py" if pid_alive(pid) else b""
    if b"fake_upstream.py" in cmdline:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture(scope="session", autouse=True)
def _private_user_dirs(tmp_path_factory):
    """Point Abstract's per-user data and config folders (the default catalog and outputs
    folder; saved logins and --serve's secrets) into temporary ones for the whole run, for the
    tests that start Abstract without World's settings: no test may touch the real user's."""
    keep = {k: os.environ.get(k) for k in ("XDG_DATA_HOME", "XDG_CONFIG_HOME")}
    for k in keep:  # (config: saved logins, --serve's token and authorization server)
        os.environ[k] = str(tmp_path_factory.mktemp(k.lower()))
    yield
    for k, v in keep.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def world(tmp_path: Path):
    w = World(tmp_path)
    try:
        yield w
    finally:
        w.cleanup()


@contextlib.contextmanager
def running_world(tmp: Path, *extra_dirs: str):
    """A World with fake upstream 'up' and one started Abstract (the store dir, then extra_dirs),
    for module-scoped fixtures shared by tests that need no settings of their own."""
    world = World(tmp)
    world.fake("up")
    world.dir.mkdir()
    world.start(str(world.dir), *extra_dirs)
    try:
        yield world
    finally:
        world.cleanup()
