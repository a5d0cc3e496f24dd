// One control connection and the command it runs (ctl_protocol.h): reads frames, starts the
// command, streams its output with bounded buffers, and reports how it ended.
#pragma once
#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/unique_fd.h"
#include "init/attachment.h"
#include "init/exec_request.h"
#include "init/frame_buffer.h"
#include "init/output_pipe.h"
#include "init/poller.h"
#include "init/process_table.h"
#include "init/stdin_feeder.h"
#include "init/sudo_server.h"

namespace bulkhead::init {

// Which of a session's fds an epoll event is for; the low byte of the event's token.
enum class SessionFd : uint8_t { kSocket = 1, kStdin, kStdout, kStderr, kTimer };

class Session {
 public:
  // `id` must be unique for the life of init: it tells stale epoll events apart. Background
  // processes, listing and attaching go to `processes`; kSudoUsers to `sudo`.
  Session(uint64_t id, UniqueFd socket, Poller& poller, ProcessTable& processes, SudoServer& sudo);
  // Kills the command's process group unless kExit was already queued.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  static uint64_t Token(uint64_t id, SessionFd which) { return (id << 8) | uint64_t(which); }
  static uint64_t IdOf(uint64_t token) { return token >> 8; }
  static SessionFd FdOf(uint64_t token) { return SessionFd(token & 0xff); }

  void OnEvent(SessionFd which, uint32_t events);
  // Returns true if `pid` is this session's command (which then counts as exited).
  bool OnChildExit(pid_t pid, int wait_status);
  // SIGKILLs the command's process group if it may still be running.
  void KillCommand();
  // Something happened to a background process: an attached connection may send more.
  void OnProcessesChanged();
  // The connection is done (closed, or its last frame sent): destroy the session.
  bool finished() const { return state_ == State::kFinished; }
  // Nothing received yet: a connection init dialed still waits for the daemon's request.
  bool idle() const { return state_ == State::kAwaitingFirstFrame && in_.buffered() == 0; }
  // An idle connection's own look at its socket (poll, not epoll): one the host cut without
  // a wake-up (gVisor's restore of a checkpoint) ends.
  void LookAtIdleSocket();

 private:
  enum class State {
    kAwaitingFirstFrame,  // nothing received yet
    kPinging,             // answered a ping; more pings may follow
    kRunning,             // the command started; kExit not sent yet
    kAttached,            // attached to a background process (kProcAttach)
    kClosing,             // the last frame is queued; close once it is sent
    kFinished,
  };

  void ReadFrames();
  // Hands out the frames received so far, while the state takes them.
  void HandleBufferedFrames();
  bool TakesFrames() const;
  void HandleFrame(uint8_t type, std::string_view payload);
  void StartCommand(std::string_view payload);
  void StartBackground(const ExecRequest& request);
  void StartAttach(std::string_view payload);
  void SetSudoUsers(std::string_view payload);
  void SetLimits(std::string_view payload);
  // kFreeze: stops or resumes the workload (init/self_contain.h), answers whether it settled.
  void Freeze(std::string_view payload);
  // Moves the attached process's output into the outgoing buffer while the socket takes it.
  void PumpAttachment();
  void ReadOutput(SessionFd which);
  void OnTimer();
  void FinishIfDone();
  // Queues kError as the last frame; the command, if any, is killed.
  void FailWith(const Error& error);
  void SendPending();
  void UpdateInterest();

  uint64_t id_;
  Poller& poller_;
  ProcessTable& processes_;
  SudoServer& sudo_;
  std::unique_ptr<Attachment> attachment_;  // in kAttached
  State state_ = State::kAwaitingFirstFrame;
  PolledFd socket_;
  OutgoingFrames out_;
  IncomingFrames in_;

  // The command, once started.
  pid_t pid_ = -1;  // also its process group id
  bool kill_on_close_ = false;  // true from start until kExit is queued
  bool exited_ = false;
  int wait_status_ = 0;
  bool timed_out_ = false;
  timespec started_at_{};
  timespec exited_at_{};
  StdinFeeder stdin_;
  OutputPipe stdout_, stderr_;
  std::optional<uint64_t> output_limit_;  // per stream, as the request gave it
  uint64_t forwarded_[2] = {0, 0};        // stdout, stderr bytes queued for the daemon
  PolledFd timer_;
  UniqueFd pty_;  // the terminal's master, when the command runs on one; not polled
};

}  // namespace bulkhead::init
