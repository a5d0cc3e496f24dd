#!/usr/bin/env bash
# Builds crictl and critest from cri-tools at a pinned version from the Go module proxy and
# installs them as /usr/local/lib/bulkhead/crictl and /usr/local/lib/bulkhead/critest: the
# containerd tests (tests/integration/containerd_harness.py) drive a private containerd with
# them the way the kubelet drives a node's runtime, and run the CRI validation suite.
# cri-tools v1.26 speaks CRI v1, as Debian 12's containerd (1.6) does. Its module path is
# github.com/kubernetes-sigs/cri-tools (sigs.k8s.io/cri-tools is not it). Its go.mod replaces
# the k8s.io modules by k8s.io/kubernetes/staging/... pseudo-versions of Kubernetes v1.26.0;
# the module proxy does not serve the kubectl one, so kubectl comes from k8s.io/kubectl v0.26.0,
# the same tree published as its own module (its go.sum lines are pinned below: sum.golang.org
# need not be reachable). Built as cri-tools' Makefile does: crictl with `go build`, critest, a
# ginkgo suite, with `go test -c`, both CGO_ENABLED=0 and -trimpath (the module zip has no
# vendor/ tree, so the dependencies come from the module proxy rather than -mod=vendor).
# Go: as install-runsc.sh finds it (scripts/find-go.sh). Idempotent: nothing is built when this
# build is installed. Root.
set -euo pipefail

version=v1.26.1
module=github.com/kubernetes-sigs/cri-tools
target=/usr/local/lib/bulkhead
here=$(cd "$(dirname "$0")" && pwd)
# What `crictl --version` and `critest --version` say of this build: the version and a digest
# of this script and the Go pin, so that a change to either rebuilds.
build_id=$(cat "$0" "$here/find-go.sh" | sha256sum | cut -c1-12)
build_version="${version#v}+bulkhead.${build_id}"
kubectl_replacement=k8s.io/kubectl@v0.26.0
kubectl_sums=(
  "k8s.io/kubectl v0.26.0 h1:xmrzoKR9CyNdzxBmXV7jW9Ln8WMrwRK6hGbbf69o4T0="
  "k8s.io/kubectl v0.26.0/go.mod h1:eInP0b+U9XUJWSYeU9XZnTA+cVYuWyl3iYPGtru0qhQ="
)

# (read whole, never piped into a reader that may stop early: see install-runsc.sh)
crictl_version=$([ -x "$target/crictl" ] && "$target/crictl" --version 2>/dev/null || true)
critest_version=$([ -x "$target/critest" ] && "$target/critest" --version 2>/dev/null || true)
if [[ "$crictl_version" == *" $build_version"* && "$critest_version" == *" $build_version"* ]]; then
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "install-cri-tools: run as root" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

go=$(bash "$here/find-go.sh" install-cri-tools)
echo "install-cri-tools: building crictl and critest ${version} with $("$go" version | cut -d' ' -f3)"
# GOTOOLCHAIN=local: cri-tools' go.mod asks for Go 1.19, which any Go find-go.sh gives satisfies.
export GOFLAGS="-buildvcs=false -mod=mod" CGO_ENABLED=0 GOTOOLCHAIN=local
module_dir=$("$go" mod download -json "${module}@${version}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
cp -r "$module_dir" "$work/cri-tools"
chmod -R u+w "$work/cri-tools"
cd "$work/cri-tools"
"$go" mod edit -replace "k8s.io/kubectl=${kubectl_replacement}"
printf '%s\n' "${kubectl_sums[@]}" >> go.sum
ldflags="-X ${module}/pkg/version.Version=${build_version}"
"$go" build -trimpath -ldflags "$ldflags" -o "$work/crictl" ./cmd/crictl
"$go" test -c -trimpath -ldflags "$ldflags" -o "$work/critest" ./cmd/critest
install -d -m 0755 "$target"
# (renames: a test running the old binaries keeps them)
for tool in crictl critest; do
  install -m 0755 "$work/$tool" "$target/$tool.new"
  mv -f "$target/$tool.new" "$target/$tool"
done
"$target/crictl" --version
