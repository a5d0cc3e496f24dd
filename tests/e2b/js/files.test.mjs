// sandbox.files through the JS SDK: write/read (text, every byte value, 32 MiB), several files at
// once, octet-stream and gzip, list, exists, makeDir, rename, remove, getInfo, watchDir (a
// streaming RPC), and the not-found errors.
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { after, before, test } from 'node:test'
import { FileNotFoundError, FileType, FilesystemEventType, SandboxError, TimeoutError } from 'e2b'
import { SandboxFactory, pollUntil } from './helpers.mjs'

const factory = new SandboxFactory()
let sbx
before(async () => {
  sbx = await factory.create()
})
after(() => factory.cleanup())

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex')
const arrayBufferOf = (buf) => buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength)

function allBytes(times) {
  const data = new Uint8Array(256 * times)
  for (let i = 0; i < data.length; i++) data[i] = i % 256
  return data
}

test('write and read text', async () => {
  const info = await sbx.files.write('/home/user/t/hello.txt', 'héllo wörld\nline 2\n')
  assert.deepEqual([info.name, info.path, info.type], ['hello.txt', '/home/user/t/hello.txt', FileType.FILE])
  assert.equal(await sbx.files.read('/home/user/t/hello.txt'), 'héllo wörld\nline 2\n')
  assert.equal(await sbx.files.read('t/hello.txt'), 'héllo wörld\nline 2\n') // relative to home
  await sbx.files.write('/home/user/t/hello.txt', 'short')
  assert.equal(await sbx.files.read('/home/user/t/hello.txt'), 'short')
  assert.equal((await sbx.commands.run('stat -c %U /home/user/t/hello.txt')).stdout, 'user\n')
})

test('every byte value (ArrayBuffer and Blob)', async () => {
  const data = allBytes(16)
  await sbx.files.write('/tmp/f/all-bytes.bin', arrayBufferOf(data))
  assert.deepEqual(await sbx.files.read('/tmp/f/all-bytes.bin', { format: 'bytes' }), data)
  const r = await sbx.commands.run('sha256sum /tmp/f/all-bytes.bin')
  assert.equal(r.stdout.split(' ')[0], sha256(data))
  await sbx.files.write('/tmp/f/blob.bin', new Blob([data]))
  const blob = await sbx.files.read('/tmp/f/blob.bin', { format: 'blob' })
  assert.deepEqual(new Uint8Array(await blob.arrayBuffer()), data)
})

test('large file round trip (32 MiB)', async () => {
  const data = randomBytes(32 << 20)
  const digest = sha256(data)
  const info = await sbx.files.write('/tmp/f/large.bin', arrayBufferOf(data))
  assert.equal(info.path, '/tmp/f/large.bin')
  assert.equal((await sbx.commands.run('sha256sum /tmp/f/large.bin')).stdout.split(' ')[0], digest)
  assert.equal((await sbx.files.getInfo('/tmp/f/large.bin')).size, data.length)
  const back = await sbx.files.read('/tmp/f/large.bin', { format: 'bytes' })
  assert.equal(back.length, data.length)
  assert.equal(sha256(back), digest)
  // Streamed download: the chunks add up to the same bytes.
  const stream = await sbx.files.read('/tmp/f/large.bin', { format: 'stream' })
  const hash = createHash('sha256')
  let length = 0
  for await (const chunk of stream) {
    hash.update(chunk)
    length += chunk.length
  }
  assert.equal(length, data.length)
  assert.equal(hash.digest('hex'), digest)
})

test('octet-stream, gzip and stream uploads', async () => {
  const data = allBytes(64)
  await sbx.files.write('/tmp/f/octet.bin', arrayBufferOf(data), { useOctetStream: true })
  assert.deepEqual(await sbx.files.read('/tmp/f/octet.bin', { format: 'bytes' }), data)
  await sbx.files.write('/tmp/f/gz.bin', arrayBufferOf(data), { gzip: true })
  assert.deepEqual(await sbx.files.read('/tmp/f/gz.bin', { format: 'bytes' }), data)
  assert.deepEqual(await sbx.files.read('/tmp/f/gz.bin', { format: 'bytes', gzip: true }), data)
  const parts = [new Uint8Array(1000).fill(97), new Uint8Array(70000).fill(98), new Uint8Array([99])]
  const stream = new ReadableStream({
    start(controller) {
      for (const p of parts) controller.enqueue(p)
      controller.close()
    },
  })
  await sbx.files.write('/tmp/f/chunks.bin', stream)
  const back = await sbx.files.read('/tmp/f/chunks.bin', { format: 'bytes' })
  assert.equal(Buffer.from(back).toString(), 'a'.repeat(1000) + 'b'.repeat(70000) + 'c')
})

test('write several files', async () => {
  const infos = await sbx.files.write([
    { path: '/tmp/multi/a.txt', data: 'A' },
    { path: '/tmp/multi/sub/b.bin', data: arrayBufferOf(new Uint8Array([0, 255, 66])) },
    { path: '/tmp/multi/c.txt', data: 'C'.repeat(5000) },
  ])
  assert.deepEqual(infos.map((i) => i.path).sort(), ['/tmp/multi/a.txt', '/tmp/multi/c.txt', '/tmp/multi/sub/b.bin'])
  assert.equal(await sbx.files.read('/tmp/multi/a.txt'), 'A')
  assert.deepEqual(await sbx.files.read('/tmp/multi/sub/b.bin', { format: 'bytes' }), new Uint8Array([0, 255, 66]))
  assert.equal(await sbx.files.read('/tmp/multi/c.txt'), 'C'.repeat(5000))
})

test('list with depth', async () => {
  await sbx.files.write([
    { path: '/tmp/ls/file-b.txt', data: 'bb' },
    { path: '/tmp/ls/File-a.txt', data: 'a' },
    { path: '/tmp/ls/dir/inner.txt', data: 'inner' },
    { path: '/tmp/ls/dir.txt', data: 'd' },
  ])
  const entries = await sbx.files.list('/tmp/ls')
  // envd's order: by name, byte for byte (capitals first), directories among the files.
  assert.deepEqual(entries.map((e) => [e.name, e.type]), [
    ['File-a.txt', FileType.FILE], ['dir', FileType.DIR], ['dir.txt', FileType.FILE], ['file-b.txt', FileType.FILE]])
  const b = entries.find((e) => e.name === 'file-b.txt')
  assert.equal(b.path, '/tmp/ls/file-b.txt')
  assert.equal(b.size, 2)
  // Deeper, a walk of the tree: each directory is followed by its contents.
  const deep = await sbx.files.list('/tmp/ls', { depth: 2 })
  assert.deepEqual(deep.map((e) => e.path), [
    '/tmp/ls/File-a.txt', '/tmp/ls/dir', '/tmp/ls/dir/inner.txt', '/tmp/ls/dir.txt', '/tmp/ls/file-b.txt'])
})

test('exists, makeDir, rename, remove', async () => {
  assert.equal(await sbx.files.exists('/tmp/ops'), false)
  assert.equal(await sbx.files.makeDir('/tmp/ops/nested/deeper'), true)
  assert.equal(await sbx.files.makeDir('/tmp/ops/nested/deeper'), false)
  assert.equal(await sbx.files.exists('/tmp/ops/nested/deeper'), true)

  await sbx.files.write('/tmp/ops/old.txt', 'moving')
  const moved = await sbx.files.rename('/tmp/ops/old.txt', '/tmp/ops/nested/new.txt')
  assert.deepEqual([moved.name, moved.path, moved.type], ['new.txt', '/tmp/ops/nested/new.txt', FileType.FILE])
  assert.equal(await sbx.files.exists('/tmp/ops/old.txt'), false)
  assert.equal(await sbx.files.read('/tmp/ops/nested/new.txt'), 'moving')

  await sbx.files.remove('/tmp/ops/nested/new.txt')
  assert.equal(await sbx.files.exists('/tmp/ops/nested/new.txt'), false)
  await sbx.files.remove('/tmp/ops')
  assert.equal(await sbx.files.exists('/tmp/ops'), false)
})

test('getInfo', async () => {
  await sbx.files.write('/home/user/info/x.txt', '12345')
  await sbx.commands.run('chmod 640 /home/user/info/x.txt')
  const info = await sbx.files.getInfo('/home/user/info/x.txt')
  assert.deepEqual([info.name, info.path, info.type, info.size], ['x.txt', '/home/user/info/x.txt', FileType.FILE, 5])
  assert.equal(info.mode, 0o640)
  assert.equal(info.permissions, '-rw-r-----')
  assert.equal(info.owner, 'user')
  assert.ok(info.modifiedTime instanceof Date)
  const dir = await sbx.files.getInfo('/home/user/info')
  assert.deepEqual([dir.type, dir.name], [FileType.DIR, 'info'])
  // A symlink is described by what it leads to, with its target resolved to an absolute path.
  await sbx.commands.run('cd /home/user/info && ln -sf x.txt link && ln -sfn /home/user/info dir-link')
  const link = await sbx.files.getInfo('/home/user/info/link')
  assert.deepEqual([link.type, link.symlinkTarget, link.mode], [FileType.FILE, '/home/user/info/x.txt', 0o640])
  const dirLink = await sbx.files.getInfo('/home/user/info/dir-link')
  assert.deepEqual([dirLink.type, dirLink.symlinkTarget], [FileType.DIR, '/home/user/info'])
})

test('not-found errors', async () => {
  await assert.rejects(sbx.files.read('/tmp/definitely/missing.txt'), FileNotFoundError)
  await assert.rejects(sbx.files.getInfo('/tmp/definitely/missing.txt'), FileNotFoundError)
  await assert.rejects(sbx.files.list('/tmp/definitely/missing'), FileNotFoundError)
  await assert.rejects(sbx.files.rename('/tmp/definitely/missing.txt', '/tmp/elsewhere.txt'), FileNotFoundError)
})

test('files as root', async () => {
  await sbx.files.write('/root/secret-js.txt', "root's", { user: 'root' })
  assert.equal(await sbx.files.read('/root/secret-js.txt', { user: 'root' }), "root's")
  assert.equal((await sbx.files.getInfo('/root/secret-js.txt', { user: 'root' })).owner, 'root')
  // envd writes as root and gives what it wrote to the request's user.
  assert.equal((await sbx.files.write('/root/not-mine-js.txt', 'x')).path, '/root/not-mine-js.txt')
  assert.equal((await sbx.files.getInfo('/root/not-mine-js.txt')).owner, 'user')
})

test('watchDir streams create, write and remove', async () => {
  await sbx.files.makeDir('/tmp/watched-js')
  const events = []
  const handle = await sbx.files.watchDir('/tmp/watched-js', (e) => events.push(e))
  try {
    await sbx.files.write('/tmp/watched-js/new.txt', 'created')
    await sbx.commands.run('echo more >> /tmp/watched-js/new.txt')
    await sbx.files.remove('/tmp/watched-js/new.txt')
    const has = (type) => events.some((e) => e.name === 'new.txt' && e.type === type)
    await pollUntil(() => has(FilesystemEventType.CREATE) && has(FilesystemEventType.WRITE) && has(FilesystemEventType.REMOVE))
    const seen = JSON.stringify(events)
    assert.ok(has(FilesystemEventType.CREATE), seen)
    assert.ok(has(FilesystemEventType.WRITE), seen)
    assert.ok(has(FilesystemEventType.REMOVE), seen)
  } finally {
    await handle.stop()
  }
})

test('watchDir recursive', async () => {
  await sbx.files.makeDir('/tmp/watched-js-r/sub')
  const events = []
  const handle = await sbx.files.watchDir('/tmp/watched-js-r', (e) => events.push(e), { recursive: true })
  try {
    await sbx.files.write('/tmp/watched-js-r/sub/deep.txt', 'x')
    const has = () => events.some((e) => e.name === 'sub/deep.txt' && e.type === FilesystemEventType.CREATE)
    await pollUntil(has)
    assert.ok(has(), JSON.stringify(events))
  } finally {
    await handle.stop()
  }
})

test('killing the sandbox during watchDir ends it with what happened', async () => {
  // As with E2B: the stream is cut, the SDK's health probe gets 502 and onExit says so.
  const sandbox = await factory.create()
  await sandbox.files.makeDir('/home/user/watched-kill')
  let exited
  const ended = new Promise((resolve) => {
    exited = resolve
  })
  await sandbox.files.watchDir('/home/user/watched-kill', () => {}, { onExit: (err) => exited(err) })
  await sandbox.kill()
  const err = await ended
  assert.ok(err instanceof TimeoutError, String(err))
  assert.match(err.message, /sandbox was killed or reached its end of life/)
})

test('watchDir on a missing directory', async () => {
  await assert.rejects(sbx.files.watchDir('/tmp/no-such-dir-js', () => {}), FileNotFoundError)
})

test('signed upload and download URLs', async () => {
  // The URLs are used as a browser or another service would: plain fetch, no SDK headers.
  const body = allBytes(3)
  const upload = await sbx.uploadUrl('/home/user/signed/up-js.bin')
  const form = new FormData()
  form.append('file', new Blob([body]), 'up-js.bin')
  let r = await fetch(upload, { method: 'POST', body: form })
  assert.equal(r.status, 200, await r.text())
  assert.deepEqual(await sbx.files.read('/home/user/signed/up-js.bin', { format: 'bytes' }), body)

  const download = await sbx.downloadUrl('/home/user/signed/up-js.bin')
  r = await fetch(download)
  assert.equal(r.status, 200)
  assert.deepEqual(new Uint8Array(await r.arrayBuffer()), body)

  // A signature is for its own path and operation only.
  r = await fetch(download.replace('up-js.bin', 'other.bin'))
  assert.equal(r.status, 401)
  await r.arrayBuffer()
  const expiring = await sbx.downloadUrl('/home/user/signed/up-js.bin', { useSignatureExpiration: 60 })
  r = await fetch(expiring)
  assert.deepEqual(new Uint8Array(await r.arrayBuffer()), body)
})
