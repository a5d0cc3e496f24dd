#include "runtime/microvm/memory_image.h"

#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "common/scope_guard.h"
#include "common/unique_fd.h"
#include "runtime/microvm/launch.h"
#include "runtime/microvm/qmp.h"

namespace bulkhead::runtime::microvm {
namespace {

namespace fs = std::filesystem;

// Each step's bound: a save writes the device state only (the memory is copied by the daemon),
// a load reads it; the guest lets a device go within a second, under TCG too.
constexpr auto kMonitorConnects = std::chrono::seconds(10);
constexpr auto kUnplugTakes = std::chrono::seconds(10);
constexpr auto kSaveTakes = std::chrono::seconds(60);

Error Failed(const std::string& what) { return MakeError(ErrorCode::kInternal, "microvm memory image: " + what); }


// The guest's memory, holes kept: only the pages it touched take room in the image.
Status CopyMemory(pid_t qemu, const std::string& to) {
  const std::string from_path = "/proc/" + std::to_string(qemu) + "/fd/" + std::to_string(kMemoryFd);
  UniqueFd from(::open(from_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!from) return SystemError("open the guest's memory " + from_path, errno);
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!out) return SystemError("create " + to, errno);
  const off_t size = ::lseek(from.get(), 0, SEEK_END);
  if (size < 0 || ::ftruncate(out.get(), size) != 0) return SystemError("size " + to, errno);
  for (off_t data = 0;;) {
    data = ::lseek(from.get(), data, SEEK_DATA);
    if (data < 0) break;  // ENXIO: no data after it
    const off_t hole = ::lseek(from.get(), data, SEEK_HOLE);
    if (hole <= data) return SystemError("find the guest memory's holes", errno);
    if (::lseek(out.get(), data, SEEK_SET) != data) return SystemError("seek in " + to, errno);
    for (off_t in = data; in < hole;) {
      const ssize_t copied = ::sendfile(out.get(), from.get(), &in, static_cast<size_t>(hole - in));
      if (copied <= 0) return SystemError("copy the guest's memory", copied < 0 ? errno : EIO);
    }
    data = hole;
  }
  if (::fsync(out.get()) != 0) return SystemError("fsync " + to, errno);
  return {};
}

// A new vsock device on a new connection to the device daemon (which serves the next
// connection once QEMU closed the last: after an unplug it listens again within milliseconds).
Status PlugVsock(Qmp& qmp, const std::string& vsock_socket) {
  const nlohmann::json chardev = {
      {"id", "vsock"},
      {"backend",
       {{"type", "socket"},
        {"data", {{"addr", {{"type", "unix"}, {"data", {{"path", vsock_socket}}}}}, {"server", false}}}}}};
  const auto deadline = std::chrono::steady_clock::now() + kUnplugTakes;
  while (true) {
    // The old device's chardev, once the device let it go (QEMU refuses it while it is busy).
    (void)qmp.Execute("chardev-remove", {{"id", "vsock"}});
    auto added = qmp.Execute("chardev-add", chardev);
    if (added) break;
    if (std::chrono::steady_clock::now() > deadline) return added.error();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto plugged = qmp.Execute("device_add", VsockDevice());
  if (!plugged) return plugged.error();
  return {};
}

bool HasVsock(Qmp& qmp) { return qmp.Execute("qom-list", {{"path", "/machine/peripheral/vsock"}}).ok(); }

// Beside the monitor socket while the guest's vsock device may be on its way out (from the
// device_del on until a new device is in): a daemon killed in between leaves it, and the next
// one's Continue finishes the job. Without it the guest could let the old device go only after
// the new daemon reached its init through it, and nothing would reach init again.
std::string UnplugMarker(const std::string& qmp_socket) {
  return fs::path(qmp_socket).parent_path() / "unplugging";
}

Status MarkUnplugging(const std::string& qmp_socket) {
  const std::string marker = UnplugMarker(qmp_socket);
  UniqueFd fd(::open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return SystemError("create " + marker, errno);
  return {};
}

void Unmark(const std::string& qmp_socket) { ::unlink(UnplugMarker(qmp_socket).c_str()); }

// Until the guest let its vsock device go. Asked again: an unplug already under way makes
// QEMU refuse the device_del, and the device goes all the same.
Status UnplugVsock(Qmp& qmp) {
  if (!HasVsock(qmp)) return {};
  (void)qmp.Execute("device_del", {{"id", "vsock"}});
  const auto deadline = std::chrono::steady_clock::now() + kUnplugTakes;
  while (HasVsock(qmp)) {
    if (std::chrono::steady_clock::now() > deadline) return Failed("the guest did not let its vsock device go");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return {};
}

// A save the daemon's end cut short may still write: given up, so that the guest runs on.
Status CancelSave(Qmp& qmp) {
  const auto deadline = std::chrono::steady_clock::now() + kUnplugTakes;
  for (bool asked = false;;) {
    auto state = qmp.Execute("query-migrate");
    if (!state) return state.error();
    const std::string status = state->value("status", "none");
    if (status == "none" || status == "completed" || status == "failed" || status == "cancelled") return {};
    if (!asked) BH_TRY(qmp.Execute("migrate_cancel"));
    asked = true;
    if (std::chrono::steady_clock::now() > deadline) return Failed("a save cut short did not end (" + status + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

Status SaveMemoryImage(const std::string& qmp_socket, pid_t qemu, const std::string& vsock_socket,
                       const std::string& image_dir) {
  auto qmp = Qmp::Connect(qmp_socket, qemu, kMonitorConnects);
  if (!qmp) return qmp.error();
  BH_TRY(MarkUnplugging(qmp_socket));
  if (auto unplugging = qmp->Execute("device_del", {{"id", "vsock"}}); !unplugging) {
    Unmark(qmp_socket);
    return unplugging.error();
  }
  // From here on the guest must get a vsock device back, whatever else fails.
  bool plugged = false;
  ScopeGuard replug([&] {
    if (!plugged && PlugVsock(*qmp, vsock_socket).ok()) Unmark(qmp_socket);
  });
  BH_TRY(qmp->WaitForDeviceDeleted("vsock", kUnplugTakes));
  if (auto stopped = qmp->Execute("stop"); !stopped) return stopped.error();
  BH_TRY(qmp->IgnoreSharedMemory());
  const std::string state = image_dir + kImageState;
  UniqueFd out(::open(state.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!out) return SystemError("create " + state, errno);
  BH_TRY(qmp->Execute("getfd", {{"fdname", "image"}}, out.get()));
  BH_TRY(qmp->Execute("migrate", {{"uri", "fd:image"}}));
  BH_TRY(qmp->AwaitSaved(std::chrono::steady_clock::now() + kSaveTakes));
  if (::fsync(out.get()) != 0) return SystemError("fsync " + state, errno);
  BH_TRY(CopyMemory(qemu, image_dir + kImageMemory));
  plugged = true;
  BH_TRY(PlugVsock(*qmp, vsock_socket));
  Unmark(qmp_socket);
  return {};
}

Status ReplugVsock(const std::string& qmp_socket, pid_t qemu, const std::string& vsock_socket,
                   const std::function<Status()>& unplugged) {
  auto qmp = Qmp::Connect(qmp_socket, qemu, kMonitorConnects);
  if (!qmp) return qmp.error();
  BH_TRY(MarkUnplugging(qmp_socket));
  BH_TRY(UnplugVsock(*qmp));
  BH_TRY(unplugged());
  BH_TRY(PlugVsock(*qmp, vsock_socket));
  Unmark(qmp_socket);
  return {};
}

std::string VsockSeenByGuest(const std::string& qmp_socket, pid_t qemu) {
  auto qmp = Qmp::Connect(qmp_socket, qemu, kMonitorConnects);
  if (!qmp) return "(no monitor: " + qmp.error().message + ")";
  auto buses = qmp->Execute("query-pci");
  if (!buses) return "(query-pci: " + buses.error().message + ")";
  for (const auto& bus : *buses)
    for (const auto& device : bus.value("devices", nlohmann::json::array())) {
      if (device.value("qdev_id", "") != "vsock") continue;
      // An unmapped BAR reads as all ones: the guest has not enabled the device's memory.
      for (const auto& region : device.value("regions", nlohmann::json::array()))
        if (region.value("type", "") == "memory" && region.value("address", ~uint64_t{0}) != ~uint64_t{0})
          return "the guest's kernel had set the device up";
      return "the guest's kernel had not set the device up (no BAR mapped)";
    }
  return "the guest has no vsock device";
}

Status Continue(const std::string& qmp_socket, pid_t qemu, const std::string& vsock_socket) {
  auto qmp = Qmp::Connect(qmp_socket, qemu, kMonitorConnects);
  if (!qmp) return qmp.error();
  // A daemon that ended in a save (or a replug) may have left the guest saving, or without its
  // vsock device, or letting it go.
  const bool cut_short = fs::exists(UnplugMarker(qmp_socket));
  if (cut_short) BH_TRY(CancelSave(*qmp));
  auto state = qmp->Execute("query-status");
  if (!state) return state.error();
  // ("postmigrate": stopped after a save)
  const std::string status = state->value("status", "");
  if (status == "paused" || status == "postmigrate") BH_TRY(qmp->Execute("cont"));
  // (running: its kernel takes part in the unplug)
  if (cut_short) BH_TRY(UnplugVsock(*qmp));
  if (!HasVsock(*qmp)) BH_TRY(PlugVsock(*qmp, vsock_socket));
  Unmark(qmp_socket);
  return {};
}

Status LoadMemoryImage(const VmConfig& vm, pid_t qemu, std::chrono::steady_clock::time_point deadline) {
  auto qmp = Qmp::Connect(vm.qmp_socket, qemu, kMonitorConnects);
  if (!qmp) return qmp.error();
  for (const nlohmann::json& device : HotplugDevices(vm, /*vsock=*/false))
    if (auto added = qmp->Execute("device_add", device); !added) return added.error();
  BH_TRY(qmp->IgnoreSharedMemory());
  BH_TRY(qmp->Execute("migrate-incoming", {{"uri", "fd:" + std::to_string(vm.incoming_fd)}}));
  if (Status loaded = qmp->AwaitLoaded(deadline); !loaded.ok()) return Failed(loaded.error().message);
  BH_TRY(qmp->Execute("device_add", VsockDevice()));
  BH_TRY(qmp->Execute("cont"));
  return {};
}

}  // namespace bulkhead::runtime::microvm
