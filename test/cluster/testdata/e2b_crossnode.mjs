// Drives one sandbox with the npm e2b SDK, configured only by E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY (TestE2BSDKCrossNode points them at a
// node the sandbox does not run on). The SDK is test/compat's install:
// COMPAT_DIR names it. Prints one JSON line; exits non-zero on a mismatch.
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'
import assert from 'node:assert/strict'

const require = createRequire(process.env.COMPAT_DIR + '/package.json')
const { Sandbox } = await import(pathToFileURL(require.resolve('e2b')).href)

const id = process.env.SANDBOX_ID
const sbx = await Sandbox.connect(id)
assert.equal(sbx.sandboxId, id)
const r = await sbx.commands.run('echo -n "$(whoami) $((6*7))"; cat /home/user/native.txt')
assert.equal(r.exitCode, 0)
assert.equal(r.stdout, 'user 42written natively')
await sbx.files.write('/home/user/from-sdk.txt', 'written by the e2b SDK')
assert.equal(await sbx.files.read('/home/user/from-sdk.txt'), 'written by the e2b SDK')
const info = await Sandbox.getInfo(id)
console.log(JSON.stringify({ sandboxId: sbx.sandboxId, stdout: r.stdout, state: info.state }))
