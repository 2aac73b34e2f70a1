"""--serve over HTTP/1.1 with connections kept alive (issue 28, item 6), end to end: a real
abstract.py --serve and a raw-socket client, so every byte on the wire is the test's own. Two
requests over one connection, `Connection: close` honoured, an idle kept-alive connection closed
after http_idle_timeout_seconds, idle ones dropped to make room at http_max_connections, what
follows a 4xx on the same connection, and a body shorter than its Content-Length. Every wait is
bounded; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import queue
import select
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterator, Tuple

import pytest

from conftest import ABSTRACT, wait_for

LONG = 60.0  # a bound for what starts processes on a loaded machine
TOKEN = "k" * 40  # ABSTRACT_SERVE_TOKEN


class Served:
    """abstract.py --serve 127.0.0.1:0 --expose direct over the world's upstreams."""

    def __init__(self, world: Any) -> None:
        env = world.env(ABSTRACT_SERVE_TOKEN=TOKEN, XDG_CONFIG_HOME=str(world.tmp / "config"))
        self.proc = subprocess.Popen(
            [sys.executable, str(ABSTRACT), "--serve", "127.0.0.1:0", "--expose", "direct",
             str(world.dir)], env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        lines: "queue.Queue[bytes]" = queue.Queue()

        def drain() -> None:
            for line in iter(self.proc.stderr.readline, b""):  # type: ignore[union-attr]
                lines.put(line)
            lines.put(b"")

        threading.Thread(target=drain, daemon=True).start()
        while True:
            line = lines.get(timeout=LONG).decode()
            assert line, "abstract ended before it served"
            if "serving MCP at" in line:
                break
        self.port = int(line.rsplit(":", 1)[1].split("/")[0])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(LONG)
        for f in (self.proc.stdin, self.proc.stderr):
            if f is not None:
                f.close()


@pytest.fixture
def served(world) -> Iterator[Any]:
    world.fake("up")
    got = []

    def start(**settings: Any) -> Served:
        world.settings = settings
        got.append(Served(world))
        return got[-1]

    yield start
    for s in got:
        s.stop()


# -- a raw HTTP/1.1 client: one connection, answers read by their Content-Length


class Wire:
    """One TCP connection to the server; `post` writes a request, `answer` reads one whole."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=LONG)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Wire":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @staticmethod
    def request(port: int, msg: Any, sid: str = "", token: str = TOKEN,
                extra: str = "") -> bytes:
        body = msg if isinstance(msg, bytes) else json.dumps(msg).encode()
        head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json"
                f"\r\nAccept: application/json, text/event-stream\r\n"
                + (f"Authorization: Bearer {token}\r\n" if token else "")
                + (f"Mcp-Session-Id: {sid}\r\n" if sid else "") + extra
                + f"Content-Length: {len(body)}\r\n\r\n")
        return head.encode() + body

    def post(self, msg: Any, sid: str = "", **kw: Any) -> None:
        self.sock.sendall(self.request(self.port, msg, sid, **kw))

    def _more(self, deadline: float) -> bool:
        """Read what comes; False at the connection's end."""
        left = deadline - time.monotonic()
        assert left > 0 and select.select([self.sock], [], [], left)[0], "no answer in time"
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        self.buf += chunk
        return bool(chunk)

    def answer(self, timeout: float = LONG) -> Tuple[int, Dict[str, str], bytes]:
        """(status, headers lowercased, body) of the next answer; AssertionError when the
        connection ends first."""
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self.buf:
            assert self._more(deadline), f"the connection ended; got {self.buf[:300]!r}"
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (x.partition(":") for x in lines[1:])}
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            assert self._more(deadline), "the connection ended inside a body"
        body, self.buf = self.buf[:n], self.buf[n:]
        return int(lines[0].split()[1]), headers, body

    def ended(self, timeout: float = LONG, quiet: bool = True) -> bool:
        """Whether the server closes the connection within `timeout` (`quiet`: nothing else
        comes before)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))[0]:
                return False
            before = len(self.buf)
            if not self._more(deadline):
                return True
            assert not quiet or len(self.buf) == before or not self.buf.strip(), self.buf[:300]
        return False


INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def ping(mid: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": mid, "method": "ping"}


def session(wire: Wire) -> str:
    """initialize and notifications/initialized over `wire`: the session id."""
    wire.post(INIT)
    status, headers, _ = wire.answer()
    assert status == 200, status
    sid = headers["mcp-session-id"]
    wire.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    assert wire.answer()[0] == 202
    return sid


# -- the tests


def test_two_requests_and_more_go_over_one_connection(served):
    srv = served()
    with Wire(srv.port) as wire:
        sid = session(wire)  # (two requests already)
        wire.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "up__echo", "arguments": {"text": "again"}}}, sid)
        status, headers, body = wire.answer()
        assert status == 200 and json.loads(body)["result"]["content"][0]["text"] == "again"
        assert "close" not in headers.get("connection", "")
        wire.post(ping(3), sid)
        assert json.loads(wire.answer()[2]) == {"jsonrpc": "2.0", "id": 3, "result": {}}


def test_connection_close_is_honoured(served):
    srv = served()
    with Wire(srv.port) as wire:
        sid = session(wire)
        wire.post(ping(), sid, extra="Connection: close\r\n")
        status, headers, body = wire.answer()
        assert status == 200 and json.loads(body)["result"] == {}
        assert headers.get("connection") == "close"  # said, so the client does not reuse it
        assert wire.ended(), "the server kept the connection open after Connection: close"


def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout(served):
    srv = served(http_idle_timeout_seconds=1)
    with Wire(srv.port) as wire:
        sid = session(wire)  # kept alive between these two requests
        wire.post(ping(), sid)
        assert wire.answer()[0] == 200
        t = time.monotonic()
        assert wire.ended(LONG), "the idle connection was never closed"
        assert time.monotonic() - t >= 0.5  # the idle timeout, not at once


def test_idle_kept_alive_connections_do_not_starve_a_new_one_at_the_cap(served):
    """http_max_connections 2, both held by kept-alive clients that went quiet: a third
    client's request is answered well before their idle timeout (30 s), one of theirs is
    closed to make room."""
    srv = served(http_max_connections=2)
    quiet = [Wire(srv.port), Wire(srv.port)]
    late = None
    try:
        sid = session(quiet[0])
        quiet[1].post(ping(), sid)
        assert quiet[1].answer()[0] == 200
        quiet[1].post(ping(2), sid)  # (kept alive: its second request on it)
        assert quiet[1].answer()[0] == 200
        late = Wire(srv.port)
        t = time.monotonic()
        late.post(ping(3), sid)
        status, _, body = late.answer(LONG)
        assert status == 200 and json.loads(body)["id"] == 3
        assert time.monotonic() - t < 20, "answered only once an idle one timed out"
        wait_for(lambda: any(w.ended(0.05) for w in quiet), LONG, "an idle one closed")
    finally:
        for w in quiet + ([late] if late else []):
            w.close()


def test_what_follows_a_4xx_on_the_connection_is_handled_or_the_connection_closes(served):
    srv = served()
    with Wire(srv.port) as wire:
        sid = session(wire)
        # a 400 whose body was read: the request after it, sent at once, is answered
        wire.sock.sendall(Wire.request(srv.port, b"{not json", sid)
                          + Wire.request(srv.port, ping(5), sid))
        status, _, body = wire.answer()
        assert status == 400 and json.loads(body)["error"]["code"] == -32700
        status, _, body = wire.answer()
        assert status == 200 and json.loads(body)["id"] == 5
        # a 404 (no such session): the same
        wire.post(ping(6), "no-such-session")
        assert wire.answer()[0] == 404
        wire.post(ping(7), sid)
        assert json.loads(wire.answer()[2])["id"] == 7
    # a 401 answered without reading the body: what the body holds is never taken for a
    # request (it looks like one), and the connection closes
    smuggled = Wire.request(srv.port, ping(8), sid)
    with Wire(srv.port) as wire:
        wire.sock.sendall(Wire.request(srv.port, smuggled, sid, token=""))
        status, headers, _ = wire.answer()
        assert status == 401 and headers.get("connection") == "close"
        assert wire.ended(), "an answer came for the body of a refused request"
    # a 413 (the body is not read): closed after the answer, nothing answered after it
    with Wire(srv.port) as wire:
        big = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nAuthorization: Bearer "
               f"{TOKEN}\r\nMcp-Session-Id: {sid}\r\nContent-Length: {5 << 20}\r\n\r\n").encode()
        wire.sock.sendall(big + smuggled)
        status, headers, _ = wire.answer()
        assert status == 413 and headers.get("connection") == "close"
        assert wire.ended()


def test_a_body_shorter_than_its_content_length_times_out_cleanly(served):
    """The body must come within http_header_timeout_seconds: the connection is closed, with
    no answer to a request that never came whole, and the server goes on serving."""
    srv = served(http_header_timeout_seconds=1)
    with Wire(srv.port) as wire:
        sid = session(wire)  # a kept-alive connection's next request, cut short
        whole = Wire.request(srv.port, ping(9), sid)
        wire.sock.sendall(whole[:-10])
        t = time.monotonic()
        got_eof = wire.ended(LONG)
        assert got_eof and not wire.buf.startswith(b"HTTP/1.1 5"), wire.buf[:200]
        assert time.monotonic() - t < 30  # the header deadline, not the idle timeout
    with Wire(srv.port) as again:
        again.post(ping(10), sid)
        assert json.loads(again.answer()[2])["id"] == 10


def test_an_answer_streamed_as_events_closes_its_connection(served):
    """An SSE answer has no length: it ends with its connection, which is said."""
    srv = served()
    with Wire(srv.port) as wire:
        sid = session(wire)
        wire.post({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {
            "name": "up__progress", "arguments": {"steps": 2},
            "_meta": {"progressToken": "p"}}}, sid)
        deadline = time.monotonic() + LONG
        while b"\r\n\r\n" not in wire.buf:
            assert wire._more(deadline)
        head = wire.buf.split(b"\r\n\r\n")[0].decode().lower()
        assert "text/event-stream" in head and "connection: close" in head
        assert wire.ended(quiet=False)
        assert b'"id":11' in wire.buf or b'"id": 11' in wire.buf


def test_a_malformed_head_is_refused_and_its_connection_closed(served):
    """Abstract's request reader: too many header lines 431, a line that is no header (folded
    too) or two Content-Lengths that differ 400 (the body's end would be ambiguous on a
    kept-alive connection), HTTP/2.0 505; each closes the connection."""
    srv = served()
    start = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n"
    cases = [(431, start + "X-A: b\r\n" * 101 + "\r\n"),
             (400, start + "No colon here\r\n\r\n"),
             (400, start + "X-A: b\r\n  folded\r\n\r\n"),
             (400, start + "Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}"),
             (505, f"GET /mcp HTTP/2.0\r\nHost: 127.0.0.1:{srv.port}\r\n\r\n")]
    for status, raw in cases:
        with Wire(srv.port) as wire:
            wire.sock.sendall(raw.encode())
            got, headers, _ = wire.answer()
            assert got == status, (raw[:80], got)
            assert headers.get("connection") == "close" and wire.ended(), raw[:80]
