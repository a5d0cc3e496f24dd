#!/usr/bin/env bash
# Prints the path of a Go toolchain of 1.21 or newer for the install scripts that build Go
# programs (install-runsc.sh, install-cri-tools.sh): the `go` on the PATH when it knows
# GOTOOLCHAIN (1.21+), else a pinned Go toolchain fetched from the module proxy, checked against
# its pinned sha256 and kept in /var/cache/bulkhead (Debian 12's own Go is 1.19).
# Usage: go=$(bash scripts/find-go.sh <caller name for messages>); messages go to stderr.
# Changing the pin rebuilds runsc (install-runsc.sh hashes this file into its build id).
set -euo pipefail

caller=${1:-find-go}
go_toolchain=go1.26.8
declare -A toolchain_sha256=(
  [amd64]=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7
  [arm64]=02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99
)
go=$(command -v go || true)
if [ -z "$go" ] || [ -z "$("$go" env GOTOOLCHAIN 2>/dev/null)" ]; then
  arch=$(dpkg --print-architecture)
  cache=/var/cache/bulkhead/go-${go_toolchain}
  module="golang.org/toolchain@v0.0.1-${go_toolchain}.linux-${arch}"
  if [ ! -x "$cache/$module/bin/go" ]; then
    [ -n "${toolchain_sha256[$arch]:-}" ] || { echo "$caller: no pinned Go toolchain for $arch" >&2; exit 1; }
    echo "$caller: fetching the Go toolchain ${go_toolchain} from the module proxy" >&2
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    curl -fsSL -o "$work/go.zip" "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-${go_toolchain}.linux-${arch}.zip"
    echo "${toolchain_sha256[$arch]}  $work/go.zip" | sha256sum -c --quiet >&2
    rm -rf "$cache" && mkdir -p "$cache"
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$work/go.zip" "$cache"
    chmod -R a+rX,go-w "$cache"
    chmod 0755 "$cache/$module/bin/"* "$cache/$module/pkg/tool/"*/*
  fi
  go="$cache/$module/bin/go"
fi
echo "$go"
