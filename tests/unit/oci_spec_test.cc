// bulkhead-oci's reading of what containerd hands it: config.json, mount options, the host's
// mount table, systemd's cgroup names.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/read_file.h"
#include "oci/ceiling.h"
#include "oci/container_cgroup.h"
#include "oci/container_root.h"
#include "oci/container_state.h"
#include "oci/pod_egress.h"
#include "oci/spec.h"

namespace bulkhead::oci {
namespace {

using nlohmann::json;

// What containerd's CRI writes for a container, trimmed to what the runtime reads.
json ContainerConfig() {
  return json::parse(R"({
    "ociVersion": "1.0.2-dev",
    "process": {"user": {"uid": 1000, "gid": 1000, "additionalGids": [1000, 10]},
                "args": ["sh", "-c", "echo hi"], "env": ["PATH=/usr/bin:/bin"], "cwd": "/work",
                "capabilities": {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"], "effective": ["CAP_CHOWN"],
                                 "permitted": ["CAP_CHOWN"]},
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
                "noNewPrivileges": true, "oomScoreAdj": 1000},
    "root": {"path": "rootfs"},
    "hostname": "pod-a",
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
               {"destination": "/etc/hosts", "type": "bind", "source": "/var/lib/x/hosts", "options": ["rbind", "rprivate", "rw"]},
               {"destination": "/data", "source": "/srv", "options": ["bind", "ro"]}],
    "annotations": {"io.kubernetes.cri.sandbox-id": "abc", "io.kubernetes.cri.container-type": "container"},
    "linux": {"resources": {"memory": {"limit": 134217728}, "cpu": {"shares": 512, "quota": 50000, "period": 100000},
                            "pids": {"limit": 100}},
              "cgroupsPath": "/kubepods/besteffort/podx/abc",
              "namespaces": [{"type": "pid"}, {"type": "ipc", "path": "/proc/7/ns/ipc"}, {"type": "uts"},
                             {"type": "mount"}, {"type": "network", "path": "/var/run/netns/cni-1"}],
              "devices": [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438}],
              "maskedPaths": ["/proc/acpi"], "readonlyPaths": ["/proc/bus"],
              "sysctl": {"net.ipv4.ip_unprivileged_port_start": "0"}}
  })");
}

TEST(OciSpec, ReadsWhatContainerdWrites) {
  auto spec = ParseSpec(ContainerConfig());
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->process.uid, 1000u);
  EXPECT_EQ(spec->process.additional_gids, (std::vector<gid_t>{1000, 10}));
  EXPECT_EQ(spec->process.cwd, "/work");
  EXPECT_EQ(spec->process.capabilities.bounding, (1ull << 0) | (1ull << 21));
  EXPECT_EQ(spec->process.capabilities.effective, 1ull << 0);
  ASSERT_EQ(spec->process.rlimits.size(), 1u);
  EXPECT_EQ(spec->process.rlimits[0].resource, RLIMIT_NOFILE);
  EXPECT_EQ(spec->process.oom_score_adj, 1000);
  ASSERT_EQ(spec->mounts.size(), 3u);
  EXPECT_EQ(spec->mounts[1].type, "bind");
  EXPECT_EQ(spec->mounts[2].type, "bind");  // "bind" in the options, no type
  EXPECT_EQ(spec->resources.memory_limit, 134217728);
  EXPECT_EQ(spec->resources.cpu_shares, 512u);
  EXPECT_EQ(spec->resources.pids_limit, 100);
  ASSERT_NE(spec->FindNamespace("network"), nullptr);
  EXPECT_EQ(spec->FindNamespace("network")->path, "/var/run/netns/cni-1");
  EXPECT_EQ(spec->FindNamespace("user"), nullptr);
  ASSERT_EQ(spec->devices.size(), 1u);
  EXPECT_EQ(spec->devices[0].mode, 0666u);
  EXPECT_EQ(spec->annotations.at("io.kubernetes.cri.sandbox-id"), "abc");
}

TEST(OciSpec, RefusesMalformedConfigsWithTheFieldNamed) {
  struct Case {
    const char* pointer;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"/process/args", json::array(), "process.args is empty"},
      {"/process/args", "sh", "\"args\" has the wrong type"},
      {"/process/cwd", "relative", "process.cwd is not an absolute path"},
      {"/process/oomScoreAdj", 5000, "oomScoreAdj"},
      {"/process/capabilities/bounding", json::array({"CAP_NOPE"}), "unknown capability"},
      {"/process/rlimits/0/type", "RLIMIT_BOGUS", "unknown limit"},
      {"/process/rlimits/0/soft", 5000, "soft is above hard"},
      {"/mounts/0/destination", "proc", "not an absolute path"},
      {"/linux/namespaces/0/type", "bogus", "unknown type"},
      {"/linux/namespaces/1/type", "pid", "names pid twice"},
      {"/linux/devices/0/major", 99999, "impossible number"},
      {"/linux/maskedPaths/0", "acpi", "must be absolute"},
      {"/root/path", "", "root.path is empty"},
  };
  for (const Case& c : cases) {
    json config = ContainerConfig();
    config[json::json_pointer(c.pointer)] = c.value;
    auto spec = ParseSpec(config);
    ASSERT_FALSE(spec.ok()) << c.pointer;
    EXPECT_NE(spec.error().message.find(c.message), std::string::npos) << c.pointer << ": " << spec.error().message;
  }
  EXPECT_FALSE(ParseSpec(json::array()).ok());
  EXPECT_FALSE(ParseSpec(json::object()).ok());
}

TEST(OciSpec, NamesCapabilitiesAndRlimits) {
  EXPECT_EQ(CapabilityNumber("CAP_CHOWN"), 0);
  EXPECT_EQ(CapabilityNumber("CAP_SYS_ADMIN"), 21);
  EXPECT_EQ(CapabilityNumber("CAP_CHECKPOINT_RESTORE"), 40);
  EXPECT_EQ(CapabilityNumber("chown"), -1);
  EXPECT_EQ(RlimitNumber("RLIMIT_NPROC"), RLIMIT_NPROC);
  EXPECT_EQ(RlimitNumber("NOFILE"), -1);
}

TEST(OciMountOptions, SplitsFlagsPropagationAndData) {
  auto options = ParseMountOptions({"rbind", "ro", "nosuid", "rslave", "mode=755", "size=65536k", "rw", "noexec"});
  EXPECT_TRUE(options.recursive_bind);
  EXPECT_EQ(options.flags, static_cast<unsigned long>(MS_NOSUID | MS_NOEXEC));  // "rw" after "ro" wins
  EXPECT_EQ(options.propagation, static_cast<unsigned long>(MS_SLAVE | MS_REC));
  EXPECT_EQ(options.data, (std::vector<std::string>{"mode=755", "size=65536k"}));
}

TEST(OciMountOptions, ShiftsIdsIntoTheContainersRange) {
  EXPECT_EQ(ShiftIdOptions({"gid=5", "mode=620", "uid=0"}, 0x10000000),
            (std::vector<std::string>{"gid=268435461", "mode=620", "uid=268435456"}));
  // Beyond the range (or not a number): the container's nobody, never a host id.
  EXPECT_EQ(ShiftIdOptions({"uid=70000", "gid=x"}, 0x10000000),
            (std::vector<std::string>{"uid=268500990", "gid=268500990"}));
}

TEST(OciRootfs, FindsTheOverlayContainerdMountedAndItsLayers) {
  const std::string mountinfo =
      "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
      "90 22 0:50 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/abc/rootfs rw,relatime - overlay overlay "
      "rw,lowerdir=/var/lib/c/snapshots/2/fs:/var/lib/c/snapshots/1/fs,upperdir=/var/lib/c/snapshots/3/fs,"
      "workdir=/var/lib/c/snapshots/3/work,index=off\n"
      "91 22 8:1 /srv/with\\040space /mnt/with\\040space rw - ext4 /dev/sda1 rw\n";
  OverlayLayers layers;
  auto type = MountedType(mountinfo, "/run/containerd/io.containerd.runtime.v2.task/k8s.io/abc/rootfs", &layers);
  ASSERT_TRUE(type.ok());
  EXPECT_EQ(*type, "overlay");
  EXPECT_EQ(layers.lower, (std::vector<std::string>{"/var/lib/c/snapshots/2/fs", "/var/lib/c/snapshots/1/fs"}));
  EXPECT_EQ(layers.upper, "/var/lib/c/snapshots/3/fs");
  EXPECT_EQ(layers.work, "/var/lib/c/snapshots/3/work");
  EXPECT_EQ(layers.other_options, (std::vector<std::string>{"index=off"}));
  EXPECT_EQ(*MountedType(mountinfo, "/mnt/with space", &layers), "ext4");
  EXPECT_EQ(*MountedType(mountinfo, "/nowhere", &layers), "");
  EXPECT_FALSE(MountedType("5 1 0:5 / /r rw - overlay overlay rw,upperdir=/u,workdir=/w\n", "/r", &layers).ok());
}

TEST(OciCgroup, TurnsSystemdNamesIntoPaths) {
  EXPECT_EQ(*SystemdCgroupPath("kubepods-besteffort-pod12.slice:cri-containerd:abc"),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12.slice/cri-containerd-abc.scope");
  EXPECT_EQ(*SystemdCgroupPath("system.slice:docker:abc"), "/system.slice/docker-abc.scope");
  EXPECT_FALSE(SystemdCgroupPath("/kubepods/pod1/abc").ok());
  EXPECT_FALSE(SystemdCgroupPath("a.slice:b:../../etc").ok());
}

TEST(OciCgroup, RefusesPathsThatClimbOut) {
  EXPECT_FALSE(ContainerCgroup::Resolve("/kubepods/../../x", "abc", false).ok());
  EXPECT_FALSE(ContainerCgroup::Resolve("/a/./b", "abc", false).ok());
}

TEST(OciState, AcceptsRuncsContainerIds) {
  EXPECT_TRUE(CheckId("0123abcdef").ok());
  EXPECT_TRUE(CheckId("my_container-1.2").ok());
  for (const char* bad : {"", ".hidden", "a/b", "..", "a b", "x\n"}) EXPECT_FALSE(CheckId(bad).ok()) << bad;
}

}  // namespace
}  // namespace bulkhead::oci

namespace bulkhead::oci {
namespace {

TEST(OciCeiling, RefusesHostDevicesAndCapabilitiesBeyondDockersDefaultWithTheReason) {
  auto spec = ParseSpec(ContainerConfig());
  ASSERT_TRUE(spec.ok());
  spec->devices.clear();
  spec->process.capabilities = {};
  // Docker's default set (what containerd gives a pod asking for none) passes, NET_RAW included.
  spec->process.capabilities.bounding = (1ull << CapabilityNumber("CAP_NET_RAW")) | (1ull << CapabilityNumber("CAP_CHOWN"));
  EXPECT_TRUE(CheckCeiling(*spec).ok());
  spec->devices.push_back({.type = 'c', .major = 1, .minor = 3, .path = "/dev/null"});
  EXPECT_TRUE(CheckCeiling(*spec).ok());

  auto asked = *spec;
  asked.process.capabilities.effective |= 1ull << CapabilityNumber("CAP_SYS_ADMIN");
  auto refused = CheckCeiling(asked);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("CAP_SYS_ADMIN is beyond"), std::string::npos) << refused.error().message;

  auto device = *spec;
  device.devices.push_back({.type = 'b', .major = 8, .minor = 0, .path = "/dev/sda"});
  refused = CheckCeiling(device);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("/dev/sda, b 8:0"), std::string::npos) << refused.error().message;
  device.devices.back() = {.type = 'c', .major = 10, .minor = 229, .path = "/dev/fuse"};
  EXPECT_FALSE(CheckCeiling(device).ok());
}

}  // namespace
}  // namespace bulkhead::oci

namespace bulkhead::oci {
namespace {

TEST(OciPodEgress, ReadsTheAnnotationsAsTheDaemonReadsAPolicy) {
  auto none = PodEgressSettings({{"io.kubernetes.cri.sandbox-id", "abc"}});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto settings = PodEgressSettings({{kEgressModeAnnotation, "allowlist"},
                                     {kEgressAllowAnnotation, " *.example.com, example.org:443 ,10.1.2.3:5432,"},
                                     {kEgressDenyAnnotation, "bad.example.com"}});
  ASSERT_TRUE(settings.ok()) << settings.error().message;
  ASSERT_TRUE(settings->has_value());
  EXPECT_EQ((*settings)->allow, (std::vector<std::string>{"*.example.com", "example.org:443", "10.1.2.3:5432"}));
  EXPECT_EQ((*settings)->deny, (std::vector<std::string>{"bad.example.com"}));
  for (const auto& [annotations, message] : std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {{{kEgressModeAnnotation, "sometimes"}}, "mode"},
           {{{kEgressModeAnnotation, "allowlist"}, {kEgressAllowAnnotation, "*."}}, "allow[0]"},
           {{{kEgressModeAnnotation, "none"}, {kEgressAllowAnnotation, "example.com"}}, "allow"},
           {{{kEgressAllowAnnotation, "example.com"}}, "need egress.bulkhead.dev/mode"}}) {
    auto refused = PodEgressSettings(annotations);
    ASSERT_FALSE(refused.ok()) << message;
    EXPECT_NE(refused.error().message.find(message), std::string::npos) << refused.error().message;
  }
}

}  // namespace
}  // namespace bulkhead::oci

namespace bulkhead::oci {
namespace {

// `update` sets what it names and nothing else: a pids limit of the spec outlives a memory change.
TEST(OciCgroup, ApplyChangesOnlyTheLimitsItNames) {
  auto group = ContainerCgroup::Resolve("/bulkhead-oci-unit-" + std::to_string(::getpid()), "x", false);
  ASSERT_TRUE(group.ok()) << group.error().message;
  Resources made;
  made.pids_limit = 100;
  made.memory_limit = 256 << 20;
  ASSERT_TRUE(group->Create(made).ok());
  Resources update;
  update.memory_limit = 300 << 20;
  EXPECT_TRUE(group->Apply(update).ok());
  auto read = [&](const std::string& file) {
    for (const std::string& dir : group->Dirs())
      if (auto value = ReadSmallFile(dir + "/" + file)) return *value;
    return std::string();
  };
  EXPECT_EQ(read("pids.max"), "100\n");
  EXPECT_EQ(read(group->v2() ? "memory.max" : "memory.limit_in_bytes"), std::to_string(300 << 20) + "\n");
  Resources defaults;  // a spec that sets no pids limit gets bulkhead's
  EXPECT_TRUE(group->Create(defaults).ok());
  EXPECT_EQ(read("pids.max"), std::to_string(kDefaultPidsLimit) + "\n");
  EXPECT_TRUE(group->Remove().ok());
}

}  // namespace
}  // namespace bulkhead::oci
