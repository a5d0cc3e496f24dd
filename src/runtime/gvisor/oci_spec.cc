#include "runtime/gvisor/oci_spec.h"

#include <linux/capability.h>

#include "common/id_ranges.h"
#include "common/sandbox_caps.h"

namespace bulkhead::runtime::gvisor {
namespace {

using json = nlohmann::json;

// Capability names as the OCI spec writes them, for the numbers init may hold.
const char* CapName(int cap) {
  switch (cap) {
    case CAP_CHOWN: return "CAP_CHOWN";
    case CAP_DAC_OVERRIDE: return "CAP_DAC_OVERRIDE";
    case CAP_FSETID: return "CAP_FSETID";
    case CAP_FOWNER: return "CAP_FOWNER";
    case CAP_SETGID: return "CAP_SETGID";
    case CAP_SETUID: return "CAP_SETUID";
    case CAP_SETPCAP: return "CAP_SETPCAP";
    case CAP_NET_BIND_SERVICE: return "CAP_NET_BIND_SERVICE";
    case CAP_KILL: return "CAP_KILL";
    case CAP_SYS_CHROOT: return "CAP_SYS_CHROOT";
    case CAP_SETFCAP: return "CAP_SETFCAP";
    case CAP_AUDIT_WRITE: return "CAP_AUDIT_WRITE";
    case CAP_SYS_ADMIN: return "CAP_SYS_ADMIN";
    case CAP_SYS_RESOURCE: return "CAP_SYS_RESOURCE";
  }
  return nullptr;
}

json Mount(const std::string& target, const std::string& type, const std::string& source, json options) {
  return {{"destination", target}, {"type", type}, {"source", source}, {"options", std::move(options)}};
}

}  // namespace

json OciConfig(const BundleSpec& spec) {
  // Init starts with the sandbox's capabilities, CAP_SYS_ADMIN, which it needs to mount its
  // cgroups and hide the control directory and drops before it serves, and CAP_SYS_RESOURCE,
  // which only it keeps (init/self_contain.h).
  json caps = json::array();
  for (int cap : kSandboxCaps) caps.push_back(CapName(cap));
  caps.push_back(CapName(CAP_SYS_ADMIN));
  caps.push_back(CapName(CAP_SYS_RESOURCE));
  json process = {
      {"terminal", false},
      {"user", {{"uid", 0}, {"gid", 0}}},
      {"args", {std::string(kControlTarget) + "/" + kInitName, "--self-contain", kControlTarget, "--limits", spec.limits}},
      {"env", {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
      {"cwd", "/"},
      {"capabilities", {{"bounding", caps}, {"effective", caps}, {"permitted", caps}}},
      {"noNewPrivileges", false},
      // Open files as the native tier allows (init sizes each command's own); no core dumps.
      {"rlimits",
       {{{"type", "RLIMIT_NOFILE"}, {"hard", 1048576}, {"soft", 1048576}},
        {{"type", "RLIMIT_CORE"}, {"hard", 0}, {"soft", 0}}}},
  };
  json mounts = {
      Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
      Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
      Mount("/dev/pts", "devpts", "devpts", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}),
      Mount("/dev/shm", "tmpfs", "shm",
            {"nosuid", "noexec", "nodev", "mode=1777", "size=" + std::to_string(spec.shm_bytes)}),
      Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
  };
  for (const BundleMount& bind : spec.binds) {
    mounts.push_back(
        Mount(bind.target, "bind", bind.source, {"rbind", bind.read_only ? "ro" : "rw", "nosuid", "nodev"}));
  }
  mounts.push_back(Mount(kControlTarget, "bind", spec.control_source, {"rbind", "rw", "nosuid", "nodev"}));
  json ids = json::array({{{"containerID", 0}, {"hostID", spec.host_uid}, {"size", kIdCount}}});
  return {
      {"ociVersion", "1.0.2"},
      {"process", std::move(process)},
      {"root", {{"path", spec.root}, {"readonly", false}}},
      {"hostname", "sandbox"},
      {"mounts", std::move(mounts)},
      {"linux",
       {// No network namespace: runsc runs with --network=host inside the one the launcher
        // made, so the sandbox's sockets are that namespace's (gvisor_tier.h).
        {"namespaces", {{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}, {{"type", "user"}}}},
        {"uidMappings", ids},
        {"gidMappings", ids}}},
  };
}

}  // namespace bulkhead::runtime::gvisor
