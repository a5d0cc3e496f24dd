#include "e2b/control_plane.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <vector>

#include <boost/beast/http/field.hpp>
#include <fmt/format.h>

#include "common/bounded_json.h"
#include "api/blocking.h"
#include "api/file_handler.h"
#include "api/json_output.h"
#include "api/validate.h"
#include "common/base64.h"
#include "common/time_format.h"
#include "e2b/envd_auth.h"

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
constexpr int64_t kMaxPageSize = 100;
constexpr uint64_t kMaxBody = 1024 * 1024;
// For a sandbox without an end (timeout 0): endAt is required, so a date far ahead.
constexpr std::string_view kNoEnd = "2999-12-31T23:59:59Z";

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
    network["denyOut"] = {"0.0.0.0/0"};
  } else if (policy.mode == "allowlist") {
    network["allowOut"] = policy.allow;
    network["denyOut"] = {"0.0.0.0/0"};
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
    out["lifecycle"] = {{"onTimeout", spec.on_timeout == "pause" ? "pause" : "kill"},
                        {"autoResume", spec.e2b_auto_resume}};
  }
  return out;
}

// SandboxMetric: one sample, now (bulkhead keeps no history). CPU is the average since the start.
json MetricsSample(const core::SandboxInfo& sandbox) {
  const time_t now = std::time(nullptr);
  const core::SandboxUsage usage = sandbox.usage.value_or(core::SandboxUsage{});
  double cpu_pct = 0;
  std::tm started{};
  if (strptime(sandbox.created_at.c_str(), "%Y-%m-%dT%H:%M:%S", &started)) {
    const double seconds = std::max<double>(1, static_cast<double>(now - timegm(&started)));
    cpu_pct = std::min(100.0, 100.0 * usage.cpu_s / seconds / std::max(sandbox.spec.cpus, 0.01));
  }
  return {
      {"timestamp", Rfc3339(now)},
      {"timestampUnix", static_cast<int64_t>(now)},
      {"cpuCount", static_cast<int64_t>(std::ceil(sandbox.spec.cpus))},
      {"cpuUsedPct", cpu_pct},
      {"memUsed", usage.memory_bytes},
      {"memTotal", sandbox.spec.memory_mb * 1024 * 1024},
      {"memCache", 0},
      {"diskUsed", usage.disk_bytes},
      {"diskTotal", sandbox.spec.disk_mb * 1024 * 1024},
  };
}

const std::string* QueryValue(const api::QueryParams& query, std::string_view name) {
  for (const auto& [key, value] : query) {
    if (key == name) return &value;
  }
  return nullptr;
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

// A page of a list sorted by (startedAt, id): the cursor is the last item's pair, opaque.
std::string Cursor(const std::string& created_at, const std::string& id) {
  return Base64Encode(created_at + "|" + id);
}

struct Page {
  size_t first = 0;
  size_t end = 0;
  std::string next_token;  // "" on the last page
};

// keys: each item's (created_at, id), already in the list's order. `descending` tells how
// the order compares, for the cursor.
Result<Page> PageOf(const std::vector<std::pair<std::string, std::string>>& keys, const api::QueryParams& query,
                    bool descending) {
  int64_t limit = kMaxPageSize;
  if (const std::string* text = QueryValue(query, "limit")) {
    try {
      size_t used = 0;
      limit = std::stoll(*text, &used);
      if (used != text->size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      return Invalid("limit must be an integer");
    }
    if (limit < 1 || limit > kMaxPageSize) return Invalid(fmt::format("limit must be 1 to {}", kMaxPageSize));
  }
  Page page;
  if (const std::string* token = QueryValue(query, "nextToken"); token && !token->empty()) {
    std::optional<std::string> decoded = Base64Decode(*token);
    const size_t bar = decoded ? decoded->find('|') : std::string::npos;
    if (bar == std::string::npos) return Invalid("nextToken is not one this server gave");
    const std::pair<std::string, std::string> after{decoded->substr(0, bar), decoded->substr(bar + 1)};
    while (page.first < keys.size() && (descending ? keys[page.first] >= after : keys[page.first] <= after)) {
      ++page.first;
    }
  }
  page.end = std::min(keys.size(), page.first + static_cast<size_t>(limit));
  if (page.end < keys.size()) page.next_token = Cursor(keys[page.end - 1].first, keys[page.end - 1].second);
  return page;
}

// A page of a list; the next page's cursor in x-next-token, as the SDKs' paginators read it.
asio::awaitable<void> SendPage(api::HttpExchange& exchange, const json& items, const std::string& next_token) {
  if (!next_token.empty()) exchange.SetResponseHeader("x-next-token", next_token);
  co_await exchange.SendJson(http::status::ok, items);
}

class ControlPlane {
 public:
  ControlPlane(E2bContext& context, api::HttpExchange& exchange) : context_(context), exchange_(exchange) {}

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
  asio::awaitable<void> Metrics(const std::string& id);
  asio::awaitable<void> UpdateNetwork(const std::string& id);
  asio::awaitable<void> Fork(const std::string& id);
  asio::awaitable<void> CreateSnapshot(const std::string& id);
  asio::awaitable<void> ListSnapshots(const api::QueryParams& query);
  asio::awaitable<void> DeleteSnapshot(const std::string& id);

  // The sandbox as E2B sees it: 404 for unknown ids and failed sandboxes. With `usage` (get,
  // metrics) it is read with Get's usage figures; otherwise only its state is looked up.
  Result<core::SandboxInfo> Find(const std::string& id, bool usage = false) {
    if (!api::IsValidSandboxId(id)) return NotFound(id);
    Result<core::SandboxInfo> sandbox = NotFound(id);
    if (usage) {
      sandbox = context_.manager.Get(id);
    } else if (std::vector<core::SandboxInfo> found = context_.manager.List(core::ListFilter{.id = id}); !found.empty()) {
      sandbox = std::move(found.front());
    }
    if (!sandbox.ok() || !E2bState(sandbox->state)) return NotFound(id);
    return sandbox;
  }
  static Error NotFound(const std::string& id) {
    return MakeError(ErrorCode::kNotFound, fmt::format("sandbox \"{}\" not found", id));
  }

  E2bContext& context_;
  api::HttpExchange& exchange_;
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

  if (n == base + 1 && s[base] == "sandboxes") {
    if (post) co_return co_await Create(), "POST /sandboxes";
    if (get) co_return co_await List(target.query, v2), "GET /sandboxes";
  } else if (n == base + 2 && s[base] == "sandboxes" && !v2) {
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
      if (get && action == "metrics") co_return co_await Metrics(id), "GET /sandboxes/{id}/metrics";
      if (method == http::verb::put && action == "network") {
        co_return co_await UpdateNetwork(id), "PUT /sandboxes/{id}/network";
      }
      if (post && action == "fork") co_return co_await Fork(id), "POST /sandboxes/{id}/fork";
      if (post && action == "snapshots") co_return co_await CreateSnapshot(id), "POST /sandboxes/{id}/snapshots";
    }
  } else if (!v2 && n == 1 && s[0] == "snapshots" && get) {
    co_return co_await ListSnapshots(target.query), "GET /snapshots";
  } else if (!v2 && n == 2 && s[0] == "templates" && method == http::verb::delete_) {
    co_return co_await DeleteSnapshot(s[1]), "DELETE /templates/{id}";
  }
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
  const bool is_snapshot = context_.manager.GetSnapshot(template_id).ok();
  Result<json> body = BulkheadCreateBody(*e2b, is_snapshot);
  if (!body.ok()) co_return co_await Fail(body.error());
  Result<core::SandboxSpec> spec = api::ParseSandboxSpec(*body, context_.host);
  if (!spec.ok()) co_return co_await Fail(spec.error());
  Result<bool> auto_resume = AutoResumeOf(*e2b);
  if (!auto_resume.ok()) co_return co_await Fail(auto_resume.error());
  spec->e2b_auto_resume = *auto_resume;
  core::SandboxManager& manager = context_.manager;
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
  const std::string* started_after = QueryValue(query, "startedAfter");
  bool descending = false;
  if (const std::string* order = QueryValue(query, "order")) {
    if (*order != "asc" && *order != "desc") co_return co_await Fail(Invalid("order must be asc or desc"));
    descending = *order == "desc";
  }

  std::vector<std::pair<core::SandboxInfo, std::string>> found;
  for (core::SandboxInfo& sandbox : context_.manager.List(filter)) {
    std::optional<std::string> state = E2bState(sandbox.state);
    if (!state || std::find(states.begin(), states.end(), *state) == states.end()) continue;
    if (template_id && TemplateOf(sandbox) != *template_id) continue;
    // RFC 3339 UTC strings of one format compare as their times do.
    if (started_after && sandbox.created_at <= *started_after) continue;
    found.emplace_back(std::move(sandbox), std::move(*state));
  }
  std::sort(found.begin(), found.end(), [descending](const auto& a, const auto& b) {
    const auto ka = std::tie(a.first.created_at, a.first.id), kb = std::tie(b.first.created_at, b.first.id);
    return descending ? kb < ka : ka < kb;
  });
  std::vector<std::pair<std::string, std::string>> keys;
  for (const auto& [sandbox, state] : found) keys.emplace_back(sandbox.created_at, sandbox.id);
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
  Result<core::SandboxInfo> sandbox = Find(id, /*usage=*/true);
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
  if (Result<core::SandboxInfo> sandbox = Find(id); !sandbox.ok()) co_return co_await Fail(sandbox.error());
  core::SandboxManager& manager = context_.manager;
  const int64_t seconds = **timeout;
  Result<core::SandboxInfo> updated = co_await Blocking([&] { return manager.SetTimeout(id, seconds); });
  if (!updated.ok()) co_return co_await Fail(updated.error());
  co_await exchange_.SendNoContent();
}

asio::awaitable<void> ControlPlane::Pause(const std::string& id) {
  Result<json> body = co_await Body();  // {"memory"?: bool}: bulkhead always keeps memory
  if (!body.ok()) co_return co_await Fail(body.error());
  Result<core::SandboxInfo> sandbox = Find(id);
  if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  if (*E2bState(sandbox->state) == "paused") {
    co_return co_await SendE2bError(exchange_, 409, fmt::format("sandbox \"{}\" is already paused", id));
  }
  core::SandboxManager& manager = context_.manager;
  Result<core::SandboxInfo> paused = co_await Blocking([&] { return manager.Pause(id); });
  if (!paused.ok()) co_return co_await Fail(paused.error());
  co_await exchange_.SendNoContent();
}

asio::awaitable<void> ControlPlane::Connect(const std::string& id) {
  Result<json> body = co_await Body();
  if (!body.ok()) co_return co_await Fail(body.error());
  Result<std::optional<int64_t>> timeout = OptionalInt(*body, "timeout", 0, api::kMaxLifetimeS);
  if (!timeout.ok()) co_return co_await Fail(timeout.error());
  Result<core::SandboxInfo> sandbox = Find(id);
  if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  core::SandboxManager& manager = context_.manager;
  const bool resumed = sandbox->state == "paused" || sandbox->state == "stopped";
  if (resumed) {
    const bool stopped = sandbox->state == "stopped";
    sandbox = co_await Blocking([&] { return stopped ? manager.Start(id) : manager.Resume(id); });
    if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  }
  if (*timeout) {
    const int64_t seconds = **timeout;
    sandbox = co_await Blocking([&] { return manager.SetTimeout(id, seconds); });
    if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  }
  co_await exchange_.SendJson(resumed ? http::status::created : http::status::ok, SandboxJson(context_, *sandbox));
}

asio::awaitable<void> ControlPlane::Metrics(const std::string& id) {
  Result<core::SandboxInfo> sandbox = Find(id, /*usage=*/true);
  if (!sandbox.ok()) co_return co_await Fail(sandbox.error());
  const json samples = json::array({MetricsSample(*sandbox)});
  co_await exchange_.SendJson(http::status::ok, samples);
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
  Result<int> count = api::ParseForkRequest(count_body);
  if (!count.ok()) co_return co_await Fail(count.error());
  if (Result<core::SandboxInfo> sandbox = Find(id); !sandbox.ok()) co_return co_await Fail(sandbox.error());
  core::SandboxManager& manager = context_.manager;
  Result<std::vector<core::SandboxInfo>> forks = co_await Blocking([&] { return manager.Fork(id, *count); });
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
  Result<std::string> name = api::ParseSnapshotRequest(name_body);
  if (!name.ok()) co_return co_await Fail(name.error());
  if (Result<core::SandboxInfo> sandbox = Find(id); !sandbox.ok()) co_return co_await Fail(sandbox.error());
  core::SandboxManager& manager = context_.manager;
  Result<core::SnapshotInfo> snapshot = co_await Blocking([&] { return manager.CreateSnapshot(id, *name); });
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
    if (sandbox_id && snapshot.sandbox_id != *sandbox_id) continue;
    if (name && snapshot.name != *name) continue;
    snapshots.push_back(std::move(snapshot));
  }
  std::stable_sort(snapshots.begin(), snapshots.end(), [](const auto& a, const auto& b) {
    return std::tie(a.created_at, a.id) < std::tie(b.created_at, b.id);
  });
  std::vector<std::pair<std::string, std::string>> keys;
  for (const auto& snapshot : snapshots) keys.emplace_back(snapshot.created_at, snapshot.id);
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
  if (!manager.GetSnapshot(id).ok()) {
    co_return co_await SendE2bError(exchange_, 404, fmt::format("template \"{}\" not found", id));
  }
  Status deleted = co_await Blocking([&] { return manager.DeleteSnapshot(id); });
  if (!deleted.ok()) co_return co_await Fail(deleted.error());
  co_await exchange_.SendNoContent();
}

}  // namespace

Result<json> BulkheadNetwork(const json* network, const json* allow_internet_access) {
  json out = {{"mode", "open"}, {"allow", json::array()}};
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
  // bulkhead's egress is an allow-list, so E2B's deny list can only be "everything"
  // (0.0.0.0/0), which turns allowOut into the list of what stays reachable.
  bool deny_all = !internet;
  for (const std::string& entry : deny) {
    if (entry == "0.0.0.0/0" || entry == "::/0") {
      deny_all = true;
    } else {
      return MakeError(ErrorCode::kInvalid,
                       fmt::format("denyOut \"{}\": bulkhead denies only everything (0.0.0.0/0) and allows "
                                   "exceptions with allowOut",
                                   entry));
    }
  }
  if (deny_all) {
    out["mode"] = allow.empty() ? "none" : "allowlist";
    out["allow"] = allow;
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
  }
  Result<std::optional<int64_t>> timeout = OptionalInt(e2b, "timeout", 0, api::kMaxLifetimeS);
  if (!timeout.ok()) return timeout.error();
  body["timeout_s"] = timeout->value_or(kDefaultTimeoutS);
  if (const auto found = e2b.find("autoPause"); found != e2b.end() && !found->is_null()) {
    if (!found->is_boolean()) return Invalid("autoPause must be a boolean");
    body["on_timeout"] = found->get<bool>() ? "pause" : "kill";
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

asio::awaitable<std::string_view> ServeControlPlane(E2bContext& context, api::HttpExchange& exchange,
                                                    const api::RequestTarget& target) {
  ControlPlane plane(context, exchange);
  co_return co_await plane.Serve(target);
}

}  // namespace bulkhead::e2b
