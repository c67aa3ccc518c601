// pause() then connect() with the operator default sleep mode freeze
// (TestE2BSDKFreeze, EXPECT_MEMORY=1): a background process keeps running
// and a code-interpreter variable stays defined. Under the default stop
// mode (TestE2BSDK, EXPECT_MEMORY=0) the same steps are the negative
// control: the process is gone and the variable undefined.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const keeps = process.env.EXPECT_MEMORY === '1'
if (!['0', '1'].includes(process.env.EXPECT_MEMORY)) throw new Error('EXPECT_MEMORY must be 0 or 1')

const ticks = async (s) => Number((await s.commands.run('cat /tmp/tick')).stdout.trim())

test(`pause, then connect: ${keeps ? 'processes and variables continue' : 'files only (negative control)'}`, async () => {
  const sbx = await Sandbox.create({ timeoutMs: 180_000 })
  try {
    const def = await sbx.runCode('kept_value = 40 + 2\nkept_value')
    assert.equal(def.text, '42')
    const bg = await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/tick; sleep 0.1; done', { background: true })
    assert.ok(bg.pid > 0)
    await sleep(500)
    const before = await ticks(sbx)
    assert.ok(before > 0)

    assert.equal(await sbx.pause(), true)
    assert.equal((await sbx.getInfo()).state, 'paused')
    await sleep(1000)

    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 180_000 })
    assert.equal((await again.getInfo()).state, 'running')
    const listed = (await again.commands.list()).map((p) => p.pid)
    const alive = (await again.commands.run(`kill -0 ${bg.pid} && echo alive || echo gone`)).stdout.trim()
    const v = await again.runCode('kept_value')
    if (keeps) {
      assert.ok(listed.includes(bg.pid), `background pid ${bg.pid} not in ${listed}`)
      assert.equal(alive, 'alive')
      const t1 = await ticks(again)
      assert.ok(t1 >= before, `tick ${t1} < ${before}: the loop restarted`)
      await sleep(500)
      assert.ok((await ticks(again)) > t1, 'the loop does not run after connect')
      assert.equal(v.error, undefined)
      assert.equal(v.text, '42')
    } else {
      assert.ok(!listed.includes(bg.pid), `background pid ${bg.pid} survived a stop-mode pause`)
      assert.ok(v.error, 'the variable survived a stop-mode pause')
      assert.equal(v.error.name, 'NameError')
    }
  } finally {
    await sbx.kill()
  }
})
