#include "api/image_handlers.h"

#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "api/json_output.h"
#include "http/blocking.h"
#include "http/json_text.h"
#include "service/validate.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::api {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

Error Invalid(const std::string& message) { return MakeError(ErrorCode::kInvalid, message); }

// A pull running on a pool thread, and what it reported that the connection has not sent yet.
// The pool thread appends and wakes the connection's coroutine through its strand.
struct PullRun : std::enable_shared_from_this<PullRun> {
  explicit PullRun(asio::any_io_executor executor) : strand(std::move(executor)), wake(strand) {}
  asio::any_io_executor strand;
  asio::steady_timer wake;  // touched on the strand only
  std::mutex mu;
  std::deque<std::string> lines;
  std::optional<Result<core::ImageInfo>> result;

  void Post(std::string line, std::optional<Result<core::ImageInfo>> done = std::nullopt) {
    {
      std::lock_guard lock(mu);
      if (!line.empty()) lines.push_back(std::move(line));
      if (done) result = std::move(done);
    }
    asio::post(strand, [self = shared_from_this()] { self->wake.cancel(); });
  }
};

Result<storage::PullRequest> ParsePullRequest(const json& body, const std::string& default_registry) {
  storage::PullRequest request;
  auto image = body.find("image");
  if (image == body.end() || !image->is_string()) return Invalid("image (a reference such as registry.example/team/py:3.12) is required");
  auto ref = storage::ParseImageRef(image->get<std::string>(), default_registry);
  if (!ref.ok()) return ref.error();
  request.ref = std::move(*ref);
  request.platform = storage::HostPlatform();
  if (auto platform = body.find("platform"); platform != body.end()) {
    if (!platform->is_string()) return Invalid("platform must be a string os/arch[/variant]");
    const std::string text = platform->get<std::string>();
    const size_t slash = text.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == text.size() || text.size() > 64)
      return Invalid("platform must be os/arch[/variant], like linux/amd64");
    request.platform.os = text.substr(0, slash);
    request.platform.architecture = text.substr(slash + 1);
    if (const size_t second = request.platform.architecture.find('/'); second != std::string::npos) {
      request.platform.variant = request.platform.architecture.substr(second + 1);
      request.platform.architecture.resize(second);
    }
  }
  if (auto auth = body.find("auth"); auth != body.end()) {
    if (!auth->is_object()) return Invalid("auth must be {\"username\": ..., \"password\": ...}");
    auto user = auth->find("username");
    auto pass = auth->find("password");
    if (user == auth->end() || !user->is_string() || pass == auth->end() || !pass->is_string() ||
        user->get_ref<const std::string&>().size() > 1024 || pass->get_ref<const std::string&>().size() > 16384)
      return Invalid("auth must be {\"username\": ..., \"password\": ...} (strings)");
    request.login = storage::RegistryLogin{user->get<std::string>(), pass->get<std::string>()};
  }
  return request;
}

// Runs the pull on `pool`, handing each progress line to `on_line` on this coroutine's strand.
// Answers the pull's result. The pull goes on to the end if on_line gives up (a client gone).
using LineWriter = std::function<asio::awaitable<bool>(const std::string&)>;

// (Callers keep temporaries out of the co_await expressions: g++ 12 destroys them wrongly.)
asio::awaitable<Result<core::ImageInfo>> RunPull(core::SandboxManager& manager, asio::thread_pool& pool,
                                                 const storage::PullRequest& request, const LineWriter& on_line) {
  auto executor = co_await asio::this_coro::executor;
  auto run = std::make_shared<PullRun>(executor);
  asio::post(pool, [run, &manager, request] {
    auto listener = [&](const json& event) { run->Post(DumpJson(event) + "\n"); };
    Result<core::ImageInfo> result = [&]() -> Result<core::ImageInfo> {
      try {
        return manager.PullImage(request, listener);
      } catch (const std::exception& e) {
        return MakeError(ErrorCode::kInternal, std::string("pull failed: ") + e.what());
      }
    }();
    run->Post({}, std::move(result));
  });
  bool listening = true;
  for (;;) {
    std::deque<std::string> lines;
    std::optional<Result<core::ImageInfo>> result;
    {
      std::lock_guard lock(run->mu);
      lines.swap(run->lines);
      result = run->result;
    }
    if (listening && !lines.empty()) {
      std::string chunk;
      for (std::string& line : lines) chunk += line;
      listening = co_await on_line(chunk);
    }
    if (result) co_return std::move(*result);
    // Woken by Post (which cancels the wait); the timeout is only a safety net.
    run->wake.expires_after(std::chrono::seconds(1));
    boost::system::error_code ec;
    co_await run->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

}  // namespace

asio::awaitable<void> ServePull(HttpExchange& exchange, core::SandboxManager& manager, asio::thread_pool& pool,
                                bool stream) {
  std::optional<json> body = co_await exchange.ReadJsonObject(kMaxJsonBody);
  if (!body) co_return;
  Result<storage::PullRequest> request = ParsePullRequest(*body, manager.config().registry.default_registry);
  if (!request.ok()) co_return co_await exchange.SendError(request.error());
  if (!stream) {
    const LineWriter ignore = [](const std::string&) -> asio::awaitable<bool> { co_return false; };
    Result<core::ImageInfo> image = co_await RunPull(manager, pool, *request, ignore);
    if (!image.ok()) co_return co_await exchange.SendError(image.error());
    const json answer = ImageToJson(*image);
    co_return co_await exchange.SendJson(http::status::created, answer);
  }
  if (!co_await exchange.BeginChunked(http::status::ok, "application/x-ndjson")) co_return;
  const LineWriter write = [&exchange](const std::string& chunk) -> asio::awaitable<bool> {
    co_return co_await exchange.WriteChunk(chunk);
  };
  Result<core::ImageInfo> image = co_await RunPull(manager, pool, *request, write);
  const json last = image.ok() ? json{{"status", "done"}, {"image", ImageToJson(*image)}}
                               : json{{"status", "error"}, {"error", ErrorToJson(image.error())["error"]}};
  const std::string line = DumpJson(last) + "\n";
  if (co_await exchange.WriteChunk(line)) co_await exchange.EndChunked();
}

asio::awaitable<Status> PrepareCreateImage(core::SandboxManager& manager, asio::thread_pool& pool, const json& body,
                                           core::SandboxSpec& spec) {
  std::string policy = "missing";
  if (auto it = body.find("pull"); it != body.end()) {
    if (!it->is_string() || (*it != "missing" && *it != "never" && *it != "always"))
      co_return Invalid("pull must be one of missing, never, always");
    policy = it->get<std::string>();
  }
  if (spec.image == "host" || spec.from_snapshot) co_return Status();
  const std::string named = spec.image;
  Result<core::ImageInfo> image = manager.FindImage(named);
  const bool is_reference = storage::IsRegistryReference(named) || !manager.config().registry.default_registry.empty();
  if (is_reference && (policy == "always" || (policy == "missing" && !image.ok() && image.error().code == ErrorCode::kNotFound))) {
    const json pull_body = {{"image", named}};
    auto request = ParsePullRequest(pull_body, manager.config().registry.default_registry);
    if (!request.ok()) co_return request.error();
    const LineWriter ignore = [](const std::string&) -> asio::awaitable<bool> { co_return false; };
    image = co_await RunPull(manager, pool, *request, ignore);
  }
  if (!image.ok()) co_return image.error();
  spec.image = image->name;
  if (named != image->name) spec.image_ref = named;
  if (!image->config) co_return Status();
  // The image's config, under what the create said.
  for (const std::string& entry : image->config->env) {
    const size_t equals = entry.find('=');
    if (equals == std::string::npos || equals == 0) continue;
    spec.env.emplace(entry.substr(0, equals), entry.substr(equals + 1));  // keeps the create's own
  }
  if (!body.contains("workdir") && !image->config->working_dir.empty() && image->config->working_dir.front() == '/')
    spec.workdir = image->config->working_dir;
  if (!body.contains("user") && !image->config->user.empty() && IsValidUser(image->config->user))
    spec.user = image->config->user;
  co_return Status();
}

}  // namespace bulkhead::api
