// The kExit message (ctl_messages.h), shared by foreground commands and background processes.
#pragma once
#include <time.h>

#include "common/ctl_messages.h"

namespace bulkhead::init {

timespec MonotonicNow();

// How the command ended, from a waitpid() status.
ctl::ExitMessage ExitReport(int wait_status, bool timed_out, const timespec& started, const timespec& exited);

}  // namespace bulkhead::init
