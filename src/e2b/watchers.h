// The watchers of envd's CreateWatcher / GetWatcherEvents / RemoveWatcher (the Python sync
// SDK's watch_dir): a watch that outlives the request that made it, whose events are kept
// until polled. Each runs a watch file operation in its sandbox on the executor it was
// started on. A watcher ends on RemoveWatcher, when its sandbox is gone (its operation's
// connection to init breaks and the sandbox no longer exists), and when nobody polled it for
// kIdleLimit. Its buffer keeps the newest kMaxEvents events: older ones are dropped (and the
// drop is logged).
#pragma once
#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <nlohmann/json.hpp>

#include "common/result.h"
#include "core/file_operation.h"
#include "core/sandbox_manager.h"
#include "e2b/entry_info.h"

namespace bulkhead::e2b {

// envd's FilesystemEvent ({"name": path relative to the watched directory, "type":
// "EVENT_TYPE_…"}) for one line of a watch operation ({"type": "create", "path": "/abs"}),
// or nullopt for a line that is not an event. With `accounts`, the line's "entry" (includeEntry)
// becomes the event's EntryInfo.
std::optional<nlohmann::json> FilesystemEventOf(const nlohmann::json& line, std::string_view watched_dir,
                                                const Accounts* accounts = nullptr);

// Splits a watch operation's output into lines: appends `piece` to `pending` and answers the
// complete lines in it (without their newlines), leaving the unfinished rest in `pending`.
std::vector<std::string> TakeLines(std::string& pending, std::string_view piece);

// Events waiting to be polled: the newest `capacity` of them.
class EventBuffer {
 public:
  explicit EventBuffer(size_t capacity) : capacity_(capacity) {}
  void Push(nlohmann::json event);
  // Everything buffered, oldest first; the buffer is then empty.
  std::vector<nlohmann::json> Take();
  // Events dropped since the last Take (the buffer was full).
  uint64_t dropped() const { return dropped_; }
  size_t size() const { return events_.size(); }

 private:
  size_t capacity_;
  std::deque<nlohmann::json> events_;
  uint64_t dropped_ = 0;
};

class WatcherRegistry : public std::enable_shared_from_this<WatcherRegistry> {
 public:
  static constexpr size_t kMaxEvents = 10000;
  static constexpr std::chrono::minutes kIdleLimit{10};
  static constexpr size_t kMaxPerSandbox = 64;
  static constexpr size_t kMaxWatchers = 1024;

  struct Watcher;

  // Takes over a watch of `watched_dir` that reported ready (`pending`: what it wrote after
  // that) and runs it on `executor` (where `operation` was started); `accounts` name the owners
  // of the entries its events carry (includeEntry). Answers the watcher's id;
  // 429 (kTooMany) when the sandbox (or the daemon) has too many.
  Result<std::string> Add(core::SandboxManager& manager, boost::asio::any_io_executor executor,
                          const std::string& sandbox_id, const std::string& watched_dir,
                          std::unique_ptr<core::FileOperation> operation, std::string pending,
                          std::optional<Accounts> accounts);
  // The events since the last poll (FilesystemEvent JSON). not_found for an id this sandbox
  // does not have; the watch's error once it failed (the watcher is then gone).
  Result<std::vector<nlohmann::json>> Poll(const std::string& sandbox_id, const std::string& id);
  // not_found for an id this sandbox does not have.
  Status Remove(const std::string& sandbox_id, const std::string& id);
  size_t size() const;

 private:
  std::shared_ptr<Watcher> Find(const std::string& sandbox_id, const std::string& id) const;
  void Forget(const std::string& id);
  static void Stop(const std::shared_ptr<Watcher>& watcher);

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Watcher>> watchers_;
};

}  // namespace bulkhead::e2b
