// Copies the pieces of three.js the game needs from node_modules/three into
// vendor/. Runs as the npm postinstall step, so third-party code is only ever
// installed from npm and never committed (vendor/ is git-ignored).
//
// Addons are copied together with everything they import relatively, so a
// three.js upgrade that adds a new helper module cannot leave a broken
// import in the browser. The only bare specifier allowed is "three", which
// index.html resolves through its import map.

import { copyFileSync, mkdirSync, readFileSync, existsSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const threeRoot = join(here, 'node_modules', 'three');
const vendor = join(here, 'vendor');

// Engine build: source path inside the package -> path under vendor/.
const engine = { 'build/three.module.min.js': 'three.module.min.js' };

// Addon entry points, relative to examples/jsm/ (copied to vendor/addons/).
const addonEntries = ['loaders/GLTFLoader.js', 'loaders/KTX2Loader.js', 'libs/meshopt_decoder.module.js'];

// Files an addon loads at run time rather than imports: the Basis Universal transcoder
// KTX2Loader runs in its workers (relative to examples/jsm/, copied to vendor/addons/).
const addonFiles = ['libs/basis/basis_transcoder.js', 'libs/basis/basis_transcoder.wasm'];

function copy(fromRel, toRel) {
  const from = join(threeRoot, fromRel);
  const to = join(vendor, toRel);
  if (!existsSync(from)) throw new Error(`missing in node_modules/three: ${fromRel}`);
  mkdirSync(dirname(to), { recursive: true });
  copyFileSync(from, to);
  console.log(`vendor/${toRel}`);
}

// Static `import ... from '...'` and `export ... from '...'` specifiers.
function importsOf(source) {
  const specs = [];
  const re = /\b(?:import|export)\s[^'"]*?\bfrom\s*['"]([^'"]+)['"]|\bimport\s*['"]([^'"]+)['"]/g;
  for (const m of source.matchAll(re)) specs.push(m[1] ?? m[2]);
  return specs;
}

for (const [fromRel, toRel] of Object.entries(engine)) copy(fromRel, toRel);

const seen = new Set();
const queue = [...addonEntries];
while (queue.length) {
  const rel = queue.shift();
  if (seen.has(rel)) continue;
  seen.add(rel);
  copy(posix.join('examples/jsm', rel), posix.join('addons', rel));
  const source = readFileSync(join(threeRoot, 'examples/jsm', rel), 'utf8');
  for (const spec of importsOf(source)) {
    if (spec === 'three') continue;
    if (!spec.startsWith('.')) {
      throw new Error(`${rel} imports "${spec}", which the import map does not provide`);
    }
    queue.push(posix.normalize(posix.join(posix.dirname(rel), spec)));
  }
}

for (const rel of addonFiles) copy(posix.join('examples/jsm', rel), posix.join('addons', rel));
