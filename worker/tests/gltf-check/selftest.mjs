#!/usr/bin/env node
// Self-test of check.mjs against gltfpack, the reference encoder.
//
//   node selftest.mjs [--assets DIR] [--keep]
//
// For a few real models it writes gltfpack's quantized (no -c), meshopt
// (-cc, EXT_meshopt_compression) and meshopt-KHR (-cc -ce khr) outputs, runs
// check.mjs on them against the source, prints a table, and asserts what is
// expected: clean outputs pass every check; mannequiny (COLOR_1 without
// COLOR_0, written by gltfpack 1.3) fails the validator; the gltfpack-written
// references in reference-meshopt/ decode and compare cleanly; deliberately
// damaged files fail exactly the checks that should catch them.
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
  // worker/tests/gltf-check -> repository root -> ../shared/assets
  for (const c of [path.resolve(HERE, '../../../../shared/assets'), path.resolve(HERE, '../../../shared/assets'), '/work/shared/assets']) {
    if (fs.existsSync(c)) return c;
  }
  return null;
}

const ASSETS = findAssets();
if (!ASSETS) {
  console.error('selftest: shared/assets not found (pass --assets DIR or set KILN_ASSETS)');
  process.exit(2);
}
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-gltf-check-'));
const GLTFPACK = path.join(HERE, 'node_modules', 'gltfpack', 'cli.js');
const CHECK = path.join(HERE, 'check.mjs');
const TAMPER = path.join(HERE, 'tamper.mjs');

let passed = 0, failed = 0;
const problems = [];
function expect(name, cond, detail) {
  if (cond) passed++;
  else { failed++; problems.push(`${name}: ${detail || 'failed'}`); }
}

function gltfpack(src, out, flags) {
  const r = spawnSync(process.execPath, [GLTFPACK, '-i', src, '-o', out, ...flags], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`gltfpack ${flags.join(' ')} ${src} failed: ${r.stderr || r.stdout}`);
  return out;
}

function check(ref, outs, extra = []) {
  const r = spawnSync(process.execPath, [CHECK, '--no-objects', ...(ref ? ['--reference', ref] : []), ...extra, ...outs], { encoding: 'utf8', maxBuffer: 256 << 20 });
  return { status: r.status, stderr: r.stderr, json: r.status === 0 || r.status === 3 ? JSON.parse(r.stdout) : null };
}

function tamper(kind, input, out) {
  const r = spawnSync(process.execPath, [TAMPER, kind, input, out], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`tamper ${kind} failed: ${r.stderr}`);
  return out;
}

// ---------------------------------------------------------------- table
const rows = [];
const fmt = (x) => (x === null || x === undefined ? '-' : x === 0 ? '0' : x.toExponential(1));
function addRow(model, variant, o, expectation) {
  const v = o.validator, d = o.decoded_validator, c = o.compare || {};
  rows.push([
    model,
    variant,
    String(o.size_bytes),
    v.numErrors === null ? 'n/a' : `${v.numErrors}/${v.numWarnings}`,
    d ? (d.error ? 'error' : `${d.numErrors}/${d.numWarnings}`) : '-',
    c.triangles ? `${c.triangles.reference_nondegenerate}->${c.triangles.output_nondegenerate}` : '-',
    c.vertices ? `${c.vertices.reference}->${c.vertices.output}` : '-',
    c.unmatched_triangles !== undefined ? String(c.unmatched_triangles) : '-',
    fmt(c.max_position_error_rel),
    c.max_normal_angle_deg === null || c.max_normal_angle_deg === undefined ? '-' : c.max_normal_angle_deg.toFixed(2),
    o.ok ? 'ok' : o.failed.join(','),
    expectation,
  ]);
}
function markLast(asExpected) {
  rows[rows.length - 1][11] = asExpected ? 'yes' : 'NO';
}
function printTable() {
  const head = ['model', 'variant', 'bytes', 'val E/W', 'dec E/W', 'tris ref->out', 'verts ref->out', 'unmatched', 'pos err rel', 'normal deg', 'failed checks', 'as expected'];
  const all = [head, ...rows];
  const w = head.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  const line = (r) => r.map((c, i) => c.padEnd(w[i])).join('  ').trimEnd();
  console.log(line(head));
  console.log(w.map((n) => '-'.repeat(n)).join('  '));
  for (const r of rows) console.log(line(r));
}

const sameSet = (a, b) => a.length === b.length && a.every((x) => b.includes(x));

// ---------------------------------------------------------------- 1. gltfpack outputs of real models
const MODELS = [
  ['BoxAnimated/BoxAnimated.glb', []],
  ['Fox/Fox.glb', []],
  ['AnimatedMorphCube/AnimatedMorphCube.glb', []],
  ['CesiumMilkTruck/CesiumMilkTruck.glb', []],
  // gltfpack 1.3 keeps COLOR_1 but drops COLOR_0: invalid file in every variant
  ['mannequiny/mannequiny.glb', ['validator_no_errors'], 'MESH_PRIMITIVE_INDEXED_SEMANTIC_CONTINUITY'],
];
const VARIANTS = [
  ['quantized', [], null],
  ['meshopt', ['-cc'], 'EXT_meshopt_compression'],
  ['meshopt-khr', ['-cc', '-ce', 'khr'], 'KHR_meshopt_compression'],
];

for (const [rel, knownFailures, knownCode] of MODELS) {
  const src = path.join(ASSETS, rel);
  const name = path.basename(rel, '.glb');
  if (!fs.existsSync(src)) { expect(`${name}: asset present`, false, `${src} missing`); continue; }
  const outs = VARIANTS.map(([v, flags]) => gltfpack(src, path.join(TMP, `${name}.${v}.glb`), flags));
  const r = check(src, outs);
  expect(`${name}: check.mjs exit 0`, r.status === 0, `exit ${r.status}: ${r.stderr}`);
  if (!r.json) continue;
  expect(`${name}: reference loads`, !r.json.reference.three.error, r.json.reference.three.error);
  r.json.outputs.forEach((o, i) => {
    const [variant, , ext] = VARIANTS[i];
    const want = [...knownFailures];
    if (knownFailures.includes('validator_no_errors') && ext) want.push('decoded_validator_no_errors');
    addRow(name, variant, o, want.length ? `fails ${want.join(',')}` : 'ok');
    const tag = `${name}/${variant}`;
    expect(`${tag}: failed checks`, sameSet(o.failed, want), `got [${o.failed}] want [${want}]`);
    markLast(sameSet(o.failed, want));
    if (knownCode) expect(`${tag}: validator reports ${knownCode}`, !!o.validator.codes[knownCode], JSON.stringify(o.validator.codes));
    const used = o.extensions_used || [];
    expect(`${tag}: KHR_mesh_quantization used`, used.includes('KHR_mesh_quantization'), `${used}`);
    if (ext) {
      expect(`${tag}: ${ext} used`, used.includes(ext), `${used}`);
      expect(`${tag}: decoded with meshoptimizer`, o.decoded_validator && o.decoded_validator.decoded_buffer_views > 0 && o.decoded_validator.decode_errors.length === 0, JSON.stringify(o.decoded_validator && o.decoded_validator.decode_errors));
    } else {
      expect(`${tag}: no meshopt extension`, !used.some((e) => e.includes('meshopt')) && o.decoded_validator === null, `${used}`);
    }
    const c = o.compare;
    if (c && !c.error) {
      expect(`${tag}: position error < 2e-4 of the diagonal`, c.max_position_error_rel < 2e-4, String(c.max_position_error_rel));
      expect(`${tag}: no unmatched triangles`, c.unmatched_triangles === 0, String(c.unmatched_triangles));
    }
  });
}

// ---------------------------------------------------------------- 2. meshopt-compressed references
const REFDIR = path.join(ASSETS, 'reference-meshopt');
const refFiles = fs.existsSync(REFDIR)
  ? fs.readdirSync(REFDIR).flatMap((d) => {
      const p = path.join(REFDIR, d);
      return fs.statSync(p).isDirectory() ? fs.readdirSync(p).filter((f) => /\.(glb|gltf)$/.test(f)).map((f) => path.join(p, f)) : [];
    })
  : [];
expect('reference-meshopt: files found', refFiles.length > 0, REFDIR);
for (const ref of refFiles) {
  const name = path.basename(ref, path.extname(ref));
  const outs = [ref, gltfpack(ref, path.join(TMP, `${name}.repack-cc.glb`), ['-cc']), gltfpack(ref, path.join(TMP, `${name}.repack-noq.glb`), ['-noq'])];
  const r = check(ref, outs);
  expect(`${name}: check.mjs exit 0`, r.status === 0, `exit ${r.status}: ${r.stderr}`);
  if (!r.json) continue;
  expect(`${name}: meshopt reference loads in three.js`, !r.json.reference.three.error, r.json.reference.three.error);
  const variants = ['as-is', 'repack -cc', 'repack -noq'];
  r.json.outputs.forEach((o, i) => {
    addRow(`ref-meshopt/${name}`, variants[i], o, 'ok');
    expect(`${name}/${variants[i]}: all checks pass`, o.ok, `[${o.failed}]`);
    markLast(o.ok);
  });
  const self = r.json.outputs[0];
  expect(`${name}: as-is identical to itself`, self.compare && self.compare.max_position_error === 0 && self.compare.unmatched_triangles === 0, JSON.stringify(self.compare && self.compare.max_position_error));
  expect(`${name}: decoded copy validates`, self.decoded_validator && self.decoded_validator.numErrors === 0 && self.decoded_validator.decoded_buffer_views > 0, JSON.stringify(self.decoded_validator && self.decoded_validator.codes));
}

// ---------------------------------------------------------------- 3. damaged files must be caught
{
  const src = path.join(ASSETS, 'BoxAnimated/BoxAnimated.glb');
  const q = path.join(TMP, 'BoxAnimated.quantized.glb');
  const cc = path.join(TMP, 'BoxAnimated.meshopt.glb');
  if (fs.existsSync(q) && fs.existsSync(cc)) {
    const cases = [
      ['bad-max', cc, ['decoded_validator_no_errors'], 'meshopt file: only the decoded copy shows ACCESSOR_MAX_MISMATCH'],
      ['bad-max', q, ['validator_no_errors'], 'ACCESSOR_MAX_MISMATCH'],
      ['corrupt-meshopt', cc, ['meshopt_decodes', 'decoded_validator_no_errors', 'three_loads', 'compared'], 'decoder rejects the stream'],
      ['swap-index', q, ['same_triangles'], 'one triangle differs'],
      ['move-vertex', q, ['same_triangles', 'position_error_within_tolerance'], 'one vertex moved by 10%'],
    ];
    const outs = cases.map(([kind, input], i) => tamper(kind, input, path.join(TMP, `tampered-${i}-${kind}-${path.basename(input)}`)));
    const r = check(src, outs);
    expect('tampered: check.mjs exit 0', r.status === 0, `exit ${r.status}: ${r.stderr}`);
    if (r.json) {
      r.json.outputs.forEach((o, i) => {
        const [kind, input, want, why] = cases[i];
        const variant = `${kind} (${path.basename(input).split('.')[1]})`;
        addRow('tampered', variant, o, `fails ${want.join(',')}`);
        expect(`tampered ${variant}: ${why}`, sameSet(o.failed, want), `got [${o.failed}] want [${want}]`);
        markLast(sameSet(o.failed, want));
      });
      const badmax = r.json.outputs[0];
      expect('tampered bad-max (meshopt): as-is validator is blind, decoded one is not',
        badmax.validator.numErrors === 0 && !!badmax.decoded_validator.codes.ACCESSOR_MAX_MISMATCH, JSON.stringify(badmax.decoded_validator.codes));
    }
  } else expect('tampered: inputs present', false, 'BoxAnimated outputs missing');
}

{
  const src = path.join(ASSETS, 'AnimatedMorphCube/AnimatedMorphCube.glb');
  const q = path.join(TMP, 'AnimatedMorphCube.quantized.glb');
  if (fs.existsSync(q)) {
    const out = tamper('move-morph', q, path.join(TMP, 'tampered-move-morph.glb'));
    const r = check(src, [out]);
    const want = ['morph_error_within_tolerance'];
    if (r.json) {
      const o = r.json.outputs[0];
      addRow('tampered', 'move-morph (quantized)', o, `fails ${want}`);
      expect('tampered move-morph: one morph delta moved', sameSet(o.failed, want), `got [${o.failed}] want [${want}]`);
      markLast(sameSet(o.failed, want));
    } else expect('tampered move-morph: check.mjs exit 0', false, `exit ${r.status}: ${r.stderr}`);
  }
}

// ---------------------------------------------------------------- 4. CLI contract
{
  const missing = check(null, [path.join(TMP, 'does-not-exist.glb')]);
  expect('cli: unreadable file exits 2', missing.status === 2, `exit ${missing.status}`);
  const noArgs = spawnSync(process.execPath, [CHECK], { encoding: 'utf8' });
  expect('cli: no output file exits 2', noArgs.status === 2, `exit ${noArgs.status}`);
  const mq = path.join(TMP, 'mannequiny.meshopt.glb');
  if (fs.existsSync(mq)) {
    const strict = check(null, [mq], ['--strict']);
    expect('cli: --strict exits 3 on failed checks', strict.status === 3, `exit ${strict.status}`);
    const lax = check(null, [mq]);
    expect('cli: failed checks still exit 0', lax.status === 0 && lax.json && lax.json.ok === false, `exit ${lax.status}`);
  }
  const garbage = path.join(TMP, 'garbage.glb');
  fs.writeFileSync(garbage, 'not a glb');
  const g = check(null, [garbage]);
  expect('cli: malformed file is reported, exit 0', g.status === 0 && g.json.outputs[0].failed.includes('validator_no_errors'), `exit ${g.status}`);
}

printTable();
const versions = JSON.parse(spawnSync(process.execPath, [CHECK, '--no-objects', path.join(TMP, 'garbage.glb')], { encoding: 'utf8' }).stdout).versions;
console.log(`\nversions: ${Object.entries(versions).map(([k, v]) => `${k} ${v}`).join(', ')}`);
console.log(`assets: ${ASSETS}${keep ? `\noutputs kept in ${TMP}` : ''}`);
if (problems.length) { console.log('\nFAILURES:'); for (const p of problems) console.log(`  ${p}`); }
if (!keep) fs.rmSync(TMP, { recursive: true, force: true });
console.log(`\n${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
