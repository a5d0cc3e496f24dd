// The runsc binary the gvisor tier drives, and how it was chosen: the one `serve --runsc`
// names, else the pinned build scripts/install-runsc.sh puts in /usr/local/lib/bulkhead, else
// runsc on the PATH (Debian's /usr/bin/runsc). Debian 12's (20221219) is too old to run the
// tier: with --network=host it cannot start its Sentry in the sandbox's user namespace
// ("error converting mounts"), and it answers statx(AT_NO_AUTOMOUNT), which coreutils' ls and
// stat make, with EINVAL; so a runsc dated 20221219 or earlier is refused, naming why.
#pragma once
#include <string>

#include "common/result.h"

namespace bulkhead::runtime::gvisor {

// Where scripts/install-runsc.sh installs its pinned build.
inline constexpr char kPinnedRunsc[] = "/usr/local/lib/bulkhead/runsc";

struct Runsc {
  std::string path;
  std::string version;  // the first line `runsc --version` prints
  std::string origin;   // "configured", "pinned build" or "debian"
};

// The runsc to use, checked by running `runsc --version`; kUnavailable naming what is missing.
Result<Runsc> FindRunsc(const std::string& configured);

// The date (YYYYMMDD) a runsc version names ("0.0~20221219.0", "0.0.0-20260905035102-...",
// "release-20240101.0"), or 0 if it names none.
int VersionDate(const std::string& version);

}  // namespace bulkhead::runtime::gvisor
