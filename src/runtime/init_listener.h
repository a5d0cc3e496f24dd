// The way to an init that dials the daemon instead of listening (gvisor: gVisor's checkpoint
// cannot save a bound host socket, and a restored copy must reach its own daemon; see
// ctl_protocol.h "Transport"). The daemon listens at a path in the sandbox's control directory;
// init keeps connections to it waiting (ctl::kIdleConnections), and each Dial takes one.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"
#include "runtime/tier.h"

namespace bulkhead::runtime {

class InitListener : public InitDialer {
 public:
  // How long a Dial waits for init to have a connection ready (it keeps some waiting: only a
  // burst of requests, or an init that is gone or frozen, makes one wait).
  static constexpr auto kDialWait = std::chrono::seconds(5);

  // Listens at `path` (whatever was there replaced), the socket owned by `peer_uid` (mode 0600)
  // so that the sandbox's runtime may connect, and only connections from `peer_uid` are taken
  // (SO_PEERCRED): nothing else on the host can stand in for init. A listener that could not be
  // made answers each Dial with why.
  static std::shared_ptr<InitListener> Listen(const std::string& path, uid_t peer_uid);

  // Whether the socket could be made.
  Status status() const { return broken_ ? Status(*broken_) : Status(); }
  // True once init has a connection waiting; false at `timeout` (a launch waits so for init).
  bool WaitForInit(std::chrono::milliseconds timeout) const;

  boost::asio::awaitable<Result<boost::asio::local::stream_protocol::socket>> Dial(
      boost::asio::any_io_executor executor) const override;

 private:
  InitListener(std::string path, uid_t peer_uid) : path_(std::move(path)), peer_uid_(peer_uid) {}
  // A connection from init, if one waits (refused peers are dropped); an error once the
  // listener itself fails.
  Result<UniqueFd> TakeWaiting() const;

  std::string path_;
  uid_t peer_uid_;
  UniqueFd fd_;  // non-blocking
  std::optional<Error> broken_;
};

}  // namespace bulkhead::runtime
