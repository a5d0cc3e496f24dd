// E2B template definitions as Dockerfiles: each plan is parsed and evaluated by the real
// Dockerfile front end, so what the builder would run is what is checked.
#include <gtest/gtest.h>

#include "build/dockerfile.h"
#include "common/base64.h"
#include "e2b/template_plan.h"

namespace bulkhead::e2b {
namespace {

using json = nlohmann::json;

const std::string kHash(64, 'a');

Result<TemplateBase> NoTemplates(const std::string& name) {
  return MakeError(ErrorCode::kNotFound, "template " + name + " not found");
}

struct Evaluated {
  TemplatePlan plan;
  build::Stage stage;
};

Evaluated Evaluate(const json& body) {
  Result<TemplatePlan> plan = PlanTemplateBuild(body, "demo", NoTemplates);
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  Result<build::Dockerfile> file = build::ParseDockerfile(plan->dockerfile);
  EXPECT_TRUE(file.ok()) << file.error().message << "\n" << plan->dockerfile;
  Result<build::BuildPlan> built =
      build::EvaluateDockerfile(*file, {}, "", [](const std::string&) { return storage::ImageConfig{}; });
  EXPECT_TRUE(built.ok()) << built.error().message << "\n" << plan->dockerfile;
  EXPECT_EQ(built->stages.back().steps.size(), plan->step_labels.size());
  return {*plan, built->stages.back()};
}

std::string ErrorOf(const json& body) {
  Result<TemplatePlan> plan = PlanTemplateBuild(body, "demo", NoTemplates);
  EXPECT_FALSE(plan.ok());
  return plan.ok() ? "" : plan.error().message;
}

TEST(E2bTemplatePlan, TheDefaultBaseIsTheHostImageWithADefaultSudoUserInItsHome) {
  const Evaluated e = Evaluate({{"fromImage", "e2bdev/base"}, {"force", false}, {"steps", json::array()}});
  EXPECT_EQ(e.plan.base_image, "host");
  EXPECT_EQ(e.stage.base, "host");
  EXPECT_EQ(e.stage.config.user, "user");
  EXPECT_EQ(e.stage.config.working_dir, "/home/user");
  EXPECT_EQ(e.stage.config.labels.at(kTemplateLabel), "demo");
  ASSERT_GE(e.stage.steps.size(), 2u);
  const build::Step& make_user = e.stage.steps[1];
  EXPECT_EQ(make_user.kind, build::Step::Kind::kRun);
  EXPECT_EQ(make_user.config.user, "root");
  EXPECT_EQ(make_user.argv.back(), "user");  // the name is an argument, never script text
  EXPECT_NE(make_user.argv[2].find("sudoers.d"), std::string::npos);
  for (const std::string& label : e.plan.step_labels) EXPECT_TRUE(label == "base" || label == "finalize") << label;
}

TEST(E2bTemplatePlan, StepsKeepTheirNumbersCommandsTheirTextAndRunAsTheirUser) {
  const std::string command = "echo \"$HOME\" 'a\\b' && printf '%s\\n' `id -u` > out.txt\necho two";
  const Evaluated e = Evaluate({{"fromImage", "debian:bookworm-slim"},
                                {"steps",
                                 {{{"type", "RUN"}, {"args", {command}}},
                                  {{"type", "RUN"}, {"args", {"apt-get update", "root"}}, {"force", false}},
                                  {{"type", "ENV"}, {"args", {"GREETING", "say \"hi\" to $USER, it's", "B", ""}}},
                                  {{"type", "WORKDIR"}, {"args", {"app"}}},
                                  {{"type", "USER"}, {"args", {"builder", "true"}}},
                                  {{"type", "RUN"}, {"args", {"whoami"}}}}}});
  EXPECT_EQ(e.plan.base_image, "debian:bookworm-slim");
  EXPECT_FALSE(e.plan.force);
  std::vector<const build::Step*> runs;
  for (size_t i = 0; i < e.stage.steps.size(); ++i) {
    const build::Step& step = e.stage.steps[i];
    if (step.kind == build::Step::Kind::kRun && step.argv[3] == "e2b-run") {
      runs.push_back(&step);
      EXPECT_TRUE(e.plan.step_labels[i] == "1" || e.plan.step_labels[i] == "2" || e.plan.step_labels[i] == "6");
    }
  }
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0]->argv.back(), command);  // byte for byte, newline and quotes too
  EXPECT_EQ(runs[0]->config.user, "user");
  EXPECT_EQ(runs[1]->argv.back(), "apt-get update");
  EXPECT_EQ(runs[1]->config.user, "root");
  EXPECT_EQ(runs[2]->config.user, "builder");
  EXPECT_EQ(runs[2]->config.working_dir, "/home/user/app");
  EXPECT_EQ(e.stage.config.user, "builder");
  const auto& env = e.stage.config.env;
  EXPECT_NE(std::find(env.begin(), env.end(), "GREETING=say \"hi\" to , it's"), env.end());  // $USER unset: ""
  EXPECT_NE(std::find(env.begin(), env.end(), "B="), env.end());
}

TEST(E2bTemplatePlan, CopyTakesTheUploadedSetUnderItsHashOwnedByTheCurrentUser) {
  const Evaluated e = Evaluate({{"fromImage", "alpine:3"},
                                {"steps",
                                 {{{"type", "COPY"}, {"args", {"hello.txt", "/app/", "", ""}}, {"filesHash", kHash}},
                                  {{"type", "COPY"},
                                   {"args", {"src/*.py", "lib/$x", "root", "0755"}},
                                   {"filesHash", std::string(64, 'b')},
                                   {"force", true}},
                                  {{"type", "COPY"}, {"args", {"./*.txt", "t"}}, {"filesHash", kHash}}}}});
  EXPECT_TRUE(e.plan.force);
  EXPECT_EQ(e.plan.files_hashes, (std::vector<std::string>{kHash, std::string(64, 'b')}));
  std::vector<const build::Step*> copies;
  for (const build::Step& step : e.stage.steps)
    if (step.kind == build::Step::Kind::kCopy) copies.push_back(&step);
  ASSERT_EQ(copies.size(), 3u);
  EXPECT_EQ(copies[0]->sources, std::vector<std::string>{kHash + "/hello.txt"});
  EXPECT_EQ(copies[0]->dest, "/app/");
  EXPECT_EQ(copies[0]->chown, "user:user");
  EXPECT_EQ(copies[1]->sources, std::vector<std::string>{std::string(64, 'b') + "/src"});
  EXPECT_EQ(copies[1]->dest, "/home/user/lib/$x");  // `$` kept literal
  EXPECT_EQ(copies[1]->chown, "root:root");
  ASSERT_TRUE(copies[1]->chmod.has_value());
  EXPECT_EQ(*copies[1]->chmod, 0755u);
  EXPECT_EQ(copies[2]->sources, std::vector<std::string>{kHash + "/."});
}

TEST(E2bTemplatePlan, StartAndReadyCommandsBecomeLabelsAnyTextSurvives) {
  const std::string start = "python3 -m http.server 8000 \\\n --bind \"$HOST\"";
  const Evaluated e = Evaluate({{"fromImage", "python:3"}, {"startCmd", start}, {"readyCmd", "[ -f /tmp/x ]"}});
  EXPECT_EQ(Base64Decode(e.stage.config.labels.at(kStartCmdLabel)), start);
  EXPECT_EQ(Base64Decode(e.stage.config.labels.at(kReadyCmdLabel)), "[ -f /tmp/x ]");
  EXPECT_EQ(e.plan.step_labels.back(), "finalize");
}

TEST(E2bTemplatePlan, FromTemplateInheritsItsUserAndSkipsTheBasePhase) {
  const auto resolve = [](const std::string& name) -> Result<TemplateBase> {
    if (name != "parent") return MakeError(ErrorCode::kNotFound, "no");
    return TemplateBase{"parent", "worker"};
  };
  Result<TemplatePlan> plan = PlanTemplateBuild(
      {{"fromTemplate", "parent"}, {"steps", {{{"type", "COPY"}, {"args", {"a", "b"}}, {"filesHash", kHash}}}}}, "child",
      resolve);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_TRUE(plan->base_is_template);
  EXPECT_EQ(plan->dockerfile.find("FROM parent\nCOPY --chown=worker:worker"), 0u) << plan->dockerfile;
  EXPECT_FALSE(PlanTemplateBuild({{"fromTemplate", "other"}}, "child", resolve).ok());
}

TEST(E2bTemplatePlan, HostileOrMalformedDefinitionsAreRefusedByField) {
  EXPECT_NE(ErrorOf(json::object()).find("exactly one of fromImage and fromTemplate"), std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"fromTemplate", "b"}}).find("exactly one"), std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a\nRUN x"}}).find("fromImage"), std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "registry.example'.com/a"}}).find("fromImage"), std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"steps", {{{"type", "COPY"}, {"args", {"it's.txt", "/x"}}, {"filesHash", kHash}}}}})
                .find("quote"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"steps", {{{"type", "WORKDIR"}, {"args", {"/a\"b"}}}}}}).find("quote"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"steps", {{{"type", "ADD"}}}}}).find("steps[0].type"), std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"steps", {{{"type", "RUN"}, {"args", {1}}}}}}).find("steps[0].args"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"steps", {{{"type", "WORKDIR"}, {"args", {"/x\nRUN evil"}}}}}})
                .find("line break"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"steps", {{{"type", "ENV"}, {"args", {"A B", "x"}}}}}}).find("variable name"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"steps", {{{"type", "ENV"}, {"args", {"A", "${B:x}"}}}}}}).find("not supported"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"steps", {{{"type", "ENV"}, {"args", {"A", "x\\"}}}}}}).find("backslash"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"steps", {{{"type", "USER"}, {"args", {"root; rm -rf /"}}}}}})
                .find("user name"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"steps", {{{"type", "COPY"}, {"args", {"../etc", "/x"}}, {"filesHash", kHash}}}}})
                .find("inside the context"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"steps", {{{"type", "COPY"}, {"args", {"a", "/x"}}, {"filesHash", "../x"}}}}})
                .find("filesHash"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"},
                     {"steps", {{{"type", "COPY"}, {"args", {"a", "/x", "u:g:h"}}, {"filesHash", kHash}}}}})
                .find("owner"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"},
                     {"steps", {{{"type", "COPY"}, {"args", {"a", "/x", "", "0999"}}, {"filesHash", kHash}}}}})
                .find("mode"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"fromImageRegistry", {{"type", "aws"}}}}).find("not supported"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{"fromImage", "a"}, {"startCmd", 3}}).find("startCmd"), std::string::npos);
}

}  // namespace
}  // namespace bulkhead::e2b
