"""Process lifecycle (issues 24 and 29): Ctrl-C and SIGHUP shut down as EOF and SIGTERM do, a
crashed upstream leaves no descriptor open, no descendant of an upstream outlives Abstract
(Linux: Abstract as their subreaper; Windows: a Job Object that kills on close)."""

from __future__ import annotations

import ctypes
import gc
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import abstract
from conftest import FAKE, pid_alive, read_lines, text_of, wait_for

posix_only = pytest.mark.skipif(abstract._WINDOWS, reason="POSIX signals and process groups")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the subreaper (prctl PR_SET_CHILD_SUBREAPER) and /proc")


# -- descriptors: a crashed upstream's pipes are closed

def _pipes() -> int:
    """Pipe descriptors this process holds (Linux /proc)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
        except OSError:
            pass
    return n


@linux_only
def test_descriptors_stay_flat_across_100_crash_and_restart_cycles(tmp_path):
    """Each cycle starts the fake, calls its crash tool (the process exits at once) and fails;
    the next cycle starts it again. Garbage collection is off, as a long-lived server's may not
    run for a while: every pipe end must be closed when its run ends, not when collected."""
    spec = abstract.ServerSpec("up", sys.executable, [str(FAKE)])
    clock = itertools.count(0.0, 1000.0).__next__  # every crash "long after the start": no backoff
    up = abstract.Upstream(spec, abstract.Settings({}), abstract._ClientLink("none", []),
                           clock=clock)
    gc.collect()
    before = _pipes()
    gc.disable()
    try:
        for _ in range(100):
            with pytest.raises(abstract.UpstreamError, match="exited with code 3"):
                up.call_tool("crash", {"code": 3})
            wait_for(lambda: up._runs == [], what="the crashed run to be let go")
        # the last run's watcher closes its stdin right after the crash: bounded wait for it
        wait_for(lambda: _pipes() <= before, timeout=10,
                 what=f"pipes back to {before} (now {_pipes()})")
    finally:
        gc.enable()
        up.close()


# -- Ctrl-C (SIGINT) and SIGHUP: the shutdown EOF and SIGTERM run

def _temps(root: Path) -> list:
    return [str(p) for p in root.rglob(".abstract-*.tmp")]


def _assert_clean_exit(p, code: int, pids: list) -> None:
    assert p.wait_exit(15) == code, p.stderr[-3000:]
    assert "Fatal Python error" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-3000:]
    wait_for(lambda: not [pid for pid in pids if pid_alive(pid)], timeout=10,
             what="every upstream to be gone")


@posix_only
@pytest.mark.parametrize("sig", ["SIGINT", "SIGHUP"])
def test_sigint_or_sighup_while_idle_shuts_down_like_sigterm(world, sig):
    """Each upstream is started; the stubborn one ignores stdin EOF and SIGTERM. Ctrl-C ended
    Abstract with 'Fatal Python error: _enter_buffered_busy' (status -6), the stubborn one still
    running; now it is the EOF/SIGTERM shutdown, with 128 + the signal's number."""
    world.fake("good")
    world.fake("stubborn", "--stubborn")
    p = world.start()
    for name in ("good", "stubborn"):
        assert text_of(p.upstream(name, "echo", {"text": "up"})) == "up"
    pids = world.pids("good") + world.pids("stubborn")
    os.kill(p.pid, getattr(signal, sig))
    _assert_clean_exit(p, 128 + getattr(signal, sig), pids)


@posix_only
def test_sigint_in_the_middle_of_a_large_store_answers_it_and_leaves_no_temporary_file(world):
    """A store of several megabytes of CSV is being written (its .abstract-*.tmp is there)
    when Ctrl-C comes: the call is answered (an error saying Abstract is shutting down, or
    its result if it was done), no temporary file is left, the upstream is gone, status 130."""
    world.fake("up")
    world.dir.mkdir()
    p = world.start()
    rid = p.send_request("tools/call", {"name": "call_tool_and_store", "arguments": {
        "server": "up", "tool_name": "rows", "tool_args": {"n": 600000}, "file_format": "csv"}})
    wait_for(lambda: _temps(world.dir), timeout=120, what="the store's temporary file")
    os.kill(p.pid, signal.SIGINT)
    answer = p.wait_response(rid, timeout=15)
    _assert_clean_exit(p, 130, world.pids("up"))
    assert _temps(world.dir) == []
    result = answer["result"]
    if result.get("isError"):
        assert "shutting down" in text_of(result), result
    else:  # it was finished: whole
        assert Path(result["structuredContent"]["path"]).stat().st_size > 0
