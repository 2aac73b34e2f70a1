"""Each of Abstract's tools is one record (_Tool) made beside its handler: the aliases it takes,
when it is offered, and the argument checks the records do on the wire."""

from __future__ import annotations

import pytest

import abstract
from conftest import running_world, text_of

NEEDS = {"meta", "cache", "catalog", "sqlite3", "memory"}
CORE = ["list_available_tools", "list_tool_details", "call_tool", "list_allowed_directories",
        "call_tool_and_store", "call_tool_with_file_content", "retrieve_cached_output",
        "query_output", "search_stored_outputs", "list_stored_outputs"]
MEMORY = ["save_message", "get_conversation", "list_conversations", "search_messages",
          "delete_conversation", "export_conversations"]


def test_each_tool_is_one_record_beside_its_handler():
    names = [t.name for t in abstract._TOOLS]
    assert names == CORE + MEMORY  # tools/list's order
    for t in abstract._TOOLS:
        assert isinstance(t, abstract._Tool)
        assert getattr(abstract, f"_tool_{t.name}") is t.handler
        assert t.description and t.schema["type"] == "object"
        assert set(t.needs) <= NEEDS and t.needs


def test_every_alias_names_an_argument_of_its_own_tool():
    for t in abstract._TOOLS:
        props = t.schema["properties"]
        for alias, target in t.aliases.items():
            assert target in props, f"{t.name}: {alias} -> {target}, not an argument"
            assert alias not in props, f"{t.name}: {alias} is an argument of its own"
    by_name = {t.name: t for t in abstract._TOOLS}
    assert by_name["call_tool_with_file_content"].aliases["path"] == "file_path"
    assert by_name["export_conversations"].aliases == {"output_path": "storage_path",
                                                       "directory": "storage_path"}
    assert not by_name["retrieve_cached_output"].aliases


@pytest.mark.parametrize("expose, memory, cache, catalog, sql, offered", [
    ("meta", False, True, True, True, CORE),
    ("both", True, True, True, True, CORE + MEMORY),
    ("direct", False, True, True, True, ["retrieve_cached_output"]),
    ("direct", True, True, True, True, ["retrieve_cached_output"] + MEMORY),
    ("direct", True, False, False, True, []),
    ("meta", False, False, True, False,
     [n for n in CORE if n not in ("retrieve_cached_output", "query_output")]),
    ("meta", True, True, False, True,
     [n for n in CORE if n not in ("search_stored_outputs", "list_stored_outputs")]),
])
def test_the_tools_offered_follow_their_needs(monkeypatch, expose, memory, cache, catalog, sql,
                                              offered):
    if not sql:
        monkeypatch.setattr(abstract, "sqlite3", None)
    got = abstract._offered(expose, memory, object() if cache else None,
                            object() if catalog else None)
    assert list(got) == offered
    assert all(got[n].name == n for n in got)


@pytest.fixture(scope="module")
def px(tmp_path_factory: pytest.TempPathFactory):
    with running_world(tmp_path_factory.mktemp("records")) as world:
        yield world.proxies[0]


def test_aliases_reach_the_tools_as_their_own_arguments(px):
    res = px.call_tool("call_tool", {"server_name": "up", "name": "echo",
                                     "args": {"text": "hello"}})
    assert not res.get("isError") and "hello" in text_of(res)
    res = px.call_tool("list_tool_details", {"server": "up", "tool": "echo"})
    assert not res.get("isError") and '"echo"' in text_of(res)


def test_an_alias_with_its_argument_or_one_of_another_tool_is_refused(px):
    res = px.call_tool("list_tool_details", {"server": "up", "tool": "echo", "name": "echo"})
    assert res["isError"] and "Give 'tool' or 'name' (the same argument), not both." in text_of(res)
    res = px.call_tool("list_tool_details", {"server": "up", "tool_name": "echo",
                                             "args": {}})  # (call_tool's alias, not this tool's)
    assert res["isError"] and "list_tool_details has no argument 'args'" in text_of(res)
    res = px.call_tool("search_stored_outputs", {"query": "x", "directory": "/tmp"})
    assert res["isError"] and "search_stored_outputs has no argument 'directory'" in text_of(res)

