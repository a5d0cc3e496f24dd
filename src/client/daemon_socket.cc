#include "client/daemon_socket.h"

#include <sys/un.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <cerrno>
#include <chrono>

#include "common/tls_relay.h"

namespace bulkhead::cli {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

std::string ParentDir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// What to tell the user when nothing answers at `address`.
Error ConnectError(const ServerAddress& address, const error_code& ec) {
  int err = ec.category() == boost::system::system_category() ? ec.value() : 0;
  std::string url = address.ToUrl();
  if (err == EACCES || err == EPERM) {
    return MakeError(ErrorCode::kForbidden,
                     "permission denied connecting to the daemon at " + url +
                         " (run as the daemon's user, e.g. with sudo, or use --url http://HOST:PORT)",
                     "permission_denied");
  }
  if (err == ENOENT || err == ECONNREFUSED || err == ENOTDIR) {
    std::string start_hint =
        address.kind == ServerAddress::Kind::kUnix
            ? "bulkhead serve --state-dir " + ParentDir(address.socket_path)
            : "bulkhead serve --listen " + address.HostHeader();
    return MakeError(ErrorCode::kUnavailable,
                     "cannot reach the bulkhead daemon at " + url + ": " + ec.message() +
                         ". Is it running? Start it with: sudo " + start_hint,
                     "daemon_not_running");
  }
  return MakeError(ErrorCode::kUnavailable, "cannot connect to the daemon at " + url + ": " + ec.message(),
                   "daemon_unreachable");
}

// Swaps the connected TCP `socket` for the plain end of a TLS relay to it (common/tls_relay.h):
// the rest of the client reads and writes plain HTTP on it as over any other connection.
Status StartTls(const ServerAddress& address, asio::generic::stream_protocol::socket& socket) {
  auto endpoint = TlsEndpoint::Client(address.ca_file);
  if (!endpoint.ok()) return endpoint.error();
  UniqueFd tcp(socket.release());
  auto plain = (*endpoint)->WrapBlocking(std::move(tcp), address.host, std::chrono::seconds(30));
  if (!plain.ok())
    return MakeError(ErrorCode::kUnavailable, "TLS to the daemon at " + address.ToUrl() + ": " + plain.error().message,
                     "daemon_unreachable");
  error_code ec;
  socket.assign(asio::generic::stream_protocol(AF_UNIX, 0), plain->get(), ec);
  if (ec) return MakeError(ErrorCode::kInternal, "TLS relay socket: " + ec.message());
  plain->release();
  return {};
}

}  // namespace

Status ConnectToDaemon(const ServerAddress& address, asio::generic::stream_protocol::socket& socket) {
  error_code ec;
  if (address.kind == ServerAddress::Kind::kUnix) {
    if (address.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
      return MakeError(ErrorCode::kBadRequest, "socket path too long for a unix socket: " + address.socket_path,
                       "invalid_url");
    }
    asio::local::stream_protocol::endpoint endpoint(address.socket_path);
    socket.connect(asio::generic::stream_protocol::endpoint(endpoint), ec);
    if (ec) return ConnectError(address, ec);
    return {};
  }
  asio::ip::tcp::resolver resolver(socket.get_executor());
  auto endpoints = resolver.resolve(address.host, std::to_string(address.port), ec);
  if (ec) {
    return MakeError(ErrorCode::kUnavailable, "cannot resolve daemon host '" + address.host + "': " + ec.message(),
                     "daemon_unreachable");
  }
  for (const auto& entry : endpoints) {
    if (socket.is_open()) socket.close(ec);
    socket.connect(asio::generic::stream_protocol::endpoint(entry.endpoint()), ec);
    if (!ec) return address.tls ? StartTls(address, socket) : Status{};
  }
  return ConnectError(address, ec);
}

}  // namespace bulkhead::cli
