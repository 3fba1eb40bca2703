#!/usr/bin/env bash
# Self-test of check.mjs against gltfpack (see README.md). Installs the pinned
# packages from package-lock.json when node_modules is missing.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/gltf-validator ] || [ ! -d node_modules/three ] || [ ! -d node_modules/meshoptimizer ] || [ ! -d node_modules/gltfpack ]; then
  npm ci --no-audit --no-fund >&2
fi
exec node selftest.mjs "$@"
