#!/usr/bin/env node
// Loads one model of a real Kiln game in headless Chromium through the loader's kiln.model, with
// three.js' GLTFLoader and meshoptimizer's real decoder; then again with a decoder whose
// WebAssembly "crashed" (seed 000: it did on some low-end phones), which must fall back.
//
//   node api/sdk/test/decode-e2e.mjs --manifest <manifest URL> --model <model path>
//        [--device-class <class>] [--timeout-ms 60000]
//
// The page is served by a local static server on 127.0.0.1 (three 0.150 from node_modules,
// through an import map) and loads the loader from the Kiln itself, new URL('/sdk/kiln-loader.js',
// manifest), so beacons go to that Kiln's /v1/telemetry. Keys: GET <kiln>/v1/keys.
//   (a) chosen:   kiln.model(model, {decoder: MeshoptDecoder, parse: GLTFLoader.parse}) must load
//                 the variant the per-device manifest chose (choice.variant), with no fallback,
//                 into a scene with meshes that have vertices;
//   (b) fallback: a new page of the same browser profile, decoder {ready: Promise.reject(..)} and
//                 a GLTFLoader without the meshopt decoder. If (a)'s variant needs no decoder, the
//                 model's decoder-needing variant (meshopt) is forced with options.variant. It must
//                 load the model's `fallback` variant (quantized) with fallback true, reason
//                 decoder_init_failed, decoder none.
// The manifest responses must be per-device: a query appended by the loader (descriptor, or
// device=<class> once the class is cached; --device-class forces it), `device_class` in the
// signed body, the same class in Kiln-Device-Class, a `choice` for the model. Each decode event
// must leave the page in a beacon to <kiln>/v1/telemetry, answered with no 4xx/5xx status.
// Right after a release Kiln may still be signing the class manifests (it then serves the base
// one with Kiln-Variant-Choice: pending): the run first waits for them, up to --timeout-ms.
//
// Prints one JSON line: {"ok": true, "device_class", "chosen": {...}, "fallback": {...},
// "events": [the decode events], "telemetry": {...}}. On a failed check it prints
// {"ok": false, "error": "...", ...what it had} and the message on stderr, and exits 1.
// Exit 2 on bad usage. Chromium: /usr/bin/chromium, or KILN_CHROMIUM.
//
// Run with no arguments by `node --test api/sdk/test/`, it tests itself against a local stand-in.

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { launchChromium } from './support.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const THREE_DIR = path.join(here, '..', 'node_modules', 'three-150');
const CLASSES = ['ios-high', 'ios-low', 'android-high', 'android-mid', 'android-low', 'desktop', 'unknown'];
const SETTLE_MS = 250;

class CheckFailed extends Error {}
function check(ok, message) {
  if (!ok) throw new CheckFailed(message);
}
const show = (v) => JSON.stringify(v);
const samePath = (a, b) => String(a).replace(/^\.?\//, '') === String(b).replace(/^\.?\//, '');

// The page: three 0.150 via an import map, and the loader from the Kiln.
async function staticServer(loaderUrl) {
  const attr = loaderUrl.replace(/&/g, '&amp;').replace(/"/g, '&quot;');
  const html = `<!doctype html>
<html><head><meta charset="utf-8"><title>kiln decode e2e</title>
<script type="importmap">{"imports":{"three":"/three/build/three.module.js","three/addons/":"/three/examples/jsm/"}}</script>
<script src="${attr}"></script>
</head><body></body></html>
`;
  const root = fs.realpathSync(THREE_DIR);
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://localhost');
    if (url.pathname === '/') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(html);
      return;
    }
    if (url.pathname.startsWith('/three/')) {
      const file = path.resolve(root, `.${decodeURIComponent(url.pathname.slice('/three'.length))}`);
      if (file.startsWith(root + path.sep) && fs.existsSync(file) && fs.statSync(file).isFile()) {
        res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8' }).end(fs.readFileSync(file));
        return;
      }
    }
    res.writeHead(url.pathname === '/favicon.ico' ? 204 : 404).end();
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  return { origin: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(() => r()); }) };
}

// Runs in the page.
async function inPage({ loaderUrl, manifest, keys, model, deviceClass, broken, variant }) {
  if (!window.kiln || typeof kiln.model !== 'function') return { error: `${loaderUrl} did not load, or has no kiln.model` };
  const [{ GLTFLoader }, { MeshoptDecoder }] = await Promise.all([
    import('three/addons/loaders/GLTFLoader.js'),
    import('three/addons/libs/meshopt_decoder.module.js'),
  ]);
  kiln.configure(deviceClass ? { keys, deviceClass } : { keys });
  let preheat;
  try {
    preheat = await kiln.preheat(manifest);
  } catch (e) {
    return { error: `kiln.preheat rejected the manifest: ${e.reason}: ${e.message}` };
  }
  const loader = new GLTFLoader();
  let decoder;
  if (broken) {
    const ready = Promise.reject(new Error('wasm crashed'));
    ready.catch(() => {});
    decoder = { ready };
  } else {
    decoder = MeshoptDecoder;
    loader.setMeshoptDecoder(MeshoptDecoder);
  }
  const parseErrors = [];
  const options = {
    decoder,
    parse: (buf, info) => new Promise((y, n) => loader.parse(buf, new URL('.', info.url).href, y, n)).catch((e) => {
      const head = new TextDecoder().decode(new Uint8Array(buf, 0, Math.min(buf.byteLength, 1 << 16)));
      const khr = head.includes('KHR_meshopt_compression') ? ' (KHR_meshopt_compression: three 0.150 reads only EXT_meshopt_compression)' : '';
      parseErrors.push(`${info.variant}: ${e?.message ?? e}${khr}`);
      throw e;
    }),
  };
  if (variant) options.variant = variant;
  let r;
  try {
    r = await kiln.model(model, options);
  } catch (e) {
    return { preheat, device: kiln.device(), error: `kiln.model rejected: ${e.reason}: ${e.message}`, parse_errors: parseErrors };
  }
  let meshes = 0;
  let vertices = 0;
  r.result?.scene?.traverse((o) => {
    if (o.isMesh) {
      meshes++;
      vertices += o.geometry?.attributes?.position?.count ?? 0;
    }
  });
  const { result: _, ...rest } = r;
  return { preheat, device: kiln.device(), result: { ...rest, meshes, vertices }, parse_errors: parseErrors };
}

// Right after a release, Kiln serves the base manifest with `Kiln-Variant-Choice: pending` until
// its class manifests are signed: wait for them (a class manifest for one class stands for all).
async function choicesSigned(manifest, deviceClass, timeoutMs) {
  if (/[?#]/.test(manifest)) return;
  const url = `${manifest}?device=${deviceClass ?? 'desktop'}`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await fetch(url, { cache: 'no-store' }).catch(() => null);
    await res?.arrayBuffer().catch(() => {});
    if (res?.headers.get('kiln-variant-choice') !== 'pending' || Date.now() > deadline) return;
    await new Promise((r) => setTimeout(r, 500));
  }
}

function withTimeout(promise, ms, message) {
  let t;
  return Promise.race([promise, new Promise((_, reject) => { t = setTimeout(() => reject(new CheckFailed(message)), ms); })])
    .finally(() => clearTimeout(t));
}

export async function run({ manifest, model, deviceClass = null, timeoutMs = 60000 }) {
  const report = { ok: false, device_class: null, chosen: null, fallback: null, events: [] };
  const loaderUrl = new URL('/sdk/kiln-loader.js', manifest).href;
  const telemetryUrl = new URL('/v1/telemetry', manifest).href;
  const keysUrl = new URL('/v1/keys', manifest).href;
  let site = null;
  let browser = null;
  try {
    let keys;
    try {
      const res = await fetch(keysUrl);
      check(res.ok, `GET ${keysUrl}: HTTP ${res.status}`);
      keys = (await res.json()).keys;
    } catch (e) {
      throw new CheckFailed(`cannot read the keys at ${keysUrl}: ${e.message}`);
    }
    check(Array.isArray(keys) && keys.length > 0, `${keysUrl} lists no keys`);
    check(fs.existsSync(path.join(THREE_DIR, 'examples/jsm/loaders/GLTFLoader.js')), `no three 0.150 at ${THREE_DIR} (npm ci in api/sdk)`);

    await choicesSigned(manifest, deviceClass, timeoutMs);
    site = await staticServer(loaderUrl);
    browser = await launchChromium();
    const ctx = await browser.newContext();
    const manifestBase = manifest.split(/[?#]/)[0];
    const served = []; // the manifest responses the pages got, in order
    const posts = []; // beacons to the Kiln's telemetry
    ctx.on('response', (res) => {
      if (res.request().method() !== 'GET' || res.url().split('?')[0] !== manifestBase) return;
      served.push(res.body().then((b) => b.toString('utf8'), () => null).then((body) => ({
        url: res.url(), status: res.status(), class_header: res.headers()['kiln-device-class'] ?? null,
        variant_choice: res.headers()['kiln-variant-choice'] ?? null, body,
      })));
    });
    ctx.on('request', (req) => {
      if (req.method() !== 'POST' || req.url() !== telemetryUrl) return;
      const post = { events: [], status: null };
      try { post.events = JSON.parse(req.postData() ?? '').events ?? []; } catch { /* not JSON: no events */ }
      posts.push(post);
      req.response().then((r) => { post.status = r ? r.status() : null; }, () => {});
    });

    async function page(name, args) {
      const p = await ctx.newPage();
      const errors = [];
      p.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
      p.on('pageerror', (e) => errors.push(String(e?.message ?? e)));
      try {
        await p.goto(`${site.origin}/`, { waitUntil: 'load', timeout: timeoutMs });
        const out = await withTimeout(p.evaluate(inPage, { loaderUrl, manifest, keys, model, deviceClass, ...args }), timeoutMs,
          `${name}: no result within ${timeoutMs} ms`);
        await p.waitForTimeout(SETTLE_MS);
        out.events = (await p.evaluate(() => (window.kiln ? kiln.events : []))).filter((e) => e.type === 'decode');
        out.console_errors = errors;
        const parse = out.parse_errors?.length ? ` (GLTFLoader: ${out.parse_errors.join(' | ')})` : '';
        check(!out.error, `${name}: ${out.error}${parse}${errors.length ? ` (console: ${errors.join(' | ')})` : ''}`);
        return out;
      } finally {
        await p.goto('about:blank').catch(() => {}); // pagehide: the loader flushes its beacons
        await p.close().catch(() => {});
      }
    }

    // (a) the variant chosen for this device, with the real decoder.
    const a = await page('chosen', {});
    const [first] = await Promise.all(served);
    check(first, `the page never fetched ${manifestBase}`);
    check(first.status === 200, `${first.url}: HTTP ${first.status}`);
    const query = new URL(first.url).searchParams;
    if (!/[?#]/.test(manifest)) {
      check(deviceClass ? query.get('device') === deviceClass : query.has('device') || query.has('os') || query.has('runtime'),
        `the loader did not ask for a per-device manifest: ${first.url}`);
    }
    let body;
    try { body = JSON.parse(first.body); } catch { throw new CheckFailed(`${first.url}: the manifest is not JSON`); }
    const cls = body.device_class;
    check(CLASSES.includes(cls), `${first.url}: the manifest has no valid device_class${cls === undefined ? '' : ` (${show(cls)})`}: not a per-device manifest${
      first.variant_choice ? ` (Kiln-Variant-Choice: ${first.variant_choice}: the class manifests were not signed yet)` : ''}`);
    check(first.class_header === cls, `${first.url}: Kiln-Device-Class ${show(first.class_header)}, but the signed manifest says ${show(cls)}`);
    if (deviceClass) check(cls === deviceClass, `asked for ${deviceClass}, the server used ${cls}`);
    report.device_class = cls;
    check(a.preheat.device_class === cls, `kiln.preheat reported device_class ${show(a.preheat.device_class)}, the manifest says ${cls}`);
    if (cls !== 'unknown') check(a.device.class === cls, `beacons would say device.class ${show(a.device.class)}, the server said ${cls}`);

    const entry = (body.models ?? []).find((m) => samePath(m.path, model));
    check(entry, `no model ${show(model)} in the manifest (models: ${show((body.models ?? []).map((m) => m.path))})`);
    check(entry.choice && typeof entry.choice.variant === 'string', `the per-device manifest has no choice for ${entry.path}: ${show(entry.choice)}`);
    const variants = entry.variants ?? [];
    const chosen = variants.find((v) => v.variant === entry.choice.variant);
    check(chosen, `choice.variant ${show(entry.choice.variant)} is not among the variants ${show(variants.map((v) => v.variant))}`);

    const ra = a.result;
    report.chosen = { ...ra, choice: entry.choice, manifest_request: first.url, parse_errors: a.parse_errors, console_errors: a.console_errors };
    check(ra.fallback === false && ra.reason === null, `the chosen variant fell back: ${ra.reason} (to ${ra.variant})${
      a.parse_errors.length ? `; GLTFLoader: ${a.parse_errors.join(' | ')}` : ''}`);
    const explored = entry.choice.explore?.variant === ra.variant
      ? ` (the loader explored it: choice.explore is ${show(entry.choice.explore)}; run against a Kiln with KILN_VARIANT_EXPLORE_PER_MILLE=0)` : '';
    check(ra.variant === chosen.variant, `loaded ${ra.variant}, but the manifest chose ${chosen.variant} (${entry.choice.reason})${explored}`);
    check(ra.bytes === chosen.size, `${ra.url}: ${ra.bytes} bytes, the manifest says ${chosen.size}`);
    check(chosen.needs_decoder ? ['wasm-simd', 'wasm'].includes(ra.decoder) : ra.decoder === 'none', `decoder ${show(ra.decoder)} for ${ra.variant}`);
    check(ra.meshes > 0 && ra.vertices > 0, `GLTFLoader gave ${ra.meshes} meshes with ${ra.vertices} vertices for ${ra.url}`);
    check(typeof ra.ms === 'number', 'the decode was not timed');
    check(a.events.length === 1, `page (a) sent ${a.events.length} decode events: ${show(a.events)}`);
    const ea = a.events[0];
    for (const [k, v] of Object.entries({ game: body.game, asset: entry.path, variant: ra.variant, decoder: ra.decoder, bytes: ra.bytes, ms: ra.ms, fallback: false, reason: null })) {
      check(ea[k] === v, `decode event (a): ${k} is ${show(ea[k])}, expected ${show(v)}`);
    }
    check(ea.device?.class === a.device.class, `decode event (a): device ${show(ea.device)}`);

    // (b) the decoder's wasm "crashed": the fallback variant, through GLTFLoader without a decoder.
    const needing = chosen.needs_decoder ? chosen : variants.find((v) => v.needs_decoder);
    check(needing, `${entry.path} has no variant that needs a decoder (${show(variants.map((v) => v.variant))}): nothing to fall back from`);
    let expected = variants.find((v) => v.variant === entry.fallback && !v.needs_decoder && v !== needing);
    expected ??= variants.find((v) => v.variant === 'original' && v !== needing);
    check(expected, `${entry.path}: no fallback variant (fallback ${show(entry.fallback)}) that needs no decoder`);
    const forced = needing !== chosen;
    const b = await page('fallback', { broken: true, variant: forced ? needing.variant : null });
    const all = await Promise.all(served);
    const second = all[1];
    check(second && JSON.parse(second.body).device_class === cls, `page (b) got another class: ${second?.url}`);
    if (!/[?#]/.test(manifest) && cls !== 'unknown') {
      check(new URL(second.url).search === `?device=${cls}`, `page (b) did not ask for the cached class ${cls}: ${second.url}`);
    }
    const rb = b.result;
    report.fallback = { ...rb, requested: needing.variant, forced, manifest_request: second.url, parse_errors: b.parse_errors, console_errors: b.console_errors };
    check(rb.variant === expected.variant, `with a crashed decoder, loaded ${rb.variant}; expected the fallback ${expected.variant}`);
    const exploredB = !forced && entry.choice.explore?.variant === rb.variant && rb.fallback === false
      ? ` (the loader explored ${rb.variant}: choice.explore is ${show(entry.choice.explore)}; run against a Kiln with KILN_VARIANT_EXPLORE_PER_MILLE=0)` : '';
    check(rb.fallback === true && rb.reason === 'decoder_init_failed', `fallback ${rb.fallback}, reason ${show(rb.reason)}; expected true, decoder_init_failed${exploredB}`);
    check(rb.decoder === 'none', `decoder ${show(rb.decoder)} for ${rb.variant}`);
    check(rb.bytes === expected.size, `${rb.url}: ${rb.bytes} bytes, the manifest says ${expected.size}`);
    check(rb.meshes > 0 && rb.vertices > 0, `GLTFLoader gave ${rb.meshes} meshes with ${rb.vertices} vertices for ${rb.url}`);
    check(b.events.length === 1, `page (b) sent ${b.events.length} decode events: ${show(b.events)}`);
    const eb = b.events[0];
    for (const [k, v] of Object.entries({ game: body.game, asset: entry.path, variant: expected.variant, decoder: 'none', bytes: rb.bytes, ms: rb.ms, fallback: true, reason: 'decoder_init_failed' })) {
      check(eb[k] === v, `decode event (b): ${k} is ${show(eb[k])}, expected ${show(v)}`);
    }
    check(typeof eb.ms === 'number', 'decode event (b): the fallback decode was not timed');
    report.events = [ea, eb];

    // Every decode event left in a beacon to the Kiln, and the Kiln did not refuse it.
    // The loader adds the manifest's beacon token to what it posts (docs/telemetry.md).
    const key = (e) => { const { beacon, ...rest } = e; return JSON.stringify(rest); };
    const deadline = Date.now() + 5000;
    const sent = () => new Set(posts.flatMap((p) => p.events.filter((e) => e.type === 'decode').map(key)));
    while (!report.events.every((e) => sent().has(key(e))) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    report.telemetry = { url: telemetryUrl, posts: posts.length, statuses: posts.map((p) => p.status) };
    check(report.events.every((e) => sent().has(key(e))), `not every decode event was posted to ${telemetryUrl} (${posts.length} posts seen)`);
    const untokened = posts.flatMap((p) => p.events.filter((e) => e.type === 'decode' && !(e.beacon && typeof e.beacon.token === 'string')));
    if (body.beacon) check(!untokened.length, `decode events posted without the manifest's beacon token: ${show(untokened)}`);
    const refused = posts.filter((p) => p.status >= 400);
    check(!refused.length, `${telemetryUrl} answered ${refused.map((p) => p.status).join(', ')} to a beacon`);
    report.ok = true;
    return report;
  } catch (e) {
    report.error = e instanceof CheckFailed ? e.message : String(e?.stack ?? e);
    return report;
  } finally {
    await browser?.close().catch(() => {});
    await site?.close();
  }
}

function usage(message) {
  if (message) process.stderr.write(`decode-e2e: ${message}\n`);
  process.stderr.write('usage: node api/sdk/test/decode-e2e.mjs --manifest <manifest URL> --model <model path> [--device-class <class>] [--timeout-ms N]\n');
  process.exit(2);
}

async function main(argv) {
  const opts = { manifest: null, model: null, deviceClass: null, timeoutMs: 60000 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--manifest') opts.manifest = argv[++i];
    else if (a === '--model') opts.model = argv[++i];
    else if (a === '--device-class') opts.deviceClass = argv[++i];
    else if (a === '--timeout-ms') opts.timeoutMs = Number(argv[++i]);
    else usage(`unknown argument ${a}`);
  }
  if (!opts.manifest) usage('--manifest is required');
  if (!opts.model) usage('--model is required');
  try {
    if (!/^https?:$/.test(new URL(opts.manifest).protocol)) usage('--manifest must be an http(s) URL');
  } catch {
    usage(`--manifest ${opts.manifest} is not a URL`);
  }
  if (opts.deviceClass && !CLASSES.includes(opts.deviceClass)) usage(`--device-class must be one of ${CLASSES.join(', ')}`);
  if (!(opts.timeoutMs > 0)) usage('--timeout-ms must be a positive number');
  const report = await run(opts);
  process.stdout.write(`${JSON.stringify(report)}\n`);
  if (!report.ok) process.stderr.write(`decode-e2e: ${report.error}\n`);
  process.exit(report.ok ? 0 : 1);
}

// ---- self-test: a stand-in Kiln serving real glTF variants (a meshopt one made here) ----

// meshoptimizer's vertex codec, version 0 (EXT_meshopt_compression), every byte group stored
// with 8 bits: not small, but what meshoptimizer's own decoder reads.
function encodeVertexBufferV0(data, count, stride) {
  const out = [0xa0];
  const blockSize = Math.min(256, Math.floor(8192 / stride) & ~15);
  const last = Array.from(data.subarray(0, stride));
  for (let start = 0; start < count; start += blockSize) {
    const n = Math.min(blockSize, count - start);
    const aligned = (n + 15) & ~15;
    for (let k = 0; k < stride; k++) {
      const deltas = new Uint8Array(aligned);
      let p = last[k];
      for (let i = 0; i < n; i++) {
        const v = data[(start + i) * stride + k];
        const s = ((v - p) << 24) >> 24;
        deltas[i] = s >= 0 ? 2 * s : -2 * s - 1;
        p = v;
      }
      const header = new Array((aligned / 16 + 3) >> 2).fill(0);
      for (let g = 0; g < aligned / 16; g++) header[g >> 2] |= 3 << ((g & 3) * 2);
      out.push(...header, ...deltas);
    }
    for (let k = 0; k < stride; k++) last[k] = data[(start + n - 1) * stride + k];
  }
  for (let i = stride; i < 32; i++) out.push(0);
  out.push(...data.subarray(0, stride));
  return Uint8Array.from(out);
}

function glb(json, bin) {
  const pad = (b, fill) => Buffer.concat([b, Buffer.alloc((4 - (b.length % 4)) % 4, fill)]);
  const j = pad(Buffer.from(JSON.stringify(json)), 0x20);
  const d = pad(Buffer.from(bin), 0);
  const head = Buffer.alloc(12);
  head.writeUInt32LE(0x46546c67, 0);
  head.writeUInt32LE(2, 4);
  head.writeUInt32LE(12 + 8 + j.length + 8 + d.length, 8);
  const chunk = (type, b) => { const h = Buffer.alloc(8); h.writeUInt32LE(b.length, 0); h.writeUInt32LE(type, 4); return Buffer.concat([h, b]); };
  return Buffer.concat([head, chunk(0x4e4f534a, j), chunk(0x004e4942, d)]);
}

// Two triangles as original (float), quantized (int16, KHR_mesh_quantization) and meshopt
// (the quantized data through EXT_meshopt_compression).
function fixtureModels() {
  const corners = [[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]];
  const q = 16383;
  const floats = Buffer.from(new Float32Array(corners.flat()).buffer);
  const shorts = Buffer.alloc(corners.length * 8);
  corners.forEach((c, i) => c.forEach((x, k) => shorts.writeInt16LE(x * q, i * 8 + k * 2)));
  const scene = (extra) => ({
    asset: { version: '2.0', generator: 'kiln decode-e2e self-test' },
    scene: 0,
    scenes: [{ nodes: [0] }],
    meshes: [{ primitives: [{ attributes: { POSITION: 0 } }] }],
    ...extra,
  });
  const original = glb(scene({
    nodes: [{ mesh: 0 }],
    buffers: [{ byteLength: floats.length }],
    bufferViews: [{ buffer: 0, byteLength: floats.length, byteStride: 12, target: 34962 }],
    accessors: [{ bufferView: 0, componentType: 5126, count: 6, type: 'VEC3', min: [0, 0, 0], max: [1, 1, 0] }],
  }), floats);
  const quantizedJson = {
    extensionsUsed: ['KHR_mesh_quantization'],
    extensionsRequired: ['KHR_mesh_quantization'],
    nodes: [{ mesh: 0, scale: [1 / q, 1 / q, 1 / q] }],
    accessors: [{ bufferView: 0, componentType: 5122, count: 6, type: 'VEC3', min: [0, 0, 0], max: [q, q, 0] }],
  };
  const quantized = glb(scene({
    ...quantizedJson,
    buffers: [{ byteLength: shorts.length }],
    bufferViews: [{ buffer: 0, byteLength: shorts.length, byteStride: 8, target: 34962 }],
  }), shorts);
  const packed = encodeVertexBufferV0(shorts, 6, 8);
  const meshopt = glb(scene({
    ...quantizedJson,
    extensionsUsed: ['KHR_mesh_quantization', 'EXT_meshopt_compression'],
    extensionsRequired: ['KHR_mesh_quantization', 'EXT_meshopt_compression'],
    buffers: [{ byteLength: packed.length }, { byteLength: shorts.length, extensions: { EXT_meshopt_compression: { fallback: true } } }],
    bufferViews: [{
      buffer: 1, byteLength: shorts.length, byteStride: 8, target: 34962,
      extensions: { EXT_meshopt_compression: { buffer: 0, byteLength: packed.length, byteStride: 8, mode: 'ATTRIBUTES', count: 6 } },
    }],
  }), packed);
  return { meshopt, quantized, original };
}

async function selfTest() {
  const assert = (await import('node:assert/strict')).default;
  const { test } = await import('node:test');
  const { runSelf, startServer } = await import('./support.mjs');

  const cli = (args) => runSelf(fileURLToPath(import.meta.url), args).then((r) => ({ ...r, out: r.json }));

  test('decode-e2e.mjs: real GLTFLoader + meshopt decoder, then the quantized fallback, against a stand-in Kiln', async () => {
    const srv = await startServer();
    try {
      srv.set('/v1/keys', JSON.stringify({ keys: srv.trusted }));
      const files = fixtureModels();
      const variants = ['meshopt', 'quantized', 'original'].map((v) => ({
        variant: v,
        path: `assets/tri.${v}.glb`,
        url: srv.set(`/cdn/decode-e2e/tri.${v}.glb`, files[v]),
        size: files[v].length,
        brotli_size: files[v].length,
        needs_decoder: v === 'meshopt',
      }));
      const model = { path: 'assets/tri.glb', preferred: 'meshopt', fallback: 'quantized', variants };
      const base = (game) => ({
        schema: 1, game, version: '1.0.0', build_id: 'b1', sequence: 3,
        expires: new Date(Date.now() + 86400e3).toISOString(), files: [], models: [model],
      });
      // The rule table, in miniature: a descriptor is desktop; android-low gets quantized.
      srv.route('/v1/games/decode-e2e/manifest', (url) => {
        const q = url.searchParams;
        const cls = q.get('device') ?? (q.has('os') ? 'desktop' : null);
        if (!cls) return srv.signed(base('decode-e2e'));
        const choice = cls === 'android-low'
          ? { variant: 'quantized', reason: 'slow_class', detail: 'meshopt decodes slowly on android-low', estimates: [] }
          : { variant: 'meshopt', reason: 'default', detail: 'smallest after brotli', estimates: [] };
        const { body, headers } = srv.signed({ ...base('decode-e2e'), device_class: cls, models: [{ ...model, choice }] });
        return { body, headers: { ...headers, 'kiln-device-class': cls } };
      });
      const manifest = `${srv.origin}/v1/games/decode-e2e/manifest`;

      const one = await cli(['--manifest', manifest, '--model', 'assets/tri.glb']);
      assert.equal(one.status, 0, `${one.stderr}\n${one.lines.join('\n')}`);
      assert.equal(one.lines.length, 1, 'one JSON line');
      const r = one.out;
      assert.equal(r.ok, true);
      assert.equal(r.device_class, 'desktop');
      assert.equal(r.chosen.variant, 'meshopt');
      assert.equal(r.chosen.decoder, 'wasm-simd');
      assert.equal(r.chosen.meshes, 1);
      assert.equal(r.chosen.vertices, 6);
      assert.match(r.chosen.manifest_request, /\?os=linux&/);
      assert.equal(r.fallback.variant, 'quantized');
      assert.equal(r.fallback.reason, 'decoder_init_failed');
      assert.equal(r.fallback.forced, false);
      assert.match(r.fallback.manifest_request, /\?device=desktop$/, 'the cached class, asked for');
      assert.deepEqual(r.events.map((e) => [e.type, e.variant, e.decoder, e.fallback, e.reason]), [
        ['decode', 'meshopt', 'wasm-simd', false, null],
        ['decode', 'quantized', 'none', true, 'decoder_init_failed'],
      ]);
      const received = (await srv.beaconEvents('decode-e2e', 2)).filter((e) => e.type === 'decode');
      assert.deepEqual(received, r.events, 'the stand-in Kiln received the decode events');

      const low = await cli(['--manifest', manifest, '--model', 'assets/tri.glb', '--device-class', 'android-low']);
      assert.equal(low.status, 0, `${low.stderr}\n${low.lines.join('\n')}`);
      assert.equal(low.out.device_class, 'android-low');
      assert.equal(low.out.chosen.variant, 'quantized');
      assert.equal(low.out.chosen.decoder, 'none');
      assert.equal(low.out.chosen.choice.reason, 'slow_class');
      assert.equal(low.out.fallback.forced, true, 'meshopt forced to see the fallback');
      assert.equal(low.out.fallback.variant, 'quantized');
      assert.equal(low.out.events[1].device.class, 'android-low');

      // A meshopt variant the real decoder can't read: the run fails, and says why.
      const broken = Buffer.from(files.meshopt);
      broken[broken.indexOf(0xa0, broken.length - 200)] = 0xb0; // the vertex codec's header byte
      const bad = variants.map((v) => (v.variant === 'meshopt' ? { ...v, url: srv.set('/cdn/decode-bad/tri.meshopt.glb', broken) } : v));
      srv.route('/v1/games/decode-bad/manifest', () => {
        const m = { ...model, variants: bad, choice: { variant: 'meshopt', reason: 'default', detail: '', estimates: [] } };
        const { body, headers } = srv.signed({ ...base('decode-bad'), device_class: 'desktop', models: [m] });
        return { body, headers: { ...headers, 'kiln-device-class': 'desktop' } };
      });
      const corrupt = await cli(['--manifest', `${srv.origin}/v1/games/decode-bad/manifest`, '--model', 'assets/tri.glb']);
      assert.equal(corrupt.status, 1, corrupt.stderr);
      assert.match(corrupt.out.error, /the chosen variant fell back: decode_failed \(to quantized\); GLTFLoader: meshopt: /);

      // Class manifests never signed (the base one, `Kiln-Variant-Choice: pending`): waited for
      // until --timeout-ms, then the run fails, and says why.
      srv.route('/v1/games/decode-old/manifest', (url) => {
        const { body, headers } = srv.signed(base('decode-old'));
        return { body, headers: { ...headers, 'kiln-variant-choice': 'pending', 'kiln-device-class': url.searchParams.get('device') ?? 'desktop' } };
      });
      const t0 = Date.now();
      const old = await cli(['--manifest', `${srv.origin}/v1/games/decode-old/manifest`, '--model', 'assets/tri.glb', '--timeout-ms', '1500']);
      assert.ok(Date.now() - t0 >= 1500, 'waited for the class manifests');
      assert.equal(old.status, 1);
      assert.equal(old.out.ok, false);
      assert.match(old.out.error, /has no valid device_class: not a per-device manifest \(Kiln-Variant-Choice: pending/);
      assert.match(old.stderr, /^decode-e2e: .*no valid device_class/);

      const usage = await cli(['--manifest', manifest]);
      assert.equal(usage.status, 2);
    } finally {
      await srv.close();
    }
  });
}

if (process.argv[1] && fileURLToPath(import.meta.url) === fs.realpathSync(process.argv[1])) {
  if (process.argv.length <= 2 && process.env.NODE_TEST_CONTEXT) await selfTest();
  else await main(process.argv.slice(2));
}
