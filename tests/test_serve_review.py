"""An adversarial review of issue 28's serving security (serve.public_url, CORS on /mcp,
sessions bound to their credential, the approval form): each test here failed before its fix.
A real abstract.py serving fake upstreams, reached over HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from test_serve import LONG, TOKEN, Session
from test_serve import served  # noqa: F401 (a fixture)
from test_serve_auth import REDIRECT, authorize, client_id, pkce, redirected, ticket_of
from test_serve_tunnel import As, Via, oauth_login, ping, request


# -- serve.public_url is named as a browser names an origin


@pytest.mark.parametrize("given, named", [
    ("https://tunnel.example.net:443", "https://tunnel.example.net"),
    ("HTTPS://Tunnel.Example.net:0443/", "https://tunnel.example.net"),
    ("https://tunnel.example.net?", "https://tunnel.example.net"),
    ("https://tunnel.example.net#", "https://tunnel.example.net"),
    ("https://tunnel.example.net:", "https://tunnel.example.net"),
    ("https://[2001:DB8::1]:443", "https://[2001:db8::1]"),
    ("https://tunnel.example.net:8443", "https://tunnel.example.net:8443"),
])
def test_the_public_url_is_named_without_its_default_port_or_stray_characters(tmp_path, given,
                                                                               named):
    """A client compares the resource it is told with the URL it was given (the Python SDK's
    check_resource_allowed compares the netloc as written): https://host:443/mcp was refused to
    a client given https://host/mcp, and 'https://host?' named the issuer 'https://host?'."""
    from test_serve_guard import _main, _world_env

    code, out, err = _main(["--check", "--serve", "8931", "--serve-public-url", given,
                            str(tmp_path / "store")], _world_env(tmp_path))
    assert code == 0, err
    assert f"serve: public URL (a tunnel or reverse proxy): {named}/mcp;" in out


def test_through_the_tunnel_the_metadata_names_the_public_url_without_port_443(served):  # noqa: F811,E501
    port = served("--serve-public-url", "https://tunnel.example.net:443").http.port
    public = "https://tunnel.example.net"
    headers = {"Host": "tunnel.example.net", "X-Forwarded-For": "203.0.113.9"}
    _, _, body = request(port, "GET", "/.well-known/oauth-protected-resource/mcp",
                         headers=headers)
    assert json.loads(body)["resource"] == f"{public}/mcp"
    assert json.loads(body)["authorization_servers"] == [public]
    _, _, body = request(port, "GET", "/.well-known/oauth-authorization-server", headers=headers)
    assert json.loads(body)["issuer"] == public
    status, got, _ = request(port, "GET", "/mcp", headers=headers)
    assert status == 401 and got["www-authenticate"] == (
        f'Bearer resource_metadata="{public}/.well-known/oauth-protected-resource/mcp"')


# -- the approval form as a browser posts it


def test_the_approval_form_posted_with_origin_null_is_answered(served):  # noqa: F811
    """The approval page is sent with Referrer-Policy: no-referrer, so Chrome and Firefox send
    its form's POST with `Origin: null` (Fetch, 'append a request Origin header'): the guard
    refused it with 403 (DNS rebinding protection) and no browser could approve a client."""
    port = served().http.port
    via = Via(port, "localhost")
    cid = client_id(via)  # type: ignore[arg-type]
    status, _, page = authorize(via, cid, pkce()[1])  # type: ignore[arg-type]
    assert status == 200, page
    form = {"ticket": ticket_of(page), "token": "wrong-" + TOKEN, "decision": "allow"}
    status, _, body = via.call("POST", "/authorize", form, {"Origin": "null"})
    assert status == 403 and b"not this server&#x27;s token" in body  # (the page, not the guard)
    status, headers, _ = via.call("POST", "/authorize", dict(form, token=TOKEN),
                                  {"Origin": "null"})
    assert status == 302, headers
    assert redirected(headers)["code"] and headers["location"].startswith(REDIRECT)
    # null is for that form only: /mcp, the other paths, and a foreign origin are refused
    for method, path in (("POST", "/mcp"), ("POST", "/token"), ("GET", "/authorize")):
        assert request(port, method, path, b"{}", {"Origin": "null"})[0] == 403, path
    status, _, _ = via.call("POST", "/authorize", dict(form, token=TOKEN),
                            {"Origin": "https://evil.example"})
    assert status == 403


# -- a session's GET stream ends with its credential


def _ended(events: Any, timeout: float = LONG) -> bool:
    """True once the stream ends (within `timeout`), whatever it carried before."""
    while True:
        if events.next(timeout) is None:
            return True


def test_a_get_stream_ends_when_its_approval_is_revoked(served):  # noqa: F811
    """A revoked (or expired) access token's session kept its GET stream open for ever: it
    went on receiving the upstreams' notifications and log messages, and, never idle, was never
    ended (a thief's 64 such sessions would have kept everyone else out)."""
    port = served().http.port
    via = Via(port)
    _, tokens = oauth_login(via)
    mine = Session(As(port, tokens["access_token"]))
    assert mine.get is not None and mine.get.status == 200
    other = Session(As(port, TOKEN))  # the server's token: not touched by the revocation
    assert other.get is not None and other.get.status == 200
    status, _, _ = via.call("POST", "/revoke", {"token": tokens["refresh_token"]})
    assert status == 200
    assert _ended(mine.get)
    assert None not in list(other.get.q.queue)  # (still open: it did not end)
    assert ping(As(port, TOKEN), other.sid) == 200
    assert request(port, "GET", "/mcp", headers={
        "Authorization": f"Bearer {tokens['access_token']}", "Mcp-Session-Id": mine.sid,
        "Accept": "text/event-stream"})[0] == 401


# -- odd input is refused, never a crash


def test_a_resource_that_is_not_a_url_is_invalid_target_not_a_500(served):  # noqa: F811
    """'http://[::1' (urlsplit raises ValueError) as the resource of /authorize or /token was
    answered 500 server_error, with a traceback in the log."""
    srv = served()
    via = Via(srv.http.port)
    cid = client_id(via)  # type: ignore[arg-type]
    status, headers, _ = authorize(via, cid, pkce()[1], resource="http://[::1")  # type: ignore
    assert status == 302 and redirected(headers)["error"] == "invalid_target", headers
    status, _, body = via.call("POST", "/token", {"grant_type": "refresh_token",
                                                  "refresh_token": "x", "resource": "http://[::1"})
    assert status == 400 and json.loads(body)["error"] == "invalid_target"


@pytest.mark.parametrize("meta", [
    {"redirect_uris": [REDIRECT], "client_name": "App \ud800"},
    {"redirect_uris": ["https://app.example/\udfff"]},
])
def test_a_registration_with_a_lone_surrogate_is_refused_not_a_500(served, meta):  # noqa: F811
    """'\\ud800' in the JSON of /register was kept (in memory) and then its answer failed
    to encode: 500 server_error, a traceback in the log."""
    port = served().http.port
    body = json.dumps(meta).encode()  # (ensure_ascii: the surrogate goes as \\ud800)
    status, _, data = request(port, "POST", "/register", body,
                              {"Content-Type": "application/json"})
    assert status == 400 and json.loads(data) == {
        "error": "invalid_client_metadata", "error_description": "the metadata holds a lone "
        "surrogate (\\ud800 to \\udfff), which is not text"}


@pytest.mark.parametrize("body", [b"[" * 30000 + b"]" * 30000,
                                  b'{"a":' * 10000 + b"1" + b"}" * 10000])
def test_a_registration_nested_too_deep_is_refused_not_a_500(served, body):  # noqa: F811
    """JSON nested past the interpreter's recursion limit (60 KB, under the 64 KiB bound)
    raised RecursionError out of /register, which needs no token: 500 and a traceback in the
    log, 60 a minute from anyone who reaches it."""
    srv = served()
    status, _, data = request(srv.http.port, "POST", "/register", body,
                              {"Content-Type": "application/json"})
    assert status == 400 and json.loads(data)["error"] == "invalid_client_metadata"
    assert request(srv.http.port, "POST", "/register", json.dumps(
        {"redirect_uris": [REDIRECT]}).encode())[0] == 201  # (still serving)
    assert b"Traceback" not in _stderr_at_end(srv)


def _stderr_at_end(srv: Any) -> bytes:
    """What a Served abstract.py wrote on stderr after it said where it serves, to its end (the
    end of its stdin ends it)."""
    srv.proc.stdin.close()
    srv.proc.wait(LONG)
    said = []
    while True:
        line = srv.lines.get(timeout=LONG)
        if not line:
            return b"".join(said)
        said.append(line)
