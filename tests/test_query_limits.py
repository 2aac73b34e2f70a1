"""query_output's bounds (issue 24): every query runs in a worker process that Abstract kills
at the time limit or a cancel, whose memory is bounded apart from Abstract's; the answer's
structuredContent is bounded like its text; only an allow-list of SQL functions may be called;
hostile keys give clear answers, never -32603.

All through the wire: `python abstract.py DIR` with file sources written here (the worker is a
child of Abstract: `python -I -S -c <_QUERY_WORKER>`).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest

import abstract
from conftest import Proxy, World, proc_status, text_of, wait_for

WORKER_MARK = b"import json, os, sqlite3, sys, time"
# one slow C function: about 50 s of a core on the machine; no progress handler runs
# inside it, so only a process kill stops it
SLOW_INSTR = ("SELECT instr(printf('%.*c', 2400000, 'a'), printf('%.*c', 1200000, 'a') || 'b') "
              "FROM data")


def start(world: World, **query: object) -> Proxy:
    world.fake("up")
    world.dir.mkdir(exist_ok=True)
    world.settings = {"output_cache": {"min_size": 1000}, "query": query}
    return world.start()


def write_records(world: World, name: str, rows: list) -> str:
    path = world.dir / name
    path.write_text(json.dumps(rows))
    return str(path)


def query(px: Proxy, timeout: float = 120, **args) -> dict:
    return px.call_tool("query_output", args, timeout=timeout)


def workers(pid: int) -> List[Tuple[int, str]]:
    """(pid, state letter) of Abstract's query workers (a warm or spare one waits: S)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and WORKER_MARK in cmdline:
            found.append((int(stat.parent.name), fields[0]))
    return found


def none_running(pid: int) -> bool:
    return all(state in "SZ" for _, state in workers(pid))  # waiting (warm, spare) or gone


def something_runs(pid: int) -> bool:
    """A worker of Abstract's, or a thread of Abstract itself, is on a CPU (a query running)."""
    threads = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(OSError):
            threads.append(stat.read_text().rsplit(")", 1)[1].split()[0])
    return "R" in threads or not none_running(pid)


LINUX_PROC = pytest.mark.skipif(not Path("/proc/self/status").exists(),
                                reason="reads Abstract's and its workers' state in /proc (Linux)")


# ==== 1. memory ======================================================================


@LINUX_PROC
def test_a_huge_value_in_every_row_leaves_abstracts_memory_flat(world):
    """Before: SELECT zeroblob(16000000) with limit 1 over 100 records took Abstract to 1.6 GB
    (every row fetched into Abstract, 1,000 at a time); a recursive CTE over one record,
    2.6 GB."""
    px = start(world, timeout_seconds=20)
    src = write_records(world, "h100.json", [{"id": i} for i in range(100)])
    one = write_records(world, "one.json", [{"id": 1}])
    before = proc_status(px.pid, "VmHWM")
    res = query(px, source=src, sql="SELECT printf('%.*c', 16000000, 'a') AS b FROM data", limit=1)
    assert not res.get("isError"), text_of(res)
    assert res["structuredContent"]["row_count"] == 100
    assert len(json.dumps(res)) < 100_000  # 16 MB of one cell never comes back whole
    cte = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 1000) "
           "SELECT printf('%.*c', 16000000, 'a') FROM c, data")
    res = query(px, source=one, sql=cte, limit=1)
    text = text_of(res)
    assert not res.get("isError") or "query.timeout_seconds" in text, text
    after = proc_status(px.pid, "VmHWM")
    print(f"Abstract's VmHWM: {before / 1024:.0f} MB before, {after / 1024:.0f} MB after")
    assert after < 600 * 1024, f"Abstract's peak RSS reached {after / 1024:.0f} MB"


def test_a_query_needing_more_than_the_worker_memory_is_stopped_and_names_the_setting(world):
    px = start(world, worker_memory_mb=64, timeout_seconds=30)
    src = write_records(world, "one.json", [{"id": 1}])
    # a row of 120 MB: SQLite's heap limit (and the worker's address space) stops it
    sql = "SELECT " + ", ".join(f"printf('%.*c', 15000000, 'a') AS c{i}" for i in range(8))
    res = query(px, source=src, sql=sql)
    assert res.get("isError"), text_of(res)[:300]
    assert "more than 64 MB of memory" in text_of(res), text_of(res)
    assert "(query.worker_memory_mb in Abstract's settings)" in text_of(res)
    again = query(px, source=src, sql="SELECT count(*) AS n FROM data")
    assert again["structuredContent"]["rows"] == [{"n": 1}]


# ==== 2. time, cancel, no blocking ======================================================


@LINUX_PROC
def test_one_slow_function_is_stopped_at_the_time_limit_and_burns_no_more_cpu(world):
    """Before: timeout_seconds 5 answered after 53 s, the CPU burning all along."""
    px = start(world, timeout_seconds=2)
    src = write_records(world, "one.json", [{"id": 1}])
    t0 = time.monotonic()
    res = query(px, source=src, sql=SLOW_INSTR, timeout=120)
    took = time.monotonic() - t0
    print(f"the slow instr() answered after {took:.2f} s (time limit 2 s)")
    assert res.get("isError") and "longer than 2 s" in text_of(res), text_of(res)
    assert "query.timeout_seconds" in text_of(res)
    assert took < 2 + 2.5, took  # the limit plus 1 s, and slack for a loaded machine
    wait_for(lambda: none_running(px.pid), 1.0, "the worker gone")


@LINUX_PROC
def test_a_runaway_query_blocks_no_other_and_a_cancel_stops_it(world):
    """Before: a second query on the same source waited behind the runaway one (the table's
    lock), and after notifications/cancelled the CPU kept burning."""
    px = start(world, timeout_seconds=60)
    src = write_records(world, "rows.json", [{"id": i, "n": i * 2} for i in range(1000)])
    assert query(px, source=src, sql="SELECT count(*) AS n FROM data")["structuredContent"][
        "rows"] == [{"n": 1000}]  # loaded
    slow = px.send_request("tools/call", {"name": "query_output",
                                          "arguments": {"source": src, "sql": SLOW_INSTR}})
    wait_for(lambda: something_runs(px.pid), 10.0, "the runaway running")
    t0 = time.monotonic()
    res = query(px, source=src, sql="SELECT sum(n) AS s FROM data", timeout=30)
    took = time.monotonic() - t0
    print(f"a normal query beside the runaway answered in {took:.2f} s")
    assert res["structuredContent"]["rows"] == [{"s": sum(i * 2 for i in range(1000))}]
    assert took < 5 and not px.has_response(slow)
    t0 = time.monotonic()
    px.notify("notifications/cancelled", {"requestId": slow, "reason": "test"})
    wait_for(lambda: none_running(px.pid), 5.0, "the cancelled worker gone")
    print(f"the cancelled query's worker ended {time.monotonic() - t0:.2f} s after the cancel")
    assert time.monotonic() - t0 < 2.0
    assert not px.has_response(slow)  # a cancelled request gets no response


# ==== 6. the structured part is bounded too ================================================


@pytest.mark.parametrize("expr, kind", [("printf('%.*c', 1000000, 'a')", "text"),
                                        ("CAST(printf('%.*c', 1000000, 'a') AS BLOB)", "blob")])
def test_the_structured_part_is_bounded_like_the_text_and_cut_cells_are_marked(world, expr,
                                                                               kind):
    """Before: 50 rows of a 1 MB text gave a 10.6 KB text part but a 50 MB answer (a blob:
    100 MB of hex)."""
    px = start(world)
    src = write_records(world, "rows.json", [{"id": i} for i in range(50)])
    res = query(px, source=src, sql=f"SELECT id, {expr} AS big FROM data")
    info = res["structuredContent"]
    size = len(json.dumps(res, ensure_ascii=False))
    print(f"{kind}: answer {size:,} characters, text {len(text_of(res)):,}")
    assert size < 2 * 20000 + 2000  # the text and the structured part, each within the window
    assert info["row_count"] == 50 and info["rows"]
    for row in info["rows"]:
        whole = "61" * 1000000 if kind == "blob" else "a" * 1000000
        assert row["big"].endswith("…") and whole.startswith(row["big"][:-1])
    cut = info["cut"]
    assert info["cut_count"] >= len(cut) >= 1
    assert cut[0] == {"row": 0, "column": "big", "chars": 1000000 * (2 if kind == "blob" else 1)}


def test_a_long_column_name_is_cut_too(world):
    px = start(world)
    src = write_records(world, "rows.json", [{"id": i} for i in range(50)])
    res = query(px, source=src, sql="SELECT id AS \"" + "n" * 100000 + "\" FROM data")
    assert len(json.dumps(res)) < 2 * 20000 + 2000 and res["structuredContent"]["rows"]
    assert res["structuredContent"]["columns"] == ["n" * 200]


def test_small_values_come_back_whole(world):
    px = start(world)
    rows = [{"id": i, "name": f"n{i}", "note": "x" * 300} for i in range(20)]
    src = write_records(world, "rows.json", rows)
    info = query(px, source=src, sql="SELECT * FROM data")["structuredContent"]
    assert info["rows"] == rows and "cut" not in info


# ==== 7. functions: an allow-list =========================================================


@pytest.mark.parametrize("sql, name", [
    ("SELECT fts3_tokenizer('simple')", "fts3_tokenizer"),
    ("SELECT fts3_tokenizer('mine', x'0000000000000000')", "fts3_tokenizer"),
    ("SELECT zeroblob(10)", "zeroblob"),
    ("SELECT sqlite_version()", "sqlite_version"),
    ("SELECT load_extension('x')", "load_extension"),
])
def test_functions_outside_the_allow_list_are_refused_by_name(world, sql, name):
    """Before: fts3_tokenizer('simple') returned SQLite's tokenizer address."""
    px = start(world)
    src = write_records(world, "rows.json", [{"id": 1}])
    res = query(px, source=src, sql=sql)
    assert res.get("isError"), text_of(res)
    assert text_of(res).startswith(f"Refused: the function {name}()"), text_of(res)


def test_the_functions_analysts_use_are_allowed(world):
    px = start(world)
    rows = [{"id": i, "doc": {"a": i}, "at": f"2024-01-0{i + 1}", "x": i * 1.5} for i in range(3)]
    src = write_records(world, "rows.json", rows)
    sql = ("SELECT count(*) AS n, sum(x) AS s, round(avg(x), 2) AS a, group_concat(id) AS g, "
           "max(json_extract(doc, '$.a')) AS j, max(doc ->> '$.a') AS k, min(date(at, '+1 day')) "
           "AS d, upper(substr('abc', 2)) AS u, sqrt(16) AS q, coalesce(NULL, 'z') AS c, "
           "max(length(printf('%05d', id))) AS p, count(DISTINCT lower('A')) AS l FROM data")
    res = query(px, source=src, sql=sql)
    assert res["structuredContent"]["rows"] == [
        {"n": 3, "s": 4.5, "a": 1.5, "g": "0,1,2", "j": 2, "k": 2, "d": "2024-01-02", "u": "BC",
         "q": 4.0, "c": "z", "p": 5, "l": 1}], text_of(res)
    win = query(px, source=src, sql="SELECT id, row_number() OVER (ORDER BY x DESC) AS r, "
                                    "lag(id) OVER (ORDER BY id) AS p FROM data ORDER BY id")
    assert win["structuredContent"]["rows"] == [
        {"id": 0, "r": 3, "p": None}, {"id": 1, "r": 2, "p": 0}, {"id": 2, "r": 1, "p": 1}]


# ==== 9. hostile keys ==================================================================


def test_keys_sqlite_cannot_name_become_columns_with_a_note(world):
    """Before: a NUL key gave -32603 (ProgrammingError), a lone surrogate one too
    (UnicodeEncodeError)."""
    px = start(world)
    path = world.dir / "keys.json"
    path.write_text('[{"a\\u0000b": 1, "\\ud800": 2, "ok": 3}]')  # JSON escapes, as sent
    res = query(px, source=str(path), sql="SELECT * FROM data")
    assert not res.get("isError"), text_of(res)
    assert res["structuredContent"]["rows"] == [{"a\ufffdb": 1, "\ufffd": 2, "ok": 3}]
    assert "Note: key 'a\\x00b' is column a\ufffdb." in text_of(res)


def test_records_with_more_keys_than_sqlite_has_columns_get_a_clear_error(world):
    """Before: OperationalError: too many columns, -32603 to the client."""
    px = start(world)
    rows = [{f"k{i}": i for i in range(1500)}, {f"j{i}": i for i in range(1500)}]
    src = write_records(world, "wide.json", rows)
    res = query(px, source=src, sql="SELECT count(*) FROM data")
    assert res.get("isError"), text_of(res)
    assert "more than 2,000 distinct keys" in text_of(res) and "records_pointer" in text_of(res)


def test_hostile_sql_text_gets_a_tool_error(world):
    px = start(world)
    src = write_records(world, "rows.json", [{"id": 1}])
    for sql in ('SELECT 1 AS "a\0b"', "SELECT char(55296)"):
        res = query(px, source=src, sql=sql)
        assert res.get("isError") and text_of(res).startswith("The query failed (SQLite: "), sql
    res = query(px, source=src, sql="SELECT '\ud800'")  # refused as an argument, before SQLite
    assert res.get("isError") and text_of(res).startswith(
        "Argument 'sql' is not valid Unicode (it holds a lone surrogate"), text_of(res)


# ==== the worker process on each platform =================================================


def test_the_worker_starts_as_each_platform_wants(monkeypatch):
    """Windows: no console window flashing up; POSIX: a session of its own (recorded, not run)."""
    seen = []
    monkeypatch.setattr(abstract.subprocess, "Popen", lambda argv, **kw: seen.append((argv, kw)))
    for windows in (True, False):
        monkeypatch.setattr(abstract, "_WINDOWS", windows)
        abstract._start_worker()
    (argv, win), (_, posix) = seen
    assert argv == [sys.executable, "-I", "-S", "-c", abstract._QUERY_WORKER]
    assert win["creationflags"] == getattr(subprocess, "CREATE_NO_WINDOW", 0)
    assert "start_new_session" not in win and posix["start_new_session"]
    assert "creationflags" not in posix


@pytest.mark.skipif(sys.platform != "win32", reason="Windows only: TerminateProcess ends the "
                                                     "worker and no RLIMIT applies there")
def test_on_windows_the_time_and_heap_limits_hold(world):
    px = start(world, timeout_seconds=2, worker_memory_mb=64)
    src = write_records(world, "one.json", [{"id": 1}])
    t0 = time.monotonic()
    assert "longer than 2 s" in text_of(query(px, source=src, sql=SLOW_INSTR))
    assert time.monotonic() - t0 < 4.5
    sql = "SELECT " + ", ".join(f"printf('%.*c', 15000000, 'a') AS c{i}" for i in range(8))
    assert "more than 64 MB of memory" in text_of(query(px, source=src, sql=sql))


def test_at_most_so_many_workers_run_at_once_and_the_next_query_is_refused(monkeypatch):
    class Running:
        def poll(self):
            return None

    monkeypatch.setattr(abstract, "_start_worker", Running)
    monkeypatch.setattr(abstract, "_QUERY_WORKERS_MAX", 2)
    tables = abstract._Tables()
    tables.worker("a"), tables.worker("b")
    with pytest.raises(abstract._ToolError, match=r"^2 queries are running already, the most at"):
        tables.worker("a")
    Running.poll = lambda self: 0  # they ended: room again
    assert isinstance(tables.worker("a"), Running)


def test_a_worker_that_answered_stays_warm_for_its_table_and_one_that_failed_does_not(tmp_path):
    t = abstract._load_table([{"id": 1}], folder=str(tmp_path))
    tables = abstract._Tables()
    tables.put("k", t, 1 << 30)
    try:
        assert abstract._run_query(t, "SELECT 1", 5, 5.0, 20000, 256, None, tables).rows == [(1,)]
        [(path, first)] = tables._idle
        assert path == t.path and first.poll() is None
        assert abstract._run_query(t, "SELECT 2", 5, 5.0, 20000, 256, None, tables).rows == [(2,)]
        assert tables._idle == [(t.path, first)]  # the same process answered again
        with pytest.raises(abstract._ToolError, match="no such column"):  # SQLite said no: kept
            abstract._run_query(t, "SELECT nope FROM data", 5, 5.0, 20000, 256, None, tables)
        assert tables._idle == [(t.path, first)]
        endless = ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                   "SELECT count(*) FROM r")
        with pytest.raises(abstract._ToolError, match="longer than 0.5 s"):
            abstract._run_query(t, endless, 5, 0.5, 20000, 256, None, tables)
        assert tables._idle == [] and first.wait(5) is not None  # stopped: never used again
    finally:
        tables.close()
    assert not Path(t.path).exists()  # removed at shutdown, its workers ended first


@LINUX_PROC
def test_at_shutdown_the_workers_end_and_the_table_files_are_removed(world, tmp_path):
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    world.fake("up")
    world.dir.mkdir()
    world.settings = {"query": {"timeout_seconds": 30}}
    px = world.start(env=world.env(TMPDIR=str(tmp), TEMP=str(tmp), TMP=str(tmp)))
    src = write_records(world, "rows.json", [{"id": i} for i in range(10)])
    assert query(px, source=src, sql="SELECT count(*) AS n FROM data")["structuredContent"][
        "rows"] == [{"n": 10}]
    slow = px.send_request("tools/call", {"name": "query_output",
                                          "arguments": {"source": src, "sql": SLOW_INSTR}})
    wait_for(lambda: any(s == "R" for _, s in workers(px.pid)), 10.0, "the slow query running")
    pids = [pid for pid, _ in workers(px.pid)]
    assert len(pids) >= 2 and [p.name for p in tmp.glob("abstract-query-*")]  # warm, spare, slow
    px.close_stdin()
    assert px.wait_exit(10) == 0
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), 5.0, "workers gone")
    assert not list(tmp.glob("abstract-query-*"))
    if px.has_response(slow):  # answered as failed: a tool error, or shutdown's own -32000
        answer = px.wait_response(slow)
        assert answer.get("result", {}).get("isError") or answer["error"]["code"] == -32000
