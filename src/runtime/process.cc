#include "runtime/process.h"

#include <fcntl.h>

#include <cerrno>
#include <sstream>
#include <string>

#include "common/read_file.h"

namespace bulkhead::runtime {

uint64_t ProcessStartTime(pid_t pid) {
  std::string stat = ReadSmallFile("/proc/" + std::to_string(pid) + "/stat").value_or("");
  // The command name may hold spaces and parentheses: fields start after the last ')'.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field, state;
  rest >> state;
  if (state == "Z" || state == "X") return 0;
  for (int i = 4; i <= 22; i++) rest >> field;  // fields 4..22; 22 is starttime
  return std::strtoull(field.c_str(), nullptr, 10);
}

SandboxHandle HandleOf(pid_t pid) { return {pid, ProcessStartTime(pid)}; }

bool HandleAlive(const SandboxHandle& handle) {
  return handle.pid > 0 && handle.start_time != 0 && ProcessStartTime(handle.pid) == handle.start_time;
}

Result<NetworkAttachment> NetworkOf(const SandboxHandle& handle) {
  const std::string path = "/proc/" + std::to_string(handle.pid) + "/ns/net";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return SystemError("open " + path, errno);
  if (!HandleAlive(handle)) return MakeError(ErrorCode::kConflict, "the sandbox's init is gone");
  return NetworkAttachment{std::move(fd)};
}

}  // namespace bulkhead::runtime
