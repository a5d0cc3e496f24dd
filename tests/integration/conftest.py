"""Fixtures: one shared daemon for the session, a factory for tests that need their own,
sandboxes that are always deleted, and a session temp dir (short path: sockets live there)."""

import atexit
import itertools
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import harness

atexit.register(harness.destroy_all_daemons)  # last resort if pytest itself is interrupted


@pytest.fixture(scope="session")
def session_dir(request):
    path = Path(tempfile.mkdtemp(prefix="bhit-", dir="/tmp"))

    def cleanup():
        harness.destroy_all_daemons()
        late_reports = harness.new_sanitizer_reports()  # e.g. leaks found as the daemons exited
        # Keep the logs of a failed run for a look; a clean run leaves nothing behind.
        if request.session.testsfailed == 0 and not harness.sanitizer_findings:
            shutil.rmtree(path, ignore_errors=True)
        else:
            print(f"\nbulkhead integration logs kept in {path}")
        assert not late_reports, "sanitizer reports:\n" + "\n\n".join(late_reports)

    request.addfinalizer(cleanup)
    return path


@pytest.fixture(autouse=True)
def no_sanitizer_reports():
    """In a sanitizer build (scripts/sanitize.sh), a report written during a test fails it:
    from a daemon's log or from the sanitizers' own log files (CLI runs write there too)."""
    yield
    reports = harness.new_sanitizer_reports()
    for d in list(harness._LIVE_DAEMONS):
        if report := d.new_sanitizer_report():
            reports.append(f"{d.log_path}:\n{report}")
    assert not reports, "sanitizer reports:\n" + "\n\n".join(reports)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    # Where each live daemon's log stood when the test began (see below).
    item.daemon_log_sizes = {d.log_path: d.log_path.stat().st_size
                             for d in list(harness._LIVE_DAEMONS) if d.log_path.exists()}
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries what the daemons logged while it ran (CI keeps no logs)."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    sizes = getattr(item, "daemon_log_sizes", {})
    for d in list(harness._LIVE_DAEMONS):
        try:
            with open(d.log_path, "rb") as f:
                f.seek(sizes.get(d.log_path, 0))
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            continue
        if lines:
            report.sections.append((f"daemon log {d.log_path.name} (its last 60 lines during the test)",
                                    "\n".join(lines[-60:])))


_daemon_numbers = itertools.count(1)


def _new_daemon(session_dir: Path, warm_pool: int = 0) -> harness.Daemon:
    n = next(_daemon_numbers)
    return harness.Daemon(state_dir=session_dir / f"d{n}", log_path=session_dir / f"daemon-{n}.log",
                          warm_pool=warm_pool)


@pytest.fixture(scope="session")
def daemon(session_dir, request):
    d = _new_daemon(session_dir, warm_pool=2)
    request.addfinalizer(d.destroy)
    d.start()
    return d


@pytest.fixture
def daemon_factory(session_dir, request):
    """Makes daemons of the test's own (not started); each is destroyed after the test."""
    made = []

    def make(warm_pool: int = 0) -> harness.Daemon:
        d = _new_daemon(session_dir, warm_pool)
        made.append(d)
        return d

    def cleanup():
        for d in made:
            d.destroy()

    request.addfinalizer(cleanup)
    return make


@pytest.fixture
def client(daemon):
    yield daemon.client()
    # Whatever the test did, the shared daemon must have survived it.
    assert daemon.running(), f"the daemon died (exit {daemon.process.returncode}):\n{daemon.log_tail()}"


@pytest.fixture
def sandbox_factory(client, request):
    """Creates sandboxes on the session daemon; deletes the ones still there after the test."""
    made = []

    def make(**spec) -> dict:
        sandbox = client.create(**spec)
        made.append(sandbox["id"])
        return sandbox

    def cleanup():
        for sandbox_id in made:
            client.delete(f"/v1/sandboxes/{sandbox_id}")

    request.addfinalizer(cleanup)
    return make


@pytest.fixture
def sandbox(sandbox_factory) -> str:
    """The id of a fresh sandbox with default settings."""
    return sandbox_factory()["id"]


def compile_static(source: str, output: Path) -> Path:
    """Compiles C `source` statically into `output`."""
    src = output.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["cc", "-O2", "-static", "-o", str(output), str(src)], check=True, capture_output=True)
    return output


@pytest.fixture(scope="session")
def hello_binary(session_dir) -> Path:
    """A static program that prints a fixed line: runs in an image that has nothing else."""
    return compile_static('#include <stdio.h>\nint main(void) { puts("hello from a bulkhead image"); return 0; }\n',
                          session_dir / "hello")


@pytest.fixture(scope="session")
def escape_binary(session_dir) -> Path:
    source = harness.shared_dir() / "probes" / "escape.c"
    assert source.exists(), f"probe source missing: {source}"
    output = session_dir / "escape"
    subprocess.run(["cc", "-O2", "-static", "-o", str(output), str(source)], check=True, capture_output=True)
    return output


@pytest.fixture(scope="session")
def fakenet(session_dir):
    """The fake internet of fakenet.py: two namespaces, servers, logs; removed after the session."""
    import fakenet as fakenet_module
    net = fakenet_module.FakeNet(session_dir / "fakenet")
    net.start()
    yield net
    net.stop()


def new_net_daemon(session_dir: Path, fakenet) -> harness.Daemon:
    """A daemon (not started) inside fakenet's host namespace, resolving through its DNS server.
    It listens on 0.0.0.0 there so sandboxes can try to reach the API on the host's address."""
    import fakenet as fakenet_module
    d = _new_daemon(session_dir)
    d.netns = fakenet.host_ns
    d.listen_host = "0.0.0.0"
    d.extra_args = ("--dns-server", fakenet_module.DNS_SERVER)
    return d


@pytest.fixture
def net_daemon_factory(session_dir, fakenet, request):
    """Makes daemons (not started) in fakenet's host namespace, each with its own state dir."""
    made = []

    def make():
        d = new_net_daemon(session_dir, fakenet)
        made.append(d)
        return d

    request.addfinalizer(lambda: [d.destroy() for d in made])
    return make


@pytest.fixture(scope="module")
def net_daemon(session_dir, fakenet, request):
    d = new_net_daemon(session_dir, fakenet)
    request.addfinalizer(d.destroy)
    d.start()
    return d
