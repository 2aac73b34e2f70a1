"""A third adversarial review of --serve: the sessions of each credential's 2026-07-28 requests
(_Sessions._stateless_session) under races a loaded machine makes likely. Each test fails before
its fix (but the one that says it is a guard). The sessions' hub is driven in process (its
sessions' servers stand-ins that answer ping, as test_serve_review2's), so that each race's
order is the test's own; the lapsed credential's request goes through a real --serve (in
process, a stand-in guard). Nothing sleeps to synchronise, and every wait is bounded."""

from __future__ import annotations

import threading
import types
from typing import Any, Callable, List, Optional

import pytest

import abstract

from conftest import wait_for
from test_serve_review2 import _bare_server

LONG = 30.0


def _hub(max_sessions: int = 4, idle_s: float = 1800.0,
         make: Callable[[Any, Any], Any] = _bare_server) -> Any:
    """--serve's sessions over no upstream (what _Sessions asks of _Upstreams, in small)."""
    ups = types.SimpleNamespace(client=types.SimpleNamespace(serve_many=lambda: None),
                                listen=lambda *a: None, names=lambda: [])
    return abstract._Sessions(make, ups, 1 << 20, idle_s=idle_s, max_sessions=max_sessions)


def _ping(session: Any, mid: int = 7) -> dict:
    """A ping answered by `session`, as a request of its client's."""
    stream = session.new_stream()
    session.call({"jsonrpc": "2.0", "id": mid, "method": "ping"}, stream, here=True)
    got = stream.get(LONG)
    assert got is not None, "no answer"
    return got


def _released(session: Any) -> None:
    """The request that found `session` is answered (before the fix nothing was claimed)."""
    getattr(session, "release", lambda: None)()


@pytest.fixture
def hubs():
    made: List[Any] = []
    yield made
    for hub in made:
        hub.close("the test ended")


def test_a_credential_session_a_request_has_just_found_is_not_ended_to_make_room(hubs):
    """serve.max_sessions 1. Credential A's request has found its session (not yet running on
    it) when B's first request comes: A's session is not idle, so B gets None (503), and A's
    request is answered. It was ended to make room, and A's request got -32000 'ended to make
    room' though it had come first. Once A's request is answered, B's next one gets room."""
    hub = _hub(max_sessions=1)
    hubs.append(hub)
    a = hub._stateless_session("oauth:a")
    assert hub._stateless_session("oauth:b") is None
    assert not a.ended
    assert _ping(a) == {"jsonrpc": "2.0", "id": 7, "result": {}}
    _released(a)
    b = hub._stateless_session("oauth:b")
    assert b is not None and a.ended
    _released(b)


def test_the_sweeper_does_not_end_a_credential_session_a_request_has_just_found(hubs):
    """serve.idle_timeout_seconds passed for credential A's session as its request found it:
    the sweeper leaves it (busy) while it ends another idle one, and A's request is answered.
    It ended it as idle, and the request that had just come got -32000 'idle for ...'."""
    hub = _hub(idle_s=0.2)
    hubs.append(hub)
    a = hub._stateless_session("oauth:a")  # (first in the sweeper's pass: made first)
    z = hub._stateless_session("oauth:z")
    _released(z)
    a.used = z.used = a.used - 1000.0  # idle long ago, by the clock the sweeper reads
    wait_for(lambda: z.ended, LONG, "the sweeper ending the idle session")
    assert not a.ended
    assert _ping(a) == {"jsonrpc": "2.0", "id": 7, "result": {}}
    _released(a)


def test_a_credential_whose_session_was_ended_to_make_room_gets_a_new_one(hubs):
    """(A guard of the claims, not a defect: it passes before the fix too.) A's idle session
    is ended to make room for B's; A's next request is served by a new session of A's (B's,
    idle, ended in turn), not answered with the old one's end."""
    hub = _hub(max_sessions=1)
    hubs.append(hub)
    a = hub._stateless_session("oauth:a")
    _released(a)
    b = hub._stateless_session("oauth:b")  # (A's, idle, ended to make room)
    assert a.ended
    _released(b)
    again = hub._stateless_session("oauth:a")  # (B's, idle: ended in turn)
    assert again is not None and again is not a and not again.ended
    assert _ping(again) == {"jsonrpc": "2.0", "id": 7, "result": {}}
    _released(again)


@pytest.mark.parametrize("stateless", [True, False], ids=["credential", "initialize"])
def test_a_session_being_made_at_shutdown_is_ended_too(hubs, stateless):
    """Shutdown (close) while a session is being made (its server built): close did not see it
    (it ends the sessions it finds), so it was never ended: its request ran on, its server's
    connection, writes and query workers were never stopped. Now it is ended once made, and its
    request answered with the shutdown's reason."""
    entered, go = threading.Event(), threading.Event()

    def slow(rfile: Any, wfile: Any) -> Any:
        entered.set()
        assert go.wait(LONG)
        return _bare_server(rfile, wfile)

    hub = _hub(make=slow)
    got: List[Optional[Any]] = []
    opens = ((lambda: hub._stateless_session("oauth:a")) if stateless
             else (lambda: hub._open("oauth:a")))
    t = threading.Thread(target=lambda: got.append(opens()), daemon=True)
    t.start()
    assert entered.wait(LONG)
    hub.close("Abstract is shutting down")
    go.set()
    t.join(LONG)
    (session,) = got
    assert session is not None and session.ended
    answer = _ping(session)
    assert answer["error"] == {"code": -32000, "message": "Abstract is shutting down"}


class LapsingGuard:
    """A guard (authentication on) that passes every request, and whose `who` names no one
    for a token with "lapsing" in it: what an OAuth access token that expires (or is revoked)
    between the guard's check and the look-up of its owner gives."""

    authenticates = True

    def check(self, method: str, path: str, headers: Any) -> None:
        return None

    def who(self, headers: Any) -> str:
        token = headers.get("Authorization") or ""
        return "" if "lapsing" in token else f"oauth:{token[-6:]}"


def test_a_credential_that_lapses_as_its_request_comes_is_refused_not_served_as_no_one(
        world, monkeypatch):
    """With authentication on, a 2026-07-28 request whose credential no longer names anyone
    once it passed the guard gets 401. It was served in the session of the unauthenticated
    (owner ""): shared by every such request whatever its credential (one's task another's,
    a requestState bound to no one), never ended, not counted in serve.max_sessions."""
    from test_serve import in_process
    from test_serve_stateless_owner import answer, modern
    from test_serve_tunnel import As

    original = abstract._serve_forever
    monkeypatch.setattr(abstract, "_serve_forever", lambda *a, **k: original(
        *a, **dict(k, guard=LapsingGuard(), auth=None, secure=None)))
    world.fake("up", "--tasks")
    with in_process(world, "--expose", "direct") as (http_, _):
        job = {"name": "up__job", "arguments": {"seconds": 60}, "task": {"ttl": 60000}}
        ev = modern(As(http_.port, "lapsing-a"), "tools/call", job)
        _, lapsed = ev.until_answer()
        assert ev.status == 401, lapsed
        assert "expired or was revoked" in lapsed["error"]["message"], lapsed
        assert 'error="invalid_token"' in ev.headers["www-authenticate"]
        assert answer(As(http_.port, "good-b"), "ping", {})["status"] == 200
