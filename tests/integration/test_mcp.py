"""`bulkhead mcp`: the Model Context Protocol server on stdio, driven by the official MCP
clients (the Python SDK from .tools/venv, the TypeScript SDK from tests/mcp-client-node),
each calling every tool against the real daemon, and by raw JSON-RPC lines for the protocol's
edge cases: framing, errors, both protocol eras, batches, cancellation and shutdown."""

import http.client
import json
import os
import queue
import subprocess
import threading
import urllib.parse
import uuid

import pytest

import harness
import tooling

NODE_PROJECT = harness.REPO_ROOT / "tests" / "mcp-client-node"
PYTHON_CLIENT = harness.REPO_ROOT / "tests" / "integration" / "mcp_python_client.py"
MODERN = "2026-07-28"
MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}


def tcp_env(daemon) -> dict:
    """The server finds the daemon by --url's variable and is given the key."""
    return {"PATH": os.environ["PATH"], "BULKHEAD_URL": f"http://127.0.0.1:{daemon.port}",
            "BULKHEAD_API_KEY": daemon.key}


def state_dir_env(daemon) -> dict:
    """The server finds the daemon's unix socket and key file through its state dir."""
    return {"PATH": os.environ["PATH"], "BULKHEAD_STATE": str(daemon.state_dir)}


class RawMcp:
    """`bulkhead mcp` on pipes, spoken to line by line."""

    def __init__(self, env: dict, session_dir):
        self.stderr_path = session_dir / f"mcp-{uuid.uuid4().hex[:8]}.log"
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([str(harness.BULKHEAD), "mcp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, env=env)
        self.lines = queue.Queue()
        self.raw_lines = []  # everything the server wrote on stdout
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 1000

    def _read(self):
        for line in self.proc.stdout:
            self.raw_lines.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def send_line(self, text: str):
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def send(self, message):
        self.send_line(json.dumps(message))

    def recv(self, timeout: float = 60):
        line = self.lines.get(timeout=timeout)
        assert line is not None, f"the server closed its output; stderr:\n{self.stderr_path.read_text()}"
        return json.loads(line)

    def request(self, method: str, params=None, id=None, timeout: float = 120):
        """Sends a request and returns its response (other messages must not come first)."""
        if id is None:
            self.next_id += 1
            id = self.next_id
        message = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        response = self.recv(timeout)
        assert response.get("id") == id, f"expected the answer to {id}, got {response}"
        return response

    def initialize(self, version: str = "2025-11-25") -> dict:
        response = self.request("initialize", {"protocolVersion": version, "capabilities": {},
                                               "clientInfo": {"name": "raw-test", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return response

    def call(self, name: str, arguments, id=None, meta=None):
        params = {"name": name, "arguments": arguments}
        if meta:
            params["_meta"] = meta
        return self.request("tools/call", params, id=id)

    def close(self, timeout: float = 60) -> int:
        """Closes the server's input, as a client ends the session; returns its exit code."""
        self.proc.stdin.close()
        code = self.proc.wait(timeout)
        self.stderr.close()
        return code

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self.stderr.closed:
            self.stderr.close()


@pytest.fixture
def mcp(daemon, session_dir):
    servers = []

    def start(env=None) -> RawMcp:
        server = RawMcp(env or tcp_env(daemon), session_dir)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.kill()


def assert_error(response, code, *fragments):
    assert "error" in response and "result" not in response, response
    assert response["error"]["code"] == code, response
    for fragment in fragments:
        assert fragment in response["error"]["message"], response
    return response["error"]


def tool_text(response) -> str:
    return response["result"]["content"][0]["text"]


# ---------------------------------------------------------------- the official clients

def labelled_sandboxes(client, run_id):
    return client.list(f"metadata.mcp-test={run_id}")


def run_client(command, env, daemon, timeout=600):
    result = subprocess.run(command, env={**os.environ, **env, "BULKHEAD_BIN": str(harness.BULKHEAD),
                                          "DAEMON_PORT": str(daemon.port), "DAEMON_KEY": daemon.key},
                            capture_output=True, text=True, timeout=timeout)
    output = result.stdout + ("\n--- stderr ---\n" + result.stderr[-4000:] if result.stderr else "")
    assert result.returncode == 0 and "all steps passed" in result.stdout, output
    return result.stdout


@pytest.mark.parametrize("mode, version, env_of", [
    ("auto", MODERN, state_dir_env),        # the SDK probes server/discover: stateless 2026-07-28
    ("legacy", "2025-11-25", tcp_env),      # the initialize handshake
])
def test_python_sdk_calls_every_tool(client, daemon, mode, version, env_of):
    venv_python = tooling.require_pypi_tools() / "python"
    run_id = uuid.uuid4().hex[:12]
    try:
        out = run_client([str(venv_python), str(PYTHON_CLIENT)],
                         {"MCP_MODE": mode, "MCP_EXPECT_VERSION": version, "MCP_RUN_ID": run_id,
                          "MCP_SERVER_ENV": json.dumps(env_of(daemon))}, daemon)
        assert f"connected with protocol {version}" in out
        # The client deleted what it made: the daemon agrees.
        assert labelled_sandboxes(client, run_id) == []
    finally:
        for sandbox in labelled_sandboxes(client, run_id):
            client.delete(f"/v1/sandboxes/{sandbox['id']}")


def test_typescript_sdk_calls_every_tool(client, daemon):
    tooling.require_node_project(NODE_PROJECT)
    assert (NODE_PROJECT / "node_modules" / "@modelcontextprotocol" / "sdk").exists(), \
        "the TypeScript MCP SDK is missing: run scripts/install-test-tools.sh"
    run_id = uuid.uuid4().hex[:12]
    try:
        out = run_client(["node", str(NODE_PROJECT / "client.mjs")],
                         {"MCP_EXPECT_VERSION": "2025-11-25", "MCP_RUN_ID": run_id,
                          "MCP_SERVER_ENV": json.dumps(tcp_env(daemon))}, daemon)
        assert "connected with protocol 2025-11-25" in out
        assert labelled_sandboxes(client, run_id) == []
    finally:
        for sandbox in labelled_sandboxes(client, run_id):
            client.delete(f"/v1/sandboxes/{sandbox['id']}")


def test_healthz_tells_where_ports_are_reached(client, daemon):
    health = client.get("/healthz", key=None).json()
    assert health["listen"] == [f"127.0.0.1:{daemon.port}"]
    assert health["preview_domain"] == "localhost:7420"


def test_expose_port_of_a_private_preview_gives_what_its_preview_url_needs(mcp, client, daemon):
    server = mcp()
    server.initialize()
    created = server.call("create_sandbox", {"private_preview": True, "timeout_s": 600})["result"]["structuredContent"]
    sid = created["id"]
    try:
        token = client.sandbox(sid)["preview"]["token"]
        client.sh(sid, "mkdir -p /tmp/www && echo private > /tmp/www/index.html")
        r = client.post(f"/v1/sandboxes/{sid}/processes",
                        {"cmd": ["python3", "-m", "http.server", "8000", "--directory", "/tmp/www"]})
        assert r.status == 201, r

        def exposed():
            port = server.call("expose_port", {"sandbox_id": sid, "port": 8000})["result"]["structuredContent"]
            return port if port["listening"] else None
        port = harness.wait_until(exposed, timeout=30)
        assert port, "the http server never listened"
        assert port["preview_headers"] == {"Bulkhead-Preview-Token": token}
        assert port["preview_browser_url"] == port["preview_url"] + "?bulkhead_preview_token=" + token
        assert "private" in port["note"]
        preview = urllib.parse.urlsplit(port["preview_url"])

        def get(headers):
            conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
            conn.request("GET", "/index.html", headers={"Host": preview.netloc, **headers})
            answer = conn.getresponse()
            body = answer.read()
            conn.close()
            return answer.status, body
        assert get({})[0] == 403
        assert get(port["preview_headers"]) == (200, b"private\n")
        # A public sandbox: no headers needed, the browser URL is the plain one.
        public = server.call("create_sandbox", {"timeout_s": 600})["result"]["structuredContent"]["id"]
        try:
            plain = server.call("expose_port", {"sandbox_id": public, "port": 8000})["result"]["structuredContent"]
            assert plain["preview_headers"] == {} and plain["preview_browser_url"] == plain["preview_url"]
        finally:
            client.remove(public)
    finally:
        client.remove(sid)
    assert server.close() == 0


def test_create_sandbox_takes_deny_entries(mcp, client):
    server = mcp()
    server.initialize()
    created = server.call("create_sandbox", {"allow": ["*.test"], "deny": ["other.test"], "timeout_s": 600})
    sid = created["result"]["structuredContent"]["id"]
    try:
        assert client.sandbox(sid)["network"] == {"mode": "allowlist", "allow": ["*.test"], "deny": ["other.test"]}
    finally:
        client.remove(sid)
    refused = server.call("create_sandbox", {"network": "none", "deny": ["other.test"], "timeout_s": 600})
    assert "deny entries" in tool_text(refused), refused
    assert server.close() == 0


# ---------------------------------------------------------------- the handshake era

def test_handshake_negotiates_the_clients_version_or_offers_the_newest(mcp):
    for asked, answered in [("2025-06-18", "2025-06-18"), ("2024-11-05", "2024-11-05"),
                            ("2025-11-25", "2025-11-25"), ("1999-01-01", "2025-11-25"), (MODERN, "2025-11-25")]:
        server = mcp()
        result = server.initialize(asked)["result"]
        assert result["protocolVersion"] == answered
        assert result["serverInfo"]["name"] == "bulkhead"
        assert result["capabilities"]["tools"] == {"listChanged": False}
        assert "create_sandbox" in result["instructions"]
        assert "resultType" not in result  # a 2026-07-28 field; the handshake era has none
        assert server.close() == 0


def test_session_lifecycle_on_stdio(mcp):
    server = mcp()
    assert_error(server.request("tools/list"), -32600, "not initialized")
    assert server.request("ping")["result"] == {}  # ping is allowed before initialize
    server.initialize()
    assert_error(server.request("initialize", {"protocolVersion": "2025-11-25"}), -32600, "already initialized")
    tools = server.request("tools/list")["result"]["tools"]
    assert len({t["name"] for t in tools}) == 15
    assert server.request("tools/list")["result"]["tools"] == tools  # a fixed order, for clients' caches
    for tool in tools:
        assert tool["inputSchema"]["type"] == "object" and tool["inputSchema"]["additionalProperties"] is False
        assert tool["outputSchema"]["type"] == "object"
        assert tool["title"] and len(tool["description"]) > 80
    assert_error(server.request("tools/list", {"cursor": "x"}), -32602, "cursor")
    assert server.close() == 0
    # Only JSON-RPC on stdout; the log is on stderr.
    for line in server.raw_lines:
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert "serving MCP on stdio" in server.stderr_path.read_text()


def test_malformed_messages_get_json_rpc_errors_and_the_server_goes_on(mcp):
    server = mcp()
    server.send_line("this is not json")
    assert_error(server.recv(), -32700, "not valid JSON")["code"]
    server.send_line('{"jsonrpc": "2.0", "id": 1, "method": "ping"')  # cut short
    assert server.recv()["error"]["code"] == -32700
    server.send_line('{"jsonrpc": "2.0", "id": 2}')
    response = server.recv()
    assert response["id"] == 2 and assert_error(response, -32600, "method")
    server.send_line('{"jsonrpc": "1.0", "id": 3, "method": "ping"}')
    assert_error(server.recv(), -32600, "2.0")
    server.send_line('{"jsonrpc": "2.0", "id": null, "method": "ping"}')
    assert_error(server.recv(), -32600, "id")
    server.send_line('{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": [1]}')
    response = server.recv()
    assert response["id"] == 4 and assert_error(response, -32600, "params")
    server.send_line('"just a string"')
    assert_error(server.recv(), -32600)
    server.send_line("")  # blank lines are skipped
    server.send({"jsonrpc": "2.0", "method": "notifications/unknown"})  # a notification gets no answer
    server.send({"jsonrpc": "2.0", "id": 5, "result": {}})  # nor does a response
    for params in ({"requestId": {"x": 1}, "reason": 7}, {"reason": None}):  # odd cancellations: ignored
        server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})
    server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": []})
    assert_error(server.recv(), -32600, "params")
    assert server.request("ping", id=6)["result"] == {}
    assert_error(server.request("initialize", {"capabilities": {}}), -32602, "protocolVersion")
    weird = server.request("initialize", {"protocolVersion": "2025-11-25", "clientInfo": "not an object"})
    assert weird["result"]["protocolVersion"] == "2025-11-25"
    assert server.close() == 0

    server = mcp()
    server.initialize()
    assert server.request("tools/list")["result"]["tools"]
    assert server.close() == 0


def test_unknown_methods_tools_and_bad_arguments(mcp, sandbox):
    server = mcp()
    server.initialize()
    assert_error(server.request("resources/list"), -32601, "resources/list")
    assert_error(server.request("tools/call", {"name": "no_such_tool", "arguments": {}}), -32602,
                 "Unknown tool", "no_such_tool")
    assert_error(server.request("tools/call", {"arguments": {}}), -32602, "name")
    assert_error(server.request("tools/call", {"name": "run_command", "arguments": ["ls"]}), -32602, "object")

    # Invalid arguments are tool errors a model can correct, not protocol errors.
    cases = [
        ({"sandbox_id": sandbox, "command": "ls", "timeout_s": "ten"}, "'timeout_s' must be an integer"),
        ({"sandbox_id": sandbox, "command": "ls", "timeout_s": 99999}, "from 1 to 3600"),
        ({"command": "ls"}, "missing required argument 'sandbox_id'"),
        ({"sandbox_id": sandbox, "command": "ls", "shell": True}, "unknown argument 'shell'"),
        ({"sandbox_id": sandbox, "argv": []}, "'argv' must have at least 1"),
        ({"sandbox_id": sandbox, "argv": ["ls", 3]}, "'argv[1]' must be a string"),
        ({"sandbox_id": sandbox, "command": "ls", "argv": ["ls"]}, "not both"),
        ({"sandbox_id": sandbox, "command": "ls", "env": {"A": 1}}, "'env.A' must be a string"),
    ]
    for arguments, fragment in cases:
        result = server.call("run_command", arguments)["result"]
        assert result["isError"] is True and fragment in result["content"][0]["text"], (arguments, result)
        assert "structuredContent" not in result
    result = server.call("search_files", {"sandbox_id": sandbox})["result"]
    assert result["isError"] and "name_glob" in tool_text({"result": result})
    result = server.call("write_file", {"sandbox_id": sandbox, "path": "x", "content": "!!", "encoding": "base64"})
    assert result["result"]["isError"] and "base64" in tool_text(result)
    result = server.call("run_command", {"sandbox_id": "nosuchsandbox", "command": "true"})
    assert result["result"]["isError"] and "call list_sandboxes" in tool_text(result)
    # A good call after all that.
    result = server.call("run_command", {"sandbox_id": sandbox, "argv": ["echo", "fine"]})["result"]
    assert result["isError"] is False and result["structuredContent"]["stdout"] == "fine\n"
    assert server.close() == 0


# ---------------------------------------------------------------- the stateless era (2026-07-28)

def test_stateless_requests_carry_their_version(mcp, sandbox):
    server = mcp()
    discovered = server.request("server/discover", {"_meta": MODERN_META})["result"]
    assert discovered["resultType"] == "complete"
    assert discovered["supportedVersions"][0] == MODERN and "2025-11-25" in discovered["supportedVersions"]
    assert discovered["capabilities"]["tools"] == {"listChanged": False}
    assert discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "bulkhead"
    assert discovered["cacheScope"] == "public" and discovered["ttlMs"] > 0

    listing = server.request("tools/list", {"_meta": MODERN_META})["result"]
    assert listing["resultType"] == "complete" and len(listing["tools"]) == 15
    assert listing["cacheScope"] == "public" and listing["ttlMs"] > 0

    result = server.call("run_command", {"sandbox_id": sandbox, "command": "echo modern"}, meta=MODERN_META)["result"]
    assert result["resultType"] == "complete" and result["structuredContent"]["stdout"] == "modern\n"
    assert "echo" not in result["content"][0]["text"] and "modern" in result["content"][0]["text"]

    error = assert_error(server.request("tools/list", {"_meta": {**MODERN_META,
                         "io.modelcontextprotocol/protocolVersion": "2030-01-01"}}), -32022)
    assert error["data"]["requested"] == "2030-01-01" and MODERN in error["data"]["supported"]
    assert_error(server.request("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}),
                 -32602, "clientCapabilities")
    assert_error(server.request("server/discover"), -32602, "_meta")
    assert_error(server.request("resources/list", {"_meta": MODERN_META}), -32601)
    # Nothing carried over: a request without the metadata is still refused.
    assert_error(server.request("tools/list"), -32600, "not initialized")
    assert server.close() == 0


# ---------------------------------------------------------------- batches

def test_batches_only_in_the_revision_that_had_them(mcp):
    server = mcp()
    server.initialize("2025-11-25")
    server.send([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
    assert_error(server.recv(), -32600, "batches", "2025-03-26")
    assert server.close() == 0

    server = mcp()
    server.initialize("2025-03-26")
    server.send([{"jsonrpc": "2.0", "id": "a", "method": "ping"},
                 {"jsonrpc": "2.0", "method": "notifications/initialized"},
                 {"jsonrpc": "2.0", "id": "b", "method": "tools/list"},
                 {"jsonrpc": "2.0", "id": "c", "method": "nope"}])
    answers = server.recv()
    assert isinstance(answers, list) and [a["id"] for a in answers] == ["a", "b", "c"]
    assert answers[0]["result"] == {} and len(answers[1]["result"]["tools"]) == 15
    assert answers[2]["error"]["code"] == -32601
    server.send([])
    assert_error(server.recv(), -32600, "empty")
    assert server.close() == 0


# ---------------------------------------------------------------- concurrency, cancellation, shutdown

def test_calls_run_concurrently_and_answer_when_done(mcp, client, sandbox):
    server = mcp()
    server.initialize()
    gate = f"/tmp/gate-{uuid.uuid4().hex[:8]}"
    server.send({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
                 "params": {"name": "run_command",
                            "arguments": {"sandbox_id": sandbox, "command": f"while [ ! -e {gate} ]; do sleep 0.1; done; echo opened"}}})
    # The slow call cannot finish before the gate opens, yet a later call is answered.
    quick = server.call("run_command", {"sandbox_id": sandbox, "argv": ["echo", "quick"]}, id="quick")
    assert quick["result"]["structuredContent"]["stdout"] == "quick\n"
    client.sh(sandbox, f"touch {gate}")
    slow = server.recv()
    assert slow["id"] == "slow" and slow["result"]["structuredContent"]["stdout"] == "opened\n"
    assert server.close() == 0


def test_a_cancelled_call_gets_no_answer_and_its_command_stops(mcp, client, sandbox):
    server = mcp()
    server.initialize()
    marker = "4242.5"
    server.send({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
                 "params": {"name": "run_command",
                            "arguments": {"sandbox_id": sandbox, "argv": ["sleep", marker], "timeout_s": 3600}}})
    # argv, not a shell line: a shell's own command line would match the pattern too.
    running = lambda: client.exec(sandbox, ["pgrep", "-f", f"^sleep {marker}$"])["exit_code"] == 0
    assert harness.wait_until(running, timeout=30), "the command never started"
    server.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                 "params": {"requestId": 77, "reason": "the user changed their mind"}})
    assert harness.wait_until(lambda: not running(), timeout=30), "the cancelled command still runs"
    assert server.request("ping", id=78)["result"] == {}
    assert server.close() == 0
    ids = [json.loads(line).get("id") for line in server.raw_lines]
    assert 77 not in ids, ids
    assert "cancelled" in server.stderr_path.read_text()


def test_closing_input_ends_the_server_and_its_calls(mcp, client, sandbox):
    server = mcp()
    server.initialize()
    server.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                 "params": {"name": "read_process_output",
                            "arguments": {"sandbox_id": sandbox, "pid": client.post(
                                f"/v1/sandboxes/{sandbox}/processes", {"cmd": ["sleep", "600"]}).json()["pid"],
                                "wait_s": 60}}})
    assert server.close(timeout=30) == 0


def test_a_daemon_that_is_down_is_a_tool_error(mcp, session_dir):
    server = mcp({"PATH": os.environ["PATH"], "BULKHEAD_URL": f"http://127.0.0.1:{harness.free_port()}",
                  "BULKHEAD_API_KEY": "x"})
    server.initialize()
    result = server.call("list_sandboxes", {})["result"]
    assert result["isError"] and "cannot reach the bulkhead daemon" in result["content"][0]["text"]
    assert server.close() == 0
