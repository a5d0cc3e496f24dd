#include "init/exit_report.h"

#include <sys/wait.h>

#include <cmath>

namespace bulkhead::init {

timespec MonotonicNow() {
  timespec now;
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return now;
}

nlohmann::json ExitReport(int wait_status, bool timed_out, const timespec& started, const timespec& exited) {
  double ms = double(exited.tv_sec - started.tv_sec) * 1e3 + double(exited.tv_nsec - started.tv_nsec) / 1e6;
  nlohmann::json exit = {{"exit_code", nullptr},
                         {"signal", nullptr},
                         {"timed_out", timed_out},
                         {"duration_ms", std::round(ms * 1000) / 1000}};
  if (WIFEXITED(wait_status)) exit["exit_code"] = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) exit["signal"] = WTERMSIG(wait_status);
  return exit;
}

std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace bulkhead::init
