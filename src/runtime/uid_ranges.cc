#include "runtime/uid_ranges.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <random>

#include "common/unique_fd.h"

namespace bulkhead::runtime {
namespace {

constexpr const char* kDir = "/run/bulkhead/uid-ranges";

std::string SlotPath(int slot) { return std::string(kDir) + "/" + std::to_string(slot); }

Status EnsureDir() {
  ::mkdir("/run/bulkhead", 0700);
  if (::mkdir(kDir, 0700) != 0 && errno != EEXIST) return SystemError("mkdir " + std::string(kDir), errno);
  return {};
}

// O_EXCL creation is the lock: exactly one claimant wins a slot.
bool TryCreate(int slot, const std::string& content) {
  std::string path = SlotPath(slot);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return false;
  (void)!::write(fd.get(), content.data(), content.size());
  return true;
}

}  // namespace

Result<uid_t> UidRanges::Claim(const std::string& sandbox_id) {
  BH_TRY(EnsureDir());
  if (next_ == 0) next_ = std::random_device{}() % kSlots;  // daemons start far apart
  for (int i = 0; i < kSlots; i++) {
    int slot = (next_ + i) % kSlots;
    if (TryCreate(slot, owner_ + "\n" + sandbox_id + "\n")) {
      next_ = (slot + 1) % kSlots;
      return kFirstHostId + static_cast<uid_t>(slot) * kIdCount;
    }
  }
  return MakeError(ErrorCode::kTooMany, "no free uid range on this host");
}

Status UidRanges::Reclaim(uid_t base, const std::string& sandbox_id) {
  BH_TRY(EnsureDir());
  int slot = static_cast<int>((base - kFirstHostId) / kIdCount);
  if (TryCreate(slot, owner_ + "\n" + sandbox_id + "\n")) return {};
  // Still ours from before the restart?
  UniqueFd fd(::open(SlotPath(slot).c_str(), O_RDONLY | O_CLOEXEC));
  char buf[4096];
  ssize_t n = fd ? ::read(fd.get(), buf, sizeof buf) : -1;
  std::string want = owner_ + "\n" + sandbox_id + "\n";
  if (n >= 0 && std::string(buf, n) == want) return {};
  return MakeError(ErrorCode::kConflict, "uid range " + std::to_string(base) + " is held by another sandbox");
}

void UidRanges::ReleaseAllBut(const std::set<std::string>& sandbox_ids) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kDir, ec)) {
    UniqueFd fd(::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    char buf[4096];
    const ssize_t n = fd ? ::read(fd.get(), buf, sizeof buf) : -1;
    if (n <= 0) continue;
    const std::string content(buf, static_cast<size_t>(n));
    const size_t owner_end = content.find('\n');
    if (owner_end == std::string::npos || content.compare(0, owner_end, owner_) != 0) continue;
    const std::string id = content.substr(owner_end + 1, content.find('\n', owner_end + 1) - owner_end - 1);
    if (!sandbox_ids.count(id)) ::unlink(entry.path().c_str());
  }
}

void UidRanges::Release(uid_t base) {
  if (base < kFirstHostId) return;
  ::unlink(SlotPath(static_cast<int>((base - kFirstHostId) / kIdCount)).c_str());
}

}  // namespace bulkhead::runtime
