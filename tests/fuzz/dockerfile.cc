// Dockerfiles and .dockerignore (build/dockerfile.h, build/context_ignore.h): a client sends
// both with a build, and the daemon parses them. The input is sections split by "%%" lines:
// the Dockerfile; build args (NAME=value lines; the first line without '=' names the target
// stage); a .dockerignore; paths in the context, one a line. Missing sections are empty.
//
// Checked: nothing throws; every error is kBadRequest (but for the base image the callback
// refuses, whose error comes back as is); a parsed file keeps its instructions in order with
// supported keywords and flags; an evaluated plan ends at the target, resolves stage bases and
// COPY --from only to earlier stages, asks for each base image once, keeps each step's working
// dir and COPY destination absolute and clean, and its exposed ports well-formed; evaluating
// up to a target gives the same stages as evaluating the whole file. ExpandVariables leaves a
// word without '$' as it is, and looks up only names. An ignored directory nothing below can
// be taken back from leaves out all below it; a path's own last pattern decides for it.
#include <algorithm>
#include <exception>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "build/context_ignore.h"
#include "build/dockerfile.h"
#include "fuzz_support.h"

namespace {

using namespace bulkhead;
using namespace bulkhead::build;

constexpr size_t kMaxPaths = 16;
const std::string kMissingImage = "missing";  // the base image the callback refuses

std::vector<std::string_view> Split(std::string_view text, std::string_view separator) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t end = text.find(separator);
    parts.push_back(text.substr(0, end));
    if (end == std::string_view::npos) return parts;
    text.remove_prefix(end + separator.size());
  }
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// What a lookup may be asked: letters, digits and '_', or a run of digits.
bool IsName(const std::string& name) {
  if (name.empty()) return false;
  bool digits = true;
  for (char c : name) {
    if (!IsDigit(c)) digits = false;
    if (!IsDigit(c) && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && c != '_') return false;
  }
  return digits || !IsDigit(name[0]);
}

// Absolute with no empty, "." or ".." parts; "/" alone ends with '/'.
bool IsCleanAbsolute(std::string_view path) {
  if (path == "/") return true;
  if (!path.starts_with('/') || path.ends_with('/')) return false;
  for (std::string_view part : Split(path.substr(1), "/"))
    if (part.empty() || part == "." || part == "..") return false;
  return true;
}

bool IsPortSpec(std::string_view spec) {
  const size_t slash = spec.find('/');
  if (slash == 0 || slash == std::string_view::npos || slash > 5) return false;
  const std::string_view protocol = spec.substr(slash + 1);
  if (protocol != "tcp" && protocol != "udp" && protocol != "sctp") return false;
  unsigned port = 0;
  for (char c : spec.substr(0, slash)) {
    if (!IsDigit(c)) return false;
    port = port * 10 + (c - '0');
  }
  return port >= 1 && port <= 65535 && spec[0] != '0';
}

bool SameConfig(const storage::ImageConfig& a, const storage::ImageConfig& b) {
  return a.env == b.env && a.working_dir == b.working_dir && a.user == b.user && a.entrypoint == b.entrypoint &&
         a.cmd == b.cmd && a.exposed_ports == b.exposed_ports && a.labels == b.labels;
}

storage::ImageConfig BaseImage() {
  storage::ImageConfig config;
  config.os = "linux";
  config.architecture = "amd64";
  config.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root"};
  config.working_dir = "/srv";
  config.cmd = {"sh"};
  config.exposed_ports = {"80/tcp"};
  config.labels = {{"base", "fuzz"}};
  return config;
}

void CheckParsed(const Dockerfile& file) {
  FUZZ_CHECK(file.escape == '\\' || file.escape == '`', std::string(1, file.escape));
  FUZZ_CHECK(!file.instructions.empty(), "a parsed file without instructions");
  static const std::set<std::string> kKeywords = {"FROM", "RUN",  "COPY",   "ADD", "ENV",        "ARG",   "WORKDIR",
                                                  "USER", "LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "SHELL", "MAINTAINER"};
  static const std::set<std::string> kFlags = {"platform", "from", "chown", "chmod", "link"};
  bool from_seen = false;
  int line = 0;
  for (const Instruction& in : file.instructions) {
    FUZZ_CHECK(in.line > line, in.original);
    line = in.line;
    FUZZ_CHECK(kKeywords.contains(in.keyword), in.keyword);
    FUZZ_CHECK(!in.rest.empty(), in.original);
    FUZZ_CHECK(in.original.starts_with(in.keyword + " ") && in.original.ends_with(in.rest), in.original);
    for (const auto& [name, value] : in.flags) FUZZ_CHECK(kFlags.contains(name), in.original);
    if (!from_seen) FUZZ_CHECK(in.keyword == "ARG" || in.keyword == "FROM", in.original);
    from_seen = from_seen || in.keyword == "FROM";
  }
}

// A plan's stages against the file: each FROM opens a stage, every other instruction after it
// is one step of it, in order.
void CheckPlan(const Dockerfile& file, const BuildPlan& plan, const std::map<std::string, std::string>& build_args,
               const std::string& target) {
  std::vector<size_t> froms;
  for (size_t i = 0; i < file.instructions.size(); i++)
    if (file.instructions[i].keyword == "FROM") froms.push_back(i);
  FUZZ_CHECK(!plan.stages.empty() && plan.stages.size() <= froms.size(), "stage count");
  if (target.empty()) FUZZ_CHECK(plan.stages.size() == froms.size(), "no target, not every stage");
  if (!target.empty()) FUZZ_CHECK(plan.stages.back().name == Lower(target), target);
  for (size_t s = 0; s + 1 < plan.stages.size(); s++)
    if (!target.empty()) FUZZ_CHECK(plan.stages[s].name != Lower(target), "the target is an earlier stage: " + target);
  for (const std::string& name : plan.unused_build_args) FUZZ_CHECK(build_args.contains(name), name);

  for (size_t s = 0; s < plan.stages.size(); s++) {
    const Stage& stage = plan.stages[s];
    const std::string where = "stage " + std::to_string(s) + " (" + stage.base + ")";
    FUZZ_CHECK(!stage.base.empty(), where);
    if (stage.base_stage) {
      FUZZ_CHECK(*stage.base_stage >= 0 && static_cast<size_t>(*stage.base_stage) < s, where);
      FUZZ_CHECK(plan.stages[*stage.base_stage].name == Lower(stage.base), where);
    } else {
      for (size_t e = 0; e < s; e++) FUZZ_CHECK(plan.stages[e].name != Lower(stage.base), where + " is an earlier stage");
    }
    const size_t end = s + 1 < froms.size() ? froms[s + 1] : file.instructions.size();
    FUZZ_CHECK(stage.steps.size() == end - froms[s] - 1, where + ": steps and instructions differ");
    for (size_t k = 0; k < stage.steps.size(); k++) {
      const Step& step = stage.steps[k];
      const Instruction& in = file.instructions[froms[s] + 1 + k];
      const std::string at = where + " line " + std::to_string(in.line) + ": " + in.original;
      FUZZ_CHECK(step.line == in.line && step.original == in.original, at);
      FUZZ_CHECK(!step.shell.empty(), at);
      const std::string& dir = step.config.working_dir;
      FUZZ_CHECK(dir.empty() || IsCleanAbsolute(dir), at + " -> working dir " + dir);
      if (in.keyword == "EXPOSE") {  // only EXPOSE changes them (checking every step would be quadratic)
        for (const std::string& port : step.config.exposed_ports) FUZZ_CHECK(IsPortSpec(port), at + " -> " + port);
        const std::set<std::string> ports(step.config.exposed_ports.begin(), step.config.exposed_ports.end());
        FUZZ_CHECK(ports.size() == step.config.exposed_ports.size(), at + " exposes a port twice");
      }
      switch (step.kind) {
        case Step::Kind::kWorkdir:
          FUZZ_CHECK(in.keyword == "WORKDIR" && !dir.empty(), at);
          break;
        case Step::Kind::kRun:
          FUZZ_CHECK(in.keyword == "RUN" && !step.argv.empty(), at);
          for (const std::string& entry : step.run_env) FUZZ_CHECK(entry.find('=') != std::string::npos, at + ": " + entry);
          break;
        case Step::Kind::kCopy: {
          FUZZ_CHECK(in.keyword == "COPY" || in.keyword == "ADD", at);
          FUZZ_CHECK(step.add == (in.keyword == "ADD"), at);
          FUZZ_CHECK(!step.sources.empty(), at);
          const std::string& dest = step.dest;
          FUZZ_CHECK(IsCleanAbsolute(dest.size() > 1 && dest.ends_with('/') ? dest.substr(0, dest.size() - 1) : dest),
                     at + " -> dest " + dest);
          if (step.from_stage) {
            FUZZ_CHECK(*step.from_stage >= 0 && static_cast<size_t>(*step.from_stage) < s, at + " copies from " + step.from);
          }
          if (!in.flags.contains("from")) FUZZ_CHECK(step.from.empty() && !step.from_stage, at);
          if (step.chmod) FUZZ_CHECK(*step.chmod <= 07777, at);
          break;
        }
        case Step::Kind::kConfig:
          FUZZ_CHECK(in.keyword != "RUN" && in.keyword != "COPY" && in.keyword != "ADD" && in.keyword != "WORKDIR", at);
          break;
      }
    }
    if (!stage.steps.empty()) FUZZ_CHECK(SameConfig(stage.config, stage.steps.back().config), where + ": final config");
  }
}

struct Evaluation {
  Result<BuildPlan> plan;
  bool asked_missing = false;
};

Evaluation Evaluate(const Dockerfile& file, const std::map<std::string, std::string>& build_args,
                    const std::string& target) {
  std::set<std::string> asked;
  bool asked_missing = false;
  const BaseConfig base_config = [&](const std::string& image) -> Result<storage::ImageConfig> {
    FUZZ_CHECK(!image.empty() && image != "scratch", "base_config asked for \"" + image + "\"");
    FUZZ_CHECK(asked.insert(image).second, "base_config asked twice for " + image);
    if (image == kMissingImage) {
      asked_missing = true;
      return MakeError(ErrorCode::kNotFound, "no image " + image, "image_not_found");
    }
    return BaseImage();
  };
  Result<BuildPlan> plan = EvaluateDockerfile(file, build_args, target, base_config);
  if (plan.ok()) {
    CheckPlan(file, *plan, build_args, target);
  } else if (plan.error().code == ErrorCode::kNotFound) {
    FUZZ_CHECK(asked_missing && plan.error().message == "no image " + kMissingImage, plan.error().message);
  } else {
    FUZZ_CHECK(plan.error().code == ErrorCode::kBadRequest, plan.error().message);
    FUZZ_CHECK(!plan.error().message.empty(), "an error without a message");
  }
  return {std::move(plan), asked_missing};
}

void CheckExpand(std::string_view word, char escape, const std::map<std::string, std::string>& values) {
  const auto lookup = [&](const std::string& name) -> std::optional<std::string> {
    FUZZ_CHECK(IsName(name), "looked up \"" + name + "\" in " + std::string(word));
    auto value = values.find(name);
    if (value == values.end()) return std::nullopt;
    return value->second;
  };
  Result<std::string> expanded = ExpandVariables(word, escape, lookup);
  if (!expanded.ok()) {
    FUZZ_CHECK(expanded.error().code == ErrorCode::kBadRequest, expanded.error().message);
    return;
  }
  // Without a '$' nothing is expanded, and quotes and escapes are kept for the word split.
  if (word.find('$') == std::string_view::npos) FUZZ_CHECK(*expanded == word, std::string(word) + " -> " + *expanded);
}

void CheckDockerfile(std::string_view text, std::string_view args_text) {
  std::map<std::string, std::string> build_args;
  std::string target;
  bool target_seen = false;
  for (std::string_view line : Split(args_text, "\n")) {
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      if (!target_seen) target = std::string(line);
      target_seen = true;
    } else {
      build_args[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
  }
  std::map<std::string, std::string> values = build_args;
  values["HOME"] = "/root";
  values["EMPTY"] = "";
  values["SPACED"] = "a b  'c' \"d\" $HOME ${HOME}";
  for (std::string_view line : Split(args_text, "\n")) {
    CheckExpand(line, '\\', values);
    CheckExpand(line, '`', values);
  }

  Result<Dockerfile> file = ParseDockerfile(text);
  if (!file.ok()) {
    FUZZ_CHECK(file.error().code == ErrorCode::kBadRequest, file.error().message);
    FUZZ_CHECK(file.error().detail_code == "dockerfile_invalid", file.error().message);
    return;
  }
  CheckParsed(*file);
  for (const Instruction& in : file->instructions) {
    CheckExpand(in.rest, file->escape, values);
    for (const auto& [name, value] : in.flags) CheckExpand(value, file->escape, values);
  }

  const Evaluation targeted = Evaluate(*file, build_args, target);
  if (target.empty()) return;
  // Up to a target: the same stages as the whole file, which may fail only after them.
  const Evaluation whole = Evaluate(*file, build_args, "");
  if (!whole.plan.ok()) return;
  bool names_stage = false;
  for (const Stage& stage : whole.plan->stages) names_stage = names_stage || stage.name == Lower(target);
  FUZZ_CHECK(targeted.plan.ok() == names_stage,
             "target " + target + ": " + (targeted.plan.ok() ? "ok" : targeted.plan.error().message));
  if (!targeted.plan.ok()) return;
  for (size_t s = 0; s < targeted.plan->stages.size(); s++) {
    const Stage& a = targeted.plan->stages[s];
    const Stage& b = whole.plan->stages[s];
    FUZZ_CHECK(a.base == b.base && a.base_stage == b.base_stage && a.name == b.name && a.platform == b.platform &&
                   a.steps.size() == b.steps.size() && SameConfig(a.config, b.config),
               "stage " + std::to_string(s) + " differs up to target " + target);
    for (size_t k = 0; k < a.steps.size(); k++) {
      const Step& x = a.steps[k];
      const Step& y = b.steps[k];
      FUZZ_CHECK(x.kind == y.kind && x.argv == y.argv && x.run_env == y.run_env && x.sources == y.sources &&
                     x.dest == y.dest && x.from == y.from && x.from_stage == y.from_stage && x.chown == y.chown &&
                     x.chmod == y.chmod && x.shell == y.shell && SameConfig(x.config, y.config),
                 "step " + x.original + " differs up to target " + target);
    }
  }
}

// A path as the walker gives it: relative, no empty, "." or ".." parts.
std::string Normalize(std::string_view path) {
  std::vector<std::string_view> parts;
  for (std::string_view part : Split(path, "/")) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  std::string out;
  for (std::string_view part : parts) out += (out.empty() ? "" : "/") + std::string(part);
  return out;
}

// A path that, written as a pattern line, matches itself only: no glob or escape characters,
// nothing Trim takes off, not a comment or an exception.
bool IsLiteral(std::string_view path) {
  if (path.empty() || path.starts_with('#') || path.starts_with('!')) return false;
  return path.find_first_of("*?[\\ \t\r\n") == std::string_view::npos;
}

void CheckIgnore(std::string_view rules, const std::vector<std::string>& paths) {
  Result<ContextIgnore> ignore = ContextIgnore::Parse(rules);
  if (!ignore.ok()) {
    FUZZ_CHECK(ignore.error().code == ErrorCode::kBadRequest, ignore.error().message);
    return;
  }
  for (const std::string& path : paths) {
    const bool ignored = ignore->Ignored(path);
    const bool may_take_below = ignore->MayTakeBelow(path);
    FUZZ_CHECK(ignore->Ignored("/" + path + "/") == ignored, path);
    if (!ignored) FUZZ_CHECK(may_take_below, path + " is taken, yet nothing below it may be");
    if (may_take_below || path.empty()) continue;
    // The walker skips this directory: everything below must be left out.
    for (const std::string& below : paths) {
      if (below.empty()) continue;
      FUZZ_CHECK(ignore->Ignored(path + "/" + below), path + "/" + below + " is taken below a skipped directory");
    }
  }
  // A pattern naming a path last decides for it, and for what is below it.
  size_t literals = 0;
  for (const std::string& path : paths) {
    if (!IsLiteral(path) || ++literals > 4) continue;
    Result<ContextIgnore> out = ContextIgnore::Parse(std::string(rules) + "\n" + path);
    FUZZ_CHECK(out.ok(), path);
    FUZZ_CHECK(out->Ignored(path) && !out->MayTakeBelow(path), path + " is named last yet taken");
    for (const std::string& below : paths)
      if (!below.empty()) FUZZ_CHECK(out->Ignored(path + "/" + below), path + "/" + below);
    Result<ContextIgnore> in = ContextIgnore::Parse(std::string(rules) + "\n!" + path);
    FUZZ_CHECK(in.ok(), path);
    FUZZ_CHECK(!in->Ignored(path) && in->MayTakeBelow(path), path + " is excepted last yet left out");
  }
}

// The text between lines that are "%%" (an empty section is two such lines in a row).
std::vector<std::string_view> Sections(std::string_view input) {
  std::vector<std::string_view> sections;
  size_t start = 0;
  for (size_t line = 0; line < input.size();) {
    size_t end = input.find('\n', line);
    if (end == std::string_view::npos) end = input.size();
    if (input.substr(line, end - line) == "%%") {
      sections.push_back(input.substr(start, line == start ? 0 : line - 1 - start));  // not the '\n' before
      start = std::min(end + 1, input.size());
    }
    line = end + 1;
  }
  sections.push_back(input.substr(start));
  return sections;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> sections = Sections(input);
  const auto section = [&](size_t i) { return i < sections.size() ? sections[i] : std::string_view(); };
  try {
    CheckDockerfile(section(0), section(1));

    std::vector<std::string> paths;
    for (std::string_view line : Split(section(3), "\n")) {
      if (paths.size() == kMaxPaths) break;
      paths.push_back(Normalize(line));
    }
    CheckIgnore(section(2), paths);
    // The Dockerfile's lines as rules too: most are patterns of some kind.
    CheckIgnore(section(0), paths);
  } catch (const std::exception& e) {
    bulkhead::fuzz::Fail(std::string("an exception escaped: ") + e.what());
  } catch (...) {
    bulkhead::fuzz::Fail("an exception escaped");
  }
  return 0;
}
