#include "cli/shell_command.h"

#include <unistd.h>

#include <cstdlib>

#include "cli/process_commands.h"
#include "cli/terminal.h"
#include "cli/terminal_attach.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

// -e K=V entries over this terminal's TERM, so programs inside draw for this terminal.
Result<json> ShellEnvironment(const std::vector<std::string>& items) {
  json env = json::object();
  if (const char* term = std::getenv("TERM"); term != nullptr && *term != '\0') env["TERM"] = term;
  for (const std::string& item : items) {
    auto parsed = ParseKeyValue(item, /*allow_from_environment=*/true);
    if (!parsed.ok()) return parsed.error();
    if (parsed->second) env[parsed->first] = *parsed->second;
  }
  return env;
}

}  // namespace

std::vector<std::string> DefaultShellArgv() {
  return {"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l"};
}

int ShellCommand(Session& session) {
  const CommandLine& line = session.line;
  auto env = ShellEnvironment(line.exec.env);
  if (!env.ok()) return session.UsageError(env.error());
  // Without a terminal on stdin there is no size to copy and nothing to put in raw mode.
  std::optional<TerminalSize> local_size = QueryTerminalSize(session.io.stdin_fd);
  TerminalSize size = local_size.value_or(TerminalSize{});

  json request = json::object();
  if (line.shell_command) {
    request["cmd"] = *line.shell_command;  // a string: run by /bin/sh -c
  } else {
    request["cmd"] = DefaultShellArgv();
  }
  request["pty"] = {{"cols", size.cols}, {"rows", size.rows}};
  if (!env->empty()) request["env"] = *env;
  if (line.exec.cwd) request["cwd"] = *line.exec.cwd;
  if (line.exec.user) request["user"] = *line.exec.user;
  auto process = session.api.Call(HttpMethod::kPost, SandboxPath(line.sandbox_id) + "/processes", request);
  if (!process.ok()) return session.Fail(process.error());
  auto pid = process->is_object() ? process->find("pid") : process->end();
  if (pid == process->end() || !pid->is_number_integer()) {
    return session.Fail(MakeError(ErrorCode::kInternal, "the daemon's answer has no pid", "bad_response"));
  }
  std::string process_path = ProcessPath(line.sandbox_id, std::to_string(pid->get<int64_t>()));

  Result<AttachResult> attached = [&]() -> Result<AttachResult> {
    RawTerminalMode raw(session.io.stdin_fd);  // restored when this scope ends, however it ends
    AttachIo io{session.io.stdin_fd, session.io.stdout_fd, /*forward_window_size=*/local_size.has_value()};
    return AttachToProcess(session.api.http(), process_path + "/attach", io);
  }();
  if (!attached.ok()) {
    // Nobody can reach the shell's terminal any more: do not leave it waiting for input.
    (void)session.api.Call(HttpMethod::kPost, process_path + "/signal", json{{"signal", "SIGKILL"}});
    return session.Fail(attached.error());
  }
  if (attached->interrupted_by != 0) {
    // bulkhead was told to go: hang up on the shell as a terminal that goes away would,
    // rather than leave it waiting for input nobody can send.
    (void)session.api.Call(HttpMethod::kPost, process_path + "/signal", json{{"signal", "SIGHUP"}});
    return 128 + attached->interrupted_by;
  }
  if (!attached->outcome) {
    return session.Fail(MakeError(ErrorCode::kUnavailable, "the terminal ended without an exit status", "stream_ended"));
  }
  return ShellExitCode(*attached->outcome);
}

}  // namespace bulkhead::cli
