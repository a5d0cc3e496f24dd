// E2B's template definition (TemplateBuildStartV2: the body of POST
// /v2/templates/{id}/builds/{buildID}) as the Dockerfile bulkhead's image builder runs
// (service/image_build.h), with E2B's meaning: a default user "user" (sudo without a
// password) that later steps run as, its home the working directory, RUN through bash where
// the image has it, COPY of an uploaded file set (its tar unpacked in the context under the
// set's hash) given to the current user, and the start and ready commands kept as labels for
// the sandboxes created from the template (template_start.h). Pure logic.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::e2b {

// Labels of an image built by the E2B front: the template's alias, its start and ready commands.
inline constexpr char kTemplateLabel[] = "bulkhead.e2b.template";
inline constexpr char kStartCmdLabel[] = "bulkhead.e2b.start-cmd";
inline constexpr char kReadyCmdLabel[] = "bulkhead.e2b.ready-cmd";
// The SDKs' default base (Template() and from_base_image()): bulkhead's host image, which is
// what E2B's "base" template is here too (fromTemplate "base" the same).
inline constexpr char kE2bBaseImage[] = "e2bdev/base";
inline constexpr char kE2bBaseTemplate[] = "base";

// A template a build starts from (fromTemplate): its image and the user its steps ran as.
struct TemplateBase {
  std::string image;
  std::string user;
};
using TemplateResolver = std::function<Result<TemplateBase>(const std::string& name)>;

struct TemplatePlan {
  // What FROM names: fromImage ("host" for E2B's base), or fromTemplate's image.
  std::string base_image;
  bool base_is_template = false;
  std::optional<std::pair<std::string, std::string>> registry_login;  // fromImageRegistry "registry"
  bool force = false;         // the body's or any step's: the build runs without its cache
  std::vector<std::string> files_hashes;  // COPY steps' filesHash, each once, in order
  std::optional<std::string> start_cmd;
  std::optional<std::string> ready_cmd;
  // The Dockerfile, and for each of its steps after FROM the E2B step it belongs to: "base"
  // (the default user), "1".."N", "finalize".
  std::string dockerfile;
  std::vector<std::string> step_labels;
  std::vector<std::string> step_titles;  // the E2B step as its log shows it ("RUN make")
  std::map<std::string, std::string> run_commands;  // a RUN step's label -> its command
};

// 400 naming the field for a definition E2B would refuse or bulkhead cannot build: no
// fromImage nor fromTemplate (or both), an unknown step type, args of the wrong shape, an
// invalid filesHash, an ENV name or a path bulkhead cannot put into a Dockerfile (a newline,
// a backslash), a COPY source outside the context, fromImageRegistry of AWS or GCP.
// `alias` is the template's, kept as a label; `resolve` answers fromTemplate's image and user
// (a build from a template inherits its user, working directory, environment and, unless it
// sets either, its start and ready commands).
Result<TemplatePlan> PlanTemplateBuild(const nlohmann::json& body, const std::string& alias,
                                       const TemplateResolver& resolve);

// Whether `hash` can be a filesHash: 64 lower-case hex digits.
bool IsFilesHash(const std::string& hash);

}  // namespace bulkhead::e2b
