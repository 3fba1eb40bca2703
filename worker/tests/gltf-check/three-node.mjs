// Loading glTF / GLB into three.js under Node (no DOM, no fetch), shared by
// check.mjs and anim.mjs.
//
//  - buffers with a uri (data URI or a file next to the asset) are read here,
//    so three's FileLoader (fetch + DOM events) is never used;
//  - every texture is stubbed with an empty THREE.Texture (images are never decoded);
//  - EXT_meshopt_compression and KHR_meshopt_compression are decoded by the
//    meshopt decoder that three ships (GLTFLoader registers both extensions);
//  - KHR_mesh_quantization, sparse accessors, morph targets, skins and
//    animations are GLTFLoader's own code.

import fs from 'node:fs';
import path from 'node:path';

import * as THREE from 'three';
import { GLTFLoader } from 'three/examples/jsm/loaders/GLTFLoader.js';
import { MeshoptDecoder as ThreeMeshoptDecoder } from 'three/examples/jsm/libs/meshopt_decoder.module.js';

export function decodeDataUri(uri) {
  const m = /^data:([^;,]*)(;base64)?,(.*)$/s.exec(uri);
  if (!m) throw new Error('malformed data URI');
  return m[2] ? new Uint8Array(Buffer.from(m[3], 'base64')) : new Uint8Array(Buffer.from(decodeURIComponent(m[3]), 'latin1'));
}

// Bytes of a data URI, or of a file named by a (percent-encoded) URI relative to dir.
export function readExternal(dir, uri) {
  if (uri.startsWith('data:')) return decodeDataUri(uri);
  let rel = uri;
  try { rel = decodeURIComponent(uri); } catch { /* keep as is */ }
  return new Uint8Array(fs.readFileSync(path.resolve(dir, rel)));
}

// A GLTFLoader plugin (registered per load) that
//  - stubs every texture with an empty THREE.Texture (no image decoding in Node), and
//  - reads buffers with a uri (data URI or file relative to the asset) itself,
//    so that three's FileLoader (fetch + DOM events) is never used.
export function nodeIoPlugin(dir) {
  return (parser) => {
    const getDependency = parser.getDependency.bind(parser);
    parser.getDependency = function (type, index) {
      if (type === 'texture') {
        const t = new THREE.Texture();
        t.name = `stub_texture_${index}`;
        return Promise.resolve(t);
      }
      return getDependency(type, index);
    };
    const loadBuffer = parser.loadBuffer.bind(parser);
    parser.loadBuffer = function (index) {
      const def = this.json.buffers[index];
      if (def && def.uri !== undefined) {
        return Promise.resolve().then(() => {
          const u8 = readExternal(dir, def.uri);
          return u8.buffer.slice(u8.byteOffset, u8.byteOffset + u8.byteLength);
        });
      }
      return loadBuffer(index);
    };
    return { name: 'KILN_check_node_io' };
  };
}

// Run fn with console.* captured (deduplicated, at most 50 lines); returns { value, lines }.
export async function withCapturedConsole(fn) {
  const saved = { log: console.log, info: console.info, warn: console.warn, error: console.error, debug: console.debug };
  const lines = [];
  const capture = (...args) => { const s = args.map((a) => (a instanceof Error ? a.message : typeof a === 'string' ? a : (() => { try { return JSON.stringify(a); } catch { return String(a); } })())).join(' '); if (!lines.includes(s) && lines.length < 50) lines.push(s); };
  console.log = console.info = console.warn = console.error = console.debug = capture;
  try {
    return { value: await fn(), lines };
  } finally {
    Object.assign(console, saved);
  }
}

// Parse a .glb / .gltf held in memory (bytes: Uint8Array) with GLTFLoader;
// dir is where relative URIs are resolved; plugins: more GLTFLoader plugin
// callbacks. Resolves to GLTFLoader's result ({ scene, scenes, animations,
// parser, ... }); rejects on a load error.
export function parseGltf(bytes, dir, plugins = []) {
  const loader = new GLTFLoader();
  loader.setMeshoptDecoder(ThreeMeshoptDecoder);
  loader.register(nodeIoPlugin(dir));
  for (const p of plugins) loader.register(p);
  return loader.parseAsync(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength), '');
}
