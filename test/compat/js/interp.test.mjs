// @e2b/code-interpreter: runCode on berth's interpreter contexts.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

let sbx
before(async () => { sbx = await Sandbox.create({ timeoutMs: 300_000 }) })
after(async () => { await sbx?.kill() })

test('state is kept across calls in the default context', async () => {
  const a = await sbx.runCode('x = 40')
  assert.equal(a.error, undefined)
  const b = await sbx.runCode('x += 2\nx')
  assert.equal(b.text, '42')
  assert.equal(b.results.length, 1)
  assert.equal(b.results[0].isMainResult, true)
  assert.ok(b.executionCount >= 2, `executionCount ${b.executionCount}`)
})

test('an error comes back with its traceback', async () => {
  const r = await sbx.runCode('def f():\n    return 1/0\nf()')
  assert.ok(r.error, 'expected an error')
  assert.equal(r.error.name, 'ZeroDivisionError')
  assert.match(r.error.value, /division by zero/)
  assert.match(r.error.traceback, /ZeroDivisionError/)
  assert.match(r.error.traceback, /in f/)
})

test('a matplotlib chart is returned as PNG', async () => {
  const r = await sbx.runCode([
    'import matplotlib.pyplot as plt',
    'plt.plot([1, 2, 3], [1, 4, 9])',
    'plt.title("squares")',
    'plt.show()',
  ].join('\n'))
  assert.equal(r.error, undefined)
  const pngs = r.results.filter((x) => x.png)
  assert.equal(pngs.length, 1)
  const bytes = Buffer.from(pngs[0].png, 'base64')
  assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  assert.ok(bytes.length > 1000)
  assert.ok(pngs[0].formats().includes('png'))
})

test('contexts in Python and JavaScript', async () => {
  const py = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
  assert.equal(py.language, 'python')
  assert.equal(py.cwd, '/tmp')
  const cwd = await sbx.runCode('import os\nos.getcwd()', { context: py })
  assert.equal(cwd.text, "'/tmp'")
  const js = await sbx.createCodeContext({ language: 'js' })
  assert.equal(js.language, 'javascript')
  await sbx.runCode('const a = 40', { context: js })
  const r = await sbx.runCode('a + 2', { context: js })
  assert.equal(r.text, '42')
  const byLang = await sbx.runCode('[1, 2].map((n) => n * 2).join(",")', { language: 'js' })
  assert.equal(byLang.text, '2,4')
  const list = await sbx.listCodeContexts()
  const ids = list.map((c) => c.id)
  assert.ok(ids.includes(py.id) && ids.includes(js.id), JSON.stringify(list))
  await sbx.restartCodeContext(js)
  const gone = await sbx.runCode('typeof a', { context: js })
  assert.equal(gone.text, 'undefined')
  await sbx.removeCodeContext(py)
  assert.ok(!(await sbx.listCodeContexts()).map((c) => c.id).includes(py.id))
})

test('streaming callbacks see output as it comes', async () => {
  const out = []
  const err = []
  const results = []
  const r = await sbx.runCode('import sys, time\nprint("one")\ntime.sleep(0.3)\nprint("two", file=sys.stderr)\n7 * 6', {
    onStdout: (m) => out.push(m.line),
    onStderr: (m) => err.push(m.line),
    onResult: (res) => results.push(res.text),
  })
  assert.deepEqual(out, ['one\n'])
  assert.deepEqual(err, ['two\n'])
  assert.deepEqual(results, ['42'])
  assert.deepEqual(r.logs.stdout, ['one\n'])
  assert.equal(r.text, '42')
})

test('env vars for one run', async () => {
  const r = await sbx.runCode('import os\nos.environ.get("ONLY_NOW")', { envs: { ONLY_NOW: 'yes' } })
  assert.equal(r.text, "'yes'")
})

test('a run in a killed sandbox fails, never hangs', async () => {
  const other = await Sandbox.create({ timeoutMs: 120_000 })
  const run = other.runCode('import time\ntime.sleep(60)', { timeoutMs: 0 }).then(() => 'resolved', (e) => e)
  await new Promise((r) => setTimeout(r, 1000))
  await other.kill()
  const r = await Promise.race([run, new Promise((res) => setTimeout(() => res('hang'), 15_000))])
  assert.ok(r instanceof Error, String(r))
  assert.match(r.message, /killed|not found|timeout/i)
})
