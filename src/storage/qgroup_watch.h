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

 private:
  // Starts a rescan if the qgroups are inconsistent.
  void Check();
  void Run();

  UniqueFd fs_fd_;
  std::string qgroups_sysfs_;
  bool repairing_ = false;  // inconsistent when last seen, and logged
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace bulkhead::storage
