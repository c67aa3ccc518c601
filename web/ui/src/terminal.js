// One xterm.js terminal attached to a berth terminal WebSocket, with
// reconnect. Protocol: binary frames carry terminal bytes both ways; text
// frames are JSON control messages (client: resize; server: ready, exit,
// error). On every (re)connect the server replays the terminal's recent
// scrollback, so the screen is cleared first to avoid showing it twice.

import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';

const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 15000;

export class TerminalView {
  // onStatus(text, kind) reports the connection state for the status bar;
  // kind is one of idle, connecting, ready, exited, error, retrying.
  constructor(el, client, onStatus) {
    this.client = client;
    this.onStatus = onStatus;
    this.status = 'idle';
    this.ws = null;
    this.target = null; // {name, id}
    this.attempt = 0;
    this.timer = 0;
    this.enc = new TextEncoder();

    this.term = new Terminal({
      cursorBlink: true,
      scrollback: 5000,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
      fontSize: 14,
      theme: { background: '#111418', foreground: '#d8dee9' },
    });
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    this.term.open(el);
    this.term.onData((d) => this.sendBytes(this.enc.encode(d)));
    // onBinary carries non-UTF-8 input (some mouse reports) as a byte string.
    this.term.onBinary((d) => {
      const b = new Uint8Array(d.length);
      for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 0xff;
      this.sendBytes(b);
    });
    this.term.onResize(({ cols, rows }) => this.sendJSON({ type: 'resize', cols, rows }));
    new ResizeObserver(() => this.refit()).observe(el);
    window.addEventListener('resize', () => this.refit());
    this.refit();
  }

  refit() {
    try {
      this.fit.fit();
    } catch {
      // Not laid out yet (hidden pane); the next resize fits it.
    }
  }

  setStatus(kind, text) {
    this.status = kind;
    this.onStatus(text, kind);
  }

  // open attaches to terminal id of sandbox name, creating it if needed.
  open(name, id) {
    this.close();
    this.target = { name, id };
    this.attempt = 0;
    this.term.reset();
    this.connect();
    this.term.focus();
  }

  // close detaches without ending the terminal: the shell keeps running in
  // the sandbox and a later open replays its output.
  close() {
    clearTimeout(this.timer);
    this.target = null;
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close(1000, 'detached');
    this.setStatus('idle', '');
  }

  // reconnect is the manual retry after an exit or error.
  reconnect() {
    if (!this.target) return;
    clearTimeout(this.timer);
    this.attempt = 0;
    this.connect();
    this.term.focus();
  }

  connect() {
    const { name, id } = this.target;
    this.refit();
    const ws = new WebSocket(this.client.terminalURL(name, id, this.term.cols, this.term.rows));
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    this.ended = false; // an exit or error message arrived on this socket
    this.setStatus('connecting', 'connecting…');
    ws.onopen = () => {
      if (ws !== this.ws) return;
      // The server replays scrollback next; drop what the previous socket
      // showed so nothing appears twice.
      this.term.reset();
      this.sendJSON({ type: 'resize', cols: this.term.cols, rows: this.term.rows });
    };
    ws.onmessage = (ev) => {
      if (ws !== this.ws) return;
      if (typeof ev.data === 'string') {
        this.control(ev.data);
      } else {
        this.term.write(new Uint8Array(ev.data));
      }
    };
    ws.onclose = (ev) => {
      if (ws !== this.ws) return;
      this.ws = null;
      if (this.ended || !this.target) return;
      this.retry(ev.code);
    };
  }

  control(text) {
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      return;
    }
    switch (msg.type) {
      case 'ready':
        this.attempt = 0;
        this.setStatus('ready', 'connected');
        break;
      case 'exit': {
        this.ended = true;
        const code = Number.isInteger(msg.code) ? msg.code : '?';
        const sig = msg.signal ? `, signal ${msg.signal}` : '';
        this.term.write(`\r\n\x1b[2m[process exited with code ${code}${sig}]\x1b[0m\r\n`);
        this.setStatus('exited', `exited (code ${code}${sig})`);
        break;
      }
      case 'error': {
        this.ended = true;
        const m = String(msg.message || 'unknown error');
        this.term.write(`\r\n\x1b[31m[error: ${m.replace(/[\x00-\x1f\x7f]/g, ' ')}]\x1b[0m\r\n`);
        this.setStatus('error', 'error: ' + m);
        break;
      }
    }
  }

  // retry reconnects with exponential backoff and jitter, so that a daemon
  // restart is not met by every open tab reconnecting in lockstep.
  retry(code) {
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** this.attempt);
    const delay = Math.round(base / 2 + Math.random() * (base / 2));
    this.attempt++;
    this.setStatus('retrying', `disconnected (${code}); reconnecting in ${(delay / 1000).toFixed(1)} s`);
    this.timer = setTimeout(() => {
      if (this.target && !this.ws) this.connect();
    }, delay);
  }

  sendBytes(b) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(b);
  }

  sendJSON(obj) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(obj));
  }

  // screenLines returns the active buffer as text, one string per line,
  // for tests and for copying.
  screenLines() {
    const buf = this.term.buffer.active;
    const out = [];
    for (let i = 0; i < buf.length; i++) {
      const line = buf.getLine(i);
      out.push(line ? line.translateToString(true) : '');
    }
    return out;
  }
}
