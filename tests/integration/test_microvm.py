"""The microvm tier's own mechanics: a guest kernel per sandbox sized by its limits, QEMU and
its device daemons as the sandbox's unprivileged host uid, and the network it does not offer
yet refused clearly. The core behaviours run on it in the tier matrix (tier_matrix_microvm.txt)."""
import os
import subprocess
from pathlib import Path

import pytest

from harness import assert_error_shape, host_name


@pytest.fixture(scope="module")
def microvm(daemon):
    details = daemon.client().get("/healthz").json()["runtimes"]["microvm"]
    if not details.get("available"):
        pytest.skip(f"no microvm tier here: {details.get('reason')}")
    return details


def vm_processes(sandbox_id: str) -> list[tuple[int, list[str]]]:
    """(uid, argv) of each process in the sandbox's microvm cgroup: QEMU and its daemons."""
    name = host_name(sandbox_id)
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not any(line.endswith(f"-microvm/{name}") for line in (proc / "cgroup").read_text().splitlines()):
                continue
            uid = int((proc / "status").read_text().split("\nUid:")[1].split()[0])
            argv = (proc / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except (OSError, IndexError):
            continue
        found.append((uid, [a.decode(errors="replace") for a in argv]))
    return found


def test_healthz_names_the_vmm_the_guest_kernel_and_the_accelerator(microvm):
    assert microvm["qemu_version"].startswith("QEMU emulator version")
    assert microvm["guest_kernel"].startswith("linux-image-")
    assert microvm["accelerator"].split(":")[0] in ("kvm", "tcg", "probing")
    assert "vhost-device-vsock" in microvm["vsock_device"]


def test_a_sandbox_runs_its_own_kernel_sized_by_its_limits(client, sandbox_factory, microvm):
    sandbox = sandbox_factory(runtime="microvm", memory_mb=384, cpus=1)
    inside = client.sh(sandbox["id"], "uname -r; grep MemTotal /proc/meminfo; nproc; cat /proc/1/comm").split("\n")
    assert inside[0].endswith("-cloud-amd64")  # the guest's kernel (install-microvm.sh), whatever the host runs
    mem_total_kb = int(inside[1].split()[1])
    assert 300 * 1024 < mem_total_kb <= 384 * 1024  # the guest's RAM less what its kernel keeps
    assert inside[2] == "1"
    assert inside[3] == "init"
    details = client.sandbox(sandbox["id"])["runtime_details"]
    assert details["guest_memory_mb"] == "384" and details["vcpus"] == "1"
    assert details["accelerator"] in ("kvm", "tcg")
    # The guest's kernel is not the host's: a process of the sandbox is no process of the host.
    marker = "bulkhead-microvm-marker-" + sandbox["id"]
    client.sh(sandbox["id"], f"(exec -a {marker} sleep 300) & sleep 0.2")
    host_ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert marker not in host_ps


def test_the_vm_runs_as_the_sandbox_host_uid_without_a_nic(client, sandbox_factory, microvm):
    sandbox = sandbox_factory(runtime="microvm")
    processes = vm_processes(sandbox["id"])
    names = sorted(Path(argv[0]).name for _, argv in processes)
    assert names == ["qemu-system-x86_64", "vhost-device-vsock", "virtiofsd"], processes
    for uid, argv in processes:
        assert uid >= 0x10000000, f"{argv[0]} runs as host uid {uid}"
    qemu = next(argv for _, argv in processes if argv[0].endswith("qemu-system-x86_64"))
    assert qemu[qemu.index("-nic") + 1] == "none"
    assert qemu[qemu.index("-sandbox") + 1].startswith("on,")
    # Its network namespace is not the host's.
    qemu_pid = next(p for p in os.listdir("/proc") if p.isdigit() and
                    Path(f"/proc/{p}/cmdline").exists() and
                    Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"/usr/bin/qemu-system-x86_64") and
                    host_name(sandbox["id"]).encode() in Path(f"/proc/{p}/cmdline").read_bytes())
    assert os.readlink(f"/proc/{qemu_pid}/ns/net") != os.readlink("/proc/self/ns/net")


def test_network_modes_it_cannot_run_are_refused_and_the_guest_has_only_loopback(client, sandbox_factory, microvm):
    for mode in ("allowlist", "open"):
        network = {"mode": mode, "allow": ["example.com"] if mode == "allowlist" else []}
        r = client.post("/v1/sandboxes", {"runtime": "microvm", "network": network})
        assert_error_shape(r, 422)
        assert r.json()["error"]["code"] == "runtime_unsupported"
    sandbox = sandbox_factory(runtime="microvm")
    r = client.request("PUT", f"/v1/sandboxes/{sandbox['id']}/network", {"mode": "open"})
    assert_error_shape(r, 422)
    assert client.sandbox(sandbox["id"])["network"]["mode"] == "none"
    assert client.sh(sandbox["id"], "ls /sys/class/net").split() == ["lo"]
    r = client.get(f"/v1/sandboxes/{sandbox['id']}/ports/8000/")
    assert_error_shape(r, 422)


def test_volumes_are_shared_with_a_native_sandbox(client, sandbox_factory, microvm):
    name = "microvm-shared"
    r = client.post("/v1/volumes", {"name": name})
    assert r.status in (200, 201), r
    try:
        vm = sandbox_factory(runtime="microvm", volumes=[{"name": name, "path": "/data"}])
        client.sh(vm["id"], "echo from-the-guest > /data/note; chown 1000:1000 /data/note")
        native = sandbox_factory(runtime="native", volumes=[{"name": name, "path": "/data", "read_only": True}])
        assert client.sh(native["id"], "cat /data/note; stat -c %u /data/note").split() == ["from-the-guest", "1000"]
    finally:
        for sandbox_id in [s["id"] for s in client.list()]:
            if any(v["name"] == name for v in client.sandbox(sandbox_id)["volumes"]):
                client.remove(sandbox_id)
        client.delete(f"/v1/volumes/{name}")
