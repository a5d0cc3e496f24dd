"""The host side of the walls (issue 17): what an ordinary local user, or sandbox code, can get
from what bulkhead keeps on the host. Each test performs the attack as the red team found it:
a local user is `nobody` through setpriv, sandbox code runs through exec."""

import io
import os
import shutil
import stat
import struct
import subprocess
import tarfile
import tempfile
import uuid
from pathlib import Path

import pytest

import harness
from conftest import compile_static
from harness import STORED_ID_BASE, host_name

NOBODY = 65534

STAT_SOURCE = r"""
#include <stdio.h>
#include <sys/stat.h>
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (lstat(argv[i], &st) != 0) { printf("%s missing\n", argv[i]); continue; }
    printf("%s %u %u %o\n", argv[i], st.st_uid, st.st_gid, st.st_mode & 07777);
  }
  return 0;
}
"""

EUID_SOURCE = r"""
#include <stdio.h>
#include <unistd.h>
int main(void) { printf("euid %d\n", (int)geteuid()); return 0; }
"""


def as_nobody(*argv, **kw) -> subprocess.CompletedProcess:
    """Runs argv as the host's `nobody`, with no groups: an ordinary local user. (Through env:
    setpriv opens the program it runs before it drops root.)"""
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", "env", "--",
                           *argv],
                          capture_output=True, text=True, timeout=60, **kw)


def capability_root(value: bytes) -> int:
    """The root uid a security.capability value applies under (0 for a v2 value)."""
    magic = struct.unpack_from("<I", value)[0]
    if magic & 0xFF000000 == 0x03000000:
        return struct.unpack_from("<I", value, 20)[0]
    return 0


def host_root_privileges(root: Path) -> list[str]:
    """Everything under root that the host would run with root's privileges: setuid/setgid
    files owned by host uid/gid 0, and file capabilities whose root is host root."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            if (st.st_mode & stat.S_ISUID and st.st_uid == 0) or (st.st_mode & stat.S_ISGID and st.st_gid == 0):
                found.append(f"{path}: mode {oct(st.st_mode & 0o7777)} owner {st.st_uid}:{st.st_gid}")
            try:
                cap = os.getxattr(path, "security.capability", follow_symlinks=False)
            except OSError:
                continue
            if capability_root(cap) == 0:
                found.append(f"{path}: file capabilities that host root's processes get")
    return found


@pytest.fixture(scope="module")
def exposed(session_dir, request) -> harness.Daemon:
    """A daemon whose state dir sits in a directory every local user may enter, as
    /var/lib/bulkhead does (the session dir is root's alone, which would hide everything)."""
    parent = Path(tempfile.mkdtemp(prefix="bhhost-", dir="/tmp"))
    os.chmod(parent, 0o755)
    d = harness.Daemon(state_dir=parent / "state", log_path=session_dir / "daemon-host-side.log")

    def cleanup():
        d.destroy()
        shutil.rmtree(parent, ignore_errors=True)

    request.addfinalizer(cleanup)
    return d.start()


@pytest.fixture
def box(exposed, request):
    """Creates sandboxes on the exposed daemon; deletes them after the test."""
    client = exposed.client()
    made = []

    def make(**spec) -> str:
        made.append(client.create(**spec)["id"])
        return made[-1]

    request.addfinalizer(lambda: [client.delete(f"/v1/sandboxes/{sandbox_id}") for sandbox_id in made])
    return make


@pytest.fixture(scope="module")
def probes(session_dir) -> dict:
    return {"stat": compile_static(STAT_SOURCE, session_dir / "statprint"),
            "euid": compile_static(EUID_SOURCE, session_dir / "euidprint")}


def tar_member(tar, name, data=b"", mode=0o644, uid=0, gid=0, kind=tarfile.REGTYPE):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.size = kind, mode, uid, gid, len(data)
    tar.addfile(info, io.BytesIO(data) if data else None)


# ---------------------------------------------------------------- finding 1: images

def test_an_images_setuid_root_program_is_no_host_root_program(exposed, box, probes):
    daemon, client = exposed, exposed.client()
    name = f"suid-{uuid.uuid4().hex[:8]}"
    euid = probes["euid"].read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar_member(tar, "bin", kind=tarfile.DIRTYPE, mode=0o755)
        tar_member(tar, "bin/stat", probes["stat"].read_bytes(), mode=0o755)
        tar_member(tar, "bin/rootshell", euid, mode=0o4755)            # setuid root, like su
        tar_member(tar, "bin/groupshell", euid, mode=0o2755, gid=0)     # setgid root
        tar_member(tar, "home", kind=tarfile.DIRTYPE, mode=0o755)
        tar_member(tar, "home/user.txt", b"mine\n", uid=1000, gid=1000)
    r = client.request("PUT", f"/v1/images/{name}", buf.getvalue(), headers={"Content-Type": "application/x-tar"})
    assert r.status in (200, 201), r
    try:
        image_dir = daemon.state_dir / "images" / name
        rootfs = image_dir / "rootfs"
        # On the host: nothing the image holds runs as host root, and its owners are stored ids.
        assert host_root_privileges(daemon.state_dir / "images") == []
        shell = (rootfs / "bin" / "rootshell").stat()
        assert (shell.st_uid, shell.st_gid) == (STORED_ID_BASE, STORED_ID_BASE)
        assert (rootfs / "home" / "user.txt").stat().st_uid == STORED_ID_BASE + 1000
        # A local user can neither reach the program nor, had it a copy of the path, run it as root.
        ran = as_nobody(str(rootfs / "bin" / "rootshell"))
        assert ran.returncode != 0 and "euid 0" not in ran.stdout, ran
        assert as_nobody("ls", str(daemon.state_dir)).returncode != 0

        # In a sandbox the image looks as it was packed: root's setuid program, user 1000's file.
        sandbox_id = box(image=name)
        out = client.exec(sandbox_id, ["/bin/stat", "/bin/rootshell", "/bin/groupshell", "/home/user.txt"])
        assert out["exit_code"] == 0, out
        assert out["stdout"].splitlines() == ["/bin/rootshell 0 0 4755", "/bin/groupshell 0 0 2755",
                                              "/home/user.txt 1000 1000 644"], out
        client.remove(sandbox_id)
    finally:
        client.delete(f"/v1/images/{name}")


def test_volume_files_sandbox_root_makes_setuid_or_capable_are_nothing_on_the_host(exposed, box):
    daemon, client = exposed, exposed.client()
    name = f"v{uuid.uuid4().hex[:8]}"
    assert client.post("/v1/volumes", {"name": name, "size_mb": 64}).status == 201
    try:
        sandbox_id = box(volumes=[{"name": name, "path": "/vol"}])
        client.sh(sandbox_id, "cp /usr/bin/id /vol/rootid && chmod 4755 /vol/rootid && chmod 2755 /vol && "
                              "cp /usr/bin/id /vol/capable")
        setcap = client.exec(sandbox_id, ["setcap", "cap_net_raw,cap_sys_admin+ep", "/vol/capable"])
        # Inside, both are what sandbox root made (gVisor's kernel keeps no file capabilities).
        assert client.sh(sandbox_id, "stat -c '%u %a' /vol/rootid").split() == ["0", "4755"]
        if harness.RUNTIME == "gvisor":
            assert setcap["exit_code"] != 0 and "not supported" in setcap["stderr"], setcap
        else:
            assert setcap["exit_code"] == 0, setcap
            assert "cap_net_raw" in client.sh(sandbox_id, "getcap /vol/capable")
        client.remove(sandbox_id)
        data = daemon.state_dir / "storage" / "layers" / f"vol-{name}" / "data"
        if not data.exists():
            data = daemon.state_dir / "layers" / f"vol-{name}" / "data"
        assert (data / "rootid").exists()
        assert host_root_privileges(data) == []
        assert (data / "rootid").stat().st_uid == STORED_ID_BASE
    finally:
        client.delete(f"/v1/volumes/{name}")


# ---------------------------------------------------------------- finding 3: the state dir

def test_the_state_dir_and_the_database_are_root_only(exposed, box):
    box(env={"SECRET_TOKEN": "s3cr3t"})  # a spec with a secret in the database
    state = exposed.state_dir
    assert stat.S_IMODE(state.stat().st_mode) & 0o077 == 0, oct(state.stat().st_mode)
    for entry in state.iterdir():
        st = entry.lstat()
        if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
            assert stat.S_IMODE(st.st_mode) & 0o077 == 0, f"{entry}: {oct(st.st_mode)}"
    for db_file in ("bulkhead.db", "bulkhead.db-wal", "bulkhead.db-shm"):
        if (state / db_file).exists():
            read = as_nobody("cat", str(state / db_file))
            assert read.returncode != 0 and "s3cr3t" not in read.stdout


def test_the_daemon_refuses_a_state_dir_others_could_change(daemon_factory):
    loose = daemon_factory()
    loose.state_dir.mkdir(mode=0o777)
    os.chmod(loose.state_dir, 0o777)
    with pytest.raises(RuntimeError):
        loose.start(timeout=20)
    assert "writable by group or others" in loose.log_tail(), loose.log_tail()

    foreign = daemon_factory()
    foreign.state_dir.mkdir(mode=0o700)
    os.chown(foreign.state_dir, NOBODY, NOBODY)
    with pytest.raises(RuntimeError):
        foreign.start(timeout=20)
    assert "belongs to uid 65534" in foreign.log_tail(), foreign.log_tail()


def test_an_older_state_dir_is_tightened_at_start(daemon_factory):
    d = daemon_factory()
    d.start()
    d.stop()
    os.chmod(d.state_dir, 0o711)
    os.chmod(d.state_dir / "bulkhead.db", 0o644)
    d.start()
    assert stat.S_IMODE(d.state_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((d.state_dir / "bulkhead.db").stat().st_mode) == 0o600


def test_commands_start_with_the_usual_umask_not_the_daemons(client, sandbox):
    # The daemon's own umask is 077; what sandbox code creates gets the conventional 022.
    assert client.sh(sandbox, "umask").strip() == "0022"
    assert client.sh(sandbox, "touch /workspace/f && stat -c %a /workspace/f").strip() == "644"


# ---------------------------------------------------------------- finding 4: files and ids

def test_local_users_reach_no_sandbox_file_and_learn_no_sandbox_id(exposed, box):
    daemon, client = exposed, exposed.client()
    sandbox_id = box()
    client.sh(sandbox_id, "echo private > /workspace/secret.txt && chmod 644 /workspace/secret.txt")
    layers = [p for p in (daemon.state_dir / "storage" / "layers" / sandbox_id, daemon.state_dir / "layers" / sandbox_id)
              if p.exists()]
    assert layers, "the sandbox's layer is not where the test looks"
    secret = layers[0] / "upper" / "workspace" / "secret.txt"
    assert secret.read_text() == "private\n"  # root sees it: the path is right
    read = as_nobody("cat", str(secret))
    assert read.returncode != 0 and "private" not in read.stdout, read
    write = as_nobody("sh", "-c", f"echo planted > {layers[0]}/upper/workspace/planted")
    assert write.returncode != 0
    assert client.exec(sandbox_id, ["test", "-e", "/workspace/planted"])["exit_code"] != 0

    # Ids are capabilities (preview host names): nothing a local user can list shows one.
    listing = as_nobody("sh", "-c", "ls /sys/fs/cgroup/*/bulkhead-*/ /sys/fs/cgroup/bulkhead-*/ 2>/dev/null; "
                                    "cat /proc/net/unix; cat /proc/[0-9]*/cgroup 2>/dev/null")
    assert host_name(sandbox_id) in listing.stdout, "the test looked in the wrong places"
    assert sandbox_id not in listing.stdout


# ---------------------------------------------------------------- finding 8: the host image

def test_root_only_host_files_stay_unreadable_to_sandbox_root(client, sandbox_factory):
    tag = uuid.uuid4().hex[:10]
    secret_file = Path(f"/usr/local/share/bulkhead-test-{tag}")
    secret_dir = Path(f"/usr/local/share/bulkhead-test-dir-{tag}")
    secret_file.write_text("host secret\n")
    os.chmod(secret_file, 0o600)
    secret_dir.mkdir(mode=0o700)
    (secret_dir / "inside").write_text("host secret\n")
    try:
        sandbox_id = sandbox_factory()["id"]
        for path in (secret_file, secret_dir / "inside"):
            out = client.exec(sandbox_id, ["cat", str(path)])
            assert out["exit_code"] != 0 and "host secret" not in out["stdout"], (path, out)
            assert "Permission denied" in out["stderr"], out
        assert client.exec(sandbox_id, ["ls", str(secret_dir)])["exit_code"] != 0
        # Host root's files show as nobody's; what is world-readable works as before.
        assert client.sh(sandbox_id, "stat -c %u /usr/bin/env").strip() == str(NOBODY)
        assert client.sh(sandbox_id, "python3 -c 'print(6 * 7)'").strip() == "42"
        # The generated /etc is the sandbox's own: root's, and /root is root's to enter.
        assert client.sh(sandbox_id, "stat -c '%u %a' /etc/passwd /root").split() == ["0", "644", "0", "700"]
        client.sh(sandbox_id, "ls /root && touch /root/ok")
    finally:
        secret_file.unlink(missing_ok=True)
        (secret_dir / "inside").unlink(missing_ok=True)
        secret_dir.rmdir()


# ---------------------------------------------------------------- a state dir of an older version

def test_an_older_versions_state_is_moved_to_stored_ids_and_host_names(daemon_factory):
    """What earlier versions left: volumes owned by host ids 0-65535, a running sandbox whose
    cgroups and control-socket dir are named by its id. A new daemon fixes both in place."""
    d = daemon_factory()
    d.start()
    client = d.client()
    assert client.post("/v1/volumes", {"name": "old", "size_mb": 64}).status == 201
    writer = client.create(volumes=[{"name": "old", "path": "/vol"}])["id"]
    client.sh(writer, "cp /usr/bin/id /vol/rootid && chmod 4755 /vol/rootid && mkdir /vol/u && chown 1000:1000 /vol/u")
    client.remove(writer)
    running = client.create()["id"]
    client.sh(running, "echo kept > /workspace/f")
    d.stop()

    data = next(p for p in (d.state_dir / "storage" / "layers" / "vol-old" / "data",
                            d.state_dir / "layers" / "vol-old" / "data") if p.exists())
    for path in [*data.rglob("*"), data]:
        st = path.lstat()
        os.lchown(path, st.st_uid - STORED_ID_BASE, st.st_gid - STORED_ID_BASE)
        if not path.is_symlink():
            os.chmod(path, st.st_mode & 0o7777)  # chown cleared the set-id bits
    assert host_root_privileges(data)  # the old layout: a host-root setuid file
    name = host_name(running)
    for group in harness.cgroup_dirs_of(running):
        os.rename(group, group.replace(name, running))
    os.rename(d.state_dir / "sandboxes" / name, d.state_dir / "sandboxes" / running)

    d.start()
    client = d.client()  # a new port
    assert host_root_privileges(data) == []
    assert (data / "u").stat().st_uid == STORED_ID_BASE + 1000
    reader = client.create(volumes=[{"name": "old", "path": "/vol"}])["id"]
    assert client.sh(reader, "stat -c '%u %a' /vol/rootid /vol/u").split() == ["0", "4755", "1000", "755"]
    # The running sandbox was kept, renamed in place.
    assert client.sandbox(running)["state"] == "running"
    assert client.sh(running, "cat /workspace/f") == "kept\n"
    assert harness.cgroup_dirs_of(running)
    assert not (d.state_dir / "sandboxes" / running).exists()
    harness.assert_no_leaks(d)
