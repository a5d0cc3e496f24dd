#!/usr/bin/env bash
# Runs E2B's own Python SDK suites (tests/sync and tests/async of the e2b-dev/E2B repository)
# against a bulkhead daemon of its own, and prints the counts. Not part of CI: it needs a
# checkout of E2B's repository, which is not copied here.
#
#   scripts/e2b-upstream/run.sh BUILD_DIR E2B_PYTHON_SDK_DIR [extra pytest args, e.g. -k connect]
#
# E2B_PYTHON_SDK_DIR is packages/python-sdk of e2b-dev/E2B at the tag of the `e2b` version
# tested (E2B_VERSION, default 2.45.1: tag @e2b/python-sdk@2.45.1). The tests import the
# registry package, installed with their test tools into a venv of its own.
#
# The daemon and pytest run in a network namespace of their own that has only loopback, so no
# test (and no sandbox) can send a packet off the machine, whatever the test tries.
# Tests listed in cloud-only.txt (one "node id  # reason" a line) are deselected: they need
# E2B's cloud, the internet or public https host names.
#
# Environment knobs:
#   E2B_VERSION=2.45.1           the e2b package installed (match the checkout's tag)
#   BHUP_VENV=/tmp/bhup-venv     where the venv is made (kept between runs)
#   BHUP_STATE=/tmp/bhup-state   daemon state dir (wiped before and after)
#   BHUP_WORKERS=0               pytest-xdist workers (0 = serial)
#   BHUP_ALL=1                   ignore cloud-only.txt (run everything; still offline)
#   BHUP_KEEP=1                  leave the daemon running at the end (prints how to stop it)
#   BHUP_SUITES="tests/sync tests/async"
#   BHUP_RESULTS=/tmp/bhup-results  pytest.out, junit.xml, daemon.log
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: $0 BUILD_DIR E2B_PYTHON_SDK_DIR [pytest args]}
sdk=${2:?usage: $0 BUILD_DIR E2B_PYTHON_SDK_DIR [pytest args]}
shift 2
build=$(cd "$build" && pwd)
sdk=$(cd "$sdk" && pwd)
[ -d "$sdk/tests/sync" ] || { echo "$sdk has no tests/sync: give packages/python-sdk of e2b-dev/E2B" >&2; exit 2; }
bulkhead=$build/bulkhead
[ -x "$bulkhead" ] || { echo "no $bulkhead" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run as root (sandboxes need it)" >&2; exit 2; }

state=${BHUP_STATE:-/tmp/bhup-state}
workers=${BHUP_WORKERS:-0}
suites=${BHUP_SUITES:-tests/sync tests/async}
venv=${BHUP_VENV:-/tmp/bhup-venv}
results=${BHUP_RESULTS:-/tmp/bhup-results}
e2b_version=${E2B_VERSION:-2.45.1}
netns=bhup-$$
api_port=17420
e2b_port=17421

# The registry's e2b and the test tools at the versions of the 2.45.1 tag's uv.lock.
if [ ! -x "$venv/bin/pytest" ] || ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('e2b') != '$e2b_version')" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "e2b==$e2b_version" pytest==9.1.1 pytest-asyncio==1.4.0 pytest-xdist==3.8.0 \
    pytest-timeout==2.4.0 python-dotenv==1.2.2 pytest-dotenv==0.5.2
fi

mkdir -p "$results"
log=$results/daemon.log
junit=$results/junit.xml
: > "$log"
rm -f "$junit"

in_ns() { nsenter --net="/run/netns/$netns" "$@"; }

daemon_pid=
cleanup() {
  set +e
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    if [ -n "${BHUP_KEEP:-}" ]; then
      echo "daemon left running: pid $daemon_pid, netns $netns (kill $daemon_pid; ip netns del $netns)"
      return
    fi
    kill -TERM "$daemon_pid"
    for _ in $(seq 1 60); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$daemon_pid" 2>/dev/null && kill -KILL "$daemon_pid"
    wait "$daemon_pid" 2>/dev/null
  fi
  for _ in $(seq 1 20); do mountpoint -q "$state/storage" || break; umount "$state/storage" && break; sleep 0.5; done
  rm -rf "$state"
  ip netns del "$netns" 2>/dev/null
}
trap cleanup EXIT

# A fresh state dir: a mount left by an earlier run is taken down first.
mountpoint -q "$state/storage" 2>/dev/null && umount "$state/storage"
rm -rf "$state"
mkdir -p "$state"

ip netns add "$netns"
ip -n "$netns" link set lo up

# nsenter, not `ip netns exec`: that also remounts /sys, hiding the cgroup mounts. Called
# directly, not through in_ns, so that $! is the daemon itself.
nsenter --net="/run/netns/$netns" "$bulkhead" serve --state-dir "$state" --listen "127.0.0.1:$api_port" \
  --e2b-listen "127.0.0.1:$e2b_port" --warm-pool 2 </dev/null >>"$log" 2>&1 &
daemon_pid=$!

for _ in $(seq 1 120); do
  kill -0 "$daemon_pid" 2>/dev/null || { echo "daemon exited:"; tail -30 "$log"; exit 1; }
  if [ -s "$state/e2b-api-key" ] && in_ns curl -sf "http://127.0.0.1:$api_port/healthz" >/dev/null; then
    break
  fi
  sleep 0.5
done
in_ns curl -sf "http://127.0.0.1:$api_port/healthz" >/dev/null || { echo "daemon not healthy"; tail -30 "$log"; exit 1; }

deselect=()
if [ -z "${BHUP_ALL:-}" ]; then
  while IFS= read -r line; do
    id=${line%%#*}
    id=$(echo "$id" | xargs)
    [ -n "$id" ] && deselect+=("--deselect" "$id")
  done < "$here/cloud-only.txt"
fi

xdist=()
[ "$workers" != 0 ] && xdist=(-n "$workers")

# Only what an E2B user sets to reach a self-hosted front; nothing of the caller's E2B_*.
env_args=(env COLUMNS=400 $(env | grep -o '^E2B_[A-Za-z0-9_]*' | sed 's/^/-u /')
  E2B_API_URL="http://127.0.0.1:$e2b_port"
  E2B_SANDBOX_URL="http://127.0.0.1:$e2b_port"
  E2B_API_KEY="$(cat "$state/e2b-api-key")")

echo "e2b $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("e2b"))'), bulkhead $build, netns $netns"
set +e
(cd "$sdk" && in_ns "${env_args[@]}" "$venv/bin/pytest" -p no:cacheprovider -q -rfEs --tb=native "${xdist[@]}" \
  --junitxml="$junit" -o junit_family=xunit1 "${deselect[@]}" $suites "$@") > "$results/pytest.out" 2>&1
rc=$?
set -e
tail -3 "$results/pytest.out"

leftover=$(in_ns curl -s -H "Authorization: Bearer $(cat "$state/api-key")" "http://127.0.0.1:$api_port/v1/sandboxes" || true)
alive=yes; kill -0 "$daemon_pid" 2>/dev/null || alive=NO

"$venv/bin/python" - "$junit" "$results/pytest.out" "${#deselect[@]}" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
for case in root.iter("testcase"):
    tags = [c.tag for c in case]
    if "failure" in tags: counts["failed"] += 1
    elif "error" in tags: counts["error"] += 1
    elif "skipped" in tags: counts["skipped"] += 1
    else: counts["passed"] += 1
print(f"passed {counts['passed']}  failed {counts['failed']}  errors {counts['error']}  "
      f"skipped {counts['skipped']}  deselected {int(sys.argv[3]) // 2}")
# pytest's short summary (-rfEs): "FAILED node - reason" / "ERROR node - reason" / "SKIPPED [n] file:line: reason"
lines = [l for l in open(sys.argv[2], errors="replace").read().splitlines()
         if re.match(r"(FAILED|ERROR) tests/|SKIPPED \[", l)]
for l in sorted(lines, key=lambda l: (l.split()[0], l.split()[1])):
    print(l[:260])
EOF
echo "daemon alive at the end: $alive; sandboxes left: $(echo "$leftover" | head -c 300)"
echo "full output: $results/pytest.out, daemon log: $log"
exit $rc
