"""Tests for abstract.py's Formats part: converters both ways, round trips, refusals."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import random
import sys
from typing import Any, Iterator, List

from conftest import same_json  # noqa: E402
from abstract import (FormatError, _as_records, _convert, _dump_csv_parts, _dump_html,  # noqa: E402
                     _dump_json, _dump_md, _dump_txt, _dump_xml, _load_csv,
                     _parse_text, _xml_to_data, _dump_yaml, _load_yaml)


def _csv(rows, delimiter=","):
    """The CSV text of rows as the store writes it (the converter's parts, joined)."""
    return "".join(_dump_csv_parts(rows, delimiter))


@contextlib.contextmanager
def raises(exc: type) -> Iterator[List[BaseException]]:
    """Minimal pytest.raises, so the file also runs where pytest is missing."""
    caught: List[BaseException] = []
    try:
        yield caught
    except exc as err:
        caught.append(err)
    else:
        raise AssertionError(f"{exc.__name__} not raised")


# ---- awkward data ----

AWKWARD_STRINGS = [
    "", " ", "  leading", "trailing ", " leading space", "- dash", "-", "--", "---", "...",
    "a: b", "x #y", "#hash", "key:", "a:b", "yes", "no", "Yes", "NO", "on", "Off", "y", "n",
    "null", "Null", "~", "true", "False", "007", "1e3", "0x1F", "0o17", "1_000", "+1", "-1",
    ".5", "1.", ".inf", "-.Inf", ".NaN", "1:20", "2024-01-01", "2024-01-01T10:00:00Z",
    "3 apples", "<<", "=", "?", "? x", ":", ": x", ",", "[x]", "{x}", "&a", "*a", "!t", "|",
    ">", "'", '"', "%x", "@x", "`x`", "tab\there", "cr\rlf", "crlf\r\nx", "line\nbreak",
    "two\n\nblank\n\n", "end\n", "\nstart", "é ü ß", "日本語", "emoji 😀🎉", "a,b", 'say "hi"',
    "it's", "back\\slash", "nul\x00", "bell\x07", "esc\x1b", "del\x7f", "nel\x85", "ls\u2028",
    "ps\u2029", "\ufeffbom", "nbsp\xa0", "<script>alert(1)</script>", "a | b", "````",
    "x\n  indented\n", "trailing space \nline", "\t", "1 000", "0", "-0", "12", "3.14",
]


def random_string(rng: random.Random) -> str:
    pieces = AWKWARD_STRINGS + ["abc", "Z", " ", "\n", ":", "#", "-", "0", "9", "e", "x"]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 3)))


def random_scalar(rng: random.Random) -> Any:
    kind = rng.randrange(7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 7, 10**20, -(2**63), rng.randint(-999, 999)])
    if kind == 3:
        return rng.choice([0.0, -0.0, 1.5, 1e16, 1e-7, -2.5e300, 0.1, rng.uniform(-1e6, 1e6)])
    return random_string(rng)


def random_value(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value with awkward strings, keys and nesting."""
    kind = rng.randrange(10) if depth < 5 else 0
    if kind < 5:
        return random_scalar(rng)
    if kind < 7:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {random_string(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def random_cases(count: int = 400, seed: int = 20240601) -> List[Any]:
    rng = random.Random(seed)
    return [random_value(rng) for _ in range(count)]


same = same_json  # the type-strict comparison shared by the tests


AWKWARD_DOC = {
    "plain": "hello world",
    "strings": AWKWARD_STRINGS,
    "keys": {s: i for i, s in enumerate(AWKWARD_STRINGS)},
    "numbers": [0, -1, 10**30, 1.5, -0.0, 1e16, 1e-7, 2.5e-300],
    "bools": [True, False, None],
    "empty": {"list": [], "map": {}, "str": ""},
    "nested": [[[]], [{}], [[1, [2, [3]]]], {"a": {"b": {"c": [{"d": None}]}}}],
    "records": [{"id": 1, "name": "Ada"}, {"id": 2, "tags": ["x", "y"]}],
    "1abc": 1, "with space": 2, "xmlns": 3, "XmlThing": 4, "entry": 5, "item": [6],
    "type": "string", "key": "k", "a:b": "colon",
}

DEEP: Any = "bottom"
for _ in range(60):
    DEEP = {"level": [DEEP, 1]}


# AWKWARD_DOC without the characters XML 1.0 cannot hold.
XML_SAFE_DOC = json.loads(json.dumps(AWKWARD_DOC).replace("\\u0000", "")
                          .replace("\\u0007", "").replace("\\u001b", ""))


# ---- tabular detection ----

def test_as_records_shapes() -> None:
    assert _as_records([{"a": 1}, {"b": 2}]) == ([{"a": 1}, {"b": 2}], "")
    assert _as_records({"results": [{"a": 1}], "total": 1}) == ([{"a": 1}], "")
    assert _as_records([1, "x", None]) == ([{"value": 1}, {"value": "x"}, {"value": None}], "")
    assert _as_records([]) == ([], "")
    rows, why = _as_records([{"a": 1}, 2])
    assert rows is None and "mixing" in why
    rows, why = _as_records({"a": 1})
    assert rows is None and why == "a single object, not a list of records"
    rows, why = _as_records({"a": [{"x": 1}], "b": [{"y": 2}]})
    assert rows is None and "several" in why and "a, b" in why
    rows, why = _as_records("text")
    assert rows is None and why == "a single string, not a list of records"
    assert _as_records(3)[0] is None and _as_records(None)[0] is None
    assert _as_records([[1], [2]])[0] is None
    assert _as_records({"name": "x", "aliases": []})[0] is None


# ---- JSON / txt ----

def test_json_and_txt() -> None:
    text = _dump_json({"é": [1, "😀"]})
    assert text.endswith("}\n") and "é" in text and "😀" in text and '\n  "é"' in text
    assert json.loads(text) == {"é": [1, "😀"]}
    assert json.loads(_dump_json("\ud800x")) == "\ud800x"
    _dump_json("\ud800").encode("utf-8")  # lone surrogates are escaped, so this works
    assert _dump_txt("raw\ntext") == "raw\ntext"
    assert _dump_txt([1]) == "[\n  1\n]\n"
    assert _parse_text(' {"a": 1} \n', "txt") == {"a": 1}
    assert _parse_text("hello", "txt") == "hello"
    assert _parse_text("NaN", "txt") == "NaN"
    for value in random_cases(100):
        assert same(_parse_text(_dump_json(value), "json"), value)


def test_json_errors_have_position() -> None:
    with raises(FormatError) as caught:
        _parse_text('{\n  "a": 1,\n  oops\n}', "json")
    err = caught[0]
    assert err.lineno == 3 and err.colno == 3 and "line 3 column 3" in str(err)


# ---- CSV / TSV ----

def test_csv_header_union_and_cells() -> None:
    rows = [{"a": 1, "b": "x"}, {"c": True, "a": None}, {"d": [1, {"k": "é"}], "b": 2.5}]
    text = _csv(rows)
    assert text.split("\r\n")[0] == "a,b,c,d"
    assert text == 'a,b,c,d\r\n1,x,,\r\n,,true,\r\n,2.5,,"[1,{""k"":""é""}]"\r\n'


def test_csv_round_trip_awkward() -> None:
    rows = [
        {"id": 1, "text": 'comma, "quote"', "multi": "a\r\nb\nc\rd", "tab": "x\ty",
         "empty": "", "uni": "日本語 😀", "zip": "007", "sci": "1e3", "hex": "0x1F",
         "word": "yes", "lead": " leading space", "f": 2.5, "big": 1e16, "ok": False},
        {"id": -2, "text": "", "multi": "", "tab": "", "empty": "", "uni": "", "zip": "02134",
         "sci": "1E10", "hex": "", "word": "null", "lead": "- dash", "f": -0.5, "big": 1e-7,
         "ok": True},
    ]
    for delimiter in (",", "\t"):
        text = _csv(rows, delimiter)
        assert _load_csv(text, delimiter) == rows
    assert _parse_text(_csv(rows, "\t"), "tsv") == rows


def test_csv_typing() -> None:
    text = "n,f,b,s\r\n12,1.5,true,007\r\n-3,1e+16,False,1e3\r\n0,-0.25,TRUE,12a\r\n,2.0E-3,,-\r\n"
    assert _load_csv(text) == [
        {"n": 12, "f": 1.5, "b": True, "s": "007"},
        {"n": -3, "f": 1e16, "b": False, "s": "1e3"},
        {"n": 0, "f": -0.25, "b": "TRUE", "s": "12a"},
        {"n": "", "f": 0.002, "b": "", "s": "-"},
    ]


def test_csv_reader_edge_cases() -> None:
    assert _load_csv("") == []
    assert _load_csv("a,b\r\n") == []
    assert _load_csv("a,b,c\n1\n\n2,3\n") == [{"a": 1, "b": "", "c": ""},
                                               {"a": 2, "b": 3, "c": ""}]
    assert _load_csv('a\n"x\ny"\n') == [{"a": "x\ny"}]
    with raises(FormatError) as caught:
        _load_csv("a,b\n1,2\n1,2,3\n")
    assert caught[0].lineno == 3 and "3 fields" in caught[0].msg
    with raises(FormatError) as caught:
        _load_csv("id,name,id\n1,2,3\n")
    assert "'id'" in caught[0].msg and "columns 1 and 3" in caught[0].msg
    with raises(FormatError) as caught:
        _load_csv("id,,x\n1,2,3\n")
    assert "column 2" in caught[0].msg
    with raises(FormatError):
        _load_csv('a\n"unterminated\n')


def test_csv_empty_and_single_column() -> None:
    assert _csv([]) == ""
    text = _csv([{"v": ""}, {"v": "x"}])
    assert _load_csv(text) == [{"v": ""}, {"v": "x"}]


def test_csv_matches_dictwriter_for_plain_rows() -> None:
    rows = [{"a": i, "b": f"s{i}", "c": None} for i in range(50)]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["a", "b", "c"], lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(rows)
    assert _csv(rows) == buf.getvalue()


# ---- convert ----

def test_convert_csv_fallback_and_fields() -> None:
    result = _convert({"a": 1}, "csv")
    assert result.fmt == "json" and result.rows is None and result.columns is None
    assert json.loads(result.text) == {"a": 1}
    assert result.notes == ["stored as JSON: a single object, not a list of records; "
                            "csv needs a list of records"]
    result = _convert({"results": [{"x": 1}, {"y": 2}], "total": 2}, "tsv")
    assert result.fmt == "tsv" and result.text == "x\ty\r\n1\t\r\n\t2\r\n"
    assert result.rows == 2 and result.columns == ["x", "y"] and result.notes
    result = _convert([{"a": 1}], "yaml")
    assert result.rows == 1 and result.columns == ["a"] and result.text == "- a: 1\n"
    result = _convert([1, 2], "csv")
    assert result.text == "value\r\n1\r\n2\r\n" and result.columns == ["value"]
    assert _convert("s", "md").rows is None
    with raises(FormatError) as caught:
        _convert(1, "pdf")
    assert "json, csv, tsv, md, txt, html, yaml, xml" in str(caught[0])
    with raises(FormatError):
        _parse_text("x", "md")


def test_convert_every_format_runs() -> None:
    for fmt in ("json", "csv", "tsv", "md", "txt", "html", "yaml", "xml"):
        for data in (AWKWARD_DOC, [], [{}], "s", None, 1.5, [1, [2]], DEEP):
            result = _convert(data, fmt, title="T")
            empty_table = fmt in ("csv", "tsv") and data in ([], [{}])
            assert isinstance(result.text, str) and (result.text == "") == empty_table
    assert _convert([{}], "csv").notes == ["the records have no fields, so the csv is empty"]


# ---- YAML: dump ----

def test_yaml_dump_shapes() -> None:
    assert _dump_yaml({"a": 1, "b": [1, 2], "c": {}, "d": []}) == \
        "a: 1\nb:\n  - 1\n  - 2\nc: {}\nd: []\n"
    assert _dump_yaml([{"a": 1, "b": 2}, [3, 4]]) == "- a: 1\n  b: 2\n- - 3\n  - 4\n"
    assert _dump_yaml("x") == "x\n"
    assert _dump_yaml(None) == "null\n"
    assert _dump_yaml([]) == "[]\n"
    assert _dump_yaml({"s": "a\nb"}) == "s: |-\n  a\n  b\n"
    assert _dump_yaml({"s": "a\nb\n"}) == "s: |\n  a\n  b\n"
    assert _dump_yaml({"s": "a\n\n"}) == "s: |+\n  a\n\n"
    assert _dump_yaml({"s": " a\nb"}) == 's: " a\\nb"\n'
    assert _dump_yaml([1e16, float("inf"), -float("inf"), 0.1]) == \
        "- 1.0e+16\n- .inf\n- -.inf\n- 0.1\n"
    assert _dump_yaml("日本語 😀") == "日本語 😀\n"


def test_yaml_dump_quotes_what_must_be_quoted() -> None:
    must_quote = ["yes", "No", "ON", "off", "y", "N", "true", "FALSE", "null", "~", "",
                  "007", "1e3", "0x1F", "0o17", ".inf", ".NaN", "1_000", "+1", "-1", "1:20",
                  "2024-01-01", " a", "a ", "- a", "? a", ": a", ",a", "[a", "]a", "{a", "}a",
                  "#a", "&a", "*a", "!a", "|a", ">a", "'a", '"a', "%a", "@a", "`a", "a: b",
                  "a #b", "a:", "\x01", "a\u2028b", "\ufeff", "a\tb", "<<", "="]
    for s in must_quote:
        line = _dump_yaml({"k": s}).rstrip("\n")
        assert line.startswith('k: "'), (s, line)
        line = _dump_yaml({s: 1}).rstrip("\n")
        assert line.startswith('"'), (s, line)
    for s in ["a", "a b", "a-b", "a:b", "a#b", "3 apples", "é", "http://x.y/z?q=1#f"]:
        assert _dump_yaml(s) == s + "\n"


def test_yaml_round_trip_awkward() -> None:
    for value in [AWKWARD_DOC, DEEP, AWKWARD_STRINGS, "", [], {}, None, [[[]]], [{}],
                  {"k" * 1500: "long key", "v": "x" * 3000}]:
        assert same(_load_yaml(_dump_yaml(value)), value)
    nan = _load_yaml(_dump_yaml(float("nan")))
    assert isinstance(nan, float) and math.isnan(nan)


def test_yaml_round_trip_random() -> None:
    for value in random_cases():
        text = _dump_yaml(value)
        assert same(_load_yaml(text), value), text


# ---- YAML: load ----

YAML_DOCS = [
    ("a: 1\nb: two\n", {"a": 1, "b": "two"}),
    ("---\na: 1\n...\n", {"a": 1}),
    ("# only a comment\n", None),
    ("", None),
    ("--- text\n", "text"),
    ("- a\n- b: 1\n  c: 2\n- - x\n  - y\n-\n", ["a", {"b": 1, "c": 2}, ["x", "y"], None]),
    ("key:\n- a\n- b\nnext: 1\n", {"key": ["a", "b"], "next": 1}),
    ("key:\n  - a\n  - b\n", {"key": ["a", "b"]}),
    ("a:\n  b:\n    c: d\n  e: f\n", {"a": {"b": {"c": "d"}, "e": "f"}}),
    ("nulls: [~, null, Null, NULL, ]\n", {"nulls": [None, None, None, None]}),
    ("empty:\nnext: 1\n", {"empty": None, "next": 1}),
    ("b: [true, True, TRUE, false, yes, no, on, off, y, n]\n",
     {"b": [True, True, True, False, "yes", "no", "on", "off", "y", "n"]}),
    ("n: [1, -2, +3, 007, 0x1F, 0o17, 1.5, -.5, 1e3, 1.5E-3, .inf, -.Inf, 1_000, 0b1]\n",
     {"n": [1, -2, 3, 7, 31, 15, 1.5, -0.5, 1000.0, 0.0015, math.inf, -math.inf,
            "1_000", "0b1"]}),
    ("s: plain text with spaces # a comment\n", {"s": "plain text with spaces"}),
    ("url: http://example.com/a#b\n", {"url": "http://example.com/a#b"}),
    ("s: 'it''s # not a comment'\n", {"s": "it's # not a comment"}),
    ('s: "tab\\there \\"q\\" \\\\ \\/ \\x41\\u00e9\\U0001F600 \\N\\_\\L\\P\\0\\a\\b\\e\\f\\r\\v"\n',
     {"s": 'tab\there "q" \\ / Aé😀 \x85\xa0\u2028\u2029\0\a\b\x1b\f\r\v'}),
    ("lit: |\n  line 1\n    indented\n\n  line 3\nnext: x\n",
     {"lit": "line 1\n  indented\n\nline 3\n", "next": "x"}),
    ("strip: |-\n  a\n  b\n\nkeep: |+\n  a\n\n\nclip: |\n  a\n\n",
     {"strip": "a\nb", "keep": "a\n\n\n", "clip": "a\n"}),
    ("fold: >\n  one\n  two\n\n  three\n    more\n  four\n",
     {"fold": "one two\nthree\n  more\nfour\n"}),
    ("fold: >-\n  a\n  b\n", {"fold": "a b"}),
    ("ind: |2\n    two extra\n  base\n", {"ind": "  two extra\nbase\n"}),
    ("- |\n  in a list\n- >-\n  folded\n", ["in a list\n", "folded"]),
    ("flow: {a: 1, b: [x, 'y', \"z\"], c: {d: null}}\n",
     {"flow": {"a": 1, "b": ["x", "y", "z"], "c": {"d": None}}}),
    ('{"json": [1, 2.5, true, null, "s"], "o": {}}\n',
     {"json": [1, 2.5, True, None, "s"], "o": {}}),
    ("multi: [a,\n  b, # comment\n  c]\n", {"multi": ["a", "b", "c"]}),
    ("plain: first\n  second\n\n  third\n", {"plain": "first second\nthird"}),
    ('dq: "folded\n  line\n\n  para"\n', {"dq": "folded line\npara"}),
    ('dq: "no \\\n  space"\n', {"dq": "no space"}),
    ("'quoted key': 1\n\"dq key\": 2\n1: int key\ntrue: bool key\n",
     {"quoted key": 1, "dq key": 2, "1": "int key", "true": "bool key"}),
    ("a:    # comment after key\n  b: 1   # trailing\n\n# between\nc: 2\n",
     {"a": {"b": 1}, "c": 2}),
    ("a: 1\r\nb: 2\r\n", {"a": 1, "b": 2}),
    ("%YAML 1.2\n---\n- x\n", ["x"]),
    ("? long key\n: value\n", {"long key": "value"}),
    ("- ? k\n  : v\n", [{"k": "v"}]),
    ("key: value:with:colons\n", {"key": "value:with:colons"}),
    ("s: -x\nt: ?y\nu: :z\n", {"s": "-x", "t": "?y", "u": ":z"}),
    ("- a\n  - b\n", ["a - b"]),
    ("emoji: 😀 ok\n", {"emoji": "😀 ok"}),
    ("top\n", "top"),
    ("|\n  top block\n", "top block\n"),
    ("a: [1, 2]   \nb: 'x'  # c\n", {"a": [1, 2], "b": "x"}),
    ("a:\n  - b: 1\n    c:\n      - d\n  - e\n", {"a": [{"b": 1, "c": ["d"]}, "e"]}),
]


def test_yaml_documents() -> None:
    for text, expected in YAML_DOCS:
        assert same(_load_yaml(text), expected), (text, _load_yaml(text))


INVALID_YAML = [
    ("a: &anchor 1\n", 1),
    ("a: 1\nb: *alias\n", 2),
    ("a: !tag x\n", 1),
    ("a: 1\n---\nb: 2\n", 2),
    ("? [a, b]\n: 1\n", 1),
    ("a: 1\nb: 2\na: 3\n", 3),
    ("a:\n\tb: 1\n", 2),
    ("a:\n  b: 1\n c: 2\n", 3),
    ("a: 1\n  b: 2\n", 2),
    ("a: b: c\n", 1),
    ("a: 'unterminated\n", 1),
    ('a: "bad \\q escape"\n', 1),
    ("a: [1, 2\n", 2),
    ("- a\nb: 1\n", 2),
    ("a: 1\n- b\n", 2),
    ("key: - x\n", 1),
    ("a: [x] y\n", 1),
    ("a: @x\n", 1),
    ("{a: 1, a: 2}\n", 1),
    ("[a: 1]\n", 1),
    ("a: |\n  x\n b\n", 3),
    ("%TAG ! x\n---\na\n", 1),
    ("a\nb: c\n", 2),
    ("lit: |\n    \n  x\n", 2),
    ("...\nx\n", 2),
    ("%YAML 2.0\n---\nx\n", 1),
    ("? a\nb: 1\n", 2),
    ('"a":1\n', 1),
]


def test_yaml_invalid_documents() -> None:
    for text, line in INVALID_YAML:
        with raises(FormatError) as caught:
            _load_yaml(text)
        assert caught[0].lineno == line, (text, str(caught[0]))
        assert f"line {line}" in str(caught[0])


def test_yaml_deep_nesting_is_an_error() -> None:
    with raises(FormatError):
        _load_yaml("[" * 100000 + "]" * 100000)


# ---- XML ----

def test_xml_round_trip_exact() -> None:
    values = [XML_SAFE_DOC, DEEP, [], {}, [[]], [1], [[1]], {"a": [1]}, {"a": []}, None, True,
              "", "  spaced  ", "a\r\nb\rc", 0, -0.0, 1e16, 10**30,
              {"1abc": 1, "with space": 2, "xmlns": 3, "xml": 4, "a:b": 5, "é": 6,
               "entry": {"key": "v"}, "item": [None], "": 7}]
    for value in values:
        text, notes = _dump_xml(value)
        assert notes == [] and same(_xml_to_data(text), value), text


def test_xml_random_round_trip() -> None:
    for value in random_cases(300, seed=7):
        text, notes = _dump_xml(value)
        back = _xml_to_data(text)
        if not notes:
            assert same(back, value), text
        assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<result generator="abstract"')


def test_xml_layout_and_types() -> None:
    text, _ = _dump_xml({"n": 1, "s": "x", "b": False, "z": None, "l": ["a"], "e": {},
                         "1abc": "k"})
    assert text == (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<result generator="abstract">\n'
        '  <n type="number">1</n>\n'
        '  <s>x</s>\n'
        '  <b type="boolean">false</b>\n'
        '  <z type="null"/>\n'
        '  <l type="array">\n'
        '    <item>a</item>\n'
        '  </l>\n'
        '  <e type="object"/>\n'
        '  <entry key="1abc">k</entry>\n'
        '</result>\n')


def test_xml_control_chars_replaced() -> None:
    text, notes = _dump_xml({"a\x01": "x\x00y\x1fz\ufffe", "ok": "\t\n"})
    assert notes == ["4 character(s) that XML 1.0 cannot hold were replaced with U+FFFD"]
    assert _xml_to_data(text) == {"a\ufffd": "x\ufffdy\ufffdz\ufffd", "ok": "\t\n"}


def test_xml_generic_mapping() -> None:
    text = """<?xml version="1.0"?>
<catalog lang="en">
  <book id="1"><title>A &amp; B</title><tag>x</tag><tag>y</tag></book>
  <book id="2"><title>C</title><empty/></book>
  <note>  spaced  </note>
  <mixed a="1">text</mixed>
</catalog>"""
    assert _xml_to_data(text) == {"catalog": {
        "@lang": "en",
        "book": [{"@id": "1", "title": "A & B", "tag": ["x", "y"]},
                 {"@id": "2", "title": "C", "empty": None}],
        "note": "  spaced  ",
        "mixed": {"@a": "1", "#text": "text"},
    }}
    assert _parse_text("<a>1</a>", "xml") == {"a": "1"}


def test_xml_refuses_doctype_and_reports_errors() -> None:
    bomb = ('<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n]>\n'
            "<lolz>&lol;</lolz>")
    with raises(FormatError) as caught:
        _xml_to_data(bomb)
    assert caught[0].lineno == 2 and caught[0].colno == 1
    with raises(FormatError):
        _xml_to_data('<!ENTITY x SYSTEM "file:///etc/passwd"><a/>')
    with raises(FormatError) as caught:
        _xml_to_data("<a>\n  <b>\n</a>")
    assert caught[0].lineno == 3 and "bad XML" in caught[0].msg
    with raises(FormatError):
        _xml_to_data('<result generator="abstract" type="number">x</result>')


# ---- Markdown / HTML ----

def test_md_table_escaping() -> None:
    text = _dump_md([{"a|b": "x|y", "n": "1\r\n2\n3"}, {"n": [1, {"k": "v"}], "c": None}])
    assert text == ("| a\\|b | n | c |\n| --- | --- | --- |\n"
                    "| x\\|y | 1<br>2<br>3 |  |\n"
                    '|  | [1,{"k":"v"}] |  |\n')
    wrapped = _dump_md({"results": [{"a": 1}], "total": 1}, title="T")
    assert wrapped == "# T\n\n- **total**: 1\n\n| a |\n| --- |\n| 1 |\n"


def test_md_other_shapes() -> None:
    assert _dump_md("as *is*") == "as *is*"
    assert _dump_md({"a": 1, "b": [True, None], "c": {}}) == \
        "- **a**: 1\n- **b**:\n  - true\n  - null\n- **c**: {}\n"
    fenced = _dump_md({"code": "```\nx\n````"})
    assert fenced.startswith("`````json\n") and fenced.endswith("\n`````\n")
    assert json.loads(fenced[len("`````json\n"):-len("`````\n")]) == {"code": "```\nx\n````"}
    assert _dump_md(DEEP).startswith("```json\n")


def test_html_escapes_everything() -> None:
    evil = "<script>alert('x')</script>"
    for data in ([{evil: evil}], {"k": evil}, evil, [evil], {"results": [{"a": 1}], evil: evil}):
        page = _dump_html(data, title=evil)
        assert "<script>" not in page and "&lt;script&gt;" in page
        assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
        assert page.rstrip().endswith("</html>")
    page = _dump_html([{"a": 1, "b": "x & y"}], "t")
    assert "<thead><tr><th>a</th><th>b</th></tr></thead>" in page
    assert "<td>1</td><td>x &amp; y</td>" in page
