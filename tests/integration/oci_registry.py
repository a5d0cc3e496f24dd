"""A registry on loopback for the pull tests: the OCI distribution API's pull side (manifests
and blobs by tag and digest, Range), Basic auth or the Bearer token dance, a log of every
request, and faults a test can set per blob (wrong bytes, a truncated or dropped body, too
many bytes, a stall, a redirect). Also the images: layers made from entries or host files,
configs, manifests and indexes, OCI or Docker schema 2."""

import base64
import gzip
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import subprocess
import tarfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
LAYER_TYPES = {
    ("oci", "gzip"): "application/vnd.oci.image.layer.v1.tar+gzip",
    ("oci", "zstd"): "application/vnd.oci.image.layer.v1.tar+zstd",
    ("oci", "none"): "application/vnd.oci.image.layer.v1.tar",
    ("docker", "gzip"): "application/vnd.docker.image.rootfs.diff.tar.gzip",
}


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ---- images ----

@dataclass
class Entry:
    """One tar entry: kind is file, dir, symlink, hardlink, whiteout (of `path`), opaque (the
    directory `path`), or fifo/chardev. `raw` keeps the name as given (hostile names)."""
    path: str
    kind: str = "file"
    data: bytes = b""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    target: str = ""


def _tar(entries: list[Entry]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            name = e.path
            if e.kind == "whiteout":
                head, _, base = name.rpartition("/")
                name = (head + "/" if head else "") + ".wh." + base
            elif e.kind == "opaque":
                name = name.rstrip("/") + "/.wh..wh..opq"
            info = tarfile.TarInfo(name)
            info.mode, info.uid, info.gid, info.mtime = e.mode, e.uid, e.gid, 1700000000
            data = None
            if e.kind in ("file", "whiteout", "opaque"):
                data = e.data if e.kind == "file" else b""
                info.size = len(data)
            elif e.kind == "dir":
                info.type = tarfile.DIRTYPE
            elif e.kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, e.target
            elif e.kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, e.target
            elif e.kind == "fifo":
                info.type = tarfile.FIFOTYPE
            elif e.kind == "chardev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def host_files(paths: list[str]) -> list[Entry]:
    """Entries for host programs and every library they load (from ldd), so an image of a few
    layers can run a shell without a distribution in the tests."""
    files = set()
    for p in paths:
        files.add(os.path.realpath(p))
        out = subprocess.run(["ldd", p], capture_output=True, text=True).stdout
        for lib in re.findall(r"(/\S+) \(0x", out):
            files.add(lib)
    entries, dirs = [], set()
    for wanted in sorted(set(paths) | files):
        real = os.path.realpath(wanted)
        parts = wanted.strip("/").split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in dirs:
                dirs.add(d)
                entries.append(Entry(d, "dir", mode=0o755))
        with open(real, "rb") as f:
            entries.append(Entry(wanted.strip("/"), "file", f.read(), mode=0o755))
    return entries


def make_layer(entries: list[Entry], compression: str = "gzip") -> tuple[bytes, bytes]:
    """(the layer blob, its uncompressed tar)."""
    tar = _tar(entries)
    if compression == "gzip":
        return gzip.compress(tar, mtime=0), tar
    if compression == "zstd":
        return subprocess.run(["zstd", "-q", "-c"], input=tar, capture_output=True, check=True).stdout, tar
    return tar, tar


@dataclass
class Image:
    manifest: bytes
    media_type: str
    blobs: dict = field(default_factory=dict)  # digest -> bytes

    @property
    def digest(self) -> str:
        return digest_of(self.manifest)

    def layer_digests(self) -> list[str]:
        return [l["digest"] for l in json.loads(self.manifest)["layers"]]


def build_image(layers: list[tuple[bytes, bytes]], config: dict | None = None, media: str = "oci",
                compression: str = "gzip", architecture: str = "amd64") -> Image:
    cfg = {"architecture": architecture, "os": "linux", "config": config or {},
           "rootfs": {"type": "layers", "diff_ids": [digest_of(tar) for _, tar in layers]},
           "history": [{"created_by": "bulkhead test"} for _ in layers]}
    config_blob = json.dumps(cfg).encode()
    blobs = {digest_of(config_blob): config_blob}
    layer_descs = []
    for blob, _ in layers:
        blobs[digest_of(blob)] = blob
        layer_descs.append({"mediaType": LAYER_TYPES[(media, compression)], "digest": digest_of(blob),
                            "size": len(blob)})
    manifest = {"schemaVersion": 2,
                "mediaType": OCI_MANIFEST if media == "oci" else DOCKER_MANIFEST,
                "config": {"mediaType": OCI_CONFIG if media == "oci" else DOCKER_CONFIG,
                           "digest": digest_of(config_blob), "size": len(config_blob)},
                "layers": layer_descs}
    return Image(json.dumps(manifest).encode(), manifest["mediaType"], blobs)


def build_index(entries: list[tuple[Image, dict]], media: str = "oci") -> Image:
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX if media == "oci" else DOCKER_LIST,
             "manifests": [{"mediaType": img.media_type, "digest": img.digest, "size": len(img.manifest),
                            "platform": platform} for img, platform in entries]}
    blobs = {}
    for img, _ in entries:
        blobs.update(img.blobs)
        blobs[img.digest] = img.manifest
    return Image(json.dumps(index).encode(), index["mediaType"], blobs)


# ---- the registry ----

@dataclass
class Fault:
    wrong_bytes: bool = False       # the same length, other content
    truncate_at: int | None = None  # announce it all, close after this many bytes, every time
    drop_after: int | None = None   # the same, once: a resumed download then succeeds
    extra_bytes: int = 0            # more bytes than the manifest says (Content-Length too)
    stall_at: int | None = None     # stop sending after this many bytes for stall_s
    stall_s: float = 0
    status: int | None = None       # answer this instead
    redirect: bool = False          # 307 to a storage path on the same server that takes no auth


class Registry:
    """Serves on 127.0.0.1. auth: None, "basic" or "token" (users: name -> password; public:
    repositories anyone may pull from in token mode)."""

    def __init__(self, auth: str | None = None, users: dict | None = None, public: tuple = (),
                 token_ttl_s: float = 300):
        self.auth, self.users, self.public, self.token_ttl_s = auth, users or {}, set(public), token_ttl_s
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], tuple[str, bytes]] = {}
        self.faults: dict[str, Fault] = {}
        self.tokens: dict[str, tuple[str, float]] = {}  # token -> (scope, expiry)
        self.log: list[dict] = []
        self.lock = threading.Lock()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                registry._serve(self, head=False)

            def do_HEAD(self):
                registry._serve(self, head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def put_image(self, repo: str, tag: str, image: Image):
        with self.lock:
            self.blobs.update(image.blobs)
            self.manifests[(repo, tag)] = (image.media_type, image.manifest)
            self.manifests[(repo, image.digest)] = (image.media_type, image.manifest)
            for digest, data in image.blobs.items():
                try:
                    doc = json.loads(data)
                except (ValueError, UnicodeDecodeError):
                    continue
                if isinstance(doc, dict) and doc.get("mediaType") in (OCI_MANIFEST, DOCKER_MANIFEST):
                    self.manifests[(repo, digest)] = (doc["mediaType"], data)

    def requests(self, method: str = "GET", path_part: str = "") -> list[dict]:
        with self.lock:
            return [r for r in self.log if r["method"] == method and path_part in r["path"]]

    # -- serving --

    def _error(self, h, status: int, code: str, message: str, extra_headers=()):
        body = json.dumps({"errors": [{"code": code, "message": message}]}).encode()
        self._reply(h, status, body, "application/json", extra_headers)

    def _reply(self, h, status, body: bytes, content_type: str, extra_headers=(), head=False):
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        for k, v in extra_headers:
            h.send_header(k, v)
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _authorized(self, h, repo: str) -> bool:
        if self.auth is None:
            return True
        header = h.headers.get("Authorization", "")
        if self.auth == "basic":
            if header.startswith("Basic "):
                user, _, password = base64.b64decode(header[6:]).decode().partition(":")
                if self.users.get(user) == password:
                    return True
            self._error(h, 401, "UNAUTHORIZED", "authentication required",
                        [("WWW-Authenticate", 'Basic realm="bulkhead test registry"')])
            return False
        token = header[7:] if header.startswith("Bearer ") else ""
        with self.lock:
            granted = self.tokens.get(token)
        if granted and granted[1] > time.monotonic() and granted[0] in (f"repository:{repo}:pull", "registry:catalog:*"):
            return True
        scope = f"repository:{repo}:pull" if repo else ""
        challenge = f'Bearer realm="http://{self.host}/token",service="registry.test"'
        if scope:
            challenge += f',scope="{scope}"'
        self._error(h, 401, "UNAUTHORIZED", "authentication required", [("WWW-Authenticate", challenge)])
        return False

    def _token(self, h, query):
        service = query.get("service", [""])[0]
        scope = query.get("scope", [""])[0]
        header = h.headers.get("Authorization", "")
        user = None
        if header.startswith("Basic "):
            name, _, password = base64.b64decode(header[6:]).decode().partition(":")
            if self.users.get(name) != password:
                return self._error(h, 401, "UNAUTHORIZED", "bad login")
            user = name
        repo = scope.split(":")[1] if scope.count(":") == 2 else ""
        if service != "registry.test" or (user is None and repo not in self.public):
            return self._error(h, 401, "UNAUTHORIZED", "login required for " + scope)
        token = secrets.token_hex(16)
        with self.lock:
            self.tokens[token] = (scope, time.monotonic() + self.token_ttl_s)
        self._reply(h, 200, json.dumps({"token": token, "expires_in": 300}).encode(), "application/json")

    def _serve(self, h, head: bool):
        url = urlsplit(h.path)
        entry = {"method": h.command, "path": url.path, "range": h.headers.get("Range"),
                 "auth": h.headers.get("Authorization", "").split(" ")[0]}
        with self.lock:
            self.log.append(entry)
        if url.path == "/token":
            return self._token(h, parse_qs(url.query))
        if url.path.startswith("/storage/"):
            return self._send_blob(h, "sha256:" + url.path.rsplit("/", 1)[1], head, redirected=True)
        if url.path in ("/v2", "/v2/"):
            if self._authorized(h, ""):
                self._reply(h, 200, b"{}", "application/json", head=head)
            return
        m = re.fullmatch(r"/v2/(.+)/(manifests|blobs)/([^/]+)", url.path)
        if not m:
            return self._error(h, 404, "NAME_UNKNOWN", "no such path")
        repo, kind, ref = m.groups()
        if not self._authorized(h, repo):
            return
        if kind == "manifests":
            with self.lock:
                found = self.manifests.get((repo, ref))
                fault = self.faults.get(ref)
            if not found:
                return self._error(h, 404, "MANIFEST_UNKNOWN", f"manifest {ref} unknown")
            media_type, body = found
            if fault and fault.wrong_bytes:
                body = body.replace(b"schemaVersion", b"schemaVersioN")
            return self._reply(h, 200, body, media_type, [("Docker-Content-Digest", digest_of(found[1]))], head)
        with self.lock:
            fault = self.faults.get(ref)
        if fault and fault.redirect:
            h.send_response(307)
            h.send_header("Location", f"http://{self.host}/storage/{ref[7:]}")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        self._send_blob(h, ref, head)

    def _send_blob(self, h, digest: str, head: bool, redirected: bool = False):
        with self.lock:
            data = self.blobs.get(digest)
            fault = self.faults.get(digest) or Fault()
        if redirected and h.headers.get("Authorization"):
            return self._error(h, 400, "DENIED", "storage takes no registry credentials")
        if data is None:
            return self._error(h, 404, "BLOB_UNKNOWN", f"blob {digest} unknown")
        if fault.status:
            return self._error(h, fault.status, "UNAVAILABLE", "fault")
        if fault.wrong_bytes:
            data = bytes(b ^ 0xFF for b in data)
        data = data + b"\0" * fault.extra_bytes
        start = 0
        m = re.fullmatch(r"bytes=(\d+)-", h.headers.get("Range") or "")
        if m and int(m.group(1)) < len(data):
            start = int(m.group(1))
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(len(data) - start))
        h.send_header("Docker-Content-Digest", digest)
        h.end_headers()
        if head:
            return
        body = data[start:]
        cut = None
        if fault.truncate_at is not None:
            cut = max(0, fault.truncate_at - start)
        if fault.drop_after is not None:
            cut = max(0, fault.drop_after - start)
            fault.drop_after = None  # once
        if fault.stall_at is not None and start < fault.stall_at:
            h.wfile.write(body[:fault.stall_at - start])
            h.wfile.flush()
            time.sleep(fault.stall_s)
            body = body[fault.stall_at - start:]
        try:
            if cut is not None:
                h.wfile.write(body[:cut])
                h.wfile.flush()
                h.close_connection = True
                h.connection.shutdown(2)
                return
            for i in range(0, len(body), 1 << 16):
                h.wfile.write(body[i:i + (1 << 16)])
        except OSError:
            pass
