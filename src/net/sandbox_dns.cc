#include "net/sandbox_dns.h"

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "net/deadline.h"
#include "net/dns_message.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::net {
namespace {

namespace asio = boost::asio;
using asio::ip::udp;
using boost::system::error_code;

constexpr std::chrono::seconds kTcpIdle{10};
constexpr size_t kHeaderSize = 12;

auto Redirect(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

std::string TypeName(uint16_t type) {
  switch (type) {
    case dns::kTypeA: return "A";
    case 2: return "NS";
    case dns::kTypeCname: return "CNAME";
    case 6: return "SOA";
    case dns::kTypePtr: return "PTR";
    case dns::kTypeMx: return "MX";
    case dns::kTypeTxt: return "TXT";
    case dns::kTypeAaaa: return "AAAA";
    case dns::kTypeSrv: return "SRV";
    case 64: return "SVCB";
    case dns::kTypeHttps: return "HTTPS";
    case dns::kTypeAny: return "ANY";
    default: return "TYPE" + std::to_string(type);
  }
}

// A query we cannot read but that has a header: FORMERR with its id, so the client does not
// wait for a timeout. Anything shorter, or a reply, is dropped.
std::optional<std::string> FormatError(std::string_view packet) {
  if (packet.size() < kHeaderSize || (static_cast<uint8_t>(packet[2]) & 0x80) != 0) return std::nullopt;
  std::string reply(kHeaderSize, '\0');
  reply[0] = packet[0];
  reply[1] = packet[1];
  reply[2] = static_cast<char>(0x80 | (packet[2] & 0x79));  // QR, the opcode and RD as asked
  reply[3] = static_cast<char>(0x80 | dns::kRcodeFormErr);  // RA
  return reply;
}

}  // namespace

asio::awaitable<std::optional<std::string>> AnswerQuery(ProxyContext& context, std::shared_ptr<SandboxEgress> sandbox,
                                                        std::string query, bool tcp) {
  const auto question = dns::ParseQuery(query);
  if (!question) co_return FormatError(query);
  const auto start = std::chrono::steady_clock::now();
  const std::optional<std::string> name = NormalizeName(question->name);

  EgressRecord record;
  record.protocol = "dns";
  record.name = name.value_or(question->name);
  record.port = kDnsPort;
  record.query_type = TypeName(question->type);
  const Verdict verdict = DecideName(*sandbox->policy(), question->name, 0);  // any port: a lookup
  if (!verdict.allowed) {
    record.allowed = false;
    record.reason = verdict.reason;
    sandbox->Log(std::move(record));
    co_return dns::ErrorReply(*question, dns::kRcodeNxDomain);
  }
  record.allowed = true;
  const int64_t id = sandbox->Log(std::move(record));

  Result<std::string> reply = co_await context.upstream.Exchange(query, tcp);
  const auto duration =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  if (!reply.ok()) {
    context.sink.Finish(id, int64_t(query.size()), 0, duration, reply.error().message);
    co_return dns::ErrorReply(*question, dns::kRcodeServFail);
  }
  if (auto answer = dns::ParseAnswer(*reply)) {
    for (const auto& address : answer->addresses) sandbox->names().Remember(*name, address.address, address.ttl);
  }
  context.sink.Finish(id, int64_t(query.size()), int64_t(reply->size()), duration, "");
  co_return std::move(*reply);
}

SandboxDns::SandboxDns(ProxyContext& context, std::shared_ptr<SandboxEgress> sandbox)
    : context_(context), sandbox_(std::move(sandbox)), strand_(asio::make_strand(context.io)) {}

std::shared_ptr<SandboxDns> SandboxDns::Start(ProxyContext& context, std::shared_ptr<SandboxEgress> sandbox,
                                              UniqueFd udp4, UniqueFd udp6, UniqueFd tcp4, UniqueFd tcp6) {
  auto self = std::make_shared<SandboxDns>(context, std::move(sandbox));
  for (auto [fd, protocol] : {std::pair{&udp4, udp::v4()}, std::pair{&udp6, udp::v6()}}) {
    if (!fd->valid()) continue;
    auto socket = std::make_shared<udp::socket>(self->strand_);
    error_code ec;
    socket->assign(protocol, fd->get(), ec);
    if (ec) {
      spdlog::warn("egress proxy: DNS socket of sandbox {}: {}", self->sandbox_->id(), ec.message());
      continue;
    }
    fd->release();
    socket->non_blocking(true, ec);  // replies are sent without waiting; a full buffer drops one
    self->udp_.push_back(socket);
  }
  for (UniqueFd* fd : {&tcp4, &tcp6}) {
    if (!fd->valid()) continue;
    auto acceptor = AdoptListener(self->strand_, std::move(*fd));
    if (!acceptor.ok()) {
      spdlog::warn("egress proxy: DNS listener of sandbox {}: {}", self->sandbox_->id(), acceptor.error().message);
      continue;
    }
    self->tcp_.push_back(*acceptor);
  }
  // Each coroutine owns a reference (the lambda co_spawn keeps), so the resolver lives until
  // its last one ends.
  for (const auto& socket : self->udp_) {
    asio::co_spawn(self->strand_, [self, socket] { return self->ServeUdp(socket); }, asio::detached);
  }
  for (const auto& acceptor : self->tcp_) {
    std::weak_ptr<SandboxDns> weak = self;
    asio::co_spawn(self->strand_,
                   AcceptLoop(acceptor, context.io,
                              [weak](StreamSocket socket) {
                                auto dns = weak.lock();
                                if (!dns) return;
                                auto executor = socket.get_executor();
                                asio::co_spawn(
                                    executor,
                                    [dns, socket = std::move(socket)]() mutable { return dns->ServeTcp(std::move(socket)); },
                                    asio::detached);
                              }),
                   asio::detached);
  }
  return self;
}

void SandboxDns::Close() {
  asio::post(strand_, [self = shared_from_this()] {
    error_code ignored;
    for (const auto& socket : self->udp_) socket->close(ignored);
    for (const auto& acceptor : self->tcp_) acceptor->close(ignored);
  });
}

asio::awaitable<void> SandboxDns::ServeUdp(std::shared_ptr<udp::socket> socket) {
  std::string buffer(65536, '\0');
  for (;;) {
    udp::endpoint peer;
    error_code ec;
    const size_t n = co_await socket->async_receive_from(asio::buffer(buffer), peer, Redirect(ec));
    if (!socket->is_open() || ec == asio::error::operation_aborted) co_return;
    if (ec || in_flight_ >= kMaxInFlight) continue;
    ++in_flight_;
    asio::co_spawn(
        strand_, [self = shared_from_this(), socket, peer, query = buffer.substr(0, n)]() mutable {
          return self->AnswerUdp(socket, peer, std::move(query));
        },
        asio::detached);
  }
}

asio::awaitable<void> SandboxDns::AnswerUdp(std::shared_ptr<udp::socket> socket, udp::endpoint peer,
                                            std::string query) {
  std::optional<std::string> reply;
  try {
    reply = co_await AnswerQuery(context_, sandbox_, std::move(query), /*tcp=*/false);
  } catch (const std::exception& e) {
    spdlog::warn("egress proxy: DNS query of sandbox {}: {}", sandbox_->id(), e.what());
  }
  --in_flight_;
  if (!reply || !socket->is_open()) co_return;
  error_code ignored;
  socket->send_to(asio::buffer(*reply), peer, 0, ignored);
}

asio::awaitable<void> SandboxDns::ServeTcp(StreamSocket socket) {
  if (++tcp_clients_ > kMaxTcpClients) {
    --tcp_clients_;
    co_return;
  }
  try {
    Deadline idle(socket.get_executor());
    auto close_socket = [&socket] {
      error_code ignored;
      socket.close(ignored);
    };
    for (;;) {
      error_code ec;
      std::array<uint8_t, 2> length{};
      idle.Arm(kTcpIdle, close_socket);
      co_await asio::async_read(socket, asio::buffer(length), Redirect(ec));
      if (ec) break;
      std::string query(size_t(length[0]) << 8 | length[1], '\0');
      co_await asio::async_read(socket, asio::buffer(query), Redirect(ec));
      if (ec) break;
      idle.Disarm();
      std::optional<std::string> reply = co_await AnswerQuery(context_, sandbox_, std::move(query), /*tcp=*/true);
      if (!reply || reply->size() > 65535) break;
      std::string framed;
      framed.push_back(static_cast<char>(reply->size() >> 8));
      framed.push_back(static_cast<char>(reply->size() & 0xff));
      framed += *reply;
      idle.Arm(kTcpIdle, close_socket);
      co_await asio::async_write(socket, asio::buffer(framed), Redirect(ec));
      if (ec) break;
    }
  } catch (const std::exception& e) {
    spdlog::warn("egress proxy: DNS over TCP of sandbox {}: {}", sandbox_->id(), e.what());
  }
  --tcp_clients_;
}

}  // namespace bulkhead::net
