"""Run an MCP server (the command after this file's name) as a 2026-07-28-only server: refuse
`initialize` with -32601 on its behalf and pass every other line through unchanged, both ways.

A dual-era server (the official Python SDK's) serves the era of the first request it sees, and
Abstract opens with `initialize`; behind this filter its first request is `server/discover`, so
the server speaks 2026-07-28 and asks with input_required results.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading


def main(cmd: list) -> int:
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    lock = threading.Lock()

    def write(line: bytes) -> None:
        with lock:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    def pump() -> None:  # the server's answers, as they are
        for line in iter(child.stdout.readline, b""):
            write(line)

    threading.Thread(target=pump, daemon=True).start()
    for line in iter(sys.stdin.buffer.readline, b""):
        msg = json.loads(line) if line.strip() else {}
        if msg.get("method") == "initialize":
            write(json.dumps({"jsonrpc": "2.0", "id": msg.get("id"), "error": {
                "code": -32601, "message": "Method not found: initialize (2026-07-28 only)"}}).encode() + b"\n")
            continue
        child.stdin.write(line)
        child.stdin.flush()
    child.stdin.close()
    return child.wait(10)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
