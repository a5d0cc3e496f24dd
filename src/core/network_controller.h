// The network side of the sandboxes of one daemon: shapes each sandbox's network namespace
// for its mode (net/netns.h), gives open-mode sandboxes their link for UDP and ICMP
// (net/open_link.h), serves their egress through the proxy (net/egress_proxy.h) and keeps
// the egress log in the state database. Thread-safe.
#pragma once
#include <memory>
#include <mutex>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/config.h"
#include "core/types.h"
#include "net/egress_proxy.h"
#include "net/open_link.h"
#include "store/state_db.h"

namespace bulkhead::core {

class NetworkController {
 public:
  static Result<std::unique_ptr<NetworkController>> Start(const DaemonConfig& config, store::StateDb& db);
  ~NetworkController();

  // Brings the sandbox whose network namespace is `netns_fd` to `policy` (also after a daemon
  // restart, to serve it again). Open connections the new policy forbids are cut. (blocking)
  Status Apply(const std::string& sandbox_id, int netns_fd, const NetworkPolicy& policy);
  // The sandbox stopped (its namespace is going away): stop serving it; its log stays.
  void Detach(const std::string& sandbox_id);
  // The sandbox is going away: stop serving it and forget its log.
  void Forget(const std::string& sandbox_id);
  // The last `limit` log records, oldest first, then the open connections.
  Result<std::vector<net::EgressRecord>> Egress(const std::string& sandbox_id, int64_t limit);
  // A TCP socket of the daemon's own, out of every sandbox's reach from now on.
  void AddDaemonListener(const net::DaemonListener& listener) { proxy_->AddDaemonListener(listener); }

 private:
  class Sink;
  NetworkController(store::StateDb& db, std::unique_ptr<Sink> sink);

  store::StateDb& db_;
  std::unique_ptr<Sink> sink_;
  std::unique_ptr<net::EgressProxy> proxy_;
  std::unique_ptr<net::OpenLinks> links_;
  std::mutex mu_;  // serializes Apply and Forget; guards attached_
  // Sandboxes whose namespace has the proxy's listeners, and their mode (allowlist or open).
  std::map<std::string, net::Mode> attached_;
};

}  // namespace bulkhead::core
