// Test helpers for running bulkhead-init for real: the binary built next to unit-tests,
// started with a listening socket on fd 3 as the native runtime does, and a client that
// speaks ctl_protocol.h to it.
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "common/ctl_protocol.h"
#include "common/read_file.h"
#include "common/unique_fd.h"

namespace bulkhead::init_testing {

using Clock = std::chrono::steady_clock;

struct Frame {
  uint8_t type;
  std::string payload;
};

inline std::filesystem::path InitBinary() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path() / "bulkhead-init";
}

// True once `pid` is gone or a zombie: it no longer runs.
inline bool ProcessGone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::string text = ReadSmallFile("/proc/" + std::to_string(pid) + "/stat").value_or("");
  size_t paren = text.rfind(')');
  return paren == std::string::npos || (paren + 2 < text.size() && text[paren + 2] == 'Z');
}

inline bool WaitUntilGone(pid_t pid, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (ProcessGone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ProcessGone(pid);
}

// Resident memory of a process, in KiB.
inline long RssKib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

class Client {
 public:
  // A connection made otherwise (one init dialed: runtime/init_listener.h).
  explicit Client(UniqueFd connected) : fd_(std::move(connected)), connected_(fd_.valid()) {}
  explicit Client(const std::string& path) {
    fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    connected_ = ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  bool connected() const { return connected_; }

  void SendRaw(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_.get(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += size_t(n);
    }
  }
  void Send(uint8_t type, const std::string& payload = {}) {
    uint8_t header[ctl::kHeaderSize];
    ctl::EncodeHeader(header, type, uint32_t(payload.size()));
    SendRaw(std::string(reinterpret_cast<char*>(header), sizeof(header)) + payload);
  }

  // The next frame, or nothing on EOF or after `timeout` without one.
  std::optional<Frame> Read(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    uint8_t header[ctl::kHeaderSize];
    if (!ReadExactly(header, sizeof(header), timeout)) return std::nullopt;
    int64_t len = ctl::DecodePayloadLength(header);
    if (len < 0) return std::nullopt;
    Frame frame{header[4], std::string(size_t(len), '\0')};
    if (len > 0 && !ReadExactly(frame.payload.data(), size_t(len), timeout)) return std::nullopt;
    return frame;
  }

  void Close() { fd_.reset(); }
  // Unblocks a thread stuck in Send.
  void Shutdown() { ::shutdown(fd_.get(), SHUT_RDWR); }

 private:
  bool ReadExactly(void* buf, size_t size, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    size_t got = 0;
    while (got < size) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd pfd{fd_.get(), POLLIN, 0};
      if (left <= 0 || ::poll(&pfd, 1, int(left)) <= 0) return false;
      ssize_t n = ::recv(fd_.get(), static_cast<char*>(buf) + got, size - got, 0);
      if (n <= 0) return false;
      got += size_t(n);
    }
    return true;
  }

  UniqueFd fd_;
  bool connected_ = false;
};

// bulkhead-init as a child of the test, listening on <dir>/ctl.sock. Not PID 1 here, so it
// runs as a child subreaper.
class RunningInit {
 public:
  // Empty on success, else what went wrong. A `leaked_fd` >= 0 is left open (on /dev/null) in
  // init, as a descriptor leaked into it that no command may see.
  std::string Start(const std::string& dir, int leaked_fd = -1) {
    socket_path_ = dir + "/ctl.sock";
    std::filesystem::path binary = InitBinary();
    if (!std::filesystem::exists(binary)) return binary.string() + " is not built";
    UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket_path_.c_str());
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener.get(), 64) != 0) {
      return "cannot listen on " + socket_path_;
    }
    pid_ = ::fork();
    if (pid_ < 0) return "fork failed";
    if (pid_ == 0) {
      int null_fd = ::open("/dev/null", O_RDWR);
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
      if (leaked_fd >= 0) ::dup2(null_fd, leaked_fd);
      if (listener.get() == ctl::kListenFd) {
        ::fcntl(ctl::kListenFd, F_SETFD, 0);
      } else {
        ::dup2(listener.get(), ctl::kListenFd);
      }
      std::string path = binary.string();
      char* argv[] = {const_cast<char*>("bulkhead-init"), nullptr};
      ::execv(path.c_str(), argv);
      ::_exit(127);
    }
    // Ready once it answers: a SIGTERM before its signal setup would simply kill it.
    Client client(socket_path_);
    client.Send(ctl::kPing);
    auto pong = client.Read();
    if (!pong || pong->type != ctl::kPong) return "bulkhead-init did not answer a ping";
    return {};
  }

  // SIGTERM; returns init's wait status, or -1 if it was not running or could not be signalled
  // or waited for.
  int Stop() {
    if (pid_ <= 0) return -1;
    int status = 0;
    bool stopped = ::kill(pid_, SIGTERM) == 0 && ::waitpid(pid_, &status, 0) == pid_;
    pid_ = -1;
    return stopped ? status : -1;
  }

  pid_t pid() const { return pid_; }
  const std::string& socket_path() const { return socket_path_; }

 private:
  pid_t pid_ = -1;
  std::string socket_path_;
};

}  // namespace bulkhead::init_testing
