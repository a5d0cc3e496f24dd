// Sandboxes: the collection (create, get, list, connect) and one sandbox's handle with its
// lifecycle, commands, processes, files, snapshots, forks, network and ports.
import type { IncomingHttpHeaders } from "node:http";
import type { Duplex } from "node:stream";
import type { Bulkhead } from "./client.js";
import { BulkheadError, NotFoundError, apiErrorFrom } from "./errors.js";
import { execEvents, runCommand, type CommandResult, type ExecOptions } from "./exec.js";
import { Files } from "./files.js";
import { Processes } from "./processes.js";
import type { Snapshot } from "./snapshots.js";
import { pathOf, type BodyInput } from "./transport.js";
import { openWebSocket, type WebSocket } from "./websocket.js";
import {
  egressFromWire,
  sandboxCreateToWire,
  sandboxFromWire,
  type EgressEntry,
  type ExecEvent,
  type NetworkMode,
  type NetworkPolicy,
  type SandboxCreateOptions,
  type SandboxInfo,
  type SandboxState,
  type Usage,
} from "./types.js";

/* eslint-disable @typescript-eslint/no-explicit-any */

export class Sandboxes {
  constructor(private readonly client: Bulkhead) {}

  /** Creates a sandbox (running when this resolves). Every option is optional. */
  async create(options: SandboxCreateOptions = {}): Promise<Sandbox> {
    const w = await this.client.transport.json<any>({
      method: "POST",
      path: pathOf("v1", "sandboxes"),
      json: sandboxCreateToWire(options),
    });
    return new Sandbox(this.client, sandboxFromWire(w));
  }

  /** A sandbox by id, with its resource usage. */
  async get(id: string): Promise<Sandbox> {
    const w = await this.client.transport.json<any>({ method: "GET", path: pathOf("v1", "sandboxes", id) });
    return new Sandbox(this.client, sandboxFromWire(w));
  }

  /** Sandboxes, optionally only those in `state` and whose metadata has all these entries. */
  async list(filter: { state?: SandboxState; metadata?: Record<string, string> } = {}): Promise<Sandbox[]> {
    const query: [string, string][] = [];
    if (filter.state) query.push(["state", filter.state]);
    for (const [key, value] of Object.entries(filter.metadata ?? {})) query.push([`metadata.${key}`, value]);
    const w = await this.client.transport.json<any>({ method: "GET", path: pathOf("v1", "sandboxes"), query });
    return (w.sandboxes as any[]).map((s) => new Sandbox(this.client, sandboxFromWire(s)));
  }

  /** An existing sandbox, ready for work: a paused one is resumed. */
  async connect(id: string): Promise<Sandbox> {
    const sandbox = await this.get(id);
    if (sandbox.state === "paused") await sandbox.resume();
    return sandbox;
  }
}

/** The answer of an HTTP request to a sandbox's port (body read whole). */
export interface PortResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  text(): string;
  json<T = unknown>(): T;
}

export interface PortRequestOptions {
  method?: string;
  /** The app's path with its query string, e.g. "/api/items?limit=5" (default "/"). */
  path?: string;
  headers?: Record<string, string>;
  body?: BodyInput;
}

export class Sandbox implements AsyncDisposable {
  readonly id: string;
  /** What the daemon last said about the sandbox; refresh() re-reads it. */
  info: SandboxInfo;
  /** Background processes. */
  readonly processes: Processes;
  /** Files inside the sandbox. */
  readonly files: Files;

  constructor(
    private readonly client: Bulkhead,
    info: SandboxInfo,
  ) {
    this.id = info.id;
    this.info = info;
    this.processes = new Processes(client.transport, info.id);
    this.files = new Files(client.transport, info.id);
  }

  get state(): SandboxState {
    return this.info.state;
  }

  get image(): string {
    return this.info.image;
  }

  get metadata(): Record<string, string> {
    return this.info.metadata;
  }

  get network(): NetworkPolicy {
    return this.info.network;
  }

  /** Resource usage as of the last get() or refresh(). */
  get usage(): Usage | undefined {
    return this.info.usage;
  }

  private path(...rest: string[]): string {
    return pathOf("v1", "sandboxes", this.id, ...rest);
  }

  private async update(method: string, route: string, json?: unknown): Promise<this> {
    const w = await this.client.transport.json<any>({ method, path: this.path(route), json });
    // Keep the usage of the last full read: these answers do not carry it.
    this.info = { ...sandboxFromWire(w), ...(this.info.usage && !w.usage ? { usage: this.info.usage } : {}) };
    return this;
  }

  /** Re-reads the sandbox (with usage). */
  async refresh(): Promise<this> {
    this.info = sandboxFromWire(await this.client.transport.json<any>({ method: "GET", path: this.path() }));
    return this;
  }

  /** Deletes the sandbox: everything in it ends and its resources are freed. */
  async delete(): Promise<void> {
    await this.client.transport.empty({ method: "DELETE", path: this.path() });
  }

  /** `await using sandbox = await client.sandboxes.create()` deletes it at the end of the block. */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.delete();
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
    }
  }

  /** Resets the lifetime: `timeoutS` seconds from now (0 = none). */
  setTimeout(timeoutS: number): Promise<this> {
    return this.update("POST", "timeout", { timeout_s: timeoutS });
  }

  /** Freezes it: memory and processes kept, no CPU used. */
  /**
   * Freezes every process (memory kept, no CPU used). With `toDisk: true` (gvisor, microvm) the memory and
   * processes are written to disk and end: no RAM held, and the next call restores them.
   */
  pause(options: { toDisk?: boolean } = {}): Promise<this> {
    return this.update("POST", "pause", options.toDisk ? { to_disk: true } : undefined);
  }

  resume(): Promise<this> {
    return this.update("POST", "resume");
  }

  /** Ends its processes, keeping its files (state stopped). */
  stop(): Promise<this> {
    return this.update("POST", "stop");
  }

  /** Starts a stopped sandbox again. */
  start(): Promise<this> {
    return this.update("POST", "start");
  }

  /**
   * Runs a command to its end: argv, or a string run by /bin/sh -c. With onStdout/onStderr
   * the output streams to them as it is produced.
   */
  exec(cmd: string | string[], options: ExecOptions = {}): Promise<CommandResult> {
    return runCommand(this.client.transport, this.id, cmd, options);
  }

  /** Runs a command and yields its events as they happen: start, stdout/stderr, exit. */
  execStream(cmd: string | string[], options: Omit<ExecOptions, "onStdout" | "onStderr"> = {}): AsyncGenerator<ExecEvent, void, undefined> {
    return execEvents(this.client.transport, this.id, cmd, options);
  }

  /**
   * Snapshots the sandbox's files; with `memory: true` its memory and running processes too
   * (gvisor sandboxes), which a sandbox created from it resumes.
   */
  async snapshot(name?: string, options: { memory?: boolean } = {}): Promise<Snapshot> {
    const body: Record<string, unknown> = name === undefined ? {} : { name };
    if (options.memory) body.memory = true;
    const w = await this.client.transport.json<any>({ method: "POST", path: this.path("snapshots"), json: body });
    return this.client.snapshots.wrap(w);
  }

  /**
   * Copy-on-write copies of the sandbox as it is now (1 to 16), running the same image and
   * settings; with `memory: true` each goes on running this one's processes (gvisor and microvm sandboxes).
   */
  async fork(count = 1, options: { memory?: boolean } = {}): Promise<Sandbox[]> {
    const body: Record<string, unknown> = { count };
    if (options.memory) body.memory = true;
    const w = await this.client.transport.json<any>({ method: "POST", path: this.path("fork"), json: body });
    return (w.sandboxes as any[]).map((s) => new Sandbox(this.client, sandboxFromWire(s)));
  }

  /** Changes egress while running: none, allowlist (with `allow`), or open; `deny` wins over both. */
  setNetwork(mode: NetworkMode, allow: string[] = [], deny: string[] = []): Promise<this> {
    return this.update("PUT", "network", { mode, allow, deny });
  }

  /** The egress log: connections and DNS lookups, allowed or denied (latest `limit`, default 1000). */
  async egressLog(options: { limit?: number } = {}): Promise<EgressEntry[]> {
    const w = await this.client.transport.json<any>({ method: "GET", path: this.path("egress"), query: { limit: options.limit } });
    return (w.entries as any[]).map(egressFromWire);
  }

  /**
   * The URL that reaches `port` of the sandbox through the daemon's TCP address (needs the
   * API key, sent as Authorization: Bearer). Only known when the client talks TCP.
   */
  portUrl(port: number, path = "/"): string {
    const endpoint = this.client.transport.endpoint;
    if (endpoint.kind === "unix") {
      throw new BulkheadError(
        "the client talks to the daemon over a unix socket, so its TCP address is unknown: use new Bulkhead({ url: \"http://HOST:PORT\" })",
      );
    }
    return `${this.client.url}${this.path("ports", String(port))}${slash(path)}`;
  }

  /** The token its preview host names need; undefined while the preview is public. */
  get previewToken(): string | undefined {
    return this.info.preview.public ? undefined : this.info.preview.token;
  }

  /**
   * The host-name form {scheme}://{port}-{id}.{previewDomain}/..., which needs no API key
   * (the preview domain of new Bulkhead({ previewDomain }), BULKHEAD_PREVIEW_DOMAIN, or the
   * daemon's default localhost:7420). A private preview also needs previewHeaders() with each
   * request; or, with `forBrowser`, the URL carries the token as ?bulkhead_preview_token=,
   * which the daemon trades for a cookie of that host name (a redirect to the URL without it).
   */
  previewUrl(port: number, path = "/", scheme = "http", options: { forBrowser?: boolean } = {}): string {
    const url = `${scheme}://${port}-${this.id}.${this.client.previewDomain}${slash(path)}`;
    const token = this.previewToken;
    if (!options.forBrowser || !token) return url;
    return `${url}${url.includes("?") ? "&" : "?"}bulkhead_preview_token=${encodeURIComponent(token)}`;
  }

  /** The headers a request to previewUrl() needs: the token of a private preview, none for a public one. */
  previewHeaders(): Record<string, string> {
    const token = this.previewToken;
    return token ? { "Bulkhead-Preview-Token": token } : {};
  }

  /**
   * An HTTP request to an app on `port` in the sandbox, through the daemon's port proxy
   * (works over the unix socket too). The app's answer, whatever its status, comes back
   * whole; the proxy's own errors (no sandbox, nothing listening: 502, ...) are thrown.
   */
  async request(port: number, options: PortRequestOptions = {}): Promise<PortResponse> {
    const response = await this.client.transport.send({
      method: options.method ?? "GET",
      path: this.path("ports", String(port)) + slash(options.path ?? "/"),
      headers: options.headers,
      body: options.body,
      anyStatus: true,
    });
    const status = response.statusCode ?? 0;
    const body = await this.client.transport.readBody(response);
    // The daemon's own errors carry its Server header and the API's error shape; an app's
    // 4xx/5xx are answers.
    if (status >= 400 && String(response.headers.server ?? "").startsWith("bulkhead/")) {
      const error = apiErrorFrom(status, body);
      if (!error.code.startsWith("http_")) throw error;
    }
    return portResponse(status, response.headers, body);
  }

  /**
   * A raw TCP connection to 127.0.0.1:{port} in the sandbox, relayed by the daemon (what
   * `bulkhead port-forward` uses), as a Node Duplex socket. End or destroy it when done.
   */
  async connectTcp(port: number): Promise<Duplex> {
    const { socket, head } = await this.client.transport.upgrade({ method: "GET", path: this.path("tcp", String(port)) }, "tcp");
    if (head.length) socket.unshift(head);
    return socket;
  }

  /** A WebSocket to an app on `port` in the sandbox, through the port proxy. */
  websocket(port: number, path = "/"): Promise<WebSocket> {
    return openWebSocket(this.client.transport, { method: "GET", path: this.path("ports", String(port)) + slash(path) });
  }
}

function slash(path: string): string {
  return path.startsWith("/") ? path : `/${path}`;
}

function portResponse(status: number, headers: IncomingHttpHeaders, body: Buffer): PortResponse {
  return {
    status,
    headers,
    body,
    text: () => body.toString("utf8"),
    json: <T>() => JSON.parse(body.toString("utf8")) as T,
  };
}

