#include "e2b/templates.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <sstream>

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/http/field.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/bounded_json.h"
#include "common/digest.h"
#include "common/read_file.h"
#include "common/scope_guard.h"
#include "common/time_format.h"
#include "common/unique_fd.h"
#include "e2b/front.h"
#include "e2b/template_plan.h"
#include "http/blocking.h"
#include "service/build_context.h"
#include "service/image_build.h"
#include "storage/fs_util.h"
#include "storage/image_ref.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::e2b {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using json = nlohmann::json;

namespace {

constexpr size_t kKeptBuilds = 200;           // finished builds whose status is kept
constexpr size_t kMaxLogEntries = 20000;      // of one build; then one entry says so
constexpr size_t kMaxPageEntries = 100;       // E2B's most per status call
constexpr int64_t kUploadUrlTtlS = 3600;      // as E2B's pre-signed URLs
constexpr uint64_t kMaxUpload = uint64_t{16} << 30;
constexpr uint64_t kMaxBody = 4 << 20;        // a definition: steps and their commands
constexpr char kDefaultTag[] = "default";

Error Invalid(std::string message) { return MakeError(ErrorCode::kBadRequest, std::move(message)); }
Error NotFound(const std::string& what) { return MakeError(ErrorCode::kNotFound, what + " not found"); }

bool IsNamePart(std::string_view text, bool tag) {
  return !text.empty() && text.size() <= 128 && std::all_of(text.begin(), text.end(), [tag](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || (tag && c == '.');
         });
}

std::string NewUuid() {
  std::random_device random;
  std::array<uint8_t, 16> bytes;
  for (size_t i = 0; i < bytes.size(); i += 4) {
    const uint32_t word = random();
    for (size_t j = 0; j < 4; ++j) bytes[i + j] = static_cast<uint8_t>(word >> (8 * j));
  }
  bytes[6] = (bytes[6] & 0x0f) | 0x40;  // version 4
  bytes[8] = (bytes[8] & 0x3f) | 0x80;  // RFC 4122 variant
  const std::string hex = HexEncode(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  return fmt::format("{}-{}-{}-{}-{}", hex.substr(0, 8), hex.substr(8, 4), hex.substr(12, 4), hex.substr(16, 4),
                     hex.substr(20));
}

// A stored image's build as a UUID (the tag routes' buildID): from its directory name, the
// build key's hex.
std::string UuidOfImage(const std::string& image_name) {
  const std::string hex = (image_name + std::string(32, '0')).substr(0, 32);
  return fmt::format("{}-{}-{}-{}-{}", hex.substr(0, 8), hex.substr(8, 4), hex.substr(12, 4), hex.substr(16, 4),
                     hex.substr(20));
}

std::string NowRfc3339() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return Rfc3339Millis(now);
}

bool IsTemplateImage(const core::ImageInfo& image, const std::string& alias) {
  if (!image.config) return false;
  const auto found = image.config->labels.find(kTemplateLabel);
  return found != image.config->labels.end() && found->second == alias;
}

// The tags of a template: tag -> its image, from the images labelled with the alias that
// `tenant` sees (templates are built by the host's key; a tenant's image may carry the label).
std::map<std::string, core::ImageInfo> TagsOf(core::SandboxManager& manager, const std::string& alias,
                                              const std::string& tenant) {
  std::map<std::string, core::ImageInfo> tags;
  for (const core::ImageInfo& stored : manager.ListImages()) {
    if (!IsTemplateImage(stored, alias) || !storage::SeesImage(stored, tenant)) continue;
    const core::ImageInfo image = storage::ImageSeenBy(stored, tenant);
    for (const std::string& reference : image.references) {
      if (reference == alias) tags[kDefaultTag] = image;
      if (reference.size() > alias.size() + 1 && reference.starts_with(alias + "."))
        tags[reference.substr(alias.size() + 1)] = image;
    }
  }
  return tags;
}

std::string FilesDir(const E2bContext& context) { return context.upload_dir + "/" + api::kTemplateFilesDir; }

// A tenant's file set is its own upload: another's of the same hash is not its to build from.
std::string FileSetPath(const E2bContext& context, const std::string& tenant, const std::string& hash) {
  return FilesDir(context) + "/" + api::TemplateFileSetName(tenant, hash);
}

std::string UploadToken(const E2bContext& context, const std::string& tenant, const std::string& hash, int64_t expires) {
  return HexEncode(HmacSha256(context.key, fmt::format("e2b-template-files:{}:{}:{}", tenant, hash, expires)));
}

}  // namespace

// One build: registered by POST /v3/templates, run after its definition arrives.
struct TemplateBuild {
  std::string tenant;  // whose ("" the host's): only its keys see the build
  std::string alias;
  std::string build_id;
  std::vector<std::string> tags;
  int64_t cpus = 2;
  int64_t memory_mb = 2048;
  std::string status = "waiting";  // waiting | building | ready | error
  std::vector<json> entries;
  std::optional<json> reason;
  std::string step = "base";       // the E2B step running, for its output and a failure
  std::string last_title;          // the step title logged last
  std::string image;               // the image a ready build made
  int64_t registered_ms = 0;       // when POST /v3/templates registered it (their order)
  size_t entries_saved = 0;        // how many of its entries its log file holds
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
};

namespace {

json BuildToJson(const TemplateBuild& build) {
  return {{"tenant", build.tenant}, {"alias", build.alias},   {"build_id", build.build_id},
          {"tags", build.tags},     {"cpus", build.cpus},     {"memory_mb", build.memory_mb},
          {"status", build.status}, {"reason", build.reason ? *build.reason : json()},
          {"step", build.step},     {"image", build.image},   {"registered_ms", build.registered_ms}};
}

std::optional<TemplateBuild> BuildFromJson(const json& doc) {
  try {
    TemplateBuild build;
    build.tenant = doc.at("tenant").get<std::string>();
    build.alias = doc.at("alias").get<std::string>();
    build.build_id = doc.at("build_id").get<std::string>();
    build.tags = doc.at("tags").get<std::vector<std::string>>();
    build.cpus = doc.at("cpus").get<int64_t>();
    build.memory_mb = doc.at("memory_mb").get<int64_t>();
    build.status = doc.at("status").get<std::string>();
    if (!doc.at("reason").is_null()) build.reason = doc.at("reason");
    build.step = doc.at("step").get<std::string>();
    build.image = doc.at("image").get<std::string>();
    build.registered_ms = doc.at("registered_ms").get<int64_t>();
    return build;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

// The builds' status and logs. With a directory, each build is also kept there (root's alone):
// <build id>.json, its status, written when it is registered and when it ends, and
// <build id>.log, its log entries as JSON lines, appended as they come; so what the SDKs poll
// survives a daemon restart, and a build that was still running then reads as failed,
// interrupted, with its log up to that point.
class TemplateBuilds {
 public:
  explicit TemplateBuilds(std::string dir) : dir_(std::move(dir)) {
    if (dir_.empty()) return;
    if (Status made = MakeDir(dir_, 0700); !made.ok()) {
      spdlog::warn("E2B template builds are kept in memory only: {}", made.error().message);
      dir_.clear();
      return;
    }
    std::vector<TemplateBuild> loaded;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
      const std::string path = entry.path().string();
      if (!path.ends_with(".json")) {
        // (a status write a crash cut short, or the log of a build without a status)
        const std::string status = path.substr(0, path.size() - 4) + ".json";
        if (!path.ends_with(".log") || !std::filesystem::exists(status, ec)) std::filesystem::remove(entry.path(), ec);
        continue;
      }
      auto text = storage::ReadFile(path);
      std::optional<TemplateBuild> build;
      if (text.ok()) build = BuildFromJson(json::parse(*text, nullptr, /*allow_exceptions=*/false));
      if (!build || path != StatusFile(build->build_id)) {
        spdlog::warn("E2B template builds: {} is unreadable; removed", path);
        std::filesystem::remove(entry.path(), ec);
        continue;
      }
      // The log, up to its last whole line (a crash may have cut the one it was writing).
      if (auto log = storage::ReadFile(LogFile(build->build_id)); log.ok()) {
        std::istringstream lines(*log);
        for (std::string line; build->entries.size() < kMaxLogEntries + 1 && std::getline(lines, line);) {
          json entry = json::parse(line, nullptr, /*allow_exceptions=*/false);
          if (!entry.is_object()) break;
          build->entries.push_back(std::move(entry));
        }
      }
      build->entries_saved = build->entries.size();
      loaded.push_back(std::move(*build));
    }
    std::sort(loaded.begin(), loaded.end(),
              [](const TemplateBuild& a, const TemplateBuild& b) { return a.registered_ms < b.registered_ms; });
    for (TemplateBuild& build : loaded) {
      if (build.status != "ready" && build.status != "error") {
        const std::string message = "the build was interrupted: the daemon stopped while it ran";
        Log(build, "error", message);
        build.status = "error";
        build.reason = json{{"message", message}, {"step", build.step}, {"logEntries", json::array()}};
        SaveLog(build);
        Save(build);
      }
      if (build.status == "ready" && !build.image.empty()) image_builds_[build.image] = build.build_id;
      order_.push_back(build.build_id);
      builds_.emplace(build.build_id, std::move(build));
    }
  }

  // Registers a build; the oldest finished ones beyond kKeptBuilds are forgotten.
  void Add(TemplateBuild build) {
    std::lock_guard lock(mu_);
    build.registered_ms = UnixMillis();
    Save(build);
    order_.push_back(build.build_id);
    builds_.emplace(build.build_id, std::move(build));
    for (auto it = order_.begin(); builds_.size() > kKeptBuilds && it != order_.end();) {
      const TemplateBuild& old = builds_.at(*it);
      if (old.status == "ready" || old.status == "error") {
        Unsave(*it);
        builds_.erase(*it);
        it = order_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Its log's new entries appended to its file; with `status`, its status written again (it
  // ended).
  void Persist(const std::string& build_id, bool status) {
    std::lock_guard lock(mu_);
    const auto found = builds_.find(build_id);
    if (found == builds_.end()) return;
    SaveLog(found->second);
    if (status) Save(found->second);
  }

  // Runs `change` on the build under the lock; false if it is unknown (or, with `tenant`,
  // another's).
  template <typename Change>
  bool With(const std::string& build_id, Change&& change, const std::optional<std::string>& tenant = std::nullopt) {
    std::lock_guard lock(mu_);
    const auto found = builds_.find(build_id);
    if (found == builds_.end() || (tenant && found->second.tenant != *tenant)) return false;
    change(found->second);
    return true;
  }

  bool AnyOf(const std::string& alias, const std::string& tenant) {
    std::lock_guard lock(mu_);
    return std::any_of(builds_.begin(), builds_.end(),
                       [&](const auto& entry) { return entry.second.alias == alias && entry.second.tenant == tenant; });
  }

  // Cancels the alias's running builds and forgets all of them (a deleted template). An alias
  // of "" forgets every build of the tenant's (its purge).
  void Forget(const std::string& alias, const std::string& tenant) {
    std::lock_guard lock(mu_);
    for (auto it = builds_.begin(); it != builds_.end();) {
      if ((!alias.empty() && it->second.alias != alias) || it->second.tenant != tenant) {
        ++it;
        continue;
      }
      *it->second.cancelled = true;
      Unsave(it->first);
      order_.erase(std::find(order_.begin(), order_.end(), it->first));
      it = builds_.erase(it);
    }
  }

  void SetImageBuild(const std::string& image_name, const std::string& build_id) {
    std::lock_guard lock(mu_);
    image_builds_[image_name] = build_id;
  }
  // The build id of the image: the build that made it, if known; else one from its name.
  std::string BuildIdOf(const std::string& image_name) {
    std::lock_guard lock(mu_);
    const auto found = image_builds_.find(image_name);
    return found != image_builds_.end() ? found->second : UuidOfImage(image_name);
  }

  static void Log(TemplateBuild& build, const std::string& level, std::string message) {
    if (build.entries.size() > kMaxLogEntries) return;
    if (build.entries.size() == kMaxLogEntries) {
      message = fmt::format("(the log is cut here: a build keeps at most {} entries)", kMaxLogEntries);
    }
    build.entries.push_back({{"timestamp", NowRfc3339()}, {"level", level}, {"message", std::move(message)},
                             {"step", build.step}});
  }

 private:
  std::string StatusFile(const std::string& build_id) const { return dir_ + "/" + build_id + ".json"; }
  std::string LogFile(const std::string& build_id) const { return dir_ + "/" + build_id + ".log"; }

  void Save(const TemplateBuild& build) const {
    if (dir_.empty()) return;
    const std::string text = BuildToJson(build).dump(-1, ' ', false, json::error_handler_t::replace);
    if (Status written = WriteWholeFile(StatusFile(build.build_id), text.data(), text.size(), 0600); !written.ok())
      spdlog::warn("E2B template build {}: {}", build.build_id, written.error().message);
  }

  void SaveLog(TemplateBuild& build) const {
    if (dir_.empty() || build.entries_saved >= build.entries.size()) return;
    std::string lines;
    for (size_t i = build.entries_saved; i < build.entries.size(); ++i)
      lines += build.entries[i].dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    UniqueFd fd(::open(LogFile(build.build_id).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!fd || ::write(fd.get(), lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) {
      spdlog::warn("E2B template build {}: its log: {}", build.build_id, std::strerror(errno));
      return;
    }
    build.entries_saved = build.entries.size();
  }

  void Unsave(const std::string& build_id) const {
    if (dir_.empty()) return;
    ::unlink(StatusFile(build_id).c_str());
    ::unlink(LogFile(build_id).c_str());
  }

  std::string dir_;  // "": in memory only
  std::mutex mu_;
  std::map<std::string, TemplateBuild> builds_;
  std::deque<std::string> order_;
  std::map<std::string, std::string> image_builds_;
};

std::shared_ptr<TemplateBuilds> MakeTemplateBuilds(const std::string& dir) {
  return std::make_shared<TemplateBuilds>(dir);
}

void ForgetTenantBuilds(TemplateBuilds& builds, const std::string& tenant) { builds.Forget("", tenant); }

std::optional<TemplateName> ParseTemplateName(std::string_view text) {
  std::string name;
  for (char c : text) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.front()))) name.erase(0, 1);
  TemplateName out;
  if (const size_t slash = name.find('/'); slash != std::string::npos) {
    if (!IsNamePart(std::string_view(name).substr(0, slash), false)) return std::nullopt;
    name.erase(0, slash + 1);
  }
  const size_t colon = name.find(':');
  out.alias = name.substr(0, colon);
  if (colon != std::string::npos) out.tag = name.substr(colon + 1);
  if (!IsNamePart(out.alias, false) || (colon != std::string::npos && !IsNamePart(out.tag, true))) return std::nullopt;
  if (out.tag == kDefaultTag) out.tag.clear();
  return out;
}

std::string TemplateImageName(const TemplateName& name) {
  return name.tag.empty() ? name.alias : name.alias + "." + name.tag;
}

std::optional<std::string> TemplateImageFor(core::SandboxManager& manager, const std::string& template_id,
                                            const std::string& tenant) {
  const std::optional<TemplateName> name = ParseTemplateName(template_id);
  if (!name) return std::nullopt;
  const std::string image_name = TemplateImageName(*name);
  Result<core::ImageInfo> image = manager.FindImage(image_name, tenant);
  if (!image.ok() || !IsTemplateImage(*image, name->alias)) return std::nullopt;
  return image_name;
}

bool TemplateExists(E2bContext& context, const std::string& alias, const std::string& tenant) {
  const std::optional<TemplateName> name = ParseTemplateName(alias);
  if (!name) return false;
  return context.templates->AnyOf(name->alias, tenant) || !TagsOf(context.manager, name->alias, tenant).empty();
}

namespace {

// Turns the builder's events into E2B log entries of the build.
class BuildLog {
 public:
  BuildLog(TemplateBuilds& builds, std::string build_id, const TemplatePlan& plan)
      : builds_(builds), build_id_(std::move(build_id)), plan_(plan) {
    for (const std::string& label : plan.step_labels)
      if (label != "base" && label != "finalize") steps_ = std::max(steps_, std::stoi(label));
  }

  void Info(const std::string& message) { Add("info", message); }
  void Add(const std::string& level, const std::string& message) {
    builds_.With(build_id_, [&](TemplateBuild& build) { TemplateBuilds::Log(build, level, message); });
    builds_.Persist(build_id_, /*status=*/false);
  }

  void operator()(const json& event) {
    Record(event);
    builds_.Persist(build_id_, /*status=*/false);
  }

 private:
  void Record(const json& event) {
    const std::string status = event.value("status", "");
    if (status == "step") {
      const size_t index = event.value("step", size_t{0});
      if (index == 0 || index > plan_.step_labels.size()) return;
      const std::string& label = plan_.step_labels[index - 1];
      const std::string& title = plan_.step_titles[index - 1];
      const bool cached = event.value("cached", false);
      builds_.With(build_id_, [&](TemplateBuild& build) {
        build.step = label;
        if (title == build.last_title) return;
        build.last_title = title;
        const std::string where = label == "base" || label == "finalize" ? label : fmt::format("{}/{}", label, steps_);
        TemplateBuilds::Log(build, "info", fmt::format("{}[builder {}] {}", cached ? "CACHED " : "", where, title));
      });
    } else if (status == "output") {
      const std::string data = event.value("data", "");
      builds_.With(build_id_, [&](TemplateBuild& build) {
        size_t start = 0;
        while (start < data.size()) {
          size_t end = data.find('\n', start);
          if (end == std::string::npos) end = data.size();
          std::string line = data.substr(start, end - start);
          if (!line.empty() && line.back() == '\r') line.pop_back();
          if (!line.empty()) TemplateBuilds::Log(build, "info", line);
          start = end + 1;
        }
      });
    } else if (status == "warning") {
      Add("warn", event.value("message", ""));
    } else if (status == "exporting") {
      builds_.With(build_id_, [&](TemplateBuild& build) {
        build.step = "finalize";
        TemplateBuilds::Log(build, "info", "Storing the template's image");
      });
    } else if (status == "resolved") {
      Add("info", "Pulling " + event.value("reference", event.value("image", std::string("the base image"))));
    }
  }

  TemplateBuilds& builds_;
  std::string build_id_;
  const TemplatePlan& plan_;
  int steps_ = 0;
};

struct BuildJob {
  std::string tenant;  // whose build: its image, cache, quotas and egress rules (api::BuildRequest)
  std::shared_ptr<TemplateBuilds> builds;
  core::SandboxManager* manager = nullptr;
  asio::any_io_executor io;
  std::string build_id;
  std::string alias;
  TemplatePlan plan;
  std::vector<std::string> image_names;
  int64_t cpus = 2;
  int64_t memory_mb = 2048;
  std::string upload_dir;
  std::string files_dir;
  std::shared_ptr<std::atomic<bool>> cancelled;
};

// The build, on the pull pool: the file sets unpacked into a context, the plan's Dockerfile
// built (pulling with the registry login if one came), the result named by its tags.
Result<core::ImageInfo> RunJob(const BuildJob& job, BuildLog& log) {
  std::string dir = job.upload_dir + "/build-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return SystemError("mkdtemp " + dir, errno);
  ScopeGuard cleanup([&dir] { (void)storage::RemoveTree(dir); });
  api::BuildRequest request;
  request.context_dir = dir + "/context";
  request.work_dir = dir + "/work";
  if (::mkdir(request.context_dir.c_str(), 0700) != 0 || ::mkdir(request.work_dir.c_str(), 0700) != 0)
    return SystemError("mkdir " + dir, errno);
  for (const std::string& hash : job.plan.files_hashes) {
    const std::string into = request.context_dir + "/" + hash;
    if (::mkdir(into.c_str(), 0700) != 0) return SystemError("mkdir " + into, errno);
    Status unpacked = api::ExtractContext(job.files_dir + "/" + api::TemplateFileSetName(job.tenant, hash), into);
    if (!unpacked.ok()) return Invalid("the files uploaded as " + hash + ": " + unpacked.error().message);
  }
  if (job.plan.registry_login) {
    auto ref = storage::ParseImageRef(job.plan.base_image, job.manager->config().registry.default_registry);
    if (!ref.ok()) return ref.error();
    storage::PullRequest pull;
    pull.ref = *ref;
    pull.login = storage::RegistryLogin{job.plan.registry_login->first, job.plan.registry_login->second};
    pull.platform = storage::HostPlatform();
    pull.tenant = job.tenant;
    log.Info("Pulling " + job.plan.base_image + " with the registry login given");
    auto pulled = job.manager->PullImage(pull, [](const json&) {});
    if (!pulled.ok()) return pulled.error();
  }
  request.dockerfile = job.plan.dockerfile;
  request.tag = job.image_names.front();
  request.more_tags.assign(job.image_names.begin() + 1, job.image_names.end());
  request.no_cache = job.plan.force;
  request.network.mode = "open";  // E2B's builds reach the internet, as its sandboxes do
  request.cpus = static_cast<double>(job.cpus);
  request.tenant = job.tenant;
  request.memory_mb = job.memory_mb;
  const api::BuildListener listener = [&log](const json& event) { log(event); };
  return api::RunBuild(*job.manager, job.io, request, listener, *job.cancelled);
}

// A failure as E2B words it: a RUN step's as "failed to run command '<cmd>': ...", without the
// builder's own step numbers and Dockerfile line (the E2B step is in `step`), an unknown user
// as envd's "invalid username".
std::string FailureMessage(const TemplatePlan& plan, const std::string& step, const std::string& message) {
  std::string detail = message;
  if (message.starts_with("step ")) {
    const size_t end = message.find("): ");
    if (end != std::string::npos) detail = message.substr(end + 3);
  }
  const auto command = plan.run_commands.find(step);
  if (command == plan.run_commands.end()) return detail;
  constexpr std::string_view kUser = "user ";
  constexpr std::string_view kNotFound = " not found in /etc/passwd";
  if (detail.starts_with(kUser) && detail.ends_with(kNotFound)) {
    const std::string user = detail.substr(kUser.size(), detail.size() - kUser.size() - kNotFound.size());
    detail = "command failed: unauthenticated: invalid username: '" + user + "'";
  }
  return "failed to run command '" + command->second + "': " + detail;
}

void RunBuildJob(const BuildJob& job) {
  BuildLog log(*job.builds, job.build_id, job.plan);
  log.Info(fmt::format("Building template {} from {}", job.alias, job.plan.base_image));
  Result<core::ImageInfo> image = RunJob(job, log);
  if (image.ok()) job.builds->SetImageBuild(image->name, job.build_id);
  ScopeGuard persist([&] { job.builds->Persist(job.build_id, /*status=*/true); });
  job.builds->With(job.build_id, [&](TemplateBuild& build) {
    if (image.ok()) {
      build.image = image->name;
      build.step = "finalize";
      TemplateBuilds::Log(build, "info", "Template is ready");
      build.status = "ready";
      return;
    }
    const std::string message = FailureMessage(job.plan, build.step, image.error().message);
    TemplateBuilds::Log(build, "error", message);
    build.status = "error";
    json reason = {{"message", message}, {"step", build.step}};
    json entries = json::array();
    for (const json& entry : build.entries)
      if (entry["step"] == build.step && (entry["level"] == "error" || entry["level"] == "warn"))
        entries.push_back(entry);
    reason["logEntries"] = std::move(entries);
    build.reason = std::move(reason);
  });
}

class TemplateRoutes {
 public:
  TemplateRoutes(E2bContext& context, api::HttpExchange& exchange, std::string tenant)
      : context_(context), exchange_(exchange), tenant_(std::move(tenant)) {}

  asio::awaitable<std::optional<std::string_view>> Serve(const api::RequestTarget& target,
                                                         const std::vector<std::string>& s) {
    const http::verb method = exchange_.request().method();
    const bool get = method == http::verb::get, post = method == http::verb::post;
    const bool del = method == http::verb::delete_;
    const size_t n = s.size();
    if (n == 2 && s[0] == "v3" && s[1] == "templates" && post) co_return co_await RequestBuild(), "POST /v3/templates";
    if (n >= 2 && s[0] == "templates") {
      if (n == 2 && s[1] == "tags" && post) co_return co_await AssignTags(), "POST /templates/tags";
      if (n == 2 && s[1] == "tags" && del) co_return co_await RemoveTags(), "DELETE /templates/tags";
      if (n == 2 && del && !context_.manager.GetSnapshot(s[1]).ok()) {
        co_return co_await DeleteTemplate(s[1]), "DELETE /templates/{id}";
      }
      if (n == 3 && s[2] == "tags" && get) co_return co_await ListTags(s[1]), "GET /templates/{id}/tags";
      if (n == 4 && s[2] == "files" && get) co_return co_await FileLink(s[1], s[3]), "GET /templates/{id}/files/{hash}";
      if (n == 5 && s[2] == "builds" && s[4] == "status" && get) {
        co_return co_await Status(s[1], s[3], target.query), "GET /templates/{id}/builds/{buildID}/status";
      }
    }
    if (n == 5 && s[0] == "v2" && s[1] == "templates" && s[3] == "builds" && post) {
      co_return co_await StartBuild(s[2], s[4]), "POST /v2/templates/{id}/builds/{buildID}";
    }
    co_return std::nullopt;
  }

 private:
  asio::awaitable<void> Fail(const Error& error) { co_await SendE2bError(exchange_, error); }

  asio::awaitable<Result<json>> Body() {
    Result<std::string> body = co_await exchange_.ReadBody(kMaxBody);
    if (!body.ok()) co_return body.error();
    json parsed = body->empty() ? json::object() : ParseBoundedJson(*body);
    if (!parsed.is_object()) co_return Invalid("the request body is not a JSON object");
    co_return parsed;
  }

  template <typename Function>
  auto Blocking(Function function) {
    return api::RunBlocking(context_.blocking_pool, std::move(function));
  }

  // POST /v3/templates: a build of name[:tag] (and tags) registered, waiting for its definition.
  asio::awaitable<void> RequestBuild() {
    Result<json> body = co_await Body();
    if (!body.ok()) co_return co_await Fail(body.error());
    const auto name_field = body->find("name") != body->end() ? body->find("name") : body->find("alias");
    if (name_field == body->end() || !name_field->is_string())
      co_return co_await Fail(Invalid("name must be a string: alias[:tag]"));
    const std::optional<TemplateName> name = ParseTemplateName(name_field->get<std::string>());
    if (!name) {
      const Error bad = Invalid("name must be [namespace/]alias[:tag]: an alias of a-z 0-9 - _, a tag also with .");
      co_return co_await Fail(bad);
    }
    TemplateBuild build;
    build.tenant = tenant_;
    build.alias = name->alias;
    build.build_id = NewUuid();
    if (!name->tag.empty()) build.tags.push_back(name->tag);
    if (const auto tags = body->find("tags"); tags != body->end() && !tags->is_null()) {
      if (!tags->is_array()) co_return co_await Fail(Invalid("tags must be an array of strings"));
      for (const json& tag : *tags) {
        if (!tag.is_string() || !IsNamePart(tag.get<std::string>(), true))
          co_return co_await Fail(Invalid("tags must hold tags of a-z 0-9 - _ ."));
        const std::string text = tag.get<std::string>();
        if (std::find(build.tags.begin(), build.tags.end(), text) == build.tags.end()) build.tags.push_back(text);
      }
    }
    if (build.tags.empty()) build.tags.push_back(kDefaultTag);
    for (const auto& [field, low, high, target] :
         {std::tuple{"cpuCount", int64_t{1}, int64_t{64}, &build.cpus},
          std::tuple{"memoryMB", int64_t{128}, int64_t{1} << 20, &build.memory_mb}}) {
      const auto found = body->find(field);
      if (found == body->end() || found->is_null()) continue;
      if (!found->is_number_integer() || found->get<int64_t>() < low || found->get<int64_t>() > high)
        co_return co_await Fail(Invalid(fmt::format("{} must be an integer from {} to {}", field, low, high)));
      *target = found->get<int64_t>();
    }
    const json answer = {{"templateID", build.alias}, {"buildID", build.build_id}, {"public", false},
                         {"names", {build.alias}},    {"tags", build.tags},         {"aliases", {build.alias}}};
    context_.templates->Add(std::move(build));
    co_await exchange_.SendJson(http::status::accepted, answer);
  }

  bool KnownTemplate(const std::string& id) {
    const std::optional<TemplateName> name = ParseTemplateName(id);
    return name && TemplateExists(context_, name->alias, tenant_);
  }

  // GET /templates/{id}/files/{hash}: present, or a signed URL to PUT the set's tar to.
  asio::awaitable<void> FileLink(const std::string& id, const std::string& hash) {
    if (!IsFilesHash(hash)) co_return co_await Fail(Invalid("the files hash must be 64 lower-case hex digits"));
    const bool known = co_await Blocking([&] { return KnownTemplate(id); });
    if (!known) co_return co_await Fail(NotFound("template " + id));
    struct stat st{};
    const std::string path = FileSetPath(context_, tenant_, hash);
    if (::stat(path.c_str(), &st) == 0) {
      const json present = {{"present", true}};
      co_return co_await exchange_.SendJson(http::status::created, present);
    }
    const int64_t expires = UnixMillis() / 1000 + kUploadUrlTtlS;
    const auto host_field = exchange_.request().find(http::field::host);
    const std::string host =
        host_field != exchange_.request().end() ? std::string(api::FromBeast(host_field->value())) : context_.domain;
    const std::string for_tenant = tenant_.empty() ? "" : "&tenant=" + tenant_;
    const json link = {{"present", false},
                       {"url", fmt::format("http://{}{}{}?expires={}{}&token={}", host, kTemplateUploadPrefix, hash,
                                           expires, for_tenant, UploadToken(context_, tenant_, hash, expires))}};
    co_await exchange_.SendJson(http::status::created, link);
  }

  // POST /v2/templates/{id}/builds/{buildID}: the definition; the build starts.
  asio::awaitable<void> StartBuild(const std::string& id, const std::string& build_id) {
    Result<json> body = co_await Body();
    if (!body.ok()) co_return co_await Fail(body.error());
    const std::optional<TemplateName> name = ParseTemplateName(id);
    std::string alias, state;
    BuildJob job;
    const bool known = context_.templates->With(build_id, [&](TemplateBuild& build) {
      alias = build.alias;
      state = build.status;
      job.cpus = build.cpus;
      job.memory_mb = build.memory_mb;
      job.cancelled = build.cancelled;
      for (const std::string& tag : build.tags)
        job.image_names.push_back(TemplateImageName({build.alias, tag == kDefaultTag ? "" : tag}));
    }, tenant_);
    if (!known || !name || name->alias != alias) co_return co_await Fail(NotFound("build " + build_id));
    if (state != "waiting") co_return co_await Fail(Invalid("build is not in waiting state"));
    core::SandboxManager& manager = context_.manager;
    const std::string& tenant = tenant_;
    const TemplateResolver resolve = [&manager, &tenant](const std::string& from) -> Result<TemplateBase> {
      const std::optional<std::string> image = TemplateImageFor(manager, from, tenant);
      if (!image) return Invalid("fromTemplate: no template " + from);
      Result<core::ImageInfo> info = manager.FindImage(*image, tenant);
      if (!info.ok()) return info.error();
      return TemplateBase{*image, info->config ? info->config->user : ""};
    };
    Result<TemplatePlan> plan = co_await Blocking([&] { return PlanTemplateBuild(*body, alias, resolve); });
    if (!plan.ok()) co_return co_await Fail(plan.error());
    for (const std::string& hash : plan->files_hashes) {
      struct stat st{};
      if (::stat(FileSetPath(context_, tenant_, hash).c_str(), &st) != 0)
        co_return co_await Fail(Invalid("the files of hash " + hash + " were not uploaded"));
    }
    bool started = false;
    context_.templates->With(build_id, [&](TemplateBuild& build) {
      if (build.status != "waiting") return;
      build.status = "building";
      started = true;
    });
    if (!started) co_return co_await Fail(Invalid("build is not in waiting state"));
    job.tenant = tenant_;
    job.builds = context_.templates;
    job.manager = &manager;
    job.io = co_await asio::this_coro::executor;
    job.build_id = build_id;
    job.alias = alias;
    job.plan = std::move(*plan);
    job.upload_dir = context_.upload_dir;
    job.files_dir = FilesDir(context_);
    asio::post(*context_.pull_pool, [job = std::move(job)] { RunBuildJob(job); });
    co_await exchange_.SendNoContent();
  }

  // GET /templates/{id}/builds/{buildID}/status?logsOffset=N&limit=N
  asio::awaitable<void> Status(const std::string& id, const std::string& build_id, const api::QueryParams& query) {
    size_t offset = 0, limit = kMaxPageEntries;
    for (const auto& [key, value] : query) {
      if (key != "logsOffset" && key != "limit") continue;
      size_t number = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
      if (error != std::errc() || end != value.data() + value.size())
        co_return co_await Fail(Invalid(key + " must be a non-negative integer"));
      (key == "limit" ? limit : offset) = number;
    }
    limit = std::min(limit, kMaxPageEntries);
    const std::optional<TemplateName> name = ParseTemplateName(id);
    json answer;
    const bool known = context_.templates->With(build_id, [&](TemplateBuild& build) {
      if (!name || name->alias != build.alias) return;
      json entries = json::array();
      for (size_t i = offset; i < build.entries.size() && entries.size() < limit; ++i) entries.push_back(build.entries[i]);
      answer = {{"templateID", build.alias}, {"buildID", build.build_id}, {"status", build.status},
                {"logs", json::array()},     {"logEntries", std::move(entries)}};
      if (build.reason) answer["reason"] = *build.reason;
    }, tenant_);
    if (!known || answer.is_null()) co_return co_await Fail(NotFound("build " + build_id));
    co_await exchange_.SendJson(http::status::ok, answer);
  }

  // The image a "name[:tag]" names, and its parsed name.
  Result<std::pair<TemplateName, core::ImageInfo>> Named(const std::string& text) {
    const std::optional<TemplateName> name = ParseTemplateName(text);
    if (!name) return Invalid("not a template name: " + text);
    Result<core::ImageInfo> image = context_.manager.FindImage(TemplateImageName(*name), tenant_);
    if (!image.ok() || !IsTemplateImage(*image, name->alias)) return NotFound("template " + text);
    return std::pair{*name, *image};
  }

  Result<std::vector<std::string>> TagList(const json& body) {
    const auto tags = body.find("tags");
    std::vector<std::string> out;
    if (tags != body.end() && tags->is_string()) out.push_back(tags->get<std::string>());
    if (tags != body.end() && tags->is_array())
      for (const json& tag : *tags)
        if (tag.is_string()) out.push_back(tag.get<std::string>());
    if (out.empty() || (tags->is_array() && out.size() != tags->size())) return Invalid("tags must be a list of tags");
    for (const std::string& tag : out)
      if (!IsNamePart(tag, true)) return Invalid("tags must hold tags of a-z 0-9 - _ .: " + tag);
    return out;
  }

  // POST /templates/tags {"target": "name[:tag]", "tags": [...]}: the tags name the target's build.
  asio::awaitable<void> AssignTags() {
    Result<json> body = co_await Body();
    if (!body.ok()) co_return co_await Fail(body.error());
    const auto target = body->find("target");
    if (target == body->end() || !target->is_string()) co_return co_await Fail(Invalid("target must be name[:tag]"));
    Result<std::vector<std::string>> tags = TagList(*body);
    if (!tags.ok()) co_return co_await Fail(tags.error());
    const std::string target_name = target->get<std::string>();
    core::SandboxManager& manager = context_.manager;
    Result<std::string> image_name = co_await Blocking([&]() -> Result<std::string> {
      auto named = Named(target_name);
      if (!named.ok()) return named.error();
      const auto& [name, image] = *named;
      storage::BuiltImage built;
      built.build_key = "sha256:" + image.name;
      built.config = *image.config;
      built.host_base = image.host_base;
      for (const std::string& tag : *tags) {
        auto stored =
            manager.StoreBuiltImage(built, "", TemplateImageName({name.alias, tag == kDefaultTag ? "" : tag}), tenant_);
        if (!stored.ok()) return stored.error();
      }
      return image.name;
    });
    if (!image_name.ok()) co_return co_await Fail(image_name.error());
    const json answer = {{"tags", *tags}, {"buildID", context_.templates->BuildIdOf(*image_name)}};
    co_await exchange_.SendJson(http::status::created, answer);
  }

  // DELETE /templates/tags {"name": "name", "tags": [...]}
  asio::awaitable<void> RemoveTags() {
    Result<json> body = co_await Body();
    if (!body.ok()) co_return co_await Fail(body.error());
    const auto name_field = body->find("name");
    if (name_field == body->end() || !name_field->is_string()) co_return co_await Fail(Invalid("name must be a string"));
    const std::optional<TemplateName> name = ParseTemplateName(name_field->get<std::string>());
    if (!name || name_field->get<std::string>().find(':') != std::string::npos)
      co_return co_await Fail(Invalid("name must be a template's name without a tag"));
    Result<std::vector<std::string>> tags = TagList(*body);
    if (!tags.ok()) co_return co_await Fail(tags.error());
    if (std::find(tags->begin(), tags->end(), kDefaultTag) != tags->end())
      co_return co_await Fail(Invalid("the default tag cannot be removed"));
    core::SandboxManager& manager = context_.manager;
    const std::string alias = name->alias;
    Result<bool> removed = co_await Blocking([&]() -> Result<bool> {
      const std::map<std::string, core::ImageInfo> existing = TagsOf(manager, alias, tenant_);
      if (existing.empty()) return NotFound("template " + alias);
      for (const std::string& tag : *tags)
        if (!existing.contains(tag)) return NotFound("tag " + tag + " of template " + alias);
      for (const std::string& tag : *tags) BH_TRY(manager.DeleteImage(TemplateImageName({alias, tag}), tenant_));
      return true;
    });
    if (!removed.ok()) co_return co_await Fail(removed.error());
    co_await exchange_.SendNoContent();
  }

  // GET /templates/{id}/tags
  asio::awaitable<void> ListTags(const std::string& id) {
    const std::optional<TemplateName> name = ParseTemplateName(id);
    if (!name) co_return co_await Fail(NotFound("template " + id));
    core::SandboxManager& manager = context_.manager;
    const std::string alias = name->alias;
    const std::map<std::string, core::ImageInfo> tags = co_await Blocking([&] { return TagsOf(manager, alias, tenant_); });
    if (tags.empty() && !context_.templates->AnyOf(alias, tenant_)) co_return co_await Fail(NotFound("template " + id));
    json answer = json::array();
    for (const auto& [tag, image] : tags)
      answer.push_back({{"tag", tag}, {"buildID", context_.templates->BuildIdOf(image.name)}, {"createdAt", image.created_at}});
    co_await exchange_.SendJson(http::status::ok, answer);
  }

  // DELETE /templates/{id}: every tag's image (409 while a sandbox uses one), its builds cancelled.
  asio::awaitable<void> DeleteTemplate(const std::string& id) {
    const std::optional<TemplateName> name = ParseTemplateName(id);
    if (!name) co_return co_await SendE2bError(exchange_, 404, fmt::format("template \"{}\" not found", id));
    core::SandboxManager& manager = context_.manager;
    const std::string alias = name->alias;
    const bool building = context_.templates->AnyOf(alias, tenant_);
    context_.templates->Forget(alias, tenant_);
    Result<size_t> deleted = co_await Blocking([&]() -> Result<size_t> {
      const std::map<std::string, core::ImageInfo> tags = TagsOf(manager, alias, tenant_);
      for (const auto& [tag, image] : tags)
        BH_TRY(manager.DeleteImage(TemplateImageName({alias, tag == kDefaultTag ? "" : tag}), tenant_));
      return tags.size();
    });
    if (!deleted.ok()) co_return co_await Fail(deleted.error());
    if (*deleted == 0 && !building) {
      co_return co_await SendE2bError(exchange_, 404, fmt::format("template \"{}\" not found", id));
    }
    co_await exchange_.SendNoContent();
  }

  E2bContext& context_;
  api::HttpExchange& exchange_;
  const std::string tenant_;  // the caller's ("" the host's): templates are each tenant's own images
};

}  // namespace

asio::awaitable<std::optional<std::string_view>> ServeTemplates(E2bContext& context, api::HttpExchange& exchange,
                                                                const api::RequestTarget& target,
                                                                const std::vector<std::string>& segments,
                                                                const std::string& tenant) {
  TemplateRoutes routes(context, exchange, tenant);
  co_return co_await routes.Serve(target, segments);
}

asio::awaitable<std::string_view> ServeTemplateUpload(E2bContext& context, api::HttpExchange& exchange,
                                                      const api::RequestTarget& target) {
  constexpr std::string_view kLabel = "PUT /e2b-template-files/{hash}";
  const std::string hash = target.path.substr(kTemplateUploadPrefix.size());
  std::string expires_text, token, tenant;
  for (const auto& [key, value] : target.query) {
    if (key == "expires") expires_text = value;
    if (key == "token") token = value;
    if (key == "tenant") tenant = value;
  }
  int64_t expires = 0;
  const auto [end, error] = std::from_chars(expires_text.data(), expires_text.data() + expires_text.size(), expires);
  const bool parsed = !expires_text.empty() && error == std::errc() && end == expires_text.data() + expires_text.size();
  if (!IsFilesHash(hash) || !parsed || !ConstantTimeEquals(token, UploadToken(context, tenant, hash, expires))) {
    co_await SendE2bError(exchange, 401, "invalid upload signature");
    co_return kLabel;
  }
  if (expires < UnixMillis() / 1000) {
    co_await SendE2bError(exchange, 401, "the upload URL has expired: ask for another");
    co_return kLabel;
  }
  if (exchange.request().method() != http::verb::put) {
    co_await SendE2bError(exchange, 405, "an upload URL takes PUT");
    co_return kLabel;
  }
  const std::string dir = FilesDir(context);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    const Error failed = SystemError("mkdir " + dir, errno);
    co_await SendE2bError(exchange, failed);
    co_return kLabel;
  }
  // Spooled under a temporary name (that a restart removes) and renamed: a set is whole or absent.
  std::string part = context.upload_dir + "/upload-XXXXXX";
  UniqueFd fd(::mkstemp(part.data()));
  if (!fd) {
    const Error failed = SystemError("mkstemp " + part, errno);
    co_await SendE2bError(exchange, failed);
    co_return kLabel;
  }
  ScopeGuard remove([&part] { ::unlink(part.c_str()); });
  Result<uint64_t> received = co_await exchange.ReadBodyToFile(fd.get(), kMaxUpload);
  if (!received.ok()) {
    co_await SendE2bError(exchange, received.error());
    co_return kLabel;
  }
  if (*received == 0) {
    co_await SendE2bError(exchange, 400, "the body must be the files' tar archive (gzip or plain)");
    co_return kLabel;
  }
  if (::fsync(fd.get()) != 0 || ::rename(part.c_str(), FileSetPath(context, tenant, hash).c_str()) != 0) {
    const Error failed = SystemError("store " + hash, errno);
    co_await SendE2bError(exchange, failed);
    co_return kLabel;
  }
  remove.Dismiss();
  const std::string upload_dir = context.upload_dir;
  (void)co_await api::RunBlocking(context.blocking_pool, [&] { return api::PruneTemplateFiles(upload_dir); });
  co_await exchange.SendNoContent();
  co_return kLabel;
}

}  // namespace bulkhead::e2b
