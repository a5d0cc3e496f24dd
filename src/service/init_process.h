// The conversations with a sandbox's init behind the process routes (ctl_protocol.h):
// start a background process, list the table, find a process by pid or tag, attach to one.
// Every call must come from the executor it is given (the connection's strand).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/result.h"
#include "core/ctl_client.h"
#include "core/sandbox_manager.h"
#include "service/process_request.h"

namespace bulkhead::api {

Error ProcessNotFound(std::string_view segment);   // 404 process_not_found
Error ProcessExited(const nlohmann::json& process);  // 409 process_exited

// Registers the process in init's table; answers init's Process.
boost::asio::awaitable<Result<nlohmann::json>> StartProcess(core::SandboxManager& manager,
                                                            boost::asio::any_io_executor executor,
                                                            const std::string& sandbox_id,
                                                            const ProcessOptions& options);

// Init's process table: a JSON array of Process.
boost::asio::awaitable<Result<nlohmann::json>> ListProcesses(core::SandboxManager& manager,
                                                             boost::asio::any_io_executor executor,
                                                             const std::string& sandbox_id);

// The process `ref` names in `processes`: by pid; by tag the running one, else the one
// started last. nullptr if none.
const nlohmann::json* SelectProcess(const nlohmann::json& processes, const ProcessRef& ref);

// The Process the {pid} segment `segment` names; 404 process_not_found if none.
boost::asio::awaitable<Result<nlohmann::json>> FindProcess(core::SandboxManager& manager,
                                                           boost::asio::any_io_executor executor,
                                                           const std::string& sandbox_id, std::string_view segment);

struct AttachRequest {
  bool output = false;  // stream the output (else only drive the process)
  bool follow = false;
  bool hold = false;  // with output and follow: the process waits for this reader (never a kGap)
  uint64_t stdout_offset = 0;
  uint64_t stderr_offset = 0;
};

// An attach connection after init's kAttached.
struct ProcessAttachment {
  std::unique_ptr<core::CtlClient> client;
  nlohmann::json process;
  uint64_t stdout_start = 0;  // where the output that follows starts
  uint64_t stderr_start = 0;
};

boost::asio::awaitable<Result<ProcessAttachment>> AttachProcess(core::SandboxManager& manager,
                                                                boost::asio::any_io_executor executor,
                                                                const std::string& sandbox_id,
                                                                std::string_view segment, AttachRequest request);

// Starts the process and stays attached to it on the same connection: its output from the
// first byte, followed and held (AttachRequest::hold). The attachment's process is init's.
boost::asio::awaitable<Result<ProcessAttachment>> StartAttachedProcess(core::SandboxManager& manager,
                                                                       boost::asio::any_io_executor executor,
                                                                       const std::string& sandbox_id,
                                                                       const ProcessOptions& options);

// On an attach connection: `data` for the process's stdin, in frames below ctl::kMaxFrame.
boost::asio::awaitable<Status> SendStdin(core::CtlClient& client, std::string_view data);
// On an attach connection without output: kPing, then waits for kPong, so every frame sent
// before has been applied.
boost::asio::awaitable<Status> AwaitBarrier(core::CtlClient& client);

// The "stdout_offset" and "stderr_offset" of a kAttached or kGap payload.

// "running" unless the Process says "exited".
bool HasExited(const nlohmann::json& process);

}  // namespace bulkhead::api
