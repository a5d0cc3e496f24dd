#!/bin/sh
# Installs bulkhead-oci on one node and registers its runtime handler with the node's
# containerd, as gVisor's and Kata's node installers do. The installer DaemonSet
# (../installer-daemonset.yaml) runs it in a privileged pod with the node's root at /host;
# run by hand, HOST_ROOT=/ installs on this machine.
#
#   install-node.sh install     binary to /usr/local/lib/bulkhead, handler into config.toml
#   install-node.sh uninstall   both removed again
#
# Idempotent: the handler's tables sit between two marker lines in config.toml, replaced on
# each install (an upgrade) and removed on uninstall; the rest of the file is left as it was.
# containerd is restarted (CONTAINERD_RESTART=systemctl, through the node's pid 1 namespaces)
# only when the file changed; CONTAINERD_RESTART=none leaves that to the operator.
set -eu

action=${1:-install}
host=${HOST_ROOT:-/host}
here=$(cd "$(dirname "$0")" && pwd)
source_binary=${BULKHEAD_OCI_SOURCE:-$here/bulkhead-oci}
fragment=${BULKHEAD_FRAGMENT:-$here/bulkhead.toml}
config=$host${CONTAINERD_CONFIG:-/etc/containerd/config.toml}
restart=${CONTAINERD_RESTART:-systemctl}
target_dir=$host/usr/local/lib/bulkhead
begin="# BEGIN bulkhead runtime handlers (deploy/kubernetes/installer/install-node.sh)"
end="# END bulkhead runtime handlers"

fail() { echo "install-node: $*" >&2; exit 1; }

# config.toml without the marked block.
without_block() {
  [ -f "$config" ] || return 0
  awk -v begin="$begin" -v end="$end" '$0 == begin {skip = 1} !skip {print} $0 == end {skip = 0}' "$config"
}

write_config() {  # stdin: the new content; restarts containerd if it differs
  new=$(mktemp "$config.XXXXXX")
  cat > "$new"
  if [ -f "$config" ] && cmp -s "$new" "$config"; then
    rm -f "$new"
    return 0
  fi
  chmod 0644 "$new"
  mv -f "$new" "$config"
  echo "install-node: updated $config"
  case $restart in
    systemctl) nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl restart containerd ;;
    none) echo "install-node: restart containerd to load it" ;;
    *) fail "CONTAINERD_RESTART must be systemctl or none" ;;
  esac
}

case $action in
  install)
    [ -x "$source_binary" ] || fail "no bulkhead-oci at $source_binary"
    [ -f "$fragment" ] || fail "no handler fragment at $fragment"
    mkdir -p "$target_dir" "$(dirname "$config")"
    chmod 0755 "$target_dir"
    # A new file renamed over the old: a runtime call in flight keeps the binary it started.
    cp "$source_binary" "$target_dir/.bulkhead-oci.new"
    chown 0:0 "$target_dir/.bulkhead-oci.new"
    chmod 0755 "$target_dir/.bulkhead-oci.new"
    mv -f "$target_dir/.bulkhead-oci.new" "$target_dir/bulkhead-oci"
    echo "install-node: installed $target_dir/bulkhead-oci"
    if [ -f "$config" ] && ! grep -Eq '^[[:space:]]*version[[:space:]]*=[[:space:]]*2' "$config"; then
      fail "$config is not a version 2 containerd config (containerd 1.5 or later writes one: containerd config default)"
    fi
    {
      if [ -f "$config" ]; then without_block; else echo "version = 2"; fi
      echo "$begin"
      grep -v '^#' "$fragment" | sed '/./,$!d'
      echo "$end"
    } | write_config
    ;;
  uninstall)
    if [ -f "$config" ]; then without_block | write_config; fi
    rm -f "$target_dir/bulkhead-oci"
    rmdir "$target_dir" 2>/dev/null || true
    echo "install-node: removed bulkhead-oci"
    ;;
  *) fail "usage: install-node.sh install|uninstall" ;;
esac
