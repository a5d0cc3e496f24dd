"""The shared escape probe suite, run inside a real sandbox with host-side bait."""

import socket
import uuid
from pathlib import Path

# Host paths that exist here and must not exist in the sandbox. (Not /root: the sandbox has
# a /root of its own.)
REPO_ROOT = Path(__file__).resolve().parents[2]


def test_escape_probe_suite_finds_nothing(daemon, client, sandbox_factory, escape_binary):
    # With sudo on: the sudo socket is one more thing in reach, and must give nothing.
    sandbox_id = sandbox_factory(pids=256, memory_mb=256, disk_mb=128, sudo_users=["user"])["id"]
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
        argv = ["/workspace/escape", "--max-pids", "256", "--mem-mb", "256", "--disk-mb", "128",
                "--disk-dir", "/workspace", "--host-port", str(tcp.getsockname()[1]),
                "--host-abstract", abstract_name,
                "--forbid", str(daemon.state_dir), "--forbid", str(daemon.state_dir / "api-key"),
                "--forbid", str(REPO_ROOT), "--forbid", "/run/bulkhead"]
        result = client.exec(sandbox_id, argv, timeout_s=240, timeout=300)
    finally:
        tcp.close()
        unix.close()

    report = f"exit={result['exit_code']} signal={result['signal']} timed_out={result['timed_out']}\n" \
             f"--- stdout\n{result['stdout']}\n--- stderr\n{result['stderr']}"
    lines = result["stdout"].strip().splitlines()
    assert lines, report
    assert result["exit_code"] == 0, report
    assert lines[-1].endswith(" 0 failed"), report
    assert "FAIL " not in result["stdout"], report
