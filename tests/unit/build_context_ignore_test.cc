// .dockerignore: Docker's pattern rules (Go's filepath.Match per name, "**" across directories,
// a matched directory leaving out all below it, '!' exceptions with the last match deciding),
// pattern cleaning, malformed patterns refused by line, and when a walker must look inside an
// ignored directory.
#include <gtest/gtest.h>

#include <string>

#include "build/context_ignore.h"

namespace bulkhead::build {
namespace {

ContextIgnore Parsed(const std::string& text) {
  auto ignore = ContextIgnore::Parse(text);
  EXPECT_TRUE(ignore.ok()) << text << ": " << (ignore.ok() ? "" : ignore.error().message);
  return ignore.ok() ? *ignore : *ContextIgnore::Parse("");
}

std::string ParseError(const std::string& text) {
  auto ignore = ContextIgnore::Parse(text);
  EXPECT_FALSE(ignore.ok()) << text;
  if (ignore.ok()) return "";
  EXPECT_EQ(ignore.error().code, ErrorCode::kBadRequest);
  return ignore.error().message;
}

TEST(ContextIgnoreTest, AnEmptyFileIgnoresNothing) {
  ContextIgnore ignore = Parsed("");
  EXPECT_FALSE(ignore.Ignored("a"));
  EXPECT_FALSE(ignore.Ignored("a/b/c"));
  EXPECT_TRUE(ignore.MayTakeBelow("a"));
}

TEST(ContextIgnoreTest, StarMatchesWithinOneDirectoryOnly) {
  ContextIgnore ignore = Parsed("*.log\n");
  EXPECT_TRUE(ignore.Ignored("app.log"));
  EXPECT_TRUE(ignore.Ignored(".log")) << "a leading dot is matched like any character";
  EXPECT_FALSE(ignore.Ignored("logs/app.log")) << "'*' does not cross '/'";
  EXPECT_FALSE(ignore.Ignored("app.log.txt"));

  ignore = Parsed("*/temp*\n");
  EXPECT_TRUE(ignore.Ignored("a/temporary"));
  EXPECT_FALSE(ignore.Ignored("temp"));
  EXPECT_FALSE(ignore.Ignored("a/b/temp"));
}

TEST(ContextIgnoreTest, APatternMatchingADirectoryLeavesOutAllBelowIt) {
  ContextIgnore ignore = Parsed("build/\nsecrets\n");
  EXPECT_TRUE(ignore.Ignored("build"));
  EXPECT_TRUE(ignore.Ignored("build/x/y.o"));
  EXPECT_TRUE(ignore.Ignored("secrets/key.pem"));
  EXPECT_FALSE(ignore.Ignored("builder"));
  EXPECT_FALSE(ignore.Ignored("src/build")) << "a pattern is anchored at the context's root";
}

TEST(ContextIgnoreTest, DoubleStarMatchesAnyNumberOfDirectories) {
  ContextIgnore ignore = Parsed("**/node_modules\ndocs/**/*.md\n");
  EXPECT_TRUE(ignore.Ignored("node_modules")) << "none too";
  EXPECT_TRUE(ignore.Ignored("web/node_modules"));
  EXPECT_TRUE(ignore.Ignored("a/b/node_modules/pkg/index.js"));
  EXPECT_TRUE(ignore.Ignored("docs/intro.md"));
  EXPECT_TRUE(ignore.Ignored("docs/a/b/c.md"));
  EXPECT_FALSE(ignore.Ignored("docs/a/b/c.txt"));
  EXPECT_FALSE(ignore.Ignored("site/docs/intro.md"));
}

TEST(ContextIgnoreTest, ATrailingDoubleStarLeavesOutWhatIsInTheDirectoryNotIt) {
  ContextIgnore ignore = Parsed("cache/**\n");
  EXPECT_FALSE(ignore.Ignored("cache"));
  EXPECT_TRUE(ignore.Ignored("cache/x"));
  EXPECT_TRUE(ignore.Ignored("cache/x/y"));
  EXPECT_TRUE(Parsed("**\n").Ignored("anything/at/all"));
}

TEST(ContextIgnoreTest, ExceptionsTakePathsBackAndTheLastMatchDecides) {
  ContextIgnore ignore = Parsed("*.md\n!README.md\nREADME-secret.md\n");
  EXPECT_TRUE(ignore.Ignored("CHANGES.md"));
  EXPECT_FALSE(ignore.Ignored("README.md"));
  EXPECT_TRUE(ignore.Ignored("README-secret.md"));

  ignore = Parsed("!keep.txt\n*.txt\n");
  EXPECT_TRUE(ignore.Ignored("keep.txt")) << "an exception before the pattern it would except counts for nothing";

  ignore = Parsed("logs\n!logs/keep\n");
  EXPECT_TRUE(ignore.Ignored("logs"));
  EXPECT_TRUE(ignore.Ignored("logs/a"));
  EXPECT_FALSE(ignore.Ignored("logs/keep"));
  EXPECT_FALSE(ignore.Ignored("logs/keep/inner")) << "an exception matching a directory takes back all below it";
}

TEST(ContextIgnoreTest, PatternsAreCleanedAndALeadingSlashDropped) {
  ContextIgnore ignore = Parsed("/abs\na/./b\n./c\nd//e\nx/../y\n/../z\n  spaced  \n");
  EXPECT_TRUE(ignore.Ignored("abs"));
  EXPECT_TRUE(ignore.Ignored("a/b"));
  EXPECT_TRUE(ignore.Ignored("c"));
  EXPECT_TRUE(ignore.Ignored("d/e"));
  EXPECT_TRUE(ignore.Ignored("y"));
  EXPECT_FALSE(ignore.Ignored("x"));
  EXPECT_TRUE(ignore.Ignored("z")) << "\"..\" at the root is the root";
  EXPECT_TRUE(ignore.Ignored("spaced"));
  EXPECT_FALSE(Parsed("../up\n").Ignored("up")) << "a pattern above the context matches nothing in it";
  EXPECT_FALSE(Parsed("/\n.\n").Ignored("a")) << "the root itself is never left out";
}

TEST(ContextIgnoreTest, CommentsAreLinesStartingWithHashAndBlankLinesAreSkipped) {
  ContextIgnore ignore = Parsed("# *.go\n\n   \n\t\n #notacomment\n");
  EXPECT_FALSE(ignore.Ignored("main.go"));
  EXPECT_TRUE(ignore.Ignored("#notacomment")) << "after a space a '#' is part of the pattern, as Docker";
}

TEST(ContextIgnoreTest, QuestionMarkClassesAndEscapes) {
  ContextIgnore ignore = Parsed("file?.txt\n[a-c]x\n[^a-c]y\nlit\\*\n");
  EXPECT_TRUE(ignore.Ignored("file1.txt"));
  EXPECT_FALSE(ignore.Ignored("file10.txt"));
  EXPECT_TRUE(ignore.Ignored("fileé.txt")) << "'?' is one character, not one byte";
  EXPECT_TRUE(ignore.Ignored("bx"));
  EXPECT_FALSE(ignore.Ignored("dx"));
  EXPECT_TRUE(ignore.Ignored("dy"));
  EXPECT_FALSE(ignore.Ignored("ay"));
  EXPECT_TRUE(ignore.Ignored("lit*"));
  EXPECT_FALSE(ignore.Ignored("little"));
}

TEST(ContextIgnoreTest, CrlfLinesAndAByteOrderMarkAreTaken) {
  ContextIgnore ignore = Parsed("\xEF\xBB\xBF" "dist\r\n!dist/keep\r\n");
  EXPECT_TRUE(ignore.Ignored("dist/a"));
  EXPECT_FALSE(ignore.Ignored("dist/keep"));
}

TEST(ContextIgnoreTest, MalformedPatternsAreRefusedWithTheirLine) {
  EXPECT_EQ(ParseError("ok\n[abc\n"),
            ".dockerignore line 2: the pattern \"[abc\" is malformed (an unclosed '[', an empty class or a '\\' at "
            "the end)");
  EXPECT_NE(ParseError("a/[]/b\n").find("line 1"), std::string::npos);
  EXPECT_NE(ParseError("x\ny\ntrailing\\\n").find("line 3"), std::string::npos);
  EXPECT_EQ(ParseError("\n!\n"), ".dockerignore line 2: \"!\" excepts nothing");
}

TEST(ContextIgnoreTest, MayTakeBelowWhenAnExceptionCouldNameSomethingInside) {
  ContextIgnore ignore = Parsed("node_modules\n!node_modules/keep/**\nvendor\n");
  EXPECT_TRUE(ignore.Ignored("node_modules"));
  EXPECT_TRUE(ignore.MayTakeBelow("node_modules"));
  EXPECT_TRUE(ignore.MayTakeBelow("node_modules/keep"));
  EXPECT_FALSE(ignore.MayTakeBelow("node_modules/other")) << "no exception reaches into it";
  EXPECT_FALSE(ignore.MayTakeBelow("vendor"));
}

TEST(ContextIgnoreTest, MayTakeBelowCountsOnlyExceptionsAfterThePatternThatIgnores) {
  ContextIgnore ignore = Parsed("!cache/keep\ncache\n");
  EXPECT_FALSE(ignore.MayTakeBelow("cache"));
  EXPECT_TRUE(ignore.Ignored("cache/keep"));
}

TEST(ContextIgnoreTest, MayTakeBelowIsConservativeAboutDoubleStarExceptions) {
  ContextIgnore ignore = Parsed("*\n!**/*.go\n");
  EXPECT_TRUE(ignore.Ignored("deep"));
  EXPECT_TRUE(ignore.MayTakeBelow("deep"));
  EXPECT_FALSE(ignore.Ignored("deep/a/main.go"));
  EXPECT_TRUE(ignore.Ignored("deep/a/notes.txt"));
}

TEST(ContextIgnoreTest, MayTakeBelowADirectoryThatIsNotIgnored) {
  ContextIgnore ignore = Parsed("*.o\n!keep.o\n");
  EXPECT_TRUE(ignore.MayTakeBelow("src"));
  EXPECT_TRUE(ignore.MayTakeBelow("keep.o"));
}

// Found by the fuzzer: many "**" against a deep path took exponential time.
TEST(ContextIgnoreTest, ManyGlobstarsMatchInPolynomialTime) {
  std::string line;
  for (int i = 0; i < 12; i++) line += "**/";
  auto rules = ContextIgnore::Parse(line + "x\n");
  ASSERT_TRUE(rules.ok());
  std::string deep;
  for (int i = 0; i < 25; i++) deep += "d/";
  EXPECT_FALSE(rules->Ignored(deep + "y"));
  EXPECT_TRUE(rules->Ignored(deep + "x"));
  EXPECT_TRUE(rules->Ignored(deep + "x/below"));
}

}  // namespace
}  // namespace bulkhead::build
