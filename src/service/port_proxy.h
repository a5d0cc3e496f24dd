// The port proxy (API.md "Ports"): HTTP for a sandbox's 127.0.0.1:{port}, reached by path
// (/v1/sandboxes/{id}/ports/{port}/...) or by host name ({port}-{id}.{preview_domain}),
// bodies streamed both ways, WebSocket upgrades relayed raw; and raw TCP for port-forward
// (GET /v1/sandboxes/{id}/tcp/{port} with Upgrade: tcp). The upstream socket is made inside
// the sandbox's network namespace (SandboxManager::SandboxSocket): the daemon reaches the
// sandbox's loopback, and nothing else, through it. One upstream connection per request.
#pragma once
#include <string>
#include <string_view>

#include <boost/beast/http/fields.hpp>

#include "common/result.h"
#include "core/sandbox_manager.h"
#include "http/http_exchange.h"
#include "net/relay.h"

namespace bulkhead::api {

struct PortProxyRequest {
  std::string sandbox_id;
  std::string port;        // as written; validated by ServePortProxy
  std::string app_target;  // the request target for the app ("/path?query")
  // By host name the original Host goes to the app and the path is the app's own; by path
  // the app sees Host: localhost:{port} and X-Forwarded-Prefix: /v1/sandboxes/{id}/ports/{port}.
  bool by_host = false;
  // Whether the client's Authorization header stays behind. On the path route it always
  // does (it carries the bulkhead key); by host name only when it is the bulkhead key.
  bool strip_authorization = true;
};

// Errors before anything reached the client are ordinary API errors: 404 unknown sandbox,
// 422 (by host name 404) bad port, 409 sandbox not running, 502 port_not_listening.
boost::asio::awaitable<void> ServePortProxy(HttpExchange& exchange, core::SandboxManager& manager,
                                            const PortProxyRequest& request);

// ServePortProxy in two steps, for a front that answers its errors in its own words: the
// connection to the app (the errors above, not sent), then the exchange relayed over it.
boost::asio::awaitable<Result<net::StreamSocket>> ConnectToPort(core::SandboxManager& manager,
                                                                const PortProxyRequest& request);
boost::asio::awaitable<void> RelayToPort(HttpExchange& exchange, net::StreamSocket app,
                                         const PortProxyRequest& request);
// The detail_code of ConnectToPort's error when nothing listens on the port.
inline constexpr std::string_view kPortNotListening = "port_not_listening";

// Port-forward: connects first, then answers 101 (Upgrade: tcp) and relays raw bytes.
// 400 without the upgrade headers, 404 unknown sandbox, 422 bad port, 502 port_not_listening.
boost::asio::awaitable<void> ServeTcpForward(HttpExchange& exchange, core::SandboxManager& manager,
                                             const std::string& sandbox_id, const std::string& port);

// The head of the request to the app: the client's minus hop-by-hop headers (an upgrade
// keeps Upgrade), minus Authorization if asked, minus Expect (the proxy answers it), minus
// the preview credentials (preview_access.h: the token headers and cookie), with
// Host, X-Forwarded-*, the body's framing and Connection: close (or Upgrade). Pure.
RequestHeader AppRequestHead(const RequestHeader& client, const PortProxyRequest& request,
                             std::string_view client_address, bool upgrade);

// The head of the app's response for the client: hop-by-hop headers removed (a 101 keeps
// Upgrade), the body's framing kept (the body is relayed as the app sent it), and
// Connection: close unless it is a 101. Pure.
http::response<http::empty_body> ClientResponseHead(const http::response_header<>& app, unsigned version);

// Whether the request asks to switch protocols (Connection: upgrade and an Upgrade header).
bool IsUpgradeRequest(const RequestHeader& request);

// The IP address of the peer of the connected socket `fd` (for X-Forwarded-For, the audit's
// source); "" for a unix socket client.
std::string ClientAddress(int fd);

}  // namespace bulkhead::api
