// sandbox.getHost(port): a server started inside the sandbox (a background command) answers
// through the daemon's main API port when the request's Host header is getHost(port).
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, test } from 'node:test'
import { SandboxFactory, fetchWithHost, pollUntil } from './helpers.mjs'

const factory = new SandboxFactory()
after(() => factory.cleanup())

test('getHost reaches a server in the sandbox', async () => {
  const sbx = await factory.create()
  const token = randomUUID()
  await sbx.files.write('/home/user/www/token.txt', token)
  const server = await sbx.commands.run('cd /home/user/www && exec python3 -m http.server 8000', { background: true, timeoutMs: 0 })
  try {
    const host = sbx.getHost(8000)
    assert.equal(host, `8000-${sbx.sandboxId}.${sbx.sandboxDomain}`)
    // The server takes a moment to listen: retry (bounded) until it answers.
    const r = await pollUntil(async () => {
      const res = await fetchWithHost(host, '/token.txt')
      return res.status === 200 ? res : null
    }, 30_000)
    assert.ok(r, 'no answer through getHost(8000)')
    assert.equal(r.body.toString(), token)
    assert.equal((await fetchWithHost(host, '/missing.txt')).status, 404) // python answered, not the proxy
  } finally {
    assert.equal(await sbx.commands.kill(server.pid), true)
  }
})
