"""A second adversarial review of --serve (issue 28): the lean request reader of connections
kept alive, and the request handler that runs on its HTTP thread, each test failing before its
fix. A real abstract.py --serve over fake upstreams, reached by a raw-socket client (every byte
on the wire is the test's own)."""

from __future__ import annotations

import json
import time
import types
from typing import Any

import pytest

import abstract

from test_serve_keepalive import LONG, TOKEN, Wire, ping, session
from test_serve_keepalive import served  # noqa: F401 (a fixture)


# -- the request reader: what a proxy in front could read otherwise is refused


@pytest.mark.parametrize("head", [
    "Content-Length: \x0b{n}\r\n",  # (str.strip() took VT, FS and NBSP for spaces)
    "Content-Length: {n}\x1c\r\n",
    "Content-Length: \xa0{n}\r\n",
    "X-A: a\rX-B: b\r\nContent-Length: {n}\r\n",  # a bare CR (some read it as an end)
    "X-A: a\x00b\r\nContent-Length: {n}\r\n",  # NUL (RFC 9110 section 5.5)
])
def test_a_length_a_proxy_may_read_otherwise_is_refused(served, head):  # noqa: F811
    """A value is trimmed of spaces and tabs only, and a header holding a CR or a NUL is refused:
    the request is not answered as one, and nothing after it on the connection is read."""
    srv = served()
    with Wire(srv.port) as wire:
        sid = session(wire)
    body = json.dumps(ping(1)).encode()
    smuggled = Wire.request(srv.port, ping(99), sid)
    raw = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nAuthorization: Bearer {TOKEN}"
           f"\r\nMcp-Session-Id: {sid}\r\nAccept: application/json\r\n"
           + head.format(n=len(body)) + "\r\n").encode("latin-1") + body + smuggled
    with Wire(srv.port) as wire:
        wire.sock.sendall(raw)
        status, headers, _ = wire.answer()
        assert status in (400, 411), (head, status)
        assert headers.get("connection") == "close" and wire.ended(), head
        assert b'"id":99' not in wire.buf


# -- the handler on the HTTP thread: a call whose client went away holds no connection slot


def test_a_cut_stream_whose_call_goes_on_frees_its_connection_for_the_resume(served):  # noqa: F811
    """http_max_connections 2. A call's SSE stream is cut after its first event; its call goes
    on (its handler running on the POST's HTTP thread, for 40 s), the client resumes it (a GET
    with Last-Event-ID) and sends a ping: the ping is answered at once, not once the call ends
    (the cut POST's connection held its slot while its handler ran)."""
    srv = served(http_max_connections=2)
    with Wire(srv.port) as wire:
        sid = session(wire)
    cut = Wire(srv.port)
    cut.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "up__progress", "arguments": {"steps": 1, "then_wait": 40},
        "_meta": {"progressToken": "p"}}}, sid)
    deadline = time.monotonic() + LONG
    while b"\nid: " not in cut.buf:
        assert cut._more(deadline), cut.buf[:300]
    event = cut.buf.split(b"\nid: ")[1].split(b"\n")[0].decode()
    cut.close()
    with Wire(srv.port) as resumed, Wire(srv.port) as other:
        resumed.sock.sendall(
            f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nAuthorization: Bearer {TOKEN}"
            f"\r\nAccept: text/event-stream\r\nMcp-Session-Id: {sid}\r\nLast-Event-ID: {event}"
            f"\r\n\r\n".encode())
        while b"\r\n\r\n" not in resumed.buf:
            assert resumed._more(deadline), resumed.buf[:300]
        assert resumed.buf.startswith(b"HTTP/1.1 200"), resumed.buf[:300]
        t = time.monotonic()
        other.post(ping(3), sid)
        status, _, body = other.answer()
        assert status == 200 and json.loads(body)["id"] == 3
        assert time.monotonic() - t < 25, "the ping waited for the cut call's end"


# -- a request that races its session's end (DELETE) is answered, not left waiting


def _bare_server(rfile: Any, wfile: Any) -> Any:
    """What a session's server needs here: a Connection that answers ping."""
    conn = abstract.Connection(rfile, wfile, name="client", queued=True,
                               requests={"ping": lambda req: {}})
    nothing = types.SimpleNamespace(stop=lambda: None, sweep=lambda: None, close=lambda: None)
    return types.SimpleNamespace(conn=conn, transparent=None, temps=nothing,
                                 ctx=types.SimpleNamespace(tables=nothing))


def test_a_request_that_races_its_sessions_end_is_answered_with_why():
    """A POST that found its session open, whose call came in once the session had ended (a
    DELETE at the same time): its stream gets the session's end as the answer, and ends. It got
    nothing, and its client waited for ever (the session's server no longer answered)."""
    session = abstract._Session("sid", _bare_server)
    session.end("the client ended the session (DELETE)")
    stream = session.new_stream()
    session.call({"jsonrpc": "2.0", "id": 7, "method": "ping"}, stream, here=True)
    got = stream.get(10.0)
    assert got is not None and got["id"] == 7, got
    assert got["error"] == {"code": -32000, "message": "the client ended the session (DELETE)"}
    assert stream.ended and stream.get(0.0) is None


def test_a_stream_keeps_for_a_resume_no_event_over_its_bound():
    """A stream's last event is kept for a resume whatever the byte budget, but not one over
    _SERVE_REPLAY_LAST: a large result sent as an event is not held on once sent (64 sessions'
    streams would each keep theirs for a minute)."""
    replay = abstract._Replay("p1")
    small, large = b"x" * 100, b"y" * (abstract._SERVE_REPLAY_LAST + 1)
    first = replay.add(small)
    assert replay.after(0) == [(first, small)]
    second = replay.add(large)
    assert second == "p1-2" and replay.after(0) == [(first, small)]  # (its id still counts)
    third = replay.add(b"z" * (abstract._SERVE_REPLAY_BYTES + 1))  # over the budget: kept alone
    assert [eid for eid, _ in replay.after(0)] == [third]
