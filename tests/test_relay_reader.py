"""Guards for answering a call from the thread that reads the upstream's answer (issue 27,
fourth pass: tried, measured and not kept; docs/performance.md). Whatever thread makes a relayed
call's answer, these must hold: many calls in flight are each answered once, and a cancelled one
never; the shutdown at EOF waits for the answers still to come and writes them; and an
upstream's reader never blocks on a client that stopped reading (so it still reads, and the
upstream's log line reaches stderr). The tried change passed them; a reader thread that wrote
its answers to the client itself failed the last one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from conftest import ABSTRACT, WAIT, text_of, wait_for


# -- end to end: Abstract and a fake upstream


def test_many_calls_in_flight_are_each_answered_once_and_a_cancelled_one_never(world):
    world.fake("up")
    world.settings = {"output_cache": {"enabled": False}}
    proxy = world.start()
    slow = proxy.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "up", "tool_name": "slow", "tool_args": {"seconds": 1}}})
    rids = [proxy.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "up", "tool_name": "echo", "tool_args": {"text": f"e{i}"}}}) for i in range(32)]
    proxy.notify("notifications/cancelled", {"requestId": slow, "reason": "changed my mind"})
    for i, rid in enumerate(rids):
        assert text_of(proxy.wait_response(rid)["result"]) == f"e{i}"
    # the slow call's own answer comes after its cancellation: dropped, never answered
    assert text_of(proxy.upstream("up", "slow", {"seconds": 1.5, "text": "after"},
                                  timeout=WAIT)) == "after"
    assert not proxy.has_response(slow)
    err = proxy.upstream("up", "rpc_error")
    assert err["isError"] is True and "-32042" in text_of(err)


def test_shutdown_at_eof_waits_for_the_answers_still_to_come_and_writes_them(world):
    world.fake("up")
    world.settings = {"output_cache": {"enabled": False}}
    proxy = world.start()
    rids = [proxy.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "up", "tool_name": "slow", "tool_args": {"seconds": 0.5, "text": f"s{i}"}}})
        for i in range(8)]
    proxy.close_stdin()
    assert proxy.wait_exit(WAIT) == 0
    for i, rid in enumerate(rids):
        assert text_of(proxy.wait_response(rid, timeout=5)["result"]) == f"s{i}"


@pytest.mark.skipif(os.name == "nt", reason="POSIX pipe sizes: the test fills Abstract's stdout "
                    "pipe, whose size differs on Windows")
def test_a_client_that_stops_reading_does_not_hold_up_the_upstreams_reader(world):
    """With the client's pipe full and 48 answers waiting for it, the upstream's reader still
    reads: the upstream's log line reaches stderr. (A reader that made answers must queue them
    for the client's writer, never write them itself.)"""
    world.fake("up")
    world.settings = {"output_cache": {"enabled": False}}
    proc = subprocess.Popen([sys.executable, str(ABSTRACT), str(world.dir)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=world.env(), start_new_session=True)
    err: list = []
    threading.Thread(target=lambda: err.extend(iter(proc.stderr.readline, b"")),
                     daemon=True).start()

    def send(msg: dict) -> None:
        proc.stdin.write(json.dumps(msg).encode() + b"\n")
        proc.stdin.flush()

    def call(rid: int, tool: str, args: dict) -> None:
        send({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {
            "name": "call_tool", "arguments": {"server": "up", "tool_name": tool,
                                               "tool_args": args}}})

    try:
        send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}})
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for rid in range(1, 49):  # 48 answers of 8 KB: far more than the pipe holds (64 KiB)
            call(rid, "echo", {"text": "x" * 8000})
        call(49, "notify_client", {"method": "notifications/message", "params": {
            "level": "warning", "logger": "t", "data": "the reader still reads"}})
        wait_for(lambda: any(b"the reader still reads" in line for line in err), timeout=30,
                 what="the upstream's log line on stderr while the client reads nothing")
        got: list = []
        reader = threading.Thread(target=lambda: got.extend(iter(proc.stdout.readline, b"")),
                                  daemon=True)
        reader.start()
        wait_for(lambda: len(got) >= 50, what="every answer, once the client reads again")
        ids = {json.loads(line).get("id") for line in got}
        assert set(range(50)) <= ids
    finally:
        proc.stdin.close()
        try:
            proc.wait(WAIT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(WAIT)
            proc.stdout.close()
            proc.stderr.close()
