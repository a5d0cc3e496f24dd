#!/usr/bin/env python3
"""Workspace API figures (files and background processes) on one daemon. Prints figures;
asserts nothing.

  1. files: latency of GET files/stat, a 4 KiB PUT files and a 4 KiB GET files; throughput of
     a big PUT and GET streamed in 1 MiB pieces, with the daemon's VmRSS before/peak/after;
  2. processes: latency of POST processes (`true`), and the time from start to the exit line
     while following 100 MB of output through the NDJSON output endpoint;
  3. the flood: many background processes each printing 100 MB, each followed by a client,
     while a neighbour sandbox's exec `true` latency is measured (beside its idle latency).

    python3 bench/workspace.py [--build build] [--runs 200] [--quick]
"""
import argparse
import http.client
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup import BulkheadApi, Daemon, percentile, process_status_kib  # noqa: E402  (same folder)

PIECE = 1 << 20
STREAM_CMD = "head -c 100000000 /dev/zero | tr '\\0' x"
STREAM_BYTES = 100_000_000
FLOOD_CMD = "yes abcdefghijklmnopqrstuvwxyz | head -c {size}"


def ms_figures(values: list[float], points=(50, 95, 99)) -> str:
    values = sorted(values)
    return "  ".join(f"p{p} {percentile(values, p):.2f}" for p in points) + f"  max {values[-1]:.2f}"


class RssSampler:
    """Samples the daemon's VmRSS every 10 ms in a thread; keeps the peak."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kib = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            self.peak_kib = max(self.peak_kib, process_status_kib(self.pid, "VmRSS") or 0)
            time.sleep(0.01)

    def __enter__(self) -> "RssSampler":
        self.thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.stop_event.set()
        self.thread.join()


def raw_connection(daemon: Daemon) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=600)


def auth(daemon: Daemon) -> dict:
    return {"Authorization": f"Bearer {daemon.api_key}"}


def put_file(conn, daemon: Daemon, sandbox: str, path: str, size: int) -> None:
    """PUT `size` bytes streamed from one reused 1 MiB piece (never the whole body in memory)."""
    piece = b"b" * min(size, PIECE)

    def pieces():
        left = size
        while left > 0:
            yield piece if left >= len(piece) else piece[:left]
            left -= len(piece)

    headers = {**auth(daemon), "Content-Length": str(size), "Content-Type": "application/octet-stream"}
    conn.request("PUT", f"/v1/sandboxes/{sandbox}/files?path={path}", body=pieces(), headers=headers)
    response = conn.getresponse()
    body = response.read()
    if response.status != 201:
        raise RuntimeError(f"PUT {path} -> {response.status} {body[:200]!r}")


def get_file(conn, daemon: Daemon, sandbox: str, path: str) -> int:
    """GET a file, reading it into one 1 MiB buffer; returns the bytes received."""
    conn.request("GET", f"/v1/sandboxes/{sandbox}/files?path={path}", headers=auth(daemon))
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"GET {path} -> {response.status} {response.read()[:200]!r}")
    buffer = memoryview(bytearray(PIECE))
    received = 0
    while count := response.readinto(buffer):
        received += count
    return received


def follow_output(conn, daemon: Daemon, sandbox: str, pid: int) -> tuple[int, int, int, dict | None]:
    """Follows a process's NDJSON output to its end -> (last offset, gap lines, bytes in gaps, exit
    line). Bytes delivered = last offset - bytes in gaps (the ring overtook the slower client)."""
    conn.request("GET", f"/v1/sandboxes/{sandbox}/processes/{pid}/output?follow=true", headers=auth(daemon))
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"output of {pid} -> {response.status} {response.read()[:200]!r}")
    seen, gaps, gap_bytes, exit_line, tail = 0, 0, 0, None, b""
    while chunk := response.read(PIECE):
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        for line in lines:
            if len(line) < 4096:
                event = json.loads(line)
                if event["type"] == "gap":
                    gaps += 1
                    gap_bytes += event["to"] - event["from"]
                elif event["type"] == "exit":
                    exit_line = event
                if "offset" in event:
                    seen = max(seen, event["offset"])
            else:  # a big data line: only its offset is needed (no full parse)
                at = line.rindex(b'"offset":') + len(b'"offset":')
                end = at
                while line[end:end + 1].isdigit():
                    end += 1
                seen = max(seen, int(line[at:end]))
    return seen, gaps, gap_bytes, exit_line


def timed_ms(action) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def create_sandbox(api: BulkheadApi, daemon: Daemon, **fields) -> str:
    sandbox = api.call("POST", "/v1/sandboxes", {"timeout_s": 0, **fields}, expect=201)["id"]
    daemon.remember(sandbox)
    return sandbox


def delete_sandbox(api: BulkheadApi, daemon: Daemon, sandbox: str) -> None:
    api.delete_sandbox(sandbox)
    daemon.forget(sandbox)


def bench_files(daemon: Daemon, api: BulkheadApi, runs: int, big: int) -> None:
    sandbox = create_sandbox(api, daemon, disk_mb=big // 2**20 + 1024)
    conn = raw_connection(daemon)
    try:
        base = f"/v1/sandboxes/{sandbox}/files"
        put_file(conn, daemon, sandbox, "small.bin", 4096)
        api.call("GET", f"{base}/stat?path=small.bin")  # warm up
        stat = [timed_ms(lambda: api.call("GET", f"{base}/stat?path=small.bin")) for _ in range(runs)]
        put = [timed_ms(lambda: put_file(conn, daemon, sandbox, "small.bin", 4096)) for _ in range(runs)]
        get = [timed_ms(lambda: get_file(conn, daemon, sandbox, "small.bin")) for _ in range(runs)]
        print(f"files x{runs} (ms): GET files/stat  {ms_figures(stat)}")
        print(f"files x{runs} (ms): PUT 4 KiB       {ms_figures(put)}")
        print(f"files x{runs} (ms): GET 4 KiB       {ms_figures(get)}")

        mib = big / 2**20
        rss_before = daemon.rss_bytes() or 0
        with RssSampler(daemon.process.pid) as sampler:
            started = time.perf_counter()
            put_file(conn, daemon, sandbox, "big.bin", big)
            put_s = time.perf_counter() - started
            started = time.perf_counter()
            received = get_file(conn, daemon, sandbox, "big.bin")
            get_s = time.perf_counter() - started
        rss_after = daemon.rss_bytes() or 0
        print(f"files {mib:.0f} MiB in 1 MiB pieces: PUT {put_s:.2f} s ({mib / put_s:.0f} MiB/s), "
              f"GET {get_s:.2f} s ({received / 2**20 / get_s:.0f} MiB/s, {received} bytes); daemon VmRSS "
              f"{rss_before / 2**20:.1f} before, {sampler.peak_kib / 1024:.1f} peak, {rss_after / 2**20:.1f} after (MiB)")
    finally:
        conn.close()
        delete_sandbox(api, daemon, sandbox)


def bench_processes(daemon: Daemon, api: BulkheadApi, runs: int) -> None:
    sandbox = create_sandbox(api, daemon)
    conn = raw_connection(daemon)
    try:
        path = f"/v1/sandboxes/{sandbox}/processes"
        api.call("POST", path, {"cmd": ["true"]}, expect=201)  # warm up
        starts = [timed_ms(lambda: api.call("POST", path, {"cmd": ["true"]}, expect=201)) for _ in range(runs)]
        print(f"processes x{runs} (ms): POST processes `true`  {ms_figures(starts, (50, 99))}")

        started = time.perf_counter()
        pid = api.call("POST", path, {"cmd": STREAM_CMD}, expect=201)["pid"]
        seen, gaps, gap_bytes, exit_line = follow_output(conn, daemon, sandbox, pid)
        seconds = time.perf_counter() - started
        delivered = seen - gap_bytes
        print(f"processes: start -> exit line following 100 MB of output: {seconds:.2f} s; delivered "
              f"{delivered / 1e6:.1f} MB as data ({delivered / 2**20 / seconds:.0f} MiB/s through NDJSON), "
              f"{gap_bytes / 1e6:.1f} MB in {gaps} gaps (ring overtaken), last offset {seen}, "
              f"exit {exit_line and exit_line.get('exit_code')}")
    finally:
        conn.close()
        delete_sandbox(api, daemon, sandbox)


def exec_latencies(api: BulkheadApi, sandbox: str, stop: threading.Event, out: list, limit: int) -> None:
    while not stop.is_set() and len(out) < limit:
        out.append(timed_ms(lambda: api.exec_collect(sandbox, ["true"])))


def bench_flood(daemon: Daemon, api: BulkheadApi, processes: int, size: int) -> None:
    noisy = create_sandbox(api, daemon, memory_mb=2048)
    neighbour = create_sandbox(api, daemon)
    try:
        idle: list[float] = []
        exec_latencies(api, neighbour, threading.Event(), idle, 50)

        pids = [api.call("POST", f"/v1/sandboxes/{noisy}/processes", {"cmd": FLOOD_CMD.format(size=size)},
                         expect=201)["pid"] for _ in range(processes)]
        results: dict = {}

        def follower(pid: int) -> None:
            conn = raw_connection(daemon)
            try:
                results[pid] = follow_output(conn, daemon, noisy, pid)
            except (OSError, http.client.HTTPException, RuntimeError, ValueError) as exc:
                results[pid] = (0, 0, 0, {"error": str(exc)})
            finally:
                conn.close()

        prober_api = BulkheadApi(daemon.port, daemon.api_key)
        stop, busy = threading.Event(), []
        prober = threading.Thread(target=exec_latencies, args=(prober_api, neighbour, stop, busy, 10**6))
        followers = [threading.Thread(target=follower, args=(pid,)) for pid in pids]
        rss_before = daemon.rss_bytes() or 0
        with RssSampler(daemon.process.pid) as sampler:
            started = time.perf_counter()
            prober.start()
            for thread in followers:
                thread.start()
            for thread in followers:
                thread.join()
            seconds = time.perf_counter() - started
            stop.set()
            prober.join()
        prober_api.close()

        gaps = sum(r[1] for r in results.values())
        gap_bytes = sum(r[2] for r in results.values())
        delivered = sum(r[0] for r in results.values()) - gap_bytes
        clean = sum(1 for r in results.values() if r[3] and r[3].get("exit_code") == 0 and r[0] == size)
        print(f"flood: {processes} x {size / 1e6:.0f} MB followed in {seconds:.1f} s; {clean}/{processes} "
              f"accounted for to the end with exit 0; delivered {delivered / 1e6:.0f} MB as data "
              f"({delivered / 2**20 / seconds:.0f} MiB/s in all), {gap_bytes / 1e6:.0f} MB in {gaps} gaps; daemon VmRSS {rss_before / 2**20:.1f} before, {sampler.peak_kib / 1024:.1f} peak (MiB)")
        print(f"flood: neighbour exec `true` (ms): idle p50 {percentile(sorted(idle), 50):.2f} "
              f"p99 {percentile(sorted(idle), 99):.2f}; during the flood "
              f"{ms_figures(busy, (50, 99)) if busy else 'no answer'} ({len(busy)} execs)")
    finally:
        delete_sandbox(api, daemon, noisy)
        delete_sandbox(api, daemon, neighbour)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", type=Path)
    parser.add_argument("--runs", default=None, type=int, help="latency samples (200; 30 with --quick)")
    parser.add_argument("--quick", action="store_true", help="short run: 30 samples, 256 MiB, 10 x 20 MB flood")
    args = parser.parse_args()
    runs = args.runs or (30 if args.quick else 200)
    big = (256 if args.quick else 1024) * 2**20
    processes, size = (10, 20_000_000) if args.quick else (50, 100_000_000)

    daemon = Daemon(args.build)
    try:
        daemon.start()
        api = BulkheadApi(daemon.port, daemon.api_key)
        print(f"workspace benchmark, {time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}")
        bench_files(daemon, api, runs, big)
        bench_processes(daemon, api, runs)
        bench_flood(daemon, api, processes, size)
        api.close()
    finally:
        daemon.stop()
        for line in daemon.cleanup_report:
            print(f"note: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
