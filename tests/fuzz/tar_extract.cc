// Hostile archives into every place bulkhead unpacks them. The first byte picks where, the
// rest is the archive:
//   0  the in-sandbox worker's archive_extract (init/file_archive.cc; PUT .../files/archive)
//   1  the CLI's UnpackTar (cli/tar_unpack.cc; `bulkhead cp` from a sandbox)
//   2  snapshot import (storage/snapshot_archive.cc; POST /v1/snapshots/import): the tar is
//      zstd-compressed here first, as the format wants, unless the second byte is odd; then
//      the settings in its metadata are read as the manager reads them (core/spec_json.cc)
//   3  image import (storage/image_import.cc; PUT /v1/images/{name}) and its mount points
//   4  a pulled image's layer (storage/layer_apply.cc), applied twice onto the same tree: the
//      second time its whiteouts, opaque markers and replacements meet what the first made
// Each runs chrooted (a thread of its own) into a temporary tree whose target directory
// already holds symlinks leading out of it (to "/outside", "..", a file), so an entry that
// follows one lands outside the target.
//
// Checked: nothing changes anywhere but at or below the target directory (a snapshot import's
// memory image: its own directory) and nothing beside the chroot, a failed snapshot import
// leaves no destination and no memory image file behind, and no crash.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "cli/tar_unpack.h"
#include "core/spec_json.h"
#include "fuzz_support.h"
#include "init/file_worker.h"
#include "storage/image_import.h"
#include "storage/layer_apply.h"
#include "storage/snapshot_archive.h"

namespace {

using namespace bulkhead;

std::string g_base, g_root, g_beside;
// Where a snapshot import puts a memory image (mode 2).
constexpr char kMemoryDir[] = "/target/memory";
fuzz::TreeSnapshot g_beside_snapshot;

void Write(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, content.data(), content.size()) != ssize_t(content.size())) fuzz::Fail("write " + path);
  ::close(fd);
}

void BuildTree(const std::string& archive) {
  fuzz::RemoveTree(g_root);
  const std::string& r = g_root;
  for (const char* dir : {"", "/target", "/target/existing", "/outside", "/outside/dir"}) {
    if (::mkdir((r + dir).c_str(), 0755) != 0) fuzz::Fail("mkdir " + r + dir);
  }
  Write(r + "/outside/file", "outside\n");
  Write(r + "/archive", archive);
  for (auto [target, name] : {std::pair{"/outside", "escape"}, {"..", "up"}, {"/outside/file", "abs_file"},
                              {"../outside/dir", "rel_dir"}, {"existing/../..", "dotdot"}}) {
    if (::symlink(target, (r + "/target/" + name).c_str()) != 0) fuzz::Fail("symlink");
  }
}

// The archive as one zstd frame (libarchive's raw format writes the bytes as they are).
std::string Zstd(std::string_view tar) {
  struct archive* a = archive_write_new();
  archive_write_set_format_raw(a);
  archive_write_add_filter_zstd(a);
  std::string out(tar.size() + 4096, '\0');
  size_t used = 0;
  archive_write_open_memory(a, out.data(), out.size(), &used);
  struct archive_entry* entry = archive_entry_new();
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_size(entry, la_int64_t(tar.size()));
  archive_write_header(a, entry);
  archive_write_data(a, tar.data(), tar.size());
  archive_entry_free(entry);
  archive_write_close(a);
  archive_write_free(a);
  out.resize(used);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::PrepareChrootEscape();
  g_base = fuzz::MakeTempDir("tar_extract");
  g_root = g_base + "/root";
  g_beside = g_base + "/beside";
  if (::mkdir(g_beside.c_str(), 0755) != 0) fuzz::Fail("mkdir beside");
  Write(g_beside + "/precious", "must never change\n");
  g_beside_snapshot = fuzz::SnapshotTree(g_beside);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int mode = data[0] % 5;
  std::string archive(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode == 2 && (data[1] & 1) == 0) archive = Zstd(std::string_view(archive).substr(1));
  BuildTree(archive);
  const fuzz::TreeSnapshot before = fuzz::SnapshotTree(g_root);

  std::string target = "/target";
  bool failed = false;
  std::string message;
  fuzz::RunChrootedThread(g_root, [&] {
    switch (mode) {
      case 0: {
        int in = fuzz::MemoryFile(archive);
        int out = fuzz::MemoryFile({});
        int err = fuzz::MemoryFile({});
        ::dup2(in, 0);
        ::dup2(out, 1);
        ::dup2(err, 2);
        failed = init::RunFileOp(R"({"op": "archive_extract", "path": "/target"})") != 0;
        fuzz::RestoreStandardStreams();
        message = fuzz::ReadWholeFd(err);
        for (int fd : {in, out, err}) ::close(fd);
        break;
      }
      case 1: {
        bool given = false;
        const cli::TarChunkSource source = [&]() -> Result<std::string_view> {
          if (given) return std::string_view();
          given = true;
          return std::string_view(archive);
        };
        Status unpacked = cli::UnpackTar(source, "/target", [](const std::string&) {});
        failed = !unpacked.ok();
        if (failed) message = unpacked.error().message;
        break;
      }
      case 2: {
        target = "/target/snapshot";
        if (::mkdir(kMemoryDir, 0700) != 0) fuzz::Fail("mkdir memory");
        int in = fuzz::MemoryFile(archive);
        const storage::MemoryImport memory{kMemoryDir, "fuzz key", [](const std::string& metadata) -> Status {
                                             (void)nlohmann::json::parse(metadata, nullptr, false);
                                             return {};
                                           }};
        Result<storage::ImportedSnapshot> imported = storage::ImportSnapshotTree(in, target, 100000, 64 << 20, &memory);
        ::close(in);
        failed = !imported.ok();
        if (failed) {
          message = imported.error().message;
          break;
        }
        const std::string* metadata = &imported->metadata;
        // What the manager does next (SandboxManager::ImportSnapshot): the settings in the
        // archive's metadata become a sandbox spec.
        nlohmann::json doc = nlohmann::json::parse(*metadata, nullptr, /*allow_exceptions=*/false);
        if (doc.is_object() && doc.contains("spec") && doc["spec"].is_object()) {
          Result<core::SandboxSpec> spec = core::SpecFromJson(doc["spec"].dump());
          if (spec.ok()) (void)core::SpecToJson(*spec);
        }
        break;
      }
      case 3: {
        target = "/target/rootfs";
        if (::mkdir(target.c_str(), 0755) != 0) fuzz::Fail("mkdir rootfs");
        Status extracted = storage::ExtractRootfsTarball("/archive", target);
        if (extracted.ok()) extracted = storage::EnsureMountPoints(target);
        failed = !extracted.ok();
        if (failed) message = extracted.error().message;
        break;
      }
      case 4: {
        target = "/target/rootfs";
        if (::mkdir(target.c_str(), 0755) != 0) fuzz::Fail("mkdir rootfs");
        for (int pass = 0; pass < 2 && !failed; pass++) {
          Result<storage::LayerApplyStats> applied = storage::ApplyLayer("/archive", target);
          failed = !applied.ok();
          if (failed) message = applied.error().message;
        }
        break;
      }
    }
  });

  const fuzz::TreeSnapshot after = fuzz::SnapshotTree(g_root);
  const std::string relative_target = target.substr(1);
  const std::string memory_dir = std::string(kMemoryDir).substr(1);
  for (const std::string& changed : fuzz::ChangedPaths(before, after)) {
    FUZZ_CHECK(fuzz::IsAtOrBelow(changed, relative_target) || (mode == 2 && fuzz::IsAtOrBelow(changed, memory_dir)),
               "extraction (mode " + std::to_string(mode) + ") changed /" + changed + " outside " + target + ": " +
                   (before.count(changed) ? before.at(changed) : "absent") + " -> " +
                   (after.count(changed) ? after.at(changed) : "absent") + (failed ? "; it failed: " + message : ""));
  }
  if (mode == 2 && failed) {
    FUZZ_CHECK(!after.count(relative_target), "a failed import left " + target + ": " + message);
    for (const auto& [path, what] : after)
      FUZZ_CHECK(!fuzz::IsAtOrBelow(path, memory_dir) || path == memory_dir,
                 "a failed import left memory image file /" + path + ": " + message);
  }
  FUZZ_CHECK(fuzz::SnapshotTree(g_beside) == g_beside_snapshot, "something beside the chroot changed");
  return 0;
}
