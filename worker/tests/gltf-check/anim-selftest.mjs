#!/usr/bin/env node
// Self-test of anim.mjs (see README.md, "anim.mjs").
//
//   node anim-selftest.mjs [--assets DIR] [--keep]
//
// Asserts that: comparing a model with itself gives exactly 0 error; a moved
// animation key is found, in its clip only; gltfpack's 30 Hz resampling of Fox
// gives an error of order 1e-2 of the diagonal; OUT.bin has the announced size;
// t == duration gives the last key's pose (no loop wrap) and t past the end
// clamps to it; a clip sampled after another equals the clip sampled alone.
// The last line is "N passed, N failed"; exit 1 when anything failed.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const keep = args.includes('--keep');
const ai = args.indexOf('--assets');

function findAssets() {
  if (ai >= 0 && args[ai + 1]) return path.resolve(args[ai + 1]);
  if (process.env.KILN_ASSETS) return path.resolve(process.env.KILN_ASSETS);
  for (const c of [path.resolve(HERE, '../../../../shared/assets'), path.resolve(HERE, '../../../shared/assets'), '/work/shared/assets']) {
    if (fs.existsSync(c)) return c;
  }
  return null;
}

const ASSETS = findAssets();
if (!ASSETS) {
  console.error('anim-selftest: shared/assets not found (pass --assets DIR or set KILN_ASSETS)');
  process.exit(2);
}
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-anim-check-'));
const ANIM = path.join(HERE, 'anim.mjs');
const GLTFPACK = path.join(HERE, 'node_modules', 'gltfpack', 'cli.js');
const asset = (p) => path.join(ASSETS, p);
const tmp = (p) => path.join(TMP, p);

let passed = 0, failed = 0;
function expect(name, cond, detail) {
  if (cond) { passed++; console.log(`ok    ${name}`); }
  else { failed++; console.log(`FAIL  ${name}${detail ? `: ${detail}` : ''}`); }
}

function anim(...a) {
  const r = spawnSync(process.execPath, [ANIM, ...a], { encoding: 'utf8', maxBuffer: 64 << 20 });
  let json = null;
  try { json = JSON.parse(r.stdout); } catch { /* reported by the caller */ }
  return { status: r.status, json, stderr: r.stderr };
}

function f32(file) {
  const b = fs.readFileSync(file);
  return new Float32Array(b.buffer, b.byteOffset, b.length / 4);
}

const same = (a, b) => a.length === b.length && a.every((x, i) => Object.is(x, b[i]));

// A copy of a GLB whose first translation key in the middle of animation 0's
// first translation channel moves by `delta` along x.
function moveKey(input, output, delta) {
  const bytes = fs.readFileSync(input);
  const jl = bytes.readUInt32LE(12);
  const json = JSON.parse(bytes.subarray(20, 20 + jl).toString('utf8'));
  const bin = Buffer.from(bytes.subarray(20 + jl + 8));
  const a = json.animations[0];
  const ch = a.channels.find((c) => c.target.path === 'translation');
  const acc = json.accessors[a.samplers[ch.sampler].output];
  if (acc.componentType !== 5126 || acc.sparse) throw new Error('moveKey: float translations expected');
  const bv = json.bufferViews[acc.bufferView];
  const k = acc.count >> 1;
  const o = (bv.byteOffset || 0) + (acc.byteOffset || 0) + k * (bv.byteStride || 12);
  bin.writeFloatLE(bin.readFloatLE(o) + delta, o);
  if (acc.max) acc.max[0] = Math.max(acc.max[0], bin.readFloatLE(o));
  if (acc.min) acc.min[0] = Math.min(acc.min[0], bin.readFloatLE(o));
  const j = Buffer.from(JSON.stringify(json));
  const jp = Buffer.concat([j, Buffer.alloc((4 - (j.length % 4)) % 4, 0x20)]);
  const head = Buffer.alloc(12);
  head.writeUInt32LE(0x46546c67, 0); head.writeUInt32LE(2, 4); head.writeUInt32LE(12 + 8 + jp.length + 8 + bin.length, 8);
  const c = (len, type) => { const h = Buffer.alloc(8); h.writeUInt32LE(len, 0); h.writeUInt32LE(type, 4); return h; };
  fs.writeFileSync(output, Buffer.concat([head, c(jp.length, 0x4e4f534a), jp, c(bin.length, 0x004e4942), bin]));
}

try {
  // 1. a model against itself: exactly 0 (GLB, .gltf + external .bin, data URIs, morphs, CUBICSPLINE/STEP)
  for (const m of ['Fox/Fox.glb', 'CesiumMan/CesiumMan.glb', 'SimpleSkin/SimpleSkin.gltf', 'InterpolationTest/InterpolationTest.gltf', 'AnimatedMorphCube/AnimatedMorphCube.glb', 'BoxAnimated/BoxAnimated.glb']) {
    for (const points of ['vertices', 'nodes']) {
      const r = anim('compare', asset(m), asset(m), '--points', points);
      expect(`compare ${m} with itself (${points}) = 0`, r.status === 0 && r.json && r.json.ok && r.json.max_rel === 0 && r.json.clips.every((c) => c.max === 0 && c.within_share === 1), r.stderr || JSON.stringify(r.json));
    }
  }

  // 2. a moved key shows, in its clip only
  moveKey(asset('Fox/Fox.glb'), tmp('fox-moved.glb'), 1.0);
  for (const points of ['vertices', 'nodes']) {
    const r = anim('compare', asset('Fox/Fox.glb'), tmp('fox-moved.glb'), '--points', points);
    const c = r.json && r.json.clips;
    expect(`moved key found (${points})`, r.status === 0 && c && !r.json.ok && c[0].max_rel > 1e-3 && c[0].within_share < 1 && c[1].max === 0 && c[2].max === 0, r.stderr || JSON.stringify(r.json));
  }

  // 3. gltfpack (30 Hz resampling, reordered vertices, one node prepended)
  const pack = spawnSync(process.execPath, [GLTFPACK, '-i', asset('Fox/Fox.glb'), '-o', tmp('fox-pack.glb'), '-cc'], { encoding: 'utf8' });
  expect('gltfpack -cc Fox', pack.status === 0, pack.stderr);
  {
    const r = anim('compare', asset('Fox/Fox.glb'), tmp('fox-pack.glb'), '--points', 'nodes', '--match', 'name');
    expect('gltfpack Fox: nodes by name, max error 2e-3..5e-2 of the diagonal', r.status === 0 && r.json && r.json.max_rel > 2e-3 && r.json.max_rel < 5e-2 && r.json.nodes_compared === 26, r.stderr || JSON.stringify(r.json));
    expect('gltfpack Fox: clip durations rounded up to 1/30 s are reported', r.json && r.json.clips.some((c) => c.duration_changed), JSON.stringify(r.json));
    const v = anim('compare', asset('Fox/Fox.glb'), tmp('fox-pack.glb'));
    expect('gltfpack Fox: vertices mode refuses different vertex counts (exit 2)', v.status === 2 && v.json && typeof v.json.error === 'string', JSON.stringify(v));
  }

  // 4. sample: sizes, clip end, clamping, clip independence
  {
    const m = asset('InterpolationTest/InterpolationTest.gltf');
    const info = anim('sample', m, tmp('none.json'), tmp('none.bin'));
    expect('sample: missing TIMES.json gives exit 2 + error', info.status === 2 && info.json && info.json.error, JSON.stringify(info));
    // clip 8 "Linear Translation" does not end where it starts
    fs.writeFileSync(tmp('t.json'), JSON.stringify({ clips: [{ index: 0, times: [0.5, 1] }, { index: 8, times: [0, 0.8, 1.6666666269302368, 1e9, 0.8] }] }));
    const r = anim('sample', m, tmp('t.json'), tmp('t.bin'));
    const n = r.json ? r.json.vertices * 3 : 0;
    const v = f32(tmp('t.bin'));
    expect('sample: OUT.bin size = samples x vertices x 12 bytes', r.status === 0 && n > 0 && v.length === 7 * n && r.json.order.reduce((s, o) => s + o.count, 0) * 3 === n, JSON.stringify(r.json));
    const at = (s) => v.subarray(s * n, (s + 1) * n);
    expect('sample: t == duration is not wrapped to t = 0', !same(at(4), at(2)), '');
    expect('sample: t past the end clamps to t == duration', same(at(4), at(5)), '');
    expect('sample: repeated time gives the same pose after the clip end', same(at(3), at(6)), '');
    fs.writeFileSync(tmp('t8.json'), JSON.stringify({ clips: [{ index: 8, times: [0, 0.8, 1.6666666269302368, 1e9, 0.8] }] }));
    anim('sample', m, tmp('t8.json'), tmp('t8.bin'));
    expect('sample: a clip after another equals the clip alone', same(v.subarray(2 * n), f32(tmp('t8.bin'))), '');
    const nd = anim('sample', m, tmp('t.json'), tmp('n.bin'), '--nodes');
    expect('sample --nodes: OUT.bin size = samples x nodes x 64 bytes', nd.status === 0 && nd.json && f32(tmp('n.bin')).length === 7 * 16 * nd.json.nodes.length, JSON.stringify(nd.json));
  }
} finally {
  if (!keep) fs.rmSync(TMP, { recursive: true, force: true });
  else console.log(`kept ${TMP}`);
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
