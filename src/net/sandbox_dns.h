// A sandbox's DNS resolver: the UDP and TCP listeners on its 127.0.0.1:53 and [::1]:53
// (resolv.conf points there, and the namespace's rules send every port-53 packet there).
// A name the policy allows is asked upstream under a fresh id and the answer relayed back, its
// A/AAAA records remembered for the transparent proxy (SandboxEgress::names); any other name
// gets NXDOMAIN and is never sent anywhere, so lookups cannot carry data out. Every lookup is
// logged ("dns").
#pragma once
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/strand.hpp>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "net/listener.h"
#include "net/sandbox_egress.h"

namespace bulkhead::net {

// The reply to one query from the sandbox (nullopt: not a DNS message, dropped). `tcp`: the
// query came over TCP, so a long answer can be had from upstream over TCP too.
boost::asio::awaitable<std::optional<std::string>> AnswerQuery(ProxyContext& context,
                                                               std::shared_ptr<SandboxEgress> sandbox,
                                                               std::string query, bool tcp);

class SandboxDns : public std::enable_shared_from_this<SandboxDns> {
 public:
  // Serves the sockets (any may be invalid: no IPv6 in the namespace).
  static std::shared_ptr<SandboxDns> Start(ProxyContext& context, std::shared_ptr<SandboxEgress> sandbox,
                                           UniqueFd udp4, UniqueFd udp6, UniqueFd tcp4, UniqueFd tcp6);
  SandboxDns(ProxyContext& context, std::shared_ptr<SandboxEgress> sandbox);
  // Stops serving (any thread); lookups under way still answer.
  void Close();

 private:
  // Lookups of a sandbox under way at once; more are dropped (its resolver asks again).
  static constexpr int kMaxInFlight = 256;
  static constexpr int kMaxTcpClients = 64;

  boost::asio::awaitable<void> ServeUdp(std::shared_ptr<boost::asio::ip::udp::socket> socket);
  boost::asio::awaitable<void> AnswerUdp(std::shared_ptr<boost::asio::ip::udp::socket> socket,
                                         boost::asio::ip::udp::endpoint peer, std::string query);
  boost::asio::awaitable<void> ServeTcp(StreamSocket socket);

  ProxyContext& context_;
  std::shared_ptr<SandboxEgress> sandbox_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  // On strand_:
  std::vector<std::shared_ptr<boost::asio::ip::udp::socket>> udp_;
  std::vector<std::shared_ptr<Acceptor>> tcp_;
  int in_flight_ = 0;
  std::atomic<int> tcp_clients_{0};  // each on a strand of its own
};

}  // namespace bulkhead::net
