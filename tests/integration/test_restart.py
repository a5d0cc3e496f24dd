"""Sandboxes outlive their daemon: a new daemon on the same state dir re-attaches to them."""

import signal
import uuid

import pytest

from harness import cgroup_dirs_of, host_processes_in_uid_range, sandbox_host_uid_range, wait_until


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_sandbox_survives_daemon_restart(daemon_factory, stop_signal):
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    sandbox = client.create(metadata={"restart": "yes"})
    sandbox_id = sandbox["id"]
    token = uuid.uuid4().hex
    client.sh(sandbox_id, f"echo {token} > /workspace/keep.txt")
    # The same sandbox after the restart keeps its namespaces and its running processes.
    first_uid, count = sandbox_host_uid_range(client, sandbox_id)
    pid_namespace = client.sh(sandbox_id, "readlink /proc/self/ns/pid")
    client.sh(sandbox_id, "sleep 1000 > /dev/null 2>&1 & echo $! > /workspace/sleeper.pid")

    daemon.stop(stop_signal)
    assert not daemon.running()
    daemon.start()
    client = daemon.client()  # a new port

    listed = {s["id"]: s for s in client.list()}
    assert sandbox_id in listed, f"sandbox lost after {stop_signal.name}: {listed}\n{daemon.log_tail()}"
    assert listed[sandbox_id]["state"] == "running"
    assert listed[sandbox_id]["metadata"] == {"restart": "yes"}
    assert listed[sandbox_id]["created_at"] == sandbox["created_at"]
    assert listed[sandbox_id]["expires_at"] == sandbox["expires_at"]
    assert client.sh(sandbox_id, "cat /workspace/keep.txt") == token + "\n"
    assert client.sh(sandbox_id, "echo after-restart") == "after-restart\n"
    assert client.sh(sandbox_id, "readlink /proc/self/ns/pid") == pid_namespace
    assert client.sh(sandbox_id, "cat /proc/$(cat /workspace/sleeper.pid)/comm") == "sleep\n"

    # Deleting a re-attached sandbox frees it like any other (its init, no longer the daemon's
    # child, may stay a zombie until the host's PID 1 reaps it).
    client.remove(sandbox_id)
    assert client.get(f"/v1/sandboxes/{sandbox_id}").status == 404
    assert wait_until(lambda: not host_processes_in_uid_range(first_uid, count, orphan_zombies=False), timeout=5), \
        host_processes_in_uid_range(first_uid, count)
    assert cgroup_dirs_of(sandbox_id) == []
    assert not (daemon.state_dir / "sandboxes" / sandbox_id).exists()
