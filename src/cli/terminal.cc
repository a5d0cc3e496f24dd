#include "cli/terminal.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>

#include "client/exec_stream.h"

namespace bulkhead::cli {

std::optional<TerminalSize> QueryTerminalSize(int fd) {
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) != 0) return std::nullopt;
  // A terminal that reports no size (some serial consoles) gets the classic one.
  TerminalSize terminal;
  if (size.ws_col > 0) terminal.cols = size.ws_col;
  if (size.ws_row > 0) terminal.rows = size.ws_row;
  return terminal;
}

RawTerminalMode::RawTerminalMode(int fd) : fd_(fd) {
  termios current{};
  if (!::isatty(fd) || ::tcgetattr(fd, &current) != 0) return;
  termios raw = current;
  ::cfmakeraw(&raw);
  if (::tcsetattr(fd, TCSANOW, &raw) != 0) return;
  saved_ = current;
}

RawTerminalMode::~RawTerminalMode() {
  // TCSADRAIN: what was written before (the remote shell's last output) is shown first.
  if (saved_) ::tcsetattr(fd_, TCSADRAIN, &*saved_);
}

FileStatusFlagsGuard::FileStatusFlagsGuard(int fd) : fd_(fd), flags_(::fcntl(fd, F_GETFL)) {}

FileStatusFlagsGuard::~FileStatusFlagsGuard() {
  if (flags_ >= 0) ::fcntl(fd_, F_SETFL, flags_);
}

Status WriteAllWaiting(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd writable{fd, POLLOUT, 0};
        ::poll(&writable, 1, -1);
        continue;
      }
      if (errno == EPIPE) return MakeError(ErrorCode::kInternal, "output closed", std::string(kOutputClosed));
      return SystemError("writing output", errno);
    }
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return {};
}

}  // namespace bulkhead::cli
