// The local unpacker behind downloadDir() fed hostile tar streams made here, as sandbox code
// could send them (no daemon needed): nothing may land outside the directory, be written
// through a symlink, arrive setuid/setgid, as a device or fifo, or keep the archive's owners.
import assert from "node:assert/strict";
import { lstat, mkdir, mkdtemp, readFile, readlink, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, before, test } from "node:test";
import { UnsafeArchiveError } from "@bulkhead/sdk";
import { containedName, extractTar, hostMode, symlinkStaysInside } from "../dist/tar.js";

interface Entry {
  name: string;
  type?: string; // "0" file, "1" hard link, "2" symlink, "3" char device, "4" block device, "5" dir, "6" fifo
  mode?: number;
  data?: string;
  link?: string;
  owner?: number; // uid and gid; 0 is "root" by name too
}

function octal(value: number, width: number): string {
  return value.toString(8).padStart(width - 1, "0") + "\0";
}

/** A ustar stream of `entries`, headers written field by field as any tar writer would. */
function tarOf(entries: Entry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const entry of entries) {
    const data = Buffer.from(entry.data ?? "");
    const header = Buffer.alloc(512);
    header.write(entry.name, 0, 100, "utf8");
    header.write(octal(entry.mode ?? 0o644, 8), 100, "ascii");
    header.write(octal(entry.owner ?? 0, 8), 108, "ascii");
    header.write(octal(entry.owner ?? 0, 8), 116, "ascii");
    header.write(octal(data.length, 12), 124, "ascii");
    header.write(octal(1700000000, 12), 136, "ascii");
    header.write(entry.type ?? "0", 156, "ascii");
    header.write(entry.link ?? "", 157, 100, "utf8");
    header.write("ustar\0", 257, "ascii");
    header.write("00", 263, "ascii");
    if ((entry.owner ?? 0) === 0) {
      header.write("root", 265, "ascii");
      header.write("root", 297, "ascii");
    }
    if (entry.type === "3") header.write(octal(1, 8), 329, "ascii"); // /dev/mem's numbers
    header.fill(" ", 148, 156);
    let sum = 0;
    for (const byte of header) sum += byte;
    header.write(octal(sum, 7) + " ", 148, "ascii");
    blocks.push(header, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

let root: string;
let dest: string;
let outside: string;
let cases = 0;
before(async () => {
  root = await mkdtemp(join(tmpdir(), "bhsdk-unpack-"));
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

/** A fresh destination and, beside it, an outside directory holding a file that must never change. */
async function fresh(): Promise<void> {
  const base = join(root, `case-${++cases}`);
  dest = join(base, "dest");
  outside = join(base, "outside");
  await mkdir(dest, { recursive: true });
  await mkdir(outside, { recursive: true, mode: 0o755 });
  await writeFile(join(outside, "target"), "precious");
}

async function unpack(entries: Entry[]): Promise<number | UnsafeArchiveError> {
  try {
    return await extractTar(Readable.from([tarOf(entries)]), dest);
  } catch (error) {
    if (error instanceof UnsafeArchiveError) return error;
    throw error;
  }
}

async function exists(path: string): Promise<boolean> {
  return (await lstat(path).catch(() => null)) !== null;
}

async function modeOf(path: string): Promise<number> {
  return (await lstat(path)).mode & 0o7777;
}

function refusedNames(result: number | UnsafeArchiveError): string[] {
  assert.ok(result instanceof UnsafeArchiveError, `expected refusals, got ${String(result)}`);
  return result.refused.map((r) => r.name);
}

test("a normal tree arrives as before: files, dirs, modes, mtimes, in-tree symlinks and hard links", async () => {
  await fresh();
  const made = await unpack([
    { name: "./", type: "5", mode: 0o755 },
    { name: "src/", type: "5", mode: 0o700 },
    { name: "src/main.py", mode: 0o755, data: "print(42)\n" },
    { name: "ro/", type: "5", mode: 0o555 },
    { name: "ro/inside", mode: 0o444, data: "read only" },
    { name: "link", type: "2", mode: 0o777, link: "src/main.py" },
    { name: "src/up", type: "2", mode: 0o777, link: "../link" },
    { name: "same", type: "1", link: "./src/main.py" },
  ]);
  assert.equal(made, 7);
  assert.equal(await readFile(join(dest, "src/main.py"), "utf8"), "print(42)\n");
  assert.equal(await readFile(join(dest, "same"), "utf8"), "print(42)\n");
  assert.equal(await readlink(join(dest, "link")), "src/main.py");
  assert.equal(await readFile(join(dest, "src/up"), "utf8"), "print(42)\n");
  assert.equal(await modeOf(join(dest, "src")), 0o700);
  assert.equal(await modeOf(join(dest, "src/main.py")), 0o755);
  assert.equal(await modeOf(join(dest, "ro")), 0o555);
  assert.equal(await readFile(join(dest, "ro/inside"), "utf8"), "read only");
  assert.equal((await stat(join(dest, "src/main.py"))).mtimeMs, 1700000000 * 1000);
});

test("setuid and setgid never arrive, sticky only on directories; files belong to whoever unpacks", async () => {
  await fresh();
  const made = await unpack([
    { name: "evil", mode: 0o4755, data: "#!/bin/sh\n", owner: 0 },
    { name: "group-tool", mode: 0o2755, data: "#!/bin/sh\n", owner: 0 },
    { name: "sticky-file", mode: 0o1644, data: "x" },
    { name: "shared/", type: "5", mode: 0o2775, owner: 0 },
    { name: "tmp/", type: "5", mode: 0o1777 },
    { name: "theirs", mode: 0o644, data: "x", owner: 12345 },
  ]);
  assert.equal(made, 6);
  assert.equal(await modeOf(join(dest, "evil")), 0o755);
  assert.equal(await modeOf(join(dest, "group-tool")), 0o755);
  assert.equal(await modeOf(join(dest, "sticky-file")), 0o644);
  assert.equal(await modeOf(join(dest, "shared")), 0o775);
  assert.equal(await modeOf(join(dest, "tmp")), 0o1777);
  for (const name of ["evil", "shared", "theirs"]) {
    const info = await lstat(join(dest, name));
    assert.equal(info.uid, process.geteuid!(), name);
    assert.equal(info.gid, process.getegid!(), name);
  }
});

test("devices and fifos are refused, the rest arrives", async () => {
  await fresh();
  const result = await unpack([
    { name: "mem", type: "3", mode: 0o666 },
    { name: "disk", type: "4", mode: 0o660 },
    { name: "pipe", type: "6", mode: 0o644 },
    { name: "after", data: "ok" },
  ]);
  assert.deepEqual(refusedNames(result), ["mem", "disk", "pipe"]);
  assert.equal((result as UnsafeArchiveError).entries, 1);
  assert.match((result as UnsafeArchiveError).message, /"mem": a device node; "disk": a device node; "pipe": a fifo/);
  for (const name of ["mem", "disk", "pipe"]) assert.equal(await exists(join(dest, name)), false, name);
  assert.equal(await readFile(join(dest, "after"), "utf8"), "ok");
});

test("absolute and .. names are refused", async () => {
  await fresh();
  const result = await unpack([
    { name: join(outside, "abs"), data: "x" },
    { name: "../outside/dotdot", data: "x" },
    { name: "a/../../outside/deeper", data: "x" },
  ]);
  assert.equal(refusedNames(result).length, 3);
  for (const name of ["abs", "dotdot", "deeper"]) assert.equal(await exists(join(outside, name)), false, name);
  assert.equal(await exists(join(dest, outside, "abs")), false); // not moved inside either
});

test("symlinks leading out are refused, and nothing is written through one", async () => {
  await fresh();
  const result = await unpack([
    // The classic: a symlink out, then a file "under" it.
    { name: "a", type: "2", link: outside },
    { name: "a/target", data: "overwritten" },
    { name: "b", type: "2", link: "../outside" },
    { name: "b/target", data: "overwritten" },
    { name: "sub/", type: "5", mode: 0o755 },
    { name: "sub/loop", type: "2", link: ".." },
    { name: "climb", type: "2", link: "sub/loop/../.." },
    { name: "etc", type: "2", link: "/etc" },
    // Even a symlink that stays inside is never written through.
    { name: "c", type: "2", link: "sub" },
    { name: "c/file", data: "through a link" },
  ]);
  assert.deepEqual(refusedNames(result), ["a", "b", "climb", "etc", "c/file"]);
  assert.equal(await readFile(join(outside, "target"), "utf8"), "precious");
  assert.equal((await lstat(join(dest, "a"))).isSymbolicLink(), false);
  assert.equal(await readlink(join(dest, "sub/loop")), "..");
  assert.equal(await exists(join(dest, "sub/file")), false);
});

test("a symlink already in the destination is replaced or refused, never followed", async () => {
  await fresh();
  await symlink(outside, join(dest, "a"));
  await symlink(join(outside, "target"), join(dest, "t"));
  await symlink(outside, join(dest, "d"));
  const result = await unpack([
    { name: "a/planted", data: "x" },
    { name: "t", data: "new" },
    { name: "d/", type: "5", mode: 0o777 }, // replaces the link with a directory
    { name: "d/target", data: "overwritten" },
  ]);
  assert.deepEqual(refusedNames(result), ["a/planted"]);
  assert.equal((await lstat(join(dest, "d"))).isSymbolicLink(), false);
  assert.equal(await readFile(join(dest, "d/target"), "utf8"), "overwritten");
  assert.equal(await modeOf(outside), 0o755);
  assert.equal(await exists(join(outside, "planted")), false);
  assert.equal(await readFile(join(outside, "target"), "utf8"), "precious");
  assert.equal((await lstat(join(dest, "t"))).isSymbolicLink(), false);
  assert.equal(await readFile(join(dest, "t"), "utf8"), "new");
});

test("hard links only to files this unpack made", async () => {
  await fresh();
  await symlink(join(outside, "target"), join(dest, "pre"));
  await writeFile(join(dest, "mine"), "the user's own");
  const result = await unpack([
    { name: "passwd", type: "1", link: "/etc/passwd" },
    { name: "out", type: "1", link: "../outside/target" },
    { name: "grab", type: "1", link: "pre" },
    { name: "grab-mine", type: "1", link: "mine" },
    { name: "sub/deep/", type: "5", mode: 0o755 },
    { name: "sub/deep/link", type: "2", link: "../../file" },
    { name: "relinked", type: "1", link: "sub/deep/link" },
    { name: "early", type: "1", link: "later" },
    { name: "later", data: "x" },
    { name: "file", data: "in the tree" },
    { name: "same", type: "1", link: "file" },
  ]);
  assert.deepEqual(refusedNames(result), ["passwd", "out", "grab", "grab-mine", "relinked", "early"]);
  for (const name of ["passwd", "out", "grab", "grab-mine", "relinked", "early"]) {
    assert.equal(await exists(join(dest, name)), false, name);
  }
  assert.equal(await readFile(join(dest, "same"), "utf8"), "in the tree");
  assert.equal(await readFile(join(outside, "target"), "utf8"), "precious");
});

test("the name and mode rules", () => {
  assert.deepEqual(containedName("./a//b/"), ["a", "b"]);
  assert.deepEqual(containedName("./"), []);
  assert.equal(containedName("/a"), null);
  assert.equal(containedName("a/../b"), null);
  assert.ok(symlinkStaysInside(["a", "b", "l"], "../../x/y"));
  assert.ok(symlinkStaysInside(["l"], "."));
  assert.ok(!symlinkStaysInside(["l"], ".."));
  assert.ok(!symlinkStaysInside(["a", "l"], "x/../.."));
  assert.ok(!symlinkStaysInside(["a", "l"], "x/../y")); // x could be a link itself
  assert.ok(!symlinkStaysInside(["l"], "/etc"));
  assert.equal(hostMode(0o6755, false), 0o755);
  assert.equal(hostMode(0o1644, false), 0o644);
  assert.equal(hostMode(0o7777, true), 0o1777);
});
