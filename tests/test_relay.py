"""What upstreams ask of the client (issue 17): the client's capabilities passed on in each
upstream's initialize; sampling/createMessage and elicitation/create relayed to the client as
Abstract's own requests, with cancellation both ways and the call's deadline waiting for the
user; logging/setLevel applied to every upstream that declares logging."""

from __future__ import annotations

import json

import pytest

from conftest import text_of, wait_for

ELICIT = {"mode": "form", "message": "Your name?",
          "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}
SAMPLE = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5}
BOTH = {"sampling": {}, "elicitation": {"form": {}, "url": {}}}


def _start(world, *args: str, capabilities: dict = None, settings: dict = None):
    world.fake("asker")
    world.settings = settings
    proxy = world.start(*args, str(world.dir), initialize=False)
    proxy.initialize(capabilities=capabilities)
    return proxy


def _ask(proxy, method: str, params: dict, tool: str = "call_tool", **extra) -> object:
    """Start ask_client through Abstract without waiting; the tools/call id."""
    args = {"method": method, "params": params, "wait": 60, **extra}
    if tool == "call_tool":
        return proxy.send_request("tools/call", {"name": "call_tool", "arguments": {
            "server": "asker", "tool_name": "ask_client", "tool_args": args}})
    return proxy.send_request("tools/call", {"name": tool, "arguments": args})


def _question(proxy, method: str, seen: int = 0) -> dict:
    return wait_for(lambda: ([r for r in proxy.server_requests if r["method"] == method][seen:] or [None])[0],
                    what=f"Abstract to send the client {method}")


def _answer_of(proxy, rid) -> dict:
    resp = proxy.wait_response(rid)
    assert not resp["result"].get("isError"), resp
    return json.loads(text_of(resp["result"]))


def test_upstream_is_offered_exactly_the_clients_capabilities(world):
    caps = {"sampling": {"context": {}}, "elicitation": {"url": {}}, "roots": {"listChanged": True},
            "experimental": {"x": {}}}
    proxy = _start(world, capabilities=caps)
    proxy.upstream("asker", "echo", {"text": "start"})
    got = world.events("asker", "initialize")[0]["capabilities"]
    assert got == {"sampling": {"context": {}}, "elicitation": {"url": {}}, "roots": {"listChanged": True}}


def test_a_client_without_capabilities_offers_none(world):
    proxy = _start(world)
    proxy.upstream("asker", "echo", {"text": "start"})
    assert world.events("asker", "initialize")[0]["capabilities"] == {}


@pytest.mark.parametrize("answer", [
    {"result": {"action": "accept", "content": {"name": "Ada"}}},
    {"result": {"action": "decline"}},
    {"result": {"action": "cancel"}},
    {"error": {"code": -32042, "message": "URL elicitation required", "data": {"elicitations": []}}},
])
def test_elicitation_goes_to_the_client_with_a_fresh_id_and_comes_back_unchanged(world, answer):
    proxy = _start(world, capabilities=BOTH)
    rid = _ask(proxy, "elicitation/create", ELICIT)
    q = _question(proxy, "elicitation/create")
    assert q["params"] == ELICIT
    assert isinstance(q["id"], int)  # Abstract's own id, not the upstream's "fake-1"
    proxy.send({"jsonrpc": "2.0", "id": q["id"], **answer})
    assert _answer_of(proxy, rid) == answer


@pytest.mark.parametrize("tool", ["call_tool", "asker__ask_client"])
def test_sampling_is_relayed_in_meta_and_direct_mode(world, tool):
    expose = ("--expose", "both") if tool != "call_tool" else ()
    proxy = _start(world, *expose, capabilities={"sampling": {}})
    rid = _ask(proxy, "sampling/createMessage", SAMPLE, tool=tool)
    q = _question(proxy, "sampling/createMessage")
    assert q["params"] == SAMPLE
    reply = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}
    proxy.send({"jsonrpc": "2.0", "id": q["id"], "result": reply})
    assert _answer_of(proxy, rid) == {"result": reply}


@pytest.mark.parametrize("caps,method", [({}, "sampling/createMessage"), ({}, "elicitation/create"),
                                         ({"elicitation": {}}, "sampling/createMessage"),
                                         ({"sampling": {}}, "elicitation/create")])
def test_a_question_the_client_cannot_take_is_method_not_found_at_once(world, caps, method):
    proxy = _start(world, capabilities=caps)
    err = _answer_of(proxy, _ask(proxy, method, {}))["error"]
    assert err["code"] == -32601 and method in err["message"] and "did not declare" in err["message"]
    assert not [r for r in proxy.server_requests if r["method"] == method]


def test_the_call_does_not_time_out_while_the_user_answers(world):
    proxy = _start(world, capabilities=BOTH, settings={"servers": {"asker": {"timeout_seconds": 1}}})
    rid = _ask(proxy, "elicitation/create", ELICIT)
    q = _question(proxy, "elicitation/create")
    with pytest.raises(AssertionError):  # three times the call's timeout passes: no error answer
        proxy.wait_response(rid, timeout=3)
    proxy.send({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "accept", "content": {"name": "Ada"}}})
    assert _answer_of(proxy, rid)["result"]["action"] == "accept"


def test_the_upstream_cancelling_its_question_cancels_it_at_the_client(world):
    proxy = _start(world, capabilities=BOTH)
    rid = _ask(proxy, "elicitation/create", ELICIT)
    q = _question(proxy, "elicitation/create")
    proxy.upstream("asker", "cancel_asks")  # the fake sends notifications/cancelled for its request
    wait_for(lambda: [n for n in proxy.notifications if n["method"] == "notifications/cancelled"
                      and n["params"]["requestId"] == q["id"]], what="notifications/cancelled for our id")
    proxy.wait_response(rid)
    proxy.send({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "decline"}})  # too late: dropped
    assert proxy.upstream("asker", "echo", {"text": "still fine"})["content"][0]["text"] == "still fine"


def test_the_client_cancelling_the_call_withdraws_the_question(world):
    proxy = _start(world, capabilities=BOTH)
    rid = _ask(proxy, "elicitation/create", ELICIT)
    q = _question(proxy, "elicitation/create")
    proxy.notify("notifications/cancelled", {"requestId": rid, "reason": "user pressed stop"})
    wait_for(lambda: [n for n in proxy.notifications if n["method"] == "notifications/cancelled"
                      and n["params"]["requestId"] == q["id"]], what="notifications/cancelled for our question")
    # the upstream is told its question failed (it is not left waiting), and the call gets no answer
    answer = proxy.upstream("asker", "echo", {"text": "next"})
    assert answer["content"][0]["text"] == "next"
    assert json.dumps(rid) not in proxy.responses


def test_set_level_reaches_running_and_later_upstreams_that_declare_logging(world):
    world.fake("early", "--logging")
    world.fake("late", "--logging")
    world.fake("mute")
    proxy = world.start()
    proxy.upstream("early", "echo", {"text": "start"})
    proxy.upstream("mute", "echo", {"text": "start"})
    assert proxy.result("logging/setLevel", {"level": "debug"}) == {}
    assert [e["level"] for e in world.events("early", "set_level")] == ["debug"]  # applied before the answer
    proxy.upstream("late", "echo", {"text": "start"})
    assert [e["level"] for e in world.events("late", "set_level")] == ["debug"]
    assert not world.events("mute", "unknown_method")  # not sent to a server without logging


def test_input_required_from_a_handshake_era_upstream_is_refused_plainly(world):
    proxy = _start(world, capabilities=BOTH)
    asking = {"resultType": "input_required", "inputRequests": {"q1": {
        "method": "elicitation/create", "params": ELICIT}}, "requestState": "opaque"}
    res = proxy.upstream("asker", "result", {"result": asking})
    assert res["isError"] and "input_required result in the 2025-11-25 era" in text_of(res)
    assert not proxy.server_requests


# -- 2026-07-28 upstreams: input_required answered through a handshake-era client


def _mrtr(world, caps: dict, asks: dict, tool: str = "call_tool"):
    world.fake("modern", "--modern-only")
    expose = ("--expose", "both") if tool != "call_tool" else ()
    proxy = world.start(*expose, str(world.dir), initialize=False)
    proxy.initialize(capabilities=caps)
    args = {"inputRequests": asks}
    if tool == "call_tool":
        rid = proxy.send_request("tools/call", {"name": "call_tool", "arguments": {
            "server": "modern", "tool_name": "mrtr", "tool_args": args}})
    else:  # direct mode
        rid = proxy.send_request("tools/call", {"name": tool, "arguments": args})
    return proxy, rid


@pytest.mark.parametrize("tool", ["call_tool", "modern__mrtr"])
def test_modern_input_required_is_asked_of_a_legacy_client_and_the_call_retried(world, tool):
    asks = {"who": {"method": "elicitation/create", "params": ELICIT},
            "joke": {"method": "sampling/createMessage", "params": SAMPLE}}
    proxy, rid = _mrtr(world, BOTH, asks, tool)
    e = _question(proxy, "elicitation/create")  # one question at a time, in the server's order
    assert e["params"] == ELICIT
    proxy.send({"jsonrpc": "2.0", "id": e["id"], "result": {"action": "accept", "content": {"name": "Ada"}}})
    s = _question(proxy, "sampling/createMessage")
    assert s["params"] == SAMPLE
    reply = {"role": "assistant", "content": {"type": "text", "text": "a joke"}, "model": "m"}
    proxy.send({"jsonrpc": "2.0", "id": s["id"], "result": reply})
    got = json.loads(text_of(proxy.wait_response(rid)["result"]))
    assert got == {"inputResponses": {"who": {"action": "accept", "content": {"name": "Ada"}}, "joke": reply},
                   "requestState": "state-1"}
    first = world.events("modern", "mrtr")[0]
    assert first["capabilities"] == {"sampling": {}, "elicitation": {"form": {}, "url": {}}}


def test_modern_input_required_the_client_cannot_answer_is_refused_plainly(world):
    proxy, rid = _mrtr(world, {}, {"who": {"method": "elicitation/create", "params": ELICIT}})
    res = proxy.wait_response(rid)["result"]
    assert res["isError"]
    assert "needs input from the client (elicitation/create)" in text_of(res)
    assert "did not declare the elicitation capability" in text_of(res)
    assert world.events("modern", "mrtr")[0]["capabilities"] == {}


@pytest.mark.parametrize("caps,relayed", [({"elicitation": {"form": {}, "url": {}}}, True),
                                          ({"elicitation": {"form": {}}}, False)])
def test_url_elicitation_complete_reaches_a_client_with_url_mode(world, caps, relayed):
    proxy = _start(world, capabilities=caps)
    done = {"elicitationId": "e-42"}
    proxy.upstream("asker", "notify_client", {"method": "notifications/elicitation/complete", "params": done})
    proxy.upstream("asker", "echo", {"text": "after"})  # (the notification came before this answer)
    got = [n["params"] for n in proxy.notifications if n["method"] == "notifications/elicitation/complete"]
    assert got == ([done] if relayed else [])
