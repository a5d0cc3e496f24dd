"""Background processes of a sandbox: start, list, output with offsets, stdin, signals, pty
resize, and attach over a WebSocket."""

from __future__ import annotations

import base64
import signal as signal_module
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._transport import segment
from .errors import BulkheadConnectionError, BulkheadTimeoutError
from .models import ExitStatus, OutputEvent, ProcessInfo, PtySize
from .streams import EventStream
from .websocket import Attachment, WebSocket

if TYPE_CHECKING:
    from .sandbox import Sandbox

Command = Union[str, Sequence[str]]
PtyOption = Union[PtySize, Mapping[str, int], Tuple[int, int], bool, None]
STDIN_PIECE = 8 << 20  # bytes per stdin request (the daemon takes up to 16 MiB decoded)


def command_json(cmd: Command) -> Union[str, List[str]]:
    """A string runs through /bin/sh -c; a sequence is argv."""
    return cmd if isinstance(cmd, str) else [str(part) for part in cmd]


def _pty_json(pty: PtyOption) -> Optional[Dict[str, int]]:
    if pty is None or pty is False:
        return None
    if pty is True:
        return {"cols": 80, "rows": 24}
    if isinstance(pty, PtySize):
        return {"cols": pty.cols, "rows": pty.rows}
    if isinstance(pty, tuple):
        return {"cols": pty[0], "rows": pty[1]}
    return dict(pty)


class Processes:
    """sandbox.processes"""

    def __init__(self, sandbox: "Sandbox"):
        self._sandbox = sandbox

    @property
    def _path(self) -> str:
        return "/v1/sandboxes/%s/processes" % segment(self._sandbox.id)

    def start(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
              user: Optional[str] = None, tag: Optional[str] = None, pty: PtyOption = None,
              timeout_s: Optional[int] = None) -> "Process":
        """Starts a command that outlives this call. `tag` names it (usable instead of its pid);
        `pty` (True, (cols, rows), {"cols", "rows"} or PtySize) runs it on a terminal;
        `timeout_s` kills it after that long (default: no limit)."""
        body: Dict[str, Any] = {"cmd": command_json(cmd)}
        for key, value in (("cwd", cwd), ("env", dict(env) if env is not None else None), ("user", user),
                           ("tag", tag), ("pty", _pty_json(pty)), ("timeout_s", timeout_s)):
            if value is not None:
                body[key] = value
        data = self._sandbox._transport.json("POST", self._path, json_body=body)
        return Process(self._sandbox, ProcessInfo.from_json(data))

    def list(self) -> List["Process"]:
        """Running processes and the most recent exited ones."""
        data = self._sandbox._transport.json("GET", self._path)
        return [Process(self._sandbox, ProcessInfo.from_json(p)) for p in data.get("processes", [])]

    def get(self, pid: Union[int, str]) -> "Process":
        """A process by pid, or by tag (the running one with that tag, else the latest)."""
        data = self._sandbox._transport.json("GET", "%s/%s" % (self._path, segment(pid)))
        return Process(self._sandbox, ProcessInfo.from_json(data))


class Process:
    """A background process. `info` is what the daemon last said (refresh() re-reads it)."""

    def __init__(self, sandbox: "Sandbox", info: ProcessInfo):
        self.sandbox = sandbox
        self.info = info

    def __repr__(self) -> str:
        return "<Process %d %s in %s>" % (self.pid, self.state, self.sandbox.id)

    @property
    def pid(self) -> int:
        return self.info.pid

    @property
    def tag(self) -> Optional[str]:
        return self.info.tag

    @property
    def state(self) -> str:
        return self.info.state

    @property
    def exit_code(self) -> Optional[int]:
        return self.info.exit_code

    @property
    def _path(self) -> str:
        return "/v1/sandboxes/%s/processes/%d" % (segment(self.sandbox.id), self.pid)

    def refresh(self) -> "Process":
        self.info = ProcessInfo.from_json(self.sandbox._transport.json("GET", self._path))
        return self

    def output(self, offset: int = 0, follow: bool = True, *, stdout_offset: Optional[int] = None,
               stderr_offset: Optional[int] = None) -> EventStream[OutputEvent]:
        """The output from `offset` (per stream: stdout_offset / stderr_offset), as OutputEvents
        with the offset to resume from. With follow (the default) it goes on until the process
        exits (an "exit" event last); without, it ends after what the ring holds now."""
        query = {"offset": offset, "stdout_offset": stdout_offset, "stderr_offset": stderr_offset, "follow": follow}
        reply = self.sandbox._transport.open("GET", self._path + "/output", query=query,
                                             timeout=None if follow else self.sandbox._transport.timeout)
        return EventStream(reply, OutputEvent.from_json)

    def wait(self, timeout: Optional[float] = None) -> ExitStatus:
        """Waits for the process to exit (at most `timeout` seconds, else BulkheadTimeoutError)
        and returns how it ended; `info` is refreshed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = self.output(stdout_offset=self.info.stdout_offset, stderr_offset=self.info.stderr_offset)
        with stream:
            while True:
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise BulkheadTimeoutError("process %d did not exit within %ss" % (self.pid, timeout))
                    stream.set_timeout(left)
                try:
                    event = next(stream)
                except StopIteration:
                    break
                except BulkheadTimeoutError:
                    raise BulkheadTimeoutError("process %d did not exit within %ss" % (self.pid, timeout)) from None
                if event.type == "exit":
                    self.refresh()
                    return ExitStatus(event.exit_code, event.signal, event.duration_ms, event.timed_out)
        # The stream ended without an exit event: ask the process itself.
        self.refresh()
        if self.state != "exited":
            raise BulkheadConnectionError("the output stream of process %d ended while it still runs" % self.pid)
        return ExitStatus(self.info.exit_code, _signal_name(self.info.signal), None, False)

    def write_stdin(self, data: Union[str, bytes]) -> None:
        """Writes to the process's stdin (returns once the process's side took it)."""
        transport = self.sandbox._transport
        if isinstance(data, str):
            # Whole characters per request: split the text, not its UTF-8 bytes.
            step = STDIN_PIECE // 4
            for start in range(0, max(len(data), 1), step):
                transport.call("POST", self._path + "/stdin", json_body={"data": data[start:start + step]})
            return
        raw = bytes(data)
        for start in range(0, max(len(raw), 1), STDIN_PIECE):
            piece = base64.b64encode(raw[start:start + STDIN_PIECE]).decode("ascii")
            transport.call("POST", self._path + "/stdin", json_body={"data_b64": piece})

    def close_stdin(self) -> None:
        self.sandbox._transport.call("POST", self._path + "/stdin/close")

    def signal(self, signal: Union[str, int]) -> None:
        """Sends a signal ("SIGTERM", "TERM", "SIGRTMIN+1" or a number) to its process group."""
        self.sandbox._transport.call("POST", self._path + "/signal", json_body={"signal": signal})

    def kill(self) -> None:
        self.signal("SIGKILL")

    def resize(self, cols: int, rows: int) -> None:
        """Sets the size of the process's pty (it gets SIGWINCH)."""
        self.sandbox._transport.call("POST", self._path + "/resize", json_body={"cols": cols, "rows": rows})

    def attach(self, offset: int = 0, *, stdout_offset: Optional[int] = None,
               stderr_offset: Optional[int] = None) -> Attachment:
        """A live session over a WebSocket: output from `offset` then live, stdin, resize and
        signals. Closing it leaves the process running."""
        query = {"offset": offset, "stdout_offset": stdout_offset, "stderr_offset": stderr_offset}
        return Attachment(WebSocket.connect(self.sandbox._transport, self._path + "/attach", query=query))


def _signal_name(number: Optional[int]) -> Optional[str]:
    if number is None:
        return None
    try:
        return signal_module.Signals(number).name
    except ValueError:
        return "SIG%d" % number
