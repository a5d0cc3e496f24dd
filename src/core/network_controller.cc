#include "core/network_controller.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <functional>
#include <set>

#include "net/netns.h"

namespace bulkhead::core {

// The proxy's log goes to the state database. A failed write is logged, never fatal: the
// connection it describes has already been decided.
class NetworkController::Sink : public net::EgressSink {
 public:
  explicit Sink(store::StateDb& db) : db_(db) {}

  int64_t Begin(const net::EgressRecord& r) override {
    store::EgressRow row;
    row.sandbox_id = r.sandbox_id;
    row.time_ms = r.time_ms;
    row.protocol = r.protocol;
    row.name = r.name;
    row.address = r.address;
    row.port = r.port;
    row.query_type = r.query_type;
    row.allowed = r.allowed;
    row.reason = r.reason;
    row.bytes_out = r.bytes_out;
    row.bytes_in = r.bytes_in;
    row.duration_ms = r.duration_ms;
    auto id = db_.InsertEgress(row);
    if (!id) {
      spdlog::warn("egress log: {}", id.error().message);
      return 0;
    }
    return *id;
  }

  void Finish(int64_t id, int64_t bytes_out, int64_t bytes_in, int64_t duration_ms,
              const std::string& reason) override {
    if (id == 0) return;
    if (auto st = db_.FinishEgress(id, bytes_out, bytes_in, duration_ms, reason); !st)
      spdlog::warn("egress log: {}", st.error().message);
  }

 private:
  store::StateDb& db_;
};

NetworkController::NetworkController(store::StateDb& db, std::unique_ptr<Sink> sink)
    : db_(db), sink_(std::move(sink)) {}

NetworkController::~NetworkController() { proxy_.reset(); }  // before the sink it writes to

Result<std::unique_ptr<NetworkController>> NetworkController::Start(const DaemonConfig& config, store::StateDb& db) {
  std::unique_ptr<NetworkController> controller(new NetworkController(db, std::make_unique<Sink>(db)));
  net::EgressProxyOptions options;
  options.dns_servers = config.dns_servers;
  auto proxy = net::EgressProxy::Start(options, *controller->sink_);
  if (!proxy) return proxy.error();
  controller->proxy_ = std::move(*proxy);
  auto subnet = net::IpPrefix::Parse(config.open_subnet);
  if (!subnet) return MakeError(ErrorCode::kInvalid, "--open-subnet " + config.open_subnet + " is not an IPv4 prefix");
  // One tag per state directory: a restarted daemon finds (and removes) its predecessor's links.
  char tag[8];
  std::snprintf(tag, sizeof(tag), "%04zx", std::hash<std::string>{}(config.state_dir) & 0xffff);
  auto links = net::OpenLinks::Start(*subnet, tag);
  if (!links) return links.error();
  controller->links_ = std::move(*links);
  return controller;
}

Status NetworkController::Apply(const std::string& sandbox_id, int netns_fd, const NetworkPolicy& spec) {
  auto policy = net::ParsePolicy(spec.mode, spec.allow, spec.deny);
  if (!policy) return policy.error();
  const net::Mode mode = policy->mode;
  std::lock_guard lock(mu_);
  auto attached = attached_.find(sandbox_id);
  if (mode == net::Mode::kNone) {
    proxy_->Detach(sandbox_id);  // first: its connections end before the routes do
    bool had_link = attached != attached_.end() && attached->second == net::Mode::kOpen;
    if (attached != attached_.end()) attached_.erase(attached);
    if (had_link) BH_TRY(links_->Remove(sandbox_id, netns_fd));
    auto done = net::ConfigureNetns(netns_fd, net::Mode::kNone);
    return done ? Status() : done.error();
  }
  if (attached != attached_.end()) {
    // allowlist and open share the namespace's listeners and table; open adds the link.
    if (attached->second == net::Mode::kOpen && mode != net::Mode::kOpen) {
      BH_TRY(links_->Remove(sandbox_id, netns_fd));  // before the policy opens nothing more
    }
    // Open mode's UDP and ICMP follow the deny entries before the link is (re)made.
    if (mode == net::Mode::kOpen) BH_TRY(net::SetDenyEntries(netns_fd, *policy));
    proxy_->SetPolicy(sandbox_id, *policy);
    attached->second = mode;
    if (mode == net::Mode::kOpen) return links_->Add(sandbox_id, netns_fd);
    return {};
  }
  auto listeners = net::ConfigureNetns(netns_fd, mode);
  if (!listeners) return listeners.error();
  if (mode == net::Mode::kOpen && !policy->deny.empty()) BH_TRY(net::SetDenyEntries(netns_fd, *policy));
  proxy_->Attach(sandbox_id, std::move(*listeners), *policy);
  attached_[sandbox_id] = mode;
  if (mode == net::Mode::kOpen) return links_->Add(sandbox_id, netns_fd);
  return {};
}

void NetworkController::Detach(const std::string& sandbox_id) {
  std::lock_guard lock(mu_);
  proxy_->Detach(sandbox_id);
  attached_.erase(sandbox_id);
  // The namespace is gone or going, and the link with it; this frees its address.
  if (auto st = links_->Remove(sandbox_id, -1); !st) spdlog::warn("open-mode link: {}", st.error().message);
}

void NetworkController::Forget(const std::string& sandbox_id) {
  Detach(sandbox_id);
  if (auto st = db_.RemoveEgress(sandbox_id); !st) spdlog::warn("egress log: {}", st.error().message);
}

Result<std::vector<net::EgressRecord>> NetworkController::Egress(const std::string& sandbox_id, int64_t limit) {
  auto rows = db_.LoadEgress(sandbox_id, limit);
  if (!rows) return rows.error();
  std::vector<net::EgressRecord> out;
  std::vector<net::EgressRecord> open = proxy_->Open(sandbox_id);
  std::set<int64_t> open_ids;
  for (const auto& r : open) open_ids.insert(r.id);
  for (const auto& row : *rows) {
    if (open_ids.count(row.id)) continue;  // listed below with its live counts
    net::EgressRecord r;
    r.id = row.id;
    r.sandbox_id = row.sandbox_id;
    r.time_ms = row.time_ms;
    r.protocol = row.protocol;
    r.name = row.name;
    r.address = row.address;
    r.port = static_cast<uint16_t>(row.port);
    r.query_type = row.query_type;
    r.allowed = row.allowed;
    r.reason = row.reason;
    r.bytes_out = row.bytes_out;
    r.bytes_in = row.bytes_in;
    r.duration_ms = row.duration_ms;
    out.push_back(std::move(r));
  }
  for (auto& r : open) out.push_back(std::move(r));
  return out;
}

}  // namespace bulkhead::core
