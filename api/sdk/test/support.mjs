// Test support for the loader's browser tests (no tests in here): headless Chromium, and a
// small Kiln stand-in on 127.0.0.1 that serves pages, engines and Ed25519-signed manifests
// and records telemetry beacons.

import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
// KILN_LOADER_FILE: test another build of the loader (e.g. a deliberately broken one).
export const LOADER_PATH = process.env.KILN_LOADER_FILE ?? path.join(here, '..', 'kiln-loader.js');

export function chromiumPath() {
  const file = process.env.KILN_CHROMIUM ?? '/usr/bin/chromium';
  if (!fs.existsSync(file)) throw new Error(`no Chromium at ${file} (apt-get install chromium, or set KILN_CHROMIUM)`);
  return file;
}

// Runs a CLI script (one of ours) in a child Node.js, outside the test runner, and collects
// its output. Asynchronous, so a stand-in server in this process can answer the child.
export function runSelf(file, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [file, ...args], { env: { ...process.env, NODE_TEST_CONTEXT: '' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => { stdout += c; });
    child.stderr.on('data', (c) => { stderr += c; });
    child.on('error', reject);
    child.on('close', (status) => {
      const lines = stdout.trim().split('\n').filter(Boolean);
      resolve({ status, stdout, stderr, lines, json: lines.length ? JSON.parse(lines.at(-1)) : null });
    });
  });
}

export function launchChromium() {
  // WebGL through SwiftShader, so real games (three.js) render headless too.
  return chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    args: ['--no-sandbox', '--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--ignore-gpu-blocklist'],
  });
}

export function sha256hex(bytes) {
  return crypto.createHash('sha256').update(bytes).digest('hex');
}

// A fake engine. Running it counts in globalThis.__executed and lists itself in __ran, so a
// test sees exactly which bytes executed. `evil` marks tampered bytes (__tampered).
export function makeEngine({ name = 'fake', version = '1.2.3', module = false, global = 'FAKEENGINE', evil = false } = {}) {
  const mark = `globalThis.__executed = (globalThis.__executed || 0) + 1;
(globalThis.__ran = globalThis.__ran || []).push(${JSON.stringify(`${name}@${version}${evil ? ':evil' : ''}`)});
${evil ? 'globalThis.__tampered = true;\n' : ''}`;
  const code = module
    ? `${mark}export const version = ${JSON.stringify(version)};
export function hello() { return ${JSON.stringify(`hello from ${name}@${version}`)}; }
`
    : `${mark}globalThis.${global} = { name: ${JSON.stringify(name)}, version: ${JSON.stringify(version)}${evil ? ', evil: true' : ''} };
`;
  // Padded to a fixed length so tampered bytes are the same size: only the hash tells them apart.
  const padded = `${code}//${'-'.repeat(Math.max(0, 599 - code.length))}\n`;
  const bytes = Buffer.from(padded);
  if (bytes.length !== 602) throw new Error('fake engine longer than its padding');
  return { name, version, module, global: module ? null : global, code: padded, bytes, sha256: sha256hex(bytes), size: bytes.length };
}

// The same engine with other bytes: same size, different hash.
export function tampered(engine) {
  const evil = makeEngine({ name: engine.name, version: engine.version, module: engine.module, global: engine.global ?? 'FAKEENGINE', evil: true });
  return evil.bytes;
}

const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.mjs': 'text/javascript; charset=utf-8', '.json': 'application/json' };

export async function startServer() {
  const files = new Map(); // path -> { body, headers, status, delayMs } or { handler(url) -> { body, headers, status } }
  const requests = [];
  const beacons = [];
  const good = crypto.generateKeyPairSync('ed25519');
  const other = crypto.generateKeyPairSync('ed25519');
  const jwk = (pair, kid) => ({ ...pair.publicKey.export({ format: 'jwk' }), kid, use: 'sig', alg: 'EdDSA' });
  // Trust roots (docs/key-rotation.md): `root` and `root2` sign trust documents, `forger` pretends to.
  const [root, root2, forger] = [0, 1, 2].map(() => crypto.generateKeyPairSync('ed25519'));
  const keys = { good: jwk(good, 'test-key-1'), other: jwk(other, 'test-key-2'), root: jwk(root, 'test-root-1'), root2: jwk(root2, 'test-root-2'), forger: jwk(forger, 'test-forger') };
  const pairs = { good, other, root, root2, forger };

  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://localhost');
    requests.push({ method: req.method, path: url.pathname, search: url.search });
    if (req.method === 'POST' && url.pathname === '/v1/telemetry') {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body = null;
        try { body = JSON.parse(text); } catch { /* recorded as null */ }
        beacons.push({ contentType: req.headers['content-type'] ?? null, body });
        res.writeHead(204, { 'access-control-allow-origin': '*' }).end();
      });
      return;
    }
    if (url.pathname === '/favicon.ico') {
      res.writeHead(204).end();
      return;
    }
    if (url.pathname === '/sdk/kiln-loader.js') {
      res.writeHead(200, { 'content-type': TYPES['.js'], 'cache-control': 'no-store' }).end(fs.readFileSync(LOADER_PATH));
      return;
    }
    const route = files.get(url.pathname);
    const file = route?.handler ? { ...route, ...route.handler(url) } : route;
    if (!file) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end(`not found: ${url.pathname}\n`);
      return;
    }
    const send = () => {
      if (res.destroyed) return;
      res.writeHead(file.status ?? 200, {
        'content-type': TYPES[path.extname(url.pathname)] ?? 'application/octet-stream',
        'cache-control': 'no-store',
        'access-control-allow-origin': '*',
        'access-control-expose-headers': 'Kiln-Signature, Kiln-Device-Class',
        ...file.headers,
      });
      res.end(file.body);
    };
    if (file.delayMs) setTimeout(send, file.delayMs);
    else send();
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const origin = `http://127.0.0.1:${server.address().port}`;

  return {
    origin,
    keys,
    trusted: [keys.good],
    files,
    requests,
    beacons,
    set(p, body, opts = {}) {
      files.set(p, { body: typeof body === 'string' ? Buffer.from(body) : body, ...opts });
      return origin + p;
    },
    // Answers `p` with whatever handler(url) returns ({ body, headers, status }), per request.
    route(p, handler) {
      files.set(p, { handler });
      return origin + p;
    },
    // A manifest's bytes and headers, signed like Kiln does: `Kiln-Signature: keyid=<kid>, sig=<base64>`.
    // key: 'good' | 'other'; corrupt: change the body after signing.
    signed(manifest, { key = 'good', corrupt = false, raw = null } = {}) {
      const body = Buffer.from(raw ?? JSON.stringify(manifest));
      const sig = crypto.sign(null, body, pairs[key].privateKey).toString('base64');
      const served = corrupt ? Buffer.from(body.toString().replace(/"sequence":(\d+)/, (_, n) => `"sequence":${Number(n) + 1000}`)) : body;
      return { body: served, headers: { 'kiln-signature': `keyid=${keys[key].kid}, sig=${sig}` } };
    },
    // Serves a trust document at /v1/keys/trust as Kiln does ({signed, signatures}), signed by
    // `by` (names of keys). doc: {version, expires, keys: [{jwk, status}], revoked}.
    trust(doc, { by = ['root'] } = {}) {
      const signed = JSON.stringify({ roots: by.map((k) => keys[k]), revoked: [], ...doc });
      const signatures = by.map((k) => ({ keyid: keys[k].kid, sig: crypto.sign(null, Buffer.from(signed), pairs[k].privateKey).toString('base64') }));
      return this.set('/v1/keys/trust', JSON.stringify({ signed, signatures }));
    },
    // Serves a signed manifest at `p`.
    manifest(p, manifest, opts = {}) {
      const { body, headers } = this.signed(manifest, opts);
      return this.set(p, body, { headers });
    },
    requested(p) {
      return requests.some((r) => r.path === p);
    },
    // Waits until the beacons for `game` hold at least `count` events; returns those events in arrival order.
    async beaconEvents(game, count, timeoutMs = 5000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const got = beacons.flatMap((b) => b.body?.events ?? []).filter((e) => e.game === game);
        if (got.length >= count || Date.now() > deadline) return got;
        await new Promise((r) => setTimeout(r, 25));
      }
    },
    close: () => new Promise((done) => { server.closeAllConnections?.(); server.close(() => done()); }),
  };
}

// An engine's entry in a boot config / manifest, served by `srv` under a test's own prefix:
// the library copy at /lib/<prefix>/<sha>.js, the build's own copy at <gameDir>/<path>.
export function publish(srv, prefix, engine, { path: enginePath, gameDir, library = engine.bytes, own = engine.bytes, libraryDelayMs = 0 } = {}) {
  const relPath = enginePath ?? (engine.module ? 'libs/fake.module.js' : 'libs/fake.js');
  const url = srv.set(`/lib/${prefix}/${engine.sha256}.js`, library, { delayMs: libraryDelayMs });
  const fallbackUrl = srv.set(`${gameDir}/${relPath}`, own);
  return {
    name: engine.name,
    version: engine.version,
    sha256: engine.sha256,
    size: engine.size,
    url,
    fallback_url: fallbackUrl,
    path: relPath,
    global: engine.global,
    module: engine.module,
  };
}

// A game page as Kiln's HTML rewrite produces it: the loader, the boot call, and every
// script after the removed engine tag deferred as text/kiln-deferred.
export function gamePage(config, deferredHtml = '', { head = '', bodyAttrs = '' } = {}) {
  const cfg = { ...config, engines: config.engines.map(({ fallback_url: _, ...e }) => e) };
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>game</title>
<script src="/sdk/kiln-loader.js"></script>
<script>kiln.boot(${JSON.stringify(cfg)})</script>
${head}
</head><body${bodyAttrs ? ` ${bodyAttrs}` : ''}>
<canvas id="c"></canvas>
${deferredHtml}
</body></html>
`;
}

export const CONTAINER_PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>container</title>
<script src="/sdk/kiln-loader.js"></script>
</head><body></body></html>
`;
