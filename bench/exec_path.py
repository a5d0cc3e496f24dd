#!/usr/bin/env python3
"""Exec-path figures of a running sandbox: `true` round-trip latency through the API, and a
1 GiB output flood through a non-streaming exec (throughput, and the daemon's RSS before and
after: the output cap must bound it). Prints figures; asserts nothing.

Where the round trip goes is split out too: a GET and the exec written on a raw keep-alive
socket (no client library's share), the command's own life as init reports it (duration_ms),
and /bin/true forked and waited for by a shell inside the sandbox. And the access checks'
share (issue 24): the same exec and create with a tenant's key (its hash, its scope, whose
sandbox it names, and a create checked against every quota of its tenant) beside the host's key,
interleaved.

    python3 bench/exec_path.py [--build build] [--runs 200]
"""
import argparse
import json
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup import BulkheadApi, Daemon, percentile, timed_ms  # noqa: E402  (same folder)

FLOOD = "head -c 1073741824 /dev/zero | tr '\\0' x"


class RawHttp:
    """Requests written as bytes on one keep-alive socket: the daemon's share without a client's."""

    def __init__(self, port: int, api_key: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.api_key = api_key

    def request(self, method: str, path: str, body: bytes = b"") -> bytes:
        head = (f"{method} {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {self.api_key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        self.sock.sendall(head.encode() + body)
        data = b""
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            data += chunk
            header, sep, rest = data.partition(b"\r\n\r\n")
            if not sep:
                continue
            length = next(int(line.split(b":", 1)[1]) for line in header.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            if len(rest) >= length:
                return rest[:length]


def split_round_trip(api: BulkheadApi, port: int, api_key: str, sandbox: str, runs: int) -> None:
    raw = RawHttp(port, api_key)
    exec_body = json.dumps({"cmd": ["true"]}).encode()
    durations = []

    def raw_exec() -> None:
        durations.append(json.loads(raw.request("POST", f"/v1/sandboxes/{sandbox}/exec", exec_body))["duration_ms"])

    raw.request("GET", f"/v1/sandboxes/{sandbox}")  # (its connection's first request, untimed)
    rows = [
        ("GET /v1/sandboxes/{id} through http.client", timed_ms(lambda: api.call("GET", f"/v1/sandboxes/{sandbox}"), runs)),
        ("the same GET on a raw keep-alive socket", timed_ms(lambda: raw.request("GET", f"/v1/sandboxes/{sandbox}"), runs)),
        ("exec `true` on a raw keep-alive socket", timed_ms(raw_exec, runs)),
    ]
    raw.sock.close()
    for label, values in rows:
        print(f"  {label}: p50 {percentile(values, 50):.2f}  p99 {percentile(values, 99):.2f} ms")
    durations.sort()
    print(f"  the command's own life as init reports it (duration_ms): p50 {percentile(durations, 50):.2f} ms")
    loop = ("s=$(date +%s%N); i=0; while [ $i -lt 1000 ]; do /bin/true; i=$((i+1)); done; "
            "echo $(( ($(date +%s%N) - s) / 1000 ))")
    micros = int(api.exec_collect(sandbox, ["sh", "-c", loop])["stdout"])
    print(f"  /bin/true forked, exec'd and waited for by sh in the sandbox: {micros / 1000 / 1000:.2f} ms each (x1000)")


def tenant_key_share(api: BulkheadApi, port: int, api_key: str, runs: int) -> None:
    tenant = "bench-tenant"
    # With every quota set, so that each create is checked against them all.
    quotas = {"sandboxes": 10000, "cpus": 10000, "memory_mb": 1 << 30, "disk_mb": 1 << 30, "snapshots": 1000,
              "snapshot_bytes": 1 << 45, "creates_per_minute": 100000}
    api.call("POST", "/v1/tenants", {"name": tenant, "quotas": quotas}, expect=201)
    key = api.call("POST", "/v1/keys", {"tenant": tenant, "scope": "user"}, expect=201)["key"]
    ours = BulkheadApi(port, key)
    admins, tenants = api.create_sandbox(), ours.create_sandbox()
    body = json.dumps({"cmd": ["true"]}).encode()
    raw = {"host key": (RawHttp(port, api_key), admins), "tenant key": (RawHttp(port, key), tenants)}
    times = {name: [] for name in raw}
    creates = {name: [] for name in raw}
    for _ in range(runs):
        for name, (conn, sandbox) in raw.items():
            started = time.perf_counter()
            conn.request("POST", f"/v1/sandboxes/{sandbox}/exec", body)
            times[name].append((time.perf_counter() - started) * 1000)
    for _ in range(min(runs, 40)):
        for name, client in (("host key", api), ("tenant key", ours)):
            started = time.perf_counter()
            made = client.create_sandbox()
            creates[name].append((time.perf_counter() - started) * 1000)
            client.delete_sandbox(made)
    for name in raw:
        execs, made = sorted(times[name]), sorted(creates[name])
        print(f"  {name}: exec `true` (raw socket) p50 {percentile(execs, 50):.2f}  p99 {percentile(execs, 99):.2f} ms; "
              f"create p50 {percentile(made, 50):.2f}  p99 {percentile(made, 99):.2f} ms")
        raw[name][0].sock.close()
    api.delete_sandbox(admins)
    ours.delete_sandbox(tenants)
    ours.close()


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

        def exec_true() -> None:
            result = api.exec_collect(sandbox, ["true"])
            assert result["exit_code"] == 0, result

        latencies = timed_ms(exec_true, args.runs)
        print(f"exec `true` x{args.runs} on a running sandbox (ms): p50 {percentile(latencies, 50):.2f}  "
              f"p95 {percentile(latencies, 95):.2f}  p99 {percentile(latencies, 99):.2f}  max {latencies[-1]:.2f}")
        print("where it goes:")
        split_round_trip(api, daemon.port, daemon.api_key, sandbox, args.runs)
        print("the access checks' share, interleaved:")
        tenant_key_share(api, daemon.port, daemon.api_key, args.runs)

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
