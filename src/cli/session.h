// What every client command works with: the parsed command line, the terminal's file
// descriptors and the daemon's API, plus the CLI's way of reporting errors.
#pragma once
#include <signal.h>

#include <string>
#include <string_view>
#include <utility>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "client/api_client.h"
#include "client/exec_stream.h"

namespace bulkhead::cli {

inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitOutputClosed = 128 + SIGPIPE;

inline bool IsOutputClosed(const Error& error) { return error.detail_code == kOutputClosed; }

// Everything one command needs: the parsed line, the terminal and the daemon.
class Session {
 public:
  Session(const CommandLine& line, const CommandIo& io, ApiClient api)
      : line(line), io(io), api(std::move(api)) {}

  void Out(std::string_view text) const { (void)WriteAll(io.stdout_fd, text); }
  void Err(std::string_view text) const { (void)WriteAll(io.stderr_fd, text); }

  // Prints `bulkhead: <message> (<code>)` and returns the exit code for it; a closed
  // stdout ends the command quietly.
  int Fail(const Error& error, int exit_code = kExitError) const {
    if (IsOutputClosed(error)) return kExitOutputClosed;
    Err("bulkhead: " + error.message + " (" + CodeOf(error) + ")\n");
    return exit_code;
  }
  int UsageError(const Error& error) const { return Fail(error, kExitUsage); }
  int UsageError(const std::string& message) const {
    return Fail(MakeError(ErrorCode::kBadRequest, message, "usage"), kExitUsage);
  }

  // "?tenant=T" for --tenant (the host's key acting on a tenant's volumes or images), else "".
  std::string TenantQuery() const { return line.for_tenant.empty() ? "" : "?tenant=" + PercentEncode(line.for_tenant); }

  const CommandLine& line;
  const CommandIo& io;
  ApiClient api;
};

}  // namespace bulkhead::cli
