#include "e2b/control_plane.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <limits>
#include <vector>

#include <boost/beast/http/field.hpp>
#include <fmt/format.h>

#include "common/base64.h"
#include "common/bounded_json.h"
#include "common/time_format.h"
#include "e2b/envd_auth.h"
#include "e2b/template_plan.h"
#include "e2b/template_start.h"
#include "e2b/templates.h"
#include "http/blocking.h"
#include "http/json_text.h"
#include "net/ip_address.h"
#include "service/image_transfer.h"
#include "service/make_directory.h"
#include "service/validate.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::e2b {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using json = nlohmann::json;

namespace {

constexpr std::string_view kBaseTemplate = "base";
constexpr std::string_view kE2bUser = "user";  // E2B's base template runs as "user"
constexpr std::string_view kE2bHome = "/home/user";
constexpr int64_t kDefaultTimeoutS = 300;  // E2B's, when the SDK sends none
constexpr int64_t kMaxPageSize = 100;  // and the most sandboxes of one GET /sandboxes/metrics
constexpr int64_t kMaxUnixS = 253402300799;  // 9999-12-31T23:59:59Z: metrics' start and end
constexpr uint64_t kMaxBody = 1024 * 1024;
// For a sandbox without an end (timeout 0): endAt is required, so a date far ahead.
constexpr std::string_view kNoEnd = "2999-12-31T23:59:59Z";
constexpr std::string_view kAllTraffic = "0.0.0.0/0";  // E2B's ALL_TRAFFIC
constexpr size_t kMaxEgressEntries = 1000;             // as bulkhead's own lists

Error Invalid(std::string message) { return MakeError(ErrorCode::kBadRequest, std::move(message)); }

// "running" or "paused", the only states the SDKs parse; nullopt for a sandbox E2B would not
// list (failed).
std::optional<std::string> E2bState(const std::string& state) {
  if (state == "starting" || state == "running") return "running";
  if (state == "paused" || state == "stopped") return "paused";
  return std::nullopt;
}

std::string TemplateOf(const core::SandboxInfo& sandbox) {
  if (sandbox.spec.from_snapshot) return *sandbox.spec.from_snapshot;
  if (sandbox.parent_snapshot) return *sandbox.parent_snapshot;
  if (!sandbox.spec.image_ref.empty()) return sandbox.spec.image_ref;  // the registry reference it was named by
  return sandbox.spec.image == "host" ? std::string(kBaseTemplate) : sandbox.spec.image;
}

// Sandbox: what create, connect and fork answer.
json SandboxJson(const E2bContext& context, const core::SandboxInfo& sandbox) {
  return {
      {"templateID", TemplateOf(sandbox)},
      {"sandboxID", sandbox.id},
      {"clientID", "bulkhead"},
      {"envdVersion", kEnvdVersion},
      {"envdAccessToken", EnvdAccessToken(context.key, sandbox.id)},
      // Set for a sandbox created with allowPublicTraffic false: its ports need it.
      {"trafficAccessToken", sandbox.spec.preview.is_public ? json(nullptr) : json(sandbox.spec.preview.token)},
      {"domain", context.domain},
  };
}

json NetworkJson(const core::SandboxSpec& spec) {
  const core::NetworkPolicy& policy = spec.network;
  json network = {{"allowPublicTraffic", spec.preview.is_public}};
  if (policy.mode == "none") {
    network["denyOut"] = {kAllTraffic};
  } else if (policy.mode == "allowlist") {
    network["allowOut"] = policy.allow;
    network["denyOut"] = {kAllTraffic};
  } else if (!policy.deny.empty()) {
    network["denyOut"] = policy.deny;
  }
  return network;
}

// ListedSandbox, and with `detail` SandboxDetail. `state` is E2bState's.
json ListedJson(const E2bContext& context, const core::SandboxInfo& sandbox, const std::string& state, bool detail) {
  const core::SandboxSpec& spec = sandbox.spec;
  json out = {
      {"templateID", TemplateOf(sandbox)},
      {"sandboxID", sandbox.id},
      {"clientID", "bulkhead"},
      {"startedAt", sandbox.created_at},
      {"endAt", sandbox.expires_at ? *sandbox.expires_at : std::string(kNoEnd)},
      {"cpuCount", static_cast<int64_t>(std::ceil(spec.cpus))},
      {"memoryMB", spec.memory_mb},
      {"diskSizeMB", spec.disk_mb},
      {"state", state},
      {"envdVersion", kEnvdVersion},
      {"metadata", spec.metadata},
  };
  if (detail) {
    out["envdAccessToken"] = EnvdAccessToken(context.key, sandbox.id);
    out["domain"] = context.domain;
    out["allowInternetAccess"] = spec.network.mode != "none";
    out["network"] = NetworkJson(spec);
    out["lifecycle"] = {{"onTimeout", spec.on_timeout == "kill" ? "kill" : "pause"},
                        {"autoResume", spec.e2b_auto_resume}};
    // What the pause saved: a stopped sandbox (a pause without memory) has only its files.
    if (state == "paused") out["pauseMode"] = sandbox.state == "stopped" ? "filesystem" : "full";
  }
  return out;
}

// SandboxMetric: one sample of the sandbox's usage history.
json MetricsSample(const core::SandboxSpec& spec, const core::UsageSample& sample) {
  const time_t seconds = static_cast<time_t>(sample.unix_ms / 1000);
  return {
      {"timestamp", Rfc3339(seconds)},
      {"timestampUnix", static_cast<int64_t>(seconds)},
      {"cpuCount", static_cast<int64_t>(std::ceil(spec.cpus))},
      {"cpuUsedPct", sample.cpu_pct},
      {"memUsed", sample.memory_bytes},
      {"memTotal", spec.memory_mb * 1024 * 1024},
      {"memCache", 0},
      {"diskUsed", sample.disk_bytes},
      {"diskTotal", spec.disk_mb * 1024 * 1024},
  };
}

const std::string* QueryValue(const api::QueryParams& query, std::string_view name) {
  for (const auto& [key, value] : query) {
    if (key == name) return &value;
  }
  return nullptr;
}

// The distinct non-empty items of "a,b,c", in order.
std::vector<std::string> CommaList(std::string_view text) {
  std::vector<std::string> items;
  // (Not std::views::split: clang 14 with libstdc++ 12, the sanitizer build's, cannot take it.)
  while (!text.empty()) {
    const size_t comma = std::min(text.find(','), text.size());
    std::string item(text.substr(0, comma));
    text.remove_prefix(std::min(comma + 1, text.size()));
    if (!item.empty() && std::find(items.begin(), items.end(), item) == items.end()) items.push_back(std::move(item));
  }
  return items;
}

// An optional integer query parameter, min..max.
Result<std::optional<int64_t>> QueryInt(const api::QueryParams& query, std::string_view name, int64_t min,
                                        int64_t max) {
  const std::string* text = QueryValue(query, name);
  if (!text) return std::optional<int64_t>();
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size()) return Invalid(fmt::format("{} must be an integer", name));
  if (value < min || value > max) return Invalid(fmt::format("{} must be {} to {}", name, min, max));
  return std::optional<int64_t>(value);
}

// The body as a JSON object; an empty body is {}.
Result<json> ReadObject(const Result<std::string>& body) {
  if (!body.ok()) return body.error();
  if (body->empty()) return json::object();
  json parsed = ParseBoundedJson(*body);
  if (!parsed.is_object()) return Invalid("the request body is not a JSON object");
  return parsed;
}

Result<std::optional<int64_t>> OptionalInt(const json& body, const char* name, int64_t min, int64_t max) {
  const auto found = body.find(name);
  if (found == body.end() || found->is_null()) return std::optional<int64_t>();
  if (!found->is_number_integer()) return Invalid(fmt::format("{} must be an integer", name));
  const int64_t value = found->get<int64_t>();
  if (value < min || value > max) return Invalid(fmt::format("{} must be {} to {}", name, min, max));
  return std::optional<int64_t>(value);
}

Result<std::optional<bool>> OptionalBool(const json& body, const char* name) {
  const auto found = body.find(name);
  if (found == body.end() || found->is_null()) return std::optional<bool>();
  if (!found->is_boolean()) return Invalid(fmt::format("{} must be a boolean", name));
  return std::optional<bool>(found->get<bool>());
}

Result<std::vector<std::string>> StringList(const json& object, const char* name) {
  std::vector<std::string> out;
  const auto found = object.find(name);
  if (found == object.end() || found->is_null()) return out;
  if (!found->is_array()) return Invalid(fmt::format("network.{} must be an array of strings", name));
  for (const json& item : *found) {
    if (!item.is_string()) return Invalid(fmt::format("network.{} must be an array of strings", name));
    out.push_back(item.get<std::string>());
  }
  return out;
}

// NewSandbox's autoResume: {"enabled": bool} (SandboxAutoResumeConfig); absent = off.
Result<bool> AutoResumeOf(const json& e2b) {
  const auto found = e2b.find("autoResume");
  if (found == e2b.end() || found->is_null()) return false;
  const auto enabled = found->is_object() ? found->find("enabled") : found->end();
  if (!found->is_object() || enabled == found->end() || !enabled->is_boolean()) {
    return Invalid("autoResume must be an object {\"enabled\": bool}");
  }
  return enabled->get<bool>();
}

// A list item's place in its order: its creation time in milliseconds, then its id.
using ListKey = std::pair<int64_t, std::string>;

// The cursor after `key`, opaque to the SDKs: the time as RFC 3339, "|", the id.
std::string Cursor(const ListKey& key) { return Base64Encode(Rfc3339Millis(key.first) + "|" + key.second); }

struct Page {
  size_t first = 0;
  size_t end = 0;
  std::string next_token;  // "" on the last page
};

// keys: each item's, already in the list's order. `descending` tells how the order compares,
// for the cursor.
Result<Page> PageOf(const std::vector<ListKey>& keys, const api::QueryParams& query, bool descending) {
  Result<std::optional<int64_t>> asked = QueryInt(query, "limit", 1, kMaxPageSize);
  if (!asked.ok()) return asked.error();
  const int64_t limit = asked->value_or(kMaxPageSize);
  Page page;
  if (const std::string* token = QueryValue(query, "nextToken"); token && !token->empty()) {
    std::optional<std::string> decoded = Base64Decode(*token);
    const size_t bar = decoded ? decoded->find('|') : std::string::npos;
    const std::optional<int64_t> time = bar == std::string::npos ? std::nullopt : ParseRfc3339Millis(decoded->substr(0, bar));
    if (!time) return Invalid("nextToken is not one this server gave");
    const ListKey after{*time, decoded->substr(bar + 1)};
    while (page.first < keys.size() && (descending ? keys[page.first] >= after : keys[page.first] <= after)) {
      ++page.first;
    }
  }
  page.end = std::min(keys.size(), page.first + static_cast<size_t>(limit));
  if (page.end < keys.size()) page.next_token = Cursor(keys[page.end - 1]);
  return page;
}

// A page of a list; the next page's cursor in x-next-token, as the SDKs' paginators read it.
asio::awaitable<void> SendPage(api::HttpExchange& exchange, const json& items, const std::string& next_token) {
  if (!next_token.empty()) exchange.SetResponseHeader("x-next-token", next_token);
  co_await exchange.SendJson(http::status::ok, items);
}

class ControlPlane {
 public:
  ControlPlane(E2bContext& context, api::HttpExchange& exchange, const api::Caller& caller)
      : context_(context), exchange_(exchange), caller_(caller) {}

  asio::awaitable<std::string_view> Serve(const api::RequestTarget& target);

 private:
  template <typename Function>
  auto Blocking(Function function) {
    return api::RunBlocking(context_.blocking_pool, std::move(function));
  }
  asio::awaitable<Result<json>> Body() { co_return ReadObject(co_await exchange_.ReadBody(kMaxBody)); }
  asio::awaitable<void> Fail(const Error& error) { co_await SendE2bError(exchange_, error); }

  asio::awaitable<void> Create();
  asio::awaitable<void> List(const api::QueryParams& query, bool paginated);
  asio::awaitable<void> Get(const std::string& id);
  asio::awaitable<void> Kill(const std::string& id);
  asio::awaitable<void> SetTimeout(const std::string& id);
  asio::awaitable<void> Pause(const std::string& id);
  asio::awaitable<void> Connect(const std::string& id);
  asio::awaitable<void> Metrics(const std::string& id, const api::QueryParams& query);
  asio::awaitable<void> ListMetrics(const api::QueryParams& query);
  asio::awaitable<void> UpdateNetwork(const std::string& id);
  asio::awaitable<void> Fork(const std::string& id);
  asio::awaitable<void> CreateSnapshot(const std::string& id);
  asio::awaitable<void> ListSnapshots(const api::QueryParams& query);
  asio::awaitable<void> DeleteSnapshot(const std::string& id);
  asio::awaitable<void> TemplateAlias(const std::string& alias);

  // The sandbox as E2B sees it: 404 for unknown ids and failed sandboxes.
  Result<core::SandboxInfo> Find(const std::string& id) {
    if (!api::IsValidSandboxId(id)) return NotFound(id);
    std::vector<core::SandboxInfo> found = context_.manager.List(core::ListFilter{.id = id});
    if (found.empty() || !E2bState(found.front().state) || !Mine(found.front().spec.tenant)) return NotFound(id);
    return std::move(found.front());
  }
  // Whether an object of `tenant` is the caller's (the host's key: every one).
  bool Mine(const std::string& tenant) const { return caller_.HostAdmin() || tenant == caller_.tenant; }
  // A tenant's key reaches its own sandboxes and snapshots; read-only ones only read; the
  // template routes (builds into the host's shared image store) are the host's key's. A refusal
  // is answered; an unknown id is left to its route.
  asio::awaitable<bool> Refused(const std::vector<std::string>& s, size_t base, http::verb method);
  static Error NotFound(const std::string& id) {
    return MakeError(ErrorCode::kNotFound, fmt::format("sandbox \"{}\" not found", id));
  }
  // E2B's snapshots and forks keep memory and processes: here too where the sandbox's runtime
  // can (gvisor) and it has some (a stopped one has only files), its files alone
  // elsewhere.
  bool KeepsMemory(const core::SandboxInfo& sandbox) const {
    if (sandbox.state == "stopped") return false;
    for (const core::RuntimeInfo& runtime : context_.manager.Runtimes())
      if (runtime.name == sandbox.spec.runtime) return runtime.memory_snapshots;
    return false;
  }

  E2bContext& context_;
  api::HttpExchange& exchange_;
  const api::Caller& caller_;
};

asio::awaitable<std::string_view> ControlPlane::Serve(const api::RequestTarget& target) {
  // Segments decoded one by one: a snapshot id may hold an encoded '/'.
  std::vector<std::string> s;
  std::string_view rest(target.path);
  while (!rest.empty()) {
    rest.remove_prefix(1);  // the '/'
    const size_t slash = rest.find('/');
    std::optional<std::string> segment = api::PercentDecode(rest.substr(0, slash), false);
    if (!segment) {
      co_await SendE2bError(exchange_, 400, "malformed request target");
      co_return "unmatched";
    }
    s.push_back(std::move(*segment));
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  }
  const http::verb method = exchange_.request().method();
  const bool get = method == http::verb::get, post = method == http::verb::post;
  const size_t n = s.size();
  const bool v2 = n >= 1 && s[0] == "v2";
  const size_t base = v2 ? 1 : 0;  // index of "sandboxes"
  if (!caller_.HostAdmin() && co_await Refused(s, base, method)) co_return "refused";

  if (n == base + 1 && s[base] == "sandboxes") {
    if (post) co_return co_await Create(), "POST /sandboxes";
    if (get) co_return co_await List(target.query, v2), "GET /sandboxes";
  } else if (n == base + 2 && s[base] == "sandboxes" && !v2) {
    if (get && s[1] == "metrics") co_return co_await ListMetrics(target.query), "GET /sandboxes/metrics";
    if (get) co_return co_await Get(s[1]), "GET /sandboxes/{id}";
    if (method == http::verb::delete_) co_return co_await Kill(s[1]), "DELETE /sandboxes/{id}";
  } else if (n == base + 3 && s[base] == "sandboxes") {
    const std::string& id = s[base + 1];
    const std::string& action = s[base + 2];
    if (post && (action == "connect" || (!v2 && action == "resume"))) {
      co_return co_await Connect(id), "POST /sandboxes/{id}/connect";
    }
    if (!v2) {
      if (post && action == "timeout") co_return co_await SetTimeout(id), "POST /sandboxes/{id}/timeout";
      if (post && action == "pause") co_return co_await Pause(id), "POST /sandboxes/{id}/pause";
      if (get && action == "metrics") co_return co_await Metrics(id, target.query), "GET /sandboxes/{id}/metrics";
      if (method == http::verb::put && action == "network") {
        co_return co_await UpdateNetwork(id), "PUT /sandboxes/{id}/network";
      }
      if (post && action == "fork") co_return co_await Fork(id), "POST /sandboxes/{id}/fork";
      if (post && action == "snapshots") co_return co_await CreateSnapshot(id), "POST /sandboxes/{id}/snapshots";
    }
  } else if (!v2 && n == 1 && s[0] == "snapshots" && get) {
    co_return co_await ListSnapshots(target.query), "GET /snapshots";
  } else if (!v2 && n == 2 && s[0] == "templates" && method == http::verb::delete_ &&
             context_.manager.GetSnapshot(s[1]).ok()) {
    co_return co_await DeleteSnapshot(s[1]), "DELETE /templates/{id}";
  } else if (!v2 && n == 3 && s[0] == "templates" && s[1] == "aliases" && get) {
    co_return co_await TemplateAlias(s[2]), "GET /templates/aliases/{alias}";
  }
  if (std::optional<std::string_view> route = co_await ServeTemplates(context_, exchange_, target, s, caller_.tenant))
    co_return *route;
  co_await SendE2bError(exchange_, 404,
                        fmt::format("no route for {} {}", api::FromBeast(exchange_.request().method_string()),
                                    target.path));
  co_return "unmatched";
}

asio::awaitable<void> ControlPlane::Create() {
  Result<json> e2b = co_await Body();
  if (!e2b.ok()) co_return co_await Fail(e2b.error());
  std::string template_id(kBaseTemplate);
  if (const auto found = e2b->find("templateID"); found != e2b->end() && !found->is_null()) {
    if (!found->is_string() || found->get<std::string>().empty()) {
      co_return co_await Fail(Invalid("templateID must be a non-empty string"));
    }
    template_id = found->get<std::string>();
  }
  core::SandboxManager& manager = context_.manager;
  // A built template by name[:tag] (templates.h): its tag's image.
  const std::string named = template_id;
  if (std::optional<std::string> image = co_await Blocking([&] { return TemplateImageFor(manager, named, caller_.tenant); })) {
    template_id = *image;
    (*e2b)["templateID"] = template_id;
  }
  Result<core::SnapshotInfo> snapshot = context_.manager.GetSnapshot(template_id);
  if (snapshot.ok() && !Mine(snapshot->tenant)) co_return co_await Fail(NotFound(template_id));  // (as unknown)
  const bool is_snapshot = snapshot.ok();
  Result<json> body = BulkheadCreateBody(*e2b, is_snapshot);
  if (!body.ok()) co_return co_await Fail(body.error());
  Result<core::SandboxSpec> spec = api::ParseSandboxSpec(*body, context_.host);
  if (!spec.ok()) co_return co_await Fail(spec.error());
  spec->tenant = caller_.tenant;
  // A create that says nothing of the network gets its tenant's default policy, if it has one.
  if (!e2b->contains("network") && !e2b->contains("allow_internet_access"))
    if (auto rules = manager.TenantEgressOf(spec->tenant); rules.default_policy) spec->network = *rules.default_policy;
  // A template that names a registry image is pulled on first use, as the API's create does.
  Status image = co_await api::PrepareCreateImage(context_.manager, context_.blocking_pool, *body, *spec);
  if (!image.ok()) co_return co_await Fail(image.error());
  Result<bool> auto_resume = AutoResumeOf(*e2b);
  if (!auto_resume.ok()) co_return co_await Fail(auto_resume.error());
  spec->e2b_auto_resume = *auto_resume;
  // A template's sandboxes: its default user may sudo, as in E2B's base; its start command runs.
  StartCommands commands;
  if (!is_snapshot && spec->image != "host") {
    const std::string image_name = spec->image;
    Result<core::ImageInfo> image = co_await Blocking([&] { return manager.FindImage(image_name, spec->tenant); });
    if (image.ok() && image->config && image->config->labels.contains(kTemplateLabel)) {
      if (spec->sudo_users.empty()) spec->sudo_users = {std::string(kE2bUser)};
      commands = StartCommandsOf(*image);
    }
  }
  Result<core::SandboxInfo> created = co_await Blocking([&] { return manager.Create(*spec); });
  if (!created.ok()) co_return co_await Fail(created.error());
  if (created->spec.workdir != "/workspace") {
    Status made = co_await api::MakeDirectoryInside(manager, created->id, created->spec.workdir, created->spec.user);
    if (!made.ok()) {
      const std::string id = created->id;
      (void)co_await Blocking([&] { return manager.Delete(id); });
      co_return co_await Fail(made.error());
    }
  }
  if (!commands.start.empty() || !commands.ready.empty()) {
    Status started = co_await StartTemplateCommands(manager, created->id, commands, kReadyLimit);
    if (!started.ok()) {
      const std::string id = created->id;
      (void)co_await Blocking([&] { return manager.Delete(id); });
      co_return co_await Fail(started.error());
    }
  }
  co_await exchange_.SendJson(http::status::created, SandboxJson(context_, *created));
}

asio::awaitable<void> ControlPlane::List(const api::QueryParams& query, bool paginated) {
  std::vector<std::string> states = {"running", "paused"};
  if (!paginated) states = {"running"};  // v1 lists the running ones
  if (const std::string* text = QueryValue(query, "state"); text && !text->empty()) {
    states.clear();
    std::string_view rest(*text);
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string state(rest.substr(0, comma));
      if (state != "running" && state != "paused") co_return co_await Fail(Invalid("state must be running or paused"));
      states.push_back(state);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  core::ListFilter filter;
  if (const std::string* text = QueryValue(query, "metadata")) {
    Result<std::map<std::string, std::string>> metadata = ParseMetadataFilter(*text);
    if (!metadata.ok()) co_return co_await Fail(metadata.error());
    filter.metadata = std::move(*metadata);
  }
  const std::string* template_id = QueryValue(query, "template");
  std::optional<int64_t> started_after;
  if (const std::string* text = QueryValue(query, "startedAfter"); text && !text->empty()) {
    started_after = ParseRfc3339Millis(*text);
    if (!started_after) co_return co_await Fail(Invalid("startedAfter must be an RFC 3339 time"));
  }
  bool descending = true;  // E2B's default: newest first
  if (const std::string* order = QueryValue(query, "order")) {
    if (*order != "asc" && *order != "desc") co_return co_await Fail(Invalid("order must be asc or desc"));
    descending = *order == "desc";
  }

  // The manager lists them in the order they were made.
  std::vector<std::pair<core::SandboxInfo, std::string>> found;
  std::vector<ListKey> keys;
  if (!caller_.HostAdmin()) filter.tenant = caller_.tenant;
  for (core::SandboxInfo& sandbox : context_.manager.List(filter)) {
    std::optional<std::string> state = E2bState(sandbox.state);
    if (!state || std::find(states.begin(), states.end(), *state) == states.end()) continue;
    if (template_id && TemplateOf(sandbox) != *template_id) continue;
    const int64_t started = ParseRfc3339Millis(sandbox.created_at).value_or(0);
    if (started_after && started < *started_after) continue;  // "started at or after"
    keys.emplace_back(started, sandbox.id);
    found.emplace_back(std::move(sandbox), std::move(*state));
  }
  if (descending) {
    std::reverse(found.begin(), found.end());
    std::reverse(keys.begin(), keys.end());
  }
  Page page{0, found.size(), ""};
  if (paginated) {
    Result<Page> paged = PageOf(keys, query, descending);
    if (!paged.ok()) co_return co_await Fail(paged.error());
    page = std::move(*paged);
  }
  json items = json::array();
  for (size_t i = page.first; i < page.end; ++i) items.push_back(ListedJson(context_, found[i].first, found[i].second, false));
  co_await SendPage(exchange_, items, page.next_token);
}

asio::awaitable<void> ControlPlane::Get(const std::string& id) {
  Result<core::SandboxInfo> sandbox = Find(id);
  if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  co_await exchange_.SendJson(http::status::ok, ListedJson(context_, *sandbox, *E2bState(sandbox->state), true));
}

asio::awaitable<void> ControlPlane::Kill(const std::string& id) {
  if (!api::IsValidSandboxId(id)) co_return co_await Fail(NotFound(id));
  core::SandboxManager& manager = context_.manager;
  Status deleted = co_await Blocking([&] { return manager.Delete(id); });
  if (!deleted.ok()) co_return co_await Fail(deleted.error());
  co_await exchange_.SendNoContent();
}

asio::awaitable<void> ControlPlane::SetTimeout(const std::string& id) {
  Result<json> body = co_await Body();
  if (!body.ok()) co_return co_await Fail(body.error());
  Result<std::optional<int64_t>> timeout = OptionalInt(*body, "timeout", 0, api::kMaxLifetimeS);
  if (!timeout.ok()) co_return co_await Fail(timeout.error());
  if (!*timeout) co_return co_await Fail(Invalid("timeout is required"));
  Result<core::SandboxInfo> sandbox = Find(id);
  if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  core::SandboxManager& manager = context_.manager;
  const int64_t seconds = **timeout;
  // E2B's 0 is "the end is now": the sandbox ends as its lifecycle says at once (bulkhead's
  // own timeout_s 0 means no end, so it is not passed on).
  const std::string& on_timeout = sandbox->spec.on_timeout;
  Status done = co_await Blocking([&]() -> Status {
    Result<core::SandboxInfo> changed = sandbox.value();
    if (seconds > 0) {
      changed = manager.SetTimeout(id, seconds);
    } else if (on_timeout == "kill") {
      return manager.Delete(id);
    } else if (sandbox->state == "running") {
      changed = on_timeout == "stop" ? manager.Stop(id) : manager.Pause(id);
    }
    if (!changed.ok()) return changed.error();
    return {};
  });
  if (!done.ok()) co_return co_await Fail(done.error());
  co_await exchange_.SendNoContent();
}

asio::awaitable<void> ControlPlane::Pause(const std::string& id) {
  // SandboxPauseRequest. "memory": true (the default) keeps memory and processes: paused to disk
  // where the runtime can (gvisor: no RAM held, as E2B's pause), frozen in RAM elsewhere.
  // "memory": false keeps only the files: bulkhead's stop, whose processes end, and which
  // connect boots again. (requireHealthyGuest: init always answers or is gone.)
  Result<json> body = co_await Body();
  if (!body.ok()) co_return co_await Fail(body.error());
  Result<std::optional<bool>> memory = OptionalBool(*body, "memory");
  if (!memory.ok()) co_return co_await Fail(memory.error());
  Result<core::SandboxInfo> sandbox = Find(id);
  if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  if (*E2bState(sandbox->state) == "paused") {
    co_return co_await SendE2bError(exchange_, 409, fmt::format("sandbox \"{}\" is already paused", id));
  }
  core::SandboxManager& manager = context_.manager;
  const bool keep_memory = memory->value_or(true);
  const bool to_disk = keep_memory && KeepsMemory(*sandbox);
  Result<core::SandboxInfo> paused = co_await Blocking([&] {
    if (!keep_memory) return manager.Stop(id);
    return to_disk ? manager.PauseToDisk(id) : manager.Pause(id);
  });
  if (!paused.ok()) co_return co_await Fail(paused.error());
  co_await exchange_.SendNoContent();
}

asio::awaitable<void> ControlPlane::Connect(const std::string& id) {
  Result<json> body = co_await Body();
  if (!body.ok()) co_return co_await Fail(body.error());
  Result<std::optional<int64_t>> timeout = OptionalInt(*body, "timeout", 0, api::kMaxLifetimeS);
  if (!timeout.ok()) co_return co_await Fail(timeout.error());
  // "memory": false (the SDKs' onResume "reboot") boots a paused sandbox again from its files.
  Result<std::optional<bool>> memory = OptionalBool(*body, "memory");
  if (!memory.ok()) co_return co_await Fail(memory.error());
  Result<core::SandboxInfo> sandbox = Find(id);
  if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  core::SandboxManager& manager = context_.manager;
  // A stopped sandbox (a pause without memory) has only its files: it boots again.
  const bool resumed = sandbox->state == "paused" || sandbox->state == "stopped";
  if (resumed) {
    const bool reboot = sandbox->state == "stopped" || !memory->value_or(true);
    sandbox = co_await Blocking([&]() -> Result<core::SandboxInfo> {
      if (!reboot) return manager.Resume(id);
      BH_TRY(manager.Stop(id));
      return manager.Start(id);
    });
    if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  }
  // ConnectSandboxV2's timeout is 300 s when absent. A resumed sandbox runs for it from now; a
  // running one's end only ever moves later (E2B: "TTL is only extended"), and one without an
  // end keeps none. 0 extends nothing.
  const int64_t seconds = timeout->value_or(kDefaultTimeoutS);
  bool extend = seconds > 0 && resumed;
  if (seconds > 0 && !resumed && sandbox->expires_at) {
    const std::optional<int64_t> end = ParseRfc3339Millis(*sandbox->expires_at);
    extend = end && UnixMillis() + seconds * 1000 > *end;
  }
  if (extend) {
    sandbox = co_await Blocking([&] { return manager.SetTimeout(id, seconds); });
    if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  }
  co_await exchange_.SendJson(resumed ? http::status::created : http::status::ok, SandboxJson(context_, *sandbox));
}

asio::awaitable<void> ControlPlane::Metrics(const std::string& id, const api::QueryParams& query) {
  // Unix seconds, inclusive; by default all the history kept (the last hour).
  Result<std::optional<int64_t>> start = QueryInt(query, "start", 0, kMaxUnixS);
  if (!start.ok()) co_return co_await Fail(start.error());
  Result<std::optional<int64_t>> end = QueryInt(query, "end", 0, kMaxUnixS);
  if (!end.ok()) co_return co_await Fail(end.error());
  if (*start && *end && **start > **end) co_return co_await Fail(Invalid("start must not be after end"));
  Result<core::SandboxInfo> sandbox = Find(id);
  if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  const int64_t from_ms = start->value_or(0) * 1000;
  const int64_t to_ms = *end ? **end * 1000 + 999 : std::numeric_limits<int64_t>::max();
  core::SandboxManager& manager = context_.manager;
  Result<std::vector<core::UsageSample>> samples =
      co_await Blocking([&] { return manager.UsageSamples(id, from_ms, to_ms); });
  if (!samples.ok()) co_return co_await Fail(samples.error());
  json out = json::array();
  for (const core::UsageSample& sample : *samples) out.push_back(MetricsSample(sandbox->spec, sample));
  co_await exchange_.SendJson(http::status::ok, out);
}

// SandboxesWithMetrics: the latest sample of each sandbox asked for that has one; the others
// (unknown, failed, never sampled) are left out, as E2B does.
asio::awaitable<void> ControlPlane::ListMetrics(const api::QueryParams& query) {
  const std::string* list = QueryValue(query, "sandbox_ids");
  if (!list) co_return co_await Fail(Invalid("sandbox_ids is required"));
  const std::vector<std::string> ids = CommaList(*list);
  if (ids.size() > static_cast<size_t>(kMaxPageSize)) {
    co_return co_await Fail(Invalid(fmt::format("Too many sandboxes requested, maximum is {}", kMaxPageSize)));
  }
  core::SandboxManager& manager = context_.manager;
  json sandboxes = json::object();
  for (const std::string& id : ids) {
    Result<core::SandboxInfo> sandbox = Find(id);
    if (!sandbox.ok()) continue;
    Result<std::vector<core::UsageSample>> samples = co_await Blocking(
        [&] { return manager.UsageSamples(id, 0, std::numeric_limits<int64_t>::max()); });
    if (samples.ok() && !samples->empty()) sandboxes[id] = MetricsSample(sandbox->spec, samples->back());
  }
  json out = json::object();
  out["sandboxes"] = std::move(sandboxes);
  co_await exchange_.SendJson(http::status::ok, out);
}

asio::awaitable<void> ControlPlane::UpdateNetwork(const std::string& id) {
  Result<json> body = co_await Body();
  if (!body.ok()) co_return co_await Fail(body.error());
  const auto allow_internet = body->find("allow_internet_access");
  Result<json> network = BulkheadNetwork(&*body, allow_internet == body->end() ? nullptr : &*allow_internet);
  if (!network.ok()) co_return co_await Fail(network.error());
  Result<core::NetworkPolicy> policy = api::ParseNetworkUpdate(*network);
  if (!policy.ok()) co_return co_await Fail(policy.error());
  if (Result<core::SandboxInfo> sandbox = Find(id); !sandbox.ok()) co_return co_await Fail(sandbox.error());
  core::SandboxManager& manager = context_.manager;
  Result<core::SandboxInfo> updated = co_await Blocking([&] { return manager.SetNetwork(id, *policy); });
  if (!updated.ok()) co_return co_await Fail(updated.error());
  co_await exchange_.SendNoContent();
}

asio::awaitable<void> ControlPlane::Fork(const std::string& id) {
  Result<json> body = co_await Body();
  if (!body.ok()) co_return co_await Fail(body.error());
  Result<std::optional<int64_t>> timeout = OptionalInt(*body, "timeout", 0, api::kMaxLifetimeS);
  if (!timeout.ok()) co_return co_await Fail(timeout.error());
  json count_body = json::object();
  if (const auto count = body->find("count"); count != body->end() && !count->is_null()) count_body["count"] = *count;
  Result<api::ForkRequest> request = api::ParseForkRequest(count_body);
  if (!request.ok()) co_return co_await Fail(request.error());
  Result<core::SandboxInfo> sandbox = Find(id);
  if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  core::SandboxManager& manager = context_.manager;
  const bool memory = KeepsMemory(*sandbox);
  Result<std::vector<core::SandboxInfo>> forks =
      co_await Blocking([&] { return manager.Fork(id, request->count, memory); });
  if (!forks.ok()) co_return co_await Fail(forks.error());
  json items = json::array();
  for (core::SandboxInfo& fork : *forks) {
    if (*timeout) {
      const int64_t seconds = **timeout;
      const std::string fork_id = fork.id;
      Result<core::SandboxInfo> updated = co_await Blocking([&] { return manager.SetTimeout(fork_id, seconds); });
      if (updated.ok()) fork = std::move(*updated);
    }
    items.push_back({{"sandbox", SandboxJson(context_, fork)}});
  }
  co_await exchange_.SendJson(http::status::created, items);
}

asio::awaitable<void> ControlPlane::CreateSnapshot(const std::string& id) {
  Result<json> body = co_await Body();
  if (!body.ok()) co_return co_await Fail(body.error());
  json name_body = json::object();
  if (const auto name = body->find("name"); name != body->end() && !name->is_null()) name_body["name"] = *name;
  Result<api::SnapshotRequest> request = api::ParseSnapshotRequest(name_body);
  if (!request.ok()) co_return co_await Fail(request.error());
  Result<core::SandboxInfo> sandbox = Find(id);
  if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  core::SandboxManager& manager = context_.manager;
  const bool memory = KeepsMemory(*sandbox);
  Result<core::SnapshotInfo> snapshot =
      co_await Blocking([&] { return manager.CreateSnapshot(id, request->name, memory); });
  if (!snapshot.ok()) co_return co_await Fail(snapshot.error());
  const json names = snapshot->name.empty() ? json::array() : json::array({snapshot->name});
  const json created = {{"snapshotID", snapshot->id}, {"names", names}};
  co_await exchange_.SendJson(http::status::created, created);
}

asio::awaitable<void> ControlPlane::ListSnapshots(const api::QueryParams& query) {
  const std::string* sandbox_id = QueryValue(query, "sandboxID");
  const std::string* name = QueryValue(query, "name");
  std::vector<core::SnapshotInfo> snapshots;
  for (core::SnapshotInfo& snapshot : context_.manager.ListSnapshots()) {  // oldest first
    if (snapshot.name.starts_with(core::kBuildSnapshotPrefix)) continue;  // a build's cache, not a template
    if (!Mine(snapshot.tenant)) continue;
    if (sandbox_id && snapshot.sandbox_id != *sandbox_id) continue;
    if (name && snapshot.name != *name) continue;
    snapshots.push_back(std::move(snapshot));
  }
  std::vector<ListKey> keys;
  for (const auto& snapshot : snapshots) keys.emplace_back(ParseRfc3339Millis(snapshot.created_at).value_or(0), snapshot.id);
  Result<Page> page = PageOf(keys, query, false);
  if (!page.ok()) co_return co_await Fail(page.error());
  json items = json::array();
  for (size_t i = page->first; i < page->end; ++i) {
    const core::SnapshotInfo& snapshot = snapshots[i];
    items.push_back({{"snapshotID", snapshot.id},
                     {"names", snapshot.name.empty() ? json::array() : json::array({snapshot.name})}});
  }
  co_await SendPage(exchange_, items, page->next_token);
}

asio::awaitable<void> ControlPlane::DeleteSnapshot(const std::string& id) {
  core::SandboxManager& manager = context_.manager;
  if (Result<core::SnapshotInfo> snapshot = manager.GetSnapshot(id); !snapshot.ok() || !Mine(snapshot->tenant)) {
    co_return co_await SendE2bError(exchange_, 404, fmt::format("template \"{}\" not found", id));
  }
  Status deleted = co_await Blocking([&] { return manager.DeleteSnapshot(id); });
  if (!deleted.ok()) co_return co_await Fail(deleted.error());
  co_await exchange_.SendNoContent();
}

// TemplateAliasResponse for what create takes as a templateID: "base", an image (bulkhead's
// own are public, as E2B's base is; imported ones are the team's), a snapshot id.
asio::awaitable<void> ControlPlane::TemplateAlias(const std::string& alias) {
  std::optional<json> found;
  if (alias == kBaseTemplate) {
    found = {{"templateID", kBaseTemplate}, {"public", true}};
  } else if (context_.manager.GetSnapshot(alias).ok()) {
    found = {{"templateID", alias}, {"public", false}};
  } else {
    for (const core::ImageInfo& stored : context_.manager.ListImages()) {
      if (!storage::SeesImage(stored, caller_.tenant)) continue;
      const core::ImageInfo image = storage::ImageSeenBy(stored, caller_.tenant);
      const bool named = std::find(image.references.begin(), image.references.end(), alias) != image.references.end();
      if (image.name != alias && !named) continue;
      const bool host = image.source == "host";
      found = {{"templateID", host ? std::string(kBaseTemplate) : alias}, {"public", host}};
    }
  }
  if (!found && TemplateExists(context_, alias, caller_.tenant)) found = {{"templateID", ParseTemplateName(alias)->alias}, {"public", false}};
  if (!found) co_return co_await SendE2bError(exchange_, 404, fmt::format("template '{}' not found", alias));
  co_await exchange_.SendJson(http::status::ok, *found);
}

// Whether E2B reads an allowOut/denyOut entry as an address (Go's net.ParseIP or ParseCIDR
// would take it) rather than a domain name.
bool LooksLikeAddress(const std::string& entry) {
  return entry.find_first_of("[]") == std::string::npos &&
         net::IpAddress::Parse(entry.substr(0, entry.find('/'))).has_value();
}

// Such an entry as E2B uses it: an IP, or a CIDR with its host bits cleared. nullopt for what
// E2B refuses: no address, or an unspecified one (0.0.0.0, ::, 0.0.0.0/8; the caller has
// taken kAllTraffic out before).
std::optional<net::IpPrefix> E2bAddress(const std::string& entry) {
  if (!LooksLikeAddress(entry)) return std::nullopt;
  const net::IpAddress address = *net::IpAddress::Parse(entry.substr(0, entry.find('/')));
  const size_t size = address.v6 ? 16 : 4;
  if (std::all_of(address.bytes.begin(), address.bytes.begin() + size, [](uint8_t b) { return b == 0; })) {
    return std::nullopt;
  }
  return net::IpPrefix::ParseMasked(entry);
}

}  // namespace

// E2B's egress rules (infra's validateEgressRules, and its firewall and TCP proxy): denyOut
// takes IPs and CIDRs only; allowOut takes those and domain names, and names need
// ALL_TRAFFIC in denyOut; an entry of allowOut wins over any of denyOut; what neither names
// is allowed. With ALL_TRAFFIC (or allow_internet_access false) allowOut is the allowlist;
// without, the internet is open but for denyOut, less what allowOut takes back. bulkhead's
// deny entries win over its allow entries, so that difference is taken out of the deny list
// here.
Result<json> BulkheadNetwork(const json* network, const json* allow_internet_access) {
  json out = {{"mode", "open"}, {"allow", json::array()}, {"deny", json::array()}};
  std::vector<std::string> allow, deny;
  if (network && !network->is_null()) {
    if (!network->is_object()) return Invalid("network must be an object");
    Result<std::vector<std::string>> allow_out = StringList(*network, "allowOut");
    if (!allow_out.ok()) return allow_out.error();
    Result<std::vector<std::string>> deny_out = StringList(*network, "denyOut");
    if (!deny_out.ok()) return deny_out.error();
    allow = std::move(*allow_out);
    deny = std::move(*deny_out);
  }
  bool internet = true;
  if (allow_internet_access && !allow_internet_access->is_null()) {
    if (!allow_internet_access->is_boolean()) return Invalid("allow_internet_access must be a boolean");
    internet = allow_internet_access->get<bool>();
  }
  if (allow.size() > kMaxEgressEntries || deny.size() > kMaxEgressEntries) {
    return Invalid(fmt::format("allowOut and denyOut take at most {} entries each", kMaxEgressEntries));
  }
  bool all_traffic = false;
  std::vector<std::pair<std::string, net::IpPrefix>> denied;  // as written, as read
  for (const std::string& entry : deny) {
    if (entry == kAllTraffic) {
      all_traffic = true;
      continue;
    }
    std::optional<net::IpPrefix> prefix = E2bAddress(entry);
    if (!prefix) return Invalid(fmt::format("invalid denied CIDR {}", entry));  // E2B's words
    denied.emplace_back(entry, *prefix);
  }
  std::vector<net::IpPrefix> allowed;
  bool domains = false;
  for (std::string& entry : allow) {
    if (!LooksLikeAddress(entry)) {
      domains = true;
      continue;
    }
    std::optional<net::IpPrefix> prefix = E2bAddress(entry);
    if (!prefix) return Invalid(fmt::format("invalid allowed address {}", entry));
    allowed.push_back(*prefix);
    if (!net::IpPrefix::Parse(entry)) entry = prefix->ToString();  // "10.0.0.1/8" as E2B reads it
  }
  if (domains && !all_traffic) {
    return Invalid(
        "When specifying allowed domains in allow out, you must include 'ALL_TRAFFIC' in deny out to block all "
        "other traffic.");
  }
  if (all_traffic || !internet) {
    out["mode"] = allow.empty() ? "none" : "allowlist";
    out["allow"] = allow;  // the rest of denyOut denies nothing more
    return out;
  }
  for (const auto& [text, prefix] : denied) {
    auto left = net::SubtractPrefixes(prefix, allowed, kMaxEgressEntries);
    if (!left || out["deny"].size() + left->size() > kMaxEgressEntries) {
      return Invalid(fmt::format("denyOut less allowOut takes more than {} ranges", kMaxEgressEntries));
    }
    // An entry allowOut leaves whole stays as written (the SDKs read it back).
    if (left->size() == 1 && (*left)[0].length == prefix.length && net::IpPrefix::Parse(text)) {
      out["deny"].push_back(text);
      continue;
    }
    for (const net::IpPrefix& piece : *left) out["deny"].push_back(piece.ToString());
  }
  return out;
}

Result<json> BulkheadCreateBody(const json& e2b, bool template_is_snapshot) {
  json body = json::object();
  std::string template_id(kBaseTemplate);
  if (const auto found = e2b.find("templateID"); found != e2b.end() && found->is_string()) {
    template_id = found->get<std::string>();
  }
  if (template_is_snapshot) {
    body["from_snapshot"] = template_id;
  } else {
    body["image"] = template_id == kBaseTemplate ? "host" : template_id;
  }
  if (template_is_snapshot || template_id == kBaseTemplate) {
    body["user"] = kE2bUser;
    body["workdir"] = kE2bHome;
    // E2B's base template lets its user sudo without a password.
    body["sudo_users"] = json::array({kE2bUser});
  }
  Result<std::optional<int64_t>> timeout = OptionalInt(e2b, "timeout", 0, api::kMaxLifetimeS);
  if (!timeout.ok()) return timeout.error();
  body["timeout_s"] = timeout->value_or(kDefaultTimeoutS);
  if (const auto found = e2b.find("autoPause"); found != e2b.end() && !found->is_null()) {
    if (!found->is_boolean()) return Invalid("autoPause must be a boolean");
    // autoPauseMemory false: a filesystem-only auto-pause, which is bulkhead's stop.
    Result<std::optional<bool>> memory = OptionalBool(e2b, "autoPauseMemory");
    if (!memory.ok()) return memory.error();
    body["on_timeout"] = !found->get<bool>() ? "kill" : memory->value_or(true) ? "pause" : "stop";
  }
  for (const auto& [from, to] : {std::pair<const char*, const char*>{"envVars", "env"}, {"metadata", "metadata"}}) {
    const auto found = e2b.find(from);
    if (found == e2b.end() || found->is_null()) continue;
    if (!found->is_object()) return Invalid(fmt::format("{} must be an object of strings", from));
    body[to] = *found;  // bulkhead's validation checks the entries
  }
  const auto network = e2b.find("network");
  if (network != e2b.end() && network->is_object()) {
    // Only with the traffic access token are the sandbox's ports reached (front.cc, preview_access.h).
    if (const auto traffic = network->find("allowPublicTraffic"); traffic != network->end() && !traffic->is_null()) {
      if (!traffic->is_boolean()) return Invalid("network.allowPublicTraffic must be a boolean");
      body["preview"] = {{"public", traffic->get<bool>()}};
    }
  }
  const auto internet = e2b.find("allow_internet_access");
  Result<json> policy = BulkheadNetwork(network == e2b.end() ? nullptr : &*network,
                                        internet == e2b.end() ? nullptr : &*internet);
  if (!policy.ok()) return policy.error();
  body["network"] = std::move(*policy);
  return body;
}

Result<std::map<std::string, std::string>> ParseMetadataFilter(std::string_view text) {
  std::map<std::string, std::string> out;
  while (!text.empty()) {
    const size_t amp = text.find('&');
    const std::string_view pair = text.substr(0, amp);
    text = amp == std::string_view::npos ? std::string_view() : text.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t equals = pair.find('=');
    if (equals == std::string_view::npos) return Invalid("metadata must be key=value pairs");
    // The pair's form encoding, then the SDK's own encoding of each key and value.
    std::optional<std::string> key = api::PercentDecode(pair.substr(0, equals), true);
    std::optional<std::string> value = api::PercentDecode(pair.substr(equals + 1), true);
    if (key) key = api::PercentDecode(*key, false);
    if (value) value = api::PercentDecode(*value, false);
    if (!key || !value || key->empty()) return Invalid("metadata has a malformed key or value");
    out[*key] = *value;
  }
  return out;
}

asio::awaitable<bool> ControlPlane::Refused(const std::vector<std::string>& s, size_t base, http::verb method) {
  const size_t n = s.size();
  if (caller_.scope == api::Scope::kReadOnly && method != http::verb::get && method != http::verb::head) {
    co_await SendE2bError(exchange_, 403, "this key is read-only");
    co_return true;
  }
  if (n >= base + 2 && s[base] == "sandboxes" && !(n == base + 2 && s[base + 1] == "metrics")) {
    if (Result<core::SandboxInfo> sandbox = Find(s[base + 1]); !sandbox.ok()) {
      co_await Fail(sandbox.error());  // another tenant's: as an unknown one
      co_return true;
    }
  }
  // (Templates are each tenant's own images: templates.cc acts as the caller's tenant.)
  co_return false;
}

asio::awaitable<std::string_view> ServeControlPlane(E2bContext& context, api::HttpExchange& exchange,
                                                    const api::RequestTarget& target, const api::Caller& caller) {
  ControlPlane plane(context, exchange, caller);
  co_return co_await plane.Serve(target);
}

}  // namespace bulkhead::e2b
