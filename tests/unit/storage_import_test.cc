// Importing rootfs tarballs: good ones unpack faithfully, hostile ones land nothing outside.
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <clocale>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/id_ranges.h"
#include "storage/fs_util.h"
#include "storage/storage.h"
#include "support/temp_state_dir.h"

namespace bulkhead::storage {
namespace {

struct TarEntry {
  std::string name;
  mode_t type = AE_IFREG;
  std::string content;  // file data, or the symlink / hard link target
  mode_t mode = 0644;
  int64_t uid = 0;
  int64_t gid = 0;
  int64_t mtime = 1700000000;
};

// Writes a pax tar (optionally gzip'd) with libarchive, names exactly as given; non-ASCII
// names go into UTF-8 pax records, as Go's and Docker's tar writers do.
void WriteTar(const std::string& path, const std::vector<TarEntry>& entries, bool gzip = false) {
  ASSERT_NE(std::setlocale(LC_CTYPE, "C.UTF-8"), nullptr);
  struct RestoreLocale {
    ~RestoreLocale() { std::setlocale(LC_CTYPE, "C"); }  // the daemon's (and reader's) default
  } restore;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (gzip) archive_write_add_filter_gzip(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK) << archive_error_string(a);
  for (const auto& e : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.name.c_str());
    archive_entry_set_mode(entry, e.type | e.mode);
    archive_entry_set_uid(entry, e.uid);
    archive_entry_set_gid(entry, e.gid);
    archive_entry_set_mtime(entry, e.mtime, 0);
    if (e.type == AE_IFLNK) archive_entry_set_symlink(entry, e.content.c_str());
    if (e.type == AE_IFCHR) archive_entry_set_rdev(entry, ::makedev(1, 3));
    bool hardlink = e.type == 0;
    if (hardlink) {
      archive_entry_set_mode(entry, AE_IFREG | e.mode);
      archive_entry_set_hardlink(entry, e.content.c_str());
    }
    bool has_data = e.type == AE_IFREG && !hardlink;
    archive_entry_set_size(entry, has_data ? static_cast<int64_t>(e.content.size()) : 0);
    ASSERT_EQ(archive_write_header(a, entry), ARCHIVE_OK) << archive_error_string(a);
    if (has_data && !e.content.empty()) archive_write_data(a, e.content.data(), e.content.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

class StorageImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(canary_dir_ + "/canary") << "untouched";
    auto opened = Storage::Open(state_, 4);
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    storage_ = std::move(*opened);
  }

  void ExpectCanaryUntouched() {
    EXPECT_EQ(Slurp(canary_dir_ + "/canary"), "untouched");
    EXPECT_EQ(Names(canary_dir_), std::vector<std::string>{"canary"});
    // Nothing half-imported is left behind either.
    for (const auto& name : Names(state_ + "/images")) EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
  }

  testing::TempStateDir dir_{"bulkhead-storage-test"};  // first: it outlives what is opened on it
  const std::string state_ = dir_.path();
  // A host directory with a canary, beside the state dir: the target of every escape.
  testing::TempStateDir canary_{"bulkhead-canary"};
  const std::string canary_dir_ = canary_.path();
  std::unique_ptr<Storage> storage_;
};

TEST_F(StorageImportTest, TarballUnpacksWithOwnersModesAndLinks) {
  std::string tar = state_ + "/good.tar";
  WriteTar(tar, {
                    {"./etc/", AE_IFDIR, "", 0755},
                    {"./etc/os-release", AE_IFREG, "ID=test\n", 0644},
                    {"./etc/na\xc3\xafve-\xc3\xbcnicode", AE_IFREG, "utf8", 0644},
                    {"./bin/", AE_IFDIR, "", 0755},
                    {"./bin/tool", AE_IFREG, "#!/bin/sh\necho hi\n", 04755, 0, 0},
                    {"./bin/alias", AE_IFLNK, "tool", 0777},
                    {"./bin/hard", 0, "./bin/tool", 04755},
                    {"./home/", AE_IFDIR, "", 0755},
                    {"./home/dev/", AE_IFDIR, "", 0700, 1234, 5678},
                    {"./home/dev/notes", AE_IFREG, "mine", 0600, 1234, 5678},
                    {"./dev/", AE_IFDIR, "", 0755},
                    {"./dev/null", AE_IFCHR, "", 0666},
                    {"./fifo", AE_IFIFO, "", 0644},
                    {"./tmp", AE_IFLNK, "/var/tmp", 0777},  // a mount point that is a symlink
                });
  auto imported = storage_->ImportImage("alpine-ish", tar, "");
  ASSERT_TRUE(imported.ok()) << imported.error().message;
  EXPECT_EQ(imported->name, "alpine-ish");
  EXPECT_EQ(imported->source, "tarball");
  EXPECT_FALSE(imported->created_at.empty());
  EXPECT_GT(imported->size_bytes, 0);

  auto rootfs = storage_->ImageRootfs("alpine-ish");
  ASSERT_TRUE(rootfs.ok());
  EXPECT_EQ(*rootfs, state_ + "/images/alpine-ish/rootfs");
  EXPECT_EQ(Slurp(*rootfs + "/etc/os-release"), "ID=test\n");
  EXPECT_EQ(Slurp(*rootfs + "/etc/na\xc3\xafve-\xc3\xbcnicode"), "utf8");
  struct stat st;
  ASSERT_EQ(::lstat((*rootfs + "/bin/tool").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 04755u);
  // The archive's root owns it, stored as the stored range's root: never host root's setuid file.
  EXPECT_EQ(st.st_uid, kStoredIdBase);
  EXPECT_EQ(st.st_mtime, 1700000000);
  struct stat hard;
  ASSERT_EQ(::lstat((*rootfs + "/bin/hard").c_str(), &hard), 0);
  EXPECT_EQ(hard.st_ino, st.st_ino);
  char target[PATH_MAX] = {};
  ASSERT_GT(::readlink((*rootfs + "/bin/alias").c_str(), target, sizeof target - 1), 0);
  EXPECT_STREQ(target, "tool");
  ASSERT_EQ(::lstat((*rootfs + "/home/dev/notes").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kStoredIdBase + 1234);
  EXPECT_EQ(st.st_gid, kStoredIdBase + 5678);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::lstat((*rootfs + "/home/dev").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, kStoredIdBase + 1234);

  // Device nodes and fifos are skipped; mount points exist as real directories.
  EXPECT_NE(::lstat((*rootfs + "/dev/null").c_str(), &st), 0);
  EXPECT_NE(::lstat((*rootfs + "/fifo").c_str(), &st), 0);
  for (const char* dir : {"proc", "sys", "dev", "tmp", "run", "workspace"}) {
    ASSERT_EQ(::lstat((*rootfs + "/" + dir).c_str(), &st), 0) << dir;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << dir;
  }
  ASSERT_EQ(::lstat((*rootfs + "/tmp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);

  std::string meta = Slurp(state_ + "/images/alpine-ish/meta.json");
  EXPECT_NE(meta.find("\"source\": \"tarball\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"name\": \"alpine-ish\""), std::string::npos) << meta;
  auto images = storage_->ListImages();
  ASSERT_EQ(images.size(), 2u);
  EXPECT_EQ(images[0].name, "host");
  EXPECT_EQ(images[1].name, "alpine-ish");
  EXPECT_EQ(images[1].source, "tarball");
  EXPECT_EQ(images[1].size_bytes, imported->size_bytes);

  auto again = storage_->ImportImage("alpine-ish", tar, "");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, ErrorCode::kConflict);
  auto reserved = storage_->ImportImage("host", tar, "");
  ASSERT_FALSE(reserved.ok());
  EXPECT_EQ(reserved.error().code, ErrorCode::kConflict);
  auto bad_name = storage_->ImportImage("../x", tar, "");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_EQ(bad_name.error().code, ErrorCode::kInvalid);

  ASSERT_TRUE(storage_->DeleteImage("alpine-ish").ok());
  EXPECT_FALSE(storage_->ImageExists("alpine-ish"));
  EXPECT_EQ(storage_->ImageRootfs("alpine-ish").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(storage_->DeleteImage("alpine-ish").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(storage_->ListImages().size(), 1u);
  ExpectCanaryUntouched();
}

TEST_F(StorageImportTest, GzippedTarballImports) {
  std::string tar = state_ + "/good.tar.gz";
  WriteTar(tar, {{"etc/", AE_IFDIR, "", 0755}, {"etc/hostname", AE_IFREG, "gz\n", 0644}}, /*gzip=*/true);
  auto imported = storage_->ImportImage("gz", tar, "");
  ASSERT_TRUE(imported.ok()) << imported.error().message;
  auto rootfs = storage_->ImageRootfs("gz");
  ASSERT_TRUE(rootfs.ok());
  EXPECT_EQ(Slurp(*rootfs + "/etc/hostname"), "gz\n");
}

// A build's result: stored by its build key, named by the build, found by that name; a second
// build of the same key is the same image; a build FROM host keeps the host's directories.
TEST_F(StorageImportTest, BuiltImagesAreStoredByBuildKeyAndFoundByTheirName) {
  std::string tar = state_ + "/built.tar";
  WriteTar(tar, {{"app/", AE_IFDIR, "", 0755}, {"app/main.py", AE_IFREG, "print(1)\n", 0644, 1000, 1000}});
  BuiltImage built;
  built.build_key = "sha256:" + std::string(64, 'b');
  built.config.cmd = {"python3", "/app/main.py"};
  auto stored = storage_->InstallBuiltImage(built, tar, "");
  ASSERT_TRUE(stored.ok()) << stored.error().message;
  EXPECT_EQ(stored->name, std::string(64, 'b'));
  EXPECT_EQ(stored->source, "build");
  ASSERT_TRUE(storage_->NameImage(stored->name, "my-app", "").ok());
  EXPECT_EQ(*storage_->ResolveImage("my-app", "", ""), stored->name);
  auto info = storage_->GetImage(stored->name);
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(info->config.has_value());
  EXPECT_EQ(info->config->cmd, built.config.cmd);
  EXPECT_EQ(info->references, std::vector<std::string>{"my-app"});
  EXPECT_FALSE(storage_->ImageUsesHostDirs(stored->name));
  struct stat st;
  ASSERT_EQ(::lstat((*storage_->ImageRootfs(stored->name) + "/app/main.py").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kStoredIdBase + 1000);  // the sandbox's ids, moved to the stored range

  auto again = storage_->InstallBuiltImage(built, state_ + "/no-such.tar", "");  // cached: not read
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->name, stored->name);

  BuiltImage on_host;
  on_host.build_key = "sha256:" + std::string(64, 'c');
  on_host.host_base = true;
  auto host_based = storage_->InstallBuiltImage(on_host, tar, "");
  ASSERT_TRUE(host_based.ok());
  EXPECT_TRUE(storage_->ImageUsesHostDirs(host_based->name));
  EXPECT_TRUE(storage_->ImageUsesHostDirs("host"));
  // The name moves to the newer build; the older keeps none.
  ASSERT_TRUE(storage_->NameImage(host_based->name, "my-app", "").ok());
  EXPECT_EQ(*storage_->ResolveImage("my-app", "", ""), host_based->name);
  EXPECT_TRUE(storage_->GetImage(stored->name)->references.empty());
  EXPECT_EQ(storage_->ResolveImage("other-app", "", "").error().code, ErrorCode::kNotFound);
}

// Images a tenant stores are its own: its names are its namespace's, other tenants (and the host)
// neither see nor resolve them; the host's are every tenant's; an image held by several goes
// only when the last lets go.
TEST_F(StorageImportTest, TenantsHoldTheirImagesInNamespacesOfTheirOwn) {
  std::string tar = state_ + "/t.tar";
  WriteTar(tar, {{"etc/", AE_IFDIR, "", 0755}, {"etc/hostname", AE_IFREG, "a\n", 0644}});
  auto host_app = storage_->ImportImage("app", tar, "");
  ASSERT_TRUE(host_app.ok()) << host_app.error().message;
  auto a_app = storage_->ImportImage("app", tar, "team-a");  // the same name, another namespace
  ASSERT_TRUE(a_app.ok()) << a_app.error().message;
  EXPECT_NE(a_app->name, "app");
  EXPECT_EQ(storage_->ImportImage("app", tar, "team-a").error().code, ErrorCode::kConflict);
  // Its own name first; the host's for a tenant that has none; never another tenant's.
  EXPECT_EQ(*storage_->ResolveImage("app", "", "team-a"), a_app->name);
  EXPECT_EQ(*storage_->ResolveImage("app", "", "team-b"), "app");
  EXPECT_EQ(*storage_->ResolveImage("app", "", ""), "app");
  EXPECT_FALSE(storage_->ImageVisible(a_app->name, "team-b"));
  EXPECT_FALSE(storage_->ImageVisible(a_app->name, ""));
  EXPECT_TRUE(storage_->ImageVisible(a_app->name, "team-a"));
  EXPECT_TRUE(storage_->ImageVisible("app", "team-b"));
  EXPECT_EQ(storage_->ResolveImage(a_app->name, "", "team-b").error().code, ErrorCode::kNotFound);

  // A build both a tenant and the host hold: each names it apart; the host letting go leaves it
  // the tenant's alone, and unseen by others.
  BuiltImage built;
  built.build_key = "sha256:" + std::string(64, 'd');
  auto stored = storage_->InstallBuiltImage(built, tar, "team-a");
  ASSERT_TRUE(stored.ok()) << stored.error().message;
  EXPECT_FALSE(stored->shared);
  ASSERT_TRUE(storage_->NameImage(stored->name, "web", "team-a").ok());
  ASSERT_TRUE(storage_->NameImage(stored->name, "web-host", "").ok());
  auto info = storage_->GetImage(stored->name);
  EXPECT_TRUE(info->shared);
  EXPECT_EQ(info->references, std::vector<std::string>{"web-host"});
  EXPECT_EQ(info->tenants.at("team-a"), std::vector<std::string>{"web"});
  ASSERT_TRUE(storage_->NameImage(stored->name, "web-host", "team-a").ok());  // a name both give it: listed once
  info = storage_->GetImage(stored->name);
  EXPECT_EQ(ImageSeenBy(*info, "team-a").references, (std::vector<std::string>{"web", "web-host"}));
  EXPECT_TRUE(ImageSeenBy(*info, "team-a").tenants.empty());
  const ImageInfo seen = ImageSeenBy(*info, "team-b");
  EXPECT_TRUE(seen.tenants.empty());
  EXPECT_EQ(seen.references, std::vector<std::string>{"web-host"});
  EXPECT_EQ(storage_->ResolveImage("web", "", "team-b").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(*storage_->ReleaseImage(stored->name, ""), true);
  EXPECT_FALSE(storage_->ImageVisible(stored->name, "team-b"));
  EXPECT_EQ(storage_->ResolveImage("web-host", "", "").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(*storage_->ResolveImage("web", "", "team-a"), stored->name);
  EXPECT_EQ(*storage_->ReleaseImage(stored->name, "team-a"), false);  // nobody holds it now
  EXPECT_EQ(storage_->BlobsInUse("team-b").size(), 0u);
}

TEST_F(StorageImportTest, DotDotEntryIsRejectedAndLandsNowhere) {
  std::string tar = state_ + "/dotdot.tar";
  std::string up = "../../../../../../../.." + canary_dir_;  // resolves to the canary dir from anywhere
  WriteTar(tar, {{"etc/", AE_IFDIR, "", 0755},
                 {up + "/canary", AE_IFREG, "pwned", 0644},
                 {up + "/dropped", AE_IFREG, "pwned", 0644}});
  auto imported = storage_->ImportImage("dotdot", tar, "");
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.error().code, ErrorCode::kInvalid);
  EXPECT_FALSE(storage_->ImageExists("dotdot"));
  ExpectCanaryUntouched();
}

TEST_F(StorageImportTest, AbsoluteEntryIsRejectedAndLandsNowhere) {
  std::string tar = state_ + "/absolute.tar";
  WriteTar(tar, {{canary_dir_ + "/canary", AE_IFREG, "pwned", 0644},
                 {canary_dir_ + "/dropped", AE_IFREG, "pwned", 0644}});
  auto imported = storage_->ImportImage("absolute", tar, "");
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.error().code, ErrorCode::kInvalid);
  ExpectCanaryUntouched();
}

TEST_F(StorageImportTest, WritingThroughAPlantedSymlinkIsRejected) {
  for (const std::string& link_target : {canary_dir_, "../../../../../../../.." + canary_dir_}) {
    std::string tar = state_ + "/symlink.tar";
    WriteTar(tar, {{"link", AE_IFLNK, link_target, 0777},
                   {"link/canary", AE_IFREG, "pwned", 0644},
                   {"link/dropped", AE_IFREG, "pwned", 0644},
                   // And a symlink to the canary file itself, then a file entry over it.
                   {"file-link", AE_IFLNK, canary_dir_ + "/canary", 0777},
                   {"file-link", AE_IFREG, "pwned", 0644}});
    auto imported = storage_->ImportImage("symlink", tar, "");
    ASSERT_FALSE(imported.ok()) << link_target;
    EXPECT_EQ(imported.error().code, ErrorCode::kInvalid);
    ExpectCanaryUntouched();
  }
}

TEST_F(StorageImportTest, HardLinkToAHostFileIsRejected) {
  std::string tar = state_ + "/hardlink.tar";
  WriteTar(tar, {{"grab", 0, canary_dir_ + "/canary", 0644}});
  auto imported = storage_->ImportImage("hardlink", tar, "");
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.error().code, ErrorCode::kInvalid);
  ExpectCanaryUntouched();
}

TEST_F(StorageImportTest, GarbageIsInvalidWithLibarchivesMessage) {
  std::string bad = state_ + "/garbage.tar";
  std::ofstream(bad) << std::string(4096, '\x7f') << "not an archive";
  auto imported = storage_->ImportImage("garbage", bad, "");
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.error().code, ErrorCode::kInvalid);
  EXPECT_FALSE(imported.error().message.empty());
  EXPECT_FALSE(storage_->ImageExists("garbage"));
  ExpectCanaryUntouched();
}

}  // namespace
}  // namespace bulkhead::storage
