// A thin epoll wrapper that remembers what each fd is registered for, so interest can be
// recomputed after every event without redundant system calls.
#pragma once
#include <sys/epoll.h>

#include <cstdint>

#include "common/unique_fd.h"

namespace bulkhead::init {

// An fd together with what epoll currently watches it for.
struct PolledFd {
  UniqueFd fd;
  uint32_t events = 0;
  bool registered = false;
};

// Makes `timer` (a timerfd, created on first use) fire once after `milliseconds`; re-arming
// replaces a pending expiration.
void ArmTimer(PolledFd& timer, uint64_t milliseconds);

class Poller {
 public:
  Poller();
  bool ok() const { return epoll_fd_.valid(); }

  // Makes epoll report `events` on `target` under `token`. With no events the fd is taken out
  // of epoll (a pipe whose writer is gone would otherwise report EPOLLHUP forever while we do
  // not want to read it), unless `report_hangup`: then epoll still wakes us for
  // EPOLLHUP/EPOLLERR, which is how a paused connection notices that its peer left.
  void Watch(PolledFd& target, uint64_t token, uint32_t events, bool report_hangup = false);

  // Takes the fd out of epoll and closes it.
  void Close(PolledFd& target);

  // epoll_wait; returns the number of events, 0 on EINTR.
  int Wait(epoll_event* events, int max_events);

 private:
  UniqueFd epoll_fd_;
};

}  // namespace bulkhead::init
