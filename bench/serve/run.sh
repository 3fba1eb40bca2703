#!/usr/bin/env bash
# Serving and upload figures side by side (issue 15): Kiln's content origin (/cdn, /play)
# against nginx serving the same bytes from disk (wrk), and Kiln's upload API against a raw
# S3 PUT of the same bytes to the same Garage bucket (boto3). A benchmark: it asserts that it
# measured something, never a speed. See bench/serve/README.md.
#
#   bench/serve/run.sh            # full profile (-t2 -c32 -d10s per row, 5 uploads)
#   bench/serve/run.sh --quick    # CI profile (-d2s, 2 uploads)
#
# kiln-api comes from $KILN_BIN_DIR (default target/release; this script builds nothing).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
tools="${KILN_TOOLS_DIR:-$HOME/.cache/kiln-tools}"
say() { printf '[serve-bench] %s\n' "$*"; }
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
apt_updated=0
apt_install() {   # Debian packages: wrk (the load generator), nginx-light (the anchor)
  if [ "$apt_updated" = 0 ]; then $sudo apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

command -v wrk >/dev/null 2>&1 || { say "installing wrk (Debian's package)"; apt_install wrk; }
nginx_bin=${KILN_NGINX:-/usr/sbin/nginx}
[ -x "$nginx_bin" ] || { say "installing nginx (Debian's nginx-light)"; apt_install nginx-light; }
command -v psql >/dev/null 2>&1 || { say "installing psql (Debian's postgresql-client)"; apt_install postgresql-client; }

# PostgreSQL (the distributed deployment's database): start it if this machine has it stopped.
pg_url=${KILN_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/postgres}
if ! pg_isready -d "$pg_url" -q 2>/dev/null && [ -d /etc/postgresql ]; then
  say "starting PostgreSQL"
  $sudo pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
  for _ in $(seq 1 30); do pg_isready -d "$pg_url" -q && break; sleep 1; done
fi

# boto3 for the raw PUT, in its own venv (pinned in requirements.txt).
venv="$tools/bench-venv"
req="$root/bench/serve/requirements.txt"
stamp="$venv/.serve-bench-requirements"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$req" "$stamp"; then
  say "installing boto3 into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  cp "$req" "$stamp"
fi

# The sample game's engine (three.js from npm, copied into vendor/).
if [ ! -d examples/sample-game/vendor ]; then
  say "installing the sample game's npm packages"
  (cd examples/sample-game && npm install --no-audit --no-fund --loglevel=error)
fi

# kiln-api: release from KILN_BIN_DIR (default target/release), else debug, loudly.
bin_dir=${KILN_BIN_DIR:-$root/target/release}
kiln_bin="$bin_dir/kiln-api"
if [ ! -x "$kiln_bin" ] && [ -z "${KILN_BIN_DIR:-}" ] && [ -x "$root/target/debug/kiln-api" ]; then
  kiln_bin="$root/target/debug/kiln-api"
  cat >&2 <<WARN

  ************************************************************************************
  *  serve-bench: no target/release/kiln-api; using target/debug/kiln-api.          *
  *  DEBUG NUMBERS ARE NOT REPRESENTATIVE of Kiln's serving or upload speed.         *
  *  For real figures: cargo build --release -p kiln-api --bin kiln-api              *
  ************************************************************************************

WARN
fi
if [ ! -x "$kiln_bin" ]; then
  say "no kiln-api at $kiln_bin: cargo build --release -p kiln-api --bin kiln-api (or set KILN_BIN_DIR)"
  exit 1
fi

exec "$venv/bin/python" "$root/bench/serve/serve_bench.py" --kiln-bin "$kiln_bin" \
  --nginx "$nginx_bin" --pg-url "$pg_url" --garage "${KILN_GARAGE:-$tools/bin/garage}" "$@"
