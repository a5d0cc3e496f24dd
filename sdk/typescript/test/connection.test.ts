// Finding the daemon and the key (arguments, env, the state dir's socket and key file), the
// service routes, and the errors of a missing key, a wrong key and an unreachable daemon.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import {
  AuthenticationError,
  Bulkhead,
  BulkheadConnectionError,
  BulkheadError,
  NotFoundError,
  ServerError,
} from "@bulkhead/sdk";
import { client, rejectsWith } from "./helpers.js";

const bulkhead = client();
after(() => bulkhead.close());

/** Runs `body` with these environment variables (undefined removes one), then restores them. */
async function withEnv<T>(vars: Record<string, string | undefined>, body: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((key) => [key, process.env[key]]));
  for (const [key, value] of Object.entries(vars)) {
    if (value === undefined) delete process.env[key];
    else process.env[key] = value;
  }
  try {
    return await body();
  } finally {
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  }
}

test("url, state dir and preview domain options", async () => {
  assert.equal(bulkhead.url, process.env.BULKHEAD_URL);
  await withEnv({ BULKHEAD_URL: undefined, BULKHEAD_STATE: "/from/env", BULKHEAD_PREVIEW_DOMAIN: undefined }, async () => {
    assert.equal(new Bulkhead({ apiKey: "k" }).url, "unix:///from/env/bulkhead.sock");
    const explicit = new Bulkhead({ stateDir: "/srv/bh", apiKey: "k" });
    assert.equal(explicit.url, "unix:///srv/bh/bulkhead.sock");
    assert.equal(explicit.previewDomain, "localhost:7420");
  });
  await withEnv({ BULKHEAD_PREVIEW_DOMAIN: "env.example" }, async () => {
    assert.equal(new Bulkhead({ apiKey: "k" }).previewDomain, "env.example");
    assert.equal(new Bulkhead({ apiKey: "k", previewDomain: "option.example" }).previewDomain, "option.example");
  });
  assert.equal(new Bulkhead({ url: "unix:///run/x.sock", apiKey: "k" }).url, "unix:///run/x.sock");
  assert.equal(new Bulkhead({ url: "/run/x.sock", apiKey: "k" }).url, "unix:///run/x.sock");
  assert.equal(new Bulkhead({ url: "http://[::1]:7420", apiKey: "k" }).url, "http://[::1]:7420");
});

test("`using` closes a client", async () => {
  let health;
  {
    using scoped = new Bulkhead();
    health = await scoped.health();
  }
  assert.equal(health.status, "ok");
});

test("health needs no key and names the version", async () => {
  const noKey = new Bulkhead({ url: process.env.BULKHEAD_URL, apiKey: "not-the-key" });
  const health = await noKey.health();
  assert.equal(health.status, "ok");
  assert.match(health.version, /^\d+\.\d+\.\d+/);
  noKey.close();
});

test("metrics and the OpenAPI document", async () => {
  const metrics = await bulkhead.metrics();
  assert.match(metrics, /^# (HELP|TYPE) bulkhead_/m);
  const openapi = await bulkhead.openapi();
  assert.equal(openapi.openapi, "3.1.0");
  assert.ok("/v1/sandboxes" in (openapi.paths as object));
});

test("a wrong key is an AuthenticationError with code unauthorized", async () => {
  const wrong = new Bulkhead({ url: process.env.BULKHEAD_URL, apiKey: "wrong-key" });
  await rejectsWith(wrong.sandboxes.list(), AuthenticationError, "unauthorized");
  wrong.close();
});

test("the default is the unix socket and key file of BULKHEAD_STATE", async (t) => {
  const state = process.env.BULKHEAD_STATE;
  if (!state) {
    t.skip("BULKHEAD_STATE is not set");
    return;
  }
  await withEnv({ BULKHEAD_URL: undefined, BULKHEAD_API_KEY: undefined }, async () => {
    const local = new Bulkhead();
    assert.equal(local.url, `unix://${state}/bulkhead.sock`);
    const sandbox = await local.sandboxes.create({ metadata: { via: "unix-socket" } });
    try {
      const result = await sandbox.exec(["echo", "over the socket"]);
      assert.equal(result.stdout, "over the socket\n");
      // The same sandbox is visible over TCP: one daemon behind both.
      assert.equal((await bulkhead.sandboxes.get(sandbox.id)).metadata.via, "unix-socket");
      // Streams and upgrades over the socket too: a streamed exec and an attach.
      const events = [];
      for await (const event of sandbox.execStream("echo streamed")) events.push(event.type);
      assert.deepEqual(events, ["start", "stdout", "exit"]);
      const cat = await sandbox.processes.start(["cat"]);
      const session = await cat.attach();
      await session.send("attached over the socket\n");
      await session.readUntil("attached over the socket\n", { timeoutMs: 60_000 });
      await session.closeStdin();
      assert.equal((await session.wait({ timeoutMs: 60_000 }))?.exitCode, 0);
      // The TCP address is unknown over a socket: no port URL, but requests go through.
      assert.throws(() => sandbox.portUrl(8000), BulkheadError);
      await rejectsWith(sandbox.request(9), ServerError, "port_not_listening");
    } finally {
      await sandbox.delete();
    }
    local.close();
  });
  // The explicit forms of the same socket.
  for (const url of [`unix://${state}/bulkhead.sock`, `${state}/bulkhead.sock`]) {
    const viaUrl = new Bulkhead({ url, apiKey: process.env.BULKHEAD_API_KEY });
    assert.ok(Array.isArray(await viaUrl.sandboxes.list()), url);
    viaUrl.close();
  }
});

test("no key anywhere is a clear error at the first call, not at construction", async () => {
  const empty = await mkdtemp(join(tmpdir(), "bhsdk-"));
  try {
    await withEnv({ BULKHEAD_API_KEY: undefined, BULKHEAD_STATE: empty }, async () => {
      const keyless = new Bulkhead({ url: process.env.BULKHEAD_URL });
      await assert.rejects(keyless.sandboxes.list(), (error: unknown) => {
        assert.ok(error instanceof BulkheadError);
        assert.match((error as Error).message, /no bulkhead API key/);
        assert.ok((error as Error).message.includes(`${empty}/api-key`));
        return true;
      });
      // /healthz still works without one.
      assert.equal((await keyless.health()).status, "ok");
      keyless.close();
    });
  } finally {
    await rm(empty, { recursive: true });
  }
});

test("an unreachable daemon is a BulkheadConnectionError", async () => {
  const dir = await mkdtemp(join(tmpdir(), "bhsdk-"));
  try {
    const nowhere = new Bulkhead({ url: `unix://${dir}/no.sock`, apiKey: "k" });
    await rejectsWith(nowhere.health(), BulkheadConnectionError);
    nowhere.close();
  } finally {
    await rm(dir, { recursive: true });
  }
});

test("bad URLs are refused at construction", () => {
  for (const url of ["ftp://host", "unix://relative.sock", "http://host:1/prefix", "not a url"]) {
    assert.throws(() => new Bulkhead({ url, apiKey: "k" }), BulkheadError, url);
  }
});

test("unknown routes' errors carry the API code", async () => {
  await rejectsWith(bulkhead.transport.json({ method: "GET", path: "/v1/nothing-here" }), NotFoundError, "not_found");
});
