"""envd's process service on the E2B front (docs/design/e2b-protocol.md §4, §5.1, §6.2, §6.3),
spoken as raw Connect RPC over http.client: Start and Connect streams (envelopes, start/data/
end events, keepalives, Connect-Timeout-Ms), the unary calls (List, SendInput, SendSignal,
CloseStdin, Update), the client stream StreamInput, and every error path."""

import base64
import hashlib
import http.client
import json
import struct
import time
import urllib.parse

import pytest

from harness import host_processes_in_uid_range, sandbox_host_uid_range, wait_until

ENVD_PORT = "49983"


# ---------------------------------------------------------------- wire helpers

def envelope(message, flags: int = 0) -> bytes:
    data = message if isinstance(message, bytes) else json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


class Stream:
    """A server-streaming response: read_message() -> (flags, JSON) per envelope."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse):
        self.conn = conn
        self.response = response
        self.ended = False

    def _read_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            piece = self.response.read(n - len(data))
            if not piece:
                raise EOFError(f"stream ended after {len(data)} of {n} bytes")
            data += piece
        return data

    def read_message(self):
        flags, size = struct.unpack(">BI", self._read_exact(5))
        message = json.loads(self._read_exact(size))
        if flags & 0x02:
            self.ended = True
        return flags, message

    def events(self):
        """The process events until the end-stream; then self.trailer holds its JSON."""
        while True:
            flags, message = self.read_message()
            if flags & 0x02:
                self.trailer = message
                return
            yield message["event"]

    def close(self):
        self.conn.close()


def data_of(events, key="stdout") -> bytes:
    return b"".join(base64.b64decode(e["data"][key]) for e in events if "data" in e and key in e["data"])


def end_of(events) -> dict:
    ends = [e["end"] for e in events if "end" in e]
    assert len(ends) == 1, events[-3:]
    assert "end" in events[-1], "the end event comes last"
    return ends[0]


class Envd:
    def __init__(self, daemon, sandbox_id: str, token: str):
        url = urllib.parse.urlsplit(daemon.e2b_url)
        self.host, self.port = url.hostname, url.port
        self.sandbox_id = sandbox_id
        self.token = token

    def connection(self, timeout: float = 120) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self, content_type: str, extra=None, user=None) -> dict:
        h = {"E2b-Sandbox-Id": self.sandbox_id, "E2b-Sandbox-Port": ENVD_PORT, "X-Access-Token": self.token,
             "Content-Type": content_type, "Connect-Protocol-Version": "1"}
        if user is not None:
            h["Authorization"] = "Basic " + base64.b64encode(f"{user}:".encode()).decode()
        h.update(extra or {})
        return h

    def unary(self, method: str, body, headers=None, user=None):
        conn = self.connection()
        try:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            conn.request("POST", f"/process.Process/{method}", body=raw,
                         headers=self.headers("application/json", headers, user))
            r = conn.getresponse()
            text = r.read()
            assert r.getheader("Content-Type") == "application/json", (r.status, text)
            return r.status, json.loads(text)
        finally:
            conn.close()

    def stream(self, method: str, body, headers=None, user=None, timeout: float = 120) -> Stream:
        conn = self.connection(timeout)
        raw = body if isinstance(body, bytes) else envelope(body)
        conn.request("POST", f"/process.Process/{method}", body=raw,
                     headers=self.headers("application/connect+json", headers, user))
        r = conn.getresponse()
        assert r.status == 200, (r.status, r.read())
        assert r.getheader("Content-Type") == "application/connect+json"
        return Stream(conn, r)

    def start(self, script: str, headers=None, user=None, envs=None, **request) -> Stream:
        """Start `script` as the SDK's commands.run does: bash -l -c."""
        body = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", script]}, **request}
        if envs is not None:
            body["process"]["envs"] = envs
        return self.stream("Start", body, headers=headers, user=user)

    def run(self, script: str, headers=None, user=None, envs=None, **request):
        """Start, read everything: (events, trailer)."""
        s = self.start(script, headers=headers, user=user, envs=envs, **request)
        try:
            events = list(s.events())
            return events, s.trailer
        finally:
            s.close()

    def stream_error(self, method: str, body, headers=None) -> dict:
        """A stream that fails: no events, an end-stream with the error (HTTP 200)."""
        s = self.stream(method, body, headers=headers)
        try:
            flags, message = s.read_message()
            assert flags == 0x02, message
            assert "error" in message, message
            return message["error"]
        finally:
            s.close()


def started_pid(stream: Stream) -> int:
    flags, message = stream.read_message()
    assert flags == 0, message
    pid = message["event"]["start"]["pid"]
    assert isinstance(pid, int) and pid > 0
    return pid


def read_until(stream: Stream, predicate, key="stdout") -> list:
    """Events until predicate(bytes so far) holds."""
    events = []
    for event in stream.events():
        events.append(event)
        if predicate(data_of(events, key)):
            return events
    raise AssertionError(f"stream ended first: {events[-3:]}")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def e2b_sandbox(daemon):
    """One E2B sandbox (template base, user "user", envVars A=1); deleted at the end, and then
    none of its processes may be left on the host."""
    url = urllib.parse.urlsplit(daemon.e2b_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    conn.request("POST", "/v2/sandboxes", body=json.dumps({"templateID": "base", "envVars": {"A": "1"}}),
                 headers={"X-API-KEY": daemon.e2b_key, "Content-Type": "application/json"})
    r = conn.getresponse()
    created = json.loads(r.read())
    assert r.status == 201, created
    sandbox_id = created["sandboxID"]
    client = daemon.client()
    first_uid, count = sandbox_host_uid_range(client, sandbox_id)
    yield Envd(daemon, sandbox_id, created["envdAccessToken"])
    conn.request("DELETE", f"/sandboxes/{sandbox_id}", headers={"X-API-KEY": daemon.e2b_key})
    r = conn.getresponse()
    r.read()
    assert r.status == 204
    conn.close()
    assert client.get(f"/v1/sandboxes/{sandbox_id}").status == 404
    # Every process it started (background, disconnected, pty) went with it.
    assert wait_until(lambda: not host_processes_in_uid_range(first_uid, count), timeout=30), \
        host_processes_in_uid_range(first_uid, count)
    assert daemon.running()


@pytest.fixture
def envd(e2b_sandbox, client):
    yield e2b_sandbox
    # No test leaves a process running: what is still listed was leaked.
    status, listed = e2b_sandbox.unary("List", {})
    assert status == 200, listed
    for p in listed["processes"]:
        e2b_sandbox.unary("SendSignal", {"process": {"pid": p["pid"]}, "signal": "SIGNAL_SIGKILL"})
    assert listed["processes"] == [], listed


# ---------------------------------------------------------------- Start

def test_echo_exit_zero(envd):
    events, trailer = envd.run("echo hi", stdin=False)
    assert "start" in events[0]
    assert data_of(events) == b"hi\n"
    assert end_of(events) == {"exited": True, "status": "exit status 0"}
    assert trailer == {}


def test_exit_three_and_stderr(envd):
    events, trailer = envd.run("echo out; echo err >&2; exit 3", stdin=False)
    assert data_of(events) == b"out\n"
    assert data_of(events, "stderr") == b"err\n"
    assert end_of(events) == {"exitCode": 3, "exited": True, "status": "exit status 3", "error": "exit status 3"}
    assert trailer == {}


def test_large_output_arrives_whole(envd):
    size = 20 * 1024 * 1024
    s = envd.start(f"yes 0123456789abcdef | head -c {size}", stdin=False)
    try:
        total = 0
        digest = hashlib.sha256()
        end = None
        for event in s.events():
            if "data" in event:
                chunk = base64.b64decode(event["data"]["stdout"])
                total += len(chunk)
                digest.update(chunk)
            elif "end" in event:
                end = event["end"]
        assert total == size
        expected = (b"0123456789abcdef\n" * (size // 17 + 1))[:size]
        assert digest.hexdigest() == hashlib.sha256(expected).hexdigest()
        assert end["status"] == "exit status 0"
    finally:
        s.close()


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_flood_to_a_client_that_does_not_read_is_held_not_buffered(envd, daemon, client):
    """An endless flood whose client stops reading: nothing piles up in the daemon or init;
    the process waits. Once the client is gone the process is no longer held."""
    s = envd.start("yes flood-flood-flood-flood", stdin=False)
    try:
        pid = started_pid(s)
        read_until(s, lambda out: len(out) >= 1 << 20)
        rss_before = rss_kib(daemon.process.pid)
        time.sleep(2)  # the client reads nothing meanwhile; `yes` alone would write gigabytes
        process = client.get(f"/v1/sandboxes/{envd.sandbox_id}/processes/{pid}").json()
        assert process["state"] == "running"
        assert process["stdout_offset"] < 64 << 20, process
        assert rss_kib(daemon.process.pid) - rss_before < 64 * 1024
        # Reading again, the output flows on.
        read_until(s, lambda out: len(out) >= 8 << 20)
    finally:
        s.close()
    # Disconnected: held by nobody, it runs on and its output goes to the ring.
    offset = client.get(f"/v1/sandboxes/{envd.sandbox_id}/processes/{pid}").json()["stdout_offset"]
    assert wait_until(lambda: client.get(f"/v1/sandboxes/{envd.sandbox_id}/processes/{pid}").json()["stdout_offset"]
                      > offset + (64 << 20), timeout=60)
    assert envd.unary("SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}) == (200, {})
    assert wait_until(lambda: envd.unary("List", {})[1]["processes"] == [], timeout=30)


def test_env_cwd_and_user(envd):
    events, _ = envd.run('echo "$A $FOO $(pwd) $(id -un) $HOME"', stdin=False, envs={"FOO": "bar"})
    assert data_of(events) == b"1 bar /home/user user /home/user\n"
    events, _ = envd.run("echo $(pwd) $(id -un)", stdin=False, user="root")
    assert data_of(events) == b"/root root\n"
    body = {"process": {"cmd": "/bin/pwd", "cwd": "/tmp"}, "stdin": False}
    s = envd.stream("Start", body)
    events = list(s.events())
    s.close()
    assert data_of(events) == b"/tmp\n"
    # The home is the sandbox's /etc/passwd's, not a guess: daemon's is /usr/sbin.
    events, _ = envd.run("pwd", stdin=False, user="daemon")
    assert data_of(events) == b"/usr/sbin\n"
    body = {"process": {"cmd": "/bin/pwd", "cwd": "~/../lib"}, "stdin": False}
    s = envd.stream("Start", body, user="daemon")
    events = list(s.events())
    s.close()
    assert data_of(events) == b"/usr/lib\n"


def test_missing_cwd_is_invalid_argument(envd):
    error = envd.stream_error("Start", {"process": {"cmd": "/bin/true", "cwd": "/nonexistent/dir"}})
    assert error == {"code": "invalid_argument", "message": "cwd '/nonexistent/dir' does not exist"}


def test_unknown_user_is_unauthenticated(envd):
    s = envd.stream("Start", {"process": {"cmd": "/bin/true", "cwd": "/"}}, user="ghost")
    try:
        flags, message = s.read_message()
        assert flags == 0x02
        assert message["error"] == {"code": "unauthenticated", "message": "invalid username: 'ghost'"}
    finally:
        s.close()


def test_missing_executable_exits_127(envd):
    s = envd.stream("Start", {"process": {"cmd": "/no/such/binary"}, "stdin": False})
    events = list(s.events())
    s.close()
    assert s.trailer == {}, s.trailer
    assert end_of(events)["exitCode"] == 127


def test_stdin_false_reads_end_of_file(envd):
    events, _ = envd.run("cat; echo done", stdin=False)
    assert data_of(events) == b"done\n"
    assert end_of(events)["status"] == "exit status 0"


def test_stdin_pipe_send_input_and_close_stdin(envd):
    s = envd.start("cat", stdin=True)
    try:
        pid = started_pid(s)
        assert envd.unary("SendInput", {"process": {"pid": pid}, "input": {"stdin": b64(b"abc\n")}}) == (200, {})
        read_until(s, lambda out: out == b"abc\n")
        assert envd.unary("CloseStdin", {"process": {"pid": pid}}) == (200, {})
        rest = list(s.events())
        assert end_of(rest)["status"] == "exit status 0"
        assert s.trailer == {}
    finally:
        s.close()


def test_stdin_absent_is_a_pipe(envd):
    s = envd.stream("Start", {"process": {"cmd": "/bin/cat"}})
    try:
        pid = started_pid(s)
        envd.unary("SendInput", {"process": {"pid": pid}, "input": {"stdin": b64(b"x")}})
        read_until(s, lambda out: out == b"x")
        envd.unary("CloseStdin", {"process": {"pid": pid}})
        assert end_of(list(s.events()))["exited"] is True
    finally:
        s.close()


def test_pty_echo_and_resize(envd):
    script = 'stty size; read line; stty size; echo "got:$line"'
    s = envd.stream("Start", {"process": {"cmd": "/bin/bash", "args": ["-c", script]},
                              "pty": {"size": {"cols": 80, "rows": 24}}})
    try:
        pid = started_pid(s)
        read_until(s, lambda out: b"24 80" in out, key="pty")
        assert envd.unary("Update", {"process": {"pid": pid}, "pty": {"size": {"cols": 100, "rows": 30}}}) == (200, {})
        assert envd.unary("SendInput", {"process": {"pid": pid}, "input": {"pty": b64(b"hello\n")}}) == (200, {})
        events = list(s.events())
        out = data_of(events, "pty")
        assert b"30 100" in out
        assert b"got:hello" in out
        assert not data_of(events)  # a pty's output is pty bytes, never stdout
        assert end_of(events)["status"] == "exit status 0"
    finally:
        s.close()


def test_pty_mismatches_are_invalid_argument(envd):
    pty = envd.stream("Start", {"process": {"cmd": "/bin/cat"}, "pty": {"size": {"cols": 80, "rows": 24}}})
    pipe = envd.start("cat", stdin=True)
    try:
        pty_pid, pipe_pid = started_pid(pty), started_pid(pipe)
        status, error = envd.unary("SendInput", {"process": {"pid": pty_pid}, "input": {"stdin": b64(b"x")}})
        assert (status, error["code"]) == (400, "invalid_argument"), error
        status, error = envd.unary("SendInput", {"process": {"pid": pipe_pid}, "input": {"pty": b64(b"x")}})
        assert (status, error["code"]) == (400, "invalid_argument"), error
        status, error = envd.unary("CloseStdin", {"process": {"pid": pty_pid}})
        assert (status, error["code"]) == (400, "invalid_argument"), error
        status, error = envd.unary("Update", {"process": {"pid": pipe_pid}, "pty": {"size": {"cols": 9, "rows": 9}}})
        assert (status, error["code"]) == (400, "invalid_argument"), error
    finally:
        for pid in (pty_pid, pipe_pid):
            envd.unary("SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        assert end_of(list(pty.events()))["status"] == "signal: killed"
        assert end_of(list(pipe.events()))["status"] == "signal: killed"
        pty.close()
        pipe.close()


# ---------------------------------------------------------------- background, Connect, List

def test_disconnect_keeps_the_process_and_connect_reattaches(envd):
    s = envd.start('echo first; read x; echo "after:$x"', stdin=True, tag="bg-worker")
    pid = started_pid(s)
    read_until(s, lambda out: out == b"first\n")
    s.close()  # the client goes away; the process must not

    status, listed = envd.unary("List", {})
    assert status == 200
    mine = [p for p in listed["processes"] if p["pid"] == pid]
    assert mine, listed
    assert mine[0]["tag"] == "bg-worker"
    assert mine[0]["config"]["cmd"] == "/bin/bash"
    assert mine[0]["config"]["args"] == ["-l", "-c", 'echo first; read x; echo "after:$x"']
    assert mine[0]["config"]["cwd"] == "/home/user"
    assert mine[0]["config"]["envs"] == {}

    c = envd.stream("Connect", {"process": {"tag": "bg-worker"}}, headers={"Keepalive-Ping-Interval": "50"})
    try:
        assert started_pid(c) == pid
        envd.unary("SendInput", {"process": {"pid": pid}, "input": {"stdin": b64(b"later\n")}})
        events = list(c.events())
        assert data_of(events) == b"after:later\n"  # only new output: "first" is not replayed
        assert end_of(events)["status"] == "exit status 0"
        assert c.trailer == {}
    finally:
        c.close()
    # Exited: no longer listed, no longer found.
    status, listed = envd.unary("List", {})
    assert pid not in [p["pid"] for p in listed["processes"]]
    error = envd.stream_error("Connect", {"process": {"pid": pid}})
    assert error == {"code": "not_found", "message": f"process with pid {pid} not found"}


def test_connect_timeout_kills_at_the_deadline(envd):
    """As envd: at the deadline the stream ends with deadline_exceeded (no end event) and the
    process is killed."""
    s = envd.start("sleep 60", stdin=False, headers={"Connect-Timeout-Ms": "1000"})
    try:
        pid = started_pid(s)
        events = list(s.events())
        assert not [e for e in events if "end" in e], events
        assert s.trailer == {"error": {"code": "deadline_exceeded", "message": "context deadline exceeded"}}
    finally:
        s.close()
    status, listed = envd.unary("List", {})
    assert pid not in [p["pid"] for p in listed["processes"]]


def test_connect_timeout_on_connect_ends_the_stream_not_the_process(envd):
    s = envd.start("sleep 60", stdin=False)
    pid = started_pid(s)
    s.close()
    c = envd.stream("Connect", {"process": {"pid": pid}}, headers={"Connect-Timeout-Ms": "1000"})
    try:
        assert started_pid(c) == pid
        flags, message = c.read_message()
        assert flags == 0x02
        assert message["error"] == {"code": "deadline_exceeded", "message": "context deadline exceeded"}, message
    finally:
        c.close()
    status, listed = envd.unary("List", {})
    assert pid in [p["pid"] for p in listed["processes"]]
    assert envd.unary("SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}) == (200, {})
    assert wait_until(lambda: envd.unary("List", {})[1]["processes"] == [], timeout=30)


def test_keepalive_on_an_idle_stream(envd):
    s = envd.start("sleep 3", stdin=False, headers={"Keepalive-Ping-Interval": "1"})
    try:
        events = list(s.events())
        assert {"keepalive": {}} in events
        assert end_of(events)["status"] == "exit status 0"
    finally:
        s.close()


@pytest.mark.parametrize("signal,status", [("SIGNAL_SIGTERM", "signal: terminated"), ("SIGNAL_SIGKILL", "signal: killed"),
                                           (15, "signal: terminated"), (9, "signal: killed")])
def test_send_signal(envd, signal, status):
    s = envd.start("sleep 60", stdin=False, tag="sleeper")
    try:
        started_pid(s)
        assert envd.unary("SendSignal", {"process": {"tag": "sleeper"}, "signal": signal}) == (200, {})
        end = end_of(list(s.events()))
        assert end["status"] == status
        assert end["error"] == status
        assert end["exitCode"] == -1
    finally:
        s.close()


def test_unsupported_signal_is_unimplemented(envd):
    s = envd.start("sleep 60", stdin=False)
    try:
        pid = started_pid(s)
        for signal in ("SIGNAL_UNSPECIFIED", 2, 1):
            status, error = envd.unary("SendSignal", {"process": {"pid": pid}, "signal": signal})
            assert (status, error["code"]) == (501, "unimplemented"), error
        status, error = envd.unary("SendSignal", {"process": {"pid": pid}, "signal": "SIGHUP"})
        assert (status, error["code"]) == (400, "invalid_argument"), error
    finally:
        envd.unary("SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        list(s.events())
        s.close()


def test_unknown_pid_and_tag_are_not_found(envd):
    pid = 999999
    message = f"process with pid {pid} not found"
    for method, body in [("SendInput", {"process": {"pid": pid}, "input": {"stdin": "eA=="}}),
                         ("SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}),
                         ("CloseStdin", {"process": {"pid": pid}}),
                         ("Update", {"process": {"pid": pid}, "pty": {"size": {"cols": 80, "rows": 24}}})]:
        assert envd.unary(method, body) == (404, {"code": "not_found", "message": message}), method
    assert envd.stream_error("Connect", {"process": {"pid": pid}}) == {"code": "not_found", "message": message}
    status, error = envd.unary("SendSignal", {"process": {"tag": "no-such-tag"}, "signal": "SIGNAL_SIGKILL"})
    assert (status, error) == (404, {"code": "not_found", "message": "process with tag no-such-tag not found"})


# ---------------------------------------------------------------- StreamInput

def stream_input(envd, messages, chunked=True):
    conn = envd.connection()
    try:
        body = [envelope(m) if not isinstance(m, bytes) else m for m in messages]
        if chunked:
            # Split across chunk boundaries, as a client stream arrives.
            raw = b"".join(body)
            pieces = [raw[i:i + 3] for i in range(0, len(raw), 3)]
            conn.request("POST", "/process.Process/StreamInput", body=iter(pieces), encode_chunked=True,
                         headers=envd.headers("application/connect+json"))
        else:
            conn.request("POST", "/process.Process/StreamInput", body=b"".join(body),
                         headers=envd.headers("application/connect+json"))
        r = conn.getresponse()
        assert r.status == 200
        s = Stream(conn, r)
        messages = []
        while True:
            flags, message = s.read_message()
            messages.append((flags, message))
            if flags & 0x02:
                return messages
    finally:
        conn.close()


def test_stream_input(envd):
    s = envd.start("cat", stdin=True)
    try:
        pid = started_pid(s)
        answer = stream_input(envd, [{"start": {"process": {"pid": pid}}},
                                     {"data": {"input": {"stdin": b64(b"one\n")}}},
                                     {"keepalive": {}},
                                     {"data": {"input": {"stdin": b64(b"two\n")}}}])
        assert answer == [(0, {}), (2, {})]
        read_until(s, lambda out: out == b"one\ntwo\n")
        envd.unary("CloseStdin", {"process": {"pid": pid}})
        assert end_of(list(s.events()))["status"] == "exit status 0"
    finally:
        s.close()


def test_stream_input_errors(envd):
    answer = stream_input(envd, [{"data": {"input": {"stdin": "eA=="}}}])
    assert answer[-1][0] == 2 and answer[-1][1]["error"]["code"] == "invalid_argument", answer
    answer = stream_input(envd, [{"start": {"process": {"pid": 999999}}}], chunked=False)
    assert answer == [(2, {"error": {"code": "not_found", "message": "process with pid 999999 not found"}})]
    answer = stream_input(envd, [b"\x00\x00\x00\x00\x05{bad}"])
    assert answer[-1][1]["error"]["code"] == "invalid_argument", answer
    answer = stream_input(envd, [b"\x00\x00\x00"])  # ends inside an envelope
    assert answer[-1][1]["error"]["code"] == "invalid_argument", answer


# ---------------------------------------------------------------- malformed input

def test_malformed_requests_get_clear_errors(envd):
    # Unary: not JSON, not an object.
    for body in (b"{not json", b"[1,2]"):
        status, error = envd.unary("List", body)
        assert (status, error["code"]) == (400, "invalid_argument"), error
    status, error = envd.unary("SendInput", {"process": {"pid": "abc"}, "input": {"stdin": "eA=="}})
    assert (status, error["code"]) == (400, "invalid_argument"), error
    status, error = envd.unary("SendInput", {"process": {"pid": 1}, "input": {"stdin": "***"}})
    assert (status, error["code"]) == (400, "invalid_argument"), error
    status, error = envd.unary("NoSuchMethod", {})
    assert (status, error["code"]) == (501, "unimplemented"), error
    # Streams: HTTP 200, the error in the end-stream.
    for raw in (b"", b"\x00\x00", b"\x00\x00\x00\x00\x09{\"a\":1}", b"\x01\x00\x00\x00\x02{}",
                b"\x00\x00\x00\x00\x04nope", envelope([1, 2])):
        error = envd.stream_error("Start", raw)
        assert error["code"] == "invalid_argument", (raw, error)
    for body in ({}, {"process": {}}, {"process": {"cmd": ""}}, {"process": {"cmd": "x", "args": [1]}},
                 {"process": {"cmd": "x"}, "pty": {"size": {"cols": 0, "rows": 1}}}, {"process": {"cmd": "x"}, "stdin": 3}):
        assert envd.stream_error("Start", body)["code"] == "invalid_argument", body
    assert envd.stream_error("Connect", {"process": {}})["code"] == "invalid_argument"
    error = envd.stream_error("Start", {"process": {"cmd": "/bin/true"}}, headers={"Connect-Timeout-Ms": "soon"})
    assert error["code"] == "invalid_argument"
    # And the service is fine afterwards.
    events, trailer = envd.run("echo still-here", stdin=False)
    assert data_of(events) == b"still-here\n"
    assert trailer == {}


def test_wrong_token_and_unknown_sandbox(envd, daemon):
    bad = Envd(daemon, envd.sandbox_id, "wrong")
    conn = bad.connection()
    conn.request("POST", "/process.Process/List", body=b"{}", headers=bad.headers("application/json"))
    r = conn.getresponse()
    assert r.status == 401
    r.read()
    gone = Envd(daemon, "sbx_doesnotexist", envd.token)
    conn.request("POST", "/process.Process/List", body=b"{}", headers=gone.headers("application/json"))
    r = conn.getresponse()
    assert r.status == 502
    assert "was not found" in json.loads(r.read())["message"]
    conn.close()
