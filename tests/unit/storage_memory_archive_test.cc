// Snapshot archives with a memory image (format version 2): the image travels whole and sparse,
// and a host takes it only if its own key vouches for it; any change to the image or to the
// description it was vouched for with, a foreign key, or hostile memory entries are refused and
// leave nothing behind.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "storage/fs_util.h"
#include "storage/snapshot_archive.h"
#include "support/file_contents.h"
#include "support/temp_state_dir.h"

namespace bulkhead::storage {
namespace {

using testing::FdContents;
using testing::FileContents;

constexpr uid_t kBase = 300000;
constexpr int64_t kNoLimit = int64_t{1} << 40;
constexpr char kKey[] = "the exporting host's key";

void Put(const std::string& path, const std::string& content) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_TRUE(fd) << path;
  ASSERT_EQ(::write(fd.get(), content.data(), content.size()), static_cast<ssize_t>(content.size()));
}

std::vector<std::string> Names(const std::string& dir) {
  auto names = ListNames(OpenDirNoFollow(dir).get());
  EXPECT_TRUE(names.ok());
  std::vector<std::string> sorted = names.ok() ? *names : std::vector<std::string>{};
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

// Each entry of an archive, its data read whole (holes as zeros), rewritten by `change` (which
// may drop it by returning false) into a new archive written as an exporter would, not sparse.
std::string Repack(const std::string& bytes,
                   const std::function<bool(std::string& name, std::string& data)>& change) {
  archive* in = archive_read_new();
  archive_read_support_filter_zstd(in);
  archive_read_support_format_tar(in);
  EXPECT_EQ(archive_read_open_memory(in, bytes.data(), bytes.size()), ARCHIVE_OK);
  UniqueFd fd(::memfd_create("repacked", MFD_CLOEXEC));
  archive* out = archive_write_new();
  archive_write_set_format_pax(out);
  archive_write_add_filter_zstd(out);
  archive_write_set_bytes_in_last_block(out, 1);
  EXPECT_EQ(archive_write_open_fd(out, fd.get()), ARCHIVE_OK);
  archive_entry* entry;
  while (archive_read_next_header(in, &entry) == ARCHIVE_OK) {
    std::string data(static_cast<size_t>(archive_entry_size(entry)), '\0');
    if (!data.empty()) {
      EXPECT_EQ(archive_read_data(in, data.data(), data.size()), static_cast<la_ssize_t>(data.size()));
    }
    std::string name = archive_entry_pathname(entry);
    if (!change(name, data)) continue;
    archive_entry* copy = archive_entry_clone(entry);
    archive_entry_sparse_clear(copy);
    archive_entry_copy_pathname(copy, name.c_str());
    archive_entry_set_size(copy, static_cast<la_int64_t>(data.size()));
    EXPECT_EQ(archive_write_header(out, copy), ARCHIVE_OK) << archive_error_string(out);
    if (!data.empty()) archive_write_data(out, data.data(), data.size());
    archive_entry_free(copy);
  }
  archive_read_free(in);
  archive_write_close(out);
  archive_write_free(out);
  return FdContents(fd.get());
}

class MemoryArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::mkdir(src_.c_str(), 0755), 0);
    Put(src_ + "/file.txt", "the files\n");
    ASSERT_EQ(::mkdir(image_.c_str(), 0700), 0);
    ASSERT_EQ(::mkdir(memory_dest_.c_str(), 0700), 0);
  }

  // A sparse guest memory (64 MiB, two pages written) and a small device state.
  void BuildSparseImage() {
    Put(image_ + "/state", "device state");
    UniqueFd fd(::open((image_ + "/memory").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_TRUE(fd);
    ASSERT_EQ(::pwrite(fd.get(), "low page", 8, 4096), 8);
    ASSERT_EQ(::pwrite(fd.get(), "high page", 9, 48 << 20), 9);
    ASSERT_EQ(::ftruncate(fd.get(), 64 << 20), 0);
  }

  std::string Export(const std::string& metadata = R"({"name":"snap","memory":"tier 1"})") {
    UniqueFd fd(::memfd_create("export", MFD_CLOEXEC));
    const MemoryExport memory{image_, kKey};
    Status exported = ExportSnapshotTree(src_, kBase, metadata, fd.get(), &memory);
    EXPECT_TRUE(exported.ok()) << exported.error().message;
    return FdContents(fd.get());
  }

  Result<ImportedSnapshot> Import(const std::string& bytes, const std::string& key = kKey,
                                  std::function<Status(const std::string&)> accept = nullptr,
                                  bool with_memory = true, int64_t max_bytes = kNoLimit) {
    UniqueFd fd(::memfd_create("import", MFD_CLOEXEC));
    EXPECT_EQ(::write(fd.get(), bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::lseek(fd.get(), 0, SEEK_SET);
    const MemoryImport memory{memory_dest_, key, std::move(accept)};
    return ImportSnapshotTree(fd.get(), dest_, kBase, max_bytes, with_memory ? &memory : nullptr);
  }

  // Refused with kInvalid and `detail` (if given): no tree, an empty memory directory.
  void ExpectRefused(const std::string& bytes, const std::string& detail = "", const std::string& key = kKey) {
    auto imported = Import(bytes, key);
    ASSERT_FALSE(imported.ok());
    EXPECT_EQ(imported.error().code, ErrorCode::kInvalid) << imported.error().message;
    if (!detail.empty()) {
      EXPECT_EQ(imported.error().detail_code, detail) << imported.error().message;
    }
    struct stat st;
    EXPECT_NE(::lstat(dest_.c_str(), &st), 0) << "tree left behind after: " << imported.error().message;
    EXPECT_TRUE(Names(memory_dest_).empty()) << "memory left behind after: " << imported.error().message;
  }

  testing::TempStateDir dir_{"bulkhead-memory-archive-test"};
  const std::string src_ = dir_.path() + "/src";
  const std::string image_ = dir_.path() + "/image";
  const std::string dest_ = dir_.path() + "/dest";
  const std::string memory_dest_ = dir_.path() + "/memory";
};

TEST_F(MemoryArchiveTest, TheImageTravelsWholeAndStaysSparse) {
  BuildSparseImage();
  std::string seen_metadata;
  auto imported = Import(Export(), kKey, [&](const std::string& metadata) {
    seen_metadata = metadata;
    return Status{};
  });
  ASSERT_TRUE(imported.ok()) << imported.error().message;
  EXPECT_TRUE(imported->memory);
  EXPECT_EQ(nlohmann::json::parse(imported->metadata)["memory"], "tier 1");
  EXPECT_EQ(seen_metadata, imported->metadata);
  EXPECT_EQ(FileContents(dest_ + "/file.txt"), "the files\n");
  EXPECT_EQ(Names(memory_dest_), (std::vector<std::string>{"memory", "state"}));
  EXPECT_EQ(FileContents(memory_dest_ + "/state"), "device state");
  EXPECT_EQ(FileContents(memory_dest_ + "/memory"), FileContents(image_ + "/memory"));
  struct stat st;
  ASSERT_EQ(::stat((memory_dest_ + "/memory").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 64 << 20);
  EXPECT_LT(st.st_blocks * 512, 1 << 20) << "the holes were written out";
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(MemoryArchiveTest, AnotherHostsKeyIsRefused) {
  BuildSparseImage();
  ExpectRefused(Export(), "memory_image_untrusted", "another host's key");
}

TEST_F(MemoryArchiveTest, WithoutMemoryTheFilesComeAlone) {
  BuildSparseImage();
  auto imported = Import(Export(), "another host's key", nullptr, /*with_memory=*/false);
  ASSERT_TRUE(imported.ok()) << imported.error().message;
  EXPECT_FALSE(imported->memory);
  EXPECT_EQ(FileContents(dest_ + "/file.txt"), "the files\n");
  EXPECT_TRUE(Names(memory_dest_).empty());
}

TEST_F(MemoryArchiveTest, AcceptSeesTheMetadataFirstAndMayRefuse) {
  BuildSparseImage();
  auto imported = Import(Export(), kKey, [](const std::string&) -> Status {
    return MakeError(ErrorCode::kInvalid, "not this tier", "snapshot_incompatible");
  });
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.error().detail_code, "snapshot_incompatible");
  struct stat st;
  EXPECT_NE(::lstat(dest_.c_str(), &st), 0);
  EXPECT_TRUE(Names(memory_dest_).empty());
}

TEST_F(MemoryArchiveTest, AnyChangeToWhatTheKeyVouchesForIsRefused) {
  Put(image_ + "/state", "device state");
  Put(image_ + "/memory", std::string(1 << 16, 'm'));
  const std::string bytes = Export();
  // Rewritten as it was, it is taken: what is refused below is refused for its change.
  auto same = Import(Repack(bytes, [](std::string&, std::string&) { return true; }));
  ASSERT_TRUE(same.ok()) << same.error().message;
  ASSERT_EQ(RemoveTree(dest_).ok(), true);
  for (const auto& name : Names(memory_dest_)) ::unlink((memory_dest_ + "/" + name).c_str());

  // Changed data no longer has the digest the end lists (a forger who lists the new one meets
  // the MAC, as the description's change below does).
  ExpectRefused(Repack(bytes, [](std::string& name, std::string& data) {
                  if (name == "memory/memory") data[100] ^= 1;
                  return true;
                }),
                "invalid_snapshot");
  ExpectRefused(Repack(bytes, [](std::string& name, std::string& data) {
                  if (name == "bulkhead-snapshot.end") {
                    auto doc = nlohmann::json::parse(data);
                    doc["memory"]["mac"] = std::string(64, '0');
                    data = doc.dump();
                  }
                  return true;
                }),
                "memory_image_untrusted");
  ExpectRefused(Repack(bytes, [](std::string& name, std::string& data) {
                  if (name == "bulkhead-snapshot.json") {
                    auto doc = nlohmann::json::parse(data);
                    doc["metadata"]["memory"] = "tier 2";
                    data = doc.dump();
                  }
                  return true;
                }),
                "memory_image_untrusted");
  // The end's list is the one read: a file left out, renamed or resized is damage.
  ExpectRefused(Repack(bytes, [](std::string& name, std::string&) { return name != "memory/state"; }),
                "invalid_snapshot");
  ExpectRefused(Repack(bytes, [](std::string& name, std::string&) {
                  if (name == "memory/state") name = "memory/state2";
                  return true;
                }),
                "invalid_snapshot");
  ExpectRefused(Repack(bytes, [](std::string& name, std::string& data) {
                  if (name == "memory/memory") data += "more";
                  return true;
                }),
                "invalid_snapshot");
}

TEST_F(MemoryArchiveTest, HostileMemoryEntriesAreRefused) {
  Put(image_ + "/state", "device state");
  const std::string bytes = Export();
  for (const std::string bad : {"memory/../escape", "memory/.hidden", "memory/a/b", "memory/", "memory/x y"}) {
    ExpectRefused(Repack(bytes,
                         [&](std::string& name, std::string&) {
                           if (name == "memory/state") name = bad;
                           return true;
                         }),
                  "invalid_snapshot");
  }
  // A memory image after the files only; none in a version 1 archive.
  ExpectRefused(Repack(bytes,
                       [](std::string& name, std::string&) {
                         if (name == "rootfs/file.txt") name = "memory/file.txt";
                         if (name == "memory/state") name = "rootfs/state";
                         return true;
                       }),
                "invalid_snapshot");
  ExpectRefused(Repack(bytes,
                       [](std::string& name, std::string& data) {
                         if (name == "bulkhead-snapshot.json") {
                           auto doc = nlohmann::json::parse(data);
                           doc["version"] = 1;
                           data = doc.dump();
                         }
                         return true;
                       }),
                "invalid_snapshot");
  struct stat st;
  EXPECT_NE(::lstat((dir_.path() + "/escape").c_str(), &st), 0);
}

TEST_F(MemoryArchiveTest, TheImageCountsAgainstTheSizeLimit) {
  Put(image_ + "/state", std::string(1 << 20, 's'));
  auto imported = Import(Export(), kKey, nullptr, true, 512 << 10);
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.error().code, ErrorCode::kTooLarge);
  EXPECT_TRUE(Names(memory_dest_).empty());
}

}  // namespace
}  // namespace bulkhead::storage
