// The official MCP TypeScript client drives `berth mcp` over stdio against a
// real berth serve: list the tools, create a sandbox, exec, write and read a
// file, see a berth error as a tool error, destroy. BERTH_MCP_BIN is the
// berth binary; BERTH_URL and BERTH_API_KEY configure it; SANDBOX names the
// sandbox to use.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const name = process.env.SANDBOX;
assert.ok(name, "SANDBOX is not set");

const transport = new StdioClientTransport({
  command: process.env.BERTH_MCP_BIN,
  args: ["mcp"],
  env: {
    PATH: process.env.PATH,
    BERTH_URL: process.env.BERTH_URL,
    BERTH_API_KEY: process.env.BERTH_API_KEY,
  },
  stderr: "inherit",
});
const client = new Client({ name: "berth-mcp-test", version: "0.0.0" });
await client.connect(transport);
after(() => client.close());

// A call's structured result, failing the test on a tool error.
async function call(tool, args, timeout = 180_000) {
  const res = await client.callTool({ name: tool, arguments: args }, undefined, { timeout });
  assert.ok(!res.isError, `${tool} failed: ${JSON.stringify(res.content)}`);
  assert.ok(res.structuredContent, `${tool} returned no structured content`);
  return res.structuredContent;
}

test("server info and tools", async () => {
  assert.equal(client.getServerVersion().name, "berth");
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of ["sandbox_create", "sandbox_list", "sandbox_destroy", "exec", "file_read", "file_write", "run_code"]) {
    assert.ok(names.includes(want), `${want} not in ${names}`);
  }
  const exec = tools.find((t) => t.name === "exec");
  assert.deepEqual([...exec.inputSchema.required].sort(), ["command", "sandbox"]);
  assert.ok(exec.inputSchema.properties.timeoutMs.description.length > 0);
});

test("create, exec, files, destroy", async () => {
  const sb = await call("sandbox_create", { name });
  assert.equal(sb.name, name);
  assert.equal(sb.created, true);
  assert.equal(sb.state, "running");

  // get-or-create: the second call finds it.
  const again = await call("sandbox_create", { name });
  assert.equal(again.created, false);

  const { sandboxes } = await call("sandbox_list", {});
  assert.ok(sandboxes.some((s) => s.name === name), JSON.stringify(sandboxes));

  const hi = await call("exec", { sandbox: name, command: "echo hi" });
  assert.equal(hi.stdout, "hi\n");
  assert.equal(hi.exitCode, 0);

  const fail = await call("exec", { sandbox: name, command: "echo oops >&2; exit 7", cwd: "/tmp" });
  assert.equal(fail.stderr, "oops\n");
  assert.equal(fail.exitCode, 7);

  const body = "hello from MCP\nsecond line ✓\n";
  // The parent directory does not exist yet: the write makes it.
  const w = await call("file_write", { sandbox: name, path: "/home/user/mcp/note.txt", content: body, mode: "0600" });
  assert.equal(w.bytes, Buffer.byteLength(body));
  const r = await call("file_read", { sandbox: name, path: "/home/user/mcp/note.txt" });
  assert.equal(r.content, body);
  assert.equal(r.encoding, "utf-8");
  const st = await call("exec", { sandbox: name, command: "stat -c %a /home/user/mcp/note.txt; cat /home/user/mcp/note.txt" });
  assert.equal(st.stdout, "600\n" + body);

  // Bounded read.
  const part = await call("file_read", { sandbox: name, path: "/home/user/mcp/note.txt", maxBytes: 5 });
  assert.equal(part.content, "hello");
  assert.equal(part.truncated, true);

  // A berth error is a tool error carrying its kind.
  const missing = await client.callTool({ name: "file_read", arguments: { sandbox: name, path: "/home/user/nope" } });
  assert.equal(missing.isError, true);
  assert.match(missing.content[0].text, /^not_found: /);

  const d = await call("sandbox_destroy", { name });
  assert.equal(d.destroyed, name);
  const gone = await client.callTool({ name: "exec", arguments: { sandbox: name, command: "true" } });
  assert.equal(gone.isError, true);
  assert.match(gone.content[0].text, /^not_found: /);
});

test("process and port, preview, code, snapshot and fork", async () => {
  const box = `${name}-more`;
  await call("sandbox_create", { name: box });
  const forks = [];
  try {
    // A server started as a background process, then waited for.
    await call("exec", { sandbox: box, command: "mkdir -p /tmp/www && echo served > /tmp/www/index.html" });
    const p = await call("process_start", { sandbox: box, command: "cd /tmp/www && exec python3 -m http.server 8000 --bind 127.0.0.1", id: "web" });
    assert.equal(p.id, "web");
    assert.equal(p.status, "running");
    const ready = await call("wait_for_port", { sandbox: box, process: "web", port: 8000, timeoutMs: 30_000 });
    assert.equal(ready.ready, true);
    assert.equal(ready.statusCode, 200);
    const got = await call("exec", { sandbox: box, command: "curl -s http://127.0.0.1:8000/index.html" });
    assert.equal(got.stdout, "served\n");
    // A wait on a process that ends first is a tool error, not a hang.
    await call("process_start", { sandbox: box, command: "exit 3", id: "quits" });
    const never = await client.callTool({ name: "wait_for_port", arguments: { sandbox: box, process: "quits", port: 8001, timeoutMs: 30_000 } });
    assert.equal(never.isError, true, JSON.stringify(never.content));

    const ex = await call("expose_port", { sandbox: box, port: 8000 });
    assert.equal(ex.port, 8000);
    assert.match(ex.url, /^https?:\/\//);
    assert.match(ex.pathUrl, /^https?:\/\//);

    // Python keeps state between runs of the same context.
    await call("run_code", { sandbox: box, code: "x = 20" });
    const rc = await call("run_code", { sandbox: box, code: "x * 2 + 2" });
    assert.deepEqual(rc.results, ["42"]);
    const bad = await call("run_code", { sandbox: box, code: "1/0" });
    assert.equal(bad.error.name, "ZeroDivisionError");

    await call("file_write", { sandbox: box, path: "/home/user/state.txt", content: "before fork\n" });
    const snap = await call("snapshot", { sandbox: box, name: "mcp-snap" });
    assert.match(snap.id, /^snap_/);
    const fk = await call("fork", { sandbox: box, count: 2 });
    assert.equal(fk.sandboxes.length, 2);
    for (const s of fk.sandboxes) forks.push(s.name);
    // Each fork has the source's files and is independent of the others.
    await call("exec", { sandbox: forks[0], command: "echo only-in-0 > /home/user/mine.txt" });
    const f1 = await call("exec", { sandbox: forks[1], command: "cat /home/user/state.txt; test -e /home/user/mine.txt && echo leaked || echo independent" });
    assert.equal(f1.stdout, "before fork\nindependent\n");
  } finally {
    for (const f of forks) await client.callTool({ name: "sandbox_destroy", arguments: { name: f } });
    await client.callTool({ name: "sandbox_destroy", arguments: { name: box } });
  }
});
