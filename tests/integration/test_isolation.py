"""What a sandbox sees from the inside: its own users, host name, files and processes."""

import json
import os
import socket
import uuid

import pytest

import harness
from harness import process_names_inside


def test_root_inside_maps_to_unprivileged_host_uid(client, sandbox):
    assert client.sh(sandbox, "id -u") == "0\n"
    inside, outside, count = (int(x) for x in client.sh(sandbox, "cat /proc/self/uid_map").split())
    assert inside == 0
    assert outside >= 65536, f"sandbox root maps to host uid {outside}"
    assert count >= 1001  # room for the "user" account (1000)
    gid_inside, gid_outside, _ = (int(x) for x in client.sh(sandbox, "cat /proc/self/gid_map").split())
    assert gid_inside == 0 and gid_outside >= 65536


def test_two_sandboxes_get_distinct_host_uid_ranges(client, sandbox_factory):
    a, b = sandbox_factory()["id"], sandbox_factory()["id"]
    start_a, count_a = (int(x) for x in client.sh(a, "cat /proc/self/uid_map").split()[1:])
    start_b, count_b = (int(x) for x in client.sh(b, "cat /proc/self/uid_map").split()[1:])
    assert start_a + count_a <= start_b or start_b + count_b <= start_a, "uid ranges overlap"


def test_sandbox_has_its_own_hostname(client, sandbox):
    inside = client.sh(sandbox, "hostname").strip()
    assert inside and inside != socket.gethostname()
    # changing it inside does not touch the host's
    client.exec(sandbox, "hostname changed-inside")
    assert socket.gethostname() != "changed-inside"


def test_sandbox_processes_start_with_no_signal_ignored_or_blocked(client, sandbox):
    # The daemon ignores SIGPIPE and blocks signals around the clone; none of it may reach what
    # init runs (a command with SIGPIPE ignored would never die on a closed pipe). Init itself,
    # pid 1, ignores what it does not handle.
    status = client.sh(sandbox, "grep -E '^Sig(Ign|Blk):' /proc/self/status")
    assert status.split() == ["SigBlk:", "0000000000000000", "SigIgn:", "0000000000000000"], status


def test_etc_shadow_and_host_secrets_are_absent(client, sandbox):
    assert client.exec(sandbox, ["test", "-e", "/etc/shadow"])["exit_code"] != 0
    assert client.exec(sandbox, ["cat", "/etc/shadow"])["exit_code"] != 0
    passwd = client.sh(sandbox, "cat /etc/passwd")
    assert passwd.startswith("root:") and "user:x:1000:1000" in passwd
    # nothing of the host's /root (the host does have one)
    assert os.path.isdir("/root")
    assert client.sh(sandbox, "ls -A /root 2>/dev/null | wc -l").strip() == "0"


def test_mount_table_names_no_host_path_of_the_state_dir(daemon, client, sandbox):
    mountinfo = client.sh(sandbox, "cat /proc/self/mountinfo")
    assert " / / " in mountinfo and "overlay" in mountinfo
    assert str(daemon.state_dir) not in mountinfo, mountinfo


@pytest.mark.skipif(harness.RUNTIME != "native", reason="the other tiers' /sys is their own kernel's")
def test_sys_is_one_read_only_sysfs_shared_by_all_sandboxes_showing_none_of_the_hosts_devices(
        client, sandbox_factory):
    """Every native sandbox's /sys is a clone of one sysfs the tier mounted in an empty network
    namespace (a superblock per sandbox costs memory in every memory cgroup: bench/README.md,
    density). It is read-only, shows only a loopback among network devices, whatever the
    sandbox's network, and still has each sandbox's own cgroups under /sys/fs/cgroup."""
    closed = sandbox_factory()["id"]
    open_net = sandbox_factory(network={"mode": "open"})["id"]
    devices = {sid: client.sh(sid, "stat -c '%d' /sys").strip() for sid in (closed, open_net)}
    assert devices[closed] == devices[open_net], devices
    host_devices = set(os.listdir("/sys/class/net"))
    assert "lo" in host_devices
    for sid in (closed, open_net):
        assert client.sh(sid, "ls /sys/class/net").split() == ["lo"]
        assert "ro," in client.sh(sid, "grep ' /sys ' /proc/self/mountinfo").split()[5] + ","
        r = client.exec(sid, ["sh", "-c", "echo 1 > /sys/kernel/mm/ksm/run"])
        assert r["exit_code"] != 0 and "Read-only file system" in r["stderr"], r
        r = client.exec(sid, ["umount", "/sys"])
        assert r["exit_code"] != 0, r
    # The open sandbox's own device is still there for netlink and /proc/net.
    assert "eth0" in client.sh(open_net, "cat /proc/net/dev")
    # Each sees its own cgroup's limit under the shared sysfs.
    limits = [client.sh(sandbox_factory(memory_mb=mb)["id"], "cat /sys/fs/cgroup/memory/memory.limit_in_bytes "
                        "/sys/fs/cgroup/memory.max 2>/dev/null | head -1").strip() for mb in (96, 128)]
    assert limits[0] != limits[1], limits


def test_workspace_files_persist_between_execs(client, sandbox):
    token = uuid.uuid4().hex
    client.sh(sandbox, f"mkdir -p /workspace/d && echo {token} > /workspace/d/note.txt")
    assert client.sh(sandbox, "cat /workspace/d/note.txt") == token + "\n"
    assert client.sh(sandbox, "cat d/note.txt", user="root") == token + "\n"


def test_file_written_in_one_sandbox_is_invisible_in_another(client, sandbox_factory):
    a, b = sandbox_factory()["id"], sandbox_factory()["id"]
    token = uuid.uuid4().hex
    client.sh(a, f"echo {token} > /workspace/secret-{token}; echo {token} > /tmp/secret-{token}")
    assert client.sh(a, f"cat /workspace/secret-{token}") == token + "\n"
    for path in (f"/workspace/secret-{token}", f"/tmp/secret-{token}"):
        assert client.exec(b, ["test", "-e", path])["exit_code"] != 0, f"{path} leaked into another sandbox"
    found = client.exec(b, f"grep -rl {token} /workspace /tmp 2>/dev/null")
    assert found["stdout"] == ""


def test_each_sandbox_has_its_own_pid_namespace(client, sandbox_factory):
    a, b = sandbox_factory()["id"], sandbox_factory()["id"]
    listing = client.sh(a, "for d in /proc/[0-9]*; do echo \"${d#/proc/} $(cat $d/comm)\"; done")
    processes = dict(line.split(" ", 1) for line in listing.splitlines())
    # Only the sandbox's init (PID 1) and the probe's own shell and cat: no host process at all.
    assert "1" in processes, processes
    others = {pid: name for pid, name in processes.items() if pid != "1"}
    assert set(others.values()) <= {"sh", "cat"}, processes
    init_comm = client.sh(a, "cat /proc/1/comm").strip()
    with open("/proc/1/comm") as f:
        assert init_comm != f.read().strip(), "PID 1 inside is the host's init"
    ns_a = client.sh(a, "readlink /proc/self/ns/pid").strip()
    ns_b = client.sh(b, "readlink /proc/self/ns/pid").strip()
    assert ns_a != ns_b and ns_a != os.readlink("/proc/self/ns/pid")
    # A process started in one sandbox is not visible in the other.
    conn, response = client.stream_exec(a, ["sleep", "77"])
    try:
        assert b'"start"' in response.readline()
        assert "sleep" in process_names_inside(client, a)
        assert "sleep" not in process_names_inside(client, b)
    finally:
        conn.close()


SOCKET_FAMILY_PROBE = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
SYS_socket = 41  # x86_64; raw syscall so the family goes to the kernel as a full 64-bit word
allowed, denied = [], []
for family in list(range(0, 64)) + [2**31 - 1, 2**32 + 38]:
    kind = 3 if family == 16 else 2  # SOCK_RAW for netlink, else SOCK_DGRAM
    fd = libc.syscall(ctypes.c_long(SYS_socket), ctypes.c_long(family), ctypes.c_long(kind), ctypes.c_long(0))
    if fd >= 0:
        os.close(fd)
        allowed.append(family)
    elif ctypes.get_errno() == errno.EPERM:
        denied.append(family)
print(json.dumps([allowed, denied]))
"""


def test_only_unix_inet_inet6_and_netlink_sockets_can_be_made(client, sandbox):
    """Every other family (packet, vsock, AF_ALG's crypto sockets, can, tipc...) is refused by
    the seccomp filter itself (EPERM), whatever the kernel has built in."""
    out = client.sh(sandbox, f"python3 -c '{SOCKET_FAMILY_PROBE}'")
    allowed, denied = json.loads(out)
    assert allowed == [1, 2, 10, 16]
    expected_denied = [f for f in range(0, 64) if f not in (1, 2, 10, 16)] + [2**31 - 1, 2**32 + 38]
    assert denied == expected_denied


SYSCALL_PROBE = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return 0 if r >= 0 else ctypes.get_errno()
timex = ctypes.create_string_buffer(512)  # struct timex, modes = 0: a read-only query
buf = ctypes.create_string_buffer(8)
local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
remote = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
print(json.dumps({
    "clock_adjtime": call(305, 0, ctypes.addressof(timex)),
    "process_vm_readv": call(310, os.getpid(), ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0),
    "mbind": call(237, 0, 0, 0, 0, 0, 0),
    "set_mempolicy": call(238, 0, 0, 0),
    "lsm_list_modules": call(461, 0, 0, 0),
    "open_tree_attr": call(467, -100, 0, 0, 0, 0),
    "file_setattr": call(469, -100, 0, 0, 0, 0),
    "unassigned_599": call(599),
    "statmount": call(457, 0, 0, 0, 0),
}))
"""


def test_seccomp_answers_enosys_for_unreviewed_new_syscalls_and_allows_harmless_ones(client, sandbox):
    errno_of = json.loads(client.sh(sandbox, f"python3 -c '{SYSCALL_PROBE}'"))
    ENOSYS, EPERM = 38, 1
    assert errno_of["clock_adjtime"] == 0          # adjtimex() reads work
    assert errno_of["process_vm_readv"] == 0       # profilers such as py-spy work
    assert errno_of["mbind"] == EPERM and errno_of["set_mempolicy"] == EPERM
    for name in ("lsm_list_modules", "open_tree_attr", "file_setattr", "unassigned_599"):
        assert errno_of[name] == ENOSYS, (name, errno_of)
    assert errno_of["statmount"] not in (ENOSYS, EPERM, 0)  # reaches the kernel (bad arguments)
