"""The daemon killed with SIGKILL in the middle of create, exec, snapshot, fork and delete,
many times over (seeded: BULKHEAD_CRASH_SEED reproduces a run). After each restart nothing is
half-made: every listed sandbox runs commands, every listed snapshot starts sandboxes, and no
cgroup, layer or snapshot directory exists without its row (issue 5, "Survive the daemon")."""

import os
import random
import signal
import threading
import time

import pytest

from harness import cgroup_dirs_of, wait_until

SEED = int(os.environ.get("BULKHEAD_CRASH_SEED", "5"))
ROUNDS = int(os.environ.get("BULKHEAD_CRASH_ROUNDS", "6"))  # per operation


def listed(client, what: str) -> list[dict]:
    r = client.get(f"/v1/{what}")
    assert r.status == 200, r
    return r.json()[what]


def dirs(path) -> set[str]:
    try:
        return {p.name for p in path.iterdir()}
    except FileNotFoundError:
        return set()


def check_invariants(daemon, client, acknowledged: dict):
    sandboxes = {s["id"]: s for s in listed(client, "sandboxes")}
    snapshots = {s["id"]: s for s in listed(client, "snapshots")}
    for sandbox_id, sandbox in sandboxes.items():
        assert sandbox["state"] in ("running", "stopped"), sandbox
        if sandbox["state"] == "stopped":
            r = client.post(f"/v1/sandboxes/{sandbox_id}/start")
            assert r.status == 200, r
        assert client.sh(sandbox_id, "echo alive") == "alive\n"
    # What a call acknowledged is there: the sandbox, its file (as acknowledged, or as a later
    # call whose answer the kill cut off left it), the snapshot.
    for sandbox_id, contents in acknowledged["files"].items():
        if sandbox_id in sandboxes:
            assert client.sh(sandbox_id, "cat /workspace/acked") in contents
    for snapshot_id in acknowledged["snapshots"]:
        assert snapshot_id in snapshots, (snapshot_id, snapshots)
    for sandbox_id in acknowledged["sandboxes"]:
        assert sandbox_id in sandboxes, (sandbox_id, sandboxes)
    for snapshot_id in snapshots:
        started = client.create(from_snapshot=snapshot_id)["id"]
        assert client.sh(started, "cat /workspace/acked") != ""
        client.remove(started)
    # Nothing without a row: cgroups, layers, snapshot trees, sandbox dirs.
    state = daemon.state_dir
    assert dirs(state / "sandboxes") <= set(sandboxes), dirs(state / "sandboxes")
    layers = dirs(state / "storage" / "layers") | dirs(state / "layers")
    assert {l for l in layers if not l.startswith("vol")} <= set(sandboxes), layers
    snapshot_dirs = dirs(state / "storage" / "snapshots") | dirs(state / "snapshots")
    assert snapshot_dirs <= set(snapshots), (snapshot_dirs, snapshots)
    for sandbox_id in set(acknowledged["deleted"]):
        assert sandbox_id not in sandboxes and cgroup_dirs_of(sandbox_id) == [], sandbox_id


@pytest.mark.parametrize("operation", ["create", "exec", "snapshot", "fork", "delete"])
def test_sigkill_during_an_operation_leaves_nothing_half_made(daemon_factory, operation):
    rng = random.Random(f"{SEED}-{operation}")
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    acknowledged = {"files": {}, "snapshots": [], "sandboxes": [], "deleted": []}
    base = client.create()["id"]
    client.sh(base, "echo base > /workspace/acked")
    acknowledged["files"][base] = {"base\n"}

    for round_number in range(ROUNDS):
        victims = [client.create()["id"] for _ in range(2)] if operation == "delete" else []
        for v in victims:
            client.sh(v, "echo v > /workspace/acked")

        def act(c):
            if operation == "create":
                r = c.post("/v1/sandboxes", {})
                if r.status == 201:
                    acknowledged["sandboxes"].append(r.json()["id"])
            elif operation == "exec":
                content = f"round {round_number}\n"
                acknowledged["files"][base].add(content)  # may land without its answer
                r = c.post(f"/v1/sandboxes/{base}/exec", {"cmd": f"printf '{content}' > /workspace/acked; sync"})
                if r.status == 200 and r.json()["exit_code"] == 0:
                    acknowledged["files"][base] = {content}
            elif operation == "snapshot":
                r = c.post(f"/v1/sandboxes/{base}/snapshots", {})
                if r.status == 201:
                    acknowledged["snapshots"].append(r.json()["id"])
            elif operation == "fork":
                r = c.post(f"/v1/sandboxes/{base}/fork", {"count": 3})
                if r.status == 201:
                    acknowledged["sandboxes"] += [s["id"] for s in r.json()["sandboxes"]]
            else:
                for v in victims:
                    if c.delete(f"/v1/sandboxes/{v}").status == 204:
                        acknowledged["deleted"].append(v)

        worker_client = daemon.client(timeout=30)
        worker = threading.Thread(target=lambda: _swallow(act, worker_client))
        worker.start()
        time.sleep(rng.uniform(0, 0.06))  # somewhere inside the call
        daemon.stop(signal.SIGKILL)
        worker.join(timeout=60)
        daemon.start()
        client = daemon.client()
        check_invariants(daemon, client, acknowledged)


def _swallow(fn, client):
    try:
        fn(client)
    except Exception:  # the daemon died under the call: that is the point
        pass
