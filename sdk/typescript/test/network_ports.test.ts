// Network policy and the egress log (a denied DNS name: the daemon's resolver inside the
// sandbox answers it, nothing leaves the machine), and ports: requests through the API, the
// port URL, the preview host name, and raw TCP port-forward — all to the sandbox's loopback.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";
import { ApiError, InvalidRequestError, NotFoundError, ServerError, type Sandbox } from "@bulkhead/sdk";
import { client, collect, poll, rejectsWith } from "./helpers.js";

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
  assert.deepEqual(sandbox.info.network, { mode: "allowlist", allow: ["allowed.invalid", "*.example.invalid:443"], deny: [] });
  assert.deepEqual((await bulkhead.sandboxes.get(sandbox.id)).info.network.allow, ["allowed.invalid", "*.example.invalid:443"]);
  // @ts-expect-error: not a mode
  await rejectsWith(sandbox.setNetwork("everything"), InvalidRequestError);
  await rejectsWith(sandbox.setNetwork("none", ["allowed.invalid"]), InvalidRequestError);
  await rejectsWith(sandbox.setNetwork("allowlist", ["not a host!"]), InvalidRequestError);
  await sandbox.setNetwork("allowlist", ["*.invalid"], ["denied.invalid", "203.0.113.0/24:53"]);
  assert.deepEqual(sandbox.info.network, { mode: "allowlist", allow: ["*.invalid"], deny: ["denied.invalid", "203.0.113.0/24:53"] });
  await rejectsWith(sandbox.setNetwork("allowlist", [], ["*"]), InvalidRequestError);
  await sandbox.setNetwork("none");
  assert.deepEqual(sandbox.info.network, { mode: "none", allow: [], deny: [] });
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

// GET `url` by its host name from the daemon's address, with `headers`.
function viaPreviewHost(url: string, headers: Record<string, string> = {}) {
  const preview = new URL(url);
  const daemon = new URL(process.env.BULKHEAD_URL!);
  return new Promise<{ status: number; location?: string; body: string }>((resolve, reject) => {
    const request = http.request(
      { hostname: daemon.hostname, port: daemon.port, path: preview.pathname + preview.search, headers: { ...headers, host: preview.host } },
      (response) => {
        let body = "";
        response.on("data", (chunk: Buffer) => (body += chunk.toString()));
        response.on("end", () => resolve({ status: response.statusCode ?? 0, location: response.headers.location, body }));
      },
    );
    request.on("error", reject);
    request.end();
  });
}

test("ports: requests through the API, the port URL, the preview host and raw TCP", async () => {
  await sandbox.files.write("/workspace/site/index.html", "<h1>served</h1>");
  const server = await sandbox.processes.start(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], {
    cwd: "/workspace/site",
  });
  try {
    // Until the server listens, the proxy says port_not_listening.
    await poll(async () => {
      try {
        return await sandbox.request(8000, { path: "/" });
      } catch (error) {
        if (error instanceof ServerError && error.code === "port_not_listening") return undefined;
        throw error;
      }
    }, "the sandbox's web server");

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
    const viaHost = await viaPreviewHost(preview.href);
    assert.deepEqual({ status: viaHost.status, body: viaHost.body }, { status: 200, body: "<h1>served</h1>" });

    // Raw TCP: speak HTTP/1.0 by hand over the forwarded connection.
    const socket = await sandbox.connectTcp(8000);
    socket.end("GET /index.html HTTP/1.0\r\nHost: raw\r\n\r\n");
    let raw = "";
    for await (const chunk of socket) raw += (chunk as Buffer).toString();
    assert.match(raw, /^HTTP\/1\.0 200/);
    assert.ok(raw.endsWith("<h1>served</h1>"), raw);
  } finally {
    await server.kill();
  }
});

test("a private preview needs the token the SDK gives", async () => {
  assert.deepEqual(sandbox.info.preview, { public: true });
  assert.equal(sandbox.previewToken, undefined);
  assert.deepEqual(sandbox.previewHeaders(), {});
  assert.equal(sandbox.previewUrl(8000, "/", "http", { forBrowser: true }), sandbox.previewUrl(8000));
  await using private_ = await bulkhead.sandboxes.create({ privatePreview: true, metadata: { suite: "sdk-network" } });
  const token = private_.previewToken;
  assert.ok(token && private_.info.preview.public === false);
  assert.equal((await bulkhead.sandboxes.get(private_.id)).previewToken, token);
  await private_.files.write("/workspace/site/index.html", "private");
  const server = await private_.processes.start(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], {
    cwd: "/workspace/site",
  });
  try {
    const url = private_.previewUrl(8000, "/index.html");
    await poll(async () => ((await viaPreviewHost(url, private_.previewHeaders())).status === 200 ? true : undefined),
      "the private sandbox's web server");
    assert.deepEqual(await viaPreviewHost(url, private_.previewHeaders()), { status: 200, location: undefined, body: "private" });
    assert.equal((await viaPreviewHost(url)).status, 403);
    const browser = private_.previewUrl(8000, "/index.html", "http", { forBrowser: true });
    assert.equal(browser, `${url}?bulkhead_preview_token=${token}`);
    const redirect = await viaPreviewHost(browser);
    assert.equal(redirect.status, 303);
    assert.equal(redirect.location, "/index.html");
  } finally {
    await server.kill();
  }
});

// A WebSocket echo server on the sandbox's loopback (standard library only): it pings the
// client first and reports the pong, then echoes every message with "echo:" before it.
const WS_ECHO_SERVER = String.raw`
import base64, hashlib, socket, struct
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 8001))
srv.listen()
while True:
    conn, _ = srv.accept()
    f = conn.makefile("rb")
    f.readline()
    headers = {}
    while True:
        line = f.readline().decode()
        if line in ("\r\n", ""):
            break
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    key = headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
    accept = base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()
    conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Accept: " + accept + "\r\n\r\n").encode())
    conn.sendall(bytes([0x89, 2]) + b"hi")
    while True:
        head = f.read(2)
        if len(head) < 2:
            break
        op, n = head[0] & 15, head[1] & 127
        if n == 126:
            n = struct.unpack("!H", f.read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", f.read(8))[0]
        mask = f.read(4) if head[1] & 128 else bytes(4)
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(f.read(n)))
        if op == 8:
            conn.sendall(bytes([0x88, len(data)]) + data)
            break
        reply, op = (b"pong:" + data, 1) if op == 10 else (b"echo:" + data, op)
        conn.sendall(bytes([0x80 | op, len(reply)]) + reply)
    conn.close()
`;

test("websocket() reaches an app's WebSocket through the port proxy", async () => {
  await sandbox.files.write("/workspace/ws_echo.py", WS_ECHO_SERVER);
  const server = await sandbox.processes.start(["python3", "/workspace/ws_echo.py"]);
  try {
    const ws = await poll(async () => {
      try {
        return await sandbox.websocket(8001, "/chat?room=1");
      } catch (error) {
        if (!(error instanceof ServerError && error.code === "port_not_listening")) throw error;
        if ((await server.refresh()).state === "exited") {
          throw new Error(`the WebSocket server died: ${JSON.stringify(await collect(server.output({ follow: false })))}`);
        }
        return undefined;
      }
    }, "the sandbox's WebSocket server");
    // The server pinged first; our client answered with a pong, which it reports.
    assert.deepEqual(await ws.recv(60_000), { type: "text", data: "pong:hi" });
    await ws.sendText("hello");
    assert.deepEqual(await ws.recv(60_000), { type: "text", data: "echo:hello" });
    await ws.sendBinary(new Uint8Array([1, 2, 3]));
    assert.deepEqual(await ws.recv(60_000), { type: "binary", data: Buffer.from([...Buffer.from("echo:"), 1, 2, 3]) });
    await ws.close();
    assert.equal(ws.closeCode, 1000);
  } finally {
    await server.kill().catch(() => undefined);
  }
});

test("port errors: nothing listening, a bad port, an unknown sandbox", async () => {
  await rejectsWith(sandbox.request(9), ServerError, "port_not_listening");
  await rejectsWith(sandbox.connectTcp(9), ServerError, "port_not_listening");
  await rejectsWith(sandbox.request(0), InvalidRequestError);
  await rejectsWith(sandbox.request(70000), InvalidRequestError);
  const ghost = await bulkhead.sandboxes.create();
  await ghost.delete();
  await rejectsWith(ghost.request(8000), NotFoundError, "sandbox_not_found");
  await rejectsWith(ghost.connectTcp(8000), NotFoundError, "sandbox_not_found");
  const error = await ghost.request(8000).catch((e: unknown) => e);
  assert.ok(error instanceof ApiError && error.status === 404);
});
