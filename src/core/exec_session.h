// One command running in a sandbox, seen from the daemon: a connection to the sandbox's
// init speaking ctl_protocol.h. Lives on an io_context; every call must come from it.
#pragma once
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <memory>
#include <string>

#include "common/result.h"
#include "core/ctl_client.h"
#include "core/output_budget.h"
#include "core/types.h"

namespace bulkhead::core {

class ExecSession {
 public:
  explicit ExecSession(boost::asio::local::stream_protocol::socket socket);
  ~ExecSession();

  // Connects to the sandbox's init and sends the request (and its stdin).
  static boost::asio::awaitable<Result<std::unique_ptr<ExecSession>>> Start(
      boost::asio::any_io_executor executor, std::shared_ptr<const runtime::InitDialer> init, std::string request_json,
      std::optional<std::string> stdin_data);

  // The next event. kStarted comes first, kExit last; after kExit, calling Next is an error.
  // An error frame from init (no such cwd/user) or a lost connection becomes an Error.
  boost::asio::awaitable<Result<ExecEvent>> Next();

  // Closes the connection: init then kills the command's process group.
  void Cancel();

  // Something to keep alive as long as the session (the manager's "sandbox in use" mark).
  void Hold(std::shared_ptr<void> token) { token_ = std::move(token); }
  // Output frames are read no faster than this budget allows (null: no cap).
  void PaceWith(std::shared_ptr<OutputBudget> budget) { client_.PaceWith(std::move(budget)); }

 private:
  CtlClient client_;  // the frames; the writes go out on a duplicate of its socket (Start)
  std::shared_ptr<void> token_;
  bool done_ = false;
};

}  // namespace bulkhead::core
