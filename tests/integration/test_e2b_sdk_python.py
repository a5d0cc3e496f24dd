"""The official `e2b` Python SDK (PyPI, pinned in tests/requirements.txt, installed in
.tools/venv), unmodified, against a real daemon's E2B front: runs tests/e2b/python with the
venv's pytest and only the E2B environment variables pointing at the daemon."""

import re

import tooling
from e2b_suites import SUITES, leftovers, output_of, run_suite, started_daemon, suite_env


def test_e2b_python_sdk_suite(daemon_factory):
    venv_python = tooling.require_pypi_tools() / "python"
    daemon = started_daemon(daemon_factory)
    r = run_suite([str(venv_python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", str(SUITES / "python")],
                  cwd=SUITES / "python", env=suite_env(daemon))
    problems = leftovers(daemon)  # checked whether the suite passed or not
    assert r.returncode == 0, f"{problems}\nthe E2B Python SDK suite failed:\n{output_of(r)}"
    summary = re.search(r"^(\d+) passed(.*)$", r.stdout, re.M)
    assert summary and int(summary.group(1)) > 0, output_of(r)
    # None failed, errored or was skipped (the installed SDK has everything the suite uses).
    assert not re.search(r"failed|error|skipped", summary.group(2)), output_of(r)
    assert not problems, problems
