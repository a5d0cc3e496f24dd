#!/usr/bin/env python3
"""Network figures of bulkhead's egress proxy and port proxy, on fakenet's namespaces (nothing
leaves the machine): a 1 GiB download through the allowlist proxy (explicit and transparent)
vs direct from the daemon's own namespace; the latency a proxied connection adds; a dev
server's request latency through /v1/sandboxes/{id}/ports/{port}/ and host-name routing vs
direct inside the sandbox. Prints figures; asserts nothing.

    python3 bench/network.py [--build build] [--size-mib 1024] [--runs 3] [--connects 500]
                             [--requests 500] [--quick]
"""
import argparse
import http.client
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
import fakenet  # noqa: E402
import harness  # noqa: E402

DEV_PORT = 8000

# Runs inside the sandbox (or in the host namespace for the direct figures): N fresh
# connections, each sending one small request and timing until the first response byte.
# Prints the milliseconds as a JSON list.
FIRST_BYTE = r'''
import json, socket, sys, time
mode, target, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
host, port = target.rsplit(":", 1)
address = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)[0][4]
if mode == "direct":      # to the server (transparently proxied when run in a sandbox)
    peer, request = address, f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
elif mode == "absolute":  # an explicit proxy request in absolute form
    peer, request = ("127.0.0.1", 1000), f"GET http://{target}/ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
else:                     # "connect": CONNECT through the explicit proxy, then the GET in the tunnel
    peer, request = ("127.0.0.1", 1000), f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
    tunnelled = f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
times = []
for _ in range(count):
    started = time.perf_counter()
    s = socket.create_connection(peer)
    s.sendall(request.encode())
    if mode == "connect":
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(4096)
            assert chunk and answer[:12] != b"HTTP/1.1 403", answer
            answer += chunk
        assert answer.split(b" ")[1] == b"200", answer
        s.sendall(tunnelled.encode())
    first = s.recv(1)
    times.append((time.perf_counter() - started) * 1000)
    assert first, "no answer"
    s.close()
print(json.dumps(times))
'''

# A dev server in the sandbox: answers every GET with a short body, HTTP/1.1.
DEV_SERVER = r'''
import http.server
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"dev server ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", PORT), H).serve_forever()
'''.replace("PORT", str(DEV_PORT))

# In the sandbox: N requests to the dev server, one fresh connection each (as the port proxy
# makes upstream), timed until the whole response is read.
DEV_CLIENT = r'''
import http.client, json, sys, time
times = []
for _ in range(int(sys.argv[1])):
    started = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", PORT)
    c.request("GET", "/")
    assert c.getresponse().read() == b"dev server ok\n"
    c.close()
    times.append((time.perf_counter() - started) * 1000)
print(json.dumps(times))
'''.replace("PORT", str(DEV_PORT))


def percentile(values, p):
    """Nearest rank, as in startup.py: p99 of 500 samples is the 495th smallest."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def latency_row(label, times, baseline=None):
    median, p99 = statistics.median(times), percentile(times, 99)
    added = ""
    if baseline is not None:
        added = f"   added: median {median - statistics.median(baseline):+.3f}  p99 {p99 - percentile(baseline, 99):+.3f}"
    return f"  {label:<44} median {median:7.3f}  p99 {p99:7.3f}  max {max(times):7.3f} ms{added}"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="bhnb-", dir="/tmp"))
        self.net = fakenet.FakeNet(self.tmp / "fakenet")
        harness.BULKHEAD = args.build.resolve() / "bulkhead"
        self.daemon = harness.Daemon(state_dir=self.tmp / "d", log_path=self.tmp / "daemon.log",
                                     netns=self.net.host_ns, extra_args=("--dns-server", fakenet.DNS_SERVER))
        self.client = None

    def exec(self, sandbox_id, cmd, **kw):
        result = self.client.exec(sandbox_id, cmd, timeout=900, timeout_s=0, **kw)
        if result["exit_code"] != 0:
            raise RuntimeError(f"{cmd!r} failed in the sandbox: {result}")
        return result["stdout"]

    def host(self, argv):
        result = self.net.host_run(argv)
        if result.returncode != 0:
            raise RuntimeError(f"{argv} failed in the host namespace: {result.stderr}")
        return result.stdout

    def run(self):
        a = self.args
        self.net.start()
        self.daemon.start()
        self.client = self.daemon.client(timeout=900)
        pid = self.daemon.process.pid
        sandbox = self.client.create(network={"mode": "allowlist", "allow": ["a.test"]})["id"]
        self.client.upload(sandbox, "/workspace/first_byte.py", FIRST_BYTE.encode(), mode="0644")
        load = open("/proc/loadavg").read().split()[0]
        print(f"bulkhead network bench: {os.cpu_count()} cores, load average {load} at the start; "
              f"server: fakenet's Python HTTP server (sendfile) in its own namespace, over a veth")

        # --------------------------------------------------------- throughput
        size = a.size_mib << 20
        url = f"http://a.test/bytes?n={size}"
        curl = ["curl", "-sS", "-o", "/dev/null", "-w", "%{size_download} %{time_total}"]
        cases = [("direct, from the daemon's namespace", "host", curl + ["--resolve", f"a.test:80:{fakenet.A_TEST}", url]),
                 ("explicit proxy (HTTP_PROXY), in the sandbox", "sandbox", curl + [url]),
                 ("transparent (--noproxy '*'), in the sandbox", "sandbox", curl + ["--noproxy", "*", url])]
        print(f"\n{a.size_mib} MiB download over HTTP, {a.runs} runs each (MiB/s; daemon CPU s per GiB moved):")
        for label, where, argv in cases:
            speeds, cpu = [], []
            for _ in range(a.runs):
                cpu_before = cpu_seconds(pid)
                out = self.host(argv) if where == "host" else self.exec(sandbox, argv)
                got, seconds = out.split()
                assert int(got) == size, out
                speeds.append(size / float(seconds) / 2**20)
                cpu.append((cpu_seconds(pid) - cpu_before) / (size / 2**30))
            print(f"  {label:<44} median {statistics.median(speeds):7.0f}  best {max(speeds):7.0f} MiB/s"
                  f"   daemon CPU {statistics.median(cpu):.2f} s/GiB")
        print(f"  daemon VmRSS after the downloads: {rss_mib(pid):.1f} MiB   (goal: proxy >= 1024 MiB/s)")

        # --------------------------------------------------------- added connect latency
        n = a.connects
        target = "a.test:80"
        host_script = self.tmp / "first_byte.py"
        host_script.write_text(FIRST_BYTE)
        direct = json.loads(self.host(["python3", str(host_script), "direct", f"{fakenet.A_TEST}:80", str(n)]))
        rows = [("direct, from the daemon's namespace", direct)]
        for label, mode in (("transparent, in the sandbox", "direct"), ("explicit proxy, absolute-form GET", "absolute"),
                            ("explicit proxy, CONNECT then GET in it", "connect")):
            self.exec(sandbox, ["python3", "/workspace/first_byte.py", mode, target, "20"])  # warm up
            rows.append((label, json.loads(self.exec(sandbox, ["python3", "/workspace/first_byte.py", mode, target, str(n)]))))
        print(f"\nnew connection + small request until the first response byte, {n} connections each:")
        for label, times in rows:
            print(latency_row(label, times, None if times is direct else direct))
        print("  (goal: <= 1 ms added)")

        # --------------------------------------------------------- dev server through the port proxy
        self.client.upload(sandbox, "/workspace/dev_server.py", DEV_SERVER.encode(), mode="0644")
        self.client.upload(sandbox, "/workspace/dev_client.py", DEV_CLIENT.encode(), mode="0644")
        r = self.client.post(f"/v1/sandboxes/{sandbox}/processes", {"cmd": ["python3", "/workspace/dev_server.py"]})
        assert r.status == 201, r
        path = f"/v1/sandboxes/{sandbox}/ports/{DEV_PORT}/"
        deadline = time.monotonic() + 30
        while self.client.get(path).status != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"dev server not reachable: {self.client.get(path)!r}")
            time.sleep(0.1)
        m = a.requests
        inside = json.loads(self.exec(sandbox, ["python3", "/workspace/dev_client.py", str(m)]))
        by_path = self.keep_alive_requests(path, {"Authorization": f"Bearer {self.daemon.key}"}, m)
        by_host = self.keep_alive_requests("/", {"Host": f"{DEV_PORT}-{sandbox}.localhost:7420"}, m)
        print(f"\ndev server (Python http.server on the sandbox's 127.0.0.1:{DEV_PORT}), {m} GETs each:")
        print(latency_row("direct inside the sandbox (new connection)", inside))
        print(latency_row("port proxy /v1/sandboxes/{id}/ports/8000/", by_path, inside))
        print(latency_row("host routing 8000-{id}.localhost:7420", by_host, inside))
        print("  (API over the daemon's unix socket, one keep-alive client connection; the daemon opens a "
              "fresh upstream connection per request)")
        self.client.remove(sandbox)

    def keep_alive_requests(self, path, headers, count):
        connection = harness.UnixHTTPConnection(str(self.daemon.socket_path), 60)
        times = []
        for i in range(count + 20):  # the first 20 warm up
            started = time.perf_counter()
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            body = response.read()
            if response.status != 200 or body != b"dev server ok\n":
                raise RuntimeError(f"GET {path} -> {response.status} {body[:200]!r}")
            if i >= 20:
                times.append((time.perf_counter() - started) * 1000)
        connection.close()
        return times

    def close(self):
        try:
            self.daemon.destroy()
        finally:
            self.net.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=REPO / "build", type=Path)
    parser.add_argument("--size-mib", default=1024, type=int)
    parser.add_argument("--runs", default=3, type=int)
    parser.add_argument("--connects", default=500, type=int)
    parser.add_argument("--requests", default=500, type=int)
    parser.add_argument("--quick", action="store_true", help="256 MiB, 1 run, 100 connects and requests")
    args = parser.parse_args()
    if args.quick:
        args.size_mib, args.runs, args.connects, args.requests = 256, 1, 100, 100
    if os.geteuid() != 0:
        print("must run as root (network namespaces)", file=sys.stderr)
        return 2
    bench = Bench(args)
    try:
        bench.run()
    except (RuntimeError, AssertionError, OSError, http.client.HTTPException) as exc:
        print(f"failed: {exc}\n--- daemon log tail\n{bench.daemon.log_tail()}", file=sys.stderr)
        return 1
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
