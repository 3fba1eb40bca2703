#!/usr/bin/env node
// Kiln glTF output checker.
//
//   node check.mjs [--reference SOURCE.(glb|gltf)] OUTPUT.(glb|gltf) [OUTPUT2 ...]
//
// Prints ONE JSON object on stdout. Exit code 0 whenever it ran (the JSON says
// what failed); 2 for usage errors or a file that cannot be read; 3 only with
// --strict when some check failed. See README.md for the meaning of every field.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import validator from 'gltf-validator';
import { MeshoptDecoder as NpmMeshoptDecoder } from 'meshoptimizer/decoder';
import * as THREE from 'three';

import { readExternal, withCapturedConsole, parseGltf } from './three-node.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const MESHOPT_EXTS = ['EXT_meshopt_compression', 'KHR_meshopt_compression'];
const GLB_MAGIC = 0x46546c67;
const CHUNK_JSON = 0x4e4f534a;
const CHUNK_BIN = 0x004e4942;

// ---------------------------------------------------------------------------
// CLI

const USAGE = `usage: node check.mjs [options] OUTPUT.(glb|gltf) [OUTPUT2 ...]
options:
  --reference FILE        source model to compare against (.glb or .gltf)
  --tolerance REL         position tolerance relative to the reference bbox diagonal (default 1e-3)
  --normal-tolerance DEG  max allowed normal deviation in degrees (default 5)
  --max-messages N        max validator error/warning messages listed per report (default 50)
  --no-objects            omit the per-object listings (three.objects) from the JSON
  --pretty                indent the JSON
  --strict                exit 3 when any check failed (default: exit 0 whenever it ran)
  -h, --help              this text`;

function usage(msg) {
  if (msg) process.stderr.write(`check.mjs: ${msg}\n`);
  process.stderr.write(USAGE + '\n');
  process.exit(2);
}

function parseArgs(argv) {
  const o = { reference: null, outputs: [], tolerance: 1e-3, normalTolerance: 5, maxMessages: 50, objects: true, pretty: false, strict: false };
  const num = (name, v) => {
    const x = Number(v);
    if (v === undefined || !Number.isFinite(x) || x < 0) usage(`${name} needs a non-negative number`);
    return x;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-h' || a === '--help') { process.stdout.write(USAGE + '\n'); process.exit(0); }
    else if (a === '--reference' || a === '-r') { o.reference = argv[++i]; if (!o.reference) usage('--reference needs a file'); }
    else if (a.startsWith('--reference=')) o.reference = a.slice(12);
    else if (a === '--tolerance') o.tolerance = num(a, argv[++i]);
    else if (a === '--normal-tolerance') o.normalTolerance = num(a, argv[++i]);
    else if (a === '--max-messages') o.maxMessages = Math.floor(num(a, argv[++i]));
    else if (a === '--no-objects') o.objects = false;
    else if (a === '--pretty') o.pretty = true;
    else if (a === '--strict') o.strict = true;
    else if (a.startsWith('-') && a !== '-') usage(`unknown option ${a}`);
    else o.outputs.push(a);
  }
  if (o.outputs.length === 0) usage('no output file given');
  return o;
}

function versions() {
  const v = { node: process.version };
  for (const name of ['gltf-validator', 'meshoptimizer', 'three', 'gltfpack']) {
    try {
      v[name] = JSON.parse(fs.readFileSync(path.join(HERE, 'node_modules', name, 'package.json'), 'utf8')).version;
    } catch { v[name] = null; }
  }
  return v;
}

// ---------------------------------------------------------------------------
// Reading glTF / GLB

function readFileOrDie(file) {
  try {
    const st = fs.statSync(file);
    if (!st.isFile()) throw new Error('not a regular file');
    return new Uint8Array(fs.readFileSync(file));
  } catch (e) {
    process.stderr.write(`check.mjs: cannot read ${file}: ${e.message}\n`);
    process.exit(2);
  }
}

// Parse the container; never throws (a malformed file gives parseError).
function openAsset(file) {
  const bytes = readFileOrDie(file);
  const asset = { file, dir: path.dirname(path.resolve(file)), bytes, isGlb: false, json: null, bin: null, parseError: null };
  try {
    const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (bytes.byteLength >= 12 && dv.getUint32(0, true) === GLB_MAGIC) {
      asset.isGlb = true;
      const length = Math.min(dv.getUint32(8, true), bytes.byteLength);
      let off = 12;
      while (off + 8 <= length) {
        const clen = dv.getUint32(off, true);
        const ctype = dv.getUint32(off + 4, true);
        const data = bytes.subarray(off + 8, off + 8 + clen);
        if (ctype === CHUNK_JSON && asset.json === null) asset.json = JSON.parse(new TextDecoder().decode(data));
        else if (ctype === CHUNK_BIN && asset.bin === null) asset.bin = data;
        off += 8 + clen;
      }
      if (asset.json === null) throw new Error('GLB without JSON chunk');
    } else {
      asset.json = JSON.parse(new TextDecoder().decode(bytes));
    }
  } catch (e) {
    asset.parseError = String(e.message || e);
  }
  return asset;
}

// Bytes of buffer i, or null when it has no data (e.g. a meshopt fallback buffer).
function bufferBytes(asset, i) {
  const b = (asset.json.buffers || [])[i];
  if (!b) return null;
  if (b.uri === undefined) return asset.isGlb && i === 0 ? asset.bin : null;
  return readExternal(asset.dir, b.uri);
}

function meshoptExtensionsOf(json) {
  const found = new Set();
  for (const name of json.extensionsUsed || []) if (MESHOPT_EXTS.includes(name)) found.add(name);
  for (const bv of json.bufferViews || []) for (const name of MESHOPT_EXTS) if (bv.extensions && bv.extensions[name]) found.add(name);
  return [...found];
}

function makeGlb(json, bin) {
  const enc = new TextEncoder();
  let jsonBytes = enc.encode(JSON.stringify(json));
  const jsonPad = (4 - (jsonBytes.length % 4)) % 4;
  const binLen = bin ? bin.length : 0;
  const binPad = (4 - (binLen % 4)) % 4;
  const total = 12 + 8 + jsonBytes.length + jsonPad + (bin ? 8 + binLen + binPad : 0);
  const out = new Uint8Array(total);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, GLB_MAGIC, true);
  dv.setUint32(4, 2, true);
  dv.setUint32(8, total, true);
  dv.setUint32(12, jsonBytes.length + jsonPad, true);
  dv.setUint32(16, CHUNK_JSON, true);
  out.set(jsonBytes, 20);
  out.fill(0x20, 20 + jsonBytes.length, 20 + jsonBytes.length + jsonPad);
  if (bin) {
    const o = 20 + jsonBytes.length + jsonPad;
    dv.setUint32(o, binLen + binPad, true);
    dv.setUint32(o + 4, CHUNK_BIN, true);
    out.set(bin, o + 8);
  }
  return out;
}

// ---------------------------------------------------------------------------
// glTF-Validator

const SEVERITY = ['error', 'warning', 'info', 'hint'];

async function runValidator(bytes, uri, dir, maxMessages) {
  try {
    const report = await validator.validateBytes(bytes, {
      uri,
      maxIssues: 0,
      writeTimestamp: false,
      externalResourceFunction: (u) => new Promise((resolve, reject) => {
        try { resolve(readExternal(dir, u)); } catch (e) { reject(e.message); }
      }),
    });
    const issues = report.issues;
    const codes = {};
    const messages = [];
    for (const m of issues.messages) {
      const sev = SEVERITY[m.severity] || String(m.severity);
      codes[m.code] = codes[m.code] || { severity: sev, count: 0 };
      codes[m.code].count++;
      if (m.severity <= 1 && messages.length < maxMessages) {
        const msg = { severity: sev, code: m.code, message: m.message };
        if (m.pointer !== undefined) msg.pointer = m.pointer;
        if (m.offset !== undefined) msg.offset = m.offset;
        messages.push(msg);
      }
    }
    return {
      validatorVersion: report.validatorVersion,
      numErrors: issues.numErrors,
      numWarnings: issues.numWarnings,
      numInfos: issues.numInfos,
      numHints: issues.numHints,
      codes,
      messages,
      messages_truncated: issues.numErrors + issues.numWarnings > messages.length,
    };
  } catch (e) {
    return { error: `validator failed: ${e && e.message ? e.message : String(e)}`, numErrors: null, numWarnings: null, numInfos: null, numHints: null, codes: {}, messages: [] };
  }
}

// ---------------------------------------------------------------------------
// meshopt: decode compressed bufferViews in place with meshoptimizer's decoder

async function decodeMeshoptInPlace(asset) {
  const used = meshoptExtensionsOf(asset.json);
  if (used.length === 0) return null;
  await NpmMeshoptDecoder.ready;
  const json = structuredClone(asset.json);
  const buffers = json.buffers || [];
  const data = [];
  const synthesized = [];
  const loadErrors = [];
  for (let i = 0; i < buffers.length; i++) {
    let d = null;
    try { d = bufferBytes(asset, i); } catch (e) { loadErrors.push({ buffer: i, error: e.message }); }
    if (d === null) {
      d = new Uint8Array(buffers[i].byteLength || 0);
      synthesized.push(i);
    } else {
      const copy = new Uint8Array(Math.max(d.length, buffers[i].byteLength || 0));
      copy.set(d);
      d = copy;
    }
    data.push(d);
  }
  const written = new Set();
  const decoded = [];
  const errors = [...loadErrors];
  for (let v = 0; v < (json.bufferViews || []).length; v++) {
    const bv = json.bufferViews[v];
    for (const name of MESHOPT_EXTS) {
      const ext = bv.extensions && bv.extensions[name];
      if (!ext) continue;
      const info = { bufferView: v, extension: name, mode: ext.mode, filter: ext.filter || 'NONE', count: ext.count, byteStride: ext.byteStride };
      try {
        const src = data[ext.buffer];
        const tgt = data[bv.buffer];
        if (!src || !tgt) throw new Error('buffer index out of range');
        const so = ext.byteOffset || 0;
        if (so + ext.byteLength > src.length) throw new Error('compressed range exceeds its buffer');
        const size = ext.count * ext.byteStride;
        if (size !== bv.byteLength) info.note = `count*byteStride=${size} differs from bufferView.byteLength=${bv.byteLength}`;
        const to = bv.byteOffset || 0;
        if (to + size > tgt.length) throw new Error('decoded range exceeds the uncompressed buffer');
        NpmMeshoptDecoder.decodeGltfBuffer(tgt.subarray(to, to + size), ext.count, ext.byteStride, src.subarray(so, so + ext.byteLength), ext.mode, ext.filter || 'NONE');
        written.add(bv.buffer);
        decoded.push(info);
      } catch (e) {
        info.error = String(e && e.message ? e.message : e);
        errors.push(info);
      }
      delete bv.extensions[name];
    }
    if (bv.extensions && Object.keys(bv.extensions).length === 0) delete bv.extensions;
  }
  for (const b of buffers) {
    if (!b.extensions) continue;
    for (const name of MESHOPT_EXTS) delete b.extensions[name];
    if (Object.keys(b.extensions).length === 0) delete b.extensions;
  }
  for (const key of ['extensionsUsed', 'extensionsRequired']) {
    if (!json[key]) continue;
    json[key] = json[key].filter((n) => !MESHOPT_EXTS.includes(n));
    if (json[key].length === 0) delete json[key];
  }

  // Lay the data out again. In a GLB whose buffer 0 is the BIN chunk, every
  // buffer that received decoded data (typically the data-less fallback buffer)
  // is appended to the BIN chunk and removed; elsewhere it becomes a data URI.
  let bytes;
  const layout = [];
  const moved = new Map(); // old buffer index -> base offset in BIN
  const binIsBuffer0 = asset.isGlb && buffers.length > 0 && buffers[0].uri === undefined;
  if (binIsBuffer0) {
    let size = data[0].length;
    for (const i of [...written].sort((a, b) => a - b)) {
      if (i === 0) continue;
      size = Math.ceil(size / 16) * 16;
      moved.set(i, size);
      size += data[i].length;
    }
    const bin = new Uint8Array(size);
    bin.set(data[0], 0);
    for (const [i, base] of moved) { bin.set(data[i], base); layout.push(`buffer ${i} (${data[i].length} bytes) appended to the GLB BIN chunk at ${base}`); }
    buffers[0].byteLength = size;
    const remap = [];
    let n = 0;
    for (let i = 0; i < buffers.length; i++) remap.push(moved.has(i) ? -1 : n++);
    for (const bv of json.bufferViews || []) {
      if (moved.has(bv.buffer)) { bv.byteOffset = (bv.byteOffset || 0) + moved.get(bv.buffer); bv.buffer = 0; }
      else bv.buffer = remap[bv.buffer];
    }
    json.buffers = buffers.filter((_, i) => !moved.has(i));
    for (let i = 0; i < json.buffers.length; i++) {
      const old = remap.indexOf(i);
      if (old > 0 && (written.has(old) || synthesized.includes(old))) {
        json.buffers[i].uri = 'data:application/octet-stream;base64,' + Buffer.from(data[old]).toString('base64');
        layout.push(`buffer ${old} written as a data URI`);
      }
    }
    bytes = makeGlb(json, bin);
  } else {
    for (let i = 0; i < buffers.length; i++) {
      if (written.has(i) || synthesized.includes(i)) {
        buffers[i].uri = 'data:application/octet-stream;base64,' + Buffer.from(data[i]).toString('base64');
        layout.push(`buffer ${i} written as a data URI`);
      }
    }
    bytes = asset.isGlb ? makeGlb(json, asset.bin ? asset.bin : null) : new TextEncoder().encode(JSON.stringify(json));
  }
  const modes = {};
  for (const d of decoded) { const k = `${d.mode}/${d.filter}`; modes[k] = (modes[k] || 0) + 1; }
  return { extensions: used, decoded_buffer_views: decoded.length, modes, decode_errors: errors, layout, bytes };
}

// ---------------------------------------------------------------------------
// three.js loading (Node, no DOM: textures are stubbed, images never decoded)

// (nodeIoPlugin, withCapturedConsole and parseGltf live in three-node.mjs)

async function loadThree(asset) {
  if (asset.parseError) return { error: `cannot parse container: ${asset.parseError}` };
  const { value, lines } = await withCapturedConsole(async () => {
    try {
      const gltf = await parseGltf(asset.bytes, asset.dir);
      return { gltf };
    } catch (e) {
      return { error: String(e && e.message ? e.message : e) };
    }
  });
  value.warnings = lines;
  return value;
}

// ---------------------------------------------------------------------------
// Geometry extraction (world space, rest pose, default morph weights)

function attrDesc(a) {
  if (!a) return null;
  const arr = a.isInterleavedBufferAttribute ? a.data.array : a.array;
  return `${arr.constructor.name.replace('Array', '')}x${a.itemSize}${a.normalized ? 'n' : ''}${a.isInterleavedBufferAttribute ? 'i' : ''}`;
}

function extractObjects(gltf) {
  const parser = gltf.parser;
  const scene = gltf.scene;
  const objects = [];
  if (!scene) return objects; // no scene: nothing is displayed
  scene.updateMatrixWorld(true);
  scene.traverse((obj) => {
    if (!(obj.isMesh || obj.isPoints || obj.isLine)) return;
    if (obj.isSkinnedMesh && obj.skeleton) obj.skeleton.update();
    objects.push(extractObject(obj, parser, objects.length));
  });
  return objects;
}

function nodeIndexOf(obj, parser) {
  for (let o = obj; o; o = o.parent) {
    const a = parser.associations.get(o);
    if (a && a.nodes !== undefined) return a.nodes;
  }
  return null;
}

function extractObject(obj, parser, index) {
  const g = obj.geometry;
  const assoc = parser.associations.get(obj) || {};
  const matAssoc = obj.material && !Array.isArray(obj.material) ? parser.associations.get(obj.material) : null;
  const pos = g.attributes.position;
  const n = pos ? pos.count : 0;
  const type = obj.isSkinnedMesh ? 'SkinnedMesh' : obj.isMesh ? 'Mesh' : obj.isPoints ? 'Points' : obj.isLineSegments ? 'LineSegments' : obj.isLineLoop ? 'LineLoop' : 'Line';

  const rec = {
    index,
    name: obj.name,
    node: nodeIndexOf(obj, parser),
    mesh: assoc.meshes !== undefined ? assoc.meshes : null,
    primitive: assoc.primitives !== undefined ? assoc.primitives : null,
    material: matAssoc && matAssoc.materials !== undefined ? matAssoc.materials : null,
    type,
    vertex_count: n,
    index_count: g.index ? g.index.count : null,
    triangle_count: 0,
    degenerate_triangles: 0,
    skinned: !!obj.isSkinnedMesh,
    bone_count: obj.isSkinnedMesh && obj.skeleton ? obj.skeleton.bones.length : null,
    morph_targets: obj.morphTargetDictionary ? Object.entries(obj.morphTargetDictionary).sort((a, b) => a[1] - b[1]).map((e) => e[0]) : [],
    morph_influences: obj.morphTargetInfluences ? Array.from(obj.morphTargetInfluences) : [],
    attributes: Object.fromEntries(Object.entries(g.attributes).map(([k, a]) => [k, attrDesc(a)])),
    bbox: null,
  };

  // World-space positions / normals, exactly as three.js renders the rest pose.
  const nrm = g.attributes.normal;
  const morphP = g.morphAttributes.position || [];
  const morphN = g.morphAttributes.normal || [];
  const relative = g.morphTargetsRelative;
  const mw = obj.matrixWorld;
  const nm = new THREE.Matrix3().getNormalMatrix(mw);
  const skinned = obj.isSkinnedMesh && obj.skeleton && g.attributes.skinIndex && g.attributes.skinWeight;
  let boneMats = null;
  if (skinned) {
    const bm = obj.skeleton.boneMatrices;
    boneMats = [];
    for (let b = 0; b < obj.skeleton.bones.length; b++) {
      const m = new THREE.Matrix4().fromArray(bm, b * 16);
      boneMats.push(new THREE.Matrix4().multiplyMatrices(obj.bindMatrixInverse, m).multiply(obj.bindMatrix));
    }
  }
  const v = new THREE.Vector3();
  const nv = new THREE.Vector3();
  const t = new THREE.Vector3();
  const q = new THREE.Vector4();
  const acc = new THREE.Vector4();
  const skinM = new THREE.Matrix4();
  const skinM3 = new THREE.Matrix3();
  const si = new THREE.Vector4();
  const sw = new THREE.Vector4();
  const computeWorld = (infl, wantNormals) => {
  const P = new Float64Array(n * 3);
  const N = nrm && wantNormals ? new Float64Array(n * 3) : null;
  const min = [Infinity, Infinity, Infinity];
  const max = [-Infinity, -Infinity, -Infinity];
  for (let i = 0; i < n; i++) {
    v.fromBufferAttribute(pos, i);
    if (N) nv.fromBufferAttribute(nrm, i);
    if (morphP.length) {
      const base = v.clone();
      for (let k = 0; k < morphP.length; k++) {
        const w = infl[k] || 0;
        if (w === 0) continue;
        t.fromBufferAttribute(morphP[k], i);
        if (relative) v.addScaledVector(t, w); else v.addScaledVector(t.sub(base), w);
      }
    }
    if (N && morphN.length) {
      const base = nv.clone();
      for (let k = 0; k < morphN.length; k++) {
        const w = infl[k] || 0;
        if (w === 0) continue;
        t.fromBufferAttribute(morphN[k], i);
        if (relative) nv.addScaledVector(t, w); else nv.addScaledVector(t.sub(base), w);
      }
    }
    if (skinned) {
      si.fromBufferAttribute(g.attributes.skinIndex, i);
      sw.fromBufferAttribute(g.attributes.skinWeight, i);
      q.set(v.x, v.y, v.z, 1);
      acc.set(0, 0, 0, 0);
      const e = skinM.elements;
      e.fill(0);
      for (let k = 0; k < 4; k++) {
        const w = sw.getComponent(k);
        if (w === 0) continue;
        const bmat = boneMats[si.getComponent(k)];
        if (!bmat) continue;
        const be = bmat.elements;
        for (let c = 0; c < 16; c++) e[c] += w * be[c];
      }
      // skinned = (bindMatrixInverse * sum w*bone*bindMatrix) * (v,1); three takes .xyz
      acc.copy(q).applyMatrix4(skinM);
      v.set(acc.x, acc.y, acc.z);
      if (N) nv.applyMatrix3(skinM3.setFromMatrix4(skinM));
    }
    v.applyMatrix4(mw);
    P[i * 3] = v.x; P[i * 3 + 1] = v.y; P[i * 3 + 2] = v.z;
    if (v.x < min[0]) min[0] = v.x; if (v.y < min[1]) min[1] = v.y; if (v.z < min[2]) min[2] = v.z;
    if (v.x > max[0]) max[0] = v.x; if (v.y > max[1]) max[1] = v.y; if (v.z > max[2]) max[2] = v.z;
    if (N) {
      nv.applyMatrix3(nm);
      const l = nv.length();
      if (l > 0) nv.multiplyScalar(1 / l);
      N[i * 3] = nv.x; N[i * 3 + 1] = nv.y; N[i * 3 + 2] = nv.z;
    }
  }
  return { P, N, min, max };
  };
  const { P, N, min, max } = computeWorld(obj.morphTargetInfluences || [], true);
  // Each morph target fully applied on its own (weight 1, others 0), to compare the deltas.
  const morphWorld = morphP.map((_, k) => computeWorld(morphP.map((__, j) => (j === k ? 1 : 0)), false).P);
  rec.bbox = n ? { min, max } : null;

  // Triangles (GLTFLoader already converted strips/fans to indexed lists).
  let tris = null;
  let nondegArr = new Uint32Array(0);
  if (obj.isMesh && n) {
    const idx = g.index;
    const count = idx ? idx.count : n;
    const tc = Math.floor(count / 3);
    tris = new Uint32Array(tc * 3);
    for (let i = 0; i < tc * 3; i++) tris[i] = idx ? idx.getX(i) : i;
    rec.triangle_count = tc;
    let degenerate = 0;
    const nondeg = [];
    for (let k = 0; k < tc; k++) {
      const a = tris[k * 3], b = tris[k * 3 + 1], c = tris[k * 3 + 2];
      if (a >= n || b >= n || c >= n) { degenerate++; continue; }
      if (a === b || b === c || a === c || triArea2(P, a, b, c) === 0) { degenerate++; continue; }
      nondeg.push(k);
    }
    rec.degenerate_triangles = degenerate;
    nondegArr = Uint32Array.from(nondeg);
  }
  Object.defineProperty(rec, '_geom', { value: { P, N, tris, morphWorld }, enumerable: false });
  Object.defineProperty(rec, '_nondeg', { value: nondegArr, enumerable: false });
  return rec;
}

function triArea2(P, a, b, c) {
  const ux = P[b * 3] - P[a * 3], uy = P[b * 3 + 1] - P[a * 3 + 1], uz = P[b * 3 + 2] - P[a * 3 + 2];
  const vx = P[c * 3] - P[a * 3], vy = P[c * 3 + 1] - P[a * 3 + 1], vz = P[c * 3 + 2] - P[a * 3 + 2];
  const x = uy * vz - uz * vy, y = uz * vx - ux * vz, z = ux * vy - uy * vx;
  return x * x + y * y + z * z;
}

function unionBox(objs) {
  const min = [Infinity, Infinity, Infinity], max = [-Infinity, -Infinity, -Infinity];
  for (const o of objs) {
    if (!o.bbox) continue;
    for (let k = 0; k < 3; k++) { min[k] = Math.min(min[k], o.bbox.min[k]); max[k] = Math.max(max[k], o.bbox.max[k]); }
  }
  return min[0] === Infinity ? null : { min, max };
}

function diag(box) {
  if (!box) return 0;
  return Math.hypot(box.max[0] - box.min[0], box.max[1] - box.min[1], box.max[2] - box.min[2]);
}

// ---------------------------------------------------------------------------
// k-d tree for nearest-neighbour queries

class KdTree {
  constructor(points) {
    this.p = points;
    const n = points.length / 3;
    this.idx = new Int32Array(n);
    for (let i = 0; i < n; i++) this.idx[i] = i;
    this.axis = new Uint8Array(n);
    this.build(0, n);
  }

  build(lo, hi) {
    const stack = [[lo, hi]];
    const p = this.p, idx = this.idx;
    while (stack.length) {
      const [l, h] = stack.pop();
      if (h - l <= 1) continue;
      let mn0 = Infinity, mn1 = Infinity, mn2 = Infinity, mx0 = -Infinity, mx1 = -Infinity, mx2 = -Infinity;
      for (let i = l; i < h; i++) {
        const j = idx[i] * 3;
        if (p[j] < mn0) mn0 = p[j]; if (p[j] > mx0) mx0 = p[j];
        if (p[j + 1] < mn1) mn1 = p[j + 1]; if (p[j + 1] > mx1) mx1 = p[j + 1];
        if (p[j + 2] < mn2) mn2 = p[j + 2]; if (p[j + 2] > mx2) mx2 = p[j + 2];
      }
      const ex = [mx0 - mn0, mx1 - mn1, mx2 - mn2];
      const ax = ex[0] >= ex[1] && ex[0] >= ex[2] ? 0 : ex[1] >= ex[2] ? 1 : 2;
      const m = (l + h) >> 1;
      this.select(l, h - 1, m, ax);
      this.axis[m] = ax;
      stack.push([l, m], [m + 1, h]);
    }
  }

  select(l, r, k, ax) {
    const p = this.p, idx = this.idx;
    while (r > l) {
      const pivot = p[idx[(l + r) >> 1] * 3 + ax];
      let i = l, j = r;
      while (i <= j) {
        while (p[idx[i] * 3 + ax] < pivot) i++;
        while (p[idx[j] * 3 + ax] > pivot) j--;
        if (i <= j) { const t = idx[i]; idx[i] = idx[j]; idx[j] = t; i++; j--; }
      }
      if (k <= j) r = j; else if (k >= i) l = i; else break;
    }
  }

  nearest(x, y, z) {
    let best = Infinity, bestI = -1;
    const p = this.p, idx = this.idx, axis = this.axis;
    // stack of (lo, hi, lower bound of squared distance)
    const stack = [0, idx.length, 0];
    while (stack.length) {
      const bound = stack.pop(), h = stack.pop(), l = stack.pop();
      if (h <= l || bound >= best) continue;
      const m = (l + h) >> 1;
      const j = idx[m] * 3;
      const dx = p[j] - x, dy = p[j + 1] - y, dz = p[j + 2] - z;
      const d = dx * dx + dy * dy + dz * dz;
      if (d < best) { best = d; bestI = idx[m]; }
      if (h - l === 1) continue;
      const ax = axis[m];
      const diff = (ax === 0 ? x : ax === 1 ? y : z) - p[j + ax];
      const d2 = diff * diff;
      // far side first so that the near side is searched next
      if (diff < 0) { stack.push(m + 1, h, d2, l, m, 0); } else { stack.push(l, m, d2, m + 1, h, 0); }
    }
    return { index: bestI, dist: Math.sqrt(best) };
  }

  within(x, y, z, r, out) {
    out.length = 0;
    const r2 = r * r;
    const p = this.p, idx = this.idx, axis = this.axis;
    const stack = [0, idx.length];
    while (stack.length) {
      const h = stack.pop(), l = stack.pop();
      if (h <= l) continue;
      const m = (l + h) >> 1;
      const j = idx[m] * 3;
      const dx = p[j] - x, dy = p[j + 1] - y, dz = p[j + 2] - z;
      if (dx * dx + dy * dy + dz * dz <= r2) out.push(idx[m]);
      if (h - l === 1) continue;
      const diff = (axis[m] === 0 ? x : axis[m] === 1 ? y : z) - p[j + axis[m]];
      if (diff <= r) stack.push(l, m);
      if (diff >= -r) stack.push(m + 1, h);
    }
    return out;
  }
}

// ---------------------------------------------------------------------------
// Comparisons

// Concatenate world-space geometry of several objects.
function gather(objs) {
  let nv = 0;
  for (const o of objs) nv += o.vertex_count;
  const P = new Float64Array(nv * 3);
  const hasN = objs.length > 0 && objs.every((o) => o._geom.N);
  const N = hasN ? new Float64Array(nv * 3) : null;
  const T = [];
  let base = 0;
  for (const o of objs) {
    P.set(o._geom.P, base * 3);
    if (N) N.set(o._geom.N, base * 3);
    const tris = o._geom.tris;
    if (tris) for (const k of o._nondeg) T.push(base + tris[k * 3], base + tris[k * 3 + 1], base + tris[k * 3 + 2]);
    base += o.vertex_count;
  }
  const M = objs.length === 1 ? objs[0]._geom.morphWorld : [];
  return { P, N, T: Uint32Array.from(T), M };
}

const PERMS = [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [2, 1, 0], [1, 0, 2]];

// Match output triangles to reference triangles (world space, up to vertex
// rotation; odd permutations count as winding flips), each reference triangle
// used at most once.
function matchTriangles(ref, out, tol) {
  const cell = tol > 0 ? tol : 1e-12;
  const key = (x, y, z) => `${Math.floor(x / cell)},${Math.floor(y / cell)},${Math.floor(z / cell)}`;
  const refCount = ref.T.length / 3;
  const grid = new Map();
  const rc = new Float64Array(refCount * 3);
  for (let t = 0; t < refCount; t++) {
    let x = 0, y = 0, z = 0;
    for (let k = 0; k < 3; k++) { const v = ref.T[t * 3 + k] * 3; x += ref.P[v]; y += ref.P[v + 1]; z += ref.P[v + 2]; }
    x /= 3; y /= 3; z /= 3;
    rc[t * 3] = x; rc[t * 3 + 1] = y; rc[t * 3 + 2] = z;
    const kk = key(x, y, z);
    let b = grid.get(kk);
    if (!b) grid.set(kk, (b = []));
    b.push(t);
  }
  const used = new Uint8Array(refCount);
  let unmatchedOut = 0, flipped = 0, maxMatchErr = 0;
  const outCount = out.T.length / 3;
  const ov = new Float64Array(9), rv = new Float64Array(9);
  for (let t = 0; t < outCount; t++) {
    let x = 0, y = 0, z = 0;
    for (let k = 0; k < 3; k++) { const v = out.T[t * 3 + k] * 3; ov[k * 3] = out.P[v]; ov[k * 3 + 1] = out.P[v + 1]; ov[k * 3 + 2] = out.P[v + 2]; x += out.P[v]; y += out.P[v + 1]; z += out.P[v + 2]; }
    x /= 3; y /= 3; z /= 3;
    const cx = Math.floor(x / cell), cy = Math.floor(y / cell), cz = Math.floor(z / cell);
    let best = Infinity, bestT = -1, bestFlip = false;
    for (let dx = -1; dx <= 1; dx++) for (let dy = -1; dy <= 1; dy++) for (let dz = -1; dz <= 1; dz++) {
      const b = grid.get(`${cx + dx},${cy + dy},${cz + dz}`);
      if (!b) continue;
      for (const r of b) {
        if (used[r]) continue;
        for (let k = 0; k < 3; k++) { const v = ref.T[r * 3 + k] * 3; rv[k * 3] = ref.P[v]; rv[k * 3 + 1] = ref.P[v + 1]; rv[k * 3 + 2] = ref.P[v + 2]; }
        for (let pi = 0; pi < 6; pi++) {
          const perm = PERMS[pi];
          let e = 0;
          for (let k = 0; k < 3 && e <= tol; k++) {
            const a = k * 3, c = perm[k] * 3;
            e = Math.max(e, Math.hypot(ov[a] - rv[c], ov[a + 1] - rv[c + 1], ov[a + 2] - rv[c + 2]));
          }
          if (e > tol) continue;
          const flip = pi >= 3;
          // prefer same winding, then smaller error
          const score = e + (flip ? 1e300 : 0);
          if (score < best) { best = score; bestT = r; bestFlip = flip; }
        }
      }
    }
    if (bestT < 0) { unmatchedOut++; continue; }
    used[bestT] = 1;
    if (bestFlip) flipped++;
    else maxMatchErr = Math.max(maxMatchErr, best);
  }
  // Reference triangles left over; those smaller than the tolerance (which a
  // quantizer may legitimately collapse) are counted separately.
  let unmatchedRef = 0, unmatchedRefSmall = 0;
  for (let r = 0; r < refCount; r++) {
    if (used[r]) continue;
    let rad = 0;
    for (let k = 0; k < 3; k++) {
      const v = ref.T[r * 3 + k] * 3;
      rad = Math.max(rad, Math.hypot(ref.P[v] - rc[r * 3], ref.P[v + 1] - rc[r * 3 + 1], ref.P[v + 2] - rc[r * 3 + 2]));
    }
    if (rad <= tol) unmatchedRefSmall++; else unmatchedRef++;
  }
  return {
    unmatched_triangles: unmatchedOut + unmatchedRef,
    unmatched_output_triangles: unmatchedOut,
    unmatched_reference_triangles: unmatchedRef,
    unmatched_reference_triangles_below_tolerance: unmatchedRefSmall,
    winding_flipped_triangles: flipped,
  };
}

// Nearest-neighbour vertex error of out against ref (+ normal deviation).
function vertexError(ref, out, slack) {
  const res = { max_position_error: null, max_normal_angle_deg: null };
  const nOut = out.P.length / 3;
  if (nOut === 0 || ref.P.length === 0) return res;
  const tree = new KdTree(ref.P);
  let maxErr = 0, maxAng = 0, sumErr = 0, maxMorph = 0;
  const cand = [];
  const withNormals = ref.N && out.N;
  const K = ref.M && out.M && ref.M.length === out.M.length ? ref.M.length : 0;
  let zeroNormals = 0;
  for (let i = 0; i < nOut; i++) {
    const x = out.P[i * 3], y = out.P[i * 3 + 1], z = out.P[i * 3 + 2];
    const nn = tree.nearest(x, y, z);
    sumErr += nn.dist;
    if (nn.dist > maxErr) maxErr = nn.dist;
    if (!withNormals && K === 0) continue;
    // reference vertices that are as near as the nearest one (split vertices at
    // hard edges / seams share a position): take the best-agreeing one
    tree.within(x, y, z, nn.dist * (1 + 1e-9) + slack, cand);
    if (cand.length === 0) cand.push(nn.index);
    if (withNormals) {
      const ox = out.N[i * 3], oy = out.N[i * 3 + 1], oz = out.N[i * 3 + 2];
      if (ox === 0 && oy === 0 && oz === 0) zeroNormals++;
      else {
        let bestDot = -2;
        for (const r of cand) {
          const d = ox * ref.N[r * 3] + oy * ref.N[r * 3 + 1] + oz * ref.N[r * 3 + 2];
          if (d > bestDot) bestDot = d;
        }
        const ang = Math.acos(Math.max(-1, Math.min(1, bestDot))) * 180 / Math.PI;
        if (ang > maxAng) maxAng = ang;
      }
    }
    for (let k = 0; k < K; k++) {
      const A = out.M[k], B = ref.M[k];
      let best = Infinity;
      for (const r of cand) best = Math.min(best, Math.hypot(A[i * 3] - B[r * 3], A[i * 3 + 1] - B[r * 3 + 1], A[i * 3 + 2] - B[r * 3 + 2]));
      if (best > maxMorph) maxMorph = best;
    }
  }
  res.max_position_error = maxErr;
  res.mean_position_error = sumErr / nOut;
  if (withNormals) { res.max_normal_angle_deg = maxAng; if (zeroNormals) res.zero_length_normals = zeroNormals; }
  if (K) res.max_morph_position_error = maxMorph;
  return res;
}

function boxCornerDelta(a, b) {
  if (!a || !b) return Infinity;
  let d = 0;
  for (let k = 0; k < 3; k++) d = Math.max(d, Math.abs(a.min[k] - b.min[k]), Math.abs(a.max[k] - b.max[k]));
  return d;
}

function tricount(o) { return o._nondeg.length; }

// Pair output objects with reference objects: greedy on a cost that prefers
// equal triangle counts, close bounding boxes, and the same scene order.
function pairObjects(refObjs, outObjs, sceneDiag) {
  const cand = [];
  const scale = sceneDiag > 0 ? sceneDiag : 1;
  for (let i = 0; i < outObjs.length; i++) {
    for (let j = 0; j < refObjs.length; j++) {
      const o = outObjs[i], r = refObjs[j];
      if ((o.type === 'Points') !== (r.type === 'Points')) continue;
      const tr = tricount(r), to = tricount(o);
      const triCost = tr === to ? 0 : 1 + Math.abs(tr - to) / Math.max(1, tr);
      const cost = triCost + boxCornerDelta(r.bbox, o.bbox) / scale + 1e-6 * Math.abs(i - j) / Math.max(1, refObjs.length);
      cand.push([cost, i, j]);
    }
  }
  cand.sort((a, b) => a[0] - b[0]);
  const po = new Map(), pr = new Set();
  for (const [, i, j] of cand) {
    if (po.has(i) || pr.has(j)) continue;
    po.set(i, j); pr.add(j);
  }
  return po;
}

function arraysClose(a, b, eps) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (Math.abs(a[i] - b[i]) > eps) return false;
  return true;
}

function compare(refObjs, outObjs, opts) {
  const refBox = unionBox(refObjs);
  const D = diag(refBox);
  const tolAbs = opts.tolerance * D;
  const slack = 0.1 * tolAbs;
  const rel = (x) => (x === null || x === undefined ? null : D > 0 ? x / D : x === 0 ? 0 : null);
  const tri = (objs, f) => objs.reduce((s, o) => s + f(o), 0);
  const triObjsR = refObjs.filter((o) => o.type !== 'Points' && !o.type.startsWith('Line'));
  const triObjsO = outObjs.filter((o) => o.type !== 'Points' && !o.type.startsWith('Line'));

  const res = {
    reference_bbox: refBox,
    output_bbox: unionBox(outObjs),
    reference_diagonal: D,
    tolerance_rel: opts.tolerance,
    tolerance_abs: tolAbs,
    objects: { reference: refObjs.length, output: outObjs.length, equal: refObjs.length === outObjs.length },
    meshes: { reference: new Set(refObjs.map((o) => o.mesh)).size, output: new Set(outObjs.map((o) => o.mesh)).size },
    primitives: { reference: new Set(refObjs.map((o) => `${o.mesh}/${o.primitive}`)).size, output: new Set(outObjs.map((o) => `${o.mesh}/${o.primitive}`)).size },
    triangles: {
      reference: tri(refObjs, (o) => o.triangle_count),
      output: tri(outObjs, (o) => o.triangle_count),
      reference_nondegenerate: tri(refObjs, tricount),
      output_nondegenerate: tri(outObjs, tricount),
    },
    vertices: { reference: tri(refObjs, (o) => o.vertex_count), output: tri(outObjs, (o) => o.vertex_count) },
  };
  res.triangles.equal = res.triangles.reference_nondegenerate === res.triangles.output_nondegenerate;
  res.vertices.output_le_reference = res.vertices.output <= res.vertices.reference;
  res.bbox_max_corner_delta_rel = rel(boxCornerDelta(refBox, res.output_bbox));

  // scene level: all triangles / vertices in world space
  const gR = gather(triObjsR), gO = gather(triObjsO);
  Object.assign(res, matchTriangles(gR, gO, tolAbs));
  const ve = vertexError(gather(refObjs), gather(outObjs), slack);
  res.max_position_error = ve.max_position_error;
  res.max_position_error_rel = rel(ve.max_position_error);
  res.mean_position_error_rel = rel(ve.mean_position_error);
  res.max_normal_angle_deg = ve.max_normal_angle_deg;

  // per object (primitive instance)
  const pairs = pairObjects(refObjs, outObjs, D);
  res.per_object = [];
  for (let i = 0; i < outObjs.length; i++) {
    const o = outObjs[i];
    if (!pairs.has(i)) continue;
    const r = refObjs[pairs.get(i)];
    const rd = diag(r.bbox);
    const e = {
      output: i,
      reference: pairs.get(i),
      name: { reference: r.name, output: o.name },
      triangles: { reference: r.triangle_count, output: o.triangle_count, reference_nondegenerate: tricount(r), output_nondegenerate: tricount(o) },
      vertices: { reference: r.vertex_count, output: o.vertex_count },
    };
    e.triangles.equal = tricount(r) === tricount(o);
    e.vertices.output_le_reference = o.vertex_count <= r.vertex_count;
    const ra = Object.keys(r.attributes), oa = Object.keys(o.attributes);
    // informational: optimizers legitimately drop unused attributes (e.g. UVs without textures)
    e.attributes = { missing: ra.filter((a) => !oa.includes(a)), added: oa.filter((a) => !ra.includes(a)) };
    e.skin = { reference: r.skinned ? r.bone_count : null, output: o.skinned ? o.bone_count : null };
    e.skin.equal = e.skin.reference === e.skin.output;
    e.morph = {
      reference: r.morph_targets.length,
      output: o.morph_targets.length,
      names_equal: JSON.stringify(r.morph_targets) === JSON.stringify(o.morph_targets),
      influences_equal: arraysClose(r.morph_influences, o.morph_influences, 1e-3),
    };
    e.morph.equal = e.morph.reference === e.morph.output && e.morph.influences_equal;
    if (r.type !== 'Points' && !r.type.startsWith('Line')) Object.assign(e, matchTriangles(gather([r]), gather([o]), tolAbs));
    const pve = vertexError(gather([r]), gather([o]), slack);
    e.max_position_error = pve.max_position_error;
    e.max_position_error_rel = pve.max_position_error === null ? null : rd > 0 ? pve.max_position_error / rd : pve.max_position_error === 0 ? 0 : null;
    e.max_position_error_scene_rel = rel(pve.max_position_error);
    e.max_normal_angle_deg = pve.max_normal_angle_deg;
    if (pve.max_morph_position_error !== undefined) {
      e.morph.max_position_error = pve.max_morph_position_error;
      e.morph.max_position_error_scene_rel = rel(pve.max_morph_position_error);
    }
    res.per_object.push(e);
  }
  const pairedRef = new Set(pairs.values());
  res.unpaired_reference_objects = refObjs.map((_, j) => j).filter((j) => !pairedRef.has(j));
  res.unpaired_output_objects = outObjs.map((_, i) => i).filter((i) => !pairs.has(i));
  return res;
}

// ---------------------------------------------------------------------------
// Checks

function checksFor(entry, opts) {
  const c = {};
  const v = entry.validator;
  c.validator_no_errors = !!v && !v.error && v.numErrors === 0;
  if (entry.decoded_validator) {
    const d = entry.decoded_validator;
    c.meshopt_decodes = !d.error && d.decode_errors.length === 0;
    c.decoded_validator_no_errors = !d.error && d.numErrors === 0;
  }
  c.three_loads = !entry.three.error;
  const cmp = entry.compare;
  if (cmp && !cmp.error) {
    c.object_count_equal = cmp.objects.equal && cmp.unpaired_output_objects.length === 0 && cmp.unpaired_reference_objects.length === 0;
    c.triangle_counts_equal = cmp.triangles.equal && cmp.per_object.every((e) => e.triangles.equal);
    c.vertex_counts_not_increased = cmp.vertices.output_le_reference && cmp.per_object.every((e) => e.vertices.output_le_reference);
    c.same_triangles = cmp.unmatched_triangles === 0 && cmp.winding_flipped_triangles === 0 &&
      cmp.per_object.every((e) => !e.unmatched_triangles && !e.winding_flipped_triangles);
    c.position_error_within_tolerance = cmp.max_position_error_rel !== null && cmp.max_position_error_rel <= opts.tolerance;
    if (cmp.max_normal_angle_deg !== null) c.normal_error_within_tolerance = cmp.max_normal_angle_deg <= opts.normalTolerance &&
      cmp.per_object.every((e) => e.max_normal_angle_deg === null || e.max_normal_angle_deg <= opts.normalTolerance);
    c.skins_equal = cmp.per_object.every((e) => e.skin.equal);
    c.morph_targets_equal = cmp.per_object.every((e) => e.morph.equal);
    if (cmp.per_object.some((e) => e.morph.max_position_error !== undefined)) {
      c.morph_error_within_tolerance = cmp.per_object.every((e) => e.morph.max_position_error === undefined || e.morph.max_position_error_scene_rel <= opts.tolerance);
    }
  } else if (cmp && cmp.error) {
    c.compared = false;
  }
  return c;
}

// ---------------------------------------------------------------------------
// main

async function describe(asset, opts, withObjects) {
  const entry = { file: asset.file, size_bytes: asset.bytes.byteLength, container: asset.isGlb ? 'glb' : 'gltf' };
  if (asset.parseError) entry.parse_error = asset.parseError;
  else {
    entry.generator = (asset.json.asset && asset.json.asset.generator) || null;
    entry.extensions_used = asset.json.extensionsUsed || [];
    entry.extensions_required = asset.json.extensionsRequired || [];
  }
  entry.validator = await runValidator(asset.bytes, path.basename(asset.file), asset.dir, opts.maxMessages);

  entry.decoded_validator = null;
  if (!asset.parseError && meshoptExtensionsOf(asset.json).length) {
    try {
      const dec = await decodeMeshoptInPlace(asset);
      const rep = await runValidator(dec.bytes, path.basename(asset.file), asset.dir, opts.maxMessages);
      entry.decoded_validator = {
        extensions: dec.extensions,
        decoded_buffer_views: dec.decoded_buffer_views,
        modes: dec.modes,
        decode_errors: dec.decode_errors,
        layout: dec.layout,
        ...rep,
      };
    } catch (e) {
      entry.decoded_validator = { error: String(e && e.message ? e.message : e), decode_errors: [] };
    }
  }

  const loaded = await loadThree(asset);
  let objs = null;
  if (loaded.error) entry.three = { error: loaded.error, warnings: loaded.warnings };
  else {
    try {
      objs = extractObjects(loaded.gltf);
      entry.three = {
        scene: loaded.gltf.scene ? loaded.gltf.scenes.indexOf(loaded.gltf.scene) : null,
        objects_count: objs.length,
        triangles: objs.reduce((s, o) => s + o.triangle_count, 0),
        vertices: objs.reduce((s, o) => s + o.vertex_count, 0),
        bbox: unionBox(objs),
        animations: loaded.gltf.animations.length,
        warnings: loaded.warnings,
      };
      if (withObjects) entry.three.objects = objs;
    } catch (e) {
      entry.three = { error: `geometry extraction failed: ${e && e.stack ? e.stack : e}`, warnings: loaded.warnings };
      objs = null;
    }
  }
  return { entry, objs };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  // Read everything first: unreadable files are usage-level failures (exit 2).
  const refAsset = opts.reference ? openAsset(opts.reference) : null;
  const outAssets = opts.outputs.map(openAsset);

  const result = {
    tool: 'kiln-gltf-check',
    versions: versions(),
    options: { tolerance_rel: opts.tolerance, normal_tolerance_deg: opts.normalTolerance, pose: 'rest (node default transforms, default morph weights)' },
    reference: null,
    outputs: [],
    ok: true,
  };

  let refObjs = null;
  if (refAsset) {
    const { entry, objs } = await describe(refAsset, opts, opts.objects);
    result.reference = entry;
    refObjs = objs;
  }
  for (const asset of outAssets) {
    const { entry, objs } = await describe(asset, opts, opts.objects);
    if (refAsset) {
      if (refObjs && objs) {
        try { entry.compare = compare(refObjs, objs, opts); } catch (e) { entry.compare = { error: `compare failed: ${e && e.stack ? e.stack : e}` }; }
      } else entry.compare = { error: refObjs ? 'output could not be loaded with three.js' : 'reference could not be loaded with three.js' };
    } else entry.compare = null;
    entry.checks = checksFor(entry, opts);
    entry.failed = Object.entries(entry.checks).filter(([, v]) => v === false).map(([k]) => k);
    entry.ok = entry.failed.length === 0;
    if (!entry.ok) result.ok = false;
    result.outputs.push(entry);
  }
  const text = JSON.stringify(result, (k, v) => (typeof v === 'number' && !Number.isFinite(v) ? null : v), opts.pretty ? 2 : undefined);
  await new Promise((resolve) => process.stdout.write(text + '\n', resolve));
  process.exitCode = opts.strict && !result.ok ? 3 : 0;
}

main().catch((e) => {
  process.stderr.write(`check.mjs: internal error: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
