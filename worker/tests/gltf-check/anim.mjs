#!/usr/bin/env node
// Sample glTF animations with three.js' own machinery (GLTFLoader +
// AnimationMixer + Mesh/SkinnedMesh.getVertexPosition), so that Kiln's
// animation evaluator can be checked against three.js, and compressed
// animations can be judged by three.js.
//
//   node anim.mjs sample MODEL.(glb|gltf) TIMES.json OUT.bin [--nodes]
//   node anim.mjs compare SOURCE MODEL2 [--tolerance REL] [--rate-multiplier K]
//                 [--points vertices|nodes] [--shell REL] [--match index|name]
//
// Prints ONE JSON line on stdout (three.js' console output goes to stderr).
// Exit code 0 when it ran; 2 for usage errors and for anything that stops it
// (unreadable/unloadable file, bad TIMES.json, vertex counts that differ),
// with {"error": "..."} on stdout; 1 for an internal error. See README.md.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import * as THREE from 'three';

import { parseGltf } from './three-node.mjs';

// stdout carries exactly one JSON line: route three's console output to stderr.
for (const k of ['log', 'info', 'debug', 'warn']) console[k] = (...a) => console.error(...a);

const USAGE = `usage:
  node anim.mjs sample MODEL.(glb|gltf) TIMES.json OUT.bin [--nodes]
      TIMES.json: {"clips":[{"index":0,"times":[0,0.01,...]}, ...]}
      OUT.bin: float32 LE, clips (as listed) x times x canonical vertices x (x,y,z)
      --nodes: world matrices (16 floats, column-major) of every scene node instead
  node anim.mjs compare SOURCE MODEL2 [options]
      --tolerance REL        error tolerance relative to the source bbox diagonal (default 5e-5)
      --rate-multiplier K    samples per source key interval (default 4)
      --points vertices|nodes  compare mesh vertices (default) or node frames
      --shell REL            node frame half-size relative to the diagonal (default 0.015)
      --match index|name     pair nodes by glTF index (default) or unique name (--points nodes)
  -h, --help               this text`;

class Fatal extends Error {}

function fail(msg) { throw new Fatal(msg); }

function usage(msg) {
  process.stdout.write(JSON.stringify({ error: `usage: ${msg}` }) + '\n');
  process.stderr.write(`anim.mjs: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

// ---------------------------------------------------------------------------
// A loaded model and its rest pose

// GLTFLoader (three 0.187) replaces parser.associations, after each scene has
// loaded, by a copy reduced to that scene's objects; with several scenes the
// displayed scene's entries can be lost (e.g. scenes [A, B], scene = 0). This
// plugin keeps one map with every entry instead: lookups here are per object,
// so entries for objects of other scenes do no harm.
function keepAllAssociations(parser) {
  const all = parser.associations;
  Object.defineProperty(parser, 'associations', {
    configurable: true,
    enumerable: true,
    get: () => all,
    set: (reduced) => { for (const [k, v] of reduced) if (!all.has(k)) all.set(k, v); },
  });
  return { name: 'KILN_anim_keep_associations' };
}

class Model {
  static async load(file) {
    let bytes;
    try {
      bytes = new Uint8Array(fs.readFileSync(file));
    } catch (e) {
      fail(`cannot read ${file}: ${e.message}`);
    }
    let gltf;
    try {
      gltf = await parseGltf(bytes, path.dirname(path.resolve(file)), [keepAllAssociations]);
    } catch (e) {
      fail(`three.js cannot load ${file}: ${e && e.message ? e.message : e}`);
    }
    return new Model(file, gltf);
  }

  constructor(file, gltf) {
    this.file = file;
    this.gltf = gltf;
    const json = gltf.parser.json;
    this.json = json;
    this.nodeCount = (json.nodes || []).length;
    this.sceneIndex = json.scene !== undefined ? json.scene : 0;
    this.scene = gltf.scene;
    if (!this.scene || !json.scenes || !json.scenes[this.sceneIndex]) fail(`${file}: no scene to display`);

    // glTF node indices of the displayed scene (depth-first over the JSON), ascending.
    const inScene = new Set();
    const stack = [...(json.scenes[this.sceneIndex].nodes || [])];
    while (stack.length) {
      const n = stack.pop();
      if (inScene.has(n)) continue;
      inScene.add(n);
      for (const c of json.nodes[n].children || []) stack.push(c);
    }
    this.sceneNodes = [...inScene].sort((a, b) => a - b);

    // node index -> Object3D, and (node, primitive) -> Mesh, from
    // parser.associations. In three 0.187 the associations map holds, for
    //   a node object:                          { nodes: n }  (+ mesh fields, below)
    //   a single-primitive mesh node:           the Mesh IS the node object:
    //                                           { meshes: m, primitives: 0, nodes: n }
    //   a multi-primitive mesh node:            the node is a Group { meshes: m, nodes: n }
    //                                           with one child Mesh per primitive
    //                                           { meshes: m, primitives: p }
    //   a joint (Bone) or camera node with a mesh: the node object { nodes: n }
    //                                           with the mesh (or Group) as a child.
    // So a primitive belongs to its nearest ancestor-or-self that has `nodes`.
    const assoc = gltf.parser.associations;
    this.nodeObjects = new Map();
    const primObjects = new Map();
    this.scene.traverse((obj) => {
      const a = assoc.get(obj);
      if (!a) return;
      if (a.nodes !== undefined && !this.nodeObjects.has(a.nodes)) this.nodeObjects.set(a.nodes, obj);
      if (a.meshes !== undefined && a.primitives !== undefined && obj.geometry) {
        let owner = obj;
        while (owner && !(assoc.get(owner) && assoc.get(owner).nodes !== undefined)) owner = owner.parent;
        if (owner) primObjects.set(`${assoc.get(owner).nodes}/${a.primitives}`, obj);
      }
    });
    for (const n of this.sceneNodes) {
      if (!this.nodeObjects.has(n)) fail(`${file}: glTF node ${n} is in scene ${this.sceneIndex} but three.js has no object for it`);
    }

    // Canonical vertex order: nodes ascending, primitives in order, vertices in order.
    this.prims = [];
    this.vertexCount = 0;
    for (const n of this.sceneNodes) {
      const m = json.nodes[n].mesh;
      if (m === undefined) continue;
      const primCount = json.meshes[m].primitives.length;
      for (let p = 0; p < primCount; p++) {
        const obj = primObjects.get(`${n}/${p}`);
        if (!obj) fail(`${file}: node ${n} mesh ${m} primitive ${p} has no three.js object`);
        const pos = obj.geometry.attributes.position;
        const count = pos ? pos.count : 0;
        this.prims.push({ node: n, mesh: m, primitive: p, count, object: obj });
        this.vertexCount += count;
      }
    }

    // three's clips are gltf.animations[i] <-> glTF animations[i] (GLTFLoader
    // loads them with getDependencies('animation'), in order); check the names.
    this.clips = gltf.animations;
    const anims = json.animations || [];
    if (this.clips.length !== anims.length) fail(`${file}: three.js made ${this.clips.length} clips from ${anims.length} animations`);
    this.clips.forEach((c, i) => {
      const want = anims[i].name ? anims[i].name : `animation_${i}`;
      if (c.name !== want) fail(`${file}: clip ${i} is named ${JSON.stringify(c.name)}, animation ${i} ${JSON.stringify(want)}`);
    });

    // Rest pose: every object's TRS and morph weights as loaded.
    this.rest = [];
    this.scene.traverse((o) => {
      this.rest.push([o, o.position.clone(), o.quaternion.clone(), o.scale.clone(), o.morphTargetInfluences ? o.morphTargetInfluences.slice() : null]);
    });
    this.mixer = null;
    this.action = null;
    this.scene.updateMatrixWorld(true);
  }

  restore() {
    for (const [o, p, q, s, w] of this.rest) {
      o.position.copy(p);
      o.quaternion.copy(q);
      o.scale.copy(s);
      if (w) for (let i = 0; i < w.length; i++) o.morphTargetInfluences[i] = w[i];
    }
    this.scene.updateMatrixWorld(true);
  }

  // World-space box of the scene as it is now: Box3.setFromObject with
  // precise = true takes every vertex through getVertexPosition + matrixWorld
  // (current morph weights and skinning). The default, non-precise box would
  // transform each geometry's box, which spans every morph target.
  box() {
    return new THREE.Box3().setFromObject(this.scene, true);
  }

  // Start clip i from the rest pose: a fresh AnimationMixer (so no binding keeps
  // state from another clip), the clip's action alone at weight 1, played once
  // and clamped at its end (LoopRepeat would wrap t == duration to 0).
  beginClip(i) {
    this.endClip();
    const mixer = new THREE.AnimationMixer(this.scene);
    const action = mixer.clipAction(this.clips[i]);
    action.setLoop(THREE.LoopOnce, 1);
    action.clampWhenFinished = true;
    action.play();
    this.mixer = mixer;
    this.action = action;
  }

  endClip() {
    if (!this.mixer) return;
    this.mixer.stopAllAction();
    this.mixer.uncacheRoot(this.scene);
    this.mixer = null;
    this.action = null;
    this.restore();
  }

  // Pose the current clip at time t (seconds) and update world matrices.
  poseAt(t) {
    // setTime(t) rewinds every action to 0 and advances it by t. An action
    // that reached its end in an earlier call is paused (clampWhenFinished),
    // and a paused action does not advance at all; reset() un-pauses it.
    this.action.reset();
    this.mixer.setTime(t);
    const d = this.action.getClip().duration;
    const expect = t <= 0 ? 0 : t >= d ? d : t;
    if (this.action.time !== expect) throw new Error(`AnimationMixer.setTime(${t}) left the action at ${this.action.time}`);
    // World matrices (SkinnedMesh.getVertexPosition reads the bones'
    // matrixWorld and boneInverses directly, so skeleton.update() is not needed).
    this.scene.updateMatrixWorld(true);
  }

  // World positions of the vertices of prims (default: all, in canonical order)
  // into out (x,y,z each). getVertexPosition applies morph targets and, for a
  // SkinnedMesh, skinning; the result is in the mesh's local space, so
  // matrixWorld takes it to world space.
  writeVertices(out, prims = this.prims) {
    const v = new THREE.Vector3();
    let k = 0;
    for (const { object, count } of prims) {
      const get = object.getVertexPosition || THREE.Mesh.prototype.getVertexPosition; // Points/Lines
      const mw = object.matrixWorld;
      for (let i = 0; i < count; i++) {
        get.call(object, i, v).applyMatrix4(mw);
        out[k++] = v.x; out[k++] = v.y; out[k++] = v.z;
      }
    }
    return k;
  }

  // matrixWorld (column-major, as three stores it) of each node in `nodes`.
  writeNodeMatrices(nodes, out) {
    let k = 0;
    for (const n of nodes) {
      const e = this.nodeObjects.get(n).matrixWorld.elements;
      for (let j = 0; j < 16; j++) out[k++] = e[j];
    }
    return k;
  }

  // Lengths of the world-space x, y, z axes (columns of matrixWorld) of each
  // node in `nodes`, as the scene is now (3 per node; 1 where an axis is 0).
  axisLengths(nodes) {
    const len = new Float64Array(nodes.length * 3);
    nodes.forEach((n, j) => {
      const e = this.nodeObjects.get(n).matrixWorld.elements;
      for (let axis = 0; axis < 3; axis++) len[j * 3 + axis] = Math.hypot(e[axis * 4], e[axis * 4 + 1], e[axis * 4 + 2]) || 1;
    });
    return len;
  }

  // 7 points per node: world origin, then origin -/+ shell along the node's
  // local x, y, z axes, transformed by matrixWorld. restLen (from axisLengths
  // on the SOURCE at rest) divides the local offset, so that the points sit
  // `shell` model units from the origin in the source's rest pose whatever the
  // node's world scale (bones of a rig scaled by 100 would otherwise amplify
  // rotation errors 100 times); scale changes still move them.
  writeNodeFrames(nodes, shell, restLen, out) {
    let k = 0;
    nodes.forEach((n, j) => {
      const e = this.nodeObjects.get(n).matrixWorld.elements;
      const ox = e[12], oy = e[13], oz = e[14];
      out[k++] = ox; out[k++] = oy; out[k++] = oz;
      for (let axis = 0; axis < 3; axis++) {
        const c = axis * 4;
        const h = shell / restLen[j * 3 + axis];
        for (const s of [-h, h]) {
          out[k++] = ox + s * e[c]; out[k++] = oy + s * e[c + 1]; out[k++] = oz + s * e[c + 2];
        }
      }
    });
    return k;
  }

  nodeName(n) {
    return this.json.nodes[n].name;
  }
}

function clipInfo(model, i, samples) {
  const c = model.clips[i];
  return { index: i, name: c.name, duration: c.duration, samples };
}

// ---------------------------------------------------------------------------
// sample

function readTimes(file, model) {
  let spec;
  try {
    spec = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    fail(`cannot read ${file}: ${e.message}`);
  }
  if (!spec || !Array.isArray(spec.clips)) fail(`${file}: expected {"clips":[{"index":..,"times":[..]}, ..]}`);
  return spec.clips.map((c, k) => {
    if (!c || !Number.isInteger(c.index) || c.index < 0 || c.index >= model.clips.length) {
      fail(`${file}: clips[${k}].index must be an animation index below ${model.clips.length}`);
    }
    if (!Array.isArray(c.times) || !c.times.every((t) => typeof t === 'number' && Number.isFinite(t))) {
      fail(`${file}: clips[${k}].times must be an array of finite numbers`);
    }
    return { index: c.index, times: c.times };
  });
}

async function cmdSample(args) {
  let nodesMode = false;
  const pos = [];
  for (const a of args) {
    if (a === '--nodes') nodesMode = true;
    else if (a.startsWith('-')) usage(`unknown option ${a}`);
    else pos.push(a);
  }
  if (pos.length !== 3) usage('sample needs MODEL TIMES.json OUT.bin');
  const [modelFile, timesFile, outFile] = pos;
  const model = await Model.load(modelFile);
  const clips = readTimes(timesFile, model);

  const nodes = model.sceneNodes;
  const perSample = nodesMode ? nodes.length * 16 : model.vertexCount * 3;
  const buf = new Float32Array(perSample); // float32 little-endian (checked in main)
  const bytes = new Uint8Array(buf.buffer);
  let fd;
  try {
    fd = fs.openSync(outFile, 'w');
  } catch (e) {
    fail(`cannot write ${outFile}: ${e.message}`);
  }
  try {
    for (const { index, times } of clips) {
      model.beginClip(index);
      for (const t of times) {
        model.poseAt(t);
        if (nodesMode) model.writeNodeMatrices(nodes, buf);
        else model.writeVertices(buf);
        fs.writeSync(fd, bytes);
      }
    }
    model.endClip();
  } finally {
    fs.closeSync(fd);
  }

  const result = nodesMode ? { nodes } : { vertices: model.vertexCount };
  result.clips = clips.map(({ index, times }) => clipInfo(model, index, times.length));
  if (!nodesMode) result.order = model.prims.map(({ node, mesh, primitive, count }) => ({ node, mesh, primitive, count }));
  return result;
}

// ---------------------------------------------------------------------------
// compare

// Sample times for a source clip: a grid of step 1 / (K x key rate) from 0 to
// the clip's duration, plus the exact endpoint and every key time in [0, duration].
// Key rate = max over tracks with >= 2 keys of (keys - 1) / (last - first).
function sampleTimes(clip, multiplier) {
  const d = clip.duration;
  let rate = 0;
  const keys = [];
  for (const tr of clip.tracks) {
    const ts = tr.times;
    for (const t of ts) if (t >= 0 && t <= d) keys.push(t);
    if (ts.length < 2) continue;
    const span = ts[ts.length - 1] - ts[0];
    if (span > 0) rate = Math.max(rate, (ts.length - 1) / span);
  }
  const times = [0, d];
  if (rate > 0) {
    const step = 1 / (multiplier * rate);
    for (let k = 1; k * step < d; k++) times.push(k * step);
    times.push(...keys);
  }
  times.sort((a, b) => a - b);
  return times.filter((t, i) => i === 0 || t !== times[i - 1]);
}

// Running error statistics: max, mean, share within a tolerance, and p99 from a
// log histogram of relative errors (1000 bins per decade, i.e. p99 is exact to
// 0.23 %; reported as the bin's upper edge, at most the max).
class ErrorStats {
  constructor(scale, tolAbs) {
    this.scale = scale;
    this.tolAbs = tolAbs;
    this.n = 0;
    this.sum = 0;
    this.max = 0;
    this.within = 0;
    this.nonFinite = 0; // NaN / infinite distances: counted apart, never within
    this.lo = -16; // log10 of the smallest binned relative error
    this.perDecade = 1000;
    this.hist = new Float64Array((2 - this.lo) * this.perDecade + 2); // [0]: below 1e-16, last: above 1e2
  }

  add(d) {
    this.n++;
    if (!Number.isFinite(d)) { this.nonFinite++; return; }
    this.sum += d;
    if (d > this.max) this.max = d;
    if (d <= this.tolAbs) this.within++;
    const r = d / this.scale;
    let b = 0;
    if (r >= 1e-16) b = Math.min(this.hist.length - 1, 1 + Math.floor((Math.log10(r) - this.lo) * this.perDecade));
    this.hist[b]++;
  }

  // q-quantile of the finite errors, relative to scale.
  quantileRel(q) {
    const finite = this.n - this.nonFinite;
    if (finite === 0) return 0;
    const need = Math.ceil(q * finite);
    let acc = 0;
    for (let b = 0; b < this.hist.length; b++) {
      acc += this.hist[b];
      if (acc >= need) {
        const upper = b === 0 ? 1e-16 : 10 ** (this.lo + b / this.perDecade);
        return Math.min(upper, this.max / this.scale);
      }
    }
    return this.max / this.scale;
  }
}

function parseCompareArgs(args) {
  const o = { files: [], tolerance: 5e-5, rateMultiplier: 4, points: 'vertices', shell: 0.015, match: 'index' };
  const num = (name, v, positive) => {
    const x = Number(v);
    if (v === undefined || !Number.isFinite(x) || x < 0 || (positive && x === 0)) usage(`${name} needs a ${positive ? 'positive' : 'non-negative'} number`);
    return x;
  };
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--tolerance') o.tolerance = num(a, args[++i], false);
    else if (a === '--rate-multiplier') o.rateMultiplier = num(a, args[++i], true);
    else if (a === '--shell') o.shell = num(a, args[++i], false);
    else if (a === '--points') { o.points = args[++i]; if (o.points !== 'vertices' && o.points !== 'nodes') usage('--points is vertices or nodes'); }
    else if (a === '--match') { o.match = args[++i]; if (o.match !== 'index' && o.match !== 'name') usage('--match is index or name'); }
    else if (a.startsWith('-')) usage(`unknown option ${a}`);
    else o.files.push(a);
  }
  if (o.files.length !== 2) usage('compare needs SOURCE and MODEL2');
  return o;
}

// Pairs [sourceNode, outputNode] to compare in --points nodes mode.
function pairNodes(src, out, match) {
  const pairs = [];
  if (match === 'index') {
    const inOut = new Set(out.sceneNodes);
    for (const n of src.sceneNodes) if (n < src.nodeCount && inOut.has(n)) pairs.push([n, n]);
    return pairs;
  }
  // by name: only names that occur once among the scene nodes of each file
  const unique = (m) => {
    const seen = new Map();
    for (const n of m.sceneNodes) {
      const name = m.nodeName(n);
      if (name === undefined) continue;
      seen.set(name, seen.has(name) ? -1 : n);
    }
    return seen;
  };
  const a = unique(src), b = unique(out);
  for (const n of src.sceneNodes) {
    const name = src.nodeName(n);
    if (name !== undefined && a.get(name) === n && b.has(name) && b.get(name) >= 0) pairs.push([n, b.get(name)]);
  }
  return pairs;
}

async function cmdCompare(args) {
  const o = parseCompareArgs(args);
  const src = await Model.load(o.files[0]);
  const out = await Model.load(o.files[1]);

  // Diagonal of the source's rest pose, before any animation.
  const box = src.box();
  const diagonal = box.isEmpty() ? 0 : box.min.distanceTo(box.max);
  const scale = diagonal > 0 ? diagonal : 1;
  const tolAbs = o.tolerance * diagonal;

  // Corresponding points: fill(model, array) writes them in the same order for both.
  let count, fillSrc, fillOut;
  const extra = {};
  if (o.points === 'vertices') {
    // Output nodes beyond the source's node count (appended by a compressor) are ignored.
    const outPrims = out.prims.filter((p) => p.node < src.nodeCount);
    const key = (p) => `${p.node}/${p.primitive}`;
    const a = src.prims.map((p) => `${key(p)}:${p.count}`).join(' ');
    const b = outPrims.map((p) => `${key(p)}:${p.count}`).join(' ');
    if (a !== b) fail(`vertex counts per (node/primitive) differ: source [${a}] vs output [${b}] (--points nodes compares node frames instead)`);
    if (outPrims.length !== out.prims.length) {
      const skip = out.prims.length - outPrims.length;
      extra.note = `${skip} output primitive(s) on nodes >= ${src.nodeCount} ignored`;
    }
    count = src.vertexCount;
    fillSrc = (arr) => src.writeVertices(arr);
    fillOut = (arr) => out.writeVertices(arr, outPrims);
  } else {
    const pairs = pairNodes(src, out, o.match);
    if (pairs.length === 0) fail(`no node to compare (--match ${o.match})`);
    const shell = o.shell * diagonal;
    count = pairs.length * 7;
    const sn = pairs.map((p) => p[0]), on = pairs.map((p) => p[1]);
    const restLen = src.axisLengths(sn); // the source is at rest here
    fillSrc = (arr) => src.writeNodeFrames(sn, shell, restLen, arr);
    fillOut = (arr) => out.writeNodeFrames(on, shell, restLen, arr);
    Object.assign(extra, { shell, match: o.match, nodes_compared: pairs.length, nodes_source: src.sceneNodes.length, nodes_output: out.sceneNodes.length });
  }

  const A = new Float64Array(count * 3), B = new Float64Array(count * 3);
  const clips = [];
  let ok = true, overall = 0;
  for (let ci = 0; ci < src.clips.length; ci++) {
    const sc = src.clips[ci];
    if (ci >= out.clips.length) {
      clips.push({ index: ci, name: sc.name, error: 'no such clip in the output', duration_source: sc.duration, duration_output: null });
      ok = false;
      continue;
    }
    const oc = out.clips[ci];
    const times = sampleTimes(sc, o.rateMultiplier);
    const st = new ErrorStats(scale, tolAbs);
    src.beginClip(ci);
    out.beginClip(ci);
    for (const t of times) {
      src.poseAt(t);
      out.poseAt(t);
      fillSrc(A);
      fillOut(B);
      for (let k = 0; k < A.length; k += 3) st.add(Math.hypot(A[k] - B[k], A[k + 1] - B[k + 1], A[k + 2] - B[k + 2]));
    }
    src.endClip();
    out.endClip();
    const durationChanged = Math.abs(sc.duration - oc.duration) > 1e-6;
    const rec = {
      index: ci,
      name: sc.name,
      name_output: oc.name,
      samples: times.length,
      points: count,
      max: st.max,
      p99: st.quantileRel(0.99) * scale,
      mean: st.n > st.nonFinite ? st.sum / (st.n - st.nonFinite) : 0,
      max_rel: st.max / scale,
      p99_rel: st.quantileRel(0.99),
      mean_rel: st.n > st.nonFinite ? st.sum / (st.n - st.nonFinite) / scale : 0,
      within_share: st.n ? st.within / st.n : 1,
      non_finite: st.nonFinite,
      duration_source: sc.duration,
      duration_output: oc.duration,
      duration_changed: durationChanged,
    };
    clips.push(rec);
    overall = Math.max(overall, rec.max_rel);
    if (durationChanged || rec.max_rel > o.tolerance || st.nonFinite) ok = false;
  }
  return {
    diagonal,
    tolerance: o.tolerance,
    points: o.points,
    rate_multiplier: o.rateMultiplier,
    ...extra,
    clips_source: src.clips.length,
    clips_output: out.clips.length,
    clips,
    max_rel: overall,
    ok,
  };
}

// ---------------------------------------------------------------------------
// main

async function main() {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === undefined) usage('no command given');
  if (cmd === '-h' || cmd === '--help' || args.includes('-h') || args.includes('--help')) {
    process.stdout.write(USAGE + '\n');
    process.exit(0);
  }
  if (os.endianness() !== 'LE') throw new Error('OUT.bin is written from a Float32Array: needs a little-endian machine');
  let result;
  try {
    if (cmd === 'sample') result = await cmdSample(args);
    else if (cmd === 'compare') result = await cmdCompare(args);
    else usage(`unknown command ${cmd}`);
  } catch (e) {
    if (!(e instanceof Fatal)) throw e;
    process.stdout.write(JSON.stringify({ error: e.message }) + '\n');
    process.exit(2);
  }
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().catch((e) => {
  process.stderr.write(`anim.mjs: internal error: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
