"""The one-pass large-output path (issue 16): a large JSON array of records is cached without
being held whole as Python objects (_scan_records), and loaded into query tables a line of the
cached view at a time (_view_records). Everything it gives must be what the ordinary path
(json.loads, then _json_view, _shape, _records_preview, _query_hint) gives for the same input,
so each test compares the two on real files written by a real OutputCache."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

import abstract
from fake_upstream import make_rows


def _cache(path: Path) -> abstract._OutputCache:
    return abstract._OutputCache(str(path), abstract._Settings({"output_cache": {}}))


def _result(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}]}


def _old(text: str):
    """What the ordinary path makes of the text: its data and its text view."""
    data = abstract._json_or_text(text)
    return data, data if isinstance(data, str) else abstract._json_view(data)


def _pad(rows: list) -> list:
    """Enough records for the text to pass _VIEW_INDENT_MAX (the one-pass path's threshold)."""
    while len(json.dumps(rows)) <= abstract._VIEW_INDENT_MAX:
        rows = rows + rows
    return rows


def _put(tmp_path: Path, text: str, head_chars: int = 500):
    cache = _cache(tmp_path / "cache")
    entry, ex, _ = cache.put(_result(text), "s", "t", head_chars)
    view = (tmp_path / "cache" / (entry.token + ".txt")).read_bytes()
    return cache, entry, ex, view


def _view_lines(view: bytes) -> list:
    """The lines of a records view: "[", a record a line (each followed by a comma but the
    last), "]"."""
    text = view.decode("utf-8", "surrogatepass")
    assert text.startswith("[\n") and text.endswith("\n]"), text[:80]
    lines = text[2:-2].split("\n")
    assert all(line.endswith(",") for line in lines[:-1]) and not lines[-1].endswith(",")
    return [line[:-1] for line in lines[:-1]] + lines[-1:]


def _assert_same_as_old(tmp_path: Path, text: str, one_pass: bool = True) -> None:
    cache, entry, ex, view = _put(tmp_path, text)
    data, old_view = _old(text)
    assert isinstance(ex.data, abstract._Records) is one_pass
    if one_pass:  # a record a line, the same records: each line the server's own text for it
        # when that is one line escaping nothing to \u, else as _json_view writes it
        old_lines = _view_lines(old_view.encode("utf-8", "surrogatepass"))
        lines = _view_lines(view)
        assert [json.loads(line) for line in lines] == data and len(lines) == len(old_lines)
        for line, old_line in zip(lines, old_lines):
            assert line == old_line or ("\\u" not in line and line in text)
        assert entry.chars == len(view.decode("utf-8", "surrogatepass"))
    else:
        assert view == old_view.encode("utf-8", "surrogatepass")
        assert entry.chars == len(old_view)
    assert entry.sha256 == hashlib.sha256(view).hexdigest()
    assert entry.ctype == ("text/plain" if isinstance(data, str) else "application/json")
    for limit in (0, 120, 500, 5000):
        assert abstract._shape(ex.data, limit) == abstract._shape(data, limit)
        if limit <= 500:  # (the preview put() was told of)
            assert abstract._records_preview(ex.data, limit) == abstract._records_preview(data, limit)
    assert abstract._query_hint("tok", ex.data) == abstract._query_hint("tok", data)
    assert abstract._suggested_format(ex.data) == abstract._suggested_format(data)
    stored = json.loads((tmp_path / "cache" / (entry.token + ".json")).read_bytes().decode("utf-8", "surrogatepass"))
    assert stored == {"result": _result(text)}
    assert cache.result(entry) == _result(text)


def test_records_are_cached_in_one_pass_with_the_same_view_and_shape(tmp_path, monkeypatch):
    rows = _pad(make_rows(300))
    text = json.dumps(rows, ensure_ascii=False)
    # the one pass never parses the whole text: _extract (json.loads of it) is not called
    monkeypatch.setattr(abstract, "_extract", lambda res: pytest.fail("the records were parsed whole"))
    _assert_same_as_old(tmp_path, text)


@pytest.mark.parametrize("text", [
    # odd whitespace between and around the records (JSON's four kinds), and none at all
    " \r\n\t[ \n\t{\"a\": 1 ,\"b\" :\"x\"}\r\n ,\t{\"a\": 2, \"c\": [1, [2, [3]]]} \n] \t\r\n",
    "[{\"a\":1,\"b\":\"x\"},{\"a\":2,\"c\":{\"d\":[{\"e\":null}]}}]",
    # astral and other non-ASCII text, escapes, a lone surrogate escape (kept, as json.loads keeps it)
    "[{\"t\": \"caf\u00e9 \u2713 \u65e5\u672c \U0001F680\", \"e\": \"\\ud83d\\ude80 \\ud800 \\\"q\\\" \\n\"}]",
    # keys missing, null, of mixed kinds, differing only in case
    "[{\"id\": 1, \"v\": null}, {\"ID\": 2, \"v\": 1.5}, {\"id\": \"3\", \"w\": true}]",
])
def test_the_same_as_the_ordinary_path_for_odd_records(tmp_path, text):
    head, _, tail = text.rpartition("]")
    body = head[head.index("[") + 1:]
    text = head[:head.index("[") + 1] + ",".join([body] * (abstract._VIEW_INDENT_MAX // len(body) + 2)) + "]" + tail
    _assert_same_as_old(tmp_path, text)


def test_a_huge_single_record(tmp_path):
    text = json.dumps([{"id": 1, "values": list(range(60000)), "nested": {"a": [[1, 2], {"b": "x" * 200000}]}}])
    _assert_same_as_old(tmp_path, text)


def test_more_records_than_the_shape_scans(tmp_path):
    rows = [{"id": i, "x": None if i % 7 == 0 else i * 0.5} for i in range(abstract._SHAPE_SCAN + 500)]
    rows.append({"id": "late", "only_here": True})  # past the scan: in the count, not in the types
    text = json.dumps(rows)
    _assert_same_as_old(tmp_path, text)
    _, _, ex, _ = _put(tmp_path / "again", text)
    assert ex.data.count == len(rows) and "types from the first 20,000" in abstract._shape(ex.data, 2000)


@pytest.mark.parametrize("make", [
    lambda: json.dumps(list(range(40000))),  # an array of numbers: no records
    lambda: json.dumps([{"a": i} for i in range(9000)] + [5]),  # an object, then a number
    lambda: json.dumps([[{"a": i}] for i in range(9000)]),  # nested arrays of records
    lambda: json.dumps([{"a": "x" * 50}] * 4000)[:-1],  # cut short: not JSON
    lambda: json.dumps([{"a": "x" * 50}] * 4000) + " []",  # more after the array
    lambda: json.dumps([{"a": "x" * 50}] * 4000)[:-1] + ",]",  # a trailing comma
    lambda: json.dumps([{"a": "x" * 50}] * 4000).replace('"x', 'NaN, "y', 1),  # NaN is not JSON
    lambda: "[" + " " * 200000 + "]",  # an empty array, padded
])
def test_what_is_not_an_array_of_records_is_read_the_ordinary_way(tmp_path, make):
    _assert_same_as_old(tmp_path, make(), one_pass=False)


def test_a_small_array_is_read_the_ordinary_way(tmp_path):
    _assert_same_as_old(tmp_path, json.dumps([{"a": 1}, {"b": [1, 2]}]), one_pass=False)


def test_a_preview_wider_than_the_default_keeps_enough_records(tmp_path):
    rows = _pad(make_rows(50))
    _, _, ex, _ = _put(tmp_path, json.dumps(rows, ensure_ascii=False), head_chars=20000)
    assert abstract._records_preview(ex.data, 20000) == abstract._records_preview(rows, 20000)
    assert len(ex.data.head) < len(rows)  # and not all of them


def test_the_catalog_counts_the_records(tmp_path):
    rows = _pad(make_rows(40))
    cache, entry, ex, _ = _put(tmp_path, json.dumps(rows))
    assert abstract._cache_record(cache, entry, 1000, ex.data)["rows"] == len(rows)


# ==== loading a cached view into a query table, a line at a time ====================


def _db(table) -> sqlite3.Connection:
    """The table's database file, opened here (queries read it in their worker processes)."""
    return sqlite3.connect(table.path)


def _table_of(table) -> tuple:
    db = _db(table)
    cols = [d[0] for d in db.execute("SELECT * FROM data LIMIT 0").description]
    got = table.columns, cols, table.rows, table.notes, db.execute("SELECT * FROM data").fetchall()
    db.close()
    table.close()
    return got


def _loaded(tmp_path: Path, data) -> tuple:
    """(the table streamed from the cached view, the table loaded from the view parsed whole)."""
    cache = _cache(tmp_path / "cache")
    text = json.dumps(data, ensure_ascii=False)
    entry, _, _ = cache.put(_result(text), "s", "t")
    streamed = abstract._cached_table(cache, entry, None, "x")
    whole = abstract._load_table(abstract._query_records(abstract._cached_data(cache, entry), None, "x"))
    return _table_of(streamed), _table_of(whole)


@pytest.mark.parametrize("data", [
    make_rows(3000),
    # keys first seen late (in a later batch), differing only in case, empty; nested values
    [{"a": i} for i in range(2500)] + [{"A": 1, "": 2, "b": {"c": [1, {"d": None}]}}, {"a": True}],
    [{} for _ in range(1500)] + [{"late": i} for i in range(10)],  # rows before the first key
    [{} for _ in range(10)],  # no key at all: one column, value
    [{"big": 2 ** 70, "s": "\ud800 lone", "f": 1.5e300}],
])
def test_a_view_streamed_loads_the_table_parsing_it_whole_loads(tmp_path, data):
    streamed, whole = _loaded(tmp_path, data)
    assert streamed == whole
    assert streamed[2] == len(data)


@pytest.mark.parametrize("data", [
    [{"a": 1}, {"b": 2}],  # a small view, indented
    list(range(30000)),  # a list of numbers, one a line: rows of "value"
    {"items": make_rows(2000), "total": 2000},  # records inside an object
])
def test_other_views_load_as_before(tmp_path, data):
    streamed, whole = _loaded(tmp_path, data)
    assert streamed == whole


def test_view_records_refuses_what_it_did_not_write():
    import io

    good = b'[\n{"a": 1},\n{"a": 2}\n]'
    assert list(abstract._view_records(io.BytesIO(good))) == [{"a": 1}, {"a": 2}]
    assert list(abstract._view_records(io.BytesIO(good), block=4)) == [{"a": 1}, {"a": 2}]  # "]" in a later block
    for bad in (b'[\n  {"a": 1}\n]', b'[\n{"a": 1},\n{"a": 2}\n', b'[\n{"a": 1}\n]x', b'[\n1,\n2\n]',
                b'{\n"a": 1\n}', b'[\n{"a": 1} {"a": 2}\n]'):
        with pytest.raises(abstract._NotRecords):
            list(abstract._view_records(io.BytesIO(bad)))


def test_a_lone_surrogate_midway_is_replaced_and_no_row_doubles():
    rows = [{"s": "ok"}] * 5 + [{"s": "\ud800"}] + [{"s": "ok"}] * 5
    table = abstract._load_table(iter(rows), batch=4)
    db = _db(table)
    assert db.execute("SELECT count(*), sum(s = '\ufffd') FROM data").fetchone() == (11, 1)
    db.close()
    table.close()


def test_compact_parts_write_what_dumps_writes():
    text = "a\"\\\n\u00e9\U0001F680\ud800" * 300000  # longer than a part; escapes at the slice edges
    for value in ({"result": {"content": [{"type": "text", "text": text}], "isError": False}},
                  {"result": {"structuredContent": [{"k": i} for i in range(300)], "x": [1, {2: 3}]}},
                  [], {}, "x", 1.5, None):
        assert "".join(abstract._compact_parts(value)) == abstract._dumps(value)



# ==== query speed: id columns indexed, sorts kept in memory ==========================


def test_id_columns_are_indexed_when_loaded_and_joins_use_them():
    rows = [{"id": i, "user_id": i % 7, "userId": i, "ID2": i, "paid": i % 2, "guid": str(i)} for i in range(300)]
    table = abstract._load_table(rows)
    db = _db(table)  # (the test reads the schema; queries cannot)
    indexed = {r[0] for r in db.execute("SELECT sql FROM sqlite_master WHERE type = 'index'")}
    assert indexed == {'CREATE INDEX data_id_0 ON data ("id")', 'CREATE INDEX data_id_1 ON data ("user_id")',
                       'CREATE INDEX data_id_2 ON data ("userId")'}
    plan = " ".join(r[-1] for r in db.execute(
        "EXPLAIN QUERY PLAN SELECT a.id, b.id FROM data a JOIN data b ON b.id = a.id + 1"))
    assert "SEARCH b USING COVERING INDEX data_id_0 (id=?)" in plan and "AUTOMATIC" not in plan
    db.close()
    assert abstract._query_job(table, "", 1, 1.0, 1, 256)["cache_kb"] == abstract._QUERY_CACHE_KB
    res = abstract._run_query(table, "SELECT count(*) FROM data a JOIN data b ON b.id = a.id + 1", 10, 5, 1 << 20)
    assert res.rows == [(299,)]
    table.close()


def test_large_json_files_escape_lone_surrogates_like_small_ones():
    rows = [{"id": i, "s": "\ud800 lone" if i == 7 else "x" * 40} for i in range(4000)]
    text = abstract._dump_json(rows)
    assert text.startswith("[\n{") and "\\ud800 lone" in text and json.loads(text) == rows
    text.encode("utf-8")  # no raw surrogate left


@pytest.mark.parametrize("dump, kept", [
    (lambda rows: json.dumps(rows, ensure_ascii=False, separators=(",", ":")), True),  # as JS writes
    (lambda rows: json.dumps(rows, ensure_ascii=False), True),  # Python's ", " and ": " kept
    (lambda rows: json.dumps(rows, ensure_ascii=False, indent=2), False),  # a record spans lines
    (lambda rows: json.dumps(rows), False),  # non-ASCII escaped to \u: the view shows characters
    (lambda rows: json.dumps(rows, ensure_ascii=False).replace("/", "\\/"), False),  # as PHP: \/
])
def test_a_view_line_is_the_servers_own_text_when_it_is_one_line(tmp_path, dump, kept):
    rows = [{**row, "note": f'café "{i}"\n\t✓ 🚀 a/b'} for i, row in enumerate(make_rows(3000))]
    assert len(dump(rows)) > abstract._VIEW_INDENT_MAX  # (read in one pass)
    text = dump(rows)
    _, _, ex, view = _put(tmp_path, text)
    assert isinstance(ex.data, abstract._Records)
    lines = _view_lines(view)
    own = [dump([row])[1:-1].strip() for row in rows]
    compact = [abstract._view_json(row) for row in rows]
    assert lines == (own if kept else compact)
    assert any("café" in line for line in lines) and not any("\\u" in line for line in lines)


def test_a_text_and_its_twin_in_structured_content_are_read_in_one_pass(tmp_path, monkeypatch):
    """server-filesystem's answer: the text, and structuredContent {"content": <the text>}."""
    rows = _pad(make_rows(300))
    text = json.dumps(rows, ensure_ascii=False)
    twin = {"content": [{"type": "text", "text": text}], "structuredContent": {"content": text}}
    extract = abstract._extract
    monkeypatch.setattr(abstract, "_extract", lambda res: pytest.fail("the records were parsed whole"))
    cache = _cache(tmp_path / "cache")
    entry, ex, _ = cache.put(twin, "s", "t")
    assert isinstance(ex.data, abstract._Records) and ex.data.count == len(rows)
    assert [json.loads(line) for line in _view_lines((tmp_path / "cache" / (entry.token + ".txt")).read_bytes())] == rows
    assert cache.result(entry) == twin
    assert abstract._result_size(twin, 0) == len(text)
    monkeypatch.setattr(abstract, "_extract", extract)
    # anything more than the twin (another key, another text, the text re-spaced) is read whole
    for structured in ({"content": text, "n": len(rows)}, {"content": text + " "}, {"rows": rows}):
        other = dict(twin, structuredContent=structured)
        entry, ex, _ = cache.put(other, "s", "t")
        assert not isinstance(ex.data, abstract._Records), structured.keys()
        assert cache.result(entry) == other
