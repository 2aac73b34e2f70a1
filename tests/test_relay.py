"""What upstreams ask of the client (issue 17): the client's capabilities passed on in each
upstream's initialize; sampling/createMessage and elicitation/create relayed to the client as
Abstract's own requests, with cancellation both ways and the call's deadline waiting for the
user; logging/setLevel applied to every upstream that declares logging. 2026-07-28:
input_required bridged to a legacy client, passed through to a modern one (with Abstract's own
signed requestState), a handshake-era upstream's questions held and put to a modern client as
input_required; tasks awaited in meta mode and passed through in transparent mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ABSTRACT, MODERN_VERSION, ROOT, text_of, wait_for

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


# -- 2026-07-28 clients: input_required passed through, and a handshake-era upstream's questions
#    turned into input_required


def _meta(caps: dict) -> dict:
    return {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": caps,
            "io.modelcontextprotocol/clientInfo": {"name": "modern-test", "version": "1"}}


def _modern_call(proxy, tool: str, args: dict, caps: dict = BOTH, server: str = "", **follow) -> dict:
    """A 2026-07-28 tools/call (through call_tool when `server` is given); its result."""
    if server:
        tool, args = "call_tool", {"server": server, "tool_name": tool, "tool_args": args}
    return proxy.result("tools/call", {"name": tool, "arguments": args, "_meta": _meta(caps), **follow})


def _modern_world(world, *args: str):
    world.fake("modern", "--modern-only", "--extras")
    return world.start(*args, str(world.dir), initialize=False)


@pytest.mark.parametrize("mode", ["meta", "direct"])
def test_a_modern_upstreams_input_required_reaches_a_modern_client_and_its_follow_ups_come_back(world, mode):
    proxy = _modern_world(world, "--expose", "both")
    asks = {"who": {"method": "elicitation/create", "params": ELICIT},
            "joke": {"method": "sampling/createMessage", "params": SAMPLE}}
    args = {"inputRequests": asks, "rounds": 2}
    call = (lambda **f: _modern_call(proxy, "mrtr", args, server="modern", **f)) if mode == "meta" else (
        lambda **f: _modern_call(proxy, "modern__mrtr", args, **f))
    first = call()
    assert first["resultType"] == "input_required" and first["inputRequests"] == asks
    state = first["requestState"]
    answers = {"who": {"action": "accept", "content": {"name": "Ada"}},
               "joke": {"role": "assistant", "content": {"type": "text", "text": "ha"}, "model": "m"}}
    second = call(inputResponses=answers, requestState=state)
    assert second["resultType"] == "input_required" and second["requestState"] != state
    last = call(inputResponses=answers, requestState=second["requestState"])
    assert last["resultType"] == "complete" and not last.get("isError"), last
    assert json.loads(text_of(last)) == {"inputResponses": answers, "requestState": "state-2"}
    seen = world.events("modern", "mrtr")
    assert [e["requestState"] for e in seen] == [None, "state-1", "state-2"]  # the upstream's, echoed exactly
    assert all(e["capabilities"] == BOTH for e in seen)  # the modern client's own capabilities
    assert not proxy.server_requests  # nothing sent to a client that has no session


def test_a_changed_or_borrowed_request_state_is_refused_and_reaches_no_upstream(world):
    world.fake("other", "--modern-only")
    proxy = _modern_world(world)
    asks = {"who": {"method": "elicitation/create", "params": ELICIT}}
    state = _modern_call(proxy, "mrtr", {"inputRequests": asks}, server="modern")["requestState"]
    answers = {"inputResponses": {"who": {"action": "decline"}}}
    body, sig = state.split(".")
    for bad in [body + "." + sig[::-1], body[:-4] + "AAAA." + sig, "state-1", state + "x"]:
        res = _modern_call(proxy, "mrtr", {"inputRequests": asks}, server="modern", requestState=bad, **answers)
        assert res["isError"] and "requestState is not one Abstract gave for this request" in text_of(res), res
    res = _modern_call(proxy, "mrtr", {"inputRequests": asks}, server="other", requestState=state, **answers)
    assert res["isError"] and "requestState is not one Abstract gave" in text_of(res)
    assert [e["requestState"] for e in world.events("modern", "mrtr")] == [None]
    assert not world.events("other", "mrtr")
    ok = _modern_call(proxy, "mrtr", {"inputRequests": asks}, server="modern", requestState=state, **answers)
    assert json.loads(text_of(ok))["requestState"] == "state-1"


def test_a_modern_client_gets_at_most_ten_rounds(world):
    proxy = _modern_world(world)
    args = {"inputRequests": {"who": {"method": "elicitation/create", "params": ELICIT}}, "rounds": 50}
    res = _modern_call(proxy, "mrtr", args, server="modern")
    for _ in range(9):
        res = _modern_call(proxy, "mrtr", args, server="modern", requestState=res["requestState"],
                           inputResponses={"who": {"action": "decline"}})
        assert res["resultType"] == "input_required"
    res = _modern_call(proxy, "mrtr", args, server="modern", requestState=res["requestState"],
                       inputResponses={"who": {"action": "decline"}})
    assert res["isError"] and "still asked for input after 10 rounds" in text_of(res)


@pytest.mark.parametrize("method,params,expose", [
    ("prompts/get", {"name": "modern__ask"}, "direct"),
    ("resources/read", {"uri": "fake://ask"}, "direct"),
])
def test_input_required_of_prompts_and_resources_passes_through_to_a_modern_client(world, method, params, expose):
    proxy = _modern_world(world, "--expose", expose)
    proxy.result("prompts/list" if method == "prompts/get" else "resources/list", {"_meta": _meta(BOTH)})
    first = proxy.result(method, {**params, "_meta": _meta(BOTH)})
    assert first["resultType"] == "input_required" and first["inputRequests"]["who"]["method"] == "elicitation/create"
    answer = {"who": {"action": "accept", "content": {"name": "Ada"}}}
    last = proxy.result(method, {**params, "_meta": _meta(BOTH), "inputResponses": answer,
                                 "requestState": first["requestState"]})
    assert last["resultType"] == "complete"
    text = last["messages"][0]["content"]["text"] if method == "prompts/get" else last["contents"][0]["text"]
    assert json.loads(text) == {"inputResponses": answer, "requestState": "state-1"}
    assert [e["method"] for e in world.events("modern", "mrtr")] == [method, method]


@pytest.mark.parametrize("method,params", [("prompts/get", {"name": "modern__ask"}),
                                           ("resources/read", {"uri": "fake://ask"})])
def test_input_required_of_prompts_and_resources_is_asked_of_a_legacy_client(world, method, params):
    proxy = _modern_world(world, "--expose", "direct")
    proxy.initialize(capabilities=BOTH)
    proxy.result("prompts/list" if method == "prompts/get" else "resources/list")
    rid = proxy.send_request(method, params)
    q = _question(proxy, "elicitation/create")
    proxy.send({"jsonrpc": "2.0", "id": q["id"], "result": {"action": "accept", "content": {"name": "Ada"}}})
    res = proxy.wait_response(rid)["result"]
    text = res["messages"][0]["content"]["text"] if method == "prompts/get" else res["contents"][0]["text"]
    assert json.loads(text)["inputResponses"] == {"who": {"action": "accept", "content": {"name": "Ada"}}}


@pytest.mark.parametrize("mode", ["meta", "direct"])
def test_a_handshake_era_upstreams_question_becomes_input_required_for_a_modern_client(world, mode):
    world.fake("asker")
    proxy = world.start("--expose", "both", str(world.dir), initialize=False)
    args = {"method": "elicitation/create", "params": ELICIT, "wait": 60}
    call = (lambda **f: _modern_call(proxy, "ask_client", args, server="asker", **f)) if mode == "meta" else (
        lambda **f: _modern_call(proxy, "asker__ask_client", args, **f))
    first = call()
    assert first["resultType"] == "input_required", first
    [(key, ask)] = first["inputRequests"].items()
    assert ask == {"method": "elicitation/create", "params": ELICIT}
    assert world.events("asker", "initialize")[0]["capabilities"] == BOTH  # offered what the client declared
    again = call(inputResponses={}, requestState=first["requestState"])  # no answer: asked again
    assert again["inputRequests"] == first["inputRequests"]
    answer = {"action": "accept", "content": {"name": "Ada"}}
    last = call(inputResponses={key: answer}, requestState=again["requestState"])
    assert last["resultType"] == "complete" and json.loads(text_of(last)) == {"result": answer}
    late = call(inputResponses={key: answer}, requestState=again["requestState"])  # the call is over
    assert late["isError"] and "no longer held by Abstract" in text_of(late)
    assert not proxy.server_requests


def test_a_modern_client_without_the_capability_means_method_not_found_for_the_upstream(world):
    world.fake("asker")
    proxy = world.start(str(world.dir), initialize=False)
    res = _modern_call(proxy, "ask_client", {"method": "sampling/createMessage", "params": SAMPLE},
                       caps={"elicitation": {}}, server="asker")
    err = json.loads(text_of(res))["error"]
    assert err["code"] == -32601 and "did not declare the sampling capability" in err["message"]
    assert world.events("asker", "initialize")[0]["capabilities"] == {"elicitation": {}}


def test_a_held_call_the_client_never_follows_up_is_cancelled_and_its_question_answered(tmp_path, monkeypatch):
    """In-process: the hold's time bound shortened to 1 s."""
    import sys

    import abstract
    from conftest import FAKE

    monkeypatch.setattr(abstract, "_HOLD_S", 1.0)
    link = abstract._ClientLink("none", [])
    link.modern_declared(BOTH)
    state = tmp_path / "state"
    spec = abstract._ServerSpec("asker", sys.executable, [str(FAKE), "--state-file", str(state)])
    up = abstract._Upstream(spec, abstract._Settings({}), link)
    req = abstract._Request(1, "tools/call", {"name": "ask_client", "_meta": _meta(BOTH)})
    try:
        with pytest.raises(abstract._InputRequired) as held:
            up.call_tool("ask_client", {"method": "elicitation/create", "params": ELICIT, "wait": 30}, req)
        assert held.value.result["resultType"] == "input_required" and len(up._relay._holds) == 1
        answered = wait_for(lambda: [e for e in _events(state) if e["event"] == "answered"], what="the answer")
        assert "did not follow up" in answered[0]["answer"]["error"]["message"]
        assert up._relay._holds == {} and up._relay._calls == 0
    finally:
        up.close()


def _events(path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


SDK_PY = Path(os.environ.get("ABSTRACT_INTEROP_HOME") or "/tmp/abstract-interop") / "venv" / "bin" / "python"


@pytest.mark.parametrize("mode,tool", [("meta", "call_tool"), ("direct", "modern__mrtr")])
def test_official_python_sdk_2026_client_drives_a_modern_upstreams_rounds(world, mode, tool):
    """mcp 2.3.0's mcp.Client (2026-07-28, its own multi round-trip driver) through Abstract to
    a 2026-07-28 upstream that asks twice."""
    if not SDK_PY.exists():
        pytest.skip(f"the MCP Python SDK venv is not at {SDK_PY} (run ../shared/interop/setup.sh)")
    world.fake("modern", "--modern-only")
    world.dir.mkdir()
    args = {"inputRequests": {"who": {"method": "elicitation/create", "params": ELICIT}}, "rounds": 2}
    if mode == "meta":
        args = {"server": "modern", "tool_name": "mrtr", "tool_args": args}
    cmd = [str(SDK_PY), str(ROOT / "tests" / "realservers" / "sdk_modern_client.py"), tool, json.dumps(args), "--",
           sys.executable, str(ABSTRACT), "--expose", mode, str(world.dir)]
    done = subprocess.run(cmd, env=world.env(), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["version"] == "2026-07-28" and not out["isError"] and len(out["asked"]) == 2, out
    assert json.loads(out["texts"][0]) == {"inputResponses": {"who": {"action": "accept", "content": {
        "name": "Ada", "check": True}}}, "requestState": "state-2"}
    assert [e["requestState"] for e in world.events("modern", "mrtr")] == [None, "state-1", "state-2"]


# -- tasks (2025-11-25): awaited like any call, or passed through in transparent mode


@pytest.mark.parametrize("tool", ["call_tool", "tasker__job"])
def test_a_tool_that_runs_only_as_a_task_is_awaited_like_any_call(world, tool):
    world.fake("tasker", "--tasks")
    proxy = world.start("--expose", "both")
    args = {"seconds": 0.2, "text": "hi"}
    if tool == "call_tool":
        args = {"server": "tasker", "tool_name": "job", "tool_args": args}
    res = proxy.call_tool(tool, args)
    assert not res.get("isError") and text_of(res) == "job done: hi", res
    [made] = world.events("tasker", "task")
    assert made["task"] == {}
    assert [e["taskId"] for e in world.events("tasker", "tasks/result")] == [made["taskId"]]


def test_cancelling_an_awaited_task_cancels_the_task(world):
    world.fake("tasker", "--tasks")
    proxy = world.start()
    rid = proxy.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "tasker", "tool_name": "job", "tool_args": {"seconds": 60}}})
    made = wait_for(lambda: world.events("tasker", "tasks/result"), what="tasks/result")[0]
    proxy.notify("notifications/cancelled", {"requestId": rid})
    cancelled = wait_for(lambda: world.events("tasker", "tasks/cancel"), what="tasks/cancel")
    assert cancelled[0]["taskId"] == made["taskId"]
    assert proxy.upstream("tasker", "echo", {"text": "after"})["content"][0]["text"] == "after"
    assert json.dumps(rid) not in proxy.responses


def test_a_transparent_mode_clients_task_and_its_tasks_methods_pass_through(world):
    world.fake("tasker", "--tasks")
    proxy = world.start("--expose", "direct", initialize=False)
    caps = proxy.initialize()["capabilities"]
    assert caps["tasks"] == {"cancel": {}, "requests": {"tools": {"call": {}}}}
    job = next(t for t in proxy.result("tools/list")["tools"] if t["name"] == "tasker__job")
    assert job["execution"] == {"taskSupport": "required"}
    made = proxy.result("tools/call", {"name": "tasker__job", "arguments": {"seconds": 0.2, "text": "x"},
                                       "task": {"ttl": 60000}})
    tid = made["task"]["taskId"]
    assert world.events("tasker", "task")[0]["task"] == {"ttl": 60000}
    assert proxy.result("tasks/get", {"taskId": tid})["taskId"] == tid
    done = proxy.result("tasks/result", {"taskId": tid})
    assert text_of(done) == "job done: x" and done["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": tid}
    other = proxy.result("tools/call", {"name": "tasker__job", "arguments": {"seconds": 60}, "task": {}})
    assert proxy.result("tasks/cancel", {"taskId": other["task"]["taskId"]})["status"] == "cancelled"
    err = proxy.request("tasks/get", {"taskId": "nope"})["error"]
    assert err["code"] == -32602 and "Unknown task" in err["message"]
    assert not world.events("tasker", "tasks/result")[1:]  # only the client's own tasks/result


@pytest.mark.parametrize("client,mode,tool", [
    ("sdk_modern_client.py", "meta", "call_tool"),
    ("sdk_modern_client.py", "direct", "sdk__signup"),
    ("sdk_asking_client.py", "meta", "call_tool"),
])
def test_official_python_sdk_server_asking_the_2026_way_through_abstract(world, client, mode, tool):
    """mcp 2.3.0's MCPServer speaking 2026-07-28 (its requestState sealed with its own HMAC, so
    it must come back byte for byte) behind Abstract, asked by the SDK's 2026-07-28 client
    (passed through) and by its handshake-era ClientSession (bridged to elicitation/create)."""
    if not SDK_PY.exists():
        pytest.skip(f"the MCP Python SDK venv is not at {SDK_PY} (run ../shared/interop/setup.sh)")
    here = ROOT / "tests" / "realservers"
    world.servers["sdk"] = {"command": str(SDK_PY), "args": [
        str(here / "modern_only.py"), str(SDK_PY), str(here / "sdk_modern_server.py")]}
    world.dir.mkdir()
    args = {"server": "sdk", "tool_name": "signup"} if mode == "meta" else {}
    cmd = [str(SDK_PY), str(here / client), tool, json.dumps(args), "--",
           sys.executable, str(ABSTRACT), "--expose", mode, str(world.dir)]
    done = subprocess.run(cmd, env=world.env(), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["texts"] == ["hello Ada state=round-1"] and out["asked"] == [
        {"elicitation": "form", "message": "Your name?"}], out


def test_a_modern_clients_cancelled_follow_up_cancels_the_held_call(world):
    world.fake("asker")
    proxy = world.start(str(world.dir), initialize=False)
    args = {"method": "elicitation/create", "params": ELICIT, "wait": 60, "then_wait": 60}
    first = _modern_call(proxy, "ask_client", args, server="asker")
    [key] = first["inputRequests"]
    rid = proxy.send_request("tools/call", {"name": "call_tool", "_meta": _meta(BOTH), "arguments": {
        "server": "asker", "tool_name": "ask_client", "tool_args": args},
        "inputResponses": {key: {"action": "decline"}}, "requestState": first["requestState"]})
    answered = wait_for(lambda: world.events("asker", "answered"), what="the upstream to get the answer")
    assert answered[0]["answer"] == {"result": {"action": "decline"}}
    proxy.notify("notifications/cancelled", {"requestId": rid})
    wait_for(lambda: world.events("asker", "cancelled"), what="the upstream call to be cancelled")
    assert _modern_call(proxy, "echo", {"text": "after"}, server="asker")["content"][0]["text"] == "after"
    assert json.dumps(rid) not in proxy.responses
