"""sandbox.files through the Python SDK: write/read (text, every byte value, 32 MiB), several
files at once, octet-stream and gzip uploads, list, exists, make_dir, rename, remove, get_info,
watch_dir (CreateWatcher/GetWatcherEvents in the sync SDK), and the not-found errors."""

import hashlib
import os
import time

import httpx
import pytest
from e2b import FileNotFoundException, FilesystemEventType, FileType, SandboxException


def test_write_read_text(sbx):
    info = sbx.files.write("/home/user/t/hello.txt", "héllo wörld\nline 2\n")
    assert (info.name, info.path, info.type) == ("hello.txt", "/home/user/t/hello.txt", FileType.FILE)
    assert sbx.files.read("/home/user/t/hello.txt") == "héllo wörld\nline 2\n"
    # A relative path is relative to the user's home.
    assert sbx.files.read("t/hello.txt") == "héllo wörld\nline 2\n"
    # Writing again replaces the content (shorter: truncated).
    sbx.files.write("/home/user/t/hello.txt", "short")
    assert sbx.files.read("/home/user/t/hello.txt") == "short"
    # Written as the default user.
    assert sbx.commands.run("stat -c %U /home/user/t/hello.txt").stdout == "user\n"


def test_every_byte_value(sbx):
    data = bytes(range(256)) * 16
    sbx.files.write("/tmp/f/all-bytes.bin", data)
    assert bytes(sbx.files.read("/tmp/f/all-bytes.bin", format="bytes")) == data
    r = sbx.commands.run("sha256sum /tmp/f/all-bytes.bin")
    assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()


def test_large_file_round_trip(sbx):
    data = os.urandom(32 << 20)
    digest = hashlib.sha256(data).hexdigest()
    info = sbx.files.write("/tmp/f/large.bin", data)
    assert info.path == "/tmp/f/large.bin"
    assert sbx.commands.run("sha256sum /tmp/f/large.bin").stdout.split()[0] == digest
    assert sbx.files.get_info("/tmp/f/large.bin").size == len(data)
    back = sbx.files.read("/tmp/f/large.bin", format="bytes")
    assert len(back) == len(data)
    assert hashlib.sha256(back).hexdigest() == digest


def test_octet_stream_and_gzip(sbx):
    data = bytes(range(256)) * 64
    sbx.files.write("/tmp/f/octet.bin", data, use_octet_stream=True)
    assert bytes(sbx.files.read("/tmp/f/octet.bin", format="bytes")) == data
    sbx.files.write("/tmp/f/gz.bin", data, gzip=True)
    assert bytes(sbx.files.read("/tmp/f/gz.bin", format="bytes")) == data
    assert bytes(sbx.files.read("/tmp/f/gz.bin", format="bytes", gzip=True)) == data
    # A stream (an iterable of chunks) goes out as octet-stream.
    sbx.files.write("/tmp/f/chunks.bin", iter([b"a" * 1000, b"b" * 70000, b"c"]))
    assert bytes(sbx.files.read("/tmp/f/chunks.bin", format="bytes")) == b"a" * 1000 + b"b" * 70000 + b"c"


def test_write_several_files(sbx):
    infos = sbx.files.write_files([
        {"path": "/tmp/multi/a.txt", "data": "A"},
        {"path": "/tmp/multi/sub/b.bin", "data": b"\x00\xffB"},
        {"path": "/tmp/multi/c.txt", "data": "C" * 5000},
    ])
    assert sorted(i.path for i in infos) == ["/tmp/multi/a.txt", "/tmp/multi/c.txt", "/tmp/multi/sub/b.bin"]
    assert sbx.files.read("/tmp/multi/a.txt") == "A"
    assert bytes(sbx.files.read("/tmp/multi/sub/b.bin", format="bytes")) == b"\x00\xffB"
    assert sbx.files.read("/tmp/multi/c.txt") == "C" * 5000


def test_list_depth(sbx):
    sbx.files.write_files([
        {"path": "/tmp/ls/file-b.txt", "data": "bb"},
        {"path": "/tmp/ls/File-a.txt", "data": "a"},
        {"path": "/tmp/ls/dir/inner.txt", "data": "inner"},
    ])
    entries = sbx.files.list("/tmp/ls")
    # Directories first, then by name, case-insensitively.
    assert [(e.name, e.type) for e in entries] == [
        ("dir", FileType.DIR), ("File-a.txt", FileType.FILE), ("file-b.txt", FileType.FILE)]
    by_name = {e.name: e for e in entries}
    assert by_name["file-b.txt"].path == "/tmp/ls/file-b.txt"
    assert by_name["file-b.txt"].size == 2
    assert by_name["dir"].path == "/tmp/ls/dir"

    deep = sbx.files.list("/tmp/ls", depth=2)
    assert sorted(e.path for e in deep) == [
        "/tmp/ls/File-a.txt", "/tmp/ls/dir", "/tmp/ls/dir/inner.txt", "/tmp/ls/file-b.txt"]


def test_exists_make_dir_rename_remove(sbx):
    assert sbx.files.exists("/tmp/ops") is False
    assert sbx.files.make_dir("/tmp/ops/nested/deeper") is True
    assert sbx.files.make_dir("/tmp/ops/nested/deeper") is False
    assert sbx.files.exists("/tmp/ops/nested/deeper") is True

    sbx.files.write("/tmp/ops/old.txt", "moving")
    moved = sbx.files.rename("/tmp/ops/old.txt", "/tmp/ops/nested/new.txt")
    assert (moved.name, moved.path, moved.type) == ("new.txt", "/tmp/ops/nested/new.txt", FileType.FILE)
    assert sbx.files.exists("/tmp/ops/old.txt") is False
    assert sbx.files.read("/tmp/ops/nested/new.txt") == "moving"

    sbx.files.remove("/tmp/ops/nested/new.txt")
    assert sbx.files.exists("/tmp/ops/nested/new.txt") is False
    sbx.files.remove("/tmp/ops")  # a directory with contents
    assert sbx.files.exists("/tmp/ops") is False


def test_get_info(sbx):
    sbx.files.write("/home/user/info/x.txt", "12345")
    sbx.commands.run("chmod 640 /home/user/info/x.txt")
    info = sbx.files.get_info("/home/user/info/x.txt")
    assert (info.name, info.path, info.type, info.size) == ("x.txt", "/home/user/info/x.txt", FileType.FILE, 5)
    assert info.mode == 0o640
    assert info.permissions == "-rw-r-----"
    assert info.owner == "user"
    d = sbx.files.get_info("/home/user/info")
    assert (d.type, d.name) == (FileType.DIR, "info")
    sbx.commands.run("ln -sf /home/user/info/x.txt /home/user/info/link")
    link = sbx.files.get_info("/home/user/info/link")
    assert link.type == FileType.SYMLINK
    assert link.symlink_target == "/home/user/info/x.txt"


def test_not_found_errors(sbx):
    with pytest.raises(FileNotFoundException):
        sbx.files.read("/tmp/definitely/missing.txt")
    with pytest.raises(FileNotFoundException):
        sbx.files.get_info("/tmp/definitely/missing.txt")
    with pytest.raises(FileNotFoundException):
        sbx.files.list("/tmp/definitely/missing")
    with pytest.raises(FileNotFoundException):
        sbx.files.rename("/tmp/definitely/missing.txt", "/tmp/elsewhere.txt")


def test_user_root_files(sbx):
    sbx.files.write("/root/secret.txt", "root's", user="root")
    assert sbx.files.read("/root/secret.txt", user="root") == "root's"
    assert sbx.files.get_info("/root/secret.txt", user="root").owner == "root"
    with pytest.raises(SandboxException):
        sbx.files.write("/root/not-mine.txt", "x")


def test_watch_dir(sbx):
    sbx.files.make_dir("/tmp/watched")
    watcher = sbx.files.watch_dir("/tmp/watched")
    try:
        sbx.files.write("/tmp/watched/new.txt", "created")
        sbx.commands.run("echo more >> /tmp/watched/new.txt")
        sbx.files.remove("/tmp/watched/new.txt")
        seen = set()
        deadline = time.monotonic() + 20  # events are collected in the sandbox, polled here
        while time.monotonic() < deadline:
            seen |= {(e.name, e.type) for e in watcher.get_new_events()}
            if {("new.txt", FilesystemEventType.CREATE), ("new.txt", FilesystemEventType.WRITE),
                    ("new.txt", FilesystemEventType.REMOVE)} <= seen:
                break
            time.sleep(0.2)
        assert ("new.txt", FilesystemEventType.CREATE) in seen, seen
        assert ("new.txt", FilesystemEventType.WRITE) in seen, seen
        assert ("new.txt", FilesystemEventType.REMOVE) in seen, seen
    finally:
        watcher.stop()
    with pytest.raises(SandboxException):
        watcher.get_new_events()


def test_watch_dir_recursive(sbx):
    sbx.files.make_dir("/tmp/watched-r/sub")
    watcher = sbx.files.watch_dir("/tmp/watched-r", recursive=True)
    try:
        sbx.files.write("/tmp/watched-r/sub/deep.txt", "x")
        seen = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and ("sub/deep.txt", FilesystemEventType.CREATE) not in seen:
            seen |= {(e.name, e.type) for e in watcher.get_new_events()}
            time.sleep(0.2)
        assert ("sub/deep.txt", FilesystemEventType.CREATE) in seen, seen
    finally:
        watcher.stop()


def test_signed_upload_and_download_urls(sbx):
    """The URLs are used as a browser or another service would: plain HTTP, no SDK headers."""
    upload = sbx.upload_url("/home/user/signed/up.bin")
    body = bytes(range(256)) * 3
    r = httpx.post(upload, files={"file": ("up.bin", body, "application/octet-stream")})
    assert r.status_code == 200, r.text
    assert bytes(sbx.files.read("/home/user/signed/up.bin", format="bytes")) == body

    download = sbx.download_url("/home/user/signed/up.bin")
    r = httpx.get(download)
    assert (r.status_code, r.content) == (200, body)

    # A signature is for its own path and operation only.
    other = download.replace("up.bin", "other.bin")
    assert httpx.get(other).status_code == 401
    assert httpx.post(download, files={"file": ("x", b"x")}).status_code == 401
    expiring = sbx.download_url("/home/user/signed/up.bin", use_signature_expiration=60)
    assert httpx.get(expiring).content == body


def test_expired_and_wrong_signatures_get_envds_answers(sbx):
    """envd's 401s for signed URLs: {"code": 401, "message"} saying what is wrong, whether the
    URL is used plain or with the SDK's routing header."""
    sbx.files.write("/home/user/signed/old.txt", "old")
    expired = {"code": 401, "message": "signature is already expired"}
    invalid = {"code": 401, "message": "invalid signature"}
    routed = {"E2b-Sandbox-Id": sbx.sandbox_id}
    for headers in ({}, routed):
        download = sbx.download_url("/home/user/signed/old.txt", use_signature_expiration=-120)
        r = httpx.get(download, headers=headers)
        assert (r.status_code, r.json()) == (401, expired), r.text
        upload = sbx.upload_url("/home/user/signed/old.txt", use_signature_expiration=-120)
        r = httpx.post(upload, files={"file": ("old.txt", b"new")}, headers=headers)
        assert (r.status_code, r.json()) == (401, expired), r.text
        # Another path under the same signature, or a signature of nothing: not this sandbox's.
        other = sbx.download_url("/home/user/signed/old.txt").replace("old.txt", "other.txt")
        r = httpx.get(other, headers=headers)
        assert (r.status_code, r.json()) == (401, invalid), r.text
    r = httpx.get(sbx.download_url("/home/user/signed/old.txt").replace("signature=v1_", "signature=v1_x"))
    assert (r.status_code, r.json()) == (401, invalid), r.text
    assert sbx.files.read("/home/user/signed/old.txt") == "old"
