// A command's stdin: what was received for it waits in a buffer in front of the nonblocking
// pipe (or pty) fd until the command takes it. Used by Session and BackgroundProcess.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/unique_fd.h"
#include "init/command_limits.h"
#include "init/poller.h"

namespace bulkhead::init {

class StdinFeeder {
 public:
  explicit StdinFeeder(Poller& poller, UniqueFd fd = {});
  StdinFeeder(const StdinFeeder&) = delete;
  StdinFeeder& operator=(const StdinFeeder&) = delete;

  void Open(UniqueFd fd) { fd_.fd = std::move(fd); }
  bool open() const { return fd_.fd.valid(); }
  // Open and not asked to close: Append takes data.
  bool accepting() const { return open() && !close_requested_; }
  // Bytes received and not yet taken by the command.
  size_t pending() const { return pending_.size() - written_; }
  // The buffer is full: whoever feeds it stops reading until it drains.
  bool full() const { return pending() >= kStdinLimit; }

  // Queues `data` and writes what the fd takes now; dropped unless accepting().
  void Append(std::string_view data);
  // Closes the fd once everything queued was written.
  void RequestClose();
  // Writes what the fd takes now (on EPOLLOUT). If the command closed its stdin, the fd is
  // closed and what it did not take is dropped.
  void WriteNow();
  // Closes the fd and drops what is queued.
  void Close();
  // Watches the fd for EPOLLOUT while something is queued.
  void Watch(uint64_t token);

 private:
  Poller& poller_;
  PolledFd fd_;
  std::string pending_;  // received, not yet taken by the fd
  size_t written_ = 0;   // bytes at the front of pending_ already written
  bool close_requested_ = false;
};

}  // namespace bulkhead::init
