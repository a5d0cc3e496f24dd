"""A private containerd for the containerd tests (issue 25: bulkhead as a containerd runtime
handler): Debian's containerd with a root, state, socket and config of its own, driven through
CRI with crictl (as the kubelet drives a node's containerd) and checked with critest.

What it keeps to itself:
  - every path under one temp dir (0700): containerd's root, state, temp, config, socket, the
    CNI config and IPAM state, pod logs. The runc shim hard-codes /run/containerd for its
    sockets and the runtimes' state (`--root /run/containerd/runc/k8s.io`), so containerd runs
    in a mount namespace of its own with the temp dir's run/ bound over /run/containerd: the
    host's /run/containerd (created empty if missing) and /var/lib/containerd are never
    touched, and every mount containerd, its shims and runtimes make (rootfs overlays, pod
    netns) lives in that namespace and goes when its last process does.
  - names: in that namespace /etc/resolv.conf names 127.0.0.1 (where nothing may listen on
    port 53) and /etc/hosts only localhost, and containerd gets no proxy settings, so no pull
    of a real registry's name leaves the machine (critest's images come from a loopback
    registry, see CritestImages); pods get those two files as well. The runtimes, shims and
    bulkhead-oci run in that namespace too and see the same /run/containerd and /etc files.
  - oomScoreAdj: without CAP_SYS_RESOURCE (this CI host's bounding set lacks it) no runtime
    can apply CRI's -998 for the pause container; restrict_oom_score_adj is then set.
  - the network: pods get a netns each, on a bridge the harness makes (its own 10.213.N.0/24,
    the host's end of it addressed .1) with the CNI bridge plugin; no default route in pods,
    no masquerade (ipMasq false), no gateway mode (which would turn on the host's ip_forward):
    pods reach each other and the host's address on that bridge, nothing else. The CRI stream
    server (exec, attach, port-forward) listens on 127.0.0.1.
  - cgroups: pods are placed under a cgroup parent of the harness's own (cgroupfs paths:
    SystemdCgroup = false; there is no systemd here).

Runtime handlers: those of deploy/containerd/bulkhead.toml (`bulkhead` so far,
with BinaryName replaced by the bulkhead-oci under test), plus test-only handlers of stock
runtimes under the same runc shim (STOCK_RUNTIMES), each registered when its binary exists.
Every handler's BinaryName is a small logging wrapper that appends the argv the shim passed to
runtime-calls.log before it execs the runtime (runtime_calls()).

Images, made here without a network: bulkhead.test/pause:1 (a static pause program, the CRI
sandbox image) and bulkhead.test/busybox:1 (busybox-static and its applet links), imported with
ctr into the k8s.io namespace.

Teardown (destroy(), also at exit): pods are stopped and removed through CRI, then containerd
and every process of its mount namespace or below it (shims, runtimes, sandboxes) is
SIGKILLed, mounts left under the temp dir are unmounted, the cgroups the containers named are
removed, the bridge is deleted, and the bulky dirs are removed (logs and config stay)."""

import atexit
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path

import oci_images as oi
from harness import BUILD_DIR, REPO_ROOT, wait_until
from oci_registry import OciRegistry

TOOLS_DIR = Path("/usr/local/lib/bulkhead")
CRICTL = TOOLS_DIR / "crictl"
CRITEST = TOOLS_DIR / "critest"
CONTAINERD = Path("/usr/bin/containerd")
CTR = Path("/usr/bin/ctr")
RUNC_SHIM = Path("/usr/bin/containerd-shim-runc-v2")
CNI_BIN_DIR = Path("/usr/lib/cni")
BUSYBOX = Path("/bin/busybox")

DEPLOY_FRAGMENT = REPO_ROOT / "deploy" / "containerd" / "bulkhead.toml"
DEPLOYED_OCI = "/usr/local/lib/bulkhead/bulkhead-oci"  # what the fragment's BinaryName says
BULKHEAD_OCI = Path(os.environ.get("BULKHEAD_OCI", BUILD_DIR / "bulkhead-oci"))
BULKHEAD_HANDLERS = ("bulkhead",)

# Test-only handlers: stock OCI runtimes under the same runc shim, to check the harness and to
# compare bulkhead-oci with (they let the same annotations through as the bulkhead handlers).
# On this project's CI host (Debian 12, cgroup v1 hybrid, no CAP_SYS_RESOURCE) only runc works:
#   runc          Debian's 1.1.5: works (given restrict_oom_score_adj, see config())
#   runsc         scripts/install-runsc.sh's build: pods start, but gVisor under the runc shim
#                 cannot work: `runsc create` writes the sandbox's pid to --pid-file for every
#                 container, so the shim never sees a container's own exit, and a second
#                 container's `runsc start` can hang (gVisor's path is its own shim, runsc-v1)
#   crun          Debian's 1.8.1: "cgroups in hybrid mode not supported, drop all controllers
#                 from cgroupv2"
#   runsc-debian  Debian's 2022-12-19 build: "cannot create sandbox: cannot read client sync
#                 file: waiting for sandbox to start: EOF"
STOCK_RUNTIMES = {
    "runc": "/usr/sbin/runc",
    "runsc": "/usr/local/lib/bulkhead/runsc",
    "crun": "/usr/bin/crun",
    "runsc-debian": "/usr/bin/runsc",
}
# Tried in this order by stock_handler().
STOCK_PREFERENCE = ("runc", "crun", "runsc", "runsc-debian")

PAUSE_IMAGE = "bulkhead.test/pause:1"
BUSYBOX_IMAGE = "bulkhead.test/busybox:1"
NAMESPACE = "k8s.io"  # the containerd namespace CRI uses
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PAUSE_C = r"""
/* The pod sandbox's process: sleeps until SIGINT or SIGTERM, reaping children meanwhile (it is
 * PID 1 of the pod's namespaces). Static, so the image needs nothing else. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
  signal(SIGINT, quit);
  signal(SIGTERM, quit);
  signal(SIGCHLD, reap);
  for (;;) pause();
}
"""


def missing_tools() -> str | None:
    """Why the containerd tests cannot run here (a skip reason), or None."""
    if os.geteuid() != 0:
        return "the containerd tests run as root"
    for path, what in [(CONTAINERD, "containerd (Debian package containerd)"), (CTR, "ctr (package containerd)"),
                       (RUNC_SHIM, "containerd-shim-runc-v2 (package containerd)"),
                       (CRICTL, "crictl (scripts/install-cri-tools.sh)"),
                       (CNI_BIN_DIR / "bridge", "the CNI bridge plugin (package containernetworking-plugins)"),
                       (BUSYBOX, "a static busybox (package busybox-static)")]:
        if not path.exists():
            return f"{path} is missing: {what}"
    if not shutil.which("unshare") or not shutil.which("ip") or not shutil.which("cc"):
        return "unshare, ip or cc is missing"
    return None


def has_cap_sys_resource() -> bool:
    """Whether this process may lower an oom_score_adj (CAP_SYS_RESOURCE, bit 24, effective)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 24 & 1)
    return False


# ---------------------------------------------------------------- TOML (tomllib only reads)

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def to_toml(table: dict, prefix: tuple = ()) -> str:
    """`table` as TOML: scalars first, then each sub-table under its dotted header."""
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    out = "\n".join(lines) + ("\n" if lines else "")
    for k, v in table.items():
        if isinstance(v, dict):
            path = prefix + (k,)
            out += "\n[" + ".".join(_toml_key(p) for p in path) + "]\n" + to_toml(v, path)
    return out


def merge(into: dict, other: dict) -> dict:
    """Merges `other` into `into` recursively (other's scalars win)."""
    for k, v in other.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = v
    return into


# ---------------------------------------------------------------- images

def _oci_archive(image: oi.Image, name: str, path: Path) -> Path:
    """An OCI image layout tarball of `image` named `name`, as `ctr images import` takes it."""
    layout = path.with_suffix(".layout")
    shutil.rmtree(layout, ignore_errors=True)
    oi.write_oci_layout(layout, image, name.rsplit(":", 1)[1])
    index = json.loads((layout / "index.json").read_text())
    index["manifests"][0]["annotations"]["io.containerd.image.name"] = name
    (layout / "index.json").write_text(json.dumps(index))
    with tarfile.open(path, "w") as tar:
        for entry in sorted(layout.rglob("*")):
            tar.add(entry, arcname=str(entry.relative_to(layout)), recursive=False)
    shutil.rmtree(layout)
    return path


def pause_image() -> oi.Image:
    work = Path(os.environ.get("TMPDIR", "/tmp"))
    src = work / f"bulkhead-pause-{os.getpid()}.c"
    out = src.with_suffix("")
    try:
        src.write_text(PAUSE_C)
        subprocess.run(["cc", "-O2", "-static", "-o", str(out), str(src)], check=True, capture_output=True)
        binary = out.read_bytes()
    finally:
        src.unlink(missing_ok=True)
        out.unlink(missing_ok=True)
    layer = oi.make_layer([oi.File("pause", binary, mode=0o755)])
    return oi.build_image([layer], {"Entrypoint": ["/pause"], "Env": [PATH_ENV]})


def _hardlink(path: str, target: str, mode: int) -> oi.Raw:
    """A hard link entry with a mode: containerd applies a hard link's mode to the file it
    links to (oi.Hardlink's 0644 would leave busybox not executable)."""
    info = tarfile.TarInfo(path)
    info.type, info.linkname, info.mode = tarfile.LNKTYPE, target, mode
    return oi.Raw(info)


def busybox_image() -> oi.Image:
    """busybox-static's /bin/busybox with a hard link for each applet where busybox puts it
    (hard, as in Docker's busybox images: masking /bin/ls must not mask every applet)."""
    applets = subprocess.run([str(BUSYBOX), "--list-full"], check=True, capture_output=True,
                             text=True).stdout.split()
    dirs = {"bin", "dev", "etc", "proc", "sys", "run", "var", "usr", "sbin", "usr/bin", "usr/sbin"}
    entries = [oi.Dir(d) for d in sorted(dirs)]
    entries += [oi.Dir("tmp", mode=0o1777), oi.Dir("root", mode=0o700), oi.Dir("var/tmp", mode=0o1777)]
    entries.append(oi.File("bin/busybox", BUSYBOX.read_bytes(), mode=0o755))
    entries += [_hardlink(a, "bin/busybox", 0o755) for a in applets if a != "bin/busybox"]
    entries += [oi.File("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
                oi.File("etc/group", b"root:x:0:\nnogroup:x:65534:\n")]
    return oi.build_image([oi.make_layer(entries)], {"Cmd": ["/bin/sh"], "Env": [PATH_ENV]})


_IMAGE_CACHE: dict[str, oi.Image] = {}


def test_images() -> dict[str, oi.Image]:
    """The test images by name (built once per process)."""
    if not _IMAGE_CACHE:
        _IMAGE_CACHE[PAUSE_IMAGE] = pause_image()
        _IMAGE_CACHE[BUSYBOX_IMAGE] = busybox_image()
    return _IMAGE_CACHE


# ---------------------------------------------------------------- processes, mounts, cgroups

def _ppid_map() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def _mount_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _processes_of(mount_ns: str | None, roots: set[int]) -> set[int]:
    """Processes in mount namespace `mount_ns`, the `roots` still alive, and all their descendants."""
    parents = _ppid_map()
    found = {pid for pid in parents if pid in roots or (mount_ns and _mount_ns(pid) == mount_ns)}
    found.discard(os.getpid())
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in found and pid not in found:
                found.add(pid)
                changed = True
    return found


def _kill_all(mount_ns: str | None, roots: set[int], timeout: float = 10) -> set[int]:
    """SIGKILLs those processes until none is left; returns the ones that outlived the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        pids = _processes_of(mount_ns, roots)
        # (zombies of ours are reaped by their parents' deaths or by us)
        live = set()
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                live.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.05)


def mounts_under(path: Path) -> list[str]:
    """Mount points at or under `path` in this mount namespace, deepest first."""
    prefix = str(path).rstrip("/")
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return sorted(found, key=len, reverse=True)


def cgroup_mounts() -> list[Path]:
    """The cgroup hierarchies mounted under /sys/fs/cgroup (v1 controllers, unified, named)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2") and fields[4].startswith("/sys/fs/cgroup"):
            found.append(Path(fields[4]))
    return found


def remove_cgroup(path: str, timeout: float = 5) -> list[str]:
    """Removes cgroup `path` (as an OCI cgroupsPath names it) and what is below it in every
    hierarchy; returns the directories that would not go."""
    left = []
    for mount in cgroup_mounts():
        top = mount / path.strip("/")
        if not path.strip("/") or not top.is_dir():
            continue
        dirs = sorted((p for p in [top, *top.rglob("*")] if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for d in dirs:
            if not wait_until(lambda: _rmdir(d), timeout, 0.05):
                left.append(str(d))
    return left


def _rmdir(d: Path) -> bool:
    try:
        d.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _port_53_listener() -> str | None:
    """A socket bound to port 53 on 127.0.0.1 or a wildcard address (TCP listening or UDP), if any."""
    wanted = {"0100007F", "00000000", "00000000000000000000000000000000", "00000000000000000000000001000000"}
    for table in ("tcp", "udp", "tcp6", "udp6"):
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, port = fields[1].split(":")
            if int(port, 16) == 53 and address in wanted and (table.startswith("udp") or fields[3] == "0A"):
                return f"{table} {address}:53"
    return None


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", "dev", name], capture_output=True).returncode == 0


# ---------------------------------------------------------------- containerd

@dataclass
class Pod:
    id: str
    name: str
    handler: str
    config: dict      # the PodSandboxConfig given to RunPodSandbox
    config_path: Path  # the same as a file, which crictl create wants beside the container's


@dataclass
class ExecResult:
    returncode: int
    stdout: str
    stderr: str


@dataclass
class RuntimeCall:
    handler: str
    cwd: str
    argv: list[str]  # argv[0] is the runtime the handler names

    @property
    def command(self) -> str | None:
        """The runc subcommand (create, start, state, kill, delete, exec...): the first word
        that is not a global flag or its value."""
        args = self.argv[1:]
        i = 0
        while i < len(args):
            a = args[i]
            if a in ("--root", "--log", "--log-format", "--criu"):
                i += 2
                continue
            if a.startswith("-"):
                i += 1
                continue
            return a
        return None


_LIVE: list["Containerd"] = []
_numbers = itertools.count(1)


class Containerd:
    """A private containerd under `root` (made 0700). handlers: extra test handlers, name ->
    runtime binary (the runc shim's BinaryName), on top of the deploy fragment's and the stock
    ones that exist here."""

    def __init__(self, root: Path, handlers: dict[str, str] | None = None, log_level: str | None = None,
                 bulkhead_oci: Path = BULKHEAD_OCI):
        self.root = Path(root)
        self.n = next(_numbers)
        self.log_level = log_level or os.environ.get("BULKHEAD_CONTAINERD_LOG_LEVEL", "info")
        self.bulkhead_oci = Path(bulkhead_oci)
        self.extra_handlers = dict(handlers or {})
        self.socket = self.root / "containerd.sock"
        self.log_path = self.root / "containerd.log"
        self.config_path = self.root / "config.toml"
        self.calls_log = self.root / "runtime-calls.log"
        self.pods_dir = self.root / "pods"
        self.egress_log_dir = self.root / "egress"
        self.cgroup_parent = f"/bulkhead-ctd-{os.getpid()}-{self.n}"
        self.process: subprocess.Popen | None = None
        self.mount_ns: str | None = None
        self.bridge: str | None = None
        self.subnet: str | None = None
        self.handlers: dict[str, str] = {}  # name -> the runtime binary it runs (behind its wrapper)
        self._pod_numbers = itertools.count(1)
        self._container_numbers = itertools.count(1)
        self._cgroup_paths: set[str] = set()

    # -- configuration

    def runtime_tables(self) -> dict:
        """The CRI runtimes table: the deploy fragment's handlers, the stock and extra ones."""
        fragment = tomllib.loads(DEPLOY_FRAGMENT.read_text())
        runtimes = fragment["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
        wanted = {}
        for name, table in runtimes.items():
            binary = table["options"]["BinaryName"]
            wanted[name] = (table, str(self.bulkhead_oci) if binary == DEPLOYED_OCI else binary)
        stock = {name: binary for name, binary in STOCK_RUNTIMES.items() if Path(binary).exists()}
        like = runtimes["bulkhead"]
        for name, binary in {**stock, **self.extra_handlers}.items():
            wanted[name] = ({"runtime_type": "io.containerd.runc.v2",
                             "pod_annotations": list(like.get("pod_annotations", [])),
                             "container_annotations": list(like.get("container_annotations", [])),
                             "options": {"SystemdCgroup": False}}, binary)
        tables = {}
        for name, (table, binary) in wanted.items():
            table = json.loads(json.dumps(table))
            table["options"]["BinaryName"] = str(self._wrapper(name, binary))
            tables[name] = table
            self.handlers[name] = binary
        return tables

    def _wrapper(self, handler: str, binary: str) -> Path:
        """A script that logs its argv (fields split by \\x1f: handler, cwd, argv) and execs `binary`."""
        path = self.root / "bin" / handler
        path.parent.mkdir(mode=0o700, exist_ok=True)
        path.write_text(
            "#!/bin/sh\n"
            f"# containerd's runc shim runs this as handler {handler}'s runtime: log, then run it\n"
            f"line=$(printf '%s' {handler}; printf '\\037%s' \"$PWD\" {_sh_quote(binary)} \"$@\")\n"
            f"printf '%s\\n' \"$line\" >> {_sh_quote(str(self.calls_log))}\n"
            f"exec {_sh_quote(binary)} \"$@\"\n")
        path.chmod(0o755)
        return path

    def config(self) -> dict:
        r = self.root
        runtimes = self.runtime_tables()
        cri = {
            "sandbox_image": PAUSE_IMAGE,
            "disable_tcp_service": True,
            "stream_server_address": "127.0.0.1",
            "stream_server_port": "0",
            "netns_mounts_under_state_dir": True,
            "enable_selinux": False,
            "systemd_cgroup": False,
            # Without CAP_SYS_RESOURCE (some CI sandboxes drop it) no runtime can give the pod
            # sandbox the oomScoreAdj of -998 CRI asks for: keep them at containerd's own.
            "restrict_oom_score_adj": not has_cap_sys_resource(),
            "cni": {"bin_dir": str(CNI_BIN_DIR), "conf_dir": str(r / "cni" / "net.d"), "max_conf_num": 1},
            "containerd": {
                "snapshotter": "overlayfs",
                # (pods name their handler; this is for those that do not)
                "default_runtime_name": "runc" if "runc" in runtimes else next(iter(runtimes)),
                "runtimes": runtimes,
            },
        }
        return {
            "version": 2,
            "root": str(r / "lib"),
            "state": str(r / "state"),
            "temp": str(r / "tmp"),
            "oom_score": 0,
            "grpc": {"address": str(self.socket)},
            "ttrpc": {"address": str(self.socket) + ".ttrpc"},
            "debug": {"address": "", "level": self.log_level},
            "metrics": {"address": ""},
            "plugins": {
                "io.containerd.grpc.v1.cri": cri,
                "io.containerd.internal.v1.opt": {"path": str(r / "opt")},
            },
        }

    def _pick_network(self):
        """A bridge name and 10.213.N.0/24 that nothing on the host uses."""
        routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
        addrs = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
        start = (os.getpid() + self.n * 7) % 200
        for i in range(250):
            n = (start + i) % 250 + 1
            subnet = f"10.213.{n}."
            name = f"bhctd{n}"
            if subnet in routes or subnet in addrs or _link_exists(name):
                continue
            return name, n
        raise RuntimeError("no free 10.213.N.0/24 for the containerd test bridge")

    def _make_network(self):
        name, n = self._pick_network()
        subprocess.run(["ip", "link", "add", "name", name, "type", "bridge"], check=True, capture_output=True)
        self.bridge = name
        self.subnet = f"10.213.{n}.0/24"
        subprocess.run(["ip", "addr", "add", f"10.213.{n}.1/24", "dev", name], check=True, capture_output=True)
        subprocess.run(["ip", "link", "set", name, "up"], check=True, capture_output=True)
        conf_dir = self.root / "cni" / "net.d"
        conf_dir.mkdir(parents=True, mode=0o700)
        conflist = {
            "cniVersion": "1.0.0",
            "name": f"bulkhead-test-{n}",
            "plugins": [{
                "type": "bridge",
                "bridge": name,
                # no gateway mode (the plugin would turn on the host's ip_forward), no NAT to
                # the outside, no default route: pods reach the subnet only
                "isGateway": False,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": self.subnet, "rangeStart": f"10.213.{n}.10",
                                 "rangeEnd": f"10.213.{n}.250"}]],
                    "routes": [],
                    "dataDir": str(self.root / "cni" / "ipam"),
                },
            }],
        }
        (conf_dir / "10-bulkhead-test.conflist").write_text(json.dumps(conflist, indent=2))

    # -- life cycle

    def start(self, timeout: float = 30) -> "Containerd":
        self.root.mkdir(parents=True, mode=0o700, exist_ok=True)
        self.root.chmod(0o700)
        for d in ("lib", "state", "tmp", "opt", "run"):
            (self.root / d).mkdir(mode=0o700, exist_ok=True)
        self.pods_dir.mkdir(mode=0o700, exist_ok=True)
        _LIVE.append(self)
        self._make_network()
        self.config_path.write_text(
            "# a private containerd of tests/integration/containerd_harness.py\n" + to_toml(self.config()))
        self.write_crictl_config()
        # (the runc shim's /run/containerd: the mount point must exist in the host's tree)
        Path("/run/containerd").mkdir(mode=0o711, exist_ok=True)
        self._write_name_service_files()
        log = open(self.log_path, "ab")
        script = ('mount --bind "$0" /run/containerd && mount --bind "$1" /etc/resolv.conf && '
                  'mount --bind "$2" /etc/hosts && exec "$3" --config "$4"')
        # (no proxy settings: containerd pulls nothing from anywhere but a test's loopback registry)
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        # bulkhead-oci's pod egress logs (docs/kubernetes.md), under the temp dir
        env["BULKHEAD_OCI_EGRESS_LOG_DIR"] = str(self.egress_log_dir)
        self.process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script,
             str(self.root / "run"), str(self.root / "etc" / "resolv.conf"), str(self.root / "etc" / "hosts"),
             str(CONTAINERD), str(self.config_path)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env)
        log.close()
        own_ns = _mount_ns(os.getpid())
        self.mount_ns = wait_until(lambda: (ns := _mount_ns(self.process.pid)) != own_ns and ns, 5, 0.01) or None
        ready = wait_until(lambda: self.process.poll() is not None or self._ctr_ok(), timeout, 0.05)
        if self.process.poll() is not None or not ready:
            raise RuntimeError(f"containerd did not start (exit {self.process.poll()}):\n{self.log_tail()}")
        self.import_images()
        if not wait_until(self.cri_ready, timeout, 0.1):
            raise RuntimeError(f"containerd's CRI is not ready:\n{self.crictl('info', check=False).stdout}\n"
                               f"{self.log_tail()}")
        return self

    def _write_name_service_files(self):
        """containerd's own /etc/resolv.conf and /etc/hosts (bound over the host's in its mount
        namespace; CRI copies them into pods): names resolve to nothing but localhost, so a pull
        of a name that no test registry serves fails at once instead of querying the host's DNS
        server. The resolver they name is 127.0.0.1, where nothing may listen on port 53."""
        if listener := _port_53_listener():
            raise RuntimeError(f"something listens on {listener}: containerd's resolver would reach it")
        etc = self.root / "etc"
        etc.mkdir(mode=0o700, exist_ok=True)
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        (etc / "hosts").write_text("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n")

    def _ctr_ok(self) -> bool:
        return self.socket.exists() and self.ctr("version", check=False).returncode == 0

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def cri_ready(self) -> bool:
        r = self.crictl("info", check=False)
        if r.returncode != 0:
            return False
        conditions = {c["type"]: c["status"] for c in json.loads(r.stdout)["status"]["conditions"]}
        return conditions.get("RuntimeReady") is True and conditions.get("NetworkReady") is True

    def import_images(self):
        for name, image in test_images().items():
            self.import_image(name, image)

    def import_image(self, name: str, image: oi.Image):
        """Puts `image` in containerd's store as `name` (ctr images import of its OCI layout)."""
        archive = _oci_archive(image, name, self.root / "tmp" / (name.replace("/", "_").replace(":", "_") + ".tar"))
        try:
            self.ctr("images", "import", str(archive))
        finally:
            archive.unlink(missing_ok=True)

    def tag_image(self, source: str, name: str):
        """Gives an image in containerd's store another name (ctr images tag)."""
        self.ctr("images", "tag", "--force", source, name)

    def destroy(self):
        """Stops everything this containerd started and removes what it made; safe to call twice
        and after a failed start. Raises after the whole teardown if something would not go."""
        if self in _LIVE:
            _LIVE.remove(self)
        problems = []

        def step(what, fn, *args):
            try:
                fn(*args)
            except Exception as e:  # the next steps still run
                problems.append(f"{what}: {e}")

        if self.running():
            # the way a node drains: stop and remove the pods through CRI (bounded: a runtime
            # that hangs must not hang the teardown; what is left is killed below)
            step("removing pods through CRI", self._remove_pods_through_cri, 20)
        step("reading bundles", self._collect_cgroup_paths)
        step("stopping containerd", self._kill_everything, problems)
        for point in mounts_under(self.root):
            step(f"unmounting {point}", subprocess.run, ["umount", "-l", point])
        for path in sorted(self._cgroup_paths | {self.cgroup_parent}, key=len, reverse=True):
            problems += [f"cgroup left: {d}" for d in remove_cgroup(path)]
        if self.bridge and _link_exists(self.bridge):
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
            if _link_exists(self.bridge):
                problems.append(f"bridge {self.bridge} left")
        self.bridge = None
        for d in ("lib", "state", "tmp", "opt", "run", "cni", "etc"):
            shutil.rmtree(self.root / d, ignore_errors=True)
        for sock in (self.socket, Path(str(self.socket) + ".ttrpc")):
            sock.unlink(missing_ok=True)
        if problems:
            raise RuntimeError("containerd teardown: " + "; ".join(problems))

    def _kill_everything(self, problems: list):
        """SIGTERM to containerd, then SIGKILL to it and to every process of its mount namespace
        or below one (shims, runtimes, gofers, sandboxes, the pods' processes)."""
        if self.process is None:
            return
        if self.running():
            self.process.terminate()
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        left = _kill_all(self.mount_ns, {self.process.pid})
        if left:
            problems.append(f"processes that would not die: {sorted(left)}")
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            problems.append(f"containerd (pid {self.process.pid}) did not exit")

    def _remove_pods_through_cri(self, budget: float):
        deadline = time.monotonic() + budget

        def crictl(*args):
            remaining = deadline - time.monotonic()
            if remaining <= 1:
                return None
            try:
                return subprocess.run(self.crictl_argv(f"{int(remaining)}s") + list(args), capture_output=True,
                                      text=True, timeout=remaining, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return None

        r = crictl("pods", "-q")
        for pod_id in r.stdout.split() if r and r.returncode == 0 else []:
            self._note_cgroups_of_pod(pod_id)
            crictl("stopp", pod_id)
            crictl("rmp", "-f", pod_id)

    def _note_cgroups_of_pod(self, pod_id: str):
        self._cgroup_paths.update(self._cgroup_paths_in(self.state_dir_of(pod_id) / "config.json"))
        self._collect_cgroup_paths()

    def _collect_cgroup_paths(self):
        """The cgroupsPath of every bundle still in the state dir (containers not deleted)."""
        for spec in (self.root / "state").glob("io.containerd.runtime.v2.task/*/*/config.json"):
            self._cgroup_paths.update(self._cgroup_paths_in(spec))

    @staticmethod
    def _cgroup_paths_in(spec: Path) -> set[str]:
        try:
            path = json.loads(spec.read_text()).get("linux", {}).get("cgroupsPath", "")
        except (OSError, ValueError):
            return set()
        return {path} if path and ":" not in path else set()

    def state_dir_of(self, container_id: str) -> Path:
        """The bundle the runc shim runs a container (or pod sandbox) from: config.json, rootfs."""
        return self.root / "state" / "io.containerd.runtime.v2.task" / NAMESPACE / container_id

    def bundle_spec(self, container_id: str) -> dict:
        """The OCI runtime spec containerd wrote for the container (or pod sandbox)."""
        return json.loads((self.state_dir_of(container_id) / "config.json").read_text())

    # -- tools

    def ctr(self, *args, check=True, timeout: float = 60) -> subprocess.CompletedProcess:
        r = subprocess.run([str(CTR), "--address", str(self.socket), "--namespace", NAMESPACE, *args],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def write_crictl_config(self) -> Path:
        path = self.root / "crictl.yaml"
        path.write_text(f"runtime-endpoint: {self.endpoint()}\nimage-endpoint: {self.endpoint()}\n"
                        "timeout: 60\ndebug: false\npull-image-on-create: false\n")
        return path

    def crictl_argv(self, rpc_timeout: str = "60s") -> list[str]:
        return [str(CRICTL), "--config", str(self.root / "crictl.yaml"), "--runtime-endpoint", self.endpoint(),
                "--image-endpoint", self.endpoint(), "--timeout", rpc_timeout]

    def crictl(self, *args, check=True, timeout: float = 120, input: str | None = None) -> subprocess.CompletedProcess:
        r = subprocess.run(self.crictl_argv() + list(args), capture_output=True, text=True, timeout=timeout,
                           input=input, stdin=None if input is not None else subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise CrictlError(args, r)
        return r

    # -- what the kubelet does

    def pod_config(self, name: str | None = None, annotations: dict | None = None,
                   labels: dict | None = None, host_network: bool = False) -> dict:
        n = next(self._pod_numbers)
        name = name or f"pod{n}"
        log_dir = self.pods_dir / f"{name}-{n}"
        log_dir.mkdir(mode=0o700, exist_ok=True)
        return {
            "metadata": {"name": name, "namespace": "bulkhead-test", "uid": str(uuid.uuid4()), "attempt": 0},
            "hostname": name,
            "log_directory": str(log_dir),
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
            "linux": {
                "cgroup_parent": self.cgroup_parent,
                # as the kubelet asks by default: the pod's network and IPC, a pid namespace per
                # container (NamespaceMode: POD 0, CONTAINER 1, NODE 2)
                "security_context": {"namespace_options": {"network": 2 if host_network else 0, "pid": 1, "ipc": 0}},
            },
        }

    def run_pod(self, handler: str, name: str | None = None, annotations: dict | None = None,
                config: dict | None = None, timeout: float = 120) -> "Pod":
        """RunPodSandbox with runtime handler `handler` (crictl runp --runtime)."""
        config = config or self.pod_config(name, annotations)
        path = Path(config["log_directory"]) / "pod.json"
        path.write_text(json.dumps(config, indent=2))
        r = self.crictl("runp", "--runtime", handler, str(path), timeout=timeout)
        pod = Pod(id=r.stdout.strip(), name=config["metadata"]["name"], handler=handler, config=config,
                  config_path=path)
        self._cgroup_paths.update(self._cgroup_paths_in(self.state_dir_of(pod.id) / "config.json"))
        return pod

    def create_container(self, pod: Pod, command: list[str], name: str | None = None,
                         image: str = BUSYBOX_IMAGE, args: list[str] | None = None, env: dict | None = None,
                         annotations: dict | None = None, extra: dict | None = None, timeout: float = 120) -> str:
        """CreateContainer in `pod` (crictl create); returns the container id."""
        n = next(self._container_numbers)
        name = name or f"c{n}"
        config = {
            "metadata": {"name": name, "attempt": 0},
            "image": {"image": image},
            "command": list(command),
            "args": list(args or []),
            "envs": [{"key": k, "value": v} for k, v in (env or {}).items()],
            "log_path": f"{name}-{n}.log",
            "annotations": dict(annotations or {}),
            # the kubelet gives each container its pod's namespace options
            "linux": {"security_context": {"namespace_options": dict(
                pod.config["linux"]["security_context"]["namespace_options"])}},
        }
        merge(config, extra or {})
        path = Path(pod.config["log_directory"]) / f"{name}-{n}.json"
        path.write_text(json.dumps(config, indent=2))
        r = self.crictl("create", pod.id, str(path), str(pod.config_path), timeout=timeout)
        cid = r.stdout.strip()
        self._cgroup_paths.update(self._cgroup_paths_in(self.state_dir_of(cid) / "config.json"))
        return cid

    def start_container(self, container_id: str, timeout: float = 120):
        self.crictl("start", container_id, timeout=timeout)

    def run_container(self, pod: Pod, command: list[str], **kw) -> str:
        cid = self.create_container(pod, command, **kw)
        self.start_container(cid)
        return cid

    def exec_sync(self, container_id: str, argv: list[str], timeout: int = 30) -> "ExecResult":
        """ExecSync (crictl exec --sync), what the kubelet's exec probes use. crictl prints the
        command's stdout and then its stderr, each followed by a newline, all on its stdout: that
        is `output`; when the command fails it prints neither, only the exit code."""
        r = self.crictl("exec", "--sync", "--timeout", str(timeout), container_id, *argv, check=False,
                        timeout=timeout + 30)
        if r.returncode == 0:
            return ExecResult(0, r.stdout, "")
        if m := re.search(r"exited with (\d+)", r.stderr):
            return ExecResult(int(m.group(1)), "", "")
        raise CrictlError(["exec", "--sync", container_id, *argv], r)

    def exec(self, container_id: str, argv: list[str], input: str | None = None, tty: bool = False,
             timeout: float = 60) -> "ExecResult":
        """Exec through the CRI streaming server (crictl exec [-i] [-t]), as `kubectl exec`
        does: the command's exit code, stdout and stderr (stdin from `input`)."""
        flags = (["-i"] if input is not None else []) + (["-t"] if tty else [])
        r = self.crictl("exec", *flags, container_id, *argv, check=False, timeout=timeout, input=input)
        if r.returncode == 0:
            return ExecResult(0, r.stdout, r.stderr)
        lines = r.stderr.splitlines(keepends=True)
        if lines and (m := re.search(r"command terminated with exit code (\d+)", lines[-1])):
            return ExecResult(int(m.group(1)), r.stdout, "".join(lines[:-1]))
        raise CrictlError(["exec", *flags, container_id, *argv], r)

    def logs(self, container_id: str) -> str:
        """What the container wrote to its stdout (CRI's log file, through crictl logs)."""
        return self.crictl("logs", container_id).stdout

    def logs_both(self, container_id: str) -> tuple[str, str]:
        """(stdout, stderr) of the container, from its CRI log file."""
        r = self.crictl("logs", container_id)
        return r.stdout, r.stderr

    def container_state(self, container_id: str) -> str:
        """CONTAINER_CREATED, CONTAINER_RUNNING, CONTAINER_EXITED or CONTAINER_UNKNOWN."""
        return json.loads(self.crictl("inspect", container_id).stdout)["status"]["state"]

    def inspect(self, container_id: str) -> dict:
        return json.loads(self.crictl("inspect", container_id).stdout)

    def inspect_pod(self, pod_id: str) -> dict:
        return json.loads(self.crictl("inspectp", pod_id).stdout)

    def wait_exited(self, container_id: str, timeout: float = 30) -> dict:
        status = wait_until(lambda: (s := self.inspect(container_id)["status"])["state"] == "CONTAINER_EXITED" and s,
                            timeout)
        if not status:
            raise AssertionError(f"container {container_id} did not exit: {self.inspect(container_id)['status']}")
        return status

    def stop_container(self, container_id: str, grace: int = 5):
        self.crictl("stop", "--timeout", str(grace), container_id)

    def remove_container(self, container_id: str):
        self.crictl("rm", container_id)

    def stop_pod(self, pod: Pod | str):
        self.crictl("stopp", pod.id if isinstance(pod, Pod) else pod)

    def remove_pod(self, pod: Pod | str):
        self.crictl("rmp", pod.id if isinstance(pod, Pod) else pod)

    def pods(self) -> list[dict]:
        return json.loads(self.crictl("pods", "-o", "json").stdout).get("items") or []

    def containers(self, all_states: bool = True) -> list[dict]:
        args = ["ps", "-o", "json"] + (["-a"] if all_states else [])
        return json.loads(self.crictl(*args).stdout).get("containers") or []

    # -- what the runc shim did

    def runtime_calls(self, handler: str | None = None) -> list[RuntimeCall]:
        """Every runtime invocation the shims made so far, oldest first (from the wrappers' log)."""
        calls = []
        try:
            text = self.calls_log.read_text()
        except FileNotFoundError:
            return []
        for line in text.splitlines():
            fields = line.split("\x1f")
            if len(fields) >= 3 and (handler is None or fields[0] == handler):
                calls.append(RuntimeCall(handler=fields[0], cwd=fields[1], argv=fields[2:]))
        return calls

    # -- critest

    def critest(self, handler: str, focus: list[str] = (), skip: list[str] = (), extra: list[str] = (),
                timeout: float = 1800, images_file: Path | None = None,
                registry_prefix: str | None = None) -> subprocess.CompletedProcess:
        """Runs the CRI validation suite against this containerd with runtime handler `handler`.
        critest pulls its images (PullImage) from registry.k8s.io unless registry_prefix names
        a registry (e.g. a loopback OciRegistry's "127.0.0.1:PORT") that serves them under the
        same paths; images_file: a YAML with defaultTestContainerImage / webServerTestImage."""
        if not CRITEST.exists():
            raise RuntimeError(f"{CRITEST} is missing (scripts/install-cri-tools.sh)")
        argv = [str(CRITEST), f"--runtime-endpoint={self.endpoint()}", f"--image-endpoint={self.endpoint()}",
                f"--runtime-handler={handler}", "--ginkgo.no-color", "--ginkgo.succinct",
                f"--report-dir={self.root / 'critest-reports'}"]
        argv += [f"--ginkgo.focus={f}" for f in focus]
        argv += [f"--ginkgo.skip={s}" for s in skip]
        if images_file:
            argv.append(f"--test-images-file={images_file}")
        if registry_prefix:
            argv.append(f"--registry-prefix={registry_prefix}")
        argv += list(extra)
        (self.root / "critest-reports").mkdir(mode=0o700, exist_ok=True)
        # (critest runs from a dir of its own: it looks for a crictl.yaml beside it and in cwd)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=self.root,
                              stdin=subprocess.DEVNULL)


class CrictlError(AssertionError):
    def __init__(self, args, result: subprocess.CompletedProcess):
        self.result = result
        super().__init__(f"crictl {' '.join(map(str, args))} failed ({result.returncode}):\n"
                         f"{result.stderr.strip()}\n{result.stdout.strip()}")


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def destroy_all():
    for c in list(_LIVE):
        try:
            c.destroy()
        except Exception:
            pass


atexit.register(destroy_all)


# ---------------------------------------------------------------- which stock handler works

_PROBES: dict[str, str | None] = {}


def probe_handler(ctd: Containerd, handler: str, timeout: float = 60) -> str | None:
    """None when `handler` runs a pod and a busybox container that prints, else the error."""
    if handler in _PROBES:
        return _PROBES[handler]
    pod = None
    try:
        pod = ctd.run_pod(handler, name=f"probe-{handler}", timeout=timeout)
        cid = ctd.run_container(pod, ["/bin/echo", "probe ok"], name="probe")
        ctd.wait_exited(cid, timeout=timeout)
        out = ctd.logs(cid)
        _PROBES[handler] = None if "probe ok" in out else f"logs say {out!r}"
    except Exception as e:  # a CrictlError, a timeout...
        _PROBES[handler] = str(e).strip()
    finally:
        if pod is not None:
            ctd.crictl("stopp", pod.id, check=False)
            ctd.crictl("rmp", "-f", pod.id, check=False)
    return _PROBES[handler]


def stock_handler(ctd: Containerd) -> tuple[str | None, dict[str, str]]:
    """The first stock handler (STOCK_PREFERENCE) that works here, and why the ones tried
    before it failed."""
    failures = {}
    for handler in STOCK_PREFERENCE:
        if handler not in ctd.handlers:
            continue
        error = probe_handler(ctd, handler)
        if error is None:
            return handler, failures
        failures[handler] = error
    return None, failures


# ---------------------------------------------------------------- critest

# critest 1.26 pulls every image it uses (PullImage) from registry.k8s.io and gcr.io. Offline,
# CritestImages serves the one we have, busybox, from a registry on loopback, and critest's
# --registry-prefix points the pulls there. Specs that cannot pass here whatever the runtime,
# by why (regexes on the spec's full text, for --ginkgo.skip):
CRITEST_SKIPS = {
    "needs an image no test registry serves yet (e2e nginx, httpd, nonewprivs; cri-tools' "
    "test-image-* and hostnet-nginx)": [
        r"Image Manager", r"portforward", r"port mapping", r"Multiple Containers", r"HostPID", r"PodPID",
        r"ContainerPID", r"NoNewPrivs", r"primary UID belongs to some groups"],
    "busybox-static has no pgrep or ipcs applet": [r"execSync with timeout", r"HostIpc"],
    "busybox-static's sh runs ls as a built-in applet, so masking /bin/ls cannot stop it": [r"MaskedPaths"],
    "containerd runs in a mount namespace of its own: critest's mounts on the host do not reach it": [
        r"mount with 'rshared'", r"mount with 'rslave'"],
}
# The core the containerd tests run by default (~20 specs, ~25 s with runc): sandboxes,
# container life cycle, exec, attach, logs. BULKHEAD_CRITEST=full runs all but the skips.
CRITEST_CORE = [r"PodSandbox", r"basic operations on container", r"should support exec", r"should support attach",
                r"should support log"]


def critest_focus() -> list[str]:
    return [] if os.environ.get("BULKHEAD_CRITEST") == "full" else list(CRITEST_CORE)


def critest_skips() -> list[str]:
    return [pattern for patterns in CRITEST_SKIPS.values() for pattern in patterns]


class CritestImages:
    """`with CritestImages(containerd) as images:` critest's busybox, served on 127.0.0.1 under
    the path critest pulls (e2e-test-images/busybox; critest's --registry-prefix drops the tag,
    so as :latest too) and named locally as critest creates containers from it."""

    E2E_BUSYBOX = "registry.k8s.io/e2e-test-images/busybox:1.29-2"

    def __init__(self, ctd: Containerd):
        self.containerd = ctd
        self.registry = OciRegistry()

    def __enter__(self) -> "CritestImages":
        image = test_images()[BUSYBOX_IMAGE]
        for tag in ("1.29-2", "latest"):
            self.registry.put_image("e2e-test-images/busybox", tag, image)
        self.containerd.tag_image(BUSYBOX_IMAGE, self.E2E_BUSYBOX)
        return self

    @property
    def prefix(self) -> str:
        return self.registry.host

    def __exit__(self, *exc):
        self.registry.close()
