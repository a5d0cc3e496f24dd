#!/usr/bin/env python3
"""Load (issue 7): N concurrent clients (default 200), each looping create -> exec -> write a
64 KiB file -> read it back -> delete, bounded by --seconds and --loops. Prints throughput
(completed sandboxes per second), p50/p90/p99/max of each step, errors by kind, the daemon's
RSS and descriptors over time, and what was left behind afterwards (harness.find_leaks).
Asserts nothing (tests/integration/test_load.py is the CI-sized check).

    python3 bench/load.py [--build build] [--clients 200] [--seconds 180] [--loops 100000]
"""
import argparse
import json
import shutil
import sys
import tempfile
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
import harness  # noqa: E402
from loadgen import STEPS, LoadRun  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", type=Path)
    parser.add_argument("--clients", default=200, type=int)
    parser.add_argument("--seconds", default=180.0, type=float, help="stop starting loops after this long")
    parser.add_argument("--loops", default=100000, type=int, help="stop after this many loops were started")
    parser.add_argument("--warm-pool", default=4, type=int, help="the daemon's --warm-pool (its default: 4)")
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="passed to `bulkhead serve`, e.g. --serve-arg=--blocking-threads=8; repeatable")
    args = parser.parse_args()
    harness.BULKHEAD = args.build.resolve() / "bulkhead"

    work = Path(tempfile.mkdtemp(prefix="bhld-", dir="/tmp"))
    daemon = harness.Daemon(state_dir=work / "state", log_path=work / "daemon.log", warm_pool=args.warm_pool,
                            extra_args=tuple(args.serve_arg))
    try:
        daemon.start()
        client = daemon.client()
        client.remove(client.create()["id"])  # warm up: the first create pays for the host image
        load_start = open("/proc/loadavg").read().split()[0]

        def progress(t, completed, rss):
            print(f"  {t:6.1f} s  {completed:6d} done  RSS {rss / 2**20 if rss else 0:6.1f} MiB", file=sys.stderr)

        run = LoadRun(daemon.key, daemon.process.pid, port=daemon.port, clients=args.clients,
                      duration_s=args.seconds, max_loops=args.loops, sample_s=5.0, progress=progress)
        result = run.run()
        load_end = open("/proc/loadavg").read().split()[0]
        listed = len(client.list())
        found = harness.leaks(daemon)
        summary = result.summary()
        summary.update(load_average=[load_start, load_end], listed_after=listed, leaks=found,
                       rss_over_time_mib=[(t, round(b / 2**20, 1)) for t, b in result.rss_samples],
                       fds_over_time=result.fd_samples)
    finally:
        daemon.destroy()
        shutil.rmtree(work, ignore_errors=True)

    print(f"{args.clients} clients, create -> exec -> write 64 KiB -> read -> delete, "
          f"{summary['seconds']} s; load average {load_start} -> {load_end}")
    print(f"completed {summary['completed']} sandboxes: {summary['sandboxes_per_s']} per second")
    print(f"\n{'step':<8} {'n':>7} {'p50 ms':>9} {'p90 ms':>9} {'p99 ms':>9} {'max ms':>9}")
    for step in STEPS:
        s = summary["steps"][step]
        print(f"{step:<8} {s['n']:>7} {s['p50_ms'] or '-':>9} {s['p90_ms'] or '-':>9} {s['p99_ms'] or '-':>9} "
              f"{s['max_ms'] or '-':>9}")
    print(f"\nerrors: {summary['errors'] or 'none'}")
    for kind, sample in summary["error_samples"].items():
        print(f"  {kind}: {sample}")
    print(f"daemon RSS MiB: {summary['rss_mib']}; over time: {summary['rss_over_time_mib']}")
    print(f"daemon descriptors: {summary['fds']}")
    print(f"afterwards: {listed} sandboxes listed; leaks: {found or 'none'}")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    path = out / f"load-{datetime.now().strftime('%Y-%m-%d-%H%M%S')}.json"
    path.write_text(json.dumps(summary, indent=1))
    print(f"(figures also in {path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
