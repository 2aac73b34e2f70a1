"""The output cache (issue 6): the threshold and each settings level, previews, every
retrieval mode, expiry and the size cap, cache resources, and the signed-link HTTP server.

OutputCache, _json_pointer, _window and _link_response are unit-tested in-process with a fake
clock; everything else runs real `python abstract.py` subprocesses over fake_upstream.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

import abstract
from conftest import ABSTRACT, World, files_under, same_json, text_of, wait_for
from fake_upstream import big_text, make_lines, make_rows

TOKEN_RE = re.compile(r"Token: ([A-Za-z0-9_-]{16,64}) ")
SECRET = "test-secret-0123456789"
MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "pytest", "version": "0"}}


def _text(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}]}


def _token(res: dict) -> str:
    """The token a cached answer names (in its text, so direct mode's answers work too)."""
    m = TOKEN_RE.search(text_of(res))
    assert m, f"not a cached answer: {text_of(res)[:300]}"
    return m.group(1)


def _cache_files(cache_dir: Path, token: str) -> list:
    return sorted(p.name for p in cache_dir.iterdir() if p.name.startswith(token)) if cache_dir.exists() else []


# ==== unit: _json_pointer ===========================================================

DOC = {"results": [{"id": 0}, {"id": 1}], "a/b": 1, "m~n": 2, "~1": 3, "": 4, "0": "zero", "n": None}


@pytest.mark.parametrize("pointer, want", [
    ("", DOC), ("/results", DOC["results"]), ("/results/1/id", 1), ("/a~1b", 1), ("/m~0n", 2),
    ("/~01", 3),  # ~01 is "~1" (unescape ~1 first, then ~0), not "/"
    ("/", 4), ("/0", "zero"), ("/n", None),
])
def test_json_pointer_follows_rfc_6901(pointer, want):
    assert same_json(abstract._json_pointer(DOC, pointer), want)


@pytest.mark.parametrize("pointer, message", [
    ("results", "must start with '/'"),
    ("/nope", "no 'nope' in dict"),
    ("/results/2", "no '2' in an array of 2"),
    ("/results/01", "no '01' in an array of 2"),  # no leading zeros
    ("/results/-", "no '-' in an array of 2"),  # "-" (past the end) names nothing to read
    ("/results/0/id/x", "no 'x' in int"),
    ("/a/b", "no 'a' in dict"),  # a "/" in a key must be written ~1
])
def test_json_pointer_errors_name_the_missing_step(pointer, message):
    with pytest.raises(abstract._ToolError, match=re.escape(message)):
        abstract._json_pointer(DOC, pointer)


# ==== unit: _window =================================================================


def _win(text: str, limit: int, **args):
    return abstract._window(text, abstract._Call(None, None, args), limit)


def test_window_by_offset_is_bounded_and_says_what_remains():
    assert _win("abcdefghij", 4) == ("abcd", {"offset": 0, "length": 4, "total_chars": 10, "next_offset": 4})
    assert _win("abcdefghij", 4, offset=4, length=2)[0] == "ef"
    assert _win("abcdefghij", 4, offset=2, length=100)[0] == "cdef"  # length capped by the window
    assert _win("abcdefghij", 4, offset=8) == ("ij", {"offset": 8, "length": 2, "total_chars": 10, "next_offset": None})
    assert _win("abcdefghij", 4, offset=10)[1]["next_offset"] is None
    assert _win("abcdefghij", 4, offset=99) == ("", {"offset": 99, "length": 0, "total_chars": 10, "next_offset": None})


@pytest.mark.parametrize("args", [{"offset": -1}, {"length": 0}, {"offset": "3"}, {"start_line": 0},
                                  {"end_line": True}, {"length": 1.5}])
def test_window_rejects_bad_numbers(args):
    with pytest.raises(abstract._ToolError, match="must be an integer"):
        _win("abc", 10, **args)


def test_window_by_lines():
    text = make_lines(10)  # "line 1\n...line 10", no newline at the end
    chunk, where = _win(text, 1000, start_line=3, end_line=5)
    assert chunk == "line 3\nline 4\nline 5\n"
    assert where == {"start_line": 3, "end_line": 5, "total_lines": 10, "next_line": 6}
    chunk, where = _win(text, 1000, start_line=9)
    assert (chunk, where["end_line"], where["next_line"]) == ("line 9\nline 10", 10, None)
    assert _win(text, 1000, end_line=2)[0] == "line 1\nline 2\n"
    assert _win(text, 1000, start_line=8, end_line=99)[1]["next_line"] is None  # end_line past the end


def test_window_by_lines_is_bounded_by_the_window():
    chunk, where = _win(make_lines(10), 20, start_line=1)  # each line is 7 characters with its newline
    assert chunk == "line 1\nline 2\n"
    assert (where["end_line"], where["next_line"]) == (2, 3)


def test_window_line_longer_than_the_window_is_cut_and_says_so():
    text = "x" * 50 + "\nshort\n"
    chunk, where = _win(text, 10, start_line=1)
    assert chunk == "x" * 10
    assert where["next_line"] == 2
    assert where.get("truncated_line") == 1  # the model must learn the line was not shown whole


def test_window_end_line_before_start_line_is_an_error():
    with pytest.raises(abstract._ToolError, match="end_line"):
        _win(make_lines(10), 100, start_line=5, end_line=2)


# ==== unit: the text view of JSON data ===============================================

def test_json_view_writes_records_one_per_line_and_stays_json():
    rows = make_rows(50)
    view = abstract._json_view(rows)
    lines = view.split("\n")
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) == 52
    assert [json.loads(line.rstrip(",")) for line in lines[1:-1]] == rows
    assert json.loads(view) == rows
    wrapped = {"total": 50, "items": rows, "next": None}  # the one records list of an object
    lines = abstract._json_view(wrapped).split("\n")
    assert lines[:3] == ["{", '"total": 50,', '"items": ['] and lines[-3:] == ["],", '"next": null', "}"]
    assert [json.loads(line.rstrip(",")) for line in lines[3:-3]] == rows
    assert json.loads("\n".join(lines)) == wrapped


def test_json_view_indents_small_json_and_lines_up_large_json():
    small = {"a": [1, 2], "b": {"c": "café"}}
    assert abstract._json_view(small) == json.dumps(small, indent=2, ensure_ascii=False)
    numbers = list(range(30000))  # more than _VIEW_INDENT_MAX characters: an item per line
    assert abstract._json_view(numbers) == "[\n" + ",\n".join(map(str, numbers)) + "\n]"
    big = {f"k{i}": [i, "x" * 20] for i in range(5000)}
    view = abstract._json_view(big)
    assert view.split("\n")[1] == '"k0": [0, "xxxxxxxxxxxxxxxxxxxx"],' and json.loads(view) == big
    assert abstract._json_view("text") == '"text"' and abstract._json_view([]) == "[]"


# ==== unit: OutputCache with a fake clock ===========================================


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _cache(path: Path, clock: Clock, **conf) -> abstract._OutputCache:
    return abstract._OutputCache(str(path), abstract._Settings({"output_cache": conf}), clock=clock)


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def test_put_writes_owner_only_files_inside_the_cache_dir(tmp_path):
    d = tmp_path / "cache"
    cache = _cache(d, Clock(), ttl_seconds=60)
    res = {"content": [{"type": "text", "text": "hello"},
                       {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"}]}
    entry, _, text = cache.put(res, "srv", "tool")
    assert text == "hello" and entry.ctype == "text/plain" and entry.expires == Clock().t + 60
    want = sorted(f"{entry.token}{x}" for x in (".json", ".txt", ".meta.json", "-1.png"))
    assert _cache_files(d, entry.token) == want
    assert (d / f"{entry.token}-1.png").read_bytes() == PNG
    assert same_json(cache.result(entry), res)
    if os.name == "posix":
        assert d.stat().st_mode & 0o777 == 0o700
        assert all(p.stat().st_mode & 0o077 == 0 for p in d.iterdir())


def test_put_is_one_pass_no_fsync_and_the_catalog_gets_the_digest(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(abstract.os, "fsync", lambda fd: synced.append(fd))
    cache = _cache(tmp_path / "cache", Clock())
    rows = make_rows(200)
    entry, _, text = cache.put({"content": [{"type": "text", "text": json.dumps(rows)}]}, "srv", "tool")
    assert synced == []  # disposable files: no fsync
    view = (tmp_path / "cache" / f"{entry.token}.txt").read_bytes()
    assert view == text.encode() and entry.sha256 == hashlib.sha256(view).hexdigest()
    record = abstract._cache_record(cache, entry, 100, rows)
    assert record["sha256"] == entry.sha256 and record["bytes"] == len(view) and record["text"] == text[:100]
    abstract._write_new(str(tmp_path), "stored", ".txt", b"x")  # stored files still are synced
    assert len(synced) == 1


def test_result_size_serialises_structured_content_only_when_needed(monkeypatch):
    res = {"content": [{"type": "text", "text": "x" * 100}], "structuredContent": {"a": "y" * 1000}}
    assert abstract._result_size(res) > 1000 and abstract._result_size(res, 5000) > 1000
    monkeypatch.setattr(abstract, "_dumps", lambda v: pytest.fail("serialised"))
    assert abstract._result_size(res, 50) == 100  # the text alone is over the threshold


def test_expired_entry_is_an_error_and_its_files_are_deleted_on_access(tmp_path):
    clock = Clock()
    cache = _cache(tmp_path, clock, ttl_seconds=10)
    entry = cache.put(_text("x" * 100), "s", "t")[0]
    assert cache.get(entry.token) is entry
    clock.t += 10
    with pytest.raises(abstract._ToolError, match=r"expired at \d{4}-\d\d-\d\dT.*Call the tool again"):
        cache.get(entry.token)
    assert _cache_files(tmp_path, entry.token) == []
    with pytest.raises(abstract._ToolError, match="No cached output with token"):
        cache.get(entry.token)


@pytest.mark.parametrize("token", ["short", "../../etc/passwd", "a" * 65, 12, None, "x" * 20 + "/", "x" * 20 + "\n"])
def test_malformed_token_is_a_clear_error(tmp_path, token):
    with pytest.raises(abstract._ToolError, match="is not a cache token"):
        _cache(tmp_path, Clock()).get(token)


def test_sweep_and_start_up_delete_only_expired_entries(tmp_path):
    clock = Clock()
    cache = _cache(tmp_path, clock, ttl_seconds=10)
    old = cache.put(_text("old"), "s", "t")[0]
    clock.t += 5
    young = cache.put(_text("young"), "s", "t")[0]
    again = _cache(tmp_path, Clock(clock.t), ttl_seconds=10)  # a second process before expiry: both kept
    assert again.text(again.get(old.token)) == "old"
    clock.t += 6  # old expired, young not
    assert cache.sweep() == 1
    assert _cache_files(tmp_path, old.token) == [] and len(_cache_files(tmp_path, young.token)) == 3
    assert [e.token for e in cache.entries()] == [young.token]
    later = Clock(clock.t + 5)  # young expired too: the next start-up deletes it
    assert _cache(tmp_path, later, ttl_seconds=10).entries() == []
    assert list(files_under(tmp_path)) == [".abstract-cache"]  # the marker alone stays


def test_size_cap_evicts_oldest_first_and_keeps_the_newest(tmp_path):
    clock = Clock()
    cache = _cache(tmp_path, clock, max_total_mb=0.05)  # 52,428 bytes; each entry below is ~20,000
    tokens = []
    for i in range(4):
        clock.t += 1
        tokens.append(cache.put(_text(str(i) * 10000), "s", "t")[0].token)
    assert [e.token for e in cache.entries()] == tokens[:1:-1]  # newest first; 0 and 1 evicted
    assert _cache_files(tmp_path, tokens[0]) == _cache_files(tmp_path, tokens[1]) == []
    with pytest.raises(abstract._ToolError, match="evicted"):
        cache.get(tokens[0])
    clock.t += 1
    huge = cache.put(_text("h" * 100000), "s", "t")[0]  # alone over the cap: still kept, the rest goes
    assert [e.token for e in cache.entries()] == [huge.token]


def _meta(name: str, **kw) -> str:
    info = {"token": name, "server": "s", "tool": "t", "created": 1.0, "expires": 2.0, "chars": 1,
            "ctype": "text/plain", "bytes": 1, "files": []}
    info.update(kw)
    return json.dumps(info)


def test_expiry_never_deletes_anything_outside_the_cache_dir(tmp_path):
    """A stale or crafted .meta.json may name any path; only the cache's own files go."""
    d, outside = tmp_path / "cache", tmp_path / "outside"
    d.mkdir()
    outside.mkdir()
    victims = [outside / "keep.txt", tmp_path / "keep2.txt"]
    for v in victims:
        v.write_text("precious")
    t1, t2 = "A" * 24, "B" * 24
    (d / ".abstract-cache").write_text("")  # Abstract's own cache, with a foreign file put in it
    (d / f"{t1}.meta.json").write_text(_meta(t1, files=[str(victims[0]), str(d / ".." / "keep2.txt")]))
    (d / f"{t1}.txt").write_text("x")
    (d / f"{t2}.meta.json").write_text(_meta("C" * 24, files=[str(victims[1])]))  # not its own file name
    (d / "notes.txt").write_text("not the cache's")
    _cache(d, Clock())
    assert all(v.read_text() == "precious" for v in victims)
    assert sorted(p.name for p in d.iterdir()) == [".abstract-cache", f"{t2}.meta.json", "notes.txt"]


@pytest.mark.parametrize("meta", ["not json", "[]", "null", _meta("C" * 24, expires=None),
                                  _meta("C" * 24, expires="soon"), _meta("C" * 24, files="x"),
                                  _meta("C" * 24, created=None), _meta("C" * 24, token=5)])
def test_broken_metadata_is_skipped_not_fatal(tmp_path, meta):
    (tmp_path / ("C" * 24 + ".meta.json")).write_text(meta)
    cache = _cache(tmp_path, Clock())
    assert cache.entries() == [] and cache.sweep() == 0
    entry = cache.put(_text("still works"), "s", "t")[0]
    assert cache.text(cache.get(entry.token)) == "still works"


# ==== unit: _link_response ==========================================================


@pytest.fixture
def links(tmp_path):
    clock = Clock()
    cache = _cache(tmp_path / "cache", clock, ttl_seconds=100)
    signer = abstract._Signer(b"k")
    text_entry = cache.put(_text("plain text"), "s", "t")[0]
    json_entry = cache.put(_text(json.dumps(make_rows(3))), "s", "rows")[0]

    def url(token: str, expires: int = None, sig: str = None) -> str:
        expires = int(text_entry.expires) if expires is None else expires
        sig = signer.sign(token, expires) if sig is None else sig
        return f"/cache/{token}?expires={expires}&sig={sig}"

    return clock, cache, signer, text_entry, json_entry, url


def test_link_good_answers_200_with_the_content_type(links):
    clock, cache, signer, t, j, url = links
    status, ctype, body = abstract._link_response(cache, signer, url(t.token))
    f, size = body()  # the file, to stream
    with f:
        assert (status, ctype, f.read(), size) == (200, "text/plain; charset=utf-8", b"plain text", 10)
    status, ctype, body = abstract._link_response(cache, signer, url(j.token))
    assert (status, ctype) == (200, "application/json; charset=utf-8")
    f, size = body()
    with f:
        assert json.loads(f.read()) == make_rows(3)


def test_link_bad_signatures_are_403(links):
    clock, cache, signer, t, j, url = links
    e = int(t.expires)
    good = signer.sign(t.token, e)
    flipped = ("0" if good[0] != "0" else "1") + good[1:]
    for path in [url(t.token, sig=flipped), url(t.token, expires=e + 1000, sig=good), url(t.token, sig=""),
                 url(t.token, sig=signer.sign(j.token, e)), url(t.token, sig=good.upper()),
                 url(t.token, sig="%C3%A9" + good[2:]),  # non-ASCII after decoding: a 403, not a crash
                 f"/cache/{t.token}?expires={e}", f"/cache/{t.token}?sig={good}", f"/cache/{t.token}",
                 f"/cache/{t.token}?expires=soon&sig={good}",
                 f"/cache/{t.token}?expires={e}&sig={abstract._Signer(b'other').sign(t.token, e)}"]:
        status, _, body = abstract._link_response(cache, signer, path)
        assert status == 403, (path, status, body)


def test_link_expired_is_410_and_unknown_is_404(links):
    clock, cache, signer, t, j, url = links
    past = int(clock.t) - 1
    assert abstract._link_response(cache, signer, url(t.token, expires=past))[0] == 410
    clock.t = t.expires + 1  # the entry and its real link expire together
    assert abstract._link_response(cache, signer, url(t.token))[0] == 410
    later = int(clock.t) + 1000  # a validly signed link that outlives its entry: gone, 404
    assert abstract._link_response(cache, signer, url(t.token, expires=later))[0] == 404
    assert abstract._link_response(cache, signer, url("Z" * 24, expires=later))[0] == 404


def test_link_path_tricks_are_404(links):
    clock, cache, signer, t, j, url = links
    q = url(t.token).split("?", 1)[1]
    for path in ["/", "/cache", "/cache/", "/etc/passwd", f"/cache/../cache/{t.token}?{q}", "/cache/%2e%2e",
                 f"/cache/%2e%2e/{t.token}?{q}", f"//cache/{t.token}?{q}", f"/CACHE/{t.token}?{q}",
                 f"/cache/{t.token}/?{q}", f"/cache/{t.token}.json?{q}", f"/cache/{t.token}.txt?{q}",
                 f"/cache/{t.token}%00?{q}", f"/cache/{t.token}\n?{q}", f"/x/cache/{t.token}?{q}",
                 f"/cache/?token={t.token}&{q}", f"/cache/{t.token[:-1]}%2F?{q}", "/cache/" + "a" * 65]:
        status, _, body = abstract._link_response(cache, signer, path)
        assert status == 404 and t.token.encode() not in body and b"plain text" not in body, path


def test_link_query_tricks(links):
    clock, cache, signer, t, j, url = links
    e, sig = int(t.expires), signer.sign(t.token, int(t.expires))
    # repeated parameters: the first counts, so a second "expires" cannot extend a link
    assert abstract._link_response(cache, signer, f"/cache/{t.token}?expires={e}&sig={sig}&expires={e + 99}")[0] == 200
    assert abstract._link_response(cache, signer, f"/cache/{t.token}?expires={e + 99}&sig={sig}&expires={e}")[0] == 403
    # order and extra parameters do not matter
    assert abstract._link_response(cache, signer, f"/cache/{t.token}?x=1&sig={sig}&expires={e}")[0] == 200
    # a token in the query is not a token
    assert abstract._link_response(cache, signer, f"/cache/{j.token}?token={t.token}&expires={e}&sig={sig}")[0] == 403


def test_link_signature_is_hmac_sha256_of_token_colon_expires():
    got = abstract._Signer(b"key").sign("T" * 20, 123)
    assert got == hmac.new(b"key", ("T" * 20 + ":123").encode(), hashlib.sha256).hexdigest()


# ==== end to end: threshold and settings ============================================


def test_default_threshold_is_50000_characters(world):
    world.fake("s")
    p = world.start()
    at = "é" * 50000
    assert same_json(p.upstream("s", "echo", {"text": at}), _text(at))  # at the threshold: unchanged
    res = p.upstream("s", "echo", {"text": at + "!"})
    info = res["structuredContent"]
    assert info["cached"] is True and info["total_chars"] == 50001 and info["content_type"] == "text/plain"
    assert info["uri"] == "abstract://cache/" + info["token"] == "abstract://cache/" + _token(res)
    assert len(text_of(res)) < 2000 and "retrieve_cached_output" in text_of(res)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", info["expires_at"])


def test_large_error_result_is_cached_and_stays_an_error(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 1000}}
    p = world.start()
    res = p.upstream("s", "result", {"result": {"content": [{"type": "text", "text": "E" * 2000}], "isError": True}})
    assert res["isError"] is True and res["structuredContent"]["cached"] is True
    assert text_of(_get(p, token=_token(res))) == "E" * 2000


def test_small_results_pass_through_exactly(world):
    world.fake("s")
    p = world.start()
    odd = {"content": [{"type": "text", "text": "ünï \"quoted\"\n\ttabs \u2028 \U0001F600",
                        "annotations": {"priority": 1.0}},
                       {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"},
                       {"type": "resource_link", "uri": "file:///x", "name": "x"}],
           "structuredContent": {"n": 1, "f": 1.0, "neg": -0.0, "big": 2 ** 60, "none": None, "list": []},
           "_meta": {"k": "v"}, "isError": False}
    assert same_json(p.upstream("s", "result", {"result": odd}), odd)


SETTINGS_LEVELS = {
    "output_cache": {"min_size": 1000, "preview_chars": 100},
    "servers": {
        "srv": {"cache_outputs": {"min_size": 5000}},
        "tool": {"cache_outputs": {"min_size": 5000},
                 "tools": {"echo": {"cache_output": {"min_size": 100, "preview_chars": 10}}}},
        "off": {"cache_outputs": False, "tools": {"echo": {"cache_output": True}}},
        "on": {"tools": {"echo": {"cache_output": False}}},
    },
}


def _echoed(args: dict) -> dict:
    """What echo_args answers, uncached."""
    return {**_text(json.dumps(args)), "structuredContent": args}


def _cached(res: dict) -> bool:
    return bool(TOKEN_RE.search(text_of(res))) and res.get("structuredContent", {}).get("cached") is True


def test_settings_resolve_tool_then_server_then_global(world):
    for name in ("glob", "srv", "tool", "off", "on"):
        world.fake(name)
    world.settings = SETTINGS_LEVELS
    p = world.start()
    t3, t6 = "a" * 3000, "b" * 6000
    res = p.upstream("glob", "echo", {"text": t3})  # global min_size 1000
    assert _cached(res) and f"Preview:\n{'a' * 100} [...]" in text_of(res) and "a" * 101 not in text_of(res)
    assert same_json(p.upstream("srv", "echo", {"text": t3}), _text(t3))  # server min_size 5000
    assert _cached(p.upstream("srv", "echo", {"text": t6}))
    res = p.upstream("tool", "echo", {"text": t3})  # tool min_size 100 and preview 10
    assert _cached(res) and f"Preview:\n{'a' * 10} [...]" in text_of(res) and "a" * 11 not in text_of(res)
    assert same_json(p.upstream("tool", "echo_args", {"t": t3}), _echoed({"t": t3}))
    assert same_json(p.upstream("off", "echo_args", {"t": t6}), _echoed({"t": t6}))
    assert _cached(p.upstream("off", "echo", {"text": t3}))  # tool true beats server false; min_size global
    assert same_json(p.upstream("off", "echo", {"text": "a" * 999}), _text("a" * 999))
    assert same_json(p.upstream("on", "echo", {"text": t6}), _text(t6))  # tool false
    assert _cached(p.upstream("on", "echo_args", {"t": t3}))


def test_global_disable_turns_the_cache_off_but_a_tool_can_turn_it_on(world):
    world.fake("s")
    world.settings = {"output_cache": {"enabled": False, "min_size": 100},
                      "servers": {"s": {"tools": {"echo": {"cache_output": True}}}}}
    p = world.start()
    t = "z" * 500
    assert same_json(p.upstream("s", "echo_args", {"t": t}), _echoed({"t": t}))
    assert _cached(p.upstream("s", "echo", {"text": t}))


def test_cache_fully_off_passes_large_results_and_hides_retrieve(world):
    world.fake("s")
    world.settings = {"output_cache": {"enabled": False}}
    p = world.start()
    names = [t["name"] for t in p.result("tools/list")["tools"]]
    assert "retrieve_cached_output" not in names
    big = "q" * 60000
    assert same_json(p.upstream("s", "echo", {"text": big}), _text(big))
    resp = p.request("tools/call", {"name": "retrieve_cached_output", "arguments": {"token": "A" * 24}})
    assert resp["error"]["code"] == -32602 and "Unknown tool" in resp["error"]["message"]


@pytest.mark.parametrize("settings, message", [
    ({"output_cache": {"min_size": -1}}, "output_cache.min_size"),
    ({"output_cache": {"ttl_seconds": 0}}, "output_cache.ttl_seconds"),
    ({"output_cache": {"bogus": 1}}, "unknown key 'output_cache.bogus'"),
    ({"servers": {"s": {"cache_outputs": "yes"}}}, "servers.s.cache_outputs"),
    ({"servers": {"s": {"tools": {"t": {"cache_output": {"ttl_seconds": 5}}}}}},
     "servers.s.tools.t.cache_output.ttl_seconds"),
    ({"cache_base_url": "ftp://x"}, "cache_base_url"),
])
def test_bad_cache_settings_stop_start_up_with_a_message(world, settings, message):
    world.settings = settings
    proc = subprocess.run([sys.executable, str(ABSTRACT), str(world.dir)], env=world.env(), stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=30)
    assert proc.returncode == 2 and message in proc.stderr.decode() and b"Traceback" not in proc.stderr


# ==== end to end: previews ===========================================================


def test_text_preview(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 1000, "preview_chars": 300}}
    p = world.start()
    text = make_lines(1000)
    res = p.upstream("s", "result", {"result": _text(text)})
    answer = text_of(res)
    assert f"Preview:\n{text[:300]} [...]" in answer and text[300:320] not in answer
    assert f"({len(text):,} characters of text, 1,000 lines)" in answer  # the shape of text: its line count
    assert f'"offset": 300' in answer  # where to go on


def test_json_records_preview_shows_first_records_whole(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 1000, "preview_chars": 300}}
    p = world.start()
    for data, rows in [(make_rows(500), make_rows(500)), ({"total": 500, "results": make_rows(500)}, make_rows(500))]:
        res = p.upstream("s", "result", {"result": _text(json.dumps(data))})
        m = re.search(r"Preview \(first (\d+) of (\d+) records\):\n(.*?)\nMore:", text_of(res), re.S)
        assert m, text_of(res)
        shown = [json.loads(line) for line in m.group(3).split("\n")]
        assert int(m.group(2)) == 500 and len(shown) == int(m.group(1)) >= 2
        assert shown == rows[:len(shown)]  # whole records, not a cut string
        assert res["structuredContent"]["content_type"] == "application/json"


def test_json_without_records_gets_a_text_preview(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 1000, "preview_chars": 50}}
    p = world.start()
    numbers = list(range(2000))
    answer = text_of(p.upstream("s", "result", {"result": _text(json.dumps(numbers))}))
    assert "records" not in answer and '"value"' not in answer  # scalars are not dressed up as records
    assert "Preview:\n" + json.dumps(numbers, indent=2)[:50] + " [...]" in answer


def test_preview_chars_zero_shows_no_preview(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 1000, "preview_chars": 0}}
    p = world.start()
    for data in ("x" * 2000, json.dumps(make_rows(100))):
        answer = text_of(p.upstream("s", "result", {"result": _text(data)}))
        assert "Preview" not in answer and "name 0" not in answer and "xxxx" not in answer


def test_binary_items_of_a_large_result_are_cached_as_files(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 1000}}
    p = world.start()
    wav, pdf = b"RIFF" + os.urandom(3000), b"%PDF-1.4 " + os.urandom(500)
    res = {"content": [{"type": "text", "text": "caption"},
                       {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"},
                       {"type": "audio", "data": base64.b64encode(wav).decode(), "mimeType": "audio/wav"},
                       {"type": "resource", "resource": {"uri": "x:doc", "blob": base64.b64encode(pdf).decode(),
                                                         "mimeType": "application/pdf"}}]}
    answer = text_of(p.upstream("s", "result", {"result": res}))
    cache_dir = world.tmp / "cache"
    found = {}
    for kind, size in (("image/png", len(PNG)), ("audio/wav", len(wav)), ("application/pdf", len(pdf))):
        m = re.search(re.escape(kind) + rf" item \({size:,} bytes\) cached as (\S+)", answer)
        assert m, answer
        found[kind] = Path(m.group(1))
        assert found[kind].parent == cache_dir
    assert found["image/png"].read_bytes() == PNG and found["image/png"].suffix == ".png"
    assert found["audio/wav"].read_bytes() == wav and found["audio/wav"].suffix == ".wav"
    assert found["application/pdf"].read_bytes() == pdf and found["application/pdf"].suffix == ".pdf"
    assert "Preview:\ncaption" in answer


def test_binary_only_result_is_described_not_shown_as_null(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 1000}}
    p = world.start()
    res = p.upstream("s", "result", {"result": {"content": [
        {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"}]}})
    answer, info = text_of(res), res["structuredContent"]
    assert "Preview:\nnull" not in answer and info["total_chars"] > 4
    path = re.search(r"image/png item \([\d,]+ bytes\) cached as (\S+)", answer).group(1)
    assert Path(path).read_bytes() == PNG
    got = p.call_tool("retrieve_cached_output", {"token": info["token"], "pointer": "/0/path"})
    assert text_of(got) == path


# ==== end to end: retrieval ==========================================================

RETRIEVE = {"output_cache": {"min_size": 100, "max_window_chars": 1000}}
ODD_KEYS = {"a/b": {"m~n": ["zero", "one", "two"]}, "~1": "tilde-one", "pad": "p" * 300}


@pytest.fixture(scope="module")
def retr(tmp_path_factory):
    """One Abstract for the retrieval tests: tokens for lines(2000), rows(300) and odd keys."""
    w = World(tmp_path_factory.mktemp("retrieve"))
    w.fake("s")
    w.settings = RETRIEVE
    try:
        p = w.start()
        tokens = {"lines": _token(p.upstream("s", "result", {"result": _text(make_lines(2000))})),
                  "rows": _token(p.upstream("s", "rows", {"n": 300})),
                  "odd": _token(p.upstream("s", "result", {"result": _text(json.dumps(ODD_KEYS))})),
                  "structured": _token(p.upstream("s", "result", {"result": {
                      "content": [{"type": "text", "text": "summary only"}],
                      "structuredContent": {"results": make_rows(40)}}}))}
        yield p, tokens
    finally:
        w.cleanup()


def _get(p, **args) -> dict:
    return p.call_tool("retrieve_cached_output", args)


def test_retrieve_pages_through_everything_by_offset(retr):
    p, tokens = retr
    text, got, offset, calls = make_lines(2000), [], 0, 0
    while offset is not None:
        res = _get(p, token=tokens["lines"], offset=offset)
        chunk, info = text_of(res), res["structuredContent"]
        assert len(chunk) <= 1000 and info["total_chars"] == len(text) and info["offset"] == offset
        got.append(chunk)
        offset, calls = info["next_offset"], calls + 1
        status = res["content"][1]["text"]
        assert status == "[end of data]" if offset is None else f"offset={offset}" in status
    assert "".join(got) == text and calls == -(-len(text) // 1000)


def test_retrieve_length_is_capped_by_max_window_chars(retr):
    p, tokens = retr
    res = _get(p, token=tokens["lines"], offset=10, length=50)
    assert text_of(res) == make_lines(2000)[10:60] and res["structuredContent"]["next_offset"] == 60
    res = _get(p, token=tokens["lines"], length=999999)
    assert res["structuredContent"]["length"] == 1000
    res = _get(p, token=tokens["lines"], offset=10 ** 9)
    assert text_of(res) == "" and res["structuredContent"]["next_offset"] is None
    assert res["content"][1]["text"] == "[end of data]"


def test_retrieve_by_lines(retr):
    p, tokens = retr
    res = _get(p, token=tokens["lines"], start_line=10, end_line=12)
    assert text_of(res) == "line 10\nline 11\nline 12\n"
    assert res["structuredContent"]["next_line"] == 13 and res["structuredContent"]["total_lines"] == 2000
    assert "start_line=13" in res["content"][1]["text"]
    res = _get(p, token=tokens["lines"], start_line=1)  # bounded by the window
    assert len(text_of(res)) <= 1000 and text_of(res).startswith("line 1\n")
    assert text_of(res) == make_lines(2000)[:len(text_of(res))] and text_of(res).endswith("\n")
    res = _get(p, token=tokens["lines"], start_line=1999)
    assert text_of(res) == "line 1999\nline 2000" and res["structuredContent"]["next_line"] is None
    assert res["content"][1]["text"] == "[end of data]"


def test_retrieve_by_pointer(retr):
    p, tokens = retr
    res = _get(p, token=tokens["rows"], pointer="/7")
    assert json.loads(text_of(res)) == make_rows(300)[7] and res["structuredContent"]["pointer"] == "/7"
    assert text_of(_get(p, token=tokens["rows"], pointer="/299/name")) == "name 299"  # a string, unquoted
    whole = _get(p, token=tokens["rows"], pointer="")  # the whole document, still windowed
    assert len(text_of(whole)) == 1000 and whole["structuredContent"]["next_offset"] == 1000
    assert text_of(_get(p, token=tokens["odd"], pointer="/a~1b/m~0n/2")) == "two"
    assert text_of(_get(p, token=tokens["odd"], pointer="/~01")) == "tilde-one"
    res = _get(p, token=tokens["structured"], pointer="/results/39/id")  # into structuredContent
    assert text_of(res) == "39"
    res = _get(p, token=tokens["rows"], pointer="/10", start_line=2, end_line=2)  # lines of the sub-value
    assert text_of(res) == '  "id": 10,\n'


def test_retrieve_by_lines_reads_a_record_per_line(retr):
    p, tokens = retr
    rows = make_rows(300)
    res = _get(p, token=tokens["rows"], start_line=2, end_line=4)
    assert [json.loads(line.rstrip(",")) for line in text_of(res).splitlines()] == rows[:3]
    res = _get(p, token=tokens["structured"], pointer="/results", start_line=41, end_line=41)
    assert json.loads(text_of(res)) == make_rows(40)[39]  # a pointer's value has the same view
    whole = p.result("resources/read", {"uri": "abstract://cache/" + tokens["rows"]})["contents"][0]["text"]
    assert whole == abstract._json_view(rows)


@pytest.mark.parametrize("args, message", [
    ({"pointer": "/300"}, "no '300' in an array of 300"),
    ({"pointer": "0"}, "must start with '/'"),
    ({"pointer": "/0/nope"}, "no 'nope'"),
    ({"pointer": 5}, "'pointer' must be a non-empty string"),
    ({"offset": -5}, "must be an integer >= 0"),
    ({"length": 0}, "must be an integer >= 1"),
    ({"start_line": 0}, "must be an integer >= 1"),
])
def test_retrieve_errors_are_clear(retr, args, message):
    p, tokens = retr
    res = _get(p, token=tokens["rows"], **args)
    assert res.get("isError") is True and message in text_of(res), text_of(res)


def test_retrieve_pointer_on_text_is_an_error(retr):
    p, tokens = retr
    res = _get(p, token=tokens["lines"], pointer="/0")
    assert res.get("isError") and "pointer needs JSON data" in text_of(res)


@pytest.mark.parametrize("token, message", [
    ("A" * 24, "No cached output with token " + "A" * 24), ("nope", "is not a cache token"),
    (None, "Missing required argument 'token'"), ("../" * 8, "is not a cache token")])
def test_retrieve_unknown_token_is_a_clear_error(retr, token, message):
    p, _ = retr
    res = p.call_tool("retrieve_cached_output", {} if token is None else {"token": token})
    assert res.get("isError") is True and message in text_of(res)


def test_retrieve_is_listed_with_its_schema(retr):
    p, _ = retr
    tool = next(t for t in p.result("tools/list")["tools"] if t["name"] == "retrieve_cached_output")
    assert tool["inputSchema"]["required"] == ["token"]
    assert set(tool["inputSchema"]["properties"]) == {"token", "offset", "length", "start_line", "end_line", "pointer",
                                                      "record_offset", "record_count", "pattern", "context"}


def test_cache_entries_are_resources(retr):
    p, tokens = retr
    listed = {r["uri"]: r for r in p.result("resources/list")["resources"]}
    for key, ctype in (("lines", "text/plain"), ("rows", "application/json")):
        uri = "abstract://cache/" + tokens[key]
        assert listed[uri]["mimeType"] == ctype and listed[uri]["name"].startswith("cached s.")
        got = p.result("resources/read", {"uri": uri})["contents"]
        assert got[0]["uri"] == uri and got[0]["mimeType"] == ctype
        assert listed[uri]["size"] == len(got[0]["text"])
    lines = p.result("resources/read", {"uri": "abstract://cache/" + tokens["lines"]})["contents"][0]["text"]
    assert lines == make_lines(2000)
    rows = p.result("resources/read", {"uri": "abstract://cache/" + tokens["rows"]})["contents"][0]["text"]
    assert json.loads(rows) == make_rows(300)


@pytest.mark.parametrize("uri", ["abstract://cache/" + "A" * 24, "abstract://cache/../x", "abstract://cache/"])
def test_unknown_cache_resource_is_not_found(retr, uri):
    p, _ = retr
    assert p.request("resources/read", {"uri": uri})["error"]["code"] == -32002
    modern = p.request("resources/read", {"uri": uri, "_meta": MODERN_META})
    assert modern["error"]["code"] == -32602


# ==== end to end: expiry and the size cap ============================================


def test_expiry_on_access_and_sweep_at_start_up(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 100, "ttl_seconds": 1}}
    cache_dir = world.tmp / "cache"
    p = world.start()
    first = _token(p.upstream("s", "echo", {"text": "f" * 500}))
    second = _token(p.upstream("s", "echo", {"text": "s" * 500}))
    assert len(_cache_files(cache_dir, first)) == 3 and len(_cache_files(cache_dir, second)) == 3
    expires = json.loads((cache_dir / f"{second}.meta.json").read_text())["expires"]
    wait_for(lambda: time.time() > expires + 0.05, timeout=5, what="the entries to expire")
    res = _get(p, token=first)
    assert res["isError"] is True and f"The cached output {first} expired at" in text_of(res)
    assert _cache_files(cache_dir, first) == []
    assert len(_cache_files(cache_dir, second)) == 3  # nobody asked for it yet
    p.stop()
    world.start()  # the next process sweeps at start-up, before it answers anything
    assert _cache_files(cache_dir, second) == []


def test_size_cap_end_to_end_never_touches_other_files(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 100, "max_total_mb": 0.1}}  # 104,857 bytes
    cache_dir = world.tmp / "cache"
    cache_dir.mkdir()
    (cache_dir / ".abstract-cache").write_text("")  # Abstract's own cache, with a foreign file put in it
    (cache_dir / "foreign.txt").write_text("mine")
    (world.tmp / "sibling.txt").write_text("mine too")
    p = world.start()
    tokens = [_token(p.upstream("s", "echo", {"text": c * 20000})) for c in "abcd"]  # ~40 KB each
    assert _cache_files(cache_dir, tokens[0]) == _cache_files(cache_dir, tokens[1]) == []
    assert "evicted" in text_of(_get(p, token=tokens[0]))
    assert text_of(_get(p, token=tokens[3], length=5)) == "ddddd"
    assert text_of(_get(p, token=tokens[2], length=5)) == "ccccc"
    assert (cache_dir / "foreign.txt").read_text() == "mine" and (world.tmp / "sibling.txt").read_text() == "mine too"


# ==== end to end: the HTTP server ===================================================


def _http(url_or_host, port=None, path=None, method="GET"):
    """(status, headers, body) of one raw request; the path is sent exactly as given."""
    if port is None:
        u = urllib.parse.urlsplit(url_or_host)
        host, port, path = u.hostname, u.port, u.path + ("?" + u.query if u.query else "")
    else:
        host = url_or_host
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.putrequest(method, path, skip_host=False, skip_accept_encoding=True)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def _sign(token: str, expires: int, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), f"{token}:{expires}".encode(), hashlib.sha256).hexdigest()


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """Abstract with --http 127.0.0.1:0 and a known secret; a cached text and a cached JSON result."""
    w = World(tmp_path_factory.mktemp("web"))
    w.fake("s")
    w.settings = {"output_cache": {"min_size": 100}}
    try:
        p = w.start("--http", "127.0.0.1:0", str(w.dir), env=w.env(ABSTRACT_CACHE_SECRET=SECRET))
        text = p.upstream("s", "echo", {"text": "t" * 300})["structuredContent"]
        rows = p.upstream("s", "rows", {"n": 50})["structuredContent"]
        yield p, text, rows
    finally:
        w.cleanup()


def test_http_good_link_serves_the_output_with_its_content_type(web):
    p, text, rows = web
    assert text["retrieve_url"].startswith("http://127.0.0.1:")
    assert "/cache/" + text["token"] + "?expires=" in text["retrieve_url"]
    status, headers, body = _http(text["retrieve_url"])
    assert (status, headers["Content-Type"], body) == (200, "text/plain; charset=utf-8", b"t" * 300)
    assert headers["Cache-Control"] == "private, no-store" and headers["X-Content-Type-Options"] == "nosniff"
    status, headers, body = _http(rows["retrieve_url"])
    assert (status, headers["Content-Type"]) == (200, "application/json; charset=utf-8")
    assert json.loads(body) == make_rows(50)


def test_http_link_is_in_the_cached_answer_text(web):
    p, text, rows = web
    res = p.upstream("s", "echo", {"text": "u" * 300})
    assert f"Download (until it expires): {res['structuredContent']['retrieve_url']}" in text_of(res)


def test_http_bad_and_expired_links(web):
    p, text, rows = web
    u = urllib.parse.urlsplit(text["retrieve_url"])
    host, port, tok = u.hostname, u.port, text["token"]
    q = urllib.parse.parse_qs(u.query)
    e, sig = int(q["expires"][0]), q["sig"][0]
    flipped = ("0" if sig[0] != "0" else "1") + sig[1:]
    for path in [f"/cache/{tok}?expires={e}&sig={flipped}", f"/cache/{tok}?expires={e + 60}&sig={sig}",
                 f"/cache/{tok}?expires={e}", f"/cache/{tok}", f"/cache/{tok}?expires={e}&sig=%C3%A9"]:
        assert _http(host, port, path)[0] == 403, path
    past = int(time.time()) - 10
    assert _http(host, port, f"/cache/{tok}?expires={past}&sig={_sign(tok, past)}")[0] == 410
    assert _http(host, port, f"/cache/{tok}?expires={past}&sig={sig}")[0] == 403  # unsigned expiry: 403 first
    unknown = "Q" * 24
    assert _http(host, port, f"/cache/{unknown}?expires={e}&sig={_sign(unknown, e)}")[0] == 404


@pytest.mark.parametrize("path", ["/", "/cache", "/cache/", "/cache/../x", "/cache/%2e%2e", "/cache/%2e%2e/etc/passwd",
                                  "//cache", "/etc/passwd", "/cache/..%2f..%2fetc%2fpasswd", "/favicon.ico",
                                  "/cache/?expires=1&sig=2", "/cache/TOKEN/../TOKEN?QUERY", "//cache/TOKEN?QUERY",
                                  "/cache/TOKEN.txt?QUERY", "/cache/TOKEN.meta.json?QUERY", "/cache/TOKEN-1.png?QUERY",
                                  "/./cache/TOKEN?QUERY", "/cache/./TOKEN?QUERY", "/cache/TOKEN%20?QUERY"])
def test_http_path_tricks_are_404(web, path):
    p, text, rows = web
    u = urllib.parse.urlsplit(text["retrieve_url"])
    status, _, body = _http(u.hostname, u.port, path.replace("TOKEN", text["token"]).replace("QUERY", u.query))
    assert status == 404 and b"ttt" not in body


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_http_other_methods_are_405(web, method):
    p, text, rows = web
    status, _, body = _http_method(text["retrieve_url"], method)
    assert status == 405 and b"ttt" not in body


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "TRACE"])
def test_http_head_and_options_are_501_as_documented(web, method):
    p, text, rows = web
    status, _, body = _http(text["retrieve_url"], method=method)
    assert status == 501 and b"ttt" not in body


def _http_method(url: str, method: str):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
    try:
        conn.request(method, u.path + "?" + u.query, body=b"x")
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def _listen_addresses(port: int) -> list:
    """Local addresses with a listening TCP socket on `port`, from /proc/net/tcp and tcp6."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:
                found.append(addr)
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs /proc/net/tcp (Linux)")
def test_http_default_host_is_loopback(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 100}}
    p = world.start("--http", "0", str(world.dir))
    url = p.upstream("s", "echo", {"text": "v" * 300})["structuredContent"]["retrieve_url"]
    port = urllib.parse.urlsplit(url).port
    assert url.startswith(f"http://127.0.0.1:{port}/cache/")
    assert _listen_addresses(port) == ["0100007F"]  # 127.0.0.1, little-endian hex; nothing else
    assert _http(url)[0] == 200
    p.wait_stderr("no ABSTRACT_CACHE_SECRET")


def _ipv6_loopback() -> bool:
    import socket
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_http_on_ipv6_loopback(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 100}}
    p = world.start("--http", "[::1]:0", str(world.dir))
    url = p.upstream("s", "echo", {"text": "6" * 300})["structuredContent"]["retrieve_url"]
    assert url.startswith("http://[::1]:")
    assert _http(url)[::2] == (200, b"6" * 300)


def test_http_links_survive_a_restart_only_with_a_fixed_secret(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 100}}
    start = lambda **env: world.start("--http", "127.0.0.1:0", str(world.dir), env=world.env(**env))  # noqa: E731
    p = start(ABSTRACT_CACHE_SECRET=SECRET)
    url = p.upstream("s", "echo", {"text": "w" * 300})["structuredContent"]["retrieve_url"]
    p.stop()
    p = start(ABSTRACT_CACHE_SECRET=SECRET)  # a new port, the same cache dir and secret
    u = urllib.parse.urlsplit(url)
    status, _, body = _http("127.0.0.1", _port_from_stderr(p), u.path + "?" + u.query)
    assert (status, body) == (200, b"w" * 300)
    url2 = p.upstream("s", "echo", {"text": "x" * 300})["structuredContent"]["retrieve_url"]
    p.stop()
    p = start()  # a random secret: the old links die
    port = _port_from_stderr(p)
    for old in (url, url2):
        u = urllib.parse.urlsplit(old)
        assert _http("127.0.0.1", port, u.path + "?" + u.query)[0] == 403


def _port_from_stderr(p) -> int:
    p.wait_stderr("serving cached outputs on http://")
    return int(re.search(r"serving cached outputs on http://[^\s]+:(\d+)/cache/", p.stderr).group(1))


def test_cache_base_url_sets_the_link_base(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 100}, "cache_base_url": "https://tunnel.example/abs/"}
    p = world.start("--http", "127.0.0.1:0", str(world.dir), env=world.env(ABSTRACT_CACHE_SECRET=SECRET))
    info = p.upstream("s", "echo", {"text": "b" * 300})["structuredContent"]
    u = urllib.parse.urlsplit(info["retrieve_url"])
    assert info["retrieve_url"].startswith(f"https://tunnel.example/abs/cache/{info['token']}?expires=")
    q = urllib.parse.parse_qs(u.query)
    assert q["sig"][0] == _sign(info["token"], int(q["expires"][0]))
    # the link's path, as a reverse proxy would forward it, works on the local server
    assert _http("127.0.0.1", _port_from_stderr(p), f"/cache/{info['token']}?{u.query}")[0] == 200


def test_no_links_without_http(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 100}}
    p = world.start()
    res = p.upstream("s", "echo", {"text": "n" * 300})
    assert "retrieve_url" not in res["structuredContent"] and "Download" not in text_of(res)


@pytest.mark.parametrize("value, message", [
    ("127.0.0.1:99999", "--http needs [HOST:]PORT"), ("localhost:", "--http needs [HOST:]PORT"),
    ("127.0.0.1:\u00b2", "--http needs [HOST:]PORT"),  # "²".isdigit() is True, int("²") fails
    ("192.0.2.1:0", "cannot listen"),  # TEST-NET-1: not an address of this machine
])
def test_http_bad_values_exit_2_with_a_message(world, value, message):
    proc = subprocess.run([sys.executable, str(ABSTRACT), "--http", value, str(world.dir)], env=world.env(),
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and message in err and "Traceback" not in err, err


def test_http_needs_the_cache(world):
    world.settings = {"output_cache": {"enabled": False}}
    proc = subprocess.run([sys.executable, str(ABSTRACT), "--http", "0", str(world.dir)], env=world.env(),
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert proc.returncode == 2 and "output_cache.enabled is false" in proc.stderr.decode()


@pytest.mark.parametrize("value, want", [("8765", ("127.0.0.1", 8765)), (":0", ("127.0.0.1", 0)),
                                         ("0.0.0.0:80", ("0.0.0.0", 80)), ("[::1]:9", ("::1", 9)),
                                         ("localhost:1", ("localhost", 1))])
def test_parse_hostport(value, want):
    assert abstract._parse_hostport(value) == want
