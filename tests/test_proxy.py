"""End to end: `python abstract.py DIR` as a subprocess, fake_upstream.py servers behind it."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

import pytest

from conftest import ABSTRACT, FAKE, LEGACY_VERSIONS, MODERN_VERSION, base_env, pid_alive, text_of, wait_for
from fake_upstream import TOOLS

FAKE_TOOLS = [n for n, _, _ in TOOLS]
CORE_TOOLS = ["list_available_tools", "list_tool_details", "call_tool", "list_allowed_directories"]
MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "pytest", "version": "0"}}


def _modern(params: dict = None, **meta) -> dict:
    return dict(params or {}, _meta=dict(MODERN_META, **meta))


@pytest.fixture
def bare(world):
    """Abstract with an empty client config, not yet initialized."""
    return world.start(initialize=False)


# -- legacy era: initialize


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_initialize_answers_the_version_the_client_asked_for(bare, version):
    res = bare.initialize(version)
    assert res["protocolVersion"] == version
    assert res["serverInfo"]["name"] == "abstract"
    assert "tools" in res["capabilities"]
    assert "list_available_tools" in res["instructions"]


@pytest.mark.parametrize("version", ["1999-01-01", MODERN_VERSION, "not a date"])
def test_initialize_with_unknown_version_answers_the_newest_handshake_version(bare, version):
    assert bare.initialize(version)["protocolVersion"] == LEGACY_VERSIONS[0]


def test_initialize_without_version_is_invalid_params(bare):
    resp = bare.request("initialize", {"capabilities": {}})
    assert resp["error"]["code"] == -32602 and "protocolVersion" in resp["error"]["message"]


def test_ping_answers_empty_object(bare):
    bare.initialize()
    assert bare.request("ping", rid=0) == {"jsonrpc": "2.0", "id": 0, "result": {}}


def test_tools_list_right_after_initialized_without_params(bare):
    bare.initialize()
    tools = bare.result("tools/list")["tools"]
    assert [t["name"] for t in tools][:4] == CORE_TOOLS
    for t in tools:
        assert t["inputSchema"]["type"] == "object" and t["description"]
    assert bare.server_requests == []


# -- modern era


def test_server_discover_describes_versions_and_carries_envelope(bare):
    res = bare.result("server/discover", _modern())
    assert res["supportedVersions"][0] == MODERN_VERSION
    assert set(res["supportedVersions"]) == {MODERN_VERSION, *LEGACY_VERSIONS}
    assert res["resultType"] == "complete"
    assert isinstance(res["ttlMs"], int) and res["ttlMs"] >= 0
    assert res["cacheScope"] in ("public", "private")
    assert res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "abstract"
    assert "tools" in res["capabilities"]


def test_server_discover_without_meta_is_invalid_params(bare):
    assert bare.request("server/discover", {})["error"]["code"] == -32602


@pytest.mark.parametrize("method", ["tools/list", "server/discover"])
def test_modern_request_without_capabilities_is_invalid_params(bare, method):
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION}
    resp = bare.request(method, {"_meta": meta})
    assert resp["error"]["code"] == -32602
    assert "clientCapabilities" in resp["error"]["message"]


def test_unsupported_modern_version_is_32022_with_supported_list(bare):
    params = _modern(**{"io.modelcontextprotocol/protocolVersion": "2030-01-01"})
    err = bare.request("tools/list", params)["error"]
    assert err["code"] == -32022
    assert err["data"]["requested"] == "2030-01-01"
    assert MODERN_VERSION in err["data"]["supported"]


def test_modern_results_carry_result_type_and_cache_fields(bare):
    listed = bare.result("tools/list", _modern())
    assert (listed["resultType"], listed["cacheScope"]) == ("complete", "private")
    assert listed["ttlMs"] == 0
    called = bare.result("tools/call", _modern({"name": "list_allowed_directories", "arguments": {}}))
    assert called["resultType"] == "complete"
    assert "ttlMs" not in called and "cacheScope" not in called


def test_legacy_results_carry_no_modern_fields(bare):
    bare.initialize()
    listed = bare.result("tools/list")
    called = bare.call_tool("list_allowed_directories")
    for res in (listed, called):
        assert not {"resultType", "ttlMs", "cacheScope"} & set(res)


# -- Abstract's own tools/list pagination


def test_tools_list_cursor_walk_returns_each_tool_once(bare):
    bare.initialize()
    first = bare.result("tools/list")
    names, res = [], first
    for _ in range(100):
        names += [t["name"] for t in res["tools"]]
        if "nextCursor" not in res:
            break
        res = bare.result("tools/list", {"cursor": res["nextCursor"]})
    assert len(names) == len(set(names)) >= 4
    assert bare.result("tools/list", {"cursor": "0"})["tools"] == first["tools"]
    assert bare.result("tools/list", {"cursor": str(len(names))}) == {"tools": []}


@pytest.mark.parametrize("cursor", ["abc", "-1", "999999", 2, ""])
def test_tools_list_invalid_cursor_is_invalid_params(bare, cursor):
    bare.initialize()
    err = bare.request("tools/list", {"cursor": cursor})["error"]
    assert err["code"] == -32602 and "cursor" in err["message"].lower()


def test_unknown_abstract_tool_is_invalid_params_naming_the_tools(bare):
    bare.initialize()
    err = bare.request("tools/call", {"name": "nope", "arguments": {}})["error"]
    assert err["code"] == -32602
    assert "nope" in err["message"] and "call_tool" in err["message"]


def test_list_allowed_directories_resolves_and_orders_them(world, tmp_path):
    dirs = [tmp_path / "one", tmp_path / "two"]
    proxy = world.start(*map(str, dirs))
    out = proxy.call_tool("list_allowed_directories")["structuredContent"]
    assert out["allowed_directories"] == [str(d.resolve()) for d in dirs]
    assert out["default_directory"] == str(dirs[0].resolve()) and out["total_directories"] == 2
    assert all(d.is_dir() for d in dirs)


# -- discovery of upstream tools


@pytest.fixture
def two(world):
    """Abstract with upstreams alpha (tools in pages of 3) and beta."""
    world.fake("alpha", "--page-size", "3")
    world.fake("beta")
    return world.start()


def test_list_available_tools_merges_every_page_of_every_server(two):
    result = two.call_tool("list_available_tools")
    out = result["structuredContent"]
    lines = text_of(result).splitlines()  # the same data, a line a tool under its server's name
    assert lines[1] == "[alpha]" and lines[2 + len(FAKE_TOOLS)] == "[beta]"
    for e in out["tools"]:
        assert (f"{e['tool']}: {e['description']}" if e["description"] else e["tool"]) in lines
    assert [(e["server"], e["tool"]) for e in out["tools"]] == \
        [("alpha", n) for n in FAKE_TOOLS] + [("beta", n) for n in FAKE_TOOLS]
    assert out["total_tools"] == 2 * len(FAKE_TOOLS)
    assert out["tools"][0] == {"server": "alpha", "tool": "echo", "description": "Return the text."}
    assert "failed_servers" not in out


def test_list_available_tools_detailed_includes_input_schemas(two):
    out = two.listing(detailed=True)
    echo = out["tools"][0]
    assert echo["inputSchema"] == {"type": "object", "properties": {"text": {"type": "string"}}}


def test_list_available_tools_filter_by_server(two):
    out = two.listing(filter_by_server="beta")
    assert {e["server"] for e in out["tools"]} == {"beta"} and out["total_tools"] == len(FAKE_TOOLS)


def test_list_available_tools_unknown_filter_names_the_servers(two):
    res = two.call_tool("list_available_tools", {"filter_by_server": "gamma"})
    assert res["isError"] is True
    assert "gamma" in text_of(res) and "alpha, beta" in text_of(res)


def test_failing_server_is_listed_with_its_error_while_others_work(world):
    world.fake("good")
    world.servers["broken"] = {"command": "no-such-command-for-abstract-tests", "args": []}
    out = world.start().listing()
    assert {e["server"] for e in out["tools"]} == {"good"}
    [failed] = out["failed_servers"]
    assert failed["server"] == "broken"
    assert "command not found" in failed["error"] and "no-such-command-for-abstract-tests" in failed["error"]


def test_list_tool_details_gives_the_upstream_definition(two):
    out = two.call_tool("list_tool_details", {"server": "alpha", "tool_name": "add"})["structuredContent"]
    assert out == {"server": "alpha", "tool": {
        "name": "add", "description": "Add two numbers.",
        "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}


def test_list_tool_details_unknown_tool_names_the_existing_ones(two):
    res = two.call_tool("list_tool_details", {"server": "alpha", "tool_name": "zzz"})
    assert res["isError"] is True
    assert "'zzz'" in text_of(res) and "add, ask_client, big" in text_of(res)


# -- call_tool


def test_call_tool_passes_the_result_through_exactly(two):
    assert two.upstream("alpha", "add", {"a": 2, "b": 3}) == {
        "content": [{"type": "text", "text": "5"}], "structuredContent": {"sum": 5}}
    text = "héllo\nwörld ✓ \u2028 \"quoted\""
    assert two.upstream("beta", "echo", {"text": text}) == {"content": [{"type": "text", "text": text}]}


def test_call_tool_unknown_server_names_the_servers(two):
    res = two.upstream("gamma", "echo")
    assert res["isError"] is True
    assert "Unknown server 'gamma'" in text_of(res) and "alpha, beta" in text_of(res)


def test_call_tool_unknown_tool_names_the_tools(two):
    res = two.upstream("alpha", "nope")
    assert res["isError"] is True
    assert "'nope'" in text_of(res) and "echo" in text_of(res) and "getenv" in text_of(res)


def test_call_tool_missing_arguments_are_tool_errors(two):
    res = two.call_tool("call_tool", {"tool_name": "echo"})
    assert res["isError"] is True and "'server'" in text_of(res)
    res = two.call_tool("call_tool", {"server": "alpha", "tool_name": "echo", "tool_args": [1]})
    assert res["isError"] is True and "tool_args" in text_of(res)


def test_call_tool_upstream_rpc_error_names_server_tool_and_code(two):
    res = two.upstream("alpha", "rpc_error")
    assert res["isError"] is True
    text = text_of(res)
    assert "'alpha'" in text and "'rpc_error'" in text and "-32042" in text
    assert "fake failure on request" in text and "asked for it" in text


def test_modern_only_upstream_is_served_in_either_client_era(world):
    world.fake("modern", "--modern-only")
    proxy = world.start()
    assert proxy.upstream("modern", "echo", {"text": "hi"}) == {"content": [{"type": "text", "text": "hi"}]}
    params = _modern({"name": "call_tool", "arguments": {"server": "modern", "tool_name": "add",
                                                          "tool_args": {"a": 1, "b": 1}}})
    res = proxy.result("tools/call", params)
    assert res == {"content": [{"type": "text", "text": "2"}], "structuredContent": {"sum": 2},
                   "resultType": "complete"}
    assert world.events("modern", "initialize") == []  # never got a handshake it could answer


def test_upstream_handshake_offers_the_newest_version(world):
    world.fake("up")
    world.start().upstream("up", "echo", {"text": "x"})
    assert [e["protocolVersion"] for e in world.events("up", "initialize")] == [LEGACY_VERSIONS[0]]


# -- selection


def test_server_not_selected_is_never_started(world):
    world.fake("wanted")
    world.fake("other")
    proxy = world.start(env=world.env(ABSTRACT_PROXY_SERVERS=" wanted "))
    out = proxy.listing()
    assert {e["server"] for e in out["tools"]} == {"wanted"}
    res = proxy.upstream("other", "echo", {"text": "x"})
    assert res["isError"] is True and "ABSTRACT_PROXY_SERVERS" in text_of(res)
    assert world.pids("other") == [] and len(world.pids("wanted")) == 1


def test_selected_name_missing_from_config_fails_check(world):
    world.fake("real")
    proc = world.check(world.env(ABSTRACT_PROXY_SERVERS="real,ghost"))
    out = proc.stdout.decode()
    assert proc.returncode == 1
    assert "ghost: FAILED" in out and "not in the config" in out


# -- client config formats and variables


@pytest.mark.parametrize("key", ["mcpServers", "servers", "mcp_servers"])
def test_each_config_format_is_read(world, key):
    entry = world.fake("fmt")
    if key == "servers":
        entry["type"] = "stdio"  # VS Code requires it
    world.write_config(key)
    proxy = world.start(env=world.env(write=False))
    assert proxy.listing()["total_tools"] == len(FAKE_TOOLS)


def test_variables_are_expanded_in_command_args_and_env(world):
    entry = world.fake("vars", env={"A": "${MY_A}", "B": "${UNSET_FOR_TEST:-fallback}", "C": "${env:MY_C}",
                                    "D": "x-${MY_A}-y", "E": "${EMPTY_FOR_TEST:-dflt}"})
    entry["command"] = "${MY_PY}"
    entry["args"][0] = "${env:MY_FAKE_DIR}/fake_upstream.py"
    env = world.env(MY_A="alpha-value", MY_C="c-value", MY_PY=sys.executable,
                    MY_FAKE_DIR=str(FAKE.parent), EMPTY_FOR_TEST="")
    proxy = world.start(env=env)
    got = {k: text_of(proxy.upstream("vars", "getenv", {"name": k})) for k in "ABCDE"}
    assert got == {"A": "alpha-value", "B": "fallback", "C": "c-value", "D": "x-alpha-value-y", "E": "dflt"}


def test_upstream_environment_keeps_abstracts_secrets_and_knobs(world):
    """An upstream gets Abstract's environment and its entry's env, without ABSTRACT_* variables
    (the cache secret above all) unless the entry names them."""
    world.fake("plain")
    world.fake("named", env={"ABSTRACT_TIMEOUT": "${ABSTRACT_TIMEOUT}", "OWN": "mine"})
    proxy = world.start(env=world.env(ABSTRACT_CACHE_SECRET="s3cret-key", ABSTRACT_TIMEOUT="77",
                                      ABSTRACT_LOG_LEVEL="INFO", USER_THING="kept"))
    names = ("ABSTRACT_CACHE_SECRET", "ABSTRACT_TIMEOUT", "ABSTRACT_LOG_LEVEL", "ABSTRACT_CONFIG",
             "APP_CONFIG_PATH", "USER_THING", "OWN", "PATH")
    seen = {s: {n: text_of(proxy.upstream(s, "getenv", {"name": n})) for n in names} for s in ("plain", "named")}
    assert seen["plain"]["ABSTRACT_CACHE_SECRET"] == "<unset>" == seen["named"]["ABSTRACT_CACHE_SECRET"]
    assert {seen[s][n] for s in seen for n in ("ABSTRACT_LOG_LEVEL", "ABSTRACT_CONFIG")} == {"<unset>"}
    assert seen["plain"]["ABSTRACT_TIMEOUT"] == "<unset>" and seen["named"]["ABSTRACT_TIMEOUT"] == "77"
    assert seen["plain"]["USER_THING"] == "kept" == seen["named"]["USER_THING"]
    assert seen["named"]["OWN"] == "mine" and seen["plain"]["PATH"] == os.environ["PATH"]
    assert seen["plain"]["APP_CONFIG_PATH"] == str(world.config_path)  # not Abstract's own knob


def test_tilde_is_expanded_to_home(world, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(FAKE, home / "fake_upstream.py")
    entry = world.fake("tilde")
    entry["args"][0] = "~/fake_upstream.py"
    proxy = world.start(env=world.env(HOME=str(home)))
    assert text_of(proxy.upstream("tilde", "echo", {"text": "from home"})) == "from home"


def test_unset_variable_is_an_error_naming_it(world):
    world.fake("needs", env={"TOKEN": "${ABSTRACT_TEST_NEVER_SET}"})
    world.fake("fine")
    proxy = world.start()
    out = proxy.listing()
    [failed] = out["failed_servers"]
    assert failed["server"] == "needs" and "ABSTRACT_TEST_NEVER_SET" in failed["error"]
    res = proxy.upstream("needs", "echo", {"text": "x"})
    assert res["isError"] is True and "ABSTRACT_TEST_NEVER_SET is not set" in text_of(res)
    assert world.pids("needs") == [] and out["total_tools"] == len(FAKE_TOOLS)


def test_unreachable_and_malformed_remote_entries_are_listed_with_the_reason(world):
    world.servers.update({
        "web": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
        "events": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
        "bare_url": {"url": "http://127.0.0.1:9/mcp"},
        "windsurf": {"serverUrl": "http://127.0.0.1:9/mcp"},
        "ws": {"type": "websocket", "url": "ws://127.0.0.1:9/"},
        "ftp": {"type": "http", "url": "ftp://127.0.0.1/x"},
        "nourl": {"type": "http"},
        "badheader": {"type": "http", "url": "http://127.0.0.1:9/", "headers": {"X-A": "a\nb"}},
    })
    world.fake("local")
    out = world.start().listing()
    failed = {f["server"]: f["error"] for f in out["failed_servers"]}
    assert set(failed) == {"web", "events", "bare_url", "windsurf", "ws", "ftp", "nourl", "badheader"}
    for name in ("web", "events", "bare_url", "windsurf"):
        assert "connection refused" in failed[name] and "http://127.0.0.1:9/" in failed[name], failed[name]
    assert "'websocket'" in failed["ws"] and "stdio, http, sse" in failed["ws"]
    assert "not an http:// or https:// URL" in failed["ftp"]
    assert "has no 'url'" in failed["nourl"]
    assert "'X-A'" in failed["badheader"] and "line breaks" in failed["badheader"]
    assert out["total_tools"] == len(FAKE_TOOLS)


def test_disabled_entry_is_skipped_and_never_started(world):
    world.fake("off", disabled=True)
    world.fake("on")
    proxy = world.start()
    out = proxy.listing()
    assert {e["server"] for e in out["tools"]} == {"on"} and "failed_servers" not in out
    assert world.pids("off") == []


def test_disabled_entry_selected_by_name_says_it_is_disabled(world):
    world.fake("off", disabled=True)
    proxy = world.start(env=world.env(ABSTRACT_PROXY_SERVERS="off"))
    res = proxy.upstream("off", "echo")
    assert res["isError"] is True and "disabled" in text_of(res)
    assert world.pids("off") == []


def test_entry_that_runs_abstract_is_never_spawned(world, tmp_path):
    world.servers["self"] = {"command": sys.executable, "args": [str(ABSTRACT), str(tmp_path / "x")]}
    world.fake("lookalike")["args"].append("abstract.py")  # the fake, but named like Abstract
    world.fake("other")
    proxy = world.start()
    assert {e["server"] for e in proxy.listing()["tools"]} == {"other"}
    assert world.pids("lookalike") == []
    assert not (tmp_path / "x").exists()


def test_entry_that_runs_abstract_selected_by_name_is_an_error(world, tmp_path):
    world.servers["self"] = {"command": sys.executable, "args": [str(ABSTRACT), str(tmp_path / "x")]}
    proxy = world.start(env=world.env(ABSTRACT_PROXY_SERVERS="self"))
    [failed] = proxy.listing()["failed_servers"]
    assert failed["server"] == "self" and "runs Abstract itself" in failed["error"]
    assert not (tmp_path / "x").exists()


# -- a broken or missing client config keeps Abstract running


def _assert_tools_say(proxy, *fragments: str) -> None:
    for res in (proxy.call_tool("list_available_tools"), proxy.upstream("any", "echo")):
        assert res["isError"] is True
        for frag in fragments:
            assert frag in text_of(res), text_of(res)
    assert len(proxy.result("tools/list")["tools"]) >= 4  # still serving


def test_missing_config_file_keeps_abstract_running(world, tmp_path):
    missing = tmp_path / "nowhere.json"
    proxy = world.start(env=world.env(write=False, APP_CONFIG_PATH=str(missing)))  # (settings keep the cache in tmp)
    _assert_tools_say(proxy, str(missing), "does not exist")
    proxy.wait_stderr("does not exist")


def test_unset_config_path_keeps_abstract_running(world):
    env = world.env(write=False)
    del env["APP_CONFIG_PATH"]
    proxy = world.start(env=env)
    _assert_tools_say(proxy, "APP_CONFIG_PATH is not set")


def test_bad_json_config_error_names_line_and_column(world):
    world.config_path.write_text('{\n  "mcpServers": {\n    "a": {"command": "x" "y"}\n  }\n}\n')
    proxy = world.start(env=world.env(write=False))
    _assert_tools_say(proxy, "not valid JSON", "line 3 column 26", str(world.config_path))


def test_config_without_servers_key_says_which_keys_it_expects(world):
    world.config_path.write_text('{"something": {}}')
    proxy = world.start(env=world.env(write=False))
    _assert_tools_say(proxy, "mcpServers")


# -- lifecycle and stdout hygiene


def test_stdin_eof_exits_promptly_and_stops_upstreams(world):
    world.fake("busy")
    world.fake("idle")
    proxy = world.start()
    proxy.upstream("idle", "echo", {"text": "x"})
    proxy.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "busy", "tool_name": "slow", "tool_args": {"seconds": 60}}})
    wait_for(lambda: world.events("busy", "call"), what="the slow call to reach the upstream")
    pids = world.pids("busy") + world.pids("idle")
    assert len(pids) == 2
    t0 = time.monotonic()
    proxy.close_stdin()
    assert proxy.wait_exit(5) == 0
    assert time.monotonic() - t0 < 5
    assert [p for p in pids if pid_alive(p)] == []


def test_stdout_carries_only_json_rpc(world):
    world.fake("noisy", "--garbage", "--stderr-flood", "0.5")
    proxy = world.start()
    proxy.listing()
    proxy.upstream("noisy", "echo", {"text": "x"})
    proxy.upstream("noisy", "crash", {"code": 9})
    proxy.request("tools/list", [1])
    proxy.write(b"not json\n")  # a bad line from the client gets a JSON-RPC error, not text
    proxy.result("ping")
    proxy.close_stdin()
    assert proxy.wait_exit(5) == 0
    proxy.stop()
    assert proxy.bad_lines == []
    assert proxy.responses.get("null", {}).get("error", {}).get("code") == -32700
    assert "not json" in proxy.stderr and "[noisy]" in proxy.stderr
