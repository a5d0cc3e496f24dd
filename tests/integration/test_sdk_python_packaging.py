"""The Python SDK as users get it: a wheel built with `python -m build` (from .tools/venv,
offline), installed into a fresh virtualenv and run against the daemon; vermin confirms it
needs nothing newer than Python 3.9, mypy --strict finds its types (and code using them) sound,
and where a Python 3.9 is installed the SDK runs on it."""

import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tooling

REPO_ROOT = Path(__file__).resolve().parents[2]
SDK_DIR = REPO_ROOT / "sdk" / "python"

# Runs on the interpreter under test against the daemon named by the environment; prints what
# it saw as one JSON line. Written for Python 3.9 like the SDK.
SMOKE = r'''
import json
import sys
from typing import Any, Dict, List

import bulkhead
from bulkhead import Bulkhead, NotFoundError

client = Bulkhead()
report: Dict[str, Any] = {"python": list(sys.version_info[:2]), "module": bulkhead.__file__, "url": client.url,
                          "health": client.health().status}
with client.sandboxes.create(metadata={"smoke": "yes"}) as sandbox:
    report["exec"] = sandbox.exec(["sh", "-c", "echo $((6 * 7))"]).stdout
    chunks: List[str] = []
    report["streamed_exit"] = sandbox.exec("echo a; echo b", on_stdout=chunks.append).exit_code
    report["streamed"] = "".join(chunks)
    sandbox.files.write("/workspace/f.bin", (bytes([i]) * 65536 for i in range(16)))
    report["file_size"] = sum(len(c) for c in sandbox.files.read_stream("/workspace/f.bin"))
    cat = sandbox.processes.start(["cat"], pty=(80, 24))
    with cat.attach() as session:
        session.send("ping\n")
        report["attach"] = session.read_until("ping", timeout=30).decode()
        session.send("\x04")
        status = session.wait(30)
        report["attach_exit"] = status.exit_code if status is not None else None
    sandbox_id = sandbox.id
try:
    client.sandboxes.get(sandbox_id)
    report["deleted"] = False
except NotFoundError as e:
    report["deleted"] = e.code == "sandbox_not_found"
print(json.dumps(report))
'''


def run_smoke(python: str, env: dict, cwd: Path) -> dict:
    script = cwd / "smoke.py"
    script.write_text(SMOKE)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("BULKHEAD_", "PYTHON"))}
    r = subprocess.run([python, str(script)], env={**base, **env}, cwd=cwd, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"smoke failed on {python}:\n{r.stdout}\n{r.stderr}"
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["health"] == "ok" and report["exec"] == "42\n", report
    assert report["streamed_exit"] == 0 and report["streamed"] == "a\nb\n", report
    assert report["file_size"] == 16 * 65536, report
    assert "ping" in report["attach"] and report["attach_exit"] == 0, report
    assert report["deleted"] is True, report
    return report


def copy_sources(dest: Path) -> Path:
    """The SDK's sources without build leftovers, so a build never writes into the repo."""
    shutil.copytree(SDK_DIR, dest, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist"))
    return dest


@pytest.fixture
def tools_bin():
    return tooling.require_pypi_tools()


def test_wheel_builds_installs_into_a_fresh_venv_and_runs(daemon, tools_bin, tmp_path):
    src = copy_sources(tmp_path / "src")
    build = subprocess.run([str(tools_bin / "python"), "-m", "build", "--wheel", "--no-isolation", "--outdir",
                            str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    wheels = list((tmp_path / "dist").glob("bulkhead-*-py3-none-any.whl"))
    assert len(wheels) == 1, list((tmp_path / "dist").iterdir())
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "bulkhead/py.typed" in names and "bulkhead/__init__.py" in names, names
    metadata = zipfile.ZipFile(wheels[0]).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    assert "Requires-Python: >=3.9" in metadata and "Requires-Dist" not in metadata, metadata

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    python = str(venv / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "--no-index", "--disable-pip-version-check", "-q",
                              str(wheels[0])], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    # The defaults: the unix socket and key file of BULKHEAD_STATE.
    report = run_smoke(python, {"BULKHEAD_STATE": str(daemon.state_dir)}, tmp_path)
    assert report["module"].startswith(str(venv)), report
    assert report["url"] == f"unix://{daemon.socket_path}", report


def test_the_sdk_needs_nothing_newer_than_python_3_9(tools_bin):
    r = subprocess.run([str(tools_bin / "vermin"), "-t=3.9-", "--violations", "--no-tips", "--eval-annotations",
                        str(SDK_DIR / "bulkhead")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Minimum required versions: 3." in r.stdout, r.stdout


def test_the_sdk_and_code_using_it_type_check_strictly(tools_bin, tmp_path):
    user_code = tmp_path / "user_code.py"
    user_code.write_text(SMOKE)
    for target in (str(SDK_DIR / "bulkhead"), str(user_code)):
        r = subprocess.run([str(tools_bin / "mypy"), "--strict", "--python-version", "3.9", "--no-incremental",
                            "--cache-dir", str(tmp_path / "mypy-cache"), target],
                           env={**os.environ, "MYPYPATH": str(SDK_DIR)}, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"mypy {target}:\n{r.stdout}{r.stderr}"


def test_the_sdk_runs_on_python_3_9(daemon, tmp_path):
    found = sorted(glob.glob("/root/.pyenv/versions/3.9*/bin/python3.9"))
    if not found:
        pytest.skip("no Python 3.9 under /root/.pyenv/versions")
    report = run_smoke(found[-1], {"PYTHONPATH": str(SDK_DIR), "BULKHEAD_URL": f"http://127.0.0.1:{daemon.port}",
                                   "BULKHEAD_API_KEY": daemon.key}, tmp_path)
    assert report["python"] == [3, 9], report
    assert report["module"] == str(SDK_DIR / "bulkhead" / "__init__.py"), report
