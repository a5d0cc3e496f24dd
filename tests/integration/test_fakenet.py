"""The fake internet itself (fakenet.py), checked from its host namespace without any daemon:
so a failing network test is bulkhead's doing, not the test bed's."""

import os
import socket
import struct
import subprocess
import time

import pytest

import fakenet as fn
from harness import wait_until


def host_curl(net, *args):
    return net.host_run(["curl", "-sS", "--max-time", "10", *args])


def test_http_and_https_answer_on_every_address_and_log_it(fakenet):
    mark = fakenet.mark()
    for address in (fn.A_TEST, fn.B_TEST, fn.OTHER_TEST, fn.NAMELESS, fn.LAN_HOST):
        r = host_curl(fakenet, f"http://{address}/")
        assert (r.returncode, r.stdout) == (0, f"hello from {address} via {address}\n"), r
    for address in fn.INET_ADDRESSES6:
        r = host_curl(fakenet, "-g", f"http://[{address}]/")
        assert (r.returncode, r.stdout) == (0, f"hello from [{address}] via {address}\n"), r
    r = host_curl(fakenet, "--cacert", str(fakenet.cert_path), "--resolve", f"a.test:443:{fn.A_TEST}", "https://a.test/")
    assert (r.returncode, r.stdout) == (0, f"hello from a.test via {fn.A_TEST}\n"), r
    r = host_curl(fakenet, f"http://{fn.METADATA}/latest/meta-data/")
    assert r.returncode == 0 and "SECRET-METADATA-TOKEN" in r.stdout, r

    events = fakenet.events_since(mark)
    tls = [e for e in events if e.log == "https" and e.kind == "tls"]
    assert [e.detail for e in tls] == ["sni=a.test"], events
    requests = [e for e in events if e.kind == "request"]
    assert len(requests) == 9, events
    assert {e.local_ip for e in requests if e.log == "http"} == {fn.A_TEST, fn.B_TEST, fn.OTHER_TEST, fn.NAMELESS,
                                                                  fn.LAN_HOST, *fn.INET_ADDRESSES6}
    assert [e.local for e in requests if e.log == "metadata"] == [f"{fn.METADATA}:80"]
    assert all(e.peer.rsplit(":", 1)[0].strip("[]") in (fn.HOST_ADDRESS, fn.HOST_ADDRESS6) for e in events), events


def test_a_connection_that_sends_nothing_is_logged_as_such(fakenet):
    mark = fakenet.mark()
    sock = fn.socket_in_netns(fakenet.host_ns)
    sock.connect((fn.OTHER_TEST, 443))
    sock.close()
    events = []
    for _ in range(50):
        events = fakenet.events_since(mark)
        if len(events) >= 2:
            break
        time.sleep(0.05)
    assert [(e.log, e.kind) for e in events] == [("https", "accept"), ("https", "closed")], events


def dns_query(net, name, qtype, transport):
    def ask():
        packet = fn.make_query(name, qtype)
        if transport == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(5)
            s.sendto(packet, (fn.DNS_SERVER, 53))
            return s.recv(4096)
        s = socket.create_connection((fn.DNS_SERVER, 53), timeout=5)
        s.sendall(struct.pack("!H", len(packet)) + packet)
        length = struct.unpack("!H", s.recv(2))[0]
        data = b""
        while len(data) < length:
            data += s.recv(4096)
        return data
    reply = fn.in_netns(net.host_ns, ask)
    return reply[3] & 0x0F, struct.unpack("!H", reply[6:8])[0], reply


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_dns_answers_the_zone(fakenet, transport):
    mark = fakenet.mark()
    rcode, count, reply = dns_query(fakenet, "a.test", "A", transport)
    assert (rcode, count) == (0, 1) and reply.endswith(socket.inet_aton(fn.A_TEST))
    rcode, count, reply = dns_query(fakenet, "a.test", "AAAA", transport)
    assert (rcode, count) == (0, 1) and reply.endswith(socket.inet_pton(socket.AF_INET6, fn.A_TEST6))
    rcode, count, reply = dns_query(fakenet, "rebind.test", "A", transport)
    assert (rcode, count) == (0, 1) and reply.endswith(socket.inet_aton(fn.LAN_HOST))
    rcode, count, reply = dns_query(fakenet, "meta.test", "A", transport)
    assert (rcode, count) == (0, 1) and reply.endswith(socket.inet_aton(fn.METADATA))
    rcode, count, reply = dns_query(fakenet, "c2VjcmV0.evil.test", "TXT", transport)
    assert (rcode, count) == (0, 1) and reply.endswith(b"tunnel got c2vjcmv0")  # names are case-insensitive: lower-cased
    assert dns_query(fakenet, "b.test", "AAAA", transport)[:2] == (0, 0)  # exists, no such record
    assert dns_query(fakenet, "nowhere.test", "A", transport)[:2] == (3, 0)  # NXDOMAIN
    queries = [e.detail for e in fakenet.events_since(mark, ("dns",)) if e.kind == "query"]
    assert queries == [f"{q} {transport}" for q in ("a.test A", "a.test AAAA", "rebind.test A", "meta.test A",
                                                    "c2vjcmv0.evil.test TXT", "b.test AAAA", "nowhere.test A")]


def test_udp_echo_logs_each_datagram(fakenet):
    mark = fakenet.mark()

    def ping():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(5)
        s.sendto(b"ping", (fn.A_TEST, fn.UDP_ECHO_PORT))
        return s.recv(100)

    assert fn.in_netns(fakenet.host_ns, ping) == b"ping"
    assert [(e.kind, e.local) for e in fakenet.events_since(mark, ("udp",))] == [("datagram", f"{fn.A_TEST}:9999")]


def test_slow_stream_logs_a_cut(fakenet):
    mark = fakenet.mark()
    r = host_curl(fakenet, "-N", "--max-time", "0.6", f"http://{fn.A_TEST}/slow?seconds=30")
    assert r.returncode == 28 and r.stdout.startswith("tick 1\n"), r
    ended = wait_until(lambda: [e for e in fakenet.events_since(mark) if e.kind == "stream-end"], timeout=10)
    assert len(ended) == 1 and ended[0].detail.startswith("error"), ended


def test_bytes_and_the_git_repo(fakenet, tmp_path):
    r = host_curl(fakenet, "-o", "/dev/null", "-w", "%{size_download}", f"http://{fn.A_TEST}/bytes?n=200000000")
    assert (r.returncode, r.stdout) == (0, "200000000"), r
    r = host_curl(fakenet, "-k", "-o", "/dev/null", "-w", "%{size_download}", f"https://{fn.A_TEST}/bytes?n=3000000")
    assert (r.returncode, r.stdout) == (0, "3000000"), r
    target = tmp_path / "clone"
    r = fakenet.host_run(["git", "-c", f"http.curloptResolve=a.test:443:{fn.A_TEST}", "-c",
                          f"http.sslCAInfo={fakenet.cert_path}", "clone", "-q", "https://a.test/repo.git", str(target)],
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"})
    assert r.returncode == 0, r
    assert (target / fn.REPO_TOKEN_FILE).read_text() == fakenet.repo_token + "\n"
    assert host_curl(fakenet, "--path-as-is", f"http://{fn.A_TEST}/repo.git/../../key.pem").stdout == "not found\n"


def test_the_machines_own_network_is_untouched(fakenet):
    """The veth and every test address live in the two test namespaces only."""
    root = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    assert "198.18.0." not in root and "2001:db8:1::" not in root, root
    assert "veth-inet" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert {fakenet.host_ns, fakenet.inet_ns} <= set(os.listdir("/run/netns"))
