// Named volumes: storage that outlives sandboxes, mounted with create({volumes: [...]}).
import { pathOf, type Transport } from "./transport.js";
import { volumeFromWire, withoutUndefined, type Volume } from "./types.js";

/* eslint-disable @typescript-eslint/no-explicit-any */

export class Volumes {
  constructor(private readonly transport: Transport) {}

  /** Makes a volume; `sizeMb` caps what it holds (daemon default 1024). */
  async create(name: string, options: { sizeMb?: number } = {}): Promise<Volume> {
    const w = await this.transport.json<any>({
      method: "POST",
      path: pathOf("v1", "volumes"),
      json: withoutUndefined({ name, size_mb: options.sizeMb }),
    });
    return volumeFromWire(w);
  }

  async list(): Promise<Volume[]> {
    const w = await this.transport.json<any>({ method: "GET", path: pathOf("v1", "volumes") });
    return (w.volumes as any[]).map(volumeFromWire);
  }

  async get(name: string): Promise<Volume> {
    return volumeFromWire(await this.transport.json<any>({ method: "GET", path: pathOf("v1", "volumes", name) }));
  }

  /** Deletes a volume and its data (ConflictError volume_in_use while a sandbox lists it). */
  async delete(name: string): Promise<void> {
    await this.transport.empty({ method: "DELETE", path: pathOf("v1", "volumes", name) });
  }
}
