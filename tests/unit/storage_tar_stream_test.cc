#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "storage/tar_stream.h"

namespace bulkhead::storage {
namespace {

namespace fs = std::filesystem;

struct TarEntry {
  mode_t type = 0;
  mode_t permissions = 0;
  int64_t uid = -1;
  std::string uname;
  std::string symlink;
  std::string hardlink;
  std::string data;
};

// Reads a tar held in memory back with libarchive.
std::map<std::string, TarEntry> ReadTar(const std::string& tar) {
  std::map<std::string, TarEntry> entries;
  archive* reader = archive_read_new();
  archive_read_support_format_all(reader);
  EXPECT_EQ(archive_read_open_memory(reader, tar.data(), tar.size()), ARCHIVE_OK);
  archive_entry* entry = nullptr;
  while (archive_read_next_header(reader, &entry) == ARCHIVE_OK) {
    TarEntry& out = entries[archive_entry_pathname(entry)];
    out.type = archive_entry_filetype(entry);
    out.permissions = archive_entry_perm(entry);
    out.uid = archive_entry_uid(entry);
    if (const char* uname = archive_entry_uname(entry)) out.uname = uname;
    if (const char* target = archive_entry_symlink(entry)) out.symlink = target;
    if (const char* target = archive_entry_hardlink(entry)) out.hardlink = target;
    char buffer[65536];
    la_ssize_t n;
    while ((n = archive_read_data(reader, buffer, sizeof(buffer))) > 0) out.data.append(buffer, static_cast<size_t>(n));
  }
  archive_read_free(reader);
  return entries;
}

class TarStream : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/bulkhead-cli-tar-XXXXXX";
    root_ = mkdtemp(dir_template);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Stream(const std::string& root, size_t* largest_chunk = nullptr,
                     std::vector<std::string>* warnings = nullptr) {
    std::string tar;
    Status status = StreamDirectoryAsTar(
        root,
        [&](std::string_view chunk) -> Status {
          if (largest_chunk) *largest_chunk = std::max(*largest_chunk, chunk.size());
          tar.append(chunk);
          return {};
        },
        [&](const std::string& warning) {
          if (warnings) warnings->push_back(warning);
        });
    EXPECT_TRUE(status.ok()) << (status.ok() ? "" : status.error().message);
    return tar;
  }

  std::string root_;
};

TEST_F(TarStream, KeepsModesSymlinksHardLinksAndNumericOwners) {
  fs::create_directories(root_ + "/etc/sub");
  std::ofstream(root_ + "/etc/passwd") << "root:x:0:0::/root:/bin/sh\n";
  ASSERT_EQ(chmod((root_ + "/etc/passwd").c_str(), 0640), 0);
  ASSERT_EQ(chmod((root_ + "/etc/sub").c_str(), 0700), 0);
  ASSERT_EQ(symlink("/etc/passwd", (root_ + "/etc/link").c_str()), 0);
  ASSERT_EQ(symlink("../../outside", (root_ + "/etc/sub/dangling").c_str()), 0);
  ASSERT_EQ(link((root_ + "/etc/passwd").c_str(), (root_ + "/etc/hard").c_str()), 0);
  std::ofstream(root_ + "/empty");
  ASSERT_EQ(chown((root_ + "/empty").c_str(), 1234, 5678), 0);

  std::map<std::string, TarEntry> entries = ReadTar(Stream(root_));

  ASSERT_TRUE(entries.count("./"));  // directories end in "/", as pax writes them
  EXPECT_EQ(entries["./"].type, AE_IFDIR);
  EXPECT_EQ(entries["./etc/sub/"].permissions, 0700u);
  EXPECT_EQ(entries["./etc/link"].type, AE_IFLNK);
  EXPECT_EQ(entries["./etc/link"].symlink, "/etc/passwd");  // stored, not followed
  EXPECT_EQ(entries["./etc/sub/dangling"].symlink, "../../outside");
  EXPECT_EQ(entries["./empty"].uid, 1234);
  EXPECT_EQ(entries["./empty"].uname, "");  // numeric owners only
  // One of the two names carries the data, the other is a hard link to it.
  const TarEntry& passwd = entries["./etc/passwd"];
  const TarEntry& hard = entries["./etc/hard"];
  EXPECT_TRUE((passwd.hardlink == "./etc/hard" && hard.data == "root:x:0:0::/root:/bin/sh\n") ||
              (hard.hardlink == "./etc/passwd" && passwd.data == "root:x:0:0::/root:/bin/sh\n"));
  EXPECT_EQ(passwd.permissions, 0640u);
  for (const auto& [name, entry] : entries) EXPECT_EQ(name.rfind("./", 0), 0u) << name;
}

TEST_F(TarStream, StreamsLargeFilesInBoundedChunks) {
  std::string big(3 << 20, '\0');
  std::mt19937 random(7);
  for (char& c : big) c = static_cast<char>(random());
  std::ofstream(root_ + "/big.bin", std::ios::binary) << big;

  size_t largest_chunk = 0;
  std::map<std::string, TarEntry> entries = ReadTar(Stream(root_ + "/", &largest_chunk));
  EXPECT_EQ(entries["./big.bin"].data, big);
  EXPECT_LE(largest_chunk, size_t{64 << 10});
  EXPECT_GT(largest_chunk, 0u);
}

TEST_F(TarStream, SkipsSocketsWithAWarning) {
  // A unix socket cannot be stored in a tar; the rest of the tree still is.
  std::string socket_path = root_ + "/s.sock";
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", socket_path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  std::ofstream(root_ + "/kept") << "x";
  std::vector<std::string> warnings;
  std::map<std::string, TarEntry> entries = ReadTar(Stream(root_, nullptr, &warnings));
  close(fd);
  EXPECT_EQ(entries.count("./s.sock"), 0u);
  EXPECT_EQ(entries["./kept"].data, "x");
  EXPECT_FALSE(warnings.empty());
}

TEST_F(TarStream, ASinkErrorStopsTheStreamAndIsReturned) {
  std::ofstream(root_ + "/big.bin", std::ios::binary) << std::string(1 << 20, 'x');
  int calls = 0;
  Status status = StreamDirectoryAsTar(
      root_,
      [&](std::string_view) -> Status {
        ++calls;
        return MakeError(ErrorCode::kUnavailable, "connection lost", "connection_lost");
      },
      [](const std::string&) {});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().detail_code, "connection_lost");
  EXPECT_EQ(calls, 1);
}

TEST_F(TarStream, AMissingRootIsAnError) {
  Status status = StreamDirectoryAsTar(
      root_ + "/missing", [](std::string_view) -> Status { return {}; }, [](const std::string&) {});
  EXPECT_FALSE(status.ok());
}

}  // namespace
}  // namespace bulkhead::storage
