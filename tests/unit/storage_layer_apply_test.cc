// Image layers applied in sequence onto one tree, as an image pull does: each layer's changes
// (whiteouts, opaque directories, replacements, merges, links) land as the OCI image spec says,
// owners move into the stored range, and hostile layers are refused with nothing written or
// removed outside the tree.
#include "storage/layer_apply.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "common/id_ranges.h"
#include "common/scope_guard.h"
#include "storage/fs_util.h"
#include "support/file_contents.h"
#include "support/temp_state_dir.h"

namespace bulkhead::storage {
namespace {

using testing::FileContents;

constexpr mode_t kHardLink = 0;  // TarEntry::type of a hard link; content is its target

struct TarEntry {
  std::string name;
  mode_t type = AE_IFREG;
  std::string content;  // file data, or the symlink / hard link target
  mode_t mode = 0644;
  int64_t uid = 0;
  int64_t gid = 0;
  int64_t mtime = 1700000000;
  std::string capability;  // a security.capability xattr, if any
};

enum class Compression { kNone, kGzip, kZstd };

// Writes a pax tar with libarchive, names exactly as given, as registries serve layers.
void WriteLayer(const std::string& path, const std::vector<TarEntry>& entries, Compression compression) {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (compression == Compression::kGzip) {
    ASSERT_EQ(archive_write_add_filter_gzip(a), ARCHIVE_OK);
  } else if (compression == Compression::kZstd) {
    ASSERT_EQ(archive_write_add_filter_zstd(a), ARCHIVE_OK);
  }
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK) << archive_error_string(a);
  for (const auto& e : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.name.c_str());
    const bool hardlink = e.type == kHardLink;
    archive_entry_set_mode(entry, (hardlink ? AE_IFREG : e.type) | e.mode);
    archive_entry_set_uid(entry, e.uid);
    archive_entry_set_gid(entry, e.gid);
    archive_entry_set_mtime(entry, e.mtime, 0);
    if (e.type == AE_IFLNK) archive_entry_set_symlink(entry, e.content.c_str());
    if (e.type == AE_IFCHR || e.type == AE_IFBLK) archive_entry_set_rdev(entry, ::makedev(1, 3));
    if (hardlink) archive_entry_set_hardlink(entry, e.content.c_str());
    if (!e.capability.empty()) {
      archive_entry_xattr_add_entry(entry, "security.capability", e.capability.data(), e.capability.size());
    }
    const bool has_data = e.type == AE_IFREG;
    archive_entry_set_size(entry, has_data ? static_cast<int64_t>(e.content.size()) : 0);
    ASSERT_EQ(archive_write_header(a, entry), ARCHIVE_OK) << archive_error_string(a);
    for (size_t done = 0; has_data && done < e.content.size();) {
      la_ssize_t n = archive_write_data(a, e.content.data() + done, e.content.size() - done);
      ASSERT_GT(n, 0) << archive_error_string(a);
      done += static_cast<size_t>(n);
    }
    archive_entry_free(entry);
  }
  ASSERT_EQ(archive_write_close(a), ARCHIVE_OK) << archive_error_string(a);
  archive_write_free(a);
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string LinkTarget(const std::string& path) {
  char target[PATH_MAX] = {};
  if (::readlink(path.c_str(), target, sizeof target - 1) < 0) return "<not a symlink>";
  return target;
}

mode_t TypeOf(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}

class LayerApplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::mkdir(rootfs_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(outside_.c_str(), 0755), 0);
    ASSERT_TRUE(WriteFile(outside_ + "/sentinel", "untouched").ok());
  }

  // Writes the layer and applies it onto rootfs_.
  Result<LayerApplyStats> Apply(const std::vector<TarEntry>& entries, Compression compression = Compression::kNone) {
    const std::string blob = blobs_.path() + "/layer-" + std::to_string(layer_count_++);
    WriteLayer(blob, entries, compression);
    return ApplyLayer(blob, rootfs_);
  }

  void ApplyOk(const std::vector<TarEntry>& entries, Compression compression = Compression::kNone) {
    auto applied = Apply(entries, compression);
    ASSERT_TRUE(applied.ok()) << applied.error().message;
  }

  // Refused as hostile, naming the entry, and nothing outside the tree changed.
  void ExpectRefused(const Result<LayerApplyStats>& applied, const std::string& entry) {
    ASSERT_FALSE(applied.ok()) << entry;
    EXPECT_EQ(applied.error().code, ErrorCode::kInvalid) << applied.error().message;
    EXPECT_EQ(applied.error().detail_code, "invalid_image") << applied.error().message;
    EXPECT_NE(applied.error().message.find(entry), std::string::npos) << applied.error().message;
    ExpectOutsideUntouched();
  }

  void ExpectOutsideUntouched() {
    EXPECT_EQ(FileContents(outside_ + "/sentinel"), "untouched");
    struct stat st;
    ASSERT_EQ(::lstat((outside_ + "/sentinel").c_str(), &st), 0);
    EXPECT_EQ(st.st_nlink, 1u);  // no hard link to it anywhere
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(Names(outside_), std::vector<std::string>{"sentinel"});
    EXPECT_EQ(Names(base_), (std::vector<std::string>{"outside", "rootfs"}));
  }

  testing::TempStateDir dir_{"bulkhead-layer-test"};
  const std::string base_ = dir_.path();
  const std::string rootfs_ = base_ + "/rootfs";
  // Beside the tree, with a sentinel: the target of every escape.
  const std::string outside_ = base_ + "/outside";
  testing::TempStateDir blobs_{"bulkhead-layer-blobs"};
  int layer_count_ = 0;
};

TEST_F(LayerApplyTest, LayersApplyInSequenceWhateverTheirCompression) {
  auto first = Apply({{"./", AE_IFDIR, "", 0755},
                      {"./etc/", AE_IFDIR, "", 0755},
                      {"./etc/hostname", AE_IFREG, "one\n"},
                      {"./etc/keep", AE_IFREG, "keep\n"},
                      {"usr/bin/tool", AE_IFREG, "#!/bin/sh\n", 0755}},  // parents made on the way
                     Compression::kNone);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->entries, 4);  // the root's own entry is not one
  EXPECT_EQ(first->bytes, 4 + 5 + 10);

  ApplyOk({{"etc/hostname", AE_IFREG, "two\n"}, {"etc/added", AE_IFREG, "gz\n"}}, Compression::kGzip);

  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 23);
  auto third = Apply({{"var/", AE_IFDIR, "", 0755}, {"var/big", AE_IFREG, big}}, Compression::kZstd);
  ASSERT_TRUE(third.ok()) << third.error().message;
  EXPECT_EQ(third->entries, 2);
  EXPECT_EQ(third->bytes, static_cast<int64_t>(big.size()));
  EXPECT_EQ(third->whiteouts, 0);

  EXPECT_EQ(FileContents(rootfs_ + "/etc/hostname"), "two\n");
  EXPECT_EQ(FileContents(rootfs_ + "/etc/keep"), "keep\n");
  EXPECT_EQ(FileContents(rootfs_ + "/etc/added"), "gz\n");
  EXPECT_EQ(FileContents(rootfs_ + "/usr/bin/tool"), "#!/bin/sh\n");
  EXPECT_TRUE(FileContents(rootfs_ + "/var/big") == big);
  EXPECT_EQ(Names(rootfs_), (std::vector<std::string>{"etc", "usr", "var"}));
  ExpectOutsideUntouched();
}

TEST_F(LayerApplyTest, WhiteoutsRemoveALowerFileSymlinkAndDirectoryTree) {
  ApplyOk({{"etc/", AE_IFDIR, "", 0755},
           {"etc/passwd", AE_IFREG, "root:x:0:0\n"},
           {"etc/group", AE_IFREG, "root:x:0:\n"},
           {"opt/", AE_IFDIR, "", 0755},
           {"opt/app/", AE_IFDIR, "", 0755},
           {"opt/app/lib/", AE_IFDIR, "", 0755},
           {"opt/app/lib/x.so", AE_IFREG, "elf"},
           {"opt/app/bin/run", AE_IFREG, "run", 0755},
           {"opt/other", AE_IFREG, "other"},
           {"link", AE_IFLNK, outside_ + "/sentinel", 0777}});
  auto applied = Apply({{"etc/.wh.passwd", AE_IFREG, ""},
                        {"opt/.wh.app", AE_IFREG, ""},
                        {".wh.link", AE_IFREG, ""},
                        {"opt/.wh.never-there", AE_IFREG, ""},
                        {"gone/.wh.also-never-there", AE_IFREG, ""}},
                       Compression::kGzip);
  ASSERT_TRUE(applied.ok()) << applied.error().message;
  EXPECT_EQ(applied->whiteouts, 5);
  EXPECT_EQ(applied->entries, 0);

  EXPECT_EQ(Names(rootfs_ + "/etc"), std::vector<std::string>{"group"});  // no .wh. file written
  EXPECT_EQ(Names(rootfs_ + "/opt"), std::vector<std::string>{"other"});
  EXPECT_EQ(Names(rootfs_), (std::vector<std::string>{"etc", "opt"}));  // the symlink, not its target
  ExpectOutsideUntouched();
}

// The spec: whiteouts apply to lower layers only, so what the same layer wrote stays.
TEST_F(LayerApplyTest, WhiteoutsSpareWhatTheSameLayerWrote) {
  ApplyOk({{"x", AE_IFREG, "lower"}, {"dir/", AE_IFDIR, "", 0755}, {"dir/old", AE_IFREG, "old"}});
  ApplyOk({{"x", AE_IFREG, "upper"}, {".wh.x", AE_IFREG, ""}, {"dir/new", AE_IFREG, "new"}, {".wh.dir", AE_IFREG, ""}});
  EXPECT_EQ(FileContents(rootfs_ + "/x"), "upper");
  EXPECT_EQ(Names(rootfs_ + "/dir"), std::vector<std::string>{"new"});
}

// Layers Docker made on AUFS carry its bookkeeping at the top; it is not the image's.
TEST_F(LayerApplyTest, AufsBookkeepingIsNotApplied) {
  auto applied = Apply({{".wh..wh.plnk/", AE_IFDIR, "", 0700},
                        {".wh..wh.plnk/1234.5678", AE_IFREG, "linked"},
                        {".wh..wh.aufs", AE_IFREG, ""},
                        {"etc/.wh..wh.orph", AE_IFREG, ""},
                        {"etc/hosts", AE_IFREG, "hosts"}});
  ASSERT_TRUE(applied.ok()) << applied.error().message;
  EXPECT_EQ(applied->entries, 1);
  EXPECT_EQ(Names(rootfs_), std::vector<std::string>{"etc"});
  EXPECT_EQ(Names(rootfs_ + "/etc"), std::vector<std::string>{"hosts"});
}

TEST_F(LayerApplyTest, OpaqueDirectoryKeepsOnlyWhatThisLayerWroteBeforeOrAfterTheMarker) {
  ApplyOk({{"d/", AE_IFDIR, "", 0755},
           {"d/old", AE_IFREG, "old"},
           {"d/sub/", AE_IFDIR, "", 0755},
           {"d/sub/old", AE_IFREG, "old"},
           {"d/gone/deep/er/", AE_IFDIR, "", 0755},
           {"d/gone/deep/er/file", AE_IFREG, "old"},
           {"d/old-link", AE_IFLNK, "old", 0777},
           {"d-sibling", AE_IFREG, "stays"},
           {"e/", AE_IFDIR, "", 0755},
           {"e/sub/", AE_IFDIR, "", 0755},
           {"e/sub/old", AE_IFREG, "old"}});
  auto applied = Apply({{"d/early", AE_IFREG, "early"},
                        {"d/sub-new", AE_IFREG, "sorts before d/sub/"},
                        {"d/sub/new", AE_IFREG, "into the lower directory"},
                        {"d/.wh..wh..opq", AE_IFREG, ""},
                        {"d/late", AE_IFREG, "late"},
                        {"d/newdir/", AE_IFDIR, "", 0755},
                        {"d/newdir/f", AE_IFREG, "f"},
                        // The marker first, then a directory a lower layer had too.
                        {"e/.wh..wh..opq", AE_IFREG, ""},
                        {"e/sub/", AE_IFDIR, "", 0700},
                        {"e/sub/new", AE_IFREG, "new"}},
                       Compression::kZstd);
  ASSERT_TRUE(applied.ok()) << applied.error().message;
  EXPECT_EQ(applied->whiteouts, 2);

  EXPECT_EQ(Names(rootfs_ + "/d"), (std::vector<std::string>{"early", "late", "newdir", "sub", "sub-new"}));
  EXPECT_EQ(Names(rootfs_ + "/d/sub"), std::vector<std::string>{"new"});
  EXPECT_EQ(FileContents(rootfs_ + "/d/sub/new"), "into the lower directory");
  EXPECT_EQ(FileContents(rootfs_ + "/d/early"), "early");
  EXPECT_EQ(FileContents(rootfs_ + "/d/late"), "late");
  EXPECT_EQ(FileContents(rootfs_ + "/d/newdir/f"), "f");
  EXPECT_EQ(FileContents(rootfs_ + "/d-sibling"), "stays");
  EXPECT_EQ(Names(rootfs_ + "/e"), std::vector<std::string>{"sub"});
  EXPECT_EQ(Names(rootfs_ + "/e/sub"), std::vector<std::string>{"new"});
  ExpectOutsideUntouched();
}

TEST_F(LayerApplyTest, OpaqueRootReplacesTheWholeTree) {
  ApplyOk({{"bin/", AE_IFDIR, "", 0755}, {"bin/sh", AE_IFREG, "sh"}, {"etc/", AE_IFDIR, "", 0755}});
  ApplyOk({{"./etc/", AE_IFDIR, "", 0755}, {"./.wh..wh..opq", AE_IFREG, ""}, {"./new", AE_IFREG, "new"}});
  EXPECT_EQ(Names(rootfs_), (std::vector<std::string>{"etc", "new"}));
  ExpectOutsideUntouched();
}

TEST_F(LayerApplyTest, EntriesReplaceWhatLowerLayersLeftAndDirectoriesMerge) {
  ApplyOk({{"a/", AE_IFDIR, "", 0755},
           {"a/inner/", AE_IFDIR, "", 0755},
           {"a/inner/file", AE_IFREG, "lower"},
           {"b", AE_IFREG, "lower file"},
           {"c/", AE_IFDIR, "", 0755, 0, 0, 1600000000},
           {"c/lower", AE_IFREG, "lower"},
           {"s1", AE_IFREG, "lower file"},
           {"s2/", AE_IFDIR, "", 0755},
           {"s2/x", AE_IFREG, "x"},
           {"f", AE_IFLNK, outside_ + "/sentinel", 0777},
           {"g", AE_IFLNK, "c", 0777}});
  ApplyOk({{"a", AE_IFREG, "a file now"},                   // file over a directory tree
           {"b/", AE_IFDIR, "", 0700},                        // directory over a file
           {"b/x", AE_IFREG, "x"},
           {"c/", AE_IFDIR, "", 0750, 1000, 1000, 1700000123},  // directory over directory: merged
           {"c/upper", AE_IFREG, "upper"},
           {"s1", AE_IFLNK, "somewhere", 0777},  // symlink over a file
           {"s2", AE_IFLNK, "/etc", 0777},       // symlink over a directory
           {"f", AE_IFREG, "replaced"},          // file over a symlink leading out: not through it
           {"g/", AE_IFDIR, "", 0755}},          // directory over a symlink to a directory
          Compression::kGzip);

  EXPECT_EQ(TypeOf(rootfs_ + "/a"), S_IFREG);
  EXPECT_EQ(FileContents(rootfs_ + "/a"), "a file now");
  EXPECT_EQ(TypeOf(rootfs_ + "/b"), S_IFDIR);
  EXPECT_EQ(FileContents(rootfs_ + "/b/x"), "x");
  struct stat st;
  ASSERT_EQ(::lstat((rootfs_ + "/b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);

  EXPECT_EQ(Names(rootfs_ + "/c"), (std::vector<std::string>{"lower", "upper"}));
  ASSERT_EQ(::lstat((rootfs_ + "/c").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(st.st_uid, kStoredIdBase + 1000);
  EXPECT_EQ(st.st_gid, kStoredIdBase + 1000);
  EXPECT_EQ(st.st_mtime, 1700000123);

  EXPECT_EQ(LinkTarget(rootfs_ + "/s1"), "somewhere");
  EXPECT_EQ(LinkTarget(rootfs_ + "/s2"), "/etc");
  EXPECT_EQ(TypeOf(rootfs_ + "/f"), S_IFREG);
  EXPECT_EQ(FileContents(rootfs_ + "/f"), "replaced");
  EXPECT_EQ(TypeOf(rootfs_ + "/g"), S_IFDIR);
  EXPECT_TRUE(Names(rootfs_ + "/g").empty());
  EXPECT_EQ(Names(rootfs_), (std::vector<std::string>{"a", "b", "c", "f", "g", "s1", "s2"}));
  ExpectOutsideUntouched();
}

TEST_F(LayerApplyTest, HardLinksReachLowerLayersFilesAndEarlierEntries) {
  ApplyOk({{"bin/", AE_IFDIR, "", 0755}, {"bin/tool", AE_IFREG, "tool", 0755}, {"bin/old", AE_IFREG, "old"}});
  ApplyOk({{"bin/alias", kHardLink, "bin/tool"},  // to a lower layer's file
           {"bin/old", kHardLink, "./bin/tool"},  // over a lower layer's file
           {"lib/", AE_IFDIR, "", 0755},
           {"lib/x", AE_IFREG, "x"},
           {"lib/y", kHardLink, "lib/x"}},  // to this layer's
          Compression::kZstd);
  struct stat tool, alias, old, x, y;
  ASSERT_EQ(::lstat((rootfs_ + "/bin/tool").c_str(), &tool), 0);
  ASSERT_EQ(::lstat((rootfs_ + "/bin/alias").c_str(), &alias), 0);
  ASSERT_EQ(::lstat((rootfs_ + "/bin/old").c_str(), &old), 0);
  EXPECT_EQ(alias.st_ino, tool.st_ino);
  EXPECT_EQ(old.st_ino, tool.st_ino);
  EXPECT_EQ(tool.st_nlink, 3u);
  ASSERT_EQ(::lstat((rootfs_ + "/lib/x").c_str(), &x), 0);
  ASSERT_EQ(::lstat((rootfs_ + "/lib/y").c_str(), &y), 0);
  EXPECT_EQ(x.st_ino, y.st_ino);
  EXPECT_EQ(FileContents(rootfs_ + "/lib/y"), "x");
  ExpectOutsideUntouched();
}

TEST_F(LayerApplyTest, SymlinksStaySymlinks) {
  ApplyOk({{"usr/lib/", AE_IFDIR, "", 0755},
           {"lib", AE_IFLNK, "usr/lib", 0777},
           {"abs", AE_IFLNK, outside_ + "/sentinel", 0777},
           {"up", AE_IFLNK, "../../../..", 0777},
           {"dangling", AE_IFLNK, "nowhere", 0777}});
  ApplyOk({{"usr/lib/libc.so", AE_IFREG, "libc"}, {"bin", AE_IFLNK, "usr/bin", 0777}}, Compression::kGzip);
  EXPECT_EQ(LinkTarget(rootfs_ + "/lib"), "usr/lib");
  EXPECT_EQ(LinkTarget(rootfs_ + "/abs"), outside_ + "/sentinel");
  EXPECT_EQ(LinkTarget(rootfs_ + "/up"), "../../../..");
  EXPECT_EQ(LinkTarget(rootfs_ + "/dangling"), "nowhere");
  EXPECT_EQ(LinkTarget(rootfs_ + "/bin"), "usr/bin");
  EXPECT_EQ(FileContents(rootfs_ + "/lib/libc.so"), "libc");
  ExpectOutsideUntouched();
}

TEST_F(LayerApplyTest, OwnersMoveToTheStoredRangeAndSetIdBitsStay) {
  ApplyOk({{"bin/", AE_IFDIR, "", 0755},
           {"bin/su", AE_IFREG, "su", 04755, 0, 0},
           {"bin/wall", AE_IFREG, "wall", 02755, 0, 5},
           {"home/", AE_IFDIR, "", 0755},
           {"home/dev/", AE_IFDIR, "", 02770, 1000, 1001},
           {"home/dev/notes", AE_IFREG, "mine", 0600, 1000, 1001},
           {"home/dev/link", AE_IFLNK, "notes", 0777, 1000, 1001},
           {"strange", AE_IFREG, "", 0644, 70000, 4000000000}});
  struct stat st;
  ASSERT_EQ(::lstat((rootfs_ + "/bin/su").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 04755u);  // setuid, on the stored range's root: not host root's
  EXPECT_EQ(st.st_uid, kStoredIdBase);
  EXPECT_EQ(st.st_gid, kStoredIdBase);
  ASSERT_EQ(::lstat((rootfs_ + "/bin/wall").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 02755u);
  EXPECT_EQ(st.st_gid, kStoredIdBase + 5);
  ASSERT_EQ(::lstat((rootfs_ + "/home/dev").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 02770u);
  EXPECT_EQ(st.st_uid, kStoredIdBase + 1000);
  EXPECT_EQ(st.st_gid, kStoredIdBase + 1001);
  ASSERT_EQ(::lstat((rootfs_ + "/home/dev/notes").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kStoredIdBase + 1000);
  EXPECT_EQ(st.st_gid, kStoredIdBase + 1001);
  ASSERT_EQ(::lstat((rootfs_ + "/home/dev/link").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kStoredIdBase + 1000);
  // Ids a sandbox cannot have become its nobody.
  ASSERT_EQ(::lstat((rootfs_ + "/strange").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kStoredIdBase + kNobodyId);
  EXPECT_EQ(st.st_gid, kStoredIdBase + kNobodyId);
}

// As an import: file capabilities are not kept (docs/SECURITY.md), which only takes privileges away.
TEST_F(LayerApplyTest, FileCapabilitiesAreNotKept) {
  // v2, effective, permitted CAP_NET_RAW (13).
  const std::string cap_net_raw("\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", 20);
  TarEntry ping{"bin/ping", AE_IFREG, "ping", 0755};
  ping.capability = cap_net_raw;
  ApplyOk({{"bin/", AE_IFDIR, "", 0755}, ping});
  EXPECT_EQ(FileContents(rootfs_ + "/bin/ping"), "ping");
  char value[64];
  EXPECT_LT(::lgetxattr((rootfs_ + "/bin/ping").c_str(), "security.capability", value, sizeof value), 0);
  EXPECT_EQ(errno, ENODATA);
}

TEST_F(LayerApplyTest, DeviceNodesAndFifosAreSkippedAndCounted) {
  auto applied = Apply({{"dev/", AE_IFDIR, "", 0755},
                        {"dev/null", AE_IFCHR, "", 0666},
                        {"dev/sda", AE_IFBLK, "", 0660},
                        {"run/", AE_IFDIR, "", 0755},
                        {"run/fifo", AE_IFIFO, "", 0644},
                        {"run/file", AE_IFREG, "kept"}});
  ASSERT_TRUE(applied.ok()) << applied.error().message;
  EXPECT_EQ(applied->skipped_special, 3);
  EXPECT_EQ(applied->entries, 3);
  EXPECT_TRUE(Names(rootfs_ + "/dev").empty());
  EXPECT_EQ(Names(rootfs_ + "/run"), std::vector<std::string>{"file"});
}

TEST_F(LayerApplyTest, DotDotNamesAreRefused) {
  for (const std::string& name : {std::string("../outside/sentinel"), std::string("../outside/dropped"),
                                  "../../../../../../../.." + outside_ + "/dropped", std::string("a/../../outside/dropped"),
                                  std::string("./../outside/dropped")}) {
    ExpectRefused(Apply({{"a/", AE_IFDIR, "", 0755}, {name, AE_IFREG, "pwned"}}), name);
  }
}

TEST_F(LayerApplyTest, AbsoluteNamesAreRefused) {
  for (const std::string& name : {outside_ + "/sentinel", outside_ + "/dropped", ".//" + outside_ + "/dropped"}) {
    ExpectRefused(Apply({{name, AE_IFREG, "pwned"}}, Compression::kGzip), name);
  }
}

TEST_F(LayerApplyTest, HardLinksOutOfTheTreeAreRefused) {
  for (const std::string& target : {std::string("../outside/sentinel"), outside_ + "/sentinel",
                                    std::string("bin/../../outside/sentinel")}) {
    ExpectRefused(Apply({{"bin/", AE_IFDIR, "", 0755}, {"bin/grab", kHardLink, target}}), "bin/grab");
  }
  // Through a symlink a lower layer left: refused too (and inside the chroot it leads nowhere).
  ApplyOk({{"out", AE_IFLNK, outside_, 0777}});
  ExpectRefused(Apply({{"grab", kHardLink, "out/sentinel"}}), "grab");
}

TEST_F(LayerApplyTest, WritingThroughASymlinkIsRefused) {
  ASSERT_EQ(::mkdir((rootfs_ + "/inside").c_str(), 0755), 0);
  for (const std::string& target : {outside_, std::string("../outside"), "../../../../../../../.." + outside_,
                                    std::string("inside")}) {
    // Left by a lower layer.
    ApplyOk({{"link", AE_IFLNK, target, 0777}});
    ExpectRefused(Apply({{"link/dropped", AE_IFREG, "pwned"}}), "link/dropped");
    ExpectRefused(Apply({{"link/sub/", AE_IFDIR, "", 0755}}), "link/sub");
    ExpectRefused(Apply({{"link/sentinel", AE_IFREG, "pwned"}}), "link/sentinel");
    // Made earlier in the same layer.
    ExpectRefused(Apply({{"same", AE_IFLNK, target, 0777}, {"same/dropped", AE_IFREG, "pwned"}}), "same/dropped");
    EXPECT_TRUE(Names(rootfs_ + "/inside").empty()) << target;
  }
}

TEST_F(LayerApplyTest, WhiteoutsThroughASymlinkOrOfDotAndDotDotAreRefused) {
  ApplyOk({{"keep", AE_IFREG, "keep"}, {"out", AE_IFLNK, outside_, 0777}, {"up", AE_IFLNK, "..", 0777}});
  for (const std::string& name : {std::string("out/.wh.sentinel"), std::string("out/.wh..wh..opq"),
                                  std::string("up/.wh.outside"), std::string("up/.wh..wh..opq")}) {
    ExpectRefused(Apply({{name, AE_IFREG, ""}}), name);
  }
  for (const std::string& name : {std::string(".wh.."), std::string(".wh..."), std::string(".wh."),
                                  std::string("sub/.wh.."), std::string("../.wh.outside")}) {
    ExpectRefused(Apply({{name, AE_IFREG, ""}}), name);
  }
  EXPECT_EQ(FileContents(rootfs_ + "/keep"), "keep");
  EXPECT_EQ(Names(rootfs_), (std::vector<std::string>{"keep", "out", "up"}));
}

TEST_F(LayerApplyTest, GarbageIsInvalid) {
  const std::string blob = blobs_.path() + "/garbage";
  ASSERT_TRUE(WriteFile(blob, std::string(4096, '\x7f') + "not a layer").ok());
  auto applied = ApplyLayer(blob, rootfs_);
  ASSERT_FALSE(applied.ok());
  EXPECT_EQ(applied.error().code, ErrorCode::kInvalid);
  EXPECT_EQ(applied.error().detail_code, "invalid_image");
  EXPECT_TRUE(Names(rootfs_).empty());
  ExpectOutsideUntouched();
}

TEST_F(LayerApplyTest, RunningOutOfSpaceIsDiskFull) {
  if (::mount("tmpfs", rootfs_.c_str(), "tmpfs", 0, "size=1m") != 0) GTEST_SKIP() << "cannot mount a tmpfs";
  ScopeGuard unmount([this] { ::umount2(rootfs_.c_str(), MNT_DETACH); });
  auto applied = Apply({{"big", AE_IFREG, std::string(4 << 20, 'x')}}, Compression::kGzip);
  ASSERT_FALSE(applied.ok());
  EXPECT_EQ(applied.error().code, ErrorCode::kDiskFull) << applied.error().message;
}

}  // namespace
}  // namespace bulkhead::storage
