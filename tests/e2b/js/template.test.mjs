// Template builds through the JS SDK (Template.build, buildInBackground, getBuildStatus, tags,
// exists): the JS SDK hashes directories differently from Python's, uploads its file sets
// concurrently and sends chunked JSON; sandboxes from the built name start from its result.
import assert from 'node:assert/strict'
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { after, test } from 'node:test'
import { BuildError, Sandbox, Template, waitForFile } from 'e2b'
import { SandboxFactory } from './helpers.mjs'

const factory = new SandboxFactory()
const built = []
const context = mkdtempSync(join(tmpdir(), 'bulkhead-tpl-'))
writeFileSync(join(context, 'hello.txt'), 'hello from js\n')
mkdirSync(join(context, 'app'))
writeFileSync(join(context, 'app', 'run.sh'), '#!/bin/sh\necho app ran as $(id -un)\n')

after(async () => {
  await factory.cleanup()
  for (const name of built) {
    try {
      await Sandbox.deleteSnapshot(name)
    } catch {}
  }
  rmSync(context, { recursive: true, force: true })
})

const unique = (prefix) => `${prefix}-${randomBytes(5).toString('hex')}`

function definition() {
  return Template({ fileContextPath: context })
    .fromBaseImage()
    .copy('hello.txt', '/opt/js/hello.txt')
    .copy('app', '/opt/js/app/', { mode: 0o755 })
    .setEnvs({ GREETING: 'hi from js' })
    .runCmd('echo built-by=$(whoami) > /opt/js/env.txt', { user: 'root' })
    .runCmd('echo js step output')
    .setWorkdir('/opt/js')
    .setStartCmd('echo started > /tmp/js-started && sleep infinity', waitForFile('/tmp/js-started'))
}

test('a built template starts sandboxes with its files, env, workdir and start command', async () => {
  const name = unique('js-tpl')
  built.push(name)
  const logs = []
  const info = await Template.build(definition(), name, { onBuildLogs: (entry) => logs.push(entry.message) })
  assert.equal(info.templateId, name)
  assert.ok(logs.some((m) => m.includes('js step output')), logs.join('\n'))
  assert.equal(await Template.exists(name), true)

  const sbx = await factory.create({ template: name })
  const out = await sbx.commands.run('cat hello.txt env.txt /tmp/js-started && ./app/run.sh && pwd && echo $GREETING')
  for (const expected of ['hello from js', 'built-by=root', 'started', 'app ran as user', '/opt/js', 'hi from js']) {
    assert.ok(out.stdout.includes(expected), `${expected} in ${out.stdout}`)
  }
})

test('a failing step rejects with BuildError and its reason', async () => {
  const name = unique('js-fail')
  built.push(name)
  const template = Template({ fileContextPath: context }).fromBaseImage().runCmd('exit 7')
  await assert.rejects(Template.build(template, name), (error) => error instanceof BuildError && /7/.test(error.message))
})

test('buildInBackground, getBuildStatus and tags', async () => {
  const name = unique('js-bg')
  built.push(name)
  const template = Template({ fileContextPath: context }).fromBaseImage().runCmd('echo tagged > /tmp/tag')
  const info = await Template.buildInBackground(template, `${name}:v1`)
  let status = await Template.getBuildStatus(info)
  const deadline = Date.now() + 120_000
  while ((status.status === 'building' || status.status === 'waiting') && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200))
    status = await Template.getBuildStatus(info, { logsOffset: 0 })
  }
  assert.equal(status.status, 'ready')
  await Template.assignTags(`${name}:v1`, 'prod')
  const tags = (await Template.getTags(name)).map((t) => t.tag).sort()
  assert.deepEqual(tags, ['prod', 'v1'])
  const sbx = await factory.create({ template: `${name}:prod` })
  assert.equal((await sbx.commands.run('cat /tmp/tag')).stdout, 'tagged\n')
})
