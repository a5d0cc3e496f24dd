#include "storage/qgroup_watch.h"

#include <linux/btrfs.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "storage/fs_util.h"

namespace bulkhead::storage {

namespace {

bool QgroupsInconsistent(const std::string& qgroups_sysfs) {
  auto text = ReadFile(qgroups_sysfs + "/inconsistent");
  return text.ok() && !text->empty() && (*text)[0] == '1';
}

}  // namespace

QgroupWatch::QgroupWatch(UniqueFd fs_fd, std::string qgroups_sysfs)
    : fs_fd_(std::move(fs_fd)), qgroups_sysfs_(std::move(qgroups_sysfs)) {
  Check();
  thread_ = std::thread([this] { Run(); });
}

QgroupWatch::~QgroupWatch() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void QgroupWatch::Check() {
  std::lock_guard lock(mu_);
  if (!QgroupsInconsistent(qgroups_sysfs_)) {
    if (repairing_) spdlog::info("storage: btrfs qgroups are consistent again; disk caps hold");
    repairing_ = false;
    return;
  }
  // EINPROGRESS: a rescan runs already (ours, or the one that enabling quotas starts).
  // Each episode is logged once, not every second.
  btrfs_ioctl_quota_rescan_args args{};
  if (::ioctl(fs_fd_.get(), BTRFS_IOC_QUOTA_RESCAN, &args) == 0) {
    if (!repairing_) {
      spdlog::warn("storage: the kernel marked btrfs qgroups inconsistent (disk caps do not hold until "
                   "a rescan); rescan started");
    }
    repairing_ = true;
  } else if (errno != EINPROGRESS && !repairing_) {
    spdlog::error("storage: btrfs qgroups are inconsistent and a rescan could not start: {}", std::strerror(errno));
    repairing_ = true;
  }
}

void QgroupWatch::Run() {
  std::unique_lock lock(mu_);
  while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
    lock.unlock();
    Check();
    lock.lock();
  }
}

}  // namespace bulkhead::storage
