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

class Poller;

// A listener that ran out of descriptors (or memory) to accept with stops being watched for a
// moment instead of spinning on epoll: its pending connections stay ready. Other processes of
// the sandbox may free descriptors (under gVisor every host descriptor of the Sentry is the
// whole sandbox's), so accepting resumes after a pause, not only when a connection ends.
class AcceptBackoff {
 public:
  static constexpr uint64_t kPauseMs = 100;
  // Creates and watches the timer now: once descriptors run out there is none for it.
  void Start(Poller& poller, uint64_t timer_token);
  // After accept4 failed with `error`: true (and paused) if it was for want of resources.
  bool Pause(int error);
  // Pauses for kPauseMs whatever the reason (a dial the daemon did not take).
  void PauseAnyway();
  void Resume() { paused_ = false; }
  // The timer's event: reads it and resumes.
  void OnTimer();
  bool paused() const { return paused_; }

 private:
  PolledFd timer_;
  bool paused_ = false;
};

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
