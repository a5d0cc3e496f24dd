// Shared by the tests: a client for the daemon the environment names (BULKHEAD_URL and
// BULKHEAD_API_KEY, as tests/integration/test_sdk_typescript.py sets them), sandboxes that
// are always deleted, and small stream helpers.
import assert from "node:assert/strict";
import { Bulkhead, type Sandbox, type SandboxCreateOptions } from "@bulkhead/sdk";

export function client(): Bulkhead {
  assert.ok(process.env.BULKHEAD_URL, "set BULKHEAD_URL (and BULKHEAD_API_KEY) to a running bulkhead daemon");
  return new Bulkhead();
}

/** Runs `body` with a fresh sandbox; deletes it afterwards whatever happened. */
export async function withSandbox<T>(
  bulkhead: Bulkhead,
  body: (sandbox: Sandbox) => Promise<T>,
  options: SandboxCreateOptions = {},
): Promise<T> {
  const sandbox = await bulkhead.sandboxes.create(options);
  try {
    return await body(sandbox);
  } finally {
    await sandbox[Symbol.asyncDispose]();
  }
}

/** Everything an async iterable yields. */
export async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of iterable) out.push(item);
  return out;
}

/**
 * Settles like `promise`, or fails after `ms` so a broken stream fails the test instead of
 * hanging it. (A guard, not a timing assertion: `ms` is far above any expected wait.)
 */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Calls `attempt` until it gives a value (not undefined), every 100 ms, for at most `ms`.
 * (A guard against a hang, not a timing assertion: `ms` is far above any expected wait.)
 */
export async function poll<T>(attempt: () => Promise<T | undefined>, what: string, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await attempt();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not there after ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Asserts that `promise` rejects with an instance of `errorClass` carrying `code`. */
export async function rejectsWith(
  promise: Promise<unknown>,
  errorClass: abstract new (...args: never[]) => Error,
  code?: string,
): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof errorClass, `expected ${errorClass.name}, got ${String(error)}`);
    if (code !== undefined) assert.equal((error as { code?: string }).code, code, String(error));
    return true;
  });
}
