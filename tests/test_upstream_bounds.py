"""Bounds on what an upstream and idle connections can make Abstract hold, and a remote server
that restarts (issue 24, items 3, 11, 12 and 13): an upstream's flood of questions for the client,
its flood of log lines, idle connections to the --http link server, and the first call after a
Streamable HTTP server forgot its sessions. End to end: Abstract and the upstreams are real
processes (fake_upstream.py, httpfake.py's SessionMcp, the official Python SDK's server)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import WAIT, Proxy, proc_status, text_of, wait_for
from httpfake import SessionMcp

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


# -- item 13: a remote server that restarted (forgot its sessions) or refuses connections


@pytest.fixture
def sessions():
    made = []

    def make() -> SessionMcp:
        made.append(SessionMcp())
        return made[-1]

    yield make
    for s in made:
        s.close()


def _remote(world, fake) -> Proxy:
    world.servers["phoenix"] = {"type": "http", "url": fake.url}
    return world.start()


def test_the_first_call_after_a_restart_runs_once_in_a_new_session(world, sessions):
    """A 404 to a request carrying Mcp-Session-Id: that session is gone and the request was not
    processed. Abstract starts a new session and sends the request again, once: it runs once."""
    f = sessions()
    p = _remote(world, f)
    assert text_of(p.upstream("phoenix", "count", {"key": "k"})) == "1"
    f.restart()
    res = p.upstream("phoenix", "count", {"key": "k"})
    assert not res.get("isError") and text_of(res) == "2", res  # ran once: not 3, not an error
    assert f.counts == {"k": 2}
    assert f.calls() == [("tools/call", "s-1", 200), ("tools/call", "s-1", 404), ("tools/call", "s-2", 200)]
    assert [p[1] for p in f.posts if p[0] == "initialize"] == [None, None]  # a second session
    # the next call goes to the new session straight away; a restart is not counted as a crash
    f.restart()
    assert text_of(p.upstream("phoenix", "count", {"key": "k"})) == "3"
    f.restart()
    assert text_of(p.upstream("phoenix", "count", {"key": "k"})) == "4"
    assert "failed" not in p.stderr


def test_a_server_that_forgets_the_new_session_too_gets_the_request_twice_at_most(world, sessions):
    f = sessions()
    p = _remote(world, f)
    assert text_of(p.upstream("phoenix", "echo", {"text": "up"})) == "up"
    f.forget_calls = 3
    res = p.upstream("phoenix", "count", {"key": "k"})
    text = text_of(res)
    assert res.get("isError") and "ended its session (HTTP 404" in text and "twice" in text, text
    assert "did not run" in text and "may have done part of the work" not in text, text
    assert f.counts == {} and [s for _, _, s in f.calls()] == [200, 404, 404]
    assert text_of(p.upstream("phoenix", "count", {"key": "k"})) == "1"  # (its third forgetting)
    assert f.counts == {"k": 1}


def test_a_refused_connection_says_the_request_never_reached_the_server(world, sessions):
    f = sessions()
    p = _remote(world, f)
    assert text_of(p.upstream("phoenix", "count", {"key": "k"})) == "1"
    f.stop()
    res = p.upstream("phoenix", "count", {"key": "k"})
    text = text_of(res)
    assert res.get("isError") and "connection refused" in text, text
    assert "never reached the server, so nothing ran" in text, text
    assert "may have done part of the work" not in text and "not retried" not in text, text
    f.start()  # back, without the session: the next call opens a new one and runs once
    assert text_of(p.upstream("phoenix", "count", {"key": "k"})) == "2"
    assert f.counts == {"k": 2}


def test_server_everything_restarted_answers_the_first_call_after(world):
    """server-everything (streamableHttp) answers a request with a session id it does not know
    with HTTP 400 and -32000 "Bad Request: No valid session ID provided" (not the spec's 404)."""
    from test_remote import EVERYTHING, Served, free_port

    node = shutil.which("node")
    if not EVERYTHING.exists() or node is None:
        pytest.skip(f"server-everything not installed at {EVERYTHING} (bash tests/realservers/install.sh)")
    port = free_port()
    argv, env = [node, str(EVERYTHING), "streamableHttp"], {**os.environ, "PORT": str(port)}
    s = Served(argv, port, env=env)
    try:
        world.servers["everything"] = {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}
        p = world.start()
        assert "hi" in text_of(p.upstream("everything", "echo", {"message": "hi"}))
        s.stop()
        s = Served(argv, port, env=env)
        res = p.upstream("everything", "echo", {"message": "again"})
        assert not res.get("isError") and "again" in text_of(res), res
    finally:
        s.stop()


# -- item 12: idle connections to the --http link server


def _closed(s: socket.socket) -> bool:
    """The server closed `s` (a look that does not wait)."""
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


def test_a_link_is_served_within_a_second_while_300_idle_connections_are_held(world):
    """300 connections that send nothing, held open: at the cap (http_max_connections, 64) the
    one idle longest is dropped for each new one, so a signed GET is answered at once; before,
    it waited for the idle ones' 10 s header deadlines in turn."""
    world.fake("up")
    world.settings = {"output_cache": {"min_size": 1000}}
    p = world.start("--http", "127.0.0.1:0", str(world.dir), env=world.env(ABSTRACT_CACHE_SECRET="k"))
    url = p.upstream("up", "echo", {"text": "z" * 3000})["structuredContent"]["retrieve_url"]
    u = urllib.parse.urlsplit(url)
    socks = []
    try:
        for _ in range(300):
            socks.append(socket.create_connection((u.hostname, u.port), timeout=5))
        t0 = time.monotonic()
        with urllib.request.urlopen(url, timeout=5) as resp:
            status, body = resp.status, resp.read()
        took = time.monotonic() - t0
        assert status == 200 and body == b"z" * 3000
        # (the issue asks for 1 s: 0.05-0.28 s measured here; room for a loaded machine)
        assert took < 2.0, f"the download took {took:.2f} s with 300 idle connections held"
        # the idle ones made room (not their 10 s deadline): all but the 64 newest were dropped
        wait_for(lambda: sum(map(_closed, socks)) >= 300 - 64, what="the oldest idle connections dropped")
    finally:
        for s in socks:
            s.close()
    assert p.request("ping")["result"] == {}


# -- item 11: an upstream's log flood on Abstract's stderr


class _Counted(Proxy):
    """A Proxy that counts the bytes of Abstract's stderr, keeping only the first 2,000 lines
    and those that say something was dropped (a flood would otherwise be held in the test)."""

    stderr_bytes = 0

    def _read_stderr(self) -> None:
        for line in iter(self.proc.stderr.readline, b""):
            with self._cond:
                self.stderr_bytes += len(line)
                text = line[:10000].decode("utf-8", "replace").rstrip("\n")
                if len(self.stderr_lines) < 2000 or "dropped" in text:
                    self.stderr_lines.append(text)
                self._cond.notify_all()


def _counted(world) -> _Counted:
    p = _Counted([str(world.dir)], world.env())
    world.proxies.append(p)
    p.initialize()
    return p


def _dropped(p: Proxy, name: str) -> int:
    """How many log lines of `name` Abstract said it dropped, in all."""
    return sum(int(m.group(1).replace(",", "")) for line in p.stderr_lines
               for m in [re.search(rf"dropped ([\d,]+) log lines? from '{name}'", line)] if m)


def test_a_flood_of_log_notifications_is_rate_limited_on_stderr_with_a_count(world):
    """100,000 notifications/message of 2 KiB (200 MB): Abstract's stderr gets a burst of them
    and then a few a second, and says how many it dropped; the server goes on working."""
    world.fake("loud")
    p = _counted(world)
    assert text_of(p.upstream("loud", "flood_logs", {"n": 100000, "kb": 2}, timeout=120)) == "sent 100000"
    # the next line that passes says how many were dropped before it
    note = {"method": "notifications/message", "params": {"level": "info", "data": "after the flood"}}
    asked = []
    wait_for(lambda: asked.append(p.upstream("loud", "notify_client", note)) or "after the flood" in p.stderr,
             what="a log line let through after the flood")
    def shown() -> int:
        return sum(1 for line in p.stderr_lines if "[loud] info:" in line and "llll" in line)

    assert 200 <= shown() < 2000, shown()  # the burst of 200, then 20 a second

    def accounted() -> bool:
        """Every line is shown or counted (the notes asked for too: some may be dropped, one
        may still be on its way); the count of the last ones dropped comes at most a second
        later (it is written at most once a second)."""
        afters = sum(1 for line in p.stderr_lines if "after the flood" in line)
        return shown() + _dropped(p, "loud") == 100000 + len(asked) - afters

    wait_for(accounted, what=f"every line shown or counted: {shown()} + {_dropped(p, 'loud')}, "
                             f"{len(asked)} asked")
    assert p.stderr_bytes < 4 << 20, f"{p.stderr_bytes:,} bytes on stderr for 200 MB of log messages"
    assert text_of(p.upstream("loud", "echo", {"text": "still"})) == "still"


def test_the_last_notifications_dropped_are_counted_though_no_line_passes_after(world):
    """A flood of notifications/message, then nothing: the count of the last ones dropped is
    written within a second or so, not held until a line passes again (which may be never)."""
    world.fake("loud")
    p = _counted(world)
    assert text_of(p.upstream("loud", "flood_logs", {"n": 3000, "kb": 1})) == "sent 3000"
    shown = lambda: sum(1 for line in p.stderr_lines if "[loud] info:" in line and "llll" in line)
    wait_for(lambda: shown() + _dropped(p, "loud") == 3000,
             what=f"every line shown or counted: {shown()} + {_dropped(p, 'loud')}")


def test_a_stderr_flood_is_rate_limited_with_a_count_at_the_pause(world):
    """An upstream's own stderr lines share the bucket: 30,000 lines, then silence; the count
    of those dropped is written when its stderr pauses, not only when a line passes again."""
    world.fake("chatty", "--stderr-lines", "30000")
    p = _counted(world)
    assert text_of(p.upstream("chatty", "echo", {"text": "up"})) == "up"
    wait_for(lambda: _dropped(p, "chatty") + sum(1 for ln in p.stderr_lines if "[chatty] line " in ln) == 30000,
             what="every stderr line shown or counted as dropped")
    assert p.stderr_bytes < 2 << 20, p.stderr_bytes
