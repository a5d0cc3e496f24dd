#!/usr/bin/env bash
# Installs the test tooling that does not come from Debian: PyPI packages into a virtualenv
# at .tools/venv (tests/requirements.txt) and the npm packages of each Node project that
# tests use (from their lock files). The daemon itself never links any of this.
#
# The registries are the one part of a test run that needs the network. One that stays
# unreachable through a retry is recorded in .tools/unreachable, and the tests needing what
# it would have installed skip with that line as their reason (tests/integration/tooling.py);
# scripts/test.sh repeats the list at its end.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p .tools
unreachable=.tools/unreachable
rm -f "$unreachable"
# Runs "$@" a second time 30 s after a failure. pip and npm retry each request themselves
# (a failed npm ci with the registry down took ~1 min; four tries made an outage cost 8.5 min).
with_retries() {
  "$@" && return 0
  sleep 30
  "$@"
}

venv=.tools/venv
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
# Reinstall only when the requirements changed since the last install.
stamp="$venv/.requirements"
if ! cmp -s tests/requirements.txt "$stamp"; then
  rm -f "$stamp"
  pip_log=$(mktemp)
  if with_retries "$venv/bin/pip" install -q --disable-pip-version-check -r tests/requirements.txt 2>>"$pip_log"; then
    cp tests/requirements.txt "$stamp"
  elif grep -q 'connection broken by\|NewConnectionError\|ConnectTimeoutError' "$pip_log"; then
    echo "pypi: PyPI was unreachable, tests/requirements.txt is not installed" >>"$unreachable"
  else
    cat "$pip_log" >&2
    exit 1
  fi
  rm -f "$pip_log"
fi

# Node projects: each has its own package.json and package-lock.json.
npm_unreachable=
for project in $(git ls-files '*package-lock.json' | xargs -r -n1 dirname); do
  if [ ! -d "$project/node_modules" ] || [ "$project/package-lock.json" -nt "$project/node_modules/.package-lock.json" ]; then
    if [ -z "$npm_unreachable" ] && (cd "$project" && with_retries npm ci --no-audit --no-fund --loglevel=error); then
      continue
    fi
    # Only an unreachable registry is waved through; any other failure is the project's.
    [ -z "$npm_unreachable" ] && (cd "$project" && npm ping >/dev/null 2>&1) && exit 1
    npm_unreachable=yes
    echo "npm $project: the npm registry was unreachable, its node_modules is not installed" >>"$unreachable"
  fi
done
