// What `bulkhead serve` was started with.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "storage/registry_settings.h"

namespace bulkhead::core {

struct DaemonConfig {
  std::string state_dir = "/var/lib/bulkhead";  // --state-dir / BULKHEAD_STATE
  std::string listen = "127.0.0.1:7420";        // --listen / BULKHEAD_LISTEN; "" = unix socket only
  std::string api_key;                           // BULKHEAD_API_KEY, else <state>/api-key
  // What vouches for the memory images this host exports and imports (<state>/memory-image-key,
  // loaded by the daemon): hosts given the same file restore each other's. "" = none taken.
  std::string memory_image_key;
  // --warm-pool: ready sandboxes of the host image kept booted in advance, per runtime: `N`
  // for every runtime (and none of the defaults below), `RUNTIME=N` for one. A pooled gvisor
  // sandbox waits as a Sentry with its threads, so fewer of them are kept by default; a pooled
  // microvm guest holds its memory (~100 MiB RSS for the default 1 GiB guest), so one.
  // The default runtime's pool and those named RUNTIME=N fill from the start; another
  // runtime's fills from its first create, so a host that never uses a tier pays nothing for it.
  int warm_pool = 4;
  std::map<std::string, int> runtime_warm_pools = {{"gvisor", 2}, {"microvm", 1}};
  std::set<std::string> warm_pool_named;  // the runtimes given as RUNTIME=N
  int WarmPool(const std::string& runtime) const {
    auto it = runtime_warm_pools.find(runtime);
    return it == runtime_warm_pools.end() ? warm_pool : it->second;
  }
  bool WarmPoolAtStart(const std::string& runtime) const {
    return runtime == default_runtime || warm_pool_named.contains(runtime);
  }
  // --warm-pool IMAGE=N and IMAGE@RUNTIME=N: ready sandboxes of another image (a local name or
  // a registry reference, pulled at start when not stored), on the default runtime or RUNTIME
  // (runtime "" = the default). They fill from the start.
  struct ImagePool {
    std::string image;
    std::string runtime;
    int count = 0;
  };
  std::vector<ImagePool> image_warm_pools;
  // --default-runtime: the isolation tier of a sandbox whose create names none (the API's
  // "runtime", the E2B front's creates). A tier this host lacks is refused at start.
  std::string default_runtime = "native";
  // --runsc: the runsc binary of the gvisor tier; "" = the pinned build, else Debian's
  // (runtime/gvisor/runsc.h).
  std::string runsc;
  // --idle-pause disk: a sandbox that reaches its timeout with on_timeout "pause", or its idle
  // timeout, is paused to disk where its runtime can (gvisor), not frozen in memory.
  bool idle_pause_to_disk = false;
  // --no-microvm-templates: every microvm sandbox boots its guest (runtime/microvm/template.h).
  bool microvm_templates = true;
  // microvm sandboxes take memory snapshots, forks with memory and pauses to disk
  // (runtime/microvm/memory_image.h) unless --no-microvm-memory-snapshots.
  bool microvm_memory_snapshots = true;
  int io_threads = 2;      // threads serving HTTP
  int blocking_threads = 4;  // threads running sandbox setup and teardown
  // --output-rate: MiB/s of one sandbox's command output the daemon relays, over all its
  // execs and followers (core/output_budget.h); 0 = no cap.
  int64_t output_rate_mib = 32;
  // --max-sandboxes: sandboxes held at once (warm pools aside); the CLI's default comes from
  // the host's memory (host_limits.h).
  int64_t max_sandboxes = 1000;
  // --audit-keep-days: how long audit records are kept (core/audit_log.h); 0 = for ever.
  int64_t audit_keep_days = 0;
  // --egress-keep-days: how long a sandbox's egress records are kept (they go with the sandbox
  // in any case); 0 = as long as the sandbox, up to its newest StateDb::kEgressKept.
  int64_t egress_keep_days = 0;
  // --tls-cert, --tls-key: PEM files; with them every TCP listener speaks TLS. Both or none.
  std::string tls_cert, tls_key;
  int64_t storage_gb = 0;
  // --storage-driver: "overlay" (file copies, reflinked on xfs), "btrfs" (subvolume
  // snapshots; a btrfs image is made if the state dir has none) or "" = what the machine
  // gives (xfs, else btrfs, else plain directories).
  std::string storage_driver;  // size of the loop-mounted xfs image; 0 = derive from free disk
  // Upstream DNS servers of the sandboxes' resolver and the egress proxy ("IP" or "IP:port",
  // "[v6]:port"); empty = the nameservers in the host's /etc/resolv.conf. --dns-server
  std::vector<std::string> dns_servers;
  // Host names {port}-{id}.{preview_domain} reach a sandbox's ports. --preview-domain
  std::string preview_domain = "localhost:7420";
  // The E2B-compatible front's TCP address (E2B_API_URL, E2B_SANDBOX_URL); "" = none. --e2b-listen
  std::string e2b_listen = "127.0.0.1:7421";
  bool e2b_listen_given = false;  // not derived: failing to bind it stops the daemon
  // The E2B sandboxes' "domain": host names {port}-{id}.{e2b_domain} sent to the E2B front
  // reach a sandbox's ports (the SDKs' getHost). "" = from its address. --e2b-domain
  std::string e2b_domain;
  // Open-mode sandboxes take a /30 each from this IPv4 prefix for their veth pair (UDP and
  // ICMP out, NATed). --open-subnet
  std::string open_subnet = "10.213.0.0/16";
  // Image registries: --default-registry, --insecure-registry, --registry-auth, --registry-ca.
  storage::RegistrySettings registry;
};

}  // namespace bulkhead::core
