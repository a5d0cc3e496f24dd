// Where the CLI finds the daemon: `unix:///path/to/sock`, `http://host:port` or `https://...`.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "common/percent_encode.h"
#include "common/result.h"

namespace bulkhead::cli {

struct ServerAddress {
  enum class Kind { kUnix, kTcp };
  Kind kind = Kind::kUnix;
  std::string socket_path;  // kUnix
  std::string host;         // kTcp, without IPv6 brackets
  uint16_t port = 0;        // kTcp
  bool tls = false;         // kTcp: https://
  std::string ca_file;      // with tls: the authority to check the daemon's certificate against; "" = the system's

  // The value for the Host header.
  std::string HostHeader() const;
  // Back in URL form, for messages.
  std::string ToUrl() const;
};

// Accepts `unix:///abs/path`, `unix:relative/path`, a bare `/abs/path`, `http://host[:port]`
// (port 80 when absent, `[::1]` for IPv6), `https://host[:port]` (443) and `host:port`. A path after the authority is
// not allowed: the API lives at the root.
Result<ServerAddress> ParseServerUrl(std::string_view url);

// The default: the unix socket the daemon always opens in its state dir.
ServerAddress DefaultServerAddress(const std::string& state_dir);

// (ids and names go into paths and queries percent-encoded: common/percent_encode.h)
using bulkhead::PercentEncode;

}  // namespace bulkhead::cli
