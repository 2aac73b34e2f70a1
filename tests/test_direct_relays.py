"""Direct mode's relays for the conformance suite's server scenarios (issue 28, item 5), over
stdio: the per-server `prefix` setting (bare names, clashes told and settled), completion/complete,
resources/subscribe and unsubscribe with notifications/resources/updated, and resources/read of
a URI that an upstream's resource template matches. Through the conformance fixture
(tests/conformance/server_fixture.py), the fake upstream, and the real server-everything.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import List

import pytest

import abstract
from conftest import World, text_of, wait_for

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "conformance" / "server_fixture.py"
MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {}}
WATCHED = "test://watched-resource"


def _traced(p, method: str) -> List[dict]:
    """The params of every `method` request the fixture received (its --trace file)."""
    if not p.trace.exists():
        return []
    msgs = [json.loads(line) for line in p.trace.read_text().splitlines() if line.strip()]
    return [m.get("params") or {} for m in msgs if m.get("method") == method]


def _updates(p) -> List[str]:
    """The URIs of the notifications/resources/updated Abstract sent the client, in order."""
    with p._cond:
        return [n["params"]["uri"] for n in p.notifications
                if n["method"] == "notifications/resources/updated"]


def _fixture_world(tmp: Path, settings: dict) -> World:
    world = World(tmp)
    world.servers["conf"] = {"command": sys.executable,
                             "args": [str(FIXTURE), "--trace", str(tmp / "trace.jsonl")]}
    world.settings = settings
    world.dir.mkdir()
    return world


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """Abstract --expose direct in front of the fixture as server `conf` with `"prefix": ""`: the
    setup the conformance suite runs with (its scenarios call the bare names)."""
    tmp = tmp_path_factory.mktemp("bare")
    world = _fixture_world(tmp, {"servers": {"conf": {"prefix": ""}}})
    p = world.start("--expose", "direct", str(world.dir), initialize=False)
    p.init = p.initialize()
    p.trace = tmp / "trace.jsonl"
    try:
        yield p
    finally:
        world.cleanup()


@pytest.fixture(scope="module")
def conf(tmp_path_factory):
    """The same with the default prefix (`conf__`)."""
    tmp = tmp_path_factory.mktemp("conf")
    world = _fixture_world(tmp, {})
    p = world.start("--expose", "direct", str(world.dir))
    p.trace = tmp / "trace.jsonl"
    try:
        yield p
    finally:
        world.cleanup()


# -- the prefix setting


def test_an_empty_prefix_lists_and_calls_the_fixtures_tools_and_prompts_by_their_own_names(bare):
    tools = {t["name"] for t in bare.result("tools/list")["tools"]}
    assert {"test_simple_text", "test_sampling", "json_schema_2020_12_tool"} <= tools
    assert not [n for n in tools if n.startswith("conf__")]
    said = text_of(bare.call_tool("test_simple_text"))
    assert said == "This is a simple text response for testing."
    prompts = {p["name"] for p in bare.result("prompts/list")["prompts"]}
    assert {"test_simple_prompt", "test_prompt_with_arguments"} <= prompts
    got = bare.result("prompts/get", {"name": "test_prompt_with_arguments",
                                      "arguments": {"arg1": "testValue1", "arg2": "testValue2"}})
    assert "arg1='testValue1'" in got["messages"][0]["content"]["text"]


def test_a_prefix_renames_tools_and_prompts_and_the_upstream_gets_its_own_names(world):
    world.fake("s", "--extras")
    world.settings = {"servers": {"s": {"prefix": "x-"}}}
    p = world.start("--expose", "direct", str(world.dir))
    tools = {t["name"] for t in p.result("tools/list")["tools"]}
    assert {"x-echo", "x-lines", "retrieve_cached_output"} <= tools and "s__echo" not in tools
    assert text_of(p.call_tool("x-echo", {"text": "hi"})) == "hi"
    assert [q["name"] for q in p.result("prompts/list")["prompts"]] == ["x-greet"]
    got = p.result("prompts/get", {"name": "x-greet", "arguments": {"who": "Ada"}})
    assert got["messages"][0]["content"]["text"] == "hello Ada from greet"
    resp = p.request("tools/call", {"name": "s__echo", "arguments": {}})
    assert resp["error"]["code"] == -32602 and "x-echo" in resp["error"]["message"]


def _suffixed(server: str, tool: str, plain: str) -> str:
    return plain[:55] + "_" + hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]


def test_a_clash_of_names_keeps_the_first_server_and_says_so_naming_both(world):
    world.fake("a")
    world.fake("b", "--extra-tool", "retrieve_cached_output")
    world.settings = {"servers": {"a": {"prefix": ""}, "b": {"prefix": ""}}}
    p = world.start("--expose", "direct", str(world.dir))
    tools = {t["name"] for t in p.result("tools/list")["tools"]}
    echo_b = _suffixed("b", "echo", "echo")
    mine = _suffixed("b", "retrieve_cached_output", "retrieve_cached_output")
    assert {"echo", echo_b, "retrieve_cached_output", mine} <= tools
    assert text_of(p.call_tool("echo", {"text": "from a"})) == "from a"
    assert [e["tool"] for e in world.events("a", "call")] == ["echo"]
    assert text_of(p.call_tool(echo_b, {"text": "from b"})) == "from b"
    assert [e["tool"] for e in world.events("b", "call")] == ["echo"]
    # Abstract's own keeps its name: a token it never gave is its own error, not b's echo_args
    own = p.call_tool("retrieve_cached_output", {"token": "nope"})
    assert own.get("isError") and "nope" in text_of(own)
    p.wait_stderr(f"abstract: tool 'echo' of server 'b' is listed as '{echo_b}', not 'echo': "
                  f"server 'a' (earlier in the client config) has that name already, for its "
                  f"tool 'echo'; set servers.b.prefix in Abstract's settings to choose its name")
    p.wait_stderr(f"tool 'retrieve_cached_output' of server 'b' is listed as '{mine}', not "
                  f"'retrieve_cached_output': that is the name of Abstract's own tool; set "
                  f"servers.b.prefix")
    p.result("tools/list")  # the same clash again: told once
    assert sum("tool 'echo' of server 'b'" in ln for ln in p.stderr.splitlines()) == 1
    out = world.check().stdout.decode()
    assert f"b: 'echo' -> {echo_b}" in out and "tool 'echo' of server 'b' is listed as" in out


def test_a_bad_prefix_is_a_settings_error_naming_the_key(world):
    world.fake("s")
    world.settings = {"servers": {"s": {"prefix": "my server"}}}
    done = world.check()
    assert done.returncode == 2
    assert ("key 'servers.s.prefix' must be a name prefix of at most 32 characters from A-Z a-z "
            "0-9 _ - (\"\" for none), not \"my server\"") in done.stderr.decode()


# -- capabilities


def test_direct_mode_declares_completions_and_subscriptions_while_upstreams_may_offer_them(bare):
    caps = bare.init["capabilities"]
    assert caps["completions"] == {} and caps["resources"]["subscribe"] is True


def test_once_no_started_upstream_offers_them_they_are_not_declared(world):
    world.fake("s", "--extras")
    p = world.start("--expose", "direct", str(world.dir))
    caps = p.result("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "t", "version": "0"}})["capabilities"]
    assert "completions" in caps and caps["resources"]["subscribe"] is True  # not started yet
    p.result("tools/list")  # starts it: no completions, no subscribe
    caps = p.result("server/discover", {"_meta": MODERN})["capabilities"]
    assert "completions" not in caps and caps["resources"]["subscribe"] is False


# -- completion/complete


def test_a_prompt_arguments_completion_goes_to_its_server_under_the_prompts_own_name(conf):
    got = conf.result("completion/complete", {
        "ref": {"type": "ref/prompt", "name": "conf__test_prompt_with_arguments"},
        "argument": {"name": "arg1", "value": "pa"}})
    assert got == {"completion": {"values": ["paris", "park", "party"], "total": 3,
                                  "hasMore": False}}
    asked = _traced(conf, "completion/complete")[-1]
    assert asked["ref"] == {"type": "ref/prompt", "name": "test_prompt_with_arguments"}
    assert asked["argument"] == {"name": "arg1", "value": "pa"}


def test_the_conformance_scenarios_completion_and_a_templates_in_both_eras(bare):
    got = bare.result("completion/complete", {  # completion-complete, as the suite sends it
        "ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
        "argument": {"name": "arg1", "value": "test"}})
    assert got["completion"]["values"] == ["test", "testValue1"]
    ref = {"type": "ref/resource", "uri": "test://template/{id}/data"}
    got = bare.result("completion/complete", {"ref": ref, "argument": {"name": "id", "value": "1"}})
    assert got["completion"]["values"] == ["123"]
    got = bare.result("completion/complete", {"ref": ref, "argument": {"name": "id", "value": ""},
                                              "_meta": MODERN})
    assert got["completion"]["values"] == ["123", "456", "789"] and got["resultType"] == "complete"


def test_a_bad_completion_request_says_what_was_wrong(bare):
    def error(params: dict) -> str:
        resp = bare.request("completion/complete", params)
        assert resp["error"]["code"] == -32602, resp
        return resp["error"]["message"]

    arg = {"name": "arg1", "value": ""}
    assert error({"ref": {"type": "ref/prompt", "name": "nope"}, "argument": arg}).startswith(
        "Unknown prompt: nope. Prompts: test_prompt_with_arguments, ")
    assert "params.ref" in error({"argument": arg})
    assert "params.argument" in error({"ref": {"type": "ref/prompt", "name": "x"}})
    assert "params.ref" in error({"ref": {"type": "ref/tool", "name": "x"}, "argument": arg})
    assert error({"ref": {"type": "ref/resource", "uri": "nope://{x}"}, "argument": arg}) == (
        "Unknown resource template: nope://{x}. Templates: test://template/{id}/data")


def test_a_server_without_completions_is_not_asked_and_meta_mode_has_none(world):
    world.fake("s", "--extras")
    p = world.start("--expose", "direct", str(world.dir))
    got = p.result("completion/complete", {"ref": {"type": "ref/prompt", "name": "s__greet"},
                                           "argument": {"name": "who", "value": "A"}})
    assert got == {"completion": {"values": [], "hasMore": False}}
    assert not world.events("s", "unknown_method")
    meta = world.start(str(world.dir))
    resp = meta.request("completion/complete", {"ref": {"type": "ref/prompt", "name": "s__greet"},
                                                "argument": {"name": "who", "value": "A"}})
    assert resp["error"]["code"] == -32601 and "--expose direct" in resp["error"]["message"]


# -- resources/read of a template's URI


def test_a_uri_that_an_upstreams_template_matches_is_read_there_in_both_eras(bare):
    got = bare.result("resources/read", {"uri": "test://template/123/data"})["contents"][0]
    assert got["uri"] == "test://template/123/data" and "123" in got["text"]
    assert json.loads(got["text"]) == {"id": "123", "templateTest": True,
                                       "data": "Data for ID: 123"}
    got = bare.result("resources/read", {"uri": "test://template/abc/data", "_meta": MODERN})
    assert "Data for ID: abc" in got["contents"][0]["text"] and got["resultType"] == "complete"
    # {id} holds no "/": not the template's, so nobody's
    resp = bare.request("resources/read", {"uri": "test://template/1/2/data"})
    assert resp["error"]["code"] in (-32002, -32602)


def test_uri_templates_match_level_1_exactly_and_never_slowly():
    def matches(template: str, uri: str) -> bool:
        return abstract._template_matches(abstract._template_parts(template), uri)

    assert matches("test://template/{id}/data", "test://template/123/data")
    assert not matches("test://template/{id}/data", "test://template//data")  # one or more
    assert not matches("test://template/{id}/data", "test://template/1/2/data")
    assert not matches("test://template/{id}/data", "test://template/1/data/x")
    assert matches("demo://r/{a}-{b}", "demo://r/x-y-z")
    assert not matches("demo://r/{a}", "demo://r/x?y")
    assert matches("file:///{+path}", "file:///a/b/c.txt")
    assert matches("s://q{?x,y}", "s://q") and matches("s://q{?x,y}", "s://q?x=1&y=2")
    assert matches("s://fixed", "s://fixed") and not matches("s://fixed", "s://fixed2")
    assert abstract._template_parts("x" * 3000) is None and abstract._template_parts(5) is None
    hostile = abstract._template_parts("{a}x" * 400 + "!")
    t0 = time.monotonic()
    assert not abstract._template_matches(hostile, "x" * 8000)
    assert time.monotonic() - t0 < 5.0


# -- resources/subscribe and unsubscribe


def test_the_conformance_subscribe_and_unsubscribe_are_relayed_with_the_update(bare):
    assert bare.result("resources/subscribe", {"uri": WATCHED}) == {}
    wait_for(lambda: WATCHED in _updates(bare), what="the fixture's update relayed")
    assert _traced(bare, "resources/subscribe")[-1] == {"uri": WATCHED}
    assert bare.result("resources/unsubscribe", {"uri": WATCHED}) == {}
    assert _traced(bare, "resources/unsubscribe")[-1] == {"uri": WATCHED}


def test_updates_reach_the_client_only_for_the_uris_it_holds(world):
    world.fake("s", "--extras", "--subscribe")
    world.fake("t", "--extras", "--subscribe")
    p = world.start("--expose", "direct", str(world.dir))

    def notify(server: str, uri: str) -> None:
        p.call_tool(f"{server}__notify_client", {"method": "notifications/resources/updated",
                                                 "params": {"uri": uri}})

    assert p.result("resources/subscribe", {"uri": "fake://doc/1"}) == {}
    assert p.result("resources/subscribe", {"uri": "fake://doc/7"}) == {}  # by its template
    assert [e["uri"] for e in world.events("s", "subscribe")] == ["fake://doc/1", "fake://doc/7"]
    assert not world.events("t", "subscribe")  # the first server with the URI has it
    notify("s", "fake://doc/2")  # not held
    notify("t", "fake://doc/1")  # held, but of s
    notify("s", "fake://doc/1")
    wait_for(lambda: _updates(p), what="an update")
    assert p.result("resources/unsubscribe", {"uri": "fake://doc/1"}) == {}
    assert [e["uri"] for e in world.events("s", "unsubscribe")] == ["fake://doc/1"]
    notify("s", "fake://doc/1")  # let go of
    notify("s", "fake://doc/7")
    wait_for(lambda: len(_updates(p)) == 2, what="the second update")
    assert _updates(p) == ["fake://doc/1", "fake://doc/7"]


def test_what_cannot_be_subscribed_to_gets_an_error_that_says_why(world, tmp_path):
    world.fake("s", "--extras")
    p = world.start("--expose", "direct", str(world.dir))

    def error(uri, meta=None, code=-32602) -> str:
        params = {"uri": uri} if meta is None else {"uri": uri, "_meta": meta}
        resp = p.request("resources/subscribe", params)
        assert resp["error"]["code"] == code, resp
        return resp["error"]["message"]

    assert error("fake://doc/1") == ("server 's' has no resource subscriptions (its capabilities "
                                     "have no resources.subscribe); read fake://doc/1 again to "
                                     "see changes")
    assert "no upstream server has nope://x" in error("nope://x")
    assert "Abstract's own resources" in error((world.dir / "a.txt").as_uri())
    assert error(5) == "resources/subscribe needs params.uri (a resource's URI)"
    assert "2026-07-28" in error("fake://doc/1", MODERN, -32601)
    meta = world.start(str(world.dir))
    resp = meta.request("resources/unsubscribe", {"uri": "fake://doc/1"})
    assert resp["error"]["code"] == -32601 and "--expose direct" in resp["error"]["message"]
    modern = World(tmp_path / "m")
    modern.tmp.mkdir()
    modern.fake("m", "--extras", "--modern-only")
    try:
        q = modern.start("--expose", "direct", str(modern.dir))
        resp = q.request("resources/subscribe", {"uri": "fake://doc/1"})
        assert "it speaks 2026-07-28, which has no resources/subscribe" in resp["error"]["message"]
    finally:
        modern.cleanup()


def test_subscriptions_are_bounded(world):
    world.fake("s", "--extras", "--subscribe")
    p = world.start("--expose", "direct", str(world.dir))
    ids = [p.send_request("resources/subscribe", {"uri": f"fake://doc/{i}"}) for i in range(1000)]
    assert all("result" in p.wait_response(i) for i in ids)
    resp = p.request("resources/subscribe", {"uri": "fake://doc/1000"})
    assert resp["error"]["message"] == ("resources/subscribe: the client already holds 1000 "
                                        "resource subscriptions, the most Abstract keeps; "
                                        "unsubscribe from some first")
    assert p.result("resources/subscribe", {"uri": "fake://doc/5"}) == {}  # one held already
    assert p.result("resources/unsubscribe", {"uri": "fake://doc/5"}) == {}
    assert p.result("resources/subscribe", {"uri": "fake://doc/1000"}) == {}


def test_after_a_restart_the_subscriptions_are_made_again_and_the_client_told(world):
    world.fake("s", "--extras", "--subscribe")
    p = world.start("--expose", "direct", str(world.dir))
    assert p.result("resources/subscribe", {"uri": "fake://doc/1"}) == {}
    assert p.result("resources/subscribe", {"uri": "fake://doc/9"}) == {}
    assert p.result("resources/unsubscribe", {"uri": "fake://doc/9"}) == {}
    assert not _updates(p)
    p.call_tool("s__crash", {"code": 3})
    wait_for(lambda: "exited" in p.stderr or "code 3" in p.stderr or len(world.pids("s")) == 1,
             what="the crash")
    got = p.result("resources/read", {"uri": "fake://doc/2"})  # starts it again
    assert got["contents"][0]["text"] == "content of fake://doc/2"
    assert len(world.pids("s")) == 2
    wait_for(lambda: len(world.events("s", "subscribe")) == 3, what="the subscription made again")
    assert [e["uri"] for e in world.events("s", "subscribe")] == [
        "fake://doc/1", "fake://doc/9", "fake://doc/1"]
    wait_for(lambda: _updates(p) == ["fake://doc/1"], what="the client told")


# -- the real server-everything

EVERYTHING = (Path(os.environ.get("ABSTRACT_REALSERVERS_HOME")
                   or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                   / "abstract-realservers") / "node" / "node_modules" / ".bin"
              / "mcp-server-everything")
SLOW = 60.0  # node starts slowly on a loaded machine


@pytest.mark.skipif(not EVERYTHING.exists(), reason="server-everything not installed: run bash "
                    "tests/realservers/install.sh")
def test_everything_completions_template_reads_and_subscriptions_through_abstract(world):
    world.servers["everything"] = {"command": str(EVERYTHING), "args": []}
    world.dir.mkdir()
    p = world.start("--expose", "direct", str(world.dir), initialize=False)
    caps = p.result("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "pytest", "version": "0"}},
                    SLOW)["capabilities"]
    p.notify("notifications/initialized")
    assert caps["completions"] == {} and caps["resources"]["subscribe"] is True
    got = p.request("completion/complete", {  # the second argument narrowed by the first
        "ref": {"type": "ref/prompt", "name": "everything__completable-prompt"},
        "argument": {"name": "name", "value": "A"},
        "context": {"arguments": {"department": "Engineering"}}}, SLOW)["result"]
    assert got["completion"]["values"] == ["Alice"]
    template = "demo://resource/dynamic/text/{resourceId}"
    got = p.result("completion/complete", {"ref": {"type": "ref/resource", "uri": template},
                                           "argument": {"name": "resourceId", "value": "4"}})
    assert got["completion"]["values"] == ["4"]
    uri = "demo://resource/dynamic/text/7"
    text = p.result("resources/read", {"uri": uri})["contents"][0]["text"]
    assert text.startswith("Resource 7: This is a plaintext resource")
    assert p.result("resources/subscribe", {"uri": uri}) == {}
    toggled = p.call_tool("everything__toggle-subscriber-updates", timeout=SLOW)
    assert "Started simulated resource updated" in text_of(toggled)
    wait_for(lambda: uri in _updates(p), SLOW, what="everything's update relayed")
    p.call_tool("everything__toggle-subscriber-updates", timeout=SLOW)  # off again
    assert p.result("resources/unsubscribe", {"uri": uri}) == {}
    assert set(_updates(p)) == {uri}
