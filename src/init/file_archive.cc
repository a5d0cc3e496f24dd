// archive_create and archive_extract (ctl_protocol.h, "File operations"), with libarchive.
//
// Both walk the tree themselves, one directory fd at a time, and never follow a symlink below
// the requested path: archive_create stores symlinks as symlinks, and archive_extract creates
// every entry relative to its parent directory opened with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS), so no entry can be written through a symlink, including one an
// earlier entry of the same archive created.
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "common/unique_fd.h"
#include "init/file_worker.h"

namespace bulkhead::init {
namespace {

using nlohmann::json;

constexpr size_t kChunk = 128 * 1024;

struct ArchiveWriteFree {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct ArchiveReadFree {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct ArchiveEntryFree {
  void operator()(struct archive_entry* e) const { archive_entry_free(e); }
};
using ArchiveWriter = std::unique_ptr<struct archive, ArchiveWriteFree>;
using ArchiveReader = std::unique_ptr<struct archive, ArchiveReadFree>;
using ArchiveEntry = std::unique_ptr<struct archive_entry, ArchiveEntryFree>;

std::string ArchiveMessage(struct archive* a) {
  const char* message = archive_error_string(a);
  return message ? message : "unknown libarchive error";
}

// ---- archive_create ----

// Writes one entry: its header (from `st`) and, for a regular file, `st.st_size` bytes of `fd`.
Status AddEntry(struct archive* a, const std::string& name, const std::string& path, const struct stat& st, int fd,
                const std::string* link_target) {
  ArchiveEntry entry(archive_entry_new());
  archive_entry_copy_stat(entry.get(), &st);
  archive_entry_set_nlink(entry.get(), 1);  // hard links are stored as plain files
  archive_entry_copy_pathname(entry.get(), name.c_str());
  if (link_target) archive_entry_copy_symlink(entry.get(), link_target->c_str());
  if (!S_ISREG(st.st_mode)) archive_entry_set_size(entry.get(), 0);
  if (archive_write_header(a, entry.get()) < ARCHIVE_WARN) return FileError("internal", "archive " + path + ": " + ArchiveMessage(a));
  if (!S_ISREG(st.st_mode)) return {};

  std::vector<char> buf(kChunk);
  uint64_t left = uint64_t(st.st_size);
  while (left > 0) {
    ssize_t n = ::read(fd, buf.data(), std::min<uint64_t>(left, buf.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "read", path);
    if (n == 0) break;  // it shrank: libarchive pads the entry to the size in its header
    if (archive_write_data(a, buf.data(), size_t(n)) < 0) return FileError("internal", "archive " + path + ": " + ArchiveMessage(a));
    left -= uint64_t(n);
  }
  if (archive_write_finish_entry(a) < ARCHIVE_WARN) return FileError("internal", "archive " + path + ": " + ArchiveMessage(a));
  return {};
}

// With "one_file_system": what is on the archived directory's own mount, told by mount id
// (a bind-mounted file too), else by device.
struct MountFilter {
  bool active = false;
  bool by_mount_id = false;
  uint64_t mount_id = 0;
  dev_t dev = 0;

  static MountFilter Of(int fd, bool active) {
    MountFilter filter;
    filter.active = active;
    struct statx stx {};
    if (::statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) == 0 && (stx.stx_mask & STATX_MNT_ID)) {
      filter.by_mount_id = true;
      filter.mount_id = stx.stx_mnt_id;
    }
    struct stat st {};
    if (::fstat(fd, &st) == 0) filter.dev = st.st_dev;
    return filter;
  }
  bool Takes(int fd, const struct stat& st) const {
    if (!active) return true;
    if (!by_mount_id) return st.st_dev == dev;
    struct statx stx {};
    return ::statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) == 0 && stx.stx_mnt_id == mount_id;
  }
};

// Adds the contents of the directory `dir_fd` (named `prefix` in the archive, `dir_path` in
// the sandbox), depth first, each directory before what it holds. Fifos, sockets and device
// nodes are skipped: archive_extract would refuse them.
Status AddDirectoryContents(struct archive* a, int dir_fd, const std::string& prefix, const std::string& dir_path,
                            const MountFilter& mounts) {
  auto names = DirectoryNames(dir_fd, dir_path);
  if (!names.ok()) return names.error();
  for (const auto& name : *names) {
    std::string entry_name = prefix.empty() ? name : prefix + "/" + name;
    std::string path = JoinPath(dir_path, name);
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      return ErrnoError(errno, "stat", path);
    }
    if (S_ISLNK(st.st_mode)) {
      std::vector<char> target(PATH_MAX + 1);  // a symlink's target is shorter than PATH_MAX
      ssize_t n = ::readlinkat(dir_fd, name.c_str(), target.data(), target.size());
      if (n < 0) return ErrnoError(errno, "readlink", path);
      std::string link(target.data(), size_t(n));
      BH_TRY(AddEntry(a, entry_name, path, st, -1, &link));
    } else if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub && (errno == ENOENT || errno == ELOOP || errno == ENOTDIR)) continue;  // replaced meanwhile
      if (!sub) return ErrnoError(errno, "open", path);
      if (::fstat(sub.get(), &st) != 0) return ErrnoError(errno, "stat", path);
      if (!mounts.Takes(sub.get(), st)) continue;
      BH_TRY(AddEntry(a, entry_name, path, st, -1, nullptr));
      BH_TRY(AddDirectoryContents(a, sub.get(), entry_name, path, mounts));
    } else if (S_ISREG(st.st_mode)) {
      UniqueFd file(::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
      if (!file && (errno == ENOENT || errno == ELOOP)) continue;
      if (!file) return ErrnoError(errno, "open", path);
      if (::fstat(file.get(), &st) != 0) return ErrnoError(errno, "stat", path);
      if (!S_ISREG(st.st_mode) || !mounts.Takes(file.get(), st)) continue;
      BH_TRY(AddEntry(a, entry_name, path, st, file.get(), nullptr));
    }
  }
  return {};
}

// ---- archive_extract ----

// Opens `rel` below `dir_fd` without passing through any symlink or leaving `dir_fd`. `rel`
// has no "." or ".." components.
int OpenBeneath(int dir_fd, const std::string& rel, int flags) {
  struct open_how how {};
  how.flags = uint64_t(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = ::syscall(SYS_openat2, dir_fd, rel.c_str(), &how, sizeof(how));
  if (fd >= 0 || errno != ENOSYS) return int(fd);
  // No openat2 (Linux < 5.6, gVisor): one component at a time with O_NOFOLLOW is as strict,
  // since `rel` has no "..".
  UniqueFd current(::openat(dir_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  size_t start = 0;
  while (current) {
    size_t end = rel.find('/', start);
    std::string part = rel.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (end == std::string::npos) return ::openat(current.get(), part.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
    current.reset(::openat(current.get(), part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    start = end + 1;
  }
  return -1;
}

// An entry's name split into components, or an error for an absolute name or "..".
Result<std::vector<std::string>> EntryComponents(const char* name) {
  if (name == nullptr || *name == '\0') return FileError("invalid_argument", "an archive entry has no name");
  std::string_view text = name;
  if (text[0] == '/') return FileError("invalid_argument", "archive entry \"" + std::string(text) + "\" has an absolute name");
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = std::min(text.find('/', start), text.size());
    std::string_view part = text.substr(start, end - start);
    if (part == "..") return FileError("invalid_argument", "archive entry \"" + std::string(text) + "\" contains \"..\"");
    if (!part.empty() && part != ".") parts.emplace_back(part);
    start = end + 1;
  }
  return parts;
}

std::string JoinComponents(const std::vector<std::string>& parts, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += (i ? "/" : "") + parts[i];
  return out;
}

class Extractor {
 public:
  Extractor(int root_fd, std::string root_path, std::optional<FileOwner> owner)
      : root_fd_(root_fd), root_path_(std::move(root_path)), owner_(owner) {}

  Status Extract(struct archive* a, struct archive_entry* entry) {
    auto parts = EntryComponents(archive_entry_pathname(entry));
    if (!parts.ok()) return parts.error();
    if (parts->empty()) return {};  // the target directory itself
    std::string rel = JoinComponents(*parts, parts->size());
    std::string path = JoinPath(root_path_, rel);
    const std::string& leaf = parts->back();

    const char* hardlink = archive_entry_hardlink(entry);
    mode_t type = archive_entry_filetype(entry);
    if (!hardlink && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      return FileError("invalid_argument", "archive entry \"" + rel + "\" is a device node, fifo or socket");
    }
    auto parent = OpenParent(*parts, rel);
    if (!parent.ok()) return parent.error();
    int dir_fd = parent->get();

    if (hardlink) {
      BH_TRY(ExtractHardLink(hardlink, dir_fd, leaf, rel, path));
    } else if (type == AE_IFDIR) {
      BH_TRY(ExtractDirectory(entry, dir_fd, leaf, rel, path));
    } else if (type == AE_IFLNK) {
      BH_TRY(ExtractSymlink(entry, dir_fd, leaf, rel, path));
    } else {
      BH_TRY(ExtractFile(a, entry, dir_fd, leaf, rel, path));
    }
    ++entries_;
    return {};
  }

  // Directory modes and times are set last: a read-only directory must still take its
  // contents, and adding them would change its mtime.
  Status FinishDirectories() {
    for (auto it = directories_.rbegin(); it != directories_.rend(); ++it) {
      UniqueFd fd(OpenBeneath(root_fd_, it->rel, O_RDONLY | O_DIRECTORY));
      if (!fd) continue;  // replaced by a later entry
      if (::fchmod(fd.get(), it->mode) != 0) return ErrnoError(errno, "chmod", JoinPath(root_path_, it->rel));
      if (it->has_mtime) ::futimens(fd.get(), it->times);
    }
    return {};
  }

  uint64_t entries() const { return entries_; }
  uint64_t bytes() const { return bytes_; }

 private:
  struct PendingDirectory {
    std::string rel;
    mode_t mode;
    bool has_mtime;
    struct timespec times[2];
  };

  Error EntryError(int err, const std::string& what, const std::string& rel, const std::string& path) {
    if (err == ELOOP || err == EXDEV) {
      return FileError("invalid_argument", "archive entry \"" + rel + "\" would pass through a symlink");
    }
    return ErrnoError(err, what, path);
  }

  // The entry's parent directory, opened beneath the target (created with 0755 where missing).
  Result<UniqueFd> OpenParent(const std::vector<std::string>& parts, const std::string& rel) {
    size_t depth = parts.size() - 1;
    if (depth == 0) {
      UniqueFd fd(::openat(root_fd_, ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!fd) return ErrnoError(errno, "open", root_path_);
      return fd;
    }
    UniqueFd fd(OpenBeneath(root_fd_, JoinComponents(parts, depth), O_PATH | O_DIRECTORY));
    if (fd) return fd;
    if (errno != ENOENT) return EntryError(errno, "open the parent of", rel, JoinPath(root_path_, rel));
    // Create the missing ones, one component at a time.
    fd.reset(::openat(root_fd_, ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
    for (size_t i = 0; i < depth && fd; ++i) {
      std::string dir_path = JoinPath(root_path_, JoinComponents(parts, i + 1));
      UniqueFd next(OpenBeneath(fd.get(), parts[i], O_PATH | O_DIRECTORY));
      if (!next && errno == ENOENT) {
        if (::mkdirat(fd.get(), parts[i].c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError(errno, "mkdir", dir_path);
        next.reset(OpenBeneath(fd.get(), parts[i], O_PATH | O_DIRECTORY));
      }
      if (!next) return EntryError(errno, "open", rel, dir_path);
      fd = std::move(next);
    }
    return fd;
  }

  // Removes what is at `leaf` (not a directory) so a new entry can take its place; removing a
  // symlink never touches what it points to.
  Status ClearLeaf(int dir_fd, const std::string& leaf, const std::string& path) {
    if (::unlinkat(dir_fd, leaf.c_str(), 0) != 0 && errno != ENOENT) return ErrnoError(errno, "replace", path);
    return {};
  }

  Status ExtractHardLink(const char* target, int dir_fd, const std::string& leaf, const std::string& rel,
                         const std::string& path) {
    auto target_parts = EntryComponents(target);
    if (!target_parts.ok() || target_parts->empty()) {
      return FileError("invalid_argument", "archive entry \"" + rel + "\" is a hard link leaving the directory");
    }
    std::string target_rel = JoinComponents(*target_parts, target_parts->size());
    if (!extracted_.count(target_rel)) {
      return FileError("invalid_argument", "archive entry \"" + rel + "\" is a hard link to \"" + target_rel +
                                               "\", which is not an earlier entry");
    }
    UniqueFd target_dir(target_parts->size() == 1
                            ? ::openat(root_fd_, ".", O_PATH | O_DIRECTORY | O_CLOEXEC)
                            : OpenBeneath(root_fd_, JoinComponents(*target_parts, target_parts->size() - 1), O_PATH | O_DIRECTORY));
    if (!target_dir) return EntryError(errno, "open the target of", rel, path);
    BH_TRY(ClearLeaf(dir_fd, leaf, path));
    if (::linkat(target_dir.get(), target_parts->back().c_str(), dir_fd, leaf.c_str(), 0) != 0) {
      return ErrnoError(errno, "link", path);
    }
    extracted_.insert(rel);
    return {};
  }

  Status ExtractDirectory(struct archive_entry* entry, int dir_fd, const std::string& leaf, const std::string& rel,
                          const std::string& path) {
    if (::mkdirat(dir_fd, leaf.c_str(), 0700) != 0) {
      struct stat st;
      if (errno != EEXIST) return ErrnoError(errno, "mkdir", path);
      if (::fstatat(dir_fd, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoError(errno, "stat", path);
      if (!S_ISDIR(st.st_mode)) {
        BH_TRY(ClearLeaf(dir_fd, leaf, path));
        if (::mkdirat(dir_fd, leaf.c_str(), 0700) != 0) return ErrnoError(errno, "mkdir", path);
      }
    }
    BH_TRY(Chown(dir_fd, leaf, path));
    PendingDirectory pending{rel, mode_t(archive_entry_perm(entry) & 07777), archive_entry_mtime_is_set(entry) != 0, {}};
    pending.times[0].tv_nsec = UTIME_OMIT;
    pending.times[1] = {archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)};
    directories_.push_back(pending);
    return {};
  }

  Status ExtractSymlink(struct archive_entry* entry, int dir_fd, const std::string& leaf, const std::string& rel,
                        const std::string& path) {
    const char* target = archive_entry_symlink(entry);
    if (target == nullptr || *target == '\0') return FileError("invalid_argument", "archive entry \"" + rel + "\" is a symlink without a target");
    BH_TRY(ClearLeaf(dir_fd, leaf, path));
    // Created, never followed: later entries refuse to pass through it.
    if (::symlinkat(target, dir_fd, leaf.c_str()) != 0) return ErrnoError(errno, "symlink", path);
    BH_TRY(Chown(dir_fd, leaf, path));
    if (archive_entry_mtime_is_set(entry)) {
      struct timespec times[2] = {{0, UTIME_OMIT}, {archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)}};
      ::utimensat(dir_fd, leaf.c_str(), times, AT_SYMLINK_NOFOLLOW);
    }
    extracted_.insert(rel);
    return {};
  }

  Status ExtractFile(struct archive* a, struct archive_entry* entry, int dir_fd, const std::string& leaf,
                     const std::string& rel, const std::string& path) {
    BH_TRY(ClearLeaf(dir_fd, leaf, path));
    UniqueFd fd(::openat(dir_fd, leaf.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return ErrnoError(errno, "create", path);
    Status copied = CopyData(a, fd.get(), path);
    if (copied.ok() && archive_entry_size_is_set(entry) && ::ftruncate(fd.get(), archive_entry_size(entry)) != 0) {
      copied = ErrnoError(errno, "write", path);
    }
    if (!copied.ok()) {
      ::unlinkat(dir_fd, leaf.c_str(), 0);  // no half-written file
      return copied;
    }
    if (owner_ && ::fchown(fd.get(), owner_->uid, owner_->gid) != 0) return ErrnoError(errno, "chown", path);
    if (::fchmod(fd.get(), archive_entry_perm(entry) & 07777) != 0) return ErrnoError(errno, "chmod", path);
    if (archive_entry_mtime_is_set(entry)) {
      struct timespec times[2] = {{0, UTIME_OMIT}, {archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)}};
      ::futimens(fd.get(), times);
    }
    extracted_.insert(rel);
    return {};
  }

  // The entry's data, block by block (sparse files come as blocks at offsets).
  Status CopyData(struct archive* a, int fd, const std::string& path) {
    while (true) {
      const void* block;
      size_t size;
      la_int64_t offset;
      int rc = archive_read_data_block(a, &block, &size, &offset);
      if (rc == ARCHIVE_EOF) return {};
      if (rc < ARCHIVE_WARN) return FileError("invalid_argument", "archive data of " + path + ": " + ArchiveMessage(a));
      const char* data = static_cast<const char*>(block);
      while (size > 0) {
        ssize_t n = ::pwrite(fd, data, size, offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoError(errno, "write", path);
        data += n;
        size -= size_t(n);
        offset += n;
        bytes_ += uint64_t(n);
      }
    }
  }

  // Gives an entry to the "owner" the operation names, if any (before its mode is set: a
  // change of owner clears set-id bits).
  Status Chown(int dir_fd, const std::string& leaf, const std::string& path) {
    if (owner_ && ::fchownat(dir_fd, leaf.c_str(), owner_->uid, owner_->gid, AT_SYMLINK_NOFOLLOW) != 0)
      return ErrnoError(errno, "chown", path);
    return {};
  }

  int root_fd_;
  std::string root_path_;
  std::optional<FileOwner> owner_;
  uint64_t entries_ = 0;
  uint64_t bytes_ = 0;
  std::set<std::string> extracted_;  // files and symlinks of this archive: what hard links may name
  std::vector<PendingDirectory> directories_;
};

}  // namespace

Status ArchiveCreateOp(const FileOpArgs& args) {
  auto path = args.Path("path");
  if (!path.ok()) return path.error();
  auto one_file_system = args.Bool("one_file_system", false);
  if (!one_file_system.ok()) return one_file_system.error();
  // The requested path itself may be a symlink (followed, as for list); nothing below it is.
  // Checked before open, which could block on a fifo or have effects on a device.
  struct stat st;
  if (::stat(path->c_str(), &st) != 0) return ErrnoError(errno, "stat", *path);
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) return FileError("invalid_argument", *path + " is neither a directory nor a regular file");
  UniqueFd root(::open(path->c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!root) return ErrnoError(errno, "open", *path);
  if (::fstat(root.get(), &st) != 0) return ErrnoError(errno, "stat", *path);
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) return FileError("invalid_argument", *path + " is neither a directory nor a regular file");

  ArchiveWriter a(archive_write_new());
  if (!a || archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      archive_write_open_fd(a.get(), 1) != ARCHIVE_OK) {
    return FileError("internal", "archive setup: " + (a ? ArchiveMessage(a.get()) : std::string("out of memory")));
  }
  if (S_ISDIR(st.st_mode)) {
    BH_TRY(AddDirectoryContents(a.get(), root.get(), "", *path, MountFilter::Of(root.get(), *one_file_system)));
  } else {
    BH_TRY(AddEntry(a.get(), *path == "/" ? "/" : SplitParent(*path).second, *path, st, root.get(), nullptr));
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) return FileError("internal", "archive " + *path + ": " + ArchiveMessage(a.get()));
  return {};
}

Status ArchiveExtractOp(const FileOpArgs& args) {
  auto path = args.Path("path");
  if (!path.ok()) return path.error();
  auto owner = args.Owner("owner");
  if (!owner.ok()) return owner.error();
  BH_TRY(MakeDirectories(*path, 0755, /*path_is_a_parent=*/true));
  UniqueFd root(::open(path->c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return ErrnoError(errno, "open", *path);

  ArchiveReader a(archive_read_new());
  if (!a || archive_read_support_format_tar(a.get()) != ARCHIVE_OK ||
      archive_read_support_filter_gzip(a.get()) != ARCHIVE_OK ||
      archive_read_support_filter_bzip2(a.get()) != ARCHIVE_OK ||
      archive_read_support_filter_xz(a.get()) != ARCHIVE_OK) {
    return FileError("internal", "archive setup: " + (a ? ArchiveMessage(a.get()) : std::string("out of memory")));
  }
  if (archive_read_open_fd(a.get(), 0, 64 * 1024) != ARCHIVE_OK) {
    return FileError("invalid_argument", "not a tar archive: " + ArchiveMessage(a.get()));
  }
  Extractor extractor(root.get(), *path, *owner);
  Status status;
  while (status.ok()) {
    struct archive_entry* entry;
    int rc = archive_read_next_header(a.get(), &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) {
      status = FileError("invalid_argument", "not a valid tar archive: " + ArchiveMessage(a.get()));
    } else {
      status = extractor.Extract(a.get(), entry);
    }
  }
  // Also after a refused entry: the entries before it stay, with their modes.
  Status finished = extractor.FinishDirectories();
  if (!status.ok()) return status;
  if (!finished.ok()) return finished;
  return WriteJsonLine(json{{"entries", extractor.entries()}, {"bytes", extractor.bytes()}});
}

}  // namespace bulkhead::init
