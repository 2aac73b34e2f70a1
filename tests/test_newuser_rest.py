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
# a server that never answers: the issue's `sleep 600` (Python's where there is no sleep: Windows)
HANG = ({"command": shutil.which("sleep"), "args": ["600"]} if shutil.which("sleep")
        else {"command": sys.executable, "args": ["-c", "import time; time.sleep(600)"]})


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


# -- item 4: a server that never answers, and one slow to start


def test_a_server_that_never_answers_stalls_neither_the_listing_nor_its_calls(world):
    """`sleep 600` as a server: the listing answers after _LIST_WAIT_S with server-memory's tools
    and a line for 'hang'; a call to it waits within its own time limit; once its start has
    failed, calls fail at once with the reason until the back-off has passed; no traceback."""
    world.servers["memory"] = {"command": real("memory"), "args": [],
                               "env": {"MEMORY_FILE_PATH": str(world.tmp / "memory.jsonl")}}
    world.servers["hang"] = dict(HANG)
    p = start(world, {}, settings={"servers": {"hang": {"startup_timeout_seconds": 5,
                                                        "timeout_seconds": 2}}})
    assert not call(p, "call_tool", server="memory", tool_name="read_graph",
                    tool_args={}).get("isError")  # (server-memory is up: the listing's wait is hang's)
    t0 = time.monotonic()
    res = call(p, "list_available_tools", timeout=30)
    took = time.monotonic() - t0
    text = text_of(res)
    assert took < 5 + 4, took  # _LIST_WAIT_S, then the answer (was 35.8 s)
    assert "create_entities" in text and "read_graph" in text, text
    assert re.search(r"^\[hang\] server 'hang' is still starting \(since [4-6] s\); its tools will "
                     r"be listed once it answers$", text, re.M), text
    assert res["structuredContent"]["starting_servers"][0]["server"] == "hang"
    # a call waits for the start within its own time limit (2 s): the start goes on meanwhile
    t0 = time.monotonic()
    waited = call(p, "call_tool", server="hang", tool_name="anything", tool_args={}, timeout=30)
    assert waited["isError"] and re.fullmatch(
        r"server 'hang' is still starting \(since \d+ s\); the call waited for it as long as "
        r"its time limit allows \(2 s\), and the start goes on: call again later",
        text_of(waited)), waited
    assert time.monotonic() - t0 < 2 + 3
    # the start fails (5 s probe, then 5 s for initialize): the next calls fail at once, saying why
    failed = ""
    deadline = time.monotonic() + 30
    while "did not complete the MCP handshake" not in failed and time.monotonic() < deadline:
        failed = text_of(call(p, "call_tool", server="hang", tool_name="x", tool_args={}))
    assert "no answer to initialize within 5 s" in failed, failed
    t0 = time.monotonic()
    again = text_of(call(p, "call_tool", server="hang", tool_name="x", tool_args={}))
    assert time.monotonic() - t0 < 2, again
    assert re.match(r"server 'hang' failed right after starting, so it is not restarted for "
                    r"another [45] s\. Last failure: server 'hang' did not complete", again), again
    listing = call(p, "list_available_tools")
    assert "[hang] not available: server 'hang' failed right after starting" in text_of(listing)
    assert listing["structuredContent"]["failed_servers"][0]["retry_in_s"] <= 5
    no_traceback(p)


def test_a_slow_first_start_goes_on_in_the_background_and_is_listed_once_it_answers(world):
    world.fake("slow", "--start-delay", "7")  # an npx download: longer than the probe's 5 s
    world.fake("quick")
    p = world.start()
    first = p.listing()
    assert [s["server"] for s in first["starting_servers"]] == ["slow"], first
    assert {t["server"] for t in first["tools"]} == {"quick"}
    assert len(world.pids("slow")) == 1
    # the same start answers (one process, never started twice), then its tools are listed
    deadline = time.monotonic() + 60
    while "starting_servers" in p.listing() and time.monotonic() < deadline:
        pass
    later = p.listing()
    assert {t["server"] for t in later["tools"]} == {"quick", "slow"}, later
    assert len(world.pids("slow")) == 1
    no_traceback(p)


def test_check_reports_a_server_that_never_answers_after_a_bounded_wait(world):
    world.servers["memory"] = {"command": real("memory"), "args": [],
                               "env": {"MEMORY_FILE_PATH": str(world.tmp / "memory.jsonl")}}
    world.servers["hang"] = dict(HANG)
    world.dir.mkdir()
    t0 = time.monotonic()
    got = world.check(timeout=60)
    took = time.monotonic() - t0
    out, err = got.stdout.decode(), got.stderr.decode()
    assert took < 10 + 8, took  # _CHECK_WAIT_S, then the report and the stop (was 36 s)
    assert got.returncode == 1, out
    assert re.search(r"^  hang\s+NOT ANSWERING: no answer within 10 s of starting \(command: "
                     r".*600", out, re.M), out
    assert re.search(r"^  memory\s+started\s+protocol", out, re.M), out
    assert "Traceback" not in err and "Exception in thread" not in err, err


def test_a_writer_whose_stream_breaks_ends_the_session_without_joining_itself(monkeypatch):
    """The upstream's stdin closed under the writer (a stopped run): the write fails, the writer
    ends the session, and no 'cannot join current thread' escapes its thread."""
    import threading

    import abstract
    from conftest import pipe_pair

    raised = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    rfile, wpeer = pipe_pair()
    rpeer, wfile = pipe_pair()
    rpeer.close()  # nobody reads: the write fails (EPIPE)
    conn = abstract.Connection(rfile, wfile, name="t", strict=False, queued=True).start()
    try:
        assert conn.send({"jsonrpc": "2.0", "method": "x"})
        assert conn.closed.wait(10)
        assert conn._writer.join(10) is None and not conn._writer.is_alive()
        assert raised == []
    finally:
        wpeer.close()
        for f in (rfile, wfile):
            try:
                f.close()
            except OSError:  # (the broken pipe's last flush)
                pass


# -- item 7: smaller things


def test_a_long_upstream_error_is_cut_after_a_word_and_says_so(world):
    """server-filesystem's refusal names the path asked for: over 2,000 characters here."""
    data = world.tmp / "data"
    data.mkdir()
    world.servers["filesystem"] = {"command": real("filesystem"), "args": [str(data)]}
    p = start(world, {})
    words = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota")
    path = "/elsewhere/" + " ".join(words[i % len(words)] for i in range(600))
    res = call(p, "call_tool_and_store", server="filesystem", tool_name="read_text_file",
               tool_args={"path": path})
    text = text_of(res)
    assert res["isError"] and "Access denied" in text, text
    m = re.search(r"(\S+) … \(cut here: ([\d,]+) more characters of ([\d,]+)\)$", text)
    assert m and m.group(1) in words, text[-300:]
    full = int(m.group(3).replace(",", ""))
    assert full > 2000 and full - int(m.group(2).replace(",", "")) <= 2000
    assert len(text.encode()) < 2300


# mcp-server-fetch's `fetch` tool as that server lists it (third-party data: its name, description
# and inputSchema as mcp-server-fetch 2025.x sends them); the server itself is not installed here
FETCH_TOOL = {
    "name": "fetch",
    "description": "Fetches a URL from the internet and optionally extracts its contents as "
                   "markdown.\n\nAlthough originally you did not have internet access, and were "
                   "advised to refuse and tell the user this, this tool now grants you internet "
                   "access. Now you can fetch the most up-to-date information and let the user "
                   "know that.",
    "inputSchema": {
        "description": "Parameters for fetching a URL.",
        "properties": {
            "url": {"description": "URL to fetch", "format": "uri", "minLength": 1,
                    "title": "Url", "type": "string"},
            "max_length": {"default": 5000, "description": "Maximum number of characters to return.",
                           "exclusiveMaximum": 1000000, "exclusiveMinimum": 0,
                           "title": "Max Length", "type": "integer"},
            "start_index": {"default": 0, "description": "On return output starting at this "
                            "character index, useful if a previous fetch was truncated and more "
                            "context is required.", "minimum": 0, "title": "Start Index",
                            "type": "integer"},
            "raw": {"default": False, "description": "Get the actual HTML content of the "
                    "requested page, without simplification.", "title": "Raw", "type": "boolean"}},
        "required": ["url"], "title": "Fetch", "type": "object"}}


@pytest.fixture
def five(world):
    """server-filesystem, -memory, -everything and mcp-server-git, and fetch's real tool list
    served by the fake upstream, behind one Abstract."""
    data = world.tmp / "data"
    data.mkdir()
    tools = world.tmp / "fetch-tools.json"
    tools.write_text(json.dumps([FETCH_TOOL]))
    world.fake("fetch", "--tools-file", str(tools))
    p = start(world, {
        "filesystem": {"command": real("filesystem"), "args": [str(data)]},
        "memory": {"command": real("memory"), "args": [],
                   "env": {"MEMORY_FILE_PATH": str(world.tmp / "memory.jsonl")}},
        "everything": {"command": shutil.which("node") or "node", "args": [real("everything")]},
        "git": {"command": real("git"), "args": []}})
    return p


def search(p, query: str) -> list:
    res = call(p, "list_available_tools", query=query)
    assert not res.get("isError"), text_of(res)
    return res


def test_search_ranks_a_deprecated_tool_below_its_replacement_and_keeps_the_warning(five):
    res = search(five, "read a file")
    ranked = [h["tool"] for h in res["structuredContent"]["tools"]]
    assert "read_text_file" in ranked, ranked
    assert ranked[0] != "read_file"
    assert "read_file" not in ranked or ranked.index("read_file") > ranked.index("read_text_file")
    listing = text_of(call(five, "list_available_tools", filter_by_server="filesystem"))
    assert ("\nread_file: Read the complete contents of a file as text. DEPRECATED: Use "
            "read_text_file instead.\n") in listing, listing


def test_search_knows_the_words_people_use_for_a_tools_job(five):
    res = search(five, "download a web page")
    top = [(h["server"], h["tool"]) for h in res["structuredContent"]["tools"][:3]]
    assert ("fetch", "fetch") in top, top
    assert text_of(res).splitlines()[1].startswith("[fetch] fetch: Fetches a URL from the internet")


def _png(width: int, height: int) -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))

    rows = b"".join(b"\0" + bytes((x * 7 + y) % 256 for x in range(width * 3))
                    for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0,
                                                                0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_storing_an_image_writes_the_image_alone_and_answers_without_base64(world):
    data = world.tmp / "data"
    data.mkdir()
    png = _png(120, 80)
    (data / "pic.png").write_bytes(png)
    world.servers["filesystem"] = {"command": real("filesystem"), "args": [str(data)]}
    p = start(world, {})
    res = call(p, "call_tool_and_store", server="filesystem", tool_name="read_media_file",
               tool_args={"path": str(data / "pic.png")})
    text = text_of(res)
    assert not res.get("isError"), text
    assert [f.suffix for f in world.dir.iterdir()] == [".png"]  # no .json beside it
    [stored] = list(world.dir.iterdir())
    assert stored.read_bytes() == png
    assert text == (f"Stored the result of filesystem.read_media_file as PNG: {stored}\n"
                    f"image/png, {len(png)} bytes, 120 x 80 pixels.")
    assert "iVBOR" not in json.dumps(res) and "query_output" not in text
    assert res["structuredContent"]["files"][0]["width"] == 120
    assert res["structuredContent"]["files"][0]["height"] == 80


def test_a_text_stored_as_csv_is_written_as_text_and_the_answer_says_so(world):
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH")
    repo = world.tmp / "repo"
    env = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env, timeout=30)
    for i in range(40):
        (repo / "f.txt").write_text(f"version {i}\n")
        subprocess.run(["git", "-C", str(repo), "add", "f.txt"], check=True, env=env, timeout=30)
        subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", f"change number {i}"],
                       check=True, env=env, timeout=30)
    world.servers["git"] = {"command": real("git"), "args": []}
    p = start(world, {})
    res = call(p, "call_tool_and_store", server="git", tool_name="git_log",
               tool_args={"repo_path": str(repo), "max_count": 40}, file_format="csv")
    text = text_of(res)
    assert not res.get("isError"), text
    [stored] = list(world.dir.iterdir())
    assert stored.suffix == ".txt", stored
    body = stored.read_text()
    assert body.startswith("Commit history:\n") and "change number 39" in body  # not a JSON string
    assert ("Note: stored as text: a single string, not a list of records; csv needs a list of "
            "records") in text
    assert res["structuredContent"]["format"] == "txt"


def test_the_docs_say_remote_entries_work_and_show_check_on_every_system(tmp_path):
    """configuration.md's entry table and example (loaded as Abstract loads a client config),
    and the README's --check for macOS, Linux and Windows."""
    import abstract

    root = Path(ABSTRACT).parent
    conf = (root / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    row = next(line for line in conf.splitlines() if line.startswith("| `type` |"))
    assert "remote.md" in row and '"http"' in row and '"sse"' in row, row
    assert not re.search(r'\(`"http"`, `"sse"`, …\) is listed as not supported', row), row
    example = conf.split("### Entry keys", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "client.json"
    path.write_text(example, encoding="utf-8")
    config = abstract._ClientConfig(str(path), None, {"GITHUB_TOKEN": "x", "HOME": str(tmp_path)})
    tracker = config.specs["tracker"]
    assert tracker.remote and not tracker.problem, tracker.problem
    readme = (root / "README.md").read_text(encoding="utf-8")
    check = readme.split("Check that it sees your servers", 1)[1].split("Then add it", 1)[0]
    for where in ("~/Library/Application\\ Support/Claude/", "~/.config/Claude/",
                  "$env:APPDATA\\Claude\\"):
        assert where in check, where
    assert "about five minutes" not in readme
    functions = sum(len(re.findall(r"^(?:    )?def test_", p.read_text(encoding="utf-8"), re.M))
                    for p in (root / "tests").rglob("test_*.py"))
    m = re.search(r"It runs about ([\d,]+) tests in about (\d+) minutes", readme)
    # each test function is one test or more (parametrized): the count is at least theirs
    assert m and functions <= int(m.group(1).replace(",", "")) <= 3 * functions, (m, functions)
