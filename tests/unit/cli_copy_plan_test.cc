#include <gtest/gtest.h>

#include "cli/copy_plan.h"

namespace bulkhead::cli {
namespace {

using Kind = CopyLocation::Kind;

TEST(CliCopyPlan, IdColonPathIsASandboxPath) {
  CopyLocation location = ParseCopyLocation("sb-12ab:/workspace/a.txt");
  EXPECT_EQ(location.kind, Kind::kSandbox);
  EXPECT_EQ(location.sandbox_id, "sb-12ab");
  EXPECT_EQ(location.path, "/workspace/a.txt");

  location = ParseCopyLocation("sb-1:rel/dir");
  EXPECT_EQ(location.kind, Kind::kSandbox);
  EXPECT_EQ(location.path, "rel/dir");
}

TEST(CliCopyPlan, IdColonWithoutPathMeansTheWorkdir) {
  CopyLocation location = ParseCopyLocation("sb-1:");
  EXPECT_EQ(location.kind, Kind::kSandbox);
  EXPECT_EQ(location.path, ".");
}

TEST(CliCopyPlan, LocalPathsStayLocalEvenWithAColon) {
  for (const char* local : {"/tmp/a:b", "./a:b", "../x:y", "dir/a:b", "plain.txt", ":leading", "."}) {
    CopyLocation location = ParseCopyLocation(local);
    EXPECT_EQ(location.kind, Kind::kLocal) << local;
    EXPECT_EQ(location.path, local);
  }
}

TEST(CliCopyPlan, DashIsStdio) { EXPECT_EQ(ParseCopyLocation("-").kind, Kind::kStdio); }

TEST(CliCopyPlan, AFileGoesIntoAnExistingDirectoryUnderItsName) {
  auto target = FileCopyDestination("src/report.txt", "/workspace", PathKind::kDirectory);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "/workspace/report.txt");
  target = FileCopyDestination("report.txt", "/workspace/", PathKind::kDirectory);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "/workspace/report.txt");
}

TEST(CliCopyPlan, AFileReplacesAFileOrCreatesTheDestination) {
  auto target = FileCopyDestination("a.txt", "/workspace/b.txt", PathKind::kFile);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "/workspace/b.txt");
  target = FileCopyDestination("a.txt", "/workspace/new.txt", PathKind::kMissing);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "/workspace/new.txt");
}

TEST(CliCopyPlan, ATrailingSlashNeedsAnExistingDirectory) {
  auto target = FileCopyDestination("a.txt", "/workspace/missing/", PathKind::kMissing);
  ASSERT_FALSE(target.ok());
  EXPECT_EQ(target.error().detail_code, "not_found");
  target = FileCopyDestination("a.txt", "/workspace/file/", PathKind::kFile);
  ASSERT_FALSE(target.ok());
  EXPECT_EQ(target.error().detail_code, "not_a_directory");
}

TEST(CliCopyPlan, ADirectoryBecomesAMissingDestination) {
  auto target = DirectoryCopyDestination("project", "/workspace/copy", PathKind::kMissing);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "/workspace/copy");
}

TEST(CliCopyPlan, ADirectoryGoesIntoAnExistingDirectoryUnderItsName) {
  auto target = DirectoryCopyDestination("src/project/", "/workspace", PathKind::kDirectory);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "/workspace/project");
}

TEST(CliCopyPlan, SlashDotCopiesADirectorysContents) {
  auto target = DirectoryCopyDestination("src/project/.", "/workspace/", PathKind::kDirectory);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "/workspace");
  target = DirectoryCopyDestination(".", "out", PathKind::kDirectory);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "out");
}

TEST(CliCopyPlan, ASourceNamedDotDotNeverClimbsOutOfTheDestination) {
  auto target = DirectoryCopyDestination("/workspace/sub/..", "out", PathKind::kDirectory);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "out");
  target = DirectoryCopyDestination("/", "out", PathKind::kDirectory);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "out");
}

TEST(CliCopyPlan, ADirectoryCannotReplaceAFile) {
  auto target = DirectoryCopyDestination("project", "notes.txt", PathKind::kFile);
  ASSERT_FALSE(target.ok());
  EXPECT_EQ(target.error().detail_code, "not_a_directory");
}

TEST(CliCopyPlan, PathHelpers) {
  EXPECT_EQ(BaseName("a/b/"), "b");
  EXPECT_EQ(BaseName("a/b/."), "b");
  EXPECT_EQ(BaseName("b"), "b");
  EXPECT_EQ(BaseName("/"), "/");
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
  EXPECT_EQ(JoinPath("/", "b"), "/b");
  EXPECT_EQ(WithoutTrailingDot("a/b/."), "a/b");
  EXPECT_EQ(WithoutTrailingDot("a/./"), "a");
  EXPECT_EQ(WithoutTrailingDot("."), ".");
  EXPECT_EQ(WithoutTrailingDot("/"), "/");
  EXPECT_EQ(WithoutTrailingDot("/."), "/");
}

}  // namespace
}  // namespace bulkhead::cli
