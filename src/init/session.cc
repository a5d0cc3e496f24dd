#include "init/session.h"

#include <poll.h>
#include <signal.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>


#include "common/ctl_protocol.h"
#include "init/command_limits.h"
#include "init/exec_request.h"
#include "init/exit_report.h"
#include "init/guest_boot.h"
#include "init/out_of_memory.h"
#include "init/pty.h"
#include "init/self_contain.h"
#include "init/spawn.h"

namespace bulkhead::init {

Session::Session(uint64_t id, UniqueFd socket, Poller& poller, ProcessTable& processes, SudoServer& sudo)
    : id_(id), poller_(poller), processes_(processes), sudo_(sudo), stdin_(poller), stdout_(poller), stderr_(poller) {
  socket_.fd = std::move(socket);
  UpdateInterest();
}

Session::~Session() {
  KillCommand();
  poller_.Close(socket_);
  stdin_.Close();
  stdout_.Close();
  stderr_.Close();
  poller_.Close(timer_);
}

void Session::KillCommand() {
  if (kill_on_close_) ::kill(-pid_, SIGKILL);
}

void Session::OnEvent(SessionFd which, uint32_t events) {
  if (state_ == State::kFinished) return;
  switch (which) {
    case SessionFd::kSocket:
      // The peer left (or the socket broke): before kExit this kills the command (destructor).
      if (events & (EPOLLHUP | EPOLLERR)) {
        // Frames an attach client sent just before it left still apply (a signal, the last
        // stdin): read what is buffered first. Bounded: the peer can send no more.
        for (int reads = 0; state_ == State::kAttached && reads < 64; ++reads) {
          if (in_.Read(socket_.fd.get()) != IncomingFrames::ReadResult::kData) break;
          HandleBufferedFrames();
        }
        state_ = State::kFinished;
        return;
      }
      if (events & EPOLLIN) ReadFrames();
      break;
    case SessionFd::kStdout:
    case SessionFd::kStderr: ReadOutput(which); break;
    case SessionFd::kStdin: stdin_.WriteNow(); break;
    case SessionFd::kTimer: OnTimer(); break;
  }
  SendPending();
  PumpAttachment();
  UpdateInterest();
}

void Session::OnProcessesChanged() {
  if (state_ != State::kAttached) return;
  HandleBufferedFrames();  // frames held back while the process's stdin buffer was full
  SendPending();
  PumpAttachment();
  UpdateInterest();
}

bool Session::OnChildExit(pid_t pid, int wait_status) {
  if (pid != pid_ || exited_) return false;
  exited_ = true;
  wait_status_ = wait_status;
  exited_at_ = MonotonicNow();
  if (state_ != State::kRunning) return true;

  // Nobody is left to read stdin.
  stdin_.Close();

  stdout_.OnCommandExit();
  stderr_.OnCommandExit();
  if (stdout_.open() || stderr_.open()) ArmTimer(timer_, kOutputGraceMs);
  FinishIfDone();
  SendPending();
  UpdateInterest();
  return true;
}

void Session::SetSudoUsers(std::string_view payload) {
  auto users = ctl::DecodeSudoUsers(payload);
  if (!users.ok()) return FailWith(users.error());
  if (!sudo_.Allow(std::move(users->users))) return FailWith(MakeError(ErrorCode::kInternal, "no sudo socket (see init's stderr)"));
  out_.Append(ctl::kResult, "{}");
  state_ = State::kClosing;
}

void Session::SetLimits(std::string_view payload) {
  auto limits = ctl::DecodeLimits(payload);
  if (!limits.ok()) return FailWith(limits.error());
  if (auto st = init::SetLimits(*limits); !st) return FailWith(st.error());
  out_.Append(ctl::kResult, "{}");
  state_ = State::kClosing;
}

void Session::Freeze(std::string_view payload) {
  auto request = ctl::DecodeFreeze(payload);
  if (!request.ok()) return FailWith(request.error());
  // init answers nothing else meanwhile (at most a second): what it serves is being stopped.
  auto settled = FreezeWorkload(request->frozen);
  if (!settled.ok()) return FailWith(settled.error());
  if (request->realtime_ns > 0 || !request->entropy.empty()) {
    if (auto set = SetGuestClock(request->realtime_ns, request->entropy); !set.ok()) return FailWith(set.error());
  }
  out_.Append(ctl::kResult, ctl::Encode(ctl::FrozenMessage{*settled}));
  state_ = State::kClosing;
}

void Session::LookAtIdleSocket() {
  pollfd look{.fd = socket_.fd.get(), .events = POLLIN | POLLRDHUP, .revents = 0};
  if (::poll(&look, 1, 0) == 1) OnEvent(SessionFd::kSocket, static_cast<uint32_t>(look.revents));
}

void Session::ReadFrames() {
  switch (in_.Read(socket_.fd.get())) {
    case IncomingFrames::ReadResult::kClosed: state_ = State::kFinished; return;
    case IncomingFrames::ReadResult::kWouldBlock: return;
    case IncomingFrames::ReadResult::kData: break;
  }
  HandleBufferedFrames();
}

bool Session::TakesFrames() const {
  switch (state_) {
    case State::kAwaitingFirstFrame:
    case State::kPinging:
    case State::kRunning: return true;
    case State::kAttached: return attachment_->TakesFrames() && out_.size() < kOutgoingLimit;
    default: return false;
  }
}

void Session::HandleBufferedFrames() {
  while (TakesFrames()) {
    IncomingFrames::Frame frame;
    auto next = in_.Next(&frame);
    if (next == IncomingFrames::NextResult::kNeedMore) break;
    if (next == IncomingFrames::NextResult::kMalformed) {
      FailWith(MakeError(ErrorCode::kInvalid, "malformed frame: length out of range"));
      break;
    }
    HandleFrame(frame.type, frame.payload);
  }
}

void Session::HandleFrame(uint8_t type, std::string_view payload) {
  switch (state_) {
    case State::kAwaitingFirstFrame:
      if (type == ctl::kPing) {
        out_.Append(ctl::kPong, {});
        state_ = State::kPinging;
      } else if (type == ctl::kExec) {
        StartCommand(payload);
      } else if (type == ctl::kProcList) {
        out_.Append(ctl::kResult, ctl::Encode(processes_.List()));
        state_ = State::kClosing;
      } else if (type == ctl::kProcAttach) {
        StartAttach(payload);
      } else if (type == ctl::kSudoUsers) {
        SetSudoUsers(payload);
      } else if (type == ctl::kLimits) {
        SetLimits(payload);
      } else if (type == ctl::kFreeze) {
        Freeze(payload);
      } else if (type == ctl::kReclaim) {
        const std::vector<Killed> killed = KillLargestProcesses(1);
        ctl::ReclaimedMessage answer;
        if (!killed.empty()) answer = {killed[0].pid, killed[0].resident_bytes};
        out_.Append(ctl::kResult, ctl::Encode(answer));
        state_ = State::kClosing;
      } else {
        FailWith(MakeError(ErrorCode::kInvalid,
                           "the first frame must be exec, proc_list, proc_attach, sudo_users, limits, reclaim, freeze or ping"));
      }
      return;
    case State::kPinging:
      if (type == ctl::kPing) {
        out_.Append(ctl::kPong, {});
      } else {
        FailWith(MakeError(ErrorCode::kInvalid, "only pings may follow a ping"));
      }
      return;
    case State::kRunning:
      if (type == ctl::kStdin) {
        // Stdin sent after the command exited, after kStdinClose or with "stdin": false is dropped.
        stdin_.Append(payload);
      } else if (type == ctl::kStdinClose) {
        if (pty_) {
          // A terminal's end of input is its EOF character; closing the master would hang it up.
          char eof = PtyEofChar(pty_.get());
          HandleFrame(ctl::kStdin, std::string_view(&eof, 1));
          return;
        }
        stdin_.RequestClose();
      } else if (type == ctl::kResize) {
        auto size = ctl::DecodePtySize(payload);
        if (!size.ok()) {
          FailWith(size.error());
        } else if (pty_) {
          SetPtySize(pty_.get(), *size);
        }
      } else if (type == ctl::kSignal) {
        auto signal = ctl::DecodeSignal(payload);
        if (!signal.ok()) {
          FailWith(signal.error());
        } else if (!exited_) {
          ::kill(-pid_, signal->signal);
        }
      } else {
        FailWith(MakeError(ErrorCode::kInvalid, "unexpected frame type " + std::to_string(type)));
      }
      return;
    case State::kAttached:
      if (auto applied = attachment_->HandleFrame(type, payload, out_); !applied.ok()) FailWith(applied.error());
      return;
    case State::kClosing:
    case State::kFinished: return;
  }
}

void Session::StartCommand(std::string_view payload) {
  auto request = ctl::DecodeExec(payload);
  if (!request.ok()) return FailWith(request.error());
  if (request->background) return StartBackground(*request);
  started_at_ = MonotonicNow();
  auto command = SpawnCommand(*request);
  if (!command.ok()) return FailWith(command.error());

  pid_ = command->pid;
  kill_on_close_ = true;
  state_ = State::kRunning;
  stdin_.Open(std::move(command->stdin_fd));
  stdout_.Open(std::move(command->stdout_fd));
  stderr_.Open(std::move(command->stderr_fd));
  pty_ = std::move(command->pty_fd);
  output_limit_ = request->output_limit;
  out_.Append(ctl::kStarted, ctl::Encode(ctl::StartedMessage{pid_, std::nullopt}));
  if (request->timeout_ms > 0) ArmTimer(timer_, request->timeout_ms);
  if (pty_ && !request->stdin_enabled) {
    // The terminal is its stdin regardless; "stdin": false then means input ends at once.
    char eof = PtyEofChar(pty_.get());
    stdin_.Append(std::string_view(&eof, 1));
    stdin_.RequestClose();
  }
}

void Session::StartBackground(const ExecRequest& request) {
  auto process = processes_.Start(request);
  if (!process.ok()) return FailWith(process.error());
  out_.Append(ctl::kStarted, ctl::Encode(ctl::StartedMessage{(*process)->pid(), (*process)->Info()}));
  if (request.attach) {
    // The connection follows the new process from its first byte, which it cannot miss.
    AttachRequest attach;
    attach.pid = (*process)->pid();
    attach.output = attach.follow = attach.hold = true;
    attachment_ = std::make_unique<Attachment>(std::move(*process), attach, out_);
    state_ = State::kAttached;
    return;
  }
  state_ = State::kClosing;  // the process is the table's now; this connection is done
}

void Session::StartAttach(std::string_view payload) {
  auto request = ctl::DecodeAttach(payload);
  if (!request.ok()) return FailWith(request.error());
  auto process = processes_.Find(request->pid);
  if (!process) return FailWith(MakeError(ErrorCode::kNotFound, "no process " + std::to_string(request->pid)));
  attachment_ = std::make_unique<Attachment>(std::move(process), *request, out_);
  state_ = State::kAttached;
}

void Session::PumpAttachment() {
  while (state_ == State::kAttached) {
    size_t queued = out_.size();
    attachment_->Pump(out_);
    if (attachment_->finished()) state_ = State::kClosing;
    if (out_.size() == queued) break;  // caught up, or no room until the socket takes more
    SendPending();
    if (!out_.empty()) break;  // the socket is full: EPOLLOUT resumes
  }
}

void Session::ReadOutput(SessionFd which) {
  if (state_ != State::kRunning) return;
  bool is_stdout = which == SessionFd::kStdout;
  uint64_t& forwarded = forwarded_[is_stdout ? 0 : 1];
  (is_stdout ? stdout_ : stderr_).ReadWith([&](int fd, size_t max) -> ssize_t {
    // Past the daemon's limit (and the one byte that tells it there was more), output is read
    // and dropped here, on the sandbox's CPU, instead of crossing to the daemon to be dropped.
    if (output_limit_ && forwarded > *output_limit_) {
      static char discarded[kOutputChunk];
      return ::read(fd, discarded, std::min(max, sizeof discarded));
    }
    if (output_limit_) max = size_t(std::min<uint64_t>(max, *output_limit_ + 1 - forwarded));
    ssize_t n = out_.AppendReadFrom(fd, is_stdout ? ctl::kStdout : ctl::kStderr, max);
    if (n > 0) forwarded += uint64_t(n);
    return n;
  });
  FinishIfDone();
}

void Session::OnTimer() {
  uint64_t expirations;
  if (::read(timer_.fd.get(), &expirations, sizeof(expirations)) != sizeof(expirations)) return;
  if (state_ != State::kRunning) return;
  if (!exited_) {
    timed_out_ = true;
    ::kill(-pid_, SIGKILL);
    return;
  }
  // The grace period after exit is over: something still holds the pipes open. Deliver what
  // the command had written, then stop reading; the descendant keeps running.
  stdout_.EndGrace();
  stderr_.EndGrace();
  FinishIfDone();
}

void Session::FinishIfDone() {
  if (state_ != State::kRunning || !exited_ || stdout_.open() || stderr_.open()) return;
  out_.Append(ctl::kExit, ctl::Encode(ExitReport(wait_status_, timed_out_, started_at_, exited_at_)));
  kill_on_close_ = false;
  poller_.Close(timer_);
  state_ = State::kClosing;
}

void Session::FailWith(const Error& error) {
  KillCommand();
  kill_on_close_ = false;
  stdin_.Close();
  stdout_.Close();
  stderr_.Close();
  poller_.Close(timer_);
  out_.Append(ctl::kError, ctl::Encode(ctl::ErrorMessage{ctl::WordOf(error.code), error.message}));
  state_ = State::kClosing;
}

void Session::SendPending() {
  if (state_ == State::kFinished) return;
  if (!out_.empty() && !out_.SendTo(socket_.fd.get())) {
    state_ = State::kFinished;
    return;
  }
  if (state_ == State::kClosing && out_.empty()) state_ = State::kFinished;
}

void Session::UpdateInterest() {
  if (state_ == State::kFinished) return;
  bool read_socket = false;
  switch (state_) {
    case State::kAwaitingFirstFrame:
    case State::kPinging: read_socket = out_.size() < kOutgoingLimit; break;  // pongs pile up otherwise
    case State::kRunning: read_socket = !stdin_.full(); break;
    case State::kAttached: read_socket = TakesFrames(); break;
    default: break;
  }
  constexpr uint32_t kIn = EPOLLIN, kOut = EPOLLOUT;
  uint32_t socket_events = (read_socket ? kIn : 0) | (out_.empty() ? 0 : kOut);
  poller_.Watch(socket_, Token(id_, SessionFd::kSocket), socket_events, /*report_hangup=*/true);

  bool room_for_output = out_.size() + ctl::kHeaderSize + kOutputChunk <= kOutgoingLimit;
  stdout_.Watch(Token(id_, SessionFd::kStdout), room_for_output ? kIn : 0);
  stderr_.Watch(Token(id_, SessionFd::kStderr), room_for_output ? kIn : 0);
  stdin_.Watch(Token(id_, SessionFd::kStdin));
  poller_.Watch(timer_, Token(id_, SessionFd::kTimer), EPOLLIN);
}

}  // namespace bulkhead::init
