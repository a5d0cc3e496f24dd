// sandbox.commands through the JS SDK: foreground runs with streaming callbacks, background runs
// with wait/connect, stdin, list and kill, timeouts, non-zero exits, cwd/envs/user.
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { after, before, test } from 'node:test'
import { AuthenticationError, CommandExitError, TimeoutError } from 'e2b'
import { SandboxFactory, waitForFile } from './helpers.mjs'

const factory = new SandboxFactory()
let sbx
before(async () => {
  sbx = await factory.create()
})
after(() => factory.cleanup())

const sha256 = (text) => createHash('sha256').update(text).digest('hex')

test('foreground output and exit code', async () => {
  const r = await sbx.commands.run('echo hello; echo oops >&2')
  assert.deepEqual([r.exitCode, r.stdout, r.stderr, r.error], [0, 'hello\n', 'oops\n', undefined])
})

test('callbacks stream while the command runs', async () => {
  // The first line reaches onStdout while the command still runs: the callback releases the
  // command (through another SDK call), which then prints the second line.
  const marker = '/tmp/cmd-stream-go'
  let out = ''
  let err = ''
  let released
  const r = await sbx.commands.run(`echo first; ${waitForFile(marker)} && echo second; echo to-err >&2`, {
    onStdout: (chunk) => {
      out += chunk
      if (out.includes('first') && !released) released = sbx.files.write(marker, 'go')
    },
    onStderr: (chunk) => {
      err += chunk
    },
  })
  await released
  assert.equal(r.stdout, 'first\nsecond\n')
  assert.equal(out, 'first\nsecond\n')
  assert.equal(err, 'to-err\n')
  assert.equal(r.stderr, 'to-err\n')
})

test('large and multibyte output', async () => {
  let r = await sbx.commands.run('seq 1 200000')
  let expected = ''
  for (let i = 1; i <= 200000; i++) expected += `${i}\n`
  assert.equal(sha256(r.stdout), sha256(expected))
  r = await sbx.commands.run("for i in $(seq 1 20000); do printf 'é'; done")
  assert.equal(r.stdout, 'é'.repeat(20000))
})

test('non-zero exit rejects with CommandExitError', async () => {
  await assert.rejects(sbx.commands.run('echo partial; echo bad >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError)
    assert.deepEqual([e.exitCode, e.stdout, e.stderr], [3, 'partial\n', 'bad\n'])
    assert.ok(e.error)
    return true
  })
})

test('cwd, envs and user', async () => {
  let r = await sbx.commands.run('pwd; echo "$FOO|$BAR"; id -un; id -u', { cwd: '/tmp', envs: { FOO: 'foo value', BAR: 'b=1' } })
  assert.equal(r.stdout, '/tmp\nfoo value|b=1\nuser\n1000\n')
  r = await sbx.commands.run('id -un; id -u; echo $HOME', { user: 'root' })
  assert.equal(r.stdout, 'root\n0\n/root\n')
  r = await sbx.commands.run('touch /root/e2b-js-root-only && echo ok', { user: 'root' })
  assert.equal(r.stdout, 'ok\n')
  await assert.rejects(sbx.commands.run('touch /root/e2b-js-user-cannot'), CommandExitError)
})

test('background: wait', async () => {
  const handle = await sbx.commands.run('echo started; echo err >&2; exit 0', { background: true })
  assert.ok(handle.pid > 0)
  const r = await handle.wait()
  assert.deepEqual([r.exitCode, r.stdout, r.stderr], [0, 'started\n', 'err\n'])
})

test('background: failure on wait', async () => {
  const handle = await sbx.commands.run('echo x; exit 7', { background: true })
  await assert.rejects(handle.wait(), (e) => e instanceof CommandExitError && e.exitCode === 7 && e.stdout === 'x\n')
})

test('background: onStdout callbacks', async () => {
  const chunks = []
  const handle = await sbx.commands.run('echo one; echo two', { background: true, onStdout: (c) => chunks.push(c) })
  await handle.wait()
  assert.equal(chunks.join(''), 'one\ntwo\n')
})

test('connect to a running command', async () => {
  const go = '/tmp/cmd-connect-go'
  // Read up to "before" first, so it is known to be out before the disconnect.
  let sawBefore
  const before = new Promise((resolve) => (sawBefore = resolve))
  const handle = await sbx.commands.run(`echo before; ${waitForFile(go)} && echo after`, {
    background: true,
    timeoutMs: 0,
    onStdout: (chunk) => chunk.includes('before') && sawBefore(),
  })
  const pid = handle.pid
  await before
  await handle.disconnect()

  const seen = []
  const attached = await sbx.commands.connect(pid, { onStdout: (c) => seen.push(c) })
  assert.equal(attached.pid, pid)
  await sbx.files.write(go, 'go')
  const r = await attached.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'after\n') // only what comes after the connect
  assert.equal(seen.join(''), 'after\n')
})

test('stdin: send and close', async () => {
  const handle = await sbx.commands.run('cat; echo done', { background: true, stdin: true })
  await sbx.commands.sendStdin(handle.pid, 'hello\n')
  await handle.sendStdin(new Uint8Array([0x62, 0x79, 0x74, 0x65, 0x73, 0x20, 0x00, 0x01, 0x0a]))
  await sbx.commands.closeStdin(handle.pid)
  const r = await handle.wait()
  assert.equal(r.stdout, 'hello\nbytes \x00\x01\ndone\n')
})

test('list and kill', async () => {
  const handle = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0, envs: { TAGGED: 'yes' }, cwd: '/tmp' })
  const info = (await sbx.commands.list()).find((p) => p.pid === handle.pid)
  assert.ok(info, 'the command is listed')
  assert.equal(info.cmd, '/bin/bash')
  assert.deepEqual(info.args, ['-l', '-c', 'sleep 600'])
  assert.equal(info.envs.TAGGED, 'yes')
  assert.equal(info.cwd, '/tmp')

  assert.equal(await sbx.commands.kill(handle.pid), true)
  await assert.rejects(handle.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1)
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === handle.pid))
  assert.equal(await sbx.commands.kill(handle.pid), false)
})

test('handle.kill', async () => {
  const handle = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
  assert.equal(await handle.kill(), true)
  await assert.rejects(handle.wait(), CommandExitError)
})

test('timeout rejects and ends the process', async () => {
  await assert.rejects(sbx.commands.run('echo $$ > /tmp/cmd-timeout.pid; sleep 600', { timeoutMs: 1000 }), TimeoutError)
  const pid = (await sbx.files.read('/tmp/cmd-timeout.pid')).trim()
  const r = await sbx.commands.run(
    `for i in $(seq 1 100); do kill -0 ${pid} 2>/dev/null || break; sleep 0.1; done; kill -0 ${pid} 2>/dev/null && echo alive || echo gone`,
  )
  assert.equal(r.stdout, 'gone\n')
})

test('killing the sandbox during a command rejects with what happened', async () => {
  // As with E2B: the stream is cut, the SDK's health probe gets 502 and the error says so.
  const sandbox = await factory.create()
  const handle = await sandbox.commands.run('sleep 60', { background: true })
  await sandbox.kill()
  const err = await handle.wait().catch((e) => e)
  assert.ok(err instanceof TimeoutError, String(err))
  assert.match(err.message, /sandbox was killed or reached its end of life/)
})

test('unknown pid', async () => {
  assert.equal(await sbx.commands.kill(999999), false)
})

test('unknown user', async () => {
  await assert.rejects(sbx.commands.run('true', { user: 'no-such-user' }), AuthenticationError)
})
