"""The official MCP Python SDK's mcp.Client (mcp 2.3.0) as a 2026-07-28 client, with sampling and
elicitation callbacks, driving abstract.py over stdio: run with the interop venv's python.

    python sdk_modern_client.py TOOL ARGS_JSON -- python abstract.py [flags] DIR

The client probes server/discover (mode "auto") and speaks 2026-07-28 when Abstract offers it;
its call_tool answers an input_required result through the callbacks and retries (the SDK's own
multi round-trip driver). Prints one JSON line: the protocol version, the result's texts, and
what each callback was asked (the callbacks of sdk_asking_client.py).
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from sdk_asking_client import ASKED, elicitation, sampling  # (the same callbacks, this folder)


async def main(tool: str, args: dict, cmd: list) -> dict:
    server = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    async with Client(server, read_timeout_seconds=60, sampling_callback=sampling,
                      elicitation_callback=elicitation) as client:
        res = await client.call_tool(tool, args)
        version = client.session.protocol_version if hasattr(client.session, "protocol_version") else None
    texts = [c.text for c in res.content if getattr(c, "type", "") == "text"]
    return {"version": str(version), "isError": bool(res.is_error), "texts": texts, "asked": ASKED}


if __name__ == "__main__":
    split = sys.argv.index("--")
    print(json.dumps(anyio.run(main, sys.argv[1], json.loads(sys.argv[2]), sys.argv[split + 1:])))
