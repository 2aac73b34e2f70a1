"""Integrity (issue 12): every byte of a cached text comes back through every path, and a
catalog damaged where opening it does not look is noticed, moved aside, and replaced."""

from __future__ import annotations

import json
import sqlite3
import struct
import urllib.request
from pathlib import Path

import pytest

import abstract
from conftest import text_of

# \r\n and lone \r must come back as they were sent; so must "é", a tab and a final \r
ORIGINAL = "a\r\nb\rc\n" * 40 + "tab\there é\r"


def test_cached_text_comes_back_byte_for_byte_through_every_path(world):
    world.fake("s")
    world.settings = {"output_cache": {"min_size": 100}}
    p = world.start("--http", "127.0.0.1:0", str(world.dir))
    info = p.upstream("s", "echo", {"text": ORIGINAL})["structuredContent"]
    assert info["cached"] is True and info["total_chars"] == len(ORIGINAL)
    token = info["token"]

    whole = p.call_tool("retrieve_cached_output", {"token": token})
    assert text_of(whole) == ORIGINAL and whole["structuredContent"]["total_chars"] == len(ORIGINAL)
    part = p.call_tool("retrieve_cached_output", {"token": token, "offset": 1, "length": 3})
    assert text_of(part) == "\r\nb"
    lines = p.call_tool("retrieve_cached_output", {"token": token, "start_line": 2, "end_line": 2})
    assert text_of(lines) == "b\rc\n"  # a lone \r does not end a line
    assert lines["structuredContent"]["total_lines"] == 81

    with urllib.request.urlopen(info["retrieve_url"], timeout=10) as resp:
        assert resp.read() == ORIGINAL.encode("utf-8")
    read = p.result("resources/read", {"uri": "abstract://cache/" + token})
    assert read["contents"][0]["text"] == ORIGINAL

    stored = p.call_tool("call_tool_and_store", {"cache_token": token, "file_format": "txt", "filename": "kept"})
    assert not stored.get("isError"), text_of(stored)
    assert (world.dir / "kept.txt").read_bytes() == ORIGINAL.encode("utf-8")


# -- a catalog damaged inside a table

def _damaged_catalog(path: Path, header: bool = False) -> None:
    """A catalog of 200 outputs whose last leaf page of the outputs table has bad cell pointers
    (or, with `header`, a bad page type, which also stops an insert): opening it and reading its
    schema work; PRAGMA quick_check and a full scan do not."""
    cat = abstract._Catalog(str(path))
    cat.record_many([{"kind": "stored", "server": "s", "tool": "t", "path": f"/x/{i}",
                      "text": f"guava {i} " + "x" * 300} for i in range(200)])
    root = cat._rows("SELECT rootpage FROM sqlite_master WHERE name = 'outputs'")[0]["rootpage"]
    size = cat._rows("PRAGMA page_size")[0]["page_size"]
    cat._rows("PRAGMA wal_checkpoint(TRUNCATE)")
    cat.close()
    data = bytearray(path.read_bytes())
    at = (root - 1) * size
    assert data[at] == 5, "the outputs table should span more than one page"
    leaf = (struct.unpack(">I", data[at + 8:at + 12])[0] - 1) * size  # its right-most child
    cells = struct.unpack(">H", data[leaf + 3:leaf + 5])[0]
    data[leaf + 8:leaf + 8 + 2 * cells] = b"\xff\xf0" * cells
    if header:
        data[leaf] = 1  # no such page type
    path.write_bytes(bytes(data))
    assert sqlite3.connect(str(path)).execute("PRAGMA user_version").fetchone()[0] >= 1  # opens fine


def test_a_catalog_damaged_inside_a_table_is_moved_aside_at_start_up(world):
    world.fake("up")
    db = world.tmp / "catalog.sqlite3"
    _damaged_catalog(db)
    damaged = db.read_bytes()
    p = world.start()
    p.wait_stderr("is corrupt")
    kept = [f for f in world.tmp.iterdir() if f.name.startswith("catalog.sqlite3.corrupt-")
            and not f.name.endswith("-wal")]
    assert len(kept) == 1 and kept[0].read_bytes() == damaged
    listed = p.call_tool("list_stored_outputs", {})
    assert not listed.get("isError"), text_of(listed)
    found = p.call_tool("search_stored_outputs", {"query": "guava"})
    assert not found.get("isError") and found["structuredContent"]["results"] == []


def test_damage_found_by_a_query_moves_the_catalog_aside_and_serving_goes_on(tmp_path):
    db = tmp_path / "catalog.sqlite3"
    _damaged_catalog(db)
    cat = abstract._Catalog(str(db), check_s=0)  # the start-up check skipped: the query finds it
    try:
        with pytest.raises(sqlite3.DatabaseError, match="malformed"):
            cat.known()
        assert cat.moved_aside and Path(cat.moved_aside).exists()
        assert cat.known() == (set(), set())  # the fresh one
        cat.record_many([{"kind": "stored", "server": "s", "tool": "t", "text": "kiwi"}])
        assert [r["tool"] for r in cat.recent()[0]] == ["t"]
    finally:
        cat.close()


def test_a_record_that_meets_the_damage_lands_in_the_fresh_catalog(tmp_path):
    db = tmp_path / "catalog.sqlite3"
    _damaged_catalog(db, header=True)
    cat = abstract._Catalog(str(db), check_s=0)
    try:
        cat.record_many([{"kind": "stored", "server": "s", "tool": "t", "text": "fig", "path": "/y/fig"}])
        assert cat.moved_aside, "the damage was never met"
        assert cat.count() == 1 and cat.known()[0] == {"/y/fig"}
    finally:
        cat.close()


def test_the_start_up_check_is_bounded_in_time(tmp_path):
    db = tmp_path / "catalog.sqlite3"
    cat = abstract._Catalog(str(db))
    cat.record_many([{"kind": "stored", "text": json.dumps(list(range(i, i + 50)))} for i in range(2000)])
    cat.close()
    cat = abstract._Catalog(str(db), check_s=1e-9)  # no time at all: checked in part, not failed
    try:
        assert not cat.moved_aside and cat.count() == 2000
    finally:
        cat.close()
