// The egress proxy's state for one attached sandbox: its policy, the names its DNS lookups
// were answered with, and its open connections, which a new policy or a detach cuts. Also
// what every part of the proxy shares (ProxyContext). Internal to the egress proxy.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "net/address_names.h"
#include "net/allow_rules.h"
#include "net/egress_proxy.h"
#include "net/host_addresses.h"
#include "net/relay.h"
#include "net/upstream_dns.h"

namespace bulkhead::net {

struct ProxyContext {
  boost::asio::io_context& io;
  EgressSink& sink;
  HostAddresses& host_addresses;
  UpstreamDns& upstream;
  std::chrono::milliseconds connect_timeout;
};

// Thread-safe.
class SandboxEgress {
 public:
  // More open connections than this and the sandbox's new ones are refused: one sandbox cannot
  // take all of the daemon's descriptors.
  static constexpr size_t kMaxConnections = 1024;

  // One TCP connection of the sandbox, from its accept until it is closed.
  struct Connection {
    std::function<void(const std::string& reason)> cut;  // closes it from any thread
    std::shared_ptr<RelayCounters> counters = std::make_shared<RelayCounters>();
    // Set when Admit allowed it:
    bool admitted = false;  // SetPolicy re-decides it
    bool listed = false;    // Open() lists it (its record has its id)
    std::optional<std::string> name;
    IpAddress address;
    uint16_t port = 0;
    EgressRecord record;
    std::chrono::steady_clock::time_point start;
  };

  SandboxEgress(ProxyContext& context, std::string sandbox_id, Policy policy);

  const std::string& id() const { return id_; }
  std::shared_ptr<const Policy> policy() const;
  AddressNames& names() { return names_; }

  // A new connection; nullptr when the sandbox has too many or is detached.
  std::shared_ptr<Connection> Register(std::function<void(const std::string& reason)> cut);
  void Unregister(const std::shared_ptr<Connection>& connection);

  // The final decision on a connection about to be relayed to `address`:`port` (called `name`,
  // if known): asks the policy in force now, logs the decision, and when allowed counts the
  // connection open (Open(), and SetPolicy cuts it if a later policy forbids it). Deciding
  // under the same lock as SetPolicy means no connection slips between a policy and its cuts.
  Verdict Admit(Connection& connection, const std::optional<std::string>& name, const IpAddress& address,
                uint16_t port);
  // An admitted connection ended: logs its byte counts, its duration and why it was cut, if it was.
  void Finish(Connection& connection, const std::string& reason);

  // Decisions that never became a relayed connection.
  void LogDenied(const std::optional<std::string>& name, const std::optional<IpAddress>& address, uint16_t port,
                 const std::string& reason);
  // Allowed, but the destination could not be looked up or connected to.
  void LogFailed(const std::optional<std::string>& name, const std::optional<IpAddress>& address, uint16_t port,
                 const std::string& reason);
  // A record as it is (the DNS resolver's): the sandbox id and time are filled in. Answers its id.
  int64_t Log(EgressRecord record);

  // Replaces the policy and cuts the admitted connections it forbids ("policy changed").
  void SetPolicy(Policy policy);
  // Detached: cuts every connection and refuses new ones.
  void Close(const std::string& reason);
  std::vector<EgressRecord> Open();

 private:
  ProxyContext& context_;
  const std::string id_;
  AddressNames names_;
  mutable std::mutex mutex_;
  std::shared_ptr<const Policy> policy_;
  bool closed_ = false;
  std::map<Connection*, std::shared_ptr<Connection>> connections_;
};

}  // namespace bulkhead::net
