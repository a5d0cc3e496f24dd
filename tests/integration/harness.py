"""Test harness for bulkhead's integration tests: real daemons, a small HTTP client, and
host-side inspection helpers. Standard library only (the suite runs on Debian's python3)."""

import base64
import glob
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("BULKHEAD_BUILD_DIR", REPO_ROOT / "build"))
BULKHEAD = BUILD_DIR / "bulkhead"


def sanitizer_of_build() -> str:
    """The build's BULKHEAD_SANITIZE ("address", "thread"), or "" for a normal build."""
    try:
        for line in (BUILD_DIR / "CMakeCache.txt").read_text().splitlines():
            if line.startswith("BULKHEAD_SANITIZE:"):
                return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return ""


SANITIZER = sanitizer_of_build()

# The tier matrix (scripts/test.sh): BULKHEAD_TEST_RUNTIME=gvisor runs a selection of these
# tests (tier_matrix.txt) against daemons whose sandboxes default to that runtime.
RUNTIME = os.environ.get("BULKHEAD_TEST_RUNTIME", "native")
# Where a sandbox reaches bulkhead's egress proxy and resolver: its loopback, or on the microvm
# tier (a kernel of its own) the gateway of its NIC (src/common/guest_link.h).
PROXY_HOST = "10.0.2.2" if RUNTIME == "microvm" else "127.0.0.1"
PROXY_HOST6 = "fd00:0:0:2::2" if RUNTIME == "microvm" else "::1"  # the same listeners over IPv6


def shared_dir() -> Path:
    """The team's shared/ directory: ../shared next to the repo, else /work/shared."""
    beside_repo = REPO_ROOT.parent / "shared"
    if (beside_repo / "probes" / "escape.c").exists():
        return beside_repo
    return Path("/work/shared")


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range: one from that range could be
    taken by some connection's local end before the daemon binds it (a restart's "Address
    already in use")."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randrange(10000, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def wait_until(predicate, timeout: float, interval: float = 0.1):
    """Polls `predicate` until it returns something truthy; returns that value or the last falsy one."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


# ---------------------------------------------------------------- HTTP client

@dataclass
class Response:
    status: int
    headers: dict  # lower-case names
    body: bytes

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        text = self.body[:600].decode("utf-8", "replace")
        return f"<Response {self.status} {text!r}>"


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over an AF_UNIX stream socket."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.unix_path)
        self.sock = sock


_DEFAULT_KEY = object()


class Client:
    """A small bulkhead API client: one connection per request, JSON in and out."""

    def __init__(self, key: str, port: int | None = None, unix_path: str | None = None, timeout: float = 120,
                 tls=None):
        self.key = key
        self.port = port
        self.unix_path = unix_path
        self.timeout = timeout
        self.tls = tls  # an ssl.SSLContext: https to localhost:port

    def connection(self, timeout: float | None = None) -> http.client.HTTPConnection:
        t = self.timeout if timeout is None else timeout
        if self.unix_path:
            return UnixHTTPConnection(self.unix_path, t)
        if self.tls:
            return http.client.HTTPSConnection("localhost", self.port, timeout=t, context=self.tls)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=t)

    def _headers(self, body, headers, key):
        h = {}
        key = self.key if key is _DEFAULT_KEY else key
        if key is not None:
            h["Authorization"] = f"Bearer {key}"
        if isinstance(body, (dict, list)):
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        return h

    @staticmethod
    def _encode(body):
        if body is None:
            return None
        if isinstance(body, (dict, list)):
            return json.dumps(body).encode()
        if isinstance(body, str):
            return body.encode()
        return body

    def request(self, method, path, body=None, headers=None, key=_DEFAULT_KEY, timeout=None) -> Response:
        conn = self.connection(timeout)
        try:
            conn.request(method, path, body=self._encode(body), headers=self._headers(body, headers, key))
            resp = conn.getresponse()
            data = resp.read()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def metric(self, name: str) -> int:
        """A counter or gauge of /metrics without labels (bulkhead_warm_pool_ready, ...)."""
        return int(re.search(rf"^{name} (\d+)$", self.get("/metrics").body.decode(), re.M).group(1))

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    # -- typed helpers; each asserts the call worked so tests read as the behaviour.

    def create(self, **spec) -> dict:
        r = self.post("/v1/sandboxes", spec)
        assert r.status == 201, f"create {spec} -> {r!r}"
        return r.json()

    def sandbox(self, sandbox_id) -> dict:
        r = self.get(f"/v1/sandboxes/{sandbox_id}")
        assert r.status == 200, f"get {sandbox_id} -> {r!r}"
        return r.json()

    def list(self, query: str = "") -> list:
        r = self.get("/v1/sandboxes" + (f"?{query}" if query else ""))
        assert r.status == 200, f"list {query} -> {r!r}"
        return r.json()["sandboxes"]

    def remove(self, sandbox_id):
        r = self.delete(f"/v1/sandboxes/{sandbox_id}")
        assert r.status == 204, f"delete {sandbox_id} -> {r!r}"

    def exec_raw(self, sandbox_id, cmd, timeout=None, **options) -> Response:
        return self.post(f"/v1/sandboxes/{sandbox_id}/exec", {"cmd": cmd, **options}, timeout=timeout)

    def exec(self, sandbox_id, cmd, timeout=None, **options) -> dict:
        r = self.exec_raw(sandbox_id, cmd, timeout=timeout, **options)
        assert r.status == 200, f"exec {cmd!r} -> {r!r}"
        return r.json()

    def sh(self, sandbox_id, script, **options) -> str:
        """Runs a shell script that must succeed; returns its stdout."""
        result = self.exec(sandbox_id, script, **options)
        assert result["exit_code"] == 0, f"{script!r} failed: {result}"
        return result["stdout"]

    def upload(self, sandbox_id, path: str, data: bytes, mode: str = "0755"):
        """Writes `data` to `path` inside the sandbox with `cat`, in chunks that fit a JSON body."""
        chunk = 384 * 1024
        self.sh(sandbox_id, f": > {path}")
        for start in range(0, len(data), chunk):
            piece = base64.b64encode(data[start:start + chunk]).decode()
            self.sh(sandbox_id, f"cat >> {path}", stdin_b64=piece)
        self.sh(sandbox_id, f"chmod {mode} {path}")

    def stream_exec(self, sandbox_id, cmd, **options):
        """Opens a streaming exec; returns (connection, response). Read lines with response.readline()."""
        conn = self.connection()
        body = json.dumps({"cmd": cmd, **options}).encode()
        conn.request("POST", f"/v1/sandboxes/{sandbox_id}/exec", body=body,
                     headers={**self._headers({}, None, _DEFAULT_KEY), "Accept": "application/x-ndjson"})
        return conn, conn.getresponse()


def files_url(sandbox_id, route: str = "", **query) -> str:
    """/v1/sandboxes/{id}/files{route}?{query}, every value percent-encoded."""
    q = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in query.items())
    return f"/v1/sandboxes/{sandbox_id}/files{route}" + (f"?{q}" if q else "")


def stream_upload(client: "Client", method: str, path: str, chunks, length: int | None = None) -> Response:
    """Sends the body from the iterable `chunks` without holding it: with Content-Length if
    `length` is given, else chunked."""
    conn = client.connection()
    try:
        headers = {"Authorization": f"Bearer {client.key}", "Content-Type": "application/octet-stream"}
        if length is not None:
            headers["Content-Length"] = str(length)
        conn.request(method, path, body=iter(chunks), headers=headers, encode_chunked=length is None)
        resp = conn.getresponse()
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def stream_download(client: "Client", path: str, sink, piece: int = 1 << 20) -> Response:
    """GETs `path` and hands the body to `sink(bytes)` piece by piece; the Response's body is empty."""
    conn = client.connection()
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {client.key}"})
        resp = conn.getresponse()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        if resp.status != 200:
            return Response(resp.status, headers, resp.read())
        while chunk := resp.read(piece):
            sink(chunk)
        return Response(resp.status, headers, b"")
    finally:
        conn.close()


def assert_error_shape(r: Response, status: int | tuple | None = None):
    """Asserts an error response: the status (if given) and the {"error":{"code","message"}} body."""
    if status is not None:
        wanted = status if isinstance(status, tuple) else (status,)
        assert r.status in wanted, f"expected {wanted}, got {r!r}"
    assert r.status >= 400, r
    try:
        body = r.json()
    except ValueError:
        raise AssertionError(f"error body is not JSON: {r!r}")
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), f"no error object: {r!r}"
    code, message = body["error"].get("code"), body["error"].get("message")
    assert isinstance(code, str) and re.fullmatch(r"[a-z][a-z0-9_]*", code), f"bad code: {r!r}"
    assert isinstance(message, str) and message, f"bad message: {r!r}"
    return body["error"]


# ---------------------------------------------------------------- sanitizer reports

# How ASan, UBSan, LSan and TSan begin a report (builds of scripts/sanitize.sh). Such a report
# anywhere fails the run: in a daemon's log (its stderr), or in the files the *SAN_OPTIONS
# log_path option sends every sanitized process's reports to (the CLI's too).
SANITIZER_REPORT = re.compile(r"ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|: runtime error: ")
_reported_files: set = set()
sanitizer_findings: list = []  # every report seen this session, for the session's cleanup


def sanitizer_report_in(text: str, lines: int = 80) -> str | None:
    """The first sanitizer report in `text`, from its first line on (up to `lines` lines), or None."""
    match = SANITIZER_REPORT.search(text)
    if match is None:
        return None
    start = text.rfind("\n", 0, match.start()) + 1
    return "\n".join(text[start:].splitlines()[:lines])


def sanitizer_log_prefixes() -> list[str]:
    """The log_path of ASAN_OPTIONS, UBSAN_OPTIONS and TSAN_OPTIONS, where set."""
    prefixes = []
    for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"):
        for option in re.split(r"[:\s]+", os.environ.get(name, "")):
            if option.startswith("log_path=") and option[len("log_path="):] not in prefixes:
                prefixes.append(option[len("log_path="):])
    return prefixes


def new_sanitizer_reports() -> list[str]:
    """Reports written to log_path files since the last call: one "file: report" each."""
    found = []
    for prefix in sanitizer_log_prefixes():
        for path in sorted(glob.glob(glob.escape(prefix) + ".*")):
            if path in _reported_files:
                continue
            _reported_files.add(path)
            text = Path(path).read_text(errors="replace")
            found.append(f"{path}:\n{sanitizer_report_in(text) or text[:4000]}")
    sanitizer_findings.extend(found)
    return found


# ---------------------------------------------------------------- daemons

_LIVE_DAEMONS: list = []


@dataclass
class Daemon:
    """One `bulkhead serve` process on a temp state dir and a free loopback port."""
    state_dir: Path
    log_path: Path
    warm_pool: int = 0
    port: int = 0
    process: subprocess.Popen | None = None
    destroyed: bool = False
    starts: int = 0
    # Run inside this network namespace (/run/netns/NAME; see fakenet.py). The test reaches
    # such a daemon through its unix socket, which works across namespaces.
    netns: str | None = None
    listen_host: str = "127.0.0.1"
    extra_args: tuple = ()
    runtime: str = RUNTIME  # --default-runtime
    tls: object = None  # an ssl.SSLContext trusting the daemon's --tls-cert, when extra_args give one
    sanitizer_checked: int = 0  # how far the log has been searched for sanitizer reports

    @property
    def key(self) -> str:
        return (self.state_dir / "api-key").read_text().strip()

    @property
    def e2b_key(self) -> str:
        return (self.state_dir / "e2b-api-key").read_text().strip()

    @property
    def e2b_url(self) -> str:
        """The E2B front's base URL (E2B_API_URL and E2B_SANDBOX_URL)."""
        return "http://" + self.client().get("/healthz").json()["e2b_address"]

    @property
    def socket_path(self) -> Path:
        return self.state_dir / "bulkhead.sock"

    def client(self, timeout: float = 120) -> Client:
        if self.netns:
            return self.unix_client(timeout)
        return Client(self.key, port=self.port, timeout=timeout, tls=self.tls)

    def unix_client(self, timeout: float = 120) -> Client:
        return Client(self.key, unix_path=str(self.socket_path), timeout=timeout)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 60):
        assert BULKHEAD.exists(), f"{BULKHEAD} missing: run scripts/build.sh first"
        assert len(str(self.state_dir)) <= 70, f"state dir path too long: {self.state_dir}"
        if self not in _LIVE_DAEMONS:
            _LIVE_DAEMONS.append(self)
        self.port = free_port()
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"==== start #{self.starts} on port {self.port}\n".encode())
        log.flush()
        # nsenter, not `ip netns exec`: that also remounts /sys, hiding the cgroup mounts.
        prefix = ["nsenter", f"--net=/run/netns/{self.netns}"] if self.netns else []
        self.process = subprocess.Popen(
            prefix + [str(BULKHEAD), "serve", "--state-dir", str(self.state_dir),
                      "--listen", f"{self.listen_host}:{self.port}", "--warm-pool", str(self.warm_pool),
                      "--e2b-listen", f"{self.listen_host}:0", "--default-runtime", self.runtime,
                      # (in the tier matrix, the pools of the runtime the tests use, no others)
                      *(("--warm-pool", "native=0") if RUNTIME != "native" else ()), *self.extra_args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")})
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.process.returncode}:\n{self.log_tail()}")
            if self.healthy():
                return self
            time.sleep(0.1)
        raise RuntimeError(f"daemon not healthy after {timeout}s:\n{self.log_tail()}")

    def healthy(self) -> bool:
        try:
            if self.netns:
                conn = UnixHTTPConnection(str(self.socket_path), 2)
            elif self.tls:
                conn = http.client.HTTPSConnection("localhost", self.port, timeout=2, context=self.tls)
            else:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/healthz")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok and (self.state_dir / "api-key").exists()
        except OSError:
            return False

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> int | None:
        """Sends `sig` and waits for the process to end (SIGKILL after `timeout`)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def new_sanitizer_report(self) -> str | None:
        """A sanitizer report the daemon wrote to its log since the last call, if any."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.sanitizer_checked)
                data = f.read()
        except OSError:
            return None
        data = data[:data.rfind(b"\n") + 1]  # whole lines only: the daemon may be writing
        self.sanitizer_checked += len(data)
        report = sanitizer_report_in(data.decode(errors="replace"))
        if report:
            sanitizer_findings.append(f"{self.log_path}:\n{report}")
        return report

    def delete_all_sandboxes(self):
        client = self.client(timeout=60)
        r = client.get("/v1/sandboxes")
        if r.status != 200:
            return
        for sandbox in r.json().get("sandboxes", []):
            client.delete(f"/v1/sandboxes/{sandbox['id']}")

    def destroy(self):
        """Removes every trace: sandboxes, the process, the storage mount, the state dir.
        Safe to call twice and after failures."""
        if self.destroyed:
            return
        self.destroyed = True
        try:
            # Sandboxes outlive their daemon, so a daemon that is down must come back to reap them.
            sandboxes_dir = self.state_dir / "sandboxes"
            if not self.running() and sandboxes_dir.is_dir() and any(sandboxes_dir.iterdir()):
                try:
                    self.start()
                except Exception:
                    pass
            if self.running():
                try:
                    self.delete_all_sandboxes()
                except Exception:
                    pass
            self.stop(signal.SIGTERM)
        finally:
            unmount_storage(self.state_dir)
            shutil.rmtree(self.state_dir, ignore_errors=True)
            if self in _LIVE_DAEMONS:
                _LIVE_DAEMONS.remove(self)
        # After the stop: leaks are reported when the daemon exits.
        report = self.new_sanitizer_report()
        assert report is None, f"sanitizer report in {self.log_path}:\n{report}"


def unmount_storage(state_dir: Path):
    storage = state_dir / "storage"
    for _ in range(20):
        if not is_mountpoint(storage):
            return
        if subprocess.run(["umount", str(storage)], capture_output=True).returncode == 0:
            continue
        time.sleep(0.25)
    if is_mountpoint(storage):
        subprocess.run(["umount", "-l", str(storage)], capture_output=True)


def is_mountpoint(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def destroy_all_daemons():
    for daemon in list(_LIVE_DAEMONS):
        try:
            daemon.destroy()
        except Exception:
            pass


# ---------------------------------------------------------------- host-side inspection

def sandbox_host_uid_range(client: Client, sandbox_id) -> tuple[int, int]:
    """(first host uid, count) of the sandbox, from the uid map of its processes as the host
    sees them (inside, gvisor shows a map of its own kernel's)."""
    client.sandbox(sandbox_id)  # resumes nothing; fails for an unknown id
    for pid in cgroup_pids_of(sandbox_id):
        fields = _read(f"/proc/{pid}/uid_map").split()
        if len(fields) >= 3 and fields[0] == "0" and fields[1] != "0":
            return int(fields[1]), int(fields[2])
    raise AssertionError(f"no process of sandbox {sandbox_id} runs in a uid range of its own")


def host_processes_in_uid_range(first: int, count: int, orphan_zombies: bool = True) -> list[str]:
    """Processes on the host whose real/effective/saved/fs uid lies in [first, first+count).
    orphan_zombies=False skips zombies waiting for the host's PID 1 to reap them (what is left
    of a sandbox whose daemon was restarted: no daemon can reap a process it did not start)."""
    found = []
    for status_path in glob.glob("/proc/[0-9]*/status"):
        try:
            with open(status_path) as f:
                text = f.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        uids = [int(x) for x in fields.get("Uid", "").split()]
        if not any(first <= u < first + count for u in uids):
            continue
        zombie = fields.get("State", "").strip().startswith("Z")
        if zombie and not orphan_zombies and fields.get("PPid", "").strip() == "1":
            continue
        found.append(f"{status_path.split('/')[2]}:{fields.get('Name', '').strip()}:"
                     f"{fields.get('State', '').strip()}:uid {uids[0]}")
    return found


def host_name(sandbox_id: str) -> str:
    """What a sandbox's host objects are named (cgroups, its dir under <state>/sandboxes):
    never the id itself (core/sandbox_manager.cc HostName)."""
    return "sb-" + hashlib.sha256(sandbox_id.encode()).hexdigest()[:16]


def qemu_pid(sandbox_id: str) -> int | None:
    """The pid of a microvm sandbox's QEMU (its -name is bulkhead-<host name>), None if none."""
    wanted = f"bulkhead-{host_name(sandbox_id)}".encode()
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
        except OSError:
            continue
        if argv and argv[0].endswith(b"qemu-system-x86_64") and wanted in argv:
            return int(proc.name)
    return None


def cgroup_dirs_of(sandbox_id) -> list[str]:
    name = host_name(sandbox_id)
    return (glob.glob(f"/sys/fs/cgroup/*/bulkhead-*/{name}")
            + glob.glob(f"/sys/fs/cgroup/bulkhead-*/{name}"))


def cgroup_pids_of(sandbox_id) -> list[int]:
    """The host pids in the sandbox's cgroups (its init and commands on native; the Sentry,
    its gofer and their helpers on gvisor)."""
    pids = set()
    for directory in cgroup_dirs_of(sandbox_id):
        for procs in glob.glob(f"{directory}/**/cgroup.procs", recursive=True):
            pids.update(int(p) for p in _read(procs).split())
    return sorted(pids)


def mountinfo_lines_mentioning(text: str, pid: int | str = "self") -> list[str]:
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            return [line for line in f if text in line]
    except OSError:
        return []


def process_names_inside(client: Client, sandbox_id) -> list[str]:
    """The comm of every process visible in the sandbox, read from its /proc."""
    out = client.sh(sandbox_id, "for d in /proc/[0-9]*; do cat $d/comm 2>/dev/null; done")
    return out.split()


def file_workers(client: Client, sandbox_id) -> list[str]:
    """The pids of the file workers running in the sandbox: forks of its init, sharing its name."""
    script = ("for p in /proc/[0-9]*; do [ $p != /proc/1 ] && [ \"$(cat $p/comm 2>/dev/null)\" = "
              "\"$(cat /proc/1/comm)\" ] && echo ${p#/proc/}; done; true")
    return client.sh(sandbox_id, script, user="root").split()


# ---------------------------------------------------------------- WebSocket client

class WebSocketRefused(Exception):
    """The server answered the upgrade with an HTTP response instead of 101."""

    def __init__(self, response: Response):
        super().__init__(f"upgrade refused: {response!r}")
        self.response = response


class WebSocket:
    """A minimal RFC 6455 client: the handshake, masked frames out, frames in (pings are
    answered, fragments joined). Enough to drive attach in tests."""
    OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
    GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self, sock: socket.socket, pending: bytes):
        self.sock = sock
        self.pending = pending  # bytes read past the handshake

    @classmethod
    def connect(cls, client: Client, path: str, timeout: float = 60) -> "WebSocket":
        sock = socket.create_connection(("127.0.0.1", client.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                      f"Authorization: Bearer {client.key}\r\n\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                sock.close()
                raise ConnectionError(f"connection closed during the handshake: {data!r}")
            data += chunk
        head, rest = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        if status != 101:
            length = int(headers.get("content-length", "0"))
            while len(rest) < length and (chunk := sock.recv(4096)):
                rest += chunk
            sock.close()
            raise WebSocketRefused(Response(status, headers, rest[:length]))
        accept = base64.b64encode(hashlib.sha1((key + cls.GUID).encode()).digest()).decode()
        assert headers.get("sec-websocket-accept") == accept, headers
        return cls(sock, rest)

    def _read(self, n: int) -> bytes:
        while len(self.pending) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self.pending += chunk
        data, self.pending = self.pending[:n], self.pending[n:]
        return data

    def send_frame(self, opcode: int, payload: bytes = b""):
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def send_binary(self, data: bytes):
        self.send_frame(self.OP_BINARY, data)

    def send_text(self, text: str):
        self.send_frame(self.OP_TEXT, text.encode())

    def send_json(self, message: dict):
        self.send_text(json.dumps(message))

    def recv(self) -> tuple[int, bytes]:
        """The next message: (OP_TEXT | OP_BINARY, payload) or (OP_CLOSE, close payload)."""
        message, message_op = b"", None
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == self.OP_PING:
                self.send_frame(self.OP_PONG, payload)
                continue
            if opcode == self.OP_PONG:
                continue
            if opcode == self.OP_CLOSE:
                return opcode, payload
            if opcode != self.OP_CONT:
                message_op = opcode
            message += payload
            if b0 & 0x80:
                return message_op, message

    def close(self, code: int = 1000):
        """Sends a close frame and waits for the server's; then closes the socket."""
        try:
            self.send_frame(self.OP_CLOSE, struct.pack("!H", code))
            while self.recv()[0] != self.OP_CLOSE:
                pass
        except OSError:
            pass
        self.sock.close()


# ---------------------------------------------------------------- leak checks

# What one daemon leaves on the host, found from the names it gives things (see leaks()).
UID_RANGE_CLAIMS = Path("/run/bulkhead/uid-ranges")
FIRST_SANDBOX_UID, UIDS_PER_SANDBOX = 0x10000000, 65536  # common/id_ranges.h
STORED_ID_BASE = FIRST_SANDBOX_UID - UIDS_PER_SANDBOX  # owners of stored image and volume files
SIOCGSKNS = 0x894C  # a socket's network namespace, as a new descriptor (linux/sockios.h)
PIDFD_GETFD = 438   # the x86-64 and generic syscall number of pidfd_getfd(2)


def cgroup_parent_name(state_dir) -> str:
    """bulkhead-<FNV-1a 32 of the canonical state dir> (core/sandbox_manager.cc)."""
    digest = 2166136261
    for byte in os.path.realpath(str(state_dir)).encode():
        digest = ((digest ^ byte) * 16777619) & 0xFFFFFFFF
    return f"bulkhead-{digest:08x}"


def std_hash(text: str) -> int:
    """libstdc++'s std::hash<std::string> on 64-bit (_Hash_bytes, a MurmurHash2 variant)."""
    m64, mul = (1 << 64) - 1, (0xC6A4A793 << 32) + 0x5BD1E995
    data = text.encode()

    def shift_mix(v):
        return v ^ (v >> 47)

    h = (0xC70F6907 ^ (len(data) * mul)) & m64
    aligned = len(data) & ~7
    for i in range(0, aligned, 8):
        piece = (shift_mix((int.from_bytes(data[i:i + 8], "little") * mul) & m64) * mul) & m64
        h = ((h ^ piece) * mul) & m64
    if len(data) & 7:
        h = ((h ^ int.from_bytes(data[aligned:], "little")) * mul) & m64
    return shift_mix((shift_mix(h) * mul) & m64)


def open_link_tag(state_dir) -> str:
    """The 4 hex digits naming a daemon's open-mode links bh<tag>... and its nftables table
    bulkhead_<tag> (core/network_controller.cc: std::hash of the state dir as given)."""
    return f"{std_hash(str(state_dir)) & 0xFFFF:04x}"


def open_link_name(state_dir, sandbox_id: str) -> str:
    return f"bh{open_link_tag(state_dir)}{std_hash(sandbox_id) & 0xFFFFFFFFF:09x}"  # net/open_link.cc


def unescape_mountinfo(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mount_points_under(directory: str, pid: int | str = "self") -> list[str]:
    prefix = directory.rstrip("/") + "/"
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            points = [unescape_mountinfo(line.split()[4]) for line in f]
    except OSError:
        return []
    return [p for p in points if p.startswith(prefix)]


def _read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def _netns_inode(path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def socket_netns_inodes(pid: int) -> dict[int, str]:
    """netns inode -> one of the daemon's descriptors that holds it: descriptors opened on a
    namespace (net:[...]) and sockets made in one (a listener in a sandbox's namespace keeps
    it alive). Sockets are borrowed with pidfd_getfd(2) and asked with SIOCGSKNS."""
    import ctypes
    import fcntl
    found = {}
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return found
    try:
        for fd_name in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd_name}")
            except OSError:
                continue
            if target.startswith("net:["):
                found.setdefault(int(target[5:-1]), f"fd {fd_name} ({target})")
                continue
            if not target.startswith("socket:["):
                continue
            borrowed = libc.syscall(PIDFD_GETFD, pidfd, int(fd_name), 0)
            if borrowed < 0:
                continue
            try:
                ns_fd = fcntl.ioctl(borrowed, SIOCGSKNS)
                found.setdefault(os.fstat(ns_fd).st_ino, f"fd {fd_name} ({target})")
                os.close(ns_fd)
            except OSError:
                pass
            finally:
                os.close(borrowed)
    except OSError:
        pass
    finally:
        os.close(pidfd)
    return found


def _in_daemon_netns(daemon, argv: list[str]) -> list[str]:
    """argv run in the daemon's network namespace (where its open-mode links and table live)."""
    if daemon.running():
        return ["nsenter", f"--net=/proc/{daemon.process.pid}/ns/net", *argv]
    if daemon.netns:
        return ["nsenter", f"--net=/run/netns/{daemon.netns}", *argv]
    return argv


def _json_of(argv: list[str]):
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    try:
        return json.loads(done.stdout)
    except ValueError:
        return None


def known_sandboxes(daemon) -> dict[str, dict]:
    """id -> Sandbox of what the daemon has: every listed sandbox, and its warm pool's (rows
    in state "pooled" of its database: they are not listed). {} for a daemon that is down."""
    known = {}
    if not daemon.running():
        return known
    client = daemon.client(timeout=60)
    r = client.get("/v1/sandboxes")
    assert r.status == 200, f"list sandboxes for the leak check: {r!r}"
    known = {s["id"]: s for s in r.json()["sandboxes"]}
    db_path = daemon.state_dir / "bulkhead.db"
    if db_path.exists():
        import sqlite3
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
        try:
            for (sandbox_id,) in db.execute("SELECT id FROM sandboxes WHERE state = 'pooled'"):
                known.setdefault(sandbox_id, {"id": sandbox_id, "state": "pooled"})
        finally:
            db.close()
    return known


def shared_sysfs_netns(daemon) -> int | None:
    """The network namespace of the sysfs the running daemon's native sandboxes share, which it
    holds while it runs: named in its log at each start (native_tier.cc, MakeSharedSysfs)."""
    found = None
    try:
        with open(daemon.log_path, errors="replace") as log:
            for line in log:
                if line.startswith("==== start #"):
                    found = None
                elif "every sandbox's /sys is one sysfs, of network namespace net:[" in line:
                    found = int(line.rsplit("net:[", 1)[1].split("]", 1)[0])
    except OSError:
        pass
    return found


def find_leaks(daemon, uid_ranges=()) -> dict[str, list[str]]:
    """One look at everything of `daemon` on the host that belongs to no sandbox it has (a
    daemon that is down has none): processes (in its cgroups, or in a uid range it claims or
    that `uid_ranges` [(first, count)] names, e.g. of deleted sandboxes), zombie children of
    the daemon, uid range claims, mounts under its state dir (host's and daemon's view),
    cgroups (v1 and v2), network namespaces the daemon still holds, open-mode host links and
    an nftables table with no open-mode sandbox left, loop devices on its state dir beyond the
    one its storage is mounted from, sandbox dirs and layers. Scoped by the names this daemon
    gives things, so other daemons on the host (other tests) do not count."""
    state_dir = str(daemon.state_dir)
    known = known_sandboxes(daemon)
    known_names = {host_name(sandbox_id) for sandbox_id in known}
    found: dict[str, list[str]] = {}

    def leak(kind, what):
        found.setdefault(kind, []).append(what)

    parent = cgroup_parent_name(state_dir)
    parents = (parent, f"{parent}-gvisor", f"{parent}-microvm")  # the native, gvisor and microvm tiers'
    daemon_pid = daemon.process.pid if daemon.running() else None

    # uid range claims: /run/bulkhead/uid-ranges/<slot> = "<owner state dir>\n<sandbox id>\n".
    ranges = [tuple(r) for r in uid_ranges]
    if UID_RANGE_CLAIMS.is_dir():
        for claim in UID_RANGE_CLAIMS.iterdir():
            lines = _read(claim).splitlines()
            if len(lines) >= 2 and lines[0] == state_dir and lines[1] not in known:
                leak("uid claims", f"{claim.name}: {lines[1]}")
                ranges.append((FIRST_SANDBOX_UID + int(claim.name) * UIDS_PER_SANDBOX, UIDS_PER_SANDBOX))

    # Processes: by cgroup (a sandbox cannot leave its cgroup) and by uid.
    expected_netns = {_netns_inode(f"/proc/{daemon_pid}/ns/net"), shared_sysfs_netns(daemon)} if daemon_pid else set()
    for status_path in glob.glob("/proc/[0-9]*/status"):
        pid = status_path.split("/")[2]
        fields = dict(line.split(":", 1) for line in _read(status_path).splitlines() if ":" in line)
        if not fields:
            continue
        name, state = fields.get("Name", "").strip(), fields.get("State", "").strip()
        label = f"{pid}:{name}:{state}"
        sandbox_of = None
        for line in _read(f"/proc/{pid}/cgroup").splitlines():
            path = line.split(":", 2)[-1]
            for group_parent in parents:
                if f"/{group_parent}/" in path and f"/{group_parent}/.inits" not in path:  # (its other lines name it)
                    sandbox_of = path.split(f"/{group_parent}/", 1)[1].split("/")[0]
                    break
            if sandbox_of is not None:
                break
        if sandbox_of is not None:
            if sandbox_of in known_names:
                expected_netns.add(_netns_inode(f"/proc/{pid}/ns/net"))
            else:
                leak("processes", f"{label} in cgroup {parent}/{sandbox_of}")
            continue
        uids = [int(x) for x in fields.get("Uid", "").split()]
        if any(first <= u < first + count for first, count in ranges for u in uids):
            leak("processes", f"{label} uid {uids[0]}")
        elif daemon_pid and fields.get("PPid", "").strip() == str(daemon_pid) and state.startswith("Z"):
            leak("zombies", f"{label}: a child the daemon did not reap")

    # Mounts under the state dir, except its storage (the loop mount), that name no sandbox.
    storage = state_dir.rstrip("/") + "/storage"
    views = [("host", "self")] + ([("daemon", daemon_pid)] if daemon_pid else [])
    for view, pid in views:
        for point in mount_points_under(state_dir, pid):
            if point == storage or any(name in point for name in [*known, *known_names]):
                continue
            leak("mounts", f"{point} ({view})")

    # cgroups: <root>/bulkhead-<tag>[-gvisor]/<id> on v2, <root>/<controller>/... on v1.
    for group_parent in [path for name in parents
                         for path in (Path("/sys/fs/cgroup") / name, *Path("/sys/fs/cgroup").glob(f"*/{name}"))]:
        try:
            children = [p for p in group_parent.iterdir() if p.is_dir()]
        except OSError:
            continue
        for child in children:
            # (.inits: every native sandbox's init on cgroup v1, there while the daemon runs)
            if child.name not in known_names and not (child.name == ".inits" and daemon_pid):
                leak("cgroups", str(child))

    # Network namespaces the daemon holds (descriptors, sockets) that are not its own nor a
    # known sandbox's.
    if daemon_pid:
        for inode, holder in socket_netns_inodes(daemon_pid).items():
            if inode not in expected_netns:
                leak("netns", f"net:[{inode}] held by the daemon's {holder}")
    for point in mount_points_under(state_dir):
        if "netns" in point:
            leak("netns", f"{point} (a namespace mount)")

    # Open-mode links and the host table, in the daemon's network namespace.
    tag = open_link_tag(state_dir)
    wanted_links = {open_link_name(state_dir, sandbox_id) for sandbox_id in known}
    for link in _json_of(_in_daemon_netns(daemon, ["ip", "-j", "link", "show"])) or []:
        name = link.get("ifname", "")
        if name.startswith(f"bh{tag}") and name not in wanted_links:
            leak("links", name)
    any_open = any((s.get("network") or {}).get("mode") == "open" for s in known.values())
    tables = _json_of(_in_daemon_netns(daemon, ["nft", "-j", "list", "tables"])) or {}
    for entry in tables.get("nftables", []):
        table = entry.get("table")
        if table and table.get("name") == f"bulkhead_{tag}" and not any_open:
            leak("nftables", f"table {table.get('family')} {table['name']} with no open-mode sandbox")

    # Loop devices backed by a file under the state dir: one, while its storage is mounted.
    attached = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        path = _read(backing).strip().removesuffix(" (deleted)")
        if path.startswith(state_dir.rstrip("/") + "/"):
            attached.append(f"/dev/{backing.parent.parent.name} ({path})")
    if len(attached) > (1 if is_mountpoint(Path(storage)) else 0):
        found["loop devices"] = sorted(attached)

    # Files: a sandbox dir or a layer without its sandbox (volumes' layers are "vol..."), runsc's
    # state of a gvisor sandbox (/run/bulkhead/gvisor-<tag>/<host name>), a microvm guest's sockets
    # (/run/bulkhead-vms-<tag>/<host name>).
    tag = parent.removeprefix("bulkhead-")
    runsc_root = Path("/run/bulkhead") / ("gvisor-" + tag)
    vms_root = Path("/run") / ("bulkhead-vms-" + tag)
    for where in (Path(state_dir) / "sandboxes", Path(storage) / "layers", Path(state_dir) / "layers", runsc_root,
                  vms_root):
        try:
            names = [p.name for p in where.iterdir()]
        except OSError:
            continue
        for name in names:
            if name not in known and name not in known_names and not name.startswith("vol"):
                leak("files", str(where / name))
    return found


def leaks(daemon, uid_ranges=(), timeout: float = 10.0) -> dict[str, list[str]]:
    """find_leaks until it finds nothing or `timeout` passes (teardown that a call started may
    still be finishing: a process being reaped); answers the last findings, {} when clean."""
    deadline = time.monotonic() + timeout
    while True:
        found = find_leaks(daemon, uid_ranges)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.25)


def delete_concurrently(daemon, ids, clients: int = 8) -> list[str]:
    """Deletes `ids` from `clients` threads at once; answers "<id>: <status>" for each delete
    that failed."""
    pending = list(ids)
    lock = threading.Lock()
    failures: list[str] = []

    def deleter():
        c = daemon.client(timeout=600)
        while True:
            with lock:
                if not pending:
                    return
                sandbox_id = pending.pop()
            r = c.delete(f"/v1/sandboxes/{sandbox_id}")
            if r.status not in (200, 204):
                with lock:
                    failures.append(f"{sandbox_id}: {r.status}")

    threads = [threading.Thread(target=deleter) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


def assert_no_leaks(daemon, uid_ranges=(), timeout: float = 10.0):
    found = leaks(daemon, uid_ranges, timeout)
    assert not found, f"left behind by daemon {daemon.state_dir}: {json.dumps(found, indent=1)}"
