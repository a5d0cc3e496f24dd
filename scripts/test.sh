#!/usr/bin/env bash
# Command 2 of the README, and what CI runs: builds, then runs every test — unit tests
# (GoogleTest via ctest), integration tests against real daemons (pytest), the escape
# probe suite inside a sandbox, a short benchmark smoke run, then the sanitizer build (ASan and
# UBSan, clang: a bounded set of integration tests against its daemon; scripts/sanitize.sh
# without --ci runs everything) and every fuzz target for a bounded time in the same tree.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bash scripts/install-test-tools.sh
echo "== unit tests"
(cd build && ctest --output-on-failure --timeout 300)
echo "== integration tests"
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration
echo "== benchmark smoke run (figures only, no assertions)"
/usr/bin/python3 bench/startup.py --quick --build build
echo "== sanitizers: ASan+UBSan build, CI's integration selection"
bash scripts/sanitize.sh address --ci
echo "== fuzzing: each target for a bounded time"
FUZZ_BUILD_DIR=build-asan bash scripts/fuzz.sh "${BULKHEAD_FUZZ_SECONDS:-15}"
