// Background processes in a sandbox: start, list, output (with offsets, followed), stdin,
// signals, pty resize, and attach over a WebSocket.
import { BulkheadConnectionError, BulkheadError } from "./errors.js";
import { streamError, type CommandOptions } from "./exec.js";
import { ndjson, pathOf, type Transport } from "./transport.js";
import {
  chunkFromWire,
  exitFromWire,
  processFromWire,
  withoutUndefined,
  type ExitInfo,
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
   * to resume), `gap` where the ring lost bytes, and `exit` last. Follows by default.
   */
  async *output(options: OutputOptions = {}): AsyncGenerator<ProcessOutputEvent, void, undefined> {
    const response = await this.transport.send({
      method: "GET",
      path: this.path("output"),
      query: {
        offset: options.offset,
        stdout_offset: options.stdoutOffset,
        stderr_offset: options.stderrOffset,
        follow: options.follow ?? true,
      },
      accept: "application/x-ndjson",
    });
    try {
      for await (const event of ndjson<any>(response)) {
        switch (event.type) {
          case "stdout":
          case "stderr":
            yield { ...chunkFromWire(event), offset: event.offset };
            break;
          case "gap":
            yield { type: "gap", stream: event.stream, from: event.from, to: event.to };
            break;
          case "exit":
            yield { type: "exit", ...exitFromWire(event) };
            break;
          case "error":
            throw streamError(event);
          default:
            break;
        }
      }
    } catch (error) {
      if (error instanceof BulkheadError) throw error;
      throw new BulkheadConnectionError(`the output stream broke off: ${(error as Error).message}`, { cause: error });
    } finally {
      response.destroy();
    }
  }

  /** Waits for the process to exit; returns how it ended. */
  async wait(): Promise<ExitInfo> {
    await this.refresh();
    // Follow from what was already written: only the exit (and what comes after) is read.
    for await (const event of this.output({ stdoutOffset: this.info.stdoutOffset, stderrOffset: this.info.stderrOffset })) {
      if (event.type === "exit") {
        await this.refresh();
        return { exitCode: event.exitCode, signal: event.signal, durationMs: event.durationMs, timedOut: event.timedOut };
      }
    }
    throw new BulkheadConnectionError(`the output of process ${this.pid} ended before its exit`);
  }

  /** Writes to the process's stdin (reaches the process before this resolves). */
  async writeStdin(data: string | Uint8Array): Promise<void> {
    const json =
      typeof data === "string"
        ? { data }
        : { data_b64: Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64") };
    await this.transport.empty({ method: "POST", path: this.path("stdin"), json });
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
   * Attaches over a WebSocket: output from the given offsets (default: all the ring holds),
   * then live; what you send goes to stdin. Closing it leaves the process running.
   */
  async attach(options: Omit<OutputOptions, "follow"> & { onMessage?: (message: AttachMessage) => void } = {}): Promise<AttachSession> {
    const ws = await openWebSocket(this.transport, {
      method: "GET",
      path: this.path("attach"),
      query: { offset: options.offset, stdout_offset: options.stdoutOffset, stderr_offset: options.stderrOffset },
    });
    return new AttachSession(ws, options.onMessage);
  }
}

/** A text message of an attach session: the exit, or an error about a message you sent. */
export type AttachMessage = ({ type: "exit" } & ExitInfo) | { type: "error"; code: string; message: string };

/**
 * A live attach: iterate it for output (Buffers, stdout and stderr as they come), send()
 * for stdin, resize()/signal()/closeStdin() for control. Iteration ends when the process
 * exited (see `exit`) or the connection closed.
 */
export class AttachSession implements AsyncIterable<Buffer> {
  /** How the process ended, once the exit message arrived. */
  exit: ExitInfo | null = null;
  /** Errors the daemon reported about messages sent (the session goes on after each). */
  readonly errors: { code: string; message: string }[] = [];

  private reading = false;
  private resolveEnd!: (exit: ExitInfo | null) => void;
  private readonly ended: Promise<ExitInfo | null>;

  constructor(
    private readonly ws: WebSocket,
    private readonly onMessage?: (message: AttachMessage) => void,
  ) {
    this.ended = new Promise((resolve) => (this.resolveEnd = resolve));
  }

  /** Sends bytes or text to the process's stdin. */
  async send(data: string | Uint8Array): Promise<void> {
    await this.ws.sendBinary(typeof data === "string" ? Buffer.from(data, "utf8") : data);
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

  async *[Symbol.asyncIterator](): AsyncIterator<Buffer> {
    if (this.reading) throw new Error("this attach session is already being read");
    this.reading = true;
    try {
      for (let message = await this.ws.receive(); message; message = await this.ws.receive()) {
        if (message.type === "binary") {
          yield message.data;
          continue;
        }
        this.onText(message.data);
      }
      this.resolveEnd(this.exit);
    } finally {
      this.reading = false;
    }
  }

  /** Waits for the end (reading and dropping output unless something else iterates). */
  async wait(): Promise<ExitInfo | null> {
    if (!this.reading) {
      for await (const _ of this) {
        // output nobody asked for
      }
    }
    return this.ended;
  }

  /** Closes the WebSocket; the process keeps running. */
  async close(): Promise<void> {
    await this.ws.close();
    this.resolveEnd(this.exit);
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
    if (message.type === "exit") {
      this.exit = exitFromWire(message);
      this.onMessage?.({ type: "exit", ...this.exit });
    } else if (message.type === "error") {
      const error = { code: String(message.code), message: String(message.message) };
      this.errors.push(error);
      this.onMessage?.({ type: "error", ...error });
    }
  }
}
