"""Unpacking a tar stream from a sandbox into a local directory, the stream taken as hostile
(sandbox code chooses what is in it). Every member is checked and made here, the same on every
Python: tarfile reads the stream, its extraction (whose filters older Pythons lack, and which
chowns when run as root) is never used.

Made: regular files, directories, symlinks that stay inside, hard links to files unpacked before;
permission bits without setuid/setgid (sticky on directories only) and mtimes. Never: owners (files
belong to whoever runs this), devices, fifos, absolute or ".." names, symlinks leading out, a write
through a symlink (one already in the destination included). A refused member is skipped with
nothing written for it; UnsafeArchiveError lists them once the rest is unpacked."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tarfile
from typing import List, Optional, Set, Tuple

from .errors import UnsafeArchiveError
from .streams import ByteStream

_DIRECTORY_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class _Refused(Exception):
    """A member that cannot be made safely; its text says why."""


def contained_name(name: str) -> Optional[List[str]]:
    """The components of a member's name inside the destination, without "" and "." (empty: the
    destination itself); None for an absolute name or one with a ".." component."""
    if not name or name.startswith("/"):
        return None
    parts = [part for part in name.split("/") if part not in ("", ".")]
    return None if ".." in parts else parts


def symlink_stays_inside(parts: List[str], target: str) -> bool:
    """Whether a symlink named `parts` pointing at `target` points inside the destination: the
    target is relative, its ".." components come before any name (a name could be a symlink whose
    ".." climbs from elsewhere), and they climb no higher than the destination."""
    if not target or target.startswith("/") or not parts:
        return False
    depth = len(parts) - 1
    named = False
    for part in target.split("/"):
        if part == "..":
            if named or depth == 0:
                return False
            depth -= 1
        elif part not in ("", "."):
            named = True
    return True


def host_mode(mode: int, is_directory: bool) -> int:
    """The permission bits a file from a sandbox gets here: never setuid or setgid, sticky only
    on a directory."""
    return mode & (0o1777 if is_directory else 0o777)


def _why_refused(member: tarfile.TarInfo, parts: Optional[List[str]], regular_files: Set[str]) -> Optional[str]:
    if parts is None:
        return "its name leads outside the destination"
    if not parts and not member.isdir():
        return "it would replace the destination itself"
    if member.islnk():
        target = contained_name(member.linkname)
        if target is not None and "/".join(target) in regular_files:
            return None
        return "a hard link to %r, which is not a file unpacked before it" % member.linkname
    if member.isreg() or member.isdir():
        return None
    if member.issym():
        if symlink_stays_inside(parts, member.linkname):
            return None
        return "a symlink to %r, outside the destination" % member.linkname
    if member.ischr() or member.isblk():
        return "a device node"
    if member.isfifo():
        return "a fifo"
    return "an entry of an unknown type"


def _open_directory(root_fd: int, parts: List[str], create: bool) -> int:
    """An fd of the directory `parts` under root_fd, reached without following any symlink;
    missing directories are made when `create`."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            try:
                next_fd = os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o777, dir_fd=fd)
                next_fd = os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _Refused("%r is a symlink or a file, not a directory to write into" % part) from None
                raise
            os.close(fd)
            fd = next_fd
        return fd
    except BaseException:
        os.close(fd)
        raise


def _clear(parent_fd: int, name: str) -> None:
    """Removes what is at `name` so that a new entry replaces it (a symlink is removed, never
    written through); a directory in the way is refused."""
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        raise _Refused("a directory is in the way")
    os.unlink(name, dir_fd=parent_fd)


def _set_times(fd: int, mtime: float) -> None:
    try:
        os.utime(fd, (mtime, mtime))
    except (OSError, OverflowError, ValueError):
        pass  # a time this system cannot store: the file itself is what counts


def _make(tar: tarfile.TarFile, member: tarfile.TarInfo, root_fd: int, parts: List[str],
          directories: List[Tuple[List[str], int, float]]) -> None:
    if not parts:  # the destination itself: its mode and time, applied last
        directories.append((parts, member.mode, member.mtime))
        return
    parent_fd = _open_directory(root_fd, parts[:-1], create=True)
    name = parts[-1]
    try:
        if member.isdir():
            try:
                info: Optional[os.stat_result] = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            except FileNotFoundError:
                info = None
            if info is None or not stat.S_ISDIR(info.st_mode):
                _clear(parent_fd, name)
                os.mkdir(name, 0o700, dir_fd=parent_fd)  # its own mode comes last, once its contents are in
            directories.append((parts, member.mode, member.mtime))
        elif member.issym():
            _clear(parent_fd, name)
            os.symlink(member.linkname, name, dir_fd=parent_fd)
        elif member.islnk():
            target = contained_name(member.linkname) or []
            _clear(parent_fd, name)
            source_fd = _open_directory(root_fd, target[:-1], create=False)
            try:
                os.link(target[-1], name, src_dir_fd=source_fd, dst_dir_fd=parent_fd, follow_symlinks=False)
            finally:
                os.close(source_fd)
        else:
            _clear(parent_fd, name)
            fd = os.open(name, _NEW_FILE_FLAGS, 0o600, dir_fd=parent_fd)
            with os.fdopen(fd, "wb") as out:
                data = tar.extractfile(member)
                if data is not None:
                    shutil.copyfileobj(data, out, 1 << 20)
                out.flush()
                os.fchmod(out.fileno(), host_mode(member.mode, False))
                _set_times(out.fileno(), member.mtime)
    finally:
        os.close(parent_fd)


def _finish_directory(root_fd: int, parts: List[str], mode: int, mtime: float) -> None:
    try:
        fd = _open_directory(root_fd, parts, create=False)
    except (OSError, _Refused):
        return  # replaced by a later entry: that entry's own mode stands
    try:
        os.fchmod(fd, host_mode(mode, True))
        _set_times(fd, mtime)
    finally:
        os.close(fd)


def unpack_tar(stream: ByteStream, dest: str) -> int:
    """Unpacks the tar read from `stream` into the directory `dest` (made if missing); returns
    how many entries were made. Raises UnsafeArchiveError after the rest if any was refused."""
    os.makedirs(dest, exist_ok=True)
    root_fd = os.open(os.path.realpath(dest), _DIRECTORY_FLAGS)
    regular_files: Set[str] = set()  # what a hard link may name: a file made by this unpack
    refused: List[Tuple[str, str]] = []
    directories: List[Tuple[List[str], int, float]] = []
    made = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
            for member in tar:
                parts = contained_name(member.name)
                why = _why_refused(member, parts, regular_files)
                if why is None and parts is not None:
                    key = "/".join(parts)
                    regular_files.discard(key)  # whatever was there is replaced
                    try:
                        _make(tar, member, root_fd, parts, directories)
                    except _Refused as e:
                        why = str(e)
                    else:
                        made += 1
                        if member.isreg() or member.islnk():
                            regular_files.add(key)
                if why is not None:
                    refused.append((member.name, why))
        # Directory modes last, so that a read-only directory did not stop what goes inside it.
        for parts_of_dir, mode, mtime in reversed(directories):
            _finish_directory(root_fd, parts_of_dir, mode, mtime)
    finally:
        os.close(root_fd)
    if refused:
        raise UnsafeArchiveError(refused, made, dest)
    return made
