#include "common/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/unique_fd.h"

namespace bulkhead {

std::optional<std::string> ReadSmallFile(const std::string& path, size_t limit) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  std::string out;
  char buf[8192];
  while (out.size() < limit) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Status WriteSmallFile(const std::string& path, const std::string& value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return SystemError("open " + path, errno);
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    return SystemError("write " + value + " to " + path, errno);
  }
  return {};
}

std::string ReadLogTail(const std::string& path, size_t max) {
  std::string log = ReadSmallFile(path).value_or("");
  if (log.size() > max) log.erase(0, log.size() - max);
  while (!log.empty() && (log.back() == '\n' || log.back() == ' ' || log.back() == '\r')) log.pop_back();
  return log.empty() ? "(nothing logged)" : log;
}

Status WriteWholeFile(const std::string& path, const void* data, size_t size, mode_t mode) {
  const std::string temp = path + ".new";
  UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return SystemError("create " + temp, errno);
  if (::write(fd.get(), data, size) != static_cast<ssize_t>(size)) return SystemError("write " + temp, errno);
  if (::fchmod(fd.get(), mode) != 0) return SystemError("chmod " + temp, errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) return SystemError("rename " + temp, errno);
  return {};
}

Status MakeDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return SystemError("mkdir " + path, errno);
  return {};
}

}  // namespace bulkhead
