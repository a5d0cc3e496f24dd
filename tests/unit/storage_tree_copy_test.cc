// CopyTree and ShiftOwners on a real filesystem, as root: everything a layer's upper/ can
// hold (overlay whiteouts and xattrs included) comes across, owners move between ranges.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/unique_fd.h"
#include "storage/fs_util.h"
#include "storage/loop_mount.h"
#include "storage/tree_copy.h"
#include "support/temp_state_dir.h"

namespace bulkhead::storage {
namespace {

constexpr uid_t kFrom = 0x10000000;  // one sandbox's host range
constexpr uid_t kTo = 0x10030000;    // another's
constexpr uid_t kCount = 65536;

class TreeCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = dir_ + "/src";
    ASSERT_EQ(::mkdir(src_.c_str(), 0755), 0);
  }

  std::string S(const std::string& rel) const { return src_ + "/" + rel; }
  static void Write(const std::string& path, const std::string& data, mode_t mode, uid_t uid, gid_t gid) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    ASSERT_TRUE(fd) << path;
    ASSERT_EQ(::write(fd.get(), data.data(), data.size()), static_cast<ssize_t>(data.size()));
    ASSERT_EQ(::fchown(fd.get(), uid, gid), 0);
    ASSERT_EQ(::fchmod(fd.get(), mode), 0);
  }
  static std::string Read(const std::string& path) {
    auto text = ReadFile(path);
    return text.ok() ? *text : "<" + text.error().message + ">";
  }
  static struct stat Lstat(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st;
  }
  static std::string Xattr(const std::string& path, const char* name) {
    char buf[256];
    ssize_t n = ::lgetxattr(path.c_str(), name, buf, sizeof buf);
    return n < 0 ? "<none>" : std::string(buf, static_cast<size_t>(n));
  }

  // A layer's upper/ as a sandbox leaves it, owned in the kFrom range.
  void MakeUpper() {
    ASSERT_EQ(::chown(src_.c_str(), kFrom, kFrom), 0);
    ASSERT_EQ(::mkdir(S("workspace").c_str(), 02775), 0);
    ASSERT_EQ(::chmod(S("workspace").c_str(), 02775), 0);
    ASSERT_EQ(::chown(S("workspace").c_str(), kFrom + 1000, kFrom + 1000), 0);
    Write(S("workspace/notes.txt"), "hello\n", 0640, kFrom + 1000, kFrom + 1001);
    Write(S("workspace/tool"), "#!/bin/sh\n", 04755, kFrom, kFrom);
    ASSERT_EQ(::link(S("workspace/notes.txt").c_str(), S("workspace/notes-link").c_str()), 0);
    ASSERT_EQ(::symlink("notes.txt", S("workspace/to-notes").c_str()), 0);
    ASSERT_EQ(::lchown(S("workspace/to-notes").c_str(), kFrom + 1000, kFrom + 1000), 0);
    ASSERT_EQ(::mkfifo(S("workspace/pipe").c_str(), 0600), 0);
    // An overlay whiteout (a deleted lower file) and an opaque directory.
    ASSERT_EQ(::mknod(S("deleted").c_str(), S_IFCHR | 0, makedev(0, 0)), 0);
    ASSERT_EQ(::lchown(S("deleted").c_str(), kFrom, kFrom), 0);  // made with the sandbox root's creds
    ASSERT_EQ(::mkdir(S("etc").c_str(), 0755), 0);
    ASSERT_EQ(::setxattr(S("etc").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
    ASSERT_EQ(::setxattr(S("workspace/notes.txt").c_str(), "user.note", "kept", 4, 0), 0);
    // A file of 8 MiB that is one hole with 5 bytes at its end.
    {
      UniqueFd fd(::open(S("workspace/sparse").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
      ASSERT_TRUE(fd);
      ASSERT_EQ(::pwrite(fd.get(), "tail!", 5, 8 * 1024 * 1024 - 5), 5);
    }
    ASSERT_EQ(::chown(S("workspace/sparse").c_str(), kFrom, kFrom), 0);
    const timespec old_times[2] = {{1000000000, 0}, {1000000000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, S("workspace/notes.txt").c_str(), old_times, 0), 0);
    ASSERT_EQ(::utimensat(AT_FDCWD, S("workspace").c_str(), old_times, 0), 0);
  }

  testing::TempStateDir temp_{"bulkhead-tree-copy"};
  const std::string dir_ = temp_.path();
  std::string src_;
};

TEST_F(TreeCopyTest, CopiesEveryKindOfEntryWithItsMetadata) {
  MakeUpper();
  const std::string dst = dir_ + "/dst";
  auto st = CopyTree(src_, dst);
  ASSERT_TRUE(st.ok()) << st.error().message;

  EXPECT_EQ(Read(dst + "/workspace/notes.txt"), "hello\n");
  struct stat notes = Lstat(dst + "/workspace/notes.txt");
  EXPECT_EQ(notes.st_mode & 07777, 0640u);
  EXPECT_EQ(notes.st_uid, kFrom + 1000);
  EXPECT_EQ(notes.st_gid, kFrom + 1001);
  EXPECT_EQ(notes.st_mtim.tv_sec, 1000000000);
  EXPECT_EQ(notes.st_nlink, 2u);
  EXPECT_EQ(Lstat(dst + "/workspace/notes-link").st_ino, notes.st_ino);
  EXPECT_EQ(Xattr(dst + "/workspace/notes.txt", "user.note"), "kept");

  struct stat workspace = Lstat(dst + "/workspace");
  EXPECT_EQ(workspace.st_mode & 07777, 02775u);
  EXPECT_EQ(workspace.st_uid, kFrom + 1000);
  EXPECT_EQ(workspace.st_mtim.tv_sec, 1000000000);  // set after its contents were written
  EXPECT_EQ(Lstat(dst + "/workspace/tool").st_mode & 07777, 04755u);
  EXPECT_EQ(Lstat(dst).st_uid, kFrom);

  struct stat link = Lstat(dst + "/workspace/to-notes");
  ASSERT_TRUE(S_ISLNK(link.st_mode));
  EXPECT_EQ(link.st_uid, kFrom + 1000);
  char target[64] = {};
  ASSERT_GT(::readlink((dst + "/workspace/to-notes").c_str(), target, sizeof target - 1), 0);
  EXPECT_STREQ(target, "notes.txt");
  EXPECT_TRUE(S_ISFIFO(Lstat(dst + "/workspace/pipe").st_mode));

  struct stat whiteout = Lstat(dst + "/deleted");
  EXPECT_TRUE(S_ISCHR(whiteout.st_mode));
  EXPECT_EQ(whiteout.st_rdev, makedev(0, 0));
  EXPECT_EQ(whiteout.st_uid, kFrom);
  EXPECT_EQ(Xattr(dst + "/etc", "trusted.overlay.opaque"), "y");

  struct stat sparse = Lstat(dst + "/workspace/sparse");
  EXPECT_EQ(sparse.st_size, 8 * 1024 * 1024);
  EXPECT_LT(sparse.st_blocks * 512, 1024 * 1024) << "the hole was filled in";
  std::string tail = Read(dst + "/workspace/sparse");
  EXPECT_EQ(tail.substr(tail.size() - 5), "tail!");
}

TEST_F(TreeCopyTest, CopyMovesOwnersToTheNewRange) {
  MakeUpper();
  Write(S("host-owned"), "x", 0644, 0, 0);  // outside the range: left as it is
  const std::string dst = dir_ + "/dst";
  auto st = CopyTree(src_, dst, IdShift{kFrom, kTo, kCount});
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(Lstat(dst).st_uid, kTo);
  EXPECT_EQ(Lstat(dst + "/workspace/notes.txt").st_uid, kTo + 1000);
  EXPECT_EQ(Lstat(dst + "/workspace/notes.txt").st_gid, kTo + 1001);
  EXPECT_EQ(Lstat(dst + "/workspace/to-notes").st_uid, kTo + 1000);
  EXPECT_EQ(Lstat(dst + "/workspace/tool").st_mode & 07777, 04755u);
  EXPECT_EQ(Lstat(dst + "/host-owned").st_uid, 0u);
  // The source is untouched.
  EXPECT_EQ(Lstat(S("workspace/notes.txt")).st_uid, kFrom + 1000);
}

TEST_F(TreeCopyTest, RefusesAnExistingDestinationAndAMissingSource) {
  EXPECT_FALSE(CopyTree(src_, dir_).ok());
  EXPECT_FALSE(CopyTree(dir_ + "/absent", dir_ + "/dst").ok());
  EXPECT_FALSE(CopyTree(S("link"), dir_ + "/dst2").ok());
}

TEST_F(TreeCopyTest, ShiftOwnersRewritesInPlaceKeepingSetIdBitsAndCapabilities) {
  MakeUpper();
  Write(S("host-owned"), "x", 0644, 0, 0);
  ASSERT_EQ(::chmod(S("workspace/tool").c_str(), 06755), 0);
  // A v3 file capability (cap_net_bind_service) whose namespace root is kFrom.
  uint32_t cap[6] = {0x03000000, 1u << 10, 0, 0, 0, kFrom};
  ASSERT_EQ(::setxattr(S("workspace/tool").c_str(), "security.capability", cap, sizeof cap, 0), 0);
  auto st = ShiftOwners(src_, IdShift{kFrom, kTo, kCount});
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(Lstat(src_).st_uid, kTo);
  EXPECT_EQ(Lstat(S("workspace")).st_uid, kTo + 1000);
  EXPECT_EQ(Lstat(S("workspace")).st_mode & 07777, 02775u);
  EXPECT_EQ(Lstat(S("workspace/notes.txt")).st_gid, kTo + 1001);
  EXPECT_EQ(Lstat(S("workspace/to-notes")).st_uid, kTo + 1000);
  EXPECT_EQ(Lstat(S("deleted")).st_uid, kTo);
  struct stat tool = Lstat(S("workspace/tool"));
  EXPECT_EQ(tool.st_uid, kTo);
  EXPECT_EQ(tool.st_mode & 07777, 06755u);
  uint32_t back[6] = {};
  ASSERT_EQ(::getxattr(S("workspace/tool").c_str(), "security.capability", back, sizeof back),
            static_cast<ssize_t>(sizeof back));
  EXPECT_EQ(back[1], 1u << 10);
  EXPECT_EQ(back[5], kTo);
  EXPECT_EQ(Lstat(S("host-owned")).st_uid, 0u);
  // Shifting again from the old range changes nothing more.
  ASSERT_TRUE(ShiftOwners(src_, IdShift{kFrom, kTo, kCount}).ok());
  EXPECT_EQ(Lstat(S("workspace/notes.txt")).st_uid, kTo + 1000);
}

TEST(IdShift, MapsOnlyIdsInsideTheRange) {
  IdShift shift{kFrom, kTo, kCount};
  EXPECT_EQ(shift.Map(kFrom), kTo);
  EXPECT_EQ(shift.Map(kFrom + kCount - 1), kTo + kCount - 1);
  EXPECT_EQ(shift.Map(kFrom + kCount), kFrom + kCount);
  EXPECT_EQ(shift.Map(kFrom - 1), kFrom - 1);
  EXPECT_EQ(shift.Map(0), 0u);
  EXPECT_FALSE(IdShift{}.active());
  EXPECT_EQ(IdShift{}.Map(kFrom), kFrom);
}

}  // namespace
}  // namespace bulkhead::storage

namespace bulkhead::storage {
namespace {

// On xfs made with reflink=1 (as the daemon makes its image) a copy shares the extents of
// its source instead of duplicating the data.
TEST(TreeCopyReflink, CopiesOnXfsShareExtents) {
  testing::TempStateDir temp("bulkhead-reflink");
  const std::string dir = temp.path(), image = dir + "/xfs.img", mnt = dir + "/mnt";
  ASSERT_TRUE(MakeDir(mnt, 0700).ok());
  ASSERT_TRUE(CreateSparseImage(image, int64_t{512} << 20).ok());
  ASSERT_TRUE(MakeFilesystem(image, FsType::kXfs).ok());
  auto device = MountImage(image, mnt, "xfs", "");
  if (!device.ok()) {
    GTEST_SKIP() << "no xfs here: " << device.error().message;
  }
  ASSERT_TRUE(MakeDir(mnt + "/src", 0755).ok());
  ASSERT_TRUE(WriteFile(mnt + "/src/data", std::string(4 << 20, 'd')).ok());
  ::sync();
  auto st = CopyTree(mnt + "/src", mnt + "/dst");
  EXPECT_TRUE(st.ok()) << st.error().message;
  UniqueFd fd(::open((mnt + "/dst/data").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  alignas(fiemap) char buf[sizeof(fiemap) + 4 * sizeof(fiemap_extent)] = {};
  auto* map = reinterpret_cast<fiemap*>(buf);
  map->fm_length = FIEMAP_MAX_OFFSET;
  map->fm_flags = FIEMAP_FLAG_SYNC;
  map->fm_extent_count = 4;
  ASSERT_EQ(::ioctl(fd.get(), FS_IOC_FIEMAP, map), 0);
  ASSERT_GE(map->fm_mapped_extents, 1u);
  EXPECT_TRUE(map->fm_extents[0].fe_flags & FIEMAP_EXTENT_SHARED);
  EXPECT_EQ(ReadFile(mnt + "/dst/data")->size(), size_t{4} << 20);
  fd.reset();
  ::umount2(mnt.c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace bulkhead::storage
