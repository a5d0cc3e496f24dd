"""Resource limits hurt only the sandbox that hits them."""

import glob
import os
import re

import pytest

import harness
from conftest import compile_static
from harness import file_workers, files_url, wait_until

ALLOCATE_200MB = "data = b'\\x01' * (200 * 1024 * 1024); print('allocated', len(data))"

FORK_UNTIL_REFUSED = """
import os, signal, time
children = []
try:
    while len(children) < 1000:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
except OSError as e:
    print('refused', e.errno)
print('forked', len(children))
for pid in children:
    os.kill(pid, signal.SIGKILL)
for pid in children:
    os.waitpid(pid, 0)
"""


def test_session_daemon_enforces_disk_quotas(daemon):
    """Where the host has loop devices the daemon must have its quota filesystem; when it
    falls back to plain directories its log says why, and this shows it (the disk tests
    below would only see writes that went through)."""
    if not os.access("/dev/loop-control", os.R_OK | os.W_OK):
        pytest.skip("no loop devices here: plain layers are the daemon's documented fallback")
    log = daemon.log_path.read_text(errors="replace").splitlines()
    storage = [line for line in log if "storage:" in line or "disk quotas" in line]
    assert storage and not any("quota: none" in line or "NOT enforced" in line for line in storage), \
        "\n".join(storage) or daemon.log_tail()


def test_memory_limit_kills_a_process_that_exceeds_it(client, sandbox_factory):
    sandbox_id = sandbox_factory(memory_mb=64)["id"]
    result = client.exec(sandbox_id, ["python3", "-c", ALLOCATE_200MB], timeout_s=60)
    assert result["timed_out"] is False, result
    assert "allocated" not in result["stdout"], "200 MB allocation succeeded under a 64 MB limit"
    assert result["signal"] == "SIGKILL" or (result["exit_code"] not in (0, None)), result
    # the sandbox still answers, and a small allocation works
    assert client.sh(sandbox_id, "echo alive") == "alive\n"
    small = client.exec(sandbox_id, ["python3", "-c", "b = b'x' * (8 << 20); print(len(b))"])
    assert small["stdout"] == f"{8 << 20}\n", small


# Forks N children that each touch KIB KiB and wait, then (after SETTLE ms, if given) kills
# those still there: each is smaller than init, so an OOM killer that weighs init with them
# picks init first.
SMALL_ALLOCATORS = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
  int n = atoi(argv[1]), forked = 0;
  size_t each = (size_t)atoi(argv[2]) << 10;
  pid_t children[1024];
  // Each child closes its end once its memory is touched (or dies first): the pipe's EOF says
  // every child is there or gone, not only forked.
  int touched[2];
  if (pipe(touched) != 0) return 1;
  for (int i = 0; i < n && i < 1024; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      volatile char *p = malloc(each);
      for (size_t at = 0; p && at < each; at += 4096) p[at] = 1;
      close(touched[1]);
      pause();
      _exit(0);
    }
    if (pid < 0) break;
    children[forked++] = pid;
  }
  close(touched[1]);
  char byte;
  while (read(touched[0], &byte, 1) > 0) {
  }
  // (gvisor: init's OOM killing is asynchronous, argv[3] ms after the forks.)
  if (argc > 3) usleep(atoi(argv[3]) * 1000);
  // Those the OOM killer took are gone already; the rest go now.
  int killed = 0;
  for (int i = 0; i < forked; i++) {
    int status;
    if (waitpid(children[i], &status, WNOHANG) == children[i]) {
      killed++;
      children[i] = 0;
    }
  }
  for (int i = 0; i < forked; i++) if (children[i]) kill(children[i], SIGKILL);
  for (int i = 0; i < forked; i++) if (children[i]) waitpid(children[i], NULL, 0);
  printf("forked %d, %d gone before the end\n", forked, killed);
  return 0;
}
"""


@pytest.fixture(scope="module")
def small_allocators(session_dir):
    return compile_static(SMALL_ALLOCATORS, session_dir / "small-allocators").read_bytes()


def start_chatty_background_process(client, sandbox_id):
    """Init keeps the last 4 MiB of a background process's output: init weighs megabytes."""
    r = client.post(f"/v1/sandboxes/{sandbox_id}/processes", {"cmd": "head -c 6000000 /dev/urandom | base64; sleep 600"})
    assert r.status == 201, r
    pid = r.json()["pid"]
    assert wait_until(lambda: client.get(f"/v1/sandboxes/{sandbox_id}/processes/{pid}/output").status == 200
                      and len(client.get(f"/v1/sandboxes/{sandbox_id}/processes/{pid}/output").body) > 4_000_000,
                      timeout=30)


# An OOM among hundreds of small processes may thrash for minutes on a loaded 2-core machine
# before the killer acts (CI builds the sanitizer tree beside the tests): a generous bound, not a
# figure; the client waits past the command's own deadline so an answer is always read.
OOM_RUN_S = 300


def test_an_oom_of_many_small_processes_kills_them_not_init(client, sandbox_factory, small_allocators):
    """Issue 17, finding 9: 300 children of 512 KiB each overrun 64 MiB. The OOM killer must
    take children, never init (which weighs more than any of them): the sandbox stays
    running and usable."""
    sandbox_id = sandbox_factory(memory_mb=64)["id"]
    start_chatty_background_process(client, sandbox_id)
    client.upload(sandbox_id, "/workspace/allocators", small_allocators)
    # gvisor: 64 MiB carry fewer tasks (each costs the host its stub too): fewer, larger ones.
    # (64 MiB carry 21 gvisor tasks, init, the chatty process and this exec's among them.)
    children, kib = (300, 512) if harness.RUNTIME == "native" else (12, 8192)
    settle = [] if harness.RUNTIME == "native" else ["2000"]  # (memory_guard.h: it looks every few ms)
    result = client.exec(sandbox_id, ["/workspace/allocators", str(children), str(kib), *settle], timeout_s=OOM_RUN_S,
                         timeout=OOM_RUN_S + 30)
    assert result["exit_code"] == 0, result
    forked, gone = (int(n) for n in re.fullmatch(r"forked (\d+), (\d+) gone before the end\n", result["stdout"]).groups())
    assert forked == children and gone > 0, result  # the OOM killer took some
    assert client.sandbox(sandbox_id)["state"] == "running", client.sandbox(sandbox_id)
    assert client.sh(sandbox_id, "echo alive") == "alive\n"
    small = client.exec(sandbox_id, ["python3", "-c", "b = b'x' * (8 << 20); print(len(b))"])
    assert small["stdout"] == f"{8 << 20}\n", small
    assert client.sandbox(sandbox_id)["state"] == "running"


def test_init_keeps_a_bounded_total_of_output_and_survives_an_oom_beside_many_chatty_processes(
        client, sandbox_factory, small_allocators):
    """Each background process's ring holds 4 MiB, but init's reserve is 16 MiB: with eight
    chatty processes init would hold 32 MiB of output, grow past its reserve and become the
    biggest process of an OOM among small ones. All rings together stay within 8 MiB, the
    longest-finished process giving up its oldest output first (the last ones keep theirs)."""
    sandbox_id = sandbox_factory(memory_mb=96)["id"]
    pids = []
    for _ in range(8):
        r = client.post(f"/v1/sandboxes/{sandbox_id}/processes", {"cmd": "head -c 6000000 /dev/urandom | base64"})
        assert r.status == 201, r
        pids.append(r.json()["pid"])

    def finished():
        return all(client.get(f"/v1/sandboxes/{sandbox_id}/processes/{pid}").json()["state"] == "exited"
                   for pid in pids)
    assert wait_until(finished, timeout=60)
    kept = [len(client.get(f"/v1/sandboxes/{sandbox_id}/processes/{pid}/output").body) for pid in pids]
    held = sum(kept)
    # The events' JSON adds a little to the output itself (an escaped newline per 76 bytes).
    assert held < 9 << 20, kept
    assert max(kept) > 1 << 20, kept  # shed from the ones that finished first, not spread thin
    client.upload(sandbox_id, "/workspace/allocators", small_allocators)
    # 100 of 2 MiB overrun 96 MiB: each far below the 16 MiB init would weigh past its reserve,
    # and few enough not to thrash for minutes first (400 of 512 KiB took three). gvisor: fewer,
    # larger ones, as in the test above.
    children, kib = (100, 2048) if harness.RUNTIME == "native" else (12, 8192)
    settle = [] if harness.RUNTIME == "native" else ["2000"]
    result = client.exec(sandbox_id, ["/workspace/allocators", str(children), str(kib), *settle], timeout_s=OOM_RUN_S,
                         timeout=OOM_RUN_S + 30)
    assert result["exit_code"] == 0, result
    forked, gone = (int(n) for n in re.fullmatch(r"forked (\d+), (\d+) gone before the end\n", result["stdout"]).groups())
    assert forked == children and gone > 0, result  # the OOM killer took some
    assert client.sandbox(sandbox_id)["state"] == "running", client.sandbox(sandbox_id)
    assert client.sh(sandbox_id, "echo alive") == "alive\n"


def test_an_oom_of_one_hog_beside_a_chatty_init_kills_the_hog(client, sandbox_factory):
    """Init holds the output of background processes (megabytes of it): a hog that overruns
    the limit dies, init does not."""
    sandbox_id = sandbox_factory(memory_mb=128)["id"]
    start_chatty_background_process(client, sandbox_id)
    hog = "b = []\nwhile True: b.append(bytearray(1 << 20))"
    result = client.exec(sandbox_id, ["python3", "-c", hog], timeout_s=120)
    assert result["signal"] == "SIGKILL", result
    assert client.sandbox(sandbox_id)["state"] == "running", client.sandbox(sandbox_id)
    assert client.sh(sandbox_id, "echo alive") == "alive\n"


# In the sandbox: a server that accepts every connection and never reads, and as many clients
# as the descriptor limit allows (at most N pairs) that each write up to 128 KiB without
# blocking. Prints the pairs made and the memory all TCP sockets of the sandbox hold then
# (ss: receive queue + send queue + reserved, per socket).
FILL_SOCKET_BUFFERS = r"""
import re, resource, socket, subprocess, sys
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(4096)
limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
pairs = min(int(sys.argv[1]), (limit - 64) // 2)  # room left for ss
held = []
chunk = b"x" * 65536
for _ in range(pairs):
    client = socket.create_connection(server.getsockname())
    held += [client, server.accept()[0]]
    client.setblocking(False)
    sent = 0
    while sent < 128 << 10:
        try:
            sent += client.send(chunk)
        except BlockingIOError:
            break
out = subprocess.run(["ss", "-tmnH"], capture_output=True, text=True, check=True).stdout
held_bytes = sum(int(r) + int(f) + int(w) for r, f, w in re.findall(r"skmem:\(r(\d+),rb\d+,t\d+,tb\d+,f(\d+),w(\d+)", out))
print(pairs, held_bytes)
"""


def test_tcp_buffers_stay_within_the_memory_limit(client, sandbox_factory):
    """Issue 17, finding 6: on cgroup v1 a sandbox's TCP buffers were charged to nothing, so a
    128 MiB sandbox queued hundreds of MiB in sockets on its own loopback (3000 connections:
    ~400 MiB). They are bounded now (v1: a TCP limit of a quarter of the memory limit; v2:
    memory.max), and the descriptor limit keeps what the kernel lets each socket queue past
    that limit inside the memory limit (a sandbox from the warm pool included: it was
    started with the default limits)."""
    memory_mb = 128
    sandbox_id = sandbox_factory(memory_mb=memory_mb)["id"]
    result = client.exec(sandbox_id, ["python3", "-c", FILL_SOCKET_BUFFERS, "3000"], timeout_s=120)
    assert result["exit_code"] == 0, result
    pairs, held = (int(n) for n in result["stdout"].split())
    assert pairs >= 500, f"only {pairs} connections: the attack did not get going"
    assert held <= memory_mb << 20, f"{pairs} connections hold {held >> 20} MiB of socket memory"
    assert client.sh(sandbox_id, "echo alive") == "alive\n"


def host_memory_group(pid: int) -> str:
    """The memory cgroup of a host process, as the host sees it (v1's memory line, or v2's)."""
    lines = open(f"/proc/{pid}/cgroup").read().splitlines()
    return next((line.split(":", 2)[2] for line in lines if line.split(":")[1] == "memory"),
                next(line.split(":", 2)[2] for line in lines if line.startswith("0::")))


def host_pid_inside(sandbox_id, pid_inside: int) -> int:
    """The host pid of the sandbox's process `pid_inside` (the last NSpid field is the sandbox's)."""
    for pid in harness.cgroup_pids_of(sandbox_id):
        status = harness._read(f"/proc/{pid}/status")
        nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        if nspid and int(nspid[-1]) == pid_inside:
            return pid
    raise AssertionError(f"no host process is pid {pid_inside} of {sandbox_id}")


def test_sandbox_processes_have_no_share_of_inits_protection(client, sandbox_factory):
    """Commands and the file worker run in a memory group init is not in (so their OOM kills
    never pick init; cgroup v1: one group for every sandbox's init, runtime/cgroup.h), with OOM
    score 0, which they cannot lower."""
    sandbox_id = sandbox_factory()["id"]
    # (gvisor: every process shares init's memory group in gVisor's kernel; what spares init
    # there is the rule of the daemon's OOM handling, runtime/memory_watch.h.)
    native = harness.RUNTIME == "native"
    if native:
        sleeper = client.post(f"/v1/sandboxes/{sandbox_id}/processes", {"cmd": "sleep 60"}).json()["pid"]
        init_group = host_memory_group(host_pid_inside(sandbox_id, 1))
        command_group = host_memory_group(host_pid_inside(sandbox_id, sleeper))
        assert harness.host_name(sandbox_id) in command_group, command_group
        assert not init_group.startswith(command_group + "/") and init_group != command_group, init_group
        inits = f"/sys/fs/cgroup/memory{init_group}"
        if init_group.endswith("/.inits"):  # cgroup v1: sized for every sandbox group beside it
            def sized_for_each():
                parent = os.path.dirname(inits)
                groups = [d for d in os.listdir(parent) if not d.startswith(".") and os.path.isdir(f"{parent}/{d}")]
                return int(harness._read(f"{inits}/memory.limit_in_bytes")) == len(groups) * (16 << 20)
            assert wait_until(sized_for_each, timeout=10), harness._read(f"{inits}/memory.limit_in_bytes")
    assert client.sh(sandbox_id, "cat /proc/self/oom_score_adj") == "0\n"
    # (gVisor lets a process lower its own score there, but that score shelters nothing: the
    # daemon's OOM handling picks by resident size alone.)
    for value in ("-1", "-1000") if native else ():
        attempt = client.exec(sandbox_id, f"echo {value} > /proc/self/oom_score_adj")
        assert attempt["exit_code"] != 0, attempt
    # A file watch keeps its worker (a fork of init) alive meanwhile.
    client.sh(sandbox_id, "mkdir -p /workspace/watched")
    conn = client.connection(timeout=30)
    conn.request("GET", files_url(sandbox_id, "/watch", path="/workspace/watched"),
                 headers={"Authorization": f"Bearer {client.key}"})
    try:
        assert conn.getresponse().status == 200
        workers = wait_until(lambda: file_workers(client, sandbox_id), timeout=10)
        assert workers, "no file worker while the watch runs"
        worker = workers[0]
        assert not native or host_memory_group(host_pid_inside(sandbox_id, int(worker))) == command_group, worker
        assert client.sh(sandbox_id, f"cat /proc/{worker}/oom_score_adj") == "0\n"
    finally:
        conn.close()


def test_pids_limit_stops_a_fork_loop_near_it(client, sandbox_factory):
    sandbox_id = sandbox_factory(pids=32)["id"]
    result = client.exec(sandbox_id, ["python3", "-c", FORK_UNTIL_REFUSED], timeout_s=60)
    assert result["exit_code"] == 0, result
    assert "refused" in result["stdout"], f"1000 forks went through with pids=32: {result}"
    forked = int(result["stdout"].split("forked")[1].split()[0])
    # init + python are already two of the 32
    assert 20 <= forked <= 31, f"forked {forked} children with pids=32"
    assert client.sh(sandbox_id, "echo alive") == "alive\n"


def test_disk_quota_stops_writes_and_sandbox_keeps_working(client, sandbox_factory):
    sandbox_id = sandbox_factory(disk_mb=64)["id"]
    result = client.exec(sandbox_id, "dd if=/dev/zero of=/workspace/big bs=1M count=200 conv=fsync", timeout_s=120)
    assert result["exit_code"] != 0, f"200 MB written under a 64 MB quota: {result}"
    assert "no space" in result["stderr"].lower() or "quota" in result["stderr"].lower(), result
    size = int(client.sh(sandbox_id, "stat -c %s /workspace/big").strip())
    assert size <= 80 * 1024 * 1024, f"{size} bytes landed despite disk_mb=64"
    # freeing the space makes the sandbox usable again
    client.sh(sandbox_id, "rm -f /workspace/big")
    assert client.sh(sandbox_id, "echo ok > /workspace/after && cat /workspace/after") == "ok\n"
    assert client.sh(sandbox_id, "head -c 10000000 /dev/zero > /workspace/ten && stat -c %s /workspace/ten") \
        == "10000000\n"


def test_cpu_limit_caps_a_spinner(client, sandbox_factory):
    """Two busy loops for 2 s of wall time under cpus=0.25 get about 0.5 s of CPU, not 2-4 s."""
    sandbox_id = sandbox_factory(cpus=0.25)["id"]
    before = client.get(f"/v1/sandboxes/{sandbox_id}").json()["usage"]["cpu_s"]
    spin = "timeout 2 sh -c 'while :; do :; done' & timeout 2 sh -c 'while :; do :; done'; wait"
    result = client.exec(sandbox_id, spin, timeout_s=30)
    assert result["timed_out"] is False, result
    used = client.get(f"/v1/sandboxes/{sandbox_id}").json()["usage"]["cpu_s"] - before
    assert 0.2 < used < 1.0, f"{used:.2f} s of CPU in 2 s of wall time under cpus=0.25"


def test_sandbox_reads_its_own_limits_under_sys_fs_cgroup_read_only(client, sandbox_factory):
    """Runtimes (JVM, Go, Node) size heaps and threads from the cgroup they find there."""
    # (512 MiB: enough for 100 processes on gvisor too, gvisor_tier.h InsideLimits)
    sandbox_id = sandbox_factory(memory_mb=512, pids=100)["id"]
    v2 = client.exec(sandbox_id, ["test", "-e", "/sys/fs/cgroup/cgroup.controllers"])["exit_code"] == 0
    memory = "/sys/fs/cgroup/memory.max" if v2 else "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    pids = "/sys/fs/cgroup/pids.max" if v2 else "/sys/fs/cgroup/pids/pids.max"
    assert client.sh(sandbox_id, f"cat {memory}").strip() == str(512 * 1024 * 1024)
    assert client.sh(sandbox_id, f"cat {pids}").strip() == "100"
    attempt = client.exec(sandbox_id, f"echo 100000 > {pids}")
    assert attempt["exit_code"] != 0 and "Read-only" in attempt["stderr"], attempt
    assert client.sh(sandbox_id, f"cat {pids}").strip() == "100"


def _cpu_weights(names) -> dict[str, int]:
    """Each named cgroup's CPU weight: v1 cpu.shares, v2 cpu.weight."""
    weights = {}
    for path in glob.glob("/sys/fs/cgroup/*/bulkhead-*/sb-*/cpu.shares") + \
            glob.glob("/sys/fs/cgroup/bulkhead-*/sb-*/cpu.weight"):
        name = os.path.basename(os.path.dirname(path))
        if name in names:
            weights[name] = int(open(path).read())
    return weights


def _daemons_sandbox_groups(daemon) -> set[str]:
    parent = harness.cgroup_parent_name(daemon.state_dir)
    return {os.path.basename(d) for d in glob.glob(f"/sys/fs/cgroup/*/{parent}*/sb-*")
            + glob.glob(f"/sys/fs/cgroup/{parent}*/sb-*")}


def test_a_warm_pool_boots_in_the_background_and_hands_out_at_full_cpu_weight(daemon_factory):
    """A pool's refill yields the CPU to the sandboxes in use (it would slow a create's first
    command otherwise): the lowest weight while pooled, the usual one once handed out."""
    daemon = daemon_factory(warm_pool=1)
    daemon.start()
    client = daemon.client()

    assert wait_until(lambda: client.metric("bulkhead_warm_pool_ready") == 1, timeout=60)
    pooled = _daemons_sandbox_groups(daemon)
    assert pooled and set(_cpu_weights(pooled).values()) <= {1, 2}, _cpu_weights(pooled)
    sandbox = client.create()["id"]
    handed_out = harness.host_name(sandbox)
    assert handed_out in pooled, "the create came from the pool"
    assert set(_cpu_weights({handed_out}).values()) <= {100, 1024} and _cpu_weights({handed_out})
    assert client.sh(sandbox, "echo hi") == "hi\n"
    assert wait_until(lambda: client.metric("bulkhead_warm_pool_ready") == 1, timeout=60)
    refilled = _daemons_sandbox_groups(daemon) - {handed_out}
    assert refilled and set(_cpu_weights(refilled).values()) <= {1, 2}
