"""OAuth 2.1 logins to a remote MCP server (issue 15, Auth), against a real authorization and
resource server built from the official Python SDK's auth support (tests/remote/oauth_server.py,
run by the SDK's venv). The browser is tests/remote/fake_browser.py, opened through $BROWSER as
webbrowser opens any browser: it follows the authorization URL and its redirect back to Abstract
with urllib, as a headless user would. Requests with the tokens go through Abstract's own HTTP
client (http_request with the login as its auth hook) to the SDK's MCP endpoint.

Without the SDK venv the module is skipped with one line.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shlex
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import ABSTRACT, wait_for

VENV_PY = Path(os.environ.get("ABSTRACT_INTEROP_VENV", "/tmp/abstract-interop/venv")) / "bin" / "python"
HERE = Path(__file__).resolve().parent
if not VENV_PY.exists():
    pytest.skip(f"the official MCP SDK venv is not installed ({VENV_PY}); see tests/realservers",
                allow_module_level=True)

import abstract  # noqa: E402  (after the skip: conftest put the repository on sys.path)

def _q(path) -> str:
    """A path as a word of $BROWSER, which webbrowser splits with shlex."""
    return shlex.quote(str(path))


WAIT = 60.0  # the SDK server and a login start slowly on a loaded machine
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "pytest", "version": "0"}}}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class OAuthServer:
    """The SDK-based server as a subprocess; `base` is its http://127.0.0.1:PORT."""

    def __init__(self, *flags: str) -> None:
        self.proc = subprocess.Popen([str(VENV_PY), str(HERE / "oauth_server.py"), *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line: List[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(WAIT)
        if not line or not line[0].startswith("READY "):
            self.stop()
            raise AssertionError(f"the OAuth test server did not start: {line!r}")
        self.base = line[0].split()[1]
        self.url = self.base + "/mcp"

    def stats(self) -> dict:
        with NO_PROXY_OPENER.open(self.base + "/test/stats", timeout=WAIT) as r:
            return json.loads(r.read())

    def revoke_all(self) -> None:
        NO_PROXY_OPENER.open(urllib.request.Request(self.base + "/test/revoke-all", data=b"",
                                                    method="POST"), timeout=WAIT).close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stdout.close()


@pytest.fixture
def start(tmp_path: Path):
    servers: List[OAuthServer] = []

    def go(*flags: str) -> OAuthServer:
        servers.append(OAuthServer(*flags))
        return servers[-1]

    yield go
    for s in servers:
        s.stop()


class World:
    """A client config naming the server `remote`, a config folder of its own, the fake browser."""

    def __init__(self, tmp: Path, server: OAuthServer, settings: dict = None,
                 browser: str = "follow") -> None:
        self.tmp, self.server = tmp, server
        (tmp / "client.json").write_text(json.dumps(
            {"mcpServers": {"remote": {"type": "http", "url": server.url}}}))
        self.log = tmp / "browser.log"
        env = {k: v for k, v in os.environ.items()
               if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "display", "wayland_display")
               and not k.startswith("ABSTRACT_")}
        # quoted: webbrowser splits a $BROWSER holding %s with shlex (a path may hold a space)
        cmd = f"{_q(sys.executable)} {_q(HERE / 'fake_browser.py')} %s" if browser == "follow" \
            else f"{_q(sys.executable)} -c pass"
        env.update({"APP_CONFIG_PATH": str(tmp / "client.json"), "XDG_CONFIG_HOME": str(tmp / "config"),
                    "BROWSER": cmd, "FAKE_BROWSER_LOG": str(self.log)})
        if settings is not None:
            (tmp / "settings.json").write_text(json.dumps(settings))
            env["ABSTRACT_CONFIG"] = str(tmp / "settings.json")
        self.env = env
        self.folder = tmp / "config" / "abstract" / "oauth"

    def run(self, *args: str, input: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ABSTRACT), *args], env=self.env, input=input,
                              capture_output=True, text=True, timeout=WAIT * 2)

    def files(self) -> List[Path]:
        return sorted(self.folder.glob("*.json")) if self.folder.exists() else []

    def saved(self) -> dict:
        (path,) = self.files()
        doc = json.loads(path.read_text())
        return doc["issuers"][doc["issuer"]]

    def auth(self, clock=time.time, monkeypatch=None):
        """The login as a running Abstract holds it; with `monkeypatch`, this process gets the
        world's browser (webbrowser reads $BROWSER from os.environ)."""
        if monkeypatch is not None:
            for key in ("BROWSER", "FAKE_BROWSER_LOG"):
                monkeypatch.setenv(key, self.env[key])
            for key in ("DISPLAY", "WAYLAND_DISPLAY"):
                monkeypatch.delenv(key, raising=False)
        settings = abstract._Settings.load(self.env.get("ABSTRACT_CONFIG"), self.env)
        provider = abstract._auth_provider("remote", self.server.url, settings, self.env)
        provider._clock = clock
        return provider

    def post(self, auth, body: dict = INIT, token: str = ""):
        headers = {**MCP_HEADERS, **({"Authorization": f"Bearer {token}"} if token else {})}
        with abstract._http_request("POST", self.server.url, headers, json.dumps(body).encode(),
                                   auth=auth, environ=self.env) as resp:
            return resp.status, resp.read()


def logged_in(folder: Path) -> bool:
    """The login Abstract saved in `folder` holds an access token."""
    files = list(folder.glob("*.json")) if folder.exists() else []
    return bool(files) and "access_token" in files[0].read_text()


def login(world: World) -> subprocess.CompletedProcess:
    done = world.run("--login", "remote")
    assert done.returncode == 0, done.stderr
    return done


def test_login_then_calls_with_the_token(start, tmp_path):
    server = start()
    world = World(tmp_path, server)
    done = login(world)
    assert "remote: logged in (token expires in" in done.stdout
    assert server.base + "/authorize?" in done.stdout  # the URL is printed for a headless machine
    stats = server.stats()
    assert stats["registrations"] == 1  # dynamic client registration
    assert stats["authorize_resources"] == [server.url]  # RFC 8707 on the authorization request
    assert stats["grants"] == [{"grant_type": "authorization_code", "resource": server.url}]
    saved = world.saved()
    token = saved["tokens"]["access_token"]
    for text in (done.stdout, done.stderr):
        assert token not in text and saved["tokens"]["refresh_token"] not in text
    # the folder and the file are the user's alone
    assert stat.S_IMODE(world.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(world.files()[0].stat().st_mode) == 0o600
    status, body = world.post(world.auth())
    assert status == 200 and b"oauth-test" in body  # the SDK server's initialize result
    check = world.run("--check")
    assert "remote: logged in (token expires in" in check.stdout
    assert token not in check.stdout and token not in check.stderr
    assert world.post(None, token=token)[0] == 200  # (the token works, sent by hand)
    out = world.run("--logout", "remote")
    assert out.returncode == 0 and "forgotten and revoked at the server" in out.stdout, out.stdout
    assert world.files() == [] and server.stats()["revocations"] == 2  # refresh and access token
    assert world.post(None, token=token)[0] == 401  # dead at the server too
    assert "remote: no saved login" in world.run("--logout", "remote").stdout
    assert "remote: login needed: run python abstract.py --login remote" in world.run("--check").stdout


def test_refresh_before_expiry_rotates_the_refresh_token(start, tmp_path):
    server = start()
    world = World(tmp_path, server)
    login(world)
    before = world.saved()["tokens"]
    challenged = server.stats()["unauthorized"]  # the --login probe's 401
    later = world.auth(clock=lambda: time.time() + 3600)  # the saved token looks expired
    status, _ = world.post(later)
    assert status == 200
    after = world.saved()["tokens"]
    assert after["access_token"] != before["access_token"]
    assert after["refresh_token"] != before["refresh_token"]  # rotated, and the new one kept
    assert server.stats()["grants"][-1] == {"grant_type": "refresh_token", "resource": server.url}
    assert server.stats()["unauthorized"] == challenged  # refreshed before the request, not after a 401


def test_expired_token_is_refreshed_on_401(start, tmp_path):
    server = start("--token-ttl", "3")
    world = World(tmp_path, server)
    login(world)
    old = world.saved()["tokens"]["access_token"]

    def rejected() -> bool:
        req = urllib.request.Request(server.url, data=json.dumps(INIT).encode(),
                                     headers={**MCP_HEADERS, "Authorization": f"Bearer {old}"})
        try:
            NO_PROXY_OPENER.open(req, timeout=WAIT).close()
        except urllib.error.HTTPError as e:
            return e.code == 401
        return False

    wait_for(rejected, timeout=WAIT, what="the server to let the token expire")
    unaware = world.auth(clock=lambda: time.time() - 3600)  # Abstract thinks the token is fresh
    status, _ = world.post(unaware)
    assert status == 200
    assert world.saved()["tokens"]["access_token"] != old
    assert [g["grant_type"] for g in server.stats()["grants"]] == ["authorization_code", "refresh_token"]


def test_revoked_tokens_start_a_new_login_in_the_browser(start, tmp_path, monkeypatch):
    server = start()
    world = World(tmp_path, server)
    login(world)
    server.revoke_all()  # access and refresh tokens both gone
    auth = world.auth(monkeypatch=monkeypatch)
    with pytest.raises(abstract._HttpError) as e:
        world.post(auth)
    msg = str(e.value)
    assert "A login is needed. A browser window was opened" in msg
    assert "--login remote" in msg
    auth.login.join(WAIT)  # the fake browser finishes the login Abstract started by itself
    assert not auth.login.is_alive()
    assert server.stats()["authorizations"] == 2
    status, _ = world.post(auth)
    assert status == 200


def failed_login(start, tmp_path, *flags: str, words: str):
    """--login against a server started with `flags`: exit 2 and `words` on stderr."""
    server = start(*flags)
    world = World(tmp_path, server)
    done = world.run("--login", "remote")
    assert done.returncode == 2 and words in done.stderr, done.stderr
    return server, world


def test_tampered_state_is_refused(start, tmp_path):
    server, world = failed_login(start, tmp_path, "--tamper-state",
                                 words="another state than the one Abstract sent")
    assert server.stats()["grants"] == []  # the code was never traded
    assert not world.files() or "tokens" not in world.saved()


def test_server_without_s256_is_refused(start, tmp_path):
    server, world = failed_login(start, tmp_path, "--no-s256", words="does not list PKCE S256")
    assert server.stats()["authorizations"] == 0 and not world.log.exists()  # no browser opened


def test_wrong_issuer_in_the_redirect_is_refused(start, tmp_path):
    server, _ = failed_login(start, tmp_path, "--wrong-iss", words="RFC 9207")
    assert server.stats()["grants"] == []


def test_discovery_fallbacks_and_a_preregistered_client(start, tmp_path):
    # no resource_metadata in the 401: the well-known URL; no RFC 8414 document: OpenID discovery;
    # no dynamic registration: the client_id from Abstract's settings
    server = start("--oidc-only", "--no-resource-metadata", "--no-registration", "--client-id", "pre-1",
                   "--iss")
    world = World(tmp_path, server, settings={"servers": {"remote": {"oauth": {"client_id": "pre-1"}}}})
    login(world)
    assert server.stats()["registrations"] == 0
    status, _ = world.post(world.auth())
    assert status == 200


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_a_preregistered_secret_goes_as_the_server_lists(start, tmp_path, method):
    # the authorization server lists one token endpoint auth method: the secret goes that way,
    # to the token endpoint (login, refresh) and to the revocation endpoint (logout)
    server = start("--no-registration", "--client-id", "pre-2", "--client-secret", "s/3+cr:t",
                   "--client-auth", method)
    world = World(tmp_path, server, settings={"servers": {"remote": {"oauth": {
        "client_id": "pre-2", "client_secret": "s/3+cr:t"}}}})
    login(world)
    assert world.saved()["client"]["token_endpoint_auth_method"] == method
    later = world.auth(clock=lambda: time.time() + 3600)  # refreshed before the request
    assert world.post(later)[0] == 200
    assert [g["grant_type"] for g in server.stats()["grants"]] == ["authorization_code",
                                                                   "refresh_token"]
    out = world.run("--logout", "remote")
    assert "revoked at the server" in out.stdout and server.stats()["revocations"] == 2, out.stdout


@pytest.mark.parametrize("flags", [["--no-prm"], ["--no-prm", "--no-as-metadata"]])
def test_a_2025_03_26_server_logs_in_at_its_origin(start, tmp_path, flags):
    # no protected resource metadata: the server's origin is the authorization server, its
    # metadata at the root well-known URL; with none there either, /authorize, /token, /register
    server = start("--no-resource-metadata", *flags)
    world = World(tmp_path, server)
    login(world)
    stats = server.stats()
    assert stats["registrations"] == 1 and stats["authorizations"] == 1
    assert stats["grants"] == [{"grant_type": "authorization_code", "resource": server.url}]
    assert world.post(world.auth())[0] == 200


@pytest.mark.parametrize("cimd", [True, False], ids=["server-takes-them", "server-does-not"])
def test_a_client_metadata_document_url_is_the_client_id(start, tmp_path, cimd):
    # the server lists client_id_metadata_document_supported: the settings' URL is the client_id,
    # with no registration; a server that does not: dynamic registration, as without the setting
    server = start(*(["--cimd"] if cimd else []))
    doc = "https://client.example/abstract/client.json"
    world = World(tmp_path, server, settings={"servers": {"remote": {"oauth": {
        "client_metadata_url": doc}}}})
    login(world)
    stats = server.stats()
    assert stats["registrations"] == (0 if cimd else 1)
    assert (stats["authorize_clients"] == [doc]) == cimd, stats["authorize_clients"]
    assert world.post(world.auth())[0] == 200


def test_no_registration_and_no_client_id_says_what_to_set(start, tmp_path):
    failed_login(start, tmp_path, "--no-registration", words="servers.remote.oauth.client_id")


def test_headless_login_by_pasting_the_redirect(start, tmp_path):
    server = start()
    world = World(tmp_path, server, browser="none")  # a browser that does nothing
    proc = subprocess.Popen([sys.executable, str(ABSTRACT), "--login", "remote"], env=world.env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url: List[str] = []

        def read_url() -> None:
            for line in proc.stdout:
                if "/authorize?" in line:
                    url.append(line.strip())
                    return

        reader = threading.Thread(target=read_url, daemon=True)
        reader.start()
        reader.join(WAIT)
        assert url, "no authorization URL printed"

        class Stop(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None  # the user's browser elsewhere ends on a page that does not load

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), Stop)
        with pytest.raises(urllib.error.HTTPError) as e:
            opener.open(url[0], timeout=WAIT)
        location = e.value.headers["Location"]
        e.value.close()
        assert location.startswith("http://127.0.0.1:") and "code=" in location
        proc.stdin.write(location + "\n")
        proc.stdin.flush()
        assert proc.wait(WAIT) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
    assert world.saved()["tokens"]["access_token"]


def test_step_up_on_insufficient_scope(start, tmp_path, monkeypatch):
    server = start("--step-up")
    world = World(tmp_path, server)
    login(world)
    auth = world.auth(monkeypatch=monkeypatch)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "admin_echo", "arguments": {"text": "x"}}}
    with pytest.raises(abstract._HttpError) as e:
        world.post(auth, call)
    assert "More permissions are needed (a step-up login)" in str(e.value)
    auth.login.join(WAIT)
    assert server.stats()["authorize_scopes"][-1] == ["mcp", "admin"]  # the union of scopes
    status, _ = world.post(auth, call)
    assert status != 403  # the new token carries scope admin


def test_step_up_right_after_a_login_abstract_started(start, tmp_path, monkeypatch, caplog):
    """The call made again as soon as "logged in" is logged gets its step-up login, though the
    first login's thread has not ended yet (here: held in its log line)."""
    server = start("--step-up")
    world = World(tmp_path, server)
    auth = world.auth(monkeypatch=monkeypatch)
    reached, release = threading.Event(), threading.Event()

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().endswith("logged in") and not reached.is_set():
                reached.set()
                release.wait(WAIT)

    caplog.set_level(logging.INFO, logger="abstract")
    hold = Hold()
    logging.getLogger("abstract").addHandler(hold)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "admin_echo", "arguments": {"text": "x"}}}
    try:
        with pytest.raises(abstract._HttpError) as e:
            world.post(auth, call)
        assert "A login is needed" in str(e.value)
        first = auth.login
        assert reached.wait(WAIT), "the first login did not finish"
        assert first.is_alive()  # its thread is still on its way out
        with pytest.raises(abstract._HttpError) as e:
            world.post(auth, call)
        assert "More permissions are needed (a step-up login)" in str(e.value)
        assert auth.login is not first  # a second login started
    finally:
        release.set()
        logging.getLogger("abstract").removeHandler(hold)
    auth.login.join(WAIT)
    first.join(WAIT)
    assert server.stats()["authorize_scopes"][-1] == ["mcp", "admin"]
    assert server.stats()["authorizations"] == 2
    status, _ = world.post(auth, call)
    assert status != 403  # the new token carries scope admin


def test_a_call_through_abstract_starts_the_login_then_works(start, world, tmp_path):
    """Abstract serving (a subprocess, as under an MCP client): the first call to the remote
    server answers what is happening and what to do, the browser finishes the login, the next
    call goes through; --check then shows the token's expiry."""
    server = start()
    world.servers["remote"] = {"type": "http", "url": server.url}
    folder = tmp_path / "xdg" / "abstract" / "oauth"
    log = tmp_path / "opened.log"
    env = world.env(XDG_CONFIG_HOME=str(tmp_path / "xdg"), FAKE_BROWSER_LOG=str(log),
                    BROWSER=f"{_q(sys.executable)} {_q(HERE / 'fake_browser.py')} %s")
    proxy = world.start(env=env)
    first = proxy.upstream("remote", "echo", {"text": "hi"}, timeout=WAIT)
    text = first["content"][0]["text"]
    assert first.get("isError") and "A login is needed. A browser window was opened" in text, text
    assert "--login remote" in text
    # said once, cleanly: the server named once, no handshake failure around it
    assert text.count("server 'remote'") == 1 and "handshake" not in text, text
    wait_for(lambda: logged_in(folder), timeout=WAIT, what="the login the browser finishes")
    again = proxy.upstream("remote", "echo", {"text": "hi"}, timeout=WAIT)
    assert not again.get("isError") and again["content"][0]["text"] == "hi", again
    saved = json.loads(next(folder.glob("*.json")).read_text())
    token = saved["issuers"][saved["issuer"]]["tokens"]["access_token"]
    check = world.check(env=env)
    out = check.stdout.decode() + check.stderr.decode()
    assert "remote: logged in (token expires in" in out, out
    assert token not in out


def test_calls_while_a_login_waits_do_not_hold_back_the_call_after_it(start, world, tmp_path):
    """Several calls before the login is finished (each handshake stops at the 401) are not
    crashes: the call right after the login goes through, with no restart backoff."""
    server = start()
    world.servers["remote"] = {"type": "http", "url": server.url}
    folder = tmp_path / "xdg" / "abstract" / "oauth"
    env = world.env(XDG_CONFIG_HOME=str(tmp_path / "xdg"), BROWSER=f"{_q(sys.executable)} -c pass")
    proxy = world.start(env=env)
    texts = [proxy.upstream("remote", "echo", {"text": "hi"}, timeout=WAIT)["content"][0]["text"]
             for _ in range(4)]
    for text in texts:
        assert "A login is needed" in text and "not restarted" not in text, text
    url = texts[-1].split("(or open ", 1)[1].split(" yourself)", 1)[0]
    assert server.stats()["authorizations"] == 0
    subprocess.run([sys.executable, str(HERE / "fake_browser.py"), url], timeout=WAIT, check=True)
    wait_for(lambda: logged_in(folder), timeout=WAIT, what="the login the browser finishes")
    again = proxy.upstream("remote", "echo", {"text": "hi"}, timeout=WAIT)
    assert not again.get("isError") and again["content"][0]["text"] == "hi", again
    assert server.stats()["authorizations"] == 1  # one login, not one per call


class Refresher:
    """tests/remote/refresher.py: one more Abstract using the world's saved login, in a process
    of its own, its refresh held at gates this test opens (`go`, `ok`)."""

    def __init__(self, world: World, offset: float) -> None:
        self.proc = subprocess.Popen([sys.executable, str(HERE / "refresher.py"), str(ABSTRACT.parent),
                                      world.server.url, str(offset)], env=world.env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.seen: List[str] = []
        threading.Thread(target=lambda: [self.lines.put(ln.rstrip("\n")) for ln in self.proc.stdout],
                         daemon=True).start()
        self.expect("ready")

    def send(self) -> None:
        self.proc.stdin.write("ok\n")
        self.proc.stdin.flush()

    def expect(self, *starts: str) -> str:
        """The next line that starts with one of `starts` (other lines are kept in `seen`)."""
        deadline = time.monotonic() + WAIT
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"none of {starts} within {WAIT} s; seen {self.seen}, "
                                     f"stderr {self.proc.stderr.read() if self.proc.poll() is not None else ''}")
            self.seen.append(line)
            if line.startswith(starts):
                return line

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            stream.close()


def test_two_abstracts_sharing_a_login_refresh_it_once(start, tmp_path):
    """Two Abstracts with one login folder (Claude Desktop's and Claude Code's) find its token
    about to expire at the same moment. The server rotates refresh tokens, so only one of them
    may spend the refresh token: the first refreshes (held by the test after the server's answer,
    before saving), the second waits for the login's lock file, then uses the token the first
    saved. Without the lock the second spends the same refresh token, is refused (invalid_grant)
    and drops the login: a needless new login."""
    server = start()
    world = World(tmp_path, server)
    login(world)
    spent = world.saved()["tokens"]["refresh_token"]
    offset = 3600 - 30  # the saved token, by these clocks, has 30 s left: refreshed first
    a, b = Refresher(world, offset), Refresher(world, offset)
    try:
        a.send()  # go
        a.expect("token-request")
        a.send()
        a.expect("token-answer")  # the new tokens are in, not saved yet
        b.send()  # go
        got = b.expect("token-request", "log: remote: waiting for another Abstract")
        b_end = ""
        if got == "token-request":  # no lock kept it out: let it spend the same refresh token
            b.send()
            b.expect("token-answer")
            b.send()
            b_end = b.expect("status", "error")
        a.send()
        assert a.expect("status", "error") == "status 200", a.seen
        b_end = b_end or b.expect("status", "error")
        assert b_end == "status 200", b.seen
    finally:
        a.stop()
        b.stop()
    grants = [g["grant_type"] for g in server.stats()["grants"]]
    assert grants == ["authorization_code", "refresh_token"]  # one refresh, one login
    assert world.saved()["tokens"]["refresh_token"] not in (spent, None)
    assert world.post(world.auth())[0] == 200  # and the saved login still works
    (lock,) = world.folder.glob("*.lock")
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
