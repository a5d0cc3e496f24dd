"""Deleting a sandbox frees everything it had on the host: processes, mounts, cgroups, files."""

import os
from pathlib import Path

import harness
import pytest
from harness import (cgroup_dirs_of, host_name, host_processes_in_uid_range, mountinfo_lines_mentioning,
                     sandbox_host_uid_range, wait_until)

UID_RANGE_DIR = "/run/bulkhead/uid-ranges"


def leftovers(daemon, sandbox_id, first_uid, count) -> dict:
    found = {
        "processes": host_processes_in_uid_range(first_uid, count),
        "mounts(host)": mountinfo_lines_mentioning(sandbox_id) + mountinfo_lines_mentioning(host_name(sandbox_id)),
        "mounts(daemon)": (mountinfo_lines_mentioning(sandbox_id, daemon.process.pid)
                           + mountinfo_lines_mentioning(host_name(sandbox_id), daemon.process.pid)),
        "cgroups": cgroup_dirs_of(sandbox_id),
        "state dir": paths_named(daemon.state_dir, sandbox_id) + paths_named(daemon.state_dir, host_name(sandbox_id)),
    }
    return {k: v for k, v in found.items() if v}


def paths_named(root: Path, name: str, max_depth: int = 3) -> list[str]:
    """Files or directories called `name` under root (the sandbox dir, its storage layer...)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        found += [os.path.join(dirpath, n) for n in dirnames + filenames if name in n]
        if depth >= max_depth:
            dirnames[:] = []
        else:
            dirnames[:] = [d for d in dirnames if name not in d]
    return found


def uid_range_claims_of(sandbox_id) -> list[str]:
    claims = []
    if os.path.isdir(UID_RANGE_DIR):
        for name in os.listdir(UID_RANGE_DIR):
            try:
                with open(os.path.join(UID_RANGE_DIR, name)) as f:
                    if sandbox_id in f.read():
                        claims.append(name)
            except OSError:
                pass
    return claims


def assert_nothing_left(daemon, sandbox_id, first_uid, count):
    clean = wait_until(lambda: not leftovers(daemon, sandbox_id, first_uid, count), timeout=5, interval=0.2)
    assert clean, f"left behind by sandbox {sandbox_id}: {leftovers(daemon, sandbox_id, first_uid, count)}"
    assert uid_range_claims_of(sandbox_id) == [], "uid range still claimed"


def test_delete_leaves_no_process_mount_cgroup_or_directory(daemon, client, sandbox_factory):
    sandbox_id = sandbox_factory()["id"]
    first_uid, count = sandbox_host_uid_range(client, sandbox_id)
    client.sh(sandbox_id, "echo data > /workspace/f")
    # The checks can see the sandbox while it lives (otherwise they would prove nothing).
    assert host_processes_in_uid_range(first_uid, count), "no host process in the sandbox's uid range"
    assert cgroup_dirs_of(sandbox_id), "no cgroup dir named after the sandbox"
    assert (daemon.state_dir / "sandboxes" / host_name(sandbox_id)).exists()
    assert paths_named(daemon.state_dir, sandbox_id), "expected its storage layer"
    assert uid_range_claims_of(sandbox_id) or not os.path.isdir(UID_RANGE_DIR)

    client.remove(sandbox_id)
    assert_nothing_left(daemon, sandbox_id, first_uid, count)


@pytest.mark.skipif(harness.RUNTIME == "gvisor", reason="gVisor's processes are not the host's")
def test_delete_kills_background_children_of_finished_commands(daemon, client, sandbox_factory):
    sandbox_id = sandbox_factory()["id"]
    first_uid, count = sandbox_host_uid_range(client, sandbox_id)
    result = client.exec(sandbox_id, ["sh", "-c", "sleep 1000 & sleep 1000 & echo ok"], timeout_s=20, timeout=30)
    assert result["stdout"] == "ok\n" and result["exit_code"] == 0, result
    sleepers = [p for p in host_processes_in_uid_range(first_uid, count) if p.split(":")[1] == "sleep"]
    assert len(sleepers) == 2, f"expected the two background sleeps on the host: {sleepers}"

    client.remove(sandbox_id)
    assert_nothing_left(daemon, sandbox_id, first_uid, count)


def test_expired_sandbox_leaves_nothing_behind(daemon, client, sandbox_factory):
    sandbox_id = sandbox_factory(timeout_s=3)["id"]
    first_uid, count = sandbox_host_uid_range(client, sandbox_id)
    client.exec(sandbox_id, "sleep 1000 & echo started")
    assert wait_until(lambda: client.get(f"/v1/sandboxes/{sandbox_id}").status == 404, timeout=8)
    assert_nothing_left(daemon, sandbox_id, first_uid, count)


def test_sandboxes_in_every_state_and_the_pools_leave_nothing_when_deleted_and_stopped(daemon_factory):
    """A daemon of its own with a warm pool: sandboxes running, paused, stopped, forked from a
    snapshot, with background processes and a volume; all deleted, then the daemon stopped."""
    d = daemon_factory(warm_pool=1)
    d.start()
    client = d.client()
    assert client.post("/v1/volumes", {"name": "leakvol", "size_mb": 64}).status == 201
    made = [client.create()["id"] for _ in range(4)]
    made.append(client.create(volumes=[{"name": "leakvol", "path": "/vol"}])["id"])
    for sandbox_id in made:
        client.exec(sandbox_id, "sleep 1000 & echo data > /workspace/f")
    assert client.post(f"/v1/sandboxes/{made[1]}/pause").status == 200
    assert client.post(f"/v1/sandboxes/{made[2]}/stop").status == 200
    r = client.post(f"/v1/sandboxes/{made[0]}/snapshots", {"name": "leaksnap"})
    assert r.status == 201, r
    made.append(client.create(from_snapshot=r.json()["id"])["id"])
    assert client.sh(made[-1], "cat /workspace/f") == "data\n"
    forked = client.post(f"/v1/sandboxes/{made[3]}/fork", {"count": 2})
    assert forked.status == 201, forked
    made += [f["id"] for f in forked.json()["sandboxes"]]
    for sandbox_id in made:
        client.remove(sandbox_id)
    assert client.delete(f"/v1/snapshots/{r.json()['id']}").status == 204
    assert client.delete("/v1/volumes/leakvol").status == 204
    harness.assert_no_leaks(d)
    d.stop()
    harness.assert_no_leaks(d)
