// The entry point: new Bulkhead() finds the daemon and the key the way the CLI does, and
// holds the collections (sandboxes, snapshots, volumes, images).
import { ApiKeySource, resolveEndpoint } from "./config.js";
import { Images } from "./images.js";
import { Sandboxes } from "./sandbox.js";
import { Snapshots } from "./snapshots.js";
import { Transport, pathOf } from "./transport.js";
import type { Health } from "./types.js";
import { Volumes } from "./volumes.js";

export interface BulkheadOptions {
  /**
   * "http://host:port", "unix:///abs/path.sock" or "/abs/path.sock". Default: env
   * BULKHEAD_URL, else the unix socket $BULKHEAD_STATE/bulkhead.sock (/var/lib/bulkhead).
   */
  url?: string;
  /** Default: env BULKHEAD_API_KEY, else the file <state dir>/api-key (read at the first call). */
  apiKey?: string;
  /** How long to wait for an answer once a request is sent (ms; 0 = no limit). Default 120000. */
  timeoutMs?: number;
  /** The daemon's --preview-domain, for previewUrl() (default "localhost:7420"). */
  previewDomain?: string;
}

export class Bulkhead {
  readonly sandboxes: Sandboxes;
  readonly snapshots: Snapshots;
  readonly volumes: Volumes;
  readonly images: Images;
  readonly previewDomain: string;
  /** @internal The HTTP layer the collections share. */
  readonly transport: Transport;

  constructor(options: BulkheadOptions = {}) {
    this.transport = new Transport(resolveEndpoint(options.url), new ApiKeySource(options.apiKey), options.timeoutMs ?? 120_000);
    this.previewDomain = options.previewDomain ?? "localhost:7420";
    this.sandboxes = new Sandboxes(this);
    this.snapshots = new Snapshots(this.transport);
    this.volumes = new Volumes(this.transport);
    this.images = new Images(this.transport);
  }

  /** The daemon's base URL over TCP (for port URLs); over a unix socket BULKHEAD_LISTEN or 127.0.0.1:7420. */
  get httpBaseUrl(): string {
    const endpoint = this.transport.endpoint;
    if (endpoint.kind === "tcp") return `${endpoint.protocol}//${endpoint.host}`;
    return `http://${process.env.BULKHEAD_LISTEN || "127.0.0.1:7420"}`;
  }

  /** GET /healthz (needs no key). */
  health(): Promise<Health> {
    return this.transport.json<Health>({ method: "GET", path: "/healthz", auth: false });
  }

  /** The Prometheus metrics text. */
  async metrics(): Promise<string> {
    const response = await this.transport.send({ method: "GET", path: pathOf("metrics") });
    return (await this.transport.readBody(response)).toString("utf8");
  }

  /** The OpenAPI 3.1 document of the API. */
  openapi(): Promise<Record<string, unknown>> {
    return this.transport.json({ method: "GET", path: pathOf("openapi.json") });
  }

  /** Closes idle keep-alive connections so the process can exit at once (open streams are unaffected). */
  close(): void {
    this.transport.close();
  }
}
