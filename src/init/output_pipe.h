// One output stream of a command (stdout, stderr, or a pty's master), read until every writer
// is gone. After the command exited, a descendant may keep the pipe open forever: the bytes
// that were in the pipe at the exit are still delivered, then, once the grace period is over,
// the pipe is given up. Used by Session and BackgroundProcess.
#pragma once
#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/unique_fd.h"
#include "init/command_limits.h"
#include "init/poller.h"

namespace bulkhead::init {

class OutputPipe {
 public:
  explicit OutputPipe(Poller& poller, UniqueFd fd = {});
  OutputPipe(const OutputPipe&) = delete;
  OutputPipe& operator=(const OutputPipe&) = delete;

  void Open(UniqueFd fd) { fd_.fd = std::move(fd); }
  bool open() const { return fd_.fd.valid(); }

  // Reads once, at most kOutputChunk (after the grace period, at most what is still owed),
  // through `read(fd, max)`, which stores what it reads and returns what read(2) returns.
  // Closes the pipe at its end.
  template <typename Read>
  void ReadWith(Read&& read) {
    if (!fd_.fd) return;
    size_t max = grace_over_ ? std::min(kOutputChunk, owed_) : kOutputChunk;
    ssize_t n = max == 0 ? 0 : read(fd_.fd.get(), max);
    AfterRead(n);
  }

  // The command exited: the bytes in the pipe now are owed.
  void OnCommandExit();
  // The grace period after the exit is over: read only what is still owed, then close.
  void EndGrace();
  void Close() { poller_.Close(fd_); }
  void Watch(uint64_t token, uint32_t events) { poller_.Watch(fd_, token, events); }

 private:
  // `n` is what the read returned; errno is still its errno.
  void AfterRead(ssize_t n);

  Poller& poller_;
  PolledFd fd_;
  bool grace_over_ = false;
  size_t owed_ = 0;  // set at the command's exit
};

}  // namespace bulkhead::init
