"""sandbox.get_host(port): a server started inside the sandbox (a background command) answers
through the daemon's main API port when the request's Host header is get_host(port); with
allow_public_traffic False only to requests with the sandbox's traffic_access_token."""

import http.client
import os
import time
import urllib.parse
import uuid


def fetch(host_header: str, path: str, headers=None) -> tuple[int, bytes]:
    main = urllib.parse.urlsplit(os.environ["BULKHEAD_MAIN_URL"])
    conn = http.client.HTTPConnection(main.hostname, main.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host_header, **(headers or {})})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


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
    finally:
        assert sbx.commands.kill(server.pid) is True


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
        assert fetch(host, "/")[0] == 403
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
