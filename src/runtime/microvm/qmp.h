// A client of QEMU's machine protocol (QMP: one JSON object per line over a unix socket), for
// what the tier asks of a running QEMU beyond its command line: saving a template guest,
// adding a restored copy's devices (template.h), memory snapshots (microvm_tier.h). Blocking,
// with a deadline per call.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/unique_fd.h"

namespace bulkhead::runtime::microvm {

// Connects to the unix socket QEMU (`pid`) listens on at `path`, waiting for QEMU to make it.
Result<UniqueFd> ConnectWhenListening(const std::string& path, pid_t pid,
                                      std::chrono::steady_clock::time_point deadline);

class Qmp {
 public:
  // Connects to the monitor socket at `path` (waiting for QEMU to make it, while `pid` runs)
  // and leaves the greeting's capability negotiation done.
  static Result<Qmp> Connect(const std::string& path, pid_t pid, std::chrono::milliseconds timeout);

  // Runs `command`; its "return" value, or kInternal with QEMU's error text. Events on the way
  // are skipped. `fd`, if >= 0, travels with the command (SCM_RIGHTS: getfd).
  Result<nlohmann::json> Execute(const std::string& command, const nlohmann::json& arguments = nlohmann::json::object(),
                                 int fd = -1);
  // Waits for QEMU's DEVICE_DELETED event of device `id` (a device_del is done once the guest
  // let the device go), also if it came during an earlier Execute.
  Status WaitForDeviceDeleted(const std::string& id, std::chrono::milliseconds timeout);
  // Leaves the guest's memory out of what migrate saves and migrate-incoming loads
  // (x-ignore-shared: it is in a shared file or memfd the caller copies itself).
  Status IgnoreSharedMemory();
  // After a migrate: polls until QEMU wrote the whole stream (or says why not).
  Status AwaitSaved(std::chrono::steady_clock::time_point deadline);
  // After a migrate-incoming: polls until the guest is loaded (then it is paused).
  Status AwaitLoaded(std::chrono::steady_clock::time_point deadline);

 private:
  explicit Qmp(UniqueFd socket) : socket_(std::move(socket)) {}
  Result<nlohmann::json> ReadMessage();
  void Keep(nlohmann::json event);

  UniqueFd socket_;
  std::string buffer_;
  std::vector<nlohmann::json> events_;  // the latest events, oldest first
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace bulkhead::runtime::microvm
