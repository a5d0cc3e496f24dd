"""The Python SDK's download_dir() unpacker fed hostile tar streams made here, as sandbox code
could send them (no daemon: download_archive is replaced by the bytes). Nothing may land outside
the directory, be written through a symlink, arrive setuid/setgid, as a device or fifo, or keep
the archive's owners, on whatever Python runs it (this suite's /usr/bin/python3 has no tarfile
extraction filters)."""

import io
import os
import stat
import sys
import tarfile
from pathlib import Path

import pytest

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk" / "python"
sys.path.insert(0, str(SDK_DIR))

from bulkhead import UnsafeArchiveError  # noqa: E402
from bulkhead.files import Files  # noqa: E402


def member(name, kind=tarfile.REGTYPE, mode=0o644, data=b"", link="", owner=0):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.mtime = kind, mode, link, 1700000000
    info.uid = info.gid = owner
    info.uname = info.gname = "root" if owner == 0 else ""
    if kind == tarfile.CHRTYPE:
        info.devmajor, info.devminor = 1, 1  # /dev/mem
    info.size = len(data)
    return info, data


def tar_of(*members) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


@pytest.fixture
def place(tmp_path):
    """dest (empty) and, beside it, outside/target, which must never change."""
    (tmp_path / "dest").mkdir()
    (tmp_path / "outside").mkdir(0o755)
    (tmp_path / "outside" / "target").write_text("precious")
    return tmp_path


def unpack(dest: Path, tar: bytes):
    """What download_dir() returns, or the UnsafeArchiveError it raised."""
    files = Files(sandbox=None)  # type: ignore[arg-type]
    files.download_archive = lambda path, user=None: io.BytesIO(tar)  # type: ignore[method-assign]
    try:
        return files.download_dir("/workspace/d", dest)
    except UnsafeArchiveError as e:
        return e


def refused_names(result) -> list:
    assert isinstance(result, UnsafeArchiveError), f"expected refusals, got {result!r}"
    return [name for name, _ in result.refused]


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_normal_tree_arrives_as_before(place):
    dest = place / "dest"
    made = unpack(dest, tar_of(member("src", tarfile.DIRTYPE, 0o700),
                               member("src/main.py", mode=0o755, data=b"print(42)\n"),
                               member("ro", tarfile.DIRTYPE, 0o555),
                               member("ro/inside", mode=0o444, data=b"read only"),
                               member("link", tarfile.SYMTYPE, 0o777, link="src/main.py"),
                               member("src/up", tarfile.SYMTYPE, 0o777, link="../link"),
                               member("same", tarfile.LNKTYPE, 0o755, link="src/main.py")))
    assert made == 7
    assert (dest / "src" / "main.py").read_text() == "print(42)\n"
    assert (dest / "same").read_text() == "print(42)\n"
    assert os.readlink(dest / "link") == "src/main.py"
    assert (dest / "src" / "up").read_text() == "print(42)\n"
    assert mode_of(dest / "src") == 0o700 and mode_of(dest / "src" / "main.py") == 0o755
    assert mode_of(dest / "ro") == 0o555 and (dest / "ro" / "inside").read_text() == "read only"
    assert os.stat(dest / "src" / "main.py").st_mtime == 1700000000


def test_setuid_and_setgid_never_arrive_and_sticky_only_on_directories(place):
    dest = place / "dest"
    made = unpack(dest, tar_of(member("evil", mode=0o4755, data=b"#!/bin/sh\n"),
                               member("group-tool", mode=0o2755, data=b"#!/bin/sh\n"),
                               member("sticky-file", mode=0o1644, data=b"x"),
                               member("shared", tarfile.DIRTYPE, 0o2775),
                               member("tmp", tarfile.DIRTYPE, 0o1777)))
    assert made == 5
    assert mode_of(dest / "evil") == 0o755
    assert mode_of(dest / "group-tool") == 0o755
    assert mode_of(dest / "sticky-file") == 0o644
    assert mode_of(dest / "shared") == 0o775
    assert mode_of(dest / "tmp") == 0o1777


def test_files_belong_to_whoever_unpacks_never_to_the_archives_owners(place):
    dest = place / "dest"
    assert unpack(dest, tar_of(member("theirs", data=b"x", owner=12345),
                               member("their-dir", tarfile.DIRTYPE, 0o755, owner=12345),
                               member("their-link", tarfile.SYMTYPE, 0o777, link="theirs", owner=12345),
                               member("roots", data=b"x", owner=0))) == 4
    for name in ("theirs", "their-dir", "their-link", "roots"):
        info = os.lstat(dest / name)
        assert (info.st_uid, info.st_gid) == (os.geteuid(), os.getegid()), name


def test_devices_and_fifos_are_refused_and_the_rest_arrives(place):
    dest = place / "dest"
    result = unpack(dest, tar_of(member("mem", tarfile.CHRTYPE, 0o666),
                                 member("disk", tarfile.BLKTYPE, 0o660),
                                 member("pipe", tarfile.FIFOTYPE),
                                 member("after", data=b"ok")))
    assert refused_names(result) == ["mem", "disk", "pipe"]
    assert result.unpacked == 1
    assert "'mem': a device node; 'disk': a device node; 'pipe': a fifo" in str(result)
    for name in ("mem", "disk", "pipe"):
        assert not os.path.lexists(dest / name), name
    assert (dest / "after").read_text() == "ok"


def test_absolute_and_dotdot_names_are_refused(place):
    dest, outside = place / "dest", place / "outside"
    result = unpack(dest, tar_of(member(str(outside / "abs"), data=b"x"),
                                 member("../outside/dotdot", data=b"x"),
                                 member("a/../../outside/deeper", data=b"x")))
    assert len(refused_names(result)) == 3
    for name in ("abs", "dotdot", "deeper"):
        assert not (outside / name).exists(), name
    assert list(dest.iterdir()) == []


def test_symlinks_leading_out_are_refused_and_nothing_is_written_through_one(place):
    dest, outside = place / "dest", place / "outside"
    result = unpack(dest, tar_of(
        # The classic: a symlink out, then a file "under" it.
        member("a", tarfile.SYMTYPE, link=str(outside)),
        member("a/target", data=b"overwritten"),
        member("b", tarfile.SYMTYPE, link="../outside"),
        member("b/target", data=b"overwritten"),
        member("sub", tarfile.DIRTYPE, 0o755),
        member("sub/loop", tarfile.SYMTYPE, link=".."),
        member("climb", tarfile.SYMTYPE, link="sub/loop/../.."),
        member("etc", tarfile.SYMTYPE, link="/etc"),
        # Even a symlink that stays inside is never written through.
        member("c", tarfile.SYMTYPE, link="sub"),
        member("c/file", data=b"through a link")))
    assert refused_names(result) == ["a", "b", "climb", "etc", "c/file"]
    assert (outside / "target").read_text() == "precious"
    assert not (dest / "a").is_symlink()
    assert os.readlink(dest / "sub" / "loop") == ".."
    assert not (dest / "sub" / "file").exists()


def test_a_symlink_already_in_the_destination_is_replaced_or_refused_never_followed(place):
    dest, outside = place / "dest", place / "outside"
    os.symlink(outside, dest / "a")
    os.symlink(outside / "target", dest / "t")
    os.symlink(outside, dest / "d")
    result = unpack(dest, tar_of(member("a/planted", data=b"x"), member("t", data=b"new"),
                                 member("d", tarfile.DIRTYPE, 0o777), member("d/target", data=b"overwritten")))
    assert refused_names(result) == ["a/planted"]
    assert not (dest / "d").is_symlink() and (dest / "d" / "target").read_text() == "overwritten"
    assert mode_of(outside) == 0o755
    assert not (outside / "planted").exists()
    assert (outside / "target").read_text() == "precious"
    assert not (dest / "t").is_symlink() and (dest / "t").read_text() == "new"


def test_hard_links_only_to_files_this_unpack_made(place):
    dest, outside = place / "dest", place / "outside"
    os.symlink(outside / "target", dest / "pre")
    (dest / "mine").write_text("the user's own")
    result = unpack(dest, tar_of(member("passwd", tarfile.LNKTYPE, link="/etc/passwd"),
                                 member("out", tarfile.LNKTYPE, link="../outside/target"),
                                 member("grab", tarfile.LNKTYPE, link="pre"),
                                 member("grab-mine", tarfile.LNKTYPE, link="mine"),
                                 member("sub/deep", tarfile.DIRTYPE, 0o755),
                                 member("sub/deep/link", tarfile.SYMTYPE, link="../../file"),
                                 member("relinked", tarfile.LNKTYPE, link="sub/deep/link"),
                                 member("early", tarfile.LNKTYPE, link="later"),
                                 member("later", data=b"x"),
                                 member("file", data=b"in the tree"),
                                 member("same", tarfile.LNKTYPE, link="file")))
    assert refused_names(result) == ["passwd", "out", "grab", "grab-mine", "relinked", "early"]
    for name in ("passwd", "out", "grab", "grab-mine", "relinked", "early"):
        assert not os.path.lexists(dest / name), name
    assert (dest / "same").read_text() == "in the tree"
    assert (outside / "target").read_text() == "precious"
