// Network policy and the egress log (a denied DNS name: the daemon's resolver inside the
// sandbox answers it, nothing leaves the machine), and ports: requests through the API, the
// port URL, the preview host name, and raw TCP port-forward — all to the sandbox's loopback.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";
import { ApiError, InvalidRequestError, NotFoundError, ServerError, type Sandbox } from "@bulkhead/sdk";
import { client, rejectsWith, within } from "./helpers.js";

const bulkhead = client();
let sandbox: Sandbox;
before(async () => {
  sandbox = await bulkhead.sandboxes.create({ metadata: { suite: "sdk-network" } });
});
after(async () => {
  await sandbox.delete();
  bulkhead.close();
});

test("setNetwork changes the policy; bad policies are refused", async () => {
  await sandbox.setNetwork("allowlist", ["allowed.invalid", "*.example.invalid:443"]);
  assert.deepEqual(sandbox.info.network, { mode: "allowlist", allow: ["allowed.invalid", "*.example.invalid:443"] });
  assert.deepEqual((await bulkhead.sandboxes.get(sandbox.id)).info.network.allow, ["allowed.invalid", "*.example.invalid:443"]);
  // @ts-expect-error: not a mode
  await rejectsWith(sandbox.setNetwork("everything"), InvalidRequestError);
  await rejectsWith(sandbox.setNetwork("none", ["allowed.invalid"]), InvalidRequestError);
  await rejectsWith(sandbox.setNetwork("allowlist", ["not a host!"]), InvalidRequestError);
  await sandbox.setNetwork("none");
  assert.deepEqual(sandbox.info.network, { mode: "none", allow: [] });
});

test("the egress log records a denied lookup", async () => {
  await sandbox.setNetwork("allowlist", ["allowed.invalid"]);
  try {
    assert.deepEqual(await sandbox.egressLog(), []);
    const lookup = await sandbox.exec("getent hosts denied.invalid");
    assert.notEqual(lookup.exitCode, 0);
    const entries = await sandbox.egressLog();
    const denied = entries.filter((e) => e.name === "denied.invalid");
    assert.ok(denied.length >= 1, JSON.stringify(entries));
    for (const entry of denied) {
      assert.equal(entry.protocol, "dns");
      assert.equal(entry.verdict, "denied");
      assert.equal(entry.address, null);
      assert.match(entry.reason ?? "", /allowlist/);
      assert.ok(Date.parse(entry.time) > 0);
    }
    assert.equal((await sandbox.egressLog({ limit: 1 })).length, 1);
    await rejectsWith(sandbox.egressLog({ limit: 0 }), InvalidRequestError);
  } finally {
    await sandbox.setNetwork("none");
  }
});

test("ports: requests through the API, the port URL, the preview host and raw TCP", async () => {
  await sandbox.files.write("/workspace/site/index.html", "<h1>served</h1>");
  const server = await sandbox.processes.start(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], {
    cwd: "/workspace/site",
  });
  try {
    // Until the server listens, the proxy says port_not_listening.
    await within(
      (async () => {
        for (;;) {
          try {
            return await sandbox.request(8000, { path: "/" });
          } catch (error) {
            if (!(error instanceof ServerError && error.code === "port_not_listening")) throw error;
            await new Promise((resolve) => setTimeout(resolve, 100));
          }
        }
      })(),
      60_000,
      "the sandbox's web server",
    );

    const page = await sandbox.request(8000, { path: "/index.html" });
    assert.equal(page.status, 200);
    assert.equal(page.text(), "<h1>served</h1>");
    assert.match(String(page.headers["content-type"]), /text\/html/);
    // The app's own errors come back as answers, not exceptions.
    const missing = await sandbox.request(8000, { path: "/missing?x=1" });
    assert.equal(missing.status, 404);
    const post = await sandbox.request(8000, { method: "POST", path: "/", body: "data" });
    assert.equal(post.status, 501);

    // The port URL works with the key in a header.
    const url = sandbox.portUrl(8000, "/index.html");
    assert.equal(url, `${process.env.BULKHEAD_URL}/v1/sandboxes/${sandbox.id}/ports/8000/index.html`);
    const fetched = await fetch(url, { headers: { authorization: `Bearer ${process.env.BULKHEAD_API_KEY}` } });
    assert.equal(fetched.status, 200);
    assert.equal(await fetched.text(), "<h1>served</h1>");

    // The preview host name reaches the same server when sent to the daemon's address.
    const preview = new URL(sandbox.previewUrl(8000, "/index.html"));
    assert.equal(preview.host, `8000-${sandbox.id}.localhost:7420`);
    const daemon = new URL(process.env.BULKHEAD_URL!);
    const viaHost = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const request = http.request(
        { hostname: daemon.hostname, port: daemon.port, path: preview.pathname, headers: { host: preview.host } },
        (response) => {
          let body = "";
          response.on("data", (chunk: Buffer) => (body += chunk.toString()));
          response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
        },
      );
      request.on("error", reject);
      request.end();
    });
    assert.deepEqual(viaHost, { status: 200, body: "<h1>served</h1>" });

    // Raw TCP: speak HTTP/1.0 by hand over the forwarded connection.
    const socket = await sandbox.connectPort(8000);
    socket.end("GET /index.html HTTP/1.0\r\nHost: raw\r\n\r\n");
    let raw = "";
    for await (const chunk of socket) raw += (chunk as Buffer).toString();
    assert.match(raw, /^HTTP\/1\.0 200/);
    assert.ok(raw.endsWith("<h1>served</h1>"), raw);
  } finally {
    await server.kill();
  }
});

test("port errors: nothing listening, a bad port, an unknown sandbox", async () => {
  await rejectsWith(sandbox.request(9), ServerError, "port_not_listening");
  await rejectsWith(sandbox.connectPort(9), ServerError, "port_not_listening");
  await rejectsWith(sandbox.request(0), InvalidRequestError);
  await rejectsWith(sandbox.request(70000), InvalidRequestError);
  const ghost = await bulkhead.sandboxes.create();
  await ghost.delete();
  await rejectsWith(ghost.request(8000), NotFoundError, "sandbox_not_found");
  await rejectsWith(ghost.connectPort(8000), NotFoundError, "sandbox_not_found");
  const error = await ghost.request(8000).catch((e: unknown) => e);
  assert.ok(error instanceof ApiError && error.status === 404);
});
