"""A small RFC 6455 WebSocket client (masked frames out, fragments joined, pings answered), and
Attachment: a terminal-like session with a background process over .../attach."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from ._transport import Query, Transport
from .errors import BulkheadConnectionError, BulkheadError, BulkheadTimeoutError, StreamError
from .models import ExitStatus

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
MAX_MESSAGE = 64 << 20  # a message larger than this from the server ends the session


def _mask(payload: bytes, key: bytes) -> bytes:
    """payload XOR the repeated 4-byte key, done on one big integer (fast for large frames)."""
    n = len(payload)
    if n == 0:
        return b""
    repeated = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big")


class WebSocket:
    """A client WebSocket on a connected socket whose handshake is done. recv() returns whole
    messages as (opcode, payload); a close from the server returns (OP_CLOSE, payload)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buffer = bytearray()
        self._fragments: List[bytes] = []
        self._fragment_op = 0
        self.closed = False
        self.close_code: Optional[int] = None

    @classmethod
    def connect(cls, transport: Transport, path: str, query: Optional[Query] = None,
                timeout: Optional[float] = None) -> "WebSocket":
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        sock, headers = transport.upgrade(path, query=query, headers={
            "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": key,
            "Sec-WebSocket-Version": "13"})
        accept = base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode("ascii")
        if headers.get("sec-websocket-accept") != accept:
            sock.close()
            raise BulkheadConnectionError("the server's WebSocket handshake did not match the key sent")
        sock.settimeout(timeout)
        return cls(sock)

    # ---------------------------------------------------------------- sending

    def send_frame(self, opcode: int, payload: bytes = b"") -> None:
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        key = os.urandom(4)
        try:
            self.sock.sendall(head + key + _mask(payload, key))
        except socket.timeout as e:
            raise BulkheadTimeoutError("could not send to the WebSocket within the timeout") from e
        except OSError as e:
            raise BulkheadConnectionError("the WebSocket broke: %s" % e) from e

    def send_binary(self, data: bytes) -> None:
        self.send_frame(OP_BINARY, bytes(data))

    def send_text(self, text: str) -> None:
        self.send_frame(OP_TEXT, text.encode("utf-8"))

    # ---------------------------------------------------------------- receiving

    def _parse_frame(self) -> Optional[Tuple[bool, int, bytes]]:
        """(fin, opcode, payload) of a whole frame at the buffer's start, consumed; else None."""
        buf = self._buffer
        if len(buf) < 2:
            return None
        fin, opcode = bool(buf[0] & 0x80), buf[0] & 0x0F
        masked, n = bool(buf[1] & 0x80), buf[1] & 0x7F
        at = 2
        if n == 126:
            if len(buf) < 4:
                return None
            n = struct.unpack_from("!H", buf, 2)[0]
            at = 4
        elif n == 127:
            if len(buf) < 10:
                return None
            n = struct.unpack_from("!Q", buf, 2)[0]
            at = 10
        if n > MAX_MESSAGE:
            raise BulkheadConnectionError("the server sent a WebSocket frame of %d bytes" % n)
        key = b""
        if masked:
            if len(buf) < at + 4:
                return None
            key = bytes(buf[at:at + 4])
            at += 4
        if len(buf) < at + n:
            return None
        payload = bytes(buf[at:at + n])
        del buf[:at + n]
        return fin, opcode, _mask(payload, key) if masked else payload

    def recv(self, timeout: Optional[float] = None) -> Tuple[int, bytes]:
        """The next message. With a timeout (seconds) BulkheadTimeoutError is raised if none
        arrived by then; the connection stays usable."""
        if self.closed:
            return OP_CLOSE, b""
        self.sock.settimeout(timeout)
        while True:
            frame = self._parse_frame()
            if frame is None:
                try:
                    data = self.sock.recv(1 << 16)
                except socket.timeout as e:
                    raise BulkheadTimeoutError("no WebSocket message within %ss" % timeout) from e
                except OSError as e:
                    self._drop()
                    raise BulkheadConnectionError("the WebSocket broke: %s" % e) from e
                if not data:
                    self._drop()
                    return OP_CLOSE, b""
                self._buffer += data
                continue
            fin, opcode, payload = frame
            if opcode == OP_PING:
                self.send_frame(OP_PONG, payload)
            elif opcode == OP_PONG:
                pass
            elif opcode == OP_CLOSE:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                try:
                    self.send_frame(OP_CLOSE, payload[:2])
                except BulkheadConnectionError:
                    pass
                self._drop()
                return OP_CLOSE, payload
            else:
                if opcode != OP_CONTINUATION:
                    self._fragment_op = opcode
                    self._fragments = []
                self._fragments.append(payload)
                if sum(len(f) for f in self._fragments) > MAX_MESSAGE:
                    raise BulkheadConnectionError("the server sent a WebSocket message over %d bytes" % MAX_MESSAGE)
                if fin:
                    message, self._fragments = b"".join(self._fragments), []
                    return self._fragment_op, message

    def _drop(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    def close(self, code: int = 1000, timeout: float = 5) -> None:
        """Sends a close frame, waits (briefly) for the server's, and closes the socket."""
        if self.closed:
            return
        try:
            self.send_frame(OP_CLOSE, struct.pack("!H", code))
            while self.recv(timeout)[0] != OP_CLOSE:
                pass
        except BulkheadError:
            pass
        self._drop()


class Attachment:
    """A live session with a background process (GET .../processes/{pid}/attach).

    send() writes to the process's stdin; recv() and iteration return its output (stdout and
    stderr together; on a pty it is all stdout) as bytes chunks, first what its ring still holds
    from the offset asked, then live. resize(), signal() and close_stdin() steer it. When the
    process exits, `exit_status` is set and the output ends. Errors the daemon reports for a
    control message (not a pty, bad signal, ...) collect in `errors` and the session goes on.
    Closing the attachment never affects the process. Pings from the daemon are answered while
    reading: a session nobody reads from for 300 s is closed by the daemon."""

    def __init__(self, ws: WebSocket):
        self._ws = ws
        self._pending = bytearray()  # output received but not yet returned (read_until)
        self.exit_status: Optional[ExitStatus] = None
        self.errors: List[StreamError] = []
        self.ended = False

    # ---------------------------------------------------------------- to the process

    def send(self, data: Union[bytes, str]) -> None:
        """Writes to the process's stdin (text is sent as UTF-8), in messages of 1 MiB at most."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        for start in range(0, len(raw), 1 << 20):
            self._ws.send_binary(raw[start:start + (1 << 20)])

    write = send

    def _control(self, message: Dict[str, Any]) -> None:
        self._ws.send_text(json.dumps(message))

    def resize(self, cols: int, rows: int) -> None:
        self._control({"type": "resize", "cols": cols, "rows": rows})

    def signal(self, signal: Union[str, int]) -> None:
        self._control({"type": "signal", "signal": signal})

    def close_stdin(self) -> None:
        self._control({"type": "stdin_close"})

    # ---------------------------------------------------------------- from the process

    def recv(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """The next output chunk, or None once the session ended (the process exited, or the
        server closed). With a timeout, BulkheadTimeoutError if nothing arrived by then."""
        if self._pending:
            data, self._pending = bytes(self._pending), bytearray()
            return data
        while not self.ended:
            opcode, payload = self._ws.recv(timeout)
            if opcode == OP_BINARY:
                return payload
            if opcode == OP_CLOSE:
                self.ended = True
                return None
            if opcode == OP_TEXT:
                self._on_text(payload)
        return None

    def _on_text(self, payload: bytes) -> None:
        try:
            message = json.loads(payload.decode("utf-8"))
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if message.get("type") == "exit":
            self.exit_status = ExitStatus.from_json(message)
        elif message.get("type") == "error":
            self.errors.append(StreamError(101, str(message.get("code") or "error"), str(message.get("message") or "")))

    def __iter__(self) -> Iterator[bytes]:
        while True:
            chunk = self.recv()
            if chunk is None:
                return
            yield chunk

    def read_until(self, pattern: Union[bytes, str], timeout: Optional[float] = None) -> bytes:
        """Reads output until `pattern` shows up; returns everything up to and including it (the
        rest stays for the next read). BulkheadTimeoutError if it did not show up within
        `timeout` seconds in all; BulkheadError if the session ended first."""
        want = pattern.encode("utf-8") if isinstance(pattern, str) else pattern
        seen = bytearray()
        deadline = None if timeout is None else _now() + timeout
        while True:
            at = seen.find(want)
            if at >= 0:
                end = at + len(want)
                self._pending = seen[end:] + self._pending
                return bytes(seen[:end])
            left = None if deadline is None else max(0.001, deadline - _now())
            try:
                chunk = self.recv(left)
            except BulkheadTimeoutError:
                self._pending = seen + self._pending
                raise BulkheadTimeoutError("%r did not show up within %ss; got %r" % (want, timeout, bytes(seen[-500:])))
            if chunk is None:
                raise BulkheadError("the session ended before %r showed up; got %r" % (want, bytes(seen[-500:])))
            seen += chunk

    def wait(self, timeout: Optional[float] = None) -> Optional[ExitStatus]:
        """Reads (and drops) output until the session ends; the process's exit status, or None
        if the server closed without one."""
        deadline = None if timeout is None else _now() + timeout
        while not self.ended:
            left = None if deadline is None else max(0.001, deadline - _now())
            self.recv(left)
        return self.exit_status

    def close(self) -> None:
        """Ends the session (a normal WebSocket close). The process goes on."""
        self.ended = True
        self._ws.close()

    def __enter__(self) -> "Attachment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _now() -> float:
    return time.monotonic()
