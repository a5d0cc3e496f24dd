#include "e2b/template_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "build/dockerfile.h"
#include "common/base64.h"

namespace bulkhead::e2b {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxSteps = 1000;
constexpr char kDefaultUser[] = "user";

Error Invalid(std::string message) { return MakeError(ErrorCode::kBadRequest, std::move(message)); }

// Makes `name` a user if it is not one: useradd, else busybox's adduser, else by hand; with
// `sudo` it may sudo without a password (where the image has sudo), as E2B's default user.
std::string CreateUserScript(const std::string& name, bool sudo) {
  // `name` is checked (IsUserName) and passed as $1: never part of the script's text.
  std::string script =
      "u=\"$1\"; "
      "if ! grep -q \"^$u:\" /etc/passwd 2>/dev/null; then "
      "sh=/bin/sh; [ -x /bin/bash ] && sh=/bin/bash; "
      "if command -v useradd >/dev/null 2>&1; then useradd --create-home --shell \"$sh\" \"$u\"; "
      "elif command -v adduser >/dev/null 2>&1; then adduser -D -s \"$sh\" \"$u\"; "
      "else id=1000; while grep -q \":x:$id:\" /etc/passwd /etc/group 2>/dev/null; do id=$((id+1)); done; "
      "echo \"$u:x:$id:$id::/home/$u:$sh\" >> /etc/passwd; echo \"$u:x:$id:\" >> /etc/group; "
      "mkdir -p \"/home/$u\" && chown \"$id:$id\" \"/home/$u\"; fi; fi";
  if (sudo) {
    script +=
        "; if [ -d /etc/sudoers.d ]; then echo \"$u ALL=(ALL:ALL) NOPASSWD: ALL\" > \"/etc/sudoers.d/$u\" && "
        "chmod 0440 \"/etc/sudoers.d/$u\"; fi";
  }
  return json::array({"/bin/sh", "-c", script, "e2b-user", name}).dump();
}

// RUN through bash where the image has it (E2B runs every command with bash), else sh.
std::string RunLine(const std::string& command) {
  static const std::string kShell = "if [ -x /bin/bash ]; then exec /bin/bash -c \"$1\"; fi; exec /bin/sh -c \"$1\"";
  return "RUN " + json::array({"/bin/sh", "-c", kShell, "e2b-run", command}).dump();
}

bool IsUserName(const std::string& name) {
  return !name.empty() && name.size() <= 64 && name.front() != '-' &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
         });
}

bool IsEnvName(const std::string& name) {
  return !name.empty() && !std::isdigit(static_cast<unsigned char>(name.front())) &&
         std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// A path or value written into a Dockerfile line: no line break, no escape character (the
// Dockerfile's own backslash would change its meaning).
Status Writable(const std::string& text, const std::string& what) {
  if (text.find_first_of("\r\n\\") != std::string::npos || text.find('\0') != std::string::npos)
    return Invalid(what + " must not hold a line break or a backslash");
  return {};
}

// A path the Dockerfile's word processing takes as it is: no quote (it would open a quoted
// word there).
Status Unquoted(const std::string& text, const std::string& what) {
  if (text.find_first_of("'\"") != std::string::npos) return Invalid(what + " must not hold a quote");
  return Writable(text, what);
}

// A COPY source or destination in the exec (JSON) form: `$` kept literal (the builder expands
// variables in COPY words).
Result<std::string> CopyWord(const std::string& text, const std::string& what) {
  BH_TRY(Unquoted(text, what));
  std::string out;
  for (char c : text) {
    if (c == '$') out += '\\';
    out += c;
  }
  return out;
}

// A COPY source as E2B's SDKs send it: relative to the context and inside it ("." and empty
// parts dropped); nullopt for an absolute path or one with "..".
std::optional<std::string> CleanRelativePath(const std::string& path) {
  if (path.empty() || path.front() == '/') return std::nullopt;
  std::string out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (part == "..") return std::nullopt;
    if (!part.empty() && part != ".") out += (out.empty() ? "" : "/") + part;
    start = end + 1;
  }
  return out.empty() ? "." : out;
}

// The part of a COPY source before its first wildcard, as E2B's builder takes it from the
// uploaded set: "app/*.py" -> "app", "*.txt" -> ".", "hello.txt" -> "hello.txt".
std::string SourcePrefix(const std::string& source) {
  const size_t glob = source.find_first_of("*?[{");
  std::string prefix = source;
  if (glob != std::string::npos) {
    const size_t slash = source.rfind('/', glob);
    prefix = slash == std::string::npos ? "." : source.substr(0, slash);
  }
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  return prefix.empty() ? "." : prefix;
}

Result<std::vector<std::string>> StringArgs(const json& step, size_t index) {
  const auto args = step.find("args");
  std::vector<std::string> out;
  if (args == step.end() || args->is_null()) return out;
  if (!args->is_array()) return Invalid(fmt::format("steps[{}].args must be an array of strings", index));
  for (const json& arg : *args) {
    if (!arg.is_string()) return Invalid(fmt::format("steps[{}].args must be an array of strings", index));
    out.push_back(arg.get<std::string>());
  }
  return out;
}

Result<bool> OptionalBool(const json& object, const char* key, const std::string& where) {
  const auto found = object.find(key);
  if (found == object.end() || found->is_null()) return false;
  if (!found->is_boolean()) return Invalid(where + key + " must be a boolean");
  return found->get<bool>();
}

Result<std::optional<std::string>> OptionalString(const json& object, const char* key) {
  const auto found = object.find(key);
  if (found == object.end() || found->is_null()) return std::optional<std::string>();
  if (!found->is_string()) return Invalid(std::string(key) + " must be a string");
  return std::optional<std::string>(found->get<std::string>());
}

class Planner {
 public:
  Planner(const std::string& alias, TemplatePlan& plan) : alias_(alias), plan_(plan) {}

  void Line(std::string line, const std::string& label) {
    lines_.push_back(std::move(line));
    plan_.step_labels.push_back(label);
    plan_.step_titles.push_back(title_);
  }

  // E2B's base phase: root, then the default user made (with sudo) and taken, in its home.
  void DefaultUser() {
    title_ = fmt::format("USER {} (the default user, with sudo)", kDefaultUser);
    Line("USER root", "base");
    Line("RUN " + CreateUserScript(kDefaultUser, true), "base");
    Line(std::string("USER ") + kDefaultUser, "base");
    Line(fmt::format("WORKDIR /home/{}", kDefaultUser), "base");
    user_ = kDefaultUser;
  }

  Status Step(const json& step, size_t index) {
    const std::string where = fmt::format("steps[{}].", index);
    if (!step.is_object()) return Invalid(fmt::format("steps[{}] must be an object", index));
    const auto type = step.find("type");
    if (type == step.end() || !type->is_string()) return Invalid(where + "type must be a string");
    Result<std::vector<std::string>> args = StringArgs(step, index);
    if (!args.ok()) return args.error();
    Result<bool> force = OptionalBool(step, "force", where);
    if (!force.ok()) return force.error();
    if (*force) plan_.force = true;
    const std::string label = std::to_string(index + 1);
    const std::string kind = type->get<std::string>();
    title_ = kind;
    for (size_t i = 0; i < args->size() && i < (kind == "COPY" || kind == "RUN" ? 2u : args->size()); ++i) {
      if (kind == "RUN" && i == 1) title_ += (*args)[1].empty() ? "" : " (as " + (*args)[1] + ")";
      else title_ += " " + (*args)[i];
    }
    if (kind == "RUN") return Run(*args, label, where);
    if (kind == "COPY") return Copy(step, *args, label, where);
    if (kind == "ENV") return Env(*args, label, where);
    if (kind == "WORKDIR") {
      if (args->size() != 1 || (*args)[0].empty()) return Invalid(where + "args of WORKDIR must be [path]");
      BH_TRY(Unquoted((*args)[0], where + "args[0]"));
      Line("WORKDIR " + (*args)[0], label);
      return {};
    }
    if (kind == "USER") {
      if (args->empty() || args->size() > 2 || !IsUserName((*args)[0]))
        return Invalid(where + "args of USER must be [name] or [name, \"true\"] (a user name: letters, digits, _ . -)");
      Line("USER root", label);
      Line("RUN " + CreateUserScript((*args)[0], args->size() == 2 && (*args)[1] == "true"), label);
      Line("USER " + (*args)[0], label);
      user_ = (*args)[0];
      return {};
    }
    return Invalid(where + "type must be one of RUN, COPY, ENV, WORKDIR, USER, not " + kind);
  }

  Status Run(const std::vector<std::string>& args, const std::string& label, const std::string& where) {
    if (args.empty() || args.size() > 2) return Invalid(where + "args of RUN must be [command] or [command, user]");
    const bool other_user = args.size() == 2 && !args[1].empty() && args[1] != user_;
    if (other_user) {
      if (!IsUserName(args[1])) return Invalid(where + "args[1] must be a user name (letters, digits, _ . -)");
      Line("USER " + args[1], label);
    }
    Line(RunLine(args[0]), label);
    plan_.run_commands[label] = args[0];
    if (other_user) Line("USER " + user_, label);
    return {};
  }

  Status Copy(const json& step, const std::vector<std::string>& args, const std::string& label,
              const std::string& where) {
    if (args.size() < 2 || args.size() > 4) return Invalid(where + "args of COPY must be [src, dest, owner, mode]");
    const auto hash = step.find("filesHash");
    if (hash == step.end() || !hash->is_string() || !IsFilesHash(hash->get<std::string>()))
      return Invalid(where + "filesHash must be 64 lower-case hex digits");
    const std::string files = hash->get<std::string>();
    if (std::find(plan_.files_hashes.begin(), plan_.files_hashes.end(), files) == plan_.files_hashes.end())
      plan_.files_hashes.push_back(files);
    const std::optional<std::string> source = CleanRelativePath(args[0]);
    if (!source) return Invalid(where + "args[0] (src) must be a path inside the context");
    if (args[1].empty()) return Invalid(where + "args[1] (dest) must not be empty");
    Result<std::string> from = CopyWord(files + "/" + SourcePrefix(*source), where + "args[0]");
    if (!from.ok()) return from.error();
    Result<std::string> dest = CopyWord(args[1], where + "args[1]");
    if (!dest.ok()) return dest.error();

    std::string owner = args.size() > 2 ? args[2] : "";
    if (owner.empty()) owner = user_.empty() ? "root" : user_;
    const size_t colon = owner.find(':');
    const std::string owner_user = owner.substr(0, colon);
    const std::string owner_group = colon == std::string::npos ? owner_user : owner.substr(colon + 1);
    if (!IsUserName(owner_user) || !IsUserName(owner_group))
      return Invalid(where + "args[2] (owner) must be user or user:group");
    std::string line = fmt::format("COPY --chown={}:{}", owner_user, owner_group);
    if (args.size() > 3 && !args[3].empty()) {
      const std::string& mode = args[3];
      if (mode.size() > 5 || !std::all_of(mode.begin(), mode.end(), [](char c) { return c >= '0' && c <= '7'; }) ||
          std::stoul(mode, nullptr, 8) > 07777)
        return Invalid(where + "args[3] (mode) must be an octal mode up to 7777, e.g. 0755");
      line += " --chmod=" + mode;
    }
    Line(line + " " + json::array({*from, *dest}).dump(), label);
    return {};
  }

  Status Env(const std::vector<std::string>& args, const std::string& label, const std::string& where) {
    if (args.size() % 2 != 0) return Invalid(where + "args of ENV must be name, value pairs");
    for (size_t i = 0; i < args.size(); i += 2) {
      if (!IsEnvName(args[i])) return Invalid(where + fmt::format("args[{}] must be a variable name", i));
      BH_TRY(Writable(args[i + 1], where + fmt::format("args[{}]", i + 1)));
      std::string value = "\"";
      for (char c : args[i + 1]) {
        if (c == '"') value += '\\';
        value += c;
      }
      value += '"';
      // Variables in the value are expanded as the builder will: what it cannot is refused now.
      auto expanded = build::ExpandVariables(value, '\\', [](const std::string&) { return std::nullopt; });
      if (!expanded.ok()) return Invalid(where + fmt::format("args[{}]: ", i + 1) + expanded.error().message);
      Line(fmt::format("ENV {}={}", args[i], value), label);
    }
    return {};
  }

  // The start and ready commands as labels (base64: any text survives a Dockerfile line).
  void Finalize() {
    title_ = "Template metadata";
    if (plan_.start_cmd || plan_.ready_cmd) {
      Line(fmt::format("LABEL {}={} {}={}", kStartCmdLabel, Base64Encode(plan_.start_cmd.value_or("")),
                       kReadyCmdLabel, Base64Encode(plan_.ready_cmd.value_or(""))),
           "finalize");
    }
    Line(fmt::format("LABEL {}={}", kTemplateLabel, alias_), "finalize");
  }

  std::string Text(const std::string& from) const {
    std::string text = "FROM " + from + "\n";
    for (const std::string& line : lines_) text += line + "\n";
    return text;
  }

  std::string user_;

 private:
  const std::string& alias_;
  TemplatePlan& plan_;
  std::vector<std::string> lines_;
  std::string title_;
};

}  // namespace

bool IsFilesHash(const std::string& hash) {
  return hash.size() == 64 &&
         std::all_of(hash.begin(), hash.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Result<TemplatePlan> PlanTemplateBuild(const json& body, const std::string& alias, const TemplateResolver& resolve) {
  if (!body.is_object()) return Invalid("the body must be a JSON object");
  TemplatePlan plan;
  Planner planner(alias, plan);
  Result<std::optional<std::string>> from_image = OptionalString(body, "fromImage");
  if (!from_image.ok()) return from_image.error();
  Result<std::optional<std::string>> from_template = OptionalString(body, "fromTemplate");
  if (!from_template.ok()) return from_template.error();
  if (from_image->has_value() == from_template->has_value())
    return Invalid("exactly one of fromImage and fromTemplate must be given");
  if (*from_template && (**from_template == kE2bBaseTemplate || **from_template == "base:default")) {
    plan.base_image = "host";  // E2B's base template: the host image, its default user made as for e2bdev/base
  } else if (*from_template) {
    if ((*from_template)->empty()) return Invalid("fromTemplate must not be empty");
    Result<TemplateBase> base = resolve(**from_template);
    if (!base.ok()) return base.error();
    plan.base_image = base->image;
    plan.base_is_template = true;
    planner.user_ = base->user;
  } else {
    const std::string& image = **from_image;
    const bool reference = !image.empty() && image.size() <= 512 && std::all_of(image.begin(), image.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("._-/:@").find(c) != std::string_view::npos;
    });
    if (!reference) return Invalid("fromImage must be an image reference ([registry/]repository[:tag][@digest])");
    const bool base = image == kE2bBaseImage || image.starts_with(std::string(kE2bBaseImage) + ":") ||
                      image == std::string("docker.io/") + kE2bBaseImage;
    plan.base_image = base ? "host" : image;
  }
  if (const auto registry = body.find("fromImageRegistry"); registry != body.end() && !registry->is_null()) {
    if (!registry->is_object()) return Invalid("fromImageRegistry must be an object");
    const std::string type = registry->value("type", "");
    if (type != "registry")
      return Invalid("fromImageRegistry of type " + type + " is not supported: give a registry's username and password");
    const auto username = registry->find("username"), password = registry->find("password");
    if (username == registry->end() || !username->is_string() || password == registry->end() || !password->is_string())
      return Invalid("fromImageRegistry needs username and password strings");
    plan.registry_login.emplace(username->get<std::string>(), password->get<std::string>());
  }
  Result<bool> force = OptionalBool(body, "force", "");
  if (!force.ok()) return force.error();
  plan.force = *force;
  for (const char* key : {"startCmd", "readyCmd"}) {
    Result<std::optional<std::string>> value = OptionalString(body, key);
    if (!value.ok()) return value.error();
    (key[0] == 's' ? plan.start_cmd : plan.ready_cmd) = std::move(*value);
  }

  if (!plan.base_is_template) planner.DefaultUser();
  const auto steps = body.find("steps");
  if (steps != body.end() && !steps->is_null()) {
    if (!steps->is_array()) return Invalid("steps must be an array");
    if (steps->size() > kMaxSteps) return Invalid(fmt::format("a template has at most {} steps", kMaxSteps));
    for (size_t i = 0; i < steps->size(); ++i) BH_TRY(planner.Step((*steps)[i], i));
  }
  planner.Finalize();
  plan.dockerfile = planner.Text(plan.base_image);
  return plan;
}

}  // namespace bulkhead::e2b
