#include "storage/loop_mount.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/unique_fd.h"
#include "common/run_program.h"

namespace bulkhead::storage {
namespace {

constexpr off_t kBtrfsMagicOffset = 65536 + 64;
constexpr char kBtrfsMagic[] = "_BHRfS_M";
constexpr char kXfsMagic[] = "XFSB";

bool ReadAt(int fd, off_t offset, char* buf, size_t len) {
  return ::pread(fd, buf, len, offset) == static_cast<ssize_t>(len);
}

}  // namespace

Result<FsType> ProbeFilesystem(const std::string& image_path) {
  UniqueFd fd(::open(image_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return SystemError("open " + image_path, errno);
  char buf[8] = {};
  if (ReadAt(fd.get(), 0, buf, 4) && std::memcmp(buf, kXfsMagic, 4) == 0) return FsType::kXfs;
  if (ReadAt(fd.get(), kBtrfsMagicOffset, buf, 8) && std::memcmp(buf, kBtrfsMagic, 8) == 0) {
    return FsType::kBtrfs;
  }
  // An all-zero first block means nothing was ever written: a fresh sparse file.
  char head[4096];
  ssize_t n = ::pread(fd.get(), head, sizeof head, 0);
  if (n < 0) return SystemError("read " + image_path, errno);
  for (ssize_t i = 0; i < n; ++i) {
    if (head[i] != 0) return FsType::kOther;
  }
  return FsType::kNone;
}

Status CreateSparseImage(const std::string& image_path, int64_t bytes) {
  UniqueFd fd(::open(image_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) {
    if (errno == EEXIST) return {};
    return SystemError("create " + image_path, errno);
  }
  if (::ftruncate(fd.get(), bytes) != 0) {
    int err = errno;
    ::unlink(image_path.c_str());
    return SystemError("size " + image_path, err);
  }
  return {};
}

Status MakeFilesystem(const std::string& image_path, FsType type) {
  if (type == FsType::kXfs) {
    std::string mkfs = FindProgram({"/sbin/mkfs.xfs", "/usr/sbin/mkfs.xfs"});
    if (mkfs.empty()) return MakeError(ErrorCode::kUnavailable, "mkfs.xfs not found (install xfsprogs)");
    // reflink=1 (the default of recent xfsprogs, asked for anyway): snapshots and forks
    // clone files instead of copying their data.
    return RunProgram({mkfs, "-q", "-f", "-m", "reflink=1", image_path});
  }
  if (type == FsType::kBtrfs) {
    std::string mkfs = FindProgram({"/sbin/mkfs.btrfs", "/usr/sbin/mkfs.btrfs", "/bin/mkfs.btrfs"});
    if (mkfs.empty()) return MakeError(ErrorCode::kUnavailable, "mkfs.btrfs not found (install btrfs-progs)");
    return RunProgram({mkfs, "-q", "-f", image_path});
  }
  return MakeError(ErrorCode::kInternal, "MakeFilesystem: unsupported type");
}

Result<std::string> MountImage(const std::string& image_path, const std::string& mount_point,
                               const std::string& fs_type, const std::string& options) {
  UniqueFd image(::open(image_path.c_str(), O_RDWR | O_CLOEXEC));
  if (!image) return SystemError("open " + image_path, errno);
  UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return SystemError("open /dev/loop-control", errno);

  // Another process may grab the same free device between GET_FREE and CONFIGURE: retry.
  UniqueFd loop;
  std::string loop_path;
  for (int attempt = 0;; ++attempt) {
    int number = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (number < 0) return SystemError("LOOP_CTL_GET_FREE", errno);
    loop_path = "/dev/loop" + std::to_string(number);
    loop.reset(::open(loop_path.c_str(), O_RDWR | O_CLOEXEC));
    if (!loop) {
      // udev/devtmpfs may not have made the node yet.
      if (errno == ENOENT && attempt < 50) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      return SystemError("open " + loop_path, errno);
    }
    loop_config config{};
    config.fd = static_cast<__u32>(image.get());
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), image_path.c_str(),
                 LO_NAME_SIZE - 1);
    if (::ioctl(loop.get(), LOOP_CONFIGURE, &config) == 0) break;
    if (errno != EBUSY || attempt >= 50) return SystemError("LOOP_CONFIGURE " + loop_path, errno);
  }
  // Closing `loop` after a failed mount detaches the device again (autoclear).
  if (::mount(loop_path.c_str(), mount_point.c_str(), fs_type.c_str(), MS_NOSUID | MS_NODEV,
              options.c_str()) != 0) {
    return SystemError("mount " + fs_type + " " + loop_path + " on " + mount_point, errno);
  }
  return loop_path;
}

}  // namespace bulkhead::storage
