#!/usr/bin/env python3
"""Density (issue 23): how many idle sandboxes one host holds, and what each costs.

Creates idle sandboxes one at a time, in steps, up to --target (default 10,000) or until the
host's MemAvailable falls to --memory-floor-mib. After each step it prints the host memory per
sandbox (the drop of MemAvailable since the start, divided by the count), the three slab caches
that grew most, create p50/p99 within the step, the daemon's RSS, and whether a sample of the
sandboxes still runs a command. Then it deletes them all (--delete-clients at once) and reports
the delete rate, the memory not returned and anything left behind (harness.find_leaks).
Asserts nothing (tests/integration/test_density.py is the CI-sized check). Run as root.

    python3 bench/density.py [--build build] [--target 10000] [--step 500] [--memory-mb 64]
"""
import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
import harness  # noqa: E402


def meminfo(field: str) -> int:
    """/proc/meminfo's `field` in bytes."""
    for line in open("/proc/meminfo"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def slab_bytes() -> dict[str, int]:
    """Bytes held by each slab cache (num_objs × objsize)."""
    caches = {}
    with open("/proc/slabinfo") as f:
        for line in f.readlines()[2:]:
            parts = line.split()
            caches[parts[0]] = int(parts[2]) * int(parts[3])
    return caches


def rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] if ordered else 0.0


def mounted_devices(client, sandbox_id) -> set[str]:
    """The devices (superblocks) of the mounts a sandbox sees."""
    out = client.exec(sandbox_id, ["cat", "/proc/self/mountinfo"])["stdout"]
    return {line.split()[2] for line in out.splitlines() if len(line.split()) > 2}


def count_memory_cgroups() -> int:
    for root in (Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup")):
        if (root / "cgroup.procs").exists():
            return sum(1 for _ in root.rglob("cgroup.procs"))
    return 0


def mib(n: float) -> str:
    return f"{n / 2**20:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", type=Path)
    parser.add_argument("--target", default=10000, type=int, help="sandboxes to reach")
    parser.add_argument("--step", default=500, type=int, help="sandboxes per printed step")
    parser.add_argument("--memory-floor-mib", default=2048, type=int,
                        help="stop creating when MemAvailable falls below this")
    parser.add_argument("--memory-mb", default=64, type=int, help="each sandbox's memory_mb")
    parser.add_argument("--runtime", default="native")
    parser.add_argument("--sample", default=5, type=int, help="sandboxes checked to run a command per step")
    parser.add_argument("--delete-clients", default=8, type=int, help="deletes sent at once")
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="passed to `bulkhead serve`; repeatable")
    args = parser.parse_args()
    harness.BULKHEAD = args.build.resolve() / "bulkhead"

    work = Path(tempfile.mkdtemp(prefix="bhdn-", dir="/tmp"))
    daemon = harness.Daemon(state_dir=work / "state", log_path=work / "daemon.log", warm_pool=0,
                            extra_args=("--max-sandboxes", str(args.target + 16), *args.serve_arg))
    report = {"started": datetime.now().isoformat(timespec="seconds"), "args": {k: str(v) for k, v in vars(args).items()},
              "steps": []}
    ids: list[str] = []
    try:
        daemon.start()
        client = daemon.client(timeout=600)
        client.remove(client.create(runtime=args.runtime)["id"])  # the first create pays for the host image
        time.sleep(1)
        base_avail, base_slab, base_cgroups = meminfo("MemAvailable"), slab_bytes(), count_memory_cgroups()
        print(f"start: MemAvailable {mib(base_avail)} MiB, memory cgroups {base_cgroups}", file=sys.stderr)
        print(f"{'count':>6} {'MiB/sb':>7} {'marginal':>8} {'create p50':>10} {'p99 ms':>7} {'RSS MiB':>8} "
              f"{'sample':>6}  slab growth (top three, MiB)")
        failure = None
        last_count, last_avail = 0, base_avail
        while len(ids) < args.target and failure is None:
            times = []
            for _ in range(min(args.step, args.target - len(ids))):
                if meminfo("MemAvailable") < args.memory_floor_mib * 2**20:
                    failure = f"MemAvailable below the floor of {args.memory_floor_mib} MiB"
                    break
                t0 = time.perf_counter()
                r = client.post("/v1/sandboxes", {"runtime": args.runtime, "memory_mb": args.memory_mb})
                times.append((time.perf_counter() - t0) * 1000)
                if r.status != 201:
                    failure = f"create {len(ids) + 1} -> {r.status} {r.body[:200]!r}"
                    break
                ids.append(r.json()["id"])
            if not times or not ids:
                break
            avail, slab = meminfo("MemAvailable"), slab_bytes()
            grown = sorted(((slab.get(k, 0) - base_slab.get(k, 0), k) for k in slab), reverse=True)[:3]
            sample = random.sample(ids, min(args.sample, len(ids)))
            answered = sum(1 for s in sample
                           if client.exec_raw(s, ["echo", "ok"]).json().get("stdout") == "ok\n")
            per = (base_avail - avail) / len(ids)
            marginal = (last_avail - avail) / max(1, len(ids) - last_count)
            last_count, last_avail = len(ids), avail
            step = {"count": len(ids), "host_bytes_per_sandbox": per, "marginal_bytes_per_sandbox": marginal,
                    "create_p50_ms": percentile(times, 50), "create_p99_ms": percentile(times, 99),
                    "daemon_rss_bytes": rss_bytes(daemon.process.pid),
                    "slab_growth_top3": [(k, b) for b, k in grown], "sample_answered": [answered, len(sample)],
                    "memory_cgroups": count_memory_cgroups()}
            report["steps"].append(step)
            print(f"{len(ids):>6} {mib(per):>7} {mib(marginal):>8} {step['create_p50_ms']:>10.2f} "
                  f"{step['create_p99_ms']:>7.1f} {mib(step['daemon_rss_bytes']):>8} {answered:>3}/{len(sample):<2}  "
                  + ", ".join(f"{k} {b / 2**20:.0f}" for b, k in grown), flush=True)
        if len(ids) >= 2:
            a, b = mounted_devices(client, ids[0]), mounted_devices(client, ids[1])
            report["superblocks_per_sandbox"] = len(a - b)
            report["superblocks_shared"] = len(a & b)
            print(f"superblocks a sandbox sees: {len(a)}, its own {len(a - b)}; "
                  f"memory cgroups {count_memory_cgroups() - base_cgroups} more than at the start")
        report["stopped_because"] = failure or "target reached"
        print(f"stopped: {report['stopped_because']}")

        # Delete them all, --delete-clients at once.
        t0 = time.perf_counter()
        errors = harness.delete_concurrently(daemon, ids, args.delete_clients)
        took = time.perf_counter() - t0
        rate = len(ids) / took if took else 0
        ids.clear()
        time.sleep(5)  # RCU callbacks and deferred frees
        avail, slab = meminfo("MemAvailable"), slab_bytes()
        kept = sorted(((slab.get(k, 0) - base_slab.get(k, 0), k) for k in slab), reverse=True)[:3]
        found = harness.leaks(daemon)
        report.update(deleted=len(report["steps"]) and report["steps"][-1]["count"], delete_seconds=took,
                      delete_rate_per_s=rate, delete_errors=errors[:20], memory_not_returned_bytes=base_avail - avail,
                      slab_not_returned_top3=[(k, b) for b, k in kept], leaks=found)
        print(f"deleted {report['deleted']} in {took:.1f} s: {rate:.0f} per second ({args.delete_clients} at once), "
              f"{len(errors)} errors")
        print(f"memory not returned: {mib(base_avail - avail)} MiB; slab still grown: "
              + ", ".join(f"{k} {b / 2**20:.1f} MiB" for b, k in kept))
        print("left behind: " + (json.dumps(found) if found else "nothing"))
    finally:
        if ids:
            client = daemon.client(timeout=600)
            for sandbox_id in ids:
                client.delete(f"/v1/sandboxes/{sandbox_id}")
        daemon.destroy()
        results = HERE / "results"
        results.mkdir(exist_ok=True)
        out = results / f"density-{datetime.now():%Y-%m-%d-%H%M%S}.json"
        out.write_text(json.dumps(report, indent=1))
        print(f"figures: {out}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
