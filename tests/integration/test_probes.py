"""The shared escape probe suite, run inside a real sandbox with host-side bait: in every
network mode, and on each tier the run covers (harness.RUNTIME)."""

import socket
import uuid
from pathlib import Path

import pytest

import harness

# Host paths that exist here and must not exist in the sandbox. (Not /root: the sandbox has
# a /root of its own.)
REPO_ROOT = Path(__file__).resolve().parents[2]


def run_probes(daemon, client, sandbox_id, escape_binary, network: str, tier: str) -> dict:
    client.upload(sandbox_id, "/workspace/escape", escape_binary.read_bytes())
    # Bait on the host that must stay out of reach: a loopback TCP port and an abstract socket.
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    abstract_name = f"bulkhead-probe-{uuid.uuid4().hex[:12]}"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind("\0" + abstract_name)
    unix.listen(8)
    try:
        argv = ["/workspace/escape", "--tier", tier, "--net", network,
                "--max-pids", "256", "--mem-mb", "256", "--disk-mb", "128",
                "--disk-dir", "/workspace", "--host-port", str(tcp.getsockname()[1]),
                "--host-abstract", abstract_name,
                "--forbid", str(daemon.state_dir), "--forbid", str(daemon.state_dir / "api-key"),
                "--forbid", str(REPO_ROOT), "--forbid", "/run/bulkhead"]
        return client.exec(sandbox_id, argv, timeout_s=240, timeout=300)
    finally:
        tcp.close()
        unix.close()


def report_of(result: dict) -> str:
    return (f"exit={result['exit_code']} signal={result['signal']} timed_out={result['timed_out']}\n"
            f"--- stdout\n{result['stdout']}\n--- stderr\n{result['stderr']}")


# (The microvm tier runs network mode none only: test_microvm.py.)
NETWORKS = ["none", "allowlist", "open"] if harness.RUNTIME == "gvisor" else ["none"]


@pytest.mark.parametrize("network", NETWORKS)
def test_escape_probe_suite_finds_nothing(daemon, client, sandbox_factory, escape_binary, network):
    # With sudo on: the sudo socket is one more thing in reach, and must give nothing.
    sandbox_id = sandbox_factory(pids=256, memory_mb=256, disk_mb=128, sudo_users=["user"],
                                 network={"mode": network, "allow": ["example.com"] if network == "allowlist" else []})["id"]
    result = run_probes(daemon, client, sandbox_id, escape_binary, network, harness.RUNTIME)
    report = report_of(result)
    lines = result["stdout"].strip().splitlines()
    assert lines, report
    assert result["exit_code"] == 0, report
    assert lines[-1].endswith(" 0 failed"), report
    assert "FAIL " not in result["stdout"], report


@pytest.mark.skipif(harness.RUNTIME != "gvisor", reason="the gvisor tier's own check")
def test_probes_that_see_gvisors_kernel_hold_there_too(daemon, client, sandbox_factory, escape_binary):
    """`--tier gvisor` skips the probes that would judge gVisor's kernel rather than the host's.
    Judged there anyway (`--tier native`), each holds: init loads the native tier's seccomp
    filter and drops to its capabilities inside gVisor too, so what the sandbox's code may ask of
    gVisor's kernel is what it may ask of the host's on native. The one probe that cannot hold
    is uid_map: gVisor shows its own root namespace (0 0 4294967295). What it stands for,
    that sandbox root is no host root, is checked where it is true: on the host, the Sentry
    and its gofer run as the sandbox's unprivileged uid range, under seccomp, no_new_privs."""
    sandbox = sandbox_factory(pids=256, memory_mb=256, disk_mb=128)
    result = run_probes(daemon, client, sandbox["id"], escape_binary, "none", "native")
    report = report_of(result)
    failed = [line for line in result["stdout"].splitlines() if line.startswith("FAIL ")]
    assert [line.split(":")[0] for line in failed] == ["FAIL uid_map"], report
    for name in ["no_new_privs", "seccomp_filter", "deny:mount", "deny:unshare_user", "deny:keyctl", "deny:bpf",
                 "deny:io_uring_setup", "deny:af_packet", "deny:clock_settime", "deny:mknod_char"]:
        assert f"PASS {name}\n" in result["stdout"], f"{name}\n{report}"

    pids = harness.cgroup_pids_of(sandbox["id"])
    assert pids, "no host process in the sandbox's cgroups"
    for pid in pids:
        status = harness._read(f"/proc/{pid}/status")
        if not status:
            continue  # gone meanwhile
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        inside, outside, count = (int(x) for x in harness._read(f"/proc/{pid}/uid_map").split()[:3])
        where = f"host pid {pid} ({fields['Name'].strip()})"
        # The sandbox's root is the first uid of an unprivileged range of its own, never root,
        # and no process of the wall runs outside that range.
        assert (inside, count) == (0, 65536) and outside >= 0x10000000, (where, inside, outside, count)
        assert all(outside <= int(u) < outside + count for u in fields["Uid"].split()), (where, fields["Uid"])
        assert fields["Seccomp"].strip() == "2", (where, fields["Seccomp"])
        assert fields["NoNewPrivs"].strip() == "1", (where, fields["NoNewPrivs"])
