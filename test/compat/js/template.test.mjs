// The SDK's template build path: Template.build (request, upload by
// hash, recipe, status with logs), Template.exists, then Sandbox.create
// from the template with its start and ready commands.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Sandbox, Template, waitForPort } from 'e2b'

test('Template.build with steps, a file and a start command; a sandbox from it', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'berth-tpl-'))
  fs.mkdirSync(path.join(dir, 'site'))
  fs.writeFileSync(path.join(dir, 'site', 'index.html'), 'served from the template\n')
  const name = `compat-tpl-${process.pid}`
  const tpl = Template({ fileContextPath: dir })
    .fromBaseImage()
    .runCmd('echo "built as $(whoami)" > /tmp/built.txt')
    .runCmd('mkdir -p /srv && chown user /srv', { user: 'root' })
    .copy('site', '/srv/site')
    .setEnvs({ APP_MODE: 'compat', QUOTED: 'say "hi" $HOME' })
    .setWorkdir('/srv/site')
    .setStartCmd('python3 -m http.server 8000 --bind 127.0.0.1', waitForPort(8000))
  const logs = []
  const info = await Template.build(tpl, name, { onBuildLogs: (e) => logs.push(e.message) })
  assert.equal(info.name, name)
  assert.ok(logs.some((l) => /RUN/.test(l)), `build logs name the steps:\n${logs.join('\n')}`)
  assert.equal(await Template.exists(name), true)
  assert.equal(await Template.exists(`${name}-missing`), false)

  const t0 = Date.now()
  const sbx = await Sandbox.create(name, { timeoutMs: 120_000 })
  try {
    // The create answered once the ready command passed: no retry here.
    const r = await sbx.commands.run(
      'cat /tmp/built.txt; echo "$APP_MODE|$QUOTED"; pwd; whoami; stat -c %U /srv/site/index.html; curl -s http://127.0.0.1:8000/index.html')
    assert.equal(r.stdout, `built as user\ncompat|say "hi" $HOME\n/srv/site\nuser\nuser\nserved from the template\n`)
    console.log(`template sandbox ready (start command up) in ${Date.now() - t0} ms`)
  } finally {
    await sbx.kill()
  }
  // A recipe berth cannot build fails the build with the step named.
  await assert.rejects(
    Template.build(Template().fromBaseImage().runCmd('exit 7'), `${name}-bad`),
    (e) => /exit code 7/.test(e.message),
  )
})
