"""abstract.Connection in-process over os.pipe pairs: framing, errors, ids, concurrency, cancel, EOF."""

from __future__ import annotations

import json
import queue
import threading

import pytest

import abstract
from conftest import pipe_pair

WAIT = 5


class Raw:
    """The far end of a Connection: writes raw lines, reads raw lines on a thread."""

    def __init__(self, rfile, wfile) -> None:
        self.rfile, self.wfile = rfile, wfile
        self.lines: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in iter(self.rfile.readline, b""):
            self.lines.put(line)

    def write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def send(self, msg) -> None:
        self.write(json.dumps(msg).encode() + b"\n")

    def line(self, timeout: float = WAIT) -> bytes:
        return self.lines.get(timeout=timeout)

    def msg(self, timeout: float = WAIT) -> dict:
        return json.loads(self.line(timeout))

    def nothing_queued(self) -> bool:
        return self.lines.empty()


class Pair:
    """A Connection and the Raw peer at its other end, torn down in EOF order."""

    def __init__(self, **kw) -> None:
        a_r, a_w = pipe_pair()  # raw -> conn
        b_r, b_w = pipe_pair()  # conn -> raw
        self.files = [a_r, a_w, b_r, b_w]
        self.conn = abstract.Connection(a_r, b_w, **kw).start()
        self.raw = Raw(b_r, a_w)

    def eof(self) -> None:
        """The raw end stops writing: the connection's reader sees EOF."""
        self.files[1].close()

    def close(self) -> None:
        a_r, a_w, b_r, b_w = self.files
        a_w.close()  # EOF for the connection's reader (a no-op after eof())
        assert self.conn.closed.wait(WAIT)
        b_w.close()  # EOF for the raw reader
        self.raw.thread.join(WAIT)
        a_r.close()
        b_r.close()


def _echo(req):
    return {"echo": req.params}


def _boom(req):
    raise ValueError("boom in handler")


@pytest.fixture
def server():
    """A Connection serving requests on a pool, as Abstract's client side does."""
    gates = {"release": threading.Event(), "started": threading.Event(), "finished": threading.Event()}

    def slow(req):
        gates["started"].set()
        gates["release"].wait(WAIT)
        return {"slow": True}

    def waits_for_cancel(req):
        gates["started"].set()
        req.cancelled.wait(WAIT)
        gates["finished"].set()
        return {"late": True}

    pair = Pair(name="test", pool=abstract._Pool(8),
                requests={"echo": _echo, "boom": _boom, "slow": slow, "wait": waits_for_cancel})
    pair.gates = gates
    yield pair
    gates["release"].set()
    pair.close()


@pytest.fixture
def client():
    """A Connection used to send requests, as Abstract's upstream side does."""
    pair = Pair(name="up", strict=False)
    yield pair
    pair.close()


# -- framing


def test_frame_is_one_line_with_unicode_kept_and_newlines_escaped():
    data = b"".join(abstract._frame({"text": "héllo\nwörld ✓\r\u2028"}))
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    assert "héllo".encode() in data and "✓".encode() in data
    assert b"\\n" in data and b"\\r" in data
    assert json.loads(data) == {"text": "héllo\nwörld ✓\r\u2028"}


def test_response_is_one_line_and_keeps_unicode(server):
    server.raw.send({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"t": "zürich\nline2 ✓"}})
    line = server.raw.line()
    assert line.count(b"\n") == 1 and "zürich".encode() in line and b"\\n" in line
    assert json.loads(line) == {"jsonrpc": "2.0", "id": 1, "result": {"echo": {"t": "zürich\nline2 ✓"}}}


def test_blank_lines_are_ignored(server):
    server.raw.write(b"\n   \n")
    server.raw.send({"jsonrpc": "2.0", "id": 2, "method": "echo"})
    assert server.raw.msg() == {"jsonrpc": "2.0", "id": 2, "result": {"echo": None}}


# -- errors


def test_bad_json_is_parse_error_with_null_id(server):
    server.raw.write(b'{"jsonrpc": "2.0", "id": 3, "method": \n')
    msg = server.raw.msg()
    assert msg["id"] is None and msg["error"]["code"] == abstract._PARSE_ERROR


@pytest.mark.parametrize("payload", [
    [{"jsonrpc": "2.0", "id": 1, "method": "echo"}],  # a batch
    [],
    "just a string",
    42,
])
def test_non_object_message_is_invalid_request(server, payload):
    server.raw.send(payload)
    msg = server.raw.msg()
    assert msg["id"] is None and msg["error"]["code"] == abstract._INVALID_REQUEST


@pytest.mark.parametrize("msg, expected_id", [
    ({"jsonrpc": "2.0", "id": 5}, 5),  # no method
    ({"jsonrpc": "2.0", "id": 6, "method": 17}, 6),  # method not a string
    ({"id": 7, "method": "echo"}, 7),  # no jsonrpc member
    ({"jsonrpc": "1.0", "id": 8, "method": "echo"}, 8),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "echo"}, None),
    ({"jsonrpc": "2.0", "id": True, "method": "echo"}, None),
    ({"jsonrpc": "2.0", "id": None, "method": "echo"}, None),
    ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "echo"}, None),
    ({"jsonrpc": "2.0", "id": [1], "method": "echo"}, None),
])
def test_malformed_request_is_invalid_request(server, msg, expected_id):
    server.raw.send(msg)
    got = server.raw.msg()
    assert got["error"]["code"] == abstract._INVALID_REQUEST
    assert got["id"] == expected_id and type(got["id"]) is type(expected_id)


def test_unknown_method_is_method_not_found(server):
    server.raw.send({"jsonrpc": "2.0", "id": "u1", "method": "no/such"})
    msg = server.raw.msg()
    assert msg["id"] == "u1" and msg["error"]["code"] == abstract._METHOD_NOT_FOUND
    assert "no/such" in msg["error"]["message"]


@pytest.mark.parametrize("params", [[1, 2], "text", 3])
def test_non_object_params_is_invalid_params(server, params):
    server.raw.send({"jsonrpc": "2.0", "id": 9, "method": "echo", "params": params})
    msg = server.raw.msg()
    assert msg["id"] == 9 and msg["error"]["code"] == abstract._INVALID_PARAMS


def test_handler_exception_is_internal_error_without_traceback(server):
    server.raw.send({"jsonrpc": "2.0", "id": 10, "method": "boom"})
    line = server.raw.line()
    msg = json.loads(line)
    assert msg["id"] == 10 and msg["error"]["code"] == abstract._INTERNAL_ERROR
    assert "boom in handler" in msg["error"]["message"]
    assert b"Traceback" not in line and b".py" not in line


def test_notifications_never_get_a_response(server):
    server.raw.send({"jsonrpc": "2.0", "method": "echo"})
    server.raw.send({"jsonrpc": "2.0", "method": "unknown/notification", "params": [1]})
    server.raw.send({"jsonrpc": "2.0", "id": 11, "method": "echo"})
    assert server.raw.msg()["id"] == 11
    assert server.raw.nothing_queued()


# -- ids


@pytest.mark.parametrize("rid", [0, -1, 2 ** 62, "", "abc", "1", "ünï"])
def test_ids_come_back_exactly(server, rid):
    server.raw.send({"jsonrpc": "2.0", "id": rid, "method": "echo"})
    msg = server.raw.msg()
    assert msg["id"] == rid and type(msg["id"]) is type(rid)
    assert "result" in msg


# -- concurrency and cancellation


def test_slow_handler_does_not_delay_another(server):
    server.raw.send({"jsonrpc": "2.0", "id": "slow", "method": "slow"})
    assert server.gates["started"].wait(WAIT)
    server.raw.send({"jsonrpc": "2.0", "id": "fast", "method": "echo"})
    assert server.raw.msg()["id"] == "fast"
    server.gates["release"].set()
    assert server.raw.msg() == {"jsonrpc": "2.0", "id": "slow", "result": {"slow": True}}


def test_cancelled_request_gets_no_response(server):
    server.raw.send({"jsonrpc": "2.0", "id": 21, "method": "wait"})
    assert server.gates["started"].wait(WAIT)
    server.raw.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 21}})
    assert server.gates["finished"].wait(WAIT)  # the handler saw the cancellation and returned
    server.raw.send({"jsonrpc": "2.0", "id": 22, "method": "echo"})
    assert server.raw.msg()["id"] == 22
    assert server.raw.nothing_queued()


def test_cancel_for_another_id_changes_nothing(server):
    server.raw.send({"jsonrpc": "2.0", "id": 31, "method": "slow"})
    assert server.gates["started"].wait(WAIT)
    server.raw.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 999}})
    server.gates["release"].set()
    assert server.raw.msg() == {"jsonrpc": "2.0", "id": 31, "result": {"slow": True}}


# -- the requesting side


def test_request_resolves_with_result_or_rpc_error(client):
    mid, fut = client.conn.request("m", {"x": 1})
    sent = client.raw.msg()
    assert sent == {"jsonrpc": "2.0", "id": mid, "method": "m", "params": {"x": 1}}
    client.raw.send({"jsonrpc": "2.0", "id": mid, "result": {"ok": 1}})
    assert fut.result(WAIT) == {"ok": 1}
    mid2, fut2 = client.conn.request("m")
    client.raw.msg()
    client.raw.send({"jsonrpc": "2.0", "id": mid2, "error": {"code": -32042, "message": "nope", "data": [1]}})
    err = fut2.exception(WAIT)
    assert isinstance(err, abstract.RpcError) and (err.code, err.message, err.data) == (-32042, "nope", [1])


def test_eof_fails_pending_futures_with_upstream_error(client):
    futs = [client.conn.request("m")[1] for _ in range(3)]
    client.eof()
    for fut in futs:
        assert isinstance(fut.exception(WAIT), abstract.UpstreamError)
    assert client.conn.closed.is_set()
    late = client.conn.request("m")[1]  # after EOF: fails at once, never hangs
    assert isinstance(late.exception(0), abstract.UpstreamError)


def test_late_response_to_forgotten_id_is_dropped(client):
    mid, fut = client.conn.request("m")
    client.raw.msg()
    client.conn.forget(mid)
    client.raw.send({"jsonrpc": "2.0", "id": mid, "result": {"late": True}})
    mid2, fut2 = client.conn.request("m")
    client.raw.msg()
    client.raw.send({"jsonrpc": "2.0", "id": mid2, "result": {"second": True}})
    assert fut2.result(WAIT) == {"second": True}  # the reader survived the unknown id
    assert not fut.done()
    assert client.conn._pending == {}


def test_call_timeout_raises_and_sends_cancelled(client):
    with pytest.raises(abstract.UpstreamError) as info:
        client.conn.call("slow/thing", {}, timeout=0.2)
    assert info.value.code == abstract._REQUEST_TIMEOUT
    assert "slow/thing" in info.value.message and "0.2 s" in info.value.message
    request, cancel = client.raw.msg(), client.raw.msg()
    assert cancel["method"] == "notifications/cancelled" and "id" not in cancel
    assert cancel["params"]["requestId"] == request["id"]
    assert client.conn._pending == {}


def test_requests_get_distinct_increasing_ids(client):
    ids = [client.conn.request("m")[0] for _ in range(5)]
    assert ids == sorted(set(ids)) and len(ids) == 5
    assert [client.raw.msg()["id"] for _ in range(5)] == ids


def test_lenient_side_skips_garbage_without_answering(client):
    client.raw.write(b"not json at all\n[1,2]\n")
    mid, fut = client.conn.request("m")
    assert client.raw.msg()["id"] == mid  # the only thing written was our request
    client.raw.send({"jsonrpc": "2.0", "id": mid, "result": {}})
    assert fut.result(WAIT) == {}
    assert client.raw.nothing_queued()
