#include "net/ip_forward.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

#include "common/read_file.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

namespace bulkhead::net {
namespace {

constexpr char kSysctl[] = "/proc/sys/net/ipv4/ip_forward";
constexpr char kRecords[] = "/run/bulkhead/ip_forward";
constexpr char kFound[] = "found";
constexpr std::string_view kClaimPrefix = "daemon-";

// `name` below `parent` as a directory of root's with mode 0700, made if missing. Anything
// else there (a link, another owner) is refused: only root can write /run.
Result<UniqueFd> OpenPrivateDir(int parent, const std::string& name) {
  if (::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST) return SystemError("mkdir " + name, errno);
  UniqueFd dir(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return SystemError("open " + name, errno);
  struct stat st {};
  if (::fstat(dir.get(), &st) != 0) return SystemError("stat " + name, errno);
  if (st.st_uid != 0) return MakeError(ErrorCode::kInternal, "ip_forward records: " + name + " is not root's");
  if ((st.st_mode & 077) != 0 && ::fchmod(dir.get(), 0700) != 0) return SystemError("chmod " + name, errno);
  return dir;
}

// kRecords, locked against every other daemon until the result goes.
Result<UniqueFd> LockRecords() {
  auto run = OpenPrivateDir(AT_FDCWD, "/run/bulkhead");
  if (!run) return run.error();
  auto records = OpenPrivateDir(run->get(), "ip_forward");
  if (!records) return records.error();
  while (::flock(records->get(), LOCK_EX) != 0) {
    if (errno != EINTR) return SystemError("lock ip_forward records", errno);
  }
  return records;
}

// The calling thread's network namespace, by a name no later namespace gets.
Result<std::string> NetnsName() {
  UniqueFd probe(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe) return SystemError("socket", errno);
  uint64_t cookie = 0;
  socklen_t length = sizeof cookie;
  if (::getsockopt(probe.get(), SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &length) == 0) {
    return "netns-" + std::to_string(cookie);
  }
  // Before Linux 5.14: the inode number, which a namespace made after this one's end may reuse.
  struct stat st {};
  if (::stat("/proc/thread-self/ns/net", &st) != 0) return SystemError("stat /proc/thread-self/ns/net", errno);
  return "netns-inode-" + std::to_string(st.st_ino);
}

// Removes the claims below `dir` whose daemon is gone (their lock is free); answers how many
// live ones are left.
Result<int> RemoveDeadClaims(int dir) {
  int listing = ::dup(dir);
  if (listing < 0) return SystemError("dup", errno);
  DIR* d = ::fdopendir(listing);
  if (!d) {
    ::close(listing);
    return SystemError("list ip_forward claims", errno);
  }
  ::rewinddir(d);
  int live = 0;
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (!name.starts_with(kClaimPrefix)) continue;
    UniqueFd claim(::openat(dir, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!claim) continue;  // gone meanwhile
    if (::flock(claim.get(), LOCK_EX | LOCK_NB) == 0) {
      ::unlinkat(dir, e->d_name, 0);
    } else {
      ++live;
    }
  }
  ::closedir(d);
  return live;
}

// With no live claim left in the namespace's directory `name`: puts the value found back and
// removes the record. `records` is locked.
Status RestoreIfUnclaimed(int records, const std::string& name) {
  UniqueFd dir(::openat(records, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return errno == ENOENT ? Status() : SystemError("open ip_forward record " + name, errno);
  auto live = RemoveDeadClaims(dir.get());
  if (!live) return live.error();
  if (*live > 0) return {};
  auto found = ReadSmallFile(std::string(kRecords) + "/" + name + "/" + kFound, 16);
  if (found && !found->empty()) BH_TRY(WriteSmallFile(kSysctl, *found));
  ::unlinkat(dir.get(), kFound, 0);
  ::unlinkat(records, name.c_str(), AT_REMOVEDIR);
  return {};
}

}  // namespace

Status IpForwardClaim::RemoveStale() {
  auto records = LockRecords();
  if (!records) return records.error();
  auto name = NetnsName();
  if (!name) return name.error();
  return RestoreIfUnclaimed(records->get(), *name);
}

Status IpForwardClaim::Take() {
  if (claim_) return WriteSmallFile(kSysctl, "1");
  auto records = LockRecords();
  if (!records) return records.error();
  auto name = NetnsName();
  if (!name) return name.error();
  auto dir = OpenPrivateDir(records->get(), *name);
  if (!dir) return dir.error();
  auto live = RemoveDeadClaims(dir->get());
  if (!live) return live.error();
  // The value found stays recorded while any claim, live or dead, was left: a dead daemon's
  // record says what the namespace had before it.
  if (::faccessat(dir->get(), kFound, F_OK, 0) != 0) {
    auto now = ReadSmallFile(kSysctl, 16);
    if (!now) return SystemError(std::string("read ") + kSysctl, errno);
    UniqueFd found(::openat(dir->get(), "found.new", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!found || ::write(found.get(), now->data(), now->size()) != static_cast<ssize_t>(now->size()) ||
        ::renameat(dir->get(), "found.new", dir->get(), kFound) != 0) {
      return SystemError("record ip_forward", errno);
    }
  }
  const std::string claim_name = std::string(kClaimPrefix) + std::to_string(::getpid());
  UniqueFd claim(::openat(dir->get(), claim_name.c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!claim || ::flock(claim.get(), LOCK_EX | LOCK_NB) != 0) return SystemError("claim ip_forward", errno);
  claim_ = std::move(claim);
  netns_ = *name;
  if (Status on = WriteSmallFile(kSysctl, "1"); !on) {
    ::unlinkat(dir->get(), claim_name.c_str(), 0);
    claim_.reset();
    (void)RestoreIfUnclaimed(records->get(), netns_);
    return on;
  }
  return {};
}

Status IpForwardClaim::Release() {
  if (!claim_) return {};
  auto records = LockRecords();
  if (!records) return records.error();
  const std::string claim_path = netns_ + "/" + std::string(kClaimPrefix) + std::to_string(::getpid());
  ::unlinkat(records->get(), claim_path.c_str(), 0);
  claim_.reset();
  return RestoreIfUnclaimed(records->get(), netns_);
}

}  // namespace bulkhead::net
