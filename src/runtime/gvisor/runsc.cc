#include "runtime/gvisor/runsc.h"

#include <unistd.h>

#include <cctype>

#include "common/run_program.h"

namespace bulkhead::runtime::gvisor {
namespace {

// The newest runsc known not to run the tier (Debian 12's).
constexpr int kTooOld = 20221219;

// runsc on the PATH (Debian installs it as /usr/bin/runsc).
std::string RunscOnPath() {
  const char* path = ::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/runsc";
    if (end > start && candidate[0] == '/' && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

}  // namespace

Result<Runsc> FindRunsc(const std::string& configured) {
  Runsc runsc;
  if (!configured.empty()) {
    runsc = {configured, "", "configured"};
  } else if (::access(kPinnedRunsc, X_OK) == 0) {
    runsc = {kPinnedRunsc, "", "pinned build"};
  } else if (std::string found = RunscOnPath(); !found.empty()) {
    runsc = {found, "", found == "/usr/bin/runsc" ? "debian" : "path"};
  } else {
    return MakeError(ErrorCode::kUnavailable,
                     "runsc is not installed (scripts/install-deps.sh installs Debian's, scripts/install-runsc.sh "
                     "a newer pinned build)");
  }
  auto output = RunProgramOutput({runsc.path, "--version"});
  if (!output) return MakeError(ErrorCode::kUnavailable, "runsc at " + runsc.path + " does not run: " + output.error().message);
  runsc.version = output->substr(0, output->find('\n'));
  if (const int date = VersionDate(runsc.version); date != 0 && date <= kTooOld) {
    return MakeError(ErrorCode::kUnavailable,
                     runsc.path + " (" + runsc.version +
                         ") is too old for the gvisor runtime: scripts/install-runsc.sh builds the pinned runsc");
  }
  return runsc;
}

int VersionDate(const std::string& version) {
  // The first run of 8 digits that reads as a date from 2018 (gVisor's first release) on.
  for (size_t i = 0; i + 8 <= version.size(); i++) {
    if (i > 0 && std::isdigit(static_cast<unsigned char>(version[i - 1]))) continue;
    size_t digits = 0;
    while (i + digits < version.size() && std::isdigit(static_cast<unsigned char>(version[i + digits]))) digits++;
    if (digits < 8) continue;
    const int date = std::stoi(version.substr(i, 8));
    const int month = date / 100 % 100, day = date % 100;
    if (date / 10000 >= 2018 && month >= 1 && month <= 12 && day >= 1 && day <= 31) return date;
  }
  return 0;
}

}  // namespace bulkhead::runtime::gvisor
