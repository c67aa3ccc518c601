// commands: output, exit codes, env and cwd, background processes, stdin.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { Sandbox, CommandExitError } from 'e2b'

let sbx
before(async () => { sbx = await Sandbox.create({ timeoutMs: 300_000 }) })
after(async () => { await sbx?.kill() })

test('stdout, stderr and a non-zero exit', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2')
  assert.deepEqual([r.exitCode, r.stdout, r.stderr], [0, 'out\n', 'err\n'])
  const err = await sbx.commands.run('echo before; exit 7').catch((e) => e)
  assert.ok(err instanceof CommandExitError, String(err))
  assert.equal(err.exitCode, 7)
  assert.equal(err.stdout, 'before\n')
})

test('runs as user in a login bash', async () => {
  const r = await sbx.commands.run('echo "$0 $(id -un) $HOME"; shopt -q login_shell && echo login')
  assert.equal(r.stdout, '/bin/bash user /home/user\nlogin\n')
})

test('a command as root', async () => {
  const r = await sbx.commands.run('id -u; echo $HOME', { user: 'root' })
  assert.equal(r.stdout, '0\n/root\n')
})

test('env and cwd', async () => {
  const r = await sbx.commands.run('echo "$FOO $BAR"; pwd', { envs: { FOO: 'foo', BAR: 'b a r' }, cwd: '/tmp' })
  assert.equal(r.stdout, 'foo b a r\n/tmp\n')
})

test('callbacks stream output', async () => {
  const seen = []
  await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.1; done', { onStdout: (d) => seen.push(d) })
  assert.equal(seen.join(''), '1\n2\n3\n')
})

test('a background command, list, connect and kill', async () => {
  const h = await sbx.commands.run('echo started; sleep 600', { background: true })
  assert.ok(h.pid > 0)
  const list = await sbx.commands.list()
  const mine = list.find((p) => p.pid === h.pid)
  assert.ok(mine, JSON.stringify(list))
  assert.equal(mine.cmd, '/bin/bash')
  assert.deepEqual(mine.args, ['-l', '-c', 'echo started; sleep 600'])
  const again = await sbx.commands.connect(h.pid)
  assert.equal(again.pid, h.pid)
  assert.equal(await sbx.commands.kill(h.pid), true)
  const err = await h.wait().catch((e) => e)
  assert.ok(err instanceof CommandExitError, String(err))
  assert.notEqual(err.exitCode, 0)
  assert.equal(err.stdout, 'started\n')
  assert.equal((await sbx.commands.list()).find((p) => p.pid === h.pid), undefined)
  assert.equal(await sbx.commands.kill(h.pid), false)
})

test('a command outlives a disconnected stream and can be connected again', async () => {
  const h = await sbx.commands.run('echo first; sleep 1; echo second', { background: true })
  await h.disconnect()
  const listed = await sbx.commands.list()
  assert.ok(listed.some((p) => p.pid === h.pid), JSON.stringify(listed))
  const again = await sbx.commands.connect(h.pid)
  const r = await again.wait()
  assert.equal(r.stdout, 'first\nsecond\n')
  assert.equal((await sbx.commands.list()).find((p) => p.pid === h.pid), undefined)
})

test('stdin is sent and closed', async () => {
  const h = await sbx.commands.run('cat; echo done', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'hello ')
  await sbx.commands.sendStdin(h.pid, 'stdin\n')
  await sbx.commands.closeStdin(h.pid)
  const r = await h.wait()
  assert.equal(r.stdout, 'hello stdin\ndone\n')
})

test('10 MB of output arrives whole', async () => {
  const r = await sbx.commands.run('head -c 10000000 /dev/zero | tr "\\0" "a"')
  assert.equal(r.stdout.length, 10_000_000)
  assert.equal(createHash('sha256').update(r.stdout).digest('hex'),
    createHash('sha256').update('a'.repeat(10_000_000)).digest('hex'))
})

test('a long command with timeoutMs: 0', async () => {
  const t0 = Date.now()
  const r = await sbx.commands.run('sleep 3; echo slept', { timeoutMs: 0 })
  assert.equal(r.stdout, 'slept\n')
  assert.ok(Date.now() - t0 >= 3000)
})

test('a command timeout ends the wait with an error', async () => {
  await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1000 }), (e) => e.name === 'TimeoutError')
})
