#!/usr/bin/env python3
"""Records what `kiln-worker process` makes of every model in ../shared/assets and of the
sample game, as one line per output object (sha256 and size), so a refactor of the pipeline
(issue 16) can show that nothing changed: record before, record after, `diff` the two files.

    cargo build --release -p kiln-worker --bin kiln-worker
    python3 bench/baseline/record.py --out /tmp/before.tsv
    ... change the code, rebuild ...
    python3 bench/baseline/record.py --out /tmp/after.tsv && diff /tmp/before.tsv /tmp/after.tsv

Each model directory becomes one package (its files plus an empty index.html, zipped with
fixed timestamps), processed with `--vat` and a fixed signing key, game, version and build
id, so the outputs are byte-for-byte repeatable. `manifest.json` is hashed without its
`created_at` (so is the copy under `manifests/`, named by its own hash, which covers that
time); `manifest.sig` signs that time too and is left out; `report.json` gives its
errors and warnings, not its timings. Fails under CI=true when the corpus is missing.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KEY = "01" * 32
SKIP_DIRS = {"invalid", "node_modules"}
SAMPLE_SKIP = {"node_modules", "package.json", "package-lock.json", "copy-engine.mjs", "README.md"}


def package(source: Path, zip_path: Path, skip: set) -> int:
    files = 0
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
        names = set()
        for path in sorted(source.rglob("*")):
            rel = path.relative_to(source)
            if any(part in skip for part in rel.parts) or not path.is_file():
                continue
            if path.name.upper().startswith("LICENSE"):
                continue
            info = zipfile.ZipInfo(rel.as_posix(), date_time=(2026, 1, 1, 0, 0, 0))
            z.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
            names.add(rel.as_posix())
            files += 1
        if "index.html" not in names:
            info = zipfile.ZipInfo("index.html", date_time=(2026, 1, 1, 0, 0, 0))
            z.writestr(info, "<!doctype html><title>baseline</title>\n")
    return files


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record(worker: Path, name: str, source: Path, skip: set, scratch: Path, out: list) -> bool:
    zip_path = scratch / f"{name}.zip"
    if package(source, zip_path, skip) == 0:
        return False
    dest = scratch / name
    key = scratch / "signing.key"  # --key is a key file (hex seed), not the seed itself
    key.write_text(KEY)
    run = subprocess.run(
        [str(worker), "process", str(zip_path), "--out", str(dest), "--vat", "--key", str(key),
         "--game", "baseline", "--version", "1.0.0", "--build-id", "baseline"],
        capture_output=True, text=True,
    )
    if run.returncode != 0:
        first = (run.stderr.strip().splitlines() or ["?"])[-1]
        out.append(f"{name}\t(exit {run.returncode})\t-\t{first}")
        return True
    for path in sorted(dest.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(dest).as_posix()
        data = path.read_bytes()
        if rel == "manifest.sig":
            continue
        if rel == "manifest.json" or (rel.startswith("manifests/") and rel.endswith(".json")):
            # Named by their own hash, which covers `created_at`: named by place instead.
            manifest = json.loads(data)
            manifest.pop("created_at", None)
            data = json.dumps(manifest, sort_keys=True).encode()
            if rel != "manifest.json":
                rel = "manifests/(its own sha256).json"
        if rel == "report.json":
            report = json.loads(data)
            notes = []

            def walk(node, where=""):
                if isinstance(node, dict):
                    for k, v in node.items():
                        if k in ("errors", "warnings", "error") and v:
                            notes.append(f"{where}{k}={json.dumps(v, sort_keys=True)}")
                        else:
                            walk(v, f"{where}{k}.")
                elif isinstance(node, list):
                    for i, v in enumerate(node):
                        walk(v, f"{where}{i}.")

            walk(report)
            out.append(f"{name}\treport.json\t-\t{digest(' '.join(notes).encode())} ({len(notes)} notes)")
            continue
        out.append(f"{name}\t{rel}\t{len(data)}\t{digest(data)}")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", default=str(REPO / "target/release/kiln-worker"))
    parser.add_argument("--assets", default=str(REPO.parent / "shared/assets"))
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    worker = Path(args.worker)
    if not worker.exists():
        print(f"{worker} not built: cargo build --release -p kiln-worker --bin kiln-worker")
        return 1
    assets = Path(args.assets)
    sources = []
    if assets.is_dir():
        sources = [(d.name, d, SKIP_DIRS) for d in sorted(assets.iterdir())
                   if d.is_dir() and d.name not in SKIP_DIRS]
    elif os.environ.get("CI") == "true":
        print(f"CI=true and the corpus {assets} is missing")
        return 1
    sources.append(("sample-game", REPO / "examples/sample-game", SAMPLE_SKIP))
    rows: list = []
    recorded = 0
    with tempfile.TemporaryDirectory() as scratch:
        for name, source, skip in sources:
            if record(worker, name, source, skip, Path(scratch), rows):
                recorded += 1
                print(f"{name}: done", file=sys.stderr)
    Path(args.out).write_text("package\toutput\tbytes\tsha256\n" + "\n".join(rows) + "\n")
    failed = sum(1 for r in rows if "\t(exit " in r)
    print(f"{recorded} packages, {len(rows)} outputs recorded in {args.out} ({failed} packages failed)")
    return 0 if recorded else 1


if __name__ == "__main__":
    sys.exit(main())
