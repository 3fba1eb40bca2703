#!/usr/bin/env node
// Decode KTX2 textures in headless Chromium as a three.js game does — three.js' KTX2Loader,
// the Basis transcoder three.js ships (in its workers), uploaded as the GPU format the loader
// picks — render each at its base level 1:1 (nearest filtering) and compare the pixels with
// the source image's (decoded by the browser), pair by pair.
//
//   node ktx2-decode.mjs [--format astc|bc7|etc2] SOURCE1 KTX2_1 [SOURCE2 KTX2_2 ...]
//   node ktx2-decode.mjs --gltf MODEL.glb
//
// --gltf loads a whole model variant with three.js' GLTFLoader (KTX2Loader and meshoptimizer's
// decoder set) and prints {"textures": [{"slot", "compressed", "format", "mipmaps", "width",
// "color_space"}], "meshes", "animations"}.
//
// --format forces the device format (what the loader would pick on a phone with only ETC2,
// say) by editing the loader's detected support; default: what this Chromium supports.
// Prints ONE JSON line: {"pairs": [{"source", "ktx2", "width", "height", "format" (the GPU
// format three.js used), "mipmaps", "color_space", "psnr", "psnr_swapped" (a deliberately
// wrong control: the source with red and blue swapped), "max_diff"}]}; {"error": ...} and
// exit 2 when something does not load.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { launchChromium } from './browser.mjs';
import { startStaticServer } from './static-server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
let format = null;
let gltf = null;
if (args[0] === '--gltf' && args.length === 2) {
  gltf = args[1];
  args.splice(0, 2);
} else if (args[0] === '--format') {
  format = args[1];
  args.splice(0, 2);
}
if ((!gltf && args.length === 0) || args.length % 2 !== 0 || (format && !['astc', 'bc7', 'etc2'].includes(format))) {
  process.stderr.write('usage: node ktx2-decode.mjs [--format astc|bc7|etc2] SOURCE1 KTX2_1 [...]\n');
  process.exit(2);
}

const mounts = { '/tool/': here };
if (gltf) mounts['/model/'] = path.dirname(path.resolve(gltf));
const urls = args.map((f, i) => {
  mounts[`/f${i}/`] = path.dirname(path.resolve(f));
  return `/f${i}/${encodeURIComponent(path.basename(f))}`;
});
const page = `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">
<script type="importmap">{"imports": {"three": "/tool/node_modules/three/build/three.module.js",
"three/addons/": "/tool/node_modules/three/examples/jsm/"}}</script>`;
const pageDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-ktx2-decode-'));
fs.writeFileSync(path.join(pageDir, 'page.html'), page);
mounts['/page/'] = pageDir;
const server = await startStaticServer(mounts);
const browser = await launchChromium();
try {
  const tab = await browser.newPage();
  const errors = [];
  tab.on('pageerror', (e) => errors.push(String(e)));
  await tab.goto(new URL('/page/page.html', server.url).href);
  const result = gltf ? await tab.evaluate(async (url) => {
    const THREE = await import('three');
    const { GLTFLoader } = await import('three/addons/loaders/GLTFLoader.js');
    const { KTX2Loader } = await import('three/addons/loaders/KTX2Loader.js');
    const { MeshoptDecoder } = await import('three/addons/libs/meshopt_decoder.module.js');
    const renderer = new THREE.WebGLRenderer();
    const ktx2 = new KTX2Loader().setTranscoderPath('/tool/node_modules/three/examples/jsm/libs/basis/').detectSupport(renderer);
    const model = await new GLTFLoader().setMeshoptDecoder(MeshoptDecoder).setKTX2Loader(ktx2).loadAsync(url);
    const textures = [];
    let meshes = 0;
    model.scene.traverse((o) => {
      if (!o.isMesh) return;
      meshes++;
      for (const slot of ['map', 'normalMap', 'roughnessMap', 'metalnessMap', 'aoMap', 'emissiveMap']) {
        const t = o.material[slot];
        if (t) textures.push({ slot, compressed: !!t.isCompressedTexture, format: t.format, mipmaps: t.mipmaps?.length ?? 0, width: t.image?.width, color_space: t.colorSpace });
      }
    });
    ktx2.dispose();
    return { textures, meshes, animations: model.animations.length };
  }, `/model/${encodeURIComponent(path.basename(gltf))}`) : await tab.evaluate(async ({ urls, format }) => {
    const THREE = await import('three');
    const { KTX2Loader } = await import('three/addons/loaders/KTX2Loader.js');
    const renderer = new THREE.WebGLRenderer({ antialias: false, preserveDrawingBuffer: true });
    const loader = new KTX2Loader().setTranscoderPath('/tool/node_modules/three/examples/jsm/libs/basis/').detectSupport(renderer);
    if (format) {
      const c = loader.workerConfig;
      c.astcSupported = format === 'astc';
      c.bptcSupported = format === 'bc7';
      c.etc2Supported = format === 'etc2';
      c.etc1Supported = format === 'etc2';
      c.dxtSupported = false;
      c.pvrtcSupported = false;
    }
    const names = {
      [THREE.RGBA_ASTC_4x4_Format]: 'astc', [THREE.RGBA_BPTC_Format]: 'bc7',
      [THREE.RGBA_ETC2_EAC_Format]: 'etc2', [THREE.RGB_ETC2_Format]: 'etc2', [THREE.RGB_ETC1_Format]: 'etc2',
    };
    async function sourcePixels(url) {
      const blob = await (await fetch(url)).blob();
      const bitmap = await createImageBitmap(blob, { premultiplyAlpha: 'none', colorSpaceConversion: 'none' });
      const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
      const ctx = canvas.getContext('2d', { willReadFrequently: true });
      ctx.drawImage(bitmap, 0, 0);
      return ctx.getImageData(0, 0, bitmap.width, bitmap.height).data;
    }
    const psnr = (a, b, swap) => {
      let se = 0, n = 0;
      for (let p = 0; p < a.length; p += 4) {
        for (let c = 0; c < 3; c++) {
          const s = swap && c !== 1 ? a[p + 2 - c] : a[p + c];
          const d = s - b[p + c];
          se += d * d; n++;
        }
      }
      return se === 0 ? 99 : 10 * Math.log10((255 * 255) / (se / n));
    };
    const pairs = [];
    for (let i = 0; i < urls.length; i += 2) {
      const source = await sourcePixels(urls[i]);
      const texture = await loader.loadAsync(urls[i + 1]);
      const { width, height } = texture.image;
      texture.minFilter = THREE.NearestFilter;
      texture.magFilter = THREE.NearestFilter;
      renderer.setPixelRatio(1);
      renderer.setSize(width, height, false);
      // What the texture holds comes out as it is: sRGB decoded then encoded again, data as data.
      renderer.outputColorSpace = texture.colorSpace === THREE.SRGBColorSpace ? THREE.SRGBColorSpace : THREE.LinearSRGBColorSpace;
      const scene = new THREE.Scene();
      const material = new THREE.MeshBasicMaterial({ map: texture, transparent: false });
      scene.add(new THREE.Mesh(new THREE.PlaneGeometry(2, 2), material));
      const camera = new THREE.OrthographicCamera(-1, 1, 1, -1, 0, 1);
      renderer.render(scene, camera);
      const gl = renderer.getContext();
      const raw = new Uint8Array(width * height * 4);
      gl.readPixels(0, 0, width, height, gl.RGBA, gl.UNSIGNED_BYTE, raw);
      // readPixels starts at the bottom row; the texture's first row is its top (flipY false,
      // as glTF textures are).
      const seen = new Uint8Array(raw.length);
      for (let y = 0; y < height; y++) seen.set(raw.subarray((height - 1 - y) * width * 4, (height - y) * width * 4), y * width * 4);
      // The plane's UV (0,0) is its bottom left, where three.js puts the texture's first row
      // when flipY is false: undo that too.
      const rows = new Uint8Array(seen.length);
      for (let y = 0; y < height; y++) rows.set(seen.subarray((height - 1 - y) * width * 4, (height - y) * width * 4), y * width * 4);
      let max = 0;
      for (let p = 0; p < source.length; p += 4) for (let c = 0; c < 3; c++) max = Math.max(max, Math.abs(source[p + c] - rows[p + c]));
      pairs.push({
        width, height, format: names[texture.format] ?? String(texture.format), mipmaps: texture.mipmaps.length,
        color_space: texture.colorSpace, psnr: psnr(source, rows, false), psnr_swapped: psnr(source, rows, true), max_diff: max,
      });
      texture.dispose();
      material.dispose();
    }
    loader.dispose();
    return { pairs };
  }, { urls, format });
  if (errors.length) result.page_errors = errors;
  (result.pairs ?? []).forEach((p, i) => { p.source = args[2 * i]; p.ktx2 = args[2 * i + 1]; });
  process.stdout.write(`${JSON.stringify(result)}\n`);
  if (result.error || errors.length) process.exitCode = 2;
} catch (e) {
  process.stdout.write(`${JSON.stringify({ error: String(e && e.stack || e) })}\n`);
  process.exitCode = 2;
} finally {
  await browser.close();
  await server.close();
  fs.rmSync(pageDir, { recursive: true, force: true });
}
