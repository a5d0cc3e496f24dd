"""sandbox.commands through the Python SDK: foreground runs with streaming callbacks, background
runs with wait/connect, stdin, list and kill, timeouts, non-zero exits, cwd/envs/user."""

import hashlib

import pytest
from e2b import AuthenticationException, CommandExitException, SandboxNotRunningException, TimeoutException

# A shell loop that waits (at most ~30 s) for a file, so a test can make a command go on
# exactly when it wants, without racing a timer.
def wait_for_file(path: str) -> str:
    return f"for i in $(seq 1 600); do [ -e {path} ] && break; sleep 0.05; done; [ -e {path} ]"


def test_foreground_output_and_exit_code(sbx):
    r = sbx.commands.run("echo hello; echo oops >&2")
    assert (r.exit_code, r.stdout, r.stderr, r.error) == (0, "hello\n", "oops\n", None)


def test_callbacks_stream_while_running(sbx):
    """The first line reaches on_stdout while the command still runs: the callback itself
    releases the command (through another SDK call), which then prints the second line."""
    marker = "/tmp/cmd-stream-go"
    out, err = [], []

    def on_stdout(chunk):
        out.append(chunk)
        if "first" in "".join(out) and not sbx.files.exists(marker):
            sbx.files.write(marker, "go")

    r = sbx.commands.run(f"echo first; {wait_for_file(marker)} && echo second; echo to-err >&2",
                         on_stdout=on_stdout, on_stderr=err.append)
    assert r.stdout == "first\nsecond\n"
    assert "".join(out) == "first\nsecond\n"
    assert "".join(err) == r.stderr == "to-err\n"


def test_large_and_multibyte_output(sbx):
    r = sbx.commands.run("seq 1 200000")
    expected = "".join(f"{i}\n" for i in range(1, 200001))
    assert hashlib.sha256(r.stdout.encode()).hexdigest() == hashlib.sha256(expected.encode()).hexdigest()
    # 2-byte characters: however the stream is cut into chunks, none is broken.
    r = sbx.commands.run("for i in $(seq 1 20000); do printf 'é'; done")
    assert r.stdout == "é" * 20000


def test_non_zero_exit_raises(sbx):
    with pytest.raises(CommandExitException) as info:
        sbx.commands.run("echo partial; echo bad >&2; exit 3")
    e = info.value
    assert (e.exit_code, e.stdout, e.stderr) == (3, "partial\n", "bad\n")
    assert e.error  # "exit status 3"


def test_cwd_envs_and_user(sbx):
    r = sbx.commands.run('pwd; echo "$FOO|$BAR"; id -un; id -u', cwd="/tmp", envs={"FOO": "foo value", "BAR": "b=1"})
    assert r.stdout == "/tmp\nfoo value|b=1\nuser\n1000\n"
    r = sbx.commands.run("id -un; id -u; echo $HOME", user="root")
    assert r.stdout == "root\n0\n/root\n"
    r = sbx.commands.run("touch /root/e2b-root-only && echo ok", user="root")
    assert r.stdout == "ok\n"
    with pytest.raises(CommandExitException):
        sbx.commands.run("touch /root/e2b-user-cannot")


def test_background_wait(sbx):
    handle = sbx.commands.run("echo started; echo err >&2; exit 0", background=True)
    assert handle.pid > 0
    r = handle.wait()
    assert (r.exit_code, r.stdout, r.stderr) == (0, "started\n", "err\n")


def test_background_failure_on_wait(sbx):
    handle = sbx.commands.run("echo x; exit 7", background=True)
    with pytest.raises(CommandExitException) as info:
        handle.wait()
    assert (info.value.exit_code, info.value.stdout) == (7, "x\n")


def test_connect_to_running_command(sbx):
    go = "/tmp/cmd-connect-go"
    handle = sbx.commands.run(f"echo before; {wait_for_file(go)} && echo after", background=True, timeout=0)
    pid = handle.pid
    # Read up to "before" first, so it is known to be out before the disconnect.
    for stdout, _, _ in handle:
        if stdout and "before" in stdout:
            break
    handle.disconnect()

    attached = sbx.commands.connect(pid)
    assert attached.pid == pid
    sbx.files.write(go, "go")
    r = attached.wait()
    # Connect sends only what comes after it.
    assert r.exit_code == 0
    assert r.stdout == "after\n"


def test_stdin_send_and_close(sbx):
    handle = sbx.commands.run("cat; echo done", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "hello\n")
    handle.send_stdin(b"bytes \x00\x01 ok\n")
    sbx.commands.close_stdin(handle.pid)
    r = handle.wait()
    assert r.stdout == "hello\nbytes \x00\x01 ok\ndone\n"


def test_list_and_kill(sbx):
    handle = sbx.commands.run("sleep 600", background=True, timeout=0, envs={"TAGGED": "yes"}, cwd="/tmp")
    listed = {p.pid: p for p in sbx.commands.list()}
    assert handle.pid in listed
    info = listed[handle.pid]
    assert info.cmd == "/bin/bash"
    assert info.args == ["-l", "-c", "sleep 600"]
    assert info.envs.get("TAGGED") == "yes"
    assert info.cwd == "/tmp"

    assert sbx.commands.kill(handle.pid) is True
    with pytest.raises(CommandExitException) as killed:
        handle.wait()
    assert killed.value.exit_code == -1  # died of a signal
    assert handle.pid not in {p.pid for p in sbx.commands.list()}
    assert sbx.commands.kill(handle.pid) is False


def test_handle_kill(sbx):
    handle = sbx.commands.run("sleep 600", background=True, timeout=0)
    assert handle.kill() is True
    with pytest.raises(CommandExitException):
        handle.wait()


def test_timeout_raises_and_ends_process(sbx):
    with pytest.raises(TimeoutException):
        sbx.commands.run("echo $$ > /tmp/cmd-timeout.pid; sleep 600", timeout=1)
    pid = sbx.files.read("/tmp/cmd-timeout.pid").strip()
    # The deadline ended the process itself, not only the stream.
    r = sbx.commands.run(f"for i in $(seq 1 100); do kill -0 {pid} 2>/dev/null || break; sleep 0.1; done; "
                         f"kill -0 {pid} 2>/dev/null && echo alive || echo gone")
    assert r.stdout == "gone\n"


def test_killing_the_sandbox_during_a_command_raises_that_it_was_killed(new_sandbox):
    """As with E2B: the stream is cut, the SDK's health probe gets 502 and the error says so."""
    sandbox = new_sandbox()
    handle = sandbox.commands.run("sleep 60", background=True)
    sandbox.kill()
    with pytest.raises(SandboxNotRunningException) as raised:  # a TimeoutException
        handle.wait()
    assert isinstance(raised.value, TimeoutException)
    assert "sandbox was killed or reached its end of life" in str(raised.value)


def test_unknown_pid(sbx):
    assert sbx.commands.kill(999999) is False


def test_stream_input(sbx):
    handle = sbx.commands.run("cat; echo end", background=True, stdin=True)
    sbx.commands.stream_input(handle.pid, [b"one\n", "two\n", b"\xc3\xa9\n"])
    sbx.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "one\ntwo\né\nend\n"


def test_unknown_user(sbx):
    with pytest.raises(AuthenticationException):
        sbx.commands.run("true", user="no-such-user")
