// Where the daemon is and which key to use: explicit options, else the environment
// (BULKHEAD_URL, BULKHEAD_API_KEY, BULKHEAD_STATE), else the daemon's defaults — the same
// rules as the bulkhead CLI.
import { readFileSync } from "node:fs";
import { BulkheadError } from "./errors.js";

export const DEFAULT_STATE_DIR = "/var/lib/bulkhead";

/** How to reach the daemon: a TCP base URL or a unix socket. */
export type Endpoint =
  | { kind: "tcp"; protocol: "http:" | "https:"; hostname: string; port: number; host: string }
  | { kind: "unix"; socketPath: string };

/** The daemon's state dir: `explicit`, else BULKHEAD_STATE, else /var/lib/bulkhead. */
export function stateDir(explicit?: string): string {
  return explicit || process.env.BULKHEAD_STATE || DEFAULT_STATE_DIR;
}

/** An endpoint as a URL: "http://host:port" or "unix:///abs/path.sock". */
export function endpointUrl(endpoint: Endpoint): string {
  return endpoint.kind === "unix" ? `unix://${endpoint.socketPath}` : `${endpoint.protocol}//${endpoint.host}`;
}

/** Parses "http://host:port", "https://...", "unix:///abs/path.sock" or "/abs/path.sock". */
export function parseEndpoint(url: string): Endpoint {
  if (url.startsWith("/")) return { kind: "unix", socketPath: url };
  if (url.startsWith("unix://")) {
    const path = decodeURIComponent(url.slice("unix://".length));
    if (!path.startsWith("/")) throw new BulkheadError(`bad bulkhead URL ${JSON.stringify(url)}: unix:// needs an absolute path`);
    return { kind: "unix", socketPath: path };
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new BulkheadError(`bad bulkhead URL ${JSON.stringify(url)}: use http://host:port, unix:///path.sock or /path.sock`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new BulkheadError(`bad bulkhead URL ${JSON.stringify(url)}: the scheme must be http, https or unix`);
  }
  if (parsed.pathname !== "/" && parsed.pathname !== "") {
    throw new BulkheadError(`bad bulkhead URL ${JSON.stringify(url)}: give only the scheme, host and port`);
  }
  const port = parsed.port ? Number(parsed.port) : parsed.protocol === "https:" ? 443 : 80;
  // URL keeps the brackets of an IPv6 literal in hostname; node:http wants them off.
  const hostname = parsed.hostname.replace(/^\[(.*)\]$/, "$1");
  return { kind: "tcp", protocol: parsed.protocol, hostname, port, host: parsed.host };
}

/** The endpoint: `url`, else BULKHEAD_URL, else the unix socket in the state dir. */
export function resolveEndpoint(url: string | undefined, explicitStateDir?: string): Endpoint {
  const chosen = url || process.env.BULKHEAD_URL;
  if (chosen) return parseEndpoint(chosen);
  return { kind: "unix", socketPath: `${stateDir(explicitStateDir)}/bulkhead.sock` };
}

/** A lazily found API key: the option, else BULKHEAD_API_KEY, else <state dir>/api-key. */
export class ApiKeySource {
  private key: string | undefined;

  constructor(
    explicit: string | undefined,
    private readonly explicitStateDir?: string,
  ) {
    this.key = explicit || process.env.BULKHEAD_API_KEY || undefined;
  }

  /** The key; reads the key file at the first call. Throws a clear error when there is none. */
  get(): string {
    if (this.key) return this.key;
    const path = `${stateDir(this.explicitStateDir)}/api-key`;
    let text: string;
    try {
      text = readFileSync(path, "utf8");
    } catch (error) {
      const reason = (error as NodeJS.ErrnoException).code ?? String(error);
      throw new BulkheadError(
        `no bulkhead API key: pass apiKey, set BULKHEAD_API_KEY, or make ${path} readable (${reason})`,
        { cause: error },
      );
    }
    const key = text.trim();
    if (!key) throw new BulkheadError(`no bulkhead API key: ${path} is empty`);
    this.key = key;
    return key;
  }
}
