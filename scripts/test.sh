#!/usr/bin/env bash
# Command 2 of the README, and what CI runs: builds, then runs every test — unit tests
# (GoogleTest via ctest), integration tests against real daemons (pytest), the escape
# probe suite inside a sandbox, and a short benchmark smoke run.
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
