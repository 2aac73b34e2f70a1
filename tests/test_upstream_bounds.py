"""Bounds on what an upstream and idle connections can make Abstract hold, and a remote server
that restarts (issue 24, items 3, 11, 12 and 13): an upstream's flood of questions for the client,
its flood of log lines, idle connections to the --http link server, and the first call after a
Streamable HTTP server forgot its sessions. End to end: Abstract and the upstreams are real
processes (fake_upstream.py, httpfake.py's SessionMcp, the official Python SDK's server)."""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import WAIT, Proxy, proc_status, text_of, wait_for

import abstract

HAS_PROC = Path("/proc/self/status").exists()


# -- item 3: an upstream's requests to Abstract are bounded


@pytest.mark.skipif(not HAS_PROC, reason="reads /proc/<pid>/status (Linux)")
def test_a_flood_of_elicitations_is_refused_past_the_bound_and_memory_stays_flat(world):
    """20,000 elicitation/create requests of 4 KiB at a client that declared elicitation and never
    answers: Abstract holds _UPSTREAM_REQUESTS_MAX of them (4 relayed to the client), refuses
    the rest at once with a JSON-RPC error naming the bound, its peak memory barely moves, and
    the server's calls still work."""
    world.fake("asker")
    proxy = world.start(initialize=False)
    proxy.initialize(capabilities={"elicitation": {}})
    assert text_of(proxy.upstream("asker", "echo", {"text": "warm"})) == "warm"
    before = proc_status(proxy.pid, "VmHWM")
    n, bound = 20000, 16  # the documented bound (_UPSTREAM_REQUESTS_MAX)
    res = proxy.upstream("asker", "flood_asks", {"n": n, "kb": 4, "errors": n - bound, "wait": 40},
                         timeout=90)
    got = json.loads(text_of(res))
    peak = proc_status(proxy.pid, "VmHWM")
    assert got["errors"] == n - bound, got  # the rest are held (and never answered by this client)
    assert got["results"] == 0 and got["codes"] == [-32000], got
    assert f"at most {bound} requests" in got["message"] and "elicitation/create" in got["message"]
    wait_for(lambda: len(proxy.server_requests) >= 4, what="4 questions relayed to the client")
    asked = [r for r in proxy.server_requests if r["method"] == "elicitation/create"]
    assert len(asked) == 4, len(asked)  # one per worker; the others wait their turn
    # (80 MB of questions came in; before the bound the queue held them all: +134 MB measured)
    assert peak - before < 40 * 1024, f"peak RSS grew from {before} to {peak} kB"
    assert text_of(proxy.upstream("asker", "echo", {"text": "still here"})) == "still here"
    proxy.wait_stderr("sent more than 16 requests at once")
    assert len([ln for ln in proxy.stderr_lines if "refusing more" in ln]) == 1  # not one per request
