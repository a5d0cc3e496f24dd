#include "init/guest_boot.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/random.h>
#include <linux/vm_sockets.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "common/ctl_messages.h"
#include "common/ctl_protocol.h"
#include "common/guest_link.h"
#include "common/read_file.h"
#include "common/unique_fd.h"
#include "init/mount_steps.h"
#include "init/self_contain.h"

namespace bulkhead::init {
namespace {

constexpr char kNewRoot[] = "/newroot";
constexpr char kRootTag[] = "root";
// Where the initramfs holds the kernel modules and their load order, and the seccomp filter.
constexpr char kModules[] = "/modules";
constexpr char kInitramfsFilter[] = "/seccomp.bpf";
// The control directory below the sandbox's /dev, as the gvisor tier's (hidden by SelfContain).
constexpr char kControlDir[] = "/dev/.bulkhead";

// Step 1's modules: those in the order file less `skip` (names without .ko).
Status LoadModules(const std::set<std::string>& skip) {
  auto order = ReadSmallFile(std::string(kModules) + "/order");
  if (!order) return {};  // a kernel with the drivers built in
  std::istringstream names(*order);
  for (std::string name; std::getline(names, name);) {
    if (name.empty() || skip.contains(name.substr(0, name.rfind(".ko")))) continue;
    const std::string path = std::string(kModules) + "/" + name;
    UniqueFd module(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!module) return SystemError("open " + path, errno);
    if (::syscall(SYS_finit_module, module.get(), "", 0) != 0 && errno != EEXIST)
      return SystemError("load module " + name, errno);
  }
  return {};
}

// Makes each missing directory of `path` (absolute, clean: ctl::DecodeGuestBootArg) below
// `root`, refusing to follow a symlink the sandbox's files hold on the way.
Status MakeMountPoint(const std::string& root, const std::string& path) {
  UniqueFd dir(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return SystemError("open " + root, errno);
  std::istringstream parts(path);
  for (std::string name; std::getline(parts, name, '/');) {
    if (name.empty()) continue;
    if (::mkdirat(dir.get(), name.c_str(), 0755) != 0 && errno != EEXIST)
      return SystemError("mkdir " + path, errno);
    UniqueFd next(::openat(dir.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next) return SystemError("volume mount point " + path + " is not a directory", errno);
    dir = std::move(next);
  }
  return {};
}

// Step 2.
// A virtio-fs share by its tag. A device's `driver` link (WaitForDevices) shows before the
// driver's probe has registered the tag, and until it has, the mount fails with EINVAL: seen
// on a loaded host, where a probe takes milliseconds.
Status MountShare(const std::string& tag, const std::string& target, unsigned long flags) {
  for (int attempt = 0;; attempt++) {
    if (::mount(tag.c_str(), target.c_str(), "virtiofs", flags, nullptr) == 0) return {};
    if (errno != EINVAL || attempt == 2500) return SystemError("mount " + target, errno);
    ::usleep(2000);
  }
}

Status MountFiles(const ctl::GuestBootMessage& boot) {
  BH_TRY(MakeDir(kNewRoot, 0755));
  BH_TRY(MountShare(kRootTag, kNewRoot, MS_NOSUID));
  for (const ctl::GuestVolume& volume : boot.volumes) {
    BH_TRY(MakeMountPoint(kNewRoot, volume.target));
    const std::string target = kNewRoot + volume.target;
    BH_TRY(MountShare(volume.tag, target, MS_NOSUID | MS_NODEV | (volume.read_only ? MS_RDONLY : 0)));
  }
  return {};
}

struct Device {
  const char* name;
  unsigned major, minor;
};
constexpr Device kDevices[] = {{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7},
                               {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
struct Link {
  const char* name;
  const char* target;
};
constexpr Link kLinks[] = {{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
                           {"stderr", "/proc/self/fd/2"}, {"ptmx", "pts/ptmx"}};

// Step 3: what the native tier's launcher mounts (runtime/native/contain.cc).
Status MountSystem(const ctl::GuestBootMessage& boot) {
  const std::string root = kNewRoot;
  BH_TRY(MakeDir(root + "/proc", 0555));
  BH_TRY(Mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  BH_TRY(MakeDir(root + "/dev", 0755));
  BH_TRY(Mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=64k"));
  for (const Device& d : kDevices) {
    const std::string path = root + "/dev/" + d.name;
    if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(d.major, d.minor)) != 0 || ::chmod(path.c_str(), 0666) != 0)
      return SystemError("mknod " + path, errno);
  }
  for (const Link& l : kLinks) {
    const std::string path = root + "/dev/" + l.name;
    if (::symlink(l.target, path.c_str()) != 0) return SystemError("symlink " + path, errno);
  }
  BH_TRY(MakeDir(root + "/dev/pts", 0755));
  BH_TRY(Mount("devpts", root + "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"));
  BH_TRY(MakeDir(root + "/dev/shm", 0755));
  const std::string shm = "mode=1777,size=" + std::to_string(boot.limits.memory_bytes / 2 / (1 << 20) + 1) + "m";
  BH_TRY(Mount("tmpfs", root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, shm.c_str()));
  BH_TRY(MakeDir(root + "/sys", 0555));
  BH_TRY(Mount("sysfs", root + "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  // What a guest's sysfs shows of the host beyond the VM's own devices: the firmware tables
  // QEMU generated (ACPI) and power-capping energy counters (a side channel where a VMM
  // passes them through). Empty read-only tmpfs over each, as the native tier masks /proc.
  for (const char* masked : {"/sys/firmware", "/sys/class/powercap", "/sys/devices/virtual/powercap"}) {
    const std::string path = root + masked;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    BH_TRY(Mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555"));
  }
  if (::sethostname("sandbox", 7) != 0) return SystemError("sethostname", errno);
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, "lo", 3);
  if (!s || ::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return SystemError("loopback", errno);
  ifr.ifr_flags |= IFF_UP;
  if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return SystemError("bring lo up", errno);
  return {};
}

sockaddr Ipv4(const char* text) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  ::inet_pton(AF_INET, text, &address.sin_addr);
  sockaddr out{};
  std::memcpy(&out, &address, sizeof address);
  return out;
}

// The IPv6 half of ConfigureNetwork: eth0's unique local address (no DAD, no router
// advertisements: the gateway is the only other node) and the default route through the
// gateway's, where the namespace's table sends TCP to the egress proxy as for IPv4. A kernel
// without IPv6 (ipv6.disable=1) keeps an IPv4-only guest.
Status ConfigureIpv6(unsigned eth0_index) {
  UniqueFd s(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s && errno == EAFNOSUPPORT) return {};
  if (!s) return SystemError("socket for eth0's IPv6", errno);
  const std::string conf = std::string("/proc/sys/net/ipv6/conf/") + guest_link::kGuestName;
  BH_TRY(WriteSmallFile(conf + "/accept_dad", "0"));
  BH_TRY(WriteSmallFile(conf + "/accept_ra", "0"));
  struct {  // the kernel's struct in6_ifreq (linux/ipv6.h clashes with glibc's headers)
    in6_addr address;
    uint32_t prefix_length;
    int index;
  } request{};
  ::inet_pton(AF_INET6, guest_link::kGuestAddress6, &request.address);
  request.prefix_length = guest_link::kPrefixLength6;
  request.index = static_cast<int>(eth0_index);
  if (::ioctl(s.get(), SIOCSIFADDR, &request) != 0) return SystemError("eth0 IPv6 address", errno);
  in6_rtmsg route{};
  ::inet_pton(AF_INET6, guest_link::kGatewayAddress6, &route.rtmsg_gateway);
  route.rtmsg_flags = RTF_UP | RTF_GATEWAY;
  route.rtmsg_metric = 1;
  route.rtmsg_ifindex = static_cast<int>(eth0_index);
  if (::ioctl(s.get(), SIOCADDRT, &route) != 0) return SystemError("IPv6 default route", errno);
  return {};
}

// Step 3 with a NIC: eth0 gets the guest's addresses and default routes through the gateway,
// ping sockets work, and the sandbox's resolv.conf (a regular file: a symlink's target would be looked up outside
// the new root) names the gateway's resolver: the guest's loopback is its own.
Status ConfigureNetwork() {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return SystemError("socket for eth0", errno);
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, guest_link::kGuestName, sizeof guest_link::kGuestName);
  ifr.ifr_addr = Ipv4(guest_link::kGuestAddress);
  if (::ioctl(s.get(), SIOCSIFADDR, &ifr) != 0) return SystemError("eth0 address", errno);
  ifr.ifr_netmask = Ipv4(guest_link::kNetmask);
  if (::ioctl(s.get(), SIOCSIFNETMASK, &ifr) != 0) return SystemError("eth0 netmask", errno);
  if (::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return SystemError("eth0 flags", errno);
  ifr.ifr_flags |= IFF_UP;
  if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return SystemError("bring eth0 up", errno);
  rtentry route{};
  route.rt_dst = Ipv4("0.0.0.0");
  route.rt_genmask = Ipv4("0.0.0.0");
  route.rt_gateway = Ipv4(guest_link::kGatewayAddress);
  route.rt_flags = RTF_UP | RTF_GATEWAY;
  if (::ioctl(s.get(), SIOCADDRT, &route) != 0) return SystemError("default route", errno);
  BH_TRY(ConfigureIpv6(::if_nametoindex(guest_link::kGuestName)));
  // Ping sockets for every group, as in the other tiers' namespaces (open_link.h).
  BH_TRY(WriteSmallFile("/proc/sys/net/ipv4/ping_group_range", "0 2147483647"));

  const std::string resolv_conf = std::string(kNewRoot) + "/etc/resolv.conf";
  struct stat st {};
  if (::lstat(resolv_conf.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  const std::string ours = std::string("nameserver ") + guest_link::kGatewayAddress + "\n";
  BH_TRY(WriteWholeFile("/resolv.conf", ours.data(), ours.size(), 0644));
  return Mount("/resolv.conf", resolv_conf, nullptr, MS_BIND, nullptr);
}

// Step 4: the initramfs's own mounts go, the new root moves over it.
Status SwitchRoot() {
  for (const char* mount : {"/proc", "/sys", "/dev"}) ::umount2(mount, MNT_DETACH);
  if (::chdir(kNewRoot) != 0) return SystemError("chdir /newroot", errno);
  BH_TRY(Mount(".", "/", nullptr, MS_MOVE, nullptr));
  if (::chroot(".") != 0) return SystemError("chroot", errno);
  if (::chdir("/") != 0) return SystemError("chdir /", errno);
  return {};
}

// Step 5's listener.
Status ListenVsock(uint32_t port) {
  int fd = ::socket(AF_VSOCK, SOCK_STREAM, 0);
  if (fd < 0) return SystemError("vsock socket", errno);
  sockaddr_vm addr{};
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = VMADDR_CID_ANY;
  addr.svm_port = port;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return SystemError("vsock bind", errno);
  if (::listen(fd, 128) != 0) return SystemError("vsock listen", errno);
  if (fd != ctl::kListenFd) {
    if (::dup3(fd, ctl::kListenFd, 0) != ctl::kListenFd) return SystemError("dup3", errno);
    ::close(fd);
  }
  return {};
}

// Step 6's socket, made before seccomp (the filter refuses new vsock sockets), above the fds
// init's protocol names.
Result<UniqueFd> ReadySocket() {
  UniqueFd fd(::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return SystemError("vsock socket", errno);
  UniqueFd high(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 16));
  if (!high) return SystemError("dup the ready socket", errno);
  return high;
}

// Step 6: tells the host that init serves (ctl::kGuestReadyPort).
Status SignalReady(const UniqueFd& socket) {
  sockaddr_vm host{};
  host.svm_family = AF_VSOCK;
  host.svm_cid = VMADDR_CID_HOST;
  host.svm_port = ctl::kGuestReadyPort;
  if (::connect(socket.get(), reinterpret_cast<sockaddr*>(&host), sizeof host) != 0)
    return SystemError("tell the host that init serves", errno);
  return {};
}

// Step 1.
Status MountEarlyAndLoadModules(const std::set<std::string>& skip_modules) {
  BH_TRY(MakeDir("/proc", 0555));
  BH_TRY(Mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  BH_TRY(MakeDir("/sys", 0555));
  BH_TRY(Mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr));
  BH_TRY(MakeDir("/dev", 0755));
  BH_TRY(Mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC, nullptr));
  return LoadModules(skip_modules);
}

Status StartClockKeeper();

// Steps 2 to 6.
Status BootFrom(const ctl::GuestBootMessage& boot) {
  auto filter = ReadFilter(kInitramfsFilter);
  if (!filter) return filter.error();
  BH_TRY(MountFiles(boot));
  BH_TRY(MountSystem(boot));
  if (boot.network) BH_TRY(ConfigureNetwork());
  BH_TRY(SwitchRoot());
  BH_TRY(StartClockKeeper());
  BH_TRY(MakeDir(kControlDir, 0700));
  BH_TRY(ListenVsock(boot.vsock_port));
  auto ready = ReadySocket();
  if (!ready) return ready.error();
  BH_TRY(ContainListening(kControlDir, boot.limits, std::move(*filter), /*whole_kernel=*/true));
  return SignalReady(*ready);
}

// The /dev node of the virtio serial port named `name`.
Result<std::string> VirtioPort(const std::string& name) {
  const std::string ports = "/sys/class/virtio-ports";
  DIR* dir = ::opendir(ports.c_str());
  if (!dir) return SystemError("open " + ports, errno);
  std::string found;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    auto text = ReadSmallFile(ports + "/" + entry->d_name + "/name");
    if (text && text->substr(0, text->find('\n')) == name) found = std::string("/dev/") + entry->d_name;
  }
  ::closedir(dir);
  if (found.empty()) return MakeError(ErrorCode::kNotFound, "no virtio serial port " + name);
  return found;
}

// The template's wait: the sign out, the boot message's line in, on its virtio serial port.
Result<std::string> WaitForBootMessage() {
  // The port appears once the host's side of the device announced it, after the driver bound.
  auto path = VirtioPort(ctl::kGuestTemplatePort);
  for (int attempt = 0; !path && attempt < 2000; attempt++) {
    ::usleep(5000);
    path = VirtioPort(ctl::kGuestTemplatePort);
  }
  if (!path) return path.error();
  UniqueFd port(::open(path->c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!port) return SystemError("open " + *path, errno);
  const std::string sign = std::string(ctl::kGuestTemplateSign) + "\n";
  if (::write(port.get(), sign.data(), sign.size()) != static_cast<ssize_t>(sign.size()))
    return SystemError("write the template's sign", errno);
  std::string line;
  char buffer[4096];
  while (line.find('\n') == std::string::npos) {
    const ssize_t n = ::read(port.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SystemError("read the boot message", errno);
    if (n == 0) {
      // No host on the port's other end (a restored copy runs before the host connects): the
      // host sends the message once it is there.
      ::usleep(1000);
      continue;
    }
    line.append(buffer, static_cast<size_t>(n));
    if (line.size() > 2 * 65536 + 1) return MakeError(ErrorCode::kInvalid, "the boot message is too long");
  }
  return line.substr(0, line.find('\n'));
}

// A restored copy's clock is the template's: the host's wall clock replaces it.
Status SetClock(int64_t realtime_ns) {
  const timespec now{static_cast<time_t>(realtime_ns / 1000000000), static_cast<long>(realtime_ns % 1000000000)};
  if (::clock_settime(CLOCK_REALTIME, &now) != 0) return SystemError("set the clock", errno);
  return {};
}

// Every copy of a template starts from the same random state: the host's bytes are mixed in
// (credited) and the kernel's generator reseeded before anything of the sandbox runs.
Status Reseed(const std::string& hex) {
  constexpr size_t kBytes = 32;  // (DecodeGuestBootArg checked the 64 hex digits)
  alignas(rand_pool_info) unsigned char storage[sizeof(rand_pool_info) + kBytes] = {};
  auto* entropy = reinterpret_cast<rand_pool_info*>(storage);
  entropy->entropy_count = 8 * kBytes;
  entropy->buf_size = kBytes;
  auto* bytes = reinterpret_cast<unsigned char*>(entropy->buf);
  for (size_t i = 0; i < kBytes; i++)
    bytes[i] = static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  UniqueFd random(::open("/dev/urandom", O_RDWR | O_CLOEXEC));
  if (!random) return SystemError("open /dev/urandom", errno);
  if (::ioctl(random.get(), RNDADDENTROPY, entropy) != 0) return SystemError("add the host's entropy", errno);
  if (::ioctl(random.get(), RNDRESEEDCRNG) != 0) return SystemError("reseed the random generator", errno);
  return {};
}

// The clock keeper: a child init forks before it drops its privileges, which keeps
// CAP_SYS_TIME and CAP_SYS_ADMIN (and nothing else) to set the guest's clock and reseed its
// random generator when init asks: after a memory snapshot's restore, the guest's clock is the
// snapshot's and its random state is every other copy's (ctl::kFreeze's thaw carries the host's
// clock and entropy). init, under the sandbox's seccomp filter, could do neither. The workload
// cannot reach it (its socket is init's; ptrace and /proc/PID/mem need capabilities it lacks);
// it can only kill it, which stops the clock from being set, nothing more.
struct ClockAndEntropy {
  int64_t realtime_ns = 0;
  char entropy[64] = {};
};
int clock_keeper = -1;  // init's end of the keeper's socket

[[noreturn]] void KeepClock(int socket) {
  (void)::prctl(PR_SET_NAME, "bulkhead-clock", 0, 0, 0);
  const uint64_t keep = (uint64_t{1} << CAP_SYS_TIME) | (uint64_t{1} << CAP_SYS_ADMIN);
  for (int cap = 0; cap <= 63; cap++)
    if (!(keep & (uint64_t{1} << cap))) (void)::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  for (int i = 0; i < 2; i++) data[i].effective = data[i].permitted = static_cast<uint32_t>(keep >> (32 * i));
  if (::syscall(SYS_capset, &header, data) != 0 || ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(1);
  while (true) {
    ClockAndEntropy m;
    const ssize_t n = ::recv(socket, &m, sizeof m, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(0);
    if (n != sizeof m) continue;
    if (m.realtime_ns > 0) (void)SetClock(m.realtime_ns);
    const std::string hex(m.entropy, sizeof m.entropy);
    if (hex.find_first_not_of("0123456789abcdef") == std::string::npos) (void)Reseed(hex);
  }
}

Status StartClockKeeper() {
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) return SystemError("socketpair", errno);
  const pid_t pid = ::fork();
  if (pid < 0) return SystemError("fork the clock keeper", errno);
  if (pid == 0) {
    ::close(ends[0]);
    KeepClock(ends[1]);
  }
  ::close(ends[1]);
  // Above the fds init's protocol names (ListenVsock's dup3 would close it).
  clock_keeper = ::fcntl(ends[0], F_DUPFD_CLOEXEC, 16);
  if (clock_keeper < 0) return SystemError("dup the clock keeper's socket", errno);
  ::close(ends[0]);
  return {};
}

// The sandbox's devices, which the host added to the restored copy (PCI hotplug): the kernel
// finds them on the ACPI event, asynchronously. Waits until `count` virtio devices have a
// driver (the boot port's is one).
Status WaitForDevices(size_t count) {
  const std::string devices = "/sys/bus/virtio/devices";
  for (int attempt = 0; attempt < 5000; attempt++) {
    size_t bound = 0;
    if (DIR* dir = ::opendir(devices.c_str())) {
      while (const dirent* entry = ::readdir(dir)) {
        struct stat st {};
        if (entry->d_name[0] != '.' && ::stat((devices + "/" + entry->d_name + "/driver").c_str(), &st) == 0) bound++;
      }
      ::closedir(dir);
    }
    if (bound >= count) return {};
    ::usleep(2000);
  }
  return MakeError(ErrorCode::kInternal, "the sandbox's devices did not appear in the guest");
}

}  // namespace

[[noreturn]] void GuestProbe() {
  std::fputs(ctl::kGuestProbeSign, stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  ::sync();
  ::reboot(RB_POWER_OFF);
  ::_exit(1);
}

Status GuestBoot(const std::string& arg) {
  auto boot = ctl::DecodeGuestBootArg(arg);
  if (!boot) return boot.error();
  // A booted guest runs on QEMU's microvm machine: no PCI transport, no serial port (a
  // template's, on the pc machine), and no NIC driver without a NIC. Each module loaded
  // costs ~20 ms of the start under TCG (~350 ms for all of them).
  std::set<std::string> skip = {"virtio_pci", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_console"};
  if (!boot->network) skip.insert({"virtio_net", "net_failover", "failover"});
  BH_TRY(MountEarlyAndLoadModules(skip));
  return BootFrom(*boot);
}

Status SetGuestClock(int64_t realtime_ns, const std::string& entropy) {
  if (clock_keeper < 0) return MakeError(ErrorCode::kInvalid, "this init keeps no guest clock");
  ClockAndEntropy m;
  m.realtime_ns = realtime_ns;
  if (entropy.size() == sizeof m.entropy) std::memcpy(m.entropy, entropy.data(), sizeof m.entropy);
  if (::send(clock_keeper, &m, sizeof m, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof m))
    return SystemError("ask the clock keeper", errno);
  return {};
}

Status GuestTemplate() {
  // All of them: its copies get their devices, the NIC too, only once restored.
  BH_TRY(MountEarlyAndLoadModules({}));
  auto line = WaitForBootMessage();
  if (!line) return line.error();
  auto boot = ctl::DecodeGuestBootArg(*line);
  if (!boot) return boot.error();
  if (boot->realtime_ns <= 0 || boot->entropy.empty())
    return MakeError(ErrorCode::kInvalid, "a restored guest's boot message has no clock or entropy");
  BH_TRY(SetClock(boot->realtime_ns));
  BH_TRY(Reseed(boot->entropy));
  // The boot port, the root's share, each volume's, the vsock device and the NIC if any.
  BH_TRY(WaitForDevices(3 + boot->volumes.size() + (boot->network ? 1 : 0)));
  return BootFrom(*boot);
}

}  // namespace bulkhead::init
