// Tools that make, list, copy and remove sandboxes, and reach their ports.
#include <string>

#include "client/server_url.h"
#include "mcp/tool.h"

namespace bulkhead::mcp {
namespace {

using cli::HttpMethod;
using cli::SandboxPath;

// An agent's sandbox lives an hour unless asked otherwise (the daemon's own default, 5
// minutes, is made for one-shot runs).
constexpr int64_t kDefaultLifetimeS = 3600;

// The parts of a Sandbox object a model needs.
json SandboxSummary(const json& sandbox) {
  json summary = json::object();
  for (const char* field : {"id", "state", "image", "runtime", "workdir", "created_at", "expires_at", "network",
                            "metadata", "parent_snapshot", "memory_mb", "cpus"}) {
    if (auto it = sandbox.find(field); it != sandbox.end()) summary[field] = *it;
  }
  return summary;
}

const char* kSandboxSchema = R"json({
  "type": "object",
  "properties": {
    "id": {"type": "string"},
    "state": {"type": "string"},
    "image": {"type": "string"},
    "runtime": {"type": "string"},
    "workdir": {"type": "string"},
    "created_at": {"type": "string"},
    "expires_at": {"type": ["string", "null"]},
    "network": {"type": "object"},
    "metadata": {"type": "object"},
    "parent_snapshot": {"type": ["string", "null"]}
  },
  "required": ["id", "state"]
})json";

json SandboxListSchema() {
  json schema = ParseSchema(R"json({
    "type": "object",
    "properties": {"sandboxes": {"type": "array"}, "count": {"type": "integer"}},
    "required": ["sandboxes", "count"]
  })json");
  schema["properties"]["sandboxes"]["items"] = ParseSchema(kSandboxSchema);
  return schema;
}

ToolResult CreateSandbox(const json& arguments, ToolContext& context) {
  json request = json::object();
  for (const char* field :
       {"image", "runtime", "cpus", "memory_mb", "disk_mb", "env", "metadata", "workdir", "from_snapshot"}) {
    if (auto it = arguments.find(field); it != arguments.end() && !it->is_null()) request[field] = *it;
  }
  request["timeout_s"] = ArgumentOr<int64_t>(arguments, "timeout_s", kDefaultLifetimeS);
  const json allow = ArgumentOr<json>(arguments, "allow", json::array());
  const json deny = ArgumentOr<json>(arguments, "deny", json::array());
  if (arguments.contains("network") || !allow.empty() || !deny.empty()) {
    request["network"] = {
        {"mode", ArgumentOr<std::string>(arguments, "network", "allowlist")}, {"allow", allow}, {"deny", deny}};
  }
  if (ArgumentOr<bool>(arguments, "private_preview", false)) request["preview"] = {{"public", false}};
  auto sandbox = context.api.Call(HttpMethod::kPost, "/v1/sandboxes", request);
  if (!sandbox.ok()) return ApiFailure(sandbox.error());
  return StructuredResult(SandboxSummary(*sandbox));
}

ToolResult ListSandboxes(const json& arguments, ToolContext& context) {
  std::string query;
  auto add = [&query](const std::string& key, const std::string& value) {
    query += (query.empty() ? "?" : "&") + cli::PercentEncode(key) + "=" + cli::PercentEncode(value);
  };
  if (arguments.contains("state")) add("state", arguments["state"].get<std::string>());
  const json labels = ArgumentOr<json>(arguments, "metadata", json::object());
  for (auto& [key, value] : labels.items()) {
    add("metadata." + key, value.get<std::string>());
  }
  auto listing = context.api.Call(HttpMethod::kGet, "/v1/sandboxes" + query);
  if (!listing.ok()) return ApiFailure(listing.error());
  json sandboxes = json::array();
  for (const json& sandbox : listing->value("sandboxes", json::array())) sandboxes.push_back(SandboxSummary(sandbox));
  const size_t count = sandboxes.size();
  return StructuredResult({{"sandboxes", std::move(sandboxes)}, {"count", count}});
}

ToolResult DeleteSandbox(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  auto removed = context.api.Call(HttpMethod::kDelete, SandboxPath(id));
  if (!removed.ok()) return ApiFailure(removed.error(), id);
  return StructuredResult({{"deleted", id}});
}

ToolResult SnapshotSandbox(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  json request = json::object();
  if (arguments.contains("name")) request["name"] = arguments["name"];
  if (ArgumentOr<bool>(arguments, "memory", false)) request["memory"] = true;
  auto snapshot = context.api.Call(HttpMethod::kPost, SandboxPath(id) + "/snapshots", request);
  if (!snapshot.ok()) return ApiFailure(snapshot.error(), id);
  json summary = json::object();
  for (const char* field : {"id", "name", "sandbox_id", "image", "created_at", "size_bytes", "memory", "runtime"}) {
    if (auto it = snapshot->find(field); it != snapshot->end()) summary[field] = *it;
  }
  return StructuredResult(std::move(summary));
}

ToolResult ForkSandbox(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  json request = {{"count", ArgumentOr<int64_t>(arguments, "count", 1)}};
  if (ArgumentOr<bool>(arguments, "memory", false)) request["memory"] = true;
  auto forks = context.api.Call(HttpMethod::kPost, SandboxPath(id) + "/fork", request);
  if (!forks.ok()) return ApiFailure(forks.error(), id);
  json sandboxes = json::array();
  for (const json& sandbox : forks->value("sandboxes", json::array())) sandboxes.push_back(SandboxSummary(sandbox));
  const size_t count = sandboxes.size();
  return StructuredResult({{"sandboxes", std::move(sandboxes)}, {"count", count}});
}

// "0.0.0.0:7420" -> "127.0.0.1:7420": a wildcard listener is reached on loopback.
std::string ReachableAddress(std::string address) {
  if (address.rfind("0.0.0.0:", 0) == 0) return "127.0.0.1:" + address.substr(8);
  if (address.rfind("[::]:", 0) == 0) return "[::1]:" + address.substr(5);
  return address;
}

ToolResult ExposePort(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  const int64_t port = arguments["port"].get<int64_t>();
  const std::string path = SandboxPath(id) + "/ports/" + std::to_string(port) + "/";

  // Ask the app for its root through the proxy: the header tells whether anything listens
  // (502 port_not_listening) without reading a body that may never end.
  auto probe = context.api.http().Open(HttpMethod::kGet, path, "*/*");
  if (!probe.ok()) return ApiFailure(probe.error(), id);
  bool listening = true;
  if (probe->status() == 404 || probe->status() == 502 || probe->status() == 401 || probe->status() == 422) {
    auto answer = probe->ReadRest();
    if (!answer.ok()) return ApiFailure(answer.error(), id);
    const Error error = cli::ErrorFromResponse(*answer);
    const std::string code = error.detail_code;
    if (code == "port_not_listening") {
      listening = false;
    } else if (code == "sandbox_not_found" || probe->status() == 401 || probe->status() == 422) {
      return ApiFailure(error, id);
    }
  }

  auto health = context.api.Call(HttpMethod::kGet, "/healthz");
  if (!health.ok()) return ApiFailure(health.error(), id);
  auto sandbox = context.api.Call(HttpMethod::kGet, SandboxPath(id));
  if (!sandbox.ok()) return ApiFailure(sandbox.error(), id);
  const json preview = sandbox->value("preview", json::object());
  const std::string token = preview.value("public", true) ? "" : preview.value("token", std::string());
  const cli::ServerAddress& daemon = context.api.http().address();
  std::string base;
  if (daemon.kind == cli::ServerAddress::Kind::kTcp) {
    base = daemon.ToUrl();
  } else if (auto listen = health->value("listen", json::array()); !listen.empty() && listen[0].is_string()) {
    base = "http://" + ReachableAddress(listen[0].get<std::string>());
  }
  const std::string domain = health->value("preview_domain", std::string());

  json result = {{"sandbox_id", id}, {"port", port}, {"listening", listening}};
  result["url"] = base.empty() ? json(nullptr) : json(base + path);
  result["url_needs_api_key"] = true;
  const std::string preview_url = "http://" + std::to_string(port) + "-" + id + "." + domain + "/";
  result["preview_url"] = domain.empty() ? json(nullptr) : json(preview_url);
  result["preview_headers"] = token.empty() ? json::object() : json{{"Bulkhead-Preview-Token", token}};
  result["preview_browser_url"] = domain.empty()      ? json(nullptr)
                                  : token.empty() ? json(preview_url)
                                                  : json(preview_url + "?bulkhead_preview_token=" + token);
  std::string note;
  if (!listening) {
    note = "Nothing listens on port " + std::to_string(port) +
           " in the sandbox yet: start the server with start_process, bound to 127.0.0.1 or 0.0.0.0 on that port. "
           "The URLs work as soon as it listens.";
  } else {
    note = "The sandbox's port " + std::to_string(port) + " answers.";
  }
  if (base.empty()) note += " The daemon listens on no TCP address, so there is no path URL.";
  note += " url goes through the daemon's API and needs its key (Authorization: Bearer); preview_url needs no key "
          "(its host name must resolve to the daemon: *.localhost does in browsers and curl).";
  if (!token.empty()) {
    note += " The sandbox's preview is private: requests to preview_url need preview_headers; "
            "preview_browser_url, opened once in a browser, sets a cookie for that host instead.";
  }
  result["note"] = note;
  return StructuredResult(std::move(result));
}

}  // namespace

void AddSandboxTools(std::vector<ToolSpec>& tools) {
  tools.push_back(ToolSpec{
      .name = "create_sandbox",
      .title = "Create sandbox",
      .description =
          "Creates an isolated Linux sandbox (its own filesystem, processes and network policy) and returns its "
          "id, which every other tool takes as sandbox_id. Use it once per task, then run commands and edit "
          "files in it; reuse an existing one (list_sandboxes) instead of creating many. Starts in well under a "
          "second. The sandbox is deleted automatically after timeout_s (default 3600 s); call delete_sandbox "
          "when done. Network is off by default: set network to 'allowlist' with allow entries "
          "(example.com, *.example.com, 1.2.3.4, 10.0.0.0/8, optionally :port) or to 'open' to reach the "
          "internet. Commands run as root in the workdir (default /workspace). image 'host' (default) is a "
          "read-only view of the host's OS with its tools; from_snapshot starts from a snapshot_sandbox copy. "
          "runtime 'gvisor' runs the sandbox under gVisor's user-space kernel: a stronger wall for code you trust "
          "least, with slower file and process work.",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "image": {"type": "string", "description": "Image name; default 'host'."},
          "runtime": {"type": "string", "enum": ["native", "gvisor", "microvm"],
                      "description": "Isolation tier: native (default; namespaces, seccomp, cgroups on the host kernel) or gvisor (gVisor's user-space kernel between the code and the host)."},
          "memory_mb": {"type": "integer", "minimum": 32, "description": "Memory limit in MiB (default 1024)."},
          "cpus": {"type": "number", "minimum": 0.05, "description": "CPU limit in CPUs (default 1)."},
          "disk_mb": {"type": "integer", "minimum": 64, "description": "Writable disk in MiB (default 2048)."},
          "timeout_s": {"type": "integer", "minimum": 0, "maximum": 2592000,
                        "description": "Lifetime in seconds, after which the sandbox is deleted; 0 = none. Default 3600."},
          "network": {"type": "string", "enum": ["none", "allowlist", "open"],
                      "description": "Egress: none (default), allowlist (only 'allow'), open (public internet)."},
          "allow": {"type": "array", "items": {"type": "string"}, "maxItems": 1000,
                    "description": "Destinations for network 'allowlist' (implies it when network is not given)."},
          "deny": {"type": "array", "items": {"type": "string"}, "maxItems": 1000,
                   "description": "Destinations never reached, whatever allow or open say (same syntax as allow)."},
          "env": {"type": "object", "additionalProperties": {"type": "string"},
                  "description": "Environment variables for every command."},
          "metadata": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "Labels, e.g. {\"task\": \"fix-login\"}; list_sandboxes filters on them."},
          "workdir": {"type": "string", "description": "Absolute working directory (default /workspace)."},
          "from_snapshot": {"type": "string", "description": "Start with the files of this snapshot id."},
          "private_preview": {"type": "boolean",
                              "description": "Preview URLs (expose_port) then need the sandbox's preview token, not only its id. Default false."}
        },
        "additionalProperties": false
      })json"),
      .output_schema = ParseSchema(kSandboxSchema),
      .annotations = {{"readOnlyHint", false}, {"destructiveHint", false}, {"openWorldHint", false}},
      .handler = CreateSandbox,
  });
  tools.push_back(ToolSpec{
      .name = "list_sandboxes",
      .title = "List sandboxes",
      .description =
          "Lists the sandboxes that exist: id, state (running, paused, stopped...), image, expiry and metadata. "
          "Use it to find a sandbox to reuse or one whose id you lost, optionally filtered by state or by "
          "metadata labels (all must match).",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "state": {"type": "string", "enum": ["starting", "running", "paused", "stopped", "error"]},
          "metadata": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "Only sandboxes with these labels."}
        },
        "additionalProperties": false
      })json"),
      .output_schema = SandboxListSchema(),
      .annotations = {{"readOnlyHint", true}, {"openWorldHint", false}},
      .handler = ListSandboxes,
  });
  tools.push_back(ToolSpec{
      .name = "delete_sandbox",
      .title = "Delete sandbox",
      .description = "Deletes a sandbox: kills its processes and removes its files for good (snapshots taken of "
                     "it stay). Use it when a task is finished.",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {"sandbox_id": {"type": "string", "minLength": 1}},
        "required": ["sandbox_id"],
        "additionalProperties": false
      })json"),
      .output_schema = ParseSchema(R"json({
        "type": "object", "properties": {"deleted": {"type": "string"}}, "required": ["deleted"]
      })json"),
      .annotations = {{"readOnlyHint", false}, {"destructiveHint", true}, {"idempotentHint", false},
                      {"openWorldHint", false}},
      .handler = DeleteSandbox,
  });
  tools.push_back(ToolSpec{
      .name = "snapshot_sandbox",
      .title = "Snapshot sandbox",
      .description =
          "Saves a copy of a sandbox's files as they are now and returns the snapshot id; with memory true "
          "(gvisor and microvm sandboxes) its memory and running processes too, so a sandbox started from it goes on "
          "running them (a REPL keeps its variables, a server keeps serving). Use it as a checkpoint before a "
          "risky change: create_sandbox with from_snapshot starts a new sandbox from it. The sandbox keeps "
          "running.",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "sandbox_id": {"type": "string", "minLength": 1},
          "name": {"type": "string", "maxLength": 128, "description": "Optional label for the snapshot."},
          "memory": {"type": "boolean", "description": "Keep memory and processes too (gvisor and microvm sandboxes; default false)."}
        },
        "required": ["sandbox_id"],
        "additionalProperties": false
      })json"),
      .output_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "id": {"type": "string"}, "name": {"type": ["string", "null"]}, "sandbox_id": {"type": "string"},
          "image": {"type": "string"}, "created_at": {"type": "string"}, "size_bytes": {"type": "integer"},
          "memory": {"type": "boolean"}, "runtime": {"type": "string"}
        },
        "required": ["id"]
      })json"),
      .annotations = {{"readOnlyHint", false}, {"destructiveHint", false}, {"openWorldHint", false}},
      .handler = SnapshotSandbox,
  });
  tools.push_back(ToolSpec{
      .name = "fork_sandbox",
      .title = "Fork sandbox",
      .description =
          "Makes count (1-16) new sandboxes, each a copy-on-write copy of this sandbox's files as they are now, "
          "with the same image and settings; processes are copied too with memory true (gvisor and microvm sandboxes: each "
          "copy goes on running them from where they are). Use it to try several approaches in parallel from the "
          "same starting point. Returns the new sandboxes' ids.",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "sandbox_id": {"type": "string", "minLength": 1},
          "count": {"type": "integer", "minimum": 1, "maximum": 16, "description": "How many copies (default 1)."},
          "memory": {"type": "boolean", "description": "Copy memory and running processes too (gvisor and microvm sandboxes; default false)."}
        },
        "required": ["sandbox_id"],
        "additionalProperties": false
      })json"),
      .output_schema = SandboxListSchema(),
      .annotations = {{"readOnlyHint", false}, {"destructiveHint", false}, {"openWorldHint", false}},
      .handler = ForkSandbox,
  });
  tools.push_back(ToolSpec{
      .name = "expose_port",
      .title = "Expose port",
      .description =
          "Returns URLs that reach a TCP port of the sandbox over HTTP (WebSockets too), e.g. a dev server you "
          "started with start_process (it must listen on 127.0.0.1 or 0.0.0.0 inside the sandbox). url goes "
          "through the daemon's API and needs its API key; preview_url is a host name that needs none (for a "
          "sandbox created with private_preview: the preview_headers, or open preview_browser_url). Also "
          "says whether something listens on the port now (it requests / once to find out). Nothing is opened to the outside: the URLs are the "
          "daemon's.",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "sandbox_id": {"type": "string", "minLength": 1},
          "port": {"type": "integer", "minimum": 1, "maximum": 65535}
        },
        "required": ["sandbox_id", "port"],
        "additionalProperties": false
      })json"),
      .output_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "sandbox_id": {"type": "string"}, "port": {"type": "integer"}, "listening": {"type": "boolean"},
          "url": {"type": ["string", "null"]}, "url_needs_api_key": {"type": "boolean"},
          "preview_url": {"type": ["string", "null"]}, "preview_headers": {"type": "object"},
          "preview_browser_url": {"type": ["string", "null"]}, "note": {"type": "string"}
        },
        "required": ["sandbox_id", "port", "listening", "url", "preview_url", "preview_headers", "preview_browser_url"]
      })json"),
      .annotations = {{"readOnlyHint", true}, {"openWorldHint", false}},
      .handler = ExposePort,
  });
}

}  // namespace bulkhead::mcp
