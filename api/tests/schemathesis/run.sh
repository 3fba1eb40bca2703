#!/usr/bin/env bash
# The API fuzzer: Schemathesis (the version pinned in requirements.txt, in a venv under
# ${KILN_TOOLS_DIR:-~/.cache/kiln-tools}) against a live embedded kiln-api on a free port with a
# temporary data directory, an admin token and a team token, generating requests from the
# OpenAPI document it serves. It fails on any 5xx, undocumented status or Content-Type, or a
# body that does not match its documented schema; it prints how many operations and cases ran.
#
#   api/tests/schemathesis/run.sh              # 30 cases per operation, seed 1
#   KILN_SCHEMATHESIS_EXAMPLES=200 KILN_SCHEMATHESIS_SEED=$RANDOM api/tests/schemathesis/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cd "$root"

tools=${KILN_TOOLS_DIR:-$HOME/.cache/kiln-tools}
version=$(sed -n 's/^schemathesis==//p' "$here/requirements.txt")
venv="$tools/schemathesis-$version"
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$version"; then
  echo "installing schemathesis $version into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$here/requirements.txt"
fi

cargo build -q -p kiln-api --bin kiln-api
api="${CARGO_TARGET_DIR:-$root/target}/debug/kiln-api"

work=$(mktemp -d /tmp/kiln-schemathesis.XXXXXX)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
admin=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
KILN_DATA_DIR="$work/data" KILN_BIND="127.0.0.1:$port" KILN_ADMIN_TOKEN="$admin" KILN_WORKERS=0 \
  RUST_LOG=warn "$api" > "$work/kiln-api.log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Poll until it answers (a minute at most: it migrates a fresh database first).
deadline=$((SECONDS + 60))
until curl -sf -o /dev/null "$url/healthz"; do
  if ! kill -0 "$pid" 2>/dev/null; then cat "$work/kiln-api.log"; exit 1; fi
  if [ "$SECONDS" -ge "$deadline" ]; then echo "kiln-api did not start"; cat "$work/kiln-api.log"; exit 1; fi
  sleep 0.2
done

json_field() { python3 -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }
team_id=$(curl -sf -X POST -H "Authorization: Bearer $admin" -H 'content-type: application/json' \
  -d '{"name":"schemathesis"}' "$url/v1/teams" | json_field id)
team_token=$(curl -sf -X POST -H "Authorization: Bearer $admin" "$url/v1/teams/$team_id/tokens" | json_field token)

set +e
KILN_ADMIN_TOKEN="$admin" KILN_TEAM_TOKEN="$team_token" \
  SCHEMATHESIS_HOOKS=kiln_hooks PYTHONPATH="$here" \
  "$venv/bin/schemathesis" --no-color --config-file "$here/schemathesis.toml" run "$url/v1/openapi.json" \
  --url "$url" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --max-examples "${KILN_SCHEMATHESIS_EXAMPLES:-30}" --seed "${KILN_SCHEMATHESIS_SEED:-1}" \
  --workers 1 --output-truncate false 2>&1 | tee "$work/out.txt"
status=${PIPESTATUS[0]}
set -e
operations=$(sed -n 's/^ *Tested: *\([0-9]*\).*/\1/p' "$work/out.txt" | head -1)
cases=$(grep -A1 '^Test cases:' "$work/out.txt" | sed -n 's/^ *\([0-9]*\) generated.*/\1/p' | head -1)
echo "schemathesis: ${operations:-?} operations, ${cases:-?} cases, exit status $status"
if grep -qE 'panicked|ERROR' "$work/kiln-api.log"; then
  echo "kiln-api logged errors:"; grep -E 'panicked|ERROR' "$work/kiln-api.log" | head -20
fi
exit "$status"
