"""query_output (issue 16): SQL over cached outputs and stored files.

The engine (_load_table, _run_query, _Tables) is tested in-process with real sqlite3; the tool
end to end through `python abstract.py DIR` with fake_upstream.py behind it. Files are written
with independent writers (json, csv, gzip) or by Abstract's own store, and results are compared
with values computed here in Python.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import sqlite3
from pathlib import Path

import pytest

import abstract
from conftest import World, text_of
from fake_upstream import make_rows

TOKEN_RE = re.compile(r"Token: ([A-Za-z0-9_-]{16,64}) ")

NESTED = [{"id": i, "user": {"name": f"u{i}", "tags": ["a", "b"][: 1 + i % 2]}, "ok": i % 3 == 0,
           "big": 10**20 if i == 0 else i, "maybe": None if i % 2 else "x", **({"late": i} if i > 5 else {})}
          for i in range(10)]


# ==== unit: loading and the read-only engine =========================================


_LOADED: list = []


@pytest.fixture(autouse=True)
def _remove_tables():
    """Each test's tables' files removed after it (Abstract does so at shutdown)."""
    yield
    while _LOADED:
        _LOADED.pop().close()


def table(rows):
    t = abstract._load_table(rows)
    _LOADED.append(t)
    return t


def run(t, sql, keep=50, timeout=5.0, max_chars=1 << 20):
    return abstract._run_query(t, sql, keep, timeout, max_chars)


def test_values_keep_their_types_and_nested_values_are_json_text():
    t = table(NESTED)
    assert t.columns == ["id", "user", "ok", "big", "maybe", "late"]  # union of keys, first seen first
    res = run(t, "SELECT id, typeof(user), ok, big, typeof(big), maybe, late FROM data WHERE id IN (0, 7)")
    assert res.rows == [(0, "text", 1, str(10**20), "text", "x", None), (7, "text", 0, 7, "integer", None, 7)]
    got = run(t, "SELECT json_extract(user, '$.name'), json_array_length(user, '$.tags') FROM data WHERE id = 3")
    assert got.rows == [("u3", 2)]
    each = run(t, "SELECT d.id, j.value FROM data d, json_each(d.user, '$.tags') j WHERE d.id < 2 ORDER BY 1, 2")
    assert each.rows == [(0, "a"), (1, "a"), (1, "b")]
    # booleans are 1 and 0, as json_extract gives them: the two compare equal
    same = run(t, "SELECT count(*) FROM data WHERE ok = json_extract('{\"t\": true}', '$.t')")
    assert same.rows == [(sum(1 for r in NESTED if r["ok"]),)]


def test_keys_differing_only_in_case_get_their_own_columns():
    t = table([{"Name": "a", "name": "b", "": "c"}])
    assert t.columns == ["Name", "name_2", "column"]
    assert run(t, 'SELECT "Name", name_2, "column" FROM data').rows == [("a", "b", "c")]
    assert any("name_2" in n for n in t.notes)


def test_lone_surrogates_load_replaced():
    t = table([{"s": "a\ud800b"}])
    assert run(t, "SELECT s FROM data").rows == [("a\ufffdb",)]


def test_keep_bounds_the_rows_held_but_the_count_covers_all():
    t = table(make_rows(5000))
    res = run(t, "SELECT id FROM data WHERE ok", keep=3)
    assert res.rows == [(0,), (2,), (4,)] and res.total == 2500 and res.columns == ["id"]
    assert run(t, "SELECT id, id FROM data LIMIT 1").columns == ["id", "id_2"]  # records need unique keys


def test_the_whole_result_is_bounded_when_kept():
    t = table(make_rows(5000))
    with pytest.raises(abstract._ToolError, match=r"larger than 0 MB \(query.max_result_mb"):
        run(t, "SELECT * FROM data", keep=None, max_chars=10000)
    assert len(run(t, "SELECT * FROM data", keep=None).rows) == 5000


REFUSED = [
    ("INSERT INTO data (id) VALUES (1)", "INSERT"),
    ("UPDATE data SET id = 1", "UPDATE"),
    ("DELETE FROM data", "DELETE"),
    ("DROP TABLE data", "DROP TABLE"),
    ("CREATE TABLE t (x)", "CREATE TABLE"),
    ("CREATE INDEX i ON data (id)", "CREATE INDEX"),
    ("ATTACH DATABASE ':memory:' AS other", "ATTACH"),
    ("PRAGMA query_only = OFF", "PRAGMA query_only"),
    ("PRAGMA table_info(data)", "PRAGMA table_info"),
    ("SELECT load_extension('x')", "the function load_extension()"),
    ("SELECT name FROM sqlite_master", "reading table sqlite_master"),
    ("BEGIN", "TRANSACTION"),
    ("SAVEPOINT s", "SAVEPOINT"),
    ("WITH x AS (SELECT 1) DELETE FROM data", "DELETE"),
]


@pytest.mark.parametrize("sql, what", REFUSED)
def test_the_authorizer_refuses_everything_but_reading(sql, what):
    t = table(make_rows(20))
    with pytest.raises(abstract._ToolError) as e:
        run(t, sql)
    assert str(e.value).startswith(f"Refused: {what}") and "read-only SELECT" in str(e.value)
    assert run(t, "SELECT count(*), sum(id) FROM data").rows == [(20, 190)]  # nothing changed


def test_the_workers_open_the_table_read_only_whatever_the_authorizer():
    t = table(make_rows(3))
    db = sqlite3.connect(abstract._query_job(t, "", 1, 1.0, 1, 64)["uri"], uri=True)  # the worker's
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        db.execute("DELETE FROM data")
    db.close()


def test_a_recursive_cte_past_the_time_limit_is_stopped():
    t = table(make_rows(3))
    with pytest.raises(abstract._ToolError, match=r"ran longer than 0.3 s and was stopped \(query.timeout_seconds"):
        run(t, "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r", timeout=0.3)
    ok = run(t, "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 100) SELECT sum(x) FROM r")
    assert ok.rows == [(5050,)]


@pytest.mark.parametrize("sql, message", [
    ("SELEC id FROM data", 'SQL syntax error (SQLite: near "SELEC": syntax error)'),
    ("SELECT id FROM data WHERE", "SQL syntax error (SQLite: incomplete input)"),
    ("SELECT nope FROM data", "SQLite: no such column: nope. The columns of data: id, name, score, ok."),
    ("SELECT * FROM other", "SQLite: no such table: other. The records are in the one table data (id, name, score, ok)."),
    ("SELECT 1; SELECT 2", "Give one statement only"),
])
def test_errors_say_what_is_wrong(sql, message):
    with pytest.raises(abstract._ToolError) as e:
        run(table(make_rows(3)), sql)
    assert message in str(e.value)


def test_loaded_tables_are_kept_within_the_budget_least_recently_used_first():
    tables = abstract._Tables()
    a, b, c = (table(make_rows(2000)) for _ in range(3))
    budget = a.size + b.size + c.size // 2  # room for two
    tables.put("a", a, budget)
    tables.put("b", b, budget)
    assert tables.get("a") is a  # a is now the most recently used
    tables.put("c", c, budget)
    assert tables.get("b") is None and b.closed and tables.get("a") is a and tables.get("c") is c
    with pytest.raises(abstract._Closed):
        run(b, "SELECT 1")
    huge = table(make_rows(2000))
    tables.put("huge", huge, 1)  # bigger than the budget: it alone stays
    assert tables.get("huge") is huge and tables.get("a") is None and tables.get("c") is None


def test_answer_table_is_one_line_a_row_and_fits_the_limit():
    text, shown = abstract._query_table_text(["a", "b"], [(1, "x|y\nz"), (None, "w" * 500)], 1000)
    assert text.split("\n") == ["a | b", "1 | x\\|y\\nz", "null | " + "w" * 199 + "…"] and shown == 2
    assert abstract._query_table_text(["a"], [("x" * 100,)] * 50, 500)[1] == 4


# ==== end to end ===================================================================


@pytest.fixture(scope="module")
def qw(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("query")
    w = World(tmp)
    w.fake("up")
    w.dir.mkdir()
    w.settings = {"output_cache": {"min_size": 1000}, "query": {"timeout_seconds": 2}}
    w.start()
    try:
        yield w
    finally:
        w.cleanup()


@pytest.fixture
def px(qw):
    return qw.proxies[0]


def cached_token(px, tool="rows", **args) -> str:
    res = px.upstream("up", tool, args)
    m = TOKEN_RE.search(text_of(res))
    assert m, text_of(res)[:300]
    return m.group(1)


def query(px, **args) -> dict:
    return px.call_tool("query_output", args, timeout=30)


def ok(res: dict) -> dict:
    assert not res.get("isError"), text_of(res)
    return res["structuredContent"]


def test_a_cached_output_answers_sql(px):
    token = cached_token(px, n=2000)
    res = query(px, source=token, sql="SELECT ok, count(*) AS n, max(score) AS top FROM data GROUP BY ok ORDER BY ok")
    sc = ok(res)
    assert sc["columns"] == ["ok", "n", "top"] and sc["row_count"] == 2 and sc["returned"] == 2
    assert sc["rows"] == [{"ok": 0, "n": 1000, "top": 999.5}, {"ok": 1, "n": 1000, "top": 999.0}]
    assert isinstance(sc["elapsed_ms"], float) and sc["source"].startswith(f"cached output {token} (up.rows)")
    text = text_of(res)
    assert text.startswith(f"2 rows in ") and "columns: ok, n, top." in text
    assert "ok | n | top\n0 | 1000 | 999.5\n1 | 1000 | 999.0" in text
    assert len(json.dumps(res)) < 1500  # 2,000 records stayed out of the answer


def test_limit_shows_a_few_rows_and_counts_them_all(px):
    token = cached_token(px, n=300)
    sc = ok(query(px, source=token, sql="SELECT id FROM data WHERE id % 3 = 0", limit=4))
    assert sc["row_count"] == 100 and sc["rows"] == [{"id": i} for i in (0, 3, 6, 9)]
    res = query(px, source=token, sql="SELECT id FROM data", limit=0)
    assert ok(res)["rows"] == [] and ok(res)["row_count"] == 300
    default = query(px, source=token, sql="SELECT id FROM data")
    assert ok(default)["returned"] == 50 and "[50 of 300 rows shown." in text_of(default)
    bad = query(px, source=token, sql="SELECT 1", limit=5000)
    assert bad["isError"] and "'limit' must be an integer from 0 to 1,000" in text_of(bad)


def test_the_answer_never_passes_the_retrieval_window(px):
    rows = [{"i": i, "text": "y" * 180} for i in range(400)]
    token = cached_token(px, "result", result={"content": [{"type": "text", "text": json.dumps(rows)}]})
    res = query(px, source=token, sql="SELECT * FROM data", limit=1000)
    sc = ok(res)
    assert len(text_of(res)) <= 20000 and sc["row_count"] == 400 and 50 < sc["returned"] < 400
    assert len(sc["rows"]) == sc["returned"] and f"[{sc['returned']} of 400 rows shown." in text_of(res)


def test_refusals_and_errors_reach_the_model(px):
    token = cached_token(px, n=50)
    res = query(px, source=token, sql="DELETE FROM data")
    assert res["isError"] and text_of(res).startswith("Refused: DELETE.")
    res = query(px, source=token, sql="ATTACH DATABASE '/tmp/x.db' AS x")
    assert res["isError"] and text_of(res).startswith("Refused: ATTACH")
    res = query(px, source=token, sql="SELECT nme FROM data")
    assert res["isError"] and "no such column: nme. The columns of data: id, name, score, ok." in text_of(res)
    slow = query(px, source=token, sql="WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                                       "SELECT max(x) FROM r")
    assert slow["isError"] and "ran longer than 2 s and was stopped" in text_of(slow)
    assert ok(query(px, source=token, sql="SELECT count(*) AS n FROM data"))["rows"] == [{"n": 50}]


def test_unknown_sources_and_arguments_are_named(px):
    res = query(px, source="AAAAAAAAAAAAAAAAAAAAAAAA", sql="SELECT 1")
    assert res["isError"] and "No cached output with token AAAAAAAAAAAAAAAAAAAAAAAA" in text_of(res)
    res = query(px, source="missing.csv", sql="SELECT 1")
    assert res["isError"] and "source 'missing.csv' does not exist" in text_of(res)
    res = query(px, source="/etc/passwd", sql="SELECT 1")
    assert res["isError"] and "outside the allowed directories" in text_of(res)
    res = query(px, source="x.csv", query="SELECT 1")
    assert res["isError"] and "query_output has no argument 'query'" in text_of(res)
    res = query(px, source="x.csv", sql="SELECT 1", filename="out")
    assert res["isError"] and "filename need file_format" in text_of(res)


def write_sources(root: Path, rows: list) -> dict:
    """rows written in every readable format by independent writers (yaml and xml by Abstract's
    own store, below); returns name -> path."""
    out = {}
    (root / "rows.json").write_text(json.dumps(rows))
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name, delim in (("rows.csv", ","), ("rows.tsv", "\t")):
        with open(root / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter=delim)
            w.writeheader()
            w.writerows(rows)
    with gzip.open(root / "rows.csv.gz", "wt", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (root / "rows.json.gz").write_bytes(gzip.compress(json.dumps({"meta": 1, "items": rows}).encode()))
    return out


@pytest.mark.parametrize("name", ["rows.json", "rows.jsonl", "rows.csv", "rows.tsv", "rows.csv.gz", "rows.json.gz",
                                  "stored.yaml", "stored.xml", "stored.json"])
def test_every_source_format(px, qw, name):
    rows = [{"id": i, "zip": f"0{2100 + i}", "city": f"City {i}, X", "pop": i * 1000 + 0.5} for i in range(40)]
    src = qw.dir / "sources"
    if not src.exists():
        src.mkdir()
        write_sources(src, rows)
        for fmt in ("yaml", "xml", "json"):
            res = px.call_tool("call_tool_and_store", {"server": "up", "tool_name": "result", "tool_args": {
                "result": {"content": [{"type": "text", "text": json.dumps(rows)}]}}, "file_format": fmt,
                "storage_path": "sources", "filename": "stored"})
            assert not res.get("isError"), text_of(res)
    sc = ok(query(px, source=f"sources/{name}", sql="SELECT id, zip, typeof(zip) AS t, pop FROM data "
                                                    "WHERE pop > 30000 ORDER BY id"))
    want = [{"id": r["id"], "zip": r["zip"], "t": "text", "pop": r["pop"]} for r in rows if r["pop"] > 30000]
    assert sc["rows"] == want and sc["source"].endswith(name)  # "02130" stays text, numbers are numbers


def test_a_wrapper_with_several_lists_needs_records_pointer(px, qw):
    (qw.dir / "two.json").write_text(json.dumps({"users": [{"a": 1}, {"a": 2}], "teams": [{"t": "x"}]}))
    res = query(px, source="two.json", sql="SELECT * FROM data")
    assert res["isError"] and "several lists of records (users, teams)" in text_of(res)
    assert "records_pointer" in text_of(res) and "/users, /teams" in text_of(res)
    assert ok(query(px, source="two.json", sql="SELECT sum(a) AS s FROM data", records_pointer="/users"))["rows"] == \
        [{"s": 3}]
    res = query(px, source="two.json", sql="SELECT 1", records_pointer="/nope")
    assert res["isError"] and "no 'nope' in dict" in text_of(res)


def test_text_that_is_not_records_is_a_row_a_line(px, qw):
    (qw.dir / "notes.txt").write_text("just some words\r\nand more\n")
    res = query(px, source="notes.txt", sql="SELECT n, line FROM data")
    assert ok(res)["rows"] == [{"n": 1, "line": "just some words"}, {"n": 2, "line": "and more"}]
    res = query(px, source="notes.txt", sql="SELECT 1", records_pointer="/a")
    assert res["isError"] and "records_pointer needs JSON data" in text_of(res)


def test_a_loaded_file_is_reused_until_it_changes(px, qw):
    path = qw.dir / "reuse.json"
    path.write_text(json.dumps([{"v": 1}, {"v": 2}]))
    st = path.stat()
    assert ok(query(px, source="reuse.json", sql="SELECT sum(v) AS s FROM data"))["rows"] == [{"s": 3}]
    path.write_text(json.dumps([{"v": 5}, {"v": 7}]))  # same size ...
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and time: the loaded table answers
    assert ok(query(px, source="reuse.json", sql="SELECT sum(v) AS s FROM data"))["rows"] == [{"s": 3}]
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # changed: loaded again
    assert ok(query(px, source="reuse.json", sql="SELECT sum(v) AS s FROM data"))["rows"] == [{"s": 12}]


def test_a_loaded_cached_output_is_reused(px, qw):
    token = cached_token(px, n=100)
    assert ok(query(px, source=token, sql="SELECT count(*) AS n FROM data"))["rows"] == [{"n": 100}]
    (qw.tmp / "cache" / f"{token}.txt").unlink()  # a fresh load would now fail: the loaded table is used
    assert ok(query(px, source=token, sql="SELECT max(id) AS m FROM data"))["rows"] == [{"m": 99}]
    other = query(px, source=token, sql="SELECT 1", records_pointer="/0")  # another table: needs the file
    assert other["isError"] and "is gone" in text_of(other)


def test_the_whole_result_is_stored_with_file_format(px, qw):
    token = cached_token(px, n=3000)
    res = query(px, source=token, sql="SELECT id, name FROM data WHERE ok ORDER BY id DESC", file_format="csv",
                filename="evens", storage_path="queries")
    sc = ok(res)
    path = Path(sc["path"])
    assert path == qw.dir.resolve() / "queries" / "evens.csv" and sc["rows"] == 1500 and sc["columns"] == 2
    with open(path, newline="") as f:
        assert list(csv.DictReader(f)) == [{"id": str(i), "name": f"name {i}"} for i in range(2998, -1, -2)]
    text = text_of(res)
    assert text.startswith(f"Stored the result of abstract.query_output as CSV: {path}") and "Preview:" in text
    assert len(json.dumps(res)) < 2500
    again = ok(query(px, source=token, sql="SELECT 1 AS one", file_format="json", filename="evens",
                     storage_path="queries"))
    assert again["path"].endswith("evens.json")
    third = ok(query(px, source=token, sql="SELECT 1 AS one", file_format="csv", filename="evens",
                     storage_path="queries"))
    assert third["path"].endswith("evens-1.csv")  # never overwritten
    empty = query(px, source=token, sql="SELECT id FROM data WHERE id < 0", file_format="csv", filename="none")
    assert empty["isError"] and "no rows, so nothing was stored" in text_of(empty)
    assert not (qw.dir / "none.csv").exists()
    out = query(px, source=token, sql="SELECT 1", file_format="csv", storage_path="/tmp")
    assert out["isError"] and "outside the allowed directories" in text_of(out)


def test_query_output_is_offered_and_described(px):
    tools = {t["name"]: t for t in px.result("tools/list")["tools"]}
    schema = tools["query_output"]["inputSchema"]
    assert schema["required"] == ["source", "sql"]
    assert set(schema["properties"]) == {"source", "sql", "limit", "records_pointer", "file_format", "filename",
                                         "storage_path"}


# ==== the cached and stored answers point at query_output, and show the shape ========

HINT_RE = re.compile(r"query_output (\{.*\}) \(table data; columns: (.*)\)\.")


def follow_hint(px, text: str) -> dict:
    """Make the query_output call an answer suggests, as a model would."""
    m = HINT_RE.search(text)
    assert m, text
    return query(px, **json.loads(m.group(1)))


def test_a_cached_answer_shows_the_shape_and_how_to_ask(px):
    rows = [{"id": i, "name": f"n{i}", "tags": ["x"] * (i % 3), **({"city": None} if i % 4 == 0 else {}),
             **({"city": "Oslo"} if i % 4 == 1 else {})} for i in range(100)]
    text = text_of(px.upstream("up", "result", {"result": {"content": [{"type": "text", "text": json.dumps(rows)}]}}))
    assert "Shape: 100 records; columns: id integer, name text, tags array, city text (25 null, 50 missing)" in text
    assert HINT_RE.search(text).group(2) == "id, name, tags, city"
    assert ok(follow_hint(px, text))["rows"] == [{"count(*)": 100}]


def test_a_large_records_text_read_in_one_pass_answers_as_the_whole_parse_did(px):
    """Over 100,000 characters an array of records is cached in one pass over its text (never
    parsed whole): the same shape, preview, cached text and table, through a real Abstract."""
    rows = [{"id": i, "name": f"n{i}", "tags": ["x"] * (i % 3), **({"city": None} if i % 4 == 0 else {}),
             **({"city": "Oslo"} if i % 4 == 1 else {})} for i in range(3000)]
    text = json.dumps(rows, indent=1)  # records over several lines, odd whitespace: still one pass
    assert len(text) > 100_000
    answer = text_of(px.upstream("up", "result", {"result": {"content": [{"type": "text", "text": text}]}}))
    assert "Shape: 3,000 records; columns: id integer, name text, tags array, city text (750 null, 1,500 missing)" \
        in answer and '\n{"id":0,"name":"n0","tags":[],"city":null}\n' in answer
    token = TOKEN_RE.search(answer).group(1)
    got = ok(query(px, source=token, sql="SELECT count(*) AS n, count(city) AS c, sum(json_array_length(tags)) AS t "
                                         "FROM data"))
    assert got["rows"] == [{"n": 3000, "c": 750, "t": 3000}]
    window = px.call_tool("retrieve_cached_output", {"token": token, "start_line": 2, "end_line": 3})
    assert text_of(window).startswith('{"id": 0, "name": "n0", "tags": [], "city": null},\n{"id": 1, ')


def test_a_cached_object_shows_its_tree_and_the_records_pointer(px):
    doc = {"meta": {"total": 2, "page": {"next": None, "size": 50}},
           "users": [{"id": i, "name": "x" * 30} for i in range(40)], "teams": [{"t": 1}], "ids": list(range(7))}
    text = text_of(px.upstream("up", "result", {"result": {"content": [{"type": "text", "text": json.dumps(doc)}]}}))
    assert ("Shape: an object:\nmeta: object of 2 keys\n  total: integer\n  page: object of 2 keys\n"
            "    next: null\n    size: integer\nusers: list of 40 objects\nteams: list of 1 objects\n"
            "ids: list of 7 integers") in text
    assert '"records_pointer": "/users"' in text
    assert ok(follow_hint(px, text))["rows"] == [{"count(*)": 40}]


def test_a_stored_answer_points_at_query_output_over_the_file(px):
    res = px.call_tool("call_tool_and_store", {"server": "up", "tool_name": "rows", "tool_args": {"n": 300},
                                               "file_format": "csv", "storage_path": "hinted"})
    text = text_of(res)
    assert "Shape: 300 records; columns: id integer, name text, score number, ok boolean" in text
    path = res["structuredContent"]["path"]
    assert json.loads(HINT_RE.search(text).group(1))["source"] == path
    assert ok(follow_hint(px, text))["rows"] == [{"count(*)": 300}]
    txt = px.call_tool("call_tool_and_store", {"server": "up", "tool_name": "echo", "tool_args": {"text": "a\nb\nc"},
                                               "storage_path": "hinted"})
    assert "Shape: text, 3 lines." in text_of(txt)
    assert ok(follow_hint(px, text_of(txt)))["rows"] == []  # (a row a line: none has "error")


def test_retrieve_pages_by_record(px):
    token = cached_token(px, n=500)
    got = px.call_tool("retrieve_cached_output", {"token": token, "record_offset": 10, "record_count": 3})
    assert [json.loads(line) for line in text_of(got).split("\n")] == make_rows(500)[10:13]
    assert got["content"][1]["text"] == "[records 10-12 of 500; next: record_offset=13]"
    sc = got["structuredContent"]
    assert (sc["record_offset"], sc["record_count"], sc["total_records"], sc["next_record_offset"]) == (10, 3, 500, 13)
    end = px.call_tool("retrieve_cached_output", {"token": token, "record_offset": 498})
    assert len(text_of(end).split("\n")) == 2 and end["content"][1]["text"] == "[records 498-499 of 500; end of records]"
    many = px.call_tool("retrieve_cached_output", {"token": token, "record_count": 500})  # bounded by the window
    assert 100 < many["structuredContent"]["record_count"] < 500 and len(text_of(many)) <= 20000
    wrapped = cached_token(px, "result", result={"content": [{"type": "text", "text": json.dumps(
        {"data": {"items": make_rows(100)}})}]})
    inner = px.call_tool("retrieve_cached_output", {"token": wrapped, "pointer": "/data", "record_offset": 99})
    assert json.loads(text_of(inner)) == make_rows(100)[99]
    both = px.call_tool("retrieve_cached_output", {"token": token, "record_offset": 1, "offset": 5})
    assert both["isError"] and "one way to page" in text_of(both)
    nums = cached_token(px, "result", result={"content": [{"type": "text", "text": json.dumps(list(range(3000)))}]})
    bad = px.call_tool("retrieve_cached_output", {"token": nums, "record_offset": 0})
    assert bad["isError"] and "need a list of records; this data is a list of plain values" in text_of(bad)


# ==== the threshold by client ======================================================


def start_as(world: World, client: str):
    p = world.start(initialize=False)
    p.result("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": client, "version": "1"}})
    p.notify("notifications/initialized")
    return p


def is_cached(res: dict) -> bool:
    return bool(TOKEN_RE.search(text_of(res)))


@pytest.mark.parametrize("client, cached_at, passed_at", [
    ("claude-ai", 20001, 20000), ("Cursor-VSCode", 20001, 20000), ("claude-code", 40001, 40000),
    ("pytest", 50001, 50000), ("", 50001, 50000)])
def test_the_default_threshold_follows_the_client(world, client, cached_at, passed_at):
    world.fake("up")
    p = start_as(world, client)
    assert not is_cached(p.upstream("up", "echo", {"text": "x" * passed_at}))
    assert is_cached(p.upstream("up", "echo", {"text": "x" * cached_at}))


def test_a_min_size_setting_wins_over_the_client_default_and_modern_requests_name_their_client(world):
    world.fake("up")
    world.settings = {"servers": {"up": {"cache_outputs": {"min_size": 30000}}}}
    p = start_as(world, "claude-ai")
    assert not is_cached(p.upstream("up", "echo", {"text": "x" * 30000}))  # the setting, not 20,000
    assert is_cached(p.upstream("up", "echo", {"text": "x" * 30001}))
    world.settings = None
    q = world.start(initialize=False)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "claude-ai", "version": "1"}}
    args = {"server": "up", "tool_name": "echo", "tool_args": {"text": "x" * 25000}}
    assert is_cached(q.call_tool("call_tool", args, meta=meta))
    meta["io.modelcontextprotocol/clientInfo"] = {"name": "other", "version": "1"}
    assert not is_cached(q.call_tool("call_tool", args, meta=meta))
