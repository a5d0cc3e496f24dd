// One TCP connection a sandbox made, accepted on its proxy listener (egress_proxy.h tells the
// rules): transparent when its namespace redirected it (SO_ORIGINAL_DST names where it was
// going), explicit when made to the listener itself (HTTP_PROXY: CONNECT or absolute-form).
// Decides, connects to what the proxy itself resolved, and relays; cut from any thread through
// its SandboxEgress entry.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "net/relay.h"
#include "net/sandbox_egress.h"

namespace bulkhead::net {

// Serves `client` on its executor (a strand of its own) until it is done.
void ServeProxyConnection(ProxyContext& context, std::shared_ptr<SandboxEgress> sandbox, StreamSocket client);

// Where an explicit proxy request goes: the authority of a CONNECT target, of an absolute URI,
// or of a Host header.
struct Destination {
  std::optional<std::string> name;     // normalized; or
  std::optional<IpAddress> address;    // an address literal
  uint16_t port = 0;
  std::string HostPort() const;        // "a.test:443", "1.2.3.4:80", "[2001:db8::1]:443"
  bool operator==(const Destination&) const = default;
};
// "host:port", "[v6]:port", or without ":port" when `default_port` is given.
std::optional<Destination> ParseAuthority(std::string_view authority, std::optional<uint16_t> default_port);

}  // namespace bulkhead::net
