"""The Files API (/v1/sandboxes/{id}/files...): reading and writing bytes exactly, modes and
ownership, stat/list/mkdir/move/delete, tar archives both ways, watching for changes, and a
clean 4xx for every bad request. Files written through the API and by commands are the same
files."""

import gzip
import hashlib
import io
import json
import os
import socket
import tarfile
import time

import pytest

from harness import assert_error_shape, file_workers, files_url, stream_download, stream_upload

MiB = 1024 * 1024


def put(client, sandbox_id, path, data: bytes, route: str = "", **query):
    return client.request("PUT", files_url(sandbox_id, route, path=path, **query), body=data,
                          headers={"Content-Type": "application/octet-stream"})


def get(client, sandbox_id, path, route: str = "", **query):
    return client.get(files_url(sandbox_id, route, path=path, **query))


def write(client, sandbox_id, path, data: bytes, **query) -> dict:
    r = put(client, sandbox_id, path, data, **query)
    assert r.status == 201, r
    return r.json()


def stat(client, sandbox_id, path) -> dict:
    r = get(client, sandbox_id, path, "/stat")
    assert r.status == 200, r
    return r.json()


def error_code(r, status: int) -> str:
    return assert_error_shape(r, status)["code"]


# ---------------------------------------------------------------- read and write

def test_write_then_read_returns_the_exact_bytes(client, sandbox):
    data = bytes(range(256)) * 1024 + os.urandom(300_001)  # every byte value, an odd length
    entry = write(client, sandbox, "/workspace/blob.bin", data)
    assert entry["path"] == "/workspace/blob.bin"
    assert entry["name"] == "blob.bin"
    assert entry["type"] == "file"
    assert entry["size"] == len(data)
    assert entry["mode"] == 0o644  # a new file's default

    r = get(client, sandbox, "/workspace/blob.bin")
    assert r.status == 200
    assert r.headers["content-type"] == "application/octet-stream"
    assert int(r.headers["content-length"]) == len(data)
    assert r.body == data


def test_empty_file_round_trips(client, sandbox):
    assert write(client, sandbox, "/workspace/empty", b"")["size"] == 0
    r = get(client, sandbox, "/workspace/empty")
    assert (r.status, r.body, r.headers["content-length"]) == (200, b"", "0")


def test_a_kernel_filesystems_file_is_read_to_its_end(client, sandbox):
    # procfs files say 0 bytes and sysfs files a page, whatever they hold: such a file comes
    # chunked (no Content-Length), to its end. (The sandbox's boot_id is a file of its own, on
    # a tmpfs, with a true size: it is read whole either way.)
    for path in ("/proc/sys/kernel/osrelease", "/proc/self/status", "/sys/devices/system/cpu/online"):
        r = get(client, sandbox, path)
        assert r.status == 200 and "content-length" not in r.headers, (path, r)
        assert r.headers.get("transfer-encoding") == "chunked", (path, r)
        assert r.body and r.body.endswith(b"\n" if path != "/proc/sys/kernel/osrelease" else b""), (path, r)
    # All of it, as a command reads it (gVisor's osrelease has no newline).
    osrelease = client.sh(sandbox, "cat /proc/sys/kernel/osrelease")
    assert get(client, sandbox, "/proc/sys/kernel/osrelease").body.decode() == osrelease
    online = client.sh(sandbox, "cat /sys/devices/system/cpu/online")
    assert get(client, sandbox, "/sys/devices/system/cpu/online").body.decode() == online
    boot_id = get(client, sandbox, "/proc/sys/kernel/random/boot_id").body.decode()
    assert boot_id == client.sh(sandbox, "cat /proc/sys/kernel/random/boot_id") and len(boot_id) == 37


def test_files_written_through_the_api_and_by_commands_are_the_same(client, sandbox):
    write(client, sandbox, "/workspace/from-api.txt", b"written by the API\n")
    assert client.sh(sandbox, "cat /workspace/from-api.txt") == "written by the API\n"
    client.sh(sandbox, "printf 'by a command\\n\\001\\377' > /workspace/from-exec.bin")
    assert get(client, sandbox, "/workspace/from-exec.bin").body == b"by a command\n\x01\xff"


def test_relative_paths_are_in_the_workdir(client, sandbox_factory):
    sandbox = sandbox_factory(workdir="/workspace/project")["id"]
    assert write(client, sandbox, "notes/todo.txt", b"relative")["path"] == "/workspace/project/notes/todo.txt"
    assert client.sh(sandbox, "cat /workspace/project/notes/todo.txt") == "relative"
    assert get(client, sandbox, "notes/todo.txt").body == b"relative"


def test_write_creates_parents(client, sandbox):
    write(client, sandbox, "/workspace/a/b/c/deep.txt", b"deep")
    assert client.sh(sandbox, "cat /workspace/a/b/c/deep.txt && test -d /workspace/a/b") == "deep"


def test_mode_is_set_and_an_overwrite_keeps_it_unless_given(client, sandbox):
    path = "/workspace/script.sh"
    assert write(client, sandbox, path, b"#!/bin/sh\necho one\n", mode="0750")["mode"] == 0o750
    assert client.sh(sandbox, f"stat -c %a {path}").strip() == "750"
    assert client.sh(sandbox, path) == "one\n"  # executable as written

    assert write(client, sandbox, path, b"#!/bin/sh\necho two\n")["mode"] == 0o750
    assert client.sh(sandbox, f"stat -c %a {path} && {path}") == "750\ntwo\n"

    assert write(client, sandbox, path, b"plain", mode="600")["mode"] == 0o600
    assert client.sh(sandbox, f"stat -c %a {path}").strip() == "600"


def test_append_adds_to_the_end(client, sandbox):
    write(client, sandbox, "/workspace/log.txt", b"first\n")
    assert write(client, sandbox, "/workspace/log.txt", b"second\n", append="true")["size"] == 13
    assert get(client, sandbox, "/workspace/log.txt").body == b"first\nsecond\n"
    # Appending to a file that does not exist creates it.
    write(client, sandbox, "/workspace/new-log.txt", b"only\n", append="true")
    assert get(client, sandbox, "/workspace/new-log.txt").body == b"only\n"


def test_chunked_upload_and_streamed_download(client, sandbox):
    pieces = [os.urandom(n) for n in (1, 70_000, 3 * MiB + 5, 0, 262_144, 17)]
    r = stream_upload(client, "PUT", files_url(sandbox, path="/workspace/chunked.bin"), pieces)
    assert r.status == 201, r
    data = b"".join(pieces)
    assert r.json()["size"] == len(data)

    received = []
    r = stream_download(client, files_url(sandbox, path="/workspace/chunked.bin"), received.append, piece=100_000)
    assert r.status == 200, r
    assert int(r.headers["content-length"]) == len(data)
    assert hashlib.sha256(b"".join(received)).digest() == hashlib.sha256(data).digest()
    assert client.sh(sandbox, "sha256sum < /workspace/chunked.bin").split()[0] == hashlib.sha256(data).hexdigest()


def test_a_connection_carries_requests_after_uploads_and_downloads(client, sandbox):
    conn = client.connection()
    try:
        headers = {"Authorization": f"Bearer {client.key}"}
        for i in range(3):
            conn.request("PUT", files_url(sandbox, path=f"/workspace/ka{i}"), body=b"x" * (i * 100_000), headers=headers)
            r = conn.getresponse()
            assert r.status == 201 and json.loads(r.read())["size"] == i * 100_000
            conn.request("GET", files_url(sandbox, path=f"/workspace/ka{i}"), headers=headers)
            r = conn.getresponse()
            assert r.status == 200 and r.read() == b"x" * (i * 100_000)
            assert not r.will_close
    finally:
        conn.close()


def test_a_file_written_with_the_default_user_belongs_to_the_sandboxs_root(client, sandbox):
    write(client, sandbox, "/workspace/owned", b"x")
    assert client.sh(sandbox, "stat -c %u:%g /workspace/owned").strip() == "0:0"
    assert stat(client, sandbox, "/workspace/owned")["uid"] == 0


def test_user_parameter_writes_as_that_user(client, sandbox):
    client.sh(sandbox, "mkdir -p /workspace/shared && chmod 777 /workspace/shared")
    entry = write(client, sandbox, "/workspace/shared/mine", b"x", user="1000:1000")
    assert (entry["uid"], entry["gid"]) == (1000, 1000)
    assert client.sh(sandbox, "stat -c %u:%g /workspace/shared/mine").strip() == "1000:1000"
    # The user's own permissions apply: root's private directory is out of its reach.
    client.sh(sandbox, "mkdir -p /workspace/private && chmod 700 /workspace/private")
    r = put(client, sandbox, "/workspace/private/no", b"x", user="1000")
    assert error_code(r, 403) == "permission_denied"


# ---------------------------------------------------------------- stat, list, mkdir, move, delete

def test_stat_describes_files_directories_and_symlinks(client, sandbox):
    client.sh(sandbox, "mkdir -p /workspace/d && printf abc > /workspace/d/f && ln -s /workspace/d/f /workspace/link "
                       "&& ln -s nowhere /workspace/dangling")
    f = stat(client, sandbox, "/workspace/d/f")
    assert (f["type"], f["size"], f["name"], f["path"]) == ("file", 3, "f", "/workspace/d/f")
    assert "target" not in f
    assert f["mtime"].endswith("Z")
    d = stat(client, sandbox, "/workspace/d")
    assert d["type"] == "dir"
    link = stat(client, sandbox, "/workspace/link")
    assert (link["type"], link["target"]) == ("symlink", "/workspace/d/f")
    assert stat(client, sandbox, "/workspace/dangling")["target"] == "nowhere"


def test_a_directorys_size_is_the_space_it_takes(client, sandbox):
    """Not its st_size, which means something else on every filesystem (0 for an empty
    directory on btrfs): st_blocks * 512, at least one block, in stat and list alike."""
    client.sh(sandbox, "mkdir -p /workspace/sized/empty /workspace/sized/full && "
                       "for i in $(seq 200); do : > /workspace/sized/full/f$i; done")
    for name in ("empty", "full"):
        path = f"/workspace/sized/{name}"
        blocks, block_bytes, io_block = map(int, client.sh(sandbox, f"stat -c '%b %B %o' {path}").split())
        assert stat(client, sandbox, path)["size"] == max(blocks * block_bytes, io_block) > 0, name
    listed = {e["name"]: e["size"] for e in get(client, sandbox, "/workspace/sized", "/list").json()["entries"]}
    assert listed == {name: stat(client, sandbox, f"/workspace/sized/{name}")["size"] for name in ("empty", "full")}
    # A file's size is its length, as ever.
    client.sh(sandbox, "printf 12345 > /workspace/sized/five")
    assert stat(client, sandbox, "/workspace/sized/five")["size"] == 5


def test_list_descends_to_the_depth_asked(client, sandbox):
    client.sh(sandbox, "mkdir -p /workspace/t/a/b/c && touch /workspace/t/top /workspace/t/a/one /workspace/t/a/b/two "
                       "/workspace/t/a/b/c/three")

    def paths(depth=None):
        query = {} if depth is None else {"depth": depth}
        r = get(client, sandbox, "/workspace/t", "/list", **query)
        assert r.status == 200, r
        body = r.json()
        assert body["truncated"] is False
        return sorted(e["path"].removeprefix("/workspace/t/") for e in body["entries"])

    assert paths() == ["a", "top"]
    assert paths(2) == ["a", "a/b", "a/one", "top"]
    assert paths(32) == ["a", "a/b", "a/b/c", "a/b/c/three", "a/b/two", "a/one", "top"]
    entries = get(client, sandbox, "/workspace/t", "/list").json()["entries"]
    assert {e["name"]: e["type"] for e in entries} == {"a": "dir", "top": "file"}


def test_mkdir_with_and_without_parents(client, sandbox):
    url = files_url(sandbox, "/mkdir")
    r = client.post(url, {"path": "/workspace/m/n/o"})
    assert r.status == 201, r
    assert (r.json()["type"], r.json()["path"]) == ("dir", "/workspace/m/n/o")
    assert client.post(url, {"path": "/workspace/m/n/o"}).status == 201  # exists: fine with parents
    assert error_code(client.post(url, {"path": "/workspace/m/n/o", "parents": False}), 409) == "exists"
    assert error_code(client.post(url, {"path": "/workspace/x/y", "parents": False}), 404) == "not_found"
    r = client.post(url, {"path": "/workspace/private", "mode": "0700"})
    assert r.status == 201 and r.json()["mode"] == 0o700
    assert client.sh(sandbox, "stat -c %a /workspace/private").strip() == "700"
    assert client.post(url, {"path": "/workspace/numeric", "mode": 0o711}).json()["mode"] == 0o711


def test_move_renames_and_reports_the_new_entry(client, sandbox):
    write(client, sandbox, "/workspace/old.txt", b"moving")
    r = client.post(files_url(sandbox, "/move"), {"from": "/workspace/old.txt", "to": "/workspace/new.txt"})
    assert r.status == 200, r
    assert (r.json()["path"], r.json()["size"]) == ("/workspace/new.txt", 6)
    assert get(client, sandbox, "/workspace/new.txt").body == b"moving"
    assert error_code(get(client, sandbox, "/workspace/old.txt"), 404) == "not_found"
    r = client.post(files_url(sandbox, "/move"), {"from": "/workspace/old.txt", "to": "/workspace/x"})
    assert error_code(r, 404) == "not_found"


def test_delete_files_and_directories(client, sandbox):
    client.sh(sandbox, "mkdir -p /workspace/del/sub && touch /workspace/del/sub/f /workspace/lone && mkdir /workspace/void")
    assert client.delete(files_url(sandbox, path="/workspace/lone")).status == 204
    assert client.delete(files_url(sandbox, path="/workspace/void")).status == 204  # an empty directory
    r = client.delete(files_url(sandbox, path="/workspace/del"))
    assert error_code(r, 409) == "not_empty"
    assert client.sh(sandbox, "ls /workspace/del/sub") == "f\n"
    assert client.delete(files_url(sandbox, path="/workspace/del", recursive="true")).status == 204
    assert client.sh(sandbox, "ls /workspace").split() == []
    assert error_code(client.delete(files_url(sandbox, path="/workspace/del")), 404) == "not_found"


def test_delete_removes_a_symlink_not_its_target(client, sandbox):
    client.sh(sandbox, "mkdir -p /workspace/keep && touch /workspace/keep/f && ln -s /workspace/keep /workspace/l")
    assert client.delete(files_url(sandbox, path="/workspace/l", recursive="true")).status == 204
    assert client.sh(sandbox, "ls /workspace/keep && test ! -e /workspace/l") == "f\n"


# ---------------------------------------------------------------- archives

def tar_bytes(files: dict, mode: str = "w") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
            else:
                info.size = len(data)
                info.mode = 0o640
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def test_archive_download_is_a_tar_of_the_directory(client, sandbox):
    client.sh(sandbox, "mkdir -p /workspace/proj/src && printf 'print(1)\\n' > /workspace/proj/src/main.py && "
                       "head -c 100000 /dev/urandom > /workspace/proj/data.bin && chmod 600 /workspace/proj/data.bin && "
                       "ln -s src/main.py /workspace/proj/entry")
    data = get(client, sandbox, "/workspace/proj/data.bin").body
    r = get(client, sandbox, "/workspace/proj", "/archive")
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/x-tar"
    assert r.headers.get("transfer-encoding") == "chunked"
    with tarfile.open(fileobj=io.BytesIO(r.body)) as tar:
        members = {m.name.removeprefix("./").rstrip("/"): m for m in tar.getmembers()}
        assert {"src", "src/main.py", "data.bin", "entry"} <= set(members)
        assert tar.extractfile(members["src/main.py"]).read() == b"print(1)\n"
        assert tar.extractfile(members["data.bin"]).read() == data
        assert members["data.bin"].mode & 0o777 == 0o600
        assert members["src"].isdir()
        assert members["entry"].issym() and members["entry"].linkname == "src/main.py"


def test_archive_download_of_a_missing_path_is_404(client, sandbox):
    assert error_code(get(client, sandbox, "/workspace/absent", "/archive"), 404) == "not_found"


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_archive_upload_unpacks_plain_and_compressed_tars(client, sandbox, mode):
    payload = os.urandom(200_000)
    archive = tar_bytes({"pkg": None, "pkg/readme.txt": b"hello tar\n", "pkg/blob": payload}, mode)
    r = client.request("PUT", files_url(sandbox, "/archive", path="/workspace/unpacked"), body=archive,
                       headers={"Content-Type": "application/x-tar"})
    assert r.status == 200, r
    assert r.json()["entries"] == 3
    assert r.json()["bytes"] == len(payload) + 10
    assert client.sh(sandbox, "cat /workspace/unpacked/pkg/readme.txt") == "hello tar\n"
    assert client.sh(sandbox, "stat -c %a /workspace/unpacked/pkg/readme.txt").strip() == "640"
    assert get(client, sandbox, "/workspace/unpacked/pkg/blob").body == payload


def test_archive_round_trip_through_the_api(client, sandbox):
    client.sh(sandbox, "mkdir -p /workspace/src/a && echo one > /workspace/src/a/1 && echo two > /workspace/src/2")
    archive = get(client, sandbox, "/workspace/src", "/archive").body
    r = client.request("PUT", files_url(sandbox, "/archive", path="/workspace/copy"), body=archive)
    assert r.status == 200, r
    assert client.sh(sandbox, "cd /workspace/copy && cat a/1 2") == "one\ntwo\n"


def test_archive_upload_of_garbage_is_422(client, sandbox):
    r = client.request("PUT", files_url(sandbox, "/archive", path="/workspace/g"), body=b"this is not a tar" * 100)
    assert error_code(r, 422) == "invalid_argument"
    r = client.request("PUT", files_url(sandbox, "/archive", path="/workspace/g"),
                       body=gzip.compress(b"\x00" * 100) + b"trailing junk")
    assert_error_shape(r, 422)


# ---------------------------------------------------------------- watch

class Watch:
    """GET .../files/watch, read line by line (each read bounded by the socket timeout)."""

    def __init__(self, client, sandbox_id, path, **query):
        self.conn = client.connection(timeout=30)
        self.conn.request("GET", files_url(sandbox_id, "/watch", path=path, **query),
                          headers={"Authorization": f"Bearer {client.key}"})
        self.response = self.conn.getresponse()

    def events_until(self, predicate) -> list[dict]:
        events = []
        while True:
            line = self.response.readline()
            assert line, f"the watch ended early; events so far: {events}"
            event = json.loads(line)
            events.append(event)
            if predicate(event):
                return events

    def close(self):
        self.conn.close()


def test_watch_reports_changes_in_nested_directories(client, sandbox):
    client.sh(sandbox, "mkdir -p /workspace/w/existing")
    watch = Watch(client, sandbox, "/workspace/w")
    try:
        assert watch.response.status == 200
        assert watch.response.getheader("content-type") == "application/x-ndjson"
        # Everything after the 200 is reported: no sleep needed before changing things.
        # inotify cannot report what happens inside a new directory before its watch exists
        # (the worker then reports the files it finds there as created): wait for the
        # directory's event before changing things inside it.
        client.sh(sandbox, "mkdir -p /workspace/w/new/deeper")
        events = watch.events_until(lambda e: e.get("path") == "/workspace/w/new/deeper")
        client.sh(sandbox, "cd /workspace/w && echo hi > new/deeper/file && "
                           "chmod 600 new/deeper/file && echo more >> existing/log && mv existing/log existing/log2 && "
                           "rm new/deeper/file && touch done")
        events += watch.events_until(lambda e: e.get("path") == "/workspace/w/done")
    finally:
        watch.close()
    seen = {(e["type"], e["path"]) for e in events}
    assert ("create", "/workspace/w/new") in seen, events
    assert ("create", "/workspace/w/new/deeper/file") in seen, events  # inside a directory made after the start
    assert ("write", "/workspace/w/new/deeper/file") in seen, events
    assert ("chmod", "/workspace/w/new/deeper/file") in seen, events
    assert ("remove", "/workspace/w/new/deeper/file") in seen, events
    assert ("rename", "/workspace/w/existing/log") in seen or ("rename", "/workspace/w/existing/log2") in seen, events
    assert any(e["path"] == "/workspace/w/new" and e["dir"] is True for e in events), events
    assert all(isinstance(e["dir"], bool) for e in events), events


def test_watch_without_recursive_sees_only_the_directory_itself(client, sandbox):
    client.sh(sandbox, "mkdir -p /workspace/flat/sub")
    watch = Watch(client, sandbox, "/workspace/flat", recursive="false")
    try:
        assert watch.response.status == 200
        client.sh(sandbox, "touch /workspace/flat/sub/hidden && touch /workspace/flat/visible")
        events = watch.events_until(lambda e: e.get("path") == "/workspace/flat/visible")
    finally:
        watch.close()
    assert all(not e["path"].startswith("/workspace/flat/sub/") for e in events), events


def test_a_watch_ends_when_the_client_hangs_up(client, sandbox):
    """The worker behind a watch goes away with its client (the sandbox keeps no stray watchers)."""
    client.sh(sandbox, "mkdir -p /workspace/hang")

    def watchers() -> int:
        return len(file_workers(client, sandbox))

    before = watchers()
    watch = Watch(client, sandbox, "/workspace/hang")
    assert watch.response.status == 200
    assert watchers() == before + 1
    watch.close()
    deadline = time.monotonic() + 10
    while watchers() != before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert watchers() == before


def test_watch_of_a_missing_directory_is_404(client, sandbox):
    r = client.get(files_url(sandbox, "/watch", path="/workspace/nope"))
    assert error_code(r, 404) == "not_found"


# ---------------------------------------------------------------- errors

def test_missing_paths_are_404(client, sandbox):
    for route in ("", "/stat", "/list", "/archive"):
        assert error_code(get(client, sandbox, "/workspace/missing", route), 404) == "not_found"


def test_a_directory_is_not_a_file(client, sandbox):
    client.sh(sandbox, "mkdir -p /workspace/dir")
    assert error_code(get(client, sandbox, "/workspace/dir"), 409) == "is_a_directory"
    assert error_code(put(client, sandbox, "/workspace/dir", b"x"), 409) == "is_a_directory"
    write(client, sandbox, "/workspace/file", b"x")
    # A file where a parent directory should be.
    assert error_code(put(client, sandbox, "/workspace/file/child", b"x"), 409) == "not_a_directory"
    assert error_code(get(client, sandbox, "/workspace/file", "/list"), 409) == "not_a_directory"


def test_bad_paths_are_rejected(client, sandbox):
    assert error_code(get(client, sandbox, "/workspace/a\x00b"), 400) == "bad_request"
    assert error_code(put(client, sandbox, "/workspace/a\x00b", b"x"), 400) == "bad_request"
    assert error_code(get(client, sandbox, ""), 422) == "invalid_argument"
    assert error_code(client.get(f"/v1/sandboxes/{sandbox}/files"), 422) == "invalid_argument"  # no ?path=
    assert error_code(get(client, sandbox, "/" + "a" * 5000), 422) == "invalid_argument"
    assert error_code(put(client, sandbox, "/" + "a" * 5000, b"x"), 422) == "invalid_argument"
    assert error_code(client.post(files_url(sandbox, "/mkdir"), {"path": ""}), 422) == "invalid_argument"
    assert error_code(client.post(files_url(sandbox, "/move"), {"from": "/a"}), 422) == "invalid_argument"
    assert error_code(client.post(files_url(sandbox, "/mkdir"), b"{not json"), 400) == "bad_request"


def test_bad_parameters_are_422(client, sandbox):
    for mode in ("999", "0o644", "rwx", "77777", ""):
        assert error_code(put(client, sandbox, "/workspace/m", b"x", mode=mode), 422) == "invalid_argument", mode
    assert error_code(put(client, sandbox, "/workspace/m", b"x", append="maybe"), 422) == "invalid_argument"
    for depth in ("0", "33", "x"):
        assert error_code(get(client, sandbox, "/workspace", "/list", depth=depth), 422) == "invalid_argument"
    assert error_code(get(client, sandbox, "/workspace/m", user="bad user"), 422) == "invalid_argument"
    r = client.post(files_url(sandbox, "/mkdir"), {"path": "/workspace/d", "mode": 0o10000})
    assert error_code(r, 422) == "invalid_argument"
    # Nothing was created by the refused requests.
    assert client.sh(sandbox, "ls /workspace") == ""


def test_unknown_sandbox_and_user_are_404(client, sandbox):
    assert error_code(get(client, "no-such-sandbox", "/etc/hostname"), 404) == "sandbox_not_found"
    assert error_code(put(client, "no-such-sandbox", "/workspace/x", b"x"), 404) == "sandbox_not_found"
    assert error_code(client.post(files_url("no-such-sandbox", "/mkdir"), {"path": "/x"}), 404) == "sandbox_not_found"
    assert error_code(get(client, "bad$id", "/etc/hostname"), 404) == "sandbox_not_found"
    r = put(client, sandbox, "/workspace/x", b"x", user="nosuchuser")
    assert_error_shape(r, 404)


def test_read_only_system_directories_are_403(client, sandbox):
    r = put(client, sandbox, "/usr/bulkhead-test", b"x")
    assert error_code(r, 403) in ("read_only", "permission_denied")
    r = client.post(files_url(sandbox, "/mkdir"), {"path": "/usr/lib/bulkhead-test"})
    assert_error_shape(r, 403)
    assert error_code(client.delete(files_url(sandbox, path="/usr/bin/env")), 403) in ("read_only", "permission_denied")
    assert client.exec(sandbox, ["test", "-x", "/usr/bin/env"])["exit_code"] == 0


def refused_upload(client, sandbox, sent: bytes):
    """PUTs to a read-only path announcing 1 GiB and sending `sent`: the answer, read."""
    conn = client.connection(timeout=30)
    try:
        conn.putrequest("PUT", files_url(sandbox, path="/usr/never"))
        conn.putheader("Authorization", f"Bearer {client.key}")
        conn.putheader("Content-Length", str(1 << 30))
        conn.endheaders()
        conn.send(sent)
        r = conn.getresponse()
        assert r.status == 403
        assert json.loads(r.read())["error"]["code"] in ("read_only", "permission_denied")
        assert r.will_close
    finally:
        conn.close()


def test_an_upload_refused_early_does_not_wait_for_the_body(client, sandbox):
    """A write that fails at once (a read-only path) is answered while the client still sends:
    the daemon stops reading, answers, and closes the connection."""
    refused_upload(client, sandbox, b"x" * MiB)


def test_an_upload_refused_while_the_daemon_waits_for_the_body_is_answered_at_once(client, sandbox):
    """The refusal comes while the daemon waits for more of the body (all it was sent is taken
    in): the wait ends and the answer goes out."""
    refused_upload(client, sandbox, b"only this")
    assert client.sh(sandbox, "echo still here") == "still here\n"


def test_a_client_that_breaks_off_an_upload_leaves_the_old_content(client, sandbox):
    write(client, sandbox, "/workspace/precious", b"old content")
    sock = socket.create_connection(("127.0.0.1", client.port), timeout=30)
    try:
        sock.sendall((f"PUT {files_url(sandbox, path='/workspace/precious')} HTTP/1.1\r\nHost: x\r\n"
                      f"Authorization: Bearer {client.key}\r\nContent-Length: 1000000\r\n\r\n").encode() + b"n" * 5000)
    finally:
        sock.close()
    # The cut-off write never replaces the file (and a later request sees the old bytes).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert get(client, sandbox, "/workspace/precious").body == b"old content"
        if client.sh(sandbox, "ls -A /workspace | wc -l").strip() == "1":
            break
        time.sleep(0.1)
    assert client.sh(sandbox, "ls -A /workspace").split() == ["precious"]  # no temporary left behind
