#!/usr/bin/env node
// Render a model and its Kiln VAT bake (docs/vat.md) side by side in headless Chromium
// and compare the pixels: the original through GLTFLoader + AnimationMixer (three's
// skinning / morphing), the bake through examples/crowd/kiln-vat.js (mesh.glb, the
// textures and vat.glsl, VAT_INTERPOLATE), same camera, same clip time.
//
//   node vat-render.mjs SOURCE.(glb|gltf) VATDIR [options]
//
// Prints ONE JSON line. Exit 0 when it ran (the caller judges the numbers), 2 with
// {"error": ...} for usage and load errors (a shader that does not compile included),
// 1 for an internal error. See README.md.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { launchChromium, CHROMIUM_ARGS } from './browser.mjs';
import { startStaticServer } from './static-server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const runtimeDir = path.resolve(here, '../../../examples/crowd');

const USAGE = `usage: node vat-render.mjs SOURCE.(glb|gltf) VATDIR [options]
  VATDIR                  a baked mesh folder (with vat.json) or a folder of them (all are drawn)
  --times T1,T2,...       clip times in seconds (default: frames 0, F/4, F/2, F/2 + 0.5, 3F/4)
  --clip NAME|INDEX       clip of vat.json (default 0); the source animation of the same name
  --break none|bounds|uv  corrupt the decode on purpose: bounds widened by 10 %, texel one column off
  --decoder chunk|spec    the baked vat.glsl (default) or one written from docs/vat.md + vat.json
  --material normal|source  view-space normals, unlit (default) or the models' own materials, lit
  --flat                  flat-shade both sides (normal material): compares positions only
  --size PX               image width and height (default 512)
  --threshold N           a pixel differs when a channel differs by more than N of 255 (default 16)
  --out DIR               write source/vat/diff PNGs per time there
  --timeout S             give up after S seconds (default 180)`;

class UsageError extends Error {}

function parseArgs(argv) {
  const o = { times: null, clip: '0', break: 'none', decoder: 'chunk', material: 'normal', flat: false, size: 512, threshold: 16, out: null, timeout: 180, files: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new UsageError(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '-h' || a === '--help') { process.stderr.write(`${USAGE}\n`); process.exit(0); }
    else if (a === '--times') o.times = value().split(',').filter(Boolean).map(Number);
    else if (a === '--clip') o.clip = value();
    else if (a === '--break') o.break = value();
    else if (a === '--decoder') o.decoder = value();
    else if (a === '--material') o.material = value();
    else if (a === '--flat') o.flat = true;
    else if (a === '--size') o.size = Number(value());
    else if (a === '--threshold') o.threshold = Number(value());
    else if (a === '--out') o.out = value();
    else if (a === '--timeout') o.timeout = Number(value());
    else if (a.startsWith('--')) throw new UsageError(`unknown option ${a}`);
    else o.files.push(a);
  }
  if (o.files.length !== 2) throw new UsageError('need SOURCE and VATDIR');
  if (o.times && (!o.times.length || o.times.some((t) => !Number.isFinite(t) || t < 0))) throw new UsageError('--times: non-negative numbers, comma-separated');
  if (!['none', 'bounds', 'uv'].includes(o.break)) throw new UsageError(`--break ${o.break}: none, bounds or uv`);
  if (!['chunk', 'spec'].includes(o.decoder)) throw new UsageError(`--decoder ${o.decoder}: chunk or spec`);
  if (!['normal', 'source'].includes(o.material)) throw new UsageError(`--material ${o.material}: normal or source`);
  if (!Number.isInteger(o.size) || o.size < 16 || o.size > 4096) throw new UsageError('--size: 16…4096');
  if (!(o.threshold >= 0)) throw new UsageError('--threshold: a number ≥ 0');
  if (!(o.timeout > 0)) throw new UsageError('--timeout: seconds > 0');
  return o;
}

// VATDIR's baked mesh folders, relative to VATDIR ('' for VATDIR itself).
function findVatFolders(vatDir) {
  if (fs.existsSync(path.join(vatDir, 'vat.json'))) return [''];
  const found = [];
  for (const e of fs.readdirSync(vatDir, { withFileTypes: true })) {
    if (e.isDirectory() && fs.existsSync(path.join(vatDir, e.name, 'vat.json'))) found.push(`${e.name}/`);
  }
  return found.sort();
}

function defaultTimes(vatJson, clipArg) {
  const clip = vatJson.clips.find((c) => c.name === clipArg) ?? vatJson.clips[Number(clipArg)];
  if (!clip) throw new Error(`no clip ${clipArg} in vat.json (clips: ${vatJson.clips.map((c) => c.name).join(', ')})`);
  const last = Math.max(clip.frames - 1, 0);
  // On frames (exact samples) and one half-way between two (interpolation).
  const frames = [0, Math.floor(last / 4), Math.floor(last / 2), Math.floor(last / 2) + 0.5, Math.floor((3 * last) / 4)];
  return [...new Set(frames.filter((f) => f <= last))].map((f) => f / vatJson.frame_rate);
}

function finish(code, object) {
  process.stdout.write(`${JSON.stringify(object)}\n`);
  process.exitCode = code;
}

async function main() {
  let o;
  try {
    o = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`vat-render.mjs: ${e.message}\n${USAGE}\n`);
    return finish(2, { error: `usage: ${e.message}` });
  }
  const [sourceFile, vatDirArg] = o.files.map((f) => path.resolve(f));
  if (!fs.existsSync(sourceFile)) return finish(2, { error: `no such file: ${sourceFile}` });
  if (!fs.existsSync(vatDirArg) || !fs.statSync(vatDirArg).isDirectory()) return finish(2, { error: `no such folder: ${vatDirArg}` });
  const folders = findVatFolders(vatDirArg);
  if (!folders.length) return finish(2, { error: `${vatDirArg}: no vat.json in it or in its subfolders` });
  let times = o.times;
  try {
    const first = JSON.parse(fs.readFileSync(path.join(vatDirArg, folders[0], 'vat.json'), 'utf8'));
    times ??= defaultTimes(first, o.clip);
  } catch (e) {
    return finish(2, { error: `vat.json: ${e.message}` });
  }

  const server = await startStaticServer({
    '/tool/': here,
    '/runtime/': runtimeDir,
    '/source/': path.dirname(sourceFile),
    '/vat/': vatDirArg,
  });
  const browser = await launchChromium();
  const timer = setTimeout(() => {
    finish(2, { error: `timed out after ${o.timeout} s` });
    process.exit(2);
  }, o.timeout * 1000);
  const consoleLines = [];
  try {
    const page = await browser.newPage();
    page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') consoleLines.push(`${m.type()}: ${m.text()}`.slice(0, 2000)); });
    page.on('pageerror', (e) => consoleLines.push(`pageerror: ${e.message}`));
    await page.goto(`${server.url}tool/vat-render.html`);
    await page.waitForFunction(() => window.vatRenderReady === true, null, { timeout: 30000 });
    const config = {
      sourceUrl: `/source/${encodeURIComponent(path.basename(sourceFile))}`,
      vatUrls: folders.map((f) => `/vat/${f}`),
      clip: o.clip, times, size: o.size, threshold: o.threshold,
      material: o.material, flat: o.flat, decoder: o.decoder, breakMode: o.break, images: !!o.out,
    };
    let r;
    try {
      r = await page.evaluate((c) => window.vatRender.run(c), config);
    } catch (e) {
      return finish(2, { error: e.message.replace(/^page\.evaluate: (Error: )?/, ''), console: consoleLines.slice(0, 20) });
    }
    if (r.error) return finish(2, { error: r.error, console: consoleLines.slice(0, 20) });

    const outputs = [];
    if (o.out) {
      fs.mkdirSync(o.out, { recursive: true });
      for (const img of r.images) {
        for (const kind of ['source', 'vat', 'diff']) {
          const file = path.join(o.out, `${r.clip.name.replace(/[^A-Za-z0-9_.-]/g, '_')}-t${img.time.toFixed(4)}-${kind}.png`);
          fs.writeFileSync(file, Buffer.from(img[kind].split(',')[1], 'base64'));
          outputs.push(file);
        }
      }
    }
    const rows = r.results;
    const onFrame = rows.filter((x) => x.on_frame);
    const max = (xs, k) => xs.reduce((m, x) => Math.max(m, x[k]), 0);
    finish(0, {
      tool: 'kiln-vat-render',
      source: sourceFile,
      vat_dir: vatDirArg,
      options: { clip: o.clip, break: o.break, decoder: o.decoder, material: o.material, flat: o.flat, size: o.size, threshold: o.threshold },
      renderer: r.renderer,
      chromium: { version: browser.version(), args: CHROMIUM_ARGS },
      clip: r.clip,
      vat: r.vat,
      source_meshes_shown: r.source_meshes_shown,
      break: r.break,
      notes: r.notes,
      times: rows,
      overall: {
        max_diff: max(rows, 'max_diff'),
        max_frac_over: max(rows, 'frac_over'),
        mean_frac_over: rows.reduce((s, x) => s + x.frac_over, 0) / rows.length,
        max_coverage_mismatch_frac: max(rows, 'coverage_mismatch_frac'),
        on_frame_max_frac_over: max(onFrame, 'frac_over'),
        on_frame_max_coverage_mismatch_frac: max(onFrame, 'coverage_mismatch_frac'),
      },
      console: consoleLines.slice(0, 20),
      images: outputs,
    });
  } finally {
    clearTimeout(timer);
    await browser.close();
    await server.close();
  }
}

main().catch((e) => {
  process.stderr.write(`${e.stack ?? e}\n`);
  finish(1, { error: `internal: ${e.message ?? e}` });
});
