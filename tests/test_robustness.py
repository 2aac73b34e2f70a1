"""What a hostile client, a server that stops reading, a server that leaves children behind,
or a nested Abstract cannot do to Abstract (review findings), end to end through real pipes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import abstract
from conftest import ABSTRACT, base_env, pid_alive, text_of, wait_for


def _strict(line: bytes) -> dict:
    """Parse a stdout line as strict JSON: UTF-8, no NaN or Infinity."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(line.decode("utf-8"), parse_constant=refuse)


# -- a client cannot end the session with one line

@pytest.mark.parametrize("line", [
    b"[" * 100000 + b"\n",  # nested past the recursion limit
    b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":[1]}}\n',
    b'{"jsonrpc":"2.0","id":{"a":1},"result":{}}\n',  # a "response" with an object id
])
def test_one_hostile_line_never_ends_the_session(world, line):
    world.fake("up")
    p = world.start()
    p.write(line)
    assert p.result("ping") == {}
    assert text_of(p.upstream("up", "echo", {"text": "still here"})) == "still here"
    assert p.proc.poll() is None


def test_deep_nesting_is_a_parse_error_with_id_null(world):
    p = world.start()
    p.write(b"[" * 100000 + b"\n")
    got = wait_for(lambda: p.responses.get("null"), what="an error response")
    assert got["error"]["code"] == -32700


def test_nan_and_infinity_are_never_passed_on(world):
    world.fake("up")
    p = world.start()
    p.write(b'{"jsonrpc":"2.0","id":"n","method":"tools/call","params":{"name":"call_tool","arguments":'
            b'{"server":"up","tool_name":"echo_args","tool_args":{"a":NaN,"b":-Infinity}}}}\n')
    res = p.wait_response("n")["result"]
    assert res["structuredContent"] == {"a": None, "b": None}
    for line in p.raw_lines:
        _strict(line)


def test_a_lone_surrogate_still_makes_valid_utf8_lines(world):
    world.fake("up")
    p = world.start()
    p.write(b'{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"call_tool","arguments":'
            b'{"server":"up","tool_name":"echo","tool_args":{"text":"a\\ud800b"}}}}\n')
    assert p.wait_response("s")["result"]["content"][0]["text"] == "a\ud800b"
    for line in p.raw_lines:
        _strict(line)


# -- upstreams that stop reading, or leave children behind

def test_a_server_that_stops_reading_is_stopped_and_replaced(world):
    world.fake("deaf")
    world.settings = {"servers": {"deaf": {"timeout_seconds": 2}}}
    p = world.start()
    assert text_of(p.upstream("deaf", "go_deaf")) == "deaf"
    first = world.pids("deaf")
    t0 = time.monotonic()
    res = p.upstream("deaf", "echo", {"text": "x" * (4 << 20)}, timeout=30)  # more than a pipe holds
    took = time.monotonic() - t0
    assert res["isError"] is True and "stopped reading its input" in text_of(res), text_of(res)
    assert took < 10, f"took {took:.1f} s for a 2 s limit"
    assert text_of(p.upstream("deaf", "echo", {"text": "again"})) == "again"
    assert world.pids("deaf") != first and not pid_alive(first[0])


def test_a_crash_is_noticed_even_when_a_child_keeps_stdout_open(world):
    world.fake("parent", "--spawn-child")
    world.settings = {"servers": {"parent": {"timeout_seconds": 60}}}
    p = world.start()
    assert text_of(p.upstream("parent", "echo", {"text": "up"})) == "up"
    t0 = time.monotonic()
    res = p.upstream("parent", "crash", {"code": 7}, timeout=30)
    assert time.monotonic() - t0 < 10, "waited for the deadline instead of noticing the exit"
    assert res["isError"] is True and "exited with code 7" in text_of(res), text_of(res)
    child = world.events("parent", "child")[0]["pid"]
    wait_for(lambda: not _running(child), timeout=10, what="the left-behind child to be killed")
    assert text_of(p.upstream("parent", "echo", {"text": "again"})) == "again"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# -- recursion, shutdown

def test_an_abstract_started_by_abstract_refuses_to_run(tmp_path):
    env = base_env(ABSTRACT_PARENT="12345")
    p = subprocess.run([sys.executable, str(ABSTRACT), str(tmp_path)], env=env, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    assert p.returncode == 2 and b"started by another Abstract (pid 12345)" in p.stderr


def test_a_disguised_self_entry_fails_clearly_instead_of_recursing(world):
    code = f"import runpy, sys; sys.argv = ['x', {str(world.dir)!r}]; runpy.run_path({str(ABSTRACT)!r}, run_name='__main__')"
    world.servers["sneaky"] = {"command": sys.executable, "args": ["-c", code]}
    p = world.start()
    res = p.upstream("sneaky", "echo", {"text": "x"})
    assert res["isError"] is True and "started by another Abstract" in text_of(res), text_of(res)


def test_requests_in_flight_at_stdin_eof_are_still_answered(world):
    world.fake("up")
    p = world.start()
    assert text_of(p.upstream("up", "echo", {"text": "warm"})) == "warm"
    rid = p.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "up", "tool_name": "slow", "tool_args": {"seconds": 0.5}}})
    p.close_stdin()
    assert p.wait_exit(5) == 0
    assert not p.wait_response(rid, timeout=1)["result"].get("isError")


@pytest.mark.skipif(abstract._WINDOWS, reason="POSIX signals")
def test_sigterm_stops_the_upstreams_too(world):
    world.fake("up")
    p = world.start()
    assert text_of(p.upstream("up", "echo", {"text": "hi"})) == "hi"
    up = world.pids("up")[0]
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait_exit(5) == 128 + signal.SIGTERM
    wait_for(lambda: not pid_alive(up), timeout=5, what="the upstream to stop")


def test_huge_timeouts_are_refused_at_start_up(tmp_path):
    cfg = tmp_path / "s.json"
    cfg.write_text(json.dumps({"timeout_seconds": 1e10}))
    p = subprocess.run([sys.executable, str(ABSTRACT), str(tmp_path)], env=base_env(ABSTRACT_CONFIG=str(cfg)),
                       capture_output=True, stdin=subprocess.DEVNULL, timeout=30)
    assert p.returncode == 2 and b"at most 10000000" in p.stderr


def test_a_cache_directory_inside_an_allowed_directory_is_refused(tmp_path):
    store = tmp_path / "store"
    (store / "report.csv").parent.mkdir()
    (store / "report.csv").write_text("a,b\n")
    cfg = tmp_path / "s.json"
    cfg.write_text(json.dumps({"output_cache": {"dir": str(store / "cache")},
                               "catalog": {"path": str(tmp_path / "c.sqlite3")}}))
    p = subprocess.run([sys.executable, str(ABSTRACT), str(store)], env=base_env(ABSTRACT_CONFIG=str(cfg)),
                       capture_output=True, stdin=subprocess.DEVNULL, timeout=30)
    assert p.returncode == 2 and b"allowed director" in p.stderr, p.stderr
    assert (store / "report.csv").read_text() == "a,b\n"


def test_text_that_holds_nan_stays_text_and_is_never_written_as_json():
    assert abstract._json_or_text("[1, NaN]") == "[1, NaN]"
    assert abstract._json_or_text(" [1, 2] ") == [1, 2]
    assert abstract._parse_text("Infinity", "txt") == "Infinity"
