#!/usr/bin/env bash
# Run the official MCP conformance suite's client scenarios with Abstract as the client
# (client.py drives it), one scenario at a time, and print a table: scenario, result, checks.
#
#   bash tests/conformance/run.sh                  # client scenarios + auth suite (+ backcompat)
#   bash tests/conformance/run.sh --all            # also the draft and extension scenarios
#   bash tests/conformance/run.sh auth/metadata-default sse-retry   # just these
#
# Installed by install.sh (ABSTRACT_CONFORMANCE_HOME, default ~/.cache/abstract-conformance);
# when it is not, one line says so and the exit code is 0. Exit code 1 when a scenario named in
# expected.txt (one name a line, # comments) fails; other failures are reported, not fatal, so
# the list grows as support lands. A scenario passes when the suite's own verdict is a pass: no
# FAILURE or WARNING check, and the client exited 0 (unless the scenario expects it to fail).
# Logs and checks.json of the last run: $ROOT/last-run/<scenario>/.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${ABSTRACT_CONFORMANCE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/abstract-conformance}"
NODE="$ROOT/node_modules/.bin/node"
CLI="$ROOT/node_modules/@modelcontextprotocol/conformance/dist/index.js"
PYTHON="${PYTHON:-python3}"
if [[ ! -f $ROOT/.stamp || ! -x $NODE || ! -f $CLI ]]; then
  echo "[conformance] skipped: suite not installed in $ROOT (bash tests/conformance/install.sh)"
  exit 0
fi
ALL=0
PICK=()
for a in "$@"; do
  case $a in
    --all) ALL=1 ;;
    -*) echo "usage: run.sh [--all] [SCENARIO ...]" >&2; exit 2 ;;
    *) PICK+=("$a") ;;
  esac
done
# `conformance list` prints "  - <name> [<spec versions>]" under "Client scenarios"; draft and
# extension scenarios are informational (the suite does not score them either).
LISTED=()
while IFS= read -r line; do LISTED+=("$line"); done < <("$NODE" "$CLI" list |
  awk '/^Client scenarios/ {on=1; next} /^[^ ]/ {on=0} on && /^  - / {print $2, $3}')
SCENARIOS=()
for line in "${LISTED[@]}"; do
  name=${line%% *}; tags=${line#* }
  if ((${#PICK[@]})); then
    for p in "${PICK[@]}"; do [[ $p == "$name" ]] && SCENARIOS+=("$name"); done
  elif [[ $ALL == 1 || ! $tags =~ ^\[(draft|extension)\]$ ]]; then
    SCENARIOS+=("$name")
  fi
done
if ((${#PICK[@]} && ${#SCENARIOS[@]} != ${#PICK[@]})); then
  echo "[conformance] unknown scenario in: ${PICK[*]}" >&2; exit 2
fi
OUT="$ROOT/last-run"
rm -rf "$OUT"; mkdir -p "$OUT"
# ABSTRACT_PY: the abstract.py to test (default: this checkout's), e.g. another branch's copy.
ABSTRACT_PY="${ABSTRACT_PY:-$(cd "$HERE/../.." && pwd)/abstract.py}"
bounded() {  # `timeout SECONDS CMD...` where there is one (GNU coreutils; not on stock macOS)
  if command -v timeout >/dev/null 2>&1; then timeout "$@"; else shift; "$@"; fi
}
one() {  # one scenario into $2; its exit code in $2/exit
  rm -rf "$2"; mkdir -p "$2"
  # The suite gives the client 60 s; client.py bounds itself at 50 s; timeout bounds the suite.
  (cd "$2" && ABSTRACT_PY="$ABSTRACT_PY" CONFORMANCE_CLIENT_TIMEOUT=50 \
    bounded 150 "$NODE" "$CLI" client --command "$PYTHON $HERE/client.py" --scenario "$1" \
    --timeout 60000 -o "$2" >"$2/log.txt" 2>&1)
  echo $? > "$2/exit"
  echo "$1" > "$2/name"
}
EXPECTED="$(sed 's/#.*//' "$HERE/expected.txt" 2>/dev/null | tr -s ' \t' '\n\n')"
start=$SECONDS
for s in "${SCENARIOS[@]}"; do
  dir="$OUT/${s//\//_}"
  one "$s" "$dir"
  # An expected scenario that fails runs once more (sse-retry's timing window is 450-700 ms, which
  # a loaded machine can miss); the table says so. A real regression fails twice.
  if [[ $(cat "$dir/exit") != 0 ]] && grep -qxF -- "$s" <<<"$EXPECTED"; then
    mv "$dir" "$dir.first"
    one "$s" "$dir"
    [[ $(cat "$dir/exit") == 0 ]] && echo "passed on the second run" > "$dir/note"
  fi
done
"$PYTHON" - "$OUT" "$HERE/expected.txt" "$((SECONDS - start))" <<'EOF'
import glob, json, os, sys
out, expected_file, took = sys.argv[1], sys.argv[2], sys.argv[3]
expected = set()
if os.path.exists(expected_file):
    for line in open(expected_file):
        line = line.split("#", 1)[0].strip()
        if line:
            expected.add(line)
rows, bad, new = [], [], []
for d in sorted(glob.glob(os.path.join(out, "*", "name")), key=os.path.getmtime):
    if d.endswith(".first" + os.sep + "name"):
        continue  # the first run of a scenario that ran twice
    d = os.path.dirname(d)
    name = open(os.path.join(d, "name")).read().strip()
    code = int(open(os.path.join(d, "exit")).read().strip())
    checks = []
    for f in glob.glob(os.path.join(d, "**", "checks.json"), recursive=True):
        checks = json.load(open(f))
    count = {k: sum(c.get("status") == k for c in checks) for k in ("SUCCESS", "FAILURE", "WARNING")}
    why = []
    for c in checks:
        if c.get("status") in ("FAILURE", "WARNING") and c.get("id", "?") not in why:
            why.append(c.get("id", "?"))
    log = open(os.path.join(d, "log.txt"), errors="replace").read()
    failed = [l for l in log.splitlines() if "[client] FAILED:" in l]
    if failed:  # the driver's own line says what Abstract did
        why.insert(0, "client: " + failed[-1].split("FAILED:", 1)[1].strip()[:140])
    elif code != 0 and not why:
        why = ["timed out" if "timed out" in log else f"exit {code}"]
    ok = code == 0
    mark = "pass" if ok else ("FAIL" if name in expected else "fail")
    if not ok and name in expected:
        bad.append(name)
    if ok and name not in expected:
        new.append(name)
    if os.path.exists(os.path.join(d, "note")):
        why.insert(0, open(os.path.join(d, "note")).read().strip())
    rows.append((name, mark, f"{count['SUCCESS']}/{count['FAILURE']}/{count['WARNING']}",
                 "; ".join(why)[:200]))
w = max([len(r[0]) for r in rows] + [8])
print(f"{'scenario':<{w}}  result  ok/fail/warn  first problems")
for r in rows:
    print(f"{r[0]:<{w}}  {r[1]:<6}  {r[2]:<12}  {r[3]}")
passed = sum(r[1] == "pass" for r in rows)
print(f"[conformance] {passed}/{len(rows)} scenarios pass in {took} s; logs: {out}/<scenario>/")
if new:
    print(f"[conformance] passing but not in expected.txt (add them): {' '.join(new)}")
if bad:
    print(f"[conformance] FAILED, expected to pass (expected.txt): {' '.join(bad)}")
    sys.exit(1)
EOF
