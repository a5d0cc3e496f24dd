// A pod's egress policy (docs/kubernetes.md): bulkhead's default-deny egress, allowlists, DNS
// filtering and egress log on top of the pod's CNI network, set by the pod's annotations. The
// pod's sandbox container's `create` starts a helper (`bulkhead-oci egress`, one per pod) that
// redirects what the pod starts in its network namespace to bulkhead's egress proxy and serves
// it from the host's network, writing the log; its `delete` stops it. A pod with no mode
// annotation keeps its CNI network as it is.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "runtime/tier.h"

namespace bulkhead::oci {

// allowlist | open | none: what the egress proxy lets through (net/allow_rules.h)
inline constexpr char kEgressModeAnnotation[] = "egress.bulkhead.dev/mode";
// Comma-separated allow and deny entries: "*.example.com", "example.org:443", "10.1.2.3:5432".
inline constexpr char kEgressAllowAnnotation[] = "egress.bulkhead.dev/allow";
inline constexpr char kEgressDenyAnnotation[] = "egress.bulkhead.dev/deny";
// Where the helpers write each pod's log, <dir>/<namespace>_<name>_<sandbox id>.jsonl (one JSON
// object per decision and per finished connection); the environment variable overrides it.
inline constexpr char kEgressLogDir[] = "/var/log/bulkhead/egress";
inline constexpr char kEgressLogDirVariable[] = "BULKHEAD_OCI_EGRESS_LOG_DIR";
// Upstream DNS servers of the helpers' resolver ("10.96.0.10", "[fd00::a]:53", comma-separated);
// unset, the nameservers of the node's /etc/resolv.conf.
inline constexpr char kEgressDnsVariable[] = "BULKHEAD_OCI_DNS_SERVERS";

struct EgressSettings {
  std::string mode;
  std::vector<std::string> allow, deny;
};
// The pod's settings from its annotations (checked as the daemon checks a sandbox's policy);
// nullopt when it names no mode.
Result<std::optional<EgressSettings>> PodEgressSettings(const std::map<std::string, std::string>& annotations);

// Starts the pod's helper on `netns` (a path); answers once every connection the pod starts
// goes through it. Answers its process.
Result<runtime::SandboxHandle> StartEgressHelper(const std::string& pod, const std::string& netns,
                                       const std::map<std::string, std::string>& annotations,
                                       const EgressSettings& settings);
void StopEgressHelper(const runtime::SandboxHandle& helper);

// `bulkhead-oci egress`: the helper itself. Serves until SIGTERM; "ok" on `ready_fd` once it
// serves.
int RunEgressHelper(const std::string& pod, const std::string& netns, const EgressSettings& settings,
                    const std::string& log, int ready_fd);

}  // namespace bulkhead::oci
