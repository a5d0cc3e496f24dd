"""The daemon killed with SIGKILL in the middle of create, exec, file writes, snapshot, fork
and delete, and of memory snapshots, memory forks, restores, pauses to disk and resumes from
disk (gvisor), many times over (seeded: BULKHEAD_CRASH_SEED reproduces a run, BULKHEAD_CRASH_ROUNDS
sets the rounds per operation). After each restart nothing is half-made and nothing leaks:
every listed sandbox runs commands, every listed snapshot starts sandboxes, every file a call
acknowledged is there byte for byte (one it did not may be old or new, never a mix), and no
process, mount, cgroup, network namespace, link, nftables table, loop device, uid range or
directory exists without its sandbox (harness.find_leaks). Issue 5 "Survive the daemon",
issue 7 "Fault injection".

The daemons run in a network namespace of their own, so open-mode sandboxes (which get a
veth pair and a host-side nftables table) can be part of it without touching the host's."""

import hashlib
import http.client
import os
import random
import signal
import subprocess
import threading
import time
import uuid

import pytest

from harness import assert_no_leaks, files_url, sandbox_host_uid_range

SEED = int(os.environ.get("BULKHEAD_CRASH_SEED", "5"))
ROUNDS = int(os.environ.get("BULKHEAD_CRASH_ROUNDS", "5"))  # per operation
OPERATIONS = ["create", "exec", "write", "snapshot", "fork", "delete"]
# On a gvisor base sandbox (test_memory_snapshots.py): a snapshot with memory, a fork with
# memory, and a create restoring a memory snapshot. On a microvm one, "@microvm", the save,
# the restore and the pause to disk (fewer rounds: each is a guest's save or load under TCG).
MEMORY_OPERATIONS = ["memory-snapshot", "memory-fork", "restore", "pause-to-disk", "resume-from-disk"]
MICROVM_OPERATIONS = ["memory-snapshot@microvm", "restore@microvm", "pause-to-disk@microvm"]
MICROVM_ROUNDS = min(ROUNDS, 3)
WRITE_TEMP_PREFIX = ".bulkhead-write-"  # common/ctl_protocol.h kWriteTempPrefix


@pytest.fixture(scope="module")
def crash_netns():
    name = f"bhcrash-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], capture_output=True)


def listed(client, what: str) -> list[dict]:
    r = client.get(f"/v1/{what}")
    assert r.status == 200, r
    return r.json()[what]


def dirs(path) -> set[str]:
    try:
        return {p.name for p in path.iterdir()}
    except FileNotFoundError:
        return set()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_file(client, sandbox_id, path) -> bytes | None:
    r = client.get(files_url(sandbox_id, path=path))
    if r.status == 404:
        return None
    assert r.status == 200, r
    return r.body


class Acknowledged:
    """What calls answered (and so must survive), and what calls cut off may have done."""

    def __init__(self):
        self.sandboxes, self.deleted, self.snapshots = [], [], []
        self.exec_contents: dict[str, set[str]] = {}  # sandbox -> contents /workspace/acked may hold
        self.files: dict[tuple, set] = {}  # (sandbox, path) -> hashes it may hold; None = absent
        self.uid_ranges: list[tuple] = []  # of deleted sandboxes: nothing may run there


def check_invariants(daemon, client, ack: Acknowledged):
    sandboxes = {s["id"]: s for s in listed(client, "sandboxes")}
    snapshots = {s["id"]: s for s in listed(client, "snapshots")}
    for sandbox_id, sandbox in sandboxes.items():
        assert sandbox["state"] in ("running", "stopped", "paused"), sandbox
        if sandbox["state"] == "paused":  # paused to disk: resumed with its processes
            assert sandbox["paused_to_disk"], sandbox
            r = client.post(f"/v1/sandboxes/{sandbox_id}/resume")
            assert r.status == 200, r
        if sandbox["state"] == "stopped":
            r = client.post(f"/v1/sandboxes/{sandbox_id}/start")
            assert r.status == 200, r
        assert client.sh(sandbox_id, "echo alive") == "alive\n"
    # What a call acknowledged is there: the sandbox, its file (as acknowledged, or as a later
    # call whose answer the kill cut off left it), the snapshot.
    for sandbox_id, contents in ack.exec_contents.items():
        if sandbox_id in sandboxes:
            assert client.sh(sandbox_id, "cat /workspace/acked") in contents
    for (sandbox_id, path), hashes in ack.files.items():
        if sandbox_id in sandboxes:
            data = read_file(client, sandbox_id, path)
            got = None if data is None else sha(data)
            assert got in hashes, f"{path}: {len(data or b'')} bytes, sha256 {got}, not one of {hashes}"
    for sandbox_id in {s for s, _ in ack.files} & set(sandboxes):
        # A write the kill cut off leaves no temporary file behind.
        names = client.sh(sandbox_id, "ls -A /workspace").split()
        assert not [n for n in names if n.startswith(WRITE_TEMP_PREFIX)], names
    for snapshot_id in ack.snapshots:
        assert snapshot_id in snapshots, (snapshot_id, snapshots)
    for sandbox_id in ack.sandboxes:
        assert sandbox_id in sandboxes, (sandbox_id, sandboxes)
    for sandbox_id in ack.deleted:
        assert sandbox_id not in sandboxes, sandbox_id
    for snapshot_id in snapshots:
        started = client.create(from_snapshot=snapshot_id)["id"]
        assert client.sh(started, "cat /workspace/acked") != ""
        client.remove(started)
    state = daemon.state_dir
    snapshot_dirs = dirs(state / "storage" / "snapshots") | dirs(state / "snapshots") | dirs(state / "memory")
    assert snapshot_dirs <= set(snapshots), (snapshot_dirs, snapshots)
    # Nothing without its sandbox: processes, mounts, cgroups, namespaces, links, tables,
    # loop devices, uid ranges, directories.
    assert_no_leaks(daemon, ack.uid_ranges)


def act(operation, client, base, victims, round_number, plan, ack: Acknowledged):
    """One call of `operation` (with what `plan` drew for it); records what its answer
    acknowledged. The daemon is killed somewhere inside it."""
    if operation == "create":
        r = client.post("/v1/sandboxes", {"network": {"mode": plan["network"]}})
        if r.status == 201:
            ack.sandboxes.append(r.json()["id"])
    elif operation == "exec":
        content = f"round {round_number}\n"
        ack.exec_contents[base].add(content)  # may land without its answer
        # Replaced by a rename: a shell's `>` truncates before it writes, and the kill (which
        # ends a foreground command with its client) may land in between.
        r = client.post(f"/v1/sandboxes/{base}/exec",
                        {"cmd": f"printf '{content}' > /workspace/acked.new && mv /workspace/acked.new /workspace/acked; sync"})
        if r.status == 200 and r.json()["exit_code"] == 0:
            ack.exec_contents[base] = {content}
    elif operation == "write":
        for path, data in plan["files"]:
            key = (base, path)
            ack.files.setdefault(key, {None}).add(sha(data))  # may land without its answer
            r = client.request("PUT", files_url(base, path=path), body=data,
                               headers={"Content-Type": "application/octet-stream"})
            if r.status != 201:
                return
            assert r.json()["size"] == len(data), r
            ack.files[key] = {sha(data)}
    elif operation == "snapshot":
        r = client.post(f"/v1/sandboxes/{base}/snapshots", {})
        if r.status == 201:
            ack.snapshots.append(r.json()["id"])
    elif operation == "memory-snapshot":
        r = client.post(f"/v1/sandboxes/{base}/snapshots", {"memory": True})
        if r.status == 201:
            ack.snapshots.append(r.json()["id"])
    elif operation in ("fork", "memory-fork"):
        r = client.post(f"/v1/sandboxes/{base}/fork", {"count": 3, "memory": operation == "memory-fork"})
        if r.status == 201:
            ack.sandboxes += [s["id"] for s in r.json()["sandboxes"]]
    elif operation == "pause-to-disk":
        client.post(f"/v1/sandboxes/{base}/pause", {"to_disk": True})
    elif operation == "resume-from-disk":
        client.post(f"/v1/sandboxes/{base}/resume")
    elif operation == "restore":
        r = client.post("/v1/sandboxes", {"from_snapshot": plan["snapshot"]})
        if r.status == 201:
            ack.sandboxes.append(r.json()["id"])
    else:
        for v in victims:
            ack.sandboxes.remove(v)  # from now on it may be gone
            if client.delete(f"/v1/sandboxes/{v}").status == 204:
                ack.deleted.append(v)


@pytest.mark.parametrize("operation", OPERATIONS + MEMORY_OPERATIONS + MICROVM_OPERATIONS)
def test_sigkill_during_an_operation_leaves_nothing_half_made(daemon_factory, crash_netns, operation):
    rng = random.Random(f"{SEED}-{operation}")
    daemon = daemon_factory()
    daemon.netns = crash_netns
    daemon.start()
    client = daemon.client()
    runtime = {}
    rounds = ROUNDS
    if operation in MEMORY_OPERATIONS + MICROVM_OPERATIONS:
        operation, _, name = operation.partition("@")
        name = name or "gvisor"
        if not client.get("/healthz").json()["runtimes"][name]["available"]:
            pytest.skip(f"this host has no {name} runtime")
        runtime = {"runtime": name}
        rounds = MICROVM_ROUNDS if name == "microvm" else ROUNDS
    ack = Acknowledged()
    base = client.create(network={"mode": "open"}, **runtime)["id"]
    client.sh(base, "echo base > /workspace/acked; sleep 100000 > /dev/null 2>&1 &")
    ack.exec_contents[base] = {"base\n"}
    ack.sandboxes.append(base)
    restored = None
    if operation == "restore":
        r = client.post(f"/v1/sandboxes/{base}/snapshots", {"memory": True})
        assert r.status == 201, r
        restored = r.json()["id"]
        ack.snapshots.append(restored)

    for round_number in range(rounds):
        victims = []
        if operation == "delete":
            for mode in ("none", "open"):
                victim = client.create(network={"mode": mode})["id"]
                client.sh(victim, "echo v > /workspace/acked; sleep 1000 > /dev/null 2>&1 &")
                ack.sandboxes.append(victim)
                ack.uid_ranges.append(sandbox_host_uid_range(client, victim))
                victims.append(victim)

        if operation == "resume-from-disk":
            r = client.post(f"/v1/sandboxes/{base}/pause", {"to_disk": True})
            assert r.status == 200 and r.json()["paused_to_disk"], r
        # Drawn here, not in the worker, so the seed alone decides the run. The files: one
        # rewritten every round and a new one each round, 1 byte to 8 MiB, so that the kill
        # lands before, during and after the body.
        plan = {"network": rng.choice(["none", "open"]), "snapshot": restored,
                "files": [(path, rng.randbytes(rng.choice([1, 4096, 300_000, 2 << 20, 8 << 20])))
                          for path in ("/workspace/rewritten.bin", f"/workspace/round-{round_number}.bin")]}
        worker_client = daemon.client(timeout=30)
        failures = []
        worker = threading.Thread(target=_swallow, args=(failures, act, operation, worker_client, base, victims,
                                                         round_number, plan, ack))
        worker.start()
        time.sleep(rng.uniform(0, 0.1 if operation == "write" else 0.06))  # somewhere inside the call
        daemon.stop(signal.SIGKILL)
        worker.join(timeout=60)
        assert not worker.is_alive() and not failures, failures
        daemon.start()
        client = daemon.client()
        check_invariants(daemon, client, ack)

    # Everything deleted through the API leaves nothing; then the daemon stops cleanly.
    for sandbox in listed(client, "sandboxes"):
        ack.uid_ranges.append(sandbox_host_uid_range(client, sandbox["id"]))
        client.remove(sandbox["id"])
    for snapshot in listed(client, "snapshots"):
        assert client.delete(f"/v1/snapshots/{snapshot['id']}").status == 204
    assert_no_leaks(daemon, ack.uid_ranges)
    assert daemon.stop(signal.SIGTERM) == 0, daemon.log_tail()
    assert_no_leaks(daemon, ack.uid_ranges)


def _swallow(failures: list, fn, *args):
    try:
        fn(*args)
    except (OSError, http.client.HTTPException):  # the daemon died under the call: the point
        pass
    except Exception as e:  # anything else is a failure of the test's own
        failures.append(repr(e))
