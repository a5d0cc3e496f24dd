#!/usr/bin/env python3
"""Startup benchmark: bulkhead against bubblewrap, crun and runsc on the same machine, in one run.

For every system it times "start an isolated environment and run `echo hi`" from the moment the
request is made (an HTTP call, or a process spawn) until the first byte of `hi` comes back:
  * bulkhead: POST /v1/sandboxes, then POST /v1/sandboxes/{id}/exec streamed as NDJSON, timed
    until the first {"type":"stdout"} line arrives (DELETE afterwards is not timed);
  * bwrap, crun run, runsc run: spawn to the first byte on the child's stdout.
Each system runs sequentially (--runs times) and all at once (--concurrency threads released
together by a barrier). For bulkhead it also reports the memory of idle sandboxes and the
daemon's own RSS. See bench/README.md. Python 3.11 standard library only; run as root.
"""
from __future__ import annotations

import argparse
import base64
import ctypes
import dataclasses
import datetime
import hashlib
import http.client
import itertools
import json
import math
import os
import platform
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

SYSTEMS = ("bulkhead", "bulkhead-gvisor", "bulkhead-microvm", "bwrap", "crun", "runsc", "qemu-microvm")
COMMAND = ["echo", "hi"]
EXPECTED_STDOUT = b"hi\n"
RUN_TIMEOUT_S = 60.0          # one run that takes longer than this counts as failed
DAEMON_READY_TIMEOUT_S = 60.0
IDLE_SANDBOXES = 20
ERROR_SAMPLES = 5             # distinct error messages kept per row
GOALS = {
    ("bulkhead", "sequential"): "p50 < 10 ms, p99 < 30 ms",
    ("bulkhead", "concurrent"): "all answered < 1000 ms",
    ("bulkhead --runtime gvisor", "sequential"): "p50 <= 15 ms (from the pool)",
    ("bulkhead --runtime gvisor, cold", "sequential"): "no slower than runsc run",
    ("bulkhead --runtime microvm", "sequential"): "p50 <= 150 ms (from the pool, TCG)",
    ("bulkhead --runtime microvm, cold", "sequential"): "p50 <= 2 s (TCG)",
}
# gVisor sandboxes boot one at a time in a few hundred ms: their concurrent rows start fewer.
GVISOR_CONCURRENCY = 10
# What scripts/install-microvm.sh installs: the guest kernel the microvm rows boot (the
# uncompressed ELF, which QEMU starts directly through its PVH entry).
MICROVM_KERNEL = "/usr/local/lib/bulkhead/microvm/vmlinux"
# A guest under software emulation boots in seconds: its concurrent row starts fewer.
MICROVM_CONCURRENCY = 4
# Sequential runs of the microvm tier at most: each boots a guest (seconds under TCG).
MICROVM_RUNS = 20
# Idle guests whose memory is added up (QEMU and its device daemons; the host's MemAvailable).
MICROVM_IDLE = 3
# The runsc the gvisor tier drives (scripts/install-runsc.sh); the runsc row runs the same one.
PINNED_RUNSC = "/usr/local/lib/bulkhead/runsc"
HOST_SYMLINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}


class RunFailed(Exception):
    """One timed run did not produce the expected output.

    token: what cleanup needs (sandbox id, container name) when something was already created.
    """

    def __init__(self, message: str, token: Any = None) -> None:
        super().__init__(message)
        self.token = token


class Interrupted(Exception):
    """SIGTERM arrived: unwind through every finally block so nothing is left behind."""


# ----------------------------------------------------------------------------------------------
# Figures


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least p% of the samples at or below."""
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def timed_ms(call: Callable[[], Any], runs: int) -> list[float]:
    """`call` run `runs` times, one after another: each one's wall time in ms, sorted."""
    latencies = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        latencies.append((time.perf_counter() - started) * 1000)
    return sorted(latencies)


@dataclasses.dataclass
class ModeResult:
    """One row of the table: one system in one mode."""
    system: str
    mode: str                                   # "sequential" | "concurrent"
    runs: int
    latencies_ms: list[float] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    all_answered_ms: float | None = None        # concurrent mode: barrier release -> last answer
    unavailable: str | None = None              # why the system could not be measured at all

    def add_error(self, message: str) -> None:
        self.errors.append(message)

    def to_json(self) -> dict[str, Any]:
        values = sorted(self.latencies_ms)
        row: dict[str, Any] = {
            "system": self.system, "mode": self.mode, "runs": self.runs, "ok": len(values),
            "failed": len(self.errors), "unavailable": self.unavailable,
            "p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None,
            "all_answered_ms": self.all_answered_ms,
            "goal": GOALS.get((self.system, self.mode)),
            "errors": sorted(set(self.errors))[:ERROR_SAMPLES],
        }
        if values:
            row.update(p50_ms=round(percentile(values, 50), 3), p95_ms=round(percentile(values, 95), 3),
                       p99_ms=round(percentile(values, 99), 3), max_ms=round(values[-1], 3))
        if self.all_answered_ms is not None:
            row["all_answered_ms"] = round(self.all_answered_ms, 3)
        return row


# ----------------------------------------------------------------------------------------------
# The two modes. A Trial knows how to do one timed start of its system:
#   open_worker()          untimed, once per thread (e.g. open a keep-alive connection)
#   measure(worker, i)     -> Timed; raises RunFailed (with .token if something was created)
#   cleanup(worker, token) untimed (DELETE the sandbox, `crun delete -f`, ...)
#   close_worker(worker)


@dataclasses.dataclass
class Timed:
    started: float   # time.perf_counter() when the request was sent / the process spawned
    answered: float  # time.perf_counter() when the first output arrived
    token: Any       # what cleanup needs

    @property
    def latency_ms(self) -> float:
        return (self.answered - self.started) * 1000.0


class Trial:
    system = "?"

    def open_worker(self) -> Any:
        return None

    def measure(self, worker: Any, index: int) -> Timed:
        raise NotImplementedError

    def cleanup(self, worker: Any, token: Any) -> None:
        pass

    def close_worker(self, worker: Any) -> None:
        pass


def describe(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " | ")
    return text if isinstance(exc, RunFailed) else f"{type(exc).__name__}: {text}"


def measure_once(trial: Trial, worker: Any, index: int) -> tuple[Timed | None, Any, str | None]:
    """One timed start -> (timing or None, cleanup token or None, error or None)."""
    try:
        timed = trial.measure(worker, index)
        return timed, timed.token, None
    except RunFailed as exc:
        return None, exc.token, describe(exc)
    except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError) as exc:
        return None, None, describe(exc)


def run_sequential(trial: Trial, runs: int) -> ModeResult:
    result = ModeResult(trial.system, "sequential", runs)
    worker = trial.open_worker()
    try:
        for index in range(runs):
            timed, token, error = measure_once(trial, worker, index)
            if timed is not None:
                result.latencies_ms.append(timed.latency_ms)
            else:
                result.add_error(error or "?")
            if token is not None:
                trial.cleanup(worker, token)
    finally:
        trial.close_worker(worker)
    return result


def run_concurrent(trial: Trial, concurrency: int) -> ModeResult:
    """Start `concurrency` threads, let each prepare, release them together, time each start.

    Cleanup waits until every thread has answered, so teardown never overlaps a timed start.
    "All answered" runs from the barrier's release to the last first-output (or failure).
    """
    result = ModeResult(trial.system, "concurrent", concurrency)
    released_at: list[float] = []
    start_barrier = threading.Barrier(concurrency, action=lambda: released_at.append(time.perf_counter()))
    done_barrier = threading.Barrier(concurrency)
    answered_at: list[float] = []
    lock = threading.Lock()
    barrier_timeout_s = RUN_TIMEOUT_S * 3

    def one_thread(index: int) -> None:
        worker = None
        token = None
        opened = False
        try:
            try:
                worker = trial.open_worker()
                opened = True
            except (OSError, http.client.HTTPException) as exc:
                with lock:
                    result.add_error(f"could not prepare: {describe(exc)}")
            try:
                start_barrier.wait(timeout=barrier_timeout_s)
            except threading.BrokenBarrierError:
                with lock:
                    result.add_error("start barrier broken")
                done_barrier.abort()
                return
            if opened:
                timed, token, error = measure_once(trial, worker, index)
                with lock:
                    if timed is not None:
                        result.latencies_ms.append(timed.latency_ms)
                        answered_at.append(timed.answered)
                    else:
                        result.add_error(error or "?")
                        answered_at.append(time.perf_counter())
            try:
                done_barrier.wait(timeout=barrier_timeout_s)
            except threading.BrokenBarrierError:
                pass
        except BaseException:
            # Never leave the other threads waiting for this one.
            start_barrier.abort()
            done_barrier.abort()
            raise
        finally:
            if token is not None:
                trial.cleanup(worker, token)
            if opened:
                trial.close_worker(worker)

    threads = [threading.Thread(target=one_thread, args=(i,), name=f"{trial.system}-{i}")
               for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if released_at and answered_at:
        result.all_answered_ms = (max(answered_at) - released_at[0]) * 1000.0
    return result


def warm_up(trial: Trial) -> str | None:
    """One untimed start (page cache, first-use setup). Returns why it failed, or None."""
    worker = trial.open_worker()
    try:
        _, token, error = measure_once(trial, worker, -1)
        if token is not None:
            trial.cleanup(worker, token)
        return error
    finally:
        trial.close_worker(worker)


def unavailable_rows(system: str, runs: int, concurrency: int, reason: str) -> list[ModeResult]:
    return [ModeResult(system, "sequential", runs, unavailable=reason),
            ModeResult(system, "concurrent", concurrency, unavailable=reason)]


# ----------------------------------------------------------------------------------------------
# Baselines: a process whose stdout we watch.


def read_with_deadline(fd: int, deadline: float, size: int = 65536) -> bytes:
    """One read from fd, or RunFailed if nothing (not even EOF) arrives before the deadline."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        remaining_ms = int((deadline - time.perf_counter()) * 1000)
        if remaining_ms <= 0:
            raise RunFailed(f"no output within {RUN_TIMEOUT_S:.0f} s")
        if poller.poll(remaining_ms):
            return os.read(fd, size)


class ProcessTrial(Trial):
    """Spawn argv and time until the first byte on its stdout."""

    def __init__(self, system: str, argv_for: Callable[[str], list[str]],
                 cleanup_argv_for: Callable[[str], list[str]] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.system = system
        self.argv_for = argv_for
        self.cleanup_argv_for = cleanup_argv_for
        self.env = {**os.environ, **env} if env else None
        self.name_prefix = f"bench-{re.sub(r'[^A-Za-z0-9_.-]+', '-', system)}-{os.getpid()}"
        self.names = itertools.count()  # next() is atomic under the GIL

    def measure(self, worker: Any, index: int) -> Timed:
        name = f"{self.name_prefix}-{next(self.names)}"
        token = name if self.cleanup_argv_for else None
        with tempfile.TemporaryFile() as stderr_file:
            argv = self.argv_for(name)
            started = time.perf_counter()
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=stderr_file, env=self.env)
            try:
                deadline = started + RUN_TIMEOUT_S
                output = read_with_deadline(process.stdout.fileno(), deadline)
                answered = time.perf_counter()
                chunk = output
                while chunk:
                    chunk = read_with_deadline(process.stdout.fileno(), deadline)
                    output += chunk
                exit_code = process.wait(timeout=max(0.1, deadline - time.perf_counter()))
            except (RunFailed, subprocess.TimeoutExpired) as exc:
                process.kill()
                process.wait()
                raise RunFailed(describe(exc), token) from None
            finally:
                process.stdout.close()
            if output != EXPECTED_STDOUT or exit_code != 0:
                stderr_file.seek(0)
                stderr_tail = stderr_file.read()[-400:].decode(errors="replace").strip()
                raise RunFailed(f"exit {exit_code}, stdout {output[:60]!r}, stderr: {stderr_tail}", token)
        return Timed(started, answered, token)

    def cleanup(self, worker: Any, token: Any) -> None:
        if self.cleanup_argv_for is not None:
            subprocess.run(self.cleanup_argv_for(token), stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=RUN_TIMEOUT_S, check=False)


def bwrap_argv(_name: str) -> list[str]:
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr"]
    for link, target in HOST_SYMLINKS.items():
        argv += ["--symlink", target, f"/{link}"]
    return argv + ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--"] + COMMAND


def write_oci_bundle(bundle: Path) -> None:
    """A minimal OCI bundle: empty read-only rootfs + /usr bind-mounted read-only + symlinks."""
    rootfs = bundle / "rootfs"
    for directory in ("usr", "proc", "dev", "tmp"):
        (rootfs / directory).mkdir(parents=True, exist_ok=True)
    for link, target in HOST_SYMLINKS.items():
        (rootfs / link).symlink_to(target)
    capabilities = ["CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_AUDIT_WRITE"]
    config = {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": COMMAND,
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
            "capabilities": {key: capabilities for key in ("bounding", "effective", "permitted")},
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "bench",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]},
            {"destination": "/usr", "type": "bind", "source": "/usr",
             "options": ["rbind", "ro", "nosuid", "nodev"]},
        ],
        "linux": {"namespaces": [{"type": kind} for kind in ("pid", "mount", "ipc", "uts", "network")]},
    }
    (bundle / "config.json").write_text(json.dumps(config, indent=1))


# ----------------------------------------------------------------------------------------------
# crun on a hybrid cgroup host.
#
# crun 1.8 refuses to start anything when cgroup v1 and v2 are both mounted and the v2 'unified'
# hierarchy has a controller ("cgroups in hybrid mode not supported"). On such a host the crun
# figures are taken by a child of this script that first moves into a private mount namespace and
# detaches /sys/fs/cgroup/unified there (the host's mounts are untouched), so crun sees plain
# cgroup v1 — the same cgroup setup bulkhead uses on this machine.

CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2


def crun_refuses_hybrid_cgroups() -> bool:
    controllers = Path("/sys/fs/cgroup/unified/cgroup.controllers")
    try:
        return os.path.ismount("/sys/fs/cgroup/unified") and controllers.read_text().strip() != ""
    except OSError:
        return False


def enter_mount_namespace_without_unified_cgroup() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    # Private first, so the detach below can never propagate to the host's namespace.
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "mount --make-rprivate /")
    if libc.umount2(b"/sys/fs/cgroup/unified", MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "umount /sys/fs/cgroup/unified")


def crun_worker_main(runs: int, concurrency: int, bundle: str) -> int:
    """Entry of the child process described above: measures crun, prints rows as JSON."""
    enter_mount_namespace_without_unified_cgroup()
    rows = measure_baseline(crun_trial(Path(bundle)), runs, concurrency)
    json.dump([dataclasses.asdict(row) for row in rows], sys.stdout)
    return 0


def crun_trial(bundle: Path) -> ProcessTrial:
    return ProcessTrial("crun", lambda name: ["crun", "run", "--bundle", str(bundle), name],
                        lambda name: ["crun", "delete", "-f", name])


def runsc_binary() -> str:
    return PINNED_RUNSC if os.access(PINNED_RUNSC, os.X_OK) else "runsc"


def runsc_trial(bundle: Path, platform_flags: list[str], system: str = "runsc",
                env: dict[str, str] | None = None) -> ProcessTrial:
    runsc = runsc_binary()
    return ProcessTrial(
        system,
        lambda name: [runsc, "--network=none", *platform_flags, "run", "--bundle", str(bundle), name],
        lambda name: [runsc, "delete", "-force", name],
        env)


def prewarmer_sidecars(build_dir: Path, workdir: Path) -> Path | None:
    """The sidecar directory the gvisor tier gives runsc (gvisor_tier.cc, MakeSidecarDir), for
    the runsc row's second pair: bulkhead's Sentry prewarmer and runsc itself as the Sentry."""
    prewarmer = build_dir / "bulkhead-sentry-prewarmer"
    if not prewarmer.is_file():
        return None
    sidecars = workdir / "runsc-sidecars"
    sidecars.mkdir(exist_ok=True)
    shutil.copy(prewarmer, sidecars / "gvisor-sentry-prewarmer")
    (sidecars / "gvisor_sentry").symlink_to(os.path.abspath(shutil.which(runsc_binary()) or runsc_binary()))
    return sidecars


def measure_baseline(trial: Trial, runs: int, concurrency: int) -> list[ModeResult]:
    """One untimed warm-up start, then both modes."""
    error = warm_up(trial)
    if error is not None:
        return unavailable_rows(trial.system, runs, concurrency, f"warm-up run failed: {error}")
    return [run_sequential(trial, runs), run_concurrent(trial, concurrency)]


def measure_crun(runs: int, concurrency: int, workdir: Path, notes: list[str]) -> list[ModeResult]:
    bundle = workdir / "crun-bundle"
    write_oci_bundle(bundle)
    if not crun_refuses_hybrid_cgroups():
        return measure_baseline(crun_trial(bundle), runs, concurrency)
    notes.append("crun: this host mounts cgroup v1 and v2 side by side with a controller on v2, which "
                 "crun 1.8 refuses; crun ran in a private mount namespace with /sys/fs/cgroup/unified "
                 "detached (plain cgroup v1, host mounts untouched)")
    child = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--crun-worker", "--runs", str(runs),
         "--concurrency", str(concurrency), "--bundle", str(bundle)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if child.returncode != 0:
        reason = f"crun worker failed (exit {child.returncode}): {child.stderr.strip()[-400:]}"
        return unavailable_rows("crun", runs, concurrency, reason)
    return [ModeResult(**fields) for fields in json.loads(child.stdout)]


def measure_runsc(runs: int, concurrency: int, workdir: Path, build_dir: Path, notes: list[str]) -> list[ModeResult]:
    """runsc run as installed (no sidecar binaries), then, beside it, with the same Sentry
    prewarmer the gvisor tier gives it: the bulkhead rows' runsc starts are of the second kind."""
    bundle = workdir / "runsc-bundle"
    write_oci_bundle(bundle)
    failures = []
    for label, flags in (("the default platform", []), ("--platform=ptrace", ["--platform=ptrace"])):
        trial = runsc_trial(bundle, flags)
        error = warm_up(trial)
        if error is not None:
            failures.append(f"{label}: {error}")
            continue
        command = " ".join(trial.argv_for("<id>")).replace(str(bundle), "<bundle>")
        notes.append(f"runsc: ran with {label}: {command}")
        rows = [run_sequential(trial, runs), run_concurrent(trial, concurrency)]
        sidecars = prewarmer_sidecars(build_dir, workdir)
        system = "runsc + prewarmer"
        if sidecars is None:
            return rows + unavailable_rows(system, runs, concurrency, f"no bulkhead-sentry-prewarmer in {build_dir}")
        prewarmed = runsc_trial(bundle, flags, system, {"GVISOR_SIDECAR_BINARIES_DIR": str(sidecars)})
        error = warm_up(prewarmed)
        if error is not None:
            return rows + unavailable_rows(system, runs, concurrency, f"warm-up run failed: {error}")
        notes.append("runsc + prewarmer: the same runsc with GVISOR_SIDECAR_BINARIES_DIR naming bulkhead's "
                     "Sentry prewarmer (src/sentry_prewarmer), as the gvisor tier runs it")
        return rows + [run_sequential(prewarmed, runs), run_concurrent(prewarmed, concurrency)]
    return unavailable_rows("runsc", runs, concurrency, "runsc cannot run here: " + "; ".join(failures))


# ----------------------------------------------------------------------------------------------
# qemu-microvm: a raw boot of the microvm tier's guest kernel (QEMU's `microvm` machine) to an
# initramfs whose /init is a static program that prints `hi` on the serial console (raw, so
# "\n" is not turned into "\r\n") and powers the guest off.

MICROVM_INIT = r"""
#include <sys/reboot.h>
#include <termios.h>
#include <unistd.h>
int main(void) {
  struct termios t;
  if (tcgetattr(1, &t) == 0) { t.c_oflag &= ~OPOST; tcsetattr(1, TCSANOW, &t); }
  (void)!write(1, "hi\n", 3);
  reboot(RB_POWER_OFF);
  return 0;
}
"""


def write_newc(path: Path, files: list[tuple[str, int, bytes]]) -> None:
    """A cpio archive in the kernel's newc format (what an initramfs is)."""
    def pad(n: int) -> bytes:
        return b"\0" * (-n % 4)
    with open(path, "wb") as out:
        for inode, (name, mode, data) in enumerate(files + [("TRAILER!!!", 0, b"")], start=1):
            encoded = name.encode() + b"\0"
            fields = (inode, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
            out.write(b"070701" + "".join(f"{v:08x}" for v in fields).encode() + encoded
                      + pad(110 + len(encoded)) + data + pad(len(data)))


def host_tsc_khz() -> int:
    """The guest's TSC frequency hint: microvm has no HPET or PM timer to calibrate against."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            return int(float(line.split(":")[1]) * 1000)
    return 0


def qemu_microvm_trial(initramfs: Path, accel: str) -> ProcessTrial:
    # The kernel options the tier boots with (src/runtime/microvm/vmm.cc), so that the row
    # compares the same kernel boot: cryptomgr.notests saves ~250 ms under TCG.
    command_line = ("console=ttyS0 quiet loglevel=0 panic=-1 cryptomgr.notests pci=off rdinit=/init "
                    f"tsc_early_khz={host_tsc_khz()}")
    return ProcessTrial(
        "qemu-microvm",
        # The machine as the microvm tier runs it: without its RTC, PIT and PIC this kernel
        # takes twice as long to boot (3.9 s against 1.8 s here). qboot named: QEMU 10 gives
        # the machine SeaBIOS otherwise, which does not start the loaded kernel without its ROM.
        lambda name: ["qemu-system-x86_64", "-M", "microvm,x-option-roms=off", "-bios", "qboot.rom",
                      "-accel", accel, "-m", "256", "-smp", "1", "-nodefaults", "-no-user-config",
                      "-nographic", "-serial", "stdio", "-no-reboot", "-name", name,
                      "-kernel", MICROVM_KERNEL, "-initrd", str(initramfs), "-append", command_line])


def kvm_boots(initramfs: Path) -> bool:
    """A real probe boot under KVM (a /dev/kvm whose guests do not boot exists: nested PVM)."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    argv = qemu_microvm_trial(initramfs, "kvm").argv_for("probe")
    try:
        probe = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0 and probe.stdout == EXPECTED_STDOUT


def measure_qemu_microvm(runs: int, concurrency: int, workdir: Path, notes: list[str]) -> list[ModeResult]:
    system = "qemu-microvm"
    if not os.path.exists(MICROVM_KERNEL):
        return unavailable_rows(system, runs, concurrency, f"no guest kernel at {MICROVM_KERNEL} "
                                "(scripts/install-microvm.sh)")
    init = workdir / "microvm-init"
    source = workdir / "microvm-init.c"
    source.write_text(MICROVM_INIT)
    built = subprocess.run(["gcc", "-static", "-O2", "-s", "-o", str(init), str(source)], capture_output=True,
                           text=True, check=False)
    if built.returncode != 0:
        return unavailable_rows(system, runs, concurrency, "cannot build the guest's init: " + built.stderr[-300:])
    initramfs = workdir / "microvm-initramfs.cpio"
    write_newc(initramfs, [("dev", 0o40755, b""), ("init", 0o100755, init.read_bytes())])
    accel = "kvm" if kvm_boots(initramfs) else "tcg"
    trial = qemu_microvm_trial(initramfs, accel)
    error = warm_up(trial)
    if error is not None:
        return unavailable_rows(system, runs, concurrency, f"warm-up boot failed: {error}")
    notes.append(f"qemu-microvm: {tool_version(['qemu-system-x86_64', '--version'])}, -accel {accel} "
                 f"({'KVM booted a probe guest' if accel == 'kvm' else 'no KVM that boots a guest here'}), "
                 f"kernel {Path(MICROVM_KERNEL).with_name('kernel-version').read_text().strip()}")
    return [run_sequential(trial, min(runs, MICROVM_RUNS)), run_concurrent(trial, min(concurrency, MICROVM_CONCURRENCY))]


# ----------------------------------------------------------------------------------------------
# bulkhead: the daemon and its HTTP API (API.md).


TRANSPORT_ERRORS = (OSError, http.client.HTTPException)


class BulkheadApi:
    """One keep-alive HTTP/1.1 connection to the daemon (API.md).

    After a transport error the connection is closed; http.client reconnects on the next request.
    """

    def __init__(self, port: int, api_key: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=RUN_TIMEOUT_S)
        self.connection.connect()
        self.api_key = api_key

    def close(self) -> None:
        self.connection.close()

    def _send(self, method: str, path: str, body: Any, accept: str) -> http.client.HTTPResponse:
        headers = {"Authorization": f"Bearer {self.api_key}", "Accept": accept}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.connection.request(method, path, body=payload, headers=headers)
        return self.connection.getresponse()

    def call(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        try:
            response = self._send(method, path, body, "application/json")
            data = response.read()
        except TRANSPORT_ERRORS:
            self.connection.close()
            raise
        if response.status != expect:
            raise RunFailed(api_error_text(method, path, response.status, data))
        return json.loads(data) if data else None

    def create_sandbox(self, runtime: str = "native") -> str:
        return self.call("POST", "/v1/sandboxes", {"runtime": runtime}, expect=201)["id"]

    def metric(self, name: str) -> int:
        """A counter or gauge of /metrics (-1 if it is not there)."""
        text = self._send("GET", "/metrics", None, "text/plain").read().decode()
        match = re.search(rf"^{name} (\d+)$", text, re.M)
        return int(match.group(1)) if match else -1

    def wait_for_pool(self, timeout_s: float = 60.0) -> None:
        """Until the warm pool holds a ready sandbox (bulkhead_warm_pool_ready in /metrics)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.metric("bulkhead_warm_pool_ready") > 0:
                return
            time.sleep(0.01)
        raise RunFailed("the warm pool had no ready sandbox within 60 s")

    def delete_sandbox(self, sandbox_id: str) -> None:
        self.call("DELETE", f"/v1/sandboxes/{sandbox_id}", expect=204)

    def exec_until_first_stdout(self, sandbox_id: str, argv: list[str]) -> tuple[float, bytes]:
        """Exec streamed as NDJSON -> (perf_counter at the first stdout event, all stdout)."""
        try:
            return self._exec_stream(sandbox_id, argv)
        except TRANSPORT_ERRORS:
            self.connection.close()
            raise

    def _exec_stream(self, sandbox_id: str, argv: list[str]) -> tuple[float, bytes]:
        path = f"/v1/sandboxes/{sandbox_id}/exec"
        response = self._send("POST", path, {"cmd": argv}, "application/x-ndjson")
        if response.status != 200:
            raise RunFailed(api_error_text("POST", path, response.status, response.read()))
        first_stdout: float | None = None
        stdout = b""
        exit_event = None
        while line := response.readline():
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("type") == "stdout":
                if first_stdout is None:
                    first_stdout = time.perf_counter()
                stdout += event["data"].encode() if "data" in event else base64.b64decode(event["data_b64"])
            elif event.get("type") == "exit":
                exit_event = event
        response.read()  # the chunked body's end, so the connection can be reused
        if first_stdout is None:
            raise RunFailed(f"exec gave no stdout event (exit event: {exit_event})")
        if exit_event is None or exit_event.get("exit_code") != 0:
            raise RunFailed(f"exec did not exit 0: {exit_event}")
        return first_stdout, stdout

    def exec_collect(self, sandbox_id: str, argv: list[str]) -> dict[str, Any]:
        return self.call("POST", f"/v1/sandboxes/{sandbox_id}/exec", {"cmd": argv})


def api_error_text(method: str, path: str, status: int, body: bytes) -> str:
    try:
        error = json.loads(body)["error"]
        detail = f"{error.get('code')}: {error.get('message')}"
    except (ValueError, KeyError, TypeError):
        detail = body[:200].decode(errors="replace")
    return f"{method} {path} -> HTTP {status} {detail}"


class BulkheadTrial(Trial):
    """create sandbox -> first stdout line of `echo hi`; DELETE afterwards (untimed).

    With `pooled`, each sequential run first waits (untimed) until the daemon's warm pool has a
    sandbox ready, so that every timed create is one from the pool: what an agent that does not
    create dozens a second gets (a gVisor sandbox takes a few hundred ms to boot into the pool).
    """

    def __init__(self, daemon: "Daemon", system: str = "bulkhead", runtime: str = "native",
                 pooled: bool = False) -> None:
        self.daemon = daemon
        self.system = system
        self.runtime = runtime
        self.pooled = pooled

    def open_worker(self) -> BulkheadApi:
        return BulkheadApi(self.daemon.port, self.daemon.api_key)

    def close_worker(self, worker: BulkheadApi) -> None:
        worker.close()

    def measure(self, worker: BulkheadApi, index: int) -> Timed:
        if self.pooled:
            worker.wait_for_pool()
        started = time.perf_counter()
        sandbox_id = worker.create_sandbox(self.runtime)
        self.daemon.remember(sandbox_id)
        try:
            answered, stdout = worker.exec_until_first_stdout(sandbox_id, COMMAND)
        except RunFailed as exc:
            raise RunFailed(str(exc), sandbox_id) from None
        except (*TRANSPORT_ERRORS, ValueError, KeyError, TypeError) as exc:
            raise RunFailed(describe(exc), sandbox_id) from None
        if stdout != EXPECTED_STDOUT:
            raise RunFailed(f"stdout was {stdout[:60]!r}", sandbox_id)
        return Timed(started, answered, sandbox_id)

    def cleanup(self, worker: BulkheadApi, token: Any) -> None:
        try:
            worker.delete_sandbox(token)
            self.daemon.forget(token)
        except (RunFailed, *TRANSPORT_ERRORS, ValueError) as exc:
            print(f"warning: DELETE {token} failed (retried at the end): {describe(exc)}", file=sys.stderr)


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def process_status_kib(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def process_pss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def process_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(root_pid: int) -> dict[int, str]:
    """pid -> start time of every live descendant of root_pid."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(pid)
    found: dict[int, str] = {}
    stack = list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        start = process_start_time(pid)
        if start is not None:
            found[pid] = start
        stack.extend(children.get(pid, []))
    return found


def host_name(sandbox_id: str) -> str:
    """What the daemon names a sandbox's cgroups: never its id (core/sandbox_manager.cc HostName)."""
    return "sb-" + hashlib.sha256(sandbox_id.encode()).hexdigest()[:16]


def pids_in_cgroups_naming(sandbox_ids: list[str]) -> dict[str, list[int]]:
    """Processes whose /proc/<pid>/cgroup has a path containing the sandbox's host name."""
    found: dict[str, list[int]] = {sandbox_id: [] for sandbox_id in sandbox_ids}
    for pid in all_pids():
        try:
            paths = [line.split(":", 2)[2] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
        except (OSError, IndexError):
            continue
        for sandbox_id in sandbox_ids:
            if any(f"/{host_name(sandbox_id)}" in path for path in paths):
                found[sandbox_id].append(pid)
                break
    return found


def unescape_mountinfo(field_text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040 ...)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field_text)


def mounts_under(directory: str) -> list[str]:
    """Mount points at or below directory, deepest (latest) first."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = unescape_mountinfo(line.split()[4])
        if point == directory or point.startswith(directory.rstrip("/") + "/"):
            points.append(point)
    return list(reversed(points))


def cgroup_roots() -> list[Path]:
    """/sys/fs/cgroup itself (v2) and each v1 hierarchy mounted below it."""
    root = Path("/sys/fs/cgroup")
    try:
        return [root, *(entry for entry in root.iterdir() if entry.is_dir())]
    except OSError:
        return [root]


def sandbox_cgroup_dirs(sandbox_ids: list[str]) -> set[str]:
    """Groups of a sandbox, one level below a hierarchy's root (bulkhead-<tag>/<host name>)."""
    found = set()
    for root in cgroup_roots():
        for sandbox_id in sandbox_ids:
            found.update(str(match) for match in root.glob(f"*/{host_name(sandbox_id)}"))
    return found


def daemon_cgroup_parent_names(state_dir: str) -> list[str]:
    """The daemon names its parent groups bulkhead-<FNV-1a 32 of the canonical state dir>
    (core/sandbox_manager.cc), so that daemons with different state dirs stay apart, and the
    gvisor and microvm tiers' that, then -gvisor and -microvm."""
    digest = 2166136261
    for byte in os.path.realpath(state_dir).encode():
        digest = ((digest ^ byte) * 16777619) & 0xFFFFFFFF
    return [f"bulkhead-{digest:08x}", f"bulkhead-{digest:08x}-gvisor", f"bulkhead-{digest:08x}-microvm"]


def existing_cgroup_dirs(names: list[str]) -> set[str]:
    return {str(root / name) for root in cgroup_roots() for name in names if (root / name).is_dir()}


def remove_cgroup_tree(top: str) -> bool:
    """rmdir bottom-up; the kernel refuses while a group still has processes, so this is safe."""
    for directory, _, _ in os.walk(top, topdown=False):
        try:
            os.rmdir(directory)
        except OSError:
            return False
    return True


class Daemon:
    """`bulkhead serve` in a fresh state dir on a free loopback port, torn down completely."""

    def __init__(self, build_dir: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.binary = build_dir / "bulkhead"
        self.extra_args = list(extra_args)  # more `bulkhead serve` flags
        self.state_dir = ""
        self.log_path = ""
        self.port = 0
        self.api_key = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.live_sandboxes: set[str] = set()
        self.all_sandboxes: list[str] = []
        self.lock = threading.Lock()
        self.cleanup_report: list[str] = []
        self.daemon_misbehaved = False  # then the log's tail goes into the report
        # The daemon's parent cgroups: learnt from live sandboxes, or found by the daemon's naming
        # rule and absent before it started. Another daemon's groups on this host are left alone.
        self.cgroup_parents: set[str] = set()
        self.cgroup_parent_names: list[str] = []
        self.cgroup_parents_before: set[str] = set()

    def remember(self, sandbox_id: str) -> None:
        with self.lock:
            self.live_sandboxes.add(sandbox_id)
            self.all_sandboxes.append(sandbox_id)

    def forget(self, sandbox_id: str) -> None:
        with self.lock:
            self.live_sandboxes.discard(sandbox_id)

    def start(self) -> None:
        if not os.access(self.binary, os.X_OK):
            raise RunFailed(f"{self.binary} not found or not executable (build it, or pass --build)")
        self.state_dir = tempfile.mkdtemp(prefix="bulkhead-bench-")
        self.cgroup_parent_names = daemon_cgroup_parent_names(self.state_dir)
        self.cgroup_parents_before = existing_cgroup_dirs(self.cgroup_parent_names)
        log_fd, self.log_path = tempfile.mkstemp(prefix="bulkhead-bench-", suffix=".log")
        self.port = free_loopback_port()
        environment = {key: value for key, value in os.environ.items() if not key.startswith("BULKHEAD_")}
        with os.fdopen(log_fd, "wb") as log:
            self.process = subprocess.Popen(
                [str(self.binary), "serve", "--state-dir", self.state_dir,
                 "--listen", f"127.0.0.1:{self.port}", *self.extra_args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=environment)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + DAEMON_READY_TIMEOUT_S
        key_path = Path(self.state_dir) / "api-key"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RunFailed(f"daemon exited with {self.process.returncode} before /healthz answered: "
                                f"{self.log_tail()}")
            if self._healthy() and key_path.exists():
                key = key_path.read_text().strip()
                if key:
                    self.api_key = key
                    return
            time.sleep(0.05)
        raise RunFailed(f"daemon not healthy within {DAEMON_READY_TIMEOUT_S:.0f} s: {self.log_tail()}")

    def _healthy(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            response.read()
            return response.status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def log_tail(self, size: int = 1500) -> str:
        try:
            return Path(self.log_path).read_bytes()[-size:].decode(errors="replace").strip()
        except OSError:
            return "(no log)"

    def rss_bytes(self) -> int | None:
        kib = process_status_kib(self.process.pid, "VmRSS") if self.process else None
        return None if kib is None else kib * 1024

    def stop(self) -> None:
        """DELETE what is left, SIGTERM, sweep leftovers, unmount the state dir, remove it."""
        if self.process is None:
            return
        tree: dict[int, str] = {}
        if self.process.poll() is None:
            self._delete_remaining_sandboxes()
            tree = descendants(self.process.pid)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.daemon_misbehaved = True
                self.cleanup_report.append("daemon ignored SIGTERM for 20 s: killed")
                self.process.kill()
                self.process.wait()
        if self.process.returncode not in (0, -signal.SIGTERM):
            self.daemon_misbehaved = True
            self.cleanup_report.append(f"daemon exited with {self.process.returncode}")
        self._kill_leftovers(tree)
        self._remove_leftover_cgroups()
        self._unmount_and_remove_state_dir()
        if self.log_path:
            tail = self.log_tail(600)
            if self.daemon_misbehaved and tail:
                self.cleanup_report.append(f"daemon log tail: {tail}")
            os.unlink(self.log_path)
            self.log_path = ""
        self.process = None

    def _delete_remaining_sandboxes(self) -> None:
        try:
            api = BulkheadApi(self.port, self.api_key)
        except OSError as exc:
            self.cleanup_report.append(f"could not connect for the final sweep: {exc}")
            return
        try:
            listed = {sandbox["id"] for sandbox in api.call("GET", "/v1/sandboxes").get("sandboxes", [])}
        except (RunFailed, OSError, http.client.HTTPException, ValueError, AttributeError) as exc:
            self.cleanup_report.append(f"GET /v1/sandboxes failed: {describe(exc)}")
            listed = set()
        try:
            for sandbox_id in sorted(listed | self.live_sandboxes):
                try:
                    api.delete_sandbox(sandbox_id)
                    self.forget(sandbox_id)
                except (RunFailed, OSError, http.client.HTTPException) as exc:
                    self.cleanup_report.append(f"final DELETE {sandbox_id} failed: {describe(exc)}")
                    api.close()
                    api = BulkheadApi(self.port, self.api_key)
        finally:
            api.close()

    def _kill_leftovers(self, tree: dict[int, str]) -> None:
        """Processes the daemon started (sandbox inits, warm pool) must not outlive this run."""
        leftovers = {pid for pid, start in tree.items() if process_start_time(pid) == start}
        for pids in pids_in_cgroups_naming(self.all_sandboxes).values():
            leftovers.update(pids)
        leftovers.discard(os.getpid())
        # A zombie has ended: it waits for its parent (the host's init, for runsc's Sentry and
        # gofer of a sandbox torn down as the daemon stopped) to collect its exit status.
        leftovers = {pid for pid in leftovers if not is_zombie(pid)}
        if not leftovers:
            return
        self.daemon_misbehaved = True
        self.cleanup_report.append(f"{len(leftovers)} process(es) of the daemon outlived it: "
                                   f"{sorted(leftovers)[:20]} (killed)")
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def learn_cgroup_parents(self, live_sandbox_ids: list[str]) -> None:
        self.cgroup_parents.update(os.path.dirname(path) for path in sandbox_cgroup_dirs(live_sandbox_ids))

    def _remove_leftover_cgroups(self) -> None:
        leftovers = sandbox_cgroup_dirs(self.all_sandboxes)
        self.cgroup_parents.update(os.path.dirname(path) for path in leftovers)
        leftovers.update(parent for parent in self.cgroup_parents if os.path.isdir(parent))
        # A group with our daemon's names that did not exist before it started is its parent group.
        leftovers.update(existing_cgroup_dirs(self.cgroup_parent_names) - self.cgroup_parents_before)
        if not leftovers:
            return
        kept = [directory for directory in sorted(leftovers, reverse=True) if not remove_cgroup_tree(directory)]
        self.cleanup_report.append(f"removed {len(leftovers)} cgroup dir(s) the daemon left: {sorted(leftovers)}"
                                   + (f"; could not remove {kept}" if kept else ""))

    def _unmount_and_remove_state_dir(self) -> None:
        if not self.state_dir:
            return
        for _ in range(10):  # stacked mounts need more than one pass
            points = mounts_under(self.state_dir)
            if not points:
                break
            for point in points:
                done = subprocess.run(["umount", point], capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        self._detach_loop_devices()
        remaining = mounts_under(self.state_dir)
        if remaining:
            # Never rm -r through a mount (it could be a bind of a host directory).
            self.daemon_misbehaved = True
            self.cleanup_report.append(f"mounts left under {self.state_dir}, dir kept: {remaining}")
            return
        shutil.rmtree(self.state_dir, ignore_errors=True)
        if os.path.exists(self.state_dir):
            self.cleanup_report.append(f"could not remove {self.state_dir}")
        self.state_dir = ""

    def _detach_loop_devices(self) -> None:
        for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
            try:
                path = backing.read_text().strip().removesuffix(" (deleted)")
            except OSError:
                continue
            if path.startswith(self.state_dir.rstrip("/") + "/"):
                device = f"/dev/{backing.parent.parent.name}"
                subprocess.run(["losetup", "-d", device], capture_output=True, check=False)


def delete_all(daemon: "Daemon", api: "BulkheadApi", sandbox_ids: list[str]) -> None:
    """Deletes what a memory measurement created; a failure is retried at the daemon's stop."""
    for sandbox_id in sandbox_ids:
        try:
            api.delete_sandbox(sandbox_id)
            daemon.forget(sandbox_id)
        except (RunFailed, *TRANSPORT_ERRORS) as exc:
            print(f"warning: DELETE {sandbox_id} failed (retried at the end): {describe(exc)}", file=sys.stderr)


def measure_idle_memory(daemon: Daemon, memory: dict[str, Any]) -> None:
    """Create IDLE_SANDBOXES sandboxes, run `true` in each, then add up their memory two ways:
    the API's usage.memory_bytes (the sandbox cgroup's charge; the headline figure) and, from
    /proc, VmRSS (and Pss) of the processes whose cgroup path names the sandbox id."""
    api = BulkheadApi(daemon.port, daemon.api_key)
    created: list[str] = []
    try:
        for _ in range(IDLE_SANDBOXES):
            sandbox_id = api.create_sandbox()
            daemon.remember(sandbox_id)
            created.append(sandbox_id)
            outcome = api.exec_collect(sandbox_id, ["true"])
            if outcome.get("exit_code") != 0:
                raise RunFailed(f"`true` in {sandbox_id} gave {outcome}")
        api_bytes = 0
        for sandbox_id in created:
            usage = api.call("GET", f"/v1/sandboxes/{sandbox_id}").get("usage") or {}
            api_bytes += int(usage.get("memory_bytes") or 0)
        memory["per_sandbox_api_memory_bytes"] = api_bytes / IDLE_SANDBOXES
        daemon.learn_cgroup_parents(created)
        by_sandbox = pids_in_cgroups_naming(created)
        pids = [pid for pid_list in by_sandbox.values() for pid in pid_list]
        memory["proc_processes_found"] = len(pids)
        memory["proc_sandboxes_with_processes"] = sum(1 for pid_list in by_sandbox.values() if pid_list)
        if pids:
            memory["per_sandbox_proc_vmrss_bytes"] = \
                sum(process_status_kib(pid, "VmRSS") or 0 for pid in pids) * 1024 / IDLE_SANDBOXES
            memory["per_sandbox_proc_pss_bytes"] = \
                sum(process_pss_kib(pid) or 0 for pid in pids) * 1024 / IDLE_SANDBOXES
        memory["daemon_rss_bytes_with_idle_sandboxes"] = daemon.rss_bytes()
    finally:
        delete_all(daemon, api, created)
        api.close()


def measure_bulkhead_gvisor(build_dir: Path, runs: int, concurrency: int, notes: list[str]) -> list[ModeResult]:
    """The gvisor tier: from its warm pool, then cold (a daemon without pools)."""
    rows: list[ModeResult] = []
    concurrency = min(concurrency, GVISOR_CONCURRENCY)
    for label, pool_args, pooled in (("bulkhead --runtime gvisor", ("--warm-pool", "0", "--warm-pool", "gvisor=2"), True),
                                     ("bulkhead --runtime gvisor, cold", ("--warm-pool", "0"), False)):
        daemon = Daemon(build_dir, pool_args)
        try:
            daemon.start()
            trial = BulkheadTrial(daemon, label, "gvisor", pooled)
            error = warm_up(trial)
            if error is not None:
                raise RunFailed(f"warm-up run failed: {error}")
            rows += [run_sequential(trial, runs), run_concurrent(trial, concurrency)]
        except (RunFailed, *TRANSPORT_ERRORS) as exc:
            rows += unavailable_rows(label, runs, concurrency, describe(exc))
        finally:
            daemon.stop()
            notes.extend(f"{label} cleanup: {line}" for line in daemon.cleanup_report)
    notes.append(f"bulkhead --runtime gvisor: runsc {tool_version([runsc_binary(), '--version'])}; each sequential "
                 "run from the pool waits (untimed) until the pool has a sandbox ready; concurrent rows start "
                 f"{concurrency} at once (the pool holds 2: the rest boot cold)")
    return rows


def wait_for_microvm_template(api: "BulkheadApi") -> str:
    """Waits (untimed) until the daemon saved the default guest shape's template; its state."""
    templates = ""
    for _ in range(600):
        templates = api.call("GET", "/healthz")["runtimes"]["microvm"].get("templates", "")
        if ": ready" in templates or "failed" in templates:
            return templates
        time.sleep(0.2)
    raise RunFailed(f"no template was saved: {templates}")


def mem_available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def microvm_idle_memory(daemon: "Daemon", api: "BulkheadApi") -> str:
    """MICROVM_IDLE idle guests of the default size: per guest, the RSS of QEMU and its device
    daemons (the processes in its cgroups), the sandbox's cgroup charge (the API's usage, which
    also counts a restored copy's memfd) and the drop of the host's MemAvailable."""
    created: list[str] = []
    available_before = mem_available_bytes()
    try:
        for _ in range(MICROVM_IDLE):
            sandbox_id = api.create_sandbox("microvm")
            daemon.remember(sandbox_id)
            created.append(sandbox_id)
            if api.exec_collect(sandbox_id, ["true"]).get("exit_code") != 0:
                raise RunFailed(f"`true` in {sandbox_id} failed")
        time.sleep(2)  # settle
        dropped = available_before - mem_available_bytes()
        pids = [pid for found in pids_in_cgroups_naming(created).values() for pid in found]
        rss = sum(process_status_kib(pid, "VmRSS") or 0 for pid in pids) * 1024
        charged = sum(int((api.call("GET", f"/v1/sandboxes/{sandbox_id}").get("usage") or {}).get("memory_bytes") or 0)
                      for sandbox_id in created)
        mib = lambda total: f"{total / MICROVM_IDLE / (1 << 20):.0f} MiB"  # noqa: E731
        return (f"memory per idle 1 GiB guest ({MICROVM_IDLE} guests): RSS of QEMU and its daemons {mib(rss)}, "
                f"cgroup charge {mib(charged)}, host MemAvailable drop {mib(dropped)}")
    finally:
        delete_all(daemon, api, created)


def measure_bulkhead_microvm(build_dir: Path, runs: int, concurrency: int, notes: list[str]) -> list[ModeResult]:
    """The microvm tier: from its warm pool (restored copies of the template, handed out), then
    without a pool: a guest boots for each create (cold, with --no-microvm-templates), or each
    create restores a copy of its shape's saved template."""
    runs, concurrency = min(runs, MICROVM_RUNS), min(concurrency, MICROVM_CONCURRENCY)
    rows: list[ModeResult] = []
    for label, flags, pooled in (
            ("bulkhead --runtime microvm", ("--warm-pool", "microvm=1"), True),
            ("bulkhead --runtime microvm, cold", ("--no-microvm-templates",), False),
            ("bulkhead --runtime microvm, from a template", (), False)):
        daemon = Daemon(build_dir, ("--warm-pool", "0", *flags))
        try:
            daemon.start()
            api = BulkheadApi(daemon.port, daemon.api_key)
            try:
                details = api.call("GET", "/healthz")["runtimes"].get("microvm", {})
                if not details.get("available"):
                    raise RunFailed(f"no microvm tier: {details.get('reason')}")
                trial = BulkheadTrial(daemon, label, "microvm", pooled)
                error = warm_up(trial)  # (its create builds the template)
                if error is not None:
                    raise RunFailed(f"warm-up run failed: {error}")
                templates = "off" if "--no-microvm-templates" in flags else wait_for_microvm_template(api)
                rows += [run_sequential(trial, runs), run_concurrent(trial, concurrency)]
                if not pooled:
                    try:
                        notes.append(f"{label}: {microvm_idle_memory(daemon, api)}")
                    except (RunFailed, *TRANSPORT_ERRORS, KeyError, ValueError) as exc:
                        notes.append(f"{label}: idle memory not measured: {describe(exc)}")
            finally:
                api.close()
            notes.append(f"{label}: {details.get('qemu_version')}, guest kernel {details.get('guest_kernel')}, "
                         f"accelerator {details.get('accelerator')}, templates {templates}; {runs} sequential "
                         f"runs, {concurrency} concurrent" + ("; each sequential run from the pool waits (untimed) "
                         "until the pool has a guest ready; the pool holds 1: the rest of a concurrent row "
                         "restore from the template" if pooled else ""))
        except (RunFailed, *TRANSPORT_ERRORS, KeyError, ValueError) as exc:
            rows += unavailable_rows(label, runs, concurrency, describe(exc))
        finally:
            daemon.stop()
            notes.extend(f"{label} cleanup: {line}" for line in daemon.cleanup_report)
    return rows


def measure_bulkhead(build_dir: Path, runs: int, concurrency: int,
                     notes: list[str]) -> tuple[list[ModeResult], dict[str, Any]]:
    daemon = Daemon(build_dir)
    memory: dict[str, Any] = {"idle_sandboxes": IDLE_SANDBOXES,
                              "figure_used": "per_sandbox_api_memory_bytes (GET /v1/sandboxes/{id} usage)"}
    try:
        daemon.start()
        memory["daemon_rss_bytes_before"] = daemon.rss_bytes()
        trial = BulkheadTrial(daemon)
        error = warm_up(trial)
        if error is not None:
            raise RunFailed(f"warm-up run failed: {error}")
        rows = [run_sequential(trial, runs), run_concurrent(trial, concurrency)]
        try:
            measure_idle_memory(daemon, memory)
        except (RunFailed, *TRANSPORT_ERRORS, ValueError, KeyError, TypeError) as exc:
            memory["error"] = describe(exc)
        memory["daemon_rss_bytes_after"] = daemon.rss_bytes()
    except (RunFailed, *TRANSPORT_ERRORS) as exc:
        rows = unavailable_rows("bulkhead", runs, concurrency, describe(exc))
        memory["error"] = "bulkhead could not be measured (see above)"
    finally:
        daemon.stop()
        notes.extend(f"bulkhead cleanup: {line}" for line in daemon.cleanup_report)
    return rows, memory


# ----------------------------------------------------------------------------------------------
# Output


def tool_version(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        return (done.stdout or done.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "not installed"


def format_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_mib(value: float | None) -> str:
    return "-" if value is None else f"{value / (1024 * 1024):.2f} MiB"


def render_table(rows: list[dict[str, Any]]) -> str:
    header = ["system", "mode", "ok/runs", "p50", "p95", "p99", "max", "all answered in (ms)", "goal"]
    lines = [header]
    for row in rows:
        mode = f"sequential x{row['runs']}" if row["mode"] == "sequential" else f"{row['runs']} at once"
        if row["unavailable"]:
            lines.append([row["system"], mode, f"0/{row['runs']}", "-", "-", "-", "-", "-",
                          row["goal"] or ""])
            continue
        lines.append([row["system"], mode, f"{row['ok']}/{row['runs']}", format_ms(row["p50_ms"]),
                      format_ms(row["p95_ms"]), format_ms(row["p99_ms"]), format_ms(row["max_ms"]),
                      format_ms(row["all_answered_ms"]) if row["mode"] == "concurrent" else "",
                      row["goal"] or ""])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = []
    for number, line in enumerate(lines):
        text.append("  ".join(cell.ljust(widths[i]) if i < 2 or i == len(header) - 1 else cell.rjust(widths[i])
                              for i, cell in enumerate(line)).rstrip())
        if number == 0:
            text.append("-" * len(text[0]))
    text.append("(latencies in ms: request/spawn -> first output of `echo hi`; nearest-rank percentiles)")
    reported = set()
    for row in rows:
        if row["unavailable"] and (row["system"], row["unavailable"]) not in reported:
            reported.add((row["system"], row["unavailable"]))
            text.append(f"{row['system']}: not measured: {row['unavailable']}")
        elif row["errors"]:
            text.append(f"{row['system']} {row['mode']}: {row['failed']} failed, e.g. {row['errors'][0]}")
    return "\n".join(text)


def render_memory(memory: dict[str, Any]) -> str:
    lines = [f"bulkhead memory ({IDLE_SANDBOXES} idle sandboxes, each ran `true`):"]
    if "error" in memory:
        lines.append(f"  not measured: {memory['error']}")
    if "per_sandbox_api_memory_bytes" in memory:
        lines.append("  per sandbox, from the API (usage.memory_bytes, the sandbox cgroup; the figure used): "
                     + format_mib(memory["per_sandbox_api_memory_bytes"]))
    if memory.get("proc_processes_found"):
        lines.append("  per sandbox, from /proc (VmRSS of processes whose cgroup path names the sandbox): "
                     f"{format_mib(memory['per_sandbox_proc_vmrss_bytes'])}, Pss "
                     f"{format_mib(memory['per_sandbox_proc_pss_bytes'])} "
                     f"({memory['proc_processes_found']} processes in "
                     f"{memory['proc_sandboxes_with_processes']} sandboxes)")
    elif "proc_processes_found" in memory:
        lines.append("  per sandbox, from /proc: no process has a cgroup path naming a sandbox id")
    if memory.get("daemon_rss_bytes_before") is None:
        return "\n".join(lines)
    lines.append("  daemon VmRSS: before " + format_mib(memory.get("daemon_rss_bytes_before"))
                 + f", with {IDLE_SANDBOXES} idle sandboxes "
                 + format_mib(memory.get("daemon_rss_bytes_with_idle_sandboxes"))
                 + ", after " + format_mib(memory.get("daemon_rss_bytes_after")))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100, help="sequential runs per system (default 100)")
    parser.add_argument("--concurrency", type=int, default=100, help="starts released together (default 100)")
    parser.add_argument("--only", default=",".join(SYSTEMS),
                        help="comma-separated subset of " + ",".join(SYSTEMS))
    parser.add_argument("--build", default="./build", help="build dir holding `bulkhead` (default ./build)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: --runs 10 --concurrency 10 (the microvm rows: 3 and 2)")
    parser.add_argument("--crun-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bundle", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        global MICROVM_RUNS, MICROVM_CONCURRENCY
        args.runs, args.concurrency = 10, 10
        # (a guest booted under TCG takes seconds: those rows were half of the smoke run's time)
        MICROVM_RUNS, MICROVM_CONCURRENCY = 3, 2
    args.systems = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in args.systems if name not in SYSTEMS]
    if unknown or not args.systems:
        parser.error(f"--only takes names from {','.join(SYSTEMS)}; got {args.only!r}")
    if args.runs < 1 or args.concurrency < 1:
        parser.error("--runs and --concurrency must be at least 1")
    return args


def raise_interrupted(_signum: int, _frame: Any) -> None:
    raise Interrupted("SIGTERM")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.crun_worker:
        return crun_worker_main(args.runs, args.concurrency, args.bundle)
    if os.geteuid() != 0:
        print("startup.py must run as root (namespaces, mounts, cgroups).", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, raise_interrupted)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 100 children x pipes, 100 sockets

    started_at = datetime.datetime.now(datetime.timezone.utc)
    load_at_start = os.getloadavg()[0]  # other work on the machine skews every figure
    notes: list[str] = []
    rows: list[ModeResult] = []
    memory: dict[str, Any] = {}
    workdir = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        for system in SYSTEMS:
            if system not in args.systems:
                continue
            print(f"measuring {system} ...", file=sys.stderr, flush=True)
            if system == "bulkhead":
                system_rows, memory = measure_bulkhead(Path(args.build), args.runs, args.concurrency, notes)
            elif system == "bulkhead-gvisor":
                system_rows = measure_bulkhead_gvisor(Path(args.build), args.runs, args.concurrency, notes)
            elif system == "bulkhead-microvm":
                system_rows = measure_bulkhead_microvm(Path(args.build), args.runs, args.concurrency, notes)
            elif system == "qemu-microvm":
                system_rows = measure_qemu_microvm(args.runs, args.concurrency, workdir, notes)
            elif shutil.which(system) is None:
                system_rows = unavailable_rows(system, args.runs, args.concurrency, f"{system} is not installed")
            elif system == "bwrap":
                system_rows = measure_baseline(ProcessTrial("bwrap", bwrap_argv), args.runs, args.concurrency)
            elif system == "crun":
                system_rows = measure_crun(args.runs, args.concurrency, workdir, notes)
            else:
                system_rows = measure_runsc(args.runs, args.concurrency, workdir, Path(args.build), notes)
            rows.extend(system_rows)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    row_data = [row.to_json() for row in rows]
    report = {
        "benchmark": "startup",
        "started_at": started_at.isoformat(timespec="seconds"),
        "host": {"kernel": platform.release(), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "loadavg_1min_at_start": load_at_start, "loadavg_1min_at_end": os.getloadavg()[0]},
        "versions": {
            "bwrap": tool_version(["bwrap", "--version"]), "crun": tool_version(["crun", "--version"]),
            "runsc": tool_version([runsc_binary(), "--version"]),
        },
        "options": {"runs": args.runs, "concurrency": args.concurrency, "only": args.systems,
                    "build": args.build},
        "command": COMMAND,
        "rows": row_data,
        "bulkhead_memory": memory,
        "notes": notes,
    }
    print(f"startup benchmark, {started_at:%Y-%m-%d %H:%M} UTC, kernel {platform.release()}, "
          f"{os.cpu_count()} cpus, load average {load_at_start:.1f} at start and "
          f"{report['host']['loadavg_1min_at_end']:.1f} at end; command: {' '.join(COMMAND)}")
    print(render_table(row_data))
    if memory:
        print()
        print(render_memory(memory))
    for note in notes:
        print(f"note: {note}")

    results_dir = Path(__file__).resolve().parent / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    results_path = results_dir / f"startup-{started_at:%Y-%m-%d-%H%M%S}.json"
    results_path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"results: {results_path}")

    # Timing goals are only printed. The exit status says whether bulkhead worked at all.
    bulkhead_rows = [row for row in row_data if row["system"].startswith("bulkhead")]
    return 1 if any(row["unavailable"] or row["failed"] for row in bulkhead_rows) else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (KeyboardInterrupt, Interrupted):
        print("interrupted", file=sys.stderr)
        sys.exit(130)
