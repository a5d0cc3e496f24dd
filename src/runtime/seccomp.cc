#include "runtime/seccomp.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <memory>

#include "common/unique_fd.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

namespace bulkhead::runtime {
namespace {

// Calls refused with EPERM, whatever their arguments.
constexpr const char* kDenied[] = {
    // keyrings are not namespaced
    "add_key", "keyctl", "request_key",
    // kernel attack surface with a long CVE list
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    // the kernel itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module",
    "get_kernel_syms", "query_module", "reboot", "syslog", "iopl", "ioperm", "lookup_dcookie",
    "nfsservctl", "_sysctl", "uselib", "vm86", "vm86old", "vhangup",
    // file handles bypass path checks (the "shocker" escape)
    "open_by_handle_at", "name_to_handle_at",
    "swapon", "swapoff",
    // mounts and namespaces
    "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "setns",
    // clocks and accounting (clock_adjtime stays: glibc's read-only adjtimex() uses it, and
    // any change needs CAP_SYS_TIME in the host's user namespace)
    "clock_settime", "clock_settime64", "settimeofday", "stime", "acct", "quotactl", "quotactl_fd",
    // NUMA memory policy: kernel surface no sandbox needs (Docker gates it on CAP_SYS_NICE);
    // get_mempolicy, read-only, stays
    "mbind", "set_mempolicy", "set_mempolicy_home_node", "migrate_pages", "move_pages",
    // tracing of the whole system
    "fanotify_init", "kcmp",
};

// Syscalls newer than this filter's review (x86_64 456, futex_requeue, is the last one it
// knows by name) answer ENOSYS, so what a future kernel adds is refused until reviewed, as an
// allow-list would; programs treat ENOSYS as "not supported here" and fall back. The
// ones that were reviewed are let through. Since Linux 5.1 new syscalls take the same number
// on every architecture, so one table serves x86_64 and aarch64; libseccomp 2.5.4 has no names
// for them.
constexpr int kFirstUnreviewedSyscall = 457;
constexpr int kUnreviewedSyscallsEnd = 600;
constexpr int kReviewedNewSyscalls[] = {
    457,  // statmount: reads the mount table the sandbox already sees
    458,  // listmount
    462,  // mseal: seals the caller's own mappings
    464,  // getxattrat
    465,  // listxattrat
    468,  // file_getattr: the FS_IOC_FSGETXATTR ioctl as a syscall
};

// Namespace flags that unshare and clone may not carry.
constexpr uint64_t kNamespaceFlags[] = {CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
                                        CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWCGROUP, CLONE_NEWTIME};

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

}  // namespace

Result<std::vector<sock_filter>> BuildSeccompFilter() {
  std::unique_ptr<void, CtxDeleter> holder(seccomp_init(SCMP_ACT_ALLOW));
  scmp_filter_ctx ctx = holder.get();
  if (!ctx) return MakeError(ErrorCode::kInternal, "seccomp_init failed");
  // Only the native ABI; i386 and x32 calls kill the process (libseccomp's bad-arch action).
  if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0)
    return MakeError(ErrorCode::kInternal, "seccomp badarch attr");
  // A binary search over the syscall numbers instead of a list: ~10 instructions run per call
  // instead of ~150. It also makes gVisor's install of the filter cheap (the Sentry runs the
  // filter once per syscall number to cache its answers: 3 ms of every gVisor sandbox's start
  // with the list).
  if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2) != 0)
    return MakeError(ErrorCode::kInternal, "seccomp optimize attr");
  const uint32_t deny = SCMP_ACT_ERRNO(EPERM);

  auto add = [&](int nr, unsigned count, const scmp_arg_cmp* args) -> Status {
    int rc = seccomp_rule_add_array(ctx, deny, nr, count, args);
    if (rc != 0 && rc != -EDOM) return MakeError(ErrorCode::kInternal, "seccomp rule " + std::to_string(nr) + ": " + std::to_string(rc));
    return {};
  };

  for (const char* name : kDenied) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR || nr < 0) continue;  // not a syscall on this architecture
    BH_TRY(add(nr, 0, nullptr));
  }
  for (int nr = kFirstUnreviewedSyscall; nr < kUnreviewedSyscallsEnd; ++nr) {
    if (std::find(std::begin(kReviewedNewSyscalls), std::end(kReviewedNewSyscalls), nr) !=
        std::end(kReviewedNewSyscalls))
      continue;
    if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0); rc != 0 && rc != -EDOM)
      return MakeError(ErrorCode::kInternal, "seccomp rule " + std::to_string(nr) + ": " + std::to_string(rc));
  }
  // clone3 passes its flags in memory seccomp cannot read: answer ENOSYS so libc falls back
  // to clone, whose flags we can check.
  if (int nr = seccomp_syscall_resolve_name("clone3"); nr >= 0) {
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0) != 0)
      return MakeError(ErrorCode::kInternal, "seccomp clone3");
  }
  for (uint64_t flag : kNamespaceFlags) {
    scmp_arg_cmp a = SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag);
    BH_TRY(add(SCMP_SYS(unshare), 1, &a));
    BH_TRY(add(SCMP_SYS(clone), 1, &a));
  }
  // Socket families: an allow-list (unix, inet, inet6, netlink). The others bypass the
  // network policy (packet), reach the hypervisor (vsock), or load rarely used protocol
  // code with a long CVE list (AF_ALG's page-cache write, CVE-2026-31431; can, tipc, rds...).
  // The kernel reads the family as an int, so any value with upper bits set is >= 17 too.
  static_assert(AF_UNIX == 1 && AF_INET == 2 && AF_INET6 == 10 && AF_NETLINK == 16);
  for (scmp_datum_t domain : {0, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15}) {
    scmp_arg_cmp a = SCMP_A0(SCMP_CMP_EQ, domain);
    BH_TRY(add(SCMP_SYS(socket), 1, &a));
    BH_TRY(add(SCMP_SYS(socketpair), 1, &a));
  }
  {
    scmp_arg_cmp a = SCMP_A0(SCMP_CMP_GE, static_cast<scmp_datum_t>(AF_NETLINK + 1));
    BH_TRY(add(SCMP_SYS(socket), 1, &a));
    BH_TRY(add(SCMP_SYS(socketpair), 1, &a));
  }
  for (int domain : {AF_INET, AF_INET6}) {
    scmp_arg_cmp a[2] = {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(domain)),
                         SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW)};
    BH_TRY(add(SCMP_SYS(socket), 2, a));
  }
  // Terminal injection into a session outside the command.
  for (unsigned long req : {TIOCSTI, TIOCLINUX}) {
    scmp_arg_cmp a = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, static_cast<scmp_datum_t>(req));
    BH_TRY(add(SCMP_SYS(ioctl), 1, &a));
  }
  // Device nodes: the user namespace refuses them already; say so twice.
  for (int nr : {SCMP_SYS(mknod), SCMP_SYS(mknodat)}) {
    unsigned arg = nr == SCMP_SYS(mknod) ? 1 : 2;
    for (scmp_datum_t type : {scmp_datum_t(S_IFCHR), scmp_datum_t(S_IFBLK)}) {
      scmp_arg_cmp a = {arg, SCMP_CMP_MASKED_EQ, S_IFMT, type};
      BH_TRY(add(nr, 1, &a));
    }
  }

  // Export the BPF program through a memfd and read it back as sock_filter instructions.
  UniqueFd mem(::memfd_create("seccomp-bpf", MFD_CLOEXEC));
  if (!mem) return SystemError("memfd_create", errno);
  if (seccomp_export_bpf(ctx, mem.get()) != 0) return MakeError(ErrorCode::kInternal, "seccomp_export_bpf");
  off_t size = ::lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % sizeof(sock_filter) != 0) return MakeError(ErrorCode::kInternal, "bad BPF size");
  std::vector<sock_filter> prog(size / sizeof(sock_filter));
  if (::pread(mem.get(), prog.data(), size, 0) != size) return SystemError("read BPF", errno);
  return prog;
}

}  // namespace bulkhead::runtime
