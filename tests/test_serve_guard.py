"""The guard in front of --serve (issue 28, item 2 "Security by default", and item 7's --check):
the address forms, the bearer token (ABSTRACT_SERVE_TOKEN, or a 0600 token file made once and
never overwritten), TLS from certificate and key files, the refusal of an address other machines
reach without TLS and authentication, and _ServeGuard.check's rules: a disallowed Origin gets
403, a Host that is not this server's on loopback 421, a missing or wrong bearer token 401 with
WWW-Authenticate (resource_metadata when OAuth is on).

The rules are tested over real HTTP (and HTTPS with a certificate openssl makes at test time):
a tiny http.server stands in for the /mcp endpoint (engineer CORE's), calling check() first on
every request as it will."""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import http.client
import http.server
import io
import json
import re
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

import abstract
from conftest import WAIT, base_env

TOKEN = "T" * 20 + "-serve-guard-test-token-0123456789"  # 54 characters
META = "http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"


# -- a stand-in /mcp endpoint: check() first, then 200 "served"


class _Endpoint:
    """A ThreadingHTTPServer on 127.0.0.1 (or ::1) whose every request passes guard.check first;
    one that passes gets 200 "served". `tls` wraps it in an ssl.SSLContext."""

    def __init__(self, make_guard, host: str = "127.0.0.1", tls: Optional[ssl.SSLContext] = None):
        endpoint = self
        self.auth = None  # an _AuthServer answering its paths after the guard, as CORE's does

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                reply = endpoint.guard.check(self.command, self.path, self.headers)
                path, _, query = self.path.partition("?")
                if reply is None and endpoint.auth is not None and endpoint.auth.handles(path):
                    reply = endpoint.auth.respond(self.command, path, query, self.headers, body)
                status, headers, body = reply or (200, {"Content-Type": "text/plain"}, b"served")
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = do_OPTIONS = _any

            def log_message(self, *args) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        self.httpd = Server((host, 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.host, self.port = host, self.httpd.server_address[1]
        self.guard = make_guard(self.port)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def request(self, method: str = "POST", path: str = "/mcp", headers: Optional[dict] = None,
                context: Optional[ssl.SSLContext] = None, body: Optional[bytes] = None
                ) -> Tuple[int, Dict[str, str], bytes]:
        """One request with exactly `headers` (Host too: http.client's own is left out)."""
        if context is not None:
            conn = http.client.HTTPSConnection("localhost", self.port, timeout=WAIT,
                                               context=context)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=WAIT)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in (headers or {}).items():
                conn.putheader(name, value)
            if body is None:
                body = b"{}" if method == "POST" else b""
            if body:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(WAIT)


@pytest.fixture
def endpoint():
    made = []

    def make(make_guard=None, host: str = "127.0.0.1", tls=None) -> _Endpoint:
        make_guard = make_guard or (lambda port: abstract._ServeGuard(host, port, TOKEN))
        made.append(_Endpoint(make_guard, host, tls))
        return made[-1]

    yield make
    for e in made:
        e.close()


def _host(e: _Endpoint, name: str = "127.0.0.1") -> str:
    return f"{name}:{e.port}"


def _authed(e: _Endpoint, **extra: str) -> dict:
    return {"Host": _host(e), "Authorization": f"Bearer {TOKEN}", **extra}


def _error(body: bytes) -> str:
    """The message of a refusal's body: a JSON-RPC error response without id."""
    doc = json.loads(body)
    assert doc["jsonrpc"] == "2.0" and "id" not in doc and doc["error"]["code"] == -32600
    return doc["error"]["message"]


# -- Origin (DNS rebinding protection): 403 unless absent, the server's own, or allowed


def test_a_request_without_origin_passes(endpoint):
    e = endpoint()
    assert e.request(headers=_authed(e))[0] == 200


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "[::1]", "LOCALHOST"])
def test_the_servers_own_origin_passes_on_loopback(endpoint, name):
    e = endpoint()
    status, _, body = e.request(headers=_authed(e, Origin=f"http://{name}:{e.port}"))
    assert (status, body) == (200, b"served")


@pytest.mark.parametrize("origin", ["http://evil.example.com", "http://localhost:3000", "null",
                                    "https://127.0.0.1:{port}", "http://127.0.0.1:{port}/x",
                                    "file://", "http://127.0.0.1.evil.example.com:{port}"])
def test_a_disallowed_origin_gets_403_with_a_json_rpc_error_saying_how_to_allow_it(endpoint,
                                                                                   origin):
    e = endpoint()
    origin = origin.format(port=e.port)
    status, headers, body = e.request(headers=_authed(e, Origin=origin))
    assert status == 403 and headers["Content-Type"] == "application/json"
    message = _error(body)
    assert "DNS rebinding" in message and "--serve-origin" in message and "serve.origins" in message


def test_an_origin_from_serve_origin_passes_and_others_still_get_403(endpoint):
    e = endpoint(lambda port: abstract._ServeGuard("127.0.0.1", port, TOKEN,
                                                   ["https://claude.ai", "http://localhost:6274"]))
    for origin in ("https://claude.ai", "https://CLAUDE.ai:443", "http://localhost:6274"):
        assert e.request(headers=_authed(e, Origin=origin))[0] == 200, origin
    assert e.request(headers=_authed(e, Origin="https://claude.ai.evil.example"))[0] == 403
    assert e.request(headers=_authed(e, Origin="http://claude.ai"))[0] == 403  # another scheme


def test_the_origin_is_checked_before_the_token(endpoint):
    """A web page's request gets 403 even without a token (the transport's MUST), not 401."""
    e = endpoint()
    assert e.request(headers={"Host": _host(e), "Origin": "http://evil.example.com"})[0] == 403


# -- Host, on a loopback address: a loopback name with the server's port, else 421


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "[::1]", "127.0.0.2"])
def test_a_loopback_host_with_the_right_port_passes(endpoint, name):
    e = endpoint()
    assert e.request(headers={**_authed(e), "Host": _host(e, name)})[0] == 200


@pytest.mark.parametrize("host", ["evil.example.com:{port}", "evil.example.com", "127.0.0.1:1",
                                  "localhost", "[::1]", "10.0.0.1:{port}", "", "[::1:{port}",
                                  "localhost:{port}:1"])
def test_a_wrong_host_on_loopback_gets_421(endpoint, host):
    e = endpoint()
    status, _, body = e.request(headers={**_authed(e), "Host": host.format(port=e.port)})
    assert status == 421
    message = _error(body)
    assert "Misdirected Request" in message and f"http://127.0.0.1:{e.port}/mcp" in message


def test_a_request_without_host_gets_421_on_loopback(endpoint):
    e = endpoint()
    assert e.request(headers={"Authorization": f"Bearer {TOKEN}"})[0] == 421


def test_the_dns_rebinding_scenario_of_the_conformance_suite(endpoint):
    """Its two requests, without Authorization (authentication off, as the suite needs):
    Host and Origin evil.example.com -> a 4xx; the server's own -> 2xx."""
    e = endpoint(lambda port: abstract._ServeGuard("127.0.0.1", port, ""))
    evil = {"Host": "evil.example.com", "Origin": "http://evil.example.com"}
    assert 400 <= e.request(headers=evil)[0] < 500
    own = {"Host": _host(e, "localhost"), "Origin": f"http://localhost:{e.port}"}
    assert e.request(headers=own)[0] == 200


def test_ipv6_loopback_bind_checks_host_and_origin(endpoint):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        e = endpoint(lambda port: abstract._ServeGuard("::1", port, TOKEN), host="::1")
    except OSError as err:
        pytest.skip(f"cannot bind ::1: {err}")
    assert e.guard.loopback and e.guard.url == f"http://[::1]:{e.port}"
    own = {"Host": f"[::1]:{e.port}", "Authorization": f"Bearer {TOKEN}",
           "Origin": f"http://[::1]:{e.port}"}
    assert e.request(headers=own)[0] == 200
    assert e.request(headers={**own, "Host": f"[::2]:{e.port}"})[0] == 421


def test_an_allowed_origins_host_passes_on_loopback_for_a_tunnel(endpoint):
    """A tunnel or reverse proxy that keeps the public Host: its origin, named, lets it in."""
    e = endpoint(lambda port: abstract._ServeGuard("127.0.0.1", port, TOKEN,
                                                   ["https://tunnel.example.net"]))
    tunnel = {**_authed(e), "Host": "tunnel.example.net",
              "Origin": "https://tunnel.example.net"}
    assert e.request(headers=tunnel)[0] == 200
    assert e.request(headers={**tunnel, "Host": "other.example.net", "Origin": ""})[0] == 403
    assert e.request(headers={**_authed(e), "Host": "other.example.net"})[0] == 421


def test_hosts_are_not_checked_on_an_address_other_machines_reach():
    guard = abstract._ServeGuard("0.0.0.0", 8443, TOKEN, tls=True)
    bearer = f"Bearer {TOKEN}"
    assert guard.check("POST", "/mcp", {"Host": "mcp.example.net:8443",
                                        "Authorization": bearer}) is None
    # its own origin is the name the browser reached it by; another site's is refused
    same = {"Host": "mcp.example.net:8443", "Origin": "https://mcp.example.net:8443",
            "Authorization": bearer}
    assert guard.check("POST", "/mcp", same) is None
    assert guard.check("POST", "/mcp", {**same, "Origin": "https://evil.example.com"})[0] == 403


# -- authentication: 401 with WWW-Authenticate; the token compared in constant time


def test_no_token_gets_401_with_a_bearer_realm(endpoint):
    e = endpoint()
    status, headers, body = e.request(headers={"Host": _host(e)})
    assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="abstract"'
    message = _error(body)
    assert "needs a bearer token" in message and "abstract --serve-token" in message
    assert TOKEN not in body.decode()


@pytest.mark.parametrize("value", [f"Bearer {TOKEN}x", "Bearer wrong", f"Basic {TOKEN}",
                                   f"Bearer {TOKEN[:-1]}", "Bearer " + "é" * 40, TOKEN])
def test_a_wrong_token_gets_401_invalid_token(endpoint, value):
    e = endpoint()
    status, headers, body = e.request(headers={"Host": _host(e),
                                               "Authorization": value.encode("utf-8")})
    assert status == 401
    sent = value.lower().startswith("bearer ")
    assert headers["WWW-Authenticate"] == ('Bearer realm="abstract", error="invalid_token"'
                                           if sent else 'Bearer realm="abstract"')
    assert TOKEN not in body.decode()


@pytest.mark.parametrize("value", [f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER   {TOKEN} "])
def test_the_right_token_passes(endpoint, value):
    e = endpoint()
    assert e.request(headers={"Host": _host(e), "Authorization": value})[0] == 200


def test_the_token_is_compared_with_hmac_compare_digest(monkeypatch):
    seen, real = [], hmac.compare_digest

    def compare(a, b):
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", compare)
    guard = abstract._ServeGuard("127.0.0.1", 8080, TOKEN)
    headers = {"host": "127.0.0.1:8080", "authorization": "Bearer nope"}  # (a dict, any case)
    assert guard.check("POST", "/mcp", headers)[0] == 401
    assert guard.check("POST", "/mcp", {**headers, "authorization": f"Bearer {TOKEN}"}) is None
    assert seen == [(b"nope", TOKEN.encode()), (TOKEN.encode(), TOKEN.encode())]


def test_with_oauth_401_names_the_resource_metadata_and_access_tokens_are_verified(endpoint):
    issued = "access-token-issued-by-the-authorization-server"
    asked = []

    def verify(token: str) -> bool:
        asked.append(token)
        return token == issued

    e = endpoint(lambda port: abstract._ServeGuard("127.0.0.1", port, TOKEN, verify=verify,
                                                   resource_metadata=META.format(port=port)))
    status, headers, body = e.request(headers={"Host": _host(e)})
    assert status == 401
    assert headers["WWW-Authenticate"] == f'Bearer resource_metadata="{META.format(port=e.port)}"'
    assert "log in with OAuth" in _error(body)
    status, headers, _ = e.request(headers={"Host": _host(e), "Authorization": "Bearer expired"})
    assert status == 401 and headers["WWW-Authenticate"] == (
        f'Bearer resource_metadata="{META.format(port=e.port)}", error="invalid_token"')
    assert e.request(headers={"Host": _host(e), "Authorization": f"Bearer {issued}"})[0] == 200
    assert e.request(headers={"Host": _host(e), "Authorization": f"Bearer {TOKEN}"})[0] == 200
    assert asked == ["expired", issued]  # (the server's own token needs no verify)


def test_a_verify_that_raises_is_a_401_not_a_crash():
    def verify(token: str) -> bool:
        raise RuntimeError("the authorization server's bug")

    guard = abstract._ServeGuard("127.0.0.1", 8080, TOKEN, verify=verify,
                                 resource_metadata=META.format(port=8080))
    got = guard.check("POST", "/mcp", {"Host": "127.0.0.1:8080", "Authorization": "Bearer x" * 5})
    assert got[0] == 401


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource",
                                  "/.well-known/oauth-protected-resource/mcp",
                                  "/.well-known/oauth-authorization-server", "/register",
                                  "/authorize?client_id=x&state=y", "/token", "/revoke"])
def test_the_authorization_servers_paths_need_no_token_while_oauth_is_on(endpoint, path):
    on = endpoint(lambda port: abstract._ServeGuard("127.0.0.1", port, TOKEN,
                                                    resource_metadata=META.format(port=port)))
    off = endpoint()
    assert on.request("GET", path, {"Host": _host(on)})[0] == 200
    assert off.request("GET", path, {"Host": _host(off)})[0] == 401
    # Origin and Host still apply there (the approval page is a browser's)
    assert on.request("GET", path, {"Host": _host(on), "Origin": "http://evil.example"})[0] == 403
    assert on.request("GET", path, {"Host": "evil.example"})[0] == 421


def test_with_the_authorization_server_a_web_connector_logs_in_through_the_guard(endpoint,
                                                                                  tmp_path):
    """The real _AuthServer behind the guard: its paths answer without a token (the approval
    page's form comes from the server's own origin), the page takes the server's token, and the
    access token it issues opens /mcp."""
    made = {}

    def guard(port: int) -> abstract._ServeGuard:
        base = f"http://127.0.0.1:{port}"
        made["auth"] = abstract._AuthServer(
            str(tmp_path / "auth"), base, base + "/mcp",
            lambda t: hmac.compare_digest(t.encode(), TOKEN.encode()))
        return abstract._ServeGuard("127.0.0.1", port, TOKEN, verify=made["auth"].verify,
                                    resource_metadata=META.format(port=port))

    e = endpoint(guard)
    e.auth = made["auth"]
    try:
        own = {"Host": _host(e)}
        status, headers, _ = e.request("POST", "/mcp", own)
        assert status == 401 and "resource_metadata" in headers["WWW-Authenticate"]
        status, _, body = e.request("GET", "/.well-known/oauth-protected-resource/mcp", own)
        assert status == 200 and json.loads(body)["resource"] == e.guard.url + "/mcp"
        redirect = "http://127.0.0.1:33418/callback"
        status, _, body = e.request("POST", "/register", {
            **own, "Content-Type": "application/json"}, body=json.dumps(
                {"redirect_uris": [redirect], "client_name": "connector"}).encode())
        cid = json.loads(body)["client_id"]
        verifier = "v" * 50
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        query = urllib.parse.urlencode({
            "response_type": "code", "client_id": cid, "redirect_uri": redirect, "state": "s",
            "code_challenge": challenge.decode().rstrip("="), "code_challenge_method": "S256"})
        status, _, page = e.request("GET", "/authorize?" + query, own)
        ticket = re.search(r'name="ticket" value="([^"]+)"', page.decode()).group(1)
        form = {**own, "Content-Type": "application/x-www-form-urlencoded",
                "Origin": f"http://127.0.0.1:{e.port}"}  # the page's own origin, as a browser
        for typed, want in (("wrong-" + TOKEN, 403), (TOKEN, 302)):  # (403: the page's)
            status, headers, page = e.request("POST", "/authorize", form,
                                              body=urllib.parse.urlencode(
                                                  {"ticket": ticket, "token": typed,
                                                   "decision": "allow"}).encode())
            assert status == want and (want == 302) == ("Location" in headers), page
        code = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(
            headers["Location"]).query))["code"]
        status, _, body = e.request("POST", "/token", {
            **own, "Content-Type": "application/x-www-form-urlencoded"},
            body=urllib.parse.urlencode({"grant_type": "authorization_code", "code": code,
                                         "client_id": cid, "redirect_uri": redirect,
                                         "code_verifier": verifier}).encode())
        access = json.loads(body)["access_token"]
        assert e.request("POST", "/mcp", {**own, "Authorization": f"Bearer {access}"})[0] == 200
        assert e.request("POST", "/mcp", {**own, "Authorization": f"Bearer {TOKEN}"})[0] == 200
        evil = {**form, "Origin": "http://evil.example.com"}
        assert e.request("POST", "/authorize", evil, body=b"ticket=x")[0] == 403
    finally:
        e.auth.close()


def test_other_paths_need_the_token_while_oauth_is_on(endpoint):
    e = endpoint(lambda port: abstract._ServeGuard("127.0.0.1", port, TOKEN,
                                                   resource_metadata=META.format(port=port)))
    for path in ("/mcp", "/", "/tokens", "/registered", "/.well-known/other"):
        assert e.request("GET", path, {"Host": _host(e)})[0] == 401, path


def test_a_cors_preflight_needs_no_token_but_an_allowed_origin(endpoint):
    e = endpoint(lambda port: abstract._ServeGuard("127.0.0.1", port, TOKEN,
                                                   ["http://localhost:6274"]))
    allowed = {"Host": _host(e), "Origin": "http://localhost:6274"}
    assert e.request("OPTIONS", "/mcp", allowed)[0] == 200
    assert e.request("OPTIONS", "/mcp", {**allowed, "Origin": "http://evil.example"})[0] == 403


def test_an_empty_token_without_verify_is_authentication_off(endpoint):
    e = endpoint(lambda port: abstract._ServeGuard("127.0.0.1", port, ""))
    assert not e.guard.authenticates
    assert e.request(headers={"Host": _host(e)})[0] == 200
    assert e.request(headers={"Host": "evil.example"})[0] == 421  # Host still checked


def test_the_guard_needs_the_port_bound_not_0():
    with pytest.raises(ValueError, match="the port the server is bound to, not 0"):
        abstract._ServeGuard("127.0.0.1", 0, TOKEN)


def test_a_refusal_logs_no_token(caplog):
    caplog.set_level("DEBUG", logger="abstract")
    guard = abstract._ServeGuard("127.0.0.1", 8080, TOKEN)
    guard.check("POST", "/mcp?access_token=QUERYSECRET", {"Host": "127.0.0.1:8080",
                                                          "Authorization": "Bearer WRONGSECRET"})
    assert "refused with 401" in caplog.text
    assert "WRONGSECRET" not in caplog.text and "QUERYSECRET" not in caplog.text


# -- the token: ABSTRACT_SERVE_TOKEN, else a 0600 file in a 0700 folder, made once


def _env(tmp_path: Path, **extra: str) -> Dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "APPDATA": str(tmp_path / "appdata"),
            **extra}


def _token_file(tmp_path: Path) -> Path:
    return tmp_path / "config" / "abstract" / "serve" / "token"


@pytest.mark.skipif(sys.platform in ("win32", "darwin"),
                    reason="the folder follows XDG_CONFIG_HOME on Linux and other Unixes")
def test_the_token_file_is_made_0600_in_a_0700_folder_once_and_reused(tmp_path):
    token = abstract._serve_token(_env(tmp_path))
    path = _token_file(tmp_path)
    assert path.read_text() == token + "\n" and len(token) == 43  # 32 bytes, base64url
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    before = path.stat()
    assert abstract._serve_token(_env(tmp_path)) == token
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(p.name for p in path.parent.iterdir()) == ["token"]  # no temporary left
    assert abstract._clean(f"the token is {token}") == "the token is ***"  # masked in logs


def test_two_made_tokens_differ(tmp_path):
    a = abstract._serve_token(_env(tmp_path / "a"))
    b = abstract._serve_token(_env(tmp_path / "b"))
    assert a != b


def test_an_existing_token_file_is_never_overwritten(tmp_path, monkeypatch):
    """Another Abstract makes the file between this one's look and its write: this one's file
    (the atomic writer never takes a name that exists) is dropped, and the other's token
    stands."""
    theirs = "theirs-" + "x" * 40
    path = _token_file(tmp_path)
    read = abstract._read_token
    looks = []

    def late(p: Path) -> Optional[str]:
        looks.append(p)
        if len(looks) == 1:  # the other Abstract writes now
            path.parent.mkdir(parents=True)
            path.write_text(theirs + "\n")
            return None
        return read(p)

    monkeypatch.setattr(abstract, "_read_token", late)
    if sys.platform in ("win32", "darwin"):
        pytest.skip("the folder follows XDG_CONFIG_HOME on Linux and other Unixes")
    assert abstract._serve_token(_env(tmp_path)) == theirs
    assert path.read_text() == theirs + "\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["token"]


def test_abstract_serve_token_wins_and_no_file_is_made(tmp_path):
    given = "g" * 32
    assert abstract._serve_token(_env(tmp_path, ABSTRACT_SERVE_TOKEN=given)) == given
    assert not (tmp_path / "config").exists()


@pytest.mark.parametrize("given", ["short", "s" * 31, "with space " * 4, "é" * 40])
def test_a_short_or_unsendable_env_token_is_refused(tmp_path, given):
    with pytest.raises(abstract.ConfigError) as info:
        abstract._serve_token(_env(tmp_path, ABSTRACT_SERVE_TOKEN=given))
    assert "ABSTRACT_SERVE_TOKEN must hold a token of at least 32" in str(info.value)
    assert "secrets.token_urlsafe(32)" in str(info.value)


@pytest.mark.skipif(sys.platform in ("win32", "darwin"),
                    reason="the folder follows XDG_CONFIG_HOME on Linux and other Unixes")
def test_a_damaged_token_file_is_refused_naming_it(tmp_path):
    path = _token_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("abc\n")
    with pytest.raises(abstract.ConfigError) as info:
        abstract._serve_token(_env(tmp_path))
    assert str(path) in str(info.value) and "remove it, and a new token is made" in str(info.value)
    assert path.read_text() == "abc\n"  # left as it was


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_a_token_file_others_may_read_is_used_with_a_warning(tmp_path, caplog):
    env = _env(tmp_path)
    token = abstract._serve_token(env)
    _token_file(tmp_path).chmod(0o644)
    assert abstract._serve_token(env) == token
    assert "may be read by other users: chmod 600 it" in caplog.text


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX owners and modes")
def test_a_token_folder_that_is_a_symlink_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "config" / "abstract").mkdir(parents=True)
    (tmp_path / "config" / "abstract" / "serve").symlink_to(elsewhere)
    with pytest.raises(abstract.ConfigError, match="is not a folder of your own"):
        abstract._serve_token(_env(tmp_path))
    assert list(elsewhere.iterdir()) == []


def test_on_windows_the_token_lives_in_appdata_and_its_folder_gets_no_mode(tmp_path,
                                                                           monkeypatch):
    """Windows (the platform set): %APPDATA%\\Abstract\\serve, the saved logins' folder; no mode
    is set there (the profile's ACL keeps other users out). The write itself is Windows-only
    below: the atomic writer's Windows branch needs Windows."""
    monkeypatch.setattr(abstract, "_WINDOWS", True)
    folder = abstract._serve_folder(_env(tmp_path))
    assert folder == tmp_path / "appdata" / "Abstract" / "serve"
    chmods = []
    monkeypatch.setattr(abstract.os, "chmod", lambda *a, **k: chmods.append(a))
    assert abstract._own_folder(folder, "the --serve folder") == str(folder)
    assert folder.is_dir() and chmods == []


def test_on_macos_the_token_lives_in_application_support(tmp_path, monkeypatch):
    monkeypatch.setattr(abstract, "_MACOS", True)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = abstract._serve_folder(_env(tmp_path))
    assert folder == tmp_path / "home" / "Library" / "Application Support" / "Abstract" / "serve"
    assert abstract._serve_token(_env(tmp_path)) == (folder / "token").read_text().strip()


@pytest.mark.skipif(sys.platform != "win32", reason="Windows only: the ACL of %APPDATA% is what "
                                                   "protects the token file there (needs a real "
                                                   "Windows)")
def test_windows_token_file_is_made_and_read_back_in_appdata(tmp_path):  # pragma: no cover
    token = abstract._serve_token({"APPDATA": str(tmp_path)})
    assert (tmp_path / "Abstract" / "serve" / "token").read_text().strip() == token


# -- the address


@pytest.mark.parametrize("text, want", [("8080", ("127.0.0.1", 8080)),
                                        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
                                        ("[::1]:8080", ("::1", 8080)),
                                        ("0.0.0.0:0", ("0.0.0.0", 0)), (":0", ("127.0.0.1", 0)),
                                        ("localhost:65535", ("localhost", 65535)),
                                        ("mcp.example.net:443", ("mcp.example.net", 443))])
def test_serve_address_forms(text, want):
    assert abstract._serve_address(text) == want


@pytest.mark.parametrize("text", ["", "http://127.0.0.1:8080", "8080x", "70000", "localhost:",
                                  "a b:80", "[::1]", "127.0.0.1:\u00b2", "127.0.0.1:8080/mcp"])
def test_serve_address_errors_name_the_text_and_the_form(text):
    with pytest.raises(abstract.ConfigError) as info:
        abstract._serve_address(text)
    assert str(info.value) == (f"--serve needs [HOST:]PORT such as 127.0.0.1:8765, "
                               f"not {text!r}")


# -- the refusal of an address other machines reach


@pytest.mark.parametrize("host, tls, auth, insecure, lacking", [
    ("127.0.0.1", False, True, False, None), ("localhost", False, True, False, None),
    ("::1", False, False, False, None), ("127.0.0.2", False, True, False, None),
    ("::ffff:127.0.0.1", False, True, False, None),
    ("0.0.0.0", True, True, False, None), ("0.0.0.0", False, False, True, None),
    ("0.0.0.0", False, True, False, "no TLS."), ("::", False, True, False, "no TLS."),
    ("192.0.2.1", True, False, False, "no authentication."),
    ("mcp.example.net", False, False, False, "no TLS and no authentication."),
])
def test_serve_refusal(host, tls, auth, insecure, lacking):
    why = abstract._serve_refusal(host, tls, auth, insecure)
    if lacking is None:
        assert why == ""
    else:
        assert why.startswith(f"--serve {host}: an address other machines can reach is served "
                              f"only with TLS and authentication, and this one would have "
                              f"{lacking}")
        assert "--serve-cert FILE" in why and "--serve-insecure" in why


# -- TLS from certificate and key files (made by openssl at test time)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    d = tmp_path_factory.mktemp("pki")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out",
            "cert.pem", "-days", "2", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other-key.pem", "-out",
            "other.pem", "-days", "2", "-subj", "/CN=other")
    openssl("pkey", "-in", "key.pem", "-aes256", "-passout", "pass:secret", "-out",
            "locked.pem")
    (d / "both.pem").write_bytes((d / "cert.pem").read_bytes() + (d / "key.pem").read_bytes())
    (d / "junk.pem").write_text("not a certificate\n")
    return d


def test_tls_context_serves_a_real_handshake(endpoint, pki):
    context = abstract._serve_tls(str(pki / "cert.pem"), str(pki / "key.pem"))
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    e = endpoint(lambda port: abstract._ServeGuard("127.0.0.1", port, TOKEN, tls=True),
                 tls=context)
    client = ssl.create_default_context(cafile=str(pki / "cert.pem"))
    own = {"Host": f"localhost:{e.port}", "Origin": f"https://localhost:{e.port}",
           "Authorization": f"Bearer {TOKEN}"}
    assert e.request(headers=own, context=client)[:1] == (200,)
    # over TLS the server's own origin is https://: the http:// one is another site's
    assert e.request(headers={**own, "Origin": f"http://localhost:{e.port}"},
                     context=client)[0] == 403
    assert e.guard.url == f"https://127.0.0.1:{e.port}"
    # a client that does not trust the certificate fails the handshake
    with pytest.raises(ssl.SSLError):
        e.request(headers=own, context=ssl.create_default_context())


def test_tls_from_one_file_holding_certificate_and_key(pki):
    assert isinstance(abstract._serve_tls(str(pki / "both.pem"), ""), ssl.SSLContext)


@pytest.mark.parametrize("cert, key, says", [
    ("missing.pem", "key.pem", "--serve-cert {d}/missing.pem: No such file or directory"),
    ("cert.pem", "missing.pem", "--serve-key {d}/missing.pem: No such file or directory"),
    ("junk.pem", "key.pem", "--serve-cert {d}/junk.pem holds no PEM certificate"),
    ("cert.pem", "junk.pem", "--serve-key {d}/junk.pem holds no PEM private key"),
    ("cert.pem", "", "--serve-cert {d}/cert.pem holds no PEM private key (-----BEGIN"),
    ("cert.pem", "other-key.pem", "the key does not match the certificate"),
    ("cert.pem", "locked.pem", "--serve-key {d}/locked.pem is protected by a passphrase"),
])
def test_tls_errors_name_the_file_and_the_fix(pki, cert, key, says):
    with pytest.raises(abstract.ConfigError) as info:
        abstract._serve_tls(str(pki / cert), str(pki / key) if key else "")
    assert says.format(d=pki) in str(info.value)


# -- the flags and settings through main(argv), in-process


def _main(argv, env) -> Tuple[int, str, str]:
    out, err = io.BytesIO(), io.StringIO()
    code = abstract.main(argv, stdin=io.BytesIO(b""), stdout=out, stderr=err, environ=env)
    return code, out.getvalue().decode(), err.getvalue()


def _world_env(tmp_path: Path, settings: Optional[dict] = None, **extra: str) -> Dict[str, str]:
    config = tmp_path / "client.json"
    config.write_text('{"mcpServers": {}}')
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"catalog": {"enabled": False},
                                "output_cache": {"dir": str(tmp_path / "cache")},
                                **(settings or {})}))
    env = base_env(APP_CONFIG_PATH=str(config), ABSTRACT_CONFIG=str(path), **_env(tmp_path))
    env.pop(abstract._SERVE_TOKEN_ENV, None)
    env.update(extra)
    return env


@pytest.mark.skipif(sys.platform in ("win32", "darwin"),
                    reason="the folder follows XDG_CONFIG_HOME on Linux and other Unixes")
def test_serve_token_prints_the_token_and_exits_0(tmp_path):
    env = _world_env(tmp_path)
    code, out, err = _main(["--serve-token"], env)
    assert code == 0 and out == _token_file(tmp_path).read_text()
    assert str(_token_file(tmp_path)) in err and out.strip() not in err
    assert _main(["--serve-token"], env)[1] == out  # the same token again


def test_serve_token_prints_abstract_serve_token_when_set(tmp_path):
    given = "given-" + "z" * 40
    code, out, _ = _main(["--serve-token"], _world_env(tmp_path, ABSTRACT_SERVE_TOKEN=given))
    assert (code, out) == (0, given + "\n")
    code, _, err = _main(["--serve-token"], _world_env(tmp_path, ABSTRACT_SERVE_TOKEN="short"))
    assert code == 2 and "ABSTRACT_SERVE_TOKEN must hold a token of at least 32" in err


@pytest.mark.skipif(sys.platform in ("win32", "darwin"),
                    reason="the folder follows XDG_CONFIG_HOME on Linux and other Unixes")
def test_check_reports_what_would_be_served_and_makes_no_token(tmp_path):
    code, out, err = _main(["--check", "--serve", "127.0.0.1:8931", "--serve-origin",
                            "https://claude.ai", str(tmp_path / "store")], _world_env(tmp_path))
    assert code == 0, err
    path = _token_file(tmp_path)
    assert (f"serve: http://127.0.0.1:8931/mcp (loopback: this machine only); TLS off\n"
            f"serve: authentication: bearer token in {path} (made on first use)\n"
            f"serve: OAuth for web connectors: on\n"
            f"serve: browser origins allowed besides its own: https://claude.ai\n") in out
    assert not path.exists()
    token = abstract._serve_token(_env(tmp_path))
    _, out, _ = _main(["--check", "--serve", "8931", str(tmp_path / "store")],
                      _world_env(tmp_path, {"serve": {"oauth": False}}))
    assert f"bearer token in {path} (print it: abstract --serve-token)" in out
    assert "serve: OAuth for web connectors: off (serve.oauth is false)" in out
    assert token not in out


def test_check_reports_tls_env_token_and_insecure(tmp_path, pki):
    cert, key = str(pki / "cert.pem"), str(pki / "key.pem")
    env = _world_env(tmp_path, ABSTRACT_SERVE_TOKEN="e" * 40)
    code, out, err = _main(["--check", "--serve", "0.0.0.0:0", "--serve-cert", cert,
                            "--serve-key", key, str(tmp_path / "store")], env)
    assert code == 0, err
    assert ("serve: https://0.0.0.0:0/mcp (other machines can reach it; port 0: a free one, "
            f"named on stderr when serving); TLS on: {cert}\n"
            "serve: authentication: bearer token from ABSTRACT_SERVE_TOKEN\n") in out
    assert "e" * 40 not in out
    code, out, err = _main(["--check", "--serve", "[::1]:9", "--serve-insecure",
                            str(tmp_path / "store")], _world_env(tmp_path))
    assert code == 0, err
    assert ("serve: http://[::1]:9/mcp (loopback: this machine only); TLS off\n"
            "serve: authentication: OFF (--serve-insecure)\n"
            "serve: OAuth for web connectors: off (--serve-insecure)\n") in out


def test_check_without_serve_has_no_serve_lines(tmp_path):
    code, out, _ = _main(["--check", str(tmp_path / "store")], _world_env(tmp_path))
    assert code == 0 and "serve:" not in out


@pytest.mark.parametrize("argv, says", [
    (["--serve", "0.0.0.0:8080"], "--serve 0.0.0.0: an address other machines can reach is "
                                  "served only with TLS and authentication, and this one would "
                                  "have no TLS. Give --serve-cert FILE and --serve-key FILE, or "
                                  "serve on 127.0.0.1 (behind a tunnel or a reverse proxy), or "
                                  "add --serve-insecure if you mean it"),
    (["--check", "--serve", "192.0.2.1:8080"], "--serve 192.0.2.1: an address other machines"),
    (["--serve", "http://x"], "--serve needs [HOST:]PORT such as 127.0.0.1:8765, not 'http://x'"),
    (["--serve-cert", "c.pem"], "--serve-cert is an option of --serve [HOST:]PORT, which is not "
                                "given"),
    (["--serve-insecure"], "--serve-insecure is an option of --serve"),
    (["--serve-origin", "https://claude.ai"], "--serve-origin is an option of --serve"),
    (["--serve", "8080", "--serve-key", "k.pem"], "--serve-key needs --serve-cert FILE"),
    (["--serve", "8080", "--serve-origin", "https://claude.ai/path"],
     "--serve-origin needs an origin such as https://claude.ai (scheme://host[:port], no path), "
     "not 'https://claude.ai/path'"),
    (["--serve", "8080", "--serve-cert", "/no/such/cert.pem"],
     "--serve-cert /no/such/cert.pem: No such file or directory"),
])
def test_serve_flags_refused_with_exit_2_and_one_line(tmp_path, argv, says):
    code, out, err = _main(argv + [str(tmp_path / "store")], _world_env(tmp_path))
    assert code == 2 and says in err and out == "" and "Traceback" not in err, err
    assert not (tmp_path / "store").exists()  # refused before anything starts


@pytest.mark.parametrize("serve, says", [
    ({"origins": ["https://claude.ai/"]}, None),
    ({"origins": "https://claude.ai"}, "key 'serve.origins' must be a list of at most 100 origins"),
    ({"origins": ["claude.ai"]}, "key 'serve.origins' must be a list of at most 100 origins such "
                                 "as \"https://claude.ai\" (scheme://host[:port], no path), not "
                                 "[\"claude.ai\"]"),
    ({"oauth": "yes"}, "key 'serve.oauth' must be true or false, not \"yes\""),
    ({"idle_timeout_seconds": 0}, "key 'serve.idle_timeout_seconds' must be a number of seconds"),
    ({"max_sessions": 0}, "key 'serve.max_sessions' must be a whole number from 1 to 4096, not 0"),
    ({"max_body_mb": 5000}, "key 'serve.max_body_mb' must be a number of megabytes > 0 and at "
                            "most 4096, not 5000"),
    ({"port": 1}, "unknown key 'serve.port' (known: idle_timeout_seconds, max_body_mb, "
                  "max_sessions, oauth, origins, public_url)"),
])
def test_serve_settings_are_checked(tmp_path, serve, says):
    code, out, err = _main(["--check", "--serve", "0", str(tmp_path / "store")],
                           _world_env(tmp_path, {"serve": serve}))
    if says is None:
        assert code == 0 and "allowed besides its own: https://claude.ai/" in out, err
    else:
        assert code == 2 and says in err, err


def test_serve_settings_defaults():
    settings = abstract._Settings({})
    assert [settings.serve(k) for k in ("oauth", "origins", "idle_timeout_seconds",
                                        "max_sessions", "max_body_mb")] == [True, (), 1800, 64, 4]


# -- _serve_guard: the guard from the flags and settings


def _args(*argv: str) -> argparse.Namespace:
    return abstract._parser().parse_args(list(argv))


@pytest.mark.skipif(sys.platform in ("win32", "darwin"),
                    reason="the folder follows XDG_CONFIG_HOME on Linux and other Unixes")
def test_serve_guard_uses_the_token_file_and_the_origins(tmp_path):
    settings = abstract._Settings({"serve": {"origins": ["https://claude.ai"]}})
    guard = abstract._serve_guard(_args("--serve", "0", "--serve-origin", "http://localhost:6274"),
                                  settings, _env(tmp_path), "127.0.0.1", 8931, False)
    token = _token_file(tmp_path).read_text().strip()
    base = {"Host": "127.0.0.1:8931", "Authorization": f"Bearer {token}"}
    assert guard.check("POST", "/mcp", base) is None
    for origin in ("https://claude.ai", "http://localhost:6274"):
        assert guard.check("POST", "/mcp", {**base, "Origin": origin}) is None
    assert guard.check("POST", "/mcp", {"Host": "127.0.0.1:8931"})[0] == 401


def test_serve_guard_insecure_turns_authentication_off_and_says_so_loudly(tmp_path, caplog):
    guard = abstract._serve_guard(_args("--serve", "0", "--serve-insecure"), abstract._Settings({}),
                                  _env(tmp_path), "127.0.0.1", 8931, False)
    assert guard.check("POST", "/mcp", {"Host": "localhost:8931"}) is None
    assert "--serve-insecure: AUTHENTICATION IS OFF: any program on this machine can use" in (
        caplog.text)
    assert not (tmp_path / "config").exists()  # no token made
    caplog.clear()
    abstract._serve_guard(_args("--serve", "0.0.0.0:0", "--serve-insecure"),
                          abstract._Settings({}), _env(tmp_path), "0.0.0.0", 8931, False)
    assert ("AUTHENTICATION IS OFF AND TLS IS OFF (all of it in clear text): anyone who can "
            "reach 0.0.0.0 over the network") in caplog.text


def test_serve_guard_refuses_what_serve_refusal_refuses(tmp_path):
    with pytest.raises(abstract.ConfigError, match="would have no TLS"):
        abstract._serve_guard(_args("--serve", "0.0.0.0:0"), abstract._Settings({}),
                              _env(tmp_path, ABSTRACT_SERVE_TOKEN="q" * 40), "0.0.0.0", 1, False)


def test_the_guard_and_the_rest_of_serving_sit_in_the_serving_part():
    source = Path(abstract.__file__).read_text(encoding="utf-8").splitlines()
    start = source.index("# -- the guard: addresses, tokens, Origin and Host, TLS")
    end = source.index("# -- the authorization server (OAuth 2.1 for web connectors)")
    for first in ("_HttpReply = ", "def _serve_address(", "def _serve_token(", "def _serve_tls(",
                  "class _ServeGuard:", "def _serve_refusal(", "def _serve_guard("):
        at = next(i for i, line in enumerate(source) if line.startswith(first))
        assert start < at < end, first
