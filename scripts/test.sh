#!/usr/bin/env bash
# Command 2 of the README, and what CI runs: builds, then runs every test — unit tests
# (GoogleTest via ctest), integration tests against real daemons (pytest), the escape
# probe suite inside a sandbox, the tier matrices (the core behaviours again on gvisor and on
# microvm), a short benchmark smoke run, then the sanitizer build (ASan and UBSan, clang, built
# meanwhile: a bounded set of integration tests against its daemon;
# scripts/sanitize.sh without --ci runs everything) and every fuzz target for a bounded time in
# the same tree.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's heading says when it started (seconds since this script did): CI's budget.
phase() { echo "== $* [+${SECONDS}s]"; }
phase "install"
bash scripts/install-deps.sh
# Jobs run beside the phases, each in a process group of its own (setsid) so that a failed run
# stops all of it; waited for where their result is needed.
background=()
declare -A logs
trap 'for job in "${background[@]}"; do kill -- -"$job" 2>/dev/null || true; done' EXIT
# Runs "$@" beside what follows, its output kept in a log; sets $job.
beside() {
  local log
  log=$(mktemp /tmp/bulkhead-test-XXXXXX.log)
  setsid "$@" >"$log" 2>&1 &
  job=$!
  background+=("$job")
  logs[$job]=$log
}
# Waits for the job $1 started by `beside`, prints its output, and answers its status.
finish() {
  local status=0 others=() other
  wait "$1" || status=$?
  for other in "${background[@]}"; do [ "$other" = "$1" ] || others+=("$other"); done
  background=("${others[@]}")
  cat "${logs[$1]}"
  rm -f "${logs[$1]}"
  return "$status"
}
phase "build"
# The test tools (PyPI, npm) install while the build runs: their minutes are the network's.
beside bash scripts/install-test-tools.sh
tools=$job
bash scripts/build.sh
phase "test tools: waiting for them"
finish "$tools" || { echo "installing the test tools failed" >&2; exit 1; }
# (sanitize.sh below needs not install them again: an unreachable registry costs minutes.)
export BULKHEAD_TEST_TOOLS_READY=1
# The sanitizer tree builds while the tests below run, at the lowest CPU priority: it takes the
# CPU they leave idle (they wait on sandboxes much of the time) instead of adding its own minutes.
beside nice -n 19 bash scripts/sanitize.sh address --ci --build-only
sanitizer_build=$job
phase "unit tests"
(cd build && ctest --output-on-failure --timeout 300)
phase "integration tests"
/usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=15 tests/integration
# One tier after the other: side by side (tried) they took 371 s instead of 615, but in two
# full runs of two starved something CPU-bound in the sandboxes (gVisor's memory guard let a
# probe past its limit; a microvm image build failed).
phase "tier matrix: the core behaviours on the gvisor tier (tests/integration/tier_matrix.txt)"
if [ ! -x /usr/local/lib/bulkhead/runsc ]; then
  echo "the gvisor tier needs the pinned runsc (scripts/install-runsc.sh)" >&2
  exit 1
fi
(cd tests/integration && BULKHEAD_TEST_RUNTIME=gvisor /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  $(grep -v '^#' tier_matrix.txt))
phase "tier matrix: the core behaviours on the microvm tier (tests/integration/tier_matrix_microvm.txt)"
if [ ! -x /usr/local/lib/bulkhead/microvm/virtiofsd ]; then
  echo "the microvm tier needs what scripts/install-microvm.sh installs" >&2
  exit 1
fi
(cd tests/integration && BULKHEAD_TEST_RUNTIME=microvm /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  $(grep -v '^#' tier_matrix_microvm.txt))
phase "sanitizer build: waiting for it"
sanitizer_build_log=$(mktemp /tmp/bulkhead-sanitizer-build-XXXXXX.log)
if ! finish "$sanitizer_build" >"$sanitizer_build_log"; then
  tail -n 60 "$sanitizer_build_log"
  echo "sanitizer build failed: $sanitizer_build_log" >&2
  exit 1
fi
rm -f "$sanitizer_build_log"
phase "benchmark smoke run (figures only, no assertions)"
/usr/bin/python3 bench/startup.py --quick --build build
phase "sanitizers: ASan+UBSan build, CI's integration selection"
bash scripts/sanitize.sh address --ci
phase "fuzzing: each target for a bounded time"
FUZZ_BUILD_DIR=build-asan bash scripts/fuzz.sh "${BULKHEAD_FUZZ_SECONDS:-15}"
if [ -s .tools/unreachable ]; then
  echo "NOTE: tests needing these test tools were skipped (scripts/install-test-tools.sh):"
  sed 's/^/  /' .tools/unreachable
fi
phase "done"
