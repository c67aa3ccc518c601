// Lifecycle through the control plane: create, getInfo, list, setTimeout,
// lifetime, kill, pause/connect, fork, snapshots, errors.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, AuthenticationError, SandboxNotFoundError } from 'e2b'

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

test('create with metadata, envs and timeout; getInfo; setTimeout; kill', async () => {
  const t0 = Date.now()
  const sbx = await Sandbox.create('base', { metadata: { app: 'lc', run: 'one' }, envs: { LC: 'yes' }, timeoutMs: 60_000 })
  try {
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.templateId, 'base')
    assert.deepEqual(info.metadata, { app: 'lc', run: 'one' })
    assert.equal(info.state, 'running')
    assert.ok(info.cpuCount >= 1)
    assert.ok(Math.abs(info.endAt - (t0 + 60_000)) < 15_000, `endAt ${info.endAt.toISOString()}`)
    const [maj, min, patch] = info.envdVersion.split('.').map(Number)
    assert.ok(maj > 0 || min > 6 || (min === 6 && patch >= 4), `envdVersion ${info.envdVersion}`)
    assert.equal((await sbx.commands.run('echo $LC')).stdout, 'yes\n')
    await sbx.setTimeout(600_000)
    const later = await sbx.getInfo()
    assert.ok(later.endAt - Date.now() > 500_000, `endAt after setTimeout ${later.endAt.toISOString()}`)
    // Host samples every 5 s, as E2B's: one may not exist yet.
    let metrics = []
    for (const deadline = Date.now() + 20_000; metrics.length === 0 && Date.now() < deadline;) {
      metrics = await sbx.getMetrics()
      if (metrics.length === 0) await new Promise((r) => setTimeout(r, 250))
    }
    assert.ok(metrics.length >= 1, JSON.stringify(metrics))
    assert.ok(metrics[0].memUsed > 0 && metrics[0].diskTotal > 0, JSON.stringify(metrics))
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
  await assert.rejects(sbx.commands.run('true'), (e) => e.name !== 'AssertionError')
})

test('list with metadata, state and template filters, and paging', async () => {
  const tag = String(Date.now())
  const made = await Promise.all([1, 2, 3].map((i) => Sandbox.create({ metadata: { listtag: tag, i: String(i) }, timeoutMs: 120_000 })))
  try {
    const all = await Sandbox.list({ query: { metadata: { listtag: tag } } }).nextItems()
    assert.deepEqual(all.map((s) => s.sandboxId).sort(), made.map((s) => s.sandboxId).sort())
    assert.ok(all.every((s) => s.state === 'running' && s.templateId === 'base'))
    const one = await Sandbox.list({ query: { metadata: { listtag: tag, i: '2' } } }).nextItems()
    assert.deepEqual(one.map((s) => s.sandboxId), [made[1].sandboxId])
    assert.deepEqual(await Sandbox.list({ query: { metadata: { listtag: tag }, state: ['paused'] } }).nextItems(), [])
    assert.deepEqual(await Sandbox.list({ query: { metadata: { listtag: tag }, template: 'nope' } }).nextItems(), [])
    const pager = Sandbox.list({ query: { metadata: { listtag: tag } }, limit: 2 })
    const p1 = await pager.nextItems()
    assert.equal(p1.length, 2)
    assert.equal(pager.hasNext, true)
    const p2 = await pager.nextItems()
    assert.equal(p2.length, 1)
    assert.equal(pager.hasNext, false)
    assert.equal(new Set([...p1, ...p2].map((s) => s.sandboxId)).size, 3)
  } finally {
    await Promise.all(made.map((s) => s.kill()))
  }
})

test('a sandbox is killed when its timeout ends', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 2_000 })
  assert.equal(await sbx.isRunning(), true)
  const deadline = Date.now() + 20_000
  while (Date.now() < deadline && (await sbx.isRunning())) await sleep(250)
  assert.equal(await sbx.isRunning(), false)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
})

test('pause, then connect: files intact', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    await sbx.files.write('/home/user/keep.txt', 'kept across pause')
    assert.equal(await sbx.pause(), true)
    assert.equal(await Sandbox.pause(sbx.sandboxId), false)
    assert.equal((await sbx.getInfo()).state, 'paused')
    assert.equal(await sbx.isRunning(), false)
    const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
    assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId))
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
    assert.equal((await again.getInfo()).state, 'running')
    assert.equal(await again.files.read('/home/user/keep.txt'), 'kept across pause')
    assert.equal((await again.commands.run('cat /home/user/keep.txt')).stdout, 'kept across pause')
  } finally {
    await sbx.kill()
  }
})

test('fork ×3 with independent writes', async () => {
  const src = await Sandbox.create({ metadata: { role: 'src' }, timeoutMs: 120_000 })
  let forks = []
  try {
    await src.files.write('/home/user/shared.txt', 'from the source')
    forks = await src.fork({ count: 3, timeoutMs: 120_000 })
    assert.equal(forks.length, 3)
    for (const f of forks) assert.ok(!(f instanceof Error), String(f))
    const ids = new Set(forks.map((f) => f.sandboxId))
    assert.equal(ids.size, 3)
    assert.ok(!ids.has(src.sandboxId))
    await Promise.all(forks.map((f, i) => f.files.write('/home/user/own.txt', `fork ${i}`)))
    for (const [i, f] of forks.entries()) {
      assert.equal(await f.files.read('/home/user/shared.txt'), 'from the source')
      assert.equal(await f.files.read('/home/user/own.txt'), `fork ${i}`)
    }
    assert.equal(await src.files.exists('/home/user/own.txt'), false)
  } finally {
    await Promise.all([src, ...forks].filter((s) => s && !(s instanceof Error)).map((s) => s.kill()))
  }
})

test('snapshots: create, list, create a sandbox from one, delete', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  let snap, restored
  try {
    await sbx.files.write('/home/user/state.txt', 'snapshotted')
    snap = await sbx.createSnapshot()
    assert.ok(snap.snapshotId)
    const listed = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()
    assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId), JSON.stringify(listed))
    restored = await Sandbox.create(snap.snapshotId, { timeoutMs: 120_000 })
    assert.equal(await restored.files.read('/home/user/state.txt'), 'snapshotted')
    assert.equal((await restored.getInfo()).templateId, snap.snapshotId)
  } finally {
    await restored?.kill()
    await sbx.kill()
  }
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
})

test('errors the SDK maps: bad key, unknown sandbox, unknown template', async () => {
  await assert.rejects(Sandbox.create({ apiKey: 'e2b_' + '0'.repeat(40) }), AuthenticationError)
  await assert.rejects(Sandbox.getInfo('abcdefghij0123456789'), SandboxNotFoundError)
  await assert.rejects(Sandbox.connect('abcdefghij0123456789'), SandboxNotFoundError)
  await assert.rejects(Sandbox.create('no-such-template'), (e) => /not found/i.test(e.message))
  await assert.rejects(Sandbox.create({ network: { maskRequestHost: 'masked.example' } }), (e) => /not supported/.test(e.message))
})

test('killing a sandbox ends its open streams with an error, never a hang', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  const h = await sbx.commands.run('sleep 600', { background: true })
  const waited = h.wait().then(() => 'resolved', (e) => e)
  let watchExit
  const watchEnded = new Promise((resolve) => { watchExit = resolve })
  await sbx.files.watchDir('/home/user', () => {}, { onExit: (err) => watchExit(err ?? 'clean exit') })
  await sbx.kill()
  const r = await Promise.race([waited, sleep(15_000).then(() => 'hang')])
  assert.ok(r instanceof Error, `command wait: ${r}`)
  const w = await Promise.race([watchEnded, sleep(15_000).then(() => 'hang')])
  assert.ok(w instanceof Error, `watch: ${w}`)
})

test('allowInternetAccess and allowOut/denyOut map onto the egress policy', async () => {
  const sbx = await Sandbox.create({ allowInternetAccess: false, timeoutMs: 60_000 })
  try {
    assert.equal((await sbx.getInfo()).allowInternetAccess, false)
    await Sandbox.updateNetwork(sbx.sandboxId, { allowInternetAccess: true })
    assert.equal((await sbx.getInfo()).allowInternetAccess, true)
    await Sandbox.updateNetwork(sbx.sandboxId, { denyOut: ['0.0.0.0/0'], allowOut: ['api.example.com'] })
    let info = await sbx.getInfo()
    assert.equal(info.allowInternetAccess, false)
    assert.deepEqual(info.network.allowOut, ['api.example.com'])
    assert.deepEqual(info.network.denyOut, ['0.0.0.0/0'])
    await Sandbox.updateNetwork(sbx.sandboxId, { denyOut: ['10.0.0.0/8'] })
    info = await sbx.getInfo()
    assert.equal(info.allowInternetAccess, true)
    assert.deepEqual(info.network.denyOut, ['10.0.0.0/8'])
    await assert.rejects(Sandbox.updateNetwork(sbx.sandboxId, { denyOut: ['not a host!'] }), (e) => e.name !== 'AssertionError')
  } finally {
    await sbx.kill()
  }
  const fenced = await Sandbox.create({ network: { denyOut: ['0.0.0.0/0'], allowOut: ['api.example.com'] }, timeoutMs: 60_000 })
  try {
    const info = await fenced.getInfo()
    assert.equal(info.allowInternetAccess, false)
    assert.deepEqual(info.network.allowOut, ['api.example.com'])
  } finally {
    await fenced.kill()
  }
})

test('onTimeout pause: the sandbox pauses at its end, keeps files, and autoResume wakes it on traffic', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
  try {
    const info = await sbx.getInfo()
    assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true })
    await sbx.files.write('/home/user/auto.txt', 'paused, not killed')
    const deadline = Date.now() + 20_000
    while (Date.now() < deadline && (await Sandbox.getInfo(sbx.sandboxId)).state !== 'paused') await sleep(250)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    // autoResume: traffic wakes it, with its lifetime renewed.
    assert.equal(await sbx.files.read('/home/user/auto.txt'), 'paused, not killed')
    const woken = await sbx.getInfo()
    assert.equal(woken.state, 'running')
    assert.ok(woken.endAt > Date.now(), `endAt ${woken.endAt.toISOString()}`)
    await sbx.setTimeout(120_000)
  } finally {
    await sbx.kill()
  }
})
