// sandbox.getHost(port): a server started inside the sandbox (a background command) answers
// through the daemon's main API port when the request's Host header is getHost(port); with
// allowPublicTraffic false only to requests with the sandbox's trafficAccessToken.
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

test('allowPublicTraffic false needs the traffic access token', async () => {
  const sbx = await factory.create({ network: { allowPublicTraffic: false } })
  const token = sbx.trafficAccessToken
  assert.ok(token, 'no trafficAccessToken')
  await sbx.files.write('/home/user/www/index.html', 'private')
  const server = await sbx.commands.run('cd /home/user/www && exec python3 -m http.server 8080', { background: true, timeoutMs: 0 })
  try {
    const host = sbx.getHost(8080)
    const headers = { 'e2b-traffic-access-token': token }
    const r = await pollUntil(async () => {
      const res = await fetchWithHost(host, '/', headers)
      return res.status === 200 ? res : null
    }, 30_000)
    assert.ok(r, 'no answer with the token')
    assert.equal(r.body.toString(), 'private')
    assert.equal((await fetchWithHost(host, '/')).status, 403)
    assert.equal((await fetchWithHost(host, '/', { 'e2b-traffic-access-token': '0'.repeat(64) })).status, 403)
  } finally {
    assert.equal(await sbx.commands.kill(server.pid), true)
  }
})

test('allowPublicTraffic true needs no token', async () => {
  const sbx = await factory.create({ network: { allowPublicTraffic: true } })
  assert.equal(sbx.trafficAccessToken, undefined)
  await sbx.files.write('/home/user/www/index.html', 'public')
  const server = await sbx.commands.run('cd /home/user/www && exec python3 -m http.server 8080', { background: true, timeoutMs: 0 })
  try {
    const r = await pollUntil(async () => {
      const res = await fetchWithHost(sbx.getHost(8080), '/')
      return res.status === 200 ? res : null
    }, 30_000)
    assert.ok(r, 'no answer without a token')
    assert.equal(r.body.toString(), 'public')
  } finally {
    assert.equal(await sbx.commands.kill(server.pid), true)
  }
})
