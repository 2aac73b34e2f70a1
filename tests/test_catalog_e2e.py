"""The catalog end to end: `python abstract.py DIR` with fake_upstream.py behind it, the database in
the test's own directory (World.env points catalog.path there).

Every kind of output is recorded and found again (search_stored_outputs, list_stored_outputs),
hostile queries, missing files, retention, quotas, a corrupt database at start-up, --check,
--reindex, and the --memory tools.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ABSTRACT, World, base_env, text_of, wait_for

import abstract

sqlite3 = pytest.importorskip("sqlite3")  # a Python built without it: the catalog is off

MEMORY_TOOLS = ["save_message", "get_conversation", "list_conversations", "search_messages", "delete_conversation",
                "export_conversations"]
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def result_args(content: list) -> dict:
    return {"result": {"content": content}}


def records(word: str, n: int = 4) -> dict:
    data = [{"id": i, "fruit": word if i == 1 else "apple", "note": f"row {i}"} for i in range(n)]
    return result_args([{"type": "text", "text": json.dumps(data)}])


def store(p, tool_args: dict, tool: str = "result", **kw) -> dict:
    return p.call_tool("call_tool_and_store", {"server": "up", "tool_name": tool, "tool_args": tool_args, **kw},
                       timeout=20)


def search(p, query, **kw) -> dict:
    res = p.call_tool("search_stored_outputs", {"query": query, **kw})
    assert not res.get("isError"), text_of(res)
    return res


def ok(res: dict) -> dict:
    assert not res.get("isError"), text_of(res)
    return res["structuredContent"]


@pytest.fixture(scope="module")
def cw(tmp_path_factory):
    """One Abstract whose outputs of every kind are stored once, shared by the read-only tests."""
    world = World(tmp_path_factory.mktemp("catalog"))
    world.fake("up")
    world.settings = {"output_cache": {"min_size": 2000}}
    world.dir.mkdir()
    p = world.start(str(world.dir))
    made = {
        "csv": ok(store(p, records("kiwi", 5), file_format="csv", description="nightly kiwi export")),
        "image": ok(store(p, result_args([{"type": "text", "text": "{\"caption\": \"durian picture\"}"},
                                          {"type": "image", "data": base64.b64encode(PNG).decode(),
                                           "mimeType": "image/png"}]), storage_path="pics")),
        "gz": ok(store(p, records("lychee"), file_format="json", compress=True)),
    }
    feed = world.dir / "input.json"
    feed.write_text(json.dumps({"text": "papaya response text"}))
    made["response"] = ok(p.call_tool("call_tool_with_file_content", {
        "server": "up", "tool_name": "echo", "file_path": str(feed), "response_format": "txt"}, timeout=20))
    made["cached"] = ok(p.upstream("up", "echo", {"text": "pomegranate " * 400}))
    try:
        yield world, p, made
    finally:
        world.cleanup()


# ---- recording and finding

def test_tools_are_listed_and_the_database_is_the_tests_own(cw):
    world, p, _ = cw
    names = [t["name"] for t in p.result("tools/list")["tools"]]
    assert "search_stored_outputs" in names and "list_stored_outputs" in names
    assert not set(MEMORY_TOOLS) & set(names)
    assert (world.tmp / "catalog.sqlite3").exists()


def test_each_kind_of_output_is_recorded(cw):
    world, p, made = cw
    hit = ok(search(p, "kiwi"))["results"]
    assert len(hit) == 1
    csv_row = hit[0]
    assert (csv_row["kind"], csv_row["server"], csv_row["tool"], csv_row["format"]) == ("stored", "up", "result", "csv")
    assert csv_row["path"] == made["csv"]["path"] and csv_row["uri"] == Path(made["csv"]["path"]).as_uri()
    assert csv_row["bytes"] == os.path.getsize(made["csv"]["path"]) and csv_row["missing"] is False
    assert (csv_row["rows"], csv_row["columns"]) == (5, 3) and csv_row["description"] == "nightly kiwi export"
    assert csv_row["arguments"]["file_format"] == "csv" and "<mark>kiwi</mark>" in csv_row["snippet"]
    assert csv_row["time"].endswith("Z")

    durian = ok(search(p, "durian"))["results"]
    assert [r["format"] for r in durian] == ["json"]
    pics = ok(p.call_tool("list_stored_outputs", {"limit": 200}))["outputs"]
    png = [r for r in pics if r["format"] == "png"]
    assert len(png) == 1 and png[0]["path"] == made["image"]["files"][0]["path"] and png[0]["bytes"] == len(PNG)

    lychee = ok(search(p, "lychee"))["results"]  # gzip: the text is read decompressed
    assert len(lychee) == 1 and lychee[0]["path"].endswith(".json.gz")

    resp = ok(search(p, "papaya"))["results"]
    assert [(r["kind"], r["tool"], r["format"]) for r in resp] == [("response", "echo", "txt")]
    assert resp[0]["path"] == made["response"]["path"]

    cached = ok(search(p, "pomegranate"))["results"]
    assert len(cached) == 1 and cached[0]["kind"] == "cached" and cached[0]["token"] == made["cached"]["token"]
    assert cached[0]["uri"] == "abstract://cache/" + made["cached"]["token"] and "path" not in cached[0]
    assert cached[0]["missing"] is False and "arguments" not in cached[0]  # over 1,000 characters: left out


def test_recorded_digests_are_those_of_the_files_as_written(cw):
    """The writer hashes what it writes (compressed bytes for .gz), so the catalog's sha256 and
    size are the file's own, without reading the file again."""
    world, _, made = cw
    with contextlib.closing(sqlite3.connect(str(world.tmp / "catalog.sqlite3"))) as db:
        for key in ("csv", "gz", "response"):
            path = made[key]["path"]
            digest, size = db.execute("SELECT sha256, bytes FROM outputs WHERE path = ?", (path,)).fetchone()
            data = Path(path).read_bytes()
            assert (digest, size) == (hashlib.sha256(data).hexdigest(), len(data)), key


def test_search_answer_is_compact_text_plus_structured(cw):
    _, p, made = cw
    res = search(p, "kiwi")
    text = text_of(res)
    assert text.splitlines()[0] == "1 stored output match 'kiwi' (words, best first):"
    assert made["csv"]["path"] in text and "up.result" in text and "5 rows" in text and "<mark>kiwi</mark>" in text
    sc = res["structuredContent"]
    assert (sc["mode"], sc["engine"], sc["words"], sc["next_offset"]) == ("words", "fts5", ["kiwi"], None)


def test_filters_modes_and_pagination(cw):
    _, p, _ = cw
    assert ok(search(p, "apple", tool="result"))["results"]
    assert ok(search(p, "apple", tool="echo"))["results"] == []
    assert ok(search(p, "apple", server="other"))["results"] == []
    assert ok(search(p, "apple", since="2999-01-01"))["results"] == []
    assert len(ok(search(p, "apple", until="2999-01-01"))["results"]) == 2
    assert ok(search(p, "lych", mode="prefix"))["results"] and not ok(search(p, "lych"))["results"]
    assert ok(search(p, "nightly kiwi", mode="phrase"))["results"]
    assert not ok(search(p, "kiwi nightly", mode="phrase"))["results"]
    first = ok(search(p, "apple", limit=1))
    assert len(first["results"]) == 1 and first["next_offset"] == 1
    second = ok(search(p, "apple", limit=1, offset=1))
    assert second["results"][0]["id"] != first["results"][0]["id"] and second["next_offset"] is None
    for bad, frag in [({"query": 3}, "query"), ({"query": "x", "mode": "regex"}, "mode"),
                      ({"query": "x", "since": "last week"}, "ISO 8601"), ({"query": "x", "limit": 0}, "limit")]:
        res = p.call_tool("search_stored_outputs", bad)
        assert res.get("isError") is True and frag in text_of(res)


def test_hostile_queries_never_error(cw):
    _, p, _ = cw
    for q in ['"', "((kiwi", "kiwi*", "-kiwi", "NEAR(kiwi apple)", "kiwi OR", "'; DROP TABLE outputs; --",
              "\" OR 1=1 --", "x" * 10240, "日本語 🚀", "", "   ", "\\%_", "text:kiwi"]:
        for mode in ("words", "phrase", "prefix"):
            search(p, q, mode=mode)
    assert ok(search(p, "((kiwi"))["results"] and ok(search(p, '"kiwi'))["results"]
    empty = search(p, "!!!")
    assert "no words" in text_of(empty) and empty["structuredContent"]["results"] == []


def test_list_is_newest_first_with_a_cursor(cw):
    _, p, _ = cw
    every = ok(p.call_tool("list_stored_outputs", {"limit": 200}))
    times = [r["time"] for r in every["outputs"]]
    assert times == sorted(times, reverse=True) and every["next_cursor"] is None
    got, cursor = [], None
    while True:
        page = ok(p.call_tool("list_stored_outputs", {"limit": 2, **({"cursor": cursor} if cursor else {})}))
        got += [r["id"] for r in page["outputs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert got == [r["id"] for r in every["outputs"]]
    assert {r["kind"] for r in ok(p.call_tool("list_stored_outputs", {"kind": "cached"}))["outputs"]} == {"cached"}
    res = p.call_tool("list_stored_outputs", {"cursor": "nonsense"})
    assert res.get("isError") is True and "Invalid cursor" in text_of(res)


def test_moved_file_is_reported_missing_and_retention_only_shows(world):
    world.fake("up")
    p = world.start()
    path = Path(ok(store(p, records("quince"), file_format="csv"))["path"])
    kept = Path(ok(store(p, records("medlar"), file_format="csv"))["path"])
    path.rename(path.with_name("moved.csv"))
    hit = ok(search(p, "quince"))["results"][0]
    assert hit["missing"] is True
    assert "[missing: the file is no longer there]" in text_of(search(p, "quince"))
    res = p.call_tool("list_stored_outputs", {"retention_days": 1e-12})
    sc = ok(res)
    marks = {r["path"]: r["would_remove"] for r in sc["outputs"]}
    assert marks == {str(path): False, str(kept): True}  # a missing file is nothing to remove
    assert sc["retention"]["files"] == 1 and sc["retention"]["bytes"] == kept.stat().st_size
    assert "never deletes" in text_of(res) and kept.exists()
    assert ok(p.call_tool("list_stored_outputs", {"retention_days": 30}))["retention"]["files"] == 0


def test_quota_refuses_before_calling_the_tool(world):
    world.fake("up")
    world.settings = {"storage": {"max_total_mb": 1}}
    big = world.dir / "filler.bin"
    world.dir.mkdir()
    big.write_bytes(b"\0" * (1024 * 1024 + 10))
    p = world.start()
    calls = len(world.events("up", "call"))
    res = store(p, records("fig"), file_format="csv")
    assert res.get("isError") is True
    text = text_of(res)
    assert os.path.realpath(world.dir) in text and "1.0 MB" in text and "limit of 1 MB" in text
    assert "never deletes" in text
    assert len(world.events("up", "call")) == calls  # the tool never ran
    big.unlink()
    ok(store(p, records("fig"), file_format="csv"))
    assert [f.name for f in world.dir.iterdir()][0].startswith("up-result-")


def test_per_directory_quota(world, tmp_path):
    world.fake("up")
    other = tmp_path / "other"
    world.settings = {"storage": {"directories": {str(other): {"max_total_mb": 0.001}}}}
    other.mkdir()
    (other / "x").write_bytes(b"x" * 2000)
    p = world.start(str(world.dir), str(other))
    ok(store(p, records("fig"), file_format="csv"))  # the first directory has no limit
    res = store(p, records("fig"), file_format="csv", storage_path=str(other / "sub"))
    assert res.get("isError") is True and str(other) in text_of(res) and "limit of 0.001 MB" in text_of(res)


@pytest.mark.parametrize("settings, named", [
    ({"catalog": {"enabled": "yes"}}, "catalog.enabled"),
    ({"catalog": {"max_text_kb": 0}}, "catalog.max_text_kb"),
    ({"catalog": {"where": "x"}}, "catalog.where"),
    ({"storage": {"max_total_mb": -1}}, "storage.max_total_mb"),
    ({"storage": {"directories": {"/x": {"max_total_mb": "big"}}}}, "storage.directories./x.max_total_mb"),
    ({"storage": {"directories": []}}, "storage.directories"),
])
def test_bad_catalog_and_storage_settings_stop_start_up(tmp_path, settings, named):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings))
    err = io.StringIO()
    code = abstract.main([str(tmp_path / "store")], stdin=io.BytesIO(), stdout=io.BytesIO(), stderr=err,
                         environ=base_env(ABSTRACT_CONFIG=str(path)))
    assert code == 2 and named in err.getvalue()


def test_catalog_off_hides_the_tools_and_records_nothing(world):
    world.fake("up")
    world.settings = {"catalog": {"enabled": False}}
    p = world.start()
    names = [t["name"] for t in p.result("tools/list")["tools"]]
    assert "search_stored_outputs" not in names and "list_stored_outputs" not in names
    ok(store(p, records("fig"), file_format="csv"))
    assert not (world.tmp / "catalog.sqlite3").exists()
    proc = world.check()
    assert "catalog: off (catalog.enabled is false" in proc.stdout.decode()


# ---- start-up: --check, a corrupt database, --reindex

def test_check_prints_the_catalog_line(world):
    world.fake("up")
    proc = world.check()
    out = proc.stdout.decode()
    line = [ln for ln in out.splitlines() if ln.startswith("catalog: ")]
    assert proc.returncode == 0 and line == [f"catalog: {world.tmp / 'catalog.sqlite3'}: 0 outputs, FTS5 search"]


def test_corrupt_database_at_start_up_is_moved_aside_and_abstract_serves(world):
    world.fake("up")
    db = world.tmp / "catalog.sqlite3"
    garbage = os.urandom(8192)
    db.write_bytes(garbage)
    p = world.start()
    p.wait_stderr("is corrupt")
    kept = [f for f in world.tmp.iterdir() if f.name.startswith("catalog.sqlite3.corrupt-")]
    assert len(kept) == 1 and kept[0].read_bytes() == garbage and str(kept[0]) in p.stderr
    ok(store(p, records("guava"), file_format="csv"))
    assert ok(search(p, "guava"))["results"]
    out = world.check().stdout.decode()
    assert "corrupt copies kept from earlier runs: " + str(kept[0]) in out
    p.stop()  # its -wal file would still hold the good pages
    db.write_bytes(b"garbage again" * 100)
    check = world.check()
    out = check.stdout.decode()
    assert check.returncode == 0 and "it was corrupt and was moved aside to " in out and "(kept)" in out
    assert len([f for f in world.tmp.iterdir() if ".corrupt-" in f.name and not f.name.endswith("-wal")]) == 2


def test_reindex_rebuilds_a_lost_catalog(world):
    world.fake("up")
    world.fake("my-db")
    world.settings = {"organize": "by_server", "output_cache": {"min_size": 2000}}
    p = world.start()
    csv_path = ok(store(p, records("mango"), file_format="csv"))["path"]
    dash = ok(p.call_tool("call_tool_and_store", {"server": "my-db", "tool_name": "echo",
                                                  "tool_args": {"text": "tamarind"}, "file_format": "txt"}))["path"]
    (world.dir / "mine.md").write_text("# my own notes about starfruit")
    token = ok(p.upstream("up", "echo", {"text": "cherimoya " * 400}))["token"]
    p.stop()
    for name in os.listdir(world.tmp):
        if name.startswith("catalog.sqlite3"):
            os.unlink(world.tmp / name)
    proc = subprocess.run([sys.executable, str(ABSTRACT), "--reindex", str(world.dir)], env=world.env(),
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=30, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"reindexed {world.tmp / 'catalog.sqlite3'} from 1 directory: 3 files added, 0 "
                                  f"already catalogued, 0 unreadable, 1 cached output added; the catalog now holds 4")
    again = subprocess.run([sys.executable, str(ABSTRACT), "--reindex", str(world.dir)], env=world.env(),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=30, text=True)
    assert "0 files added, 3 already catalogued" in again.stdout and "holds 4 outputs" in again.stdout
    p = world.start()
    mango = ok(search(p, "mango"))["results"][0]
    assert (mango["server"], mango["tool"], mango["format"], mango["path"]) == ("up", "result", "csv", csv_path)
    assert mango["bytes"] == os.path.getsize(csv_path)
    tam = ok(search(p, "tamarind"))["results"][0]
    assert (tam["server"], tam["tool"], tam["path"]) == ("my-db", "echo", dash)
    own = ok(search(p, "starfruit"))["results"][0]
    assert (own["server"], own["tool"], own["format"]) == ("", "", "md")
    assert ok(search(p, "cherimoya"))["results"][0]["token"] == token


def test_a_store_with_an_unwritable_catalog_still_succeeds(world):
    world.fake("up")
    p = world.start()
    db = world.tmp / "catalog.sqlite3"
    wait_for(db.exists)
    with sqlite3.connect(db, timeout=5) as other:  # every insert into the catalog now fails
        other.execute("DROP TRIGGER outputs_ai")
        other.execute("CREATE TRIGGER outputs_ai AFTER INSERT ON outputs BEGIN SELECT RAISE(ABORT, 'broken'); END")
    res = store(p, records("fig"), file_format="csv")
    assert not res.get("isError") and Path(res["structuredContent"]["path"]).exists()
    p.wait_stderr("catalog: could not record the files of up.result")


# ---- conversation memory (--memory)

@pytest.fixture
def mem(world):
    world.fake("up")
    return world, world.start("--memory", str(world.dir))


def test_memory_tools_only_with_the_flag(world):
    world.fake("up")
    plain = world.start()
    assert not set(MEMORY_TOOLS) & {t["name"] for t in plain.result("tools/list")["tools"]}
    direct = world.start("--memory", "--expose", "direct", str(world.dir))
    names = {t["name"] for t in direct.result("tools/list")["tools"]}
    assert set(MEMORY_TOOLS) <= names and "search_stored_outputs" not in names


def test_memory_needs_the_catalog(world):
    world.fake("up")
    world.settings = {"catalog": {"enabled": False}}
    proc = subprocess.run([sys.executable, str(ABSTRACT), "--memory", str(world.dir)], env=world.env(),
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=30, text=True)
    assert proc.returncode == 2 and "--memory needs the catalog" in proc.stderr


def test_each_memory_tool(mem):
    world, p = mem
    first = ok(p.call_tool("save_message", {"role": "user", "content": "Plan the Lisbon trip in May",
                                            "metadata": {"source": "test"}}))
    cid = first["conversation_id"]
    assert first["new_conversation"] is True
    reply = ok(p.call_tool("save_message", {"conversation_id": cid, "role": "assistant",
                                            "content": "Lisbon in May: book the tram tour.",
                                            "parent_message_id": first["message_id"]}))
    assert reply["new_conversation"] is False
    other = ok(p.call_tool("save_message", {"role": "user", "content": "Grocery list: figs"}))["conversation_id"]
    conv = ok(p.call_tool("get_conversation", {"conversation_id": cid}))
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant"] and conv["message_count"] == 2
    assert conv["messages"][0]["metadata"] == {"source": "test"} and conv["title"] == "Plan the Lisbon trip in May"
    page = ok(p.call_tool("get_conversation", {"conversation_id": cid, "message_limit": 1}))
    assert page["messages"][0]["id"] == reply["message_id"] and page["next_before_message_id"] == reply["message_id"]
    listed = ok(p.call_tool("list_conversations", {"limit": 1}))
    assert [c["id"] for c in listed["conversations"]] == [other] and listed["next_cursor"]
    rest = ok(p.call_tool("list_conversations", {"cursor": listed["next_cursor"]}))
    assert [c["id"] for c in rest["conversations"]] == [cid] and rest["next_cursor"] is None
    found = ok(p.call_tool("search_messages", {"query": "lisbon"}))["results"]
    assert len(found) == 2 and all("<mark>Lisbon</mark>" in h["snippet"] for h in found)
    assert ok(p.call_tool("search_messages", {"query": "tram tour", "mode": "phrase"}))["results"][0]["role"] == "assistant"
    assert ok(p.call_tool("search_messages", {"query": "lisbon", "end_date": "2000-01-01"}))["results"] == []
    assert ok(p.call_tool("search_messages", {"query": "((\"", "conversation_id": cid}))["results"] == []
    bad = p.call_tool("save_message", {"role": "robot", "content": "x"})
    assert bad.get("isError") is True and "role" in text_of(bad)
    gone = ok(p.call_tool("delete_conversation", {"conversation_id": cid}))
    assert gone == {"conversation_id": cid, "deleted_messages": 2}
    assert ok(p.call_tool("search_messages", {"query": "lisbon"}))["results"] == []
    missing = p.call_tool("get_conversation", {"conversation_id": cid})
    assert missing.get("isError") is True and "No conversation" in text_of(missing)
    db = sqlite3.connect(world.tmp / "catalog.sqlite3")
    assert db.execute("SELECT count(*) FROM messages WHERE conversation_id = ?", (cid,)).fetchone()[0] == 0
    db.close()


def test_export_both_formats_into_the_allowed_directory(mem):
    world, p = mem
    cid = ok(p.call_tool("save_message", {"role": "user", "content": "Remember: the code word is saffron"}))["conversation_id"]
    ok(p.call_tool("save_message", {"conversation_id": cid, "role": "assistant", "content": "Noted."}))
    res = p.call_tool("export_conversations", {"format": "json"})
    sc = ok(res)
    path = Path(sc["path"])
    assert path.parent == Path(os.path.realpath(world.dir)) and path.suffix == ".json"
    assert sc["conversations"] == 1 and sc["messages"] == 2 and "saffron" not in text_of(res)  # a link, not the export
    assert any(c["type"] == "resource_link" and c["uri"] == path.as_uri() for c in res["content"])
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert [m["content"] for m in doc["conversations"][0]["messages"]] == ["Remember: the code word is saffron", "Noted."]
    md = ok(p.call_tool("export_conversations", {"format": "markdown", "conversation_id": cid, "storage_path": "exports",
                                                 "filename": "memory"}))
    mpath = Path(md["path"])
    assert mpath == Path(os.path.realpath(world.dir)) / "exports" / "memory.md"
    text = mpath.read_text(encoding="utf-8")
    assert text.startswith("# Conversations") and "### user · " in text and "the code word is saffron" in text
    again = ok(p.call_tool("export_conversations", {"format": "markdown", "storage_path": "exports",
                                                    "filename": "memory.md"}))
    assert Path(again["path"]).name == "memory-1.md" and mpath.read_text(encoding="utf-8") == text  # no overwrite
    for args, frag in [({"format": "pdf"}, "json or markdown"), ({"storage_path": "/etc"}, "outside"),
                       ({"conversation_id": "nope"}, "No conversation")]:
        bad = p.call_tool("export_conversations", args)
        assert bad.get("isError") is True and frag in text_of(bad), text_of(bad)


def test_ten_concurrent_save_message_calls_all_land(mem):
    _, p = mem
    cid = ok(p.call_tool("save_message", {"role": "system", "content": "start"}))["conversation_id"]
    rids = [p.send_request("tools/call", {"name": "save_message", "arguments": {
        "conversation_id": cid, "role": "user", "content": f"parallel message {i}"}}) for i in range(10)]
    answers = [p.wait_response(rid)["result"] for rid in rids]
    assert all(not a.get("isError") for a in answers)
    assert len({a["structuredContent"]["message_id"] for a in answers}) == 10
    conv = ok(p.call_tool("get_conversation", {"conversation_id": cid}))
    assert conv["message_count"] == 11
    assert {m["content"] for m in conv["messages"]} == {"start"} | {f"parallel message {i}" for i in range(10)}
