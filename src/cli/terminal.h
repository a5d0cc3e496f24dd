// This machine's terminal for `bulkhead shell`: its size, raw mode that is always undone,
// and writes that cope with a descriptor someone made non-blocking.
#pragma once
#include <termios.h>

#include <optional>
#include <string_view>

#include "common/result.h"

namespace bulkhead::cli {

struct TerminalSize {
  int cols = 80;
  int rows = 24;
};

// The window size of the terminal on `fd`; nullopt when `fd` is not a terminal.
std::optional<TerminalSize> QueryTerminalSize(int fd);

// Puts the terminal on `fd` in raw mode (bytes pass through unchanged: no echo, no line
// editing, Ctrl-C is a byte for the remote side) and restores the saved settings when
// destroyed. Does nothing when `fd` is not a terminal.
class RawTerminalMode {
 public:
  explicit RawTerminalMode(int fd);
  ~RawTerminalMode();
  RawTerminalMode(const RawTerminalMode&) = delete;
  RawTerminalMode& operator=(const RawTerminalMode&) = delete;

  // Whether raw mode is on (fd is a terminal and the settings took).
  bool active() const { return saved_.has_value(); }

 private:
  int fd_;
  std::optional<termios> saved_;
};

// Restores a descriptor's file status flags (O_NONBLOCK...) when destroyed: asio makes
// the descriptors it polls non-blocking, and a terminal's stdin, stdout and stderr often
// share one open file description with the shell that started us.
class FileStatusFlagsGuard {
 public:
  explicit FileStatusFlagsGuard(int fd);
  ~FileStatusFlagsGuard();
  FileStatusFlagsGuard(const FileStatusFlagsGuard&) = delete;
  FileStatusFlagsGuard& operator=(const FileStatusFlagsGuard&) = delete;

 private:
  int fd_;
  int flags_;
};

// WriteAll that waits (poll) instead of failing when `fd` is non-blocking and full.
Status WriteAllWaiting(int fd, std::string_view bytes);

}  // namespace bulkhead::cli
