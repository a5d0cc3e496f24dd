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

# Debian's docker-registry starts a registry on :5000 of every address when it is installed
# (unless a policy-rc.d forbids it) and enables it at boot. Stop and disable it, with or without
# systemd; only when this script installed it, so a registry someone set up on purpose stays.
if [[ " ${missing[*]} " == *" docker-registry "* ]]; then
  if [ -d /run/systemd/system ]; then
    systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
  else
    # (the init script's start-stop-daemon fails when nothing runs: that is fine)
    [ -x /etc/init.d/docker-registry ] && /etc/init.d/docker-registry stop >/dev/null 2>&1 || true
    # systemctl disables offline too (unit symlinks, and update-rc.d for the init script)
    if command -v systemctl >/dev/null; then
      systemctl disable docker-registry.service >/dev/null 2>&1 || true
    elif command -v update-rc.d >/dev/null; then
      update-rc.d docker-registry disable >/dev/null 2>&1 || true
    fi
  fi
fi

# The gvisor runtime's runsc: a pinned build newer than Debian's (see the script).
bash "$(dirname "$0")/install-runsc.sh"

# The microvm runtime's QEMU, guest kernel and device daemons (see the script).
bash "$(dirname "$0")/install-microvm.sh"
