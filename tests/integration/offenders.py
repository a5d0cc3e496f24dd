"""Sandboxes behaving badly, for the exhaustion test (test_exhaustion.py) and its benchmark
(bench/neighbours.py): each offender is a shell script run as a background process in the
offending sandbox, forever, until the sandbox is deleted; "output flood" also needs clients
that pull the output through the daemon (flood_clients). Standard library only."""

import json
import threading
import time

# The offending sandbox's limits: small, so that each bomb reaches its wall in a second or two.
OFFENDER_SPEC = {"memory_mb": 256, "pids": 128, "disk_mb": 256, "cpus": 1.0}

# Every process keeps forking, forever, and retries when refused: the pids limit is reached
# at once and stays reached. (A shell's `bomb & ` loop dies out instead: sh exits when a fork
# fails.)
FORK_BOMB = "python3 -c 'import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass'"

# Allocate (and touch) until the OOM killer ends it, then again.
MEMORY_BOMB = ("while :; do python3 -c 'a = []\nwhile True: a.append(b\"x\" * (1 << 20))' "
               "> /dev/null 2>&1; done")

# Fill the disk quota, then keep creating files and appending to one on a full disk.
DISK_FILLER = ("dd if=/dev/zero of=/workspace/fill bs=1M > /dev/null 2>&1; i=0; "
               "while [ $i -lt 200000 ]; do i=$((i + 1)); : > /workspace/t$i 2>/dev/null; "
               "echo x >> /workspace/more 2>/dev/null; done; sleep 100000")

# Raise the descriptor limit to its hard value and open descriptors until refused, then make
# inotify instances and watches until refused; several processes, each holding on.
_FD_INOTIFY = r"""
import ctypes, os, resource, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
fds = []
try:
    while len(fds) < 1 << 20:
        fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError:
    pass
for fd in fds[-64:]:
    os.close(fd)
libc = ctypes.CDLL(None, use_errno=True)
instances = []
while len(instances) < 60:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    instances.append(fd)
base = '/tmp/w%d' % os.getpid()
os.makedirs(base, exist_ok=True)
watches = 0
while instances and watches < 20000:
    path = '%s/%d' % (base, watches)
    try:
        os.mkdir(path)
    except OSError as e:
        # gVisor keeps no watch limit; each watched directory holds one of its Sentry's host
        # descriptors. Those (EMFILE) or the disk quota end it instead: a wall all the same.
        # Held, a Sentry out of descriptors could not take the daemon's next connection to
        # init: let go, so the sandbox answers again.
        print(len(fds), 'fds', len(instances), 'inotify instances', watches, 'watches:', e.strerror, flush=True)
        os._exit(0)
    if libc.inotify_add_watch(instances[0], path.encode(), 0x100) < 0:
        break
    watches += 1
print(len(fds), 'fds', len(instances), 'inotify instances', watches, 'watches', flush=True)
time.sleep(100000)
"""
FD_INOTIFY_EXHAUSTER = "for i in 1 2 3 4; do python3 -c \"$FDPY\" & done; wait"
FD_INOTIFY_ENV = {"FDPY": _FD_INOTIFY}

# Background processes writing as fast as they can (into the per-process rings), while
# flood_clients pull output through the daemon.
OUTPUT_FLOOD = "for i in 1 2 3 4; do yes 'abcdefghijklmnopqrstuvwxyz0123456789' & done; wait"

CPU_SPINNER = "for i in 1 2 3 4; do while :; do :; done & done; wait"

OFFENDERS = {
    "fork bomb": FORK_BOMB,
    "memory bomb": MEMORY_BOMB,
    "disk filler": DISK_FILLER,
    "fd+inotify exhauster": FD_INOTIFY_EXHAUSTER,
    "output flood": OUTPUT_FLOOD,
    "cpu spinner": CPU_SPINNER,
}
ALL_AT_ONCE = "all at once"
# All at once in one sandbox: the fork bomb last, or it would leave the others no pids.
ALL_ORDER = ["cpu spinner", "output flood", "fd+inotify exhauster", "disk filler", "memory bomb", "fork bomb"]


def start_offender(client, sandbox_id: str, name: str) -> list[int]:
    """Starts offender `name` (or ALL_AT_ONCE) as background processes; answers their pids."""
    names = ALL_ORDER if name == ALL_AT_ONCE else [name]
    pids = []
    for each in names:
        if each == "fork bomb" and name == ALL_AT_ONCE:
            time.sleep(1.5)  # the others get going (fill the disk, reach the OOM killer) first
        body = {"cmd": OFFENDERS[each], "tag": each}
        if each == "fd+inotify exhauster":
            body["env"] = FD_INOTIFY_ENV
        r = client.post(f"/v1/sandboxes/{sandbox_id}/processes", body)
        assert r.status == 201, f"start {each}: {r!r}"
        pids.append(r.json()["pid"])
    return pids


class FloodClients:
    """What makes an output flood the daemon's problem: a client following a flooding
    process's output, and a client running non-streamed execs of 64 MiB each (the daemon
    reads it all and keeps the capped part). Runs until stop(); counts bytes pulled."""

    def __init__(self, client, sandbox_id: str, follow_pid: int | None):
        self.client, self.sandbox_id, self.follow_pid = client, sandbox_id, follow_pid
        self.stopping = threading.Event()
        self.bytes_followed = 0
        self.execs = 0
        self.last_error = ""
        self.threads = [threading.Thread(target=self._exec_loop, daemon=True)]
        if follow_pid is not None:
            self.threads.append(threading.Thread(target=self._follow, daemon=True))

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=60)

    def _exec_loop(self):
        while not self.stopping.is_set():
            try:
                r = self.client.post(f"/v1/sandboxes/{self.sandbox_id}/exec",
                                     {"cmd": "yes | head -c 67108864", "timeout_s": 60}, timeout=90)
            except Exception as e:  # the sandbox was deleted under it, or the run ends
                self.last_error = repr(e)
                return
            if r.status == 200:
                self.execs += 1
            else:
                self.last_error = repr(r)

    def _follow(self):
        try:
            conn = self.client.connection(timeout=60)
            conn.request("GET", f"/v1/sandboxes/{self.sandbox_id}/processes/{self.follow_pid}/output?follow=true",
                         headers={"Authorization": f"Bearer {self.client.key}"})
            resp = conn.getresponse()
            while not self.stopping.is_set():
                chunk = resp.read1(1 << 20)
                if not chunk:
                    break
                self.bytes_followed += len(chunk)
            conn.close()
        except Exception:
            return


def neighbour_exec(client, sandbox_id: str, n: int) -> tuple[bool, str]:
    """One exec on the neighbour that must answer exactly: (ok, what went wrong)."""
    try:
        r = client.post(f"/v1/sandboxes/{sandbox_id}/exec", {"cmd": ["echo", f"n{n}"], "timeout_s": 60}, timeout=90)
    except Exception as e:
        return False, f"{type(e).__name__}: {e}"
    if r.status != 200:
        return False, f"status {r.status}: {r.body[:200]!r}"
    result = json.loads(r.body)
    if result.get("exit_code") != 0 or result.get("stdout") != f"n{n}\n":
        return False, f"wrong answer: {result}"
    return True, ""
