// Sandboxes: create with options, get (with usage), list with filters, lifecycle, timeouts,
// `await using` disposal, and the errors of unknown ids and invalid values.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, test } from "node:test";
import { ConflictError, InvalidRequestError, NotFoundError, Sandbox } from "@bulkhead/sdk";
import { client, rejectsWith, withSandbox } from "./helpers.js";

const bulkhead = client();
after(() => bulkhead.close());

test("create applies the options and get reads them back with usage", async () => {
  const run = randomUUID();
  await withSandbox(
    bulkhead,
    async (sandbox) => {
      assert.match(sandbox.id, /^[A-Za-z0-9_-]+$/);
      assert.equal(sandbox.state, "running");
      assert.equal(sandbox.info.image, "host");
      assert.equal(sandbox.info.memoryMb, 256);
      assert.equal(sandbox.info.cpus, 0.5);
      assert.equal(sandbox.info.timeoutS, 600);
      assert.equal(sandbox.info.workdir, "/workspace");
      assert.deepEqual(sandbox.info.metadata, { run, role: "sdk-test" });
      assert.deepEqual(sandbox.info.network, { mode: "none", allow: [], deny: [] });
      assert.ok(sandbox.info.expiresAt && Date.parse(sandbox.info.expiresAt) > Date.parse(sandbox.info.createdAt));
      assert.equal(sandbox.usage, undefined, "create answers carry no usage");

      const env = await sandbox.exec("echo $GREETING");
      assert.equal(env.stdout, "hello from the sdk\n");

      const again = await bulkhead.sandboxes.get(sandbox.id);
      assert.equal(again.id, sandbox.id);
      assert.ok(again.usage, "get carries usage");
      assert.ok(again.usage.pids >= 1 && again.usage.memoryBytes > 0, JSON.stringify(again.usage));
      await sandbox.refresh();
      assert.ok(sandbox.usage);
    },
    { memoryMb: 256, cpus: 0.5, timeoutS: 600, env: { GREETING: "hello from the sdk" }, metadata: { run, role: "sdk-test" } },
  );
});

test("network as a mode name or a policy", async () => {
  await withSandbox(bulkhead, async (sandbox) => assert.deepEqual(sandbox.network, { mode: "allowlist", allow: ["a.invalid"], deny: [] }), {
    network: { mode: "allowlist", allow: ["a.invalid"] },
  });
  await withSandbox(bulkhead, async (sandbox) => assert.deepEqual(sandbox.network, { mode: "allowlist", allow: [], deny: [] }), { network: "allowlist" });
});

test("list filters by state and metadata", async () => {
  const run = randomUUID();
  const a = await bulkhead.sandboxes.create({ metadata: { run, name: "a" } });
  const b = await bulkhead.sandboxes.create({ metadata: { run, name: "b" } });
  try {
    const both = await bulkhead.sandboxes.list({ metadata: { run } });
    assert.deepEqual(both.map((s) => s.id).sort(), [a.id, b.id].sort());
    const onlyA = await bulkhead.sandboxes.list({ metadata: { run, name: "a" } });
    assert.deepEqual(onlyA.map((s) => s.id), [a.id]);
    await b.pause();
    const paused = await bulkhead.sandboxes.list({ state: "paused", metadata: { run } });
    assert.deepEqual(paused.map((s) => s.id), [b.id]);
    const running = await bulkhead.sandboxes.list({ state: "running", metadata: { run } });
    assert.deepEqual(running.map((s) => s.id), [a.id]);
    assert.ok(all(await bulkhead.sandboxes.list(), [a.id, b.id]));
  } finally {
    await a.delete();
    await b.delete();
  }
});

function all(sandboxes: Sandbox[], ids: string[]): boolean {
  const have = new Set(sandboxes.map((s) => s.id));
  return ids.every((id) => have.has(id));
}

test("pause, resume, stop and start change the state; files survive a stop", async () => {
  await withSandbox(bulkhead, async (sandbox) => {
    await sandbox.files.write("/workspace/kept.txt", "still here");
    await sandbox.pause();
    assert.equal(sandbox.state, "paused");
    assert.equal((await bulkhead.sandboxes.get(sandbox.id)).state, "paused");
    await sandbox.resume();
    assert.equal(sandbox.state, "running");
    await sandbox.stop();
    assert.equal(sandbox.state, "stopped");
    await rejectsWith(sandbox.exec("true"), ConflictError, "sandbox_not_running");
    await rejectsWith(sandbox.pause(), ConflictError, "sandbox_not_running");
    await sandbox.start();
    assert.equal(sandbox.state, "running");
    assert.equal(await sandbox.files.readText("/workspace/kept.txt"), "still here");
  });
});

test("connect resumes a paused sandbox", async () => {
  await withSandbox(bulkhead, async (sandbox) => {
    await sandbox.pause();
    const connected = await bulkhead.sandboxes.connect(sandbox.id);
    assert.equal(connected.state, "running");
    assert.equal((await connected.exec("echo ok")).stdout, "ok\n");
  });
});

test("setTimeout moves expiresAt; 0 removes the limit", async () => {
  await withSandbox(
    bulkhead,
    async (sandbox) => {
      const before = Date.parse(sandbox.info.expiresAt!);
      await sandbox.setTimeout(3600);
      assert.equal(sandbox.info.timeoutS, 3600);
      assert.ok(Date.parse(sandbox.info.expiresAt!) > before);
      await sandbox.setTimeout(0);
      assert.equal(sandbox.info.expiresAt, null);
      await rejectsWith(sandbox.setTimeout(-1), InvalidRequestError);
    },
    { timeoutS: 60 },
  );
});

test("await using deletes the sandbox at the end of the block", async () => {
  let id: string;
  {
    await using sandbox = await bulkhead.sandboxes.create({ metadata: { purpose: "dispose" } });
    id = sandbox.id;
    assert.equal((await sandbox.exec("echo inside")).stdout, "inside\n");
  }
  await rejectsWith(bulkhead.sandboxes.get(id), NotFoundError, "sandbox_not_found");
  // Disposing a sandbox already deleted is fine.
  const sandbox = await bulkhead.sandboxes.create();
  await sandbox.delete();
  await sandbox[Symbol.asyncDispose]();
});

test("unknown ids are NotFoundError sandbox_not_found everywhere", async () => {
  const id = "nosuchsandbox0000000";
  await rejectsWith(bulkhead.sandboxes.get(id), NotFoundError, "sandbox_not_found");
  await rejectsWith(bulkhead.sandboxes.connect(id), NotFoundError, "sandbox_not_found");
  const ghost = new Sandbox(bulkhead, { ...(await someInfo()), id });
  for (const call of [
    () => ghost.delete(),
    () => ghost.refresh(),
    () => ghost.pause(),
    () => ghost.resume(),
    () => ghost.stop(),
    () => ghost.start(),
    () => ghost.setTimeout(10),
    () => ghost.exec("true"),
    () => ghost.fork(),
    () => ghost.snapshot(),
    () => ghost.setNetwork("none"),
    () => ghost.egressLog(),
    () => ghost.processes.list(),
    () => ghost.files.stat("/"),
  ]) {
    await rejectsWith(call(), NotFoundError, "sandbox_not_found");
  }
});

async function someInfo() {
  return withSandbox(bulkhead, async (sandbox) => sandbox.info);
}

test("invalid values are InvalidRequestError", async () => {
  await rejectsWith(bulkhead.sandboxes.create({ memoryMb: 1 }), InvalidRequestError, "invalid_argument");
  // @ts-expect-error: a runtime the API does not have
  await rejectsWith(bulkhead.sandboxes.create({ runtime: "qemu-now" }), InvalidRequestError, "invalid_argument");
  await rejectsWith(bulkhead.sandboxes.create({ env: { "1BAD": "x" } }), InvalidRequestError);
  await rejectsWith(bulkhead.sandboxes.create({ image: "no-such-image" }), NotFoundError, "image_not_found");
  await rejectsWith(bulkhead.sandboxes.create({ fromSnapshot: "snap_nosuchsnapshot00000" }), NotFoundError, "snapshot_not_found");
  // @ts-expect-error: a state the API does not have
  await rejectsWith(bulkhead.sandboxes.list({ state: "sleeping" }), InvalidRequestError);
});
