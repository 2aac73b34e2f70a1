#!/usr/bin/env python3
"""The client command the official MCP conformance suite runs, in client mode: it makes Abstract
the client under test.

    conformance client --command "python3 tests/conformance/client.py" --scenario initialize

The suite starts a scenario's server and runs this script with the server's URL as the last
argument, the scenario's name in MCP_CONFORMANCE_SCENARIO and, for some scenarios, a JSON object in
MCP_CONFORMANCE_CONTEXT (pre-registered client credentials). This script:

1. writes a client config whose one upstream, `conf`, is that URL (`"type": "http"`), and an
   Abstract settings file (the pre-registered client, when the context gives one), in a fresh
   temporary folder that is also HOME, XDG_* and TMPDIR for Abstract: no tokens or catalog are
   shared between runs or with the user's;
2. starts `python3 abstract.py --expose both <tmp>/outputs` with APP_CONFIG_PATH and
   ABSTRACT_CONFIG naming them, and BROWSER naming this script in `--browser` mode, so that an
   OAuth login "opens the browser" by fetching the authorization URL and delivering its redirect
   to Abstract's loopback callback, as a person's browser would (the suite's authorization
   servers approve at once);
3. speaks MCP to Abstract over its stdin/stdout (newline-delimited JSON-RPC, standard library
   only): initialize, tools/list, list_available_tools (which names a server that failed), then
   what the scenario asks for, through the upstream's tools as Abstract exposes them
   (`conf__<tool>`); it answers Abstract's relayed elicitation/create (accepting with the
   schema's defaults, as a client with SEP-1034 defaults does), roots/list and ping;
4. exits 0 when every step got the answer the scenario's server gives, 1 otherwise, with one
   line on stderr saying which step failed. Every wait is bounded (CONFORMANCE_CLIENT_TIMEOUT
   seconds for the whole run, default 50; the suite's own --timeout must be longer).

Abstract's stderr is copied to this script's stderr (the suite saves it as stderr.txt).
"""
import json
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
ABSTRACT = os.environ.get("ABSTRACT_PY") or os.path.join(HERE, "..", "..", "abstract.py")
SERVER = "conf"  # the upstream's name in the config: its tools are conf__<tool>
PROTOCOL = "2025-11-25"
# Abstract's answer when a call needs an OAuth login it has just started in the background
# ("A login is needed. A browser window was opened for it: ... then call again."; a step-up says
# "More permissions are needed (a step-up login)"), and the stderr lines that say it ended.
LOGIN_NEEDED = re.compile(r"login is needed|needs a login|step-up login|then call again")
LOGIN_ENDED = re.compile(r"\b(logged in|login failed|login was not finished)\b")
LOGIN_ROUNDS = 3  # asks per call while a login is under way: login, step-up, the answer


class Failure(Exception):
    """A step that did not get the expected answer; the message says which and why."""


# ---- the "browser" ------------------------------------------------------------------------------

def browse(url: str, deadline_s: float = 20.0) -> None:
    """What a person's browser does with an authorization URL: GET it and follow the redirects,
    ending at Abstract's loopback callback. Bounded: at most 8 hops, each with a timeout."""
    end = time.monotonic() + deadline_s
    for _ in range(8):
        parts = urllib.parse.urlsplit(url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname, parts.port, timeout=max(1.0, end - time.monotonic()))
        try:
            path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
            conn.request("GET", path, headers={"User-Agent": "abstract-conformance-browser"})
            resp = conn.getresponse()
            body = resp.read(65536)
            location = resp.getheader("Location")
        finally:
            conn.close()
        print(f"[browser] GET {parts.scheme}://{parts.netloc}{parts.path} -> {resp.status}",
              file=sys.stderr)
        if resp.status in (301, 302, 303, 307, 308) and location:
            url = urllib.parse.urljoin(url, location)
            continue
        if resp.status >= 400:
            print(f"[browser] {body[:200]!r}", file=sys.stderr)
        return
    print("[browser] too many redirects", file=sys.stderr)


def browser_main(argv: list) -> int:
    """`client.py --browser URL`: Python's webbrowser runs this (BROWSER="... %s") and may wait
    for it; the fetch runs in a detached child, so a caller that serves the callback on the same
    thread it opened the browser from is not deadlocked."""
    if argv[0] == "--browser":
        log = open(os.environ.get("CONFORMANCE_BROWSER_LOG", os.devnull), "ab")
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "--browse-now", argv[1]],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True, close_fds=True)
        return 0
    try:
        browse(argv[1])
    except Exception as e:  # the driver sees the login fail; this says why
        print(f"[browser] {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


# ---- JSON-RPC over Abstract's pipes ---------------------------------------------------------------

class Peer:
    """Abstract as a child process, spoken to in newline-delimited JSON-RPC. A reader thread sorts
    what arrives: answers to our requests go to their waiting queue; Abstract's own requests
    (elicitation/create, roots/list, ping, ...) are answered by `on_request`."""

    def __init__(self, argv: list, env: dict, deadline: float, on_request) -> None:
        self.deadline = deadline
        self.on_request = on_request
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self._next = 0
        self._waiting = {}
        self._lock = threading.Lock()
        self.notes = []  # notifications received, for the log
        self.login_ended = threading.Event()  # set by a stderr line saying a login ended
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._copy_stderr, daemon=True).start()

    def _copy_stderr(self) -> None:
        for line in self.proc.stderr:
            text = line.decode("utf-8", "replace")
            sys.stderr.write("[abstract] " + text)
            sys.stderr.flush()
            if LOGIN_ENDED.search(text):
                self.login_ended.set()

    def _send(self, msg: dict) -> None:
        data = (json.dumps(msg) + "\n").encode()
        with self._lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                print(f"[client] not JSON from Abstract: {line[:200]!r}", file=sys.stderr)
                continue
            if "method" in msg and "id" in msg:
                threading.Thread(target=self._answer, args=(msg,), daemon=True).start()
            elif "method" in msg:
                self.notes.append(msg)
                print(f"[client] notification {msg['method']}", file=sys.stderr)
            elif msg.get("id") in self._waiting:
                self._waiting[msg["id"]].put(msg)
        for q in list(self._waiting.values()):
            q.put(None)  # Abstract closed its stdout: wake every waiter

    def _answer(self, msg: dict) -> None:
        print(f"[client] Abstract asks {msg['method']}", file=sys.stderr)
        try:
            self._send({"jsonrpc": "2.0", "id": msg["id"], "result": self.on_request(msg)})
        except Failure as e:
            self._send({"jsonrpc": "2.0", "id": msg["id"],
                        "error": {"code": -32601, "message": str(e)}})

    def notify(self, method: str, params: dict = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})})

    def request(self, method: str, params: dict = None) -> dict:
        """The result of a request, or Failure naming the method and the error or timeout."""
        self._next += 1
        rid = self._next
        q = self._waiting[rid] = queue.Queue()
        try:
            self._send({"jsonrpc": "2.0", "id": rid, "method": method,
                        **({"params": params} if params is not None else {})})
            try:
                got = q.get(timeout=max(0.1, self.deadline - time.monotonic()))
            except queue.Empty:
                raise Failure(f"{method}: no answer from Abstract in time") from None
        finally:
            del self._waiting[rid]
        if got is None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = "none yet"
            raise Failure(f"{method}: Abstract closed its stdout (exit code {code}) before answering")
        if "error" in got:
            raise Failure(f"{method}: error {json.dumps(got['error'])[:500]}")
        return got.get("result") or {}

    def close(self) -> int:
        """Close Abstract's stdin (its signal to stop) and wait, bounded; kill if it hangs."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise Failure("Abstract did not exit within 10 s of stdin closing") from None


def with_defaults(schema: dict) -> dict:
    """An elicitation answer with every property's default: what a client applying SEP-1034
    defaults sends when the user accepts without editing."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    return {k: v["default"] for k, v in (props or {}).items() if isinstance(v, dict) and "default" in v}


def on_request(msg: dict) -> dict:
    method, params = msg["method"], msg.get("params") or {}
    if method == "ping":
        return {}
    if method == "roots/list":
        return {"roots": []}
    if method == "elicitation/create":
        return {"action": "accept", "content": with_defaults(params.get("requestedSchema"))}
    raise Failure(f"Method not found: {method}")


# ---- the scenario ---------------------------------------------------------------------------------

def text_of(result: dict) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict))


def after_login(peer: Peer, ask):
    """ask() again while Abstract answers that a login is under way (the browser, this script in
    --browser mode, finishes it): each retry waits for the stderr line that says the login ended,
    at most 5 s (then it asks anyway), within the run's deadline."""
    for _ in range(LOGIN_ROUNDS):
        result = ask()
        if not LOGIN_NEEDED.search(json.dumps(result)):
            return result
        print(f"[client] Abstract started a login: {text_of(result)[:300]}", file=sys.stderr)
        left = peer.deadline - time.monotonic()
        if left <= 0:
            break
        peer.login_ended.wait(min(5.0, left))
        peer.login_ended.clear()
    raise Failure(f"still asked to log in after {LOGIN_ROUNDS} tries: {text_of(result)[:300]}")


def call(peer: Peer, tool: str, args: dict) -> str:
    """Call the upstream's tool through Abstract; its text, or Failure if it is an error."""
    result = after_login(peer, lambda: peer.request(
        "tools/call", {"name": f"{SERVER}__{tool}", "arguments": args}))
    text = text_of(result)
    if result.get("isError"):
        raise Failure(f"tools/call {SERVER}__{tool}: isError: {text[:500]}")
    print(f"[client] {SERVER}__{tool} -> {text[:200]!r}", file=sys.stderr)
    return text


def run_scenario(peer: Peer, scenario: str) -> None:
    init = peer.request("initialize", {
        "protocolVersion": PROTOCOL,
        "capabilities": {"elicitation": {"form": {}}, "roots": {"listChanged": False}},
        "clientInfo": {"name": "abstract-conformance-driver", "version": "1.0.0"}})
    print(f"[client] Abstract speaks {init.get('protocolVersion')}", file=sys.stderr)
    peer.notify("notifications/initialized")
    listing = after_login(peer, lambda: peer.request(
        "tools/call", {"name": "list_available_tools", "arguments": {"detailed": True}}))
    failed = (listing.get("structuredContent") or {}).get("failed_servers")
    if failed or listing.get("isError"):
        why = "; ".join(str(f.get("error")) for f in failed) if failed else text_of(listing)
        raise Failure(f"upstream not available: {why[:500]}")
    names = [t["name"] for t in peer.request("tools/list").get("tools", [])]
    print(f"[client] tools/list: {names}", file=sys.stderr)

    def need(tool: str) -> None:
        if f"{SERVER}__{tool}" not in names:
            raise Failure(f"tools/list has no {SERVER}__{tool}: {names}")

    if scenario == "initialize":
        return  # the upstream's initialize and tools/list are what the scenario checks
    if scenario == "tools_call":
        need("add_numbers")
        text = call(peer, "add_numbers", {"a": 5, "b": 3})
        if "8" not in text:
            raise Failure(f"add_numbers(5, 3) answered {text!r}")
    elif scenario == "elicitation-sep1034-client-defaults":
        need("test_client_elicitation_defaults")
        text = call(peer, "test_client_elicitation_defaults", {})
        if not text.startswith("Elicitation completed"):
            raise Failure(f"test_client_elicitation_defaults answered {text!r}")
    elif scenario == "sse-retry":
        need("test_reconnection")
        text = call(peer, "test_reconnection", {})
        if "Reconnection test completed successfully" not in text:
            raise Failure(f"test_reconnection answered {text!r}")
    elif scenario.startswith("auth/"):
        need("test-tool")
        call(peer, "test-tool", {})
    else:
        raise Failure(f"this driver does not know scenario {scenario!r}")


# The client ID metadata document URL the suite's CIMD scenarios expect (auth/basic-cimd);
# Abstract uses it where the authorization server says client_id_metadata_document_supported.
CIMD_URL = "https://conformance-test.local/client-metadata.json"


def settings_for(context: dict) -> dict:
    """Abstract's settings for a scenario: the client metadata document URL, as a user who
    publishes one sets it; a pre-registered OAuth client when the context has one
    (auth/pre-registration and the client-credentials extensions)."""
    client = {"client_metadata_url": CIMD_URL}
    if context.get("client_id"):
        client["client_id"] = context["client_id"]
    if context.get("client_secret"):
        client["client_secret"] = context["client_secret"]
    return {"servers": {SERVER: {"oauth": client}}}


def main(argv: list) -> int:
    if argv and argv[0] in ("--browser", "--browse-now"):
        return browser_main(argv)
    if len(argv) != 1:
        print("usage: client.py SERVER_URL (run by the conformance suite, which sets "
              "MCP_CONFORMANCE_SCENARIO)", file=sys.stderr)
        return 2
    url, scenario = argv[0], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    deadline = time.monotonic() + float(os.environ.get("CONFORMANCE_CLIENT_TIMEOUT", "50"))
    tmp = tempfile.mkdtemp(prefix="abstract-conformance-")
    try:
        home = os.path.join(tmp, "home")
        for d in ("config", "data", "cache", "tmp"):
            os.makedirs(os.path.join(home, d))
        config, settings = os.path.join(tmp, "servers.json"), os.path.join(tmp, "settings.json")
        with open(config, "w") as f:
            json.dump({"mcpServers": {SERVER: {"type": "http", "url": url}}}, f)
        with open(settings, "w") as f:
            json.dump(settings_for(context), f)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ABSTRACT_", "MCP_CONFORMANCE_", "XDG_"))}
        env.update({
            "HOME": home, "XDG_CONFIG_HOME": os.path.join(home, "config"),
            "XDG_DATA_HOME": os.path.join(home, "data"),
            "XDG_CACHE_HOME": os.path.join(home, "cache"), "TMPDIR": os.path.join(home, "tmp"),
            "APP_CONFIG_PATH": config, "ABSTRACT_CONFIG": settings, "ABSTRACT_TIMEOUT": "30",
            # quoted: webbrowser splits it with shlex, and a path may hold a space
            "BROWSER": f"{shlex.quote(sys.executable)} {shlex.quote(os.path.abspath(__file__))}"
                       f" --browser %s",
            "CONFORMANCE_BROWSER_LOG": os.path.join(tmp, "browser.log")})
        env.pop("DISPLAY", None)
        env.pop("WAYLAND_DISPLAY", None)
        argv_ = [sys.executable, os.path.abspath(ABSTRACT), "--expose", "both",
                 os.path.join(tmp, "outputs")]
        print(f"[client] scenario {scenario}: {' '.join(argv_)} (upstream {url})", file=sys.stderr)
        peer = Peer(argv_, env, deadline, on_request)
        failure = None
        try:
            run_scenario(peer, scenario)
        except Failure as e:
            failure = str(e)
        except (OSError, ValueError) as e:
            failure = f"{type(e).__name__}: {e}"
        try:
            code = peer.close()
            if failure is None and code != 0:
                failure = f"Abstract exited with code {code}"
        except Failure as e:
            failure = failure or str(e)
        blog = os.path.join(tmp, "browser.log")
        if os.path.exists(blog) and os.path.getsize(blog):
            with open(blog, errors="replace") as f:
                sys.stderr.write(f.read())
        if failure:
            print(f"[client] FAILED: {failure}", file=sys.stderr)
            return 1
        print(f"[client] ok: {scenario}", file=sys.stderr)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
