"""--serve with real clients (issue 28, item 5): the TypeScript SDK through the MCP Inspector's CLI
(`--transport http`), mcp-remote 0.15.1 bridging a stdio client to Abstract, and two sessions of
the official Python SDK at once (tests/sdk_two_sessions.py), each against a real abstract.py over
the real server-everything and server-filesystem (tests/realservers/install.sh; each test skips
with one line when what it needs is not installed). The question-routing rule the two sessions
need is pinned with the fake upstream as well (test_serve's client), for machines without them.
Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

from conftest import ABSTRACT, wait_for
from test_serve import ELICIT, Session
from test_serve import Served as FakeServed

LONG = 120.0  # node and a venv start slowly on a loaded machine
TOKEN = "c" * 40  # ABSTRACT_SERVE_TOKEN: every request sends it as a bearer token
REAL = Path(os.environ.get("ABSTRACT_REALSERVERS_HOME")
            or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            / "abstract-realservers")
BIN = REAL / "node" / "node_modules" / ".bin"
VENV_PY = REAL / "venv" / "bin" / "python"
# the Inspector's package asks for node >= 22.19: the conformance install's node 22 where it is
CONFORMANCE_NODE = (Path(os.environ.get("ABSTRACT_CONFORMANCE_HOME")
                         or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                         / "abstract-conformance") / "node_modules" / ".bin" / "node")
FEATURES = "demo://resource/static/document/features.md"  # one of server-everything's resources


def need(*paths: Path) -> None:
    for path in paths:
        if not path.exists():
            pytest.skip(f"{path.name} is not installed in {REAL} (bash tests/realservers/install.sh)")


class Served:
    """abstract.py --serve 127.0.0.1:0 over server-everything and server-filesystem (on
    Abstract's folder, `files`, which it offers upstreams as their roots), with the world's
    settings; stdin a pipe, stderr read on a thread."""

    def __init__(self, world: Any, *flags: str) -> None:
        need(BIN / "mcp-server-everything", BIN / "mcp-server-filesystem")
        self.files = world.dir
        self.files.mkdir(exist_ok=True)
        world.servers["everything"] = {"command": str(BIN / "mcp-server-everything"), "args": []}
        world.servers["filesystem"] = {"command": str(BIN / "mcp-server-filesystem"),
                                       "args": [str(self.files)]}
        env = world.env(ABSTRACT_SERVE_TOKEN=TOKEN, XDG_CONFIG_HOME=str(world.tmp / "config"))
        self.proc = subprocess.Popen([sys.executable, str(ABSTRACT), "--serve", "127.0.0.1:0",
                                      *flags, str(world.dir)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.err: List[str] = []
        self.readers = [threading.Thread(target=self._read, daemon=True)]
        self.readers[0].start()
        while True:
            line = self.lines.get(timeout=LONG)
            assert line, "abstract ended before it served:\n" + "".join(self.err)
            if "serving MCP at" in line:
                break
        self.url = line.split("serving MCP at ")[1].strip()

    def _read(self) -> None:
        for raw in iter(self.proc.stderr.readline, b""):  # type: ignore[union-attr]
            line = raw.decode("utf-8", "replace")
            self.err.append(line)
            self.lines.put(line)
        self.lines.put("")


def end(proc: subprocess.Popen, readers: List[threading.Thread]) -> None:
    """Close the child's stdin (the end of stdin ends Abstract's serving and mcp-remote), wait
    for it (killed if it does not end in time) and its pipes' readers, and close its pipes."""
    proc.stdin.close()  # type: ignore[union-attr]
    try:
        proc.wait(LONG)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(LONG)
    for t in readers:
        t.join(LONG)
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()


@pytest.fixture
def served(world):
    """Start Abstract serving (flags); at the test's end it is stopped, and its stderr must hold
    no traceback (nothing these clients did crashed a handler)."""
    got: List[Served] = []
    with contextlib.ExitStack() as stack:
        def start(*flags: str) -> Served:
            got.append(Served(world, *flags))
            stack.callback(end, got[-1].proc, got[-1].readers)
            return got[-1]

        yield start
    for srv in got:
        assert "Traceback" not in "".join(srv.err), "".join(srv.err)[-3000:]


# -- the TypeScript SDK through the MCP Inspector's CLI


def inspector(srv: Served, method: str, *args: str) -> dict:
    """`mcp-inspector --cli URL --transport http --header "Authorization: Bearer ..." --method
    METHOD ARGS...`: its JSON answer."""
    need(BIN / "mcp-inspector")
    node = str(CONFORMANCE_NODE) if CONFORMANCE_NODE.exists() else shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH (the MCP Inspector's CLI runs on it)")
    out = subprocess.run([node, str(BIN / "mcp-inspector"), "--cli", srv.url, "--transport", "http",
                          "--header", f"Authorization: Bearer {TOKEN}", "--method", method, *args],
                         capture_output=True, timeout=LONG, cwd=str(srv.files),
                         env=dict(os.environ, HOME=str(srv.files.parent)))
    assert out.returncode == 0, (out.stdout + out.stderr).decode()[-3000:]
    return json.loads(out.stdout)


def texts(result: dict) -> List[str]:
    return [c["text"] for c in result["content"] if c.get("type") == "text"]


def test_the_inspector_cli_lists_and_calls_upstream_tools_through_meta_mode(served):
    srv = served()
    (srv.files / "note.txt").write_text("a note from the filesystem\n")
    names = [t["name"] for t in inspector(srv, "tools/list")["tools"]]
    assert "list_available_tools" in names and "call_tool" in names
    assert not any("__" in n for n in names)  # meta mode: Abstract's tools only
    echo = inspector(srv, "tools/call", "--tool-name", "call_tool", "--tool-arg",
                     "server=everything", "tool_name=echo", 'tool_args={"message": "hi there"}')
    assert texts(echo) == ["Echo: hi there"]
    read = inspector(srv, "tools/call", "--tool-name", "call_tool", "--tool-arg",
                     "server=filesystem", "tool_name=read_text_file",
                     "tool_args=" + json.dumps({"path": str(srv.files / "note.txt")}))
    assert texts(read) == ["a note from the filesystem\n"]


def test_the_inspector_cli_lists_and_calls_tools_resources_and_prompts_in_direct_mode(served):
    srv = served("--expose", "direct")
    names = [t["name"] for t in inspector(srv, "tools/list")["tools"]]
    assert "everything__echo" in names and "filesystem__read_text_file" in names
    echo = inspector(srv, "tools/call", "--tool-name", "everything__echo", "--tool-arg",
                     "message=direct hello")
    assert texts(echo) == ["Echo: direct hello"]
    uris = [r["uri"] for r in inspector(srv, "resources/list")["resources"]]
    assert FEATURES in uris
    read = inspector(srv, "resources/read", "--uri", FEATURES)
    assert read["contents"][0]["text"].startswith("# Everything Server - Features")
    prompts = [p["name"] for p in inspector(srv, "prompts/list")["prompts"]]
    assert "everything__simple-prompt" in prompts and "everything__args-prompt" in prompts
    got = inspector(srv, "prompts/get", "--prompt-name", "everything__args-prompt",
                    "--prompt-args", "city=Lisbon")
    assert "Lisbon" in json.dumps(got["messages"])


# -- mcp-remote 0.15.1 bridging a stdio client


class Stdio:
    """A JSON-RPC line client over a child's stdin/stdout (its stdout read on a thread)."""

    def __init__(self, argv: List[str], env: Dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self.messages: "queue.Queue[Optional[dict]]" = queue.Queue()
        self.err: List[bytes] = []
        self.readers = [threading.Thread(target=self._out, daemon=True), threading.Thread(
            target=lambda: self.err.extend(iter(self.proc.stderr.readline, b"")), daemon=True)]
        for t in self.readers:
            t.start()
        self._ids = iter(range(1, 10 ** 6))
        self.notes: List[dict] = []  # the notifications that came

    def _out(self) -> None:
        for line in iter(self.proc.stdout.readline, b""):  # type: ignore[union-attr]
            self.messages.put(json.loads(line))
        self.messages.put(None)

    def send(self, msg: dict) -> None:
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def request(self, method: str, params: Optional[dict] = None,
                answer: Optional[Callable[[dict], dict]] = None) -> dict:
        """Send a request; its response. What comes before it: notifications are kept (notes),
        and a request of the server's is answered with answer(request)."""
        mid = next(self._ids)
        self.send({"jsonrpc": "2.0", "id": mid, "method": method, "params": params or {}})
        while True:
            msg = self.messages.get(timeout=LONG)
            assert msg is not None, "ended: " + b"".join(self.err).decode()[-3000:]
            if "method" not in msg and msg.get("id") == mid:
                assert "result" in msg, msg
                return msg["result"]
            if "method" in msg and "id" in msg:
                assert answer is not None, f"not expected: {msg}"
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": answer(msg)})
            elif "method" in msg:
                self.notes.append(msg)



def mcp_remote(srv: Served, world: Any, caps: Optional[dict] = None) -> Stdio:
    """`mcp-remote URL --transport http-only --header Authorization:Bearer ...` (a valid header:
    no OAuth, so no browser; its config folder the test's own), initialized by a stdio client."""
    need(BIN / "mcp-remote")
    remote = Stdio([str(BIN / "mcp-remote"), srv.url, "--transport", "http-only", "--header",
                    f"Authorization:Bearer {TOKEN}"],
                   dict(os.environ, MCP_REMOTE_CONFIG_DIR=str(world.tmp / "mcp-remote")))
    try:
        init = remote.request("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": caps or {},
            "clientInfo": {"name": "stdio-host", "version": "1"}})
        assert init["serverInfo"]["name"] == "abstract"
        remote.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    except BaseException:
        end(remote.proc, remote.readers)
        raise
    return remote


def test_mcp_remote_bridges_a_stdio_client_and_cached_results_read_through_it(served, world):
    srv = served("--expose", "direct")
    big = "".join(f"line {i:05d} of a big file\n" for i in range(1, 4001))  # 100,000 characters
    (srv.files / "big.txt").write_text(big)
    remote = mcp_remote(srv, world)
    try:
        names = [t["name"] for t in remote.request("tools/list")["tools"]]
        assert "everything__echo" in names and "retrieve_cached_output" in names
        echo = remote.request("tools/call", {"name": "everything__echo",
                                             "arguments": {"message": "through mcp-remote"}})
        assert texts(echo) == ["Echo: through mcp-remote"]
        cached = remote.request("tools/call", {"name": "filesystem__read_text_file",
                                               "arguments": {"path": str(srv.files / "big.txt")}})
        text = texts(cached)[0]
        assert "cached instead of shown" in text and "line 04000" not in text
        token = text.split("Token: ")[1].split()[0]
        part = remote.request("tools/call", {"name": "retrieve_cached_output", "arguments": {
            "token": token, "start_line": 2500, "end_line": 2502}})
        assert "line 02500 of a big file" in texts(part)[0]
        assert "line 02502 of a big file" in texts(part)[0]
        assert "line 02503" not in texts(part)[0]
    finally:
        end(remote.proc, remote.readers)
    said = b"".join(remote.err).decode("utf-8", "replace")
    assert "Connected to remote server using StreamableHTTPClientTransport" in said
    assert "requires authorization" not in said and "browser" not in said  # no sign-in


# -- two sessions of the official Python SDK at once


def test_two_sdk_sessions_at_once_questions_cancels_and_ends_stay_with_their_session(served):
    need(VENV_PY)
    srv = served("--expose", "direct")
    out = subprocess.run([str(VENV_PY), str(Path(__file__).parent / "sdk_two_sessions.py"),
                          srv.url], capture_output=True, timeout=LONG * 4,
                         env=dict(os.environ, SERVE_TOKEN=TOKEN))
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["sids_differ"]
    asked = ["Please provide inputs for the following fields:"]
    # 1: A's question (while B's call was in flight) reached A only, and A's answer came back
    assert got["asked_after_a"] == {"A": asked, "B": []}
    assert "- Name: Ada A" in "\n".join(got["a_elicit"])
    # 2: B's call cancelled; A's went on to its end, and B's session still works
    assert got["b_cancelled"] == "cancelled"
    assert got["a_progress_at_cancel"] < 3 and got["a_progress"] == [1.0, 2.0, 3.0]
    assert got["a_long"] == ["Long running operation completed. Duration: 6 seconds, Steps: 3."]
    assert got["b_echo_after_cancel"] == ["Echo: B on"]
    # 3: B's question (while A's call was in flight) reached B only
    assert got["asked_after_b"] == {"A": asked, "B": asked}
    assert "- Name: Ada B" in "\n".join(got["b_elicit"])
    assert got["a_long_during_b_elicit"][0].startswith("Long running operation completed")
    # 4: B's session ended (DELETE) while both had a call in flight: B's call is answered
    # with the error that says so; A's call goes on to its end and A's session works
    assert got["delete_status"] == 200
    assert got["b_after_delete"] == "error: the client ended the session (DELETE)"
    assert got["a_progress_at_delete"] < 3 and got["a_progress_2"] == [1.0, 2.0, 3.0]
    assert got["a_long_after_delete"][0].startswith("Long running operation completed")
    assert got["a_echo_after_delete"] == ["Echo: A on"]
    assert "Session not found" in got["b_echo_after_delete"]


def test_mcp_remote_relays_an_upstreams_question_and_its_progress_to_the_stdio_client(
        served, world):
    srv = served("--expose", "direct")
    remote = mcp_remote(srv, world, {"elicitation": {}})
    asked: List[dict] = []

    def answer(req: dict) -> dict:
        asked.append(req)
        return {"action": "accept", "content": {"name": "Remote Ada"}}

    try:
        got = remote.request("tools/call", {"name": "everything__trigger-elicitation-request",
                                            "arguments": {}}, answer)
        assert [r["method"] for r in asked] == ["elicitation/create"]
        assert "- Name: Remote Ada" in "\n".join(texts(got))
        done = remote.request("tools/call", {
            "name": "everything__trigger-long-running-operation",
            "arguments": {"duration": 2, "steps": 2}, "_meta": {"progressToken": "mine"}})
        assert texts(done) == ["Long running operation completed. Duration: 2 seconds, Steps: 2."]
        assert [(n["params"]["progressToken"], n["params"]["progress"]) for n in remote.notes
                if n["method"] == "notifications/progress"] == [("mine", 1), ("mine", 2)]
    finally:
        end(remote.proc, remote.readers)


def test_a_question_goes_to_the_session_whose_call_came_last_not_to_one_already_running(world):
    """The rule the two sessions above found wanting (the question went to the session whose
    call had waited longest), pinned with the fake upstream where the real peers are absent:
    B's call is running at the upstream when A's call asks; A is asked, B's stream gets
    nothing."""
    world.fake("up", "--extras")
    srv = FakeServed(world)
    try:
        a, b = Session(srv.http, {"elicitation": {}}), Session(srv.http, {"elicitation": {}})
        b_mid, b_stream = b.call("up__record_cancel")
        wait_for(lambda: world.events("up", "started"), LONG, "B's call at the upstream")
        _, a_stream = a.call("up__ask_client", method="elicitation/create", params=ELICIT)
        asked = a_stream.next(LONG)
        assert asked is not None and asked.get("method") == "elicitation/create", asked
        assert a.answer(asked["id"], {"action": "accept", "content": {"name": "Ada"}}) == 202
        _, answer = a_stream.until_answer()
        assert "Ada" in json.dumps(answer["result"])
        assert b.notify("notifications/cancelled", {"requestId": b_mid}) == 202
        assert b_stream.next(LONG) is None  # B's POST ends: it was asked nothing
    finally:
        srv.stop()
