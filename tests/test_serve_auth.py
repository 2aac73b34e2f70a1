"""The authorization server for web connectors (issue 28, item 3): _AuthServer driven over real
HTTP, through a stdlib server in the test that hands every request to `respond`, the way the
--serve endpoint does; and the official Python SDK's OAuth client against it, headless."""

from __future__ import annotations

import base64
import hashlib
import http.client
import http.server
import json
import logging
import os
import re
import stat
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import pytest

import abstract

TOKEN = "the-server-token-" + "x" * 32
REDIRECT = "http://127.0.0.1:33418/callback"
VENV_PY = Path.home() / ".cache" / "abstract-realservers" / "venv" / "bin" / "python"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class _Handler(http.server.BaseHTTPRequestHandler):
    def _any(self) -> None:
        u = urllib.parse.urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        auth = self.server.auth  # type: ignore[attr-defined]
        if not auth.handles(u.path):  # the /mcp endpoint's stand-in: a bearer token or 401
            got = self.headers.get("Authorization", "")[7:]
            ok = auth.verify(got)
            status, headers, data = (200, {"Content-Type": "application/json"}, b"{}") if ok \
                else (401, {"WWW-Authenticate": f'Bearer resource_metadata="{auth.issuer}'
                                                f'/.well-known/oauth-protected-resource/mcp"'},
                      b"")
        else:
            status, headers, data = auth.respond(self.command, u.path, u.query,
                                                 dict(self.headers), body)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = _any

    def log_message(self, *args: Any) -> None:
        pass


def call(host: str, port: int, method: str, path: str, body: Any = None,
         headers: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, str], bytes]:
    """One request to `host`:`port` (a dict body sent as a form): status, headers, body."""
    if isinstance(body, dict):
        body = urllib.parse.urlencode(body).encode()
        headers = dict(headers or {}, **{"Content-Type": "application/x-www-form-urlencoded"})
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


class Served:
    """An _AuthServer behind a real HTTP server on 127.0.0.1."""

    def __init__(self, folder: Path, clock: Clock) -> None:
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.base = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.folder, self.clock = folder, clock
        self.http.auth = self.auth = self.make()  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def make(self) -> abstract._AuthServer:
        return abstract._AuthServer(str(self.folder), self.base, self.base + "/mcp",
                                    lambda t: t == TOKEN, clock=self.clock)

    def call(self, method: str, path: str, body: Any = None,
             headers: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, str], bytes]:
        return call("127.0.0.1", self.http.server_address[1], method, path, body, headers)

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(30)
        self.auth.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def srv(tmp_path: Path, clock: Clock) -> Iterator[Served]:
    s = Served(tmp_path / "auth", clock)
    yield s
    s.close()


def pkce() -> Tuple[str, str]:
    verifier = base64.urlsafe_b64encode(os.urandom(40)).decode().rstrip("=")
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


def register(srv: Served, uris: Any = (REDIRECT,), **meta: Any) -> Tuple[int, dict]:
    body = json.dumps(dict({"redirect_uris": list(uris), "client_name": "Test <b>App</b>"},
                           **meta)).encode()
    status, _, data = srv.call("POST", "/register", body, {"Content-Type": "application/json"})
    return status, json.loads(data)


def client_id(srv: Served, uris: Any = (REDIRECT,)) -> str:
    status, doc = register(srv, uris)
    assert status == 201, doc
    return doc["client_id"]


def authorize(srv: Served, cid: str, challenge: Optional[str], redirect: str = REDIRECT,
              **extra: str) -> Tuple[int, Dict[str, str], str]:
    q = {"response_type": "code", "client_id": cid, "redirect_uri": redirect,
         "state": "st-123", **extra}
    if challenge is not None:
        q.update(code_challenge=challenge, code_challenge_method="S256")
        q.update(extra)
    status, headers, body = srv.call("GET", "/authorize?" + urllib.parse.urlencode(q))
    return status, headers, body.decode()


def ticket_of(page: str) -> str:
    return re.search(r'name="ticket" value="([^"]+)"', page).group(1)  # type: ignore


def approve(srv: Served, ticket: str, token: str = TOKEN, decision: str = "allow"
            ) -> Tuple[int, Dict[str, str], str]:
    status, headers, body = srv.call("POST", "/authorize", {"ticket": ticket, "token": token,
                                                            "decision": decision})
    return status, headers, body.decode()


def redirected(headers: Dict[str, str]) -> Dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(headers["location"]).query))


def code_for(srv: Served, cid: str, challenge: str, redirect: str = REDIRECT) -> str:
    status, _, page = authorize(srv, cid, challenge, redirect)
    assert status == 200, page
    status, headers, _ = approve(srv, ticket_of(page))
    assert status == 302
    return redirected(headers)["code"]


def token(srv: Served, form: Dict[str, str]) -> Tuple[int, dict, Dict[str, str]]:
    status, headers, body = srv.call("POST", "/token", form)
    return status, json.loads(body), headers


def login(srv: Served) -> Tuple[str, dict]:
    cid = client_id(srv)
    verifier, challenge = pkce()
    code = code_for(srv, cid, challenge)
    status, doc, _ = token(srv, {"grant_type": "authorization_code", "code": code,
                                 "client_id": cid, "redirect_uri": REDIRECT,
                                 "code_verifier": verifier})
    assert status == 200, doc
    return cid, doc


# -- metadata


def test_metadata_is_served_and_passes_abstracts_own_client_checks(srv: Served) -> None:
    for path in ("/.well-known/oauth-protected-resource",
                 "/.well-known/oauth-protected-resource/mcp"):
        status, _, body = srv.call("GET", path)
        assert status == 200
        prm = json.loads(body)
        assert prm["resource"] == srv.base + "/mcp"
        assert prm["authorization_servers"] == [srv.base]
        assert prm["bearer_methods_supported"] == ["header"]
        assert abstract._check_prm(prm, srv.base + "/mcp", "t") == (srv.base + "/mcp", srv.base)
    for path in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
        status, _, body = srv.call("GET", path)
        meta = json.loads(body)
        assert status == 200 and abstract._check_as_metadata(meta, srv.base, "t") == meta
        assert meta["code_challenge_methods_supported"] == ["S256"]
        assert meta["token_endpoint_auth_methods_supported"] == ["none"]
        assert meta["grant_types_supported"] == ["authorization_code", "refresh_token"]
        assert meta["registration_endpoint"] == srv.base + "/register"
        assert meta["revocation_endpoint"] == srv.base + "/revoke"
    assert srv.auth.handles("/token") and not srv.auth.handles("/mcp")
    assert srv.call("POST", "/.well-known/oauth-authorization-server", b"")[0] == 405


# -- registration


def test_registration_takes_https_and_loopback_redirects_as_a_public_client(srv: Served) -> None:
    uris = ["https://claude.ai/api/mcp/auth_callback", "http://127.0.0.1/cb",
            "http://[::1]:8080/cb", "http://localhost:9/cb"]
    status, doc = register(srv, uris, token_endpoint_auth_method="client_secret_post")
    assert status == 201, doc
    assert doc["redirect_uris"] == uris and doc["token_endpoint_auth_method"] == "none"
    assert "client_secret" not in doc and doc["client_id"]
    assert doc["grant_types"] == ["authorization_code", "refresh_token"]


@pytest.mark.parametrize("uris, error", [
    (["http://example.com/cb"], "invalid_redirect_uri"),
    (["https://example.com/cb#frag"], "invalid_redirect_uri"),
    (["https://user:pw@example.com/cb"], "invalid_redirect_uri"),
    (["javascript:alert(1)"], "invalid_redirect_uri"),
    (["https://example.com/a b"], "invalid_redirect_uri"),
    (["https://example.com/" + "a" * 600], "invalid_redirect_uri"),
    ([], "invalid_redirect_uri"),
    ("https://example.com/cb", "invalid_redirect_uri"),
    ([f"https://e.com/{i}" for i in range(6)], "invalid_redirect_uri"),
    ([1], "invalid_redirect_uri"),
])
def test_registration_refuses_bad_redirect_uris(srv: Served, uris: Any, error: str) -> None:
    body = json.dumps({"redirect_uris": uris}).encode()
    status, headers, data = srv.call("POST", "/register", body)
    assert status == 400 and json.loads(data)["error"] == error
    assert headers["content-type"] == "application/json"


def test_registration_refuses_bad_metadata(srv: Served) -> None:
    for body in (b"not json", b"[1]", b"\xff\xfe"):
        status, _, data = srv.call("POST", "/register", body)
        assert status == 400 and json.loads(data)["error"] == "invalid_client_metadata"
    status, doc = register(srv, grant_types=["password"])
    assert status == 400 and doc["error"] == "invalid_client_metadata"
    status, doc = register(srv, grant_types={"a": 1})
    assert status == 400 and doc["error"] == "invalid_client_metadata"
    status, doc = register(srv, response_types=["token"])
    assert status == 400 and doc["error"] == "invalid_client_metadata"
    assert srv.call("GET", "/register")[0] == 405


# -- the approval page and the code


def test_the_whole_flow_wrong_token_refused_right_token_gives_code_state_and_iss(
        srv: Served) -> None:
    cid = client_id(srv)
    verifier, challenge = pkce()
    status, headers, page = authorize(srv, cid, challenge)
    assert status == 200
    assert "Test &lt;b&gt;App&lt;/b&gt;" in page and "<b>App</b>" not in page
    assert headers["x-frame-options"] == "DENY"
    assert "default-src 'none'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "http" not in page.split("<body>")[1].replace(srv.base, "").replace(
        "http://127.0.0.1:33418", "")  # no external resources, no other address
    ticket = ticket_of(page)
    status, headers, again = approve(srv, ticket, token="wrong")
    assert status == 403 and "location" not in headers
    assert "not this server&#x27;s token" in again and ticket_of(again) == ticket
    status, headers, _ = approve(srv, ticket)
    assert status == 302
    assert headers["location"].startswith(REDIRECT + "?")
    got = redirected(headers)
    assert got["state"] == "st-123" and got["iss"] == srv.base and got["code"]
    assert approve(srv, ticket)[0] == 400  # the ticket is used up
    status, doc, headers = token(srv, {"grant_type": "authorization_code", "code": got["code"],
                                       "client_id": cid, "redirect_uri": REDIRECT,
                                       "code_verifier": verifier})
    assert status == 200, doc
    assert headers["cache-control"] == "no-store"
    assert doc["token_type"] == "Bearer" and doc["expires_in"] == 3600
    assert srv.auth.verify(doc["access_token"])
    assert not srv.auth.verify(doc["refresh_token"]) and not srv.auth.verify("nope")
    assert not srv.auth.verify("") and not srv.auth.verify(doc["access_token"] + "x")


def test_deny_redirects_with_access_denied(srv: Served) -> None:
    cid = client_id(srv)
    _, _, page = authorize(srv, cid, pkce()[1])
    status, headers, _ = approve(srv, ticket_of(page), decision="deny")
    assert status == 302 and redirected(headers)["error"] == "access_denied"
    assert "code" not in redirected(headers)


def test_wrong_verifier_is_refused(srv: Served) -> None:
    cid = client_id(srv)
    _, challenge = pkce()
    code = code_for(srv, cid, challenge)
    status, doc, _ = token(srv, {"grant_type": "authorization_code", "code": code,
                                 "client_id": cid, "redirect_uri": REDIRECT,
                                 "code_verifier": pkce()[0]})
    assert status == 400 and doc["error"] == "invalid_grant"
    assert "code_verifier" in doc["error_description"]


def test_plain_or_missing_pkce_is_refused_back_to_the_client(srv: Served) -> None:
    cid = client_id(srv)
    verifier, _ = pkce()
    for extra in ({"code_challenge": verifier, "code_challenge_method": "plain"},
                  {"code_challenge": verifier}, {}):
        status, headers, _ = authorize(srv, cid, None, **extra)
        assert status == 302, extra
        got = redirected(headers)
        assert got["error"] == "invalid_request" and "code" not in got
        assert got["state"] == "st-123" and got["iss"] == srv.base
    status, headers, _ = authorize(srv, cid, "short", code_challenge_method="S256")
    assert status == 302 and redirected(headers)["error"] == "invalid_request"


def test_unregistered_redirect_or_unknown_client_is_shown_not_followed(srv: Served) -> None:
    cid = client_id(srv)
    for c, uri in ((cid, "https://evil.example/cb"), (cid, "http://127.0.0.1:33418/other"),
                   ("unknown", REDIRECT)):
        status, headers, page = authorize(srv, c, None, redirect=uri)
        assert status == 400 and "location" not in headers
        assert "Authorization refused" in page and "evil" not in page


def test_loopback_redirect_takes_any_port(srv: Served) -> None:
    cid = client_id(srv, ("http://127.0.0.1/cb",))
    verifier, challenge = pkce()
    code = code_for(srv, cid, challenge, "http://127.0.0.1:5555/cb")
    status, doc, _ = token(srv, {"grant_type": "authorization_code", "code": code,
                                 "client_id": cid, "redirect_uri": "http://127.0.0.1:5555/cb",
                                 "code_verifier": verifier})
    assert status == 200, doc


def test_resource_must_be_this_servers(srv: Served) -> None:
    cid = client_id(srv)
    _, challenge = pkce()
    status, headers, _ = authorize(srv, cid, challenge, resource="https://other.example/mcp")
    assert status == 302 and redirected(headers)["error"] == "invalid_target"
    status, _, _ = authorize(srv, cid, challenge, resource=srv.base + "/mcp/")
    assert status == 200


def test_code_is_single_use_and_reuse_revokes_its_tokens(srv: Served) -> None:
    cid = client_id(srv)
    verifier, challenge = pkce()
    code = code_for(srv, cid, challenge)
    form = {"grant_type": "authorization_code", "code": code, "client_id": cid,
            "redirect_uri": REDIRECT, "code_verifier": verifier}
    status, doc, _ = token(srv, form)
    assert status == 200 and srv.auth.verify(doc["access_token"])
    status, again, _ = token(srv, form)
    assert status == 400 and again["error"] == "invalid_grant"
    assert not srv.auth.verify(doc["access_token"])
    status, refreshed, _ = token(srv, {"grant_type": "refresh_token", "client_id": cid,
                                       "refresh_token": doc["refresh_token"]})
    assert status == 400 and refreshed["error"] == "invalid_grant"


def test_code_expires_after_60_s_and_must_match_client_and_redirect(
        srv: Served, clock: Clock) -> None:
    cid, other = client_id(srv), client_id(srv)
    verifier, challenge = pkce()
    code = code_for(srv, cid, challenge)
    form = {"grant_type": "authorization_code", "code": code, "client_id": other,
            "redirect_uri": REDIRECT, "code_verifier": verifier}
    assert token(srv, form)[1]["error"] == "invalid_grant"
    form.update(client_id=cid, redirect_uri="http://127.0.0.1:33418/callback2")
    assert token(srv, form)[1]["error"] == "invalid_grant"
    clock.now += 61
    form.update(redirect_uri=REDIRECT)
    status, doc, _ = token(srv, form)
    assert status == 400 and "expired" in doc["error_description"]


def test_token_endpoint_errors(srv: Served) -> None:
    assert token(srv, {"grant_type": "password"})[1]["error"] == "unsupported_grant_type"
    assert token(srv, {})[1]["error"] == "invalid_request"
    assert token(srv, {"grant_type": "authorization_code"})[1]["error"] == "invalid_request"
    status, doc, _ = token(srv, {"grant_type": "authorization_code", "code": "c",
                                 "client_id": "nobody", "redirect_uri": REDIRECT,
                                 "code_verifier": "v" * 43})
    assert status == 401 and doc["error"] == "invalid_client"
    status, _, body = srv.call("POST", "/token", b"grant_type=a&grant_type=b")
    assert status == 400 and json.loads(body)["error"] == "invalid_request"
    assert srv.call("GET", "/token")[0] == 405


# -- refresh, verify, revoke


def test_refresh_rotates_and_reuse_of_an_old_one_revokes_the_family(srv: Served) -> None:
    cid, first = login(srv)
    status, second, _ = token(srv, {"grant_type": "refresh_token", "client_id": cid,
                                    "refresh_token": first["refresh_token"]})
    assert status == 200 and second["refresh_token"] != first["refresh_token"]
    assert srv.auth.verify(second["access_token"])
    status, doc, _ = token(srv, {"grant_type": "refresh_token", "client_id": cid,
                                 "refresh_token": first["refresh_token"]})
    assert status == 400 and doc["error"] == "invalid_grant"
    assert "revoked" in doc["error_description"]
    assert not srv.auth.verify(second["access_token"])
    assert not srv.auth.verify(first["access_token"])
    status, doc, _ = token(srv, {"grant_type": "refresh_token", "client_id": cid,
                                 "refresh_token": second["refresh_token"]})
    assert status == 400 and doc["error"] == "invalid_grant"


def test_verify_checks_expiry(srv: Served, clock: Clock) -> None:
    cid, doc = login(srv)
    clock.now += 3599
    assert srv.auth.verify(doc["access_token"])
    clock.now += 2
    assert not srv.auth.verify(doc["access_token"])
    status, fresh, _ = token(srv, {"grant_type": "refresh_token", "client_id": cid,
                                   "refresh_token": doc["refresh_token"]})
    assert status == 200 and srv.auth.verify(fresh["access_token"])
    clock.now += 31 * 86400
    status, late, _ = token(srv, {"grant_type": "refresh_token", "client_id": cid,
                                  "refresh_token": fresh["refresh_token"]})
    assert status == 400 and late["error"] == "invalid_grant"


def test_revoke(srv: Served) -> None:
    cid, doc = login(srv)
    assert srv.call("POST", "/revoke", {"token": doc["access_token"]})[0] == 200
    assert not srv.auth.verify(doc["access_token"])
    status, fresh, _ = token(srv, {"grant_type": "refresh_token", "client_id": cid,
                                   "refresh_token": doc["refresh_token"]})
    assert status == 200
    assert srv.call("POST", "/revoke", {"token": fresh["refresh_token"]})[0] == 200
    assert not srv.auth.verify(fresh["access_token"])
    assert srv.call("POST", "/revoke", {"token": "unknown"})[0] == 200
    assert srv.call("POST", "/revoke", {})[0] == 400


# -- storage


def test_a_new_server_on_the_folder_keeps_clients_and_tokens_hashed_0600(
        srv: Served, clock: Clock) -> None:
    cid, doc = login(srv)
    files = list(srv.folder.glob("authserver-*.json"))
    assert len(files) == 1
    text = files[0].read_text()
    assert doc["access_token"] not in text and doc["refresh_token"] not in text
    assert hashlib.sha256(doc["access_token"].encode()).hexdigest() in text
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(srv.folder.stat().st_mode) == 0o700
    srv.http.auth = srv.auth = srv.make()  # type: ignore[attr-defined]
    assert srv.auth.verify(doc["access_token"])
    status, fresh, _ = token(srv, {"grant_type": "refresh_token", "client_id": cid,
                                   "refresh_token": doc["refresh_token"]})
    assert status == 200
    assert authorize(srv, cid, pkce()[1])[0] == 200
    other = srv.make()  # two on one folder: one's tokens are the other's
    assert other.verify(fresh["access_token"])
    assert srv.call("POST", "/revoke", {"token": fresh["refresh_token"]})[0] == 200
    assert not other.verify(fresh["access_token"])  # what one revokes, the other sees


def test_a_damaged_file_is_moved_aside(srv: Served, caplog: pytest.LogCaptureFixture) -> None:
    cid, doc = login(srv)
    path = next(srv.folder.glob("authserver-*.json"))
    state = json.loads(path.read_text())  # an entry of another shape is left out, alone
    state["clients"]["odd"] = {"redirect_uris": [1]}
    state["grants"]["odd"] = dict(next(iter(state["grants"].values())), access={"h": "soon"})
    path.write_text(json.dumps(state))
    srv.http.auth = srv.auth = srv.make()  # type: ignore[attr-defined]
    assert srv.auth.verify(doc["access_token"]) and authorize(srv, "odd", None)[0] == 400
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="abstract"):
        fresh = srv.make()
    assert "damaged" in caplog.text
    assert path.with_name(path.stem + ".damaged.json").read_text() == "{not json"
    srv.http.auth = srv.auth = fresh  # type: ignore[attr-defined]
    login(srv)


# -- bounds


def test_the_approval_page_takes_five_wrong_tokens(srv: Served) -> None:
    cid = client_id(srv)
    _, _, page = authorize(srv, cid, pkce()[1])
    ticket = ticket_of(page)
    for _ in range(4):
        assert approve(srv, ticket, token="wrong")[0] == 403
    status, headers, page = approve(srv, ticket, token="wrong")
    assert status == 403 and "5 wrong tokens" in page and "ticket" not in page
    status, headers, _ = approve(srv, ticket)  # the right one, too late
    assert status == 400 and "location" not in headers


def test_clients_pages_and_bodies_are_bounded(srv: Served, monkeypatch: Any) -> None:
    monkeypatch.setattr(abstract, "_AS_CLIENTS_MAX", 3)
    monkeypatch.setattr(abstract, "_AS_PENDING_MAX", 2)
    ids = [client_id(srv) for _ in range(5)]
    assert authorize(srv, ids[0], pkce()[1])[0] == 400  # dropped
    pages = [ticket_of(authorize(srv, ids[-1], pkce()[1])[2]) for _ in range(3)]
    assert approve(srv, pages[0])[0] == 400  # the oldest open page made room
    assert approve(srv, pages[2])[0] == 302
    status, _, body = srv.call("POST", "/register", b"x" * (64 * 1024 + 1))
    assert status == 413 and json.loads(body)["error"] == "invalid_request"
    status, _, body = srv.call("POST", "/token", "&".join(f"a{i}=1" for i in range(60)).encode())
    assert status == 400
    # (only the approved one is in the file: the others, never approved, are in memory)
    assert len(json.loads(next(srv.folder.glob("authserver-*.json")).read_text())[
        "clients"]) == 1


def test_approvals_and_codes_are_bounded(srv: Served, monkeypatch: Any) -> None:
    monkeypatch.setattr(abstract, "_AS_GRANTS_MAX", 2)
    monkeypatch.setattr(abstract, "_AS_CODES_MAX", 1)
    logins = [login(srv)[1] for _ in range(3)]
    assert [srv.auth.verify(d["access_token"]) for d in logins] == [False, True, True]
    cid = client_id(srv)
    first_verifier, first = pkce()
    code = code_for(srv, cid, first)
    code_for(srv, cid, pkce()[1])  # the second code pushes the first out
    status, doc, _ = token(srv, {"grant_type": "authorization_code", "code": code,
                                 "client_id": cid, "redirect_uri": REDIRECT,
                                 "code_verifier": first_verifier})
    assert status == 400 and doc["error"] == "invalid_grant"


def test_a_flood_of_registrations_does_not_push_out_an_approved_client(
        srv: Served, monkeypatch: Any) -> None:
    monkeypatch.setattr(abstract, "_AS_CLIENTS_MAX", 3)
    cid, doc = login(srv)
    for _ in range(5):
        client_id(srv)
    assert srv.auth.verify(doc["access_token"])
    assert authorize(srv, cid, pkce()[1])[0] == 200


def test_nothing_logs_a_token_or_code(srv: Served, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="abstract"):
        cid, doc = login(srv)
        token(srv, {"grant_type": "refresh_token", "client_id": cid,
                    "refresh_token": doc["refresh_token"]})
        token(srv, {"grant_type": "refresh_token", "client_id": cid,
                    "refresh_token": doc["refresh_token"]})
    assert caplog.text and doc["access_token"] not in caplog.text
    assert doc["refresh_token"] not in caplog.text and TOKEN not in caplog.text


def test_redirect_uri_may_be_left_out_when_one_is_registered(srv: Served) -> None:
    cid = client_id(srv)
    verifier, challenge = pkce()
    q = {"response_type": "code", "client_id": cid, "code_challenge": challenge,
         "code_challenge_method": "S256"}
    status, _, page = srv.call("GET", "/authorize?" + urllib.parse.urlencode(q))
    assert status == 200
    status, headers, _ = approve(srv, ticket_of(page.decode()))
    assert status == 302 and headers["location"].startswith(REDIRECT + "?")
    form = {"grant_type": "authorization_code", "code": redirected(headers)["code"],
            "client_id": cid, "code_verifier": verifier}
    assert token(srv, dict(form, redirect_uri="http://127.0.0.1:1/x"))[1]["error"] == \
        "invalid_grant"  # given, it must match
    status, doc, _ = token(srv, form)
    assert status == 200, doc


def test_state_over_its_bound_is_refused(srv: Served) -> None:
    cid = client_id(srv)
    status, headers, _ = authorize(srv, cid, pkce()[1], state="s" * 1025)
    got = redirected(headers)
    assert status == 302 and got["error"] == "invalid_request" and "state" not in got


def test_cors_for_clients_in_a_browser_but_not_for_the_page(srv: Served) -> None:
    status, headers, _ = srv.call("OPTIONS", "/token", headers={"Origin": "http://x.test"})
    assert status == 204 and headers["access-control-allow-origin"] == "*"
    assert "POST" in headers["access-control-allow-methods"]
    _, headers, _ = srv.call("GET", "/.well-known/oauth-authorization-server")
    assert headers["access-control-allow-origin"] == "*"
    _, headers, _ = authorize(srv, client_id(srv), pkce()[1])
    assert "access-control-allow-origin" not in headers


def test_the_approval_form_from_another_origin_is_refused(srv: Served) -> None:
    _, _, page = authorize(srv, client_id(srv), pkce()[1])
    body = urllib.parse.urlencode({"ticket": ticket_of(page), "token": TOKEN}).encode()
    status, headers, _ = srv.call("POST", "/authorize", body,
                                  {"Origin": "https://evil.example",
                                   "Content-Type": "application/x-www-form-urlencoded"})
    assert status == 403 and "location" not in headers
    status, headers, _ = srv.call("POST", "/authorize", body, {"Origin": srv.base})
    assert status == 302 and redirected(headers)["code"]


def test_a_fault_is_a_500_json_answer_not_a_crash(srv: Served, monkeypatch: Any) -> None:
    def boom(*a: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(abstract, "_as_form", boom)
    status, _, body = srv.call("POST", "/token", {"grant_type": "refresh_token"})
    assert status == 500 and json.loads(body)["error"] == "server_error"
    assert srv.call("GET", "/.well-known/oauth-protected-resource")[0] == 200


def test_abstracts_own_oauth_client_logs_in_to_it_and_refreshes(srv: Served, tmp_path: Path,
                                                                  clock: Clock) -> None:
    store = abstract._TokenStore(str(tmp_path / "client"))
    me = abstract._OAuth("self", srv.base + "/mcp", None, store, environ={}, clock=clock)
    attempt = me._begin({"resource_metadata":
                         srv.base + "/.well-known/oauth-protected-resource/mcp"})
    try:
        path = attempt.url[len(srv.base):]
        status, _, page = srv.call("GET", path)
        assert status == 200 and attempt.url.startswith(srv.base + "/authorize?")
        status, headers, _ = approve(srv, ticket_of(page.decode()))
        assert status == 302
        me._finish(attempt, headers["location"])  # state, iss and the code checked there
    finally:
        attempt.loopback.close()
    bearer = me.headers()["Authorization"][7:]
    assert srv.auth.verify(bearer)
    clock.now += 3600 - 30  # within the client's refresh margin
    with me.lock, store.locked("self"):
        assert me._refresh()
    fresh = me.headers()["Authorization"][7:]
    assert fresh != bearer and srv.auth.verify(fresh)


# -- the official Python SDK's OAuth client


def test_the_official_python_sdk_client_logs_in_headless_and_refreshes(srv: Served) -> None:
    if not VENV_PY.exists():
        pytest.skip("the realservers venv is absent (tests/realservers/install.sh makes it)")
    script = Path(__file__).parent / "realservers" / "sdk_oauth_login.py"
    done = subprocess.run([str(VENV_PY), str(script), srv.base, TOKEN], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["first"] == 200 and got["second"] == 200 and got["refreshed"], got
    assert got["iss"] == srv.base
    assert srv.auth.handles("/register") and got["client"]
