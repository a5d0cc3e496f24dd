"""A fake internet in two network namespaces this module makes, so network tests and benchmarks
never send a packet off the machine (issue 4, "Testing without the internet").

    host ns (the daemon under test runs here)      inet ns (the servers run here)
      veth 198.18.0.1/24  2001:db8:1::1/64  <--->    veth 198.18.0.2/24  2001:db8:1::2/64
      default via 198.18.0.2 / 2001:db8:1::2           + 198.18.0.10 (a.test)   2001:db8:1::10
                                                       + 198.18.0.11 (b.test)   198.18.0.12 (other.test)
                                                       + 2001:db8:1::12 (other.test)  198.18.0.13 (no name)
                                                       + 198.18.0.53 (DNS)      169.254.169.254 (metadata)
                                                       + 10.0.0.5 ("LAN" host; rebind.test)

Servers in the inet ns (one stdlib Python process, `python3 fakenet.py serve DIR`):
  HTTP :80 and HTTPS :443 (self-signed cert made with openssl) on every address, answering
  "hello from <Host> via <local address>"; /bytes?n=N (N bytes), /slow?seconds=S (a line every
  0.1 s, chunked), /repo.git/... (a bare git repo served as static files: git's "dumb" HTTP protocol);
  on 169.254.169.254 a fake cloud metadata answer instead. DNS on 198.18.0.53:53 (UDP and TCP)
  for the ZONE below. A UDP echo on :9999.
Every server appends one line per event to DIR/<server>.log (http, https, metadata, dns, udp):
  <unix time> <event> local=<addr:port> peer=<addr:port> <detail>
with the events accept (a TCP connection was accepted), data (its first byte arrived), closed
(it closed before sending a byte), tls (handshake done; detail sni=...), request (detail: the
request line and Host), stream-end (a /slow or /bytes body ended; detail ok or the error),
query (DNS: qname qtype transport), datagram (UDP echo). Tests take a mark() before an attempt
and read events_since(mark) after it.

Standard library only; needs root (ip netns, veth), iproute2, nsenter and openssl.
"""

import atexit
import ctypes
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HOST_ADDRESS = "198.18.0.1"
HOST_ADDRESS6 = "2001:db8:1::1"
GATEWAY = "198.18.0.2"
GATEWAY6 = "2001:db8:1::2"
A_TEST = "198.18.0.10"
A_TEST6 = "2001:db8:1::10"
B_TEST = "198.18.0.11"
OTHER_TEST = "198.18.0.12"
OTHER_TEST6 = "2001:db8:1::12"
NAMELESS = "198.18.0.13"  # no DNS name points here: for address-only allow entries
DNS_SERVER = "198.18.0.53"
METADATA = "169.254.169.254"
LAN_HOST = "10.0.0.5"
UDP_ECHO_PORT = 9999
ZEROS_FILE_SIZE = 64 << 20  # /bytes sends this file over and over

INET_ADDRESSES = [A_TEST, B_TEST, OTHER_TEST, NAMELESS, DNS_SERVER, METADATA, LAN_HOST]
INET_ADDRESSES6 = [A_TEST6, OTHER_TEST6]

# name -> {qtype: [values]}. Names below evil.test all answer TXT (a DNS tunnel's far end).
ZONE = {
    "a.test": {"A": [A_TEST], "AAAA": [A_TEST6], "TXT": ["a.test zone"]},
    "www.a.test": {"A": [A_TEST], "AAAA": [A_TEST6]},
    "b.test": {"A": [B_TEST]},
    "www.b.test": {"A": [B_TEST]},
    "other.test": {"A": [OTHER_TEST], "AAAA": [OTHER_TEST6]},
    "rebind.test": {"A": [LAN_HOST]},
    "meta.test": {"A": [METADATA]},
    "evil.test": {"A": [OTHER_TEST], "TXT": ["tunnel open"]},
    "home.test": {"A": [HOST_ADDRESS]},  # the daemon's own host
}
CERT_NAMES = ["a.test", "*.a.test", "b.test", "*.b.test", "other.test", "evil.test", "meta.test", "rebind.test"]
LOGS = ("http", "https", "metadata", "dns", "udp")
REPO_TOKEN_FILE = "README"  # the served repo's one file; its content is FakeNet.repo_token

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_counter = iter(range(1, 1 << 30))


def netns_path(name: str) -> str:
    return f"/run/netns/{name}"


def in_netns(name: str, fn):
    """Runs fn() on a fresh thread that has entered network namespace `name` (setns only
    changes the calling thread, and the thread ends with it). Sockets made there stay there."""
    outcome = {}

    def run():
        fd = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns {name}: {os.strerror(err)}")
            outcome["value"] = fn()
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc
        finally:
            os.close(fd)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def socket_in_netns(name: str, family=socket.AF_INET, type=socket.SOCK_STREAM) -> socket.socket:
    return in_netns(name, lambda: socket.socket(family, type))


def nsenter_argv(name: str) -> list[str]:
    """The prefix that runs a command in namespace `name`. nsenter rather than `ip netns exec`:
    the latter also remounts /sys, which hides the cgroup mounts the daemon needs."""
    return ["nsenter", f"--net={netns_path(name)}"]


def run_in(name: str, argv: list[str]) -> str:
    """Runs a command in namespace `name`; answers its stdout (raises if it fails)."""
    return _run(nsenter_argv(name) + argv)


def _run(argv, **kw):
    result = subprocess.run(argv, capture_output=True, text=True, **kw)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def remove_stale_namespaces():
    """Deletes the namespaces (and kills their processes) of earlier sessions whose Python died
    without tearing down. Names carry the creating pid: bhnet-<pid>-<n>-host|inet."""
    try:
        names = os.listdir("/run/netns")
    except FileNotFoundError:
        return
    for name in names:
        m = re.fullmatch(r"bhnet-(\d+)-\d+-(host|inet)", name)
        if not m or _pid_alive(int(m.group(1))):
            continue
        _delete_namespace(name)


def _delete_namespace(name: str):
    pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    subprocess.run(["ip", "netns", "del", name], capture_output=True)


@dataclass
class Event:
    log: str
    time: float
    kind: str
    local: str
    peer: str
    detail: str

    @property
    def local_ip(self) -> str:
        return self.local.rsplit(":", 1)[0].strip("[]")

    def __str__(self):
        return f"{self.log}: {self.kind} local={self.local} peer={self.peer} {self.detail}"


@dataclass
class FakeNet:
    """The two namespaces, their servers and logs. start() builds it all; stop() removes it all
    (safe to call twice, and after a failed start)."""
    workdir: Path
    tag: str = field(default_factory=lambda: f"{os.getpid()}-{next(_counter)}")
    process: subprocess.Popen | None = None
    repo_token: str = ""

    @property
    def host_ns(self) -> str:
        return f"bhnet-{self.tag}-host"

    @property
    def inet_ns(self) -> str:
        return f"bhnet-{self.tag}-inet"

    @property
    def cert_path(self) -> Path:
        return self.workdir / "cert.pem"

    def log_path(self, log: str) -> Path:
        return self.workdir / f"{log}.log"

    # ------------------------------------------------------------ setup and teardown

    def start(self, timeout: float = 30) -> "FakeNet":
        remove_stale_namespaces()
        atexit.register(self.stop)  # last resort if the caller is interrupted
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._make_namespaces()
            self._make_cert()
            self._make_repo()
            self._start_servers(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _make_namespaces(self):
        h, i = self.host_ns, self.inet_ns
        _run(["ip", "netns", "add", h])
        _run(["ip", "netns", "add", i])
        for ns in (h, i):
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            # No router solicitations or address autoconfiguration noise on the veth.
            _run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_ra=0",
                  "net.ipv6.conf.default.accept_ra=0"])
        _run(["ip", "-n", h, "link", "add", "veth-inet", "type", "veth", "peer", "name", "veth-host", "netns", i])
        _run(["ip", "-n", h, "addr", "add", f"{HOST_ADDRESS}/24", "dev", "veth-inet"])
        _run(["ip", "-n", h, "-6", "addr", "add", f"{HOST_ADDRESS6}/64", "dev", "veth-inet", "nodad"])
        _run(["ip", "-n", h, "link", "set", "veth-inet", "up"])
        _run(["ip", "-n", h, "route", "add", "default", "via", GATEWAY])
        _run(["ip", "-n", h, "-6", "route", "add", "default", "via", GATEWAY6])
        _run(["ip", "-n", i, "addr", "add", f"{GATEWAY}/24", "dev", "veth-host"])
        for address in INET_ADDRESSES:
            _run(["ip", "-n", i, "addr", "add", f"{address}/32", "dev", "veth-host"])
        _run(["ip", "-n", i, "-6", "addr", "add", f"{GATEWAY6}/64", "dev", "veth-host", "nodad"])
        for address in INET_ADDRESSES6:
            _run(["ip", "-n", i, "-6", "addr", "add", f"{address}/128", "dev", "veth-host", "nodad"])
        _run(["ip", "-n", i, "link", "set", "veth-host", "up"])

    def _make_cert(self):
        san = ",".join([f"DNS:{n}" for n in CERT_NAMES] + [f"IP:{a}" for a in INET_ADDRESSES + INET_ADDRESSES6])
        _run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
              "-keyout", str(self.workdir / "key.pem"), "-out", str(self.cert_path), "-days", "7",
              "-subj", "/CN=a.test", "-addext", f"subjectAltName={san}"])

    def _make_repo(self):
        """A bare repo with one commit, ready for dumb-HTTP clones (update-server-info)."""
        self.repo_token = os.urandom(8).hex()
        work, bare = self.workdir / "repo-work", self.workdir / "www" / "repo.git"
        env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(self.workdir)}
        ident = ["-c", "user.name=fakenet", "-c", "user.email=fakenet@a.test", "-c", "init.defaultBranch=main"]
        _run(["git", *ident, "init", "-q", str(work)], env=env)
        (work / REPO_TOKEN_FILE).write_text(self.repo_token + "\n")
        _run(["git", *ident, "-C", str(work), "add", REPO_TOKEN_FILE], env=env)
        _run(["git", *ident, "-C", str(work), "commit", "-q", "-m", "fakenet repo"], env=env)
        _run(["git", *ident, "clone", "-q", "--bare", str(work), str(bare)], env=env)
        _run(["git", "-C", str(bare), "update-server-info"], env=env)

    def _start_servers(self, timeout: float):
        ready = self.workdir / "ready"
        ready.unlink(missing_ok=True)
        for log in LOGS:
            self.log_path(log).touch()
        out = open(self.workdir / "servers.out", "ab")
        self.process = subprocess.Popen(
            nsenter_argv(self.inet_ns) + [sys.executable, str(Path(__file__).resolve()), "serve", str(self.workdir)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fakenet servers did not start:\n{(self.workdir / 'servers.out').read_text()}")
            time.sleep(0.05)
        # The veth carries traffic once both ends are up; wait until the host ns reaches a.test.
        deadline = time.monotonic() + timeout
        while not self._host_reaches(A_TEST, 80):
            if time.monotonic() > deadline:
                raise RuntimeError("the host namespace cannot reach the inet namespace")
            time.sleep(0.05)

    def _host_reaches(self, address: str, port: int) -> bool:
        sock = socket_in_netns(self.host_ns)
        sock.settimeout(2)
        try:
            sock.connect((address, port))
            sock.sendall(b"GET / HTTP/1.0\r\nHost: fakenet-ready\r\n\r\n")
            return sock.recv(100).split(b" ")[1:2] == [b"200"]
        except OSError:
            return False
        finally:
            sock.close()

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for ns in (self.host_ns, self.inet_ns):
            if os.path.exists(netns_path(ns)):
                _delete_namespace(ns)

    # ------------------------------------------------------------ helpers for tests

    def host_run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Runs a command in the host namespace (where the daemon runs)."""
        return subprocess.run(nsenter_argv(self.host_ns) + argv, capture_output=True, text=True, **kw)

    def mark(self) -> dict:
        """The current end of every log, for events_since."""
        return {log: self.log_path(log).stat().st_size for log in LOGS}

    def events_since(self, mark: dict, logs=LOGS) -> list[Event]:
        events = []
        for log in logs:
            with open(self.log_path(log), "rb") as f:
                f.seek(mark[log])
                for line in f.read().decode(errors="replace").splitlines():
                    parts = line.split(" ", 4)
                    if len(parts) >= 4:
                        events.append(Event(log, float(parts[0]), parts[1], parts[2][len("local="):],
                                            parts[3][len("peer="):], parts[4] if len(parts) > 4 else ""))
        return sorted(events, key=lambda e: e.time)


# ================================================================ the servers (inet ns side)

class _Log:
    """One log file: one line per event, appended whole (O_APPEND) and at once."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def write(self, kind: str, local, peer, detail: str = ""):
        detail = detail.replace("\n", "\\n").replace("\r", "\\r")
        os.write(self.fd, f"{time.time():.6f} {kind} local={_fmt(local)} peer={_fmt(peer)} {detail}\n".encode())


def _fmt(address) -> str:
    if not address:
        return "-"
    host, port = address[0], address[1]
    if host.startswith("::ffff:"):
        host = host[len("::ffff:"):]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve(workdir: Path):
    import http.server
    import ssl
    from urllib.parse import parse_qs, urlsplit

    logs = {name: _Log(workdir / f"{name}.log") for name in LOGS}
    www = (workdir / "www").resolve()
    zeros_path = workdir / "zeros"
    with open(zeros_path, "wb") as f:
        f.truncate(ZEROS_FILE_SIZE)

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(workdir / "cert.pem", workdir / "key.pem")

    def remember_sni(ssl_socket, server_name, _context):
        ssl_socket.fakenet_sni = server_name

    tls.sni_callback = remember_sni

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 60

        def log_for(self):
            if self.local[0] == METADATA:
                return logs["metadata"]
            return logs["https" if self.server.use_tls else "http"]

        def setup(self):
            raw = self.request
            self.local, self.peer = raw.getsockname(), raw.getpeername()
            log = self.log_for()
            log.write("accept", self.local, self.peer)
            raw.settimeout(self.timeout)
            try:
                first = raw.recv(1, socket.MSG_PEEK)
            except OSError as exc:
                first = b""
                log.write("closed", self.local, self.peer, f"error {exc}")
            if not first:
                log.write("closed", self.local, self.peer, "before any byte")
                self.silent = True
            else:
                log.write("data", self.local, self.peer)
                self.silent = False
                if self.server.use_tls:
                    try:
                        self.request = tls.wrap_socket(raw, server_side=True)
                    except (OSError, ssl.SSLError) as exc:
                        log.write("tls-failed", self.local, self.peer, str(exc))
                        self.silent = True
                    else:
                        log.write("tls", self.local, self.peer, f"sni={getattr(self.request, 'fakenet_sni', None)}")
            super().setup()

        def handle(self):
            if not self.silent:
                super().handle()

        def parse_request(self):
            ok = super().parse_request()
            line = self.raw_requestline.decode("latin-1").rstrip("\r\n")
            host = self.headers.get("Host", "-") if ok else "-"
            self.log_for().write("request", self.local, self.peer, f"host={host} {line}")
            return ok

        def log_message(self, *args):
            pass

        def send_text(self, status: int, text: str, content_type: str = "text/plain"):
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            local_ip = _fmt(self.local).rsplit(":", 1)[0].strip("[]")
            if self.local[0] == METADATA:
                return self.send_text(200, "fake metadata: iam credentials SECRET-METADATA-TOKEN\n")
            if url.path == "/bytes":
                return self.send_bytes(int(query.get("n", ["0"])[0]))
            if url.path == "/slow":
                return self.send_slow(float(query.get("seconds", ["60"])[0]))
            if url.path.startswith("/repo.git/"):
                return self.send_file(url.path)
            host = self.headers.get("Host", "")
            self.send_text(200, f"hello from {host} via {local_ip}\n")

        def send_bytes(self, n: int):
            """n zero bytes, sent with sendfile() from a cached file so the server is not what
            limits a benchmark (TLS falls back to plain writes)."""
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            sent = 0
            try:
                with open(zeros_path, "rb") as f:
                    while sent < n:
                        f.seek(0)  # the plain-write fallback (TLS) reads from the position
                        piece = self.request.sendfile(f, 0, min(n - sent, ZEROS_FILE_SIZE))
                        if piece == 0:
                            raise OSError("sendfile sent nothing")
                        sent += piece
                self.log_for().write("stream-end", self.local, self.peer, f"ok bytes={n}")
            except OSError as exc:
                self.log_for().write("stream-end", self.local, self.peer, f"error {exc} after {sent}")
                self.close_connection = True

        def send_slow(self, seconds: float):
            """A line every 0.1 s for `seconds`, chunked: a client can tell a cut from the end."""
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            deadline = time.monotonic() + seconds
            ticks = 0
            try:
                while time.monotonic() < deadline:
                    ticks += 1
                    line = f"tick {ticks}\n".encode()
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    time.sleep(0.1)
                self.wfile.write(b"0\r\n\r\n")
                self.log_for().write("stream-end", self.local, self.peer, f"ok ticks={ticks}")
            except OSError as exc:
                self.log_for().write("stream-end", self.local, self.peer, f"error {exc} after ticks={ticks}")
                self.close_connection = True

        def send_file(self, path: str):
            target = (www / path.lstrip("/")).resolve()
            if not target.is_relative_to(www) or not target.is_file():
                return self.send_text(404, "not found\n")
            data = target.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

        def __init__(self, family, address, use_tls):
            self.address_family = family
            self.use_tls = use_tls
            super().__init__(address, Handler)

        def server_bind(self):
            if self.address_family == socket.AF_INET6:
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            socket.socket.setsockopt(self.socket, socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(self.server_address)
            self.server_address = self.socket.getsockname()

    servers = []
    for family, any_address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        servers.append(Server(family, (any_address, 80), False))
        servers.append(Server(family, (any_address, 443), True))
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()

    _start_dns(logs["dns"])
    _start_udp_echo(logs["udp"])
    (workdir / "ready").write_text("ok\n")
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


# ---------------------------------------------------------------- DNS

QTYPES = {1: "A", 28: "AAAA", 16: "TXT", 5: "CNAME", 2: "NS", 6: "SOA", 15: "MX", 255: "ANY", 65: "HTTPS"}


def parse_question(packet: bytes):
    """(id, flags, qname, qtype, end of question) of a DNS query, or None if malformed."""
    if len(packet) < 12:
        return None
    ident, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if qdcount != 1 or flags & 0x8000:
        return None
    labels, pos = [], 12
    while True:
        if pos >= len(packet):
            return None
        length = packet[pos]
        pos += 1
        if length == 0:
            break
        if length > 63 or pos + length > len(packet):
            return None
        labels.append(packet[pos:pos + length].decode("ascii", "replace"))
        pos += length
    if pos + 4 > len(packet):
        return None
    qtype, _qclass = struct.unpack("!HH", packet[pos:pos + 4])
    return ident, flags, ".".join(labels).lower(), qtype, pos + 4


def records_for(name: str, qtype_name: str):
    """(name exists, [values]) from ZONE; any name below evil.test exists and answers TXT."""
    if name in ZONE:
        return True, ZONE[name].get(qtype_name, [])
    if name.endswith(".evil.test"):
        return True, [f"tunnel got {name.split('.')[0]}"] if qtype_name == "TXT" else []
    return False, []


def answer(packet: bytes) -> bytes | None:
    parsed = parse_question(packet)
    if parsed is None:
        return None
    ident, flags, name, qtype, end = parsed
    qtype_name = QTYPES.get(qtype, str(qtype))
    exists, values = records_for(name, qtype_name)
    rcode = 0 if exists else 3  # NXDOMAIN
    rdatas = []
    for value in values:
        if qtype_name == "A":
            rdatas.append(socket.inet_pton(socket.AF_INET, value))
        elif qtype_name == "AAAA":
            rdatas.append(socket.inet_pton(socket.AF_INET6, value))
        elif qtype_name == "TXT":
            text = value.encode()[:255]
            rdatas.append(bytes([len(text)]) + text)
    header = struct.pack("!HHHHHH", ident, 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | rcode, 1, len(rdatas), 0, 0)
    body = packet[12:end]
    for rdata in rdatas:
        body += struct.pack("!HHHIH", 0xC00C, qtype, 1, 60, len(rdata)) + rdata
    return header + body


def make_query(name: str, qtype: str = "A", ident: int | None = None) -> bytes:
    """A DNS query packet (tests send it raw, from inside sandboxes too: see query_script)."""
    code = {v: k for k, v in QTYPES.items()}[qtype]
    ident = ident if ident is not None else int.from_bytes(os.urandom(2), "big")
    qname = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", code, 1)


def _start_dns(log: _Log):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((DNS_SERVER, 53))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind((DNS_SERVER, 53))
    tcp.listen(64)
    local = (DNS_SERVER, 53)

    def describe(packet):
        parsed = parse_question(packet)
        return "malformed" if parsed is None else f"{parsed[2]} {QTYPES.get(parsed[3], parsed[3])}"

    def serve_udp():
        while True:
            packet, peer = udp.recvfrom(4096)
            log.write("query", local, peer, f"{describe(packet)} udp")
            reply = answer(packet)
            if reply is not None:
                udp.sendto(reply, peer)

    def serve_tcp_connection(conn, peer):
        with conn:
            conn.settimeout(10)
            try:
                while True:
                    head = _recv_exact(conn, 2)
                    if head is None:
                        return
                    packet = _recv_exact(conn, struct.unpack("!H", head)[0])
                    if packet is None:
                        return
                    log.write("query", local, peer, f"{describe(packet)} tcp")
                    reply = answer(packet)
                    if reply is None:
                        return
                    conn.sendall(struct.pack("!H", len(reply)) + reply)
            except OSError:
                return

    def serve_tcp():
        while True:
            conn, peer = tcp.accept()
            log.write("accept", local, peer)
            threading.Thread(target=serve_tcp_connection, args=(conn, peer), daemon=True).start()

    threading.Thread(target=serve_udp, daemon=True).start()
    threading.Thread(target=serve_tcp, daemon=True).start()


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _start_udp_echo(log: _Log):
    """One socket per address, so each datagram's log line names the address it was sent to."""
    for address in [GATEWAY] + INET_ADDRESSES + [GATEWAY6] + INET_ADDRESSES6:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.bind((address, UDP_ECHO_PORT))
        threading.Thread(target=_udp_echo_loop, args=(sock, log), daemon=True).start()


def _udp_echo_loop(sock: socket.socket, log: _Log):
    local = sock.getsockname()
    while True:
        data, peer = sock.recvfrom(65535)
        log.write("datagram", local, peer, f"{len(data)} bytes")
        sock.sendto(data, peer)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(Path(sys.argv[2]))
    else:
        sys.exit(f"usage: {sys.argv[0]} serve DIR   (run inside the inet namespace; see FakeNet)")
