#include "runtime/memory_watch.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <spdlog/spdlog.h>

namespace bulkhead::runtime {
namespace {

// How often a sandbox that stays out of memory is asked to reclaim before the kernel's OOM
// killer gets it back (it then ends the whole sandbox), and how long the rescue waits for its
// memory to fall back under the limit.
constexpr int kReclaimAttempts = 5;
constexpr auto kBackUnderLimit = std::chrono::seconds(2);

}  // namespace

MemoryWatch::MemoryWatch(Cgroups& cgroups)
    : cgroups_(cgroups), epoll_(::epoll_create1(EPOLL_CLOEXEC)), stop_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  epoll_event stop{.events = EPOLLIN, .data = {.fd = stop_.get()}};
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, stop_.get(), &stop);
  thread_ = std::thread([this] { Loop(); });
}

MemoryWatch::~MemoryWatch() {
  const uint64_t one = 1;
  (void)!::write(stop_.get(), &one, sizeof one);
  thread_.join();
}

void MemoryWatch::SetReclaim(Reclaim reclaim) {
  std::lock_guard lock(mu_);
  reclaim_ = std::move(reclaim);
}

Status MemoryWatch::Watch(const std::string& id, int64_t limit_bytes) {
  auto event = cgroups_.OomEvents(id, limit_bytes);
  if (!event) return event.error();
  std::lock_guard lock(mu_);
  if (auto old = watched_.find(id); old != watched_.end()) {
    ids_.erase(old->second.event.get());
    watched_.erase(old);  // closing the eventfd ends its registration
  }
  const int fd = event->get();
  epoll_event interest{.events = static_cast<uint32_t>(cgroups_.v2() ? EPOLLPRI : EPOLLIN), .data = {.fd = fd}};
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &interest) != 0) return SystemError("epoll_ctl", errno);
  ids_[fd] = id;
  watched_[id] = {std::move(*event), limit_bytes};
  return {};
}

void MemoryWatch::Forget(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = watched_.find(id);
  if (it == watched_.end()) return;
  ids_.erase(it->second.event.get());
  watched_.erase(it);
}

void MemoryWatch::Loop() {
  epoll_event events[16];
  for (;;) {
    const int n = ::epoll_wait(epoll_.get(), events, 16, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    for (int i = 0; i < n; i++) {
      const int fd = events[i].data.fd;
      if (fd == stop_.get()) return;
      std::string id;
      {
        std::lock_guard lock(mu_);
        auto it = ids_.find(fd);
        if (it == ids_.end()) continue;  // forgotten meanwhile
        id = it->second;
        uint64_t count = 0;
        if (!cgroups_.v2()) (void)!::read(fd, &count, sizeof count);
      }
      Handle(id);
    }
  }
}

void MemoryWatch::Handle(const std::string& id) {
  Reclaim reclaim;
  int64_t limit = 0;
  {
    std::lock_guard lock(mu_);
    auto it = watched_.find(id);
    if (it == watched_.end()) return;
    reclaim = reclaim_;
    limit = it->second.limit_bytes;
  }
  for (int attempt = 0; attempt < kReclaimAttempts && cgroups_.OutOfMemory(id); attempt++) {
    // v1: its tasks wait in the kernel; room for the Sentry to run init while it reclaims.
    if (!cgroups_.v2()) (void)cgroups_.SetMemoryBytes(id, limit + kRescueBytes);
    const bool freed = reclaim && reclaim(id);
    if (!cgroups_.v2()) {
      const auto deadline = std::chrono::steady_clock::now() + kBackUnderLimit;
      while (!cgroups_.SetMemoryBytes(id, limit) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    spdlog::info("sandbox {}: out of memory; {}", id, freed ? "its largest process was killed" : "nothing to kill");
    if (!freed) break;
  }
  if (cgroups_.OutOfMemory(id)) {
    spdlog::warn("sandbox {}: still out of memory; the kernel's OOM killer takes over", id);
    (void)cgroups_.SetMemoryBytes(id, limit);
    (void)cgroups_.EnableOomKiller(id);
  }
}

}  // namespace bulkhead::runtime
