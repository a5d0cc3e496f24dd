"""Images against Debian's own registry tooling, not ours: the CNCF distribution registry
(`docker-registry`, serving a temp dir on 127.0.0.1), skopeo (which puts images into it and reads
back what bulkhead pushed) and umoci (which unpacks what bulkhead pushed, as a second opinion on
its layers and config). oci_registry.py is a registry the tests control; this is one they don't.
Its auth: Basic (htpasswd), and Docker's token auth with a token server of the test's (JWTs
signed with Python's cryptography, a CA of the test's as docker-registry's rootcertbundle).

Each test skips when a tool it needs is not installed (scripts/install-deps.sh installs them).
Everything runs on loopback."""

import base64
import datetime
import fnmatch
import hashlib
import http.server
import io
import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import tarfile
import threading
import time
import urllib.parse
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

import harness
from oci_images import (Dir, File, Hardlink, Opaque, Symlink, Whiteout, build_image, build_index, host_files,
                        make_layer, make_tar, uncompressed, write_oci_layout)

REGISTRY_BIN = "/usr/bin/docker-registry"
PROGRAMS = ["/bin/sh", "/bin/cat", "/bin/ls", "/bin/ln", "/bin/rm", "/bin/mkdir", "/bin/chmod", "/usr/bin/find",
            "/usr/bin/sha256sum", "/usr/bin/env", "/usr/bin/id"]
ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}
HOST_ARCH = ARCHES.get(platform.machine(), platform.machine())
OTHER_ARCH = "arm64" if HOST_ARCH != "arm64" else "amd64"

CONFIG = {"Env": ["GREETING=hello via skopeo", "PATH=/usr/local/bin:/usr/bin:/bin"],
          "WorkingDir": "/home/app", "Cmd": ["/bin/cat", "/etc/motd"], "Labels": {"made-by": "skopeo"}}


def require(*tools: str):
    for tool in tools:
        if shutil.which(tool) is None and not os.access(tool, os.X_OK):
            pytest.skip(f"{tool} is not installed (scripts/install-deps.sh installs docker-registry, skopeo, umoci)")


# --------------------------------------------------------------------------------- tools

class DockerRegistry:
    """Debian's docker-registry (distribution 2.8) on 127.0.0.1 and a free port, storing in `root`;
    with `htpasswd` (lines "user:bcrypt-hash"), Basic auth on every route; with `token` (a
    TokenServer), Bearer tokens of that server on every route."""

    def __init__(self, root: Path, htpasswd: str | None = None, token: "TokenServer | None" = None):
        self.root = root
        self.htpasswd = htpasswd
        self.token = token
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.log_path = root / "registry.log"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _config(self) -> str:
        lines = ["version: 0.1",
                 "log:", "  level: info", "  formatter: text",
                 "storage:", f"  filesystem:", f"    rootdirectory: {self.root / 'data'}",
                 "  delete:", "    enabled: true",
                 "http:", f"  addr: 127.0.0.1:{self.port}", "  secret: bulkhead-test-secret"]
        if self.htpasswd is not None:
            (self.root / "htpasswd").write_text(self.htpasswd)
            lines += ["auth:", "  htpasswd:", "    realm: bulkhead-test", f"    path: {self.root / 'htpasswd'}"]
        if self.token is not None:
            lines += ["auth:", "  token:", f"    realm: {self.token.realm}", f"    service: {self.token.SERVICE}",
                      f"    issuer: {self.token.ISSUER}", f"    rootcertbundle: {self.token.root_cert_path}"]
        return "\n".join(lines) + "\n"

    def _answers(self) -> bool:
        try:
            conn = harness.http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/v2/")
            status = conn.getresponse().status
            conn.close()
            return status in (200, 401)
        except OSError:
            return False

    def start(self, timeout: float = 20) -> "DockerRegistry":
        self.root.mkdir(parents=True, exist_ok=True)
        # The registry reads REGISTRY_* variables as config: none of the caller's.
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
        for _ in range(5):  # a port taken between free_port() and the bind: another one
            self.port = harness.free_port()
            config = self.root / "config.yml"
            config.write_text(self._config())
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdin=subprocess.DEVNULL,
                                                stdout=log, stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True)
            harness.wait_until(lambda: self.process.poll() is not None or self._answers(), timeout)
            if self.process.poll() is None and self._answers():
                return self
            self.stop()
        raise RuntimeError(f"docker-registry did not start:\n{self.log_tail()}")

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def blob(self, repository: str, digest: str) -> bytes:
        """A blob as the registry serves it (an anonymous GET: for a registry without auth)."""
        conn = harness.http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", f"/v2/{repository}/blobs/{digest}")
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        assert response.status == 200, f"GET blob {digest} of {repository}: {response.status} {body[:300]!r}"
        return body

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def bcrypt_htpasswd(user: str, password: str) -> str | None:
    """An htpasswd line with a bcrypt hash (all docker-registry takes): from Python's bcrypt,
    apache2-utils' htpasswd, or libxcrypt's $2b$ through the standard crypt module; else None."""
    try:
        import bcrypt
        return f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n"
    except ImportError:
        pass
    if shutil.which("htpasswd"):
        done = subprocess.run(["htpasswd", "-nbB", "-C", "4", user, password], capture_output=True, text=True)
        if done.returncode == 0 and ":$2" in done.stdout:
            return done.stdout.strip() + "\n"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt
            hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
        if hashed and hashed.startswith("$2"):
            return f"{user}:{hashed}\n"
    except (ImportError, ValueError, AttributeError):
        pass
    return None


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenRequest:
    """One GET of the token endpoint, as the token server saw it (never the password)."""
    user: str | None          # the Basic user name presented, None: anonymous
    scopes: list[str]         # every scope asked for, as sent
    status: int               # 200, 400 (unknown service) or 401 (wrong credentials)
    granted: list[dict]       # the `access` claim of the token issued


def parse_scope(scope: str) -> tuple[str, str, frozenset]:
    """"repository:team/app:push,pull" -> ("repository", "team/app", {"pull", "push"}): the order of
    actions in a challenge's scope is docker-registry's (Go map) order, i.e. none."""
    kind, _, rest = scope.partition(":")
    name, _, actions = rest.rpartition(":")
    return kind, name, frozenset(a for a in actions.split(",") if a)


class TokenServer:
    """Docker's token protocol (docker-registry's spec/auth/token.md) on 127.0.0.1, in a thread:
    GET /token?service=SERVICE&scope=repository:NAME:ACTIONS (any number of scopes), anonymous
    or with Basic credentials, answers {"token": JWT, ...}. The JWT is ES256, its header's x5c the
    certificate of the signing key, which a CA the test makes issued; docker-registry trusts that
    CA (rootcertbundle). The access granted is, of what was asked, what `grants` allows the user
    (None: anonymous; repository patterns in fnmatch syntax); a scope not allowed at all is left
    out of the token, not refused (as Docker's token servers do). Wrong credentials: 401.
    `forge`: tokens signed by a key outside the CA's (docker-registry must refuse them).

    (docker-registry 2.8 also takes: the root itself in x5c, RS256, or `kid` as the libtrust
    fingerprint of a key whose certificate is in rootcertbundle. `aud` must be a string.)"""

    SERVICE = "bulkhead-test-registry"
    ISSUER = "bulkhead-test-token-server"

    def __init__(self, root: Path, users: dict[str, str], grants: dict[str | None, dict[str, set[str]]],
                 lifetime: int = 300):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.users = users
        self.grants = grants
        self.lifetime = lifetime
        self.forge = False
        self.requests: list[TokenRequest] = []
        self._lock = threading.Lock()

        def certificate(name: str, key, issuer: str, issuer_key, ca: bool):
            now = datetime.datetime.now(datetime.timezone.utc)
            builder = (x509.CertificateBuilder()
                       .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                       .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                       .public_key(key.public_key()).serial_number(x509.random_serial_number())
                       .not_valid_before(now - datetime.timedelta(hours=1))
                       .not_valid_after(now + datetime.timedelta(days=1))
                       .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                       .add_extension(x509.KeyUsage(digital_signature=not ca, key_cert_sign=ca, crl_sign=ca,
                                                    content_commitment=False, key_encipherment=False,
                                                    data_encipherment=False, key_agreement=False,
                                                    encipher_only=False, decipher_only=False), critical=True))
            return builder.sign(issuer_key, hashes.SHA256())

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = certificate("bulkhead test token CA", ca_key, "bulkhead test token CA", ca_key, True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        signer = certificate("bulkhead test token signer", self._key, "bulkhead test token CA", ca_key, False)
        self._x5c = [base64.b64encode(signer.public_bytes(serialization.Encoding.DER)).decode()]
        self._forger = ec.generate_private_key(ec.SECP256R1())
        forger = certificate("a stranger", self._forger, "a stranger", self._forger, False)
        self._forged_x5c = [base64.b64encode(forger.public_bytes(serialization.Encoding.DER)).decode()]
        self._hashes, self._ec = hashes, ec

        root.mkdir(parents=True, exist_ok=True)
        self.root_cert_path = root / "token-ca.pem"
        self.root_cert_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))

        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                status, body, headers = owner._answer(url.path, query, self.headers.get("Authorization", ""))
                data = json.dumps(body).encode()
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", "Content-Length": str(len(data)), **headers}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="token-server", daemon=True)
        self._thread.start()

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/token"

    def stop(self):
        self._server.shutdown()
        self._server.server_close()

    def taken(self) -> list[TokenRequest]:
        """The requests since the last call."""
        with self._lock:
            taken, self.requests = self.requests, []
        return taken

    def _user(self, authorization: str) -> str | None | bool:
        """The Basic user, None without credentials, False for wrong ones."""
        if not authorization:
            return None
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except ValueError:
            return False
        return user if user in self.users and secrets.compare_digest(self.users[user], password) else False

    def _allowed(self, user: str | None, name: str) -> set[str]:
        allowed = set()
        for pattern, actions in self.grants.get(user, {}).items():
            if fnmatch.fnmatchcase(name, pattern):
                allowed |= set(actions)
        return allowed

    def _answer(self, path: str, query: dict, authorization: str) -> tuple[int, dict, dict]:
        scopes = [s for value in query.get("scope", []) for s in value.split(" ") if s]
        user = self._user(authorization)

        def record(status: int, granted: list[dict]):
            shown = None if user is None else (user if user else "(wrong credentials)")
            with self._lock:
                self.requests.append(TokenRequest(shown, scopes, status, granted))

        if path != "/token" or query.get("service") != [self.SERVICE]:
            record(400, [])
            return 400, {"errors": [{"code": "DENIED", "message": "unknown service"}]}, {}
        if user is False:
            record(401, [])
            return 401, {"errors": [{"code": "UNAUTHORIZED", "message": "wrong user name or password"}]}, \
                {"WWW-Authenticate": 'Basic realm="bulkhead test token server"'}
        access = []
        for scope in scopes:
            kind, name, actions = parse_scope(scope)
            if kind == "repository" and (actions & self._allowed(user, name)):
                access.append({"type": kind, "name": name, "actions": sorted(actions & self._allowed(user, name))})
        record(200, access)
        now = int(time.time())
        claims = {"iss": self.ISSUER, "sub": user or "", "aud": self.SERVICE, "exp": now + self.lifetime,
                  "nbf": now - 5, "iat": now, "jti": secrets.token_hex(12), "access": access}
        token = self._sign(claims)
        return 200, {"token": token, "access_token": token, "expires_in": self.lifetime,
                     "issued_at": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime(
                         "%Y-%m-%dT%H:%M:%SZ")}, {}

    def _sign(self, claims: dict) -> str:
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
        key, x5c = (self._forger, self._forged_x5c) if self.forge else (self._key, self._x5c)
        header = {"typ": "JWT", "alg": "ES256", "x5c": x5c}
        signed = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
        # JWS ES256: r and s, 32 bytes each (cryptography gives DER).
        r, s = decode_dss_signature(key.sign(signed.encode(), self._ec.ECDSA(self._hashes.SHA256())))
        return signed + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


class Skopeo:
    """skopeo with an empty auth file of its own (no login of the host's is used)."""

    def __init__(self, workdir: Path):
        workdir.mkdir(parents=True, exist_ok=True)
        auth = workdir / "skopeo-auth.json"
        auth.write_text('{"auths": {}}')
        self.env = {**os.environ, "REGISTRY_AUTH_FILE": str(auth), "TMPDIR": str(workdir)}

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(["skopeo", "--insecure-policy", *args], capture_output=True, text=True, timeout=60,
                              env=self.env)
        if check:
            assert done.returncode == 0, f"skopeo {' '.join(args)} -> {done.returncode}:\n{done.stderr}"
        return done

    def inspect(self, ref: str, *extra: str, raw: bool = False):
        done = self("inspect", "--tls-verify=false", *(("--raw",) if raw else ()), *extra, f"docker://{ref}")
        return done.stdout.encode() if raw else json.loads(done.stdout)


# --------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def work(session_dir) -> Path:
    path = session_dir / "realreg"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="module")
def registry(work, request):
    require(REGISTRY_BIN)
    r = DockerRegistry(work / "registry")
    request.addfinalizer(r.stop)
    return r.start()


@pytest.fixture(scope="module")
def skopeo(work):
    require("skopeo")
    return Skopeo(work / "skopeo")


@pytest.fixture(scope="module")
def rd(session_dir, request):
    """A daemon of these tests, told plain HTTP is fine on loopback."""
    d = harness.Daemon(state_dir=session_dir / "realreg-d", log_path=session_dir / "daemon-realreg.log")
    d.extra_args = ("--insecure-registry", "127.0.0.1")
    request.addfinalizer(d.destroy)
    d.start()
    return d


@pytest.fixture
def rc(rd):
    yield rd.client()
    assert rd.running(), f"the daemon died (exit {rd.process.returncode}):\n{rd.log_tail()}"


@pytest.fixture(scope="module")
def app_image():
    base = make_layer(host_files(PROGRAMS) + [
        Dir("etc", 0o755),
        File("etc/motd", b"from the base\n"),
        File("etc/gone", b"whited out above\n"),
        Dir("cache", 0o755),
        File("cache/old", b"lower\n"),
        Dir("srv", 0o755),
        File("srv/secret", b"for uid 1000 only\n", 0o600, 1000, 1000),
        Symlink("srv/motd", "../etc/motd"),
        Symlink("srv/abs", "/etc/motd"),
        File("bin/suid", b"#!/bin/sh\n", 0o4755),
        Dir("home", 0o755),
        Dir("home/app", 0o750, 1000, 1000),
        Dir("scratch", 0o1777),
    ])
    top = make_layer([
        File("etc/motd", b"from the top\n"),
        Whiteout("etc/gone"),
        Opaque("cache"),
        File("cache/new", b"upper\n"),
        Hardlink("srv/again", "srv/secret"),
    ], "zstd")
    return build_image([base, top], CONFIG)


def quoted(ref: str) -> str:
    return urllib.parse.quote(ref, safe="")


def pull(client, ref: str, **body):
    return client.post("/v1/images/pull", {"image": ref, **body}, timeout=120)


def push(client, image: str, target: str, **body):
    return client.post("/v1/images/push", {"image": image, "target": target, **body}, timeout=120)


def sandbox_of(client, request, image: str) -> dict:
    sb = client.create(image=image)
    request.addfinalizer(lambda: client.delete(f"/v1/sandboxes/{sb['id']}"))
    return sb


def sh(client, sandbox_id: str, script: str) -> str:
    r = client.exec(sandbox_id, ["/bin/sh", "-c", script])
    assert r["exit_code"] == 0, r
    return r["stdout"]


def cli(daemon, *args, timeout=120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env["BULKHEAD_STATE"] = str(daemon.state_dir)
    return subprocess.run([str(harness.BULKHEAD), *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def app_ref(registry, skopeo, app_image, work) -> str:
    """The app image as skopeo put it into docker-registry from an OCI layout."""
    layout = write_oci_layout(work / "app-layout", app_image, "1.0")
    skopeo("copy", "--dest-tls-verify=false", f"oci:{layout}:1.0", f"docker://{registry.host}/team/app:1.0")
    return f"{registry.host}/team/app:1.0"


# --------------------------------------------------------------------------------- trees

# Mount points of every sandbox (the image has these directories too, with its own owners and
# modes): compared by presence only, their contents not at all. And files a runtime may bind
# over the image's (none of these images has them).
MOUNTED = {"proc", "sys", "dev"}
RUNTIME_FILES = {"etc/hosts", "etc/hostname", "etc/resolv.conf"}

# For every entry: "TYPE MODE UID GID PATH -> TARGET" (links) or "... PATH sha256" (files).
SANDBOX_LISTING = r"""
cd / && find . -xdev -mindepth 1 -printf '%y %m %U %G %P\t%l\n' | while IFS="$(printf '\t')" read -r head link; do
  case "$head" in
    f*) set -- $(sha256sum "${head#* * * * }"); echo "$head $1" ;;
    l*) echo "$head -> $link" ;;
    *) echo "$head" ;;
  esac
done
"""


def sandbox_tree(client, sandbox_id: str) -> dict[str, str]:
    """path -> "TYPE MODE UID GID [-> target | sha256]" of the sandbox's root, as it sees it."""
    tree = {}
    for line in sh(client, sandbox_id, SANDBOX_LISTING).splitlines():
        kind, mode, uid, gid, rest = line.split(" ", 4)
        if kind == "l":
            path, target = rest.split(" -> ", 1)
            tree[path] = f"l {int(mode, 8):o} {uid} {gid} -> {target}"
        elif kind == "f":
            path, digest = rest.rsplit(" ", 1)
            tree[path] = f"f {int(mode, 8):o} {uid} {gid} {digest}"
        else:
            tree[rest] = f"{kind} {int(mode, 8):o} {uid} {gid}"
    return drop_runtime_entries(tree)


def host_tree(root: Path) -> dict[str, str]:
    """The same listing of a directory on the host (umoci's rootfs)."""
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            path = str(full.relative_to(root))
            st = full.lstat()
            mode = f"{st.st_mode & 0o7777:o} {st.st_uid} {st.st_gid}"
            if full.is_symlink():
                tree[path] = f"l 777 {st.st_uid} {st.st_gid} -> {os.readlink(full)}"
            elif full.is_dir():
                tree[path] = f"d {mode}"
            elif full.is_file():
                tree[path] = f"f {mode} {hashlib.sha256(full.read_bytes()).hexdigest()}"
            else:
                tree[path] = f"? {mode}"
    return drop_runtime_entries(tree)


def drop_runtime_entries(tree: dict[str, str]) -> dict[str, str]:
    kept = {}
    for path, value in tree.items():
        if path in RUNTIME_FILES or path.split("/", 1)[0] in MOUNTED and "/" in path:
            continue
        kept[path] = "a mount point" if path in MOUNTED else value
    return kept


def tree_difference(ours: dict, theirs: dict) -> str:
    lines = []
    for path in sorted(set(ours) | set(theirs)):
        if ours.get(path) != theirs.get(path):
            lines.append(f"{path}: sandbox {ours.get(path)!r} / umoci {theirs.get(path)!r}")
    return "\n".join(lines[:60])


def umoci_unpack(skopeo, ref: str, where: Path) -> tuple[Path, dict]:
    """skopeo copies `ref` to an OCI layout, umoci unpacks it: (its rootfs, its runtime config)."""
    require("umoci")
    where.mkdir(parents=True, exist_ok=True)
    layout = where / "layout"
    skopeo("copy", "--src-tls-verify=false", f"docker://{ref}", f"oci:{layout}:pushed")
    bundle = where / "bundle"
    # As root (as the suite runs), umoci keeps the layers' owners: no --rootless.
    done = subprocess.run(["umoci", "unpack", "--image", f"{layout}:pushed", str(bundle)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"umoci unpack {ref}:\n{done.stderr}"
    return bundle / "rootfs", json.loads((bundle / "config.json").read_text())


def check_layers_match_config(skopeo, registry: DockerRegistry, ref: str):
    """Every layer docker-registry serves for `ref` (a tag of it) is what the manifest says and
    unpacks to the diff_id the config names; answers (manifest, config)."""
    manifest = json.loads(skopeo.inspect(ref, raw=True))
    config = json.loads(skopeo.inspect(ref, "--config", raw=True))
    assert len(config["rootfs"]["diff_ids"]) == len(manifest["layers"]), (manifest, config)
    repository = ref.removeprefix(registry.host + "/").rsplit(":", 1)[0]
    for layer, diff_id in zip(manifest["layers"], config["rootfs"]["diff_ids"]):
        blob = registry.blob(repository, layer["digest"])
        assert "sha256:" + hashlib.sha256(blob).hexdigest() == layer["digest"] and len(blob) == layer["size"]
        tar_bytes = uncompressed(blob)
        assert "sha256:" + hashlib.sha256(tar_bytes).hexdigest() == diff_id, layer
        with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:  # a tar Python reads too
            assert tar.getmembers(), "an empty layer"
    return manifest, config


# --------------------------------------------------------------------------------- tests

def test_an_image_skopeo_put_into_docker_registry_pulls_and_runs(app_ref, app_image, rd, rc, request):
    r = pull(rc, app_ref)
    assert r.status == 201, r
    image = r.json()
    # skopeo copies an OCI layout without re-encoding and the registry serves it as stored:
    # what bulkhead pulled is the manifest the test wrote, byte for byte.
    assert image["digest"] == app_image.digest
    assert image["references"] == [app_ref]
    assert image["config"]["cmd"] == ["/bin/cat", "/etc/motd"]
    assert image["config"]["workdir"] == "/home/app" and image["config"]["labels"] == {"made-by": "skopeo"}

    sb = sandbox_of(rc, request, app_ref)
    assert sb["workdir"] == "/home/app" and sb["env"]["GREETING"] == "hello via skopeo"
    out = sh(rc, sb["id"], 'cat /etc/motd; echo "$GREETING"; pwd; ls /etc; ls /cache; cat /srv/again; '
                           'cat /srv/motd; ls -l /bin/suid; ls -ldn /scratch /home/app /srv/secret')
    lines = out.splitlines()
    assert lines[:3] == ["from the top", "hello via skopeo", "/home/app"], out
    assert "gone" not in out and "old" not in out and "new" in out, out
    assert "for uid 1000 only" in out and out.count("from the top") == 2, out
    assert "-rwsr-xr-x" in out and "drwxrwxrwt" in out, out
    assert " 1000 1000 " in out, out
    # No command: the image's Cmd, in its WorkingDir, with its Env.
    done = cli(rd, "run", "--image", app_ref)
    assert done.returncode == 0 and done.stdout == "from the top\n", done
    done = cli(rd, "run", "--image", app_ref, "--", "/bin/sh", "-c", 'echo "$GREETING in $(pwd)"')
    assert done.stdout == "hello via skopeo in /home/app\n", done


def test_a_pushed_pulled_image_is_in_docker_registry_byte_for_byte(registry, skopeo, app_ref, app_image, rc):
    assert pull(rc, app_ref).status == 201
    target = f"{registry.host}/mirror/app:1"
    r = push(rc, app_ref, target)
    assert r.status == 200, (r, registry.log_tail())
    assert r.json() == {"reference": target, "digest": app_image.digest}
    seen = skopeo.inspect(target)
    assert seen["Digest"] == app_image.digest
    assert seen["Layers"] == app_image.layer_digests()
    assert seen["Architecture"] == "amd64" and seen["Os"] == "linux"
    assert skopeo.inspect(target, raw=True) == app_image.manifest
    assert skopeo.inspect(target, "--config", raw=True) == app_image.config
    check_layers_match_config(skopeo, registry, target)

    # Again, streamed: the registry says it has every blob (HEAD), so none is sent twice; and a
    # target named by the manifest's digest rather than a tag.
    again = rc.request("POST", "/v1/images/push", {"image": app_ref, "target": f"{registry.host}/mirror/app:2"},
                       headers={"Accept": "application/x-ndjson"}, timeout=120)
    events = [json.loads(line) for line in again.body.decode().splitlines() if line]
    assert events[-1]["status"] == "done" and events[-1]["pushed"]["digest"] == app_image.digest, events
    assert {e["status"] for e in events[1:-1]} == {"exists"}, events
    by_digest = f"{registry.host}/mirror/app@{app_image.digest}"
    r = push(rc, app_ref, by_digest)
    assert r.status == 200 and r.json()["digest"] == app_image.digest, (r, registry.log_tail())
    assert skopeo.inspect(by_digest)["Digest"] == app_image.digest
    # And a pull by digest from docker-registry.
    r = pull(rc, by_digest)
    assert r.status == 201 and r.json()["digest"] == app_image.digest, r


def test_an_imported_image_pushed_unpacks_with_umoci_as_the_sandbox_sees_it(registry, skopeo, work, rc, request):
    """bulkhead writes this image's only layer and its config itself: another tool must read them
    to the same tree (names, owners, modes, links, contents) that a sandbox of it sees."""
    require("umoci")
    long_dir = "deep/" + "d" * 90
    tarball = make_tar(host_files(PROGRAMS) + [
        Dir("etc", 0o755),
        File("etc/motd", b"imported\n", 0o640, 1000, 1000),
        Dir("private", 0o700, 1000, 1001),
        File("private/key", b"k" * 5000, 0o400, 1000, 1001),
        File("bin/suid", b"#!/bin/sh\n", 0o4755),
        File("bin/sgid", b"#!/bin/sh\n", 0o2711, 0, 50),
        Dir("tmpish", 0o1777),
        Symlink("etc/motd.rel", "motd"),
        Symlink("etc/motd.abs", "/etc/motd"),
        Symlink("dangling", "/nowhere/at/all"),
        Hardlink("etc/motd.hard", "etc/motd"),
        File("empty", b""),
        Dir("deep", 0o755),
        Dir(long_dir, 0o755),
        File(long_dir + "/" + "f" * 80, b"a path longer than ustar's 100 bytes\n"),
        File("caf\u00e9.txt", "non-ASCII name\n".encode()),
        File("big.bin", os.urandom(16 << 20)),  # a layer of ~21 MB, sent in one PUT
    ])
    name = "realreg-imported"
    r = rc.request("PUT", f"/v1/images/{name}", tarball, headers={"Content-Type": "application/x-tar"})
    assert r.status == 201, r
    request.addfinalizer(lambda: rc.delete(f"/v1/images/{name}"))

    target = f"{registry.host}/team/imported:1"
    r = push(rc, name, target)
    assert r.status == 200, (r, registry.log_tail())
    digest = r.json()["digest"]
    seen = skopeo.inspect(target)
    assert seen["Digest"] == digest and len(seen["Layers"]) == 1, seen
    check_layers_match_config(skopeo, registry, target)

    rootfs, _ = umoci_unpack(skopeo, target, work / "umoci-imported")
    sb = sandbox_of(rc, request, name)
    ours, theirs = sandbox_tree(rc, sb["id"]), host_tree(rootfs)
    assert ours == theirs, "the sandbox and umoci see different trees:\n" + tree_difference(ours, theirs)
    assert theirs["private/key"].startswith("f 400 1000 1001 ") and theirs["bin/suid"].startswith("f 4755 0 0 ")
    assert theirs["etc/motd.abs"] == "l 777 0 0 -> /etc/motd"
    assert os.stat(rootfs / "etc/motd").st_ino == os.stat(rootfs / "etc/motd.hard").st_ino, "a hard link stays one"

    # And back: bulkhead pulls what it pushed (its own layer, through someone else's registry).
    r = pull(rc, target)
    assert r.status == 201 and r.json()["digest"] == digest, r


def test_a_built_image_pushed_carries_its_config_to_umoci(registry, skopeo, app_ref, work, rd, rc, request):
    """A Dockerfile build FROM the skopeo-pushed image (a whiteout-made tree beneath): pushed, its
    config is the runtime config umoci derives, and its layer the tree the sandbox sees."""
    require("umoci")
    context = work / "build-context"
    context.mkdir(exist_ok=True)
    (context / "note.txt").write_text("built by bulkhead\n")
    (context / "Dockerfile").write_text(f"""FROM {app_ref}
ENV BUILT=yes
WORKDIR /srv/built
COPY note.txt ./
RUN chmod 0640 note.txt && ln -s note.txt link && rm /cache/new && mkdir -p /var/empty && chmod 0711 /var/empty
CMD ["/bin/cat", "note.txt"]
""")
    name = "realreg-built"
    done = cli(rd, "build", "-t", name, str(context), timeout=120)
    assert done.returncode == 0, done
    request.addfinalizer(lambda: rc.delete(f"/v1/images/{name}"))

    target = f"{registry.host}/team/built:1"
    r = push(rc, name, target)
    assert r.status == 200, (r, registry.log_tail())
    _, config = check_layers_match_config(skopeo, registry, target)
    assert config["config"]["Cmd"] == ["/bin/cat", "note.txt"] and config["config"]["WorkingDir"] == "/srv/built"
    assert config["architecture"] == HOST_ARCH and config["os"] == "linux"

    rootfs, runtime = umoci_unpack(skopeo, target, work / "umoci-built")
    assert runtime["process"]["args"] == ["/bin/cat", "note.txt"]
    assert runtime["process"]["cwd"] == "/srv/built"
    assert {"BUILT=yes", "GREETING=hello via skopeo"} <= set(runtime["process"]["env"]), runtime["process"]["env"]
    sb = sandbox_of(rc, request, name)
    ours, theirs = sandbox_tree(rc, sb["id"]), host_tree(rootfs)
    assert ours == theirs, "the sandbox and umoci see different trees:\n" + tree_difference(ours, theirs)
    assert "cache/new" not in theirs and "etc/gone" not in theirs and "cache/old" not in theirs
    assert theirs["srv/built/link"].endswith("-> note.txt") and theirs["srv/built/note.txt"].startswith("f 640 ")
    assert (rootfs / "srv/built/note.txt").read_text() == "built by bulkhead\n"


def test_basic_auth_of_docker_registry(skopeo, work, app_image, rc):
    require(REGISTRY_BIN)
    entry = bcrypt_htpasswd("alice", "s3cret")
    if entry is None:
        pytest.skip("no way to make a bcrypt htpasswd entry: no Python bcrypt, no htpasswd -B, no $2b$ in crypt(3)")
    reg = DockerRegistry(work / "registry-auth", htpasswd=entry).start()
    try:
        layout = write_oci_layout(work / "auth-layout", app_image, "1")
        skopeo("copy", "--dest-tls-verify=false", "--dest-creds", "alice:s3cret", f"oci:{layout}:1",
               f"docker://{reg.host}/team/private:1")
        ref = f"{reg.host}/team/private:1"
        r = pull(rc, ref)
        assert harness.assert_error_shape(r, 401)["code"] == "registry_unauthorized", r
        r = pull(rc, ref, auth={"username": "alice", "password": "not-her-pa55"})
        harness.assert_error_shape(r, 401)
        assert "pa55" not in r.body.decode() and "s3cret" not in r.body.decode(), "no password in an error"
        r = pull(rc, ref, auth={"username": "alice", "password": "s3cret"})
        assert r.status == 201 and r.json()["digest"] == app_image.digest, r

        # Push: refused without the login, done with it.
        target = f"{reg.host}/team/copy:1"
        r = push(rc, ref, target)
        assert harness.assert_error_shape(r, 401)["code"] == "registry_unauthorized", r
        r = push(rc, ref, target, auth={"username": "alice", "password": "s3cret"})
        assert r.status == 200 and r.json()["digest"] == app_image.digest, (r, reg.log_tail())
        assert skopeo.inspect(target, "--creds", "alice:s3cret")["Digest"] == app_image.digest
        assert skopeo("inspect", "--tls-verify=false", f"docker://{target}", check=False).returncode != 0
    finally:
        reg.stop()


@pytest.mark.parametrize("fmt", ["oci", "v2s2"])
def test_an_index_skopeo_copied_with_all_gives_the_hosts_platform(registry, skopeo, work, rc, request, fmt):
    """`skopeo copy --all` of an index (the other arch listed first); with v2s2, skopeo itself
    rewrites it as a Docker manifest list of Docker manifests."""
    other = build_image([make_layer([File("arch", f"{OTHER_ARCH}\n".encode())])], {}, architecture=OTHER_ARCH)
    mine = build_image([make_layer(host_files(["/bin/cat"]) + [File("arch", f"{HOST_ARCH}\n".encode())])],
                       {"Cmd": ["/bin/cat", "/arch"]}, architecture=HOST_ARCH)
    index = build_index([(other, {"os": "linux", "architecture": OTHER_ARCH}),
                         (mine, {"os": "linux", "architecture": HOST_ARCH})])
    layout = write_oci_layout(work / f"index-{fmt}", index, "1")
    ref = f"{registry.host}/multi/{fmt}:1"
    skopeo("copy", "--all", "--format", fmt, "--dest-tls-verify=false", f"oci:{layout}:1", f"docker://{ref}")

    listed = json.loads(skopeo.inspect(ref, raw=True))
    wanted = "application/vnd.oci.image.index.v1+json" if fmt == "oci" else \
        "application/vnd.docker.distribution.manifest.list.v2+json"
    assert listed["mediaType"] == wanted, listed
    arches = [m["platform"]["architecture"] for m in listed["manifests"]]
    assert arches == [OTHER_ARCH, HOST_ARCH], arches
    host_digest = listed["manifests"][1]["digest"]
    if fmt == "oci":
        assert host_digest == mine.digest

    r = pull(rc, ref)
    assert r.status == 201, r
    assert r.json()["digest"] == host_digest, "the host's platform, though listed second"
    assert r.json()["config"]["architecture"] == HOST_ARCH
    sb = sandbox_of(rc, request, ref)
    r = rc.exec(sb["id"], ["/bin/cat", "/arch"])  # (no shell in this image)
    assert r["exit_code"] == 0 and r["stdout"] == f"{HOST_ARCH}\n", r
    # What was pulled from the list goes back as it came (a Docker manifest stays one).
    mirror = f"{registry.host}/mirror/{fmt}:1"
    r = push(rc, ref, mirror)
    assert r.status == 200 and r.json()["digest"] == host_digest, (r, registry.log_tail())
    assert skopeo.inspect(mirror, raw=True) == skopeo.inspect(f"{registry.host}/multi/{fmt}@{host_digest}", raw=True)
    r = pull(rc, ref, platform=f"linux/{OTHER_ARCH}")
    assert r.status == 201 and r.json()["digest"] == listed["manifests"][0]["digest"], r


# --------------------------------------------------------------------------------- token auth

ALICE, ALICE_PASSWORD = "alice", "al1ce-pa55"     # pull and push in team/*; pull and push of public/app
READER, READER_PASSWORD = "reader", "r3ader-pa55"  # pull of team/private only (and of public/app)
TOKEN_GRANTS = {
    None: {"public/app": {"pull"}},
    ALICE: {"team/*": {"pull", "push"}, "public/app": {"pull", "push"}},
    READER: {"team/private": {"pull"}, "public/app": {"pull"}},
}


@dataclass
class TokenRegistry:
    registry: DockerRegistry
    tokens: TokenServer
    public: str   # anyone may pull it
    private: str  # alice and reader may pull it; only alice may push to team/*


@pytest.fixture(scope="module")
def token_registry(work, skopeo, app_image, request) -> TokenRegistry:
    """docker-registry with `auth: token:` in front of it, the TokenServer its realm; skopeo puts
    the app image in as alice (through the token dance too) at public/app:1 and team/private:1."""
    require(REGISTRY_BIN)
    try:
        import cryptography  # noqa: F401
    except ImportError:
        pytest.skip("Python's cryptography module is missing (scripts/install-deps.sh installs python3-cryptography)")
    tokens = TokenServer(work / "token-server", {ALICE: ALICE_PASSWORD, READER: READER_PASSWORD}, TOKEN_GRANTS)
    request.addfinalizer(tokens.stop)
    reg = DockerRegistry(work / "registry-token", token=tokens)
    request.addfinalizer(reg.stop)
    reg.start()
    layout = write_oci_layout(work / "token-layout", app_image, "1")
    refs = []
    for repository in ("public/app", "team/private"):
        refs.append(f"{reg.host}/{repository}:1")
        skopeo("copy", "--dest-tls-verify=false", "--dest-creds", f"{ALICE}:{ALICE_PASSWORD}", f"oci:{layout}:1",
               f"docker://{refs[-1]}")
    assert any(r.user == ALICE and r.status == 200 for r in tokens.taken()), "skopeo got no token"
    return TokenRegistry(reg, tokens, *refs)


def scopes_asked(requests: list[TokenRequest]) -> set[tuple]:
    """{(user, repository name, frozenset of actions)} of every scope asked for."""
    return {(r.user, *parse_scope(scope)[1:]) for r in requests for scope in r.scopes}


def error_of(r, status: int | tuple) -> dict:
    error = harness.assert_error_shape(r, status)
    for secret in (ALICE_PASSWORD, READER_PASSWORD, "wr0ng-pa55"):
        assert secret not in r.body.decode(), f"a password in an error: {r!r}"
    return error


def exists_in(tr: TokenRegistry, skopeo, ref: str) -> bool:
    done = skopeo("inspect", "--tls-verify=false", "--creds", f"{ALICE}:{ALICE_PASSWORD}", f"docker://{ref}",
                  check=False)
    return done.returncode == 0


def test_token_auth_anonymous_pulls_what_is_public_and_pushes_nothing(token_registry, skopeo, app_image, rc):
    tr, host = token_registry, token_registry.registry.host
    tr.tokens.taken()
    r = pull(rc, tr.public)
    assert r.status == 201 and r.json()["digest"] == app_image.digest, (r, tr.registry.log_tail())
    asked = tr.tokens.taken()
    assert asked and all(t.status == 200 for t in asked), asked
    assert scopes_asked(asked) == {(None, "public/app", frozenset({"pull"}))}, asked

    # What anonymous may not pull: the token server gives a token without it, the registry
    # refuses that token (insufficient_scope), bulkhead says so.
    r = pull(rc, tr.private)
    assert error_of(r, 401)["code"] == "registry_unauthorized", (r, tr.registry.log_tail())
    assert scopes_asked(tr.tokens.taken()) == {(None, "team/private", frozenset({"pull"}))}

    # Push: anonymous gets pull only, even of the public repository.
    target = f"{host}/public/app:anon"
    r = push(rc, tr.public, target)
    assert error_of(r, 401)["code"] == "registry_unauthorized", (r, tr.registry.log_tail())
    asked = tr.tokens.taken()
    assert (None, "public/app", frozenset({"pull", "push"})) in scopes_asked(asked), asked
    assert {name for _, name, _ in scopes_asked(asked)} == {"public/app"}, asked
    assert all(g["actions"] == ["pull"] for t in asked for g in t.granted), asked
    assert not exists_in(tr, skopeo, target)


def test_token_auth_login_pulls_and_pushes(token_registry, skopeo, app_image, rc):
    tr, host = token_registry, token_registry.registry.host
    alice = {"username": ALICE, "password": ALICE_PASSWORD}
    tr.tokens.taken()
    r = pull(rc, tr.private, auth=alice)
    assert r.status == 201 and r.json()["digest"] == app_image.digest, (r, tr.registry.log_tail())
    assert scopes_asked(tr.tokens.taken()) == {(ALICE, "team/private", frozenset({"pull"}))}

    target = f"{host}/team/pushed:1"
    r = push(rc, tr.private, target, auth=alice)
    assert r.status == 200 and r.json() == {"reference": target, "digest": app_image.digest}, \
        (r, tr.registry.log_tail())
    # bulkhead answers each challenge with the scope it names: the blob HEADs' (pull), then the
    # upload's (pull,push); one token each, kept for the rest of the push. No cross-repository
    # mount, so nothing of team/private is asked for.
    asked = tr.tokens.taken()
    assert (ALICE, "team/pushed", frozenset({"pull", "push"})) in scopes_asked(asked), asked
    assert scopes_asked(asked) <= {(ALICE, "team/pushed", frozenset({"pull"})),
                                   (ALICE, "team/pushed", frozenset({"pull", "push"}))}, asked
    assert len(asked) <= 2, asked
    seen = skopeo.inspect(target, "--creds", f"{ALICE}:{ALICE_PASSWORD}")
    assert seen["Digest"] == app_image.digest and seen["Layers"] == app_image.layer_digests()
    assert skopeo.inspect(target, "--creds", f"{ALICE}:{ALICE_PASSWORD}", raw=True) == app_image.manifest
    assert skopeo("inspect", "--tls-verify=false", f"docker://{target}", check=False).returncode != 0

    # Back from where it went, by digest.
    r = pull(rc, f"{host}/team/pushed@{app_image.digest}", auth=alice)
    assert r.status == 201 and r.json()["digest"] == app_image.digest, r

    # A wrong password: the token server answers 401, and so does bulkhead, without the password.
    wrong = {"username": ALICE, "password": "wr0ng-pa55"}
    for attempt in (lambda: pull(rc, tr.private, auth=wrong),
                    lambda: push(rc, tr.private, f"{host}/team/pushed:wrong", auth=wrong)):
        tr.tokens.taken()
        r = attempt()
        assert error_of(r, 401)["code"] == "registry_unauthorized", r
        asked = tr.tokens.taken()
        assert asked and all(t.status == 401 and t.user == "(wrong credentials)" for t in asked), asked
    assert not exists_in(tr, skopeo, f"{host}/team/pushed:wrong")


def test_token_auth_a_pull_only_grant_pushes_nothing(token_registry, skopeo, app_image, rc):
    tr, host = token_registry, token_registry.registry.host
    reader = {"username": READER, "password": READER_PASSWORD}
    tr.tokens.taken()
    r = pull(rc, tr.private, auth=reader)
    assert r.status == 201 and r.json()["digest"] == app_image.digest, (r, tr.registry.log_tail())
    assert scopes_asked(tr.tokens.taken()) == {(READER, "team/private", frozenset({"pull"}))}

    # Its own repository: the blobs are there (HEAD with the pull token), the manifest PUT is
    # challenged for pull,push, the token server grants pull only, the registry refuses that.
    target = f"{host}/team/private:2"
    tr.tokens.taken()
    r = push(rc, tr.private, target, auth=reader)
    assert error_of(r, (401, 403))["code"] in ("registry_unauthorized", "registry_denied"), \
        (r, tr.registry.log_tail())
    asked = tr.tokens.taken()
    assert (READER, "team/private", frozenset({"pull", "push"})) in scopes_asked(asked), asked
    assert all(g["actions"] == ["pull"] for t in asked for g in t.granted), asked
    assert not exists_in(tr, skopeo, target)

    # A repository it may not even pull: the first blob HEAD's token grants nothing, and the push
    # stops there (it never gets as far as asking for push).
    target = f"{host}/team/elsewhere:1"
    tr.tokens.taken()
    r = push(rc, tr.private, target, auth=reader)
    assert error_of(r, (401, 403))["code"] in ("registry_unauthorized", "registry_denied"), \
        (r, tr.registry.log_tail())
    asked = tr.tokens.taken()
    assert asked and {name for _, name, _ in scopes_asked(asked)} == {"team/elsewhere"}, asked
    assert not any(t.granted for t in asked), asked
    assert not exists_in(tr, skopeo, target)

    # A token the registry does not trust (signed outside the CA): refused, once, not in a loop.
    tr.tokens.taken()
    tr.tokens.forge = True
    try:
        r = pull(rc, tr.public)
        assert error_of(r, 401)["code"] == "registry_unauthorized", r
    finally:
        tr.tokens.forge = False
    assert len(tr.tokens.taken()) == 1
    assert "unable to verify certificate chain" in tr.registry.log_tail(200)
