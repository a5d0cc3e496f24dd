// What the API reaches in a running sandbox: commands, init connections, sockets in its
// network namespace and its network policy.
#include <sys/socket.h>

#include "core/manager_impl.h"
#include "net/netns.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::core {

std::shared_ptr<void> SandboxManagerImpl::BusyToken(const std::shared_ptr<Sandbox>& sb) {
  {
    std::lock_guard lock(mu_);
    sb->busy++;
  }
  return std::shared_ptr<void>(nullptr, [this, sb](void*) {
    std::lock_guard lock(mu_);
    sb->busy--;
    sb->last_activity_ms = UnixMillis();
  });
}

std::shared_ptr<OutputBudget> SandboxManagerImpl::OutputBudgetLocked(Sandbox& sb) {
  if (config_.output_rate_mib <= 0 || !sb.info.spec.output_capped) return nullptr;
  if (!sb.output_budget) {
    const int64_t rate = config_.output_rate_mib * 1024 * 1024;
    // A second's worth at once, and at least one default-sized exec answer (16 MiB).
    sb.output_budget = std::make_shared<OutputBudget>(rate, std::max<int64_t>(rate, 16 * 1024 * 1024));
  }
  return sb.output_budget;
}

Result<int> SandboxManagerImpl::NetnsOf(const Sandbox& sb) {
  if (!sb.netns) return MakeError(ErrorCode::kConflict, "sandbox " + sb.info.id + " has no network namespace");
  return sb.netns.get();
}

Result<UniqueFd> SandboxManagerImpl::SandboxSocket(const std::string& id, int domain) {
  auto sb = RunningSandbox(id);
  if (!sb) return sb.error();
  if ((*sb)->tier->capabilities().ports_through_init)
    return MakeError(ErrorCode::kInternal, "sandbox " + id + "'s ports are reached through its init");
  auto netns = NetnsOf(**sb);
  if (!netns) return netns.error();
  return net::SocketInNetns(*netns, domain, SOCK_STREAM);
}

Result<bool> SandboxManagerImpl::PortsThroughInit(const std::string& id) {
  auto sb = RunningSandbox(id);
  if (!sb) return sb.error();
  return (*sb)->tier->capabilities().ports_through_init;
}

Result<SandboxInfo> SandboxManagerImpl::SetNetwork(const std::string& id, const NetworkPolicy& asked) {
  // A tenant's sandbox keeps its tenant's deny entries whatever policy it is given.
  const NetworkPolicy policy = WithTenantDeny(asked, TenantEgressOf(TenantOf(id).value_or("")));
  {
    std::lock_guard lock(mu_);
    auto sb = FindLocked(id);
    if (sb) BH_TRY(NetworkModeOffered(*sb->tier, policy));
    if (sb && sb->state == State::kStopped) {  // applies when it starts
      sb->info.spec.network = policy;
      BH_TRY(db_->Put(RowOf(*sb)));
      return InfoOf(*sb);
    }
  }
  auto found = RunningSandbox(id);
  if (!found) return found.error();
  Sandbox& sb = **found;
  auto netns = NetnsOf(sb);
  if (!netns) return netns.error();
  std::lock_guard change(sb.network_mu);
  if (sb.tier->capabilities().nic_from_boot && policy.mode != "none") {
    auto nic = net::NetnsHasGuestLink(*netns);
    if (!nic) return nic.error();
    if (!*nic)
      return MakeError(ErrorCode::kInvalid,
                       "sandbox " + id + " runs on the " + sb.tier->name() + " runtime and booted with network mode "
                       "none, so its guest has no network device: stop it, set the mode, and start it",
                       "runtime_unsupported");
  }
  BH_TRY(network_->Apply(id, *netns, policy));
  std::lock_guard lock(mu_);
  sb.info.spec.network = policy;
  BH_TRY(db_->Put(RowOf(sb)));
  return InfoOf(sb);
}

Result<std::vector<net::EgressRecord>> SandboxManagerImpl::Egress(const std::string& id, int64_t limit) {
  {
    std::lock_guard lock(mu_);
    if (!FindLocked(id)) return NoSandbox(id);
  }
  return network_->Egress(id, limit);
}

Result<SandboxManagerImpl::InitAccess> SandboxManagerImpl::AccessInit(const std::string& id) {
  Result<std::shared_ptr<Sandbox>> sb = RunningSandbox(id);
  if (!sb.ok()) return sb.error();
  InitAccess access;
  {
    std::lock_guard lock(mu_);
    access.spec = (*sb)->info.spec;
    access.budget = OutputBudgetLocked(**sb);
    access.init = (*sb)->init;
    access.proxy_host = (*sb)->tier->ProxyHost();
  }
  if (!access.init) return WrongState(id, "stopped", "it stopped meanwhile");
  access.busy = BusyToken(*sb);
  return access;
}

boost::asio::awaitable<Result<std::unique_ptr<ExecSession>>> SandboxManagerImpl::StartExec(
    boost::asio::any_io_executor executor, const std::string& id, ExecRequest req) {
  Result<InitAccess> access = AccessInit(id);
  if (!access.ok()) co_return access.error();
  {
    std::lock_guard lock(mu_);
    stats_.execs_total++;
  }
  const std::string payload = ctl::Encode(InitExecPayload(req, access->spec, access->proxy_host));
  Result<std::unique_ptr<ExecSession>> session =
      co_await ExecSession::Start(executor, std::move(access->init), payload, std::move(req.stdin_data));
  if (session.ok()) {
    (*session)->Hold(std::move(access->busy));
    (*session)->PaceWith(std::move(access->budget));
  }
  co_return session;
}

boost::asio::awaitable<Result<InitConnection>> SandboxManagerImpl::ConnectInit(boost::asio::any_io_executor executor,
                                                                               const std::string& id) {
  Result<InitAccess> access = AccessInit(id);
  if (!access.ok()) co_return access.error();
  Result<std::unique_ptr<CtlClient>> client = co_await CtlClient::Connect(executor, std::move(access->init));
  if (!client.ok()) co_return client.error();
  (*client)->PaceWith(std::move(access->budget));
  co_return InitConnection{std::move(client.value()), std::move(access->spec), std::move(access->busy),
                           std::move(access->proxy_host)};
}

}  // namespace bulkhead::core
