// Pseudo-terminals for commands run with "pty" (ctl_protocol.h). Init keeps the master; the
// command gets the slave as its controlling terminal and as stdin, stdout and stderr.
#pragma once
#include <sys/types.h>

#include "common/result.h"
#include "common/unique_fd.h"
#include "init/exec_request.h"

namespace bulkhead::init {

struct PtyPair {
  UniqueFd master;  // nonblocking, close-on-exec
  UniqueFd slave;   // close-on-exec; the child makes it its controlling terminal
};

// Opens a new pair in the sandbox's devpts (/dev/ptmx), sized `size`, the slave owned by
// `owner` as login(1) would leave it.
Result<PtyPair> OpenPty(PtySize size, uid_t owner);

// TIOCSWINSZ: the foreground process group gets SIGWINCH.
void SetPtySize(int master_fd, PtySize size);

// The terminal's end-of-file character (VEOF, normally ^D): what init writes for kStdinClose,
// since closing the master would hang the terminal up instead.
char PtyEofChar(int master_fd);

}  // namespace bulkhead::init
