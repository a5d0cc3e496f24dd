#include <gtest/gtest.h>
#include <stdlib.h>
#include <time.h>

#include <nlohmann/json.hpp>

#include "cli/listing_format.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

// Times print in the local zone: pin it for the test.
class CliListingFormat : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tz = getenv("TZ");
    saved_tz_ = tz ? std::optional<std::string>(tz) : std::nullopt;
    setenv("TZ", "UTC", 1);
    tzset();
  }
  void TearDown() override {
    if (saved_tz_) {
      setenv("TZ", saved_tz_->c_str(), 1);
    } else {
      unsetenv("TZ");
    }
    tzset();
  }
  std::optional<std::string> saved_tz_;
};

TEST_F(CliListingFormat, ModesLookLikeLs) {
  EXPECT_EQ(FormatMode("dir", 0755), "drwxr-xr-x");
  EXPECT_EQ(FormatMode("file", 0644), "-rw-r--r--");
  EXPECT_EQ(FormatMode("symlink", 0777), "lrwxrwxrwx");
  EXPECT_EQ(FormatMode("other", 0600), "?rw-------");
  EXPECT_EQ(FormatMode("file", 04755), "-rwsr-xr-x");
  EXPECT_EQ(FormatMode("file", 02644), "-rw-r-Sr--");
  EXPECT_EQ(FormatMode("dir", 01777), "drwxrwxrwt");
}

TEST_F(CliListingFormat, TimesAreShownToTheMinuteInLocalTime) {
  EXPECT_EQ(FormatLocalTime("2026-11-29T21:05:59.123Z"), "2026-11-29 21:05");
  EXPECT_EQ(FormatLocalTime(""), "-");
  EXPECT_EQ(FormatLocalTime("yesterday"), "yesterday");
}

TEST_F(CliListingFormat, FileListingIsSortedAlignedAndShowsLinkTargets) {
  json entries = json::parse(R"([
    {"path": "/workspace/src/main.py", "name": "main.py", "type": "file", "size": 1234, "mode": 420,
     "mtime": "2026-01-02T03:04:05Z"},
    {"path": "/workspace/link", "name": "link", "type": "symlink", "size": 7, "mode": 511,
     "mtime": "2026-01-02T03:04:05Z", "target": "src/main.py"},
    {"path": "/workspace/src", "name": "src", "type": "dir", "size": 4096, "mode": 493,
     "mtime": "2026-01-02T03:04:05Z"}
  ])");
  EXPECT_EQ(FormatFileListing(entries, "/workspace"),
            "MODE         SIZE   MODIFIED           NAME\n"
            "lrwxrwxrwx   7      2026-01-02 03:04   link -> src/main.py\n"
            "drwxr-xr-x   4096   2026-01-02 03:04   src\n"
            "-rw-r--r--   1234   2026-01-02 03:04   src/main.py\n");
}

TEST_F(CliListingFormat, EntriesOutsideTheRootShowTheirOwnName) {
  json entries = json::parse(R"([{"path": "/etc/hosts", "name": "hosts", "type": "file", "size": 1, "mode": 420}])");
  EXPECT_EQ(FormatFileListing(entries, ""), "MODE         SIZE   MODIFIED   NAME\n-rw-r--r--   1      -          hosts\n");
  // Listing "/" shows names without a leading slash.
  json root_entries = json::parse(R"([{"path": "/etc", "name": "etc", "type": "dir", "size": 1, "mode": 493}])");
  EXPECT_NE(FormatFileListing(root_entries, "/").find("   etc\n"), std::string::npos);
}

TEST_F(CliListingFormat, CommandsAreQuotedOnlyWhereNeeded) {
  EXPECT_EQ(DescribeCommand(json::parse(R"(["python3", "-m", "http.server", "8000"])")),
            "python3 -m http.server 8000");
  EXPECT_EQ(DescribeCommand(json::parse(R"(["sh", "-c", "echo hi; it's"])")), R"(sh -c 'echo hi; it'\''s')");
  EXPECT_EQ(DescribeCommand(json::parse(R"(["printf", ""])")), "printf ''");
  EXPECT_EQ(DescribeCommand(json("sleep 5 &")), "sleep 5 &");
}

TEST_F(CliListingFormat, ProcessTableShowsStateAndHowProcessesEnded) {
  int64_t now = 1767323045;  // 2026-01-02T03:04:05Z
  json processes = json::parse(R"([
    {"pid": 12, "tag": "web", "cmd": ["python3", "-m", "http.server"], "state": "running", "exit_code": null,
     "signal": null, "started_at": "2026-01-02T03:03:05Z"},
    {"pid": 40, "tag": null, "cmd": ["false"], "state": "exited", "exit_code": 1, "signal": null,
     "started_at": "2026-01-02T03:04:00Z"},
    {"pid": 41, "tag": null, "cmd": ["sleep", "100"], "state": "exited", "exit_code": null, "signal": 9,
     "started_at": "2026-01-02T03:04:00Z"}
  ])");
  EXPECT_EQ(FormatProcessTable(processes, now),
            "PID   TAG   STATE     EXIT       STARTED   COMMAND\n"
            "12    web   running   -          1m ago    python3 -m http.server\n"
            "40    -     exited    1          5s ago    false\n"
            "41    -     exited    signal 9   5s ago    sleep 100\n");
}

}  // namespace
}  // namespace bulkhead::cli
