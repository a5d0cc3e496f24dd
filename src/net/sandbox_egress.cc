#include "net/sandbox_egress.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/time_format.h"

namespace bulkhead::net {
namespace {

EgressRecord TcpRecord(const std::optional<std::string>& name, const std::optional<IpAddress>& address,
                       uint16_t port) {
  EgressRecord record;
  record.protocol = "tcp";
  if (name) record.name = NormalizeName(*name).value_or(*name);
  if (address) record.address = address->ToString();
  record.port = port;
  return record;
}

int64_t MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

SandboxEgress::SandboxEgress(ProxyContext& context, std::string sandbox_id, Policy policy)
    : context_(context), id_(std::move(sandbox_id)), policy_(std::make_shared<const Policy>(std::move(policy))) {}

std::shared_ptr<const Policy> SandboxEgress::policy() const {
  std::lock_guard lock(mutex_);
  return policy_;
}

std::shared_ptr<SandboxEgress::Connection> SandboxEgress::Register(std::function<void(const std::string&)> cut) {
  std::lock_guard lock(mutex_);
  if (closed_) return nullptr;
  if (connections_.size() >= kMaxConnections) {
    spdlog::warn("egress proxy: sandbox {} has {} connections open; refusing more", id_, connections_.size());
    return nullptr;
  }
  auto connection = std::make_shared<Connection>();
  connection->cut = std::move(cut);
  connections_.emplace(connection.get(), connection);
  return connection;
}

void SandboxEgress::Unregister(const std::shared_ptr<Connection>& connection) {
  std::lock_guard lock(mutex_);
  connections_.erase(connection.get());
}

Verdict SandboxEgress::Admit(Connection& connection, const std::optional<std::string>& name,
                             const IpAddress& address, uint16_t port) {
  const auto host = context_.host_addresses.Get();
  EgressRecord record = TcpRecord(name, address, port);
  record.sandbox_id = id_;
  record.time_ms = UnixMillis();
  Verdict verdict;
  {
    std::lock_guard lock(mutex_);
    verdict = closed_ ? Verdict{false, "the sandbox's network was detached"}
                      : Decide(*policy_, name, address, port, *host);
    if (verdict.allowed) {
      connection.admitted = true;
      connection.name = name;
      connection.address = address;
      connection.port = port;
      connection.start = std::chrono::steady_clock::now();
    }
  }
  record.allowed = verdict.allowed;
  record.reason = verdict.reason;
  // The sink writes to the database: not under the lock.
  record.id = context_.sink.Begin(record);
  if (verdict.allowed) {
    std::lock_guard lock(mutex_);
    connection.record = std::move(record);
    connection.listed = true;
  }
  return verdict;
}

void SandboxEgress::Finish(Connection& connection, const std::string& reason) {
  int64_t id = 0;
  std::chrono::steady_clock::time_point start;
  {
    std::lock_guard lock(mutex_);
    if (!connection.admitted) return;
    connection.admitted = false;
    connection.listed = false;
    id = connection.record.id;
    start = connection.start;
  }
  context_.sink.Finish(id, connection.counters->a_to_b.load(), connection.counters->b_to_a.load(), MillisSince(start),
                       reason);
}

void SandboxEgress::LogDenied(const std::optional<std::string>& name, const std::optional<IpAddress>& address,
                              uint16_t port, const std::string& reason) {
  EgressRecord record = TcpRecord(name, address, port);
  record.allowed = false;
  record.reason = reason;
  Log(std::move(record));
}

void SandboxEgress::LogFailed(const std::optional<std::string>& name, const std::optional<IpAddress>& address,
                              uint16_t port, const std::string& reason) {
  EgressRecord record = TcpRecord(name, address, port);
  record.allowed = true;
  const int64_t id = Log(std::move(record));
  context_.sink.Finish(id, 0, 0, 0, reason);
}

int64_t SandboxEgress::Log(EgressRecord record) {
  record.sandbox_id = id_;
  if (record.time_ms == 0) record.time_ms = UnixMillis();
  return context_.sink.Begin(record);
}

void SandboxEgress::SetPolicy(Policy policy) {
  const auto host = context_.host_addresses.Get();
  std::vector<std::function<void(const std::string&)>> cuts;
  {
    std::lock_guard lock(mutex_);
    policy_ = std::make_shared<const Policy>(std::move(policy));
    for (const auto& [key, connection] : connections_) {
      if (!connection->admitted) continue;
      if (!Decide(*policy_, connection->name, connection->address, connection->port, *host).allowed) {
        cuts.push_back(connection->cut);
      }
    }
  }
  for (const auto& cut : cuts) cut("policy changed");
}

void SandboxEgress::Close(const std::string& reason) {
  std::vector<std::function<void(const std::string&)>> cuts;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    for (const auto& [key, connection] : connections_) cuts.push_back(connection->cut);
  }
  for (const auto& cut : cuts) cut(reason);
}

std::vector<EgressRecord> SandboxEgress::Open() {
  std::vector<EgressRecord> out;
  std::lock_guard lock(mutex_);
  for (const auto& [key, connection] : connections_) {
    if (!connection->listed) continue;
    EgressRecord record = connection->record;
    record.bytes_out = connection->counters->a_to_b.load();
    record.bytes_in = connection->counters->b_to_a.load();
    record.duration_ms = MillisSince(connection->start);
    record.open = true;
    out.push_back(std::move(record));
  }
  std::sort(out.begin(), out.end(), [](const EgressRecord& a, const EgressRecord& b) { return a.id < b.id; });
  return out;
}

}  // namespace bulkhead::net
