"""--serve: the 2026-07-28 (stateless) requests of each credential are served by a session of
their own (_Sessions._stateless_session): another credential's tasks are unknown to them, an
upstream's question during one credential's call is never put to another's, the sessions are
bounded by serve.max_sessions (the least recently used idle one ended to make room, else 503),
and without authentication every client still shares one. A real abstract.py serving the fake
upstream, driven over HTTP with the server's token and OAuth access tokens. Every wait is
bounded; nothing sleeps to synchronise.
"""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any, Iterator, Optional, Tuple

from conftest import text_of, wait_for
from test_serve import ELICIT, LONG, TOKEN, Events, Http, Served, Session
from test_serve_tunnel import As, Via, oauth_login

ASK = {"name": "up__ask_client", "arguments": {"method": "elicitation/create", "params": ELICIT}}
CAPS = {"elicitation": {}}


def meta(caps: Optional[dict] = None) -> dict:
    return {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps or {}}


def modern(http_: Http, method: str, params: dict, caps: Optional[dict] = None,
           mid: Any = 1) -> Events:
    """A 2026-07-28 request (no session), with the headers that era asks for."""
    headers = {"Mcp-Method": method}
    if isinstance(params.get("name"), str):
        headers["Mcp-Name"] = params["name"]
    return http_.post({"jsonrpc": "2.0", "id": mid, "method": method,
                       "params": dict(params, _meta=meta(caps))}, **headers)


def answer(http_: Http, method: str, params: dict, caps: Optional[dict] = None) -> dict:
    ev = modern(http_, method, params, caps)
    _, got = ev.until_answer()
    got["status"] = ev.status
    return got


def follow_up(http_: Http, asked: dict, name: str) -> dict:
    """The follow-up of the input_required `asked` (ASK's), answering it with `name`."""
    (key, _), = asked["inputRequests"].items()
    return answer(http_, "tools/call", dict(ASK, requestState=asked["requestState"],
                                            inputResponses={key: {"action": "accept",
                                                                  "content": {"name": name}}}),
                  CAPS)


def hang(port: int, tool: str) -> socket.socket:
    """A 2026-07-28 call with the server's token, on a socket the test closes (the client
    going away: its call is cancelled) without reading the answer."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": {}, "_meta": meta()}}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=LONG)
    sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}"
                 f"\r\nAccept: application/json, text/event-stream\r\nContent-Type: "
                 f"application/json\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


@contextlib.contextmanager
def two_credentials(world: Any, *fake: str) -> Iterator[Tuple[Served, Http, Http]]:
    """Abstract serving the fake upstream `up` (with `fake` flags): (it, a client with the
    server's token, a client with an OAuth access token of its own); stopped at the end."""
    world.fake("up", *fake)
    srv = Served(world)
    try:
        port = srv.http.port
        yield srv, srv.http, As(port, oauth_login(Via(port))[1]["access_token"])
    finally:
        srv.stop()


def logged(srv: Served, text: str) -> str:
    """The next line of Abstract's stderr that holds `text` (each waited for within LONG)."""
    while True:
        line = srv.lines.get(timeout=LONG).decode()
        assert line, f"abstract ended before it logged {text!r}"
        if text in line:
            return line


def test_another_credentials_task_is_unknown_and_cannot_be_cancelled(world):
    """A task one credential's 2026-07-28 call made is not seen by another's tasks/get,
    tasks/result or tasks/cancel: each gets the error a task id no one made gets, and nothing
    reaches the upstream; its own credential still gets and cancels it."""
    with two_credentials(world, "--tasks") as (_, mine, theirs):
        made = answer(mine, "tools/call", {"name": "up__job", "arguments": {"seconds": 60},
                                           "task": {"ttl": 60000}})
        tid = made["result"]["task"]["taskId"]
        unknown = answer(theirs, "tasks/get", {"taskId": "nope"})["error"]
        assert "Unknown task" in unknown["message"]
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            got = answer(theirs, method, {"taskId": tid})
            assert "error" in got, (method, got)
            assert got["error"]["code"] == unknown["code"]
            assert got["error"]["message"] == unknown["message"].replace('"nope"', f'"{tid}"')
        assert not world.events("up", "tasks/get") and not world.events("up", "tasks/cancel")
        assert answer(mine, "tasks/get", {"taskId": tid})["result"]["status"] == "working"
        assert answer(mine, "tasks/cancel", {"taskId": tid})["result"]["status"] == "cancelled"


def test_an_upstreams_question_during_one_credentials_call_is_never_put_to_another(world):
    """A handshake-era upstream asks during a 2026-07-28 call: alone, the caller gets it
    (input_required) and its follow-up answers it. With another credential's call in flight
    at the same upstream, which call it is for is not known: it is refused to the upstream
    (-32601, the rule for sessions of several users), and the other credential is asked
    nothing (it was handed the question before)."""
    with two_credentials(world, "--extras") as (_, a, b):
        asked = answer(a, "tools/call", ASK, CAPS)["result"]
        assert asked["resultType"] == "input_required", asked
        (ask,) = asked["inputRequests"].values()
        assert ask["params"]["message"] == "your name?"
        assert "Al" in text_of(follow_up(a, asked, "Al")["result"])
        b_call = modern(b, "tools/call", {"name": "up__record_cancel", "arguments": {}}, CAPS)
        wait_for(lambda: world.events("up", "started"), LONG, "B's call at the upstream")
        got = answer(a, "tools/call", ASK, CAPS)["result"]
        text = json.dumps(got)
        assert "your name?" not in text and got.get("resultType") != "input_required", text
        assert "several users" in text and "no one is asked" in text, text
        assert b_call.q.empty(), b_call.q.get()  # B was asked nothing


def test_another_credentials_follow_up_cannot_continue_a_held_call(world):
    """The requestState of one credential's input_required is bound to it: another's follow-up
    with it (and an answer) is refused and reaches nothing; the first one's then continues the
    held call."""
    with two_credentials(world, "--extras") as (_, a, b):
        asked = answer(a, "tools/call", ASK, CAPS)["result"]
        stolen = json.dumps(follow_up(b, asked, "Bo"))
        assert "requestState is not one Abstract gave" in stolen, stolen
        assert "another credential" in stolen and "Bo" not in stolen
        assert not world.events("up", "answered")
        done = text_of(follow_up(a, asked, "Al")["result"])
        assert "Al" in done and "Bo" not in done


def test_without_authentication_stateless_clients_still_share_one_session(world):
    """--serve-insecure: no credential, so every 2026-07-28 client's requests share one
    session, as before: one client's task is another's too, and that session is not counted
    in serve.max_sessions (a handshake-era session fills it here)."""
    world.fake("up", "--tasks")
    world.settings = {"serve": {"max_sessions": 1}}
    srv = Served(world, "--serve-insecure")
    try:
        first, second = Http(srv.http.port), Http(srv.http.port)
        Session(first, get_stream=False)  # the one session serve.max_sessions allows
        made = answer(first, "tools/call", {"name": "up__job", "arguments": {"seconds": 60},
                                            "task": {"ttl": 60000}})
        tid = made["result"]["task"]["taskId"]
        assert answer(second, "tasks/get", {"taskId": tid})["result"]["status"] == "working"
        assert answer(second, "tasks/cancel", {"taskId": tid})["result"]["status"] == "cancelled"
    finally:
        srv.stop()


def test_past_max_sessions_the_least_recently_used_idle_credential_session_is_ended(world):
    """serve.max_sessions 2 and three credentials: the third's first 2026-07-28 request ends
    the session of the credential used least recently (its task is then unknown to it), and
    an initialize at the bound ends the next one; the others' go on."""
    world.fake("up", "--tasks")
    world.settings = {"serve": {"max_sessions": 2}}
    srv = Served(world)
    try:
        port = srv.http.port
        token = srv.http
        one, two = (As(port, oauth_login(Via(port))[1]["access_token"]) for _ in range(2))
        made = answer(token, "tools/call", {"name": "up__job", "arguments": {"seconds": 60},
                                            "task": {"ttl": 60000}})
        tid = made["result"]["task"]["taskId"]
        assert answer(one, "ping", {})["result"] is not None
        assert answer(two, "ping", {})["status"] == 200  # the third: the token's is ended
        assert "ended to make room for another (serve.max_sessions 2)" in logged(
            srv, "a session ended")
        gone = answer(token, "tasks/get", {"taskId": tid})  # (a new session: `one`'s ended)
        assert "Unknown task" in gone["error"]["message"], gone
        logged(srv, "a session ended")
        assert answer(two, "ping", {})["status"] == 200  # (still its own)
        Session(one, get_stream=False)  # an initialize at the bound: the token's is ended
        logged(srv, "a session ended")
        assert answer(two, "ping", {})["status"] == 200
    finally:
        srv.stop()


def test_past_max_sessions_with_every_credential_busy_a_new_one_gets_503(world):
    """serve.max_sessions 2, each session with a call in flight: a third credential's
    2026-07-28 request gets 503 saying what to do; once a call ends it is served."""
    world.fake("up", "--extras")
    world.settings = {"serve": {"max_sessions": 2}}
    srv = Served(world)
    try:
        port = srv.http.port
        one, two = (As(port, oauth_login(Via(port))[1]["access_token"]) for _ in range(2))
        held = hang(port, "up__record_cancel")
        wait_for(lambda: world.events("up", "started"), LONG, "the token's call upstream")
        busy = modern(one, "tools/call", {"name": "up__record_cancel", "arguments": {}})
        wait_for(lambda: len(world.events("up", "started")) == 2, LONG, "one's call upstream")
        full = answer(two, "ping", {})
        assert full["status"] == 503, full
        says = full["error"]["message"]
        assert "serve.max_sessions" in says and "send this again" in says, says
        held.close()  # its client went away: the call is cancelled, the session idle
        wait_for(lambda: world.events("up", "cancelled"), LONG, "the token's call cancelled")
        assert wait_for(lambda: answer(two, "ping", {})["status"] == 200, LONG,
                        "the third credential served")
        assert busy.q.empty()  # (one's call goes on)
    finally:
        srv.stop()


def test_one_credentials_requests_in_flight_are_bounded_as_a_sessions(world):
    """A credential's 2026-07-28 requests in flight: 32 at once, as a session's (the shared
    bound of the unauthenticated case, 32 x serve.max_sessions, is not one credential's);
    the 33rd gets 429, and another credential is still served."""
    with two_credentials(world, "--extras") as (srv, mine, theirs):
        held = [hang(srv.http.port, "up__record_cancel") for _ in range(32)]
        wait_for(lambda: len(world.events("up", "started")) == 32, LONG, "32 calls upstream")
        over = answer(mine, "ping", {})
        assert over["status"] == 429, over
        assert "2026-07-28 requests of this credential in flight (at most 32)" in (
            over["error"]["message"])
        assert answer(theirs, "ping", {})["status"] == 200
        for sock in held:
            sock.close()


def test_without_authentication_a_question_goes_to_the_session_whose_call_asked(world):
    """--serve-insecure: a handshake-era session and a 2026-07-28 client each have a call in
    flight at one upstream. Neither has a credential, so they are not "several users": the
    question goes to the call sent last (the session's), as among one user's sessions. It was
    refused (-32601, several users): the shared 2026-07-28 session's owner was None, the
    handshake-era session's ""."""
    world.fake("up", "--extras")
    srv = Served(world, "--serve-insecure")
    try:
        s = Session(srv.http, CAPS, get_stream=False)
        waiting = modern(Http(srv.http.port), "tools/call",
                         {"name": "up__record_cancel", "arguments": {}}, CAPS)
        wait_for(lambda: world.events("up", "started"), LONG, "the 2026-07-28 call upstream")
        _, ev = s.start("tools/call", ASK)
        asked = ev.next(LONG)
        assert asked is not None and asked.get("method") == "elicitation/create", asked
        assert asked["params"]["message"] == "your name?"
        assert waiting.q.empty(), waiting.q.get()  # the other call was asked nothing
    finally:
        srv.stop()
