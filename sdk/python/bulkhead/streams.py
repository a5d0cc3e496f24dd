"""Streamed answers: ByteStream (file contents, tar archives, snapshot exports) and EventStream
(NDJSON events: exec, process output, file watch). Both read as the data arrives, are context
managers, and close their connection when left early."""

from __future__ import annotations

import os
from typing import IO, Any, Callable, Dict, Generic, Iterator, Optional, TypeVar, Union

from ._transport import StreamedReply, iter_ndjson
from .errors import BulkheadConnectionError

PathLike = Union[str, "os.PathLike[str]"]
T = TypeVar("T")
CHUNK = 1 << 20


class ByteStream:
    """A binary body being downloaded. Iterate it for chunks, read() it like a file (tarfile
    and shutil.copyfileobj take it), or save_to() a path or file. A body that ends before its
    Content-Length raises BulkheadConnectionError."""

    def __init__(self, reply: StreamedReply, chunk_size: int = CHUNK):
        self._reply = reply
        self.chunk_size = chunk_size
        self.headers: Dict[str, str] = reply.headers
        length = reply.headers.get("content-length")
        self.length: Optional[int] = int(length) if length is not None and length.isdigit() else None
        self.bytes_read = 0

    def _count(self, data: bytes, size: int) -> bytes:
        self.bytes_read += len(data)
        if not data and size != 0 and self.length is not None and self.bytes_read < self.length:
            raise BulkheadConnectionError("the body ended after %d of %d bytes" % (self.bytes_read, self.length))
        return data

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (everything left with -1); b"" at the end."""
        return self._count(self._reply.read(size), size)

    def read1(self, size: int = -1) -> bytes:
        return self._count(self._reply.read1(size if size and size > 0 else self.chunk_size), size)

    def readable(self) -> bool:
        return True

    def __iter__(self) -> Iterator[bytes]:
        while True:
            chunk = self.read1(self.chunk_size)
            if not chunk:
                return
            yield chunk

    def save_to(self, dest: Union[PathLike, IO[bytes]]) -> int:
        """Writes the rest of the body to a path (created or replaced) or a binary file object;
        returns the number of bytes written."""
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as f:
                return self._copy(f)
        return self._copy(dest)

    def _copy(self, out: IO[bytes]) -> int:
        total = 0
        with self:
            for chunk in self:
                out.write(chunk)
                total += len(chunk)
        return total

    def close(self) -> None:
        self._reply.close()

    def __enter__(self) -> "ByteStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class EventStream(Generic[T]):
    """Events as they arrive. Iterate it; close() (or leaving a `with` block, or breaking out
    of a for loop over it and dropping it) ends the stream. close() may also be called from
    another thread to end a blocked iteration. An error event raises StreamError."""

    def __init__(self, reply: StreamedReply, convert: Callable[[Dict[str, Any]], T]):
        self._reply = reply
        self._events = iter_ndjson(reply)
        self._convert = convert
        self._reading = False

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        self._reading = True
        try:
            return self._convert(next(self._events))
        finally:
            self._reading = False

    def set_timeout(self, timeout: Optional[float]) -> None:
        """How long one wait for the next event may take before BulkheadTimeoutError (None: no
        limit, the default for follow and watch streams). A timeout ends the stream."""
        self._reply.set_timeout(timeout)

    def close(self) -> None:
        self._reply.abort()
        # A thread blocked in __next__ sees the end and closes the connection itself.
        if not self._reading:
            self._reply.close()

    @property
    def closed(self) -> bool:
        return self._reply.closed

    def __enter__(self) -> "EventStream[T]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
