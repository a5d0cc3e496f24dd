// `bulkhead shell`'s connection to a process: a WebSocket to .../processes/{pid}/attach
// (API.md) that relays this terminal's input and the process's output both ways until the
// process exits.
#pragma once
#include <optional>
#include <string>

#include "client/exec_stream.h"
#include "client/http_client.h"
#include "common/result.h"

namespace bulkhead::cli {

struct AttachIo {
  int stdin_fd = 0;
  int stdout_fd = 1;
  // Send {"type":"resize"} with the size of the terminal on stdin_fd at SIGWINCH.
  bool forward_window_size = false;
};

struct AttachResult {
  // How the process ended (its exit frame).
  std::optional<CommandOutcome> outcome;
  // A signal (SIGTERM, SIGHUP) that ended the attach before the process exited; the
  // process is left as it is.
  int interrupted_by = 0;
};

// Attaches to `target` (".../attach", with any query) and relays until the process
// exits: stdin bytes as binary frames, output frames to stdout, EOF on stdin as
// {"type":"stdin_close"}, SIGINT/SIGQUIT forwarded to the process. Ends with the process's
// outcome, or with `interrupted_by` when SIGTERM or SIGHUP reached bulkhead.
Result<AttachResult> AttachToProcess(const HttpClient& http, const std::string& target, const AttachIo& io);

// The control messages sent as text frames.
std::string ResizeMessage(int cols, int rows);
std::string SignalMessage(const std::string& signal_name);
std::string StdinCloseMessage();

}  // namespace bulkhead::cli
