"""The official `e2b` Python SDK (PyPI, pinned in tests/requirements.txt), unmodified, against a
real bulkhead daemon's E2B-compatible front. tests/integration/test_e2b_sdk_python.py starts the
daemon and runs this suite with .tools/venv's pytest; the SDK finds the daemon only through
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY, as a user's agent code would; sandbox ports are
reached at the front's address by Host header (sandbox.get_host)."""

import os
import time
import uuid

import pytest
from e2b import Sandbox, SandboxState

REQUIRED = ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")

# Every sandbox this run creates carries this metadata, so list queries see only ours.
RUN_ID = uuid.uuid4().hex[:12]


def pytest_configure(config):
    missing = [name for name in REQUIRED if not os.environ.get(name)]
    if missing:
        raise pytest.UsageError(f"set {', '.join(missing)} (tests/integration/test_e2b_sdk_python.py does)")


def list_all(**kwargs) -> list:
    """Every page of Sandbox.list(**kwargs)."""
    paginator = Sandbox.list(**kwargs)
    items = []
    while paginator.has_next:
        items.extend(paginator.next_items())
    return items


def wait_until_paused(sandbox_id: str, within_s: float = 60) -> None:
    """Waits for the sandbox to be listed paused (its timeout's action), or fails."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and Sandbox.get_info(sandbox_id).state != SandboxState.PAUSED:
        time.sleep(0.5)
    assert Sandbox.get_info(sandbox_id).state == SandboxState.PAUSED


def run_metadata(**extra) -> dict:
    return {"suite": "e2b-python", "run": RUN_ID, **extra}


class SandboxFactory:
    """Creates sandboxes through the SDK and kills whatever is left of them at the end."""

    def __init__(self):
        self.made: list[str] = []

    def __call__(self, **kwargs) -> Sandbox:
        kwargs.setdefault("timeout", 300)
        kwargs["metadata"] = run_metadata(**kwargs.get("metadata", {}))
        sandbox = Sandbox.create(**kwargs)
        self.made.append(sandbox.sandbox_id)
        return sandbox

    def cleanup(self):
        for sandbox_id in self.made:
            try:
                Sandbox.kill(sandbox_id)
            except Exception:
                pass


@pytest.fixture
def new_sandbox():
    factory = SandboxFactory()
    yield factory
    factory.cleanup()


@pytest.fixture(scope="module")
def sbx():
    """One sandbox shared by a module's tests (each test uses its own paths)."""
    factory = SandboxFactory()
    sandbox = factory()
    yield sandbox
    factory.cleanup()
