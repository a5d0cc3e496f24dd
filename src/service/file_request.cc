#include "service/file_request.h"

#include <fmt/format.h>

#include "http/encoding.h"
#include "service/validate.h"

namespace bulkhead::api {
namespace {

using nlohmann::json;

Error Invalid(std::string message) { return MakeError(ErrorCode::kInvalid, std::move(message)); }

Status ReadUser(const QueryParams& query, std::optional<std::string>& out) {
  const std::string* user = QueryParam(query, "user");
  if (user == nullptr) return {};
  if (!IsValidUser(*user)) return Invalid("user must be a user name, a uid or uid:gid");
  out = *user;
  return {};
}

Status ReadJsonPath(const json& body, const char* key, std::string& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return Invalid(fmt::format("{} is required", key));
  if (!it->is_string()) return Invalid(fmt::format("{} must be a string, not {}", key, it->type_name()));
  out = it->get<std::string>();
  return CheckFilePath(out, key);
}

std::string Resolve(std::string_view path, std::string_view workdir) {
  if (path.starts_with('/')) return std::string(path);
  std::string joined(workdir);
  if (!joined.ends_with('/')) joined += '/';
  joined += path;
  return joined;
}

const char* OpName(FileOp op) {
  switch (op) {
    case FileOp::kRead: return "read";
    case FileOp::kWrite: return "write";
    case FileOp::kStat: return "stat";
    case FileOp::kList: return "list";
    case FileOp::kMkdir: return "mkdir";
    case FileOp::kMove: return "move";
    case FileOp::kRemove: return "remove";
    case FileOp::kArchiveCreate: return "archive_create";
    case FileOp::kArchiveExtract: return "archive_extract";
    case FileOp::kWatch: return "watch";
  }
  return "stat";
}

}  // namespace

Status CheckFilePath(std::string_view path, std::string_view name) {
  if (path.find('\0') != std::string_view::npos) {
    return MakeError(ErrorCode::kBadRequest, fmt::format("{} contains a NUL byte", name));
  }
  if (path.empty()) return Invalid(fmt::format("{} must not be empty", name));
  if (path.size() > kMaxFilePathBytes) return Invalid(fmt::format("{} is longer than {} bytes", name, kMaxFilePathBytes));
  if (!IsValidUtf8(path)) return Invalid(fmt::format("{} is not valid UTF-8", name));
  return {};
}

Result<uint32_t> ParseOctalMode(std::string_view text, std::string_view name) {
  const Error invalid = Invalid(fmt::format("{} must be octal permission bits between 0000 and 7777", name));
  if (text.empty() || text.size() > 8) return invalid;
  uint32_t mode = 0;
  for (char c : text) {
    if (c < '0' || c > '7') return invalid;
    mode = mode * 8 + uint32_t(c - '0');
  }
  if (mode > 07777) return invalid;
  return mode;
}

Result<FileRequest> ParseFileQuery(FileOp op, const QueryParams& query) {
  FileRequest request;
  request.op = op;
  const std::string* path = QueryParam(query, "path");
  if (path == nullptr) return Invalid("path is required (?path=)");
  request.path = *path;
  if (Status ok = CheckFilePath(request.path, "path"); !ok.ok()) return ok.error();
  if (Status ok = ReadUser(query, request.user); !ok.ok()) return ok.error();

  switch (op) {
    case FileOp::kWrite:
      if (const std::string* mode = QueryParam(query, "mode")) {
        Result<uint32_t> bits = ParseOctalMode(*mode, "mode");
        if (!bits.ok()) return bits.error();
        request.mode = *bits;
      }
      if (Status ok = ReadBoolParam(query, "append", request.append); !ok.ok()) return ok.error();
      break;
    case FileOp::kList:
      if (const std::string* depth = QueryParam(query, "depth")) {
        const Error range = Invalid(fmt::format("depth must be an integer between 1 and {}", kMaxListDepth));
        if (depth->empty() || depth->size() > 2 || depth->find_first_not_of("0123456789") != std::string::npos)
          return range;
        request.depth = std::stoll(*depth);
        if (request.depth < 1 || request.depth > kMaxListDepth) return range;
      }
      break;
    case FileOp::kRemove:
      request.recursive = false;
      if (Status ok = ReadBoolParam(query, "recursive", request.recursive); !ok.ok()) return ok.error();
      break;
    case FileOp::kWatch:
      request.recursive = true;
      if (Status ok = ReadBoolParam(query, "recursive", request.recursive); !ok.ok()) return ok.error();
      break;
    default:
      break;
  }
  return request;
}

Result<FileRequest> ParseFileBody(FileOp op, const json& body, const QueryParams& query) {
  FileRequest request;
  request.op = op;
  if (Status ok = ReadUser(query, request.user); !ok.ok()) return ok.error();
  if (op == FileOp::kMove) {
    if (Status ok = ReadJsonPath(body, "from", request.path); !ok.ok()) return ok.error();
    if (Status ok = ReadJsonPath(body, "to", request.to); !ok.ok()) return ok.error();
    return request;
  }
  if (Status ok = ReadJsonPath(body, "path", request.path); !ok.ok()) return ok.error();
  if (auto it = body.find("parents"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return Invalid(fmt::format("parents must be a boolean, not {}", it->type_name()));
    request.parents = it->get<bool>();
  }
  if (auto it = body.find("mode"); it != body.end() && !it->is_null()) {
    const Error range = Invalid("mode must be permission bits between 0 and 0o7777 (4095), or octal text like \"0755\"");
    if (it->is_string()) {
      Result<uint32_t> bits = ParseOctalMode(it->get<std::string>(), "mode");
      if (!bits.ok()) return bits.error();
      request.mode = *bits;
    } else if (it->is_number_integer() && it->get<int64_t>() >= 0 && it->get<int64_t>() <= 07777) {
      request.mode = uint32_t(it->get<int64_t>());
    } else {
      return range;
    }
  }
  return request;
}

Result<json> FileOpJson(const FileRequest& request, std::string_view workdir) {
  const std::string path = Resolve(request.path, workdir);
  if (path.size() > kMaxFilePathBytes) {
    return Invalid(fmt::format("the path joined to the workdir is longer than {} bytes", kMaxFilePathBytes));
  }
  json op = {{"op", OpName(request.op)}};
  switch (request.op) {
    case FileOp::kMove: {
      const std::string to = Resolve(request.to, workdir);
      if (to.size() > kMaxFilePathBytes) {
        return Invalid(fmt::format("the path joined to the workdir is longer than {} bytes", kMaxFilePathBytes));
      }
      op["from"] = path;
      op["to"] = to;
      return op;
    }
    case FileOp::kWrite:
      op["parents"] = true;
      op["append"] = request.append;
      break;
    case FileOp::kMkdir:
      op["parents"] = request.parents;
      break;
    case FileOp::kList:
      op["depth"] = request.depth;
      break;
    case FileOp::kRemove:
    case FileOp::kWatch:
      op["recursive"] = request.recursive;
      break;
    default:
      break;
  }
  op["path"] = path;
  if (request.mode && (request.op == FileOp::kWrite || request.op == FileOp::kMkdir)) op["mode"] = *request.mode;
  return op;
}

}  // namespace bulkhead::api
