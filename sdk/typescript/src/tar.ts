// Just enough tar for uploadDir() and downloadDir(): writing a local directory as a ustar
// stream (pax records for long names), and unpacking a tar stream into a local directory
// without letting any entry land outside it. Node has no tar module, and the SDK takes no
// dependencies.
import { createReadStream, constants as fsConstants } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import { BulkheadError, UnsafeArchiveError } from "./errors.js";

const BLOCK = 512;
const ZEROS = Buffer.alloc(BLOCK * 2);

// ---------------------------------------------------------------- writing

function octal(value: number, width: number): string {
  // width-1 digits and a NUL, as ustar has it.
  return value.toString(8).padStart(width - 1, "0") + "\0";
}

interface HeaderFields {
  name: string;
  mode: number;
  size: number;
  mtime: number;
  type: string; // "0" file, "2" symlink, "5" directory, "x" pax record
  linkname?: string;
}

function header(fields: HeaderFields): Buffer {
  const block = Buffer.alloc(BLOCK);
  block.write(fields.name, 0, 100, "utf8");
  block.write(octal(fields.mode & 0o7777, 8), 100, "ascii");
  block.write(octal(0, 8), 108, "ascii"); // uid: the sandbox decides who owns what it unpacks
  block.write(octal(0, 8), 116, "ascii"); // gid
  block.write(octal(fields.size, 12), 124, "ascii");
  block.write(octal(Math.max(0, Math.floor(fields.mtime)), 12), 136, "ascii");
  block.write(fields.type, 156, "ascii");
  if (fields.linkname) block.write(fields.linkname, 157, 100, "utf8");
  block.write("ustar\0", 257, "ascii");
  block.write("00", 263, "ascii");
  block.fill(" ", 148, 156); // the checksum counts its own field as spaces
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(octal(sum, 7) + " ", 148, "ascii");
  return block;
}

/** A pax record "LEN key=value\n", whose LEN counts itself. */
function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let length = Buffer.byteLength(body) + 1;
  while (String(length).length + Buffer.byteLength(body) !== length) length = String(length).length + Buffer.byteLength(body);
  return `${length}${body}`;
}

function padding(size: number): Buffer {
  const rest = size % BLOCK;
  return rest ? Buffer.alloc(BLOCK - rest) : Buffer.alloc(0);
}

/** The headers of one entry: a pax record first when the name or link does not fit. */
function entryHeaders(fields: HeaderFields): Buffer[] {
  const records: string[] = [];
  if (Buffer.byteLength(fields.name) > 100) records.push(paxRecord("path", fields.name));
  if (fields.linkname && Buffer.byteLength(fields.linkname) > 100) records.push(paxRecord("linkpath", fields.linkname));
  if (fields.size > 0o77777777777) records.push(paxRecord("size", String(fields.size)));
  const out: Buffer[] = [];
  if (records.length) {
    const data = Buffer.from(records.join(""), "utf8");
    out.push(header({ name: "PaxHeader", mode: 0o644, size: data.length, mtime: fields.mtime, type: "x" }), data, padding(data.length));
  }
  const size = fields.size > 0o77777777777 ? 0 : fields.size;
  out.push(header({ ...fields, size, name: fields.name.slice(0, 100), linkname: fields.linkname?.slice(0, 100) }));
  return out;
}

/**
 * The tree under `root` as a tar stream: directories, regular files and symlinks (not
 * followed), with their modes and mtimes; names relative to `root`. Other kinds are skipped.
 */
export async function* tarDirectory(root: string): AsyncGenerator<Buffer, void, undefined> {
  const top = await fs.stat(root);
  if (!top.isDirectory()) throw new BulkheadError(`${root} is not a directory`);
  yield* tarChildren(root, "");
  yield ZEROS;
}

async function* tarChildren(root: string, relative: string): AsyncGenerator<Buffer, void, undefined> {
  const names = (await fs.readdir(path.join(root, relative))).sort();
  for (const name of names) {
    const rel = relative ? `${relative}/${name}` : name;
    const full = path.join(root, rel);
    const info = await fs.lstat(full);
    const mtime = info.mtimeMs / 1000;
    if (info.isDirectory()) {
      yield* entryHeaders({ name: `${rel}/`, mode: info.mode, size: 0, mtime, type: "5" });
      yield* tarChildren(root, rel);
    } else if (info.isSymbolicLink()) {
      yield* entryHeaders({ name: rel, mode: info.mode, size: 0, mtime, type: "2", linkname: await fs.readlink(full) });
    } else if (info.isFile()) {
      yield* entryHeaders({ name: rel, mode: info.mode, size: info.size, mtime, type: "0" });
      let written = 0;
      if (info.size > 0) {
        // Exactly the size in the header, even if the file grows meanwhile.
        for await (const chunk of createReadStream(full, { end: info.size - 1, highWaterMark: 1 << 20 })) {
          written += (chunk as Buffer).length;
          yield chunk as Buffer;
        }
      }
      if (written !== info.size) throw new BulkheadError(`${full} shrank while it was archived`);
      yield padding(info.size);
    }
  }
}

// ---------------------------------------------------------------- reading

/** Exact-size reads over a stream of chunks. */
class ByteReader {
  private buffer: Buffer = Buffer.alloc(0);
  private done = false;

  constructor(private readonly source: AsyncIterator<Buffer | Uint8Array>) {}

  private async fill(n: number): Promise<boolean> {
    while (this.buffer.length < n && !this.done) {
      const next = await this.source.next();
      if (next.done) this.done = true;
      else this.buffer = this.buffer.length ? Buffer.concat([this.buffer, Buffer.from(next.value)]) : Buffer.from(next.value);
    }
    return this.buffer.length >= n;
  }

  /** n bytes, or null at a clean end before any of them. */
  async exactly(n: number): Promise<Buffer | null> {
    if (!(await this.fill(n))) {
      if (this.buffer.length === 0) return null;
      throw new BulkheadError("the tar stream ended in the middle of an entry");
    }
    const out = this.buffer.subarray(0, n);
    this.buffer = this.buffer.subarray(n);
    return out;
  }

  /** The next n bytes, in pieces as they arrive. */
  async *pieces(n: number): AsyncGenerator<Buffer, void, undefined> {
    let left = n;
    while (left > 0) {
      if (this.buffer.length === 0 && !(await this.fill(1))) throw new BulkheadError("the tar stream ended in the middle of a file");
      const piece = this.buffer.subarray(0, Math.min(left, this.buffer.length));
      this.buffer = this.buffer.subarray(piece.length);
      left -= piece.length;
      yield piece;
    }
  }

  async skip(n: number): Promise<void> {
    for await (const _ of this.pieces(n)) {
      // dropped
    }
  }
}

function field(block: Buffer, start: number, length: number): string {
  const raw = block.subarray(start, start + length);
  const end = raw.indexOf(0);
  return raw.subarray(0, end === -1 ? length : end).toString("utf8");
}

function number(block: Buffer, start: number, length: number): number {
  const raw = block.subarray(start, start + length);
  if (raw[0]! & 0x80) {
    // GNU base-256 for values that do not fit in octal
    let value = 0;
    for (let i = 1; i < length; i++) value = value * 256 + raw[i]!;
    return value;
  }
  const text = field(block, start, length).trim();
  return text ? parseInt(text, 8) : 0;
}

function parsePax(data: Buffer): Record<string, string> {
  const records: Record<string, string> = {};
  let at = 0;
  while (at < data.length) {
    const space = data.indexOf(32, at);
    if (space === -1) break;
    const length = parseInt(data.subarray(at, space).toString("ascii"), 10);
    if (!(length > 0)) break;
    const record = data.subarray(space + 1, at + length - 1).toString("utf8");
    const equals = record.indexOf("=");
    if (equals > 0) records[record.slice(0, equals)] = record.slice(equals + 1);
    at += length;
  }
  return records;
}

/** Why an entry is not unpacked; caught per entry, which is then skipped. */
class Refused extends Error {}

/**
 * The components of a name inside the destination, without "" and "." (empty: the destination
 * itself); null for an absolute name or one with a ".." component.
 */
export function containedName(name: string): string[] | null {
  if (name === "" || name.startsWith("/")) return null;
  const parts = name.split("/").filter((part) => part !== "" && part !== ".");
  return parts.includes("..") ? null : parts;
}

/**
 * Whether a symlink named `parts` pointing at `target` points inside the destination: the
 * target is relative, its ".." components come before any name (a name could be a symlink
 * whose ".." climbs from elsewhere), and they climb no higher than the destination.
 */
export function symlinkStaysInside(parts: string[], target: string): boolean {
  if (target === "" || target.startsWith("/") || parts.length === 0) return false;
  let depth = parts.length - 1;
  let named = false;
  for (const part of target.split("/")) {
    if (part === "..") {
      if (named || depth === 0) return false;
      depth--;
    } else if (part !== "" && part !== ".") {
      named = true;
    }
  }
  return true;
}

/** The permission bits a file from a sandbox gets here: never setuid or setgid, sticky only on a directory. */
export function hostMode(mode: number, isDirectory: boolean): number {
  return mode & (isDirectory ? 0o1777 : 0o777);
}

const REGULAR = new Set(["0", "\0", "7"]);

/** Why the entry may not be unpacked, or null. Hard links may name only a file this unpack made. */
function whyRefused(type: string, parts: string[] | null, linkname: string, regularFiles: Set<string>): string | null {
  if (parts === null) return "its name leads outside the destination";
  if (parts.length === 0 && type !== "5") return "it would replace the destination itself";
  if (REGULAR.has(type) || type === "5") return null;
  if (type === "1") {
    const target = containedName(linkname);
    if (target !== null && regularFiles.has(target.join("/"))) return null;
    return `a hard link to ${JSON.stringify(linkname)}, which is not a file unpacked before it`;
  }
  if (type === "2") return symlinkStaysInside(parts, linkname) ? null : `a symlink to ${JSON.stringify(linkname)}, outside the destination`;
  if (type === "3" || type === "4") return "a device node";
  if (type === "6") return "a fifo";
  return "an entry of an unknown type";
}

/** Makes the parent directories of `parts` under `dest`, refusing a symlink among them. */
async function prepareParent(dest: string, parts: string[]): Promise<void> {
  let current = dest;
  for (const part of parts.slice(0, -1)) {
    current = path.join(current, part);
    const info = await fs.lstat(current).catch(() => null);
    if (info === null) await fs.mkdir(current);
    else if (info.isSymbolicLink()) throw new Refused(`it goes through the symlink ${JSON.stringify(part)}`);
    else if (!info.isDirectory()) throw new Refused(`${JSON.stringify(part)} is in the way (not a directory)`);
  }
}

/**
 * Removes what is at `target` so that a new entry replaces it (a symlink is removed, never
 * written through); a directory in the way is refused.
 */
async function clear(target: string): Promise<void> {
  const info = await fs.lstat(target).catch(() => null);
  if (info?.isDirectory()) throw new Refused("a directory is in the way");
  if (info) await fs.unlink(target);
}

const OPEN_DIRECTORY = fsConstants.O_RDONLY | fsConstants.O_DIRECTORY | fsConstants.O_NOFOLLOW;

/**
 * Unpacks a tar stream into `dest` (made if missing), treating it as hostile. Made: regular
 * files, directories, symlinks that stay inside, hard links to files unpacked before;
 * permission bits (never setuid/setgid; sticky on directories only) and mtimes; never owners.
 * Refused, each skipped with nothing written for it: absolute and ".." names, devices, fifos,
 * symlinks leading out, other hard links, paths through a symlink. Returns the number of
 * entries made; throws UnsafeArchiveError after the rest if any was refused.
 */
export async function extractTar(source: AsyncIterable<Buffer | Uint8Array>, dest: string): Promise<number> {
  await fs.mkdir(dest, { recursive: true });
  const reader = new ByteReader(source[Symbol.asyncIterator]());
  const directoryModes: [string, number, number][] = [];
  const regularFiles = new Set<string>();
  const refused: { name: string; reason: string }[] = [];
  let entries = 0;
  let pax: Record<string, string> = {};
  let longName: string | undefined;
  let longLink: string | undefined;
  for (;;) {
    const block = await reader.exactly(BLOCK);
    if (block === null || block.every((byte) => byte === 0)) break;
    const type = String.fromCharCode(block[156]!) || "0";
    const prefix = field(block, 345, 155);
    const name = pax.path ?? longName ?? (prefix ? `${prefix}/${field(block, 0, 100)}` : field(block, 0, 100));
    const linkname = pax.linkpath ?? longLink ?? field(block, 157, 100);
    const size = pax.size !== undefined ? Number(pax.size) : number(block, 124, 12);
    const mode = number(block, 100, 8) & 0o7777;
    const mtime = number(block, 136, 12);
    const padded = size + padding(size).length;

    if (type === "x" || type === "L" || type === "K") {
      const data = (await reader.exactly(padded)) ?? Buffer.alloc(0);
      if (type === "x") pax = parsePax(data.subarray(0, size));
      else if (type === "L") longName = field(data, 0, size);
      else longLink = field(data, 0, size);
      continue;
    }
    pax = {};
    longName = undefined;
    longLink = undefined;
    if (type === "g") {
      await reader.skip(padded);
      continue;
    }

    const parts = containedName(name);
    let why = whyRefused(type, parts, linkname, regularFiles);
    if (why === null && parts !== null && parts.length === 0) {
      // The root itself: dest is the caller's; its mode stays as it is.
      await reader.skip(padded);
      continue;
    }
    if (why === null && parts !== null) {
      const key = parts.join("/");
      regularFiles.delete(key); // whatever was there is replaced
      try {
        await prepareParent(dest, parts);
        const target = path.join(dest, ...parts);
        if (type === "5") {
          const info = await fs.lstat(target).catch(() => null);
          if (!info?.isDirectory()) {
            await clear(target);
            await fs.mkdir(target, 0o700); // its own mode comes last, once its contents are in
          }
          directoryModes.push([target, mode, mtime]);
          await reader.skip(padded);
        } else if (type === "2") {
          await clear(target);
          await fs.symlink(linkname, target);
          await reader.skip(padded);
        } else if (type === "1") {
          await clear(target);
          await fs.link(path.join(dest, ...containedName(linkname)!), target);
          regularFiles.add(key);
          await reader.skip(padded);
        } else {
          await clear(target);
          const file = await fs.open(target, "wx", 0o600);
          try {
            for await (const piece of reader.pieces(size)) await file.write(piece);
            await file.chmod(hostMode(mode, false));
            await file.utimes(mtime, mtime);
          } finally {
            await file.close();
          }
          regularFiles.add(key);
          await reader.skip(padded - size);
        }
        entries++;
      } catch (error) {
        if (!(error instanceof Refused)) throw error;
        why = error.message;
      }
    }
    if (why !== null) {
      refused.push({ name, reason: why });
      await reader.skip(padded);
    }
  }
  // Directory modes last, so a read-only directory did not stop what goes inside it; opened
  // without following a symlink, should a later entry have put one there.
  for (const [dir, mode, mtime] of directoryModes.reverse()) {
    const handle = await fs.open(dir, OPEN_DIRECTORY).catch(() => null);
    if (handle === null) continue;
    try {
      await handle.chmod(hostMode(mode, true));
      await handle.utimes(mtime, mtime);
    } finally {
      await handle.close();
    }
  }
  if (refused.length) throw new UnsafeArchiveError(refused, entries, dest);
  return entries;
}
