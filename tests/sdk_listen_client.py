"""The official MCP Python SDK (mcp 2.3.0) listening over Streamable HTTP, for
tests/test_serve_streams.py: run with the interop venv's python (tests/realservers/install.sh).

    python sdk_listen_client.py URL

mcp.Client(URL) in the 2026-07-28 era opens `client.listen(tools_list_changed=True)`, prints
one JSON line with what the acknowledgment honoured, then calls up__change_tools and waits
(bounded) for the ToolsListChanged event on the stream; prints a second JSON line with it and
the tool list asked for after it.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def authorized():
    """An HTTP client that sends the server's bearer token (env SERVE_TOKEN)."""
    return create_mcp_http_client(headers={"Authorization": "Bearer " + os.environ["SERVE_TOKEN"]})


async def main(url: str) -> None:
    async with Client(streamable_http_client(url, http_client=authorized()),
                      read_timeout_seconds=60) as client:
        version = getattr(client.session, "protocol_version", None)
        async with client.listen(tools_list_changed=True) as sub:
            honored = sub.honored.model_dump(by_alias=True, exclude_none=True)
            print(json.dumps({"version": str(version), "honored": honored}), flush=True)
            await client.call_tool("up__change_tools", {})
            with anyio.fail_after(60):
                event = await sub.__anext__()
            tools = await client.list_tools()
    print(json.dumps({"event": type(event).__name__, "tools": [t.name for t in tools.tools]}))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
