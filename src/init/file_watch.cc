// watch (ctl_protocol.h, "File operations"): inotify events as NDJSON lines on stdout.
//
// Event mapping:
//   IN_CREATE                  create
//   IN_MOVED_FROM, IN_MOVED_TO rename (one line for the old path, one for the new)
//   IN_CLOSE_WRITE             write: once per close of a file that was open for writing,
//                              so a burst of write(2) calls is one event, not thousands
//                              (a writer that never closes is not reported until it does)
//   IN_DELETE                  remove
//   IN_ATTRIB                  chmod (any metadata change: mode, owner, times)
// With "recursive", a new directory is watched as soon as it appears and its contents are
// scanned, so entries made inside it before its watch was in place are reported as create,
// and a non-empty file found so also as write (one made by a concurrent writer during the
// scan may be reported twice; a chmod done before the watch is lost). Its create line
// goes out only once its watch is set. A directory moved within the tree keeps its watches under
// its new name; one moved out of the tree loses them. The watch ends when stdout is closed,
// or when the watched path itself is removed or moved (after a last remove or rename line).
// A file written through the API (file_ops.cc) is built in a temporary and renamed over its
// target: that is reported as create and write of the target, nothing about the temporary;
// one given to an "owner" as envd's upload reports it: create (if new), chmod (the chown),
// write.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/unique_fd.h"
#include "init/file_worker.h"

namespace bulkhead::init {
namespace {

using nlohmann::json;

constexpr uint32_t kEvents =
    IN_CREATE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;

// A write's temporary: a named one, or an unnamed (O_TMPFILE) one, which the kernel reports
// as "#<inode number>" and which has no entry under that name.
bool IsWriteTemporary(std::string_view name, const std::string& path) {
  if (name.substr(0, kWriteTempPrefix.size()) == kWriteTempPrefix) return true;
  if (name.size() < 2 || name[0] != '#' || name.find_first_not_of("0123456789", 1) != std::string_view::npos) return false;
  struct stat st;
  return ::lstat(path.c_str(), &st) != 0 && errno == ENOENT;
}

// What the commit of a write's temporary named `name` stands for (kWriteAsWriter, ...).
char WriteKind(std::string_view name) {
  if (name.substr(0, kWriteTempPrefix.size()) != kWriteTempPrefix || name.size() == kWriteTempPrefix.size()) {
    return kWriteAsWriter;
  }
  const char kind = name[kWriteTempPrefix.size()];
  return kind == kWriteNewOwned || kind == kWriteReplaceOwned ? kind : kWriteAsWriter;
}

// The filesystems envd calls network mounts (Linux magic numbers): NFS, CIFS, SMB, SMB2, FUSE.
bool IsNetworkFilesystem(const struct statfs& fs) {
  switch (static_cast<uint64_t>(fs.f_type) & 0xffffffffu) {
    case 0x6969:
    case 0xFF534D42:
    case 0x517B:
    case 0xFE534D42:
    case 0x65735546: return true;
    default: return false;
  }
}

class Watcher {
 public:
  // With `entries`, a create, write or chmod line carries the Entry (`details`) of its path.
  Watcher(std::string root, bool recursive, std::optional<EntryDetails> entries)
      : root_(std::move(root)), recursive_(recursive), entries_(std::move(entries)) {}

  // Sets every watch; the caller reports "ready" after this.
  Status Start() {
    inotify_.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!inotify_) {
      if (errno == EMFILE) return FileError("too_large", "too many watches in this sandbox (fs.inotify.max_user_instances)");
      return ErrnoError(errno, "watch", root_);
    }
    struct stat st;
    if (::stat(root_.c_str(), &st) != 0) return ErrnoError(errno, "stat", root_);
    root_is_dir_ = S_ISDIR(st.st_mode);
    // The root itself may be a symlink (followed); nothing below it is.
    root_wd_ = ::inotify_add_watch(inotify_.get(), root_.c_str(), kEvents);
    if (root_wd_ < 0) return WatchError(errno, root_);
    paths_[root_wd_] = root_;
    if (!root_is_dir_ || !recursive_) return {};
    UniqueFd root(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root) return ErrnoError(errno, "open", root_);
    return WatchContents(root.get(), root_, /*found=*/nullptr);
  }

  // Reports events until stdout is closed or the root goes away.
  Status Run() {
    // This worker process only watches: a reader gone mid-write ends the watch like one gone
    // between events (EPIPE, a clean exit), not by the signal.
    ::signal(SIGPIPE, SIG_IGN);
    alignas(struct inotify_event) char buf[64 * 1024];
    pollfd fds[2] = {{inotify_.get(), POLLIN, 0}, {1, 0, 0}};  // stdout: POLLERR once the reader is gone
    while (!done_) {
      // A rename queues its IN_MOVED_FROM and IN_MOVED_TO one after the other, and a read may
      // come between them: one left unpaired waits a moment for its other half, then counts
      // as a move out of the tree.
      const int ready = ::poll(fds, 2, ExpireUnpaired());
      if (ready < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, "poll", root_);
      }
      if (ready == 0) continue;
      if (fds[1].revents & (POLLERR | POLLHUP)) return {};
      if (!(fds[0].revents & POLLIN)) continue;
      ssize_t len = ::read(inotify_.get(), buf, sizeof(buf));
      if (len < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (len < 0) return ErrnoError(errno, "read events of", root_);
      for (ssize_t off = 0; off < len && !done_;) {
        const auto* event = reinterpret_cast<const struct inotify_event*>(buf + off);
        BH_TRY(Handle(*event));
        off += ssize_t(sizeof(struct inotify_event) + event->len);
      }
    }
    return {};
  }

 private:
  // The directory at `path` was moved and its IN_MOVED_FROM is unpaired: it left the tree.
  void ForgetUnpairedMove(std::string path) {  // (a copy: ForgetTree erases what it came from)
    for (auto it = moved_from_.begin(); it != moved_from_.end(); ++it) {
      if (it->second.path != path) continue;
      moved_from_.erase(it);
      ForgetTree(path, /*remove_watches=*/true);
      return;
    }
  }

  // Forgets the IN_MOVED_FROM halves that waited long enough for their IN_MOVED_TO; returns how
  // long until the next of the others has (for poll: -1 when none waits).
  int ExpireUnpaired() {
    const auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (auto it = moved_from_.begin(); it != moved_from_.end();) {
      if (it->second.expires <= now) {
        // A directory moved out of the tree: its watches would report under a stale name.
        ForgetTree(it->second.path, /*remove_watches=*/true);
        it = moved_from_.erase(it);
      } else {
        next = std::min(next, it->second.expires);
        ++it;
      }
    }
    for (auto it = write_commits_.begin(); it != write_commits_.end();) {
      if (it->second.expires <= now) {
        it = write_commits_.erase(it);
      } else {
        next = std::min(next, it->second.expires);
        ++it;
      }
    }
    if (next == Clock::time_point::max()) return -1;
    return int(std::chrono::ceil<std::chrono::milliseconds>(next - now).count());
  }

  Error WatchError(int err, const std::string& path) {
    if (err == ENOSPC) return FileError("too_large", "too many directories to watch (fs.inotify.max_user_watches)");
    return ErrnoError(err, "watch", path);
  }

  // Watches the directory `path`. False (not an error) if it is gone, unreadable or no longer
  // a directory.
  Result<bool> AddWatch(const std::string& path) {
    int wd = ::inotify_add_watch(inotify_.get(), path.c_str(), kEvents | IN_ONLYDIR | IN_DONT_FOLLOW);
    if (wd >= 0) {
      paths_[wd] = path;
      return true;
    }
    if (errno == ENOENT || errno == EACCES || errno == ENOTDIR || errno == ELOOP) return false;
    return WatchError(errno, path);
  }

  struct PendingEvent {
    const char* type;
    std::string path;
    bool dir;
  };

  // Watches the subdirectories of `dir_fd` (named `path`), recursively. With `found`, every
  // entry met is added to it as created.
  Status WatchContents(int dir_fd, const std::string& path, std::vector<PendingEvent>* found) {
    auto names = DirectoryNames(dir_fd, path);
    if (!names.ok()) return {};  // unreadable: its own watch reports what it can
    for (const auto& name : *names) {
      std::string child = JoinPath(path, name);
      struct stat st;
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      bool is_dir = S_ISDIR(st.st_mode);
      if (found) found->push_back({"create", child, is_dir});
      // Content written before the watch was in place: its close went unseen.
      if (found && S_ISREG(st.st_mode) && st.st_size > 0) found->push_back({"write", child, false});
      if (!is_dir) continue;
      UniqueFd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) continue;
      auto added = AddWatch(child);
      if (!added.ok()) return added.error();
      if (*added) BH_TRY(WatchContents(sub.get(), child, found));
    }
    return {};
  }

  // A directory appeared at `path`, reported as `type`. Its watches are set and its contents
  // scanned before any line goes out: a client reacting to the line is seen inside it, and
  // what it does there is not also found by the scan.
  Status WatchNewDirectory(const std::string& path, const char* type, bool report_contents) {
    std::vector<PendingEvent> events = {{type, path, true}};
    UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dir) {
      auto added = AddWatch(path);
      if (!added.ok()) return added.error();
      if (*added) BH_TRY(WatchContents(dir.get(), path, report_contents ? &events : nullptr));
    }
    for (const auto& event : events) BH_TRY(Emit(event.type, event.path, event.dir));
    return {};
  }

  // Renames (or forgets) the watches of `old_path` and everything below it.
  void ForgetTree(const std::string& old_path, bool remove_watches, const std::string& new_path = {}) {
    for (auto it = paths_.begin(); it != paths_.end();) {
      const std::string& p = it->second;
      bool inside = p == old_path || (p.size() > old_path.size() && p.compare(0, old_path.size(), old_path) == 0 &&
                                      p[old_path.size()] == '/');
      if (!inside || it->first == root_wd_) {
        ++it;
      } else if (remove_watches) {
        ::inotify_rm_watch(inotify_.get(), it->first);
        it = paths_.erase(it);
      } else {
        it->second = new_path + p.substr(old_path.size());
        ++it;
      }
    }
  }

  Status Handle(const struct inotify_event& event) {
    if (event.mask & IN_Q_OVERFLOW) {
      // Events were lost: end the watch rather than let the client believe it saw them all.
      return FileError("too_large", "too many events at once: the watch of " + root_ + " overflowed");
    }
    auto it = paths_.find(event.wd);
    if (it == paths_.end()) return {};
    bool is_root = event.wd == root_wd_;
    if (event.mask & IN_IGNORED) {
      paths_.erase(it);
      if (is_root) done_ = true;
      return {};
    }
    bool is_dir = (event.mask & IN_ISDIR) != 0;
    if (event.len == 0) {
      // About the watched inode itself; for a subdirectory its parent's watch reports the same.
      if (!is_root) {
        // A rename queues the directory's IN_MOVE_SELF after both halves: if its IN_MOVED_FROM
        // is still unpaired, it left the tree.
        if (event.mask & IN_MOVE_SELF) ForgetUnpairedMove(it->second);
        return {};
      }
      if (event.mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        BH_TRY(Emit(event.mask & IN_DELETE_SELF ? "remove" : "rename", root_, root_is_dir_));
        done_ = true;
        return {};
      }
      if (event.mask & IN_ATTRIB) return Emit("chmod", root_, root_is_dir_);
      if (event.mask & IN_CLOSE_WRITE) return Emit("write", root_, false);
      return {};
    }

    std::string path = JoinPath(it->second, event.name);  // copied: the handlers below may change paths_
    if (!is_dir && IsWriteTemporary(event.name, path)) {
      if (event.mask & IN_MOVED_FROM) write_commits_[event.cookie] = {WriteKind(event.name), PairDeadline()};
      return {};
    }
    if (auto commit = write_commits_.find(event.cookie); (event.mask & IN_MOVED_TO) && commit != write_commits_.end()) {
      const char kind = commit->second.kind;
      write_commits_.erase(commit);
      if (kind != kWriteReplaceOwned) BH_TRY(Emit("create", path, false));
      if (kind != kWriteAsWriter) BH_TRY(Emit("chmod", path, false));
      return Emit("write", path, false);
    }
    if (event.mask & IN_CREATE) {
      if (is_dir && recursive_) return WatchNewDirectory(path, "create", /*report_contents=*/true);
      BH_TRY(Emit("create", path, is_dir));
    } else if (event.mask & IN_MOVED_FROM) {
      BH_TRY(Emit("rename", path, is_dir));
      if (is_dir) moved_from_[event.cookie] = {path, PairDeadline()};
    } else if (event.mask & IN_MOVED_TO) {
      auto from = moved_from_.find(event.cookie);
      if (!is_dir || !recursive_) {
        BH_TRY(Emit("rename", path, is_dir));
      } else if (from != moved_from_.end()) {
        // Moved within the tree: its watches stay, under the new name.
        ForgetTree(from->second.path, /*remove_watches=*/false, path);
        moved_from_.erase(from);
        BH_TRY(Emit("rename", path, true));
      } else {
        BH_TRY(WatchNewDirectory(path, "rename", /*report_contents=*/false));
      }
    } else if (event.mask & IN_CLOSE_WRITE) {
      BH_TRY(Emit("write", path, false));
    } else if (event.mask & IN_DELETE) {
      BH_TRY(Emit("remove", path, is_dir));
    } else if (event.mask & IN_ATTRIB) {
      BH_TRY(Emit("chmod", path, is_dir));
    }
    return {};
  }

  // One event line, written at once. A closed stdout ends the watch.
  Status Emit(const char* type, const std::string& path, bool is_dir) {
    if (done_) return {};
    json line = {{"type", type}, {"path", path}, {"dir", is_dir}};
    // What is there now (envd's includeEntry): never for a remove or rename, whose entry is
    // gone; none if it went meanwhile.
    const std::string_view kind = type;
    if (entries_ && (kind == "create" || kind == "write" || kind == "chmod")) {
      if (auto entry = EntryOf(path, *entries_); entry.ok()) line["entry"] = std::move(*entry);
    }
    Status written = WriteJsonLine(line);
    if (!written.ok()) done_ = true;
    return {};
  }

  std::string root_;
  bool recursive_;
  std::optional<EntryDetails> entries_;
  bool root_is_dir_ = false;
  UniqueFd inotify_;
  int root_wd_ = -1;
  std::map<int, std::string> paths_;             // watch descriptor -> the directory's path
  using Clock = std::chrono::steady_clock;
  // How long an IN_MOVED_FROM waits for its IN_MOVED_TO (Run).
  static Clock::time_point PairDeadline() { return Clock::now() + std::chrono::milliseconds(20); }
  struct MovedDirectory {
    std::string path;
    Clock::time_point expires;
  };
  struct WriteCommit {
    char kind;
    Clock::time_point expires;
  };
  std::map<uint32_t, MovedDirectory> moved_from_;  // unpaired IN_MOVED_FROM directories, by cookie
  std::map<uint32_t, WriteCommit> write_commits_;  // unpaired renames of a write's temporary, by cookie
  bool done_ = false;
};

}  // namespace

Status WatchOp(const FileOpArgs& args) {
  auto path = args.Path("path");
  if (!path.ok()) return path.error();
  auto recursive = args.Bool("recursive", true);
  if (!recursive.ok()) return recursive.error();
  auto entries = args.Bool("entries", false);
  if (!entries.ok()) return entries.error();
  auto details = EntryDetailsOf(args);
  if (!details.ok()) return details.error();
  auto network_mounts = args.Bool("allow_network_mounts", true);
  if (!network_mounts.ok()) return network_mounts.error();
  if (!*network_mounts) {
    struct statfs fs;
    if (::statfs(path->c_str(), &fs) != 0) return ErrnoError(errno, "statfs", *path);
    if (IsNetworkFilesystem(fs)) return FileError("invalid_argument", "cannot watch path on network filesystem: " + *path);
  }
  Watcher watcher(*path, *recursive, *entries ? std::optional<EntryDetails>(*details) : std::nullopt);
  BH_TRY(watcher.Start());
  BH_TRY(WriteJsonLine(json{{"type", "ready"}}));
  return watcher.Run();
}

}  // namespace bulkhead::init
