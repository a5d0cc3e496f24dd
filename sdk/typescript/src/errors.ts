// The errors the SDK throws. Every API error carries the HTTP status and the API's snake_case
// code (e.g. "sandbox_not_found"); the class tells the kind at a glance.
import type { CommandResult } from "./exec.js";

/** The base of every error this SDK throws. */
export class BulkheadError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The daemon could not be reached, or the connection broke mid-request. */
export class BulkheadConnectionError extends BulkheadError {}

/** No answer (or no further data on a stream) within the timeout. */
export class BulkheadTimeoutError extends BulkheadConnectionError {}

/** The daemon answered with an error: `status` (HTTP), `code` (snake_case), `apiMessage`. */
export class ApiError extends BulkheadError {
  /** The HTTP status. */
  readonly status: number;
  /** The API's snake_case error code, e.g. "sandbox_not_found". */
  readonly code: string;
  /** The API's message for humans (`message` is "code: apiMessage (HTTP status)"). */
  readonly apiMessage: string;

  constructor(status: number, code: string, message: string) {
    super(`${code}: ${message} (HTTP ${status})`);
    this.status = status;
    this.code = code;
    this.apiMessage = message;
  }
}

/** 400 (malformed request) or 422 (valid JSON, invalid values). */
export class InvalidRequestError extends ApiError {}
/** 401: no API key, or the wrong one. */
export class AuthenticationError extends ApiError {}
/** 403: not allowed (e.g. permission_denied, read_only). */
export class ForbiddenError extends ApiError {}
/** 404: unknown sandbox, process, path, snapshot, volume or image. */
export class NotFoundError extends ApiError {}
/** 409: the target is in the wrong state (e.g. sandbox_not_running, snapshot_in_use). */
export class ConflictError extends ApiError {}
/** 413: the body is too large. */
export class PayloadTooLargeError extends ApiError {}
/** 429: a quota or rate limit. */
export class RateLimitError extends ApiError {}
/** 503: the daemon is overloaded or shutting down. */
export class UnavailableError extends ApiError {}
/** 507: the sandbox's (or the daemon's) disk is full. */
export class DiskFullError extends ApiError {}
/** Any other 5xx. */
export class ServerError extends ApiError {}

/**
 * A stream (exec, process output, file watch) that had begun ended with an error event; or,
 * in Attachment.errors, the daemon's answer to a bad control message. `status` is the
 * stream's HTTP status (200; 101 for an attachment).
 */
export class StreamError extends ApiError {}

/**
 * downloadDir() refused entries of the sandbox's archive that could reach outside the local
 * directory or arrive as something unsafe (each skipped, nothing written for it); the rest is
 * unpacked. `refused` names each with the reason, `entries` counts what was made.
 */
export class UnsafeArchiveError extends BulkheadError {
  readonly refused: { name: string; reason: string }[];
  readonly entries: number;

  constructor(refused: { name: string; reason: string }[], entries: number, dest: string) {
    const listed = refused.slice(0, 10).map((r) => `${JSON.stringify(r.name)}: ${r.reason}`).join("; ");
    const more = refused.length > 10 ? `; and ${refused.length - 10} more` : "";
    super(`refused ${refused.length} unsafe archive ${refused.length === 1 ? "entry" : "entries"} (the rest is unpacked in ${dest}): ${listed}${more}`);
    this.refused = refused;
    this.entries = entries;
  }
}

/** Raised by CommandResult.check() when a command did not exit 0. */
export class CommandError extends BulkheadError {
  readonly result: CommandResult;

  constructor(result: CommandResult) {
    const how = result.timedOut
      ? "timed out"
      : result.signal !== null
        ? `was killed by ${result.signal}`
        : `exited with ${result.exitCode}`;
    const stderr = result.stderr.trim();
    super(`the command ${how}${stderr ? `: ${stderr.slice(-2000)}` : ""}`);
    this.result = result;
  }
}

const errorClassByStatus: Record<number, typeof ApiError> = {
  400: InvalidRequestError,
  401: AuthenticationError,
  403: ForbiddenError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  422: InvalidRequestError,
  429: RateLimitError,
  503: UnavailableError,
  507: DiskFullError,
};

/** The error for an answer of `status` whose body was `body` (the API's error JSON, or anything). */
export function apiErrorFrom(status: number, body: Buffer): ApiError {
  let code = `http_${status}`;
  let message = body.toString("utf8").trim().slice(0, 2000) || `HTTP ${status}`;
  try {
    const parsed = JSON.parse(body.toString("utf8")) as { error?: { code?: unknown; message?: unknown } };
    if (parsed && typeof parsed.error === "object" && parsed.error !== null) {
      if (typeof parsed.error.code === "string") code = parsed.error.code;
      if (typeof parsed.error.message === "string") message = parsed.error.message;
    }
  } catch {
    // Not the API's error shape (a proxy in between, say): keep the text.
  }
  const ErrorClass = errorClassByStatus[status] ?? (status >= 500 ? ServerError : ApiError);
  return new ErrorClass(status, code, message);
}
