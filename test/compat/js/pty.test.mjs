// PTY: create, resize, input, output, kill.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

let sbx
before(async () => { sbx = await Sandbox.create({ timeoutMs: 120_000 }) })
after(async () => { await sbx?.kill() })

const until = async (cond, what) => {
  const deadline = Date.now() + 10_000
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

test('create, input, resize, output, kill', async () => {
  let out = ''
  const dec = new TextDecoder()
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) } })
  assert.ok(pty.pid > 0)
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo "tty:$(tty | cut -c1-8) size:$(stty size)"\n'))
  await until(() => /tty:\/dev\/pt.*size:24 80/.test(out), `the first answer in ${JSON.stringify(out)}`)
  await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo "now:$(stty size) user:$(whoami)"\n'))
  await until(() => /now:30 100 user:user/.test(out), `the resized answer in ${JSON.stringify(out)}`)
  const listed = await sbx.commands.list()
  assert.ok(listed.some((p) => p.pid === pty.pid), JSON.stringify(listed))
  assert.equal(await sbx.pty.kill(pty.pid), true)
  const res = await pty.wait().catch((e) => e)
  assert.notEqual(res.exitCode, 0)
  assert.equal(await sbx.pty.kill(pty.pid), false)
})

test('a shell that exits ends the stream with its exit code', async () => {
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('exit 0\n'))
  const res = await pty.wait()
  assert.equal(res.exitCode, 0)
})
