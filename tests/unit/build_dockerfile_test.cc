// Dockerfiles: the parse (continuation lines, comments, directives, flags, what is refused and on
// which line), variable expansion as Docker does it, and the evaluation of each stage into steps
// with their resolved config (ARG scopes, ENV over ARG, WORKDIR, shell and exec forms, COPY).
#include <gtest/gtest.h>

#include <string>

#include "build/dockerfile.h"

namespace bulkhead::build {
namespace {

using Argv = std::vector<std::string>;

Dockerfile Parsed(const std::string& text) {
  auto file = ParseDockerfile(text);
  EXPECT_TRUE(file.ok()) << text << ": " << (file.ok() ? "" : file.error().message);
  return file.ok() ? *file : Dockerfile{};
}

std::string ParseError(const std::string& text) {
  auto file = ParseDockerfile(text);
  EXPECT_FALSE(file.ok()) << text;
  if (file.ok()) return "";
  EXPECT_EQ(file.error().code, ErrorCode::kBadRequest);
  EXPECT_EQ(file.error().detail_code, "dockerfile_invalid");
  return file.error().message;
}

// Every image's config: PATH set, no working directory.
Result<storage::ImageConfig> AnyImage(const std::string&) {
  storage::ImageConfig config;
  config.env = {"PATH=/usr/bin"};
  return config;
}

BuildPlan Evaluated(const std::string& text, const std::map<std::string, std::string>& build_args = {},
                    const std::string& target = "", const BaseConfig& base = AnyImage) {
  auto plan = EvaluateDockerfile(Parsed(text), build_args, target, base);
  EXPECT_TRUE(plan.ok()) << text << ": " << (plan.ok() ? "" : plan.error().message);
  return plan.ok() ? *plan : BuildPlan{};
}

std::string EvaluateError(const std::string& text, const std::map<std::string, std::string>& build_args = {},
                          const std::string& target = "") {
  auto plan = EvaluateDockerfile(Parsed(text), build_args, target, AnyImage);
  EXPECT_FALSE(plan.ok()) << text;
  if (plan.ok()) return "";
  EXPECT_EQ(plan.error().code, ErrorCode::kBadRequest);
  return plan.error().message;
}

// The last step of the only (or last) stage.
Step LastStep(const std::string& text, const std::map<std::string, std::string>& build_args = {}) {
  BuildPlan plan = Evaluated(text, build_args);
  if (plan.stages.empty() || plan.stages.back().steps.empty()) {
    ADD_FAILURE() << "no step in " << text;
    return Step{};
  }
  return plan.stages.back().steps.back();
}

Result<std::string> Expand(const std::string& word, char escape = '\\') {
  const std::map<std::string, std::string> vars = {{"A", "a"}, {"E", ""}, {"SP", "x y"}};
  return ExpandVariables(word, escape, [&](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string Expanded(const std::string& word, char escape = '\\') {
  auto expanded = Expand(word, escape);
  EXPECT_TRUE(expanded.ok()) << word << ": " << (expanded.ok() ? "" : expanded.error().message);
  return expanded.ok() ? *expanded : "";
}

// ---- Parse ----

TEST(DockerfileParseTest, ContinuationLinesJoinAndCommentAndBlankLinesInsideAreDropped) {
  Dockerfile file = Parsed(
      "FROM alpine\n"
      "# a comment\n"
      "RUN apk add \\\n"
      "  # the packages\n"
      "\n"
      "  curl \\  \n"
      "  git\n"
      "USER 1000\n");
  ASSERT_EQ(file.instructions.size(), 3u);
  EXPECT_EQ(file.instructions[1].line, 3);
  EXPECT_EQ(file.instructions[1].keyword, "RUN");
  EXPECT_EQ(file.instructions[1].rest, "apk add   curl   git");
  EXPECT_EQ(file.instructions[2].line, 8) << "the line numbers count the lines joined and skipped";
}

TEST(DockerfileParseTest, KeywordsAreCaseInsensitiveAndLeadingSpaceIsAllowed) {
  Dockerfile file = Parsed("  from alpine AS base\n\tRun echo hi\nworkDir /app\n");
  ASSERT_EQ(file.instructions.size(), 3u);
  EXPECT_EQ(file.instructions[0].keyword, "FROM");
  EXPECT_EQ(file.instructions[0].rest, "alpine AS base");
  EXPECT_EQ(file.instructions[1].keyword, "RUN");
  EXPECT_EQ(file.instructions[1].original, "RUN echo hi");
  EXPECT_EQ(file.instructions[2].keyword, "WORKDIR");
}

TEST(DockerfileParseTest, EscapeDirectiveSetsTheContinuationCharacter) {
  Dockerfile file = Parsed("# Syntax=docker/dockerfile:1\n#  ESCAPE = `\nFROM alpine\nRUN dir c:\\ `\n  /b\n");
  EXPECT_EQ(file.escape, '`');
  ASSERT_EQ(file.instructions.size(), 2u);
  EXPECT_EQ(file.instructions[1].rest, "dir c:\\   /b") << "a backslash is text under the backtick escape";
}

TEST(DockerfileParseTest, DirectivesCountOnlyBeforeAnythingElse) {
  Dockerfile file = Parsed("# a comment first\n# escape=`\nFROM alpine\nRUN a \\\n  b\n");
  EXPECT_EQ(file.escape, '\\') << "after a comment it is a comment";
  ASSERT_EQ(file.instructions.size(), 2u);
  EXPECT_EQ(file.instructions[1].rest, "a   b");

  EXPECT_EQ(Parsed("\n# escape=`\nFROM alpine\n").escape, '\\') << "after a blank line too";
}

TEST(DockerfileParseTest, ABadOrRepeatedEscapeDirectiveIsRefused) {
  EXPECT_EQ(ParseError("# escape=x\nFROM alpine\n"), "Dockerfile line 1: the escape directive takes '\\' or '`'");
  EXPECT_EQ(ParseError("# escape=`\n# escape=\\\nFROM alpine\n"),
            "Dockerfile line 2: only one \"escape\" parser directive can be used");
}

TEST(DockerfileParseTest, FlagsAreReadBeforeTheArgumentsAndTheOriginalRejoinsThem) {
  Dockerfile file = Parsed(
      "FROM --platform=linux/arm64 alpine\n"
      "COPY --from=build --chown=app:app \\\n"
      "     --link --chmod=0644 /out /app/\n");
  ASSERT_EQ(file.instructions.size(), 2u);
  EXPECT_EQ(file.instructions[0].flags, (std::map<std::string, std::string>{{"platform", "linux/arm64"}}));
  const Instruction& copy = file.instructions[1];
  EXPECT_EQ(copy.flags, (std::map<std::string, std::string>{
                            {"from", "build"}, {"chown", "app:app"}, {"link", ""}, {"chmod", "0644"}}));
  EXPECT_EQ(copy.rest, "/out /app/");
  EXPECT_EQ(copy.original, "COPY --from=build --chown=app:app --link --chmod=0644 /out /app/");
}

TEST(DockerfileParseTest, FlagsAnInstructionDoesNotTakeAreRefusedByName) {
  EXPECT_EQ(ParseError("FROM alpine\nRUN --mount=type=cache,target=/root/.cache pip install x\n"),
            "Dockerfile line 2: RUN --mount is not supported");
  EXPECT_EQ(ParseError("FROM alpine\nRUN --network=none make\n"), "Dockerfile line 2: RUN --network is not supported");
  EXPECT_EQ(ParseError("FROM alpine\nADD --from=build /a /b\n"), "Dockerfile line 2: ADD does not take --from");
  EXPECT_EQ(ParseError("FROM alpine\nCOPY --parents a /b/\n"), "Dockerfile line 2: COPY --parents is not supported");
  EXPECT_EQ(ParseError("FROM --foo=1 alpine\n"), "Dockerfile line 1: FROM does not take --foo");
  EXPECT_EQ(ParseError("FROM alpine\nENV --x=1 A=b\n"), "Dockerfile line 2: ENV does not take --x");
  EXPECT_EQ(ParseError("FROM alpine\nCOPY --from a /b\n"),
            "Dockerfile line 2: COPY --from needs a value (--from=...)");
  EXPECT_EQ(ParseError("FROM alpine\nCOPY --link --link a /b\n"), "Dockerfile line 2: COPY --link is given twice");
}

TEST(DockerfileParseTest, UnsupportedAndUnknownInstructionsAreRefusedWithTheirLine) {
  EXPECT_EQ(ParseError("FROM alpine\n\n# probe\nHEALTHCHECK CMD true\n"),
            "Dockerfile line 4: HEALTHCHECK is not supported");
  EXPECT_EQ(ParseError("FROM alpine\nvolume /data\n"), "Dockerfile line 2: VOLUME is not supported");
  EXPECT_EQ(ParseError("FROM alpine\nONBUILD RUN x\n"), "Dockerfile line 2: ONBUILD is not supported");
  EXPECT_EQ(ParseError("FROM alpine\nSTOPSIGNAL SIGTERM\n"), "Dockerfile line 2: STOPSIGNAL is not supported");
  EXPECT_EQ(ParseError("FROM alpine\nfoo bar\n"), "Dockerfile line 2: unknown instruction FOO");
}

TEST(DockerfileParseTest, HeredocsAreRefused) {
  EXPECT_EQ(ParseError("FROM alpine\nRUN <<EOF\necho hi\nEOF\n"),
            "Dockerfile line 2: RUN with a heredoc (<<EOF) is not supported");
  EXPECT_EQ(ParseError("FROM alpine\nCOPY <<-EOT /etc/x\nhi\nEOT\n"),
            "Dockerfile line 2: COPY with a heredoc (<<-EOT) is not supported");
  EXPECT_EQ(ParseError("FROM alpine\nRUN cat <<EOF > /x\nhi\nEOF\n"),
            "Dockerfile line 2: RUN with a heredoc (<<EOF) is not supported");
  // Not heredocs: a shift, a here-string, a quoted "<<".
  Parsed("FROM alpine\nRUN echo $((1<<2)) && cat <<< hi && echo \"<<EOF\"\n");
}

TEST(DockerfileParseTest, OnlyArgMayComeBeforeTheFirstFrom) {
  Dockerfile file = Parsed("ARG BASE=alpine\nFROM $BASE\n");
  EXPECT_EQ(file.instructions.size(), 2u);
  EXPECT_EQ(ParseError("ARG A=1\nRUN echo\nFROM alpine\n"),
            "Dockerfile line 2: RUN comes before the first FROM (only ARG may)");
}

TEST(DockerfileParseTest, ADockerfileWithoutFromIsRefused) {
  EXPECT_EQ(ParseError(""), "the Dockerfile has no FROM");
  EXPECT_EQ(ParseError("# only a comment\nARG A=1\n"), "the Dockerfile has no FROM");
}

TEST(DockerfileParseTest, TextOverOneMebibyteIsRefused) {
  const std::string text = "FROM alpine\n" + std::string(1 << 20, '#');
  EXPECT_EQ(ParseError(text), "the Dockerfile is over 1 MiB");
}

TEST(DockerfileParseTest, AnInstructionWithoutArgumentsIsRefused) {
  EXPECT_EQ(ParseError("FROM alpine\nRUN\n"), "Dockerfile line 2: RUN has no arguments");
  EXPECT_EQ(ParseError("FROM alpine\nCOPY --link\n"), "Dockerfile line 2: COPY has no arguments");
}

TEST(DockerfileParseTest, AContinuationAtTheEndOfTheFileIsRefused) {
  EXPECT_EQ(ParseError("FROM alpine\nRUN echo \\\n"),
            "Dockerfile line 2: the instruction continues past the end of the file (the last line ends with '\\')");
  EXPECT_EQ(ParseError("FROM alpine\nRUN echo \\\n# only a comment\n\n").substr(0, 19), "Dockerfile line 2: ");
}

TEST(DockerfileParseTest, CrlfLineEndingsAndAByteOrderMarkAreTaken) {
  Dockerfile file = Parsed("\xEF\xBB\xBF# escape=`\r\nFROM alpine\r\nRUN a `\r\n  b\r\n");
  EXPECT_EQ(file.escape, '`');
  ASSERT_EQ(file.instructions.size(), 2u);
  EXPECT_EQ(file.instructions[1].rest, "a   b");
}

// ---- ExpandVariables ----

TEST(DockerfileExpandTest, NamesBracesAndModifiersExpandAsInDocker) {
  EXPECT_EQ(Expanded("$A/${A}/$UNSET/${UNSET}"), "a/a//");
  EXPECT_EQ(Expanded("${UNSET:-d} ${E:-d} ${A:-d}"), "d d a");
  EXPECT_EQ(Expanded("${UNSET-d} ${E-d}"), "d ") << "without the colon an empty value is set";
  EXPECT_EQ(Expanded("${UNSET:+p} ${E:+p} ${A:+p}"), "  p");
  EXPECT_EQ(Expanded("${UNSET+p} ${E+p}"), " p");
  EXPECT_EQ(Expanded("${UNSET:-${A}-x}"), "a-x") << "the word is expanded too";
  EXPECT_EQ(Expanded("$A_B ${A}_B"), " a_B") << "a name runs as far as letters, digits and '_' go";
  EXPECT_EQ(Expanded("cost: $ 5 $"), "cost: $ 5 $") << "a '$' no name follows is literal";
}

TEST(DockerfileExpandTest, TheEscapeBeforeDollarKeepsItLiteralAndOtherEscapesStay) {
  EXPECT_EQ(Expanded("\\$A \\${A}"), "$A ${A}");
  EXPECT_EQ(Expanded("a\\ b \\\"c\\\""), "a\\ b \\\"c\\\"") << "kept for the word split";
  EXPECT_EQ(Expanded("`$A \\$A", '`'), "$A \\a") << "under the backtick escape a backslash is text";
}

TEST(DockerfileExpandTest, SingleQuotesStopExpansionDoubleQuotesDoNotAndBothAreKept) {
  EXPECT_EQ(Expanded("'$A' \"$A\" \"${SP}\""), "'$A' \"a\" \"x y\"");
  EXPECT_EQ(Expanded("\"\\$A\""), "\"$A\"");
}

TEST(DockerfileExpandTest, MalformedSubstitutionsAreBadRequests) {
  for (const char* word : {"${A", "${", "${}", "${:-x}", "${A:-x", "${A:?x}", "${A%x}", "'open", "\"open"}) {
    auto expanded = Expand(word);
    ASSERT_FALSE(expanded.ok()) << word;
    EXPECT_EQ(expanded.error().code, ErrorCode::kBadRequest) << word;
  }
  EXPECT_NE(Expand("${A").error().message.find("missing '}'"), std::string::npos);
}

// ---- EvaluateDockerfile ----

TEST(DockerfileEvaluateTest, StagesSplitAtFromWithLowerCaseNamesAndTheirBases) {
  std::vector<std::string> asked;
  BaseConfig base = [&](const std::string& image) -> Result<storage::ImageConfig> {
    asked.push_back(image);
    storage::ImageConfig config;
    config.env = {"FROM_IMAGE=" + image};
    return config;
  };
  BuildPlan plan = Evaluated(
      "FROM --platform=$BUILDPLATFORM python:3.12 AS Build\n"
      "RUN make\n"
      "FROM scratch\n"
      "FROM BUILD as final\n"
      "FROM python:3.12\n",
      {}, "", base);
  ASSERT_EQ(plan.stages.size(), 4u);
  EXPECT_EQ(plan.stages[0].name, "build");
  EXPECT_EQ(plan.stages[0].base, "python:3.12");
  EXPECT_EQ(plan.stages[0].platform, "linux/" + storage::HostPlatform().architecture);
  EXPECT_FALSE(plan.stages[0].base_stage);
  EXPECT_EQ(plan.stages[0].config.env, Argv{"FROM_IMAGE=python:3.12"});
  EXPECT_EQ(plan.stages[1].base, "scratch");
  EXPECT_TRUE(plan.stages[1].config.env.empty()) << "scratch is an empty config";
  EXPECT_EQ(plan.stages[2].name, "final");
  EXPECT_EQ(plan.stages[2].base_stage, 0);
  EXPECT_EQ(plan.stages[2].config.env, Argv{"FROM_IMAGE=python:3.12"});
  EXPECT_EQ(asked, Argv{"python:3.12"}) << "asked once per image, never for scratch or a stage";
}

TEST(DockerfileEvaluateTest, GlobalArgsAreSeenByFromLinesAndByStagesThatDeclareThem) {
  BuildPlan plan = Evaluated(
      "ARG REPO=library/python\n"
      "ARG TAG=3.11\n"
      "ARG PLATFORM\n"
      "FROM --platform=$PLATFORM ${REPO}:${TAG}\n"
      "RUN echo\n"
      "ARG TAG\n"
      "RUN echo\n",
      {{"TAG", "3.12"}});
  ASSERT_EQ(plan.stages.size(), 1u);
  EXPECT_EQ(plan.stages[0].base, "library/python:3.12") << "a build arg overrides a global default";
  EXPECT_EQ(plan.stages[0].platform, "");
  ASSERT_EQ(plan.stages[0].steps.size(), 3u);
  EXPECT_EQ(plan.stages[0].steps[0].run_env, Argv{"PATH=/usr/bin"}) << "not declared in the stage: not in scope";
  EXPECT_EQ(plan.stages[0].steps[2].run_env, (Argv{"PATH=/usr/bin", "TAG=3.12"}));
}

TEST(DockerfileEvaluateTest, PlatformArgsAreTheHostsAndFromMayNameNoOtherPlatform) {
  const std::string arch = storage::HostPlatform().architecture;
  BuildPlan plan = Evaluated(
      "ARG TARGETPLATFORM\n"
      "FROM --platform=$TARGETPLATFORM alpine\n"
      "RUN echo\n"
      "ARG TARGETARCH\n"
      "ARG BUILDOS\n"
      "RUN echo\n");
  EXPECT_EQ(plan.stages[0].platform, "linux/" + arch) << "declared again globally: still the automatic value";
  ASSERT_EQ(plan.stages[0].steps.size(), 4u);
  EXPECT_EQ(plan.stages[0].steps[0].run_env, Argv{"PATH=/usr/bin"}) << "undeclared in the stage: not in scope";
  EXPECT_EQ(plan.stages[0].steps[3].run_env, (Argv{"PATH=/usr/bin", "TARGETARCH=" + arch, "BUILDOS=linux"}));
  const std::string other = arch == "s390x" ? "riscv64" : "s390x";
  for (const std::string& platform : Argv{"linux/" + other, "windows/" + arch, "linux", "linux/" + arch + "x"}) {
    const std::string refused = EvaluateError("FROM alpine\nFROM --platform=" + platform + " alpine\n");
    EXPECT_NE(refused.find("line 2"), std::string::npos) << refused;
    EXPECT_NE(refused.find("only (nothing is emulated)"), std::string::npos) << refused;
  }
  EXPECT_EQ(Evaluated("FROM --platform=linux/" + arch + "/v2 alpine\n").stages[0].platform, "linux/" + arch + "/v2")
      << "a variant of the host's architecture";
}

TEST(DockerfileEvaluateTest, AStageArgWithoutDefaultTakesTheGlobalValue) {
  Step step = LastStep("ARG V=1\nFROM alpine\nARG V\nARG W\nWORKDIR /$V$W\n");
  EXPECT_EQ(step.config.working_dir, "/1");
  step = LastStep("FROM alpine\nARG V=1\nWORKDIR /$V\n", {{"V", "2"}});
  EXPECT_EQ(step.config.working_dir, "/2") << "a build arg overrides the stage's default";
}

TEST(DockerfileEvaluateTest, BuildArgsNoArgDeclaresAreListedSorted) {
  BuildPlan plan = Evaluated("ARG USED\nFROM alpine\nARG ALSO=1 B\n", {{"ZED", "1"}, {"USED", "1"}, {"B", "1"}, {"AA", "1"}});
  EXPECT_EQ(plan.unused_build_args, (Argv{"AA", "ZED"}));
}

TEST(DockerfileEvaluateTest, EnvOverridesArgAndRunGetsTheArgsNoEnvOverrides) {
  Step step = LastStep(
      "FROM alpine\n"
      "ARG MODE=debug OTHER=x NOVALUE\n"
      "ENV MODE=release\n"
      "RUN echo $MODE\n");
  EXPECT_EQ(step.kind, Step::Kind::kRun);
  EXPECT_EQ(step.argv, (Argv{"/bin/sh", "-c", "echo $MODE"})) << "RUN's text is left to the shell";
  EXPECT_EQ(step.run_env, (Argv{"PATH=/usr/bin", "MODE=release", "OTHER=x"}));

  step = LastStep("FROM alpine\nARG MODE=debug\nENV MODE=release\nWORKDIR /$MODE\n");
  EXPECT_EQ(step.config.working_dir, "/release");
}

TEST(DockerfileEvaluateTest, EnvPairsExpandAgainstTheEnvBeforeTheLine) {
  Step step = LastStep(
      "FROM alpine\n"
      "ENV A=1\n"
      "ENV A=2 B=$A C=\"two words\" D=a\\ b E='$A' F=${PATH}:/x\n");
  EXPECT_EQ(step.config.env,
            (Argv{"PATH=/usr/bin", "A=2", "B=1", "C=two words", "D=a b", "E=$A", "F=/usr/bin:/x"}));
}

TEST(DockerfileEvaluateTest, EnvReplacesInPlaceAndTakesTheLegacyForm) {
  Step step = LastStep("FROM alpine\nENV PATH=/opt/bin:$PATH\nENV GREETING hello  big world\nENV Q \"quoted\"\n");
  EXPECT_EQ(step.config.env, (Argv{"PATH=/opt/bin:/usr/bin", "GREETING=hello  big world", "Q=quoted"}));
  EXPECT_EQ(EvaluateError("FROM alpine\nENV A=1 B\n"), "Dockerfile line 2: ENV: \"B\" is no NAME=value");
  EXPECT_EQ(EvaluateError("FROM alpine\nENV ALONE\n"), "Dockerfile line 2: ENV ALONE has no value (NAME=value)");
  EXPECT_EQ(EvaluateError("FROM alpine\nENV =x\n"), "Dockerfile line 2: ENV names an empty key");
}

TEST(DockerfileEvaluateTest, ArgDefaultsSeeTheArgsBeforeThemOnTheSameLine) {
  Step step = LastStep("FROM alpine\nARG A=1 B=${A}2\nRUN true\n");
  EXPECT_EQ(step.run_env, (Argv{"PATH=/usr/bin", "A=1", "B=12"}));
}

TEST(DockerfileEvaluateTest, LabelsAndMaintainerSetLabels) {
  Step step = LastStep(
      "FROM alpine\n"
      "ARG V=1.0\n"
      "LABEL org.opencontainers.image.version=$V \"com.example.desc\"=\"a b\"\n"
      "MAINTAINER Jo <jo@example.com>\n");
  EXPECT_EQ(step.config.labels, (std::map<std::string, std::string>{{"org.opencontainers.image.version", "1.0"},
                                                                    {"com.example.desc", "a b"},
                                                                    {"maintainer", "Jo <jo@example.com>"}}));
}

TEST(DockerfileEvaluateTest, ExposeNormalisesPortsExpandsRangesAndDedupes) {
  Step step = LastStep("FROM alpine\nARG P=8080\nEXPOSE 80 $P/tcp 53/UDP 80/tcp\nEXPOSE 9000-9002/sctp 80\n");
  EXPECT_EQ(step.config.exposed_ports,
            (Argv{"80/tcp", "8080/tcp", "53/udp", "9000/sctp", "9001/sctp", "9002/sctp"}));
  for (const char* bad : {"http", "0", "65536", "80/icmp", "90-80", "1-1001", "80/"}) {
    EXPECT_NE(EvaluateError(std::string("FROM alpine\nEXPOSE ") + bad + "\n").find("Dockerfile line 2: EXPOSE"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(LastStep("FROM alpine\nEXPOSE 1-1000\n").config.exposed_ports.size(), 1000u);
}

TEST(DockerfileEvaluateTest, WorkdirIsRelativeToThePreviousOneAndCleaned) {
  BaseConfig base = [](const std::string&) -> Result<storage::ImageConfig> {
    storage::ImageConfig config;
    config.working_dir = "/srv";
    return config;
  };
  BuildPlan plan = Evaluated(
      "FROM img\nWORKDIR app\nWORKDIR ./src//lib/\nWORKDIR ../../../../..\nWORKDIR /a/./b/../c\n"
      "FROM scratch\nWORKDIR rel\n",
      {}, "", base);
  ASSERT_EQ(plan.stages.size(), 2u);
  const auto& steps = plan.stages[0].steps;
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].kind, Step::Kind::kWorkdir);
  EXPECT_EQ(steps[0].config.working_dir, "/srv/app");
  EXPECT_EQ(steps[1].config.working_dir, "/srv/app/src/lib");
  EXPECT_EQ(steps[2].config.working_dir, "/") << "never above the root";
  EXPECT_EQ(steps[3].config.working_dir, "/a/c");
  EXPECT_EQ(plan.stages[1].config.working_dir, "/rel") << "with none before, relative to /";
}

TEST(DockerfileEvaluateTest, UserIsExpandedAndKeptAsWritten) {
  EXPECT_EQ(LastStep("FROM alpine\nARG UID=1000\nUSER ${UID}:staff\n").config.user, "1000:staff");
  EXPECT_EQ(EvaluateError("FROM alpine\nUSER $NOBODY\n"), "Dockerfile line 2: USER $NOBODY expands to nothing");
}

TEST(DockerfileEvaluateTest, ShellFormsUseTheShellAndJsonArraysAreExecForms) {
  BuildPlan plan = Evaluated(
      "FROM alpine\n"
      "RUN [\"/bin/echo\", \"$HOME\"]\n"
      "RUN [not json\n"
      "SHELL [\"/bin/bash\", \"-o\", \"pipefail\", \"-c\"]\n"
      "RUN a | b\n"
      "CMD [\"serve\", \"--port\", \"80\"]\n"
      "ENTRYPOINT exec app\n");
  const auto& steps = plan.stages[0].steps;
  ASSERT_EQ(steps.size(), 6u);
  EXPECT_EQ(steps[0].argv, (Argv{"/bin/echo", "$HOME"}));
  EXPECT_EQ(steps[1].argv, (Argv{"/bin/sh", "-c", "[not json"}));
  EXPECT_EQ(steps[2].kind, Step::Kind::kConfig);
  EXPECT_EQ(steps[2].shell, (Argv{"/bin/bash", "-o", "pipefail", "-c"}));
  EXPECT_EQ(steps[1].shell, (Argv{"/bin/sh", "-c"})) << "each step carries the shell after it";
  EXPECT_EQ(steps[3].argv, (Argv{"/bin/bash", "-o", "pipefail", "-c", "a | b"}));
  EXPECT_EQ(steps[4].config.cmd, (Argv{"serve", "--port", "80"}));
  EXPECT_EQ(steps[5].config.entrypoint, (Argv{"/bin/bash", "-o", "pipefail", "-c", "exec app"}));
  EXPECT_EQ(steps[5].config.cmd, (Argv{"serve", "--port", "80"})) << "a CMD set in the stage stays";
}

TEST(DockerfileEvaluateTest, ShellNeedsAJsonArrayAndJsonArraysHoldStringsOnly) {
  EXPECT_EQ(EvaluateError("FROM alpine\nSHELL /bin/bash -c\n"),
            "Dockerfile line 2: SHELL takes a JSON array of strings, e.g. SHELL [\"/bin/bash\", \"-c\"]");
  EXPECT_NE(EvaluateError("FROM alpine\nSHELL []\n"), "");
  EXPECT_EQ(EvaluateError("FROM alpine\nCMD [\"a\", 1]\n"),
            "Dockerfile line 2: CMD: a JSON array here must hold strings only");
  EXPECT_EQ(EvaluateError("FROM alpine\nRUN []\n"), "Dockerfile line 2: RUN has an empty command");
}

TEST(DockerfileEvaluateTest, EntrypointClearsACmdInheritedFromTheBase) {
  BaseConfig base = [](const std::string&) -> Result<storage::ImageConfig> {
    storage::ImageConfig config;
    config.cmd = {"python3"};
    return config;
  };
  BuildPlan plan = Evaluated(
      "FROM python\nENTRYPOINT [\"tini\", \"--\"]\n"
      "FROM python AS kept\n"
      "FROM kept\nCMD [\"serve\"]\n"
      "FROM 2\nENTRYPOINT [\"x\"]\n",
      {}, "", base);
  ASSERT_EQ(plan.stages.size(), 4u);
  EXPECT_EQ(plan.stages[0].config.entrypoint, (Argv{"tini", "--"}));
  EXPECT_TRUE(plan.stages[0].config.cmd.empty());
  EXPECT_EQ(plan.stages[1].config.cmd, Argv{"python3"}) << "no ENTRYPOINT, the base's CMD stays";
  EXPECT_EQ(plan.stages[3].base, "2") << "a number after FROM is an image, not a stage";
  EXPECT_TRUE(plan.stages[3].config.cmd.empty());
  EXPECT_EQ(Evaluated("FROM python AS a\nCMD [\"serve\"]\nFROM a\nENTRYPOINT [\"x\"]\n", {}, "", base)
                .stages[1]
                .config.cmd,
            Argv{}) << "a CMD from the base stage is inherited, and cleared";
}

TEST(DockerfileEvaluateTest, CopySourcesAndDestinationsResolveUnderTheWorkdir) {
  BuildPlan plan = Evaluated(
      "FROM alpine\n"
      "ARG SRC=src\n"
      "WORKDIR /app\n"
      "COPY $SRC \"a b.txt\" lib/\n"
      "COPY x .\n"
      "COPY y conf/app.ini\n"
      "COPY [\"$SRC/one file\", \"/abs/dir/\"]\n"
      "ADD z.tar /\n");
  const auto& steps = plan.stages[0].steps;
  ASSERT_EQ(steps.size(), 7u);
  EXPECT_EQ(steps[2].kind, Step::Kind::kCopy);
  EXPECT_EQ(steps[2].sources, (Argv{"src", "a b.txt"}));
  EXPECT_EQ(steps[2].dest, "/app/lib/");
  EXPECT_FALSE(steps[2].add);
  EXPECT_EQ(steps[2].from, "");
  EXPECT_EQ(steps[3].dest, "/app/");
  EXPECT_EQ(steps[4].dest, "/app/conf/app.ini");
  EXPECT_EQ(steps[5].sources, Argv{"src/one file"});
  EXPECT_EQ(steps[5].dest, "/abs/dir/");
  EXPECT_TRUE(steps[6].add);
  EXPECT_EQ(steps[6].dest, "/");
}

TEST(DockerfileEvaluateTest, CopyFromNamesAnEarlierStageByNameOrIndexOrElseAnImage) {
  BuildPlan plan = Evaluated(
      "FROM golang AS Build\n"
      "FROM alpine\n"
      "COPY --from=BUILD /out /a\n"
      "COPY --from=0 /out /b\n"
      "COPY --from=nginx:1.27 /etc/nginx /c\n");
  const auto& steps = plan.stages[1].steps;
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].from, "BUILD");
  EXPECT_EQ(steps[0].from_stage, 0);
  EXPECT_EQ(steps[1].from_stage, 0);
  EXPECT_EQ(steps[2].from, "nginx:1.27");
  EXPECT_FALSE(steps[2].from_stage);
}

TEST(DockerfileEvaluateTest, CopyFromThisStageOrALaterOneIsRefused) {
  const std::string later = "Dockerfile line 2: COPY --from=";
  EXPECT_EQ(EvaluateError("FROM alpine AS a\nCOPY --from=a /x /y\n"),
            later + "a names this stage or a later one: only an earlier stage can be copied from");
  EXPECT_EQ(EvaluateError("FROM alpine\nCOPY --from=b /x /y\nFROM alpine AS b\n").substr(0, later.size() + 1),
            later + "b");
  EXPECT_EQ(EvaluateError("FROM alpine\nCOPY --from=1 /x /y\nFROM alpine\n").substr(0, later.size() + 1), later + "1");
  EXPECT_EQ(EvaluateError("FROM alpine\nCOPY --from=7 /x /y\n").substr(0, later.size() + 1), later + "7");
}

TEST(DockerfileEvaluateTest, CopyNeedsASourceAndADestination) {
  EXPECT_EQ(EvaluateError("FROM alpine\nCOPY only\n"),
            "Dockerfile line 2: COPY needs at least one source and a destination");
  EXPECT_EQ(EvaluateError("FROM alpine\nADD [\"only\"]\n"),
            "Dockerfile line 2: ADD needs at least one source and a destination");
}

TEST(DockerfileEvaluateTest, ChownIsExpandedAndChmodIsOctal) {
  Step step = LastStep("FROM alpine\nARG U=app\nCOPY --chown=$U:$U --chmod=0755 run.sh /bin/\n");
  EXPECT_EQ(step.chown, "app:app");
  EXPECT_EQ(step.chmod, 0755u);
  EXPECT_EQ(LastStep("FROM alpine\nADD --chmod=644 a /b\n").chmod, 0644u);
  EXPECT_FALSE(LastStep("FROM alpine\nCOPY a /b\n").chmod);
  EXPECT_EQ(EvaluateError("FROM alpine\nCOPY --chmod=u+x a /b\n"),
            "Dockerfile line 2: COPY --chmod=u+x is no octal mode (755, 0644)");
  EXPECT_NE(EvaluateError("FROM alpine\nCOPY --chmod=0999 a /b\n"), "");
}

TEST(DockerfileEvaluateTest, AddFromAUrlIsRefused) {
  EXPECT_EQ(EvaluateError("FROM alpine\nADD https://example.com/x.tgz /x\n"),
            "Dockerfile line 2: ADD from a URL is not supported: fetch it with RUN under the build's network policy");
  EXPECT_TRUE(LastStep("FROM alpine\nCOPY https://not/a/url /x\n").sources.size() == 1)
      << "COPY takes it as a path";
}

TEST(DockerfileEvaluateTest, TheTargetIsTheLastStageEvaluated) {
  std::vector<std::string> asked;
  BaseConfig base = [&](const std::string& image) -> Result<storage::ImageConfig> {
    asked.push_back(image);
    return storage::ImageConfig{};
  };
  BuildPlan plan = Evaluated("FROM a AS deps\nFROM b AS Test\nRUN make test\nFROM c AS prod\n", {}, "TEST", base);
  ASSERT_EQ(plan.stages.size(), 2u);
  EXPECT_EQ(plan.stages[1].name, "test");
  EXPECT_EQ(asked, (Argv{"a", "b"})) << "the stages after the target are not evaluated";
  EXPECT_EQ(EvaluateError("FROM a AS deps\n", {}, "prod"), "the Dockerfile has no stage named \"prod\"");
}

TEST(DockerfileEvaluateTest, AStageBasedOnAStageInheritsItsConfigAndShell) {
  BuildPlan plan = Evaluated(
      "FROM alpine AS base\n"
      "SHELL [\"/bin/ash\", \"-c\"]\n"
      "ENV A=1\n"
      "WORKDIR /w\n"
      "ARG SCOPED=1\n"
      "FROM base\n"
      "RUN echo $SCOPED\n"
      "FROM alpine\n"
      "RUN echo\n");
  ASSERT_EQ(plan.stages.size(), 3u);
  const Step& inherited = plan.stages[1].steps[0];
  EXPECT_EQ(inherited.argv, (Argv{"/bin/ash", "-c", "echo $SCOPED"}));
  EXPECT_EQ(inherited.run_env, (Argv{"PATH=/usr/bin", "A=1"})) << "ARGs end with their stage";
  EXPECT_EQ(inherited.config.working_dir, "/w");
  EXPECT_EQ(plan.stages[2].steps[0].argv, (Argv{"/bin/sh", "-c", "echo"})) << "an image base has the default shell";
}

TEST(DockerfileEvaluateTest, StageNamesAreUniqueAndWellFormed) {
  EXPECT_EQ(EvaluateError("FROM a AS x\nFROM b AS X\n"), "Dockerfile line 2: FROM: the stage name \"x\" is taken (line 1)");
  EXPECT_EQ(EvaluateError("FROM a AS 1x\n"),
            "Dockerfile line 1: FROM: \"1x\" is no stage name (a letter, then letters, digits, '-', '_' or '.')");
  EXPECT_EQ(EvaluateError("FROM a b\n"),
            "Dockerfile line 1: FROM takes an image and an optional stage name: FROM IMAGE [AS NAME]");
  EXPECT_EQ(EvaluateError("FROM $NONE\n"), "Dockerfile line 1: FROM $NONE names no image");
}

TEST(DockerfileEvaluateTest, ABaseConfigErrorIsAnsweredAsIs) {
  BaseConfig base = [](const std::string& image) -> Result<storage::ImageConfig> {
    return MakeError(ErrorCode::kNotFound, "no image " + image, "image_not_found");
  };
  auto plan = EvaluateDockerfile(Parsed("FROM ghost\nRUN x\n"), {}, "", base);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(plan.error().message, "no image ghost");
  EXPECT_EQ(plan.error().detail_code, "image_not_found");
}

TEST(DockerfileEvaluateTest, EveryStepCarriesTheConfigAfterItAndTheStageTheLast) {
  BuildPlan plan = Evaluated("FROM alpine\nENV A=1\nUSER app\nENV A=2\nFROM alpine\n");
  ASSERT_EQ(plan.stages.size(), 2u);
  const auto& steps = plan.stages[0].steps;
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].line, 2);
  EXPECT_EQ(steps[0].original, "ENV A=1");
  EXPECT_EQ(steps[0].config.env, (Argv{"PATH=/usr/bin", "A=1"}));
  EXPECT_EQ(steps[0].config.user, "");
  EXPECT_EQ(steps[1].config.user, "app");
  EXPECT_EQ(steps[2].config.env, (Argv{"PATH=/usr/bin", "A=2"}));
  EXPECT_EQ(plan.stages[0].config.env, steps[2].config.env);
  EXPECT_EQ(plan.stages[1].config.env, Argv{"PATH=/usr/bin"}) << "no step: the base's config";
}

TEST(DockerfileEvaluateTest, AnExpansionErrorNamesTheLine) {
  EXPECT_EQ(EvaluateError("FROM alpine\nENV A=1\nWORKDIR ${A\n"),
            "Dockerfile line 3: WORKDIR: \"${A\": missing '}'");
  EXPECT_NE(EvaluateError("ARG A=${\nFROM alpine\n").find("Dockerfile line 1: ARG: "), std::string::npos);
}

}  // namespace
}  // namespace bulkhead::build

namespace bulkhead::build {
namespace {

// What the fuzzer found (tests/fuzz/dockerfile.cc): each is refused quickly and in bounded
// memory, never a crash.
TEST(DockerfileHostileTest, DeeplyNestedSubstitutionsAreRefusedNotRecursedInto) {
  std::string word = "x";
  for (int i = 0; i < 10000; i++) word = "${A:-" + word + "}";
  auto expanded = Expand(word);
  ASSERT_FALSE(expanded.ok());
  EXPECT_NE(expanded.error().message.find("nested more than 32 deep"), std::string::npos);
  std::string fine = "x";
  for (int i = 0; i < 30; i++) fine = "${NOPE:-" + fine + "}";
  EXPECT_EQ(Expanded(fine), "x");
  EXPECT_NE(EvaluateError("FROM img\nENV A=" + word + "\n").find("line 2"), std::string::npos);
}

TEST(DockerfileHostileTest, AConfigGrowingOnEveryLineIsRefusedAtABound) {
  std::string text = "FROM img\n";
  for (int i = 0; i < 60; i++) text += "EXPOSE " + std::to_string(1000 + i * 1000) + "-" + std::to_string(1998 + i * 1000) + "\n";
  EXPECT_NE(EvaluateError(text).find("at most 1000 ports"), std::string::npos);
  std::string env = "FROM img\nENV BIG=" + std::string(500 * 1024, 'v') + "\n";
  for (int i = 0; i < 1500; i++) env += "USER a\n";
  EXPECT_NE(EvaluateError(env).find("grows too large"), std::string::npos);
}

}  // namespace
}  // namespace bulkhead::build
