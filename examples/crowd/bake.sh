#!/usr/bin/env bash
# Bake assets/Fox.glb into vertex animation textures for the crowd page.
#
#   bash bake.sh [ENCODING] [more kiln-worker vat options]
#
# ENCODING: auto (default), low, medium, high, rgba16 or half.
# Writes baked/ENCODING/<mesh>/ and lists every bake in baked/index.json (the page's
# ?set=ENCODING picks one). The baker is KILN_WORKER, else target/release/kiln-worker (what the
# tests build), else target/debug/kiln-worker (build one with `cargo build --release --bin
# kiln-worker` at the repository root; CARGO_TARGET_DIR is honoured).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
target=${CARGO_TARGET_DIR:-$here/../../target}
worker=${KILN_WORKER:-$target/release/kiln-worker}
[[ -n ${KILN_WORKER:-} || -x $worker ]] || worker=$target/debug/kiln-worker
encoding=${1:-auto}
shift || true

if [[ ! -x $worker ]]; then
  echo "bake.sh: no baker at $worker (cargo build --release --bin kiln-worker, or set KILN_WORKER)" >&2
  exit 2
fi

out=$here/baked/$encoding
rm -rf "$out"
mkdir -p "$out"
"$worker" vat "$here/assets/Fox.glb" --out "$out" --encoding "$encoding" "$@"

# index.json: {"sets": {"auto": ["auto/<mesh>/", ...], ...}}, folders relative to baked/.
node --input-type=module - "$here/baked" <<'JS'
import fs from 'node:fs';
import path from 'node:path';
const baked = process.argv[2];
const sets = {};
for (const set of fs.readdirSync(baked, { withFileTypes: true })) {
  if (!set.isDirectory()) continue;
  const found = [];
  const walk = (dir) => {
    if (fs.existsSync(path.join(dir, 'vat.json'))) found.push(path.relative(baked, dir).split(path.sep).join('/') + '/');
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) walk(path.join(dir, e.name));
  };
  walk(path.join(baked, set.name));
  if (found.length) sets[set.name] = found.sort();
}
fs.writeFileSync(path.join(baked, 'index.json'), JSON.stringify({ sets }, null, 2) + '\n');
console.log(`baked/index.json: ${Object.entries(sets).map(([k, v]) => `${k}: ${v.join(' ')}`).join('; ')}`);
JS
