"""Shared by test_e2b_sdk_python.py and test_e2b_sdk_js.py: a daemon of the test's own, the
environment an E2B user would set (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY), running a suite
as a subprocess, and the checks after it."""

import os
import re
import subprocess

import harness

SUITES = harness.REPO_ROOT / "tests" / "e2b"


def suite_env(daemon) -> dict:
    """This environment without E2B_* / BULKHEAD_* of the caller's, pointing at `daemon`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "BULKHEAD_"))}
    url = daemon.e2b_url
    env.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=daemon.e2b_key)
    return env


def run_suite(argv, cwd, env, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def output_of(r: subprocess.CompletedProcess, limit: int = 40000) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-limit:]}\n--- stderr\n{r.stderr[-limit:]}"


def started_daemon(daemon_factory) -> harness.Daemon:
    d = daemon_factory(warm_pool=2)
    d.start()
    assert re.fullmatch(r"e2b_[0-9a-f]{40}", d.e2b_key), d.e2b_key
    assert (d.state_dir / "e2b-api-key").stat().st_mode & 0o777 == 0o600
    return d


def leftovers(daemon) -> str:
    """After a suite, passed or not: "" when the daemon survived, no sandbox is left (the suites
    kill all of theirs) and nothing of a sandbox lingers on the host; else what is wrong."""
    if not daemon.running():
        return f"the daemon died:\n{daemon.log_tail()}"
    problems = []
    left = daemon.client().list()
    if left:
        problems.append(f"sandboxes left behind: {left}")
    found = harness.leaks(daemon)
    if found:
        problems.append(f"left on the host: {found}")
    return "\n".join(problems)
