"""Issue 25, items 1, 2, 5 and 6 (what a new user hit), through real servers: a file sent as text
to a tool that takes a string; SQL results made by SQLite's JSON functions saved as JSON; a
boolean column compared to 'true'; text outputs asked in SQL and searched by line.

The real servers are installed by tests/realservers/install.sh; without them this module is
skipped with one line, as tests/realservers/test_realservers.py is.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import pytest

from conftest import TESTS, text_of

sys.path.insert(0, str(TESTS / "realservers"))
from test_realservers import call, real, store, upstream  # noqa: E402,F401  (real: a fixture)


def token_of(res: dict) -> str:
    return re.search(r"Token: (\S+) ", text_of(res)).group(1)


def memory(real, tmp_path: Path, name: str = "memory") -> None:
    real.add("memory", env={"MEMORY_FILE_PATH": str(tmp_path / f"{name}.jsonl")})
    if name != "memory":
        real.world.servers[name] = real.world.servers.pop("memory")


CUSTOMERS = "id,email,plan,active\n" + "".join(
    f"{i},c{i}@example.com,{'pro' if i % 3 else 'free'},{'true' if i % 2 else 'false'}\n"
    for i in range(1, 41))


# -- item 1: a file sent as text


def test_a_csv_goes_as_text_to_a_string_argument(real):
    real.filesystem()
    (real.data / "customers.csv").write_text(CUSTOMERS)
    proxy = real.start()
    (real.world.dir / "blob.json.gz").write_bytes(gzip.compress(b'{"a": [1, 2]}\n'))
    stored = store(proxy, "filesystem", "read_text_file", {"path": str(real.data / "customers.csv")},
                   file_format="csv", filename="customers")
    out = real.data / "c.csv"
    res = call(proxy, "call_tool_with_file_content", server="filesystem", tool_name="write_file",
               file_path=stored["path"], data_key="content", tool_args={"path": str(out)})
    assert not res.get("isError"), text_of(res)
    assert out.read_bytes() == Path(stored["path"]).read_bytes()
    # a .gz is sent decompressed, a .json's text as it is
    out2 = real.data / "blob.txt"
    res = call(proxy, "call_tool_with_file_content", server="filesystem", tool_name="write_file",
               file_path="blob.json.gz", data_key="content",
               tool_args={"path": str(out2)})
    assert not res.get("isError"), text_of(res)
    assert out2.read_text() == '{"a": [1, 2]}\n'
    # data_as "parsed" forces parsing: the mismatch names the parameter that sends text
    res = call(proxy, "call_tool_with_file_content", server="filesystem", tool_name="write_file",
               file_path=stored["path"], data_key="content", tool_args={"path": str(out)},
               data_as="parsed")
    assert res["isError"]
    assert text_of(res) == ("argument 'content' of tool 'write_file' must be string, but the file "
                            "gives list; data_as \"text\" sends the file's text as it is.")
    bad = call(proxy, "call_tool_with_file_content", server="filesystem", tool_name="write_file",
               file_path=stored["path"], data_as="words")
    assert bad["isError"] and "data_as must be text or parsed" in text_of(bad)


def test_data_as_text_needs_data_key(real):
    real.filesystem()
    proxy = real.start()
    (real.world.dir / "a.json").write_text('{"path": "x"}')
    res = call(proxy, "call_tool_with_file_content", server="filesystem", tool_name="write_file",
               file_path="a.json", data_as="text")
    assert res["isError"] and "data_as \"text\" needs data_key" in text_of(res)


def test_a_cached_output_goes_as_text_and_a_mismatch_says_cached_output(real, tmp_path):
    real.filesystem()
    memory(real, tmp_path)
    rows = "".join(f"{i},name {i}\n" for i in range(400))
    (real.data / "big.csv").write_text("id,name\n" + rows)
    proxy = real.start(settings={"output_cache": {"min_size": 1000}})
    token = token_of(upstream(proxy, "filesystem", "read_text_file", path=str(real.data / "big.csv")))
    out = real.data / "copy.csv"
    res = call(proxy, "call_tool_with_file_content", server="filesystem", tool_name="write_file",
               cache_token=token, data_key="content", tool_args={"path": str(out)})
    assert not res.get("isError"), text_of(res)
    assert out.read_text() == "id,name\n" + rows
    # memory's entities is an array: text forced into it is refused, naming data_as "parsed"
    res = call(proxy, "call_tool_with_file_content", server="memory", tool_name="create_entities",
               cache_token=token, data_key="entities", data_as="text")
    assert res["isError"]
    assert text_of(res) == ("argument 'entities' of tool 'create_entities' must be array, but the "
                            "cached output gives str; data_as \"parsed\" sends its data parsed.")


# -- item 6: text outputs asked in SQL and searched by line


def log_text() -> str:
    lines = []
    for i in range(1, 6001):
        if i % 150 == 0:
            lines.append(f"2026-11-27T10:{i % 60:02d}:00 ERROR job {i} failed: disk full")
        else:
            lines.append(f"2026-11-27T10:{i % 60:02d}:00 INFO job {i} done in {i % 97} ms")
    return "\n".join(lines) + "\n"


def test_a_cached_log_is_queried_a_row_a_line_and_searched_by_pattern(real):
    real.filesystem()
    text = log_text()
    assert 250_000 < len(text.encode()) < 350_000
    (real.data / "app.log").write_text(text)
    proxy = real.start()
    cached = upstream(proxy, "filesystem", "read_text_file", path=str(real.data / "app.log"))
    token = token_of(cached)
    answer = text_of(cached)
    assert (f'Find lines: retrieve_cached_output {{"token": "{token}", "pattern": "error"}}'
            in answer)
    assert (f'query_output {{"source": "{token}", "sql": "SELECT n, line FROM data WHERE line '
            f"LIKE '%error%'\"}}" in answer)
    res = call(proxy, "query_output", source=token,
               sql="SELECT n, line FROM data WHERE line LIKE '%ERROR%'")
    assert not res.get("isError"), text_of(res)
    lines = text.splitlines()
    want = [{"n": i, "line": line} for i, line in enumerate(lines, 1) if "ERROR" in line]
    assert len(want) == 40
    assert res["structuredContent"]["rows"] == want
    # n counts as start_line does: the line retrieve_cached_output shows there is the same
    got = call(proxy, "retrieve_cached_output", token=token, start_line=want[7]["n"], end_line=want[7]["n"])
    assert text_of(got) == want[7]["line"] + "\n"
    found = call(proxy, "retrieve_cached_output", token=token, pattern="error", context=1)
    assert not found.get("isError"), text_of(found)
    where = found["structuredContent"]
    assert where["matching_lines"] == [w["n"] for w in want] and where["next_line"] is None
    first = found["content"][0]["text"].split("\n")[:4]
    assert first == [f"149- {lines[148]}", f"150: {lines[149]}", f"151- {lines[150]}", "--"]
    assert found["content"][1]["text"] == ('[40 lines matching "error" in lines 1-6,000 of 6,000; '
                                           'end of the search]')
    # bounded like every window: a second Abstract with a 1,000-character window pages on
    proxy2 = real.start(settings={"output_cache": {"max_window_chars": 1000}})
    token2 = token_of(upstream(proxy2, "filesystem", "read_text_file", path=str(real.data / "app.log")))
    page = call(proxy2, "retrieve_cached_output", token=token2, pattern="ERROR")
    assert len(page["content"][0]["text"]) <= 1000
    nxt = page["structuredContent"]["next_line"]
    assert nxt and page["structuredContent"]["matching_lines"] == [w["n"] for w in want][:len(
        page["structuredContent"]["matching_lines"])]
    page2 = call(proxy2, "retrieve_cached_output", token=token2, pattern="ERROR", start_line=nxt)
    assert page2["structuredContent"]["matching_lines"][0] > page["structuredContent"]["matching_lines"][-1]


def test_pattern_arguments_are_checked(real):
    real.filesystem()
    (real.data / "app.log").write_text(log_text())
    proxy = real.start()
    token = token_of(upstream(proxy, "filesystem", "read_text_file", path=str(real.data / "app.log")))
    for args, said in [({"pattern": ""}, "pattern must be one line"),
                       ({"pattern": "a\nb"}, "pattern must be one line"),
                       ({"pattern": "x", "offset": 5}, "pattern searches lines"),
                       ({"context": 2}, "context needs pattern"),
                       ({"pattern": "x", "context": 11}, "context")]:
        res = call(proxy, "retrieve_cached_output", token=token, **args)
        assert res["isError"] and said in text_of(res), (args, text_of(res))
    # a pattern is text, never a regular expression: (a+)+$ finds nothing and costs nothing
    res = call(proxy, "retrieve_cached_output", token=token, pattern="(a+)+$")
    assert res["structuredContent"]["matching_lines"] == []
    assert res["content"][0]["text"] == "(no line matches)"


# -- item 5: a boolean column compared to 'true'


def test_a_boolean_filter_written_with_true_in_quotes_is_explained(real):
    real.filesystem()
    rows = "".join(f"{i},{'true' if i % 4 else 'false'},{i * 1.5}\n" for i in range(1, 801))
    (real.data / "users.csv").write_text("id,active,score\n" + rows)
    proxy = real.start()
    stored = store(proxy, "filesystem", "read_text_file", {"path": str(real.data / "users.csv")},
                   file_format="csv", filename="users")
    answer = text_of(call(proxy, "call_tool_and_store", server="filesystem",
                          tool_name="read_text_file", tool_args={"path": str(real.data / "users.csv")},
                          file_format="csv", filename="users2"))
    assert "columns: id integer, active boolean (1/0 in SQL), score number" in answer, answer
    res = call(proxy, "query_output", source=stored["path"],
               sql="SELECT count(*) AS n FROM data WHERE active = 'true'")
    assert not res.get("isError"), text_of(res)
    assert res["structuredContent"]["rows"] == [{"n": 0}]  # SQLite's answer, not rewritten
    assert ("Note: active holds booleans as 1 (true) and 0 (false), so the text 'true' or 'false' "
            "equals none of them: write active = 1, active = true (unquoted), or just WHERE "
            "active.") in text_of(res)
    for sql in ("SELECT count(*) AS n FROM data WHERE active", "SELECT count(*) AS n FROM data WHERE active = true"):
        res = call(proxy, "query_output", source=stored["path"], sql=sql)
        assert res["structuredContent"]["rows"] == [{"n": 600}] and "Note" not in text_of(res)
    # storing nothing says why too
    res = call(proxy, "query_output", source=stored["path"], file_format="json",
               sql="SELECT * FROM data WHERE \"Active\" = 'FALSE'")
    assert res["isError"] and text_of(res).startswith(
        "The query returned no rows, so nothing was stored. Note: active holds booleans")


# -- item 2: what SQLite made as JSON stays JSON


SQL_ENTITIES = ("SELECT email AS name, 'customer' AS entityType, json_array('plan: ' || plan) "
                "AS observations FROM data LIMIT 5")


def test_sql_json_saved_as_json_feeds_memory_create_entities(real, tmp_path):
    real.filesystem()
    memory(real, tmp_path)
    (real.data / "customers.csv").write_text(CUSTOMERS)
    proxy = real.start()
    stored = store(proxy, "filesystem", "read_text_file", {"path": str(real.data / "customers.csv")},
                   file_format="csv", filename="customers")
    want = [{"name": f"c{i}@example.com", "entityType": "customer",
             "observations": [f"plan: {'pro' if i % 3 else 'free'}"]} for i in range(1, 6)]
    res = call(proxy, "query_output", source=stored["path"], sql=SQL_ENTITIES)
    assert res["structuredContent"]["rows"] == want
    for fmt in ("json", "yaml", "xml"):
        out = call(proxy, "query_output", source=stored["path"], sql=SQL_ENTITIES, file_format=fmt,
                   filename=f"entities-{fmt}")
        assert not out.get("isError"), text_of(out)
    path = Path(out["structuredContent"]["path"]).with_name("entities-json.json")
    assert json.loads(path.read_text()) == want
    yaml_text = Path(out["structuredContent"]["path"]).with_name("entities-yaml.yaml").read_text()
    assert '  observations:\n    - "plan: pro"\n' in yaml_text  # a list, not a quoted "[...]"
    fed = call(proxy, "call_tool_with_file_content", server="memory", tool_name="create_entities",
               file_path=str(path), data_key="entities")
    assert not fed.get("isError"), text_of(fed)
    graph = json.loads(text_of(upstream(proxy, "memory", "read_graph")))
    got = sorted(graph["entities"], key=lambda e: e["name"])
    assert [{k: e[k] for k in ("name", "entityType", "observations")} for e in got] == want
    # the xml file holds the array as items, not one escaped string
    xml_text = Path(out["structuredContent"]["path"]).read_text()
    assert "[&quot;plan" not in xml_text and '["plan' not in xml_text, xml_text


def test_text_that_merely_looks_like_json_stays_text(real):
    real.filesystem()
    (real.data / "t.csv").write_text("id,note\n1,hello\n2,world\n")
    proxy = real.start()
    stored = store(proxy, "filesystem", "read_text_file", {"path": str(real.data / "t.csv")},
                   file_format="csv", filename="t")
    sql = ("SELECT id, '[1, 2]' AS looks, '{\"a\": 1}' || '' AS concat, "
           "json_object('id', id) -> '$.id' AS picked, json_array(id) ->> '$[0]' AS unquoted, "
           "CASE WHEN id = 1 THEN json_array(id) ELSE '[9]' END AS cased FROM data")
    rows = call(proxy, "query_output", source=stored["path"], sql=sql)["structuredContent"]["rows"]
    assert rows[0] == {"id": 1, "looks": "[1, 2]", "concat": '{"a": 1}', "picked": 1,
                       "unquoted": 1, "cased": "[1]"}
    union = call(proxy, "query_output", source=stored["path"],
                 sql="SELECT json_array(id) AS j FROM data UNION ALL SELECT '[3]' ORDER BY 1")
    assert union["structuredContent"]["rows"] == [{"j": "[1]"}, {"j": "[2]"}, {"j": "[3]"}]


@pytest.mark.parametrize("sql, width, want", [
    (SQL_ENTITIES, 3, [2]),
    ("select json_group_array(b) j, 1, '[1]' from data", 3, [0]),
    ("select a, x -> '$.a' obs, x ->> '$.a' s, '[1]' t from data", 4, [1]),
    ("with c as (select json_array(1) j) select j, json_object('a', j) AS o from c order by 1", 2, [1]),
    ("select *, json_array(1) from data", 4, [3]),
    ("select t.*, json_array(1), * from data t", 5, []),  # two stars: where each ends is unknown
    ("select json_array(1) union all select '[2]'", 1, []),
    ("select json_array(1) union all select json('[2]') order by 1", 1, [0]),
    ("select json_array(1) union values ('[2]')", 1, []),
    ("select distinct json(x) \"the json\", json_array(1) -> '$[0]' AND 1, t.x -> '$' from data t", 3, [0, 2]),
    ("select json_group_array(x) filter (where x > 1) over (), upper(json_array(1)) x", 2, [0]),
    ("select json_extract(j, '$.a'), coalesce(json_array(1), '[]') from data;", 2, []),
    ("select (select json_array(1)), 'json_array(1)', \"json_array\" from data", 3, []),
    ("-- json_array(1)\n/* json_object() */ select json_object('a', 1)", 1, [0]),
    ("values (json_array(1))", 1, []),
    ("", 0, []),
])
def test_which_result_columns_sqlite_made_as_json(sql, width, want):
    import abstract
    assert abstract._json_columns(sql, width) == want
