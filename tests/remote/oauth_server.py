"""An OAuth-protected MCP server on 127.0.0.1 built from the official Python SDK's auth support
(`mcp` 2.3.0: MCPServer with an OAuthAuthorizationServerProvider, the SDK's own /authorize,
/token, /register, /revoke and metadata routes, its bearer middleware with RFC 8707 resource
checking). Run it with the SDK venv's python, not with the python that runs the tests:

    /tmp/abstract-interop/venv/bin/python tests/remote/oauth_server.py [options]

It binds a free port and prints one line `READY http://127.0.0.1:PORT` when it accepts
connections; the MCP endpoint is /mcp. The authorization step needs no person: /authorize
approves at once and redirects to the client's redirect_uri with the code (what a browser would
follow). Options make it misbehave the ways the tests need:

    --token-ttl S        access tokens live S seconds (default 3600)
    --no-s256            its authorization server metadata lists no code_challenge_methods_supported
    --tamper-state       the redirect carries a state that is not the one the client sent
    --iss / --wrong-iss  the redirect carries iss (RFC 9207): the right issuer / another one
    --oidc-only          metadata only at /.well-known/openid-configuration (no RFC 8414 URL)
    --no-resource-metadata  401s carry no resource_metadata (clients probe the well-known URLs)
    --client-id ID       a pre-registered public client; loopback redirects on any port (RFC 8252)
    --no-registration    no dynamic client registration endpoint
    --step-up            tools/call of `admin_echo` needs scope `admin` (403 insufficient_scope)

Test-only routes, no auth: POST /test/revoke-all forgets every token; GET /test/stats says
what happened (registrations, authorizations, grants by type, the `resource` of each request).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import socket
import sys
import time
import urllib.parse
from typing import Any, Dict, List, Optional

import uvicorn
from pydantic import AnyUrl
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import InvalidRedirectUriError, OAuthClientInformationFull, OAuthToken

SCOPE = "mcp"


class LoopbackClient(OAuthClientInformationFull):
    """A registered client whose loopback redirect URIs match on any port (RFC 8252 7.3)."""

    def validate_redirect_uri(self, redirect_uri: Optional[AnyUrl]) -> AnyUrl:
        if redirect_uri is not None and redirect_uri.host == "127.0.0.1":
            for known in self.redirect_uris or []:
                if known.host == "127.0.0.1" and known.path == redirect_uri.path:
                    return redirect_uri
        return super().validate_redirect_uri(redirect_uri)


class Provider:
    """In-memory authorization server: clients, codes, access and refresh tokens."""

    def __init__(self, opts: argparse.Namespace, issuer: str) -> None:
        self.opts, self.issuer = opts, issuer
        self.clients: Dict[str, OAuthClientInformationFull] = {}
        self.codes: Dict[str, AuthorizationCode] = {}
        self.access: Dict[str, AccessToken] = {}
        self.refresh: Dict[str, RefreshToken] = {}
        self.stats: Dict[str, Any] = {"registrations": 0, "authorizations": 0, "grants": [],
                                      "authorize_resources": [], "authorize_scopes": [],
                                      "mcp_requests": 0, "unauthorized": 0, "revocations": 0,
                                      "authorize_clients": [], "metadata_documents": []}
        if opts.client_id:
            self.clients[opts.client_id] = LoopbackClient(
                client_id=opts.client_id, redirect_uris=[AnyUrl("http://127.0.0.1/callback")],
                token_endpoint_auth_method=opts.client_auth if opts.client_secret else "none",
                client_secret=opts.client_secret or None, grant_types=["authorization_code", "refresh_token"],
                response_types=["code"], scope=f"{SCOPE} admin")

    async def get_client(self, client_id: str) -> Optional[OAuthClientInformationFull]:
        if self.opts.cimd and client_id.startswith("https://") and client_id not in self.clients:
            # a client ID metadata document, as if fetched from that URL (the test is offline)
            self.stats["metadata_documents"].append(client_id)
            self.clients[client_id] = LoopbackClient(
                client_id=client_id, redirect_uris=[AnyUrl("http://127.0.0.1/callback")],
                token_endpoint_auth_method="none", grant_types=["authorization_code", "refresh_token"],
                response_types=["code"], scope=f"{SCOPE} admin")
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.stats["registrations"] += 1
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        self.stats["authorizations"] += 1
        self.stats["authorize_resources"].append(params.resource)
        self.stats["authorize_scopes"].append(params.scopes)
        self.stats["authorize_clients"].append(client.client_id)
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [SCOPE], expires_at=time.time() + 300,
            client_id=client.client_id, code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource)
        state = params.state
        if self.opts.tamper_state:
            state = "tampered-" + secrets.token_urlsafe(8)
        extra = {}
        if self.opts.iss or self.opts.wrong_iss:
            extra["iss"] = "http://127.0.0.1:1/not-the-issuer" if self.opts.wrong_iss else self.issuer
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=state, **extra)

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> Optional[AuthorizationCode]:
        code = self.codes.get(authorization_code)
        return code if code and code.client_id == client.client_id else None

    def _issue(self, client_id: str, scopes: List[str], resource: Optional[str]) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        ttl = self.opts.token_ttl
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=int(time.time() + ttl), resource=resource)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes,
                                             resource=resource)
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=int(ttl),
                          refresh_token=refresh, scope=" ".join(scopes))

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(client.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull,
                                 refresh_token: str) -> Optional[RefreshToken]:
        token = self.refresh.get(refresh_token)
        return token if token and token.client_id == client.client_id else None

    async def exchange_refresh_token(self, client: OAuthClientInformationFull,
                                     refresh_token: RefreshToken, scopes: List[str]) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)  # rotation: the old one is spent
        return self._issue(client.client_id, scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> Optional[AccessToken]:
        found = self.access.get(token)
        if found and found.expires_at and found.expires_at < time.time():
            return None
        return found

    async def revoke_token(self, token: Any) -> None:
        self.stats["revocations"] += 1
        self.access.pop(getattr(token, "token", ""), None)
        self.refresh.pop(getattr(token, "token", ""), None)


def build(opts: argparse.Namespace, base: str) -> Any:
    """The Starlette app, wrapped by the misbehaviours the options ask for."""
    provider = Provider(opts, base)
    auth = AuthSettings(
        issuer_url=base, resource_server_url=f"{base}/mcp", validate_token_resource=True,
        required_scopes=[SCOPE],
        client_registration_options=ClientRegistrationOptions(
            enabled=not opts.no_registration, valid_scopes=[SCOPE, "admin"], default_scopes=[SCOPE]),
        revocation_options=RevocationOptions(enabled=True))
    server = MCPServer("oauth-test", auth_server_provider=provider, auth=auth)

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @server.tool()
    def admin_echo(text: str) -> str:
        """Echo the text back; with --step-up it needs scope admin."""
        return "admin: " + text

    @server.custom_route("/test/revoke-all", methods=["POST"])
    async def revoke_all(request: Request) -> Response:
        provider.access.clear()
        provider.refresh.clear()
        return JSONResponse({"ok": True})

    @server.custom_route("/test/stats", methods=["GET"])
    async def stats(request: Request) -> Response:
        return JSONResponse(provider.stats)

    app = server.streamable_http_app()
    return Wrapper(app, opts, provider, base)


class Wrapper:
    """ASGI around the SDK app: records token requests, and bends what the options ask for."""

    def __init__(self, app: Any, opts: argparse.Namespace, provider: Provider, base: str) -> None:
        self.app, self.opts, self.provider, self.base = app, opts, provider, base

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"], scope["method"]
        if path.startswith("/.well-known/oauth-protected-resource") and self.opts.no_prm:
            return await self._json(send, 404, {"error": "not found"})  # a 2025-03-26 server
        if path.startswith("/.well-known/") and self.opts.no_as_metadata:
            return await self._json(send, 404, {"error": "not found"})
        if path == "/.well-known/oauth-authorization-server" and self.opts.oidc_only:
            return await self._json(send, 404, {"error": "not found"})
        if path == "/.well-known/openid-configuration" and self.opts.oidc_only:
            scope = dict(scope, path="/.well-known/oauth-authorization-server", raw_path=None)
            return await self.app(scope, receive, self._metadata_send(send))
        if path == "/.well-known/oauth-authorization-server":
            return await self.app(scope, receive, self._metadata_send(send))
        if path == "/token" and method == "POST":
            body = await _read_body(receive)
            form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace")))
            self.provider.stats["grants"].append({"grant_type": form.get("grant_type"),
                                                  "resource": form.get("resource")})
            return await self.app(scope, _replay(body, receive), send)
        if path.startswith("/mcp"):
            self.provider.stats["mcp_requests"] += 1
            if self.opts.step_up and method == "POST":
                body = await _read_body(receive)
                if await self._needs_admin(scope, body):
                    return await self._json(send, 403, {"error": "insufficient_scope"}, {
                        "www-authenticate": 'Bearer error="insufficient_scope", scope="mcp admin", '
                        f'resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"'})
                receive = _replay(body, receive)
            return await self.app(scope, receive, self._challenge_send(send))
        return await self.app(scope, receive, send)

    async def _needs_admin(self, scope: dict, body: bytes) -> bool:
        try:
            msg = json.loads(body)
        except ValueError:
            return False
        if not (isinstance(msg, dict) and msg.get("method") == "tools/call"
                and (msg.get("params") or {}).get("name") == "admin_echo"):
            return False
        auth = dict(scope["headers"]).get(b"authorization", b"").decode()
        token = await self.provider.load_access_token(auth[7:]) if auth.startswith("Bearer ") else None
        return token is not None and "admin" not in token.scopes

    def _metadata_send(self, send: Any) -> Any:
        """Drop S256 from the metadata (--no-s256); keep it otherwise."""
        state: Dict[str, Any] = {}

        async def wrapped(message: dict) -> None:
            if message["type"] == "http.response.start":
                state["start"] = message
                return
            if message["type"] == "http.response.body":
                state.setdefault("body", b"")
                state["body"] += message.get("body", b"")
                if message.get("more_body"):
                    return
                body = state["body"]
                if (self.opts.no_s256 or self.opts.client_secret or self.opts.cimd) and \
                        state["start"]["status"] == 200:
                    doc = json.loads(body)
                    if self.opts.cimd:
                        doc["client_id_metadata_document_supported"] = True
                    if self.opts.no_s256:
                        doc.pop("code_challenge_methods_supported", None)
                    if self.opts.client_secret:  # the pre-registered client's method only
                        doc["token_endpoint_auth_methods_supported"] = [self.opts.client_auth]
                    body = json.dumps(doc).encode()
                headers = [(k, v) for k, v in state["start"]["headers"] if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
                await send(dict(state["start"], headers=headers))
                await send({"type": "http.response.body", "body": body})
                return
            await send(message)

        return wrapped

    def _challenge_send(self, send: Any) -> Any:
        """Count 401s; without resource_metadata in them when --no-resource-metadata."""

        async def wrapped(message: dict) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                self.provider.stats["unauthorized"] += 1
                if self.opts.no_resource_metadata:
                    headers = [(k, b'Bearer error="invalid_token"' if k.lower() == b"www-authenticate" else v)
                               for k, v in message["headers"]]
                    message = dict(message, headers=headers)
            await send(message)

        return wrapped

    async def _json(self, send: Any, status: int, doc: dict, extra: Optional[dict] = None) -> None:
        body = json.dumps(doc).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def _replay(body: bytes, receive: Any) -> Any:
    """The body already read, then whatever the connection says next (a disconnect)."""
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--token-ttl", type=float, default=3600)
    for flag in ("no-s256", "tamper-state", "iss", "wrong-iss", "oidc-only", "no-resource-metadata",
                 "no-registration", "step-up", "no-prm", "no-as-metadata", "cimd"):
        parser.add_argument(f"--{flag}", action="store_true")
    parser.add_argument("--client-id", default="")
    parser.add_argument("--client-secret", default="")  # the pre-registered client's, if any
    parser.add_argument("--client-auth", default="client_secret_basic")  # its token auth method
    opts = parser.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = build(opts, base)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        print(f"READY {base}", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
