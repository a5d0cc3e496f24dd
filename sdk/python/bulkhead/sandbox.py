"""A sandbox handle: lifecycle, commands, processes, files, snapshots and forks, network and
ports."""

from __future__ import annotations

import base64
import socket
import urllib.parse
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from ._transport import Body, Transport, segment
from .errors import BulkheadConnectionError, NotFoundError, error_from_response
from .files import Files
from .models import (CommandResult, EgressEntry, Network, NetworkSpec, OutputEvent, PortResponse, SandboxInfo,
                     Snapshot, Usage)
from .processes import Command, Processes, command_json
from .streams import EventStream
from .websocket import WebSocket

OutputCallback = Callable[[str], Any]


def network_json(network: NetworkSpec) -> Dict[str, Any]:
    """A Network, a {"mode", "allow", "deny"} mapping, or just a mode name."""
    if isinstance(network, Network):
        return network.to_json()
    if isinstance(network, str):
        return {"mode": network}
    return dict(network)


class Sandbox:
    """A sandbox. `info` holds what the daemon last said about it (refresh() re-reads it, with
    resource usage). As a context manager it is deleted when the block ends."""

    def __init__(self, transport: Transport, info: SandboxInfo, preview_domain: Optional[str] = None):
        self._transport = transport
        self.info = info
        self._preview_domain = preview_domain
        self.processes = Processes(self)
        self.files = Files(self)

    def __repr__(self) -> str:
        return "<Sandbox %s %s>" % (self.id, self.state)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.delete()
        except NotFoundError:
            pass

    # ---------------------------------------------------------------- info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def state(self) -> str:
        return self.info.state

    @property
    def image(self) -> str:
        return self.info.image

    @property
    def metadata(self) -> Dict[str, str]:
        return self.info.metadata

    @property
    def network(self) -> Network:
        return self.info.network

    @property
    def usage(self) -> Optional[Usage]:
        """Resource usage as of the last refresh() (None before one)."""
        return self.info.usage

    @property
    def _path(self) -> str:
        return "/v1/sandboxes/" + segment(self.id)

    def _update(self, data: Any) -> "Sandbox":
        usage = self.info.usage
        self.info = SandboxInfo.from_json(data)
        if self.info.usage is None:
            self.info.usage = usage
        return self

    def refresh(self) -> "Sandbox":
        """Re-reads the sandbox (state, expiry, usage, ...)."""
        self.info = SandboxInfo.from_json(self._transport.json("GET", self._path))
        return self

    # ---------------------------------------------------------------- lifecycle

    def delete(self) -> None:
        """Kills everything in the sandbox and frees all it holds."""
        self._transport.call("DELETE", self._path)

    kill = delete

    def set_timeout(self, timeout_s: int) -> "Sandbox":
        """The sandbox now expires timeout_s seconds from now (0: never)."""
        return self._update(self._transport.json("POST", self._path + "/timeout", json_body={"timeout_s": timeout_s}))

    def pause(self, to_disk: bool = False) -> "Sandbox":
        """Freezes every process (memory kept, no CPU used, lifetime clock stopped). With
        to_disk=True (gvisor, microvm) the memory and processes are written to disk and end: no RAM held,
        and the next call that needs the sandbox restores them where they were."""
        body = {"to_disk": True} if to_disk else None
        return self._update(self._transport.json("POST", self._path + "/pause", json_body=body))

    def resume(self) -> "Sandbox":
        return self._update(self._transport.json("POST", self._path + "/resume"))

    def stop(self) -> "Sandbox":
        """Ends every process; the files stay. start() boots it again."""
        return self._update(self._transport.json("POST", self._path + "/stop"))

    def start(self) -> "Sandbox":
        return self._update(self._transport.json("POST", self._path + "/start"))

    # ---------------------------------------------------------------- commands

    def _exec_body(self, cmd: Command, cwd: Optional[str], env: Optional[Mapping[str, str]], user: Optional[str],
                   stdin: Union[str, bytes, None], timeout_s: Optional[int],
                   max_output_bytes: Optional[int]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"cmd": command_json(cmd)}
        for key, value in (("cwd", cwd), ("env", dict(env) if env is not None else None), ("user", user),
                           ("timeout_s", timeout_s), ("max_output_bytes", max_output_bytes)):
            if value is not None:
                body[key] = value
        if isinstance(stdin, str):
            body["stdin"] = stdin
        elif stdin is not None:
            body["stdin_b64"] = base64.b64encode(bytes(stdin)).decode("ascii")
        return body

    def _exec_wait(self, timeout_s: Optional[int]) -> Optional[float]:
        """How long to wait for a command's answer: its own timeout (the daemon's default is 60 s)
        and some margin, at least the client's timeout; no limit for timeout_s=0."""
        client = self._transport.timeout
        if timeout_s == 0 or client is None:
            return None
        return max(float(60 if timeout_s is None else timeout_s) + 30, client)

    def exec(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
             user: Optional[str] = None, stdin: Union[str, bytes, None] = None, timeout_s: Optional[int] = None,
             max_output_bytes: Optional[int] = None, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None) -> CommandResult:
        """Runs a command to its end. `cmd` is argv (a list) or a shell string (/bin/sh -c).
        `timeout_s` kills it after that long (daemon default 60, 0 = no limit); a timeout is
        reported in the result (timed_out), not raised. With on_stdout / on_stderr the output
        is streamed and each callback gets text chunks as they are produced. `stdin` (text, or
        bytes) travels in the request, which the daemon caps at 1 MiB: feed more through a
        process's write_stdin or a file."""
        body = self._exec_body(cmd, cwd, env, user, stdin, timeout_s, max_output_bytes)
        wait = self._exec_wait(timeout_s)
        if on_stdout is None and on_stderr is None:
            return CommandResult.from_json(self._transport.json("POST", self._path + "/exec", json_body=body,
                                                                timeout=wait))
        out, err = bytearray(), bytearray()
        pid: Optional[int] = None
        with self._open_exec_stream(body, wait) as events:
            for event in events:
                if event.type == "start":
                    pid = event.pid
                elif event.type == "stdout":
                    out += event.data_bytes
                    if on_stdout is not None:
                        on_stdout(event.data)
                elif event.type == "stderr":
                    err += event.data_bytes
                    if on_stderr is not None:
                        on_stderr(event.data)
                elif event.type == "exit":
                    return CommandResult(exit_code=event.exit_code, signal=event.signal,
                                         stdout=bytes(out).decode("utf-8", "replace"),
                                         stderr=bytes(err).decode("utf-8", "replace"),
                                         duration_ms=float(event.duration_ms or 0), timed_out=event.timed_out,
                                         truncated=event.truncated, stdout_bytes=bytes(out), stderr_bytes=bytes(err),
                                         pid=pid)
        raise BulkheadConnectionError("the exec stream ended without the command's exit")

    def exec_stream(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                    user: Optional[str] = None, stdin: Union[str, bytes, None] = None,
                    timeout_s: Optional[int] = None,
                    max_output_bytes: Optional[int] = None) -> EventStream[OutputEvent]:
        """Runs a command and returns its events as they happen: "start" (pid), "stdout" and
        "stderr" chunks, then "exit". Closing the stream early kills the command."""
        body = self._exec_body(cmd, cwd, env, user, stdin, timeout_s, max_output_bytes)
        return self._open_exec_stream(body, self._exec_wait(timeout_s))

    def _open_exec_stream(self, body: Dict[str, Any], wait: Optional[float]) -> EventStream[OutputEvent]:
        reply = self._transport.open("POST", self._path + "/exec", json_body=body,
                                     headers={"Accept": "application/x-ndjson"}, timeout=wait)
        return EventStream(reply, OutputEvent.from_json)

    # ---------------------------------------------------------------- snapshots and forks

    def snapshot(self, name: Optional[str] = None, memory: bool = False) -> Snapshot:
        """Captures the sandbox's files as an immutable snapshot; with memory=True its memory and
        running processes too (gvisor sandboxes), which a sandbox created from it resumes."""
        body: Dict[str, Any] = {"name": name} if name is not None else {}
        if memory:
            body["memory"] = True
        return Snapshot.from_json(self._transport.json("POST", self._path + "/snapshots", json_body=body))

    def fork(self, count: int = 1, memory: bool = False) -> List["Sandbox"]:
        """`count` new sandboxes, each with a copy-on-write copy of this one's files as they are
        now, and the same image and settings; with memory=True each also goes on running this
        one's processes from where they are (gvisor sandboxes). All or none."""
        body: Dict[str, Any] = {"count": count}
        if memory:
            body["memory"] = True
        data = self._transport.json("POST", self._path + "/fork", json_body=body)
        return [Sandbox(self._transport, SandboxInfo.from_json(s), self._preview_domain)
                for s in data.get("sandboxes", [])]

    # ---------------------------------------------------------------- network

    def set_network(self, mode: NetworkSpec, allow: Optional[Sequence[str]] = None,
                    deny: Optional[Sequence[str]] = None) -> "Sandbox":
        """Changes the egress policy at once: set_network("allowlist", ["example.com"]),
        set_network("open", deny=["203.0.113.0/24"]), set_network("none"), or a Network."""
        body = network_json(mode)
        if allow is not None:
            body["allow"] = list(allow)
        if deny is not None:
            body["deny"] = list(deny)
        return self._update(self._transport.json("PUT", self._path + "/network", json_body=body))

    def egress_log(self, limit: Optional[int] = None) -> List[EgressEntry]:
        """The egress proxy's decisions, oldest first, then the connections open now."""
        data = self._transport.json("GET", self._path + "/egress", query={"limit": limit})
        return [EgressEntry.from_json(e) for e in data.get("entries", [])]

    # ---------------------------------------------------------------- ports

    def port_url(self, port: int, path: str = "/") -> str:
        """The URL that reaches `port` of the sandbox through the daemon's TCP address (needs the
        API key, sent as Authorization: Bearer). Only known when the client talks TCP."""
        a = self._transport.address
        if a.scheme == "unix":
            raise BulkheadConnectionError("the client talks to the daemon over a unix socket, so its TCP "
                                          "address is unknown: create Bulkhead(url='http://HOST:PORT')")
        return "%s/v1/sandboxes/%s/ports/%d%s" % (a.url, segment(self.id), port, _slash(path))

    @property
    def preview_token(self) -> Optional[str]:
        """The token its preview host names need; None while the preview is public."""
        return None if self.info.preview.public else self.info.preview.token

    def preview_url(self, port: int, path: str = "/", scheme: str = "http", for_browser: bool = False) -> str:
        """The host-name form http://{port}-{id}.{preview_domain}/..., which needs no API key.
        The preview domain is the one given to Bulkhead(preview_domain=...) or
        BULKHEAD_PREVIEW_DOMAIN (the daemon's default is localhost:7420). A private preview
        also needs preview_headers() with each request; or, `for_browser`, the URL carries the
        token as ?bulkhead_preview_token=, which the daemon trades for a cookie of that host
        name (a redirect to the URL without it)."""
        domain = self._preview_domain or "localhost:7420"
        url = "%s://%d-%s.%s%s" % (scheme, port, self.id, domain, _slash(path))
        token = self.preview_token
        if for_browser and token:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"bulkhead_preview_token": token})
        return url

    def preview_headers(self) -> Dict[str, str]:
        """The headers a request to preview_url() needs: {"Bulkhead-Preview-Token": token} for
        a private preview, {} for a public one."""
        token = self.preview_token
        return {"Bulkhead-Preview-Token": token} if token else {}

    def request(self, port: int, method: str = "GET", path: str = "/", body: Body = None,
                headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None) -> PortResponse:
        """An HTTP request to an app on `port` in the sandbox, through the daemon's port proxy
        (works over the unix socket too). The app's answer, whatever its status, comes back
        whole; proxy errors (no sandbox, nothing listening: 502) raise."""
        target = "%s/ports/%d%s" % (self._path, port, _slash(path))
        if isinstance(body, str):
            body = body.encode("utf-8")
        wait = timeout if timeout is not None else self._transport.timeout
        reply = self._transport.open(method, target, body=body, headers=headers, timeout=wait, raise_errors=False)
        try:
            data = reply.read()
        finally:
            reply.close()
        # The app's own 4xx/5xx are answers; the daemon's errors (its Server header and error
        # shape: unknown sandbox, nothing listening, bad key) raise.
        if reply.status >= 400 and reply.headers.get("server", "").startswith("bulkhead/"):
            error = error_from_response(reply.status, data,
                                        self._transport.auth_hint() if reply.status == 401 else None)
            if not error.code.startswith("http_"):
                raise error
        return PortResponse(reply.status, reply.headers, data)

    def connect_tcp(self, port: int, timeout: Optional[float] = None) -> socket.socket:
        """A raw TCP connection to 127.0.0.1:{port} in the sandbox, relayed by the daemon (what
        `bulkhead port-forward` uses). Close it when done."""
        sock, _ = self._transport.upgrade("%s/tcp/%d" % (self._path, port),
                                          headers={"Connection": "Upgrade", "Upgrade": "tcp"})
        sock.settimeout(timeout)
        return sock

    def websocket(self, port: int, path: str = "/") -> WebSocket:
        """A WebSocket to an app on `port` in the sandbox, through the port proxy."""
        return WebSocket.connect(self._transport, "%s/ports/%d%s" % (self._path, port, _slash(path)))


def _slash(path: str) -> str:
    return path if path.startswith("/") else "/" + path

