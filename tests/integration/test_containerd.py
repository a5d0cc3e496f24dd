"""bulkhead as a containerd runtime handler (issue 25): a private containerd (containerd_harness.py)
driven through CRI with crictl the way the kubelet drives a node's, each test run once per
runtime handler: the stock handler that works on this host (runc through the same runc shim, a
baseline for the harness itself) and `bulkhead` (bulkhead-oci under the runc shim, skipped
until build/bulkhead-oci exists)."""

import json
import re
import socket
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

import containerd_harness as ch
from harness import wait_until

_missing = ch.missing_tools()
pytestmark = pytest.mark.skipif(_missing is not None, reason=f"containerd tests: {_missing}")

# The handlers each behaviour test runs with: "stock" is resolved to the stock handler that works
# here (ch.stock_handler). bulkhead-gvisor joins when bulkhead-oci runs the gvisor tier.
HANDLERS = ["stock", "bulkhead"]


@pytest.fixture(scope="module")
def containerd(session_dir, request):
    c = ch.Containerd(session_dir / "containerd")
    request.addfinalizer(c.destroy)
    c.start()
    return c


@pytest.fixture(scope="module")
def stock(containerd) -> str:
    handler, failures = ch.stock_handler(containerd)
    if handler is None:
        pytest.skip("no stock runtime works under containerd's runc shim here: "
                    + "; ".join(f"{h}: {e.splitlines()[-1][:300]}" for h, e in failures.items()))
    return handler


@pytest.fixture(params=HANDLERS)
def handler(request, containerd) -> str:
    if request.param == "stock":
        return request.getfixturevalue("stock")
    if request.param in ch.BULKHEAD_HANDLERS and not containerd.bulkhead_oci.exists():
        pytest.skip(f"{containerd.bulkhead_oci} does not exist yet (the bulkhead-oci runtime binary)")
    return request.param


@pytest.fixture
def pods(containerd, request):
    """Runs pods for the test (containerd.run_pod's arguments); removes those left after it."""
    made = []

    def run(handler: str, **kw) -> ch.Pod:
        pod = containerd.run_pod(handler, **kw)
        made.append(pod)
        return pod

    def cleanup():
        for pod in made:
            containerd.crictl("stopp", pod.id, check=False)
            containerd.crictl("rmp", "-f", pod.id, check=False)

    request.addfinalizer(cleanup)
    return run


def _calls_for(containerd: ch.Containerd, container_id: str) -> list[ch.RuntimeCall]:
    return [c for c in containerd.runtime_calls() if container_id in c.argv]


# ---------------------------------------------------------------- behaviour, per handler

def test_pod_lifecycle(containerd, pods, handler):
    """What the kubelet does for a pod with one container: run the sandbox, create and start a
    busybox container, read its logs, exec into it (streamed and ExecSync), stop, remove."""
    pod = pods(handler, name="lifecycle")
    assert containerd.inspect_pod(pod.id)["status"]["state"] == "SANDBOX_READY"
    cid = containerd.run_container(
        pod, ["/bin/sh", "-c", "echo hello from $(hostname); echo to stderr >&2; exec sleep 3600"])
    assert wait_until(lambda: "hello from lifecycle" in containerd.logs(cid), 20), containerd.logs_both(cid)
    assert containerd.logs_both(cid)[1].strip() == "to stderr"
    assert containerd.container_state(cid) == "CONTAINER_RUNNING"

    r = containerd.exec(cid, ["/bin/sh", "-c", "cat /etc/hostname; echo oops >&2; exit 7"])
    assert (r.returncode, r.stdout, r.stderr) == (7, "lifecycle\n", "oops\n")
    r = containerd.exec(cid, ["/bin/cat"], input="through stdin\n")
    assert (r.returncode, r.stdout) == (0, "through stdin\n")
    r = containerd.exec_sync(cid, ["/bin/sh", "-c", "echo synced"])
    assert r.returncode == 0 and r.stdout.startswith("synced\n"), r
    assert containerd.exec_sync(cid, ["/bin/sh", "-c", "exit 4"]).returncode == 4
    # PID 1 of the container is its command (the pod's pause is in a pid namespace of its own)
    assert containerd.exec(cid, ["/bin/cat", "/proc/1/cmdline"]).stdout.split("\0")[0] == "sleep"

    containerd.stop_container(cid, grace=2)
    status = containerd.inspect(cid)["status"]
    assert status["state"] == "CONTAINER_EXITED"
    assert status["exitCode"] in (137, 143), status  # SIGTERM, or SIGKILL after the grace period
    containerd.remove_container(cid)
    containerd.stop_pod(pod)
    containerd.remove_pod(pod)
    assert pod.id not in [p["id"] for p in containerd.pods()]
    # every runtime call for the container went through the handler's runtime
    commands = [c.command for c in _calls_for(containerd, cid)]
    assert {"create", "start", "exec", "kill", "delete"} <= set(commands), commands
    assert {c.handler for c in _calls_for(containerd, cid)} == {handler}


def test_container_exit_code(containerd, pods, handler):
    """A container's own exit reaches CRI with its code: the runc shim learns it by reaping the
    process whose pid the runtime wrote to --pid-file (runsc fails this: it writes its
    sandbox's pid for every container)."""
    pod = pods(handler)
    cid = containerd.run_container(pod, ["/bin/sh", "-c", "echo bye; exit 3"])
    status = containerd.wait_exited(cid, timeout=20)
    assert status["exitCode"] == 3, status
    assert containerd.logs(cid) == "bye\n"
    # a second container in the same pod, after the first has gone
    cid2 = containerd.run_container(pod, ["/bin/true"])
    assert containerd.wait_exited(cid2, timeout=20)["exitCode"] == 0


def test_pod_network(containerd, pods, handler):
    """A pod gets a netns of its own on the harness's bridge, reachable from the host and from
    another pod, with no route anywhere else."""
    server = pods(handler, name="server")
    cid = containerd.run_container(server, ["/bin/sh", "-c",
                                            "mkdir /www && echo served > /www/index.html && exec httpd -f -p 8080 -h /www"])
    ip = containerd.inspect_pod(server.id)["status"]["network"]["ip"]
    assert ip.startswith(containerd.subnet.rsplit(".", 2)[0] + "."), (ip, containerd.subnet)
    routes = containerd.exec(cid, ["ip", "-4", "route"]).stdout
    assert "default" not in routes, routes

    def fetch():
        try:
            with socket.create_connection((ip, 8080), timeout=2) as s:
                s.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
                return b"".join(iter(lambda: s.recv(4096), b""))
        except OSError:
            return b""
    assert b"served" in wait_until(fetch, 20), "the host did not reach the pod's server"

    client = pods(handler, name="client")
    ccid = containerd.run_container(client, ["/bin/sleep", "3600"])
    r = wait_until(lambda: (x := containerd.exec(ccid, ["wget", "-q", "-O", "-", f"http://{ip}:8080/"]))
                   .returncode == 0 and x, 20)
    assert r and r.stdout == "served\n", r


# ---------------------------------------------------------------- bulkhead's walls around a pod

FIRST_HOST_ID = 0x10000000  # common/id_ranges.h kFirstHostId
ID_COUNT = 65536


@pytest.fixture
def bulkhead(containerd) -> str:
    if not containerd.bulkhead_oci.exists():
        pytest.skip(f"{containerd.bulkhead_oci} does not exist yet (the bulkhead-oci runtime binary)")
    return "bulkhead"


def _host_ids(containerd: ch.Containerd, cid: str) -> tuple[int, int]:
    """The host uid and gid the container's first process runs as."""
    status = Path(f"/proc/{containerd.inspect(cid)['info']['pid']}/status").read_text()
    uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
    gid = int(re.search(r"^Gid:\s+(\d+)", status, re.M).group(1))
    return uid, gid


def test_a_pod_runs_as_a_host_uid_range_of_its_own_shared_by_its_containers(containerd, pods, bulkhead):
    """Each pod's containers are root inside and an unprivileged host range outside (one range
    per pod, so a volume shows the same ids in each of its containers; another pod's differs);
    no_new_privs, bulkhead's seccomp filter and its capability ceiling hold whatever the spec
    asks."""
    pod_a, pod_b = pods(bulkhead, name="range-a"), pods(bulkhead, name="range-b")
    a1 = containerd.run_container(pod_a, ["/bin/sleep", "3600"])
    a2 = containerd.run_container(pod_a, ["/bin/sleep", "3600"])
    b1 = containerd.run_container(pod_b, ["/bin/sleep", "3600"])
    uid_a, gid_a = _host_ids(containerd, a1)
    assert uid_a == gid_a and uid_a >= FIRST_HOST_ID and (uid_a - FIRST_HOST_ID) % ID_COUNT == 0, uid_a
    assert _host_ids(containerd, a2) == (uid_a, gid_a)
    uid_b = _host_ids(containerd, b1)[0]
    assert uid_b >= FIRST_HOST_ID and abs(uid_b - uid_a) >= ID_COUNT, (uid_a, uid_b)

    r = containerd.exec(a1, ["/bin/sh", "-c", "id -u; cat /proc/self/uid_map; grep -E '^(NoNewPrivs|Seccomp|CapBnd):' /proc/self/status"])
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert lines[0] == "0"
    assert lines[1].split() == ["0", str(uid_a), str(ID_COUNT)]
    fields = dict(line.split(":\t") for line in lines[2:])
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2", fields
    bounding = int(fields["CapBnd"], 16)
    for cap in (21, 13, 27, 19, 16):  # SYS_ADMIN, NET_RAW, MKNOD, SYS_PTRACE, SYS_MODULE
        assert not bounding & (1 << cap), f"capability {cap} in the bounding set {fields['CapBnd']}"
    # seccomp's denials hold: mount and unshare of a user namespace
    r = containerd.exec(a1, ["/bin/sh", "-c", "mount -t tmpfs none /mnt; unshare -U true; echo $?"])
    assert r.returncode == 0 and r.stdout.strip() != "0", r


def test_an_update_changes_the_limits_it_names_and_leaves_the_others(containerd, pods, bulkhead):
    """kubectl's in-place resize is the CRI's UpdateContainerResources (`bulkhead-oci update`):
    the memory limit it names is set, inside the container's own cgroup; the default pids cap
    stays. (tests/unit/oci_spec_test.cc checks that an update leaves a spec's own pids limit.)"""
    pod = pods(bulkhead, name="update")
    cid = containerd.run_container(pod, ["/bin/sleep", "3600"])
    read = ["cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/pids/pids.max"]
    assert containerd.exec(cid, read).stdout.split()[1] == "4096"
    containerd.crictl("update", "--memory", str(300 << 20), cid)
    assert containerd.exec(cid, read).stdout.split() == [str(300 << 20), "4096"]
    assert "update" in {c.command for c in _calls_for(containerd, cid)}


def test_a_containers_files_are_stored_with_its_own_ids_in_containerds_snapshot(containerd, pods, bulkhead):
    """The snapshot's layers are idmapped into the container: root inside writes files stored
    as uid 0 in containerd's snapshot (not as its host range), and an image's files owned by
    root show as root inside."""
    pod = pods(bulkhead, name="files")
    cid = containerd.run_container(pod, ["/bin/sleep", "3600"])
    r = containerd.exec(cid, ["/bin/sh", "-c",
                              "echo x > /made-by-root && mkdir /made-for-1234 && chown 1234:4321 /made-for-1234 "
                              "&& stat -c '%u:%g' /bin/busybox /made-by-root /made-for-1234"])
    assert (r.returncode, r.stdout.split()) == (0, ["0:0", "0:0", "1234:4321"]), r
    snapshots = [p for p in containerd.root.rglob("made-by-root") if "snapshots" in p.parts]
    assert len(snapshots) == 1, snapshots
    stored = snapshots[0].stat()
    assert (stored.st_uid, stored.st_gid) == (0, 0)
    stored = (snapshots[0].parent / "made-for-1234").stat()
    assert (stored.st_uid, stored.st_gid) == (1234, 4321)


def test_a_pod_in_the_hosts_network_namespace_is_refused_with_the_reason(containerd, bulkhead):
    """hostNetwork pods would put the container in the node's network: bulkhead refuses them."""
    config = containerd.pod_config("hostnet")
    config["linux"]["security_context"]["namespace_options"]["network"] = 2
    with pytest.raises(ch.CrictlError) as refused:
        containerd.run_pod(bulkhead, config=config)
    assert "host's network namespace" in str(refused.value), refused.value


def test_an_images_symlinks_at_mount_points_cannot_aim_the_runtimes_mounts_at_the_host(containerd, pods, bulkhead,
                                                                                         tmp_path):
    """A hostile image: /dev, /etc/hosts and /etc/resolv.conf are symlinks that climb out of the
    root to a host directory (and /run one through /proc/1/root). Every mount the runtime makes
    there lands inside the container's root (where the link points, taken from the root); nothing
    appears on the host."""
    import oci_images as oi
    target = tmp_path / "host-target"
    target.mkdir()
    climb = "../" * 12 + str(target).lstrip("/")
    hostile = oi.make_layer([oi.Symlink("dev", climb + "/dev"), oi.Symlink("etc/hosts", climb + "/hosts"),
                             oi.Symlink("etc/resolv.conf", "/" + climb + "/resolv.conf"),
                             oi.Symlink("run", "/proc/1/root" + str(target))])
    busybox = ch.test_images()[ch.BUSYBOX_IMAGE]
    image = oi.build_image([busybox.layers[0], hostile], {"Cmd": ["/bin/sh"], "Env": [ch.PATH_ENV]})
    containerd.import_image("bulkhead.test/hostile:1", image)
    pod = pods(bulkhead, name="hostile")
    cid = containerd.run_container(pod, ["/bin/sh", "-c", "cat /dev/null /etc/hosts /etc/resolv.conf && echo inside"],
                                   image="bulkhead.test/hostile:1")
    assert containerd.wait_exited(cid)["exitCode"] == 0, containerd.logs_both(cid)
    out = containerd.logs(cid)
    assert "localhost" in out and "inside" in out, out  # the pod's hosts file, bound inside the root
    assert list(target.iterdir()) == [], list(target.iterdir())
    assert not [m for m in ch.mounts_under(tmp_path)], ch.mounts_under(tmp_path)


def test_privileged_pods_and_capabilities_beyond_dockers_default_are_refused_with_the_reason(containerd, pods,
                                                                                               bulkhead):
    """A privileged pod would get every host device and capability: refused, as is a container
    asking for a capability beyond Docker's default set (NET_RAW and MKNOD, in that set, are
    dropped without a word, as in every sandbox)."""
    config = containerd.pod_config("privileged")
    config["linux"]["security_context"]["privileged"] = True
    privileged = pods(bulkhead, config=config)  # the pause container gets nothing more
    with pytest.raises(ch.CrictlError) as refused:
        containerd.run_container(privileged, ["/bin/true"], extra={"linux": {"security_context": {"privileged": True}}})
    assert "privileged pods are not run" in str(refused.value), refused.value
    pod = pods(bulkhead, name="ceiling")
    with pytest.raises(ch.CrictlError) as refused:
        containerd.run_container(pod, ["/bin/true"], extra={
            "linux": {"security_context": {"capabilities": {"add_capabilities": ["SYS_ADMIN"]}}}})
    assert "CAP_SYS_ADMIN is beyond what bulkhead gives a container" in str(refused.value), refused.value
    cid = containerd.run_container(pod, ["/bin/sh", "-c", "grep CapEff /proc/self/status"], extra={
        "linux": {"security_context": {"capabilities": {"add_capabilities": ["NET_RAW"]}}}})
    assert containerd.wait_exited(cid)["exitCode"] == 0
    assert int(containerd.logs(cid).split()[-1], 16) & (1 << 13) == 0  # no CAP_NET_RAW


def _egress_log(containerd: ch.Containerd, pod: ch.Pod) -> list[dict]:
    logs = list(containerd.egress_log_dir.glob(f"*{pod.id}.jsonl"))
    assert len(logs) == 1, list(containerd.egress_log_dir.iterdir())
    return [json.loads(line) for line in logs[0].read_text().splitlines()]


def test_a_pods_egress_follows_its_annotations_and_every_decision_is_logged(containerd, pods, bulkhead):
    """egress.bulkhead.dev annotations put bulkhead's egress proxy between a pod and its CNI
    network: in allowlist mode the pod reaches what its allow entries name and nothing else, its
    DNS lookups of names not allowed are refused, and each decision is in the
    pod's egress log; what others start toward the pod is still answered."""
    server = pods(bulkhead, name="egress-server")
    containerd.run_container(server, ["/bin/sh", "-c", "mkdir /www && echo served > /www/index.html && "
                                                       "(httpd -f -p 8080 -h /www &) && exec httpd -f -p 8081 -h /www"])
    server_ip = containerd.inspect_pod(server.id)["status"]["network"]["ip"]
    client = pods(bulkhead, name="egress-client", annotations={
        "egress.bulkhead.dev/mode": "allowlist", "egress.bulkhead.dev/allow": f"{server_ip}:8080, allowed.test"})
    cid = containerd.run_container(client, ["/bin/sh", "-c", "mkdir /www && echo inbound > /www/index.html && "
                                                            "exec httpd -f -p 9090 -h /www"])

    def fetch(port):
        return containerd.exec(cid, ["timeout", "10", "wget", "-q", "-O", "-", f"http://{server_ip}:{port}/"])
    r = wait_until(lambda: (x := fetch(8080)).returncode == 0 and x, 20)
    assert r and r.stdout == "served\n", fetch(8080)
    assert fetch(8081).returncode != 0
    lookup = containerd.exec(cid, ["nslookup", "denied.test"])
    assert lookup.returncode != 0, lookup
    # and the host still reaches a server in the pod (the kubelet's probes do so)
    client_ip = containerd.inspect_pod(client.id)["status"]["network"]["ip"]
    with socket.create_connection((client_ip, 9090), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert b"inbound" in b"".join(iter(lambda: s.recv(4096), b""))

    records = wait_until(lambda: (x := _egress_log(containerd, client)) and
                         any(r.get("finished") for r in x) and x, 10) or _egress_log(containerd, client)
    decided = [(r["protocol"], r["address"], r["port"], r["verdict"]) for r in records if "verdict" in r]
    assert ("tcp", server_ip, 8080, "allowed") in decided, records
    assert ("tcp", server_ip, 8081, "denied") in decided, records
    assert any(r["protocol"] == "dns" and r["name"] == "denied.test" and r["verdict"] == "denied" for r in records
               if "verdict" in r), records
    assert any(r.get("finished") and r["bytes_in"] > 0 for r in records), records
    assert all(r["pod"] == client.id for r in records)
    # the helper goes with the pod
    helpers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, f"--pod\0{client.id}")]
    assert len(helpers) == 1, helpers
    containerd.stop_pod(client)
    containerd.remove_pod(client)
    assert wait_until(lambda: not helpers[0].exists() or _state(int(helpers[0].name)) == "Z", 10)


def test_bad_egress_annotations_fail_the_pod_with_the_reason(containerd, bulkhead):
    for annotations, message in [({"egress.bulkhead.dev/mode": "sometimes"}, "mode"),
                                 ({"egress.bulkhead.dev/mode": "allowlist", "egress.bulkhead.dev/allow": "*."}, "allow[0]"),
                                 ({"egress.bulkhead.dev/allow": "example.com"}, "need egress.bulkhead.dev/mode")]:
        with pytest.raises(ch.CrictlError) as refused:
            containerd.run_pod(bulkhead, annotations=annotations)
        assert message in str(refused.value), (annotations, refused.value)


def test_the_escape_probes_pass_in_a_pods_container(containerd, pods, bulkhead, escape_binary):
    """The probe suite as a pod's container (its first process) and through exec, with a
    memory limit from CRI and bulkhead's default pids limit; the host's loopback listener and
    abstract socket, containerd's state and the runtime's must stay out of reach."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    abstract = socket.socket(socket.AF_UNIX)
    abstract_name = f"bulkhead-probe-{listener.getsockname()[1]}"
    abstract.bind("\0" + abstract_name)
    abstract.listen()
    try:
        argv = ["/probe/escape", "--net", "open", "--max-pids", "4096", "--mem-mb", "1024",
                "--host-port", str(listener.getsockname()[1]), "--host-abstract", abstract_name,
                "--forbid", str(containerd.root), "--forbid", "/run/containerd", "--forbid", "/var/lib/containerd"]
        extra = {"mounts": [{"container_path": "/probe/escape", "host_path": str(escape_binary), "readonly": True}],
                 "linux": {"resources": {"memory_limit_in_bytes": 1024 << 20}}}
        pod = pods(bulkhead, name="probes")
        cid = containerd.run_container(pod, argv, extra=extra)
        status = containerd.wait_exited(cid, timeout=180)
        out = containerd.logs(cid)
        assert status["exitCode"] == 0 and re.search(r"\d+ passed, 0 failed", out), (status, out[-1500:])
        # and as a process exec'd into a running container
        cid = containerd.run_container(pod, ["/bin/sleep", "3600"], extra=extra)
        r = containerd.exec(cid, argv, timeout=180)
        assert r.returncode == 0 and re.search(r"\d+ passed, 0 failed", r.stdout), r.stdout + r.stderr
    finally:
        listener.close()
        abstract.close()


def test_kubectl_cp_port_forward_and_pause_work_through_the_cri(containerd, pods, handler):
    """What kubectl does beyond exec and logs: `kubectl cp` (tar through exec, both ways),
    `port-forward` (containerd's, in the pod's network namespace) and a task pause and resume
    (ctr: the CRI has no pause)."""
    pod = pods(handler, name="tools")
    cid = containerd.run_container(pod, ["/bin/sh", "-c", "mkdir -p /www /data && echo forwarded > /www/index.html "
                                                        "&& exec httpd -f -p 8080 -h /www"])
    # kubectl cp local -> pod: tar xf - through exec's stdin; pod -> local: tar cf - on stdout
    import base64
    import io
    import tarfile
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        data = b"copied in\n" * 1000
        info = tarfile.TarInfo("in.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    encoded = base64.b64encode(archive.getvalue()).decode()
    r = containerd.exec(cid, ["/bin/sh", "-c", "base64 -d | tar -xf - -C /data && wc -c < /data/in.txt"], input=encoded)
    assert (r.returncode, r.stdout.strip()) == (0, "10000"), r
    r = containerd.exec(cid, ["/bin/sh", "-c", "tar -cf - -C /data in.txt | base64"])
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(r.stdout)), mode="r") as tar:
        assert tar.extractfile("in.txt").read() == data

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        local = probe.getsockname()[1]
    forward = subprocess.Popen(containerd.crictl_argv() + ["port-forward", pod.id, f"{local}:8080"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def fetch():
            try:
                with socket.create_connection(("127.0.0.1", local), timeout=2) as s:
                    s.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
                    return b"".join(iter(lambda: s.recv(4096), b""))
            except OSError:
                return b""
        assert b"forwarded" in wait_until(fetch, 20)
    finally:
        forward.kill()
        forward.wait()

    containerd.ctr("tasks", "pause", cid)
    assert "PAUSED" in containerd.ctr("tasks", "ls").stdout
    containerd.ctr("tasks", "resume", cid)
    r = containerd.exec(cid, ["cat", "/www/index.html"])
    assert (r.returncode, r.stdout) == (0, "forwarded\n"), r
    assert {"pause", "resume"} <= {c.command for c in _calls_for(containerd, cid)}


# ---------------------------------------------------------------- CRI to OCI, the stock handler

def test_annotations_reach_the_oci_spec(containerd, pods, stock):
    """The deploy fragment's pod_annotations / container_annotations let bulkhead.dev
    annotations through to the OCI spec bulkhead-oci reads, and nothing else of the pod's."""
    pod = pods(stock, annotations={"bulkhead.dev/tier": "native", "limits.bulkhead.dev/memory-mb": "256",
                                   "example.com/other": "dropped"})
    spec = containerd.bundle_spec(pod.id)["annotations"]
    assert spec["bulkhead.dev/tier"] == "native"
    assert spec["limits.bulkhead.dev/memory-mb"] == "256"
    assert "example.com/other" not in spec
    assert spec["io.kubernetes.cri.container-type"] == "sandbox"
    cid = containerd.run_container(pod, ["/bin/sleep", "3600"], annotations={"bulkhead.dev/c": "1", "x.example/y": "no"})
    spec = containerd.bundle_spec(cid)["annotations"]  # (the bundle exists while its task does)
    assert spec["bulkhead.dev/c"] == "1" and "x.example/y" not in spec
    assert spec["bulkhead.dev/tier"] == "native"  # the pod's, passed to its containers too
    assert spec["io.kubernetes.cri.container-type"] == "container"
    assert spec["io.kubernetes.cri.sandbox-id"] == pod.id


def test_runtime_argv(containerd, pods, stock):
    """The runc CLI the runc shim speaks to a handler's runtime (bulkhead-oci must take it as is)."""
    pod = pods(stock)
    cid = containerd.run_container(pod, ["/bin/sleep", "3600"])
    containerd.exec(cid, ["/bin/true"])
    containerd.stop_container(cid, grace=1)
    containerd.remove_container(cid)
    bundle = str(containerd.state_dir_of(cid))
    calls = _calls_for(containerd, cid)
    for call in calls:
        assert call.argv[1:7] == ["--root", f"/run/containerd/runc/{ch.NAMESPACE}", "--log",
                                  f"{bundle}/log.json", "--log-format", "json"], call.argv
    by_command = {}
    for call in calls:
        by_command.setdefault(call.command, []).append(call.argv[7:])
    assert by_command["create"] == [["create", "--bundle", bundle, "--pid-file", f"{bundle}/init.pid", cid]]
    assert by_command["start"] == [["start", cid]]
    exec_args = by_command["exec"][0]
    assert exec_args[:2] == ["exec", "--process"] and exec_args[3:5] == ["--detach", "--pid-file"], exec_args
    assert exec_args[-1] == cid
    assert ["kill", cid, "15"] in by_command["kill"], by_command["kill"]
    assert ["delete", cid] in by_command["delete"], by_command["delete"]


# ---------------------------------------------------------------- the harness itself

def test_teardown_leaves_nothing(session_dir, stock):
    """destroy() with a pod still running: no process, mount, cgroup, bridge or file is left."""
    c = ch.Containerd(session_dir / "containerd-teardown")
    try:
        c.start()
        pod = c.run_pod(stock)
        cid = c.run_container(pod, ["/bin/sleep", "3600"])
        cgroup = c.bundle_spec(cid)["linux"]["cgroupsPath"]
        mount_ns, bridge, pid = c.mount_ns, c.bridge, c.process.pid
        shims = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, str(c.socket))]
        assert shims, "no shim found for the running pod"
    finally:
        started = time.monotonic()
        c.destroy()
        took = time.monotonic() - started
    assert took < 15, f"teardown took {took:.1f} s"
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _mount_ns_of(p) == mount_ns]
    assert not [p for p in shims if p.exists() and _cmdline_has(p, str(c.socket))]
    assert not Path(f"/proc/{pid}").exists() or _state(pid) == "Z"
    assert not ch.mounts_under(c.root)
    assert not [m / cgroup.strip("/") for m in ch.cgroup_mounts() if (m / cgroup.strip("/")).exists()]
    assert not [m / c.cgroup_parent.strip("/") for m in ch.cgroup_mounts() if (m / c.cgroup_parent.strip("/")).exists()]
    assert subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode != 0
    assert sorted(p.name for p in c.root.iterdir()) == sorted(
        ["bin", "config.toml", "containerd.log", "crictl.yaml", "pods", "runtime-calls.log"])


def _cmdline_has(proc: Path, text: str) -> bool:
    try:
        return text in (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def _mount_ns_of(proc: Path) -> str | None:
    try:
        return str(Path(proc / "ns" / "mnt").readlink())
    except OSError:
        return None


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


# ---------------------------------------------------------------- the node installer

def test_the_node_installer_registers_the_handler_with_containerd_and_takes_it_off_again(tmp_path, containerd):
    """deploy/kubernetes/installer/install-node.sh against a node root: the binary where the
    fragment's BinaryName says, the handler in a config.toml containerd itself accepts, the
    node's own settings kept; a second install changes nothing; uninstall restores the file."""
    if not containerd.bulkhead_oci.exists():
        pytest.skip(f"{containerd.bulkhead_oci} does not exist yet")
    host = tmp_path / "host"
    config = host / "etc" / "containerd" / "config.toml"
    config.parent.mkdir(parents=True)
    original = ('version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
                '  runtime_type = "io.containerd.runc.v2"\n')
    config.write_text(original)
    script = ch.REPO_ROOT / "deploy" / "kubernetes" / "installer" / "install-node.sh"
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOST_ROOT": str(host), "CONTAINERD_RESTART": "none",
           "BULKHEAD_OCI_SOURCE": str(containerd.bulkhead_oci), "BULKHEAD_FRAGMENT": str(ch.DEPLOY_FRAGMENT)}

    def run(action):
        r = subprocess.run(["sh", str(script), action], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    assert "updated" in run("install")
    installed = host / "usr" / "local" / "lib" / "bulkhead" / "bulkhead-oci"
    assert installed.read_bytes() == containerd.bulkhead_oci.read_bytes()
    assert (installed.stat().st_mode & 0o7777, installed.stat().st_uid) == (0o755, 0)
    runtimes = tomllib.loads(config.read_text())["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["bulkhead"]["options"]["BinaryName"] == ch.DEPLOYED_OCI == "/usr/local/lib/bulkhead/bulkhead-oci"
    assert runtimes["runc"]["runtime_type"] == "io.containerd.runc.v2"
    dump = subprocess.run(["containerd", "--config", str(config), "config", "dump"], capture_output=True, text=True,
                          timeout=60)
    assert dump.returncode == 0 and "runtimes.bulkhead" in dump.stdout, dump.stderr
    assert "updated" not in run("install")  # nothing changed: containerd is not restarted
    assert config.read_text().count("BEGIN bulkhead") == 1
    run("uninstall")
    assert config.read_text() == original
    assert not installed.exists()


# ---------------------------------------------------------------- CRI validation (critest)

def test_critest(containerd, handler):
    """cri-tools' CRI validation suite, the core of it (sandboxes, container life cycle, exec,
    attach, logs; BULKHEAD_CRITEST=full runs every spec that can run offline), against the
    handler. Its busybox image comes from a registry on loopback (ch.CritestImages)."""
    with ch.CritestImages(containerd) as images:
        r = containerd.critest(handler, focus=ch.critest_focus(), skip=ch.critest_skips(),
                               registry_prefix=images.prefix, timeout=1800)
    summary = [line for line in r.stdout.splitlines() if re.search(r"\[FAIL\]|^Ran \d+|Passed \|", line)]
    assert r.returncode == 0, "critest failed:\n" + "\n".join(summary) + "\n" + r.stdout[-4000:] + r.stderr[-2000:]
    # (succinct: "CRI validation - 21/85 specs ••S•... SUCCESS!"; a dot per spec that passed)
    ran = re.search(r"CRI validation - (\d+)/\d+ specs", r.stdout)
    assert ran and int(ran.group(1)) > 0 and "SUCCESS!" in r.stdout, r.stdout[-2000:]
