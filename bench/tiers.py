#!/usr/bin/env python3
"""What a tier costs the work inside it: the same workloads on the host itself (no sandbox),
in a native sandbox and in a gvisor sandbox of one daemon, side by side. Prints figures;
asserts nothing.

  1. exec `true`: the API's round trip to a running sandbox (init forks and execs the command);
  2. workloads timed inside (the exec result's duration_ms; on the host, the same shell line
     timed around `sh -c`), each the median of --runs:
     - untar: unpack a tarball of this repository's source tree (git archive HEAD);
     - grep: `grep -rc` a word through the unpacked tree (reads and stats);
     - spawn: 200 runs of `/bin/true` from a shell loop (fork and exec);
     - write: 256 MiB in 4 KiB writes to a file, then fsync (dd conv=fsync).

    python3 bench/tiers.py [--build build] [--runs 5] [--execs 100] [--quick]
"""
import argparse
import http.client
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup import BulkheadApi, Daemon, RunFailed, percentile  # noqa: E402  (same folder)

REPO = Path(__file__).resolve().parent.parent
TREE = "/workspace/tree"
WORKLOADS = {
    "untar": f"rm -rf {TREE} && mkdir -p {TREE} && tar -xf /workspace/src.tar -C {TREE}",
    "grep": f"grep -rc namespace {TREE} > /dev/null",
    "spawn": "i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i+1)); done",
    "write": "dd if=/dev/zero of=/workspace/big bs=4k count=65536 conv=fsync status=none && rm /workspace/big",
}


def source_tarball() -> bytes:
    return subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", "HEAD"],
                          check=True, capture_output=True).stdout


def upload(daemon: Daemon, sandbox: str, path: str, data: bytes) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=120)
    conn.request("PUT", f"/v1/sandboxes/{sandbox}/files?path={path}", body=data,
                 headers={"Authorization": f"Bearer {daemon.api_key}", "Content-Type": "application/octet-stream"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    if response.status != 201:
        raise RunFailed(f"PUT {path}: {response.status} {body[:200]!r}")


def in_sandbox(api: BulkheadApi, sandbox: str, line: str) -> float:
    result = api.call("POST", f"/v1/sandboxes/{sandbox}/exec", {"cmd": line, "timeout_s": 600})
    if result["exit_code"] != 0:
        raise RunFailed(f"{line!r}: exit {result['exit_code']}: {result['stderr'][:300]}")
    return float(result["duration_ms"])


def on_host(workdir: Path, line: str) -> float:
    line = line.replace("/workspace", str(workdir))
    started = time.perf_counter()
    subprocess.run(["sh", "-c", line], check=True)
    return (time.perf_counter() - started) * 1000


def exec_latencies(api: BulkheadApi, sandbox: str, runs: int) -> list[float]:
    api.exec_collect(sandbox, ["true"])  # warm up
    latencies = []
    for _ in range(runs):
        started = time.perf_counter()
        result = api.exec_collect(sandbox, ["true"])
        latencies.append((time.perf_counter() - started) * 1000)
        if result["exit_code"] != 0:
            raise RunFailed(f"exec true: {result}")
    return sorted(latencies)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", type=Path)
    parser.add_argument("--runs", default=5, type=int)
    parser.add_argument("--execs", default=100, type=int)
    parser.add_argument("--quick", action="store_true", help="--runs 3 --execs 30")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.execs = 3, 30
    tarball = source_tarball()
    print(f"workload tree: {len(tarball) / 2**20:.1f} MiB tarball of {REPO.name} (git archive HEAD)")

    figures: dict[str, dict[str, str]] = {name: {} for name in ["exec true p50/p99 ms", *WORKLOADS]}
    with tempfile.TemporaryDirectory(prefix="bulkhead-tiers-") as workdir:
        (Path(workdir) / "src.tar").write_bytes(tarball)
        for name, line in WORKLOADS.items():
            figures[name]["host"] = f"{statistics.median(on_host(Path(workdir), line) for _ in range(args.runs)):.0f}"
        figures["exec true p50/p99 ms"]["host"] = "-"

    daemon = Daemon(args.build, ("--warm-pool", "0"))
    runtimes = ["native", "gvisor"]
    try:
        daemon.start()
        api = BulkheadApi(daemon.port, daemon.api_key)
        for runtime in runtimes:
            try:
                sandbox = api.create_sandbox(runtime)
            except RunFailed as exc:
                for row in figures.values():
                    row[runtime] = "unavailable"
                print(f"{runtime}: {exc}", file=sys.stderr)
                continue
            daemon.remember(sandbox)
            lat = exec_latencies(api, sandbox, args.execs)
            figures["exec true p50/p99 ms"][runtime] = f"{percentile(lat, 50):.1f} / {percentile(lat, 99):.1f}"
            upload(daemon, sandbox, "/workspace/src.tar", tarball)
            for name, line in WORKLOADS.items():
                if name == "grep":
                    in_sandbox(api, sandbox, WORKLOADS["untar"])
                figures[name][runtime] = f"{statistics.median(in_sandbox(api, sandbox, line) for _ in range(args.runs)):.0f}"
            api.delete_sandbox(sandbox)
            daemon.forget(sandbox)
        api.close()
    finally:
        daemon.stop()
        for line in daemon.cleanup_report:
            print(f"note: {line}")

    columns = ["host", *runtimes]
    print(f"\n{'ms (median of ' + str(args.runs) + ')':<24}" + "".join(f"{c:>16}" for c in columns))
    for name, row in figures.items():
        print(f"{name:<24}" + "".join(f"{row.get(c, '?'):>16}" for c in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
