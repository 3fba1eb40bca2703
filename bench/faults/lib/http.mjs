// HTTP over node:http only: raw bytes (no automatic decompression), a chosen source address,
// request bodies streamed in chunks (an upload that is on the wire for a while), and every
// failure reported as a value rather than thrown, so the harness can count what each request
// got.
import http from 'node:http';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * One request. Resolves to {status, headers, body} or {error, code} (network error or the
 * timeout); never rejects.
 *
 * `body`: a Buffer sent at once, or with `chunks` > 1 split in that many writes `gapMs`
 * apart (`onChunk(n)` after each write, awaited: the caller can act mid-body).
 */
export function request({
  port,
  host = '127.0.0.1',
  method = 'GET',
  path,
  headers = {},
  body,
  chunks = 1,
  gapMs = 0,
  onChunk,
  localAddress,
  timeoutMs = 60_000,
}) {
  return new Promise((resolve) => {
    let settled = false;
    const done = (value) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(value);
    };
    const h = { ...headers };
    if (body) h['content-length'] = String(body.length);
    const req = http.request({ host, port, method, path, headers: h, localAddress, agent: false });
    const timer = setTimeout(() => {
      done({ error: `no answer within ${timeoutMs} ms`, code: 'TIMEOUT' });
      req.destroy(new Error('timeout'));
    }, timeoutMs);
    req.on('error', (e) => done({ error: e.message, code: e.code || 'ERROR' }));
    req.on('response', (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('error', (e) => done({ error: e.message, code: e.code || 'ERROR', status: res.statusCode }));
      res.on('aborted', () => done({ error: 'response aborted', code: 'ECONNRESET', status: res.statusCode }));
      res.on('end', () => done({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts) }));
    });
    (async () => {
      if (!body || chunks <= 1) {
        req.end(body);
        return;
      }
      const size = Math.ceil(body.length / chunks);
      for (let n = 0; n < chunks; n++) {
        if (settled || req.destroyed) return;
        const part = body.subarray(n * size, Math.min(body.length, (n + 1) * size));
        const last = n === chunks - 1 || (n + 1) * size >= body.length;
        if (last) {
          req.end(part);
        } else if (!req.write(part)) {
          await new Promise((r) => {
            req.once('drain', r);
            req.once('close', r);
          });
        }
        if (onChunk) await onChunk(n);
        if (last) return;
        if (gapMs) await sleep(gapMs);
      }
    })().catch((e) => done({ error: e.message, code: 'WRITE' }));
  });
}

export function json(res) {
  if (!res.body) return null;
  try {
    return JSON.parse(res.body.toString('utf8'));
  } catch {
    return null;
  }
}

/** One line describing what a request got, for logs and failure messages. */
export function describe(res) {
  if (res.status && !res.error) return `HTTP ${res.status}${res.body?.length ? `: ${res.body.toString('utf8').slice(0, 300)}` : ''}`;
  return `${res.code}${res.status ? ` after HTTP ${res.status}` : ''}: ${res.error}`;
}
