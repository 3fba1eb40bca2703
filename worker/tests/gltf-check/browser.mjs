// Headless Chromium for the browser tests: Debian's /usr/bin/chromium (or
// KILN_CHROMIUM) driven by playwright-core, WebGL2 through SwiftShader.

import fs from 'node:fs';

import { chromium } from 'playwright-core';

export const CHROMIUM_ARGS = [
  // ANGLE on SwiftShader (Vulkan): software WebGL2 that works without a GPU or display.
  '--use-angle=swiftshader',
  '--enable-unsafe-swiftshader',
  '--ignore-gpu-blocklist',
  // rAF at the display rate even when the page is "hidden" in headless mode.
  '--disable-background-timer-throttling',
  '--disable-renderer-backgrounding',
  '--disable-backgrounding-occluded-windows',
];

export function chromiumPath() {
  const file = process.env.KILN_CHROMIUM ?? '/usr/bin/chromium';
  if (!fs.existsSync(file)) throw new Error(`no Chromium at ${file} (apt-get install chromium, or set KILN_CHROMIUM)`);
  return file;
}

export async function launchChromium() {
  return chromium.launch({ executablePath: chromiumPath(), headless: true, args: CHROMIUM_ARGS });
}

// What the page's WebGL2 runs on (null without WebGL2).
export function webglInfo(page) {
  return page.evaluate(() => {
    const gl = document.createElement('canvas').getContext('webgl2');
    if (!gl) return null;
    const ext = gl.getExtension('WEBGL_debug_renderer_info');
    return {
      renderer: gl.getParameter(ext ? ext.UNMASKED_RENDERER_WEBGL : gl.RENDERER),
      max_texture_size: gl.getParameter(gl.MAX_TEXTURE_SIZE),
    };
  });
}
