// bulkhead-sentry-prewarmer: what runsc runs in place of its Sentry when it finds a
// "gvisor-sentry-prewarmer" among its sidecar binaries (the gvisor tier offers this one:
// runtime/gvisor/gvisor_tier.cc, MakeSidecarDir): `prewarmer BINARY ARGV0 ARGS...` grows its
// descriptor table, then execs BINARY with ARGV0 ARGS... .
//
// Why: the Sentry moves its standard streams to descriptors 253-255 early in its boot, which
// grows its descriptor table from 64 to 256 slots. Linux grows the table of a process whose
// table is shared by threads only after an RCU grace period (expand_fdtable), and the Sentry,
// a Go program, has threads by then: about 15 ms of every gVisor start on this machine went to
// that wait. The table's size survives execve, and this program has a single thread, so here
// it grows at no cost and the Sentry finds it large enough.
//
// It also drops from its capability bounding set (inherited by the Sentry) the capabilities
// no step of a Sentry's boot uses: the Sentry trims its bounding set to what it keeps, one
// capability at a time on all of its threads (each call stops them all, ~0.25 ms apiece), and
// the runsc the tier builds skips the ones already gone (scripts/runsc-patches/
// caps-skip-dropped.patch): ~5 ms less per start. Should a runsc need one of them after all,
// dropping it here is the safe direction: the Sentry would fail to start, visibly.
//
// It uses nothing but a few system calls: it runs on the host, as root in the sandbox's user
// namespace, before every Sentry.
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace {

// The highest descriptor the Sentry moves a standard stream to (runsc's startingStdioFD, 253,
// plus two). A table that holds it has 256 slots, the size the Sentry's would grow to.
constexpr int kHighestSentryDescriptor = 255;

// Devices, clocks, modules, audit, MAC policy, BPF and the like: what a Sentry never holds,
// and none of its boot before the trim (mounting its chroot, reading its spec) asks for.
constexpr int kNeverNeeded[] = {
    CAP_LINUX_IMMUTABLE, CAP_NET_BROADCAST, CAP_IPC_OWNER,  CAP_SYS_MODULE,    CAP_SYS_RAWIO,
    CAP_SYS_PACCT,       CAP_SYS_BOOT,      CAP_SYS_TIME,   CAP_SYS_TTY_CONFIG, CAP_LEASE,
    CAP_AUDIT_WRITE,     CAP_AUDIT_CONTROL, CAP_SETFCAP,    CAP_MAC_OVERRIDE,  CAP_MAC_ADMIN,
    CAP_SYSLOG,          CAP_WAKE_ALARM,    CAP_BLOCK_SUSPEND, CAP_AUDIT_READ, CAP_PERFMON,
    CAP_BPF,
};

void Say(const char* text) {
  size_t length = 0;
  while (text[length] != '\0') ++length;
  (void)!::write(STDERR_FILENO, text, length);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    Say("usage: bulkhead-sentry-prewarmer BINARY ARGV0 [ARGS...] (runsc runs it before its Sentry)\n");
    return 2;
  }
  // The lowest free descriptor at or above the highest needed, so no inherited one is touched;
  // standard input may be closed, so any open descriptor will do as the one duplicated.
  for (int fd = 0; fd <= 2; ++fd) {
    const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, kHighestSentryDescriptor);
    if (high >= 0) {
      ::close(high);
      break;
    }
  }
  // (Had nothing been open, the Sentry grows the table itself: slower, not wrong.)
  // (A capability the kernel does not know, or that is gone already, fails harmlessly.)
  for (const int cap : kNeverNeeded) (void)::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  ::execv(argv[1], argv + 2);
  Say("bulkhead-sentry-prewarmer: cannot exec ");
  Say(argv[1]);
  Say("\n");
  return 127;
}
