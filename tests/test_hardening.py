"""Defects an adversarial review found, each pinned: the output cache deletes only in a directory
of its own and only its own names; a write that fails is an answer, not an internal error; deep
XML, huge numbers and odd dates are the model's errors; resources/read and resources/list keep
their limits; call_tool says what happens to a large result.

In-process where a unit shows it plainly, else through a real `python abstract.py` (conftest.World).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

import abstract
from conftest import ABSTRACT, files_under, text_of

TOKEN_RE = re.compile(r"Token: ([A-Za-z0-9_-]{24}) ")
HOUR = 3600


def _settings(**conf) -> abstract._Settings:
    return abstract._Settings({"output_cache": conf})


def _age(path: Path, seconds: float = 2 * HOUR) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old), follow_symlinks=False)


# ==== 1. the cache directory is Abstract's own ======================================


def test_a_non_empty_directory_without_the_marker_is_refused_and_left_alone(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("quarterly_report_2024.pdf", "A" * 24 + ".json", "notes.txt"):
        (docs / name).write_text("precious")
        _age(docs / name)
    before = files_under(docs)
    with pytest.raises(abstract.ConfigError, match=r"not Abstract's \(notes.txt, quarterly_report_2024.pdf\)"):
        abstract._OutputCache(str(docs), _settings())
    assert files_under(docs) == before and not (docs / ".abstract-cache").exists()


def test_a_new_or_empty_directory_gets_the_marker_and_owner_only_mode(tmp_path):
    (tmp_path / "empty").mkdir()
    for d in (tmp_path / "new" / "cache", tmp_path / "empty"):
        abstract._OutputCache(str(d), _settings())
        assert (d / ".abstract-cache").is_file()
        if os.name == "posix":
            assert d.stat().st_mode & 0o777 == 0o700


def test_a_marked_cache_deletes_only_names_of_its_own_forms(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    (d / ".abstract-cache").write_text("")
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    keep = ["quarterly_report_2024.pdf", "A" * 24 + "-x.png", "A" * 24 + ".json.bak", "A" * 23 + ".json",
            ".abstract-notes.txt", "B" * 24 + ".txt"]  # the last: a symlink to a file outside
    gone = ["C" * 24 + ".json", "C" * 24 + "-1.png", "C" * 24 + ".meta.json", ".abstract-k2j3h4.tmp"]
    for name in keep[:-1] + gone:
        (d / name).write_text("x")
    (d / keep[-1]).symlink_to(outside)
    (d / ("D" * 24 + ".json")).mkdir()  # a folder of a token's name: never deleted either
    for p in [outside, *d.iterdir()]:
        _age(p)
    abstract._OutputCache(str(d), _settings())
    assert all(os.path.lexists(d / n) for n in keep) and not any(os.path.lexists(d / n) for n in gone)
    assert outside.read_text() == "precious" and (d / ("D" * 24 + ".json")).is_dir()


def test_a_symlink_or_a_file_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "file").write_text("x")
    with pytest.raises(abstract.ConfigError, match="symbolic link"):
        abstract._OutputCache(str(tmp_path / "link"), _settings())
    with pytest.raises(abstract.ConfigError, match="not a directory"):
        abstract._OutputCache(str(tmp_path / "file"), _settings())
    assert os.listdir(real) == []


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to give a folder away")
def test_another_users_directory_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir()
    os.chown(d, 12345, 12345)
    with pytest.raises(abstract.ConfigError, match=r"belongs to another user \(uid 12345\)"):
        abstract._OutputCache(str(d), _settings())
    assert os.listdir(d) == []


@pytest.mark.parametrize("where", ["equal", "inside", "contains"])
def test_the_cache_lies_apart_from_the_allowed_directories(tmp_path, where):
    root = tmp_path / "store" / "root"
    root.mkdir(parents=True)
    cache = {"equal": root, "inside": root / "cache", "contains": tmp_path / "store"}[where]
    settings = abstract._Settings({"output_cache": {"dir": str(cache)}})
    with pytest.raises(abstract.ConfigError, match=f"cannot use the output cache directory {re.escape(str(cache))}: "
                                                   f"it is, holds or lies inside the allowed directory"):
        abstract._open_cache(settings, {"USER": "tester"}, [str(root)])
    assert not (root / "cache").exists() and not (cache / ".abstract-cache").exists()


def test_an_unusable_default_location_turns_the_cache_off(tmp_path, monkeypatch):
    import logging
    import tempfile

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "abstract-cache-tester").symlink_to(tmp_path / "elsewhere")  # planted by someone else
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("abstract").addHandler(handler)  # its own: main() may have stopped propagation
    try:
        assert abstract._open_cache(abstract._Settings({}), {"USER": "tester"}) is None
    finally:
        logging.getLogger("abstract").removeHandler(handler)
    assert any("it is a symbolic link; the output cache is off" in m for m in seen), seen
    assert os.listdir(tmp_path / "elsewhere") == []


def test_a_configured_directory_that_is_not_the_caches_stops_start_up(world, tmp_path):
    world.fake("up")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "quarterly_report_2024.pdf").write_bytes(b"%PDF-1.4 precious")
    _age(docs / "quarterly_report_2024.pdf")
    world.settings = {"output_cache": {"dir": str(docs)}}
    proc = subprocess.run([sys.executable, str(ABSTRACT), str(world.dir)], env=world.env(), stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=30)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert f"abstract: cannot use the output cache directory {docs}: it already holds files that are not " \
           f"Abstract's (quarterly_report_2024.pdf) and no .abstract-cache marker. Set output_cache.dir" in err
    assert (docs / "quarterly_report_2024.pdf").read_bytes() == b"%PDF-1.4 precious"


def test_an_unusable_default_directory_leaves_abstract_serving_without_a_cache(world, tmp_path):
    world.fake("up")
    temp, elsewhere = tmp_path / "temp", tmp_path / "elsewhere"
    temp.mkdir()
    elsewhere.mkdir()
    (temp / "abstract-cache-tester").symlink_to(elsewhere)
    env = world.env(TMPDIR=str(temp), USER="tester")
    Path(env["ABSTRACT_CONFIG"]).write_text(json.dumps({"output_cache": {"min_size": 100},
                                                        "catalog": {"path": str(tmp_path / "catalog.sqlite3")}}))
    p = world.start(env=env)
    p.wait_stderr("the output cache is off")
    assert text_of(p.upstream("up", "echo", {"text": "x" * 1000})) == "x" * 1000  # whole, not cached
    assert os.listdir(elsewhere) == []


# ==== 9. a failed write is an answer ================================================


@pytest.fixture
def cached_world(world):
    world.fake("up")
    world.settings = {"output_cache": {"min_size": 100}}
    world.proxy = world.start()
    return world


def test_a_cache_directory_removed_while_running_is_made_again(cached_world):
    cache_dir = cached_world.tmp / "cache"
    shutil.rmtree(cache_dir)
    res = cached_world.proxy.upstream("up", "echo", {"text": "y" * 1000})
    token = TOKEN_RE.search(text_of(res)).group(1)
    assert (cache_dir / ".abstract-cache").is_file() and (cache_dir / f"{token}.txt").read_text() == "y" * 1000


def test_a_result_the_cache_cannot_take_is_an_error_result(cached_world):
    cache_dir = cached_world.tmp / "cache"
    shutil.rmtree(cache_dir)
    cache_dir.write_text("a file where the cache was")
    res = cached_world.proxy.upstream("up", "echo", {"text": "y" * 1000})
    assert res.get("isError") is True
    assert text_of(res) == (f"The result of up.echo is large (1,000 characters), too large to show here, and it could "
                            f"not be cached: the cache directory {cache_dir} cannot be used (it is not a directory). "
                            f"Call it with call_tool_and_store instead, to save the result to a file.")


def test_an_unexpected_file_error_is_an_error_result_naming_the_file(cached_world):
    p = cached_world.proxy
    token = TOKEN_RE.search(text_of(p.upstream("up", "echo", {"text": "y" * 1000}))).group(1)
    view = cached_world.tmp / "cache" / f"{token}.txt"
    view.unlink()
    view.mkdir()  # open() now fails with EISDIR, which no handler expects
    res = p.call_tool("retrieve_cached_output", {"token": token})
    assert res.get("isError") is True and text_of(res) == f"retrieve_cached_output failed: Is a directory ({view})."


def test_full_disk_writes_are_error_results_naming_the_folder(world):
    resource = pytest.importorskip("resource")
    if not hasattr(resource, "prlimit"):
        pytest.skip("needs resource.prlimit (Linux)")
    world.fake("up")
    world.settings = {"output_cache": {"min_size": 100}, "catalog": {"enabled": False}}
    p = world.start()
    assert text_of(p.upstream("up", "echo", {"text": "started"})) == "started"  # before the limit: it inherits it
    resource.prlimit(p.pid, resource.RLIMIT_FSIZE, (20000, 20000))  # writes past 20 kB fail: EFBIG, like ENOSPC
    res = p.upstream("up", "echo", {"text": "z" * 50000})
    assert res.get("isError") is True and "is large (50,000 characters)" in text_of(res)
    assert f"could not be cached: writing in {world.tmp / 'cache'} failed (File too large)" in text_of(res)
    assert os.listdir(world.tmp / "cache") == [".abstract-cache"]  # nothing half-written is left
    res = p.call_tool("call_tool_and_store", {"server": "up", "tool_name": "echo", "tool_args": {"text": "z" * 50000},
                                              "file_format": "txt"})
    assert res.get("isError") is True
    assert text_of(res).startswith(f"Could not write a file in {world.dir}: File too large. Free some space")
    assert files_under(world.dir) == {}


# ==== 11, 12, 17. the model's errors, not internal ones =============================


def test_deeply_nested_xml_input_is_an_error_result(world):
    world.fake("up")
    p = world.start()
    (world.dir / "deep.xml").write_text("<a>" * 100000 + "</a>" * 100000)
    res = p.call_tool("call_tool_with_file_content", {"server": "up", "tool_name": "echo_args",
                                                      "file_path": "deep.xml", "data_key": "d"})
    assert res.get("isError") is True and "could not be read as XML: XML nested too deeply" in text_of(res)


def _cursor(when: str, n: int) -> str:
    return base64.urlsafe_b64encode(json.dumps([when, n]).encode()).decode().rstrip("=")


def test_huge_numbers_in_the_catalog_tools_are_clear_errors(world):
    world.fake("up")
    p = world.start()
    cases = [
        ("search_stored_outputs", {"query": "x", "offset": 10**30}, "Argument 'offset' must be an integer from 0 "
                                                                    "to 1,000,000,000; it is larger."),
        ("search_stored_outputs", {"query": "x", "limit": 1e300}, "Argument 'limit' must be an integer from 1"),
        ("list_stored_outputs", {"cursor": _cursor("2025-01-01T00:00:00.000Z", 10**30)}, "Invalid cursor"),
        ("list_stored_outputs", {"retention_days": 1e300}, "must be a number of days > 0 and <= 36500"),
        ("list_stored_outputs", {"retention_days": 10**30}, "must be a number of days > 0 and <= 36500"),
    ]
    for tool, args, message in cases:
        res = p.call_tool(tool, args)
        assert res.get("isError") is True and message in text_of(res), (tool, args, res)
    assert p.call_tool("list_stored_outputs", {"retention_days": 36500})["structuredContent"]["retention"]["files"] == 0


@pytest.mark.parametrize("value, want", [
    ("20250131T090000Z", "2025-01-31T09:00:00.000Z"),  # basic format: fromisoformat reads it on 3.11+ only
    ("20250131", "2025-01-31T00:00:00.000Z"),
    ("2025-01-31T09:00:00+0100", "2025-01-31T08:00:00.000Z"),
    ("2025-01-31T09:00:00-01:30", "2025-01-31T10:30:00.000Z"),
    ("2025-01-31T09:00:00.123456789Z", "2025-01-31T09:00:00.123Z"),  # 3.9 takes 3 or 6 digits only
    ("2025-01-31T09:00:00,5z", "2025-01-31T09:00:00.500Z"),
    ("2025-01-31 09:00", "2025-01-31T09:00:00.000Z"),
])
def test_parse_when_reads_iso_8601_the_same_on_every_python(value, want):
    assert abstract._parse_when(value, "since") == want


def test_parse_when_says_when_a_date_is_out_of_range():
    assert abstract._parse_when("9999-12-31", "until", end=True) == "9999-12-31T23:59:59.999Z"
    for bad, why in [("2025-02-30", "day is out of range for month"), ("0001-01-01T00:00+01:00", "out of range"),
                     ("2025-01-31T09:00+24:00", r"UTC offset \+24:00")]:
        with pytest.raises(abstract._ToolError, match=f"is an ISO 8601 date or time, but out of range: .*{why}"):
            abstract._parse_when(bad, "since")
    for bad in ("2025-01-31Z", "31.01.2025", "2025-1-31"):
        with pytest.raises(abstract._ToolError, match="is not an ISO 8601 date or time"):
            abstract._parse_when(bad, "since")


# ==== 13. line windows without a list of lines ======================================


def test_a_line_window_far_into_a_large_text_makes_no_list_of_its_lines():
    text = "".join(f"row {i}\n" for i in range(300_000))
    call = abstract._Call(None, None, {"start_line": 299_990})
    tracemalloc.start()
    try:
        chunk, where = abstract._window(text, call, 1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert chunk == "".join(f"row {i}\n" for i in range(299_989, 300_000))
    assert where == {"start_line": 299_990, "end_line": 300_000, "total_lines": 300_000, "next_line": None}
    assert peak < 200_000, peak  # splitlines() alone would take about 20 MB here


# ==== 15, 16. resources/read and resources/list =====================================


def test_resources_read_serves_escape_heavy_text_as_a_blob(world):
    world.fake("up")
    world.dir.mkdir()
    data = b"\x01" * (2 * 1024 * 1024)  # valid UTF-8, but 6 bytes each as JSON text: a 12 MiB line
    path = world.dir / "control.txt"
    path.write_bytes(data)
    p = world.start()
    item = p.result("resources/read", {"uri": path.as_uri()})["contents"][0]
    assert "text" not in item and base64.b64decode(item["blob"]) == data and item["mimeType"] == "text/plain"


def test_text_items_fall_back_to_a_blob_then_to_none():
    assert abstract._text_item({"uri": "u"}, "plain") == {"uri": "u", "text": "plain"}
    blob = abstract._text_item({"uri": "u"}, "\x01" * 2_000_000)
    assert "text" not in blob and base64.b64decode(blob["blob"]) == b"\x01" * 2_000_000
    assert abstract._text_item({"uri": "u"}, "\u00e9" * 5_000_000) is None  # 10 MB of UTF-8, 13 MB as base64


def test_resources_list_leaves_out_symlinks_that_lead_outside(world, tmp_path):
    world.fake("up")
    world.dir.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("s" * 12345)
    (world.dir / "real.txt").write_text("r")
    (world.dir / "out_link.txt").symlink_to(secret)
    (world.dir / "in_link.txt").symlink_to(world.dir / "real.txt")
    p = world.start()
    names = {r["name"] for r in p.result("resources/list")["resources"]}
    assert "out_link.txt" not in names and {"real.txt", "in_link.txt"} <= names


# ==== 18. call_tool's description ===================================================


def test_call_tool_says_large_results_come_back_as_a_preview_and_a_token():
    description = next(t[1] for t in abstract._TOOLS if t[0] == "call_tool")
    assert "unchanged" not in description
    assert "preview and a token" in description and "retrieve_cached_output" in description
