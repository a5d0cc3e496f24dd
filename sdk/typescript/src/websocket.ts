// A small RFC 6455 WebSocket client on a socket that node:http upgraded: the handshake's
// accept check, masked frames out, frames in (fragments joined, pings answered, the close
// handshake). Node 20 has no stable global WebSocket, and the SDK takes no dependencies.
import { createHash, randomBytes } from "node:crypto";
import type { Duplex } from "node:stream";
import { BulkheadConnectionError, BulkheadError, BulkheadTimeoutError } from "./errors.js";
import type { RequestSpec, Transport } from "./transport.js";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const OP_CONTINUATION = 0x0;
const OP_TEXT = 0x1;
const OP_BINARY = 0x2;
const OP_CLOSE = 0x8;
const OP_PING = 0x9;
const OP_PONG = 0xa;
/** A message larger than this is a protocol error (nothing the daemon sends comes close). */
const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
/** Messages held for a slow reader before the socket is paused. */
const HIGH_WATER_MESSAGES = 256;

export type WebSocketMessage = { type: "binary"; data: Buffer } | { type: "text"; data: string };

/** Opens a WebSocket to an API path (the key goes in the Authorization header). */
export async function openWebSocket(transport: Transport, spec: RequestSpec): Promise<WebSocket> {
  const key = randomBytes(16).toString("base64");
  const { socket, head, response } = await transport.upgrade(spec, "websocket", {
    "sec-websocket-key": key,
    "sec-websocket-version": "13",
  });
  const expected = createHash("sha1").update(key + GUID).digest("base64");
  if (response.headers["sec-websocket-accept"] !== expected) {
    socket.destroy();
    throw new BulkheadError("the WebSocket handshake failed: wrong Sec-WebSocket-Accept");
  }
  return new WebSocket(socket, head);
}

export class WebSocket implements AsyncIterable<WebSocketMessage> {
  /** The close code the server sent (1006 if the connection ended without one); null while open. */
  closeCode: number | null = null;
  closeReason = "";

  private readonly socket: Duplex;
  private buffer: Buffer = Buffer.alloc(0);
  private fragments: Buffer[] = [];
  private fragmentsOp = 0;
  private fragmentsBytes = 0;
  private readonly queue: WebSocketMessage[] = [];
  private readonly waiters = new Set<() => void>();
  private ended = false;
  private failure: Error | undefined;
  private closeSent = false;
  private paused = false;
  private readonly closed: Promise<void>;

  constructor(socket: Duplex, head: Buffer) {
    this.socket = socket;
    this.closed = new Promise((resolve) => socket.once("close", () => resolve()));
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("end", () => this.finish());
    socket.on("close", () => this.finish());
    socket.on("error", (error) => this.finish(new BulkheadConnectionError(`the WebSocket broke: ${error.message}`, { cause: error })));
    if (head.length) this.onData(head);
  }

  /** Sends one binary message. */
  sendBinary(data: Uint8Array): Promise<void> {
    return this.sendFrame(OP_BINARY, Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  }

  /** Sends one text message. */
  sendText(text: string): Promise<void> {
    return this.sendFrame(OP_TEXT, Buffer.from(text, "utf8"));
  }

  /**
   * The next message, or null once the connection closed. With `timeoutMs`, a
   * BulkheadTimeoutError if none arrived by then (the connection stays usable).
   */
  async recv(timeoutMs?: number): Promise<WebSocketMessage | null> {
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    for (;;) {
      const message = this.queue.shift();
      if (message) {
        if (this.paused && this.queue.length < HIGH_WATER_MESSAGES / 2) {
          this.paused = false;
          this.socket.resume();
        }
        return message;
      }
      if (this.failure) throw this.failure;
      if (this.ended) return null;
      if (deadline !== undefined && Date.now() >= deadline) {
        throw new BulkheadTimeoutError(`no WebSocket message within ${timeoutMs} ms`);
      }
      await this.woken(deadline);
    }
  }

  async *[Symbol.asyncIterator](): AsyncIterator<WebSocketMessage> {
    for (let message = await this.recv(); message; message = await this.recv()) yield message;
  }

  /** The close handshake: sends a close frame, waits (a while) for the server's, ends the socket. */
  async close(code = 1000, reason = "", waitMs = 5000): Promise<void> {
    if (!this.closeSent && !this.socket.destroyed) {
      const payload = Buffer.alloc(2 + Buffer.byteLength(reason));
      payload.writeUInt16BE(code, 0);
      payload.write(reason, 2);
      try {
        await this.sendFrame(OP_CLOSE, payload);
      } catch {
        // already broken: nothing to hand shake with
      }
    }
    const timer = setTimeout(() => this.socket.destroy(), waitMs);
    await this.closed;
    clearTimeout(timer);
  }

  /** Ends the connection at once, without the close handshake. */
  destroy(): void {
    this.socket.destroy();
  }

  private sendFrame(opcode: number, payload: Buffer): Promise<void> {
    if (this.closeSent) return Promise.reject(new BulkheadError("the WebSocket is closing"));
    if (opcode === OP_CLOSE) this.closeSent = true;
    const length = payload.length;
    const header = Buffer.alloc(length < 126 ? 6 : length < 65536 ? 8 : 14);
    header[0] = 0x80 | opcode; // FIN: every message goes in one frame
    let at = 2;
    if (length < 126) {
      header[1] = 0x80 | length;
    } else if (length < 65536) {
      header[1] = 0x80 | 126;
      header.writeUInt16BE(length, 2);
      at = 4;
    } else {
      header[1] = 0x80 | 127;
      header.writeBigUInt64BE(BigInt(length), 2);
      at = 10;
    }
    // Client frames are masked (RFC 6455 5.3) with a fresh random key each.
    const mask = randomBytes(4);
    mask.copy(header, at);
    const masked = Buffer.allocUnsafe(length);
    for (let i = 0; i < length; i++) masked[i] = payload[i]! ^ mask[i & 3]!;
    return new Promise((resolve, reject) => {
      this.socket.write(Buffer.concat([header, masked]), (error) => {
        if (error) reject(new BulkheadConnectionError(`the WebSocket broke: ${error.message}`, { cause: error }));
        else resolve();
      });
    });
  }

  private onData(chunk: Buffer): void {
    this.buffer = this.buffer.length ? Buffer.concat([this.buffer, chunk]) : chunk;
    try {
      while (this.parseFrame()) {
        // one frame per turn
      }
    } catch (error) {
      this.finish(error as Error);
      this.socket.destroy();
    }
  }

  /** Takes one whole frame off the buffer; false when more bytes are needed. */
  private parseFrame(): boolean {
    const b = this.buffer;
    if (b.length < 2) return false;
    const fin = (b[0]! & 0x80) !== 0;
    const opcode = b[0]! & 0x0f;
    const masked = (b[1]! & 0x80) !== 0;
    let length = b[1]! & 0x7f;
    let at = 2;
    if (length === 126) {
      if (b.length < 4) return false;
      length = b.readUInt16BE(2);
      at = 4;
    } else if (length === 127) {
      if (b.length < 10) return false;
      const big = b.readBigUInt64BE(2);
      if (big > BigInt(MAX_MESSAGE_BYTES)) throw new BulkheadError("WebSocket protocol error: a frame is too large");
      length = Number(big);
      at = 10;
    }
    const maskAt = at;
    if (masked) at += 4;
    if (b.length < at + length) return false;
    const payload = Buffer.from(b.subarray(at, at + length));
    if (masked) for (let i = 0; i < length; i++) payload[i] = payload[i]! ^ b[maskAt + (i & 3)]!;
    this.buffer = b.subarray(at + length);
    this.onFrame(fin, opcode, payload);
    return true;
  }

  private onFrame(fin: boolean, opcode: number, payload: Buffer): void {
    switch (opcode) {
      case OP_PING:
        if (!this.closeSent) this.sendFrame(OP_PONG, payload).catch(() => undefined);
        return;
      case OP_PONG:
        return;
      case OP_CLOSE:
        this.closeCode = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        this.closeReason = payload.subarray(2).toString("utf8");
        // Answer the close (echoing the code), then the server ends the TCP connection.
        if (!this.closeSent) this.sendFrame(OP_CLOSE, payload.subarray(0, 2)).catch(() => undefined);
        this.socket.end();
        this.finish();
        return;
      case OP_TEXT:
      case OP_BINARY:
        if (this.fragments.length) throw new BulkheadError("WebSocket protocol error: a new message inside a fragmented one");
        this.fragmentsOp = opcode;
        break;
      case OP_CONTINUATION:
        if (!this.fragments.length) throw new BulkheadError("WebSocket protocol error: a continuation without a message");
        break;
      default:
        throw new BulkheadError(`WebSocket protocol error: unknown opcode ${opcode}`);
    }
    this.fragments.push(payload);
    this.fragmentsBytes += payload.length;
    if (this.fragmentsBytes > MAX_MESSAGE_BYTES) throw new BulkheadError("WebSocket protocol error: a message is too large");
    if (!fin) return;
    const data = Buffer.concat(this.fragments);
    this.fragments = [];
    this.fragmentsBytes = 0;
    this.push(this.fragmentsOp === OP_TEXT ? { type: "text", data: data.toString("utf8") } : { type: "binary", data });
  }

  private push(message: WebSocketMessage): void {
    this.queue.push(message);
    if (!this.paused && this.queue.length >= HIGH_WATER_MESSAGES) {
      this.paused = true;
      this.socket.pause();
    }
    this.wake();
  }

  private finish(error?: Error): void {
    if (!this.ended) {
      this.ended = true;
      if (this.closeCode === null) this.closeCode = 1006;
      if (error && !this.failure && this.closeCode === 1006) this.failure = error;
    }
    this.wake();
  }

  /** Resolves at the next message or end, or at `deadline`. */
  private woken(deadline: number | undefined): Promise<void> {
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const waiter = () => {
        if (timer) clearTimeout(timer);
        resolve();
      };
      this.waiters.add(waiter);
      if (deadline !== undefined) {
        timer = setTimeout(() => {
          this.waiters.delete(waiter);
          resolve();
        }, Math.max(0, deadline - Date.now()));
      }
    });
  }

  private wake(): void {
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const waiter of waiters) waiter();
  }
}
