"""The pure pieces of Abstract's OAuth client (abstract.py's Remote auth part): the WWW-Authenticate
parser, the discovery orders of the spec, PKCE, the checks of metadata and of the browser's
answer, and the token store's files. The flow itself runs against the official SDK's server in
tests/remote/test_oauth.py."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
import time

import pytest

import abstract


def test_www_authenticate_bearer_parameters():
    parse = abstract._www_authenticate
    value = ('Bearer error="invalid_token", error_description="Authentication required", '
             'resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"')
    assert parse(value) == {"error": "invalid_token", "error_description": "Authentication required",
                            "resource_metadata": "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"}
    assert parse('bearer scope="files:read files:write"')["scope"] == "files:read files:write"
    assert parse('Bearer realm=x, error=insufficient_scope')["error"] == "insufficient_scope"
    assert parse('Bearer error="a \\"quoted\\" word"')["error"] == 'a "quoted" word'
    # another scheme first, and another one after: only the Bearer challenge's parameters
    assert parse('Basic realm="site", Bearer scope="a"') == {"scope": "a"}
    assert parse('Bearer scope="a", Basic realm="site"') == {"scope": "a"}
    assert parse('Basic realm="site"') == {} and parse("") == {}


def test_discovery_orders_follow_the_spec():
    assert abstract._prm_urls("https://Mcp.Example.com/api/mcp/", "https://h/meta") == [
        "https://h/meta",
        "https://mcp.example.com/.well-known/oauth-protected-resource/api/mcp",
        "https://mcp.example.com/.well-known/oauth-protected-resource"]
    assert abstract._prm_urls("https://mcp.example.com") == [
        "https://mcp.example.com/.well-known/oauth-protected-resource"]
    assert abstract._as_metadata_urls("https://auth.example.com/tenant1") == [
        "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
        "https://auth.example.com/.well-known/openid-configuration/tenant1",
        "https://auth.example.com/tenant1/.well-known/openid-configuration"]
    assert abstract._as_metadata_urls("https://auth.example.com") == [
        "https://auth.example.com/.well-known/oauth-authorization-server",
        "https://auth.example.com/.well-known/openid-configuration"]
    assert abstract._canonical_resource("HTTPS://MCP.Example.com/mcp/#x") == "https://mcp.example.com/mcp"


def test_pkce_s256():
    verifier, challenge = abstract._pkce()
    assert 43 <= len(verifier) <= 128
    expected = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert challenge == expected
    assert abstract._pkce()[0] != verifier


def test_metadata_without_s256_or_with_another_issuer_is_refused():
    good = {"issuer": "https://a.example", "authorization_endpoint": "https://a.example/authorize",
            "token_endpoint": "https://a.example/token", "code_challenge_methods_supported": ["S256"]}
    assert abstract._check_as_metadata(good, "https://a.example", "s") is good
    for bad, words in ((dict(good, code_challenge_methods_supported=["plain"]), "does not list PKCE S256"),
                       ({k: v for k, v in good.items() if k != "code_challenge_methods_supported"}, "S256"),
                       (dict(good, issuer="https://evil.example"), "names issuer"),
                       (dict(good, token_endpoint=None), "no usable token_endpoint")):
        with pytest.raises(abstract._HttpError, match=words):
            abstract._check_as_metadata(bad, "https://a.example", "s")


def test_a_2025_03_26_servers_metadata_may_name_an_issuer_on_its_origin():
    # no resource metadata: the metadata at the origin's root may name an issuer with a path there
    meta = {"issuer": "https://a.example/oauth", "code_challenge_methods_supported": ["S256"],
            "authorization_endpoint": "https://a.example/oauth/authorize",
            "token_endpoint": "https://a.example/oauth/token"}
    assert abstract._check_as_metadata(meta, "https://a.example", "s", legacy=True) is meta
    with pytest.raises(abstract._HttpError, match="names issuer"):
        abstract._check_as_metadata(meta, "https://a.example", "s")  # not without legacy
    for other in ("https://evil.example/oauth", "http://a.example", "https://a.example:8443"):
        with pytest.raises(abstract._HttpError, match="names issuer"):
            abstract._check_as_metadata(dict(meta, issuer=other), "https://a.example", "s",
                                        legacy=True)


def test_resource_metadata_must_be_for_this_server():
    prm = {"resource": "https://mcp.example.com/mcp", "authorization_servers": ["https://auth.example"]}
    assert abstract._check_prm(prm, "https://mcp.example.com/mcp", "s") == (
        "https://mcp.example.com/mcp", "https://auth.example")
    assert abstract._check_prm(dict(prm, resource="https://mcp.example.com"),
                               "https://mcp.example.com/mcp", "s")[0] == "https://mcp.example.com"
    with pytest.raises(abstract._HttpError, match="is for 'https://other.example/mcp'"):
        abstract._check_prm(dict(prm, resource="https://other.example/mcp"), "https://mcp.example.com/mcp", "s")
    with pytest.raises(abstract._HttpError, match="is for"):  # a prefix of a path segment is not
        abstract._check_prm(dict(prm, resource="https://mcp.example.com/m"), "https://mcp.example.com/mcp", "s")
    with pytest.raises(abstract._HttpError, match="names no authorization server"):
        abstract._check_prm(dict(prm, authorization_servers=[]), "https://mcp.example.com/mcp", "s")


def test_the_browsers_answer_is_checked():
    check = abstract._callback_params
    url = "http://127.0.0.1:5000/callback?code=c1&state=s1"
    assert check(url, "s1", "https://a", False) == "c1"
    assert check("code=c1&state=s1&iss=https%3A%2F%2Fa", "s1", "https://a", True) == "c1"
    cases = ((url.replace("s1", "s2"), False, "another state"),
             (url + "&iss=https%3A%2F%2Fb", False, "RFC 9207"),
             (url, True, "lacks the iss"),
             (url + "&iss=https%3A%2F%2FA", False, "RFC 9207"),  # no case folding
             ("http://127.0.0.1:5000/callback?error=access_denied&state=s1", False, "refused the login"),
             ("http://127.0.0.1:5000/callback?state=s1", False, "no authorization code"))
    for answer, iss_required, words in cases:
        with pytest.raises(abstract._HttpError, match=words):
            check(answer, "s1", "https://a", iss_required)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_token_store_files_are_the_users_alone(tmp_path):
    store = abstract._TokenStore(environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert store.dir == tmp_path / "abstract" / "oauth"
    assert store.load("a/b") == {}
    store.save("a/b", {"server_url": "https://x", "issuers": {}})
    (path,) = store.dir.iterdir()
    assert path.name.startswith("a_b-") and path.suffix == ".json"
    assert stat.S_IMODE(os.stat(store.dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    store.save("a/b", {"server_url": "https://y"})  # replaced whole, no second file
    assert [p.name for p in store.dir.iterdir()] == [path.name]
    assert json.loads(path.read_text()) == {"server_url": "https://y"}
    assert store.forget("a/b") is True and store.forget("a/b") is False
    os.chmod(store.dir, 0o755)  # loosened by someone: made owner-only again on the next save
    store.save("c", {})
    assert stat.S_IMODE(os.stat(store.dir).st_mode) == 0o700


@pytest.mark.skipif(sys.platform == "win32", reason="flock held by a child process")
def test_a_login_lock_waits_once_for_threads_and_processes_together(tmp_path, monkeypatch):
    """Another call of this Abstract holds the login (its thread lock) for most of the wait, and
    then another process holds the lock file: the wait for both is one _OAUTH_LOCK_S, not two."""
    monkeypatch.setattr(abstract, "_OAUTH_LOCK_S", 2.0)
    store = abstract._TokenStore(environ={"XDG_CONFIG_HOME": str(tmp_path)})
    store.save("s", {})
    lockfile = store._path("s").with_suffix(".lock")
    lockfile.touch()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"), str(lockfile)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    busy, release = threading.Event(), threading.Event()

    def other_call() -> None:  # holds this process's lock for the login, without its file
        lock = store._locks.setdefault("s", threading.RLock())
        with lock:
            busy.set()
            release.wait(10)

    t = threading.Thread(target=other_call)
    try:
        assert holder.stdout.readline() == b"held\n"
        t.start()
        assert busy.wait(10)
        threading.Timer(1.8, release.set).start()
        t0 = time.monotonic()
        with pytest.raises(abstract._HttpError, match="another program has held"):
            with store.locked("s"):
                pass
        took = time.monotonic() - t0
        assert 1.7 < took < 3.0, took  # 1.8 s for the thread, then the rest of 2 s (not 2 s more)
    finally:
        release.set()
        t.join(10)
        holder.stdin.close()
        holder.wait(10)
        holder.stdout.close()


def test_a_hand_edited_token_file_reads_as_no_login_not_a_crash(tmp_path):
    store = abstract._TokenStore(environ={"XDG_CONFIG_HOME": str(tmp_path)})
    auth = abstract._OAuth("s", "https://x.example/mcp", None, store)
    for issuers in ([], "x", {"https://as.example": 7}, {"https://as.example": {}}):
        store.save("s", {"server_url": "https://x.example/mcp", "issuer": "https://as.example",
                         "issuers": issuers})
        assert auth._saved()[1] == {}
        assert auth.status().startswith("login needed")


def test_oauth_settings_are_checked():
    abstract._Settings({"servers": {"s": {"oauth": {"client_id": "x", "scope": "a b", "redirect_port": 8976}}}})
    abstract._Settings({"servers": {"s": {"oauth": {"client_metadata_url": "https://me.example/c.json"}}}})
    for bad in ("http://me.example/c.json", "https://me.example", "https://me.example/", 7):
        with pytest.raises(abstract.ConfigError, match="client_metadata_url' must be the https URL"):
            abstract._Settings({"servers": {"s": {"oauth": {"client_metadata_url": bad}}}})
    with pytest.raises(abstract.ConfigError, match="unknown key 'servers.s.oauth.clientid'"):
        abstract._Settings({"servers": {"s": {"oauth": {"clientid": "x"}}}})
    with pytest.raises(abstract.ConfigError, match="redirect_port' must be a port number"):
        abstract._Settings({"servers": {"s": {"oauth": {"redirect_port": 70000}}}})


def test_token_endpoint_auth_method_follows_the_server():
    pick = abstract._token_auth_method
    assert pick({}, "s") == "client_secret_basic"  # nothing listed: RFC 8414's default
    assert pick({"token_endpoint_auth_methods_supported": ["client_secret_post"]}, "s") == \
        "client_secret_post"
    both = {"token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"]}
    assert pick(both, "s") == "client_secret_basic"
    assert pick({"token_endpoint_auth_methods_supported": ["none"]}, "s") == "none"
    assert pick(both, None) == "none"  # a public client
    assert pick(both, "s", "client_secret_post") == "client_secret_post"  # as registered
    form, headers = {}, {}
    abstract._client_auth({"client_id": "a b", "client_secret": "c:d",
                           "token_endpoint_auth_method": "client_secret_basic"}, form, headers)
    assert form == {"client_id": "a b"} and headers["Authorization"] == "Basic YSUyMGI6YyUzQWQ="


def test_the_loopback_waits_past_a_stalled_connection_and_a_request_without_state():
    import socket
    import threading
    import urllib.error
    import urllib.request

    loop = abstract._Loopback(0)
    stalled = socket.create_connection(("127.0.0.1", loop.port))  # a preconnect: sends nothing
    try:
        base = f"http://127.0.0.1:{loop.port}{abstract._OAUTH_PATH}"
        with pytest.raises(urllib.error.HTTPError) as e:  # a stray page's <img src=/callback>
            urllib.request.urlopen(base, timeout=30)
        assert e.value.code == 404
        e.value.close()
        with urllib.request.urlopen(base + "?code=C&state=S", timeout=30) as resp:
            assert resp.status == 200
        assert loop.wait(30) == abstract._OAUTH_PATH + "?code=C&state=S"
    finally:
        closer = threading.Thread(target=loop.close)
        closer.start()
        closer.join(30)  # not held by the stalled connection
        stalled.close()
    assert not closer.is_alive()
