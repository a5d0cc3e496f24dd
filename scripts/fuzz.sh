#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan, UBSan) into build-fuzz (or
# $FUZZ_BUILD_DIR) and runs each for a bounded time, one per CPU at a time:
#
#   scripts/fuzz.sh [seconds-per-target] [target...]     (default: 30 s, every target)
#
# Exits non-zero if any target crashed, leaked, ran out of memory or hung. The input that did
# it is kept in <build>/fuzz-findings/<target>/ (crash-*, leak-*, oom-*, timeout-*, named by
# libFuzzer) with the run's log beside it, <build>/fuzz-findings/<target>.log; reproduce with
#   <build>/tests/fuzz/fuzz_<target> <build>/fuzz-findings/<target>/crash-...
# What the fuzzer learns is kept in <build>/fuzz-corpus/<target>/ for the next run; the seed
# corpora in tests/fuzz/corpus/ are only read. Needs root: file_ops and tar_extract chroot.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
[ $# -gt 0 ] && shift
all_targets=(http_server json_requests mcp_session file_ops tar_extract allow_rules dns_message tls_sni dockerfile e2b_template)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FUZZ_BUILD_JOBS:-2}

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ is missing (scripts/install-deps.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "fuzz: run as root (file_ops and tar_extract chroot into temporary trees)" >&2
  exit 1
fi

echo "== fuzz: building ${targets[*]} in $build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DBULKHEAD_FUZZ=ON >/dev/null
ninja -C "$build" -j"$jobs" $(printf 'fuzz_%s ' "${targets[@]}")

findings="$build/fuzz-findings"
# run_target TARGET: one fuzzer for its bounded time; its verdict on stdout and stderr, its
# exit status 1 on a finding. Run as a background job: a TERM (the run interrupted) takes its
# fuzzer along.
run_target() {
  local target=$1
  local binary="$build/tests/fuzz/fuzz_$target"
  local corpus="$build/fuzz-corpus/$target"
  mkdir -p "$corpus" "$findings/$target"
  local log="$findings/$target.log"
  rm -f "$findings/$target.invariant"
  local options=(-max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -max_len=65536
                 -artifact_prefix="$findings/$target/" -print_final_stats=1)
  [ -f "tests/fuzz/$target.dict" ] && options+=(-dict="tests/fuzz/$target.dict")
  # bulkhead mcp logs every call on stderr; libFuzzer keeps its own output and reports. The
  # sanitizers' reports would go with stderr: they go to files instead, shown on a failure.
  local sanitizer_env=()
  rm -f "$findings/$target".asan.* "$findings/$target".ubsan.*
  if [ "$target" = mcp_session ]; then
    options+=(-close_fd_mask=2)
    sanitizer_env=(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}log_path=$findings/$target.asan"
                   UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}log_path=$findings/$target.ubsan")
  fi
  echo "== fuzz: $target for ${seconds}s"
  local start status=0 fuzzer
  start=$(date +%s)
  env "${sanitizer_env[@]}" FUZZ_FAIL_LOG="$findings/$target.invariant" "$binary" "${options[@]}" "$corpus" "tests/fuzz/corpus/$target" >"$log" 2>&1 &
  fuzzer=$!
  trap 'kill "$fuzzer" 2>/dev/null; exit 1' TERM
  wait "$fuzzer" || status=$?
  # A crash skips the harness's cleanup of its temporary trees (named with its pid).
  rm -rf /tmp/bh-fuzz-*-"$fuzzer"-*
  local runs
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  if [ "$status" -eq 0 ]; then
    echo "fuzz: $target ok, $runs inputs"
    return 0
  fi
  {
    echo "fuzz: $target FAILED (exit $status) after $(( $(date +%s) - start ))s; log: $log"
    grep -E '^==[0-9]+==ERROR|^SUMMARY|fuzz invariant broken|Test unit written to|^artifact_prefix' "$log" | head -20 || true
    [ -f "$findings/$target.invariant" ] && head -c 4000 "$findings/$target.invariant"
    for report in "$findings/$target".asan.* "$findings/$target".ubsan.*; do
      [ -f "$report" ] && head -c 8000 "$report"
    done
    # The crashing input itself, so a CI log alone reproduces it.
    for unit in "$findings/$target"/crash-* "$findings/$target"/leak-* "$findings/$target"/timeout-*; do
      [ -f "$unit" ] && { echo "input (base64) $unit:"; head -c 3000 "$unit" | base64 -w 0; echo; }
    done
  } >&2
  return 1
}

# One fuzzer per CPU at a time (each runs on one): CI's two cores fuzz two targets at once.
parallel=${FUZZ_JOBS:-$(nproc)}
failed=()
declare -A running=()  # pid -> target
# An interrupted run takes the fuzzers it started along.
trap 'for p in "${!running[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
reap_one() {
  local done_pid status=0
  wait -n -p done_pid "${!running[@]}" || status=$?
  [ "$status" -eq 0 ] || failed+=("${running[$done_pid]}")
  unset "running[$done_pid]"
}
for target in "${targets[@]}"; do
  while [ ${#running[@]} -ge "$parallel" ]; do reap_one; done
  run_target "$target" &
  running[$!]=$target
done
while [ ${#running[@]} -gt 0 ]; do reap_one; done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]} (inputs in $findings/<target>/)" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s each without a finding"
