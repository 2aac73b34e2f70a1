#!/usr/bin/env python3
"""Abstract's benchmark: what the proxy costs, measured against a direct call and a peer proxy.

    python tests/bench.py                       # the whole run (a few minutes), a table on stdout
    python tests/bench.py --quick               # fewer runs, smaller sizes (a smoke test)
    python tests/bench.py --json out.json       # also write every figure as JSON
    python tests/bench.py --markdown out.md     # also write the tables as Markdown (docs/performance.md)
    python tests/bench.py --peer 'PY fastmcp_proxy.py --config {config}'   # add a peer proxy column

Stdlib only; not collected by pytest. It starts everything itself: the upstream is this very file
run as `bench.py --serve-upstream` (a minimal, single-threaded MCP server with deterministic
payloads), Abstract is ../abstract.py, and a peer is any stdio MCP proxy command; `{config}` in it
is replaced by the path of an mcpServers config that names the same upstream as `bench`.

Sections: cold start, per-call latency (echo and ~250 KB of records; direct, Abstract's call_tool,
peer), throughput with C calls in flight, call_tool_and_store of 1k/10k/100k records to json, csv,
yaml and xml against a one-process floor (json.loads + the stdlib writer), and the bytes a client
receives for large results (context kept out), and catalog search latency over 10k and 100k outputs
(search_stored_outputs' engine, FTS5 and the LIKE fallback), and relaying a result whole (issue 27:
added p50 at 1 KB to 10 MB against a line-copy floor, the peer and --before, by this stdlib client and
the MCP SDK's from --sdk-python when it is there; 16 in flight; peak RSS; about 7 minutes of the run).
`--only serve` (issue 28, not in the default run): Abstract's --serve against mcp-proxy and
supergateway (the node bridges in ~/.cache/abstract-realservers), each serving this upstream over
Streamable HTTP: echo and 1 MB p50 by the SDK client, and 8 sessions x 16 calls in flight by a lean
stdlib HTTP/1.1 keep-alive client; interleaved runs (--runs), --before adds the old abstract.py.
Every figure names the machine and the run counts.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import itertools
import json
import os
import platform
import random
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from typing import Any, Callable, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import abstract  # noqa: E402  (the JSON-RPC client side is Abstract's own Connection)

HERE = os.path.abspath(__file__)
_TAGS = ["alpha", "beta", "gamma", "δέλτα", "zeta,eta", 'the "theta"', "iota\tkappa"]


# ---------------------------------------------------------------- the upstream (--serve-upstream)


def make_rows(n: int) -> List[dict]:
    """n records of ~250 bytes each, awkward text included (like the interop suite's rows)."""
    return [{"id": i, "name": f"Name {i} O'Neil", "email": f"user{i}@example.com", "score": round(i * 0.37, 2),
             "active": i % 3 == 0, "tags": _TAGS[: 1 + i % 4],
             "note": f'Row {i}, has "quotes", commas, a tab\there,\nand a second line: café ✓ 日本語 🚀 #{i}'}
            for i in range(n)]


def serve_upstream() -> None:
    """A minimal MCP server: initialize, tools/list, tools/call echo | rows(n) | blob(kb); answers inline."""
    out = sys.stdout.buffer
    memo: Dict[int, str] = {}
    tools = [{"name": n, "description": n, "inputSchema": {"type": "object"}} for n in ("echo", "rows", "blob", "prepare")]
    for line in sys.stdin.buffer:
        msg = json.loads(line)
        if "id" not in msg:
            continue
        method, params = msg.get("method"), msg.get("params") or {}
        if method == "initialize":
            result: Any = {"protocolVersion": params.get("protocolVersion", "2025-11-25"), "capabilities": {"tools": {}},
                           "serverInfo": {"name": "bench-upstream", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call":
            name, args = params.get("name"), params.get("arguments") or {}
            if name == "prepare":  # generate a payload now, so the timed call measures only the relay
                n = int(args.get("n", 1000))
                memo.setdefault(n, json.dumps(make_rows(n), ensure_ascii=False))
                text = "ok"
            elif name == "rows":
                n = int(args.get("n", 1000))
                if n not in memo:  # generated once, so later calls measure the relay, not the generator
                    memo[n] = json.dumps(make_rows(n), ensure_ascii=False)
                text = memo[n]
            elif name == "blob":
                kb = int(args.get("kb", 1))
                text = memo.setdefault(-kb, ("0123456789abcdef" * 64 + "\n") * kb)
            else:
                text = str(args.get("text", ""))
            result = {"content": [{"type": "text", "text": text}]}
        else:
            result = {}
        out.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}, ensure_ascii=False).encode() + b"\n")
        out.flush()


def serve_floor(cmd: List[str], parse: bool = False) -> None:
    """The floor of a stdio relay: spawn `cmd` and copy its lines both ways, never parsed; or
    (`parse`: the least a JSON-RPC proxy does, which must at least map ids) each line parsed
    and encoded again, with nothing else done."""
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    again = ((lambda line: json.dumps(json.loads(line), ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
             if parse else (lambda line: line))

    def inbound() -> None:
        for line in sys.stdin.buffer:
            child.stdin.write(again(line))
        child.stdin.close()

    threading.Thread(target=inbound, daemon=True).start()
    out = sys.stdout.buffer
    for line in io.BufferedReader(child.stdout, 1 << 16):
        out.write(again(line))
        out.flush()
    child.wait()


def sdk_client(spec_json: str) -> None:
    """(Run by the MCP SDK's python, --sdk-client.) Spawn spec's command, call its tool
    warmup + n times over one ClientSession, and print the n latencies (ms) as JSON; with
    "inflight", n calls that many at a time, and print the calls per second."""
    import anyio  # the SDK's own dependencies: never imported by the stdlib run
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    spec = json.loads(spec_json)
    params = StdioServerParameters(command=spec["cmd"][0], args=spec["cmd"][1:], env=spec["env"])

    async def run() -> list:
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    if spec.get("inflight"):
                        return await _sdk_flight(session, spec)
                    return await _sdk_timed(session, spec)

    print(json.dumps(anyio.run(run)))


async def _sdk_timed(session: Any, spec: dict) -> List[float]:
    """The ms of each of spec's n calls (after its warmup ones), one at a time."""
    xs = []
    for i in range(spec["warmup"] + spec["n"]):
        t = time.perf_counter()
        res = await session.call_tool(spec["tool"], spec["args"])
        if i >= spec["warmup"]:
            xs.append((time.perf_counter() - t) * 1000)
        assert not getattr(res, "is_error", getattr(res, "isError", False)), res
    return xs


async def _sdk_flight(session: Any, spec: dict) -> list:
    """spec's n calls over `session`, spec's inflight at a time: [calls per second, CPU ms per call
    of this client, the server it spawned and that one's children (_per_call)]."""
    import anyio

    await session.call_tool(spec["tool"], spec["args"])
    left = iter(range(spec["n"]))

    async def worker() -> None:
        while next(left, None) is not None:
            await session.call_tool(spec["tool"], spec["args"])

    cpu, t = _tree_cpu_ms(os.getpid()), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(spec["inflight"]):
            tg.start_soon(worker)
    took = time.perf_counter() - t
    return [spec["n"] / took, _per_call(cpu, _tree_cpu_ms(os.getpid()), spec["n"])]


# ---------------------------------------------------------------- a client over Abstract's Connection


class Peer:
    """A spawned MCP server with a connected, initialized client."""

    def __init__(self, cmd: List[str], env: Optional[Dict[str, str]] = None) -> None:
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, bufsize=0)
        self.conn = abstract.Connection(io.BufferedReader(self.proc.stdout, 1 << 16), self.proc.stdin,
                                        name="bench", strict=False).start()
        self.conn.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                      "clientInfo": {"name": "bench", "version": "1"}}, timeout=60)
        self.init_s = time.perf_counter() - self.t0
        self.conn.notify("notifications/initialized")

    def call(self, tool: str, args: dict, timeout: float = 300) -> dict:
        return self.conn.call("tools/call", {"name": tool, "arguments": args}, timeout=timeout)

    def peak_kb(self, field: str = "VmHWM") -> Optional[int]:
        """VmHWM of the process (Linux only); or another field of its status (VmRSS: now)."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def reset_peak(self) -> bool:
        """Start VmHWM again from the current RSS (Linux 4.0+: clear_refs 5); False if not possible."""
        try:
            with open(f"/proc/{self.proc.pid}/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


class Target:
    """How to start one of the three things measured, and how to call the upstream's tools through it."""

    def __init__(self, label: str, cmd: List[str], env: Dict[str, str], via: str = "", prefix: str = "") -> None:
        self.label, self.cmd, self.env, self.via, self.prefix = label, cmd, env, via, prefix

    def start(self) -> Peer:
        return Peer(self.cmd, self.env)

    def invoke(self, peer: Peer, tool: str, args: dict) -> dict:
        if self.via:
            return peer.call("call_tool", {"server": self.via, "tool_name": tool, "tool_args": args})
        return peer.call(self.prefix + tool, args)


# ---------------------------------------------------------------- measurements


def _calls(target: Target, client: str, sdk_py: str, tool: str, args: dict, n: int, warmup: int,
           inflight: int = 0) -> List[float]:
    """n call latencies (ms) through `target`, by the stdlib client (Abstract's Connection) or the
    SDK's; with `inflight` (the SDK's), [calls per second] of n calls that many at a time."""
    if client == "stdlib":
        peer = target.start()
        try:
            for _ in range(warmup):
                target.invoke(peer, tool, args)
            xs, cpu = [], _cpu_ms(peer.proc.pid)
            for _ in range(n):
                t = time.perf_counter()
                target.invoke(peer, tool, args)
                xs.append((time.perf_counter() - t) * 1000)
            if cpu is not None:
                _CPU[target.label] = (_cpu_ms(peer.proc.pid) - cpu) / n  # type: ignore[operator]
            return xs
        finally:
            peer.close()
    name, args = (("call_tool", {"server": target.via, "tool_name": tool, "tool_args": args}) if target.via
                  else (target.prefix + tool, args))
    spec = {"cmd": target.cmd, "env": target.env, "tool": name, "args": args, "n": n, "warmup": warmup,
            "inflight": inflight}
    out = subprocess.run([sdk_py, HERE, "--sdk-client", json.dumps(spec)], capture_output=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"the SDK client failed on {target.label}: {out.stderr.decode()[-2000:]}")
    return json.loads(out.stdout)


_CPU: Dict[str, float] = {}  # the last _calls' CPU ms per call of each target's process (stdlib client)


def _cpu_ms(pid: int) -> Optional[float]:
    """CPU time (user + system, ms) of a process so far (Linux: /proc; 10 ms ticks); None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _tree_cpu_ms(pid: int) -> List[float]:
    """CPU ms so far (user + system) of `pid`, of its children, of their children, ... summed by
    depth (Linux: /proc; 10 ms ticks); [] elsewhere. A process is the relay's or the upstream's
    by its depth: the client spawns the relay, which spawns the upstream."""
    kids: Dict[int, List[int]] = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(name))
    depths, level = [], [pid]
    while level:
        depths.append(sum(_cpu_ms(p) or 0.0 for p in level))
        level = [k for p in level for k in kids.get(p, [])]
    return depths


def _switches(pid: int) -> Optional[int]:
    """Context switches so far (voluntary + not) of the threads `pid` has now (Linux: /proc;
    the relay's pool workers stay), summed over /proc/<pid>/task/*/status; None elsewhere."""
    total, tasks = 0, f"/proc/{pid}/task"
    if not os.path.isdir(tasks):
        return None
    for tid in os.listdir(tasks):
        try:
            with open(f"{tasks}/{tid}/status") as f:
                total += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
        except (OSError, ValueError, IndexError):
            continue
    return total


def _per_call(before: List[float], after: List[float], n: int) -> Dict[str, float]:
    """CPU ms per call of the client (depth 0), the relay (1) and the upstream (2) between two
    _tree_cpu_ms; with no relay between them (direct), depth 1 is the upstream."""
    d = [(a - (before[i] if i < len(before) else 0.0)) / n for i, a in enumerate(after)]
    d += [0.0] * (3 - len(d))
    return ({"client": d[0], "relay": d[1], "upstream": d[2]} if len(after) > 2 else
            {"client": d[0], "relay": 0.0, "upstream": d[1]})


def _peak_mb(target: Target, tool: str, args: dict, calls: int) -> Optional[float]:
    """The target's peak RSS (MB) over `calls` calls, from a warm start (Linux: clear_refs, VmHWM)."""
    peer = target.start()
    try:
        target.invoke(peer, tool, args)
        if not peer.reset_peak():
            return None
        for _ in range(calls):
            target.invoke(peer, tool, args)
        kb = peer.peak_kb()
        return kb / 1024 if kb is not None else None
    finally:
        peer.close()


RELAY_SIZES = [("1 KB", 1, 200), ("250 KB", 250, 60), ("1 MB", 1024, 30), ("10 MB", 10240, 8)]


def relay_bench(targets: List[Target], sdk_py: str, runs: int, quick: bool, sizes: str = "",
                calls: int = 0) -> dict:
    """Issue 27: the added p50 of each target over a direct call, at 1 KB to 10 MB of text, by the
    stdlib client and the SDK's (10 MB: the stdlib client only; the SDK's own parsing would swamp
    it); the targets in a rotating order within each run, so a change in load falls on all alike;
    16 calls in flight (stdlib client); and the peak RSS relaying 10 MB. `sizes` (KB, comma-separated):
    only those of RELAY_SIZES; `calls`: that many calls per size and run."""
    clients = ["stdlib"] + (["sdk"] if sdk_py else [])
    p50: Dict[str, Dict[str, List[float]]] = {}
    cpu: Dict[str, Dict[str, List[float]]] = {}  # the relay's own CPU time per call: steadier under load
    for run in range(runs):
        for size, kb, n in RELAY_SIZES:
            if sizes and str(kb) not in sizes.split(","):
                continue
            n = calls or (max(3, n // 4) if quick else n)
            for client in clients:
                if client == "sdk" and kb > 1024:
                    continue
                order = targets[run % len(targets):] + targets[:run % len(targets)]
                for t in order:
                    xs = _calls(t, client, sdk_py, "blob", {"kb": kb}, n, max(2, n // 10))
                    p50.setdefault(f"{size} {client}", {}).setdefault(t.label, []).append(pct(xs, 50))
                    if client == "stdlib" and t.label in _CPU:
                        cpu.setdefault(f"{size} CPU ms/call", {}).setdefault(t.label, []).append(_CPU[t.label])
    added = {}
    for case, per in p50.items():
        direct = per["direct"]
        added[case] = {label: {"p50_ms": statistics.median(v),
                               "added_ms": statistics.median([x - d for x, d in zip(v, direct)])}
                       for label, v in per.items()}
    peak = {t.label: _peak_mb(t, "blob", {"kb": 10240}, 3) for t in targets}
    return {"runs": runs, "added": added, "peak_rss_10mb_mb": peak,
            "cpu_ms_per_call": {case: {k: statistics.median(v) for k, v in per.items()} for case, per in cpu.items()},
            **flight_bench(targets, sdk_py, runs, 400 if quick else 2000)}


def flight_bench(targets: List[Target], sdk_py: str, runs: int, calls: int) -> dict:
    """Echo calls, 16 in flight, through each target, by the stdlib client and the SDK's, the
    targets in a rotating order within each run: the median calls per second, and the median CPU
    ms per call of the client, the relay and the upstream (each process's own, from /proc), and
    (the stdlib client) the relay's context switches per call."""
    cps: Dict[str, Dict[str, List[float]]] = {}
    cpu: Dict[str, Dict[str, Dict[str, List[float]]]] = {}
    switches: Dict[str, List[float]] = {}  # the stdlib client's: the relay's (direct: the upstream's)
    for run in range(runs):
        for client in ["stdlib"] + (["sdk"] if sdk_py else []):
            for t in targets[run % len(targets):] + targets[:run % len(targets)]:
                if client == "stdlib":
                    r = throughput(t, calls, 16)
                    rate, per = r["calls_per_s"], r["cpu_ms_per_call"]
                    if r["switches_per_call"] is not None:
                        switches.setdefault(t.label, []).append(r["switches_per_call"])
                else:
                    rate, per = _calls(t, client, sdk_py, "echo", {"text": "x"}, calls, 0, 16)
                cps.setdefault(client, {}).setdefault(t.label, []).append(rate)
                for role, ms in per.items():
                    cpu.setdefault(client, {}).setdefault(t.label, {}).setdefault(role, []).append(ms)
    return {"in_flight_runs": {c: per for c, per in cps.items()},
            "in_flight_calls_per_s": {c: {k: statistics.median(v) for k, v in per.items()}
                                      for c, per in cps.items()},
            "in_flight_cpu_ms_per_call": {c: {k: {role: statistics.median(v) for role, v in roles.items()}
                                              for k, roles in per.items()} for c, per in cpu.items()},
            "in_flight_switches_per_call": {k: statistics.median(v) for k, v in switches.items()}}


def _flight_rows(r: dict) -> List[List[Any]]:
    """16 in flight: calls/s (vs direct) and the CPU ms per call (client + relay + upstream), and
    the cores that adds up to at that rate (this machine has os.cpu_count())."""
    rows = []
    for client, per in r["in_flight_calls_per_s"].items():
        rows.append([f"16 in flight {client}, calls/s (vs direct)"]
                    + [f"{per[k]:,.0f} ({per[k] / per['direct']:.2f})" for k in per])
        cpu = r.get("in_flight_cpu_ms_per_call", {}).get(client, {})
        if cpu:
            rows.append([f"16 in flight {client}, CPU ms/call client + relay + upstream"]
                        + [" + ".join(f"{cpu[k][role]:.3f}" for role in ("client", "relay", "upstream"))
                           for k in per])
            rows.append([f"16 in flight {client}, cores busy (CPU ms/call x calls/s)"]
                        + [f"{sum(cpu[k].values()) * per[k] / 1000:.2f}" for k in per])
        switches = r.get("in_flight_switches_per_call", {}) if client == "stdlib" else {}
        if switches:
            rows.append([f"16 in flight {client}, context switches/call of the relay (direct: the upstream)"]
                        + [f"{switches[k]:.1f}" if k in switches else "" for k in per])
    return rows


def _relay_rows(r: dict) -> List[List[Any]]:
    labels = list(r["peak_rss_10mb_mb"])
    rows = []
    for case, per in r["added"].items():
        rows.append([case] + [per[k]["added_ms"] if k != "direct" else per[k]["p50_ms"] for k in labels])
    for case, per in r.get("cpu_ms_per_call", {}).items():
        rows.append([case] + [per.get(k) for k in labels])
    for case, per in r["added"].items() if "peer" in labels else ():  # (the targets: a share of the peer's)
        rows.append([f"{case}, added / the peer's"]
                    + [per[k]["added_ms"] / per["peer"]["added_ms"] if k != "direct" else None for k in labels])
    rows += _flight_rows(r)
    rows.append(["peak RSS relaying 10 MB, MB"] + [r["peak_rss_10mb_mb"][k] for k in labels])
    return rows


def pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def cold_start(target: Target, runs: int) -> dict:
    inits, firsts = [], []
    for _ in range(runs):
        peer = target.start()
        inits.append(peer.init_s * 1000)
        target.invoke(peer, "echo", {"text": "hi"})
        firsts.append((time.perf_counter() - peer.t0) * 1000)
        peer.close()
    return {"runs": runs, "initialize_ms_median": statistics.median(inits), "first_call_ms_median": statistics.median(firsts)}


def latency(target: Target, tool: str, args: dict, n: int, warmup: int) -> dict:
    peer = target.start()
    try:
        for _ in range(warmup):
            target.invoke(peer, tool, args)
        xs = []
        for _ in range(n):
            t = time.perf_counter()
            target.invoke(peer, tool, args)
            xs.append((time.perf_counter() - t) * 1000)
    finally:
        peer.close()
    return {"n": n, "p50_ms": pct(xs, 50), "p90_ms": pct(xs, 90), "p99_ms": pct(xs, 99)}


def throughput(target: Target, total: int, inflight: int) -> dict:
    peer = target.start()
    try:
        target.invoke(peer, "echo", {"text": "warm"})
        left = iter(range(total))
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    if next(left, None) is None:
                        return
                target.invoke(peer, "echo", {"text": "x"})

        me, cpu, t = os.times(), _tree_cpu_ms(peer.proc.pid), time.perf_counter()
        switches = _switches(peer.proc.pid)
        threads = [threading.Thread(target=worker) for _ in range(inflight)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        took = time.perf_counter() - t
        # the client is this process: its own times (the tree below it is the peer's)
        after, done = _tree_cpu_ms(peer.proc.pid), os.times()
        switched = _switches(peer.proc.pid)
    finally:
        peer.close()
    own = (done.user + done.system - me.user - me.system) * 1000
    return {"calls": total, "in_flight": inflight, "calls_per_s": total / took,
            "cpu_ms_per_call": _per_call([0.0] + cpu, [own] + after, total),
            "switches_per_call": (switched - switches) / total if switches is not None
            and switched is not None else None}


def _floor_write(data: list, fmt: str, path: str) -> None:
    """The stdlib floor for each format (yaml has no stdlib writer: Abstract's emitter stands in)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        if fmt == "json":
            json.dump(data, f, indent=2, ensure_ascii=False)
        elif fmt == "csv":
            w = csv.DictWriter(f, fieldnames=list(data[0]))
            w.writeheader()
            w.writerows({**r, "tags": json.dumps(r["tags"], ensure_ascii=False)} for r in data)
        elif fmt == "yaml":
            f.write(abstract._dump_yaml(data))
        else:
            root = ET.Element("result")
            for r in data:
                item = ET.SubElement(root, "item")
                for k, v in r.items():
                    ET.SubElement(item, k).text = json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v
            f.write(ET.tostring(root, encoding="unicode"))


def _own_peak_kb() -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


def run_floor(fmt: str, n: int, out: str) -> None:
    """--floor: in a fresh process, json.loads the payload bytes and write them with the stdlib
    writer; print the seconds and this process's peak RSS as JSON."""
    payload = json.dumps(make_rows(n), ensure_ascii=False).encode()
    t = time.perf_counter()
    _floor_write(json.loads(payload), fmt, out)
    print(json.dumps({"seconds": time.perf_counter() - t, "peak_kb": _own_peak_kb()}))


def storing(abstract_env: Dict[str, str], store_dir: str, sizes: List[int], formats: List[str]) -> List[dict]:
    rows_out = []
    for n in sizes:
        mb = len(json.dumps(make_rows(n), ensure_ascii=False).encode()) / 1e6
        for fmt in formats:
            floor = json.loads(subprocess.run([sys.executable, HERE, "--floor", fmt, str(n),
                                               os.path.join(store_dir, f"floor-{n}.{fmt}")],
                                              capture_output=True, check=True, text=True).stdout)
            floor_s = floor["seconds"]
            peer = Peer([sys.executable, os.path.join(ROOT, "abstract.py"), store_dir], abstract_env)
            try:
                peer.call("call_tool", {"server": "bench", "tool_name": "prepare", "tool_args": {"n": n}})
                t = time.perf_counter()
                res = peer.call("call_tool_and_store", {"server": "bench", "tool_name": "rows", "tool_args": {"n": n},
                                                        "file_format": fmt})
                took = time.perf_counter() - t
                assert not res.get("isError"), res
                peak = peer.peak_kb()
            finally:
                peer.close()
            rows_out.append({"records": n, "format": fmt, "payload_mb": mb, "seconds": took,
                             "mb_per_s": mb / took, "floor_mb_per_s": mb / floor_s,
                             "vs_floor": floor_s / took, "peak_rss_mb": peak / 1024 if peak else None,
                             "floor_peak_rss_mb": floor["peak_kb"] / 1024 if floor["peak_kb"] else None})
    return rows_out


def context(abstract_env: Dict[str, str], store_dir: str, sizes_kb: List[int]) -> List[dict]:
    out = []
    peer = Peer([sys.executable, os.path.join(ROOT, "abstract.py"), store_dir], abstract_env)
    try:
        for kb in sizes_kb:
            via = {"server": "bench", "tool_name": "blob", "tool_args": {"kb": kb}}
            sent = len(json.dumps({"content": [{"type": "text", "text": ("0123456789abcdef" * 64 + "\n") * kb}]}))
            cached = len(json.dumps(peer.call("call_tool", via), ensure_ascii=False))
            stored = len(json.dumps(peer.call("call_tool_and_store", {**via, "file_format": "txt"}), ensure_ascii=False))
            out.append({"result_kb": kb, "upstream_bytes": sent, "call_tool_bytes": cached, "store_bytes": stored})
    finally:
        peer.close()
    return out


def big_call(abstract_env: Dict[str, str], relay_env: Dict[str, str], store_dir: str, runs: int,
             cases: List[tuple]) -> List[dict]:
    """A large result through call_tool with the cache on (the client gets a preview and a token)
    and off (the whole result relayed): median seconds and the bytes the client receives. The
    two Abstracts run side by side and are called in turn, so a change in the machine's load
    falls on both alike."""
    out = []
    for label, tool, args in cases:
        row: Dict[str, Any] = {"result": label}
        modes = (("cache_on", abstract_env), ("cache_off", relay_env))
        peers = {mode: Peer([sys.executable, os.path.join(ROOT, "abstract.py"), store_dir], env)
                 for mode, env in modes}
        try:
            via = {"server": "bench", "tool_name": tool, "tool_args": args}
            times: Dict[str, List[float]] = {mode: [] for mode in peers}
            got: Dict[str, int] = {}
            for peer in peers.values():
                peer.call("call_tool", {"server": "bench", "tool_name": "prepare", "tool_args": args})
                peer.call("call_tool", via)  # warm: the upstream's payload and Abstract's first use
            for _ in range(runs):
                for mode, peer in peers.items():
                    t0 = time.perf_counter()
                    answer = peer.call("call_tool", via)
                    times[mode].append(time.perf_counter() - t0)  # (measuring it is not timed)
                    got[mode] = len(json.dumps(answer, ensure_ascii=False))
            for mode in peers:
                row[mode + "_s"], row[mode + "_bytes"] = statistics.median(times[mode]), got[mode]
        finally:
            for peer in peers.values():
                peer.close()
        out.append(row)
    return out


QUERIES = {
    "filter": "SELECT id, name, score FROM data WHERE active = 1 AND score > 30000 AND name LIKE '%7%'",
    "group by": "SELECT json_array_length(tags) AS n_tags, count(*) AS n, avg(score) AS avg FROM data GROUP BY n_tags",
    "self-join": "SELECT a.id, b.id FROM data a JOIN data b ON b.id = a.id + 1 WHERE a.score > 36000",
}


def query_bench(abstract_env: Dict[str, str], store_dir: str, n: int, runs: int) -> dict:
    """query_output over n records cached by call_tool: the first query (the load included), the
    p50 of later ones, and Abstract's peak RSS against the payload."""
    peer = Peer([sys.executable, os.path.join(ROOT, "abstract.py"), store_dir], abstract_env)
    try:
        args = {"n": n}
        peer.call("call_tool", {"server": "bench", "tool_name": "prepare", "tool_args": args})
        payload = len(json.dumps(make_rows(n), ensure_ascii=False).encode())
        t0 = time.perf_counter()
        cached = peer.call("call_tool", {"server": "bench", "tool_name": "rows", "tool_args": args})
        cache_s = time.perf_counter() - t0
        token = cached["structuredContent"]["token"]
        out: Dict[str, Any] = {"records": n, "payload_mb": payload / 1e6, "cache_s": cache_s, "queries": {}}
        cache_peak = peer.peak_kb()
        out["cache_peak_rss_mb"] = cache_peak / 1024 if cache_peak else None
        rss = peer.peak_kb("VmRSS")
        out["rss_before_queries_mb"] = rss / 1024 if rss else None
        reset = peer.reset_peak()  # so the peak read after the queries is theirs alone
        for i, (name, sql) in enumerate(QUERIES.items()):
            times = []
            for _ in range(runs + (1 if i == 0 else 0)):
                t0 = time.perf_counter()
                res = peer.call("query_output", {"source": token, "sql": sql, "limit": 20})
                times.append(time.perf_counter() - t0)
                assert not res.get("isError"), res
            if i == 0:
                out["first_query_s"] = times.pop(0)
            out["queries"][name] = {"p50_ms": statistics.median(times) * 1000, "rows": res["structuredContent"]["row_count"]}
        peak = peer.peak_kb()
        if reset and peak:
            out["query_peak_rss_mb"] = peak / 1024
            out["query_rss_vs_payload"] = peak * 1024 / payload
            peak = max(peak, cache_peak or 0)
        out["peak_rss_mb"] = peak / 1024 if peak else None
        out["rss_vs_payload"] = peak * 1024 / payload if peak else None
    finally:
        peer.close()
    # The query phase alone in a fresh process: a second Abstract sharing the cache directory
    # loads the table from the cached view (its start-up RSS, then its peak after the queries).
    peer = Peer([sys.executable, os.path.join(ROOT, "abstract.py"), store_dir], abstract_env)
    try:
        idle = peer.peak_kb("VmRSS")
        t0 = time.perf_counter()
        res = peer.call("query_output", {"source": token, "sql": QUERIES["filter"], "limit": 20})
        out["fresh_first_query_s"] = time.perf_counter() - t0
        assert not res.get("isError"), res
        for sql in QUERIES.values():
            peer.call("query_output", {"source": token, "sql": sql, "limit": 20})
        peak = peer.peak_kb()
        out["fresh_idle_rss_mb"] = idle / 1024 if idle else None
        out["fresh_peak_rss_mb"] = peak / 1024 if peak else None
        out["fresh_rss_vs_payload"] = peak * 1024 / payload if peak else None
    finally:
        peer.close()
    return out


def _vocabulary(rnd: random.Random, n: int) -> List[str]:
    """n distinct made-up words (2-4 syllables), in a fixed order: index = frequency rank."""
    syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
    words: Dict[str, None] = {}
    while len(words) < n:
        words["".join(rnd.choice(syllables) for _ in range(rnd.randint(2, 4)))] = None
    return list(words)


def catalog_search(sizes: List[int], queries: int, fallback_sizes: List[int]) -> List[dict]:
    """search_stored_outputs' engine: Catalog.search latency over n synthetic outputs of ~1 KB of text
    each (Zipf-distributed words), in a temporary file, for several kinds of query."""
    rnd = random.Random(7)
    vocab = _vocabulary(rnd, 5000)
    cum, total = [], 0.0
    for rank in range(len(vocab)):  # Zipf: the word of rank r is 1/(r+1) as frequent as the first
        total += 1.0 / (rank + 1)
        cum.append(total)
    kinds = [("1 rare word", "words", lambda: rnd.choice(vocab[1000:])),
             ("2 mid words", "words", lambda: " ".join(rnd.sample(vocab[50:1000], 2))),
             ("1 common word", "words", lambda: rnd.choice(vocab[:10])),
             ("phrase", "phrase", lambda: " ".join(rnd.sample(vocab[:200], 2))),
             ("prefix", "prefix", lambda: rnd.choice(vocab[100:1000])[:3])]
    out = []
    for n, fts in [(n, None) for n in sizes] + [(n, False) for n in fallback_sizes]:
        work = tempfile.mkdtemp(prefix="abstract-bench-catalog-")
        cat = abstract._Catalog(os.path.join(work, "catalog.sqlite3"), fts=fts)
        t = time.perf_counter()
        for start in range(0, n, 5000):
            cat.record_many([{"server": f"server{i % 5}", "tool": f"tool{i % 20}", "format": "json",
                              "path": f"/bench/server{i % 5}-tool{i % 20}-{i}.json", "created": 1.7e9 + i,
                              "text": " ".join(rnd.choices(vocab, cum_weights=cum, k=150))}
                             for i in range(start, min(n, start + 5000))])
        insert_s = time.perf_counter() - t
        size_mb = sum(os.path.getsize(os.path.join(work, f)) for f in os.listdir(work)) / 1e6
        for label, mode, make in kinds:
            xs = []
            for _ in range(queries):
                q = make()
                t = time.perf_counter()
                cat.search(q, mode, limit=10)
                xs.append((time.perf_counter() - t) * 1000)
            out.append({"rows": n, "engine": "fts5" if cat.fts else "fallback", "query": label, "queries": queries,
                        "p50_ms": pct(xs, 50), "p90_ms": pct(xs, 90), "insert_s": insert_s, "db_mb": size_mb})
        cat.close()
        shutil.rmtree(work, ignore_errors=True)
    return out


# ---------------------------------------------------------------- serving over HTTP (issue 28, item 6)

NODE_BIN = os.path.join(os.path.expanduser("~"), ".cache", "abstract-realservers", "node", "node_modules", ".bin")
SERVE_TOKEN = "bench-" + "t" * 40  # Abstract's bearer token (ABSTRACT_SERVE_TOKEN); the bridges take none


def sdk_http_client(spec_json: str) -> None:
    """(Run by the MCP SDK's python, --sdk-http-client.) Over Streamable HTTP to spec's url: one
    ClientSession, its tool called warmup + n times; print the n latencies (ms) as JSON."""
    import anyio  # the SDK's own dependencies: never imported by the stdlib run
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    spec = json.loads(spec_json)

    async def run() -> list:
        async with streamable_http_client(spec["url"], http_client=create_mcp_http_client(
                headers=spec["headers"])) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                return await _sdk_timed(session, spec)

    print(json.dumps(anyio.run(run)))


class Served:
    """One HTTP server of the serve section, started: Abstract's --serve, mcp-proxy or supergateway,
    each over bench.py's own --serve-upstream; `url` its /mcp, `headers` what every request sends."""

    def __init__(self, label: str, cmd: List[str], env: Dict[str, str], port: int, headers: Dict[str, str],
                 prefix: str = "") -> None:
        self.label, self.headers, self.prefix = label, headers, prefix
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        lines: List[bytes] = []
        said = threading.Event()

        def drain() -> None:  # its log lines, read to the end (an unread pipe would block it)
            for line in iter(self.proc.stderr.readline, b""):
                if len(lines) < 50:
                    lines.append(line)
                if b"serving MCP at" in line:
                    said.set()
            said.set()

        threading.Thread(target=drain, daemon=True).start()
        if not port:  # Abstract: port 0, and it says where
            if not said.wait(60) or not lines or b"serving MCP at" not in lines[-1]:
                self.close()
                raise RuntimeError(f"{label} did not start: {b''.join(lines).decode(errors='replace')[-2000:]}")
            port = int(lines[-1].split(b"serving MCP at ")[1].strip().rsplit(b":", 1)[1].split(b"/")[0])
        self.port, self.url = port, f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 60
        while True:  # the bridges: listening once a connection is taken
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError(f"{label} did not listen on {port}: "
                                       f"{b''.join(lines).decode(errors='replace')[-2000:]}") from None
                time.sleep(0.05)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_systems(abstract_py: str, relay_env: Dict[str, str], store: str, before: str = "") -> List[tuple]:
    """(label, start) of each system of the serve section; start() gives a Served."""
    upstream = [sys.executable, HERE, "--serve-upstream"]
    env = {**relay_env, "ABSTRACT_SERVE_TOKEN": SERVE_TOKEN}
    auth = {"Authorization": f"Bearer {SERVE_TOKEN}"}

    def abstract_at(label: str, path: str) -> Callable[[], Served]:
        return lambda: Served(label, [sys.executable, path, "--serve", "127.0.0.1:0", "--expose", "direct", store],
                              env, 0, auth, prefix="bench__")

    def proxy() -> Served:
        port = _free_port()
        return Served("mcp-proxy", [os.path.join(NODE_BIN, "mcp-proxy"), "--host", "127.0.0.1", "--port", str(port),
                                    "--server", "stream", "--", *upstream], dict(os.environ), port, {})

    def gateway() -> Served:
        port = _free_port()
        return Served("supergateway", [os.path.join(NODE_BIN, "supergateway"), "--stdio", shlex.join(upstream),
                                       "--outputTransport", "streamableHttp", "--stateful", "--port", str(port),
                                       "--logLevel", "none"], dict(os.environ), port, {})

    systems = [("abstract", abstract_at("abstract", abstract_py))]
    if before:
        systems.append(("before", abstract_at("before", before)))
    if os.path.exists(os.path.join(NODE_BIN, "mcp-proxy")):
        systems.append(("mcp-proxy", proxy))
    if os.path.exists(os.path.join(NODE_BIN, "supergateway")):
        systems.append(("supergateway", gateway))
    return systems


def _sdk_http_calls(sdk_py: str, served: Served, tool: str, args: dict, n: int, warmup: int) -> List[float]:
    spec = {"url": served.url, "headers": served.headers, "tool": served.prefix + tool, "args": args, "n": n,
            "warmup": warmup}
    out = subprocess.run([sdk_py, HERE, "--sdk-http-client", json.dumps(spec)], capture_output=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"the SDK HTTP client failed on {served.label}: {out.stderr.decode()[-2000:]}")
    return json.loads(out.stdout)


class LeanSlot:
    """One in-flight slot of the lean client: an HTTP/1.1 keep-alive connection of its own (a raw
    socket: http.client's header parsing and a thread per slot would make the client the bottleneck),
    reopened only when the server closes it, posting JSON-RPC to /mcp of one session. An answer is
    read whole by its Content-Length, its chunks, or to the connection's end."""

    def __init__(self, served: Served, sid: str = "") -> None:
        self.port = served.port
        head = {"Host": f"127.0.0.1:{served.port}", "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream", **served.headers}
        if sid:
            head["Mcp-Session-Id"] = sid
        self._head = "".join(f"{k}: {v}\r\n" for k, v in head.items())
        self.sock: Optional[socket.socket] = None
        self.opened = 0  # connections made (1 when every request reused the first)
        self._buf = bytearray()

    def send(self, msg: dict) -> None:
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.opened += 1
        body = json.dumps(msg).encode()
        self.sock.sendall(f"POST /mcp HTTP/1.1\r\n{self._head}Content-Length: {len(body)}\r\n\r\n".encode() + body)

    def feed(self) -> Optional[tuple]:
        """Read what has come (the socket is readable); (status, headers, body) once the answer is
        whole, else None."""
        data = self.sock.recv(1 << 16)  # type: ignore[union-attr]
        self._buf += data
        return self._parse(not data)

    def _parse(self, ended: bool) -> Optional[tuple]:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if ended:
                raise ConnectionError("the server closed the connection before an answer")
            return None
        lines = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        rest, body = end + 4, None
        if "content-length" in headers:
            n = int(headers["content-length"])
            if len(self._buf) >= rest + n:
                body, rest = bytes(self._buf[rest:rest + n]), rest + n
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body, rest = self._chunks(rest)
        elif ended:
            body, rest = bytes(self._buf[rest:]), len(self._buf)
        if body is None:
            if ended:
                raise ConnectionError("the server closed the connection mid-answer")
            return None
        del self._buf[:rest]
        if ended or headers.get("connection", "").lower() == "close" or lines[0].startswith("HTTP/1.0"):
            self.close()
        return status, headers, body

    def _chunks(self, pos: int) -> tuple:
        parts = []
        while True:
            eol = self._buf.find(b"\r\n", pos)
            if eol < 0:
                return None, pos
            size = int(bytes(self._buf[pos:eol]).split(b";")[0], 16)
            if len(self._buf) < eol + 2 + size + 2:
                return None, pos
            parts.append(bytes(self._buf[eol + 2:eol + 2 + size]))
            pos = eol + 2 + size + 2
            if size == 0:
                return b"".join(parts), pos

    def post(self, msg: dict) -> tuple:
        """One request, answered: (status, headers, body)."""
        self.send(msg)
        while True:
            got = self.feed()
            if got is not None:
                return got

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._buf.clear()


def lean_throughput(served: Served, sessions: int, inflight: int, calls: int) -> dict:
    """`sessions` sessions (initialize, notifications/initialized), each with `inflight` slots
    (a connection each), calling echo as fast as they are answered, from one thread (a selector):
    `calls` calls in all. Calls per second, the connections opened per slot (1.0: every one
    kept alive), and the CPU ms per call of the server and the processes it started (/proc;
    steadier than calls per second on a loaded machine)."""
    import selectors

    slots: List[LeanSlot] = []
    for _ in range(sessions):
        first = LeanSlot(served)
        status, headers, _ = first.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "lean", "version": "1"}}})
        assert status == 200, (served.label, status)
        first.close()
        sid = headers["mcp-session-id"]
        note = LeanSlot(served, sid)
        note.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        note.close()
        slots += [LeanSlot(served, sid) for _ in range(inflight)]
    call = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": served.prefix + "echo",
                                                                  "arguments": {"text": "x"}}}
    ids = itertools.count(1)  # (unique in a session: the bridges key answers by id)
    for slot in slots:  # warm: each connection open, each session used once
        slot.post({**call, "id": next(ids)})
        slot.opened = 1 if slot.sock is not None else 0
    sel = selectors.DefaultSelector()
    sent = done = 0
    cpu, t = _tree_cpu_ms(served.proc.pid), time.perf_counter()
    for slot in slots[:calls]:
        slot.send({**call, "id": next(ids)})
        sent += 1
        sel.register(slot.sock, selectors.EVENT_READ, slot)  # type: ignore[arg-type]
    while done < calls:
        for key, _ in sel.select(60) or [(None, None)]:
            if key is None:
                raise RuntimeError(f"the lean client: no answer from {served.label} within 60 s")
            slot = key.data
            sock = slot.sock
            got = slot.feed()
            if got is None:
                continue
            status, _, body = got
            if status != 200 or b'"result"' not in body:
                raise RuntimeError(f"the lean client: {served.label} answered {status}: {body[:300]!r}")
            done += 1
            if slot.sock is not sock:
                sel.unregister(sock)
            if sent < calls:
                slot.send({**call, "id": next(ids)})
                sent += 1
                if slot.sock is not sock:
                    sel.register(slot.sock, selectors.EVENT_READ, slot)  # type: ignore[arg-type]
            elif slot.sock is sock:
                sel.unregister(sock)
    took = time.perf_counter() - t
    server_ms = sum(_tree_cpu_ms(served.proc.pid)) - sum(cpu)
    sel.close()
    for slot in slots:
        slot.close()
    return {"calls_per_s": calls / took, "connections_per_slot": sum(s.opened for s in slots) / len(slots),
            "cpu_ms_per_call": server_ms / calls}


def serve_bench(systems: List[tuple], sdk_py: str, runs: int, calls: int, echo_n: int = 200,
                mb_n: int = 30) -> dict:
    """Issue 28, item 6: each system serving the same stdio upstream over HTTP, started afresh in
    each run, the systems in a rotating order (a change in load falls on all alike): echo and 1 MB
    p50 by the SDK client (one session, calls one at a time), and calls per second of 8 sessions x
    16 calls in flight by the lean client. Medians over the runs."""
    figures: Dict[str, Dict[str, List[float]]] = {}

    def note(case: str, label: str, value: float) -> None:
        figures.setdefault(case, {}).setdefault(label, []).append(value)

    for run in range(runs):
        for label, start in systems[run % len(systems):] + systems[:run % len(systems)]:
            served = start()
            try:
                if sdk_py:
                    note("echo p50 ms (SDK)", label,
                         pct(_sdk_http_calls(sdk_py, served, "echo", {"text": "hello"}, echo_n, echo_n // 10), 50))
                    # (1,041,000 bytes of text: the SDK refuses an SSE event over 1 MiB, and the bridges
                    # answer with SSE)
                    note("1 MB p50 ms (SDK)", label,
                         pct(_sdk_http_calls(sdk_py, served, "blob", {"kb": 1000}, mb_n, 3), 50))
                got = lean_throughput(served, 8, 16, calls)
                note("8 sessions x 16 in flight, calls/s (lean)", label, got["calls_per_s"])
                note("8 x 16 in flight, CPU ms per call (server + its upstreams)", label, got["cpu_ms_per_call"])
                note("connections per slot (1: kept alive)", label, got["connections_per_slot"])
            finally:
                served.close()
    return {"runs": runs, "calls": calls, "systems": [s[0] for s in systems], "raw": figures,
            "median": {case: {k: statistics.median(v) for k, v in per.items()} for case, per in figures.items()}}


# ---------------------------------------------------------------- report


def machine() -> dict:
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "cores": os.cpu_count(), "platform": platform.platform(), "machine": platform.machine()}


def table(title: str, header: List[str], rows: List[List[Any]]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:,.2f}" if isinstance(v, float) else ("n/a" if v is None else str(v))

    body = [[fmt(v) for v in r] for r in rows]
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def _latency_rows(latency: dict) -> List[List[Any]]:
    rows = []
    for size, per in latency.items():
        base = per.get("direct", {}).get("p50_ms")
        for label, v in per.items():
            added = v["p50_ms"] - base if base is not None and label != "direct" else None
            rows.append([size, label, v["n"], v["p50_ms"], v["p90_ms"], v["p99_ms"], added])
    return rows


# section -> (title, header, rows from the section's figures)
_TABLES: Dict[str, Callable[[Any], tuple]] = {
    "cold": lambda r: ("Cold start (median of %d)" % r[0][1]["runs"],
                       ["target", "spawn → initialize ms", "spawn → first call ms"],
                       [[k, v["initialize_ms_median"], v["first_call_ms_median"]] for k, v in r]),
    "latency": lambda r: ("Per-call latency", ["result", "target", "calls", "p50 ms", "p90 ms", "p99 ms",
                                               "added p50 ms"], _latency_rows(r)),
    "throughput": lambda r: ("Throughput", ["target", "calls", "in flight", "calls/s"],
                             [[k, v["calls"], v["in_flight"], v["calls_per_s"]] for k, v in r.items()]),
    "storing": lambda r: ("call_tool_and_store (floor: json.loads + stdlib writer, one process)",
                          ["records", "format", "payload MB", "seconds", "MB/s", "floor MB/s", "vs floor",
                           "peak RSS MB", "floor peak RSS MB"],
                          [[x["records"], x["format"], x["payload_mb"], x["seconds"], x["mb_per_s"],
                            x["floor_mb_per_s"], x["vs_floor"], x["peak_rss_mb"], x["floor_peak_rss_mb"]] for x in r]),
    "context": lambda r: ("Context kept out (bytes the client receives)",
                          ["result KB", "upstream sent", "call_tool", "call_tool_and_store"],
                          [[x["result_kb"], x["upstream_bytes"], x["call_tool_bytes"], x["store_bytes"]] for x in r]),
    "bigcall": lambda r: ("A large result through call_tool: cache on (preview + token) vs off (relayed whole)",
                          ["result", "cache on s", "cache off s", "on / off", "client bytes on", "client bytes off"],
                          [[x["result"], x["cache_on_s"], x["cache_off_s"], x["cache_on_s"] / x["cache_off_s"],
                            x["cache_on_bytes"], x["cache_off_bytes"]] for x in r]),
    "query": lambda r: ("query_output over %s records (%.1f MB) cached by call_tool (call_tool %.2f s; first query, load "
                        "included, %.2f s (target: under 3 s); Abstract's peak RSS %.0f MB = %.1fx the payload "
                        "(target at 100,000 records: under 4x); caching's %.0f MB, "
                        "the queries' alone %.0f MB = %.1fx, from %.0f MB before them; in a fresh process, "
                        "idle %.0f MB, after loading (%.2f s) and querying %.0f MB = %.1fx)"
                        % (f"{r['records']:,}", r["payload_mb"], r["cache_s"], r["first_query_s"],
                           r["peak_rss_mb"] or 0, r["rss_vs_payload"] or 0, r.get("cache_peak_rss_mb") or 0,
                           r.get("query_peak_rss_mb") or 0, r.get("query_rss_vs_payload") or 0,
                           r.get("rss_before_queries_mb") or 0, r.get("fresh_idle_rss_mb") or 0,
                           r.get("fresh_first_query_s") or 0, r.get("fresh_peak_rss_mb") or 0,
                           r.get("fresh_rss_vs_payload") or 0),
                        ["query", "result rows", "later p50 ms (target: under 50)"],
                        [[k, v["rows"], v["p50_ms"]] for k, v in r["queries"].items()]),
    "relay": lambda r: ("Relaying a result whole (cache off): added p50 ms over direct (the direct column: its "
                        "p50), median of %d interleaved runs" % r["runs"],
                        ["case"] + list(r["peak_rss_10mb_mb"]), _relay_rows(r)),
    "flight": lambda r: ("Echo calls, 16 in flight, median of %d interleaved runs" % r["runs"],
                         ["case"] + list(r["in_flight_calls_per_s"]["stdlib"]), _flight_rows(r)),
    "serve": lambda r: ("Serving one stdio upstream over HTTP: median of %d interleaved runs (lean client: %d "
                        "calls)" % (r["runs"], r["calls"]), ["case"] + r["systems"],
                        [[case] + [per.get(k) for k in r["systems"]] for case, per in r["median"].items()]),
    "catalog": lambda r: ("Catalog search (Catalog.search, 10 results with snippets, ~1 KB of text per output)",
                          ["outputs", "engine", "query", "queries", "p50 ms", "p90 ms", "insert s", "DB MB"],
                          [[x["rows"], x["engine"], x["query"], x["queries"], x["p50_ms"], x["p90_ms"], x["insert_s"],
                            x["db_mb"]] for x in r]),
}


def report(res: dict) -> str:
    m = res["machine"]
    parts = [f"Machine: {m['cores']} cores, {m['implementation']} {m['python']}, {m['platform']}\n"]
    for key, make in _TABLES.items():
        if key in res:
            parts.append(table(*make(res[key])))
    return "\n".join(parts)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--floor", nargs=3, metavar=("FMT", "N", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="fewer runs and smaller sizes")
    ap.add_argument("--n", type=int, default=500, help="calls per latency measurement")
    ap.add_argument("--peer", default="", help="a peer proxy command; {config} is the config path")
    ap.add_argument("--peer-prefix", default="", help="tool-name prefix the peer adds (e.g. bench_)")
    ap.add_argument("--only", default="", help="comma-separated sections: cold,latency,throughput,storing,context,"
                    "bigcall,query,catalog,relay,"
                    "flight (16 in flight alone, as in relay, with each process's CPU and a floor that parses "
                    "each line; not in the default run), serve (Abstract's --serve against mcp-proxy and "
                    "supergateway over HTTP; not in the default run)")
    ap.add_argument("--serve-floor", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    ap.add_argument("--serve-floor-parsed", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    ap.add_argument("--sdk-client", default="", help=argparse.SUPPRESS)
    ap.add_argument("--sdk-http-client", default="", help=argparse.SUPPRESS)
    ap.add_argument("--serve-calls", type=int, default=4000, help="calls per run of the serve section's lean "
                                                                  "client (8 sessions x 16 in flight)")
    ap.add_argument("--sdk-python", default=os.path.join(os.environ.get("ABSTRACT_INTEROP_HOME") or "/tmp/abstract-interop",
                                                         "venv", "bin", "python"),
                    help="a python with the MCP SDK (mcp) installed: the relay section's SDK client")
    ap.add_argument("--before", default="", help="another abstract.py (the one before a change): a column of its own "
                                                 "in the relay section")
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs of the relay and flight sections")
    ap.add_argument("--flight-calls", type=int, default=2000, help="calls per run of the flight section")
    ap.add_argument("--relay-sizes", default="", help="the relay section's sizes in KB, comma-separated "
                                                      "(of 1,250,1024,10240; default all)")
    ap.add_argument("--relay-calls", type=int, default=0, help="calls per size and run in the relay section "
                                                               "(default 200, 60, 30, 8 by size)")
    ap.add_argument("--json", default="", help="write the figures as JSON to this file")
    ap.add_argument("--markdown", default="", help="write the tables as Markdown to this file")
    a = ap.parse_args(argv)
    if a.serve_upstream:
        serve_upstream()
        return 0
    if a.floor:
        run_floor(a.floor[0], int(a.floor[1]), a.floor[2])
        return 0
    if a.serve_floor:
        serve_floor(a.serve_floor)
        return 0
    if a.serve_floor_parsed:
        serve_floor(a.serve_floor_parsed, parse=True)
        return 0
    if a.sdk_client:
        sdk_client(a.sdk_client)
        return 0
    if a.sdk_http_client:
        sdk_http_client(a.sdk_http_client)
        return 0
    n = 100 if a.quick else a.n
    work = tempfile.mkdtemp(prefix="abstract-bench-")
    config = os.path.join(work, "config.json")
    with open(config, "w") as f:
        json.dump({"mcpServers": {"bench": {"command": sys.executable, "args": [HERE, "--serve-upstream"]}}}, f)
    relay, cached = os.path.join(work, "relay.json"), os.path.join(work, "cached.json")
    with open(relay, "w") as f:  # latency is measured on the relay: large results pass through uncached
        # (http_max_connections: the serve section's 8 x 16 connections at once, above the default 64)
        json.dump({"output_cache": {"enabled": False}, "catalog": {"path": os.path.join(work, "catalog.sqlite3")},
                   "http_max_connections": 256}, f)
    with open(cached, "w") as f:  # defaults, but a cache and a catalog of its own (never the user's)
        json.dump({"output_cache": {"dir": os.path.join(work, "cache")},
                   "catalog": {"path": os.path.join(work, "catalog.sqlite3")}}, f)
    env = {**os.environ, "APP_CONFIG_PATH": config, "ABSTRACT_PROXY_SERVERS": "bench"}
    base_env, relay_env = {**env, "ABSTRACT_CONFIG": cached}, {**env, "ABSTRACT_CONFIG": relay}
    store = os.path.join(work, "store")
    os.makedirs(store)
    targets = [Target("direct", [sys.executable, HERE, "--serve-upstream"], dict(os.environ)),
               Target("abstract", [sys.executable, os.path.join(ROOT, "abstract.py"), store], relay_env, via="bench")]
    if a.peer:
        targets.append(Target("peer", shlex.split(a.peer.replace("{config}", config)), base_env, prefix=a.peer_prefix))
    res: Dict[str, Any] = {"machine": machine(), "command": " ".join(sys.argv)}
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    want = set(a.only.split(",")) if a.only else {"cold", "latency", "throughput", "storing", "context", "bigcall",
                                                  "query", "catalog", "relay"}
    if "cold" in want:
        say("cold start ...")
        res["cold"] = [(t.label, cold_start(t, 5 if a.quick else 15)) for t in targets]
    if "latency" in want:
        res["latency"] = {}
        for size, tool, args in (("echo", "echo", {"text": "hello"}), ("250 KB", "rows", {"n": 1000})):
            say(f"latency {size} ...")
            res["latency"][size] = {t.label: latency(t, tool, args, n, max(10, n // 10)) for t in targets}
    if "throughput" in want:
        say("throughput ...")
        res["throughput"] = {t.label: throughput(t, 400 if a.quick else 2000, 16) for t in targets}
    if "storing" in want:
        say("storing ...")
        sizes = [1000, 10000] if a.quick else [1000, 10000, 100000]
        res["storing"] = storing(base_env, store, sizes, ["json", "csv", "yaml", "xml"])
    if "context" in want:
        say("context ...")
        res["context"] = context(base_env, store, [10, 100, 1024] if a.quick else [10, 100, 1024, 10240])
    if "bigcall" in want:
        say("large result, cache on and off ...")
        mb = 2 if a.quick else 10
        res["bigcall"] = big_call(base_env, relay_env, store, 3 if a.quick else 5,
                                  [(f"{mb} MB text", "blob", {"kb": mb * 1024}),
                                   (f"{mb} MB JSON records", "rows", {"n": mb * 4000})])
    if "query" in want:
        say("query_output ...")
        res["query"] = query_bench(base_env, store, 10000 if a.quick else 100000, 5 if a.quick else 20)
    if want & {"relay", "flight"}:
        upstream = [sys.executable, HERE, "--serve-upstream"]
        relays = [targets[0], Target("floor", [sys.executable, HERE, "--serve-floor", *upstream], dict(os.environ)),
                  *targets[1:]]
        if a.before:
            relays.append(Target("before", [sys.executable, a.before, store], relay_env, via="bench"))
        sdk_py = a.sdk_python if os.path.exists(a.sdk_python) else ""
        if not sdk_py:
            say(f"no MCP SDK python at {a.sdk_python}: the SDK client's rows are left out")
    if "relay" in want:
        say("relay (issue 27) ...")
        res["relay"] = relay_bench(relays, sdk_py, a.runs, a.quick, a.relay_sizes, a.relay_calls)
    if "flight" in want:
        say("16 in flight ...")
        parsed = Target("floor parsed", [sys.executable, HERE, "--serve-floor-parsed", *upstream], dict(os.environ))
        res["flight"] = {"runs": a.runs, **flight_bench(relays[:2] + [parsed] + relays[2:], sdk_py, a.runs,
                                                        a.flight_calls)}
    if "serve" in want:
        say("serving over HTTP (issue 28) ...")
        sdk_py = a.sdk_python if os.path.exists(a.sdk_python) else ""
        res["serve"] = serve_bench(serve_systems(os.path.join(ROOT, "abstract.py"), relay_env, store, a.before),
                                   sdk_py, a.runs, 1000 if a.quick else a.serve_calls)
    if "catalog" in want:
        say("catalog search ...")
        res["catalog"] = catalog_search([10000] if a.quick else [10000, 100000], 50 if a.quick else 200, [10000])
    shutil.rmtree(work, ignore_errors=True)
    text = report(res)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
