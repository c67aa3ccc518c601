// berth code-context kernel for JavaScript (and TypeScript, which the agent
// transpiles first). Requests arrive one JSON object a line on fd 3; events
// leave one JSON object a line on fd 4. Cells run as scripts in node's own
// global realm (vm.runInThisContext), so they see what a node program sees:
// global, require, module, exports, __dirname, __filename, process, fetch.
// The kernel's own names live inside this function, not on the global
// scope. Limits (documented in agent/interp.go): top-level declarations
// and static imports are made persistent by a small lexical rewrite, not a
// parser.
(() => {
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
const consoleObj = {
  log: out('stdout'), info: out('stdout'), debug: out('stdout'), trace: out('stderr'),
  error: out('stderr'), warn: out('stderr'),
  dir: (o) => emit({ type: 'stdout', text: util.inspect(o) + '\n' }),
  table: out('stdout'),
};
const cellFile = path.join(cwd, '[cell]');
const cellModule = { id: '.', filename: cellFile, path: cwd, loaded: false, children: [], paths: [], exports: {} };
const cellRequire = createRequire(path.join(cwd, 'index.js'));
cellModule.require = cellRequire;
cellModule.paths = cellRequire.resolve.paths('x') || [];
// defineProperty, not assignment: node -e has lazy getters for builtin
// modules on the global object (module among them).
const defineGlobals = (o) => { for (const [k, v] of Object.entries(o)) Object.defineProperty(globalThis, k, { value: v, writable: true, configurable: true, enumerable: false }); };
const cellGlobals = {
  console: consoleObj,
  display: (...vs) => { for (const v of vs) emit({ type: 'result', result: format(v, false) }); },
  global: globalThis,
  require: cellRequire,
  module: cellModule,
  exports: cellModule.exports,
  __dirname: cwd,
  __filename: cellFile,
};
// Defined again before the first cell: node -e sets some of them (module)
// again once the kernel script returned.
defineGlobals(cellGlobals);

// import() in a cell (and the static imports rewritten to it) goes through
// node's main-context loader: specifiers resolve from cwd as for a module
// there. It needs node 20.12 or later; older nodes refuse import() in a cell.
const importLoader = vm.constants && vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER;

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
// importRe matches a static import declaration (one top-level statement).
const importRe = /^(\s*)import\s*(?:([A-Za-z_$][\w$]*)\s*(?:,\s*)?)?(?:\*\s*as\s+([A-Za-z_$][\w$]*)\s*|(\{[^}]*\})\s*)?(?:from\s*)?(['"][^'"]+['"])\s*;?\s*$/;

// rewriteImport turns `import ... from 'm'` into declarations that await a
// dynamic import, which the async path then makes persistent.
function rewriteImport(t) {
  const m = importRe.exec(t);
  if (!m) return null;
  const [, ws, def, ns, named, spec] = m;
  const src = `await import(${spec})`;
  const out = [];
  const tmp = `__berthImport${++importCount}`;
  if (!def && !ns && !named) return `${ws}${src};\n`;
  out.push(`var ${tmp} = ${src};`);
  if (def) out.push(`var ${def} = ${tmp}.default;`);
  if (ns) out.push(`var ${ns} = ${tmp};`);
  if (named) {
    const names = named.slice(1, -1).split(',').map((x) => x.trim()).filter(Boolean)
      .map((x) => { const p = x.split(/\s+as\s+/); return p.length === 2 ? `${p[0].trim()}: ${p[1].trim()}` : p[0]; });
    out.push(`var { ${names.join(', ')} } = ${tmp};`);
  }
  return ws + out.join('\n') + '\n';
}
let importCount = 0;

// The main-context loader for import() in cells is experimental in node 20
// and says so on stderr at first use; that warning is the kernel's, not
// the user's.
const emitWarning = process.emitWarning;
process.emitWarning = function (w, ...rest) {
  if (String(w && w.message !== undefined ? w.message : w).includes('USE_MAIN_CONTEXT_DEFAULT_LOADER')) return;
  return emitWarning.call(process, w, ...rest);
};

// expandImports rewrites the static imports of src; it reports whether it
// found any.
function expandImports(src) {
  let found = false, body = '', at = 0;
  for (const [s, e] of splitTop(src)) {
    const t = src.slice(s, e);
    const r = /^\s*import\s*[^\s(.]/.test(t) ? rewriteImport(t) : null;
    if (r === null) continue;
    found = true;
    body += src.slice(at, s) + r;
    at = e;
  }
  return { body: body + src.slice(at), found };
}

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
  for (const k of Object.keys(env)) {
    saved[k] = process.env[k];
    if (env[k] === null) delete process.env[k]; // null: unset for this run
    else process.env[k] = env[k];
  }
  if (count === 1) defineGlobals(cellGlobals);
  try {
    let code = req.code || '';
    const imp = expandImports(code);
    code = imp.body;
    const isAsync = imp.found || /\bawait\b/.test(code);
    let v = vm.runInThisContext(rewrite(code, isAsync), {
      filename, breakOnSigint: true, importModuleDynamically: importLoader,
    });
    // A cell whose value is a promise (or any thenable) shows what it
    // resolves to, as an async cell's last expression does.
    if (isAsync || (v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function')) {
      const p = v;
      v = await new Promise((resolve, reject) => {
        interrupt = () => reject(interruptedError());
        Promise.resolve(p).then(resolve, reject);
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
})();
