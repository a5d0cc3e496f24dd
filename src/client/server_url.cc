#include "client/server_url.h"

#include <charconv>

namespace bulkhead::cli {
namespace {

Error BadUrl(std::string_view url, std::string_view why) {
  return MakeError(ErrorCode::kBadRequest,
                   "invalid daemon URL '" + std::string(url) + "': " + std::string(why) +
                       " (use unix:///path/to/bulkhead.sock or http://127.0.0.1:7420)",
                   "invalid_url");
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// `authority` is host[:port] or [v6]:port.
Result<ServerAddress> ParseAuthority(std::string_view url, std::string_view authority, uint16_t default_port) {
  ServerAddress address;
  address.kind = ServerAddress::Kind::kTcp;
  std::string_view port_text;
  if (StartsWith(authority, "[")) {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return BadUrl(url, "unterminated '['");
    address.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return BadUrl(url, "expected ':' after ']'");
      port_text = after.substr(1);
      if (port_text.empty()) return BadUrl(url, "empty port");
    }
  } else {
    size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      if (authority.find(':') != colon) return BadUrl(url, "IPv6 addresses need brackets");
      address.host = std::string(authority.substr(0, colon));
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return BadUrl(url, "empty port");
    } else {
      address.host = std::string(authority);
    }
  }
  if (address.host.empty()) return BadUrl(url, "no host");
  address.port = default_port;
  if (!port_text.empty()) {
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535) {
      return BadUrl(url, "bad port '" + std::string(port_text) + "'");
    }
    address.port = static_cast<uint16_t>(port);
  }
  return address;
}

}  // namespace

std::string ServerAddress::HostHeader() const {
  if (kind == Kind::kUnix) return "localhost";
  std::string host_part = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return port == (tls ? 443 : 80) ? host_part : host_part + ":" + std::to_string(port);
}

std::string ServerAddress::ToUrl() const {
  if (kind == Kind::kUnix) return "unix://" + socket_path;
  std::string host_part = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return (tls ? "https://" : "http://") + host_part + ":" + std::to_string(port);
}

Result<ServerAddress> ParseServerUrl(std::string_view url) {
  if (url.empty()) return BadUrl(url, "empty");
  if (StartsWith(url, "unix:") || StartsWith(url, "/")) {
    std::string_view path = url;
    if (StartsWith(path, "unix://")) {
      path.remove_prefix(7);
    } else if (StartsWith(path, "unix:")) {
      path.remove_prefix(5);
    }
    if (path.empty()) return BadUrl(url, "no socket path");
    ServerAddress address;
    address.kind = ServerAddress::Kind::kUnix;
    address.socket_path = std::string(path);
    return address;
  }
  std::string_view authority = url;
  size_t scheme_end = url.find("://");
  if (scheme_end != std::string_view::npos) {
    std::string_view scheme = url.substr(0, scheme_end);
    if (scheme != "http" && scheme != "https") return BadUrl(url, "unknown scheme '" + std::string(scheme) + "'");
    authority = url.substr(scheme_end + 3);
  }
  const bool tls = StartsWith(url, "https://");
  // Allow one trailing '/', nothing more: the API has no base path.
  if (!authority.empty() && authority.back() == '/') authority.remove_suffix(1);
  if (authority.find('/') != std::string_view::npos) return BadUrl(url, "a path is not allowed");
  auto address = ParseAuthority(url, authority, tls ? 443 : 80);
  if (address.ok()) address->tls = tls;
  return address;
}

ServerAddress DefaultServerAddress(const std::string& state_dir) {
  ServerAddress address;
  address.kind = ServerAddress::Kind::kUnix;
  std::string dir = state_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  address.socket_path = dir + "/bulkhead.sock";
  return address;
}

}  // namespace bulkhead::cli
