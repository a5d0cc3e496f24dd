#include "init/stdin_feeder.h"

#include <errno.h>
#include <unistd.h>

namespace bulkhead::init {

StdinFeeder::StdinFeeder(Poller& poller, UniqueFd fd) : poller_(poller) { fd_.fd = std::move(fd); }

void StdinFeeder::Append(std::string_view data) {
  if (!accepting()) return;
  if (written_ > 0) {
    pending_.erase(0, written_);
    written_ = 0;
  }
  pending_.append(data);
  WriteNow();
}

void StdinFeeder::RequestClose() {
  close_requested_ = true;
  WriteNow();
}

void StdinFeeder::WriteNow() {
  while (fd_.fd && written_ < pending_.size()) {
    ssize_t n = ::write(fd_.fd.get(), pending_.data() + written_, pending_.size() - written_);
    if (n > 0) {
      written_ += size_t(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      break;
    } else {
      poller_.Close(fd_);  // the command closed its stdin: what it did not take is dropped
    }
  }
  if (written_ == pending_.size() || !fd_.fd) {
    pending_.clear();
    written_ = 0;
  }
  if (fd_.fd && close_requested_ && pending_.empty()) poller_.Close(fd_);
}

void StdinFeeder::Close() {
  poller_.Close(fd_);
  pending_.clear();
  written_ = 0;
}

void StdinFeeder::Watch(uint64_t token) { poller_.Watch(fd_, token, pending() > 0 ? uint32_t(EPOLLOUT) : 0); }

}  // namespace bulkhead::init
