"""Resource bounds, end to end against a real `python abstract.py`: the longest message from an
upstream and from the client (memory measured from /proc), an unreadable upstream answer, and
the signed-link HTTP server under a flood of idle connections (loopback only)."""

from __future__ import annotations

import json
import os
import time

import pytest

from conftest import World, proc_status, text_of

needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="measures memory in /proc")


@needs_proc
def test_an_endless_upstream_line_fails_the_call_at_once_and_memory_stays_bounded(world: World):
    world.fake("up")
    world.settings = {"max_upstream_message_mb": 1, "timeout_seconds": 300}
    proxy = world.start()
    assert text_of(proxy.upstream("up", "echo", {"text": "warm"})) == "warm"
    before = proc_status(proxy.pid, "VmHWM")
    t0 = time.monotonic()
    res = proxy.upstream("up", "endless", {"mb": 300}, timeout=120)  # 300 MB, no newline, then it hangs
    took = time.monotonic() - t0
    grew_mb = (proc_status(proxy.pid, "VmHWM") - before) / 1024
    assert res.get("isError") is True and "max_upstream_message_mb" in text_of(res), res
    assert "1,048,576 bytes" in text_of(res), text_of(res)
    assert took < 60, f"the call failed only after {took:.0f} s (its deadline is 300 s)"
    assert grew_mb < 64, f"peak memory grew by {grew_mb:.0f} MB reading a 300 MB line with a 1 MB limit"
    # the session was ended (its process gone) and a fresh one answers the next call
    assert text_of(proxy.upstream("up", "echo", {"text": "again"})) == "again"
    assert len(world.pids("up")) == 2


@needs_proc
def test_a_client_line_over_the_limit_is_refused_and_not_kept(world: World):
    world.fake("up")
    world.settings = {"max_client_message_mb": 1}
    proxy = world.start()
    before = proc_status(proxy.pid, "VmHWM")
    text = "y" * (40 << 20)
    proxy.send({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
                "params": {"name": "call_tool", "arguments": {"server": "up", "tool_name": "echo",
                                                              "tool_args": {"text": text}}}})
    del text
    resp = proxy.wait_response(77, timeout=60)
    grew_mb = (proc_status(proxy.pid, "VmHWM") - before) / 1024
    assert resp["error"]["code"] == -32600 and "max_client_message_mb" in resp["error"]["message"], resp
    assert grew_mb < 30, f"peak memory grew by {grew_mb:.0f} MB for a refused 40 MB line"
    assert proxy.request("ping")["result"] == {}  # the session goes on
    assert not world.events("up", "call")  # nothing of it reached the upstream


def test_an_answer_nested_too_deeply_fails_its_call_at_once(world: World):
    world.fake("up")
    world.settings = {"timeout_seconds": 300}
    proxy = world.start()
    t0 = time.monotonic()
    res = proxy.upstream("up", "deep", {"n": 100000}, timeout=60)
    assert res.get("isError") is True and "cannot be read" in text_of(res), res
    assert time.monotonic() - t0 < 60
    assert text_of(proxy.upstream("up", "echo", {"text": "still"})) == "still"


@pytest.mark.parametrize("key", ["max_upstream_message_mb", "max_client_message_mb"])
@pytest.mark.parametrize("value", [0, -1, "8", 5000, True])
def test_message_limits_are_checked_settings(world: World, key, value):
    world.settings = {key: value}
    proxy = world.start(initialize=False)
    assert proxy.wait_exit(30) == 2
    proxy.wait_stderr(f"key '{key}' must be a number of megabytes > 0 and at most 4096, not {json.dumps(value)}")
