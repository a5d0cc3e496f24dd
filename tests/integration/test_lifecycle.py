"""Pause/resume, stop/start, lifetimes and idle pauses (issue 5, "Lifecycle"), and a host reboot."""

import os
import shutil
import signal
import threading
import time
import uuid

import pytest

from harness import (assert_error_shape, cgroup_dirs_of, files_url, host_processes_in_uid_range,
                     sandbox_host_uid_range, unmount_storage, wait_until)


def lifecycle(client, sandbox_id, action, status=200):
    r = client.post(f"/v1/sandboxes/{sandbox_id}/{action}")
    if status != 200:
        assert_error_shape(r, status)
        return r.json()
    assert r.status == 200, r
    return r.json()


def state(client, sandbox_id) -> str:
    return client.sandbox(sandbox_id)["state"]


def cpu_s(client, sandbox_id) -> float:
    return client.sandbox(sandbox_id)["usage"]["cpu_s"]


def start_process(client, sandbox_id, cmd) -> int:
    r = client.post(f"/v1/sandboxes/{sandbox_id}/processes", {"cmd": cmd})
    assert r.status == 201, r
    return r.json()["pid"]


def test_pause_keeps_processes_and_uses_no_cpu(client, sandbox_factory):
    sandbox_id = sandbox_factory()["id"]
    spinner = start_process(client, sandbox_id, "while :; do :; done")
    sleeper = start_process(client, sandbox_id, "exec sleep 1000")
    assert wait_until(lambda: cpu_s(client, sandbox_id) > 0.2, timeout=30)

    paused = lifecycle(client, sandbox_id, "pause")
    assert paused["state"] == "paused" and paused["expires_at"] is None, paused
    assert state(client, sandbox_id) == "paused"  # reading it does not wake it
    frozen_at = cpu_s(client, sandbox_id)
    time.sleep(1)
    assert cpu_s(client, sandbox_id) == frozen_at  # not one tick while frozen
    assert lifecycle(client, sandbox_id, "pause")["state"] == "paused"  # again: no error

    resumed = lifecycle(client, sandbox_id, "resume")
    assert resumed["state"] == "running" and resumed["expires_at"] is not None, resumed
    assert wait_until(lambda: cpu_s(client, sandbox_id) > frozen_at + 0.2, timeout=30)
    for pid in (spinner, sleeper):  # the same processes, still running
        process = client.get(f"/v1/sandboxes/{sandbox_id}/processes/{pid}").json()
        assert process["state"] == "running", process
    assert lifecycle(client, sandbox_id, "resume")["state"] == "running"  # again: no error


def test_calls_that_need_a_paused_sandbox_resume_it(client, sandbox_factory):
    for call in ("exec", "file", "process", "network"):
        sandbox_id = sandbox_factory()["id"]
        lifecycle(client, sandbox_id, "pause")
        if call == "exec":
            assert client.sh(sandbox_id, "echo awake") == "awake\n"
        elif call == "file":
            r = client.request("PUT", files_url(sandbox_id, path="/workspace/f"), body=b"data",
                               headers={"Content-Type": "application/octet-stream"})
            assert r.status == 201, r
        elif call == "process":
            assert client.get(f"/v1/sandboxes/{sandbox_id}/processes").status == 200
        else:
            r = client.request("PUT", f"/v1/sandboxes/{sandbox_id}/network", {"mode": "none", "allow": []})
            assert r.status == 200, r
        assert state(client, sandbox_id) == "running", call


def test_stop_ends_the_processes_and_keeps_the_files(client, sandbox_factory):
    sandbox_id = sandbox_factory(metadata={"keep": "me"}, memory_mb=256)["id"]
    token = uuid.uuid4().hex
    client.sh(sandbox_id, f"echo {token} > /workspace/root.txt; mkdir -p /workspace/deep/er; "
                          f"echo {token} > /workspace/deep/er/x; echo nobody > /tmp/outside-workspace; "
                          "su nobody -s /bin/sh -c 'echo mine > /tmp/by-nobody' 2>/dev/null || "
                          "setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'echo mine > /tmp/by-nobody'")
    first_uid, count = sandbox_host_uid_range(client, sandbox_id)
    start_process(client, sandbox_id, "exec sleep 1000")

    stopped = lifecycle(client, sandbox_id, "stop")
    assert stopped["state"] == "stopped" and stopped["expires_at"] is None, stopped
    assert wait_until(lambda: not host_processes_in_uid_range(first_uid, count, orphan_zombies=False), timeout=10), \
        host_processes_in_uid_range(first_uid, count)
    assert cgroup_dirs_of(sandbox_id) == []
    info = client.sandbox(sandbox_id)
    assert info["state"] == "stopped" and info["usage"]["memory_bytes"] == 0, info
    assert lifecycle(client, sandbox_id, "stop")["state"] == "stopped"  # again: no error
    # Nothing runs in a stopped sandbox, and pause/resume do not apply.
    r = client.post(f"/v1/sandboxes/{sandbox_id}/exec", {"cmd": "true"})
    assert_error_shape(r, 409)
    assert "start" in r.json()["error"]["message"]
    for action in ("pause", "resume"):
        assert lifecycle(client, sandbox_id, action, status=409)["error"]["code"] == "sandbox_not_running"

    started = lifecycle(client, sandbox_id, "start")
    assert started["state"] == "running" and started["metadata"] == {"keep": "me"}, started
    assert started["memory_mb"] == 256 and started["expires_at"] is not None, started
    assert client.sh(sandbox_id, "cat /workspace/root.txt /workspace/deep/er/x /tmp/outside-workspace") == \
        f"{token}\n{token}\nnobody\n"
    assert client.sh(sandbox_id, "stat -c '%u %U' /tmp/by-nobody /workspace/root.txt") == "65534 nobody\n0 root\n"
    assert "sleep" not in client.sh(sandbox_id, "cat /proc/[0-9]*/comm")  # the old processes are gone
    assert client.sh(sandbox_id, "echo new > /workspace/new; cat /workspace/new") == "new\n"
    assert lifecycle(client, sandbox_id, "start")["state"] == "running"  # again: no error


def test_each_boot_has_a_boot_id_of_its_own(client, sandbox_factory):
    """/proc/sys/kernel/random/boot_id changes when a sandbox boots again (start after stop),
    as a machine's does, and not across a pause; no two sandboxes share one, nor the host's."""
    def boot_id(sandbox_id):
        text = client.sh(sandbox_id, "cat /proc/sys/kernel/random/boot_id")
        assert len(text) == 37 and text.count("-") == 4 and text[14] == "4", text
        return text

    host = open("/proc/sys/kernel/random/boot_id").read()
    a, b = sandbox_factory()["id"], sandbox_factory()["id"]
    first = boot_id(a)
    assert first != host and first != boot_id(b)
    lifecycle(client, a, "pause")
    lifecycle(client, a, "resume")
    assert boot_id(a) == first
    # Read-only, as the kernel's is.
    assert client.exec(a, ["sh", "-c", "echo x > /proc/sys/kernel/random/boot_id"])["exit_code"] != 0
    lifecycle(client, a, "stop")
    lifecycle(client, a, "start")
    assert boot_id(a) not in (first, host)


def test_a_paused_sandbox_can_be_stopped_and_deleted(client, sandbox_factory):
    for then in ("stop", "delete"):
        sandbox_id = sandbox_factory()["id"]
        first_uid, count = sandbox_host_uid_range(client, sandbox_id)
        start_process(client, sandbox_id, "exec sleep 1000")
        lifecycle(client, sandbox_id, "pause")
        if then == "stop":
            assert lifecycle(client, sandbox_id, "stop")["state"] == "stopped"
        else:
            assert client.delete(f"/v1/sandboxes/{sandbox_id}").status == 204
        assert wait_until(lambda: not host_processes_in_uid_range(first_uid, count, orphan_zombies=False),
                          timeout=10), host_processes_in_uid_range(first_uid, count)
        assert cgroup_dirs_of(sandbox_id) == []


def test_on_timeout_pause_pauses_and_the_clock_restarts_on_resume(client, sandbox_factory):
    sandbox_id = sandbox_factory(timeout_s=2, on_timeout="pause")["id"]
    client.sh(sandbox_id, "echo kept > /workspace/kept")
    assert wait_until(lambda: state(client, sandbox_id) == "paused", timeout=30)
    assert client.sandbox(sandbox_id)["expires_at"] is None
    # A timeout set while paused starts counting when it runs again.
    r = client.post(f"/v1/sandboxes/{sandbox_id}/timeout", {"timeout_s": 600})
    assert r.status == 200 and r.json()["expires_at"] is None, r
    assert client.sh(sandbox_id, "cat /workspace/kept") == "kept\n"  # resumes it
    info = client.sandbox(sandbox_id)
    assert info["state"] == "running" and info["expires_at"] is not None, info


def test_on_timeout_stop_stops_and_start_boots_it_on_its_files(client, sandbox_factory):
    sandbox_id = sandbox_factory(timeout_s=2, on_timeout="stop")["id"]
    assert client.sandbox(sandbox_id)["on_timeout"] == "stop"
    client.sh(sandbox_id, "echo kept > /workspace/kept")
    assert wait_until(lambda: state(client, sandbox_id) == "stopped", timeout=30)
    assert client.sandbox(sandbox_id)["expires_at"] is None
    started = lifecycle(client, sandbox_id, "start")
    assert started["state"] == "running" and started["expires_at"] is not None, started
    assert client.sh(sandbox_id, "cat /workspace/kept") == "kept\n"


def test_idle_timeout_pauses_only_an_idle_sandbox(client, daemon, sandbox_factory):
    sandbox_id = sandbox_factory(idle_timeout_s=2)["id"]
    # A call in progress is activity: a command longer than the idle timeout is not paused.
    seen = []
    stop = threading.Event()
    watcher_client = daemon.client()  # a client of its own: Client is not thread-safe

    def watch():
        while not stop.is_set():
            seen.append(state(watcher_client, sandbox_id))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert client.sh(sandbox_id, "sleep 5; echo done") == "done\n"
    finally:
        stop.set()
        watcher.join()
    assert set(seen) == {"running"}, seen
    # Then, with nothing going on, it pauses; the next call wakes it.
    assert wait_until(lambda: state(client, sandbox_id) == "paused", timeout=30)
    assert client.sh(sandbox_id, "echo back") == "back\n"


def test_lifecycle_bad_input(client, sandbox_factory):
    for action in ("pause", "resume", "stop", "start"):
        r = client.post(f"/v1/sandboxes/{'a' * 20}/{action}")
        assert_error_shape(r, 404)
        r = client.post(f"/v1/sandboxes/../{action}")
        assert r.status in (400, 404), r
        r = client.get(f"/v1/sandboxes/{'a' * 20}/{action}")
        assert_error_shape(r, 405)
    r = client.post("/v1/sandboxes", {"on_timeout": "hibernate"})
    assert_error_shape(r, 422)


def test_paused_and_stopped_sandboxes_survive_a_daemon_kill(daemon_factory):
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    paused_id, stopped_id = client.create()["id"], client.create()["id"]
    pid = start_process(client, paused_id, "exec sleep 1000")
    client.sh(stopped_id, "echo kept > /workspace/kept")
    lifecycle(client, paused_id, "pause")
    lifecycle(client, stopped_id, "stop")

    daemon.stop(signal.SIGKILL)
    daemon.start()
    client = daemon.client()
    assert state(client, paused_id) == "paused" and state(client, stopped_id) == "stopped"
    assert lifecycle(client, paused_id, "resume")["state"] == "running"
    assert client.get(f"/v1/sandboxes/{paused_id}/processes/{pid}").json()["state"] == "running"
    lifecycle(client, stopped_id, "start")
    assert client.sh(stopped_id, "cat /workspace/kept") == "kept\n"


def kill_cgroup(sandbox_id):
    """What a host reboot does to a sandbox: every process gone, its cgroups with them."""
    for directory in cgroup_dirs_of(sandbox_id):  # frozen processes die only once thawed
        try:
            with open(f"{directory}/freezer.state", "w") as f:
                f.write("THAWED")
        except OSError:
            pass
    for _ in range(100):
        pids = set()
        for directory in cgroup_dirs_of(sandbox_id):
            try:
                with open(f"{directory}/cgroup.procs") as f:
                    pids |= {int(p) for p in f.read().split()}
            except OSError:
                pass
        if not pids:
            break
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    for directory in sorted(cgroup_dirs_of(sandbox_id), key=len, reverse=True):
        try:
            os.rmdir(directory)
        except OSError:
            pass


def test_after_a_host_reboot_running_sandboxes_come_back_stopped_with_their_files(daemon_factory):
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    running, paused = client.create(metadata={"n": "1"})["id"], client.create()["id"]
    tokens = {}
    for sandbox_id in (running, paused):
        tokens[sandbox_id] = uuid.uuid4().hex
        client.sh(sandbox_id, f"echo {tokens[sandbox_id]} > /workspace/token; dd if=/dev/urandom of=/workspace/blob "
                              "bs=1M count=4 status=none; sha256sum /workspace/blob > /workspace/blob.sum")
        start_process(client, sandbox_id, "exec sleep 1000")
    lifecycle(client, paused, "pause")

    # The reboot: the daemon dies, every sandbox process dies, what bulkhead mounted is gone.
    daemon.stop(signal.SIGKILL)
    for sandbox_id in (running, paused):
        kill_cgroup(sandbox_id)
    unmount_storage(daemon.state_dir)

    daemon.start()
    client = daemon.client()
    listed = {s["id"]: s for s in client.list()}
    assert {listed[running]["state"], listed[paused]["state"]} == {"stopped"}, listed
    assert listed[running]["metadata"] == {"n": "1"}
    for sandbox_id in (running, paused):
        assert lifecycle(client, sandbox_id, "start")["state"] == "running"
        assert client.sh(sandbox_id, "cat /workspace/token") == tokens[sandbox_id] + "\n"
        assert client.sh(sandbox_id, "sha256sum -c /workspace/blob.sum") == "/workspace/blob: OK\n"


def layer_upper(daemon, sandbox_id):
    for root in (daemon.state_dir / "storage" / "layers", daemon.state_dir / "layers"):
        if (root / sandbox_id / "upper").is_dir():
            return root / sandbox_id / "upper"
    raise AssertionError(f"no layer for {sandbox_id}")


@pytest.mark.parametrize("name", ["proc", "usr", "dev"])
def test_start_refuses_a_layer_with_a_symlink_where_a_mount_goes(client, daemon, sandbox_factory, tmp_path, name):
    """A stopped sandbox's files are its own: a symlink at a mount point (here planted from
    the host, as a hostile layer or imported snapshot would carry it) must not steer a mount."""
    sandbox_id = sandbox_factory()["id"]
    lifecycle(client, sandbox_id, "stop")
    planted = layer_upper(daemon, sandbox_id) / name
    if planted.exists() and not planted.is_symlink():
        shutil.rmtree(planted)  # a mount point runsc made in the layer at the first boot
    os.symlink(str(tmp_path), planted)
    r = client.post(f"/v1/sandboxes/{sandbox_id}/start")
    assert_error_shape(r, 409)
    assert "not a directory" in r.json()["error"]["message"], r
    assert client.sandbox(sandbox_id)["state"] == "stopped"
    os.unlink(planted)
    assert lifecycle(client, sandbox_id, "start")["state"] == "running"
    assert client.sh(sandbox_id, "test -r /proc/self/status && test -x /usr/bin/env && echo ok") == "ok\n"
