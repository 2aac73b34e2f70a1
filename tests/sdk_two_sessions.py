"""Two sessions of the official MCP Python SDK (mcp 2.3.0) at once against one `abstract --serve`
over the real server-everything, for tests/test_serve_clients.py: run with the realservers venv's
python (tests/realservers/install.sh).

    SERVE_TOKEN=... python sdk_two_sessions.py URL

Session B keeps a long call in flight while A calls everything's elicitation tool; then B's call
is cancelled (the SDK sends notifications/cancelled) while A's long call goes on; then B asks
while A's call is in flight; then B's session is ended with a DELETE of its own while B and A
both have a call in flight. Prints one JSON line of what each session saw; the test asserts.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any, Dict, List, Optional

import anyio
import httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

LONG_OP = "everything__trigger-long-running-operation"
ELICIT = "everything__trigger-elicitation-request"
BOUND = 120.0  # every phase ends within this many seconds, or the script fails


def texts(res: types.CallToolResult) -> List[str]:
    return [c.text for c in res.content if getattr(c, "type", "") == "text"]


class Peer:
    """One client: its own HTTP client (the token; it notes the session id Abstract gave it),
    its ClientSession, and what its elicitation callback was asked."""

    def __init__(self, name: str, url: str) -> None:
        self.name, self.url = name, url
        self.asked: List[str] = []
        self.sid = ""
        self.session: Optional[ClientSession] = None

    async def _note_sid(self, response: httpx2.Response) -> None:
        self.sid = response.headers.get("mcp-session-id") or self.sid

    async def _elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada " + self.name})

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        client = httpx2.AsyncClient(
            headers={"Authorization": "Bearer " + os.environ["SERVE_TOKEN"]},
            timeout=httpx2.Timeout(30, read=300), event_hooks={"response": [self._note_sid]})
        await stack.enter_async_context(client)
        streams = await stack.enter_async_context(streamable_http_client(self.url,
                                                                         http_client=client))
        self.session = await stack.enter_async_context(
            ClientSession(streams[0], streams[1], elicitation_callback=self._elicit))
        await self.session.initialize()

    async def call(self, tool: str, args: Dict[str, Any]) -> List[str]:
        assert self.session is not None
        return texts(await self.session.call_tool(tool, args))


class Call:
    """A call run as a task: its progress, an event at the first one, its outcome (the texts,
    or the error's message, or "cancelled"), an event at its end, and a scope to cancel it."""

    def __init__(self, peer: Peer, tool: str, args: Dict[str, Any]) -> None:
        self.peer, self.tool, self.args = peer, tool, args
        self.progress: List[float] = []
        self.started, self.done = anyio.Event(), anyio.Event()
        self.outcome: Any = None
        self.scope = anyio.CancelScope()

    async def _progress(self, value: float, total: Any, message: Any) -> None:
        self.progress.append(value)
        self.started.set()

    async def run(self) -> None:
        assert self.peer.session is not None
        try:
            with self.scope:
                res = await self.peer.session.call_tool(self.tool, self.args,
                                                        progress_callback=self._progress)
                self.outcome = texts(res)
            if self.scope.cancelled_caught:
                self.outcome = "cancelled"
        except Exception as exc:  # the error the SDK raised for the call (the test reads it)
            self.outcome = "error: " + str(exc)
        finally:
            self.done.set()


async def delete(peer: Peer) -> int:
    """End the peer's session as a client does: DELETE /mcp with its session id."""
    async with httpx2.AsyncClient(timeout=30) as client:
        res = await client.delete(peer.url, headers={
            "Authorization": "Bearer " + os.environ["SERVE_TOKEN"], "Mcp-Session-Id": peer.sid})
    return res.status_code


async def run(url: str) -> dict:
    a, b = Peer("A", url), Peer("B", url)
    out: dict = {}
    async with contextlib.AsyncExitStack() as a_stack:
        await a.open(a_stack)
        async with contextlib.AsyncExitStack() as b_stack:
            await b.open(b_stack)
            out["sids_differ"] = bool(a.sid and b.sid and a.sid != b.sid)
            async with anyio.create_task_group() as tg:
                await questions_and_cancels(a, b, tg, out)
                await ending(a, b, tg, out)
    return out


async def started(peer: Peer, tg: Any, duration: int, steps: int) -> Call:
    """A long operation of the peer's, once its first progress came (it is in flight)."""
    call = Call(peer, LONG_OP, {"duration": duration, "steps": steps})
    tg.start_soon(call.run)
    await call.started.wait()
    return call


async def questions_and_cancels(a: Peer, b: Peer, tg: Any, out: dict) -> None:
    with anyio.fail_after(BOUND):  # 1: A's question while B has a call in flight
        b_long = await started(b, tg, 120, 120)
        out["a_elicit"] = await a.call(ELICIT, {})
        out["asked_after_a"] = {"A": list(a.asked), "B": list(b.asked)}
    with anyio.fail_after(BOUND):  # 2: B's call cancelled while A's goes on
        a_long = await started(a, tg, 6, 3)
        out["a_progress_at_cancel"] = len(a_long.progress)
        b_long.scope.cancel()
        await b_long.done.wait()
        out["b_cancelled"] = b_long.outcome
        out["b_echo_after_cancel"] = await b.call("everything__echo", {"message": "B on"})
        await a_long.done.wait()
        out["a_long"], out["a_progress"] = a_long.outcome, a_long.progress
    with anyio.fail_after(BOUND):  # 3: B's question while A has a call in flight
        a_long = await started(a, tg, 6, 3)
        out["b_elicit"] = await b.call(ELICIT, {})
        out["asked_after_b"] = {"A": list(a.asked), "B": list(b.asked)}
        await a_long.done.wait()
        out["a_long_during_b_elicit"] = a_long.outcome


async def ending(a: Peer, b: Peer, tg: Any, out: dict) -> None:
    with anyio.fail_after(BOUND):  # 4: B's session ended while both have a call in flight
        a_long, b_long = await started(a, tg, 6, 3), await started(b, tg, 120, 120)
        out["a_progress_at_delete"] = len(a_long.progress)
        out["delete_status"] = await delete(b)
        await b_long.done.wait()
        out["b_after_delete"] = b_long.outcome
        await a_long.done.wait()
        out["a_long_after_delete"], out["a_progress_2"] = a_long.outcome, a_long.progress
        out["a_echo_after_delete"] = await a.call("everything__echo", {"message": "A on"})
        try:
            out["b_echo_after_delete"] = await b.call("everything__echo", {"message": "B?"})
        except Exception as exc:  # the session is gone: what the SDK says
            out["b_echo_after_delete"] = "error: " + str(exc)


if __name__ == "__main__":
    print(json.dumps(anyio.run(run, sys.argv[1])))
