// Keeps btrfs qgroup accounting on. The kernel marks a filesystem's qgroups inconsistent
// when its own accounting goes wrong (its cleaner removing a dropped subvolume's qgroup with
// numbers left, or a subvolume drop over the subtree threshold), and kernels since 6.x then
// stop accounting until a rescan: from that moment no layer's disk cap holds. The watch
// notices the flag within a second and starts the rescan that btrfs leaves to user space.
#pragma once
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "common/unique_fd.h"

namespace bulkhead::storage {

class QgroupWatch {
 public:
  // fs_fd: any directory on the filesystem (kept open); qgroups_sysfs:
  // /sys/fs/btrfs/<fsid>/qgroups.
  QgroupWatch(UniqueFd fs_fd, std::string qgroups_sysfs);
  ~QgroupWatch();
  QgroupWatch(const QgroupWatch&) = delete;
  QgroupWatch& operator=(const QgroupWatch&) = delete;

  // Checks once, now: starts a rescan if the qgroups are inconsistent. True if they were.
  bool CheckNow();

 private:
  void Run();

  UniqueFd fs_fd_;
  std::string qgroups_sysfs_;
  bool rescanning_ = false;  // this watch started a rescan not yet seen to finish
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// Whether /sys/fs/btrfs/<fsid>/qgroups says the numbers are inconsistent (false when the
// kernel does not say).
bool QgroupsInconsistent(const std::string& qgroups_sysfs);

}  // namespace bulkhead::storage
