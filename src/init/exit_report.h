// The kExit payload (ctl_protocol.h), shared by foreground commands and background processes.
#pragma once
#include <time.h>

#include <nlohmann/json.hpp>
#include <string>

namespace bulkhead::init {

timespec MonotonicNow();

// {"exit_code", "signal", "timed_out", "duration_ms"} from a waitpid() status.
nlohmann::json ExitReport(int wait_status, bool timed_out, const timespec& started, const timespec& exited);

// JSON text for a frame; invalid UTF-8 (a path in a message) is replaced rather than thrown about.
std::string DumpJson(const nlohmann::json& value);

}  // namespace bulkhead::init
