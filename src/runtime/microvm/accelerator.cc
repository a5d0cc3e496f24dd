#include "runtime/microvm/accelerator.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/ctl_protocol.h"
#include "common/read_file.h"

extern char** environ;

namespace bulkhead::runtime::microvm {
namespace {

constexpr char kVerdictFile[] = "/run/bulkhead/microvm-accelerator";
// A guest that boots under KVM prints the sign in well under a second; one that hangs never does.
constexpr auto kProbeTimeout = std::chrono::seconds(20);

// What a kept verdict holds for: this boot of the host, this QEMU, this guest kernel.
std::string VerdictKey(const Installed& installed) {
  std::string boot_id = ReadSmallFile("/proc/sys/kernel/random/boot_id").value_or("");
  while (!boot_id.empty() && boot_id.back() == '\n') boot_id.pop_back();
  return boot_id + "|" + installed.qemu_version + "|" + installed.kernel_version;
}

// Boots the probe guest under KVM: whether it printed the sign, and if not, why.
Accelerator ProbeKvm(const Installed& installed, const std::string& initramfs, const std::string& work_dir) {
  const std::string console = work_dir + "/kvm-probe.console";
  ::unlink(console.c_str());
  VmConfig vm;
  vm.qemu = installed.qemu;
  vm.kernel = installed.kernel;
  vm.initramfs = initramfs;
  vm.command_line = KernelCommandLine("--guest-probe", installed.tsc_khz);
  vm.kvm = true;
  vm.memory_mb = 128;
  vm.console_log = console;
  vm.name = "bulkhead-kvm-probe";
  const std::vector<std::string> args = QemuArgs(vm);
  std::vector<char*> argv;
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const std::string log = work_dir + "/kvm-probe.log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return {false, "cannot run " + installed.qemu + " for the KVM probe"};
  const auto deadline = std::chrono::steady_clock::now() + kProbeTimeout;
  int status = 0;
  bool exited = false;
  while (!(exited = ::waitpid(pid, &status, WNOHANG) == pid) && std::chrono::steady_clock::now() < deadline) {
    if (ReadSmallFile(console).value_or("").find(ctl::kGuestProbeSign) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  if (ReadSmallFile(console).value_or("").find(ctl::kGuestProbeSign) != std::string::npos)
    return {true, "a probe guest booted under KVM"};
  std::string why = ReadLogTail(log, 200);
  for (char& c : why)
    if (c == '\n') c = ' ';
  if (!exited) return {false, "a probe guest hung under KVM (no sign in 20 s)"};
  return {false, "a probe guest did not boot under KVM: " + why};
}

}  // namespace

Accelerator ChooseAccelerator(const Installed& installed, const std::string& initramfs, const std::string& work_dir) {
  if (::access("/dev/kvm", R_OK | W_OK) != 0) return {false, "no usable /dev/kvm"};
  const std::string key = VerdictKey(installed);
  if (auto kept = ReadSmallFile(kVerdictFile)) {
    // "<key>\n<0|1>\n<why>"
    const size_t first = kept->find('\n'), second = kept->find('\n', first + 1);
    if (first != std::string::npos && second != std::string::npos && kept->substr(0, first) == key)
      return {kept->substr(first + 1, second - first - 1) == "1", kept->substr(second + 1) + " (kept verdict)"};
  }
  Accelerator chosen = ProbeKvm(installed, initramfs, work_dir);
  const std::string verdict = key + "\n" + (chosen.kvm ? "1" : "0") + "\n" + chosen.why;
  if (MakeDir("/run/bulkhead", 0700).ok()) (void)WriteWholeFile(kVerdictFile, verdict.data(), verdict.size(), 0600);
  return chosen;
}

}  // namespace bulkhead::runtime::microvm
