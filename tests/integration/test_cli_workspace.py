"""The CLI's file and process commands against a real daemon and real sandboxes: cp, ls ID,
watch, exec -d / ps / logs / kill, and `bulkhead shell` driven through tmux like a person would."""

import hashlib
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import time
import uuid

import pytest

from harness import BULKHEAD, wait_until


@pytest.fixture
def cli(daemon):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env["BULKHEAD_STATE"] = str(daemon.state_dir)

    def run(*args, input=None, timeout=120, text=True) -> subprocess.CompletedProcess:
        return subprocess.run([str(BULKHEAD), *args], env=env, input=input, capture_output=True, text=text,
                              timeout=timeout)

    run.env = env
    return run


@pytest.fixture
def tmp_path(session_dir):
    """A local scratch directory of the test's own, removed afterwards."""
    path = session_dir / f"cli-ws-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def sh(cli, sandbox, script) -> str:
    r = cli("exec", sandbox, "--", "sh", "-c", script)
    assert r.returncode == 0, r
    return r.stdout


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- cp

def test_cp_file_into_and_out_of_a_sandbox_keeps_bytes_and_mode(cli, sandbox, tmp_path):
    data = os.urandom(3 << 20) + b"\x00end"
    local = tmp_path / "blob.bin"
    local.write_bytes(data)
    local.chmod(0o750)

    r = cli("cp", str(local), f"{sandbox}:/workspace/")  # into an existing directory: keeps its name
    assert r.returncode == 0, r
    assert sh(cli, sandbox, "stat -c '%a %s' /workspace/blob.bin; sha256sum < /workspace/blob.bin").split() == \
        ["750", str(len(data)), sha256(data), "-"]

    r = cli("cp", str(local), f"{sandbox}:/workspace/renamed.bin")  # to a new name
    assert r.returncode == 0, r
    assert sh(cli, sandbox, "sha256sum < /workspace/renamed.bin").split()[0] == sha256(data)

    out = tmp_path / "out"
    out.mkdir()
    r = cli("cp", f"{sandbox}:/workspace/blob.bin", str(out))
    assert r.returncode == 0, r
    assert (out / "blob.bin").read_bytes() == data
    assert (out / "blob.bin").stat().st_mode & 0o7777 == 0o750
    r = cli("cp", f"{sandbox}:blob.bin", str(out / "again.bin"))  # relative to the workdir
    assert r.returncode == 0, r
    assert (out / "again.bin").read_bytes() == data
    assert sorted(p.name for p in out.iterdir()) == ["again.bin", "blob.bin"]  # no temporary left


def test_cp_directory_tree_with_a_symlink_both_ways(cli, sandbox, tmp_path):
    tree = tmp_path / "project"
    (tree / "src" / "pkg").mkdir(parents=True)
    (tree / "empty").mkdir()
    (tree / "README").write_text("read me\n")
    (tree / "src" / "main.py").write_text("print(42)\n")
    (tree / "src" / "pkg" / "mod.py").write_bytes(b"\xff\xfe binary")
    (tree / "src" / "run.sh").write_text("#!/bin/sh\n")
    (tree / "src" / "run.sh").chmod(0o755)
    (tree / "src" / "link").symlink_to("../README")

    r = cli("cp", str(tree), f"{sandbox}:/workspace")  # existing dir: lands as /workspace/project
    assert r.returncode == 0, r
    listing = sh(cli, sandbox, "cd /workspace/project && find . | LC_ALL=C sort && readlink src/link && cat src/link "
                               "&& stat -c %a src/run.sh")
    assert listing.split("\n") == [".", "./README", "./empty", "./src", "./src/link", "./src/main.py", "./src/pkg",
                                   "./src/pkg/mod.py", "./src/run.sh", "../README", "read me", "755", ""]

    # Changed inside, copied back out to a path that does not exist yet.
    sh(cli, sandbox, "echo changed >> /workspace/project/src/main.py; ln -s /etc/passwd /workspace/project/host")
    back = tmp_path / "back"
    r = cli("cp", f"{sandbox}:/workspace/project", str(back))
    # A link planted in the sandbox that leads out is refused (the copy fails), the rest arrives.
    assert r.returncode == 1 and "refused tar entry 'host'" in r.stderr and "(unsafe_entry)" in r.stderr, r
    assert not os.path.lexists(back / "host")
    assert (back / "src" / "main.py").read_text() == "print(42)\nchanged\n"
    assert (back / "src" / "pkg" / "mod.py").read_bytes() == b"\xff\xfe binary"
    assert (back / "empty").is_dir()
    assert os.readlink(back / "src" / "link") == "../README"
    assert (back / "src" / "link").read_text() == "read me\n"
    assert (back / "src" / "run.sh").stat().st_mode & 0o777 == 0o755

    # Into an existing directory it lands under its own name; SRC/. copies the contents.
    sh(cli, sandbox, "rm /workspace/project/host")
    into = tmp_path / "into"
    into.mkdir()
    assert cli("cp", f"{sandbox}:/workspace/project", str(into)).returncode == 0
    assert (into / "project" / "README").read_text() == "read me\n"
    contents = tmp_path / "contents"
    contents.mkdir()
    assert cli("cp", f"{sandbox}:/workspace/project/.", str(contents)).returncode == 0
    assert (contents / "README").read_text() == "read me\n"


def test_cp_stdin_to_a_sandbox_file_and_a_sandbox_file_to_stdout(cli, sandbox):
    payload = bytes(range(256)) * 1000
    r = cli("cp", "-", f"{sandbox}:/workspace/from-stdin.bin", input=payload, text=False)
    assert r.returncode == 0, r
    r = cli("cp", f"{sandbox}:/workspace/from-stdin.bin", "-", text=False)
    assert r.returncode == 0, r
    assert r.stdout == payload


def test_cp_reports_missing_paths_and_bad_targets(cli, sandbox, tmp_path):
    r = cli("cp", f"{sandbox}:/workspace/nope", str(tmp_path))
    assert r.returncode == 1 and "/workspace/nope" in r.stderr and "(not_found)" in r.stderr, r
    r = cli("cp", str(tmp_path / "nope"), f"{sandbox}:/workspace/")
    assert r.returncode == 1 and "nope" in r.stderr, r
    (tmp_path / "dir").mkdir()
    sh(cli, sandbox, "echo x > /workspace/file")
    r = cli("cp", str(tmp_path / "dir"), f"{sandbox}:/workspace/file")
    assert r.returncode == 2 and "onto file" in r.stderr, r
    r = cli("cp", str(tmp_path), str(tmp_path / "x"))
    assert r.returncode == 2 and "ID:PATH" in r.stderr, r
    r = cli("cp", "-", "nosuchsandbox:/x", input="x")
    assert r.returncode == 1 and "(sandbox_not_found)" in r.stderr, r


# ---------------------------------------------------------------- ls

def table(text: str) -> list[tuple[str, str]]:
    """`bulkhead ls ID`'s table as (mode, name) rows."""
    lines = text.splitlines()
    assert lines[0].split() == ["MODE", "SIZE", "MODIFIED", "NAME"], text
    name_at = lines[0].index("NAME")
    return [(line.split()[0], line[name_at:]) for line in lines[1:]]


def test_ls_shows_files_of_a_sandbox(cli, sandbox):
    sh(cli, sandbox, "mkdir -p /workspace/src/deep && printf 12345 > /workspace/src/a.txt && "
                     "chmod 640 /workspace/src/a.txt && ln -s src/a.txt /workspace/link && touch /workspace/src/deep/z")
    r = cli("ls", sandbox)
    assert r.returncode == 0, r
    assert table(r.stdout) == [("lrwxrwxrwx", "link -> src/a.txt"), ("drwxr-xr-x", "src")]

    deeper = cli("ls", sandbox, "/workspace/src", "-d", "2")
    assert deeper.returncode == 0, deeper
    assert table(deeper.stdout) == [("-rw-r-----", "a.txt"), ("drwxr-xr-x", "deep"), ("-rw-r--r--", "deep/z")]
    assert deeper.stdout.splitlines()[1].split()[1] == "5"  # the size column

    as_json = json.loads(cli("ls", sandbox, "src", "--json").stdout)
    assert sorted(e["name"] for e in as_json["entries"]) == ["a.txt", "deep"]
    one_file = cli("ls", sandbox, "src/a.txt")
    assert one_file.returncode == 0 and table(one_file.stdout) == [("-rw-r-----", "a.txt")], one_file

    missing = cli("ls", sandbox, "/workspace/nope")
    assert missing.returncode == 1 and "(not_found)" in missing.stderr, missing
    # Without an id, ls still lists sandboxes.
    assert sandbox in cli("ls").stdout


# ---------------------------------------------------------------- watch

class LineReader:
    """Reads lines from a pipe with a deadline, so a missing event fails the test instead of hanging it."""

    def __init__(self, pipe):
        self.fd = pipe.fileno()
        self.buffer = b""

    def readline(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 4096)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def until(self, predicate, timeout: float = 30) -> list[str]:
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.readline(deadline - time.monotonic())
            if line is None:
                break
            seen.append(line)
            if predicate(line):
                return seen
        raise AssertionError(f"never saw the line; got {seen}")


def test_watch_prints_changes_as_they_happen(cli, sandbox):
    sh(cli, sandbox, "mkdir -p /workspace/w")
    # SIGINT as a terminal gives it: a suite started in the background (`cmd &` in a script)
    # passes SIGINT on ignored, and an ignored SIGINT would not stop the watch.
    proc = subprocess.Popen([str(BULKHEAD), "watch", sandbox, "/workspace/w"], env=cli.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        out, err = LineReader(proc.stdout), LineReader(proc.stderr)
        # This line comes once the watch is set: whatever happens from now on is reported.
        ready = err.readline(30)
        assert ready is not None and ready.startswith("watching /workspace/w"), ready
        sh(cli, sandbox, "echo hi > /workspace/w/new.txt && mkdir /workspace/w/sub")
        seen = out.until(lambda line: line == "create /workspace/w/sub/")
        assert "create /workspace/w/new.txt" in seen
        assert "write  /workspace/w/new.txt" in seen
        # Recursive by default: the new subdirectory is watched too.
        sh(cli, sandbox, "touch /workspace/w/sub/inner && rm /workspace/w/new.txt")
        seen = out.until(lambda line: line == "remove /workspace/w/new.txt")
        assert "create /workspace/w/sub/inner" in seen
        assert proc.poll() is None  # runs until stopped
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == -signal.SIGINT
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_watch_json_lines(cli, sandbox):
    proc = subprocess.Popen([str(BULKHEAD), "watch", sandbox, "--json", "--no-recursive"], env=cli.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert LineReader(proc.stderr).readline(30) is not None
        sh(cli, sandbox, "mkdir /workspace/jd && touch /workspace/jd/skipped && touch /workspace/top")
        seen = LineReader(proc.stdout).until(lambda line: json.loads(line)["path"] == "/workspace/top")
        events = [json.loads(line) for line in seen]
        assert {"type": "create", "path": "/workspace/jd", "dir": True} in events
        # --no-recursive: nothing from inside the new subdirectory.
        assert not any(e["path"].startswith("/workspace/jd/") for e in events)
    finally:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------- background processes

def test_exec_detach_ps_logs_follow_and_exit_code(cli, sandbox):
    tag = f"job-{uuid.uuid4().hex[:6]}"
    r = cli("exec", "-d", "--tag", tag, sandbox, "--", "sh", "-c", "echo started; sleep 1; echo done >&2; exit 3")
    assert r.returncode == 0, r
    pid = int(r.stdout)

    ps = cli("ps", sandbox)
    assert ps.returncode == 0, ps
    row = next(line.split() for line in ps.stdout.splitlines() if line.split()[0] == str(pid))
    assert row[1] == tag

    logs = cli("logs", "-f", sandbox, tag)
    assert logs.returncode == 3, logs
    assert logs.stdout == "started\n"
    assert logs.stderr == "done\n"

    # By pid too, and from an offset: only what follows it.
    logs = cli("logs", sandbox, str(pid), "--offset", "3")
    assert (logs.returncode, logs.stdout) == (0, "rted\n"), logs
    processes = json.loads(cli("ps", sandbox, "--json").stdout)["processes"]
    mine = next(p for p in processes if p["pid"] == pid)
    assert (mine["state"], mine["exit_code"], mine["tag"]) == ("exited", 3, tag)


def test_dev_server_in_the_background_then_kill(cli, sandbox):
    r = cli("exec", "-d", "--tag", "web", sandbox, "--", "python3", "-m", "http.server", "8000")
    assert r.returncode == 0, r
    fetch = ("import time, urllib.request\n"
             "for _ in range(100):\n"
             "    try:\n"
             "        print(len(urllib.request.urlopen('http://127.0.0.1:8000/').read())); break\n"
             "    except OSError: time.sleep(0.1)\n")
    got = cli("exec", sandbox, "--", "python3", "-c", fetch)
    assert got.returncode == 0 and got.stdout.strip().isdigit(), got
    # The server's access log (stderr) is kept while it runs.
    logs = cli("logs", sandbox, "web")
    assert logs.returncode == 0 and '"GET / HTTP/1.1" 200' in logs.stderr, logs

    follower = subprocess.Popen([str(BULKHEAD), "logs", "-f", sandbox, "web"], env=cli.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert cli("kill", sandbox, "web").returncode == 0
        assert follower.wait(30) == 128 + signal.SIGTERM  # logs -f ends with the process, as a shell reports it
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    again = cli("kill", "-s", "KILL", sandbox, "web")
    assert again.returncode == 1 and "(process_exited)" in again.stderr, again
    assert cli("kill", "-s", "NOSUCHSIG", sandbox, "web").returncode == 2
    assert "(process_not_found)" in cli("logs", sandbox, "nosuchtag").stderr


def test_exec_detach_tag_must_be_unique_among_running_processes(cli, sandbox):
    assert cli("exec", "-d", "--tag", "one", sandbox, "--", "sleep", "60").returncode == 0
    dup = cli("exec", "-d", "--tag", "one", sandbox, "--", "sleep", "60")
    assert dup.returncode == 1 and dup.stderr.startswith("bulkhead: "), dup
    assert cli("kill", "-s", "KILL", sandbox, "one").returncode == 0


# ---------------------------------------------------------------- shell

class Tmux:
    """A tmux server of the test's own (its own socket), killed at the end."""

    def __init__(self, env):
        self.socket = f"bh-{uuid.uuid4().hex[:10]}"
        self.env = env

    def __call__(self, *args, check=True) -> subprocess.CompletedProcess:
        r = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], env=self.env,
                           capture_output=True, text=True, timeout=30)
        if check:
            assert r.returncode == 0, r
        return r

    def screen(self, target) -> list[str]:
        return [line.rstrip() for line in self("capture-pane", "-p", "-t", target).stdout.splitlines()]

    def wait_for_line(self, target, wanted, timeout=30) -> list[str]:
        lines = wait_until(lambda: (lambda s: s if wanted in s else None)(self.screen(target)), timeout)
        assert lines, f"{wanted!r} never showed; screen:\n" + "\n".join(self.screen(target))
        return lines

    def kill(self):
        self("kill-server", check=False)
        # tmux leaves its socket file behind.
        tmpdir = self.env.get("TMUX_TMPDIR") or "/tmp"
        try:
            os.unlink(os.path.join(tmpdir, f"tmux-{os.getuid()}", self.socket))
        except FileNotFoundError:
            pass


@pytest.fixture
def tmux(cli):
    t = Tmux(cli.env)
    yield t
    t.kill()


def test_shell_in_tmux_like_a_person(cli, sandbox, tmux, tmp_path):
    exit_file = tmp_path / "exit-code"
    command = (f"{shlex.quote(str(BULKHEAD))} shell {sandbox}; echo $? > {shlex.quote(str(exit_file))}")
    tmux("new-session", "-d", "-s", "t", "-x", "120", "-y", "40", command)
    tmux("set-option", "-t", "t", "status", "off")  # the whole 120x40 window is the pane

    # A prompt appears (ends in '#' for root), then a command runs.
    wait_until(lambda: any(line.endswith("#") for line in tmux.screen("t")), 30)
    tmux("send-keys", "-t", "t", "echo $((6*7))", "Enter")
    tmux.wait_for_line("t", "42")

    tmux("send-keys", "-t", "t", "stty size", "Enter")
    tmux.wait_for_line("t", "40 120")
    tmux("resize-window", "-t", "t", "-x", "100", "-y", "30")
    wait_until(lambda: tmux("display-message", "-p", "-t", "t", "#{pane_width}x#{pane_height}").stdout.strip()
               == "100x30", 10)
    tmux("send-keys", "-t", "t", "clear; stty size", "Enter")
    tmux.wait_for_line("t", "30 100")

    # Ctrl-C reaches the sandbox's foreground command, not bulkhead.
    tmux("send-keys", "-t", "t", "sleep 1000", "Enter")
    time.sleep(0.5)
    tmux("send-keys", "-t", "t", "C-c")
    tmux("send-keys", "-t", "t", "clear; echo after-$((1+1))", "Enter")
    tmux.wait_for_line("t", "after-2")

    tmux("send-keys", "-t", "t", "exit 7", "Enter")
    assert wait_until(lambda: tmux("has-session", "-t", "t", check=False).returncode != 0, 30), \
        "the tmux session did not end after exit"
    assert exit_file.read_text().strip() == "7"


def test_shell_restores_the_terminal_when_bulkhead_is_killed(cli, sandbox, tmux, tmp_path):
    tmux("new-session", "-d", "-s", "r", "-x", "100", "-y", "30", "bash --norc --noprofile -i")
    tmux("send-keys", "-t", "r", f"{shlex.quote(str(BULKHEAD))} shell {sandbox} --cmd \"PS1='inside> ' exec sh\"",
         "Enter")
    tmux.wait_for_line("r", "inside>")
    shells = subprocess.run(["pgrep", "-f", f"{BULKHEAD} shell {sandbox}"], capture_output=True, text=True)
    pids = [int(p) for p in shells.stdout.split()]
    assert len(pids) == 1, shells
    os.kill(pids[0], signal.SIGTERM)
    # Keys typed before bulkhead is gone would still be read by it.
    assert wait_until(lambda: not os.path.exists(f"/proc/{pids[0]}"), 30)
    tmux("send-keys", "-t", "r", "echo code=$?; stty -a | grep -o -- '-\\?icanon '", "Enter")
    tmux.wait_for_line("r", "code=143")
    # Cooked mode is back: "icanon" rather than "-icanon".
    assert wait_until(lambda: "icanon" in [line.strip() for line in tmux.screen("r")], 10), tmux.screen("r")
    # The remote shell was hung up on, not left waiting for input.
    assert wait_until(lambda: all(p["state"] == "exited"
                                  for p in json.loads(cli("ps", sandbox, "--json").stdout)["processes"]), 30)


def test_shell_without_a_terminal_reads_stdin_and_exits_with_the_shells_code(cli, sandbox):
    r = cli("shell", sandbox, input="echo $((6*7))\nstty size\nexit 5\n", timeout=60)
    assert r.returncode == 5, r
    lines = [line.strip() for line in r.stdout.replace("\r", "\n").split("\n")]
    assert "42" in lines
    assert "24 80" in lines  # no terminal to copy a size from: the classic one

    r = cli("shell", sandbox, "--cmd", "cat", input="hello\n", timeout=60)
    assert r.returncode == 0, r
    assert "hello" in r.stdout


def test_shell_of_a_missing_sandbox_fails_cleanly(cli):
    r = cli("shell", "nosuchsandbox", input="")
    assert r.returncode == 1 and r.stderr.startswith("bulkhead: ") and "(sandbox_not_found)" in r.stderr, r
