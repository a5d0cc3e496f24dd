// Snapshots and layers made from them, on both storage drivers: real loop-mounted
// filesystems (xfs or plain for overlay, btrfs for btrfs), as root.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "common/unique_fd.h"
#include "storage/fs_util.h"
#include "storage/storage.h"
#include "support/temp_state_dir.h"

namespace bulkhead::storage {
namespace {

constexpr uid_t kFrom = 0x10000000;
constexpr uid_t kTo = 0x10050000;

class StorageSnapshotsTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ASSERT_EQ(::chmod(state_.c_str(), 0711), 0);
    auto opened = Storage::Open(state_, 4, GetParam());
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    storage_ = std::move(*opened);
  }
  static void Write(const std::string& path, const std::string& data, uid_t owner) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd) << path;
    ASSERT_EQ(::write(fd.get(), data.data(), data.size()), static_cast<ssize_t>(data.size()));
    ASSERT_EQ(::fchown(fd.get(), owner, owner), 0);
  }
  static std::string Read(const std::string& path) {
    auto text = ReadFile(path);
    return text.ok() ? *text : "<" + text.error().message + ">";
  }
  static uid_t Owner(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st.st_uid;
  }

  testing::TempStateDir dir_{"bulkhead-snap-test"};  // first: it outlives what is opened on it
  const std::string state_ = dir_.path();
  std::unique_ptr<Storage> storage_;
};

TEST_P(StorageSnapshotsTest, ASnapshotKeepsTheFilesAsTheyWereAndSeedsNewLayers) {
  EXPECT_EQ(storage_->driver(), GetParam());
  auto layer = storage_->CreateLayer("sb1", kFrom, kFrom, 256);
  ASSERT_TRUE(layer.ok()) << layer.error().message;
  Write(layer->upper + "/workspace/a.txt", "before\n", kFrom + 1000);

  auto captured = storage_->CaptureSnapshot("sb1", "snap_1");
  ASSERT_TRUE(captured.ok()) << captured.error().message;
  EXPECT_EQ(storage_->CaptureSnapshot("sb1", "snap_1").error().code, ErrorCode::kConflict);
  EXPECT_EQ(storage_->ListSnapshots(), std::vector<std::string>{"snap_1"});
  Write(layer->upper + "/workspace/a.txt", "after\n", kFrom + 1000);
  Write(layer->upper + "/workspace/later.txt", "later\n", kFrom);

  const std::string snap = storage_->SnapshotDir("snap_1");
  EXPECT_EQ(Read(snap + "/upper/workspace/a.txt"), "before\n");
  EXPECT_NE(::access((snap + "/upper/workspace/later.txt").c_str(), F_OK), 0);
  EXPECT_EQ(Owner(snap + "/upper/workspace/a.txt"), kFrom + 1000);  // recorded as taken
  auto size = storage_->SnapshotSizeBytes("snap_1");
  ASSERT_TRUE(size.ok());
  EXPECT_GT(*size, 0);

  auto copy = storage_->CreateLayerFromSnapshot("sb2", "snap_1", IdShift{kFrom, kTo, 65536}, 256);
  ASSERT_TRUE(copy.ok()) << copy.error().message;
  EXPECT_EQ(Read(copy->upper + "/workspace/a.txt"), "before\n");
  EXPECT_EQ(Owner(copy->upper), kTo);
  EXPECT_EQ(Owner(copy->upper + "/workspace/a.txt"), kTo + 1000);
  EXPECT_EQ(Owner(copy->work), kTo);
  // The copy is its own: writing it changes neither the snapshot nor the source.
  Write(copy->upper + "/workspace/a.txt", "copy\n", kTo + 1000);
  EXPECT_EQ(Read(snap + "/upper/workspace/a.txt"), "before\n");
  EXPECT_EQ(Read(layer->upper + "/workspace/a.txt"), "after\n");
  EXPECT_EQ(storage_->CreateLayerFromSnapshot("sb3", "snap_absent", IdShift{kFrom, kTo, 65536}, 256).error().code,
            ErrorCode::kNotFound);

  ASSERT_TRUE(storage_->DestroyLayer("sb2").ok());
  ASSERT_TRUE(storage_->DestroySnapshot("snap_1").ok());
  ASSERT_TRUE(storage_->DestroySnapshot("snap_1").ok());  // idempotent
  EXPECT_TRUE(storage_->ListSnapshots().empty());
  EXPECT_EQ(Read(layer->upper + "/workspace/a.txt"), "after\n");
  ASSERT_TRUE(storage_->DestroyLayer("sb1").ok());
}

TEST_P(StorageSnapshotsTest, AStateDirOfTheOtherDriverIsRefused) {
  const std::string driver = GetParam();
  bool has_image = FindMount(state_ + "/storage").has_value();
  if (!has_image) GTEST_SKIP() << "no quota image here (plain layers): nothing to refuse";
  storage_.reset();
  dir_.UnmountStorage();
  auto other = Storage::Open(state_, 4, driver == "btrfs" ? "overlay" : "btrfs");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, ErrorCode::kInvalid) << other.error().message;
  auto same = Storage::Open(state_, 4, driver);
  ASSERT_TRUE(same.ok()) << same.error().message;
  storage_ = std::move(*same);
}

INSTANTIATE_TEST_SUITE_P(Drivers, StorageSnapshotsTest, ::testing::Values("overlay", "btrfs"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace bulkhead::storage
