// HTTP to the daemon over node:http (a unix socket or TCP), with keep-alive connections,
// streamed request bodies (with backpressure), and the API's errors turned into ApiError.
import http from "node:http";
import https from "node:https";
import type { Duplex } from "node:stream";
import { ApiKeySource, endpointUrl, type Endpoint } from "./config.js";
import { BulkheadConnectionError, BulkheadError, BulkheadTimeoutError, apiErrorFrom } from "./errors.js";

/**
 * A request body: bytes or text (sent with a length), or anything that yields chunks —
 * a Node stream, an async or sync iterable of Uint8Array/string, a web ReadableStream or a
 * Blob (sent chunked, never held whole).
 */
export type BodyInput =
  | string
  | Uint8Array
  | ArrayBuffer
  | Blob
  | NodeJS.ReadableStream
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array | string>
  | Iterable<Uint8Array | string>;

export type QueryValue = string | number | boolean | undefined | null;

export interface RequestSpec {
  method: string;
  /** The path, its segments already percent-encoded (see `pathOf`). */
  path: string;
  query?: Record<string, QueryValue> | [string, QueryValue][];
  /** A JSON body (sent as application/json). */
  json?: unknown;
  /** A raw body. */
  body?: BodyInput;
  contentType?: string;
  accept?: string;
  headers?: Record<string, string>;
  /** Send the API key (all but /healthz). */
  auth?: boolean;
  /** How long to wait for the answer's head once the body is sent; 0 = no limit. */
  timeoutMs?: number;
  /** Resolve with the response whatever its status (the caller tells errors apart). */
  anyStatus?: boolean;
}

/** "/v1/sandboxes/ID/files": joins segments, percent-encoding each one. */
export function pathOf(...segments: (string | number)[]): string {
  return "/" + segments.map((s) => encodeURIComponent(String(s))).join("/");
}

function queryString(query: RequestSpec["query"]): string {
  if (!query) return "";
  const entries = Array.isArray(query) ? query : Object.entries(query);
  const params = new URLSearchParams();
  for (const [key, value] of entries) {
    if (value === undefined || value === null) continue;
    params.append(key, String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof value === "object" && value !== null && Symbol.asyncIterator in value;
}

function isIterable(value: unknown): value is Iterable<unknown> {
  return typeof value === "object" && value !== null && Symbol.iterator in value;
}

/** A body we can hold as one buffer (and so send with a length, and resend). */
function fixedBody(body: BodyInput | undefined): Buffer | undefined {
  if (body === undefined) return undefined;
  if (typeof body === "string") return Buffer.from(body, "utf8");
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (body instanceof ArrayBuffer) return Buffer.from(body);
  return undefined;
}

/** The chunks of a streamed body. */
function chunksOf(body: BodyInput): AsyncIterable<Uint8Array | string> | Iterable<Uint8Array | string> {
  if (typeof Blob !== "undefined" && body instanceof Blob) {
    return body.stream() as unknown as AsyncIterable<Uint8Array>;
  }
  if (isAsyncIterable(body)) return body as AsyncIterable<Uint8Array | string>;
  if (isIterable(body)) return body as Iterable<Uint8Array | string>;
  throw new BulkheadError("unsupported body: give bytes, a string, a stream, a Blob or an iterable of chunks");
}


/** Reads a whole response body. */
export async function readAll(stream: AsyncIterable<Buffer | Uint8Array | string>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === "string" ? Buffer.from(chunk) : Buffer.from(chunk));
  return Buffer.concat(chunks);
}

/** The objects of an NDJSON stream, one per line, as they arrive. */
export async function* ndjson<T>(stream: AsyncIterable<Buffer>): AsyncGenerator<T, void, undefined> {
  let pending: Buffer = Buffer.alloc(0);
  for await (const chunk of stream) {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    let start = 0;
    for (let newline = pending.indexOf(10, start); newline !== -1; newline = pending.indexOf(10, start)) {
      const line = pending.subarray(start, newline).toString("utf8").trim();
      start = newline + 1;
      if (line) yield JSON.parse(line) as T;
    }
    pending = pending.subarray(start);
  }
  const rest = pending.toString("utf8").trim();
  if (rest) yield JSON.parse(rest) as T;
}

/** The socket of an accepted upgrade (WebSocket, raw TCP), with bytes read past the head. */
export interface Upgraded {
  socket: Duplex;
  head: Buffer;
  response: http.IncomingMessage;
}

export class Transport {
  readonly endpoint: Endpoint;
  readonly timeoutMs: number;
  private readonly keys: ApiKeySource;
  private readonly agent: http.Agent;

  constructor(endpoint: Endpoint, keys: ApiKeySource, timeoutMs: number) {
    this.endpoint = endpoint;
    this.keys = keys;
    this.timeoutMs = timeoutMs;
    const options = { keepAlive: true, maxFreeSockets: 8 };
    this.agent = endpoint.kind === "tcp" && endpoint.protocol === "https:" ? new https.Agent(options) : new http.Agent(options);
  }

  /** Closes idle keep-alive connections (open streams are not affected). */
  close(): void {
    this.agent.destroy();
  }

  private module(): typeof http | typeof https {
    return this.endpoint.kind === "tcp" && this.endpoint.protocol === "https:" ? https : http;
  }

  private baseOptions(): http.RequestOptions {
    if (this.endpoint.kind === "unix") return { socketPath: this.endpoint.socketPath, host: "localhost" };
    return { hostname: this.endpoint.hostname, port: this.endpoint.port };
  }

  private headersFor(spec: RequestSpec, body: Buffer | undefined, streamed: boolean): Record<string, string> {
    const headers: Record<string, string> = { ...(spec.headers ?? {}) };
    if (spec.auth !== false) headers["authorization"] = `Bearer ${this.keys.get()}`;
    if (spec.accept) headers["accept"] = spec.accept;
    if (spec.contentType) headers["content-type"] = spec.contentType;
    if (body !== undefined) headers["content-length"] = String(body.length);
    else if (streamed) headers["transfer-encoding"] = "chunked";
    return headers;
  }

  /**
   * Sends a request and resolves with the response once a 2xx head arrived (the body still
   * to be read). Any other status is read and thrown as an ApiError subclass.
   */
  async send(spec: RequestSpec): Promise<http.IncomingMessage> {
    let fixed: Buffer | undefined;
    let streamed: BodyInput | undefined;
    if (spec.json !== undefined) {
      fixed = Buffer.from(JSON.stringify(spec.json), "utf8");
      spec = { ...spec, contentType: spec.contentType ?? "application/json" };
    } else if (spec.body !== undefined) {
      fixed = fixedBody(spec.body);
      if (fixed === undefined) streamed = spec.body;
    }
    const headers = this.headersFor(spec, fixed, streamed !== undefined);
    try {
      return await this.sendOnce(spec, headers, fixed, streamed);
    } catch (error) {
      // A kept-alive connection the daemon closed just as we reused it: the request never
      // reached it, so send it once more on a fresh connection (bodies we hold only).
      if (error instanceof StaleConnection && streamed === undefined) {
        return await this.sendOnce(spec, headers, fixed, undefined);
      }
      throw error instanceof StaleConnection ? error.wrapped : error;
    }
  }

  private sendOnce(
    spec: RequestSpec,
    headers: Record<string, string>,
    fixed: Buffer | undefined,
    streamed: BodyInput | undefined,
  ): Promise<http.IncomingMessage> {
    const timeoutMs = spec.timeoutMs ?? this.timeoutMs;
    return new Promise((resolve, reject) => {
      const request = this.module().request({
        ...this.baseOptions(),
        agent: this.agent,
        method: spec.method,
        path: spec.path + queryString(spec.query),
        headers,
      });
      const stopBody = new AbortController();
      let settled = false;
      let headTimer: NodeJS.Timeout | undefined;
      const finish = (error: unknown, response?: http.IncomingMessage) => {
        if (settled) return;
        settled = true;
        if (headTimer) clearTimeout(headTimer);
        stopBody.abort();
        if (response) resolve(response);
        else {
          request.destroy();
          reject(error);
        }
      };
      request.on("response", (response) => {
        if (headTimer) clearTimeout(headTimer);
        const status = response.statusCode ?? 0;
        if ((status >= 200 && status < 300) || spec.anyStatus) {
          finish(undefined, response);
          return;
        }
        settled = true; // from here on the outcome is this error
        stopBody.abort();
        readAll(response).then(
          (body) => {
            request.destroy();
            reject(apiErrorFrom(status, body));
          },
          (error) => {
            request.destroy();
            reject(new BulkheadConnectionError(`reading an error answer (HTTP ${status}) failed: ${error}`, { cause: error }));
          },
        );
      });
      request.on("error", (error: NodeJS.ErrnoException) => {
        if (settled) return;
        const message = `cannot talk to bulkhead at ${endpointUrl(this.endpoint)}: ${error.message}`;
        const wrapped = new BulkheadConnectionError(message, { cause: error });
        const stale = request.reusedSocket && (error.code === "ECONNRESET" || error.code === "EPIPE");
        finish(stale ? new StaleConnection(wrapped) : wrapped);
      });
      const startHeadTimer = () => {
        if (settled || !timeoutMs) return;
        headTimer = setTimeout(() => {
          finish(new BulkheadTimeoutError(`no answer from bulkhead within ${timeoutMs} ms (${spec.method} ${spec.path})`));
        }, timeoutMs);
      };
      if (streamed === undefined) {
        request.end(fixed);
        startHeadTimer();
      } else {
        writeStreamed(request, streamed, stopBody.signal).then(startHeadTimer, (error) => {
          finish(error instanceof BulkheadError ? error : new BulkheadError(`reading the request body failed: ${error}`, { cause: error }));
        });
      }
    });
  }

  /** Sends and parses the JSON answer (undefined for 204). */
  async json<T>(spec: RequestSpec): Promise<T> {
    const response = await this.send(spec);
    const body = await this.readBody(response);
    if (response.statusCode === 204 || body.length === 0) return undefined as T;
    try {
      return JSON.parse(body.toString("utf8")) as T;
    } catch (error) {
      throw new BulkheadError(`bulkhead answered ${spec.method} ${spec.path} with invalid JSON`, { cause: error });
    }
  }

  /** Sends and discards the answer's body. */
  async empty(spec: RequestSpec): Promise<void> {
    await this.readBody(await this.send(spec));
  }

  /** Reads a response body; a broken connection becomes a BulkheadConnectionError. */
  async readBody(response: AsyncIterable<Buffer>): Promise<Buffer> {
    try {
      return await readAll(response);
    } catch (error) {
      throw new BulkheadConnectionError(`the answer broke off: ${(error as Error).message}`, { cause: error });
    }
  }

  /**
   * Asks for a protocol switch (`Upgrade: name`); resolves with the raw socket on 101.
   * Refusals are the API's errors.
   */
  upgrade(spec: RequestSpec, protocol: string, extraHeaders: Record<string, string> = {}): Promise<Upgraded> {
    const headers = {
      ...this.headersFor(spec, undefined, false),
      ...extraHeaders,
      connection: "Upgrade",
      upgrade: protocol,
    };
    const timeoutMs = spec.timeoutMs ?? this.timeoutMs;
    return new Promise((resolve, reject) => {
      // agent: false — an upgraded socket leaves HTTP for good, so it is never pooled.
      const request = this.module().request({
        ...this.baseOptions(),
        agent: false,
        method: spec.method,
        path: spec.path + queryString(spec.query),
        headers,
      });
      let settled = false;
      const timer = timeoutMs
        ? setTimeout(() => {
            settled = true;
            request.destroy();
            reject(new BulkheadTimeoutError(`no answer from bulkhead within ${timeoutMs} ms (${spec.path})`));
          }, timeoutMs)
        : undefined;
      request.on("upgrade", (response, socket, head) => {
        if (timer) clearTimeout(timer);
        if (settled) {
          socket.destroy();
          return;
        }
        settled = true;
        resolve({ socket, head, response });
      });
      request.on("response", (response) => {
        if (timer) clearTimeout(timer);
        if (settled) return;
        settled = true;
        const status = response.statusCode ?? 0;
        readAll(response).then(
          (body) => {
            request.destroy();
            reject(status >= 200 && status < 300
              ? new BulkheadError(`bulkhead did not switch to ${protocol} (HTTP ${status})`)
              : apiErrorFrom(status, body));
          },
          (error) => reject(new BulkheadConnectionError(`reading the refusal failed: ${error}`, { cause: error })),
        );
      });
      request.on("error", (error) => {
        if (timer) clearTimeout(timer);
        if (settled) return;
        settled = true;
        reject(new BulkheadConnectionError(`cannot talk to bulkhead at ${endpointUrl(this.endpoint)}: ${error.message}`, { cause: error }));
      });
      request.end();
    });
  }
}

/** Marks a failure on a reused keep-alive connection before any answer (safe to resend). */
class StaleConnection extends Error {
  constructor(readonly wrapped: BulkheadConnectionError) {
    super(wrapped.message);
  }
}

/** Writes a streamed body chunk by chunk, waiting for 'drain' when the socket is full. */
async function writeStreamed(request: http.ClientRequest, body: BodyInput, stop: AbortSignal): Promise<void> {
  for await (const chunk of chunksOf(body)) {
    if (stop.aborted) return; // an answer came early (an error): the rest is not wanted
    const bytes = typeof chunk === "string" ? Buffer.from(chunk, "utf8") : chunk;
    if (bytes.length === 0) continue; // an empty chunk would end a chunked body
    if (!request.write(bytes)) await drained(request, stop);
  }
  if (!stop.aborted) request.end();
}

function drained(request: http.ClientRequest, stop: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      request.off("drain", done);
      request.off("close", done);
      stop.removeEventListener("abort", done);
      resolve();
    };
    request.on("drain", done);
    request.on("close", done);
    stop.addEventListener("abort", done);
  });
}

