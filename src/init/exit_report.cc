#include "init/exit_report.h"

#include <sys/wait.h>

namespace bulkhead::init {

timespec MonotonicNow() {
  timespec now;
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return now;
}

ctl::ExitMessage ExitReport(int wait_status, bool timed_out, const timespec& started, const timespec& exited) {
  ctl::ExitMessage exit;
  exit.timed_out = timed_out;
  exit.duration_ms = double(exited.tv_sec - started.tv_sec) * 1e3 + double(exited.tv_nsec - started.tv_nsec) / 1e6;
  if (WIFEXITED(wait_status)) exit.exit_code = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) exit.signal = WTERMSIG(wait_status);
  return exit;
}

}  // namespace bulkhead::init
