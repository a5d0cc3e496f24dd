#include "mcp/tool.h"

#include <cstdio>
#include <cstdlib>

#include "client/api_client.h"
#include "common/bounded_json.h"

namespace bulkhead::mcp {

ToolResult ToolError(std::string message) { return ToolResult{std::move(message), nullptr, true}; }

ToolResult StructuredResult(json structured) {
  std::string text = cli::DumpJson(structured, 2);
  return ToolResult{std::move(text), std::move(structured), false};
}

json ParseSchema(const char* text) {
  json parsed = ParseBoundedJson(text);
  if (parsed.is_discarded()) {
    std::fprintf(stderr, "bulkhead mcp: a built-in schema does not parse:\n%s\n", text);
    std::abort();
  }
  return parsed;
}

ToolResult ApiFailure(const Error& error, const std::string& sandbox_id) {
  const std::string code = cli::CodeOf(error);
  const std::string sandbox = sandbox_id.empty() ? "the sandbox" : "sandbox '" + sandbox_id + "'";
  if (code == "sandbox_not_found") {
    return ToolError(sandbox + " not found (it may have expired or been deleted); call list_sandboxes to see "
                     "the sandboxes that exist, or create_sandbox for a new one");
  }
  if (code == "sandbox_not_running") {
    return ToolError(error.message + " (sandbox_not_running); " + sandbox +
                     " cannot do this in its current state: check it with list_sandboxes, or use a new one "
                     "(create_sandbox, or fork_sandbox of a running one)");
  }
  if (code == "process_not_found") {
    return ToolError(error.message + " (process_not_found); use the pid that start_process returned");
  }
  if (code == "snapshot_not_found") {
    return ToolError(error.message + " (snapshot_not_found); snapshot_sandbox returns snapshot ids");
  }
  if (code == "not_found" || code == "not_a_directory") {
    return ToolError(error.message + " (" + code + "); call list_files to see what exists");
  }
  if (code == "connection_lost" || code == "daemon_unreachable" || code == "daemon_not_running") {
    return ToolError("cannot reach the bulkhead daemon: " + error.message +
                     ". It must be running (bulkhead serve); this is not something a retry with other "
                     "arguments fixes");
  }
  return ToolError(error.message + " (" + code + ")");
}

std::optional<std::string> CommandFromArguments(const json& arguments, json& cmd) {
  const bool has_command = arguments.contains("command") && !arguments["command"].is_null();
  const bool has_argv = arguments.contains("argv") && !arguments["argv"].is_null();
  if (has_command == has_argv) {
    return std::string(has_command ? "give either 'command' or 'argv', not both"
                                   : "missing the command: give 'command' (a shell command line, run by "
                                     "/bin/sh -c) or 'argv' (the program and its arguments, no shell)");
  }
  if (has_command) {
    if (arguments["command"].get_ref<const std::string&>().empty()) return std::string("'command' must not be empty");
    cmd = arguments["command"];
  } else {
    cmd = arguments["argv"];
  }
  return std::nullopt;
}

const std::vector<ToolSpec>& AllTools() {
  static const std::vector<ToolSpec> tools = [] {
    std::vector<ToolSpec> all;
    AddSandboxTools(all);
    AddCommandTools(all);
    AddFileTools(all);
    return all;
  }();
  return tools;
}

const ToolSpec* FindTool(const std::string& name) {
  for (const ToolSpec& tool : AllTools()) {
    if (tool.name == name) return &tool;
  }
  return nullptr;
}

}  // namespace bulkhead::mcp
