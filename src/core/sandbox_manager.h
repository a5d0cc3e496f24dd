// SandboxManager: the lifecycle of every sandbox of one daemon. Owns the state database,
// the storage, the isolation tiers and the warm pools. Thread-safe.
//
// Calls marked (blocking) do real system work (mounts, clone, cgroups, SQLite) and take
// milliseconds: api/ runs them on the blocking thread pool, never on an io thread.
#pragma once
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "core/config.h"
#include "core/ctl_client.h"
#include "core/exec_session.h"
#include "core/tenant_egress.h"
#include "core/tenant_quota.h"
#include "core/tier_set.h"
#include "core/types.h"
#include "core/usage_history.h"
#include "net/egress_proxy.h"
#include "storage/image_pull.h"
#include "storage/volume_key.h"

namespace bulkhead::core {

struct ManagerStats {
  int64_t sandboxes_running = 0;
  int64_t sandboxes_created_total = 0;
  int64_t sandboxes_deleted_total = 0;
  int64_t sandbox_create_failures_total = 0;
  int64_t execs_total = 0;
  int64_t warm_pool_ready = 0;
  int64_t warm_pool_hits_total = 0;
  int64_t warm_pool_misses_total = 0;
  int64_t snapshots = 0;
  std::string storage_driver;  // "overlay" | "btrfs"
};

// A fresh control connection to a running sandbox's init, with the sandbox's settings
// (the defaults for cwd, env and user of what runs there).
struct InitConnection {
  std::unique_ptr<CtlClient> client;
  SandboxSpec spec;
  std::shared_ptr<void> in_use;  // while held, the sandbox counts as busy (no idle pause)
  std::string proxy_host = "127.0.0.1";  // runtime::Tier::ProxyHost
};

// The kExec message for `request` in a sandbox with `spec`: the sandbox's env under the
// request's (with egress, HTTP_PROXY and the like naming `proxy_host`), and its workdir and
// user unless the request names others.
ctl::ExecMessage InitExecPayload(const ExecRequest& request, const SandboxSpec& spec, const std::string& proxy_host);

class SandboxManager {
 public:
  virtual ~SandboxManager() = default;

  // Opens (or creates) the state under config.state_dir, re-attaches to sandboxes that
  // survived a daemon restart and starts the warm pool. (blocking)
  static Result<std::unique_ptr<SandboxManager>> Open(const DaemonConfig& config);
  // The same with these tiers instead of the host's (tests run the core on a fake tier).
  static Result<std::unique_ptr<SandboxManager>> Open(const DaemonConfig& config, TierSet tiers);

  virtual Result<SandboxInfo> Create(const SandboxSpec& spec) = 0;            // (blocking)
  virtual Result<SandboxInfo> Get(const std::string& id) = 0;                 // with usage
  // The samples of the sandbox's usage taken from_ms..to_ms (Unix milliseconds, inclusive),
  // oldest first (usage_history.h: the last hour, about every 5 s while it runs). A running
  // sandbox not sampled for an interval is sampled now. 404 for an unknown sandbox; none
  // where no history is kept (tests).
  virtual Result<std::vector<UsageSample>> UsageSamples(const std::string& id, int64_t from_ms, int64_t to_ms) {
    (void)id, (void)from_ms, (void)to_ms;
    return std::vector<UsageSample>{};
  }
  virtual std::vector<SandboxInfo> List(const ListFilter& filter) = 0;
  // The tenant of the sandbox `id` ("" the host admin's), while the manager holds it at all
  // (one being deleted too); nullopt for an id it does not hold. For access checks.
  virtual std::optional<std::string> TenantOf(const std::string& id) = 0;
  virtual Status Delete(const std::string& id) = 0;                           // (blocking)
  // Restarts the lifetime clock: the sandbox ends (or pauses, per on_timeout) timeout_s from
  // now; 0 = never. A paused or stopped sandbox's clock starts when it runs again.
  virtual Result<SandboxInfo> SetTimeout(const std::string& id, int64_t timeout_s) = 0;

  // Lifecycle (blocking). Pause freezes every process (memory kept, no CPU); Resume thaws.
  // Stop ends the processes and keeps the files (state "stopped", no memory used); Start boots
  // a stopped (or failed) sandbox again on the same files, with its settings. Each answers the
  // sandbox; asking for the state it is already in is not an error. 409 when the transition
  // does not exist (pause a stopped sandbox). A call that needs a paused sandbox (exec, files,
  // processes, ports, network) resumes it first.
  virtual Result<SandboxInfo> Pause(const std::string& id) = 0;
  virtual Result<SandboxInfo> Resume(const std::string& id) = 0;
  virtual Result<SandboxInfo> Stop(const std::string& id) = 0;
  virtual Result<SandboxInfo> Start(const std::string& id) = 0;
  // Pause to disk (hibernate): a running or paused sandbox's memory and processes are written
  // out by its runtime (Capabilities::memory_snapshot; 422 elsewhere) and its processes end, so
  // it holds no RAM and outlives a daemon restart and a host reboot; it stays "paused" with
  // paused_to_disk, and Resume (or Start, or any call that needs it) restores every process
  // where it was. Stop drops the image. (blocking)
  virtual Result<SandboxInfo> PauseToDisk(const std::string& id) = 0;

  // Starts a command; the session then streams its events. Non-blocking (io thread).
  virtual boost::asio::awaitable<Result<std::unique_ptr<ExecSession>>> StartExec(
      boost::asio::any_io_executor executor, const std::string& id, ExecRequest request) = 0;

  // Connects to a running sandbox's init for a request of ctl_protocol.h (processes, file
  // operations). 404 unknown sandbox, 409 not running. Non-blocking (io thread).
  virtual boost::asio::awaitable<Result<InitConnection>> ConnectInit(boost::asio::any_io_executor executor,
                                                                     const std::string& id) = 0;

  // A socket (SOCK_STREAM, `domain` AF_INET or AF_INET6) inside a running sandbox's network
  // namespace, not yet connected: the port proxy and port-forward connect it to the sandbox's
  // loopback. 404 unknown sandbox, 409 not running. Quick (one short thread): io-thread safe.
  virtual Result<UniqueFd> SandboxSocket(const std::string& id, int domain) = 0;
  // Whether the port proxy reaches a running sandbox's ports through its init instead
  // (ConnectInit and the "connect" worker: a sandbox with a kernel of its own). 404/409 as
  // SandboxSocket.
  virtual Result<bool> PortsThroughInit(const std::string& /*id*/) { return false; }

  // PUT /v1/sandboxes/{id}/network: the new policy applies at once, open connections it no
  // longer allows are cut. `policy` was validated (net::ParsePolicy). (blocking)
  virtual Result<SandboxInfo> SetNetwork(const std::string& id, const NetworkPolicy& policy) = 0;
  // GET /v1/sandboxes/{id}/egress: the last `limit` records, oldest first, then the
  // connections open now (open = true).
  virtual Result<std::vector<net::EgressRecord>> Egress(const std::string& id, int64_t limit) = 0;
  // A TCP socket the daemon listens on, before it accepts: from then on no sandbox reaches it
  // through its egress, whatever its policy (issue 17). No-op where there is no egress (tests).
  virtual void AddDaemonListener(const net::DaemonListener&) {}

  // Snapshots and forks. A snapshot freezes a running sandbox while its files are captured
  // (a paused one stays paused). 404 unknown sandbox, 409 one that is not running, paused
  // or stopped. With `memory`, its memory and processes are captured at the same instant, on
  // a runtime that can (Capabilities::memory_snapshot; 422 runtime_unsupported elsewhere, 409
  // for a stopped sandbox, which has none). (blocking)
  virtual Result<SnapshotInfo> CreateSnapshot(const std::string& sandbox_id, const std::string& name,
                                              bool memory) = 0;
  virtual std::vector<SnapshotInfo> ListSnapshots() = 0;  // oldest first
  virtual Result<SnapshotInfo> GetSnapshot(const std::string& id) = 0;
  // 409 snapshot_in_use while a sandbox started from it exists. (blocking)
  virtual Status DeleteSnapshot(const std::string& id) = 0;
  // `count` new sandboxes, each with a copy-on-write copy of the sandbox's files as they are
  // now (one freeze for all) and its settings; with `memory`, each also runs every process of
  // the sandbox from where it was (as CreateSnapshot's memory). All or none. (blocking)
  virtual Result<std::vector<SandboxInfo>> Fork(const std::string& sandbox_id, int count, bool memory) = 0;

  // Images, held by the host or by tenants (storage::ImageInfo's `shared` and `tenants`): each
  // call below acts as `tenant` ("" for the host), which sees the host's images and its own.
  virtual std::vector<ImageInfo> ListImages() = 0;  // every holder's
  // Unpacks a rootfs tarball (any compression libarchive reads) into a new image. (blocking)
  virtual Result<ImageInfo> ImportImage(const std::string& name, const std::string& tar_path,
                                        const std::string& tenant) = 0;
  // An image by a local name or a registry reference it was pulled as (Storage::ResolveImage),
  // as the tenant sees it (storage::ImageSeenBy).
  virtual Result<ImageInfo> FindImage(const std::string& name, const std::string& tenant) = 0;
  // Deletes an image by local name, or takes a reference off its image (deleting it once no
  // reference is left), then removes the blobs no image uses. For an image others hold too, the
  // tenant only lets go of it. 409 while a sandbox uses an image that would go; 403 for the
  // host's image by a tenant.
  virtual Status DeleteImage(const std::string& name, const std::string& tenant) = 0;
  // Fetches an image from its registry (storage/image_pull.h), reporting progress to
  // `listener` on the calling thread. (blocking, for as long as the download takes)
  virtual Result<ImageInfo> PullImage(const storage::PullRequest& request, const storage::PullListener& listener) = 0;
  // Writes a stored image (request.image: a name or a reference it was pulled as) to a
  // registry (storage/image_pull.h). (blocking)
  virtual Result<storage::PushResult> PushImage(const storage::PushRequest& request,
                                                const storage::PullListener& listener) = 0;
  // Stores the result of a build (storage.h InstallBuiltImage) as `tenant`'s and gives it `name`
  // (none if ""), taken from the build it named before. 409 if `name` is an imported image's.
  // (blocking)
  virtual Result<ImageInfo> StoreBuiltImage(const storage::BuiltImage& image, const std::string& tar_path,
                                            const std::string& name, const std::string& tenant) = 0;
  // Removes the blobs no image uses and abandoned partial downloads; answers the bytes freed,
  // or nothing while a pull is under way (its blobs belong to no image yet). (blocking)
  virtual Result<std::optional<int64_t>> CollectImageGarbage() = 0;
  // Ends the pulls under way (the server's shutdown: it must not wait for a slow registry).
  virtual void StopImagePulls() {}

  // Named volumes (volume_registry.h), each tenant's its own. Create and Delete are
  // (blocking); Create claims the tenant's volume quotas (429 quota_exceeded); Delete is 409
  // volume_in_use while a sandbox lists the volume. ListVolumes: every tenant's.
  virtual Result<VolumeInfo> CreateVolume(const storage::VolumeKey& key, int64_t size_mb) = 0;
  virtual Result<VolumeInfo> GetVolume(const storage::VolumeKey& key) = 0;
  virtual std::vector<VolumeInfo> ListVolumes() = 0;
  virtual Status DeleteVolume(const storage::VolumeKey& key) = 0;

  // GET /v1/snapshots/{id}/export: the snapshot as a portable .tar.zst (its files with owners
  // relative to the sandbox's root, its image and settings, and a memory snapshot's image vouched
  // for with the memory image key), written to out_fd. (blocking)
  virtual Status ExportSnapshot(const std::string& id, int out_fd) = 0;
  // POST /v1/snapshots/import: a new snapshot from such an archive read from in_fd, with its
  // memory image if `memory` and it has one (422 if this host's key does not vouch for it or its
  // tier here cannot run it). 422 for anything else (or an image this host lacks), 413 past
  // max_bytes of content. (blocking)
  virtual Result<SnapshotInfo> ImportSnapshot(int in_fd, int64_t max_bytes, bool memory) = 0;

  // Tenants' quotas (tenant_quota.h). SetQuota replaces the tenant's (an empty one removes it);
  // it holds from the next call on, and what the tenant has already stays.
  virtual Status SetQuota(const std::string& /*tenant*/, const TenantQuota& /*quota*/) { return {}; }
  virtual TenantQuota Quota(const std::string& /*tenant*/) { return {}; }
  // Tenants' egress rules (tenant_egress.h), kept the same way. Create and SetNetwork add the
  // rules' deny entries to a tenant's sandbox's policy.
  virtual Status SetTenantEgress(const std::string& /*tenant*/, const TenantEgress& /*egress*/) { return {}; }
  virtual TenantEgress TenantEgressOf(const std::string& /*tenant*/) { return {}; }
  // What each tenant holds now (by tenant name; the host admin's "" is not a tenant): the
  // tenants with a quota, a sandbox or a snapshot.
  virtual std::map<std::string, Amounts> UsageByTenant() { return {}; }
  virtual ManagerStats Stats() = 0;
  // The isolation tiers this daemon has and lacks (/healthz).
  virtual std::vector<RuntimeInfo> Runtimes() const { return {}; }
  virtual const DaemonConfig& config() const = 0;

  // Stops timers and the warm pool and discards pooled sandboxes; user sandboxes keep
  // running (they outlive the daemon). (blocking)
  virtual void Shutdown() = 0;
};

}  // namespace bulkhead::core
