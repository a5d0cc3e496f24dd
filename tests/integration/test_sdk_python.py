"""The Python SDK (sdk/python, package bulkhead) against a real daemon: every method, the
connection defaults (unix socket via BULKHEAD_STATE, BULKHEAD_URL, the key file vs
BULKHEAD_API_KEY), typed errors, streaming both ways (a 100 MiB file), attach to a pty,
watch, snapshots with export/import, forks, network and egress log, ports, volumes, images."""

import hashlib
import http.client
import io
import os
import random
import socket
import sys
import tarfile
import threading
import time
import tracemalloc
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk" / "python"
sys.path.insert(0, str(SDK_DIR))

import bulkhead  # noqa: E402
from bulkhead import (ApiError, AuthenticationError, Bulkhead, BulkheadConnectionError, BulkheadError,  # noqa: E402
                      BulkheadTimeoutError, CommandError, ConflictError, InvalidRequestError, NotFoundError,
                      ServerError, UnsafeArchiveError, VolumeMount)

from harness import wait_until  # noqa: E402
from sandbox_apps import ECHO_APP, WS_APP  # noqa: E402

MB = 1 << 20


@pytest.fixture
def bh(daemon):
    """An SDK client to the session daemon over TCP with its key."""
    with Bulkhead(url=f"http://127.0.0.1:{daemon.port}", api_key=daemon.key) as client:
        yield client
    assert daemon.running(), f"the daemon died:\n{daemon.log_tail()}"


@pytest.fixture
def box(bh):
    """A fresh sandbox, deleted after the test."""
    with bh.sandboxes.create() as sandbox:
        yield sandbox


def random_chunks(total: int, seed: int, piece: int = MB):
    rng = random.Random(seed)
    while total > 0:
        n = min(piece, total)
        total -= n
        yield rng.randbytes(n)


def sha256_of(chunks) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def wait_listening(sandbox, port: int):
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port})).close()"
    assert wait_until(lambda: sandbox.exec(["python3", "-c", probe]).exit_code == 0, timeout=30), \
        f"nothing listened on {port}"


# ---------------------------------------------------------------- connection and key

def test_default_connection_is_the_unix_socket_of_BULKHEAD_STATE_with_its_key_file(daemon, monkeypatch):
    monkeypatch.delenv("BULKHEAD_URL", raising=False)
    monkeypatch.delenv("BULKHEAD_API_KEY", raising=False)
    monkeypatch.setenv("BULKHEAD_STATE", str(daemon.state_dir))
    with Bulkhead() as client:
        assert client.url == f"unix://{daemon.socket_path}"
        assert client.health().status == "ok"
        with client.sandboxes.create(metadata={"via": "unix"}) as sandbox:
            assert sandbox.exec("echo over the socket").stdout == "over the socket\n"
            assert [s.id for s in client.sandboxes.list(metadata={"via": "unix"})] == [sandbox.id]


def test_BULKHEAD_URL_in_every_form(daemon, monkeypatch):
    monkeypatch.setenv("BULKHEAD_API_KEY", daemon.key)
    for url in (f"http://127.0.0.1:{daemon.port}", f"unix://{daemon.socket_path}", str(daemon.socket_path)):
        monkeypatch.setenv("BULKHEAD_URL", url)
        with Bulkhead() as client:
            assert client.health().version
            assert isinstance(client.sandboxes.list(), list)
    # An explicit url wins over the variable.
    monkeypatch.setenv("BULKHEAD_URL", "unix:///nonexistent/bulkhead.sock")
    with Bulkhead(url=f"http://127.0.0.1:{daemon.port}") as client:
        assert client.health().status == "ok"


def test_key_file_versus_BULKHEAD_API_KEY(daemon, tmp_path, monkeypatch):
    url = f"http://127.0.0.1:{daemon.port}"
    monkeypatch.delenv("BULKHEAD_URL", raising=False)
    # BULKHEAD_API_KEY wins over the key file.
    monkeypatch.setenv("BULKHEAD_STATE", str(daemon.state_dir))
    monkeypatch.setenv("BULKHEAD_API_KEY", "not-the-key")
    with pytest.raises(AuthenticationError) as refused:
        Bulkhead(url=url).sandboxes.list()
    assert refused.value.status == 401 and refused.value.code == "unauthorized"
    assert "BULKHEAD_API_KEY" in str(refused.value)
    # The api_key argument wins over both.
    assert isinstance(Bulkhead(url=url, api_key=daemon.key).sandboxes.list(), list)
    # The key file of the state dir, when the variable is unset.
    monkeypatch.delenv("BULKHEAD_API_KEY")
    assert isinstance(Bulkhead(url=url).sandboxes.list(), list)
    # Right key in the variable, no key file at all: works.
    empty_state = tmp_path / "state"
    empty_state.mkdir()
    monkeypatch.setenv("BULKHEAD_STATE", str(empty_state))
    monkeypatch.setenv("BULKHEAD_API_KEY", daemon.key)
    assert isinstance(Bulkhead(url=url).sandboxes.list(), list)
    # No key anywhere: /healthz still works, the first call that needs a key says what to do.
    monkeypatch.delenv("BULKHEAD_API_KEY")
    client = Bulkhead(url=url)
    assert client.health().status == "ok"
    with pytest.raises(AuthenticationError) as missing:
        client.sandboxes.list()
    assert "no API key" in str(missing.value) and str(empty_state / "api-key") in str(missing.value)
    # A key file written later (a daemon's first start) is picked up.
    (empty_state / "api-key").write_text(daemon.key + "\n")
    assert isinstance(client.sandboxes.list(), list)


def test_transport_failures_and_bad_urls(tmp_path):
    with pytest.raises(BulkheadConnectionError) as no_socket:
        Bulkhead(url=f"unix://{tmp_path}/none.sock", api_key="k").health()
    assert "none.sock" in str(no_socket.value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    with pytest.raises(BulkheadConnectionError):
        Bulkhead(url=f"http://127.0.0.1:{closed_port}", api_key="k").health()
    for bad in ("ftp://x", "unix://relative.sock", "localhost:7420"):
        with pytest.raises(BulkheadError):
            Bulkhead(url=bad)


def test_keep_alive_connections_are_reused_and_a_dead_one_is_replaced(bh):
    bh.health()
    transport = bh._transport
    first = transport._idle[-1]
    bh.health()
    assert transport._idle[-1] is first, "the idle connection was not reused"
    # An idle connection that died meanwhile (as when the daemon's keep-alive timeout closes
    # it) is noticed, and the call goes on with a new one.
    first.sock.shutdown(socket.SHUT_RDWR)
    assert bh.health().status == "ok"


def test_health_metrics_openapi(bh):
    health = bh.health()
    assert health.status == "ok" and health.version
    assert "bulkhead_http_requests_total" in bh.metrics()
    spec = bh.openapi()
    assert spec["openapi"].startswith("3.") and "/v1/sandboxes" in spec["paths"]


# ---------------------------------------------------------------- errors

def test_api_errors_are_typed_and_carry_the_code(bh, box):
    with pytest.raises(NotFoundError) as unknown:
        bh.sandboxes.get("nosuchsandbox")
    assert unknown.value.status == 404 and unknown.value.code == "sandbox_not_found" and unknown.value.message
    assert isinstance(unknown.value, ApiError) and isinstance(unknown.value, BulkheadError)
    with pytest.raises(InvalidRequestError) as invalid:
        bh.sandboxes.create(cpus=-1)
    assert invalid.value.status == 422 and invalid.value.code == "invalid_argument"
    with pytest.raises(InvalidRequestError):
        bh.sandboxes.create(memory_mb="lots")
    with pytest.raises(InvalidRequestError):
        bh.sandboxes.list(state="dancing")
    with pytest.raises(NotFoundError) as process:
        box.processes.get(999999)
    assert process.value.code == "process_not_found"
    with pytest.raises(NotFoundError):
        box.files.read("/workspace/missing")
    with pytest.raises(NotFoundError) as snapshot:
        bh.snapshots.get("snap_" + "a" * 20)
    assert snapshot.value.code == "snapshot_not_found"
    with pytest.raises(NotFoundError) as volume:
        bh.volumes.get("no-such-volume")
    assert volume.value.code == "volume_not_found"
    with pytest.raises(NotFoundError) as image:
        bh.images.delete("no-such-image")
    assert image.value.code == "image_not_found"
    box.files.mkdir("/workspace/d/e")
    with pytest.raises(ConflictError) as exists:
        box.files.mkdir("/workspace/d", parents=False)
    assert exists.value.status == 409
    with pytest.raises(ConflictError) as not_empty:
        box.files.remove("/workspace/d")
    assert not_empty.value.code == "not_empty"
    # Unknown sandboxes in every collection of a handle.
    ghost = bh.sandboxes.get(box.id)
    box.delete()
    for call in (ghost.refresh, lambda: ghost.exec("true"), ghost.processes.list, lambda: ghost.files.list("/"),
                 lambda: ghost.files.exists("/"), ghost.snapshot, ghost.egress_log):
        with pytest.raises(NotFoundError) as gone:
            call()
        assert gone.value.code == "sandbox_not_found"


# ---------------------------------------------------------------- sandboxes

def test_sandbox_create_options_get_list_and_context_manager(bh):
    tag = uuid.uuid4().hex
    with bh.sandboxes.create(cpus=0.5, memory_mb=256, disk_mb=512, pids=128, timeout_s=600,
                             env={"GREETING": "hi"}, workdir="/tmp", metadata={"suite": tag, "n": "1"},
                             network="none") as sandbox:
        info = sandbox.info
        assert (info.cpus, info.memory_mb, info.disk_mb, info.pids, info.timeout_s) == (0.5, 256, 512, 128, 600)
        assert sandbox.state == "running" and sandbox.image == "host" and info.runtime == "native"
        assert sandbox.metadata == {"suite": tag, "n": "1"} and info.env == {"GREETING": "hi"}
        assert info.workdir == "/tmp" and sandbox.network.mode == "none"
        assert info.created_at is not None and info.created_at.tzinfo is not None
        assert info.expires_at is not None and info.expires_at > info.created_at
        assert sandbox.exec("echo $GREETING; pwd").stdout == "hi\n/tmp\n"
        with bh.sandboxes.create(metadata={"suite": tag, "n": "2"}) as other:
            assert {s.id for s in bh.sandboxes.list(metadata={"suite": tag})} == {sandbox.id, other.id}
            assert [s.id for s in bh.sandboxes.list(metadata={"suite": tag, "n": "2"})] == [other.id]
            assert sandbox.id in {s.id for s in bh.sandboxes.list(state="running")}
        got = bh.sandboxes.get(sandbox.id)
        assert got.id == sandbox.id and got.usage is not None and got.usage.pids >= 0
        assert sandbox.usage is None and sandbox.refresh().usage is not None
    # Leaving the block deleted it.
    with pytest.raises(NotFoundError):
        bh.sandboxes.get(sandbox.id)
    assert bh.sandboxes.list(metadata={"suite": tag}) == []


def test_sandbox_lifecycle_timeout_pause_resume_stop_start_delete(bh):
    sandbox = bh.sandboxes.create(timeout_s=300)
    try:
        before = sandbox.info.expires_at
        assert sandbox.set_timeout(3600) is sandbox and sandbox.info.timeout_s == 3600
        assert sandbox.info.expires_at > before
        assert sandbox.set_timeout(0).info.expires_at is None
        assert sandbox.pause().state == "paused"
        assert bh.sandboxes.get(sandbox.id).state == "paused"
        assert sandbox.resume().state == "running"
        sandbox.pause()
        assert bh.sandboxes.connect(sandbox.id).state == "running"  # connect resumes
        sandbox.files.write("/workspace/kept", "still here")
        assert sandbox.stop().state == "stopped"
        assert sandbox.start().state == "running"
        assert sandbox.files.read_text("/workspace/kept") == "still here"
    finally:
        sandbox.delete()
    with pytest.raises(NotFoundError):
        sandbox.refresh()
    with pytest.raises(NotFoundError):
        sandbox.delete()


# ---------------------------------------------------------------- exec

def test_exec_result_argv_shell_cwd_env_user_stdin(box):
    result = box.exec("echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr, result.signal) == (3, "out\n", "err\n", None)
    assert not result.ok and not result.timed_out and not result.truncated and result.duration_ms > 0
    with pytest.raises(CommandError) as failed:
        result.check()
    assert failed.value.result is result and "3" in str(failed.value)
    assert box.exec(["printf", "%s|", "a b", "$HOME"]).check().stdout == "a b|$HOME|"
    assert box.exec("pwd; echo $X", cwd="/tmp", env={"X": "y"}).stdout == "/tmp\ny\n"
    assert box.exec(["id", "-u"], user="1000").stdout == "1000\n"
    assert box.exec(["cat"], stdin="text in").stdout == "text in"
    raw = bytes(range(256))
    echoed = box.exec(["cat"], stdin=raw)
    assert echoed.stdout_bytes == raw and "\ufffd" in echoed.stdout


def test_exec_timeout_is_a_result_not_an_exception(box):
    result = box.exec(["sleep", "30"], timeout_s=1)
    assert result.timed_out and result.exit_code is None and result.signal == "SIGKILL"
    with pytest.raises(CommandError):
        result.check()


def test_exec_output_cap_sets_truncated(box):
    result = box.exec("head -c 100000 /dev/zero", max_output_bytes=1000)
    assert result.truncated and len(result.stdout) == 1000 and result.exit_code == 0


def test_exec_callbacks_get_output_while_the_command_runs(box):
    # The command waits for a file that the stdout callback writes once it saw "ready": the
    # command can only end if the callback ran before it ended.
    seen_out, seen_err = [], []

    def on_stdout(text):
        seen_out.append(text)
        if "ready" in "".join(seen_out) and not box.files.exists("/tmp/go"):
            box.files.write("/tmp/go", "")

    script = "echo ready; echo warn >&2; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done"
    result = box.exec(script, on_stdout=on_stdout, on_stderr=seen_err.append, timeout_s=60)
    assert result.exit_code == 0 and not result.timed_out
    assert "".join(seen_out) == "ready\ndone\n" == result.stdout
    assert "".join(seen_err) == "warn\n" == result.stderr
    assert result.pid is not None


def test_exec_stream_yields_start_output_and_exit_with_exact_bytes(box):
    with box.exec_stream("printf 'a\\377b'; echo x >&2; exit 4") as events:
        kinds = []
        out = b""
        for event in events:
            kinds.append(event.type)
            if event.type == "start":
                assert event.pid > 0
            if event.type == "stdout":
                out += event.data_bytes
            if event.type == "exit":
                assert event.exit_code == 4 and event.signal is None and event.duration_ms >= 0
    assert kinds[0] == "start" and kinds[-1] == "exit" and "stderr" in kinds
    assert out == b"a\xffb"
    # Bytes that are not UTF-8 come through the callback form too.
    result = box.exec("printf 'a\\377b'", on_stdout=lambda _: None)
    assert result.stdout_bytes == b"a\xffb" and result.stdout == "a\ufffdb"


def test_closing_an_exec_stream_early_kills_the_command(box):
    stream = box.exec_stream("echo started; sleep 300; echo never")
    for event in stream:
        if event.type == "stdout":
            break
    stream.close()
    assert wait_until(lambda: "sleep 300" not in box.exec("ps -eo args").stdout, timeout=30)


# ---------------------------------------------------------------- processes

def test_process_start_list_get_output_offsets_and_follow(box):
    process = box.processes.start("echo one; echo two >&2; read line; echo got $line", tag="worker",
                                  env={"A": "b"}, cwd="/tmp")
    assert process.pid > 0 and process.tag == "worker" and process.state == "running"
    assert process.info.cmd == ["/bin/sh", "-c", "echo one; echo two >&2; read line; echo got $line"]
    assert box.processes.get("worker").pid == process.pid
    assert box.processes.get(process.pid).tag == "worker"
    assert process.pid in [p.pid for p in box.processes.list()]
    assert wait_until(lambda: process.refresh().info.stdout_offset == 4 and process.info.stderr_offset == 4, 30)
    events = list(process.output(follow=False))
    assert [(e.type, e.data, e.offset) for e in events] in (
        [("stdout", "one\n", 4), ("stderr", "two\n", 4)], [("stderr", "two\n", 4), ("stdout", "one\n", 4)])
    assert list(process.output(2, follow=False))[0].data in ("e\n", "o\n")
    assert [e.data for e in process.output(follow=False, stdout_offset=4, stderr_offset=4)] == []
    with process.output(stdout_offset=4, stderr_offset=4) as follow:
        process.write_stdin("hello\n")
        got = [(e.type, e.data) for e in follow]
    assert got[0] == ("stdout", "got hello\n") and got[-1][0] == "exit"
    assert process.wait(30).exit_code == 0
    assert process.state == "exited" and process.exit_code == 0


def test_process_stdin_bytes_close_and_wait(box):
    process = box.processes.start(["sha256sum"])
    data = bytes(random.Random(1).randbytes(3 * MB))
    process.write_stdin(data[:MB])
    process.write_stdin(data[MB:])
    process.close_stdin()
    status = process.wait(60)
    assert status.exit_code == 0 and status.signal is None and not status.timed_out
    out = "".join(e.data for e in process.output(follow=False) if e.type == "stdout")
    assert out.split()[0] == hashlib.sha256(data).hexdigest()


def test_process_signal_kill_timeout_and_wait_timeout(box):
    sleeper = box.processes.start(["sleep", "300"])
    with pytest.raises(BulkheadTimeoutError):
        sleeper.wait(timeout=0.5)
    sleeper.signal("SIGTERM")
    status = sleeper.wait(30)
    assert status.signal == "SIGTERM" and status.exit_code is None
    assert sleeper.info.signal == 15
    other = box.processes.start(["sleep", "300"])
    other.kill()
    assert other.wait(30).signal == "SIGKILL"
    timed = box.processes.start(["sleep", "300"], timeout_s=1)
    assert timed.wait(60).timed_out
    with pytest.raises(InvalidRequestError):
        box.processes.start(["sleep", "1"]).signal("SIGNOPE")


def test_process_pty_resize(box):
    process = box.processes.start("stty size; read x; stty size", pty=(80, 24))
    assert process.info.pty is not None and (process.info.pty.cols, process.info.pty.rows) == (80, 24)
    assert wait_until(lambda: "24 80" in "".join(e.data for e in process.output(follow=False)), 30)
    process.resize(100, 30)
    process.write_stdin("\n")
    process.wait(30)
    text = "".join(e.data for e in process.output(follow=False))
    assert text.index("24 80") < text.index("30 100")


def test_attach_to_a_pty_shell_sees_echo_resizes_signals_and_exit(box):
    shell = box.processes.start(["/bin/sh", "-i"], pty={"cols": 80, "rows": 24}, tag="shell")
    with shell.attach() as session:
        session.send("echo $((6 * 7))\n")
        seen = session.read_until("42\r\n", timeout=30)
        assert b"echo $((6 * 7))" in seen, seen  # the terminal echoed what was typed
        session.resize(120, 40)
        session.send(b"stty size\n")
        session.read_until("40 120", timeout=30)
        # Once "running" is printed (typed, it reads run""ning) the command is the terminal's
        # foreground: Ctrl-C ends it, not the interactive shell.
        session.send("sh -c 'echo run\"\"ning; exec sleep 300'\n")
        session.read_until("running", timeout=30)
        session.send("\x03")
        session.send("echo after-$((1 + 1))\n")
        session.read_until("after-2", timeout=30)
        session.send("exit 5\n")
        status = session.wait(timeout=30)
    assert status is not None and status.exit_code == 5 and session.exit_status == status
    assert shell.refresh().state == "exited"


def test_attach_replays_from_offsets_reports_errors_and_leaves_the_process_running(box):
    cat = box.processes.start(["cat"])
    session = cat.attach()
    session.send(b"first\n")
    assert session.read_until(b"first\n", timeout=30) == b"first\n"
    session.resize(10, 10)  # not a pty: an error message, the session goes on
    session.send(b"second\n")
    assert session.read_until(b"second\n", timeout=30) == b"second\n"
    assert [e.code for e in session.errors] == ["not_a_pty"]
    session.close()
    assert cat.refresh().state == "running"
    # From an offset only the rest is replayed.
    with cat.attach(stdout_offset=6) as again:
        assert again.read_until(b"\n", timeout=30) == b"second\n"
        again.close_stdin()
        assert again.wait(30).exit_code == 0
    sleeper = box.processes.start(["sleep", "300"])
    with sleeper.attach() as session:
        session.signal("SIGKILL")
        assert session.wait(30).signal == "SIGKILL"
    with pytest.raises(NotFoundError) as refused:
        bulkhead.Process(box, bulkhead.ProcessInfo.from_json({"pid": 999999})).attach()
    assert refused.value.code == "process_not_found"


# ---------------------------------------------------------------- files

def test_files_write_read_forms_stat_list_mkdir_move_remove(box, tmp_path):
    entry = box.files.write("/workspace/a/b.txt", "hello", mode=0o600)
    assert (entry.path, entry.name, entry.type, entry.size, entry.mode) == ("/workspace/a/b.txt", "b.txt", "file", 5, 0o600)
    assert box.files.read("/workspace/a/b.txt") == b"hello"
    box.files.write("a/b.txt", b" world", append=True)  # relative to the workdir
    assert box.files.read_text("/workspace/a/b.txt") == "hello world"
    box.files.write("/workspace/c.bin", io.BytesIO(b"from a file object"), mode="0755")
    assert box.files.stat("/workspace/c.bin").mode == 0o755
    box.files.write("/workspace/d.bin", (bytes([i]) * 1000 for i in range(10)))  # chunks
    assert box.files.read("/workspace/d.bin") == b"".join(bytes([i]) * 1000 for i in range(10))
    assert b"".join(box.files.read_stream("/workspace/d.bin", chunk_size=1000)) == box.files.read("/workspace/d.bin")
    local = tmp_path / "local.txt"
    local.write_text("uploaded")
    box.files.upload(local, "/workspace/up.txt")
    assert box.files.download("/workspace/up.txt", tmp_path / "down.txt") == 8
    assert (tmp_path / "down.txt").read_text() == "uploaded"

    assert box.files.exists("/workspace/a/b.txt") and not box.files.exists("/workspace/nope")
    assert box.files.stat("/workspace/a").is_dir
    box.exec("ln -s /etc/hostname /workspace/link").check()
    link = box.files.stat("/workspace/link")
    assert link.type == "symlink" and link.target == "/etc/hostname"
    top = box.files.list("/workspace")
    assert {e.name for e in top} == {"a", "c.bin", "d.bin", "up.txt", "link"} and not top.truncated
    assert "/workspace/a/b.txt" in {e.path for e in box.files.list("/workspace", depth=2)}
    made = box.files.mkdir("/workspace/x/y/z")
    assert made.is_dir and made.path == "/workspace/x/y/z"
    moved = box.files.move("/workspace/a/b.txt", "/workspace/x/b.txt")
    assert moved.path == "/workspace/x/b.txt" and not box.files.exists("/workspace/a/b.txt")
    box.files.remove("/workspace/c.bin")
    box.files.remove("/workspace/x", recursive=True)
    assert not box.files.exists("/workspace/x") and not box.files.exists("/workspace/c.bin")


def test_a_100_mib_file_streams_both_ways_with_small_memory(box, tmp_path):
    total, seed = 100 * MB, 7
    expected = sha256_of(random_chunks(total, seed))
    tracemalloc.start()
    try:
        entry = box.files.write("/workspace/big.bin", random_chunks(total, seed))  # chunked upload
        digest = hashlib.sha256()
        size = 0
        with box.files.read_stream("/workspace/big.bin") as stream:
            assert stream.length == total
            for chunk in stream:
                digest.update(chunk)
                size += len(chunk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert entry.size == total and size == total and digest.hexdigest() == expected
    assert peak < 32 * MB, f"streaming 100 MiB held {peak} bytes at once"
    assert box.exec("sha256sum /workspace/big.bin").stdout.split()[0] == expected
    # A local file goes up with Content-Length, and comes down to a local file.
    local = tmp_path / "big.bin"
    with open(local, "wb") as f:
        for chunk in random_chunks(total, seed):
            f.write(chunk)
    box.files.upload(local, "/workspace/big2.bin")
    assert box.files.download("/workspace/big2.bin", tmp_path / "back.bin") == total
    with open(tmp_path / "back.bin", "rb") as f:
        assert sha256_of(iter(lambda: f.read(MB), b"")) == expected


def test_archives_up_and_down_and_whole_directories(box, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("one.txt", b"1"), ("sub/two.txt", b"22")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    summary = box.files.upload_archive(buf.getvalue(), "/workspace/unpacked")
    assert summary.entries >= 2 and summary.bytes >= 3
    assert box.files.read("/workspace/unpacked/sub/two.txt") == b"22"
    with box.files.download_archive("/workspace/unpacked") as stream:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            got = {m.name.rstrip("/"): (tar.extractfile(m).read() if m.isfile() else None) for m in tar}
    assert got.get("one.txt") == b"1" and got.get("sub/two.txt") == b"22"

    local = tmp_path / "tree"
    (local / "deep" / "er").mkdir(parents=True)
    (local / "top.txt").write_text("top")
    (local / "deep" / "er" / "leaf.bin").write_bytes(os.urandom(5000))
    os.symlink("top.txt", local / "link")
    box.files.upload_dir(local, "/workspace/tree")
    assert box.files.read("/workspace/tree/deep/er/leaf.bin") == (local / "deep" / "er" / "leaf.bin").read_bytes()
    assert box.files.stat("/workspace/tree/link").target == "top.txt"
    back = tmp_path / "back"
    assert box.files.download_dir("/workspace/tree", back) >= 5
    assert (back / "deep" / "er" / "leaf.bin").read_bytes() == (local / "deep" / "er" / "leaf.bin").read_bytes()
    assert os.readlink(back / "link") == "top.txt" and (back / "top.txt").read_text() == "top"


def test_download_dir_refuses_entries_that_leave_the_directory(box, tmp_path):
    # A symlink to / made in the sandbox is refused; the rest arrives, then the error says what was not.
    box.exec("mkdir -p /workspace/evil && ln -s / /workspace/evil/escape && echo kept > /workspace/evil/kept").check()
    with pytest.raises(UnsafeArchiveError) as refusal:
        box.files.download_dir("/workspace/evil", tmp_path / "ok")
    assert [(name.lstrip("./"), why) for name, why in refusal.value.refused] == \
        [("escape", "a symlink to '/', outside the destination")]
    assert not os.path.lexists(tmp_path / "ok" / "escape")
    assert (tmp_path / "ok" / "kept").read_text() == "kept\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, str(tmp_path / "outside")
        tar.addfile(link)
        through = tarfile.TarInfo("escape/planted")
        through.size = 1
        tar.addfile(through, io.BytesIO(b"x"))
    # The daemon itself refuses the entry through the symlink on upload: 422.
    with pytest.raises(InvalidRequestError):
        box.files.upload_archive(buf.getvalue(), "/workspace/hostile")
    assert not (tmp_path / "outside").exists()


def test_watch_reports_changes_as_they_happen(box):
    box.files.mkdir("/workspace/w")
    with box.files.watch("/workspace/w") as watch:
        watch.set_timeout(30)
        box.files.write("/workspace/w/new.txt", "1")  # written beside, renamed over: shows as a rename
        box.files.mkdir("/workspace/w/sub")
        box.exec("echo 2 > /workspace/w/sub/inner.txt").check()
        box.files.move("/workspace/w/new.txt", "/workspace/w/renamed.txt")
        box.files.remove("/workspace/w/renamed.txt")
        seen = []
        for event in watch:
            seen.append((event.type, event.path))
            if event.type == "remove" and event.path == "/workspace/w/renamed.txt":
                break
    assert "/workspace/w/new.txt" in {p for _, p in seen}, seen
    assert ("create", "/workspace/w/sub") in seen and ("rename", "/workspace/w/renamed.txt") in seen, seen
    assert ("create", "/workspace/w/sub/inner.txt") in seen and ("write", "/workspace/w/sub/inner.txt") in seen, seen
    assert ("remove", "/workspace/w/renamed.txt") in seen, seen
    assert watch.closed


def test_watch_can_be_closed_from_another_thread(box):
    watch = box.files.watch("/workspace")
    got = []
    reader = threading.Thread(target=lambda: got.extend(watch))
    reader.start()
    box.files.write("/workspace/ping", "x")
    assert wait_until(lambda: got, timeout=30)
    watch.close()
    reader.join(30)
    assert not reader.is_alive()


# ---------------------------------------------------------------- snapshots and forks

def test_snapshot_list_get_start_from_it_and_delete(bh, box):
    box.files.write("/workspace/state.txt", "v1")
    snapshot = box.snapshot("sdk-snap")
    try:
        assert snapshot.id.startswith("snap_") and snapshot.name == "sdk-snap" and snapshot.sandbox_id == box.id
        assert snapshot.memory is False and snapshot.image == "host" and snapshot.created_at is not None
        assert snapshot.id in [s.id for s in bh.snapshots.list()]
        assert bh.snapshots.get(snapshot.id) == snapshot
        box.files.write("/workspace/state.txt", "v2")
        with bh.sandboxes.create(from_snapshot=snapshot) as restored:
            assert restored.info.parent_snapshot == snapshot.id
            assert restored.files.read_text("/workspace/state.txt") == "v1"
            with pytest.raises(ConflictError) as in_use:
                bh.snapshots.delete(snapshot)
            assert in_use.value.code == "snapshot_in_use"
    finally:
        wait_until(lambda: _deleted(bh, snapshot.id), timeout=30)
    with pytest.raises(NotFoundError):
        bh.snapshots.get(snapshot.id)


def _deleted(bh, snapshot_id) -> bool:
    try:
        bh.snapshots.delete(snapshot_id)
        return True
    except ConflictError:
        return False


def test_snapshot_export_and_import_into_another_daemon(bh, box, daemon_factory, tmp_path):
    box.files.write("/workspace/portable.txt", "travels")
    snapshot = box.snapshot("portable")
    other_daemon = daemon_factory().start()
    other = Bulkhead(url=f"unix://{other_daemon.socket_path}", api_key=other_daemon.key)
    try:
        archive = tmp_path / "snap.tar.zst"
        size = bh.snapshots.export(snapshot).save_to(archive)
        assert size == archive.stat().st_size > 0
        imported = other.snapshots.import_(archive)  # from a path
        assert imported.id != snapshot.id and imported.name == "portable" and imported.image == "host"
        with other.sandboxes.create(from_snapshot=imported.id) as restored:
            assert restored.files.read_text("/workspace/portable.txt") == "travels"
        # Straight from one daemon's export stream into the other's import, no file between.
        streamed = other.snapshots.import_(bh.snapshots.export(snapshot))
        assert streamed.name == "portable" and streamed.id not in (imported.id, snapshot.id)
        with pytest.raises(InvalidRequestError):
            other.snapshots.import_(b"not a snapshot archive")
        other.snapshots.delete(imported)
        other.snapshots.delete(streamed.id)
        assert other.snapshots.list() == []
    finally:
        other.close()
        bh.snapshots.delete(snapshot)


def test_fork_makes_independent_copies(bh, box):
    box.files.write("/workspace/shared.txt", "before")
    forks = box.fork(2)
    try:
        assert len(forks) == 2 and len({f.id for f in forks} | {box.id}) == 3
        for i, child in enumerate(forks):
            assert child.state == "running" and child.files.read_text("/workspace/shared.txt") == "before"
            child.files.write("/workspace/shared.txt", f"child {i}")
        assert box.files.read_text("/workspace/shared.txt") == "before"
        assert forks[0].files.read_text("/workspace/shared.txt") == "child 0"
    finally:
        for child in forks:
            child.delete()
    with pytest.raises(InvalidRequestError):
        box.fork(0)


def test_memory_snapshot_fork_and_pause_to_disk_of_a_gvisor_sandbox(bh):
    if not bh.health().raw["runtimes"].get("gvisor", {}).get("available"):
        pytest.skip("this host has no gvisor runtime")
    with bh.sandboxes.create(runtime="gvisor") as box:
        counter = box.processes.start("i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done")
        assert wait_until(lambda: box.processes.get(counter.pid).info.stdout_offset > 0, timeout=20)
        snapshot = box.snapshot("with-memory", memory=True)
        assert snapshot.memory is True and snapshot.runtime == "gvisor"
        assert box.snapshot().memory is False
        copies = box.fork(2, memory=True)
        with bh.sandboxes.create(from_snapshot=snapshot) as restored:
            for sandbox in copies + [restored]:
                assert sandbox.processes.get(counter.pid).state == "running"
        for copy in copies:
            copy.delete()
        # Exported and imported here (this daemon's key vouches for its image), it goes on too.
        imported = bh.snapshots.import_(bh.snapshots.export(snapshot))
        assert imported.memory is True and imported.runtime == "gvisor"
        with bh.sandboxes.create(from_snapshot=imported) as restored:
            assert restored.processes.get(counter.pid).state == "running"
        files_only = bh.snapshots.import_(bh.snapshots.export(snapshot), memory=False)
        assert files_only.memory is False
        bh.snapshots.delete(imported)
        bh.snapshots.delete(files_only)
        box.pause(to_disk=True)
        assert box.state == "paused" and box.info.paused_to_disk is True
        box.resume()
        assert box.state == "running" and box.info.paused_to_disk is False
        assert box.processes.get(counter.pid).state == "running"
        bh.snapshots.delete(snapshot)


# ---------------------------------------------------------------- network

@pytest.fixture
def net_bh(net_daemon):
    """An SDK client to the daemon inside the fake internet, over its unix socket."""
    with Bulkhead(url=str(net_daemon.socket_path), api_key=net_daemon.key) as client:
        yield client


def test_network_policy_and_egress_log(net_bh):
    curl = ["curl", "-sS", "--fail", "--max-time", "15"]
    with net_bh.sandboxes.create(network={"mode": "allowlist", "allow": ["a.test"]}) as sandbox:
        assert sandbox.network == bulkhead.Network("allowlist", ["a.test"])
        assert sandbox.egress_log() == []
        allowed = sandbox.exec(curl + ["http://a.test/"], timeout_s=60)
        assert allowed.exit_code == 0 and "hello from a.test" in allowed.stdout, allowed
        assert sandbox.exec(curl + ["http://other.test/"], timeout_s=60).exit_code != 0
        log = sandbox.egress_log()
        assert any(e.verdict == "allowed" and e.name == "a.test" and e.protocol == "tcp" and e.port == 80
                   and e.bytes_in > 0 for e in log), log
        assert any(e.verdict == "denied" and e.name == "other.test" and e.reason for e in log), log
        assert all(e.time is not None for e in log) and len(sandbox.egress_log(limit=1)) == 1
        # Change the policy while it runs.
        assert sandbox.set_network("allowlist", ["other.test"]).network.allow == ["other.test"]
        assert sandbox.exec(curl + ["http://other.test/"], timeout_s=60).exit_code == 0
        assert sandbox.exec(curl + ["http://a.test/"], timeout_s=60).exit_code != 0
        # A deny entry wins over the allow entry naming the same destination.
        denied = sandbox.set_network("allowlist", ["*.test"], deny=["other.test"])
        assert denied.network == bulkhead.Network("allowlist", ["*.test"], ["other.test"])
        assert sandbox.exec(curl + ["http://other.test/"], timeout_s=60).exit_code != 0
        assert any(e.verdict == "denied" and e.name == "other.test" and "deny entry" in (e.reason or "")
                   for e in sandbox.egress_log()), sandbox.egress_log()
        assert sandbox.set_network("none").network == bulkhead.Network("none", [])
        assert sandbox.exec(curl + ["http://other.test/"], timeout_s=60).exit_code != 0
        with pytest.raises(InvalidRequestError):
            sandbox.set_network("sideways")
        with pytest.raises(InvalidRequestError):
            sandbox.set_network("none", ["a.test"])


# ---------------------------------------------------------------- ports

HTTP_APP = r'''
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def reply(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-App", "yes")
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith("/missing"):
            self.reply(404, b"no such page")
        else:
            self.reply(200, ("GET %s auth=%s" % (self.path, self.headers.get("Authorization"))).encode())
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.reply(201, b"posted " + body)

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), App).serve_forever()
'''



def start_app(sandbox, name: str, source: str, port: int):
    sandbox.files.write(f"/tmp/app_{name}.py", source)  # not http.py: that would shadow the http module
    sandbox.processes.start(["python3", f"/tmp/app_{name}.py", str(port)], tag=name)
    wait_listening(sandbox, port)


def test_ports_request_url_preview_tcp_and_websocket(bh, box, daemon):
    start_app(box, "http", HTTP_APP, 8000)
    r = box.request(8000, "GET", "/hello?x=1")
    assert r.status == 200 and r.text == "GET /hello?x=1 auth=None" and r.headers["x-app"] == "yes"
    posted = box.request(8000, "POST", "submit", body="payload", headers={"Content-Type": "text/plain"})
    assert (posted.status, posted.body) == (201, b"posted payload")
    missing = box.request(8000, "GET", "/missing")  # the app's own 404 is an answer, not an error
    assert (missing.status, missing.text) == (404, "no such page")
    with pytest.raises(ServerError) as nothing:
        box.request(8001)
    assert nothing.value.status == 502 and nothing.value.code == "port_not_listening"

    # The same through the URL (API key as a bearer token) and the preview host name (no key).
    url = box.port_url(8000, "/via-url")
    assert url == f"http://127.0.0.1:{daemon.port}/v1/sandboxes/{box.id}/ports/8000/via-url"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {daemon.key}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.read() == b"GET /via-url auth=None"
    preview = urllib.parse.urlsplit(box.preview_url(8000, "/previewed"))
    assert preview.netloc == f"8000-{box.id}.localhost:7420"
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
    conn.request("GET", preview.path, headers={"Host": preview.netloc})
    assert conn.getresponse().read() == b"GET /previewed auth=None"
    conn.close()
    with pytest.raises(BulkheadConnectionError):
        Bulkhead(url=str(daemon.socket_path), api_key=daemon.key).sandboxes.get(box.id).port_url(8000)
    # Over the unix socket, request() works the same.
    with Bulkhead(url=str(daemon.socket_path), api_key=daemon.key) as unix_client:
        assert unix_client.sandboxes.get(box.id).request(8000, path="/unix").text == "GET /unix auth=None"

    start_app(box, "echo", ECHO_APP, 7000)
    with box.connect_tcp(7000, timeout=30) as sock:
        sock.sendall(b"raw bytes")
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while True:
            piece = sock.recv(65536)
            if not piece:
                break
            received += piece
    assert received == b"raw bytes"

    start_app(box, "ws", WS_APP, 8002)
    ws = box.websocket(8002, "/socket")
    ws.send_text("abc")
    assert ws.recv(30) == (bulkhead.websocket.OP_TEXT, b"abc")
    ws.send_binary(b"\x00\x01" * 100)
    assert ws.recv(30) == (bulkhead.websocket.OP_BINARY, b"\x00\x01" * 100)
    ws.close()


def test_a_private_preview_needs_the_token_the_sdk_gives(bh, box, daemon):
    def by_host(url: str, headers=None):
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
        try:
            target = parts.path + ("?" + parts.query if parts.query else "")
            conn.request("GET", target, headers={"Host": parts.netloc, **(headers or {})})
            answer = conn.getresponse()
            return answer.status, dict(answer.getheaders()), answer.read()
        finally:
            conn.close()

    assert box.info.preview == bulkhead.Preview(public=True, token=None)
    assert box.preview_token is None and box.preview_headers() == {}
    assert box.preview_url(8000, for_browser=True) == box.preview_url(8000)
    with bh.sandboxes.create(private_preview=True) as private:
        token = private.preview_token
        assert token and private.info.preview.public is False
        assert bh.sandboxes.get(private.id).preview_token == token
        start_app(private, "http", HTTP_APP, 8000)
        url = private.preview_url(8000, "/page?a=1")
        assert by_host(url)[0] == 403
        status, _, body = by_host(url, private.preview_headers())
        assert (status, body) == (200, b"GET /page?a=1 auth=None")
        browser = private.preview_url(8000, "/page?a=1", for_browser=True)
        assert browser == url + "&bulkhead_preview_token=" + token
        status, headers, _ = by_host(browser)
        assert status == 303 and headers["Location"] == "/page?a=1"
        assert private.request(8000, path="/keyed").text == "GET /keyed auth=None"  # the key is enough


# ---------------------------------------------------------------- volumes and images

def test_volumes_create_mount_share_and_delete(bh):
    name = f"sdk-{uuid.uuid4().hex[:8]}"
    volume = bh.volumes.create(name, size_mb=64)
    assert (volume.name, volume.size_mb, volume.mounted_by) == (name, 64, [])
    try:
        assert name in [v.name for v in bh.volumes.list()]
        with bh.sandboxes.create(volumes=[VolumeMount(name, "/data")]) as writer:
            assert writer.info.volumes == [VolumeMount(name, "/data", False)]
            writer.files.write("/data/shared.txt", "across sandboxes")
            with bh.sandboxes.create(volumes=[{"name": name, "path": "/ro", "read_only": True}]) as reader:
                assert reader.files.read_text("/ro/shared.txt") == "across sandboxes"
                assert reader.exec("echo x > /ro/new").exit_code != 0
                assert set(bh.volumes.get(name).mounted_by) == {writer.id, reader.id}
            with pytest.raises(ConflictError):
                bh.volumes.delete(name)
        assert bh.volumes.get(name).used_bytes >= 0
        with pytest.raises(InvalidRequestError):
            bh.volumes.create("Bad Name")
        with pytest.raises(ConflictError):
            bh.volumes.create(name)
    finally:
        bh.volumes.delete(name)
    with pytest.raises(NotFoundError):
        bh.volumes.get(name)


def test_images_list_import_run_delete(bh, hello_binary, tmp_path):
    assert "host" in [i.name for i in bh.images.list()]
    name = f"sdk-hello-{uuid.uuid4().hex[:8]}"
    tarball = tmp_path / "rootfs.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        for path, data, mode in (("hello", hello_binary.read_bytes(), 0o755),
                                 ("etc/passwd", b"root:x:0:0:root:/root:/hello\n", 0o644),
                                 ("etc/group", b"root:x:0:\n", 0o644)):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    image = bh.images.import_(name, tarball, content_type="application/gzip")
    try:
        assert image.name == name and image.source == "tarball" and image.size_bytes > 0
        assert name in [i.name for i in bh.images.list()]
        with bh.sandboxes.create(image=name) as sandbox:
            assert sandbox.image == name
            assert sandbox.exec(["/hello"]).check().stdout == "hello from a bulkhead image\n"
    finally:
        bh.images.delete(name)
    assert name not in [i.name for i in bh.images.list()]
    with pytest.raises(InvalidRequestError):
        bh.images.import_("not-a-tarball", b"garbage")
