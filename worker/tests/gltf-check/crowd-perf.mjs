#!/usr/bin/env node
// Time the VAT crowd page (examples/crowd) in headless Chromium: for each n, the JS
// time per frame (the rAF callback, renderer.render()'s CPU side included) and the
// frame rate, as the page reports them in window.kilnCrowdStats. The point of VAT is
// that the JS time does not grow with n; `--skinned` adds three.js' usual path
// (SkinnedMesh + AnimationMixer per fox) for comparison.
//
//   node crowd-perf.mjs [--n 50,1000,10000] [--skinned 50] [--seconds 4] [--set auto]
//                       [--screenshot FILE] [--url URL]
//
// Starts examples/crowd/serve.mjs (unless --url names a running one); the page needs
// examples/crowd/baked/ (bash bake.sh) and examples/crowd/node_modules (npm install).
// Prints ONE JSON line; exit 0 when it ran, 2 with {"error": ...} otherwise.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { CHROMIUM_ARGS, launchChromium, webglInfo } from './browser.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const crowdDir = path.resolve(here, '../../../examples/crowd');
const VIEWPORT = { width: 1280, height: 720 };

const USAGE = `usage: node crowd-perf.mjs [options]
  --n LIST          instance counts for the VAT page (default 50,1000,10000)
  --skinned LIST    instance counts for the three.js skinning path (default 50; "" for none)
  --seconds S       measuring time per page, after 1 s of warm-up (default 4)
  --min-frames N    measure longer (up to 5 x S) until N frames were drawn (default 10)
  --set NAME        which bake of baked/index.json (default: the page's, auto)
  --screenshot FILE PNG of the n=2000 VAT page (${VIEWPORT.width}x${VIEWPORT.height})
  --url URL         use a crowd server already running at URL`;

function parseArgs(argv) {
  const list = (s) => s.split(',').filter(Boolean).map(Number);
  const o = { n: [50, 1000, 10000], skinned: [50], seconds: 4, minFrames: 10, set: null, screenshot: null, url: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '-h' || a === '--help') { process.stderr.write(`${USAGE}\n`); process.exit(0); }
    else if (a === '--n') o.n = list(value());
    else if (a === '--skinned') o.skinned = list(value());
    else if (a === '--seconds') o.seconds = Number(value());
    else if (a === '--min-frames') o.minFrames = Number(value());
    else if (a === '--set') o.set = value();
    else if (a === '--screenshot') o.screenshot = value();
    else if (a === '--url') o.url = value();
    else throw new Error(`unknown argument ${a}`);
  }
  for (const n of [...o.n, ...o.skinned]) if (!Number.isInteger(n) || n < 1 || n > 10000) throw new Error(`n must be 1…10000, not ${n}`);
  if (!(o.seconds > 0)) throw new Error('--seconds: > 0');
  return o;
}

// node serve.mjs 0: the first line it prints is the URL.
function startCrowdServer() {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(crowdDir, 'serve.mjs'), '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let buffered = '';
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`serve.mjs exited with ${code}`)));
    child.stdout.on('data', (chunk) => {
      buffered += chunk;
      const line = buffered.split('\n')[0];
      if (buffered.includes('\n')) resolve({ url: line.trim(), stop: () => child.kill() });
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function openCrowd(page, url, timeoutMs = 120000) {
  await page.goto(url, { waitUntil: 'domcontentloaded', timeout: timeoutMs });
  await page.waitForFunction(() => window.kilnCrowdStats && (window.kilnCrowdStats.ready || window.kilnCrowdStats.error),
    null, { timeout: timeoutMs, polling: 200 });
  const stats = await page.evaluate(() => ({ ...window.kilnCrowdStats }));
  if (stats.error) throw new Error(`${url}: ${stats.error}`);
  return stats;
}

async function measure(page, url, o) {
  await openCrowd(page, url);
  await sleep(1000); // warm-up: first uploads, JIT
  const read = () => page.evaluate(() => ({ ...window.kilnCrowdStats }));
  const start = await read();
  const t0 = Date.now();
  let end = start;
  while (Date.now() - t0 < o.seconds * 1000 || (end.frames - start.frames < o.minFrames && Date.now() - t0 < o.seconds * 5000)) {
    await sleep(250);
    end = await read();
  }
  const frames = end.frames - start.frames;
  return {
    mode: end.mode,
    n: end.n,
    frames,
    jsMsPerFrame: frames ? (end.jsMsTotal - start.jsMsTotal) / frames : null,
    fps: frames ? (1000 * frames) / (end.lastFrameTime - start.lastFrameTime || 1) : 0,
    drawCalls: end.drawCalls,
    triangles: end.triangles,
    vertices: end.vertices ?? null,
    encoding: end.encoding,
    textureBytes: end.textureBytes,
  };
}

async function main() {
  let o;
  try {
    o = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`crowd-perf.mjs: ${e.message}\n${USAGE}\n`);
    process.stdout.write(`${JSON.stringify({ error: `usage: ${e.message}` })}\n`);
    process.exitCode = 2;
    return;
  }
  if (!o.url && !fs.existsSync(path.join(crowdDir, 'node_modules/three'))) throw new Error(`${crowdDir}: run npm install there first`);
  const server = o.url ? { url: o.url, stop: () => {} } : await startCrowdServer();
  const browser = await launchChromium();
  try {
    // A fresh page per run: a page busy drawing 10 000 foxes in software is slow to
    // navigate away from, closing it is not.
    const pageErrors = [];
    let page = null;
    const freshPage = async () => {
      if (page) await page.close({ runBeforeUnload: false });
      page = await browser.newPage({ viewport: VIEWPORT, deviceScaleFactor: 1 });
      page.on('pageerror', (e) => pageErrors.push(e.message));
      return page;
    };
    const query = (extra) => {
      const q = new URLSearchParams(extra);
      if (o.set) q.set('set', o.set);
      return `${server.url}?${q}`;
    };
    const results = [];
    for (const n of o.n) results.push(await measure(await freshPage(), query({ n }), o));
    for (const n of o.skinned) results.push(await measure(await freshPage(), query({ n, mode: 'skinned' }), o));
    let screenshot = null;
    if (o.screenshot) {
      await openCrowd(await freshPage(), query({ n: 2000 }));
      // A few measured frames, so the panel shows settled numbers.
      await page.waitForFunction(() => window.kilnCrowdStats.frames >= 4, null, { timeout: 120000, polling: 250 });
      await sleep(300);
      fs.mkdirSync(path.dirname(path.resolve(o.screenshot)), { recursive: true });
      await page.screenshot({ path: o.screenshot });
      screenshot = path.resolve(o.screenshot);
    }
    const round = (x, d) => (x === null ? null : Number(x.toFixed(d)));
    process.stdout.write(`${JSON.stringify({
      tool: 'kiln-crowd-perf',
      chromium: { version: browser.version(), args: CHROMIUM_ARGS },
      webgl: await webglInfo(await freshPage()),
      viewport: VIEWPORT,
      seconds: o.seconds,
      results: results.map((r) => ({ ...r, jsMsPerFrame: round(r.jsMsPerFrame, 3), fps: round(r.fps, 2) })),
      screenshot,
      page_errors: pageErrors.slice(0, 10),
    })}\n`);
    // A benchmark asserts no speed, but that it measured something: every run drew frames,
    // and no page threw.
    const empty = results.filter((r) => !(r.frames > 0));
    if (pageErrors.length || empty.length || results.length === 0) {
      process.stderr.write(`crowd-perf.mjs: ${results.length} runs, ${empty.length} without frames (${empty.map((r) => `${r.mode} n=${r.n}`).join(', ')}), ${pageErrors.length} page errors: ${pageErrors.slice(0, 3).join(' | ')}\n`);
      process.exitCode = 1;
    }
  } finally {
    await browser.close();
    server.stop();
  }
}

main().catch((e) => {
  process.stderr.write(`${e.stack ?? e}\n`);
  process.stdout.write(`${JSON.stringify({ error: String(e.message ?? e) })}\n`);
  process.exitCode = 2;
});
