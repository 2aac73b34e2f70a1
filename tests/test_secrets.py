"""Secrets and hostile text (issue 24, items 5, 8 and 9): every secret Abstract holds (a remote
entry's header values and URL query values, OAuth access and refresh tokens) is masked in every
error, log line and CLI report, whatever path made the text; a token a header cannot carry is
refused when it arrives and never saved; control characters an upstream or an authorization
server sends are escaped, and a metadata URL holding them is refused; no string from a client
(lone surrogates, NUL) makes a tool answer -32603.

Abstract runs as a real subprocess in front of tests/httpfake.py's EchoMcp, a stdlib MCP server
whose failures quote the request back (and which is its own OAuth authorization server)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

import abstract
from conftest import ABSTRACT, MODERN_VERSION, text_of
from httpfake import EchoMcp

STATIC = "STATICTOKEN_a1b2c3d4e5"
APIKEY = "APIKEY_z9y8x7w6v5"
QUERY = "QUERYSECRET_q1w2e3r4"
ACCESS = "AT_secret_value_0123456789"
CRLF = "AT_crlf_secret_value\r\nX-Injected: 1"
NO_BROWSER = f"{sys.executable} -c pass"  # $BROWSER: a browser that opens nothing
# the login folder follows XDG_CONFIG_HOME on Linux and other Unixes only: elsewhere these
# tests would write in the user's own (macOS: ~/Library/Application Support; Windows: %APPDATA%)
OWN_LOGIN_FOLDER = pytest.mark.skipif(sys.platform in ("darwin", "win32"),
                                      reason="the login folder is the user's real one here")


@pytest.fixture
def echo():
    made = []

    def make(**kw) -> EchoMcp:
        made.append(EchoMcp(**kw))
        return made[-1]

    yield make
    for f in made:
        f.close()


def _env(world, tmp_path: Path, **extra: str) -> dict:
    return world.env(XDG_CONFIG_HOME=str(tmp_path / "config"), BROWSER=NO_BROWSER,
                     ABSTRACT_LOG_LEVEL="debug", **extra)


def _save_login(tmp_path: Path, f: EchoMcp, tokens: dict) -> Path:
    """A saved login for server `remote` (as --login leaves it); the file's path."""
    store = abstract._TokenStore(environ={"XDG_CONFIG_HOME": str(tmp_path / "config")})
    entry = {"client": {"client_id": "client-1", "token_endpoint_auth_method": "none",
                        "redirect_uris": ["http://127.0.0.1:1/callback"]},
             "token_endpoint": f.base + "/token", "iss_supported": False, "tokens": tokens}
    store.save("remote", {"server_url": f.url, "issuer": f.base, "resource": f.url,
                          "issuers": {f.base: entry}})
    return store._path("remote")


def _no_secret(text: str, *secrets: str) -> None:
    for s in secrets:
        assert s not in text, f"{s!r} shown in: {text[:2000]}"


def _failures(p) -> dict:
    """Each failing tool's text, by meta mode's call_tool and by direct mode's own name."""
    out = {}
    for tool in ("rpc_error", "http500", "http400", "is_error"):
        res = p.upstream("remote", tool)
        assert res.get("isError"), res
        out[tool] = text_of(res)
        resp = p.request("tools/call", {"name": f"remote__{tool}", "arguments": {}})
        out[f"direct {tool}"] = (resp["error"]["message"] + json.dumps(resp["error"].get("data"))
                                 if "error" in resp else text_of(resp["result"]))
    return out


def test_static_headers_and_url_query_values_are_masked_in_every_failure(world, echo, tmp_path):
    """A JSON-RPC error over HTTP 200 echoing the request came back unmasked (item 5), with the
    server's ESC sequence raw (item 8); 500 and 400 bodies, an isError result, and the log lines
    are checked the same way."""
    f = echo()
    world.servers["remote"] = {"type": "http", "url": f"{f.url}?key={QUERY}",
                               "headers": {"Authorization": f"Bearer {STATIC}", "X-Api-Key": APIKEY}}
    p = world.start("--expose", "both", str(world.dir), env=_env(world, tmp_path))
    for what, text in _failures(p).items():
        _no_secret(text, STATIC, APIKEY, QUERY)
        assert "***" in text, (what, text)
        if not what.endswith("is_error"):  # (an isError result is the server's own: data)
            assert "\x1b" not in text and "\\x1b[31m" in text, (what, text)
    assert f.http.seen[-1][2]["Authorization"] == f"Bearer {STATIC}"  # (sent all the same)
    listless = echo()
    listless.list_fails = True
    world.servers["listless"] = dict(world.servers["remote"], url=f"{listless.url}?key={QUERY}")
    check = world.check(env=_env(world, tmp_path))
    out = check.stdout.decode() + check.stderr.decode()
    assert "listless  FAILED: bad \\x1b[31m" in out and '"auth": "***"' in out, out
    _no_secret(out, STATIC, APIKEY, QUERY)
    assert "\x1b" not in out
    p.stop()
    assert "refused notifications/initialized" in p.stderr, p.stderr[-3000:]
    _no_secret(p.stderr, STATIC, APIKEY, QUERY)
    assert "\x1b" not in p.stderr


@OWN_LOGIN_FOLDER
def test_an_oauth_access_token_is_masked_in_every_failure_and_log_line(world, echo, tmp_path):
    f = echo(bearer=ACCESS)
    _save_login(tmp_path, f, {"access_token": ACCESS, "expires_at": time.time() + 3600,
                              "lifetime": 3600})
    world.servers["remote"] = {"type": "http", "url": f.url}
    p = world.start("--expose", "both", str(world.dir), env=_env(world, tmp_path))
    for what, text in _failures(p).items():
        _no_secret(text, ACCESS)
        assert "***" in text, (what, text)
    # an ordinary result is the server's data, relayed as it came (docs/reference/errors.md)
    assert ACCESS in text_of(p.upstream("remote", "echo"))
    p.stop()
    assert "refused notifications/initialized" in p.stderr, p.stderr[-3000:]
    _no_secret(p.stderr, ACCESS)


@OWN_LOGIN_FOLDER
def test_a_token_a_header_cannot_carry_is_refused_and_never_saved(world, echo, tmp_path):
    """The refresh brings an access token holding CR LF: the call fails saying so (not with
    http.client's 'Invalid header value' quoting it), the file keeps the old tokens, and no
    request ever carried the injected header."""
    f = echo(bearer="AT_never_given_0123456789")
    f.token_answer = {"access_token": CRLF, "token_type": "Bearer", "expires_in": 3600,
                      "refresh_token": "RT_next_0123456789"}
    saved = _save_login(tmp_path, f, {"access_token": "AT_old_value_0123456789",
                                      "refresh_token": "RT_value_0123456789",
                                      "expires_at": time.time() - 10, "lifetime": 3600})
    world.servers["remote"] = {"type": "http", "url": f.url}
    p = world.start(str(world.dir), env=_env(world, tmp_path))
    for _ in range(2):
        res = p.upstream("remote", "echo")
        assert res.get("isError"), res
        text = text_of(res)
        assert "token endpoint's access_token holds characters an HTTP header cannot" in text, text
        assert "not saved" in text and "AT_crlf" not in text and "Invalid header" not in text, text
    assert [g["grant_type"] for g in f.grants][:1] == ["refresh_token"]
    kept = saved.read_text()
    assert "AT_crlf" not in kept and "X-Injected" not in kept and "AT_old_value" in kept
    assert not [h for _, _, h, _ in f.http.seen if "X-Injected" in h]
    p.stop()
    _no_secret(p.stderr, "AT_crlf", "RT_value_0123456789", "AT_old_value_0123456789")


@OWN_LOGIN_FOLDER
def test_a_saved_token_a_header_cannot_carry_is_not_used(world, echo, tmp_path):
    f = echo(bearer=ACCESS)
    _save_login(tmp_path, f, {"access_token": CRLF, "expires_at": time.time() + 3600})
    world.servers["remote"] = {"type": "http", "url": f.url}
    p = world.start(str(world.dir), env=_env(world, tmp_path))
    res = p.upstream("remote", "echo")
    assert res.get("isError") and "A login is needed" in text_of(res), res
    assert not [h for _, _, h, _ in f.http.seen if "AT_crlf" in h.get("Authorization", "")]
    p.stop()
    assert "the saved access_token holds characters an HTTP header cannot carry" in p.stderr
    assert "AT_crlf" not in p.stderr


HOSTILE = "/authorize\x1b]8;;https://evil.example/\x07click here\x1b]8;;\x07"


@OWN_LOGIN_FOLDER
@pytest.mark.parametrize("where", ["authorization_endpoint", "registration_endpoint", "challenge"])
def test_metadata_urls_with_control_characters_are_refused(world, echo, tmp_path, where):
    """An authorization_endpoint holding ESC and BEL was put raw into the model's "A login is
    needed ... open <url>" error; a registration endpoint and a 401's resource_metadata URL
    holding them are refused the same way."""
    f = echo(bearer=ACCESS)
    if where == "challenge":
        f.challenge = f'Bearer resource_metadata="{f.base}/.well-known/oauth-protected-resource\x07\x1b[2J"'
    else:
        f.meta[where] = f.base + HOSTILE
    world.servers["remote"] = {"type": "http", "url": f.url}
    p = world.start(str(world.dir), env=_env(world, tmp_path))
    res = p.upstream("remote", "echo")
    text = text_of(res)
    assert res.get("isError") and "holds whitespace or control characters" in text, text
    assert "\x1b" not in text and "\x07" not in text and "A login is needed" not in text, text
    p.stop()
    assert "\x1b" not in p.stderr and "\x07" not in p.stderr


@OWN_LOGIN_FOLDER
def test_login_in_a_terminal_refuses_hostile_metadata_and_prints_no_control_character(world, echo, tmp_path):
    """--login printed an authorization_endpoint's ESC and BEL sequences raw to the terminal. (A
    pasted answer ends the login at once on the code without the check.)"""
    import subprocess

    f = echo(bearer=ACCESS)
    f.meta["authorization_endpoint"] = f.base + HOSTILE
    world.servers["remote"] = {"type": "http", "url": f.url}
    run = subprocess.run([sys.executable, str(ABSTRACT), "--login", "remote"],
                         env=_env(world, tmp_path), input=b"http://127.0.0.1:1/callback?code=c&state=s\n",
                         capture_output=True, timeout=120)
    out = run.stdout.decode() + run.stderr.decode()
    assert run.returncode == 2, out
    assert "\x1b" not in out and "\x07" not in out, out
    assert "authorization_endpoint" in out and "holds whitespace or control characters" in out, out
    assert "/authorize\\x1b]8;;https://evil.example/\\x07click here" in out, out  # escaped once


# -- item 9: no string from a client makes a tool answer -32603

MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "pytest", "version": "0"}}


def test_a_request_state_with_a_lone_surrogate_is_a_clear_error(world):
    world.fake("up")
    p = world.start()
    resp = p.request("tools/call", {"name": "call_tool", "arguments": {"server": "up", "tool_name": "echo"},
                                    "requestState": "\ud800.abc", "_meta": MODERN_META})
    assert "error" not in resp and resp["result"]["isError"], resp
    assert "requestState is not one Abstract gave" in text_of(resp["result"]), resp


@pytest.mark.parametrize("tool", ["search_stored_outputs", "list_stored_outputs"])
def test_a_server_name_with_a_lone_surrogate_is_a_clear_tool_error(world, tool):
    world.fake("up")
    p = world.start()
    res = p.call_tool(tool, {"server": "\ud800", **({"query": "rows"} if tool.startswith("search") else {})})
    assert res.get("isError") and "Argument 'server' is not valid Unicode" in text_of(res), res
    assert "\\ud800 at character 0" in text_of(res)


def test_no_tool_answers_internal_error_to_lone_surrogates_or_nul(world):
    """Every tool of Abstract's (query_output aside: issue 24's query items), every argument,
    given a lone surrogate and a NUL, through the wire: a tool error or an answer, never -32603
    and never a traceback."""
    world.fake("up")
    world.dir.mkdir()
    data = world.dir / "data.json"
    data.write_text(json.dumps([{"a": 1, "b": "x"}]))
    p = world.start("--memory", str(world.dir))
    plain = {"server": "up", "tool_name": "echo", "tool_args": {"text": "hi"}, "source": str(data),
             "file_path": str(data), "path": str(data)}
    tried = 0
    for t in p.result("tools/list")["tools"]:
        if t["name"] == "query_output":
            continue
        schema = t["inputSchema"]
        for prop, sch in schema.get("properties", {}).items():
            for bad in ("\ud800.abc", "a\x00b"):
                args = {k: plain.get(k, "x") for k in schema.get("required", [])}
                kind = sch.get("type")
                args[prop] = {bad: bad} if kind == "object" else [bad] if kind == "array" else bad
                resp = p.request("tools/call", {"name": t["name"], "arguments": args})
                assert resp.get("error", {}).get("code") != -32603, (t["name"], prop, resp)
                tried += 1
    assert tried > 50
    p.stop()
    assert "Traceback" not in p.stderr, p.stderr[-3000:]


ENVSECRET = "ENVSECRET_k1l2m3n4o5"


def test_a_stdio_servers_secret_env_values_are_masked_in_its_errors_and_stderr(world):
    """A local server's env value named like a secret (SERVICE_API_KEY) quoted in an isError
    result, or on its stderr as it dies (the 'Last stderr lines' of every error that follows,
    list_available_tools' 'not available' line too)."""
    world.fake("up", env={"SERVICE_API_KEY": ENVSECRET, "MODE": "verbose-mode"})
    dying = ("import os, sys; sys.stderr.write('key=' + os.environ['SERVICE_API_KEY'] + "
             "' \\x1b[2J\\n'); sys.exit(3)")
    world.servers["dying"] = {"command": sys.executable, "args": ["-c", dying, "--api-key", "ARGSECRET_1234",
                                                                  "--auth-token=ARGSECRET_5678"],
                              "env": {"SERVICE_API_KEY": ENVSECRET}}
    p = world.start()
    res = p.upstream("up", "result", {"result": {"content": [{"type": "text", "text": f"bad key {ENVSECRET}"}],
                                                 "isError": True}})
    assert res.get("isError") and text_of(res) == "bad key ***", res
    assert ENVSECRET in text_of(p.upstream("up", "echo", {"text": ENVSECRET}))  # data, as it came
    assert "verbose-mode" in text_of(p.upstream("up", "echo", {"text": "verbose-mode"}))
    died = text_of(p.upstream("dying", "anything"))
    listed = text_of(p.call_tool("list_available_tools", {}))
    for text in (died, listed):
        assert "key=*** \\x1b[2J" in text and ENVSECRET not in text and "\x1b" not in text, text
        assert "--api-key *** --auth-token=***" in text and "ARGSECRET" not in text, text
    p.stop()
    assert ENVSECRET not in p.stderr and "\x1b" not in p.stderr


def test_client_secrets_and_tokens_are_known_as_they_arrive(tmp_path):
    """The settings' client_secret is masked from the moment its server's login hook exists; a
    token from a saved file from the moment it is read (the flows above show both on the wire)."""
    store = abstract._TokenStore(environ={"XDG_CONFIG_HOME": str(tmp_path)})
    abstract._OAuth("s", "https://x.example/mcp", {"client_id": "c", "client_secret": "CLIENTSECRET_s1"},
                    store)
    assert abstract._clean("invalid_client: CLIENTSECRET_s1 \x1b[0m") == "invalid_client: *** \\x1b[0m"
    assert abstract._clean("secret=CLIENTSECRET_s1") == "secret=***"
    assert abstract._clean('{"a": "Bearer x"}') == '{"a": "Bearer x"}'  # short and unknown: kept


def test_an_upstream_tool_name_with_a_lone_surrogate_does_not_break_the_tool_search(world):
    """list_available_tools' query indexed a server's tool names in SQLite, which refused a lone
    surrogate (UnicodeEncodeError, -32603). (The fake's argv carries it as byte 0xff.) A name
    with an ESC sequence is listed escaped in the text, as it is in structuredContent."""
    world.fake("up", "--extra-tool", "odd\udcff_lookup", "--extra-tool", "esc\x1b[2J_lookup")
    p = world.start()
    res = p.call_tool("list_available_tools", {"query": "lookup"})
    assert not res.get("isError") and "odd\udcff_lookup" in text_of(res), res
    assert "esc\\x1b[2J_lookup" in text_of(res) and "\x1b" not in text_of(res), res
    assert "esc\x1b[2J_lookup" in [t["tool"] for t in res["structuredContent"]["tools"]]
    assert "\x1b" not in text_of(p.call_tool("list_available_tools", {}))
    p.stop()
    assert "Traceback" not in p.stderr


def test_spent_tokens_are_let_go_before_any_config_secret():
    known = abstract._Secrets()
    known.add_header("Bearer CONFIGSECRET_0001")
    for i in range(abstract._SECRETS_PASSING + 10):
        known.add(f"AT_token_{i:06d}", passing=True)
    last = f"AT_token_{abstract._SECRETS_PASSING + 9:06d}"
    assert known.mask(f"Bearer CONFIGSECRET_0001 {last} AT_token_000000") == "*** *** AT_token_000000"
    assert known.mask("x CONFIGSECRET_0001 y") == "x *** y"  # the Bearer's token alone too


def test_a_secret_variable_expanded_into_args_is_masked_where_the_command_line_is_shown(world):
    """${env:GITHUB_TOKEN} (or ${GITHUB_TOKEN}) as a plain argument (mcp-remote's --header
    'Authorization:${AUTH}' style): the expanded command line in a start error, in
    list_available_tools' 'not available' line and on stderr shows *** for it."""
    token = "ghp_EXPANDEDSECRET_0a9b8c7d"
    dying = "import sys; sys.stderr.write('bad ' + sys.argv[1] + '\\n'); sys.exit(3)"
    world.servers["dying"] = {"command": sys.executable,
                              "args": ["-c", dying, "Authorization:Bearer ${env:GITHUB_TOKEN}",
                                       "${SERVICE_TOKEN}"]}
    p = world.start(env=world.env(GITHUB_TOKEN=token, SERVICE_TOKEN=token[::-1]))
    died = text_of(p.upstream("dying", "anything"))
    listed = text_of(p.call_tool("list_available_tools", {}))
    for text in (died, listed):
        assert "Authorization:Bearer ***" in text and token not in text, text
        assert token[::-1] not in text, text
    p.stop()
    assert token not in p.stderr and token[::-1] not in p.stderr
