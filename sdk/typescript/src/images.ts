// Images sandboxes start from: the built-in "host", and rootfs tarballs imported by name.
import { createReadStream } from "node:fs";
import { pathOf, type BodyInput, type Transport } from "./transport.js";
import { imageFromWire, type Image } from "./types.js";

/* eslint-disable @typescript-eslint/no-explicit-any */

export class Images {
  constructor(private readonly transport: Transport) {}

  async list(): Promise<Image[]> {
    const w = await this.transport.json<any>({ method: "GET", path: pathOf("v1", "images") });
    return (w.images as any[]).map(imageFromWire);
  }

  /**
   * Imports a root filesystem tarball (tar, or tar.gz/.zst/.xz: the daemon tells them
   * apart) as the image `name`; bytes or a stream.
   */
  async import(name: string, tarball: BodyInput): Promise<Image> {
    const w = await this.transport.json<any>({
      method: "PUT",
      path: pathOf("v1", "images", name),
      body: tarball,
      contentType: "application/octet-stream",
    });
    return imageFromWire(w);
  }

  /** Imports a rootfs tarball from a local file. */
  importFile(name: string, localPath: string): Promise<Image> {
    return this.import(name, createReadStream(localPath, { highWaterMark: 1 << 20 }));
  }

  /** Deletes an image (ConflictError while a sandbox uses it, or for the built-in one). */
  async delete(name: string): Promise<void> {
    await this.transport.empty({ method: "DELETE", path: pathOf("v1", "images", name) });
  }
}
