"""The API's objects as dataclasses. Each is built from the daemon's JSON by `from_json`, keeps
that JSON in `raw` (fields added to the API later are there before the SDK names them), and
turns RFC 3339 times into timezone-aware datetimes."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional, Union

from .errors import CommandError

_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$")


def parse_time(value: Any) -> Optional[datetime]:
    """An RFC 3339 time as an aware datetime (None stays None; unparsable text too)."""
    if not isinstance(value, str):
        return None
    match = _TIME.match(value)
    if not match:
        return None
    base, fraction, zone = match.groups()
    text = base + ("." + (fraction + "000000")[:6] if fraction else "")
    parsed = datetime.fromisoformat(text)
    if zone in (None, "Z"):
        return parsed.replace(tzinfo=timezone.utc)
    return datetime.fromisoformat(text + zone)


def _raw() -> Any:
    return field(default_factory=dict, repr=False, compare=False)


def _decode(data: Optional[str], data_b64: Optional[str]) -> bytes:
    if data_b64 is not None:
        return base64.b64decode(data_b64)
    return (data or "").encode("utf-8")


@dataclass
class Health:
    status: str
    version: str
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Health":
        return cls(status=d.get("status", ""), version=d.get("version", ""), raw=dict(d))


@dataclass
class Network:
    """A sandbox's egress policy: mode none | allowlist | open, the allowed destinations, and
    the denied ones (checked first: a deny wins over any allow)."""
    mode: str = "none"
    allow: List[str] = field(default_factory=list)
    deny: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Optional[Mapping[str, Any]]) -> "Network":
        d = d or {}
        return cls(mode=d.get("mode", "none"), allow=list(d.get("allow") or []), deny=list(d.get("deny") or []))

    def to_json(self) -> Dict[str, Any]:
        return {"mode": self.mode, "allow": list(self.allow), "deny": list(self.deny)}


@dataclass
class Preview:
    """Who may reach the sandbox's ports by preview host name ({port}-{id}.{preview domain}):
    whoever knows the id (public, the default), or only requests with `token` (private)."""
    public: bool = True
    token: Optional[str] = None

    @classmethod
    def from_json(cls, d: Optional[Mapping[str, Any]]) -> "Preview":
        d = d or {}
        return cls(public=bool(d.get("public", True)), token=d.get("token"))


@dataclass
class VolumeMount:
    """A named volume mounted at `path` in a sandbox."""
    name: str
    path: str
    read_only: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VolumeMount":
        return cls(name=d["name"], path=d["path"], read_only=bool(d.get("read_only", False)))

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "path": self.path, "read_only": self.read_only}


@dataclass
class Usage:
    cpu_s: float
    memory_bytes: int
    disk_bytes: int
    pids: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Usage":
        return cls(cpu_s=float(d.get("cpu_s", 0)), memory_bytes=int(d.get("memory_bytes", 0)),
                   disk_bytes=int(d.get("disk_bytes", 0)), pids=int(d.get("pids", 0)))


@dataclass
class SandboxInfo:
    """What the daemon last said about a sandbox. `usage` is only filled by a get/refresh."""
    id: str
    state: str
    image: str
    runtime: str
    created_at: Optional[datetime]
    expires_at: Optional[datetime]
    cpus: float
    memory_mb: int
    disk_mb: int
    pids: int
    timeout_s: int
    idle_timeout_s: int
    on_timeout: str
    network: Network
    metadata: Dict[str, str]
    env: Dict[str, str]
    workdir: str
    user: str
    parent_snapshot: Optional[str]
    volumes: List[VolumeMount] = field(default_factory=list)
    paused_to_disk: bool = False  # paused with its memory on disk (no RAM held)
    preview: Preview = field(default_factory=Preview)
    sudo_users: List[str] = field(default_factory=list)
    usage: Optional[Usage] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        return cls(
            id=d["id"], state=d.get("state", ""), image=d.get("image", ""), runtime=d.get("runtime", ""),
            created_at=parse_time(d.get("created_at")), expires_at=parse_time(d.get("expires_at")),
            cpus=float(d.get("cpus", 0)), memory_mb=int(d.get("memory_mb", 0)), disk_mb=int(d.get("disk_mb", 0)),
            pids=int(d.get("pids", 0)), timeout_s=int(d.get("timeout_s", 0)),
            idle_timeout_s=int(d.get("idle_timeout_s", 0)), on_timeout=d.get("on_timeout", ""),
            network=Network.from_json(d.get("network")), metadata=dict(d.get("metadata") or {}),
            env=dict(d.get("env") or {}), workdir=d.get("workdir", ""), user=d.get("user", ""),
            parent_snapshot=d.get("parent_snapshot"),
            paused_to_disk=bool(d.get("paused_to_disk", False)),
            volumes=[VolumeMount.from_json(v) for v in d.get("volumes") or []],
            preview=Preview.from_json(d.get("preview")),
            sudo_users=list(d.get("sudo_users") or []),
            usage=Usage.from_json(d["usage"]) if isinstance(d.get("usage"), dict) else None,
            raw=dict(d))


@dataclass
class CommandResult:
    """A finished command. `stdout`/`stderr` are text (bytes that are not UTF-8 become U+FFFD);
    `stdout_bytes`/`stderr_bytes` are the exact bytes. A command killed by its timeout is not
    an exception: `timed_out` is true. check() raises CommandError unless the exit code is 0."""
    exit_code: Optional[int]
    signal: Optional[str]
    stdout: str
    stderr: str
    duration_ms: float
    timed_out: bool
    truncated: bool
    stdout_bytes: bytes = field(default=b"", repr=False)
    stderr_bytes: bytes = field(default=b"", repr=False)
    pid: Optional[int] = None  # known when the command was streamed

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def check(self) -> "CommandResult":
        """Returns self if the command exited 0, else raises CommandError (carrying self)."""
        if self.exit_code != 0:
            if self.timed_out:
                why = "timed out"
            elif self.signal:
                why = "was killed by %s" % self.signal
            else:
                why = "exited with %s" % self.exit_code
            tail = self.stderr.strip()[-2000:]
            raise CommandError(self, "command %s%s" % (why, ": " + tail if tail else ""))
        return self

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CommandResult":
        out = _decode(d.get("stdout"), d.get("stdout_b64"))
        err = _decode(d.get("stderr"), d.get("stderr_b64"))
        return cls(exit_code=d.get("exit_code"), signal=d.get("signal"),
                   stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                   duration_ms=float(d.get("duration_ms") or 0), timed_out=bool(d.get("timed_out")),
                   truncated=bool(d.get("truncated")), stdout_bytes=out, stderr_bytes=err)


@dataclass
class OutputEvent:
    """One event of a streamed exec or of a process's output:
    - "start": `pid` (exec only);
    - "stdout" / "stderr": `data` (text) and `data_bytes` (exact bytes); `offset` (process output:
      bytes of that stream up to and including this chunk; pass it back to resume after it);
    - "gap": `stream`, `gap_from`, `gap_to`: bytes no longer in the process's output ring;
    - "exit": `exit_code`, `signal` (a name such as "SIGTERM"), `duration_ms`, `timed_out`,
      `truncated`."""
    type: str
    data: str = ""
    data_bytes: bytes = field(default=b"", repr=False)
    offset: Optional[int] = None
    pid: Optional[int] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    duration_ms: Optional[float] = None
    timed_out: bool = False
    truncated: bool = False
    stream: Optional[str] = None
    gap_from: Optional[int] = None
    gap_to: Optional[int] = None
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "OutputEvent":
        kind = d.get("type", "")
        event = cls(type=kind, offset=d.get("offset"), pid=d.get("pid"), raw=dict(d))
        if kind in ("stdout", "stderr"):
            event.data_bytes = _decode(d.get("data"), d.get("data_b64"))
            event.data = d["data"] if "data" in d else event.data_bytes.decode("utf-8", "replace")
        elif kind == "exit":
            event.exit_code = d.get("exit_code")
            event.signal = d.get("signal")
            event.duration_ms = d.get("duration_ms")
            event.timed_out = bool(d.get("timed_out"))
            event.truncated = bool(d.get("truncated"))
        elif kind == "gap":
            event.stream = d.get("stream")
            event.gap_from = d.get("from")
            event.gap_to = d.get("to")
        return event


ExecEvent = OutputEvent


@dataclass
class ExitStatus:
    """How a process ended."""
    exit_code: Optional[int]
    signal: Optional[str]  # a name such as "SIGKILL", or None if it exited
    duration_ms: Optional[float]
    timed_out: bool

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExitStatus":
        return cls(exit_code=d.get("exit_code"), signal=d.get("signal"), duration_ms=d.get("duration_ms"),
                   timed_out=bool(d.get("timed_out")))


@dataclass
class PtySize:
    cols: int = 80
    rows: int = 24

    @classmethod
    def from_json(cls, d: Optional[Mapping[str, Any]]) -> Optional["PtySize"]:
        if not isinstance(d, dict):
            return None
        return cls(cols=int(d.get("cols", 80)), rows=int(d.get("rows", 24)))


@dataclass
class ProcessInfo:
    """What the daemon last said about a background process. `signal` is the number of the
    signal that ended it (the output stream's exit event names it instead)."""
    pid: int
    tag: Optional[str]
    cmd: List[str]
    state: str
    exit_code: Optional[int]
    signal: Optional[int]
    started_at: Optional[datetime]
    exited_at: Optional[datetime]
    pty: Optional[PtySize]
    stdout_offset: int
    stderr_offset: int
    stdout_start: int
    stderr_start: int
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ProcessInfo":
        return cls(pid=int(d["pid"]), tag=d.get("tag"), cmd=list(d.get("cmd") or []), state=d.get("state", ""),
                   exit_code=d.get("exit_code"), signal=d.get("signal"), started_at=parse_time(d.get("started_at")),
                   exited_at=parse_time(d.get("exited_at")), pty=PtySize.from_json(d.get("pty")),
                   stdout_offset=int(d.get("stdout_offset", 0)), stderr_offset=int(d.get("stderr_offset", 0)),
                   stdout_start=int(d.get("stdout_start", 0)), stderr_start=int(d.get("stderr_start", 0)),
                   raw=dict(d))


@dataclass
class Entry:
    """A path in a sandbox: type is file | dir | symlink | other; mode the permission bits."""
    path: str
    name: str
    type: str
    size: int
    mode: int
    mtime: Optional[datetime]
    uid: Optional[int] = None
    gid: Optional[int] = None
    target: Optional[str] = None  # symlinks only
    raw: Dict[str, Any] = _raw()

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Entry":
        return cls(path=d.get("path", ""), name=d.get("name", ""), type=d.get("type", ""), size=int(d.get("size", 0)),
                   mode=int(d.get("mode", 0)), mtime=parse_time(d.get("mtime")), uid=d.get("uid"), gid=d.get("gid"),
                   target=d.get("target"), raw=dict(d))


class EntryList(List[Entry]):
    """A directory listing: a list of Entry, with `truncated` true when the daemon stopped at
    its limit (100000 entries)."""

    def __init__(self, entries: List[Entry], truncated: bool = False):
        super().__init__(entries)
        self.truncated = truncated


@dataclass
class FileEvent:
    """A change under a watched path: type create | write | remove | rename | chmod."""
    type: str
    path: str
    dir: bool = False
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileEvent":
        return cls(type=d.get("type", ""), path=d.get("path", ""), dir=bool(d.get("dir", False)), raw=dict(d))


@dataclass
class ArchiveSummary:
    """What an archive upload unpacked."""
    entries: int
    bytes: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ArchiveSummary":
        return cls(entries=int(d.get("entries", 0)), bytes=int(d.get("bytes", 0)))


@dataclass
class Snapshot:
    """An immutable capture of a sandbox's files, and with `memory` of its processes (which only
    its `runtime` restores). Start sandboxes from it with
    client.sandboxes.create(from_snapshot=snapshot)."""
    id: str
    name: Optional[str]
    sandbox_id: str
    created_at: Optional[datetime]
    size_bytes: int
    memory: bool
    image: str
    runtime: str = "native"
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Snapshot":
        return cls(id=d["id"], name=d.get("name"), sandbox_id=d.get("sandbox_id", ""),
                   created_at=parse_time(d.get("created_at")), size_bytes=int(d.get("size_bytes", 0)),
                   memory=bool(d.get("memory", False)), image=d.get("image", ""),
                   runtime=d.get("runtime", "native"), raw=dict(d))


@dataclass
class Volume:
    name: str
    size_mb: int
    created_at: Optional[datetime]
    used_bytes: int
    mounted_by: List[str]
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Volume":
        return cls(name=d["name"], size_mb=int(d.get("size_mb", 0)), created_at=parse_time(d.get("created_at")),
                   used_bytes=int(d.get("used_bytes", 0)), mounted_by=list(d.get("mounted_by") or []), raw=dict(d))


@dataclass
class Image:
    name: str
    source: str  # host | directory | tarball | registry | build
    created_at: Optional[datetime]
    size_bytes: int
    references: List[str] = field(default_factory=list)  # its names in the caller's namespace
    shared: bool = True  # the host's (every tenant runs it); False: a tenant's own
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Image":
        return cls(name=d["name"], source=d.get("source", ""), created_at=parse_time(d.get("created_at")),
                   size_bytes=int(d.get("size_bytes", 0)), references=list(d.get("references") or []),
                   shared=bool(d.get("shared", True)), raw=dict(d))


@dataclass
class EgressEntry:
    """One outbound connection or DNS lookup the sandbox's egress proxy decided."""
    time: Optional[datetime]
    protocol: str  # tcp | dns
    name: Optional[str]
    address: Optional[str]
    port: int
    query_type: Optional[str]
    verdict: str  # allowed | denied
    reason: Optional[str]
    bytes_out: int
    bytes_in: int
    duration_ms: int
    open: bool
    raw: Dict[str, Any] = _raw()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "EgressEntry":
        return cls(time=parse_time(d.get("time")), protocol=d.get("protocol", ""), name=d.get("name"),
                   address=d.get("address"), port=int(d.get("port") or 0), query_type=d.get("query_type"),
                   verdict=d.get("verdict", ""), reason=d.get("reason"), bytes_out=int(d.get("bytes_out") or 0),
                   bytes_in=int(d.get("bytes_in") or 0), duration_ms=int(d.get("duration_ms") or 0),
                   open=bool(d.get("open")), raw=dict(d))


@dataclass
class PortResponse:
    """An app's answer through the port proxy."""
    status: int
    headers: Dict[str, str]  # lower-case names
    body: bytes = field(repr=False)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


NetworkSpec = Union[Network, Mapping[str, Any], str]
