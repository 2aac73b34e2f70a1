"""Large results relayed at the floor (issue 27): a tools/call answer relayed whole (cache off,
or under its threshold; meta and direct mode; stdio and HTTP upstreams) keeps its long strings
(over _LONG_STRING bytes, at any depth) as views of the upstream's line, and writes each out as
it came when those bytes are exactly what Abstract's encoder writes for it (_JsonString.verbatim);
any other is decoded and encoded again. The client receives the bytes it always did:

    _today(msg): compact JSON, non-ASCII kept; every non-ASCII character escaped when a lone
    surrogate makes UTF-8 impossible.

Each relay below is checked twice: the value against what the upstream sent (json.loads), and
the bytes against _today() of that value. A splice that copied a string without checking it
(an escape such as \\u00e9 or \\/ that Abstract writes otherwise, a lone surrogate, a surrogate as
UTF-8) fails the second; one that cut a piece inside an escape fails the first. Malformed long
answers still fail their call cleanly, and the client never reads a line it cannot parse.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import pytest

import abstract
from conftest import WAIT, Proxy, World, pipe_pair, proc_status, text_of, wait_for
from fake_upstream import AWKWARD, awkward_text, make_long

needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="measures memory in /proc")
HOME = Path(os.environ.get("ABSTRACT_REALSERVERS_HOME")
            or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "abstract-realservers")
NODE_MODULES = HOME / "node" / "node_modules"
FILESYSTEM = NODE_MODULES / ".bin" / "mcp-server-filesystem"
EVERYTHING = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
SLOW = 180.0


def _today(msg: Any) -> bytes:
    """The line Abstract wrote for `msg` before issue 27 (and must still write)."""
    try:
        return json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # a lone surrogate: every non-ASCII character escaped
        return json.dumps(msg, separators=(",", ":")).encode("ascii") + b"\n"


class RawProxy(Proxy):
    """A Proxy that keeps every response's whole line (Proxy keeps the first 64 KB)."""

    def __init__(self, *args: Any) -> None:
        self.lines: Dict[str, bytes] = {}
        super().__init__(*args)

    def _file(self, msg: Any, line: bytes) -> None:
        if isinstance(msg, dict) and "method" not in msg:
            self.lines[json.dumps(msg.get("id"))] = line
        super()._file(msg, line)

    def relayed(self, name: str, args: dict, timeout: float = SLOW) -> Tuple[bytes, dict]:
        """tools/call `name`: the response's line, and its result."""
        rid = self.send_request("tools/call", {"name": name, "arguments": args})
        resp = self.wait_response(rid, timeout)
        assert "result" in resp, resp
        return self.lines[json.dumps(rid)], resp["result"]

    def upstream_line(self, server: str, tool: str, args: dict, direct: bool = False) -> Tuple[bytes, dict]:
        if direct:
            return self.relayed(f"{server}__{tool}", args)
        return self.relayed("call_tool", {"server": server, "tool_name": tool, "tool_args": args})


def _start(world: World, *flags: str, cache: Optional[dict] = None) -> RawProxy:
    world.settings = {"timeout_seconds": 300, "output_cache": cache if cache is not None else {"enabled": False}}
    proxy = RawProxy([*flags, str(world.dir)], world.env())
    world.proxies.append(proxy)
    proxy.initialize()
    return proxy


def _same_as_today(line: bytes, expected: Any) -> None:
    """The relayed line holds `expected` and is, byte for byte, what Abstract wrote before."""
    msg = json.loads(line)
    assert msg["result"] == expected, "the relayed value differs from the upstream's"
    want = _today(msg)
    if line != want:
        at = next((i for i, (a, b) in enumerate(zip(line, want)) if a != b), min(len(line), len(want)))
        raise AssertionError(f"bytes differ at {at} of {len(want)}: sent {line[at - 20:at + 40]!r}, "
                             f"today {want[at - 20:at + 40]!r}")


# -- the writer itself: views at any depth, copied only when exactly what _dumps writes

def _deep(s: str) -> dict:
    """A tool result holding `s` at depths 4 to 11, in objects and arrays, as key and beside short ones."""
    return {"content": [{"type": "text", "text": s}],
            "structuredContent": {"a": s, "b": [s, {"c": {"d": {"e": [[s, 1, None]], "f": "short"}}}], "g": [[[[[s]]]]]}}


# Strings whose JSON (as the escaped or raw-UTF-8 encoders write them) hold every kind of escape
# and raw character, repeated past every piece boundary _string_pieces makes (256, 2 KiB, 16 KiB,
# 64 KiB...), with a shift so that each kind meets a boundary somewhere.
PLAIN = ("plain text, no escape at all " * 900)
VERBATIM = AWKWARD  # escapes _dumps writes as they are (\\n \\" \\\\ \\u0000 \\u001f), raw UTF-8
FOREIGN = 'caf\u00e9 \U0001F680 a/b \\u00e9 \x1f \\ \u2028 '  # as ensure_ascii=True writes it: \\u00e9, \\ud83d\\ude80
LONE = "a\ud800b\udc00 \ud83d"  # lone surrogates, both halves


def _line(mid: int, result: dict, ascii: bool) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}, ensure_ascii=ascii).encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("unit,ascii", [(PLAIN, False), (VERBATIM, False), (VERBATIM, True), (FOREIGN, True),
                                        (LONE, True), (LONE, False)],
                         ids=["plain", "awkward-utf8", "awkward-escaped", "foreign-escapes", "lone-escaped",
                              "lone-as-utf8"])
def test_frame_writes_today_s_bytes_with_views_where_the_bytes_are_the_same(unit, ascii):
    for shift in range(0, 12, 3):
        s = "x" * shift + unit * (90000 // len(unit) + 1)
        line = _line(7, _deep(s), ascii)
        got = abstract._loads_long(line)
        assert got is not None
        msg, places = got
        assert len(places) == 5
        parts = abstract._frame(msg)
        framed = b"".join(parts)
        assert framed == _today(json.loads(line)), (unit[:20], ascii, shift)
        views = [p for p in parts if type(p) is memoryview]
        raw_is_today = not ascii and unit is not LONE or unit is PLAIN
        # each of the 5 strings a view of the line, never a copy, where its bytes are today's
        assert len(views) == (5 if raw_is_today else 0), (len(views), unit[:20], ascii)
        assert all(v.obj is line for v in views)


def test_a_verbatim_check_that_trusts_raw_bytes_would_send_other_bytes():
    """What the check is for: each of these strings, sent as it came, is not what Abstract wrote."""
    for raw in (b'"\\u00e9"', b'"a\\/b"', b'"\\u001F"', b'"\\ud83d\\ude80"', b'"\\ud800"', b'"\xed\xa0\x80"'):
        big = abstract._JsonString(raw, 0, len(raw), 1)
        assert not big.verbatim(), raw
        framed = b"".join(abstract._frame({"t": big, "u": "\u00e9"}))  # (é: escaped beside a lone surrogate)
        assert framed == _today({"t": json.loads(raw), "u": "\u00e9"}), (raw, framed)
        assert raw not in framed or raw == b'"\\ud800"', (raw, framed)
    for raw in (b'"\\\\u00e9"', b'"\\\\/"', b'"\\u001f\\u0000\\n\\"\\\\\xc3\xa9\xe2\x80\xa8"', b'"\\\\\\\\ud800"'):
        big = abstract._JsonString(raw, 0, len(raw), 1)
        assert big.verbatim(), raw  # escaped backslashes before u or /: nothing foreign


def test_verbatim_exactly_when_the_bytes_are_what_json_writes_after_any_run_of_backslashes():
    for k in range(7):  # an odd run ends in an escape's backslash, an even one in escaped ones
        for tail in (b"u00e9", b"/", b"u001f", b"u001F", b"n", b"\xc3\xa9", b"\xed\xa0\x80"):
            raw = b'"x' + b"\\" * k + tail + b'"'
            try:
                value = json.loads(raw)
            except ValueError:
                continue
            today = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
            assert abstract._JsonString(raw, 0, len(raw), 1).verbatim() is (today == raw and b"\xed" not in raw), raw


def test_a_line_of_many_short_strings_goes_to_json_loads_without_a_string_looked_at(monkeypatch):
    """Every answer over 16 KiB to a tools/call may hold a long string now; one of 12,500 short
    strings cost 6 ms looking at them one by one before json.loads read it (2.9 ms)."""
    looked = []
    plain = abstract._PLAIN_STRING_BYTES
    monkeypatch.setattr(abstract, "_PLAIN_STRING_BYTES", type("Spy", (), {
        "match": staticmethod(lambda line, pos: looked.append(pos) or plain.match(line, pos))}))
    rows = [{"id": i, "name": f"name {i}", "city": "Z\u00fcrich", "tags": ["a", "b"]} for i in range(2500)]
    line = _line(5, {"content": [{"type": "text", "text": "short"}], "structuredContent": {"rows": rows}}, False)
    assert abstract._loads_long(line) is None and looked == []


def test_a_long_string_is_found_wherever_its_escaped_quotes_fall():
    text = json.dumps([{"k": 'a "quoted" value', "n": i} for i in range(2000)])  # \" all along
    least = abstract._LONG_STRING
    for shift in range(0, 40, 3):
        for size in (least - 1, least + 1, least + 9):
            s = "x" * shift + text[:size]
            got = abstract._loads_long(_line(5, {"content": [{"type": "text", "text": s}]}, True))
            assert (got is not None) is (len(json.dumps(s)) > least), (shift, size)


# -- the hand-offs: a worker writes its own answer when nothing is queued, in order all the same

class _Stdout:
    """A client's stdout that notes the thread that wrote each frame; the first write can be held."""

    def __init__(self, hold_first: bool) -> None:
        self.frames: list = []
        self.hold, self.held, self.release = hold_first, threading.Event(), threading.Event()

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def writelines(self, parts: list) -> None:
        if self.hold:
            self.hold = False
            self.held.set()
            assert self.release.wait(WAIT)
        self.frames.append((threading.current_thread().name, b"".join(bytes(p) for p in parts)))

    def flush(self) -> None:
        pass


def _serving(out: _Stdout, handler) -> tuple:
    r, w = pipe_pair()
    conn = abstract.Connection(r, out, name="client", pool=abstract._Pool(4), queued=True, half_close=True,
                               close_input=True, requests={"go": handler}).start()
    return conn, w


def _answered(conn: Any, w: Any, out: _Stdout) -> None:
    """Send the request `go`, wait for its answer to be written, and end the session."""
    w.write(b'{"jsonrpc":"2.0","id":1,"method":"go"}\n')
    wait_for(lambda: any(b'"id":1' in f for _, f in out.frames), WAIT, "the answer")
    w.close()
    assert conn.finish(WAIT)
    wait_for(lambda: conn._rfile.closed, WAIT, "the reader to close its input")


def test_a_worker_writes_its_answer_itself_when_nothing_is_queued():
    out = _Stdout(hold_first=False)
    conn, w = _serving(out, lambda req: {"ok": True})
    _answered(conn, w, out)
    writer, frame = out.frames[0]
    assert json.loads(frame)["result"] == {"ok": True}
    assert writer.startswith("abstract-worker"), f"written by {writer}, not by the worker: one hand-off more"


def test_an_answer_still_goes_out_after_what_was_queued_before_it():
    out = _Stdout(hold_first=True)
    conn: Any = None

    def notify_then_answer(req: Any) -> dict:
        conn.notify("notifications/message", {"level": "info", "data": "first"})
        assert out.held.wait(WAIT)  # the notice is being written (and blocks) as the answer is sent
        return {"ok": True}

    conn, w = _serving(out, notify_then_answer)
    threading.Thread(target=lambda: out.held.wait(WAIT) and out.release.set(), daemon=True).start()
    _answered(conn, w, out)
    assert [json.loads(f).get("method", "answer") for _, f in out.frames] == ["notifications/message", "answer"]


def test_a_write_that_fails_ends_the_session_without_an_error_in_the_writer(monkeypatch):
    """The writer whose write failed ended the session, whose finish() joined the writer: itself
    (RuntimeError: cannot join current thread)."""
    failed = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failed.append(args.exc_value))

    class Gone:
        def write(self, data: bytes) -> None:
            raise BrokenPipeError("the peer is gone")

        writelines = write

        def flush(self) -> None:
            pass

    r, w = pipe_pair()
    conn = abstract.Connection(r, Gone(), name="up", queued=True, close_input=True).start()
    conn.notify("notifications/message", {"level": "info", "data": "x"})
    assert conn.closed.wait(WAIT)
    wait_for(lambda: not conn._writer.is_alive(), WAIT, "the writer to end")
    w.close()
    wait_for(lambda: conn._rfile.closed, WAIT, "the reader to close its input")
    assert failed == []


# -- end to end through the fake upstream: every depth, both encodings, meta and direct mode, both eras

@pytest.mark.parametrize("direct", [False, True], ids=["meta", "direct"])
@pytest.mark.parametrize("shape,ascii", [("text", False), ("text", True), ("several", False), ("several", True),
                                         ("structured_records", False), ("structured_records", True)])
def test_a_long_answer_relayed_whole_is_today_s_bytes(world: World, shape, ascii, direct):
    world.fake("up")
    proxy = _start(world, *(["--expose", "direct"] if direct else []))
    line, _ = proxy.upstream_line("up", "long", {"shape": shape, "mb": 0.3, "ascii": ascii}, direct)
    _same_as_today(line, make_long(shape, 0.3))


@pytest.mark.parametrize("unit", [VERBATIM, FOREIGN, LONE], ids=["awkward", "foreign-escapes", "lone-surrogates"])
def test_strings_at_every_depth_and_piece_boundary_relay_as_today(world: World, unit):
    world.fake("up")
    proxy = _start(world)
    for shift, ascii in ((0, True), (5, False), (11, True)):
        s = "y" * shift + unit * (70000 // len(unit))
        raw = _line(0, _deep(s), ascii).decode("utf-8", "surrogateescape").replace('"id": 0', '"id": %ID%', 1)
        line, _ = proxy.upstream_line("up", "long", {"raw": raw})
        _same_as_today(line, _deep(s))


@pytest.mark.parametrize("upstream", [(), ("--modern-only",)], ids=["handshake-upstream", "modern-upstream"])
def test_the_cache_on_and_under_its_threshold_relays_today_s_bytes_in_the_modern_era(world: World, upstream):
    world.fake("up", *upstream)
    world.settings = {"timeout_seconds": 300, "output_cache": {"min_size": 5_000_000}}
    proxy = RawProxy([str(world.dir)], world.env())
    world.proxies.append(proxy)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "pytest", "version": "0"}}
    rid = proxy.send_request("tools/call", {"name": "call_tool", "_meta": meta, "arguments": {
        "server": "up", "tool_name": "long", "tool_args": {"shape": "structured", "mb": 0.5, "ascii": False}}})
    proxy.wait_response(rid, SLOW)
    line = proxy.lines[json.dumps(rid)]
    msg = json.loads(line)
    assert msg["result"].get("resultType") == "complete", msg["result"].keys()
    assert msg["result"]["content"] == make_long("structured", 0.5)["content"]
    assert line == _today(msg)


@needs_proc
def test_a_large_answer_relayed_whole_is_never_copied(world: World):
    """Before: the line, its text, the parsed string, its JSON and that JSON's UTF-8 (with a copy
    for the newline): about three times the answer at once. Now the line and small pieces."""
    world.fake("up")
    proxy = _start(world)
    mb = 24
    assert text_of(proxy.upstream("up", "echo", {"text": "warm"})) == "warm"
    before = proc_status(proxy.pid, "VmRSS")
    Path(f"/proc/{proxy.pid}/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
    line, res = proxy.upstream_line("up", "long", {"shape": "text", "mb": mb, "ascii": False})
    grew = (proc_status(proxy.pid, "VmHWM") - before) * 1024
    assert res["content"][0]["text"] == make_long("text", mb)["content"][0]["text"]
    assert line == _today(json.loads(line))
    assert grew < 1.8 * len(line), f"peak memory grew by {grew / len(line):.1f} times the {len(line) / 1e6:.1f} MB answer"


def test_a_long_error_text_is_masked_not_relayed_as_it_came(world: World):
    """An upstream's isError result has its secrets masked; its long text is decoded for that."""
    secret = "tok-" + "9f3a" * 6
    world.fake("up", env={"UP_API_TOKEN": secret})
    proxy = _start(world)
    text = "x" * 40000 + f" the token was {secret} " + "y" * 100
    raw = _line(0, {"content": [{"type": "text", "text": text}], "isError": True}, False).decode()
    line, res = proxy.upstream_line("up", "long", {"raw": raw.replace('"id": 0', '"id": %ID%', 1)})
    assert res["isError"] is True and secret not in text_of(res) and "the token was ***" in text_of(res)
    assert line == _today(json.loads(line))


# -- malformed long answers: a clean error, never a line the client cannot parse

def _bad_line(inner: bytes, deep: bool) -> str:
    """A tools/call answer whose one long string (at depth 4, or 9) is `inner` (JSON string content, raw)."""
    if deep:
        head, tail = '{"structuredContent":{"a":[[{"b":{"c":["', '"]}}]]},"content":[]'
    else:
        head, tail = '{"content":[{"type":"text","text":"', '"}]'
    return ('{"jsonrpc":"2.0","id":%ID%,"result":' + head + inner.decode("utf-8", "surrogateescape") + tail + "}}")


@pytest.mark.parametrize("deep", [False, True], ids=["depth4", "depth9"])
@pytest.mark.parametrize("bad", [b"\\x", b"\x01", b"\\u12", b"\xff", b"\\ud83d\\uXYZW", b"\xed\xa0"],
                         ids=["bad-escape", "control-char", "short-u-escape", "invalid-utf8", "bad-pair",
                              "cut-utf8"])
def test_a_malformed_long_answer_relayed_fails_its_call_cleanly(world: World, bad, deep):
    world.fake("up")
    proxy = _start(world)
    body = b"x" * 40000 + bad + b"y" * 100
    line, res = proxy.upstream_line("up", "long", {"raw": _bad_line(body, deep)})
    assert res.get("isError") is True and "cannot be read" in text_of(res), text_of(res)[:300]
    assert line == _today(json.loads(line))
    assert text_of(proxy.upstream("up", "echo", {"text": "still"})) == "still"
    assert proxy.bad_lines == []


def test_an_unterminated_long_string_fails_its_call_cleanly(world: World):
    world.fake("up")
    proxy = _start(world)
    line, res = proxy.upstream_line("up", "long", {"raw": _bad_line(b"z" * 60000, False)[:-4]})
    assert res.get("isError") is True and "cannot be read" in text_of(res), text_of(res)[:300]
    assert proxy.bad_lines == []


# -- real servers: server-filesystem (stdio, a text and its structuredContent twin) and
# -- server-everything (its echo, over stdio and Streamable HTTP)

def _real(world: World, name: str, entry: dict, *flags: str) -> RawProxy:
    world.servers[name] = entry
    return _start(world, *flags)


@pytest.mark.skipif(not FILESYSTEM.exists(), reason=f"server-filesystem not installed in {HOME} "
                                                    f"(bash tests/realservers/install.sh)")
@pytest.mark.parametrize("direct", [False, True], ids=["meta", "direct"])
def test_server_filesystem_reads_relay_as_today(world: World, tmp_path: Path, direct):
    data = tmp_path / "data"
    data.mkdir()
    text = awkward_text(0.4).replace("\x00", "\x01")  # (a file of text: no NUL)
    (data / "awkward.txt").write_bytes(text.encode("utf-8"))  # (as it is: no newline translation)
    proxy = _real(world, "fs", {"command": str(FILESYSTEM), "args": [str(data)]},
                  *(["--expose", "direct"] if direct else []))
    line, res = proxy.upstream_line("fs", "read_text_file", {"path": str(data / "awkward.txt")}, direct)
    assert res["content"][0]["text"] == text, text_of(res)[:300]
    assert line == _today(json.loads(line))


def _echo_message() -> str:
    return "".join(f"{i:05d} {AWKWARD}" for i in range(800)) + " \ud800 lone"


@pytest.mark.skipif(not EVERYTHING.exists() or shutil.which("node") is None,
                    reason=f"server-everything not installed in {HOME} (bash tests/realservers/install.sh)")
def test_server_everything_echo_over_stdio_relays_as_today(world: World):
    proxy = _real(world, "ev", {"command": shutil.which("node"), "args": [str(EVERYTHING)]})
    for message in (_echo_message(), _echo_message()[:-8]):  # with a lone surrogate, and without
        line, res = proxy.upstream_line("ev", "echo", {"message": message})
        assert res["content"][0]["text"] == f"Echo: {message}", text_of(res)[:300]
        assert line == _today(json.loads(line))


@pytest.mark.skipif(not EVERYTHING.exists() or shutil.which("node") is None,
                    reason=f"server-everything not installed in {HOME} (bash tests/realservers/install.sh)")
def test_server_everything_echo_over_http_relays_as_today(world: World):
    from test_remote import Served, free_port

    port = free_port()
    served = Served([shutil.which("node"), str(EVERYTHING), "streamableHttp"], port,
                    env={**os.environ, "PORT": str(port)})
    try:
        proxy = _real(world, "ev", {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"})
        for message in (_echo_message(), _echo_message()[:-8]):
            line, res = proxy.upstream_line("ev", "echo", {"message": message})
            assert res["content"][0]["text"] == f"Echo: {message}", text_of(res)[:300]
            assert line == _today(json.loads(line))
    finally:
        served.stop()
