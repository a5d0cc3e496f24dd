#!/usr/bin/env bash
# Builds the gvisor tier's runsc at a pinned gVisor version from the Go module proxy and
# installs it as /usr/local/lib/bulkhead/runsc, where the daemon looks first
# (src/runtime/gvisor/runsc.h). Debian 12's runsc (2022-12-19) cannot run the tier (it
# answers statx(AT_NO_AUTOMOUNT) with EINVAL, so coreutils' ls and stat fail inside it, and
# cannot start in the sandbox's user namespace with the host network): the daemon refuses it.
# The build needs Go 1.21 or newer (it fetches the toolchain gVisor's go.mod names); Debian
# 12's is 1.19, so without a newer one on the PATH a pinned Go toolchain is fetched from the
# module proxy, checked against its pinned sha256 (scripts/find-go.sh). The build precompiles
# the Sentry's and the gofer's seccomp programs, as gVisor's own build does and `go install`
# does not (scripts/runsc-precompile): else every sandbox start spends tens of ms compiling them.
# It also applies the patches in scripts/runsc-patches (each says why at its change).
# Idempotent: nothing is built when this build is installed.
set -euo pipefail

# gVisor's Go module (its "go" branch) at the commit of 2026-09-05.
version=v0.0.0-20260905035102-160fafc42237
target=/usr/local/lib/bulkhead/runsc
here=$(cd "$(dirname "$0")" && pwd)
# What `runsc --version` says of this build: the module's version and a digest of what this
# script adds to it, so that a changed patch, program list or Go toolchain pin rebuilds.
build_id=$(cat "$0" "$here/find-go.sh" "$here"/runsc-precompile/* "$here"/runsc-patches/* | sha256sum | cut -c1-12)
build_version="${version#v}+bulkhead.${build_id}"

# (the output is read whole, never piped into a reader that may stop early: under
# pipefail a SIGPIPE to runsc would fail the install)
installed_version=$([ -x "$target" ] && "$target" --version 2>/dev/null || true)
if [[ "$installed_version" == *"$build_version"* ]]; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A Go of 1.21 or newer (GOTOOLCHAIN), else the pinned toolchain from the module proxy.
go=$(bash "$here/find-go.sh" install-runsc)

echo "install-runsc: building runsc ${version} with $("$go" version | cut -d' ' -f3) (a few minutes)"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOTOOLCHAIN=auto
# A copy of the module to add the precompiled programs to (the module cache is read-only).
module_dir=$("$go" mod download -json "gvisor.dev/gvisor@${version}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
cp -r "$module_dir" "$work/gvisor"
chmod -R u+w "$work/gvisor"
mkdir "$work/gvisor/bulkhead-precompile"
cp "$here/runsc-precompile/main.go" "$work/gvisor/bulkhead-precompile/main.go"
for patch in "$here"/runsc-patches/*.patch; do
  # (the ceiling: never a repository above the copy, should the work directory sit in one)
  (cd "$work/gvisor" && GIT_CEILING_DIRECTORIES="$work" git apply "$patch")
done
cp "$here/runsc-precompile/sentry_programs.go.in" "$work/gvisor/runsc/boot/filter/config/bulkhead_programs.go"
(cd "$work/gvisor" && "$go" run ./bulkhead-precompile runsc/boot/filter/filter_precompiled.go \
  runsc/fsgofer/filter/filter_precompiled.go)
(cd "$work/gvisor" && "$go" build -trimpath -o "$work/runsc" \
  -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=${build_version}" ./runsc)
# (a rename: running sandboxes keep the runsc they started with)
install -D -m 0755 "$work/runsc" "$target.new"
mv -f "$target.new" "$target"
installed_version=$("$target" --version)
echo "${installed_version%%$'\n'*}"
