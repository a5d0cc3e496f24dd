// The pure parts of envd's process service (e2b-protocol.md §5.1): the messages it sends
// (process events in proto3 JSON) and the ones it reads (selectors, inputs, signals, the
// StartRequest), translated to and from bulkhead's background processes. No I/O.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <map>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/ctl_messages.h"
#include "common/result.h"
#include "e2b/connect_rpc.h"
#include "service/process_request.h"

namespace bulkhead::e2b {

// {"event":{"start":{"pid":N}}}
nlohmann::json StartEvent(int pid);
// {"event":{"data":{"<stream>":"<base64>"}}}; stream is "stdout", "stderr" or "pty".
nlohmann::json DataEvent(std::string_view stream, std::string_view bytes);
// {"event":{"keepalive":{}}}
nlohmann::json KeepaliveEvent();
// {"event":{"end":{...}}} from init's kExit: exitCode
// (omitted when 0; -1 after a signal), exited, status as Go's ProcessState prints it
// ("exit status 3", "signal: killed") and error (the same text) unless it exited 0.
nlohmann::json EndEvent(const ctl::ExitMessage& exit);
// Go's text for a signal ("killed", "terminated", ...), "signal N" for the rest.
std::string GoSignalText(int signal);

// A ProcessSelector {"pid": N} or {"tag": "..."} (a request's "process" field).
struct ProcessSelector {
  int pid = 0;      // > 0 when selected by pid
  std::string tag;  // otherwise
  // "process with pid 12" / "process with tag dev"
  std::string Describe() const;
};
Result<ProcessSelector> ParseSelector(const nlohmann::json& request);
// not_found "process with pid N not found"
Error ProcessNotFoundError(const ProcessSelector& selector);

// A ProcessInput {"stdin": "<b64>"} or {"pty": "<b64>"}, decoded.
struct ProcessInput {
  bool pty = false;
  std::string bytes;
};
Result<ProcessInput> ParseProcessInput(const nlohmann::json& input);

// SendSignalRequest.signal: SIGNAL_SIGKILL / SIGNAL_SIGTERM by name or number; others
// unimplemented (kMethodNotAllowed, which ToRpcError maps so). Errors here are bulkhead
// Errors whose ToRpcError is the Connect error envd gives.
Result<int> ParseE2bSignal(const nlohmann::json& signal);

// PTY {"size":{"cols","rows"}}.
Result<api::PtySize> ParsePty(const nlohmann::json& pty);

// A StartRequest as a bulkhead background process. `user` is the effective user (the
// Basic-auth one or the sandbox's) and `home` its home (SandboxFiles): cwd defaults to the
// home, and "~" or a relative cwd is taken from it (ResolveEnvdPath).
struct StartSpec {
  api::ProcessOptions options;
  bool stdin = true;
  std::string cmd;  // for List: ProcessConfig as the client gave it
  std::vector<std::string> args;
  std::map<std::string, std::string> envs;
  std::string cwd;
};
Result<StartSpec> ParseStartRequest(const nlohmann::json& request, const std::string& user, const std::string& home,
                                    const std::string& default_cwd = "");

// invalid_argument "cwd '<cwd>' does not exist" when init refused the start for its cwd,
// unauthenticated "invalid username: '<user>'" for a user the sandbox does not know; else
// the usual mapping.
RpcError StartError(const Error& error, const std::string& cwd, const std::string& user);

}  // namespace bulkhead::e2b
