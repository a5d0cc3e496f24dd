// The API's objects as the SDK shows them (camelCase), and the conversions from the wire
// (snake_case JSON). User-given maps (metadata, env) keep their keys as they are.

export type SandboxState = "starting" | "running" | "paused" | "stopped" | "error";
export type NetworkMode = "none" | "allowlist" | "open";

export interface NetworkPolicy {
  mode: NetworkMode;
  /** example.com, *.example.com, 1.2.3.4, 10.0.0.0/8, each optionally :port. */
  allow: string[];
  /** Entries as in `allow`, checked first: a deny wins over any allow (and over mode open). */
  deny: string[];
}

export interface VolumeMount {
  name: string;
  path: string;
  readOnly?: boolean;
}

/**
 * Who may reach the sandbox's ports by preview host name ({port}-{id}.{previewDomain}): whoever
 * knows the id (public, the default), or only requests with `token` (private).
 */
export interface PreviewAccess {
  public: boolean;
  /** Set while the preview is private. */
  token?: string;
}

export interface Usage {
  cpuS: number;
  memoryBytes: number;
  diskBytes: number;
  pids: number;
}

export interface SandboxInfo {
  id: string;
  state: SandboxState;
  image: string;
  runtime: string;
  createdAt: string;
  /** null: no lifetime limit. */
  expiresAt: string | null;
  cpus: number;
  memoryMb: number;
  diskMb: number;
  pids: number;
  timeoutS: number;
  idleTimeoutS: number;
  onTimeout: string;
  network: NetworkPolicy;
  metadata: Record<string, string>;
  env: Record<string, string>;
  workdir: string;
  user: string;
  parentSnapshot: string | null;
  /** Paused with its memory and processes on disk (no RAM held); the next call restores them. */
  pausedToDisk: boolean;
  volumes: VolumeMount[];
  preview: PreviewAccess;
  /** Who may run `sudo` in it (names or uids). */
  sudoUsers: string[];
  /** Only from sandboxes.get() and refresh(). */
  usage?: Usage;
}

/** Every field optional; the daemon's defaults fill the rest. */
export interface SandboxCreateOptions {
  /** Image name; "host" (default) is a read-only view of the host's OS. */
  image?: string;
  runtime?: "native" | "gvisor" | "microvm";
  cpus?: number;
  memoryMb?: number;
  diskMb?: number;
  pids?: number;
  /** Lifetime in seconds (default 300); 0 = none. */
  timeoutS?: number;
  idleTimeoutS?: number;
  onTimeout?: "kill" | "pause" | "stop";
  env?: Record<string, string>;
  workdir?: string;
  user?: string;
  /** A mode ("none", "allowlist", "open") or a policy with its allow and deny entries. */
  network?: NetworkMode | Partial<NetworkPolicy>;
  metadata?: Record<string, string>;
  /** A snapshot (or its id) to start from; the sandbox runs the snapshot's image. */
  fromSnapshot?: string | { id: string };
  volumes?: VolumeMount[];
  /** Preview host names need the sandbox's preview token (sandbox.previewToken), not only its id. */
  privatePreview?: boolean;
  /** Users (names or uids) whose `sudo` runs commands as root without a password. */
  sudoUsers?: string[];
}

export interface PtySize {
  cols: number;
  rows: number;
}

export interface ProcessInfo {
  pid: number;
  tag: string | null;
  cmd: string[];
  state: "running" | "exited";
  exitCode: number | null;
  /** The number of the signal that ended it. */
  signal: number | null;
  startedAt: string;
  exitedAt: string | null;
  pty: PtySize | null;
  /** Bytes written to stdout so far. */
  stdoutOffset: number;
  stderrOffset: number;
  /** The oldest stdout offset the output ring still holds. */
  stdoutStart: number;
  stderrStart: number;
}

/** How a command or process ended. */
export interface ExitStatus {
  exitCode: number | null;
  /** The name of the signal that ended it ("SIGKILL"), or null if it exited. */
  signal: string | null;
  /** null when not reported (a process whose end was read from its table). */
  durationMs: number | null;
  timedOut: boolean;
}

/** A piece of output: `data` as text (invalid UTF-8 replaced), `dataBytes` exactly as written. */
export interface OutputChunk {
  type: "stdout" | "stderr";
  data: string;
  dataBytes: Buffer;
}

export type ExecEvent =
  | { type: "start"; pid: number }
  | OutputChunk
  | ({ type: "exit"; truncated: boolean } & ExitStatus);

export type ProcessOutputEvent =
  /** `offset`: bytes of this stream up to and including this chunk (pass it back to resume). */
  | (OutputChunk & { offset: number })
  /** Bytes gapFrom..gapTo of a stream were no longer in the ring. */
  | { type: "gap"; stream: "stdout" | "stderr"; gapFrom: number; gapTo: number }
  | ({ type: "exit" } & ExitStatus);

export interface Entry {
  /** Absolute, inside the sandbox. */
  path: string;
  name: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  /** Permission bits (0o644 = 420). */
  mode: number;
  uid?: number;
  gid?: number;
  mtime: string;
  /** Symlinks only: where the link points. */
  target?: string;
}

/** A directory listing; `truncated` when the daemon stopped at its limit. */
export type EntryList = Entry[] & { truncated: boolean };

export interface FileEvent {
  type: "create" | "write" | "remove" | "rename" | "chmod";
  /** Absolute, inside the sandbox. */
  path: string;
  dir?: boolean;
}

export interface ArchiveSummary {
  entries: number;
  bytes: number;
}

export interface SnapshotInfo {
  id: string;
  name: string | null;
  sandboxId: string;
  createdAt: string;
  sizeBytes: number;
  /** Memory and processes were captured too (a gvisor or microvm sandbox's, when asked). */
  memory: boolean;
  image: string;
  /** The runtime of the sandbox it was taken of: the only one that restores its memory. */
  runtime: string;
}

export interface Volume {
  name: string;
  sizeMb: number;
  createdAt: string;
  usedBytes: number;
  /** Sandboxes (running, paused or stopped) that list the volume. */
  mountedBy: string[];
}

export interface Image {
  name: string;
  source: "host" | "directory" | "tarball";
  createdAt: string;
  sizeBytes: number;
}

export interface EgressEntry {
  time: string;
  protocol: "tcp" | "dns";
  name: string | null;
  address: string | null;
  port: number;
  queryType: string | null;
  verdict: "allowed" | "denied";
  reason: string | null;
  bytesOut: number;
  bytesIn: number;
  durationMs: number;
  /** Still connected. */
  open: boolean;
}

export interface Health {
  status: string;
  version: string;
}

// ---------------------------------------------------------------- from the wire

/* eslint-disable @typescript-eslint/no-explicit-any */
type Wire = Record<string, any>;

export function sandboxFromWire(w: Wire): SandboxInfo {
  const info: SandboxInfo = {
    id: w.id,
    state: w.state,
    image: w.image,
    runtime: w.runtime,
    createdAt: w.created_at,
    expiresAt: w.expires_at ?? null,
    cpus: w.cpus,
    memoryMb: w.memory_mb,
    diskMb: w.disk_mb,
    pids: w.pids,
    timeoutS: w.timeout_s,
    idleTimeoutS: w.idle_timeout_s,
    onTimeout: w.on_timeout,
    network: { mode: w.network?.mode ?? "none", allow: w.network?.allow ?? [], deny: w.network?.deny ?? [] },
    metadata: w.metadata ?? {},
    env: w.env ?? {},
    workdir: w.workdir,
    user: w.user,
    parentSnapshot: w.parent_snapshot ?? null,
    pausedToDisk: Boolean(w.paused_to_disk),
    volumes: (w.volumes ?? []).map((v: Wire) => ({ name: v.name, path: v.path, readOnly: Boolean(v.read_only) })),
    preview: w.preview?.public === false ? { public: false, token: w.preview.token } : { public: true },
    sudoUsers: w.sudo_users ?? [],
  };
  if (w.usage) {
    info.usage = {
      cpuS: w.usage.cpu_s,
      memoryBytes: w.usage.memory_bytes,
      diskBytes: w.usage.disk_bytes,
      pids: w.usage.pids,
    };
  }
  return info;
}

/** The create request's JSON: only the fields given. */
export function sandboxCreateToWire(o: SandboxCreateOptions): Wire {
  const w: Wire = {
    image: o.image,
    runtime: o.runtime,
    cpus: o.cpus,
    memory_mb: o.memoryMb,
    disk_mb: o.diskMb,
    pids: o.pids,
    timeout_s: o.timeoutS,
    idle_timeout_s: o.idleTimeoutS,
    on_timeout: o.onTimeout,
    env: o.env,
    workdir: o.workdir,
    user: o.user,
    network: typeof o.network === "string" ? { mode: o.network } : o.network,
    metadata: o.metadata,
    from_snapshot: typeof o.fromSnapshot === "object" ? o.fromSnapshot.id : o.fromSnapshot,
    volumes: o.volumes?.map((v) => ({ name: v.name, path: v.path, read_only: v.readOnly })),
    preview: o.privatePreview === undefined ? undefined : { public: !o.privatePreview },
    sudo_users: o.sudoUsers,
  };
  return withoutUndefined(w);
}

export function processFromWire(w: Wire): ProcessInfo {
  return {
    pid: w.pid,
    tag: w.tag ?? null,
    cmd: w.cmd,
    state: w.state,
    exitCode: w.exit_code ?? null,
    signal: w.signal ?? null,
    startedAt: w.started_at,
    exitedAt: w.exited_at ?? null,
    pty: w.pty ?? null,
    stdoutOffset: w.stdout_offset,
    stderrOffset: w.stderr_offset,
    stdoutStart: w.stdout_start,
    stderrStart: w.stderr_start,
  };
}

export function exitFromWire(w: Wire): ExitStatus {
  return {
    exitCode: w.exit_code ?? null,
    signal: w.signal ?? null,
    durationMs: typeof w.duration_ms === "number" ? w.duration_ms : null,
    timedOut: Boolean(w.timed_out),
  };
}

/** A stdout/stderr event's chunk: `data` (UTF-8) or `data_b64` (other bytes). */
export function chunkFromWire(w: Wire): OutputChunk {
  const bytes = typeof w.data_b64 === "string" ? Buffer.from(w.data_b64, "base64") : Buffer.from(w.data ?? "", "utf8");
  const data = typeof w.data === "string" ? w.data : bytes.toString("utf8");
  return { type: w.type, data, dataBytes: bytes };
}

export function entryFromWire(w: Wire): Entry {
  const entry: Entry = { path: w.path, name: w.name, type: w.type, size: w.size, mode: w.mode, mtime: w.mtime };
  if (w.uid !== undefined) entry.uid = w.uid;
  if (w.gid !== undefined) entry.gid = w.gid;
  if (w.target !== undefined) entry.target = w.target;
  return entry;
}

export function snapshotFromWire(w: Wire): SnapshotInfo {
  return {
    id: w.id,
    name: w.name ?? null,
    sandboxId: w.sandbox_id,
    createdAt: w.created_at,
    sizeBytes: w.size_bytes,
    memory: Boolean(w.memory),
    image: w.image,
    runtime: w.runtime ?? "native",
  };
}

export function volumeFromWire(w: Wire): Volume {
  return { name: w.name, sizeMb: w.size_mb, createdAt: w.created_at, usedBytes: w.used_bytes, mountedBy: w.mounted_by ?? [] };
}

export function imageFromWire(w: Wire): Image {
  return { name: w.name, source: w.source, createdAt: w.created_at, sizeBytes: w.size_bytes };
}

export function egressFromWire(w: Wire): EgressEntry {
  return {
    time: w.time,
    protocol: w.protocol,
    name: w.name ?? null,
    address: w.address ?? null,
    port: w.port,
    queryType: w.query_type ?? null,
    verdict: w.verdict,
    reason: w.reason ?? null,
    bytesOut: w.bytes_out,
    bytesIn: w.bytes_in,
    durationMs: w.duration_ms,
    open: Boolean(w.open),
  };
}

export function withoutUndefined(w: Wire): Wire {
  return Object.fromEntries(Object.entries(w).filter(([, v]) => v !== undefined));
}
