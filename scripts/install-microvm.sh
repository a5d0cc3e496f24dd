#!/usr/bin/env bash
# Installs what the microvm tier runs, into /usr/local/lib/bulkhead/microvm:
#   - QEMU (Debian's qemu-system-x86: its `microvm` machine) on the PATH;
#   - the guest kernel: Debian's cloud kernel package, fetched with `apt-get download` and
#     unpacked here (never installed into the host's /boot): `vmlinuz`, and in `modules/` the
#     modules the guest needs (the cloud kernel builds virtio, virtio-mmio, virtio-fs and vsock
#     as modules) with `modules/order`, their load order, dependencies first;
#   - the two vhost-user device daemons QEMU's microvm needs without vhost kernel modules,
#     built from the Rust crate registry at pinned versions: virtiofsd (the guest's files) and
#     vhost-device-vsock (the channel to init, in Firecracker's host-side model).
# Idempotent: what is installed at the pinned versions is left alone. Run as root on Debian 12.
set -euo pipefail

target=/usr/local/lib/bulkhead/microvm
virtiofsd_version=1.13.3
vsock_version=0.3.0
# The guest's modules, by name: what the rest depend on is ordered first below.
modules=(virtio_ring virtio virtio_mmio fuse virtiofs vsock vmw_vsock_virtio_transport_common
         vmw_vsock_virtio_transport)

export DEBIAN_FRONTEND=noninteractive
missing=()
for p in qemu-system-x86 libcap-ng-dev libseccomp-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-microvm: installing ${missing[*]}"
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

install -d -m 0755 "$target" "$target/bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The kernel: the package linux-image-cloud-amd64 depends on, i.e. the current cloud kernel.
kernel_package=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
kernel_version=$(apt-cache policy "$kernel_package" | awk '/Candidate:/ {print $2}')
if [ "$(cat "$target/kernel-version" 2>/dev/null)" != "$kernel_package $kernel_version" ]; then
  echo "install-microvm: unpacking $kernel_package $kernel_version"
  (cd "$work" && apt-get download "$kernel_package" 2>/dev/null)
  dpkg-deb -x "$work"/"$kernel_package"_*.deb "$work/kernel"
  tree=$(echo "$work"/kernel/lib/modules/*/kernel)
  rm -rf "$target/modules.new" && install -d -m 0755 "$target/modules.new"
  order=()
  # Dependencies first: each module's own (its modinfo "depends=" line), then the module.
  add() {
    local name=$1 file depends dep seen
    for seen in "${order[@]}"; do [ "$seen" = "$name" ] && return 0; done
    file=$(find "$tree" -name "$name.ko" -print -quit)
    [ -n "$file" ] || { echo "install-microvm: $kernel_package has no module $name" >&2; exit 1; }
    depends=$(strings "$file" | sed -n 's/^depends=//p' | head -1)
    for dep in ${depends//,/ }; do add "$dep"; done
    install -m 0444 "$file" "$target/modules.new/$name.ko"
    order+=("$name")
  }
  for m in "${modules[@]}"; do add "$m"; done
  printf '%s.ko\n' "${order[@]}" > "$target/modules.new/order"
  chmod 0444 "$target/modules.new/order"
  install -m 0444 "$work"/kernel/boot/vmlinuz-* "$target/vmlinuz.new"
  rm -rf "$target/modules" && mv "$target/modules.new" "$target/modules"
  mv -f "$target/vmlinuz.new" "$target/vmlinuz"
  echo "$kernel_package $kernel_version" > "$target/kernel-version"
fi

# The device daemons, from the crate registry (cargo from rustup, or Debian's).
build() {
  local crate=$1 version=$2 binary=$3
  if [ "$("$target/bin/$binary" --version 2>/dev/null | awk '{print $NF}')" = "$version" ]; then
    return 0
  fi
  command -v cargo >/dev/null || { echo "install-microvm: cargo is needed to build $crate" >&2; exit 1; }
  echo "install-microvm: building $crate $version (about a minute)"
  cargo install --quiet --locked "$crate" --version "$version" --root "$work/cargo"
  install -m 0755 "$work/cargo/bin/$binary" "$target/bin/$binary"
}
build virtiofsd "$virtiofsd_version" virtiofsd
build vhost-device-vsock "$vsock_version" vhost-device-vsock
echo "install-microvm: $(qemu-system-x86_64 --version | head -1); kernel $(cat "$target/kernel-version")"
