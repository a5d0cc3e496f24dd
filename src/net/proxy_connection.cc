#include "net/proxy_connection.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <spdlog/spdlog.h>

#include "net/deadline.h"
#include "net/tls_sni.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr int kSoOriginalDst = 80;  // SO_ORIGINAL_DST (SOL_IP) and IP6T_SO_ORIGINAL_DST (SOL_IPV6)
// How long a transparent connection that only a name could allow waits for the client to
// announce one (clients send their ClientHello or request head at once).
constexpr std::chrono::seconds kNameWait{2};
constexpr std::chrono::seconds kHeadTimeout{30};
constexpr std::chrono::seconds kWriteTimeout{10};
// After an error response, how long what the client still sends is read and dropped, so that
// closing does not reset the connection before the client read the response.
constexpr std::chrono::seconds kLinger{1};
constexpr size_t kMaxLingerBytes = 1 << 20;
constexpr uint32_t kHeaderLimit = 64 * 1024;

auto Redirect(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

struct Endpoint {
  IpAddress address;
  uint16_t port = 0;
  bool operator==(const Endpoint&) const = default;
};

std::optional<Endpoint> ToEndpoint(const sockaddr_storage& storage) {
  uint16_t port = 0;
  if (storage.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  } else if (storage.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  } else {
    return std::nullopt;
  }
  return Endpoint{IpAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&storage)), port};
}

std::optional<Endpoint> LocalEndpoint(int fd, int* family) {
  sockaddr_storage storage{};
  socklen_t length = sizeof(storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length) != 0) return std::nullopt;
  *family = storage.ss_family;
  return ToEndpoint(storage);
}

// Where a connection redirected by the namespace's rules was going; nullopt if it was not
// redirected (no NAT entry: a connection made to the listener itself).
std::optional<Endpoint> OriginalDestination(int fd, int family) {
  sockaddr_storage storage{};
  socklen_t length = sizeof(storage);
  const int level = family == AF_INET6 ? SOL_IPV6 : SOL_IP;
  if (getsockopt(fd, level, kSoOriginalDst, &storage, &length) != 0) return std::nullopt;
  return ToEndpoint(storage);
}

void SetNoDelay(StreamSocket& socket) {
  const int one = 1;
  setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// The host name a client announced in its first bytes (TLS SNI, HTTP Host), as sent. An
// address literal ("Host: 198.18.0.12") names no host: it is not looked up, and the connection
// is judged by its address.
std::optional<std::string> AnnouncedName(const SniffResult& sniff) {
  if ((sniff.kind == Sniff::kTls || sniff.kind == Sniff::kHttp) && sniff.name && !sniff.name->empty() &&
      !IpAddress::Parse(*sniff.name)) {
    return sniff.name;
  }
  return std::nullopt;
}

bool IStartsWith(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() &&
         beast::iequals(beast::string_view(text.data(), prefix.size()), beast::string_view(prefix.data(), prefix.size()));
}

std::string_view View(beast::string_view text) { return std::string_view(text.data(), text.size()); }

// An absolute-form request in origin-form, for the server: hop-by-hop Connection and
// Keep-Alive and the proxy's Proxy-* headers left out, one request per connection.
std::string OriginFormHead(const http::request<http::empty_body>& request, std::string_view origin_target,
                           std::string_view authority) {
  std::string head;
  head += View(request.method_string());
  head += ' ';
  head += origin_target;
  head += request.version() == 10 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n";
  bool has_host = false;
  for (const auto& field : request) {
    const std::string_view name = View(field.name_string());
    const beast::string_view field_name = field.name_string();
    if (beast::iequals(field_name, "connection") || beast::iequals(field_name, "keep-alive") ||
        beast::iequals(field_name.substr(0, 6), "proxy-")) {
      continue;
    }
    if (beast::iequals(field_name, "host")) has_host = true;
    head += name;
    head += ": ";
    head += View(field.value());
    head += "\r\n";
  }
  if (!has_host) {
    head += "Host: ";
    head += authority;
    head += "\r\n";
  }
  head += "Connection: close\r\n\r\n";
  return head;
}

class ProxyConnection : public std::enable_shared_from_this<ProxyConnection> {
 public:
  ProxyConnection(ProxyContext& context, std::shared_ptr<SandboxEgress> sandbox, StreamSocket client)
      : context_(context),
        sandbox_(std::move(sandbox)),
        executor_(client.get_executor()),
        client_(std::move(client)),
        upstream_(executor_),
        deadline_(executor_) {}

  static asio::awaitable<void> Serve(std::shared_ptr<ProxyConnection> self) { co_await self->Run(); }

  // Closes both sides from any thread; the connection logs `reason` as it ends.
  void Cut(std::string reason) {
    asio::post(executor_, [self = shared_from_this(), reason = std::move(reason)] {
      if (self->cut_reason_.empty()) self->cut_reason_ = reason;
      Reset(self->client_);
      Reset(self->upstream_);
    });
  }

 private:
  // How an attempt to reach a destination went.
  struct Reached {
    enum class Outcome { kConnected, kDenied, kFailed };
    Outcome outcome = Outcome::kFailed;
    std::string reason;  // kDenied, kFailed
    IpAddress address;   // kConnected: the address connected to
  };

  asio::awaitable<void> Run();
  asio::awaitable<void> Transparent(Endpoint original);
  asio::awaitable<void> Explicit();
  asio::awaitable<void> ExplicitConnect(Destination destination);
  asio::awaitable<void> ExplicitForward(Destination destination, std::string head);
  asio::awaitable<Reached> Reach(Destination destination, std::optional<IpAddress> preferred);
  asio::awaitable<bool> ConnectUpstream(IpAddress address, uint16_t port, std::string* error);
  asio::awaitable<SniffResult> SniffClient(bool watch_upstream, std::optional<Clock::duration> limit);
  asio::awaitable<void> RelayAdmitted();
  asio::awaitable<void> Respond(std::string_view status, std::string body);
  asio::awaitable<void> RespondUnreached(const Destination& destination, const Reached& reached);

  bool cut() const { return !cut_reason_.empty(); }
  void CancelClient() {
    error_code ignored;
    client_.cancel(ignored);
  }
  // Refused connections end the way a refused TCP connection looks (a reset), and so do cut
  // ones, on both sides.
  static void Reset(StreamSocket& socket) {
    if (!socket.is_open()) return;
    const linger reset{1, 0};
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    error_code ignored;
    socket.close(ignored);
  }
  void ResetClient() { Reset(client_); }

  ProxyContext& context_;
  const std::shared_ptr<SandboxEgress> sandbox_;
  std::shared_ptr<SandboxEgress::Connection> entry_;
  const asio::any_io_executor executor_;  // this connection's strand: everything below lives on it
  StreamSocket client_;
  StreamSocket upstream_;
  Deadline deadline_;
  std::string peeked_;      // read from the client, not yet sent upstream
  bool sniffing_ = false;   // SniffClient is waiting for the client's first bytes
  std::string cut_reason_;  // set when cut from outside
};

asio::awaitable<void> ProxyConnection::Run() {
  std::weak_ptr<ProxyConnection> weak = weak_from_this();
  entry_ = sandbox_->Register([weak](const std::string& reason) {
    if (auto self = weak.lock()) self->Cut(reason);
  });
  if (!entry_) {
    ResetClient();
    co_return;
  }
  try {
    SetNoDelay(client_);
    int family = AF_INET;
    const auto local = LocalEndpoint(client_.native_handle(), &family);
    const auto original = OriginalDestination(client_.native_handle(), family);
    if (local && original && !(*original == *local)) {
      co_await Transparent(*original);
    } else {
      co_await Explicit();
    }
  } catch (const std::exception& e) {
    spdlog::warn("egress proxy: connection of sandbox {}: {}", sandbox_->id(), e.what());
  }
  deadline_.Disarm();
  sandbox_->Finish(*entry_, cut_reason_);
  error_code ignored;
  client_.close(ignored);
  upstream_.close(ignored);
  sandbox_->Unregister(entry_);
}

asio::awaitable<void> ProxyConnection::Transparent(Endpoint original) {
  const IpAddress address = original.address;
  const uint16_t port = original.port;
  const auto policy = sandbox_->policy();
  const auto host = context_.host_addresses.Get();
  // The names our resolver answered this address with: one the policy allows lets the
  // connection through without the client naming it.
  const std::vector<std::string> names = sandbox_->names().Lookup(address);
  std::optional<std::string> remembered;
  if (!names.empty()) remembered = names.front();
  bool allowed_without_name = Decide(*policy, std::nullopt, address, port, *host).allowed;
  for (const auto& name : names) {
    if (allowed_without_name) break;
    if (Decide(*policy, name, address, port, *host).allowed) {
      allowed_without_name = true;
      remembered = name;
    }
  }

  if (allowed_without_name) {
    // Connect while the client's first bytes arrive (or the server speaks first); those bytes
    // are still checked: a TLS SNI or Host naming a name not allowed there is refused.
    std::string error;
    if (!co_await ConnectUpstream(address, port, &error)) {
      if (!cut()) sandbox_->LogFailed(remembered, address, port, error);
      ResetClient();
      co_return;
    }
    const SniffResult sniff = co_await SniffClient(/*watch_upstream=*/true, std::nullopt);
    if (cut()) co_return;
    std::optional<std::string> name = AnnouncedName(sniff);
    if (!name) name = remembered;
    if (!sandbox_->Admit(*entry_, name, address, port).allowed) {
      ResetClient();
      co_return;
    }
    co_await RelayAdmitted();
    co_return;
  }

  // Only a name can allow it: the one the client announces. Then the proxy connects to what IT
  // resolves that name to, never to the address the sandbox picked.
  const SniffResult sniff = co_await SniffClient(/*watch_upstream=*/false, kNameWait);
  if (cut()) co_return;
  const std::optional<std::string> announced = AnnouncedName(sniff);
  const std::optional<std::string> name = announced ? NormalizeName(*announced) : std::nullopt;
  if (!name) {
    const std::optional<std::string> logged = announced ? announced : remembered;
    sandbox_->LogDenied(logged, address, port, Decide(*policy, logged, address, port, *host).reason);
    ResetClient();
    co_return;
  }
  const Destination destination{name, std::nullopt, port};
  const Reached reached = co_await Reach(destination, address);
  if (cut()) co_return;
  if (reached.outcome != Reached::Outcome::kConnected) {
    if (reached.outcome == Reached::Outcome::kDenied) {
      sandbox_->LogDenied(name, address, port, reached.reason);
    } else {
      sandbox_->LogFailed(name, std::nullopt, port, reached.reason);
    }
    ResetClient();
    co_return;
  }
  if (!sandbox_->Admit(*entry_, name, reached.address, port).allowed) {
    ResetClient();
    co_return;
  }
  co_await RelayAdmitted();
}

asio::awaitable<void> ProxyConnection::Explicit() {
  beast::flat_buffer buffer;
  http::request_parser<http::empty_body> parser;
  parser.header_limit(kHeaderLimit);
  error_code ec;
  deadline_.Arm(kHeadTimeout, [this] { CancelClient(); });
  co_await http::async_read_header(client_, buffer, parser, Redirect(ec));
  deadline_.Disarm();
  if (cut() || deadline_.expired()) co_return;
  if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset) co_return;
  if (ec) {
    co_await Respond("400 Bad Request", "bulkhead: not an HTTP proxy request: " + ec.message() + "\n");
    co_return;
  }
  const auto& request = parser.get();
  peeked_ = beast::buffers_to_string(buffer.data());  // bytes the client sent after the head
  const std::string_view target = View(request.target());

  if (request.method() == http::verb::connect) {
    const auto destination = ParseAuthority(target, std::nullopt);
    if (!destination) {
      co_await Respond("400 Bad Request", "bulkhead: CONNECT takes host:port\n");
      co_return;
    }
    co_await ExplicitConnect(*destination);
    co_return;
  }

  if (!IStartsWith(target, "http://")) {
    co_await Respond("400 Bad Request",
                     IStartsWith(target, "https://")
                         ? "bulkhead: https goes through CONNECT host:443\n"
                         : "bulkhead: this is the sandbox's egress proxy: it takes CONNECT host:port and "
                           "absolute-form requests (GET http://host/path)\n");
    co_return;
  }
  const std::string_view rest = target.substr(7);
  const size_t authority_end = std::min(rest.find_first_of("/?#"), rest.size());
  const std::string_view authority = rest.substr(0, authority_end);
  std::string origin(rest.substr(authority_end));
  origin = origin.substr(0, origin.find('#'));
  if (origin.empty() || origin.front() != '/') origin.insert(0, "/");
  const auto destination =
      authority.find('@') == std::string_view::npos ? ParseAuthority(authority, 80) : std::nullopt;
  if (!destination) {
    co_await Respond("400 Bad Request", "bulkhead: the request URI has no valid host\n");
    co_return;
  }
  // The Host header must name the same destination as the URI: a server reached for one name
  // must not be asked for another (domain fronting).
  const std::string_view host = View(request[http::field::host]);
  if (!host.empty()) {
    const auto named = ParseAuthority(host, destination->port);
    if (!named || !(*named == *destination)) {
      const std::string reason = "Host header does not match the request URI";
      sandbox_->LogDenied(destination->name, destination->address, destination->port, reason);
      co_await Respond("403 Forbidden",
                       "bulkhead: egress to " + destination->HostPort() + " denied: " + reason + "\n");
      co_return;
    }
  }
  co_await ExplicitForward(*destination, OriginFormHead(request, origin, authority));
}

asio::awaitable<void> ProxyConnection::ExplicitConnect(Destination destination) {
  const Reached reached = co_await Reach(destination, std::nullopt);
  if (cut()) co_return;
  if (reached.outcome != Reached::Outcome::kConnected) {
    co_await RespondUnreached(destination, reached);
    co_return;
  }
  error_code ec;
  deadline_.Arm(kWriteTimeout, [this] { CancelClient(); });
  co_await asio::async_write(client_, asio::buffer(std::string_view("HTTP/1.1 200 Connection established\r\n\r\n")),
                             Redirect(ec));
  deadline_.Disarm();
  if (ec || cut()) co_return;
  // A TLS client names the server it wants in its ClientHello: that must be the CONNECT host.
  const SniffResult sniff = co_await SniffClient(/*watch_upstream=*/true, std::nullopt);
  if (cut()) co_return;
  const auto announced = AnnouncedName(sniff);
  if (announced && destination.name && NormalizeName(*announced) != destination.name) {
    sandbox_->LogDenied(destination.name, reached.address, destination.port,
                        sniff.kind == Sniff::kTls ? "SNI does not match CONNECT host"
                                                  : "Host does not match CONNECT host");
    ResetClient();
    co_return;
  }
  if (!sandbox_->Admit(*entry_, destination.name, reached.address, destination.port).allowed) {
    ResetClient();
    co_return;
  }
  co_await RelayAdmitted();
}

asio::awaitable<void> ProxyConnection::ExplicitForward(Destination destination, std::string head) {
  const Reached reached = co_await Reach(destination, std::nullopt);
  if (cut()) co_return;
  if (reached.outcome != Reached::Outcome::kConnected) {
    co_await RespondUnreached(destination, reached);
    co_return;
  }
  const Verdict verdict = sandbox_->Admit(*entry_, destination.name, reached.address, destination.port);
  if (!verdict.allowed) {
    co_await Respond("403 Forbidden",
                     "bulkhead: egress to " + destination.HostPort() + " denied: " + verdict.reason + "\n");
    co_return;
  }
  peeked_.insert(0, head);
  co_await RelayAdmitted();
}

asio::awaitable<ProxyConnection::Reached> ProxyConnection::Reach(Destination destination,
                                                                 std::optional<IpAddress> preferred) {
  const auto policy = sandbox_->policy();
  const auto host = context_.host_addresses.Get();
  const uint16_t port = destination.port;
  std::vector<IpAddress> candidates;
  if (destination.address) {
    const Verdict verdict = Decide(*policy, std::nullopt, *destination.address, port, *host);
    if (!verdict.allowed) co_return Reached{Reached::Outcome::kDenied, verdict.reason, {}};
    candidates.push_back(*destination.address);
  } else {
    const std::string name = *destination.name;
    // Asked before the lookup: a name the policy does not allow never reaches a DNS server.
    const Verdict by_name = DecideName(*policy, name, port);
    if (!by_name.allowed) co_return Reached{Reached::Outcome::kDenied, by_name.reason, {}};
    Result<std::vector<IpAddress>> resolved = co_await context_.upstream.Resolve(name);
    if (cut()) co_return Reached{Reached::Outcome::kFailed, cut_reason_, {}};
    if (!resolved.ok()) co_return Reached{Reached::Outcome::kFailed, resolved.error().message, {}};
    if (resolved->empty()) co_return Reached{Reached::Outcome::kFailed, name + " has no address", {}};
    // Always-denied ranges win over names (DNS rebinding): such addresses are skipped.
    std::string denial;
    for (const IpAddress& address : *resolved) {
      const Verdict verdict = Decide(*policy, name, address, port, *host);
      if (verdict.allowed) {
        candidates.push_back(address);
      } else if (denial.empty()) {
        denial = verdict.reason;
      }
    }
    if (candidates.empty()) {
      co_return Reached{Reached::Outcome::kDenied, name + " resolves only to denied addresses (" + denial + ")", {}};
    }
    // The address the sandbox itself picked goes first when it is one of ours.
    auto it = preferred ? std::find(candidates.begin(), candidates.end(), *preferred) : candidates.end();
    if (it != candidates.end()) std::rotate(candidates.begin(), it, it + 1);
  }
  std::string error;
  for (const IpAddress& candidate : candidates) {
    if (cut()) co_return Reached{Reached::Outcome::kFailed, cut_reason_, {}};
    if (co_await ConnectUpstream(candidate, port, &error)) {
      co_return Reached{Reached::Outcome::kConnected, {}, candidate};
    }
  }
  co_return Reached{Reached::Outcome::kFailed, "connect to " + destination.HostPort() + ": " + error, {}};
}

asio::awaitable<bool> ProxyConnection::ConnectUpstream(IpAddress address, uint16_t port, std::string* error) {
  error_code ec;
  upstream_.close(ec);
  sockaddr_storage storage{};
  const socklen_t length = address.ToSockaddr(port, &storage);
  upstream_.open(asio::generic::stream_protocol(storage.ss_family, IPPROTO_TCP), ec);
  if (ec) {
    *error = ec.message();
    co_return false;
  }
  deadline_.Arm(context_.connect_timeout, [this] {
    error_code ignored;
    upstream_.cancel(ignored);
  });
  co_await upstream_.async_connect(asio::generic::stream_protocol::endpoint(&storage, length, IPPROTO_TCP),
                                   Redirect(ec));
  deadline_.Disarm();
  if (!ec) {
    SetNoDelay(upstream_);
    co_return true;
  }
  *error = deadline_.expired() ? "timed out" : ec.message();
  upstream_.close(ec);
  co_return false;
}

// Reads the client's first bytes into peeked_ until they tell a TLS ClientHello or an HTTP
// request head (or neither), kSniffCap bytes, the client's EOF, the time `limit`, or, with
// `watch_upstream`, the server speaking first (then the client is waiting for it, and what it
// sends is not a ClientHello).
asio::awaitable<SniffResult> ProxyConnection::SniffClient(bool watch_upstream, std::optional<Clock::duration> limit) {
  SniffResult result = SniffClientHello(peeked_);
  if (result.kind != Sniff::kNeedMore) co_return result;
  sniffing_ = true;
  if (watch_upstream) {
    upstream_.async_wait(asio::socket_base::wait_read, [self = shared_from_this()](error_code ec) {
      if (!ec && self->sniffing_) self->CancelClient();
    });
  }
  if (limit) deadline_.Arm(*limit, [this] { CancelClient(); });
  std::array<char, 4096> chunk;
  while (result.kind == Sniff::kNeedMore && peeked_.size() < kSniffCap) {
    error_code ec;
    const size_t room = std::min(chunk.size(), kSniffCap - peeked_.size());
    const size_t n = co_await client_.async_read_some(asio::buffer(chunk.data(), room), Redirect(ec));
    if (ec) break;
    peeked_.append(chunk.data(), n);
    result = SniffClientHello(peeked_);
  }
  sniffing_ = false;
  deadline_.Disarm();
  if (watch_upstream) {
    error_code ignored;
    upstream_.cancel(ignored);
  }
  co_return result;
}

asio::awaitable<void> ProxyConnection::RelayAdmitted() {
  if (!peeked_.empty()) {
    error_code ec;
    co_await asio::async_write(upstream_, asio::buffer(peeked_), Redirect(ec));
    if (ec) co_return;
    entry_->counters->a_to_b.fetch_add(int64_t(peeked_.size()));
    std::string().swap(peeked_);
  }
  co_await Relay(client_, upstream_, entry_->counters);
}

asio::awaitable<void> ProxyConnection::Respond(std::string_view status, std::string body) {
  std::string response = "HTTP/1.1 " + std::string(status) +
                         "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  error_code ec;
  deadline_.Arm(kWriteTimeout, [this] { CancelClient(); });
  co_await asio::async_write(client_, asio::buffer(response), Redirect(ec));
  if (!ec) client_.shutdown(asio::socket_base::shutdown_send, ec);
  if (!ec) {
    deadline_.Arm(kLinger, [this] { CancelClient(); });
    std::array<char, 4096> sink;
    size_t drained = 0;
    while (!ec && drained < kMaxLingerBytes) {
      drained += co_await client_.async_read_some(asio::buffer(sink), Redirect(ec));
    }
  }
  deadline_.Disarm();
}

asio::awaitable<void> ProxyConnection::RespondUnreached(const Destination& destination, const Reached& reached) {
  if (reached.outcome == Reached::Outcome::kDenied) {
    sandbox_->LogDenied(destination.name, destination.address, destination.port, reached.reason);
    co_await Respond("403 Forbidden",
                     "bulkhead: egress to " + destination.HostPort() + " denied: " + reached.reason + "\n");
  } else {
    sandbox_->LogFailed(destination.name, destination.address, destination.port, reached.reason);
    co_await Respond("502 Bad Gateway",
                     "bulkhead: cannot reach " + destination.HostPort() + ": " + reached.reason + "\n");
  }
}

}  // namespace

std::string Destination::HostPort() const {
  std::string host;
  if (name) {
    host = *name;
  } else if (address) {
    host = address->v6 ? "[" + address->ToString() + "]" : address->ToString();
  }
  return host + ":" + std::to_string(port);
}

std::optional<Destination> ParseAuthority(std::string_view authority, std::optional<uint16_t> default_port) {
  std::string_view host = authority;
  std::optional<std::string_view> port_text;
  bool bracketed = false;
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = authority.substr(1, close - 1);
    const std::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port_text = rest.substr(1);
    }
    bracketed = true;
  } else if (const size_t colon = authority.find(':'); colon != std::string_view::npos) {
    if (authority.find(':', colon + 1) != std::string_view::npos) return std::nullopt;  // IPv6 needs brackets
    host = authority.substr(0, colon);
    port_text = authority.substr(colon + 1);
  }
  Destination destination;
  if (port_text) {
    const std::optional<uint16_t> port = ParsePort(*port_text);
    if (!port) return std::nullopt;
    destination.port = *port;
  } else if (default_port) {
    destination.port = *default_port;
  } else {
    return std::nullopt;
  }
  if (host.empty()) return std::nullopt;
  if (bracketed) {
    auto address = IpAddress::Parse(host);
    if (!address || host.find(':') == std::string_view::npos) return std::nullopt;
    destination.address = *address;
  } else if (auto address = IpAddress::Parse(host)) {
    destination.address = *address;
  } else if (auto name = NormalizeName(host)) {
    destination.name = *name;
  } else {
    return std::nullopt;
  }
  return destination;
}

void ServeProxyConnection(ProxyContext& context, std::shared_ptr<SandboxEgress> sandbox, StreamSocket client) {
  const auto executor = client.get_executor();
  auto connection = std::make_shared<ProxyConnection>(context, std::move(sandbox), std::move(client));
  asio::co_spawn(executor, ProxyConnection::Serve(std::move(connection)), asio::detached);
}

}  // namespace bulkhead::net
