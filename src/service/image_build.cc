#include "service/image_build.h"

#include <archive.h>
#include <unistd.h>

#include <condition_variable>
#include <algorithm>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "build/dockerfile.h"
#include "common/digest.h"
#include "common/scope_guard.h"
#include "service/accounts.h"
#include "service/build_context.h"
#include "service/build_sandbox.h"
#include "storage/image_ref.h"

namespace bulkhead::api {
namespace {

using nlohmann::json;
using Owner = std::optional<std::pair<uint32_t, uint32_t>>;

constexpr size_t kOutputTail = 8 * 1024;  // of a failing step's output, in its error
constexpr size_t kMaxFileSteps = 500;      // each a sandbox and a snapshot
constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// A cache key: the hex SHA-256 of its parts, each length-prefixed (no two lists collide).
std::string KeyOf(std::initializer_list<std::string_view> parts) {
  Sha256Stream hash;
  for (std::string_view part : parts) {
    hash.Update(std::to_string(part.size()) + ":");
    hash.Update(part);
  }
  return HexEncode(hash.Digest());
}

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += std::to_string(item.size()) + ":" + item;
  return out;
}

// The files a stage has reached: an image, and on it the snapshot of its last file step.
struct State {
  std::string image;     // a stored image's name
  std::string snapshot;  // "" = the image as it is
  std::string key;
  bool host_base = false;
};

Error BuildFailed(std::string message) { return MakeError(ErrorCode::kInvalid, std::move(message), "build_failed"); }

// The "user[:group]" of --chown (or a WORKDIR's USER) as ids, by the sandbox's own accounts.
Result<std::pair<uint32_t, uint32_t>> OwnerOf(const std::string& spec, const Accounts& accounts) {
  auto number = [](const std::string& text) -> std::optional<uint32_t> {
    if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    const unsigned long value = std::stoul(text);
    if (value > 0xfffffffful) return std::nullopt;
    return static_cast<uint32_t>(value);
  };
  const size_t colon = spec.find(':');
  const std::string user = spec.substr(0, colon);
  std::optional<uint32_t> uid = number(user);
  std::optional<uint32_t> gid;
  if (!uid) {
    const Account* account = accounts.FindName(user);
    if (!account) return BuildFailed("no user " + user + " in the image's /etc/passwd");
    uid = account->uid;
    gid = account->gid;
  }
  if (colon != std::string::npos) {
    const std::string group = spec.substr(colon + 1);
    gid = number(group);
    if (!gid) {
      for (const auto& [id, name] : accounts.groups)
        if (name == group) gid = id;
      if (!gid) return BuildFailed("no group " + group + " in the image's /etc/group");
    }
  }
  return std::pair{*uid, gid.value_or(*uid)};
}

class Builder {
 public:
  Builder(core::SandboxManager& manager, const boost::asio::any_io_executor& io, const BuildRequest& request,
          const BuildListener& listener, const std::atomic<bool>& stop)
      : manager_(manager), io_(io), request_(request), listener_(listener), stop_(stop) {}

  Result<core::ImageInfo> Run() {
    auto file = build::ParseDockerfile(request_.dockerfile);
    if (!file.ok()) return file.error();
    auto plan = build::EvaluateDockerfile(*file, request_.build_args, request_.target,
                                          [this](const std::string& image) { return BaseConfig(image); });
    if (!plan.ok()) return plan.error();
    size_t file_steps = 0;
    for (const build::Stage& stage : plan->stages)
      for (const build::Step& step : stage.steps) file_steps += step.kind != build::Step::Kind::kConfig;
    if (file_steps > kMaxFileSteps)
      return MakeError(ErrorCode::kBadRequest, "a build runs at most " + std::to_string(kMaxFileSteps) +
                                                   " RUN, COPY, ADD and WORKDIR steps; this one has " +
                                                   std::to_string(file_steps), "dockerfile_invalid");
    for (const std::string& unused : plan->unused_build_args)
      listener_({{"status", "warning"}, {"message", "build arg " + unused + " was given but no ARG declares it"}});

    const std::set<size_t> needed = NeededStages(*plan);
    std::vector<State> finals(plan->stages.size());
    for (size_t i = 0; i < plan->stages.size(); ++i) {
      if (!needed.contains(i)) continue;
      auto final_state = BuildStage(*plan, i, finals);
      if (!final_state.ok()) return final_state.error();
      finals[i] = *final_state;
    }
    return Export(finals.back(), plan->stages.back().config);
  }

 private:
  // The target and the stages it takes from (FROM a stage, COPY --from a stage).
  static std::set<size_t> NeededStages(const build::BuildPlan& plan) {
    std::set<size_t> needed;
    std::vector<size_t> todo = {plan.stages.size() - 1};
    while (!todo.empty()) {
      const size_t i = todo.back();
      todo.pop_back();
      if (!needed.insert(i).second) continue;
      const build::Stage& stage = plan.stages[i];
      if (stage.base_stage) todo.push_back(static_cast<size_t>(*stage.base_stage));
      for (const build::Step& step : stage.steps)
        if (step.from_stage) todo.push_back(static_cast<size_t>(*step.from_stage));
    }
    return needed;
  }

  // A FROM image's config, pulled first where the request says; remembers the stored image.
  Result<storage::ImageConfig> BaseConfig(const std::string& image) {
    auto state = BaseState(image);
    if (!state.ok()) return state.error();
    auto info = manager_.FindImage(state->image, request_.tenant);
    if (!info.ok()) return info.error();
    return info->config.value_or(storage::ImageConfig{});
  }

  Result<State> BaseState(const std::string& image) {
    if (auto known = bases_.find(image); known != bases_.end()) return known->second;
    Result<core::ImageInfo> info = image == "scratch" ? ScratchImage() : FindOrPull(image);
    if (!info.ok()) return info.error();
    // Pulled and built images are named by their content; others by name and when stored.
    const bool by_content = info->source == "registry" || info->source == "build";
    State state;
    state.image = info->name;
    state.key = KeyOf({"base", info->name, by_content ? "" : info->created_at});
    state.host_base = info->name == "host" || info->host_base;
    bases_[image] = state;
    return state;
  }

  Result<core::ImageInfo> FindOrPull(const std::string& image) {
    const std::string& default_registry = manager_.config().registry.default_registry;
    const bool pullable = storage::IsRegistryReference(image) || !default_registry.empty();
    auto found = manager_.FindImage(image, request_.tenant);
    const bool missing = !found.ok() && found.error().code == ErrorCode::kNotFound;
    if (pullable && image != "host" && request_.pull != "never" && (missing || request_.pull == "always")) {
      auto ref = storage::ParseImageRef(image, default_registry);
      if (!ref.ok()) return ref.error();
      storage::PullRequest pull;
      pull.ref = *ref;
      pull.platform = storage::HostPlatform();
      pull.tenant = request_.tenant;
      auto pulled = manager_.PullImage(pull, listener_);
      if (!pulled.ok()) return pulled.error();
      found = manager_.FindImage(image, request_.tenant);
    }
    return found;
  }

  // FROM scratch: an empty image, made once.
  Result<core::ImageInfo> ScratchImage() {
    const std::string tar = request_.work_dir + "/scratch.tar";
    struct archive* a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    const bool written = archive_write_open_filename(a, tar.c_str()) == ARCHIVE_OK && archive_write_close(a) == ARCHIVE_OK;
    archive_write_free(a);
    if (!written) return MakeError(ErrorCode::kInternal, "could not write " + tar);
    storage::BuiltImage scratch;
    scratch.build_key = Sha256Digest("bulkhead: the empty image FROM scratch names");
    return manager_.StoreBuiltImage(scratch, tar, "", request_.tenant);
  }

  Result<State> BuildStage(const build::BuildPlan& plan, size_t index, const std::vector<State>& finals) {
    const build::Stage& stage = plan.stages[index];
    auto base = stage.base_stage ? Result<State>(finals[static_cast<size_t>(*stage.base_stage)]) : BaseState(stage.base);
    if (!base.ok()) return base.error();
    State state = *base;
    listener_({{"status", "stage"}, {"stage", index}, {"name", stage.name}, {"base", stage.base}});
    for (size_t i = 0; i < stage.steps.size(); ++i) {
      if (stop_) return MakeError(ErrorCode::kUnavailable, "the build was cancelled", "build_cancelled");
      const build::Step& step = stage.steps[i];
      json event = {{"status", "step"}, {"stage", index}, {"step", i + 1}, {"count", stage.steps.size()},
                    {"instruction", step.original}};
      if (step.kind == build::Step::Kind::kConfig) {
        listener_(event);
        continue;
      }
      auto next = FileStep(step, state, finals, event);
      if (!next.ok()) {
        // A step that failed before it began (a COPY of a file the context lacks) is still the
        // step that failed: its event goes out, so that listeners name it and not the one before.
        if (!event.contains("cached")) listener_(event);
        if (next.error().detail_code != "build_failed") return next.error();
        return BuildFailed("step " + std::to_string(i + 1) + "/" + std::to_string(stage.steps.size()) + " (" +
                           step.original + "): " + next.error().message);
      }
      state = *next;
    }
    return state;
  }

  // A RUN, COPY, ADD or WORKDIR: from the cache, or run in a sandbox of `state` and snapshotted.
  Result<State> FileStep(const build::Step& step, const State& state, const std::vector<State>& finals, json& event) {
    std::vector<CopyPart> parts;  // COPY from the context: planned first, their content is in the key
    std::optional<State> from;    // COPY --from
    std::string key;
    const std::string user = step.config.user.empty() ? "root" : step.config.user;
    const std::string cwd = step.config.working_dir.empty() ? "/" : step.config.working_dir;
    switch (step.kind) {
      case build::Step::Kind::kRun:
        key = KeyOf({state.key, "RUN", Joined(step.argv), Joined(step.run_env), cwd, user});
        break;
      case build::Step::Kind::kWorkdir:
        key = KeyOf({state.key, "WORKDIR", cwd, user});
        break;
      case build::Step::Kind::kCopy: {
        std::string sources;
        if (step.from.empty()) {
          auto planned = PlanCopy(request_.context_dir, step.sources, step.dest, step.chmod, step.add, request_.work_dir);
          if (!planned.ok()) return planned.error();
          parts = std::move(*planned);
          for (const CopyPart& part : parts) {
            auto digest = DigestTarContent(part.tar_path);
            if (!digest.ok()) return digest.error();
            sources += part.dir + "\n" + *digest + (part.extract_archive ? " archive\n" : "\n");
          }
        } else {
          auto source_state = step.from_stage ? Result<State>(finals[static_cast<size_t>(*step.from_stage)])
                                              : BaseState(step.from);
          if (!source_state.ok()) return source_state.error();
          from = *source_state;
          sources = "from " + from->key + "\n" + Joined(step.sources);
        }
        const std::string chmod = step.chmod ? std::to_string(*step.chmod) : "";
        key = KeyOf({state.key, step.add ? "ADD" : "COPY", sources, step.dest, step.chown, chmod});
        break;
      }
      case build::Step::Kind::kConfig: break;
    }

    if (!request_.no_cache) {
      if (auto cached = CachedSnapshot(key)) {
        event["cached"] = true;
        listener_(event);
        return State{state.image, *cached, key, state.host_base};
      }
    }
    event["cached"] = false;
    listener_(event);

    auto sandbox = StartSandbox(state, step.kind == build::Step::Kind::kRun);
    if (!sandbox.ok()) return sandbox.error();
    ScopeGuard remove([&] { Remove(sandbox->id()); });
    switch (step.kind) {
      case build::Step::Kind::kRun: BH_TRY(Run(*sandbox, step, cwd, user)); break;
      case build::Step::Kind::kWorkdir: {
        auto owner = user == "root" ? Result<Owner>(Owner()) : OwnerIn(*sandbox, user);
        if (!owner.ok()) return owner.error();
        BH_TRY(sandbox->MakeDirectory(cwd, *owner));
        break;
      }
      case build::Step::Kind::kCopy: {
        if (from) {
          auto fetched = FetchFrom(*from, step);
          if (!fetched.ok()) return fetched.error();
          parts = std::move(*fetched);
        }
        auto owner = step.chown.empty() ? Result<Owner>(Owner()) : OwnerIn(*sandbox, step.chown);
        if (!owner.ok()) return owner.error();
        for (const CopyPart& part : parts) {
          Status extracted = sandbox->Extract(part.dir, part.tar_path, *owner);
          if (!extracted.ok()) return BuildFailed("copying into " + part.dir + ": " + extracted.error().message);
        }
        break;
      }
      case build::Step::Kind::kConfig: break;
    }
    auto snapshot = manager_.CreateSnapshot(sandbox->id(), core::kBuildSnapshotPrefix + key, /*memory=*/false);
    if (!snapshot.ok()) return snapshot.error();
    return State{state.image, snapshot->id, key, state.host_base};
  }

  std::optional<std::string> CachedSnapshot(const std::string& key) {
    const std::string name = core::kBuildSnapshotPrefix + key;
    for (const core::SnapshotInfo& snapshot : manager_.ListSnapshots())
      if (snapshot.name == name && !snapshot.memory && snapshot.tenant == request_.tenant) return snapshot.id;
    return std::nullopt;
  }

  Result<BuildSandbox> StartSandbox(const State& state, bool with_network) {
    core::SandboxSpec spec;
    spec.runtime = request_.runtime.empty() ? manager_.config().default_runtime : request_.runtime;
    spec.cpus = request_.cpus;
    spec.memory_mb = request_.memory_mb;
    spec.disk_mb = request_.disk_mb;
    spec.timeout_s = 0;
    spec.workdir = "/";
    spec.metadata = {{core::kBuildSandboxMetadata, request_.tag.empty() ? "-" : request_.tag}};
    spec.warm_snapshot = false;
    spec.output_capped = false;
    spec.tenant = request_.tenant;
    if (state.snapshot.empty()) {
      spec.image = state.image;
    } else {
      spec.image = "";
      spec.from_snapshot = state.snapshot;
    }
    if (with_network) spec.network = request_.network;
    auto created = manager_.Create(spec);
    if (!created.ok()) return created.error();
    {
      std::lock_guard lock(live_mu_);
      live_.insert(created->id);
    }
    // Stopped while it was made: RemoveLiveSandboxes may have looked before it was listed.
    if (stop_) {
      Remove(created->id);
      return MakeError(ErrorCode::kUnavailable, "the build was stopped", "build_cancelled");
    }
    return BuildSandbox(manager_, io_, created->id);
  }

  void Remove(const std::string& id) {
    (void)manager_.Delete(id);
    std::lock_guard lock(live_mu_);
    live_.erase(id);
  }

 public:
  // Cancels the build from another thread: its step sandboxes go, so a running step ends now.
  void RemoveLiveSandboxes() {
    std::set<std::string> live;
    {
      std::lock_guard lock(live_mu_);
      live.swap(live_);
    }
    for (const std::string& id : live) (void)manager_.Delete(id);
  }

 private:

  Status Run(BuildSandbox& sandbox, const build::Step& step, const std::string& cwd, const std::string& user) {
    core::ExecRequest exec;
    exec.argv = step.argv;
    exec.cwd = cwd;
    exec.user = user;
    exec.timeout_s = 0;
    for (const std::string& entry : step.run_env) {
      const size_t equals = entry.find('=');
      if (equals != std::string::npos && equals > 0) exec.env[entry.substr(0, equals)] = entry.substr(equals + 1);
    }
    exec.env.emplace("PATH", kDefaultPath);  // (an image whose config sets none)
    std::string tail;
    auto ended = sandbox.Run(exec, [&](bool is_stderr, std::string_view data) {
      listener_({{"status", "output"}, {"stream", is_stderr ? "stderr" : "stdout"}, {"data", std::string(data)}});
      tail.append(data);
      if (tail.size() > 2 * kOutputTail) tail.erase(0, tail.size() - kOutputTail);
    });
    if (!ended.ok()) return BuildFailed(ended.error().message);
    if (ended->exit_code && *ended->exit_code == 0) return {};
    if (tail.size() > kOutputTail) tail.erase(0, tail.size() - kOutputTail);
    const std::string how = ended->exit_code ? "exited with " + std::to_string(*ended->exit_code)
                                             : "was killed by signal " + std::to_string(ended->signal.value_or(0));
    return BuildFailed("the command " + how + (tail.empty() ? "" : "; its output ended with:\n" + tail));
  }

  Result<Owner> OwnerIn(BuildSandbox& sandbox, const std::string& spec) {
    Accounts accounts;
    auto passwd = sandbox.Read("/etc/passwd");
    if (!passwd.ok()) return passwd.error();
    if (*passwd) accounts.users = ParsePasswd(**passwd);
    auto group = sandbox.Read("/etc/group");
    if (!group.ok()) return group.error();
    if (*group) accounts.groups = ParseGroup(**group);
    auto owner = OwnerOf(spec, accounts);
    if (!owner.ok()) return owner.error();
    return Owner(*owner);
  }

  // COPY --from: each source archived out of a sandbox of the stage's (or image's) files.
  Result<std::vector<CopyPart>> FetchFrom(const State& from, const build::Step& step) {
    auto sandbox = StartSandbox(from, false);
    if (!sandbox.ok()) return sandbox.error();
    ScopeGuard remove([&] { Remove(sandbox->id()); });
    std::vector<CopyPart> parts;
    const bool several = step.sources.size() > 1;
    for (const std::string& source : step.sources) {
      const std::string path = source.front() == '/' ? source : "/" + source;
      auto type = sandbox->TypeOf(path);
      if (!type.ok()) return type.error();
      if (!*type || (**type != "file" && **type != "dir"))
        return BuildFailed("COPY --from=" + step.from + ": " + path + " is neither a file nor a directory there");
      const std::string tar = request_.work_dir + "/from-" + std::to_string(counter_++) + ".tar";
      BH_TRY(sandbox->Archive(path, false, tar));
      auto part = PlaceArchived(tar, **type == "dir", path, step.dest, several, step.chmod);
      if (!part.ok()) return part.error();
      parts.push_back(*part);
    }
    return parts;
  }

  // The target stage's files as an image with its config, keyed by the whole build.
  Result<core::ImageInfo> Export(const State& state, const storage::ImageConfig& config) {
    storage::BuiltImage image;
    image.config = config;
    image.config.os = "linux";
    image.config.architecture = storage::HostPlatform().architecture;
    image.host_base = state.host_base;
    const std::string config_text = storage::ImageConfigToJson(image.config).dump();
    // A tenant's image is its own: the same steps another ran (whose RUN may have fetched what
    // only that one may reach) never answer its build.
    image.build_key = "sha256:" + (request_.tenant.empty()
                                       ? KeyOf({state.key, config_text, state.host_base ? "host" : ""})
                                       : KeyOf({state.key, config_text, state.host_base ? "host" : "", "tenant",
                                                request_.tenant}));
    if (auto existing = manager_.FindImage(image.build_key.substr(7), request_.tenant); existing.ok()) {
      listener_({{"status", "exporting"}, {"cached", true}});
      return Named(image, manager_.StoreBuiltImage(image, "", request_.tag, request_.tenant));  // (stored: only named)
    }
    listener_({{"status", "exporting"}, {"cached", false}});
    auto sandbox = StartSandbox(state, false);
    if (!sandbox.ok()) return sandbox.error();
    ScopeGuard remove([&] { Remove(sandbox->id()); });
    const std::string tar = request_.work_dir + "/rootfs.tar";
    BH_TRY(sandbox->Archive("/", /*one_file_system=*/true, tar));
    remove.Dismiss();
    Remove(sandbox->id());
    auto stored = manager_.StoreBuiltImage(image, tar, request_.tag, request_.tenant);
    ::unlink(tar.c_str());
    return Named(image, std::move(stored));
  }

  // The stored image given the request's further names.
  Result<core::ImageInfo> Named(const storage::BuiltImage& image, Result<core::ImageInfo> stored) {
    for (const std::string& tag : request_.more_tags) {
      if (!stored.ok()) break;
      stored = manager_.StoreBuiltImage(image, "", tag, request_.tenant);
    }
    return stored;
  }

  core::SandboxManager& manager_;
  boost::asio::any_io_executor io_;
  const BuildRequest& request_;
  const BuildListener& listener_;
  const std::atomic<bool>& stop_;  // cancelled, or past the build's time (RunBuild)
  std::map<std::string, State> bases_;  // FROM and COPY --from images, by name as written
  int counter_ = 0;
  std::mutex live_mu_;
  std::set<std::string> live_;  // the step sandboxes that exist now
};

}  // namespace

Result<core::ImageInfo> RunBuild(core::SandboxManager& manager, const boost::asio::any_io_executor& io,
                                 const BuildRequest& request, const BuildListener& listener,
                                 const std::atomic<bool>& cancelled) {
  // Cancelled, or past its time: the builder stops between steps, and the watcher removes the
  // running step's sandbox at once, not when the step ends.
  std::atomic<bool> stop = false, timed_out = false;
  Builder builder(manager, io, request, listener, stop);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(request.timeout_s);
  std::mutex mu;
  std::condition_variable wake;
  bool done = false;
  std::thread watcher([&] {
    std::unique_lock lock(mu);
    while (!done && !cancelled && !timed_out) {
      wake.wait_for(lock, std::chrono::milliseconds(200));
      if (request.timeout_s > 0 && std::chrono::steady_clock::now() >= deadline) timed_out = true;
    }
    if (done) return;
    stop = true;
    builder.RemoveLiveSandboxes();
  });
  auto built = builder.Run();
  {
    std::lock_guard lock(mu);
    done = true;
  }
  wake.notify_all();
  watcher.join();
  PruneBuildCache(manager);
  if (cancelled && !built.ok()) return MakeError(ErrorCode::kUnavailable, "the build was cancelled", "build_cancelled");
  if (timed_out && !built.ok()) {
    // What was running then, in the words of its failure ("step 2/3 (RUN ...): ...").
    const std::string& during = built.error().message;
    const size_t step_end = during.rfind("step ", 0) == 0 ? during.find("): ") : std::string::npos;
    return MakeError(ErrorCode::kInvalid,
                     "the build did not finish within its timeout of " + std::to_string(request.timeout_s) + " s" +
                         (step_end == std::string::npos ? "" : "; it was at " + during.substr(0, step_end + 1)),
                     "build_timeout");
  }
  return built;
}

size_t PruneBuildCache(core::SandboxManager& manager, size_t keep) {
  std::vector<std::string> entries;  // oldest first
  for (const core::SnapshotInfo& snapshot : manager.ListSnapshots())
    if (snapshot.name.rfind(core::kBuildSnapshotPrefix, 0) == 0) entries.push_back(snapshot.id);
  size_t deleted = 0;
  for (size_t i = 0; i + keep < entries.size(); ++i) deleted += manager.DeleteSnapshot(entries[i]).ok();
  return deleted;
}

size_t PruneTemplateFiles(const std::string& upload_dir, size_t keep) {
  namespace fs = std::filesystem;
  std::vector<std::pair<fs::file_time_type, fs::path>> sets;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(upload_dir + "/" + kTemplateFilesDir, ec)) {
    const auto written = entry.last_write_time(ec);
    if (!ec) sets.emplace_back(written, entry.path());
  }
  if (sets.size() <= keep) return 0;
  std::sort(sets.begin(), sets.end());  // oldest first
  size_t deleted = 0;
  for (size_t i = 0; i + keep < sets.size(); ++i) deleted += fs::remove(sets[i].second, ec) ? 1 : 0;
  return deleted;
}

std::string TemplateFileSetName(const std::string& tenant, const std::string& hash) {
  return tenant.empty() ? hash : tenant + "." + hash;
}

size_t RemoveTemplateFiles(const std::string& upload_dir, const std::string& tenant) {
  namespace fs = std::filesystem;
  size_t removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(upload_dir + "/" + kTemplateFilesDir, ec))
    if (entry.path().filename().string().starts_with(tenant + ".")) removed += fs::remove(entry.path(), ec) ? 1 : 0;
  return removed;
}

}  // namespace bulkhead::api
