// getMetrics with start and end (issue 12 item 23): the SDK sends the
// bounds as unix seconds and the samples are filtered by the window.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

// The samples are the host's (every --metrics-interval, 5 s by default),
// as E2B's are: a sandbox just created may have none yet.
async function samples(sbx, atLeast, opts) {
  const deadline = Date.now() + 20_000
  for (;;) {
    const got = await sbx.getMetrics(opts)
    if (got.length >= atLeast || Date.now() > deadline) return got
    await new Promise((r) => setTimeout(r, 250))
  }
}

test('getMetrics honours start and end', async () => {
  const sbx = await Sandbox.create('base', { timeoutMs: 120_000 })
  try {
    const first = await samples(sbx, 1)
    assert.ok(first.length >= 1, JSON.stringify(first))
    assert.ok(first[0].memUsed > 0 && first[0].diskTotal > 0, JSON.stringify(first))
    const hourAgo = new Date(Date.now() - 3_600_000)
    assert.deepEqual(await sbx.getMetrics({ end: hourAgo }), [])
    assert.deepEqual(await sbx.getMetrics({ start: new Date(Date.now() + 3_600_000) }), [])
    assert.deepEqual(await Sandbox.getMetrics(sbx.sandboxId, { start: new Date(0), end: hourAgo }), [])
    // A window over the present: the first sample and a later one, in order.
    const window = { start: new Date(Date.now() - 60_000), end: new Date(Date.now() + 60_000) }
    const both = await samples(sbx, first.length + 1, window)
    assert.ok(both.length >= 2, JSON.stringify(both))
    assert.equal(both[0].timestamp.getTime(), first[0].timestamp.getTime())
    assert.ok(both[1].timestamp > both[0].timestamp)
    // A window that ended at the first sample holds only samples up to it.
    const endAt = new Date(first[0].timestamp.getTime() + 400)
    const past = await sbx.getMetrics({ start: hourAgo, end: endAt })
    const endSec = Math.round(endAt.getTime() / 1000) // as the SDK sends it
    assert.ok(past.length >= 1 && past.every((m) => Math.floor(m.timestamp.getTime() / 1000) <= endSec), JSON.stringify(past))
  } finally {
    await sbx.kill()
  }
})
