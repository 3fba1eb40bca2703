#!/usr/bin/env node
// The Kiln loader's own cost on the main thread, in headless Chromium at CPU throttling 4× and
// 1× (CDP Emulation.setCPUThrottlingRate), against a stated budget. A measurement, not a test:
// a missed budget is printed, not failed; the exit code is non-zero only when a step threw or
// a value is missing. Usage and what each row means: bench/load/README.md ("Loader cost").
//
//   node bench/load/loader-cost.mjs [--reps N] [--json FILE]
import { createHash, generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchChromium } from './lib/browser.mjs';
import { median, quantile } from './lib/stats.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const LOADER = join(ROOT, 'api', 'sdk', 'kiln-loader.js');
const ENGINE = join(ROOT, 'examples', 'sample-game', 'vendor', 'three.module.min.js');
const ENGINE_SIZE = 670 * 1024;
const MANIFEST_TARGET = 13 * 1024;
const GAME = 'lb-sample';
const RATES = [4, 1];
// Budgets (ms, at 4× CPU, on the median). `null`: shown, no budget.
const BUDGET = { parseRun: 10, manifest: 10, total: 20 };

function args(argv) {
  const o = { reps: 25, json: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--reps') o.reps = Number(argv[++i]);
    else if (a === '--json') o.json = argv[++i];
    else if (a === '-h' || a === '--help') {
      console.log('node bench/load/loader-cost.mjs [--reps N (>= 20, default 25)] [--json FILE]');
      process.exit(0);
    } else throw new Error(`unknown argument ${a}`);
  }
  if (!(Number.isInteger(o.reps) && o.reps >= 20)) throw new Error('--reps must be an integer >= 20');
  return o;
}

// ---- inputs: loader source, engine bytes, a signed ~13 KB manifest, a 64-entry index ----

function hex(n, seed) {
  return createHash('sha256').update(`${seed}:${n}`).digest('hex');
}

/** A manifest shaped like Kiln's (common/src/manifest.rs), grown with files to ~13 KB. */
function makeManifest(engine) {
  const build = '01JE' + hex(0, 'build').slice(0, 22).toUpperCase();
  const base = `https://kiln.example/play/${GAME}/@${build}/`;
  const lib = (sha) => `https://kiln.example/cdn/library/${sha.slice(0, 2)}/${sha}.js`;
  const variant = (path, v, size, decoder) => ({
    variant: v,
    path: path.replace(/\.glb$/, `.${v}.glb`),
    url: base + path.replace(/\.glb$/, `.${v}.glb`),
    size,
    brotli_size: Math.round(size * 0.71),
    needs_decoder: decoder,
  });
  const models = ['assets/Fox.glb', 'assets/level/ground.glb', 'assets/props/crate.glb'].map((path, i) => ({
    path,
    preferred: 'meshopt',
    fallback: 'quantized',
    variants: [variant(path, 'meshopt', 61_000 + i * 9000, true), variant(path, 'quantized', 98_000 + i * 9000, false), variant(path, 'original', 163_000 + i * 9000, false)],
    choice: {
      variant: 'meshopt',
      reason: 'fastest_total',
      detail: 'meshopt wins on transfer + decode for android-mid',
      estimates: [
        { variant: 'meshopt', bytes: 61_000, transfer_ms: 310, samples: 412, total_ms: 372 },
        { variant: 'quantized', bytes: 98_000, transfer_ms: 498, samples: 388, total_ms: 517 },
      ],
      explore: { variant: 'quantized', per_mille: 50 },
    },
  }));
  const m = {
    schema: 1,
    game: GAME,
    version: '1.4.2',
    build_id: build,
    sequence: 42,
    expires: new Date(Date.now() + 7 * 86400_000).toISOString(),
    created_at: new Date().toISOString(),
    device_class: 'android-mid',
    engines: [{ name: 'three', version: '0.180.0', sha256: engine.sha256, size: engine.size, url: lib(engine.sha256), fallback_url: base + 'vendor/three.module.min.js', path: 'vendor/three.module.min.js', global: '', module: true }],
    models,
    vat: [],
    warm: [base + 'game.js', base + 'src/scene.js', base + 'src/input.js', base + 'assets/Fox.meshopt.glb'],
    warm_models: ['assets/Fox.glb'],
    files: [],
  };
  for (let i = 0; JSON.stringify(m).length < MANIFEST_TARGET; i++) {
    const path = i % 3 === 0 ? `assets/textures/tex-${i}.webp` : i % 3 === 1 ? `src/module-${i}.js` : `assets/audio/sfx-${i}.ogg`;
    const key = `objects/${hex(i, 'obj').slice(0, 2)}/${hex(i, 'obj')}`;
    m.files.push({
      path,
      size: 1000 + ((i * 7919) % 90000),
      content_type: path.endsWith('.js') ? 'text/javascript' : path.endsWith('.webp') ? 'image/webp' : 'audio/ogg',
      key,
      url: base + path,
      encodings: path.endsWith('.js') ? [{ encoding: 'br', size: 400 + i * 13, key: key + '.br' }] : [],
    });
  }
  return m;
}

function makeIndex() {
  const idx = {};
  for (let i = 0; i < 64; i++) {
    const games = Array.from({ length: 1 + (i % 6) }, (_, j) => `game-${(i * 7 + j) % 97}`);
    idx[hex(i, 'lib')] = { name: ['three', 'phaser', 'pixi.js', 'babylonjs'][i % 4], version: `0.${150 + i}.0`, at: Date.now() - i * 3600_000, games, by: i % 5 ? 'page' : 'preheat' };
  }
  return idx;
}

// ---- the local server ----

function serve(files) {
  const server = http.createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    const f = files[path];
    if (!f) {
      res.writeHead(404).end();
      return;
    }
    // Cross-origin isolated: performance.now() then has 5 µs resolution instead of 100 µs.
    res.writeHead(200, {
      'content-type': f.type,
      'content-length': f.body.length,
      'cache-control': 'no-store',
      'cross-origin-opener-policy': 'same-origin',
      'cross-origin-embedder-policy': 'require-corp',
    });
    res.end(f.body);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

const PAGE = `<!doctype html><meta charset="utf-8"><title>kiln loader cost</title>
<script>
  window.__lt = [];
  try {
    new PerformanceObserver(function (l) { l.getEntries().forEach(function (e) { __lt.push([e.startTime, e.duration]); }); })
      .observe({ type: 'longtask', buffered: true });
    window.__ltOk = true;
  } catch (e) { window.__ltOk = false; }
</script>
<body>loader cost</body>`;

// ---- in-page steps (run through page.evaluate; no closures over Node values) ----

/** Step 1 and 5 in one fresh page: compile + run the loader, then the loader's storage reads. */
async function pageLoaderAndStorage({ rep, game }) {
  const now = () => performance.now();
  const tick = () => new Promise((r) => setTimeout(r, 0));
  if (globalThis.kiln) throw new Error('kiln already defined in a fresh page');
  // A unique tail: no compilation cache can serve the source twice.
  const src = (await (await fetch('/loader.js', { cache: 'no-store' })).text()) + '\n//# kiln-loader-cost rep ' + rep;
  const out = { windows: {} };
  await tick();
  let t0 = now();
  const fn = new Function(src);
  const t1 = now();
  fn();
  const t2 = now();
  if (!globalThis.kiln || globalThis.kiln.version !== '1') throw new Error('the loader did not define kiln');
  out.compile = t1 - t0;
  out.run = t2 - t1;
  out.parseRun = t2 - t0;
  out.windows.parseRun = [t0, t2];

  // The first localStorage access in this page (a key the loader reads, absent here): the
  // renderer loads the origin's storage area, whatever key is asked for.
  await tick();
  t0 = now();
  const cls = localStorage.getItem('kiln:class');
  const tF = now();
  if (cls !== null) throw new Error('kiln:class should be absent');
  out.first = tF - t0;
  out.windows.first = [t0, tF];
  await tick();
  t0 = now();
  const idx = JSON.parse(localStorage.getItem('kiln:lib'));
  const t3 = now();
  if (!idx || Object.keys(idx).length !== 64) throw new Error('kiln:lib: expected 64 entries');
  out.index = t3 - t0;
  out.windows.index = [t0, t3];
  await tick();
  t0 = now();
  const k = JSON.parse(localStorage.getItem('kiln:manifest:' + game));
  const m0 = JSON.parse(k.body); // kept(): the wrapper, then the body
  const t4 = now();
  if (!m0 || m0.game !== game) throw new Error('kept manifest: unreadable');
  out.kept = t4 - t0;
  out.windows.kept = [t0, t4];
  // What a fresh check writes back: the kept manifest (stringify + setItem) and the index.
  await tick();
  t0 = now();
  localStorage.setItem('kiln:manifest:' + game, JSON.stringify({ body: k.body, sig: k.sig, cls: k.cls }));
  localStorage.setItem('kiln:lib', JSON.stringify(idx));
  const t5 = now();
  out.write = t5 - t0;
  out.windows.write = [t0, t5];
  out.isolated = !!globalThis.crossOriginIsolated;
  out.longtaskObserver = !!globalThis.__ltOk;
  return out;
}

/** Steps 2–4, `reps` times each, in one page. */
async function pageAsyncSteps({ reps, jwk, sigB64, engineSha, cacheUrl }) {
  const now = () => performance.now();
  const tick = () => new Promise((r) => setTimeout(r, 0));
  const s = crypto.subtle;
  const bytes = new Uint8Array(await (await fetch('/manifest.json', { cache: 'no-store' })).arrayBuffer());
  const sig = Uint8Array.from(atob(sigB64), (c) => c.charCodeAt(0));
  const engine = await (await fetch('/engine.bin', { cache: 'no-store' })).arrayBuffer();
  const R = { manifest: [], verify: [], importKey: [], parse: [], manifestSync: [], importSync: [], verifySync: [], digest: [], digestSync: [], cache: [], cacheSync: [], windows: { manifest: [], digest: [], cache: [] } };

  for (let i = 0; i < reps; i++) {
    await tick();
    const tA = now();
    const pk = s.importKey('jwk', { kty: jwk.kty, crv: jwk.crv, x: jwk.x }, { name: 'Ed25519' }, false, ['verify']);
    const syncImport = now() - tA;
    const key = await pk;
    const tB = now();
    const pv = s.verify({ name: 'Ed25519' }, key, sig, bytes);
    const syncVerify = now() - tB;
    const ok = await pv;
    const tC = now();
    if (!ok) throw new Error('manifest signature does not verify');
    const m = JSON.parse(new TextDecoder().decode(bytes));
    const tD = now();
    if (!m || m.schema !== 1) throw new Error('manifest: not schema 1');
    R.manifest.push(tD - tA);
    R.importKey.push(tB - tA);
    R.verify.push(tC - tB);
    R.parse.push(tD - tC);
    R.manifestSync.push(syncImport + syncVerify + (tD - tC));
    R.importSync.push(syncImport);
    R.verifySync.push(syncVerify);
    R.windows.manifest.push([tA, tD]);
  }

  for (let i = 0; i < reps; i++) {
    await tick();
    const t0 = now();
    const p = s.digest('SHA-256', engine);
    const sync = now() - t0;
    const h = await p;
    const t1 = now();
    const got = Array.from(new Uint8Array(h), (b) => b.toString(16).padStart(2, '0')).join('');
    if (got !== engineSha) throw new Error('engine digest mismatch');
    R.digest.push(t1 - t0);
    R.digestSync.push(sync);
    R.windows.digest.push([t0, t1]);
  }

  const cache = await caches.open('kiln-loader-cost');
  await cache.put(cacheUrl, new Response(engine.slice(0), { headers: { 'content-type': 'text/javascript' } }));
  for (let i = 0; i < reps; i++) {
    await tick();
    const t0 = now();
    const pm = cache.match(cacheUrl);
    const sync = now() - t0;
    const res = await pm;
    if (!res) throw new Error('Cache Storage: no match');
    const ab = await res.arrayBuffer();
    const t1 = now();
    if (ab.byteLength !== engine.byteLength) throw new Error('Cache Storage: wrong size');
    R.cache.push(t1 - t0);
    R.cacheSync.push(sync);
    R.windows.cache.push([t0, t1]);
  }
  await caches.delete('kiln-loader-cost');
  return R;
}

/** Long tasks seen so far that overlap any of `windows` ([start, end] in page time). */
async function longTasksIn(page, windows) {
  // Long-task entries are delivered after the task: let the observer catch up.
  await page.evaluate(() => new Promise((r) => setTimeout(r, 100)));
  const lt = await page.evaluate(() => window.__lt || []);
  return lt.filter(([st, d]) => windows.some(([a, b]) => st < b && st + d > a)).map(([st, d]) => Math.round(d));
}

// ---- the run ----

async function main() {
  const o = args(process.argv.slice(2));
  const t0 = Date.now();
  const loaderSrc = readFileSync(LOADER);
  let engineBytes;
  let engineFrom;
  if (existsSync(ENGINE)) {
    engineBytes = readFileSync(ENGINE);
    engineFrom = 'examples/sample-game/vendor/three.module.min.js';
  } else {
    engineBytes = randomBytes(ENGINE_SIZE);
    engineFrom = `random bytes`;
  }
  const engineSha = createHash('sha256').update(engineBytes).digest('hex');
  const manifest = Buffer.from(JSON.stringify(makeManifest({ sha256: engineSha, size: engineBytes.length })));
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const sig = sign(null, manifest, privateKey);
  const jwk = { ...publicKey.export({ format: 'jwk' }), kid: 'kiln-bench-1' };
  const sigHeader = `keyid=${jwk.kid},sig=${sig.toString('base64')}`;
  const index = makeIndex();
  const keptManifest = JSON.stringify({ body: manifest.toString('utf8'), sig: sigHeader, cls: 'android-mid' });

  console.log(`loader: api/sdk/kiln-loader.js, ${loaderSrc.length} bytes; manifest ${manifest.length} bytes (Ed25519, node:crypto); engine ${engineBytes.length} bytes (${engineFrom}); index 64 entries, ${JSON.stringify(index).length} bytes; ${o.reps} repetitions per step and CPU rate`);

  const server = await serve({
    '/': { type: 'text/html; charset=utf-8', body: Buffer.from(PAGE) },
    '/loader.js': { type: 'text/javascript', body: loaderSrc },
    '/manifest.json': { type: 'application/json', body: manifest },
    '/engine.bin': { type: 'application/octet-stream', body: engineBytes },
  });
  const origin = `http://127.0.0.1:${server.address().port}`;
  let browser = null;
  const errors = [];
  const results = {};
  const stop = async () => {
    if (browser) await browser.close().catch(() => {});
    browser = null;
    await new Promise((r) => server.close(r));
  };
  const onSignal = () => {
    stop().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  try {
    browser = await launchChromium();
    for (const rate of RATES) {
      const R = (results[rate] = { samples: {}, longtasks: {}, isolated: null, longtaskObserver: null });
      const push = (k, v) => (R.samples[k] ||= []).push(v);
      const context = await browser.newContext({ viewport: { width: 412, height: 823 }, deviceScaleFactor: 1 });
      const open = async () => {
        const page = await context.newPage();
        page.on('pageerror', (e) => errors.push(`${rate}x pageerror: ${e.message}`));
        const cdp = await context.newCDPSession(page);
        await cdp.send('Emulation.setCPUThrottlingRate', { rate });
        await page.goto(origin + '/', { waitUntil: 'load' });
        return page;
      };
      try {
        // The device's storage as a returning player has it (unthrottled set-up page).
        const setup = await context.newPage();
        await setup.goto(origin + '/', { waitUntil: 'load' });
        await setup.evaluate(([idx, kept, game]) => {
          localStorage.setItem('kiln:lib', idx);
          localStorage.setItem('kiln:manifest:' + game, kept);
        }, [JSON.stringify(index), keptManifest, GAME]);
        await setup.close();

        // Steps 1 and 5: one fresh page per repetition.
        const lt = { parseRun: [], first: [], index: [], kept: [], write: [] };
        for (let i = 0; i < o.reps; i++) {
          const page = await open();
          try {
            const r = await page.evaluate(pageLoaderAndStorage, { rep: `${rate}x-${i}-${Date.now()}`, game: GAME });
            for (const k of ['compile', 'run', 'parseRun', 'first', 'index', 'kept', 'write']) push(k, r[k]);
            for (const k of Object.keys(lt)) lt[k].push(...(await longTasksIn(page, [r.windows[k]])));
            R.isolated = r.isolated;
            R.longtaskObserver = r.longtaskObserver;
          } catch (e) {
            errors.push(`${rate}x loader/storage rep ${i}: ${String(e.message).split('\n')[0]}`);
          } finally {
            await page.close().catch(() => {});
          }
        }
        Object.assign(R.longtasks, { compile: lt.parseRun, run: lt.parseRun }, lt);

        // Steps 2–4: one page, every repetition in it.
        const page = await open();
        try {
          const r = await page.evaluate(pageAsyncSteps, {
            reps: o.reps,
            jwk,
            sigB64: sig.toString('base64'),
            engineSha,
            cacheUrl: `${origin}/cdn/library/${engineSha.slice(0, 2)}/${engineSha}.js`,
          });
          for (const k of ['manifest', 'verify', 'importKey', 'parse', 'importSync', 'verifySync', 'manifestSync', 'digest', 'digestSync', 'cache', 'cacheSync']) R.samples[k] = r[k];
          for (const k of ['manifest', 'digest', 'cache']) R.longtasks[k] = await longTasksIn(page, r.windows[k]);
          for (const k of ['verify', 'importKey', 'parse', 'importSync', 'verifySync', 'manifestSync']) R.longtasks[k] = R.longtasks.manifest;
          R.longtasks.digestSync = R.longtasks.digest;
          R.longtasks.cacheSync = R.longtasks.cache;
        } catch (e) {
          errors.push(`${rate}x async steps: ${String(e.message).split('\n')[0]}`);
        } finally {
          await page.close().catch(() => {});
        }
      } finally {
        await context.close().catch(() => {});
      }
    }
  } catch (e) {
    errors.push(`run: ${String(e.message).split('\n')[0]}`);
  } finally {
    await stop();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }

  // ---- the table ----
  // [key, label, budget key, thread, key of the synchronous part (promise rows)]
  const ROWS = [
    ['parseRun', '1. loader parse + run (new Function + call)', 'parseRun', 'main'],
    ['compile', '   compile (new Function)', null, 'main'],
    ['run', '   run (call)', null, 'main'],
    ['manifest', '2. manifest verify + parse (importKey + verify + decode + JSON.parse)', 'manifest', 'promise', 'manifestSync'],
    ['importKey', '   importKey (jwk, Ed25519)', null, 'promise', 'importSync'],
    ['verify', '   verify alone (Ed25519, 13 KB)', null, 'promise', 'verifySync'],
    ['parse', '   UTF-8 decode + JSON.parse', null, 'main'],
    ['manifestSync', '   main-thread share (importKey() + verify() calls + parse)', null, 'main'],
    ['digest', '3. engine hash (SHA-256 digest, 670 KB)', null, 'promise', 'digestSync'],
    ['cache', '4. Cache Storage match + arrayBuffer (670 KB)', null, 'promise', 'cacheSync'],
    ['first', '5. localStorage first access in the page (storage area loads)', null, 'main'],
    ['index', '   kiln:lib read + parse (64 entries)', null, 'main'],
    ['kept', '   kept manifest read + parse (wrapper + body)', null, 'main'],
    ['write', '   write-back: kept manifest + index (stringify + setItem)', null, 'main'],
  ];
  const KEYS = [...ROWS.map((r) => r[0]), ...ROWS.filter((r) => r[4]).map((r) => r[4])].filter((k, i, a) => a.indexOf(k) === i);
  let measurements = 0;
  const missing = [];
  const stat = {};
  for (const rate of RATES) {
    stat[rate] = {};
    for (const k of KEYS) {
      const v = (results[rate] && results[rate].samples[k]) || [];
      measurements += v.length;
      if (v.length < o.reps || v.some((x) => !Number.isFinite(x))) missing.push(`${rate}x ${k}: ${v.length}/${o.reps} values`);
      stat[rate][k] = { median: median(v), p90: quantile(v, 0.9), n: v.length };
    }
    // Promise rows: the median share of each repetition's wall time spent before the call
    // returned, i.e. synchronously on the main thread.
    for (const [k, , , , syncKey] of ROWS) {
      if (!syncKey) continue;
      const w = (results[rate] && results[rate].samples[k]) || [];
      const sy = (results[rate] && results[rate].samples[syncKey]) || [];
      stat[rate][k].sync = median(w.map((x, i) => (x > 0 && sy[i] != null ? Math.min(1, sy[i] / x) : null)));
    }
    // Page mode, repeat visit of the same build (the heaviest page-mode case): the loader is
    // parsed and run, reads its index and the kept manifest, checks the kept manifest and the
    // fresh one (2 × the manifest's main-thread share) and writes both back.
    const S = stat[rate];
    const sum = (q, parts) => parts.reduce((a, [k, n]) => (a == null || S[k][q] == null ? null : a + n * S[k][q]), 0);
    const mainParts = [['parseRun', 1], ['first', 1], ['index', 1], ['kept', 1], ['manifestSync', 2], ['write', 1]];
    const boundParts = [['parseRun', 1], ['first', 1], ['index', 1], ['kept', 1], ['manifest', 2], ['write', 1]];
    S.total = { median: sum('median', mainParts), p90: sum('p90', mainParts) };
    S.bound = { median: sum('median', boundParts), p90: sum('p90', boundParts) };
  }
  ROWS.push(['total', 'total main thread, page mode (repeat visit: 1 + 5 + 2 × manifest share)', 'total', 'sum']);
  ROWS.push(['bound', '   upper bound (2 × manifest promise time instead)', 'total', 'sum']);

  const f = (x) => (x == null ? '—' : x.toFixed(2));
  const header = ['CPU', 'step', 'median ms', 'p90 ms', 'n', 'thread', 'in call', 'long tasks', 'budget', ''];
  const lines = [];
  for (const rate of RATES) {
    for (const [k, label, budgetKey, thread] of ROWS) {
      const s = stat[rate][k];
      const b = rate === 4 && budgetKey ? BUDGET[budgetKey] : null;
      const lts = k === 'total' || k === 'bound' ? null : (results[rate] && results[rate].longtasks[k]) || [];
      const ltCell = lts == null ? '' : lts.length ? `${lts.length} (${lts.join(', ')} ms)` : '0';
      const mark = b == null ? '' : s.median == null ? 'no data' : s.median <= b ? 'pass' : 'FAIL';
      const inCall = s.sync == null ? '' : `${Math.round(100 * s.sync)} %`;
      lines.push([`${rate}×`, label, f(s.median), f(s.p90), s.n == null ? '' : String(s.n), thread, inCall, ltCell, b == null ? '' : `≤ ${b}`, mark]);
    }
  }
  const w = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const row = (cells) => '| ' + cells.map((c, i) => ((i >= 2 && i <= 4) || i === 6 ? c.padStart(w[i]) : c.padEnd(w[i]))).join(' | ') + ' |';
  console.log('');
  console.log(row(header));
  console.log('|' + w.map((n, i) => ((i >= 2 && i <= 4) || i === 6 ? '-'.repeat(n + 1) + ':' : '-'.repeat(n + 2))).join('|') + '|');
  let last = null;
  for (const l of lines) {
    if (last && l[0] !== last) console.log(row(header.map(() => '')));
    last = l[0];
    console.log(row(l));
  }
  const iso = RATES.map((r) => results[r] && results[r].isolated);
  const obs = RATES.map((r) => results[r] && results[r].longtaskObserver);
  console.log('');
  console.log(`thread: "main" = synchronous on the page's main thread; "promise" = wall time from the call until its promise settled (main-thread work plus any work elsewhere); "sum" = a sum of rows.`);
  console.log(`in call: median share of a promise row's wall time that passed before the call returned, i.e. synchronously on the main thread (near 100 %: computed in the call, so the whole promise time is main-thread time).`);
  console.log(`long tasks: PerformanceObserver('longtask') entries (≥ 50 ms) overlapping the step, over all its repetitions (observer ${obs.every(Boolean) ? 'on' : 'UNAVAILABLE'}); crossOriginIsolated ${iso.every(Boolean) ? 'yes (5 µs timer)' : 'no (100 µs timer)'}.`);
  console.log(`budget: at 4× CPU, on the median; a miss is reported, not failed. Total = loader parse+run + first localStorage access + index + kept manifest + 2 × manifest main-thread share + write-back.`);
  for (const e of errors) console.log(`error: ${e}`);
  for (const m of missing) console.log(`missing: ${m}`);
  const wall = ((Date.now() - t0) / 1000).toFixed(1);
  if (o.json) {
    writeFileSync(o.json, JSON.stringify({ when: new Date().toISOString(), reps: o.reps, loaderBytes: loaderSrc.length, manifestBytes: manifest.length, engineBytes: engineBytes.length, engineFrom, budget: BUDGET, stat, results, errors, missing, wallS: Number(wall) }, null, 1));
    console.log(`json: ${o.json}`);
  }
  console.log(`wall: ${wall} s`);
  const nErr = errors.length + missing.length;
  console.log(`loader cost: ${measurements} measurements, ${nErr} errors`);
  process.exitCode = nErr ? 1 : 0;
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  console.log('loader cost: 0 measurements, 1 errors');
  process.exitCode = 1;
});
