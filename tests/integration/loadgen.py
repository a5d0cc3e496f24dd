"""Load (issue 7): many concurrent clients, each looping create -> exec -> write a file ->
read it back -> delete, bounded by a duration and a total count. One thread per client, each
with its own keep-alive HTTP connection. Used by tests/integration/test_load.py (CI-sized) and
bench/load.py (the full run). Standard library only."""

import http.client
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field

STEPS = ("create", "exec", "write", "read", "delete")
FILE_BYTES = 64 * 1024


def percentile(values, fraction):
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, int(round(fraction * len(ordered) + 0.5)) - 1))]


class Connection:
    """One keep-alive connection (TCP or unix socket); reconnects after a failure."""

    def __init__(self, key: str, port: int | None = None, unix_path: str | None = None, timeout: float = 300):
        self.key, self.port, self.unix_path, self.timeout = key, port, unix_path, timeout
        self.conn = None

    def _connect(self):
        if self.unix_path:
            conn = http.client.HTTPConnection("localhost", timeout=self.timeout)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
            conn.sock = sock
            return conn
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)

    def request(self, method, path, body=None, content_type="application/json"):
        """(status, headers, body bytes). A connection that broke is closed and the error raised."""
        if self.conn is None:
            self.conn = self._connect()
        headers = {"Authorization": f"Bearer {self.key}"}
        if body is not None:
            headers["Content-Type"] = content_type
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
        try:
            self.conn.request(method, path, body=body, headers=headers)
            resp = self.conn.getresponse()
            data = resp.read()
        except Exception:
            self.close()
            raise
        if resp.will_close:
            self.close()
        return resp.status, dict(resp.getheaders()), data

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass
class LoadResult:
    clients: int
    seconds: float = 0.0
    completed: int = 0                                          # full create..delete loops
    latencies: dict = field(default_factory=lambda: {s: [] for s in STEPS})  # step -> ms
    errors: dict = field(default_factory=dict)                  # kind -> count
    error_samples: dict = field(default_factory=dict)           # kind -> one message
    rss_samples: list = field(default_factory=list)             # (seconds since start, bytes)
    fd_samples: list = field(default_factory=list)              # (seconds since start, count)
    leftover_sandboxes: list = field(default_factory=list)      # made, not deleted (errors)

    @property
    def error_count(self):
        return sum(self.errors.values())

    def summary(self) -> dict:
        steps = {}
        for step, values in self.latencies.items():
            steps[step] = {"n": len(values)} | {
                name: (round(percentile(values, q), 2) if values else None)
                for name, q in (("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99), ("max_ms", 1.0))}
        rss = [b for _, b in self.rss_samples]
        return {
            "clients": self.clients, "seconds": round(self.seconds, 1), "completed": self.completed,
            "sandboxes_per_s": round(self.completed / self.seconds, 2) if self.seconds else None,
            "steps": steps, "errors": self.errors, "error_samples": self.error_samples,
            "rss_mib": {"first": round(rss[0] / 2**20, 1) if rss else None,
                        "max": round(max(rss) / 2**20, 1) if rss else None,
                        "last": round(rss[-1] / 2**20, 1) if rss else None},
            "fds": {"first": self.fd_samples[0][1] if self.fd_samples else None,
                    "max": max(n for _, n in self.fd_samples) if self.fd_samples else None,
                    "last": self.fd_samples[-1][1] if self.fd_samples else None},
        }


def process_rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def process_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


class LoadRun:
    """Runs the loop in `clients` threads until `duration_s` passes or `max_loops` loops were
    started, sampling the daemon's RSS and descriptors every `sample_s`. `expected` maps an
    error kind ("create:429") to True for errors the caller provokes on purpose."""

    def __init__(self, key, daemon_pid, port=None, unix_path=None, clients=200, duration_s=60.0,
                 max_loops=10**9, sample_s=1.0, expected=(), progress=None):
        self.key, self.daemon_pid, self.port, self.unix_path = key, daemon_pid, port, unix_path
        self.clients, self.duration_s, self.max_loops, self.sample_s = clients, duration_s, max_loops, sample_s
        self.expected = set(expected)
        self.progress = progress
        self.result = LoadResult(clients)
        self.lock = threading.Lock()
        self.started_loops = 0
        self.deadline = 0.0
        self.start_time = 0.0
        self.done = threading.Event()

    def _take_loop(self) -> bool:
        with self.lock:
            if self.started_loops >= self.max_loops or time.monotonic() >= self.deadline:
                return False
            self.started_loops += 1
            return True

    def _error(self, kind: str, message: str):
        with self.lock:
            self.result.errors[kind] = self.result.errors.get(kind, 0) + 1
            self.result.error_samples.setdefault(kind, message[:300])

    def _timed(self, step, conn, method, path, body=None, content_type="application/json"):
        started = time.perf_counter()
        try:
            status, _, data = conn.request(method, path, body, content_type)
        except Exception as e:
            self._error(f"{step}:{type(e).__name__}", str(e))
            return None, None
        elapsed = (time.perf_counter() - started) * 1000
        with self.lock:
            self.result.latencies[step].append(elapsed)
        return status, data

    def _check(self, step, status, data, wanted) -> bool:
        if status is None:
            return False
        if status == wanted:
            return True
        code = ""
        try:
            code = json.loads(data)["error"]["code"]
        except Exception:
            pass
        self._error(f"{step}:{status}" + (f":{code}" if code else ""), data[:300].decode("utf-8", "replace"))
        return False

    def _client(self, number: int):
        conn = Connection(self.key, self.port, self.unix_path)
        payload = os.urandom(FILE_BYTES)
        loop = 0
        try:
            while self._take_loop():
                loop += 1
                status, data = self._timed("create", conn, "POST", "/v1/sandboxes", {"metadata": {"load": str(number)}})
                if not self._check("create", status, data, 201):
                    continue
                sandbox_id = json.loads(data)["id"]
                self._one_sandbox(conn, sandbox_id, f"{number}-{loop}", payload)
                status, data = self._timed("delete", conn, "DELETE", f"/v1/sandboxes/{sandbox_id}")
                if not self._check("delete", status, data, 204):
                    with self.lock:
                        self.result.leftover_sandboxes.append(sandbox_id)
                    continue
                with self.lock:
                    self.result.completed += 1
        finally:
            conn.close()

    def _one_sandbox(self, conn, sandbox_id, token, payload):
        status, data = self._timed("exec", conn, "POST", f"/v1/sandboxes/{sandbox_id}/exec",
                                   {"cmd": ["echo", token]})
        if self._check("exec", status, data, 200):
            result = json.loads(data)
            if result.get("exit_code") != 0 or result.get("stdout") != token + "\n":
                self._error("exec:wrong_answer", json.dumps(result)[:300])
        path = f"/v1/sandboxes/{sandbox_id}/files?path=/workspace/load.bin"
        status, data = self._timed("write", conn, "PUT", path, payload, "application/octet-stream")
        if not self._check("write", status, data, 201):
            return
        status, data = self._timed("read", conn, "GET", path)
        if self._check("read", status, data, 200) and data != payload:
            self._error("read:wrong_bytes", f"{len(data)} bytes back, not the {len(payload)} written")

    def _sampler(self):
        while not self.done.is_set():
            now = time.monotonic() - self.start_time
            rss, fds = process_rss(self.daemon_pid), process_fds(self.daemon_pid)
            with self.lock:
                if rss is not None:
                    self.result.rss_samples.append((round(now, 1), rss))
                if fds is not None:
                    self.result.fd_samples.append((round(now, 1), fds))
                completed = self.result.completed
            if self.progress:
                self.progress(now, completed, rss)
            self.done.wait(self.sample_s)

    def run(self) -> LoadResult:
        self.start_time = time.monotonic()
        self.deadline = self.start_time + self.duration_s
        sampler = threading.Thread(target=self._sampler, daemon=True)
        sampler.start()
        threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(self.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.result.seconds = time.monotonic() - self.start_time
        self.done.set()
        sampler.join()
        return self.result

    def unexpected_errors(self) -> dict:
        return {kind: n for kind, n in self.result.errors.items() if kind not in self.expected}
