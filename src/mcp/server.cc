#include "mcp/server.h"

#include <unistd.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/exec_stream.h"
#include "common/bounded_json.h"
#include "mcp/argument_check.h"
#include "mcp/json_rpc.h"
#include "mcp/tool.h"

namespace bulkhead::mcp {
namespace {

// The current revision, served statelessly, and the handshake revisions, newest first.
constexpr const char* kModernVersion = "2026-07-28";
const std::vector<std::string> kHandshakeVersions = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
constexpr const char* kBatchVersion = "2025-03-26";  // the only revision with JSON-RPC batches

constexpr const char* kVersionKey = "io.modelcontextprotocol/protocolVersion";
constexpr const char* kCapabilitiesKey = "io.modelcontextprotocol/clientCapabilities";
constexpr const char* kServerInfoKey = "io.modelcontextprotocol/serverInfo";

constexpr size_t kMaxMessageBytes = 64 << 20;  // write_file content travels inside a message
constexpr size_t kMaxConcurrentCalls = 16;
constexpr int64_t kToolListTtlMs = 3600 * 1000;  // the tools change only with the binary

const char* kInstructions =
    "bulkhead runs commands in isolated Linux sandboxes on this machine. Typical flow: create_sandbox (or "
    "list_sandboxes to reuse one), then run_command, write_file, read_file, list_files and search_files inside "
    "it; start_process for servers and long jobs (read_process_output, send_process_input, kill_process; "
    "expose_port for a URL); snapshot_sandbox and fork_sandbox to checkpoint or branch; delete_sandbox when "
    "done. Every tool but create_sandbox and list_sandboxes takes the sandbox_id that create_sandbox returned. "
    "Sandboxes have no network unless created with network 'allowlist' or 'open', and expire after timeout_s.";

json ServerInfo() { return {{"name", "bulkhead"}, {"title", "bulkhead sandboxes"}, {"version", BULKHEAD_VERSION}}; }

json SupportedVersions() {
  json versions = json::array({kModernVersion});
  for (const std::string& version : kHandshakeVersions) versions.push_back(version);
  return versions;
}

void Log(const std::string& line) { (void)cli::WriteAll(STDERR_FILENO, "bulkhead mcp: " + line + "\n"); }

enum class Era { kHandshake, kModern };

class McpServer {
 public:
  McpServer(const cli::ApiClient& api, ServerStreams streams)
      : api_(api), in_fd_(streams.in_fd), writer_(streams.out_fd) {}

  int Run() {
    Log("serving MCP on stdio; daemon at " + api_.http().address().ToUrl());
    LineReader reader(in_fd_, kMaxMessageBytes);
    std::string line;
    while (!writer_.closed()) {
      const LineReader::Outcome outcome = reader.Next(line);
      if (outcome == LineReader::Outcome::kEnd) break;
      if (outcome == LineReader::Outcome::kTooLong) {
        writer_.Write(ErrorMessage(nullptr, kInvalidRequest,
                                   "Invalid Request: a message is longer than the limit of " +
                                       std::to_string(kMaxMessageBytes >> 20) + " MiB"));
        continue;
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json message = ParseBoundedJson(line);
      if (message.is_discarded()) {
        writer_.Write(ErrorMessage(nullptr, kParseError, "Parse error: the line is not valid JSON"));
        continue;
      }
      if (message.is_array()) {
        HandleBatch(message);
        continue;
      }
      if (auto response = Dispatch(ClassifyMessage(message), /*allow_async=*/true)) writer_.Write(*response);
    }
    // The client closed our input (or our output): results of calls still running would
    // reach no one, so they are cancelled.
    std::unique_lock lock(mutex_);
    for (auto& [id, canceller] : in_flight_) canceller->Cancel();
    calls_done_.wait(lock, [this] { return running_calls_ == 0; });
    return 0;
  }

 private:
  void HandleBatch(const json& batch) {
    std::optional<std::string> version;
    {
      std::lock_guard lock(mutex_);
      version = handshake_version_;
    }
    if (batch.empty()) {
      writer_.Write(ErrorMessage(nullptr, kInvalidRequest, "Invalid Request: an empty batch"));
      return;
    }
    if (version != kBatchVersion) {
      writer_.Write(ErrorMessage(nullptr, kInvalidRequest,
                                 "Invalid Request: JSON-RPC batches are not part of protocol revision " +
                                     version.value_or(kModernVersion) + " (only " + kBatchVersion +
                                     " had them); send one message per line"));
      return;
    }
    // Answered together, so each call runs to completion here.
    json responses = json::array();
    for (const json& message : batch) {
      IncomingMessage incoming = ClassifyMessage(message);
      std::optional<json> response;
      if (incoming.kind == IncomingMessage::Kind::kRequest && incoming.method == "initialize") {
        response = ErrorMessage(incoming.id, kInvalidRequest, "Invalid Request: initialize must not be in a batch");
      } else {
        response = Dispatch(incoming, /*allow_async=*/false);
      }
      if (response) responses.push_back(std::move(*response));
    }
    if (!responses.empty()) writer_.Write(responses);
  }

  std::optional<json> Dispatch(const IncomingMessage& message, bool allow_async) {
    switch (message.kind) {
      case IncomingMessage::Kind::kInvalid:
        return ErrorMessage(message.id, kInvalidRequest, "Invalid Request: " + message.problem);
      case IncomingMessage::Kind::kResponse: return std::nullopt;  // this server sends no requests
      case IncomingMessage::Kind::kNotification: HandleNotification(message); return std::nullopt;
      case IncomingMessage::Kind::kRequest:
        try {
          return HandleRequest(message, allow_async);
        } catch (const std::exception& e) {  // a bug; the client still gets an answer
          Log(std::string("internal error: ") + e.what());
          return ErrorMessage(message.id, kInternalError, std::string("Internal error: ") + e.what());
        }
    }
    return std::nullopt;
  }

  void HandleNotification(const IncomingMessage& notification) {
    if (notification.method != "notifications/cancelled") return;  // initialized and others need nothing
    const json request_id = notification.params.is_object() ? notification.params.value("requestId", json())
                                                             : json();
    std::lock_guard lock(mutex_);
    auto call = in_flight_.find(request_id.dump());
    if (call == in_flight_.end()) return;  // finished already, or never a tool call
    call->second->Cancel();
    const json reason = notification.params.value("reason", json());
    Log("request " + request_id.dump() + " cancelled: " +
        (reason.is_string() ? reason.get<std::string>() : std::string("no reason given")));
  }

  std::optional<json> HandleRequest(const IncomingMessage& request, bool allow_async) {
    const json& id = request.id;
    const json params = request.params.is_object() ? request.params : json::object();
    if (request.method == "initialize") return Initialize(id, params);

    const json meta = params.value("_meta", json());
    Era era = Era::kHandshake;
    if (meta.is_object() && meta.contains(kVersionKey)) {
      // 2026-07-28: each request says which revision it speaks; nothing carries over.
      const json& requested = meta[kVersionKey];
      if (requested != kModernVersion) {
        return ErrorMessage(id, kUnsupportedProtocolVersion, "Unsupported protocol version",
                            {{"supported", SupportedVersions()}, {"requested", requested}});
      }
      if (!meta.contains(kCapabilitiesKey) || !meta[kCapabilitiesKey].is_object()) {
        return ErrorMessage(id, kInvalidParams,
                            std::string("Invalid params: _meta needs ") + kCapabilitiesKey +
                                " (an object) with protocol version " + kModernVersion);
      }
      era = Era::kModern;
    } else if (request.method == "server/discover") {
      return ErrorMessage(id, kInvalidParams,
                          std::string("Invalid params: server/discover needs _meta with ") + kVersionKey + " and " +
                              kCapabilitiesKey);
    } else if (!Initialized() && request.method != "ping") {
      return ErrorMessage(id, kInvalidRequest,
                          std::string("Invalid Request: not initialized; send initialize first (protocol ") +
                              kHandshakeVersions.front() + " and earlier) or put " + kVersionKey + " and " +
                              kCapabilitiesKey + " in params._meta (protocol " + kModernVersion + ")");
    }

    if (request.method == "server/discover") {
      return ResultMessage(id, Finish({{"supportedVersions", SupportedVersions()},
                                       {"capabilities", Capabilities()},
                                       {"instructions", kInstructions},
                                       {"ttlMs", kToolListTtlMs},
                                       {"cacheScope", "public"}},
                                      era));
    }
    if (request.method == "ping") return ResultMessage(id, Finish(json::object(), era));
    if (request.method == "tools/list") return ToolsList(id, params, era);
    if (request.method == "tools/call") return ToolsCall(id, params, era, allow_async);
    return ErrorMessage(id, kMethodNotFound, "Method not found: " + request.method);
  }

  bool Initialized() {
    std::lock_guard lock(mutex_);
    return handshake_version_.has_value();
  }

  static json Capabilities() { return {{"tools", {{"listChanged", false}}}}; }

  // A result as the era wants it: 2026-07-28 results say their type and who answered.
  static json Finish(json result, Era era) {
    if (era == Era::kModern) {
      result["resultType"] = "complete";
      result["_meta"][kServerInfoKey] = ServerInfo();
    }
    return result;
  }

  json Initialize(const json& id, const json& params) {
    auto requested = params.find("protocolVersion");
    if (requested == params.end() || !requested->is_string()) {
      return ErrorMessage(id, kInvalidParams, "Invalid params: initialize needs params.protocolVersion (a string)",
                          {{"supported", SupportedVersions()}});
    }
    // The client's revision when this server speaks it, else the newest handshake revision.
    std::string version = kHandshakeVersions.front();
    for (const std::string& known : kHandshakeVersions) {
      if (*requested == known) version = known;
    }
    {
      std::lock_guard lock(mutex_);
      if (handshake_version_) {
        return ErrorMessage(id, kInvalidRequest, "Invalid Request: already initialized (protocol " +
                                                     *handshake_version_ + "); start a new process for a new session");
      }
      handshake_version_ = version;
    }
    const json client = params.value("clientInfo", json());
    const bool named = client.is_object() && client.contains("name") && client["name"].is_string();
    Log("initialized with protocol " + version + " for " + (named ? client["name"].get<std::string>() : "a client"));
    return ResultMessage(id, {{"protocolVersion", version},
                              {"capabilities", Capabilities()},
                              {"serverInfo", ServerInfo()},
                              {"instructions", kInstructions}});
  }

  json ToolsList(const json& id, const json& params, Era era) {
    if (params.contains("cursor") && !params["cursor"].is_null()) {
      return ErrorMessage(id, kInvalidParams, "Invalid params: unknown cursor (every tool is listed in one page)");
    }
    json tools = json::array();
    for (const ToolSpec& spec : AllTools()) {
      json tool = {{"name", spec.name},
                   {"title", spec.title},
                   {"description", spec.description},
                   {"inputSchema", spec.input_schema},
                   {"annotations", spec.annotations}};
      if (!spec.output_schema.is_null()) tool["outputSchema"] = spec.output_schema;
      tools.push_back(std::move(tool));
    }
    json result = {{"tools", std::move(tools)}};
    if (era == Era::kModern) {
      result["ttlMs"] = kToolListTtlMs;
      result["cacheScope"] = "public";
    }
    return ResultMessage(id, Finish(std::move(result), era));
  }

  std::optional<json> ToolsCall(const json& id, const json& params, Era era, bool allow_async) {
    auto name = params.find("name");
    if (name == params.end() || !name->is_string()) {
      return ErrorMessage(id, kInvalidParams, "Invalid params: tools/call needs params.name (a string)");
    }
    const ToolSpec* tool = FindTool(name->get<std::string>());
    if (tool == nullptr) {
      return ErrorMessage(id, kInvalidParams,
                          "Unknown tool: " + name->get<std::string>() + " (tools/list names the " +
                              std::to_string(AllTools().size()) + " tools)");
    }
    const json arguments = params.value("arguments", json::object());
    if (!arguments.is_object()) {
      return ErrorMessage(id, kInvalidParams, "Invalid params: tools/call's arguments must be an object");
    }
    if (!allow_async) {
      return ResultMessage(id, RunTool(*tool, arguments, std::make_shared<cli::RequestCanceller>(), era));
    }

    auto canceller = std::make_shared<cli::RequestCanceller>();
    const std::string key = id.dump();
    {
      std::lock_guard lock(mutex_);
      if (in_flight_.count(key) > 0) {
        return ErrorMessage(id, kInvalidRequest, "Invalid Request: request id " + key + " is still in progress");
      }
      if (running_calls_ >= kMaxConcurrentCalls) {
        return ResultMessage(id, ToolResultJson(ToolError("too many tool calls at once (" +
                                                          std::to_string(kMaxConcurrentCalls) +
                                                          "); wait for some to finish, then retry"),
                                                era));
      }
      in_flight_[key] = canceller;
      ++running_calls_;
    }
    // Each call on its own thread, so a long command does not hold up the others, and a
    // notifications/cancelled for it can be read meanwhile.
    std::thread([this, id, tool, arguments, era, canceller, key] {
      json result = RunTool(*tool, arguments, canceller, era);
      bool cancelled = false;
      {
        std::lock_guard lock(mutex_);
        in_flight_.erase(key);
        cancelled = canceller->cancelled();
      }
      if (!cancelled) writer_.Write(ResultMessage(id, std::move(result)));  // a cancelled request gets no answer
      std::lock_guard lock(mutex_);
      --running_calls_;
      calls_done_.notify_all();
    }).detach();
    return std::nullopt;
  }

  json RunTool(const ToolSpec& tool, const json& arguments, std::shared_ptr<cli::RequestCanceller> canceller,
               Era era) {
    if (auto problem = CheckArguments(tool.input_schema, arguments)) {
      return ToolResultJson(ToolError("invalid arguments for " + tool.name + ": " + *problem), era);
    }
    ToolContext context{api_.WithCanceller(canceller), canceller};
    ToolResult result;
    try {
      result = tool.handler(arguments, context);
    } catch (const std::exception& e) {  // a bug; the model still gets an answer
      Log("internal error in " + tool.name + ": " + e.what());
      result = ToolError("internal error in " + tool.name + ": " + e.what());
    }
    return ToolResultJson(result, era);
  }

  static json ToolResultJson(const ToolResult& result, Era era) {
    json answer = {{"content", json::array({{{"type", "text"}, {"text", result.text}}})},
                   {"isError", result.is_error}};
    if (!result.is_error && !result.structured.is_null()) answer["structuredContent"] = result.structured;
    return Finish(std::move(answer), era);
  }

  const cli::ApiClient& api_;
  int in_fd_;
  MessageWriter writer_;

  std::mutex mutex_;  // guards what follows
  std::condition_variable calls_done_;
  std::map<std::string, std::shared_ptr<cli::RequestCanceller>> in_flight_;  // tool calls by request id
  size_t running_calls_ = 0;
  std::optional<std::string> handshake_version_;  // set by initialize
};

}  // namespace

int ServeMcp(const cli::ApiClient& api, ServerStreams streams) {
  McpServer server(api, streams);
  return server.Run();
}

}  // namespace bulkhead::mcp
