#include "storage/snapshot_archive.h"

#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "common/digest.h"
#include "common/scope_guard.h"
#include "common/unique_fd.h"
#include "storage/archive_util.h"
#include "storage/file_capability.h"
#include "storage/fs_util.h"

namespace bulkhead::storage {
namespace {

using nlohmann::json;

constexpr char kJsonName[] = "bulkhead-snapshot.json";
constexpr char kEndName[] = "bulkhead-snapshot.end";
constexpr char kTreePrefix[] = "rootfs/";
constexpr char kMemoryPrefix[] = "memory/";
constexpr char kUntrusted[] = "memory_image_untrusted";
constexpr char kFormatName[] = "bulkhead-snapshot";
constexpr char kDetail[] = "invalid_snapshot";
constexpr size_t kMaxMetadataBytes = 1 << 20;
constexpr size_t kMaxEndBytes = 4096;
constexpr int64_t kEntryCost = 512;  // what an entry counts against max_bytes besides its data
constexpr uid_t kIdRange = 65536;
constexpr uid_t kNobody = 65534;
constexpr size_t kChunk = 128 * 1024;
// One descriptor is held per level of the walk.
constexpr int kMaxDepth = 512;
// A file in more pieces than this is stored whole, holes as zeros, to bound the sparse map.
constexpr size_t kMaxSparseRegions = 4096;
// A memory image is a tier's handful of files (runsc: 3, QEMU: 2).
constexpr size_t kMaxMemoryFiles = 64;
constexpr int64_t kMaxMemoryFileSize = int64_t{1} << 40;
// Data runs of one memory file an import follows (each costs a line of its digest's map).
constexpr int64_t kMaxMemoryRuns = int64_t{1} << 20;

constexpr int kExtractFlags = ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                              ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                              ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS;

Error Invalid(const std::string& message) { return MakeError(ErrorCode::kInvalid, message, kDetail); }

std::string ArchiveMessage(archive* a) {
  const char* msg = archive_error_string(a);
  return msg ? msg : "unknown libarchive error";
}

// ---- xattrs ----

// What an export keeps: what the sandbox set (user.*, file capabilities) and what overlayfs
// needs to read the layer (opaque directories, renamed directories). trusted.overlay.origin
// and the like are file handles and hints about the source host's lower layers.
bool IsExportedXattr(const std::string& name) {
  return name.rfind("user.", 0) == 0 || name == "security.capability" || name == "trusted.overlay.opaque" ||
         name == "trusted.overlay.redirect";
}

bool IsImportableXattr(const std::string& name) {
  return name.rfind("user.", 0) == 0 || name == "security.capability" || name.rfind("trusted.overlay.", 0) == 0;
}

// ---- memory images ----

// A file's digest from its data as (offset, bytes) pieces, the same whichever pieces the data
// comes in (the exporter's reads, libarchive's blocks on import): SHA-256 over the data, and
// over the map of the runs it forms (start+length), and the size, all three together. Holes are
// not hashed: a sparse 1 GiB guest memory costs what it holds.
class RegionDigest {
 public:
  // Pieces come in ascending order, none overlapping; an empty one is ignored.
  bool Add(int64_t offset, std::string_view data) {
    if (data.empty()) return true;
    if (offset < run_end_) return false;
    if (offset != run_end_ || run_start_ < 0) {
      CloseRun();
      if (++runs_ > kMaxMemoryRuns) return false;
      run_start_ = offset;
    }
    data_.Update(data);
    run_end_ = offset + static_cast<int64_t>(data.size());
    return true;
  }

  std::string Finish(int64_t size) {
    CloseRun();
    map_.Update("size " + std::to_string(size));
    return HexEncode(Sha256(map_.Digest() + data_.Digest()));
  }

 private:
  void CloseRun() {
    if (run_start_ >= 0) map_.Update(std::to_string(run_start_) + "+" + std::to_string(run_end_ - run_start_) + ";");
    run_start_ = -1;
  }

  Sha256Stream data_;
  Sha256Stream map_;
  int64_t run_start_ = -1;
  int64_t run_end_ = 0;
  int64_t runs_ = 0;
};

struct MemoryFile {
  std::string name;
  int64_t size = 0;
  std::string digest;
};

// What a memory image's key vouches for: the archive's description, exactly as it is stored,
// and each memory file.
std::string MemoryImageMac(const std::string& key, const std::string& description, const std::vector<MemoryFile>& files) {
  std::string manifest = "bulkhead memory image\n" + description + "\n";
  for (const auto& file : files) manifest += file.name + " " + std::to_string(file.size) + " " + file.digest + "\n";
  return HexEncode(HmacSha256(key, manifest));
}

json MemoryFilesJson(const std::vector<MemoryFile>& files) {
  json list = json::array();
  for (const auto& file : files) list.push_back({{"name", file.name}, {"size", file.size}, {"digest", file.digest}});
  return list;
}

// A memory image's file names are a tier's own: letters, digits, ".", "_" and "-".
bool IsMemoryFileName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'; });
}

// ---- export ----

// Reads the xattrs of an open file, or (fd < 0) of name in dir_fd without following it:
// symlinks, fifos and whiteouts cannot be opened for that. /proc/self/fd/N pins the directory.
Result<std::vector<std::pair<std::string, std::string>>> ReadXattrs(int fd, int dir_fd, const std::string& name) {
  std::string path = "/proc/self/fd/" + std::to_string(dir_fd) + "/" + name;
  auto list = [&](char* buf, size_t size) {
    return fd >= 0 ? ::flistxattr(fd, buf, size) : ::llistxattr(path.c_str(), buf, size);
  };
  auto get = [&](const char* key, void* buf, size_t size) {
    return fd >= 0 ? ::fgetxattr(fd, key, buf, size) : ::lgetxattr(path.c_str(), key, buf, size);
  };
  std::vector<std::pair<std::string, std::string>> out;
  std::string names;
  for (int attempt = 0;; ++attempt) {  // the list may grow between the two calls
    ssize_t n = list(nullptr, 0);
    if (n < 0 && (errno == ENOTSUP || errno == ENOENT)) return out;
    if (n < 0) return SystemError("listxattr " + name, errno);
    names.resize(static_cast<size_t>(n));
    n = list(names.data(), names.size());
    if (n >= 0) {
      names.resize(static_cast<size_t>(n));
      break;
    }
    if (errno != ERANGE || attempt > 8) return SystemError("listxattr " + name, errno);
  }
  for (size_t at = 0; at < names.size();) {
    std::string key = names.c_str() + at;
    at += key.size() + 1;
    if (!IsExportedXattr(key)) continue;
    std::string value;
    for (int attempt = 0;; ++attempt) {
      ssize_t n = get(key.c_str(), nullptr, 0);
      if (n < 0 && errno == ENODATA) break;
      if (n < 0) return SystemError("getxattr " + name + " " + key, errno);
      value.resize(static_cast<size_t>(n));
      n = get(key.c_str(), value.data(), value.size());
      if (n >= 0) {
        value.resize(static_cast<size_t>(n));
        out.emplace_back(key, std::move(value));
        break;
      }
      if (errno == ENODATA) break;
      if (errno != ERANGE || attempt > 8) return SystemError("getxattr " + name + " " + key, errno);
    }
  }
  return out;
}

class TreeExporter {
 public:
  TreeExporter(archive* a, uid_t uid_base) : a_(a), uid_base_(uid_base) {}

  Status ExportRoot(int root_fd) {
    struct stat st;
    if (::fstat(root_fd, &st) != 0) return SystemError("stat snapshot root", errno);
    root_dev_ = st.st_dev;
    BH_TRY(WriteHeader(kTreePrefix, st, root_fd, -1, "", nullptr));
    return ExportChildren(root_fd, kTreePrefix, 1);
  }

  int64_t entries() const { return entries_; }

  // A memory image's file as memory/NAME, root's, 0600, its digest taken on the way.
  Result<MemoryFile> ExportMemoryFile(int fd, const std::string& name) {
    struct stat st;
    if (::fstat(fd, &st) != 0) return SystemError("stat memory image " + name, errno);
    if (!S_ISREG(st.st_mode)) return MakeError(ErrorCode::kInternal, "memory image " + name + " is not a regular file");
    st.st_uid = uid_base_;  // written as 0 (the image is the daemon's, not the sandbox's)
    st.st_gid = uid_base_;
    st.st_mode = S_IFREG | 0600;
    RegionDigest digest;
    BH_TRY(WriteFile(kMemoryPrefix + name, st, fd, &digest));
    return MemoryFile{name, st.st_size, digest.Finish(st.st_size)};
  }

 private:
  Status ExportChildren(int dir_fd, const std::string& prefix, int depth) {
    if (depth > kMaxDepth) {
      return MakeError(ErrorCode::kInvalid, "snapshot tree nested deeper than " + std::to_string(kMaxDepth) + " at " + prefix,
                       "snapshot_too_deep");
    }
    auto names = ListNames(dir_fd);
    if (!names.ok()) return names.error();
    std::sort(names->begin(), names->end());
    for (const auto& name : *names) BH_TRY(ExportChild(dir_fd, name, prefix + name, depth));
    return {};
  }

  // One name of a directory. The type comes from lstat; each open then checks it again on the
  // descriptor, so a name swapped in between is skipped, never followed.
  Status ExportChild(int dir_fd, const std::string& name, const std::string& path, int depth) {
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return {};  // removed meanwhile
      return SystemError("stat " + path, errno);
    }
    if (S_ISDIR(st.st_mode)) {
      UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!fd) return Vanished(path);
      if (::fstat(fd.get(), &st) != 0) return SystemError("stat " + path, errno);
      BH_TRY(WriteHeader(path + "/", st, fd.get(), -1, "", nullptr));
      if (st.st_dev != root_dev_) return {};  // a mount point: its contents are not the layer's
      return ExportChildren(fd.get(), path + "/", depth + 1);
    }
    if (S_ISREG(st.st_mode)) {
      UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
      if (!fd) return Vanished(path);
      if (::fstat(fd.get(), &st) != 0) return SystemError("stat " + path, errno);
      if (!S_ISREG(st.st_mode)) return {};
      if (st.st_nlink > 1) {
        auto [it, first] = links_.emplace(std::make_pair(st.st_dev, st.st_ino), path);
        if (!first) return WriteHeader(path, st, fd.get(), -1, "", &it->second);
      }
      return WriteFile(path, st, fd.get());
    }
    if (S_ISLNK(st.st_mode)) {
      char target[4097];
      ssize_t n = ::readlinkat(dir_fd, name.c_str(), target, sizeof target);
      if (n < 0) return Vanished(path);
      if (static_cast<size_t>(n) >= sizeof target) return SystemError("readlink " + path, ENAMETOOLONG);
      std::string link(target, static_cast<size_t>(n));
      return WriteHeader(path, st, -1, dir_fd, name, nullptr, &link);
    }
    if (S_ISFIFO(st.st_mode) || (S_ISCHR(st.st_mode) && st.st_rdev == 0)) {  // 0:0 = whiteout
      return WriteHeader(path, st, -1, dir_fd, name, nullptr);
    }
    return {};  // sockets and device nodes: not part of a portable layer
  }

  Status Vanished(const std::string& path) {
    if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR || errno == EINVAL) return {};
    return SystemError("open " + path, errno);
  }

  uid_t Canonical(uid_t id) const { return id >= uid_base_ && id - uid_base_ < kIdRange ? id - uid_base_ : kNobody; }

  // The header of one entry; xattrs come from fd, or from name in dir_fd when fd < 0.
  Status WriteHeader(const std::string& path, const struct stat& st, int fd, int dir_fd, const std::string& name,
                     const std::string* hardlink, const std::string* symlink = nullptr,
                     const std::vector<std::pair<int64_t, int64_t>>* sparse = nullptr) {
    ArchiveEntry entry(archive_entry_new());
    if (!entry) return MakeError(ErrorCode::kInternal, "archive_entry_new failed");
    FillEntry(entry.get(), path, st);
    if (hardlink) {
      archive_entry_copy_hardlink(entry.get(), hardlink->c_str());
      archive_entry_set_size(entry.get(), 0);
    }
    if (symlink) archive_entry_copy_symlink(entry.get(), symlink->c_str());
    if (sparse) {
      for (auto [offset, length] : *sparse) archive_entry_sparse_add_entry(entry.get(), offset, length);
    }
    if (!hardlink) {
      auto xattrs = ReadXattrs(fd, dir_fd, name);
      if (!xattrs.ok()) return xattrs.error();
      for (auto& [key, value] : *xattrs) {
        if (key == "security.capability") {
          auto root = CapabilityRoot(value);
          if (!root) continue;
          uint32_t relative;
          if (*root == 0) {
            relative = 0;  // v2 (copied up from the image): root of whatever namespace runs it
          } else if (*root >= uid_base_ && *root - uid_base_ < kIdRange) {
            relative = *root - uid_base_;
          } else {
            continue;  // another namespace's root: it grants nothing in this sandbox
          }
          value = CapabilityWithRoot(value, relative);
        }
        archive_entry_xattr_add_entry(entry.get(), key.c_str(), value.data(), value.size());
      }
    }
    if (archive_write_header(a_, entry.get()) != ARCHIVE_OK) {
      return MakeError(ErrorCode::kInternal, "writing snapshot entry " + path + ": " + ArchiveMessage(a_));
    }
    ++entries_;
    return {};
  }

  void FillEntry(archive_entry* entry, const std::string& path, const struct stat& st) {
    archive_entry_copy_pathname(entry, path.c_str());
    archive_entry_set_filetype(entry, st.st_mode & S_IFMT);
    archive_entry_set_perm(entry, st.st_mode & 07777);
    archive_entry_set_uid(entry, Canonical(st.st_uid));
    archive_entry_set_gid(entry, Canonical(st.st_gid));
    archive_entry_set_mtime(entry, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    archive_entry_set_size(entry, S_ISREG(st.st_mode) ? st.st_size : 0);
  }

  // The data regions of a sparse file (SEEK_DATA/SEEK_HOLE), or nullopt to store it whole.
  std::optional<std::vector<std::pair<int64_t, int64_t>>> DataRegions(int fd, const struct stat& st) {
    if (st.st_size == 0 || static_cast<int64_t>(st.st_blocks) * 512 >= st.st_size) return std::nullopt;
    std::vector<std::pair<int64_t, int64_t>> regions;
    off_t at = 0;
    while (at < st.st_size) {
      off_t data = ::lseek(fd, at, SEEK_DATA);
      if (data < 0 || data >= st.st_size) break;  // ENXIO: only a hole is left
      off_t hole = ::lseek(fd, data, SEEK_HOLE);
      if (hole < 0) return std::nullopt;
      hole = std::min<off_t>(hole, st.st_size);
      regions.emplace_back(data, hole - data);
      if (regions.size() > kMaxSparseRegions) return std::nullopt;
      at = hole;
    }
    // A trailing hole is marked by an empty region at the end, as GNU tar does.
    if (regions.empty() || regions.back().first + regions.back().second < st.st_size) {
      regions.emplace_back(st.st_size, 0);
    }
    return regions;
  }

  // A regular file: exactly st.st_size bytes follow its header whatever the file does
  // meanwhile (a shrunk file is padded with zeros). The pax writer takes the whole logical
  // stream and skips the holes it was told about.
  Status WriteFile(const std::string& path, const struct stat& st, int fd, RegionDigest* digest = nullptr) {
    auto regions = DataRegions(fd, st);
    BH_TRY(WriteHeader(path, st, fd, -1, "", nullptr, nullptr, regions ? &*regions : nullptr));
    if (!regions) regions = std::vector<std::pair<int64_t, int64_t>>{{0, st.st_size}};
    std::vector<char> buf(kChunk);
    int64_t written = 0;  // logical offset reached
    for (auto [offset, length] : *regions) {
      BH_TRY(WriteZeros(path, offset - written));
      int64_t end = offset + length;
      for (int64_t at = offset; at < end;) {
        size_t want = static_cast<size_t>(std::min<int64_t>(end - at, static_cast<int64_t>(buf.size())));
        ssize_t n = ::pread(fd, buf.data(), want, at);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return SystemError("read " + path, errno);
        if (n == 0) {  // shrunk meanwhile: the rest are zeros
          if (digest) return MakeError(ErrorCode::kInternal, path + " shrank while it was written");
          BH_TRY(WriteZeros(path, end - at));
          break;
        }
        if (digest && !digest->Add(at, std::string_view(buf.data(), static_cast<size_t>(n))))
          return MakeError(ErrorCode::kInternal, path + " has more pieces than an import takes");
        BH_TRY(WriteData(path, buf.data(), static_cast<size_t>(n)));
        at += n;
      }
      written = end;
    }
    return {};
  }

  Status WriteZeros(const std::string& path, int64_t n) {
    static const std::vector<char> zeros(kChunk, 0);
    while (n > 0) {
      size_t chunk = static_cast<size_t>(std::min<int64_t>(n, static_cast<int64_t>(zeros.size())));
      BH_TRY(WriteData(path, zeros.data(), chunk));
      n -= static_cast<int64_t>(chunk);
    }
    return {};
  }

  Status WriteData(const std::string& path, const char* data, size_t size) {
    while (size > 0) {
      la_ssize_t n = archive_write_data(a_, data, size);
      if (n < 0) return MakeError(ErrorCode::kInternal, "writing snapshot data of " + path + ": " + ArchiveMessage(a_));
      if (n == 0) break;  // the header's size is reached
      data += n;
      size -= static_cast<size_t>(n);
    }
    return {};
  }

  archive* a_;
  uid_t uid_base_;
  dev_t root_dev_ = 0;
  int64_t entries_ = 0;
  std::map<std::pair<dev_t, ino_t>, std::string> links_;  // first archive name of each multiply-linked file
};

Status WriteMemoryEntry(archive* a, const std::string& name, const std::string& content) {
  ArchiveEntry entry(archive_entry_new());
  if (!entry) return MakeError(ErrorCode::kInternal, "archive_entry_new failed");
  archive_entry_copy_pathname(entry.get(), name.c_str());
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_size(entry.get(), static_cast<la_int64_t>(content.size()));
  if (archive_write_header(a, entry.get()) != ARCHIVE_OK ||
      archive_write_data(a, content.data(), content.size()) != static_cast<la_ssize_t>(content.size())) {
    return MakeError(ErrorCode::kInternal, "writing snapshot entry " + name + ": " + ArchiveMessage(a));
  }
  return {};
}

// ---- import ----

// name with "." and empty components dropped; nullopt for an absolute name or a ".." component.
std::optional<std::string> CleanName(const std::string& name) {
  if (name.empty() || name[0] == '/') return std::nullopt;
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    std::string part = name.substr(start, end - start);
    start = end + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") return std::nullopt;
    if (!out.empty()) out += '/';
    out += part;
  }
  return out;
}

class TreeImporter {
 public:
  // memory_fd: where a memory image goes, or -1 to skip one.
  TreeImporter(archive* reader, int root_fd, uid_t uid_base, int64_t max_bytes, int memory_fd,
               const MemoryImport* memory)
      : reader_(reader), root_fd_(root_fd), uid_base_(uid_base), max_bytes_(max_bytes), memory_fd_(memory_fd),
        memory_(memory) {}

  bool took_memory() const { return took_memory_; }

  // Runs chrooted into the destination. The disk writer lives only here: freeing it applies
  // deferred directory modes by relative name, which must not happen outside the chroot.
  Result<std::string> Run() {
    writer_.reset(archive_write_disk_new());
    if (!writer_) return MakeError(ErrorCode::kInternal, "archive_write_disk_new failed");
    archive_write_disk_set_options(writer_.get(), kExtractFlags);
    Result<std::string> result = Extract();
    writer_.reset();
    return result;
  }

 private:
  Result<std::string> Extract() {
    archive_entry* entry = nullptr;
    int rc = archive_read_next_header(reader_, &entry);
    if (rc != ARCHIVE_OK) return ReadError("reading the snapshot's first entry");
    if (!IsMemoryEntry(entry, kJsonName)) return Invalid(std::string("a snapshot archive starts with ") + kJsonName);
    std::string description;
    auto doc = ReadJson(entry, kMaxMetadataBytes, &description);
    if (!doc.ok()) return doc.error();
    if (!doc->is_object() || (*doc)["format"] != kFormatName || !doc->contains("metadata")) {
      return Invalid(std::string(kJsonName) + " is not a bulkhead snapshot description");
    }
    const json& version = (*doc)["version"];
    if (!version.is_number_integer() || (version.get<int64_t>() != kSnapshotFormatVersion &&
                                         version.get<int64_t>() != kMemorySnapshotFormatVersion)) {
      return Invalid("unsupported snapshot format version " + version.dump() + " (this host reads " +
                     std::to_string(kSnapshotFormatVersion) + " and " + std::to_string(kMemorySnapshotFormatVersion) +
                     ")");
    }
    const bool has_memory = version.get<int64_t>() == kMemorySnapshotFormatVersion;
    if (has_memory && memory_fd_ >= 0 && memory_->accept) BH_TRY(memory_->accept((*doc)["metadata"].dump()));

    for (;;) {
      rc = archive_read_next_header(reader_, &entry);
      if (rc == ARCHIVE_EOF) return Invalid(std::string("snapshot archive is truncated: no ") + kEndName);
      if (rc != ARCHIVE_OK) return ReadError("reading the snapshot");
      if (IsMemoryEntry(entry, kEndName)) break;
      const char* name = archive_entry_pathname(entry);
      if (name != nullptr && std::strncmp(name, kMemoryPrefix, std::strlen(kMemoryPrefix)) == 0) {
        if (!has_memory) return Invalid(std::string("a snapshot of version 1 has no memory image: ") + name);
        BH_TRY(ExtractMemoryFile(entry));
        continue;
      }
      if (!memory_files_.empty()) return Invalid(std::string("snapshot entry after its memory image: ") + (name ? name : ""));
      BH_TRY(ExtractEntry(entry));
    }
    auto end = ReadJson(entry, kMaxEndBytes);
    if (!end.ok()) return end.error();
    if (!end->is_object() || (*end)["entries"] != json(entries_)) {
      return Invalid("snapshot archive is damaged: " + std::to_string(entries_) + " entries, its end says " + end->dump());
    }
    if (has_memory && memory_fd_ >= 0) BH_TRY(CheckMemoryImage(*end, description));
    rc = archive_read_next_header(reader_, &entry);
    if (rc != ARCHIVE_EOF) {
      if (rc == ARCHIVE_OK) return Invalid(std::string("snapshot archive has entries after ") + kEndName);
      return ReadError("reading the snapshot's end");
    }
    // Directory modes and times were deferred until their contents were in.
    if (archive_write_close(writer_.get()) != ARCHIVE_OK) return WriteError("finishing the extraction");
    BH_TRY(ApplyRoot());
    took_memory_ = has_memory && memory_fd_ >= 0;
    return (*doc)["metadata"].dump();
  }

  // memory/NAME: written into the memory directory (by descriptor: this runs chrooted into the
  // tree), or skipped when the image is not wanted.
  Status ExtractMemoryFile(archive_entry* entry) {
    const std::string raw = archive_entry_pathname(entry);
    const std::string name = raw.substr(std::strlen(kMemoryPrefix));
    if (!IsMemoryFileName(name) || archive_entry_filetype(entry) != AE_IFREG || archive_entry_hardlink(entry) != nullptr)
      return Invalid("snapshot memory image entry is not a plain file of a plain name: " + raw);
    if (memory_files_.size() >= kMaxMemoryFiles) return Invalid("snapshot memory image has too many files");
    for (const auto& file : memory_files_) {
      if (file.name == name) return Invalid("snapshot memory image has " + raw + " twice");
    }
    const int64_t size = archive_entry_size(entry);
    if (size < 0 || size > kMaxMemoryFileSize) return Invalid("snapshot memory image file " + raw + " is too large");
    BH_TRY(Charge(kEntryCost));
    memory_files_.push_back(MemoryFile{name, size, ""});
    if (memory_fd_ < 0) return {};  // libarchive skips its data

    UniqueFd fd(::openat(memory_fd_, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return SystemError("create memory image file " + name, errno);
    RegionDigest digest;
    for (;;) {
      const void* block;
      size_t n;
      la_int64_t offset;
      int rc = archive_read_data_block(reader_, &block, &n, &offset);
      if (rc == ARCHIVE_EOF) break;
      if (rc != ARCHIVE_OK) return ReadError("reading " + raw);
      BH_TRY(Charge(static_cast<int64_t>(n)));
      if (offset < 0 || offset + static_cast<int64_t>(n) > size ||
          !digest.Add(offset, std::string_view(static_cast<const char*>(block), n))) {
        return Invalid("snapshot memory image file " + raw + " has data out of place");
      }
      for (size_t done = 0; done < n;) {
        ssize_t w = ::pwrite(fd.get(), static_cast<const char*>(block) + done, n - done, offset + static_cast<off_t>(done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno == ENOSPC || errno == EDQUOT ? MakeError(ErrorCode::kDiskFull, "no space for " + raw)
                                                             : SystemError("write memory image file " + name, errno);
        done += static_cast<size_t>(w);
      }
    }
    if (::ftruncate(fd.get(), size) != 0) return SystemError("size memory image file " + name, errno);
    memory_files_.back().digest = digest.Finish(size);
    return {};
  }

  // The end's list of memory files is the one read, and its MAC is this host's key's.
  Status CheckMemoryImage(const json& end, const std::string& description) {
    const json& memory = end.contains("memory") ? end["memory"] : json();
    if (!memory.is_object() || !memory.contains("mac") || !memory["mac"].is_string() ||
        memory.value("files", json()) != MemoryFilesJson(memory_files_)) {
      return Invalid("snapshot memory image is damaged: its files are not those its end lists");
    }
    if (memory_files_.empty()) return Invalid("snapshot memory image has no files");
    if (!ConstantTimeEquals(memory["mac"].get<std::string>(), MemoryImageMac(memory_->key, description, memory_files_)))
      return MakeError(ErrorCode::kInvalid,
                       "the snapshot's memory image was not exported by a host holding this host's memory image key "
                       "(<state>/memory-image-key): only a host's own images, or those of hosts given the same key, "
                       "are restored; import it with ?memory=false to take its files alone",
                       kUntrusted);
    return {};
  }

  static bool IsMemoryEntry(archive_entry* entry, const char* name) {
    const char* path = archive_entry_pathname(entry);
    return path != nullptr && std::strcmp(path, name) == 0;
  }

  Error ReadError(const std::string& what) { return ArchiveError(reader_, what, kDetail); }
  Error WriteError(const std::string& what) { return ArchiveError(writer_.get(), what, kDetail); }

  Result<json> ReadJson(archive_entry* entry, size_t max, std::string* text_out = nullptr) {
    const char* name = archive_entry_pathname(entry);
    if (archive_entry_filetype(entry) != AE_IFREG || archive_entry_hardlink(entry) != nullptr ||
        archive_entry_size(entry) > static_cast<la_int64_t>(max)) {
      return Invalid(std::string(name) + " is not a small regular file");
    }
    std::string text;
    char buf[8192];
    for (;;) {
      la_ssize_t n = archive_read_data(reader_, buf, sizeof buf);
      if (n < 0) return ReadError(std::string("reading ") + name);
      if (n == 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > max) return Invalid(std::string(name) + " is too large");
    }
    json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return Invalid(std::string(name) + " is not valid JSON");
    if (text_out) *text_out = std::move(text);
    return doc;
  }

  Status Charge(int64_t bytes) {
    used_ += bytes;
    if (used_ > max_bytes_) {
      return MakeError(ErrorCode::kTooLarge, "snapshot is larger than " + std::to_string(max_bytes_) + " bytes",
                       "snapshot_too_large");
    }
    return {};
  }

  // True when a proper prefix of name is a symlink this archive made (what
  // ARCHIVE_EXTRACT_SECURE_SYMLINKS checks too; checked here again, on the cleaned name).
  bool BelowSymlink(const std::string& name) const {
    for (size_t slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1)) {
      if (symlinks_.count(name.substr(0, slash))) return true;
    }
    return false;
  }

  // A rootfs/ name as a clean name below the destination ("" for the root itself).
  Result<std::string> TreeName(const char* raw, const char* what) {
    std::string name = raw ? raw : "";
    if (name.rfind(kTreePrefix, 0) != 0 && name != "rootfs") {
      return Invalid(std::string("snapshot ") + what + " outside rootfs/: " + name);
    }
    auto clean = CleanName(name.size() > 7 ? name.substr(7) : std::string("."));
    if (!clean) return Invalid(std::string("snapshot ") + what + " escapes the tree: " + name);
    if (BelowSymlink(*clean)) return Invalid(std::string("snapshot ") + what + " goes through a symlink: " + name);
    return *clean;
  }

  Result<int64_t> Owner(int64_t id, const std::string& name) {
    if (id < 0 || id >= static_cast<int64_t>(kIdRange)) {
      return Invalid("snapshot entry " + name + " has owner " + std::to_string(id) + " beyond 65535");
    }
    return static_cast<int64_t>(uid_base_) + id;
  }

  // Checks the entry's xattrs and shifts file capabilities to this uid base.
  Status CheckXattrs(archive_entry* entry, const std::string& name) {
    std::vector<std::pair<std::string, std::string>> xattrs;
    archive_entry_xattr_reset(entry);
    const char* key;
    const void* value;
    size_t size;
    while (archive_entry_xattr_next(entry, &key, &value, &size) == ARCHIVE_OK) {
      if (key == nullptr || !IsImportableXattr(key)) {
        return Invalid("snapshot entry " + name + " has xattr " + (key ? key : "(null)") + " which is not allowed");
      }
      std::string data(static_cast<const char*>(value), size);
      if (std::strcmp(key, "security.capability") == 0) {
        auto root = CapabilityRoot(data);
        if (!root || *root >= kIdRange) return Invalid("snapshot entry " + name + " has an invalid security.capability");
        data = CapabilityWithRoot(data, uid_base_ + *root);
      }
      BH_TRY(Charge(static_cast<int64_t>(size)));
      xattrs.emplace_back(key, std::move(data));
    }
    archive_entry_xattr_clear(entry);
    for (const auto& [k, v] : xattrs) archive_entry_xattr_add_entry(entry, k.c_str(), v.data(), v.size());
    return {};
  }

  Status ExtractEntry(archive_entry* entry) {
    const char* raw_name = archive_entry_pathname(entry);
    if (raw_name == nullptr) return Invalid("snapshot entry without a usable name");
    auto name = TreeName(raw_name, "entry");
    if (!name.ok()) return name.error();
    BH_TRY(Charge(kEntryCost));
    ++entries_;

    const char* raw_link = archive_entry_hardlink(entry);
    mode_t type = archive_entry_filetype(entry);
    if (raw_link != nullptr) {
      auto link = TreeName(raw_link, "hard link");
      if (!link.ok()) return link.error();
      if (link->empty() || name->empty()) return Invalid(std::string("snapshot hard link to or at the root: ") + raw_name);
      archive_entry_copy_hardlink(entry, link->c_str());
    } else if (type == AE_IFCHR) {
      if (archive_entry_rdev(entry) != 0) return Invalid(std::string("snapshot has a device node: ") + raw_name);
    } else if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && type != AE_IFIFO) {
      return Invalid(std::string("snapshot has an entry of unsupported type: ") + raw_name);
    }
    auto uid = Owner(archive_entry_uid(entry), raw_name);
    if (!uid.ok()) return uid.error();
    auto gid = Owner(archive_entry_gid(entry), raw_name);
    if (!gid.ok()) return gid.error();
    archive_entry_set_uid(entry, *uid);
    archive_entry_set_gid(entry, *gid);
    archive_entry_set_uname(entry, nullptr);
    archive_entry_set_gname(entry, nullptr);
    BH_TRY(CheckXattrs(entry, raw_name));

    if (name->empty()) {  // the root: applied to the destination itself at the end
      if (type != AE_IFDIR || raw_link != nullptr) return Invalid("snapshot root is not a directory");
      root_.reset(archive_entry_clone(entry));
      return {};
    }
    archive_entry_copy_pathname(entry, name->c_str());
    if (archive_write_header(writer_.get(), entry) != ARCHIVE_OK) return WriteError("extracting " + *name);
    if (archive_entry_size(entry) > 0) BH_TRY(CopyData(*name));
    if (archive_write_finish_entry(writer_.get()) != ARCHIVE_OK) return WriteError("extracting " + *name);
    if (type == AE_IFLNK && raw_link == nullptr) {
      symlinks_.insert(*name);
    } else {
      symlinks_.erase(*name);
    }
    return {};
  }

  Status CopyData(const std::string& name) {
    for (;;) {
      const void* block;
      size_t size;
      la_int64_t offset;
      int rc = archive_read_data_block(reader_, &block, &size, &offset);
      if (rc == ARCHIVE_EOF) return {};
      if (rc != ARCHIVE_OK) return ReadError("reading " + name);
      BH_TRY(Charge(static_cast<int64_t>(size)));
      if (archive_write_data_block(writer_.get(), block, size, offset) != ARCHIVE_OK) {
        return WriteError("writing " + name);
      }
    }
  }

  // The root directory's owner, mode, xattrs and time, on the destination directory itself.
  Status ApplyRoot() {
    if (!root_) return {};
    archive_entry* e = root_.get();
    if (::fchown(root_fd_, static_cast<uid_t>(archive_entry_uid(e)), static_cast<gid_t>(archive_entry_gid(e))) != 0) {
      return SystemError("chown snapshot root", errno);
    }
    if (::fchmod(root_fd_, archive_entry_perm(e) & 07777) != 0) return SystemError("chmod snapshot root", errno);
    archive_entry_xattr_reset(e);
    const char* key;
    const void* value;
    size_t size;
    while (archive_entry_xattr_next(e, &key, &value, &size) == ARCHIVE_OK) {
      if (::fsetxattr(root_fd_, key, value, size, 0) != 0) return SystemError(std::string("setxattr root ") + key, errno);
    }
    struct timespec times[2] = {{0, UTIME_OMIT}, {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
    if (::futimens(root_fd_, times) != 0) return SystemError("set time of snapshot root", errno);
    return {};
  }

  archive* reader_;
  int root_fd_;
  uid_t uid_base_;
  int64_t max_bytes_;
  ArchiveWriter writer_;
  ArchiveEntry root_;
  int memory_fd_;
  const MemoryImport* memory_;
  bool took_memory_ = false;
  std::vector<MemoryFile> memory_files_;
  int64_t used_ = 0;
  int64_t entries_ = 0;
  std::set<std::string> symlinks_;  // symlinks this archive made: nothing may be extracted below them
};

// dest_dir made fresh (or an existing empty directory), opened without following a symlink.
Result<UniqueFd> MakeDestination(const std::string& dest_dir) {
  if (::mkdir(dest_dir.c_str(), 0700) != 0) {
    if (errno != EEXIST) return SystemError("mkdir " + dest_dir, errno);
    UniqueFd fd = OpenDirNoFollow(dest_dir);
    if (!fd) return MakeError(ErrorCode::kConflict, dest_dir + " exists and is not a directory");
    auto names = ListNames(fd.get());
    if (!names.ok()) return names.error();
    if (!names->empty()) return MakeError(ErrorCode::kConflict, dest_dir + " is not empty");
    return fd;
  }
  UniqueFd fd = OpenDirNoFollow(dest_dir);
  if (!fd) return SystemError("open " + dest_dir, errno);
  return fd;
}

}  // namespace

Status ExportSnapshotTree(const std::string& dir, uid_t uid_base, const std::string& metadata_json, int out_fd,
                          const MemoryExport* memory) {
  json metadata = json::parse(metadata_json, nullptr, /*allow_exceptions=*/false);
  if (metadata.is_discarded()) return MakeError(ErrorCode::kInvalid, "snapshot metadata is not valid JSON");
  const int version = memory ? kMemorySnapshotFormatVersion : kSnapshotFormatVersion;
  std::string description =
      json{{"format", kFormatName}, {"version", version}, {"metadata", std::move(metadata)}}.dump();
  if (description.size() > kMaxMetadataBytes) return MakeError(ErrorCode::kInvalid, "snapshot metadata is too large");

  UniqueFd root = OpenDirNoFollow(dir);
  if (!root) return SystemError("open " + dir, errno);
  UniqueFd memory_dir;
  if (memory) {
    memory_dir = OpenDirNoFollow(memory->dir);
    if (!memory_dir) return SystemError("open " + memory->dir, errno);
  }
  ArchiveWriter a(archive_write_new());
  if (!a) return MakeError(ErrorCode::kInternal, "archive_write_new failed");
  // Names as raw bytes, as the filesystem has them; no charset conversion either way.
  if (archive_write_set_format_pax(a.get()) != ARCHIVE_OK ||
      archive_write_set_format_option(a.get(), "pax", "hdrcharset", "BINARY") != ARCHIVE_OK ||
      archive_write_add_filter_zstd(a.get()) != ARCHIVE_OK ||
      // No zero padding after the zstd frame (libarchive pads the last block on pipes and
      // sockets): a zstd reader would take the zeros for a broken next frame.
      archive_write_set_bytes_in_last_block(a.get(), 1) != ARCHIVE_OK ||
      archive_write_open_fd(a.get(), out_fd) != ARCHIVE_OK) {
    return MakeError(ErrorCode::kInternal, "snapshot archive setup: " + ArchiveMessage(a.get()));
  }
  BH_TRY(WriteMemoryEntry(a.get(), kJsonName, description));
  TreeExporter exporter(a.get(), uid_base);
  BH_TRY(exporter.ExportRoot(root.get()));
  json end = {{"entries", exporter.entries()}};
  if (memory) {
    auto names = ListNames(memory_dir.get());
    if (!names.ok()) return names.error();
    std::sort(names->begin(), names->end());
    if (names->empty() || names->size() > kMaxMemoryFiles)
      return MakeError(ErrorCode::kInternal, "memory image " + memory->dir + " has " + std::to_string(names->size()) + " files");
    std::vector<MemoryFile> files;
    for (const auto& name : *names) {
      if (!IsMemoryFileName(name)) return MakeError(ErrorCode::kInternal, "memory image file of an odd name: " + name);
      UniqueFd fd(::openat(memory_dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
      if (!fd) return SystemError("open memory image file " + name, errno);
      auto file = exporter.ExportMemoryFile(fd.get(), name);
      if (!file.ok()) return file.error();
      files.push_back(std::move(*file));
    }
    end["memory"] = {{"files", MemoryFilesJson(files)}, {"mac", MemoryImageMac(memory->key, description, files)}};
  }
  BH_TRY(WriteMemoryEntry(a.get(), kEndName, end.dump()));
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    return MakeError(ErrorCode::kInternal, "finishing snapshot archive: " + ArchiveMessage(a.get()));
  }
  return {};
}

Result<ImportedSnapshot> ImportSnapshotTree(int in_fd, const std::string& dest_dir, uid_t uid_base,
                                            int64_t max_bytes, const MemoryImport* memory) {
  auto root = MakeDestination(dest_dir);
  if (!root.ok()) return root.error();
  ScopeGuard remove_dest([&] { (void)RemoveTree(dest_dir); });
  UniqueFd memory_dir;
  if (memory) {
    memory_dir = OpenDirNoFollow(memory->dir);
    if (!memory_dir) return SystemError("open " + memory->dir, errno);
  }
  // What an import that failed half way wrote of a memory image goes with it.
  ScopeGuard empty_memory([&] {
    if (!memory_dir) return;
    if (auto names = ListNames(memory_dir.get()); names.ok())
      for (const auto& name : *names) (void)::unlinkat(memory_dir.get(), name.c_str(), 0);
  });

  ArchiveReader reader(archive_read_new());
  if (!reader) return MakeError(ErrorCode::kInternal, "archive_read_new failed");
  archive_read_support_filter_zstd(reader.get());
  archive_read_support_format_tar(reader.get());
  if (archive_read_open_fd(reader.get(), in_fd, 1 << 16) != ARCHIVE_OK) {
    return ArchiveError(reader.get(), "not a snapshot archive", kDetail);
  }
  if (archive_filter_count(reader.get()) != 2 || archive_filter_code(reader.get(), 0) != ARCHIVE_FILTER_ZSTD) {
    return Invalid("not a snapshot archive: not zstd-compressed");
  }
  Result<std::string> metadata = MakeError(ErrorCode::kInternal, "snapshot import did not run");
  TreeImporter importer(reader.get(), root->get(), uid_base, max_bytes, memory_dir ? memory_dir.get() : -1, memory);
  BH_TRY(RunChrooted(root->get(), [&]() -> Status {
    metadata = importer.Run();
    return {};
  }));
  if (!metadata.ok()) return metadata.error();
  remove_dest.Dismiss();
  empty_memory.Dismiss();
  return ImportedSnapshot{std::move(*metadata), importer.took_memory()};
}

}  // namespace bulkhead::storage
