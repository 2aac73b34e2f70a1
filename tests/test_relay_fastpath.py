"""Guards for short cuts on the relay's path to the client (issue 27, third pass): a message
written by the thread that sends it instead of the writer thread, frames batched by the writer,
answers queued or written by their worker. Each test fails on a short cut that reorders a
notification after its result, drops progress, writes a partial frame or mixes two, or blocks a
thread that must never block on a peer that stopped reading (a small message written by its
sender into a full pipe, say). Checked against a writer that reversed its batch and a send that
wrote every small frame itself: both failed here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import threading

import pytest

import abstract
from conftest import WAIT, text_of, wait_for

STEPS = 12
CALLS = 16


def _calls_with_progress(proxy, name, args_of) -> dict:
    """CALLS calls at once, each with its own progress token; {token: request id}."""
    rids = {}
    for i in range(CALLS):
        token = f"tok-{i}"
        rids[token] = proxy.send_request("tools/call", {"name": name, "arguments": args_of(i),
                                                        "_meta": {"progressToken": token}})
    for rid in rids.values():
        proxy.wait_response(rid)
    return rids


def _check_order(proxy, rids: dict) -> None:
    """Every line whole; each call's progress all there, in order, and before its result."""
    with proxy._cond:
        lines = list(proxy.raw_lines)
        bad = list(proxy.bad_lines)
    assert bad == []
    msgs = [json.loads(line) for line in lines]
    for token, rid in rids.items():
        steps = [i for i, m in enumerate(msgs) if m.get("method") == "notifications/progress"
                 and m["params"]["progressToken"] == token]
        [answer] = [i for i, m in enumerate(msgs) if "method" not in m and m.get("id") == rid]
        assert [msgs[i]["params"]["progress"] for i in steps] == list(range(1, STEPS + 1))
        assert steps[-1] < answer, f"{token}: progress after its result"
        assert text_of(msgs[answer]["result"]) == f"done {STEPS}"


def test_progress_of_many_calls_at_once_comes_whole_in_order_before_each_result(world):
    world.fake("up")
    proxy = world.start()
    rids = _calls_with_progress(proxy, "call_tool", lambda i: {
        "server": "up", "tool_name": "progress", "tool_args": {"steps": STEPS}})
    _check_order(proxy, rids)


def test_direct_mode_progress_of_many_calls_comes_whole_in_order_before_each_result(world):
    world.fake("s")
    proxy = world.start("--expose", "direct", str(world.dir))
    rids = _calls_with_progress(proxy, "s__progress", lambda i: {"steps": STEPS})
    _check_order(proxy, rids)


# -- the pipe's room: a thread that must not block never writes into a full pipe


def _full_pipe():
    """(the read end of a pipe that is full and not read, a Connection writing to it, its
    writer's file, the write end of the Connection's input, which nothing is written to)."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    idle_r, idle_w = os.pipe()
    wfile = io.BufferedWriter(os.fdopen(w, "wb", buffering=0), 1 << 16)
    conn = abstract.Connection(os.fdopen(idle_r, "rb", buffering=0), wfile, name="full",
                               strict=False, queued=True, close_input=True)
    return os.fdopen(r, "rb", buffering=0), conn, wfile, idle_w


@pytest.mark.skipif(os.name == "nt", reason="POSIX pipes: Windows' select takes sockets only, "
                    "so every message there goes through the writer thread")
def test_a_notification_to_a_full_pipe_is_queued_not_written_by_the_sender():
    rfile, conn, wfile, idle_w = _full_pipe()
    conn.start()
    try:
        done = threading.Event()

        def send() -> None:
            conn.notify("notifications/message", {"level": "info", "data": "after the flood"})
            done.set()

        threading.Thread(target=send, daemon=True).start()
        # the sender returns at once: the writer thread is the one blocked on the full pipe
        assert done.wait(WAIT), "a small notification blocked its sender on a full pipe"
        got = bytearray()
        while b"after the flood" not in got:
            assert select.select([rfile], [], [], WAIT)[0], "the queued message never came"
            got += rfile.read(1 << 16)
        assert json.loads(bytes(got).lstrip(b"x")) == {
            "jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": "after the flood"}}
    finally:
        rfile.close()  # (a write still stuck fails: nobody reads)
        os.close(idle_w)  # (the reader ends, and closes its input)
        wait_for(lambda: conn.closed.is_set(), what="the session to end")
        assert conn.finish(WAIT)
        with contextlib.suppress(OSError):
            wfile.close()


@pytest.mark.skipif(os.name == "nt", reason="POSIX pipes (as above)")
def test_messages_from_many_threads_come_whole_and_in_each_ones_order():
    r, w = os.pipe()
    idle_r, idle_w = os.pipe()
    wfile = io.BufferedWriter(os.fdopen(w, "wb", buffering=0), 1 << 16)
    conn = abstract.Connection(os.fdopen(idle_r, "rb", buffering=0), wfile, name="order",
                               strict=False, queued=True, close_input=True).start()
    rfile = os.fdopen(r, "rb")
    got: list = []
    reader = threading.Thread(target=lambda: got.extend(iter(rfile.readline, b"")), daemon=True)
    reader.start()

    def send(t: int) -> None:  # small and large ones, so that batches mix them
        for i in range(200):
            conn.send({"jsonrpc": "2.0", "method": "n",
                       "params": {"t": t, "i": i, "pad": "y" * (5000 if i % 7 == 0 else 10)}})

    senders = [threading.Thread(target=send, args=(t,)) for t in range(4)]
    try:
        for s in senders:
            s.start()
        for s in senders:
            s.join(WAIT)
        assert conn.finish(WAIT)
    finally:
        wfile.close()
        os.close(idle_w)  # (the reader ends, and closes its input)
        wait_for(lambda: conn.closed.is_set(), what="the session to end")
    reader.join(WAIT)
    rfile.close()
    msgs = [json.loads(line) for line in got]  # each line whole
    for t in range(4):
        assert [m["params"]["i"] for m in msgs if m["params"]["t"] == t] == list(range(200))
