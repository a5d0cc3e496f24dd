// sandbox.pty through the JS SDK: create, sendInput, resize (seen by `stty size`), kill.
import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'
import { CommandExitError } from 'e2b'
import { SandboxFactory, pollUntil } from './helpers.mjs'

const factory = new SandboxFactory()
let sbx
before(async () => {
  sbx = await factory.create()
})
after(() => factory.cleanup())

const input = (text) => new TextEncoder().encode(text)

// Collects a PTY's output; `until(text)` waits (bounded) for text to appear after `mark()`.
class Screen {
  chunks = []
  from = 0
  onData = (data) => {
    this.chunks.push(Buffer.from(data))
  }
  text() {
    return Buffer.concat(this.chunks).toString('utf8').slice(this.from)
  }
  mark() {
    this.from = Buffer.concat(this.chunks).toString('utf8').length
  }
  async until(text) {
    await pollUntil(() => this.text().includes(text))
    assert.ok(this.text().includes(text), `no ${JSON.stringify(text)} in ${JSON.stringify(this.text())}`)
    return this.text()
  }
}

test('pty: input, resize and exit', async () => {
  const screen = new Screen()
  const handle = await sbx.pty.create({ cols: 80, rows: 24, onData: screen.onData, timeoutMs: 60_000 })
  assert.ok(handle.pid > 0)
  // $((...)) makes the marker differ from the echoed input line.
  await sbx.pty.sendInput(handle.pid, input('stty size; echo MARK$((40+2))\n'))
  let out = await screen.until('MARK42\r\n')
  assert.ok(out.includes('24 80\r\n'), out)

  await sbx.pty.resize(handle.pid, { cols: 100, rows: 30 })
  screen.mark()
  await sbx.pty.sendInput(handle.pid, input('stty size; echo SIZE$((1+1)); tty; echo $TERM; id -un\n'))
  out = await screen.until('\r\nuser\r\n')
  assert.ok(out.includes('30 100\r\nSIZE2\r\n'), out)
  assert.ok(out.includes('/dev/pts/'), out)
  assert.ok(out.includes('xterm-256color'), out)

  await sbx.pty.sendInput(handle.pid, input('exit 0\n'))
  const r = await handle.wait()
  assert.equal(r.exitCode, 0)
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === handle.pid))
})

test('pty: kill', async () => {
  const handle = await sbx.pty.create({ cols: 40, rows: 10, onData: () => {}, timeoutMs: 60_000 })
  assert.ok((await sbx.commands.list()).some((p) => p.pid === handle.pid))
  assert.equal(await sbx.pty.kill(handle.pid), true)
  await assert.rejects(handle.wait(), CommandExitError)
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === handle.pid))
  assert.equal(await sbx.pty.kill(handle.pid), false)
})

test('pty: as root with cwd and envs', async () => {
  const screen = new Screen()
  const handle = await sbx.pty.create({
    cols: 80, rows: 24, onData: screen.onData, user: 'root', cwd: '/tmp', envs: { PTY_VAR: 'pv' }, timeoutMs: 60_000,
  })
  await sbx.pty.sendInput(handle.pid, input('echo "$(id -un):$(pwd):$PTY_VAR:END$((2+3))"\n'))
  const out = await screen.until('END5')
  assert.ok(out.includes('root:/tmp:pv:END5'), out)
  assert.equal(await handle.kill(), true)
})

test('pty: connect after disconnect', async () => {
  const first = new Screen()
  const handle = await sbx.pty.create({ cols: 80, rows: 24, onData: first.onData, timeoutMs: 0 })
  const pid = handle.pid
  await sbx.pty.sendInput(pid, input('echo ONE$((0+1))\n'))
  await first.until('ONE1')
  await handle.disconnect()

  const second = new Screen()
  const again = await sbx.pty.connect(pid, { onData: second.onData, timeoutMs: 60_000 })
  assert.equal(again.pid, pid)
  await sbx.pty.sendInput(pid, input('echo TWO$((1+1))\n'))
  await second.until('TWO2')
  assert.equal(await sbx.pty.kill(pid), true)
  await assert.rejects(again.wait(), CommandExitError)
})
