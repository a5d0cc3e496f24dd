#!/usr/bin/env bash
# Installs every Debian package bulkhead needs to build, run, test and benchmark.
# Idempotent: packages already present are left alone. Run as root on Debian 12.
set -euo pipefail

packages=(
  # build
  build-essential cmake ninja-build pkg-config
  # libraries the daemon links
  libboost-dev libboost-system-dev nlohmann-json3-dev libseccomp-dev libsqlite3-dev
  libspdlog-dev libfmt-dev libcli11-dev libarchive-dev libgtest-dev libgmock-dev
  # TLS to image registries (Boost.Asio's ssl over OpenSSL)
  libssl-dev
  # network namespaces: nftables rules and routes for the egress proxy
  libnftables-dev libnl-route-3-dev nftables
  # static archives bulkhead-init links libarchive with (tar, gzip, bzip2, xz)
  nettle-dev liblzma-dev libbz2-dev zlib1g-dev
  # storage: the loop-mounted xfs or btrfs image that carries per-sandbox disk quotas
  xfsprogs btrfs-progs util-linux
  # tests and benchmarks
  python3 python3-pytest curl iproute2 procps psmisc tmux git openssl zstd
  bubblewrap crun runsc
  # real registry tooling the image tests check bulkhead against (tests start their own
  # registry on loopback; the system service the package sets up is switched off below)
  docker-registry skopeo umoci
  # the token server in front of docker-registry signs its JWTs with Python's cryptography
  python3-cryptography
  # containerd tests: a private containerd (ctr, runc shim), CNI bridge plugins, busybox image
  containerd containernetworking-plugins busybox-static
  # fuzzing and sanitizers: libFuzzer targets with ASan and UBSan (scripts/fuzz.sh)
  clang libclang-rt-14-dev
  # SDK, MCP and OpenAPI tests: a virtualenv for PyPI tooling, Node.js (20+) for the
  # TypeScript SDK and npm tooling (scripts/install-test-tools.sh)
  python3-venv nodejs
)
# Node.js from NodeSource bundles npm; Debian's own nodejs needs the separate package.
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Stops and disables a package's system service, with or without systemd.
switch_off_service() {
  local name=$1
  if [ -d /run/systemd/system ]; then
    systemctl disable --now "$name.service" >/dev/null 2>&1 || true
  else
    # (the init script's start-stop-daemon fails when nothing runs: that is fine)
    [ -x "/etc/init.d/$name" ] && "/etc/init.d/$name" stop >/dev/null 2>&1 || true
    # systemctl disables offline too (unit symlinks, and update-rc.d for the init script)
    if command -v systemctl >/dev/null; then
      systemctl disable "$name.service" >/dev/null 2>&1 || true
    elif command -v update-rc.d >/dev/null; then
      update-rc.d "$name" disable >/dev/null 2>&1 || true
    fi
  fi
}

# Debian's docker-registry starts a registry on :5000 of every address when it is installed
# (unless a policy-rc.d forbids it) and enables it at boot. Stop and disable it, with or without
# systemd; only when this script installed it, so a registry someone set up on purpose stays.
if [[ " ${missing[*]} " == *" docker-registry "* ]]; then
  switch_off_service docker-registry
fi
# Likewise Debian's containerd: a system containerd on /run/containerd, enabled at boot. The
# tests start private ones (their own root, state and socket); a node's containerd is set up
# by whoever runs the node (deploy/containerd/).
if [[ " ${missing[*]} " == *" containerd "* ]]; then
  switch_off_service containerd
fi

# The gvisor runtime's runsc: a pinned build newer than Debian's (see the script).
bash "$(dirname "$0")/install-runsc.sh"

# crictl and critest, which drive the containerd tests' private containerd (see the script).
bash "$(dirname "$0")/install-cri-tools.sh"

# The microvm runtime's QEMU, guest kernel and device daemons (see the script).
bash "$(dirname "$0")/install-microvm.sh"
