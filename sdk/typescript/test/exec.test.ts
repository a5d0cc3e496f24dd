// exec: argv and shell strings, options, stdin, non-UTF-8 output, timeouts (a result, not an
// exception), truncation, check(), and the streaming forms (callbacks, execStream) — shown
// to stream by a command that only ends after the test reacted to its first output.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { CommandError, InvalidRequestError, NotFoundError, type ExecEvent, type Sandbox } from "@bulkhead/sdk";
import { client, rejectsWith } from "./helpers.js";

const bulkhead = client();
let sandbox: Sandbox;
before(async () => {
  sandbox = await bulkhead.sandboxes.create({ metadata: { suite: "sdk-exec" } });
});
after(async () => {
  await sandbox.delete();
  bulkhead.close();
});

test("argv and shell strings; exit codes and both streams", async () => {
  const argv = await sandbox.exec(["printf", "%s|%s", "a b", "c"]);
  assert.equal(argv.stdout, "a b|c");
  assert.equal(argv.exitCode, 0);
  assert.equal(argv.ok, true);
  const shell = await sandbox.exec("echo out; echo err >&2; exit 3");
  assert.equal(shell.stdout, "out\n");
  assert.equal(shell.stderr, "err\n");
  assert.equal(shell.exitCode, 3);
  assert.equal(shell.signal, null);
  assert.equal(shell.timedOut, false);
  assert.equal(shell.truncated, false);
  assert.ok(shell.durationMs >= 0);
  assert.equal(shell.ok, false);
});

test("cwd, env, user and stdin (text and bytes)", async () => {
  const result = await sandbox.exec("pwd; echo $ONE; id -u", { cwd: "/tmp", env: { ONE: "1" }, user: "1000" });
  assert.equal(result.stdout, "/tmp\n1\n1000\n");
  assert.equal((await sandbox.exec("cat", { stdin: "typed in" })).stdout, "typed in");
  const bytes = Buffer.from([0, 1, 2, 250, 255]);
  const echoed = await sandbox.exec("od -An -tx1", { stdin: bytes });
  assert.equal(echoed.stdout.trim(), "00 01 02 fa ff");
});

test("output that is not UTF-8 keeps its exact bytes", async () => {
  const result = await sandbox.exec(["printf", "\\377\\376ok"]);
  assert.deepEqual(result.stdoutBytes, Buffer.from([0xff, 0xfe, 0x6f, 0x6b]));
  assert.ok(result.stdout.endsWith("ok"));
});

test("a timeout is a result with timedOut, not an exception", async () => {
  const result = await sandbox.exec("echo started; sleep 30", { timeoutS: 1 });
  assert.equal(result.timedOut, true);
  assert.equal(result.stdout, "started\n");
  assert.equal(result.signal, "SIGKILL");
  assert.throws(() => result.check(), CommandError);
});

test("maxOutputBytes truncates", async () => {
  const result = await sandbox.exec("head -c 100000 /dev/zero", { maxOutputBytes: 1000 });
  assert.equal(result.truncated, true);
  assert.equal(result.stdoutBytes.length, 1000);
});

test("check() returns the result on 0 and throws CommandError otherwise", async () => {
  const good = await sandbox.exec("true");
  assert.equal(good.check(), good);
  const bad = await sandbox.exec("echo why >&2; exit 7");
  assert.throws(
    () => bad.check(),
    (error: unknown) => error instanceof CommandError && error.result.exitCode === 7 && /exited with 7: why/.test(error.message),
  );
});

// The command prints "first", then waits until /tmp/go-<name> exists, then prints "second".
// The test makes that file only when "first" reached it, so only a real stream can finish.
function gatedCommand(name: string): string {
  return `echo first; echo note >&2; while [ ! -e /tmp/go-${name} ]; do sleep 0.05; done; echo second`;
}

test("callbacks get the output as it is produced", async () => {
  const seen: string[] = [];
  const released: Promise<unknown>[] = [];
  const result = await sandbox.exec(gatedCommand("callbacks"), {
    timeoutS: 120,
    onStdout: (data) => {
      seen.push(`out:${data}`);
      if (data.includes("first")) released.push(sandbox.files.write("/tmp/go-callbacks", ""));
    },
    onStderr: (data, bytes) => {
      seen.push(`err:${data}`);
      assert.equal(bytes.toString(), data);
    },
  });
  await Promise.all(released);
  assert.equal(result.timedOut, false, "the command never saw the go file: no streaming");
  assert.equal(result.exitCode, 0);
  assert.equal(result.stdout, "first\nsecond\n");
  assert.equal(result.stderr, "note\n");
  assert.ok(seen.includes("out:first\n") && seen.includes("err:note\n"), JSON.stringify(seen));
});

test("execStream yields start, output and exit as they happen", async () => {
  const events: ExecEvent[] = [];
  for await (const event of sandbox.execStream(gatedCommand("stream"), { timeoutS: 120 })) {
    events.push(event);
    if (event.type === "stdout" && event.data.includes("first")) await sandbox.files.write("/tmp/go-stream", "");
  }
  assert.equal(events[0]!.type, "start");
  const exit = events.at(-1)!;
  assert.ok(exit.type === "exit" && exit.exitCode === 0 && !exit.timedOut, JSON.stringify(exit));
  const stdout = events.flatMap((e) => (e.type === "stdout" ? [e.data] : [])).join("");
  assert.equal(stdout, "first\nsecond\n");
});

test("leaving an execStream early is fine and the connection pool stays usable", async () => {
  for await (const event of sandbox.execStream("yes | head -c 10000000")) {
    if (event.type === "stdout") break;
  }
  assert.equal((await sandbox.exec("echo after")).stdout, "after\n");
});

test("exec errors: invalid values and a missing cwd", async () => {
  await rejectsWith(sandbox.exec([]), InvalidRequestError);
  await rejectsWith(sandbox.exec("true", { timeoutS: -5 }), InvalidRequestError);
  await rejectsWith(sandbox.exec("true", { cwd: "relative" }), InvalidRequestError);
  await rejectsWith(sandbox.exec("true", { cwd: "/no/such/dir" }), NotFoundError);
  const stream = sandbox.execStream("true", { user: "no such user!" });
  await rejectsWith(stream.next(), InvalidRequestError);
});
