// Copying a layer's tree for snapshots and forks, and moving its owners from one sandbox's
// host uid range to another's. Both walk with directory fds and never follow symlinks, so
// whatever a sandbox planted in its files cannot point the daemon at a host file.
#pragma once
#include <sys/types.h>

#include <string>

#include "common/result.h"

namespace bulkhead::storage {

// Host ids [from, from + count) become [to, to + count); other ids stay as they are.
struct IdShift {
  uid_t from = 0;
  uid_t to = 0;
  uid_t count = 0;
  bool active() const { return count > 0 && from != to; }
  uid_t Map(uid_t id) const { return active() && id >= from && id - from < count ? id - from + to : id; }
};

// Copies the tree at `from` to `to` (which must not exist): directories, regular files
// (cloned with FICLONE where the filesystem shares extents, else copied keeping holes),
// symlinks, devices (overlay whiteouts are char 0:0), fifos and sockets; modes, owners
// (through `shift`), timestamps, xattrs (trusted.overlay.* included) and hard links.
Status CopyTree(const std::string& from, const std::string& to, const IdShift& shift = {});

// Rewrites every owner and group under `root` (root included) through `shift`, keeping the
// set-id bits and file capabilities that chown clears.
Status ShiftOwners(const std::string& root, const IdShift& shift);

}  // namespace bulkhead::storage
