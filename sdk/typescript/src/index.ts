// @bulkhead/sdk: the TypeScript/JavaScript client of bulkhead's HTTP API.
export { Bulkhead, type BulkheadOptions } from "./client.js";
export { Sandbox, Sandboxes, type PortRequestOptions, type PortResponse } from "./sandbox.js";
export { CommandResult, type CommandOptions, type ExecOptions } from "./exec.js";
export {
  Attachment,
  Process,
  Processes,
  type OutputOptions,
  type ProcessStartOptions,
  type Signal,
} from "./processes.js";
export { FileWatch, Files, type FileOptions, type WriteOptions } from "./files.js";
export { Snapshot, Snapshots, type SnapshotRef } from "./snapshots.js";
export { Volumes } from "./volumes.js";
export { Images } from "./images.js";
export { WebSocket, type WebSocketMessage } from "./websocket.js";
export type { BodyInput } from "./transport.js";
export {
  ApiError,
  AuthenticationError,
  BulkheadConnectionError,
  BulkheadError,
  BulkheadTimeoutError,
  CommandError,
  ConflictError,
  DiskFullError,
  ForbiddenError,
  InvalidRequestError,
  NotFoundError,
  PayloadTooLargeError,
  RateLimitError,
  ServerError,
  StreamError,
  UnavailableError,
  UnsafeArchiveError,
} from "./errors.js";
export type {
  ArchiveSummary,
  EgressEntry,
  Entry,
  EntryList,
  ExecEvent,
  ExitStatus,
  FileEvent,
  Health,
  Image,
  NetworkMode,
  NetworkPolicy,
  OutputChunk,
  PreviewAccess,
  ProcessInfo,
  ProcessOutputEvent,
  PtySize,
  SandboxCreateOptions,
  SandboxInfo,
  SandboxState,
  SnapshotInfo,
  Usage,
  Volume,
  VolumeMount,
} from "./types.js";
