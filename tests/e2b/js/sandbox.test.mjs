// Sandbox lifecycle through the JS SDK: create, getInfo, isRunning, list (metadata and state
// filters, pagination), setTimeout, pause and connect (resume), kill, the errors of a dead
// sandbox and of a bad key, fork, snapshots and network settings.
import assert from 'node:assert/strict'
import { after, test } from 'node:test'
import { AuthenticationError, Sandbox, SandboxError, SandboxNotFoundError, TimeoutError } from 'e2b'
import { RUN_ID, SandboxFactory, idsOf, listAll, pollUntil, runMetadata } from './helpers.mjs'

const factory = new SandboxFactory()
after(() => factory.cleanup())

test('create, getInfo, isRunning', async () => {
  const before = Date.now() - 1000
  const sbx = await factory.create({ metadata: { purpose: 'info', spaced: 'v w&x=y' }, envs: { GLOBAL_A: 'from-create' } })
  assert.ok(sbx.sandboxId)
  assert.equal(await sbx.isRunning(), true)

  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.ok(info.templateId)
  assert.deepEqual(info.metadata, runMetadata({ purpose: 'info', spaced: 'v w&x=y' }))
  assert.equal(info.state, 'running')
  assert.equal(info.envdVersion, '0.6.4')
  assert.ok(info.cpuCount >= 1 && info.memoryMB >= 1)
  assert.ok(info.startedAt.getTime() >= before && info.startedAt.getTime() <= Date.now() + 1000)
  // timeoutMs 300000 from the factory: the end is 300 s after the start.
  assert.ok(Math.abs((info.endAt - info.startedAt) / 1000 - 300) <= 2, `${info.startedAt} ${info.endAt}`)

  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).sandboxId, sbx.sandboxId)
  assert.equal((await sbx.commands.run('echo $GLOBAL_A')).stdout, 'from-create\n')
  // A command's own envs win over the sandbox's.
  assert.equal((await sbx.commands.run('echo $GLOBAL_A', { envs: { GLOBAL_A: 'per-command' } })).stdout, 'per-command\n')
})

test('default user and home', async () => {
  const sbx = await factory.create()
  const r = await sbx.commands.run('id -un; id -u; echo $HOME; pwd')
  assert.equal(r.stdout, 'user\n1000\n/home/user\n/home/user\n')
})

test('list: metadata filter and pagination', async () => {
  const group = `list-${RUN_ID}`
  const made = new Set()
  for (let i = 0; i < 3; i++) made.add((await factory.create({ metadata: { group } })).sandboxId)
  const other = (await factory.create({ metadata: { group: `${group}-other` } })).sandboxId

  const query = { metadata: { run: RUN_ID, group } }
  assert.deepEqual(idsOf(await listAll({ query })), made)

  const paginator = Sandbox.list({ query, limit: 2 })
  assert.equal(paginator.hasNext, true)
  const first = await paginator.nextItems()
  assert.equal(first.length, 2)
  assert.equal(paginator.hasNext, true)
  const second = await paginator.nextItems()
  assert.equal(second.length, 1)
  assert.equal(paginator.hasNext, false)
  assert.deepEqual(new Set([...idsOf(first), ...idsOf(second)]), made)

  const spaced = (await factory.create({ metadata: { group: `${group} spaced`, k: 'a b/c?d=e' } })).sandboxId
  assert.deepEqual(idsOf(await listAll({ query: { metadata: { run: RUN_ID, k: 'a b/c?d=e' } } })), new Set([spaced]))
  assert.deepEqual(idsOf(await listAll({ query: { metadata: { run: RUN_ID, k: 'a b' } } })), new Set())
  assert.ok(!idsOf(await listAll({ query })).has(other))
  for (const info of await listAll({ query })) {
    assert.equal(info.state, 'running')
    assert.equal(info.metadata.group, group)
  }
})

test('pause, list by state, connect resumes', async () => {
  const group = `pause-${RUN_ID}`
  const sbx = await factory.create({ metadata: { group } })
  const stays = await factory.create({ metadata: { group } })
  await sbx.files.write('/home/user/before-pause.txt', 'kept across pause')
  const sleeper = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })

  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal(await Sandbox.pause(sbx.sandboxId), false) // already paused: 409

  const metadata = { run: RUN_ID, group }
  const paused = await listAll({ query: { metadata, state: ['paused'] } })
  const running = await listAll({ query: { metadata, state: ['running'] } })
  const both = await listAll({ query: { metadata, state: ['running', 'paused'] } })
  const byDefault = await listAll({ query: { metadata } })
  assert.deepEqual(idsOf(paused), new Set([sbx.sandboxId]))
  assert.deepEqual(paused.map((i) => i.state), ['paused'])
  assert.deepEqual(idsOf(running), new Set([stays.sandboxId]))
  assert.deepEqual(idsOf(both), new Set([sbx.sandboxId, stays.sandboxId]))
  assert.deepEqual(idsOf(byDefault), new Set([sbx.sandboxId, stays.sandboxId]))

  const resumed = await Sandbox.connect(sbx.sandboxId)
  assert.equal(resumed.sandboxId, sbx.sandboxId)
  assert.equal((await resumed.getInfo()).state, 'running')
  assert.equal(await resumed.files.read('/home/user/before-pause.txt'), 'kept across pause')
  const pids = (await resumed.commands.list()).map((p) => p.pid)
  assert.ok(pids.includes(sleeper.pid), `${sleeper.pid} not in ${pids}`)
  assert.equal(await resumed.commands.kill(sleeper.pid), true)
})

test('connect to a running sandbox', async () => {
  const sbx = await factory.create()
  await sbx.files.write('/home/user/marker.txt', 'same sandbox')
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal(again.sandboxId, sbx.sandboxId)
  assert.equal(await again.files.read('/home/user/marker.txt'), 'same sandbox')
  assert.equal(await again.connect(), again)
})

test('setTimeout moves the end', async () => {
  const sbx = await factory.create()
  const t0 = Date.now()
  await sbx.setTimeout(900_000)
  const t1 = Date.now()
  const end = (await sbx.getInfo()).endAt.getTime()
  assert.ok(end >= t0 + 898_000 && end <= t1 + 902_000, `${new Date(t0)} ${new Date(end)}`)
  await Sandbox.setTimeout(sbx.sandboxId, 120_000)
  assert.ok((await Sandbox.getInfo(sbx.sandboxId)).endAt.getTime() <= Date.now() + 122_000)
})

test('timeout expiry kills the sandbox', async () => {
  const sbx = await factory.create()
  await sbx.setTimeout(1000)
  const gone = await pollUntil(async () => {
    try {
      await Sandbox.getInfo(sbx.sandboxId)
      return false
    } catch (e) {
      if (e instanceof SandboxNotFoundError) return true
      throw e
    }
  }, 60_000, 500)
  assert.equal(gone, true, 'the sandbox outlived its 1 s timeout by a minute')
  assert.equal(await sbx.isRunning(), false)
})

test('kill and the errors of a dead sandbox', async () => {
  const sbx = await factory.create()
  const id = sbx.sandboxId
  assert.equal(await sbx.kill(), true)
  assert.equal(await Sandbox.kill(id), false)
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(sbx.getInfo(), SandboxNotFoundError)
  await assert.rejects(Sandbox.setTimeout(id, 60_000), SandboxNotFoundError)
  await assert.rejects(Sandbox.connect(id), SandboxNotFoundError)
  await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError)
  await assert.rejects(sbx.files.read('/etc/hostname'), TimeoutError)
  await assert.rejects(sbx.files.list('/'), TimeoutError)
  assert.ok(!idsOf(await listAll({ query: { metadata: { run: RUN_ID } } })).has(id))
})

test('unknown sandbox id', async () => {
  await assert.rejects(Sandbox.getInfo('sbx-does-not-exist'), SandboxNotFoundError)
  assert.equal(await Sandbox.kill('sbx-does-not-exist'), false)
})

test('bad API key', async () => {
  const apiKey = 'e2b_' + '0'.repeat(40)
  assert.notEqual(process.env.E2B_API_KEY, apiKey)
  await assert.rejects(Sandbox.create({ apiKey, metadata: runMetadata() }), AuthenticationError)
  await assert.rejects(Sandbox.list({ apiKey }).nextItems(), AuthenticationError)
})

test('fork', async () => {
  const sbx = await factory.create()
  await sbx.files.write('/home/user/forked.txt', 'from the parent')
  const results = await sbx.fork({ count: 2, timeoutMs: 120_000 })
  const forks = results.filter((r) => r instanceof Sandbox)
  try {
    assert.equal(results.length, 2)
    assert.equal(forks.length, 2, String(results))
    const ids = new Set(forks.map((f) => f.sandboxId))
    assert.equal(ids.size, 2)
    assert.ok(!ids.has(sbx.sandboxId))
    for (const fork of forks) {
      assert.equal(await fork.files.read('/home/user/forked.txt'), 'from the parent')
      await fork.files.write('/home/user/forked.txt', `changed in ${fork.sandboxId}`)
    }
    assert.equal(await sbx.isRunning(), true)
    assert.equal(await sbx.files.read('/home/user/forked.txt'), 'from the parent')
  } finally {
    for (const fork of forks) await fork.kill()
  }
})

test('snapshots: create, list, use, delete', async () => {
  const sbx = await factory.create()
  await sbx.files.write('/home/user/snap.txt', 'in the snapshot')
  const snapshot = await sbx.createSnapshot()
  assert.ok(snapshot.snapshotId)
  try {
    assert.equal((await sbx.getInfo()).state, 'running')
    const paginator = sbx.listSnapshots()
    const listed = []
    while (paginator.hasNext) listed.push(...(await paginator.nextItems()))
    assert.ok(listed.some((s) => s.snapshotId === snapshot.snapshotId), JSON.stringify(listed))
    const fromSnapshot = await factory.create({ template: snapshot.snapshotId })
    assert.equal(await fromSnapshot.files.read('/home/user/snap.txt'), 'in the snapshot')
    await fromSnapshot.kill()
  } finally {
    assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId), true)
  }
  assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId), false)
})

test('network settings in getInfo', async () => {
  // No traffic leaves the sandbox here: only what the API reports is checked.
  const closed = await factory.create({ allowInternetAccess: false })
  assert.equal((await closed.getInfo()).allowInternetAccess, false)
  // Read, not probed: a network namespace with only loopback has no way out.
  assert.equal((await closed.commands.run('ls /sys/class/net')).stdout, 'lo\n')

  const open = await factory.create()
  assert.notEqual((await open.getInfo()).allowInternetAccess, false)

  const ruled = await factory.create({ network: { allowOut: ['198.51.100.7'], denyOut: ['0.0.0.0/0'] } })
  let network = (await ruled.getInfo()).network
  assert.deepEqual(network?.allowOut, ['198.51.100.7'])
  assert.deepEqual(network?.denyOut, ['0.0.0.0/0'])

  await ruled.updateNetwork({ allowOut: ['203.0.113.9'], denyOut: ['0.0.0.0/0'] })
  network = (await ruled.getInfo()).network
  assert.deepEqual(network?.allowOut, ['203.0.113.9'])
  assert.deepEqual(network?.denyOut, ['0.0.0.0/0'])
})

test('a paused sandbox is not running until connect', async () => {
  // As E2B's proxy: without autoResume a paused sandbox answers its envd traffic 502 (not
  // found), so the SDK reports it not running, and nothing resumes it but connect.
  const sbx = await factory.create()
  await sbx.files.write('/home/user/paused.txt', 'kept')
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError)
  await assert.rejects(sbx.files.read('/home/user/paused.txt'), TimeoutError)
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal((await sbx.getInfo()).lifecycle?.autoResume, false)
  await sbx.connect()
  assert.equal(await sbx.isRunning(), true)
  assert.equal(await sbx.files.read('/home/user/paused.txt'), 'kept')
})

test('lifecycle autoResume: traffic resumes a paused sandbox', async () => {
  const sbx = await factory.create({ lifecycle: { onTimeout: 'pause', autoResume: true } })
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
  await sbx.files.write('/home/user/auto.txt', 'auto')
  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal(await sbx.files.read('/home/user/auto.txt'), 'auto')
  assert.equal((await sbx.getInfo()).state, 'running')
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.isRunning(), true) // the health probe too
  assert.equal((await sbx.getInfo()).state, 'running')
})

test('lifecycle: pause on timeout', async () => {
  const sbx = await factory.create({ lifecycle: { onTimeout: 'pause' } })
  assert.equal((await sbx.getInfo()).lifecycle?.onTimeout, 'pause')
  await sbx.files.write('/home/user/kept.txt', 'through the auto-pause')
  await sbx.setTimeout(1000)
  const paused = await pollUntil(async () => (await Sandbox.getInfo(sbx.sandboxId)).state === 'paused', 60_000, 500)
  assert.equal(paused, true)
  const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
  assert.equal((await resumed.getInfo()).state, 'running')
  assert.equal(await resumed.files.read('/home/user/kept.txt'), 'through the auto-pause')
})

test('getMetrics', async () => {
  const sbx = await factory.create()
  const metrics = await sbx.getMetrics()
  assert.ok(metrics.length >= 1)
  const m = metrics[metrics.length - 1]
  assert.ok(m.cpuCount >= 1)
  assert.ok(m.cpuUsedPct >= 0)
  assert.ok(m.memUsed > 0 && m.memUsed <= m.memTotal)
  assert.ok(Math.abs(m.timestamp.getTime() - Date.now()) < 120_000)
})

test('list: order, template, startedAfter', async () => {
  const group = `order-${RUN_ID}`
  const first = await factory.create({ metadata: { group } })
  const second = await factory.create({ metadata: { group } })
  const metadata = { run: RUN_ID, group }
  const asc = await listAll({ query: { metadata }, order: 'asc' })
  const desc = await listAll({ query: { metadata }, order: 'desc' })
  const times = asc.map((i) => i.startedAt.getTime())
  assert.deepEqual(times, [...times].sort((a, b) => a - b))
  assert.deepEqual(desc.map((i) => i.sandboxId), asc.map((i) => i.sandboxId).reverse())
  assert.deepEqual(idsOf(asc), new Set([first.sandboxId, second.sandboxId]))
  assert.deepEqual(idsOf(await listAll({ query: { metadata, template: 'base' } })), idsOf(asc))
  assert.deepEqual(idsOf(await listAll({ query: { metadata, template: 'no-such-template' } })), new Set())
  const later = new Date(Date.now() + 3600_000)
  assert.deepEqual(idsOf(await listAll({ query: { metadata, startedAfter: later } })), new Set())
  const earlier = new Date(Date.now() - 3600_000)
  assert.deepEqual(idsOf(await listAll({ query: { metadata, startedAfter: earlier } })), idsOf(asc))
})

test('unknown template', async () => {
  await assert.rejects(Sandbox.create('no-such-template', { metadata: runMetadata() }), SandboxError)
})
