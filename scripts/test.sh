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
phase "build"
bash scripts/build.sh
bash scripts/install-test-tools.sh
# (sanitize.sh below needs not install them again: an unreachable registry costs minutes.)
export BULKHEAD_TEST_TOOLS_READY=1
# The sanitizer tree builds while the tests below run, at the lowest CPU priority: it takes the
# CPU they leave idle (they wait on sandboxes much of the time) instead of adding its own minutes.
sanitizer_build_log=$(mktemp /tmp/bulkhead-sanitizer-build-XXXXXX.log)
# (setsid: its own process group, so that a failed run stops the whole build, ninja too.)
setsid nice -n 19 bash scripts/sanitize.sh address --ci --build-only >"$sanitizer_build_log" 2>&1 &
sanitizer_build=$!
trap 'kill -- -"$sanitizer_build" 2>/dev/null || true' EXIT
phase "unit tests"
(cd build && ctest --output-on-failure --timeout 300)
phase "integration tests"
/usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=15 tests/integration
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
if ! wait "$sanitizer_build"; then
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
