// The OCI runtime spec (a bundle's config.json) runsc starts a sandbox from: bulkhead's init
// as the container's only process, the root filesystem and bind mounts the launcher assembled
// (launch.h), and the sandbox's uid range as the user namespace runsc's gofer and sentry run in.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bulkhead::runtime::gvisor {

struct BundleMount {
  std::string source;  // a path runsc's gofer can reach (launch.h)
  std::string target;  // inside the sandbox
  bool read_only = true;
};

struct BundleSpec {
  std::string root;                // the root filesystem, writable
  std::vector<BundleMount> binds;  // host directories, overlays over them, volumes, in order
  std::string control_source;      // the sandbox's control directory (kControlTarget inside)
  uid_t host_uid = 0;              // sandbox uid 0 maps here; kIdCount ids follow
  int64_t shm_bytes = 0;           // /dev/shm's size
  std::string limits;              // the ctl::kLimits payload init starts with (then the daemon's)
};

// Where the control directory shows inside the sandbox until init hides it: init's binary, its
// seccomp filter, and the daemon's socket that init dials (ctl::kDaemonSocketName,
// --host-uds=open). A sandbox an older daemon launched has init's own listening socket there
// instead (kOldSocketName, --host-uds=create).
inline constexpr char kControlTarget[] = "/dev/.bulkhead";
inline constexpr char kInitName[] = "bulkhead-init";
inline constexpr char kSeccompName[] = "seccomp.bpf";
inline constexpr char kOldSocketName[] = "sock";

nlohmann::json OciConfig(const BundleSpec& spec);

}  // namespace bulkhead::runtime::gvisor
