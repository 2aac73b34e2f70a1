"""Transparent mode (issue 6): `--expose direct` and `--expose both`, end to end.

Every selected upstream tool appears as `<server>__<tool>` with its own definition; results,
isError and JSON-RPC errors pass through; large results are cached (tools with an outputSchema
never are); list_changed is relayed; upstream resources and prompts are proxied.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

import abstract
from conftest import same_json, text_of, wait_for
from fake_upstream import ADDED_LATER, EXTRA_TOOLS, PROMPTS, RESOURCES, TEMPLATES, TOOLS, big_text, make_items

FAKE_TOOLS = [n for n, _, _ in TOOLS] + [t["name"] for t in EXTRA_TOOLS]
META_TOOLS = ["list_available_tools", "list_tool_details", "call_tool", "list_allowed_directories"]
NAME_OK = re.compile(r"[A-Za-z0-9_-]{1,64}")
MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "pytest", "version": "0"}}


def _tools(p) -> dict:
    """Every tool Abstract lists (all pages), by name."""
    out, cursor = {}, None
    for _ in range(100):
        res = p.result("tools/list", {"cursor": cursor} if cursor else {})
        for t in res["tools"]:
            assert t["name"] not in out, f"{t['name']} listed twice"
            out[t["name"]] = t
        cursor = res.get("nextCursor")
        if not cursor:
            return out
    raise AssertionError("tools/list never ended")


@pytest.fixture
def direct(world):
    world.fake("s", "--extras")
    world.settings = {"output_cache": {"min_size": 1000}}
    return world.start("--expose", "direct", str(world.dir))


# -- listing


def test_direct_lists_every_upstream_tool_and_retrieve(direct):
    tools = _tools(direct)
    assert sorted(tools) == sorted([f"s__{n}" for n in FAKE_TOOLS] + ["retrieve_cached_output"])
    assert not set(META_TOOLS) & set(tools)


def _without_output_schema(t: dict) -> dict:
    return {k: v for k, v in t.items() if k != "outputSchema"}


def test_direct_passes_definitions_through(direct):
    tools = _tools(direct)
    for t in EXTRA_TOOLS:  # title, annotations, inputSchema with required: all as they were
        want = _without_output_schema({**t, "name": "s__" + t["name"]})  # outputSchema left out
        assert same_json(tools["s__" + t["name"]], want)
    assert any("outputSchema" in t for t in EXTRA_TOOLS)
    assert tools["s__needs"]["inputSchema"]["required"] == ["records", "table"]
    assert tools["s__echo"]["description"] == "Return the text."


def test_direct_capabilities_say_tools_list_changes(world):
    world.fake("s")
    p = world.start("--expose", "direct", str(world.dir), initialize=False)
    caps = p.initialize()["capabilities"]
    assert caps["tools"]["listChanged"] is True and "prompts" in caps


def test_expose_both_lists_meta_tools_and_direct_tools(world):
    world.fake("s", "--extras")
    p = world.start("--expose", "both", str(world.dir))
    tools = _tools(p)
    assert set(META_TOOLS) | {"retrieve_cached_output"} | {f"s__{n}" for n in FAKE_TOOLS} <= set(tools)
    assert text_of(p.call_tool("s__echo", {"text": "direct"})) == "direct"
    assert text_of(p.upstream("s", "echo", {"text": "meta"})) == "meta"


def test_meta_mode_lists_no_direct_tools_and_no_prompts(world):
    world.fake("s", "--extras")
    p = world.start()
    assert not [n for n in _tools(p) if "__" in n]
    assert p.request("prompts/list")["error"]["code"] == -32601
    resp = p.request("tools/call", {"name": "s__echo", "arguments": {"text": "x"}})
    assert resp["error"]["code"] == -32602 and "Unknown tool" in resp["error"]["message"]


def test_direct_tools_are_paged_and_cursor_checked(world):
    world.fake("s", "--page-size", "7", *[a for i in range(120) for a in ("--extra-tool", f"t{i:03d}")])
    p = world.start("--expose", "direct", str(world.dir))
    first = p.result("tools/list")
    assert len(first["tools"]) == 100 and first["nextCursor"]
    tools = _tools(p)  # the upstream's 7-tool pages gathered, Abstract's own 100-tool pages followed
    assert {f"s__t{i:03d}" for i in range(120)} <= set(tools)
    for bad in ("nope", "-1", "\u00b2", "99999", 5):
        resp = p.request("tools/list", {"cursor": bad})
        assert resp["error"]["code"] == -32602 and "cursor" in resp["error"]["message"], bad


# -- name mapping


def test_direct_name_unit():
    taken: dict = {}
    assert abstract._transparent_name("s", "echo", taken) == "s__echo"
    assert abstract._transparent_name("my.server", "a b/c", taken) == "my_server__a_b_c"
    long = abstract._transparent_name("server", "t" * 80, taken)
    digest = hashlib.sha256(("server\0" + "t" * 80).encode()).hexdigest()[:8]
    assert long == ("server__" + "t" * 80)[:55] + "_" + digest and len(long) == 64
    taken["s__x_y"] = ("s", "x.y")
    other = abstract._transparent_name("s", "x_y", taken)
    assert other != "s__x_y" and other.startswith("s__x_y_") and NAME_OK.fullmatch(other)
    assert abstract._transparent_name("s", "x.y", taken) == "s__x_y"  # the owner keeps its name


def test_direct_names_are_valid_short_distinct_and_route(world):
    odd = ["x.y", "x_y", "a b/c", "\u00fc\u00ef\u00e9", "t" * 80, "t" * 80 + "2"]
    world.fake("my.server", *[a for n in odd for a in ("--extra-tool", n)])
    p = world.start("--expose", "direct", str(world.dir))
    tools = _tools(p)
    assert all(NAME_OK.fullmatch(n) for n in tools), [n for n in tools if not NAME_OK.fullmatch(n)]
    exposed = {n: t for n, t in tools.items() if n.startswith("my_server__")}
    assert len(exposed) == len(TOOLS) + len(odd)  # no two tools share a name
    assert {"my_server__echo", "my_server__x_y", "my_server__a_b_c", "my_server_____"} <= set(exposed)
    mine = [n for n in exposed if n[len("my_server__"):] not in {t for t, _, _ in TOOLS}]
    assert len(mine) == len(odd) and sum(len(n) == 64 for n in mine) == 2
    # each exposed name reaches its own upstream tool: the fake records which tool each call reached
    for name in mine:
        assert p.call_tool(name, {"which": name})["structuredContent"] == {"which": name}
    calls = wait_for(lambda: len(world.events("my.server", "call")) == len(mine) and world.events("my.server", "call"),
                     what="every call recorded")
    reached = {e["arguments"]["which"]: e["tool"] for e in calls}
    assert sorted(reached.values()) == sorted(odd)
    assert reached["my_server__a_b_c"] == "a b/c" and reached["my_server_____"] == "\u00fc\u00ef\u00e9"


# -- calls


def test_direct_small_results_isError_and_structured_pass_through(direct):
    odd = {"content": [{"type": "text", "text": "ünï"}], "structuredContent": {"a": [1, 2.5, None]},
           "isError": True, "_meta": {"x": 1}}
    assert same_json(direct.call_tool("s__result", {"result": odd}), odd)
    assert same_json(direct.call_tool("s__add", {"a": 2, "b": 3}),
                     {"content": [{"type": "text", "text": "5"}], "structuredContent": {"sum": 5}})
    unknown = direct.call_tool("s__echo_args", {"k": "v"})
    assert unknown["structuredContent"] == {"k": "v"}


def test_direct_results_of_a_modern_upstream_lose_only_the_era_envelope(world):
    world.fake("m", "--modern-only")
    p = world.start("--expose", "direct", str(world.dir))
    assert same_json(p.call_tool("m__echo", {"text": "hi"}), {"content": [{"type": "text", "text": "hi"}]})
    assert same_json(p.call_tool("m__add", {"a": 1, "b": 2}),
                     {"content": [{"type": "text", "text": "3"}], "structuredContent": {"sum": 3}})


def test_direct_jsonrpc_errors_keep_their_code(direct):
    resp = direct.request("tools/call", {"name": "s__rpc_error", "arguments": {}})
    assert resp["error"] == {"code": -32042, "message": "fake failure on request", "data": {"why": "asked for it"}}


def test_direct_unknown_tool_is_invalid_params(direct):
    resp = direct.request("tools/call", {"name": "s__nope", "arguments": {}})
    assert resp["error"]["code"] == -32602 and "s__echo" in resp["error"]["message"]


def test_direct_large_results_are_cached_and_retrievable(direct):
    res = direct.call_tool("s__big", {"mb": 0.01})
    answer = text_of(res)
    assert len(answer) < 2000 and "retrieve_cached_output" in answer and "call_tool_and_store" not in answer
    assert "structuredContent" not in res  # the upstream tool declared no outputSchema
    token = re.search(r"Token: (\S+) ", answer).group(1)
    got = direct.call_tool("retrieve_cached_output", {"token": token, "offset": 100, "length": 50})
    assert text_of(got) == big_text(0.01)[100:150]


def test_direct_output_schema_tools_are_cached_when_large(direct):
    small = direct.call_tool("s__structured", {"n": 2})  # small: structuredContent passes whole
    assert small["structuredContent"] == {"items": make_items(2)}
    res = direct.call_tool("s__structured", {"n": 2000})  # ~100,000 characters, far over min_size
    assert "structuredContent" not in res and len(text_of(res)) < 2000
    token = re.search(r"Token: (\S+) ", text_of(res)).group(1)
    got = direct.call_tool("retrieve_cached_output", {"token": token, "pointer": "/items/1999"})
    assert json.loads(text_of(got)) == make_items(2000)[1999]


def test_direct_keep_output_schemas_relays_definitions_and_results_whole(world):
    world.fake("s", "--extras")
    world.settings = {"output_cache": {"min_size": 1000}, "keep_output_schemas": True}
    p = world.start("--expose", "direct", str(world.dir))
    tools = _tools(p)
    for t in EXTRA_TOOLS:
        assert same_json(tools["s__" + t["name"]], {**t, "name": "s__" + t["name"]})
    res = p.call_tool("s__structured", {"n": 2000})
    assert res["structuredContent"] == {"items": make_items(2000)}
    assert json.loads(text_of(res)) == {"items": make_items(2000)}


def test_direct_progress_is_relayed_with_the_client_token(direct):
    direct.call_tool("s__progress", {"steps": 3}, meta={"progressToken": "tok-7"})
    got = [n["params"] for n in direct.notifications if n["method"] == "notifications/progress"]
    assert [(g["progressToken"], g["progress"]) for g in got] == [("tok-7", 1), ("tok-7", 2), ("tok-7", 3)]


# -- list_changed


def test_tools_list_changed_is_relayed_to_a_legacy_client(direct):
    assert "s__added_later" not in _tools(direct)
    direct.call_tool("s__change_tools")
    # The upstream sends the notification before its answer, and Abstract relays it as it
    # arrives, so it is here by the time the answer is.
    assert [n for n in direct.notifications if n["method"] == "notifications/tools/list_changed"]
    tools = _tools(direct)
    assert same_json(tools["s__added_later"], {**ADDED_LATER, "name": "s__added_later"})
    assert text_of(direct.call_tool("s__added_later")).startswith("unknown tool")  # routed to the upstream


def test_a_2026_upstreams_changes_come_on_its_subscription_which_ends_at_shutdown(world):
    """A 2026-07-28 upstream (stdio) has no session: Abstract opens one subscriptions/listen for
    tool changes, relays the list_changed that comes on it (with its subscription id), keeps the
    tool list cached while subscribed, and sends notifications/cancelled for it at shutdown."""
    world.fake("m", "--modern-only", "--extras")
    p = world.start("--expose", "direct", str(world.dir))
    assert "m__added_later" not in _tools(p)
    wait_for(lambda: world.events("m", "listen"), what="subscriptions/listen")
    assert [e["notifications"] for e in world.events("m", "listen")] == [{"toolsListChanged": True}]
    listed = len(world.events("m", "tools_list"))
    _tools(p)
    assert len(world.events("m", "tools_list")) == listed  # cached while subscribed
    assert text_of(p.call_tool("m__change_tools")) == "changed"
    wait_for(lambda: [n for n in p.notifications if n["method"] == "notifications/tools/list_changed"],
             what="the relayed list_changed")
    assert "m__added_later" in _tools(p)
    p.stop()
    assert [e["id"] for e in world.events("m", "listen_cancelled")] == [world.events("m", "listen")[0]["id"]]


def test_tools_list_changed_is_not_sent_to_a_modern_client(world):
    world.fake("s", "--extras")
    p = world.start("--expose", "direct", str(world.dir), initialize=False)
    resp = p.request("tools/call", {"name": "s__change_tools", "arguments": {}, "_meta": MODERN_META})
    assert text_of(resp["result"]) == "changed"
    assert not p.notifications  # a stateless client has no session to notify
    names = [t["name"] for t in p.result("tools/list", {"_meta": MODERN_META})["tools"]]
    assert "s__added_later" in names


# -- resources and prompts


def test_direct_proxies_resources_and_templates(direct):
    listed = direct.result("resources/list")["resources"]
    assert RESOURCES[0] in listed
    got = direct.result("resources/read", {"uri": "fake://doc/1"})
    assert got == {"contents": [{"uri": "fake://doc/1", "mimeType": "text/plain", "text": "content of fake://doc/1"}]}
    assert direct.result("resources/templates/list")["resourceTemplates"] == TEMPLATES


def test_direct_cache_entries_are_resources_too(direct):
    token = re.search(r"Token: (\S+) ", text_of(direct.call_tool("s__big", {"mb": 0.01}))).group(1)
    uris = [r["uri"] for r in direct.result("resources/list")["resources"]]
    assert "abstract://cache/" + token in uris and "fake://doc/1" in uris
    text = direct.result("resources/read", {"uri": "abstract://cache/" + token})["contents"][0]["text"]
    assert text == big_text(0.01)


def test_direct_unknown_resource_is_not_found(direct):
    # (fake://doc/<anything> matches the template fake://doc/{n}: test_direct_relays.py)
    resp = direct.request("resources/read", {"uri": "fake://elsewhere/unknown"})
    assert resp["error"]["code"] in (-32002, -32602)


def test_direct_proxies_prompts_under_mapped_names(direct):
    prompts = direct.result("prompts/list")["prompts"]
    assert prompts == [{**PROMPTS[0], "name": "s__greet"}]
    got = direct.result("prompts/get", {"name": "s__greet", "arguments": {"who": "bob"}})
    assert got["messages"][0]["content"]["text"] == "hello bob from greet"  # the upstream got its own name
    resp = direct.request("prompts/get", {"name": "s__nope"})
    assert resp["error"]["code"] == -32602 and "s__greet" in resp["error"]["message"]


def test_direct_asks_only_servers_that_offer_prompts_and_resources(world):
    world.fake("plain")  # declares tools only
    world.fake("rich", "--extras")
    p = world.start("--expose", "direct", str(world.dir))
    assert [x["name"] for x in p.result("prompts/list")["prompts"]] == ["rich__greet"]
    assert "fake://doc/1" in [r["uri"] for r in p.result("resources/list")["resources"]]
    p.result("resources/templates/list")
    assert world.events("plain", "unknown_method") == []  # never asked what it did not offer
    assert "left out of the list" not in p.stderr


def test_direct_leaves_out_a_server_that_fails(world):
    world.fake("good", "--extras")
    world.fake("bad", "--exit-at-start", "3")
    p = world.start("--expose", "direct", str(world.dir))
    names = list(_tools(p))
    assert "good__echo" in names and not [n for n in names if n.startswith("bad__")]
    assert p.result("prompts/list")["prompts"] == [{**PROMPTS[0], "name": "good__greet"}]


def test_direct_tools_whose_caching_is_off_keep_their_output_schema(world):
    world.fake("s", "--extras")
    world.settings = {"servers": {"s": {"tools": {"structured": {"cache_output": False}}}}}
    p = world.start("--expose", "direct", str(world.dir))
    structured = next(t for t in EXTRA_TOOLS if t["name"] == "structured")
    assert same_json(_tools(p)["s__structured"], {**structured, "name": "s__structured"})
    res = p.call_tool("s__structured", {"n": 2000})
    assert res["structuredContent"] == {"items": make_items(2000)}
