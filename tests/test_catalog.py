"""The catalog (abstract.py's Catalog part) in-process: _Catalog(":memory:") or a file under tmp_path.

Search with FTS5 and with the forced LIKE fallback, hostile queries, pagination, corrupt files,
permissions, migrations, concurrency, conversation memory, and the helpers --reindex uses.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import stat
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import abstract

sqlite3 = pytest.importorskip("sqlite3")  # a Python built without it: the catalog is off

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
DAY = 86400.0
HOSTILE = [
    '"', '"""', "'", "unbalanced \"quote", "(", ")", "((a", "a)", "*", "a*", "*a", "-", "-a", "a -b", "+a", "^a",
    "NEAR(a b)", "NEAR/2", "a AND", "OR b", "NOT", "a NOT b", "a OR b AND", "text:a", "{text description}: a",
    "col:", ":", "\\", "%", "_", "a%b_c", "'; DROP TABLE outputs; --", "\" OR 1=1 --", "'); DELETE FROM outputs;",
    "SELECT * FROM outputs", "\x00", "a\x00b", "\n\t\r", "   ", "", "\ud800", "é\u0301", "日本語 テスト", "🚀🚀",
    "x" * 10240, "word " * 2048, "\"a\" " * 2000, "(" * 5000, "Ω≈ç√∫˜µ≤≥÷", "ﬁ ﬂ", "١٢٣", "a_b_c", "a'b\"c",
]


def _record(catalog, entry):
    """Record one output the way the store does (record_many); returns its id."""
    return catalog.record_many([entry])[0]


class _Logged(logging.Handler):
    """Abstract's log lines during a block (caplog misses them once main() has set propagate off)."""

    def __enter__(self) -> "_Logged":
        self.lines, self._log = [], logging.getLogger("abstract")
        self._level = self._log.level
        self._log.addHandler(self)
        self._log.setLevel(logging.WARNING)
        return self

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __exit__(self, *exc) -> None:
        self._log.removeHandler(self)
        self._log.setLevel(self._level)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _mem(fts=None, **kw) -> abstract._Catalog:
    return abstract._Catalog(":memory:", fts=fts, **kw)


CORPUS = [
    {"path": "/o/sales-2024.csv", "server": "shop", "tool": "orders", "format": "csv", "rows": 3, "columns": 2,
     "description": "Quarterly revenue by region",
     "text": "region,revenue\nnorth,100\nsouth,200\nRevenue grew in the north region after the spring campaign."},
    {"path": "/o/notes.md", "server": "wiki", "tool": "page", "format": "md",
     "text": "# Meeting notes\nThe spring campaign starts in March. Budget review on Friday; revenue target 2M."},
    {"path": "/o/log.txt", "server": "ops", "tool": "tail", "format": "txt",
     "text": "error: disk full on host alpha\nwarning: retrying backup of region south\nerror: backup failed"},
    {"path": "/o/users.json", "server": "shop", "tool": "customers", "format": "json",
     "text": '[{"name": "Zoë Åström", "city": "Malmö"}, {"name": "Jean Café", "city": "Paris"}]'},
    {"path": "/o/photo.png", "server": "cam", "tool": "snap", "format": "png", "text": "",
     "description": "Camera snapshot of the north gate"},
    {"kind": "cached", "token": "tok" + "a" * 21, "path": "/cache/x.txt", "server": "shop", "tool": "orders",
     "format": "json", "text": "big list of orders: order 1 north, order 2 south, order 3 west " * 20},
]
PLAIN = ["revenue", "north", "spring campaign", "region south", "backup", "error", "orders", "shop", "csv", "png",
         "camera north", "malmö", "cafe", "zoe", "2m", "100", "friday budget", "nothing_here", "rev", "ca", "o"]


def _filled(fts=None, **kw) -> abstract._Catalog:
    cat = _mem(fts, **kw)
    for i, row in enumerate(CORPUS):
        _record(cat, dict({"kind": "stored"}, **row, created=T0 + i * 60))
    return cat


def _paths(found: dict) -> list:
    return [r["path"] for r in found["results"]]


# ---- recording and searching

def test_each_kind_is_recorded_with_its_fields():
    cat = _mem()
    ids = [_record(cat, {"kind": k, "server": "s", "tool": "t", "path": f"/x/{k}.json", "token": "T" if k == "cached" else None,
                       "format": "json", "bytes": 10, "sha256": "ab", "rows": 2, "columns": 3, "text": f"hello {k}",
                       "arguments": {"q": [1, "é"]}, "description": "d"}) for k in ("stored", "response", "cached")]
    assert len(set(ids)) == 3 and all(isinstance(i, str) and i for i in ids)
    rows, cursor = cat.recent()
    assert cursor is None and [r["kind"] for r in rows] == ["cached", "response", "stored"]
    r = rows[0]
    assert (r["server"], r["tool"], r["path"], r["token"], r["format"], r["bytes"], r["nrows"], r["ncolumns"]) == \
        ("s", "t", "/x/cached.json", "T", "json", 10, 2, 3)
    assert json.loads(r["arguments"]) == {"q": [1, "é"]}
    assert r["created"].endswith("Z") and r["created"][10] == "T" and len(r["created"]) == 24
    with pytest.raises(ValueError):
        _record(cat, {"kind": "other"})


def test_text_is_kept_up_to_max_text():
    cat = _mem(max_text=100)
    _record(cat, {"path": "/a", "text": "head " + "x" * 200 + " tailword"})
    assert cat.search("head")["results"] and not cat.search("tailword")["results"]


@pytest.mark.parametrize("fts", [None, False])
def test_search_finds_words_in_text_description_server_tool_and_path(fts):
    cat = _filled(fts)
    assert set(_paths(cat.search("revenue"))) == {"/o/sales-2024.csv", "/o/notes.md"}
    assert _paths(cat.search("camera")) == ["/o/photo.png"]  # description
    assert set(_paths(cat.search("wiki"))) == {"/o/notes.md"}  # server
    assert set(_paths(cat.search("customers"))) == {"/o/users.json"}  # tool
    assert set(_paths(cat.search("notes"))) == {"/o/notes.md"}  # path and text
    assert set(_paths(cat.search("Revenue NORTH"))) == {"/o/sales-2024.csv"}  # all words, any case
    assert set(_paths(cat.search("cafe"))) == {"/o/users.json"}  # diacritics folded both ways
    assert set(_paths(cat.search("Åström"))) == {"/o/users.json"}


@pytest.mark.parametrize("fts", [None, False])
def test_modes_phrase_and_prefix(fts):
    cat = _filled(fts)
    assert set(_paths(cat.search("spring campaign", "phrase"))) == {"/o/sales-2024.csv", "/o/notes.md"}
    assert _paths(cat.search("campaign spring", "phrase")) == []
    assert set(_paths(cat.search("campaign spring", "words"))) == {"/o/sales-2024.csv", "/o/notes.md"}
    assert set(_paths(cat.search("backu", "prefix"))) == {"/o/log.txt"}
    assert _paths(cat.search("backu", "words")) == []
    assert set(_paths(cat.search("rev reg", "prefix"))) == {"/o/sales-2024.csv"}
    with pytest.raises(abstract._ToolError, match="mode"):
        cat.search("x", "regex")


def test_fallback_gives_the_same_results_as_fts5_for_plain_words():
    fts, like = _filled(None), _filled(False)
    assert fts.fts is True and like.fts is False
    for query in PLAIN:
        for mode in abstract._SEARCH_MODES:
            a = set(_paths(fts.search(query, mode, limit=100)))
            b = set(_paths(like.search(query, mode, limit=100)))
            assert a == b, (query, mode, a, b)


def test_ranking_puts_the_best_match_first():
    cat = _mem()
    filler = " ".join(f"word{i}" for i in range(300))
    _record(cat, {"path": "/weak", "text": f"{filler} zebra {filler}"})
    _record(cat, {"path": "/strong", "text": "zebra zebra zebra crossing"})
    _record(cat, {"path": "/described", "text": filler, "description": "zebra"})
    order = _paths(cat.search("zebra"))
    assert order[-1] == "/weak" and set(order) == {"/weak", "/strong", "/described"}


@pytest.mark.parametrize("fts", [None, False])
def test_snippets_mark_the_matching_words(fts):
    cat = _filled(fts)
    hit = cat.search("backup")["results"][0]
    assert "<mark>backup</mark>" in hit["snippet"]
    long = _mem(fts)
    _record(long, {"path": "/long", "text": " ".join(f"w{i}" for i in range(2000)) + " needle " + "tail " * 500})
    snip = long.search("needle")["results"][0]["snippet"]
    assert "<mark>needle</mark>" in snip and len(snip) < 400 and snip.startswith("…") and snip.endswith("…")
    phrase = cat.search("spring campaign", "phrase")["results"][0]["snippet"]
    assert "spring" in phrase and "<mark>" in phrase


@pytest.mark.parametrize("fts", [None, False])
def test_filters_server_tool_since_until(fts):
    cat = _filled(fts)
    assert set(_paths(cat.search("north", server="shop"))) == {"/o/sales-2024.csv", "/cache/x.txt"}
    assert _paths(cat.search("north", server="shop", tool="customers")) == []
    assert _paths(cat.search("north", server="cam")) == ["/o/photo.png"]
    at = functools.partial(abstract._utc, ms=True)
    assert set(_paths(cat.search("north", since=at(T0 + 60)))) == {"/o/photo.png", "/cache/x.txt"}
    assert _paths(cat.search("north", until=at(T0 + 1))) == ["/o/sales-2024.csv"]
    day = abstract._parse_when("2023-11-14", "until", end=True)
    assert day == "2023-11-15T00:00:00.000Z" and len(_paths(cat.search("north", until=day))) == 3


@pytest.mark.parametrize("fts", [None, False])
def test_search_pages_with_limit_and_offset(fts):
    cat = _mem(fts)
    for i in range(25):
        _record(cat, {"path": f"/p/{i}", "text": "common words here", "created": T0 + i})
    seen, offset = [], 0
    while True:
        page = cat.search("common", limit=10, offset=offset)
        seen += _paths(page)
        if not page["has_more"]:
            break
        offset += 10
    assert len(seen) == 25 and len(set(seen)) == 25 and offset == 20


@pytest.mark.parametrize("fts", [None, False])
def test_hostile_queries_never_error(fts):
    cat = _filled(fts)
    cat.save_message("c", "user", "hello there")
    for q in HOSTILE:
        for mode in abstract._SEARCH_MODES:
            got = cat.search(q, mode, server="'; --", since="2000-01-01T00:00:00.000Z")
            assert isinstance(got["results"], list)
            cat.search_messages(q, mode, conversation_id="\"x")
    assert cat.count() == len(CORPUS)  # nothing was dropped or deleted
    assert cat.search('"; DROP TABLE outputs; --  revenue')["results"] == []  # drop, table, outputs: AND
    assert _paths(cat.search('revenue"')) and _paths(cat.search("(revenue)")) and _paths(cat.search("-revenue*"))


def test_query_words_are_capped_and_quoted():
    words = abstract._query_words("a " * 100)
    assert len(words) == abstract._MAX_TERMS
    assert abstract._fts_query(["NEAR", "x"], "words") == '"NEAR" "x"'
    assert abstract._fts_query(["a", "b"], "phrase") == '"a b"'
    assert abstract._fts_query(["a", "a"], "prefix") == '"a"*'
    assert abstract._like_patterns(["Ab"], "prefix") == ["% ab%"]


def test_recent_pages_newest_first_with_an_opaque_cursor():
    cat = _mem()
    for i in range(7):
        _record(cat, {"path": f"/r/{i}", "server": "s" if i % 2 else "t", "created": T0 + (i // 3)})  # ties in time
    got, cursor = [], None
    while True:
        rows, cursor = cat.recent(limit=2, cursor=cursor)
        got += [r["path"] for r in rows]
        if cursor is None:
            break
        assert isinstance(cursor, str)
    assert got == [f"/r/{i}" for i in (6, 5, 4, 3, 2, 1, 0)]
    assert [r["path"] for r in cat.recent(server="s")[0]] == ["/r/5", "/r/3", "/r/1"]
    for bad in ("junk", "e30", "WzEsMl0", "\x00", "a" * 500):
        with pytest.raises(abstract._ToolError, match="cursor"):
            cat.recent(cursor=bad)


def test_retention_counts_only_existing_stored_files(tmp_path):
    cat = _mem(clock=lambda: T0 + 10 * DAY)
    old = tmp_path / "old.csv"
    old.write_text("x" * 50)
    _record(cat, {"path": str(old), "created": T0})
    _record(cat, {"path": str(tmp_path / "gone.csv"), "created": T0})
    _record(cat, {"kind": "cached", "path": str(old), "token": "t", "created": T0})
    _record(cat, {"path": str(old), "created": T0 + 9 * DAY})
    rule = cat.retention(abstract._utc(T0 + 5 * DAY, ms=True))
    assert (rule["files"], rule["bytes"], rule["complete"]) == (1, 50, True)


# ---- the FTS5-less fallback, corrupt files, permissions, migrations

def test_a_database_moves_between_fts5_and_fallback(tmp_path):
    path = str(tmp_path / "c.sqlite3")
    a = abstract._Catalog(path)
    _record(a, {"path": "/one", "text": "alpha"})
    a.close()
    b = abstract._Catalog(path, fts=False)
    assert b.fts is False and _paths(b.search("alpha")) == ["/one"]  # terms filled for old rows
    _record(b, {"path": "/two", "text": "alpha beta"})
    b.close()
    c = abstract._Catalog(path)
    assert c.fts is True and set(_paths(c.search("alpha"))) == {"/one", "/two"}  # FTS index rebuilt
    assert _paths(c.search("beta")) == ["/two"]
    c.close()


def test_corrupt_file_is_moved_aside_and_a_fresh_one_is_created(tmp_path):
    path = tmp_path / "catalog.sqlite3"
    garbage = b"this is not a database at all\x00" * 200
    path.write_bytes(garbage)
    (tmp_path / "catalog.sqlite3-wal").write_bytes(b"junk wal")
    with _Logged() as caplog:
        cat = abstract._Catalog(str(path))
    kept = Path(cat.moved_aside)
    assert kept.name.startswith("catalog.sqlite3.corrupt-") and kept.read_bytes() == garbage
    assert Path(str(kept) + "-wal").read_bytes() == b"junk wal"
    assert "corrupt" in caplog.text and str(kept) in caplog.text
    _record(cat, {"path": "/fresh", "text": "works"})
    assert _paths(cat.search("works")) == ["/fresh"]
    assert "moved aside to " + str(kept) in cat.describe()
    cat.close()
    again = abstract._Catalog(str(path))
    assert again.moved_aside == "" and str(kept) in again.describe() and again.count() == 1
    again.close()


def test_truncated_database_is_moved_aside(tmp_path):
    path = tmp_path / "c.sqlite3"
    cat = abstract._Catalog(str(path))
    for i in range(200):
        _record(cat, {"path": f"/{i}", "text": "some text " * 50})
    cat.close()
    data = path.read_bytes()
    path.write_bytes(data[:100] + b"\xff" * 4000 + data[4100:])  # header kept, schema page smashed
    fresh = abstract._Catalog(str(path))
    assert fresh.moved_aside and fresh.count() == 0
    fresh.close()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_files_are_owner_only(tmp_path):
    own = tmp_path / "data" / "abstract"
    cat = abstract._Catalog(str(own / "catalog.sqlite3"), own_dir=True)
    _record(cat, {"path": "/x", "text": "y"})
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o700
    for name in ("catalog.sqlite3", "catalog.sqlite3-wal", "catalog.sqlite3-shm"):
        if (own / name).exists():
            assert stat.S_IMODE(os.stat(own / name).st_mode) == 0o600, name
    cat.close()
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    abstract._Catalog(str(shared / "c.sqlite3")).close()
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755  # a directory the user chose is left alone


def test_schema_version_and_migrations(tmp_path):
    path = str(tmp_path / "c.sqlite3")
    abstract._Catalog(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(abstract._CATALOG_MIGRATIONS) == 1
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with _Logged() as caplog:
        cat = abstract._Catalog(path)
    assert "schema version 99" in caplog.text
    _record(cat, {"path": "/x", "text": "still usable"})
    assert cat.count() == 1
    cat.close()


# ---- concurrency

def test_concurrent_writes_from_many_threads_all_land(tmp_path):
    path = str(tmp_path / "c.sqlite3")
    one, two = abstract._Catalog(path), abstract._Catalog(path)  # two connections, as two Abstracts would have

    def work(i: int) -> None:
        cat = one if i % 2 else two
        for j in range(25):
            _record(cat, {"path": f"/t/{i}/{j}", "text": f"thread{i} item{j} shared"})
            cat.search("shared", limit=3)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(work, range(16)))
    assert one.count() == two.count() == 400
    assert len(one.search("shared", limit=100)["results"]) == 100
    assert len(one.search("thread7")["results"]) == 10 and one.search("thread7")["has_more"]
    one.close()
    two.close()


# ---- conversation memory

def test_save_and_get_conversation_with_paging():
    cat = _mem()
    first = cat.save_message(None, "user", "What is the capital of France?", metadata={"lang": "en"})
    cid = first["conversation_id"]
    assert first["new_conversation"] is True and first["message_id"]
    ids = [first["message_id"]]
    for i in range(5):
        ids.append(cat.save_message(cid, "assistant" if i % 2 == 0 else "user", f"message {i}",
                                    parent_message_id=ids[-1])["message_id"])
    conv = cat.get_conversation(cid, limit=4)
    assert conv["message_count"] == 6 and conv["title"] == "What is the capital of France?"
    assert [m["id"] for m in conv["messages"]] == ids[2:] and conv["next_before_message_id"] == ids[2]
    older = cat.get_conversation(cid, limit=4, before=conv["next_before_message_id"])
    assert [m["id"] for m in older["messages"]] == ids[:2] and older["next_before_message_id"] is None
    assert older["messages"][0]["metadata"] == {"lang": "en"} and older["messages"][1]["parent_message_id"] == ids[0]
    named = cat.save_message("my-own-id", "system", "be brief")
    assert named["conversation_id"] == "my-own-id" and named["new_conversation"] is True


def test_memory_errors_are_tool_errors():
    cat = _mem()
    cid = cat.save_message(None, "user", "hi")["conversation_id"]
    other = cat.save_message(None, "user", "there")
    for call, match in [(lambda: cat.save_message(cid, "robot", "x"), "role"),
                        (lambda: cat.save_message(cid, "user", "x", parent_message_id="nope"), "parent_message_id"),
                        (lambda: cat.save_message(cid, "user", "x", parent_message_id=other["message_id"]),
                         "parent_message_id"),
                        (lambda: cat.get_conversation("nope"), "No conversation"),
                        (lambda: cat.get_conversation(cid, before="nope"), "before_message_id"),
                        (lambda: cat.delete_conversation("nope"), "No conversation"),
                        (lambda: cat.export("nope"), "No conversation")]:
        with pytest.raises(abstract._ToolError, match=match):
            call()
    assert cat.get_conversation(cid)["message_count"] == 1  # a refused save left nothing behind


def test_list_conversations_newest_update_first_with_cursor():
    cat = _mem(clock=iter(T0 + i for i in range(100)).__next__)
    cids = [cat.save_message(None, "user", f"conversation {i}")["conversation_id"] for i in range(5)]
    cat.save_message(cids[1], "assistant", "bumped")
    got, cursor = [], None
    while True:
        rows, cursor = cat.list_conversations(limit=2, cursor=cursor)
        got += rows
        if cursor is None:
            break
    assert [c["id"] for c in got] == [cids[1], cids[4], cids[3], cids[2], cids[0]]
    assert got[0]["message_count"] == 2 and got[0]["title"] == "conversation 1"


@pytest.mark.parametrize("fts", [None, False])
def test_search_messages_and_cascade_delete(fts):
    cat = _mem(fts)
    a = cat.save_message(None, "user", "The quick brown fox")["conversation_id"]
    cat.save_message(a, "assistant", "jumps over the lazy dog")
    b = cat.save_message(None, "user", "A quick note about dogs")["conversation_id"]
    hits = cat.search_messages("quick")
    assert {h["conversation_id"] for h in hits["results"]} == {a, b}
    assert all("<mark>quick</mark>" in h["snippet"].lower() for h in hits["results"])
    assert [h["conversation_id"] for h in cat.search_messages("quick", conversation_id=b)["results"]] == [b]
    assert [h["role"] for h in cat.search_messages("lazy dog", "phrase")["results"]] == ["assistant"]
    assert len(cat.search_messages("dog", "prefix")["results"]) == 2
    assert cat.delete_conversation(a) == 2
    assert [h["conversation_id"] for h in cat.search_messages("quick")["results"]] == [b]
    assert cat.search_messages("lazy")["results"] == []
    with cat._lock:
        assert cat._db.execute("SELECT count(*) FROM messages WHERE conversation_id = ?", (a,)).fetchone()[0] == 0
        if cat.fts:  # the index itself holds no trace of the deleted messages
            rows = cat._db.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'lazy'").fetchone()[0]
            assert rows == 0
            cat._db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")


def test_search_messages_dates():
    cat = _mem(clock=iter([T0, T0 + 2 * DAY, T0 + 4 * DAY]).__next__)
    for text in ("report one", "report two", "report three"):
        cat.save_message("c", "user", text)
    got = cat.search_messages("report", since=abstract._parse_when("2023-11-15", "s"),
                              until=abstract._parse_when("2023-11-16", "u", end=True))
    assert [h["snippet"] for h in got["results"]] == ["<mark>report</mark> two"]


def test_ten_concurrent_saves_to_one_conversation_all_land(tmp_path):
    cat = abstract._Catalog(str(tmp_path / "c.sqlite3"))
    cid = cat.save_message(None, "system", "start")["conversation_id"]
    barrier = threading.Barrier(10)

    def save(i: int) -> str:
        barrier.wait(5)
        return cat.save_message(cid, "user", f"concurrent {i}")["message_id"]

    with ThreadPoolExecutor(10) as pool:
        ids = list(pool.map(save, range(10)))
    conv = cat.get_conversation(cid)
    assert conv["message_count"] == 11 and len(set(ids)) == 10
    assert {m["content"] for m in conv["messages"]} == {"start"} | {f"concurrent {i}" for i in range(10)}
    cat.close()


def test_export_and_markdown():
    cat = _mem()
    cid = cat.save_message(None, "user", "Hello *world*")["conversation_id"]
    cat.save_message(cid, "assistant", "Hi!\n\nSecond paragraph.")
    cat.save_message(None, "user", "another")
    convs = cat.export()
    assert len(convs) == 2 and convs[1]["id"] == cid and [m["role"] for m in convs[1]["messages"]] == ["user", "assistant"]
    assert len(cat.export(cid)) == 1
    md = abstract._conversations_markdown(convs, "2025-01-01T00:00:00.000Z")
    assert md.startswith("# Conversations") and "## Hello *world*" in md and "### assistant · " in md
    assert "Hi!\n\nSecond paragraph." in md and f"`{cid}`" in md


# ---- helpers of the hooks and --reindex

def test_parse_when_accepts_dates_times_and_zones():
    p = abstract._parse_when
    assert p("2025-01-31", "k") == "2025-01-31T00:00:00.000Z"
    assert p("2025-01-31T09:00:00Z", "k") == "2025-01-31T09:00:00.000Z"
    assert p("2025-01-31T09:00:00.500+02:00", "k") == "2025-01-31T07:00:00.500Z"
    assert p("2025-01-31T09:00:00+02:00", "k") == "2025-01-31T07:00:00.000Z"
    assert p("2025-01-31T09:00", "k", end=True) == "2025-01-31T09:00:00.001Z"
    for bad in ("yesterday", "2025-13-01", "", "2025-01-31T25:00", "9" * 30):
        with pytest.raises(abstract._ToolError, match="ISO 8601"):
            p(bad, "since")


@pytest.mark.parametrize("stem, folders, want", [
    ("shop-orders-20250101T120000Z", [], ("shop", "orders")),
    ("shop-orders-20250101T120000Z-3", [], ("shop", "orders")),
    ("shop-orders-20250101T120000Z-image-2", [], ("shop", "orders")),
    ("my-db-run-query-20250101T120000Z", [], ("my-db", "run-query")),  # a known server name wins
    ("my-db-run-query-20250101T120000Z", ["my-db"], ("my-db", "run-query")),
    ("other-get-list-20250101T120000Z", [], ("other", "get-list")),
    ("report", [], ("", "")),
    ("report-20250101T120000Z", [], ("", "")),
])
def test_origin_of_default_file_names(stem, folders, want):
    assert abstract._origin(stem, folders, ["my-db", "shop"]) == want


def test_file_facts_hash_size_and_text(tmp_path):
    import gzip
    import hashlib

    f = tmp_path / "a.csv"
    f.write_bytes("é,b\n".encode() * 1000)
    def facts_of(path, fmt, max_text):
        return abstract._file_facts((open(path, "rb"), os.path.getsize(path)), str(path), fmt, max_text)

    facts = facts_of(f, "csv", 9)
    assert facts["bytes"] == f.stat().st_size and facts["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()
    assert facts["text"] == "é,b\né,b"  # 9 bytes, the cut character dropped
    g = tmp_path / "b.json.gz"
    g.write_bytes(gzip.compress(b'{"k": "zipped"}'))
    assert facts_of(g, "json", 100)["text"] == '{"k": "zipped"}'
    assert facts_of(g, "png", 100)["text"] == ""


def test_dir_usage_is_bounded(tmp_path):
    for i in range(30):
        (tmp_path / f"f{i}").write_bytes(b"x" * 100)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "g").write_bytes(b"y" * 1000)
    assert abstract._dir_usage(str(tmp_path)) == (4000, True)
    used, complete = abstract._dir_usage(str(tmp_path), cap=10)
    assert not complete and used <= 1100


def test_reindex_adds_missing_files_once(tmp_path):
    root = tmp_path / "store"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "shop-orders-20250101T120000Z.csv").write_text("id,word\n1,kiwi\n")
    (root / "notes.md").write_text("# banana notes")
    (root / ".hidden").write_text("kiwi")
    (root / ".abstract-x.tmp").write_text("kiwi")
    cat = _mem()
    _record(cat, {"path": str(root / "notes.md"), "text": "already", "description": "kept"})
    s = abstract._reindex(cat, [str(root)], ["shop"])
    assert (s["added"], s["known"], s["rows"]) == (1, 1, 2)
    hit = cat.search("kiwi")["results"]
    assert len(hit) == 1 and (hit[0]["server"], hit[0]["tool"], hit[0]["format"]) == ("shop", "orders", "csv")
    assert abstract._reindex(cat, [str(root)], [])["added"] == 0


def test_catalog_failure_never_fails_the_store():
    class Broken:
        max_text = 10

        def record_many(self, entries):
            raise sqlite3.OperationalError("disk I/O error")

    class FakeContext:
        catalog = Broken()

    call = abstract._Call(FakeContext(), None, {"server": "s", "tool_name": "t"})  # type: ignore[arg-type]
    with _Logged() as caplog:
        abstract._catalog_note(call, "the files of s.t", lambda cap: [{"path": "/x"}])
    assert "could not record the files of s.t: disk I/O error" in caplog.text


def test_ranking_is_among_the_newest_matches_when_a_word_is_everywhere(monkeypatch):
    cat = _mem()
    _record(cat, {"path": "/old-best", "text": "zebra zebra zebra zebra"})
    for i in range(5):
        _record(cat, {"path": f"/new{i}", "text": f"zebra and {' '.join(['filler'] * 50)} {i}"})
    assert _paths(cat.search("zebra", limit=1)) == ["/old-best"]
    monkeypatch.setattr(abstract, "_RANK_WINDOW", 3)
    got = _paths(cat.search("zebra", limit=10))
    assert set(got) == {"/new2", "/new3", "/new4"}
    assert _paths(cat.search("zebra", limit=10, server="elsewhere")) == []  # filters still apply
