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
        abstract._Settings(settings)
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


def test_renames_may_swap_names_and_a_denied_tool_renames_nothing():
    settings = abstract._Settings({"servers": {"s": {
        "tools": {"echo": {"name": "slow"}, "slow": {"name": "echo"}, "fail": {"name": "boom"},
                  "boom": {"name": "gone"}},
        "deny_tools": ["boom"]}}})
    tools = [{"name": n} for n in ("echo", "slow", "fail", "big")]
    shown = [t["name"] for t in settings.shape_tools("s", tools)]
    assert shown == ["slow", "echo", "boom", "big"]
    assert [settings.upstream_tool("s", n) for n in shown] == ["echo", "slow", "fail", "big"]
    assert settings.upstream_tool("s", "gone") == "gone"  # boom is denied: its rename does not apply


def test_odd_descriptions_and_limits_in_the_listing(world):
    world.fake("s")
    proxy = world.start()
    res = proxy.call_tool("list_available_tools", {"limit": 2})
    assert len(res["structuredContent"]["tools"]) == 2 and res["structuredContent"]["total_tools"] > 2
    assert text_of(res).startswith(f"The first 2 of {res['structuredContent']['total_tools']} tools.")
    clash = proxy.call_tool("call_tool", {"server": "s", "tool_name": "echo", "args": {"text": "a"},
                                          "params": {"text": "b"}})
    assert clash["isError"] and "'args' or 'params'" in text_of(clash)


def test_tool_entry_survives_a_description_that_is_not_a_string():
    assert abstract._tool_entry("s", {"name": "x", "description": {"weird": 1}}, False)["description"] == ""
    assert abstract._tool_entry("s", {"name": "x", "description": 12345}, True)["description"] == ""


@pytest.mark.parametrize("structured, text, unwrapped", [
    ({"content": "a,b\n1,2"}, "a,b\n1,2", True),
    ({"result": [1, 2]}, "[1, 2]", True),
    ({"count": 3}, "3", False),
    ({"result": True}, "1", False),
    ({"a": 1, "b": 2}, '{"a": 1, "b": 2}', False),
])
def test_structured_content_is_unwrapped_only_when_it_wraps_the_text(structured, text, unwrapped):
    ex = abstract._extract({"content": [{"type": "text", "text": text}], "structuredContent": structured})
    assert (ex.data != structured) is unwrapped, ex.data


def test_jsonc_comments_never_make_a_comma_trailing_and_scan_in_linear_time():
    import json
    import time
    cases = {'{"a": 1,\n // old: {"x": 1}\n "b": 2}': {"a": 1, "b": 2},
             '[1,\n // see [docs]\n 2]': [1, 2],
             '{"a": 0, /* x */ "b": 1, /* y */ }': {"a": 0, "b": 1},
             '{"s": "// not a comment, /* nor this */", "t": [1,],}': {"s": "// not a comment, /* nor this */",
                                                                       "t": [1]}}
    for text, want in cases.items():
        assert json.loads(abstract._strip_jsonc(text)) == want
    hostile = '{"a":1,\n' + "".join(f"// old{i}: npx -y pkg https://example.com/{i}\n" for i in range(40)) + '"b":2}'
    t0 = time.process_time()
    assert json.loads(abstract._strip_jsonc(hostile)) == {"a": 1, "b": 2}
    abstract._strip_jsonc('{"a": 1, ' + "/**/ " * 5000 + '"b": 2}')
    assert time.process_time() - t0 < 5, "backtracking"  # linear: milliseconds; exponential: hours


def test_nan_and_infinity_in_input_files_are_refused_or_kept_as_text():
    assert abstract._csv_value("[NaN]") == "[NaN]" and abstract._csv_value("[1e999]") == "[1e999]"
    assert abstract._csv_value('["obs 0"]') == ["obs 0"]
    for bad in ('{"a": NaN}', '{"a": 1e999}', '[Infinity]'):
        with pytest.raises(abstract.FormatError):
            abstract._load_json(bad)


def test_client_config_with_a_huge_number_or_deep_nesting_is_a_clear_error(tmp_path):
    for name, text in (("digits.json", '{"mcpServers": {"a": {"command": "x", "n": ' + "9" * 5000 + "}}}"),
                       ("deep.json", "[" * 100000 + "]" * 100000)):
        path = tmp_path / name
        path.write_text(text)
        config = abstract._ClientConfig(str(path), None, {})
        assert str(path) in config.error and ("digits" in config.error or "nested" in config.error)
