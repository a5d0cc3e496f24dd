#include "service/image_transfer.h"

#include <deque>
#include <memory>
#include <mutex>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

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

// A transfer running on a pool thread, and what it reported that the connection has not sent yet.
// The pool thread appends and wakes the connection's coroutine through its strand.
struct TransferRun : std::enable_shared_from_this<TransferRun> {
  explicit TransferRun(asio::any_io_executor executor) : strand(std::move(executor)), wake(strand) {}
  asio::any_io_executor strand;
  asio::steady_timer wake;  // touched on the strand only
  std::mutex mu;
  std::deque<std::string> lines;
  std::optional<Result<json>> result;

  void Post(std::string line, std::optional<Result<json>> done = std::nullopt) {
    {
      std::lock_guard lock(mu);
      if (!line.empty()) lines.push_back(std::move(line));
      if (done) result = std::move(done);
    }
    asio::post(strand, [self = shared_from_this()] { self->wake.cancel(); });
  }
};

// "auth": {"username", "password"}, if the body has it.
Result<std::optional<storage::RegistryLogin>> ParseLogin(const json& body) {
  auto auth = body.find("auth");
  if (auth == body.end()) return std::optional<storage::RegistryLogin>();
  if (!auth->is_object()) return Invalid("auth must be {\"username\": ..., \"password\": ...}");
  auto user = auth->find("username");
  auto pass = auth->find("password");
  if (user == auth->end() || !user->is_string() || pass == auth->end() || !pass->is_string() ||
      user->get_ref<const std::string&>().size() > 1024 || pass->get_ref<const std::string&>().size() > 16384)
    return Invalid("auth must be {\"username\": ..., \"password\": ...} (strings)");
  return std::optional(storage::RegistryLogin{user->get<std::string>(), pass->get<std::string>()});
}

}  // namespace

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
  auto login = ParseLogin(body);
  if (!login.ok()) return login.error();
  request.login = std::move(*login);
  return request;
}

Result<storage::PushRequest> ParsePushRequest(const json& body, const std::string& default_registry) {
  storage::PushRequest request;
  auto image = body.find("image");
  if (image == body.end() || !image->is_string() || image->get_ref<const std::string&>().empty())
    return Invalid("image (the stored image to push: a name or a reference) is required");
  request.image = image->get<std::string>();
  auto target = body.find("target");
  if (target == body.end() || !target->is_string())
    return Invalid("target (where to push: REGISTRY/REPOSITORY[:TAG]) is required");
  auto ref = storage::ParseImageRef(target->get<std::string>(), default_registry);
  if (!ref.ok()) return ref.error();
  request.target = std::move(*ref);
  auto login = ParseLogin(body);
  if (!login.ok()) return login.error();
  request.login = std::move(*login);
  return request;
}

asio::awaitable<Result<json>> RunTransfer(asio::thread_pool& pool, const Transfer& transfer, const LineWriter& on_line) {
  auto executor = co_await asio::this_coro::executor;
  auto run = std::make_shared<TransferRun>(executor);
  asio::post(pool, [run, transfer] {
    auto listener = [&](const json& event) { run->Post(DumpJson(event) + "\n"); };
    Result<json> result = [&]() -> Result<json> {
      try {
        return transfer(listener);
      } catch (const std::exception& e) {
        return MakeError(ErrorCode::kInternal, std::string("image transfer failed: ") + e.what());
      }
    }();
    run->Post({}, std::move(result));
  });
  bool listening = true;
  for (;;) {
    std::deque<std::string> lines;
    std::optional<Result<json>> result;
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
  // (meta.json files read, and every image's for a reference: on the pool, not the io thread)
  Result<core::ImageInfo> image = co_await RunBlocking(pool, [&] { return manager.FindImage(named, spec.tenant); });
  const bool is_reference = storage::IsRegistryReference(named) || !manager.config().registry.default_registry.empty();
  if (is_reference && (policy == "always" || (policy == "missing" && !image.ok() && image.error().code == ErrorCode::kNotFound))) {
    const json pull_body = {{"image", named}};
    auto request = ParsePullRequest(pull_body, manager.config().registry.default_registry);
    if (!request.ok()) co_return request.error();
    request->tenant = spec.tenant;
    const Transfer pull = [&manager, request = *request](const storage::PullListener& listener) -> Result<json> {
      auto pulled = manager.PullImage(request, listener);
      if (!pulled.ok()) return pulled.error();
      return json();
    };
    const LineWriter ignore = [](const std::string&) -> asio::awaitable<bool> { co_return false; };
    Result<json> pulled = co_await RunTransfer(pool, pull, ignore);
    if (!pulled.ok()) co_return pulled.error();
    image = co_await RunBlocking(pool, [&] { return manager.FindImage(named, spec.tenant); });
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
