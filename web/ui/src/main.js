// berth console: a sandbox list (refreshed every 2 s) and one xterm.js
// terminal pane. State that should survive a reload lives in the URL hash
// (#sandbox=NAME&term=ID) and the API key in localStorage.

import '@xterm/xterm/css/xterm.css';
import '../style.css';
import { AuthError, Client, loadKey, saveKey } from './api.js';
import { TerminalView } from './terminal.js';

const REFRESH_MS = 2000;
const DEFAULT_TERM = 'console';

const $ = (id) => document.getElementById(id);

let client = null;
let view = null;
let selected = ''; // sandbox name shown in the pane
let termId = DEFAULT_TERM;
let refreshTimer = 0;

function parseHash() {
  return new URLSearchParams(location.hash.replace(/^#/, ''));
}

function writeHash() {
  const h = new URLSearchParams();
  if (selected) h.set('sandbox', selected);
  if (termId !== DEFAULT_TERM) h.set('term', termId);
  const s = h.toString();
  history.replaceState(null, '', location.pathname + location.search + (s ? '#' + s : ''));
}

// takeKeyFromHash lets a link (or a test) hand over the key as #key=...:
// the fragment never reaches a server or a Referer header, and it is removed
// from the address bar at once so it does not linger in history.
function takeKeyFromHash() {
  const h = parseHash();
  const key = h.get('key');
  if (!key) return '';
  saveKey(key);
  h.delete('key');
  const s = h.toString();
  history.replaceState(null, '', location.pathname + location.search + (s ? '#' + s : ''));
  return key;
}

function showLogin(message) {
  clearTimeout(refreshTimer);
  if (view) view.close();
  $('app').hidden = true;
  $('forget-key').hidden = true;
  $('login').hidden = false;
  $('key-error').textContent = message || '';
  $('key-input').focus();
}

function showApp() {
  $('login').hidden = true;
  $('app').hidden = false;
  $('forget-key').hidden = false;
  if (!view) {
    view = new TerminalView($('terminal'), client, onTermStatus);
    // For tests and debugging: the xterm instance and a text view of it.
    window.berthTerm = view.term;
    window.berthConsole = {
      get status() {
        return view.status;
      },
      get sandbox() {
        return selected;
      },
      screenLines: () => view.screenLines(),
    };
  }
  view.client = client;
  view.refit();
}

function onTermStatus(text, kind) {
  const el = $('term-status');
  el.textContent = text;
  el.dataset.kind = kind;
  $('reconnect').hidden = !(kind === 'exited' || kind === 'error');
}

function badge(state) {
  const b = document.createElement('span');
  b.className = 'badge state-' + (/^[a-z]+$/.test(state) ? state : 'unknown');
  b.textContent = state || 'unknown';
  return b;
}

let lastRender = '';

function renderList(sandboxes) {
  // Skip identical re-renders: replacing the buttons every 2 s would eat
  // a click that straddles a refresh.
  const sig = JSON.stringify([selected, sandboxes.map((s) => [s.name, s.state, s.instance, s.ip, s.error])]);
  if (sig === lastRender) return;
  lastRender = sig;
  const ul = $('sandboxes');
  ul.replaceChildren();
  sandboxes.sort((a, b) => a.name.localeCompare(b.name));
  for (const sb of sandboxes) {
    const li = document.createElement('li');
    const btn = document.createElement('button');
    btn.type = 'button';
    btn.className = 'sandbox';
    btn.dataset.name = sb.name;
    if (sb.name === selected) btn.setAttribute('aria-current', 'true');
    const name = document.createElement('span');
    name.className = 'name';
    name.textContent = sb.name; // textContent, never innerHTML: names are user input
    const meta = document.createElement('span');
    meta.className = 'meta';
    meta.textContent = [sb.instance, sb.ip].filter(Boolean).join(' · ');
    if (sb.error) btn.title = sb.error;
    btn.append(name, badge(sb.state), meta);
    btn.addEventListener('click', () => select(sb.name));
    li.append(btn);
    ul.append(li);
  }
  $('empty').hidden = sandboxes.length > 0;
}

async function refresh() {
  const c = client;
  try {
    const list = await c.listSandboxes();
    if (c !== client || $('app').hidden) return; // superseded by a key change
    renderList(list);
    $('list-status').textContent = '';
    // A destroyed sandbox's terminal can never come back: stop retrying.
    if (selected && view.target && !list.some((sb) => sb.name === selected)) {
      view.close();
      onTermStatus(`no sandbox named "${selected}"`, 'error');
      $('reconnect').hidden = true;
    }
  } catch (err) {
    if (c !== client) return;
    if (err instanceof AuthError) {
      showLogin(err.message);
      return;
    }
    $('list-status').textContent = 'cannot list sandboxes: ' + err.message;
  }
  // Clear right before arming: overlapping refreshes (timer and a create)
  // must leave one timer, not two.
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(refresh, REFRESH_MS);
}

function select(name) {
  if (!name) return;
  if (name === selected && view.target) {
    view.term.focus();
    return;
  }
  selected = name;
  writeHash();
  $('pane-title').textContent = name + ' — terminal ' + termId;
  for (const b of document.querySelectorAll('.sandbox')) {
    if (b.dataset.name === name) b.setAttribute('aria-current', 'true');
    else b.removeAttribute('aria-current');
  }
  view.open(name, termId);
}

function applyHash() {
  const h = parseHash();
  const t = h.get('term');
  const id = t && /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(t) ? t : DEFAULT_TERM;
  const name = h.get('sandbox') || '';
  if (id !== termId) {
    termId = id;
    if (selected) view.close(); // forces select to reopen on the new id
  }
  if (name) select(name);
}

// start runs the console with key; it is passed in rather than re-read so
// that a browser with storage disabled still works for this page view.
function start(key) {
  client = new Client(key);
  showApp();
  applyHash();
  refresh();
}

function init() {
  const handed = takeKeyFromHash();

  $('key-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const key = $('key-input').value.trim();
    if (!key) return;
    saveKey(key);
    $('key-input').value = '';
    start(key);
  });
  $('forget-key').addEventListener('click', () => {
    saveKey('');
    selected = '';
    writeHash();
    showLogin('');
  });
  $('new-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const name = $('new-name').value.trim();
    if (!name) return;
    const btn = ev.submitter || $('new-form').querySelector('button');
    btn.disabled = true;
    $('new-error').textContent = '';
    try {
      await client.getOrCreate(name);
      $('new-name').value = '';
      select(name);
      refresh();
    } catch (err) {
      if (err instanceof AuthError) showLogin(err.message);
      else $('new-error').textContent = err.message;
    } finally {
      btn.disabled = false;
    }
  });
  $('reconnect').addEventListener('click', () => view && view.reconnect());
  window.addEventListener('hashchange', () => {
    const k = takeKeyFromHash();
    if (k) start(k);
    else if (client) applyHash();
  });

  const key = handed || loadKey();
  if (key) start(key);
  else showLogin('');
}

init();
