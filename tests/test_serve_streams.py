"""--serve's streams beyond the basic answer (issue 28, item 1): subscriptions/listen of
2026-07-28 clients; resumable streams (Last-Event-ID) of the handshake era. A real abstract.py serving the fake upstream, driven over raw HTTP and by
the official Python SDK client (skipped with one line when its venv is absent). Every wait is
bounded; nothing sleeps to synchronise.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

from conftest import WAIT, text_of, wait_for
from test_serve import (ELICIT, LONG, TOKEN, VENV_PY, Events, Session,  # noqa: F401
                        in_process, served)

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}
SUB = "io.modelcontextprotocol/subscriptionId"


OPEN: list = []  # every Raw of the test, closed at its end (a failed test's too)


@pytest.fixture(autouse=True)
def _close_raws():
    yield
    while OPEN:
        OPEN.pop().close()


class Raw:
    """One request over a socket of its own: its status and headers, then its SSE events read
    one at a time (each read bounded by the socket's timeout); close() cuts the connection at
    once (what a client that goes away does)."""

    def __init__(self, port: int, method: str, path: str = "/mcp", body: Optional[dict] = None,
                 headers: Optional[Dict[str, str]] = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=LONG)
        OPEN.append(self)
        data = json.dumps(body).encode() if body is not None else b""
        h = {"Host": f"127.0.0.1:{port}", "Accept": "application/json, text/event-stream",
             "Authorization": f"Bearer {TOKEN}", "Content-Length": str(len(data)),
             "Content-Type": "application/json", **(headers or {})}
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
        self.sock.sendall(head.encode() + b"\r\n" + data)
        self.f = self.sock.makefile("rb")
        self.status = int(self.f.readline().split()[1])
        self.headers: Dict[str, str] = {}
        self.retry = 0
        for line in iter(self.f.readline, b"\r\n"):
            k, _, v = line.decode().partition(":")
            self.headers[k.strip().lower()] = v.strip()

    def event(self) -> Optional[Tuple[str, str, Optional[dict]]]:
        """(id, event type, the data as JSON, or None when it is not) of the next event with
        data; None at the stream's end. Comments and retry lines are skipped; one that does not
        come within LONG fails (keep-alive comments do not make the wait longer)."""
        eid, kind, data = "", "message", []
        deadline = time.monotonic() + LONG
        for line in iter(self.f.readline, b""):
            assert time.monotonic() < deadline, f"no event within {LONG} s"
            line = line.rstrip(b"\r\n")
            if line.startswith(b"retry: "):
                self.retry = int(line[7:])
            if not line:
                if data:
                    text = b"\n".join(data).decode()
                    try:
                        return eid, kind, json.loads(text)
                    except ValueError:
                        return eid, kind, {"text": text}
                continue
            name, _, value = line.decode().partition(": ")
            if name == "id":
                eid = value
            elif name == "event":
                kind = value
            elif name == "data":
                data.append(value.encode())
        return None

    def message(self) -> Optional[dict]:
        got = self.event()
        return got[2] if got is not None else None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        with contextlib.suppress(AttributeError):
            self.f.close()


def raw_listen(port: int, mid: object, notifications: dict) -> Raw:
    return Raw(port, "POST", body={"jsonrpc": "2.0", "id": mid, "method": "subscriptions/listen",
                                   "params": {"_meta": META, "notifications": notifications}},
               headers={"Mcp-Method": "subscriptions/listen"})


def modern(http_, mid, method: str, params: dict, **headers: str) -> Events:
    return http_.post({"jsonrpc": "2.0", "id": mid, "method": method,
                       "params": dict(params, _meta=META)}, **{"Mcp-Method": method}, **headers)


def listen(http_, mid, notifications: dict) -> Events:
    return modern(http_, mid, "subscriptions/listen", {"notifications": notifications})


def call(http_, tool: str, args: dict) -> dict:
    _, answer = modern(http_, 99, "tools/call", {"name": tool, "arguments": args},
                       **{"Mcp-Name": tool}).until_answer()
    return answer


# -- subscriptions/listen (2026-07-28)


def test_a_listen_is_acknowledged_then_carries_what_it_asked_for(served, world):
    http_ = served().http
    uri = "fake://doc/1"
    ev = raw_listen(http_.port, "L1", {"toolsListChanged": True, "promptsListChanged": True,
                                       "resourceSubscriptions": [uri, "nowhere://x"]})
    assert ev.status == 200 and ev.headers["content-type"].startswith("text/event-stream")
    assert ev.headers["x-accel-buffering"] == "no"  # (the 2026-07-28 spec's SHOULD)
    ack = ev.message()
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    # only what Abstract honours: prompts do not change; no upstream has nowhere://x
    assert ack["params"] == {"_meta": {SUB: "L1"}, "notifications": {
        "toolsListChanged": True, "resourceSubscriptions": [uri]}}
    assert [e["uri"] for e in world.events("up", "subscribe")] == [uri]
    # a listen that asked for nothing else gets no tool change
    quiet = listen(http_, 7, {"resourceSubscriptions": ["fake://doc/2"]})
    assert quiet.next(LONG)["params"]["notifications"] == {
        "resourceSubscriptions": ["fake://doc/2"]}
    assert text_of(call(http_, "up__change_tools", {})["result"]) != ""
    assert ev.message() == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                             "params": {"_meta": {SUB: "L1"}}}
    note = {"method": "notifications/resources/updated", "params": {"uri": uri}}
    assert text_of(call(http_, "up__notify_client", note)["result"]) == "sent"
    assert ev.message() == {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                             "params": {"uri": uri, "_meta": {SUB: "L1"}}}
    assert quiet.q.empty()
    # its client closes it: the upstream is unsubscribed (no one else holds the URI)
    ev.close()
    wait_for(lambda: [e["uri"] for e in world.events("up", "unsubscribe")] == [uri], LONG,
             "the URI unsubscribed upstream")


def test_a_listen_holding_a_uri_keeps_it_subscribed_when_a_session_lets_go(served, world):
    http_ = served().http
    uri = "fake://doc/1"
    ev = raw_listen(http_.port, 1, {"resourceSubscriptions": [uri]})
    assert ev.message()["params"]["notifications"] == {"resourceSubscriptions": [uri]}
    s = Session(http_, get_stream=False)
    assert s.request("resources/subscribe", {"uri": uri})["result"] == {}
    assert s.request("resources/unsubscribe", {"uri": uri})["result"] == {}
    assert not world.events("up", "unsubscribe")  # the listen holds it still
    ev.close()  # the last holder lets go
    wait_for(lambda: [e["uri"] for e in world.events("up", "unsubscribe")] == [uri], LONG,
             "the URI unsubscribed upstream once")


def test_listens_are_bounded_and_shutdown_ends_them_gracefully(served, world):
    world.settings = {"serve": {"max_sessions": 1}}
    srv = served()
    ev = listen(srv.http, 1, {"toolsListChanged": True})
    assert ev.next(LONG)["method"] == "notifications/subscriptions/acknowledged"
    over = listen(srv.http, 2, {"toolsListChanged": True})
    assert over.status == 503
    assert "subscriptions/listen" in over.next()["error"]["message"]
    bad = modern(srv.http, 3, "subscriptions/listen", {"notifications": {}})
    assert bad.status == 503  # (still full)
    srv.proc.stdin.close()  # Abstract ends: the listen's last message is its result
    assert ev.next(LONG) == {"jsonrpc": "2.0", "id": 1, "result": {
        "resultType": "complete", "_meta": {SUB: 1}}}
    assert ev.next(LONG) is None
    assert srv.proc.wait(LONG) == 0


def test_a_listen_needs_the_modern_meta_and_an_event_stream(served):
    http_ = served().http
    no_caps = http_.post({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})
    assert no_caps.next()["error"]["code"] == -32602
    json_only = http_.post(
        {"jsonrpc": "2.0", "id": 2, "method": "subscriptions/listen",
         "params": {"_meta": META, "notifications": {}}}, Accept="application/json")
    assert json_only.status == 406


def test_the_python_sdk_client_hears_a_tool_change_on_its_listen(served):
    if not VENV_PY.exists():
        pytest.skip("the mcp SDK venv is not installed: run bash tests/realservers/install.sh")
    srv = served()
    out = subprocess.run([str(VENV_PY), str(Path(__file__).parent / "sdk_listen_client.py"),
                          srv.url], capture_output=True, timeout=LONG * 2,
                         env=dict(os.environ, SERVE_TOKEN=TOKEN))
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    first, second = [json.loads(x) for x in out.stdout.splitlines()[-2:]]
    assert first == {"version": "2026-07-28", "honored": {"toolsListChanged": True}}
    assert second["event"] == "ToolsListChanged" and "up__added_later" in second["tools"]


# -- resumable streams (handshake era: GET with Last-Event-ID)


def ask_for_a_name(port: int, sid: str, mid: int) -> Raw:
    """A call whose first event is a question (elicitation) and whose answer waits for ours."""
    return Raw(port, "POST", body={"jsonrpc": "2.0", "id": mid, "method": "tools/call", "params": {
        "name": "up__ask_client", "arguments": {"method": "elicitation/create", "params": ELICIT,
                                                "wait": 60}}}, headers={"Mcp-Session-Id": sid})


def test_a_post_stream_cut_mid_call_is_resumed_and_its_answer_arrives(served, world):
    http_ = served().http
    s = Session(http_, {"elicitation": {}}, get_stream=False)
    post = ask_for_a_name(http_.port, s.sid, 5)
    eid, _, asked = post.event()
    assert asked["method"] == "elicitation/create" and eid and post.retry == 1000
    post.close()  # cut before the answer: the call goes on, for a while
    assert s.answer(asked["id"], {"action": "accept", "content": {"name": "Ada"}}) == 202
    for _ in range(12):  # requests answered as JSON meanwhile do not push it out
        assert s.request("ping")["result"] == {}
    resumed = Raw(http_.port, "GET", headers={"Mcp-Session-Id": s.sid, "Last-Event-ID": eid})
    assert resumed.status == 200
    rid, _, answer = resumed.event()
    assert answer["id"] == 5 and "Ada" in json.dumps(answer["result"])
    assert rid.rpartition("-")[0] == eid.rpartition("-")[0] and rid != eid  # the same stream
    assert resumed.event() is None  # it ends with its answer
    assert not world.events("up", "cancelled")
    # resumed again from its start: both events replayed, nothing else
    again = Raw(http_.port, "GET", headers={"Mcp-Session-Id": s.sid,
                                            "Last-Event-ID": eid.rpartition("-")[0] + "-0"})
    assert [e[0] for e in iter(again.event, None)] == [eid, rid]


def test_a_call_cut_after_its_first_progress_is_answered_on_the_resumed_get(served, world):
    http_ = served().http
    s = Session(http_, get_stream=False)
    post = Raw(http_.port, "POST", body={"jsonrpc": "2.0", "id": "c", "method": "tools/call",
                                         "params": {"name": "up__progress", "arguments": {
                                             "steps": 1, "then_wait": 1},
                                             "_meta": {"progressToken": "t"}}},
               headers={"Mcp-Session-Id": s.sid})
    eid, _, progress = post.event()
    assert progress["method"] == "notifications/progress"
    assert progress["params"]["progressToken"] == "t"
    post.close()  # the upstream works on a second more: its answer comes after the cut
    resumed = Raw(http_.port, "GET", headers={"Mcp-Session-Id": s.sid, "Last-Event-ID": eid})
    answer = resumed.message()
    assert answer["id"] == "c" and text_of(answer["result"]) == "done 1"
    assert not world.events("up", "cancelled")


def test_the_get_stream_is_resumed_with_what_came_while_it_was_away(served):
    http_ = served().http
    a, b = Session(http_, get_stream=False), Session(http_, get_stream=False)
    get = Raw(http_.port, "GET", headers={"Mcp-Session-Id": a.sid})
    b.request("tools/call", {"name": "up__change_tools", "arguments": {}})
    eid, _, first = get.event()
    assert first["method"] == "notifications/tools/list_changed" and get.retry == 1000
    get.close()
    b.request("tools/call", {"name": "up__change_tools", "arguments": {}})  # a is away
    back = Raw(http_.port, "GET", headers={"Mcp-Session-Id": a.sid, "Last-Event-ID": eid})
    rid, _, second = back.event()
    assert second["method"] == "notifications/tools/list_changed"
    assert rid.rpartition("-")[0] == eid.rpartition("-")[0] and rid != eid
    busy = http_.send("GET", sid=a.sid, headers={"Last-Event-ID": eid})
    assert busy.status == 409 and "being read" in busy.next()["error"]["message"]


def test_another_sessions_event_id_resumes_nothing_of_it(served, world):
    http_ = served().http
    a = Session(http_, {"elicitation": {}}, get_stream=False)
    b = Session(http_, get_stream=False)
    post = ask_for_a_name(http_.port, a.sid, 8)
    eid, _, asked = post.event()
    post.close()
    assert a.answer(asked["id"], {"action": "accept", "content": {"name": "Ada"}}) == 202
    for sid, last in ((b.sid, eid), (a.sid, "nonsense")):
        # not one of that session's: its own GET stream, nothing replayed, nothing of a's call
        other = Raw(http_.port, "GET", headers={"Mcp-Session-Id": sid, "Last-Event-ID": last})
        assert other.status == 200
        b.request("tools/call", {"name": "up__change_tools", "arguments": {}})
        got = other.message()
        assert got["method"] == "notifications/tools/list_changed", got
    # (an id of no stream names the GET stream, which is being read: one reader each)
    assert http_.send("GET", sid=a.sid, headers={"Last-Event-ID": "p1-x"}).status == 409
    mine = Raw(http_.port, "GET", headers={"Mcp-Session-Id": a.sid, "Last-Event-ID": eid})
    # (b's first list_changed may come first: while a's call was still in flight and the cut
    # of its POST not yet seen, that stream was a's newest being read, where a message tied to
    # no request goes; it missed it, so the resume replays it)
    got = mine.message()
    if "id" not in got:
        assert got["method"] == "notifications/tools/list_changed", got
        got = mine.message()
    assert got["id"] == 8, got


def test_a_cut_stream_not_resumed_in_time_cancels_its_call(world, monkeypatch):
    import abstract

    monkeypatch.setattr(abstract, "_SERVE_RESUME_S", 0.5)
    world.fake("up", "--extras")
    with in_process(world, "--expose", "direct") as (http_, _):
        s = Session(http_, {"elicitation": {}}, get_stream=False)
        post = Raw(http_.port, "POST", body={"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                             "params": {"name": "up__ask_client", "arguments": {
                                                 "method": "elicitation/create",
                                                 "params": ELICIT, "then_wait": 60}}},
                   headers={"Mcp-Session-Id": s.sid})
        _, _, asked = post.event()
        post.close()
        assert s.answer(asked["id"], {"action": "accept", "content": {"name": "Ada"}}) == 202
        wait_for(lambda: world.events("up", "cancelled"), LONG, "the call cancelled upstream")
        # it went on after the cut (its question answered), and was cancelled only then
        assert [e["event"] for e in world.events("up")
                if e["event"] in ("answered", "cancelled")] == ["answered", "cancelled"]


# -- the 2024-11-05 HTTP+SSE transport (/sse and /messages)


def test_the_old_transport_opens_a_session_at_sse_and_answers_on_its_stream(served):
    http_ = served().http
    sse = Raw(http_.port, "GET", "/sse")
    assert sse.status == 200 and sse.headers["content-type"].startswith("text/event-stream")
    _, kind, endpoint = sse.event()
    url = endpoint["text"]
    assert kind == "endpoint" and url.startswith("/messages?session_id=")

    def post(msg: dict, path: str = url, **headers: str) -> Raw:
        return Raw(http_.port, "POST", path, body=msg, headers=headers)

    init = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": "old", "version": "0"}}})
    assert init.status == 202
    _, kind, answer = sse.event()
    assert kind == "message" and answer["id"] == 1
    assert answer["result"]["protocolVersion"] == "2024-11-05"
    assert post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status == 202
    assert post({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "up__echo", "arguments": {"text": "old"}}}).status == 202
    assert text_of(sse.message()["result"]) == "old"
    # the guard in front, as for /mcp; unknown sessions, methods
    assert Raw(http_.port, "GET", "/sse", headers={"Authorization": "Bearer wrong"}).status == 401
    assert Raw(http_.port, "GET", "/sse", headers={"Origin": "https://evil.example"}
               ).status == 403
    assert post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, "/messages?session_id=x"
                ).status == 404
    assert post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, "/sse").status == 405
    # its stream closed: the session ends
    sse.close()
    wait_for(lambda: post({"jsonrpc": "2.0", "id": 4, "method": "ping"}).status == 404, LONG,
             "the session ended with its stream")


def test_the_python_sdk_sse_client_is_served(served):
    if not VENV_PY.exists():
        pytest.skip("the mcp SDK venv is not installed: run bash tests/realservers/install.sh")
    srv = served()
    url = srv.url.rsplit("/", 1)[0] + "/sse"
    out = subprocess.run([str(VENV_PY), str(Path(__file__).parent / "sdk_sse_client.py"), url],
                         capture_output=True, timeout=LONG * 2,
                         env=dict(os.environ, SERVE_TOKEN=TOKEN))
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert "up__echo" in got["tools"] and got["texts"] == ["done 2"]
    assert got["progress"] == [1, 2]
