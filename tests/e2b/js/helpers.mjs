// Shared by the *.test.mjs files: the official `e2b` npm SDK, unmodified, against a real
// bulkhead daemon's E2B front. tests/integration/test_e2b_sdk_js.py starts the daemon and runs
// `node --test` here; the SDK finds the daemon only through E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY; sandbox ports are reached at the front's address by Host header (sandbox.getHost).
import { randomBytes } from 'node:crypto'
import http from 'node:http'
import { Sandbox } from 'e2b'

for (const name of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[name]) throw new Error(`set ${name} (tests/integration/test_e2b_sdk_js.py does)`)
}

// Every sandbox this run creates carries this metadata, so list queries see only ours.
export const RUN_ID = randomBytes(6).toString('hex')

export function runMetadata(extra = {}) {
  return { suite: 'e2b-js', run: RUN_ID, ...extra }
}

// Creates sandboxes and kills whatever is left of them in cleanup().
export class SandboxFactory {
  made = []

  async create(opts = {}) {
    const sandbox = await Sandbox.create({
      timeoutMs: 300_000,
      ...opts,
      metadata: runMetadata(opts.metadata),
    })
    this.made.push(sandbox.sandboxId)
    return sandbox
  }

  async cleanup() {
    for (const id of this.made) {
      try {
        await Sandbox.kill(id)
      } catch {}
    }
  }
}

export async function listAll(opts) {
  const paginator = Sandbox.list(opts)
  const items = []
  while (paginator.hasNext) items.push(...(await paginator.nextItems()))
  return items
}

export const idsOf = (infos) => new Set(infos.map((i) => i.sandboxId))

// A shell loop that waits (at most ~30 s) for a file, so a test makes a command go on exactly
// when it wants, without racing a timer.
export const waitForFile = (path) =>
  `for i in $(seq 1 600); do [ -e ${path} ] && break; sleep 0.05; done; [ -e ${path} ]`

// Polls `probe` until it returns a truthy value or `ms` pass (a bounded wait, not a timing
// assertion); returns the last value.
export async function pollUntil(probe, ms = 20_000, interval = 200) {
  const deadline = Date.now() + ms
  let value
  while (Date.now() < deadline) {
    value = await probe()
    if (value) return value
    await new Promise((r) => setTimeout(r, interval))
  }
  return value
}

// GET `path` from the E2B front with the given Host header (and `headers`): sent to its
// address, as *.localhost need not resolve everywhere.
export function fetchWithHost(host, path, headers = {}) {
  const main = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = http.request(
      { hostname: main.hostname, port: main.port, path, method: 'GET', headers: { ...headers, host }, timeout: 10_000 },
      (res) => {
        const chunks = []
        res.on('data', (c) => chunks.push(c))
        res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks) }))
        res.on('error', reject)
      },
    )
    req.on('error', reject)
    req.on('timeout', () => req.destroy(new Error('timeout')))
    req.end()
  })
}
