#!/usr/bin/env python3
"""What the clients add on top of the API: the Python SDK's create, exec and delete latency
over the unix socket and over TCP, its streamed file throughput, and `bulkhead mcp`'s
run_command beside the same command as a direct exec. Prints figures; asserts nothing.

    python3 bench/sdk.py [--build build] [--runs 50] [--file-mib 256]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "sdk" / "python"))
from startup import Daemon, percentile, timed_ms as timed  # noqa: E402  (same folder)

from bulkhead import Bulkhead  # noqa: E402


def row(label: str, values: list[float]) -> None:
    print(f"  {label:<38} p50 {percentile(values, 50):7.2f}  p95 {percentile(values, 95):7.2f}  "
          f"max {values[-1]:7.2f} ms")


def sdk_figures(client: Bulkhead, runs: int, file_mib: int) -> None:
    row("create + delete", timed(lambda: client.sandboxes.create().delete(), runs))
    with client.sandboxes.create() as sandbox:
        sandbox.exec("true")
        row("exec `true`", timed(lambda: sandbox.exec("true"), runs))
        row("exec `true`, streamed (callbacks)", timed(lambda: sandbox.exec("true", on_stdout=lambda _: None), runs))
        row("files.write 4 KiB", timed(lambda: sandbox.files.write("/tmp/small", b"x" * 4096), runs))
        row("files.read 4 KiB", timed(lambda: sandbox.files.read("/tmp/small"), runs))
        piece = os.urandom(1 << 20)
        started = time.perf_counter()
        sandbox.files.write("/workspace/big", (piece for _ in range(file_mib)))
        write_s = time.perf_counter() - started
        started = time.perf_counter()
        received = sum(len(chunk) for chunk in sandbox.files.read_stream("/workspace/big"))
        read_s = time.perf_counter() - started
        assert received == file_mib << 20
        print(f"  {file_mib} MiB streamed: write {file_mib / write_s:.0f} MiB/s, read {file_mib / read_s:.0f} MiB/s")


def mcp_figures(daemon: Daemon, runs: int) -> None:
    """run_command through `bulkhead mcp` (JSON-RPC over its stdio) beside the same exec."""
    env = {**os.environ, "BULKHEAD_URL": f"http://127.0.0.1:{daemon.port}", "BULKHEAD_API_KEY": daemon.api_key}
    proc = subprocess.Popen([str(daemon.binary), "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1)
    ids = iter(range(1, 1 << 30))

    def call(method: str, params: dict) -> dict:
        message_id = next(ids)
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": message_id, "method": method, "params": params}) + "\n")
        while True:
            answer = json.loads(proc.stdout.readline())
            if answer.get("id") == message_id:
                return answer

    try:
        call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": "bench", "version": "1"}})
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        created = call("tools/call", {"name": "create_sandbox", "arguments": {}})
        sandbox_id = created["result"]["structuredContent"]["id"]
        run = {"name": "run_command", "arguments": {"sandbox_id": sandbox_id, "command": "echo hi"}}
        call("tools/call", run)
        row("mcp run_command `echo hi`", timed(lambda: call("tools/call", run), runs))
        with Bulkhead(url=f"http://127.0.0.1:{daemon.port}", api_key=daemon.api_key) as client:
            sandbox = client.sandboxes.get(sandbox_id)
            row("the same through the SDK (exec)", timed(lambda: sandbox.exec("echo hi"), runs))
        call("tools/call", {"name": "delete_sandbox", "arguments": {"sandbox_id": sandbox_id}})
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", type=Path)
    parser.add_argument("--runs", default=50, type=int)
    parser.add_argument("--file-mib", default=256, type=int)
    args = parser.parse_args()

    daemon = Daemon(args.build)
    try:
        daemon.start()
        for label, url in (("unix socket", f"unix://{daemon.state_dir}/bulkhead.sock"),
                           ("TCP", f"http://127.0.0.1:{daemon.port}")):
            print(f"Python SDK over the {label} (x{args.runs}):")
            with Bulkhead(url=url, api_key=daemon.api_key) as client:
                sdk_figures(client, args.runs, args.file_mib)
        print(f"MCP (x{args.runs}):")
        mcp_figures(daemon, args.runs)
    finally:
        daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
