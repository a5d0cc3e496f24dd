// UnpackTar against real tar streams and a real directory: what a hostile sandbox could
// put in an archive must not reach outside the destination.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/tar_unpack.h"

namespace bulkhead::cli {
namespace {

namespace fs = std::filesystem;

struct TarEntry {
  std::string name;
  mode_t type = AE_IFREG;
  int perm = 0644;
  std::string data;
  std::string symlink;
  std::string hardlink;
  la_int64_t owner = 0;  // uid and gid, "root" by name when 0
};

la_ssize_t AppendToString(archive*, void* client_data, const void* buffer, size_t length) {
  static_cast<std::string*>(client_data)->append(static_cast<const char*>(buffer), length);
  return static_cast<la_ssize_t>(length);
}

std::string MakeTar(const std::vector<TarEntry>& entries) {
  std::string tar;
  archive* writer = archive_write_new();
  archive_write_set_format_pax_restricted(writer);
  archive_write_open(writer, &tar, nullptr, AppendToString, nullptr);
  for (const TarEntry& spec : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, spec.name.c_str());
    archive_entry_set_filetype(entry, spec.type);
    archive_entry_set_perm(entry, spec.perm);
    archive_entry_set_mtime(entry, 1700000000, 0);
    archive_entry_set_uid(entry, spec.owner);
    archive_entry_set_gid(entry, spec.owner);
    if (spec.owner == 0) archive_entry_set_uname(entry, "root");
    if (spec.owner == 0) archive_entry_set_gname(entry, "root");
    if (!spec.symlink.empty()) archive_entry_set_symlink(entry, spec.symlink.c_str());
    if (!spec.hardlink.empty()) archive_entry_set_hardlink(entry, spec.hardlink.c_str());
    if (spec.type == AE_IFCHR) archive_entry_set_rdev(entry, makedev(1, 3));
    archive_entry_set_size(entry, static_cast<la_int64_t>(spec.data.size()));
    archive_write_header(writer, entry);
    if (!spec.data.empty()) archive_write_data(writer, spec.data.data(), spec.data.size());
    archive_entry_free(entry);
  }
  archive_write_close(writer);
  archive_write_free(writer);
  return tar;
}

// Hands `tar` out in small pieces, like a response arriving over the network.
TarChunkSource PiecesOf(const std::string& tar, size_t piece = 700) {
  auto offset = std::make_shared<size_t>(0);
  return [&tar, offset, piece]() -> Result<std::string_view> {
    std::string_view rest = std::string_view(tar).substr(*offset);
    std::string_view next = rest.substr(0, piece);
    *offset += next.size();
    return next;
  };
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class CliTarUnpack : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/bulkhead-unpack-test-XXXXXX";
    root_ = mkdtemp(dir_template);
    destination_ = root_ / "dest";
    outside_ = root_ / "outside";
    fs::create_directory(destination_);
    fs::create_directory(outside_);
    std::ofstream(outside_ / "target") << "precious";
  }
  void TearDown() override { fs::remove_all(root_); }

  Status Unpack(const std::string& tar) {
    return UnpackTar(PiecesOf(tar), destination_.string(),
                     [this](const std::string& warning) { warnings_.push_back(warning); });
  }

  fs::path root_, destination_, outside_;
  std::vector<std::string> warnings_;
};

TEST_F(CliTarUnpack, UnpacksATreeWithModesAndSymlinks) {
  std::string big(200000, 'x');
  std::string tar = MakeTar({{"./", AE_IFDIR, 0755},
                             {"./src", AE_IFDIR, 0700},
                             {"./src/main.py", AE_IFREG, 0755, "print(42)\n"},
                             {"./big.bin", AE_IFREG, 0600, big},
                             {"./link", AE_IFLNK, 0777, "", "src/main.py"},
                             {"./same", AE_IFREG, 0755, "", "", "./src/main.py"}});
  Status status = Unpack(tar);
  ASSERT_TRUE(status.ok()) << status.error().message;
  EXPECT_EQ(ReadFile(destination_ / "src/main.py"), "print(42)\n");
  EXPECT_EQ(ReadFile(destination_ / "big.bin"), big);
  EXPECT_EQ(fs::read_symlink(destination_ / "link"), "src/main.py");
  EXPECT_EQ(ReadFile(destination_ / "same"), "print(42)\n");
  struct stat info{};
  ASSERT_EQ(stat((destination_ / "src").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  ASSERT_EQ(stat((destination_ / "src/main.py").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0755u);
  EXPECT_EQ(info.st_mtime, 1700000000);
}

TEST_F(CliTarUnpack, RefusesDotDotNames) {
  Status status = Unpack(MakeTar({{"../outside/evil", AE_IFREG, 0644, "x"}}));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().detail_code, "unsafe_entry");
  EXPECT_FALSE(fs::exists(outside_ / "evil"));
  status = Unpack(MakeTar({{"a/../../outside/evil2", AE_IFREG, 0644, "x"}}));
  ASSERT_FALSE(status.ok());
  EXPECT_FALSE(fs::exists(outside_ / "evil2"));
}

TEST_F(CliTarUnpack, RefusesAbsoluteNames) {
  std::string absolute = (outside_ / "abs").string();
  Status status = Unpack(MakeTar({{absolute, AE_IFREG, 0644, "x"}}));
  ASSERT_FALSE(status.ok());
  EXPECT_FALSE(fs::exists(outside_ / "abs"));
}

TEST_F(CliTarUnpack, ReplacesAnExistingSymlinkInsteadOfFollowingIt) {
  fs::create_symlink(outside_ / "target", destination_ / "a.txt");
  Status status = Unpack(MakeTar({{"a.txt", AE_IFREG, 0644, "new"}}));
  ASSERT_TRUE(status.ok()) << status.error().message;
  EXPECT_EQ(ReadFile(outside_ / "target"), "precious");
  EXPECT_FALSE(fs::is_symlink(destination_ / "a.txt"));
  EXPECT_EQ(ReadFile(destination_ / "a.txt"), "new");
}

TEST_F(CliTarUnpack, RefusesHardLinksOutOfTheTree) {
  Status status = Unpack(MakeTar({{"grab", AE_IFREG, 0644, "", "", "../outside/target"}}));
  ASSERT_FALSE(status.ok());
  EXPECT_FALSE(fs::exists(destination_ / "grab"));
  std::string absolute = (outside_ / "target").string();
  status = Unpack(MakeTar({{"grab2", AE_IFREG, 0644, "", "", absolute}}));
  ASSERT_FALSE(status.ok());
  EXPECT_FALSE(fs::exists(destination_ / "grab2"));
}

mode_t ModeOf(const fs::path& path) {
  struct stat info{};
  EXPECT_EQ(lstat(path.c_str(), &info), 0) << path;
  return info.st_mode & 07777;
}

TEST_F(CliTarUnpack, DropsSetuidSetgidAndStickyOnFiles) {
  Status status = Unpack(MakeTar({{"tool", AE_IFREG, 04755, "#!/bin/sh\n"},
                                  {"group-tool", AE_IFREG, 02755, "#!/bin/sh\n"},
                                  {"sticky-file", AE_IFREG, 01644, "x"},
                                  {"shared", AE_IFDIR, 02775},
                                  {"tmp", AE_IFDIR, 01777},
                                  {"both", AE_IFDIR, 07755}}));
  ASSERT_TRUE(status.ok()) << status.error().message;
  EXPECT_EQ(ModeOf(destination_ / "tool"), 0755u);
  EXPECT_EQ(ModeOf(destination_ / "group-tool"), 0755u);
  EXPECT_EQ(ModeOf(destination_ / "sticky-file"), 0644u);
  EXPECT_EQ(ModeOf(destination_ / "shared"), 0775u);
  EXPECT_EQ(ModeOf(destination_ / "tmp"), 01777u);  // sticky stays where it means something
  EXPECT_EQ(ModeOf(destination_ / "both"), 01755u);
}

TEST_F(CliTarUnpack, FilesBelongToWhoeverUnpacksThemNeverToTheArchivesOwners) {
  Status status = Unpack(MakeTar({{"root-tool", AE_IFREG, 04755, "x", "", "", 0},
                                  {"theirs", AE_IFREG, 0644, "x", "", "", 12345},
                                  {"their-dir", AE_IFDIR, 0755, "", "", "", 12345},
                                  {"their-link", AE_IFLNK, 0777, "", "theirs", "", 12345}}));
  ASSERT_TRUE(status.ok()) << status.error().message;
  for (const char* name : {"root-tool", "theirs", "their-dir", "their-link"}) {
    struct stat info{};
    ASSERT_EQ(lstat((destination_ / name).c_str(), &info), 0) << name;
    EXPECT_EQ(info.st_uid, geteuid()) << name;
    EXPECT_EQ(info.st_gid, getegid()) << name;
  }
}

TEST_F(CliTarUnpack, RefusesSymlinksThatLeadOut) {
  Status status = Unpack(MakeTar({{"sub", AE_IFDIR, 0755},
                                  {"absolute", AE_IFLNK, 0777, "", (outside_ / "target").string()},
                                  {"up", AE_IFLNK, 0777, "", ".."},
                                  {"sub/up2", AE_IFLNK, 0777, "", "../../outside/target"},
                                  {"sub/in", AE_IFLNK, 0777, "", "../file"},
                                  {"here", AE_IFLNK, 0777, "", "."},
                                  // sub/loop names ".." once: fine; through it, ".." climbs out.
                                  {"sub/loop", AE_IFLNK, 0777, "", ".."},
                                  {"climb", AE_IFLNK, 0777, "", "sub/loop/../.."},
                                  {"file", AE_IFREG, 0644, "in"}}));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().detail_code, "unsafe_entry");
  for (const char* name : {"absolute", "up", "sub/up2", "climb"}) {
    EXPECT_FALSE(fs::exists(fs::symlink_status(destination_ / name))) << name;
  }
  EXPECT_EQ(fs::read_symlink(destination_ / "sub/in"), "../file");
  EXPECT_EQ(fs::read_symlink(destination_ / "here"), ".");
  EXPECT_EQ(fs::read_symlink(destination_ / "sub/loop"), "..");
  EXPECT_EQ(ReadFile(destination_ / "sub/in"), "in");
  EXPECT_EQ(warnings_.size(), 4u);
}

// The classic attack: a symlink out, then an entry under it.
TEST_F(CliTarUnpack, NeverWritesThroughASymlinkItWasSent) {
  Status status = Unpack(MakeTar({{"a", AE_IFLNK, 0777, "", outside_.string()},
                                  {"a/target", AE_IFREG, 0644, "overwritten"},
                                  {"b", AE_IFLNK, 0777, "", "../outside"},
                                  {"b/target", AE_IFREG, 0644, "overwritten"},
                                  {"inside", AE_IFDIR, 0755},
                                  {"c", AE_IFLNK, 0777, "", "inside"},
                                  {"c/file", AE_IFREG, 0644, "through a link"}}));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(ReadFile(outside_ / "target"), "precious");
  EXPECT_FALSE(fs::is_symlink(destination_ / "a"));
  EXPECT_FALSE(fs::is_symlink(destination_ / "b"));
  EXPECT_FALSE(fs::exists(destination_ / "inside/file"));  // not even a link that stays inside is followed
}

TEST_F(CliTarUnpack, NeverFollowsASymlinkAlreadyInTheDestination) {
  fs::create_symlink(outside_, destination_ / "a");
  fs::create_symlink(outside_, destination_ / "b");
  fs::permissions(outside_, fs::perms(0755));
  Status status = Unpack(MakeTar({{"a", AE_IFDIR, 0777},  // replaces the link with a directory
                                  {"a/target", AE_IFREG, 0644, "overwritten"},
                                  {"b/planted", AE_IFREG, 0644, "x"}}));
  ASSERT_FALSE(status.ok());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("'b/planted'"), std::string::npos) << warnings_[0];
  EXPECT_EQ(ReadFile(outside_ / "target"), "precious");
  EXPECT_FALSE(fs::exists(outside_ / "planted"));
  EXPECT_EQ(ModeOf(outside_), 0755u);
  EXPECT_FALSE(fs::is_symlink(destination_ / "a"));
  EXPECT_EQ(ReadFile(destination_ / "a/target"), "overwritten");
}

TEST_F(CliTarUnpack, HardLinksOnlyToFilesItUnpacked) {
  fs::create_symlink(outside_ / "target", destination_ / "pre");
  std::ofstream(destination_ / "mine") << "the user's own file";
  Status status = Unpack(MakeTar({{"sub/deep", AE_IFDIR, 0755},
                                  {"sub/deep/link", AE_IFLNK, 0777, "", "../../file"},
                                  {"file", AE_IFREG, 0644, "in the tree"},
                                  {"grab", AE_IFREG, 0644, "", "", "pre"},
                                  {"grab-mine", AE_IFREG, 0644, "", "", "mine"},
                                  {"relinked", AE_IFREG, 0644, "", "", "sub/deep/link"},
                                  {"early", AE_IFREG, 0644, "", "", "later"},
                                  {"later", AE_IFREG, 0644, "x"},
                                  {"same", AE_IFREG, 0644, "", "", "./file"}}));
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("4 unsafe tar entries"), std::string::npos) << status.error().message;
  for (const char* name : {"grab", "grab-mine", "relinked", "early"}) {
    EXPECT_FALSE(fs::exists(fs::symlink_status(destination_ / name))) << name;
  }
  EXPECT_EQ(ReadFile(destination_ / "same"), "in the tree");
  EXPECT_EQ(ReadFile(outside_ / "target"), "precious");
}

TEST_F(CliTarUnpack, RefusesDevicesAndFifosButUnpacksTheRest) {
  Status status = Unpack(MakeTar({{"null", AE_IFCHR, 0666},
                                  {"disk", AE_IFBLK, 0660},
                                  {"pipe", AE_IFIFO, 0644},
                                  {"after", AE_IFREG, 0644, "ok"}}));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().detail_code, "unsafe_entry");
  EXPECT_NE(status.error().message.find("3 unsafe tar entries"), std::string::npos) << status.error().message;
  for (const char* name : {"null", "disk", "pipe"}) EXPECT_FALSE(fs::exists(fs::symlink_status(destination_ / name)));
  EXPECT_EQ(ReadFile(destination_ / "after"), "ok");
  ASSERT_EQ(warnings_.size(), 3u);
  EXPECT_NE(warnings_[0].find("'null': a device node"), std::string::npos) << warnings_[0];
  EXPECT_NE(warnings_[2].find("'pipe': a fifo"), std::string::npos) << warnings_[2];
}

TEST_F(CliTarUnpack, ASourceErrorIsTheErrorReturned) {
  std::string tar = MakeTar({{"big", AE_IFREG, 0644, std::string(100000, 'y')}});
  size_t calls = 0;
  Status status = UnpackTar(
      [&]() -> Result<std::string_view> {
        if (++calls == 3) return MakeError(ErrorCode::kUnavailable, "connection dropped", "connection_lost");
        return std::string_view(tar).substr((calls - 1) * 1024, 1024);
      },
      destination_.string(), [](const std::string&) {});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().detail_code, "connection_lost");
}

TEST_F(CliTarUnpack, AnEmptyStreamUnpacksNothing) {
  Status status = UnpackTar([]() -> Result<std::string_view> { return std::string_view(); }, destination_.string(),
                            [](const std::string&) {});
  ASSERT_TRUE(status.ok()) << status.error().message;
  EXPECT_TRUE(fs::is_empty(destination_));
}

TEST_F(CliTarUnpack, LeavesTheCurrentDirectoryAsItWas) {
  fs::path before = fs::current_path();
  ASSERT_FALSE(Unpack(MakeTar({{"../x", AE_IFREG, 0644, "x"}})).ok());
  EXPECT_EQ(fs::current_path(), before);
  ASSERT_TRUE(Unpack(MakeTar({{"y", AE_IFREG, 0644, "y"}})).ok());
  EXPECT_EQ(fs::current_path(), before);
}

TEST(CliTarNames, ContainedNames) {
  using Parts = std::vector<std::string_view>;
  EXPECT_EQ(ContainedTarName("a/b"), (Parts{"a", "b"}));
  EXPECT_EQ(ContainedTarName("./a//b/"), (Parts{"a", "b"}));
  EXPECT_EQ(ContainedTarName("a..b/c"), (Parts{"a..b", "c"}));
  EXPECT_EQ(ContainedTarName("./"), Parts{});
  EXPECT_FALSE(ContainedTarName(""));
  EXPECT_FALSE(ContainedTarName("/a"));
  EXPECT_FALSE(ContainedTarName(".."));
  EXPECT_FALSE(ContainedTarName("a/../../b"));
  EXPECT_FALSE(ContainedTarName("a/.."));
}

TEST(CliTarNames, SymlinksThatStayInside) {
  const std::vector<std::string_view> top{"link"}, deep{"a", "b", "link"};
  EXPECT_TRUE(SymlinkStaysInside(top, "file"));
  EXPECT_TRUE(SymlinkStaysInside(top, "./dir/file"));
  EXPECT_TRUE(SymlinkStaysInside(top, "."));
  EXPECT_TRUE(SymlinkStaysInside(deep, "../../x"));
  EXPECT_TRUE(SymlinkStaysInside(deep, ".././../x/y"));
  EXPECT_FALSE(SymlinkStaysInside(top, ".."));
  EXPECT_FALSE(SymlinkStaysInside(top, ""));
  EXPECT_FALSE(SymlinkStaysInside(top, "/etc"));
  EXPECT_FALSE(SymlinkStaysInside(deep, "../../../x"));
  EXPECT_FALSE(SymlinkStaysInside(deep, "x/../y"));  // x could be a link itself
  EXPECT_FALSE(SymlinkStaysInside(deep, "../x/.."));
}

TEST(CliTarNames, HostPermissions) {
  EXPECT_EQ(HostPermissions(06755, false), 0755u);
  EXPECT_EQ(HostPermissions(01644, false), 0644u);
  EXPECT_EQ(HostPermissions(07777, true), 01777u);
  EXPECT_EQ(HostPermissions(0600, false), 0600u);
}

}  // namespace
}  // namespace bulkhead::cli
