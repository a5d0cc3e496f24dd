// `bulkhead run` owns its sandbox: when the user interrupts it (Ctrl-C = SIGINT, SIGTERM,
// SIGHUP) the sandbox is removed before the process ends with 128 + the signal.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/result.h"

namespace bulkhead::cli {

class RunInterruptGuard {
 public:
  // `remove_sandbox` deletes a sandbox by id; it runs on the guard's own thread when a
  // signal arrives, or on the caller's in RemoveSandbox().
  explicit RunInterruptGuard(std::function<void(const std::string& id)> remove_sandbox);

  // Blocks the signals in the calling thread and starts a thread that waits for them.
  // Call before any other thread exists, so none of them receives the signals instead.
  Status Start();

  // The sandbox now exists. If a signal arrived while it was being created, it is
  // removed here and the exit code to end with is returned.
  std::optional<int> SandboxCreated(const std::string& id);

  // Removes the sandbox on the normal way out. A signal arriving meanwhile waits for
  // this to finish rather than removing it twice.
  void RemoveSandbox();

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the detached signal thread
};

}  // namespace bulkhead::cli
