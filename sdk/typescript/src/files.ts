// A sandbox's files: raw bytes both ways (streamed; large files fine), metadata, directory
// operations, tar archives up and down, and change events.
import { createReadStream, createWriteStream } from "node:fs";
import type { IncomingMessage } from "node:http";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { BulkheadConnectionError, BulkheadError, NotFoundError } from "./errors.js";
import { streamError } from "./exec.js";
import { tarDirectory, extractTar } from "./tar.js";
import { ndjson, pathOf, type BodyInput, type QueryValue, type Transport } from "./transport.js";
import { entryFromWire, type ArchiveSummary, type Entry, type EntryList, type FileEvent } from "./types.js";

export interface FileOptions {
  /** Whom the operation runs as (permissions, ownership of new files); default: the sandbox's user. */
  user?: string;
}

export interface WriteOptions extends FileOptions {
  /** Permission bits: 0o755 or "0755". Without it an existing file keeps its mode, a new one gets 0644. */
  mode?: number | string;
  /** Add to the end of the file instead of replacing it. */
  append?: boolean;
}

/* eslint-disable @typescript-eslint/no-explicit-any */

function octalMode(mode: number | string | undefined): string | undefined {
  if (mode === undefined) return undefined;
  return typeof mode === "number" ? mode.toString(8).padStart(4, "0") : mode;
}

export class Files {
  constructor(
    private readonly transport: Transport,
    private readonly sandboxId: string,
  ) {}

  private path(route?: string): string {
    return route
      ? pathOf("v1", "sandboxes", this.sandboxId, "files", route)
      : pathOf("v1", "sandboxes", this.sandboxId, "files");
  }

  private query(path: string, options: FileOptions, extra: Record<string, QueryValue> = {}): Record<string, QueryValue> {
    return { path, user: options.user, ...extra };
  }

  /** The file's bytes. */
  async read(path: string, options: FileOptions = {}): Promise<Buffer> {
    const response = await this.readStream(path, options);
    return this.transport.readBody(response);
  }

  /** The file as UTF-8 text. */
  async readText(path: string, options: FileOptions = {}): Promise<string> {
    return (await this.read(path, options)).toString("utf8");
  }

  /**
   * The file's bytes as a Node Readable (also an AsyncIterable of Buffers), read as they
   * arrive. Resolves once the daemon opened the file (errors are thrown here).
   */
  async readStream(path: string, options: FileOptions = {}): Promise<Readable> {
    return this.transport.send({ method: "GET", path: this.path(), query: this.query(path, options) });
  }

  /** Copies a file of the sandbox to a local path (created or replaced) or a Writable; returns its size. */
  async download(path: string, dest: string | NodeJS.WritableStream, options: FileOptions = {}): Promise<number> {
    const stream = await this.readStream(path, options);
    let bytes = 0;
    stream.on("data", (chunk: Buffer) => (bytes += chunk.length));
    await pipeline(stream, typeof dest === "string" ? createWriteStream(dest) : dest);
    return bytes;
  }

  /**
   * Writes a file (parents are made): bytes, text, a Node stream, a web ReadableStream, a
   * Blob, or an (async) iterable of chunks — streamed, never held whole.
   */
  async write(path: string, data: BodyInput, options: WriteOptions = {}): Promise<Entry> {
    const w = await this.transport.json<any>({
      method: "PUT",
      path: this.path(),
      query: this.query(path, options, { mode: octalMode(options.mode), append: options.append ? "true" : undefined }),
      body: data,
      contentType: "application/octet-stream",
    });
    return entryFromWire(w);
  }

  /** Copies a local file into the sandbox (streamed). */
  upload(localPath: string, path: string, options: WriteOptions = {}): Promise<Entry> {
    return this.write(path, createReadStream(localPath, { highWaterMark: 1 << 20 }), options);
  }

  /** The entries under a directory, down to `depth` levels (default 1; symlinks not followed). */
  async list(path = ".", options: FileOptions & { depth?: number } = {}): Promise<EntryList> {
    const w = await this.transport.json<any>({
      method: "GET",
      path: this.path("list"),
      query: this.query(path, options, { depth: options.depth }),
    });
    return Object.assign((w.entries as any[]).map(entryFromWire), { truncated: Boolean(w.truncated) });
  }

  async stat(path: string, options: FileOptions = {}): Promise<Entry> {
    return entryFromWire(await this.transport.json<any>({ method: "GET", path: this.path("stat"), query: this.query(path, options) }));
  }

  /** Whether the path exists (an unknown sandbox is still an error). */
  async exists(path: string, options: FileOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, options);
      return true;
    } catch (error) {
      if (error instanceof NotFoundError && error.code === "not_found") return false;
      throw error;
    }
  }

  /** Makes a directory (with its parents unless parents: false). */
  async mkdir(path: string, options: FileOptions & { parents?: boolean; mode?: number | string } = {}): Promise<Entry> {
    const w = await this.transport.json<any>({
      method: "POST",
      path: this.path("mkdir"),
      query: { user: options.user },
      json: { path, parents: options.parents ?? true, ...(options.mode !== undefined ? { mode: options.mode } : {}) },
    });
    return entryFromWire(w);
  }

  /** Moves or renames; returns the entry at its new path. */
  async move(from: string, to: string, options: FileOptions = {}): Promise<Entry> {
    const w = await this.transport.json<any>({
      method: "POST",
      path: this.path("move"),
      query: { user: options.user },
      json: { from, to },
    });
    return entryFromWire(w);
  }

  /** Deletes a file, or a directory (recursive: true for one with contents). */
  async remove(path: string, options: FileOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.transport.empty({
      method: "DELETE",
      path: this.path(),
      query: this.query(path, options, { recursive: options.recursive ? "true" : undefined }),
    });
  }

  /** Unpacks a tar (plain, gzip, bzip2 or xz; bytes or a stream) into the directory `path`. */
  async uploadArchive(tar: BodyInput, path: string, options: FileOptions = {}): Promise<ArchiveSummary> {
    const w = await this.transport.json<any>({
      method: "PUT",
      path: this.path("archive"),
      query: this.query(path, options),
      body: tar,
      contentType: "application/x-tar",
    });
    return { entries: w.entries, bytes: w.bytes };
  }

  /** Uploads a local directory's tree into the directory `path` (a tar made on the fly). */
  async uploadDir(localDir: string, path: string, options: FileOptions = {}): Promise<ArchiveSummary> {
    return this.uploadArchive(tarDirectory(localDir), path, options);
  }

  /** The directory `path` as a tar stream. */
  async downloadArchive(path: string, options: FileOptions = {}): Promise<Readable> {
    return this.transport.send({ method: "GET", path: this.path("archive"), query: this.query(path, options) });
  }

  /**
   * Downloads the directory `path` into `localDir` (made if missing). Entries that would
   * land outside it, or write through a symlink, are refused. Returns the number of entries.
   */
  async downloadDir(path: string, localDir: string, options: FileOptions = {}): Promise<number> {
    const stream = await this.downloadArchive(path, options);
    try {
      return await extractTar(stream, localDir);
    } finally {
      stream.destroy();
    }
  }

  /**
   * Watches `path` (recursively by default). Resolves once the watch is in place; iterate
   * the result for events, close() it to stop.
   */
  async watch(path = ".", options: FileOptions & { recursive?: boolean } = {}): Promise<FileWatch> {
    const response = await this.transport.send({
      method: "GET",
      path: this.path("watch"),
      query: this.query(path, options, { recursive: options.recursive === false ? "false" : "true" }),
      accept: "application/x-ndjson",
    });
    return new FileWatch(response);
  }
}

/** A running watch: an async iterable of FileEvents until close(). */
export class FileWatch implements AsyncIterable<FileEvent> {
  private closed = false;

  constructor(private readonly response: IncomingMessage) {}

  async *[Symbol.asyncIterator](): AsyncIterator<FileEvent> {
    try {
      for await (const event of ndjson<any>(this.response)) {
        if (event.type === "error") throw streamError(event);
        const out: FileEvent = { type: event.type, path: event.path };
        if (event.dir !== undefined) out.dir = Boolean(event.dir);
        yield out;
      }
    } catch (error) {
      if (this.closed) return;
      if (error instanceof BulkheadError) throw error;
      throw new BulkheadConnectionError(`the watch broke off: ${(error as Error).message}`, { cause: error });
    } finally {
      this.response.destroy();
    }
  }

  /** Stops the watch; an iteration in progress ends. */
  close(): void {
    this.closed = true;
    this.response.destroy();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}
