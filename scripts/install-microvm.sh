#!/usr/bin/env bash
# Installs what the microvm tier runs, into /usr/local/lib/bulkhead/microvm (root-owned,
# directories 0755, nothing world-writable):
#   vmlinux         the guest kernel as an uncompressed ELF with a PVH note: qboot boots it
#                   directly (PVH) on `-M microvm`, also with x-option-roms=off; ~0.2 s faster
#                   to /init under TCG than the bzImage
#   vmlinuz         the same kernel as Debian ships it (bzImage; boots on -M microvm only
#                   through the linuxboot option ROM, i.e. not with x-option-roms=off)
#   kernel-version  "<package> <Debian version>" of the kernel package unpacked
#   modules/*.ko    the guest's modules, uncompressed, and modules/order: their insmod order,
#                   dependencies first (from each module's modinfo depends=)
#   virtiofsd, vhost-device-vsock   the vhost-user device daemons, built from the crate
#                   registry at pinned versions
# The kernel is Debian's cloud kernel (the package linux-image-cloud-amd64 depends on),
# fetched with `apt-get download` and unpacked here, never installed into the host's /boot.
# Idempotent: what is installed at the pinned versions is left alone. Root, Debian 12.
set -euo pipefail

target=/usr/local/lib/bulkhead/microvm
virtiofsd_version=1.14.0
vsock_version=0.3.0
# The modules the guest loads (the cloud kernel builds all of these as =m; virtio-mmio is the
# transport QEMU's microvm uses, its devices found through ACPI since the kernel lacks
# VIRTIO_MMIO_CMDLINE_DEVICES; virtio_pci the transport of template guests and their restored
# copies, on QEMU's pc machine). Their dependencies are added ahead of them. virtio_console
# serves a template's boot port (a virtio serial port). A booted guest loads only those it
# has devices for (init/guest_boot.cc).
modules=(virtio_mmio virtio_pci fuse virtiofs vsock vmw_vsock_virtio_transport_common
         vmw_vsock_virtio_transport virtio_net virtio_console)

[ "$(id -u)" = 0 ] || { echo "install-microvm: run as root" >&2; exit 1; }
umask 022
export DEBIAN_FRONTEND=noninteractive

missing=()
# lz4: the cloud kernel's bzImage payload is LZ4; the -dev packages and pkg-config:
# virtiofsd's build (it links libseccomp and libcap-ng).
for p in lz4 libcap-ng-dev libseccomp-dev pkg-config gcc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-microvm: installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The VMM: QEMU 8.2 or newer, the first that saves a guest with a virtio-fs device (its
# back-end's state travels in the migration stream: memory snapshots). Debian 12's own is 7.2,
# so there it comes from Debian's bookworm-backports (10.0); newer Debians have one.
qemu_wanted=1:8.2
qemu_installed=$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null || true)
if [ -z "$qemu_installed" ] || dpkg --compare-versions "$qemu_installed" lt "$qemu_wanted"; then
  . /etc/os-release
  suite=$(apt-cache policy qemu-system-x86 | awk '/Candidate:/ {print $2}')
  if dpkg --compare-versions "${suite:-0}" ge "$qemu_wanted"; then
    from=()
  elif [ "${VERSION_CODENAME:-}" = bookworm ]; then
    list=/etc/apt/sources.list.d/bulkhead-bookworm-backports.list
    echo "deb http://deb.debian.org/debian bookworm-backports main" > "$list"
    from=(-t bookworm-backports)
  else
    echo "install-microvm: this Debian has no QEMU $qemu_wanted or newer" >&2
    exit 1
  fi
  echo "install-microvm: installing qemu-system-x86 ${from[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${from[@]}" qemu-system-x86 >/dev/null
fi

install -d -m 0755 -o root -g root /usr/local/lib/bulkhead "$target"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The kernel: the package linux-image-cloud-amd64 depends on, i.e. the current cloud kernel.
kernel_package=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ && !f {print $2; f = 1}')
[ -n "$kernel_package" ] || { echo "install-microvm: no linux-image-cloud-amd64 in apt" >&2; exit 1; }
kernel_version=$(apt-cache policy "$kernel_package" | awk '/Candidate:/ {print $2}')
stamp="$kernel_package $kernel_version"
wanted_modules="${modules[*]}"
if [ "$(cat "$target/kernel-version" 2>/dev/null)" != "$stamp" ] ||
   [ "$(cat "$target/modules/wanted" 2>/dev/null)" != "$wanted_modules" ] ||
   [ ! -s "$target/vmlinux" ] || [ ! -s "$target/modules/order" ]; then
  echo "install-microvm: unpacking $stamp"
  (cd "$work" && apt-get download -q -o APT::Sandbox::User=root "$kernel_package=$kernel_version" >/dev/null)
  dpkg-deb -x "$work"/"$kernel_package"_*.deb "$work/kernel"
  tree=$(echo "$work"/kernel/lib/modules/*/kernel)
  rm -rf "$target/modules.new" && install -d -m 0755 "$target/modules.new"
  order=()
  # Dependencies first: each module's own (the depends= of its .modinfo), then the module.
  add() {
    local name=$1 file depends dep seen
    for seen in "${order[@]}"; do [ "$seen" = "$name" ] && return 0; done
    file=$(find "$tree" \( -name "$name.ko" -o -name "$name.ko.xz" -o -name "$name.ko.zst" \) -print -quit)
    [ -n "$file" ] || { echo "install-microvm: $kernel_package has no module $name" >&2; exit 1; }
    case $file in
      *.xz) xz -dc "$file" > "$work/$name.ko" ;;
      *.zst) zstd -qdc "$file" > "$work/$name.ko" ;;
      *) cp "$file" "$work/$name.ko" ;;
    esac
    depends=$(tr '\0' '\n' < "$work/$name.ko" | sed -n 's/^depends=//p' | head -1)
    for dep in ${depends//,/ }; do add "$dep"; done
    tr '\0' '\n' < "$work/$name.ko" | grep -ax "name=$name" >/dev/null ||
      { echo "install-microvm: $file is not module $name" >&2; exit 1; }
    install -m 0644 "$work/$name.ko" "$target/modules.new/$name.ko"
    order+=("$name")
  }
  for m in "${modules[@]}"; do add "$m"; done
  printf '%s.ko\n' "${order[@]}" > "$target/modules.new/order"
  echo "$wanted_modules" > "$target/modules.new/wanted"
  chmod 0644 "$target/modules.new/order" "$target/modules.new/wanted"
  # vmlinux: the bzImage's payload (setup header: setup_sects at 0x1f1, payload_offset and
  # payload_length at 0x248), decompressed: an ELF with the PVH entry note.
  bz=$(echo "$work"/kernel/boot/vmlinuz-*)
  setup_sects=$(od -An -tu1 -j $((0x1f1)) -N1 "$bz" | tr -d ' ')
  [ "$setup_sects" != 0 ] || setup_sects=4
  read -r payload_offset payload_length < <(od -An -tu4 -j $((0x248)) -N8 "$bz")
  magic=$(od -An -tx1 -j $(((setup_sects + 1) * 512 + payload_offset)) -N4 "$bz" | tr -d ' ')
  payload() {
    dd if="$bz" bs=64K iflag=skip_bytes,count_bytes skip=$(((setup_sects + 1) * 512 + payload_offset)) \
       count="$payload_length" status=none
  }
  case $magic in
    # Linux appends the uncompressed size (4 bytes) to an LZ4 payload: not an LZ4 block.
    02214c18) payload_length=$((payload_length - 4)); payload | lz4 -dcq > "$work/vmlinux" ;;
    1f8b*) payload | gzip -dc > "$work/vmlinux" ;;
    fd377a58) payload | xz -dc > "$work/vmlinux" ;;
    28b52ffd) payload | zstd -qdc > "$work/vmlinux" ;;
    *) echo "install-microvm: unknown bzImage payload compression ($magic)" >&2; exit 1 ;;
  esac
  [ "$(od -An -tx1 -N4 "$work/vmlinux" | tr -d ' ')" = 7f454c46 ] ||
    { echo "install-microvm: the extracted kernel is not an ELF" >&2; exit 1; }
  install -m 0644 "$work/vmlinux" "$target/vmlinux.new"
  install -m 0644 "$bz" "$target/vmlinuz.new"
  rm -rf "$target/modules" && mv "$target/modules.new" "$target/modules"
  mv -f "$target/vmlinux.new" "$target/vmlinux"
  mv -f "$target/vmlinuz.new" "$target/vmlinuz"
  echo "$stamp" > "$target/kernel-version.new" && chmod 0644 "$target/kernel-version.new"
  mv -f "$target/kernel-version.new" "$target/kernel-version"
fi

# The device daemons, from the crate registry (cargo from rustup, or Debian's).
[ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ] && PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
build() {
  local crate=$1 version=$2 binary=$3
  if [ "$("$target/$binary" --version 2>/dev/null | awk '{print $NF}')" = "$version" ]; then
    return 0
  fi
  command -v cargo >/dev/null || { echo "install-microvm: cargo is needed to build $crate" >&2; exit 1; }
  echo "install-microvm: building $crate $version (about a minute on 2 cores)"
  local start=$SECONDS
  CARGO_TARGET_DIR="$work/target" cargo install --quiet --locked "$crate" --version "$version" --root "$work/cargo"
  echo "install-microvm: built $crate $version in $((SECONDS - start)) s"
  install -m 0755 "$work/cargo/bin/$binary" "$target/$binary.new"
  mv -f "$target/$binary.new" "$target/$binary"
}
build virtiofsd "$virtiofsd_version" virtiofsd
build vhost-device-vsock "$vsock_version" vhost-device-vsock
rm -rf "$target/bin"   # the layout of this script's first version
chown -R root:root "$target"
chmod -R go-w "$target"
echo "install-microvm: $(qemu-system-x86_64 --version | head -1); kernel $(cat "$target/kernel-version");" \
     "virtiofsd $virtiofsd_version; vhost-device-vsock $vsock_version"
