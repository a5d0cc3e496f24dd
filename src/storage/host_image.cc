#include "storage/host_image.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "common/id_ranges.h"
#include "common/scope_guard.h"
#include "common/unique_fd.h"
#include "storage/fs_util.h"

namespace bulkhead::storage {
namespace {

// Bump when what the builder writes changes, so existing hosts rebuild.
constexpr char kBuilderVersion[] = "host-image-2";  // 2: owners in the stored range

constexpr char kPasswd[] =
    "root:x:0:0:root:/root:/bin/bash\n"
    "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    "bin:x:2:2:bin:/bin:/usr/sbin/nologin\n"
    "sys:x:3:3:sys:/dev:/usr/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    "user:x:1000:1000:user:/home/user:/bin/bash\n";

constexpr char kGroup[] =
    "root:x:0:\n"
    "daemon:x:1:\n"
    "bin:x:2:\n"
    "sys:x:3:\n"
    "adm:x:4:\n"
    "tty:x:5:\n"
    "disk:x:6:\n"
    "users:x:100:user\n"
    "nogroup:x:65534:\n"
    "user:x:1000:\n";

constexpr char kHosts[] =
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "127.0.1.1\tsandbox\n";

constexpr char kNsswitch[] =
    "passwd: files\n"
    "group: files\n"
    "shadow: files\n"
    "hosts: files dns\n";

const char* const kLibDirs[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};

// Host /etc entries copied as they are (trees recursively, symlinks as symlinks).
const char* const kCopiedEtc[] = {
    "ld.so.cache", "ld.so.conf",     "ld.so.conf.d", "alternatives", "ssl/certs", "ssl/openssl.cnf",
    "ca-certificates.conf", "localtime", "timezone", "debian_version", "shells", "profile",
    "profile.d", "bash.bashrc", "inputrc", "protocols", "services", "mime.types", "perl"};

// Never copied, wherever they turn up.
bool IsSecretName(const std::string& name) {
  static const char* const kSecrets[] = {"shadow", "shadow-", "gshadow", "gshadow-", "ssh",
                                         "private", "sudoers", "sudoers.d"};
  for (const char* s : kSecrets) {
    if (name == s) return true;
  }
  return name.rfind("sudoers", 0) == 0;
}

// One thing to make in the rootfs. Entries come parents first.
struct Entry {
  enum class Kind { kDir, kFile, kSymlink, kCopy };
  Kind kind = Kind::kDir;
  std::string path;     // relative to the rootfs
  std::string content;  // kFile: the bytes; kSymlink: the target; kCopy: the host source
  mode_t mode = 0755;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string fingerprint;  // kCopy: what identifies the source's version
};

class Plan {
 public:
  void Dir(const std::string& path, mode_t mode, uid_t uid = 0, gid_t gid = 0) {
    Add({Entry::Kind::kDir, path, {}, mode, uid, gid, {}});
  }
  void File(const std::string& path, std::string content) {
    Add({Entry::Kind::kFile, path, std::move(content), 0644, 0, 0, {}});
  }
  void Symlink(const std::string& path, std::string target) {
    Add({Entry::Kind::kSymlink, path, std::move(target), 0777, 0, 0, {}});
  }
  // Adds the host's src at path: a tree, file or symlink. Skips what is not one of those.
  void CopyFromHost(const std::string& src, const std::string& path, const std::string& exclude_prefix) {
    if (IsSecretName(path.substr(path.find_last_of('/') + 1))) return;
    if (!exclude_prefix.empty() && (src == exclude_prefix || src.rfind(exclude_prefix + "/", 0) == 0)) return;
    struct stat st;
    if (::lstat(src.c_str(), &st) != 0) return;
    if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = ::readlink(src.c_str(), target, sizeof target - 1);
      if (n > 0) Symlink(path, std::string(target, static_cast<size_t>(n)));
      return;
    }
    mode_t mode = st.st_mode & 01777;  // never set-id bits
    if (S_ISREG(st.st_mode)) {
      Add({Entry::Kind::kCopy, path, src, mode, 0, 0, Fingerprint(st)});
      return;
    }
    if (!S_ISDIR(st.st_mode)) return;  // sockets, fifos, devices
    Dir(path, mode);
    std::vector<std::string> names;
    if (DIR* dir = ::opendir(src.c_str())) {
      while (dirent* e = ::readdir(dir)) {
        std::string name = e->d_name;
        if (name != "." && name != "..") names.push_back(name);
      }
      ::closedir(dir);
    }
    std::sort(names.begin(), names.end());  // a stable order for the hash
    for (const auto& name : names) CopyFromHost(src + "/" + name, path + "/" + name, exclude_prefix);
  }
  // A host file whose symlinks are resolved: the copy is a regular file.
  void CopyResolved(const std::string& src, const std::string& path) {
    char resolved[PATH_MAX];
    struct stat st;
    if (::realpath(src.c_str(), resolved) == nullptr || ::stat(resolved, &st) != 0 || !S_ISREG(st.st_mode)) return;
    Add({Entry::Kind::kCopy, path, resolved, 0644, 0, 0, Fingerprint(st)});
  }
  // A host executable, copied as a regular file with mode 0755.
  void CopyExecutable(const std::string& src, const std::string& path) {
    struct stat st;
    if (::stat(src.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    Add({Entry::Kind::kCopy, path, src, 0755, 0, 0, Fingerprint(st)});
  }
  bool Has(const std::string& path) const {
    return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.path == path; });
  }

  // FNV-1a over everything that decides the image's content: a change detector.
  std::string Hash() const {
    uint64_t h = 1469598103934665603ULL;
    auto mix = [&h](const std::string& s) {
      for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ULL;
      }
      h ^= 0xff;
      h *= 1099511628211ULL;
    };
    mix(kBuilderVersion);
    for (const auto& e : entries_) {
      mix(std::to_string(static_cast<int>(e.kind)) + " " + std::to_string(e.mode) + " " + std::to_string(e.uid) +
          ":" + std::to_string(e.gid));
      mix(e.path);
      mix(e.kind == Entry::Kind::kCopy ? e.fingerprint : e.content);
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }

  const std::vector<Entry>& entries() const { return entries_; }

 private:
  static std::string Fingerprint(const struct stat& st) {
    return std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
           std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
           std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
  }
  void Add(Entry e) { entries_.push_back(std::move(e)); }
  std::vector<Entry> entries_;
};

Plan MakePlan(const std::string& state_dir, const std::string& sudo_binary) {
  Plan plan;
  // Mount points and the empty skeleton.
  for (const char* dir : {"usr", "proc", "sys", "dev", "run", "mnt", "opt", "srv", "workspace"}) plan.Dir(dir, 0755);
  plan.Dir("tmp", 01777);
  plan.Dir("root", 0700);
  plan.Dir("home", 0755);
  plan.Dir("home/user", 0755, 1000, 1000);
  plan.Dir("var", 0755);
  plan.Dir("var/tmp", 01777);
  for (const char* dir : {"var/lib", "var/log", "var/cache"}) plan.Dir(dir, 0755);
  // What E2B's base template has and the host may lack, under usr/: the runtime shows the
  // image's usr/ over the host's /usr when it holds anything (native_tier.cc).
  plan.Dir("usr/bin", 0755);
  struct stat python;
  if (::stat("/usr/bin/python3", &python) == 0 && ::lstat("/usr/bin/python", &python) != 0) {
    plan.Symlink("usr/bin/python", "python3");
  }
  // Always ours, never the host's: a host sudo would read host policy and cannot gain
  // anything under no_new_privs. Ours asks init (sudo_protocol.h).
  plan.CopyExecutable(sudo_binary, "usr/bin/sudo");

  // bin and lib*: the host's symlinks as they are, real directories as mount points.
  for (const char* name : kLibDirs) {
    std::string host = std::string("/") + name;
    struct stat st;
    if (::lstat(host.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      plan.CopyFromHost(host, name, {});
    } else if (S_ISDIR(st.st_mode)) {
      plan.Dir(name, 0755);
    }
  }

  // A generated /etc: no host users, no host secrets.
  plan.Dir("etc", 0755);
  plan.File("etc/passwd", kPasswd);
  plan.File("etc/group", kGroup);
  plan.File("etc/hosts", kHosts);
  plan.File("etc/hostname", "sandbox\n");
  // The sandbox's resolver is the daemon's, on its loopback (net/netns.h); with network mode
  // none nothing answers there and lookups fail at once.
  plan.File("etc/resolv.conf", "nameserver 127.0.0.1\n");
  plan.File("etc/nsswitch.conf", kNsswitch);
  plan.Symlink("etc/mtab", "/proc/self/mounts");
  char resolved_state[PATH_MAX];
  std::string exclude = ::realpath(state_dir.c_str(), resolved_state) ? resolved_state : state_dir;
  for (const char* name : kCopiedEtc) {
    std::string rel = name;
    if (rel.find('/') != std::string::npos) {
      std::string parent = "etc/" + rel.substr(0, rel.find('/'));
      if (!plan.Has(parent) && ::access(("/" + parent).c_str(), F_OK) == 0) plan.Dir(parent, 0755);
    }
    plan.CopyFromHost("/etc/" + rel, "etc/" + rel, exclude);
  }
  plan.CopyResolved("/etc/os-release", "etc/os-release");
  // python3/, python3.11/ ...: interpreter config dirs.
  std::vector<std::string> python_dirs;
  if (DIR* dir = ::opendir("/etc")) {
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name.rfind("python3", 0) == 0) python_dirs.push_back(name);
    }
    ::closedir(dir);
  }
  std::sort(python_dirs.begin(), python_dirs.end());
  for (const auto& name : python_dirs) {
    struct stat st;
    if (::lstat(("/etc/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      plan.CopyFromHost("/etc/" + name, "etc/" + name, exclude);
    }
  }
  return plan;
}

Status CopyHostFile(const std::string& src, const std::string& dest, mode_t mode, uid_t uid, gid_t gid) {
  UniqueFd in(::open(src.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!in) return SystemError("open " + src, errno);
  UniqueFd out(::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out) return SystemError("create " + dest, errno);
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(in.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError("read " + src, errno);
    }
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::write(out.get(), buf + done, static_cast<size_t>(n - done));
      if (w < 0) {
        if (errno == EINTR) continue;
        return SystemError("write " + dest, errno);
      }
      done += w;
    }
  }
  if (::fchown(out.get(), uid, gid) != 0) return SystemError("chown " + dest, errno);
  if (::fchmod(out.get(), mode) != 0) return SystemError("chmod " + dest, errno);
  return {};
}

// Writes the plan under rootfs, every owner in the stored range (e.uid 0 is stored as
// kStoredIdBase, and shows as each sandbox's root).
Status Build(const Plan& plan, const std::string& rootfs) {
  for (const auto& e : plan.entries()) {
    std::string path = rootfs + "/" + e.path;
    const uid_t uid = kStoredIdBase + e.uid;
    const gid_t gid = kStoredIdBase + e.gid;
    switch (e.kind) {
      case Entry::Kind::kDir:
        BH_TRY(MakeDir(path, e.mode, uid, gid));
        break;
      case Entry::Kind::kFile:
        BH_TRY(WriteFile(path, e.content, e.mode, uid, gid));
        break;
      case Entry::Kind::kCopy:
        BH_TRY(CopyHostFile(e.content, path, e.mode, uid, gid));
        break;
      case Entry::Kind::kSymlink:
        if (::symlink(e.content.c_str(), path.c_str()) != 0) return SystemError("symlink " + path, errno);
        if (::lchown(path.c_str(), uid, gid) != 0) return SystemError("chown " + path, errno);
        break;
    }
  }
  return {};
}

// Points <dir>/rootfs at version, atomically (a new symlink renamed over the old one).
Status SwitchCurrent(const std::string& dir, const std::string& version) {
  std::string link = dir + "/rootfs";
  char target[PATH_MAX];
  ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  if (n > 0 && std::string(target, static_cast<size_t>(n)) == version) return {};
  std::string tmp = dir + "/.rootfs.tmp";
  ::unlink(tmp.c_str());
  if (::symlink(version.c_str(), tmp.c_str()) != 0) return SystemError("symlink " + tmp, errno);
  if (::rename(tmp.c_str(), link.c_str()) != 0) return SystemError("rename " + tmp, errno);
  return {};
}

}  // namespace

std::vector<std::string> HostBindDirs() {
  std::vector<std::string> dirs = {"/usr"};
  for (const char* name : kLibDirs) {
    std::string host = std::string("/") + name;
    struct stat st;
    if (::lstat(host.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) dirs.push_back(host);
  }
  return dirs;
}

Result<std::string> EnsureHostImageAt(const std::string& host_image_dir, const std::string& state_dir,
                                      const std::string& sudo_binary) {
  BH_TRY(MakeDir(host_image_dir, 0700));
  Plan plan = MakePlan(state_dir, sudo_binary);
  std::string version = "v-" + plan.Hash();
  std::string version_dir = host_image_dir + "/" + version;
  struct stat st;
  if (::lstat(version_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    BH_TRY(SwitchCurrent(host_image_dir, version));
    return version_dir;
  }

  // Leftovers of a build that crashed.
  if (DIR* dir = ::opendir(host_image_dir.c_str())) {
    std::vector<std::string> stale;
    while (dirent* e = ::readdir(dir)) {
      if (std::string(e->d_name).rfind(".build-", 0) == 0) stale.push_back(host_image_dir + "/" + e->d_name);
    }
    ::closedir(dir);
    for (const auto& path : stale) (void)RemoveTree(path);
  }
  // Build beside it and rename into place, so a version dir is always complete.
  std::string tmpl = host_image_dir + "/.build-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return SystemError("mkdtemp " + tmpl, errno);
  std::string build_dir = tmpl;
  ScopeGuard cleanup([&] { (void)RemoveTree(build_dir); });
  BH_TRY(MakeDir(build_dir, 0755, kStoredIdBase, kStoredIdBase));  // the image's "/"
  BH_TRY(Build(plan, build_dir));
  if (::rename(build_dir.c_str(), version_dir.c_str()) != 0) return SystemError("rename " + build_dir, errno);
  cleanup.Dismiss();
  BH_TRY(SwitchCurrent(host_image_dir, version));
  return version_dir;
}

}  // namespace bulkhead::storage
