#include "oci/container_root.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <sstream>

#include "common/clean_path.h"
#include "common/id_ranges.h"
#include "common/proc_masks.h"
#include "common/read_file.h"
#include "common/unique_fd.h"
#include "oci/ceiling.h"

namespace bulkhead::oci {
namespace {

// What bulkhead hides in every sandbox besides what the spec asks (common/proc_masks.h).
constexpr const char* kMaskedSysPaths[] = {"/sys/firmware", "/sys/devices/virtual/powercap"};

constexpr std::pair<const char*, const char*> kDevLinks[] = {{"/dev/fd", "/proc/self/fd"},
                                                             {"/dev/stdin", "/proc/self/fd/0"},
                                                             {"/dev/stdout", "/proc/self/fd/1"},
                                                             {"/dev/stderr", "/proc/self/fd/2"},
                                                             {"/dev/ptmx", "pts/ptmx"}};

std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string> Split(const std::string& s, char separator) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, separator)) out.push_back(item);
  return out;
}

std::string FdPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// `path` inside the directory tree at root_fd, symlinks resolved as if root_fd were "/",
// made where missing (a directory, or an empty file when `file`). A dangling symlink on the way
// (an image's /etc/resolv.conf -> ../run/systemd/...) gets what it names made, in the root.
Result<UniqueFd> OpenInRoot(int root_fd, const std::string& path, bool file, int links = 0) {
  if (links > 40) return SystemError("open " + path + " in the container's root", ELOOP);
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0; attempt < 2; attempt++) {
    UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, root_fd, path.c_str(), &how, sizeof how)));
    if (fd) return fd;
    if (errno != ENOENT || attempt == 1) return SystemError("open " + path + " in the container's root", errno);
    const size_t slash = path.rfind('/');
    const std::string parent = slash == 0 ? "/" : path.substr(0, slash), name = path.substr(slash + 1);
    if (name.empty() || name == "." || name == "..") return MakeError(ErrorCode::kInvalid, "bad mount point " + path);
    UniqueFd dir;
    if (parent == "/") {
      dir = UniqueFd(::dup(root_fd));
    } else {
      auto opened = OpenInRoot(root_fd, parent, false, links);
      if (!opened.ok()) return opened.error();
      dir = std::move(*opened);
    }
    // Through /proc/self/fd: an O_PATH descriptor is no base for mkdirat. The name is one
    // component and neither call follows a symlink at it (EEXIST, then resolved in root above).
    const std::string at = FdPath(dir.get()) + "/" + name;
    int made = file ? ::open(at.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)
                    : ::mkdir(at.c_str(), 0755);
    if (made < 0 && errno != EEXIST) return SystemError("make mount point " + path, errno);
    if (file && made >= 0) ::close(made);
    if (made < 0) {
      char target[4096];
      const ssize_t length = ::readlinkat(dir.get(), name.c_str(), target, sizeof target - 1);
      if (length > 0) {
        const std::string link(target, static_cast<size_t>(length));
        // (".." stops at "/", as RESOLVE_IN_ROOT takes it)
        return OpenInRoot(root_fd, CleanAbsolutePath(link[0] == '/' ? link : parent + "/" + link), file, links + 1);
      }
    }
  }
  return SystemError("open " + path, ENOENT);
}

// A detached clone of `source` with `attr` set, moved onto the (O_PATH) target.
Status AttachClone(const std::string& source, int target_fd, bool recursive, const mount_attr& attr) {
  UniqueFd tree(static_cast<int>(::syscall(SYS_open_tree, AT_FDCWD, source.c_str(),
                                           OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0))));
  if (!tree) return SystemError("clone " + source, errno);
  mount_attr set = attr;
  if (::syscall(SYS_mount_setattr, tree.get(), "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &set, sizeof set) != 0)
    return SystemError(std::string(attr.attr_set & MOUNT_ATTR_IDMAP ? "idmap " : "set mount flags of ") + source, errno);
  if (::syscall(SYS_move_mount, tree.get(), "", target_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0)
    return SystemError("attach " + source, errno);
  return {};
}

Result<UniqueFd> MakeDirAt(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return SystemError("mkdir " + path, errno);
  UniqueFd fd(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return SystemError("open " + path, errno);
  return fd;
}

// The rootfs rebuilt at scratch/root (see container_root.h); answers that path. Writable even
// for a read-only root, which becomes read-only once the mount points in it are made.
Result<std::string> BuildRoot(const RootPlan& plan) {
  if (::mount("tmpfs", plan.scratch.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700") != 0)
    return SystemError("mount the layers' tmpfs", errno);
  const std::string root = plan.scratch + "/root";
  auto root_fd = MakeDirAt(root);
  if (!root_fd.ok()) return root_fd.error();
  mount_attr idmapped{};
  idmapped.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  idmapped.userns_fd = static_cast<uint64_t>(plan.idmap_fd);
  auto mountinfo = ReadSmallFile("/proc/self/mountinfo", 64 << 20);
  if (!mountinfo) return SystemError("read mountinfo", errno);
  OverlayLayers layers;
  auto type = MountedType(*mountinfo, plan.rootfs, &layers);
  if (!type.ok()) return type.error();
  if (*type != "overlay") {
    // One directory (a bind of a snapshot, or the bundle's own): the whole of it, idmapped.
    BH_TRY(AttachClone(plan.rootfs, root_fd->get(), true, idmapped));
    return root;
  }
  // Each layer cloned idmapped under the tmpfs; the overlay names them by descriptor (the option
  // string has a page's room: dozens of layers' paths would not fit).
  std::vector<UniqueFd> held;
  std::string lowerdir;
  mount_attr lower_attr = idmapped;
  lower_attr.attr_set |= MOUNT_ATTR_RDONLY;
  for (size_t i = 0; i < layers.lower.size(); i++) {
    auto at = MakeDirAt(plan.scratch + "/l" + std::to_string(i));
    if (!at.ok()) return at.error();
    BH_TRY(AttachClone(layers.lower[i], at->get(), false, lower_attr));
    UniqueFd layer(::open((plan.scratch + "/l" + std::to_string(i)).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!layer) return SystemError("open layer", errno);
    lowerdir += (i ? ":" : "") + FdPath(layer.get());
    held.push_back(std::move(layer));
  }
  std::string options = "lowerdir=" + lowerdir;
  if (!layers.upper.empty()) {
    // Upper and work dirs on one mount, as overlayfs needs: their common parent, cloned.
    const std::string parent = layers.upper.substr(0, layers.upper.rfind('/'));
    if (layers.work.substr(0, layers.work.rfind('/')) != parent)
      return MakeError(ErrorCode::kInvalid, "the rootfs overlay's upper and work dirs are not siblings");
    auto at = MakeDirAt(plan.scratch + "/u");
    if (!at.ok()) return at.error();
    BH_TRY(AttachClone(parent, at->get(), false, idmapped));
    UniqueFd upper_parent(::open((plan.scratch + "/u").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!upper_parent) return SystemError("open upper layer", errno);
    options += ",upperdir=" + FdPath(upper_parent.get()) + layers.upper.substr(parent.size()) +
               ",workdir=" + FdPath(upper_parent.get()) + layers.work.substr(parent.size());
    held.push_back(std::move(upper_parent));
  }
  for (const std::string& option : layers.other_options) options += "," + option;
  // overlayfs works its upper layer with its mounter's credentials, whose fsuid (the
  // container's root: ActAsContainerRootOnHost) maps into the idmapped layers.
  if (::mount("overlay", root.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) != 0)
    return SystemError("mount the container's root overlay", errno);
  return root;
}

// The container's own cgroup, read-only: v2's cgroup2 (the container's cgroup namespace makes
// its group the root); on v1 a tmpfs with its group of each hierarchy bound under the
// hierarchy's name.
Status MountCgroup(const RootPlan& plan, int target_fd, const std::string& destination) {
  const std::string at = FdPath(target_fd);
  const unsigned long flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (plan.cgroup->v2()) {
    if (::mount("cgroup2", at.c_str(), "cgroup2", flags, nullptr) != 0) return SystemError("mount cgroup2 at " + destination, errno);
    return {};
  }
  if (::mount("tmpfs", at.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755") != 0)
    return SystemError("mount tmpfs at " + destination, errno);
  // By its path from here on (nothing of the container runs yet to change it): the descriptor
  // names the directory under the tmpfs, a path walk crosses into the tmpfs.
  char real[4096];
  const ssize_t length = ::readlink(at.c_str(), real, sizeof real - 1);
  if (length <= 0) return SystemError("resolve " + destination, errno);
  const std::string base(real, static_cast<size_t>(length));
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
  for (const std::string& group : plan.cgroup->Dirs()) {
    std::string rest = group.substr(std::string("/sys/fs/cgroup/").size());
    const std::string hierarchy = rest.substr(0, rest.find('/'));
    auto target = MakeDirAt(base + "/" + hierarchy);
    if (!target.ok()) return target.error();
    BH_TRY(AttachClone(group, target->get(), false, attr));
    // "cpu,cpuacct" is also reached as "cpu" and "cpuacct", as the host shows it.
    if (hierarchy.find(',') != std::string::npos)
      for (const std::string& name : Split(hierarchy, ',')) (void)!::symlink(hierarchy.c_str(), (base + "/" + name).c_str());
  }
  if (::mount(nullptr, base.c_str(), nullptr, MS_REMOUNT | flags, "mode=0755") != 0)
    return SystemError("make " + destination + " read-only", errno);
  return {};
}

// An OCI mount, made at its destination in the root.
Status MountOne(const RootPlan& plan, int root_fd, const Mount& mount) {
  const MountOptions options = ParseMountOptions(mount.options);
  const bool bind = mount.type == "bind";
  bool file = false;
  if (bind) {
    struct stat st {};
    if (::stat(mount.source.c_str(), &st) != 0) return SystemError("bind source " + mount.source, errno);
    file = !S_ISDIR(st.st_mode);
  }
  auto target = OpenInRoot(root_fd, mount.destination, file);
  if (!target.ok()) return target.error();
  if (bind) {
    // Not idmapped: the host's files show with their host owners (host root as nobody), so
    // the container has no owner rights over them.
    mount_attr attr{};
    if (options.flags & MS_RDONLY) attr.attr_set |= MOUNT_ATTR_RDONLY;
    attr.attr_set |= MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (options.flags & MS_NOEXEC) attr.attr_set |= MOUNT_ATTR_NOEXEC;
    if (options.propagation) attr.propagation = options.propagation & ~MS_REC;
    return AttachClone(mount.source, target->get(), options.recursive_bind, attr);
  }
  std::vector<std::string> data = ShiftIdOptions(options.data, plan.host_uid);
  unsigned long flags = options.flags | MS_NOSUID;
  std::string type = mount.type;
  if (type == "sysfs") flags |= MS_RDONLY | MS_NODEV | MS_NOEXEC;  // never writable
  if (type == "devpts") {
    for (const char* option : {"newinstance", "ptmxmode=0666"})
      if (std::find(data.begin(), data.end(), option) == data.end() &&
          std::none_of(data.begin(), data.end(), [](const std::string& d) { return d.rfind("ptmxmode=", 0) == 0; }))
        data.push_back(option);
  }
  if (type == "tmpfs") {
    // Owned by the container's root unless the spec says otherwise.
    auto has = [&](const char* key) {
      return std::any_of(data.begin(), data.end(), [&](const std::string& d) { return d.rfind(key, 0) == 0; });
    };
    if (!has("uid=")) data.push_back("uid=" + std::to_string(plan.host_uid));
    if (!has("gid=")) data.push_back("gid=" + std::to_string(plan.host_uid));
  }
  if (type == "cgroup" || type == "cgroup2") return MountCgroup(plan, target->get(), mount.destination);
  std::string joined;
  for (const std::string& d : data) joined += (joined.empty() ? "" : ",") + d;
  const std::string at = FdPath(target->get());
  if (::mount(mount.source.empty() ? type.c_str() : mount.source.c_str(), at.c_str(), type.c_str(), flags,
              joined.empty() ? nullptr : joined.c_str()) != 0)
    return SystemError("mount " + type + " at " + mount.destination, errno);
  return {};
}

}  // namespace

namespace {

bool IsTmpfsAt(const Spec& spec, const std::string& destination) {
  return std::any_of(spec.mounts.begin(), spec.mounts.end(),
                     [&](const Mount& m) { return m.destination == destination && m.type == "tmpfs"; });
}

// /dev's device nodes (bulkhead's few and the spec's) and links, on the tmpfs the spec mounts there.
Status MakeDevices(const RootPlan& plan, int root_fd) {
  auto make = [&](const std::string& path, mode_t mode, dev_t number, uid_t uid, gid_t gid) -> Status {
    const size_t slash = path.rfind('/');
    auto dir = OpenInRoot(root_fd, path.substr(0, slash), false);
    if (!dir.ok()) return dir.error();
    const std::string at = FdPath(dir->get()) + path.substr(slash);
    if (::mknod(at.c_str(), mode, number) != 0 && errno != EEXIST) return SystemError("mknod " + path, errno);
    if (::lchown(at.c_str(), plan.host_uid + uid, plan.host_uid + gid) != 0) return SystemError("chown " + path, errno);
    if (::chmod(at.c_str(), mode & 07777) != 0) return SystemError("chmod " + path, errno);
    return {};
  };
  for (const DefaultDevice& d : kDefaultDevices) BH_TRY(make(d.path, S_IFCHR | 0666, makedev(d.major, d.minor), 0, 0));
  for (const Device& d : plan.spec->devices) {
    mode_t type = d.type == 'b' ? S_IFBLK : d.type == 'p' ? S_IFIFO : S_IFCHR;
    BH_TRY(make(d.path, type | (d.mode & 07777), makedev(d.major, d.minor), d.uid, d.gid));
  }
  auto dev = OpenInRoot(root_fd, "/dev", false);
  if (!dev.ok()) return dev.error();
  for (const auto& [path, target] : kDevLinks) {
    const std::string at = FdPath(dev->get()) + (path + 4);
    if (::symlink(target, at.c_str()) != 0 && errno != EEXIST) return SystemError(std::string("symlink ") + path, errno);
  }
  return {};
}

// The spec's sysctls, where the container's own namespaces hold them (network, IPC).
Status WriteSysctls(const Spec& spec) {
  for (const auto& [key, value] : spec.sysctl) {
    const bool namespaced = key.rfind("net.", 0) == 0 || key.rfind("kernel.shm", 0) == 0 ||
                            key.rfind("kernel.msg", 0) == 0 || key.rfind("kernel.sem", 0) == 0 ||
                            key.rfind("fs.mqueue.", 0) == 0;
    if (!namespaced || key.find("..") != std::string::npos || key.find('/') != std::string::npos)
      return MakeError(ErrorCode::kInvalid, "sysctl " + key + " is not the container's own to set");
    std::string path = "/proc/sys/" + key;
    std::replace(path.begin() + 10, path.end(), '.', '/');
    BH_TRY(WriteSmallFile(path, value));
  }
  return {};
}

Status MaskPaths(const Spec& spec) {
  std::vector<std::string> masked(spec.masked_paths), read_only(spec.readonly_paths);
  for (std::string_view path : kMaskedProcPaths) masked.emplace_back(path);
  for (const char* path : kMaskedSysPaths) masked.emplace_back(path);
  for (std::string_view path : kReadOnlyProcPaths) read_only.emplace_back(path);
  for (const std::string& path : masked) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;
    int result = S_ISDIR(st.st_mode) ? ::mount("tmpfs", path.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=0555")
                                     : ::mount("/dev/null", path.c_str(), nullptr, MS_BIND, nullptr);
    if (result != 0) return SystemError("mask " + path, errno);
  }
  for (const std::string& path : read_only) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;
    if (::mount(path.c_str(), path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        ::mount(nullptr, path.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
      return SystemError("make " + path + " read-only", errno);
  }
  return {};
}

}  // namespace

Status AssembleRoot(const RootPlan& plan) {
  // Mounts the host makes later still reach the container (the kubelet's propagated volumes);
  // nothing the container mounts reaches the host.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return SystemError("make mounts slaves", errno);
  auto root = BuildRoot(plan);
  if (!root.ok()) return root.error();
  UniqueFd root_fd(::open(root->c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd) return SystemError("open the container's root", errno);
  for (const Mount& mount : plan.spec->mounts) BH_TRY(MountOne(plan, root_fd.get(), mount));
  if (IsTmpfsAt(*plan.spec, "/dev")) BH_TRY(MakeDevices(plan, root_fd.get()));
  BH_TRY(WriteSysctls(*plan.spec));
  if (plan.new_uts && !plan.spec->hostname.empty() &&
      ::sethostname(plan.spec->hostname.c_str(), plan.spec->hostname.size()) != 0)
    return SystemError("sethostname", errno);
  if (::chdir(root->c_str()) != 0) return SystemError("chdir to the container's root", errno);
  // pivot_root(".", "."): the old root ends up under the new one; detach it.
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return SystemError("pivot_root", errno);
  if (::umount2(".", MNT_DETACH) != 0) return SystemError("detach the host's root", errno);
  if (::chdir("/") != 0) return SystemError("chdir /", errno);
  if (plan.spec->root_readonly &&
      ::mount(nullptr, "/", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
    return SystemError("make the root read-only", errno);
  return MaskPaths(*plan.spec);
}

Result<std::string> MountedType(const std::string& mountinfo, const std::string& path, OverlayLayers* layers) {
  std::string type;
  std::istringstream lines(mountinfo);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, mount_point;
    fields >> id >> parent >> device >> root >> mount_point;
    if (Unescape(mount_point) != path) continue;
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string source, super;
    tail >> type >> source >> super;
    *layers = {};
    if (type != "overlay") continue;
    for (const std::string& raw : Split(super, ',')) {
      const std::string option = Unescape(raw);
      if (option.rfind("lowerdir=", 0) == 0) {
        layers->lower = Split(option.substr(9), ':');
      } else if (option.rfind("upperdir=", 0) == 0) {
        layers->upper = option.substr(9);
      } else if (option.rfind("workdir=", 0) == 0) {
        layers->work = option.substr(8);
      } else if (option != "rw" && option != "ro" && option.rfind("lowerdir+", 0) != 0 &&
                 option.rfind("datadir+", 0) != 0) {
        layers->other_options.push_back(option);
      }
    }
  }
  if (type == "overlay" && layers->lower.empty())
    return MakeError(ErrorCode::kInvalid, "the rootfs overlay at " + path + " names no lower layer");
  return type;
}

MountOptions ParseMountOptions(const std::vector<std::string>& options) {
  struct Flag {
    const char* name;
    bool clear;
    unsigned long flag;
  };
  static constexpr Flag kFlags[] = {
      {"ro", false, MS_RDONLY},      {"rw", true, MS_RDONLY},         {"nosuid", false, MS_NOSUID},
      {"suid", true, MS_NOSUID},     {"nodev", false, MS_NODEV},      {"dev", true, MS_NODEV},
      {"noexec", false, MS_NOEXEC},  {"exec", true, MS_NOEXEC},       {"sync", false, MS_SYNCHRONOUS},
      {"async", true, MS_SYNCHRONOUS}, {"noatime", false, MS_NOATIME}, {"atime", true, MS_NOATIME},
      {"nodiratime", false, MS_NODIRATIME}, {"diratime", true, MS_NODIRATIME}, {"relatime", false, MS_RELATIME},
      {"norelatime", true, MS_RELATIME}, {"strictatime", false, MS_STRICTATIME}, {"dirsync", false, MS_DIRSYNC},
      {"mand", false, MS_MANDLOCK}, {"nomand", true, MS_MANDLOCK}};
  static constexpr std::pair<const char*, unsigned long> kPropagation[] = {
      {"private", MS_PRIVATE}, {"rprivate", MS_PRIVATE | MS_REC}, {"shared", MS_SHARED}, {"rshared", MS_SHARED | MS_REC},
      {"slave", MS_SLAVE},     {"rslave", MS_SLAVE | MS_REC},     {"unbindable", MS_UNBINDABLE},
      {"runbindable", MS_UNBINDABLE | MS_REC}};
  MountOptions out;
  for (const std::string& option : options) {
    if (option == "bind") continue;
    if (option == "rbind") {
      out.recursive_bind = true;
      continue;
    }
    auto flag = std::find_if(std::begin(kFlags), std::end(kFlags), [&](const Flag& f) { return option == f.name; });
    if (flag != std::end(kFlags)) {
      out.flags = flag->clear ? out.flags & ~flag->flag : out.flags | flag->flag;
      continue;
    }
    auto propagation = std::find_if(std::begin(kPropagation), std::end(kPropagation),
                                    [&](const auto& p) { return option == p.first; });
    if (propagation != std::end(kPropagation)) {
      out.propagation = propagation->second;
      continue;
    }
    out.data.push_back(option);
  }
  return out;
}

std::vector<std::string> ShiftIdOptions(const std::vector<std::string>& data, uid_t host_uid) {
  std::vector<std::string> out;
  for (const std::string& option : data) {
    const bool id = option.rfind("uid=", 0) == 0 || option.rfind("gid=", 0) == 0;
    if (!id) {
      out.push_back(option);
      continue;
    }
    char* end = nullptr;
    unsigned long value = std::strtoul(option.c_str() + 4, &end, 10);
    if (end && *end == '\0' && value < kIdCount) {
      out.push_back(option.substr(0, 4) + std::to_string(host_uid + value));
    } else {
      out.push_back(option.substr(0, 4) + std::to_string(host_uid + kNobodyId));
    }
  }
  return out;
}

}  // namespace bulkhead::oci
