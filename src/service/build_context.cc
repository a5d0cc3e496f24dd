#include "service/build_context.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <algorithm>
#include <memory>

#include "build/context_ignore.h"
#include "common/digest.h"
#include "common/read_file.h"
#include "common/unique_fd.h"
#include "storage/fs_util.h"
#include "storage/tar_stream.h"

namespace bulkhead::api {
namespace {

using ArchiveReader = std::unique_ptr<struct archive, decltype(&archive_read_free)>;
using ArchiveWriter = std::unique_ptr<struct archive, decltype(&archive_write_free)>;
using Entry = std::unique_ptr<archive_entry, decltype(&archive_entry_free)>;

constexpr size_t kMaxDockerignore = 1 << 20;
constexpr size_t kMaxDockerfile = 1 << 20;

Error Invalid(const std::string& message) { return MakeError(ErrorCode::kBadRequest, message, "build_context_invalid"); }

std::string ArchiveMessage(struct archive* a) {
  const char* message = archive_error_string(a);
  return message ? message : "unknown error";
}

ArchiveReader OpenTar(const std::string& path, std::string* error) {
  ArchiveReader a(archive_read_new(), archive_read_free);
  archive_read_support_format_tar(a.get());
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_bzip2(a.get());
  archive_read_support_filter_xz(a.get());
  archive_read_support_filter_zstd(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), 64 * 1024) != ARCHIVE_OK) {
    *error = ArchiveMessage(a.get());
    return ArchiveReader(nullptr, archive_read_free);
  }
  return a;
}

// "./a//b/" -> "a/b"; "" for the root. Nullopt for a name with "..".
std::optional<std::string> CleanRelative(std::string_view name) {
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = std::min(name.find('/', start), name.size());
    std::string_view part = name.substr(start, end - start);
    if (part == "..") return std::nullopt;
    if (!part.empty() && part != ".") out += (out.empty() ? "" : "/") + std::string(part);
    start = end + 1;
  }
  return out;
}

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

std::string Base(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// Removes what the ignore rules leave out of `dir` (relative path `rel` in the context).
Status RemoveIgnored(const build::ContextIgnore& ignore, const std::string& dir, const std::string& rel) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return SystemError("opendir " + dir, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(d);
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    const std::string entry = rel.empty() ? name : rel + "/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;
    const bool is_dir = S_ISDIR(st.st_mode);
    if (ignore.Ignored(entry) && !(is_dir && ignore.MayTakeBelow(entry))) {
      BH_TRY(storage::RemoveTree(path));
    } else if (is_dir) {
      BH_TRY(RemoveIgnored(ignore, path, entry));
    }
  }
  return {};
}

// Opens `rel` inside `root` as if root were "/" (symlinks, absolute ones too, stay inside it)
// and answers the real path it reached.
Result<std::string> ResolveInside(const std::string& root, const std::string& rel) {
  UniqueFd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd) return SystemError("open " + root, errno);
  struct open_how how {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  const std::string name = rel.empty() ? "." : rel;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, root_fd.get(), name.c_str(), &how, sizeof how)));
  if (!fd) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return Invalid("COPY source " + rel + ": not found in the build context");
    return SystemError("open " + rel + " in the build context", errno);
  }
  char target[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd.get());
  const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  if (n < 0) return SystemError("readlink " + link, errno);
  std::string real(target, static_cast<size_t>(n));
  if (real != root && real.rfind(root + "/", 0) != 0) return Invalid("COPY source " + rel + " leaves the build context");
  return real;
}

bool HasWildcard(const std::string& text) { return text.find_first_of("*?[") != std::string::npos; }

// The paths under root (relative) that `pattern` matches, component by component.
std::vector<std::string> ExpandWildcards(const std::string& root, const std::string& pattern) {
  std::vector<std::string> matches = {""};
  size_t start = 0;
  while (start < pattern.size()) {
    const size_t end = std::min(pattern.find('/', start), pattern.size());
    const std::string part = pattern.substr(start, end - start);
    start = end + 1;
    std::vector<std::string> next;
    for (const std::string& base : matches) {
      if (!HasWildcard(part)) {
        const std::string candidate = base.empty() ? part : base + "/" + part;
        struct stat st;
        if (::lstat((root + "/" + candidate).c_str(), &st) == 0) next.push_back(candidate);
        continue;
      }
      DIR* d = ::opendir((root + "/" + base).c_str());
      if (d == nullptr) continue;
      std::vector<std::string> names;
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != ".." && ::fnmatch(part.c_str(), name.c_str(), FNM_PATHNAME) == 0) names.push_back(name);
      }
      ::closedir(d);
      std::sort(names.begin(), names.end());
      for (const std::string& name : names) next.push_back(base.empty() ? name : base + "/" + name);
    }
    matches = std::move(next);
  }
  return matches;
}

// A tar of one regular file under `name`.
Status WriteFileTar(const std::string& file, const std::string& name, std::optional<mode_t> chmod,
                    const std::string& out_path) {
  UniqueFd in(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!in) return SystemError("open " + file, errno);
  struct stat st;
  if (::fstat(in.get(), &st) != 0) return SystemError("stat " + file, errno);
  ArchiveWriter a(archive_write_new(), archive_write_free);
  Entry entry(archive_entry_new(), archive_entry_free);
  if (archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      archive_write_open_filename(a.get(), out_path.c_str()) != ARCHIVE_OK)
    return MakeError(ErrorCode::kInternal, "tar " + out_path + ": " + ArchiveMessage(a.get()));
  archive_entry_copy_stat(entry.get(), &st);
  archive_entry_set_pathname(entry.get(), name.c_str());
  archive_entry_set_uid(entry.get(), 0);
  archive_entry_set_gid(entry.get(), 0);
  archive_entry_set_nlink(entry.get(), 1);
  if (chmod) archive_entry_set_perm(entry.get(), *chmod);
  if (archive_write_header(a.get(), entry.get()) != ARCHIVE_OK)
    return MakeError(ErrorCode::kInternal, "tar " + out_path + ": " + ArchiveMessage(a.get()));
  std::string buffer(256 * 1024, '\0');
  for (;;) {
    const ssize_t n = ::read(in.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SystemError("read " + file, errno);
    if (n == 0) break;
    if (archive_write_data(a.get(), buffer.data(), static_cast<size_t>(n)) < 0)
      return MakeError(ErrorCode::kInternal, "tar " + out_path + ": " + ArchiveMessage(a.get()));
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK)
    return MakeError(ErrorCode::kInternal, "tar " + out_path + ": " + ArchiveMessage(a.get()));
  return {};
}

// A tar of a directory's contents, owners root's (the unpacking gives them to --chown).
Status WriteDirectoryTar(const std::string& dir, std::optional<mode_t> chmod, const std::string& out_path) {
  UniqueFd out(::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!out) return SystemError("create " + out_path, errno);
  return storage::StreamDirectoryAsTar(
      dir,
      [&](std::string_view chunk) -> Status {
        size_t done = 0;
        while (done < chunk.size()) {
          const ssize_t n = ::write(out.get(), chunk.data() + done, chunk.size() - done);
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) return SystemError("write " + out_path, errno);
          done += static_cast<size_t>(n);
        }
        return {};
      },
      [](const std::string&) {},
      [&](archive_entry* e) {
        archive_entry_set_uid(e, 0);
        archive_entry_set_gid(e, 0);
        archive_entry_set_uname(e, nullptr);
        archive_entry_set_gname(e, nullptr);
        if (chmod && archive_entry_filetype(e) != AE_IFLNK) archive_entry_set_perm(e, *chmod);
      });
}

// Copies the tar at `in` to `out`, renaming an entry named `from` to `to` and giving every
// entry but symlinks `chmod` if set.
Status RewriteTar(const std::string& in, const std::string& out, const std::string& from, const std::string& to,
                  std::optional<mode_t> chmod) {
  std::string error;
  ArchiveReader reader = OpenTar(in, &error);
  if (!reader) return MakeError(ErrorCode::kInternal, "read " + in + ": " + error);
  ArchiveWriter writer(archive_write_new(), archive_write_free);
  if (archive_write_set_format_pax_restricted(writer.get()) != ARCHIVE_OK ||
      archive_write_open_filename(writer.get(), out.c_str()) != ARCHIVE_OK)
    return MakeError(ErrorCode::kInternal, "tar " + out + ": " + ArchiveMessage(writer.get()));
  archive_entry* entry = nullptr;
  for (;;) {
    const int r = archive_read_next_header(reader.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) return MakeError(ErrorCode::kInternal, "read " + in + ": " + ArchiveMessage(reader.get()));
    if (auto name = CleanRelative(archive_entry_pathname(entry)); name && *name == from)
      archive_entry_set_pathname(entry, to.c_str());
    if (chmod && archive_entry_filetype(entry) != AE_IFLNK) archive_entry_set_perm(entry, *chmod);
    if (archive_write_header(writer.get(), entry) != ARCHIVE_OK)
      return MakeError(ErrorCode::kInternal, "tar " + out + ": " + ArchiveMessage(writer.get()));
    const void* block;
    size_t size;
    la_int64_t offset;
    while (archive_read_data_block(reader.get(), &block, &size, &offset) == ARCHIVE_OK)
      if (archive_write_data(writer.get(), block, size) < 0)
        return MakeError(ErrorCode::kInternal, "tar " + out + ": " + ArchiveMessage(writer.get()));
  }
  if (archive_write_close(writer.get()) != ARCHIVE_OK)
    return MakeError(ErrorCode::kInternal, "tar " + out + ": " + ArchiveMessage(writer.get()));
  return {};
}

bool IsTarArchive(const std::string& path) {
  std::string error;
  ArchiveReader a = OpenTar(path, &error);
  archive_entry* entry = nullptr;
  return a && archive_read_next_header(a.get(), &entry) == ARCHIVE_OK;
}

}  // namespace

Status ExtractContext(const std::string& tar_path, const std::string& dir) {
  std::string error;
  ArchiveReader reader = OpenTar(tar_path, &error);
  if (!reader) return Invalid("the build context is not a tar archive: " + error);
  // Entries are written by absolute path under the real path of `dir` (names cleaned of ".."
  // and leading '/'): libarchive refuses any that would pass through a symlink, such as one an
  // earlier entry made.
  char real_dir[PATH_MAX];
  if (::realpath(dir.c_str(), real_dir) == nullptr) return SystemError("realpath " + dir, errno);
  const std::string root = real_dir;
  ArchiveWriter disk(archive_write_disk_new(), archive_write_free);
  archive_write_disk_set_options(disk.get(), ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                                                 ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                                 ARCHIVE_EXTRACT_UNLINK);
  archive_entry* entry = nullptr;
  for (;;) {
    const int r = archive_read_next_header(reader.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) return Invalid("the build context is not a valid tar archive: " + ArchiveMessage(reader.get()));
    auto name = CleanRelative(archive_entry_pathname(entry));
    if (!name) return Invalid(std::string("build context entry ") + archive_entry_pathname(entry) + " has \"..\"");
    if (name->empty()) continue;
    const mode_t type = archive_entry_filetype(entry);
    const bool hardlink = archive_entry_hardlink(entry) != nullptr;
    if (!hardlink && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) continue;  // devices, fifos
    if (hardlink) {
      auto target = CleanRelative(archive_entry_hardlink(entry));
      if (!target || target->empty()) return Invalid("build context entry " + *name + " links outside the context");
      archive_entry_copy_hardlink(entry, (root + "/" + *target).c_str());
    }
    archive_entry_copy_pathname(entry, (root + "/" + *name).c_str());
    archive_entry_set_perm(entry, archive_entry_perm(entry) & 01777);  // no set-id file of root's on the host
    if (archive_write_header(disk.get(), entry) != ARCHIVE_OK)
      return Invalid("build context entry " + *name + ": " + ArchiveMessage(disk.get()));
    const void* block;
    size_t size;
    la_int64_t offset;
    int data = ARCHIVE_OK;
    while ((data = archive_read_data_block(reader.get(), &block, &size, &offset)) == ARCHIVE_OK)
      if (archive_write_data_block(disk.get(), block, size, offset) < ARCHIVE_OK)
        return Invalid("build context entry " + *name + ": " + ArchiveMessage(disk.get()));
    if (data < ARCHIVE_WARN) return Invalid("the build context is cut short: " + ArchiveMessage(reader.get()));
    if (archive_write_finish_entry(disk.get()) < ARCHIVE_WARN)
      return Invalid("build context entry " + *name + ": " + ArchiveMessage(disk.get()));
  }
  if (archive_write_close(disk.get()) != ARCHIVE_OK) return Invalid("the build context: " + ArchiveMessage(disk.get()));
  return {};
}

Result<std::string> UnpackContext(const std::string& tar_path, const std::string& dir, const std::string& dockerfile) {
  BH_TRY(ExtractContext(tar_path, dir));
  auto clean = CleanRelative(dockerfile);
  if (!clean || clean->empty()) return Invalid("the Dockerfile must be a file in the build context: " + dockerfile);
  auto dockerfile_path = ResolveInside(dir, *clean);
  struct stat st;
  if (!dockerfile_path.ok() || ::stat(dockerfile_path->c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return Invalid("no Dockerfile " + dockerfile + " in the build context");
  if (st.st_size > static_cast<off_t>(kMaxDockerfile)) return Invalid("the Dockerfile is over 1 MiB");
  std::optional<std::string> text = ReadSmallFile(*dockerfile_path, kMaxDockerfile);
  if (!text) return Invalid("the Dockerfile could not be read");

  const std::string ignore_path = dir + "/.dockerignore";
  if (::lstat(ignore_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return *text;
  if (st.st_size > static_cast<off_t>(kMaxDockerignore)) return Invalid(".dockerignore is over 1 MiB");
  std::optional<std::string> rules = ReadSmallFile(ignore_path, kMaxDockerignore);
  if (!rules) return Invalid(".dockerignore could not be read");
  auto ignore = build::ContextIgnore::Parse(*rules);
  if (!ignore.ok()) return ignore.error();
  BH_TRY(RemoveIgnored(*ignore, dir, ""));
  return *text;
}

Result<std::vector<CopyPart>> PlanCopy(const std::string& root, const std::vector<std::string>& sources,
                                       const std::string& dest, std::optional<mode_t> chmod, bool add,
                                       const std::string& work_dir) {
  std::vector<std::string> matched;
  for (const std::string& source : sources) {
    auto clean = CleanRelative(source);
    if (!clean) return Invalid("COPY source " + source + " leaves the build context");
    if (!HasWildcard(*clean)) {
      matched.push_back(*clean);
      continue;
    }
    std::vector<std::string> expanded = ExpandWildcards(root, *clean);
    if (expanded.empty()) return Invalid("COPY source " + source + " matches no file in the build context");
    matched.insert(matched.end(), expanded.begin(), expanded.end());
  }
  const bool several = matched.size() > 1;
  const bool into_dir = several || dest.back() == '/';
  if (several && dest.back() != '/')
    return Invalid("COPY of several sources needs a destination directory ending with '/': " + dest);
  const std::string dest_path = dest.size() > 1 && dest.back() == '/' ? dest.substr(0, dest.size() - 1) : dest;
  std::vector<CopyPart> parts;
  for (const std::string& rel : matched) {
    auto real = ResolveInside(root, rel);
    if (!real.ok()) return real.error();
    struct stat st;
    if (::stat(real->c_str(), &st) != 0) return SystemError("stat " + *real, errno);
    const std::string tar = work_dir + "/copy-" + std::to_string(parts.size()) + ".tar";
    if (S_ISDIR(st.st_mode)) {
      BH_TRY(WriteDirectoryTar(*real, chmod, tar));
      parts.push_back({dest_path, tar, false});
    } else if (!S_ISREG(st.st_mode)) {
      return Invalid("COPY source " + rel + " is neither a file nor a directory");
    } else if (add && IsTarArchive(*real)) {
      parts.push_back({dest_path, *real, true});
    } else if (into_dir) {
      BH_TRY(WriteFileTar(*real, Base(rel.empty() ? *real : rel), chmod, tar));
      parts.push_back({dest_path, tar, false});
    } else {
      BH_TRY(WriteFileTar(*real, Base(dest_path), chmod, tar));
      parts.push_back({Parent(dest_path), tar, false});
    }
  }
  return parts;
}

Result<CopyPart> PlaceArchived(const std::string& archived, bool source_is_dir, const std::string& source,
                               const std::string& dest, bool several, std::optional<mode_t> chmod) {
  const std::string dest_path = dest.size() > 1 && dest.back() == '/' ? dest.substr(0, dest.size() - 1) : dest;
  const bool into_dir = several || dest.back() == '/';
  const std::string rewritten = archived + ".placed";
  if (source_is_dir || into_dir) {
    if (!chmod) return CopyPart{dest_path, archived, false};
    BH_TRY(RewriteTar(archived, rewritten, "", "", chmod));
    return CopyPart{dest_path, rewritten, false};
  }
  BH_TRY(RewriteTar(archived, rewritten, Base(source), Base(dest_path), chmod));
  return CopyPart{Parent(dest_path), rewritten, false};
}

Result<std::string> DigestTarContent(const std::string& tar_path) {
  std::string error;
  ArchiveReader reader = OpenTar(tar_path, &error);
  if (!reader) return MakeError(ErrorCode::kInternal, "read " + tar_path + ": " + error);
  Sha256Stream hash;
  archive_entry* entry = nullptr;
  for (;;) {
    const int r = archive_read_next_header(reader.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) return MakeError(ErrorCode::kInternal, "read " + tar_path + ": " + ArchiveMessage(reader.get()));
    const char* link = archive_entry_symlink(entry);
    const char* hard = archive_entry_hardlink(entry);
    const std::string header = std::string(archive_entry_pathname(entry)) + '\0' +
                               std::to_string(archive_entry_mode(entry)) + '\0' + std::to_string(archive_entry_uid(entry)) +
                               '\0' + std::to_string(archive_entry_gid(entry)) + '\0' +
                               std::to_string(archive_entry_size(entry)) + '\0' + (link ? link : "") + '\0' +
                               (hard ? hard : "") + '\0';
    hash.Update(header);
    const void* block;
    size_t size;
    la_int64_t offset;
    while (archive_read_data_block(reader.get(), &block, &size, &offset) == ARCHIVE_OK)
      hash.Update(std::string_view(static_cast<const char*>(block), size));
  }
  return "sha256:" + HexEncode(hash.Digest());
}

}  // namespace bulkhead::api
