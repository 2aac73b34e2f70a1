"""Review 4: adversarial checks of the query, newrest and relay merges (issues 24, 25, 27).
Each test of a defect failed before its fix; the shutdown-during-start test pins what held."""

from __future__ import annotations

import json
import os
import time

import pytest

import abstract

from conftest import World, text_of
from test_splice import _start


def _strict(line: bytes) -> dict:
    """The line as a strict peer (JSON.parse) reads it: NaN and Infinity are no JSON."""
    def refuse(word: str) -> None:
        raise ValueError(f"{word} is not JSON")
    return json.loads(line, parse_constant=refuse)


# ==== relay: every frame the client gets is JSON ========================================


@pytest.mark.parametrize("number", ["1e999", "-1e999", "1" * 400 + ".5"])
@pytest.mark.parametrize("direct", [False, True], ids=["call_tool", "transparent"])
def test_an_upstream_number_too_large_for_a_float_reaches_the_client_as_json(world: World,
                                                                             number, direct):
    """Before: an upstream's 1e999 was read as a float infinity and written to the client as
    Infinity, which is no JSON: a strict client rejects the whole answer."""
    world.fake("up")
    proxy = _start(world, *(["--expose", "direct"] if direct else []))
    raw = ('{"jsonrpc":"2.0","id":%ID%,"result":{"content":[{"type":"text","text":"ok"}],'
           '"structuredContent":{"v":' + number + ',"w":[' + number + ']}}}')
    line, _ = proxy.upstream_line("up", "long", {"raw": raw}, direct)
    msg = _strict(line)
    assert msg["result"]["structuredContent"] == {"v": None, "w": [None]}, line[:300]


# ==== query: the table files never outlive Abstract =====================================


def test_a_table_loaded_after_the_shutdown_closed_the_tables_is_removed(tmp_path):
    """Before: a query whose load ended after the shutdown's _Tables.close() kept its table,
    so the records' file stayed in the temporary folder after Abstract exited."""
    tables = abstract._Tables()
    tables.close()
    table = abstract._load_table([{"id": 1, "secret": "x"}], folder=str(tmp_path))
    tables.put(("file", "a"), table, 1 << 30)
    assert list(tmp_path.iterdir()) == []
    assert tables.get(("file", "a")) is None


# ==== newrest: a start in the background never outlives Abstract =========================


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc (Linux)")
def test_a_shutdown_during_a_background_start_leaves_no_upstream_running(world: World):
    world.fake("slow", "--start-delay", "30")
    world.fake("quick")
    p = world.start()
    first = p.listing()
    assert [s["server"] for s in first["starting_servers"]] == ["slow"], first
    pids = world.pids("slow")
    assert len(pids) == 1
    p.close_stdin()
    p.wait_exit(20)
    deadline = time.monotonic() + 20
    while _alive(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pids[0])


def test_a_call_that_waited_for_a_restart_gets_only_what_is_left_of_its_time_limit(world: World):
    """Before: a call waited for the server's start (a restart after a crash) within its time
    limit (3 s), then had a whole limit again for the answer: it took about 5 s and answered."""
    world.fake("slow", "--start-delay", "2")
    world.settings = {"timeout_seconds": 3}
    p = world.start()
    assert not p.upstream("slow", "echo", {"text": "up"}, timeout=60).get("isError")
    p.upstream("slow", "crash", {}, timeout=60)  # (its tools stay listed: no start to list them)
    t0 = time.monotonic()
    res = p.upstream("slow", "slow", {"seconds": 2.5}, timeout=60)
    took = time.monotonic() - t0
    assert res.get("isError") and "did not answer within 3 s" in text_of(res), (took, res)
    assert took < 3 + 1.5, took
