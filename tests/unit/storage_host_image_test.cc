// The host image: a generated /etc, empty mount points, /bin and /lib* mirrored, no secrets.
#include <dirent.h>
#include <ftw.h>
#include <filesystem>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>
#include <string>

#include "common/id_ranges.h"
#include "storage/fs_util.h"
#include "storage/storage.h"
#include "support/temp_state_dir.h"

namespace bulkhead::storage {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ReadLink(const std::string& path) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

int CountEntries(const std::string& dir_path) {
  DIR* d = ::opendir(dir_path.c_str());
  if (d == nullptr) return -1;
  int entries = 0;
  while (dirent* e = ::readdir(d)) entries += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
  ::closedir(d);
  return entries;
}

// Any regular file stands for bulkhead-init here.
std::string SudoBinary() { return std::filesystem::read_symlink("/proc/self/exe").parent_path() / "bulkhead-init"; }

class StorageHostImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = Storage::Open(state_, 4);
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    storage_ = std::move(*opened);
    auto rootfs = storage_->EnsureHostImage(SudoBinary());
    ASSERT_TRUE(rootfs.ok()) << rootfs.error().message;
    rootfs_ = *rootfs;
  }

  testing::TempStateDir dir_{"bulkhead-storage-test"};  // first: it outlives what is opened on it
  const std::string state_ = dir_.path();
  std::string rootfs_;
  std::unique_ptr<Storage> storage_;
};

TEST_F(StorageHostImageTest, EtcHasGeneratedUsersAndNoHostSecrets) {
  std::string passwd = Slurp(rootfs_ + "/etc/passwd");
  EXPECT_NE(passwd.find("root:x:0:0:root:/root:/bin/bash\n"), std::string::npos);
  EXPECT_NE(passwd.find("user:x:1000:1000:user:/home/user:/bin/bash\n"), std::string::npos);
  EXPECT_NE(passwd.find("nobody:x:65534:65534:"), std::string::npos);
  std::string group = Slurp(rootfs_ + "/etc/group");
  EXPECT_NE(group.find("users:x:100:"), std::string::npos);
  EXPECT_NE(group.find("tty:x:5:"), std::string::npos);
  EXPECT_NE(group.find("user:x:1000:"), std::string::npos);
  EXPECT_EQ(Slurp(rootfs_ + "/etc/hostname"), "sandbox\n");
  EXPECT_NE(Slurp(rootfs_ + "/etc/hosts").find("localhost"), std::string::npos);
  EXPECT_EQ(Slurp(rootfs_ + "/etc/resolv.conf"), "nameserver 127.0.0.1\n");
  EXPECT_NE(Slurp(rootfs_ + "/etc/nsswitch.conf").find("hosts: files dns"), std::string::npos);

  for (const char* secret : {"etc/shadow", "etc/gshadow", "etc/shadow-", "etc/ssh", "etc/ssl/private",
                             "etc/sudoers", "etc/sudoers.d", "etc/environment", "etc/machine-id"}) {
    EXPECT_NE(::access((rootfs_ + "/" + secret).c_str(), F_OK), 0) << secret << " must not be in the image";
  }
  // Nothing of the host's users leaks in: root/ is empty, home/ holds only user/ (empty).
  EXPECT_EQ(CountEntries(rootfs_ + "/root"), 0);
  EXPECT_EQ(CountEntries(rootfs_ + "/home"), 1);
  EXPECT_EQ(CountEntries(rootfs_ + "/home/user"), 0);
}

TEST_F(StorageHostImageTest, VettedHostFilesAreCopied) {
  struct stat st;
  if (::access("/etc/ld.so.cache", F_OK) == 0) {
    EXPECT_EQ(Slurp(rootfs_ + "/etc/ld.so.cache"), Slurp("/etc/ld.so.cache"));
  }
  if (::lstat("/etc/os-release", &st) == 0) {
    ASSERT_EQ(::lstat((rootfs_ + "/etc/os-release").c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << "os-release is resolved to a real file";
    EXPECT_EQ(Slurp(rootfs_ + "/etc/os-release"), Slurp("/etc/os-release"));
  }
  if (::lstat("/etc/localtime", &st) == 0 && S_ISLNK(st.st_mode)) {
    EXPECT_EQ(ReadLink(rootfs_ + "/etc/localtime"), ReadLink("/etc/localtime"));
  }
  if (::access("/etc/ssl/certs/ca-certificates.crt", F_OK) == 0) {
    EXPECT_EQ(::access((rootfs_ + "/etc/ssl/certs/ca-certificates.crt").c_str(), F_OK), 0);
  }
  // alternatives/ keeps its symlinks as symlinks.
  if (DIR* d = ::opendir("/etc/alternatives")) {
    while (dirent* e = ::readdir(d)) {
      std::string host = std::string("/etc/alternatives/") + e->d_name;
      if (::lstat(host.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
        EXPECT_EQ(ReadLink(rootfs_ + "/etc/alternatives/" + e->d_name), ReadLink(host)) << host;
      }
    }
    ::closedir(d);
  }
}

// Stored owners (common/id_ranges.h): each sandbox sees kStoredIdBase as its root.
TEST_F(StorageHostImageTest, EverythingIsOwnedByTheStoredRootExceptHomeUser) {
  static std::string home_user;
  home_user = rootfs_ + "/home/user";
  auto check = [](const char* path, const struct stat* st, int, struct FTW*) -> int {
    if (path == home_user) return 0;
    if (st->st_uid != kStoredIdBase || st->st_gid != kStoredIdBase) {
      ADD_FAILURE() << path << " owned by " << st->st_uid << ":" << st->st_gid;
    }
    if (st->st_mode & (S_ISUID | S_ISGID)) ADD_FAILURE() << path << " has set-id bits";
    if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode) && !S_ISLNK(st->st_mode)) {
      ADD_FAILURE() << path << " is not a file, directory or symlink";
    }
    return 0;
  };
  ASSERT_EQ(::nftw(rootfs_.c_str(), check, 16, FTW_PHYS), 0);
  struct stat st;
  ASSERT_EQ(::stat(home_user.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kStoredIdBase + 1000);
  EXPECT_EQ(st.st_gid, kStoredIdBase + 1000);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

TEST_F(StorageHostImageTest, SkeletonHasMountPointsWithTheRightModes) {
  struct Expect {
    const char* path;
    mode_t mode;
  };
  for (Expect e : {Expect{"tmp", 01777}, Expect{"var/tmp", 01777}, Expect{"root", 0700}, Expect{"usr", 0755},
                   Expect{"proc", 0755}, Expect{"sys", 0755}, Expect{"dev", 0755}, Expect{"run", 0755},
                   Expect{"workspace", 0755}, Expect{"mnt", 0755}, Expect{"opt", 0755}, Expect{"srv", 0755},
                   Expect{"var/lib", 0755}, Expect{"var/log", 0755}, Expect{"var/cache", 0755}}) {
    struct stat st;
    ASSERT_EQ(::lstat((rootfs_ + "/" + e.path).c_str(), &st), 0) << e.path;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << e.path;
    EXPECT_EQ(st.st_mode & 07777, e.mode) << e.path;
  }
  // usr/ is a mount point, shown over the host's /usr: it holds only what the host lacks of
  // E2B's base template (python as python3) and our sudo, always.
  EXPECT_EQ(CountEntries(rootfs_ + "/usr"), 1);
  struct stat sudo;
  ASSERT_EQ(::lstat((rootfs_ + "/usr/bin/sudo").c_str(), &sudo), 0);
  EXPECT_TRUE(S_ISREG(sudo.st_mode));
  EXPECT_EQ(sudo.st_mode & 07777, 0755u);  // never setuid: it gains nothing, init does the work
  struct stat init;
  ASSERT_EQ(::stat(SudoBinary().c_str(), &init), 0);
  EXPECT_EQ(sudo.st_size, init.st_size);
  struct stat python3;
  if (::stat("/usr/bin/python3", &python3) == 0 && ::lstat("/usr/bin/python", &python3) != 0) {
    EXPECT_EQ(CountEntries(rootfs_ + "/usr/bin"), 2);
    char target[16] = {};
    EXPECT_EQ(::readlink((rootfs_ + "/usr/bin/python").c_str(), target, sizeof target - 1), 7);
    EXPECT_STREQ(target, "python3");
  } else {
    EXPECT_EQ(CountEntries(rootfs_ + "/usr/bin"), 1);
  }
}

TEST_F(StorageHostImageTest, BinAndLibMirrorTheHost) {
  auto binds = storage_->HostBindDirs();
  EXPECT_NE(std::find(binds.begin(), binds.end(), "/usr"), binds.end());
  for (const char* name : {"bin", "sbin", "lib", "lib32", "lib64", "libx32"}) {
    std::string host = std::string("/") + name;
    std::string image = rootfs_ + "/" + name;
    bool bound = std::find(binds.begin(), binds.end(), host) != binds.end();
    struct stat host_st, image_st;
    if (::lstat(host.c_str(), &host_st) != 0) {
      EXPECT_NE(::lstat(image.c_str(), &image_st), 0) << name << " is absent on the host";
      EXPECT_FALSE(bound) << name;
      continue;
    }
    ASSERT_EQ(::lstat(image.c_str(), &image_st), 0) << name;
    if (S_ISLNK(host_st.st_mode)) {
      EXPECT_TRUE(S_ISLNK(image_st.st_mode)) << name;
      EXPECT_EQ(ReadLink(image), ReadLink(host)) << name;
      EXPECT_FALSE(bound) << name;
    } else {
      EXPECT_TRUE(S_ISDIR(image_st.st_mode)) << name;
      EXPECT_TRUE(bound) << name << " is a real directory and must be bind-mounted";
    }
  }
}

TEST_F(StorageHostImageTest, EnsureIsStableAndSwitchesTheCurrentLink) {
  struct stat before, after;
  ASSERT_EQ(::stat(rootfs_.c_str(), &before), 0);
  auto again = storage_->EnsureHostImage(SudoBinary());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, rootfs_);
  ASSERT_EQ(::stat(rootfs_.c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  // images/host/rootfs is the "current" symlink to the version directory.
  std::string link = state_ + "/images/host/rootfs";
  struct stat st;
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(state_ + "/images/host/" + ReadLink(link), rootfs_);
  auto via_name = storage_->ImageRootfs("host");
  ASSERT_TRUE(via_name.ok());
  EXPECT_EQ(*via_name, rootfs_);
  EXPECT_TRUE(storage_->ImageExists("host"));

  // A stale "current" link is switched back to the version for today's inputs.
  ASSERT_EQ(::unlink(link.c_str()), 0);
  ASSERT_EQ(::symlink("v-0000000000000000", link.c_str()), 0);
  again = storage_->EnsureHostImage(SudoBinary());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, rootfs_);
  EXPECT_EQ(state_ + "/images/host/" + ReadLink(link), rootfs_);
}

TEST_F(StorageHostImageTest, HostIsListedAndCannotBeDeleted) {
  auto images = storage_->ListImages();
  ASSERT_FALSE(images.empty());
  EXPECT_EQ(images[0].name, "host");
  EXPECT_EQ(images[0].source, "host");
  EXPECT_FALSE(images[0].created_at.empty());
  auto deleted = storage_->DeleteImage("host");
  ASSERT_FALSE(deleted.ok());
  EXPECT_EQ(deleted.error().code, ErrorCode::kConflict);
  EXPECT_TRUE(storage_->ImageExists("host"));
}

}  // namespace
}  // namespace bulkhead::storage
