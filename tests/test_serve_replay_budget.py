"""--serve's resumable streams share one bound on what their replays hold (_ReplayBudget,
_SERVE_REPLAY_TOTAL): past it, the stream written to least recently loses its replay first. A
real abstract.main serving the fake upstream over raw HTTP; every wait bounded."""

from __future__ import annotations

from test_serve import Session, in_process
from test_serve_streams import Raw


def _changes(s: Session, n: int) -> None:
    for _ in range(n):  # each is a notifications/tools/list_changed on every GET stream
        s.request("tools/call", {"name": "up__change_tools", "arguments": {}})


def test_past_the_total_the_stream_written_least_recently_loses_its_replay(world, monkeypatch):
    import abstract

    monkeypatch.setattr(abstract, "_SERVE_REPLAY_TOTAL", 3000)  # bytes, all streams together
    world.fake("up", "--extras")
    with in_process(world, "--expose", "direct") as (http_, _):
        a, b, c = (Session(http_, get_stream=False) for _ in range(3))
        away = Raw(http_.port, "GET", headers={"Mcp-Session-Id": a.sid})
        _changes(b, 3)
        ids = [away.event()[0] for _ in range(3)]  # a read all three, then went away
        away.close()
        # what a left is replayed (the bound not reached yet; checked, then given up again)
        back = Raw(http_.port, "GET", headers={"Mcp-Session-Id": a.sid, "Last-Event-ID": ids[0]})
        assert [back.event()[0] for _ in range(2)] == ids[1:]
        back.close()
        # c's stream is written to after a's: 35 events of 61 bytes (2,135), and b's POST
        # streams (each its list_changed and its answer: 142; its last nine kept): over 3,000
        reading = Raw(http_.port, "GET", headers={"Mcp-Session-Id": c.sid})
        _changes(b, 35)
        seen = [reading.event()[0] for _ in range(35)]
        reading.close()
        # c's, the most recent, is kept: its last event, after the one before it
        mine = Raw(http_.port, "GET", headers={"Mcp-Session-Id": c.sid, "Last-Event-ID": seen[-2]})
        assert mine.event()[0] == seen[-1]
        # a's is gone: only what was never written to it comes (from its fourth event on)
        again = Raw(http_.port, "GET", headers={"Mcp-Session-Id": a.sid, "Last-Event-ID": ids[0]})
        first = again.event()[0]
        assert first.rpartition("-")[0] == ids[0].rpartition("-")[0]
        assert int(first.rpartition("-")[2]) > 3, (first, ids)


def test_an_ended_session_lets_go_of_what_its_streams_kept(world, monkeypatch):
    import abstract

    budgets: list = []
    made = abstract._ReplayBudget.__init__

    def keep(self, *args, **kw):  # the server's budget, to read its total
        made(self, *args, **kw)
        budgets.append(self)

    monkeypatch.setattr(abstract._ReplayBudget, "__init__", keep)
    world.fake("up", "--extras")
    with in_process(world, "--expose", "direct") as (http_, _):
        a, b = Session(http_, get_stream=False), Session(http_, get_stream=False)
        get = Raw(http_.port, "GET", headers={"Mcp-Session-Id": a.sid})
        _changes(b, 2)
        get.event(), get.event()
        assert budgets[0]._total > 0
        get.close()
        for s in (a, b):  # (b's answers were streams too: each kept its two events)
            assert http_.send("DELETE", sid=s.sid).status in (200, 204)
        assert budgets[0]._total == 0 and not budgets[0]._held
