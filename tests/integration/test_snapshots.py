"""Snapshots, sandboxes started from them and copy-on-write forks, on both storage drivers
(a daemon with --storage-driver overlay and one with --storage-driver btrfs)."""

import re
import signal
import sqlite3
import uuid

import pytest

import conftest
import harness
from harness import assert_error_shape, wait_until
from test_memory_snapshots import MEMORY_RUNTIMES

# Warm pools of snapshots: not in the microvm matrix, which runs this file too (a pooled guest
# takes only creates of the default size, these change it; test_microvm.py tests its pool).
needs_pools = pytest.mark.skipif(harness.RUNTIME == "microvm", reason="the microvm tier's pool: test_microvm.py")


# The storage driver works on the host, the same under every tier: the microvm matrix (a guest
# boots in seconds under TCG) checks its files on one.
DRIVERS = ["overlay"] if harness.RUNTIME == "microvm" else ["overlay", "btrfs"]


@pytest.fixture(scope="module", params=DRIVERS)
def driver_daemon(session_dir, request):
    d = conftest._new_daemon(session_dir)
    d.extra_args = ("--storage-driver", request.param)
    d.driver = request.param
    request.addfinalizer(d.destroy)
    d.start()
    return d


class Tracker:
    """Creates sandboxes and snapshots on a daemon; deletes what is left after the test."""

    def __init__(self, daemon):
        self.daemon = daemon
        self.sandboxes = []
        self.snapshots = []

    @property
    def client(self):
        return self.daemon.client()

    def create(self, **spec) -> dict:
        sandbox = self.client.create(**spec)
        self.sandboxes.append(sandbox["id"])
        return sandbox

    def snapshot(self, sandbox_id, **body) -> dict:
        r = self.client.post(f"/v1/sandboxes/{sandbox_id}/snapshots", body)
        assert r.status == 201, r
        self.snapshots.append(r.json()["id"])
        return r.json()

    def fork(self, sandbox_id, count) -> list:
        r = self.client.post(f"/v1/sandboxes/{sandbox_id}/fork", {"count": count})
        assert r.status == 201, r
        forks = r.json()["sandboxes"]
        self.sandboxes += [f["id"] for f in forks]
        return forks

    def cleanup(self):
        client = self.client
        for sandbox_id in self.sandboxes:
            client.delete(f"/v1/sandboxes/{sandbox_id}")
        for snapshot_id in self.snapshots:
            client.delete(f"/v1/snapshots/{snapshot_id}")


@pytest.fixture
def made(driver_daemon):
    tracker = Tracker(driver_daemon)
    yield tracker
    assert driver_daemon.running(), driver_daemon.log_tail()
    tracker.cleanup()


def snapshots_root(daemon):
    quota_area = daemon.state_dir / "storage" / "snapshots"
    return quota_area if quota_area.is_dir() else daemon.state_dir / "snapshots"


def test_metrics_name_the_driver(driver_daemon):
    text = driver_daemon.client().get("/metrics").body.decode()
    assert f'bulkhead_storage_driver_info{{driver="{driver_daemon.driver}"}} 1' in text


def test_snapshot_is_immutable_and_starts_sandboxes_with_its_files(made):
    client = made.client
    source = made.create(metadata={"role": "source"})["id"]
    client.sh(source, "echo before > /workspace/a.txt && mkdir -m 777 /workspace/shared")
    # A file a non-root user wrote keeps that user in the copies.
    client.sh(source, "echo mine > /workspace/shared/user.txt", user="1000:1000")
    client.sh(source, "ln -s a.txt /workspace/link && ln /workspace/a.txt /workspace/hard && rm -f /etc/hostname")

    snapshot = made.snapshot(source, name="first")
    assert snapshot["name"] == "first" and snapshot["sandbox_id"] == source
    assert snapshot["memory"] is False and snapshot["image"] == "host"
    assert re.fullmatch(r"snap_[a-z0-9]{20}", snapshot["id"]), snapshot
    assert snapshot["size_bytes"] > 0
    assert client.get(f"/v1/snapshots/{snapshot['id']}").json() == snapshot
    assert snapshot["id"] in [s["id"] for s in client.get("/v1/snapshots").json()["snapshots"]]

    # Writes after the snapshot show neither in it nor in sandboxes started from it.
    client.sh(source, "echo after > /workspace/a.txt && echo new > /workspace/later.txt")
    started = made.create(from_snapshot=snapshot["id"])
    assert started["parent_snapshot"] == snapshot["id"] and started["image"] == "host"
    copy = started["id"]
    assert client.sh(copy, "cat /workspace/a.txt /workspace/link /workspace/hard") == "before\n" * 3
    assert client.sh(copy, "test ! -e /workspace/later.txt && test ! -e /etc/hostname && echo ok") == "ok\n"
    assert client.sh(copy, "stat -c '%u:%g %n' /workspace/shared/user.txt /workspace/a.txt") == \
        "1000:1000 /workspace/shared/user.txt\n0:0 /workspace/a.txt\n"
    assert client.sh(copy, "stat -c %h /workspace/a.txt") == "2\n"
    # The copy is writable, by root and by the user, and its writes stay its own.
    client.sh(copy, "echo copy > /workspace/a.txt")
    client.sh(copy, "echo more >> /workspace/shared/user.txt", user="1000:1000")
    assert client.sh(source, "cat /workspace/a.txt /workspace/shared/user.txt") == "after\nmine\n"
    second = made.create(from_snapshot=snapshot["id"])["id"]
    assert client.sh(second, "cat /workspace/a.txt /workspace/shared/user.txt") == "before\nmine\n"


def test_fork_makes_independent_copies_with_the_same_settings(made):
    client = made.client
    parent = made.create(env={"GREETING": "hi"}, metadata={"task": "t1"}, memory_mb=256, timeout_s=600)
    client.sh(parent["id"], "echo shared > /workspace/base.txt")
    forks = made.fork(parent["id"], 3)
    assert len(forks) == 3 and len({f["id"] for f in forks} | {parent["id"]}) == 4
    for i, fork in enumerate(forks):
        assert fork["state"] == "running"
        assert fork["metadata"] == {"task": "t1"} and fork["memory_mb"] == 256 and fork["image"] == "host"
        assert fork["network"] == parent["network"] and fork["parent_snapshot"] is None
        assert fork["expires_at"] is not None
        assert client.sh(fork["id"], "cat /workspace/base.txt; echo $GREETING") == "shared\nhi\n"
        client.sh(fork["id"], f"echo fork{i} > /workspace/base.txt")
    client.sh(parent["id"], "echo parent > /workspace/base.txt")
    for i, fork in enumerate(forks):
        assert client.sh(fork["id"], "cat /workspace/base.txt") == f"fork{i}\n"
    assert client.sh(parent["id"], "cat /workspace/base.txt") == "parent\n"
    # The fork's own capture is not listed as a snapshot.
    assert client.get("/v1/snapshots").json()["snapshots"] == []


def test_snapshot_of_a_file_being_appended_holds_only_whole_lines(made):
    client = made.client
    source = made.create()["id"]
    line = "x" * 200
    writer = f"i=0; while :; do echo \"$i {line}\"; i=$((i+1)); [ $((i % 100)) -eq 0 ] && sleep 0.01; done >> /workspace/log"
    r = client.post(f"/v1/sandboxes/{source}/processes", {"cmd": writer})
    assert r.status == 201, r
    # (cat, not `wc -c < log`: before the writer has made the file, that redirect fails, `[`
    # errs and the loop would end at once, snapshotting an early file.)
    client.sh(source, "while [ $(cat /workspace/log 2>/dev/null | wc -c) -lt 100000 ]; do sleep 0.05; done")
    snapshots = [made.snapshot(source) for _ in range(3)]
    # Every line whole and in order, the last one ended: prints the number of lines.
    check = (f"awk -v L={line} '{{ if ($0 != (n+0) \" \" L) {{ print \"cut at \" n \": \" substr($0, 1, 30); exit 1 }} n++ }}"
             " END { print n+0 }' /workspace/log && test \"$(tail -c 1 /workspace/log | od -An -c | tr -d ' ')\" = '\\n'")
    sizes = []
    for snapshot in snapshots:
        copy = made.create(from_snapshot=snapshot["id"])["id"]
        sizes.append(int(client.sh(copy, check)))
        client.remove(copy)
        made.sandboxes.remove(copy)
    assert sizes == sorted(sizes) and sizes[0] >= 400, sizes
    # The source was thawed after each capture: it still runs and its writer goes on.
    assert client.sh(source, "echo alive") == "alive\n"
    assert int(client.sh(source, "wc -l < /workspace/log")) > sizes[-1]


def snapshot_file(daemon, snapshot_id, path):
    """The bytes of a file a snapshot holds, read from the driver's store on the host."""
    found = [p for p in (snapshots_root(daemon) / snapshot_id).rglob(path.rsplit("/", 1)[1])
             if str(p).endswith(path) and p.is_file()]
    assert len(found) == 1, found
    return found[0].read_bytes()


def test_snapshots_of_writes_across_pages_hold_each_write_whole_or_not_at_all(made):
    # Each write is one system call of 3 KB, so most cross a page: a guest kernel sends such a
    # write to the host's files as two requests (virtio-fs), and a freeze from outside alone
    # can fall between them (microvm: init stops the workload inside first).
    client = made.client
    source = made.create()["id"]
    line = b"y" * 3000
    # (At most ~5000 writes a second, 24 MB in all: the snapshots below find it still writing.)
    writer = ("import os, time\n"
              "fd = os.open('/workspace/log', os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)\n"
              "for i in range(8000):\n"
              f"    os.write(fd, b'%d {line.decode()}\\n' % i)\n"
              "    if i % 10 == 9: time.sleep(0.002)\n")
    r = client.post(f"/v1/sandboxes/{source}/processes", {"cmd": ["python3", "-c", writer]})
    assert r.status == 201, r
    client.sh(source, "while [ $(cat /workspace/log 2>/dev/null | wc -c) -lt 300000 ]; do sleep 0.05; done")
    taken = [made.snapshot(source)["id"] for _ in range(8)]
    # A paused sandbox's snapshot, and a pause in the middle of the writes.
    for _ in range(3):
        assert client.post(f"/v1/sandboxes/{source}/pause").status == 200
        taken.append(made.snapshot(source)["id"])
        assert client.post(f"/v1/sandboxes/{source}/resume").status == 200
    counts = []
    for snapshot_id in taken:
        lines = snapshot_file(made.daemon, snapshot_id, "workspace/log").split(b"\n")
        assert lines[-1] == b"", (snapshot_id, len(lines), lines[-1][:40])  # the last line ended
        for n, text in enumerate(lines[:-1]):
            assert text == b"%d %s" % (n, line), (snapshot_id, n, text[:40], len(text))
        counts.append(len(lines) - 1)
    assert counts == sorted(counts) and counts[0] >= 100, counts
    assert client.sh(source, "echo alive") == "alive\n"


def test_a_snapshot_in_use_cannot_be_deleted(made):
    client = made.client
    source = made.create()["id"]
    snapshot = made.snapshot(source)["id"]
    user = made.create(from_snapshot=snapshot)["id"]
    r = client.delete(f"/v1/snapshots/{snapshot}")
    assert_error_shape(r, 409)
    assert r.json()["error"]["code"] == "snapshot_in_use"
    # The source sandbox going does not matter; the one started from the snapshot does.
    client.remove(source)
    assert client.delete(f"/v1/snapshots/{snapshot}").status == 409
    client.remove(user)
    assert client.delete(f"/v1/snapshots/{snapshot}").status == 204
    assert client.get(f"/v1/snapshots/{snapshot}").status == 404
    assert not (snapshots_root(made.daemon) / snapshot).exists()
    made.sandboxes.clear()
    made.snapshots.remove(snapshot)


def test_bad_input_is_answered_404_or_422(made):
    client = made.client
    source = made.create()["id"]
    snapshot = made.snapshot(source)["id"]
    cases = [
        ("POST", "/v1/sandboxes/nosuchsandbox0000000/snapshots", {}, 404, "sandbox_not_found"),
        ("POST", "/v1/sandboxes/nosuchsandbox0000000/fork", {"count": 1}, 404, "sandbox_not_found"),
        ("GET", "/v1/snapshots/snap_nosuchsnapshot00000", None, 404, "snapshot_not_found"),
        ("DELETE", "/v1/snapshots/snap_nosuchsnapshot00000", None, 404, "snapshot_not_found"),
        ("GET", "/v1/snapshots/..", None, 404, None),
        ("POST", "/v1/sandboxes", {"from_snapshot": "snap_nosuchsnapshot00000"}, 404, "snapshot_not_found"),
        ("POST", "/v1/sandboxes", {"from_snapshot": "../../etc"}, 404, "snapshot_not_found"),
        ("POST", "/v1/sandboxes", {"from_snapshot": snapshot, "image": "otherimage"}, 422, None),
        ("POST", "/v1/sandboxes", {"from_snapshot": 12}, 422, None),
        ("POST", f"/v1/sandboxes/{source}/snapshots", {"name": "n" * 129}, 422, None),
        ("POST", f"/v1/sandboxes/{source}/snapshots", {"name": 5}, 422, None),
        ("POST", f"/v1/sandboxes/{source}/snapshots", "[1]", 422, None),
        ("POST", f"/v1/sandboxes/{source}/snapshots", "{", 400, None),
        ("POST", f"/v1/sandboxes/{source}/snapshots", {"memory": "yes"}, 422, None),
    ] + [("POST", f"/v1/sandboxes/{source}/fork", {"count": bad}, 422, None) for bad in (0, 17, "x", -1, 1.5)]
    if harness.RUNTIME not in MEMORY_RUNTIMES:
        # Memory and processes this tier cannot capture: asked for, refused rather than left out.
        cases += [
            ("POST", f"/v1/sandboxes/{source}/snapshots", {"memory": True}, 422, "runtime_unsupported"),
            ("POST", f"/v1/sandboxes/{source}/fork", {"memory": True, "count": 2}, 422, "runtime_unsupported"),
        ]
    for method, path, body, status, code in cases:
        r = client.request(method, path, body=body,
                           headers={"Content-Type": "application/json"} if isinstance(body, str) else None)
        assert_error_shape(r, status)
        if code:
            assert r.json()["error"]["code"] == code, (method, path, body, r)
    # Nothing was made by any of them.
    assert [s["id"] for s in client.list()] == [source]
    assert [s["id"] for s in client.get("/v1/snapshots").json()["snapshots"]] == [snapshot]


def test_everything_listed_works_after_a_sigkill_right_after_snapshot_and_fork(made):
    daemon = made.daemon
    client = made.client
    source = made.create()["id"]
    token = uuid.uuid4().hex
    client.sh(source, f"echo {token} > /workspace/keep.txt")
    snapshot = made.snapshot(source)["id"]
    daemon.stop(signal.SIGKILL)
    daemon.start()
    client = daemon.client()
    listed = [s["id"] for s in client.get("/v1/snapshots").json()["snapshots"]]
    assert listed == [snapshot], daemon.log_tail()
    copy = made.create(from_snapshot=snapshot)["id"]
    assert client.sh(copy, "cat /workspace/keep.txt") == f"{token}\n"

    forks = made.fork(source, 2)
    daemon.stop(signal.SIGKILL)
    # Leftovers of a crash mid-capture: a row still "creating" with its files, and files
    # without a row. The restart removes both.
    root = snapshots_root(daemon)
    (root / "snap_halfmade0000000000000" / "upper").mkdir(parents=True)
    (root / "snap_orphan00000000000000" / "upper").mkdir(parents=True)
    # A memory image without its snapshot (a memory snapshot the kill cut short).
    (daemon.state_dir / "memory" / "snap_orphanmemory000000000").mkdir(parents=True)
    (daemon.state_dir / "memory" / "snap_orphanmemory000000000" / "checkpoint.img").write_bytes(b"x")
    with sqlite3.connect(daemon.state_dir / "bulkhead.db") as db:
        db.execute("INSERT INTO snapshots (id, name, sandbox_id, created_at, size_bytes, image, spec_json, uid_base, "
                   "state) VALUES ('snap_halfmade0000000000000', '', ?, '2020-01-01T00:00:00Z', 0, 'host', '{}', 0, "
                   "'creating')", (source,))
    daemon.start()
    client = daemon.client()
    ids = {s["id"] for s in client.list()}
    assert {source, copy} | {f["id"] for f in forks} == ids, daemon.log_tail()
    for fork in forks:
        assert client.sh(fork["id"], "cat /workspace/keep.txt") == f"{token}\n"
        client.sh(fork["id"], "echo writable > /workspace/w.txt")
    assert [s["id"] for s in client.get("/v1/snapshots").json()["snapshots"]] == [snapshot]
    assert sorted(p.name for p in root.iterdir()) == [snapshot], daemon.log_tail()
    assert list((daemon.state_dir / "memory").iterdir()) == []
    with sqlite3.connect(daemon.state_dir / "bulkhead.db") as db:
        assert db.execute("SELECT id FROM snapshots").fetchall() == [(snapshot,)]


# ---------------------------------------------------------------- export and import

@pytest.fixture(scope="module")
def other_daemon(session_dir, request):
    """A second host: the other storage driver, its own state dir and uid ranges."""
    d = conftest._new_daemon(session_dir)
    d.extra_args = ("--storage-driver", "btrfs")
    request.addfinalizer(d.destroy)
    d.start()
    return d


def test_export_import_moves_a_snapshot_between_daemons(made, other_daemon):
    client = made.client
    source = made.create()["id"]
    token = uuid.uuid4().hex
    client.sh(source, f"echo {token} > /workspace/token; mkdir -p /workspace/deep/dir; "
                      "head -c 3000000 /dev/urandom > /workspace/deep/dir/blob; sha256sum /workspace/deep/dir/blob "
                      "> /workspace/blob.sum; ln -s /etc/shadow /workspace/link; ln /workspace/token /workspace/hard; "
                      "setpriv --reuid=1000 --regid=1000 --clear-groups sh -c 'echo mine > /tmp/by-1000'; "
                      "setfattr -n user.note -v kept /workspace/token 2>/dev/null || true; rm -f /etc/motd")
    snapshot = made.snapshot(source, name="portable")
    r = client.get(f"/v1/snapshots/{snapshot['id']}/export")
    assert r.status == 200, r
    archive = r.body
    assert archive[:4] == b"\x28\xb5\x2f\xfd", archive[:8]  # a zstd frame

    other = other_daemon.client()
    r = other.request("POST", "/v1/snapshots/import", body=archive, headers={"Content-Type": "application/zstd"})
    assert r.status == 201, r
    imported = r.json()
    try:
        assert imported["id"] != snapshot["id"] and imported["name"] == "portable" and imported["image"] == "host"
        started = other.create(from_snapshot=imported["id"])["id"]
        try:
            assert other.sh(started, "cat /workspace/token") == token + "\n"
            assert other.sh(started, "sha256sum -c /workspace/blob.sum") == "/workspace/deep/dir/blob: OK\n"
            assert other.sh(started, "readlink /workspace/link; stat -c %h /workspace/token") == "/etc/shadow\n2\n"
            assert other.sh(started, "stat -c '%u' /tmp/by-1000 /workspace/token") == "1000\n0\n"
            assert other.sh(started, "test -e /etc/motd && echo there || echo gone") == "gone\n"  # the whiteout
            assert other.sh(started, "echo more >> /workspace/token; tail -1 /workspace/token") == "more\n"
        finally:
            other.remove(started)
    finally:
        other.delete(f"/v1/snapshots/{imported['id']}")


def test_import_refuses_what_is_not_a_snapshot_archive(made):
    client = made.client
    before = {s["id"] for s in client.get("/v1/snapshots").json()["snapshots"]}
    for body in (b"not an archive at all", b"\x28\xb5\x2f\xfd" + b"\0" * 64, b""):
        r = client.request("POST", "/v1/snapshots/import", body=body, headers={"Content-Type": "application/zstd"})
        assert_error_shape(r, 422)
    after = {s["id"] for s in client.get("/v1/snapshots").json()["snapshots"]}
    assert after == before
    assert_error_shape(client.get(f"/v1/snapshots/snap_{'a' * 20}/export"), 404)
    assert_error_shape(client.get("/v1/snapshots/../export"), (400, 404))


@needs_pools
def test_a_used_snapshot_keeps_a_ready_sandbox_and_gives_it_up(daemon_factory):
    """After a first from_snapshot, the warm pool keeps a sandbox of that snapshot ready; the
    next create takes it (with its own settings), and deleting the snapshot frees it."""
    daemon = daemon_factory(warm_pool=1)
    daemon.extra_args = ("--storage-driver", "btrfs")
    daemon.start()
    client = daemon.client()
    source = client.create()["id"]
    client.sh(source, "echo from-the-snapshot > /workspace/mark")
    snapshot = client.post(f"/v1/sandboxes/{source}/snapshots", {}).json()["id"]
    first = client.create(from_snapshot=snapshot)["id"]
    staged = lambda: len(list((daemon.state_dir / "sandboxes").iterdir()))  # noqa: E731
    metric = lambda name: int(re.search(rf"^{name} (\d+)$", client.get("/metrics").body.decode(),  # noqa: E731
                                        re.M).group(1))
    # Ready: one sandbox of the host image, one of the snapshot.
    assert wait_until(lambda: metric("bulkhead_warm_pool_ready") == 2, timeout=30)
    assert staged() == 4  # with source and first
    hits = lambda: metric("bulkhead_warm_pool_hits_total")  # noqa: E731
    before = hits()
    second = client.create(from_snapshot=snapshot, memory_mb=300, metadata={"n": "2"})
    assert hits() == before + 1
    assert second["memory_mb"] == 300 and second["metadata"] == {"n": "2"}, second
    assert second["parent_snapshot"] == snapshot
    assert client.sh(second["id"], "cat /workspace/mark") == "from-the-snapshot\n"
    assert client.sh(second["id"], "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || "
                                   "cat /sys/fs/cgroup/memory.max") == f"{300 << 20}\n"
    for sandbox_id in (first, second["id"]):
        client.remove(sandbox_id)
    assert wait_until(lambda: metric("bulkhead_warm_pool_ready") == 2, timeout=30)  # its ready one is back
    assert staged() == 3
    assert client.delete(f"/v1/snapshots/{snapshot}").status == 204
    assert staged() == 2  # source and the host pool's: the snapshot's ready sandbox is gone


@needs_pools
def test_deleting_a_snapshot_waits_for_a_pool_refill_instead_of_refusing(daemon_factory):
    """Right after a sandbox made from a snapshot goes, the warm pool may be launching a spare
    from that snapshot: deleting the snapshot then is not the user's conflict. It must answer
    204 (the refill gives way) every time, and leave no spare behind."""
    daemon = daemon_factory(warm_pool=1)
    daemon.extra_args = ("--storage-driver", "btrfs")
    daemon.start()
    client = daemon.client()
    source = client.create()["id"]
    staged = lambda: len(list((daemon.state_dir / "sandboxes").iterdir()))  # noqa: E731
    for _ in range(5):
        snapshot = client.post(f"/v1/sandboxes/{source}/snapshots", {}).json()["id"]
        made = client.create(from_snapshot=snapshot)["id"]  # starts the snapshot's refill
        client.remove(made)
        r = client.delete(f"/v1/snapshots/{snapshot}")
        assert r.status == 204, r
    assert wait_until(lambda: staged() == 2, timeout=30), staged()  # source and the host pool's
