"""The bulkhead CLI against a real daemon (over its unix socket, found through BULKHEAD_STATE)."""

import io
import json
import os
import subprocess
import tarfile
import time
import uuid

import pytest

from harness import BULKHEAD


@pytest.fixture
def cli(daemon):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env["BULKHEAD_STATE"] = str(daemon.state_dir)

    def run(*args, input=None, timeout=120) -> subprocess.CompletedProcess:
        return subprocess.run([str(BULKHEAD), *args], env=env, input=input, capture_output=True, text=True,
                              timeout=timeout)

    run.env = env
    return run


def test_cli_run_forwards_streams_and_exit_code(cli):
    r = cli("run", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert r.returncode == 7, r
    assert r.stdout == "out\n"
    assert r.stderr == "err\n"


def test_cli_run_streams_output_live(cli):
    """The first line reaches the terminal while the command is still running."""
    proc = subprocess.Popen([str(BULKHEAD), "run", "--", "sh", "-c", "echo a; sleep 3; echo b"], env=cli.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        started = time.monotonic()
        first = proc.stdout.readline()
        first_at = time.monotonic() - started
        rest = proc.stdout.read()
        done_at = time.monotonic() - started
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (first, rest) == (b"a\n", b"b\n")
    # "a" came while `sleep 3` still ran, not with "b" at the end.
    assert done_at - first_at > 2.0, f"a after {first_at:.2f}s, b after {done_at:.2f}s"


def test_cli_run_passes_stdin_with_dash_i(cli):
    r = cli("run", "-i", "--", "tr", "a-z", "A-Z", input="shout\n")
    assert r.returncode == 0, r
    assert r.stdout == "SHOUT\n"


def test_cli_run_removes_its_sandbox(cli, client):
    before = {s["id"] for s in client.list()}
    proc = subprocess.Popen([str(BULKHEAD), "run", "--", "sleep", "3"], env=cli.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        seen = set()
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline and proc.poll() is None:
            seen = {s["id"] for s in client.list()} - before
            time.sleep(0.1)
        assert len(seen) == 1, f"run's sandbox never showed up in the list: {seen}"
        assert proc.wait(30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run_id = seen.pop()
    assert run_id not in {s["id"] for s in client.list()}
    assert client.get(f"/v1/sandboxes/{run_id}").status == 404
    assert run_id not in cli("ls").stdout


def test_cli_create_exec_ls_inspect_rm_round_trip(cli, client):
    tag = uuid.uuid4().hex[:10]
    created = cli("create", "--metadata", f"cli={tag}", "--memory-mb", "256", "-e", "FROM_CLI=yes")
    assert created.returncode == 0, created
    sandbox_id = created.stdout.strip()
    assert sandbox_id and "\n" not in sandbox_id
    try:
        assert client.sandbox(sandbox_id)["memory_mb"] == 256

        r = cli("exec", sandbox_id, "--", "sh", "-c", "echo $FROM_CLI > /workspace/x; cat /workspace/x; exit 4")
        assert (r.returncode, r.stdout) == (4, "yes\n"), r
        r = cli("exec", "-i", sandbox_id, "--", "cat")
        assert r.returncode == 0

        listing = cli("ls")
        assert listing.returncode == 0 and sandbox_id in listing.stdout
        assert any(sandbox_id in line and "running" in line for line in listing.stdout.splitlines())
        filtered = json.loads(cli("ls", "--json", "--metadata", f"cli={tag}").stdout)
        assert [s["id"] for s in filtered["sandboxes"]] == [sandbox_id]

        inspected = cli("inspect", sandbox_id)
        assert inspected.returncode == 0, inspected
        shown = json.loads(inspected.stdout)
        assert shown["id"] == sandbox_id and shown["metadata"] == {"cli": tag} and "usage" in shown

        for action, state in (("pause", "paused"), ("resume", "running"), ("stop", "stopped"), ("start", "running")):
            r = cli(action, sandbox_id)
            assert (r.returncode, r.stdout) == (0, f"{sandbox_id} {state}\n"), r
        assert cli("exec", sandbox_id, "--", "cat", "/workspace/x").stdout == "yes\n"  # kept across stop/start
        r = cli("pause", "nosuchsandbox0000000")
        assert r.returncode != 0 and "nosuchsandbox0000000" in r.stderr, r

        removed = cli("rm", sandbox_id)
        assert removed.returncode == 0, removed
    finally:
        client.delete(f"/v1/sandboxes/{sandbox_id}")
    assert client.get(f"/v1/sandboxes/{sandbox_id}").status == 404
    assert sandbox_id not in cli("ls").stdout
    gone = cli("exec", sandbox_id, "--", "true")
    assert gone.returncode != 0 and gone.stderr.strip()
    assert cli("inspect", sandbox_id).returncode != 0


PASSWD = "root:x:0:0:root:/root:/hello\n"
GROUP = "root:x:0:\n"


def make_hello_rootfs(root, hello_binary, with_etc=True):
    """A rootfs holding only a static /hello (and, unless told otherwise, a minimal /etc/passwd)."""
    root.mkdir()
    (root / "hello").write_bytes(hello_binary.read_bytes())
    (root / "hello").chmod(0o755)
    if with_etc:
        (root / "etc").mkdir()
        (root / "etc" / "passwd").write_text(PASSWD)
        (root / "etc" / "group").write_text(GROUP)
    return root


def test_cli_image_import_from_directory_then_run(cli, client, session_dir, hello_binary):
    name = f"hello-dir-{uuid.uuid4().hex[:8]}"
    rootfs = make_hello_rootfs(session_dir / f"rootfs-{name}", hello_binary)
    imported = cli("image", "import", name, str(rootfs))
    assert imported.returncode == 0, imported
    try:
        assert name in cli("image", "ls").stdout
        r = cli("run", "--image", name, "--", "/hello")
        assert r.returncode == 0, r
        assert r.stdout == "hello from a bulkhead image\n"
        # it really runs in that image: the host's tools are not there
        r = cli("run", "--image", name, "--", "/bin/sh", "-c", "true")
        assert r.returncode == 127, r
    finally:
        cli("image", "rm", name)


def test_cli_image_import_from_tar_gz_then_run(cli, session_dir, hello_binary):
    name = f"hello-tgz-{uuid.uuid4().hex[:8]}"
    tarball = session_dir / f"{name}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        for path, data, mode in [("hello", hello_binary.read_bytes(), 0o755),
                                 ("etc/passwd", PASSWD.encode(), 0o644), ("etc/group", GROUP.encode(), 0o644)]:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    imported = cli("image", "import", name, str(tarball))
    assert imported.returncode == 0, imported
    try:
        r = cli("run", "--image", name, "--", "/hello")
        assert r.returncode == 0, r
        assert r.stdout == "hello from a bulkhead image\n"
    finally:
        cli("image", "rm", name)


def test_image_without_etc_passwd_runs_commands_as_root(cli, session_dir, hello_binary):
    # Like a Docker "scratch" image: no /etc at all; the default user root (uid 0) still works.
    name = f"hello-bare-{uuid.uuid4().hex[:8]}"
    rootfs = make_hello_rootfs(session_dir / f"rootfs-{name}", hello_binary, with_etc=False)
    imported = cli("image", "import", name, str(rootfs))
    assert imported.returncode == 0, imported
    try:
        r = cli("run", "--image", name, "--", "/hello")
        assert r.returncode == 0, r
        assert r.stdout == "hello from a bulkhead image\n"
    finally:
        cli("image", "rm", name)


def test_cli_deny_entries_on_create_and_network(cli, client):
    created = cli("create", "--allow", "*.test", "--deny", "other.test", "--deny", "192.0.2.0/24")
    assert created.returncode == 0, created
    sandbox_id = created.stdout.strip()
    try:
        assert client.sandbox(sandbox_id)["network"] == {"mode": "allowlist", "allow": ["*.test"],
                                                         "deny": ["other.test", "192.0.2.0/24"]}
        shown = cli("network", sandbox_id)
        assert shown.stdout == "mode: allowlist\nallow: *.test\ndeny: other.test\ndeny: 192.0.2.0/24\n", shown
        changed = cli("network", sandbox_id, "allowlist", "--allow", "a.test", "--deny", "b.a.test")
        assert changed.stdout == "mode: allowlist\nallow: a.test\ndeny: b.a.test\n", changed
        assert client.sandbox(sandbox_id)["network"]["deny"] == ["b.a.test"]
        # --deny without a mode, and a bad entry, are refused; the policy stays.
        refused = cli("network", sandbox_id, "--deny", "c.test")
        assert refused.returncode != 0 and "--deny" in refused.stderr, refused
        refused = cli("network", sandbox_id, "allowlist", "--deny", "*")
        assert refused.returncode != 0 and "deny[0]" in refused.stderr, refused
        assert client.sandbox(sandbox_id)["network"]["deny"] == ["b.a.test"]
    finally:
        cli("rm", sandbox_id)
    refused = cli("create", "--deny", "other.test")
    assert refused.returncode != 0 and "--deny needs" in refused.stderr, refused


def test_cli_snapshot_fork_export_import_and_create_from_snapshot(cli, client, tmp_path):
    source = cli("create").stdout.strip()
    made = [source]
    snapshot_id = None
    try:
        assert cli("exec", source, "--", "sh", "-c", "echo kept > /workspace/k").returncode == 0
        r = cli("snapshot", "create", source, "--name", "cli-snap")
        assert r.returncode == 0, r
        snapshot_id = r.stdout.strip()
        assert snapshot_id.startswith("snap_")
        listing = cli("snapshot", "ls")
        row = next(line for line in listing.stdout.splitlines() if snapshot_id in line)
        assert "cli-snap" in row and source in row and " no " in f" {row} ", row
        assert json.loads(cli("snapshot", "ls", "--json").stdout)["snapshots"][-1]["id"] == snapshot_id

        started = cli("create", "--from-snapshot", snapshot_id).stdout.strip()
        made.append(started)
        assert cli("exec", started, "--", "cat", "/workspace/k").stdout == "kept\n"
        r = cli("run", "--from-snapshot", snapshot_id, "--", "cat", "/workspace/k")
        assert (r.returncode, r.stdout) == (0, "kept\n"), r

        r = cli("fork", source, "-n", "2")
        assert r.returncode == 0, r
        forks = r.stdout.split()
        made += forks
        assert len(forks) == 2 and all(cli("exec", f, "--", "cat", "/workspace/k").stdout == "kept\n" for f in forks)
        # A native sandbox's memory is refused, naming why.
        r = cli("snapshot", "create", source, "--memory")
        assert r.returncode != 0 and "memory" in r.stderr, r
        r = cli("fork", source, "--memory")
        assert r.returncode != 0 and "memory" in r.stderr, r
        assert cli("fork", source, "-n", "17").returncode != 0

        # Export to a file and to stdout, import both: a new snapshot each, with the files.
        archive = tmp_path / "snap.tar.zst"
        r = cli("snapshot", "export", snapshot_id, str(archive))
        assert r.returncode == 0 and archive.stat().st_size > 0, r
        assert archive.stat().st_mode & 0o077 == 0
        piped = subprocess.run([str(BULKHEAD), "snapshot", "export", snapshot_id, "-"], env=cli.env,
                               capture_output=True, timeout=120)
        assert piped.returncode == 0 and piped.stdout[:4] == b"\x28\xb5\x2f\xfd", piped.stderr  # zstd
        imported = []
        r = cli("snapshot", "import", str(archive))
        assert r.returncode == 0 and r.stdout.strip().startswith("snap_"), r
        imported.append(r.stdout.strip())
        r = subprocess.run([str(BULKHEAD), "snapshot", "import", "-", "--json"], env=cli.env, input=piped.stdout,
                           capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr
        imported.append(json.loads(r.stdout)["id"])
        for new in imported:
            r = cli("run", "--from-snapshot", new, "--", "cat", "/workspace/k")
            assert (r.returncode, r.stdout) == (0, "kept\n"), r
            assert cli("snapshot", "rm", new).returncode == 0
        r = cli("snapshot", "export", "snap_nosuchsnapshot00000", str(tmp_path / "none.tar.zst"))
        assert r.returncode != 0 and "snap_nosuchsnapshot00000" in r.stderr, r
        assert not (tmp_path / "none.tar.zst").exists()
        r = cli("snapshot", "import", str(tmp_path / "missing.tar.zst"))
        assert r.returncode != 0 and "missing.tar.zst" in r.stderr, r
        (tmp_path / "junk").write_bytes(b"not an archive")
        r = cli("snapshot", "import", str(tmp_path / "junk"))
        assert r.returncode != 0 and r.stderr.strip(), r

        r = cli("snapshot", "rm", snapshot_id)
        assert r.returncode != 0 and snapshot_id in r.stderr, r  # in use by `started`
        cli("rm", started)
        made.remove(started)
        r = cli("snapshot", "rm", snapshot_id)
        assert (r.returncode, r.stdout) == (0, snapshot_id + "\n"), r
        snapshot_id = None
    finally:
        for sandbox_id in made:
            client.delete(f"/v1/sandboxes/{sandbox_id}")
        if snapshot_id:
            client.delete(f"/v1/snapshots/{snapshot_id}")


def test_cli_memory_snapshot_and_fork_of_a_gvisor_sandbox(cli, client):
    if not client.get("/healthz").json()["runtimes"]["gvisor"]["available"]:
        pytest.skip("this host has no gvisor runtime")
    source = cli("create", "--runtime", "gvisor").stdout.strip()
    made = [source]
    try:
        assert cli("exec", "-d", "--tag", "ticker", source, "--", "sh", "-c",
                   "i=0; while :; do i=$((i+1)); echo $i > /tmp/ticks; sleep 0.05; done").returncode == 0
        r = cli("snapshot", "create", source, "--memory", "--json")
        assert r.returncode == 0, r
        snapshot = json.loads(r.stdout)
        assert snapshot["memory"] is True and snapshot["runtime"] == "gvisor", snapshot
        row = next(line for line in cli("snapshot", "ls").stdout.splitlines() if snapshot["id"] in line)
        assert "gvisor" in row and " yes " in f" {row} ", row
        restored = cli("create", "--from-snapshot", snapshot["id"]).stdout.strip()
        made.append(restored)
        r = cli("fork", source, "--memory")
        assert r.returncode == 0, r
        made += r.stdout.split()
        for copy in made[1:]:
            ps = cli("ps", copy)
            assert ps.returncode == 0 and "ticker" in ps.stdout, ps
        # Through export and import its processes come along; --files-only leaves them.
        exported = subprocess.run([str(BULKHEAD), "snapshot", "export", snapshot["id"], "-"], env=cli.env,
                                  capture_output=True, timeout=120)
        assert exported.returncode == 0, exported.stderr
        for flags, memory in (([], True), (["--files-only"], False)):
            r = subprocess.run([str(BULKHEAD), "snapshot", "import", "-", "--json", *flags], env=cli.env,
                               input=exported.stdout, capture_output=True, timeout=120)
            assert r.returncode == 0, r.stderr
            imported = json.loads(r.stdout)
            assert imported["memory"] is memory, imported
            started = cli("create", "--from-snapshot", imported["id"]).stdout.strip()
            assert ("ticker" in cli("ps", started).stdout) is memory
            client.remove(started)
            assert cli("snapshot", "rm", imported["id"]).returncode == 0
        for sandbox_id in made[1:]:
            client.remove(sandbox_id)
        made = [source]
        assert cli("snapshot", "rm", snapshot["id"]).returncode == 0
    finally:
        for sandbox_id in made:
            client.delete(f"/v1/sandboxes/{sandbox_id}")
