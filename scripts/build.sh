#!/usr/bin/env bash
# Configures and builds bulkhead into ./build (or $BUILD_DIR), warnings as errors (the
# developer and CI build: README's commands and scripts/test.sh run it).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} -DBULKHEAD_WERROR=ON >/dev/null
ninja -C "$build"
