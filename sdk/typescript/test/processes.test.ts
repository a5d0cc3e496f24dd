// Background processes: start/list/get (pid and tag), output with offsets and follow, wait,
// stdin, signals, pty resize, and attach over the SDK's own WebSocket client.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  BulkheadTimeoutError,
  ConflictError,
  InvalidRequestError,
  NotFoundError,
  StreamError,
  type ProcessOutputEvent,
  type Sandbox,
} from "@bulkhead/sdk";
import { client, collect, rejectsWith } from "./helpers.js";

const bulkhead = client();
let sandbox: Sandbox;
before(async () => {
  sandbox = await bulkhead.sandboxes.create({ metadata: { suite: "sdk-processes" } });
});
after(async () => {
  await sandbox.delete();
  bulkhead.close();
});

function text(events: ProcessOutputEvent[], stream: "stdout" | "stderr"): string {
  return events.flatMap((e) => (e.type === stream ? [e.data] : [])).join("");
}

test("start, get by pid and tag, list, and the output to the exit", async () => {
  const process = await sandbox.processes.start(["sh", "-c", "echo out; echo err >&2; exit 4"], { tag: "short" });
  assert.ok(process.pid > 1);
  assert.equal(process.tag, "short");
  assert.deepEqual(process.info.cmd, ["sh", "-c", "echo out; echo err >&2; exit 4"]);
  const events = await collect(process.output());
  assert.equal(text(events, "stdout"), "out\n");
  assert.equal(text(events, "stderr"), "err\n");
  const exit = events.at(-1)!;
  assert.ok(exit.type === "exit" && exit.exitCode === 4 && exit.signal === null, JSON.stringify(exit));

  const byPid = await sandbox.processes.get(process.pid);
  assert.equal(byPid.state, "exited");
  assert.equal(byPid.exitCode, 4);
  assert.equal(byPid.info.stdoutOffset, 4);
  const byTag = await sandbox.processes.get("short");
  assert.equal(byTag.pid, process.pid);
  assert.ok((await sandbox.processes.list()).some((p) => p.pid === process.pid));
  await process.refresh();
  assert.equal(process.state, "exited");
});

test("output offsets resume where a reader left off; follow: false returns what is there", async () => {
  const process = await sandbox.processes.start("for i in 1 2 3 4 5; do echo line$i; done; sleep 300");
  try {
    // Read until all five lines arrived, following.
    let seen = "";
    let lastOffset = 0;
    for await (const event of process.output()) {
      if (event.type !== "stdout") continue;
      seen += event.data;
      assert.equal(event.offset, Buffer.byteLength(seen), "offset counts the stream's bytes so far");
      lastOffset = event.offset;
      if (seen.includes("line5\n")) break;
    }
    // From an offset only the rest comes; without follow the stream ends at once.
    const rest = await collect(process.output({ stdoutOffset: 12, follow: false }));
    assert.equal(text(rest, "stdout"), seen.slice(12));
    const none = await collect(process.output({ offset: lastOffset, follow: false }));
    assert.equal(text(none, "stdout"), "");
    assert.ok(!none.some((e) => e.type === "exit"), "still running: no exit event");
  } finally {
    await process.kill();
  }
  const exit = await process.wait();
  assert.equal(exit.signal, "SIGKILL");
  assert.equal(process.state, "exited");
});

test("stdin: write text and bytes, then close", async () => {
  const process = await sandbox.processes.start(["cat"]);
  await process.writeStdin("text ");
  await process.writeStdin(Buffer.from([0xff, 0x0a]));
  await process.closeStdin();
  const exit = await process.wait();
  assert.equal(exit.exitCode, 0);
  const events = await collect(process.output({ follow: false }));
  const bytes = Buffer.concat(events.flatMap((e) => (e.type === "stdout" ? [e.dataBytes] : [])));
  assert.deepEqual(bytes, Buffer.concat([Buffer.from("text "), Buffer.from([0xff, 0x0a])]));
  await rejectsWith(process.writeStdin("late"), ConflictError, "process_exited");
});

test("signals by name and number; kill", async () => {
  const term = await sandbox.processes.start(["sleep", "300"]);
  await term.signal("SIGTERM");
  assert.equal((await term.wait()).signal, "SIGTERM");
  const usr1 = await sandbox.processes.start(["sleep", "300"]);
  await usr1.signal(10);
  assert.equal((await usr1.wait()).signal, "SIGUSR1");
  await rejectsWith(usr1.signal("SIGTERM"), ConflictError, "process_exited");
  const running = await sandbox.processes.start(["sleep", "300"]);
  await rejectsWith(running.signal("SIGNOPE"), InvalidRequestError, "invalid_argument");
  await running.kill();
  assert.equal((await running.wait()).signal, "SIGKILL");
});

test("a timeoutS process is killed and reports timedOut", async () => {
  const process = await sandbox.processes.start(["sleep", "300"], { timeoutS: 1 });
  const exit = await process.wait();
  assert.equal(exit.timedOut, true);
});

test("pty: resize shows in stty; resize without a pty is a ConflictError not_a_pty", async () => {
  const shell = await sandbox.processes.start(["sh", "-c", "read line; stty size"], { pty: { cols: 80, rows: 24 } });
  assert.deepEqual(shell.info.pty, { cols: 80, rows: 24 });
  await shell.resize(132, 43);
  await shell.writeStdin("go\n");
  await shell.wait();
  const out = text(await collect(shell.output({ follow: false })), "stdout");
  assert.match(out, /43 132/);
  const plain = await sandbox.processes.start(["sleep", "300"]);
  await rejectsWith(plain.resize(10, 10), ConflictError, "not_a_pty");
  await rejectsWith(plain.resize(0, 10), InvalidRequestError);
  await plain.kill();
});

test("attach drives an interactive shell on a pty: echo, resize, exit", async () => {
  const shell = await sandbox.processes.start(["/bin/sh", "-i"], { pty: { cols: 80, rows: 24 }, tag: "attach-shell" });
  const session = await shell.attach();
  await session.send("echo $((6 * 7))\n");
  // The terminal echoes the line (with "6 * 7"); only the shell's answer is a bare 42.
  await session.readUntil("42\r\n", { timeoutMs: 60_000 });
  await session.resize(120, 40);
  await session.write(Buffer.from("stty size\n"));
  await session.readUntil("40 120", { timeoutMs: 60_000 });
  await session.send("exit 5\n");
  const rest: Buffer[] = [];
  for await (const chunk of session) rest.push(chunk);
  assert.equal(session.ended, true);
  assert.deepEqual(session.exitStatus && [session.exitStatus.exitCode, session.exitStatus.signal], [5, null]);
  assert.deepEqual(session.errors, []);
  assert.equal((await shell.refresh()).state, "exited");
});

test("attach replays the ring, reports control errors, and closing leaves the process running", async () => {
  const cat = await sandbox.processes.start(["cat"]);
  await cat.writeStdin("before attach\n");
  const session = await cat.attach();
  const replayed = await session.readUntil("before attach\n", { timeoutMs: 60_000 });
  assert.equal(replayed.toString(), "before attach\n");
  await session.resize(10, 10); // cat has no pty: an error message, and the session goes on
  await session.send("after attach\n");
  await session.readUntil("after attach\n", { timeoutMs: 60_000 });
  assert.deepEqual(session.errors.map((e) => [e.code, e.status]), [["not_a_pty", 101]]);
  assert.ok(session.errors[0] instanceof StreamError);
  // Nothing more comes while cat waits: a timeout, and the session is still usable.
  await rejectsWith(session.recv({ timeoutMs: 200 }), BulkheadTimeoutError);
  await session.send("still here\n");
  assert.equal((await session.readUntil("here\n", { timeoutMs: 60_000 })).toString(), "still here\n");
  await session.close();
  assert.equal((await cat.refresh()).state, "running");

  // A second session from the current offset: closing stdin ends cat; wait() gives the exit.
  await using second = await cat.attach({ offset: cat.info.stdoutOffset });
  await second.closeStdin();
  const exit = await second.wait({ timeoutMs: 60_000 });
  assert.equal(exit?.exitCode, 0);
});

test("attach signal ends a process", async () => {
  const sleeper = await sandbox.processes.start(["sleep", "300"]);
  const session = await sleeper.attach();
  await session.signal("SIGKILL");
  const exit = await session.wait({ timeoutMs: 60_000 });
  assert.equal(exit?.signal, "SIGKILL");
});

test("wait with a timeout, and wait on a process that already ended", async () => {
  const sleeper = await sandbox.processes.start(["sleep", "300"]);
  await rejectsWith(sleeper.wait({ timeoutMs: 300 }), BulkheadTimeoutError);
  assert.equal((await sleeper.refresh()).state, "running");
  await sleeper.signal("TERM");
  const exit = await sleeper.wait({ timeoutMs: 60_000 });
  assert.equal(exit.signal, "SIGTERM");
  const again = await sleeper.wait();
  assert.equal(again.signal, "SIGTERM");
});

test("large stdin goes in pieces", async () => {
  const counter = await sandbox.processes.start(["sh", "-c", "wc -c"]);
  const big = Buffer.alloc(20 * 1024 * 1024, 0x61);
  await counter.writeStdin(big);
  await counter.writeStdin("é".repeat(3 * 1024 * 1024));
  await counter.closeStdin();
  await counter.wait({ timeoutMs: 120_000 });
  const out = text(await collect(counter.output({ follow: false })), "stdout");
  assert.equal(out.trim(), String(big.length + 6 * 1024 * 1024));
});

test("process errors: unknown pid or tag, a tag in use, bad values", async () => {
  await rejectsWith(sandbox.processes.get(999999), NotFoundError, "process_not_found");
  await rejectsWith(sandbox.processes.get("nosuchtag"), NotFoundError, "process_not_found");
  const first = await sandbox.processes.start(["sleep", "300"], { tag: "unique" });
  await rejectsWith(sandbox.processes.start(["sleep", "1"], { tag: "unique" }), ConflictError, "tag_in_use");
  await first.kill();
  await rejectsWith(sandbox.processes.start([]), InvalidRequestError);
  await rejectsWith(sandbox.processes.start("true", { pty: { cols: 0, rows: 5 } }), InvalidRequestError);
  const ghost = await sandbox.processes.start("true");
  await ghost.wait();
  await rejectsWith(ghost.attach({ offset: -1 }), InvalidRequestError);
});
