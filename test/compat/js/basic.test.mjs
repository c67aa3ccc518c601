// The SDK's main path: create → commands.run → files.write/read → kill.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError } from 'e2b'

test('create, run, write, read, kill', async () => {
  const sbx = await Sandbox.create({ metadata: { suite: 'basic' }, envs: { GREETING: 'hi' }, timeoutMs: 120_000 })
  try {
    assert.match(sbx.sandboxId, /^[a-z0-9]{20}$/)
    const r = await sbx.commands.run('echo "$GREETING from $(whoami) in $PWD"; echo err >&2')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hi from user in /home/user\n')
    assert.equal(r.stderr, 'err\n')

    await assert.rejects(sbx.commands.run('exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3)

    const info = await sbx.files.write('/home/user/a.txt', 'hello berth')
    assert.equal(info.path, '/home/user/a.txt')
    assert.equal(await sbx.files.read('/home/user/a.txt'), 'hello berth')
    assert.equal((await sbx.commands.run('cat a.txt; stat -c %U a.txt')).stdout, 'hello berthuser\n')
    assert.equal(await sbx.isRunning(), true)
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await sbx.isRunning(), false)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
})

test('other ports are proxied to the sandbox; getHost names them', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    await sbx.commands.run('mkdir -p /tmp/www && echo served > /tmp/www/index.html')
    const srv = await sbx.commands.run('cd /tmp/www && exec python3 -m http.server 8000 --bind 127.0.0.1', { background: true })
    assert.equal(sbx.getHost(8000), `8000-${sbx.sandboxId}.e2b.app`)
    const url = `${process.env.E2B_SANDBOX_URL}/index.html`
    const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' }
    let res
    const deadline = Date.now() + 15_000
    while (Date.now() < deadline) {
      res = await fetch(url, { headers })
      if (res.status === 200) break
      await new Promise((r) => setTimeout(r, 200))
    }
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'served\n')
    await srv.kill()
    const closed = await fetch(url, { headers })
    assert.equal(closed.status, 502)
  } finally {
    await sbx.kill()
  }
})
