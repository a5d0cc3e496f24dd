"""sandbox.pty through the Python SDK: create, send_stdin, resize (seen by `stty size`), kill."""

import pytest
from e2b import CommandExitException, PtySize


def read_until(handle, text: str, seen: bytearray) -> str:
    """PTY output from `handle` until `text` has appeared; the stream's own timeout bounds it."""
    for _, _, pty in handle:
        if pty is not None:
            seen.extend(pty)
            if text.encode() in seen:
                return seen.decode(errors="replace")
    raise AssertionError(f"the PTY ended before {text!r}; got {bytes(seen)!r}")


def test_pty_input_resize_and_exit(sbx):
    handle = sbx.pty.create(PtySize(rows=24, cols=80), timeout=60)
    assert handle.pid > 0
    seen = bytearray()
    # $((...)) makes the marker differ from the echoed input line.
    sbx.pty.send_stdin(handle.pid, b"stty size; echo MARK$((40+2))\n")
    out = read_until(handle, "MARK42", seen)
    assert "24 80\r\n" in out

    sbx.pty.resize(handle.pid, PtySize(rows=30, cols=100))
    seen.clear()
    sbx.pty.send_stdin(handle.pid, b"stty size; echo SIZE$((1+1)); tty; echo $TERM; id -un\n")
    out = read_until(handle, "\r\nuser\r\n", seen)
    assert "30 100\r\nSIZE2\r\n" in out
    assert "/dev/pts/" in out
    assert "xterm-256color" in out

    sbx.pty.send_stdin(handle.pid, b"exit 0\n")
    r = handle.wait()
    assert r.exit_code == 0
    assert handle.pid not in {p.pid for p in sbx.commands.list()}


def test_pty_kill(sbx):
    handle = sbx.pty.create(PtySize(rows=10, cols=40), timeout=60)
    assert handle.pid in {p.pid for p in sbx.commands.list()}
    assert sbx.pty.kill(handle.pid) is True
    with pytest.raises(CommandExitException):
        handle.wait()
    assert handle.pid not in {p.pid for p in sbx.commands.list()}
    assert sbx.pty.kill(handle.pid) is False


def test_pty_as_root_with_cwd_and_envs(sbx):
    handle = sbx.pty.create(PtySize(rows=24, cols=80), user="root", cwd="/tmp", envs={"PTY_VAR": "pv"}, timeout=60)
    seen = bytearray()
    sbx.pty.send_stdin(handle.pid, b"echo \"$(id -un):$(pwd):$PTY_VAR:END$((2+3))\"\n")
    out = read_until(handle, "END5", seen)
    assert "root:/tmp:pv:END5" in out
    assert sbx.pty.kill(handle.pid) is True


def test_pty_connect_after_disconnect(sbx):
    handle = sbx.pty.create(PtySize(rows=24, cols=80), timeout=0)
    pid = handle.pid
    seen = bytearray()
    sbx.pty.send_stdin(pid, b"echo ONE$((0+1))\n")
    read_until(handle, "ONE1", seen)
    handle.disconnect()

    again = sbx.pty.connect(pid, timeout=60)
    assert again.pid == pid
    seen = bytearray()
    sbx.pty.send_stdin(pid, b"echo TWO$((1+1))\n")
    read_until(again, "TWO2", seen)
    assert sbx.pty.kill(pid) is True
    with pytest.raises(CommandExitException):
        again.wait()
