"""Load (issue 7), CI-sized: 200 concurrent clients loop create -> exec -> write a file ->
read it back -> delete for up to LOAD_SECONDS or LOAD_LOOPS loops. No unexpected error, the
daemon's memory and descriptors stay bounded and come back down, and nothing is left
afterwards. Throughput and latencies are printed (bench/load.py is the full run); nothing
here asserts a time."""

import json
import os

from harness import assert_no_leaks, wait_until
from loadgen import LoadRun, process_fds, process_rss

CLIENTS = int(os.environ.get("BULKHEAD_LOAD_CLIENTS", "200"))
LOAD_SECONDS = float(os.environ.get("BULKHEAD_LOAD_SECONDS", "60"))
LOAD_LOOPS = int(os.environ.get("BULKHEAD_LOAD_LOOPS", "3000"))
RSS_BOUND = 512 * 1024 * 1024  # generous: a few tens of MiB when idle
FD_MARGIN = 16                 # descriptors the daemon may hold more after the run than before


def warm_pool_full(client, size) -> bool:
    r = client.get("/metrics")
    return r.status == 200 and f"bulkhead_warm_pool_ready {size}\n" in r.body.decode()


def test_two_hundred_clients_create_use_and_delete_sandboxes(daemon_factory):
    daemon = daemon_factory(warm_pool=4)  # the daemon's own default
    daemon.start()
    client = daemon.client()
    client.create()  # warm up: the first create pays for the host image
    client.remove(client.list()[0]["id"])
    pid = daemon.process.pid
    assert wait_until(lambda: warm_pool_full(client, 4), timeout=60)
    fds_before = process_fds(pid)

    run = LoadRun(daemon.key, pid, port=daemon.port, clients=CLIENTS, duration_s=LOAD_SECONDS,
                  max_loops=LOAD_LOOPS)
    result = run.run()
    summary = result.summary()
    print("\nload:", json.dumps(summary, indent=1))

    assert run.unexpected_errors() == {}, f"errors: {result.errors}, e.g. {result.error_samples}"
    assert result.completed > 0
    assert result.leftover_sandboxes == []
    assert client.list() == []
    assert max(b for _, b in result.rss_samples) < RSS_BOUND, summary["rss_mib"]
    assert daemon.running(), daemon.log_tail()
    assert process_rss(pid) < RSS_BOUND
    # Every connection and sandbox of the run is closed: the descriptors come back down.
    assert wait_until(lambda: warm_pool_full(client, 4), timeout=60)
    fds_after = process_fds(pid)
    assert fds_after <= fds_before + FD_MARGIN, (fds_before, fds_after)
    assert_no_leaks(daemon)
