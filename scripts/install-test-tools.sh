#!/usr/bin/env bash
# Installs the test tooling that does not come from Debian: PyPI packages into a virtualenv
# at .tools/venv (tests/requirements.txt) and the npm packages of each Node project that
# tests use (from their lock files). The daemon itself never links any of this.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.tools/venv
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
# Reinstall only when the requirements changed since the last install.
stamp="$venv/.requirements"
if ! cmp -s tests/requirements.txt "$stamp"; then
  "$venv/bin/pip" install -q --disable-pip-version-check -r tests/requirements.txt
  cp tests/requirements.txt "$stamp"
fi

# Node projects: each has its own package.json and package-lock.json.
for project in $(git ls-files '*package-lock.json' | xargs -r -n1 dirname); do
  if [ ! -d "$project/node_modules" ] || [ "$project/package-lock.json" -nt "$project/node_modules/.package-lock.json" ]; then
    (cd "$project" && npm ci --no-audit --no-fund --loglevel=error)
  fi
done
