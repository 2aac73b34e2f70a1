"""The HTTP client primitive (abstract.py's HTTP part): bodies, SSE, redirects, the auth hook, proxies, TLS
and faults, against real stdlib peers on 127.0.0.1."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading

import pytest

import abstract
from httpfake import FakeHTTP, FakeProxy, RawServer, reply, self_signed, server_tls


@pytest.fixture
def served():
    made = []

    def make(handle, tls=None):
        s = FakeHTTP(handle, tls)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_json_body_and_bound(served):
    s = served(lambda r: reply(r, 200, b'{"a":' + b"1" * 5000 + b"}"))
    with abstract._http_request("POST", s.url + "/mcp", {"X": "1"}, b"{}", environ={}) as resp:
        assert resp.status == 200 and resp.content_type == "application/json"
        assert len(resp.read()) == 5006
    with abstract._http_request("GET", s.url, environ={}) as resp:
        with pytest.raises(abstract._HttpError, match="more than 100 bytes"):
            resp.read(100)
    assert s.seen[0][0] == "POST" and s.seen[0][2]["X"] == "1" and s.seen[0][3] == b"{}"


def test_a_body_read_whole_has_a_deadline_for_all_of_it(served):
    stop = threading.Event()

    def drip(r):  # a byte every 0.1 s: each read is quick, the whole body never ends
        r.send_response(200)
        r.send_header("Content-Type", "application/json")
        r.send_header("Content-Length", "100000")
        r.end_headers()
        with contextlib.suppress(OSError):
            while not stop.wait(0.1):
                r.wfile.write(b" ")
                r.wfile.flush()

    s = served(drip)
    try:
        with abstract._http_request("GET", s.url, environ={}) as resp:
            with pytest.raises(abstract._HttpError, match="took more than 0.5 s"):
                resp.read(within=0.5)
    finally:
        stop.set()


def test_sse_parser_fields():
    p = abstract._SseParser(max_event=64)
    lines = [b"\xef\xbb\xbfid: 7\r\n", b"data:\r\n", b"\r\n",  # priming event: no data, id kept
             b": keep-alive\n", b"retry: 1500\n", b"event: endpoint\n", b"data: a\n", b"data:  b\n",
             b"id: 8\n", b"\n", b"data: x\n", b"\n"]
    got = [ev for ev in map(p.feed, lines) if ev is not None]
    assert got == [abstract._SseEvent("message", b"", "7"),  # (WHATWG: an empty data line dispatches)
                   abstract._SseEvent("endpoint", b"a\n b", "8"), abstract._SseEvent("message", b"x", None)]
    assert p.last_id == "8" and p.retry_ms == 1500
    p2 = abstract._SseParser(max_event=64)
    p2.feed(b"data: " + b"x" * 40 + b"\n")
    with pytest.raises(abstract._HttpError, match="more than 64 bytes"):
        p2.feed(b"data: " + b"x" * 40 + b"\n")
    with pytest.raises(abstract._HttpError, match="more than 64 bytes"):
        abstract._SseParser(max_event=64).feed(b"data: " + b"y" * 100)  # a line cut at the bound


def test_sse_stream_incremental(served):
    gate = threading.Event()

    def handle(r):
        r.send_response(200)
        r.send_header("Content-Type", "text/event-stream")
        r.end_headers()
        r.wfile.write(b"id: 1\ndata: {\"n\":1}\n\n")
        r.wfile.flush()
        gate.wait(10)  # the first event must be readable before the stream ends
        r.wfile.write(b"data: {\"n\":\ndata: 2}\n\n")
        r.wfile.flush()
        r.close_connection = True

    s = served(handle)
    p = abstract._SseParser()
    with abstract._http_request("GET", s.url, environ={}) as resp:
        events = resp.events(p)
        assert next(events).data == b'{"n":1}'
        gate.set()
        assert next(events).data == b'{"n":\n2}'
        assert next(events, None) is None
    assert p.last_id == "1"


class Provider:
    def __init__(self, fix: bool) -> None:
        self.token, self.fix, self.asked = "old", fix, []

    def headers(self, url):
        return {"Authorization": f"Bearer {self.token}"}

    def on_unauthorized(self, resp):
        self.asked.append((resp.status, resp.header("WWW-Authenticate")))
        self.token = "new"
        return self.fix


def test_auth_hook_retries_once(served):
    def handle(r):
        ok = r.headers.get("Authorization") == "Bearer new"
        reply(r, 200 if ok else 401, b"{}" if ok else b"no\n",
              headers={} if ok else {"WWW-Authenticate": 'Bearer resource_metadata="x"'})

    s = served(handle)
    prov = Provider(fix=True)
    with abstract._http_request("POST", s.url, body=b"{}", auth=prov, environ={}) as resp:
        assert resp.status == 200
    assert prov.asked == [(401, 'Bearer resource_metadata="x"')]
    prov2 = Provider(fix=False)
    with abstract._http_request("POST", s.url, body=b"{}", auth=prov2, environ={}) as resp:
        assert resp.status == 401 and "HTTP 401" in str(resp.error("server 'x'"))
    assert len(prov2.asked) == 1


def test_redirects(served):
    other = served(lambda r: reply(r, 200, r.headers.get("Authorization", "none").encode()))

    def handle(r):
        if r.path == "/post-away":
            reply(r, 302, headers={"Location": other.url + "/x"})
        elif r.path == "/post-same":
            reply(r, 307, headers={"Location": "/final"})
        elif r.path == "/get-away":
            reply(r, 301, headers={"Location": other.url + "/y"})
        else:
            reply(r, 200, r.body)

    s = served(handle)
    with pytest.raises(abstract._HttpError, match="redirected a POST .* not followed"):
        abstract._http_request("POST", s.url + "/post-away", body=b"{}", environ={})
    with abstract._http_request("POST", s.url + "/post-same", body=b"hi", environ={}) as resp:
        assert resp.read() == b"hi" and resp.url.endswith("/final")
    with abstract._http_request("GET", s.url + "/get-away", {"Authorization": "Bearer s"},
                               environ={}) as resp:
        assert resp.read() == b"none"  # the credential stayed with its origin
    assert [x[0] for x in other.seen] == ["GET"]


def test_a_redirect_to_another_origin_carries_no_header_of_the_entry_or_the_login(served):
    got = []

    def away(r):
        got.append({k.lower(): v for k, v in r.headers.items()})
        reply(r, 200, b"there")

    other = served(away)
    s = served(lambda r: reply(r, 302, headers={"Location": other.url + "/y"}))

    class Login:
        def headers(self, url):
            return {"Authorization": "Bearer ACCESS-TOKEN"}

        def on_unauthorized(self, resp):
            return False

    sent = {"X-Api-Key": "STATIC-SECRET", "Mcp-Session-Id": "sess", "Last-Event-ID": "7",
            "MCP-Protocol-Version": "2025-11-25", "Accept": "text/event-stream"}
    with abstract._http_request("GET", s.url + "/x", sent, auth=Login(), environ={}) as resp:
        assert resp.read() == b"there"
    assert "authorization" not in got[0] and "x-api-key" not in got[0]
    assert "mcp-session-id" not in got[0]
    assert got[0]["last-event-id"] == "7" and got[0]["mcp-protocol-version"] == "2025-11-25"


def test_proxy_absolute_form_and_no_proxy(served):
    proxy = FakeProxy()
    try:
        env = {"http_proxy": proxy.url}
        with abstract._http_request("GET", "http://example.invalid:81/mcp?k=1", environ=env) as resp:
            assert resp.read() == b"GET http://example.invalid:81/mcp?k=1 HTTP/1.1"
        # user:password@ is Basic auth (as in curl), never in the request line or Host
        with abstract._http_request("GET", "http://al:pw%21@example.invalid:81/x#f", environ=env) as resp:
            assert resp.read() == b"GET http://example.invalid:81/x HTTP/1.1"
        assert "Host: example.invalid:81" in proxy.heads[1]
        assert "Authorization: Basic YWw6cHch" in proxy.heads[1]  # al:pw!
        s = served(lambda r: reply(r, 200, b"direct"))
        env["NO_PROXY"] = "localhost,127.0.0.1"
        with abstract._http_request("GET", s.url, environ=env) as resp:
            assert resp.read() == b"direct"
        assert len(proxy.lines) == 2
    finally:
        proxy.close()
    assert abstract._no_proxy("a.example.com", 443, {"NO_PROXY": ".example.com"})
    assert not abstract._no_proxy("example.org", 443, {"NO_PROXY": "example.com:443"})
    with pytest.raises(abstract._HttpError, match="only http:// proxies"):
        abstract._proxy_for("https://x.test/", {"HTTPS_PROXY": "socks5://p:1"})


def test_tls_trust_and_connect_tunnel(served, tmp_path):
    cert = self_signed(tmp_path)
    s = served(lambda r: reply(r, 200, b"secure"), tls=server_tls(cert))
    with pytest.raises(abstract._HttpError, match="TLS certificate is not trusted.*SSL_CERT_FILE"):
        abstract._http_request("GET", s.url, environ={"SSL_CERT_FILE": ""})
    env = {"SSL_CERT_FILE": str(cert)}
    with abstract._http_request("GET", s.url, environ=env) as resp:
        assert resp.read() == b"secure"
    proxy = FakeProxy()
    try:
        env["HTTPS_PROXY"] = proxy.url
        with abstract._http_request("GET", s.url + "/t", environ=env) as resp:
            assert resp.read() == b"secure"
        assert proxy.lines[0].startswith(f"CONNECT 127.0.0.1:{s.port} HTTP/1.")
    finally:
        proxy.close()


def test_refused_and_silent_server():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(abstract._HttpError, match="connection refused") as e:
        abstract._http_request("GET", f"http://u:pw@127.0.0.1:{port}/mcp?key=secret", environ={})
    assert "secret" not in str(e.value) and "pw" not in str(e.value) and "?…" in str(e.value)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts (in the backlog), never answers
    try:
        with pytest.raises(abstract._HttpError, match="no answer within 0.5 s"):
            abstract._http_request("GET", f"http://127.0.0.1:{silent.getsockname()[1]}/", environ={},
                                  read_timeout=0.5)
    finally:
        silent.close()


def reset(c: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0): the peer's next write fails at once."""
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()


def post(url, pool, body=b"{}"):
    with abstract._http_request("POST", url, {"Content-Type": "application/json"}, body,
                               environ={}, pool=pool) as resp:
        return resp.read()


def kept_socket(pool) -> socket.socket:
    ((conn, _),) = [c for conns in pool._idle.values() for c in conns]
    return conn.sock


def test_a_pool_keeps_a_connection_alive_and_closes_it(served):
    s = served(lambda r: reply(r, 200, r.body))
    pool = abstract._HttpPool()
    assert [post(s.url, pool, b"%d" % i) for i in range(3)] == [b"0", b"1", b"2"]
    assert len(set(s.peers)) == 1  # three requests, one connection
    sock = kept_socket(pool)
    pool.close()
    assert sock.fileno() == -1 and pool._idle == {}
    assert post(s.url, pool) == b"{}" and pool._idle == {}  # closed: nothing is kept any more
    assert post(s.url, None) == b"{}"  # no pool: a connection per request, as before


def test_a_kept_connection_the_server_closed_is_not_used(served):
    # closed by the server after its answer: seen before it is used, and a new connection is
    # opened (a GET written whole to it would be lost, and could not be sent again)
    server, pool = RawServer(lambda c, n: "close" if n == -1 else None), abstract._HttpPool()
    try:
        assert post(server.url, pool, b"1") == b"1"
        assert select.select([kept_socket(pool)], [], [], 10)[0]  # the close has arrived
        with abstract._http_request("GET", server.url, environ={}, pool=pool) as resp:
            assert resp.status == 200 and resp.read() == b""
        assert (server.conns, server.requests) == (2, 2)
    finally:
        pool.close()
        server.close()


def test_a_request_that_did_not_get_through_on_a_kept_connection_is_sent_anew(monkeypatch):
    # the server reset the kept connection, and the check for that did not see it (a reset on
    # its way): writing the request fails, so no server has it, and it goes on a new connection
    server, pool = RawServer(lambda c, n: reset(c) or "close" if n == -1 else None), abstract._HttpPool()
    try:
        assert post(server.url, pool, b"1") == b"1"
        assert select.select([kept_socket(pool)], [], [], 10)[0]
        monkeypatch.setattr(select, "select", lambda r, w, x, t: ([], [], []))
        assert post(server.url, pool, b"2") == b"2"
        assert (server.conns, server.requests) == (2, 2)  # each request read once
    finally:
        pool.close()
        server.close()


def test_a_request_sent_on_a_kept_connection_is_never_sent_again(served):
    # the second request got through, then the connection ended without an answer: the server
    # may have run it, so it fails, and is not sent again
    server, pool = RawServer(lambda c, n: "silent" if n == 2 else None), abstract._HttpPool()
    try:
        assert post(server.url, pool, b"1") == b"1"
        with pytest.raises(abstract._HttpError, match="cannot reach"):
            post(server.url, pool, b"2")
        assert (server.conns, server.requests) == (1, 2)
    finally:
        pool.close()
        server.close()


def test_an_exchange_aborted_before_its_request_is_written_is_never_sent():
    # a cancel that lands while the connection opens (TCP, TLS, proxy CONNECT): the watcher
    # aborts it as soon as it is open. http.client would open a new socket by itself and send
    # the request on it; on a kept connection, the failed write would send it on a new one
    server, pool = RawServer(), abstract._HttpPool()
    try:
        with pytest.raises(abstract._HttpError, match="the request to .* was cancelled"):
            abstract._http_request("POST", server.url, {}, b"1", environ={},
                                  watch=lambda stop: stop())
        assert server.requests == 0
        assert post(server.url, pool, b"2") == b"2"  # kept in the pool
        once = []  # (only the first connection is aborted: nothing is sent on another one)
        with pytest.raises(abstract._HttpError, match="was cancelled"):
            abstract._http_request("POST", server.url, {}, b"3", environ={}, pool=pool,
                                  watch=lambda stop: once or once.append(stop()))
        assert server.requests == 1 and not any(pool._idle.values())
        assert post(server.url, pool, b"4") == b"4"
    finally:
        pool.close()
        server.close()
