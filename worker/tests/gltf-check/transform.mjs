#!/usr/bin/env node
// glTF-Transform as a benchmark anchor: resample() + meshopt() on one model.
//
//   node transform.mjs IN.(glb|gltf) OUT.glb [--no-resample] [--no-meshopt]
//
// Reads IN with NodeIO (every extension glTF-Transform knows, meshoptimizer's
// decoder/encoder registered), applies
//   resample()                                   keyframe resampling, default tolerance 1e-4
//   meshopt({encoder: MeshoptEncoder, level: 'high'})
//                                                reorder + quantize + EXT_meshopt_compression
// and writes OUT as GLB. Textures are left as they are.
//
// Prints ONE JSON line on stdout: {"ok":true,"ms":...,...} (exit 0) or
// {"ok":false,"error":"..."} (exit 2). glTF-Transform's log goes to stderr.
// `ms` = wall time of the transforms plus the GLB encoding (meshopt()
// only marks the document; EXT_meshopt_compression encodes while writing),
// without reading/parsing IN and without the file write. See README.md.

import fs from 'node:fs/promises';
import { performance } from 'node:perf_hooks';

import { Logger, NodeIO } from '@gltf-transform/core';
import { ALL_EXTENSIONS } from '@gltf-transform/extensions';
import { meshopt, resample, unpartition } from '@gltf-transform/functions';
import { MeshoptDecoder, MeshoptEncoder } from 'meshoptimizer';

// stdout carries exactly one JSON line: glTF-Transform logs with console.info.
for (const k of ['log', 'info', 'debug', 'warn']) console[k] = (...a) => console.error(...a);

const USAGE = 'usage: node transform.mjs IN.(glb|gltf) OUT.glb [--no-resample] [--no-meshopt]';

function finish(obj, code) {
  process.stdout.write(JSON.stringify(obj) + '\n');
  process.exitCode = code;
}

async function main(argv) {
  const files = [];
  let doResample = true;
  let doMeshopt = true;
  for (const a of argv) {
    if (a === '--no-resample') doResample = false;
    else if (a === '--no-meshopt') doMeshopt = false;
    else if (a === '-h' || a === '--help') {
      process.stderr.write(USAGE + '\n');
      return finish({ ok: false, error: USAGE }, 2);
    } else if (a.startsWith('--')) return finish({ ok: false, error: `unknown option ${a}; ${USAGE}` }, 2);
    else files.push(a);
  }
  if (files.length !== 2) return finish({ ok: false, error: USAGE }, 2);
  const [input, output] = files;

  await Promise.all([MeshoptDecoder.ready, MeshoptEncoder.ready]);
  const io = new NodeIO()
    .setLogger(new Logger(Logger.Verbosity.WARN))
    .registerExtensions(ALL_EXTENSIONS)
    .registerDependencies({
      'meshopt.decoder': MeshoptDecoder,
      'meshopt.encoder': MeshoptEncoder,
    });

  const t0 = performance.now();
  const document = await io.read(input);
  const t1 = performance.now();
  const transforms = [];
  if (doResample) transforms.push(resample());
  if (doMeshopt) transforms.push(meshopt({ encoder: MeshoptEncoder, level: 'high' }));
  // A GLB holds one buffer: files with several (data URIs, split .bin) are merged first.
  transforms.push(unpartition());
  if (transforms.length) await document.transform(...transforms);
  const t2 = performance.now();
  const glb = await io.writeBinary(document);
  const t3 = performance.now();
  await fs.writeFile(output, glb);

  const r = (x) => Math.round(x * 1000) / 1000;
  finish({
    ok: true,
    ms: r(t3 - t1),
    transform_ms: r(t2 - t1),
    encode_ms: r(t3 - t2),
    read_ms: r(t1 - t0),
    resample: doResample,
    meshopt: doMeshopt,
    bytes: glb.byteLength,
  }, 0);
}

main(process.argv.slice(2)).catch((e) => {
  finish({ ok: false, error: String(e && e.message ? e.message : e) }, 2);
  if (e && e.stack) process.stderr.write(e.stack + '\n');
});
