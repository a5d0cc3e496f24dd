// Unit tests for the gvisor tier's pure parts: the OCI spec runsc starts a sandbox from, which
// runsc versions it refuses, the host limits around a sandbox's own, and the Sentry prewarmer
// (run as a program).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "runtime/gvisor/gvisor_tier.h"
#include "runtime/gvisor/oci_spec.h"
#include "runtime/gvisor/runsc.h"
#include "common/run_program.h"

namespace bulkhead::runtime::gvisor {
namespace {

using json = nlohmann::json;

BundleSpec Sample() {
  BundleSpec spec;
  spec.root = "/run/bulkhead-gvisor/root";
  spec.binds = {{"/usr", "/usr", true}, {"/run/bulkhead-gvisor/volume0", "/data", false}};
  spec.control_source = "/run/bulkhead-gvisor/ctl";
  spec.host_uid = 0x10020000;
  spec.shm_bytes = 128 << 20;
  spec.limits = R"({"cpus":1.0,"memory_bytes":268435456,"pids":64})";
  return spec;
}

const json* MountAt(const json& config, const std::string& target) {
  for (const json& mount : config["mounts"])
    if (mount["destination"] == target) return &mount;
  return nullptr;
}

TEST(OciConfig, InitIsTheOnlyProcessAndContainsItself) {
  const json config = OciConfig(Sample());
  EXPECT_EQ(config["process"]["args"],
            json({"/dev/.bulkhead/bulkhead-init", "--self-contain", "/dev/.bulkhead", "--limits",
                  R"({"cpus":1.0,"memory_bytes":268435456,"pids":64})"}));
  EXPECT_EQ(config["process"]["user"], json({{"uid", 0}, {"gid", 0}}));
  EXPECT_EQ(config["root"], json({{"path", "/run/bulkhead-gvisor/root"}, {"readonly", false}}));
  EXPECT_EQ(config["hostname"], "sandbox");
}

TEST(OciConfig, InitHoldsTheSandboxCapabilitiesAndOnlyWhatItDropsOrKeepsForItself) {
  const json config = OciConfig(Sample());
  const json& bounding = config["process"]["capabilities"]["bounding"];
  EXPECT_EQ(config["process"]["capabilities"]["effective"], bounding);
  EXPECT_NE(std::find(bounding.begin(), bounding.end(), "CAP_SYS_ADMIN"), bounding.end());
  EXPECT_NE(std::find(bounding.begin(), bounding.end(), "CAP_SYS_RESOURCE"), bounding.end());
  for (const char* never : {"CAP_NET_RAW", "CAP_MKNOD", "CAP_SYS_PTRACE", "CAP_NET_ADMIN", "CAP_SYS_MODULE"})
    EXPECT_EQ(std::find(bounding.begin(), bounding.end(), never), bounding.end()) << never;
  EXPECT_EQ(bounding.size(), 14u);  // the 12 of common/sandbox_caps.h, CAP_SYS_ADMIN, CAP_SYS_RESOURCE
}

TEST(OciConfig, RunscGofersAndSentryRunInTheSandboxUidRange) {
  const json config = OciConfig(Sample());
  const json ids = json::array({{{"containerID", 0}, {"hostID", 0x10020000}, {"size", 65536}}});
  EXPECT_EQ(config["linux"]["uidMappings"], ids);
  EXPECT_EQ(config["linux"]["gidMappings"], ids);
  std::vector<std::string> namespaces;
  for (const json& ns : config["linux"]["namespaces"]) namespaces.push_back(ns["type"]);
  EXPECT_NE(std::find(namespaces.begin(), namespaces.end(), "user"), namespaces.end());
  // The launcher's network namespace is the sandbox's (--network=host): no other is asked for.
  EXPECT_EQ(std::find(namespaces.begin(), namespaces.end(), "network"), namespaces.end());
}

TEST(OciConfig, BindsKeepTheirOrderAndModesAndTheControlDirectoryComesLast) {
  const json config = OciConfig(Sample());
  const json* usr = MountAt(config, "/usr");
  const json* data = MountAt(config, "/data");
  const json* control = MountAt(config, "/dev/.bulkhead");
  ASSERT_TRUE(usr && data && control);
  EXPECT_EQ((*usr)["options"], json({"rbind", "ro", "nosuid", "nodev"}));
  EXPECT_EQ((*data)["source"], "/run/bulkhead-gvisor/volume0");
  EXPECT_EQ((*data)["options"], json({"rbind", "rw", "nosuid", "nodev"}));
  EXPECT_EQ((*control)["source"], "/run/bulkhead-gvisor/ctl");
  EXPECT_EQ(config["mounts"].back()["destination"], "/dev/.bulkhead");
  const json* shm = MountAt(config, "/dev/shm");
  ASSERT_TRUE(shm);
  EXPECT_NE(std::find((*shm)["options"].begin(), (*shm)["options"].end(), "size=134217728"), (*shm)["options"].end());
}

TEST(RunscVersion, NamesItsDate) {
  EXPECT_EQ(VersionDate("runsc version 0.0~20221219.0"), 20221219);
  EXPECT_EQ(VersionDate("runsc version 0.0.0-20260905035102-160fafc42237"), 20260905);
  EXPECT_EQ(VersionDate("runsc version release-20240101.0"), 20240101);
  EXPECT_EQ(VersionDate("runsc version VERSION_MISSING"), 0);
  EXPECT_EQ(VersionDate("runsc version 12345678"), 0);  // not a date
  EXPECT_EQ(VersionDate("build 1220221219"), 0);        // digits inside a longer number do not start one
}

TEST(GvisorLimitsInside, ThePidsLimitIsWhatTheMemoryCanCarry) {
  const ctl::LimitsMessage small = GvisorTier::InsideLimits({.cpus = 0.5, .memory_mb = 96, .pids = 512});
  EXPECT_EQ(small.memory_bytes, 96 << 20);
  EXPECT_EQ(small.pids, 32);  // 96 MiB carry 32 tasks of 3 MiB
  EXPECT_DOUBLE_EQ(small.cpus, 0.5);
  EXPECT_EQ(GvisorTier::InsideLimits({.cpus = 1, .memory_mb = 1024, .pids = 512}).pids, 341);  // 1 GiB carry 341
  EXPECT_EQ(GvisorTier::InsideLimits({.cpus = 1, .memory_mb = 16, .pids = 512}).pids, 16);  // never fewer
}

TEST(GvisorHostLimits, LeaveRoomForTheSentryAndItsThreads) {
  const Limits host = GvisorTier::HostLimits({.cpus = 0.5, .memory_mb = 256, .pids = 100});
  EXPECT_DOUBLE_EQ(host.cpus, 0.5);
  EXPECT_EQ(host.memory_mb, 256 + 85 * 3 + 64);  // its memory, its tasks' cost (85 carried), the Sentry's room
  EXPECT_EQ(host.pids, 100 * 2 + 512);
  EXPECT_EQ(GvisorTier::HostLimits({.cpus = 1, .memory_mb = 4096, .pids = 512}).memory_mb, 4096 + 1536 + 512);
  EXPECT_EQ(GvisorTier::HostLimits({.cpus = 1, .memory_mb = 64, .pids = 512}).memory_mb, 64 + 21 * 3 + 64);
}


std::string Prewarmer() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path() / "bulkhead-sentry-prewarmer";
}

// A field of /proc/self/status as the program run by argv printed it. It runs as a grandchild
// of a child that closed every descriptor above 2, so that its descriptor table is the size a
// process with few descriptors gets (a forked table is sized by the highest open descriptor:
// ours may hold one as high as the 255 a shell keeps), whatever this test inherited.
std::string StatusField(const std::vector<std::string>& argv, const std::string& field) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return "";
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::close_range(3, ~0U, 0);
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      std::vector<char*> args;
      for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(grandchild, &status, 0);
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
  }
  ::close(out[1]);
  std::string printed;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) printed.append(buf, n);
  ::close(out[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << argv[0] << " failed: " << printed;
  std::istringstream lines(printed);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(field + ":", 0) == 0) return line.substr(line.find_first_not_of(" \t", field.size() + 1));
  ADD_FAILURE() << field << " not in " << printed;
  return "";
}

TEST(SentryPrewarmer, TheProgramItExecsFindsA256SlotDescriptorTable) {
  // Without it the table is the kernel's smallest (else the test proves nothing).
  EXPECT_LT(std::stoi(StatusField({"/bin/cat", "/proc/self/status"}, "FDSize")), 256);
  EXPECT_GE(std::stoi(StatusField({Prewarmer(), "/bin/cat", "cat", "/proc/self/status"}, "FDSize")), 256);
}

TEST(SentryPrewarmer, DropsOnlyCapabilitiesNoSentryUsesFromTheBoundingSet) {
  const uint64_t before = std::stoull(StatusField({"/bin/cat", "/proc/self/status"}, "CapBnd"), nullptr, 16);
  const uint64_t after =
      std::stoull(StatusField({Prewarmer(), "/bin/cat", "cat", "/proc/self/status"}, "CapBnd"), nullptr, 16);
  auto bit = [](int cap) { return uint64_t{1} << cap; };
  for (int gone : {CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_TIME, CAP_MAC_ADMIN, CAP_BPF, CAP_AUDIT_WRITE})
    EXPECT_EQ(after & bit(gone), 0u) << "capability " << gone;
  // What the Sentry keeps or uses before it trims the set itself stays as it was.
  for (int kept : {CAP_SYS_ADMIN, CAP_SYS_CHROOT, CAP_SETPCAP, CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_DAC_OVERRIDE,
                   CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID, CAP_NET_ADMIN, CAP_NET_BIND_SERVICE, CAP_NET_RAW,
                   CAP_SYS_PTRACE, CAP_SYS_RESOURCE, CAP_KILL})
    EXPECT_EQ(after & bit(kept), before & bit(kept)) << "capability " << kept;
  EXPECT_EQ(after & ~before, 0u);
}

TEST(SentryPrewarmer, ExecsWhatItIsGivenAndSaysWhenItCannot) {
  auto echoed = RunProgramOutput({Prewarmer(), "/bin/echo", "echo", "as", "given"});
  ASSERT_TRUE(echoed) << echoed.error().message;
  EXPECT_EQ(*echoed, "as given\n");
  auto missing = RunProgramOutput({Prewarmer(), "/nonexistent/sentry", "runsc-sandbox"});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("cannot exec /nonexistent/sentry"), std::string::npos) << missing.error().message;
  EXPECT_FALSE(RunProgram({Prewarmer(), "/bin/true"}));  // too few arguments
}

}  // namespace
}  // namespace bulkhead::runtime::gvisor
