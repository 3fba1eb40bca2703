#!/usr/bin/env node
// Decode images in headless Chromium exactly as a WebGL engine receives them and compare
// them pair by pair: each file is fetched from a local server, decoded by the browser
// (createImageBitmap with premultiplyAlpha 'none' and no colour conversion, as three.js'
// ImageBitmapLoader does), uploaded to a WebGL2 texture without premultiplication and read
// back, so the RGB under transparent pixels counts too.
//
//   node image-decode.mjs A1 B1 [A2 B2 ...]
//
// Prints ONE JSON line: {"pairs": [{"a", "b", "width", "height", "equal", "differing",
// "max_diff"}]}; {"error": ...} and exit 2 when a file does not decode or sizes differ.

import path from 'node:path';

import { launchChromium } from './browser.mjs';
import { startStaticServer } from './static-server.mjs';

const files = process.argv.slice(2);
if (files.length === 0 || files.length % 2 !== 0) {
  process.stderr.write('usage: node image-decode.mjs A1 B1 [A2 B2 ...]\n');
  process.exit(2);
}

// Every file under its own mount, by its own name (so a `.png` holding WebP is served as
// `image/png`, as a game's files are named: the browser decodes by the bytes).
const mounts = {};
const urls = files.map((f, i) => {
  mounts[`/f${i}/`] = path.dirname(path.resolve(f));
  return `/f${i}/${encodeURIComponent(path.basename(f))}`;
});
const server = await startStaticServer(mounts);
const browser = await launchChromium();
try {
  const page = await browser.newPage();
  // Any page of the server's origin will do (fetch is same-origin): the first image itself.
  await page.goto(new URL(urls[0], server.url).href);
  const result = await page.evaluate(async (urls) => {
    const canvas = document.createElement('canvas');
    const gl = canvas.getContext('webgl2');
    if (!gl) return { error: 'no WebGL2' };
    async function pixels(url) {
      const blob = await (await fetch(url)).blob();
      const bitmap = await createImageBitmap(blob, { premultiplyAlpha: 'none', colorSpaceConversion: 'none' });
      const tex = gl.createTexture();
      gl.bindTexture(gl.TEXTURE_2D, tex);
      gl.pixelStorei(gl.UNPACK_PREMULTIPLY_ALPHA_WEBGL, false);
      gl.pixelStorei(gl.UNPACK_COLORSPACE_CONVERSION_WEBGL, gl.NONE);
      gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA8, gl.RGBA, gl.UNSIGNED_BYTE, bitmap);
      const fb = gl.createFramebuffer();
      gl.bindFramebuffer(gl.FRAMEBUFFER, fb);
      gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, tex, 0);
      const out = new Uint8Array(bitmap.width * bitmap.height * 4);
      gl.readPixels(0, 0, bitmap.width, bitmap.height, gl.RGBA, gl.UNSIGNED_BYTE, out);
      gl.deleteFramebuffer(fb);
      gl.deleteTexture(tex);
      return { width: bitmap.width, height: bitmap.height, data: out };
    }
    const pairs = [];
    for (let i = 0; i < urls.length; i += 2) {
      let a, b;
      try {
        a = await pixels(urls[i]);
        b = await pixels(urls[i + 1]);
      } catch (e) {
        return { error: `${urls[i]} / ${urls[i + 1]}: ${e}` };
      }
      if (a.width !== b.width || a.height !== b.height) {
        return { error: `${urls[i]} is ${a.width}x${a.height}, ${urls[i + 1]} ${b.width}x${b.height}` };
      }
      let differing = 0;
      let max = 0;
      for (let p = 0; p < a.data.length; p += 4) {
        let d = 0;
        for (let c = 0; c < 4; c++) d = Math.max(d, Math.abs(a.data[p + c] - b.data[p + c]));
        if (d > 0) differing++;
        max = Math.max(max, d);
      }
      pairs.push({ width: a.width, height: a.height, equal: differing === 0, differing, max_diff: max });
    }
    return { pairs };
  }, urls);
  if (result.error) {
    process.stdout.write(`${JSON.stringify(result)}\n`);
    process.exitCode = 2;
  } else {
    result.pairs.forEach((p, i) => {
      p.a = files[2 * i];
      p.b = files[2 * i + 1];
    });
    process.stdout.write(`${JSON.stringify(result)}\n`);
  }
} finally {
  await browser.close();
  await server.close();
}
