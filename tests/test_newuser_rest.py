"""What a new user hit (issue 25, items 3, 4 and 7), end to end through real servers where one
shows the case: server-everything over Streamable HTTP (--check and logins), server-memory,
server-filesystem and mcp-server-git behind Abstract; `sleep 600` and the fake upstream for a
server that never answers. Servers that are not installed are skipped with one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ABSTRACT, text_of

HOME = Path(os.environ.get("ABSTRACT_REALSERVERS_HOME")
            or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            / "abstract-realservers")
REAL = {"filesystem": HOME / "node" / "node_modules" / ".bin" / "mcp-server-filesystem",
        "memory": HOME / "node" / "node_modules" / ".bin" / "mcp-server-memory",
        "everything": HOME / "node" / "node_modules" / "@modelcontextprotocol"
        / "server-everything" / "dist" / "index.js",
        "git": HOME / "venv" / "bin" / "mcp-server-git"}
SLOW = 60.0  # node and a venv start slowly on a loaded machine


def real(name: str) -> str:
    """The installed real server's command (skips the test when it is not installed)."""
    path = REAL[name]
    if not path.exists():
        pytest.skip(f"{name} is not installed in {HOME} (bash tests/realservers/install.sh)")
    return str(path)


def start(world, servers: dict, settings: dict = None):
    world.servers.update(servers)
    world.settings = settings
    world.dir.mkdir(parents=True, exist_ok=True)
    p = world.start(initialize=False)
    p.result("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": "pytest", "version": "0"}}, timeout=SLOW)
    p.notify("notifications/initialized")
    return p


def call(p, tool: str, timeout: float = SLOW, **args) -> dict:
    return p.call_tool(tool, args, timeout=timeout)


def no_traceback(p) -> None:
    assert "Traceback" not in p.stderr and "Exception in thread" not in p.stderr, p.stderr[-3000:]


# -- item 3: --check and a remote server without auth


def test_check_says_no_login_is_needed_for_a_remote_server_that_asked_for_none(world):
    from test_remote import Served, free_port

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH")
    port = free_port()
    s = Served([node, real("everything"), "streamableHttp"], port,
               env={**os.environ, "PORT": str(port)})
    try:
        world.servers["inventory"] = {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}
        world.dir.mkdir()
        env = world.env(XDG_CONFIG_HOME=str(world.tmp / "config"))
        got = world.check(env=env, timeout=SLOW)
    finally:
        s.stop()
    out = got.stdout.decode()
    assert got.returncode == 0, out + got.stderr.decode()
    assert re.search(r"inventory\s+reachable at http://127\.0\.0\.1:\d+/mcp", out), out
    assert "login needed:" not in out and "--login" not in out, out
    assert "  inventory: no login needed (it answered without asking for one)\n" in out, out


def test_check_says_a_login_is_needed_only_where_the_server_asked_for_one(world):
    from httpfake import FakeHTTP, reply

    guarded = FakeHTTP(lambda req: reply(req, 401, b"{}", headers={
        "WWW-Authenticate": 'Bearer resource_metadata="http://127.0.0.1:1/none"'}))
    try:
        world.servers["guarded"] = {"type": "http", "url": f"{guarded.url}/mcp"}
        world.dir.mkdir()
        got = world.check(env=world.env(XDG_CONFIG_HOME=str(world.tmp / "config")), timeout=SLOW)
    finally:
        guarded.close()
    out = got.stdout.decode()
    assert "  guarded: login needed: run python abstract.py --login guarded\n" in out, out
