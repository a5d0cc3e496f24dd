"""Sandboxes outlive their daemon: a new daemon on the same state dir re-attaches to them."""

import json
import os
import signal
import subprocess
import uuid

import pytest

import harness
from harness import cgroup_dirs_of, host_name, host_processes_in_uid_range, sandbox_host_uid_range, wait_until


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
    details = client.sandbox(sandbox_id).get("runtime_details")

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
    assert client.sandbox(sandbox_id).get("runtime_details") == details  # (a guest's: how it started)
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
    assert not (daemon.state_dir / "sandboxes" / host_name(sandbox_id)).exists()


@pytest.mark.skipif(harness.RUNTIME != "gvisor", reason="runsc's control commands: the gvisor tier's")
def test_a_wedged_gvisor_sandbox_does_not_hold_up_a_restarting_daemon(daemon_factory):
    """A Sentry that no longer answers runsc (seen: out of host descriptors) once kept the
    daemon's recovery waiting on `runsc resume` for good."""
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    wedged, fine = client.create()["id"], client.create()["id"]
    sentry = subprocess.run(["pgrep", "-f", f"runsc-sandbox .* {host_name(wedged)}$"], capture_output=True,
                            text=True).stdout.split()
    assert len(sentry) == 1, sentry
    os.kill(int(sentry[0]), signal.SIGSTOP)
    try:
        daemon.stop(signal.SIGKILL)
        daemon.start(timeout=90)  # runsc's commands give up after 15 s each
        client = daemon.client()
        assert client.sh(fine, "echo fine") == "fine\n"
        assert client.delete(f"/v1/sandboxes/{wedged}", timeout=60).status == 204
    finally:
        subprocess.run(["kill", "-CONT", sentry[0]])
    assert client.get(f"/v1/sandboxes/{wedged}").status == 404


@pytest.mark.skipif(harness.RUNTIME != "gvisor", reason="runsc's checkpoint: the gvisor tier's")
def test_a_gvisor_sandbox_can_be_checkpointed_and_its_init_dials_the_daemon_again(daemon, client, tmp_path):
    """gVisor cannot checkpoint a sandbox holding a bound host socket, as init's listening one
    was ("Cannot save endpoint with bound host socket"): init dials the daemon instead. A
    checkpoint that leaves the sandbox running restores it in place, which cuts every host
    connection; init notices its waiting ones cut and dials again (the groundwork of memory
    snapshots, issue 21)."""
    sandbox_id = client.create()["id"]
    r = client.post(f"/v1/sandboxes/{sandbox_id}/processes", {"cmd": "i=0; while :; do echo $i; i=$((i+1)); sleep 0.1; done"})
    assert r.status == 201, r
    pid = r.json()["pid"]
    sentry = subprocess.run(["pgrep", "-a", "-f", f"runsc-sandbox .* {host_name(sandbox_id)}$"], capture_output=True,
                            text=True).stdout.split("\n")[0].split()
    root = next(arg.split("=", 1)[1] for arg in sentry if arg.startswith("--root="))
    runsc = client.get("/healthz").json()["runtimes"]["gvisor"]["runsc"]
    checkpoint = subprocess.run([runsc, "--root", root, "--network=host", "--overlay2=none", "--host-uds=open",
                                 "--ignore-cgroups", "checkpoint", "--leave-running", "--image-path", str(tmp_path / "image"),
                                 host_name(sandbox_id)], capture_output=True, text=True, timeout=60)
    assert checkpoint.returncode == 0, checkpoint.stderr[-2000:]
    assert (tmp_path / "image" / "checkpoint.img").stat().st_size > 0
    # Every request after it is served (a connection init dialed before is never handed out
    # cut), and the background process went on counting.
    for _ in range(5):
        assert client.sh(sandbox_id, "echo served") == "served\n"
    before = client.get(f"/v1/sandboxes/{sandbox_id}/processes/{pid}").json()["stdout_offset"]
    assert wait_until(lambda: client.get(f"/v1/sandboxes/{sandbox_id}/processes/{pid}").json()["stdout_offset"] > before,
                      timeout=10)
    client.remove(sandbox_id)


def test_background_processes_and_their_output_survive_a_daemon_kill(daemon_factory):
    """Processes and their output rings live in the sandbox's init, not in the daemon: after a
    SIGKILL and a restart the same process is listed, its output reads from offset 0, and a
    follower picks up where it left off."""
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    sandbox_id = client.create()["id"]
    r = client.post(f"/v1/sandboxes/{sandbox_id}/processes",
                    {"cmd": "echo before; read line; echo got $line", "tag": "survivor"})
    assert r.status == 201, r
    pid = r.json()["pid"]
    assert wait_until(lambda: client.get(f"/v1/sandboxes/{sandbox_id}/processes/{pid}").json()["stdout_offset"] >= 7,
                      timeout=10)

    daemon.stop(signal.SIGKILL)
    daemon.start()
    client = daemon.client()

    process = client.get(f"/v1/sandboxes/{sandbox_id}/processes/survivor").json()
    assert (process["pid"], process["state"]) == (pid, "running")
    r = client.post(f"/v1/sandboxes/{sandbox_id}/processes/{pid}/stdin", {"data": "hello\n"})
    assert r.status == 204, r
    r = client.get(f"/v1/sandboxes/{sandbox_id}/processes/{pid}/output?follow=true")
    assert r.status == 200, r
    events = [json.loads(line) for line in r.body.splitlines()]
    text = "".join(e.get("data", "") for e in events if e["type"] == "stdout")
    assert text == "before\ngot hello\n", events
    assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 0, events
    client.remove(sandbox_id)
