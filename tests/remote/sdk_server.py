#!/usr/bin/env python3
"""A remote MCP server built on the official Python SDK (mcp 2.x, MCPServer), served over
Streamable HTTP or the older HTTP+SSE transport on 127.0.0.1, for tests/test_remote.py.

Run with the SDK's venv python:  sdk_server.py --transport streamable-http|sse --port N
  [--json-response] [--stateless] [--token T]

Tools: echo(text); big(kb) -> about kb KiB of text; rows(n) -> a JSON array of n records;
progress(steps) -> reports `steps` progress notifications, then "done"; slow(seconds) -> sleeps;
count(key) -> how many times count was called with `key` in this process (a replay shows);
cut() -> sends one progress notification, closes its SSE stream (the client must resume with
Last-Event-ID; needs the event store, on by default for streamable-http), then answers "resumed";
auth() -> "yes" when the request carried "Authorization: Bearer <token>", else "no".
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

    return mcp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transport", default="streamable-http")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--json-response", action="store_true")
    ap.add_argument("--stateless", action="store_true")
    ap.add_argument("--token", default="")
    a = ap.parse_args()
    mcp = build(a.token)
    if a.transport == "sse":
        mcp.run("sse", host="127.0.0.1", port=a.port)
    else:
        mcp.run("streamable-http", host="127.0.0.1", port=a.port, json_response=a.json_response,
                stateless_http=a.stateless, event_store=None if a.stateless else MemoryEvents(),
                retry_interval=100)


if __name__ == "__main__":
    main()
