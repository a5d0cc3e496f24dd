#include "support/temp_state_dir.h"

#include <errno.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>

#include <cstring>
#include <stdexcept>

#include "storage/fs_util.h"

namespace bulkhead::testing {

TempStateDir::TempStateDir(const std::string& prefix) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  // Thrown, the test fails before its body runs (gtest catches it), with no path to misuse.
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
  }
  path_ = pattern;
}

TempStateDir::~TempStateDir() {
  UnmountStorage();
  EXPECT_TRUE(storage::RemoveTree(path_).ok()) << path_;
}

void TempStateDir::UnmountStorage() const {
  const std::string mount_point = path_ + "/storage";
  if (storage::FindMount(mount_point) && ::umount2(mount_point.c_str(), 0) != 0) {
    ::umount2(mount_point.c_str(), MNT_DETACH);
  }
}

}  // namespace bulkhead::testing
