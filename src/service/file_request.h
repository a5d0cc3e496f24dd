// The requests of the file routes (/v1/sandboxes/{id}/files...), parsed and validated. Pure
// functions with validate.h's conventions: absent parameters take their default, unknown
// ones are ignored, bad values are 422 naming the parameter.
//
// Paths are absolute or relative to the sandbox's workdir, at most 4096 bytes, UTF-8 (the
// control protocol is JSON); a NUL byte is 400. They are not normalised here: the worker
// inside the sandbox resolves them there, where ".." and symlinks can only reach what the
// sandbox itself reaches.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "http/request_target.h"

namespace bulkhead::api {

constexpr size_t kMaxFilePathBytes = 4096;
constexpr int64_t kMaxListDepth = 32;
// An upload's limit; the sandbox's disk quota is the real bound.
constexpr uint64_t kMaxFileUpload = uint64_t{64} << 30;

// The file operations of ctl_protocol.h.
enum class FileOp { kRead, kWrite, kStat, kList, kMkdir, kMove, kRemove, kArchiveCreate, kArchiveExtract, kWatch };

struct FileRequest {
  FileOp op = FileOp::kStat;
  std::string path;                 // as given; for move, "from"
  std::string to;                   // move
  std::optional<uint32_t> mode;     // write, mkdir: permission bits
  bool append = false;              // write
  bool parents = true;              // mkdir
  bool recursive = false;           // remove (default false), watch (default true)
  int64_t depth = 1;                // list
  std::optional<std::string> user;  // ?user=: whom the operation runs as; else the sandbox's user
};

// The routes whose parameters are in the query: ?path= (required) and, by op, mode
// (octal text), append, recursive, depth; user on every route.
Result<FileRequest> ParseFileQuery(FileOp op, const QueryParams& query);
// POST .../files/mkdir {"path", "parents": true, "mode"?: "0755" | 493} and
// POST .../files/move {"from", "to"}; ?user= applies as for the other routes.
Result<FileRequest> ParseFileBody(FileOp op, const nlohmann::json& body, const QueryParams& query);

// The "file_op" object of ctl_protocol.h for `request`, its relative paths joined to
// `workdir`. 422 if a joined path grows over 4096 bytes.
Result<nlohmann::json> FileOpJson(const FileRequest& request, std::string_view workdir);

// 400 with a NUL byte; 422 if empty, over 4096 bytes or not UTF-8. `name` is for the message.
Status CheckFilePath(std::string_view path, std::string_view name);
// Octal permission bits ("0644", "755"): 422 unless 0..07777.
Result<uint32_t> ParseOctalMode(std::string_view text, std::string_view name);

}  // namespace bulkhead::api
