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
  // A tampered signature is refused. The first character is changed to
  // another one: replacing it with a fixed letter left the signature
  // untampered whenever it already began with that letter (1 in 64).
  const tampered = down.replace(/signature=v1_(.)/, (_, c) => 'signature=v1_' + (c === 'A' ? 'B' : 'A'))
  assert.notEqual(tampered, down, 'the tampered URL must differ from the signed one')
  const bad = await fetch(tampered)
  assert.equal(bad.status, 401)
  // So is a request with neither token nor signature.
  const bare = await fetch(down.replace(/&?signature=[^&]*/, ''), { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' } })
  assert.equal(bare.status, 401)
})

// issue 12, item 1: a write to an existing file is a write (same inode,
// mode and owner), and a watcher sees create for a new file, write for an
// existing one, never a temp name or a rename.
test('write keeps the inode, mode and owner; watchers see create then write', async () => {
  await sbx.commands.run('mkdir -p /home/user/w1 && printf "#!/bin/sh\\necho v1\\n" > /home/user/w1/run.sh && chmod 755 /home/user/w1/run.sh')
  const before = (await sbx.commands.run('stat -c "%i %a %U" /home/user/w1/run.sh')).stdout.trim()
  const events = []
  const h = await sbx.files.watchDir('/home/user/w1', (e) => events.push(e))
  await sbx.files.write('/home/user/w1/run.sh', '#!/bin/sh\necho v2\n')
  await sbx.files.write('/home/user/w1/new.txt', 'fresh')
  await sbx.files.makeDir('/home/user/w1/mark')
  const deadline = Date.now() + 10_000
  while (Date.now() < deadline && !events.some((e) => e.name === 'mark')) {
    await new Promise((r) => setTimeout(r, 100))
  }
  await h.stop()
  const after = (await sbx.commands.run('stat -c "%i %a %U" /home/user/w1/run.sh')).stdout.trim()
  assert.equal(after, before, 'inode, mode or owner changed')
  assert.equal((await sbx.commands.run('/home/user/w1/run.sh')).stdout, 'v2\n')
  const seen = JSON.stringify(events)
  assert.ok(events.every((e) => ['run.sh', 'new.txt', 'mark'].includes(e.name)), `a name nobody wrote: ${seen}`)
  assert.ok(!events.some((e) => e.type === FilesystemEventType.RENAME), `a rename: ${seen}`)
  const of = (n) => new Set(events.filter((e) => e.name === n).map((e) => e.type))
  assert.ok(of('run.sh').has(FilesystemEventType.WRITE), `no write of run.sh: ${seen}`)
  assert.ok(!of('run.sh').has(FilesystemEventType.CREATE), `run.sh was re-created: ${seen}`)
  assert.ok(of('new.txt').has(FilesystemEventType.CREATE), `no create of new.txt: ${seen}`)
})

// item 2: mode is the permission bits, as envd's (0755 → 493).
test('mode of a directory and a file is the permission bits', async () => {
  await sbx.commands.run('mkdir -p /home/user/m2/sub && chmod 755 /home/user/m2/sub && touch /home/user/m2/f && chmod 640 /home/user/m2/f')
  assert.equal((await sbx.files.getInfo('/home/user/m2/sub')).mode, 493)
  const list = await sbx.files.list('/home/user/m2')
  assert.deepEqual(list.map((e) => [e.name, e.mode]), [['f', 0o640], ['sub', 493]])
})

// item 3: as root, a relative path is in /root.
test('relative paths as root resolve from /root', async () => {
  await sbx.files.write('hello.txt', 'as root', { user: 'root' })
  assert.equal((await sbx.commands.run('cat /root/hello.txt', { user: 'root' })).stdout, 'as root')
  assert.equal(await sbx.files.exists('/home/user/hello.txt'), false)
  assert.equal(await sbx.files.read('hello.txt', { user: 'root' }), 'as root')
  assert.equal((await sbx.files.getInfo('hello.txt', { user: 'root' })).path, '/root/hello.txt')
  assert.equal((await sbx.files.getInfo('hello.txt', { user: 'root' })).owner, 'root')
})

// item 4: remove of a missing path succeeds, watchDir on a file is
// refused, and an empty directory's size is what stat says.
test('remove missing, watchDir on a file, empty directory size', async () => {
  await sbx.files.remove('/home/user/never-was-here')
  await sbx.files.write('/home/user/plain.txt', 'x')
  await assert.rejects(sbx.files.watchDir('/home/user/plain.txt', () => {}), (e) => e.name === 'InvalidArgumentError')
  await sbx.files.makeDir('/home/user/emptyd')
  const want = Number((await sbx.commands.run('stat -c %s /home/user/emptyd')).stdout.trim())
  assert.equal((await sbx.files.getInfo('/home/user/emptyd')).size, want)
  assert.equal((await sbx.files.list('/home/user')).find((e) => e.name === 'emptyd').size, want)
})

// item 5 on the E2B face: a download carries the detected type.
test('downloads carry a detected Content-Type and the binary flag', async () => {
  await sbx.files.write('/home/user/t/data.json', '{"a": 1}')
  await sbx.files.write('/home/user/t/blob', new Uint8Array([0, 1, 2, 3, 255]))
  const json = await fetch(await sbx.downloadUrl('/home/user/t/data.json'))
  assert.equal(json.headers.get('content-type'), 'application/json; charset=utf-8')
  assert.equal(json.headers.get('x-berth-binary'), 'false')
  assert.equal(await json.text(), '{"a": 1}')
  const blob = await fetch(await sbx.downloadUrl('/home/user/t/blob'))
  assert.equal(blob.headers.get('content-type'), 'application/octet-stream')
  assert.equal(blob.headers.get('x-berth-binary'), 'true')
  assert.equal((await blob.arrayBuffer()).byteLength, 5)
})

// A full disk reaches the SDK as its own error (envd answers 507), not as
// a generic one, and the sandbox works again once space is freed. The
// sandbox's quota is filled with fallocate in halving steps (no data
// written), so the test costs no real disk I/O.
test('a write into a full disk is NotEnoughSpaceError; freeing space recovers', async () => {
  const fill = await sbx.commands.run(
    'i=0; for s in 8192 4096 2048 1024 512 256 128 64 32 16 8 4 2 1; do i=$((i+1)); ' +
    'fallocate -l ${s}M /home/user/fill$i 2>/dev/null || rm -f /home/user/fill$i; done; ls /home/user | grep -c ^fill')
  assert.ok(Number(fill.stdout.trim()) > 0, `fallocate filled nothing: ${fill.stdout}`)
  await assert.rejects(sbx.files.write('/home/user/more.bin', new Uint8Array(8 << 20)),
    (e) => e.name === 'NotEnoughSpaceError' && /space/i.test(e.message))
  await sbx.commands.run('rm -f /home/user/fill* /home/user/more.bin')
  await sbx.files.write('/home/user/after.txt', 'ok')
  assert.equal(await sbx.files.read('/home/user/after.txt'), 'ok')
})
