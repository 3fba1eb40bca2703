#!/usr/bin/env bash
# Fills fuzz/corpus/<target>/ with seed inputs: the real corpus (../shared/assets when
# present, examples/, the tests' fixtures), the Khronos glTF-Validator's invalid test files
# where ../shared/assets carries them (assets/invalid/validator), and small hostile files
# of our own (worker/tests/fixtures/hostile/). Idempotent; the fuzzer adds to the folders.
# Usage: bash fuzz/seed.sh            (from anywhere)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
corpus=fuzz/corpus
shared=../shared/assets
max_bytes=$((1024 * 1024)) # larger seeds only slow every run down

mkdir -p "$corpus"
for t in unpack_zip unpack_tar_gz inventory gltf_geometry animation vat engine_detection \
  page_rewrite telemetry manifest_signature images; do
  mkdir -p "$corpus/$t"
done

# seed TARGET FILE...: copies each file under its content hash (so reruns add nothing twice).
seed() {
  local target=$1
  shift
  for f in "$@"; do
    [ -f "$f" ] || continue
    [ "$(stat -c %s "$f")" -le "$max_bytes" ] || continue
    cp "$f" "$corpus/$target/$(sha1sum "$f" | cut -c1-16)"
  done
}

# seed_text TARGET TEXT: one seed from a string.
seed_text() {
  local tmp
  tmp=$(mktemp)
  printf '%s' "$2" > "$tmp"
  seed "$1" "$tmp"
  rm -f "$tmp"
}

# --- models: glTF reader, geometry, animation, VAT, inventory -------------------------
models=()
while IFS= read -r -d '' f; do models+=("$f"); done < <(
  find examples worker/tests/fixtures "$shared" \( -name '*.glb' -o -name '*.gltf' \) \
    -not -path '*/node_modules/*' -print0 2>/dev/null | sort -z
)
for t in gltf_geometry animation vat; do seed "$t" "${models[@]}"; done
gltfs=()
for f in "${models[@]}"; do case $f in *.gltf) gltfs+=("$f") ;; esac; done
seed inventory "${gltfs[@]}"

# --- packages: zip and tar.gz of small real trees, and hostile shapes ------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/game/js" "$tmp/game/models"
cp examples/sample-game/index.html examples/sample-game/game.js "$tmp/game/" 2>/dev/null || true
cp worker/tests/fixtures/static-triangle.gltf "$tmp/game/models/"
printf 'console.log(1)\n' > "$tmp/game/js/a.js"
(cd "$tmp/game" && python3 - "$tmp" <<'PY'
import io, sys, tarfile, zipfile
out = sys.argv[1]
def zips(name, entries):
    with zipfile.ZipFile(f"{out}/{name}.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in entries:
            z.writestr(path, data)
def tars(name, entries, fmt=tarfile.USTAR_FORMAT):
    with tarfile.open(f"{out}/{name}.tar", "w", format=fmt) as t:
        for path, data in entries:
            info = tarfile.TarInfo(path)
            if data is None:
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
real = [("index.html", open("index.html", "rb").read() if __import__("os").path.exists("index.html") else b"<p>x</p>"),
        ("js/a.js", b"console.log(1)\n"),
        ("models/static-triangle.gltf", open("models/static-triangle.gltf", "rb").read())]
zips("real", real)
tars("real", real)
tars("real-pax", real + [("long/" + "n" * 120 + ".js", b"1")], tarfile.PAX_FORMAT)
tars("real-gnu", real + [("long/" + "n" * 120 + ".js", b"1")], tarfile.GNU_FORMAT)
clash = [("a", b"file"), ("a/b", b"x")]
zips("file-and-dir", clash)
tars("file-and-dir", clash)
tars("dir-then-file", [("a/", None), ("a", b"file")])
zips("traversal", [("../evil.js", b"x"), ("ok.js", b"y")])
tars("traversal", [("../evil.js", b"x")])
zips("duplicate", [("a.js", b"1"), ("b.js", b"2")])
PY
)
if command -v git >/dev/null 2>&1; then
  (cd "$tmp/game" && git init -q && git add . &&
    git -c user.name=kiln -c user.email=kiln@example.invalid commit -qm seed &&
    git archive --format=tar HEAD > "$tmp/git-archive.tar") || true
fi
seed unpack_zip "$tmp"/*.zip
seed unpack_tar_gz "$tmp"/*.tar

# --- scripts: engine detection; pages: the rewrite -------------------------------------
scripts=()
while IFS= read -r -d '' f; do scripts+=("$f"); done < <(
  find examples worker/tests/engines bench/load/builds api/sdk -maxdepth 3 \
    \( -name '*.js' -o -name '*.mjs' \) -not -path '*/node_modules/*' -print0 2>/dev/null | sort -z
)
# A few real engine builds, when the detection corpus' npm packages are installed.
for f in worker/tests/engines/node_modules/three/build/three.module.min.js \
  worker/tests/engines/node_modules/phaser/dist/phaser.min.js \
  worker/tests/engines/node_modules/pixi.js/dist/pixi.min.js \
  examples/sample-game/node_modules/three/build/three.module.min.js; do
  [ -f "$f" ] && scripts+=("$f")
done
seed engine_detection "${scripts[@]}"
seed_text engine_detection 'export const REVISION = "170"; class Scene {} export { Scene };'
pages=()
while IFS= read -r -d '' f; do pages+=("$f"); done < <(
  find examples bench/load/builds worker/tests -maxdepth 3 -name '*.html' \
    -not -path '*/node_modules/*' -print0 2>/dev/null | sort -z
)
seed page_rewrite "${pages[@]}"
seed_text page_rewrite "$(printf '%s\0%s' \
  '<!doctype html><html><head><meta charset=utf-8><script type=importmap>{"imports":{"three":"./lib/three.module.js"}}</script></head><body><script type=module src=main.js></script></body></html>' \
  'import * as THREE from "three"; import "./js/other.js"; fetch("models/fox.glb"); new Image().src = "img/atlas.png";')"
seed_text page_rewrite '<script src="lib/three.module.js"></script><script>THREE.x</script>'

# --- telemetry beacons ----------------------------------------------------------------
seed_text telemetry '{"events":[{"type":"preheat","game":"g","build":"b","engine":"three","version":"0.170.0","outcome":"hit","ms":12.5}]}'
seed_text telemetry '{"events":[{"type":"decode","game":"g","build":"b","model":"m.glb","variant":"meshopt","ms":4,"device":{"os":"android","memory":4,"cores":8}}]}'
seed_text telemetry '[{"type":"load","game":"g","ms":1e308},{"type":"decode_error","reason":"decoder_timeout"}]'
seed_text telemetry '{"events":[{}, null, 1, "x", {"type": {"a": []}}]}'

# --- manifests and signatures -----------------------------------------------------------
for f in $(find worker/tests api/tests common/tests -name '*.json' -size -64k 2>/dev/null | sort | head -20); do
  tmp_seed=$(mktemp)
  { printf 'keyid=kiln-0123456789abcdef, sig=%s\n' "$(head -c 64 /dev/zero | base64 -w0)"; cat "$f"; } > "$tmp_seed"
  seed manifest_signature "$tmp_seed"
  rm -f "$tmp_seed"
done
seed_text manifest_signature "$(printf 'keyid=k, sig=AAAA\n{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"k"}')"
seed_text manifest_signature "$(printf 'sig=, keyid=\n{"schema":1,"game":"g","version":"1","build_id":"b","files":[],"models":[]}')"

# --- images: small PNG/JPEG/WebP files of the build fixtures, the corpus and the hostile ones -
images=()
while IFS= read -r -d '' f; do images+=("$f"); done < <(
  find examples worker/tests/fixtures "$shared" \( -name '*.png' -o -name '*.jpg' -o -name '*.jpeg' -o -name '*.webp' \) \
    -size -64k -not -path '*/node_modules/*' -print0 2>/dev/null | sort -z | head -z -n 40
)
seed images "${images[@]}"

# --- our own hostile models: every fixture for every model target -----------------------
for t in gltf_geometry animation vat; do seed "$t" worker/tests/fixtures/hostile/*; done
seed inventory worker/tests/fixtures/hostile/*.gltf

# --- every input a target failed on before (fuzz/regressions/<target>/) -------------------
for t in "$corpus"/*/; do
  t=$(basename "$t")
  if [ -d "fuzz/regressions/$t" ]; then seed "$t" "fuzz/regressions/$t"/*; fi
done

for t in "$corpus"/*/; do
  printf '%-20s %4d seeds\n' "$(basename "$t")" "$(find "$t" -type f | wc -l)"
done
