"""--serve's security gaps of issue 28: OAuth through a tunnel or reverse proxy
(serve.public_url, --serve-public-url), CORS on /mcp for allowed origins, sessions bound to the
credential that opened them, and a bounded /register. A real abstract.py serving fake upstreams,
reached directly and through a stdlib TCP forwarder standing in for the tunnel; the official
Python SDK's OAuth client logs in through it (skipped with one line when its venv is absent).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

import abstract
from conftest import wait_for
from test_serve import ELICIT, LONG, TOKEN, VENV_PY, Events, Http, Served, Session
from test_serve import served  # noqa: F401 (a fixture)
from test_serve_auth import REDIRECT, Clock, authorize, client_id, pkce, redirected, ticket_of
from test_serve_auth import Served as AuthServed
from test_serve_auth import approve, call, login

Reply = Tuple[int, Dict[str, str], bytes]
SDK_LOGIN = Path(__file__).parent / "realservers" / "sdk_oauth_login.py"
WEB = "http://localhost:6274"  # an allowed browser origin (the Inspector's web UI)


class Tunnel:
    """A TCP forwarder on a port of its own, standing in for a tunnel (cloudflared, ngrok) in
    front of Abstract: every byte passes unchanged, the client's Host (the public one) too."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.target = 0  # Abstract's port, once it serves
        self.public = f"http://localhost:{self.port}"
        self.open: List[socket.socket] = []  # (closed at the end, whatever is still open)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(("127.0.0.1", self.target), timeout=LONG)
            except OSError:
                client.close()
                continue
            self.open += [client, up]
            done = [0]
            for a, b in ((client, up), (up, client)):
                threading.Thread(target=self._pump, args=(a, b, (client, up), done),
                                 daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket, both: Tuple[socket.socket, socket.socket],
              done: list) -> None:
        with contextlib.suppress(OSError):
            for data in iter(lambda: a.recv(1 << 16), b""):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)
        done.append(1)
        if len(done) == 3:  # (the second direction to end closes both)
            for s in both:
                s.close()

    def close(self) -> None:
        self.sock.close()
        for s in self.open:
            s.close()


@pytest.fixture
def tunnel() -> Iterator[Tunnel]:
    t = Tunnel()
    yield t
    t.close()


def request(port: int, method: str, path: str, body: Any = None,
            headers: Optional[Dict[str, str]] = None, host: str = "127.0.0.1") -> Reply:
    """One request to 127.0.0.1:`port`; `host` is the name connected to (and the Host sent)."""
    return call(host, port, method, path, body, headers)


class Via:
    """The authorization server's paths of a served Abstract, with test_serve_auth's helpers'
    `call` (reached directly, or through the tunnel by the public name)."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.port, self.host = port, host

    def call(self, method: str, path: str, body: Any = None,
             headers: Optional[Dict[str, str]] = None) -> Reply:
        return request(self.port, method, path, body, headers, self.host)


def oauth_login(via: Via) -> Tuple[str, dict]:
    """Register, approve with the server's token, exchange the code: (client_id, tokens)."""
    cid = client_id(via)  # type: ignore[arg-type]
    verifier, challenge = pkce()
    status, _, page = authorize(via, cid, challenge)  # type: ignore[arg-type]
    assert status == 200, page
    status, headers, _ = approve(via, ticket_of(page), token=TOKEN)  # type: ignore[arg-type]
    assert status == 302
    status, _, body = via.call("POST", "/token", {
        "grant_type": "authorization_code", "code": redirected(headers)["code"],
        "client_id": cid, "redirect_uri": REDIRECT, "code_verifier": verifier})
    assert status == 200, body
    return cid, json.loads(body)


def refresh(via: Via, cid: str, tokens: dict) -> dict:
    status, _, body = via.call("POST", "/token", {"grant_type": "refresh_token", "client_id": cid,
                                                  "refresh_token": tokens["refresh_token"]})
    assert status == 200, body
    return json.loads(body)


class As(Http):
    """test_serve's client, sending another bearer token."""

    def __init__(self, port: int, token: str) -> None:
        super().__init__(port)
        self.token = token

    def send(self, method: str, body: Optional[bytes] = None, sid: str = "",
             headers: Optional[Dict[str, str]] = None) -> Events:
        return super().send(method, body, sid, dict({"Authorization": f"Bearer {self.token}"},
                                                    **(headers or {})))


def ping(http_: Http, sid: str) -> int:
    ev = http_.post({"jsonrpc": "2.0", "id": 7, "method": "ping"}, sid)
    status = ev.status
    ev.next()
    return status


def served_through(served: Any, tunnel: Tunnel, *flags: str) -> Served:  # noqa: F811
    srv = served("--serve-public-url", tunnel.public, *flags)
    tunnel.target = srv.http.port
    return srv


# -- 1. OAuth through a tunnel: serve.public_url


def test_through_the_tunnel_the_401_and_the_metadata_name_the_public_url(served, tunnel):  # noqa: F811
    srv = served_through(served, tunnel)
    public, local = tunnel.public, f"http://127.0.0.1:{srv.http.port}"
    status, headers, _ = request(tunnel.port, "GET", "/mcp", host="localhost")
    assert status == 401, headers  # (without the public URL: 421, its Host is not this server)
    assert headers["www-authenticate"] == (
        f'Bearer resource_metadata="{public}/.well-known/oauth-protected-resource/mcp"')
    for path in ("/.well-known/oauth-protected-resource/mcp",
                 "/.well-known/oauth-protected-resource"):
        status, _, body = request(tunnel.port, "GET", path, host="localhost")
        assert json.loads(body) == dict(json.loads(body), resource=f"{public}/mcp",
                                        authorization_servers=[public])
    status, _, body = request(tunnel.port, "GET", "/.well-known/oauth-authorization-server",
                              host="localhost")
    meta = json.loads(body)
    assert meta["issuer"] == public and meta["token_endpoint"] == f"{public}/token"
    assert meta["authorization_endpoint"] == f"{public}/authorize"
    # the redirect's iss is the issuer the client reached
    via = Via(tunnel.port, "localhost")
    cid = client_id(via)  # type: ignore[arg-type]
    status, _, page = authorize(via, cid, pkce()[1], resource=f"{public}/mcp")  # type: ignore
    assert status == 200 and public in page
    # (the approval form, posted by the browser from the public page: its Origin is allowed)
    status, headers, _ = via.call("POST", "/authorize", {
        "ticket": ticket_of(page), "token": TOKEN, "decision": "allow"}, {"Origin": public})
    assert status == 302 and redirected(headers)["iss"] == public
    # a local client is answered in the local address's name, as before
    status, headers, _ = request(srv.http.port, "GET", "/mcp")
    assert f'resource_metadata="{local}/.well-known' in headers["www-authenticate"]
    status, _, body = request(srv.http.port, "GET", "/.well-known/oauth-authorization-server")
    assert json.loads(body)["issuer"] == local
    # a proxy that rewrites Host to the bound address but says it forwarded: the public name
    status, headers, _ = request(srv.http.port, "GET", "/mcp",
                                 headers={"X-Forwarded-For": "203.0.113.9"})
    assert f'resource_metadata="{public}/.well-known' in headers["www-authenticate"]


def test_the_public_url_is_allowed_as_origin_and_host_and_check_prints_it(served, tunnel):  # noqa: F811,E501
    srv = served_through(served, tunnel)
    assert request(srv.http.port, "GET", "/mcp", headers={
        "Origin": tunnel.public, "Authorization": f"Bearer {TOKEN}"})[0] != 403
    status, _, _ = request(tunnel.port, "POST", "/mcp", json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode(),
        {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}, "localhost")
    assert status == 400  # (through the guard: no session id, the transport's own answer)
    assert request(tunnel.port, "GET", "/mcp", host="localhost", headers={
        "Origin": "https://evil.example"})[0] == 403


def test_the_official_sdk_logs_in_through_the_tunnel_and_keeps_its_session(served, tunnel):  # noqa: F811,E501
    """The SDK's OAuth client against the public URL only: the 401, both metadata documents,
    registration, the approval page, the code and the refresh all go through the tunnel; its
    session (opened before the refresh) takes the refreshed token. And the local address still
    logs a client in, by either loopback name (each answered in the name it used)."""
    if not VENV_PY.exists():
        pytest.skip("the realservers venv is not installed (tests/realservers/install.sh)")
    srv = served_through(served, tunnel)
    port = srv.http.port
    for base in (tunnel.public, f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
        done = subprocess.run([str(VENV_PY), str(SDK_LOGIN), base, TOKEN, "mcp"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report == dict(report, first=200, second=200, refreshed=True, iss=base), report


@pytest.mark.parametrize("given, says", [
    ("https://tunnel.example.net/abstract", "--serve-public-url needs the public origin of the "
                                            "tunnel or proxy, such as https://tunnel.example.net "
                                            "(https://host[:port]; no path, query or fragment), "
                                            "not 'https://tunnel.example.net/abstract'"),
    ("https://tunnel.example.net?x=1", "no path, query or fragment"),
    ("tunnel.example.net", "needs the public origin"),
    ("http://tunnel.example.net", "--serve-public-url http://tunnel.example.net: a public URL "
                                  "must be https (http only on a loopback host such as "
                                  "localhost): OAuth's codes and tokens go through it"),
])
def test_a_public_url_that_is_not_an_https_origin_stops_start_up(tmp_path, given, says):
    from test_serve_guard import _main, _world_env

    code, _, err = _main(["--check", "--serve", "8931", "--serve-public-url", given,
                          str(tmp_path / "store")], _world_env(tmp_path))
    assert code == 2 and says in err, err


def test_check_prints_the_public_url_and_the_setting_works_too(tmp_path):
    from test_serve_guard import _main, _world_env

    env = _world_env(tmp_path, {"serve": {"public_url": "https://Tunnel.Example.net/"}})
    code, out, err = _main(["--check", "--serve", "8931", str(tmp_path / "store")], env)
    assert code == 0, err
    assert ("serve: public URL (a tunnel or reverse proxy): https://tunnel.example.net/mcp; "
            "OAuth names itself by it to clients that come through it\n") in out
    code, out, _ = _main(["--check", "--serve", "8931", str(tmp_path / "store")],
                         _world_env(tmp_path))
    assert "serve: public URL (a tunnel or reverse proxy): none\n" in out
    env = _world_env(tmp_path, {"serve": {"public_url": "https://x.example/path"}})
    code, _, err = _main(["--check", "--serve", "8931", str(tmp_path / "store")], env)
    assert code == 2 and "key 'serve.public_url' must be an origin such as" in err
    code, _, err = _main(["--check", "--serve-public-url", "https://x.example",
                          str(tmp_path / "store")], _world_env(tmp_path))
    assert code == 2 and "--serve-public-url is an option of --serve" in err


# -- 2. CORS on /mcp


def test_a_preflight_from_an_allowed_origin_is_answered_and_a_foreign_one_refused(served):  # noqa: F811,E501
    port = served("--serve-origin", WEB).http.port
    ask = {"Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization, content-type, mcp-session-id"}
    for origin in (WEB, f"http://127.0.0.1:{port}"):  # an allowed one, and its own
        status, headers, body = request(port, "OPTIONS", "/mcp", headers=dict(ask, Origin=origin))
        assert status == 204 and body == b"", (status, body)
        assert headers["access-control-allow-origin"] == origin
        assert headers["vary"] == "Origin"
        assert headers["access-control-allow-methods"] == "GET, POST, DELETE"
        assert headers["access-control-allow-headers"] == (
            "Authorization, Content-Type, Accept, Mcp-Session-Id, MCP-Protocol-Version, "
            "Last-Event-ID, Mcp-Method, Mcp-Name")
        assert int(headers["access-control-max-age"]) > 0
        assert "access-control-allow-credentials" not in headers
    status, headers, _ = request(port, "OPTIONS", "/mcp",
                                 headers=dict(ask, Origin="https://evil.example"))
    assert status == 403 and "access-control-allow-origin" not in headers


def test_answers_to_an_allowed_origin_carry_cors_headers_json_sse_and_401(served):  # noqa: F811
    srv = served("--serve-origin", WEB)
    http_ = srv.http
    init = http_.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "web", "version": "0"}}}, Origin=WEB)
    assert init.status == 200
    assert init.headers["access-control-allow-origin"] == WEB
    assert init.headers["access-control-expose-headers"] == (
        "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate")
    sid = init.headers["mcp-session-id"]
    init.next()
    ev = http_.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "up__progress", "arguments": {"steps": 2}, "_meta": {"progressToken": 1}}},
        sid, Origin=WEB)
    assert ev.headers["content-type"].startswith("text/event-stream")
    assert ev.headers["access-control-allow-origin"] == WEB
    assert "result" in ev.until_answer()[1]
    status, headers, _ = request(http_.port, "POST", "/mcp", b"{}", {"Origin": WEB})
    assert status == 401 and headers["access-control-allow-origin"] == WEB
    assert "WWW-Authenticate" in headers["access-control-expose-headers"]
    # without an Origin (not a browser), no CORS headers
    assert "access-control-allow-origin" not in request(http_.port, "POST", "/mcp", b"{}")[1]


# -- 3. sessions bound to the credential that opened them


def test_a_session_is_its_openers_another_credential_gets_404_a_refresh_keeps_it(served):  # noqa: F811,E501
    srv = served()
    port, via = srv.http.port, Via(srv.http.port)
    a_id, a = oauth_login(via)
    _, b = oauth_login(via)
    mine = Session(As(port, a["access_token"]), get_stream=False)
    assert mine.request("ping")["result"] == {}
    for other in (TOKEN, b["access_token"]):  # the server's token, another client's
        ev = As(port, other).post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, mine.sid)
        assert ev.status == 404
        assert ev.next()["error"]["message"].startswith("Session not found")
        assert As(port, other).send("DELETE", sid=mine.sid).status == 404
    fresh = refresh(via, a_id, a)
    assert ping(As(port, fresh["access_token"]), mine.sid) == 200  # the same approval
    assert ping(As(port, a["access_token"]), mine.sid) == 200  # (still live)
    # a session opened with the server's token is refused to an OAuth client
    static = Session(As(port, TOKEN), get_stream=False)
    assert ping(As(port, fresh["access_token"]), static.sid) == 404
    assert ping(As(port, TOKEN), static.sid) == 200


def test_an_old_sse_session_is_its_openers_too(served):  # noqa: F811
    """The 2024-11-05 transport's session (GET /sse) is bound as /mcp's are: a POST to its
    /messages URL with another credential gets the 404 an unknown session gets."""
    from test_serve_streams import Raw

    srv = served()
    port, via = srv.http.port, Via(srv.http.port)
    _, a = oauth_login(via)
    mine = {"Authorization": f"Bearer {a['access_token']}"}
    sse = Raw(port, "GET", "/sse", headers=mine)
    _, kind, endpoint = sse.event()  # type: ignore[misc]
    url = endpoint["text"]
    ping_ = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert Raw(port, "POST", url, body=ping_).status == 404  # the server's token
    assert Raw(port, "POST", url, body=ping_, headers=mine).status == 202
    assert sse.message()["id"] == 1
    sse.close()


# -- 4. registrations: never approved ones in memory only, and a bounded pace


@pytest.fixture
def auth(tmp_path: Path) -> Iterator[Tuple[AuthServed, Clock]]:
    clock = Clock()
    s = AuthServed(tmp_path / "auth", clock)
    yield s, clock
    s.close()


def _state(srv: AuthServed) -> Tuple[int, int, int]:
    st = next(srv.folder.glob("authserver-*.json")).stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


def test_a_flood_of_registrations_writes_nothing_and_only_approved_clients_survive_a_restart(
        auth: Tuple[AuthServed, Clock]) -> None:
    srv, _ = auth
    approved, _ = login(srv)  # type: ignore[arg-type]
    before = _state(srv)
    waiting = [client_id(srv) for _ in range(50)]  # type: ignore[arg-type]
    assert _state(srv) == before  # (each of them rewrote the whole file before)
    status, _, page = authorize(srv, waiting[-1], pkce()[1])  # type: ignore[arg-type]
    assert status == 200  # known to this server meanwhile
    srv.http.auth = srv.auth = srv.make()  # type: ignore[attr-defined]  (a restart)
    assert authorize(srv, approved, pkce()[1])[0] == 200  # type: ignore[arg-type]
    status, _, page = authorize(srv, waiting[0], pkce()[1])  # type: ignore[arg-type]
    assert status == 400 and "must register again" in page
    # approved once (the code not even exchanged yet): written, and kept across a restart
    cid = client_id(srv)  # type: ignore[arg-type]
    _, _, page = authorize(srv, cid, pkce()[1])  # type: ignore[arg-type]
    assert approve(srv, ticket_of(page))[0] == 302  # type: ignore[arg-type]
    srv.http.auth = srv.auth = srv.make()  # type: ignore[attr-defined]
    assert authorize(srv, cid, pkce()[1])[0] == 200  # type: ignore[arg-type]


def test_registrations_are_paced_429_with_retry_after(auth: Tuple[AuthServed, Clock]) -> None:
    srv, clock = auth
    body = json.dumps({"redirect_uris": [REDIRECT]}).encode()
    for _ in range(abstract._AS_REGISTER_MAX):
        assert srv.call("POST", "/register", body)[0] == 201
    status, headers, data = srv.call("POST", "/register", body)
    assert status == 429 and headers["retry-after"] == "60"
    assert json.loads(data) == {"error": "temporarily_unavailable", "error_description":
                                "too many registrations: at most 60 in 60 s; try again in 60 s"}
    clock.now += 30
    assert srv.call("POST", "/register", body)[1]["retry-after"] == "30"
    clock.now += 30
    assert srv.call("POST", "/register", body)[0] == 201
    assert not list(srv.folder.glob("authserver-*.json"))  # none approved: no file at all


def test_the_memory_of_unapproved_clients_is_bounded(auth: Tuple[AuthServed, Clock],
                                                    monkeypatch: Any) -> None:
    srv, _ = auth
    monkeypatch.setattr(abstract, "_AS_CLIENTS_MAX", 3)
    ids = [client_id(srv) for _ in range(4)]  # type: ignore[arg-type]
    assert authorize(srv, ids[0], pkce()[1])[0] == 400  # type: ignore[arg-type]
    assert authorize(srv, ids[1], pkce()[1])[0] == 200  # type: ignore[arg-type]
    assert len(srv.auth._fresh._clients) == 3


def test_without_the_public_url_the_tunnel_is_misdirected(served, tunnel):  # noqa: F811
    """Why the setting: a tunnel that passes its public Host on is not this server's name."""
    tunnel.target = served().http.port
    status, _, body = request(tunnel.port, "GET", "/mcp", host="localhost")
    assert status == 421 and b"Misdirected Request" in body


# -- 5. which session an upstream's question goes to


def test_a_tasks_question_goes_to_the_session_of_that_task_not_the_last_call(world):
    """A stdio upstream's question names no call, except a 2025-11-25 task's, which names its
    task (_meta io.modelcontextprotocol/related-task): it goes to the session whose call became
    that task, though another session's call was sent to the same upstream after it (which the
    rule for questions that name nothing would pick)."""
    world.fake("up", "--tasks")
    flag = world.tmp / "ask-now"
    srv = Served(world)
    try:
        a = Session(srv.http, {"elicitation": {}})
        b = Session(srv.http, {"elicitation": {}})
        mid, job = b.call("up__job", ask=ELICIT, ask_when=str(flag))
        wait_for(lambda: world.events("up", "tasks/result"), LONG, "b's task waiting upstream")
        _, slow = a.call("up__slow", seconds=30, text="a")  # the last call sent
        wait_for(lambda: any(e.get("tool") == "slow" for e in world.events("up", "call")), LONG,
                 "a's call upstream")
        flag.write_text("")
        asked = job.next(LONG)
        assert asked["method"] == "elicitation/create" and asked["params"]["message"] == (
            "your name?")
        assert b.answer(asked["id"], {"action": "accept", "content": {"name": "Bo"}}) == 202
        _, answer = job.until_answer()
        assert answer["id"] == mid and "Bo" in json.dumps(answer["result"])
        assert slow.q.empty()  # (a's call was asked nothing)
    finally:
        srv.stop()


def test_a_question_is_not_guessed_between_two_users_sessions(world):
    """With calls of sessions opened by different credentials in flight at one upstream, a
    question that names no call is refused to the upstream (-32601), not sent to the session
    whose call came last (a wrong guess asks one user another's question); roots/list gets the
    allowed folders. With one credential's sessions it is still guessed (test_serve_clients)."""
    world.fake("up", "--extras")
    srv = Served(world)
    try:
        port = srv.http.port
        _, a_tokens = oauth_login(Via(port))
        a = Session(As(port, a_tokens["access_token"]), {"elicitation": {}})
        b = Session(srv.http, {"elicitation": {}})  # the server's token
        b_mid, b_stream = b.call("up__record_cancel")
        wait_for(lambda: world.events("up", "started"), LONG, "B's call at the upstream")
        _, a_stream = a.call("up__ask_client", method="elicitation/create", params=ELICIT)
        _, answer = a_stream.until_answer()
        text = json.dumps(answer["result"])
        assert "several users" in text and "no one is asked" in text, text
        assert b.notify("notifications/cancelled", {"requestId": b_mid}) == 202
        assert b_stream.next(LONG) is None  # B was asked nothing
    finally:
        srv.stop()


def test_a_local_client_is_answered_in_the_loopback_name_it_used(served):  # noqa: F811
    """An OAuth client checks that the resource and issuer are the address it connected to:
    one that connects to localhost (or [::1]) is named so, not 127.0.0.1 (the SDK refused it:
    'Protected resource http://127.0.0.1:<port>/mcp does not match expected
    http://localhost:<port>/mcp')."""
    port = served().http.port
    for name in ("localhost", "127.0.0.1"):
        base = f"http://{name}:{port}"
        status, headers, _ = request(port, "GET", "/mcp", host=name)
        assert status == 401 and headers["www-authenticate"] == (
            f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"')
        _, _, body = request(port, "GET", "/.well-known/oauth-protected-resource/mcp", host=name)
        assert json.loads(body)["resource"] == f"{base}/mcp"
        _, _, body = request(port, "GET", "/.well-known/oauth-authorization-server", host=name)
        assert json.loads(body)["issuer"] == base
    # an IPv6 loopback name, sent as Host (the server listens on 127.0.0.1 only)
    _, headers, _ = request(port, "GET", "/mcp", headers={"Host": f"[::1]:{port}"})
    assert f'resource_metadata="http://[::1]:{port}/.well-known' in headers["www-authenticate"]
    # the resource (RFC 8707) may name the server by another of its names: one server
    via = Via(port, "localhost")
    cid = client_id(via)  # type: ignore[arg-type]
    status, _, page = authorize(via, cid, pkce()[1],  # type: ignore[arg-type]
                                resource=f"http://127.0.0.1:{port}/mcp")
    assert status == 200, page
