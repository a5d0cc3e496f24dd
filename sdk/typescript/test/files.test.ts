// Files: read/write (text, bytes, streams; a streamed 100 MiB round trip checked by hash),
// metadata and directory operations, tar archives up and down (checked with the system's
// tar too), watch events, and the errors.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { lstat, mkdir, mkdtemp, readFile, readlink, rm, stat, symlink, writeFile, chmod } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Readable } from "node:stream";
import { after, before, test } from "node:test";
import {
  ConflictError,
  ForbiddenError,
  InvalidRequestError,
  NotFoundError,
  UnsafeArchiveError,
  type FileEvent,
  type Sandbox,
} from "@bulkhead/sdk";
import { client, rejectsWith, within } from "./helpers.js";

const bulkhead = client();
let sandbox: Sandbox;
let local: string;
before(async () => {
  sandbox = await bulkhead.sandboxes.create({ metadata: { suite: "sdk-files" } });
  local = await mkdtemp(join(tmpdir(), "bhsdk-files-"));
});
after(async () => {
  await sandbox.delete();
  await rm(local, { recursive: true, force: true });
  bulkhead.close();
});

test("write and read text and bytes; modes; append", async () => {
  const entry = await sandbox.files.write("/workspace/dir/hello.txt", "héllo\n");
  assert.equal(entry.path, "/workspace/dir/hello.txt");
  assert.equal(entry.type, "file");
  assert.equal(entry.size, Buffer.byteLength("héllo\n"));
  assert.equal(entry.mode, 0o644);
  assert.equal(await sandbox.files.readText("/workspace/dir/hello.txt"), "héllo\n");

  const bytes = randomBytes(4096);
  await sandbox.files.write("/workspace/bin.dat", bytes, { mode: 0o600 });
  assert.deepEqual(await sandbox.files.read("/workspace/bin.dat"), bytes);
  assert.equal((await sandbox.files.stat("/workspace/bin.dat")).mode, 0o600);

  await sandbox.files.write("/workspace/script.sh", "#!/bin/sh\necho ran\n", { mode: "0755" });
  assert.equal((await sandbox.exec("/workspace/script.sh")).stdout, "ran\n");

  await sandbox.files.write("/workspace/log.txt", "one\n");
  await sandbox.files.write("/workspace/log.txt", "two\n", { append: true });
  assert.equal(await sandbox.files.readText("/workspace/log.txt"), "one\ntwo\n");

  // Relative paths are under the workdir.
  assert.equal(await sandbox.files.readText("dir/hello.txt"), "héllo\n");
});

test("bodies from iterables, web streams and Blobs", async () => {
  await sandbox.files.write("/workspace/iter.txt", ["a", Buffer.from("b"), new Uint8Array([99])]);
  assert.equal(await sandbox.files.readText("/workspace/iter.txt"), "abc");
  await sandbox.files.write("/workspace/web.txt", new Blob(["from ", "a blob"]).stream());
  assert.equal(await sandbox.files.readText("/workspace/web.txt"), "from a blob");
  await sandbox.files.write("/workspace/blob.txt", new Blob(["blob"]));
  assert.equal(await sandbox.files.readText("/workspace/blob.txt"), "blob");
  await sandbox.files.write("/workspace/node.txt", Readable.from(["node ", "stream"]));
  assert.equal(await sandbox.files.readText("/workspace/node.txt"), "node stream");
  await sandbox.files.write("/workspace/empty.txt", "");
  assert.equal((await sandbox.files.stat("/workspace/empty.txt")).size, 0);
});

test("a streamed 100 MiB write and read round trip keeps every byte", async () => {
  const size = 100 * 1024 * 1024;
  const sent = createHash("sha256");
  async function* source() {
    for (let left = size; left > 0; ) {
      const chunk = randomBytes(Math.min(left, 1 << 20));
      sent.update(chunk);
      left -= chunk.length;
      yield chunk;
    }
  }
  const entry = await sandbox.files.write("/workspace/big.bin", source());
  assert.equal(entry.size, size);
  const sentHash = sent.digest("hex");
  // The daemon wrote exactly these bytes...
  assert.equal((await sandbox.exec("sha256sum /workspace/big.bin")).stdout.split(" ")[0], sentHash);
  // ...and streams them back.
  const received = createHash("sha256");
  let length = 0;
  for await (const chunk of await sandbox.files.readStream("/workspace/big.bin")) {
    received.update(chunk as Buffer);
    length += (chunk as Buffer).length;
  }
  assert.equal(length, size);
  assert.equal(received.digest("hex"), sentHash);
  // To a local file and back in, too.
  const copy = join(local, "big.bin");
  assert.equal(await sandbox.files.download("/workspace/big.bin", copy), size);
  assert.equal(createHash("sha256").update(await readFile(copy)).digest("hex"), sentHash);
  const uploaded = await sandbox.files.upload(copy, "/workspace/big-again.bin", { mode: 0o600 });
  assert.equal(uploaded.size, size);
  assert.equal(uploaded.mode, 0o600);
  assert.equal((await sandbox.exec("sha256sum /workspace/big-again.bin")).stdout.split(" ")[0], sentHash);
  await rm(copy);
  await sandbox.files.remove("/workspace/big.bin");
  await sandbox.files.remove("/workspace/big-again.bin");
});

test("stat, exists, list with depth, mkdir, move, remove", async () => {
  const made = await sandbox.files.mkdir("/workspace/tree/a/b");
  assert.equal(made.type, "dir");
  await sandbox.files.write("/workspace/tree/a/b/leaf.txt", "leaf");
  await sandbox.files.write("/workspace/tree/top.txt", "top");
  await sandbox.exec("ln -s top.txt /workspace/tree/link");

  assert.equal(await sandbox.files.exists("/workspace/tree/top.txt"), true);
  assert.equal(await sandbox.files.exists("/workspace/tree/nothing"), false);
  const link = await sandbox.files.stat("/workspace/tree/link");
  assert.equal(link.type, "symlink");
  assert.equal(link.target, "top.txt");

  const shallow = await sandbox.files.list("/workspace/tree");
  assert.deepEqual(shallow.map((e) => e.name).sort(), ["a", "link", "top.txt"]);
  assert.equal(shallow.truncated, false);
  assert.ok((await sandbox.files.list()).some((e) => e.path === "/workspace/tree"), "the default is the workdir");
  const deep = await sandbox.files.list("/workspace/tree", { depth: 3 });
  assert.ok(deep.some((e) => e.path === "/workspace/tree/a/b/leaf.txt"), JSON.stringify(deep.map((e) => e.path)));

  const moved = await sandbox.files.move("/workspace/tree/top.txt", "/workspace/tree/a/moved.txt");
  assert.equal(moved.path, "/workspace/tree/a/moved.txt");
  assert.equal(await sandbox.files.readText("/workspace/tree/a/moved.txt"), "top");

  await rejectsWith(sandbox.files.remove("/workspace/tree/a"), ConflictError, "not_empty");
  await rejectsWith(sandbox.files.mkdir("/workspace/tree/x/y", { parents: false }), NotFoundError, "not_found");
  await sandbox.files.remove("/workspace/tree", { recursive: true });
  assert.equal(await sandbox.files.exists("/workspace/tree"), false);
});

async function readAll(stream: AsyncIterable<Buffer>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** A local tree with what a tar must carry: nesting, a long name, a symlink, modes, an empty file. */
async function makeTree(root: string): Promise<string> {
  const longName = `${"n".repeat(120)}.txt`;
  await mkdir(join(root, "sub", "deeper"), { recursive: true });
  await writeFile(join(root, "readme.txt"), "read me\n");
  await writeFile(join(root, "sub", "deeper", longName), "a long name\n");
  await writeFile(join(root, "run.sh"), "#!/bin/sh\necho tree\n");
  await chmod(join(root, "run.sh"), 0o755);
  await writeFile(join(root, "empty"), "");
  await symlink("readme.txt", join(root, "link"));
  return longName;
}

test("uploadDir and downloadDir carry a tree both ways", async () => {
  const source = join(local, "tree-up");
  const longName = await makeTree(source);
  const summary = await sandbox.files.uploadDir(source, "/workspace/up");
  assert.equal(summary.entries, 7);
  assert.equal(await sandbox.files.readText(`/workspace/up/sub/deeper/${longName}`), "a long name\n");
  assert.equal((await sandbox.exec("/workspace/up/run.sh")).stdout, "tree\n");
  assert.equal((await sandbox.files.stat("/workspace/up/link")).target, "readme.txt");

  const back = join(local, "tree-down");
  const count = await sandbox.files.downloadDir("/workspace/up", back);
  assert.equal(count, 7);
  assert.equal(await readFile(join(back, "readme.txt"), "utf8"), "read me\n");
  // download() into a Writable.
  const sink = new PassThrough();
  const gathered = readAll(sink);
  assert.equal(await sandbox.files.download("/workspace/up/readme.txt", sink), 8);
  assert.equal((await gathered).toString(), "read me\n");
  assert.equal(await readFile(join(back, "sub", "deeper", longName), "utf8"), "a long name\n");
  assert.equal((await stat(join(back, "run.sh"))).mode & 0o777, 0o755);
  assert.equal(await readlink(join(back, "link")), "readme.txt");
  assert.equal((await stat(join(back, "empty"))).size, 0);
});

test("uploadArchive takes the system's tar (bytes and gzip); downloadArchive is a tar the system reads", async () => {
  const source = join(local, "tree-sys");
  const longName = await makeTree(source);
  const tar = execFileSync("tar", ["-C", source, "-cf", "-", "."]);
  const plain = await sandbox.files.uploadArchive(tar, "/workspace/sys");
  assert.ok(plain.entries >= 7 && plain.bytes > 0, JSON.stringify(plain));
  const gzip = execFileSync("tar", ["-C", source, "-czf", "-", "."]);
  await sandbox.files.uploadArchive(Readable.from([gzip]), "/workspace/sysgz");
  assert.equal(await sandbox.files.readText(`/workspace/sysgz/sub/deeper/${longName}`), "a long name\n");

  const stream = await sandbox.files.downloadArchive("/workspace/sys");
  const names = await new Promise<string>((resolve, reject) => {
    const child = spawn("tar", ["-tf", "-"], { stdio: ["pipe", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve(out) : reject(new Error(`tar -t exited ${code}`))));
    stream.pipe(child.stdin);
  });
  assert.ok(names.includes(`sub/deeper/${longName}`), names);
  assert.ok(names.includes("run.sh"), names);
});

test("downloadDir refuses a symlink leading out, and the rest arrives", async () => {
  await sandbox.exec(["sh", "-c", "mkdir -p /workspace/evil && ln -s / /workspace/evil/escape && echo kept > /workspace/evil/kept"]);
  const out = join(local, "evil-out");
  const error = await sandbox.files.downloadDir("/workspace/evil", out).then(
    () => assert.fail("downloadDir took a symlink to /"),
    (e: unknown) => e,
  );
  assert.ok(error instanceof UnsafeArchiveError, String(error));
  assert.deepEqual(error.refused.map((r) => r.name.replace(/^\.\//, "")), ["escape"]);
  assert.equal(error.entries, 1);
  await assert.rejects(lstat(join(out, "escape")));
  assert.equal(await readFile(join(out, "kept"), "utf8"), "kept\n");
});

test("watch reports creates, writes, renames and removes until closed", async () => {
  await sandbox.files.mkdir("/workspace/watched");
  const watch = await sandbox.files.watch("/workspace/watched");
  const events: FileEvent[] = [];
  const reader = (async () => {
    for await (const event of watch) events.push(event);
  })();
  const seen = (types: string[], path: string) => events.some((e) => types.includes(e.type) && e.path === path);
  // Polls what arrived (the guard is far above any expected wait; it only stops a hang).
  async function until(types: string[], path: string) {
    const deadline = Date.now() + 60_000;
    while (!seen(types, path)) {
      if (Date.now() > deadline) throw new Error(`no ${types.join("/")} event for ${path}; events: ${JSON.stringify(events)}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  try {
    await sandbox.exec("echo 1 > /workspace/watched/a.txt");
    await until(["create"], "/workspace/watched/a.txt");
    await until(["write"], "/workspace/watched/a.txt");
    await sandbox.exec("mkdir /workspace/watched/sub && echo deep > /workspace/watched/sub/deep.txt");
    await until(["create"], "/workspace/watched/sub/deep.txt");
    await sandbox.files.move("/workspace/watched/a.txt", "/workspace/watched/b.txt");
    await until(["rename"], "/workspace/watched/a.txt");
    await until(["rename"], "/workspace/watched/b.txt");
    // An API write lands whole (by a rename or a link onto the path, as the daemon does it).
    await sandbox.files.write("/workspace/watched/c.txt", "via the API");
    await until(["create", "rename"], "/workspace/watched/c.txt");
    await sandbox.files.remove("/workspace/watched/b.txt");
    await until(["remove"], "/workspace/watched/b.txt");
  } finally {
    watch.close();
  }
  await within(reader, 60_000, "the watch to end after close()");
});

test("file errors carry their codes", async () => {
  await rejectsWith(sandbox.files.read("/workspace/missing"), NotFoundError, "not_found");
  await rejectsWith(sandbox.files.readStream("/workspace/missing"), NotFoundError, "not_found");
  await rejectsWith(sandbox.files.watch("/workspace/missing"), NotFoundError, "not_found");
  await sandbox.files.mkdir("/workspace/adir");
  await rejectsWith(sandbox.files.write("/workspace/adir", "x"), ConflictError, "is_a_directory");
  await rejectsWith(sandbox.files.read(""), InvalidRequestError);
  await rejectsWith(sandbox.files.write("/workspace/m.txt", "x", { mode: "999" }), InvalidRequestError);
  await rejectsWith(sandbox.files.list("/workspace", { depth: 0 }), InvalidRequestError);
  await rejectsWith(sandbox.files.write("/root/nope.txt", "x", { user: "1000" }), ForbiddenError, "permission_denied");
  await rejectsWith(sandbox.files.uploadArchive("not a tar at all, just text", "/workspace/t"), InvalidRequestError);
  // A failed streamed upload leaves the pool usable.
  await rejectsWith(sandbox.files.write("/workspace/adir", Readable.from(["a", "b"])), ConflictError, "is_a_directory");
  assert.equal(await sandbox.files.exists("/workspace/adir"), true);
});
