"""Remote upstreams end to end: Abstract (a real subprocess) in front of real HTTP servers on
127.0.0.1: the official Python SDK's server over Streamable HTTP and HTTP+SSE, server-everything
in its streamableHttp and sse modes, and stdlib fakes for the faults. Peers that are not
installed are skipped with one line."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import WAIT, text_of, wait_for
from httpfake import FakeHTTP, FakeProxy, Relay, reply, self_signed, server_tls

EVERYTHING = (Path(os.environ.get("ABSTRACT_REALSERVERS_HOME") or Path.home() / ".cache" / "abstract-realservers")
              / "node" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js")
HERE = Path(__file__).resolve().parent
SDK_PY = Path(os.environ.get("ABSTRACT_INTEROP_HOME", "/tmp/abstract-interop")) / "venv" / "bin" / "python"
SDK_SERVER = HERE / "remote" / "sdk_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A server process listening on 127.0.0.1:port, killed at the end of the test."""

    def __init__(self, argv, port: int, env=None) -> None:
        self.port = port
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True)
        wait_for(self._listening, 30, f"a server on port {port}")

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited: {self.proc.stderr.read().decode()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.proc.stderr.close()


@pytest.fixture
def serve():
    started = []

    def start(kind: str, *flags: str):
        port = free_port()
        if kind == "sdk":
            if not SDK_PY.exists():
                pytest.skip(f"the official MCP Python SDK is not installed at {SDK_PY}")
            argv = [str(SDK_PY), str(SDK_SERVER), "--port", str(port), *flags]
        elif kind == "everything":
            node = shutil.which("node")
            if not EVERYTHING.exists() or node is None:
                pytest.skip(f"server-everything not installed at {EVERYTHING} (bash tests/realservers/install.sh)")
            argv = [node, str(EVERYTHING), *flags]
        else:
            raise ValueError(kind)
        s = Served(argv, port, env={**os.environ, "PORT": str(port)})
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def start_abstract(world, servers: dict, settings=None, **env):
    world.servers.update(servers)
    world.settings = settings
    return world.start(env=world.env(**env))


def up(proxy, server, tool, timeout=WAIT, **args) -> dict:
    return proxy.upstream(server, tool, args, timeout=timeout)



def sdk_entry(s, kind="http", **extra) -> dict:
    path = "/sse" if kind == "sse" else "/mcp"
    return {"type": kind, "url": f"http://127.0.0.1:{s.port}{path}", **extra}


@pytest.mark.parametrize("flags", [(), ("--json-response",), ("--legacy",), ("--transport", "sse")],
                         ids=["sse-answers", "json-answers", "handshake-era", "legacy-sse"])
def test_sdk_server_every_tool(world, serve, flags, tmp_path):
    s = serve("sdk", *flags)
    kind = "sse" if "sse" in flags else "http"
    p = start_abstract(world, {"remote": sdk_entry(s, kind)}, settings={"output_cache": {"min_size": 1000}})
    assert text_of(up(p, "remote", "echo", text="héllo")) == "héllo"
    listed = p.call_tool("list_available_tools", {"filter_by_server": "remote"})
    assert "echo" in text_of(listed) and "progress" in text_of(listed)
    assert "kb" in text_of(p.call_tool("list_tool_details", {"server": "remote", "tool_name": "big"}))
    # a large result: cached, read back by window
    res = up(p, "remote", "big", kb=200)
    token = res["structuredContent"]["token"] if "structuredContent" in res else None
    assert token, res
    window = p.call_tool("retrieve_cached_output", {"token": token, "offset": 0, "length": 65})
    assert text_of(window).startswith("0123456789abcdef"), window
    # storing, then a query over the stored records
    stored = p.call_tool("call_tool_and_store", {"server": "remote", "tool_name": "rows", "tool_args": {"n": 500},
                                                 "filename": "rows.json"})
    assert not stored.get("isError"), text_of(stored)
    out = world.dir / "rows.json"
    assert len(json.loads(out.read_text())) == 500
    q = p.call_tool("query_output", {"source": str(out), "sql": "SELECT count(*) AS n FROM data"})
    assert "500" in text_of(q), text_of(q)
    # file input: the arguments come from a file
    args = world.dir / "args.json"
    args.write_text(json.dumps({"text": "from a file"}))
    fed = p.call_tool("call_tool_with_file_content", {"server": "remote", "tool_name": "echo",
                                                      "file_path": str(args), "output_format": "json"})
    assert "from a file" in text_of(fed), text_of(fed)
    found = p.call_tool("search_stored_outputs", {"query": "rows"})
    assert not found.get("isError")
    assert not p.call_tool("list_stored_outputs", {}).get("isError")
    assert text_of(up(p, "remote", "count", key="every-" + kind + str(len(flags)))) == "1"


def test_sdk_server_progress_resume_and_direct_mode(world, serve):
    s = serve("sdk", "--legacy")  # (a handshake-era session: its streams resume)
    world.servers["remote"] = sdk_entry(s)
    p = world.start("--expose", "direct", str(world.dir))
    tools = {t["name"] for t in p.result("tools/list", {})["tools"]}
    assert "remote__progress" in tools or "progress" in tools, tools
    name = "remote__progress" if "remote__progress" in tools else "progress"
    res = p.call_tool(name, {"steps": 3}, meta={"progressToken": "tok-1"})
    assert text_of(res) == "done"
    wait_for(lambda: len([n for n in p.notifications if n["method"] == "notifications/progress"
                          and n["params"]["progressToken"] == "tok-1"]) == 3, what="3 progress notifications")
    # the server closes the answer's stream mid-way: Abstract resumes it with Last-Event-ID
    cut = p.call_tool(name.replace("progress", "cut"), {})
    assert text_of(cut) == "resumed", cut


def test_sdk_server_cancellation_and_timeout(world, serve):
    s = serve("sdk")
    p = start_abstract(world, {"remote": sdk_entry(s)}, settings={"servers": {"remote": {"timeout_seconds": 2}}})
    rid = p.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "remote", "tool_name": "slow", "tool_args": {"seconds": 20}}})
    time.sleep(0.5) if False else None
    p.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
    t0 = time.monotonic()
    res = up(p, "remote", "slow", seconds=20, timeout=30)
    assert res.get("isError") and "did not answer within 2 s" in text_of(res), res
    assert time.monotonic() - t0 < 15
    assert not p.has_response(rid)  # a cancelled request gets no answer
    assert text_of(up(p, "remote", "echo", text="after")) == "after"


def test_session_lost_on_server_restart_runs_the_call_once_in_a_new_session(world, serve):
    """The restarted server answers the old session id with 404: the request was not processed,
    so Abstract sends it again, once, in a new session (its count starts again with the process)."""
    s = serve("sdk", "--legacy")
    p = start_abstract(world, {"remote": sdk_entry(s)})
    assert text_of(up(p, "remote", "count", key="k")) == "1"
    port = s.port
    s.stop()
    s2 = Served([str(SDK_PY), str(SDK_SERVER), "--port", str(port), "--legacy"], port)
    try:
        res = up(p, "remote", "count", key="k")
        assert not res.get("isError") and text_of(res) == "1", res
        assert text_of(up(p, "remote", "count", key="k")) == "2"  # it ran once, not twice
        assert "HTTP 404" in p.stderr and "sending the request again, in a new session" in p.stderr
    finally:
        s2.stop()


def test_static_headers_with_variables_and_masking(world, serve):
    s = serve("sdk", "--token", "s3cr3t-token-value")
    entry = sdk_entry(s, headers={"Authorization": "Bearer ${REMOTE_TOKEN}"})
    entry["url"] += "?api_key=${REMOTE_TOKEN}"
    p = start_abstract(world, {"remote": entry, "gone": {"type": "http", "url": "http://127.0.0.1:9/mcp?key=${REMOTE_TOKEN}",
                                                          "headers": {"X-Key": "${REMOTE_TOKEN}"}}},
                       REMOTE_TOKEN="s3cr3t-token-value", ABSTRACT_LOG_LEVEL="debug")
    assert text_of(up(p, "remote", "auth")) == "yes"
    bad = up(p, "gone", "echo", text="x")
    assert bad.get("isError") and "connection refused" in text_of(bad) and "127.0.0.1:9/mcp?…" in text_of(bad)
    assert "s3cr3t" not in json.dumps(bad)
    check = world.check(env=world.env(REMOTE_TOKEN="s3cr3t-token-value"))
    out = check.stdout.decode() + check.stderr.decode()
    assert "remote" in out and f"reachable at http://127.0.0.1:{s.port}/mcp?…" in out, out
    assert "gone" in out and "FAILED" in out and "connection refused" in out, out
    assert "s3cr3t" not in out
    p.stop()
    assert "s3cr3t" not in p.stderr


def test_cursor_and_windsurf_entries_fall_back_to_sse(world, serve):
    s_http, s_sse = serve("sdk"), serve("sdk", "--transport", "sse")
    p = start_abstract(world, {
        "cursor": {"url": f"http://127.0.0.1:{s_http.port}/mcp"},
        "windsurf": {"serverUrl": f"http://127.0.0.1:{s_sse.port}/sse"}})
    assert text_of(up(p, "cursor", "echo", text="c")) == "c"
    assert text_of(up(p, "windsurf", "echo", text="w")) == "w"


@pytest.mark.parametrize("mode,path", [("streamableHttp", "/mcp"), ("sse", "/sse")])
def test_server_everything_remote(world, serve, mode, path):
    s = serve("everything", mode)
    kind = "sse" if mode == "sse" else "http"
    p = start_abstract(world, {"everything": {"type": kind, "url": f"http://127.0.0.1:{s.port}{path}"}},
                       settings={"output_cache": {"min_size": 1000}})
    assert "hi" in text_of(up(p, "everything", "echo", message="hi"))
    assert "7" in text_of(up(p, "everything", "get-sum", a=3, b=4))
    res = p.call_tool("call_tool", {"server": "everything", "tool_name": "trigger-long-running-operation",
                                    "tool_args": {"duration": 1, "steps": 3}}, timeout=30,
                      meta={"progressToken": "p1"})
    assert not res.get("isError"), res
    wait_for(lambda: [n for n in p.notifications if n["method"] == "notifications/progress"],
             what="progress from server-everything")
    stored = p.call_tool("call_tool_and_store", {"server": "everything", "tool_name": "get-tiny-image",
                                                 "tool_args": {}})
    assert not stored.get("isError"), text_of(stored)


class FakeMcp:
    """A scripted handshake-era Streamable HTTP server (stdlib): JSON answers, a session id, 405
    to GET, 400 to the 2026-07-28 probe (or `discover`: (status, body, Content-Type));
    tools: ok, boom (HTTP 500), cut (an SSE stream that ends before the answer), hang (never
    answers until the test ends), resume (an SSE stream cut after an event with an id: the
    answer comes on the GET that resumes it with Last-Event-ID)."""

    TOOLS = [{"name": n, "inputSchema": {"type": "object"}}
             for n in ("ok", "boom", "cut", "hang", "resume")]

    def __init__(self, tls=None, discover=None) -> None:
        self.discover = discover
        self.calls = []
        self.resumable = []  # the id of the call whose answer the resuming GET brings
        self.release = threading.Event()
        self.listen_retry0, self.listens = False, []
        self.http = FakeHTTP(self.handle, tls)
        self.url = self.http.url + "/mcp"

    def posted(self, method):
        return [(h, json.loads(b)) for m, _, h, b in self.http.seen
                if m == "POST" and json.loads(b).get("method") == method]

    def sse(self, r, *events: bytes) -> None:
        r.send_response(200)
        r.send_header("Content-Type", "text/event-stream")
        r.send_header("Connection", "close")
        r.end_headers()
        for event in events:
            r.wfile.write(event)
        r.close_connection = True

    def handle(self, r) -> None:
        if r.command == "GET" and r.headers.get("Last-Event-ID") == "ev-1" and self.resumable:
            answer = {"jsonrpc": "2.0", "id": self.resumable.pop(),
                      "result": {"content": [{"type": "text", "text": "resumed"}]}}
            return self.sse(r, b"id: ev-2\ndata: " + json.dumps(answer).encode() + b"\n\n")
        if r.command == "GET" and self.listen_retry0:  # a GET stream that says retry: 0 and ends
            self.listens.append(time.monotonic())
            return self.sse(r, b"retry: 0\n\n")
        if r.command == "GET":
            return reply(r, 405, b"")
        if r.command == "DELETE":
            return reply(r, 200, b"")
        msg = json.loads(r.body)
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            return reply(r, 202, b"")
        answer = lambda result: reply(r, 200, json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}).encode(),
                                      headers={"Mcp-Session-Id": "sess-1"})
        if method == "server/discover" and self.discover:
            return reply(r, *self.discover)
        if method == "server/discover":  # a handshake-era server, as the TypeScript SDK answers
            return reply(r, 400, json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32000, "message": "Bad Request: Server not initialized"}}).encode())
        if method == "initialize":
            return answer({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "fake", "version": "1"}})
        if method == "tools/list":
            return answer({"tools": self.TOOLS})
        name = msg["params"]["name"]
        self.calls.append(name)
        if name == "boom":
            return reply(r, 500, b"database exploded\nTraceback ...", "text/plain")
        if name == "cut":
            r.send_response(200)
            r.send_header("Content-Type", "text/event-stream")
            r.send_header("Connection", "close")
            r.end_headers()
            note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}
            r.wfile.write(b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n")
            r.close_connection = True
            return
        if name == "hang":
            self.release.wait(60)
            return answer({"content": [{"type": "text", "text": "released"}]})
        if name == "resume":
            self.resumable.append(mid)
            return self.sse(r, b"id: ev-1\nretry: 50\ndata: \n\n")  # the priming event
        return answer({"content": [{"type": "text", "text": "fine"}]})

    def close(self) -> None:
        self.release.set()
        self.http.close()


@pytest.fixture
def fake_mcp():
    """make(**kw) -> a FakeMcp, or make(ModernFake, **kw): closed at the end of the test."""
    made = []

    def make(kind=None, **kw):
        f = (kind or FakeMcp)(**kw)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def test_faults_are_clear_bounded_and_never_replayed(world, fake_mcp):
    f = fake_mcp()
    p = start_abstract(world, {"fake": {"type": "http", "url": f.url}},
                       settings={"servers": {"fake": {"timeout_seconds": 2}}})
    assert text_of(up(p, "fake", "ok")) == "fine"
    boom = text_of(up(p, "fake", "boom"))
    assert "HTTP 500" in boom and f.url in boom and "database exploded" in boom and "Traceback" not in boom
    assert "not retried" in boom, boom
    cut = text_of(up(p, "fake", "cut"))
    assert "stream ended before the answer" in cut and "not retried" in cut, cut
    t0 = time.monotonic()
    hang = text_of(up(p, "fake", "hang", timeout=30))
    assert "did not answer within 2 s" in hang, hang
    assert time.monotonic() - t0 < 20
    wait_for(lambda: f.posted("notifications/cancelled"), what="notifications/cancelled POSTed")
    assert f.calls == ["ok", "boom", "cut", "hang"]  # nothing was sent twice
    headers, _ = f.posted("tools/list")[0]
    assert headers.get("Mcp-Session-Id") == "sess-1" and headers.get("MCP-Protocol-Version") == "2025-06-18"
    assert "application/json" in headers["Accept"] and "text/event-stream" in headers["Accept"]
    assert "Mcp-Session-Id" not in f.posted("initialize")[0][0]
    p.stop()
    wait_for(lambda: [h for m, _, h, _ in f.http.seen if m == "DELETE" and h.get("Mcp-Session-Id") == "sess-1"],
             what="the session DELETEd at shutdown")


def test_32_calls_in_flight_block_neither_a_cancel_nor_the_calls_after_them(world, fake_mcp):
    """32 requests running (the most at once): a 33rd waits its turn without holding up the
    writer, so the cancel of a running call is POSTed at once, and its freed slot takes the
    waiting one; 64 may wait, the next is refused unsent. After the release all run."""
    f = fake_mcp()
    p = start_abstract(world, {"fake": {"type": "http", "url": f.url}},
                       settings={"servers": {"fake": {"timeout_seconds": 600}}})
    assert text_of(up(p, "fake", "ok")) == "fine"
    args = {"server": "fake", "tool_name": "hang", "tool_args": {}}
    call = lambda: p.send_request("tools/call", {"name": "call_tool", "arguments": args})
    running = [call() for _ in range(33)]
    wait_for(lambda: f.calls.count("hang") == 32, what="32 calls running")
    p.notify("notifications/cancelled", {"requestId": running[0], "reason": "test"})
    wait_for(lambda: f.posted("notifications/cancelled"), what="the cancel POSTed")
    wait_for(lambda: f.calls.count("hang") == 33, what="the waiting call sent")
    waiting = [call() for _ in range(64)]
    refused = call()
    text = text_of(p.wait_response(refused)["result"])
    assert "32 requests running and 64 more waiting, so this one was not sent" in text, text
    assert "may have done part of the work" not in text
    assert f.calls.count("hang") == 33 and not p.has_response(running[1])
    f.release.set()
    for rid in running[1:] + waiting:
        assert text_of(p.wait_response(rid)["result"]) == "released"
    assert f.calls.count("hang") == 97  # each sent once
    assert len(f.posted("notifications/cancelled")) == 1


def test_a_call_cancelled_while_its_connection_opens_is_never_sent(world, fake_mcp, tmp_path):
    """The client cancels a call while its connection is still opening (a TLS handshake held
    up by a relay; a proxy CONNECT or a slow TCP connect alike): the connection is closed once
    open, and the call is sent neither on it nor on another one."""
    cert = self_signed(tmp_path)
    f = fake_mcp(tls=server_tls(cert))
    relay = Relay(f.http.port)
    try:
        url = f"https://127.0.0.1:{relay.port}/mcp"
        p = start_abstract(world, {"fake": {"type": "http", "url": url}}, SSL_CERT_FILE=str(cert))
        assert text_of(up(p, "fake", "ok")) == "fine"
        wait_for(lambda: [m for m, _, _, _ in f.http.seen if m == "GET"], what="the GET stream")
        relay.hold()
        relay.cut()  # the connections kept alive end: the next call opens a new one
        rid = p.send_request("tools/call", {"name": "call_tool", "arguments": {
            "server": "fake", "tool_name": "hang", "tool_args": {}}})
        wait_for(lambda: len(relay.waiting) == 1, what="the call's connection opening")
        p.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
        # (the cancel is noted before it is POSTed, on a connection of its own)
        wait_for(lambda: len(relay.waiting) == 2, what="the cancel's connection opening")
        relay.release()
        wait_for(lambda: f.posted("notifications/cancelled"), what="the cancel POSTed")
        assert text_of(up(p, "fake", "ok")) == "fine"
        assert f.calls == ["ok", "ok"] and not p.has_response(rid)
    finally:
        relay.close()


@pytest.mark.parametrize("status,body,ctype", [
    (500, b"Internal Server Error", "text/plain"), (503, b'{"detail": "busy"}', "application/json"),
    (200, b"<html>welcome</html>", "text/html"), (200, b'{"ok": true}', "application/json"),
    (200, b'{"jsonrpc": "2.0", "id": 999, "result": {}}', "application/json"),
    (202, b"", "application/json")], ids=["500", "503-json", "200-html", "200-not-jsonrpc",
                                          "200-another-id", "202"])
def test_any_other_answer_to_the_probe_is_a_handshake_era_server(world, fake_mcp, status, body,
                                                                   ctype):
    """2026-07-28 spec, versioning#backward-compatibility: only a result or a JSON-RPC error to
    server/discover is the answer of a modern server; anything else (a 5xx, a page, a body that
    is not the answer) identifies a handshake-era server, spoken to after initialize."""
    f = fake_mcp(discover=(status, body, ctype))
    p = start_abstract(world, {"fake": {"type": "http", "url": f.url}},
                       settings={"servers": {"fake": {"startup_timeout_seconds": 5}}})
    assert text_of(up(p, "fake", "ok")) == "fine"
    posted = [json.loads(b).get("method") for m, _, _, b in f.http.seen if m == "POST"]
    assert posted[:2] == ["server/discover", "initialize"], posted


def test_sequential_calls_keep_one_connection_alive(world, fake_mcp):
    f = fake_mcp()
    p = start_abstract(world, {"fake": {"type": "http", "url": f.url}})
    for _ in range(5):
        assert text_of(up(p, "fake", "ok")) == "fine"
    calls = [peer for (m, _, _, b), peer in zip(f.http.seen, f.http.peers)
             if m == "POST" and json.loads(b).get("method") == "tools/call"]
    assert len(calls) == 5 and len(set(calls)) == 1, calls  # one connection for all of them


def test_user_and_password_in_the_url_are_basic_auth_never_seen_by_the_proxy(world, fake_mcp):
    """http://user:password@ in an upstream's url, reached through HTTP_PROXY: the server gets
    HTTP Basic auth; the proxy's request lines and Host headers, errors, --check and the logs
    never show the credentials."""
    f = fake_mcp()
    proxy = FakeProxy(forward=True)
    try:
        url = f.url.replace("http://", "http://alice:s3cr%40t-pw@")
        world.servers["fake"] = {"type": "http", "url": url}
        env = world.env(http_proxy=proxy.url, HTTP_PROXY=proxy.url, no_proxy="", NO_PROXY="",
                        ABSTRACT_LOG_LEVEL="debug")
        p = world.start(env=env)
        assert text_of(up(p, "fake", "ok")) == "fine"
        boom = text_of(up(p, "fake", "boom"))
        assert "HTTP 500" in boom and f.url in boom, boom
        origin = f.url.rsplit("/", 1)[0]
        assert proxy.lines and all(ln.split()[1].startswith(origin + "/") for ln in proxy.lines), proxy.lines
        hosts = [h for heads in proxy.heads for h in heads if h.lower().startswith("host:")]
        assert hosts and all(h.split(":", 1)[1].strip() == origin[len("http://"):] for h in hosts), hosts
        basic = "Basic " + base64.b64encode(b"alice:s3cr@t-pw").decode()
        assert {h.get("Authorization") for m, _, h, _ in f.http.seen} == {basic}
        check = world.check(env=env)
        out = check.stdout.decode() + check.stderr.decode()
        assert "reachable at " + f.url in out and "user:password@ in its url (no OAuth login)" in out, out
        p.stop()
        said = "\n".join(proxy.lines + [h for heads in proxy.heads for h in heads] + [boom, out, p.stderr])
        for secret in ("alice", "s3cr", "%40t-pw"):
            assert secret not in said, secret
    finally:
        proxy.close()


def test_user_and_password_in_the_url_and_an_authorization_header_is_a_config_error(world):
    world.servers["both"] = {"type": "http", "url": "http://u:secret-pw@127.0.0.1:9/mcp",
                             "headers": {"Authorization": "Bearer x"}}
    out = world.check().stdout.decode()
    assert "holds user:password@ and its headers an Authorization too; keep one of them" in out, out
    assert "secret-pw" not in out


def test_a_resumed_stream_carries_the_protocol_version(world, fake_mcp):
    f = fake_mcp()
    p = start_abstract(world, {"fake": {"type": "http", "url": f.url}})
    assert text_of(up(p, "fake", "resume")) == "resumed"
    (resumed,) = [h for m, _, h, _ in f.http.seen if m == "GET" and h.get("Last-Event-ID")]
    assert resumed.get("MCP-Protocol-Version") == "2025-06-18", resumed
    assert resumed.get("Mcp-Session-Id") == "sess-1"
    assert f.calls == ["resume"]  # resumed, not sent again


def test_a_get_stream_that_says_retry_0_is_reopened_no_sooner_than_half_a_second(world, fake_mcp):
    f = fake_mcp()
    f.listen_retry0 = True
    p = start_abstract(world, {"fake": {"type": "http", "url": f.url}})
    assert text_of(up(p, "fake", "ok")) == "fine"
    wait_for(lambda: len(f.listens) >= 3, what="the GET stream reopened twice")
    first, _, third = f.listens[:3]
    assert third - first >= 0.9  # two waits of at least 0.5 s (a busy loop: a few ms)


def test_tls_self_signed_refused_then_trusted(world, fake_mcp, tmp_path):
    cert = self_signed(tmp_path)
    f = fake_mcp(tls=server_tls(cert))
    p = start_abstract(world, {"tls": {"type": "http", "url": f.url}}, SSL_CERT_FILE="")
    res = text_of(up(p, "tls", "ok"))
    assert "TLS certificate is not trusted" in res and "SSL_CERT_FILE" in res and "server 'tls'" in res, res
    p2 = start_abstract(world, {}, SSL_CERT_FILE=str(cert))
    assert text_of(up(p2, "tls", "ok")) == "fine"


class ModernFake:
    """A scripted 2026-07-28-only Streamable HTTP server (stdlib): a request without the modern
    _meta and headers gets 400 -32022; tools/call answers with the Mcp-Name header it got.
    `discover_error`: the JSON-RPC error server/discover gets (HTTP 400) instead of its result.
    `listen`: "ack" (acknowledge, then keep the stream open), "drop-once" (the first subscription
    is acknowledged and its stream closed at once), "drop" (every one is, as a proxy that cuts
    long requests would), "drop-then-noack" (the first is dropped, the others never
    acknowledged), "noack" (never acknowledged). An open stream is kept until the client closes
    it, noted in `closed` (by the subscription's id). `change_on_drop`: the first drop waits for
    the test to set `drop_now`, and comes with a new tool, "nëw". `listened_at`: when each
    subscription came."""

    def __init__(self, listen: str = "ack", discover_error: dict = None, change_on_drop=False) -> None:
        self.listen, self.discover_error, self.change_on_drop = listen, discover_error, change_on_drop
        self.listens, self.closed, self.listened_at = [], [], []
        self.tool_names = ["wëather"]
        self.drop_now = threading.Event()
        self.release = threading.Event()
        self.http = FakeHTTP(self.handle)
        self.url = self.http.url + "/mcp"

    def posted(self, method):
        return [m for m, _, _, b in self.http.seen if m == "POST" and json.loads(b).get("method") == method]

    def handle(self, r) -> None:
        if r.command != "POST":
            return reply(r, 405, b"")
        msg = json.loads(r.body)
        method, mid = msg.get("method"), msg.get("id")
        meta = (msg.get("params") or {}).get("_meta") or {}
        error = lambda err: reply(r, 400, json.dumps({"jsonrpc": "2.0", "id": mid, "error": err}).encode())
        if method == "initialize" or meta.get("io.modelcontextprotocol/protocolVersion") != "2026-07-28":
            return error({"code": -32022, "message": "Unsupported protocol version",
                          "data": {"supported": ["2026-07-28"], "requested": "none"}})
        if r.headers.get("MCP-Protocol-Version") != "2026-07-28" or r.headers.get("Mcp-Method") != method:
            return error({"code": -32001, "message": "HeaderMismatch"})
        if method == "server/discover" and self.discover_error:
            return error(self.discover_error)
        if method == "subscriptions/listen":
            return self.subscription(r, mid, msg["params"])
        result = {"resultType": "complete"}
        if method == "server/discover":
            result.update(supportedVersions=["2026-07-28"], capabilities={"tools": {"listChanged": True}}, ttlMs=0,
                          cacheScope="private", _meta={"io.modelcontextprotocol/serverInfo": {"name": "m", "version": "1"}})
        elif method == "tools/list":
            result.update(tools=[{"name": n, "inputSchema": {"type": "object"}} for n in self.tool_names],
                          ttlMs=0, cacheScope="private")
        elif method == "tools/call":
            result.update(content=[{"type": "text", "text": "name header: " + r.headers.get("Mcp-Name", "")}])
        return reply(r, 200, json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}).encode())

    def subscription(self, r, mid, params) -> None:
        self.listens.append(params.get("notifications"))
        self.listened_at.append(time.monotonic())
        r.send_response(200)
        r.send_header("Content-Type", "text/event-stream")
        r.send_header("Connection", "close")
        r.end_headers()
        r.close_connection = True
        first = len(self.listens) == 1
        if self.listen == "noack" or (self.listen == "drop-then-noack" and not first):
            pass
        else:
            ack = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                   "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": mid},
                              "notifications": {"toolsListChanged": True}}}
            r.wfile.write(b"event: message\ndata: " + json.dumps(ack).encode() + b"\n\n")
            r.wfile.flush()
            if self.listen == "drop" or (first and self.listen in ("drop-once", "drop-then-noack")):
                if first and self.change_on_drop:
                    self.drop_now.wait(30)
                    self.tool_names.append("nëw")
                return  # the stream ends without an answer: a drop
        while not self.release.wait(0.2):  # a comment now and then, until the client hangs up
            try:
                r.wfile.write(b": waiting\n\n")
                r.wfile.flush()
            except OSError:
                self.closed.append(mid)
                return

    def close(self) -> None:
        self.release.set()
        self.http.close()


def test_modern_only_server_gets_the_envelope_and_headers(world, fake_mcp):
    """A 2026-07-28-only server (stdlib fake): Abstract probes with server/discover, then sends
    every request with the _meta envelope and the MCP-Protocol-Version, Mcp-Method and Mcp-Name
    headers; no session, no GET stream, no initialize; one subscription for tool changes."""
    f = fake_mcp(ModernFake)
    p = start_abstract(world, {"modern": {"type": "http", "url": f.url}})
    got = text_of(up(p, "modern", "wëather"))
    assert got == "name header: =?base64?d8OrYXRoZXI=?=", got
    wait_for(lambda: f.listens, what="subscriptions/listen")
    assert not f.closed
    p.stop()
    wait_for(lambda: f.closed, what="the subscription's stream closed at shutdown")
    assert f.listens == [{"toolsListChanged": True}]
    assert not f.posted("initialize")
    assert not [x for x in f.http.seen if x[0] != "POST"]  # no GET stream, no DELETE in this era
    assert all("Mcp-Session-Id" not in h for _, _, h, _ in f.http.seen)


def _list_changed(p) -> list:
    return [n for n in p.notifications if n["method"] == "notifications/tools/list_changed"]


def test_a_dropped_subscription_is_reopened_and_a_change_meanwhile_told(world, fake_mcp):
    """The subscription's stream ends without an answer, and the tools change meanwhile: once
    the subscription is open again (after 2 s), the list is asked for, found changed, and the
    client hears tools/list_changed. While a subscription is acknowledged, the list is cached."""
    f = fake_mcp(ModernFake, listen="drop-once", change_on_drop=True)
    world.servers["modern"] = {"type": "http", "url": f.url}
    p = world.start("--expose", "both", str(world.dir))
    listed = text_of(p.call_tool("list_available_tools", {"filter_by_server": "modern"}))
    assert "wëather" in listed and "nëw" not in listed
    f.drop_now.set()
    wait_for(lambda: len(f.listens) == 2, what="the subscription opened again")
    wait_for(lambda: _list_changed(p), what="notifications/tools/list_changed after the drop")
    assert "nëw" in text_of(p.call_tool("list_available_tools", {"filter_by_server": "modern"}))
    listed = len(f.posted("tools/list"))
    p.call_tool("list_available_tools", {"filter_by_server": "modern"})
    assert len(f.posted("tools/list")) == listed  # cached: the subscription tells of changes
    assert len(_list_changed(p)) == 1


def test_subscriptions_acknowledged_and_dropped_back_off_and_tell_nothing_unchanged(world, fake_mcp):
    """A server (or a proxy in front of it) that acknowledges every subscription and cuts it at
    once: the reopens back off (2 s, then 4 s: a subscription that did not last 60 s is no
    success), and as the tool list is the same after each reopen, the client is told nothing."""
    f = fake_mcp(ModernFake, listen="drop")
    world.servers["modern"] = {"type": "http", "url": f.url}
    p = world.start("--expose", "both", str(world.dir))
    assert "wëather" in text_of(p.call_tool("list_available_tools", {"filter_by_server": "modern"}))
    # (the first drop may come before any list was asked for: then the client is told, once;
    # a subscription comes after the previous one's recheck, and a notification that recheck
    # sent is ahead of the answer to a call made after it)
    wait_for(lambda: len(f.listens) >= 3, timeout=30, what="the third subscription")
    p.call_tool("list_available_tools", {"filter_by_server": "modern"})
    told = len(_list_changed(p))
    wait_for(lambda: len(f.listens) >= 4, timeout=30, what="the fourth subscription")
    assert "wëather" in text_of(p.call_tool("list_available_tools", {"filter_by_server": "modern"}))
    assert len(_list_changed(p)) == told <= 1
    gaps = [b - a for a, b in zip(f.listened_at, f.listened_at[1:])]
    assert gaps[1] > 3.5 and gaps[2] > 7.5, gaps  # 4 s, 8 s: the acknowledgments reset nothing


def test_a_dropped_subscription_not_acknowledged_again_tells_the_client(world, fake_mcp):
    """The reopened subscription is never acknowledged: nothing tells of changes any more, so
    the client is told the list may have changed."""
    f = fake_mcp(ModernFake, listen="drop-then-noack")
    world.servers["modern"] = {"type": "http", "url": f.url}
    world.settings = {"servers": {"modern": {"startup_timeout_seconds": 2}}}
    p = world.start("--expose", "both", str(world.dir))
    assert "wëather" in text_of(p.call_tool("list_available_tools", {"filter_by_server": "modern"}))
    wait_for(lambda: len(f.listens) == 2, what="the subscription opened again")
    wait_for(lambda: _list_changed(p), what="notifications/tools/list_changed after the failed reopen")


def test_a_subscription_never_acknowledged_is_closed_and_the_list_not_cached(world, fake_mcp):
    f = fake_mcp(ModernFake, listen="noack")
    p = start_abstract(world, {"modern": {"type": "http", "url": f.url}},
                       settings={"servers": {"modern": {"startup_timeout_seconds": 2}}})
    assert text_of(up(p, "modern", "wëather")).startswith("name header")
    wait_for(lambda: f.closed, what="the unacknowledged subscription's stream closed by Abstract")
    listed = len(f.posted("tools/list"))
    p.call_tool("list_available_tools", {"filter_by_server": "modern"})
    p.call_tool("list_available_tools", {"filter_by_server": "modern"})
    assert len(f.posted("tools/list")) == listed + 2  # nothing tells of changes: asked each time
    wait_for(lambda: len(f.listens) >= 2, what="the subscription tried again")


@pytest.mark.parametrize("supported,works", [(["2099-01-01"], False), (["2025-06-18"], True)])
def test_unsupported_version_answer_to_the_probe(world, supported, works, fake_mcp):
    """-32022 to server/discover: a server that names only versions Abstract does not speak is a
    clear error (no initialize is sent); one that names a handshake-era version gets initialize."""
    f = fake_mcp(ModernFake, discover_error={"code": -32022, "message": "Unsupported protocol version",
                                    "data": {"supported": supported, "requested": "2026-07-28"}})
    p = start_abstract(world, {"modern": {"type": "http", "url": f.url}})
    res = text_of(up(p, "modern", "wëather"))
    posted = [json.loads(b)["method"] for m, _, _, b in f.http.seen if m == "POST"]
    if works:  # (this fake then refuses initialize too; what matters is that it was sent, after the probe)
        assert posted[:2] == ["server/discover", "initialize"], (posted, res)
    else:
        assert "speaks only 2099-01-01" in res and "Abstract speaks 2026-07-28" in res, res
        assert not f.posted("initialize")


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_sdk_server_in_the_2026_era(world, serve, transport):
    """The official SDK's server speaks both eras, the one of the first request. Abstract probes
    with server/discover first, so it speaks 2026-07-28 to it, over Streamable HTTP and over
    stdio: calls, storing, cached windows, cancellation, and a tool the server adds reaching
    Abstract's client as notifications/tools/list_changed through subscriptions/listen."""
    if transport == "http":
        world.servers["remote"] = sdk_entry(serve("sdk"))
    else:
        if not SDK_PY.exists():
            pytest.skip(f"the official MCP Python SDK is not installed at {SDK_PY}")
        world.servers["remote"] = {"command": str(SDK_PY), "args": [str(SDK_SERVER), "--transport", "stdio"]}
    world.settings = {"output_cache": {"min_size": 1000}}
    p = world.start("--expose", "both", str(world.dir))
    assert text_of(up(p, "remote", "era")) == "2026-07-28"  # what the server saw
    res = up(p, "remote", "big", kb=100)
    token = res["structuredContent"]["token"]
    window = p.call_tool("retrieve_cached_output", {"token": token, "offset": 0, "length": 65})
    assert text_of(window).startswith("0123456789abcdef"), window
    stored = p.call_tool("call_tool_and_store", {"server": "remote", "tool_name": "rows", "tool_args": {"n": 50},
                                                 "filename": "rows.json"})
    assert not stored.get("isError") and len(json.loads((world.dir / "rows.json").read_text())) == 50, stored
    # cancellation: the client's notifications/cancelled reaches the server's handler
    rid = p.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "remote", "tool_name": "sleepy", "tool_args": {"key": "c1"}}})
    wait_for(lambda: "started=1" in text_of(up(p, "remote", "noted", key="c1")), what="sleepy to start")
    p.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
    wait_for(lambda: "cancelled=1" in text_of(up(p, "remote", "noted", key="c1")), what="sleepy to be cancelled")
    assert not p.has_response(rid)
    # a tool added on the server: list_changed comes on the subscription, and the list is new
    names = lambda: {t["name"] for t in p.result("tools/list", {})["tools"]}
    assert not [n for n in names() if n.endswith("grown1")]
    assert text_of(up(p, "remote", "grow", name="grown1")) == "added grown1"
    wait_for(lambda: [n for n in p.notifications if n["method"] == "notifications/tools/list_changed"],
             what="notifications/tools/list_changed")
    assert [n for n in names() if n.endswith("grown1")]
