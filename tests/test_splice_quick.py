"""The quick check of a long string (issue 27, 250 KB): _plain_string reads a JSON string with
few escapes, none of them \\u, at C speed (bytes.find, translate, utf_8_decode) instead of json's
scanner. It may decline any string (json's scanner then reads it, as before), but every string it
accepts must be one json.loads reads, ending where json's scanner ends it, of the length json
gives, and `plain` only when it holds no \\u or \\/ escape. Checked against json itself on strings
built from every kind of piece that matters: escapes valid and not, control characters, UTF-8 and
its cut or invalid forms, surrogates as UTF-8, and runs of backslashes before quotes.
"""

from __future__ import annotations

import json
import random
from typing import Any, Optional

import pytest

import abstract

PIECES = [b"a", b"plain text ", b"\\n", b"\\t", b'\\"', b"\\\\", b"\\/", b"\\b", b"\\f", b"\\r",
          b"\\u00e9", b"\\u0000", b"\\ud83d\\ude80", b"\\ud800", b"\\x", b"\\", b"\\\\\\", b"\x01", b"\x1f",
          b"\t", b"\x7f", b"\xc3\xa9", b"\xf0\x9f\x9a\x80", b"\xe2\x80\xa8", b"\xed\xa0\x80", b"\xc3",
          b"\xff", b"\xf0\x9f", b'"', b"'", b"{", b"0123456789abcdef" * 8]


def _check(buf: bytes, pos: int = 0) -> Optional[tuple]:
    """_plain_string of the string at buf[pos], checked against json: what it accepts json.loads
    reads whole, and alone (a JSON string holds no unescaped quote, so that is where json's
    scanner ends it too), with as many characters."""
    got = abstract._plain_string(buf, pos)
    if got is None:
        return None
    end, chars, plain = got
    try:
        value = json.loads(buf[pos:end])
    except ValueError:
        raise AssertionError(f"accepted a string json rejects: {buf[:200]!r}") from None
    assert isinstance(value, str) and chars == len(value), (buf[:200], chars, value)
    escapes = buf[pos + 1:end - 1].replace(b"\\\\", b"")
    assert plain is (b"\\/" not in escapes and b"\\u" not in escapes), buf[:200]
    return got


@pytest.mark.parametrize("seed", range(6))
def test_every_string_the_quick_check_accepts_is_json_s_to_the_byte(seed):
    rnd = random.Random(seed)
    accepted = declined = 0
    for _ in range(4000):
        body = b"".join(rnd.choice(PIECES) for _ in range(rnd.randint(0, 30)))
        buf = b'"' + body + b'","after":"x"}' if rnd.random() < 0.8 else b'"' + body
        lead = rnd.randint(0, 3)
        got = _check(b" " * lead + buf, lead)
        # a line over 1 MiB is read into a bytearray (_read_lines): the same answer
        assert abstract._plain_string(bytearray(b" " * lead + buf), lead) == got
        accepted, declined = accepted + (got is not None), declined + (got is None)
    assert accepted > 500 and declined > 500, (accepted, declined)  # both ways taken


@pytest.mark.parametrize("bad", [b"\\x", b"\x01", b"\t", b"\x1f", b"\xff", b"\xc3", b"\xf0\x9f", b"\\"],
                         ids=["bad-escape", "control", "tab", "unit-separator", "not-utf8", "cut-utf8",
                              "cut-emoji", "lone-backslash"])
def test_a_malformed_long_string_is_never_accepted(bad):
    for at in (0, 1, 255, 256, 65535, 65536, 65537, 99999):
        body = b"x" * at + bad + b"y" * (100000 - at)
        assert abstract._plain_string(b'"' + body + b'"}', 0) is None, (bad, at)


def test_an_unterminated_string_is_never_accepted():
    for body in (b"x" * 70000, b"x" * 70000 + b'\\"', b"x\\n" * 100, b"x" * 65535 + b"\\"):
        assert abstract._plain_string(b'"' + body, 0) is None


def test_a_long_text_of_newlines_and_quotes_is_read_quickly_and_exactly():
    """The benchmark's shape (a newline escape a KiB) and the escapes _dumps writes, past every
    64 KiB piece, UTF-8 of 1 to 4 bytes cut at piece boundaries."""
    for unit in ("0123456789abcdef" * 64 + "\n", 'caf\u00e9 "q" \\ \U0001F680\t\u2028 ' + "z" * 1000):
        for shift in range(4):
            s = "x" * shift + unit * (300000 // len(unit))
            line = json.dumps({"text": s, "n": 1}, ensure_ascii=False).encode()
            got = _check(line, line.index(b'"', 7))
            assert got is not None and got[1] == len(s) and got[2] is True


def test_escapes_all_along_or_a_u_escape_are_left_to_json_s_scanner():
    """Declined, not misread: json's scanner reads each escape in C, where this check's Python
    would look at each one."""
    dense = json.dumps('a "quoted" value, ' * 5000).encode()
    assert abstract._plain_string(dense, 0) is None
    assert abstract._plain_string(b'"' + b"x" * 1000 + b'\\u00e9"', 0) is None
    sparse = json.dumps('a "quoted" value, ' + "x" * 100000).encode()
    assert _check(sparse) is not None


def test_a_long_answer_read_quickly_frames_as_today(monkeypatch):
    """Through _loads_long and _frame: the same bytes as json.dumps writes, the long string a view
    of the line, and no verbatim scan needed for it."""
    text = ("0123456789abcdef" * 64 + "\n") * 250
    line = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": text}]}},
                      ensure_ascii=False).encode()
    scanned: list = []
    hint = abstract._ESCAPE_HINT
    monkeypatch.setattr(abstract, "_ESCAPE_HINT", type("Spy", (), {
        "search": staticmethod(lambda *a: scanned.append(a[1:]) or hint.search(*a))}))
    msg, places = abstract._loads_long(line)
    assert [len(p[2]) for p in places] == [len(text)] and places[0][2].plain
    parts = abstract._frame({"jsonrpc": "2.0", "id": 3, "result": msg["result"]})
    want: Any = {"jsonrpc": "2.0", "id": 3, "result": json.loads(line)["result"]}
    assert b"".join(parts) == json.dumps(want, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    assert any(type(p) is memoryview and p.obj is line for p in parts)
    assert scanned == []
