// Background processes in a sandbox: start, list, output (with offsets, followed), stdin,
// signals, pty resize, and attach over a WebSocket.
import { constants as osConstants } from "node:os";
import { BulkheadConnectionError, BulkheadError, BulkheadTimeoutError, type StreamError } from "./errors.js";
import { streamError, type CommandOptions } from "./exec.js";
import { ndjson, pathOf, type Transport } from "./transport.js";
import {
  chunkFromWire,
  exitFromWire,
  processFromWire,
  withoutUndefined,
  type ExitStatus,
  type ProcessInfo,
  type ProcessOutputEvent,
  type PtySize,
} from "./types.js";
import { openWebSocket, type WebSocket } from "./websocket.js";

export interface ProcessStartOptions extends CommandOptions {
  /** A name usable in place of the pid; unique among the sandbox's running processes. */
  tag?: string;
  /** Run on a new pseudo-terminal of this size (all output is then stdout). */
  pty?: Partial<PtySize>;
  /** Kill the process after this many seconds; 0 (default) = no limit. */
  timeoutS?: number;
}

export interface OutputOptions {
  /** Start both streams at this offset (bytes of that stream since the process started). */
  offset?: number;
  stdoutOffset?: number;
  stderrOffset?: number;
  /** Keep streaming new output until the process exits (default true). */
  follow?: boolean;
}

export type Signal = string | number;

/** Bytes per stdin request (the daemon takes up to 16 MiB decoded). */
const STDIN_PIECE = 8 << 20;
/** Bytes per attach message. */
const ATTACH_PIECE = 1 << 20;

/* eslint-disable @typescript-eslint/no-explicit-any */

export class Processes {
  constructor(
    private readonly transport: Transport,
    private readonly sandboxId: string,
  ) {}

  /** Starts `cmd` (argv, or a string run by /bin/sh -c) in the background. */
  async start(cmd: string | string[], options: ProcessStartOptions = {}): Promise<Process> {
    const w = await this.transport.json<any>({
      method: "POST",
      path: pathOf("v1", "sandboxes", this.sandboxId, "processes"),
      json: withoutUndefined({
        cmd,
        cwd: options.cwd,
        env: options.env,
        user: options.user,
        tag: options.tag,
        pty: options.pty,
        timeout_s: options.timeoutS,
      }),
    });
    return new Process(this.transport, this.sandboxId, processFromWire(w));
  }

  /** The sandbox's process table (running and exited). */
  async list(): Promise<Process[]> {
    const w = await this.transport.json<any>({ method: "GET", path: pathOf("v1", "sandboxes", this.sandboxId, "processes") });
    return (w.processes as any[]).map((p) => new Process(this.transport, this.sandboxId, processFromWire(p)));
  }

  /** A process by pid, or by tag (the running one with that tag, else the one started last). */
  async get(pidOrTag: number | string): Promise<Process> {
    const w = await this.transport.json<any>({
      method: "GET",
      path: pathOf("v1", "sandboxes", this.sandboxId, "processes", pidOrTag),
    });
    return new Process(this.transport, this.sandboxId, processFromWire(w));
  }
}

export class Process {
  /** What the daemon last said about the process; refresh() re-reads it. */
  info: ProcessInfo;

  constructor(
    private readonly transport: Transport,
    readonly sandboxId: string,
    info: ProcessInfo,
  ) {
    this.info = info;
  }

  get pid(): number {
    return this.info.pid;
  }
  get tag(): string | null {
    return this.info.tag;
  }
  get state(): "running" | "exited" {
    return this.info.state;
  }
  get exitCode(): number | null {
    return this.info.exitCode;
  }

  private path(...rest: string[]): string {
    return pathOf("v1", "sandboxes", this.sandboxId, "processes", this.info.pid, ...rest);
  }

  async refresh(): Promise<this> {
    this.info = processFromWire(await this.transport.json<any>({ method: "GET", path: this.path() }));
    return this;
  }

  /**
   * The process's output as events, each stdout/stderr chunk with its `offset` (pass it back
   * to resume), `gap` where the ring lost bytes, and `exit` last. Follows by default; without
   * follow it ends after what the ring holds now.
   */
  async *output(options: OutputOptions = {}): AsyncGenerator<ProcessOutputEvent, void, undefined> {
    const response = await this.openOutput(options);
    try {
      for await (const event of ndjson<any>(response)) {
        const converted = outputEventFromWire(event);
        if (converted) yield converted;
      }
    } catch (error) {
      if (error instanceof BulkheadError) throw error;
      throw new BulkheadConnectionError(`the output stream broke off: ${(error as Error).message}`, { cause: error });
    } finally {
      response.destroy();
    }
  }

  private openOutput(options: OutputOptions, timeoutMs?: number) {
    return this.transport.send({
      method: "GET",
      path: this.path("output"),
      query: {
        offset: options.offset,
        stdout_offset: options.stdoutOffset,
        stderr_offset: options.stderrOffset,
        follow: options.follow ?? true,
      },
      accept: "application/x-ndjson",
      timeoutMs,
    });
  }

  /**
   * Waits for the process to exit (at most `timeoutMs`, else BulkheadTimeoutError) and
   * returns how it ended; `info` is refreshed.
   */
  async wait(options: { timeoutMs?: number } = {}): Promise<ExitStatus> {
    const { timeoutMs } = options;
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    const left = () => (deadline === undefined ? undefined : Math.max(1, deadline - Date.now()));
    const tooLate = () => new BulkheadTimeoutError(`process ${this.pid} did not exit within ${timeoutMs} ms`);
    // Follow from what was already written: only the exit (and what comes after) is read.
    let response: Awaited<ReturnType<Process["openOutput"]>>;
    try {
      response = await this.openOutput({ stdoutOffset: this.info.stdoutOffset, stderrOffset: this.info.stderrOffset }, left());
    } catch (error) {
      throw error instanceof BulkheadTimeoutError ? tooLate() : error;
    }
    let timedOut = false;
    const timer = deadline === undefined ? undefined : setTimeout(() => {
      timedOut = true;
      response.destroy();
    }, left());
    try {
      for await (const event of ndjson<any>(response)) {
        const converted = outputEventFromWire(event);
        if (converted?.type === "exit") {
          clearTimeout(timer);
          await this.refresh();
          const { type: _, ...status } = converted;
          return status;
        }
      }
    } catch (error) {
      if (timedOut) throw tooLate();
      if (error instanceof BulkheadError) throw error;
      throw new BulkheadConnectionError(`the output stream broke off: ${(error as Error).message}`, { cause: error });
    } finally {
      clearTimeout(timer);
      response.destroy();
    }
    if (timedOut) throw tooLate();
    // The stream ended without an exit event: ask the process itself.
    await this.refresh();
    if (this.state !== "exited") throw new BulkheadConnectionError(`the output of process ${this.pid} ended while it still runs`);
    return { exitCode: this.info.exitCode, signal: signalName(this.info.signal), durationMs: null, timedOut: false };
  }

  /** Writes to the process's stdin (reaches the process before this resolves), in pieces the daemon takes. */
  async writeStdin(data: string | Uint8Array): Promise<void> {
    if (typeof data === "string") {
      // Whole characters per request: never split a surrogate pair.
      let start = 0;
      do {
        let end = Math.min(data.length, start + STDIN_PIECE / 4);
        const last = data.charCodeAt(end - 1);
        if (end < data.length && last >= 0xd800 && last <= 0xdbff) end--;
        await this.transport.empty({ method: "POST", path: this.path("stdin"), json: { data: data.slice(start, end) } });
        start = end;
      } while (start < data.length);
      return;
    }
    const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    let start = 0;
    do {
      const piece = bytes.subarray(start, start + STDIN_PIECE);
      await this.transport.empty({ method: "POST", path: this.path("stdin"), json: { data_b64: piece.toString("base64") } });
      start += piece.length;
    } while (start < bytes.length);
  }

  async closeStdin(): Promise<void> {
    await this.transport.empty({ method: "POST", path: this.path("stdin", "close") });
  }

  /** Sends a signal: "SIGTERM", "TERM", "SIGRTMIN+1" or a number. */
  async signal(signal: Signal): Promise<void> {
    await this.transport.empty({ method: "POST", path: this.path("signal"), json: { signal } });
  }

  async kill(): Promise<void> {
    await this.signal("SIGKILL");
  }

  /** Resizes the process's pty (pty processes only). */
  async resize(cols: number, rows: number): Promise<void> {
    await this.transport.empty({ method: "POST", path: this.path("resize"), json: { cols, rows } });
  }

  /**
   * A live session over a WebSocket: output from the given offsets (default: all the ring
   * holds), then live; stdin, resize and signals. Closing it leaves the process running.
   */
  async attach(options: Omit<OutputOptions, "follow"> = {}): Promise<Attachment> {
    const ws = await openWebSocket(this.transport, {
      method: "GET",
      path: this.path("attach"),
      query: { offset: options.offset, stdout_offset: options.stdoutOffset, stderr_offset: options.stderrOffset },
    });
    return new Attachment(ws);
  }
}

/** A process's output event from the wire; null for kinds this SDK does not know. */
function outputEventFromWire(event: any): ProcessOutputEvent | null {
  switch (event.type) {
    case "stdout":
    case "stderr":
      return { ...chunkFromWire(event), offset: event.offset };
    case "gap":
      return { type: "gap", stream: event.stream, gapFrom: event.from, gapTo: event.to };
    case "exit":
      return { type: "exit", ...exitFromWire(event) };
    case "error":
      throw streamError(event);
    default:
      return null;
  }
}

/** "SIGTERM" for 15; "SIG<n>" for a number without a name. */
function signalName(signal: number | null): string | null {
  if (signal === null) return null;
  const entry = Object.entries(osConstants.signals).find(([, number]) => number === signal);
  return entry ? entry[0] : `SIG${signal}`;
}

/**
 * A live attach session. send() writes to the process's stdin; recv() and iteration give its
 * output (stdout and stderr together; on a pty all is stdout) as Buffers, first what the ring
 * holds from the offset asked, then live. resize(), signal() and closeStdin() steer it. When
 * the process exits, `exitStatus` is set and the output ends. Errors the daemon reports for a
 * control message (not a pty, bad signal, ...) collect in `errors` and the session goes on.
 * Closing the attachment never affects the process.
 */
export class Attachment implements AsyncIterable<Buffer>, AsyncDisposable {
  /** How the process ended, once the exit message arrived. */
  exitStatus: ExitStatus | null = null;
  /** The daemon's answers to bad control messages (the session went on after each). */
  readonly errors: StreamError[] = [];
  /** The session is over (the process exited, or the connection closed). */
  ended = false;
  /** Output received but not yet returned (readUntil keeps what follows its pattern). */
  private pending: Buffer = Buffer.alloc(0);

  constructor(private readonly ws: WebSocket) {}

  /** Writes to the process's stdin (text as UTF-8), in messages of 1 MiB at most. */
  async send(data: string | Uint8Array): Promise<void> {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    for (let start = 0; start < bytes.length; start += ATTACH_PIECE) {
      await this.ws.sendBinary(bytes.subarray(start, start + ATTACH_PIECE));
    }
  }

  /** The same as send(). */
  write(data: string | Uint8Array): Promise<void> {
    return this.send(data);
  }

  async resize(cols: number, rows: number): Promise<void> {
    await this.ws.sendText(JSON.stringify({ type: "resize", cols, rows }));
  }

  async signal(signal: Signal): Promise<void> {
    await this.ws.sendText(JSON.stringify({ type: "signal", signal }));
  }

  async closeStdin(): Promise<void> {
    await this.ws.sendText(JSON.stringify({ type: "stdin_close" }));
  }

  /**
   * The next output chunk, or null once the session ended. With `timeoutMs`, a
   * BulkheadTimeoutError if nothing arrived by then.
   */
  async recv(options: { timeoutMs?: number } = {}): Promise<Buffer | null> {
    if (this.pending.length) {
      const data = this.pending;
      this.pending = Buffer.alloc(0);
      return data;
    }
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs;
    while (!this.ended) {
      const message = await this.ws.recv(deadline === undefined ? undefined : Math.max(0, deadline - Date.now()));
      if (message === null) {
        this.ended = true;
        return null;
      }
      if (message.type === "binary") return message.data;
      this.onText(message.data);
    }
    return null;
  }

  /**
   * Reads output until `pattern` shows up; returns everything up to and including it (the
   * rest stays for the next read). BulkheadTimeoutError if it did not show up within
   * `timeoutMs`; BulkheadError if the session ended first.
   */
  async readUntil(pattern: string | Uint8Array, options: { timeoutMs?: number } = {}): Promise<Buffer> {
    const want = typeof pattern === "string" ? Buffer.from(pattern, "utf8") : Buffer.from(pattern);
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs;
    let seen = Buffer.alloc(0);
    for (;;) {
      const at = seen.indexOf(want);
      if (at >= 0) {
        const end = at + want.length;
        this.pending = Buffer.concat([seen.subarray(end), this.pending]);
        return seen.subarray(0, end);
      }
      let chunk: Buffer | null;
      try {
        chunk = await this.recv({ timeoutMs: deadline === undefined ? undefined : Math.max(1, deadline - Date.now()) });
      } catch (error) {
        this.pending = Buffer.concat([seen, this.pending]);
        if (error instanceof BulkheadTimeoutError) {
          throw new BulkheadTimeoutError(`${JSON.stringify(want.toString())} did not show up within ${options.timeoutMs} ms; got ${JSON.stringify(seen.subarray(-500).toString())}`);
        }
        throw error;
      }
      if (chunk === null) {
        throw new BulkheadError(`the session ended before ${JSON.stringify(want.toString())} showed up; got ${JSON.stringify(seen.subarray(-500).toString())}`);
      }
      seen = Buffer.concat([seen, chunk]);
    }
  }

  /** Reads (and drops) output until the session ends; the exit status, or null if the server closed without one. */
  async wait(options: { timeoutMs?: number } = {}): Promise<ExitStatus | null> {
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs;
    this.pending = Buffer.alloc(0);
    while (!this.ended) {
      await this.recv({ timeoutMs: deadline === undefined ? undefined : Math.max(1, deadline - Date.now()) });
    }
    return this.exitStatus;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Buffer> {
    for (let chunk = await this.recv(); chunk; chunk = await this.recv()) yield chunk;
  }

  /** Ends the session (a normal WebSocket close). The process goes on. */
  async close(): Promise<void> {
    this.ended = true;
    await this.ws.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private onText(text: string): void {
    let message: any;
    try {
      message = JSON.parse(text);
    } catch {
      return; // not ours to understand
    }
    if (message?.type === "exit") {
      this.exitStatus = exitFromWire(message);
    } else if (message?.type === "error") {
      this.errors.push(streamError(message, 101));
    }
  }
}
