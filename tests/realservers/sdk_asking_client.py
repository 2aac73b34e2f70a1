"""The official MCP Python SDK client (mcp 2.3.0) with sampling and elicitation callbacks,
driving abstract.py over stdio: run with the interop venv's python by test_realservers.py.

    python sdk_asking_client.py TOOL ARGS_JSON -- python abstract.py [flags] DIR

Calls TOOL with ARGS_JSON and prints one JSON line: the result's texts and what each callback
was asked. The sampling callback answers "sampled: <prompt>"; the elicitation callback accepts
a form with name "Ada" and a URL request with no content.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client

ASKED: list = []


async def sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    prompt = params.messages[0].content.text
    ASKED.append({"sampling": prompt})
    return types.CreateMessageResult(role="assistant", model="sdk-test",
                                     content=types.TextContent(type="text", text=f"sampled: {prompt}"))


async def elicitation(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    mode = getattr(params, "mode", None) or "form"
    ASKED.append({"elicitation": mode, "message": params.message})
    if mode == "url":
        return types.ElicitResult(action="accept")
    return types.ElicitResult(action="accept", content={"name": "Ada", "check": True})


async def main(tool: str, args: dict, cmd: list) -> dict:
    server = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=60, sampling_callback=sampling,
                                 elicitation_callback=elicitation) as session:
            await session.initialize()
            res = await session.call_tool(tool, args)
    texts = [c.text for c in res.content if getattr(c, "type", "") == "text"]
    return {"isError": bool(res.is_error), "texts": texts, "asked": ASKED}


if __name__ == "__main__":
    split = sys.argv.index("--")
    print(json.dumps(anyio.run(main, sys.argv[1], json.loads(sys.argv[2]), sys.argv[split + 1:])))
