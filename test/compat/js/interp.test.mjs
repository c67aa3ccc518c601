// @e2b/code-interpreter: runCode on berth's interpreter contexts.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { TimeoutError } from 'e2b'

let sbx
let listedFirst
before(async () => {
  sbx = await Sandbox.create({ timeoutMs: 300_000 })
  listedFirst = await sbx.listCodeContexts()
})
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
  assert.equal(cwd.text, '/tmp')
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
  assert.equal(r.text, 'yes')
})

test('python runs in IPython: indented cells, shell escapes, magics, display', async () => {
  const ind = await sbx.runCode('    a = 2\n    a * 21')
  assert.equal(ind.error, undefined)
  assert.equal(ind.text, '42')
  const sh = await sbx.runCode('!echo from-shell')
  // IPython runs ! commands on a pty, as in Jupyter: lines end in \r\n.
  assert.match(sh.logs.stdout.join(''), /^from-shell\r?\n$/)
  const mg = await sbx.runCode('%cd /tmp\n%pwd')
  assert.equal(mg.text, '/tmp')
  const d = await sbx.runCode("from IPython.display import display, HTML\ndisplay(HTML('<b>x</b>'))\n'done'")
  assert.equal(d.results.length, 2)
  assert.equal(d.results[0].html, '<b>x</b>')
  assert.equal(d.results[0].isMainResult, false)
  assert.equal(d.text, 'done')
})

test('a pandas DataFrame carries its data', async () => {
  const r = await sbx.runCode("import pandas as pd\npd.DataFrame({'city': ['a', 'b'], 'n': [1, 2]})")
  assert.equal(r.error, undefined)
  assert.equal(r.results.length, 1)
  assert.deepEqual(r.results[0].data, { city: ['a', 'b'], n: [1, 2] })
  assert.match(r.results[0].html, /<table/)
})

// chart runs code that draws one figure and returns its typed chart.
async function chart(code) {
  const r = await sbx.runCode('import matplotlib.pyplot as plt\n' + code + '\nplt.show()')
  assert.equal(r.error, undefined)
  assert.equal(r.results.length, 1)
  assert.ok(r.results[0].png, 'a PNG too')
  assert.ok(r.results[0].chart, 'a chart')
  return r.results[0].chart
}

test('matplotlib charts: line, scatter, bar, pie, box and whisker, superchart', async () => {
  const line = await chart("plt.plot([1, 2, 3], [2, 4, 8], label='growth')\nplt.title('Growth')\nplt.xlabel('day')\nplt.ylabel('size [cm]')")
  assert.equal(line.type, 'line')
  assert.equal(line.title, 'Growth')
  assert.equal(line.x_label, 'day')
  assert.equal(line.y_unit, 'cm')
  assert.equal(line.elements.length, 1)
  assert.equal(line.elements[0].label, 'growth')
  assert.deepEqual(line.elements[0].points, [[1, 2], [2, 4], [3, 8]])

  const scatter = await chart("plt.scatter([1, 5], [2, 6], label='pts')")
  assert.equal(scatter.type, 'scatter')
  assert.deepEqual(scatter.elements[0].points, [[1, 2], [5, 6]])

  const bar = await chart("plt.bar(['x', 'y'], [3, 7])")
  assert.equal(bar.type, 'bar')
  assert.deepEqual(bar.elements.map((e) => [e.label, e.value]), [['x', 3], ['y', 7]])

  const pie = await chart("plt.pie([1, 1, 2], labels=['a', 'b', 'c'])")
  assert.equal(pie.type, 'pie')
  assert.deepEqual(pie.elements.map((e) => [e.label, e.angle]), [['a', 90], ['b', 90], ['c', 180]])

  const box = await chart("plt.boxplot([[1, 2, 3, 4, 5]], labels=['s'])")
  assert.equal(box.type, 'box_and_whisker')
  const b = box.elements[0]
  assert.deepEqual([b.label, b.min, b.first_quartile, b.median, b.third_quartile, b.max], ['s', 1, 2, 3, 4, 5])
  assert.deepEqual(b.outliers, [])

  const sup = await chart("fig, axs = plt.subplots(2)\nfig.suptitle('two')\naxs[0].plot([1, 2])\naxs[1].scatter([1], [1])")
  assert.equal(sup.type, 'superchart')
  assert.equal(sup.title, 'two')
  assert.deepEqual(sup.elements.map((e) => e.type), ['line', 'scatter'])
})

test('the default contexts are listed before the first execution', async () => {
  const langs = listedFirst.map((c) => c.language)
  assert.ok(langs.includes('python') && langs.includes('javascript'), JSON.stringify(listedFirst))
  const py = listedFirst.find((c) => c.language === 'python')
  assert.equal(py.cwd, '/home/user')
})

test('contexts run as the requested user in the requested cwd', async () => {
  const sh = await sbx.createCodeContext({ language: 'bash', cwd: '/tmp' })
  let r = await sbx.runCode('id -un; pwd', { context: sh })
  assert.equal(r.logs.stdout.join(''), 'user\n/tmp\n')
  const js = await sbx.createCodeContext({ language: 'js', cwd: 'sub/..' })
  r = await sbx.runCode("require('os').userInfo().username + ' ' + process.cwd()", { context: js })
  assert.equal(r.text, 'user /home/user')
  // E2B's interpreter server also takes the kernel's user ("root"); the
  // pinned SDK has no option for it, so the request is made directly.
  const res = await fetch(sbx.getJupyterRequestUrl('/contexts'), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999' },
    body: JSON.stringify({ language: 'python', cwd: '/etc', user: 'root' }),
  })
  assert.equal(res.status, 200)
  const root = await res.json()
  assert.equal(root.cwd, '/etc')
  r = await sbx.runCode('import os\nprint(os.getuid(), os.getcwd())', { context: root })
  assert.equal(r.logs.stdout.join(''), '0 /etc\n')
})

test('javascript contexts behave like node', async () => {
  const js = await sbx.createCodeContext({ language: 'js', cwd: '/tmp' })
  const run = async (code) => {
    const r = await sbx.runCode(code, { context: js })
    assert.equal(r.error, undefined, `${code}: ${JSON.stringify(r.error)}`)
    return r.text
  }
  assert.equal(await run('global.x = 1; x'), '1')
  assert.equal(await run('Promise.resolve(123)'), '123')
  assert.equal(await run('await Promise.resolve(124)'), '124')
  assert.equal(await run("require('fs').existsSync('/etc/passwd')"), 'true')
  assert.equal(await run('[typeof module, typeof exports, __dirname, __filename.startsWith("/tmp/")].join()'), 'object,object,/tmp,true')
  assert.equal(await run("import fs from 'node:fs'\nimport { join } from 'node:path'\nfs.existsSync(join('/', 'etc'))"), 'true')
  assert.equal(await run('typeof fs.readFileSync + typeof join'), 'functionfunction')
  assert.equal(await run("const { basename } = await import('node:path'); basename('/a/b')"), 'b')
  assert.equal(await run('process.cwd()'), '/tmp')
  const ts = await sbx.runCode('const n: number = await Promise.resolve(5); n * 2', { language: 'ts' })
  assert.equal(ts.text, '10')
})

test('a bash context keeps its shell state and streams', async () => {
  const sh = await sbx.createCodeContext({ language: 'bash' })
  assert.equal(sh.language, 'bash')
  let r = await sbx.runCode('cd /tmp && X=5 && f() { echo "f$1"; }', { context: sh })
  assert.equal(r.error, undefined)
  const out = []
  const err = []
  r = await sbx.runCode('pwd; echo $X; f 1; echo oops >&2', { context: sh, onStdout: (m) => out.push(m.line), onStderr: (m) => err.push(m.line) })
  assert.equal(r.error, undefined)
  assert.equal(out.join(''), '/tmp\n5\nf1\n')
  assert.equal(err.join(''), 'oops\n')
  r = await sbx.runCode('echo before; false', { context: sh })
  assert.ok(r.error, 'a failing cell reports an error')
  assert.match(r.error.value, /exit status 1/)
  assert.equal(r.logs.stdout.join(''), 'before\n')
  const byLang = await sbx.runCode('echo $((6 * 7))', { language: 'bash' })
  assert.equal(byLang.logs.stdout.join(''), '42\n')
  const t0 = Date.now()
  await assert.rejects(sbx.runCode('sleep 60', { context: sh, timeoutMs: 2000 }), TimeoutError)
  assert.ok(Date.now() - t0 < 15_000, `timeout took ${Date.now() - t0} ms`)
  r = await sbx.runCode('echo $X', { context: sh })
  assert.equal(r.logs.stdout.join(''), '5\n')
  // The SDK shows only the status of a refused request (409 here).
  await assert.rejects(sbx.runCode('1', { language: 'r' }), /409/)
})

test('a silent cell ends at the caller\'s timeoutMs and the context survives', async () => {
  const t0 = Date.now()
  await assert.rejects(sbx.runCode('import time\ntime.sleep(60)', { timeoutMs: 3000 }), TimeoutError)
  assert.ok(Date.now() - t0 < 20_000, `timeout took ${Date.now() - t0} ms`)
  const r = await sbx.runCode('x')
  assert.equal(r.text, '42')
})

test('/execute answers at once and sends keepalive lines while a cell is silent', async () => {
  const headers = { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999' }
  if (sbx.envdAccessToken) headers['X-Access-Token'] = sbx.envdAccessToken
  const t0 = Date.now()
  const res = await fetch(sbx.getJupyterRequestUrl('/execute'), {
    method: 'POST', headers, body: JSON.stringify({ code: 'import time\ntime.sleep(11)\nprint("done")' }),
  })
  assert.equal(res.status, 200)
  assert.ok(Date.now() - t0 < 5000, `headers after ${Date.now() - t0} ms`)
  const lines = (await res.text()).trim().split('\n').map((l) => JSON.parse(l))
  const types = lines.map((l) => l.type)
  assert.ok(types.indexOf('keepalive') >= 0 && types.indexOf('keepalive') < types.indexOf('stdout'), types.join())
  assert.equal(types.at(-1), 'end_of_execution')
})

test('a run in a killed sandbox ends cleanly, never hangs', async () => {
  const other = await Sandbox.create({ timeoutMs: 120_000 })
  await other.runCode('1')
  const run = other.runCode('import time\ntime.sleep(60)', { timeoutMs: 0 }).then((r) => r, (e) => e)
  await new Promise((r) => setTimeout(r, 1000))
  await other.kill()
  const r = await Promise.race([run, new Promise((res) => setTimeout(() => res('hang'), 15_000))])
  assert.ok(!(r instanceof Error) && r !== 'hang', String(r))
  assert.equal(r.error?.name, 'SandboxKilled', JSON.stringify(r.error))
  assert.match(r.error.value, /killed/)
})
