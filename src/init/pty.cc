#include "init/pty.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace bulkhead::init {
namespace {

Error PtyError(const std::string& what) { return MakeError(ErrorCode::kInternal, what + ": " + std::strerror(errno)); }

}  // namespace

Result<PtyPair> OpenPty(PtySize size, uid_t owner) {
  PtyPair pty;
  pty.master.reset(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
  if (!pty.master) return PtyError("posix_openpt");
  if (::grantpt(pty.master.get()) != 0) return PtyError("grantpt");
  if (::unlockpt(pty.master.get()) != 0) return PtyError("unlockpt");
  // TIOCGPTPEER opens the slave through the master, so no path lookup can reach another
  // devpts; the name is the fallback for kernels without it.
  pty.slave.reset(::ioctl(pty.master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!pty.slave) {
    char name[64];
    if (::ptsname_r(pty.master.get(), name, sizeof(name)) != 0) return PtyError("ptsname");
    pty.slave.reset(::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!pty.slave) return PtyError(std::string("open ") + name);
  }
  // Programs that reopen their terminal by name (ssh, script, sudo) need to own it. Best effort.
  int ignored = ::fchown(pty.slave.get(), owner, gid_t(-1));
  (void)ignored;
  SetPtySize(pty.master.get(), size);
  return pty;
}

void SetPtySize(int master_fd, PtySize size) {
  winsize ws{};
  ws.ws_col = size.cols;
  ws.ws_row = size.rows;
  ::ioctl(master_fd, TIOCSWINSZ, &ws);
}

char PtyEofChar(int master_fd) {
  termios attrs;
  // On a master, TCGETS reads the slave's settings.
  if (::tcgetattr(master_fd, &attrs) == 0 && attrs.c_cc[VEOF] != _POSIX_VDISABLE) return char(attrs.c_cc[VEOF]);
  return '\x04';
}

}  // namespace bulkhead::init
