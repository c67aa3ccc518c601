// berth code-context kernel for JavaScript (and TypeScript, which the agent
// transpiles first). Requests arrive one JSON object a line on fd 3; events
// leave one JSON object a line on fd 4. Code runs in one persistent vm
// context. Limits (documented in agent/interp.go): top-level declarations
// are made persistent by a small lexical rewrite, not a parser.
'use strict';
const vm = require('vm');
const fs = require('fs');
const util = require('util');
const path = require('path');
const readline = require('readline');
const { createRequire } = require('module');

function emit(ev) {
  const data = JSON.stringify(ev) + '\n';
  let off = 0;
  const buf = Buffer.from(data);
  while (off < buf.length) {
    try { off += fs.writeSync(4, buf, off); } catch (e) { if (e.code !== 'EAGAIN') throw e; }
  }
}

function out(type) {
  return (...args) => emit({ type, text: util.format(...args) + '\n' });
}

function format(v, main) {
  const d = { isMainResult: main };
  if (v !== null && typeof v === 'object') {
    for (const [m, k] of [['_repr_html_', 'html'], ['_repr_markdown_', 'markdown'], ['_repr_svg_', 'svg'], ['_repr_png_', 'png'], ['_repr_json_', 'json'], ['_repr_latex_', 'latex']]) {
      if (typeof v[m] === 'function') { try { const r = v[m](); if (r != null) d[k] = r; } catch (e) { /* ignore */ } }
    }
    const proto = Object.getPrototypeOf(v);
    const plain = Array.isArray(v) || proto === null || (proto && proto.constructor && proto.constructor.name === 'Object');
    if (plain && d.json === undefined) {
      try { d.json = JSON.parse(JSON.stringify(v)); } catch (e) { /* not JSON */ }
    }
  }
  d.text = typeof v === 'string' ? v : util.inspect(v, { depth: 4 });
  return d;
}

const cwd = process.cwd();
const sandbox = {
  console: {
    log: out('stdout'), info: out('stdout'), debug: out('stdout'), trace: out('stderr'),
    error: out('stderr'), warn: out('stderr'),
    dir: (o) => emit({ type: 'stdout', text: util.inspect(o) + '\n' }),
    table: out('stdout'),
  },
  display: (...vs) => { for (const v of vs) emit({ type: 'result', result: format(v, false) }); },
  require: createRequire(path.join(cwd, 'index.js')),
  process, Buffer, URL, URLSearchParams, TextEncoder, TextDecoder,
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate,
  queueMicrotask, structuredClone, atob, btoa, AbortController, AbortSignal,
  fetch: globalThis.fetch, performance: globalThis.performance,
};
sandbox.globalThis = sandbox;
const ctx = vm.createContext(sandbox);

// splitTop returns [start, end) of each top-level statement of src,
// tracking brackets, strings, template literals and comments. It is a
// heuristic: a regular expression literal holding a quote or bracket can
// confuse it, which only affects the declaration rewrite below.
function splitTop(src) {
  const stmts = [];
  let depth = 0, start = 0, i = 0;
  const tmpl = [];
  const push = (end) => { if (src.slice(start, end).trim() !== '') stmts.push([start, end]); start = end; };
  const prevSig = (j) => { while (j >= 0 && /\s/.test(src[j])) j--; return j >= 0 ? src[j] : ''; };
  const nextSig = (j) => { while (j < src.length && /\s/.test(src[j])) j++; return j < src.length ? src[j] : ''; };
  while (i < src.length) {
    const c = src[i];
    if (c === '/' && src[i + 1] === '/') { while (i < src.length && src[i] !== '\n') i++; continue; }
    if (c === '/' && src[i + 1] === '*') { const e = src.indexOf('*/', i + 2); i = e < 0 ? src.length : e + 2; continue; }
    if (c === '"' || c === "'") {
      i++;
      while (i < src.length && src[i] !== c && src[i] !== '\n') { if (src[i] === '\\') i++; i++; }
      i++; continue;
    }
    if (c === '`' || (c === '}' && tmpl.length && tmpl[tmpl.length - 1] === depth)) {
      if (c === '}') { tmpl.pop(); depth--; }
      i++;
      while (i < src.length && src[i] !== '`') {
        if (src[i] === '\\') { i += 2; continue; }
        if (src[i] === '$' && src[i + 1] === '{') { depth++; tmpl.push(depth); i += 2; break; }
        i++;
      }
      if (src[i] === '`') i++;
      continue;
    }
    if (c === '(' || c === '[' || c === '{') depth++;
    else if (c === ')' || c === ']' || c === '}') {
      depth--;
      if (depth === 0 && c === '}' && src[i + 1] !== undefined) {
        const n = nextSig(i + 1);
        if (n !== '' && !/[.,)\]}?:+\-*/%=&|^<>;(]/.test(n) && !/^\s*(else|catch|finally|while)\b/.test(src.slice(i + 1))) {
          let j = i + 1; while (j < src.length && /[ \t]/.test(src[j])) j++;
          if (src[j] === '\n') { i++; push(i); continue; }
        }
      }
    } else if (depth === 0 && c === ';') { i++; push(i); continue; }
    else if (depth === 0 && c === '\n') {
      const p = prevSig(i - 1), n = nextSig(i + 1);
      if (p !== '' && !/[,+\-*/%=&|^<>!?:.([{]/.test(p) && n !== '' && !/[.,)\]}?:+\-*/%=&|^<>]/.test(n)) { i++; push(i); continue; }
    }
    i++;
  }
  push(src.length);
  return stmts;
}

const declRe = /^(\s*)(const|let|var)(\s+)/;
const funcRe = /^(\s*)(async\s+)?function(\s*\*)?\s*([A-Za-z_$][\w$]*)/;
const classRe = /^(\s*)class\s+([A-Za-z_$][\w$]*)/;
const notExprRe = /^\s*(const|let|var|function|async\s+function|class|if|for|while|do|switch|try|return|throw|break|continue|import|export|else|catch|finally|\{)\b|^\s*\{/;

// rewrite makes top-level declarations survive into later runs. sync code
// runs as a vm.Script: const/let become var (global properties that a later
// run may redeclare). Async code runs inside an async function: declarations
// become assignments to context globals and the last expression is returned.
function rewrite(src, isAsync) {
  const stmts = splitTop(src);
  let body = '', funcs = [], hoisted = [];
  stmts.forEach(([s, e], idx) => {
    let t = src.slice(s, e);
    const last = idx === stmts.length - 1;
    let m;
    if ((m = declRe.exec(t))) {
      if (!isAsync) t = m[1] + 'var' + m[3] + t.slice(m[0].length);
      else {
        let rest = t.slice(m[0].length).replace(/;\s*$/, '');
        // Declare the name on the context before the assignment runs, as
        // var hoisting would: `var X = f(X || {})` (esbuild's enums).
        const first = /^([A-Za-z_$][\w$]*)/.exec(rest);
        if (first) hoisted.push(first[1]);
        if (/^[{[]/.test(rest)) t = m[1] + ';(' + rest + ');';
        else if (!rest.includes('=')) t = m[1] + rest.split(',').map((n) => n.trim() + ' = undefined').join(', ') + ';';
        else t = m[1] + rest + ';';
      }
    } else if ((m = funcRe.exec(t)) && isAsync) {
      funcs.push(m[4]);
    } else if ((m = classRe.exec(t))) {
      t = m[1] + (isAsync ? '' : 'var ') + m[2] + ' = ' + t.slice(m[1].length).replace(/;?\s*$/, '') + ';\n';
    } else if (last && isAsync && !notExprRe.test(t)) {
      t = 'return (' + t.replace(/;\s*$/, '') + '\n);';
    }
    body += t;
  });
  if (!isAsync) return body;
  const hoist = hoisted.map((v) => `if (!('${v}' in globalThis)) globalThis.${v} = undefined;`).join('') +
    funcs.map((f) => `globalThis.${f} = ${f};`).join('');
  return `(async () => {${hoist}\n${body}\n})()`;
}

let count = 0;
let interrupt = null; // rejects the pending async run on SIGINT
process.on('SIGINT', () => { if (interrupt) interrupt(); });

// userStack drops the kernel's own frames from a stack trace.
function userStack(stack) {
  return stack.split('\n').filter((l) => !/^\s+at /.test(l) || l.includes('<cell-')).join('\n');
}

function interruptedError() {
  const e = new Error('Execution interrupted');
  e.name = 'KeyboardInterrupt';
  return e;
}

async function run(req) {
  count++;
  const filename = `<cell-${count}>`;
  const env = req.env || {};
  const saved = {};
  for (const k of Object.keys(env)) { saved[k] = process.env[k]; process.env[k] = env[k]; }
  try {
    const code = req.code || '';
    const isAsync = /\bawait\b/.test(code);
    let v = vm.runInContext(rewrite(code, isAsync), ctx, { filename, breakOnSigint: true });
    if (isAsync) {
      v = await new Promise((resolve, reject) => {
        interrupt = () => reject(interruptedError());
        v.then(resolve, reject);
      });
    }
    if (v !== undefined) emit({ type: 'result', result: format(v, true) });
  } catch (e) {
    let err = e;
    if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') err = interruptedError();
    const isErr = err !== null && typeof err === 'object';
    emit({ type: 'error', error: {
      name: isErr && err.name ? String(err.name) : 'Error',
      value: isErr && err.message !== undefined ? String(err.message) : String(err),
      traceback: isErr && err.stack ? userStack(String(err.stack)) : String(err),
    } });
  } finally {
    interrupt = null;
    for (const k of Object.keys(saved)) { if (saved[k] === undefined) delete process.env[k]; else process.env[k] = saved[k]; }
  }
  // Must match syncMark in agent/interp_kernel.go.
  for (const fd of [1, 2]) { try { fs.writeSync(fd, '\x00\x01berth-sync\x01\x00'); } catch (e) { /* closed */ } }
  emit({ type: 'complete', executionCount: count });
}

process.on('uncaughtException', (e) => emit({ type: 'stderr', text: 'Uncaught ' + (e && e.stack ? e.stack : String(e)) + '\n' }));
process.on('unhandledRejection', (e) => emit({ type: 'stderr', text: 'Unhandled rejection: ' + (e && e.stack ? e.stack : String(e)) + '\n' }));

const rl = readline.createInterface({ input: fs.createReadStream(null, { fd: 3 }), crlfDelay: Infinity });
let queue = Promise.resolve();
rl.on('line', (line) => { const req = JSON.parse(line); queue = queue.then(() => run(req)); });
rl.on('close', () => process.exit(0));
emit({ type: 'ready', pid: process.pid });
