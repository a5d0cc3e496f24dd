"""Malformed, oversized, unauthenticated and hostile input: a clean error each time, and the
daemon keeps serving."""

import json
import socket

from harness import Response, assert_error_shape


def send_raw(port: int, data: bytes, half_close: bool = True, timeout: float = 10) -> bytes:
    """Writes raw bytes to the daemon and returns whatever it answers before closing."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            answer += chunk
        return answer


def parse_raw_response(raw: bytes) -> Response | None:
    if not raw:
        return None  # the daemon may just hang up on bytes that are not HTTP
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    assert status_line.startswith("HTTP/1."), raw[:200]
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
    return Response(int(status_line.split()[1]), headers, body)


def test_bad_input_gets_clean_errors_and_daemon_keeps_serving(daemon, client, sandbox):
    base = "/v1/sandboxes"
    checks = []  # (what, response, expected status)

    def expect(what, response, status):
        checks.append((what, response, status))

    expect("malformed JSON", client.post(base, "{not json", headers={"Content-Type": "application/json"}), 400)
    expect("truncated JSON", client.post(base, '{"cpus": 1', headers={"Content-Type": "application/json"}), 400)
    big = json.dumps({"metadata": {"k": "x" * (2 << 20)}})
    expect("2 MiB body", client.post(base, big, headers={"Content-Type": "application/json"}), 413)
    expect("JSON array body", client.post(base, [1, 2]), (400, 422))
    expect("memory_mb string", client.post(base, {"memory_mb": "lots"}), 422)
    expect("cpus string", client.post(base, {"cpus": "two"}), 422)
    expect("env not an object", client.post(base, {"env": ["A=B"]}), 422)
    expect("metadata value int", client.post(base, {"metadata": {"k": 1}}), 422)
    expect("exec cmd int", client.exec_raw(sandbox, 42), 422)
    expect("exec cmd list of ints", client.exec_raw(sandbox, [1, 2]), 422)
    expect("exec timeout string", client.exec_raw(sandbox, ["true"], timeout_s="soon"), 422)
    expect("timeout update string", client.post(f"{base}/{sandbox}/timeout", {"timeout_s": "x"}), 422)
    for field, value in [("memory_mb", -1), ("memory_mb", 10 ** 12), ("cpus", 1000), ("pids", 0),
                         ("timeout_s", -5), ("disk_mb", -10), ("cpus", -1),
                         ("memory_mb", 1), ("disk_mb", 1), ("pids", 1)]:
        expect(f"{field}={value}", client.post(base, {field: value}), 422)
    expect("exec timeout_s -1", client.exec_raw(sandbox, ["true"], timeout_s=-1), 422)
    expect("timeout update -5", client.post(f"{base}/{sandbox}/timeout", {"timeout_s": -5}), 422)
    expect("network open with a name", client.post(base, {"network": {"mode": "open", "allow": ["a.test"]}}), 422)
    expect("network hostile entry", client.post(base, {"network": {"mode": "allowlist", "allow": ["a.test/../x"]}}), 422)
    expect("network allow not strings", client.post(base, {"network": {"mode": "allowlist", "allow": [{}]}}), 422)
    expect("network put bogus", client.request("PUT", f"{base}/{sandbox}/network", body={"mode": "everything"}), 422)
    expect("network put unknown id", client.request("PUT", f"{base}/no-such-sandbox/network", body={"mode": "none"}), 404)
    expect("egress bad limit", client.get(f"{base}/{sandbox}/egress?limit=0"), 422)
    expect("network bogus", client.post(base, {"network": {"mode": "everything"}}), 422)
    expect("runtime bogus", client.post(base, {"runtime": "qemu-now"}), 422)
    expect("get unknown id", client.get(f"{base}/no-such-sandbox"), 404)
    expect("delete unknown id", client.delete(f"{base}/no-such-sandbox"), 404)
    expect("exec unknown id", client.exec_raw("no-such-sandbox", ["true"]), 404)
    expect("timeout unknown id", client.post(f"{base}/no-such-sandbox/timeout", {"timeout_s": 5}), 404)
    expect("no auth", client.get(base, key=None), 401)
    expect("bad key", client.get(base, key="not-the-key"), 401)
    expect("bad key on create", client.post(base, {}, key=daemon.key + "x"), 401)
    expect("unknown route", client.get("/v2/whatever"), 404)
    expect("unknown route under sandbox", client.get(f"{base}/{sandbox}/nonsense/deeper"), 404)

    healthz = client.get("/healthz", key=None)
    assert healthz.status == 200 and healthz.json()["status"] == "ok", healthz

    # Below HTTP: garbage, a request cut short, a header far too big.
    key = daemon.key.encode()
    garbage = parse_raw_response(send_raw(daemon.port, b"\x00\xff\xfe\x16\x03\x01garbage\r\n\r\n" * 50))
    if garbage is not None:
        expect("garbage bytes", garbage, 400)
    truncated = parse_raw_response(send_raw(
        daemon.port, b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key +
        b"\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"cpus\": "))
    if truncated is not None:
        expect("truncated request", truncated, 400)
    cut_headers = send_raw(daemon.port, b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bea")
    if cut_headers:
        expect("request cut inside headers", parse_raw_response(cut_headers), 400)
    huge = parse_raw_response(send_raw(
        daemon.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Huge: " + b"a" * 200_000 + b"\r\n\r\n"))
    assert huge is not None, "no answer to a request with a 200 kB header"
    expect("huge header", huge, (400, 413, 431))
    many = parse_raw_response(send_raw(
        daemon.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(20000))
        + b"\r\n"))
    assert many is not None, "no answer to a request with 20000 headers"
    expect("many headers", many, (400, 413, 431))

    # A request that wrongly succeeded must not leave a sandbox behind.
    for _, response, _ in checks:
        if response.status == 201:
            client.delete(f"{base}/{response.json()['id']}")

    failures = []
    for what, response, status in checks:
        try:
            assert_error_shape(response, status)
        except AssertionError as e:
            failures.append(f"{what}: {e}")
    assert not failures, "\n".join(failures)

    # Still alive and fully working.
    assert daemon.running()
    assert client.get("/healthz", key=None).json()["status"] == "ok"
    fresh = client.create()
    try:
        assert client.sh(fresh["id"], "echo survived") == "survived\n"
        assert client.sh(sandbox, "echo also-fine") == "also-fine\n"
    finally:
        client.delete(f"/v1/sandboxes/{fresh['id']}")


def test_a_user_id_the_sandbox_does_not_map_is_refused_with_422(client, sandbox):
    """The sandbox maps ids 0-65535; a larger uid or gid (found by schemathesis) was a 500."""
    from harness import files_url
    for user in ("70000", "1000:70000", "4294967294"):
        error = assert_error_shape(client.exec_raw(sandbox, "id", user=user), 422)
        assert "outside the ones this sandbox maps" in error["message"], error
        assert_error_shape(client.post(f"/v1/sandboxes/{sandbox}/processes", {"cmd": "id", "user": user}), 422)
        assert_error_shape(client.get(files_url(sandbox, "/stat", path="/workspace", user=user)), 422)
    assert client.exec(sandbox, "id -u", user="65535")["stdout"] == "65535\n"
