#!/usr/bin/env bash
# Quick start: build Kiln, start it on its embedded defaults (SQLite + a local object
# directory under ./kiln-data, one in-process worker), upload the sample game through the
# public API, print its status, signed manifest and CDN URLs, then keep serving.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v npm >/dev/null || { echo "quickstart: npm is needed (it installs three.js for the sample game)"; exit 1; }
command -v cargo >/dev/null || { echo "quickstart: cargo is needed"; exit 1; }
(cd examples/sample-game && npm install --no-audit --no-fund --loglevel=error)
exec cargo run -p kiln-api --bin kiln-api -- --demo examples/sample-game "$@"
