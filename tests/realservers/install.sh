#!/usr/bin/env bash
# Install the third-party MCP servers the real-server tests run Abstract against, idempotently.
#
#   bash tests/realservers/install.sh           # npm + PyPI servers, pinned
#   bash tests/realservers/install.sh --force   # reinstall
#
# Into ${ABSTRACT_REALSERVERS_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/abstract-realservers}:
#   node/   npm ci of package.json + package-lock.json (server-filesystem, server-memory,
#           server-everything; and the HTTP peers of the serving tests and benchmarks: mcp-remote,
#           mcp-proxy, supergateway, the MCP Inspector, whose --cli wants node >= 22.19: use the
#           conformance install's node 22 where the system's is older; needs node >= 18 on PATH,
#           else skipped with a warning)
#   venv/   a venv with requirements.lock (mcp-server-git, mcp-server-time and their pinned deps)
# Stamps hold the lock files' hashes, so a run with nothing to do takes well under a second.
# Needs the npm registry and PyPI on the first run only; the tests skip what is not installed.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${ABSTRACT_REALSERVERS_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/abstract-realservers}"
FORCE=0
[[ ${1:-} == --force ]] && FORCE=1
mkdir -p "$ROOT"
say() { printf '[realservers] %s\n' "$*"; }
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

# ---- Python servers -----------------------------------------------------------------------
VENV="$ROOT/venv"
PY_STAMP="$(stamp_of "$HERE/requirements.lock")"
if [[ $FORCE == 0 && -f $VENV/.stamp && "$(cat "$VENV/.stamp")" == "$PY_STAMP" ]]; then
  say "python servers ok: $VENV"
else
  PYTHON=""
  for c in python3.11 python3.12 python3.13 python3 python3.10; do
    if command -v "$c" >/dev/null 2>&1 \
        && "$c" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 10))' 2>/dev/null; then
      PYTHON="$c"; break
    fi
  done
  if [[ -z $PYTHON ]]; then
    say "warning: no python >= 3.10 on PATH; the git and time servers are not installed"
  else
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    if "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        -r "$HERE/requirements.lock" >"$ROOT/pip.log" 2>&1; then
      echo "$PY_STAMP" > "$VENV/.stamp"
      say "python servers installed: $VENV"
    else
      tail -20 "$ROOT/pip.log" >&2
      say "warning: pip install failed (log: $ROOT/pip.log); the git and time servers are skipped"
    fi
  fi
fi

# ---- node servers -------------------------------------------------------------------------
NODE_DIR="$ROOT/node"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  say "warning: node/npm not on PATH; the npm servers are not installed"
else
  NODE_STAMP="$(stamp_of "$HERE/package.json" "$HERE/package-lock.json")"
  if [[ $FORCE == 0 && -f $NODE_DIR/.stamp && "$(cat "$NODE_DIR/.stamp")" == "$NODE_STAMP" ]]; then
    say "npm servers ok: $NODE_DIR"
  else
    rm -rf "$NODE_DIR"; mkdir -p "$NODE_DIR"
    cp "$HERE/package.json" "$HERE/package-lock.json" "$NODE_DIR/"
    if (cd "$NODE_DIR" && npm ci --no-audit --no-fund --ignore-scripts >"$ROOT/npm.log" 2>&1); then
      echo "$NODE_STAMP" > "$NODE_DIR/.stamp"
      say "npm servers installed: $NODE_DIR"
    else
      tail -20 "$ROOT/npm.log" >&2
      say "warning: npm ci failed (log: $ROOT/npm.log); the npm servers are skipped"
    fi
  fi
fi
