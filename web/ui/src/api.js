// Thin client for the berth REST API. The console is served from the same
// origin as the API, so paths are absolute and no CORS is involved.

const KEY_STORAGE = 'berth.apiKey';

// AuthError means the daemon rejected the key (401): the UI asks for a new one
// instead of retrying forever with a bad key.
export class AuthError extends Error {}

export function loadKey() {
  try {
    return localStorage.getItem(KEY_STORAGE) || '';
  } catch {
    return '';
  }
}

export function saveKey(key) {
  try {
    if (key) localStorage.setItem(KEY_STORAGE, key);
    else localStorage.removeItem(KEY_STORAGE);
  } catch {
    // Storage can be disabled; the key then lives only in memory.
  }
}

export class Client {
  constructor(key) {
    this.key = key;
  }

  async request(method, path, body) {
    const headers = { Authorization: 'Bearer ' + this.key };
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    let data = null;
    try {
      data = await res.json();
    } catch {
      // Non-JSON answer (a proxy's error page): fall through to the status.
    }
    if (res.status === 401) {
      throw new AuthError((data && data.message) || 'the API key was rejected');
    }
    if (!res.ok) {
      throw new Error((data && data.message) || `${res.status} ${res.statusText}`);
    }
    return data;
  }

  async listSandboxes() {
    const data = await this.request('GET', '/v1/sandboxes');
    return (data && data.sandboxes) || [];
  }

  // getOrCreate wakes a sleeping sandbox or creates a new one with defaults.
  getOrCreate(name) {
    return this.request('PUT', '/v1/sandboxes/' + encodeURIComponent(name), {});
  }

  // terminalURL is the WebSocket address of one terminal. Browsers cannot
  // set an Authorization header on a WebSocket, so the key travels as the
  // access_token query parameter the server accepts on this route only.
  terminalURL(name, id, cols, rows) {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const q = new URLSearchParams({
      cols: String(cols),
      rows: String(rows),
      create: '1',
      access_token: this.key,
    });
    return `${proto}//${location.host}/v1/sandboxes/${encodeURIComponent(name)}` +
      `/terminals/${encodeURIComponent(id)}/ws?${q}`;
  }
}
