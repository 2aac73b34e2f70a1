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
