#include "cli/run_interrupt.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <system_error>
#include <thread>

namespace bulkhead::cli {

struct RunInterruptGuard::State {
  std::function<void(const std::string&)> remove_sandbox;
  std::atomic<int> signals_seen{0};
  std::mutex mutex;        // guards the fields below; held while removing
  std::string sandbox_id;  // empty while being created
  bool removed = false;
  int pending_signal = 0;  // a signal that came before the sandbox existed
};

namespace {

sigset_t InterruptSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

void WriteStderr(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::char_traits<char>::length(text));
  (void)ignored;
}

}  // namespace

RunInterruptGuard::RunInterruptGuard(std::function<void(const std::string& id)> remove_sandbox)
    : state_(std::make_shared<State>()) {
  state_->remove_sandbox = std::move(remove_sandbox);
}

Status RunInterruptGuard::Start() {
  sigset_t set = InterruptSignals();
  if (int err = pthread_sigmask(SIG_BLOCK, &set, nullptr); err != 0) return SystemError("pthread_sigmask", err);
  try {
    std::thread([state = state_, set] {
      for (;;) {
        int signal_number = 0;
        if (sigwait(&set, &signal_number) != 0) continue;
        // A second signal means "now": the user gave up waiting for the cleanup.
        if (state->signals_seen.fetch_add(1) > 0) _exit(128 + signal_number);
        std::lock_guard lock(state->mutex);
        if (state->sandbox_id.empty()) {
          WriteStderr("bulkhead: interrupted; the sandbox is removed once created (again to quit now)\n");
          state->pending_signal = signal_number;
          continue;
        }
        if (!state->removed) {
          state->remove_sandbox(state->sandbox_id);
          state->removed = true;
        }
        _exit(128 + signal_number);
      }
    }).detach();
  } catch (const std::system_error& e) {
    return MakeError(ErrorCode::kInternal, std::string("starting the signal thread: ") + e.what());
  }
  return {};
}

std::optional<int> RunInterruptGuard::SandboxCreated(const std::string& id) {
  std::lock_guard lock(state_->mutex);
  state_->sandbox_id = id;
  if (state_->pending_signal == 0) return std::nullopt;
  state_->remove_sandbox(id);
  state_->removed = true;
  return 128 + state_->pending_signal;
}

void RunInterruptGuard::RemoveSandbox() {
  std::lock_guard lock(state_->mutex);
  if (state_->removed || state_->sandbox_id.empty()) return;
  state_->remove_sandbox(state_->sandbox_id);
  state_->removed = true;
}

}  // namespace bulkhead::cli
