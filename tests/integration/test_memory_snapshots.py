"""Memory snapshots, forks and pause to disk (issue 21): a snapshot with "memory": true keeps a
sandbox's memory and processes with its files, as of one instant, on the runtimes that can take
them; a sandbox created from it, and each fork with memory, goes on running every process from
where it was; a sandbox paused to disk holds no process and resumes its own on the next call. Run against every runtime of MEMORY_RUNTIMES this host has, from the native run
(each sandbox names its runtime); the native tier's refusal is tested beside."""

import io
import json
import signal
import subprocess
import tarfile
import time

import pytest

import harness
from harness import assert_error_shape, host_name, wait_until

MEMORY_RUNTIMES = ["gvisor", "microvm"]


def available_runtimes(client) -> set:
    runtimes = client.get("/healthz").json()["runtimes"]
    return {name for name, info in runtimes.items() if info.get("available")}


@pytest.fixture(params=MEMORY_RUNTIMES)
def runtime(request, client):
    if request.param not in available_runtimes(client):
        pytest.skip(f"this host has no {request.param} runtime")
    if not client.get("/healthz").json()["runtimes"][request.param].get("memory_snapshots"):
        # (microvm's need QEMU 8.2 or newer)
        pytest.skip(f"this daemon's {request.param} runtime takes no memory snapshots")
    return request.param


def processes_url(sandbox_id, pid=None, route=""):
    return f"/v1/sandboxes/{sandbox_id}/processes" + ("" if pid is None else f"/{pid}") + route


def start_process(client, sandbox_id, cmd, **body) -> int:
    r = client.post(processes_url(sandbox_id), {"cmd": cmd, **body})
    assert r.status == 201, r
    return r.json()["pid"]


def process(client, sandbox_id, pid) -> dict:
    r = client.get(processes_url(sandbox_id, pid))
    assert r.status == 200, r
    return r.json()


def stdout_of(client, sandbox_id, pid) -> str:
    r = client.get(processes_url(sandbox_id, pid, "/output"))
    assert r.status == 200, r
    events = [json.loads(line) for line in r.body.splitlines()]
    return "".join(e["data"] for e in events if e["type"] == "stdout")


def snapshot(client, sandbox_id, **body) -> dict:
    r = client.post(f"/v1/sandboxes/{sandbox_id}/snapshots", {"memory": True, **body})
    assert r.status == 201, r
    return r.json()


def counted(text: str) -> list[int]:
    return [int(line) for line in text.split("\n") if line]


# A counter: one line a tick, numbered from 0, so its output shows whether it went on or began
# again.
COUNTER = "i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done"


def start_counter(client, sandbox_id, lines=3, **body) -> int:
    """Starts COUNTER as a background process; answers its pid once it printed `lines` lines."""
    pid = start_process(client, sandbox_id, COUNTER, **body)
    assert wait_until(lambda: len(counted(stdout_of(client, sandbox_id, pid))) >= lines, timeout=20)
    return pid


def assert_counts_on(client, sandbox_id, pid, more=1) -> list[int]:
    """The counter `pid` prints `more` lines more, and its numbers never began again."""
    before = len(counted(stdout_of(client, sandbox_id, pid)))
    assert wait_until(lambda: len(counted(stdout_of(client, sandbox_id, pid))) >= before + more, timeout=20)
    numbers = counted(stdout_of(client, sandbox_id, pid))
    assert numbers == list(range(len(numbers))), numbers
    return numbers


def test_a_sandbox_made_from_a_memory_snapshot_goes_on_counting_from_where_it_was(client, sandbox_factory, runtime):
    source = sandbox_factory(runtime=runtime)["id"]
    client.sh(source, "echo kept > /workspace/file")
    pid = start_counter(client, source, lines=5, tag="counter")
    taken = snapshot(client, source, name="counting")
    assert taken["memory"] is True and taken["runtime"] == runtime and taken["name"] == "counting", taken
    assert taken["size_bytes"] > 0, taken
    at_snapshot = counted(stdout_of(client, source, pid))

    copy = sandbox_factory(from_snapshot=taken["id"])
    assert copy["runtime"] == runtime and copy["parent_snapshot"] == taken["id"], copy
    copy_id = copy["id"]
    # The same process, still running, with its output ring as it was: the counter goes on past
    # where the snapshot caught it, never beginning again.
    restored = process(client, copy_id, pid)
    assert restored["state"] == "running" and restored["tag"] == "counter", restored
    assert len(assert_counts_on(client, copy_id, pid, more=5)) > len(at_snapshot)
    assert client.sh(copy_id, "cat /workspace/file") == "kept\n"
    # The source went on too, on its own.
    assert process(client, source, pid)["state"] == "running"
    client.sh(copy_id, "echo copy > /workspace/file")
    assert client.sh(source, "cat /workspace/file") == "kept\n"


def test_a_python_repl_keeps_its_variables(client, sandbox_factory, runtime):
    source = sandbox_factory(runtime=runtime)["id"]
    pid = start_process(client, source, ["python3", "-u", "-i", "-q"])
    r = client.post(processes_url(source, pid, "/stdin"), {"data": "answer = 41\nprint('set', answer)\n"})
    assert r.status == 204, r
    assert wait_until(lambda: "set 41" in stdout_of(client, source, pid), timeout=20)
    taken = snapshot(client, source)
    # The source changes its variable after the snapshot; the copy keeps the one it had.
    client.post(processes_url(source, pid, "/stdin"), {"data": "answer = 0\n"})

    copy_id = sandbox_factory(from_snapshot=taken["id"])["id"]
    r = client.post(processes_url(copy_id, pid, "/stdin"), {"data": "print('got', answer + 1)\n"})
    assert r.status == 204, r
    assert wait_until(lambda: "got 42" in stdout_of(client, copy_id, pid), timeout=20), stdout_of(client, copy_id, pid)


def test_a_server_listening_inside_keeps_serving(client, sandbox_factory, runtime):
    source = sandbox_factory(runtime=runtime)["id"]
    client.sh(source, "mkdir -p /workspace/site && echo served-from-memory > /workspace/site/index.html")
    start_process(client, source, ["python3", "-m", "http.server", "8123", "--bind", "127.0.0.1",
                                   "--directory", "/workspace/site"])
    fetch = "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8123/').read().decode())\""
    assert wait_until(lambda: client.exec(source, fetch)["exit_code"] == 0, timeout=20)
    taken = snapshot(client, source)
    copy_id = sandbox_factory(from_snapshot=taken["id"])["id"]
    # No new server was started in the copy: the one restored listens again.
    assert client.sh(copy_id, fetch) == "served-from-memory\n\n"


def test_a_fork_with_memory_gives_running_copies_each_on_its_own(client, sandbox_factory, runtime):
    source = sandbox_factory(runtime=runtime, memory_mb=256)["id"]
    pid = start_counter(client, source)
    listed = client.get("/v1/snapshots").json()["snapshots"]
    r = client.post(f"/v1/sandboxes/{source}/fork", {"count": 3, "memory": True})
    assert r.status == 201, r
    forks = [s["id"] for s in r.json()["sandboxes"]]
    try:
        assert len(set(forks)) == 3
        for fork in forks:
            sandbox = client.sandbox(fork)
            assert sandbox["state"] == "running" and sandbox["runtime"] == runtime and sandbox["memory_mb"] == 256
            assert process(client, fork, pid)["state"] == "running"
            client.sh(fork, f"echo {fork} > /workspace/mine")
        for fork in forks:
            assert client.sh(fork, "cat /workspace/mine") == f"{fork}\n"
            assert_counts_on(client, fork, pid)
        assert client.exec(source, "cat /workspace/mine")["exit_code"] != 0
        assert process(client, source, pid)["state"] == "running"
        # The fork's capture is not listed.
        assert client.get("/v1/snapshots").json()["snapshots"] == listed
    finally:
        for fork in forks:
            client.remove(fork)


def test_a_paused_sandbox_stays_paused_through_a_memory_snapshot(client, sandbox_factory, runtime):
    source = sandbox_factory(runtime=runtime)["id"]
    pid = start_counter(client, source)
    assert client.post(f"/v1/sandboxes/{source}/pause").status == 200
    taken = snapshot(client, source)
    assert client.sandbox(source)["state"] == "paused"
    copy_id = sandbox_factory(from_snapshot=taken["id"])["id"]
    assert client.sandbox(copy_id)["state"] == "running"
    assert_counts_on(client, copy_id, pid)


def test_a_restored_sandbox_takes_the_limits_and_network_its_create_asks(client, sandbox_factory, runtime):
    # A microvm guest's memory is its size, saved with it: a restore keeps it (asking another is
    # refused), and its network device too (the source boots with one: see test_microvm.py).
    vm = runtime == "microvm"
    source_network = {"mode": "allowlist", "allow": ["example.org"]} if vm else {"mode": "none"}
    source = sandbox_factory(runtime=runtime, memory_mb=512, network=source_network, metadata={"from": "source"})["id"]
    taken = snapshot(client, source)
    if vm:
        r = client.post("/v1/sandboxes", {"from_snapshot": taken["id"], "memory_mb": 256})
        assert_error_shape(r, 422)
        assert r.json()["error"]["code"] == "runtime_unsupported", r
    copy = sandbox_factory(from_snapshot=taken["id"], pids=64, metadata={"from": "copy"},
                           network={"mode": "allowlist", "allow": ["example.com"]}, **({} if vm else {"memory_mb": 256}))
    assert (copy["memory_mb"], copy["pids"], copy["metadata"]) == (512 if vm else 256, 64, {"from": "copy"}), copy
    assert copy["network"]["mode"] == "allowlist", copy
    # Inside, the restored kernel holds the create's limits, not the snapshot's (512 MiB, and
    # 170 pids: gVisor's pids limit is at most what the memory carries, GvisorTier::InsideLimits;
    # a guest's memory is its own size, 512 pids).
    if vm:
        limits = "cat /sys/fs/cgroup/pids/pids.max"
        assert (client.sh(source, limits), client.sh(copy["id"], limits)) == ("512\n", "64\n")
    else:
        limits = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max"
        assert client.sh(source, limits) == f"{512 << 20}\n170\n"
        assert client.sh(copy["id"], limits) == f"{256 << 20}\n64\n"
    # And its namespace has the egress proxy the allowlist mode puts there (the source has none
    # where it has no network).
    reach_proxy = ("python3 -c \"import os, socket, urllib.parse; u = urllib.parse.urlsplit(os.environ['HTTP_PROXY']); "
                   "socket.create_connection((u.hostname, u.port), 2)\"")
    assert client.exec(copy["id"], reach_proxy)["exit_code"] == 0
    if not vm:
        assert client.exec(source, reach_proxy)["exit_code"] != 0


def test_memory_snapshots_are_refused_where_they_cannot_be_taken_or_restored(client, sandbox_factory, runtime):
    native = sandbox_factory(runtime="native")["id"]
    for path, body in ((f"/v1/sandboxes/{native}/snapshots", {"memory": True}),
                       (f"/v1/sandboxes/{native}/fork", {"memory": True, "count": 2})):
        r = client.post(path, body)
        assert_error_shape(r, 422)
        assert r.json()["error"]["code"] == "runtime_unsupported", r
        assert runtime in r.json()["error"]["message"], r
    # A stopped sandbox has no memory.
    stopped = sandbox_factory(runtime=runtime)["id"]
    assert client.post(f"/v1/sandboxes/{stopped}/stop").status == 200
    r = client.post(f"/v1/sandboxes/{stopped}/snapshots", {"memory": True})
    assert_error_shape(r, 409)
    assert client.post(f"/v1/sandboxes/{stopped}/start").status == 200
    taken = snapshot(client, stopped)
    # Only its runtime restores it, with its volumes.
    before = {s["id"] for s in client.list()}
    for body, status in (({"runtime": "native"}, 422), ({"volumes": [{"name": "nosuchvolume", "path": "/v"}]}, 422),
                         ({"image": "otherimage"}, 422)):
        r = client.post("/v1/sandboxes", {"from_snapshot": taken["id"], **body})
        assert_error_shape(r, status)
    assert {s["id"] for s in client.list()} == before
    # Files-only snapshots of the same sandbox still say so.
    r = client.post(f"/v1/sandboxes/{stopped}/snapshots", {})
    assert r.status == 201 and r.json()["memory"] is False, r
    assert client.delete(f"/v1/snapshots/{r.json()['id']}").status == 204


def test_a_memory_snapshot_is_in_use_while_its_sandboxes_live_and_leaves_nothing_when_deleted(
        daemon, client, sandbox_factory, runtime):
    source = sandbox_factory(runtime=runtime)["id"]
    taken = snapshot(client, source)
    image = daemon.state_dir / "memory" / taken["id"]
    assert image.is_dir() and any(image.iterdir())
    assert image.stat().st_mode & 0o077 == 0  # root's alone
    copy_id = sandbox_factory(from_snapshot=taken["id"])["id"]
    r = client.delete(f"/v1/snapshots/{taken['id']}")
    assert_error_shape(r, 409)
    client.remove(copy_id)
    assert client.delete(f"/v1/snapshots/{taken['id']}").status == 204
    assert not image.exists()


def test_a_memory_snapshot_outlives_a_daemon_kill(daemon_factory):
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    if "gvisor" not in available_runtimes(client):
        pytest.skip("this host has no gvisor runtime")
    source = client.create(runtime="gvisor")["id"]
    pid = start_counter(client, source)
    taken = snapshot(client, source)
    daemon.stop(signal.SIGKILL)
    daemon.start()
    client = daemon.client()
    listed = {s["id"]: s for s in client.get("/v1/snapshots").json()["snapshots"]}
    assert listed[taken["id"]]["memory"] is True
    copy_id = client.create(from_snapshot=taken["id"])["id"]
    assert_counts_on(client, copy_id, pid)
    client.remove(copy_id)
    client.remove(source)
    assert client.delete(f"/v1/snapshots/{taken['id']}").status == 204


def test_a_memory_snapshot_restored_again_is_taken_ready_from_its_pool(client, sandbox_factory, runtime):
    """After a first restore, the warm pool keeps one more restore of the snapshot ready, held
    frozen: a create that takes it gets the processes going on from where the image has them
    (not from where they would be had it run while it waited), with the create's own settings."""
    source = sandbox_factory(runtime=runtime)["id"]
    client.sh(source, "echo kept > /workspace/file")
    pid = start_counter(client, source, lines=5)
    taken = snapshot(client, source)
    at_snapshot = len(counted(stdout_of(client, source, pid)))  # the image's count is at most this
    first = sandbox_factory(from_snapshot=taken["id"])["id"]  # a cold restore: the pool starts
    assert_counts_on(client, first, pid)
    deadline = time.monotonic() + 180
    while True:
        time.sleep(3)  # a held restore that ran meanwhile would count 60 more
        hits = client.metric("bulkhead_warm_pool_hits_total")
        copy = sandbox_factory(from_snapshot=taken["id"], metadata={"pooled": "maybe"})
        if client.metric("bulkhead_warm_pool_hits_total") == hits + 1:
            break
        client.remove(copy["id"])  # the pool was not ready yet
        assert time.monotonic() < deadline, "no restore of the snapshot was taken from the pool"
    assert copy["metadata"] == {"pooled": "maybe"} and copy["parent_snapshot"] == taken["id"], copy
    assert copy["runtime"] == runtime and copy["state"] == "running", copy
    numbers = assert_counts_on(client, copy["id"], pid, more=3)
    assert len(numbers) < at_snapshot + 40, (at_snapshot, len(numbers))
    assert client.sh(copy["id"], "cat /workspace/file") == "kept\n"
    # (That deleting the snapshot takes its pool with it: the core's unit test sees it.)
    for sandbox_id in (first, copy["id"]):
        client.remove(sandbox_id)
    assert client.delete(f"/v1/snapshots/{taken['id']}").status == 204


# ---------------------------------------------------------------- export and import

def export(client, snapshot_id) -> bytes:
    r = client.get(f"/v1/snapshots/{snapshot_id}/export")
    assert r.status == 200, r
    return r.body


def import_archive(client, archive: bytes, query=""):
    return client.request("POST", "/v1/snapshots/import" + query, body=archive,
                          headers={"Content-Type": "application/zstd"})


def archive_description(archive: bytes) -> dict:
    """The bulkhead-snapshot.json an archive starts with."""
    tar = subprocess.run(["zstd", "-dc"], input=archive, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as opened:
        member = opened.next()
        assert member.name == "bulkhead-snapshot.json", member.name
        return json.loads(opened.extractfile(member).read())


def archive_of(description: dict) -> bytes:
    """A snapshot archive that is only its description, as the first entry of one."""
    data = json.dumps(description).encode()
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w", format=tarfile.PAX_FORMAT) as made:
        info = tarfile.TarInfo("bulkhead-snapshot.json")
        info.size = len(data)
        made.addfile(info, io.BytesIO(data))
    return subprocess.run(["zstd", "-qc"], input=tar.getvalue(), capture_output=True, check=True).stdout


def snapshot_ids(client) -> set:
    return {s["id"] for s in client.get("/v1/snapshots").json()["snapshots"]}


def test_an_exported_memory_snapshot_imported_goes_on_counting(client, sandbox_factory, runtime):
    source = sandbox_factory(runtime=runtime)["id"]
    client.sh(source, "echo kept > /workspace/file")
    pid = start_counter(client, source, lines=5, tag="counter")
    taken = snapshot(client, source, name="travelling")
    archive = export(client, taken["id"])
    description = archive_description(archive)
    assert description["version"] == 2 and description["metadata"]["memory"], description

    r = import_archive(client, archive)
    assert r.status == 201, r
    imported = r.json()
    assert (imported["memory"], imported["runtime"], imported["name"]) == (True, runtime, "travelling"), imported
    try:
        copy_id = sandbox_factory(from_snapshot=imported["id"])["id"]
        assert process(client, copy_id, pid)["tag"] == "counter"
        assert_counts_on(client, copy_id, pid, more=3)
        assert client.sh(copy_id, "cat /workspace/file") == "kept\n"
        client.remove(copy_id)
        # ?memory=false takes the files alone: a sandbox from them starts afresh.
        r = import_archive(client, archive, "?memory=false")
        assert r.status == 201 and r.json()["memory"] is False, r
        files_only = r.json()["id"]
        fresh = sandbox_factory(from_snapshot=files_only)["id"]
        assert client.sh(fresh, "cat /workspace/file") == "kept\n"
        assert client.get(processes_url(fresh, pid)).status == 404
        client.remove(fresh)
        assert client.delete(f"/v1/snapshots/{files_only}").status == 204
    finally:
        assert client.delete(f"/v1/snapshots/{imported['id']}").status == 204
    assert_error_shape(import_archive(client, archive, "?memory=maybe"), 422)


def test_a_memory_image_is_restored_only_by_a_host_given_the_same_key(daemon, client, sandbox_factory,
                                                                      daemon_factory):
    """Another host imports a memory snapshot's image only if it holds the exporting host's
    memory image key; without it the archive is refused whole (its files may still be taken
    alone), and an image its tier cannot run is refused before anything is unpacked."""
    if "gvisor" not in available_runtimes(client):
        pytest.skip("this host has no gvisor runtime")
    source = sandbox_factory(runtime="gvisor")["id"]
    pid = start_counter(client, source)
    archive = export(client, snapshot(client, source)["id"])

    other = daemon_factory()
    other.start()  # a key of its own
    other_client = other.client()
    key_path = other.state_dir / "memory-image-key"
    assert key_path.stat().st_mode & 0o077 == 0
    before = snapshot_ids(other_client)
    r = import_archive(other_client, archive)
    assert_error_shape(r, 422)
    assert r.json()["error"]["code"] == "memory_image_untrusted", r
    assert snapshot_ids(other_client) == before
    assert not any((other.state_dir / "memory").iterdir())
    r = import_archive(other_client, archive, "?memory=false")
    assert r.status == 201 and r.json()["memory"] is False, r

    # Given the same key (and started again to read it), the other host restores it.
    other.stop()
    key_path.write_text((daemon.state_dir / "memory-image-key").read_text())
    other.start()
    other_client = other.client()
    r = import_archive(other_client, archive)
    assert r.status == 201 and r.json()["memory"] is True, r
    copy_id = other_client.create(from_snapshot=r.json()["id"])["id"]
    assert_counts_on(other_client, copy_id, pid)
    other_client.remove(copy_id)

    # An image of a format this host's tier does not run: refused from its description alone.
    description = archive_description(archive)
    description["metadata"]["memory"] = "gvisor runsc version 0.0~19991231.0"
    r = import_archive(other_client, archive_of(description))
    assert_error_shape(r, 422)
    assert r.json()["error"]["code"] == "snapshot_incompatible", r
    description["metadata"]["spec"]["runtime"] = "nosuchruntime"
    r = import_archive(other_client, archive_of(description))
    assert_error_shape(r, 422)
    assert r.json()["error"]["code"] == "snapshot_incompatible", r


# ---------------------------------------------------------------- pause to disk

def sandbox_processes_on_host(sandbox_id) -> list[str]:
    """The host processes of a sandbox: a gvisor sandbox's Sentry and gofer, a microvm sandbox's
    QEMU and device daemons (each names it by host name)."""
    found = subprocess.run(["pgrep", "-f", f"(runsc|qemu|virtiofsd|vhost-device).*{host_name(sandbox_id)}"],
                           capture_output=True, text=True)
    return found.stdout.split()


def test_a_sandbox_paused_to_disk_holds_no_process_and_goes_on_at_the_next_call(client, sandbox_factory, runtime):
    source = sandbox_factory(runtime=runtime)["id"]
    client.sh(source, "echo kept > /workspace/file")
    pid = start_counter(client, source, lines=5, tag="counter")
    assert sandbox_processes_on_host(source)
    r = client.post(f"/v1/sandboxes/{source}/pause", {"to_disk": True})
    assert r.status == 200, r
    assert (r.json()["state"], r.json()["paused_to_disk"]) == ("paused", True), r.json()
    assert sandbox_processes_on_host(source) == []
    listed = next(s for s in client.list() if s["id"] == source)
    assert (listed["state"], listed["paused_to_disk"]) == ("paused", True)
    assert client.post(f"/v1/sandboxes/{source}/pause", {"to_disk": True}).json()["paused_to_disk"] is True
    # The next call that needs it restores it: the counter goes on, never beginning again.
    assert client.sh(source, "cat /workspace/file") == "kept\n"
    sandbox = client.sandbox(source)
    assert (sandbox["state"], sandbox["paused_to_disk"]) == ("running", False), sandbox
    assert_counts_on(client, source, pid, more=4)
    # Again, resumed by an explicit resume this time.
    assert client.post(f"/v1/sandboxes/{source}/pause", {"to_disk": True}).status == 200
    r = client.post(f"/v1/sandboxes/{source}/resume")
    assert r.status == 200 and r.json()["state"] == "running", r
    assert process(client, source, pid)["state"] == "running"


def test_a_paused_to_disk_sandbox_snapshots_forks_and_stops(client, sandbox_factory, runtime):
    source = sandbox_factory(runtime=runtime)["id"]
    pid = start_counter(client, source)
    assert client.post(f"/v1/sandboxes/{source}/pause", {"to_disk": True}).status == 200
    # Its image is the snapshot's memory: nothing is restored to take it.
    taken = snapshot(client, source)
    assert client.sandbox(source)["paused_to_disk"] is True
    r = client.post(f"/v1/sandboxes/{source}/fork", {"count": 2, "memory": True})
    assert r.status == 201, r
    copies = [s["id"] for s in r.json()["sandboxes"]] + [sandbox_factory(from_snapshot=taken["id"])["id"]]
    try:
        for copy in copies:
            assert_counts_on(client, copy, pid)
        assert client.sandbox(source)["paused_to_disk"] is True
    finally:
        for copy in copies[:2]:
            client.remove(copy)
    # Stop drops its memory; start boots it on its files.
    r = client.post(f"/v1/sandboxes/{source}/stop")
    assert r.status == 200 and (r.json()["state"], r.json()["paused_to_disk"]) == ("stopped", False), r
    assert client.post(f"/v1/sandboxes/{source}/start").status == 200
    assert client.get(f"/v1/sandboxes/{source}/processes/{pid}").status == 404


def test_pause_to_disk_is_refused_where_it_cannot_be_done(client, sandbox_factory, runtime):
    native = sandbox_factory(runtime="native")["id"]
    r = client.post(f"/v1/sandboxes/{native}/pause", {"to_disk": True})
    assert_error_shape(r, 422)
    assert r.json()["error"]["code"] == "runtime_unsupported", r
    assert client.sandbox(native)["state"] == "running"
    source = sandbox_factory(runtime=runtime)["id"]
    for body in ({"to_disk": "yes"}, {"to_disk": 1}, "[1]"):
        r = client.request("POST", f"/v1/sandboxes/{source}/pause", body=body,
                           headers={"Content-Type": "application/json"} if isinstance(body, str) else None)
        assert_error_shape(r, 422)
    r = client.request("POST", f"/v1/sandboxes/{source}/pause", body="{", headers={"Content-Type": "application/json"})
    assert_error_shape(r, 400)
    assert client.sandbox(source)["state"] == "running"
    # No body and an empty object pause in memory, as before.
    for body in (None, {}):
        r = client.post(f"/v1/sandboxes/{source}/pause", body)
        assert r.status == 200 and (r.json()["state"], r.json()["paused_to_disk"]) == ("paused", False), r
        assert client.post(f"/v1/sandboxes/{source}/resume").status == 200
    assert client.post(f"/v1/sandboxes/{source}/stop").status == 200
    r = client.post(f"/v1/sandboxes/{source}/pause", {"to_disk": True})
    assert_error_shape(r, 409)


def test_a_sandbox_paused_to_disk_outlives_a_daemon_kill_and_idle_pauses_go_to_disk(daemon_factory):
    daemon = daemon_factory()
    daemon.extra_args = ("--idle-pause", "disk")
    daemon.start()
    client = daemon.client()
    if "gvisor" not in available_runtimes(client):
        pytest.skip("this host has no gvisor runtime")
    source = client.create(runtime="gvisor")["id"]
    pid = start_counter(client, source)
    assert client.post(f"/v1/sandboxes/{source}/pause", {"to_disk": True}).status == 200
    daemon.stop(signal.SIGKILL)
    daemon.start()
    client = daemon.client()
    assert client.sandbox(source)["paused_to_disk"] is True
    assert_counts_on(client, source, pid)
    # An idle sandbox is paused to disk by the timer, as the server option says.
    idle = client.create(runtime="gvisor", idle_timeout_s=1)["id"]
    assert wait_until(lambda: client.sandbox(idle)["paused_to_disk"], timeout=30)
    assert sandbox_processes_on_host(idle) == []
    assert client.sh(idle, "echo back") == "back\n"
    for sandbox_id in (source, idle):
        client.remove(sandbox_id)
