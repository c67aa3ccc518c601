// files: write/read/list/exists/makeDir/rename/remove, 50 MB, watchDir,
// signed URLs, getInfo.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { Sandbox, FileType, FilesystemEventType } from 'e2b'

let sbx
before(async () => { sbx = await Sandbox.create({ timeoutMs: 300_000 }) })
after(async () => { await sbx?.kill() })

test('write, read, list with depth, exists, makeDir, rename, remove', async () => {
  await sbx.files.write('proj/src/main.py', 'print(1)\n')
  await sbx.files.writeFiles([
    { path: '/home/user/proj/README.md', data: '# hi' },
    { path: '/home/user/proj/src/util/x.py', data: new Uint8Array([1, 2, 3]) },
  ])
  assert.equal(await sbx.files.read('/home/user/proj/src/main.py'), 'print(1)\n')
  assert.deepEqual([...(await sbx.files.read('proj/src/util/x.py', { format: 'bytes' }))], [1, 2, 3])

  const top = await sbx.files.list('/home/user/proj')
  assert.deepEqual(top.map((e) => e.name), ['README.md', 'src'])
  assert.equal(top[1].type, FileType.DIR)
  assert.equal(top[0].type, FileType.FILE)
  assert.equal(top[0].path, '/home/user/proj/README.md')
  const deep = await sbx.files.list('/home/user/proj', { depth: 3 })
  assert.deepEqual(deep.map((e) => e.path.replace('/home/user/proj/', '')),
    ['README.md', 'src', 'src/main.py', 'src/util', 'src/util/x.py'])
  const two = await sbx.files.list('/home/user/proj', { depth: 2 })
  assert.ok(!two.some((e) => e.name === 'x.py'))

  assert.equal(await sbx.files.exists('/home/user/proj/README.md'), true)
  assert.equal(await sbx.files.exists('/home/user/nope'), false)
  assert.equal(await sbx.files.makeDir('/home/user/newdir/a/b'), true)
  assert.equal(await sbx.files.makeDir('/home/user/newdir/a/b'), false)
  const moved = await sbx.files.rename('/home/user/proj/README.md', '/home/user/newdir/README.md')
  assert.equal(moved.path, '/home/user/newdir/README.md')
  assert.equal(await sbx.files.exists('/home/user/proj/README.md'), false)
  await assert.rejects(sbx.files.rename('/home/user/missing', '/home/user/x'), (e) => /NotFound/.test(e.name))
  await sbx.files.remove('/home/user/newdir')
  assert.equal(await sbx.files.exists('/home/user/newdir'), false)
  await assert.rejects(sbx.files.read('/home/user/newdir/README.md'), (e) => /NotFound/.test(e.name))
})

test('getInfo fields: permissions, owner, size, type', async () => {
  await sbx.files.write('/home/user/info.txt', 'twelve bytes')
  const fi = await sbx.files.getInfo('/home/user/info.txt')
  assert.equal(fi.name, 'info.txt')
  assert.equal(fi.type, FileType.FILE)
  assert.equal(fi.path, '/home/user/info.txt')
  assert.equal(fi.size, 12)
  assert.equal(fi.permissions, '-rw-r--r--')
  assert.equal(fi.owner, 'user')
  assert.equal(fi.group, 'user')
  assert.ok(fi.modifiedTime instanceof Date && Math.abs(fi.modifiedTime - Date.now()) < 600_000)
  const home = await sbx.files.getInfo('/home/user')
  assert.equal(home.type, FileType.DIR)
  assert.equal(home.permissions[0], 'd')
  const root = await sbx.files.getInfo('/etc/passwd')
  assert.equal(root.owner, 'root')
  await assert.rejects(sbx.files.write('/home/user/m.txt', 'm', { metadata: { k: 'v' } }), (e) => /not supported/.test(e.message))
  await sbx.files.write('/home/user/root-owned.txt', 'r', { user: 'root' })
  assert.equal((await sbx.files.getInfo('/home/user/root-owned.txt')).owner, 'root')
  await sbx.commands.run('chmod 750 /home/user/info.txt')
  assert.equal((await sbx.files.getInfo('/home/user/info.txt')).permissions, '-rwxr-x---')
})

test('a 50 MB upload and download keep their sha256', async () => {
  const data = randomBytes(50 * 1024 * 1024)
  const want = createHash('sha256').update(data).digest('hex')
  await sbx.files.write('/home/user/big.bin', data)
  const inside = await sbx.commands.run('sha256sum /home/user/big.bin')
  assert.equal(inside.stdout.split(' ')[0], want)
  const back = await sbx.files.read('/home/user/big.bin', { format: 'bytes' })
  assert.equal(back.length, data.length)
  assert.equal(createHash('sha256').update(back).digest('hex'), want)
  const gz = await sbx.files.read('/home/user/big.bin', { format: 'bytes', gzip: true })
  assert.equal(createHash('sha256').update(gz).digest('hex'), want)
  await sbx.files.write('/home/user/big2.bin', data, { gzip: true })
  assert.equal((await sbx.commands.run('sha256sum /home/user/big2.bin')).stdout.split(' ')[0], want)
})

test('watchDir reports create, write and remove', async () => {
  await sbx.files.makeDir('/home/user/watched')
  const events = []
  const h = await sbx.files.watchDir('/home/user/watched', (e) => events.push(e))
  await sbx.files.write('/home/user/watched/a.txt', 'one')
  await sbx.commands.run('echo more >> /home/user/watched/a.txt')
  await sbx.files.remove('/home/user/watched/a.txt')
  const deadline = Date.now() + 10_000
  while (Date.now() < deadline && !events.some((e) => e.type === FilesystemEventType.REMOVE)) {
    await new Promise((r) => setTimeout(r, 100))
  }
  await h.stop()
  const types = new Set(events.filter((e) => e.name === 'a.txt').map((e) => e.type))
  for (const t of [FilesystemEventType.CREATE, FilesystemEventType.WRITE, FilesystemEventType.REMOVE]) {
    assert.ok(types.has(t), `no ${t} event in ${JSON.stringify(events)}`)
  }
})

test('signed URLs upload and download without the access token', async () => {
  const up = await sbx.uploadUrl('/home/user/signed.txt', { useSignatureExpiration: 60 })
  assert.match(up, /signature=v1_/)
  const fd = new FormData()
  fd.append('file', new Blob(['via a signed url']), 'signed.txt')
  const res = await fetch(up, { method: 'POST', body: fd })
  assert.equal(res.status, 200, await res.clone().text())
  const down = await sbx.downloadUrl('/home/user/signed.txt')
  const got = await fetch(down)
  assert.equal(got.status, 200)
  assert.equal(await got.text(), 'via a signed url')
  // A tampered signature is refused.
  const bad = await fetch(down.replace(/signature=v1_./, 'signature=v1_A'))
  assert.equal(bad.status, 401)
  // So is a request with neither token nor signature.
  const bare = await fetch(down.replace(/&?signature=[^&]*/, ''), { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' } })
  assert.equal(bare.status, 401)
})
