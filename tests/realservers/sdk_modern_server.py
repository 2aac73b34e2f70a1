"""An MCP server built on the official Python SDK (mcp 2.3.0's MCPServer) whose tool `signup`
asks the user's name the 2026-07-28 way: an input_required result with an elicitation and the
requestState "round-1" (which the SDK seals with its own HMAC before sending), then, on the
retry, "hello <answer> state=<the requestState it got back, unsealed>". Run it behind
modern_only.py so that it speaks 2026-07-28 to Abstract.
"""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ElicitRequest, ElicitRequestFormParams, InputRequiredResult, TextContent

mcp = MCPServer("sdk-asker")


@mcp.tool()
async def signup(ctx: Context) -> CallToolResult | InputRequiredResult:
    """Asks the user's name (2026-07-28 input_required), then greets them."""
    answers = ctx.input_responses or {}
    if "name" not in answers:
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        ask = ElicitRequest(params=ElicitRequestFormParams(message="Your name?", requested_schema=schema))
        return InputRequiredResult(input_requests={"name": ask}, request_state="round-1")
    answer = answers["name"]
    content = answer.get("content") if isinstance(answer, dict) else getattr(answer, "content", None)
    return CallToolResult(content=[TextContent(type="text", text=f"hello {content['name']} state={ctx.request_state}")])


if __name__ == "__main__":
    mcp.run()
