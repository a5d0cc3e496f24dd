// Drives `bulkhead mcp` from the official TypeScript MCP SDK (@modelcontextprotocol/sdk),
// run by tests/integration/test_mcp.py: lists the tools and calls every one of them for
// real, checking each result. Exits non-zero with a message at the first failed check.
//
// Environment: BULKHEAD_BIN, MCP_EXPECT_VERSION, MCP_RUN_ID, MCP_SERVER_ENV (JSON),
// DAEMON_PORT and DAEMON_KEY (to fetch expose_port's URLs on loopback).
import http from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const EXPECTED_TOOLS = [
  "create_sandbox", "delete_sandbox", "expose_port", "fork_sandbox", "kill_process", "list_files",
  "list_sandboxes", "read_file", "read_process_output", "run_command", "search_files", "send_process_input",
  "snapshot_sandbox", "start_process", "write_file",
];
const RUN_ID = process.env.MCP_RUN_ID;
const DAEMON_PORT = Number(process.env.DAEMON_PORT);
const DAEMON_KEY = process.env.DAEMON_KEY;
const APP_PORT = 8124;

class CheckFailed extends Error {}
function check(condition, what) {
  if (!condition) throw new CheckFailed(what);
}
const step = (text) => console.log(`ok: ${text}`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const show = (value) => JSON.stringify(value).slice(0, 600);

async function waitFor(predicate, what, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    check(Date.now() < deadline, `timed out waiting for ${what}`);
    await sleep(200);
  }
}

// GET on the daemon's loopback port with the given Host header.
function fetchLoopback(host, path, headers) {
  return new Promise((resolve, reject) => {
    const request = http.request(
      { host: "127.0.0.1", port: DAEMON_PORT, path, headers: { Host: host, ...headers } },
      (response) => {
        const chunks = [];
        response.on("data", (chunk) => chunks.push(chunk));
        response.on("end", () => resolve({ status: response.statusCode, body: Buffer.concat(chunks).toString() }));
      },
    );
    request.on("error", reject);
    request.setTimeout(30000, () => request.destroy(new Error("fetch timed out")));
    request.end();
  });
}

async function main() {
  const transport = new StdioClientTransport({
    command: process.env.BULKHEAD_BIN,
    args: ["mcp"],
    env: JSON.parse(process.env.MCP_SERVER_ENV),
    stderr: "inherit",
  });
  let negotiated = null;
  transport.setProtocolVersion = (version) => { negotiated = version; };  // the client reports it here
  const client = new Client({ name: "bulkhead-node-test", version: "1.0.0" });
  await client.connect(transport);
  check(negotiated === process.env.MCP_EXPECT_VERSION, `negotiated ${negotiated}`);
  check(client.getServerVersion()?.name === "bulkhead", `serverInfo ${show(client.getServerVersion())}`);
  step(`connected with protocol ${negotiated}`);

  const { tools } = await client.listTools();
  check(JSON.stringify(tools.map((t) => t.name).sort()) === JSON.stringify(EXPECTED_TOOLS), `tools ${show(tools.map((t) => t.name))}`);
  for (const tool of tools) {
    check(tool.inputSchema.type === "object" && tool.outputSchema, `${tool.name}: schemas`);
  }
  step(`listed ${tools.length} tools`);

  const call = async (name, args) => {
    const result = await client.callTool({ name, arguments: args }, undefined, { timeout: 120000 });
    check(!result.isError, `${name}(${show(args)}) failed: ${result.content?.[0]?.text}`);
    return result.structuredContent;
  };
  const fails = async (name, args) => {
    const result = await client.callTool({ name, arguments: args }, undefined, { timeout: 120000 });
    check(result.isError, `${name}(${show(args)}) should have failed: ${show(result)}`);
    return result.content[0].text;
  };

  const labels = { "mcp-test": RUN_ID };
  const sandbox = await call("create_sandbox", { metadata: labels, timeout_s: 900, network: "none" });
  const sid = sandbox.id;
  check(sandbox.state === "running" && sandbox.network.mode === "none", `create: ${show(sandbox)}`);
  const listed = await call("list_sandboxes", { metadata: labels, state: "running" });
  check(listed.count === 1 && listed.sandboxes[0].id === sid, `list: ${show(listed)}`);
  step(`create_sandbox ${sid}, list_sandboxes`);

  const text = "naïve ☃ text\nsecond line\n";
  const written = await call("write_file", { sandbox_id: sid, path: "/workspace/a/b/c.txt", content: text, mode: "0755" });
  check(written.size === Buffer.byteLength(text) && written.mode === "0755", `write: ${show(written)}`);
  const read = await call("read_file", { sandbox_id: sid, path: "a/b/c.txt" });
  check(read.content === text && read.eof && !read.binary, `read: ${show(read)}`);
  const rest = await call("read_file", { sandbox_id: sid, path: "a/b/c.txt", offset: 16, length: 100 });
  check(rest.content === "second line\n" && rest.offset === 16, `offset read: ${show(rest)}`);
  const files = await call("list_files", { sandbox_id: sid, path: "/workspace/a", depth: 2 });
  check(files.entries.some((e) => e.path === "/workspace/a/b/c.txt" && e.type === "file"), `list: ${show(files)}`);
  const found = await call("search_files", { sandbox_id: sid, content_regex: "sec[o]nd" });
  check(found.count === 1 && found.matches[0].path === "/workspace/a/b/c.txt" && found.matches[0].line === 2, `search: ${show(found)}`);
  const named = await call("search_files", { sandbox_id: sid, path: "/workspace", name_glob: "c.*" });
  check(named.matches.length === 1, `search by name: ${show(named)}`);
  step("write_file, read_file, list_files, search_files");

  let ran = await call("run_command", { sandbox_id: sid, argv: ["./a/b/c.txt"] });
  check(ran.exit_code !== 0, `running a text file: ${show(ran)}`);
  ran = await call("run_command", { sandbox_id: sid, command: "wc -l < a/b/c.txt && exit 7" });
  check(ran.exit_code === 7 && ran.stdout.trim() === "2", `run: ${show(ran)}`);
  ran = await call("run_command", { sandbox_id: sid, command: "sleep 20", timeout_s: 1 });
  check(ran.timed_out === true, `timeout: ${show(ran)}`);
  step("run_command");

  const proc = await call("start_process", { sandbox_id: sid, command: "echo started; read x; echo \"read $x\"; exit 5", tag: "reader" });
  const first = await waitFor(async () => {
    const out = await call("read_process_output", { sandbox_id: sid, pid: proc.pid, wait_s: 5 });
    return out.stdout ? out : null;
  }, "the first line");
  check(first.stdout === "started\n", `first: ${show(first)}`);
  await call("send_process_input", { sandbox_id: sid, pid: proc.pid, data: "abc\n" });
  const end = await waitFor(async () => {
    const out = await call("read_process_output", { sandbox_id: sid, pid: proc.pid, stdout_offset: first.stdout_next_offset, wait_s: 5 });
    return out.running ? null : out;
  }, "the exit");
  check(end.exit_code === 5 && end.stdout === "read abc\n", `end: ${show(end)}`);
  const sleeper = await call("start_process", { sandbox_id: sid, argv: ["sleep", "600"] });
  await call("kill_process", { sandbox_id: sid, pid: sleeper.pid });
  const dead = await waitFor(async () => {
    const out = await call("read_process_output", { sandbox_id: sid, pid: sleeper.pid, wait_s: 5 });
    return out.running ? null : out;
  }, "the killed sleep");
  check(dead.signal === 15, `SIGTERM: ${show(dead)}`);
  step("start_process, read_process_output, send_process_input, kill_process");

  await call("write_file", { sandbox_id: sid, path: "www/index.html", content: `node ${RUN_ID}` });
  await call("start_process", { sandbox_id: sid, argv: ["python3", "-m", "http.server", String(APP_PORT), "--bind", "127.0.0.1", "--directory", "/workspace/www"] });
  const port = await waitFor(async () => {
    const exposed = await call("expose_port", { sandbox_id: sid, port: APP_PORT });
    return exposed.listening ? exposed : null;
  }, "the http server");
  const url = new URL(port.url);
  check(url.hostname === "127.0.0.1" && Number(url.port) === DAEMON_PORT, `url ${port.url}`);
  let got = await fetchLoopback(url.host, url.pathname, { Authorization: `Bearer ${DAEMON_KEY}` });
  check(got.status === 200 && got.body === `node ${RUN_ID}`, `url: ${show(got)}`);
  const preview = new URL(port.preview_url);
  got = await fetchLoopback(preview.host, preview.pathname, {});
  check(got.status === 200 && got.body === `node ${RUN_ID}`, `preview: ${show(got)}`);
  step("expose_port");

  const snap = await call("snapshot_sandbox", { sandbox_id: sid });
  const forks = await call("fork_sandbox", { sandbox_id: sid });
  check(forks.count === 1, `fork: ${show(forks)}`);
  const forkRead = await call("read_file", { sandbox_id: forks.sandboxes[0].id, path: "a/b/c.txt" });
  check(forkRead.content === text, `fork read: ${show(forkRead)}`);
  const restored = await call("create_sandbox", { from_snapshot: snap.id, metadata: labels });
  const restoredRead = await call("read_file", { sandbox_id: restored.id, path: "www/index.html" });
  check(restoredRead.content === `node ${RUN_ID}`, `snapshot read: ${show(restoredRead)}`);
  step("snapshot_sandbox, fork_sandbox");

  let message = await fails("delete_sandbox", { sandbox_id: "nosuchsandbox" });
  check(message.includes("list_sandboxes"), message);
  message = await fails("write_file", { sandbox_id: sid, path: "x", content: "y", bogus: 1 });
  check(message.includes("unknown argument 'bogus'"), message);
  step("tool errors");

  for (const victim of [forks.sandboxes[0].id, restored.id, sid]) {
    const gone = await call("delete_sandbox", { sandbox_id: victim });
    check(gone.deleted === victim, `delete ${show(gone)}`);
  }
  const after = await call("list_sandboxes", { metadata: labels });
  check(after.count === 0, `after delete: ${show(after)}`);
  step("delete_sandbox");
  await client.close();
  console.log("all steps passed");
}

main().catch((error) => {
  console.log(`FAILED: ${error instanceof CheckFailed ? error.message : error.stack}`);
  process.exit(1);
});
