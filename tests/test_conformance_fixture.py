"""The conformance suite's server fixture (tests/conformance/server_fixture.py) behind Abstract in
direct mode over stdio: what the server scenarios need and Abstract relays already.

The fixture is the upstream Abstract will serve over HTTP to the official suite's server
scenarios (issue 28, tests/conformance/SERVER.md). These tests pin the part of that path that
works today, with the `conf__` names of direct mode: the definitions, the content types, error
results, logging at the client's level, progress with the client's token, sampling and
elicitation questions with their schemas unchanged, resources and prompts, and (since the
relays of issue 28's item 5) completion/complete, resources/subscribe and unsubscribe, and
reading a template URI. The bare names (`"prefix": ""`) and the relays' edges are in
test_direct_relays.py.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from pathlib import Path
from typing import Callable, List

import pytest

from conftest import World, same_json, text_of, wait_for

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "conformance" / "server_fixture.py"
_spec = importlib.util.spec_from_file_location("server_fixture", FIXTURE)
fx = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(fx)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def conf(tmp_path_factory):
    """One Abstract (--expose direct, the client declares sampling and elicitation) in front of
    the fixture as server `conf`, which traces what it receives."""
    world = World(tmp_path_factory.mktemp("conf"))
    trace = world.tmp / "trace.jsonl"
    world.servers["conf"] = {"command": sys.executable,
                             "args": [str(FIXTURE), "--trace", str(trace)]}
    world.dir.mkdir()
    p = world.start("--expose", "direct", str(world.dir), initialize=False)
    p.initialize(capabilities={"sampling": {}, "elicitation": {}})
    p.trace = trace
    try:
        yield p
    finally:
        world.cleanup()


class Answering:
    """While in the with block, answer every `method` request Abstract sends the client (on a
    thread) with `answer(request)`; `asked` holds the requests answered."""

    def __init__(self, p, method: str, answer: Callable[[dict], dict]) -> None:
        self.p, self.method, self.answer = p, method, answer
        self.asked: List[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        p, seen = self.p, len(self.p.server_requests)
        while not self.stop.is_set():
            with p._cond:
                p._cond.wait_for(lambda: len(p.server_requests) > seen, 0.2)
                new = p.server_requests[seen:]
                seen += len(new)
            for req in new:
                if req.get("method") == self.method:
                    self.asked.append(req)
                    p.send({"jsonrpc": "2.0", "id": req["id"], "result": self.answer(req)})

    def __enter__(self) -> "Answering":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def _position(p, match: Callable[[dict], bool]) -> int:
    """The index, among the lines Abstract wrote, of the last message that `match`es."""
    with p._cond:
        lines = list(p.raw_lines)
    found = [i for i, line in enumerate(lines) if match(json.loads(line))]
    assert found, "no such message"
    return found[-1]


def test_every_fixture_tool_prompt_resource_and_template_is_listed_as_the_fixture_defines_it(conf):
    tools = {t["name"]: t for t in conf.result("tools/list")["tools"]}
    for name, (definition, _) in fx.TOOLS.items():
        got = tools[f"conf__{name}"]
        assert got["description"] == definition["description"]
        assert same_json(got["inputSchema"], definition["inputSchema"]), name
    schema = tools["conf__json_schema_2020_12_tool"]["inputSchema"]  # json-schema-2020-12
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "address" in schema["$defs"] and schema["additionalProperties"] is False
    prompts = {p["name"] for p in conf.result("prompts/list")["prompts"]}
    assert prompts >= {f"conf__{n}" for n in fx.PROMPTS}
    uris = {r["uri"]: r for r in conf.result("resources/list")["resources"]}
    assert all(uris[u]["name"] for u in fx.RESOURCES)
    templates = conf.result("resources/templates/list")["resourceTemplates"]
    assert [t["uriTemplate"] for t in templates] == ["test://template/{id}/data"]


@pytest.mark.parametrize("tool,kinds", [
    ("test_simple_text", ["text"]), ("test_image_content", ["image"]),
    ("test_audio_content", ["audio"]), ("test_embedded_resource", ["resource"]),
    ("test_multiple_content_types", ["text", "image", "resource"])])
def test_each_content_type_comes_back_exactly_as_the_fixture_sent_it(conf, tool, kinds):
    result = conf.call_tool(f"conf__{tool}")
    assert [c["type"] for c in result["content"]] == kinds
    assert same_json(result, fx.TOOLS[tool][1](None, None, {}))
    if tool == "test_audio_content":
        assert result["content"][0]["mimeType"] == "audio/wav"


def test_an_error_result_stays_a_result_with_is_error(conf):
    result = conf.call_tool("conf__test_error_handling")
    assert result["isError"] is True
    assert text_of(result) == "This tool intentionally returns an error for testing"


def test_log_messages_reach_the_client_at_the_level_it_set(conf):
    assert conf.result("logging/setLevel", {"level": "debug"}) == {}
    wait_for(lambda: '"logging/setLevel"' in conf.trace.read_text(), what="setLevel relayed")
    result = conf.call_tool("conf__test_tool_with_logging")
    assert text_of(result) == "Tool with logging executed successfully"
    said = ["Tool execution started", "Tool processing data", "Tool execution completed"]

    def logged() -> List[str]:
        with conf._cond:
            return [n["params"]["data"] for n in conf.notifications
                    if n["method"] == "notifications/message" and n["params"]["data"] in said]
    wait_for(lambda: len(logged()) == 3, what="3 log messages")
    assert logged() == said


def test_progress_comes_with_the_clients_token_before_the_result(conf):
    rid = conf.send_request("tools/call", {"name": "conf__test_tool_with_progress",
                                           "arguments": {},
                                           "_meta": {"progressToken": "progress-test-1"}})
    conf.wait_response(rid)
    with conf._cond:
        got = [n["params"] for n in conf.notifications if n["method"] == "notifications/progress"
               and n["params"].get("progressToken") == "progress-test-1"]
    assert [g["progress"] for g in got] == [0, 50, 100]
    assert all(g["total"] == 100 for g in got)
    # all of it before the result: the SDK client stops listening for progress at the answer
    last = _position(conf, lambda m: (m.get("params") or {}).get("progressToken")
                     == "progress-test-1")
    assert last < _position(conf, lambda m: m.get("id") == rid and "result" in m)


def test_a_sampling_question_goes_to_the_client_and_its_answer_back(conf):
    with Answering(conf, "sampling/createMessage", lambda req: {
            "role": "assistant", "content": {"type": "text", "text": "This is a test response"},
            "model": "test-model", "stopReason": "endTurn"}) as a:
        result = conf.call_tool("conf__test_sampling", {"prompt": "Test prompt for sampling"})
    asked = a.asked
    assert text_of(result) == "LLM response: This is a test response"
    assert asked[0]["params"]["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "Test prompt for sampling"}}]
    assert asked[0]["params"]["maxTokens"] == 100


@pytest.mark.parametrize("tool,schema", [
    ("test_elicitation_sep1034_defaults", fx.SEP1034_SCHEMA),
    ("test_elicitation_sep1330_enums", fx.SEP1330_SCHEMA)])
def test_an_elicitation_schema_reaches_the_client_unchanged(conf, tool, schema):
    with Answering(conf, "elicitation/create", lambda req: {
            "action": "accept", "content": {"status": "inactive"}}) as a:
        result = conf.call_tool(f"conf__{tool}")
    asked = a.asked
    assert same_json(asked[0]["params"]["requestedSchema"], schema)
    assert text_of(result) == 'Elicitation completed: action=accept, content={"status":"inactive"}'


def test_resources_and_prompts_are_read_through_to_the_fixture(conf):
    text = conf.result("resources/read", {"uri": "test://static-text"})["contents"][0]
    assert text["text"] == "This is the content of the static text resource."
    blob = conf.result("resources/read", {"uri": "test://static-binary"})["contents"][0]
    assert blob["mimeType"] == "image/png" and blob["blob"] == fx.PNG
    got = conf.result("prompts/get", {"name": "conf__test_prompt_with_arguments",
                                      "arguments": {"arg1": "testValue1", "arg2": "testValue2"}})
    assert got["messages"][0]["content"]["text"] == (
        "Prompt with arguments: arg1='testValue1', arg2='testValue2'")
    image = conf.result("prompts/get", {"name": "conf__test_prompt_with_image"})["messages"]
    assert image[0]["content"] == {"type": "image", "data": fx.PNG, "mimeType": "image/png"}


def test_completion_subscriptions_and_template_reads_reach_the_fixture(conf):
    got = conf.result("completion/complete", {
        "ref": {"type": "ref/prompt", "name": "conf__test_prompt_with_arguments"},
        "argument": {"name": "arg1", "value": "test"}})
    assert got["completion"]["values"] == ["test", "testValue1"]
    got = conf.result("completion/complete", {
        "ref": {"type": "ref/resource", "uri": fx.TEMPLATE},
        "argument": {"name": "id", "value": "4"}})
    assert got["completion"]["values"] == ["456"]
    data = conf.result("resources/read", {"uri": "test://template/123/data"})["contents"][0]
    assert json.loads(data["text"])["data"] == "Data for ID: 123"
    assert conf.result("resources/subscribe", {"uri": "test://watched-resource"}) == {}

    def updated() -> List[str]:
        with conf._cond:
            return [n["params"]["uri"] for n in conf.notifications
                    if n["method"] == "notifications/resources/updated"]
    wait_for(lambda: updated() == ["test://watched-resource"], what="the update relayed")
    assert conf.result("resources/unsubscribe", {"uri": "test://watched-resource"}) == {}
    traced = [json.loads(line) for line in conf.trace.read_text().splitlines()]
    assert [m["method"] for m in traced if m.get("method", "").startswith("resources/")
            and "subscribe" in m["method"]] == ["resources/subscribe", "resources/unsubscribe"]
