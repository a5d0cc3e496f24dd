"""The examples in examples/ run for real against a daemon and leave nothing behind."""

import os
import subprocess

import harness
import tooling

EXAMPLES = harness.REPO_ROOT / "examples"


def example_env(daemon) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env.update(BULKHEAD_URL=f"http://127.0.0.1:{daemon.port}", BULKHEAD_API_KEY=daemon.key)
    return env


def check_agent_loop_output(run: subprocess.CompletedProcess, client) -> None:
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "[original] tests: exit 1" in out, out
    assert "[patched] tests: exit 1" in out, out
    # Three forks tried; exactly the one with text.split() passes, and it is the one kept.
    assert out.count("[fork ") == 3, out
    assert "text.split()] tests: exit 0, OK" in out, out
    assert "keeping " in out and "(fix: text.split())" in out, out
    assert "for w in text.split()]" in out, out
    assert client.list("?metadata.example=agent-loop") == [], "the example left sandboxes behind"


def test_python_agent_loop(daemon, client):
    run = subprocess.run(["/usr/bin/python3", str(EXAMPLES / "python" / "agent_loop.py")],
                         env=example_env(daemon), capture_output=True, text=True, timeout=300)
    check_agent_loop_output(run, client)


def test_typescript_agent_loop(daemon, client):
    sdk = harness.REPO_ROOT / "sdk" / "typescript"
    tooling.require_node_project(sdk)
    assert (sdk / "node_modules").is_dir(), "SDK build tools missing: run scripts/install-test-tools.sh"
    build = subprocess.run(["npm", "run", "build"], cwd=sdk, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    # Compiling type-checks the example against the SDK's published declarations.
    compile_ = subprocess.run([str(sdk / "node_modules" / ".bin" / "tsc"), "-p", str(EXAMPLES / "typescript")],
                              capture_output=True, text=True, timeout=300)
    assert compile_.returncode == 0, compile_.stdout + compile_.stderr
    run = subprocess.run(["node", str(EXAMPLES / "typescript" / "agent_loop.js")],
                         env=example_env(daemon), capture_output=True, text=True, timeout=300)
    check_agent_loop_output(run, client)
