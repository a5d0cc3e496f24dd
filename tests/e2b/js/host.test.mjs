// sandbox.getHost(port): a server started inside the sandbox (a background command) answers
// through the E2B front (the sandbox's domain is the front's) when the request's Host header is
// getHost(port); with allowPublicTraffic false only to requests with the sandbox's
// trafficAccessToken. What cannot reach a server answers as E2B's proxy: 502 for a sandbox
// gone or paused (unless autoResume), 502 "port is not open" for a closed port.
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, test } from 'node:test'
import { SandboxFactory, fetchWithHost, pollUntil } from './helpers.mjs'

const factory = new SandboxFactory()
after(() => factory.cleanup())

// A python http.server on `port` serving index.html = `text`, once it answers.
async function serve(sbx, port, text) {
  await sbx.files.write('/home/user/www/index.html', text)
  await sbx.commands.run(`cd /home/user/www && exec python3 -m http.server ${port}`, { background: true, timeoutMs: 0 })
  const probe = `import socket; socket.create_connection(('127.0.0.1', ${port})).close()`
  await sbx.commands.run(`for i in $(seq 1 300); do python3 -c "${probe}" 2>/dev/null && exit 0; sleep 0.1; done; exit 1`)
}

const json = async (host) => {
  const r = await fetchWithHost(host, '/')
  return [r.status, JSON.parse(r.body.toString())]
}
const notFound = (sandboxId) => [502, { sandboxId, message: 'The sandbox was not found', code: 502 }]

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
    const missing = "Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing"
    assert.deepEqual(await json(host), [403, { sandboxId: sbx.sandboxId, message: missing, code: 403 }])
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

test('a closed port answers port is not open', async () => {
  const sbx = await factory.create()
  assert.equal(sbx.sandboxDomain, `localhost:${new URL(process.env.E2B_SANDBOX_URL).port}`)
  assert.deepEqual(await json(sbx.getHost(8099)), [
    502,
    { sandboxId: sbx.sandboxId, message: 'The sandbox is running but port is not open', port: 8099, code: 502 },
  ])
})

test('a killed sandbox host answers 502 not found', async () => {
  const sbx = await factory.create()
  await serve(sbx, 8080, 'up')
  assert.equal((await fetchWithHost(sbx.getHost(8080), '/')).body.toString(), 'up')
  await sbx.kill()
  assert.deepEqual(await json(sbx.getHost(8080)), notFound(sbx.sandboxId))
})

test('a paused sandbox host resumes it only with autoResume', async () => {
  const plain = await factory.create()
  await serve(plain, 8080, 'plain')
  assert.equal(await plain.pause(), true)
  assert.deepEqual(await json(plain.getHost(8080)), notFound(plain.sandboxId))
  assert.equal(await plain.isRunning(), false)

  const auto = await factory.create({ lifecycle: { onTimeout: 'pause', autoResume: true } })
  await serve(auto, 8080, 'auto')
  assert.equal(await auto.pause(), true)
  const r = await fetchWithHost(auto.getHost(8080), '/')
  assert.deepEqual([r.status, r.body.toString()], [200, 'auto'])
  assert.equal(await auto.isRunning(), true)
})
