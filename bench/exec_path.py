#!/usr/bin/env python3
"""Exec-path figures of a running sandbox: `true` round-trip latency through the API, and a
1 GiB output flood through a non-streaming exec (throughput, and the daemon's RSS before and
after: the output cap must bound it). Prints figures; asserts nothing.

    python3 bench/exec_path.py [--build build] [--runs 200]
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup import BulkheadApi, Daemon, percentile  # noqa: E402  (same folder)

FLOOD = "head -c 1073741824 /dev/zero | tr '\\0' x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", type=Path)
    parser.add_argument("--runs", default=200, type=int)
    args = parser.parse_args()

    daemon = Daemon(args.build)
    try:
        daemon.start()
        api = BulkheadApi(daemon.port, daemon.api_key)
        sandbox = api.create_sandbox()
        daemon.remember(sandbox)
        api.exec_collect(sandbox, ["true"])  # warm up

        latencies = []
        for _ in range(args.runs):
            started = time.perf_counter()
            result = api.exec_collect(sandbox, ["true"])
            latencies.append((time.perf_counter() - started) * 1000)
            assert result["exit_code"] == 0, result
        latencies.sort()
        print(f"exec `true` x{args.runs} on a running sandbox (ms): p50 {percentile(latencies, 50):.2f}  "
              f"p95 {percentile(latencies, 95):.2f}  p99 {percentile(latencies, 99):.2f}  max {latencies[-1]:.2f}")

        api.exec_collect(sandbox, ["sh", "-c", "head -c 20000000 /dev/zero"])  # the cap's buffers, once
        rss_before = daemon.rss_bytes() or 0
        started = time.perf_counter()
        result = api.call("POST", f"/v1/sandboxes/{sandbox}/exec", {"cmd": FLOOD, "timeout_s": 300})
        seconds = time.perf_counter() - started
        rss_after = daemon.rss_bytes() or 0
        print(f"1 GiB of stdout through a non-streaming exec: {seconds:.2f} s ({1024 / seconds:.0f} MiB/s), "
              f"truncated={result['truncated']}, kept {len(result['stdout']) / 2**20:.0f} MiB; "
              f"daemon VmRSS {rss_before / 2**20:.1f} -> {rss_after / 2**20:.1f} MiB")
        api.delete_sandbox(sandbox)
        daemon.forget(sandbox)
        api.close()
    finally:
        daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
