// One process of init's process table (ctl_protocol.h, "background"): it outlives the
// connection that started it. Its output is read as it comes, whoever listens, into its
// OutputRing; stdin comes from attached connections through a bounded buffer.
#pragma once
#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/unique_fd.h"
#include "init/command_limits.h"
#include "init/exec_request.h"
#include "init/output_pipe.h"
#include "init/output_ring.h"
#include "init/poller.h"
#include "init/spawn.h"
#include "init/stdin_feeder.h"

namespace bulkhead::init {

// Which of a process's fds an epoll event is for; the low byte of the event's token.
enum class ProcessFd : uint8_t { kStdin = 1, kStdout, kStderr, kTimer };

class BackgroundProcess {
 public:
  // `command` was spawned from `request` at `started` (CLOCK_MONOTONIC and CLOCK_REALTIME).
  // `token_base` | ProcessFd is the epoll token of each of its fds.
  BackgroundProcess(uint64_t token_base, Poller& poller, SpawnedCommand command, const ExecRequest& request,
                    const timespec& started, const timespec& started_real);
  // Stops reading (the process itself is left alone).
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Reaped, and its output read to the end (or to the grace limit): nothing more will change.
  bool done() const { return exited_ && !stdout_.open() && !stderr_.open(); }
  const OutputRing& output() const { return ring_; }
  // For init's budget of all output (ctl::kOutputBudgetBytes): drops the ring's oldest chunk
  // unless a holder was not sent all of it. The bytes dropped; 0 when none may go.
  size_t ShedOutput();

  void OnEvent(ProcessFd which);
  // Returns true if `pid` is this process, not reaped before.
  bool OnChildExit(pid_t pid, int wait_status);

  // Queued for its stdin; dropped once stdin was closed or the process exited.
  void WriteStdin(std::string_view data);
  // Closes its stdin once what is queued was written; on a pty, writes the terminal's EOF
  // character instead (the terminal stays usable).
  void CloseStdin();
  // The stdin buffer is full: attached connections stop taking frames until it drains.
  bool stdin_full() const { return stdin_.full(); }
  // To the process group, while the process runs.
  void Signal(int signal);
  // Ignored without a pty.
  void Resize(PtySize size);
  // Stops reading its output and writing its stdin (it is being forgotten).
  void Close();

  // A follower that must not miss output (kProcAttach "hold"): while one lags kHoldBytes
  // behind what was read, the output is not read (the process blocks writing it), so the
  // ring never drops what a holder was not sent. HolderMoved after its cursor advanced.
  static constexpr uint64_t kHoldBytes = ctl::kProcessRingBytes / 4;
  void AddHolder(const OutputRing::Cursor* cursor);
  void RemoveHolder(const OutputRing::Cursor* cursor);
  void HolderMoved() { UpdateInterest(); }

  // Process (json) of ctl_protocol.h.
  ctl::ProcessInfo Info() const;
  // The kExit payload; once done().
  ctl::ExitMessage Exit() const;

 private:
  void ReadOutput(ProcessFd which);
  void OnTimer();
  void UpdateInterest();

  uint64_t token_base_;
  Poller& poller_;
  pid_t pid_;  // also its process group id
  std::vector<std::string> cmd_;
  std::optional<std::string> tag_;
  std::optional<PtySize> pty_size_;
  UniqueFd pty_;  // the terminal's master while the process runs; not polled
  timespec started_at_, started_at_real_;
  timespec exited_at_{}, exited_at_real_{};
  bool exited_ = false;  // reaped
  int wait_status_ = 0;
  bool timed_out_ = false;

  StdinFeeder stdin_;
  OutputPipe stdout_, stderr_;
  PolledFd timer_;

  OutputRing ring_;
  std::vector<const OutputRing::Cursor*> holders_;
};

}  // namespace bulkhead::init
