"""Run with the realservers venv's Python: the official MCP Python SDK's OAuth client
(OAuthClientProvider) logs in to the server at argv[1] headless: its redirect handler opens
the approval page and sends the form with the token in argv[2]; its callback handler hands the
redirect's code, state and iss back. Then it calls /mcp, refreshes, and prints a JSON report.
With argv[3] "mcp" the calls are MCP: initialize opens a session, and after the refresh a ping
on that session (its status is "second")."""

import asyncio
import json
import re
import sys
import urllib.parse

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (AuthorizationCodeResult, OAuthClientInformationFull,
                             OAuthClientMetadata, OAuthToken)

BASE, TOKEN = sys.argv[1], sys.argv[2]
MCP = sys.argv[3:] == ["mcp"]
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "sdk-oauth-test", "version": "0"}}}
ACCEPT = {"Accept": "application/json, text/event-stream"}
REDIRECT = "http://127.0.0.1:33419/callback"


class Memory:
    def __init__(self) -> None:
        self.tokens = None
        self.client = None

    async def get_tokens(self) -> "OAuthToken | None":
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> "OAuthClientInformationFull | None":
        return self.client

    async def set_client_info(self, info: OAuthClientInformationFull) -> None:
        self.client = info


async def main() -> None:
    landed = {}

    async def redirect_handler(url: str) -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            page = (await http.get(url)).text
            ticket = re.search(r'name="ticket" value="([^"]+)"', page).group(1)
            sent = await http.post(BASE + "/authorize", data={"ticket": ticket, "token": TOKEN,
                                                              "decision": "allow"})
        assert sent.status_code == 302, sent.text
        landed.update(urllib.parse.parse_qsl(urllib.parse.urlsplit(
            sent.headers["location"]).query))

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=landed["code"], state=landed.get("state"),
                                       iss=landed.get("iss"))

    storage = Memory()
    provider = OAuthClientProvider(
        BASE + "/mcp", OAuthClientMetadata(redirect_uris=[REDIRECT], client_name="SDK test",
                                           grant_types=["authorization_code", "refresh_token"],
                                           response_types=["code"],
                                           token_endpoint_auth_method="none"),
        storage, redirect_handler=redirect_handler, callback_handler=callback_handler)
    async with httpx2.AsyncClient(auth=provider, timeout=30) as http:
        if MCP:
            first = await http.post(BASE + "/mcp", json=INIT, headers=ACCEPT)
            sid = {"Mcp-Session-Id": first.headers.get("mcp-session-id", "")}
        else:
            first = await http.get(BASE + "/mcp")
        access = storage.tokens.access_token
        provider.context.token_expiry_time = 1.0  # expired (1970): the next call refreshes
        if MCP:
            second = await http.post(BASE + "/mcp", json={"jsonrpc": "2.0", "id": 2,
                                                          "method": "ping"},
                                     headers=dict(ACCEPT, **sid))
        else:
            second = await http.get(BASE + "/mcp")
    print(json.dumps({"first": first.status_code, "second": second.status_code,
                      "refreshed": storage.tokens.access_token != access,
                      "iss": landed.get("iss"), "client": storage.client.client_id}))


asyncio.run(main())
