"""Drives `bulkhead mcp` from the official Python MCP SDK (run with .tools/venv/bin/python by
test_mcp.py): lists the tools and calls every one of them for real, checking each result.
Exits non-zero with a message at the first check that fails; prints one line per step.

Environment: BULKHEAD_BIN (the binary), MCP_MODE (auto = the SDK's discover probe, which
lands on 2026-07-28; legacy = the initialize handshake), MCP_EXPECT_VERSION, MCP_RUN_ID (a
metadata label on every sandbox made here), MCP_SERVER_ENV (JSON: environment for the
server), DAEMON_PORT and DAEMON_KEY (to fetch expose_port's URLs on loopback)."""

import asyncio
import http.client
import json
import os
import sys
import time
import urllib.parse

from mcp import Client, StdioServerParameters

EXPECTED_TOOLS = {
    "create_sandbox", "list_sandboxes", "delete_sandbox", "run_command", "start_process",
    "read_process_output", "send_process_input", "kill_process", "read_file", "write_file",
    "list_files", "search_files", "snapshot_sandbox", "fork_sandbox", "expose_port",
}
RUN_ID = os.environ["MCP_RUN_ID"]
DAEMON_PORT = int(os.environ["DAEMON_PORT"])
DAEMON_KEY = os.environ["DAEMON_KEY"]
APP_PORT = 8123


def step(text):
    print(f"ok: {text}", flush=True)


def check(condition, what):
    if not condition:
        raise AssertionError(what)


class Tools:
    def __init__(self, client):
        self.client = client

    async def call(self, name, /, **arguments):
        """A call that must succeed; returns its structured content."""
        result = await self.client.call_tool(name, arguments, read_timeout_seconds=120)
        text = result.content[0].text if result.content else ""
        check(not result.is_error, f"{name}({arguments}) failed: {text}")
        check(isinstance(result.structured_content, (dict, list)), f"{name}: no structured content")
        return result.structured_content

    async def fails(self, name, /, **arguments):
        """A call that must be a tool error; returns its message."""
        result = await self.client.call_tool(name, arguments, read_timeout_seconds=120)
        text = result.content[0].text
        check(result.is_error, f"{name}({arguments}) should have failed, got {text}")
        return text


def fetch(host_header, path, headers):
    """GET on the daemon's loopback port with the given Host header."""
    conn = http.client.HTTPConnection("127.0.0.1", DAEMON_PORT, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": host_header, **headers})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


async def wait_for(predicate, what, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        check(time.monotonic() < deadline, f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def scenario(client):
    check(client.protocol_version == os.environ["MCP_EXPECT_VERSION"],
          f"protocol {client.protocol_version}, expected {os.environ['MCP_EXPECT_VERSION']}")
    step(f"connected with protocol {client.protocol_version}")

    listing = await client.list_tools()
    names = {tool.name for tool in listing.tools}
    check(names == EXPECTED_TOOLS, f"tools listed: {sorted(names)}")
    for tool in listing.tools:
        check(tool.input_schema.get("type") == "object", f"{tool.name}: inputSchema is not an object schema")
        check(len(tool.description or "") > 80, f"{tool.name}: description too short for a model")
        check(tool.output_schema is not None, f"{tool.name}: no outputSchema")
    step(f"listed {len(names)} tools with schemas")

    t = Tools(client)
    labels = {"mcp-test": RUN_ID}
    sandbox = await t.call("create_sandbox", metadata=labels, timeout_s=900, memory_mb=512)
    sid = sandbox["id"]
    check(sandbox["state"] == "running", f"new sandbox state {sandbox['state']}")
    check(sandbox["metadata"] == labels, f"metadata {sandbox['metadata']}")
    step(f"create_sandbox -> {sid}")

    listed = await t.call("list_sandboxes", metadata=labels)
    check([s["id"] for s in listed["sandboxes"]] == [sid], f"list_sandboxes by label: {listed}")
    step("list_sandboxes filters by metadata")

    # Files: text round trip, partial reads, binary, listing and search.
    text = "héllo\nwörld\n" + "line\n" * 3
    written = await t.call("write_file", sandbox_id=sid, path="src/deep/hello.txt", content=text)
    check(written["size"] == len(text.encode()), f"write_file size {written}")
    check(written["path"] == "/workspace/src/deep/hello.txt", f"write_file path {written}")
    read = await t.call("read_file", sandbox_id=sid, path="/workspace/src/deep/hello.txt")
    check(read["content"] == text and read["eof"] and not read["binary"], f"read_file: {read}")
    part = await t.call("read_file", sandbox_id=sid, path="src/deep/hello.txt", offset=1, length=3)
    # Bytes 1..4 are "é" (2 bytes) and "l": the cut stays on a character boundary.
    check(part["content"] == "él" and part["next_offset"] == 4 and not part["eof"], f"partial read: {part}")
    await t.call("write_file", sandbox_id=sid, path="src/deep/hello.txt", content="tail\n", append=True)
    read = await t.call("read_file", sandbox_id=sid, path="src/deep/hello.txt")
    check(read["content"] == text + "tail\n", f"after append: {read['content']!r}")
    await t.call("write_file", sandbox_id=sid, path="bin/blob", content="AAH/AGJpbgo=", encoding="base64", mode="0600")
    blob = await t.call("read_file", sandbox_id=sid, path="bin/blob")
    check(blob["binary"] and blob["size"] == 8 and blob["content"] == "", f"binary read: {blob}")
    step("write_file / read_file: text, append, offsets, binary")

    files = await t.call("list_files", sandbox_id=sid, depth=3)
    paths = {e["path"]: e for e in files["entries"]}
    check(paths.get("/workspace/src/deep/hello.txt", {}).get("type") == "file", f"list_files: {sorted(paths)}")
    check(paths.get("/workspace/src", {}).get("type") == "dir", f"list_files dirs: {sorted(paths)}")
    step("list_files")

    await t.call("write_file", sandbox_id=sid, path="src/code.py", content="def needle():\n    return 42\n")
    found = await t.call("search_files", sandbox_id=sid, content_regex="ne+dle\\(")
    check([(m["path"], m["line"]) for m in found["matches"]] == [("/workspace/src/code.py", 1)], f"content: {found}")
    found = await t.call("search_files", sandbox_id=sid, name_glob="*.TXT", case_insensitive=True)
    check([m["path"] for m in found["matches"]] == ["/workspace/src/deep/hello.txt"], f"by name: {found}")
    found = await t.call("search_files", sandbox_id=sid, name_glob="*.py", content_regex="return [0-9]+")
    check([m["text"] for m in found["matches"]] == ["    return 42"], f"name and content: {found}")
    found = await t.call("search_files", sandbox_id=sid, content_regex="line", max_results=2)
    check(found["count"] == 2 and found["truncated"], f"max_results: {found}")
    step("search_files by content, name, both, with a cap")

    # Commands.
    ran = await t.call("run_command", sandbox_id=sid, command="echo out; echo err >&2; exit 3")
    check((ran["exit_code"], ran["stdout"], ran["stderr"]) == (3, "out\n", "err\n"), f"run_command: {ran}")
    ran = await t.call("run_command", sandbox_id=sid, argv=["sh", "-c", 'printf "%s|" "$0" "$X"; pwd', "a b"],
                       env={"X": "y z"}, cwd="/workspace/src")
    check(ran["stdout"] == "a b|y z|/workspace/src\n", f"argv, env, cwd: {ran}")
    ran = await t.call("run_command", sandbox_id=sid, argv=["cat"], stdin="from stdin")
    check(ran["stdout"] == "from stdin", f"stdin: {ran}")
    ran = await t.call("run_command", sandbox_id=sid, argv=["sleep", "30"], timeout_s=1)
    check(ran["timed_out"] and ran["exit_code"] is None, f"timeout: {ran}")
    ran = await t.call("run_command", sandbox_id=sid, command="head -c 100000 /dev/zero | tr '\\0' a; echo END",
                       max_output_chars=1000)
    check(ran["truncated"] and ran["stdout_bytes"] == 100004, f"cap: {ran['stdout_bytes']} {ran['truncated']}")
    check(ran["stdout"].startswith("a" * 500) and ran["stdout"].endswith("aaEND\n") and "omitted" in ran["stdout"],
          "capped output keeps its start and end")
    step("run_command: exit codes, argv, env, cwd, stdin, timeout, output cap")

    # Background processes.
    echo = await t.call("start_process", sandbox_id=sid, argv=[
        "python3", "-u", "-c", "import sys\nprint('ready')\nfor line in sys.stdin: print('got', line.strip())"])
    pid = echo["pid"]
    out = await t.call("read_process_output", sandbox_id=sid, pid=pid, wait_s=20)
    first = out["stdout"]
    if first == "ready":  # print's newline can be a write of its own: read on from the offset
        out = await t.call("read_process_output", sandbox_id=sid, pid=pid,
                           stdout_offset=out["stdout_next_offset"], wait_s=20)
        first += out["stdout"]
    check(first == "ready\n" and out["running"], f"first output: {out}")
    sent = await t.call("send_process_input", sandbox_id=sid, pid=pid, data="ping\n")
    check(sent["sent_bytes"] == 5, f"send: {sent}")

    async def reply():
        got = await t.call("read_process_output", sandbox_id=sid, pid=pid,
                           stdout_offset=out["stdout_next_offset"], wait_s=5)
        return got if got["stdout"] else None
    got = await wait_for(reply, "the echo")
    check(got["stdout"] == "got ping\n", f"reply: {got}")
    await t.call("send_process_input", sandbox_id=sid, pid=pid, close_stdin=True)

    async def exited():
        state = await t.call("read_process_output", sandbox_id=sid, pid=pid,
                             stdout_offset=got["stdout_next_offset"], wait_s=5)
        return state if not state["running"] else None
    done = await wait_for(exited, "the exit after stdin closed")
    check(done["exit_code"] == 0, f"exit: {done}")
    sleeper = await t.call("start_process", sandbox_id=sid, command="sleep 600")
    killed = await t.call("kill_process", sandbox_id=sid, pid=sleeper["pid"], signal="SIGKILL")
    check(killed["sent"], f"kill: {killed}")

    async def dead():
        state = await t.call("read_process_output", sandbox_id=sid, pid=sleeper["pid"], wait_s=5)
        return state if not state["running"] else None
    dead_state = await wait_for(dead, "the killed process")
    check(dead_state["signal"] == 9 and dead_state["exit_code"] is None, f"killed: {dead_state}")
    step("start_process / read_process_output / send_process_input / kill_process")

    # A web server, reached through the daemon's proxy.
    await t.call("write_file", sandbox_id=sid, path="site/index.html", content=f"served from {RUN_ID}")
    await t.call("start_process", sandbox_id=sid, cwd="/workspace/site",
                 argv=["python3", "-m", "http.server", str(APP_PORT), "--bind", "127.0.0.1"])

    async def exposed():
        port = await t.call("expose_port", sandbox_id=sid, port=APP_PORT)
        return port if port["listening"] else None
    port = await wait_for(exposed, "the http server")
    url = urllib.parse.urlsplit(port["url"])
    check(url.hostname == "127.0.0.1" and url.port == DAEMON_PORT, f"url {port['url']}")
    status, body = fetch(url.netloc, url.path, {"Authorization": f"Bearer {DAEMON_KEY}"})
    check(status == 200 and body == f"served from {RUN_ID}".encode(), f"url fetch: {status} {body[:200]!r}")
    preview = urllib.parse.urlsplit(port["preview_url"])
    status, body = fetch(preview.netloc, preview.path, {})
    check(status == 200 and body == f"served from {RUN_ID}".encode(), f"preview fetch: {status} {body[:200]!r}")
    idle = await t.call("expose_port", sandbox_id=sid, port=9)
    check(not idle["listening"], f"port 9: {idle}")
    step("expose_port: url (with key) and preview_url (without) serve the sandbox's http.server")

    # Snapshots and forks carry the files.
    snap = await t.call("snapshot_sandbox", sandbox_id=sid, name=f"mcp-{RUN_ID}")
    check(snap["id"].startswith("snap_"), f"snapshot: {snap}")
    forks = await t.call("fork_sandbox", sandbox_id=sid, count=2)
    fork_ids = [s["id"] for s in forks["sandboxes"]]
    check(len(fork_ids) == 2 and sid not in fork_ids, f"forks: {forks}")
    for fork in fork_ids:
        ran = await t.call("run_command", sandbox_id=fork, argv=["cat", "src/code.py"])
        check(ran["stdout"] == "def needle():\n    return 42\n", f"fork {fork}: {ran}")
    await t.call("write_file", sandbox_id=fork_ids[0], path="src/code.py", content="changed\n")
    ran = await t.call("run_command", sandbox_id=fork_ids[1], argv=["cat", "src/code.py"])
    check(ran["stdout"].startswith("def needle"), "forks are independent copies")
    restored = await t.call("create_sandbox", from_snapshot=snap["id"], metadata=labels)
    read = await t.call("read_file", sandbox_id=restored["id"], path="src/deep/hello.txt")
    check(read["content"] == text + "tail\n", f"from snapshot: {read}")
    step("snapshot_sandbox / fork_sandbox / create_sandbox from_snapshot")
    # Memory is a gvisor sandbox's to keep: asked of this one, the refusal says so.
    message = await t.fails("snapshot_sandbox", sandbox_id=sid, memory=True)
    check("memory" in message and ("gvisor" in message or "no runtime on this host" in message), message)
    message = await t.fails("fork_sandbox", sandbox_id=sid, memory=True)
    check("memory" in message, message)
    step("snapshot_sandbox / fork_sandbox memory: refused on a native sandbox, naming gvisor")

    # Errors a model can act on.
    message = await t.fails("read_file", sandbox_id="nosuchsandbox", path="x")
    check("not found" in message and "list_sandboxes" in message, message)
    message = await t.fails("read_file", sandbox_id=sid, path="missing/file.txt")
    check("list_files" in message, message)
    message = await t.fails("run_command", sandbox_id=sid)
    check("'command'" in message and "'argv'" in message, message)
    message = await t.fails("run_command", sandbox_id=sid, command="true", timeout_s=0)
    check("timeout_s" in message and "from 1 to 3600" in message, message)
    message = await t.fails("read_process_output", sandbox_id=sid, pid=999999)
    check("process" in message, message)
    step("tool errors explain what to do")

    for victim in [*fork_ids, restored["id"], sid]:
        gone = await t.call("delete_sandbox", sandbox_id=victim)
        check(gone["deleted"] == victim, f"delete: {gone}")
    listed = await t.call("list_sandboxes", metadata=labels)
    check(listed["sandboxes"] == [], f"after delete: {listed}")
    step("delete_sandbox")


async def main():
    server = StdioServerParameters(command=os.environ["BULKHEAD_BIN"], args=["mcp"],
                                   env=json.loads(os.environ["MCP_SERVER_ENV"]))
    async with Client(server, mode=os.environ["MCP_MODE"]) as client:
        await scenario(client)
    print("all steps passed", flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as failure:
        print(f"FAILED: {failure}", flush=True)
        sys.exit(1)
