"""call_tool_and_store end to end: `python abstract.py DIR` with fake_upstream.py behind it.

Results are read back from the files with independent readers (csv, json, html.parser) or with
Abstract's own readers where the stdlib has none (load_yaml, _xml_to_data), and compared with the
data the upstream sent, types included.
"""

from __future__ import annotations

import base64
import csv
import gzip
import html.parser
import io
import json
import os
import re
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import running_world, MODERN_VERSION, ROOT, World, files_under, same_json, text_of, wait_for
from fake_upstream import big_text, make_rows

import abstract

MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "pytest", "version": "0"}}

AWKWARD = [
    {"id": 1, "name": "Zo\u00eb \u00c5str\u00f6m \U0001f389 \u6f22\u5b57", "quote": 'She said "hi", twice',
     "comma": "a, b, c", "newline": "line 1\nline 2", "crlf": "a\r\nb", "tab": "col\tumn", "empty": "",
     "nested": {"tags": ["x", "y"], "n": 1, "deep": {"q": '"'}}, "list": [1, 2.5, None], "zip": "007",
     "sci": "1e3", "word_true": "true", "word_null": "null", "num": 3.25, "big": 10**18, "neg": -7,
     "ok": True, "none": None, "pipe": "a|b", "regex": "a\\|b\\\\|c \\d", "markup": "<b>&amp;</b>", "spaces": "  padded  "},
    {"id": 2, "name": "plain", "ok": False, "late": "only in row 2", "yes": "yes", "dash": "- item",
     "hash": "# not a comment", "colon": "key: value", "float": 1e-7, "zero": -0.0},
    {"id": 3},
]
UNION = list(dict.fromkeys(k for row in AWKWARD for k in row))
TABLE_FORMATS = ("csv", "tsv", "md", "html")


def cell(value) -> str:
    """The text a table cell holds for `value` (independent of abstract's own helper)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(value)


def expected_cells(rows) -> list:
    header = list(dict.fromkeys(k for row in rows for k in row))
    return [header] + [[cell(row.get(k)) for k in header] for row in rows]


def result_args(content=None, structured=None, is_error=None) -> dict:
    """tool_args for the fake's `result` tool: the upstream answers with exactly this result."""
    res: dict = {"content": content if content is not None else []}
    if structured is not None:
        res["structuredContent"] = structured
    if is_error is not None:
        res["isError"] = is_error
    return {"result": res}


def json_text(data) -> dict:
    return result_args([{"type": "text", "text": json.dumps(data, ensure_ascii=False)}])


def store(proxy, tool: str, tool_args=None, timeout: float = 20, **kw) -> dict:
    args = {"server": "up", "tool_name": tool, "tool_args": tool_args or {}, **kw}
    return proxy.call_tool("call_tool_and_store", args, timeout=timeout)


def stored(res: dict) -> Path:
    assert not res.get("isError"), text_of(res)
    return Path(res["structuredContent"]["path"])


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One Abstract (protocol 2025-11-25) with fake upstream 'up', shared by the tests that need
    no settings of their own; each of them stores into its own storage_path."""
    with running_world(tmp_path_factory.mktemp("store")) as world:
        yield world


@pytest.fixture
def px(shared):
    return shared.proxies[0]


# ---- every format, awkward data, read back ----

class _Cells(html.parser.HTMLParser):
    """Rows of th/td text from an HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _md_unescape(cell: str) -> str:
    """Undo the pipe escaping: a pipe is written backslash-pipe, and a run of backslashes just
    before it is doubled (GFM reads two backslashes as one, which would free the pipe)."""
    return re.sub(r"(\\*)\\\|", lambda m: m.group(1)[:len(m.group(1)) // 2] + "|", cell)


def md_table(text: str) -> list:
    """Cells of the first GitHub-flavoured table in text: escaped pipes and <br> undone."""
    lines = [ln for ln in text.split("\n") if ln.startswith("|")]
    assert re.fullmatch(r"\|( --- \|)+", lines[1]), lines[1]
    rows = []
    for ln in [lines[0]] + lines[2:]:
        assert ln.startswith("| ") and ln.endswith(" |"), ln
        cells = ln[2:-2].split(" | ")
        rows.append([_md_unescape(c).replace("<br>", "\n") for c in cells])
    return rows


def read_back(path: Path, fmt: str):
    raw = path.read_bytes()
    text = raw.decode("utf-8")  # every format is UTF-8
    if fmt in ("json", "txt"):
        return json.loads(text)
    if fmt == "yaml":
        return abstract._load_yaml(text)
    if fmt == "xml":
        return abstract._xml_to_data(text)
    if fmt in ("csv", "tsv"):
        return list(csv.reader(io.StringIO(text, newline=""), delimiter="\t" if fmt == "tsv" else ","))
    if fmt == "md":
        return md_table(text)
    parser = _Cells()
    parser.feed(text)
    parser.close()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    return parser.rows


@pytest.mark.parametrize("fmt", abstract._FORMATS)
def test_every_format_round_trips_awkward_records(px, fmt):
    res = store(px, "result", json_text(AWKWARD), file_format=fmt, storage_path=f"formats-{fmt}",
                filename="awkward")
    path = stored(res)
    sc = res["structuredContent"]
    assert path.name == f"awkward.{fmt}" and sc["format"] == fmt
    assert (sc["rows"], sc["columns"]) == (3, len(UNION))
    assert f"3 rows x {len(UNION)} columns" in text_of(res)
    got = read_back(path, fmt)
    if fmt in ("csv", "tsv", "html"):
        assert got == expected_cells(AWKWARD)
    elif fmt == "md":  # Markdown has one kind of line break
        assert got == [[c.replace("\r\n", "\n") for c in row] for row in expected_cells(AWKWARD)]
    else:
        assert same_json(got, AWKWARD), got


@pytest.mark.parametrize("fmt", ["json", "yaml", "xml", "txt"])
def test_every_tree_format_round_trips_nested_awkward_values(px, fmt):
    doc = {"records": AWKWARD, "strings": ["", " ", "007", "1e3", "true", "null", "~", "yes", "- x", "#", "a: b",
                                           "tab\there", "\u2028", "'", '"', "\\"],
           "numbers": [0, -1, 1.5, 1e16, -0.0, 10**30], "empty": {"list": [], "map": {}}, "bools": [True, False]}
    res = store(px, "result", result_args(structured=doc), file_format=fmt, storage_path=f"tree-{fmt}")
    assert same_json(read_back(stored(res), fmt), doc)


def test_csv_header_is_the_union_of_keys_in_first_seen_order(px):
    rows = [{"a": 1}, {"b": "x", "a": 2}, {"c": None}, {"d": [1]}]
    path = stored(store(px, "result", json_text(rows), file_format="csv", storage_path="union"))
    with path.open(newline="", encoding="utf-8") as f:
        assert list(csv.reader(f)) == [["a", "b", "c", "d"], ["1", "", "", ""], ["2", "x", "", ""],
                                       ["", "", "", ""], ["", "", "", "[1]"]]


def test_wrapper_object_is_stored_as_its_records(px):
    data = {"results": [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}], "total": 2, "next": None}
    res = store(px, "result", result_args(structured=data), file_format="csv", storage_path="wrapper")
    path = stored(res)
    assert path.suffix == ".csv" and res["structuredContent"]["rows"] == 2
    with path.open(newline="", encoding="utf-8") as f:
        assert list(csv.DictReader(f)) == [{"id": "1", "v": "a"}, {"id": "2", "v": "b"}]
    assert "'results'" in text_of(res)  # the answer says which field holds them


@pytest.mark.parametrize("data, fmt, reason", [
    ({"name": "x", "n": 1}, "csv", "a single object, not a list of records"),
    ([[1, 2], [3, 4]], "csv", "a list holding nested lists, not records"),
    ([{"a": 1}, 2], "csv", "a list mixing objects and other values"),
])
def test_non_tabular_data_asked_as_csv_is_stored_as_json_and_says_why(px, data, fmt, reason):
    res = store(px, "result", json_text(data), file_format=fmt, storage_path="nontabular", filename="nt")
    path = stored(res)
    assert path.suffix == ".json" and res["structuredContent"]["format"] == "json"
    assert same_json(json.loads(path.read_text(encoding="utf-8")), data)
    text = text_of(res)
    assert "stored as JSON" in text and reason in text and f"{fmt} needs a list of records" in text
    assert "rows" not in res["structuredContent"]


def test_structured_content_describes_the_file(px):
    res = store(px, "rows", {"n": 7}, file_format="csv", storage_path="sc dir/ü", filename="rows")
    sc = res["structuredContent"]
    path = stored(res)
    assert path.is_file() and os.path.isabs(sc["path"])
    assert sc["uri"].startswith("file:///") and sc["uri"] == path.as_uri()
    assert urllib.request.url2pathname(urllib.parse.urlparse(sc["uri"]).path) == sc["path"]
    assert sc["format"] == "csv" and sc["bytes"] == path.stat().st_size
    assert (sc["rows"], sc["columns"]) == (7, 4)
    assert (sc["server"], sc["tool"]) == ("up", "rows")
    text = text_of(res)
    assert sc["path"] in text and f"{sc['bytes']:,} bytes" in text and "up.rows" in text
    assert "id,name,score,ok" in text  # the preview starts with the header


@pytest.mark.parametrize("tool, args, fmt", [("big", {"mb": 5}, "json"), ("rows", {"n": 60000}, "csv")])
def test_answer_stays_small_for_a_large_result(px, tool, args, fmt):
    res = store(px, tool, args, file_format=fmt, storage_path="large", timeout=60)
    path = stored(res)
    size = path.stat().st_size
    assert size > (5 << 20 if tool == "big" else 1 << 20)
    assert len(text_of(res)) < 1500
    assert len(json.dumps(res)) < 3000
    if tool == "big":
        assert json.loads(path.read_text()) == big_text(5)
    else:
        assert res["structuredContent"]["rows"] == 60000
        with path.open(newline="") as f:
            assert sum(1 for _ in csv.reader(f)) == 60001


def test_image_and_audio_are_stored_as_binary_files(px):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    wav = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(range(255, -1, -1))
    jpeg = b"\xff\xd8\xff\xe0" + b"\x00\xff" * 50
    content = [{"type": "text", "text": "caption, with a comma"},
               {"type": "image", "data": base64.b64encode(png).decode(), "mimeType": "image/png"},
               {"type": "audio", "data": base64.b64encode(wav).decode(), "mimeType": "audio/wav"},
               {"type": "image", "data": base64.b64encode(jpeg).decode(), "mimeType": "image/jpeg"}]
    res = store(px, "result", result_args(content), storage_path="media", filename="shot")
    main = stored(res)
    assert main.name == "shot.txt" and main.read_text() == "caption, with a comma"
    files = res["structuredContent"]["files"]
    got = {Path(f["path"]).name: (f["mimeType"], f["bytes"], Path(f["path"]).read_bytes()) for f in files}
    assert got == {"shot-image-1.png": ("image/png", len(png), png),
                   "shot-audio-2.wav": ("audio/wav", len(wav), wav),
                   "shot-image-3.jpg": ("image/jpeg", len(jpeg), jpeg)}
    for f in files:
        assert f["uri"] == Path(f["path"]).as_uri() and f["path"] in text_of(res)


def test_a_lone_image_is_the_stored_file(px):
    gif = b"GIF89a" + bytes(100)
    res = store(px, "result", result_args([{"type": "image", "data": base64.b64encode(gif).decode(),
                                            "mimeType": "image/gif"}]), storage_path="lone", filename="pic")
    path = stored(res)
    assert path.name == "pic-image.gif" and path.read_bytes() == gif
    assert res["structuredContent"]["format"] == "gif" and res["structuredContent"]["bytes"] == len(gif)
    assert os.listdir(path.parent) == ["pic-image.gif"]


def test_bad_base64_is_an_error_and_stores_nothing(px, shared):
    res = store(px, "result", result_args([{"type": "image", "data": "not base64!!", "mimeType": "image/png"}]),
                storage_path="badb64")
    assert res.get("isError") is True and "base64" in text_of(res)
    assert files_under(shared.dir / "badb64") == {}


@pytest.mark.parametrize("fmt, expect", [("txt", b"hello, world\nline 2"), ("json", b'"hello, world\\nline 2"\n')])
def test_embedded_text_resource_is_stored_by_its_text(px, fmt, expect):
    content = [{"type": "resource", "resource": {"uri": "mem://doc", "mimeType": "text/plain",
                                                 "text": "hello, world\nline 2"}}]
    path = stored(store(px, "result", result_args(content), file_format=fmt, storage_path="embedded-text"))
    assert path.read_bytes() == expect


def test_embedded_blob_resource_is_stored_as_its_bytes(px):
    pdf = b"%PDF-1.4\n" + bytes(range(256))
    content = [{"type": "resource", "resource": {"uri": "mem://doc.pdf", "mimeType": "application/pdf",
                                                 "blob": base64.b64encode(pdf).decode()}}]
    res = store(px, "result", result_args(content), storage_path="embedded-blob", filename="doc")
    path = stored(res)
    assert path.name == "doc-resource.pdf" and path.read_bytes() == pdf


def test_resource_link_is_kept_as_a_link_in_json(px):
    link = {"type": "resource_link", "uri": "https://example.com/r/1", "name": "r1", "mimeType": "text/csv"}
    content = [{"type": "text", "text": "see the link"}, link]
    path = stored(store(px, "result", result_args(content), storage_path="links"))
    assert json.loads(path.read_text()) == ["see the link", link]


def test_structured_content_wins_over_text(px):
    res = store(px, "result", result_args([{"type": "text", "text": "a summary"}], structured={"k": [1, "2"]}),
                storage_path="structured")
    assert json.loads(stored(res).read_text()) == {"k": [1, "2"]}


def test_several_text_items_become_a_list(px):
    content = [{"type": "text", "text": '{"a": 1}'}, {"type": "text", "text": "plain"}, {"type": "text", "text": "42"}]
    assert json.loads(stored(store(px, "result", result_args(content), storage_path="multi")).read_text()) \
        == [{"a": 1}, "plain", 42]


def test_upstream_error_is_an_error_and_no_file(px, shared):
    before = files_under(shared.dir)
    res = store(px, "result", result_args([{"type": "text", "text": "quota exceeded for user 7"}], is_error=True),
                storage_path="errors")
    assert res.get("isError") is True
    assert "quota exceeded for user 7" in text_of(res) and "nothing was stored" in text_of(res)
    assert "structuredContent" not in res
    assert files_under(shared.dir) == before


def test_unknown_format_is_refused(px):
    res = store(px, "rows", {"n": 1}, file_format="xlsx", storage_path="unknown-format")
    assert res.get("isError") is True and "xlsx" in text_of(res) and "csv" in text_of(res)


# ---- names: given, cleaned, never overwritten ----

@pytest.mark.parametrize("filename, fmt, compress, expected", [
    ("report", "csv", False, "report.csv"),
    ("report.csv", "csv", False, "report.csv"),
    ("Report.JSON", "json", False, "Report.json"),
    ("report.json", "csv", False, "report.csv"),
    ("report.csv.gz", "csv", True, "report.csv.gz"),
    ("v1.2", "json", False, "v1.2.json"),
    ("notes.md.txt", "md", False, "notes.md"),
])
def test_filename_is_used_and_its_extension_comes_from_the_format(px, filename, fmt, compress, expected):
    res = store(px, "rows", {"n": 2}, file_format=fmt, compress=compress, storage_path=f"names-{filename}-{fmt}",
                filename=filename)
    assert stored(res).name == expected


def test_default_filename_is_server_tool_and_utc_time(px):
    name = stored(store(px, "rows", {"n": 1}, storage_path="default-name")).name
    assert re.fullmatch(r"up-rows-\d{8}T\d{6}Z\.json", name), name


def test_never_overwrites_an_existing_file(px):
    first = stored(store(px, "echo_args", {"v": 1}, storage_path="twice", filename="same"))
    second = stored(store(px, "echo_args", {"v": 2}, storage_path="twice", filename="same"))
    third = stored(store(px, "echo_args", {"v": 3}, storage_path="twice", filename="same.json"))
    assert [first.name, second.name, third.name] == ["same.json", "same-1.json", "same-2.json"]
    assert [json.loads(p.read_text()) for p in (first, second, third)] == [{"v": 1}, {"v": 2}, {"v": 3}]


def test_concurrent_stores_of_one_name_take_different_names(px):
    n = 8
    ids = [px.send_request("tools/call", {"name": "call_tool_and_store", "arguments": {
        "server": "up", "tool_name": "echo_args", "tool_args": {"writer": i}, "storage_path": "race",
        "filename": "same"}}) for i in range(n)]
    results = [px.wait_response(rid, timeout=20)["result"] for rid in ids]
    paths = [stored(r) for r in results]
    assert sorted(p.name for p in paths) == sorted(["same.json"] + [f"same-{i}.json" for i in range(1, n)])
    for i, p in enumerate(paths):
        assert json.loads(p.read_text()) == {"writer": i}  # each answer names its own file
    assert sorted(os.listdir(paths[0].parent)) == sorted(p.name for p in paths)  # no temporary files left


def test_write_new_from_many_threads_never_shares_a_name(tmp_path):
    def write(i: int) -> str:
        return abstract._write_new(str(tmp_path), "x", ".bin", str(i).encode() * 1000)

    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(write, i) for i in range(32)]
        paths = [f.result(timeout=10) for f in futures]
    assert len(set(paths)) == 32
    for i, p in enumerate(paths):
        assert Path(p).read_bytes() == str(i).encode() * 1000
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)


# ---- a writer killed part-way leaves no file under a final name ----

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="uses POSIX signals and resource limits")
_CHILD_PRELUDE = "import os, sys\nsys.path.insert(0, sys.argv[1])\nimport abstract\n"


def _leftovers(directory: Path):
    names = sorted(os.listdir(directory))
    finals = [n for n in names if not re.fullmatch(r"\.abstract-.*\.tmp", n)]
    return finals, [directory / n for n in names if n not in finals]


@posix_only
def test_writer_killed_by_the_kernel_mid_write_leaves_no_final_file(tmp_path):
    # RLIMIT_FSIZE stops write() after 1 MiB; with SIGXFSZ at its default the kernel kills the
    # process right there, in the middle of writing the 8 MiB payload.
    code = _CHILD_PRELUDE + (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))\n"
        "abstract._write_new(sys.argv[2], 'victim', '.csv', b'x' * (8 << 20))\n"
        "print('finished')\n")
    run = subprocess.run([sys.executable, "-c", code, str(ROOT), str(tmp_path)], capture_output=True, timeout=30)
    assert run.returncode == -signal.SIGXFSZ, run
    finals, temps = _leftovers(tmp_path)
    assert finals == []
    assert len(temps) == 1 and temps[0].stat().st_size == 1 << 20  # the partial data never got a name


@posix_only
def test_writer_sigkilled_before_linking_leaves_no_final_file(tmp_path):
    # The child blocks in fsync (after writing, before naming); the parent waits until the
    # temporary file holds the whole payload, then SIGKILLs it.
    size = 4 << 20
    code = _CHILD_PRELUDE + (
        "os.fsync = lambda fd: sys.stdin.readline()\n"
        f"abstract._write_new(sys.argv[2], 'victim', '.json', b'y' * {size})\n"
        "print('finished')\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(ROOT), str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def full_temp():
            temps = list(tmp_path.glob(".abstract-*.tmp"))
            return temps if temps and temps[0].stat().st_size == size else None

        temps = wait_for(full_temp, what="the temporary file to hold the payload")
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        child.stdin.close()
        child.stdout.close()
        child.stderr.close()
    finals, left = _leftovers(tmp_path)
    assert finals == [] and left == temps


@posix_only
def test_a_failed_write_removes_its_temporary_file(tmp_path):
    # SIGXFSZ ignored (Python's default): write() fails with EFBIG, _write_new raises and cleans up.
    code = _CHILD_PRELUDE + (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))\n"
        "try:\n"
        "    abstract._write_new(sys.argv[2], 'victim', '.csv', b'x' * (1 << 20))\n"
        "except OSError as e:\n"
        "    print('raised', e.errno)\n")
    run = subprocess.run([sys.executable, "-c", code, str(ROOT), str(tmp_path)], capture_output=True, timeout=30)
    assert run.stdout.decode().split() == ["raised", "27"], run  # EFBIG
    assert os.listdir(tmp_path) == []


# ---- compress ----

@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_compress_writes_gzip_that_gunzips_to_the_plain_file(px, fmt):
    plain = stored(store(px, "rows", {"n": 500}, file_format=fmt, storage_path="gz", filename=f"plain-{fmt}"))
    res = store(px, "rows", {"n": 500}, file_format=fmt, storage_path="gz", filename=f"packed-{fmt}", compress=True)
    packed = stored(res)
    assert packed.name == f"packed-{fmt}.{fmt}.gz"
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    sc = res["structuredContent"]
    assert sc["compressed"] is True and sc["bytes"] == packed.stat().st_size < plain.stat().st_size
    assert sc["format"] == fmt


def test_compress_must_be_a_boolean(px):
    res = store(px, "rows", {"n": 1}, compress="yes", storage_path="gz-bad")
    assert res.get("isError") is True and "compress" in text_of(res)


# ---- organize (settings file) and names made from odd tool names ----

@pytest.mark.parametrize("organize, folder", [("flat", ""), ("by_server", "up"), ("by_server_tool", "up/echo_args"),
                                              ("by_server_tool", "up/a_b"), ("by_server_tool", "up/_")])
def test_organize_setting_picks_the_subfolder(world, organize, folder):
    tool = {"up/a_b": "a/b", "up/_": ".."}.get(folder, "echo_args")
    world.fake("up", "--extra-tool", "a/b", "--extra-tool", "..")
    world.settings = {"organize": organize}
    proxy = world.start()
    res = store(proxy, tool, {"x": 1})
    path = stored(res)
    assert os.path.relpath(path.parent, os.path.realpath(world.dir)) == (folder or ".")
    assert json.loads(path.read_text()) == {"x": 1}
    assert re.fullmatch(r"up-(echo_args|a_b|\.\.)-\d{8}T\d{6}Z\.json", path.name), path.name
    given = stored(store(proxy, tool, {"x": 2}, storage_path="mine"))
    assert given.parent == Path(os.path.realpath(world.dir)) / "mine"  # storage_path wins over organize


# ---- the answer per protocol version ----

@pytest.mark.parametrize("version, link", [("2025-11-25", True), ("2025-06-18", True),
                                           ("2025-03-26", False), ("2024-11-05", False)])
def test_resource_link_only_where_the_protocol_has_it(world, version, link):
    world.fake("up")
    proxy = world.start(initialize=False)
    proxy.initialize(version)
    res = store(proxy, "rows", {"n": 3}, file_format="csv", description="three rows")
    path = stored(res)
    links = [c for c in res["content"] if c["type"] == "resource_link"]
    assert [c["type"] for c in res["content"]] == ["text"] + (["resource_link"] if link else [])
    if link:
        assert links == [{"type": "resource_link", "uri": path.as_uri(), "name": path.name, "mimeType": "text/csv",
                          "size": path.stat().st_size, "description": "three rows"}]


def test_resource_link_in_the_modern_era(px):
    res = px.call_tool("call_tool_and_store", {"server": "up", "tool_name": "rows", "tool_args": {"n": 1},
                                               "storage_path": "modern"}, meta=MODERN_META)
    path = stored(res)
    assert [c for c in res["content"] if c["type"] == "resource_link"][0]["uri"] == path.as_uri()


# ---- resources/list and resources/read ----

def test_resources_list_lists_stored_files(px):
    path = stored(store(px, "rows", {"n": 2}, file_format="csv", storage_path="listed", filename="listed"))
    resources = px.result("resources/list")["resources"]
    entry = [r for r in resources if r["uri"] == path.as_uri()]
    assert entry == [{"uri": path.as_uri(), "name": "listed.csv", "mimeType": "text/csv",
                      "size": path.stat().st_size}]


def test_resources_read_returns_text_of_a_stored_file(px):
    path = stored(store(px, "result", json_text(AWKWARD), file_format="yaml", storage_path="read"))
    got = px.result("resources/read", {"uri": path.as_uri()})
    assert got["contents"] == [{"uri": path.as_uri(), "mimeType": "application/yaml",
                                "text": path.read_text(encoding="utf-8")}]
    assert same_json(abstract._load_yaml(got["contents"][0]["text"]), AWKWARD)


@pytest.mark.parametrize("kind", ["gz", "png"])
def test_resources_read_returns_a_blob_for_binary_files(px, kind):
    if kind == "gz":
        path = stored(store(px, "rows", {"n": 5}, storage_path="read-bin", compress=True))
        mime = "application/gzip"
    else:
        png = b"\x89PNG\r\n\x1a\n\x00\x00\xff"
        path = stored(store(px, "result", result_args([{"type": "image", "mimeType": "image/png",
                                                         "data": base64.b64encode(png).decode()}]),
                            storage_path="read-bin"))
        mime = "image/png"
    got = px.result("resources/read", {"uri": path.as_uri()})["contents"][0]
    assert set(got) == {"uri", "mimeType", "blob"} and got["mimeType"] == mime
    assert base64.b64decode(got["blob"]) == path.read_bytes()


def test_resources_read_errors(px, shared):
    missing = (shared.dir / "no-such-file.json").as_uri()
    resp = px.request("resources/read", {"uri": missing})
    assert resp["error"]["code"] == -32002 and missing in resp["error"]["message"]
    assert resp["error"]["data"] == {"uri": missing}
    modern = px.request("resources/read", {"uri": missing, "_meta": MODERN_META})
    assert modern["error"]["code"] == -32602
    outside = (shared.tmp / "client_config.json").as_uri()
    resp = px.request("resources/read", {"uri": outside})
    assert resp["error"]["code"] == -32602
    msg = resp["error"]["message"]
    assert "outside the allowed directories" in msg and os.path.realpath(shared.dir) in msg
    assert "mcpServers" not in json.dumps(resp)
    resp = px.request("resources/read", {})
    assert resp["error"]["code"] == -32602 and "uri" in resp["error"]["message"]


def test_large_json_is_stored_a_record_a_line_small_json_indented(px):
    """Up to about 100,000 characters a JSON file is indented by two spaces; larger, records go one
    to a line (json's C encoder writes them: the indenting encoder is pure Python)."""
    rows = make_rows(3000)  # about 190 KB
    big = stored(store(px, "result", json_text(rows), file_format="json", storage_path="json-layout"))
    text = big.read_text(encoding="utf-8")
    lines = text.split("\n")
    assert lines[0] == "[" and lines[-2:] == ["]", ""] and len(lines) == len(rows) + 3
    assert [json.loads(line.rstrip(",")) for line in lines[1:-2]] == rows and json.loads(text) == rows
    wrapped = {"total": 3000, "items": rows, "next": None}
    text = stored(store(px, "result", json_text(wrapped), file_format="json", storage_path="json-layout")).read_text()
    assert text.startswith('{\n"total": 3000,\n"items": [\n{"id": 0, ') and text.endswith('],\n"next": null\n}\n')
    assert json.loads(text) == wrapped
    small = rows[:20]
    text = stored(store(px, "result", json_text(small), file_format="json", storage_path="json-layout")).read_text()
    assert text == json.dumps(small, indent=2, ensure_ascii=False) + "\n"
