// The egress proxy: its io threads, and for each attached sandbox its state (SandboxEgress),
// the acceptors of its proxy listeners (each connection then a ProxyConnection) and its DNS
// resolver (SandboxDns).
#include "net/egress_proxy.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <map>
#include <mutex>
#include <spdlog/spdlog.h>
#include <thread>

#include "net/listener.h"
#include "net/proxy_connection.h"
#include "net/sandbox_dns.h"
#include "net/sandbox_egress.h"
#include "net/upstream_dns.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::net {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

// The proxy listeners of one Attach (127.0.0.1:1000 and [::1]:1000 in the sandbox's namespace),
// replaced when the sandbox is attached again.
class ProxyListeners : public std::enable_shared_from_this<ProxyListeners> {
 public:
  explicit ProxyListeners(asio::io_context& io) : strand_(asio::make_strand(io)) {}

  static std::shared_ptr<ProxyListeners> Start(ProxyContext& context, const std::shared_ptr<SandboxEgress>& sandbox,
                                               UniqueFd tcp4, UniqueFd tcp6) {
    auto self = std::make_shared<ProxyListeners>(context.io);
    for (UniqueFd* fd : {&tcp4, &tcp6}) {
      if (!fd->valid()) continue;
      auto acceptor = AdoptListener(self->strand_, std::move(*fd));
      if (!acceptor.ok()) {
        spdlog::warn("egress proxy: listener of sandbox {}: {}", sandbox->id(), acceptor.error().message);
        continue;
      }
      self->acceptors_.push_back(*acceptor);
      ProxyContext* shared = &context;
      asio::co_spawn(self->strand_,
                     AcceptLoop(*acceptor, context.io,
                                [shared, sandbox](StreamSocket socket) {
                                  ServeProxyConnection(*shared, sandbox, std::move(socket));
                                }),
                     asio::detached);
    }
    return self;
  }

  // Any thread. Connections already accepted go on.
  void Close() {
    asio::post(strand_, [self = shared_from_this()] {
      error_code ignored;
      for (const auto& acceptor : self->acceptors_) acceptor->close(ignored);
    });
  }

 private:
  asio::strand<asio::io_context::executor_type> strand_;
  std::vector<std::shared_ptr<Acceptor>> acceptors_;
};

class EgressProxyImpl final : public EgressProxy {
 public:
  EgressProxyImpl(const EgressProxyOptions& options, EgressSink& sink, std::vector<DnsServer> dns_servers)
      : io_(std::make_unique<asio::io_context>()),
        work_(asio::make_work_guard(*io_)),
        upstream_(std::move(dns_servers)),
        context_{*io_, sink, host_addresses_, upstream_, options.connect_timeout} {
    const int threads = std::max(1, options.threads);
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  }

  ~EgressProxyImpl() override {
    work_.reset();
    io_->stop();
    for (auto& thread : threads_) thread.join();
    // The listeners, sockets and coroutine frames go while everything they refer to is alive.
    sandboxes_.clear();
    io_.reset();
  }

  void Attach(const std::string& sandbox_id, NetnsListeners listeners, Policy policy) override {
    std::lock_guard lock(mutex_);
    Attached& attached = sandboxes_[sandbox_id];
    if (attached.egress) {
      attached.proxy->Close();
      attached.dns->Close();
      attached.egress->SetPolicy(std::move(policy));
    } else {
      attached.egress = std::make_shared<SandboxEgress>(context_, sandbox_id, std::move(policy));
    }
    attached.proxy = ProxyListeners::Start(context_, attached.egress, std::move(listeners.tcp4),
                                           std::move(listeners.tcp6));
    attached.dns = SandboxDns::Start(context_, attached.egress, std::move(listeners.dns_udp4),
                                     std::move(listeners.dns_udp6), std::move(listeners.dns_tcp4),
                                     std::move(listeners.dns_tcp6));
  }

  void SetPolicy(const std::string& sandbox_id, Policy policy) override {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(sandbox_id);
    if (it != sandboxes_.end()) it->second.egress->SetPolicy(std::move(policy));
  }

  void Detach(const std::string& sandbox_id) override {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(sandbox_id);
    if (it == sandboxes_.end()) return;
    it->second.proxy->Close();
    it->second.dns->Close();
    it->second.egress->Close("sandbox network detached");
    sandboxes_.erase(it);
  }

  std::vector<EgressRecord> Open(const std::string& sandbox_id) override {
    std::shared_ptr<SandboxEgress> egress;
    {
      std::lock_guard lock(mutex_);
      auto it = sandboxes_.find(sandbox_id);
      if (it == sandboxes_.end()) return {};
      egress = it->second.egress;
    }
    return egress->Open();
  }

  void AddDaemonListener(const DaemonListener& listener) override { host_addresses_.AddListener(listener); }

 private:
  struct Attached {
    std::shared_ptr<SandboxEgress> egress;
    std::shared_ptr<ProxyListeners> proxy;
    std::shared_ptr<SandboxDns> dns;
  };

  void Run() {
    for (;;) {
      try {
        io_->run();
        return;
      } catch (const std::exception& e) {
        // A handler that threw: the others carry on.
        spdlog::error("egress proxy: {}", e.what());
      }
    }
  }

  std::unique_ptr<asio::io_context> io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  HostAddresses host_addresses_;
  UpstreamDns upstream_;
  ProxyContext context_;
  std::mutex mutex_;
  std::map<std::string, Attached> sandboxes_;
  std::vector<std::thread> threads_;
};

}  // namespace

Result<std::unique_ptr<EgressProxy>> EgressProxy::Start(EgressProxyOptions options, EgressSink& sink) {
  auto servers = UpstreamServers(options.dns_servers);
  if (!servers.ok()) return servers.error();
  if (servers->empty()) spdlog::warn("egress proxy: no upstream DNS server (none configured or in /etc/resolv.conf)");
  std::unique_ptr<EgressProxy> proxy = std::make_unique<EgressProxyImpl>(options, sink, std::move(*servers));
  return proxy;
}

}  // namespace bulkhead::net
