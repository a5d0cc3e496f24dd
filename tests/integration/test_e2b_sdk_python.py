"""The official `e2b` Python SDK (PyPI, pinned in tests/requirements.txt, installed in
.tools/venv), unmodified, against a real daemon's E2B front: runs tests/e2b/python with the
venv's pytest and only the E2B environment variables pointing at the daemon."""

import re

import pytest

import harness
from e2b_suites import SUITES, assert_nothing_left, output_of, run_suite, started_daemon, suite_env

VENV_PYTHON = harness.REPO_ROOT / ".tools" / "venv" / "bin" / "python"


def test_e2b_python_sdk_suite(daemon_factory):
    if not VENV_PYTHON.exists():
        pytest.skip(f"{VENV_PYTHON} is missing: run scripts/install-test-tools.sh")
    daemon = started_daemon(daemon_factory)
    r = run_suite([str(VENV_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", str(SUITES / "python")],
                  cwd=SUITES / "python", env=suite_env(daemon))
    assert r.returncode == 0, f"the E2B Python SDK suite failed:\n{output_of(r)}"
    summary = re.search(r"^(\d+) passed(.*)$", r.stdout, re.M)
    assert summary and int(summary.group(1)) > 0, output_of(r)
    assert "failed" not in summary.group(2) and "error" not in summary.group(2), output_of(r)
    assert_nothing_left(daemon)
