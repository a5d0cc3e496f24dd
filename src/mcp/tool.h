// What a tool is to the MCP server: a name, a description written for a model, JSON
// Schemas for its arguments and its structured result, and the handler that does the work
// through the daemon's API.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/api_client.h"
#include "common/result.h"

namespace bulkhead::mcp {

using nlohmann::json;

// A tool's answer: text for the model, and the same as JSON when the tool has an output
// schema. is_error marks a failure the model can act on (a tool execution error, not a
// protocol error).
struct ToolResult {
  std::string text;
  json structured;  // null: none
  bool is_error = false;
};

// A failure, told so that a model knows what to do next.
ToolResult ToolError(std::string message);

// A result whose text is the structured content as JSON.
ToolResult StructuredResult(json structured);

// What a handler works with: the daemon's API (its requests end when the call is
// cancelled) and a way to notice the cancellation between requests.
struct ToolContext {
  cli::ApiClient api;
  std::shared_ptr<cli::RequestCanceller> canceller;
  bool cancelled() const { return canceller->cancelled(); }
};

// Arguments already checked against the tool's input schema.
using ToolHandler = std::function<ToolResult(const json& arguments, ToolContext& context)>;

struct ToolSpec {
  std::string name;
  std::string title;
  std::string description;
  json input_schema;
  json output_schema;  // null: the tool returns text only
  json annotations;    // behaviour hints (readOnlyHint, destructiveHint...)
  ToolHandler handler;
};

// Every tool, in a fixed order (clients cache the list).
const std::vector<ToolSpec>& AllTools();
const ToolSpec* FindTool(const std::string& name);

// The tools of each area, gathered by AllTools.
void AddSandboxTools(std::vector<ToolSpec>& tools);
void AddCommandTools(std::vector<ToolSpec>& tools);
void AddFileTools(std::vector<ToolSpec>& tools);

// A JSON document written in the source (schemas); aborts at startup if it does not parse,
// which a test catches at once.
json ParseSchema(const char* text);

// The API's error as a tool error a model can act on: names the sandbox, process or path
// involved and the tool that helps (list_sandboxes, list_files...).
ToolResult ApiFailure(const Error& error, const std::string& sandbox_id = {});

// Reads an optional argument with a default.
template <typename T>
T ArgumentOr(const json& arguments, const char* name, T fallback) {
  auto it = arguments.find(name);
  if (it == arguments.end() || it->is_null()) return fallback;
  return it->get<T>();
}

// The request body's `cmd` from the tool's `command` (a shell string) or `argv`; an error
// text when neither or both are given.
std::optional<std::string> CommandFromArguments(const json& arguments, json& cmd);

}  // namespace bulkhead::mcp
