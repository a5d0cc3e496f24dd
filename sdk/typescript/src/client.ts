// The entry point: new Bulkhead() finds the daemon and the key the way the CLI does, and
// holds the collections (sandboxes, snapshots, volumes, images).
import { ApiKeySource, endpointUrl, resolveEndpoint } from "./config.js";
import { Images } from "./images.js";
import { Sandboxes } from "./sandbox.js";
import { Snapshots } from "./snapshots.js";
import { Transport, pathOf } from "./transport.js";
import type { Health } from "./types.js";
import { Volumes } from "./volumes.js";

export interface BulkheadOptions {
  /**
   * "http://host:port", "unix:///abs/path.sock" or "/abs/path.sock". Default: env
   * BULKHEAD_URL, else the unix socket <state dir>/bulkhead.sock.
   */
  url?: string;
  /** Default: env BULKHEAD_API_KEY, else the file <state dir>/api-key (read at the first call). */
  apiKey?: string;
  /** The daemon's state dir. Default: env BULKHEAD_STATE, else /var/lib/bulkhead. */
  stateDir?: string;
  /**
   * How long a call may wait for the daemon's answer once sent (ms; 0 = no limit; default
   * 120000). exec waits as long as the command's own timeoutS on top; streams that follow
   * (output, watch, downloads) have no limit once they began.
   */
  timeoutMs?: number;
  /** The daemon's --preview-domain, for previewUrl(). Default: env BULKHEAD_PREVIEW_DOMAIN, else localhost:7420. */
  previewDomain?: string;
}

export class Bulkhead implements Disposable {
  readonly sandboxes: Sandboxes;
  readonly snapshots: Snapshots;
  readonly volumes: Volumes;
  readonly images: Images;
  readonly previewDomain: string;
  /** @internal The HTTP layer the collections share. */
  readonly transport: Transport;

  constructor(options: BulkheadOptions = {}) {
    this.transport = new Transport(
      resolveEndpoint(options.url, options.stateDir),
      new ApiKeySource(options.apiKey, options.stateDir),
      options.timeoutMs ?? 120_000,
    );
    this.previewDomain = options.previewDomain || process.env.BULKHEAD_PREVIEW_DOMAIN || "localhost:7420";
    this.sandboxes = new Sandboxes(this);
    this.snapshots = new Snapshots(this.transport);
    this.volumes = new Volumes(this.transport);
    this.images = new Images(this.transport);
  }

  /** The daemon's address as the client resolved it: "http://host:port" or "unix:///path.sock". */
  get url(): string {
    return endpointUrl(this.transport.endpoint);
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

  /** The API description (OpenAPI 3.1) the daemon serves. */
  openapi(): Promise<Record<string, unknown>> {
    return this.transport.json({ method: "GET", path: pathOf("openapi.json") });
  }

  /** Drops idle keep-alive connections so the process can exit at once (open streams go on). */
  close(): void {
    this.transport.close();
  }

  /** `using bulkhead = new Bulkhead()` closes it at the end of the block. */
  [Symbol.dispose](): void {
    this.close();
  }
}
