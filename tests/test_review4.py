"""Review 4: adversarial checks of the query, newrest and relay merges (issues 24, 25, 27).
Each test failed before its fix."""

from __future__ import annotations

import json

import pytest

import abstract

from conftest import World
from test_splice import _start


def _strict(line: bytes) -> dict:
    """The line as a strict peer (JSON.parse) reads it: NaN and Infinity are no JSON."""
    def refuse(word: str) -> None:
        raise ValueError(f"{word} is not JSON")
    return json.loads(line, parse_constant=refuse)


# ==== relay: every frame the client gets is JSON ========================================


@pytest.mark.parametrize("number", ["1e999", "-1e999", "1" * 400 + ".5"])
@pytest.mark.parametrize("direct", [False, True], ids=["call_tool", "transparent"])
def test_an_upstream_number_too_large_for_a_float_reaches_the_client_as_json(world: World,
                                                                             number, direct):
    """Before: an upstream's 1e999 was read as a float infinity and written to the client as
    Infinity, which is no JSON: a strict client rejects the whole answer."""
    world.fake("up")
    proxy = _start(world, *(["--expose", "direct"] if direct else []))
    raw = ('{"jsonrpc":"2.0","id":%ID%,"result":{"content":[{"type":"text","text":"ok"}],'
           '"structuredContent":{"v":' + number + ',"w":[' + number + ']}}}')
    line, _ = proxy.upstream_line("up", "long", {"raw": raw}, direct)
    msg = _strict(line)
    assert msg["result"]["structuredContent"] == {"v": None, "w": [None]}, line[:300]


# ==== query: the table files never outlive Abstract =====================================


def test_a_table_loaded_after_the_shutdown_closed_the_tables_is_removed(tmp_path):
    """Before: a query whose load ended after the shutdown's _Tables.close() kept its table,
    so the records' file stayed in the temporary folder after Abstract exited."""
    tables = abstract._Tables()
    tables.close()
    table = abstract._load_table([{"id": 1, "secret": "x"}], folder=str(tmp_path))
    tables.put(("file", "a"), table, 1 << 30)
    assert list(tmp_path.iterdir()) == []
    assert tables.get(("file", "a")) is None
