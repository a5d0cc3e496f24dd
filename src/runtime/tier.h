// The tier contract: what the core needs of an isolation tier (a wall around a sandbox). The
// core keeps sandbox records and the handle a tier gives it; how the wall is built, how the
// root filesystem is provided, how init is reached and how the network attaches are the
// tier's. One implementation per folder (runtime/native, ...).
#pragma once
#include <sys/types.h>
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/ctl_messages.h"
#include "common/result.h"
#include "common/unique_fd.h"
#include "runtime/usage.h"

namespace bulkhead::runtime {

struct Limits {
  double cpus = 1.0;
  int64_t memory_mb = 1024;
  int64_t pids = 512;
};

// What init sets inside the sandbox where its own kernel holds the limits
// (Capabilities::limits_in_sandbox): the ctl::kLimits payload.
ctl::LimitsMessage LimitsInside(const Limits& limits);

// A named volume's directory on the host, bound into the sandbox idmapped: its files are
// stored owned by the stored range (common/id_ranges.h) and show with the same ids in every
// sandbox.
struct VolumeBind {
  std::string source;  // the volume's root directory on the host
  std::string target;  // absolute, normalized path inside the sandbox
  bool read_only = false;
};

// The sandbox's root filesystem as storage keeps it: an image's read-only root (for the host
// image, with host directories bound read-only at the same paths) under the sandbox's own
// writable layer. Each tier turns it into what its wall takes (an idmapped overlay, a rootfs
// for a user-space kernel, a block image for a VM).
struct RootfsLayers {
  std::string image;                    // the image's root directory (read-only lower layer)
  std::vector<std::string> host_binds;  // host dirs bound read-only at the same path (host image)
  // An image built on the host image: the host image's root, whose own files at the host dirs
  // (bulkhead's sudo, ...) go over the host's there, below the image's. Read at each boot, so
  // an upgraded host image's files reach images built before it.
  std::string host_image;
  std::string upper, work;              // the writable layer (overlayfs upper and work dirs)
};

struct LaunchSpec {
  std::string id;       // the sandbox's host name (see Tier)
  RootfsLayers rootfs;
  std::string staging;  // a private dir of this sandbox for the tier's plumbing; kept until Destroy
  uid_t host_uid = 0;   // sandbox uid 0 maps here; kIdCount ids follow (uid_ranges.h)
  Limits limits;
  std::vector<VolumeBind> volumes;  // mounted in this order
  bool background = false;          // booting for a warm pool: yields the CPU until Foreground
  // Its network mode is not none: a tier whose sandbox has a kernel of its own gives it a NIC
  // (Capabilities::nic_from_boot).
  bool network = false;
  // A memory image this tier's Checkpoint wrote (Capabilities::memory_snapshot): the sandbox
  // resumes from it with every process where it was, instead of booting. Its files
  // (rootfs.upper) are those captured at the same instant, and its limits and volumes those it
  // had then.
  std::string memory_image;
};

// What the core keeps of a launched sandbox, in memory and in its row, to find it again after
// a daemon restart. Only its tier reads it.
struct SandboxHandle {
  pid_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22: guards against pid reuse
};

// The way to a sandbox's init: each request (an exec, a process, a file operation) gets a
// connection of its own.
class InitDialer {
 public:
  virtual ~InitDialer() = default;
  virtual boost::asio::awaitable<Result<boost::asio::local::stream_protocol::socket>> Dial(
      boost::asio::any_io_executor executor) const = 0;
};

// How a sandbox's network attaches to the host: the network namespace its traffic leaves
// from. The tiers so far run the sandbox's processes (or its user-space network stack) in it,
// so its loopback is theirs: the egress proxy listens there and ports are reached there.
struct NetworkAttachment {
  UniqueFd netns;
};

// What a tier can do beyond running commands; the core refuses the rest with a clear error.
struct Capabilities {
  bool pause = false;                // freeze every process, memory kept
  bool filesystem_snapshot = false;  // snapshots and forks of the files
  bool memory_snapshot = false;      // snapshots of the running processes (Checkpoint)
  bool idmapped_volumes = false;     // named volumes with the same ids in every sandbox
  bool pooling = false;              // booted ahead and handed out with other limits
  // The sandbox's own kernel enforces its pids limit (gVisor's, a guest's): the tier's Launch
  // hands init the LaunchSpec's limits, and init sets each later change (ctl::kLimits); the
  // host's cgroups only bound the tier's processes around it.
  bool limits_in_sandbox = false;
  // The sandbox's traffic can leave through the host (network modes allowlist and open, and
  // the port proxy): its sockets live in the attached namespace. A tier whose sandboxes have
  // only their own loopback runs network mode none alone.
  bool network_egress = false;
  // The sandbox has a NIC (a guest link in its namespace: common/guest_link.h) only if it
  // booted in a mode other than none (LaunchSpec::network): one that booted without moves to
  // another mode only by a stop and a start.
  bool nic_from_boot = false;
  // The port proxy reaches the sandbox's loopback through its init (a relay worker inside),
  // not by a socket in the attached namespace: the loopback is a kernel's of its own.
  bool ports_through_init = false;
  // Before the host freezes the sandbox (pause, snapshot, fork), its init stops the workload
  // inside (ctl::kFreeze), and resumes it after the host's thaw: the sandbox's kernel may send
  // one write to the host's files as several requests (virtio-fs), and a freeze from outside
  // alone could fall between them and leave half a write in a snapshot.
  bool freeze_inside = false;
};

// Every call names a sandbox by its host name (LaunchSpec::id): what the host shows any local
// user (cgroup names), so never its API id.
class Tier {
 public:
  virtual ~Tier() = default;
  virtual const std::string& name() const = 0;  // the API's "runtime": "native", ...
  virtual Capabilities capabilities() const = 0;
  // The limits init sets inside the sandbox (Capabilities::limits_in_sandbox): LimitsInside,
  // unless the tier knows better.
  virtual ctl::LimitsMessage LimitsInsideFor(const Limits& limits) const { return LimitsInside(limits); }
  // The part of these limits a sandbox keeps from its launch on (a guest's memory and vCPUs),
  // as a name; "" when every limit can be set later. A pooled sandbox goes only to a create of
  // its shape.
  virtual std::string BootShape(const Limits& /*limits*/) const { return {}; }
  // What the tier runs on, for /healthz (name, value pairs: the runtime binary and its version).
  virtual std::vector<std::pair<std::string, std::string>> Details() const { return {}; }
  // What the tier made for one running sandbox, for its API record (runtime_details): e.g. a
  // guest's kernel and size. Empty when the tier has nothing to add.
  virtual std::vector<std::pair<std::string, std::string>> SandboxDetails(const std::string& /*id*/) const {
    return {};
  }

  // Where the sandbox's programs reach the egress proxy and the DNS resolver (its HTTP_PROXY):
  // loopback when they share the attached namespace, a gateway when they have a kernel of
  // their own.
  virtual std::string ProxyHost() const { return "127.0.0.1"; }

  // Starts the sandbox's init with its filesystem, namespaces and limits in place, or resumes
  // a checkpointed one (LaunchSpec::memory_image).
  virtual Result<SandboxHandle> Launch(const LaunchSpec& spec) = 0;
  // Memory snapshots (Capabilities::memory_snapshot): writes the memory and processes of a
  // running or paused sandbox into `image_dir`, an empty directory of root's. The sandbox is
  // left as it was (a paused one stays paused). Files are not written: the caller captures them
  // at the same instant, the sandbox frozen.
  virtual Status Checkpoint(const std::string& id, const SandboxHandle& handle, const std::string& image_dir);
  // What a memory image of this tier is restored by: its engine and version ("" if the tier
  // takes none). An image of another format is refused, not tried.
  virtual std::string MemoryFormat() const { return {}; }
  // The way to the init of the sandbox launched with this staging dir (also after a restart).
  virtual std::shared_ptr<const InitDialer> Dialer(const std::string& staging) const = 0;
  // Its network, checked to be this handle's (not a reused pid's).
  virtual Result<NetworkAttachment> AttachNetwork(const SandboxHandle& handle) = 0;
  virtual Status SetLimits(const std::string& id, const Limits& limits) = 0;
  // A sandbox launched in the background (a warm pool's) is handed out: it gets the CPU as
  // any sandbox in use does.
  virtual Status Foreground(const std::string& id) = 0;
  virtual Result<Usage> SandboxUsage(const std::string& id) = 0;
  // Pause and resume: every process of the sandbox stops (keeping its memory) or goes on.
  virtual Status SetFrozen(const std::string& id, bool frozen) = 0;
  virtual bool Frozen(const std::string& id) = 0;
  // True while the sandbox this handle names still runs.
  virtual bool Alive(const SandboxHandle& handle) = 0;
  // Kills every process of the sandbox and frees what the tier holds for it. Idempotent; an
  // empty handle frees what is left of a sandbox whose processes are gone.
  virtual Status Destroy(const std::string& id, const SandboxHandle& handle) = 0;
  // Host names of the sandboxes this daemon's tier holds something for (after a crash, those
  // without a row are destroyed).
  virtual std::vector<std::string> Leftovers() = 0;
  // The daemon restarted and found this sandbox running: the tier takes up what it watches
  // (`staging` is the directory LaunchSpec::staging named).
  virtual Status Reattach(const std::string& /*id*/, const SandboxHandle& /*handle*/, const Limits& /*limits*/,
                          const std::string& /*staging*/) {
    return {};
  }
  // Who frees memory in a sandbox that ran out of it where the tier keeps the host's OOM killer
  // away from it (gvisor, runtime/memory_watch.h): the core, which has the sandbox's init kill
  // its largest process (ctl::kReclaim). Called on a thread of the tier's with the sandbox's
  // host name; answers whether something was freed.
  virtual void SetReclaim(std::function<bool(const std::string& id)> /*reclaim*/) {}
  // Renames a running sandbox's host objects (a sandbox of an older version, named otherwise).
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // The daemon is stopping: release host-wide things that no sandbox uses any more.
  virtual void Release() = 0;
};

// A tier's Launch answers this (409 sandbox_files_unbootable) when a top-level mount point of
// the sandbox's own files is not a real directory (a symlink its writable layer or an
// imported snapshot carries): its files cannot boot as they are.
Error UnbootableFiles();
// Why a volume could not be attached at the failed step (errno): a mount point the image cannot
// have (a symlink, a file, a read-only directory on the way) is the request's fault (422).
Error VolumeMountPointError(const VolumeBind& volume, const char* failed_step, int error);

// `names` and the names of the entries of `dir`, each once: a tier's Leftovers (its cgroups
// and its per-sandbox state directories).
std::vector<std::string> WithEntriesOf(std::vector<std::string> names, const std::string& dir);

// The dialer of an init listening on a unix socket at `path` on the host.
std::shared_ptr<const InitDialer> UnixSocketDialer(std::string path);
// The dialer of an init listening on vsock `port` in a guest, through the host unix socket
// `path` of its vsock device in Firecracker's model ("CONNECT <port>\n", "OK <n>\n"). With a
// `device_uid`, the socket must be served by a process of that uid (SO_PEERCRED): the device
// runs as the sandbox's unprivileged host uid, and nothing else may stand in for it.
std::shared_ptr<const InitDialer> VsockDeviceDialer(std::string path, uint32_t port, uid_t device_uid = 0);

}  // namespace bulkhead::runtime
