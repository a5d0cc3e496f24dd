#!/usr/bin/env python3
"""What the E2B front costs: the official `e2b` Python SDK (unmodified, pointed at bulkhead by
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY) beside bulkhead's own Python SDK on the same
daemon, call by call: create + kill, a command, a 1 MiB file write and read, a directory
listing. Prints figures; asserts nothing. Needs the test tools' venv (the `e2b` package):

    .tools/venv/bin/python bench/e2b_front.py [--build build] [--runs 30]
"""
import argparse
import http.client
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "sdk" / "python"))
from startup import Daemon, percentile  # noqa: E402  (same folder)
from sdk import row, timed  # noqa: E402

from bulkhead import Bulkhead  # noqa: E402

PAYLOAD = os.urandom(1 << 20)


def e2b_address(daemon: Daemon) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
    try:
        connection.request("GET", "/healthz")
        return json.loads(connection.getresponse().read())["e2b_address"]
    finally:
        connection.close()


def e2b_figures(runs: int) -> None:
    from e2b import Sandbox  # after the variables are set

    row("create + kill", timed(lambda: Sandbox.create(timeout=300).kill(), runs))
    sandbox = Sandbox.create(timeout=600)
    try:
        row("commands.run('true')", timed(lambda: sandbox.commands.run("true"), runs))
        row("files.write 1 MiB", timed(lambda: sandbox.files.write("/home/user/blob", PAYLOAD), runs))
        row("files.read 1 MiB", timed(lambda: sandbox.files.read("/home/user/blob", format="bytes"), runs))
        row("files.list /etc", timed(lambda: sandbox.files.list("/etc"), runs))
    finally:
        sandbox.kill()


def bulkhead_figures(client: Bulkhead, runs: int) -> None:
    row("create + delete", timed(lambda: client.sandboxes.create().delete(), runs))
    with client.sandboxes.create() as sandbox:
        row("exec(['true'])", timed(lambda: sandbox.exec(["true"]), runs))
        row("files.write 1 MiB", timed(lambda: sandbox.files.write("/workspace/blob", PAYLOAD), runs))
        row("files.read 1 MiB", timed(lambda: sandbox.files.read("/workspace/blob"), runs))
        row("files.list /etc", timed(lambda: sandbox.files.list("/etc"), runs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", type=Path)
    parser.add_argument("--runs", default=30, type=int)
    args = parser.parse_args()

    daemon = Daemon(args.build, extra_args=("--e2b-listen", "127.0.0.1:0"))
    try:
        daemon.start()
        url = "http://" + e2b_address(daemon)
        os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url,
                          E2B_API_KEY=(Path(daemon.state_dir) / "e2b-api-key").read_text().strip())
        print(f"e2b Python SDK against the E2B front at {url} (x{args.runs}):")
        e2b_figures(args.runs)
        print(f"bulkhead Python SDK over TCP, same daemon (x{args.runs}):")
        with Bulkhead(url=f"http://127.0.0.1:{daemon.port}", api_key=daemon.api_key) as client:
            bulkhead_figures(client, args.runs)
    finally:
        daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
