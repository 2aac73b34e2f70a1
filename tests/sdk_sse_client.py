"""The official MCP Python SDK (mcp 2.3.0) over the 2024-11-05 HTTP+SSE transport
(mcp.client.sse.sse_client), for tests/test_serve_streams.py: run with the interop venv's python
(tests/realservers/install.sh).

    python sdk_sse_client.py URL

URL is Abstract's /sse. Initializes, lists the tools, calls up__progress with 2 steps (progress
reported); prints one JSON line: the protocol version, the tool names, the call's texts, the
progress seen.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.sse import sse_client

PROGRESS: list = []


async def progress(value: float, total, message) -> None:
    PROGRESS.append(value)


async def main(url: str) -> None:
    headers = {"Authorization": "Bearer " + os.environ["SERVE_TOKEN"]}
    async with sse_client(url, headers=headers) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            init = await session.initialize()
            tools = await session.list_tools()
            res = await session.call_tool("up__progress", {"steps": 2}, progress_callback=progress)
    print(json.dumps({"version": str(init.protocol_version), "tools": [t.name for t in tools.tools],
                      "texts": [c.text for c in res.content if getattr(c, "type", "") == "text"],
                      "progress": PROGRESS}))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
