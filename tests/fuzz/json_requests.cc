// Every validator of a request's body or query, fed the way the server feeds it: the first
// byte picks the validator, the rest is the body (parsed by ParseJsonObject as the handlers
// do) or the request target's query (parsed by ParseTarget). Also the path, name and
// encoding checks, the sandbox spec's round trip through the state database's JSON, and the
// MCP server's argument checks against each tool's input schema.
//
// Checked: nothing throws or trips a sanitizer, and what a validator accepts keeps the
// promises its header makes (ranges, normalized paths, round trips).
#include <algorithm>
#include <string>
#include <string_view>

#include "api/router.h"
#include "common/base64.h"
#include "core/spec_json.h"
#include "fuzz_support.h"
#include "http/encoding.h"
#include "mcp/argument_check.h"
#include "mcp/json_rpc.h"
#include "mcp/text.h"
#include "mcp/tool.h"
#include "service/file_request.h"
#include "service/preview_access.h"
#include "service/process_request.h"
#include "service/validate.h"

namespace {

using namespace bulkhead;
using nlohmann::json;

std::string Dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// The body as a handler sees it; nullopt where the handler would have answered 400/422.
std::optional<json> Body(std::string_view text) {
  Result<json> body = api::ParseJsonObject(text);
  if (!body.ok()) {
    FUZZ_CHECK(body.error().code == ErrorCode::kBadRequest || body.error().code == ErrorCode::kInvalid,
               body.error().message);
    return std::nullopt;
  }
  FUZZ_CHECK(body->is_object(), Dump(*body));
  return std::move(*body);
}

std::optional<api::QueryParams> Query(std::string_view text) {
  std::optional<api::RequestTarget> target = api::ParseTarget("/v1/x?" + std::string(text));
  if (!target) return std::nullopt;
  FUZZ_CHECK(target->path == "/v1/x", target->path);
  return std::move(target->query);
}

bool IsNormalizedAbsolute(std::string_view path) {
  if (path.empty() || path[0] != '/') return false;
  if (path == "/") return true;
  if (path.back() == '/' || path.find("//") != std::string_view::npos) return false;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = std::min(path.find('/', start), path.size());
    std::string_view part = path.substr(start, end - start);
    if (part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

void CheckSpec(const core::SandboxSpec& spec, const api::HostLimits& host) {
  FUZZ_CHECK(spec.cpus >= 0.05 && spec.cpus <= host.max_cpus, std::to_string(spec.cpus));
  // 0: not given for a create from a snapshot, whose memory the core fills in (a memory
  // snapshot's is its guest's size).
  const bool snapshot_memory = spec.from_snapshot.has_value() && spec.memory_mb == 0;
  FUZZ_CHECK(snapshot_memory || (spec.memory_mb >= 32 && spec.memory_mb <= std::max<int64_t>(32, host.max_memory_mb)),
             "memory_mb");
  FUZZ_CHECK(spec.timeout_s >= 0 && spec.timeout_s <= api::kMaxLifetimeS, "timeout_s");
  FUZZ_CHECK(spec.workdir.starts_with('/'), spec.workdir);  // absolute; the sandbox resolves the rest
  FUZZ_CHECK(api::IsValidUser(spec.user), spec.user);
  FUZZ_CHECK(spec.volumes.size() <= api::kMaxVolumeMounts, "volumes");
  for (const core::VolumeMount& mount : spec.volumes) {
    FUZZ_CHECK(api::IsValidVolumeName(mount.name), mount.name);
    FUZZ_CHECK(IsNormalizedAbsolute(mount.path) && mount.path != "/", mount.path);
    for (const core::VolumeMount& other : spec.volumes) {
      if (&other == &mount) continue;
      FUZZ_CHECK(!fuzz::IsAtOrBelow(mount.path, other.path), mount.path + " inside " + other.path);
    }
  }
  // The state database keeps the spec as JSON: what the API accepted must come back whole.
  const std::string stored = core::SpecToJson(spec);
  Result<core::SandboxSpec> loaded = core::SpecFromJson(stored);
  FUZZ_CHECK(loaded.ok(), loaded.ok() ? "" : loaded.error().message);
  FUZZ_CHECK(core::SpecToJson(*loaded) == stored, stored);
}

void CheckFileRequest(const api::FileRequest& request, std::string_view workdir) {
  FUZZ_CHECK(api::CheckFilePath(request.path, "path").ok(), request.path);
  if (request.mode) FUZZ_CHECK(*request.mode <= 07777, std::to_string(*request.mode));
  FUZZ_CHECK(request.depth >= 1 && request.depth <= api::kMaxListDepth, std::to_string(request.depth));
  Result<json> op = api::FileOpJson(request, workdir);
  if (!op.ok()) return;
  for (const char* key : {"path", "from", "to"}) {
    if (!op->contains(key)) continue;
    const std::string& path = (*op)[key].get_ref<const std::string&>();
    FUZZ_CHECK(path.size() <= api::kMaxFilePathBytes, path);
    // Joined to an absolute workdir, every path the worker gets is absolute.
    if (!workdir.empty() && workdir[0] == '/') FUZZ_CHECK(path[0] == '/', path);
  }
}

void FuzzSandboxSpec(std::string_view rest) {
  if (auto body = Body(rest)) {
    const api::HostLimits host{.max_cpus = 4, .max_memory_mb = 8192};
    Result<core::SandboxSpec> spec = api::ParseSandboxSpec(*body, host);
    if (spec.ok()) CheckSpec(*spec, host);
  }
}

void FuzzExec(std::string_view rest) {
  if (auto body = Body(rest)) {
    Result<api::ExecOptions> options = api::ParseExecOptions(*body);
    if (!options.ok()) return;
    FUZZ_CHECK(!options->request.argv.empty() && !options->request.argv[0].empty(), "argv");
    FUZZ_CHECK(options->max_output_bytes >= 0 && options->max_output_bytes <= api::kMaxOutputBytesLimit, "max_output");
    FUZZ_CHECK(options->request.timeout_s >= 0 && options->request.timeout_s <= api::kMaxExecTimeoutS, "timeout_s");
    if (options->request.cwd) FUZZ_CHECK(options->request.cwd->starts_with('/'), *options->request.cwd);
    if (options->request.user) FUZZ_CHECK(api::IsValidUser(*options->request.user), *options->request.user);
  }
}

void FuzzProcess(std::string_view rest) {
  if (auto body = Body(rest)) {
    Result<api::ProcessOptions> options = api::ParseProcessOptions(*body);
    if (!options.ok()) return;
    if (options->tag) FUZZ_CHECK(api::IsValidTag(*options->tag), *options->tag);
    if (options->pty) {
      FUZZ_CHECK(options->pty->cols >= 1 && options->pty->cols <= api::kMaxPtySide, "cols");
      FUZZ_CHECK(options->pty->rows >= 1 && options->pty->rows <= api::kMaxPtySide, "rows");
    }
  }
}

void FuzzSmallBodies(uint8_t which, std::string_view rest) {
  auto body = Body(rest);
  if (!body) return;
  switch (which % 9) {
    case 0: {
      Result<api::VolumeRequest> volume = api::ParseVolumeRequest(*body);
      if (volume.ok()) {
        FUZZ_CHECK(api::IsValidVolumeName(volume->name), volume->name);
        FUZZ_CHECK(volume->size_mb >= 1 && volume->size_mb <= api::kMaxVolumeSizeMb, "size_mb");
      }
      break;
    }
    case 1: {
      Result<int64_t> timeout = api::ParseTimeoutUpdate(*body);
      if (timeout.ok()) FUZZ_CHECK(*timeout >= 0 && *timeout <= api::kMaxLifetimeS, std::to_string(*timeout));
      break;
    }
    case 2: (void)api::ParseNetworkUpdate(*body); break;
    case 3: {
      Result<api::SnapshotRequest> request = api::ParseSnapshotRequest(*body);
      if (request.ok()) FUZZ_CHECK(request->name.size() <= api::kMaxSnapshotNameBytes, request->name);
      break;
    }
    case 4: {
      Result<api::ForkRequest> request = api::ParseForkRequest(*body);
      if (request.ok())
        FUZZ_CHECK(request->count >= 1 && request->count <= api::kMaxForkCount, std::to_string(request->count));
      break;
    }
    case 5: {
      Result<std::string> data = api::ParseStdinBody(*body);
      if (data.ok()) FUZZ_CHECK(data->size() <= api::kMaxStdinBytes, "stdin");
      break;
    }
    case 6: {
      Result<int> signal = api::ParseSignalBody(*body);
      if (signal.ok()) FUZZ_CHECK(*signal >= 1 && *signal <= 64, std::to_string(*signal));
      break;
    }
    case 7: {
      Result<api::PtySize> size = api::ParseResize(*body);
      if (size.ok()) FUZZ_CHECK(size->cols >= 1 && size->rows >= 1, "size");
      break;
    }
    case 8: {
      // POST .../files/mkdir and .../files/move: a query line, then the body.
      Result<api::FileRequest> request = api::ParseFileBody(which & 0x10 ? api::FileOp::kMove : api::FileOp::kMkdir,
                                                            *body, {});
      if (request.ok()) CheckFileRequest(*request, "/workspace");
      break;
    }
  }
}

void FuzzQueries(uint8_t which, std::string_view rest) {
  auto query = Query(rest);
  if (!query) return;
  switch (which % 4) {
    case 0: {
      Result<int64_t> limit = api::ParseEgressLimit(*query);
      if (limit.ok()) FUZZ_CHECK(*limit >= 1 && *limit <= 10000, std::to_string(*limit));
      break;
    }
    case 1: (void)api::ParseListFilter(*query); break;
    case 2: (void)api::ParseOutputQuery(*query); break;
    case 3: {
      static constexpr api::FileOp kOps[] = {api::FileOp::kRead, api::FileOp::kWrite, api::FileOp::kStat,
                                             api::FileOp::kList, api::FileOp::kRemove, api::FileOp::kArchiveCreate,
                                             api::FileOp::kArchiveExtract, api::FileOp::kWatch};
      const api::FileOp op = kOps[(which >> 2) % std::size(kOps)];
      Result<api::FileRequest> request = api::ParseFileQuery(op, *query);
      if (!request.ok()) return;
      if (request->user) FUZZ_CHECK(api::IsValidUser(*request->user), *request->user);
      // The sandbox's workdir as the sandbox spec has it, or something odd.
      CheckFileRequest(*request, (which & 0x40) ? "/" : "/workspace/project");
      break;
    }
  }
}

void FuzzStrings(uint8_t which, std::string_view text) {
  switch (which % 7) {
    case 0: {
      // Names and ids that become path components on the host.
      if (api::IsValidImageName(text) || api::IsValidVolumeName(text) || api::IsValidSandboxId(text)) {
        FUZZ_CHECK(text != "." && text != ".." && text.find('/') == std::string_view::npos, std::string(text));
      }
      (void)api::IsValidUser(text);
      if (auto ref = api::ParseProcessRef(text)) FUZZ_CHECK(ref->pid > 0 || api::IsValidTag(ref->tag), std::string(text));
      break;
    }
    case 1: {
      Result<uint32_t> mode = api::ParseOctalMode(text, "mode");
      if (mode.ok()) FUZZ_CHECK(*mode <= 07777, std::string(text));
      (void)api::CheckFilePath(text, "path");
      break;
    }
    case 2: {
      // A request line's target, as the server splits and routes it.
      auto target = api::ParseTarget(text);
      if (!target) return;
      for (const char* method : {"GET", "POST", "PUT", "DELETE", "PATCH"}) {
        api::RouteMatch route = api::MatchRoute(method, target->path);
        for (const auto& [name, value] : route.params) {
          FUZZ_CHECK(route.outcome == api::RouteMatch::Outcome::kMatched, "params on an unmatched route");
          if (name != "path") FUZZ_CHECK(!value.empty(), std::string(name));
        }
      }
      const std::string app = api::PortProxyAppTarget(text);
      FUZZ_CHECK(!app.empty() && app[0] == '/', app);
      break;
    }
    case 3: {
      const size_t split = text.find('\n');
      const std::string_view host = text.substr(0, split);
      const std::string_view domain = split == std::string_view::npos ? "preview.test" : text.substr(split + 1);
      if (auto preview = api::MatchPreviewHost(host, domain)) {
        FUZZ_CHECK(!preview->port.empty() && !preview->sandbox_id.empty(), std::string(host));
        FUZZ_CHECK(preview->port.find('-') == std::string::npos, preview->port);
      }
      break;
    }
    case 4: {
      const std::string encoded = Base64Encode(text);
      FUZZ_CHECK(Base64DecodedSize(encoded) == text.size(), encoded);
      FUZZ_CHECK(Base64Decode(encoded) == std::string(text), encoded);
      if (auto decoded = Base64Decode(text)) {
        FUZZ_CHECK(decoded->size() == Base64DecodedSize(text), std::string(text));
        // Accepted base64 has one spelling (the padding aside): it encodes back the same.
        std::string canonical = Base64Encode(*decoded);
        std::string given(text);
        while (!given.empty() && given.back() == '=') given.pop_back();
        while (!canonical.empty() && canonical.back() == '=') canonical.pop_back();
        FUZZ_CHECK(canonical == given, given);
      }
      break;
    }
    case 5: {
      const std::string sanitized = api::SanitizeUtf8(text);
      FUZZ_CHECK(api::IsValidUtf8(sanitized), sanitized);
      if (api::IsValidUtf8(text)) FUZZ_CHECK(sanitized == text, sanitized);
      const size_t suffix = api::IncompleteUtf8Suffix(text);
      FUZZ_CHECK(suffix <= 3 && suffix <= text.size(), std::to_string(suffix));
      const std::string mcp_text = mcp::ToValidUtf8(text);
      FUZZ_CHECK(mcp::IsValidUtf8(mcp_text), mcp_text);
      FUZZ_CHECK(mcp::IsValidUtf8(text) == api::IsValidUtf8(text), std::string(text));
      break;
    }
    case 6: {
      const size_t limit = text.empty() ? 0 : static_cast<uint8_t>(text[0]);
      const size_t boundary = mcp::Utf8BoundaryAtOrBefore(text, limit);
      FUZZ_CHECK(boundary <= std::min(limit, text.size()), std::to_string(boundary));
      if (mcp::IsValidUtf8(text)) FUZZ_CHECK(mcp::IsValidUtf8(text.substr(0, boundary)), std::string(text));
      mcp::HeadTailBuffer buffer(limit);
      buffer.Append(text.substr(0, text.size() / 2));
      buffer.Append(text.substr(text.size() / 2));
      FUZZ_CHECK(mcp::IsValidUtf8(buffer.Render()), buffer.Render());
      FUZZ_CHECK(buffer.total_bytes() == text.size(), "total");
      break;
    }
  }
}

// The MCP server checks a tool call's arguments against the tool's schema; a JSON-RPC
// message's envelope is classified first.
void FuzzMcp(uint8_t which, std::string_view rest) {
  json value = json::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return;
  (void)mcp::ClassifyMessage(value);
  if (!value.is_object()) return;
  const std::vector<mcp::ToolSpec>& tools = mcp::AllTools();
  const mcp::ToolSpec& tool = tools[which % tools.size()];
  if (mcp::CheckArguments(tool.input_schema, value)) return;
  // What the schema lets through, the handlers read without a type error.
  json cmd;
  if (value.contains("command") || value.contains("argv")) (void)mcp::CommandFromArguments(value, cmd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t selector = data[0];
  const uint8_t which = data[1];
  const std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  switch (selector % 8) {
    case 0: FuzzSandboxSpec(rest); break;
    case 1: FuzzExec(rest); break;
    case 2: FuzzProcess(rest); break;
    case 3: FuzzSmallBodies(which, rest); break;
    case 4: FuzzQueries(which, rest); break;
    case 5: FuzzStrings(which, rest); break;
    case 6: FuzzMcp(which, rest); break;
    case 7: {
      // A sandbox spec as the state database holds it (written by this daemon, read back).
      Result<core::SandboxSpec> spec = core::SpecFromJson(std::string(rest));
      if (spec.ok()) (void)core::SpecToJson(*spec);
      break;
    }
  }
  return 0;
}
