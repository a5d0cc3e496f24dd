"""A sandbox's ports (API.md "Ports"): HTTP through /v1/sandboxes/{id}/ports/{port}/... and by
host name {port}-{id}.{preview_domain} (bodies streamed both ways, headers, server-sent
events, WebSocket), the errors, and `bulkhead port-forward` (raw TCP). The servers run inside
the sandbox as background processes (the host image has python3)."""

import hashlib
import http.client
import json
import os
import random
import signal
import socket
import struct
import subprocess
import threading

import pytest

from sandbox_apps import ECHO_APP, WS_APP
import harness
from harness import BULKHEAD, WebSocket, assert_error_shape, files_url, stream_upload, wait_until

APP_PORT = 8000
WS_PORT = 8001
ECHO_PORT = 7000
MB = 1 << 20

# An HTTP app: echoes what it was asked, hashes or echoes bodies, sends bytes and events.
APP = r'''
import hashlib, json, os, random, socket, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def body_pieces(handler):
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        while True:
            size = int(handler.rfile.readline().split(b";")[0], 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b""):
                    pass
                return
            yield handler.rfile.read(size)
            handler.rfile.readline()
    else:
        left = int(handler.headers.get("Content-Length", "0"))
        while left > 0:
            piece = handler.rfile.read(min(left, 65536))
            if not piece:
                return
            left -= len(piece)
            yield piece

class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, value, status=200):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def describe(self):
        body = b"".join(body_pieces(self))
        self.send_json({"method": self.command, "path": self.path, "headers": self.headers.items(),
                        "body": body.decode("latin-1")})

    def do_GET(self):
        if self.path.startswith("/bytes"):
            total, seed = (int(x) for x in self.path.split("?")[1].split(","))
            rng = random.Random(seed)
            self.send_response(200)
            self.send_header("Content-Length", str(total))
            self.end_headers()
            while total > 0:
                piece = rng.randbytes(min(total, 1 << 20))
                self.wfile.write(piece)
                total -= len(piece)
        elif self.path == "/events":
            # One event per 100 ms until the test drops /tmp/stop-events (or 60 s passed).
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.close_connection = True
            for n in range(600):
                self.wfile.write(b"data: event %d\n\n" % n)
                self.wfile.flush()
                if os.path.exists("/tmp/stop-events"):
                    break
                time.sleep(0.1)
            self.wfile.write(b"data: end\n\n")
        else:
            self.describe()

    def do_POST(self):
        if self.path == "/sha256":
            digest, length = hashlib.sha256(), 0
            for piece in body_pieces(self):
                digest.update(piece)
                length += len(piece)
            self.send_json({"sha256": digest.hexdigest(), "length": length})
        elif self.path == "/echo":
            # Streams the body back while it still arrives.
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in body_pieces(self):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.describe()

    do_PUT = do_PATCH = do_DELETE = describe

class Server(ThreadingHTTPServer):
    allow_reuse_address = True
    address_family = socket.AF_INET6 if len(sys.argv) > 2 else socket.AF_INET

Server((sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1", int(sys.argv[1])), App).serve_forever()
'''



# ---------------------------------------------------------------- helpers

def ports_url(sandbox_id, port, rest=""):
    return f"/v1/sandboxes/{sandbox_id}/ports/{port}{rest}"


def start_server(client, sandbox_id, name: str, source: str, port: int, host: str = "127.0.0.1"):
    path = f"/tmp/{name}.py"
    r = client.request("PUT", files_url(sandbox_id, path=path), body=source.encode())
    assert r.status in (200, 201), r
    cmd = ["python3", path, str(port)] + ([host] if host != "127.0.0.1" else [])
    r = client.post(f"/v1/sandboxes/{sandbox_id}/processes", {"cmd": cmd, "tag": name})
    assert r.status == 201, r
    # Listening once a connection inside the sandbox succeeds.
    probe = f"import socket; socket.create_connection(('{host}', {port})).close()"
    assert wait_until(lambda: client.exec(sandbox_id, ["python3", "-c", probe])["exit_code"] == 0, timeout=30), \
        f"{name} never listened on {port}"


@pytest.fixture
def app(client, sandbox):
    """A sandbox running the HTTP app on APP_PORT; its id."""
    start_server(client, sandbox, "app", APP, APP_PORT)
    return sandbox


def random_pieces(total: int, seed: int):
    """The bytes the app's /bytes sends, in the same 1 MiB pieces."""
    rng = random.Random(seed)
    while total > 0:
        piece = rng.randbytes(min(total, MB))
        total -= len(piece)
        yield piece


def sha256_of(pieces) -> tuple[str, int]:
    digest, length = hashlib.sha256(), 0
    for piece in pieces:
        digest.update(piece)
        length += len(piece)
    return digest.hexdigest(), length


def described(r) -> dict:
    assert r.status == 200, r
    d = r.json()
    d["headers"] = {k.lower(): v for k, v in d["headers"]}
    return d


def raw_request(port: int, head: str) -> socket.socket:
    """A connection to the daemon with `head` (a request without body) sent."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(head.encode())
    return sock


def read_head(sock: socket.socket) -> tuple[int, dict, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed during the head: {data!r}"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, rest


# ---------------------------------------------------------------- HTTP by path

def test_get_reaches_the_app_with_path_query_and_forwarded_headers(client, app):
    r = client.get(ports_url(app, APP_PORT, "/some/where%20else?q=a+b&r=x%2Fy&empty"),
                   headers={"X-Custom": "kept", "Cookie": "session=1", "X-Forwarded-Prefix": "/spoofed"})
    d = described(r)
    assert d["method"] == "GET"
    assert d["path"] == "/some/where%20else?q=a+b&r=x%2Fy&empty"  # as the client encoded it
    h = d["headers"]
    assert "authorization" not in h  # the bulkhead key never reaches the sandbox
    assert h["x-custom"] == "kept" and h["cookie"] == "session=1"
    assert h["host"] == f"localhost:{APP_PORT}"
    assert h["x-forwarded-prefix"] == f"/v1/sandboxes/{app}/ports/{APP_PORT}"
    assert h["x-forwarded-proto"] == "http"
    assert h["x-forwarded-for"] == "127.0.0.1"
    assert h["x-forwarded-host"] == f"127.0.0.1:{client.port}"
    assert h["connection"] == "close"
    assert r.headers["connection"] == "close"


def test_the_port_root_and_other_methods(client, app):
    assert described(client.get(ports_url(app, APP_PORT)))["path"] == "/"
    assert described(client.get(ports_url(app, APP_PORT, "/")))["path"] == "/"
    for method in ("PUT", "PATCH", "DELETE"):
        d = described(client.request(method, ports_url(app, APP_PORT, "/item/7"), body=b"payload-" + method.encode()))
        assert (d["method"], d["path"], d["body"]) == (method, "/item/7", "payload-" + method)
    d = described(client.post(ports_url(app, APP_PORT, "/form"), {"a": 1}))
    assert json.loads(d["body"]) == {"a": 1} and d["headers"]["content-type"] == "application/json"


def test_a_50_mb_upload_streams_with_content_length_and_chunked(client, app):
    expected, length = sha256_of(random_pieces(50 * MB, 1))
    r = stream_upload(client, "POST", ports_url(app, APP_PORT, "/sha256"), random_pieces(50 * MB, 1), length=length)
    assert r.status == 200, r
    assert json.loads(r.body) == {"sha256": expected, "length": length}
    r = stream_upload(client, "POST", ports_url(app, APP_PORT, "/sha256"), random_pieces(50 * MB, 1))  # chunked
    assert r.status == 200, r
    assert json.loads(r.body) == {"sha256": expected, "length": length}


def test_a_50_mb_download_streams(client, app):
    expected, length = sha256_of(random_pieces(50 * MB, 2))
    conn = client.connection()
    conn.request("GET", ports_url(app, APP_PORT, f"/bytes?{length},2"), headers={"Authorization": f"Bearer {client.key}"})
    resp = conn.getresponse()
    assert resp.status == 200
    assert int(resp.getheader("Content-Length")) == length
    digest, got = hashlib.sha256(), 0
    while piece := resp.read(MB):
        digest.update(piece)
        got += len(piece)
    conn.close()
    assert (digest.hexdigest(), got) == (expected, length)


def test_a_50_mb_body_streams_back_while_it_is_still_being_sent(client, app):
    """The app echoes the body as it reads it: only a proxy that moves both directions at
    once gets through 50 MB (each side's buffers hold far less)."""
    expected, length = sha256_of(random_pieces(50 * MB, 3))
    sock = raw_request(client.port, f"POST {ports_url(app, APP_PORT, '/echo')} HTTP/1.1\r\nHost: x\r\n"
                                    f"Authorization: Bearer {client.key}\r\nContent-Length: {length}\r\n\r\n")

    def send():
        for piece in random_pieces(50 * MB, 3):
            sock.sendall(piece)
    sender = threading.Thread(target=send)
    sender.start()
    status, headers, rest = read_head(sock)
    assert status == 200 and headers["transfer-encoding"] == "chunked"
    reader = sock.makefile("rb")
    buffered = rest
    digest, got = hashlib.sha256(), 0

    def read_exactly(n):
        nonlocal buffered
        while len(buffered) < n:
            buffered += reader.read1(MB)
        data, buffered = buffered[:n], buffered[n:]
        return data
    while True:
        size_line = b""
        while not size_line.endswith(b"\r\n"):
            size_line += read_exactly(1)
        size = int(size_line, 16)
        if size == 0:
            break
        digest.update(read_exactly(size))
        read_exactly(2)
        got += size
    sender.join()
    sock.close()
    assert (digest.hexdigest(), got) == (expected, length)


def test_expect_100_continue_is_answered_before_the_body_is_sent(client, app):
    sock = raw_request(client.port, f"POST {ports_url(app, APP_PORT, '/sha256')} HTTP/1.1\r\nHost: x\r\n"
                                    f"Authorization: Bearer {client.key}\r\nContent-Length: 5\r\n"
                                    "Expect: 100-continue\r\n\r\n")
    status, _, rest = read_head(sock)
    assert status == 100 and rest == b""
    sock.sendall(b"hello")
    status, headers, rest = read_head(sock)
    while len(rest) < int(headers["content-length"]):
        rest += sock.recv(65536)
    sock.close()
    assert status == 200
    assert json.loads(rest) == {"sha256": hashlib.sha256(b"hello").hexdigest(), "length": 5}


def test_an_app_listening_only_on_ipv6_loopback_is_reached(client, sandbox):
    start_server(client, sandbox, "app6", APP, 8006, host="::1")
    d = described(client.get(ports_url(sandbox, 8006, "/six")))
    assert d["path"] == "/six"


def test_server_sent_events_arrive_as_they_are_sent(client, app):
    conn = client.connection(timeout=30)
    conn.request("GET", ports_url(app, APP_PORT, "/events"), headers={"Authorization": f"Bearer {client.key}"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    # The stream cannot end before the stop file exists: seeing an event now proves that
    # nothing holds the stream back.
    assert resp.readline() == b"data: event 0\n"
    client.sh(app, "touch /tmp/stop-events")
    rest = resp.read()
    conn.close()
    assert rest.endswith(b"data: end\n\n")


def test_a_websocket_is_relayed_both_ways(client, sandbox):
    start_server(client, sandbox, "ws", WS_APP, WS_PORT)
    ws = WebSocket.connect(client, ports_url(sandbox, WS_PORT, "/chat"))
    ws.send_text("hello through the proxy")
    assert ws.recv() == (WebSocket.OP_TEXT, b"hello through the proxy")
    blob = os.urandom(300_000)
    ws.send_binary(blob)
    assert ws.recv() == (WebSocket.OP_BINARY, blob)
    ws.send_frame(WebSocket.OP_CLOSE, struct.pack("!H", 1000))
    op, payload = ws.recv()
    assert op == WebSocket.OP_CLOSE and struct.unpack("!H", payload[:2])[0] == 1000
    ws.sock.close()


# ---------------------------------------------------------------- HTTP by host name

def host_request(client, host: str, path: str, headers=None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", client.port, timeout=60)
    conn.request("GET", path, headers={"Host": host, **(headers or {})})
    resp = conn.getresponse()
    resp.body = resp.read()
    conn.close()
    return resp


def test_host_routing_needs_no_key_and_keeps_path_and_host(client, app):
    host = f"{APP_PORT}-{app}.localhost:7420"
    resp = host_request(client, host, "/v1/sandboxes?x=1", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert resp.status == 200, resp.body
    d = json.loads(resp.body)
    # Under a preview host name everything is the app's, the API's paths included.
    assert d["path"] == "/v1/sandboxes?x=1"
    h = {k.lower(): v for k, v in d["headers"]}
    assert h["host"] == host
    assert h["authorization"] == "Basic dXNlcjpwYXNz"  # an app's own credentials pass
    assert "x-forwarded-prefix" not in h
    # Upper case works (host names are case-insensitive); the bulkhead key is still dropped.
    resp = host_request(client, host.upper(), "/", headers={"Authorization": f"Bearer {client.key}"})
    assert resp.status == 200
    assert "authorization" not in {k.lower() for k, _ in json.loads(resp.body)["headers"]}


def test_host_routing_errors_are_404(client, app):
    for host in (f"{APP_PORT}-nosuchsandbox0000000.localhost:7420", f"0-{app}.localhost:7420",
                 f"70000-{app}.localhost:7420", f"web-{app}.localhost:7420"):
        resp = host_request(client, host, "/")
        assert resp.status == 404, (host, resp.status, resp.body)
        assert json.loads(resp.body)["error"]["code"] in ("sandbox_not_found", "not_found")
    # Not a preview host: the API as usual, key required.
    assert host_request(client, f"{APP_PORT}-{app}.localhost:7421", "/v1/sandboxes").status == 401


# ---------------------------------------------------------------- private previews

def host_call(client, method: str, host: str, path: str, headers=None) -> harness.Response:
    """A request by preview host name, without the API key unless `headers` carry it."""
    conn = http.client.HTTPConnection("127.0.0.1", client.port, timeout=60)
    try:
        conn.request(method, path, headers={"Host": host, **(headers or {})})
        r = conn.getresponse()
        return harness.Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


@pytest.fixture
def private_app(client, sandbox_factory):
    """A sandbox with a private preview running the app on APP_PORT: (id, token)."""
    sandbox = sandbox_factory(preview={"public": False})
    assert sandbox["preview"]["public"] is False
    token = sandbox["preview"]["token"]
    assert len(token) == 64 and int(token, 16) >= 0
    start_server(client, sandbox["id"], "app", APP, APP_PORT)
    return sandbox["id"], token


def test_a_public_preview_is_the_default_and_needs_no_token(client, app):
    assert client.sandbox(app)["preview"] == {"public": True}
    assert host_call(client, "GET", f"{APP_PORT}-{app}.localhost:7420", "/").status == 200


def test_a_private_preview_refuses_its_host_name_without_the_token(client, private_app):
    sid, token = private_app
    host = f"{APP_PORT}-{sid}.localhost:7420"
    # What an attacker who learnt the id does: the host name alone, a guess, a near miss.
    for method in ("GET", "POST", "DELETE"):
        r = host_call(client, method, host, "/")
        assert assert_error_shape(r, 403)["code"] == "preview_token_required", (method, r)
    for wrong in ("0" * 64, token[:-1], token + "0", token.upper()):
        r = host_call(client, "GET", host, "/", headers={"Bulkhead-Preview-Token": wrong})
        assert assert_error_shape(r, 403)["code"] == "preview_token_invalid", wrong
        r = host_call(client, "GET", host, "/", headers={"Cookie": f"bulkhead_preview_token={wrong}"})
        assert assert_error_shape(r, 403)["code"] == "preview_token_invalid", wrong
    r = host_call(client, "GET", host, "/", headers={"Authorization": "Bearer not-the-key"})
    assert assert_error_shape(r, 403)["code"] == "preview_token_required"
    assert token not in host_call(client, "GET", host, "/").body.decode()
    # Another sandbox's token does not open it.
    other = client.create(preview={"public": False})
    try:
        r = host_call(client, "GET", host, "/", headers={"Bulkhead-Preview-Token": other["preview"]["token"]})
        assert assert_error_shape(r, 403)["code"] == "preview_token_invalid"
    finally:
        client.remove(other["id"])


def test_a_private_preview_serves_the_token_holder_and_the_key_holder(client, private_app):
    sid, token = private_app
    host = f"{APP_PORT}-{sid}.localhost:7420"
    for headers in ({"Bulkhead-Preview-Token": token}, {"e2b-traffic-access-token": token},
                    {"Authorization": f"Bearer {client.key}"}):
        r = host_call(client, "POST", host, "/form?x=1", headers={**headers, "Cookie": "session=1"})
        assert r.status == 200, (headers, r)
        seen = {k.lower(): v for k, v in r.json()["headers"]}
        assert r.json()["path"] == "/form?x=1"
        # None of the credentials reaches the app; its own cookie does.
        assert seen["cookie"] == "session=1"
        assert not {"bulkhead-preview-token", "e2b-traffic-access-token", "authorization"} & seen.keys()
        assert token not in r.body.decode()
    # The keyed route needs only the API key, as before.
    assert client.get(ports_url(sid, APP_PORT, "/")).status == 200
    assert_error_shape(client.get(ports_url(sid, APP_PORT, "/"), key=None), 401)


def test_a_browser_trades_the_token_in_the_link_for_a_cookie_of_that_host(client, private_app):
    sid, token = private_app
    host = f"{APP_PORT}-{sid}.localhost:7420"
    r = host_call(client, "GET", host, f"/page?a=1&bulkhead_preview_token={token}&b=2")
    assert r.status == 303, r
    assert r.headers["location"] == "/page?a=1&b=2"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"bulkhead_preview_token={token};")
    attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
    assert {"path=/", "httponly", "samesite=lax"} <= attributes
    assert not any(a.startswith("domain") for a in attributes)  # this host name only
    assert r.headers["cache-control"] == "no-store"
    # The browser follows the redirect with the cookie; its page's own requests carry it too.
    for fetch in ({}, {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"},
                  {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}):
        r = host_call(client, "GET", host, "/page?a=1&b=2",
                      headers={"Cookie": f"theme=dark; bulkhead_preview_token={token}", **fetch})
        assert r.status == 200, (fetch, r)
        assert r.json()["path"] == "/page?a=1&b=2"
        assert {k.lower(): v for k, v in r.json()["headers"]}["cookie"] == "theme=dark"
    # A request that another sandbox's page (the same site) makes with the cookie is refused.
    r = host_call(client, "GET", host, "/", headers={"Cookie": f"bulkhead_preview_token={token}",
                                                      "Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors"})
    assert assert_error_shape(r, 403)["code"] == "preview_token_required"
    # A wrong token in the link sets nothing.
    r = host_call(client, "GET", host, "/?bulkhead_preview_token=" + "0" * 64)
    assert assert_error_shape(r, 403)["code"] == "preview_token_invalid" and "set-cookie" not in r.headers


def test_the_preview_token_is_in_neither_the_sandbox_nor_the_log(client, daemon, private_app):
    sid, token = private_app
    assert token not in client.sh(sid, "env; cat /proc/1/environ 2>/dev/null; cat /proc/1/cmdline; true")
    # A proxied request that fails (502: nothing on port 9) is logged, without the token in its link.
    r = host_call(client, "GET", f"9-{sid}.localhost:7420", f"/?bulkhead_preview_token={token}",
                  headers={"Authorization": f"Bearer {client.key}"})
    assert r.status == 502, r
    assert token not in daemon.log_path.read_text(errors="replace")
    metrics = client.get("/metrics")
    assert metrics.status == 200 and token not in metrics.body.decode()


def test_forks_and_sandboxes_from_snapshots_get_tokens_of_their_own(client, private_app):
    sid, token = private_app
    r = client.post(f"/v1/sandboxes/{sid}/fork", {"count": 2})
    assert r.status == 201, r
    forks = r.json()["sandboxes"]
    try:
        tokens = {fork["preview"]["token"] for fork in forks if fork["preview"]["public"] is False}
        assert len(tokens) == 2 and token not in tokens
        for fork in forks:
            host = f"{APP_PORT}-{fork['id']}.localhost:7420"
            start_server(client, fork["id"], "app", APP, APP_PORT)
            r = host_call(client, "GET", host, "/", headers={"Bulkhead-Preview-Token": token})  # the parent's
            assert assert_error_shape(r, 403)["code"] == "preview_token_invalid"
            r = host_call(client, "GET", host, "/", headers={"Bulkhead-Preview-Token": fork["preview"]["token"]})
            assert r.status == 200, r
    finally:
        for fork in forks:
            client.remove(fork["id"])
    r = client.post(f"/v1/sandboxes/{sid}/snapshots", {})
    assert r.status == 201, r
    snapshot = r.json()["id"]
    try:
        # A snapshot keeps the settings but not the token (exports leave the host).
        archive = client.get(f"/v1/snapshots/{snapshot}/export")
        assert archive.status == 200, archive
        unpacked = subprocess.run(["zstd", "-dc"], input=archive.body, capture_output=True, check=True).stdout
        assert b'"preview"' in unpacked and token.encode() not in unpacked
        private = client.create(from_snapshot=snapshot, preview={"public": False})
        public = client.create(from_snapshot=snapshot)
        assert private["preview"]["token"] not in (token, None) and public["preview"] == {"public": True}
        client.remove(private["id"])
        client.remove(public["id"])
    finally:
        client.delete(f"/v1/snapshots/{snapshot}")


def test_a_private_preview_keeps_its_token_across_a_daemon_restart(daemon_factory):
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    sandbox = client.create(preview={"public": False})
    sid, token = sandbox["id"], sandbox["preview"]["token"]
    start_server(client, sid, "app", APP, APP_PORT)
    daemon.stop(signal.SIGKILL)
    daemon.start()
    client = daemon.client()
    assert client.sandbox(sid)["preview"] == {"public": False, "token": token}
    host = f"{APP_PORT}-{sid}.localhost:7420"
    assert assert_error_shape(host_call(client, "GET", host, "/"), 403)["code"] == "preview_token_required"
    assert host_call(client, "GET", host, "/", headers={"Bulkhead-Preview-Token": token}).status == 200
    client.remove(sid)


def test_bad_preview_fields_are_422(client):
    for preview in (False, "private", [], {"public": "false"}, {"public": 0}, {"public": None, "token": "mine"},
                    {"token": "a" * 64}, {"pubic": False}):
        r = client.post("/v1/sandboxes", {"preview": preview})
        assert assert_error_shape(r, 422)["code"] == "invalid_argument", (preview, r)
        assert "preview" in r.json()["error"]["message"]


# ---------------------------------------------------------------- errors

def test_nothing_listening_is_502(client, sandbox):
    r = client.get(ports_url(sandbox, 9, "/"))
    assert assert_error_shape(r, 502)["code"] == "port_not_listening"


def test_unknown_sandboxes_bad_ports_and_no_key(client, app):
    assert assert_error_shape(client.get(ports_url("nosuchsandbox", APP_PORT, "/")), 404)["code"] == "sandbox_not_found"
    for port in ("0", "65536", "abc", "-1", "80.0"):
        assert_error_shape(client.get(ports_url(app, port, "/")), 422)
    r = client.get(ports_url(app, APP_PORT, "/"), key=None)
    assert_error_shape(r, 401)
    assert assert_error_shape(client.get(f"/v1/sandboxes/{app}/tcp/{APP_PORT}"), 400)["code"] == "bad_request"


# ---------------------------------------------------------------- port-forward

@pytest.fixture
def forward(daemon):
    """Starts `bulkhead port-forward` (over the daemon's unix socket); stops it with SIGINT."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env["BULKHEAD_STATE"] = str(daemon.state_dir)
    started = []

    def start(*args) -> tuple[subprocess.Popen, int]:
        proc = subprocess.Popen([str(BULKHEAD), "port-forward", *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        started.append(proc)
        line = proc.stdout.readline()
        assert line.startswith("Forwarding 127.0.0.1:"), (line, proc.stderr.read() if proc.poll() is not None else "")
        local = int(line.split()[1].split(":")[1])
        assert line.strip() == f"Forwarding 127.0.0.1:{local} -> {args[0]}:{args[1]}"
        return proc, local

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_port_forward_carries_concurrent_raw_tcp_and_stops_on_ctrl_c(client, sandbox, forward):
    start_server(client, sandbox, "echo", ECHO_APP, ECHO_PORT)
    proc, local = forward(sandbox, str(ECHO_PORT), "0")
    first = socket.create_connection(("127.0.0.1", local), timeout=30)
    second = socket.create_connection(("127.0.0.1", local), timeout=30)
    first.sendall(b"one ")
    second.sendall(b"two ")
    assert first.recv(100) == b"one "
    assert second.recv(100) == b"two "
    blob = os.urandom(4 * MB)
    sender = threading.Thread(target=lambda: (second.sendall(blob), second.shutdown(socket.SHUT_WR)))
    sender.start()
    received = b""
    while chunk := second.recv(MB):
        received += chunk  # ends with the echo server's EOF, passed on after ours
    sender.join()
    assert received == blob
    first.sendall(b"still open")
    assert first.recv(100) == b"still open"
    first.close()
    second.close()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0


def test_port_forward_to_a_closed_port_drops_the_connection_and_says_why(client, sandbox, forward):
    proc, local = forward(sandbox, "9", "0")
    conn = socket.create_connection(("127.0.0.1", local), timeout=30)
    assert conn.recv(100) == b""
    conn.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert "port_not_listening" in proc.stderr.read()


def test_port_forward_refuses_an_unknown_sandbox(daemon):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env["BULKHEAD_STATE"] = str(daemon.state_dir)
    done = subprocess.run([str(BULKHEAD), "port-forward", "nosuchsandbox", "80", "0"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "sandbox_not_found" in done.stderr
