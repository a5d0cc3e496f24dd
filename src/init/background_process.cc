#include "init/background_process.h"

#include <signal.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "init/exit_report.h"
#include "init/pty.h"
#include "common/time_format.h"

namespace bulkhead::init {
namespace {

timespec RealtimeNow() {
  timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  return now;
}

// Output is read into this, then copied into a ring; init is single-threaded.
char read_buffer[kOutputChunk];

}  // namespace

BackgroundProcess::BackgroundProcess(uint64_t token_base, Poller& poller, SpawnedCommand command,
                                     const ExecRequest& request, const timespec& started, const timespec& started_real)
    : token_base_(token_base),
      poller_(poller),
      pid_(command.pid),
      cmd_(request.argv),
      tag_(request.tag),
      pty_size_(request.pty),
      pty_(std::move(command.pty_fd)),
      started_at_(started),
      started_at_real_(started_real),
      stdin_(poller, std::move(command.stdin_fd)),
      stdout_(poller, std::move(command.stdout_fd)),
      stderr_(poller, std::move(command.stderr_fd)) {
  if (request.timeout_ms > 0) ArmTimer(timer_, request.timeout_ms);
  UpdateInterest();
}

BackgroundProcess::~BackgroundProcess() { Close(); }

void BackgroundProcess::Close() {
  stdin_.Close();
  stdout_.Close();
  stderr_.Close();
  poller_.Close(timer_);
  pty_.reset();
}

void BackgroundProcess::OnEvent(ProcessFd which) {
  switch (which) {
    case ProcessFd::kStdout:
    case ProcessFd::kStderr: ReadOutput(which); break;
    case ProcessFd::kStdin: stdin_.WriteNow(); break;
    case ProcessFd::kTimer: OnTimer(); break;
  }
  UpdateInterest();
}

bool BackgroundProcess::OnChildExit(pid_t pid, int wait_status) {
  if (pid != pid_ || exited_) return false;
  exited_ = true;
  wait_status_ = wait_status;
  exited_at_ = MonotonicNow();
  exited_at_real_ = RealtimeNow();

  // Nobody is left to read stdin.
  stdin_.Close();

  stdout_.OnCommandExit();
  stderr_.OnCommandExit();
  if (stdout_.open() || stderr_.open()) ArmTimer(timer_, kOutputGraceMs);
  UpdateInterest();
  return true;
}

size_t BackgroundProcess::ShedOutput() {
  for (const OutputRing::Cursor* holder : holders_) {
    if (holder->chunk <= ring_.first_chunk()) return 0;
  }
  size_t dropped = ring_.DropOldestChunk();
  if (dropped > 0) UpdateInterest();  // a holder's lag is counted from what it was sent
  return dropped;
}

void BackgroundProcess::AddHolder(const OutputRing::Cursor* cursor) {
  holders_.push_back(cursor);
  UpdateInterest();
}

void BackgroundProcess::RemoveHolder(const OutputRing::Cursor* cursor) {
  std::erase(holders_, cursor);
  UpdateInterest();
}

void BackgroundProcess::ReadOutput(ProcessFd which) {
  bool is_stdout = which == ProcessFd::kStdout;
  (is_stdout ? stdout_ : stderr_).ReadWith([&](int fd, size_t max) {
    ssize_t n = ::read(fd, read_buffer, max);
    if (n > 0) ring_.Append(is_stdout ? kStdoutStream : kStderrStream, std::string_view(read_buffer, size_t(n)));
    return n;
  });
}

void BackgroundProcess::WriteStdin(std::string_view data) {
  if (!stdin_.accepting()) return;
  stdin_.Append(data);
  UpdateInterest();
}

void BackgroundProcess::CloseStdin() {
  if (!stdin_.accepting()) return;
  if (pty_) {
    char eof = PtyEofChar(pty_.get());
    WriteStdin(std::string_view(&eof, 1));
    return;
  }
  stdin_.RequestClose();
  UpdateInterest();
}

void BackgroundProcess::Signal(int signal) {
  if (!exited_) ::kill(-pid_, signal);
}

void BackgroundProcess::Resize(PtySize size) {
  if (!pty_) return;
  SetPtySize(pty_.get(), size);
  pty_size_ = size;
}

void BackgroundProcess::OnTimer() {
  uint64_t expirations;
  if (::read(timer_.fd.get(), &expirations, sizeof(expirations)) != sizeof(expirations)) return;
  if (!exited_) {
    timed_out_ = true;
    ::kill(-pid_, SIGKILL);
    return;
  }
  // The grace period after exit is over: something still holds the output open. Keep what
  // the process had written, then stop reading; the descendant keeps running.
  stdout_.EndGrace();
  stderr_.EndGrace();
}

void BackgroundProcess::UpdateInterest() {
  if (done()) {
    poller_.Close(timer_);
    pty_.reset();  // a finished process keeps its output, not its terminal
  }
  constexpr uint32_t kIn = EPOLLIN;
  auto token = [this](ProcessFd which) { return token_base_ | uint64_t(which); };
  // Output is read unless a holder lags too far behind: the ring, not the readers, decides
  // what is kept, except that nothing a holder was not sent is dropped.
  bool held = false;
  for (const OutputRing::Cursor* holder : holders_) {
    const uint64_t lag = (ring_.total(kStdoutStream) - holder->offset[kStdoutStream]) +
                         (ring_.total(kStderrStream) - holder->offset[kStderrStream]);
    if (lag >= kHoldBytes) held = true;
  }
  stdout_.Watch(token(ProcessFd::kStdout), held ? 0 : kIn);
  stderr_.Watch(token(ProcessFd::kStderr), held ? 0 : kIn);
  stdin_.Watch(token(ProcessFd::kStdin));
  poller_.Watch(timer_, token(ProcessFd::kTimer), kIn);
}

ctl::ProcessInfo BackgroundProcess::Info() const {
  const bool finished = done();
  ctl::ProcessInfo p;
  p.pid = pid_;
  p.tag = tag_;
  p.cmd = cmd_;
  p.exited = finished;
  p.started_at = Rfc3339Millis(started_at_real_);
  if (finished) p.exited_at = Rfc3339Millis(exited_at_real_);
  p.pty = pty_size_;
  p.stdout_offset = ring_.total(kStdoutStream);
  p.stderr_offset = ring_.total(kStderrStream);
  p.stdout_start = ring_.start(kStdoutStream);
  p.stderr_start = ring_.start(kStderrStream);
  if (finished && WIFEXITED(wait_status_)) p.exit_code = WEXITSTATUS(wait_status_);
  if (finished && WIFSIGNALED(wait_status_)) p.signal = WTERMSIG(wait_status_);
  return p;
}

ctl::ExitMessage BackgroundProcess::Exit() const { return ExitReport(wait_status_, timed_out_, started_at_, exited_at_); }

}  // namespace bulkhead::init
