#include "init/poller.h"

#include <errno.h>
#include <sys/timerfd.h>
#include <unistd.h>

namespace bulkhead::init {

void ArmTimer(PolledFd& timer, uint64_t milliseconds) {
  if (!timer.fd) timer.fd.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer.fd) return;
  itimerspec spec{};
  spec.it_value.tv_sec = time_t(milliseconds / 1000);
  spec.it_value.tv_nsec = long(milliseconds % 1000) * 1000000L;
  ::timerfd_settime(timer.fd.get(), 0, &spec, nullptr);
}

void AcceptBackoff::Start(Poller& poller, uint64_t timer_token) {
  ArmTimer(timer_, 0);
  poller.Watch(timer_, timer_token, EPOLLIN);
}

bool AcceptBackoff::Pause(int error) {
  if (error != EMFILE && error != ENFILE && error != ENOBUFS && error != ENOMEM) return false;
  paused_ = true;
  ArmTimer(timer_, kPauseMs);
  return true;
}

void AcceptBackoff::PauseAnyway() {
  paused_ = true;
  ArmTimer(timer_, kPauseMs);
}

void AcceptBackoff::OnTimer() {
  uint64_t expirations;
  (void)!::read(timer_.fd.get(), &expirations, sizeof expirations);
  paused_ = false;
}

Poller::Poller() : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)) {}

void Poller::Watch(PolledFd& target, uint64_t token, uint32_t events, bool report_hangup) {
  if (!target.fd) return;
  bool want_registered = events != 0 || report_hangup;
  if (!want_registered) {
    if (target.registered) ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, target.fd.get(), nullptr);
    target.registered = false;
    target.events = 0;
    return;
  }
  if (target.registered && target.events == events) return;
  epoll_event event{};
  event.events = events;
  event.data.u64 = token;
  int op = target.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
  if (::epoll_ctl(epoll_fd_.get(), op, target.fd.get(), &event) == 0) {
    target.registered = true;
    target.events = events;
  }
}

void Poller::Close(PolledFd& target) {
  if (target.registered) ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, target.fd.get(), nullptr);
  target.registered = false;
  target.events = 0;
  target.fd.reset();
}

int Poller::Wait(epoll_event* events, int max_events) {
  int n = ::epoll_wait(epoll_fd_.get(), events, max_events, -1);
  return n < 0 ? 0 : n;
}

}  // namespace bulkhead::init
