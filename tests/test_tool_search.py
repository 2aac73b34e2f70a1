"""list_available_tools' query, allow/deny/rename settings and --check's context report (issue 18),
with the fake upstream; tests/realservers covers the same through real servers."""

from __future__ import annotations

import pytest

import abstract
from conftest import text_of

TOOLS = {"s": [
    {"name": "get_weather", "description": "Current weather for a city.",
     "inputSchema": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}}},
    {"name": "sendEmail", "title": "Send e-mail", "description": "Send a message to an address."},
    {"name": "list_orders", "description": "All orders of the shop, as records."},
], "t": [{"name": "forecast", "description": "Weather forecast for the next days."}]}


@pytest.mark.parametrize("fts", [None, False])
def test_index_ranks_and_falls_back_without_fts5(fts):
    index = abstract._ToolIndex(fts=fts)
    hits = index.search(TOOLS, "what is the weather in a city", 10)
    assert [(s, t["name"]) for _, s, t in hits][:2] == [("s", "get_weather"), ("t", "forecast")]
    assert index.search(TOOLS, "send email", 10)[0][2]["name"] == "sendEmail"  # camelCase split
    assert index.search(TOOLS, "!!!", 10) == [] and index.search(TOOLS, "zebra", 10) == []
    assert len(index.search(TOOLS, "weather orders email", 2)) == 2


def test_index_is_rebuilt_when_a_list_changes():
    index = abstract._ToolIndex()
    lists = {k: list(v) for k, v in TOOLS.items()}
    assert index.search(lists, "invoice", 10) == []
    lists["t"] = lists["t"] + [{"name": "make_invoice", "description": "Write an invoice."}]  # a new list
    assert index.search(lists, "invoice", 10)[0][2]["name"] == "make_invoice"


def test_list_changed_rebuilds_the_search_index(world):
    world.fake("s", "--extras")
    proxy = world.start()
    before = proxy.call_tool("list_available_tools", {"query": "listed after change"})["structuredContent"]
    assert "added_later" not in [e["tool"] for e in before["tools"]]
    proxy.upstream("s", "change_tools")
    after = proxy.call_tool("list_available_tools", {"query": "listed after change"})["structuredContent"]
    assert after["tools"][0]["tool"] == "added_later" and after["query"] == "listed after change"


def test_rename_reaches_the_upstream_by_its_own_name(world):
    world.fake("s")
    world.settings = {"servers": {"s": {"tools": {"echo": {"name": "say"}}, "deny_tools": ["slo?"]}}}
    proxy = world.start()
    assert text_of(proxy.upstream("s", "say", {"text": "hi"})) == "hi"
    assert [e["tool"] for e in world.events("s", "call")] == ["echo"]
    listed = [e["tool"] for e in proxy.listing()["tools"]]
    assert "say" in listed and "echo" not in listed and "slow" not in listed
    res = proxy.upstream("s", "echo", {"text": "hi"})
    assert res["isError"] and "has no tool 'echo'" in text_of(res)


@pytest.mark.parametrize("settings, says", [
    ({"servers": {"s": {"allow_tools": "echo"}}}, "servers.s.allow_tools' must be a list"),
    ({"servers": {"s": {"deny_tools": [""]}}}, "servers.s.deny_tools' must be a list"),
    ({"servers": {"s": {"tools": {"a": {"name": "x"}, "b": {"name": "x"}}}}}, "both rename to 'x'"),
    ({"servers": {"s": {"tools": {"a": {"name": " x"}}}}}, "servers.s.tools.a.name' must be a tool name"),
    ({"servers": {"s": {"tools": {"a": {"title": "x"}}}}}, "unknown key 'servers.s.tools.a.title'"),
])
def test_bad_tool_settings_are_refused(settings, says):
    with pytest.raises(abstract.ConfigError) as e:
        abstract.Settings(settings)
    assert says in str(e.value), str(e.value)


def test_check_reports_context_cost_and_renames(world):
    world.fake("my server.v2")
    world.fake("s")
    proc = world.check()
    out = proc.stdout.decode()
    assert proc.returncode == 0, out
    assert "context: --expose meta lists" in out and "--expose direct" in out
    assert "server 'my server.v2' is written my_server_v2 in its tools' names" in out
    line = next(l for l in out.splitlines() if l.strip().startswith("s ") and "direct:" in l)
    assert "tools" in line and "KB" in line and "tokens" in line
