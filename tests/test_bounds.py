"""Resource bounds, end to end against a real `python abstract.py`: the longest message from an
upstream and from the client (memory measured from /proc), an unreadable upstream answer, and
the signed-link HTTP server under a flood of idle connections (loopback only)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.parse
import urllib.request

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


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _get(url: str, timeout: float = 10) -> tuple:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, resp.read()


def _linked(world: World) -> tuple:
    """Abstract with --http on loopback and one cached output of 20 MiB: (proxy, its link)."""
    world.fake("up")
    world.settings = dict(world.settings or {}, output_cache={"min_size": 1000})
    proxy = world.start("--http", "127.0.0.1:0", str(world.dir), env=world.env(ABSTRACT_CACHE_SECRET="k"))
    res = proxy.upstream("up", "big", {"mb": 20}, timeout=60)
    return proxy, res["structuredContent"]["retrieve_url"]


def _closed_by_server(s: socket.socket, timeout: float) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1 << 16) == b""
    except ConnectionResetError:
        return True
    except OSError:  # timed out: still open
        return False


@needs_proc
def test_a_flood_of_idle_connections_is_bounded_and_links_keep_working(world: World):
    world.settings = {"http_header_timeout_seconds": 1, "http_max_connections": 16}
    proxy, url = _linked(world)
    u = urllib.parse.urlsplit(url)
    base = _open_fds(proxy.pid)
    socks = []
    try:
        for i in range(120):  # idle ones, a bare HTTP/0.9 line start, TLS ClientHello bytes
            s = socket.create_connection((u.hostname, u.port), timeout=5)
            s.sendall([b"", b"GET /", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"][i % 3])
            socks.append(s)
        held = max(_open_fds(proxy.pid) for _ in range(50))
        assert held - base <= 16 + 4, f"{held - base} descriptors held for 120 idle connections (limit 16)"
        # each idle one is dropped at its header deadline, in turn, so a real download gets through
        status, body = _get(url, timeout=60)
        assert status == 200 and len(body) == 20 << 20
        still_open = [i for i, s in enumerate(socks) if not _closed_by_server(s, 60)]
        assert not still_open, f"{len(still_open)} of 120 idle connections were never closed by the server"
    finally:
        for s in socks:
            s.close()
    assert proxy.request("ping")["result"] == {}
    assert _open_fds(proxy.pid) <= base + 4


@needs_proc
def test_slow_readers_of_a_large_output_cost_a_buffer_each_not_the_output(world: World):
    proxy, url = _linked(world)
    u = urllib.parse.urlsplit(url)
    before = proc_status(proxy.pid, "VmHWM")
    socks = []
    try:
        for _ in range(30):  # each asks for the 20 MiB output and reads only the first bytes
            s = socket.create_connection((u.hostname, u.port), timeout=30)
            s.sendall(f"GET {u.path}?{u.query} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
            socks.append(s)
        for s in socks:
            assert s.recv(64).startswith(b"HTTP/1.1 200")  # the server is sending to each of them
        grew_mb = (proc_status(proxy.pid, "VmHWM") - before) / 1024
        assert grew_mb < 100, f"30 slow readers of a 20 MiB output raised peak memory by {grew_mb:.0f} MB"
    finally:
        for s in socks:
            s.close()
    status, body = _get(url, timeout=60)
    assert status == 200 and len(body) == 20 << 20


def test_a_burst_of_simultaneous_downloads_is_served(world: World):
    from concurrent.futures import ThreadPoolExecutor

    world.settings = {"http_max_connections": 8}
    proxy, url = _linked(world)
    small = url  # 300 at once against a backlog that holds them (socketserver's default was 5)
    with ThreadPoolExecutor(50) as pool:
        codes = list(pool.map(lambda _: _head_status(small), range(300)))
    assert codes.count(200) == 300, {c: codes.count(c) for c in set(codes)}


def _head_status(url: str) -> object:
    u = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection((u.hostname, u.port), timeout=30) as s:
            s.sendall(f"GET {u.path}?{u.query} HTTP/1.0\r\n\r\n".encode())
            return int(s.recv(12)[9:12])
    except OSError as e:
        return type(e).__name__


def test_a_huge_integer_in_an_input_file_and_a_deep_cursor_are_clear_errors(world: World):
    import base64

    world.fake("up")
    world.dir.mkdir()
    (world.dir / "big.json").write_text('{"n": ' + "7" * 5000 + "}")
    proxy = world.start()
    res = proxy.call_tool("call_tool_with_file_content", {"server": "up", "tool_name": "echo_args",
                                                          "file_path": "big.json", "data_key": "d"})
    if hasattr(sys, "set_int_max_str_digits"):  # Python 3.11+ refuses such integers (3.9 reads them)
        assert res.get("isError") is True and "too many digits" in text_of(res), res
    else:  # pragma: no cover
        assert not res.get("isError"), res
    deep = base64.urlsafe_b64encode(b"[" * 100000 + b"]" * 100000).decode()
    res = proxy.call_tool("list_stored_outputs", {"cursor": deep})
    assert res.get("isError") is True and "Invalid cursor" in text_of(res), res
