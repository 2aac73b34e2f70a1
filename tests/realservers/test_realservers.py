"""Abstract behind MCP servers nobody here wrote (issue 11): server-filesystem, server-memory and
server-everything from npm, mcp-server-git and mcp-server-time from PyPI, pinned and installed by
tests/realservers/install.sh into a cache folder (.ci/run calls it). Without them this module is
skipped with one line that says how to install them.

Files are checked with independent parsers (csv, json, xml.etree), never with Abstract's own.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import ABSTRACT, text_of, wait_for

HOME = Path(os.environ.get("ABSTRACT_REALSERVERS_HOME")
            or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "abstract-realservers")
NODE_BIN = HOME / "node" / "node_modules" / ".bin"
VENV_BIN = HOME / "venv" / "bin"
COMMANDS = {
    "filesystem": NODE_BIN / "mcp-server-filesystem",
    "memory": NODE_BIN / "mcp-server-memory",
    "everything": NODE_BIN / "mcp-server-everything",
    "git": VENV_BIN / "mcp-server-git",
    "time": VENV_BIN / "mcp-server-time",
}
INSTALLED = {name for name, path in COMMANDS.items() if path.exists()}
if not INSTALLED:
    pytest.skip(f"real MCP servers not installed in {HOME}: run bash tests/realservers/install.sh",
                allow_module_level=True)


def need(*names: str) -> None:
    missing = [n for n in names if n not in INSTALLED]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (bash tests/realservers/install.sh)")


WAIT = 60.0  # npx-free, but node and a venv start slowly on a loaded machine


class Real:
    """A World with real servers: `add(name, ...)` puts one in the client config."""

    def __init__(self, world, tmp: Path) -> None:
        self.world, self.tmp = world, tmp
        self.data = tmp / "data"  # server-filesystem's own folder
        self.data.mkdir()
        world.dir.mkdir(parents=True, exist_ok=True)

    def add(self, name: str, *args: str, env: Dict[str, str] = None) -> None:
        need(name)
        entry: dict = {"command": str(COMMANDS[name]), "args": list(args)}
        if env:
            entry["env"] = env
        self.world.servers[name] = entry

    def filesystem(self) -> None:
        self.add("filesystem", str(self.data))

    def start(self, *extra: str, capabilities: dict = None, settings: dict = None):
        self.world.settings = settings
        proxy = self.world.start(*extra, str(self.world.dir), initialize=False)
        proxy.result("initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities or {},
                                    "clientInfo": {"name": "pytest", "version": "0"}}, timeout=WAIT)
        proxy.notify("notifications/initialized")
        return proxy


@pytest.fixture
def real(world, tmp_path):
    return Real(world, tmp_path)


def call(proxy, _tool: str, **args) -> dict:
    return proxy.call_tool(_tool, args, timeout=WAIT)


def upstream(proxy, server: str, tool: str, **args) -> dict:
    res = call(proxy, "call_tool", server=server, tool_name=tool, tool_args=args)
    assert not res.get("isError"), text_of(res)
    return res


def store(proxy, server: str, tool: str, args: dict, **kw) -> dict:
    res = call(proxy, "call_tool_and_store", server=server, tool_name=tool, tool_args=args, **kw)
    assert not res.get("isError"), text_of(res)
    return res["structuredContent"]


def write_csv(path: Path, rows: int) -> List[dict]:
    records = [{"id": str(i), "zip": f"0{2134 + i}", "name": f"name {i}, jr", "score": f"{i}.50"}
               for i in range(rows)]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(records[0]))
        w.writeheader()
        w.writerows(records)
    return records


def git_repo(path: Path, commits: int) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH")
    env = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env, timeout=30)
    for i in range(commits):
        (path / "f.txt").write_text(f"version {i}\n")
        subprocess.run(["git", "-C", str(path), "add", "f.txt"], check=True, env=env, timeout=30)
        subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", f"change number {i}"], check=True,
                       env=env, timeout=30)


# -- 1. roots belong to the client


def fs_dirs(proxy) -> str:
    return text_of(upstream(proxy, "filesystem", "list_allowed_directories"))


def test_filesystem_keeps_its_own_folder_when_the_client_declares_no_roots(real):
    real.filesystem()
    (real.data / "notes.txt").write_text("inside the configured folder\n")
    proxy = real.start()
    res = upstream(proxy, "filesystem", "read_text_file", path=str(real.data / "notes.txt"))
    assert text_of(res) == "inside the configured folder\n"
    again = upstream(proxy, "filesystem", "read_text_file", path=str(real.data / "notes.txt"))
    assert text_of(again) == "inside the configured folder\n"
    assert str(real.data.resolve()) in fs_dirs(proxy)
    assert str(real.world.dir.resolve()) not in fs_dirs(proxy)


def test_client_roots_are_relayed_to_filesystem(real, tmp_path):
    real.filesystem()
    theirs = tmp_path / "client root"
    theirs.mkdir()
    (theirs / "c.txt").write_text("from the client's root")
    proxy = real.start(capabilities={"roots": {"listChanged": True}})
    rid = proxy.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "filesystem", "tool_name": "list_allowed_directories"}})
    ask = wait_for(lambda: next((r for r in proxy.server_requests if r["method"] == "roots/list"), None),
                   WAIT, "Abstract to ask the client for roots")
    proxy.send({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [{"uri": theirs.as_uri()}]}})
    proxy.wait_response(rid, WAIT)
    wait_for(lambda: str(theirs.resolve()) in fs_dirs(proxy), WAIT, "server-filesystem to take the roots")
    res = upstream(proxy, "filesystem", "read_text_file", path=str(theirs / "c.txt"))
    assert text_of(res) == "from the client's root"
    # the client's roots change: server-filesystem hears of it and asks again, through Abstract
    asked = len([r for r in proxy.server_requests if r["method"] == "roots/list"])
    proxy.notify("notifications/roots/list_changed")
    again = wait_for(lambda: [r for r in proxy.server_requests if r["method"] == "roots/list"][asked:],
                     WAIT, "a second roots/list")
    proxy.send({"jsonrpc": "2.0", "id": again[0]["id"], "result": {"roots": [{"uri": real.data.as_uri()}]}})
    wait_for(lambda: str(theirs.resolve()) not in fs_dirs(proxy), WAIT, "the new roots to apply")


def test_allowed_directories_setting_offers_abstracts_folders(real):
    real.filesystem()
    proxy = real.start(settings={"roots": "allowed_directories"})
    upstream(proxy, "filesystem", "list_allowed_directories")  # starts it; it asks for roots
    wait_for(lambda: str(real.world.dir.resolve()) in fs_dirs(proxy), WAIT, "Abstract's folder as root")


# -- 2. text is stored as text, in the format that fits


def test_git_log_is_stored_as_text_and_the_cache_suggests_txt(real, tmp_path):
    repo = tmp_path / "repo"
    git_repo(repo, 3)
    real.add("git", "--repository", str(repo))
    proxy = real.start(settings={"output_cache": {"min_size": 100}})
    out = store(proxy, "git", "git_log", {"repo_path": str(repo)})
    path = Path(out["path"])
    assert path.suffix == ".txt" and out["format"] == "txt"
    text = path.read_text()
    assert text.startswith("Commit history:\n") and "Message: change number 2\n" in text
    cached = upstream(proxy, "git", "git_log", repo_path=str(repo))  # over min_size: cached
    assert '"file_format": "txt"' in text_of(cached) and '"csv"' not in text_of(cached)


def test_markdown_text_is_stored_as_md(real):
    real.filesystem()
    doc = "# Title\n\nSome prose with a [link](https://example.com).\n\n## Part\n\n- one\n- two\n"
    (real.data / "doc.md").write_text(doc)
    proxy = real.start()
    out = store(proxy, "filesystem", "read_text_file", {"path": str(real.data / "doc.md")})
    assert Path(out["path"]).suffix == ".md" and Path(out["path"]).read_text() == doc


# -- 3. the payload, not the wrapper


def test_csv_file_read_and_stored_as_csv_keeps_its_rows(real):
    real.filesystem()
    records = write_csv(real.data / "people.csv", 300)
    proxy = real.start()
    out = store(proxy, "filesystem", "read_text_file", {"path": str(real.data / "people.csv")},
                file_format="csv")
    assert out["rows"] == 300 and out["columns"] == 4
    with open(out["path"], newline="") as f:
        assert list(csv.DictReader(f)) == records  # "02134" and "1.50" exactly as they were
    tsv = store(proxy, "filesystem", "read_text_file", {"path": str(real.data / "people.csv")},
                file_format="tsv")
    with open(tsv["path"], newline="") as f:
        assert list(csv.DictReader(f, delimiter="\t")) == records


def test_directory_tree_is_stored_as_the_tree_not_an_escaped_string(real):
    real.filesystem()
    (real.data / "sub").mkdir()
    (real.data / "sub" / "a.txt").write_text("a")
    (real.data / "b.txt").write_text("b")
    proxy = real.start()
    out = store(proxy, "filesystem", "directory_tree", {"path": str(real.data)})
    tree = json.loads(Path(out["path"]).read_text())
    assert out["format"] == "json" and isinstance(tree, list)
    assert {e["name"] for e in tree} == {"sub", "b.txt"}
    sub = next(e for e in tree if e["name"] == "sub")
    assert sub["children"] == [{"name": "a.txt", "type": "file"}]
    xml = store(proxy, "filesystem", "directory_tree", {"path": str(real.data)}, file_format="xml")
    names = {el.text for el in ET.parse(xml["path"]).getroot().iter("name")}
    assert {"sub", "a.txt", "b.txt"} <= names


def test_structured_data_is_stored_as_it_is(real):
    real.add("everything")
    proxy = real.start()
    out = store(proxy, "everything", "get-structured-content", {"location": "New York"})
    data = json.loads(Path(out["path"]).read_text())
    assert set(data) == {"temperature", "conditions", "humidity"}


def test_time_result_is_stored_as_json(real):
    real.add("time")
    proxy = real.start()
    out = store(proxy, "time", "get_current_time", {"timezone": "UTC"})
    data = json.loads(Path(out["path"]).read_text())
    assert out["format"] == "json" and data["timezone"] == "UTC" and "datetime" in data


def test_an_image_is_stored_as_an_image(real):
    real.add("everything")
    proxy = real.start()
    out = store(proxy, "everything", "get-tiny-image", {})
    pngs = [f for f in out.get("files", []) if f["mimeType"] == "image/png"] or \
        ([out] if out["path"].endswith(".png") else [])
    assert pngs, out
    assert Path(pngs[0]["path"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- 4. transparent mode protects against large results of tools with an outputSchema


def test_transparent_mode_caches_a_large_read_text_file(real):
    real.filesystem()
    big = "".join(f"line {i} of a large file\n" for i in range(10000))  # ~250 KB
    (real.data / "big.txt").write_text(big)
    (real.data / "small.txt").write_text("small")
    proxy = real.start("--expose", "direct")
    tools = {t["name"]: t for t in proxy.result("tools/list", timeout=WAIT)["tools"]}
    assert "outputSchema" not in tools["filesystem__read_text_file"]
    small = call(proxy, "filesystem__read_text_file", path=str(real.data / "small.txt"))
    assert text_of(small) == "small" and small["structuredContent"] == {"content": "small"}
    res = call(proxy, "filesystem__read_text_file", path=str(real.data / "big.txt"))
    answer = text_of(res)
    assert len(json.dumps(res)) < 3000 and "Token:" in answer
    token = re.search(r"Token: (\S+) ", answer).group(1)
    got = call(proxy, "retrieve_cached_output", token=token, offset=500, length=400)
    assert text_of(got) == big[500:900]
    # 9. the status says what was shown
    assert f"[characters 500 to 900 of {len(big):,} shown; next: offset=900]" == got["content"][1]["text"]


# -- 5. model mistakes are named, common aliases understood


def test_unknown_arguments_are_refused_and_aliases_accepted(real):
    real.add("time")
    proxy = real.start()
    wrong = call(proxy, "call_tool", server="time", tool_name="get_current_time",
                 argumentz={"timezone": "UTC"})
    assert wrong["isError"] and "argumentz" in text_of(wrong) and "tool_args" in text_of(wrong)
    alias = call(proxy, "call_tool", server="time", tool="get_current_time", arguments={"timezone": "UTC"})
    assert not alias.get("isError") and json.loads(text_of(alias))["timezone"] == "UTC"
    out = call(proxy, "call_tool_and_store", server="time", tool_name="convert_time",
               args={"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
               file_format="yml")
    assert out["structuredContent"]["format"] == "yaml" and out["structuredContent"]["path"].endswith(".yaml")


# -- 6. store, then feed back: nesting survives CSV


def test_memory_graph_round_trips_through_csv(real, tmp_path):
    real.add("memory", env={"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")})
    proxy = real.start()
    entities = [{"name": f"e{i}", "entityType": "thing", "observations": [f"obs {i}", f"more, {i}"]}
                for i in range(5)]
    upstream(proxy, "memory", "create_entities", entities=entities)
    out = store(proxy, "memory", "read_graph", {}, file_format="csv", filename="graph")
    with open(out["path"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert [json.loads(r["observations"]) for r in rows] == [e["observations"] for e in entities]
    # a second memory, fed from the CSV: the observations arrive as arrays again
    real.add("memory", env={"MEMORY_FILE_PATH": str(tmp_path / "memory2.jsonl")})
    real.world.servers["memory2"] = real.world.servers.pop("memory")
    proxy2 = real.start()
    fed = call(proxy2, "call_tool_with_file_content", server="memory2", tool_name="create_entities",
               file_path=out["path"], data_key="entities")
    assert not fed.get("isError"), text_of(fed)
    graph = json.loads(text_of(upstream(proxy2, "memory2", "read_graph")))
    assert sorted(graph["entities"], key=lambda e: e["name"]) == entities


# -- 7. the configs people have


def test_vscode_jsonc_config_with_workspace_folder(real, tmp_path):
    need("filesystem", "time")
    workspace = tmp_path / "workspace"
    (workspace / ".vscode").mkdir(parents=True)
    (workspace / "files").mkdir()
    (workspace / "files" / "w.txt").write_text("from the workspace")
    config = workspace / ".vscode" / "mcp.json"
    config.write_text(f"""{{
  // VS Code's own format: comments, trailing commas, ${{workspaceFolder}}
  "inputs": [{{"type": "promptString", "id": "tz", "description": "Time zone"}}],
  "servers": {{
    "filesystem": {{
      "type": "stdio",
      "command": "{COMMANDS['filesystem']}",
      "args": ["${{workspaceFolder}}${{pathSeparator}}files"], /* the workspace's folder */
    }},
    "time": {{"command": "{COMMANDS['time']}", "args": ["--local-timezone", "${{input:tz}}"],}},
  }},
}}
""")
    env = real.world.env(write=False, APP_CONFIG_PATH=str(config))
    proxy = real.world.start(str(real.world.dir), env=env)
    res = upstream(proxy, "filesystem", "read_text_file", path=str(workspace / "files" / "w.txt"))
    assert text_of(res) == "from the workspace"
    bad = call(proxy, "call_tool", server="time", tool_name="get_current_time", tool_args={"timezone": "UTC"})
    assert bad["isError"] and "${input:tz}" in text_of(bad) and '"inputs"' in text_of(bad)
    real.world.settings = {"inputs": {"tz": "Europe/Paris"}}
    proxy2 = real.world.start(str(real.world.dir), env=real.world.env(write=False, APP_CONFIG_PATH=str(config)))
    ok = upstream(proxy2, "time", "get_current_time", timezone="UTC")
    assert json.loads(text_of(ok))["timezone"] == "UTC"


# -- 8. listings cost little context


def test_listing_of_every_real_server_is_compact(real):
    need("filesystem", "memory", "everything", "time")
    real.filesystem()
    for name in ("memory", "everything", "time"):
        real.add(name)
    if "git" in INSTALLED:
        real.add("git")
    proxy = real.start()
    res = call(proxy, "list_available_tools")
    entries = res["structuredContent"]["tools"]
    assert len(entries) >= 30
    assert all(len(e["description"]) <= 151 and "\n" not in e["description"] for e in entries)
    text = text_of(res)
    assert len(text) < 120 * len(entries), f"{len(text)} characters for {len(entries)} tools"
    for e in entries:
        assert (f"{e['tool']}: {e['description']}" if e["description"] else e["tool"]) in text
    detailed = call(proxy, "list_available_tools", detailed=True)["structuredContent"]["tools"]
    read = next(e for e in detailed if e["tool"] == "read_text_file")
    assert "inputSchema" in read and len(read["description"]) > 150  # the whole description


def test_cached_text_file_is_stored_by_token_as_txt(real):
    real.filesystem()
    big = "".join(f"entry {i}: some text, with commas\n" for i in range(5000))
    (real.data / "log.txt").write_text(big)
    proxy = real.start()
    cached = upstream(proxy, "filesystem", "read_text_file", path=str(real.data / "log.txt"))
    token = re.search(r"Token: (\S+) ", text_of(cached)).group(1)
    out = call(proxy, "call_tool_and_store", cache_token=token)["structuredContent"]
    assert out["format"] == "txt" and Path(out["path"]).read_text() == big


# -- issue 18: search, filter and rename, names clients accept


def search(proxy, query: str, **kw) -> List[dict]:
    res = call(proxy, "list_available_tools", query=query, **kw)
    assert not res.get("isError"), text_of(res)
    return res["structuredContent"]["tools"]


def test_search_finds_a_tool_by_its_purpose_among_100_tools(real, tmp_path):
    need("filesystem", "memory", "everything", "git", "time")
    for i in range(3):
        real.add("filesystem", str(real.data))
        real.world.servers[f"files{i}"] = real.world.servers.pop("filesystem")
    for i in range(2):
        real.add("memory", env={"MEMORY_FILE_PATH": str(tmp_path / f"m{i}.jsonl")})
        real.world.servers[f"memory{i}"] = real.world.servers.pop("memory")
    for i in range(3):
        real.add("everything")
        real.world.servers[f"everything{i}"] = real.world.servers.pop("everything")
    real.add("git")
    real.add("time")
    proxy = real.start()
    total = call(proxy, "list_available_tools")["structuredContent"]["total_tools"]
    assert total >= 100
    purposes = {
        "what time is it now in a given timezone": ("time", "get_current_time"),
        "show the commit log": ("git", "git_log"),
        "convert a time between time zones": ("time", "convert_time"),
        "add observations to entities in the knowledge graph": (None, "add_observations"),
        "find files whose names match a pattern": (None, "search_files"),
        "get the size and modification time of a file": (None, "get_file_info"),
    }
    for query, (server, tool) in purposes.items():
        hits = search(proxy, query)
        assert hits and hits[0]["tool"] == tool, (query, [(h["server"], h["tool"]) for h in hits[:5]])
        if server is not None:
            assert hits[0]["server"] == server
        assert len(hits) <= 10 and all(h["score"] > 0 for h in hits)
        assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
        assert all(len(h["description"]) <= 151 for h in hits)
    assert len(search(proxy, "file", limit=3)) == 3
    only = search(proxy, "time", filter_by_server="git")
    assert all(h["server"] == "git" for h in only)


def test_hostile_queries_are_just_words(real):
    need("time", "git")
    real.add("time")
    real.add("git")
    proxy = real.start()
    for q in ['" OR 1=1 --', "name:* NEAR(a b)", "'); DROP TABLE tools; --", "*", "AND OR NOT",
              "x" * 5000, "\u0000\ud800 zeit ☃", "^time", '"get_current_time"']:
        res = call(proxy, "list_available_tools", query=q)
        assert not res.get("isError"), (q, text_of(res))
        assert isinstance(res["structuredContent"]["tools"], list)
    none = call(proxy, "list_available_tools", query="!!! ???")
    assert none["structuredContent"]["tools"] == [] and "No tool matches" in text_of(none)
    assert search(proxy, '"get_current_time"')[0]["tool"] == "get_current_time"
    assert proxy.result("ping") == {}


FS_SETTINGS = {"servers": {"filesystem": {
    "deny_tools": ["write_*", "edit_file", "move_file", "create_*"],
    "tools": {"read_text_file": {"name": "read_document", "description": "Read one document from the archive."},
              "list_directory": {"description": "Show what a folder holds."}}}}}


def test_deny_rename_and_description_through_listing_search_and_calls(real):
    real.filesystem()
    (real.data / "doc.txt").write_text("the document")
    proxy = real.start(settings=FS_SETTINGS)
    listing = call(proxy, "list_available_tools")
    names = {e["tool"] for e in listing["structuredContent"]["tools"]}
    assert "read_document" in names and "read_text_file" not in names
    assert not names & {"write_file", "edit_file", "move_file", "create_directory"}
    assert "write_file" not in text_of(listing) and "read_document: Read one document from the archive." \
        in text_of(listing)
    details = call(proxy, "list_tool_details", server="filesystem", tool_name="read_document")
    assert details["structuredContent"]["tool"]["description"] == "Read one document from the archive."
    assert text_of(upstream(proxy, "filesystem", "read_document", path=str(real.data / "doc.txt"))) == "the document"
    for hidden in ("write_file", "read_text_file"):
        res = call(proxy, "call_tool", server="filesystem", tool_name=hidden,
                   tool_args={"path": str(real.data / "x.txt"), "content": "no"})
        assert res["isError"] and f"has no tool '{hidden}'" in text_of(res)
        assert "write_file" not in text_of(res).split("Its tools:")[1]
    assert not (real.data / "x.txt").exists()
    assert all(h["tool"] != "write_file" for h in search(proxy, "write a new file with content"))
    assert search(proxy, "archive document")[0]["tool"] == "read_document"
    stored = store(proxy, "filesystem", "read_document", {"path": str(real.data / "doc.txt")})
    assert Path(stored["path"]).read_text() == "the document"


def test_allow_list_and_renames_in_transparent_mode(real):
    real.filesystem()
    (real.data / "doc.txt").write_text("the document")
    settings = json.loads(json.dumps(FS_SETTINGS))
    settings["servers"]["filesystem"]["allow_tools"] = ["read_*", "list_*"]
    settings["servers"]["filesystem"]["deny_tools"] = ["read_media_file"]
    proxy = real.start("--expose", "direct", settings=settings)
    tools = {t["name"]: t for t in proxy.result("tools/list", timeout=WAIT)["tools"]}
    fs = sorted(n for n in tools if n.startswith("filesystem__"))
    assert fs == ["filesystem__list_allowed_directories", "filesystem__list_directory",
                  "filesystem__list_directory_with_sizes", "filesystem__read_document",
                  "filesystem__read_file", "filesystem__read_multiple_files"]
    assert tools["filesystem__list_directory"]["description"] == "Show what a folder holds."
    res = call(proxy, "filesystem__read_document", path=str(real.data / "doc.txt"))
    assert text_of(res) == "the document"
    refused = proxy.request("tools/call", {"name": "filesystem__write_file", "arguments": {
        "path": str(real.data / "y.txt"), "content": "no"}}, timeout=WAIT)
    assert refused["error"]["code"] == -32602 and not (real.data / "y.txt").exists()


NAME_OK = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_transparent_names_fit_clients_and_are_deterministic(real):
    need("time")
    long_server = "a-very-long-server-name-for-the-company-wide-time-service-v2"
    for name in ("t.z", "t_z", "zeit ☃ server", long_server):
        real.add("time")
        real.world.servers[name] = real.world.servers.pop("time")
    seen = []
    for _ in range(2):
        proxy = real.start("--expose", "direct")
        listed = proxy.result("tools/list", timeout=WAIT)["tools"]
        names = [t["name"] for t in listed]
        required = {t["name"]: t["inputSchema"].get("required", []) for t in listed}
        seen.append(names)
        ours = [n for n in names if n != "retrieve_cached_output"]
        assert len(ours) == 8 and len(set(ours)) == 8
        assert all(NAME_OK.match(n) for n in names), names
        for n in ours:  # every name can be called
            res = call(proxy, n, **({"timezone": "UTC"} if required[n] == ["timezone"] else
                                    {"source_timezone": "UTC", "time": "12:00", "target_timezone": "UTC"}))
            assert not res.get("isError"), (n, text_of(res))
        proxy.stop()
    assert seen[0] == seen[1]
    assert "t_z__get_current_time" in seen[0]  # the first server in the config keeps the plain name
    check = real.world.check(timeout=120)
    out = check.stdout.decode()
    assert "transparent mode renames" in out and "server 'zeit ☃ server' is written zeit___server" in out
    assert "context: --expose meta lists" in out and re.search(r"t\.z +direct: 2 tools, [\d.]+ KB", out)


# -- 10. query_output: SQL over what real servers returned


def test_query_output_over_a_csv_server_filesystem_read(real):
    real.filesystem()
    records = write_csv(real.data / "people.csv", 3000)
    proxy = real.start(settings={"output_cache": {"min_size": 1000}})
    cached = upstream(proxy, "filesystem", "read_text_file", path=str(real.data / "people.csv"))
    token = re.search(r"Token: (\S+) ", text_of(cached)).group(1)
    assert "characters of text, 3,001 lines)" in text_of(cached)
    assert f'query_output {{"source": "{token}", "sql": "SELECT count(*) FROM data"}} (table data; columns: id, zip, ' \
           f'name, score)' in text_of(cached)
    res = call(proxy, "query_output", source=token,
               sql="SELECT zip, typeof(zip) AS t, name FROM data WHERE score >= 2997 ORDER BY id")
    assert not res.get("isError"), text_of(res)
    want = [{"zip": r["zip"], "t": "text", "name": r["name"]} for r in records if float(r["score"]) >= 2997]
    assert res["structuredContent"]["rows"] == want and len(want) == 3  # "02134" stays text, 1.50 is a number
    stored = call(proxy, "query_output", source=token, sql="SELECT id, name FROM data WHERE id % 2 = 0",
                  file_format="csv", filename="even")
    with open(stored["structuredContent"]["path"], newline="") as f:
        assert list(csv.DictReader(f)) == [{"id": r["id"], "name": r["name"]} for r in records if int(r["id"]) % 2 == 0]


def test_query_output_over_server_memory_graph(real, tmp_path):
    real.add("memory", env={"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")})
    proxy = real.start(settings={"output_cache": {"min_size": 200}})
    entities = [{"name": f"e{i}", "entityType": "city" if i % 2 else "person",
                 "observations": [f"obs {j}" for j in range(i % 4)]} for i in range(12)]
    upstream(proxy, "memory", "create_entities", entities=entities)
    upstream(proxy, "memory", "create_relations", relations=[{"from": "e0", "to": f"e{i}", "relationType": "knows"}
                                                              for i in range(1, 4)])
    cached = upstream(proxy, "memory", "read_graph")
    token = re.search(r"Token: (\S+) ", text_of(cached)).group(1)
    # the cached answer shows the graph's shape and the query_output call to make
    assert "entities: list of 12 objects\nrelations: list of 3 objects" in text_of(cached)
    assert f'query_output {{"source": "{token}", "records_pointer": "/entities"' in text_of(cached)
    plain = call(proxy, "query_output", source=token, sql="SELECT * FROM data")
    assert plain["isError"] and "records_pointer" in text_of(plain) and "/entities" in text_of(plain)
    res = call(proxy, "query_output", source=token, records_pointer="/entities",
               sql="SELECT entityType, count(*) AS n, sum(json_array_length(observations)) AS obs "
                   "FROM data GROUP BY entityType ORDER BY entityType")
    assert not res.get("isError"), text_of(res)
    assert res["structuredContent"]["rows"] == [
        {"entityType": t, "n": 6, "obs": sum(len(e["observations"]) for e in entities if e["entityType"] == t)}
        for t in ("city", "person")]
    rel = call(proxy, "query_output", source=token, records_pointer="/relations",
               sql="SELECT group_concat(\"to\", ',') AS tos FROM data WHERE \"from\" = 'e0'")
    assert sorted(rel["structuredContent"]["rows"][0]["tos"].split(",")) == ["e1", "e2", "e3"]


# -- what server-everything asks of the client (issue 17): relayed through Abstract

ASKS = {"sampling": {}, "elicitation": {"form": {}, "url": {}}}


def asked(proxy, method: str) -> dict:
    return wait_for(lambda: next((r for r in proxy.server_requests if r["method"] == method), None),
                    WAIT, f"Abstract to relay {method} to the client")


def meta_call(proxy, tool: str, args: dict):
    return proxy.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "everything", "tool_name": tool, "tool_args": args}})


def test_everything_sampling_and_elicitation_reach_the_client_in_meta_mode(real):
    real.add("everything")
    proxy = real.start(capabilities=ASKS)
    rid = meta_call(proxy, "trigger-sampling-request", {"prompt": "say hi", "maxTokens": 7})
    q = asked(proxy, "sampling/createMessage")
    assert q["params"]["maxTokens"] == 7 and "say hi" in q["params"]["messages"][0]["content"]["text"]
    proxy.send({"jsonrpc": "2.0", "id": q["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "hi from the client's model"}, "model": "m"}})
    assert "hi from the client's model" in text_of(proxy.wait_response(rid, WAIT)["result"])

    rid = meta_call(proxy, "trigger-elicitation-request", {})
    q = asked(proxy, "elicitation/create")
    assert "name" in q["params"]["requestedSchema"]["properties"]
    proxy.send({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "accept", "content": {
        "name": "Ada Lovelace", "check": True, "email": "ada@example.com", "integer": 3}}})
    text = " ".join(i.get("text", "") for i in proxy.wait_response(rid, WAIT)["result"]["content"])
    assert "User provided the requested information" in text and "Ada Lovelace" in text


def test_everything_url_elicitation_and_decline_in_direct_mode(real):
    real.add("everything")
    proxy = real.start("--expose", "direct", capabilities=ASKS)
    names = {t["name"] for t in proxy.result("tools/list", {}, timeout=WAIT)["tools"]}
    assert {"everything__trigger-url-elicitation", "everything__trigger-elicitation-request"} <= names
    rid = proxy.send_request("tools/call", {"name": "everything__trigger-url-elicitation", "arguments": {
        "url": "https://example.com/login", "elicitationId": "e-1"}})
    q = asked(proxy, "elicitation/create")
    assert q["params"]["mode"] == "url" and q["params"]["url"] == "https://example.com/login"
    proxy.send({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "accept"}})
    assert "User completed the URL elicitation flow" in text_of(proxy.wait_response(rid, WAIT)["result"])
    rid = proxy.send_request("tools/call", {"name": "everything__trigger-elicitation-request", "arguments": {}})
    q = wait_for(lambda: [r for r in proxy.server_requests if r["method"] == "elicitation/create"][1:],
                 WAIT, "a second elicitation")[0]
    proxy.send({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "decline"}})
    assert "declined" in text_of(proxy.wait_response(rid, WAIT)["result"])


def test_everything_offers_no_asking_tools_to_a_client_without_the_capabilities(real):
    real.add("everything")
    proxy = real.start("--expose", "direct")
    names = {t["name"] for t in proxy.result("tools/list", {}, timeout=WAIT)["tools"]}
    assert "everything__echo" in names
    assert not {n for n in names if "sampling" in n or "elicitation" in n}, names


def test_cancelling_a_call_while_everything_waits_for_the_user(real):
    real.add("everything")
    proxy = real.start(capabilities=ASKS)
    rid = meta_call(proxy, "trigger-elicitation-request", {})
    q = asked(proxy, "elicitation/create")
    proxy.notify("notifications/cancelled", {"requestId": rid, "reason": "stop"})
    wait_for(lambda: [n for n in proxy.notifications if n["method"] == "notifications/cancelled"
                      and n["params"]["requestId"] == q["id"]], WAIT, "the question to be withdrawn")
    assert "Echo: after" in text_of(upstream(proxy, "everything", "echo", message="after"))
    assert json.dumps(rid) not in proxy.responses


SDK_PY = Path(os.environ.get("ABSTRACT_INTEROP_HOME") or "/tmp/abstract-interop") / "venv" / "bin" / "python"


def sdk_client(real, script: str, mode: str, tool: str, args: dict) -> dict:
    """Run an official-SDK client script of this folder against Abstract (--expose mode) with
    server-everything; what it printed."""
    if not SDK_PY.exists():
        pytest.skip(f"the MCP Python SDK venv is not at {SDK_PY} (run ../shared/interop/setup.sh)")
    real.add("everything")
    cmd = [str(SDK_PY), str(Path(__file__).with_name(script)), tool, json.dumps(args), "--",
           sys.executable, str(ABSTRACT), "--expose", mode, str(real.world.dir)]
    done = subprocess.run(cmd, env=real.world.env(), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("mode,tool,args,expect", [
    ("meta", "call_tool", {"server": "everything", "tool_name": "trigger-sampling-request",
                           "tool_args": {"prompt": "tell a joke"}}, "sampled: Resource trigger-sampling-request context: tell a joke"),
    ("meta", "call_tool", {"server": "everything", "tool_name": "trigger-elicitation-request"}, "Name: Ada"),
    ("direct", "everything__trigger-url-elicitation", {"url": "https://example.com/x"}, "completed the URL elicitation"),
    ("direct", "everything__trigger-sampling-request", {"prompt": "p"}, "sampled: Resource"),
])
def test_official_python_sdk_client_answers_everythings_questions(real, mode, tool, args, expect):
    """mcp 2.3.0's ClientSession with sampling and elicitation callbacks, through Abstract."""
    out = sdk_client(real, "sdk_asking_client.py", mode, tool, args)
    assert not out["isError"] and out["asked"], out
    assert expect in "\n".join(out["texts"]), out


@pytest.mark.parametrize("mode,tool,args,expect", [
    ("meta", "call_tool", {"server": "everything", "tool_name": "trigger-elicitation-request"},
     "Name: Ada"),
    ("meta", "call_tool", {"server": "everything", "tool_name": "trigger-sampling-request",
                           "tool_args": {"prompt": "tell a joke"}}, "sampled: Resource trigger-sampling"),
    ("direct", "everything__trigger-elicitation-request", {}, "Name: Ada"),
    ("direct", "everything__trigger-sampling-request", {"prompt": "p"}, "sampled: Resource"),
    ("direct", "everything__trigger-url-elicitation", {"url": "https://example.com/x"},
     "completed the URL elicitation"),
])
def test_official_python_sdk_2026_client_gets_everythings_questions_as_input_required(real, mode, tool,
                                                                                    args, expect):
    """mcp 2.3.0's mcp.Client speaking 2026-07-28 (no session, so no requests to it): the
    handshake-era server-everything's elicitation/create and sampling/createMessage reach it as
    input_required results, and its retries bring the answers back."""
    out = sdk_client(real, "sdk_modern_client.py", mode, tool, args)
    assert out["version"] == "2026-07-28" and not out["isError"] and len(out["asked"]) == 1, out
    assert expect in "\n".join(out["texts"]), out


@pytest.mark.parametrize("tool", ["call_tool", "everything__simulate-research-query"])
def test_everythings_task_only_tool_is_awaited_like_any_call(real, tool):
    """simulate-research-query declares execution.taskSupport "required" (2025-11-25 tasks):
    Abstract makes the call a task and waits with tasks/result; its elicitation on the way
    (ambiguous: true) reaches the client as any other."""
    real.add("everything")
    proxy = real.start("--expose", "both", capabilities=ASKS)
    args = {"topic": "python", "ambiguous": True}
    if tool == "call_tool":
        args = {"server": "everything", "tool_name": "simulate-research-query", "tool_args": args}
    else:
        proxy.result("tools/list", {}, timeout=WAIT)
    rid = proxy.send_request("tools/call", {"name": tool, "arguments": args})
    q = asked(proxy, "elicitation/create")
    assert "python" in q["params"]["message"]
    proxy.send({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "accept", "content": {
        "interpretation": "the programming language"}}})
    res = proxy.wait_response(rid, WAIT)["result"]
    text = "\n".join(i.get("text", "") for i in res["content"])
    assert not res.get("isError") and "Research Report" in text and "the programming language" in text, text


def test_a_clients_task_on_everything_passes_through_in_direct_mode(real):
    real.add("everything")
    proxy = real.start("--expose", "direct")
    proxy.result("tools/list", {}, timeout=WAIT)
    made = proxy.result("tools/call", {"name": "everything__simulate-research-query",
                                       "arguments": {"topic": "rust"}, "task": {"ttl": 60000}}, timeout=WAIT)
    tid = made["task"]["taskId"]
    assert proxy.result("tasks/get", {"taskId": tid}, timeout=WAIT)["status"] in ("working", "completed")
    done = proxy.result("tasks/result", {"taskId": tid}, timeout=WAIT)
    assert "Research Report" in "\n".join(i.get("text", "") for i in done["content"])


# -- issue 16: long answers read without decoding them whole


def test_filesystem_long_reads_are_cached_as_the_files_hold_them(real):
    """server-filesystem answers a read with the text twice (a text item and structuredContent),
    each over 1 MiB here: both long strings are read a piece at a time and decoded whole."""
    real.filesystem()
    text = "".join(f'{i} "quoted" back\\slash \\\\ tab\tcafé ✓ 日本 🚀 \u2028 end\n' for i in range(60000))
    rows = [{"id": i, "note": f'row {i}: "q" \\ é 🚀 \t', "tags": ["a", i]} for i in range(20000)]
    (real.data / "log.txt").write_text(text, encoding="utf-8")
    (real.data / "rows.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    proxy = real.start()
    for name in ("log.txt", "rows.json"):
        cached = upstream(proxy, "filesystem", "read_text_file", path=str(real.data / name))
        token = re.search(r"Token: (\S+) ", text_of(cached)).group(1)
        out = call(proxy, "call_tool_and_store", cache_token=token)["structuredContent"]
        got = Path(out["path"]).read_text(encoding="utf-8")
        assert (got == text) if name == "log.txt" else (json.loads(got) == rows), name
    count = call(proxy, "query_output", source=token, sql="SELECT count(*) AS n FROM data")
    assert count["structuredContent"]["rows"] == [{"n": len(rows)}]


def test_filesystem_json_export_is_cached_in_one_pass_a_record_a_line(real):
    """server-filesystem answers read_text_file with the text and its twin in structuredContent
    ({"content": <the text>}): a JSON export over 1 MiB is cached in one pass, its records never
    all held as Python objects. Seen from outside: each line of the cached text is the file's own
    text for that record (the whole parse writes {"id": 1, ...}, with spaces), the peak memory
    stays under four times the file, and query_output counts every record."""
    from conftest import proc_status
    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("measures memory in /proc")
    real.filesystem()
    rows = [{"id": i, "name": f"name {i}", "note": f'café "{i}" \\ 🚀', "tags": ["a", i % 7], "ok": i % 2 == 0}
            for i in range(120000)]
    compact = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in rows]
    path = real.data / "export.json"
    path.write_text("[" + ",".join(compact) + "]", encoding="utf-8")
    size = path.stat().st_size
    proxy = real.start()
    assert text_of(upstream(proxy, "filesystem", "list_allowed_directories"))  # (started: warm)
    before = proc_status(proxy.pid, "VmRSS")
    Path(f"/proc/{proxy.pid}/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
    cached = upstream(proxy, "filesystem", "read_text_file", path=str(path))
    grew = (proc_status(proxy.pid, "VmHWM") - before) * 1024
    token = cached["structuredContent"]["token"]
    assert f"{len(rows):,} records" in text_of(cached)
    assert grew < 4 * size, f"peak memory grew by {grew / size:.1f} times the {size / 1e6:.1f} MB file"
    got = text_of(call(proxy, "retrieve_cached_output", token=token, start_line=2, end_line=4))
    assert got.splitlines()[:3] == [line + "," for line in compact[:3]], got[:300]
    count = call(proxy, "query_output", source=token, sql="SELECT count(*) AS n, sum(ok) AS k FROM data")
    assert count["structuredContent"]["rows"] == [{"n": len(rows), "k": len(rows) // 2}]
