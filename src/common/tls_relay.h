// TLS ended in-process. A TLS connection's plain bytes are relayed over a socketpair, whose
// other end the caller reads and writes as it would a plain connection: the daemon serves
// every route (streams, upgrades, raw TCP forwards) over TLS unchanged, and the CLI's client
// talks to an https:// daemon the same way. OpenSSL (through Boost.Asio's ssl) does the TLS;
// versions below 1.2 are refused.
#pragma once
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace bulkhead {

class TlsEndpoint : public std::enable_shared_from_this<TlsEndpoint> {
 public:
  // The daemon's side: its certificate chain and private key (PEM files). 400-class errors
  // name the file that is missing, unreadable or does not match.
  static Result<std::shared_ptr<TlsEndpoint>> Server(const std::string& cert_path, const std::string& key_path);
  // A server's side: loads its certificate and key again from their paths, for the handshakes
  // from now on (connections already made keep theirs). An error (a file missing, unreadable,
  // not PEM, or a key that does not match) keeps the ones in use. `changed_only`: only if
  // either file's size or modification time differs from what was loaded; false when nothing
  // was loaded then.
  Result<bool> Reload(bool changed_only);
  // A client's side: the server's certificate is checked against `ca_path` (PEM), or the
  // system's trusted authorities when it is "", and must name the host it is asked for.
  static Result<std::shared_ptr<TlsEndpoint>> Client(const std::string& ca_path);
  ~TlsEndpoint();

  // Takes the connected TCP socket `tcp`, completes the TLS handshake within `timeout` (a
  // client's checks `server_name`), then relays between it and the returned plain end on
  // `executor` until either side closes. The endpoint must outlive the relay.
  boost::asio::awaitable<Result<UniqueFd>> Wrap(boost::asio::any_io_executor executor, UniqueFd tcp,
                                                std::string server_name, std::chrono::milliseconds timeout);

  // Wrap for a blocking caller: the handshake and then the relay run on a thread of their own,
  // which holds the endpoint until the relay ends.
  Result<UniqueFd> WrapBlocking(UniqueFd tcp, const std::string& server_name, std::chrono::milliseconds timeout);
  // Waits up to `limit` for WrapBlocking's relays to end (each does once its plain end is
  // closed and the peer has answered close_notify) and joins their threads. A process calls
  // it before it exits: a relay thread still running then takes OpenSSL's per-thread state
  // (its random generator) down with the process instead of freeing it.
  static void FinishBlockingRelays(std::chrono::milliseconds limit);

 private:
  struct Impl;
  explicit TlsEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace bulkhead
