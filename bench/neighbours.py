#!/usr/bin/env python3
"""Exhaustion and neighbours (issue 7): how a neighbour sandbox's exec loop fares while another
sandbox runs a fork bomb, a memory bomb, a disk filler, an fd and inotify exhauster, an output
flood and a CPU spinner, one at a time and then all at once. Prints, per phase, the
neighbour's exec latency (p50/p99, and p99 against its idle p99: the goal is within 3x), the
host's responsiveness (spawning `true` on the host, p50/p99), the daemon's RSS before and
after, how long deleting the offender took, and what it left behind (harness.find_leaks).
Asserts nothing (tests/integration/test_exhaustion.py checks the functional parts).

    python3 bench/neighbours.py [--build build] [--seconds 10] [--only "fork bomb,cpu spinner"]
                                [--serve-arg=--output-rate=8 ...]
"""
import argparse
import json
import multiprocessing
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
import harness  # noqa: E402
from loadgen import percentile, process_rss  # noqa: E402
from offenders import (ALL_AT_ONCE, OFFENDER_SPEC, OFFENDERS, FloodClients, neighbour_exec,  # noqa: E402
                       start_offender)

# The output flood once more without its clients: what the sandbox costs its neighbours by
# itself, apart from what the daemon spends relaying its output.
NO_CLIENTS = "output flood alone"
GOAL_RATIO = 3.0  # the neighbour's p99 within 3x its idle p99 (printed, never asserted)


def _flood_main(key, port, sandbox_id, follow_pid, stop, results):
    flood = FloodClients(harness.Client(key, port=port, timeout=120), sandbox_id, follow_pid).start()
    stop.wait()
    flood.stop()
    results.put({"bytes_followed": flood.bytes_followed, "execs": flood.execs})


class FloodProcess:
    """FloodClients in a process of their own, as another user's clients would be: in this one
    they would hold the GIL while they decode 64 MiB answers and pull the followed output, and
    the neighbour's measured latency would be theirs."""

    def __init__(self, daemon, sandbox_id: str, follow_pid: int):
        context = multiprocessing.get_context("spawn")
        self.stopping, self.results = context.Event(), context.Queue()
        self.process = context.Process(target=_flood_main, daemon=True, args=(
            daemon.key, daemon.port, sandbox_id, follow_pid, self.stopping, self.results))
        self.process.start()

    def stop(self) -> dict:
        self.stopping.set()
        counts = self.results.get(timeout=120)
        self.process.join(timeout=60)
        return counts


class Probe:
    """Runs the neighbour's exec loop and the host's spawn loop until stop(); samples RSS."""

    def __init__(self, daemon, neighbour):
        self.daemon, self.neighbour = daemon, neighbour
        self.stopping = threading.Event()
        self.exec_ms, self.exec_errors, self.spawn_ms, self.rss = [], [], [], []
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._execs, self._spawns, self._rss)]

    def _execs(self):
        client, n = self.daemon.client(timeout=120), 0
        while not self.stopping.is_set():
            n += 1
            started = time.perf_counter()
            ok, why = neighbour_exec(client, self.neighbour, n)
            if ok:
                self.exec_ms.append((time.perf_counter() - started) * 1000)
            else:
                self.exec_errors.append(why)

    def _spawns(self):
        while not self.stopping.is_set():
            started = time.perf_counter()
            subprocess.run(["true"])
            self.spawn_ms.append((time.perf_counter() - started) * 1000)
            self.stopping.wait(0.02)

    def _rss(self):
        while not self.stopping.is_set():
            rss = process_rss(self.daemon.process.pid)
            if rss:
                self.rss.append(rss)
            self.stopping.wait(0.5)

    def run(self, seconds):
        for t in self.threads:
            t.start()
        time.sleep(seconds)
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=120)
        return self


def row(name, probe, idle_p99, extra) -> dict:
    p50, p99 = percentile(probe.exec_ms, 0.5), percentile(probe.exec_ms, 0.99)
    return {
        "phase": name, "execs": len(probe.exec_ms), "exec_errors": len(probe.exec_errors),
        "error_samples": probe.exec_errors[:3],
        "p50_ms": p50 and round(p50, 2), "p99_ms": p99 and round(p99, 2),
        "p99_vs_idle": round(p99 / idle_p99, 2) if p99 and idle_p99 else None,
        "host_spawn_p50_ms": round(percentile(probe.spawn_ms, 0.5), 2),
        "host_spawn_p99_ms": round(percentile(probe.spawn_ms, 0.99), 2),
        "rss_max_mib": round(max(probe.rss) / 2**20, 1) if probe.rss else None,
        **extra,
    }


def render(rows) -> str:
    head = (f"{'phase':<25} {'execs':>6} {'err':>4} {'p50 ms':>8} {'p99 ms':>8} {'p99/idle':>8} "
            f"{'host p50':>9} {'host p99':>9} {'RSS MiB':>14} {'delete ms':>10}  leaks")
    lines = [head, "-" * len(head)]
    for r in rows:
        rss = f"{r.get('rss_before_mib', '-')}->{r.get('rss_after_mib', '-')}"
        lines.append(
            f"{r['phase']:<25} {r['execs']:>6} {r['exec_errors']:>4} {r['p50_ms'] or '-':>8} {r['p99_ms'] or '-':>8} "
            f"{r['p99_vs_idle'] or '-':>8} {r['host_spawn_p50_ms']:>9} {r['host_spawn_p99_ms']:>9} {rss:>14} "
            f"{r.get('delete_ms', '-'):>10}  {r.get('leaks') or 'none'}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", type=Path)
    parser.add_argument("--seconds", default=10.0, type=float, help="measuring time per phase")
    parser.add_argument("--only", default="", help="comma-separated offenders (and/or 'all at once')")
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="passed to `bulkhead serve`, e.g. --serve-arg=--output-rate=8; repeatable")
    args = parser.parse_args()
    harness.BULKHEAD = args.build.resolve() / "bulkhead"
    phases = [p.strip() for p in args.only.split(",") if p.strip()] or [*OFFENDERS, NO_CLIENTS, ALL_AT_ONCE]

    work = Path(tempfile.mkdtemp(prefix="bhnb-", dir="/tmp"))
    daemon = harness.Daemon(state_dir=work / "state", log_path=work / "daemon.log", extra_args=tuple(args.serve_arg))
    rows = []
    try:
        daemon.start()
        client = daemon.client()
        neighbour = client.create()["id"]
        for n in range(20):  # warm up
            neighbour_exec(client, neighbour, n)
        load_start = open("/proc/loadavg").read().split()[0]
        idle = Probe(daemon, neighbour).run(args.seconds)
        idle_p99 = percentile(idle.exec_ms, 0.99)
        rows.append(row("idle", idle, idle_p99, {"rss_before_mib": round(process_rss(daemon.process.pid) / 2**20, 1)}))
        print(f"idle: p50 {rows[0]['p50_ms']} ms, p99 {rows[0]['p99_ms']} ms", file=sys.stderr)

        for name in phases:
            rss_before = process_rss(daemon.process.pid)
            offender = client.create(**OFFENDER_SPEC)["id"]
            pids = start_offender(client, offender, "output flood" if name == NO_CLIENTS else name)
            flood, flood_counts = None, None
            if name in ("output flood", ALL_AT_ONCE):
                flood = FloodProcess(daemon, offender, pids[0] if name == "output flood" else pids[1])
            time.sleep(1.5)  # let it reach its wall
            probe = Probe(daemon, neighbour).run(args.seconds)
            usage = client.get(f"/v1/sandboxes/{offender}").json().get("usage", {})
            started = time.perf_counter()
            r = client.delete(f"/v1/sandboxes/{offender}", timeout=300)
            delete_ms = round((time.perf_counter() - started) * 1000, 1)
            if flood:
                flood_counts = flood.stop()
            found = harness.leaks(daemon)
            rows.append(row(name, probe, idle_p99, {
                "rss_before_mib": round(rss_before / 2**20, 1),
                "rss_after_mib": round(process_rss(daemon.process.pid) / 2**20, 1),
                "delete_ms": delete_ms if r.status == 204 else f"{r.status}",
                "offender_usage": usage,
                "flood": flood_counts,
                "leaks": found,
            }))
            print(f"{name}: p50 {rows[-1]['p50_ms']} ms, p99 {rows[-1]['p99_ms']} ms, "
                  f"delete {delete_ms} ms", file=sys.stderr)
        load_end = open("/proc/loadavg").read().split()[0]
    finally:
        daemon.destroy()
        shutil.rmtree(work, ignore_errors=True)

    print(f"neighbour exec loop (`echo`, non-streamed) beside an offender with {OFFENDER_SPEC}; "
          f"{args.seconds:.0f} s per phase; load average {load_start} -> {load_end}")
    print(f"goal (never asserted): neighbour p99 within {GOAL_RATIO:.0f}x its idle p99\n")
    print(render(rows))
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    path = out / f"neighbours-{datetime.now().strftime('%Y-%m-%d-%H%M%S')}.json"
    path.write_text(json.dumps({"seconds": args.seconds, "offender_spec": OFFENDER_SPEC, "serve_args": args.serve_arg,
                                "rows": rows}, indent=1))
    print(f"\n(figures also in {path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
