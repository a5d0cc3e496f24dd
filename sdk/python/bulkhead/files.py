"""A sandbox's files: read and write (streamed both ways), list, stat, mkdir, move, remove, tar
archives up and down (and whole local directories through them), and watching for changes."""

from __future__ import annotations

import os
import tarfile
import tempfile
from typing import IO, TYPE_CHECKING, Any, Dict, Iterable, Optional, Union

from ._transport import segment, upload_body
from ._unpack import unpack_tar
from .errors import BulkheadError, NotFoundError
from .models import ArchiveSummary, Entry, EntryList, FileEvent
from .streams import ByteStream, EventStream, PathLike

if TYPE_CHECKING:
    from .sandbox import Sandbox

# What write() and upload_archive() send: bytes, text (UTF-8), a binary file object, or an
# iterable of bytes chunks (sent chunked, never held whole).
Data = Union[bytes, bytearray, memoryview, str, IO[bytes], Iterable[bytes]]
Archive = Union[bytes, bytearray, memoryview, IO[bytes], Iterable[bytes]]
Mode = Union[int, str, None]


def _mode_text(mode: Mode) -> Optional[str]:
    if mode is None:
        return None
    if isinstance(mode, int):
        return "%04o" % mode
    return mode


class Files:
    """sandbox.files. Paths are absolute, or relative to the sandbox's workdir. `user` (a name,
    uid or uid:gid) is whom an operation runs as; default the sandbox's user."""

    def __init__(self, sandbox: "Sandbox"):
        self._sandbox = sandbox

    def _path(self, route: str = "") -> str:
        return "/v1/sandboxes/%s/files%s" % (segment(self._sandbox.id), route)

    @property
    def _t(self) -> Any:
        return self._sandbox._transport

    # ---------------------------------------------------------------- contents

    def read(self, path: str, *, user: Optional[str] = None) -> bytes:
        with self.read_stream(path, user=user) as stream:
            return stream.read()

    def read_text(self, path: str, *, encoding: str = "utf-8", user: Optional[str] = None) -> str:
        return self.read(path, user=user).decode(encoding)

    def read_stream(self, path: str, *, user: Optional[str] = None, chunk_size: int = 1 << 20) -> ByteStream:
        """The file's bytes as they arrive: iterate for chunks, read() like a file, or
        save_to(local path or file)."""
        reply = self._t.open("GET", self._path(), query={"path": path, "user": user})
        return ByteStream(reply, chunk_size)

    def download(self, path: str, dest: Union[PathLike, IO[bytes]], *, user: Optional[str] = None) -> int:
        """Copies a file of the sandbox to a local path or file object; returns its size."""
        return self.read_stream(path, user=user).save_to(dest)

    def write(self, path: str, data: Data, *, mode: Mode = None, append: bool = False,
              user: Optional[str] = None) -> Entry:
        """Writes (or with append, adds to) a file; parents are created. `data` may be bytes,
        text, a binary file object or an iterable of bytes chunks; it is streamed, so its size
        is bounded by the sandbox's disk only. `mode` is 0o644 or "0644" (default: an existing
        file keeps its mode, a new one gets 0644)."""
        body, length = upload_body(data.encode("utf-8") if isinstance(data, str) else data)
        query = {"path": path, "mode": _mode_text(mode), "append": True if append else None, "user": user}
        return Entry.from_json(self._t.json("PUT", self._path(), query=query, body=body, length=length,
                                            headers={"Content-Type": "application/octet-stream"}))

    def upload(self, local_path: PathLike, path: str, *, mode: Mode = None, user: Optional[str] = None) -> Entry:
        """Copies a local file into the sandbox (streamed)."""
        with open(local_path, "rb") as f:
            return self.write(path, f, mode=mode, user=user)

    # ---------------------------------------------------------------- metadata

    def list(self, path: str = ".", depth: int = 1, *, user: Optional[str] = None) -> EntryList:
        """The entries under a directory, down to `depth` levels (symlinks not followed)."""
        data = self._t.json("GET", self._path("/list"), query={"path": path, "depth": depth, "user": user})
        return EntryList([Entry.from_json(e) for e in data.get("entries", [])], bool(data.get("truncated")))

    def stat(self, path: str, *, user: Optional[str] = None) -> Entry:
        """Describes a path (a symlink itself, not what it points to)."""
        return Entry.from_json(self._t.json("GET", self._path("/stat"), query={"path": path, "user": user}))

    def exists(self, path: str, *, user: Optional[str] = None) -> bool:
        try:
            self.stat(path, user=user)
            return True
        except NotFoundError as e:
            if e.code == "sandbox_not_found":
                raise
            return False

    def mkdir(self, path: str, *, parents: bool = True, mode: Mode = None, user: Optional[str] = None) -> Entry:
        """Makes a directory; with parents (the default) missing parents are made and an existing
        directory is fine, without it an existing path is ConflictError."""
        body: Dict[str, Any] = {"path": path, "parents": parents}
        if mode is not None:
            body["mode"] = mode if isinstance(mode, int) else str(mode)
        return Entry.from_json(self._t.json("POST", self._path("/mkdir"), query={"user": user}, json_body=body))

    def move(self, src: str, dst: str, *, user: Optional[str] = None) -> Entry:
        """Renames inside the sandbox (replacing a file at dst)."""
        return Entry.from_json(self._t.json("POST", self._path("/move"), query={"user": user},
                                            json_body={"from": src, "to": dst}))

    def remove(self, path: str, *, recursive: bool = False, user: Optional[str] = None) -> None:
        """Deletes a file, symlink or empty directory; a full directory needs recursive=True."""
        self._t.call("DELETE", self._path(), query={"path": path, "recursive": True if recursive else None,
                                                    "user": user})

    delete = remove

    # ---------------------------------------------------------------- archives

    def upload_archive(self, data: Archive, path: str, *, content_type: str = "application/x-tar",
                       user: Optional[str] = None) -> ArchiveSummary:
        """Unpacks a tar (plain, gzip, bzip2 or xz; bytes, a file object or chunks, streamed)
        under `path`, which is created with its parents."""
        body, length = upload_body(data)
        return ArchiveSummary.from_json(self._t.json("PUT", self._path("/archive"), query={"path": path, "user": user},
                                                     body=body, length=length, headers={"Content-Type": content_type}))

    def upload_dir(self, local_dir: PathLike, path: str, *, user: Optional[str] = None) -> ArchiveSummary:
        """Copies a local directory's contents into `path` in the sandbox (symlinks as symlinks).
        The tar is built in a temporary file, so memory stays small for any size."""
        local = os.fspath(local_dir)
        if not os.path.isdir(local):
            raise BulkheadError("not a directory: %s" % local)
        with tempfile.TemporaryFile() as spool:
            with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for name in sorted(os.listdir(local)):
                    tar.add(os.path.join(local, name), arcname=name)
            spool.seek(0)
            return self.upload_archive(spool, path, user=user)

    def download_archive(self, path: str, *, user: Optional[str] = None) -> ByteStream:
        """A directory (or one file) as a pax tar stream, entries named relative to it."""
        return ByteStream(self._t.open("GET", self._path("/archive"), query={"path": path, "user": user}))

    def download_dir(self, path: str, local_dir: PathLike, *, user: Optional[str] = None) -> int:
        """Copies a directory of the sandbox into a local directory (made if missing); returns
        how many entries were unpacked. The archive is treated as hostile: files keep their
        permission bits but never setuid/setgid (sticky only on directories), and belong to
        whoever runs this. Entries that could reach outside local_dir (absolute names, "..",
        symlinks leading out, hard links to anything but a file unpacked before, paths through
        a symlink), devices and fifos are refused: skipped, then UnsafeArchiveError once the
        rest is unpacked."""
        with self.download_archive(path, user=user) as stream:
            return unpack_tar(stream, os.fspath(local_dir))

    # ---------------------------------------------------------------- watching

    def watch(self, path: str = ".", *, recursive: bool = True, user: Optional[str] = None) -> EventStream[FileEvent]:
        """Changes under `path` as FileEvents, from the moment this returns (the watch is set by
        then) until close(). Iterating blocks while nothing changes: close() from another thread,
        or set_timeout() on the stream, to stop waiting."""
        reply = self._t.open("GET", self._path("/watch"), query={"path": path, "recursive": recursive, "user": user},
                             timeout=None)
        return EventStream(reply, FileEvent.from_json)
