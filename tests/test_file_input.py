"""call_tool_with_file_content end to end: a file's data becomes an upstream tool's arguments.

tests/data/valid/NAME has its expected data in NAME.expected.json; each is fed through Abstract into
the fake upstream's echo_args tool, and what the upstream *received* (its state file) must equal
the expected data exactly, types included. tests/data/invalid/ holds files that must be refused with
an error naming the file and the line and column (or the byte offset).
"""

from __future__ import annotations

import csv
import gzip
import json
import os
from pathlib import Path

import pytest

from conftest import running_world, TESTS, World, files_under, proc_status, same_json, text_of

import abstract

VALID = TESTS / "data" / "valid"
INVALID = TESTS / "data" / "invalid"
VALID_FILES = sorted(p.name for p in VALID.iterdir() if not p.name.endswith(".expected.json"))

# file -> (what the error must say, in order: "as FORMAT", the problem, where)
INVALID_FILES = {
    "missing_comma.json": "could not be read as JSON: Expecting ',' delimiter: line 1 column 9",
    "unclosed.json": "could not be read as JSON: Expecting ',' delimiter: line 3 column 6",
    "empty.json": "could not be read as JSON: the text is empty, not a JSON value",
    "bad_json_inside.json.gz": "could not be read as JSON: Expecting value: line 2 column 7",
    "ragged.csv": "could not be read as CSV: row has 4 fields but the header has 3: line 3 column 1",
    "ragged.tsv": "could not be read as TSV: row has 3 fields but the header has 2: line 2 column 1",
    "duplicate_header.csv": "could not be read as CSV: column name 'id' appears twice (columns 1 and 3): "
                            "line 1 column 1",
    "empty_header.csv": "could not be read as CSV: column 2 of the header has no name: line 1 column 1",
    "unclosed_quote.csv": "could not be read as CSV: bad CSV: unexpected end of data: line 2 column 1",
    "anchor.yaml": "could not be read as YAML: YAML anchors ('&') are not supported: line 1 column 7",
    "alias.yaml": "could not be read as YAML: YAML aliases ('*') are not supported: line 2 column 4",
    "tag.yaml": "could not be read as YAML: YAML tags ('!') are not supported: line 1 column 4",
    "multi_document.yaml": "could not be read as YAML: a second YAML document is not supported: line 2 column 1",
    "tab_indent.yaml": "could not be read as YAML: tab character used for indentation: line 2 column 1",
    "complex_key.yaml": "could not be read as YAML: complex keys ('? ') are not supported: line 1 column 1",
    "duplicate_key.yaml": "could not be read as YAML: duplicate key 'a': line 3 column 1",
    "bad_escape.yml": "could not be read as YAML: invalid escape sequence in a double-quoted string: "
                      "line 1 column 9",
    "doctype.xml": "could not be read as XML: XML with a DOCTYPE or ENTITY declaration is refused: line 2 column 1",
    "billion_laughs.xml": "could not be read as XML: XML with a DOCTYPE or ENTITY declaration is refused: "
                          "line 2 column 1",
    "malformed.xml": "could not be read as XML: bad XML: mismatched tag: line 2 column 12",
    "two_roots.xml": "could not be read as XML: bad XML: junk after document element: line 2 column 1",
    "latin1.json": "is not valid UTF-8: byte offset 13 (0xe9)",
    "latin1.csv": "is not valid UTF-8: byte offset 8 (0xe9)",
    "bad_utf8.yaml": "is not valid UTF-8: byte offset 4 (0xff)",
    "utf16.json": "is not valid UTF-8: byte offset 0 (0xff)",
    "corrupt.json.gz": "is not a valid gzip file: Error -3 while decompressing data",
    "truncated.json.gz": "is not a valid gzip file: Compressed file ended before the end-of-stream marker",
    "not_gzip.csv.gz": "is not a valid gzip file: Not a gzipped file",
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One Abstract whose allowed directories are a fresh store and tests/data (read only here)."""
    with running_world(tmp_path_factory.mktemp("input"), str(TESTS / "data")) as world:
        yield world


@pytest.fixture
def px(shared):
    return shared.proxies[0]


def feed(px, path, tool: str = "echo_args", timeout: float = 20, **kw) -> dict:
    args = {"server": "up", "tool_name": tool, "file_path": str(path), **kw}
    return px.call_tool("call_tool_with_file_content", args, timeout=timeout)


def received(world: World, before: int):
    """The arguments of the upstream calls made since `before` calls."""
    return [e["arguments"] for e in world.events("up", "call")[before:]]


def calls(world: World) -> int:
    return len(world.events("up", "call"))


# ---- every valid fixture reaches the upstream exactly ----

def test_every_fixture_has_its_expectation():
    assert len(VALID_FILES) >= 15
    exts = {Path(n[:-3] if n.endswith(".gz") else n).suffix for n in VALID_FILES}
    assert {".json", ".csv", ".tsv", ".yaml", ".yml", ".xml", ".txt"} <= exts
    assert any(n.endswith(".gz") for n in VALID_FILES)
    for name in VALID_FILES:
        assert (VALID / (name + ".expected.json")).is_file(), name
    assert sorted(INVALID_FILES) == sorted(os.listdir(INVALID))


@pytest.mark.parametrize("name", VALID_FILES)
def test_valid_fixture_reaches_the_upstream_exactly(px, shared, name):
    expected = json.loads((VALID / (name + ".expected.json")).read_text(encoding="utf-8"))
    before = calls(shared)
    res = feed(px, VALID / name, data_key="data")
    assert not res.get("isError"), text_of(res)
    got = received(shared, before)
    assert len(got) == 1 and same_json(got[0], {"data": expected}), got
    echoed = json.loads(text_of(res))  # output_format json: the upstream's whole result
    assert same_json(echoed["structuredContent"], {"data": expected})


@pytest.mark.parametrize("name", sorted(INVALID_FILES))
def test_invalid_fixture_is_refused_with_its_position(px, shared, name):
    before = calls(shared)
    res = feed(px, INVALID / name, data_key="data")
    assert res.get("isError") is True, res
    text = text_of(res)
    assert text.startswith(os.path.realpath(INVALID / name) + " "), text
    assert INVALID_FILES[name] in text, text
    assert calls(shared) == before  # nothing reached the upstream


def test_relative_file_path_is_taken_from_the_first_directory(px, shared):
    (shared.dir / "rel.json").write_text('{"rel": [1]}')
    before = calls(shared)
    assert not feed(px, "rel.json").get("isError")
    assert received(shared, before) == [{"rel": [1]}]


# ---- building the arguments: data_key and tool_args ----

def test_without_data_key_an_object_is_the_whole_arguments(px, shared):
    before = calls(shared)
    res = feed(px, VALID / "object.json")
    assert not res.get("isError"), text_of(res)
    expected = json.loads((VALID / "object.json.expected.json").read_text(encoding="utf-8"))
    assert same_json(received(shared, before), [expected])


@pytest.mark.parametrize("name, kind", [("records.csv", "list"), ("plain.txt", "str"), ("nan.txt", "str")])
def test_without_data_key_a_non_object_is_refused_suggesting_data_key(px, shared, name, kind):
    before = calls(shared)
    res = feed(px, VALID / name)
    assert res.get("isError") is True
    text = text_of(res)
    assert f"holds a {kind}, not an object" in text and "data_key" in text and name in text
    assert calls(shared) == before


def test_tool_args_without_data_key_is_refused(px, shared):
    before = calls(shared)
    res = feed(px, VALID / "object.json", tool_args={"extra": 1})
    assert res.get("isError") is True
    assert "tool_args needs data_key" in text_of(res)
    assert calls(shared) == before


def test_data_key_already_in_tool_args_is_refused(px, shared):
    before = calls(shared)
    res = feed(px, VALID / "records.csv", data_key="records", tool_args={"records": [], "table": "t"})
    assert res.get("isError") is True
    assert "tool_args already has 'records'" in text_of(res) and "nothing is overwritten" in text_of(res)
    assert calls(shared) == before


def test_data_key_puts_the_data_next_to_tool_args(px, shared):
    before = calls(shared)
    res = feed(px, VALID / "short.yml", data_key="rows", tool_args={"table": "t", "upsert": True})
    assert not res.get("isError"), text_of(res)
    expected = json.loads((VALID / "short.yml.expected.json").read_text())
    got = received(shared, before)
    assert same_json(got, [{"table": "t", "upsert": True, "rows": expected}])


def test_required_arguments_are_checked_before_calling(px, shared):
    before = calls(shared)
    res = feed(px, VALID / "records.csv", tool="needs", data_key="records")
    assert res.get("isError") is True
    assert "tool 'needs' requires table" in text_of(res)
    res = feed(px, VALID / "plain.txt", tool="needs", data_key="note")
    assert "requires records, table" in text_of(res)
    assert calls(shared) == before
    res = feed(px, VALID / "records.csv", tool="needs", data_key="records", tool_args={"table": "people"})
    assert not res.get("isError"), text_of(res)
    assert [a["table"] for a in received(shared, before)] == ["people"]


def test_top_level_argument_types_are_checked(px, shared):
    before = calls(shared)
    # (a string argument takes the file's text unless data_as says "parsed", issue 25)
    res = feed(px, VALID / "records.csv", tool="needs", data_key="table", tool_args={"records": []},
               data_as="parsed")
    assert res.get("isError") is True
    assert "argument 'table' of tool 'needs' must be string, but the file gives list" in text_of(res)
    res = feed(px, VALID / "plain.txt", tool="needs", data_key="records", tool_args={"table": "t"})
    assert "argument 'records' of tool 'needs' must be array, but the file gives str" in text_of(res)
    assert calls(shared) == before


@pytest.mark.parametrize("value, ok", [(2, True), (2.0, True), (2.5, False), (True, False), ("2", False)])
def test_an_integer_argument_may_be_a_whole_float(px, shared, value, ok):
    p = shared.dir / f"n-{value!r}.json"
    p.write_text(json.dumps({"n": value}))
    before = calls(shared)
    res = feed(px, p, tool="rows")  # rows declares n as an integer
    if ok:
        assert not res.get("isError"), text_of(res)
        assert same_json(received(shared, before), [{"n": value}])
    else:
        assert res.get("isError") is True
        assert f"argument 'n' of tool 'rows' must be integer, but the file gives {type(value).__name__}" \
            in text_of(res)
        assert calls(shared) == before


def test_unknown_tool_is_refused_naming_the_tools(px, shared):
    res = feed(px, VALID / "object.json", tool="nope")
    assert res.get("isError") is True and "no tool 'nope'" in text_of(res) and "echo_args" in text_of(res)


# ---- reading: limits, kinds of files ----

def test_size_limit_states_both_sizes(world):
    world.fake("up")
    world.settings = {"max_input_file_mb": 0.001}  # 1,048 bytes
    proxy = world.start()
    big = world.dir / "big.json"
    big.write_text(json.dumps({"x": "y" * 2000}))
    size = big.stat().st_size
    res = feed(proxy, big, data_key="d")
    assert res.get("isError") is True
    text = text_of(res)
    assert f"is {size:,} bytes; the input limit is 1,048 bytes" in text and "max_input_file_mb" in text
    small = world.dir / "small.json"
    small.write_text(json.dumps({"x": "y" * 900}))
    assert not feed(proxy, small).get("isError")
    packed = world.dir / "packed.json.gz"  # 50 bytes on disk, 2 KB inside
    packed.write_bytes(gzip.compress(big.read_bytes()))
    res = feed(proxy, packed, data_key="d")
    assert res.get("isError") is True
    assert (f"({packed.stat().st_size:,} bytes) decompresses to more than 1,048 bytes; the input limit is "
            f"1,048 bytes") in text_of(res)
    assert [e["arguments"] for e in world.events("up", "call")] == [json.loads(small.read_text())]


def test_gzip_bomb_is_refused_while_reading(px, shared):
    bomb = shared.dir / "bomb.txt.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as f:
        zeros = bytes(1 << 20)
        for _ in range(256):  # 256 MiB of zeros in about 1 MB
            f.write(zeros)
    assert bomb.stat().st_size < 2_000_000
    peak = proc_status(px.pid, "VmHWM")
    before = calls(shared)
    res = feed(px, bomb, data_key="d")
    assert res.get("isError") is True
    assert "decompresses to more than 10,485,760 bytes" in text_of(res)
    assert calls(shared) == before
    # Read up to the limit only: Abstract's peak memory grows by far less than the 256 MiB inside.
    assert proc_status(px.pid, "VmHWM") - peak < 100 * 1024


def test_not_found_and_not_a_regular_file(px, shared):
    res = feed(px, "no/such/file.json")
    assert res.get("isError") is True
    assert "'no/such/file.json' does not exist" in text_of(res)
    assert os.path.realpath(shared.dir) in text_of(res)
    (shared.dir / "a-dir").mkdir()
    res = feed(px, "a-dir")
    assert res.get("isError") is True and "is not a regular file" in text_of(res)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_a_fifo_is_refused_without_blocking(px, shared):
    (shared.dir / "fifo").mkdir()
    os.mkfifo(shared.dir / "fifo" / "pipe.json")
    res = feed(px, "fifo/pipe.json", timeout=10)
    assert res.get("isError") is True and "is not a regular file" in text_of(res)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads everything")
def test_unreadable_file_is_refused(px, shared):
    p = shared.dir / "secret.json"
    p.write_text("{}")
    p.chmod(0)
    res = feed(px, p)
    assert res.get("isError") is True and "not readable" in text_of(res)


# ---- the answer ----

def test_output_format_json_is_the_whole_upstream_result(px):
    res = feed(px, VALID / "bom.json", data_key="d")
    assert json.loads(text_of(res)) == {
        "content": [{"type": "text", "text": json.dumps({"d": {"bom": "removed", "\u00e9": 1}}, ensure_ascii=False)}],
        "structuredContent": {"d": {"bom": "removed", "\u00e9": 1}}}


def test_output_format_string_is_the_text_content(px):
    res = feed(px, VALID / "plain.txt", tool="echo", data_key="text", output_format="string")
    assert text_of(res) == (VALID / "plain.txt").read_text(encoding="utf-8")
    assert [c["type"] for c in res["content"]] == ["text"] and "structuredContent" not in res
    res = feed(px, VALID / "bom.json", data_key="d", output_format="string")
    assert json.loads(text_of(res)) == {"d": {"bom": "removed", "\u00e9": 1}}


def test_output_format_must_be_json_or_string(px, shared):
    before = calls(shared)
    res = feed(px, VALID / "bom.json", output_format="csv")
    assert res.get("isError") is True and "output_format must be json or string" in text_of(res)
    assert calls(shared) == before


def test_upstream_error_names_the_file_and_the_tool(px, shared):
    p = shared.dir / "fail.json"
    p.write_text(json.dumps({"result": {"content": [{"type": "text", "text": "row 3 rejected"}], "isError": True}}))
    res = feed(px, p, tool="result")
    assert res.get("isError") is True
    assert text_of(res) == (f"'up' tool 'result' reported an error for the data of {os.path.realpath(p)}: "
                            "row 3 rejected")


def test_response_format_stores_the_response_like_call_tool_and_store(px, shared):
    before = files_under(shared.dir)
    res = feed(px, VALID / "records.csv", data_key="records", response_format="csv", storage_path="responses",
               filename="echoed.csv")
    assert not res.get("isError"), text_of(res)
    sc = res["structuredContent"]
    path = Path(sc["path"])
    assert path == Path(os.path.realpath(shared.dir)) / "responses" / "echoed.csv"
    assert sc["format"] == "csv" and sc["bytes"] == path.stat().st_size and sc["rows"] == 4
    assert sc["uri"] == path.as_uri() and str(path) in text_of(res)
    assert any(c["type"] == "resource_link" for c in res["content"])
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with (VALID / "records.csv").open(newline="", encoding="utf-8-sig") as f:
        original = list(csv.DictReader(f))
    assert [r["name"] for r in rows] == [r["name"] for r in original]
    assert rows[1]["note"] == "line 1\r\nline 2" and rows[0]["zip"] == "02134"
    assert set(files_under(shared.dir)) - set(before) == {"responses/echoed.csv"}


def test_response_format_with_compress_writes_gzip(px, shared):
    res = feed(px, VALID / "short.yml", data_key="rows", response_format="yaml", storage_path="responses",
               filename="packed", compress=True)
    path = Path(res["structuredContent"]["path"])
    assert path.name == "packed.yaml.gz" and res["structuredContent"]["compressed"] is True
    expected = json.loads((VALID / "short.yml.expected.json").read_text())
    assert same_json(abstract._load_yaml(gzip.decompress(path.read_bytes()).decode()), {"rows": expected})


def test_response_format_unknown_is_refused(px):
    res = feed(px, VALID / "records.csv", data_key="records", response_format="xlsx")
    assert res.get("isError") is True and "xlsx" in text_of(res)


# ---- the loop: stored as CSV by one tool, fed back into another ----

LOOP_RECORDS = [
    {"id": 1, "name": "Ada Lovelace", "zip": "02134", "code": "007", "sci": "1e3", "price": 9.99, "qty": 3,
     "active": True, "note": "comma, quote \" and\nnewline", "tab": "a\tb", "empty": "", "unicode": "Zo\u00eb \U0001f389"},
    {"id": 2, "name": "O'Brien", "zip": "01001", "code": "x-1", "sci": "2E5", "price": -0.5, "qty": 0,
     "active": False, "note": "", "tab": "", "empty": "", "unicode": "\u6f22\u5b57"},
    {"id": 3, "name": "  padded  ", "zip": "00000", "code": "-", "sci": "NaN", "price": 1e-07, "qty": -42,
     "active": True, "note": "\u2028 line sep", "tab": "\t", "empty": "", "unicode": "\u00e9"},
    {"id": 4, "name": "big", "zip": "99999-1234", "code": "1.2.3", "sci": "Infinity", "price": 12345.678,
     "qty": 12345678901234567890, "active": False, "note": "; # | ,", "tab": "t", "empty": "", "unicode": "\U0001f600"},
]


def test_rows_stored_as_csv_come_back_exactly_through_file_input(px, shared):
    # CSV cannot tell the string "10" from the number 10: the strings here are ones Abstract's
    # reader keeps as text (leading zeros, "1e3" without a sign, NaN), the rest typed values.
    records = LOOP_RECORDS
    stored = px.call_tool("call_tool_and_store", {
        "server": "up", "tool_name": "result", "file_format": "csv", "storage_path": "loop", "filename": "rows",
        "tool_args": {"result": {"content": [{"type": "text", "text": json.dumps(records)}]}}})
    assert not stored.get("isError"), text_of(stored)
    path = stored["structuredContent"]["path"]
    assert path.endswith("rows.csv") and stored["structuredContent"]["rows"] == len(records)
    before = calls(shared)
    res = feed(px, path, data_key="records", tool_args={"table": "people"})
    assert not res.get("isError"), text_of(res)
    got = received(shared, before)
    assert len(got) == 1 and same_json(got[0], {"table": "people", "records": records}), got
