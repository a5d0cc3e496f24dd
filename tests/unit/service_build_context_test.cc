// A build's context on the daemon's side (service/build_context.h) and the build query
// (service/image_build.h): contexts stay inside their directory, .dockerignore applies,
// COPY puts files where Docker does, and cache digests follow content, not times.
#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "service/build_context.h"
#include "service/image_build.h"
#include "support/temp_state_dir.h"

namespace bulkhead::api {
namespace {

namespace fs = std::filesystem;

struct Entry {
  std::string name;
  std::string data;
  mode_t mode = 0644;
  mode_t type = AE_IFREG;
  std::string link;  // symlink target
  int64_t mtime = 1700000000;
};

void WriteTar(const std::string& path, const std::vector<Entry>& entries) {
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
  for (const Entry& e : entries) {
    struct archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.name.c_str());
    archive_entry_set_mode(entry, e.type | e.mode);
    archive_entry_set_mtime(entry, e.mtime, 0);
    if (e.type == AE_IFLNK) archive_entry_set_symlink(entry, e.link.c_str());
    if (e.type == AE_IFCHR) archive_entry_set_rdev(entry, makedev(1, 3));
    archive_entry_set_size(entry, e.type == AE_IFREG ? static_cast<int64_t>(e.data.size()) : 0);
    archive_write_header(a, entry);
    if (e.type == AE_IFREG) archive_write_data(a, e.data.data(), e.data.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
}

// name -> (mode, data or link target) of a tar's entries.
std::map<std::string, std::pair<mode_t, std::string>> ReadTar(const std::string& path) {
  std::map<std::string, std::pair<mode_t, std::string>> out;
  struct archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  if (archive_read_open_filename(a, path.c_str(), 10240) != ARCHIVE_OK) return out;
  struct archive_entry* entry;
  while (archive_read_next_header(a, &entry) == ARCHIVE_OK) {
    std::string name = archive_entry_pathname(entry);
    if (name.rfind("./", 0) == 0) name = name.substr(2);
    std::string data;
    if (archive_entry_symlink(entry)) data = archive_entry_symlink(entry);
    char buffer[4096];
    for (ssize_t n; (n = archive_read_data(a, buffer, sizeof buffer)) > 0;) data.append(buffer, static_cast<size_t>(n));
    if (!name.empty()) out[name] = {archive_entry_mode(entry), data};
  }
  archive_read_free(a);
  return out;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class BuildContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(context_);
    fs::create_directories(work_);
  }
  // Unpacks `entries` as a context with a Dockerfile; answers the Dockerfile's text.
  Result<std::string> Unpack(std::vector<Entry> entries, const std::string& dockerfile = "Dockerfile") {
    WriteTar(tar_, entries);
    return UnpackContext(tar_, context_, dockerfile);
  }

  testing::TempStateDir dir_{"bulkhead-build-context"};
  const std::string tar_ = dir_.path() + "/context.tar";
  const std::string context_ = dir_.path() + "/context";
  const std::string work_ = dir_.path() + "/work";
};

TEST_F(BuildContextTest, UnpacksWhatIsSafeAndAppliesDockerignoreAfterReadingTheDockerfile) {
  auto dockerfile = Unpack({{"Dockerfile", "FROM host\n"},
                            {".dockerignore", "Dockerfile\n**/*.log\nsecrets\n!secrets/public\n"},
                            {"/abs/file", "cleaned"},
                            {"app/run.log", "noise"},
                            {"app/main.py", "code"},
                            {"secrets/key", "k"},
                            {"secrets/public", "p"},
                            {"tool", "#!", 04755},
                            {"null", "", 0644, AE_IFCHR},
                            {"link", "", 0777, AE_IFLNK, "/etc/passwd"}});
  ASSERT_TRUE(dockerfile.ok()) << dockerfile.error().message;
  EXPECT_EQ(*dockerfile, "FROM host\n");  // read before .dockerignore took it away
  EXPECT_FALSE(fs::exists(context_ + "/Dockerfile"));
  EXPECT_EQ(Slurp(context_ + "/abs/file"), "cleaned");  // a leading '/' is the context's
  EXPECT_FALSE(fs::exists(context_ + "/app/run.log"));
  EXPECT_TRUE(fs::exists(context_ + "/app/main.py"));
  EXPECT_FALSE(fs::exists(context_ + "/secrets/key"));
  EXPECT_TRUE(fs::exists(context_ + "/secrets/public"));
  EXPECT_FALSE(fs::exists(context_ + "/null"));  // device nodes are never made
  struct stat st;
  ASSERT_EQ(::stat((context_ + "/tool").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u) << "no set-id file lands on the host";
  EXPECT_EQ(fs::read_symlink(context_ + "/link"), "/etc/passwd");  // kept as a link, never followed
}

TEST_F(BuildContextTest, RefusesEscapesAndMissingDockerfiles) {
  auto escaping = Unpack({{"Dockerfile", "FROM host\n"}, {"../outside", "x"}});
  ASSERT_FALSE(escaping.ok());
  EXPECT_NE(escaping.error().message.find("\"..\""), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_.path() + "/outside"));

  // A link planted first, then an entry that would write through it: the link gives way to a
  // directory of the context's, and nothing lands where it pointed.
  fs::remove_all(context_);
  fs::create_directories(context_);
  auto through = Unpack({{"Dockerfile", "FROM host\n"}, {"out", "", 0777, AE_IFLNK, dir_.path()}, {"out/planted", "x"}});
  ASSERT_TRUE(through.ok()) << through.error().message;
  EXPECT_EQ(Slurp(context_ + "/out/planted"), "x");
  EXPECT_FALSE(fs::exists(dir_.path() + "/planted"));

  fs::remove_all(context_);
  fs::create_directories(context_);
  auto missing = Unpack({{"other", "x"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kBadRequest);

  fs::remove_all(context_);
  fs::create_directories(context_);
  auto linked = Unpack({{"Dockerfile", "", 0777, AE_IFLNK, "/etc/hostname"}});
  EXPECT_FALSE(linked.ok()) << "a Dockerfile that is a link to a host file is the context's (absent)";

  std::ofstream(tar_) << "not a tar archive at all, and long enough to tell" << std::string(600, 'x');
  EXPECT_EQ(UnpackContext(tar_, context_, "Dockerfile").error().code, ErrorCode::kBadRequest);
}

TEST_F(BuildContextTest, CopyPutsDirectoryContentsFilesAndArchivesWhereDockerDoes) {
  ASSERT_TRUE(Unpack({{"Dockerfile", "FROM host\n"},
                      {"src/a.py", "a"},
                      {"src/pkg/b.py", "b"},
                      {"one.txt", "one"},
                      {"x1.cfg", "1"},
                      {"x2.cfg", "2"},
                      {"link-to-one", "", 0777, AE_IFLNK, "/one.txt"}})
                  .ok());
  // A directory: its contents into dest.
  auto dir = PlanCopy(context_, {"src"}, "/app/", std::nullopt, false, work_);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  ASSERT_EQ(dir->size(), 1u);
  EXPECT_EQ((*dir)[0].dir, "/app");
  auto entries = ReadTar((*dir)[0].tar_path);
  EXPECT_EQ(entries.count("a.py"), 1u);
  EXPECT_EQ(entries["pkg/b.py"].second, "b");

  // A file to a path that names no directory: the file itself, with --chmod.
  auto file = PlanCopy(context_, {"one.txt"}, "/etc/app.conf", 0600, false, work_);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)[0].dir, "/etc");
  entries = ReadTar((*file)[0].tar_path);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries["app.conf"].first & 07777, 0600u);
  EXPECT_EQ(entries["app.conf"].second, "one");

  // Wildcards: several sources need a dest directory.
  auto several = PlanCopy(context_, {"x*.cfg"}, "/cfg/", std::nullopt, false, work_);
  ASSERT_TRUE(several.ok());
  EXPECT_EQ(several->size(), 2u);
  EXPECT_EQ(PlanCopy(context_, {"x*.cfg"}, "/cfg", std::nullopt, false, work_).error().code, ErrorCode::kBadRequest);
  EXPECT_EQ(PlanCopy(context_, {"*.none"}, "/cfg/", std::nullopt, false, work_).error().code, ErrorCode::kBadRequest);

  // A link as the source is followed inside the context ("/one.txt" is the context's).
  auto linked = PlanCopy(context_, {"link-to-one"}, "/x", std::nullopt, false, work_);
  ASSERT_TRUE(linked.ok()) << linked.error().message;
  EXPECT_EQ(ReadTar((*linked)[0].tar_path)["x"].second, "one");

  EXPECT_EQ(PlanCopy(context_, {"../../etc/passwd"}, "/x", std::nullopt, false, work_).error().code,
            ErrorCode::kBadRequest);
  EXPECT_EQ(PlanCopy(context_, {"absent"}, "/x", std::nullopt, false, work_).error().code, ErrorCode::kBadRequest);

  // ADD of a tar archive: unpacked into dest; COPY of the same: the file.
  WriteTar(context_ + "/bundle.tar", {{"inside.txt", "in"}});
  auto added = PlanCopy(context_, {"bundle.tar"}, "/opt/", std::nullopt, true, work_);
  ASSERT_TRUE(added.ok());
  EXPECT_TRUE((*added)[0].extract_archive);
  EXPECT_EQ((*added)[0].dir, "/opt");
  auto copied = PlanCopy(context_, {"bundle.tar"}, "/opt/", std::nullopt, false, work_);
  ASSERT_TRUE(copied.ok());
  EXPECT_FALSE((*copied)[0].extract_archive);
  EXPECT_EQ(ReadTar((*copied)[0].tar_path).count("bundle.tar"), 1u);
}

TEST_F(BuildContextTest, ContentDigestsFollowContentNotTimes) {
  const std::string a = work_ + "/a.tar", b = work_ + "/b.tar", c = work_ + "/c.tar", d = work_ + "/d.tar";
  WriteTar(a, {{"f", "same", 0644, AE_IFREG, "", 1}});
  WriteTar(b, {{"f", "same", 0644, AE_IFREG, "", 999999}});
  WriteTar(c, {{"f", "other", 0644, AE_IFREG, "", 1}});
  WriteTar(d, {{"f", "same", 0755, AE_IFREG, "", 1}});
  EXPECT_EQ(*DigestTarContent(a), *DigestTarContent(b));
  EXPECT_NE(*DigestTarContent(a), *DigestTarContent(c));
  EXPECT_NE(*DigestTarContent(a), *DigestTarContent(d));
}

TEST_F(BuildContextTest, ArchivedSourcesArePlacedAndRenamedAsDest) {
  const std::string archived = work_ + "/from.tar";
  WriteTar(archived, {{"artifact", "bits", 0600}});
  auto renamed = PlaceArchived(archived, false, "/out/artifact", "/app/renamed", false, 0644);
  ASSERT_TRUE(renamed.ok());
  EXPECT_EQ(renamed->dir, "/app");
  auto entries = ReadTar(renamed->tar_path);
  ASSERT_EQ(entries.count("renamed"), 1u);
  EXPECT_EQ(entries["renamed"].first & 07777, 0644u);
  auto into = PlaceArchived(archived, false, "/out/artifact", "/app/", false, std::nullopt);
  ASSERT_TRUE(into.ok());
  EXPECT_EQ(into->dir, "/app");
  EXPECT_EQ(into->tar_path, archived);
}

TEST(BuildQueryTest, ParsesEveryParameterAndRefusesWhatItDoesNotKnow) {
  BuildRequest request;
  auto dockerfile = ParseBuildQuery({{"tag", "my-app"}, {"dockerfile", "docker/app.Dockerfile"}, {"target", "prod"},
                                     {"runtime", "gvisor"}, {"pull", "always"}, {"no_cache", "true"},
                                     {"build_arg", "A=1"}, {"build_arg", "B=x=y"}, {"allow", "example.test"},
                                     {"cpus", "1.5"}, {"memory_mb", "4096"}, {"disk_mb", "20000"},
                                     {"timeout_s", "600"}},
                                    request);
  ASSERT_TRUE(dockerfile.ok()) << dockerfile.error().message;
  EXPECT_EQ(*dockerfile, "docker/app.Dockerfile");
  EXPECT_EQ(request.tag, "my-app");
  EXPECT_EQ(request.target, "prod");
  EXPECT_EQ(request.runtime, "gvisor");
  EXPECT_EQ(request.pull, "always");
  EXPECT_TRUE(request.no_cache);
  EXPECT_EQ(request.build_args, (std::map<std::string, std::string>{{"A", "1"}, {"B", "x=y"}}));
  EXPECT_EQ(request.network.mode, "allowlist");
  EXPECT_EQ(request.network.allow, std::vector<std::string>{"example.test"});
  EXPECT_DOUBLE_EQ(request.cpus, 1.5);
  EXPECT_EQ(request.memory_mb, 4096);
  EXPECT_EQ(request.disk_mb, 20000);
  EXPECT_EQ(request.timeout_s, 600);

  BuildRequest defaults;
  EXPECT_EQ(*ParseBuildQuery({}, defaults), "Dockerfile");
  EXPECT_EQ(defaults.network.mode, "none");
  EXPECT_EQ(defaults.timeout_s, kDefaultBuildTimeoutS);
  BuildRequest unlimited;
  ASSERT_TRUE(ParseBuildQuery({{"timeout_s", "0"}}, unlimited).ok());
  EXPECT_EQ(unlimited.timeout_s, 0);
  for (const auto& bad : std::vector<std::pair<std::string, std::string>>{
           {"tag", "Bad Name"}, {"runtime", "kvm"}, {"pull", "sometimes"}, {"no_cache", "maybe"},
           {"build_arg", "=1"}, {"build_arg", "NOEQUALS"}, {"allow", "not a host!"}, {"network", "wide"},
           {"cpus", "0"}, {"cpus", "x"}, {"memory_mb", "12"}, {"dockerfile", ""}, {"colour", "blue"},
           {"timeout_s", "-1"}, {"timeout_s", "604801"}, {"timeout_s", "1.5"}}) {
    BuildRequest request;
    auto parsed = ParseBuildQuery({bad}, request);
    ASSERT_FALSE(parsed.ok()) << bad.first << "=" << bad.second;
    EXPECT_EQ(parsed.error().code, ErrorCode::kBadRequest);
  }
}

}  // namespace
}  // namespace bulkhead::api
