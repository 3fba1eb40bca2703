#!/usr/bin/env node
// Makes deliberately broken copies of a GLB, so that selftest.sh can prove
// that check.mjs notices each kind of damage.
//
//   node tamper.mjs KIND IN.glb OUT.glb
//
// KIND:
//   bad-max          JSON only: POSITION accessor max[0] of the first primitive made too large
//                    (in a meshopt file only the decoded validator can see it)
//   corrupt-meshopt  first meshopt ATTRIBUTES stream gets a broken header byte
//   swap-index       (uncompressed files) third index of the first indexed primitive
//                    points to another vertex: one triangle changes
//   move-vertex      (uncompressed files) the vertex of the first index is moved by 10% of
//                    the POSITION range along x; min/max are kept consistent
//   move-morph       (uncompressed files) the same on the first morph target's POSITION delta

import fs from 'node:fs';

const [kind, input, output] = process.argv.slice(2);
if (!kind || !input || !output) {
  process.stderr.write('usage: node tamper.mjs bad-max|corrupt-meshopt|swap-index|move-vertex|move-morph IN.glb OUT.glb\n');
  process.exit(2);
}

const bytes = fs.readFileSync(input);
if (bytes.readUInt32LE(0) !== 0x46546c67) throw new Error('not a GLB');
let off = 12, json = null, bin = null;
while (off + 8 <= bytes.length) {
  const len = bytes.readUInt32LE(off), type = bytes.readUInt32LE(off + 4);
  if (type === 0x4e4f534a) json = JSON.parse(bytes.subarray(off + 8, off + 8 + len).toString('utf8'));
  else if (type === 0x004e4942) bin = Buffer.from(bytes.subarray(off + 8, off + 8 + len));
  off += 8 + len;
}

const SIZES = { 5120: 1, 5121: 1, 5122: 2, 5123: 2, 5125: 4, 5126: 4 };
const COMPS = { SCALAR: 1, VEC2: 2, VEC3: 3, VEC4: 4, MAT4: 16 };
const READ = { 5120: 'readInt8', 5121: 'readUInt8', 5122: 'readInt16LE', 5123: 'readUInt16LE', 5125: 'readUInt32LE', 5126: 'readFloatLE' };
const WRITE = { 5120: 'writeInt8', 5121: 'writeUInt8', 5122: 'writeInt16LE', 5123: 'writeUInt16LE', 5125: 'writeUInt32LE', 5126: 'writeFloatLE' };

function view(accIndex) {
  const acc = json.accessors[accIndex];
  const bv = json.bufferViews[acc.bufferView];
  for (const e of ['EXT_meshopt_compression', 'KHR_meshopt_compression']) {
    if (bv.extensions && bv.extensions[e]) throw new Error(`${kind} needs an uncompressed file`);
  }
  if (bv.buffer !== 0) throw new Error('only GLB BIN data is supported');
  const size = SIZES[acc.componentType];
  const stride = bv.byteStride || size * COMPS[acc.type];
  const base = (bv.byteOffset || 0) + (acc.byteOffset || 0);
  const at = (i, c) => base + i * stride + c * size;
  return {
    acc,
    get: (i, c) => bin[READ[acc.componentType]](at(i, c)),
    set: (i, c, v) => bin[WRITE[acc.componentType]](v, at(i, c)),
  };
}

const prim = json.meshes[0].primitives[0];
if (kind === 'bad-max') {
  const acc = json.accessors[prim.attributes.POSITION];
  let d = (acc.max[0] - acc.min[0]) * 0.25 + 1;
  if (acc.componentType !== 5126) d = Math.round(d);
  acc.max[0] += d;
} else if (kind === 'corrupt-meshopt') {
  let done = false;
  for (const bv of json.bufferViews) {
    const ext = bv.extensions && (bv.extensions.EXT_meshopt_compression || bv.extensions.KHR_meshopt_compression);
    if (ext && ext.mode === 'ATTRIBUTES' && ext.buffer === 0) {
      bin[ext.byteOffset || 0] = 0x00; // valid headers are 0xa0 / 0xa1
      done = true;
      break;
    }
  }
  if (!done) throw new Error('no meshopt ATTRIBUTES stream in the BIN chunk');
} else if (kind === 'swap-index') {
  const p = json.meshes.flatMap((m) => m.primitives).find((q) => q.indices !== undefined);
  const ix = view(p.indices);
  const n = json.accessors[p.attributes.POSITION].count;
  const a = ix.get(0, 0), b = ix.get(1, 0), c = ix.get(2, 0);
  let v = (c + Math.floor(n / 2)) % n;
  while (v === a || v === b || v === c) v = (v + 1) % n;
  ix.set(2, 0, v);
} else if (kind === 'move-vertex' || kind === 'move-morph') {
  const accIndex = kind === 'move-vertex' ? prim.attributes.POSITION : prim.targets && prim.targets[0] && prim.targets[0].POSITION;
  if (accIndex === undefined) throw new Error('first primitive has no morph target POSITION');
  const pos = view(accIndex);
  const i = prim.indices !== undefined ? view(prim.indices).get(0, 0) : 0;
  const range = Math.max(pos.acc.max[0] - pos.acc.min[0], pos.acc.max[1] - pos.acc.min[1], pos.acc.max[2] - pos.acc.min[2]);
  const lim = { 5120: [-128, 127], 5121: [0, 255], 5122: [-32768, 32767], 5123: [0, 65535], 5125: [0, 4294967295], 5126: [-Infinity, Infinity] }[pos.acc.componentType];
  const isInt = pos.acc.componentType !== 5126;
  const step = isInt ? Math.max(1, Math.round(0.1 * range)) : 0.1 * range;
  let x = pos.get(i, 0) + step;
  if (x > lim[1]) x = pos.get(i, 0) - step;
  pos.set(i, 0, x);
  const stored = pos.get(i, 0);
  if (pos.acc.max) pos.acc.max[0] = Math.max(pos.acc.max[0], stored);
  if (pos.acc.min) pos.acc.min[0] = Math.min(pos.acc.min[0], stored);
} else {
  process.stderr.write(`unknown kind ${kind}\n`);
  process.exit(2);
}

let j = Buffer.from(JSON.stringify(json), 'utf8');
j = Buffer.concat([j, Buffer.alloc((4 - (j.length % 4)) % 4, 0x20)]);
const chunks = [Buffer.alloc(8), j];
chunks[0].writeUInt32LE(j.length, 0);
chunks[0].writeUInt32LE(0x4e4f534a, 4);
if (bin) {
  const b = Buffer.concat([bin, Buffer.alloc((4 - (bin.length % 4)) % 4)]);
  const h = Buffer.alloc(8);
  h.writeUInt32LE(b.length, 0);
  h.writeUInt32LE(0x004e4942, 4);
  chunks.push(h, b);
}
const body = Buffer.concat(chunks);
const header = Buffer.alloc(12);
header.writeUInt32LE(0x46546c67, 0);
header.writeUInt32LE(2, 4);
header.writeUInt32LE(12 + body.length, 8);
fs.writeFileSync(output, Buffer.concat([header, body]));
