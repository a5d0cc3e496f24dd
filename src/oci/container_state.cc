#include "oci/container_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/read_file.h"
#include "runtime/process.h"

namespace bulkhead::oci {

using nlohmann::json;

Status CheckId(const std::string& id) {
  if (id.empty() || id.size() > 1024 || id[0] == '.')
    return MakeError(ErrorCode::kInvalid, "invalid container id \"" + id + "\"");
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      return MakeError(ErrorCode::kInvalid, "invalid container id \"" + id + "\"");
  }
  return {};
}

std::string StateDir(const std::string& root, const std::string& id) { return root + "/" + id; }
std::string ExecFifo(const std::string& root, const std::string& id) { return StateDir(root, id) + "/exec.fifo"; }

Result<ContainerState> LoadState(const std::string& root, const std::string& id) {
  BH_TRY(CheckId(id));
  auto text = ReadSmallFile(StateDir(root, id) + "/state.json");
  if (!text) return MakeError(ErrorCode::kNotFound, "container \"" + id + "\" does not exist");
  try {
    json j = json::parse(*text);
    ContainerState s;
    s.id = j.at("id");
    s.bundle = j.at("bundle");
    s.rootfs = j.at("rootfs");
    s.created = j.at("created");
    s.pid = j.at("pid");
    s.start_time = j.at("start_time");
    s.host_uid = j.at("host_uid");
    s.pod = j.at("pod");
    s.cgroup_dirs = j.at("cgroup_dirs").get<std::vector<std::string>>();
    s.cgroup_v2 = j.at("cgroup_v2");
    s.annotations = j.value("annotations", std::map<std::string, std::string>{});
    s.egress_helper = {j.value("egress_pid", 0), j.value("egress_start_time", uint64_t{0})};
    return s;
  } catch (const json::exception& e) {
    return MakeError(ErrorCode::kInternal, "container \"" + id + "\": unreadable state: " + e.what());
  }
}

Status SaveState(const std::string& root, const ContainerState& s) {
  json j = {{"id", s.id},         {"bundle", s.bundle},         {"rootfs", s.rootfs},   {"created", s.created},
            {"pid", s.pid},       {"start_time", s.start_time}, {"host_uid", s.host_uid}, {"pod", s.pod},
            {"cgroup_dirs", s.cgroup_dirs}, {"cgroup_v2", s.cgroup_v2}, {"annotations", s.annotations},
            {"egress_pid", s.egress_helper.pid}, {"egress_start_time", s.egress_helper.start_time}};
  const std::string path = StateDir(root, s.id) + "/state.json";
  const std::string text = j.dump();
  BH_TRY(WriteWholeFile(path + ".tmp", text.data(), text.size(), 0600));
  if (::rename((path + ".tmp").c_str(), path.c_str()) != 0) return SystemError("rename " + path, errno);
  return {};
}

bool Alive(const ContainerState& s) { return runtime::HandleAlive({s.pid, s.start_time}); }

std::string CurrentStatus(const std::string& root, const ContainerState& s) {
  if (!Alive(s)) return "stopped";
  struct stat st {};
  if (::lstat(ExecFifo(root, s.id).c_str(), &st) == 0) return "created";
  if (s.Cgroup().Frozen()) return "paused";
  return "running";
}

Result<UniqueFd> LockRoot(const std::string& root) {
  std::error_code error;
  std::filesystem::create_directories(root, error);  // containerd's /run/containerd/runc/<namespace>
  if (error) return MakeError(ErrorCode::kInternal, "mkdir " + root + ": " + error.message());
  ::chmod(root.c_str(), 0700);
  UniqueFd fd(::open((root + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) return SystemError("open " + root + "/.lock", errno);
  if (::flock(fd.get(), LOCK_EX) != 0) return SystemError("lock " + root, errno);
  return fd;
}

}  // namespace bulkhead::oci
