// Snapshots and forks: snapshot a sandbox, start sandboxes from it, fork copies that are
// independent, export to a stream and a file, import back, and the conflicts and errors.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { ConflictError, InvalidRequestError, NotFoundError, type Sandbox } from "@bulkhead/sdk";
import { client, rejectsWith, withSandbox } from "./helpers.js";

const bulkhead = client();
let source: Sandbox;
let local: string;
before(async () => {
  source = await bulkhead.sandboxes.create({ metadata: { suite: "sdk-snapshots" }, env: { FROM: "source" } });
  await source.files.write("/workspace/state.txt", "snapshotted");
  local = await mkdtemp(join(tmpdir(), "bhsdk-snap-"));
});
after(async () => {
  await source.delete();
  await rm(local, { recursive: true, force: true });
  bulkhead.close();
});

test("snapshot, list, get, start from it, and the in-use conflict", async () => {
  const snapshot = await source.snapshot("sdk-first");
  assert.match(snapshot.id, /^snap_[a-z0-9]{20}$/);
  assert.equal(snapshot.name, "sdk-first");
  assert.equal(snapshot.sandboxId, source.id);
  assert.equal(snapshot.memory, false);
  assert.equal(snapshot.image, "host");
  assert.ok(snapshot.sizeBytes >= 0);
  assert.ok((await bulkhead.snapshots.list()).some((s) => s.id === snapshot.id));
  assert.equal((await bulkhead.snapshots.get(snapshot.id)).name, "sdk-first");

  const child = await bulkhead.sandboxes.create({ fromSnapshot: snapshot.id });
  try {
    assert.equal(child.info.parentSnapshot, snapshot.id);
    assert.equal(await child.files.readText("/workspace/state.txt"), "snapshotted");
    await rejectsWith(snapshot.delete(), ConflictError, "snapshot_in_use");
  } finally {
    await child.delete();
  }
  await snapshot.delete();
  await rejectsWith(bulkhead.snapshots.get(snapshot.id), NotFoundError, "snapshot_not_found");
  await rejectsWith(bulkhead.snapshots.delete(snapshot.id), NotFoundError, "snapshot_not_found");
});

test("a snapshot without a name; a bad name is refused", async () => {
  const unnamed = await source.snapshot();
  assert.equal(unnamed.name, null);
  await unnamed.delete();
  await rejectsWith(source.snapshot("bad\nname"), InvalidRequestError);
});

test("fork makes independent copy-on-write copies with the same settings", async () => {
  const forks = await source.fork(2);
  try {
    assert.equal(forks.length, 2);
    for (const fork of forks) {
      assert.notEqual(fork.id, source.id);
      assert.equal(fork.state, "running");
      assert.equal(fork.info.env.FROM, "source");
      assert.equal(await fork.files.readText("/workspace/state.txt"), "snapshotted");
    }
    await forks[0]!.files.write("/workspace/state.txt", "changed in fork 0");
    assert.equal(await forks[1]!.files.readText("/workspace/state.txt"), "snapshotted");
    assert.equal(await source.files.readText("/workspace/state.txt"), "snapshotted");
  } finally {
    for (const fork of forks) await fork.delete();
  }
  const single = await source.fork();
  assert.equal(single.length, 1, "count defaults to 1");
  await single[0]!.delete();
  await rejectsWith(source.fork(0), InvalidRequestError);
  await rejectsWith(source.fork(17), InvalidRequestError);
});

test("export to a stream and a file, import both back, and start from the import", async () => {
  const snapshot = await source.snapshot("for-export");
  try {
    const streamed = createHash("sha256");
    let size = 0;
    for await (const chunk of await snapshot.export()) {
      streamed.update(chunk as Buffer);
      size += (chunk as Buffer).length;
    }
    assert.ok(size > 0);
    const file = join(local, "snap.tar.zst");
    const written = await snapshot.exportToFile(file);
    assert.ok(written > 0);
    // zstd frames start with the magic 28 b5 2f fd.
    assert.deepEqual([...(await readFile(file)).subarray(0, 4)], [0x28, 0xb5, 0x2f, 0xfd]);

    const fromFile = await bulkhead.snapshots.importFile(file);
    const fromStream = await bulkhead.snapshots.import(await snapshot.export());
    const filesOnly = await bulkhead.snapshots.importFile(file, { memory: false });
    assert.equal(filesOnly.memory, false);
    for (const imported of [fromFile, fromStream, filesOnly]) {
      assert.notEqual(imported.id, snapshot.id);
      assert.equal(imported.image, "host");
      await withSandbox(
        bulkhead,
        async (sandbox) => assert.equal(await sandbox.files.readText("/workspace/state.txt"), "snapshotted"),
        { fromSnapshot: imported.id },
      );
      await imported.delete();
    }
  } finally {
    await snapshot.delete();
  }
  await rejectsWith(bulkhead.snapshots.import(Buffer.from("not a snapshot archive")), InvalidRequestError, "invalid_snapshot");
  await rejectsWith(bulkhead.snapshots.export("snap_nosuchsnapshot00000"), NotFoundError, "snapshot_not_found");
});

test("memory snapshots, forks with memory and pause to disk of a gvisor sandbox", async (t) => {
  const health = (await bulkhead.health()) as unknown as { runtimes?: Record<string, { available?: boolean }> };
  if (!health.runtimes?.gvisor?.available) {
    t.skip("this host has no gvisor runtime");
    return;
  }
  await withSandbox(bulkhead, async (box) => {
    const counter = await box.processes.start("i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done");
    const deadline = Date.now() + 20_000;
    while ((await box.processes.get(counter.pid)).info.stdoutOffset === 0) {
      assert.ok(Date.now() < deadline, "the counter printed nothing");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const snapshot = await box.snapshot("with-memory", { memory: true });
    assert.equal(snapshot.memory, true);
    assert.equal(snapshot.runtime, "gvisor");
    const copies = await box.fork(2, { memory: true });
    const restored = await bulkhead.sandboxes.create({ fromSnapshot: snapshot.id });
    for (const sandbox of [...copies, restored]) {
      assert.equal((await sandbox.processes.get(counter.pid)).info.state, "running");
      await sandbox.delete();
    }
    await box.pause({ toDisk: true });
    assert.equal(box.state, "paused");
    assert.equal(box.info.pausedToDisk, true);
    await box.resume();
    assert.equal(box.info.pausedToDisk, false);
    assert.equal((await box.processes.get(counter.pid)).info.state, "running");
    await snapshot.delete();
  }, { runtime: "gvisor" });
});
