"""Background processes (/v1/sandboxes/{id}/processes...): start (argv, shell, tag, pty),
list and get by pid or tag, output with offsets (resume, follow, ring overflow gaps), stdin,
signals, pty resize, attach over a WebSocket, and every error path."""

import base64
import json
import socket
import struct

import pytest

from harness import WebSocket, WebSocketRefused, assert_error_shape, wait_until


# ---------------------------------------------------------------- helpers

def url(sandbox_id, pid=None, route=""):
    return f"/v1/sandboxes/{sandbox_id}/processes" + ("" if pid is None else f"/{pid}") + route


def start(client, sandbox_id, cmd, **body) -> dict:
    r = client.post(url(sandbox_id), {"cmd": cmd, **body})
    assert r.status == 201, f"start {cmd!r} -> {r!r}"
    return r.json()


def get(client, sandbox_id, pid) -> dict:
    r = client.get(url(sandbox_id, pid))
    assert r.status == 200, r
    return r.json()


def output(client, sandbox_id, pid, **query) -> list[dict]:
    """The NDJSON events of GET .../output (without follow it ends after what the ring holds)."""
    q = "&".join(f"{k}={v}" for k, v in query.items())
    r = client.get(url(sandbox_id, pid, "/output") + (f"?{q}" if q else ""))
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/x-ndjson"
    return [json.loads(line) for line in r.body.splitlines()]


def follow(client, sandbox_id, pid, **query) -> list[dict]:
    """Every event until the process exits; the last one is the exit event."""
    events = output(client, sandbox_id, pid, follow="true", **query)
    assert events and events[-1]["type"] == "exit", events[-3:]
    return events


def data_of(event) -> bytes:
    return base64.b64decode(event["data_b64"]) if "data_b64" in event else event["data"].encode()


def stream_bytes(events, stream="stdout") -> bytes:
    return b"".join(data_of(e) for e in events if e["type"] == stream)


def assert_offsets_add_up(events, start=0, stream="stdout"):
    """Each data event's offset is the previous one plus its bytes (gaps jump ahead)."""
    at = start
    for e in events:
        if e["type"] == stream:
            at += len(data_of(e))
            assert e["offset"] == at, (e, at)
        elif e["type"] == "gap" and e["stream"] == stream:
            assert e["from"] == at, (e, at)
            at = e["to"]
    return at


def wait_for_stdout(client, sandbox_id, pid, length: int, stderr_length: int = 0) -> dict:
    """The process once it wrote at least `length` bytes to stdout (and `stderr_length` to stderr)."""
    def written():
        p = get(client, sandbox_id, pid)
        return p["stdout_offset"] >= length and p["stderr_offset"] >= stderr_length and p
    process = wait_until(written, timeout=60)
    assert process, f"process {pid} never wrote {length} bytes: {get(client, sandbox_id, pid)}"
    return process


def read_ws_until(ws: WebSocket, marker: bytes) -> bytes:
    """Binary output until `marker` appeared; fails on a text message or a close first."""
    data = b""
    while marker not in data:
        op, payload = ws.recv()
        assert op == WebSocket.OP_BINARY, (op, payload, data)
        data += payload
    return data


def ws_exit(ws: WebSocket) -> dict:
    """Skips output up to the exit message; checks the normal close that follows it."""
    while True:
        op, payload = ws.recv()
        if op == WebSocket.OP_TEXT:
            message = json.loads(payload)
            if message["type"] == "exit":
                break
        assert op != WebSocket.OP_CLOSE, payload
    op, payload = ws.recv()
    assert op == WebSocket.OP_CLOSE and struct.unpack("!H", payload[:2])[0] == 1000, (op, payload)
    ws.close()
    return message


def ws_text(ws: WebSocket) -> dict:
    """The next text message, skipping output."""
    while True:
        op, payload = ws.recv()
        assert op != WebSocket.OP_CLOSE, payload
        if op == WebSocket.OP_TEXT:
            return json.loads(payload)


# ---------------------------------------------------------------- starting, listing, getting

def test_start_argv_returns_the_process_and_runs_it(client, sandbox):
    process = start(client, sandbox, ["sh", "-c", "echo out; echo err >&2; exit 4"])
    assert isinstance(process["pid"], int) and process["pid"] > 1
    assert process["cmd"] == ["sh", "-c", "echo out; echo err >&2; exit 4"]
    assert process["tag"] is None and process["pty"] is None
    assert process["state"] in ("running", "exited")
    assert process["started_at"].endswith("Z")
    events = follow(client, sandbox, process["pid"])
    assert stream_bytes(events, "stdout") == b"out\n"
    assert stream_bytes(events, "stderr") == b"err\n"
    exit_event = events[-1]
    assert exit_event["exit_code"] == 4 and exit_event["signal"] is None and exit_event["timed_out"] is False
    done = get(client, sandbox, process["pid"])
    assert done["state"] == "exited" and done["exit_code"] == 4 and done["exited_at"]
    assert done["stdout_offset"] == 4 and done["stderr_offset"] == 4


def test_start_string_cmd_runs_through_sh_with_exec_defaults(client, sandbox_factory):
    sandbox = sandbox_factory(env={"GREETING": "hi"}, workdir="/tmp")["id"]
    process = start(client, sandbox, "echo $GREETING $EXTRA; pwd; id -u", env={"EXTRA": "there"})
    assert process["cmd"] == ["/bin/sh", "-c", "echo $GREETING $EXTRA; pwd; id -u"]
    assert stream_bytes(follow(client, sandbox, process["pid"])) == b"hi there\n/tmp\n0\n"
    other = start(client, sandbox, ["pwd"], cwd="/", user="1000")
    assert stream_bytes(follow(client, sandbox, other["pid"])) == b"/\n"


def test_start_reports_a_missing_cwd_like_exec(client, sandbox):
    r = client.post(url(sandbox), {"cmd": ["true"], "cwd": "/no/such/dir"})
    assert_error_shape(r, 404)


def test_a_missing_program_exits_127(client, sandbox):
    process = start(client, sandbox, ["/no/such/program"])
    events = follow(client, sandbox, process["pid"])
    assert events[-1]["exit_code"] == 127
    assert b"/no/such/program" in stream_bytes(events, "stderr")


def test_list_and_get_by_pid_and_by_tag(client, sandbox):
    web = start(client, sandbox, ["sleep", "300"], tag="web")
    job = start(client, sandbox, ["true"])
    follow(client, sandbox, job["pid"])
    r = client.get(url(sandbox))
    assert r.status == 200, r
    listed = {p["pid"]: p for p in r.json()["processes"]}
    assert listed[web["pid"]]["state"] == "running" and listed[web["pid"]]["tag"] == "web"
    assert listed[job["pid"]]["state"] == "exited" and listed[job["pid"]]["exit_code"] == 0
    by_pid = get(client, sandbox, web["pid"])
    by_tag = get(client, sandbox, "web")
    assert by_pid["pid"] == by_tag["pid"] == web["pid"]
    assert by_tag["cmd"] == ["sleep", "300"]


def test_a_tag_is_unique_among_running_processes_and_names_the_running_one(client, sandbox):
    first = start(client, sandbox, ["sleep", "300"], tag="svc")
    assert_error_shape(client.post(url(sandbox), {"cmd": ["sleep", "1"], "tag": "svc"}), 409)
    assert client.post(url(sandbox), {"cmd": ["sleep", "1"], "tag": "svc"}).json()["error"]["code"] == "tag_in_use"
    assert client.post(url(sandbox, "svc", "/signal"), {"signal": "KILL"}).status == 204
    follow(client, sandbox, "svc")
    # The tag is free again; it now names the new running process, not the exited one.
    second = start(client, sandbox, ["sleep", "300"], tag="svc")
    assert second["pid"] != first["pid"]
    assert get(client, sandbox, "svc")["pid"] == second["pid"]
    # Once both exited, the tag names the one started last.
    assert client.post(url(sandbox, "svc", "/signal"), {"signal": "KILL"}).status == 204
    follow(client, sandbox, second["pid"])
    assert get(client, sandbox, "svc")["pid"] == second["pid"]


def test_pty_process_runs_on_a_terminal(client, sandbox):
    process = start(client, sandbox, "tty; echo $TERM; stty size", pty={"cols": 100, "rows": 30})
    assert process["pty"] == {"cols": 100, "rows": 30}
    events = follow(client, sandbox, process["pid"])
    text = stream_bytes(events).decode()
    assert "/dev/pts/" in text and "xterm-256color" in text and "30 100" in text
    assert stream_bytes(events, "stderr") == b""  # a pty has one stream
    assert events[-1]["exit_code"] == 0


def test_timeout_kills_the_process(client, sandbox):
    process = start(client, sandbox, ["sleep", "300"], timeout_s=1)
    exit_event = follow(client, sandbox, process["pid"])[-1]
    assert exit_event["timed_out"] is True and exit_event["exit_code"] is None


# ---------------------------------------------------------------- output and offsets

SEQ_OUTPUT = "".join(f"{i}\n" for i in range(1, 5001)).encode()


def test_output_offsets_resume_exactly_where_asked(client, sandbox):
    process = start(client, sandbox, "seq 1 5000; echo done >&2; sleep 300")
    pid = process["pid"]
    wait_for_stdout(client, sandbox, pid, len(SEQ_OUTPUT), 5)
    whole = output(client, sandbox, pid)
    assert stream_bytes(whole) == SEQ_OUTPUT
    assert stream_bytes(whole, "stderr") == b"done\n"
    assert assert_offsets_add_up(whole) == len(SEQ_OUTPUT)
    assert assert_offsets_add_up(whole, stream="stderr") == 5
    assert not any(e["type"] == "exit" for e in whole)  # still running: no exit line
    for resume in (1, 1000, 12345, len(SEQ_OUTPUT) - 1):
        rest = output(client, sandbox, pid, offset=resume)
        assert stream_bytes(rest) == SEQ_OUTPUT[resume:], resume
        assert assert_offsets_add_up(rest, start=resume) == len(SEQ_OUTPUT)
        assert stream_bytes(rest, "stderr") == b"done\n"[resume:]
    # Specific offsets override `offset`; an offset at or past the end gives nothing.
    only_stderr = output(client, sandbox, pid, offset=3, stdout_offset=len(SEQ_OUTPUT))
    assert stream_bytes(only_stderr) == b"" and stream_bytes(only_stderr, "stderr") == b"e\n"
    assert output(client, sandbox, pid, offset=10**12) == []


def test_follow_read_in_parts_misses_nothing(client, sandbox):
    expected = "".join(f"line {i}\n" for i in range(1, 61)).encode()
    process = start(client, sandbox, "for i in $(seq 1 60); do echo line $i; sleep 0.02; done; exit 7")
    pid = process["pid"]
    # Read a few events of a followed stream, then hang up.
    conn = client.connection()
    conn.request("GET", url(sandbox, pid, "/output?follow=true"), headers={"Authorization": f"Bearer {client.key}"})
    resp = conn.getresponse()
    assert resp.status == 200
    first = []
    while stream_bytes(first).count(b"\n") < 5:
        first.append(json.loads(resp.readline()))
    conn.close()
    last_offset = [e for e in first if e["type"] == "stdout"][-1]["offset"]
    assert stream_bytes(first) == expected[:last_offset]
    rest = follow(client, sandbox, pid, offset=last_offset)
    assert stream_bytes(first) + stream_bytes(rest) == expected
    assert rest[-1]["exit_code"] == 7


def test_a_process_keeps_running_after_its_clients_disconnect(client, sandbox):
    process = start(client, sandbox, "while :; do echo tick; sleep 0.05; done")
    pid = process["pid"]
    conn = client.connection()
    conn.request("GET", url(sandbox, pid, "/output?follow=true"), headers={"Authorization": f"Bearer {client.key}"})
    resp = conn.getresponse()
    seen = json.loads(resp.readline())["offset"]
    conn.sock.shutdown(socket.SHUT_RDWR)  # hang up abruptly mid-stream
    conn.close()
    grown = wait_for_stdout(client, sandbox, pid, seen + 100)
    assert grown["state"] == "running"
    assert client.post(url(sandbox, pid, "/signal"), {"signal": "SIGKILL"}).status == 204


def test_ring_overflow_is_reported_as_a_gap(client, sandbox):
    total = 6 * 1024 * 1024  # more than the 4 MiB ring
    process = start(client, sandbox, f"head -c {total} /dev/zero | tr '\\0' x; sleep 300")
    pid = process["pid"]
    state = wait_for_stdout(client, sandbox, pid, total)
    assert state["stdout_offset"] == total and state["stdout_start"] > 0
    assert total - state["stdout_start"] <= 4 * 1024 * 1024
    events = output(client, sandbox, pid)
    assert events[0] == {"type": "gap", "stream": "stdout", "from": 0, "to": state["stdout_start"]}
    kept = stream_bytes(events)
    assert len(kept) == total - state["stdout_start"] and kept == b"x" * len(kept)
    assert assert_offsets_add_up(events) == total
    # Resuming inside the ring is no gap; resuming before its start is.
    assert output(client, sandbox, pid, offset=total - 10) == [{"type": "stdout", "data": "x" * 10, "offset": total}]
    assert output(client, sandbox, pid, offset=5)[0] == {"type": "gap", "stream": "stdout", "from": 5,
                                                         "to": state["stdout_start"]}


# ---------------------------------------------------------------- stdin, signals, resize

def test_stdin_reaches_the_process_and_close_ends_it(client, sandbox):
    process = start(client, sandbox, ["cat"])
    pid = process["pid"]
    assert client.post(url(sandbox, pid, "/stdin"), {"data": "hello\n"}).status == 204
    binary = b"\x00\xffbin\n"
    assert client.post(url(sandbox, pid, "/stdin"), {"data_b64": base64.b64encode(binary).decode()}).status == 204
    big = b"0123456789abcdef" * 100000  # 1.6 MB: several control frames
    assert client.post(url(sandbox, pid, "/stdin"), {"data_b64": base64.b64encode(big).decode()}).status == 204
    assert client.post(url(sandbox, pid, "/stdin/close")).status == 204
    events = follow(client, sandbox, pid)
    assert stream_bytes(events) == b"hello\n" + binary + big
    assert events[-1]["exit_code"] == 0
    r = client.post(url(sandbox, pid, "/stdin"), {"data": "late\n"})
    assert assert_error_shape(r, 409)["code"] == "process_exited"


@pytest.mark.parametrize("signal", ["SIGTERM", "TERM", 15, "sigterm"])
def test_signal_ends_the_process(client, sandbox, signal):
    process = start(client, sandbox, ["sleep", "300"])
    assert client.post(url(sandbox, process["pid"], "/signal"), {"signal": signal}).status == 204
    exit_event = follow(client, sandbox, process["pid"])[-1]
    assert exit_event["signal"] == "SIGTERM" and exit_event["exit_code"] is None
    done = get(client, sandbox, process["pid"])
    assert done["state"] == "exited" and done["signal"] == 15


def test_resize_changes_the_pty_size(client, sandbox):
    process = start(client, sandbox, "stty size; read x; stty size", pty={"cols": 80, "rows": 24})
    pid = process["pid"]
    assert wait_until(lambda: b"24 80" in stream_bytes(output(client, sandbox, pid)), timeout=60)
    assert client.post(url(sandbox, pid, "/resize"), {"cols": 100, "rows": 30}).status == 204
    assert client.post(url(sandbox, pid, "/stdin"), {"data": "\n"}).status == 204
    events = follow(client, sandbox, pid)
    text = stream_bytes(events).decode()
    assert text.index("24 80") < text.index("30 100")
    assert get(client, sandbox, pid)["exit_code"] == 0


# ---------------------------------------------------------------- attach (WebSocket)

def attach(client, sandbox_id, pid, query="") -> WebSocket:
    return WebSocket.connect(client, url(sandbox_id, pid, "/attach") + (f"?{query}" if query else ""))


def test_attach_drives_an_interactive_shell(client, sandbox):
    process = start(client, sandbox, ["/bin/sh", "-i"], pty={"cols": 80, "rows": 24}, tag="shell")
    ws = attach(client, sandbox, "shell")
    ws.send_binary(b"echo $((6 * 7))\n")
    read_ws_until(ws, b"42\r\n")  # the echo of the line shows "6 * 7", only the result shows 42
    ws.send_json({"type": "resize", "cols": 120, "rows": 40})
    ws.send_binary(b"stty size\n")
    read_ws_until(ws, b"40 120")
    ws.send_binary(b"exit 5\n")
    exit_event = ws_exit(ws)
    assert exit_event["exit_code"] == 5 and exit_event["signal"] is None
    assert get(client, sandbox, process["pid"])["state"] == "exited"


def test_attach_replays_the_ring_and_signals(client, sandbox):
    process = start(client, sandbox, "echo early; echo warn >&2; sleep 300")
    pid = process["pid"]
    wait_for_stdout(client, sandbox, pid, 6, 5)
    ws = attach(client, sandbox, pid)
    data = read_ws_until(ws, b"early\n")
    ws.send_json({"type": "signal", "signal": "SIGKILL"})
    exit_event = ws_exit(ws)
    assert exit_event["signal"] == "SIGKILL"
    # From an offset only the rest is replayed (here: nothing, then the exit).
    ws = attach(client, sandbox, pid, "stdout_offset=6&stderr_offset=5")
    assert ws_exit(ws)["signal"] == "SIGKILL"
    assert b"early" in data


def test_attach_stdin_control_messages_and_errors(client, sandbox):
    process = start(client, sandbox, ["cat"])
    pid = process["pid"]
    ws = attach(client, sandbox, pid)
    ws.send_json({"type": "resize", "cols": 10, "rows": 10})
    assert ws_text(ws)["code"] == "not_a_pty"
    ws.send_text("not json")
    assert ws_text(ws)["code"] == "bad_request"
    ws.send_json({"type": "dance"})
    assert ws_text(ws)["code"] == "invalid_argument"
    ws.send_json({"type": "signal", "signal": "SIGNOPE"})
    error = ws_text(ws)
    assert error["type"] == "error" and error["code"] == "invalid_argument" and "signal" in error["message"]
    ws.send_binary(b"still here\n")  # the session went on after every error
    read_ws_until(ws, b"still here\n")
    ws.send_json({"type": "stdin_close"})
    assert ws_exit(ws)["exit_code"] == 0


def test_closing_an_attach_leaves_the_process_running(client, sandbox):
    process = start(client, sandbox, ["cat"])
    pid = process["pid"]
    ws = attach(client, sandbox, pid)
    ws.send_binary(b"one\n")
    read_ws_until(ws, b"one\n")
    ws.close()
    abrupt = attach(client, sandbox, pid)
    abrupt.sock.close()  # no close handshake at all
    assert get(client, sandbox, pid)["state"] == "running"
    assert client.post(url(sandbox, pid, "/stdin"), {"data": "two\n"}).status == 204
    assert client.post(url(sandbox, pid, "/stdin/close")).status == 204
    assert stream_bytes(follow(client, sandbox, pid)) == b"one\ntwo\n"


def test_attach_refusals_are_http_errors(client, sandbox):
    process = start(client, sandbox, ["sleep", "300"])
    r = client.get(url(sandbox, process["pid"], "/attach"))
    assert assert_error_shape(r, 400)["code"] == "bad_request"
    for pid, status, code in ((999999, 404, "process_not_found"), ("nosuchtag", 404, "process_not_found")):
        with pytest.raises(WebSocketRefused) as refused:
            attach(client, sandbox, pid)
        assert assert_error_shape(refused.value.response, status)["code"] == code
    with pytest.raises(WebSocketRefused) as refused:
        attach(client, sandbox, process["pid"], "offset=-1")
    assert_error_shape(refused.value.response, 422)
    with pytest.raises(WebSocketRefused) as refused:
        attach(client, "nosuchsandbox", process["pid"])
    assert assert_error_shape(refused.value.response, 404)["code"] == "sandbox_not_found"


# ---------------------------------------------------------------- error paths

def test_unknown_processes_are_404(client, sandbox):
    for pid in (999999, "nosuchtag", 0, 99999999999):
        for method, route, body in (("GET", "", None), ("GET", "/output", None), ("POST", "/stdin", {"data": "x"}),
                                    ("POST", "/stdin/close", None), ("POST", "/signal", {"signal": "TERM"}),
                                    ("POST", "/resize", {"cols": 1, "rows": 1})):
            r = client.request(method, url(sandbox, pid, route), body=body)
            assert assert_error_shape(r, 404)["code"] == "process_not_found", (pid, route, r)


def test_an_exited_process_cannot_be_driven(client, sandbox):
    process = start(client, sandbox, ["true"], pty={"cols": 80, "rows": 24})
    pid = process["pid"]
    follow(client, sandbox, pid)
    for route, body in (("/stdin", {"data": "x"}), ("/stdin/close", None), ("/signal", {"signal": "KILL"}),
                        ("/resize", {"cols": 90, "rows": 20})):
        r = client.post(url(sandbox, pid, route), body)
        assert assert_error_shape(r, 409)["code"] == "process_exited", (route, r)
    # Reading it still works: the ring and the exit line.
    assert output(client, sandbox, pid)[-1]["type"] == "exit"


def test_bad_requests_are_rejected(client, sandbox):
    process = start(client, sandbox, ["sleep", "300"])
    pid = process["pid"]
    for signal in ("SIGFOO", "", 0, 65, -9, True, None, 1.5):
        r = client.post(url(sandbox, pid, "/signal"), {"signal": signal})
        assert_error_shape(r, 422)
    assert_error_shape(client.post(url(sandbox, pid, "/signal"), {}), 422)
    r = client.post(url(sandbox, pid, "/resize"), {"cols": 90, "rows": 20})
    assert assert_error_shape(r, 409)["code"] == "not_a_pty"
    for body in ({"cols": 0, "rows": 20}, {"cols": 90}, {"cols": 90, "rows": 10001}, {"cols": "90", "rows": 20}):
        assert_error_shape(client.post(url(sandbox, pid, "/resize"), body), 422)
    for body in ({}, {"data": 5}, {"data": "a", "data_b64": "YQ=="}, {"data_b64": "***"}):
        assert_error_shape(client.post(url(sandbox, pid, "/stdin"), body), 422)
    for route in ("", f"/{pid}/stdin", f"/{pid}/signal", f"/{pid}/resize"):
        r = client.post(f"/v1/sandboxes/{sandbox}/processes{route}", "{not json",
                        headers={"Content-Type": "application/json"})
        assert assert_error_shape(r, 400)["code"] == "bad_request", (route, r)
    for body in ({}, {"cmd": ""}, {"cmd": []}, {"cmd": ["x"], "tag": ""}, {"cmd": ["x"], "tag": "123"},
                 {"cmd": ["x"], "tag": "a" * 129}, {"cmd": ["x"], "tag": "a\tb"}, {"cmd": ["x"], "pty": {"rows": 0}},
                 {"cmd": ["x"], "pty": "yes"}, {"cmd": ["x"], "timeout_s": -1}, {"cmd": ["x"], "cwd": "relative"}):
        assert_error_shape(client.post(url(sandbox), body), 422)
    for query in ("offset=-1", "stdout_offset=x", "follow=maybe", "offset=99999999999999999999"):
        assert_error_shape(client.get(url(sandbox, pid, f"/output?{query}")), 422)
    # Nothing of it touched the process.
    assert get(client, sandbox, pid)["state"] == "running"


def test_unknown_sandboxes_are_404(client):
    for sandbox_id in ("nosuchsandbox", "bad%20id"):
        for method, route, body in (("POST", "", {"cmd": ["true"]}), ("GET", "", None), ("GET", "/1", None),
                                    ("GET", "/1/output", None), ("POST", "/1/stdin", {"data": "x"}),
                                    ("POST", "/web/signal", {"signal": 9})):
            r = client.request(method, f"/v1/sandboxes/{sandbox_id}/processes{route}", body=body)
            assert assert_error_shape(r, 404)["code"] == "sandbox_not_found", (sandbox_id, route, r)
