#include "storage/image_import.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/id_ranges.h"
#include "common/unique_fd.h"
#include "storage/archive_util.h"
#include "storage/fs_util.h"

namespace bulkhead::storage {
namespace {

constexpr int kExtractFlags = ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                              ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                              ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS;

Error ArchiveError(archive* a, const std::string& what) { return storage::ArchiveError(a, what, "invalid_image"); }

// The extraction itself; runs in a thread whose root and cwd are the rootfs.
Status ExtractHere(archive* reader) {
  ArchiveWriter writer(archive_write_disk_new());
  if (!writer) return MakeError(ErrorCode::kInternal, "archive_write_disk_new failed");
  archive_write_disk_set_options(writer.get(), kExtractFlags);
  // No name lookups: numeric owners from the archive, never the host's passwd.
  int skipped_special = 0;
  for (;;) {
    archive_entry* entry = nullptr;
    int rc = archive_read_next_header(reader, &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) return ArchiveError(reader, "reading archive");
    const char* raw_name = archive_entry_pathname(entry);
    if (raw_name == nullptr) raw_name = archive_entry_pathname_utf8(entry);
    if (raw_name == nullptr) return MakeError(ErrorCode::kInvalid, "archive entry without a usable name", "invalid_image");
    std::string name = raw_name;
    while (name.rfind("./", 0) == 0) name.erase(0, 2);
    if (name.empty() || name == ".") continue;  // the root itself
    if (!IsContainedName(name)) {
      return MakeError(ErrorCode::kInvalid, "archive entry escapes the image: " + name, "invalid_image");
    }
    const char* hardlink = archive_entry_hardlink(entry);
    if (hardlink != nullptr && !IsContainedName(hardlink)) {
      return MakeError(ErrorCode::kInvalid, "archive hard link escapes the image: " + std::string(hardlink),
                       "invalid_image");
    }
    mode_t type = archive_entry_filetype(entry);
    if (hardlink == nullptr && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      ++skipped_special;  // device nodes, fifos, sockets: /dev is made by the runtime
      continue;
    }
    archive_entry_copy_pathname(entry, name.c_str());
    archive_entry_set_uid(entry, StoredArchiveId(archive_entry_uid(entry)));
    archive_entry_set_gid(entry, StoredArchiveId(archive_entry_gid(entry)));
    rc = archive_write_header(writer.get(), entry);
    if (rc < ARCHIVE_WARN) return ArchiveError(writer.get(), "extracting " + name);
    if (archive_entry_size(entry) > 0) BH_TRY(CopyEntryData(reader, writer.get(), name, "invalid_image"));
    if (archive_write_finish_entry(writer.get()) < ARCHIVE_WARN) return ArchiveError(writer.get(), "writing " + name);
  }
  // Applies the directory modes and times that were deferred until their contents were in.
  if (archive_write_close(writer.get()) != ARCHIVE_OK) return ArchiveError(writer.get(), "finishing extraction");
  if (skipped_special > 0) spdlog::info("image import: skipped {} device nodes/fifos/sockets", skipped_special);
  return {};
}

}  // namespace

Status ExtractRootfsTarball(const std::string& tar_path, const std::string& rootfs_dir) {
  UniqueFd root = OpenDirNoFollow(rootfs_dir);
  if (!root) return SystemError("open " + rootfs_dir, errno);

  ArchiveReader reader(archive_read_new());
  if (!reader) return MakeError(ErrorCode::kInternal, "archive_read_new failed");
  archive_read_support_filter_all(reader.get());
  archive_read_support_format_all(reader.get());
  if (archive_read_open_filename(reader.get(), tar_path.c_str(), 1 << 16) != ARCHIVE_OK) {
    return ArchiveError(reader.get(), "opening " + tar_path);
  }
  // Chrooted into the rootfs: even a libarchive bug cannot write outside.
  return RunChrooted(root.get(), [&] { return ExtractHere(reader.get()); });
}

Status EnsureMountPoints(const std::string& rootfs_dir) {
  UniqueFd root = OpenDirNoFollow(rootfs_dir);
  if (!root) return SystemError("open " + rootfs_dir, errno);
  struct MountPoint {
    const char* name;
    mode_t mode;
  };
  for (MountPoint mp : {MountPoint{"proc", 0555}, MountPoint{"sys", 0555}, MountPoint{"dev", 0755},
                        MountPoint{"tmp", 01777}, MountPoint{"run", 0755}, MountPoint{"workspace", 0755}}) {
    struct stat st;
    if (::fstatat(root.get(), mp.name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISDIR(st.st_mode)) {
        if (std::string(mp.name) == "tmp") BH_TRY(MakeDirAt(root.get(), mp.name, mp.mode, st.st_uid, st.st_gid));
        continue;
      }
      // A symlink here would make the runtime's mount land somewhere else.
      if (::unlinkat(root.get(), mp.name, 0) != 0) return SystemError(std::string("unlink ") + mp.name, errno);
    }
    BH_TRY(MakeDirAt(root.get(), mp.name, mp.mode, kStoredIdBase, kStoredIdBase));
  }
  return {};
}

}  // namespace bulkhead::storage
