// net.ipv4.ip_forward, which open mode needs (open_link.h), is one switch per network namespace,
// shared by every bulkhead daemon there (tests run several at once, one per state directory).
// Each daemon that needs it holds a claim; the first claim records the value it found, and
// the last one to go puts that value back. The records, root's only, under /run/bulkhead:
//   ip_forward/                     flock'ed while a daemon changes anything below
//   ip_forward/<netns>/found        the value before the first claim
//   ip_forward/<netns>/daemon-<pid> a claim, flock'ed by its daemon for as long as it lives
// <netns> is the namespace's cookie, which no later namespace reuses (until reboot, which
// clears /run). A claim whose lock is free belongs to a daemon that died: whoever takes or
// drops a claim there removes it, and a daemon that starts removes its namespace's and puts
// the value back if no live claim is left.
#pragma once
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace bulkhead::net {

class IpForwardClaim {
 public:
  // In the calling thread's namespace: removes the claims of dead daemons and, when no live
  // one is left, restores the value they found.
  static Status RemoveStale();

  // Switches ip_forward on in the calling thread's namespace for as long as the claim is
  // held. Holding it already: writes 1 again.
  Status Take();
  // Gives the claim up (nothing if not held); the last claim restores the value found. Call it
  // from the namespace Take ran in.
  Status Release();

 private:
  UniqueFd claim_;     // flock'ed while held
  std::string netns_;  // the directory name of the namespace it was taken in
};

}  // namespace bulkhead::net
