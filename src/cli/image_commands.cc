#include "cli/image_commands.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/local_files.h"
#include "cli/output_format.h"
#include "storage/tar_stream.h"
#include "client/api_client.h"
#include "client/server_url.h"
#include "common/unique_fd.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;
using storage::StreamDirectoryAsTar;

int64_t IntField(const json& object, const char* field) {
  auto it = object.find(field);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// What `image pull` shows while the daemon pulls: one line redrawn on a terminal
// ("[#####-----]  45%  12.3 MiB / 27.0 MiB  layer 2 of 3"), a line per finished layer otherwise.
class PullProgress {
 public:
  PullProgress(const Session& session, bool terminal) : session_(session), terminal_(terminal) {}

  void Event(const json& event) {
    const std::string status = StringField(event, "status");
    if (status == "resolved") {
      total_ = IntField(event, "total_bytes");
      if (auto layers = event.find("layers"); layers != event.end() && layers->is_array()) layers_ = layers->size();
      Line("resolved " + StringField(event, "image") + " (" + StringField(event, "digest") + ", " +
           std::to_string(layers_) + " layers, " + FormatBytes(total_) + ")");
    } else if (status == "downloading") {
      current_[StringField(event, "layer")] = IntField(event, "current");
      Draw("downloading");
    } else if (status == "downloaded") {
      const std::string layer = StringField(event, "layer");
      current_[layer] = IntField(event, "size");
      ++finished_;
      const bool cached = event.value("cached", false);
      if (!terminal_) Line(layer.substr(0, 19) + ": " + (cached ? "already stored" : "downloaded " + FormatBytes(IntField(event, "size"))));
      Draw("downloading");
    } else if (status == "unpacking") {
      unpacking_ = IntField(event, "index") + 1;
      Draw("unpacking");
    }
  }

  void Finish() {
    if (terminal_ && drawn_) session_.Err("\r\033[K");
  }

 private:
  void Line(const std::string& text) {
    if (terminal_ && drawn_) session_.Err("\r\033[K");
    session_.Err(text + "\n");
    drawn_ = false;
  }

  void Draw(const std::string& stage) {
    if (!terminal_) return;
    int64_t done = 0;
    for (const auto& [layer, bytes] : current_) done += bytes;
    const int width = 30;
    const int filled = total_ > 0 ? static_cast<int>(std::min<int64_t>(width, done * width / total_)) : 0;
    const int percent = total_ > 0 ? static_cast<int>(std::min<int64_t>(100, done * 100 / total_)) : 0;
    std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '-') + "]";
    std::string text = bar + " " + std::to_string(percent) + "%  " + FormatBytes(done) + " / " + FormatBytes(total_);
    text += stage == "unpacking" ? "  unpacking layer " + std::to_string(unpacking_) + " of " + std::to_string(layers_)
                                 : "  " + std::to_string(finished_) + " of " + std::to_string(layers_) + " layers";
    session_.Err("\r\033[K" + text);
    drawn_ = true;
  }

  const Session& session_;
  const bool terminal_;
  bool drawn_ = false;
  int64_t total_ = 0;
  size_t layers_ = 0;
  size_t finished_ = 0;
  int64_t unpacking_ = 0;
  std::map<std::string, int64_t> current_;  // bytes in hand per layer
};

}  // namespace

int ImagePullCommand(Session& session) {
  json body = {{"image", session.line.image_name}};
  if (!session.line.platform.empty()) body["platform"] = session.line.platform;
  if (!session.line.for_tenant.empty()) body["tenant"] = session.line.for_tenant;
  PullProgress progress(session, ::isatty(session.io.stderr_fd) == 1);
  std::optional<json> image;
  std::optional<Error> failure;
  auto response = session.api.http().SendForLines(HttpMethod::kPost, "/v1/images/pull", DumpJson(body), [&](std::string_view text) -> Status {
    if (session.line.json) session.Out(std::string(text) + "\n");
    json event = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!event.is_object()) return {};
    const std::string status = StringField(event, "status");
    if (status == "done" && event.contains("image")) {
      image = event["image"];
    } else if (status == "error") {
      const json& error = event.value("error", json::object());
      failure = MakeError(ErrorCode::kBadGateway, StringField(error, "message"), StringField(error, "code"));
    } else if (!session.line.json) {
      progress.Event(event);
    }
    return {};
  });
  progress.Finish();
  if (!response.ok()) return session.Fail(response.error());
  if (!response->ok()) return session.Fail(ErrorFromResponse(*response));
  if (failure) return session.Fail(*failure);
  if (!image) return session.Fail(MakeError(ErrorCode::kBadGateway, "the pull ended without an answer"));
  if (!session.line.json) {
    session.Out(session.line.image_name + " " + StringField(*image, "digest") + " (" +
                FormatBytes(IntField(*image, "size_bytes")) + ")\n");
  }
  return 0;
}

int ImageImportCommand(Session& session) {
  const std::string& path = session.line.image_path;
  std::string target = "/v1/images/" + PercentEncode(session.line.image_name) + session.TenantQuery();
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0) return session.UsageError(SystemError(path, errno));

  Result<json> imported = json();
  if (S_ISDIR(info.st_mode)) {
    auto warn = [&session](const std::string& warning) { session.Err("bulkhead: warning: " + warning + "\n"); };
    imported = session.api.Upload(target, "application/x-tar", std::nullopt, [&](const BodyChunkSink& sink) {
      return StreamDirectoryAsTar(path, sink, warn);
    });
  } else if (S_ISREG(info.st_mode)) {
    UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!file) return session.Fail(SystemError("opening " + path, errno));
    uint64_t size = static_cast<uint64_t>(info.st_size);
    // The daemon recognizes the compression (gzip, zstd, xz...) from the bytes.
    imported = session.api.Upload(target, "application/x-tar", size, [&](const BodyChunkSink& sink) {
      return SendFile(file.get(), size, "the image file", sink);
    });
  } else {
    return session.UsageError(
        MakeError(ErrorCode::kBadRequest, path + " is neither a directory nor a file", "invalid_argument"));
  }
  if (!imported.ok()) return session.Fail(imported.error());
  std::string summary = "imported " + session.line.image_name;
  if (imported->is_object() && (*imported)["size_bytes"].is_number_integer()) {
    summary += " (" + FormatBytes((*imported)["size_bytes"].get<int64_t>()) + ")";
  }
  session.Out(summary + "\n");
  return 0;
}

int ImageListCommand(Session& session) {
  auto listing = session.api.Call(HttpMethod::kGet, "/v1/images" + session.TenantQuery());
  if (!listing.ok()) return session.Fail(listing.error());
  if (session.line.json) {
    session.Out(DumpJson(*listing, 2) + "\n");
    return 0;
  }
  int64_t now = static_cast<int64_t>(std::time(nullptr));
  std::vector<std::vector<std::string>> rows = {{"NAME", "SOURCE", "SIZE", "CREATED", "REFERENCES"}};
  const json none = json::array();
  const json& images = listing->contains("images") && (*listing)["images"].is_array() ? (*listing)["images"] : none;
  // A HELD BY column when any image is a tenant's (the host's key sees every tenant's).
  bool tenants = false;
  for (const json& image : images) tenants = tenants || image.contains("tenants") || !image.value("shared", true);
  if (tenants) rows[0].push_back("HELD BY");
  {
    for (const json& image : images) {
      auto size = image.find("size_bytes");
      std::string references;
      if (auto refs = image.find("references"); refs != image.end() && refs->is_array()) {
        for (const json& ref : *refs)
          if (ref.is_string()) references += (references.empty() ? "" : ", ") + ref.get<std::string>();
      }
      // A pulled image's name is its digest's 64 hex digits: the first 12 say enough here.
      std::string name = StringField(image, "name");
      if (StringField(image, "source") == "registry" && name.size() > 12) name.resize(12);
      rows.push_back({name, StringField(image, "source"),
                      size != image.end() && size->is_number_integer() ? FormatBytes(size->get<int64_t>()) : "-",
                      DescribeCreated(StringField(image, "created_at"), now), references.empty() ? "-" : references});
      if (!tenants) continue;
      std::string holders = image.value("shared", true) ? "host" : "";
      if (auto held = image.find("tenants"); held != image.end() && held->is_object())
        for (const auto& [tenant, names] : held->items()) holders += (holders.empty() ? "" : ", ") + tenant;
      rows.back().push_back(holders.empty() ? "-" : holders);
    }
  }
  session.Out(FormatTable(rows));
  return 0;
}

int ImageRemoveCommand(Session& session) {
  auto removed =
      session.api.Call(HttpMethod::kDelete, "/v1/images/" + PercentEncode(session.line.image_name) + session.TenantQuery());
  if (!removed.ok()) return session.Fail(removed.error());
  session.Out(session.line.image_name + "\n");
  return 0;
}

int ImagePushCommand(Session& session) {
  json body = {{"image", session.line.image_name}, {"target", session.line.image_target}};
  if (!session.line.for_tenant.empty()) body["tenant"] = session.line.for_tenant;
  std::optional<json> pushed;
  std::optional<Error> failure;
  auto response = session.api.http().SendForLines(HttpMethod::kPost, "/v1/images/push", DumpJson(body), [&](std::string_view text) -> Status {
    if (session.line.json) session.Out(std::string(text) + "\n");
    json event = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!event.is_object()) return {};
    const std::string status = StringField(event, "status");
    if (status == "done") {
      pushed = event.value("pushed", json::object());
    } else if (status == "error") {
      const json& error = event.value("error", json::object());
      failure = MakeError(ErrorCode::kBadGateway, StringField(error, "message"), StringField(error, "code"));
    } else if (!session.line.json && (status == "uploaded" || status == "exists")) {
      session.Err(StringField(event, "blob").substr(0, 19) + ": " +
                  (status == "exists" ? "already in the registry" : "uploaded " + FormatBytes(IntField(event, "size"))) + "\n");
    }
    return {};
  });
  if (!response.ok()) return session.Fail(response.error());
  if (!response->ok()) return session.Fail(ErrorFromResponse(*response));
  if (failure) return session.Fail(*failure);
  if (!pushed) return session.Fail(MakeError(ErrorCode::kBadGateway, "the push ended without an answer"));
  if (!session.line.json) session.Out(StringField(*pushed, "reference") + " " + StringField(*pushed, "digest") + "\n");
  return 0;
}

int ImageInspectCommand(Session& session) {
  auto image =
      session.api.Call(HttpMethod::kGet, "/v1/images/" + PercentEncode(session.line.image_name) + session.TenantQuery());
  if (!image.ok()) return session.Fail(image.error());
  session.Out(DumpJson(*image, 2) + "\n");
  return 0;
}

}  // namespace bulkhead::cli
