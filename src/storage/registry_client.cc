#include "storage/registry_client.h"

#include <openssl/ssl.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/percent_encode.h"
#include "storage/oci_manifest.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::storage {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr int kMaxRedirects = 5;
constexpr size_t kReadBytes = 1 << 20;  // per read of a body
constexpr size_t kMaxErrorBody = 64 * 1024;
constexpr size_t kMaxTokenBody = 1 << 20;
constexpr int kBlobAttempts = 4;  // a dropped connection is resumed from where it stopped, this often

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// What goes into an error message from a registry's own words: printable ASCII, bounded.
std::string Printable(std::string_view text, size_t max = 300) {
  std::string out;
  for (char c : text.substr(0, max)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

bool IsLoopback(const std::string& host) {
  if (host == "localhost") return true;
  error_code ec;
  auto address = asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

Error Unreachable(const std::string& message) { return MakeError(ErrorCode::kBadGateway, message, "registry_unreachable"); }

// The response of one exchange: its status and headers, and its body when it was collected
// rather than streamed (errors, manifests, tokens).
struct Reply {
  int status = 0;
  std::string content_type;
  std::string location;
  std::string www_authenticate;
  std::string digest;
  std::string content_range;
  std::optional<uint64_t> content_length;
  std::string body;
};

// Where a body goes: a sink that streams it, or nullptr to collect up to `collect_limit` bytes
// (past which the exchange fails with kTooLarge).
struct BodyPlan {
  std::function<Status(std::string_view)> sink;
  size_t collect_limit = kMaxErrorBody;
};
using PlanBody = std::function<Result<BodyPlan>(const Reply&)>;

// What a request sends: its method, headers and body (uploads), sent again as it is when a
// challenge or redirect makes the request go out once more.
struct Outgoing {
  http::verb verb = http::verb::get;
  std::vector<std::pair<http::field, std::string>> headers;
  const RegistryClient::Body* body = nullptr;
};

// "The registry said: ..." from an OCI error body ({"errors": [{"code", "message"}]}).
std::string RegistrySays(const Reply& reply) {
  nlohmann::json doc = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object()) {
    auto errors = doc.find("errors");
    if (errors != doc.end() && errors->is_array() && !errors->empty() && (*errors)[0].is_object()) {
      const nlohmann::json& first = (*errors)[0];
      std::string code = first.contains("code") && first["code"].is_string() ? first["code"].get<std::string>() : "";
      std::string message = first.contains("message") && first["message"].is_string() ? first["message"].get<std::string>() : "";
      return Printable(code + (code.empty() || message.empty() ? "" : ": ") + message);
    }
  }
  return Printable(reply.body, 200);
}

}  // namespace

std::string Url::Authority() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  const bool default_port = (scheme == "https" && port == "443") || (scheme == "http" && port == "80");
  return default_port ? h : h + ":" + port;
}

Result<Url> ParseUrl(std::string_view text) {
  auto invalid = [&] { return MakeError(ErrorCode::kInvalid, "not an http(s) URL: " + Printable(text, 200)); };
  Url url;
  const size_t scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos) return invalid();
  url.scheme = Lower(text.substr(0, scheme_end));
  if (url.scheme != "http" && url.scheme != "https") return invalid();
  std::string_view rest = text.substr(scheme_end + 3);
  const size_t path = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, path);
  std::string target(path == std::string_view::npos ? "/" : rest.substr(path));
  if (const size_t hash = target.find('#'); hash != std::string::npos) target.resize(hash);
  if (target.empty() || target[0] == '?') target = "/" + target;
  if (authority.find('@') != std::string_view::npos) return invalid();  // no userinfo
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return invalid();
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') return invalid();
    url.port = after.empty() ? "" : std::string(after.substr(1));
  } else {
    const size_t colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    url.port = colon == std::string_view::npos ? "" : std::string(authority.substr(colon + 1));
  }
  if (url.host.empty()) return invalid();
  for (char c : url.port)
    if (c < '0' || c > '9') return invalid();
  if (url.port.empty()) url.port = url.scheme == "https" ? "443" : "80";
  for (char c : target)
    if (c <= 0x20 || c >= 0x7f) return invalid();  // nothing that could split a request line
  url.target = std::move(target);
  return url;
}

Result<Url> ResolveLocation(const Url& base, std::string_view location) {
  if (location.find("://") != std::string_view::npos) return ParseUrl(location);
  if (location.starts_with("//")) return ParseUrl(base.scheme + ":" + std::string(location));
  Url url = base;
  if (location.empty()) return MakeError(ErrorCode::kInvalid, "an empty Location");
  if (location[0] == '/') {
    url.target = std::string(location);
  } else {
    std::string dir = base.target.substr(0, base.target.find('?'));
    dir = dir.substr(0, dir.rfind('/') + 1);
    url.target = dir + std::string(location);
  }
  for (char c : url.target)
    if (c <= 0x20 || c >= 0x7f) return MakeError(ErrorCode::kInvalid, "a bad Location");
  return url;
}


std::vector<AuthChallenge> ParseAuthChallenges(std::string_view header) {
  std::vector<AuthChallenge> challenges;
  size_t i = 0;
  auto skip_space = [&] {
    while (i < header.size() && (header[i] == ' ' || header[i] == '\t')) ++i;
  };
  auto token = [&] {
    size_t start = i;
    while (i < header.size() && header[i] != ' ' && header[i] != '\t' && header[i] != ',' && header[i] != '=') ++i;
    return std::string(header.substr(start, i - start));
  };
  while (i < header.size()) {
    skip_space();
    while (i < header.size() && header[i] == ',') ++i;
    skip_space();
    if (i >= header.size()) break;
    AuthChallenge challenge;
    challenge.scheme = Lower(token());
    if (challenge.scheme.empty()) break;
    // name=value pairs until the next scheme (a token not followed by '=').
    for (;;) {
      skip_space();
      size_t mark = i;
      std::string name = Lower(token());
      skip_space();
      if (name.empty() || i >= header.size() || header[i] != '=') {
        i = mark;
        break;
      }
      ++i;  // '='
      skip_space();
      std::string value;
      if (i < header.size() && header[i] == '"') {
        ++i;
        while (i < header.size() && header[i] != '"') {
          if (header[i] == '\\' && i + 1 < header.size()) ++i;
          value += header[i++];
        }
        if (i < header.size()) ++i;  // the closing quote (an unterminated value ends the header)
      } else {
        value = token();
      }
      challenge.params[name] = value;
      skip_space();
      if (i < header.size() && header[i] == ',') ++i;
    }
    challenges.push_back(std::move(challenge));
  }
  return challenges;
}

struct RegistryClient::Impl {
  Impl(std::string registry_in, std::string repository_in, RegistryClientOptions options_in)
      : registry(std::move(registry_in)), repository(std::move(repository_in)), options(std::move(options_in)) {
    tls.set_default_verify_paths();
    if (!options.ca_file.empty()) {
      error_code ec;
      tls.load_verify_file(options.ca_file, ec);
      if (ec) ca_error = "cannot read the registry CA file " + options.ca_file + ": " + ec.message();
    }
    tls.set_verify_mode(ssl::verify_peer);
  }

  std::string registry;
  std::string repository;
  RegistryClientOptions options;
  asio::io_context io;
  ssl::context tls{ssl::context::tls_client};
  std::string ca_error;
  std::string authorization;  // for the registry's own host: "Bearer ..." or "Basic ..."
  std::atomic<bool> cancelled{false};
  beast::tcp_stream* current = nullptr;  // the connection under way; touched on io's thread only
  tcp::resolver* resolving = nullptr;    // likewise

  Url RegistryUrl(const std::string& path) const {
    Url url;
    url.scheme = options.plain_http ? "http" : "https";
    const size_t colon = registry.rfind(':');
    const bool has_port = colon != std::string::npos && registry.find(']', colon) == std::string::npos;
    url.host = has_port ? registry.substr(0, colon) : registry;
    if (!url.host.empty() && url.host.front() == '[') url.host = url.host.substr(1, url.host.size() - 2);
    url.port = has_port ? registry.substr(colon + 1) : (options.plain_http ? "80" : "443");
    url.target = path;
    return url;
  }
  std::string RegistryAuthority() const { return RegistryUrl("/").Authority(); }

  // Runs `work` to completion on io, from the calling thread.
  template <typename T>
  Result<T> Run(std::function<asio::awaitable<Result<T>>()> work) {
    if (cancelled) return MakeError(ErrorCode::kUnavailable, "the pull was cancelled", "pull_cancelled");
    std::optional<Result<T>> out;
    std::exception_ptr failure;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { out.emplace(co_await work()); },
        [&](std::exception_ptr e) { failure = e; });
    io.restart();
    io.run();
    if (failure) {
      try {
        std::rethrow_exception(failure);
      } catch (const std::exception& e) {
        return Unreachable(std::string("registry request failed: ") + e.what());
      }
    }
    if (cancelled) return MakeError(ErrorCode::kUnavailable, "the pull was cancelled", "pull_cancelled");
    if (!out) return Unreachable("registry request did not finish");
    return std::move(*out);
  }

  // Sends the request: its header, then its body (if any) piece by piece as `out.body` reads it.
  template <typename Stream>
  asio::awaitable<Status> Send(Stream& stream, beast::tcp_stream& lowest, const Url& url, const Outgoing& out,
                               const std::string& auth) {
    http::request<http::buffer_body> request{out.verb, url.target, 11};
    request.set(http::field::host, url.Authority());
    request.set(http::field::user_agent, "bulkhead/" BULKHEAD_VERSION);
    request.set(http::field::connection, "close");
    for (const auto& [name, value] : out.headers) request.set(name, value);
    if (!auth.empty()) request.set(http::field::authorization, auth);
    const uint64_t size = out.body ? out.body->size : 0;
    if (out.body || out.verb == http::verb::put || out.verb == http::verb::post) request.content_length(size);
    if (out.body) request.set(http::field::content_type, out.body->content_type);
    request.body().data = nullptr;
    request.body().more = size > 0;
    http::request_serializer<http::buffer_body> serializer{request};
    error_code ec;
    lowest.expires_after(options.idle_timeout);
    co_await http::async_write_header(stream, serializer, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Unreachable("sending to " + url.Authority() + ": " + ec.message());
    std::vector<char> piece(size > 0 ? kReadBytes : 0);
    for (uint64_t sent = 0; sent < size;) {
      auto n = out.body->read(sent, piece.data(), static_cast<size_t>(std::min<uint64_t>(piece.size(), size - sent)));
      if (!n.ok()) co_return n.error();
      if (*n == 0) co_return MakeError(ErrorCode::kInternal, "an upload's source ended early");
      sent += *n;
      request.body().data = piece.data();
      request.body().size = *n;
      request.body().more = sent < size;
      lowest.expires_after(options.idle_timeout);
      co_await http::async_write(stream, serializer, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return Unreachable("sending to " + url.Authority() + ": " + ec.message());
    }
    co_return Status();
  }

  template <typename Stream>
  asio::awaitable<Result<Reply>> Converse(Stream& stream, beast::tcp_stream& lowest, const Url& url, const Outgoing& out,
                                          const std::string& auth, const PlanBody& plan) {
    Status sent = co_await Send(stream, lowest, url, out, auth);
    if (!sent.ok()) co_return sent.error();
    error_code ec;

    // Beast reads as much as the buffer has room for: without room made here, 512 bytes a read.
    beast::flat_buffer buffer;
    buffer.reserve(kReadBytes);
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (out.verb == http::verb::head) parser.skip(true);
    lowest.expires_after(options.idle_timeout);
    co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Unreachable("reading from " + url.Authority() + ": " + ec.message());
    Reply reply;
    const auto& head = parser.get();
    reply.status = head.result_int();
    reply.content_type = Lower(std::string(head[http::field::content_type]));
    if (const size_t semi = reply.content_type.find(';'); semi != std::string::npos) reply.content_type.resize(semi);
    while (!reply.content_type.empty() && reply.content_type.back() == ' ') reply.content_type.pop_back();
    reply.location = std::string(head[http::field::location]);
    reply.www_authenticate = std::string(head[http::field::www_authenticate]);
    reply.digest = std::string(head["Docker-Content-Digest"]);
    reply.content_range = std::string(head[http::field::content_range]);
    if (parser.content_length()) reply.content_length = *parser.content_length();

    auto planned = plan(reply);
    if (!planned.ok()) co_return planned.error();
    BodyPlan body = std::move(*planned);
    // An error's body is only read for its message: a long one (a proxy's page) is cut, not refused.
    const bool cut_long_body = reply.status >= 300;
    if (!cut_long_body && out.verb != http::verb::head && !body.sink && reply.content_length &&
        *reply.content_length > body.collect_limit) {
      co_return MakeError(ErrorCode::kTooLarge, url.Authority() + " answered " + std::to_string(*reply.content_length) +
                                                    " bytes, more than the " + std::to_string(body.collect_limit) + " taken");
    }
    std::vector<char> piece(kReadBytes);  // (not an array: g++ 12 cannot keep one in a coroutine frame)
    while (!parser.is_done()) {
      parser.get().body().data = piece.data();
      parser.get().body().size = piece.size();
      lowest.expires_after(options.idle_timeout);
      // (read_some: one read at a time, so the idle timeout counts from the last byte, not from
      // the start of a piece that a slow but steady server takes long to fill)
      co_await http::async_read_some(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      // What arrived goes on even when the connection then broke: a resumed download starts after it.
      const size_t n = piece.size() - parser.get().body().size;
      if (n > 0 && body.sink) {
        Status taken = body.sink(std::string_view(piece.data(), n));
        if (!taken.ok()) co_return taken.error();
      } else if (n > 0) {
        if (cut_long_body && reply.body.size() + n > body.collect_limit) {
          reply.body.append(piece.data(), body.collect_limit - reply.body.size());
          break;  // the rest is never read: the connection closes with this exchange
        }
        if (reply.body.size() + n > body.collect_limit) {
          co_return MakeError(ErrorCode::kTooLarge, url.Authority() + " answered more than the " +
                                                        std::to_string(body.collect_limit) + " bytes taken");
        }
        reply.body.append(piece.data(), n);
      }
      if (ec) {
        co_return Unreachable("reading from " + url.Authority() + ": " +
                              (ec == beast::error::timeout ? std::string("no data for ") +
                                                                 std::to_string(options.idle_timeout.count()) + " ms"
                                                           : ec.message()));
      }
    }
    co_return reply;
  }

  // One request on a connection of its own: connect (TLS for https), send, read.
  asio::awaitable<Result<Reply>> Exchange(const Url& url, const Outgoing& out, const std::string& auth,
                                          const PlanBody& plan) {
    if (url.scheme == "https" && !ca_error.empty()) co_return MakeError(ErrorCode::kInvalid, ca_error);
    auto executor = co_await asio::this_coro::executor;
    tcp::resolver resolver(executor);
    resolving = &resolver;
    error_code ec;
    auto endpoints = co_await resolver.async_resolve(url.host, url.port, asio::redirect_error(asio::use_awaitable, ec));
    resolving = nullptr;
    if (cancelled) co_return MakeError(ErrorCode::kUnavailable, "the pull was cancelled", "pull_cancelled");
    if (ec) co_return Unreachable("cannot resolve " + url.host + ": " + ec.message());
    beast::tcp_stream tcp_stream(executor);
    current = &tcp_stream;
    struct Clear {
      beast::tcp_stream*& current;
      ~Clear() { current = nullptr; }
    } clear{current};
    tcp_stream.expires_after(options.connect_timeout);
    co_await tcp_stream.async_connect(endpoints, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Unreachable("cannot connect to " + url.Authority() + ": " + ec.message());
    if (url.scheme == "http") co_return co_await Converse(tcp_stream, tcp_stream, url, out, auth, plan);

    beast::ssl_stream<beast::tcp_stream&> tls_stream(tcp_stream, tls);
    // The server name goes out for host names only (RFC 6066 has none for addresses).
    error_code not_an_address;
    (void)asio::ip::make_address(url.host, not_an_address);
    if (not_an_address && !SSL_set_tlsext_host_name(tls_stream.native_handle(), url.host.c_str())) {
      co_return Unreachable("cannot set the TLS server name " + url.host);
    }
    tls_stream.set_verify_callback(ssl::host_name_verification(url.host));
    tcp_stream.expires_after(options.connect_timeout);
    co_await tls_stream.async_handshake(ssl::stream_base::client, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Unreachable("TLS with " + url.Authority() + " failed: " + ec.message());
    co_return co_await Converse(tls_stream, tcp_stream, url, out, auth, plan);
  }

  // A request to the registry with its auth: on a 401 the challenge is answered once (a token
  // fetched, or Basic credentials sent) and the request made again. Redirects are followed
  // (to other hosts without the registry's credentials) when follow_redirects.
  asio::awaitable<Result<Reply>> Request(const Url& first, const Outgoing& out, const PlanBody& plan,
                                         bool follow_redirects) {
    Url url = first;
    bool answered_challenge = false;
    for (int hops = 0;;) {
      // (no temporaries in co_await expressions: g++ 12 destroys them wrongly)
      // (the scheme too: a redirect from https to plain http on the same host gets no login)
      const bool own_host = url.scheme == RegistryUrl("/").scheme && url.Authority() == RegistryAuthority();
      const std::string auth = own_host ? authorization : std::string();
      auto reply = co_await Exchange(url, out, auth, plan);
      if (!reply.ok()) co_return reply;
      if (reply->status == 401 && own_host && !answered_challenge) {
        answered_challenge = true;
        Status authenticated = co_await Authenticate(reply->www_authenticate, out.verb != http::verb::get &&
                                                                                  out.verb != http::verb::head);
        if (!authenticated.ok()) co_return authenticated.error();
        continue;
      }
      if (follow_redirects && reply->status >= 301 && reply->status <= 308 && reply->status != 304 &&
          !reply->location.empty()) {
        if (++hops > kMaxRedirects) co_return Unreachable("too many redirects from " + registry);
        auto next = ResolveLocation(url, reply->location);
        if (!next.ok()) co_return Unreachable(registry + " redirected to a bad location");
        url = std::move(*next);
        continue;
      }
      co_return reply;
    }
  }

  // push: the request writes (the scope asked for, when the challenge names none, is pull,push).
  asio::awaitable<Status> Authenticate(const std::string& header, bool push) {
    const std::vector<AuthChallenge> challenges = ParseAuthChallenges(header);
    const AuthChallenge* bearer = nullptr;
    const AuthChallenge* basic = nullptr;
    for (const AuthChallenge& c : challenges) {
      if (c.scheme == "bearer" && !bearer) bearer = &c;
      if (c.scheme == "basic" && !basic) basic = &c;
    }
    const std::string basic_value =
        options.credentials ? "Basic " + Base64Encode(options.credentials->username + ":" + options.credentials->password) : "";
    if (bearer) {
      auto realm_it = bearer->params.find("realm");
      if (realm_it == bearer->params.end()) co_return Unreachable(registry + " asked for a token without saying where");
      auto realm = ParseUrl(realm_it->second);
      if (!realm.ok()) co_return Unreachable(registry + " named a bad token realm");
      // A token over plain HTTP only where the registry is plain HTTP too, or on this machine.
      if (realm->scheme == "http" && !options.plain_http && !IsLoopback(realm->host)) {
        co_return Unreachable(registry + " named a plain-HTTP token realm (" + realm->Authority() + ")");
      }
      std::string query;
      if (auto it = bearer->params.find("service"); it != bearer->params.end()) query += "service=" + PercentEncode(it->second);
      auto scope = bearer->params.find("scope");
      const bool writes = push || options.push;
      std::string wanted = scope != bearer->params.end() ? scope->second
                                                          : "repository:" + repository + (writes ? ":pull,push" : ":pull");
      if (writes && wanted == "repository:" + repository + ":pull") wanted += ",push";
      query += std::string(query.empty() ? "" : "&") + "scope=" + PercentEncode(wanted);
      realm->target += (realm->target.find('?') == std::string::npos ? "?" : "&") + query;
      const Outgoing get;
      const PlanBody collect = [](const Reply&) -> Result<BodyPlan> { return BodyPlan{nullptr, kMaxTokenBody}; };
      auto reply = co_await Exchange(*realm, get, basic_value, collect);
      if (!reply.ok()) co_return reply.error();
      if (reply->status == 401 || reply->status == 403) {
        co_return MakeError(reply->status == 401 ? ErrorCode::kUnauthorized : ErrorCode::kForbidden,
                            "the token service of " + registry + " refused " +
                                (options.credentials ? "the login" : "an anonymous pull") + ": " + RegistrySays(*reply),
                            "registry_unauthorized");
      }
      if (reply->status != 200) {
        co_return Unreachable("the token service of " + registry + " answered " + std::to_string(reply->status));
      }
      nlohmann::json doc = nlohmann::json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
      std::string token;
      for (const char* key : {"token", "access_token"}) {
        if (doc.is_object() && doc.contains(key) && (*doc.find(key)).is_string()) {
          token = (*doc.find(key)).get<std::string>();
          break;
        }
      }
      if (token.empty() || token.size() > 64 * 1024) co_return Unreachable("the token service of " + registry + " gave no token");
      for (char c : token)
        if (c <= 0x20 || c >= 0x7f) co_return Unreachable("the token service of " + registry + " gave a bad token");
      authorization = "Bearer " + token;
      co_return Status();
    }
    if (basic && !basic_value.empty()) {
      authorization = basic_value;
      co_return Status();
    }
    co_return MakeError(ErrorCode::kUnauthorized,
                        registry + " needs a login" + (options.credentials ? "" : " (none is configured for it)"),
                        "registry_unauthorized");
  }

  // The error for a reply that is not what the call wanted.
  Error ReplyError(const Reply& reply, const std::string& what, const char* not_found_code) const {
    const std::string said = reply.body.empty() ? "" : ": " + RegistrySays(reply);
    switch (reply.status) {
      case 401:
        return MakeError(ErrorCode::kUnauthorized, registry + " refused " + what + said, "registry_unauthorized");
      case 403:
        return MakeError(ErrorCode::kForbidden, registry + " denied " + what + said, "registry_denied");
      case 404:
        return MakeError(ErrorCode::kNotFound, registry + " has no " + what + said, not_found_code);
      default:
        return Unreachable(registry + " answered " + std::to_string(reply.status) + " for " + what + said);
    }
  }
};

RegistryClient::RegistryClient(std::string registry, std::string repository, RegistryClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(registry), std::move(repository), std::move(options))) {}

RegistryClient::~RegistryClient() = default;

void RegistryClient::Cancel() {
  impl_->cancelled = true;
  asio::post(impl_->io, [impl = impl_.get()] {
    if (impl->current) impl->current->close();
    if (impl->resolving) impl->resolving->cancel();
  });
}

Result<FetchedManifest> RegistryClient::GetManifest(const std::string& reference, size_t max_bytes) {
  Impl& d = *impl_;
  const std::string what = "manifest " + d.repository + ":" + reference;
  // (the headers and plan are made outside the coroutine: g++ 12 cannot keep an initializer
  // list's array in a coroutine frame)
  Outgoing get;
  get.headers.emplace_back(http::field::accept, ManifestAcceptHeader());
  PlanBody plan = [&](const Reply& r) -> Result<BodyPlan> {
    return BodyPlan{nullptr, r.status == 200 ? max_bytes : kMaxErrorBody};
  };
  const Url url = d.RegistryUrl("/v2/" + d.repository + "/manifests/" + reference);
  auto reply = d.Run<Reply>([&]() -> asio::awaitable<Result<Reply>> {
    co_return co_await d.Request(url, get, plan, /*follow_redirects=*/true);
  });
  if (!reply.ok()) return reply.error();
  if (reply->status != 200) return d.ReplyError(*reply, what, "image_not_found");
  return FetchedManifest{reply->content_type, std::move(reply->body), reply->digest};
}

Status RegistryClient::FetchBlob(const std::string& digest, uint64_t offset, uint64_t expected_size,
                                 const std::function<Status(std::string_view)>& sink,
                                 const std::function<Status()>& restart) {
  Impl& d = *impl_;
  const std::string what = "blob " + digest;
  uint64_t position = offset;
  std::optional<Error> last;
  for (int attempt = 0; attempt < kBlobAttempts; ++attempt) {
    const uint64_t started_at = position;
    Outgoing get;
    if (position > 0) get.headers.emplace_back(http::field::range, "bytes=" + std::to_string(position) + "-");
    PlanBody plan = [&](const Reply& r) -> Result<BodyPlan> {
      if (r.status == 206) {
        if (!r.content_range.starts_with("bytes " + std::to_string(position) + "-")) {
          return Unreachable(d.registry + " answered another range than asked for " + what);
        }
      } else if (r.status == 200) {
        if (position > 0) {
          BH_TRY(restart());  // the whole blob again, not the range
          position = 0;
        }
      } else {
        return BodyPlan{nullptr, kMaxErrorBody};
      }
      if (r.content_length && *r.content_length > expected_size - position) {
        return MakeError(ErrorCode::kInvalid,
                         d.registry + " sends " + std::to_string(*r.content_length) + " bytes for " + what +
                             ", more than its manifest says (" + std::to_string(expected_size) + ")",
                         "blob_too_large");
      }
      return BodyPlan{[&](std::string_view piece) -> Status {
                        if (piece.size() > expected_size - position) {
                          return MakeError(ErrorCode::kInvalid,
                                           d.registry + " sends more bytes for " + what + " than its manifest says",
                                           "blob_too_large");
                        }
                        BH_TRY(sink(piece));
                        position += piece.size();
                        return {};
                      },
                      0};
    };
    const Url url = d.RegistryUrl("/v2/" + d.repository + "/blobs/" + digest);
    auto reply = d.Run<Reply>([&]() -> asio::awaitable<Result<Reply>> {
      co_return co_await d.Request(url, get, plan, /*follow_redirects=*/true);
    });
    if (reply.ok()) {
      if (reply->status != 200 && reply->status != 206) return d.ReplyError(*reply, what, "blob_not_found");
      if (position < expected_size) {
        last = Unreachable(d.registry + " ended " + what + " after " + std::to_string(position) + " of " +
                           std::to_string(expected_size) + " bytes");
      } else {
        return {};
      }
    } else {
      last = reply.error();
      if (reply.error().code != ErrorCode::kBadGateway) return reply.error();
    }
    // A dropped connection that had moved on is resumed from where it stopped; one that gave
    // nothing is not tried again.
    if (position == started_at) break;
  }
  return *last;
}

Result<bool> RegistryClient::HasBlob(const std::string& digest) {
  Impl& d = *impl_;
  Outgoing head;
  head.verb = http::verb::head;
  const PlanBody plan = [](const Reply&) -> Result<BodyPlan> { return BodyPlan{nullptr, kMaxErrorBody}; };
  const Url url = d.RegistryUrl("/v2/" + d.repository + "/blobs/" + digest);
  auto reply = d.Run<Reply>([&]() -> asio::awaitable<Result<Reply>> {
    co_return co_await d.Request(url, head, plan, /*follow_redirects=*/true);
  });
  if (!reply.ok()) return reply.error();
  if (reply->status == 200) return true;
  if (reply->status == 404) return false;
  return d.ReplyError(*reply, "blob " + digest, "blob_not_found");
}

Status RegistryClient::UploadBlob(const std::string& digest, const Body& body) {
  Impl& d = *impl_;
  const std::string what = "an upload of blob " + digest + " to " + d.repository;
  const PlanBody plan = [](const Reply&) -> Result<BodyPlan> { return BodyPlan{nullptr, kMaxErrorBody}; };
  Outgoing start;
  start.verb = http::verb::post;
  const Url start_url = d.RegistryUrl("/v2/" + d.repository + "/blobs/uploads/");
  auto started = d.Run<Reply>([&]() -> asio::awaitable<Result<Reply>> {
    co_return co_await d.Request(start_url, start, plan, /*follow_redirects=*/false);
  });
  if (!started.ok()) return started.error();
  if (started->status != 202 || started->location.empty()) return d.ReplyError(*started, what, "registry_denied");
  auto location = ResolveLocation(start_url, started->location);
  if (!location.ok()) return Unreachable(d.registry + " answered a bad upload location");
  Url put_url = *location;
  put_url.target += (put_url.target.find('?') == std::string::npos ? "?" : "&") + std::string("digest=") + PercentEncode(digest);
  Outgoing put;
  put.verb = http::verb::put;
  put.body = &body;
  auto finished = d.Run<Reply>([&]() -> asio::awaitable<Result<Reply>> {
    co_return co_await d.Request(put_url, put, plan, /*follow_redirects=*/false);
  });
  if (!finished.ok()) return finished.error();
  if (finished->status != 201) return d.ReplyError(*finished, what, "registry_denied");
  return {};
}

Status RegistryClient::PutManifest(const std::string& reference, const std::string& media_type,
                                   const std::string& manifest) {
  Impl& d = *impl_;
  Body body;
  body.content_type = media_type;
  body.size = manifest.size();
  body.read = [&manifest](uint64_t offset, char* buffer, size_t capacity) -> Result<size_t> {
    const size_t n = std::min<size_t>(capacity, manifest.size() - offset);
    std::memcpy(buffer, manifest.data() + offset, n);
    return n;
  };
  Outgoing put;
  put.verb = http::verb::put;
  put.body = &body;
  const PlanBody plan = [](const Reply&) -> Result<BodyPlan> { return BodyPlan{nullptr, kMaxErrorBody}; };
  const Url url = d.RegistryUrl("/v2/" + d.repository + "/manifests/" + reference);
  auto reply = d.Run<Reply>([&]() -> asio::awaitable<Result<Reply>> {
    co_return co_await d.Request(url, put, plan, /*follow_redirects=*/false);
  });
  if (!reply.ok()) return reply.error();
  if (reply->status != 201) return d.ReplyError(*reply, "the manifest " + d.repository + ":" + reference, "registry_denied");
  return {};
}

}  // namespace bulkhead::storage
