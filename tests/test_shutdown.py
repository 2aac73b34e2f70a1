"""Shutdown and the seams of an upstream's life (issue 12), through real pipes: the MCP SDK's
exact shutdown sequence, SIGTERM in the middle of a shutdown, answers still being written at
EOF, a stall's restart, a start after close(), a slow client, a reused request id, and a tool
list that changes while it is being fetched."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import abstract
from conftest import ABSTRACT, FAKE, pid_alive, text_of, wait_for

posix_only = pytest.mark.skipif(abstract._WINDOWS, reason="POSIX signals and process groups")


def _sdk_shutdown(p) -> str:
    """End Abstract the way the MCP SDK clients end a stdio server: close its stdin, wait 2 s,
    SIGTERM its process group, wait 2 s, SIGKILL. Returns the step during which it exited."""
    p.close_stdin()
    for step, sig in (("after EOF", signal.SIGTERM), ("after SIGTERM", signal.SIGKILL)):
        try:
            p.proc.wait(2.0)
            return step
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, sig)
    p.proc.wait(5)
    return "killed by SIGKILL"


def _call(server: str, tool: str, args: dict) -> dict:
    return {"name": "call_tool", "arguments": {"server": server, "tool_name": tool, "tool_args": args}}


@posix_only
def test_sdk_shutdown_with_a_stubborn_upstream_and_a_call_in_flight(world):
    world.fake("good")
    world.fake("stubborn", "--stubborn")  # ignores stdin EOF and SIGTERM
    p = world.start()
    for name in ("good", "stubborn"):
        assert text_of(p.upstream(name, "echo", {"text": "up"})) == "up"
    p.send_request("tools/call", _call("stubborn", "record_cancel", {}))
    wait_for(lambda: world.events("stubborn", "started"), what="the call to reach the stubborn server")
    pids = world.pids("good") + world.pids("stubborn")
    assert _sdk_shutdown(p) in ("after EOF", "after SIGTERM")
    assert [pid for pid in pids if pid_alive(pid)] == [], "an upstream outlived Abstract"


@posix_only
def test_sdk_shutdown_with_cooperating_upstreams_ends_before_the_sigterm(world):
    world.fake("a")
    world.fake("b")
    p = world.start()
    for name in ("a", "b"):
        assert text_of(p.upstream(name, "echo", {"text": "up"})) == "up"
    rid = p.send_request("tools/call", _call("a", "slow", {"seconds": 60}))
    wait_for(lambda: world.events("a", "call")[1:], what="the slow call to reach the server")
    pids = world.pids("a") + world.pids("b")
    assert _sdk_shutdown(p) == "after EOF"
    assert p.proc.returncode == 0
    assert [pid for pid in pids if pid_alive(pid)] == []
    answer = p.wait_response(rid, timeout=5)["result"]  # the call in flight still got its answer
    assert answer["isError"] is True and "shutting down" in text_of(answer), answer


@posix_only
def test_sigterm_during_the_shutdown_continues_it(world):
    world.fake("stubborn", "--stubborn")
    p = world.start()
    assert text_of(p.upstream("stubborn", "echo", {"text": "up"})) == "up"
    [pid] = world.pids("stubborn")
    p.close_stdin()
    p.wait_stderr("stopping 1 upstream server")
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait_exit(10) == 128 + signal.SIGTERM
    assert not pid_alive(pid), "SIGTERM cut the shutdown short and left the upstream running"


def test_a_large_answer_is_written_whole_before_the_exit_at_eof(world):
    world.dir.mkdir()
    big = world.dir / "big.txt"
    big.write_text(("0123456789abcdef" * 64 + "\n") * 4400)  # 4.5 MB
    p = world.start()
    rid = p.send_request("resources/read", {"uri": big.as_uri()})
    p.close_stdin()
    assert p.wait_exit(10) == 0
    got = p.wait_response(rid, timeout=5)
    assert got["result"]["contents"][0]["text"] == big.read_text()


# -- an Upstream in-process, over a real subprocess

def _upstream(tmp_path, spawn, **settings) -> abstract._Upstream:
    spec = abstract._ServerSpec("up", sys.executable, [str(FAKE), "--state-file", str(tmp_path / "state")])
    return abstract._Upstream(spec, abstract._Settings(settings), abstract._ClientLink("none", []), spawn=spawn)


def _reap(procs) -> None:
    for proc in procs:
        proc.kill()
        proc.wait(5)
        for f in (proc.stdin, proc.stdout, proc.stderr):
            try:
                f.close()
            except (OSError, ValueError):
                pass


def test_no_upstream_is_started_after_close(tmp_path):
    spawned = []

    def spawn(*args, **kw):
        spawned.append(subprocess.Popen(*args, **kw))
        return spawned[-1]

    up = _upstream(tmp_path, spawn)
    try:
        assert up.call_tool("echo", {"text": "hi"})["content"][0]["text"] == "hi"
        up.close()
        with pytest.raises(abstract.UpstreamError, match="shutting down"):
            up.call_tool("echo", {"text": "late"})  # a handler still running after close()
        assert len(spawned) == 1
        assert spawned[0].poll() is not None
    finally:
        _reap(spawned)


class _LateExitStatus(subprocess.Popen):
    """A Popen whose exit status reaches the session's reader thread late (held until the test
    has looked): the window in which a run is dying but its session is not yet closed."""

    reader_waiting = threading.Event()
    release = threading.Event()

    def wait(self, timeout=None):
        if threading.current_thread().name.startswith("rpc-read-"):
            self.reader_waiting.set()
            self.release.wait(10)
        code = super().wait(timeout)
        if threading.current_thread().name.startswith("Thread"):  # the caller that stops the run:
            self.reader_waiting.wait(2)  # let the reader reach the window first, when it can
        return code


def test_after_a_stall_the_next_call_gets_a_new_run_not_the_dying_one(tmp_path):
    spawned = []

    def spawn(*args, **kw):
        spawned.append(_LateExitStatus(*args, **kw))
        return spawned[-1]

    up = _upstream(tmp_path, spawn, timeout_seconds=1)
    out: dict = {}

    def stall() -> None:  # in a thread named Thread-N (see _LateExitStatus)
        try:
            up.call_tool("echo", {"text": "x" * (4 << 20)})  # more than a pipe holds
        except abstract.UpstreamError as e:
            out["error"] = e.message

    try:
        assert up.call_tool("go_deaf", {})["content"][0]["text"] == "deaf"
        worker = threading.Thread(target=stall)
        worker.start()
        worker.join(30)
        assert "stopped reading its input" in out.get("error", ""), out
        assert up.call_tool("echo", {"text": "again"})["content"][0]["text"] == "again"
        assert len(spawned) == 2
    finally:
        _LateExitStatus.release.set()
        up.close()
        _reap(spawned)


@posix_only
def test_runs_whose_writers_are_stuck_are_stopped_together_not_one_after_another(tmp_path):
    """Ten 2026-07-28 stdio upstreams, each with a subscription open, that stopped reading their
    input while a long call was being written to them (each writer stuck): stopping them sends
    every subscription's cancel first and waits for all the writers against one deadline, so it
    takes no longer than stopping one (_stop_runs' bound), not 0.2 s more per upstream."""
    spawned = []

    def spawn(*args, **kw):
        spawned.append(subprocess.Popen(*args, **kw))
        return spawned[-1]

    ups, workers = [], []
    try:
        for i in range(10):
            spec = abstract._ServerSpec(f"up{i}", sys.executable, [str(FAKE), "--modern-only"])
            ups.append(abstract._Upstream(spec, abstract._Settings({}), abstract._ClientLink("none", []),
                                         spawn=spawn))
        for up in ups:
            up.session()
            wait_for(lambda: up._run.listen is not None and up._run.listen.ack_id is not None,
                     what="the subscription acknowledged")
            assert up.call_tool("go_deaf", {})["content"][0]["text"] == "deaf"
            workers.append(threading.Thread(target=lambda u=up: pytest.raises(
                abstract.UpstreamError, u.call_tool, "echo", {"text": "x" * (4 << 20)})))
            workers[-1].start()
        runs = [up._run for up in ups]
        wait_for(lambda: all(run.conn.stalled(0.05) for run in runs), what="every writer stuck")
        t0 = time.monotonic()
        abstract._stop_runs([run for up in ups for run in up.closing_runs()], "stopping")
        took = time.monotonic() - t0
        bound = abstract._STOP_EOF_S * 1.25 + abstract._STOP_TERM_S + abstract._STOP_KILL_S
        assert took < bound, took  # one at a time: 10 x 0.2 s + 0.8 s and more
        assert all(proc.poll() is not None for proc in spawned)
        for w in workers:
            w.join(10)
            assert not w.is_alive()
    finally:
        _reap(spawned)


# -- a slow client, a reused id, a list that changes while it is fetched

@posix_only
def test_a_client_that_stops_reading_never_stalls_an_upstream(world, tmp_path):
    """Progress relays are queued: the upstream's reader goes on reading while the client
    reads nothing (its stdout pipe full), so the upstream can write all it has to say."""
    world.fake("up")
    env = world.env()
    proc = subprocess.Popen([sys.executable, str(ABSTRACT), str(world.dir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        def send(msg: dict) -> None:
            proc.stdin.write(json.dumps(msg).encode() + b"\n")
            proc.stdin.flush()

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        params = _call("up", "progress", {"steps": 5000})  # about 1 MB of notifications: the pipe holds 64 KB
        params["_meta"] = {"progressToken": "p"}
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})
        wait_for(lambda: world.events("up", "progress_sent"), timeout=30,
                 what="the upstream to get all its progress out while the client reads nothing")
        answer = None
        for line in iter(proc.stdout.readline, b""):  # now read: everything is there, in order
            msg = json.loads(line)
            if msg.get("id") == 2:
                answer = msg
                break
        assert answer is not None and text_of(answer["result"]) == "done 5000", answer
    finally:
        proc.kill()
        proc.wait(5)
        proc.stdin.close()
        proc.stdout.close()


def test_a_reused_request_id_can_still_be_cancelled(world):
    world.fake("up")
    p = world.start()
    assert text_of(p.upstream("up", "echo", {"text": "warm"})) == "warm"
    p.send_request("tools/call", _call("up", "slow", {"seconds": 0.2, "text": "first"}), rid=7)
    p.send_request("tools/call", _call("up", "record_cancel", {}), rid=7)  # the same id, still running
    wait_for(lambda: world.events("up", "started"), what="the second call to start")
    wait_for(lambda: p.has_response(7), what="the first call's answer")
    p.notify("notifications/cancelled", {"requestId": 7})
    wait_for(lambda: world.events("up", "cancelled"), what="the cancel to reach the upstream")


def test_a_tool_list_changed_while_it_was_fetched_is_fetched_again(world):
    world.fake("up", "--extras", "--stale-list-once")
    p = world.start(str(world.dir), "--expose", "direct")
    first = [t["name"] for t in p.result("tools/list")["tools"]]
    assert "up__added_later" not in first  # the answer was made before the change
    again = [t["name"] for t in p.result("tools/list")["tools"]]
    assert "up__added_later" in again


def test_main_in_process_stops_what_it_started_and_puts_back_stdout_and_logging(world, monkeypatch):
    """main() called in-process (as tests and embedding hosts do) stops what it started before it
    returns: the request workers, the cache sweeper, the --http server, the temporary-file sweep
    and the upstreams; and it puts back sys.stdout and the level of Abstract's logger."""
    world.fake("up")
    env = world.env(ABSTRACT_LOG_LEVEL="DEBUG")
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "list_available_tools", "arguments": {}}}]
    stdin = io.BytesIO(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    raw = io.BytesIO()
    raw.close = lambda: None  # (the answers are read after main returns)
    out = io.TextIOWrapper(raw, encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", out)  # stdout=None: main serves on sys.stdout's buffer
    log = abstract._log
    level, propagate = log.level, log.propagate
    before = set(threading.enumerate())
    code = abstract.main([str(world.dir), "--http", "127.0.0.1:0"], stdin=stdin, stderr=io.StringIO(),
                         environ=env)
    assert code == 0
    assert sys.stdout is out
    assert (log.level, log.propagate) == (level, propagate)
    answers = [json.loads(line) for line in raw.getvalue().splitlines()]
    assert any(a.get("id") == 1 and "result" in a for a in answers)
    started = [t for t in threading.enumerate() if t not in before]
    deadline = time.monotonic() + 10  # a thread on its last lines (a reader past EOF) may finish
    for t in started:
        t.join(max(0.0, deadline - time.monotonic()))
    assert [t.name for t in started if t.is_alive()] == []
