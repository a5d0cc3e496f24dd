#include "init/out_of_memory.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace bulkhead::init {
namespace {

// Resident pages of the process (/proc/<pid>/statm, second field); -1 if it is gone.
int64_t ResidentPages(long pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%ld/statm", pid);
  FILE* statm = std::fopen(path, "re");
  if (!statm) return -1;
  long long size = 0, resident = -1;
  if (std::fscanf(statm, "%lld %lld", &size, &resident) != 2) resident = -1;
  std::fclose(statm);
  return resident;
}

// The sandbox's processes, init excepted, largest resident set first.
std::vector<Killed> ProcessesBySize() {
  std::vector<Killed> found;
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  const pid_t self = ::getpid();
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 1 || pid == self) continue;
    if (const int64_t pages = ResidentPages(pid); pages > 0) found.push_back({static_cast<pid_t>(pid), pages * page});
  }
  ::closedir(proc);
  std::sort(found.begin(), found.end(), [](const Killed& a, const Killed& b) { return a.resident_bytes > b.resident_bytes; });
  return found;
}

}  // namespace

std::vector<Killed> KillLargestProcesses(int64_t bytes) {
  std::vector<Killed> killed;
  for (const Killed& process : ProcessesBySize()) {
    if (bytes <= 0) break;
    if (::kill(process.pid, SIGKILL) != 0) continue;
    killed.push_back(process);
    bytes -= process.resident_bytes;
  }
  return killed;
}

}  // namespace bulkhead::init
