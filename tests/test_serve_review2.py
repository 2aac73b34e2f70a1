"""A second adversarial review of --serve (issue 28): the lean request reader of connections
kept alive, and the request handler that runs on its HTTP thread, each test failing before its
fix. A real abstract.py --serve over fake upstreams, reached by a raw-socket client (every byte
on the wire is the test's own)."""

from __future__ import annotations

import json

import pytest

from test_serve_keepalive import TOKEN, Wire, ping, session
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
