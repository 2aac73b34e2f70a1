#!/usr/bin/env python3
"""A remote MCP server built on the official Python SDK (mcp 2.x, MCPServer), served over
Streamable HTTP or the older HTTP+SSE transport on 127.0.0.1, for tests/test_remote.py.

Run with the SDK's venv python:  sdk_server.py --transport streamable-http|sse|stdio --port N
  [--json-response] [--stateless] [--token T] [--legacy]

The SDK's server speaks both eras, the one of the client's first request. --legacy makes it a
handshake-era-only server: a request without a session that is not initialize gets what
server-everything and the TypeScript SDK answer, HTTP 400 with the JSON-RPC error -32000
"Bad Request: Server not initialized" (so a 2026-07-28 probe falls back to initialize).

Tools: echo(text); big(kb) -> about kb KiB of text; rows(n) -> a JSON array of n records;
progress(steps) -> reports `steps` progress notifications, then "done"; slow(seconds) -> sleeps;
count(key) -> how many times count was called with `key` in this process (a replay shows);
cut() -> sends one progress notification, closes its SSE stream (the client must resume with
Last-Event-ID; needs the event store, on by default for streamable-http), then answers "resumed";
auth() -> "yes" when the request carried "Authorization: Bearer <token>", else "no";
grow(name) -> adds a tool `name` and tells subscribers (subscriptions/listen) the list changed;
era() -> the protocol version of the request; sleepy(key) -> sleeps 60 s, noting that it started
and whether it was cancelled, which noted(key) tells ("started=1 cancelled=1").
"""

from __future__ import annotations

import argparse
import itertools
import json

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventStore

_counts: dict = {}


class MemoryEvents(EventStore):
    """Every event kept in memory, so a cut stream can be replayed after its last id."""

    def __init__(self) -> None:
        self.events: list = []
        self.ids = itertools.count(1)

    async def store_event(self, stream_id, message):
        eid = str(next(self.ids))
        self.events.append((eid, stream_id, message))
        return eid

    async def replay_events_after(self, last_event_id, send_callback):
        stream = next((s for e, s, _ in self.events if e == last_event_id), None)
        if stream is None:
            return None
        after = False
        for eid, sid, msg in list(self.events):
            if eid == last_event_id:
                after = True
            elif after and sid == stream and msg is not None:
                from mcp.server.streamable_http import EventMessage

                await send_callback(EventMessage(msg, eid))
        return stream


def build(token: str) -> MCPServer:
    mcp = MCPServer("sdk-remote")

    @mcp.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @mcp.tool()
    def big(kb: int) -> str:
        """About kb KiB of text."""
        line = "0123456789abcdef" * 4 + "\n"
        return line * (kb * 1024 // len(line))

    @mcp.tool()
    def rows(n: int) -> str:
        """n JSON records."""
        return json.dumps([{"id": i, "name": f"row {i}", "score": i % 7} for i in range(n)])

    @mcp.tool()
    async def progress(steps: int, ctx: Context) -> str:
        """Report progress `steps` times."""
        for i in range(steps):
            await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        return "done"

    @mcp.tool()
    async def slow(seconds: float) -> str:
        """Sleep."""
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @mcp.tool()
    def count(key: str) -> str:
        """Count calls by key."""
        _counts[key] = _counts.get(key, 0) + 1
        return str(_counts[key])

    @mcp.tool()
    async def cut(ctx: Context) -> str:
        """Close the answer's stream once, then answer on the resumed one."""
        await ctx.report_progress(1, 2, "before the cut")
        await ctx.close_sse_stream()
        await anyio.sleep(0.2)
        return "resumed"

    @mcp.tool()
    def auth(ctx: Context) -> str:
        """Whether the request carried the expected bearer token."""
        got = (ctx.headers or {}).get("authorization", "")
        return "yes" if token and got == f"Bearer {token}" else "no"

    @mcp.tool()
    def era(ctx: Context) -> str:
        """The protocol version of this request."""
        return str(ctx.protocol_version)

    @mcp.tool()
    async def sleepy(key: str) -> str:
        """Sleep for a minute unless cancelled."""
        _counts["started-" + key] = 1
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            _counts["cancelled-" + key] = 1
            raise
        return "woke"

    @mcp.tool()
    def noted(key: str) -> str:
        """What sleepy(key) noted."""
        return f"started={_counts.get('started-' + key, 0)} cancelled={_counts.get('cancelled-' + key, 0)}"

    @mcp.tool()
    async def grow(name: str, ctx: Context) -> str:
        """Add a tool named `name`, and tell the subscribers that the tools changed."""
        mcp.add_tool(lambda: f"I am {name}", name=name, description=f"grown {name}")
        await ctx.notify_tools_changed()
        return f"added {name}"

    return mcp


class LegacyOnly:
    """ASGI middleware: no session and not initialize -> 400 Server not initialized."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        body = b"".join(chunks)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        try:
            method = json.loads(body).get("method")
        except ValueError:
            method = None
        if "mcp-session-id" not in headers and method != "initialize":
            out = json.dumps({"jsonrpc": "2.0", "error": {"code": -32000, "message": "Bad Request: Server not initialized"},
                              "id": None}).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})
            return await send({"type": "http.response.body", "body": out})
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transport", default="streamable-http")
    ap.add_argument("--json-response", action="store_true")
    ap.add_argument("--stateless", action="store_true")
    ap.add_argument("--token", default="")
    ap.add_argument("--legacy", action="store_true")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    mcp = build(a.token)
    if a.transport == "sse":
        mcp.run("sse", host="127.0.0.1", port=a.port)
    elif a.transport == "stdio":
        mcp.run("stdio")
    elif a.legacy:
        import uvicorn

        app = mcp.streamable_http_app(json_response=a.json_response, event_store=MemoryEvents(), retry_interval=100)
        uvicorn.run(LegacyOnly(app), host="127.0.0.1", port=a.port, log_level="warning")
    else:
        mcp.run("streamable-http", host="127.0.0.1", port=a.port, json_response=a.json_response,
                stateless_http=a.stateless, event_store=None if a.stateless else MemoryEvents(),
                retry_interval=100)


if __name__ == "__main__":
    main()
