#!/usr/bin/env bash
# Builds every fuzz target, seeds it (fuzz/seed.sh) and runs it for KILN_FUZZ_SECONDS (10)
# seconds; prints each target's run count, corpus size and peak memory. Fails on any crash
# (its input left in fuzz/artifacts/<target>/: once fixed, copy it to
# fuzz/regressions/<target>/, which `cargo test` replays) or on a target that ran nothing.
# cargo-fuzz 0.13 from crates.io, cached in KILN_TOOLS_DIR (~/.cache/kiln-tools). Stable
# Rust: --sanitizer none (coverage instrumentation; debug assertions and overflow checks on).
# The targets build the stages without the services (no database, queue or S3 client).
#
#   bash fuzz/run.sh               # build, seed, run
#   bash fuzz/run.sh --build-only  # install cargo-fuzz and build the targets (CI: beside the tests)
set -euo pipefail
cd "$(dirname "$0")/.."
tools=${KILN_TOOLS_DIR:-$HOME/.cache/kiln-tools}
seconds=${KILN_FUZZ_SECONDS:-10}
fuzz="$tools/bin/cargo-fuzz"
if ! "$fuzz" --version 2>/dev/null | grep -q '0\.13\.'; then
  echo "== installing cargo-fuzz 0.13.2 (cached in $tools)"
  cargo install cargo-fuzz --version 0.13.2 --locked --root "$tools"
fi
echo "== fuzz targets: build (instrumented release build of the stages)"
build_start=$(date +%s)
(cd fuzz && "$fuzz" build --sanitizer none)
echo "fuzz build: $(($(date +%s) - build_start)) s"
[ "${1:-}" = --build-only ] && exit 0
bash fuzz/seed.sh
table=$(mktemp)
trap 'rm -f "$table"' EXIT
ran=0
expected=$(cd fuzz && "$fuzz" list | wc -l)
for target in $(cd fuzz && "$fuzz" list); do
  echo "== fuzz $target for $seconds s"
  log=$(mktemp)
  if ! (cd fuzz && "$fuzz" run --sanitizer none "$target" "corpus/$target" -- \
    -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=4096 -timeout=60) \
    >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz target $target crashed: its input is in fuzz/artifacts/$target/"
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log")
  if [ -z "$runs" ] || [ "$runs" -eq 0 ]; then
    tail -n 30 "$log"
    echo "fuzz target $target ran no input"
    exit 1
  fi
  printf '%-20s %10s runs %7s inputs in its corpus %6s MB peak\n' "$target" "$runs" \
    "$(find "fuzz/corpus/$target" -type f | wc -l)" "$rss" >>"$table"
  ran=$((ran + 1))
  rm -f "$log"
done
echo "== fuzz targets: $ran of $expected ran for $seconds s each, no crash"
cat "$table"
[ "$ran" -eq "$expected" ] && [ "$ran" -ge 10 ]
