"""Review of issue 24's upstream bounds (items 3, 11, 12, 13) and secrets (items 5, 8, 9): what
the review found, each proved through the wire against real subprocesses (Abstract, and the
stdlib fakes of tests/httpfake.py) where it can be.

- Exactly once: a remote server's error that merely mentions a session (a tool's own error,
  over HTTP 400 or 404) is its answer to a request it ran, and a task's tasks/result refused
  with its session is a call that ran: neither is sent again. A plain-text 400 naming the
  session id (older Python SDK releases) is a lost session.
- Secrets: an isError result's structuredContent is masked; plain (not secret-named) query and
  header values under 8 characters are not; a URL's password in a local server's argument or
  env is; a remote entry's URL or header that HTTP cannot carry is refused when read (http.client
  quoted it); OAuth JWTs are taken (a second _TOKEN_RE had replaced the OAuth one).
- The --http link server drops trickling connections too at its cap, and exits at once when
  every slot is a stalled download; an upstream's steady stderr flood is not told line by line.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import text_of, wait_for
from httpfake import EchoMcp
from test_secrets import OWN_LOGIN_FOLDER, _save_login
from test_secrets import _env as _login_env
from test_upstream_bounds import sessions  # noqa: F401 (a fixture)

STATIC = "STATICTOKEN_r3_a1b2c3d4e5"
QUERY = "QUERYSECRET_r3_q1w2e3r4"


# -- exactly once: only the session's own loss is sent again


@pytest.mark.parametrize("status,code,message", [
    # a browser-automation tool whose argument is named session_id: it ran, and failed
    (400, -32000, "Error: session_id 'tab-7' is not open in this browser"),
    (400, -32000, "Database session expired while saving the row"),
    (400, -32602, "Invalid session ID argument: 'tab-7'"),
    # a server that maps its tools' errors to HTTP statuses: "not found" as 404, its id ours
    (404, -32603, "file not found: /data/report.csv"),
])
def test_a_tool_error_that_mentions_a_session_is_not_sent_again(world, sessions, status, code,
                                                               message):
    """Before: any HTTP 400 whose JSON-RPC error said "session", and any 404, were taken for a
    lost session and the request sent again in a new one: a tools/call that had run ran twice.
    Now only a 400 naming the session id header (code -32000, -32001 or -32600), or a 404 that is
    not the request's own JSON-RPC error, is."""
    f = sessions()
    world.servers["phoenix"] = {"type": "http", "url": f.url}
    p = world.start()
    assert text_of(p.upstream("phoenix", "echo", {"text": "up"})) == "up"
    f.count_error = (status, code, message)
    res = p.upstream("phoenix", "count", {"key": "k"})
    assert res.get("isError") and message[:20] in text_of(res), res
    assert f.counts == {"k": 1}, "the call ran twice"
    assert len(f.calls()) == 2
    f.count_error = None
    assert text_of(p.upstream("phoenix", "count", {"key": "k"})) == "2"  # the session still works


# -- secrets: every text of an upstream's error


def test_an_is_error_results_structured_content_is_masked_too(world, tmp_path):
    """The text items of an upstream's isError result were masked, its structuredContent (keys
    and values) not: the model read the Bearer token and query secret there."""
    f = EchoMcp()
    try:
        f.structured_error = True
        world.servers["remote"] = {"type": "http", "url": f"{f.url}?key={QUERY}",
                                   "headers": {"Authorization": f"Bearer {STATIC}"}}
        p = world.start("--expose", "both", str(world.dir), env=world.env())
        direct = p.request("tools/call", {"name": "remote__is_error", "arguments": {}})["result"]
        meta = p.upstream("remote", "is_error")
        for res in (direct, meta):
            shown = json.dumps(res)
            assert res.get("isError") and "***" in shown, res
            assert STATIC not in shown and QUERY not in shown, shown
        assert direct["structuredContent"]["request"]["auth"] == "***"
    finally:
        f.close()


def test_plain_query_and_header_values_are_not_masked_in_every_text(world, tmp_path):
    """Every URL query value and header value of 4 characters or more was a secret for the
    whole run: `?mode=full&region=europe` made every "full" and "europe" in every error and log
    line "***" ("the disk is ***"). A value is masked whatever its length (from 4) when its
    name says it is a secret (key, token, Authorization, ...), others from 8 characters."""
    f = EchoMcp()
    try:
        world.servers["remote"] = {"type": "http",
                                   "url": f"{f.url}?mode=full&region=europe&key=k3y9&q={QUERY}",
                                   "headers": {"Authorization": "Bearer s3cr", "X-Team": "mode",
                                               "User-Agent": "acme-client (production-build)"}}
        p = world.start(str(world.dir), env=world.env())
        text = text_of(p.upstream("remote", "http400"))
        assert "mode=full&region=europe&key=***&q=***" in text, text
        assert '"auth": "***"' in text, text
        # (a plain header's whole value is masked, not each of its words everywhere)
        text = text_of(p.upstream("remote", "(production-build)"))
        assert "'(production-build)'" in text, text
    finally:
        f.close()


# -- the --http link server at its connection cap


@pytest.mark.parametrize("sent", [b"G", b"GET /cache/x HTTP/1.1\r\nHost: a\r\n"])
def test_a_link_is_served_while_300_connections_that_sent_part_of_a_request_are_held(world, sent):
    """Only connections that had sent nothing were dropped to make room: 300 that each sent one
    byte of a request line (or all but the end of the headers) and then nothing held every slot,
    and a signed GET waited for their 10 s header deadlines. At the cap, the oldest connection
    whose request has not come whole is dropped when none is silent; a download under way is
    never one of them."""
    world.fake("up")
    world.settings = {"output_cache": {"min_size": 1000}}
    env = world.env(ABSTRACT_CACHE_SECRET="k")
    p = world.start("--http", "127.0.0.1:0", str(world.dir), env=env)
    url = p.upstream("up", "echo", {"text": "y" * 2000})["structuredContent"]["retrieve_url"]
    where = urllib.parse.urlsplit(url)
    held = [socket.create_connection((where.hostname, where.port), timeout=5) for _ in range(300)]
    try:
        for s in held:
            s.sendall(sent)
        t0 = time.monotonic()
        with urllib.request.urlopen(url, timeout=8) as resp:
            assert resp.status == 200 and resp.read() == b"y" * 2000
        took = time.monotonic() - t0
        assert took < 2.0, f"the download took {took:.2f} s with 300 trickling connections held"
    finally:
        for s in held:
            s.close()
    assert p.request("ping")["result"] == {}


# -- a remote entry's URL and headers: what HTTP cannot carry is refused when the config is read


@pytest.mark.parametrize("url,headers,said", [
    # http.client's InvalidURL quoted the path and query: the secret, its \x01 escaped, unmasked
    ("?key=QUERYSECRET_r3_zz\x01", {}, "holds whitespace, control characters"),
    ("?key=QUERYSECRET_r3_zz%20 x", {}, "holds whitespace, control characters"),
    ("?key=QUERYSECRET_r3_zz\udcff", {}, "a lone surrogate"),
    # "cannot reach <url>: 'latin-1' codec can't encode character '\u20ac' in position 16"
    ("", {"X-Api-Key": "APIKEYSECRET_r3_\u20ac"}, "is not a valid HTTP header"),
    ("", {"X-Api-Key": "APIKEYSECRET_r3_\udcff"}, "is not a valid HTTP header"),
    ("", {"X-Api-Key": "APIKEYSECRET_r3_\x1b[2J"}, "is not a valid HTTP header"),
])
def test_a_remote_entry_http_cannot_carry_is_refused_naming_what_and_showing_no_secret(
        world, url, headers, said):
    f = EchoMcp()
    try:
        world.servers["remote"] = {"type": "http", "url": f.url + url, "headers": headers}
        p = world.start(str(world.dir), env=world.env())
        res = p.upstream("remote", "echo")
        text = text_of(res)
        assert res.get("isError") and said in text, text
        assert "SECRET_r3" not in text and "codec" not in text and "\x1b" not in text, text
        assert not f.http.seen  # (nothing was sent)
        check = world.check(env=world.env())
        out = check.stdout.decode() + check.stderr.decode()
        assert said in out and "SECRET_r3" not in out and "Traceback" not in out, out
        p.stop()
        assert "SECRET_r3" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]
    finally:
        f.close()


def test_http_clients_errors_that_quote_the_url_or_a_header_are_not_quoted():
    """http.client's InvalidURL quotes the request's path and query (a redirect's Location, say)
    and its UnicodeEncodeError the character of a header value: neither is shown."""
    import http.client

    import abstract

    bad_url = http.client.InvalidURL("URL can't contain control characters. "
                                     "'/mcp?key=QUERYSECRET_r3\\x01' (found at least '\\x01')")
    err = abstract._net_error(bad_url, "http://h/mcp?key=x", 5, 5, False)
    assert "QUERYSECRET" not in str(err) and "percent-encoded" in str(err), str(err)
    bad_header = UnicodeEncodeError("latin-1", "APIKEY_r3_\u20ac", 10, 11, "not in range(256)")
    err = abstract._net_error(bad_header, "http://h/mcp", 5, 5, False)
    assert "codec" not in str(err) and "header value" in str(err), str(err)


def test_a_task_whose_session_is_lost_while_it_runs_is_not_called_again(world, sessions):
    """The tools/call was answered (a task was made), then the server forgot the session and
    answered tasks/result with 404: that _SessionGone reached _anew, which sent the tools/call
    again in a new session: the tool ran twice."""
    f = sessions()
    f.tasks = True
    world.servers["phoenix"] = {"type": "http", "url": f.url}
    p = world.start()
    res = p.upstream("phoenix", "job")
    text = text_of(res)
    assert res.get("isError") and "may have done part of the work" in text, text
    assert f.counts == {"job": 1}, "the task-augmented call ran twice"


# -- an upstream's log lines on Abstract's stderr


def test_a_steady_stderr_flood_does_not_turn_each_dropped_line_into_a_notice(world):
    """The count of dropped lines was written at every pause of the upstream's stderr, and a
    reader that keeps up with a steady flood sees a pause after every line: each dropped line
    became a "dropped 1 log line" line, so the flood reached stderr line for line. The count is
    told at most once a second at a pause (and before the next line that passes, and at the
    end)."""
    world.fake("drippy", "--stderr-trickle", "3000")
    t0 = time.monotonic()
    p = world.start()
    assert text_of(p.upstream("drippy", "echo", {"text": "up"})) == "up"

    def told() -> tuple:
        shown = sum(1 for ln in p.stderr_lines if "[drippy] drip " in ln)
        notices = [ln for ln in p.stderr_lines if "log line" in ln and "'drippy'" in ln]
        dropped = sum(int(m.group(1).replace(",", "")) for ln in notices
                      for m in [re.search(r"dropped ([\d,]+) log lines?", ln)] if m)
        return shown, len(notices), dropped

    wait_for(lambda: told()[0] + told()[2] >= 2900, what="the drips shown or counted")
    took = time.monotonic() - t0
    p.stop()  # (the end of the run tells what is left)
    shown, notices, dropped = told()
    assert 2900 <= shown + dropped <= 3000, (shown, dropped)
    # (at most one before each line that passes, 20 a second, and one a second at a pause)
    assert notices <= 25 * took + 10, f"{notices} notices for {dropped} dropped in {took:.1f} s"


def test_a_password_in_a_local_servers_url_argument_or_env_is_masked(world):
    """A database URL given to a local server (server-postgres takes it as its argument; others
    as DATABASE_URL) was shown whole in the server's errors, which quote its command line and
    its stderr: the model read the password. Its password (and secret-named query values) are
    masked as a remote URL's are."""
    db = "postgresql://app:PGSECRET_r3_pw@127.0.0.1/db?sslmode=verify-full"
    world.fake("pg", "--exit-at-start", "3", db,
               env={"DATABASE_URL": "mysql://app:MYSECRET_r3_pw@db/x?password=QSECRET_r3_pw"})
    p = world.start()
    res = p.upstream("pg", "echo", {"text": "x"})
    text = text_of(res)
    # (a plain query value is no secret: shown)
    assert res.get("isError") and db.replace("PGSECRET_r3_pw", "***") in text, text
    check = world.check(env=world.env())
    shown = text + check.stdout.decode() + check.stderr.decode()
    p.stop()
    for secret in ("PGSECRET_r3", "MYSECRET_r3", "QSECRET_r3"):
        assert secret not in shown + p.stderr, secret


# -- OAuth tokens Abstract takes


JWT = ("eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTEiLCJhdWQiOiJtY3AifQ."
       "c2lnbmF0dXJlK3dpdGgvc2xhc2hlcz0=")


@OWN_LOGIN_FOLDER
def test_a_jwt_access_token_is_taken_saved_and_refreshed(world, tmp_path):
    """The cache's _TOKEN_RE ([A-Za-z0-9_-]{16,64}) was defined after the OAuth one of the same
    name and replaced it: every token with a '.', '+', '/' or '=' or over 64 characters (a JWT,
    as most authorization servers issue) was refused as one 'an HTTP header cannot carry', and
    a saved one was not used: no login could work."""
    f = EchoMcp(bearer=JWT)
    try:
        _save_login(tmp_path, f, {"access_token": JWT, "expires_at": time.time() + 3600,
                                  "lifetime": 3600})
        world.servers["remote"] = {"type": "http", "url": f.url}
        p = world.start(str(world.dir), env=_login_env(world, tmp_path))
        res = p.upstream("remote", "echo")
        assert not res.get("isError") and JWT in text_of(res), res  # (a result: as it came)
        p.stop()
        f.bearer = JWT + "x"  # the saved one expired: a refresh brings a JWT again
        f.token_answer = {"access_token": JWT + "x", "token_type": "Bearer", "expires_in": 3600,
                          "refresh_token": "RT.with/slash+plus=" + "r" * 100}
        saved = _save_login(tmp_path, f, {"access_token": JWT, "refresh_token": "RT_r3_0123456789",
                                          "expires_at": time.time() - 10, "lifetime": 3600})
        p = world.start(str(world.dir), env=_login_env(world, tmp_path))
        res = p.upstream("remote", "echo")
        assert not res.get("isError"), res
        assert JWT + "x" in saved.read_text()
    finally:
        f.close()


def test_no_top_level_name_of_abstract_is_bound_twice():
    """Two parts each defined _TOKEN_RE; the later one (the cache's) silently replaced the
    earlier (OAuth's) for every caller. A module-level name is bound once."""
    import ast
    import collections

    import abstract

    tree = ast.parse(Path(abstract.__file__).read_text(encoding="utf-8"))
    lines = collections.defaultdict(list)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            lines[node.name].append(node.lineno)
        for target in getattr(node, "targets", [getattr(node, "target", None)]):
            if isinstance(target, ast.Name):
                lines[target.id].append(node.lineno)
    assert {n: at for n, at in lines.items() if len(at) > 1} == {}


def test_an_older_python_sdks_plain_400_for_an_unknown_session_opens_a_new_one(world, sessions):
    """The Python SDK before its 404 (FastMCP servers deployed from it) answered an unknown
    session id with a plain-text 400 "Bad Request: No valid session ID provided": the first call
    after such a server restarted failed. A 400 that is not JSON-RPC (no tool's answer) naming
    the session id counts as the session's loss."""
    f = sessions()
    f.gone_answer = (400, b"Bad Request: No valid session ID provided", "text/plain")
    world.servers["phoenix"] = {"type": "http", "url": f.url}
    p = world.start()
    assert text_of(p.upstream("phoenix", "count", {"key": "k"})) == "1"
    f.restart()
    res = p.upstream("phoenix", "count", {"key": "k"})
    assert not res.get("isError") and text_of(res) == "2", res
    assert f.counts == {"k": 2}


def test_abstract_exits_at_once_while_the_link_servers_slots_are_all_downloads(world):
    """At the cap with every slot a download whose reader stopped reading, a further connection
    left the accept loop waiting for a free slot, and stop() (httpd.shutdown) waited for that
    loop: Abstract's exit took the idle timeout (30 s) instead of its 3.5 s budget."""
    import subprocess

    world.fake("up")
    world.settings = {"output_cache": {"min_size": 1000}, "http_max_connections": 2}
    env = world.env(ABSTRACT_CACHE_SECRET="k")
    p = world.start("--http", "127.0.0.1:0", str(world.dir), env=env)
    res = p.upstream("up", "echo", {"text": "d" * (12 << 20)}, timeout=60)
    url = res["structuredContent"]["retrieve_url"]
    where = urllib.parse.urlsplit(url)
    held = []
    try:
        for _ in range(2):  # two downloads that stop reading: the server's writes stall
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect((where.hostname, where.port))
            s.sendall(f"GET {where.path}?{where.query} HTTP/1.0\r\n\r\n".encode())
            held.append(s)
        assert held[0].recv(12) == b"HTTP/1.1 200"
        assert held[1].recv(12) == b"HTTP/1.1 200"
        held.append(socket.create_connection((where.hostname, where.port), timeout=5))  # waits
        t0 = time.monotonic()
        p.close_stdin()
        try:
            p.proc.wait(20)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - t0
        assert p.proc.returncode is not None and took < 8, f"Abstract took {took:.1f} s to exit"
    finally:
        for s in held:
            s.close()


def test_an_upstream_error_with_deeply_nested_data_fails_the_call_at_once(world):
    """Masking an upstream error's `data` recursed once per level: 700 nested lists (JSON reads
    them) raised RecursionError on the reader, the error was never given to its call, and the
    call waited for its timeout. The data nested too deeply is replaced by a note."""
    f = EchoMcp()
    try:
        f.error_data = json.loads("[" * 700 + "1" + "]" * 700)
        world.servers["remote"] = {"type": "http", "url": f.url,
                                   "headers": {"Authorization": f"Bearer {STATIC}"}}
        world.settings = {"timeout_seconds": 60}
        p = world.start("--expose", "both", str(world.dir), env=world.env())
        t0 = time.monotonic()
        resp = p.request("tools/call", {"name": "remote__rpc_error", "arguments": {}}, timeout=30)
        assert time.monotonic() - t0 < 10
        assert resp["error"]["code"] == -32000 and "bad" in resp["error"]["message"], resp
        assert STATIC not in json.dumps(resp)
        p.stop()
        assert "RecursionError" not in p.stderr, p.stderr[-3000:]
    finally:
        f.close()
