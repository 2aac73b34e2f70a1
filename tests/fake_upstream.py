#!/usr/bin/env python3
"""A scripted stdlib-only MCP server for Abstract's tests: run as [sys.executable, this file, *flags].

It speaks newline-delimited JSON-RPC on stdin/stdout, the legacy handshake by default, and
misbehaves on request (see the flags in _options()). Every tools/call runs on its own thread,
so a slow tool never delays another request. Events the tests need to see (calls received,
cancellations) are appended to --state-file as JSON lines.

Tools: echo(text), add(a, b), slow(seconds, text), crash(code), progress(steps), big(mb),
rpc_error(), ask_client(method), record_cancel(), getenv(name), result(result) (answers with the
given result object verbatim), echo_args(...) (its arguments back as JSON text and
structuredContent), rows(n) (n records, see make_rows), needs(records, table) (declares them required).
Positional arguments are accepted and ignored (a test uses one to look like abstract.py).

With --extras (see EXTRA_TOOLS): lines(n), structured(n) (declares outputSchema, title and
annotations), change_tools() (adds tool added_later and sends notifications/tools/list_changed),
plus resources/list, resources/read, resources/templates/list, prompts/list and prompts/get
(with --modern-only also the prompt "ask" and the resource fake://ask, which answer input_required
first, as mrtr does).

With --modern-only, subscriptions/listen is acknowledged (tool changes only) and kept open, and
list_changed goes on it; its notifications/cancelled is noted in the state file.

With --subscribe: resources.subscribe declared, resources/subscribe and unsubscribe recorded and
answered {} (notify_client sends notifications/resources/updated).

With --tasks (2025-11-25 tasks): the tasks capability, tool job(seconds, text) that runs only as a
task, and tasks/get, tasks/result, tasks/cancel. job(ask=<elicitation params>) asks them of the
client while its tasks/result waits, naming the task in _meta (io.modelcontextprotocol/related-task),
and ends with the answer.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time

HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
MODERN = "2026-07-28"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
BIG_PATTERN = "0123456789abcdefghijklmnopqrstuv"  # tests rebuild the same text to compare

_S = {"type": "string"}
_N = {"type": "number"}
TOOLS = [
    ("echo", "Return the text.", {"text": _S}),
    ("go_deaf", "Answer, then never read stdin again (a server that stops reading).", {}),
    ("add", "Add two numbers.", {"a": _N, "b": _N}),
    ("slow", "Answer after some seconds.", {"seconds": _N, "text": _S}),
    ("crash", "Exit the process at once with this code.", {"code": _N}),
    ("progress", "Send progress notifications, then answer (after then_wait seconds, cancellable).",
     {"steps": _N, "then_wait": _N}),
    ("big", "One text item of this many megabytes.", {"mb": _N}),
    ("rpc_error", "Answer with a JSON-RPC error.", {}),
    ("ask_client", "Send the client a request and return its answer (after then_wait seconds, unless "
                   "the call is cancelled).", {"method": _S, "params": {"type": "object"}, "wait": _N, "then_wait": _N}),
    ("mrtr", "2026-07-28 multi round-trip: input_required with these inputRequests and requestState "
             "state-<n> until the retry brings inputResponses and the last state, for `rounds` rounds (1); "
             "then those and the requestState back.", {"inputRequests": {"type": "object"}, "rounds": _N}),
    ("notify_client", "Send the client a notification.", {"method": _S, "params": {"type": "object"}}),
    ("cancel_asks", "Send notifications/cancelled for every ask_client request still pending.", {}),
    ("record_cancel", "Wait for notifications/cancelled for this call; never answer.", {}),
    ("getenv", "Return an environment variable.", {"name": _S}),
    ("result", "Answer with the given result object verbatim.", {"result": {"type": "object"}}),
    ("echo_args", "Return the arguments as JSON text and as structuredContent.", {}),
    ("rows", "Return n records as JSON text.", {"n": {"type": "integer"}}),
    ("needs", "Requires records (an array) and table (a string); echoes them.",
     {"records": {"type": "array"}, "table": _S}),
    ("endless", "Start the answer, then write this many megabytes with no newline, and hang.", {"mb": _N}),
    ("deep", "Answer with a result nested this many arrays deep.", {"n": {"type": "integer"}}),
    ("flood_asks", "Send the client n requests of this method (elicitation/create by default) with a "
                   "kb-KiB message each, at once; answer once `errors` of them got an error (or after "
                   "`wait` s) with the counts.", {"n": _N, "kb": _N, "method": _S, "errors": _N, "wait": _N}),
    ("flood_logs", "Send n notifications/message of kb KiB each, then answer.", {"n": _N, "kb": _N}),
    ("long", "Answer with long strings of awkward text (make_long), escaped or raw UTF-8, or with "
             "the line `raw` as given.", {"shape": _S, "mb": _N, "ascii": {"type": "boolean"}, "raw": _S}),
]
REQUIRED = {"needs": ["records", "table"]}  # inputSchema "required" per tool

# --extras: full definitions, passed through by Abstract's direct mode as they are
STRUCTURED_SCHEMA = {"type": "object", "properties": {"items": {"type": "array"}}, "required": ["items"]}
EXTRA_TOOLS = [
    {"name": "lines", "description": "n lines of text: 'line 1' ... 'line n'.",
     "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    {"name": "structured", "title": "Structured items", "description": "n items as structuredContent.",
     "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
     "outputSchema": STRUCTURED_SCHEMA, "annotations": {"readOnlyHint": True, "title": "Items"}},
    {"name": "change_tools", "description": "Add tool added_later and send notifications/tools/list_changed.",
     "inputSchema": {"type": "object", "properties": {}}},
]
JOB_TOOL = {"name": "job", "description": "Runs only as a task: answers after `seconds`.",
            "inputSchema": {"type": "object", "properties": {"seconds": _N, "text": _S}},
            "execution": {"taskSupport": "required"}}
ADDED_LATER = {"name": "added_later", "description": "Listed after change_tools.",
               "inputSchema": {"type": "object", "properties": {}}}
# with --modern-only, the prompt "ask" and the resource fake://ask answer input_required (see mrtr)
ASK_NAME = {"method": "elicitation/create", "params": {
    "mode": "form", "message": "Your name?", "requestedSchema": {"type": "object", "properties": {"name": _S}}}}
ASKING_RESOURCE = {"uri": "fake://ask", "name": "asking", "mimeType": "application/json"}
ASKING_PROMPT = {"name": "ask", "description": "Asks your name first (2026-07-28 input_required)."}
RESOURCES = [{"uri": "fake://doc/1", "name": "doc1", "mimeType": "text/plain"}]
TEMPLATES = [{"uriTemplate": "fake://doc/{n}", "name": "doc"}]
PROMPTS = [{"name": "greet", "description": "Say hello.", "arguments": [{"name": "who", "required": True}]}]


def make_lines(n: int) -> str:
    """The text lines(n) returns."""
    return "\n".join(f"line {i}" for i in range(1, n + 1))


def make_items(n: int) -> list:
    """The structuredContent items structured(n) returns."""
    return [{"i": i, "text": f"item {i} " + "x" * 40} for i in range(n)]


def make_rows(n: int) -> list:
    """The records rows(n) returns (tests rebuild them to compare)."""
    return [{"id": i, "name": f"name {i}", "score": i * 0.5, "ok": i % 2 == 0} for i in range(n)]


def big_text(mb: float) -> str:
    """The text big(mb) returns: BIG_PATTERN repeated to mb MiB."""
    size = int(mb * 1024 * 1024)
    return (BIG_PATTERN * (size // len(BIG_PATTERN) + 1))[:size]


# Every kind of character a JSON string escapes or may carry raw, and runs of backslashes: a
# long string of it is cut into pieces next to each kind somewhere (_string_pieces).
AWKWARD = ('plain "quoted" back\\slash \\\\ two \\\\\\ three \n\r\t\b\f \x00\x1f/ '
           'caf\u00e9 \u2713 \u65e5\u672c \U0001F680\U0001F600 \u2028\u2029 \ufeff end\n')


def awkward_text(mb: float, tail: str = "") -> str:
    """About mb MiB of AWKWARD with a counter in each repeat (so shifting pieces differ), + tail."""
    n = int(mb * (1 << 20) / (len(AWKWARD.encode()) + 8))
    return "".join(f"{i:07d}" + AWKWARD for i in range(n)) + tail


def awkward_rows(mb: float) -> list:
    """About mb MiB of JSON records holding AWKWARD text, and a lone surrogate in one."""
    n = int(mb * (1 << 20) / (len(json.dumps(AWKWARD)) + 60))
    rows = [{"id": i, "text": AWKWARD[: 20 + i % 90], "tags": ["\U0001F680", i % 7]} for i in range(n)]
    rows[n // 2]["lone"] = "\ud800 alone"
    return rows


def make_long(shape: str, mb: float) -> dict:
    """The result long(shape, mb) answers with (tests rebuild it to compare):
    records: one text item, a JSON array of records (the cache reads it in pieces);
    text: one text item of plain text; structured: structuredContent {"content": <the text>}
    beside the same text; several: two long texts, a long embedded resource and a short text;
    resource_records: the records as an embedded resource's text; structured_records: the
    records text and its twin in structuredContent {"content": <the text>}, as server-filesystem
    answers a read."""
    if shape == "records":
        return _result_text(json.dumps(awkward_rows(mb), ensure_ascii=False))
    if shape == "structured_records":
        text = json.dumps(awkward_rows(mb), ensure_ascii=False)
        return dict(_result_text(text), structuredContent={"content": text})
    if shape == "text":
        return _result_text(awkward_text(mb))
    if shape == "structured":
        text = awkward_text(mb)
        return dict(_result_text(text), structuredContent={"content": text})
    if shape == "several":
        return {"content": [{"type": "text", "text": json.dumps(awkward_rows(mb), ensure_ascii=False)},
                            {"type": "text", "text": awkward_text(mb, "second")},
                            {"type": "resource", "resource": {"uri": "fake://long", "mimeType": "text/plain",
                                                              "text": awkward_text(mb, "third")}},
                            {"type": "text", "text": "short"}]}
    if shape == "resource_records":
        return {"content": [{"type": "resource", "resource": {"uri": "fake://rows", "mimeType": "application/json",
                                                              "text": json.dumps(awkward_rows(mb), ensure_ascii=False)}}]}
    raise ValueError(f"no shape {shape!r}")


def _options(argv: list) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="scripted MCP server for tests")
    ap.add_argument("ignored", nargs="*")
    ap.add_argument("--page-size", type=int, default=0, help="tools/list page size (0: one page)")
    ap.add_argument("--garbage", action="store_true", help="print non-JSON lines to stdout")
    ap.add_argument("--stderr-flood", type=float, default=0, metavar="MB")
    ap.add_argument("--stderr-lines", type=int, default=0, metavar="N",
                    help="write N short lines ('line <i>') to stderr before serving")
    ap.add_argument("--stderr-trickle", type=int, default=0, metavar="N",
                    help="write N short lines ('drip <i>') to stderr, one write each, 0.5 ms "
                         "apart, while serving (a steady flood its reader keeps up with)")
    ap.add_argument("--exit-at-start", type=int, default=None, metavar="CODE")
    ap.add_argument("--no-handshake", action="store_true", help="never answer initialize")
    ap.add_argument("--start-delay", type=float, default=0, metavar="S")
    ap.add_argument("--modern-only", action="store_true", help="refuse initialize; serve 2026-07-28")
    ap.add_argument("--slow-probe", type=float, default=0, metavar="S",
                    help="--modern-only, slow to start: the first server/discover is answered after S "
                         "seconds, and initialize gets -32022 naming 2026-07-28, as the SDK's server does")
    ap.add_argument("--init-refusal", type=int, default=-32022, metavar="CODE",
                    help="with --slow-probe: the error code initialize is refused with")
    ap.add_argument("--silent-probe", action="store_true",
                    help="a handshake-era server that never answers server/discover (noted in the state file)")
    ap.add_argument("--exit-on-probe", action="store_true",
                    help="a handshake-era server that exits on server/discover, as hand-rolled ones "
                         "exit on any method they do not know (noted in the state file)")
    ap.add_argument("--unknown-id", action="store_true", help="send one response with an unknown id")
    ap.add_argument("--pidfile", default=None, help="append own pid to this file")
    ap.add_argument("--spawn-child", action="store_true", help="leave a child that holds stdout open")
    ap.add_argument("--stubborn", action="store_true", help="ignore SIGTERM and stdin EOF (only SIGKILL ends it)")
    ap.add_argument("--daemon-child", type=float, default=None, metavar="S",
                    help="leave a grandchild (a double fork, setsid, SIGTERM ignored, stdio closed) "
                         "that lives S seconds; its pid goes to the state file as event 'daemon'")
    ap.add_argument("--stale-list-once", action="store_true",
                    help="first tools/list: change the tools and say so, then answer with the old list")
    ap.add_argument("--crash-once-file", default=None, help="crash on the first call unless this exists")
    ap.add_argument("--state-file", default=None, help="append events as JSON lines")
    ap.add_argument("--logging", action="store_true", help="declare logging; record logging/setLevel")
    ap.add_argument("--tasks", action="store_true",
                    help="2025-11-25 tasks: declare them; tool job(seconds, text) runs only as a task")
    ap.add_argument("--extras", action="store_true", help="extra tools, resources and prompts (see docstring)")
    ap.add_argument("--subscribe", action="store_true",
                    help="declare resources.subscribe; record resources/subscribe and unsubscribe "
                         "(events subscribe, unsubscribe with the uri) and answer {}")
    ap.add_argument("--extra-tool", action="append", default=[], metavar="NAME",
                    help="also offer a tool of this name (any characters) that works like echo_args")
    ap.add_argument("--tool-def", action="append", default=[], metavar="JSON",
                    help="also offer this tool definition as it is (a hostile inputSchema, say); "
                         "it works like echo_args")
    ap.add_argument("--tools-file", default=None, metavar="JSON",
                    help="offer exactly the tool definitions in this JSON file (each works like "
                         "echo_args): another server's real tool list, as data")
    return ap.parse_args(argv)


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _stderr(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _trickle_stderr(n: int) -> None:
    for i in range(n):
        _stderr(f"drip {i} " + "-" * 80)
        time.sleep(0.0005)


def _flood_stderr(mb: float) -> None:
    """Half as lines of 60 KB, half as one line with no newline at all."""
    half = int(mb * 1024 * 1024 / 2)
    line = "e" * (60 * 1024) + "\n"
    for _ in range(half // len(line)):
        sys.stderr.write(line)
    sys.stderr.write("L" * half)
    sys.stderr.flush()


def _result_text(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}]}


class Fake:
    """The server: reads stdin on the main thread, writes whole lines under a lock."""

    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.out = sys.stdout.buffer
        self.wlock = threading.Lock()
        self.ids = itertools.count(1)
        self.answers: dict = {}  # id of our request to the client -> [Event, response]
        self.cancels: dict = {}  # request id -> Event set by notifications/cancelled
        self.unknown_id_pending = opts.unknown_id
        self.tools_changed = False  # change_tools was called
        self.listening = None  # --modern-only: the id of the open subscriptions/listen
        self.params_of: dict = {}  # tools/call id -> its params, while the tool runs
        self.tasks: dict = {}  # --tasks: taskId -> {"done": Event, "result": ..., "status": ...}
        self.flooded = {"errors": 0, "results": 0, "codes": [], "message": ""}  # flood_asks' answers
        self.flood_cond = threading.Condition()

    # -- output
    def send(self, msg: dict) -> None:
        data = json.dumps(msg).encode() + b"\n"
        with self.wlock:
            if self.opts.garbage:
                self.out.write(b"this is not json from the fake\n")
            if self.unknown_id_pending and "id" in msg and "method" not in msg:
                self.unknown_id_pending = False
                self.out.write(b'{"jsonrpc":"2.0","id":424242,"result":{}}\n')
            self.out.write(data)
            self.out.flush()

    def reply(self, mid, result: dict) -> None:
        if self.opts.modern_only:
            result = {"resultType": "complete", **result}  # (the result tool may set its own)
        self.send({"jsonrpc": "2.0", "id": mid, "result": result})

    def error(self, mid, code: int, message: str, data=None) -> None:
        err = {"code": code, "message": message}
        if data is not None:
            err["data"] = data
        self.send({"jsonrpc": "2.0", "id": mid, "error": err})

    def state(self, **event) -> None:
        if self.opts.state_file:
            _append(self.opts.state_file, json.dumps(event))

    # -- input
    def serve(self) -> None:
        if self.opts.garbage:
            self.send_raw(b"garbage before anything\n")
        for line in iter(sys.stdin.buffer.readline, b""):
            if line.strip():
                msg = json.loads(line)
                self.on_message(msg)
                if msg.get("method") == "tools/call" and (msg.get("params") or {}).get("name") == "go_deaf":
                    threading.Event().wait()  # stop reading stdin; only a kill ends this
        if self.opts.stubborn:
            threading.Event().wait()  # stdin closed, but this one stays
        os._exit(0)  # stdin closed: the client wants us gone, whatever threads still wait

    def send_raw(self, data: bytes) -> None:
        with self.wlock:
            self.out.write(data)
            self.out.flush()

    def on_message(self, msg: dict) -> None:
        method = msg.get("method")
        if method is None:
            self.on_answer(msg)
        elif "id" not in msg:
            self.on_notification(method, msg.get("params") or {})
        else:
            self.on_request(msg["id"], method, msg.get("params") or {})

    def on_answer(self, msg: dict) -> None:
        if str(msg.get("id")).startswith("flood-"):
            return self.on_flood_answer(msg)
        slot = self.answers.get(msg.get("id"))
        if slot is not None:
            slot[1] = msg
            slot[0].set()

    def on_notification(self, method: str, params: dict) -> None:
        if method == "notifications/cancelled" and self.listening is not None and params.get("requestId") == self.listening:
            self.state(event="listen_cancelled", id=self.listening)
            self.listening = None
        if method == "notifications/cancelled":
            event = self.cancels.get(params.get("requestId"))
            if event is not None:
                event.set()

    def on_request(self, mid, method: str, params: dict) -> None:
        if method == "initialize":
            self.initialize(mid, params)
        elif self.opts.modern_only and method != "server/discover" and META_VERSION not in params.get("_meta", {}):
            self.error(mid, -32602, f"{method} without {META_VERSION} in _meta")
        elif method == "server/discover":
            self.discover(mid, params)
        elif method == "subscriptions/listen" and self.opts.modern_only:
            self.listen(mid, params)
        elif method == "ping":
            self.reply(mid, {})
        elif method == "logging/setLevel" and self.opts.logging:
            self.state(event="set_level", level=params.get("level"))
            self.reply(mid, {})
        elif method == "tools/list":
            self.tools_list(mid, params)
        elif method == "tools/call":
            self.cancels[mid] = threading.Event()
            threading.Thread(target=self.tools_call, args=(mid, params), daemon=True).start()
        elif self.opts.tasks and method in ("tasks/get", "tasks/result", "tasks/cancel"):
            threading.Thread(target=self.task_method, args=(mid, method, params), daemon=True).start()
        elif self.opts.subscribe and method in ("resources/subscribe", "resources/unsubscribe"):
            self.state(event=method.split("/")[1], uri=params.get("uri"))
            self.reply(mid, {})
        elif self.opts.extras and method in self.EXTRA_METHODS:
            self.reply(mid, self.EXTRA_METHODS[method](self, params))
        else:
            self.state(event="unknown_method", method=method)
            self.error(mid, -32601, f"Method not found: {method}")

    # -- methods
    def initialize(self, mid, params: dict) -> None:
        if self.opts.no_handshake:
            return
        if self.opts.modern_only and self.opts.slow_probe:
            self.state(event="initialize", protocolVersion=params.get("protocolVersion"))
            self.send({"jsonrpc": "2.0", "id": mid, "error": {
                "code": self.opts.init_refusal, "message": "this server serves 2026-07-28 only",
                "data": {"supported": [MODERN], "requested": params.get("protocolVersion")}}})
            return
        if self.opts.modern_only:
            self.error(mid, -32601, "Method not found: initialize (this server is stateless)")
            return
        asked = params.get("protocolVersion")
        version = asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[0]
        self.state(event="initialize", protocolVersion=asked, capabilities=params.get("capabilities"))
        self.reply(mid, {"protocolVersion": version, "capabilities": self.capabilities(),
                         "serverInfo": {"name": "fake", "version": "1.0"}})

    def capabilities(self) -> dict:
        """What this fake offers: prompts and resources only with --extras (so clients ask)."""
        caps: dict = {"tools": {}}
        if self.opts.logging:
            caps["logging"] = {}
        if self.opts.extras:
            caps.update(prompts={}, resources={})
        if self.opts.subscribe:
            caps["resources"] = {"subscribe": True}
        if self.opts.tasks:
            caps["tasks"] = {"cancel": {}, "requests": {"tools": {"call": {}}}}
        return caps

    def discover(self, mid, params: dict) -> None:
        self.state(event="discover")
        if self.opts.silent_probe:
            return
        if self.opts.exit_on_probe:
            _stderr("fake: unknown method server/discover")
            os._exit(1)
        if self.opts.slow_probe:
            delay, self.opts.slow_probe = self.opts.slow_probe, -1.0  # (-1: still refuse initialize)
            if delay > 0:
                timer = threading.Timer(delay, self.discover_answer, args=(mid,))
                timer.daemon = True
                timer.start()
                return
        self.discover_answer(mid)

    def discover_answer(self, mid) -> None:
        if not self.opts.modern_only:
            self.error(mid, -32601, "Method not found: server/discover")
            return
        self.reply(mid, {"supportedVersions": [MODERN], "capabilities": self.capabilities(), "ttlMs": 0,
                         "cacheScope": "private", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "fake"}}})

    def listen(self, mid, params: dict) -> None:
        """2026-07-28 subscriptions/listen: acknowledged (tool changes only), kept open."""
        self.state(event="listen", id=mid, notifications=params.get("notifications"))
        self.listening = mid
        agreed = {k: v for k, v in (params.get("notifications") or {}).items() if k == "toolsListChanged"}
        self.send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                   "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": mid}, "notifications": agreed}})

    def tools_changed_notice(self) -> None:
        """notifications/tools/list_changed: on the subscription (2026-07-28), else as it is."""
        msg: dict = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        if self.opts.modern_only:
            if self.listening is None:
                return
            msg["params"] = {"_meta": {"io.modelcontextprotocol/subscriptionId": self.listening}}
        self.send(msg)

    def tools_list(self, mid, params: dict) -> None:
        self.state(event="tools_list")
        tools = [{"name": n, "description": d, "inputSchema": {"type": "object", "properties": p}}
                 for n, d, p in TOOLS]
        tools += [{"name": n, "description": "Like echo_args.", "inputSchema": {"type": "object"}}
                  for n in self.opts.extra_tool]
        tools += [json.loads(t) for t in self.opts.tool_def]
        for t in tools:
            if t["name"] in REQUIRED:
                t["inputSchema"]["required"] = REQUIRED[t["name"]]
        if self.opts.tools_file:
            with open(self.opts.tools_file, encoding="utf-8") as f:
                tools = json.load(f)
        if self.opts.tasks:
            tools.append(dict(JOB_TOOL))
        if self.opts.extras:
            tools += json.loads(json.dumps(EXTRA_TOOLS + ([ADDED_LATER] if self.tools_changed else [])))
        if self.opts.stale_list_once:  # the list is made, then the tools change before it is sent
            self.opts.stale_list_once = False
            self.tools_changed = True
            self.tools_changed_notice()
        size = self.opts.page_size or len(tools)
        cursor = params.get("cursor")
        start = int(cursor) if cursor else 0
        result: dict = {"tools": tools[start:start + size]}
        if start + size < len(tools):
            result["nextCursor"] = str(start + size)
        if self.opts.modern_only:
            result.update(ttlMs=0, cacheScope="private")
        self.reply(mid, result)

    def tools_call(self, mid, params: dict) -> None:
        name, args = params.get("name"), params.get("arguments") or {}
        self.state(event="call", tool=name, id=mid, arguments=args)
        once = self.opts.crash_once_file
        if once and not os.path.exists(once):
            _append(once, "crashed")
            self.crash(3)
        if self.opts.tasks and name == "job":
            self.job(mid, args, params)
            return
        defined = {json.loads(t).get("name") for t in self.opts.tool_def}
        handler = (self.tool_echo_args if name in self.opts.extra_tool or name in defined
                   or self.opts.tools_file
                   else getattr(self, f"tool_{name}", None))
        if handler is None:
            self.reply(mid, dict(_result_text(f"unknown tool {name}"), isError=True))
            return
        self.params_of[mid] = params
        result = handler(mid, args, params.get("_meta") or {})
        self.params_of.pop(mid, None)
        if result is not None:
            self.reply(mid, result)

    # -- tools: each returns a result, or None when it answered (or never will)
    def tool_echo(self, mid, args: dict, meta: dict) -> dict:
        return _result_text(str(args.get("text", "")))

    def tool_add(self, mid, args: dict, meta: dict) -> dict:
        total = args["a"] + args["b"]
        return dict(_result_text(str(total)), structuredContent={"sum": total})

    def tool_slow(self, mid, args: dict, meta: dict) -> dict:
        time.sleep(float(args.get("seconds", 1)))
        return _result_text(str(args.get("text", "slept")))

    def tool_go_deaf(self, mid, args: dict, meta: dict) -> dict:
        return _result_text("deaf")  # (the reading loop stops after this request: see serve)

    def tool_crash(self, mid, args: dict, meta: dict) -> None:
        self.crash(int(args.get("code", 1)))

    def crash(self, code: int) -> None:
        _stderr(f"fake: crashing on purpose with code {code}")
        os._exit(code)

    def tool_progress(self, mid, args: dict, meta: dict) -> dict:
        steps = int(args.get("steps", 3))
        token = meta.get("progressToken")
        for i in range(1, steps + 1):
            if token is not None:
                self.send({"jsonrpc": "2.0", "method": "notifications/progress",
                           "params": {"progressToken": token, "progress": i, "total": steps, "message": f"step {i}"}})
        self.state(event="progress_sent", id=mid)
        if self.cancels[mid].wait(float(args.get("then_wait", 0))):  # then work on, cancellable
            self.state(event="cancelled", id=mid)
            return None
        return _result_text(f"done {steps}")

    def tool_big(self, mid, args: dict, meta: dict) -> dict:
        return _result_text(big_text(float(args.get("mb", 1))))

    def tool_rpc_error(self, mid, args: dict, meta: dict) -> None:
        self.error(mid, -32042, "fake failure on request", {"why": "asked for it"})

    def tool_ask_client(self, mid, args: dict, meta: dict) -> dict:
        method = str(args.get("method", "ping"))
        rid = f"fake-{next(self.ids)}"
        slot: list = [threading.Event(), None]
        self.answers[rid] = slot
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": args.get("params") or {}})
        self.state(event="asked", id=rid, method=method)
        if not slot[0].wait(float(args.get("wait", 10))):
            return dict(_result_text(f"no answer to {method}"), isError=True)
        self.answers.pop(rid, None)
        answer = {k: v for k, v in slot[1].items() if k in ("result", "error")}
        self.state(event="answered", id=rid, answer=answer)
        if self.cancels[mid].wait(float(args.get("then_wait", 0))):  # then work on, cancellable
            self.state(event="cancelled", id=mid)
            return None
        return _result_text(json.dumps(answer))

    def on_flood_answer(self, msg: dict) -> None:
        with self.flood_cond:
            if "error" in msg:
                self.flooded["errors"] += 1
                code = msg["error"].get("code")
                if code not in self.flooded["codes"]:
                    self.flooded["codes"].append(code)
                self.flooded["message"] = self.flooded["message"] or msg["error"].get("message", "")
            else:
                self.flooded["results"] += 1
            self.flood_cond.notify_all()

    def tool_flood_asks(self, mid, args: dict, meta: dict) -> dict:
        method = str(args.get("method", "elicitation/create"))
        message = "x" * int(float(args.get("kb", 4)) * 1024)
        params = {"mode": "form", "message": message, "requestedSchema": {"type": "object", "properties": {}}}
        n = int(args.get("n", 1000))
        for i in range(n):
            self.send({"jsonrpc": "2.0", "id": f"flood-{i}", "method": method, "params": params})
        with self.flood_cond:
            self.flood_cond.wait_for(lambda: self.flooded["errors"] >= int(args.get("errors", n)),
                                     float(args.get("wait", 60)))
            return _result_text(json.dumps({"sent": n, **self.flooded}))

    def tool_flood_logs(self, mid, args: dict, meta: dict) -> dict:
        data = "l" * int(float(args.get("kb", 2)) * 1024)
        n = int(args.get("n", 1000))
        for i in range(n):
            self.send({"jsonrpc": "2.0", "method": "notifications/message",
                       "params": {"level": "info", "logger": "flood", "data": f"{i} {data}"}})
        return _result_text(f"sent {n}")

    def tool_mrtr(self, mid, args: dict, meta: dict) -> dict:
        params = self.params_of.get(mid, {})
        return self.mrtr(params, args.get("inputRequests") or {}, int(args.get("rounds", 1)), "tools/call",
                         lambda got: _result_text(json.dumps(got)))

    def mrtr(self, params: dict, asks: dict, rounds: int, method: str, done) -> dict:
        """A 2026-07-28 server's multi round-trip request: input_required with `asks` and
        requestState state-<n>, until round `rounds` is answered with the state it gave."""
        meta = params.get("_meta") or {}
        state = params.get("requestState")
        self.state(event="mrtr", method=method, capabilities=meta.get("io.modelcontextprotocol/clientCapabilities"),
                   inputResponses=params.get("inputResponses"), requestState=state)
        n = int(state.split("-")[1]) if isinstance(state, str) and state.startswith("state-") else 0
        if "inputResponses" not in params or n < rounds:
            return {"resultType": "input_required", "inputRequests": asks, "requestState": f"state-{n + 1}"}
        return done({"inputResponses": params["inputResponses"], "requestState": state})

    def tool_notify_client(self, mid, args: dict, meta: dict) -> dict:
        self.send({"jsonrpc": "2.0", "method": str(args.get("method")), "params": args.get("params") or {}})
        return _result_text("sent")

    def tool_cancel_asks(self, mid, args: dict, meta: dict) -> dict:
        for rid, slot in list(self.answers.items()):
            self.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}})
            slot[1] = {"cancelled": rid}
            slot[0].set()
        return _result_text("cancelled")

    def tool_record_cancel(self, mid, args: dict, meta: dict) -> None:
        self.state(event="started", id=mid, progressToken=(meta or {}).get("progressToken"))
        if self.cancels[mid].wait(60):
            self.state(event="cancelled", id=mid)

    def tool_getenv(self, mid, args: dict, meta: dict) -> dict:
        value = os.environ.get(str(args.get("name")))
        return _result_text("<unset>" if value is None else value)

    def tool_result(self, mid, args: dict, meta: dict) -> dict:
        return args.get("result") or {"content": []}

    def tool_echo_args(self, mid, args: dict, meta: dict) -> dict:
        return dict(_result_text(json.dumps(args, ensure_ascii=False)), structuredContent=args)

    def tool_rows(self, mid, args: dict, meta: dict) -> dict:
        return _result_text(json.dumps(make_rows(int(args.get("n", 3)))))

    def tool_needs(self, mid, args: dict, meta: dict) -> dict:
        return dict(_result_text(json.dumps(args, ensure_ascii=False)), structuredContent=args)

    def tool_endless(self, mid, args: dict, meta: dict) -> None:
        with self.wlock:  # one line that never ends: nothing else can be written after it
            self.out.write(json.dumps({"jsonrpc": "2.0", "id": mid}).encode()[:-1] + b',"result":"')
            chunk = b"x" * (1 << 20)
            for _ in range(int(args.get("mb", 1))):
                self.out.write(chunk)
            self.out.flush()
            threading.Event().wait()

    def tool_deep(self, mid, args: dict, meta: dict) -> None:
        n = int(args.get("n", 5000))
        self.send_raw(b'{"jsonrpc":"2.0","id":%s,"result":%s%s}\n' % (json.dumps(mid).encode(), b"[" * n, b"]" * n))

    def tool_long(self, mid, args: dict, meta: dict) -> None:
        if "raw" in args:  # a line of our own making: %ID% is the request's id
            # (a lone surrogate \udc80-\udcff in it is that byte: invalid UTF-8 on purpose)
            self.send_raw(args["raw"].replace("%ID%", json.dumps(mid)).encode("utf-8", "surrogateescape") + b"\n")
            return
        msg = {"jsonrpc": "2.0", "id": mid, "result": make_long(args["shape"], float(args.get("mb", 2)))}
        ascii = bool(args.get("ascii", True))  # json.dumps' default; else raw UTF-8 (lone surrogates kept)
        self.send_raw(json.dumps(msg, ensure_ascii=ascii).encode("utf-8", "surrogatepass") + b"\n")

    # -- --tasks (2025-11-25)
    def job(self, mid, args: dict, params: dict) -> None:
        if not isinstance(params.get("task"), dict):
            self.error(mid, -32601, "tool job runs only as a task (execution.taskSupport required)")
            return
        tid = f"task-{next(self.ids)}"
        task = {"done": threading.Event(), "status": "working", "result": None, "ask": args.get("ask"),
                "ask_when": args.get("ask_when")}
        self.tasks[tid] = task
        self.state(event="task", taskId=tid, task=params["task"])

        def run() -> None:
            if not task["done"].wait(float(args.get("seconds", 0))) and not task["ask"]:
                task["status"], task["result"] = "completed", _result_text(f"job done: {args.get('text', '')}")
                task["done"].set()

        threading.Thread(target=run, daemon=True).start()
        self.reply(mid, {"task": self.task_info(tid)})

    def task_asks(self, tid: str, task: dict) -> None:
        """job(ask=...): the task's question, naming the task, asked during its tasks/result
        (with ask_when=<path>: once that file exists, at most 60 s later)."""
        deadline = time.monotonic() + 60
        while task["ask_when"] and not os.path.exists(task["ask_when"]) and time.monotonic() < deadline:
            time.sleep(0.02)
        rid = f"fake-{next(self.ids)}"
        slot: list = [threading.Event(), None]
        self.answers[rid] = slot
        meta = {"io.modelcontextprotocol/related-task": {"taskId": tid}}
        self.send({"jsonrpc": "2.0", "id": rid, "method": "elicitation/create",
                   "params": dict(task["ask"], _meta=meta)})
        self.state(event="asked", id=rid, method="elicitation/create", taskId=tid)
        got = slot[1] if slot[0].wait(30) else {"error": "no answer"}
        self.answers.pop(rid, None)
        answer = {k: v for k, v in got.items() if k in ("result", "error")}
        task["status"], task["result"] = "completed", _result_text(json.dumps(answer))
        task["done"].set()

    def task_info(self, tid: str) -> dict:
        return {"taskId": tid, "status": self.tasks[tid]["status"], "createdAt": "2026-01-01T00:00:00Z",
                "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": 60000, "pollInterval": 100}

    def task_method(self, mid, method: str, params: dict) -> None:
        tid = params.get("taskId")
        task = self.tasks.get(tid)
        self.state(event=method, taskId=tid)
        if task is None:
            self.error(mid, -32602, f"no task {tid}")
        elif method == "tasks/get":
            self.reply(mid, self.task_info(tid))
        elif method == "tasks/cancel":
            task["status"] = "cancelled"
            task["done"].set()
            self.reply(mid, self.task_info(tid))
        else:  # tasks/result: when the task ends
            if task["ask"] and not task["done"].is_set():
                self.task_asks(tid, task)
            task["done"].wait(60)
            if task["status"] == "cancelled":
                self.error(mid, -32603, "task cancelled")
            else:
                meta = {"io.modelcontextprotocol/related-task": {"taskId": tid}}
                self.reply(mid, dict(task["result"], _meta=meta))

    # -- --extras
    def tool_lines(self, mid, args: dict, meta: dict) -> dict:
        return _result_text(make_lines(int(args.get("n", 3))))

    def tool_structured(self, mid, args: dict, meta: dict) -> dict:
        items = make_items(int(args.get("n", 3)))
        return dict(_result_text(json.dumps({"items": items})), structuredContent={"items": items})

    def tool_change_tools(self, mid, args: dict, meta: dict) -> dict:
        self.tools_changed = True
        self.tools_changed_notice()
        return _result_text("changed")

    def resources_read(self, params: dict) -> dict:
        uri = params.get("uri")
        if uri == ASKING_RESOURCE["uri"]:  # a 2026-07-28 multi round-trip read
            return self.mrtr(params, {"who": ASK_NAME}, 1, "resources/read", lambda got: {"contents": [
                {"uri": uri, "mimeType": "application/json", "text": json.dumps(got)}]})
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": f"content of {uri}"}]}

    def prompts_get(self, params: dict) -> dict:
        who = (params.get("arguments") or {}).get("who", "nobody")
        if params.get("name") == "ask":  # a 2026-07-28 multi round-trip prompt
            return self.mrtr(params, {"who": ASK_NAME}, 1, "prompts/get", lambda got: {"messages": [
                {"role": "user", "content": {"type": "text", "text": json.dumps(got)}}]})
        text = f"hello {who} from {params.get('name')}"
        return {"description": "A greeting.", "messages": [{"role": "user", "content": {"type": "text", "text": text}}]}

    EXTRA_METHODS = {
        "resources/list": lambda self, p: {"resources": RESOURCES + [ASKING_RESOURCE] * self.opts.modern_only},
        "resources/read": resources_read,
        "resources/templates/list": lambda self, p: {"resourceTemplates": TEMPLATES},
        "prompts/list": lambda self, p: {"prompts": PROMPTS + [ASKING_PROMPT] * self.opts.modern_only},
        "prompts/get": prompts_get,
    }


def main(argv: list) -> None:
    opts = _options(argv)
    if opts.stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if opts.pidfile:
        _append(opts.pidfile, str(os.getpid()))
    if opts.exit_at_start is not None:
        _stderr(f"fake: exiting at start with code {opts.exit_at_start}")
        sys.exit(opts.exit_at_start)
    if opts.stderr_flood:
        _flood_stderr(opts.stderr_flood)
    if opts.stderr_lines:
        sys.stderr.write("".join(f"line {i} " + "-" * 80 + "\n" for i in range(opts.stderr_lines)))
        sys.stderr.flush()
    if opts.stderr_trickle:
        threading.Thread(target=_trickle_stderr, args=(opts.stderr_trickle,), daemon=True).start()
    if opts.start_delay:
        time.sleep(opts.start_delay)
    fake = Fake(opts)
    if opts.spawn_child:  # it inherits stdout, so the pipe stays open after this process dies
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], stdin=subprocess.DEVNULL)
        fake.state(event="child", pid=child.pid)
    if opts.daemon_child is not None:
        _daemon(opts.daemon_child, opts.state_file)
    fake.serve()


_DAEMON = """
import json, os, signal, sys, time
if os.fork():
    os._exit(0)  # the middle process ends: the grandchild is an orphan from here on
os.setsid()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if sys.argv[2]:
    with open(sys.argv[2], "a") as f:
        f.write(json.dumps({"event": "daemon", "pid": os.getpid()}) + "\\n")
time.sleep(float(sys.argv[1]))
"""


def _daemon(seconds: float, state_file) -> None:
    """A double-forked grandchild that leaves the process group and ignores SIGTERM."""
    subprocess.run([sys.executable, "-c", _DAEMON, str(seconds), state_file or ""], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)


if __name__ == "__main__":
    main(sys.argv[1:])
