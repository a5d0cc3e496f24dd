"""sandbox.files through the Python SDK: write/read (text, every byte value, 32 MiB), several
files at once, octet-stream and gzip uploads, list, exists, make_dir, rename, remove, get_info,
watch_dir (CreateWatcher/GetWatcherEvents in the sync SDK), and the not-found errors."""

import hashlib
import os
import time

import httpx
import pytest
from e2b import FileNotFoundException, FilesystemEventType, FileType, InvalidArgumentException, SandboxException


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
        {"path": "/tmp/ls/dir.txt", "data": "d"},
    ])
    entries = sbx.files.list("/tmp/ls")
    # envd's order: by name, byte for byte (capitals first), directories among the files.
    assert [(e.name, e.type) for e in entries] == [
        ("File-a.txt", FileType.FILE), ("dir", FileType.DIR), ("dir.txt", FileType.FILE),
        ("file-b.txt", FileType.FILE)]
    by_name = {e.name: e for e in entries}
    assert by_name["file-b.txt"].path == "/tmp/ls/file-b.txt"
    assert by_name["file-b.txt"].size == 2
    assert by_name["dir"].path == "/tmp/ls/dir"

    # Deeper, a walk of the tree: each directory is followed by its contents ("dir/inner.txt"
    # before "dir.txt", though "." sorts before "/").
    deep = sbx.files.list("/tmp/ls", depth=2)
    assert [e.path for e in deep] == [
        "/tmp/ls/File-a.txt", "/tmp/ls/dir", "/tmp/ls/dir/inner.txt", "/tmp/ls/dir.txt", "/tmp/ls/file-b.txt"]


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


def test_remove_of_a_missing_path_succeeds(sbx):
    # envd removes with os.RemoveAll: what is not there counts as removed.
    sbx.files.remove("/home/user/never-written.txt")
    sbx.files.remove("/tmp/never-made/never-written.txt")
    assert sbx.files.exists("/home/user/never-written.txt") is False


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


def test_get_info_of_symlinks(sbx):
    """envd describes a symlink by what it leads to: the target's type and permission bits,
    and the target fully resolved to an absolute path; the rest is the link's own."""
    sbx.files.write("/home/user/links/x.txt", "12345")
    sbx.commands.run("cd /home/user/links && chmod 640 x.txt && ln -s x.txt rel && ln -s rel chain"
                     " && ln -s /home/user/links abs-dir && ln -s nowhere dangling")
    rel = sbx.files.get_info("/home/user/links/rel")
    assert (rel.name, rel.path, rel.type) == ("rel", "/home/user/links/rel", FileType.FILE)
    assert rel.symlink_target == "/home/user/links/x.txt"
    assert (rel.mode, rel.permissions, rel.size) == (0o640, "Lrwxrwxrwx", len("x.txt"))
    chain = sbx.files.get_info("/home/user/links/chain")
    assert (chain.type, chain.symlink_target) == (FileType.FILE, "/home/user/links/x.txt")
    to_dir = sbx.files.get_info("/home/user/links/abs-dir")
    assert (to_dir.type, to_dir.symlink_target, to_dir.mode) == (FileType.DIR, "/home/user/links", 0o755)
    # A dangling link has no type, and its target is the link itself (envd cannot resolve it).
    dangling = sbx.files.get_info("/home/user/links/dangling")
    assert (dangling.type, dangling.symlink_target) == (None, "/home/user/links/dangling")
    # A listing describes them the same way (the SDK leaves out what has no type: the dangling
    # link); it does not descend into the link to a directory.
    listed = {e.name: e for e in sbx.files.list("/home/user/links", depth=2)}
    assert set(listed) == {"abs-dir", "chain", "rel", "x.txt"}
    assert (listed["rel"].type, listed["rel"].symlink_target) == (FileType.FILE, "/home/user/links/x.txt")
    assert (listed["abs-dir"].type, listed["abs-dir"].symlink_target) == (FileType.DIR, "/home/user/links")
    assert listed["x.txt"].symlink_target is None


def test_directory_size_is_the_space_it_takes(sbx):
    """As on E2B's ext4, a directory's size is what it takes on disk (at least one block),
    whatever the filesystem reports as its st_size (btrfs: 0 for an empty one)."""
    sbx.files.make_dir("/home/user/sized/empty")
    blocks, block_bytes, io_block = map(int, sbx.commands.run("stat -c '%b %B %o' /home/user/sized/empty").stdout.split())
    info = sbx.files.get_info("/home/user/sized/empty")
    assert info.size == max(blocks * block_bytes, io_block) > 0
    listed = {e.name: e for e in sbx.files.list("/home/user/sized")}
    assert listed["empty"].size == info.size


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

def test_file_operations_run_as_root_and_give_what_they_make_to_the_user(sbx):
    """envd does every file operation as root, then chowns what it made to the request's user:
    the sandbox is the boundary, not the user inside it."""
    owner = lambda path: sbx.commands.run(f"stat -c %U:%G {path}", user="root").stdout.strip()  # noqa: E731
    info = sbx.files.write("/e2b-made/x.txt", "mine")
    assert info.path == "/e2b-made/x.txt"
    assert owner("/e2b-made") == owner("/e2b-made/x.txt") == "user:user"
    assert sbx.files.make_dir("/srv/made-by-user/sub") is True
    assert owner("/srv/made-by-user") == owner("/srv/made-by-user/sub") == "user:user"
    sbx.files.write("/root/not-mine.txt", "x")
    assert owner("/root/not-mine.txt") == "user:user"
    # Root's own files: readable, listable, and an overwrite gives the file to the user too.
    sbx.commands.run("echo root > /srv/root-file && chmod 600 /srv/root-file", user="root")
    assert sbx.files.read("/srv/root-file") == "root\n"
    assert "not-mine.txt" in {e.name for e in sbx.files.list("/root")}
    sbx.files.write("/srv/root-file", "now the user's")
    assert owner("/srv/root-file") == "user:user"
    assert sbx.files.rename("/srv/root-file", "/srv/moved/root-file").path == "/srv/moved/root-file"
    assert owner("/srv/moved") == "user:user"
    sbx.files.remove("/srv/moved")
    assert sbx.files.exists("/srv/moved") is False
    # As another user, what is made is that user's.
    sbx.files.write("/srv/roots.txt", "r", user="root")
    assert owner("/srv/roots.txt") == "root:root"



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


def events_until(watcher, done, timeout=20) -> list:
    """A polled watcher's events (in order) until `done(events)` holds; events are gathered
    in the sandbox as they happen, polled here."""
    events = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events += watcher.get_new_events()
        if done(events):
            break
        time.sleep(0.2)
    return events


def test_watch_reports_a_write_as_envd_does(sbx):
    """envd creates the file, chowns it to the user (a CHMOD), then writes it; an overwrite
    is a chown and a write."""
    sbx.files.make_dir("/tmp/watch-order")
    watcher = sbx.files.watch_dir("/tmp/watch-order")
    try:
        def types(events):
            return [e.type for e in events if e.name == "new.txt"]

        def written(events):
            return FilesystemEventType.WRITE in types(events)

        sbx.files.write("/tmp/watch-order/new.txt", "first")
        events = events_until(watcher, written)
        assert types(events) == [FilesystemEventType.CREATE, FilesystemEventType.CHMOD, FilesystemEventType.WRITE], events
        sbx.files.write("/tmp/watch-order/new.txt", "second")
        events = events_until(watcher, written)
        assert types(events) == [FilesystemEventType.CHMOD, FilesystemEventType.WRITE], events
    finally:
        watcher.stop()


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


def test_file_metadata(sbx):
    """envd 0.6.2: X-Metadata-* on upload become user.e2b.* xattrs (keys lowercased), shown in
    entry info and listings, kept by a rename and replaced by an overwrite."""
    info = sbx.files.write("/home/user/meta/a.txt", "x", metadata={"Author": "mish", "purpose": "upload"})
    assert info.metadata == {"author": "mish", "purpose": "upload"}
    assert sbx.files.get_info("/home/user/meta/a.txt").metadata == {"author": "mish", "purpose": "upload"}
    octet = sbx.files.write("/home/user/meta/b.txt", "y", metadata={"k": "v w"}, use_octet_stream=True)
    assert octet.metadata == {"k": "v w"}
    infos = sbx.files.write_files([{"path": "/home/user/meta/c.txt", "data": "c"},
                                   {"path": "/home/user/meta/d.txt", "data": "d"}], metadata={"batch": "1"})
    assert [i.metadata for i in infos] == [{"batch": "1"}, {"batch": "1"}]
    listed = {e.name: e.metadata for e in sbx.files.list("/home/user/meta")}
    assert listed == {"a.txt": {"author": "mish", "purpose": "upload"}, "b.txt": {"k": "v w"},
                      "c.txt": {"batch": "1"}, "d.txt": {"batch": "1"}}
    assert sbx.files.rename("/home/user/meta/a.txt", "/home/user/meta/e.txt").metadata == {
        "author": "mish", "purpose": "upload"}
    # An overwrite without metadata leaves none; one with metadata has only the new keys.
    assert sbx.files.write("/home/user/meta/e.txt", "again").metadata is None
    assert sbx.files.get_info("/home/user/meta/e.txt").metadata is None
    assert sbx.files.write("/home/user/meta/b.txt", "z", metadata={"other": "1"}).metadata == {"other": "1"}
    # Set in the sandbox: only the user.e2b. namespace is metadata.
    sbx.commands.run("python3 -c \"import os; os.setxattr('/home/user/meta/c.txt', 'user.e2b.tag', b'set'); "
                     "os.setxattr('/home/user/meta/c.txt', 'user.other', b'not metadata')\"")
    assert sbx.files.get_info("/home/user/meta/c.txt").metadata == {"batch": "1", "tag": "set"}
    assert sbx.files.write("/home/user/meta/plain.txt", "p").metadata is None
    with pytest.raises(InvalidArgumentException):
        sbx.files.write("/home/user/meta/bad.txt", "x", metadata={"good": "bad\nvalue"})
    assert sbx.files.exists("/home/user/meta/bad.txt") is False


def test_watch_include_entry_and_network_mounts_option(sbx):
    """envd 0.6.3: include_entry gives create, write and chmod events the entry's info (not
    remove or rename: the entry is gone); 0.6.4: allow_network_mounts."""
    sbx.files.make_dir("/home/user/watch-entry")
    watcher = sbx.files.watch_dir("/home/user/watch-entry", include_entry=True)
    plain = sbx.files.watch_dir("/home/user/watch-entry", allow_network_mounts=True)
    try:
        sbx.files.write("/home/user/watch-entry/f.txt", "12345")
        sbx.files.remove("/home/user/watch-entry/f.txt")
        sbx.files.write("/home/user/watch-entry/g.txt", "g", metadata={"m": "1"})

        def done(events):
            return any(e.type == FilesystemEventType.WRITE and e.name == "g.txt" for e in events)

        events = events_until(watcher, done)
        f_events = [e for e in events if e.name == "f.txt"]
        assert [e.type for e in f_events] == [FilesystemEventType.CREATE, FilesystemEventType.CHMOD,
                                              FilesystemEventType.WRITE, FilesystemEventType.REMOVE], events
        for event in f_events[:3]:
            assert (event.entry.name, event.entry.path, event.entry.type) == (
                "f.txt", "/home/user/watch-entry/f.txt", FileType.FILE), event
            assert (event.entry.size, event.entry.owner, event.entry.metadata) == (5, "user", None), event
        assert f_events[3].entry is None
        g_write = next(e for e in events if e.name == "g.txt" and e.type == FilesystemEventType.WRITE)
        assert g_write.entry.metadata == {"m": "1"}
        others = events_until(plain, done)
        assert done(others) and all(e.entry is None for e in others), others
    finally:
        watcher.stop()
        plain.stop()


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
