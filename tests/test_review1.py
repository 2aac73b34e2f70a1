"""Review of the merges of issue 29 (sandbox, winlaunch) and issue 25 (newdata): a regression
test for each defect found, through the wire where the defect shows there."""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import pytest

import abstract
from conftest import World, text_of


@pytest.fixture
def proxy(world: World):
    world.fake("up")
    world.dir.mkdir()
    return world.start(str(world.dir))


def cached_token(proxy, text: str) -> str:
    res = proxy.upstream("up", "result", {"result": {"content": [{"type": "text", "text": text}]}})
    return re.search(r"Token: (\S+) ", text_of(res)).group(1)


def test_a_pattern_match_is_never_cut_from_its_window(proxy):
    """A block of long context lines larger than the window was cut at the window's end with the
    match itself in the cut part, while matching_lines named it and the search said it ended."""
    text = "".join(f"{'x' * 3000}\n" for _ in range(30)) + "HIT here\n" + "y\n" * 5
    token = cached_token(proxy, text)
    shown, start = {}, 1
    for _ in range(10):
        res = proxy.call_tool("retrieve_cached_output", {"token": token, "pattern": "hit",
                                                         "context": 10, "start_line": start})
        where = res["structuredContent"]
        lines = re.findall(r"^(\d+)([:-]) ", res["content"][0]["text"], re.M)
        shown.update((int(k), mark) for k, mark in lines)
        assert set(where["matching_lines"]) <= {int(k) for k, _ in lines}
        assert len(res["content"][0]["text"]) <= 20000
        if where["next_line"] is None:
            break
        start = where["next_line"]
    assert shown.get(31) == ":"


def test_check_reports_a_locked_login_file_instead_of_a_traceback(tmp_path, monkeypatch):
    """Issue 29.9 made _TokenStore.load raise _AuthError for a login file another program holds
    (Windows); --check's login report (status) did not catch it: a traceback, not a line."""
    store = abstract._TokenStore(environ={"XDG_CONFIG_HOME": str(tmp_path)})
    auth = abstract._OAuth("s", "https://x.example/mcp", None, store)
    store.save("s", {"server_url": "https://x.example/mcp", "issuer": "i", "issuers": {}})

    def held(fn, *args, **kw):
        e = PermissionError(13, "The process cannot access the file", args[0])
        e.winerror = 32
        raise e
    monkeypatch.setattr(abstract, "_retry_shared", held)
    assert re.match(r"unknown, s: the saved login .* stayed locked", auth.status())


def test_a_huge_statement_is_not_tokenized_whole(proxy, world):
    """_json_columns and _boolean_note tokenized the whole statement: a 6 MB IN list SQLite ran
    in 3 s took 7 s more and 600 MB. Past _SQL_SCAN_MAX characters the values stay text."""
    sql = "SELECT json_array(1) AS j FROM data WHERE 1 IN (" + ",".join(["1"] * 500_000) + ")"
    tracemalloc.start()
    try:
        assert abstract._json_columns(sql, 1) == []
        assert tracemalloc.get_traced_memory()[1] < len(sql) * 2
    finally:
        tracemalloc.stop()
    (world.dir / "one.json").write_text('[{"a": true}]')
    res = proxy.call_tool("query_output", {"source": "one.json", "sql": sql})
    assert res["structuredContent"]["rows"] == [{"j": "[1]"}]
    short = proxy.call_tool("query_output", {"source": "one.json",
                                             "sql": "SELECT json_array(1) AS j FROM data"})
    assert short["structuredContent"]["rows"] == [{"j": [1]}]


def test_a_boolean_compared_to_a_double_quoted_true_is_explained(proxy, world):
    """SQLite reads "true" (no such column) as the string 'true': the count was 0 with no note,
    as for 'true' before issue 25.5; a column named true is left alone."""
    (world.dir / "flags.json").write_text(json.dumps(
        [{"id": i, "active": i % 2 == 0, "true": i} for i in range(6)]))
    res = proxy.call_tool("query_output", {
        "source": "flags.json", "sql": 'SELECT count(*) AS n FROM data WHERE active = "false"'})
    assert res["structuredContent"]["rows"] == [{"n": 0}]
    assert "active holds booleans as 1 (true) and 0 (false)" in text_of(res)
    res = proxy.call_tool("query_output", {
        "source": "flags.json", "sql": 'SELECT count(*) AS n FROM data WHERE active = "true"'})
    assert "Note:" not in text_of(res)  # "true" is the column here


def test_sqlite_json_too_large_for_a_double_stays_text(proxy, world):
    """json('1e999') is JSON text SQLite accepts; read as a JSON value it was infinity, which
    went on the wire as the non-JSON word Infinity (a strict client cannot parse the answer) and
    into stored .json and .csv files."""
    (world.dir / "one.json").write_text('[{"a": 1}]')
    sql = "SELECT json('1e999') AS j, json('[1e400, 2]') AS k, json_array(1.5) AS ok FROM data"
    proxy.send_request("tools/call", {"name": "query_output",
                                      "arguments": {"source": "one.json", "sql": sql}}, rid=901)
    raw = proxy.wait_response(901)
    assert raw["result"]["structuredContent"]["rows"] == [
        {"j": "1e999", "k": "[1e400,2]", "ok": [1.5]}]
    res = proxy.call_tool("query_output", {"source": "one.json", "sql": sql,
                                           "file_format": "json"})
    path = res["structuredContent"]["path"]
    text = Path(path).read_text(encoding="utf-8")
    assert "Infinity" not in text
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == [
        {"j": "1e999", "k": "[1e400,2]", "ok": [1.5]}]


@pytest.mark.parametrize("schema", ["x", {"required": 5}, {"required": [1, "data"]},
                                    {"properties": ["content"]}, {"required": {"a": 1}}])
def test_a_hostile_input_schema_is_no_internal_error(world: World, schema):
    """_check_args (reworked for data_as) read an upstream's inputSchema as a dict with a list of
    names under required: a string schema or a number there was -32603 Internal error."""
    tool = {"name": "odd", "description": "An upstream's odd tool.", "inputSchema": schema}
    world.fake("up", "--tool-def", json.dumps(tool))
    world.dir.mkdir()
    (world.dir / "in.json").write_text('{"data": [1, 2]}')
    proxy = world.start(str(world.dir))
    for extra in ({}, {"data_key": "content"}):
        res = proxy.request("tools/call", {"name": "call_tool_with_file_content", "arguments": {
            "server": "up", "tool_name": "odd", "file_path": "in.json", **extra}})
        assert "error" not in res, res  # the call goes through, or the model is told why
        assert '"data"' in text_of(res["result"]) or "requires data" in text_of(res["result"])
