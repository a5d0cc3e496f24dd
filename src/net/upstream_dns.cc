#include "net/upstream_dns.h"

#include <sys/random.h>

#include <algorithm>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <sstream>

#include "common/read_file.h"
#include "net/deadline.h"
#include "net/dns_message.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::net {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using asio::ip::udp;
using boost::system::error_code;

constexpr std::chrono::seconds kAttemptTimeout{2};
constexpr int kAttemptsPerServer = 2;
constexpr size_t kMaxMessage = 65535;
constexpr uint16_t kFlagQr = 0x8000, kFlagTc = 0x0200;
constexpr uint32_t kMaxCacheTtl = 300;

auto Redirect(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

uint16_t RandomId() {
  uint16_t id = 0;
  if (getrandom(&id, sizeof(id), 0) != sizeof(id)) {
    // getrandom on 2 bytes does not fail once the pool is initialized; be safe anyway.
    id = static_cast<uint16_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return id;
}

uint16_t Flags(std::string_view message) {
  return static_cast<uint16_t>((static_cast<uint8_t>(message[2]) << 8) | static_cast<uint8_t>(message[3]));
}

// A reply to our attempt: from the server we asked (the socket is connected to it), a reply
// (QR), and carrying the id we chose.
bool IsReplyTo(std::string_view message, uint16_t id) {
  return message.size() >= 12 && dns::MessageId(message) == id && (Flags(message) & kFlagQr) != 0;
}

template <typename Endpoint>
Endpoint ToEndpoint(const DnsServer& server) {
  sockaddr_storage storage{};
  const socklen_t length = server.address.ToSockaddr(server.port, &storage);
  Endpoint endpoint;
  std::memcpy(endpoint.data(), &storage, length);
  endpoint.resize(length);
  return endpoint;
}

asio::awaitable<Result<std::string>> ExchangeUdp(const DnsServer& server, const std::string& wire, uint16_t id) {
  const auto executor = co_await asio::this_coro::executor;
  const udp::endpoint endpoint = ToEndpoint<udp::endpoint>(server);
  udp::socket socket(executor);
  error_code ec;
  socket.open(endpoint.protocol(), ec);
  // Connected: the kernel drops datagrams from anyone but the server.
  if (!ec) socket.connect(endpoint, ec);
  if (ec) co_return MakeError(ErrorCode::kBadGateway, "udp socket to " + server.ToString() + ": " + ec.message());
  Deadline deadline(executor);
  deadline.Arm(kAttemptTimeout, [&socket] {
    error_code ignored;
    socket.cancel(ignored);
  });
  co_await socket.async_send(asio::buffer(wire), Redirect(ec));
  std::string reply(kMaxMessage, '\0');
  while (!ec) {
    const size_t n = co_await socket.async_receive(asio::buffer(reply), Redirect(ec));
    if (ec) break;
    if (n < kMaxMessage && IsReplyTo(std::string_view(reply.data(), n), id)) {
      reply.resize(n);
      co_return reply;
    }
  }
  if (deadline.expired()) co_return MakeError(ErrorCode::kBadGateway, server.ToString() + " did not answer in time");
  co_return MakeError(ErrorCode::kBadGateway, server.ToString() + ": " + ec.message());
}

asio::awaitable<Result<std::string>> ExchangeTcp(const DnsServer& server, const std::string& wire, uint16_t id) {
  const auto executor = co_await asio::this_coro::executor;
  tcp::socket socket(executor);
  Deadline deadline(executor);
  deadline.Arm(kAttemptTimeout, [&socket] {
    error_code ignored;
    socket.cancel(ignored);
  });
  error_code ec;
  co_await socket.async_connect(ToEndpoint<tcp::endpoint>(server), Redirect(ec));
  std::string framed;
  framed.push_back(static_cast<char>(wire.size() >> 8));
  framed.push_back(static_cast<char>(wire.size() & 0xff));
  framed += wire;
  if (!ec) co_await asio::async_write(socket, asio::buffer(framed), Redirect(ec));
  std::array<uint8_t, 2> length{};
  if (!ec) co_await asio::async_read(socket, asio::buffer(length), Redirect(ec));
  std::string reply(size_t(length[0]) << 8 | length[1], '\0');
  if (!ec) co_await asio::async_read(socket, asio::buffer(reply), Redirect(ec));
  if (!ec && IsReplyTo(reply, id)) co_return reply;
  if (deadline.expired()) co_return MakeError(ErrorCode::kBadGateway, server.ToString() + " did not answer in time");
  if (!ec) co_return MakeError(ErrorCode::kBadGateway, server.ToString() + " sent a reply to another question");
  co_return MakeError(ErrorCode::kBadGateway, server.ToString() + " over tcp: " + ec.message());
}

}  // namespace

std::string DnsServer::ToString() const {
  const std::string host = address.v6 ? "[" + address.ToString() + "]" : address.ToString();
  return host + ":" + std::to_string(port);
}

std::optional<DnsServer> ParseDnsServer(std::string_view text) {
  DnsServer server;
  std::string_view host = text;
  std::optional<std::string_view> port_text;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port_text = rest.substr(1);
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    host = text.substr(0, text.find(':'));
    port_text = text.substr(text.find(':') + 1);
  }
  auto address = IpAddress::Parse(host);
  if (!address) return std::nullopt;
  server.address = *address;
  if (port_text) {
    if (port_text->empty() || port_text->size() > 5 || port_text->find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    const unsigned long port = std::stoul(std::string(*port_text));
    if (port == 0 || port > 65535) return std::nullopt;
    server.port = static_cast<uint16_t>(port);
  }
  return server;
}

std::vector<DnsServer> ResolvConfServers(std::string_view text) {
  std::vector<DnsServer> out;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string keyword, value;
    if (!(words >> keyword >> value) || keyword != "nameserver") continue;
    const size_t percent = value.find('%');  // a zone id ("fe80::1%eth0"): not supported
    if (percent != std::string::npos) continue;
    if (auto server = ParseDnsServer(value)) out.push_back(*server);
  }
  return out;
}

Result<std::vector<DnsServer>> UpstreamServers(const std::vector<std::string>& configured) {
  std::vector<DnsServer> out;
  for (const auto& text : configured) {
    auto server = ParseDnsServer(text);
    if (!server) {
      return MakeError(ErrorCode::kInvalid,
                       "dns server \"" + text + "\" is not an address (e.g. 198.18.0.53, [2001:db8::53]:5353)");
    }
    out.push_back(*server);
  }
  if (!out.empty()) return out;
  if (auto resolv_conf = ReadSmallFile("/etc/resolv.conf")) out = ResolvConfServers(*resolv_conf);
  return out;
}

asio::awaitable<Result<std::string>> UpstreamDns::Exchange(std::string query, bool tcp_when_truncated) {
  const auto own_id = dns::MessageId(query);
  if (!own_id || query.size() < 12) co_return MakeError(ErrorCode::kBadRequest, "not a DNS message");
  std::string last_error = "no upstream DNS server is configured";
  for (const DnsServer& server : servers_) {
    for (int attempt = 0; attempt < kAttemptsPerServer; ++attempt) {
      uint16_t id = RandomId();
      Result<std::string> reply = co_await ExchangeUdp(server, dns::WithId(query, id), id);
      if (reply.ok() && tcp_when_truncated && (Flags(*reply) & kFlagTc) != 0) {
        id = RandomId();
        reply = co_await ExchangeTcp(server, dns::WithId(query, id), id);
      }
      if (reply.ok()) co_return dns::WithId(*reply, *own_id);
      last_error = reply.error().message;
    }
  }
  co_return MakeError(ErrorCode::kBadGateway, "no DNS server answered: " + last_error);
}

// The AAAA lookup of Resolve, spawned beside its A lookup.
struct UpstreamDns::Lookup {
  explicit Lookup(const asio::any_io_executor& executor) : done(executor) {
    done.expires_at(asio::steady_timer::time_point::max());
  }
  std::optional<Result<std::string>> aaaa;  // set when the spawned lookup ended
  asio::steady_timer done;                  // cancelled then
};

asio::awaitable<void> UpstreamDns::LookupAaaa(std::string name, std::shared_ptr<Lookup> lookup) {
  Result<std::string> reply = co_await Exchange(dns::BuildQuery(0, name, dns::kTypeAaaa), /*tcp_when_truncated=*/true);
  lookup->aaaa = std::move(reply);
  lookup->done.cancel();
}

asio::awaitable<Result<std::vector<IpAddress>>> UpstreamDns::Resolve(std::string name) {
  if (auto cached = Cached(name)) co_return *cached;
  const auto executor = co_await asio::this_coro::executor;
  auto lookup = std::make_shared<Lookup>(executor);
  asio::co_spawn(executor, LookupAaaa(name, lookup), asio::detached);
  Result<std::string> a = co_await Exchange(dns::BuildQuery(0, name, dns::kTypeA), /*tcp_when_truncated=*/true);
  while (!lookup->aaaa) {
    error_code ignored;
    co_await lookup->done.async_wait(Redirect(ignored));
  }

  std::vector<IpAddress> addresses;
  std::optional<uint32_t> ttl;
  std::string failure;
  for (const Result<std::string>* reply : {&a, &*lookup->aaaa}) {
    if (!reply->ok()) {
      failure = reply->error().message;
      continue;
    }
    auto answer = dns::ParseAnswer(**reply);
    if (!answer || (answer->rcode != dns::kRcodeNoError && answer->rcode != dns::kRcodeNxDomain)) {
      failure = answer ? "the DNS server answered rcode " + std::to_string(answer->rcode) : "a malformed DNS reply";
      continue;
    }
    for (const auto& record : answer->addresses) {
      if (std::find(addresses.begin(), addresses.end(), record.address) == addresses.end()) {
        addresses.push_back(record.address);
      }
      ttl = std::min(ttl.value_or(record.ttl), record.ttl);
    }
  }
  // One family failing is fine when the other gave addresses.
  if (addresses.empty() && !failure.empty()) {
    co_return MakeError(ErrorCode::kBadGateway, "lookup of " + name + " failed: " + failure);
  }
  if (!addresses.empty()) Cache(name, addresses, *ttl);
  co_return addresses;
}

std::optional<std::vector<IpAddress>> UpstreamDns::Cached(const std::string& name) {
  std::lock_guard lock(cache_mutex_);
  auto it = cache_.find(name);
  if (it == cache_.end()) return std::nullopt;
  if (it->second.expiry <= std::chrono::steady_clock::now()) {
    cache_.erase(it);
    return std::nullopt;
  }
  return it->second.addresses;
}

void UpstreamDns::Cache(const std::string& name, const std::vector<IpAddress>& addresses, uint32_t ttl) {
  if (ttl == 0) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(cache_mutex_);
  if (cache_.size() >= kMaxCacheEntries) {
    std::erase_if(cache_, [&](const auto& entry) { return entry.second.expiry <= now; });
    if (cache_.size() >= kMaxCacheEntries) cache_.erase(cache_.begin());
  }
  cache_[name] = CacheEntry{addresses, now + std::chrono::seconds(std::min(ttl, kMaxCacheTtl))};
}

}  // namespace bulkhead::net
