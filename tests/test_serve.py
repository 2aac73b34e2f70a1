"""--serve: MCP over Streamable HTTP at /mcp (issue 28), end to end: a real abstract.py serving
fake upstreams, driven by a standard-library HTTP client (below) and by the official Python SDK
client (tests/sdk_http_client.py, in the interop venv; skipped with one line when absent).
Sessions, SSE answers, questions routed to the calling session, cancels and ends isolated,
the errors of the transport, and shutdown. Every wait is bounded; nothing sleeps to synchronise.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from conftest import ABSTRACT, WAIT, pid_alive, text_of, wait_for

LONG = 60.0  # a bound for what starts processes on a loaded machine
# the bearer token every request sends (ABSTRACT_SERVE_TOKEN; the guard requires one)
TOKEN = "t" * 40
VENV_PY = Path.home() / ".cache" / "abstract-realservers" / "venv" / "bin" / "python"
ACCEPT = "application/json, text/event-stream"
ELICIT = {"mode": "form", "message": "your name?",
          "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}


# -- a standard-library Streamable HTTP client


class Events:
    """An SSE (or JSON) answer read on a thread (a call's answer may come much later): each
    JSON-RPC message put on a queue; None at its end. status and headers wait (bounded) for
    the answer's head."""

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self._conn = conn
        self._head = threading.Event()
        self._status, self._headers = 0, {}  # type: Tuple[int, Dict[str, str]]
        self.q: "queue.Queue[Optional[dict]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def status(self) -> int:
        assert self._head.wait(LONG), "no answer's head"
        return self._status

    @property
    def headers(self) -> Dict[str, str]:
        assert self._head.wait(LONG), "no answer's head"
        return self._headers

    def _read(self) -> None:
        try:
            resp = self._conn.getresponse()
            self._status = resp.status
            self._headers = {k.lower(): v for k, v in resp.getheaders()}
            self._head.set()
            if not self._headers.get("content-type", "").startswith("text/event-stream"):
                body = resp.read()
                if body:
                    self.q.put(json.loads(body))
                return
            for line in iter(resp.readline, b""):
                if line.startswith(b"data: "):
                    self.q.put(json.loads(line[6:]))
        except (OSError, ValueError, http.client.HTTPException):
            pass
        finally:
            self._head.set()
            self.q.put(None)
            self._conn.close()

    def next(self, timeout: float = WAIT) -> Optional[dict]:
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message within {timeout} s") from None

    def until_answer(self, timeout: float = LONG) -> Tuple[List[dict], dict]:
        """(the messages before the answer, the answer)."""
        before = []
        while True:
            msg = self.next(timeout)
            assert msg is not None, f"the stream ended without an answer after {before}"
            if "method" not in msg:
                return before, msg
            before.append(msg)


class Http:
    def __init__(self, port: int) -> None:
        self.port = port

    def send(self, method: str, body: Optional[bytes] = None, sid: str = "",
             headers: Optional[Dict[str, str]] = None) -> Events:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=LONG)
        h = {"Accept": ACCEPT, "Authorization": f"Bearer {TOKEN}"}
        if body is not None:
            h["Content-Type"] = "application/json"
        if sid:
            h["Mcp-Session-Id"] = sid
        h.update(headers or {})
        conn.request(method, "/mcp", body=body, headers=h)
        return Events(conn)

    def post(self, msg: Any, sid: str = "", **headers: str) -> Events:
        return self.send("POST", json.dumps(msg).encode(), sid, headers)


class Session:
    """One MCP session over Http: initialize, then requests by id."""

    def __init__(self, http_: Http, caps: Optional[dict] = None, get_stream: bool = True) -> None:
        self.http, self._ids = http_, iter(range(1, 10 ** 6))
        init = http_.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": caps or {},
            "clientInfo": {"name": "test", "version": "0"}}})
        assert init.status == 200
        self.sid = init.headers["mcp-session-id"]
        assert len(self.sid) >= 22  # at least 128 bits, URL-safe
        assert init.next()["result"]["protocolVersion"] == "2025-11-25"
        assert self.notify("notifications/initialized") == 202
        self.get = http_.send("GET", sid=self.sid) if get_stream else None

    def notify(self, method: str, params: Optional[dict] = None) -> int:
        msg: dict = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        ev = self.http.post(msg, self.sid)
        ev.next()
        return ev.status

    def start(self, method: str, params: Optional[dict] = None) -> Tuple[int, Events]:
        mid = next(self._ids)
        return mid, self.http.post({"jsonrpc": "2.0", "id": mid, "method": method,
                                    "params": params or {}}, self.sid)

    def request(self, method: str, params: Optional[dict] = None) -> dict:
        _, ev = self.start(method, params)
        _, answer = ev.until_answer()
        return answer

    def call(self, tool: str, **args: Any) -> Tuple[int, Events]:
        return self.start("tools/call", {"name": tool, "arguments": args})

    def answer(self, mid: Any, result: dict) -> int:
        ev = self.http.post({"jsonrpc": "2.0", "id": mid, "result": result}, self.sid)
        ev.next()
        return ev.status


# -- Abstract serving


def served_env(world: Any) -> Dict[str, str]:
    """The world's environment with the token, and a config folder of the test's own (where
    the authorization server keeps its clients)."""
    return world.env(ABSTRACT_SERVE_TOKEN=TOKEN, XDG_CONFIG_HOME=str(world.tmp / "config"))


class Served:
    """abstract.py --serve 127.0.0.1:0 --expose direct over the world's upstreams (stdin a pipe)."""

    def __init__(self, world: Any, *flags: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ABSTRACT), "--serve", "127.0.0.1:0", "--expose", "direct",
             *flags, str(world.dir)], env=served_env(world), stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.lines: "queue.Queue[bytes]" = queue.Queue()
        threading.Thread(target=self._err, daemon=True).start()
        while True:
            line = self.lines.get(timeout=LONG).decode()
            assert line, "abstract ended before it served"
            if "serving MCP at" in line:
                break
        self.url = line.split("serving MCP at ")[1].strip()
        self.http = Http(int(self.url.rsplit(":", 1)[1].split("/")[0]))

    def _err(self) -> None:
        for line in iter(self.proc.stderr.readline, b""):  # type: ignore[union-attr]
            self.lines.put(line)
        self.lines.put(b"")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(LONG)
        for f in (self.proc.stdin, self.proc.stderr):
            if f is not None and not f.closed:
                f.close()


@pytest.fixture
def served(world):
    world.fake("up", "--extras", "--subscribe", "--logging")
    got: List[Served] = []

    def start(*flags: str) -> Served:
        got.append(Served(world, *flags))
        return got[-1]

    yield start
    for s in got:
        s.stop()


# -- the transport


def test_initialize_list_and_a_call_with_progress_answered_over_sse(served):
    http_ = served().http
    s = Session(http_)
    names = [t["name"] for t in s.request("tools/list")["result"]["tools"]]
    assert "up__echo" in names and "up__progress" in names
    # a call that reports progress: an SSE stream, the progress first (the client's token)
    _, ev = s.start("tools/call", {"name": "up__progress", "arguments": {"steps": 3},
                                   "_meta": {"progressToken": "tok-1"}})
    assert ev.headers["content-type"].startswith("text/event-stream")
    before, answer = ev.until_answer()
    assert [m["params"]["progressToken"] for m in before] == ["tok-1"] * 3
    assert "result" in answer
    # a call that sends nothing first: plain JSON
    mid, ev = s.call("up__echo", text="hi")
    assert ev.headers["content-type"] == "application/json"
    answer = ev.next()
    assert answer["id"] == mid and answer["result"]["content"] == [{"type": "text", "text": "hi"}]


def test_transport_errors_are_http_statuses_with_json_rpc_bodies(served):
    http_ = served("--http", "127.0.0.1:0").http  # the link server runs beside it
    s = Session(http_, get_stream=False)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    unknown = http_.post(ping, "not-a-session")
    assert unknown.status == 404 and "initialize" in unknown.next()["error"]["message"]
    missing = http_.post(ping)
    assert missing.status == 400 and "Mcp-Session-Id" in missing.next()["error"]["message"]
    bad = http_.post(ping, s.sid, **{"MCP-Protocol-Version": "1999-01-01"})
    assert bad.status == 400 and "2025-11-25" in bad.next()["error"]["message"]
    older = http_.post(ping, s.sid, **{"MCP-Protocol-Version": "2025-03-26"})  # any supported
    assert older.status == 200 and older.next()["result"] == {}
    garbage = http_.send("POST", b"{not json", s.sid)
    assert garbage.status == 400 and garbage.next()["error"]["code"] == -32700
    batch = http_.send("POST", b"[]", s.sid)
    assert batch.status == 400 and "batches" in batch.next()["error"]["message"]
    for odd in ({"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"},  # ids, tokens: any JSON
                {"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"_meta": {
                    "progressToken": {"x": 1}}}},
                {"jsonrpc": "2.0", "method": "notifications/cancelled",
                 "params": {"requestId": [1]}},
                {"jsonrpc": "2.0", "id": [2], "result": {}}):
        assert http_.post(odd, s.sid).status in (200, 202, 400)
    # a body over serve.max_body_mb: refused from its Content-Length, unread
    conn = http.client.HTTPConnection("127.0.0.1", http_.port, timeout=LONG)
    conn.putrequest("POST", "/mcp")
    conn.putheader("Content-Length", str(5 << 20))
    conn.putheader("Mcp-Session-Id", s.sid)
    conn.putheader("Authorization", f"Bearer {TOKEN}")
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 413 and b"serve.max_body_mb" in resp.read()
    elsewhere = http_.send("GET", None)
    assert elsewhere.status in (400, 404)  # (no session named)
    conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", http_.port, timeout=LONG)
    conn.request("GET", "/other")
    assert conn.getresponse().status == 401  # (no token: the guard answers first)
    conn.close()  # (kept alive by the server: closed by the client)
    conn = http.client.HTTPConnection("127.0.0.1", http_.port, timeout=LONG)
    conn.request("GET", "/other", headers={"Authorization": f"Bearer {TOKEN}"})
    assert conn.getresponse().status == 404
    conn.close()
    assert s.request("ping")["result"] == {}  # none of it hurt the session


def test_delete_ends_the_session_and_cancels_its_call(served, world):
    http_ = served().http
    s = Session(http_)
    _, ev = s.call("up__record_cancel")
    wait_for(lambda: world.events("up", "started"), LONG, "the call upstream")
    gone = http_.send("DELETE", sid=s.sid)
    assert gone.status == 200
    wait_for(lambda: world.events("up", "cancelled"), LONG, "the upstream call cancelled")
    _, answer = ev.until_answer()
    assert "DELETE" in answer["error"]["message"]
    assert s.get is not None and s.get.next(LONG) is None  # its GET stream closed
    after = http_.post({"jsonrpc": "2.0", "id": 9, "method": "ping"}, s.sid)
    assert after.status == 404


# -- several sessions at once


def test_an_upstream_question_reaches_the_calling_session_only(served):
    http_ = served().http
    a = Session(http_, {"elicitation": {}})
    b = Session(http_, {"elicitation": {}})
    mid, ev = a.call("up__ask_client", method="elicitation/create", params=ELICIT)
    asked = ev.next(LONG)
    assert asked["method"] == "elicitation/create" and asked["params"]["message"] == "your name?"
    assert a.answer(asked["id"], {"action": "accept", "content": {"name": "Ada"}}) == 202
    _, answer = ev.until_answer()
    assert answer["id"] == mid and "Ada" in json.dumps(answer["result"])
    # then a list_changed, which goes to every session: each GET stream's first message
    a.request("tools/call", {"name": "up__change_tools", "arguments": {}})
    for s in (a, b):
        assert s.get.next(LONG)["method"] == "notifications/tools/list_changed"


def test_a_question_for_a_session_that_did_not_declare_it_is_refused(served):
    http_ = served().http
    Session(http_, {"elicitation": {}})  # another session could answer: it is not asked
    plain = Session(http_)
    _, ev = plain.call("up__ask_client", method="elicitation/create", params=ELICIT)
    before, answer = ev.until_answer()
    assert not before and "elicitation" in json.dumps(answer)


def test_a_client_that_takes_only_json_is_not_asked(served):
    http_ = served().http
    s = Session(http_, {"elicitation": {}}, get_stream=False)
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "up__ask_client", "arguments": {"method": "elicitation/create", "params": ELICIT}}}
    ev = http_.post(call, s.sid, Accept="application/json")
    assert ev.headers["content-type"] == "application/json"
    assert "cannot be asked" in json.dumps(ev.next(LONG))


def test_a_cancel_touches_only_its_own_sessions_call(served, world):
    http_ = served().http
    a, b = Session(http_), Session(http_)
    _, slow = b.call("up__slow", seconds=1, text="b done")
    mid, ev = a.call("up__record_cancel")
    wait_for(lambda: world.events("up", "started"), LONG, "a's call upstream")
    assert a.notify("notifications/cancelled", {"requestId": mid, "reason": "test"}) == 202
    wait_for(lambda: world.events("up", "cancelled"), LONG, "a's call cancelled upstream")
    _, answer = slow.until_answer()
    assert answer["result"]["content"][0]["text"] == "b done"
    assert len(world.events("up", "cancelled")) == 1
    assert ev.next(LONG) is None  # a's POST ends without an answer (none is owed)


def test_resource_updates_reach_the_subscribed_sessions_and_the_last_one_unsubscribes(
        served, world):
    http_ = served().http
    a, b = Session(http_), Session(http_)
    uri = "fake://doc/1"
    for s in (a, b):
        assert s.request("resources/subscribe", {"uri": uri})["result"] == {}
    assert b.request("resources/unsubscribe", {"uri": uri})["result"] == {}
    assert [e["event"] for e in world.events("up") if "uri" in e] == ["subscribe", "subscribe"]
    a.request("tools/call", {"name": "up__notify_client", "arguments": {
        "method": "notifications/resources/updated", "params": {"uri": uri}}})
    assert a.get.next(LONG) == {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                                "params": {"uri": uri}}
    a.request("tools/call", {"name": "up__change_tools", "arguments": {}})
    assert b.get.next(LONG)["method"] == "notifications/tools/list_changed"  # and nothing before
    assert a.request("resources/unsubscribe", {"uri": uri})["result"] == {}
    assert [e["event"] for e in world.events("up") if "uri" in e][-1] == "unsubscribe"


def test_an_upstreams_roots_list_is_answered_by_the_calling_session(served):
    http_ = served().http
    Session(http_, {"roots": {}})  # another session with roots of its own: not asked
    a = Session(http_, {"roots": {}})
    _, ev = a.call("up__ask_client", method="roots/list")
    asked = ev.next(LONG)
    assert asked["method"] == "roots/list"
    mine = [{"uri": "file:///a-roots", "name": "a"}]
    assert a.answer(asked["id"], {"roots": mine}) == 202
    _, answer = ev.until_answer()
    assert "a-roots" in json.dumps(answer["result"])
    # a session without roots: Abstract's allowed folders, no question
    plain = Session(http_)
    _, ev = plain.call("up__ask_client", method="roots/list")
    before, answer = ev.until_answer()
    assert not before and "store" in json.dumps(answer["result"])


def test_the_upstreams_log_level_is_the_lowest_any_session_asked_for(served, world):
    http_ = served().http
    a, b = Session(http_), Session(http_)
    a.request("tools/list")  # the upstream runs
    assert a.request("logging/setLevel", {"level": "debug"})["result"] == {}
    assert b.request("logging/setLevel", {"level": "error"})["result"] == {}
    levels = [e["level"] for e in world.events("up", "set_level")]
    assert levels and levels[-1] == "debug"


def test_a_post_whose_client_goes_away_cancels_its_call(served, world):
    http_ = served().http
    s = Session(http_, get_stream=False)
    conn = http.client.HTTPConnection("127.0.0.1", http_.port, timeout=LONG)
    conn.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                             "params": {"name": "up__record_cancel"}}),
                 {"Accept": ACCEPT, "Content-Type": "application/json", "Mcp-Session-Id": s.sid,
                  "Authorization": f"Bearer {TOKEN}"})
    wait_for(lambda: world.events("up", "started"), LONG, "the call upstream")
    conn.close()
    wait_for(lambda: world.events("up", "cancelled"), LONG, "the call cancelled upstream")
    assert s.request("ping")["result"] == {}


# -- lifecycle


def test_sigterm_ends_every_stream_then_the_upstreams(served, world):
    srv = served()
    s = Session(srv.http)
    _, ev = s.call("up__record_cancel")
    wait_for(lambda: world.events("up", "started"), LONG, "the call upstream")
    pids = world.pids("up")
    srv.proc.send_signal(signal.SIGTERM)
    _, answer = ev.until_answer()
    assert "shutting down" in answer["error"]["message"]
    assert s.get.next(LONG) is None
    assert srv.proc.wait(LONG) == 128 + signal.SIGTERM
    wait_for(lambda: not any(pid_alive(p) for p in pids), LONG, "the upstream stopped")


def test_stdin_eof_ends_serving(served, world):
    srv = served()
    s = Session(srv.http)
    assert s.request("tools/call", {"name": "up__echo", "arguments": {"text": "x"}})["result"]
    srv.proc.stdin.close()
    assert srv.proc.wait(LONG) == 0
    assert s.get.next(LONG) is None


@contextlib.contextmanager
def in_process(world: Any, *flags: str):
    """abstract.main(["--serve", "127.0.0.1:0", ...]) on a thread, its stdin a pipe: yields
    (Http, the stderr lines queue); closing stdin at the end ends it (exit code 0 checked)."""
    import abstract

    r, w = os.pipe()
    er, ew = os.pipe()
    code: list = []
    with open(r, "rb") as stdin, open(w, "wb") as hold, open(er, "rb") as err_r, \
            open(ew, "w", encoding="utf-8", buffering=1) as err_w:
        t = threading.Thread(target=lambda: code.append(abstract.main(
            ["--serve", "127.0.0.1:0", *flags, str(world.dir)], stdin=stdin,
            stdout=io.BytesIO(), stderr=err_w, environ=served_env(world))), daemon=True)
        t.start()
        lines: "queue.Queue[bytes]" = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in iter(err_r.readline, b"")],
                         daemon=True).start()
        line = b""
        while b"serving MCP at" not in line:
            line = lines.get(timeout=LONG)
        try:
            yield Http(int(line.split(b":")[-1].split(b"/")[0])), lines
        finally:  # (a test that failed too: its server must not outlive its stderr)
            hold.close()  # stdin's EOF: serving ends
            t.join(LONG)
    assert code == [0]


def test_an_idle_session_ends_and_sessions_are_capped(world, monkeypatch):
    import abstract

    # (2 s: `s` must not end before the cap is checked, on a loaded machine too)
    world.settings = {"serve": {"idle_timeout_seconds": 2, "max_sessions": 2}}
    world.fake("up")
    with in_process(world) as (http_, lines):
        s = Session(http_, get_stream=False)
        other = Session(http_)  # its GET stream open: busy, never idle
        assert other.get is not None and other.get.status == 200  # (open before the second)
        second = http_.send("GET", sid=other.sid)
        assert second.status == 409 and "one each" in second.next()["error"]["message"]
        full = http_.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
        assert full.status == 503 and "serve.max_sessions" in full.next()["error"]["message"]
        # (a request would make it busy again: its end is read on stderr, then checked)
        line = b""
        while b"idle for 2 s" not in line:
            line = lines.get(timeout=LONG)
        assert http_.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, s.sid).status == 404
        assert other.request("ping")["result"] == {}  # (the one with a GET stream stays)


class StandInGuard:
    """What GUARD's _ServeGuard.check does, in small (SERVE-API.md): an Origin it does not know
    gets 403; the calls are recorded."""

    def __init__(self) -> None:
        self.seen: List[Tuple[str, str]] = []

    def check(self, method: str, path: str, headers: Any) -> Optional[Tuple[int, dict, bytes]]:
        self.seen.append((method, path))
        if headers.get("Origin") not in (None, "http://good.example"):
            return 403, {"Content-Type": "text/plain"}, b"origin refused"
        return None


class StandInAuth:
    """What OAUTH's _AuthServer answers, in small: its own paths."""

    def handles(self, path: str) -> bool:
        return path.startswith("/.well-known/oauth-")

    def respond(self, method: str, path: str, query: str, headers: Any,
                body: bytes) -> Tuple[int, dict, bytes]:
        return 200, {"Content-Type": "application/json"}, json.dumps({"path": path}).encode()


def test_the_guard_answers_first_then_the_authorization_server_then_mcp(world, monkeypatch):
    import abstract

    guard = StandInGuard()
    original = abstract._serve_forever
    monkeypatch.setattr(abstract, "_serve_forever", lambda *a, **k: original(
        *a, **dict(k, guard=guard, auth=StandInAuth(), secure=None)))
    world.fake("up")
    with in_process(world, "--expose", "direct") as (http_, _):
        evil = http_.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}},
                          Origin="http://evil.example")
        assert evil.status == 403
        conn = http.client.HTTPConnection("127.0.0.1", http_.port, timeout=LONG)
        conn.request("GET", "/.well-known/oauth-protected-resource/mcp")
        resp = conn.getresponse()
        assert resp.status == 200 and b"oauth-protected-resource" in resp.read()
        conn.close()  # (kept alive by the server: closed by the client)
        s = Session(http_, get_stream=False)
        assert s.request("tools/call", {"name": "up__echo", "arguments": {"text": "ok"}})[
            "result"]["content"][0]["text"] == "ok"
    assert ("GET", "/.well-known/oauth-protected-resource/mcp") in guard.seen
    assert guard.seen[0] == ("POST", "/mcp")


def test_served_as_configured_the_guard_and_the_authorization_server_are_in_front(served):
    """abstract.py --serve itself (no stand-ins): no token, 401 naming the resource metadata;
    that metadata and the authorization server's answer without a token; a foreign Origin,
    403; a wrong Host, 421; with the token, MCP."""
    srv = served()
    port = srv.http.port

    def get(path: str, **headers: str) -> Tuple[int, Dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=LONG)
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        return resp.status, dict(resp.getheaders()), body

    status, headers, _ = get("/mcp", Accept="text/event-stream")
    meta = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
    assert status == 401 and f'resource_metadata="{meta}"' in headers["WWW-Authenticate"]
    status, _, body = get("/.well-known/oauth-protected-resource/mcp")
    assert status == 200 and json.loads(body)["resource"] == f"http://127.0.0.1:{port}/mcp"
    status, _, body = get("/.well-known/oauth-authorization-server")
    assert status == 200 and json.loads(body)["code_challenge_methods_supported"] == ["S256"]
    evil = srv.http.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}},
                         Origin="http://evil.example")
    assert evil.status == 403
    assert get("/mcp", Host="evil.example", Authorization=f"Bearer {TOKEN}")[0] == 421
    assert Session(srv.http, get_stream=False).request("ping")["result"] == {}


def _raw(port: int, data: bytes, timeout: float = LONG) -> bytes:
    """Send `data` on a new connection; what comes back until the server closes it."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        got = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return got
            got += chunk


def test_bodies_are_bounded_before_they_are_read_and_a_bad_length_is_411(served):
    """The authorization server's paths (open without a token) take 64 KiB: a larger body is
    refused from its Content-Length, unread; a Content-Length that is no ASCII number is 411,
    not a 500."""
    srv = served()
    host = f"Host: 127.0.0.1:{srv.http.port}\r\n"
    big = _raw(srv.http.port, ("POST /register HTTP/1.1\r\n" + host + "Content-Type: "
                               "application/json\r\nContent-Length: 4000000\r\n\r\n").encode())
    assert big.startswith(b"HTTP/1.1 413") and b"65,536" in big
    odd = _raw(srv.http.port, ("POST /mcp HTTP/1.1\r\n" + host + f"Authorization: Bearer {TOKEN}"
                               "\r\nContent-Length: ").encode() + b"\xb2\r\n\r\n")
    assert odd.startswith(b"HTTP/1.1 411"), odd[:200]
    assert Session(srv.http, get_stream=False).request("ping")["result"] == {}


def test_a_body_that_trickles_is_dropped_at_the_header_deadline(served, world):
    """A body must come whole within http_header_timeout_seconds, as the headers must: one
    sent a byte at a time is dropped (no token needed for /register, so anyone could try)."""
    import socket

    world.settings = {"http_header_timeout_seconds": 1}
    srv = served()
    with socket.create_connection(("127.0.0.1", srv.http.port), timeout=LONG) as sock:
        sock.sendall((f"POST /register HTTP/1.1\r\nHost: 127.0.0.1:{srv.http.port}\r\n"
                      "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{").encode())
        got, closed = b"", False
        for _ in range(int(LONG * 4)):  # a byte every quarter second: slower than the deadline
            try:
                sock.sendall(b" ")
                chunk = sock.recv(65536) if select.select([sock], [], [], 0.25)[0] else None
            except OSError:
                closed = True
                break
            if chunk is not None:
                got += chunk
                if not chunk:
                    closed = True
                    break
        assert closed and not got.startswith(b"HTTP/1.0 201"), got[:200]
    assert Session(srv.http, get_stream=False).request("ping")["result"] == {}


def test_stateless_clients_with_the_same_progress_token_get_only_their_own(served, world):
    """Two 2026-07-28 clients (no session) use one progress token: progress on the first one's
    call reaches the first one, never the second."""
    http_ = served().http
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}

    def call(tool: str, args: dict, token: str) -> Events:
        return http_.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": tool, "arguments": args, "_meta": dict(meta, progressToken=token)}},
            **{"Mcp-Method": "tools/call", "Mcp-Name": tool})

    a = call("up__record_cancel", {}, "p")
    wait_for(lambda: len(world.events("up", "started")) == 1, LONG, "the first call upstream")
    b = call("up__record_cancel", {}, "p")
    wait_for(lambda: len(world.events("up", "started")) == 2, LONG, "the second call upstream")
    theirs = world.events("up", "started")[0]["progressToken"]  # the first call's, upstream
    note = {"method": "notifications/progress",
            "params": {"progressToken": theirs, "progress": 1, "message": "the first's"}}
    assert text_of(call("up__notify_client", note, "z").until_answer()[1]["result"]) == "sent"
    got = a.next()
    assert got["method"] == "notifications/progress" and got["params"]["progressToken"] == "p"
    assert got["params"]["message"] == "the first's"
    assert b.q.empty()


# -- the official Python SDK client


def sdk(url: str, mode: str, tool: str, args: dict) -> dict:
    if not VENV_PY.exists():
        pytest.skip("the mcp SDK venv is not installed: run bash tests/realservers/install.sh")
    out = subprocess.run([str(VENV_PY), str(Path(__file__).parent / "sdk_http_client.py"), url,
                          mode, tool, json.dumps(args)], capture_output=True, timeout=LONG * 2,
                         env=dict(os.environ, SERVE_TOKEN=TOKEN))
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_the_python_sdk_client_calls_through_a_session(served):
    srv = served()
    got = sdk(srv.url, "session", "up__progress", {"steps": 3})
    assert got["version"] == "2025-11-25" and "up__echo" in got["tools"]
    assert len(got["progress"]) == 3
    asked = sdk(srv.url, "session", "up__ask_client", {"method": "elicitation/create",
                                                       "params": ELICIT})
    assert asked["asked"] == ["your name?"] and "Ada" in json.dumps(asked["texts"])


def test_the_python_sdk_client_in_the_2026_era_is_served_without_a_session(served):
    srv = served()
    got = sdk(srv.url, "modern", "up__echo", {"text": "stateless"})
    assert got["version"] == "2026-07-28" and got["texts"] == ["stateless"]


def test_modern_headers_must_match_the_body(served):
    http_ = served().http
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "up__echo", "arguments": {"text": "m"}, "_meta": meta}}
    ok = http_.post(call, **{"Mcp-Method": "tools/call", "Mcp-Name": "up__echo"})
    assert ok.status == 200 and ok.next()["result"]["content"][0]["text"] == "m"
    wrong = http_.post(call, **{"Mcp-Method": "tools/call", "Mcp-Name": "other"})
    assert wrong.status == 400 and "Mcp-Name" in wrong.next()["error"]["message"]
    disc = http_.post({"jsonrpc": "2.0", "id": 2, "method": "server/discover",
                       "params": {"_meta": meta}})
    assert "2026-07-28" in disc.next()["result"]["supportedVersions"]


# -- the HTTP server underneath: TLS (the guard builds the context from --serve-cert/--serve-key)


def test_the_bounded_server_answers_and_streams_over_tls(tmp_path):
    import shutil
    import ssl

    import abstract

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH (it makes the test certificate)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=LONG)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(cert), str(key))

    def exchange(ex: Any) -> None:
        body, _ = ex.body(1024)
        ex.stream({})
        ex.event(b'{"got":' + json.dumps(body.decode()).encode() + b"}")

    httpd, stop = abstract._serve_http("127.0.0.1", 0, lambda t: (405, "text/plain", b""),
                                       "test-tls", exchange=exchange, ssl_context=server_ctx)
    try:
        client_ctx = ssl.create_default_context(cafile=str(cert))
        conn = http.client.HTTPSConnection("127.0.0.1", httpd.server_address[1],
                                           context=client_ctx, timeout=LONG)
        conn.request("POST", "/mcp", body=b"hello", headers={"Content-Type": "text/plain"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
        assert resp.read() == b'data: {"got":"hello"}\n\n'
        conn.close()
    finally:
        stop()
