"""Whether the test tools from package registries are installed (scripts/install-test-tools.sh):
the PyPI tools in .tools/venv and each Node project's node_modules. A registry the install
could not reach is recorded in .tools/unreachable; the tests needing what it would have
installed skip with that reason instead of failing the whole run for a network outage."""

from pathlib import Path

import pytest

from harness import REPO_ROOT

TOOLS = REPO_ROOT / ".tools"
VENV_BIN = TOOLS / "venv" / "bin"


def _unreachable(what: str) -> str:
    """The install script's line for `what` ("pypi" or "npm <project>"), or ""."""
    try:
        lines = (TOOLS / "unreachable").read_text().splitlines()
    except FileNotFoundError:
        return ""
    return next((line for line in lines if line.startswith(what + ":")), "")


def require_pypi_tools() -> Path:
    """Skips the calling test unless tests/requirements.txt is installed in .tools/venv (the
    install stamps the venv with the requirements it installed); returns the venv's bin dir."""
    stamp = TOOLS / "venv" / ".requirements"
    wanted = (REPO_ROOT / "tests" / "requirements.txt").read_bytes()
    if not stamp.exists() or stamp.read_bytes() != wanted:
        pytest.skip(_unreachable("pypi") or "the PyPI test tools are not installed: run scripts/install-test-tools.sh")
    return VENV_BIN


def require_node_project(project: Path) -> None:
    """Skips the calling test when the install could not reach the npm registry for `project`;
    a project whose install was not tried is the test's own business (some run `npm ci`)."""
    reason = _unreachable(f"npm {project.relative_to(REPO_ROOT)}")
    if reason:
        pytest.skip(reason)
