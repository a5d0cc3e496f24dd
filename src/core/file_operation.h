// One file operation (ctl_protocol.h, "File operations") seen from the daemon: a worker that
// a sandbox's init forks runs it inside the sandbox, its stdin and stdout carry the content,
// and a failure comes back as one JSON line on its stderr. Lives on the executor of the
// connection it was started on; every call must come from there.
#pragma once
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "core/ctl_client.h"
#include "core/sandbox_manager.h"

namespace bulkhead::core {

class FileOperation {
 public:
  struct State;
  explicit FileOperation(std::shared_ptr<State> state);
  ~FileOperation();  // cancels a worker still running
  FileOperation(const FileOperation&) = delete;
  FileOperation& operator=(const FileOperation&) = delete;

  // Sends `op` (the "file_op" object) to run as `user` and waits until init reports the
  // worker started (or refused: an unknown user is 404). With `with_input` the worker's
  // stdin is fed by Write/CloseInput, and its output is collected meanwhile for Finish;
  // without, the caller reads the output with Read.
  static boost::asio::awaitable<Result<std::unique_ptr<FileOperation>>> Start(InitConnection connection,
                                                                             const nlohmann::json& op,
                                                                             const std::string& user,
                                                                             bool with_input);
  // Both ways at once (the "connect" relay): stdin fed by Write/CloseInput while the caller
  // reads the output with Read (one Write and one Read may be in flight together).
  static boost::asio::awaitable<Result<std::unique_ptr<FileOperation>>> StartDuplex(InitConnection connection,
                                                                                   const nlohmann::json& op,
                                                                                   const std::string& user);

  // with_input (or duplex): the next bytes of the worker's stdin. Fails once the worker ended (it read
  // no more; Finish says whether it succeeded) or the connection to init is lost.
  boost::asio::awaitable<Status> Write(std::string_view data);
  // with_input (or duplex): the end of the worker's stdin. Only after all of it was written: a worker
  // that sees its input end takes it as complete.
  boost::asio::awaitable<Status> CloseInput();

  // Without input (or duplex): the next bytes of the worker's stdout; "" once the worker exited with
  // success; the worker's error (mapped as FileWorkerError) if it failed.
  boost::asio::awaitable<Result<std::string>> Read();

  // Waits for the worker to end: its whole stdout if it succeeded (an error if that is over
  // `max_output` bytes), else its error.
  boost::asio::awaitable<Result<std::string>> Finish(size_t max_output);

  // Closes the connection: init kills the worker. Pending calls complete with an error.
  void Cancel();

  // Calls `hook` (on the operation's strand) when the worker ends or the connection to init is
  // lost; nullptr takes the hook back, and so does destroying this object.
  void WhenEnded(std::function<void()> hook);

 private:
  static boost::asio::awaitable<Result<std::unique_ptr<FileOperation>>> Begin(InitConnection connection,
                                                                             const nlohmann::json& op,
                                                                             const std::string& user, bool with_input,
                                                                             bool collect);
  std::shared_ptr<State> state_;
};

// The Error for a worker that failed: its stderr line {"code", "message"} mapped onto the
// API (not_found 404; exists, not_a_directory, is_a_directory, not_empty 409;
// permission_denied, read_only 403; disk_full 507; invalid_argument 422; too_large 413;
// else 500), with the worker's code as the detail code. `signal` is set if it was killed.
Error FileWorkerError(std::string_view stderr_text, std::optional<int> signal);

}  // namespace bulkhead::core
