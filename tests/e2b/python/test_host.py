"""sandbox.get_host(port): a server started inside the sandbox (a background command) answers
through the E2B front (the sandbox's domain is the front's) when the request's Host header is
get_host(port); with allow_public_traffic False only to requests with the sandbox's
traffic_access_token. What cannot reach a server answers as E2B's proxy: 502 for a sandbox
gone or paused (unless auto_resume), 502 "port is not open" for a closed port."""

import http.client
import json
import os
import time
import urllib.parse
import uuid


def fetch(host_header: str, path: str, headers=None) -> tuple[int, bytes]:
    # Sent to the front's address: *.localhost need not resolve everywhere.
    front = urllib.parse.urlsplit(os.environ["E2B_SANDBOX_URL"])
    conn = http.client.HTTPConnection(front.hostname, front.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host_header, **(headers or {})})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def serve(sandbox, port: int, text: str):
    """A python http.server on `port` serving index.html = `text`, once it answers."""
    sandbox.files.write("/home/user/www/index.html", text)
    server = sandbox.commands.run(f"cd /home/user/www && exec python3 -m http.server {port}", background=True,
                                  timeout=0)
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port})).close()"
    sandbox.commands.run(f"for i in $(seq 1 300); do python3 -c \"{probe}\" 2>/dev/null && exit 0; sleep 0.1; done; "
                         "exit 1")
    return server


def not_found(sandbox_id: str) -> tuple[int, dict]:
    return 502, {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502}


def fetch_json(host_header: str, path: str = "/", headers=None) -> tuple[int, dict]:
    status, body = fetch(host_header, path, headers)
    return status, json.loads(body)


def test_get_host_reaches_sandbox_server(sbx):
    token = uuid.uuid4().hex
    sbx.files.write("/home/user/www/token.txt", token)
    server = sbx.commands.run("cd /home/user/www && exec python3 -m http.server 8000", background=True, timeout=0)
    try:
        host = sbx.get_host(8000)
        assert host == f"8000-{sbx.sandbox_id}.{sbx.sandbox_domain}"
        # The server takes a moment to listen: retry (bounded) until it answers.
        deadline = time.monotonic() + 30
        status, body = 0, b""
        while time.monotonic() < deadline:
            status, body = fetch(host, "/token.txt")
            if status == 200:
                break
            time.sleep(0.2)
        assert (status, body) == (200, token.encode())
        status, _ = fetch(host, "/missing.txt")
        assert status == 404  # python's http.server answered, not the proxy
        assert sbx.sandbox_domain == f"localhost:{urllib.parse.urlsplit(os.environ['E2B_SANDBOX_URL']).port}"
    finally:
        assert sbx.commands.kill(server.pid) is True


def test_a_closed_port_answers_port_is_not_open(sbx):
    assert fetch_json(sbx.get_host(8099)) == (502, {"sandboxId": sbx.sandbox_id, "port": 8099, "code": 502,
                                                    "message": "The sandbox is running but port is not open"})


def test_a_killed_sandbox_host_answers_502_not_found(new_sandbox):
    sandbox = new_sandbox()
    serve(sandbox, 8080, "up")
    assert fetch(sandbox.get_host(8080), "/") == (200, b"up")
    sandbox.kill()
    assert fetch_json(sandbox.get_host(8080)) == not_found(sandbox.sandbox_id)


def test_a_paused_sandbox_host_resumes_it_only_with_auto_resume(new_sandbox):
    plain = new_sandbox()
    serve(plain, 8080, "plain")
    assert plain.pause() is True
    assert fetch_json(plain.get_host(8080)) == not_found(plain.sandbox_id)
    assert plain.is_running() is False

    auto = new_sandbox(lifecycle={"on_timeout": "pause", "auto_resume": True})
    serve(auto, 8080, "auto")
    assert auto.pause() is True
    assert fetch(auto.get_host(8080), "/") == (200, b"auto")
    assert auto.is_running() is True


def test_allow_public_traffic_false_needs_the_traffic_access_token(new_sandbox):
    sandbox = new_sandbox(network={"allow_public_traffic": False})
    token = sandbox.traffic_access_token
    assert token
    sandbox.files.write("/home/user/www/index.html", "private")
    server = sandbox.commands.run("cd /home/user/www && exec python3 -m http.server 8080", background=True,
                                  timeout=0)
    try:
        host = sandbox.get_host(8080)
        headers = {"e2b-traffic-access-token": token}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and fetch(host, "/", headers)[0] != 200:
            time.sleep(0.2)
        assert fetch(host, "/", headers) == (200, b"private")
        missing = "Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing"
        assert fetch_json(host) == (403, {"sandboxId": sandbox.sandbox_id, "message": missing, "code": 403})
        assert fetch(host, "/", {"e2b-traffic-access-token": "0" * 64})[0] == 403
    finally:
        assert sandbox.commands.kill(server.pid) is True


def test_allow_public_traffic_true_needs_no_token(new_sandbox):
    sandbox = new_sandbox(network={"allow_public_traffic": True})
    assert sandbox.traffic_access_token is None
    sandbox.files.write("/home/user/www/index.html", "public")
    server = sandbox.commands.run("cd /home/user/www && exec python3 -m http.server 8080", background=True,
                                  timeout=0)
    try:
        host = sandbox.get_host(8080)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and fetch(host, "/")[0] != 200:
            time.sleep(0.2)
        assert fetch(host, "/") == (200, b"public")
    finally:
        assert sandbox.commands.kill(server.pid) is True
