#include "init/output_pipe.h"

#include <errno.h>
#include <sys/ioctl.h>

namespace bulkhead::init {

OutputPipe::OutputPipe(Poller& poller, UniqueFd fd) : poller_(poller) { fd_.fd = std::move(fd); }

void OutputPipe::AfterRead(ssize_t n) {
  if (n > 0) {
    owed_ -= std::min(owed_, size_t(n));
    if (grace_over_ && owed_ == 0) Close();
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    Close();  // EOF (EIO on a pty master): every writer is gone
  }
}

void OutputPipe::OnCommandExit() {
  int bytes = 0;
  if (!fd_.fd || ::ioctl(fd_.fd.get(), FIONREAD, &bytes) != 0 || bytes < 0) bytes = 0;
  owed_ = size_t(bytes);
}

void OutputPipe::EndGrace() {
  grace_over_ = true;
  if (owed_ == 0) Close();
}

}  // namespace bulkhead::init
