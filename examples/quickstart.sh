#!/usr/bin/env bash
# Quick start: build Kiln, start it on its embedded defaults (SQLite + a local object
# directory under ./kiln-data, one in-process worker), upload the sample game through the
# public API, print its status, signed manifest and CDN URLs (on the content origin,
# 127.0.0.1:8081, apart from the API on :8080) and what the page downloads in
# headless Chromium (where Debian's chromium is installed), then keep serving.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v npm >/dev/null || { echo "quickstart: npm is needed (it installs three.js for the sample game)"; exit 1; }
command -v cargo >/dev/null || { echo "quickstart: cargo is needed"; exit 1; }
(cd examples/sample-game && npm install --no-audit --no-fund --loglevel=error)
# What a player downloads is measured in a real browser (bench/load/page-bytes.mjs), when there is one.
if command -v chromium >/dev/null; then
  (cd bench/load && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi
exec cargo run --release -p kiln-api --bin kiln-api -- --demo examples/sample-game "$@"
