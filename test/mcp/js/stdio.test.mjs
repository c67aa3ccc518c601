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
