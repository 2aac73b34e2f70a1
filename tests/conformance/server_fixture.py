#!/usr/bin/env python3
"""A stdio MCP server that implements what the official conformance suite's server scenarios call
(`@modelcontextprotocol/conformance` 0.1.16, server mode), under the names they expect.

    python3 tests/conformance/server_fixture.py [--trace FILE]

Newline-delimited JSON-RPC on stdin/stdout, standard library only, handshake era: it answers
`initialize` with the client's protocolVersion when it is one of 2025-11-25, 2025-06-18,
2025-03-26 or 2024-11-05, else 2025-11-25. It is the upstream that Abstract serves over HTTP in
direct mode for the suite (see SERVER.md beside this file), and it can sit behind any
stdio-to-HTTP bridge (supergateway, mcp-proxy) the same way.

What it offers (the conformance repository's examples/servers/typescript/everything-server.ts
at v0.1.16 is the model; texts follow the scenario descriptions):

- tools: test_simple_text, test_image_content, test_audio_content, test_embedded_resource,
  test_multiple_content_types, test_tool_with_logging (3 info logs, 50 ms apart),
  test_tool_with_progress (0, 50, 100 of 100, 50 ms apart, when the call has a progressToken),
  test_error_handling (an isError result), test_sampling {prompt} (sampling/createMessage),
  test_elicitation {message}, test_elicitation_sep1034_defaults, test_elicitation_sep1330_enums
  (elicitation/create), json_schema_2020_12_tool ($schema, $defs, additionalProperties in its
  inputSchema), test_reconnection (for the pending server-sse-polling scenario: the stream
  closing is the HTTP front's part; this only answers after 100 ms);
- resources test://static-text, test://static-binary, test://watched-resource, the template
  test://template/{id}/data, resources/subscribe and unsubscribe (after a subscribe it sends one
  notifications/resources/updated for the URI, so a relay can be seen);
- prompts test_simple_prompt, test_prompt_with_arguments {arg1, arg2},
  test_prompt_with_embedded_resource {resourceUri}, test_prompt_with_image;
- completion/complete for the prompt's arguments and the template's {id};
- logging/setLevel, which filters its notifications/message (default: info and above before any
  setLevel, as the suite's reference server sends them unfiltered); ping;
- notifications/cancelled: a cancelled call stops waiting and sends no answer.

--trace FILE appends every message it receives as one JSON line, so a test can see what a front
relayed (logging/setLevel, resources/subscribe, completion/complete, the progressToken...).
Every wait is bounded: a question to the client gets 60 s, at most 64 requests run at once (more
get -32000), a line longer than 16 MiB is refused.
"""
import argparse
import json
import re
import sys
import threading
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Tuple

VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
ASK_TIMEOUT_S = 60.0  # a sampling/elicitation question to the client
MAX_LINE = 16 << 20
MAX_RUNNING = 64
# 1x1 red PNG and a minimal WAV, as in the suite's reference server
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5Er"
       "kJggg==")
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
TEMPLATE = "test://template/{id}/data"
TEMPLATE_RE = re.compile(r"^test://template/([^/]+)/data$")
CAPABILITIES = {"tools": {"listChanged": True},
                "resources": {"subscribe": True, "listChanged": True},
                "prompts": {"listChanged": True}, "logging": {}, "completions": {}}
INVALID_PARAMS, METHOD_NOT_FOUND, BUSY, RESOURCE_NOT_FOUND = -32602, -32601, -32000, -32002


class RpcError(Exception):
    """An error answer: code, message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class Call:
    """One request being handled: its id, params, and whether the client cancelled it."""

    def __init__(self, rid: Any, params: dict) -> None:
        self.rid, self.params = rid, params
        self.cancelled = threading.Event()
        self.after: Optional[Callable[[], None]] = None  # sent after the answer

    def sleep(self, seconds: float) -> None:
        """Wait, but stop at once when the call is cancelled."""
        if self.cancelled.wait(seconds):
            raise RpcError(-32800, "cancelled")

    @property
    def progress_token(self) -> Any:
        meta = self.params.get("_meta")
        return meta.get("progressToken") if isinstance(meta, dict) else None


class Fixture:
    """The server: reads requests, answers each on a thread of its own, asks the client."""

    def __init__(self, rfile: BinaryIO, wfile: BinaryIO, trace: Optional[BinaryIO]) -> None:
        self.rfile, self.wfile, self.trace = rfile, wfile, trace
        self.lock = threading.Lock()  # one writer at a time
        self.level = "info"
        self.client_caps: dict = {}
        self.subscriptions: set = set()
        self.calls: Dict[Any, Call] = {}
        self.asked: Dict[int, Tuple[threading.Event, list]] = {}
        self.next_id = 0
        self.slots = threading.BoundedSemaphore(MAX_RUNNING)

    # -- the wire

    def send(self, msg: dict) -> None:
        data = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        with self.lock:
            self.wfile.write(data)
            self.wfile.flush()

    def notify(self, method: str, params: dict) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def log(self, level: str, data: Any) -> None:
        """A notifications/message, when the level set by logging/setLevel lets it through."""
        if LEVELS.index(level) >= LEVELS.index(self.level):
            self.notify("notifications/message",
                        {"level": level, "logger": "conformance-fixture", "data": data})

    def ask(self, call: Call, method: str, params: dict) -> dict:
        """Send the client a request and wait for its answer (bounded; a cancel ends it)."""
        with self.lock:
            self.next_id += 1
            rid = self.next_id
        done, box = threading.Event(), []
        self.asked[rid] = (done, box)
        try:
            self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            waited = 0.0
            while not done.wait(0.1):
                waited += 0.1
                if call.cancelled.is_set():
                    raise RpcError(-32800, "cancelled")
                if waited >= ASK_TIMEOUT_S:
                    raise RpcError(-32001, f"no answer to {method} within {ASK_TIMEOUT_S:g} s")
        finally:
            self.asked.pop(rid, None)
        answer = box[0]
        if "error" in answer:
            err = answer["error"] if isinstance(answer["error"], dict) else {}
            raise RpcError(int(err.get("code", -32603)), str(err.get("message", "error")))
        return answer.get("result") if isinstance(answer.get("result"), dict) else {}

    def serve(self) -> None:
        while True:
            line = self.rfile.readline(MAX_LINE + 1)
            if not line:
                return
            if len(line) > MAX_LINE and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # skip the rest of the long line
                    line = self.rfile.readline(MAX_LINE)
                self.send({"jsonrpc": "2.0", "id": None,
                           "error": {"code": -32600, "message": "line longer than 16 MiB"}})
                continue
            if self.trace is not None:
                self.trace.write(line if line.endswith(b"\n") else line + b"\n")
                self.trace.flush()
            try:
                msg = json.loads(line)
            except ValueError:
                self.send({"jsonrpc": "2.0", "id": None,
                           "error": {"code": -32700, "message": "Parse error"}})
                continue
            if isinstance(msg, dict):
                self.dispatch(msg)

    def dispatch(self, msg: dict) -> None:
        method, rid = msg.get("method"), msg.get("id")
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if not isinstance(method, str):  # an answer to one of our questions
            waiting = self.asked.get(rid) if isinstance(rid, int) else None
            if waiting is not None:
                waiting[1].append(msg)
                waiting[0].set()
            return
        if "id" not in msg:
            if method == "notifications/cancelled":
                call = self.calls.get(params.get("requestId"))
                if call is not None:
                    call.cancelled.set()
            return
        if not isinstance(rid, (str, int)) or isinstance(rid, bool):
            self.answer(None, None, RpcError(-32600, "a request id must be a string or number"))
            return
        if not self.slots.acquire(blocking=False):
            self.answer(rid, None, RpcError(BUSY, f"more than {MAX_RUNNING} requests at once"))
            return
        call = Call(rid, params)
        self.calls[rid] = call
        threading.Thread(target=self.run, args=(method, call), daemon=True).start()

    def run(self, method: str, call: Call) -> None:
        try:
            handler = HANDLERS.get(method)
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
            result, error = handler(self, call), None
        except RpcError as e:
            result, error = None, e
        except Exception as e:  # a fixture bug: say what it was
            result, error = None, RpcError(-32603, f"fixture error: {e!r}")
        finally:
            self.calls.pop(call.rid, None)
            self.slots.release()
        if not call.cancelled.is_set():
            self.answer(call.rid, result, error)
            if call.after is not None and error is None:
                call.after()

    def answer(self, rid: Any, result: Optional[dict], error: Optional[RpcError]) -> None:
        if error is not None:
            self.send({"jsonrpc": "2.0", "id": rid,
                       "error": {"code": error.code, "message": error.message}})
        else:
            self.send({"jsonrpc": "2.0", "id": rid, "result": result})


# ---- lifecycle, logging, completion ------------------------------------------------------------

def initialize(fx: Fixture, call: Call) -> dict:
    asked = call.params.get("protocolVersion")
    caps = call.params.get("capabilities")
    fx.client_caps = caps if isinstance(caps, dict) else {}
    return {"protocolVersion": asked if asked in VERSIONS else VERSIONS[0],
            "capabilities": CAPABILITIES,
            "serverInfo": {"name": "mcp-conformance-test-server", "version": "1.0.0"},
            "instructions": "The conformance suite's server scenarios, over stdio."}


def set_level(fx: Fixture, call: Call) -> dict:
    level = call.params.get("level")
    if level not in LEVELS:
        raise RpcError(INVALID_PARAMS, f"level must be one of {', '.join(LEVELS)}")
    fx.level = level
    call.after = lambda: fx.log("info", f"Log level set to: {level}")
    return {}


COMPLETIONS = {("ref/prompt", "test_prompt_with_arguments", "arg1"):
               ["paris", "park", "party", "test", "testValue1"],
               ("ref/prompt", "test_prompt_with_arguments", "arg2"): ["test", "testValue2"],
               ("ref/prompt", "test_prompt_with_embedded_resource", "resourceUri"):
               ["test://static-text", "test://example-resource"],
               ("ref/resource", TEMPLATE, "id"): ["123", "456", "789"]}


def complete(fx: Fixture, call: Call) -> dict:
    ref, arg = call.params.get("ref"), call.params.get("argument")
    if not isinstance(ref, dict) or not isinstance(arg, dict):
        raise RpcError(INVALID_PARAMS, "completion/complete needs params.ref and params.argument")
    key = (ref.get("type"), ref.get("name") or ref.get("uri"), arg.get("name"))
    value = arg.get("value") if isinstance(arg.get("value"), str) else ""
    values = [v for v in COMPLETIONS.get(key, []) if v.startswith(value)]
    return {"completion": {"values": values, "total": len(values), "hasMore": False}}


# ---- tools -------------------------------------------------------------------------------------

def text(s: str) -> dict:
    return {"type": "text", "text": s}


def no_args(description: str) -> dict:
    return {"description": description, "inputSchema": {"type": "object", "properties": {}}}


def one_string(description: str, arg: str, arg_description: str) -> dict:
    return {"description": description,
            "inputSchema": {"type": "object", "required": [arg], "properties": {
                arg: {"type": "string", "description": arg_description}}}}


def with_logging(fx: Fixture, call: Call, args: dict) -> dict:
    fx.log("info", "Tool execution started")
    call.sleep(0.05)
    fx.log("info", "Tool processing data")
    call.sleep(0.05)
    fx.log("info", "Tool execution completed")
    return {"content": [text("Tool with logging executed successfully")]}


def with_progress(fx: Fixture, call: Call, args: dict) -> dict:
    token = call.progress_token
    for step in (0, 50, 100):
        if step:
            call.sleep(0.05)
        if token is not None:
            fx.notify("notifications/progress", {"progressToken": token, "progress": step,
                                                 "total": 100,
                                                 "message": f"Completed step {step} of 100"})
    return {"content": [text(f"Progress test completed (progressToken: {token})")]}


def sampling(fx: Fixture, call: Call, args: dict) -> dict:
    prompt = args.get("prompt")
    if not isinstance(prompt, str):
        raise RpcError(INVALID_PARAMS, "test_sampling needs arguments.prompt, a string")
    if "sampling" not in fx.client_caps:
        return error_result("The client did not declare the sampling capability")
    try:
        result = fx.ask(call, "sampling/createMessage", {
            "messages": [{"role": "user", "content": text(prompt)}], "maxTokens": 100})
    except RpcError as e:
        return error_result(f"Sampling failed: {e.message}")
    content = result.get("content")
    said = content.get("text") if isinstance(content, dict) else None
    return {"content": [text(f"LLM response: {said if said is not None else 'No response'}")]}


def error_result(message: str) -> dict:
    return {"isError": True, "content": [text(message)]}


def elicit(fx: Fixture, call: Call, message: str, schema: dict, prefix: str) -> dict:
    if "elicitation" not in fx.client_caps:
        return error_result("The client did not declare the elicitation capability")
    try:
        result = fx.ask(call, "elicitation/create",
                        {"message": message, "requestedSchema": schema})
    except RpcError as e:
        return error_result(f"Elicitation failed: {e.message}")
    content = json.dumps(result.get("content") or {}, separators=(",", ":"))
    return {"content": [text(f"{prefix}: action={result.get('action')}, content={content}")]}


def elicitation(fx: Fixture, call: Call, args: dict) -> dict:
    message = args.get("message")
    if not isinstance(message, str):
        raise RpcError(INVALID_PARAMS, "test_elicitation needs arguments.message, a string")
    schema = {"type": "object", "required": ["username", "email"], "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"}}}
    return elicit(fx, call, message, schema, "User response")


SEP1034_SCHEMA = {"type": "object", "required": [], "properties": {
    "name": {"type": "string", "description": "User name", "default": "John Doe"},
    "age": {"type": "integer", "description": "User age", "default": 30},
    "score": {"type": "number", "description": "User score", "default": 95.5},
    "status": {"type": "string", "description": "User status",
               "enum": ["active", "inactive", "pending"], "default": "active"},
    "verified": {"type": "boolean", "description": "Verification status", "default": True}}}


def titled(*pairs: str) -> List[dict]:
    return [{"const": pairs[i], "title": pairs[i + 1]} for i in range(0, len(pairs), 2)]


SEP1330_SCHEMA = {"type": "object", "required": [], "properties": {
    "untitledSingle": {"type": "string", "description": "Select one option",
                       "enum": ["option1", "option2", "option3"]},
    "titledSingle": {"type": "string", "description": "Select one option with titles",
                     "oneOf": titled("value1", "First Option", "value2", "Second Option",
                                     "value3", "Third Option")},
    "legacyEnum": {"type": "string", "description": "Select one option (legacy)",
                   "enum": ["opt1", "opt2", "opt3"],
                   "enumNames": ["Option One", "Option Two", "Option Three"]},
    "untitledMulti": {"type": "array", "description": "Select multiple options",
                      "minItems": 1, "maxItems": 3,
                      "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
    "titledMulti": {"type": "array", "description": "Select multiple options with titles",
                    "minItems": 1, "maxItems": 3,
                    "items": {"anyOf": titled("value1", "First Choice", "value2",
                                              "Second Choice", "value3", "Third Choice")}}}}

JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
    "$defs": {"address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False}

MIXED_RESOURCE = {"uri": "test://mixed-content-resource", "mimeType": "application/json",
                  "text": json.dumps({"test": "data", "value": 123}, separators=(",", ":"))}
EMBEDDED = {"uri": "test://embedded-resource", "mimeType": "text/plain",
            "text": "This is an embedded resource content."}
ToolFn = Callable[[Fixture, Call, dict], dict]
# name -> (definition without the name, handler)
TOOLS: Dict[str, Tuple[dict, ToolFn]] = {
    "test_simple_text": (no_args("Tests simple text content response"), lambda fx, c, a: {
        "content": [text("This is a simple text response for testing.")]}),
    "test_image_content": (no_args("Tests image content response"), lambda fx, c, a: {
        "content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]}),
    "test_audio_content": (no_args("Tests audio content response"), lambda fx, c, a: {
        "content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}),
    "test_embedded_resource": (no_args("Tests embedded resource content response"),
                               lambda fx, c, a: {"content": [{"type": "resource",
                                                              "resource": EMBEDDED}]}),
    "test_multiple_content_types": (
        no_args("Tests response with multiple content types (text, image, resource)"),
        lambda fx, c, a: {"content": [text("Multiple content types test:"),
                                      {"type": "image", "data": PNG, "mimeType": "image/png"},
                                      {"type": "resource", "resource": MIXED_RESOURCE}]}),
    "test_tool_with_logging": (no_args("Tests tool that emits log messages during execution"),
                               with_logging),
    "test_tool_with_progress": (no_args("Tests tool that reports progress notifications"),
                                with_progress),
    "test_error_handling": (no_args("Tests error response handling"), lambda fx, c, a:
                            error_result("This tool intentionally returns an error for testing")),
    "test_sampling": (one_string("Tests server-initiated sampling (LLM completion request)",
                                 "prompt", "The prompt to send to the LLM"), sampling),
    "test_elicitation": (one_string("Tests server-initiated elicitation (user input request)",
                                    "message", "The message to show the user"), elicitation),
    "test_elicitation_sep1034_defaults": (
        no_args("Tests elicitation with default values per SEP-1034"),
        lambda fx, c, a: elicit(fx, c, "Please review and update the form fields with defaults",
                                SEP1034_SCHEMA, "Elicitation completed")),
    "test_elicitation_sep1330_enums": (
        no_args("Tests elicitation with enum schema improvements per SEP-1330"),
        lambda fx, c, a: elicit(fx, c, "Please select options from the enum fields",
                                SEP1330_SCHEMA, "Elicitation completed")),
    "json_schema_2020_12_tool": (
        {"description": "Tool with JSON Schema 2020-12 features for conformance testing "
                        "(SEP-1613)", "inputSchema": JSON_SCHEMA_2020_12},
        lambda fx, c, a: {"content": [text("JSON Schema 2020-12 tool called with: "
                                           + json.dumps(a, separators=(",", ":")))]}),
    "test_reconnection": (
        no_args("Tests SSE stream disconnection and client reconnection (SEP-1699); the HTTP "
                "front closes the stream, this answers after 100 ms"),
        lambda fx, c, a: (c.sleep(0.1), {"content": [text(
            "Reconnection test completed successfully. If you received this, the client "
            "properly reconnected after stream closure.")]})[1]),
}


def tools_list(fx: Fixture, call: Call) -> dict:
    return {"tools": [dict(definition, name=name) for name, (definition, _) in TOOLS.items()]}


def tools_call(fx: Fixture, call: Call) -> dict:
    name, args = call.params.get("name"), call.params.get("arguments")
    if name not in TOOLS:
        raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}. Tools: {', '.join(TOOLS)}")
    if args is not None and not isinstance(args, dict):
        raise RpcError(INVALID_PARAMS, "arguments must be an object")
    return TOOLS[name][1](fx, call, args or {})


# ---- resources ---------------------------------------------------------------------------------

RESOURCES = {
    "test://static-text": ({"name": "static-text", "title": "Static Text Resource",
                            "description": "A static text resource for testing",
                            "mimeType": "text/plain"},
                           {"text": "This is the content of the static text resource."}),
    "test://static-binary": ({"name": "static-binary", "title": "Static Binary Resource",
                              "description": "A static binary resource (image) for testing",
                              "mimeType": "image/png"}, {"blob": PNG}),
    "test://watched-resource": ({"name": "watched-resource", "title": "Watched Resource",
                                 "description": "A resource that can be subscribed to",
                                 "mimeType": "text/plain"}, {"text": "Watched resource content"}),
}


def resources_list(fx: Fixture, call: Call) -> dict:
    return {"resources": [dict(meta, uri=uri) for uri, (meta, _) in RESOURCES.items()]}


def templates_list(fx: Fixture, call: Call) -> dict:
    return {"resourceTemplates": [{
        "uriTemplate": TEMPLATE, "name": "template", "title": "Resource Template",
        "description": "A resource template with parameter substitution",
        "mimeType": "application/json"}]}


def resources_read(fx: Fixture, call: Call) -> dict:
    uri = call.params.get("uri")
    if not isinstance(uri, str):
        raise RpcError(INVALID_PARAMS, "resources/read needs params.uri, a string")
    if uri in RESOURCES:
        meta, body = RESOURCES[uri]
        return {"contents": [dict(body, uri=uri, mimeType=meta["mimeType"])]}
    m = TEMPLATE_RE.match(uri)
    if m is None:
        raise RpcError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}")
    data = {"id": m.group(1), "templateTest": True, "data": f"Data for ID: {m.group(1)}"}
    return {"contents": [{"uri": uri, "mimeType": "application/json",
                          "text": json.dumps(data, separators=(",", ":"))}]}


def subscribe(fx: Fixture, call: Call) -> dict:
    uri = call.params.get("uri")
    if not isinstance(uri, str):
        raise RpcError(INVALID_PARAMS, "resources/subscribe needs params.uri, a string")
    fx.subscriptions.add(uri)
    call.after = lambda: fx.notify("notifications/resources/updated", {"uri": uri})
    return {}


def unsubscribe(fx: Fixture, call: Call) -> dict:
    uri = call.params.get("uri")
    if not isinstance(uri, str):
        raise RpcError(INVALID_PARAMS, "resources/unsubscribe needs params.uri, a string")
    fx.subscriptions.discard(uri)
    return {}


# ---- prompts -----------------------------------------------------------------------------------

def user(content: dict) -> dict:
    return {"role": "user", "content": content}


def arg_list(*names_and_descriptions: str) -> List[dict]:
    pairs = names_and_descriptions
    return [{"name": pairs[i], "description": pairs[i + 1], "required": True}
            for i in range(0, len(pairs), 2)]


PromptFn = Callable[[dict], List[dict]]
PROMPTS: Dict[str, Tuple[dict, PromptFn]] = {
    "test_simple_prompt": ({"title": "Simple Test Prompt",
                            "description": "A simple prompt without arguments"},
                           lambda a: [user(text("This is a simple prompt for testing."))]),
    "test_prompt_with_arguments": (
        {"title": "Prompt With Arguments", "description": "A prompt with required arguments",
         "arguments": arg_list("arg1", "First test argument", "arg2", "Second test argument")},
        lambda a: [user(text(f"Prompt with arguments: arg1='{a['arg1']}', arg2='{a['arg2']}'"))]),
    "test_prompt_with_embedded_resource": (
        {"title": "Prompt With Embedded Resource",
         "description": "A prompt that includes an embedded resource",
         "arguments": arg_list("resourceUri", "URI of the resource to embed")},
        lambda a: [user({"type": "resource", "resource": {
            "uri": a["resourceUri"], "mimeType": "text/plain",
            "text": "Embedded resource content for testing."}}),
                   user(text("Please process the embedded resource above."))]),
    "test_prompt_with_image": (
        {"title": "Prompt With Image", "description": "A prompt that includes image content"},
        lambda a: [user({"type": "image", "data": PNG, "mimeType": "image/png"}),
                   user(text("Please analyze the image above."))]),
}


def prompts_list(fx: Fixture, call: Call) -> dict:
    return {"prompts": [dict(meta, name=name) for name, (meta, _) in PROMPTS.items()]}


def prompts_get(fx: Fixture, call: Call) -> dict:
    name, args = call.params.get("name"), call.params.get("arguments") or {}
    if name not in PROMPTS:
        raise RpcError(INVALID_PARAMS, f"Unknown prompt: {name}. Prompts: {', '.join(PROMPTS)}")
    meta, build = PROMPTS[name]
    if not isinstance(args, dict):
        raise RpcError(INVALID_PARAMS, "arguments must be an object of strings")
    missing = [a["name"] for a in meta.get("arguments", []) if not isinstance(
        args.get(a["name"]), str)]
    if missing:
        raise RpcError(INVALID_PARAMS, f"prompt {name} needs the arguments {', '.join(missing)}")
    return {"description": meta["description"], "messages": build(args)}


HANDLERS: Dict[str, Callable[[Fixture, Call], dict]] = {
    "initialize": initialize,
    "ping": lambda fx, call: {},
    "logging/setLevel": set_level,
    "completion/complete": complete,
    "tools/list": tools_list,
    "tools/call": tools_call,
    "resources/list": resources_list,
    "resources/templates/list": templates_list,
    "resources/read": resources_read,
    "resources/subscribe": subscribe,
    "resources/unsubscribe": unsubscribe,
    "prompts/list": prompts_list,
    "prompts/get": prompts_get,
}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", help="append every message received to this file")
    opts = parser.parse_args(argv)
    trace = open(opts.trace, "ab") if opts.trace else None
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print cannot corrupt the stream
    try:
        Fixture(sys.stdin.buffer, out, trace).serve()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        if trace is not None:
            trace.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
