#include "cli/build_command.h"

#include <climits>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "build/context_ignore.h"
#include "cli/output_format.h"
#include "client/api_client.h"
#include "client/server_url.h"
#include "storage/tar_stream.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

// The query of POST /v1/images/build for these flags; the Dockerfile's path in the context.
Result<std::string> BuildTarget(const BuildFlags& flags, const std::string& context, const std::string& tenant) {
  std::string query = "/v1/images/build?";
  auto add = [&](const std::string& key, const std::string& value) {
    query += key + "=" + PercentEncode(value) + "&";
  };
  if (!flags.tag.empty()) add("tag", flags.tag);
  std::string dockerfile = "Dockerfile";
  if (!flags.dockerfile.empty()) {
    char real_context[PATH_MAX];
    char real_file[PATH_MAX];
    if (::realpath(context.c_str(), real_context) == nullptr || ::realpath(flags.dockerfile.c_str(), real_file) == nullptr)
      return MakeError(ErrorCode::kBadRequest, "no Dockerfile " + flags.dockerfile, "invalid_argument");
    const std::string base = std::string(real_context) + "/";
    if (std::string(real_file).rfind(base, 0) != 0)
      return MakeError(ErrorCode::kBadRequest, "the Dockerfile must be inside the build context " + context,
                       "invalid_argument");
    dockerfile = std::string(real_file).substr(base.size());
  }
  add("dockerfile", dockerfile);
  for (const std::string& arg : flags.build_args) add("build_arg", arg);
  if (!flags.target.empty()) add("target", flags.target);
  if (flags.runtime) add("runtime", *flags.runtime);
  if (flags.no_cache) add("no_cache", "true");
  if (!flags.pull.empty()) add("pull", flags.pull);
  for (const std::string& entry : flags.allow) add("allow", entry);
  if (!flags.network.empty()) add("network", flags.network);
  if (flags.cpus) add("cpus", std::to_string(*flags.cpus));
  if (flags.memory_mb) add("memory_mb", std::to_string(*flags.memory_mb));
  if (flags.disk_mb) add("disk_mb", std::to_string(*flags.disk_mb));
  if (flags.timeout_s) add("timeout_s", std::to_string(*flags.timeout_s));
  if (!tenant.empty()) add("tenant", tenant);
  query.pop_back();
  return query;
}

// What .dockerignore leaves out of the tar sent (the daemon applies it again).
Result<std::optional<build::ContextIgnore>> IgnoreRules(const std::string& context) {
  std::ifstream in(context + "/.dockerignore");
  if (!in) return std::optional<build::ContextIgnore>();
  std::stringstream text;
  text << in.rdbuf();
  auto rules = build::ContextIgnore::Parse(text.str());
  if (!rules.ok()) return rules.error();
  return std::optional<build::ContextIgnore>(std::move(*rules));
}

}  // namespace

int BuildCommand(Session& session) {
  const BuildFlags& flags = session.line.build;
  auto target = BuildTarget(flags, flags.context, session.line.for_tenant);
  if (!target.ok()) return session.UsageError(target.error());
  auto ignore = IgnoreRules(flags.context);
  if (!ignore.ok()) return session.UsageError(ignore.error());
  auto skip = [&](const std::string& path, bool is_dir) {
    if (!*ignore || path == ".dockerignore") return false;
    if (!(*ignore)->Ignored(path)) return false;
    return !(is_dir && (*ignore)->MayTakeBelow(path));
  };
  auto warn = [&session](const std::string& warning) { session.Err("bulkhead: warning: " + warning + "\n"); };

  std::optional<json> image;
  std::optional<Error> failure;
  const LineHandler on_line = [&](std::string_view text) -> Status {
    if (session.line.json) session.Out(std::string(text) + "\n");
    json event = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!event.is_object()) return {};
    const std::string status = StringField(event, "status");
    if (status == "done" && event.contains("image")) {
      image = event["image"];
    } else if (status == "error") {
      const json& error = event.value("error", json::object());
      failure = MakeError(ErrorCode::kInvalid, StringField(error, "message"), StringField(error, "code"));
    } else if (session.line.json) {
      return {};
    } else if (status == "stage") {
      session.Err("[stage " + std::to_string(event.value("stage", 0)) + "] FROM " + StringField(event, "base") +
                  (StringField(event, "name").empty() ? "" : " AS " + StringField(event, "name")) + "\n");
    } else if (status == "step") {
      session.Err("Step " + std::to_string(event.value("step", 0)) + "/" + std::to_string(event.value("count", 0)) +
                  " : " + StringField(event, "instruction") + (event.value("cached", false) ? "  (cached)" : "") + "\n");
    } else if (status == "output") {
      session.Err(StringField(event, "data"));
    } else if (status == "warning") {
      session.Err("warning: " + StringField(event, "message") + "\n");
    } else if (status == "exporting") {
      session.Err(event.value("cached", false) ? "Image unchanged\n" : "Exporting the image\n");
    } else if (status == "resolved") {
      session.Err("Pulled " + StringField(event, "image") + "\n");
    }
    return {};
  };
  auto response = session.api.http().SendStreamingBody(
      HttpMethod::kPost, *target, "application/x-tar", std::nullopt,
      [&](const BodyChunkSink& sink) { return storage::StreamDirectoryAsTar(flags.context, sink, warn, {}, skip); },
      &on_line);
  if (!response.ok()) return session.Fail(response.error());
  if (!response->ok()) return session.Fail(ErrorFromResponse(*response));
  if (failure) return session.Fail(*failure);
  if (!image) return session.Fail(MakeError(ErrorCode::kBadGateway, "the build ended without an answer"));
  if (!session.line.json) session.Out((flags.tag.empty() ? StringField(*image, "name") : flags.tag) + "\n");
  return 0;
}

int PruneBuildCacheCommand(Session& session) {
  auto response = session.api.http().Send(HttpMethod::kDelete, "/v1/images/build/cache");
  if (!response.ok()) return session.Fail(response.error());
  if (!response->ok()) return session.Fail(ErrorFromResponse(*response));
  const json body = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  session.Out("deleted " + std::to_string(body.is_object() ? body.value("deleted", 0) : 0) + " build cache entries\n");
  return 0;
}

}  // namespace bulkhead::cli
