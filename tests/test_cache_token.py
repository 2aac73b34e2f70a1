"""A cached output feeds the other tools by its token (issue 6): stored in a chosen format by
call_tool_and_store, or sent as arguments by call_tool_with_file_content, without the model
reading it and without calling the upstream again."""

from __future__ import annotations

import csv
import json

import pytest

from conftest import same_json, text_of
from fake_upstream import make_rows

N = 300  # rows(300) is about 15,000 characters: over the min_size below, so it is cached


@pytest.fixture
def px(world):
    world.fake("up")
    world.settings = {"output_cache": {"min_size": 1000, "preview_chars": 100}}
    return world.start()


def _cached_token(px) -> str:
    res = px.upstream("up", "rows", {"n": N})
    assert res["structuredContent"]["cached"] is True, text_of(res)
    return res["structuredContent"]["token"]


def test_a_cached_output_is_stored_as_csv_without_calling_the_tool_again(px, world):
    token = _cached_token(px)
    calls = len(world.events("up", "call"))
    res = px.call_tool("call_tool_and_store", {"cache_token": token, "file_format": "csv", "filename": "kept"})
    assert not res.get("isError"), text_of(res)
    sc = res["structuredContent"]
    assert sc["format"] == "csv" and sc["rows"] == N and sc["server"] == "up" and sc["tool"] == "rows"
    with open(sc["path"], newline="", encoding="utf-8") as f:
        got = list(csv.DictReader(f))
    want = make_rows(N)
    assert [r["name"] for r in got] == [w["name"] for w in want]
    assert [float(r["score"]) for r in got] == [w["score"] for w in want]
    assert len(world.events("up", "call")) == calls  # the upstream was not asked again


def test_a_cached_output_feeds_another_tool_exactly(px, world):
    token = _cached_token(px)
    res = px.call_tool("call_tool_with_file_content", {"server": "up", "tool_name": "echo_args",
                                                       "cache_token": token, "data_key": "records",
                                                       "tool_args": {"table": "t"}})
    assert not res.get("isError"), text_of(res)
    received = world.events("up", "call")[-1]["arguments"]
    assert same_json(received, {"table": "t", "records": make_rows(N)})  # types kept: ints, floats, bools


@pytest.mark.parametrize("args, message", [
    ({"cache_token": "A" * 24, "file_format": "csv"}, "No cached output with token"),
    ({"cache_token": "../etc/passwd", "file_format": "csv"}, "is not a cache token"),
])
def test_a_bad_token_is_a_clear_error(px, args, message):
    res = px.call_tool("call_tool_and_store", args)
    assert res.get("isError") is True and message in text_of(res)


def test_file_path_and_cache_token_together_are_refused(px):
    token = _cached_token(px)
    res = px.call_tool("call_tool_with_file_content", {"server": "up", "tool_name": "echo_args",
                                                       "cache_token": token, "file_path": "x.json",
                                                       "data_key": "records"})
    assert res.get("isError") is True and "not both" in text_of(res)


def test_store_without_token_or_server_names_what_is_missing(px):
    res = px.call_tool("call_tool_and_store", {"file_format": "csv"})
    assert res.get("isError") is True and "'server'" in text_of(res)
