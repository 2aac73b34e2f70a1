"""Long answers read without decoding their long strings whole (issue 16): a JSON-RPC line over
_LONG_STRING bytes is split by _loads_long, each long string value checked and measured a piece
at a time (_string_pieces) and left as bytes (_JsonString); a cached call_tool result whose one
text is a JSON array of records is then read into the cache a piece at a time (_scan_records),
and every other shape has its long strings decoded whole, as before. The pieces are checked
against json.loads at every cut; end to end, through real `python abstract.py` and fake upstream
processes, what the client gets must be what the upstream sent, for escaped and raw UTF-8
lines, every result shape, and malformed lines; and the peak memory of a cached 12 MB answer
must stay under 4 times its size (it was about 9 times: the line as one str and its text as
another, 4 bytes a character once an emoji is in them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import abstract
from conftest import World, proc_status, same_json, text_of, wait_for
from fake_upstream import AWKWARD, awkward_rows, awkward_text, make_long

needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="measures memory in /proc")

# JSON strings whose every cut point is near an escape, a surrogate pair, a lone surrogate, a run
# of backslashes or a multi-byte character, escaped and as raw UTF-8
STRINGS = [AWKWARD * 3, AWKWARD + "\ud800 lone \udfff \ud83d" + AWKWARD, "\\" * 41 + "x\\\"" * 5,
           "\U0001F680" * 70, "é" * 100 + '"' * 3]
ENCODED = [json.dumps(s, ensure_ascii=a).encode("utf-8", "surrogatepass") for s in STRINGS for a in (True, False)]


@pytest.mark.parametrize("encoded", ENCODED, ids=range(len(ENCODED)))
def test_string_pieces_decode_as_json_loads_at_every_cut(encoded):
    expected = json.loads(encoded)
    tail = b', "after": "\xc3\xa9\\u00e9"}'  # what follows the string is never read into it
    buf = b'{"s": ' + encoded + tail
    for size in list(range(1, 48)) + [64, 1000]:
        pieces = list(abstract._string_pieces(buf, 6, size))
        assert "".join(p for p, _ in pieces) == expected, size
        assert pieces[-1][1] == 6 + len(encoded), size  # just past the closing quote
        # no piece ends in half a surrogate pair that the next one completes
        for (a, _), (b, _) in zip(pieces, pieces[1:]):
            assert not (a and b and "\ud800" <= a[-1] <= "\udbff" and "\udc00" <= b[0] <= "\udfff"), size


@pytest.mark.parametrize("bad", [b'"abc\\x"', b'"abc', b'"ab\x01c"', b'"ab\xffc"', b'"abc\\u12"', b'"abc\\'])
def test_string_pieces_refuse_what_json_loads_refuses(bad):
    with pytest.raises(ValueError):
        json.loads(bad)
    for size in (1, 2, 3, 1000):
        with pytest.raises(ValueError):
            list(abstract._string_pieces(bad, 0, size))


def test_loads_long_leaves_long_strings_as_bytes_and_parses_the_rest():
    long1, long2 = AWKWARD * 40, "\U0001F680" * 3000
    msg = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": long1}, {"type": "text", "text": "short"}],
                                                 "structuredContent": {"a": [1, long2, None], "n": 1.5}}}
    for ascii in (True, False):
        line = json.dumps(msg, ensure_ascii=ascii).encode()
        got, places = abstract._loads_long(line, 1000)
        assert [(type(p[2]), p[3]) for p in places] == [(abstract._JsonString, "result")] * 2
        texts = {id(p[2]): p[2].text() for p in places}
        assert sorted(texts.values()) == sorted([long1, long2])
        assert all(len(p[2]) == len(texts[id(p[2])]) for p in places)
        abstract._decode_long(places)
        assert same_json(got, msg)
    # not split (json.loads reads them whole): a long key, duplicate keys, no long string, not an
    # object, not valid JSON around the long string
    key = json.dumps({"id": 1, "result": {"k" * 2000: 1}}).encode()
    dup = b'{"id": 1, "t": "%s", "t": "%s"}' % (b"a" * 2000, b"b" * 2000)
    for line in (key, dup, b'{"id": 1, "t": "short"}', b'["%s"]' % (b"a" * 2000), b'{"id": 1, "t": "%s" oops}' % (b"a" * 2000)):
        assert abstract._loads_long(line, 1000) is None, line[:60]


def test_loads_long_decodes_only_the_long_strings(monkeypatch):
    """Short strings are left to json.loads: a long answer of many short strings costs no
    Python-level decoding of each (it did: 64 ms for 13,500 strings, against 2.5 ms)."""
    calls = []
    real = abstract._string_pieces
    monkeypatch.setattr(abstract, "_string_pieces", lambda buf, pos, *a: calls.append(pos) or real(buf, pos, *a))
    msg = {"id": 1, "result": {"rows": [{"k": f"v{i}"} for i in range(3000)], "text": AWKWARD * 40}}
    got, places = abstract._loads_long(json.dumps(msg).encode(), 1000)
    assert len(calls) == 1 and len(places) == 1
    assert abstract._loads_long(json.dumps({"id": 1, "rows": [f"v{i}" for i in range(3000)]}).encode(), 1000) is None
    assert len(calls) == 1  # no long string: nothing decoded by piece
    abstract._decode_long(places)
    assert same_json(got, msg)


def _pieces(text: str, size: int):
    return (text[i:i + size] for i in range(0, len(text), size))


def test_scan_records_in_pieces_gives_what_it_gives_whole():
    text = json.dumps(awkward_rows(0.01), ensure_ascii=False)
    whole = abstract._Records(500)
    expected = "".join(abstract._scan_records([text], whole))
    assert expected == abstract._json_view(json.loads(text))
    for size in list(range(1, 30)) + [97, 1000, 4096]:
        records = abstract._Records(500)
        assert "".join(abstract._scan_records(_pieces(text, size), records)) == expected, size
        assert records.count == whole.count and records.head == whole.head
    # not records, in pieces as whole: at once, not after reading everything
    for bad in ("[1, 2]", '[{"a": 1}] x', '[{"a": 1}, ]', "[INFO] " + "x" * 5000, '[{"a": 1} {"b": 2}]'):
        for size in (1, 3, 1000):
            with pytest.raises(abstract._NotRecords):
                "".join(abstract._scan_records(_pieces(bad, size), abstract._Records(500)))


# -- end to end


def _start(world: World, **cache) -> "object":
    world.fake("up")
    world.settings = {"timeout_seconds": 300, "output_cache": cache}
    return world.start()


def _stored(world: World, proxy, token: str, fmt: str) -> Path:
    res = proxy.call_tool("call_tool_and_store", {"cache_token": token, "file_format": fmt}, timeout=120)
    assert not res.get("isError"), text_of(res)
    return Path(res["structuredContent"]["path"])


def _data(result: dict):
    """What Abstract stores of a result (its extraction), rebuilt from the upstream's result."""
    return abstract._extract(result).data


@pytest.mark.parametrize("ascii", [True, False], ids=["escaped", "utf8"])
@pytest.mark.parametrize("shape", ["records", "text", "structured", "several", "resource_records",
                                   "structured_records"])
def test_a_long_answer_is_cached_as_the_upstream_sent_it(world: World, shape, ascii):
    proxy = _start(world)
    mb = 1.5
    res = proxy.upstream("up", "long", {"shape": shape, "mb": mb, "ascii": ascii}, timeout=120)
    assert not res.get("isError"), text_of(res)
    token = res["structuredContent"]["token"]
    expected = _data(make_long(shape, mb))
    path = _stored(world, proxy, token, "txt" if isinstance(expected, str) else "json")
    if isinstance(expected, str):
        assert path.read_bytes() == expected.encode("utf-8")
    else:
        stored = json.loads(path.read_bytes().decode("utf-8", "surrogatepass"))
        assert same_json(stored, expected)
    if shape.endswith("records") and shape != "resource_records":  # the lone surrogate's record
        rows = awkward_rows(mb)
        got = proxy.call_tool("retrieve_cached_output", {"token": token, "record_offset": len(rows) // 2,
                                                          "record_count": 1})
        assert same_json(json.loads(text_of(got)), rows[len(rows) // 2])
        count = proxy.call_tool("query_output", {"source": token, "sql": "SELECT count(*) AS n FROM data"})
        assert count["structuredContent"]["rows"] == [{"n": len(rows)}]


@pytest.mark.parametrize("shape", ["records", "structured", "structured_records"])
def test_a_long_answer_under_the_cache_threshold_is_relayed_whole(world: World, shape):
    proxy = _start(world, min_size=50_000_000)  # the cache is on, but this result is not large for it
    res = proxy.upstream("up", "long", {"shape": shape, "mb": 1.5, "ascii": False}, timeout=120)
    assert same_json(res, make_long(shape, 1.5))


def test_a_long_texts_twin_counts_toward_the_cache_threshold_as_compact_json(world: World):
    """The size is the larger of the text and structuredContent as compact JSON (cache.md): a
    long twin, left undecoded, is measured too, as a short one is (its escapes make it longer)."""
    result = make_long("structured_records", 1.5)
    text, twin = len(result["content"][0]["text"]), len(abstract._dumps(result["structuredContent"]))
    assert twin - text > 1000
    proxy = _start(world, min_size=(text + twin) // 2)
    res = proxy.upstream("up", "long", {"shape": "structured_records", "mb": 1.5, "ascii": False}, timeout=120)
    assert res.get("structuredContent", {}).get("cached") is True, text_of(res)[:200]


def _line(inner: bytes) -> str:
    """A tools/call answer line whose one text item is `inner` (JSON string content, raw)."""
    return ('{"jsonrpc":"2.0","id":%ID%,"result":{"content":[{"type":"text","text":"['
            + inner.decode("utf-8", "surrogateescape") + ']"}]}}')


@pytest.mark.parametrize("bad", [b"\\x", b"\x01", b"\\u12", b"\xff", b"\\ud83d\\uXYZW"],
                         ids=["bad-escape", "control-char", "short-u-escape", "invalid-utf8", "bad-pair"])
def test_a_malformed_long_answer_fails_its_call_at_once(world: World, bad):
    proxy = _start(world)
    body = b'{\\"a\\": \\"' + b"x" * (3 << 20) + bad + b'\\"}'
    res = proxy.upstream("up", "long", {"raw": _line(body)}, timeout=120)
    assert res.get("isError") is True and "cannot be read" in text_of(res), text_of(res)[:300]
    assert text_of(proxy.upstream("up", "echo", {"text": "still"})) == "still"


def test_an_unterminated_long_answer_fails_its_call_at_once(world: World):
    proxy = _start(world)
    res = proxy.upstream("up", "long", {"raw": _line(b"y" * (3 << 20))[:-4]}, timeout=120)
    assert res.get("isError") is True and "cannot be read" in text_of(res), text_of(res)[:300]


def test_a_long_answer_with_a_long_key_is_read_whole(world: World):
    proxy = _start(world)
    key = "k\u00e9\U0001F680" * (1 << 19)
    line = json.dumps({"jsonrpc": "2.0", "id": 0, "result": {"content": [{"type": "text", "text": "see"}],
                                                            "structuredContent": {key: [1, "two"]}}},
                      ensure_ascii=False).replace('"id": 0', '"id": %ID%')
    res = proxy.upstream("up", "long", {"raw": line}, timeout=120)
    stored = json.loads(_stored(world, proxy, res["structuredContent"]["token"], "json").read_text("utf-8"))
    assert stored == {key: [1, "two"]}


@needs_proc
@pytest.mark.parametrize("shape", ["records", "structured_records"])
def test_caching_a_long_answer_peaks_under_four_times_its_size(world: World, shape):
    proxy = _start(world)
    mb = 30  # (about 19 MB of records: a constant few MB matter less)
    size = len(make_long("records", mb)["content"][0]["text"].encode("utf-8", "surrogatepass"))
    assert text_of(proxy.upstream("up", "echo", {"text": "warm"})) == "warm"
    before = proc_status(proxy.pid, "VmRSS")
    Path(f"/proc/{proxy.pid}/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
    res = proxy.upstream("up", "long", {"shape": shape, "mb": mb, "ascii": False}, timeout=120)
    grew = (proc_status(proxy.pid, "VmHWM") - before) * 1024
    assert res["structuredContent"]["cached"] is True
    # (before this path: about 9 times, the answer's line and its text each a str of 4 bytes a
    # character; now the line's bytes, a piece of text at a time, and a batch of records)
    assert grew < 4 * size, f"peak memory grew by {grew / size:.1f} times the {size / 1e6:.1f} MB answer"


# -- retrieve_cached_output's records window, read from the cached view


def _cached(tmp_path: Path, data) -> tuple:
    cache = abstract._OutputCache(str(tmp_path / "cache"), abstract._Settings({"output_cache": {}}))
    entry, _, _ = cache.put({"content": [{"type": "text", "text": json.dumps(data, ensure_ascii=False)}]}, "s", "t")
    return cache, entry


@pytest.mark.parametrize("data", [
    awkward_rows(0.3),  # one pass (over _VIEW_INDENT_MAX)
    [{"a": 1}, {"b": "\U0001F680"}, {}],  # small: the view is still a record a line
    [{"a": 1}] * 3 + [5],  # mixing objects and other values: not records, read whole as before
    list(range(50)), [[1], [2]], {"rows": [{"a": 1}], "n": 1}, [],
], ids=["one-pass", "small", "mixed", "numbers", "lists", "object", "empty"])
def test_a_records_window_reads_the_view_as_the_whole_parse_does(tmp_path, data):
    cache, entry = _cached(tmp_path, data)
    with cache.opened(entry) as f:
        counted = abstract._view_count(f)
    whole = json.loads(cache.text(entry))
    rows, _ = abstract._as_records(whole)
    is_records = isinstance(whole, list) and bool(whole) and rows is whole
    assert (counted is not None) is is_records and (counted is None or counted == len(whole))
    n = len(whole) if isinstance(whole, list) else 1
    for first, count in [(0, 1), (0, 100), (1, 2), (n - 1, 5), (n, 3), (n + 10, 1), (n // 2, 7)]:
        call = abstract._Call(None, None, {"record_offset": first, "record_count": count})
        for limit in (200, 20000):
            got = abstract._view_window(cache, entry, call, limit)
            if not is_records:
                assert got is None
                continue
            assert got == abstract._records_window(whole, call, limit), (first, count, limit)


@needs_proc
def test_a_records_window_of_a_large_output_does_not_read_it_whole(world: World):
    proxy = _start(world)
    rows = awkward_rows(30)
    res = proxy.upstream("up", "long", {"shape": "records", "mb": 30, "ascii": False}, timeout=120)
    token = res["structuredContent"]["token"]
    size = len(json.dumps(rows, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    before = proc_status(proxy.pid, "VmRSS")
    Path(f"/proc/{proxy.pid}/clear_refs").write_text("5")
    got = proxy.call_tool("retrieve_cached_output", {"token": token, "record_offset": len(rows) - 3}, timeout=60)
    grew = (proc_status(proxy.pid, "VmHWM") - before) * 1024
    assert [json.loads(line) for line in text_of(got).split("\n")] == rows[-3:]
    assert got["structuredContent"]["total_records"] == len(rows)
    # (parsing the whole view took its text, 4 bytes a character, and every record as objects)
    assert grew < size / 4, f"peak memory grew by {grew / size:.2f} times the {size / 1e6:.1f} MB output"


@needs_proc
def test_a_long_answer_is_let_go_once_answered(world: World):
    proxy = _start(world)
    assert text_of(proxy.upstream("up", "echo", {"text": "warm"})) == "warm"
    size = len(json.dumps(awkward_rows(30), ensure_ascii=False).encode("utf-8", "surrogatepass"))
    before = proc_status(proxy.pid, "VmRSS")
    res = proxy.upstream("up", "long", {"shape": "records", "mb": 30, "ascii": False}, timeout=120)
    assert res["structuredContent"]["cached"] is True
    # nothing else is sent meanwhile: a worker kept its last request (and, through its cancel
    # hook, the answer's 19 MB) until its next one
    def let_go() -> bool:
        # (measured: 0.6 times once let go, what the allocator keeps; 1.8 times when kept)
        return (proc_status(proxy.pid, "VmRSS") - before) * 1024 < size * 1.2

    wait_for(let_go, timeout=10, what="the answer's memory to be let go")


def test_a_long_string_beside_cached_records_is_cached_too(world: World):
    """A long records text and, beside it, another long string nested deep in the result (here
    in _meta): the records are read in pieces, and the other string is cached with the result
    (it used to be left undecoded, and writing the result failed with a TypeError)."""
    proxy = _start(world)
    result = make_long("records", 1.5)
    deep = "x" * (3 << 20)
    result["_meta"] = {"a": {"b": {"c": {"d": {"e": deep}}}}}
    line = json.dumps({"jsonrpc": "2.0", "id": 0, "result": result}).replace('"id": 0', '"id": %ID%', 1)
    res = proxy.upstream("up", "long", {"raw": line}, timeout=120)
    assert not res.get("isError"), text_of(res)[:300]
    token = res["structuredContent"]["token"]
    count = proxy.call_tool("query_output", {"source": token, "sql": "SELECT count(*) AS n FROM data"})
    assert count["structuredContent"]["rows"] == [{"n": len(awkward_rows(1.5))}]


def test_a_long_records_text_in_a_result_of_many_members_is_cached(world: World):
    """A result (or its text item) of more than 100 members is written by one _dumps, not member
    by member: the long text left undecoded in it is written too (it failed with a TypeError,
    "Internal error" to the client, and left the view's file behind)."""
    proxy = _start(world)
    result = make_long("records", 1.5)
    result.update({f"x{i}": i for i in range(101)})
    line = json.dumps({"jsonrpc": "2.0", "id": 0, "result": result}).replace('"id": 0', '"id": %ID%', 1)
    res = proxy.upstream("up", "long", {"raw": line}, timeout=120)
    assert not res.get("isError") and "error" not in res, str(res)[:300]
    stored = json.loads(_stored(world, proxy, res["structuredContent"]["token"], "json").read_bytes()
                        .decode("utf-8", "surrogatepass"))
    assert same_json(stored, awkward_rows(1.5))
