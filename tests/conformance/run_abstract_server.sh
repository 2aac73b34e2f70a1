#!/usr/bin/env bash
# The official conformance suite's server scenarios against Abstract itself: abstract.py
# --serve 127.0.0.1:0 --expose direct in front of server_fixture.py (server "conf", prefix "",
# so the scenarios' bare names reach it; SERVER.md), authentication off on loopback
# (--serve-insecure, when this abstract.py has it); then run_server.sh against its URL (target
# @url in expected_server.txt), and Abstract stopped with SIGTERM. Extra arguments go to
# run_server.sh (--all, scenario names). One line and exit 0 when the suite is not installed.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${ABSTRACT_CONFORMANCE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/abstract-conformance}"
PYTHON="${PYTHON:-python3}"
if [[ ! -f $ROOT/.stamp ]]; then
  echo "[conformance] skipped: suite not installed in $ROOT (bash tests/conformance/install.sh)"
  exit 0
fi
WORK="$(mktemp -d)"
mkdir -p "$WORK/out"
"$PYTHON" - "$WORK" "$HERE/server_fixture.py" "$PYTHON" <<'PY'
import json, sys
work, fixture, python = sys.argv[1:4]
json.dump({"mcpServers": {"conf": {"command": python, "args": [fixture]}}},
          open(f"{work}/client.json", "w"))
json.dump({"servers": {"conf": {"prefix": ""}},
           "output_cache": {"dir": f"{work}/cache"}, "catalog": {"path": f"{work}/catalog.db"}},
          open(f"{work}/settings.json", "w"))
PY
ABSTRACT="$HERE/../../abstract.py"
FLAGS=()
"$PYTHON" "$ABSTRACT" --help | grep -q -- --serve-insecure && FLAGS+=(--serve-insecure)
# stdin a pipe held by this script: Abstract ends when it closes, if nothing else stops it
exec 3> >(APP_CONFIG_PATH="$WORK/client.json" ABSTRACT_CONFIG="$WORK/settings.json" \
  "$PYTHON" "$ABSTRACT" --serve 127.0.0.1:0 --expose direct ${FLAGS[@]+"${FLAGS[@]}"} "$WORK/out" \
  2>"$WORK/abstract.log" >/dev/null)
URL=""
for _ in $(seq 300); do  # bounded: 30 s for the line that says where it serves
  URL="$(sed -n 's/.*serving MCP at \(http[^ ]*\).*/\1/p' "$WORK/abstract.log" | head -1)"
  [[ -n $URL ]] && break
  sleep 0.1
done
if [[ -z $URL ]]; then
  echo "[conformance] Abstract did not serve within 30 s:"; cat "$WORK/abstract.log"
  exec 3>&-; rm -rf "$WORK"; exit 1
fi
bash "$HERE/run_server.sh" "$URL" "$@"
code=$?
exec 3>&-  # stdin's EOF: Abstract ends its sessions and the fixture
for _ in $(seq 100); do pgrep -f "$WORK/out" >/dev/null || break; sleep 0.1; done
rm -rf "$WORK"
exit $code
