# Sourced by the chart's checks: the Python venv with helm-python-sdk, kubernetes-validate and
# PyYAML (helm/kiln/tests/requirements.txt), cached under $KILN_TOOLS_DIR/chart-venv and
# rebuilt when requirements.txt changes. The same cache and stamp as .ci/chart-check's, so
# both share one venv.
#
#   . helm/kiln/tests/chart-venv.sh
#   PY=$(kiln_chart_venv "$TOOLS" helm/kiln/tests)     # prints the venv's python
kiln_chart_venv() {
  local tools=$1 tests=$2
  local venv=$tools/chart-venv
  if ! cmp -s "$tests/requirements.txt" "$venv/.requirements.txt" 2>/dev/null || [ ! -x "$venv/bin/python" ]; then
    echo "   installing the Python tools from PyPI into $venv" >&2
    rm -rf "$venv"
    mkdir -p "$tools"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$tests/requirements.txt" >&2
    cp "$tests/requirements.txt" "$venv/.requirements.txt"
  fi
  printf '%s\n' "$venv/bin/python"
}
