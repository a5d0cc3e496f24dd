"""The microvm tier's own mechanics: a guest kernel per sandbox sized by its limits, QEMU and
its device daemons as the sandbox's unprivileged host uid, a NIC only for a guest that boots
with a network, and ports reached through init. The core behaviours run on it in the tier
matrix (tier_matrix_microvm.txt), the network's in test_network.py there too."""
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness import assert_error_shape, host_name, qemu_pid, wait_until


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
    assert os.readlink(f"/proc/{qemu_pid(sandbox['id'])}/ns/net") != os.readlink("/proc/self/ns/net")


def qemu_argv(sandbox_id: str) -> list[str]:
    return next(argv for _, argv in vm_processes(sandbox_id) if argv[0].endswith("qemu-system-x86_64"))


def test_mode_none_has_no_nic_and_another_mode_needs_a_restart(client, sandbox_factory, microvm):
    sandbox = sandbox_factory(runtime="microvm")
    assert "-netdev" not in qemu_argv(sandbox["id"])
    assert client.sh(sandbox["id"], "ls /sys/class/net").split() == ["lo"]
    r = client.request("PUT", f"/v1/sandboxes/{sandbox['id']}/network", {"mode": "open"})
    assert_error_shape(r, 422)
    assert r.json()["error"]["code"] == "runtime_unsupported" and "stop it" in r.json()["error"]["message"]
    assert client.sandbox(sandbox["id"])["network"]["mode"] == "none"
    assert client.post(f"/v1/sandboxes/{sandbox['id']}/stop").status == 200
    r = client.request("PUT", f"/v1/sandboxes/{sandbox['id']}/network", {"mode": "allowlist", "allow": ["a.test"]})
    assert r.status == 200, r
    assert client.post(f"/v1/sandboxes/{sandbox['id']}/start").status == 200
    assert client.sh(sandbox["id"], "ls /sys/class/net").split() == ["eth0", "lo"]
    assert client.sh(sandbox["id"], "echo $HTTP_PROXY").strip() == "http://10.0.2.2:1000"


def test_a_guest_with_a_network_gets_a_tap_in_its_own_namespace_and_loses_it_in_mode_none(
        client, sandbox_factory, microvm):
    sandbox = sandbox_factory(runtime="microvm", network={"mode": "allowlist", "allow": ["a.test"]})
    qemu = qemu_argv(sandbox["id"])
    assert qemu[qemu.index("-netdev") + 1] == "tap,id=net0,vhost=off,fd=3"
    assert client.sh(sandbox["id"], "ip -4 -o addr show eth0 | awk '{print $4}'; ip route show default; "
                                    "cat /etc/resolv.conf").strip().split("\n") == [
        "10.0.2.15/24", "default via 10.0.2.2 dev eth0 ", "nameserver 10.0.2.2"]
    # IPv6 too: a unique local address, usable at once (no DAD), and a default route.
    v6 = client.sh(sandbox["id"], "ip -6 -o addr show eth0 scope global; ip -6 route show default").strip()
    assert "inet6 fd00:0:0:2::15/64 scope global" in v6 and "tentative" not in v6, v6
    assert "default via fd00:0:0:2::2 dev eth0" in v6, v6
    # The proxy answers at the gateway, over either (a name the allowlist lacks: 403 from the
    # proxy itself).
    for proxy in ("", "-x http://[fd00:0:0:2::2]:1000"):
        out = client.sh(sandbox["id"], f"curl -sS -m 20 {proxy} -o /dev/null -w '%{{http_code}}' http://example.com/")
        assert out == "403", (proxy, out)
    r = client.request("PUT", f"/v1/sandboxes/{sandbox['id']}/network", {"mode": "none"})
    assert r.status == 200, r
    result = client.exec(sandbox["id"], ["curl", "-sS", "--connect-timeout", "3", "-x", "http://10.0.2.2:1000",
                                          "http://example.com/"])
    assert result["exit_code"] != 0, result
    entries = client.get(f"/v1/sandboxes/{sandbox['id']}/egress").json()["entries"]
    # The two tries above (IPv4, IPv6); none after mode none.
    assert [e["verdict"] for e in entries if e["name"] == "example.com" and e["protocol"] == "tcp"] == ["denied"] * 2


def test_ports_reach_the_guests_loopback_in_every_network_mode(client, sandbox_factory, microvm):
    sandbox = sandbox_factory(runtime="microvm")  # mode none: no NIC at all
    client.sh(sandbox["id"], "mkdir -p /tmp/site && echo hello-from-the-guest > /tmp/site/index.html && "
                             "(cd /tmp/site && setsid python3 -m http.server 8000 --bind 127.0.0.1 "
                             ">/dev/null 2>&1 &)")
    for _ in range(60):  # python3 starts in a few seconds under TCG
        r = client.get(f"/v1/sandboxes/{sandbox['id']}/ports/8000/index.html")
        if r.status != 502:
            break
        time.sleep(0.5)
    assert r.status == 200 and r.body == b"hello-from-the-guest\n", r
    r = client.get(f"/v1/sandboxes/{sandbox['id']}/ports/8001/")
    assert_error_shape(r, 502)
    # The relay workers (forks of init: its command line) end with their connections.
    workers = client.sh(sandbox["id"], "sleep 1; test -s /proc/1/cmdline && for p in /proc/[0-9]*; do "
                                       "[ \"${p#/proc/}\" = 1 ] || ! cmp -s $p/cmdline /proc/1/cmdline || echo $p; "
                                       "done; echo end")
    assert workers.split() == ["end"], workers


def wait_for_template(client, shape: str) -> None:
    for _ in range(600):  # a template boots and saves in ~4 s under TCG; longer on a busy host
        templates = client.get("/healthz").json()["runtimes"]["microvm"]["templates"]
        assert f"{shape}: failed" not in templates, templates
        if f"{shape}: ready" in templates:
            return
        time.sleep(0.2)
    pytest.fail(f"the {shape} template was not built: {templates}")


def test_later_sandboxes_of_a_shape_start_as_copies_of_its_saved_template(client, sandbox_factory, microvm):
    sandbox_factory(runtime="microvm", memory_mb=512)  # the shape's first launch builds its template
    wait_for_template(client, "512m-1cpu")
    time.sleep(5)  # the saved clock falls behind: a copy that kept it would show it
    seen = []
    for network in ({"mode": "none"}, {"mode": "allowlist", "allow": ["a.test"]}):
        copy = sandbox_factory(runtime="microvm", memory_mb=512, network=network)
        assert client.sandbox(copy["id"])["runtime_details"]["boot"] == "restored from a template"
        out = client.sh(copy["id"], "date +%s.%N; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; "
                                    "grep MemTotal /proc/meminfo; ls /sys/class/net | tr '\\n' ' '; echo; "
                                    "cat /proc/cmdline").split("\n")
        # The copy's clock is the host's, not the template's.
        assert abs(float(out[0]) - time.time()) < 2.5, out
        seen.append(out[1])
        assert 400 * 1024 < int(out[2].split()[1]) <= 512 * 1024
        assert out[3].split() == (["eth0", "lo"] if network["mode"] != "none" else ["lo"]), out
        assert "--guest-template" in out[4]
        # Its memory is a copy of the template's data, not the whole guest written out.
        rss_kb = int(Path(f"/proc/{qemu_pid(copy['id'])}/status").read_text().split("VmRSS:")[1].split()[0])
        assert rss_kb < 512 * 1024, rss_kb
    # Each copy reseeded its random generator from the host: no two draw the same bytes.
    assert len(set(seen)) == 2, seen
    # The copies are whole sandboxes: the proxy answers at the gateway in the one with a NIC,
    # over IPv4 and IPv6.
    for proxy in ("", "-x http://[fd00:0:0:2::2]:1000"):
        out = client.sh(copy["id"], f"curl -sS -m 20 {proxy} -o /dev/null -w '%{{http_code}}' http://example.com/")
        assert out == "403", (proxy, out)


def template_guests(state_dir) -> list[int]:
    """The pids of the template guests' QEMUs of the daemon with this state directory."""
    wanted = f"{state_dir}/microvm/template-".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and wanted in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_template_guest_does_not_outlive_a_daemon_killed_while_it_is_built(daemon_factory, microvm):
    daemon = daemon_factory()
    daemon.start()
    def create():
        try:
            daemon.client().post("/v1/sandboxes", {"runtime": "microvm"})
        except OSError:
            pass  # the daemon is killed under it

    creating = threading.Thread(target=create, daemon=True)
    creating.start()  # its launch starts the template's build beside its own boot
    deadline = time.monotonic() + 60
    while not template_guests(daemon.state_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert template_guests(daemon.state_dir), "no template guest was started"
    daemon.stop(signal.SIGKILL)
    # QEMU dies with the daemon (its parent-death signal).
    deadline = time.monotonic() + 30
    while template_guests(daemon.state_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not template_guests(daemon.state_dir), "the template guest outlived its daemon"


def test_the_warm_pool_hands_out_guests_of_its_shape_to_creates_without_a_network(daemon_factory, microvm):
    """The pool keeps guests of the default shape (1 GiB, 1 vCPU) with no NIC, warmed up: a
    create of that shape in mode none takes one and gets its own limits; another shape or a
    network boots (or restores) a guest of its own."""
    daemon = daemon_factory()
    daemon.extra_args = ("--warm-pool", "microvm=1")
    daemon.start()
    client = daemon.client()
    metric = client.metric
    assert wait_until(lambda: metric("bulkhead_warm_pool_ready") == 1, timeout=120)
    wait_for_template(client, "1024m-1cpu")  # (built beside the first pooled guest's boot)
    hits = metric("bulkhead_warm_pool_hits_total")
    pooled = client.create(runtime="microvm", pids=40, metadata={"from": "pool"})
    assert metric("bulkhead_warm_pool_hits_total") == hits + 1
    assert pooled["pids"] == 40 and pooled["metadata"] == {"from": "pool"}, pooled
    assert client.sandbox(pooled["id"])["runtime_details"]["guest_memory_mb"] == "1024"
    inside = client.sh(pooled["id"], "nproc; ls /sys/class/net | tr '\\n' ' '; echo; "
                                     "sh -c 'for i in $(seq 50); do sleep 10 >/dev/null & echo; done' 2>/dev/null | wc -l; "
                                     "pkill sleep; true").split("\n")
    assert inside[0] == "1" and inside[1].split() == ["lo"], inside
    # The create's pids limit reached the guest's init (the pool booted it with the default).
    assert 10 < int(inside[2]) < 40, inside
    # Refilled, from the template.
    assert wait_until(lambda: metric("bulkhead_warm_pool_ready") == 1, timeout=120)
    # Another shape, or a network, is no create the pool can serve.
    for settings in ({"memory_mb": 512}, {"network": {"mode": "allowlist", "allow": ["a.test"]}}):
        other = client.create(runtime="microvm", **settings)
        assert metric("bulkhead_warm_pool_hits_total") == hits + 1, settings
        assert metric("bulkhead_warm_pool_ready") == 1
        if "network" in settings:
            assert client.sh(other["id"], "ls /sys/class/net").split() == ["eth0", "lo"]
        client.remove(other["id"])
    taken = client.create(runtime="microvm")
    assert metric("bulkhead_warm_pool_hits_total") == hits + 2
    assert client.sandbox(taken["id"])["runtime_details"]["boot"] == "restored from a template"
    assert client.sh(taken["id"], "echo from-the-pool") == "from-the-pool\n"
    for sandbox in (pooled, taken):
        client.remove(sandbox["id"])


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


def qmp_commands(socket_path: str, *commands: dict) -> None:
    """Runs QMP commands on a guest's monitor (as a daemon would), skipping events."""
    import json
    import socket
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(socket_path)
        stream = s.makefile("rwb")
        stream.readline()  # the greeting
        for command in ({"execute": "qmp_capabilities"}, *commands):
            stream.write(json.dumps(command).encode() + b"\n")
            stream.flush()
            while "event" in json.loads(stream.readline()):
                pass


@pytest.mark.parametrize("stopped", [False, True], ids=["running", "stopped"])
def test_a_guest_a_killed_daemon_left_letting_its_vsock_device_go_is_reached_after_a_restart(
        daemon_factory, microvm, stopped):
    """What a daemon killed early in a save (or a replug) of a guest leaves: the unplug of its
    vsock device asked, and maybe the guest stopped before it let the device go. The next
    daemon finds its mark beside the monitor socket (memory_image.cc UnplugMarker), waits for
    the device to go and plugs a new one: init is reached again, not lost a moment later."""
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    sandbox = client.create(runtime="microvm")["id"]
    assert client.sh(sandbox, "echo up") == "up\n"
    daemon.stop(signal.SIGKILL)
    [vm_dir] = list(Path("/run").glob(f"bulkhead-vms-*/{host_name(sandbox)}"))
    (vm_dir / "unplugging").touch()
    commands = [{"execute": "device_del", "arguments": {"id": "vsock"}}]
    if stopped:
        commands.append({"execute": "stop"})
    qmp_commands(str(vm_dir / "qmp.sock"), *commands)
    daemon.start()
    client = daemon.client(timeout=60)
    for _ in range(3):
        assert client.sh(sandbox, "echo alive") == "alive\n"
    assert not (vm_dir / "unplugging").exists()
    client.remove(sandbox)
