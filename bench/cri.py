#!/usr/bin/env python3
"""CRI start benchmark (issue 25): a pod sandbox and a container through containerd's CRI, from
RunPodSandbox to the container's first output, per runtime handler, in one run.

A private containerd (tests/integration/containerd_harness.py: its own root, mount namespace,
CNI bridge and offline images) serves the handlers `bulkhead` (bulkhead-oci under containerd's
runc shim) and the stock handler that works on this host (runc under the same shim); crictl
drives it as the kubelet would. Each run times, sequentially and alternating handlers:
  runp    RunPodSandbox until the sandbox is ready (CNI included)
  create  CreateContainer (busybox, `echo hi`)
  start   StartContainer
  output  from the start call's return until "hi" is in the container's CRI log file
  total   runp + create + start + output
crictl is a process per call (a Go binary): its own cost, shown as `crictl version`, is in every
figure and the same for every handler. Python 3.11 standard library only; run as root.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
import containerd_harness as ch  # noqa: E402

STEPS = ("runp", "create", "start", "output", "total")


def once(ctd: ch.Containerd, handler: str, n: int) -> dict[str, float]:
    times = {}
    started = time.perf_counter()
    pod = ctd.run_pod(handler, name=f"bench{n}")
    times["runp"] = time.perf_counter() - started
    t = time.perf_counter()
    cid = ctd.create_container(pod, ["/bin/echo", "hi"])
    times["create"] = time.perf_counter() - t
    log_dir = Path(pod.config["log_directory"])
    t = time.perf_counter()
    ctd.start_container(cid)
    times["start"] = time.perf_counter() - t
    t = time.perf_counter()
    deadline = t + 30
    while " hi" not in "".join(log.read_text() for log in log_dir.glob("*.log")):
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{handler}: no output from {cid}")
        time.sleep(0.0005)
    times["output"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - started
    ctd.stop_pod(pod)
    ctd.remove_pod(pod)
    return times


def summary(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    return f"{statistics.median(ms):7.1f} {p90:7.1f} {ms[0]:7.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", help="write the samples here")
    args = parser.parse_args()
    missing = ch.missing_tools()
    if missing:
        print(f"cri: {missing}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bulkhead-cri-bench-") as root:
        ctd = ch.Containerd(Path(root) / "containerd")
        try:
            ctd.start()
            stock, failures = ch.stock_handler(ctd)
            handlers = [h for h in ("bulkhead", stock) if h and h in ctd.handlers]
            for handler, error in failures.items():
                print(f"(stock handler {handler} does not run here: {error.splitlines()[-1][:200]})")
            t = time.perf_counter()
            for _ in range(5):
                ctd.crictl("version")
            print(f"crictl version (a crictl call's own cost): {(time.perf_counter() - t) / 5 * 1000:.1f} ms")
            for handler in handlers:  # warm: image unpacked, shim binaries in the page cache
                once(ctd, handler, 0)
            samples = {h: {s: [] for s in STEPS} for h in handlers}
            for n in range(1, args.runs + 1):
                for handler in handlers:
                    for step, value in once(ctd, handler, n).items():
                        samples[handler][step].append(value)
        finally:
            ctd.destroy()
    print(f"\n{args.runs} runs per handler, sequential; ms as p50 p90 min")
    print(f"{'handler':10} " + " ".join(f"{s:>23}" for s in STEPS))
    for handler, steps in samples.items():
        print(f"{handler:10} " + " ".join(f"{summary(steps[s]):>23}" for s in STEPS))
    if args.json:
        Path(args.json).write_text(json.dumps(samples, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
