"""The Files API must never reach a host file: every trick a sandbox (or a hostile caller) can
play with paths, symlinks, hard links, /proc and archives is tried against a host canary that
an inotify watch guards. The canary must stay unopened, unread and unchanged."""

import ctypes
import ctypes.util
import hashlib
import io
import os
import select
import struct
import tarfile
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

import harness

IN_ACCESS, IN_MODIFY, IN_ATTRIB, IN_OPEN = 0x1, 0x2, 0x4, 0x20
IN_CREATE, IN_DELETE, IN_MOVED_TO = 0x100, 0x200, 0x80
IN_NONBLOCK = 0o4000

CANARY_TEXT = b"host canary: no sandbox may read or change this\n"


class InotifyGuard:
    """Records every open/read/write/attribute change on a host file and every entry created
    in its directory (plain inotify through libc: the suite uses only the standard library)."""

    def __init__(self, file: Path):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.fd = libc.inotify_init1(IN_NONBLOCK)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        for path, mask in ((file, IN_ACCESS | IN_MODIFY | IN_ATTRIB | IN_OPEN),
                           (file.parent, IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MODIFY)):
            wd = libc.inotify_add_watch(self.fd, str(path).encode(), mask)
            assert wd >= 0, os.strerror(ctypes.get_errno())

    def events(self) -> list[int]:
        masks = []
        while select.select([self.fd], [], [], 0)[0]:
            data = os.read(self.fd, 65536)
            offset = 0
            while offset < len(data):
                _wd, mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                masks.append(mask)
                offset += 16 + length
        return masks

    def close(self):
        os.close(self.fd)


@pytest.fixture
def canary(session_dir):
    """A host directory with a secret file, watched for the whole test."""
    directory = session_dir / f"canary-{os.getpid()}-{threading.get_ident()}"
    directory.mkdir(mode=0o755, exist_ok=True)
    secret = directory / "secret"
    secret.write_bytes(CANARY_TEXT)
    secret.chmod(0o644)
    before = (hashlib.sha256(secret.read_bytes()).hexdigest(), secret.stat().st_mtime_ns, secret.stat().st_mode)
    guard = InotifyGuard(secret)
    yield secret
    events = guard.events()
    guard.close()
    after = (hashlib.sha256(secret.read_bytes()).hexdigest(), secret.stat().st_mtime_ns, secret.stat().st_mode)
    assert events == [], f"something touched the host canary (inotify masks {[hex(m) for m in events]})"
    assert after == before, "the host canary changed"
    assert sorted(p.name for p in directory.iterdir()) == ["secret"], "something was created beside the canary"


def files_url(sandbox_id, route="", **query) -> str:
    q = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in query.items())
    return f"/v1/sandboxes/{sandbox_id}/files{route}" + (f"?{q}" if q else "")


def read(client, sandbox_id, path) -> harness.Response:
    return client.get(files_url(sandbox_id, path=path))


def write(client, sandbox_id, path, data: bytes, **query) -> harness.Response:
    return client.request("PUT", files_url(sandbox_id, path=path, **query), body=data,
                          headers={"Content-Type": "application/octet-stream"})


def assert_not_canary(r: harness.Response):
    """A read either failed cleanly or returned something that is not the host's file."""
    if r.status == 200:
        assert CANARY_TEXT not in r.body, "read the host canary"
    else:
        harness.assert_error_shape(r)
        assert r.status < 500, r


def every_read_route(client, sandbox_id, path):
    """Reads `path` through every route that reads; none may show the canary."""
    for r in (read(client, sandbox_id, path),
              client.get(files_url(sandbox_id, "/stat", path=path)),
              client.get(files_url(sandbox_id, "/list", path=path, depth=3)),
              client.get(files_url(sandbox_id, "/archive", path=path))):
        assert_not_canary(r)


def test_dot_dot_paths_stay_inside(client, sandbox, canary):
    for path in (f"/workspace/../../../../../..{canary}", f"../../../../../../..{canary}",
                 f"/..{canary}", f"/workspace/./../..{canary.parent}/./secret"):
        every_read_route(client, sandbox, path)
        r = write(client, sandbox, path, b"overwritten")
        assert r.status in (201, 403, 404, 409), r
    # The writes that succeeded landed inside the sandbox, at the path as the sandbox sees it.
    out = client.sh(sandbox, f"cat {canary} 2>/dev/null || true")
    assert out in ("", "overwritten")


def test_absolute_and_relative_symlinks(client, sandbox, canary):
    depth = "../" * 12
    client.sh(sandbox, f"ln -s {canary} /workspace/abs && ln -s {depth}{str(canary).lstrip('/')} /workspace/rel")
    for link in ("/workspace/abs", "/workspace/rel"):
        every_read_route(client, sandbox, link)
        stat = client.get(files_url(sandbox, "/stat", path=link)).json()
        assert stat["type"] == "symlink"
        # A write replaces what the path names inside the sandbox; the host file is untouched.
        r = write(client, sandbox, link, b"through a symlink")
        assert r.status in (201, 404, 409), r
        r = write(client, sandbox, link, b"appended", append="true")
        assert r.status in (201, 404, 409), r


def test_symlinked_parent_directory(client, sandbox, canary):
    client.sh(sandbox, f"ln -s {canary.parent} /workspace/hostdir && ln -s / /workspace/root")
    for path in ("/workspace/hostdir/secret", f"/workspace/root{canary}", "/workspace/hostdir"):
        every_read_route(client, sandbox, path)
        r = write(client, sandbox, path if path.endswith("secret") else path + "/new", b"x")
        assert r.status in (201, 404, 409), r
        r = client.post(files_url(sandbox, "/mkdir"), {"path": "/workspace/hostdir/made", "parents": True})
        assert r.status in (201, 404, 409), r
        r = client.post(files_url(sandbox, "/move"), {"from": "/workspace/hostdir/secret", "to": "/workspace/moved"})
        assert r.status in (200, 404, 409), r
        r = client.delete(files_url(sandbox, path="/workspace/hostdir/secret"))
        assert r.status in (204, 404, 409), r
    r = client.request("PUT", files_url(sandbox, "/archive", path="/workspace/hostdir"), body=tar_of({"x": b"1"}))
    assert r.status in (200, 404, 409, 422), r


def test_symlink_swapped_between_and_during_calls(client, sandbox, canary):
    """A file is checked with one call and replaced by a symlink to the host file before the
    next; then the swap runs in a loop inside the sandbox while reads and writes race it."""
    client.sh(sandbox, "echo plain > /workspace/target")
    assert client.get(files_url(sandbox, "/stat", path="/workspace/target")).json()["type"] == "file"
    client.sh(sandbox, f"rm /workspace/target && ln -s {canary} /workspace/target")
    every_read_route(client, sandbox, "/workspace/target")

    swapper = client.post(f"/v1/sandboxes/{sandbox}/processes", {
        "cmd": f"mkdir -p /workspace/d; while :; do ln -sfn {canary.parent} /workspace/swap; "
               "rm -f /workspace/swap; mkdir -p /workspace/swap; echo x > /workspace/swap/secret; "
               "rm -rf /workspace/swap; done"})
    assert swapper.status == 201, swapper
    try:
        for _ in range(60):
            assert_not_canary(read(client, sandbox, "/workspace/swap/secret"))
            r = write(client, sandbox, "/workspace/swap/secret", b"race")
            assert r.status in (201, 404, 409), r
            assert_not_canary(client.get(files_url(sandbox, "/list", path="/workspace/swap")))
            r = client.delete(files_url(sandbox, path="/workspace/swap", recursive="true"))
            assert r.status in (204, 404, 409), r
    finally:
        client.post(f"/v1/sandboxes/{sandbox}/processes/{swapper.json()['pid']}/signal", {"signal": "SIGKILL"})


def test_hard_links_do_not_reach_host_files(client, daemon, sandbox, canary):
    # A hard link across to a host file cannot even be made: the host file is not there.
    r = client.exec(sandbox, f"ln {canary} /workspace/hl")
    assert r["exit_code"] != 0
    # A hard link to a file of the image's lower layer: writes through it change the
    # sandbox's copy only, never the image on the host or the host's own file.
    image_files = list((daemon.state_dir / "images").glob("host/*/etc/passwd"))
    assert image_files, "the host image's generated /etc/passwd was not found"
    image_before = {p: p.read_bytes() for p in image_files}
    host_passwd = Path("/etc/passwd").read_bytes()
    client.sh(sandbox, "ln /etc/passwd /workspace/passwd-link")
    assert write(client, sandbox, "/workspace/passwd-link", b"evil::0:0::/:/bin/sh\n", append="true").status == 201
    assert write(client, sandbox, "/workspace/passwd-link", b"replaced\n").status == 201
    assert {p: p.read_bytes() for p in image_files} == image_before
    assert Path("/etc/passwd").read_bytes() == host_passwd
    # A link into /usr (the host's, bound read-only) is refused by the kernel.
    assert client.exec(sandbox, "ln /usr/bin/env /workspace/env-link")["exit_code"] != 0
    r = write(client, sandbox, "/usr/bin/bulkhead-was-here", b"x")
    harness.assert_error_shape(r, (403, 409))
    assert not Path("/usr/bin/bulkhead-was-here").exists()


def test_proc_magic_links(client, sandbox, canary):
    for path in (f"/proc/self/root{canary}", f"/proc/1/root{canary}", f"/proc/1/cwd{canary}",
                 f"/proc/self/cwd/../../../..{canary}", f"/proc/thread-self/root{canary}",
                 "/proc/1/root/etc/shadow", "/proc/self/root/etc/shadow"):
        every_read_route(client, sandbox, path)
        r = write(client, sandbox, path, b"x")
        assert r.status in (201, 403, 404, 409, 422), r
    # /proc/1/root is the sandbox's own root: its shadow file is not the host's.
    r = read(client, sandbox, "/proc/1/root/etc/shadow")
    if r.status == 200 and Path("/etc/shadow").exists():
        assert r.body != Path("/etc/shadow").read_bytes()


def tar_of(entries: dict, symlinks: dict | None = None, hardlinks: dict | None = None,
           mode: str = "w") -> bytes:
    """A tar with regular files {name: bytes}, symlinks {name: target}, hard links {name: target},
    written in the order symlinks, hard links, files, with the names exactly as given."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode, format=tarfile.PAX_FORMAT) as tar:
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for name, target in (hardlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.LNKTYPE, target
            tar.addfile(info)
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# Each case builds its archive from the canary's path (inside compressed data too).
@pytest.mark.parametrize("build", [
    pytest.param(lambda c: tar_of({"../escaped": b"x"}), id="dot-dot"),
    pytest.param(lambda c: tar_of({"a/../../escaped": b"x"}), id="inner-dot-dot"),
    pytest.param(lambda c: tar_of({"/tmp/escaped-abs": b"x"}), id="absolute"),
    pytest.param(lambda c: tar_of({"link/secret": b"x"}, symlinks={"link": str(c.parent)}), id="symlink-then-write"),
    pytest.param(lambda c: tar_of({"up/escaped": b"x"}, symlinks={"up": ".."}), id="symlink-to-parent"),
    pytest.param(lambda c: tar_of({"abs/escaped": b"x"}, symlinks={"abs": "/"}), id="symlink-to-root"),
    pytest.param(lambda c: tar_of({}, hardlinks={"hl": str(c)}), id="hardlink-outside"),
    pytest.param(lambda c: tar_of({}, hardlinks={"hl": "../../etc/passwd"}), id="hardlink-dot-dot"),
    pytest.param(lambda c: tar_of({"link/secret": b"x"}, symlinks={"link": str(c.parent)}, mode="w:gz"),
                 id="gzip-symlink"),
])
def test_hostile_archives_are_refused(client, sandbox, canary, build):
    archive = build(canary)
    client.sh(sandbox, "mkdir -p /workspace/t")
    r = client.request("PUT", files_url(sandbox, "/archive", path="/workspace/t"), body=archive,
                       headers={"Content-Type": "application/x-tar"})
    harness.assert_error_shape(r, 422)
    # Nothing landed outside the target inside the sandbox either.
    leftovers = client.sh(sandbox, f"ls -d /workspace/escaped /escaped /tmp/escaped-abs /etc/escaped "
                                   f"{canary.parent}/secret 2>/dev/null || true")
    assert leftovers == "", leftovers


def test_archive_download_does_not_follow_symlinks(client, sandbox, canary):
    client.sh(sandbox, f"mkdir -p /workspace/a && echo mine > /workspace/a/own && "
                       f"ln -s {canary} /workspace/a/abs && ln -s {canary.parent} /workspace/a/dir")
    r = client.get(files_url(sandbox, "/archive", path="/workspace/a"))
    assert r.status == 200, r
    with tarfile.open(fileobj=io.BytesIO(r.body)) as tar:
        members = {m.name.rstrip("/").removeprefix("./"): m for m in tar.getmembers()}
        assert members["abs"].issym() and members["abs"].linkname == str(canary)
        assert members["dir"].issym()
        assert tar.extractfile(members["own"]).read() == b"mine\n"
    assert CANARY_TEXT not in r.body


def test_daemon_state_is_out_of_reach(client, daemon, sandbox):
    """The API key and the daemon's database sit on the host: no path names them."""
    key = daemon.key.encode()
    for path in (f"{daemon.state_dir}/api-key", f"/proc/1/root{daemon.state_dir}/api-key",
                 f"/workspace/../../..{daemon.state_dir}/state.db"):
        r = read(client, sandbox, path)
        # 403: init is not dumpable, so its /proc/1/root is closed to the sandbox's users.
        assert r.status == (403 if path.startswith("/proc/1/") else 404), r
        assert key not in r.body
