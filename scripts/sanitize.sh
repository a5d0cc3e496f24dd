#!/usr/bin/env bash
# Sanitizer runs. Builds bulkhead with sanitizers (CMake option BULKHEAD_SANITIZE), then runs
# the tests against that build; any sanitizer report fails the run.
#
#   scripts/sanitize.sh [address]   ASan+UBSan into build-asan (clang, with the fuzz targets
#                                   beside: scripts/fuzz.sh reuses the tree with
#                                   FUZZ_BUILD_DIR=build-asan): the unit tests and the whole
#                                   integration suite.
#   scripts/sanitize.sh address --ci   only CI_TESTS, a bounded selection of integration tests
#                                   that scripts/test.sh runs (not the unit tests: their build
#                                   would double CI's sanitizer build time).
#   scripts/sanitize.sh address --ci --build-only   builds that (and the fuzz targets), runs
#                                   nothing: scripts/test.sh does it while the other tests run.
#   scripts/sanitize.sh thread      TSan into build-tsan: the unit tests and the integration
#                                   tests that drive the daemon's concurrent paths (TSAN_TESTS).
#   scripts/sanitize.sh MODE TEST...   the unit tests and only these pytest selections.
#
# Every sanitized process (daemons, the CLI, unit tests) writes its reports to files under a
# fresh /tmp/bhsan-* directory (log_path); the integration harness fails the test during which
# one appears, and this script fails if any is there at the end. bulkhead-init is not
# sanitized this way: see CMakeLists.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-address}
[ $# -gt 0 ] && shift
case $mode in
  address) build=build-asan ;;
  thread) build=build-tsan ;;
  *) echo "usage: $0 [address|thread] [pytest selections...]" >&2; exit 2 ;;
esac

# TSan slows the daemon several times over, so its run takes the tests where the daemon works on
# many threads at once: parallel creates and the warm pool, exec streaming and client hangups,
# background processes and attach, the port proxy and port-forward, the egress proxy and DNS,
# streamed file transfers, restarts and kills, output floods, MCP's tool calls, the E2B front's
# streams, keepalives and watchers, and 200 clients at once.
TSAN_TESTS=(
  tests/integration/test_sandboxes.py
  tests/integration/test_exec.py
  tests/integration/test_processes.py
  tests/integration/test_ports.py
  tests/integration/test_network.py
  tests/integration/test_files_stream.py
  tests/integration/test_restart.py
  tests/integration/test_output_flood.py
  tests/integration/test_lifecycle.py
  tests/integration/test_mcp.py
  tests/integration/test_e2b_control_plane.py
  tests/integration/test_e2b_envd_process.py
  tests/integration/test_e2b_envd_files.py
  tests/integration/test_load.py
)

# CI's selection (scripts/test.sh): the request paths every client drives (HTTP parsing,
# validation, exec, processes, files, hostile input) and the E2B front, a few minutes under ASan.
CI_TESTS=(
  tests/integration/test_bad_input.py
  tests/integration/test_exec.py
  tests/integration/test_processes.py
  tests/integration/test_files.py
  tests/integration/test_files_security.py
  tests/integration/test_e2b_control_plane.py
  tests/integration/test_e2b_envd_process.py
  tests/integration/test_e2b_envd_files.py
  tests/integration/test_image_pull.py
  tests/integration/test_image_build.py
  tests/integration/test_e2b_templates.py
  tests/integration/test_tls.py
  tests/integration/test_tenants.py
  tests/integration/test_tenant_images.py
)

ci=false
build_only=false
if [ "${1:-}" = --ci ]; then
  ci=true
  tests=("${CI_TESTS[@]}")
  [ "${2:-}" = --build-only ] && build_only=true
elif [ $# -gt 0 ]; then
  tests=("$@")
elif [ "$mode" = thread ]; then
  tests=("${TSAN_TESTS[@]}")
else
  tests=(tests/integration)
fi

echo "== build ($mode) into $build"
compiler=()
# The address build is clang's, so that the fuzz targets (libFuzzer is clang's) share its tree.
[ "$mode" = address ] && compiler=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DBULKHEAD_FUZZ=ON)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBULKHEAD_SANITIZE="$mode" "${compiler[@]}" >/dev/null
if $build_only; then
  # scripts/test.sh builds CI's tree while the other tests run: the daemon, and the fuzz
  # targets that scripts/fuzz.sh then finds built.
  targets=(bulkhead)
  [ "$mode" = address ] && targets+=(fuzz-targets)
  ninja -C "$build" -j2 "${targets[@]}"
  exit 0
fi
if $ci; then ninja -C "$build" -j2 bulkhead; else ninja -C "$build" -j2 bulkhead unit-tests; fi
[ -n "${BULKHEAD_TEST_TOOLS_READY:-}" ] || bash scripts/install-test-tools.sh  # (scripts/test.sh ran it)

reports=$(mktemp -d /tmp/bhsan-XXXXXX)
# Reports go to files (log_path) so the CLI's reach the harness too, not only the test's pipes:
# $reports/<phase>/<tool>.<pid>.
# sanitizer_options PHASE [more ASan options]
sanitizer_options() {
  mkdir -p "$reports/$1"
  # ASan: leaks are checked at exit (a daemon killed by SIGKILL in a crash test reports none).
  # A child the daemon forks or clones execs at once or leaves with _exit: it reports nothing.
  export ASAN_OPTIONS="log_path=$reports/$1/asan:detect_leaks=1:check_initialization_order=1${2:+:$2}"
  export UBSAN_OPTIONS="log_path=$reports/$1/ubsan:print_stacktrace=1:halt_on_error=1"
  export LSAN_OPTIONS="suppressions=$PWD/scripts/sanitize/lsan.supp:print_suppressions=0"
  # TSan: keep going after a report so one run shows every race; its exit code (66) and the
  # harness still fail the run.
  export TSAN_OPTIONS="log_path=$reports/$1/tsan:halt_on_error=0:second_deadlock_stack=1:suppressions=$PWD/scripts/sanitize/tsan.supp"
}

status=0
if ! $ci; then
  echo "== unit tests"
  # Allocation stacks unwound the slow way, through libraries without frame pointers, so that
  # lsan.supp can name a libarchive function; too slow for the daemons.
  sanitizer_options unit fast_unwind_on_malloc=0
  (cd "$build" && ctest --output-on-failure --timeout 900) || status=1
fi
echo "== integration tests: ${tests[*]}"
sanitizer_options integration
BULKHEAD_BUILD_DIR="$PWD/$build" /usr/bin/python3 -m pytest -q -p no:cacheprovider "${tests[@]}" || status=1

if compgen -G "$reports/*/*" >/dev/null; then
  echo "== sanitizer reports"
  for f in "$reports"/*/*; do
    echo "---- $f"
    head -n 120 "$f"
  done
  echo "sanitizer reports kept in $reports"
  status=1
else
  rm -r "$reports"
fi
exit $status
