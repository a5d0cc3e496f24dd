// Snapshots of a sandbox's files: list, get, delete, and export/import as portable
// .tar.zst archives (streamed both ways).
import { createReadStream, createWriteStream } from "node:fs";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { pathOf, type BodyInput, type Transport } from "./transport.js";
import { snapshotFromWire, type SnapshotInfo } from "./types.js";

/* eslint-disable @typescript-eslint/no-explicit-any */

/** A snapshot, or its id. */
export type SnapshotRef = string | { id: string };

function idOf(snapshot: SnapshotRef): string {
  return typeof snapshot === "string" ? snapshot : snapshot.id;
}

/** A snapshot: a sandbox's files, and with `memory` its processes too. */
export class Snapshot implements SnapshotInfo {
  readonly id: string;
  readonly name: string | null;
  readonly sandboxId: string;
  readonly createdAt: string;
  readonly sizeBytes: number;
  readonly memory: boolean;
  readonly image: string;
  readonly runtime: string;

  constructor(
    private readonly snapshots: Snapshots,
    info: SnapshotInfo,
  ) {
    this.id = info.id;
    this.name = info.name;
    this.sandboxId = info.sandboxId;
    this.createdAt = info.createdAt;
    this.sizeBytes = info.sizeBytes;
    this.memory = info.memory;
    this.image = info.image;
    this.runtime = info.runtime;
  }

  /** Deletes the snapshot (ConflictError snapshot_in_use while a sandbox started from it exists). */
  delete(): Promise<void> {
    return this.snapshots.delete(this.id);
  }

  /** The snapshot as a portable .tar.zst stream. */
  export(): Promise<Readable> {
    return this.snapshots.export(this.id);
  }

  /** Writes the export to a local file; returns its size in bytes. */
  exportToFile(localPath: string): Promise<number> {
    return this.snapshots.exportToFile(this.id, localPath);
  }
}

export class Snapshots {
  constructor(private readonly transport: Transport) {}

  /** @internal */
  wrap(w: any): Snapshot {
    return new Snapshot(this, snapshotFromWire(w));
  }

  /** Every snapshot, oldest first. */
  async list(): Promise<Snapshot[]> {
    const w = await this.transport.json<any>({ method: "GET", path: pathOf("v1", "snapshots") });
    return (w.snapshots as any[]).map((s) => this.wrap(s));
  }

  async get(snapshot: SnapshotRef): Promise<Snapshot> {
    return this.wrap(await this.transport.json<any>({ method: "GET", path: pathOf("v1", "snapshots", idOf(snapshot)) }));
  }

  /** Deletes a snapshot (ConflictError snapshot_in_use while a sandbox started from it exists). */
  async delete(snapshot: SnapshotRef): Promise<void> {
    await this.transport.empty({ method: "DELETE", path: pathOf("v1", "snapshots", idOf(snapshot)) });
  }

  /** The snapshot as a portable .tar.zst stream (resolves once the daemon started sending). */
  async export(snapshot: SnapshotRef): Promise<Readable> {
    return this.transport.send({ method: "GET", path: pathOf("v1", "snapshots", idOf(snapshot), "export") });
  }

  /** Writes the export to a local file; returns its size in bytes. */
  async exportToFile(snapshot: SnapshotRef, localPath: string): Promise<number> {
    const stream = await this.export(snapshot);
    let bytes = 0;
    stream.on("data", (chunk: Buffer) => (bytes += chunk.length));
    await pipeline(stream, createWriteStream(localPath));
    return bytes;
  }

  /**
   * Imports an archive made by export (bytes or a stream); returns the new snapshot. A memory
   * snapshot's image comes along when this daemon holds the exporting daemon's memory image key
   * (else InvalidRequestError memory_image_untrusted); `memory: false` takes its files alone.
   */
  async import(archive: BodyInput, options: { memory?: boolean } = {}): Promise<Snapshot> {
    const w = await this.transport.json<any>({
      method: "POST",
      path: pathOf("v1", "snapshots", "import"),
      query: { memory: options.memory === false ? false : undefined },
      body: archive,
      contentType: "application/zstd",
    });
    return this.wrap(w);
  }

  /** Imports an archive from a local file. */
  importFile(localPath: string, options: { memory?: boolean } = {}): Promise<Snapshot> {
    return this.import(createReadStream(localPath, { highWaterMark: 1 << 20 }), options);
  }
}
