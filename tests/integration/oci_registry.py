"""A registry for `image pull` tests: the OCI distribution API's pull and push sides on
127.0.0.1, started and stopped by the test (`with OciRegistry(...) as registry:`).

It records every request (registry.requests()) and can be told to misbehave per blob or
manifest (registry.fault()): wrong bytes, truncated or dropped bodies, slowness, lying lengths,
error statuses, redirects to "storage". Auth: none, Basic, or the Bearer token dance with a
/token endpoint on the same server (or on another OciRegistry, for tests about credentials
going where they should). Plain HTTP by default; HTTPS with a cert from make_tls_cert().

Standard library only. It never resolves or contacts any name: it binds 127.0.0.1 and puts
only that address in the URLs it hands out."""

import base64
import http.server
import json
import re
import secrets
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

from oci_images import DOCKER_MANIFEST_LIST, OCI_INDEX, Image, Index, digest_of

SERVICE = "registry.test"
LOOPBACK = "127.0.0.1"

# The distribution spec's grammar for repository names and tags.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPO_NAME = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

# (kind, pattern of the path): the first that matches the whole path wins.
ROUTES = [
    ("base", re.compile(r"/v2/?")),
    ("token", re.compile(r"/token")),
    ("storage", re.compile(r"/storage/(?P<digest>[^/]+)")),
    ("upload", re.compile(r"/v2/(?P<name>.+)/blobs/uploads/(?P<upload>[^/]*)")),
    ("blob", re.compile(r"/v2/(?P<name>.+)/blobs/(?P<digest>[^/]+)")),
    ("manifest", re.compile(r"/v2/(?P<name>.+)/manifests/(?P<reference>[^/]+)")),
    ("tags", re.compile(r"/v2/(?P<name>.+)/tags/list")),
]

INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)


@dataclass
class Fault:
    """How responses for one blob or manifest go wrong. Set with OciRegistry.fault()."""
    wrong_bytes: bool | bytes = False  # True: the content with its last byte changed (same length)
    truncate_at: int | None = None     # declare the full length, then close after N body bytes
    drop_after: int | None = None      # the same, the first time only (a resumed GET then succeeds)
    rate: int | None = None            # body bytes per second
    stall: float = 0.0                 # seconds of silence after stall_at body bytes
    stall_at: int = 0                  # 0: between the headers and the body
    huge_length: int | None = None     # declare this Content-Length and send zeros (as many)
    extra_bytes: int = 0               # the content, then this many zeros (Content-Length counts them)
    ignore_range: bool = False         # answer 200 with the whole blob to a Range request
    status: int | None = None          # answer this status (e.g. 500, 429) with an error body
    headers: dict = field(default_factory=dict)  # added to a `status` answer (e.g. Retry-After)
    redirect: bool | str = False       # blobs: 307 to /storage/... (no auth there), or to this URL
    times: int | None = None           # how many answers it spoils; None: every one


@dataclass
class LoggedRequest:
    method: str
    path: str
    query: str
    kind: str = "unknown"  # base token storage upload blob manifest tags unknown
    name: str = ""         # the repository
    target: str = ""       # the digest or tag asked for, or the upload id
    range: str | None = None
    auth: str | None = None  # the Authorization scheme sent ("Basic", "Bearer"), never the secret
    user: str | None = None  # the Basic user name, if one was sent
    accept: str | None = None
    content_type: str | None = None
    status: int | None = None  # None while it is being answered
    sent: int = 0       # body bytes handed to the socket (a client that went away may not have them)
    received: int = 0   # request body bytes read
    peer_port: int = 0  # the client's port: the same on every request of one kept-alive connection
    time: float = 0.0   # time.monotonic() at arrival


@dataclass
class _Token:
    access: dict  # repository -> set of actions
    expires: float
    user: str | None


@dataclass
class _Repo:
    blobs: set = field(default_factory=set)        # digests linked into this repository
    manifests: dict = field(default_factory=dict)  # digest -> (media type, bytes)
    tags: dict = field(default_factory=dict)       # tag -> digest


class _ClientGone(Exception):
    """The client closed the connection, or the registry is closing."""


def make_tls_cert(directory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (and CN registry.test): (cert, key) paths.
    The cert is also the CA file a client should trust."""
    directory = Path(directory)
    cert, key = directory / "registry-cert.pem", directory / "registry-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={SERVICE}",
                    "-addext", f"subjectAltName=IP:{LOOPBACK},DNS:{SERVICE}"],
                   check=True, capture_output=True)
    return cert, key


class OciRegistry:
    def __init__(self, port: int = 0, auth: str = "none", users: dict | None = None, readonly=(),
                 public=(), service: str = SERVICE, token_lifetime: float = 300,
                 token_server: "OciRegistry | None" = None, tls: tuple | None = None):
        """auth: "none" | "basic" | "token". users: {name: password}; readonly: users who may
        only pull; public: repositories anyone may pull. token_lifetime: seconds a token is
        accepted (expires_in says the same). token_server: another OciRegistry whose /token
        issues the tokens this one accepts (its realm is named in the challenge). tls: (cert,
        key) from make_tls_cert() to speak HTTPS."""
        if auth not in ("none", "basic", "token"):
            raise ValueError(f"auth must be none, basic or token, not {auth!r}")
        self.auth = auth
        self.users = dict(users or {})
        self.readonly = set(readonly)
        self.public = set(public)
        self.service = service
        self.token_lifetime = token_lifetime
        self.token_server = token_server or self
        self.errors: list[str] = []  # tracebacks of handler failures: a test asserts there are none

        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._blobs: dict[str, bytes] = {}
        self._repos: dict[str, _Repo] = {}
        self._uploads: dict[str, tuple[str, bytearray]] = {}  # id -> (repository, bytes so far)
        self._tokens: dict[str, _Token] = {}
        self.faults: dict[str, Fault] = {}  # by blob digest, manifest digest or tag; see fault()
        self._log: list[LoggedRequest] = []
        self._storage_key = secrets.token_hex(8)  # the "signature" a storage redirect carries

        self._server = _Server((LOOPBACK, port), self)
        self.scheme = "http"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            # The handshake then happens in the connection's own thread, not in accept().
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True,
                                                      do_handshake_on_connect=False)
            self.scheme = "https"
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"oci-registry-{self.port}", daemon=True)
        self._thread.start()

    # --- lifetime ---

    def close(self):
        """Stops serving, cuts every open connection and waits for all handler threads."""
        if self._thread is None:
            return
        self._closing.set()  # ends stalls and slow bodies at once
        self._server.shutdown()
        self._thread.join()
        self._server.cut_connections()  # kept-alive connections would otherwise wait for a request
        self._server.server_close()  # joins the handler threads
        self._thread = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def host(self) -> str:
        """host:port, as an image reference names the registry."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}"

    # --- contents, without HTTP ---

    def put_blob(self, repo: str, data: bytes) -> str:
        digest = digest_of(data)
        with self._lock:
            self._blobs[digest] = data
            self._repos.setdefault(repo, _Repo()).blobs.add(digest)
        return digest

    def put_manifest(self, repo: str, reference: str, media_type: str, body: bytes) -> str:
        """Stores a manifest as is (nothing checked), tagged `reference` unless that is its digest."""
        digest = digest_of(body)
        with self._lock:
            r = self._repos.setdefault(repo, _Repo())
            r.manifests[digest] = (media_type, body)
            if reference != digest:
                r.tags[reference] = digest
        return digest

    def put_image(self, repo: str, tag: str, image: Image | Index) -> str:
        """Stores an image or index with all its blobs and child manifests under `tag`."""
        for data in image.blobs.values():
            self.put_blob(repo, data)
        for digest, (media_type, body) in image.manifests.items():
            self.put_manifest(repo, digest, media_type, body)
        return self.put_manifest(repo, tag, image.media_type, image.manifest)

    def blob(self, digest: str) -> bytes | None:
        with self._lock:
            return self._blobs.get(digest)

    def has_blob(self, repo: str, digest: str) -> bool:
        with self._lock:
            return repo in self._repos and digest in self._repos[repo].blobs

    def manifest(self, repo: str, reference: str) -> tuple[str, bytes] | None:
        """(media type, bytes) of a tag or digest, or None."""
        with self._lock:
            r = self._repos.get(repo)
            if r is None:
                return None
            return r.manifests.get(r.tags.get(reference, reference))

    def tags(self, repo: str) -> list[str]:
        with self._lock:
            return sorted(self._repos[repo].tags) if repo in self._repos else []

    # --- faults ---

    def fault(self, target: str, **fields) -> Fault:
        """Makes answers for `target` (a blob digest, a manifest digest or a tag) go wrong."""
        f = Fault(**fields)
        with self._lock:
            self.faults[target] = f
        return f

    def clear_faults(self):
        with self._lock:
            self.faults.clear()

    def _fault_for(self, *keys) -> Fault | None:
        with self._lock:
            for key in keys:
                f = self.faults.get(key)
                if f is not None and (f.times is None or f.times > 0):
                    return f
        return None

    def _spend(self, f: Fault | None):
        if f is not None and f.times is not None:
            with self._lock:
                f.times -= 1

    def _take_drop(self, f: Fault) -> int | None:
        with self._lock:
            n, f.drop_after = f.drop_after, None
            return n

    # --- auth ---

    def expire_tokens(self):
        """Makes every token issued so far expire now (to test re-authentication)."""
        with self.token_server._lock:
            for t in self.token_server._tokens.values():
                t.expires = 0.0

    def allowed_actions(self, user: str | None, repo: str) -> set:
        if user is not None:
            return {"pull"} if user in self.readonly else {"pull", "push"}
        return {"pull"} if repo in self.public else set()

    def basic_user(self, header: str):
        """The user of a Basic Authorization header: None if there is none, False if wrong."""
        if not header.lower().startswith("basic "):
            return None
        try:
            user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        return user if user in self.users and secrets.compare_digest(self.users[user], password) else False

    def issue_token(self, user: str | None, scopes: list[str]) -> str:
        access: dict[str, set] = {}
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            repo, _, actions = rest.rpartition(":")
            if kind != "repository" or not repo:
                continue
            granted = set(actions.split(",")) & self.allowed_actions(user, repo)
            access.setdefault(repo, set()).update(granted)
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._tokens[token] = _Token(access, time.monotonic() + self.token_lifetime, user)
        return token

    def token_grant(self, token: str) -> _Token | None:
        """What a bearer token grants, or None if it is unknown or expired."""
        with self.token_server._lock:
            t = self.token_server._tokens.get(token)
        return t if t is not None and time.monotonic() < t.expires else None

    # --- the request log ---

    def requests(self, kind: str | None = None, target: str | None = None, method: str | None = None,
                 since: int = 0) -> list[LoggedRequest]:
        """The requests received so far, in order of arrival (from index `since`, see mark()),
        optionally filtered. One still being answered has status None."""
        with self._lock:
            found = self._log[since:]
        return [r for r in found if (kind is None or r.kind == kind) and (target is None or r.target == target)
                and (method is None or r.method == method)]

    def mark(self) -> int:
        with self._lock:
            return len(self._log)

    def blob_downloads(self, digest: str) -> list[LoggedRequest]:
        """GETs that sent bytes of this blob (from the registry or from storage after a redirect)."""
        with self._lock:
            found = list(self._log)
        return [r for r in found if r.target == digest and r.method == "GET"
                and r.kind in ("blob", "storage") and r.status in (200, 206)]

    def _record(self, entry: LoggedRequest):
        with self._lock:
            self._log.append(entry)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = False  # so server_close() joins every handler thread
    block_on_close = True

    def __init__(self, address, registry: OciRegistry):
        self.registry = registry
        self._connections: set = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self):
        # HTTPServer's own server_bind looks the address up (getfqdn): no lookups, ever.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = LOOPBACK, self.server_address[1]

    def process_request(self, request, client_address):
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self):
        with self._connections_lock:
            for sock in self._connections:
                try:
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass

    def handle_error(self, request, client_address):
        # Sockets closed or reset by clients, failed TLS handshakes: the clients' business.
        # Anything else is a bug of this module, for the test to see.
        if not isinstance(sys.exc_info()[1], OSError):
            self.registry.errors.append(traceback.format_exc())


def _error_body(code: str, message: str, detail=None) -> bytes:
    error = {"code": code, "message": message}
    if detail is not None:
        error["detail"] = detail
    return json.dumps({"errors": [error]}).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every answer carries a Content-Length
    server_version = "oci-test-registry/1"
    timeout = 60  # an idle kept-alive connection is closed after this

    def setup(self):
        super().setup()
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()

    def log_message(self, format, *args):
        pass  # the request log is registry.requests()

    def do_GET(self):
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    # --- plumbing ---

    def _dispatch(self):
        self.registry: OciRegistry = self.server.registry
        url = urlsplit(self.path)
        self.query = parse_qs(url.query, keep_blank_values=True)
        authorization = self.headers.get("Authorization", "")
        self.entry = LoggedRequest(
            method=self.command, path=url.path, query=url.query, range=self.headers.get("Range"),
            auth=authorization.split(" ", 1)[0] or None, accept=self.headers.get("Accept"),
            content_type=self.headers.get("Content-Type"), peer_port=self.client_address[1], time=time.monotonic())
        if self.entry.auth and self.entry.auth.lower() == "basic":
            try:
                self.entry.user = base64.b64decode(authorization[6:].strip()).decode().partition(":")[0]
            except (ValueError, UnicodeDecodeError):
                pass
        self.registry._record(self.entry)  # at arrival: the log is in the order requests came
        try:
            self.body = self._read_body()
            self.entry.received = len(self.body)
            for kind, pattern in ROUTES:
                match = pattern.fullmatch(url.path)
                if match:
                    self.entry.kind = kind
                    getattr(self, f"_route_{kind}")(**match.groupdict())
                    break
            else:
                self._error(404, "UNSUPPORTED", "no such endpoint")
        except _ClientGone:
            self.close_connection = True

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65536) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(1024)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _write(self, data: bytes):
        # Counted first: a client may have read it (and a test looked at the log) before write() returns.
        self.entry.sent += len(data)
        try:
            self.wfile.write(data)
        except OSError as e:
            raise _ClientGone() from e

    def _pause(self, seconds: float):
        if self.registry._closing.wait(seconds):
            raise _ClientGone()

    def _respond(self, status: int, body: bytes = b"", headers: dict | None = None, fault: Fault | None = None):
        """Sends an answer with a Content-Length, spoiling the body as `fault` says."""
        length = fault.huge_length if fault and fault.huge_length is not None else len(body)
        self.entry.status = status  # before it goes out, as `sent` is
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(length))
            self.end_headers()
        except OSError as e:
            raise _ClientGone() from e
        if self.command == "HEAD" or length == 0:
            return
        if fault is None:
            self._write(body)
            return

        cut = fault.truncate_at
        dropped = self.registry._take_drop(fault)
        if dropped is not None:
            cut = dropped if cut is None else min(cut, dropped)
        if fault.huge_length is not None:
            body = None  # zeros, made as they go out
        end = length if cut is None else min(cut, length)
        piece = max(1, fault.rate // 20) if fault.rate else 1 << 16
        stall_at = fault.stall_at if fault.stall else None
        offset = 0
        while offset < end:
            if offset == stall_at:
                self._pause(fault.stall)
                stall_at = None
            limit = end if stall_at is None else min(end, stall_at)
            n = min(piece, limit - offset)
            if fault.rate:
                self._pause(n / fault.rate)  # before the piece: the last byte comes at length/rate
            self._write(bytes(n) if body is None else body[offset:offset + n])
            offset += n
        if end < length:
            self.close_connection = True  # the client sees the connection end before the length

    def _error(self, status: int, code: str, message: str, headers: dict | None = None, detail=None):
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        self._respond(status, _error_body(code, message, detail), all_headers)

    def _fault_status(self, f: Fault | None) -> bool:
        """Answers the fault's status, if it has one; True if it did."""
        if f is None or f.status is None:
            return False
        self.registry._spend(f)
        code = {401: "UNAUTHORIZED", 403: "DENIED", 429: "TOOMANYREQUESTS"}.get(f.status, "UNKNOWN")
        self._error(f.status, code, f"fault: status {f.status}", f.headers)
        return True

    # --- auth ---

    def _authorized(self, name: str | None, actions: tuple) -> bool:
        """Checks the request's credentials for `actions` on repository `name` (None: /v2/).
        Answers 401/403 itself and returns False when they fall short."""
        reg = self.registry
        if reg.auth == "none":
            return True
        header = self.headers.get("Authorization", "")
        if reg.auth == "basic":
            user = reg.basic_user(header)
            challenge = {"WWW-Authenticate": f'Basic realm="{reg.service}"'}
            if user is False or (user is None and (name is None or not set(actions) <= reg.allowed_actions(None, name))):
                self._error(401, "UNAUTHORIZED", "authentication required", challenge)
                return False
            if name is not None and not set(actions) <= reg.allowed_actions(user, name):
                self._error(403, "DENIED", "requested access to the resource is denied")
                return False
            return True

        issuer = reg.token_server
        challenge = f'Bearer realm="{issuer.url}/token",service="{issuer.service}"'
        if name is not None:
            challenge += f',scope="repository:{name}:{",".join(actions)}"'
        token = header[7:].strip() if header.lower().startswith("bearer ") else None
        grant = reg.token_grant(token) if token else None
        if grant is None:
            if token:
                challenge += ',error="invalid_token"'
            self._error(401, "UNAUTHORIZED", "authentication required", {"WWW-Authenticate": challenge})
            return False
        if name is not None and not set(actions) <= grant.access.get(name, set()):
            challenge += ',error="insufficient_scope"'
            self._error(401, "UNAUTHORIZED", "insufficient scope", {"WWW-Authenticate": challenge})
            return False
        return True

    def _may_pull(self, name: str) -> bool:
        """Whether the request's credentials could pull `name` (for cross-repository mounts)."""
        reg = self.registry
        header = self.headers.get("Authorization", "")
        if reg.auth == "none":
            return True
        if reg.auth == "basic":
            user = reg.basic_user(header)
            return user is not False and "pull" in reg.allowed_actions(user, name)
        grant = reg.token_grant(header[7:].strip()) if header.lower().startswith("bearer ") else None
        return grant is not None and "pull" in grant.access.get(name, set())

    def _repository(self, name: str, actions: tuple) -> bool:
        """Validates the name and the credentials; True when the request may go on."""
        self.entry.name = name
        if not REPO_NAME.fullmatch(name):
            self._error(400, "NAME_INVALID", "invalid repository name")
            return False
        return self._authorized(name, actions)

    # --- routes ---

    def _route_base(self):
        if self.command not in ("GET", "HEAD"):
            return self._error(405, "UNSUPPORTED", "method not allowed")
        if self._authorized(None, ()):
            self._respond(200, b"{}", {"Content-Type": "application/json",
                                       "Docker-Distribution-API-Version": "registry/2.0"})

    def _route_token(self):
        reg = self.registry
        if reg.auth != "token" or self.command != "GET":
            return self._error(404, "UNSUPPORTED", "no token service here")
        if self.query.get("service", [""])[0] != reg.service:
            return self._error(400, "DENIED", "unknown service")
        user = reg.basic_user(self.headers.get("Authorization", ""))
        if user is False:
            return self._error(401, "UNAUTHORIZED", "wrong user name or password",
                               {"WWW-Authenticate": f'Basic realm="{reg.service}"'})
        scopes = [s for value in self.query.get("scope", []) for s in value.split(" ") if s]
        self.entry.target = " ".join(scopes)
        token = reg.issue_token(user, scopes)
        body = {"token": token, "access_token": token, "expires_in": int(reg.token_lifetime),
                "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self._respond(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _route_manifest(self, name: str, reference: str):
        self.entry.target = reference
        if self.command == "PUT":
            return self._put_manifest(name, reference)
        if self.command not in ("GET", "HEAD"):
            return self._error(405, "UNSUPPORTED", "method not allowed")
        if not self._repository(name, ("pull",)):
            return
        if not (DIGEST.fullmatch(reference) or TAG.fullmatch(reference)):
            return self._error(400, "MANIFEST_INVALID", "invalid reference")
        with self.registry._lock:
            repo = self.registry._repos.get(name)
            found = repo and repo.manifests.get(repo.tags.get(reference, reference))
        if repo is None:
            return self._error(404, "NAME_UNKNOWN", "repository name not known to registry", detail={"name": name})
        if not found:
            return self._error(404, "MANIFEST_UNKNOWN", "manifest unknown", detail={"reference": reference})
        media_type, body = found
        digest = digest_of(body)
        fault = self.registry._fault_for(reference, digest)
        if self._fault_status(fault):
            return
        self.registry._spend(fault)
        # No content negotiation: what is stored is served, an index whatever Accept says.
        self._respond(200, _spoiled(body, fault), {"Content-Type": media_type, "Docker-Content-Digest": digest},
                      fault)

    def _put_manifest(self, name: str, reference: str):
        if not self._repository(name, ("pull", "push")):
            return
        digest = digest_of(self.body)
        media_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if DIGEST.fullmatch(reference):
            if reference != digest:
                return self._error(400, "DIGEST_INVALID", "manifest digest does not match its content")
        elif not TAG.fullmatch(reference):
            return self._error(400, "TAG_INVALID", "invalid tag")
        try:
            manifest = json.loads(self.body)
        except ValueError:
            return self._error(400, "MANIFEST_INVALID", "manifest is not JSON")
        if not media_type or not isinstance(manifest, dict):
            return self._error(400, "MANIFEST_INVALID", "manifest without a media type")
        with self.registry._lock:
            repo = self.registry._repos.setdefault(name, _Repo())
            if media_type in INDEX_TYPES:
                referenced, known = manifest.get("manifests") or [], repo.manifests
            else:
                referenced, known = [manifest.get("config"), *(manifest.get("layers") or [])], repo.blobs
            missing = [d.get("digest") if isinstance(d, dict) else d for d in referenced
                       if not isinstance(d, dict) or d.get("digest") not in known]
            if not missing:
                repo.manifests[digest] = (media_type, self.body)
                if reference != digest:
                    repo.tags[reference] = digest
        if missing:
            return self._error(400, "MANIFEST_BLOB_UNKNOWN", "manifest references unknown content", detail=missing)
        self._respond(201, b"", {"Location": f"/v2/{name}/manifests/{digest}", "Docker-Content-Digest": digest})

    def _route_blob(self, name: str, digest: str):
        self.entry.target = digest
        if self.command not in ("GET", "HEAD"):
            return self._error(405, "UNSUPPORTED", "method not allowed")
        if not self._repository(name, ("pull",)):
            return
        if not DIGEST.fullmatch(digest):
            return self._error(400, "DIGEST_INVALID", "invalid digest")
        if not self.registry.has_blob(name, digest):
            return self._error(404, "BLOB_UNKNOWN", "blob unknown to registry", detail={"digest": digest})
        fault = self.registry._fault_for(digest)
        if self._fault_status(fault):
            return
        if fault and fault.redirect:
            location = fault.redirect if isinstance(fault.redirect, str) else \
                f"{self.registry.url}/storage/{digest}?sig={self.registry._storage_key}"
            return self._respond(307, b"", {"Location": location})
        self._send_blob(digest, fault)

    def _route_storage(self, digest: str):
        """Where blob GETs are redirected: no registry auth, a signature in the query instead."""
        self.entry.target = digest
        if self.command not in ("GET", "HEAD"):
            return self._error(405, "UNSUPPORTED", "method not allowed")
        if self.query.get("sig", [""])[0] != self.registry._storage_key:
            return self._error(403, "DENIED", "bad signature")
        if self.registry.blob(digest) is None:
            return self._error(404, "BLOB_UNKNOWN", "no such object")
        self._send_blob(digest, self.registry._fault_for(digest))

    def _send_blob(self, digest: str, fault: Fault | None):
        self.registry._spend(fault)
        data = _spoiled(self.registry.blob(digest), fault)
        headers = {"Content-Type": "application/octet-stream", "Docker-Content-Digest": digest,
                   "Accept-Ranges": "bytes"}
        wanted = self.headers.get("Range")
        if wanted is None or (fault and fault.ignore_range):
            return self._respond(200, data, headers, fault)
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
        start = int(m.group(1)) if m else len(data)
        end = min(int(m.group(2)), len(data) - 1) if m and m.group(2) else len(data) - 1
        if start >= len(data) or end < start:
            return self._error(416, "UNSUPPORTED", "range not satisfiable", {"Content-Range": f"bytes */{len(data)}"})
        headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        self._respond(206, data[start:end + 1], headers, fault)

    def _route_upload(self, name: str, upload: str):
        self.entry.target = upload
        if not self._repository(name, ("pull", "push")):
            return
        reg = self.registry
        if self.command == "POST" and upload == "":
            return self._start_upload(name)
        with reg._lock:
            session = reg._uploads.get(upload)
        if session is None or session[0] != name:
            return self._error(404, "BLOB_UPLOAD_UNKNOWN", "blob upload unknown to registry")
        data = session[1]
        if self.command == "GET":
            return self._respond(204, b"", self._upload_headers(name, upload, len(data)))
        if self.command == "DELETE":
            with reg._lock:
                reg._uploads.pop(upload, None)
            return self._respond(204)
        if self.command == "PATCH":
            # Content-Range: "START-END" (the spec's form, not HTTP's "bytes ..."); optional.
            content_range = self.headers.get("Content-Range")
            start = re.match(r"\s*(\d+)-", content_range or "")
            if content_range is not None and (not start or int(start.group(1)) != len(data)):
                return self._error(416, "BLOB_UPLOAD_INVALID", "chunk out of order",
                                   self._upload_headers(name, upload, len(data)))
            data += self.body
            return self._respond(202, b"", self._upload_headers(name, upload, len(data)))
        if self.command == "PUT":
            data += self.body
            digest = self.query.get("digest", [""])[0]
            with reg._lock:
                reg._uploads.pop(upload, None)
            return self._finish_blob(name, digest, bytes(data))
        self._error(405, "UNSUPPORTED", "method not allowed")

    def _start_upload(self, name: str):
        reg = self.registry
        mount, source = self.query.get("mount", [""])[0], self.query.get("from", [""])[0]
        if mount and source:
            self.entry.target = mount
            if reg.has_blob(source, mount) and self._may_pull(source):
                reg.put_blob(name, reg.blob(mount))
                return self._respond(201, b"", {"Location": f"/v2/{name}/blobs/{mount}", "Docker-Content-Digest": mount})
            # Otherwise the spec says: start an ordinary upload instead.
        digest = self.query.get("digest", [""])[0]
        if digest:
            self.entry.target = digest
            return self._finish_blob(name, digest, self.body)
        upload = secrets.token_hex(16)
        with reg._lock:
            reg._uploads[upload] = (name, bytearray(self.body))
        self._respond(202, b"", self._upload_headers(name, upload, len(self.body)))

    def _upload_headers(self, name: str, upload: str, size: int) -> dict:
        # Location carries a query of its own, as real registries' do: clients must add ?digest= with care.
        return {"Location": f"/v2/{name}/blobs/uploads/{upload}?_state={upload[:8]}",
                "Docker-Upload-UUID": upload, "Range": f"0-{max(size - 1, 0)}"}

    def _finish_blob(self, name: str, digest: str, data: bytes):
        if not DIGEST.fullmatch(digest) or digest_of(data) != digest:
            return self._error(400, "DIGEST_INVALID", "provided digest did not match uploaded content")
        self.registry.put_blob(name, data)
        self._respond(201, b"", {"Location": f"/v2/{name}/blobs/{digest}", "Docker-Content-Digest": digest})

    def _route_tags(self, name: str):
        if self.command not in ("GET", "HEAD"):
            return self._error(405, "UNSUPPORTED", "method not allowed")
        if not self._repository(name, ("pull",)):
            return
        with self.registry._lock:
            repo = self.registry._repos.get(name)
            tags = sorted(repo.tags) if repo else None
        if tags is None:
            return self._error(404, "NAME_UNKNOWN", "repository name not known to registry", detail={"name": name})
        last = self.query.get("last", [""])[0]
        tags = [t for t in tags if t > last]
        headers = {"Content-Type": "application/json"}
        n = self.query.get("n", [""])[0]
        if n.isdigit() and int(n) < len(tags):
            tags = tags[:int(n)]
            if tags:
                headers["Link"] = f'</v2/{name}/tags/list?n={n}&last={quote(tags[-1])}>; rel="next"'
        self._respond(200, json.dumps({"name": name, "tags": tags}).encode(), headers)


def _spoiled(data: bytes, fault: Fault | None) -> bytes:
    """The content as the fault serves it: other bytes of the same length, extra zeros."""
    if fault is None:
        return data
    if isinstance(fault.wrong_bytes, bytes):
        data = fault.wrong_bytes
    elif fault.wrong_bytes:
        # One byte changed at the very end: nothing looks wrong before the whole blob is in.
        data = data[:-1] + bytes([data[-1] ^ 0x01]) if data else b"x"
    return data + bytes(fault.extra_bytes)
