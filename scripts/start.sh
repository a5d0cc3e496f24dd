#!/usr/bin/env bash
# Command 1 of the README: installs what is missing, builds, and starts the daemon in the
# foreground on its defaults (127.0.0.1:7420, state in /var/lib/bulkhead, the host image).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec ./build/bulkhead serve "$@"
