// Prepares the benchmark's own builds (npm postinstall, and run.mjs before each run):
// copies each engine's browser build from node_modules into builds/<name>/vendor/ (so
// third-party code is only ever installed from npm, never committed) and draws the assets
// (our own work) into builds/<name>/assets/. Both folders are git-ignored.
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { atlas, background, level } from './lib/assets.mjs';

const here = dirname(fileURLToPath(import.meta.url));

export const OWN_BUILDS = {
  // build name -> engine file (in node_modules) -> vendor path, and the asset seed
  phaser: { engine: ['phaser/dist/phaser.min.js', 'vendor/phaser.min.js'], seed: 11 },
  pixi: { engine: ['pixi.js/dist/pixi.min.js', 'vendor/pixi.min.js'], seed: 23 },
};

export function prepare({ quiet = false } = {}) {
  const log = quiet ? () => {} : (s) => console.log(s);
  for (const [name, b] of Object.entries(OWN_BUILDS)) {
    const dir = join(here, 'builds', name);
    const from = join(here, 'node_modules', b.engine[0]);
    if (!existsSync(from)) {
      throw new Error(`${from} is missing: run \`npm install\` in bench/load first`);
    }
    const to = join(dir, b.engine[1]);
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(from, to);
    log(`builds/${name}/${b.engine[1]}`);
    const assets = join(dir, 'assets');
    mkdirSync(assets, { recursive: true });
    const a = atlas({ seed: b.seed });
    writeFileSync(join(assets, 'atlas.png'), a.png);
    writeFileSync(join(assets, 'atlas.json'), a.json);
    writeFileSync(join(assets, 'background.png'), background({ seed: b.seed + 1 }));
    writeFileSync(join(assets, 'level.json'), level({ seed: b.seed + 2 }));
    log(`builds/${name}/assets/{atlas.png,atlas.json,background.png,level.json}`);
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) prepare();
