#include "e2b/watchers.h"

#include <sys/random.h>

#include <functional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/bounded_json.h"
#include "e2b/envd_fs.h"
#include "e2b/envd_paths.h"
#include "service/file_output.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::e2b {

namespace asio = boost::asio;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// A watch event line names one path; more than this without a newline is a broken worker.
constexpr size_t kMaxEventLineBytes = 64 * 1024;
// How often a watcher looks whether it was polled lately.
constexpr std::chrono::seconds kIdleCheck{30};

std::string NewWatcherId() {
  unsigned char bytes[8];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string id = "w";
  for (unsigned char b : bytes) id += fmt::format("{:02x}", b);
  return id;
}

}  // namespace

std::optional<json> FilesystemEventOf(const json& line, std::string_view watched_dir, const Accounts* accounts) {
  if (!line.is_object()) return std::nullopt;
  const auto type = line.find("type");
  const auto path = line.find("path");
  if (type == line.end() || !type->is_string() || path == line.end() || !path->is_string()) return std::nullopt;
  const std::string& kind = type->get_ref<const std::string&>();
  std::string event_type;
  if (kind == "create") event_type = "EVENT_TYPE_CREATE";
  if (kind == "write") event_type = "EVENT_TYPE_WRITE";
  if (kind == "remove") event_type = "EVENT_TYPE_REMOVE";
  if (kind == "rename") event_type = "EVENT_TYPE_RENAME";
  if (kind == "chmod") event_type = "EVENT_TYPE_CHMOD";
  if (event_type.empty()) return std::nullopt;
  json event = {{"name", RelativeTo(watched_dir, path->get_ref<const std::string&>())}, {"type", event_type}};
  if (auto entry = line.find("entry"); accounts && entry != line.end()) {
    if (Result<json> info = EntryInfoJson(*entry, *accounts); info.ok()) event["entry"] = std::move(*info);
  }
  return event;
}

std::vector<std::string> TakeLines(std::string& pending, std::string_view piece) {
  pending.append(piece);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = pending.find('\n', start)) != std::string::npos; start = end + 1) {
    if (end > start) lines.emplace_back(pending, start, end - start);
  }
  pending.erase(0, start);
  return lines;
}

void EventBuffer::Push(json event) {
  if (events_.size() >= capacity_) {
    events_.pop_front();
    ++dropped_;
  }
  events_.push_back(std::move(event));
}

std::vector<json> EventBuffer::Take() {
  std::vector<json> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  dropped_ = 0;
  return out;
}

struct WatcherRegistry::Watcher {
  explicit Watcher(asio::any_io_executor e) : executor(std::move(e)) {}

  std::string id;
  std::string sandbox_id;
  std::string watched_dir;
  std::optional<Accounts> accounts;  // includeEntry: who owns what
  // On the executor only. Both live in the watcher's coroutines (so they go with the
  // io_context's handlers when the daemon stops, never after it).
  core::FileOperation* operation = nullptr;  // while the watch runs
  asio::steady_timer* idle_timer = nullptr;  // while the idle check runs
  // Under the mutex.
  std::mutex mutex;
  // Where the watch runs, while its coroutine exists: released with it, so the registry
  // never holds an executor past the io_context (the daemon stopping destroys that first).
  std::optional<asio::any_io_executor> executor;
  EventBuffer events{kMaxEvents};
  std::optional<Error> failure;  // the watch failed (its operation's error)
  bool removed = false;          // forgotten by the registry: the watch is being stopped
  Clock::time_point last_poll = Clock::now();
};

namespace {

using Watcher = WatcherRegistry::Watcher;

// Releases the watcher's executor when the coroutine that holds it (as a parameter, so from
// its creation) is destroyed.
class ExecutorLease {
 public:
  explicit ExecutorLease(std::shared_ptr<Watcher> watcher) : watcher_(std::move(watcher)) {}
  ExecutorLease(ExecutorLease&& other) noexcept : watcher_(std::move(other.watcher_)) {}
  ExecutorLease& operator=(ExecutorLease&&) = delete;
  ~ExecutorLease() {
    if (!watcher_) return;
    std::lock_guard lock(watcher_->mutex);
    watcher_->executor.reset();
  }

 private:
  std::shared_ptr<Watcher> watcher_;
};

// Until the watcher is removed: forgets it once nobody polled it for the idle limit, or
// once its sandbox is gone (deleted while its watch had already ended, say).
asio::awaitable<void> ExpireWhenIdle(std::shared_ptr<Watcher> watcher, core::SandboxManager& manager,
                                     std::function<void()> forget) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  watcher->idle_timer = &timer;
  for (;;) {
    timer.expires_after(kIdleCheck);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    bool idle = false;
    {
      std::lock_guard lock(watcher->mutex);
      if (watcher->removed) {
        watcher->idle_timer = nullptr;
        co_return;
      }
      idle = Clock::now() - watcher->last_poll >= WatcherRegistry::kIdleLimit;
    }
    Result<core::SandboxInfo> sandbox = manager.Get(watcher->sandbox_id);
    if (!sandbox.ok()) {
      watcher->idle_timer = nullptr;
      forget();
      co_return;
    }
    if (idle) {
      watcher->idle_timer = nullptr;
      spdlog::info("e2b: watcher {} of sandbox {} was not polled for {} min: removed", watcher->id,
                   watcher->sandbox_id, WatcherRegistry::kIdleLimit.count());
      forget();
      co_return;
    }
  }
}

// Reads the watch's events into the watcher's buffer until the watch ends.
asio::awaitable<void> Pump(std::shared_ptr<Watcher> watcher, core::SandboxManager& manager,
                           std::unique_ptr<core::FileOperation> operation, std::string pending,
                           std::function<void()> forget, ExecutorLease lease) {
  (void)lease;
  watcher->operation = operation.get();
  asio::co_spawn(co_await asio::this_coro::executor, ExpireWhenIdle(watcher, manager, forget), asio::detached);
  std::string rest;
  auto deliver = [&](std::string_view piece) {
    for (const std::string& text : TakeLines(rest, piece)) {
      const json line = ParseBoundedJson(text);
      std::optional<json> event =
          FilesystemEventOf(line, watcher->watched_dir, watcher->accounts ? &*watcher->accounts : nullptr);
      if (!event) continue;
      std::lock_guard lock(watcher->mutex);
      const bool dropping = watcher->events.dropped() == 0 && watcher->events.size() >= WatcherRegistry::kMaxEvents;
      watcher->events.Push(std::move(*event));
      if (dropping) {
        spdlog::warn("e2b: watcher {} of sandbox {} holds {} unpolled events: dropping the oldest", watcher->id,
                     watcher->sandbox_id, WatcherRegistry::kMaxEvents);
      }
    }
  };
  deliver(pending);
  std::optional<Error> failure;
  for (;;) {
    if (rest.size() > kMaxEventLineBytes) {
      failure = api::FileWorkerBroken("sent an overlong watch event");
      break;
    }
    Result<std::string> piece = co_await operation->Read();
    if (!piece.ok()) {
      failure = piece.error();
      break;
    }
    if (piece->empty()) break;  // the watched directory itself went away: no more events
    deliver(*piece);
  }
  watcher->operation = nullptr;
  {
    std::lock_guard lock(watcher->mutex);
    if (watcher->removed) co_return;
    watcher->failure = std::move(failure);
  }
  // A watch whose sandbox is gone ends with it.
  Result<core::SandboxInfo> sandbox = manager.Get(watcher->sandbox_id);
  if (!sandbox.ok() || sandbox->state == "error") forget();
}

}  // namespace

void WatcherRegistry::Stop(const std::shared_ptr<Watcher>& watcher) {
  {
    std::lock_guard lock(watcher->mutex);
    watcher->removed = true;
  }
  // The operation lives on the watcher's executor: stopped there (unless it is gone already).
  std::optional<asio::any_io_executor> executor;
  {
    std::lock_guard lock(watcher->mutex);
    executor = watcher->executor;
  }
  if (!executor) return;
  asio::post(*executor, [watcher] {
    if (watcher->operation) watcher->operation->Cancel();
    if (watcher->idle_timer) watcher->idle_timer->cancel();
  });
}

void WatcherRegistry::Forget(const std::string& id) {
  std::shared_ptr<Watcher> watcher;
  {
    std::lock_guard lock(mutex_);
    const auto found = watchers_.find(id);
    if (found == watchers_.end()) return;
    watcher = found->second;
    watchers_.erase(found);
  }
  Stop(watcher);
}

std::shared_ptr<WatcherRegistry::Watcher> WatcherRegistry::Find(const std::string& sandbox_id,
                                                                 const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto found = watchers_.find(id);
  if (found == watchers_.end() || found->second->sandbox_id != sandbox_id) return nullptr;
  return found->second;
}

size_t WatcherRegistry::size() const {
  std::lock_guard lock(mutex_);
  return watchers_.size();
}

Result<std::string> WatcherRegistry::Add(core::SandboxManager& manager, asio::any_io_executor executor,
                                         const std::string& sandbox_id, const std::string& watched_dir,
                                         std::unique_ptr<core::FileOperation> operation, std::string pending,
                                         std::optional<Accounts> accounts) {
  auto watcher = std::make_shared<Watcher>(executor);
  watcher->sandbox_id = sandbox_id;
  watcher->watched_dir = watched_dir;
  watcher->accounts = std::move(accounts);
  {
    std::lock_guard lock(mutex_);
    size_t of_sandbox = 0;
    for (const auto& [id, other] : watchers_) of_sandbox += other->sandbox_id == sandbox_id ? 1 : 0;
    if (of_sandbox >= kMaxPerSandbox || watchers_.size() >= kMaxWatchers) {
      return MakeError(ErrorCode::kTooMany, fmt::format("this sandbox has {} watchers (the most it may have): remove "
                                                        "one first (RemoveWatcher)",
                                                        of_sandbox));
    }
    do {
      watcher->id = NewWatcherId();
    } while (watchers_.contains(watcher->id));
    watchers_.emplace(watcher->id, watcher);
  }
  // The coroutines hold the registry weakly through `forget`: a daemon shutting down may
  // destroy the registry first.
  std::weak_ptr<WatcherRegistry> weak = weak_from_this();
  std::function<void()> forget = [weak, id = watcher->id, watcher_weak = std::weak_ptr<Watcher>(watcher)] {
    if (auto registry = weak.lock()) {
      registry->Forget(id);
    } else if (auto still = watcher_weak.lock()) {
      Stop(still);
    }
  };
  asio::co_spawn(executor,
                 Pump(watcher, manager, std::move(operation), std::move(pending), forget, ExecutorLease(watcher)),
                 asio::detached);
  return watcher->id;
}

Result<std::vector<json>> WatcherRegistry::Poll(const std::string& sandbox_id, const std::string& id) {
  std::shared_ptr<Watcher> watcher = Find(sandbox_id, id);
  if (!watcher) return MakeError(ErrorCode::kNotFound, fmt::format("watcher with id {} not found", id), "not_found");
  std::vector<json> events;
  std::optional<Error> failure;
  {
    std::lock_guard lock(watcher->mutex);
    watcher->last_poll = Clock::now();
    if (watcher->events.dropped() > 0) {
      spdlog::warn("e2b: watcher {} of sandbox {} dropped {} events that were not polled in time", id, sandbox_id,
                   watcher->events.dropped());
    }
    events = watcher->events.Take();
    if (events.empty()) failure = watcher->failure;
  }
  if (failure) {
    Forget(id);
    return *failure;
  }
  return events;
}

Status WatcherRegistry::Remove(const std::string& sandbox_id, const std::string& id) {
  if (!Find(sandbox_id, id)) {
    return MakeError(ErrorCode::kNotFound, fmt::format("watcher with id {} not found", id), "not_found");
  }
  Forget(id);
  return {};
}

}  // namespace bulkhead::e2b
