// Running a command to its end: POST /v1/sandboxes/{id}/exec, as one JSON answer or, with
// callbacks or execStream(), as NDJSON events read as they arrive.
import { BulkheadConnectionError, BulkheadError, CommandError, StreamError } from "./errors.js";
import { ndjson, pathOf, type Transport } from "./transport.js";
import { chunkFromWire, exitFromWire, withoutUndefined, type ExecEvent, type ExitStatus } from "./types.js";

export interface CommandOptions {
  /** Working directory (default: the sandbox's workdir). */
  cwd?: string;
  /** Merged over the sandbox's env. */
  env?: Record<string, string>;
  /** A user name, uid, or uid:gid (default: the sandbox's user). */
  user?: string;
}

export interface ExecOptions extends CommandOptions {
  /**
   * The command's stdin (else it reads /dev/null); bytes travel base64. It rides in the
   * request, which the daemon caps at 1 MiB: feed more through a process's writeStdin or a file.
   */
  stdin?: string | Uint8Array;
  /** Kill the command after this many seconds (daemon default 60); 0 = no limit. Not an exception: see `timedOut`. */
  timeoutS?: number;
  /** Output kept per stream (daemon default 16 MiB); the rest is dropped and `truncated` set. */
  maxOutputBytes?: number;
  /** With a callback the output streams: called with each piece as it is produced. */
  onStdout?: (data: string, bytes: Buffer) => void;
  onStderr?: (data: string, bytes: Buffer) => void;
}

/** How a command ended, with its output. A timeout is not an exception: see `timedOut`. */
export class CommandResult implements ExitStatus {
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly stdout: string;
  readonly stderr: string;
  /** The exact bytes of stdout (stdout replaces invalid UTF-8). */
  readonly stdoutBytes: Buffer;
  readonly stderrBytes: Buffer;
  readonly durationMs: number;
  readonly timedOut: boolean;
  /** Output beyond maxOutputBytes was dropped. */
  readonly truncated: boolean;
  /** The command's pid in the sandbox (known when the output was streamed). */
  readonly pid: number | null;

  constructor(
    exit: ExitStatus & { truncated: boolean },
    stdoutBytes: Buffer,
    stderrBytes: Buffer,
    options: { stdout?: string; stderr?: string; pid?: number | null } = {},
  ) {
    this.pid = options.pid ?? null;
    this.exitCode = exit.exitCode;
    this.signal = exit.signal;
    this.durationMs = exit.durationMs ?? 0;
    this.timedOut = exit.timedOut;
    this.truncated = exit.truncated;
    this.stdoutBytes = stdoutBytes;
    this.stderrBytes = stderrBytes;
    this.stdout = options.stdout ?? stdoutBytes.toString("utf8");
    this.stderr = options.stderr ?? stderrBytes.toString("utf8");
  }

  /** Exited 0 (and did not time out). */
  get ok(): boolean {
    return this.exitCode === 0 && !this.timedOut;
  }

  /** Returns this result if the command exited 0, else throws a CommandError carrying it. */
  check(): this {
    if (!this.ok) throw new CommandError(this);
    return this;
  }
}

/* eslint-disable @typescript-eslint/no-explicit-any */
function execBody(cmd: string | string[], options: ExecOptions): Record<string, any> {
  const stdin = options.stdin;
  return withoutUndefined({
    cmd,
    cwd: options.cwd,
    env: options.env,
    user: options.user,
    stdin: typeof stdin === "string" ? stdin : undefined,
    stdin_b64: stdin instanceof Uint8Array ? Buffer.from(stdin.buffer, stdin.byteOffset, stdin.byteLength).toString("base64") : undefined,
    timeout_s: options.timeoutS,
    max_output_bytes: options.maxOutputBytes,
  });
}

/** An error event that ended a stream after it began (the answer was already 200). */
export function streamError(event: { code?: unknown; message?: unknown }, status = 200): StreamError {
  return new StreamError(status, String(event.code ?? "internal"), String(event.message ?? "the stream failed"));
}

export async function* execEvents(
  transport: Transport,
  sandboxId: string,
  cmd: string | string[],
  options: ExecOptions,
): AsyncGenerator<ExecEvent, void, undefined> {
  const response = await transport.send({
    method: "POST",
    path: pathOf("v1", "sandboxes", sandboxId, "exec"),
    json: execBody(cmd, options),
    accept: "application/x-ndjson",
  });
  let exited = false;
  try {
    for await (const event of ndjson<any>(response)) {
      switch (event.type) {
        case "start":
          yield { type: "start", pid: event.pid };
          break;
        case "stdout":
        case "stderr":
          yield chunkFromWire(event);
          break;
        case "exit":
          exited = true;
          yield { type: "exit", truncated: Boolean(event.truncated), ...exitFromWire(event) };
          return;
        case "error":
          throw streamError(event);
        default:
          break; // a kind of event this SDK does not know yet
      }
    }
  } catch (error) {
    if (error instanceof BulkheadError) throw error;
    throw new BulkheadConnectionError(`the exec stream broke off: ${(error as Error).message}`, { cause: error });
  } finally {
    response.destroy();
  }
  if (!exited) throw new BulkheadConnectionError("the exec stream ended before the command's exit");
}

export async function runCommand(
  transport: Transport,
  sandboxId: string,
  cmd: string | string[],
  options: ExecOptions,
): Promise<CommandResult> {
  if (options.onStdout || options.onStderr) return streamCommand(transport, sandboxId, cmd, options);
  // The answer comes once the command ended: wait for its own timeout on top of ours.
  const commandS = options.timeoutS ?? 60;
  const w = await transport.json<any>({
    method: "POST",
    path: pathOf("v1", "sandboxes", sandboxId, "exec"),
    json: execBody(cmd, options),
    timeoutMs: commandS === 0 || transport.timeoutMs === 0 ? 0 : transport.timeoutMs + commandS * 1000,
  });
  const stdoutBytes = typeof w.stdout_b64 === "string" ? Buffer.from(w.stdout_b64, "base64") : Buffer.from(w.stdout ?? "", "utf8");
  const stderrBytes = typeof w.stderr_b64 === "string" ? Buffer.from(w.stderr_b64, "base64") : Buffer.from(w.stderr ?? "", "utf8");
  return new CommandResult({ ...exitFromWire(w), truncated: Boolean(w.truncated) }, stdoutBytes, stderrBytes, { stdout: w.stdout, stderr: w.stderr });
}

async function streamCommand(
  transport: Transport,
  sandboxId: string,
  cmd: string | string[],
  options: ExecOptions,
): Promise<CommandResult> {
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  let pid: number | null = null;
  for await (const event of execEvents(transport, sandboxId, cmd, options)) {
    if (event.type === "start") {
      pid = event.pid;
    } else if (event.type === "stdout") {
      stdout.push(event.dataBytes);
      options.onStdout?.(event.data, event.dataBytes);
    } else if (event.type === "stderr") {
      stderr.push(event.dataBytes);
      options.onStderr?.(event.data, event.dataBytes);
    } else if (event.type === "exit") {
      return new CommandResult(event, Buffer.concat(stdout), Buffer.concat(stderr), { pid });
    }
  }
  throw new BulkheadConnectionError("the exec stream ended before the command's exit");
}
