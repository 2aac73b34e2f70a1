"""The official MCP Python SDK (mcp 2.3.0) over Streamable HTTP, for tests/test_serve.py: run with
the interop venv's python (tests/realservers/install.sh).

    python sdk_http_client.py URL MODE TOOL ARGS_JSON

MODE "session": ClientSession over streamable_http_client (the 2025-11-25 handshake, a session
id, a GET stream), with progress and elicitation callbacks; "modern": mcp.Client(URL) (probes
server/discover, then 2026-07-28 stateless requests). Prints one JSON line: the protocol version,
the tool names, the call's texts, the progress seen and what the callback was asked.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client, ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ASKED: list = []
PROGRESS: list = []


def authorized():
    """An HTTP client that sends the server's bearer token (env SERVE_TOKEN)."""
    return create_mcp_http_client(headers={"Authorization": "Bearer " + os.environ["SERVE_TOKEN"]})


async def elicitation(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    ASKED.append(params.message)
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def progress(value: float, total, message) -> None:
    PROGRESS.append(value)


async def session_mode(url: str, tool: str, args: dict) -> dict:
    async with streamable_http_client(url, http_client=authorized()) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, elicitation_callback=elicitation) as session:
            init = await session.initialize()
            tools = await session.list_tools()
            res = await session.call_tool(tool, args, progress_callback=progress)
    return {"version": str(init.protocol_version), "tools": [t.name for t in tools.tools],
            "texts": [c.text for c in res.content if getattr(c, "type", "") == "text"],
            "progress": PROGRESS, "asked": ASKED}


async def modern_mode(url: str, tool: str, args: dict) -> dict:
    async with Client(streamable_http_client(url, http_client=authorized()),
                      read_timeout_seconds=60) as client:
        tools = await client.list_tools()
        res = await client.call_tool(tool, args)
        version = getattr(client.session, "protocol_version", None)
    return {"version": str(version), "tools": [t.name for t in tools.tools],
            "texts": [c.text for c in res.content if getattr(c, "type", "") == "text"]}


if __name__ == "__main__":
    url, mode, tool, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    run = session_mode if mode == "session" else modern_mode
    print(json.dumps(anyio.run(run, url, tool, args)))
