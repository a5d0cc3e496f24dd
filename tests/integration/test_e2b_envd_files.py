"""envd's filesystem service (Connect RPC, JSON) and /files on the E2B front, spoken directly
over http.client as the e2b SDKs speak them (docs/design/e2b-protocol.md §3, §4, §5.2, §6.4):
every RPC and its errors, round trips of text, binary and a large file, multipart and
octet-stream uploads, gzip both ways, relative paths and users, hostile paths and symlinks
(a host canary must stay out of reach), watches (streamed and polled), malformed bodies."""

import base64
import gzip
import hashlib
import http.client
import json
import os
import secrets
import socket
import struct
import time
import urllib.parse
import uuid
import zlib

import pytest

import harness

FS = "/filesystem.Filesystem/"


class Envd:
    """The E2B front of a daemon: control plane (X-API-KEY) and envd of one sandbox."""

    def __init__(self, daemon, sandbox: dict):
        host, port = daemon.e2b_url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.sandbox_id = sandbox["sandboxID"]
        self.token = sandbox["envdAccessToken"]

    def conn(self, timeout: float = 120) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self, user: str | None = None, **extra) -> dict:
        h = {"E2b-Sandbox-Id": self.sandbox_id, "E2b-Sandbox-Port": "49983", "X-Access-Token": self.token}
        if user is not None:
            h["Authorization"] = "Basic " + base64.b64encode(f"{user}:".encode()).decode()
        h.update(extra)
        return h

    def request(self, method: str, path: str, body=None, headers=None, timeout: float = 120) -> harness.Response:
        conn = self.conn(timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return harness.Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def rpc(self, method: str, message: dict | None = None, user: str | None = None, raw: bytes | None = None):
        body = raw if raw is not None else json.dumps(message or {}).encode()
        h = self.headers(user, **{"Content-Type": "application/json", "Connect-Protocol-Version": "1",
                                  "Connect-Timeout-Ms": "60000"})
        return self.request("POST", FS + method, body, h)

    def ok(self, method: str, message: dict | None = None, user: str | None = None) -> dict:
        r = self.rpc(method, message, user)
        assert r.status == 200, f"{method} {message}: {r!r}"
        assert r.headers["content-type"].startswith("application/json")
        return r.json()

    def error(self, method: str, message: dict | None = None, user: str | None = None, raw: bytes | None = None):
        """(HTTP status, Connect code) of a call that must fail."""
        r = self.rpc(method, message, user, raw)
        assert r.status != 200, f"{method} {message} succeeded: {r!r}"
        body = r.json()
        assert set(body) >= {"code", "message"} and isinstance(body["message"], str), r
        return r.status, body["code"]

    def read(self, path: str, user: str | None = None, accept_gzip: bool = False) -> harness.Response:
        query = {"path": path} | ({"username": user} if user else {})
        h = self.headers(**({"Accept-Encoding": "gzip"} if accept_gzip else {}))
        return self.request("GET", "/files?" + urllib.parse.urlencode(query), headers=h)

    def write_raw(self, path: str, data: bytes, user: str | None = None, gzip_body: bool = False) -> harness.Response:
        query = {"path": path} | ({"username": user} if user else {})
        h = self.headers(**{"Content-Type": "application/octet-stream"})
        if gzip_body:
            h["Content-Encoding"] = "gzip"
            data = gzip.compress(data)
        return self.request("POST", "/files?" + urllib.parse.urlencode(query), data, h)

    def write_multipart(self, files: list[tuple[str, bytes]], path: str | None = None, user: str | None = None,
                        chunked: bool = False) -> harness.Response:
        boundary = "----e2btest" + secrets.token_hex(8)
        body = b"".join(
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n" for name, data in files)
        body += f"--{boundary}--\r\n".encode()
        query = ({"path": path} if path else {}) | ({"username": user} if user else {})
        h = self.headers(**{"Content-Type": f"multipart/form-data; boundary={boundary}"})
        target = "/files" + ("?" + urllib.parse.urlencode(query) if query else "")
        if not chunked:
            return self.request("POST", target, body, h)
        conn = self.conn()
        try:
            conn.request("POST", target, body=iter([body[i:i + 7777] for i in range(0, len(body), 7777)]),
                         headers=h, encode_chunked=True)
            resp = conn.getresponse()
            return harness.Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()


def envelope(message: dict, flags: int = 0) -> bytes:
    payload = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(payload)) + payload


class Stream:
    """A server-streaming call: the request envelope out, envelopes in as they come."""

    def __init__(self, envd: Envd, method: str, message: dict, user=None, timeout_ms=None, keepalive=None):
        self.conn = envd.conn(timeout=90)
        h = envd.headers(user, **{"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"})
        if timeout_ms is not None:
            h["Connect-Timeout-Ms"] = str(timeout_ms)
        if keepalive is not None:
            h["Keepalive-Ping-Interval"] = str(keepalive)
        self.conn.request("POST", FS + method, body=envelope(message), headers=h)
        self.resp = self.conn.getresponse()

    def next(self) -> tuple[int, dict]:
        head = self.resp.read(5)
        assert len(head) == 5, f"the stream ended without an end-stream envelope: {head!r}"
        flags, size = struct.unpack(">BI", head)
        return flags, json.loads(self.resp.read(size))

    def close(self):
        self.conn.close()


@pytest.fixture(scope="module")
def front(daemon):
    return daemon


@pytest.fixture(scope="module")
def sandbox(front):
    r = e2b_api(front, "POST", "/v2/sandboxes", {"templateID": "base", "timeout": 600})
    assert r.status == 201, r
    created = r.json()
    yield created
    if front.running():
        e2b_api(front, "DELETE", f"/sandboxes/{created['sandboxID']}")


@pytest.fixture(scope="module")
def envd(front, sandbox):
    return Envd(front, sandbox)


def e2b_api(daemon, method, path, body=None) -> harness.Response:
    host, port = daemon.e2b_url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        h = {"X-API-KEY": daemon.e2b_key}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        return harness.Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def sh(daemon, sandbox_id, script, user="root") -> str:
    """A shell command in the sandbox through bulkhead's own API (the process service over
    envd is not what these tests pin down)."""
    return daemon.client().sh(sandbox_id, script, user=user)


def file_workers(daemon, sandbox) -> int:
    """How many file workers run in the sandbox."""
    return len(worker_pids(daemon, sandbox))


def worker_pids(daemon, sandbox) -> set[str]:
    return set(harness.file_workers(daemon.client(), sandbox["sandboxID"]))


def unique(prefix="t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# ---------------------------------------------------------------- Stat, MakeDir, ListDir, Move, Remove

def test_stat_entry_info_shape(envd, front, sandbox):
    name = unique("stat")
    assert envd.write_raw(f"/home/user/{name}.txt", b"hello").status == 200
    entry = envd.ok("Stat", {"path": f"/home/user/{name}.txt"})["entry"]
    assert entry["name"] == f"{name}.txt"
    assert entry["type"] == "FILE_TYPE_FILE"
    assert entry["path"] == f"/home/user/{name}.txt"
    assert entry["size"] == "5"  # int64: a string
    assert entry["mode"] == 0o644
    assert entry["permissions"] == "-rw-r--r--"
    assert entry["owner"] == "user" and entry["group"] == "user"
    assert entry["modifiedTime"].endswith("Z") and entry["modifiedTime"][:2] == "20"
    home = envd.ok("Stat", {"path": "/home/user"})["entry"]
    assert home["type"] == "FILE_TYPE_DIRECTORY" and home["permissions"].startswith("d")
    root = envd.ok("Stat", {"path": "/"})["entry"]
    assert root["owner"] == "root"


def test_relative_paths_and_tilde_resolve_against_the_users_home(envd):
    name = unique("rel")
    assert envd.write_raw(f"{name}.txt", b"relative").json()[0]["path"] == f"/home/user/{name}.txt"
    assert envd.ok("Stat", {"path": f"~/{name}.txt"})["entry"]["path"] == f"/home/user/{name}.txt"
    assert envd.ok("Stat", {"path": f"./x/../{name}.txt"})["entry"]["size"] == "8"
    # As root, the same relative path is under /root.
    r = envd.write_raw(f"{name}.txt", b"root's", user="root")
    assert r.status == 200 and r.json()[0]["path"] == f"/root/{name}.txt", r
    assert envd.ok("Stat", {"path": f"{name}.txt"}, user="root")["entry"]["owner"] == "root"
    assert envd.read(f"{name}.txt", user="root").body == b"root's"
    assert envd.read(f"{name}.txt").body == b"relative"
    assert envd.error("Stat", {"path": "~nobody/x"}) == (400, "invalid_argument")
    assert envd.error("Stat", {"path": ""}) == (400, "invalid_argument")


def test_make_dir_list_dir_move_remove(envd):
    base = f"/home/user/{unique('tree')}"
    assert envd.ok("MakeDir", {"path": f"{base}/a/b/c"})["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    assert envd.error("MakeDir", {"path": f"{base}/a/b"}) == (409, "already_exists")
    for name in ("Zeta.txt", "alpha.txt", "Beta.txt"):
        assert envd.write_raw(f"{base}/{name}", name.encode()).status == 200
    assert envd.ok("MakeDir", {"path": f"{base}/Dir2"})
    assert envd.error("MakeDir", {"path": f"{base}/alpha.txt"}) == (400, "invalid_argument")

    entries = envd.ok("ListDir", {"path": base})["entries"]
    assert [e["name"] for e in entries] == ["Beta.txt", "Dir2", "Zeta.txt", "a", "alpha.txt"]  # byte order
    assert all(e["path"] == f"{base}/{e['name']}" for e in entries)
    assert envd.ok("ListDir", {"path": base, "depth": 0})["entries"] == entries  # 0 is 1
    deep = envd.ok("ListDir", {"path": base, "depth": 3})["entries"]
    # A walk of the tree: each directory followed by its contents.
    assert [e["path"].removeprefix(base) for e in deep] == [
        "/Beta.txt", "/Dir2", "/Zeta.txt", "/a", "/a/b", "/a/b/c", "/alpha.txt"]
    assert base not in {e["path"] for e in deep}  # never the directory itself
    assert envd.ok("ListDir", {"path": base, "depth": "2"})["entries"]  # uint32 as a string
    assert envd.error("ListDir", {"path": f"{base}/nope"}) == (404, "not_found")
    assert envd.error("ListDir", {"path": f"{base}/alpha.txt"}) == (400, "invalid_argument")
    assert envd.error("ListDir", {"path": base, "depth": -1}) == (400, "invalid_argument")

    # Move into a directory that does not exist yet: made, as envd does.
    moved = envd.ok("Move", {"source": f"{base}/alpha.txt", "destination": f"{base}/new/dir/omega.txt"})["entry"]
    assert moved["path"] == f"{base}/new/dir/omega.txt" and moved["size"] == "9"
    assert envd.read(f"{base}/new/dir/omega.txt").body == b"alpha.txt"
    assert envd.error("Stat", {"path": f"{base}/alpha.txt"}) == (404, "not_found")
    assert envd.error("Move", {"source": f"{base}/alpha.txt", "destination": f"{base}/x"}) == (404, "not_found")

    assert envd.ok("Remove", {"path": f"{base}/Beta.txt"}) == {}
    assert envd.ok("Remove", {"path": f"{base}/a"}) == {}  # a whole tree, like os.RemoveAll
    assert envd.error("Stat", {"path": f"{base}/a/b/c"}) == (404, "not_found")
    assert envd.ok("Remove", {"path": f"{base}/a"}) == {}  # already gone: fine, as os.RemoveAll
    assert envd.ok("Remove", {"path": f"{base}/no/such/parent"}) == {}
    assert envd.ok("Remove", {"path": base}) == {}


def test_symlinks_are_described_by_what_they_lead_to(envd, front, sandbox):
    """As envd: a symlink has its target's type and mode, and symlinkTarget is where it
    resolves to (absolute); a dangling one has no type and itself as its target."""
    base = f"/home/user/{unique('links')}"
    assert envd.ok("MakeDir", {"path": base})
    sh(front, sandbox["sandboxID"], f"cd {base} && ln -s /etc to-etc && ln -s missing dangling && echo x > f"
                                    f" && ln -s f rel && ln -s ../{base.rsplit('/', 1)[1]}/rel chain", user="user")
    link = envd.ok("Stat", {"path": f"{base}/to-etc"})["entry"]
    assert (link["type"], link["symlinkTarget"], link["mode"]) == ("FILE_TYPE_DIRECTORY", "/etc", 0o755)
    assert link["permissions"] == "Lrwxrwxrwx" and link["size"] == "4"  # the link's own
    for name in ("rel", "chain"):
        entry = envd.ok("Stat", {"path": f"{base}/{name}"})["entry"]
        assert (entry["type"], entry["symlinkTarget"], entry["mode"]) == ("FILE_TYPE_FILE", f"{base}/f", 0o644), entry
    dangling = envd.ok("Stat", {"path": f"{base}/dangling"})["entry"]
    assert dangling["symlinkTarget"] == f"{base}/dangling"
    assert dangling.get("type", "FILE_TYPE_UNSPECIFIED") == "FILE_TYPE_UNSPECIFIED"
    listed = {e["name"]: (e.get("type"), e.get("symlinkTarget")) for e in envd.ok("ListDir", {"path": base})["entries"]}
    assert listed == {"chain": ("FILE_TYPE_FILE", f"{base}/f"), "dangling": ("FILE_TYPE_UNSPECIFIED", f"{base}/dangling"),
                      "f": ("FILE_TYPE_FILE", None), "rel": ("FILE_TYPE_FILE", f"{base}/f"),
                      "to-etc": ("FILE_TYPE_DIRECTORY", "/etc")}
    # Listing through a symlink to a directory lists the directory.
    assert "passwd" in {e["name"] for e in envd.ok("ListDir", {"path": f"{base}/to-etc"})["entries"]}
    assert envd.ok("Remove", {"path": f"{base}/to-etc"}) == {}  # the link, never its target
    assert envd.ok("Stat", {"path": "/etc/passwd"})["entry"]["type"] == "FILE_TYPE_FILE"


def test_unknown_users_and_operations_as_root_for_the_user(envd):
    assert envd.error("Stat", {"path": "/"}, user="nosuchuser") == (401, "unauthenticated")
    r = envd.read("/etc/hostname", user="nosuchuser")
    assert r.status == 401 and r.json()["code"] == 401, r
    r = envd.write_raw("/tmp/x", b"x", user="nosuchuser")
    assert r.status == 401 and r.json()["code"] == 401, r
    # As envd: operations run as the sandbox's root, what they make is the user's.
    made = f"/root/{unique('made')}"
    assert envd.ok("MakeDir", {"path": made})["entry"]["owner"] == "user"
    assert envd.write_raw(f"{made}/x.txt", b"yes").status == 200
    assert envd.ok("Stat", {"path": f"{made}/x.txt"})["entry"]["owner"] == "user"
    assert {e["name"] for e in envd.ok("ListDir", {"path": made})["entries"]} == {"x.txt"}
    assert envd.ok("MakeDir", {"path": f"/root/{unique('allowed')}"}, user="root")["entry"]["owner"] == "root"
    r = envd.read("/root", user="user")
    assert r.status == 400, r

def test_bad_rpc_bodies_and_methods(envd):
    assert envd.error("Stat", raw=b"{not json") == (400, "invalid_argument")
    assert envd.error("Stat", raw=b"[1,2]") == (400, "invalid_argument")
    assert envd.error("Stat", {"path": 42}) == (400, "invalid_argument")
    assert envd.error("Move", {"source": "/tmp"}) == (400, "invalid_argument")
    assert envd.error("ListDir", {"path": "/", "depth": "x"}) == (400, "invalid_argument")
    assert envd.error("NoSuchMethod", {}) == (501, "unimplemented")
    assert envd.error("Stat", {"path": "a\u0000b"}) == (400, "invalid_argument")
    assert envd.error("Stat", {"path": "/" + "a" * 5000}) == (400, "invalid_argument")
    assert envd.error("Stat", {"path": "/no/such/file"}) == (404, "not_found")
    # The daemon is fine afterwards.
    assert envd.ok("Stat", {"path": "/"})["entry"]["type"] == "FILE_TYPE_DIRECTORY"


# ---------------------------------------------------------------- /files

def test_files_round_trips_text_and_every_byte_value(envd):
    base = f"/home/user/{unique('rt')}"
    text = "héllo wörld\nline 2\n".encode()
    r = envd.write_raw(f"{base}/text.txt", text)
    assert r.status == 200, r
    assert r.json() == [{"name": "text.txt", "type": "file", "path": f"{base}/text.txt"}]
    got = envd.read(f"{base}/text.txt")
    assert got.status == 200 and got.body == text and got.headers["content-length"] == str(len(text))
    every = bytes(range(256)) * 4
    assert envd.write_multipart([(f"{base}/bytes.bin", every)]).status == 200
    assert envd.read(f"{base}/bytes.bin").body == every
    # Existing files are truncated; empty files have Content-Length 0.
    assert envd.write_raw(f"{base}/bytes.bin", b"").status == 200
    got = envd.read(f"{base}/bytes.bin")
    assert got.status == 200 and got.body == b"" and got.headers["content-length"] == "0"


def test_files_reads_a_kernel_filesystems_file_to_its_end(envd):
    # procfs says 0 bytes, sysfs a page: envd reads such files to their end, as it does any.
    for path in ("/proc/sys/kernel/osrelease", "/sys/class/net/lo/address"):
        got = envd.read(path)
        assert got.status == 200 and "content-length" not in got.headers, (path, got)
        assert got.body and got.body.endswith(b"\n"), (path, got)
        packed = envd.read(path, accept_gzip=True)
        assert packed.status == 200 and gzip.decompress(packed.body) == got.body, (path, packed)
    assert envd.read("/sys/class/net/lo/address").body == b"00:00:00:00:00:00\n"


def test_files_multipart_several_files_and_path_parameter(envd):
    base = unique("multi")  # relative: under the home
    files = [(f"{base}/a.txt", b"A"), (f"{base}/deep/er/b.bin", bytes(range(256))), (f"/tmp/{base}-c", b"C" * 70000)]
    r = envd.write_multipart(files, chunked=True)
    assert r.status == 200, r
    assert r.json() == [
        {"name": "a.txt", "type": "file", "path": f"/home/user/{base}/a.txt"},
        {"name": "b.bin", "type": "file", "path": f"/home/user/{base}/deep/er/b.bin"},
        {"name": f"{base}-c", "type": "file", "path": f"/tmp/{base}-c"},
    ]
    for name, data in files:
        assert envd.read(name).body == data
    # With ?path= the single part goes there, whatever its filename.
    r = envd.write_multipart([("ignored-name.txt", b"by path")], path=f"{base}/by-path.txt")
    assert r.status == 200 and r.json()[0]["path"] == f"/home/user/{base}/by-path.txt", r
    assert envd.error("Stat", {"path": f"{base}/ignored-name.txt"}) == (404, "not_found")
    # The same path twice in one upload is refused.
    r = envd.write_multipart([(f"{base}/twice", b"1"), (f"{base}/twice", b"2")])
    assert r.status == 400 and r.json()["code"] == 400, r


def test_files_gzip_both_ways(envd):
    path = f"/home/user/{unique('gz')}.txt"
    data = b"compress me " * 50000
    r = envd.write_raw(path, data, gzip_body=True)
    assert r.status == 200, r
    plain = envd.read(path)
    assert plain.body == data and "content-encoding" not in plain.headers
    packed = envd.read(path, accept_gzip=True)
    assert packed.status == 200 and packed.headers.get("content-encoding") == "gzip"
    assert len(packed.body) < len(data) // 10
    assert gzip.decompress(packed.body) == data
    # Empty file, gzipped.
    empty = f"/home/user/{unique('gz0')}"
    assert envd.write_raw(empty, b"", gzip_body=True).status == 200
    assert gzip.decompress(envd.read(empty, accept_gzip=True).body) == b""
    # A body that claims gzip but is not, and one cut short: 400, the file untouched.
    h = envd.headers(**{"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
    r = envd.request("POST", "/files?path=" + urllib.parse.quote(path), b"not gzip at all", h)
    assert r.status == 400 and r.json()["code"] == 400, r
    r = envd.request("POST", "/files?path=" + urllib.parse.quote(path), gzip.compress(b"x" * 1000)[:-6], h)
    assert r.status == 400, r
    assert envd.read(path).body == data


def test_files_large_file_streams_with_sha256(envd, front):
    """64 MiB up (chunked, octet-stream) and down, checked by sha256 inside the sandbox and here."""
    path = f"/home/user/{unique('big')}.bin"
    size = 64 << 20
    block = os.urandom(1 << 20)
    digest = hashlib.sha256()
    conn = envd.conn(timeout=300)
    try:
        h = envd.headers(**{"Content-Type": "application/octet-stream"})

        def chunks():
            for i in range(size // len(block)):
                piece = block[i % 7:] + block[:i % 7]
                digest.update(piece)
                yield piece

        conn.request("POST", "/files?path=" + urllib.parse.quote(path), body=chunks(), headers=h, encode_chunked=True)
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        resp.read()
    finally:
        conn.close()
    assert envd.ok("Stat", {"path": path})["entry"]["size"] == str(size)
    conn = envd.conn(timeout=300)
    try:
        conn.request("GET", "/files?path=" + urllib.parse.quote(path), headers=envd.headers())
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("content-length") == str(size)
        down = hashlib.sha256()
        while piece := resp.read(1 << 20):
            down.update(piece)
    finally:
        conn.close()
    assert down.hexdigest() == digest.hexdigest()
    envd.ok("Remove", {"path": path})


def test_files_errors(envd):
    r = envd.read(f"/home/user/{unique('missing')}")
    assert r.status == 404 and r.json()["code"] == 404 and r.json()["message"], r
    r = envd.read("/home/user")
    assert r.status == 400 and r.json()["code"] == 400, r
    r = envd.request("GET", "/files", headers=envd.headers())
    assert r.status == 400, r
    r = envd.write_raw("/home/user", b"over a directory")
    assert r.status == 400 and r.json()["code"] == 400, r
    # octet-stream without a path; an unknown content type; an unknown encoding.
    h = envd.headers(**{"Content-Type": "application/octet-stream"})
    assert envd.request("POST", "/files", b"x", h).status == 400
    h = envd.headers(**{"Content-Type": "text/plain"})
    assert envd.request("POST", "/files?path=/tmp/x", b"x", h).status == 400
    h = envd.headers(**{"Content-Type": "application/octet-stream", "Content-Encoding": "br"})
    assert envd.request("POST", "/files?path=/tmp/x", b"x", h).status == 400
    r = envd.request("DELETE", "/files?path=/tmp/x", headers=envd.headers())
    assert r.status == 405, r


def test_files_without_the_access_token_get_envds_refusals(envd):
    """envd's answers for /files without the right X-Access-Token: it may be signed instead;
    the other paths need the token."""
    def refusal(path, **headers):
        h = {k: v for k, v in envd.headers(**headers).items() if v is not None}
        r = envd.request("GET", path, headers=h)
        assert r.status == 401 and r.headers["content-type"] == "application/json", r
        assert r.json()["code"] == 401, r
        return r.json()["message"]

    assert refusal("/files?path=/etc/hostname", **{"X-Access-Token": None}) == "missing signature query parameter"
    assert refusal("/files?path=/etc/hostname&signature=v1_x", **{"X-Access-Token": None}) == "invalid signature"
    assert refusal("/files?path=/etc/hostname", **{"X-Access-Token": "wrong"}) == \
        "access token present in header but does not match"
    assert refusal("/files?path=/etc/hostname&signature=v1_x&signature_expiration=soon",
                   **{"X-Access-Token": None}) == "invalid signature"
    assert refusal(FS + "Stat", **{"X-Access-Token": None}).startswith("unauthorized access")


def test_files_malformed_multipart_bodies(envd):
    path = f"/home/user/{unique('mp')}"
    good = b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\ndata\r\n--B--\r\n"
    bad_bodies = [
        b"",                                                     # nothing
        b"no delimiter anywhere",
        good[:-8],                                               # never closed
        b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n",  # header never ends
        b"--B\r\nX-Big: " + b"h" * 20000 + b"\r\n\r\nx\r\n--B--",  # header too large
        b"--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nno filename\r\n--B--",
        b"--B\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nnot a file\r\n--B--",
        b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\x00b\"\r\n\r\nx\r\n--B--",
        b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"~root/x\"\r\n\r\nx\r\n--B--",
    ]
    for body in bad_bodies:
        h = envd.headers(**{"Content-Type": "multipart/form-data; boundary=B"})
        r = envd.request("POST", "/files", body, h)
        assert r.status == 400 and r.json()["code"] == 400, (body[:60], r)
    for content_type in ("multipart/form-data", "multipart/form-data; boundary=", "multipart/form-data; boundary=\"x"):
        r = envd.request("POST", "/files", good, envd.headers(**{"Content-Type": content_type}))
        assert r.status == 400, (content_type, r)
    # The daemon is fine, and a good body works.
    r = envd.request("POST", "/files?path=" + urllib.parse.quote(path), good,
                     envd.headers(**{"Content-Type": "multipart/form-data; boundary=B"}))
    assert r.status == 200, r
    assert envd.read(path).body == b"data"


def test_files_client_leaving_mid_upload_leaves_old_content(envd):
    path = f"/home/user/{unique('cut')}"
    assert envd.write_raw(path, b"old content").status == 200
    s = socket.create_connection((envd.host, envd.port), timeout=30)
    head = (f"POST /files?path={urllib.parse.quote(path)} HTTP/1.1\r\nHost: x\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in envd.headers(**{"Content-Type": "application/octet-stream"}).items())
            + "Content-Length: 10000000\r\n\r\n")
    s.sendall(head.encode() + b"partial" * 1000)
    time.sleep(0.3)
    s.close()
    assert harness.wait_until(lambda: envd.read(path).body == b"old content", timeout=10)


# ---------------------------------------------------------------- hostile paths and symlinks

def test_symlink_escapes_never_reach_host_files(envd, front, sandbox, tmp_path):
    canary = tmp_path / f"canary-{secrets.token_hex(6)}"
    canary_text = b"HOST CANARY " + secrets.token_hex(16).encode()
    canary.write_bytes(canary_text)
    marker = f"host-marker-{secrets.token_hex(6)}"
    (tmp_path / marker).write_text("host")
    base = f"/home/user/{unique('escape')}"
    envd.ok("MakeDir", {"path": base})
    sh(front, sandbox["sandboxID"],
       f"ln -s / {base}/root && ln -s {canary} {base}/canary && ln -s {tmp_path} {base}/hostdir", user="user")

    # Through a symlink to /: the sandbox's own root, not the host's.
    listed = {e["name"] for e in envd.ok("ListDir", {"path": f"{base}/root"})["entries"]}
    assert "etc" in listed
    hostdir = envd.rpc("ListDir", {"path": f"{base}/hostdir"})
    if hostdir.status == 200:
        assert marker not in {e["name"] for e in hostdir.json()["entries"]}
    else:
        assert hostdir.json()["code"] == "not_found"
    r = envd.read(f"{base}/canary")
    assert r.status == 404 and canary_text not in r.body, r
    r = envd.read(str(canary))
    assert r.status == 404 and canary_text not in r.body, r
    r = envd.read(f"{base}/root{canary}")
    assert r.status == 404, r
    # ".." everywhere stays inside.
    r = envd.read("../../../../../../../../" + str(canary).lstrip("/"))
    assert r.status == 404, r
    # Writing through them lands in the sandbox, and the host file is unchanged.
    r = envd.write_raw(f"{base}/root{canary}", b"overwritten?", user="root")
    assert r.status in (200, 400), r
    r = envd.write_multipart([(f"../../..{canary}", b"overwritten?")], user="root")
    assert r.status == 200, r
    assert envd.read(str(canary), user="root").body == b"overwritten?"  # the sandbox's own file
    r = envd.rpc("Move", {"source": f"{base}/canary", "destination": str(canary)}, user="root")
    assert r.status in (200, 400, 404), r
    assert canary.read_bytes() == canary_text
    assert (tmp_path / marker).read_text() == "host"


# ---------------------------------------------------------------- watches

def test_watch_dir_streams_events_keepalives_and_deadline(envd, front, sandbox):
    base = f"/home/user/{unique('watch')}"
    envd.ok("MakeDir", {"path": f"{base}/sub"})
    stream = Stream(envd, "WatchDir", {"path": base, "recursive": True}, timeout_ms=6000, keepalive=1)
    try:
        assert stream.resp.status == 200
        assert stream.resp.getheader("content-type") == "application/connect+json"
        assert stream.next() == (0, {"start": {}})
        assert envd.write_raw(f"{base}/sub/new.txt", b"one").status == 200
        sh(front, sandbox["sandboxID"], f"echo more >> {base}/sub/new.txt; rm {base}/sub/new.txt", user="user")
        events, keepalives = [], 0
        while True:
            flags, message = stream.next()
            if flags == 2:
                end = message
                break
            if "keepalive" in message:
                assert message == {"keepalive": {}}
                keepalives += 1
            else:
                events.append((message["filesystem"]["name"], message["filesystem"]["type"]))
        assert ("sub/new.txt", "EVENT_TYPE_CREATE") in events, events
        assert ("sub/new.txt", "EVENT_TYPE_WRITE") in events, events
        assert ("sub/new.txt", "EVENT_TYPE_REMOVE") in events, events
        assert keepalives >= 1  # about 4 quiet seconds with a 1 s interval
        assert end["error"]["code"] == "deadline_exceeded", end
    finally:
        stream.close()

    # Not recursive: a change in a subdirectory is not reported, one at the top is.
    stream = Stream(envd, "WatchDir", {"path": base, "recursive": False}, timeout_ms=3000)
    try:
        assert stream.next() == (0, {"start": {}})
        assert envd.write_raw(f"{base}/sub/deep.txt", b"x").status == 200
        assert envd.write_raw(f"{base}/top.txt", b"x").status == 200
        names = set()
        while (message := stream.next())[0] != 2:
            names.add(message[1]["filesystem"]["name"])
        assert "top.txt" in names and "sub/deep.txt" not in names, names
    finally:
        stream.close()


def test_watch_dir_errors_end_the_stream_with_http_200(envd):
    for message, code in (({"path": f"/home/user/{unique('none')}"}, "not_found"),
                          ({"path": "/etc/passwd"}, "invalid_argument"),
                          ({"path": 7}, "invalid_argument")):
        stream = Stream(envd, "WatchDir", message, timeout_ms=5000)
        try:
            assert stream.resp.status == 200
            flags, end = stream.next()
            assert flags == 2 and end["error"]["code"] == code, (message, end)
        finally:
            stream.close()
    # A broken envelope.
    conn = envd.conn()
    try:
        h = envd.headers(**{"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"})
        conn.request("POST", FS + "WatchDir", body=b"\x00\x00\x00\x00\x09{}", headers=h)
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200 and body[0] == 2 and json.loads(body[5:])["error"]["code"] == "invalid_argument"
    finally:
        conn.close()


def test_polled_watchers(envd, front, sandbox):
    base = f"/home/user/{unique('poll')}"
    envd.ok("MakeDir", {"path": base})
    # (By pid: the MakeDir's own worker may still be on its way out when they are counted.)
    idle = worker_pids(front, sandbox)
    watcher = envd.ok("CreateWatcher", {"path": base, "recursive": True})["watcherId"]
    assert watcher
    watching = worker_pids(front, sandbox) - idle
    assert len(watching) == 1, watching  # it outlives the request
    assert envd.ok("GetWatcherEvents", {"watcherId": watcher}) in ({}, {"events": []})
    assert envd.write_raw(f"{base}/a.txt", b"a").status == 200
    envd.ok("MakeDir", {"path": f"{base}/d"})
    assert envd.write_raw(f"{base}/d/b.txt", b"b").status == 200
    envd.ok("Remove", {"path": f"{base}/a.txt"})
    seen = []

    def collected():
        seen.extend((e["name"], e["type"]) for e in envd.ok("GetWatcherEvents", {"watcherId": watcher}).get("events", []))
        return {("a.txt", "EVENT_TYPE_CREATE"), ("a.txt", "EVENT_TYPE_REMOVE"), ("d", "EVENT_TYPE_CREATE"),
                ("d/b.txt", "EVENT_TYPE_WRITE")} <= set(seen)

    assert harness.wait_until(collected, timeout=15), seen
    # Events come once: a later poll has only what happened since.
    later = envd.ok("GetWatcherEvents", {"watcherId": watcher}).get("events", [])
    assert {"name": "a.txt", "type": "EVENT_TYPE_CREATE"} not in later, later
    # Another sandbox's or an unknown id: not_found; proto names are accepted too.
    assert envd.error("GetWatcherEvents", {"watcherId": "w-nope"}) == (404, "not_found")
    assert envd.ok("GetWatcherEvents", {"watcher_id": watcher}) in ({}, {"events": []})
    assert envd.ok("RemoveWatcher", {"watcherId": watcher}) == {}
    assert harness.wait_until(lambda: not watching & worker_pids(front, sandbox), timeout=10)
    assert envd.error("GetWatcherEvents", {"watcherId": watcher}) == (404, "not_found")
    assert envd.error("RemoveWatcher", {"watcherId": watcher}) == (404, "not_found")
    assert envd.error("CreateWatcher", {"path": f"{base}/missing"}) == (404, "not_found")
    assert envd.error("CreateWatcher", {"path": "/etc/passwd"}) == (400, "invalid_argument")


def test_watchers_end_with_their_sandbox_and_nothing_leaks(front):
    r = e2b_api(front, "POST", "/v2/sandboxes", {"templateID": "base"})
    assert r.status == 201, r
    other = Envd(front, r.json())
    watcher = other.ok("CreateWatcher", {"path": "/home/user", "recursive": True})["watcherId"]
    stream = Stream(other, "WatchDir", {"path": "/home/user"}, timeout_ms=60000, keepalive=1)
    try:
        assert stream.next() == (0, {"start": {}})
        assert e2b_api(front, "DELETE", f"/sandboxes/{other.sandbox_id}").status == 204
        # The stream is cut (its worker died with the sandbox), as E2B's proxy cuts it when
        # envd goes: no end-stream envelope, the connection is reset, nothing hangs on.
        with pytest.raises(ConnectionResetError):
            while True:
                flags, message = stream.next()
                assert flags == 0 and "error" not in message, message
    finally:
        stream.close()
    r = other.rpc("GetWatcherEvents", {"watcherId": watcher})
    assert r.status == 502 and "was not found" in r.json()["message"], r
    harness.assert_no_leaks(front)


def test_files_100_mib_multipart_upload_is_streamed(envd, front):
    """A 100 MiB multipart upload (chunked, as the JS SDK sends it) and its gzip download move
    the daemon's memory by a few MiB, not by the file's size."""
    from test_files_stream import RssSampler, vm_rss_bytes
    path = f"/home/user/{unique('mp100')}.bin"
    block = os.urandom(1 << 20)
    boundary = "----e2bbig" + secrets.token_hex(6)
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{path}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode()
    digest = hashlib.sha256()

    def body():
        yield head
        for i in range(100):
            piece = bytes([i]) + block[1:]
            digest.update(piece)
            yield piece
        yield f"\r\n--{boundary}--\r\n".encode()

    pid = front.process.pid
    baseline = vm_rss_bytes(pid)
    conn = envd.conn(timeout=300)
    try:
        with RssSampler(pid) as up:
            conn.request("POST", "/files", body=body(), encode_chunked=True,
                         headers=envd.headers(**{"Content-Type": f"multipart/form-data; boundary={boundary}"}))
            resp = conn.getresponse()
            answer = resp.read()
        assert resp.status == 200, answer
        assert json.loads(answer) == [{"name": path.rsplit("/", 1)[1], "type": "file", "path": path}]
    finally:
        conn.close()
    conn = envd.conn(timeout=300)
    try:
        with RssSampler(pid) as down:
            conn.request("GET", "/files?path=" + urllib.parse.quote(path), headers=envd.headers(**{"Accept-Encoding": "gzip"}))
            resp = conn.getresponse()
            assert resp.status == 200 and resp.getheader("content-encoding") == "gzip"
            inflater = zlib.decompressobj(wbits=31)
            got = hashlib.sha256()
            while piece := resp.read(1 << 20):
                got.update(inflater.decompress(piece))
            got.update(inflater.flush())
    finally:
        conn.close()
    assert got.hexdigest() == digest.hexdigest()
    envd.ok("Remove", {"path": path})
    if not harness.SANITIZER:
        assert up.peak - baseline < 64 << 20, (baseline, up.peak)
        assert down.peak - baseline < 64 << 20, (baseline, down.peak)


def test_watch_dir_client_leaving_mid_stream(envd, front, sandbox):
    base = f"/home/user/{unique('leave')}"
    envd.ok("MakeDir", {"path": base})

    idle = worker_pids(front, sandbox)  # (by pid: MakeDir's worker may be on its way out)
    for i in range(3):
        stream = Stream(envd, "WatchDir", {"path": base}, timeout_ms=60000, keepalive=1)
        assert stream.next() == (0, {"start": {}})
        if i == 0:
            watching = worker_pids(front, sandbox) - idle
            assert len(watching) == 1, watching  # the watch's worker, while the stream lasts
        stream.close()
    time.sleep(1.5)  # a keepalive falls due on the dead streams meanwhile
    assert envd.write_raw(f"{base}/after.txt", b"x").status == 200
    assert envd.ok("Stat", {"path": f"{base}/after.txt"})["entry"]["size"] == "1"
    # The watch workers went with their streams.
    assert harness.wait_until(lambda: worker_pids(front, sandbox) <= idle, timeout=10)


def test_upload_metadata_rules(envd):
    """envd 0.6.2's rules for X-Metadata-* (printable ASCII, a key of at most 246 bytes, 4096
    bytes in all): anything else is 400 "invalid metadata" and writes nothing."""
    base = f"/home/user/{unique('meta')}"

    def upload(name, **metadata):
        h = envd.headers(**{"Content-Type": "application/octet-stream"},
                         **{f"X-Metadata-{k}": v for k, v in metadata.items()})
        return envd.request("POST", "/files?" + urllib.parse.urlencode({"path": f"{base}/{name}"}), b"x", h)

    r = upload("ok.txt", Mixed_Case="v")
    assert r.status == 200 and r.json()[0]["metadata"] == {"mixed_case": "v"}, r
    for name, metadata in (("long-key", {"k" * 247: "v"}), ("too-much", {f"k{i}": "v" * 1000 for i in range(5)}),
                           ("not-ascii", {"k": "caf\xe9"})):
        r = upload(name, **metadata)
        assert r.status == 400 and r.json()["message"].startswith("invalid metadata"), (name, r)
        assert envd.error("Stat", {"path": f"{base}/{name}"}) == (404, "not_found")
    assert upload("max-key", **{"k" * 246: "v"}).status == 200


def test_files_refused_while_the_body_is_awaited_answers_at_once(envd):
    """A write refused while the front waits for more of the body (1 GiB announced, a few bytes
    sent) is answered then, not when the client gives up."""
    conn = envd.conn(timeout=30)
    try:
        conn.putrequest("POST", "/files?" + urllib.parse.urlencode({"path": "/usr/never"}))
        for name, value in envd.headers(**{"Content-Type": "application/octet-stream",
                                           "Content-Length": str(1 << 30)}).items():
            conn.putheader(name, value)
        conn.endheaders()
        conn.send(b"only this")
        r = conn.getresponse()
        assert r.status == 403, r.status
        r.read()
        assert r.will_close
    finally:
        conn.close()
