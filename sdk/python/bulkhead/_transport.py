"""HTTP to the daemon over its unix socket or TCP: where to connect, which key to send, a small
pool of keep-alive connections, JSON calls, streamed bodies both ways, and upgraded sockets
(WebSocket, raw TCP). Standard library only."""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import ssl
import stat
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union
from urllib.parse import quote, urlsplit

from .errors import (ApiError, BulkheadConnectionError, BulkheadError, BulkheadTimeoutError, StreamError,
                     error_from_response)

DEFAULT_STATE_DIR = "/var/lib/bulkhead"
DEFAULT_TIMEOUT = 120.0
SEND_BLOCK = 1 << 20  # bytes read from a file-like body per send

# A request body: nothing, bytes, a binary file-like object, or an iterable of bytes chunks.
Body = Union[None, bytes, bytearray, memoryview, Any]
Query = Mapping[str, Any]


class _Default:
    """The 'use the client's timeout' marker (None already means 'no limit')."""


DEFAULT = _Default()
Timeout = Union[float, None, _Default]


@dataclass(frozen=True)
class Address:
    """Where the daemon listens: a unix socket path, or an http(s) host, port and path prefix."""
    scheme: str  # "unix", "http" or "https"
    socket_path: str = ""
    host: str = ""
    port: int = 0
    prefix: str = ""  # path prefix of an http(s) URL, without the trailing slash

    @property
    def url(self) -> str:
        if self.scheme == "unix":
            return "unix://" + self.socket_path
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s://%s:%d%s" % (self.scheme, host, self.port, self.prefix)


def state_dir_from_env() -> str:
    return os.environ.get("BULKHEAD_STATE") or DEFAULT_STATE_DIR


def parse_url(url: str) -> Address:
    """http://host:port[/prefix], https://..., unix:///abs/path.sock, or a bare /abs/path.sock."""
    if url.startswith("/"):
        return Address("unix", socket_path=url)
    if url.startswith("unix://"):
        path = url[len("unix://"):]
        if not path.startswith("/"):
            raise BulkheadError("a unix socket URL needs an absolute path (unix:///path/to/bulkhead.sock): %r" % url)
        return Address("unix", socket_path=path)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BulkheadError("not a bulkhead URL: %r (use http://HOST:PORT, unix:///path/to.sock or /path/to.sock)"
                            % url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise BulkheadError("bad port in URL %r" % url) from None
    return Address(parts.scheme, host=parts.hostname, port=port, prefix=parts.path.rstrip("/"))


def encode_query(query: Optional[Query]) -> str:
    """?k=v&... with every value percent-encoded; None values are left out, bools are true/false."""
    if not query:
        return ""
    pairs = []
    for key, value in query.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        pairs.append("%s=%s" % (quote(str(key), safe=""), quote(str(value), safe="")))
    return "?" + "&".join(pairs) if pairs else ""


def segment(value: Any) -> str:
    """One path segment, percent-encoded (ids, names, pids and tags)."""
    return quote(str(value), safe="")


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout: Optional[float]):
        super().__init__("localhost", timeout=timeout, blocksize=SEND_BLOCK)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


@dataclass
class Reply:
    """A whole answer: status, headers (lower-case names) and body."""
    status: int
    headers: Dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None


class StreamedReply:
    """An answer whose body is read as it arrives. close() gives the connection back to the pool
    when the body was read to its end, else drops it; abort() may be called from another thread
    to end a blocked read."""

    def __init__(self, transport: "Transport", conn: http.client.HTTPConnection,
                 response: http.client.HTTPResponse):
        self._transport = transport
        self._conn: Optional[http.client.HTTPConnection] = conn
        self._response = response
        self.status = response.status
        self.headers = {k.lower(): v for k, v in response.getheaders()}
        self._aborted = False

    def _guard(self, call: Callable[..., bytes], *args: Any) -> bytes:
        if self._conn is None:
            return b""
        try:
            return call(*args)
        except socket.timeout as e:
            self.close()
            raise BulkheadTimeoutError("no data from the daemon within the timeout") from e
        except (OSError, http.client.HTTPException) as e:
            aborted = self._aborted
            self.close()
            if aborted:
                return b""
            raise BulkheadConnectionError("the stream from %s broke: %s" % (self._transport.address.url,
                                                                             _describe(e))) from e

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (all that is left with -1); b"" at the end."""
        data = self._guard(self._response.read, None if size is None or size < 0 else size)
        if not data and size != 0:
            self.close()
        return data

    def read1(self, size: int = -1) -> bytes:
        """What one read brings (at most `size` bytes); b"" at the end."""
        data = self._guard(self._response.read1, size)
        if not data and size != 0:
            self.close()
        return data

    def readline(self) -> bytes:
        data = self._guard(self._response.readline)
        if not data:
            self.close()
        return data

    def set_timeout(self, timeout: Optional[float]) -> None:
        if self._conn is not None and self._conn.sock is not None:
            self._conn.sock.settimeout(timeout)

    @property
    def closed(self) -> bool:
        return self._conn is None

    def abort(self) -> None:
        """Ends the stream at once; a read blocked in another thread returns b""."""
        self._aborted = True
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._response.isclosed() and not self._response.will_close and not self._aborted:
            self._transport.give_back(conn)
        else:
            self._response.close()
            conn.close()


def _describe(error: BaseException) -> str:
    text = str(error)
    return "%s: %s" % (type(error).__name__, text) if text else type(error).__name__


def _is_replayable(body: Body) -> bool:
    return body is None or isinstance(body, (bytes, bytearray, memoryview))


class Transport:
    """Requests to one daemon. Thread-safe: each request takes a connection of its own (an idle
    keep-alive one when there is one)."""

    MAX_IDLE = 8

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT, state_dir: Optional[str] = None):
        self.state_dir = state_dir or state_dir_from_env()
        url = url or os.environ.get("BULKHEAD_URL") or None
        self.address = parse_url(url) if url else Address(
            "unix", socket_path=os.path.join(self.state_dir, "bulkhead.sock"))
        self.timeout = timeout
        self.key_file = os.path.join(self.state_dir, "api-key")
        if api_key:
            self._key: Optional[str] = api_key
            self.key_source = "the api_key argument"
        elif os.environ.get("BULKHEAD_API_KEY"):
            self._key = os.environ["BULKHEAD_API_KEY"]
            self.key_source = "BULKHEAD_API_KEY"
        else:
            self._key = None  # read from the key file at the first call that needs it
            self.key_source = self.key_file
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- key

    def api_key(self) -> Optional[str]:
        if self._key is None:
            try:
                with open(self.key_file, encoding="utf-8") as f:
                    self._key = f.read().strip() or None
            except OSError:
                return None
        return self._key

    def auth_hint(self) -> str:
        if self.api_key() is None:
            return ("no API key was sent: pass api_key=, set BULKHEAD_API_KEY, or make %s readable "
                    "(the daemon writes it at its first start)" % self.key_file)
        return "the key sent came from %s" % self.key_source

    def headers(self, extra: Optional[Mapping[str, str]] = None, auth: bool = True) -> Dict[str, str]:
        headers: Dict[str, str] = {}
        key = self.api_key() if auth else None
        if key:
            headers["Authorization"] = "Bearer " + key
        if extra:
            headers.update(extra)
        return headers

    # ---------------------------------------------------------------- connections

    def _effective(self, timeout: Timeout) -> Optional[float]:
        return self.timeout if isinstance(timeout, _Default) else timeout

    def _connect(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        a = self.address
        if a.scheme == "unix":
            return _UnixConnection(a.socket_path, timeout)
        if a.scheme == "https":
            return http.client.HTTPSConnection(a.host, a.port, timeout=timeout, blocksize=SEND_BLOCK,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(a.host, a.port, timeout=timeout, blocksize=SEND_BLOCK)

    def _take(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        """A connection and whether it was used before."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(timeout), False
            # An idle connection the daemon closed meanwhile reads as ready (EOF): drop it.
            sock = conn.sock
            if sock is None or select.select([sock], [], [], 0)[0]:
                conn.close()
                continue
            conn.timeout = timeout
            sock.settimeout(timeout)
            return conn, True

    def give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.MAX_IDLE and conn.sock is not None:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # ---------------------------------------------------------------- requests

    def open(self, method: str, path: str, *, query: Optional[Query] = None, body: Body = None,
             json_body: Any = None, headers: Optional[Mapping[str, str]] = None, length: Optional[int] = None,
             timeout: Timeout = DEFAULT, auth: bool = True, raise_errors: bool = True) -> StreamedReply:
        """Sends a request and returns once the answer's head arrived; the body is left to read.
        Error statuses raise (the error body is read first) unless raise_errors is false."""
        target = self.address.prefix + path + encode_query(query)
        all_headers = self.headers(headers, auth)
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            all_headers.setdefault("Content-Type", "application/json")
        chunked = False
        if isinstance(body, (bytes, bytearray, memoryview)):
            all_headers["Content-Length"] = str(len(body))
        elif body is not None:
            if length is not None:
                all_headers["Content-Length"] = str(length)
            elif not hasattr(body, "read"):
                chunked = True
            else:
                body = _file_chunks(body)
                chunked = True
        effective = self._effective(timeout)
        attempts = 2 if _is_replayable(body) else 1
        while True:
            attempts -= 1
            conn, reused = self._take(effective)
            try:
                response = self._exchange(conn, method, target, body, all_headers, chunked)
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                # A keep-alive connection the daemon closed just as it was reused: try once more.
                if reused and attempts > 0:
                    continue
                raise self._connection_error(e) from e
            except ApiError:
                raise
            except socket.timeout as e:
                conn.close()
                raise BulkheadTimeoutError("no answer from the daemon at %s within %ss"
                                           % (self.address.url, effective)) from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise self._connection_error(e) from e
        reply = StreamedReply(self, conn, response)
        if response.status >= 400 and raise_errors:
            try:
                data = reply.read()
            except BulkheadConnectionError:
                data = b""
            reply.close()
            raise error_from_response(response.status, data,
                                      self.auth_hint() if response.status == 401 else None)
        return reply

    def _exchange(self, conn: http.client.HTTPConnection, method: str, target: str, body: Body,
                  headers: Dict[str, str], chunked: bool) -> http.client.HTTPResponse:
        try:
            conn.request(method, target, body=body, headers=headers, encode_chunked=chunked)
        except (BrokenPipeError, ConnectionResetError) as e:
            # The daemon may have refused the upload before reading all of it: its answer
            # (413, 507, 404, ...) is what the caller needs, if it can still be read.
            if body is None or _is_replayable(body) and len(body) < 65536:
                raise
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(5)
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException):
                raise e from None
            conn.close()
            if response.status >= 400:
                raise error_from_response(response.status, data,
                                          self.auth_hint() if response.status == 401 else None) from None
            raise
        return conn.getresponse()

    def _connection_error(self, error: BaseException) -> BulkheadConnectionError:
        a = self.address
        where = "the bulkhead daemon at %s" % a.url
        if isinstance(error, FileNotFoundError) and a.scheme == "unix":
            return BulkheadConnectionError("cannot reach %s: no socket there (is the daemon running? "
                                           "set BULKHEAD_URL or BULKHEAD_STATE otherwise)" % where)
        if isinstance(error, PermissionError) and a.scheme == "unix":
            return BulkheadConnectionError("permission denied connecting to %s (run as the daemon's user, "
                                           "or use an http:// URL)" % where)
        if isinstance(error, ConnectionRefusedError):
            return BulkheadConnectionError("cannot reach %s: connection refused (is the daemon running?)" % where)
        return BulkheadConnectionError("request to %s failed: %s" % (where, _describe(error)))

    def call(self, method: str, path: str, *, query: Optional[Query] = None, json_body: Any = None,
             body: Body = None, headers: Optional[Mapping[str, str]] = None, length: Optional[int] = None,
             timeout: Timeout = DEFAULT, auth: bool = True) -> Reply:
        """A whole request and answer; error statuses raise."""
        reply = self.open(method, path, query=query, json_body=json_body, body=body, headers=headers,
                          length=length, timeout=timeout, auth=auth)
        try:
            data = reply.read()
        finally:
            reply.close()
        return Reply(reply.status, reply.headers, data)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.call(method, path, **kwargs).json()

    # ---------------------------------------------------------------- upgrades

    def upgrade(self, path: str, *, query: Optional[Query] = None, headers: Mapping[str, str],
                timeout: Timeout = DEFAULT) -> Tuple[socket.socket, Dict[str, str]]:
        """Sends an upgrade request on a new socket; returns the socket (positioned right after
        the 101 answer's head) and that head's headers. Another answer raises as an error."""
        effective = self._effective(timeout)
        a = self.address
        try:
            if a.scheme == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(effective)
                try:
                    sock.connect(a.socket_path)
                except BaseException:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection((a.host, a.port), timeout=effective)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if a.scheme == "https":
                    sock = ssl.create_default_context().wrap_socket(sock, server_hostname=a.host)
        except socket.timeout as e:
            raise BulkheadTimeoutError("no connection to %s within %ss" % (a.url, effective)) from e
        except OSError as e:
            raise self._connection_error(e) from e
        host = "localhost" if a.scheme == "unix" else a.host
        lines = ["GET %s HTTP/1.1" % (a.prefix + path + encode_query(query)), "Host: %s" % host]
        lines += ["%s: %s" % (k, v) for k, v in self.headers(headers).items()]
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            status, reply_headers = _read_head(sock)
            if status != 101:
                body = _read_body(sock, reply_headers)
                sock.close()
                raise error_from_response(status, body, self.auth_hint() if status == 401 else None)
        except socket.timeout as e:
            sock.close()
            raise BulkheadTimeoutError("no upgrade answer from %s within %ss" % (a.url, effective)) from e
        except (OSError, ValueError) as e:
            sock.close()
            raise self._connection_error(e) from e
        return sock, reply_headers


def upload_body(data: Any) -> Tuple[Body, Optional[int]]:
    """A request body and its length when known up front: bytes as they are; a regular file
    with what is left of it (so it goes with Content-Length); any other file object or
    iterable of bytes chunks as it comes (chunked)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), None
    if hasattr(data, "read"):
        try:
            info = os.fstat(data.fileno())
            if stat.S_ISREG(info.st_mode):
                return data, max(0, info.st_size - data.tell())
        except (AttributeError, OSError, ValueError):
            pass
        return data, None
    return iter(data), None


def _file_chunks(fileobj: Any) -> Iterator[bytes]:
    while True:
        piece = fileobj.read(SEND_BLOCK)
        if not piece:
            return
        yield piece


def _read_head(sock: socket.socket) -> Tuple[int, Dict[str, str]]:
    """An HTTP answer's status and headers, read byte by byte so nothing after them is consumed
    (the bytes after a 101 belong to the upgraded protocol)."""
    data = bytearray()
    while not data.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        if not byte:
            raise ConnectionResetError("connection closed before the answer's head ended")
        data += byte
        if len(data) > 65536:
            raise ValueError("answer head too long")
    lines = data.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return status, headers


def _read_body(sock: socket.socket, headers: Mapping[str, str]) -> bytes:
    """The body of a (short, error) answer: Content-Length bytes, else what comes until EOF."""
    length = int(headers.get("content-length", "-1"))
    data = bytearray()
    while length < 0 or len(data) < length:
        piece = sock.recv(65536)
        if not piece:
            break
        data += piece
    return bytes(data if length < 0 else data[:length])


def iter_ndjson(reply: StreamedReply) -> Iterator[Dict[str, Any]]:
    """The JSON objects of an NDJSON body, each as soon as its line arrived. An `error` event
    raises StreamError."""
    try:
        while True:
            line = reply.readline()
            if not line:
                return
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line.decode("utf-8"))
            except ValueError as e:
                raise BulkheadError("the daemon sent a line that is not JSON: %r" % line[:200]) from e
            if isinstance(event, dict) and event.get("type") == "error":
                raise StreamError(reply.status, str(event.get("code") or "stream_error"),
                                  str(event.get("message") or "the stream failed"))
            yield event
    finally:
        reply.close()

