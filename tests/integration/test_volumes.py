"""Named volumes: made and removed through the API, mounted idmapped into sandboxes (the same
files with the same owners in every sandbox), capped in size, outliving their sandboxes and
the daemon."""

import os
import signal
import sqlite3
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

import harness
from harness import BULKHEAD, STORED_ID_BASE, assert_error_shape, sandbox_host_uid_range

REPO_ROOT = Path(__file__).resolve().parents[2]


def new_name(tag: str = "v") -> str:
    return f"{tag}-{uuid.uuid4().hex[:10]}"


class Volumes:
    """Creates volumes on a daemon; removes the ones still there at the end."""

    def __init__(self, client):
        self.client = client
        self.made = []

    def create(self, size_mb: int = 64, name: str | None = None) -> dict:
        name = name or new_name()
        r = self.client.post("/v1/volumes", {"name": name, "size_mb": size_mb})
        assert r.status == 201, r
        self.made.append(name)
        return r.json()

    def cleanup(self):
        for name in self.made:
            self.client.delete(f"/v1/volumes/{name}")


@pytest.fixture
def volumes(client):
    v = Volumes(client)
    yield v
    v.cleanup()


def volume_data_dir(state_dir: Path, name: str) -> Path:
    """vol-<name> in the daemon's layer area (the quota filesystem, or plain dirs without one)."""
    for area in (state_dir / "storage" / "layers", state_dir / "layers"):
        if (area / f"vol-{name}").exists():
            return area / f"vol-{name}"
    raise AssertionError(f"no directory for volume {name} under {state_dir}")


def mount(name, path, read_only=False):
    return {"name": name, "path": path, "read_only": read_only}


def test_volume_create_list_get_delete(client, volumes):
    name = new_name("crud")
    volume = volumes.create(size_mb=32, name=name)
    assert volume["name"] == name
    assert volume["size_mb"] == 32
    assert volume["mounted_by"] == []
    assert isinstance(volume["used_bytes"], int) and volume["used_bytes"] >= 0
    assert volume["created_at"].endswith("Z")

    listed = client.get("/v1/volumes")
    assert listed.status == 200, listed
    assert name in [v["name"] for v in listed.json()["volumes"]]
    got = client.get(f"/v1/volumes/{name}")
    assert got.status == 200 and got.json()["size_mb"] == 32, got

    again = client.post("/v1/volumes", {"name": name, "size_mb": 8})
    assert assert_error_shape(again, 409)["code"] == "volume_exists"
    assert client.get(f"/v1/volumes/{name}").json()["size_mb"] == 32

    assert client.delete(f"/v1/volumes/{name}").status == 204
    assert assert_error_shape(client.get(f"/v1/volumes/{name}"), 404)["code"] == "volume_not_found"
    assert assert_error_shape(client.delete(f"/v1/volumes/{name}"), 404)["code"] == "volume_not_found"
    assert name not in [v["name"] for v in client.get("/v1/volumes").json()["volumes"]]
    # The name is free again.
    volumes.create(name=name, size_mb=8)


def test_bad_volume_requests_are_4xx_and_leave_nothing(daemon, client, volumes):
    for body in ({}, {"name": ""}, {"name": "Upper"}, {"name": "-dash"}, {"name": "a/b"}, {"name": "x" * 64},
                 {"name": 7}, {"name": "ok", "size_mb": 0}, {"name": "ok", "size_mb": 1048577},
                 {"name": "ok", "size_mb": "8"}, {"name": "ok", "size_mb": 1.5}):
        assert_error_shape(client.post("/v1/volumes", body), 422)
    assert_error_shape(client.post("/v1/volumes", "{not json"), 400)
    for bad in ("UPPER", "a%2Fb", "..", "x" * 64):
        assert_error_shape(client.get(f"/v1/volumes/{bad}"), 404)
        assert_error_shape(client.delete(f"/v1/volumes/{bad}"), 404)

    name = volumes.create(size_mb=8)["name"]
    before = {s["id"] for s in client.list()}
    unknown = client.post("/v1/sandboxes", {"volumes": [mount(new_name("nope"), "/cache")]})
    assert assert_error_shape(unknown, 404)["code"] == "volume_not_found"
    for entries in ([mount(name, "cache")], [mount(name, "/")], [mount(name, "/cache/")], [mount(name, "/a/../b")],
                    [mount(name, "/proc/x")], [mount(name, "/sys")], [mount(name, "/dev/shm")],
                    [mount(name, "/c"), mount(name, "/c")], [mount(name, "/c"), mount(name, "/c/d")],
                    [{"name": name, "path": "/c", "readonly": True}], [{"name": name, "path": "/c", "read_only": 1}],
                    [mount(name, f"/v{i}") for i in range(17)], "cache", [name]):
        assert_error_shape(client.post("/v1/sandboxes", {"volumes": entries}), 422)
    # Paths the image cannot mount on: a symlink on the way (merged /usr: /bin -> usr/bin), and a
    # new directory under the read-only /usr. Refused as the request's fault, nothing left over.
    for path in ("/bin/cache", "/usr/cache"):
        if path.startswith("/bin") and not os.path.islink("/bin"):
            continue
        r = client.post("/v1/sandboxes", {"volumes": [mount(name, path)]})
        assert_error_shape(r, 422)
        assert path in r.json()["error"]["message"], r
    assert {s["id"] for s in client.list()} == before
    assert client.get(f"/v1/volumes/{name}").json()["mounted_by"] == []
    assert client.delete(f"/v1/volumes/{name}").status == 204


def test_two_sandboxes_share_a_volume_with_the_same_owners(daemon, client, sandbox_factory, volumes):
    name = volumes.create(size_mb=64)["name"]
    a = sandbox_factory(volumes=[mount(name, "/cache")])["id"]
    b = sandbox_factory(volumes=[mount(name, "/data/shared"), mount(name, "/ro", read_only=True)])["id"]
    assert client.sandbox(a)["volumes"] == [mount(name, "/cache")]
    # Each sandbox maps its ids onto its own host range, yet both see the same owners below.
    assert sandbox_host_uid_range(client, a)[0] != sandbox_host_uid_range(client, b)[0]

    assert client.sh(a, "stat -c '%U:%G %a' /cache") == "root:root 755\n"
    client.sh(a, "echo from-root > /cache/root.txt && mkdir /cache/u && chown user:user /cache/u")
    client.sh(a, "echo from-user > /cache/u/user.txt && id -u", user="user")

    owners = "stat -c '%n %U:%G %u:%g' {0}/root.txt {0}/u {0}/u/user.txt"
    assert client.sh(b, "cat /data/shared/root.txt /data/shared/u/user.txt") == "from-root\nfrom-user\n"
    assert client.sh(b, owners.format("/data/shared")).replace("/data/shared", "X") == \
        client.sh(a, owners.format("/cache")).replace("/cache", "X") == \
        "X/root.txt root:root 0:0\nX/u user:user 1000:1000\nX/u/user.txt user:user 1000:1000\n"
    # The user of B owns what the user of A made, and can change it.
    client.sh(b, "echo more >> /data/shared/u/user.txt", user="user")
    assert client.sh(a, "cat /cache/u/user.txt") == "from-user\nmore\n"
    # The same volume a second time, read-only: readable, every write refused with EROFS.
    assert client.sh(b, "cat /ro/root.txt") == "from-root\n"
    for script in ("touch /ro/new", "echo x >> /ro/root.txt", "mkdir /ro/d", "rm /ro/root.txt"):
        result = client.exec(b, script)
        assert result["exit_code"] != 0, (script, result)
        assert "read-only file system" in result["stderr"].lower(), (script, result)
    # Mounted idmapped, without setuid binaries or device files.
    line = client.sh(a, "grep ' /cache ' /proc/self/mountinfo")
    if harness.RUNTIME == "gvisor":
        # gVisor shows its own mount: idmapped is the host's mount under it (the owners above show
        # it works), and gVisor opens no device file through a volume (runsc's emulated-only policy).
        assert "nosuid" in line, line
    elif harness.RUNTIME == "microvm":
        # The guest mounts the volume's virtio-fs share; its virtiofsd serves the idmapped mount.
        assert "nosuid" in line and "nodev" in line and "virtiofs" in line, line
    else:
        assert "nosuid" in line and "nodev" in line and "idmapped" in line, line

    # On the host the files carry the stored ids (no host account's), behind a directory only
    # root may enter.
    volume_dir = volume_data_dir(daemon.state_dir, name)
    assert stat.S_IMODE(volume_dir.stat().st_mode) == 0o700
    data = volume_dir / "data"
    assert (data.stat().st_uid, stat.S_IMODE(data.stat().st_mode)) == (STORED_ID_BASE, 0o755)
    user_file = (data / "u" / "user.txt").stat()
    assert (user_file.st_uid, user_file.st_gid) == (STORED_ID_BASE + 1000, STORED_ID_BASE + 1000)

    mounted_by = client.get(f"/v1/volumes/{name}").json()["mounted_by"]
    assert sorted(mounted_by) == sorted([a, b])


def test_volume_size_is_a_hard_cap(client, sandbox_factory, volumes):
    name = volumes.create(size_mb=16)["name"]
    sandbox_id = sandbox_factory(volumes=[mount(name, "/cache")])["id"]
    result = client.exec(sandbox_id, "dd if=/dev/zero of=/cache/big bs=1M count=64 2>&1; sync")
    assert "no space" in result["stdout"].lower() or "quota" in result["stdout"].lower(), result
    size = int(client.sh(sandbox_id, "stat -c %s /cache/big"))
    assert size <= 17 * 1024 * 1024, size
    used = client.get(f"/v1/volumes/{name}").json()["used_bytes"]
    assert 0 < used <= 17 * 1024 * 1024, used
    # The sandbox and the volume go on: free the space, write again.
    client.sh(sandbox_id, "rm /cache/big && echo ok > /cache/small && cat /cache/small")
    assert client.sh(sandbox_id, "echo still-here") == "still-here\n"


def test_volume_in_use_cannot_be_deleted_and_its_data_outlives_the_sandbox(client, sandbox_factory, volumes):
    name = volumes.create(size_mb=16)["name"]
    first = sandbox_factory(volumes=[mount(name, "/cache")])["id"]
    client.sh(first, "echo kept > /cache/kept.txt")
    busy = client.delete(f"/v1/volumes/{name}")
    assert assert_error_shape(busy, 409)["code"] == "volume_in_use"
    assert first in busy.json()["error"]["message"]

    client.remove(first)
    assert client.get(f"/v1/volumes/{name}").json()["mounted_by"] == []
    second = sandbox_factory(volumes=[mount(name, "/elsewhere/cache")])["id"]
    assert client.sh(second, "cat /elsewhere/cache/kept.txt") == "kept\n"
    assert_error_shape(client.delete(f"/v1/volumes/{name}"), 409)
    client.remove(second)
    assert client.delete(f"/v1/volumes/{name}").status == 204


def test_cli_volume_commands_and_run_with_a_volume(daemon):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env["BULKHEAD_STATE"] = str(daemon.state_dir)

    def cli(*args):
        return subprocess.run([str(BULKHEAD), *args], env=env, capture_output=True, text=True, timeout=120)

    name = new_name("cli")
    try:
        r = cli("volume", "create", name, "--size-mb", "16")
        assert (r.returncode, r.stdout) == (0, name + "\n"), r
        r = cli("volume", "ls")
        assert r.returncode == 0 and name in r.stdout and "16.0 MiB" in r.stdout, r
        r = cli("run", "--volume", f"{name}:/cache", "--", "sh", "-c", "echo hi > /cache/f && cat /cache/f")
        assert (r.returncode, r.stdout) == (0, "hi\n"), r
        r = cli("run", "-v", f"{name}:/cache:ro", "--", "sh", "-c", "cat /cache/f; touch /cache/g")
        assert r.returncode != 0 and r.stdout == "hi\n" and "Read-only" in r.stderr, r
        r = cli("run", "--volume", "nocolon", "--", "true")
        assert r.returncode == 2, r
        r = cli("volume", "rm", name)
        assert (r.returncode, r.stdout) == (0, name + "\n"), r
        r = cli("volume", "rm", name)
        assert r.returncode == 1 and "volume_not_found" in r.stderr, r
    finally:
        cli("volume", "rm", name)


def test_volumes_and_their_mounts_survive_a_daemon_kill(daemon_factory):
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    name = new_name("keep")
    assert client.post("/v1/volumes", {"name": name, "size_mb": 16}).status == 201
    sandbox_id = client.create(volumes=[mount(name, "/cache")])["id"]
    client.sh(sandbox_id, "echo before > /cache/a.txt")

    daemon.stop(signal.SIGKILL)
    # What a crash can leave: a row whose directory was never made, a directory without a row.
    area = volume_data_dir(daemon.state_dir, name).parent
    ghost, orphan = new_name("ghost"), new_name("orphan")
    (area / f"vol-{orphan}" / "data").mkdir(parents=True)
    db = sqlite3.connect(daemon.state_dir / "bulkhead.db")
    db.execute("INSERT INTO volumes (name, size_mb, created_at) VALUES (?, 8, '2026-01-01T00:00:00Z')", (ghost,))
    db.commit()
    db.close()
    daemon.start()
    client = daemon.client()

    names = [v["name"] for v in client.get("/v1/volumes").json()["volumes"]]
    assert names == [name], names
    assert not (area / f"vol-{orphan}").exists()
    # The running sandbox kept its mount; the daemon still knows who uses the volume.
    assert client.sh(sandbox_id, "cat /cache/a.txt && echo after >> /cache/a.txt") == "before\n"
    assert client.get(f"/v1/volumes/{name}").json()["mounted_by"] == [sandbox_id]
    assert assert_error_shape(client.delete(f"/v1/volumes/{name}"), 409)["code"] == "volume_in_use"
    assert client.sandbox(sandbox_id)["volumes"] == [mount(name, "/cache")]
    client.remove(sandbox_id)
    other = client.create(volumes=[mount(name, "/v")])["id"]
    assert client.sh(other, "cat /v/a.txt") == "before\nafter\n"
    client.remove(other)
    assert client.delete(f"/v1/volumes/{name}").status == 204
    assert not (area / f"vol-{name}").exists()


def test_escape_probe_suite_finds_nothing_with_a_volume(daemon, client, sandbox_factory, volumes, escape_binary):
    name = volumes.create(size_mb=64)["name"]
    sandbox_id = sandbox_factory(pids=256, memory_mb=256, disk_mb=128, volumes=[mount(name, "/cache")])["id"]
    client.upload(sandbox_id, "/cache/escape", escape_binary.read_bytes())
    argv = ["/cache/escape", "--tier", harness.RUNTIME, "--max-pids", "256", "--mem-mb", "256", "--disk-mb", "128",
            "--disk-dir", "/workspace",
            "--forbid", str(daemon.state_dir), "--forbid", str(daemon.state_dir / "api-key"),
            "--forbid", str(REPO_ROOT), "--forbid", "/run/bulkhead"]
    result = client.exec(sandbox_id, argv, timeout_s=240, timeout=300)
    report = f"exit={result['exit_code']}\n--- stdout\n{result['stdout']}\n--- stderr\n{result['stderr']}"
    lines = result["stdout"].strip().splitlines()
    assert lines and result["exit_code"] == 0, report
    assert lines[-1].endswith(" 0 failed"), report
    assert "FAIL " not in result["stdout"], report
