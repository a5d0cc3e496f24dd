// E2B template definitions (e2b/template_plan.h): the SDKs' build body, as a client sends it,
// becomes a Dockerfile. The input is that JSON body.
//
// Checked: nothing throws; every error is kBadRequest; a plan parses and evaluates as a
// Dockerfile of one stage whose steps match the plan's labels one for one; each RUN of a
// step keeps the step's command byte for byte as its last argument; the template's label is
// the alias given; and no instruction but those the plan writes appears (a command or path
// cannot add a line).
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "build/dockerfile.h"
#include "e2b/template_plan.h"
#include "fuzz_support.h"

namespace {

using namespace bulkhead;
using nlohmann::json;

Result<e2b::TemplateBase> Resolve(const std::string& name) {
  if (name == "parent") return e2b::TemplateBase{"parent-image", "worker"};
  return MakeError(ErrorCode::kBadRequest, "no template " + name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const json body = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  Result<e2b::TemplatePlan> plan = e2b::PlanTemplateBuild(body, "fuzzed", Resolve);
  if (!plan.ok()) {
    FUZZ_CHECK(plan.error().code == ErrorCode::kBadRequest, plan.error().message);
    return 0;
  }
  FUZZ_CHECK(plan->step_labels.size() == plan->step_titles.size(), plan->dockerfile);
  Result<build::Dockerfile> file = build::ParseDockerfile(plan->dockerfile);
  FUZZ_CHECK(file.ok(), file.ok() ? "" : file.error().message + "\n" + plan->dockerfile);
  static const std::set<std::string> kWritten = {"FROM", "USER", "RUN", "WORKDIR", "ENV", "COPY", "LABEL"};
  for (const build::Instruction& in : file->instructions) FUZZ_CHECK(kWritten.contains(in.keyword), in.original);
  Result<build::BuildPlan> built =
      build::EvaluateDockerfile(*file, {}, "", [](const std::string&) { return storage::ImageConfig{}; });
  FUZZ_CHECK(built.ok(), built.ok() ? "" : built.error().message + "\n" + plan->dockerfile);
  FUZZ_CHECK(built->stages.size() == 1, plan->dockerfile);
  const build::Stage& stage = built->stages.front();
  FUZZ_CHECK(stage.steps.size() == plan->step_labels.size(), plan->dockerfile);
  FUZZ_CHECK(stage.config.labels.count(e2b::kTemplateLabel) && stage.config.labels.at(e2b::kTemplateLabel) == "fuzzed",
             plan->dockerfile);
  // Each RUN step of the body: its command, byte for byte, is a RUN's last argument.
  const json* steps = body.contains("steps") && body["steps"].is_array() ? &body["steps"] : nullptr;
  for (size_t i = 0; steps != nullptr && i < steps->size(); ++i) {
    const json& step = (*steps)[i];
    if (step.value("type", "") != "RUN") continue;
    const std::string command = step["args"][0].get<std::string>();
    bool found = false;
    for (size_t s = 0; s < stage.steps.size(); ++s) {
      const build::Step& built_step = stage.steps[s];
      if (plan->step_labels[s] == std::to_string(i + 1) && built_step.kind == build::Step::Kind::kRun &&
          built_step.argv.back() == command)
        found = true;
    }
    FUZZ_CHECK(found, "step " + std::to_string(i + 1) + " lost its command\n" + plan->dockerfile);
  }
  return 0;
}
