// Snapshot archives: a tree of every kind a sandbox's upper layer holds survives export and
// import between two uid ranges; hostile, truncated or foreign archives land nothing anywhere.
#include "storage/snapshot_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <endian.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "storage/fs_util.h"
#include "support/file_contents.h"
#include "support/temp_state_dir.h"

namespace bulkhead::storage {
namespace {

using testing::FdContents;
using testing::FileContents;

constexpr uid_t kBaseA = 200000;
constexpr uid_t kBaseB = 500000;
constexpr int64_t kNoLimit = int64_t{1} << 40;

UniqueFd MemFd() { return UniqueFd(::memfd_create("snapshot-test", MFD_CLOEXEC)); }

UniqueFd FdWith(const std::string& data) {
  UniqueFd fd = MemFd();
  EXPECT_EQ(::write(fd.get(), data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ::lseek(fd.get(), 0, SEEK_SET);
  return fd;
}

void Put(const std::string& path, const std::string& content, mode_t mode, uid_t uid, gid_t gid) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_TRUE(fd) << path;
  ASSERT_EQ(::write(fd.get(), content.data(), content.size()), static_cast<ssize_t>(content.size()));
  ASSERT_EQ(::fchown(fd.get(), uid, gid), 0);
  ASSERT_EQ(::fchmod(fd.get(), mode), 0);
}

void Dir(const std::string& path, mode_t mode, uid_t uid, gid_t gid) {
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0) << path;
  ASSERT_EQ(::lchown(path.c_str(), uid, gid), 0);
  ASSERT_EQ(::chmod(path.c_str(), mode), 0);
}

std::string Xattr(const std::string& path, const char* name) {
  char buf[256];
  ssize_t n = ::lgetxattr(path.c_str(), name, buf, sizeof buf);
  return n < 0 ? std::string("<none>") : std::string(buf, static_cast<size_t>(n));
}

// A v3 file capability (cap_net_raw permitted+effective) whose root is rootid.
std::string CapabilityV3(uint32_t rootid) {
  uint32_t words[6] = {htole32(0x03000001), htole32(1u << 13), 0, 0, 0, htole32(rootid)};
  return std::string(reinterpret_cast<const char*>(words), sizeof words);
}

std::string CapabilityV2() {
  uint32_t words[5] = {htole32(0x02000001), htole32(1u << 13), 0, 0, 0};
  return std::string(reinterpret_cast<const char*>(words), sizeof words);
}

uint32_t CapabilityRootOf(const std::string& value) {
  if (value.size() != 24) return 0xffffffff;
  uint32_t rootid;
  std::memcpy(&rootid, value.data() + 20, 4);
  return le32toh(rootid);
}

struct HostileEntry {
  std::string name;
  mode_t type = AE_IFREG;
  std::string content;  // file data, or the symlink / hard link target
  int64_t uid = 0;
  dev_t rdev = 0;
  std::map<std::string, std::string> xattrs;
};

struct HostileArchive {
  std::vector<HostileEntry> entries;
  std::string description = R"({"format":"bulkhead-snapshot","version":1,"metadata":{}})";
  bool with_description = true;
  bool with_end = true;
  int filter = ARCHIVE_FILTER_ZSTD;
};

// Writes an archive as a (possibly hostile) exporter would, names exactly as given.
std::string WriteArchive(const HostileArchive& spec) {
  UniqueFd fd = MemFd();
  archive* a = archive_write_new();
  archive_write_set_format_pax(a);
  if (spec.filter == ARCHIVE_FILTER_ZSTD) archive_write_add_filter_zstd(a);
  if (spec.filter == ARCHIVE_FILTER_GZIP) archive_write_add_filter_gzip(a);
  EXPECT_EQ(archive_write_open_fd(a, fd.get()), ARCHIVE_OK);
  auto add = [&](const HostileEntry& e) {
    archive_entry* entry = archive_entry_new();
    archive_entry_copy_pathname(entry, e.name.c_str());
    bool hardlink = e.type == 0;
    archive_entry_set_mode(entry, (hardlink ? AE_IFREG : e.type) | 0644);
    archive_entry_set_uid(entry, e.uid);
    archive_entry_set_gid(entry, e.uid);
    if (e.type == AE_IFLNK) archive_entry_copy_symlink(entry, e.content.c_str());
    if (hardlink) archive_entry_copy_hardlink(entry, e.content.c_str());
    if (e.type == AE_IFCHR || e.type == AE_IFBLK) archive_entry_set_rdev(entry, e.rdev);
    for (const auto& [k, v] : e.xattrs) archive_entry_xattr_add_entry(entry, k.c_str(), v.data(), v.size());
    bool has_data = e.type == AE_IFREG;
    archive_entry_set_size(entry, has_data ? static_cast<int64_t>(e.content.size()) : 0);
    EXPECT_EQ(archive_write_header(a, entry), ARCHIVE_OK) << archive_error_string(a);
    if (has_data && !e.content.empty()) archive_write_data(a, e.content.data(), e.content.size());
    archive_entry_free(entry);
  };
  if (spec.with_description) add({"bulkhead-snapshot.json", AE_IFREG, spec.description});
  for (const auto& e : spec.entries) add(e);
  if (spec.with_end) add({"bulkhead-snapshot.end", AE_IFREG, "{\"entries\":" + std::to_string(spec.entries.size()) + "}"});
  archive_write_close(a);
  archive_write_free(a);
  return FdContents(fd.get());
}

class SnapshotArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = work_ + "/src";
    dest_ = work_ + "/dest";
    canary_dir_ = work_ + "/canary";
    Dir(src_, 0755, kBaseA, kBaseA);
    Dir(canary_dir_, 0755, 0, 0);
    Put(canary_dir_ + "/canary", "untouched", 0644, 0, 0);
  }

  Result<std::string> Import(const std::string& archive_bytes, int64_t max_bytes = kNoLimit) {
    UniqueFd fd = FdWith(archive_bytes);
    auto imported = ImportSnapshotTree(fd.get(), dest_, kBaseB, max_bytes);
    if (!imported) return imported.error();
    EXPECT_FALSE(imported->memory);
    return imported->metadata;
  }

  std::string Export(const std::string& metadata = R"({"name":"snap"})") {
    UniqueFd fd = MemFd();
    Status exported = ExportSnapshotTree(src_, kBaseA, metadata, fd.get());
    EXPECT_TRUE(exported.ok()) << exported.error().message;
    return FdContents(fd.get());
  }

  // A hostile archive fails with `code`, leaves no dest_ and touches nothing outside.
  void ExpectRefused(const std::string& archive_bytes, ErrorCode code = ErrorCode::kInvalid,
                     int64_t max_bytes = kNoLimit) {
    auto imported = Import(archive_bytes, max_bytes);
    ASSERT_FALSE(imported.ok());
    EXPECT_EQ(imported.error().code, code) << imported.error().message;
    struct stat st;
    EXPECT_NE(::lstat(dest_.c_str(), &st), 0) << "dest left behind after: " << imported.error().message;
    EXPECT_EQ(FileContents(canary_dir_ + "/canary"), "untouched");
    auto names = ListNames(OpenDirNoFollow(canary_dir_).get());
    ASSERT_TRUE(names.ok());
    EXPECT_EQ(*names, std::vector<std::string>{"canary"});
  }

  // Every kind of thing an upper layer holds.
  void BuildTree() {
    const uid_t a = kBaseA;
    Dir(src_ + "/workspace", 0755, a + 1000, a + 1000);
    Put(src_ + "/workspace/file.txt", "hello snapshot\n", 0640, a + 1000, a + 1001);
    ASSERT_EQ(::setxattr((src_ + "/workspace/file.txt").c_str(), "user.note", "kept", 4, 0), 0);
    Put(src_ + "/workspace/setuid", "#!/bin/true\n", 04755, a, a);
    Put(src_ + "/workspace/foreign", "from another range", 0644, 5, a + 70000);
    Put(src_ + "/workspace/caps", "ping", 0755, a, a);
    std::string cap = CapabilityV3(a);
    ASSERT_EQ(::setxattr((src_ + "/workspace/caps").c_str(), "security.capability", cap.data(), cap.size(), 0), 0);
    Put(src_ + "/workspace/caps2", "ping", 0755, a, a);
    cap = CapabilityV2();
    ASSERT_EQ(::setxattr((src_ + "/workspace/caps2").c_str(), "security.capability", cap.data(), cap.size(), 0), 0);
    Put(src_ + "/workspace/hard1", "linked", 0600, a + 1000, a + 1000);
    Dir(src_ + "/workspace/sub", 0700, a + 1000, a + 1000);
    ASSERT_EQ(::link((src_ + "/workspace/hard1").c_str(), (src_ + "/workspace/sub/hard2").c_str()), 0);
    {
      UniqueFd fd(::open((src_ + "/workspace/sparse").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
      ASSERT_EQ(::pwrite(fd.get(), "middle", 6, 4 << 20), 6);
      ASSERT_EQ(::ftruncate(fd.get(), 64 << 20), 0);
      ASSERT_EQ(::fchown(fd.get(), a + 1000, a + 1000), 0);
    }
    ASSERT_EQ(::symlink("/etc/shadow", (src_ + "/workspace/shadow-link").c_str()), 0);
    ASSERT_EQ(::lchown((src_ + "/workspace/shadow-link").c_str(), a + 1000, a + 1000), 0);
    ASSERT_EQ(::symlink("../workspace/file.txt", (src_ + "/workspace/relative-link").c_str()), 0);
    ASSERT_EQ(::mkfifo((src_ + "/workspace/fifo").c_str(), 0620), 0);
    Dir(src_ + "/workspace/empty", 0750, a + 1000, a + 1000);
    Put(src_ + "/workspace/caf\xe9", "latin-1 name", 0644, a, a);
    Dir(src_ + "/etc", 0755, a, a);
    ASSERT_EQ(::setxattr((src_ + "/etc").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
    ASSERT_EQ(::setxattr((src_ + "/etc").c_str(), "trusted.overlay.origin", "handle", 6, 0), 0);
    Put(src_ + "/etc/hostname", "box\n", 0644, a, a);
    Dir(src_ + "/usr", 0755, a, a);
    ASSERT_EQ(::mknod((src_ + "/usr/removed").c_str(), S_IFCHR | 0, ::makedev(0, 0)), 0);
    ASSERT_EQ(::lchown((src_ + "/usr/removed").c_str(), a, a), 0);
  }

  testing::TempStateDir dir_{"bulkhead-snapshot-test"};
  const std::string work_ = dir_.path();
  std::string src_, dest_, canary_dir_;
};

uid_t Shifted(uid_t id) { return id - kBaseA + kBaseB; }

TEST_F(SnapshotArchiveTest, RoundTripShiftsOwnersAndKeepsEveryKindOfEntry) {
  BuildTree();
  std::string bytes = Export(R"({"name":"snap","labels":{"a":"b"}})");
  auto imported = Import(bytes);
  ASSERT_TRUE(imported.ok()) << imported.error().message;
  EXPECT_EQ(nlohmann::json::parse(*imported), nlohmann::json::parse(R"({"name":"snap","labels":{"a":"b"}})"));

  // Every path: same type, mode, shifted owner, same size and content.
  std::function<void(const std::string&)> compare = [&](const std::string& rel) {
    struct stat a, b;
    ASSERT_EQ(::lstat((src_ + rel).c_str(), &a), 0) << rel;
    ASSERT_EQ(::lstat((dest_ + rel).c_str(), &b), 0) << rel;
    EXPECT_EQ(a.st_mode, b.st_mode) << rel;
    bool in_range = a.st_uid >= kBaseA && a.st_uid < kBaseA + 65536;
    EXPECT_EQ(b.st_uid, in_range ? Shifted(a.st_uid) : kBaseB + 65534) << rel;
    in_range = a.st_gid >= kBaseA && a.st_gid < kBaseA + 65536;
    EXPECT_EQ(b.st_gid, in_range ? Shifted(a.st_gid) : kBaseB + 65534) << rel;
    EXPECT_EQ(a.st_size, b.st_size) << rel;
    EXPECT_EQ(a.st_mtim.tv_sec, b.st_mtim.tv_sec) << rel;
    EXPECT_EQ(a.st_rdev, b.st_rdev) << rel;
    if (S_ISREG(a.st_mode) && a.st_size < (1 << 20)) {
      EXPECT_EQ(FileContents(src_ + rel), FileContents(dest_ + rel)) << rel;
    }
    if (S_ISLNK(a.st_mode)) {
      char ta[256] = {}, tb[256] = {};
      ASSERT_GT(::readlink((src_ + rel).c_str(), ta, sizeof ta), 0);
      ASSERT_GT(::readlink((dest_ + rel).c_str(), tb, sizeof tb), 0);
      EXPECT_STREQ(ta, tb) << rel;
    }
    if (S_ISDIR(a.st_mode)) {
      auto names = ListNames(OpenDirNoFollow(src_ + rel).get());
      auto dest_names = ListNames(OpenDirNoFollow(dest_ + rel).get());
      ASSERT_TRUE(names.ok() && dest_names.ok());
      std::sort(names->begin(), names->end());
      std::sort(dest_names->begin(), dest_names->end());
      EXPECT_EQ(*names, *dest_names) << rel;
      for (const auto& name : *names) compare(rel + "/" + name);
    }
  };
  compare("");

  EXPECT_EQ(Xattr(dest_ + "/workspace/file.txt", "user.note"), "kept");
  EXPECT_EQ(Xattr(dest_ + "/etc", "trusted.overlay.opaque"), "y");
  EXPECT_EQ(Xattr(dest_ + "/etc", "trusted.overlay.origin"), "<none>");  // the source host's file handle
  EXPECT_EQ(CapabilityRootOf(Xattr(dest_ + "/workspace/caps", "security.capability")), kBaseB);
  EXPECT_EQ(CapabilityRootOf(Xattr(dest_ + "/workspace/caps2", "security.capability")), kBaseB);
  struct stat st, st2;
  ASSERT_EQ(::lstat((dest_ + "/usr/removed").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode) && st.st_rdev == ::makedev(0, 0));
  ASSERT_EQ(::lstat((dest_ + "/workspace/hard1").c_str(), &st), 0);
  ASSERT_EQ(::lstat((dest_ + "/workspace/sub/hard2").c_str(), &st2), 0);
  EXPECT_EQ(st.st_ino, st2.st_ino);
  EXPECT_EQ(st.st_nlink, 2u);
  ASSERT_EQ(::lstat((dest_ + "/workspace/sparse").c_str(), &st), 0);
  EXPECT_LT(st.st_blocks * 512, 1 << 20) << "sparse file was filled";
  std::string middle(6, '\0');
  UniqueFd sparse(::open((dest_ + "/workspace/sparse").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_EQ(::pread(sparse.get(), middle.data(), 6, 4 << 20), 6);
  EXPECT_EQ(middle, "middle");
  // 64 MiB of holes do not travel.
  EXPECT_LT(bytes.size(), 64u << 10);
}

TEST_F(SnapshotArchiveTest, ExportStreamsThroughAPipe) {
  BuildTree();
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  Status exported;
  std::thread writer([&] {
    exported = ExportSnapshotTree(src_, kBaseA, R"({"via":"pipe"})", write_end.get());
    write_end.reset();
  });
  auto imported = ImportSnapshotTree(read_end.get(), dest_, kBaseB, kNoLimit);
  // The import stops at the tar's end; the writer may still be adding the last block's padding.
  char sink[4096];
  while (::read(read_end.get(), sink, sizeof sink) > 0) {
  }
  writer.join();
  ASSERT_TRUE(exported.ok()) << exported.error().message;
  ASSERT_TRUE(imported.ok()) << imported.error().message;
  EXPECT_EQ(imported->metadata, R"({"via":"pipe"})");
  EXPECT_EQ(FileContents(dest_ + "/workspace/file.txt"), "hello snapshot\n");
}

TEST_F(SnapshotArchiveTest, PlantedSymlinkIsExportedAsALinkNeverAsTheTarget) {
  ASSERT_EQ(::symlink("/etc/shadow", (src_ + "/shadow").c_str()), 0);
  ASSERT_EQ(::symlink("/etc", (src_ + "/etc-link").c_str()), 0);
  std::string bytes = Export();
  // Read the archive itself: the entries are links without data, and no byte of shadow is there.
  UniqueFd fd = FdWith(bytes);
  archive* a = archive_read_new();
  archive_read_support_filter_zstd(a);
  archive_read_support_format_tar(a);
  ASSERT_EQ(archive_read_open_fd(a, fd.get(), 65536), ARCHIVE_OK);
  std::map<std::string, std::string> links;
  archive_entry* entry;
  while (archive_read_next_header(a, &entry) == ARCHIVE_OK) {
    std::string name = archive_entry_pathname(entry);
    if (archive_entry_filetype(entry) == AE_IFLNK) {
      EXPECT_EQ(archive_entry_size(entry), 0);
      links[name] = archive_entry_symlink(entry);
    } else {
      EXPECT_TRUE(name.rfind("bulkhead-snapshot.", 0) == 0 || name == "rootfs/") << name;
    }
  }
  archive_read_free(a);
  EXPECT_EQ(links, (std::map<std::string, std::string>{{"rootfs/etc-link", "/etc"}, {"rootfs/shadow", "/etc/shadow"}}));
  std::string shadow = FileContents("/etc/shadow");
  ASSERT_GT(shadow.size(), 10u);
  EXPECT_EQ(bytes.find(shadow.substr(0, 10)), std::string::npos);
}

TEST_F(SnapshotArchiveTest, ExportRefusesASymlinkAsTheTreeAndBadMetadata) {
  std::string link = work_ + "/link";
  ASSERT_EQ(::symlink(src_.c_str(), link.c_str()), 0);
  UniqueFd fd = MemFd();
  EXPECT_FALSE(ExportSnapshotTree(link, kBaseA, "{}", fd.get()).ok());
  Status bad = ExportSnapshotTree(src_, kBaseA, "{not json", fd.get());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalid);
}

TEST_F(SnapshotArchiveTest, EscapingNamesAreRefused) {
  for (std::string name : {"/etc/evil", "rootfs/../evil", "rootfs/a/../../evil", "../evil", "evil"}) {
    HostileArchive spec;
    spec.entries = {{name, AE_IFREG, "pwned"}};
    ExpectRefused(WriteArchive(spec));
  }
}

TEST_F(SnapshotArchiveTest, EntriesThroughSymlinksAreRefused) {
  for (const std::string& target : std::vector<std::string>{canary_dir_, "../../../../../../.." + canary_dir_, ".."}) {
    HostileArchive spec;
    spec.entries = {{"rootfs/", AE_IFDIR}, {"rootfs/link", AE_IFLNK, target}, {"rootfs/link/canary", AE_IFREG, "pwned"}};
    ExpectRefused(WriteArchive(spec));
    spec.entries = {{"rootfs/link", AE_IFLNK, target}, {"rootfs//link/./dropped", AE_IFDIR}};
    ExpectRefused(WriteArchive(spec));
  }
}

TEST_F(SnapshotArchiveTest, HardLinksLeavingTheTreeAreRefused) {
  for (const std::string& target :
       std::vector<std::string>{canary_dir_ + "/canary", "rootfs/../../canary/canary", "canary/canary"}) {
    HostileArchive spec;
    spec.entries = {{"rootfs/grab", 0, target}};
    ExpectRefused(WriteArchive(spec));
  }
  HostileArchive through_link;
  through_link.entries = {{"rootfs/dir", AE_IFLNK, canary_dir_}, {"rootfs/grab", 0, "rootfs/dir/canary"}};
  ExpectRefused(WriteArchive(through_link));
}

TEST_F(SnapshotArchiveTest, DeviceNodesOtherThanWhiteoutsAreRefused) {
  for (auto [type, rdev] : {std::pair<mode_t, dev_t>{AE_IFCHR, ::makedev(1, 3)}, {AE_IFBLK, ::makedev(8, 0)},
                            {AE_IFBLK, 0}}) {
    HostileArchive spec;
    spec.entries = {{"rootfs/dev", type, "", 0, rdev}};
    ExpectRefused(WriteArchive(spec));
  }
}

TEST_F(SnapshotArchiveTest, OwnersBeyondTheRangeAreRefused) {
  for (int64_t uid : {int64_t{65536}, int64_t{1} << 32}) {
    HostileArchive spec;
    spec.entries = {{"rootfs/file", AE_IFREG, "x", uid}};
    ExpectRefused(WriteArchive(spec));
  }
}

TEST_F(SnapshotArchiveTest, ForeignXattrsAreRefused) {
  for (std::string name : {"trusted.evil", "security.selinux", "system.posix_acl_access"}) {
    HostileArchive spec;
    spec.entries = {{"rootfs/file", AE_IFREG, "x", 0, 0, {{name, "v"}}}};
    ExpectRefused(WriteArchive(spec));
  }
  HostileArchive bad_cap;
  bad_cap.entries = {{"rootfs/file", AE_IFREG, "x", 0, 0, {{"security.capability", CapabilityV3(70000)}}}};
  ExpectRefused(WriteArchive(bad_cap));
}

TEST_F(SnapshotArchiveTest, ContentBeyondMaxBytesIsTooLarge) {
  HostileArchive spec;
  spec.entries = {{"rootfs/big", AE_IFREG, std::string(1 << 20, 'z')}};
  ExpectRefused(WriteArchive(spec), ErrorCode::kTooLarge, 100 << 10);
  // Many empty entries count too.
  HostileArchive many;
  for (int i = 0; i < 1000; ++i) many.entries.push_back({"rootfs/f" + std::to_string(i), AE_IFREG, ""});
  ExpectRefused(WriteArchive(many), ErrorCode::kTooLarge, 100 << 10);
  ASSERT_TRUE(Import(WriteArchive(many), 1 << 20).ok());
}

TEST_F(SnapshotArchiveTest, TruncatedArchivesAreRefusedAtAnyPoint) {
  BuildTree();
  std::string bytes = Export();
  for (size_t cut : {size_t{0}, size_t{10}, bytes.size() / 4, bytes.size() / 2, bytes.size() * 3 / 4,
                     bytes.size() - 40, bytes.size() - 8, bytes.size() - 1}) {
    SCOPED_TRACE(cut);
    ExpectRefused(bytes.substr(0, cut));
  }
  std::string corrupt = bytes;
  corrupt[corrupt.size() / 2] ^= 0x5a;
  ExpectRefused(corrupt);
  ASSERT_TRUE(Import(bytes).ok());
}

TEST_F(SnapshotArchiveTest, ForeignOrIncompleteArchivesAreRefused) {
  HostileArchive gzip;
  gzip.entries = {{"rootfs/file", AE_IFREG, "x"}};
  gzip.filter = ARCHIVE_FILTER_GZIP;
  ExpectRefused(WriteArchive(gzip));
  HostileArchive plain = gzip;
  plain.filter = ARCHIVE_FILTER_NONE;
  ExpectRefused(WriteArchive(plain));
  ExpectRefused(std::string(8192, '\x28'));

  HostileArchive no_description;
  no_description.entries = {{"rootfs/file", AE_IFREG, "x"}};
  no_description.with_description = false;
  ExpectRefused(WriteArchive(no_description));
  HostileArchive description_later = no_description;
  description_later.entries.push_back({"bulkhead-snapshot.json", AE_IFREG, "{}"});
  ExpectRefused(WriteArchive(description_later));
  for (std::string description :
       {R"({"format":"bulkhead-snapshot","version":3,"metadata":{}})", R"({"format":"other","version":1,"metadata":{}})",
        R"({"format":7,"version":"1","metadata":{}})", R"([1,2])", "not json"}) {
    HostileArchive spec;
    spec.description = description;
    ExpectRefused(WriteArchive(spec));
  }
  HostileArchive no_end;
  no_end.entries = {{"rootfs/file", AE_IFREG, "x"}};
  no_end.with_end = false;
  ExpectRefused(WriteArchive(no_end));
}

}  // namespace
}  // namespace bulkhead::storage
