// Volumes (shared between sandboxes, read-only mounts, in-use conflicts) and images (import
// a rootfs tarball holding one static program, run it, delete it), with their errors.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { ConflictError, ForbiddenError, InvalidRequestError, NotFoundError } from "@bulkhead/sdk";
import { client, rejectsWith } from "./helpers.js";

const bulkhead = client();
after(() => bulkhead.close());

function uniqueName(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

test("a volume is shared between sandboxes, read-only where asked, and in use until they go", async () => {
  const name = uniqueName("sdkvol");
  const volume = await bulkhead.volumes.create(name, { sizeMb: 64 });
  assert.equal(volume.name, name);
  assert.equal(volume.sizeMb, 64);
  assert.deepEqual(volume.mountedBy, []);
  assert.ok((await bulkhead.volumes.list()).some((v) => v.name === name));
  await rejectsWith(bulkhead.volumes.create(name), ConflictError, "volume_exists");

  const writer = await bulkhead.sandboxes.create({ volumes: [{ name, path: "/data" }] });
  const reader = await bulkhead.sandboxes.create({ volumes: [{ name, path: "/data", readOnly: true }] });
  try {
    assert.deepEqual(writer.info.volumes, [{ name, path: "/data", readOnly: false }]);
    await writer.files.write("/data/shared.txt", "from the writer");
    assert.equal(await reader.files.readText("/data/shared.txt"), "from the writer");
    const refused = await reader.exec("echo x > /data/other.txt");
    assert.notEqual(refused.exitCode, 0);
    assert.match(refused.stderr, /Read-only/i);
    await rejectsWith(reader.files.write("/data/other.txt", "x"), ForbiddenError, "read_only");
    const used = await bulkhead.volumes.get(name);
    assert.deepEqual([...used.mountedBy].sort(), [writer.id, reader.id].sort());
    assert.ok(used.usedBytes >= 0);
    await rejectsWith(bulkhead.volumes.delete(name), ConflictError, "volume_in_use");
  } finally {
    await writer.delete();
    await reader.delete();
  }
  await bulkhead.volumes.delete(name);
  await rejectsWith(bulkhead.volumes.get(name), NotFoundError, "volume_not_found");
  await rejectsWith(bulkhead.volumes.delete(name), NotFoundError, "volume_not_found");
});

test("volume errors: bad names and sizes, unknown volumes in create", async () => {
  await rejectsWith(bulkhead.volumes.create("Bad Name"), InvalidRequestError);
  await rejectsWith(bulkhead.volumes.create(uniqueName("sdkvol"), { sizeMb: 0 }), InvalidRequestError);
  await rejectsWith(
    bulkhead.sandboxes.create({ volumes: [{ name: uniqueName("nosuchvol"), path: "/data" }] }),
    NotFoundError,
    "volume_not_found",
  );
});

test("images: the host image is listed; a tarball imports, runs, and is deleted", async () => {
  const images = await bulkhead.images.list();
  const host = images.find((i) => i.name === "host");
  assert.ok(host, JSON.stringify(images));
  assert.equal(host.source, "host");

  const work = await mkdtemp(join(tmpdir(), "bhsdk-image-"));
  const name = uniqueName("sdkimg");
  try {
    // A rootfs with one static program and a minimal /etc.
    const rootfs = join(work, "rootfs");
    await mkdir(join(rootfs, "etc"), { recursive: true });
    await writeFile(join(work, "hello.c"), '#include <stdio.h>\nint main(void) { puts("hello from an sdk image"); return 0; }\n');
    execFileSync("cc", ["-O2", "-static", "-o", join(rootfs, "hello"), join(work, "hello.c")]);
    await chmod(join(rootfs, "hello"), 0o755);
    await writeFile(join(rootfs, "etc", "passwd"), "root:x:0:0:root:/root:/hello\n");
    await writeFile(join(rootfs, "etc", "group"), "root:x:0:\n");
    const tarball = join(work, "rootfs.tar.gz");
    execFileSync("tar", ["-C", rootfs, "-czf", tarball, "."]);

    const image = await bulkhead.images.importFile(name, tarball);
    assert.equal(image.name, name);
    assert.equal(image.source, "tarball");
    assert.ok(image.sizeBytes > 0);
    assert.ok((await bulkhead.images.list()).some((i) => i.name === name));
    await rejectsWith(bulkhead.images.import(name, execFileSync("tar", ["-C", rootfs, "-cf", "-", "."])), ConflictError);

    const sandbox = await bulkhead.sandboxes.create({ image: name });
    try {
      assert.equal(sandbox.info.image, name);
      assert.equal((await sandbox.exec(["/hello"])).stdout, "hello from an sdk image\n");
      assert.equal((await sandbox.exec(["/bin/sh", "-c", "true"])).exitCode, 127, "only the image's files are there");
      assert.equal(await sandbox.files.readText("/etc/group"), "root:x:0:\n");
      await rejectsWith(bulkhead.images.delete(name), ConflictError);
    } finally {
      await sandbox.delete();
    }
    await bulkhead.images.delete(name);
    assert.ok(!(await bulkhead.images.list()).some((i) => i.name === name));
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  await rejectsWith(bulkhead.images.delete(name), NotFoundError, "image_not_found");
  await rejectsWith(bulkhead.images.delete("host"), ConflictError);
  await rejectsWith(bulkhead.images.import("Bad Name", Buffer.from("x")), InvalidRequestError);
  await rejectsWith(bulkhead.images.import(uniqueName("sdkimg"), Buffer.from("not an archive")), InvalidRequestError);
});
