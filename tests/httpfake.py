"""Stdlib HTTP peers for the HTTP client tests: a scripted server on 127.0.0.1 (plain or TLS
with a throw-away self-signed certificate made by the openssl CLI), and a forward proxy that
speaks CONNECT and absolute-form requests. Every socket has a timeout; nothing sleeps."""

from __future__ import annotations

import contextlib
import http.server
import json
import select
import shutil
import socket
import ssl
import subprocess
import threading
import urllib.parse
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

Handler = Callable[["http.server.BaseHTTPRequestHandler"], None]


class FakeHTTP:
    """A threading HTTP server whose answers come from `handle(req)`; every request seen is
    kept in `seen` as (method, path, headers dict, body bytes)."""

    def __init__(self, handle: Handler, tls: Optional[ssl.SSLContext] = None, port: int = 0) -> None:
        outer = self
        self.seen: List[tuple] = []
        self.peers: List[tuple] = []  # each request's client (address, port): its connection

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30

            def log_message(self, *a: object) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(n) if n else b""
                outer.seen.append((self.command, self.path, dict(self.headers), self.body))
                outer.peers.append(self.client_address)
                try:
                    handle(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_DELETE = do_PUT = _any

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 128  # (5 by default: a burst of connections would be reset)

        self.httpd = Server(("127.0.0.1", port), H)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._t = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._t.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def reply(req, status: int, body: bytes = b"", ctype: str = "application/json",
          headers: Optional[Dict[str, str]] = None) -> None:
    req.send_response(status)
    req.send_header("Content-Type", ctype)
    req.send_header("Content-Length", str(len(body)))
    for k, v in (headers or {}).items():
        req.send_header(k, v)
    req.end_headers()
    req.wfile.write(body)


def self_signed(tmp: Path) -> Path:
    """cert.pem and key.pem for 127.0.0.1 and localhost in `tmp`; skip without openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed: no self-signed certificate for the TLS tests")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return cert


def server_tls(cert: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(cert.with_name("key.pem")))
    return ctx


class Listener:
    """A TCP server on 127.0.0.1 serving each connection on a thread of its own (`_serve`);
    `conns` counts the connections accepted."""

    def __init__(self) -> None:
        self.conns = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(30)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.sock.close()


def pipe(c: socket.socket, up: socket.socket) -> None:
    """Pass bytes both ways between two sockets until either ends (or 30 s pass quietly)."""
    socks = [c, up]
    with contextlib.suppress(OSError, ValueError):
        while True:
            r, _, _ = select.select(socks, [], [], 30)
            if not r:
                break
            done = False
            for s in r:
                data = s.recv(65536)
                if not data:
                    done = True
                    break
                (up if s is c else c).sendall(data)
            if done:
                break
    c.close()
    up.close()


class Relay(Listener):
    """A TCP relay to 127.0.0.1:`port` (a TLS server's: the handshake passes through it). While
    held (hold() until release()), a connection accepted waits before anything passes, as
    behind a slow TLS handshake or proxy CONNECT; `waiting` has one item per connection that
    waited. cut() ends every connection relayed so far (the client sees the server close it)."""

    def __init__(self, port: int) -> None:
        self.target, self.waiting, self._socks = port, [], []
        self._gate = threading.Event()
        self._gate.set()
        super().__init__()

    def hold(self) -> None:
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def cut(self) -> None:
        for s in list(self._socks):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _serve(self, c: socket.socket) -> None:
        if not self._gate.is_set():
            self.waiting.append(c)
            self._gate.wait(30)
        up = socket.create_connection(("127.0.0.1", self.target), timeout=30)
        self._socks += [c, up]
        pipe(c, up)

    def close(self) -> None:
        self.release()
        super().close()


class FakeProxy(Listener):
    """A forward proxy: CONNECT host:port tunnels bytes both ways; an absolute-form request is
    answered 200 with the request line as body, or, with `forward`, passed on to its server (in
    origin-form, as a real proxy does) and the answer relayed. `lines` keeps every request line
    seen, `heads` each one's header lines as they came."""

    def __init__(self, forward: bool = False) -> None:
        self.forward = forward
        self.lines: List[str] = []
        self.heads: List[List[str]] = []
        super().__init__()

    def _serve(self, c: socket.socket) -> None:
        c.settimeout(30)
        f = c.makefile("rb")
        line = f.readline().decode().strip()
        if not line:  # a client that gave up before its request
            c.close()
            return
        self.lines.append(line)
        heads: List[str] = []
        while True:
            h = f.readline().decode().strip()
            if not h:
                break
            heads.append(h)
        self.heads.append(heads)
        method, target, _ = line.split(" ", 2)
        if method != "CONNECT" and self.forward:
            return self._pass_on(c, f, method, target, heads)
        if method != "CONNECT":
            body = line.encode()
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            c.close()
            return
        host, port = target.rsplit(":", 1)
        up = socket.create_connection((host, int(port)), timeout=30)
        c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pipe(c, up)

    def _pass_on(self, c: socket.socket, f, method: str, target: str, heads: List[str]) -> None:
        parts = urllib.parse.urlsplit(target)
        size = next((int(h.split(":", 1)[1]) for h in heads if h.lower().startswith("content-length:")), 0)
        body = f.read(size) if size else b""
        up = socket.create_connection((parts.hostname, parts.port or 80), timeout=30)
        kept = [h for h in heads if not h.lower().startswith(("proxy-", "connection:"))]
        path = parts.path + ("?" + parts.query if parts.query else "")
        up.sendall(f"{method} {path} HTTP/1.1\r\n".encode() + "".join(h + "\r\n" for h in kept).encode()
                   + b"Connection: close\r\n\r\n" + body)
        with contextlib.suppress(OSError):
            head = b""
            while b"\r\n\r\n" not in head:  # the answer's head, to say the connection ends
                data = up.recv(65536)
                if not data:
                    break
                head += data
            # it closes after one answer, so it says so, as a real proxy does (the client would
            # otherwise keep the connection and may send its next request as it closes)
            top, sep, rest = head.partition(b"\r\n\r\n")
            lines = [h for h in top.split(b"\r\n") if not h.lower().startswith(b"connection:")]
            c.sendall(b"\r\n".join(lines + [b"Connection: close"]) + sep + rest if sep else head)
            while True:
                data = up.recv(65536)
                if not data:
                    break
                c.sendall(data)
        up.close()
        c.close()


class RawServer(Listener):
    """HTTP/1.1 on a bare socket, so a test decides how each connection ends: it answers every
    request 200 with its body and keeps the connection open, unless `after` (a callable given
    the socket and the request's number; negated: after the answer) ends it: "close" ends the
    connection, "silent" leaves the request unanswered and ends it. `requests` counts the
    requests read whole, `conns` the connections accepted."""

    def __init__(self, after: Optional[Callable[[socket.socket, int], Optional[str]]] = None) -> None:
        self.after, self.requests = after, 0
        super().__init__()
        self.url += "/mcp"

    def _serve(self, c: socket.socket) -> None:
        c.settimeout(30)
        f = c.makefile("rb")
        with contextlib.suppress(OSError), c, f:
            while True:
                line = f.readline()
                if not line:
                    return
                size = 0
                while True:
                    h = f.readline().strip()
                    if not h:
                        break
                    if h.lower().startswith(b"content-length:"):
                        size = int(h.split(b":")[1])
                body = f.read(size)
                self.requests += 1
                if self.after is not None and self.after(c, self.requests) == "silent":
                    return  # read, and left unanswered: the connection just ends
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                if self.after is not None and self.after(c, -self.requests) == "close":
                    return  # (closed by `after`, or now, by `with`)


class SessionMcp:
    """A handshake-era Streamable HTTP MCP server that keeps sessions, as a real one does: each
    initialize opens a session (Mcp-Session-Id s-1, s-2, ...), and a request naming a session it
    does not know gets 404 (the spec's answer once a session ended). restart() forgets every
    session, as a restarted process does; forget_calls=n makes the next n tools/call forget
    them all first (a server that restarts again and again). stop() closes the port (connections
    are refused) and start() listens on it again, forgetting the sessions. Tools: count(key)
    (how many times it ran with `key`, kept across restarts, so a call run twice shows), echo.
    Every answer closes its connection, so a stopped server keeps none open."""

    TOOLS = [{"name": "count", "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}}},
             {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]

    def __init__(self) -> None:
        self.sessions: set = set()
        self.opened = 0
        self.counts: Dict[str, int] = {}
        self.forget_calls = 0
        # (HTTP status, JSON-RPC code, message): count runs, then answers with this error, its
        # id the request's (a server that maps its tools' errors to HTTP statuses)
        self.count_error: Optional[tuple] = None
        # 2025-11-25 tasks: tool "job" (taskSupport required) counts under "job" and answers
        # with a task; its tasks/result forgets every session first (a restart mid-task)
        self.tasks = False
        # (status, body, Content-Type) answered to an unknown session id in place of the 404
        self.gone_answer: Optional[tuple] = None
        self.posts: List[tuple] = []  # (method, session id sent, status answered) of every POST
        self.http: Optional[FakeHTTP] = FakeHTTP(self.handle)
        self.port = self.http.port
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def restart(self) -> None:
        self.sessions.clear()

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
            self.http = None

    def start(self) -> None:
        self.restart()
        self.http = FakeHTTP(self.handle, port=self.port)

    def close(self) -> None:
        self.stop()

    def calls(self) -> List[tuple]:
        return [p for p in self.posts if p[0] == "tools/call"]

    def handle(self, r) -> None:
        close = {"Connection": "close"}
        if r.command in ("GET", "DELETE"):
            return reply(r, 405 if r.command == "GET" else 200, b"", headers=close)
        msg = json.loads(r.body)
        method, mid, sid = msg.get("method"), msg.get("id"), r.headers.get("Mcp-Session-Id")
        status = self._status(method, mid, sid)
        self.posts.append((method, sid, status))
        if status == 404 and self.gone_answer is not None:
            return reply(r, self.gone_answer[0], self.gone_answer[1], self.gone_answer[2], headers=close)
        if status == 404:
            return reply(r, 404, json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32001, "message": "Session not found"}}).encode(), headers=close)
        if status == 400:  # server/discover: a handshake-era server, as the TypeScript SDK answers
            return reply(r, 400, json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32000, "message": "Bad Request: Server not initialized"}}).encode(), headers=close)
        if mid is None:
            return reply(r, 202, b"", headers=close)
        if method == "initialize":
            self.opened += 1
            sid = f"s-{self.opened}"
            self.sessions.add(sid)
            result: dict = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                            "serverInfo": {"name": "sessions", "version": "1"}}
            if self.tasks:
                result["protocolVersion"] = "2025-11-25"
                result["capabilities"]["tasks"] = {"requests": {"tools": {"call": {}}}}
        elif method == "tools/list":
            result = {"tools": self.TOOLS + ([{"name": "job", "inputSchema": {"type": "object"},
                                              "execution": {"taskSupport": "required"}}]
                                             if self.tasks else [])}
        elif method == "tools/call" and msg["params"].get("name") == "job":
            self.counts["job"] = self.counts.get("job", 0) + 1
            result = {"task": {"taskId": f"t-{self.counts['job']}", "status": "working",
                               "createdAt": "2026-01-01T00:00:00Z", "ttl": 60000}}
        elif method == "tools/call":
            result = self._call(msg["params"])
            if self.count_error is not None and msg["params"].get("name") == "count":
                status, code, message = self.count_error
                return reply(r, status, json.dumps({"jsonrpc": "2.0", "id": mid, "error": {
                    "code": code, "message": message}}).encode(), headers=close)
        else:
            result = {}
        body = json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}).encode()
        reply(r, 200, body, headers={"Mcp-Session-Id": sid, **close})

    def _status(self, method: str, mid, sid: Optional[str]) -> int:
        if method == "server/discover":
            return 400
        if method == "tasks/result":
            self.restart()
        if method == "tools/call" and self.forget_calls > 0:
            self.forget_calls -= 1
            self.restart()
        if method != "initialize" and sid not in self.sessions:
            return 404
        return 200 if mid is not None else 202

    def _call(self, params: dict) -> dict:
        args = params.get("arguments") or {}
        if params.get("name") == "count":
            key = str(args.get("key"))
            self.counts[key] = self.counts.get(key, 0) + 1
            text = str(self.counts[key])
        else:
            text = str(args.get("text"))
        return {"content": [{"type": "text", "text": text}]}


class EchoMcp:
    """A handshake-era Streamable HTTP MCP server (stdlib) whose failures quote the request back,
    as careless servers do: its tools answer with a JSON-RPC error over HTTP 200 (rpc_error), an
    HTTP 500 or 400 body (http500, http400), an isError result (is_error) or an ordinary result
    (echo), each quoting the Authorization and X-Api-Key headers and the path, with an ESC
    sequence in the error ones; notifications/initialized is refused (400) the same way, and
    tools/list too (a JSON-RPC error) with `list_fails`.

    It is a login's resource and authorization server too: with `bearer` set, /mcp wants
    `Authorization: Bearer <bearer>` (else 401 naming its resource metadata), and the OAuth
    documents (resource metadata; authorization server metadata, `meta` merged in), /register
    and /token (answered with `token_answer`, each grant kept in `grants`) are served at the
    same origin."""

    TOOLS = [{"name": n, "inputSchema": {"type": "object"}}
             for n in ("rpc_error", "http500", "http400", "is_error", "echo")]

    def __init__(self, bearer: Optional[str] = None) -> None:
        self.bearer = bearer
        self.meta: Dict[str, object] = {}
        self.token_answer: Dict[str, object] = {}
        self.grants: List[Dict[str, str]] = []
        self.challenge = ""  # WWW-Authenticate of a 401 (default: names the resource metadata)
        self.list_fails = False  # tools/list answered as rpc_error is
        self.structured_error = False  # is_error's result quotes in structuredContent too
        self.error_data: object = None  # rpc_error's `data`, in place of the quote (when set)
        self.http = FakeHTTP(self.handle)
        self.base = self.http.url
        self.url = self.base + "/mcp"

    def quote(self, r) -> str:
        import json

        return json.dumps({"auth": r.headers.get("Authorization"), "key": r.headers.get("X-Api-Key"),
                           "path": r.path})

    def handle(self, r) -> None:
        import json

        path = urllib.parse.urlsplit(r.path).path
        if path.startswith("/.well-known/oauth-protected-resource"):
            return reply(r, 200, json.dumps({"resource": self.url, "authorization_servers": [self.base]}).encode())
        if path == "/.well-known/oauth-authorization-server":
            doc = {"issuer": self.base, "authorization_endpoint": self.base + "/authorize",
                   "token_endpoint": self.base + "/token", "registration_endpoint": self.base + "/register",
                   "code_challenge_methods_supported": ["S256"], **self.meta}
            return reply(r, 200, json.dumps(doc).encode())
        if path == "/register":
            asked = json.loads(r.body)
            return reply(r, 201, json.dumps({"client_id": "client-1", "redirect_uris": asked["redirect_uris"],
                                             "token_endpoint_auth_method": "none"}).encode())
        if path == "/token":
            self.grants.append(dict(urllib.parse.parse_qsl(r.body.decode())))
            return reply(r, 200, json.dumps(self.token_answer).encode())
        if r.command in ("GET", "DELETE"):
            return reply(r, 405 if r.command == "GET" else 200, b"")
        if self.bearer is not None and r.headers.get("Authorization") != f"Bearer {self.bearer}":
            www = self.challenge or f'Bearer resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"'
            return reply(r, 401, b"", headers={"WWW-Authenticate": www})
        msg = json.loads(r.body)
        method, mid = msg.get("method"), msg.get("id")
        said = "bad \x1b[31m" + self.quote(r)
        if method == "notifications/initialized":
            return reply(r, 400, said.encode(), "text/plain")
        if mid is None:
            return reply(r, 202, b"")

        def answer(result: dict) -> None:
            reply(r, 200, json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}).encode())

        if method == "server/discover":
            return reply(r, 400, json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32000, "message": "Bad Request: Server not initialized"}}).encode())
        if method == "initialize":
            return answer({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "echo", "version": "1"}})
        if method == "tools/list" and not self.list_fails:
            return answer({"tools": self.TOOLS})
        name = msg["params"].get("name")
        if name == "rpc_error" or method == "tools/list":
            return reply(r, 200, json.dumps({"jsonrpc": "2.0", "id": mid, "error": {
                "code": -32000, "message": said,
                "data": json.loads(self.quote(r)) if self.error_data is None else self.error_data}}).encode())
        if name == "http500":
            return reply(r, 500, said.encode(), "text/plain")
        if name == "http400":
            return reply(r, 400, said.encode(), "text/plain")
        if name == "is_error":
            res = {"content": [{"type": "text", "text": said}], "isError": True}
            if self.structured_error:
                res["structuredContent"] = {"request": json.loads(self.quote(r)), self.quote(r): 1}
            return answer(res)
        return answer({"content": [{"type": "text", "text": self.quote(r)}]})

    def close(self) -> None:
        self.http.close()
