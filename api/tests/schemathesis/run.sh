#!/usr/bin/env bash
# The API fuzzer: Schemathesis (the version pinned in requirements.txt, in a venv under
# ${KILN_TOOLS_DIR:-~/.cache/kiln-tools}) against a live embedded kiln-api on a free port with a
# temporary data directory, an admin token, a team token and one published game, generating
# requests from the OpenAPI document it serves. It fails on any 5xx, undocumented status or Content-Type, or a
# body that does not match its documented schema; it prints how many operations and cases ran.
#
#   api/tests/schemathesis/run.sh              # 30 cases per operation, seed 1
#   api/tests/schemathesis/run.sh --install-only   # only the venv (CI fetches it beside its build)
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
if [ "${1:-}" = --install-only ]; then
  "$venv/bin/schemathesis" --version
  exit 0
fi

api=${KILN_API_BIN:-}   # a kiln-api already built, or build the release one (as the tests)
if [ -z "$api" ]; then
  cargo build --release -q -p kiln-api --bin kiln-api
  api="${CARGO_TARGET_DIR:-$root/target}/release/kiln-api"
fi

work=$(mktemp -d /tmp/kiln-schemathesis.XXXXXX)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
admin=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
KILN_DATA_DIR="$work/data" KILN_BIND="127.0.0.1:$port" KILN_ADMIN_TOKEN="$admin" KILN_WORKERS=1 \
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

# A published game, so the fuzzer reaches past the 404s: its name, build id, object keys and
# files go into the generated values (half the time; the other half stays random).
game=fuzzed-game
python3 - "$work/game.zip" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("index.html", '<!doctype html><title>fuzz</title><script src="main.js"></script><p>hello</p>')
    z.writestr("main.js", "console.log('fuzz');\n" * 50)
    z.writestr("data/level.json", '{"level": 1}')
PY
build_id=$(curl -sf -X POST -H "Authorization: Bearer $team_token" -H 'content-type: application/zip' \
  --data-binary "@$work/game.zip" "$url/v1/games/$game/builds?version=1.0.0" | json_field build_id)
deadline=$((SECONDS + 180))
until [ "$(curl -sf -H "Authorization: Bearer $team_token" "$url/v1/builds/$build_id" | json_field status)" = published ]; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "the seed build did not publish:"; curl -s -H "Authorization: Bearer $team_token" "$url/v1/builds/$build_id"; exit 1
  fi
  sleep 0.2
done
keys=$(curl -sf "$url/v1/games/$game/manifest" | python3 -c '
import json, sys
def walk(v):
    if isinstance(v, dict):
        for k, x in v.items():
            if k == "key" and isinstance(x, str):
                yield x
            yield from walk(x)
    elif isinstance(v, list):
        for x in v:
            yield from walk(x)
print(json.dumps(sorted(set(walk(json.load(sys.stdin))))))')
loader="kiln-loader.$(curl -sf "$url/sdk/kiln-loader.js" | sha256sum | cut -c1-16).js"
cp "$here/schemathesis.toml" "$work/schemathesis.toml"
cat >> "$work/schemathesis.toml" <<TOML

[dictionaries.games]
values = ["$game"]
[dictionaries.ids]
values = ["$build_id", "$team_id"]
[dictionaries.keys]
values = $keys
[dictionaries.sdk]
values = ["$loader"]
[dictionaries.files]
values = ["index.html", "main.js", "data/level.json"]

[parameters]
"path.game" = { dictionary = "games", probability = 0.5 }
"query.game" = { dictionary = "games", probability = 0.5 }
"path.id" = { dictionary = "ids", probability = 0.5 }
"path.build_id" = { dictionary = "ids", probability = 0.5 }
"body.build_id" = { dictionary = "ids", probability = 0.5 }
"path.key" = { dictionary = "keys", probability = 0.5 }
"path.path" = { dictionary = "files", probability = 0.5 }
"path.file" = { dictionary = "sdk", probability = 0.5 }
TOML

set +e
# From the scratch directory: Schemathesis keeps a cache (.schemathesis/) where it runs.
cd "$work"
KILN_ADMIN_TOKEN="$admin" KILN_TEAM_TOKEN="$team_token" \
  SCHEMATHESIS_HOOKS=kiln_hooks PYTHONPATH="$here" \
  "$venv/bin/schemathesis" --no-color --config-file "$work/schemathesis.toml" run "$url/v1/openapi.json" \
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
