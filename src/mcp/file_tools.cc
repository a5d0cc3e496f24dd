// Tools for a sandbox's files: read, write, list and search. Reads and writes go through
// the file API (any bytes, no shell); search runs grep or find inside the sandbox as argv.
#include <algorithm>
#include <cstdio>

#include "client/server_url.h"
#include "common/base64.h"
#include "common/bounded_json.h"
#include "mcp/text.h"
#include "mcp/tool.h"

namespace bulkhead::mcp {
namespace {

using cli::HttpMethod;
using cli::PercentEncode;
using cli::SandboxPath;

constexpr int64_t kDefaultReadBytes = 64 << 10;
constexpr size_t kUploadChunkBytes = 256 << 10;
constexpr size_t kMaxMatchLineBytes = 500;

std::string FilesTarget(const std::string& id, const std::string& route, const std::string& path) {
  return SandboxPath(id) + "/files" + route + "?path=" + PercentEncode(path);
}

std::string OctalMode(const json& entry) {
  if (!entry.contains("mode") || !entry["mode"].is_number_integer()) return {};
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(entry["mode"].get<int64_t>() & 07777));
  return text;
}

ToolResult ReadFile(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  const std::string path = arguments["path"].get<std::string>();
  const int64_t offset = ArgumentOr<int64_t>(arguments, "offset", 0);
  const auto length = static_cast<size_t>(ArgumentOr<int64_t>(arguments, "length", kDefaultReadBytes));

  auto entry = context.api.Call(HttpMethod::kGet, FilesTarget(id, "/stat", path));
  if (!entry.ok()) return ApiFailure(entry.error(), id);
  const std::string type = entry->value("type", "");
  const std::string absolute = entry->value("path", path);
  if (type == "dir") return ToolError(absolute + " is a directory; use list_files to see what it holds");
  if (type != "file") return ToolError(absolute + " is not a regular file (" + type + ")");
  const int64_t size = entry->value("size", int64_t{0});

  // The file API streams the whole file: skip to the offset, stop once `length` bytes are in.
  std::string bytes;
  if (offset < size) {
    auto download = context.api.Download(FilesTarget(id, "", path), "application/octet-stream");
    if (!download.ok()) return ApiFailure(download.error(), id);
    auto to_skip = static_cast<uint64_t>(offset);
    while (bytes.size() < length) {
      auto piece = download->Read();
      if (!piece.ok()) return context.cancelled() ? ToolError("cancelled") : ApiFailure(piece.error(), id);
      if (piece->empty()) break;
      std::string_view data = *piece;
      const auto skip = static_cast<size_t>(std::min<uint64_t>(to_skip, data.size()));
      data.remove_prefix(skip);
      to_skip -= skip;
      bytes.append(data.substr(0, length - bytes.size()));
    }
  }
  bool eof = offset + static_cast<int64_t>(bytes.size()) >= size;
  const bool binary = bytes.find('\0') != std::string::npos ||
                      !IsValidUtf8(std::string_view(bytes).substr(0, bytes.size() - (eof ? 0 : IncompleteUtf8Suffix(bytes))));
  if (!binary && !eof) bytes.resize(bytes.size() - IncompleteUtf8Suffix(bytes));  // next read starts on a character
  const int64_t next = offset + static_cast<int64_t>(bytes.size());

  json structured = {{"path", absolute}, {"size", size},          {"offset", offset},
                     {"bytes_read", bytes.size()}, {"next_offset", next}, {"eof", eof},
                     {"binary", binary},   {"content", binary ? "" : bytes}};
  std::string text;
  if (binary) {
    text = absolute + " is binary (" + std::to_string(size) +
           " bytes); its content is not shown. Inspect it with run_command (file, xxd, base64, or a tool for its "
           "format).";
  } else {
    text = bytes;
    if (!eof) {
      text += "\n[bytes " + std::to_string(offset) + ".." + std::to_string(next) + " of " + std::to_string(size) +
              "; call read_file with offset=" + std::to_string(next) + " for more]";
    } else if (offset > 0 || bytes.empty()) {
      text += "\n[bytes " + std::to_string(offset) + ".." + std::to_string(next) + " of " + std::to_string(size) +
              ", end of file]";
    }
  }
  return ToolResult{std::move(text), std::move(structured), false};
}

ToolResult WriteFile(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  const std::string path = arguments["path"].get<std::string>();
  std::string bytes = arguments["content"].get<std::string>();
  if (ArgumentOr<std::string>(arguments, "encoding", "utf-8") == "base64") {
    auto decoded = Base64Decode(bytes);
    if (!decoded) return ToolError("'content' is not valid base64 (standard alphabet, no whitespace)");
    bytes = std::move(*decoded);
  }
  std::string target = FilesTarget(id, "", path);
  if (arguments.contains("mode")) target += "&mode=" + PercentEncode(arguments["mode"].get<std::string>());
  if (ArgumentOr<bool>(arguments, "append", false)) target += "&append=true";
  auto entry = context.api.Upload(target, "application/octet-stream", bytes.size(),
                                  [&bytes](const cli::BodyChunkSink& sink) -> Status {
                                    for (size_t at = 0; at < bytes.size(); at += kUploadChunkBytes) {
                                      BH_TRY(sink(std::string_view(bytes).substr(at, kUploadChunkBytes)));
                                    }
                                    return {};
                                  });
  if (!entry.ok()) return ApiFailure(entry.error(), id);
  return StructuredResult({{"path", entry->value("path", path)},
                           {"size", entry->value("size", static_cast<int64_t>(bytes.size()))},
                           {"mode", OctalMode(*entry)}});
}

ToolResult ListFiles(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  const std::string path = ArgumentOr<std::string>(arguments, "path", ".");
  const int64_t depth = ArgumentOr<int64_t>(arguments, "depth", 1);
  const auto max_entries = static_cast<size_t>(ArgumentOr<int64_t>(arguments, "max_entries", 500));
  auto listing =
      context.api.Call(HttpMethod::kGet, FilesTarget(id, "/list", path) + "&depth=" + std::to_string(depth));
  if (!listing.ok()) return ApiFailure(listing.error(), id);
  const json all = listing->value("entries", json::array());

  json entries = json::array();
  std::string text;
  for (const json& entry : all) {
    if (entries.size() == max_entries) break;
    json item = {{"path", entry.value("path", "")}, {"type", entry.value("type", "")},
                 {"size", entry.value("size", int64_t{0})}, {"mtime", entry.value("mtime", "")}};
    const std::string type = item["type"];
    if (entry.contains("target")) item["target"] = entry["target"];
    text += type == "dir"       ? "dir   " + item["path"].get<std::string>() + "/"
            : type == "symlink" ? "link  " + item["path"].get<std::string>() + " -> " + entry.value("target", "")
            : type == "file"    ? "file  " + item["path"].get<std::string>() + "  (" + item["size"].dump() + " bytes)"
                                : "other " + item["path"].get<std::string>();
    text += "\n";
    entries.push_back(std::move(item));
  }
  const bool truncated = all.size() > entries.size();
  if (all.empty()) text = "(empty directory)\n";
  if (truncated) {
    text += "[" + std::to_string(all.size() - entries.size()) +
            " more entries not shown: list a subdirectory, lower depth, or use search_files]\n";
  }
  json structured = {{"path", path}, {"entries", std::move(entries)}, {"total", all.size()}, {"truncated", truncated}};
  return ToolResult{std::move(text), std::move(structured), false};
}

// grep -Z / find -print0 output, parsed as it streams in; stops the search once one
// result more than wanted has arrived.
class SearchCollector {
 public:
  SearchCollector(bool content, size_t max_results) : content_(content), max_results_(max_results) {}

  // False once enough results are in.
  bool Feed(std::string_view bytes) {
    pending_.append(bytes);
    for (;;) {
      const size_t name_end = pending_.find('\0');
      if (name_end == std::string::npos) return true;
      json match = {{"path", ToValidUtf8(std::string_view(pending_).substr(0, name_end))}};
      size_t consumed = name_end + 1;
      if (content_) {  // "path\0LINE:text\n"
        const size_t line_end = pending_.find('\n', consumed);
        if (line_end == std::string::npos) return true;
        std::string_view rest = std::string_view(pending_).substr(consumed, line_end - consumed);
        const size_t colon = rest.find(':');
        match["line"] = std::atoll(std::string(rest.substr(0, colon)).c_str());
        std::string_view line = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
        if (line.size() > kMaxMatchLineBytes) line = line.substr(0, Utf8BoundaryAtOrBefore(line, kMaxMatchLineBytes));
        match["text"] = ToValidUtf8(line);
        consumed = line_end + 1;
      }
      pending_.erase(0, consumed);
      if (matches_.size() == max_results_) {
        truncated_ = true;
        return false;
      }
      matches_.push_back(std::move(match));
    }
  }

  json& matches() { return matches_; }
  bool truncated() const { return truncated_; }

 private:
  bool content_;
  size_t max_results_;
  std::string pending_;
  json matches_ = json::array();
  bool truncated_ = false;
};

ToolResult SearchFiles(const json& arguments, ToolContext& context) {
  const std::string id = arguments["sandbox_id"].get<std::string>();
  const bool by_content = arguments.contains("content_regex");
  const bool by_name = arguments.contains("name_glob");
  if (!by_content && !by_name) return ToolError("give name_glob (e.g. \"*.py\"), content_regex, or both");
  const bool ignore_case = ArgumentOr<bool>(arguments, "case_insensitive", false);
  const auto max_results = static_cast<size_t>(ArgumentOr<int64_t>(arguments, "max_results", 100));

  // Absolute, so that no path can be taken for an option and results read the same.
  std::string base = ArgumentOr<std::string>(arguments, "path", "");
  if (base.empty() || base[0] != '/') {
    auto sandbox = context.api.Call(HttpMethod::kGet, SandboxPath(id));
    if (!sandbox.ok()) return ApiFailure(sandbox.error(), id);
    const std::string workdir = sandbox->value("workdir", "/");
    base = base.empty() || base == "." ? workdir : workdir + (workdir.back() == '/' ? "" : "/") + base;
  }

  json argv;
  if (by_content) {
    argv = {"grep", "-r", "-n", "-I", "-Z", "-E", "-s", "--exclude-dir=.git"};
    if (ignore_case) argv.push_back("-i");
    if (by_name) argv.push_back("--include=" + arguments["name_glob"].get<std::string>());
    argv.insert(argv.end(), {"-e", arguments["content_regex"].get<std::string>(), "--", base});
  } else {
    argv = {"find", base, "-name", ".git", "-prune", "-o", ignore_case ? "-iname" : "-name",
            arguments["name_glob"].get<std::string>(), "-print0"};
  }
  const json request = {{"cmd", argv}, {"timeout_s", ArgumentOr<int64_t>(arguments, "timeout_s", 30)}};

  SearchCollector collector(by_content, max_results);
  std::string errors;
  json exit_event;
  const char* kEnough = "enough_results";
  auto on_line = [&](std::string_view line) -> Status {
    json event = ParseBoundedJson(line);
    if (!event.is_object()) return MakeError(ErrorCode::kInternal, "an exec event is not JSON", "bad_response");
    const std::string type = event.value("type", "");
    if (type == "stdout") {
      const std::string data = event.contains("data") ? event.value("data", "")
                                                      : Base64Decode(event.value("data_b64", "")).value_or("");
      // Enough: end the request, which ends the search in the sandbox.
      if (!collector.Feed(data)) return MakeError(ErrorCode::kInternal, "enough results", kEnough);
    } else if (type == "stderr") {
      if (errors.size() < 2000) errors += event.value("data", "");
    } else if (type == "exit") {
      exit_event = event;
    } else if (type == "error") {
      return cli::ErrorFromJson(event, ErrorCode::kInternal);
    }
    return {};
  };
  auto response = context.api.http().SendForLines(HttpMethod::kPost, SandboxPath(id) + "/exec",
                                                  cli::DumpJson(request), on_line);
  if (context.cancelled()) return ToolError("cancelled");
  const bool stopped_early = !response.ok() && response.error().detail_code == kEnough;
  if (!response.ok() && !stopped_early) return ApiFailure(response.error(), id);
  if (response.ok() && !response->ok()) return ApiFailure(cli::ErrorFromResponse(*response), id);

  // No exit event when the search was stopped early.
  const json exit_code_json = exit_event.is_object() ? exit_event.value("exit_code", json()) : json();
  const int exit_code = exit_code_json.is_number_integer() ? exit_code_json.get<int>() : -1;
  const bool timed_out = exit_event.is_object() && exit_event.value("timed_out", false);
  if (!stopped_early && exit_code == 127) {
    return ToolError(std::string(by_content ? "grep" : "find") +
                     " is not installed in this sandbox's image, so search_files cannot run here; use "
                     "list_files and read_file instead");
  }
  json& matches = collector.matches();
  if (!stopped_early && !timed_out && matches.empty() && exit_code >= 2) {
    return ToolError("the search failed: " + (errors.empty() ? std::string("exit code ") + std::to_string(exit_code)
                                                                 : ToValidUtf8(errors.substr(0, 500))) +
                     "; check the path (list_files) and that content_regex is a valid POSIX extended regex");
  }
  if (!stopped_early && !timed_out && matches.empty() && exit_code == 1 && !by_content && !errors.empty()) {
    return ToolError("the search failed: " + ToValidUtf8(errors.substr(0, 500)));
  }

  std::string text;
  for (const json& match : matches) {
    text += match["path"].get<std::string>();
    if (by_content) text += ":" + match["line"].dump() + ": " + match["text"].get<std::string>();
    text += "\n";
  }
  if (matches.empty()) text = "no matches under " + base + "\n";
  if (collector.truncated()) {
    text += "[stopped at max_results=" + std::to_string(max_results) + "; narrow path, name_glob or the regex]\n";
  }
  if (timed_out) text += "[the search timed out: results are partial; narrow path, or raise timeout_s]\n";
  const size_t count = matches.size();
  json structured = {{"path", base},
                     {"matches", std::move(matches)},
                     {"count", count},
                     {"truncated", collector.truncated()},
                     {"timed_out", timed_out}};
  return ToolResult{std::move(text), std::move(structured), false};
}

}  // namespace

void AddFileTools(std::vector<ToolSpec>& tools) {
  tools.push_back(ToolSpec{
      .name = "read_file",
      .title = "Read file",
      .description =
          "Reads a text file in a sandbox and returns its content. Paths are absolute or relative to the "
          "sandbox's workdir. Returns at most 'length' bytes (default 65536, at most 1048576) starting at "
          "'offset'; when eof is false, call again with offset=next_offset for the rest. A binary file (NUL "
          "bytes or not UTF-8) is reported as binary without its content: inspect it with run_command. For a "
          "directory use list_files; to find text across files use search_files.",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "sandbox_id": {"type": "string", "minLength": 1},
          "path": {"type": "string", "minLength": 1},
          "offset": {"type": "integer", "minimum": 0, "description": "Byte to start at (default 0)."},
          "length": {"type": "integer", "minimum": 1, "maximum": 1048576, "description": "Bytes to read at most (default 65536)."}
        },
        "required": ["sandbox_id", "path"],
        "additionalProperties": false
      })json"),
      .output_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "path": {"type": "string"}, "size": {"type": "integer"}, "offset": {"type": "integer"},
          "bytes_read": {"type": "integer"}, "next_offset": {"type": "integer"}, "eof": {"type": "boolean"},
          "binary": {"type": "boolean"}, "content": {"type": "string"}
        },
        "required": ["path", "size", "offset", "next_offset", "eof", "binary", "content"]
      })json"),
      .annotations = {{"readOnlyHint", true}, {"openWorldHint", false}},
      .handler = ReadFile,
  });
  tools.push_back(ToolSpec{
      .name = "write_file",
      .title = "Write file",
      .description =
          "Writes a file in a sandbox, replacing it (or appending with append: true), and creates missing "
          "parent directories. Paths are absolute or relative to the workdir. content is text; for binary data "
          "pass base64 with encoding: \"base64\". Use it to create or rewrite source files instead of shell "
          "heredocs. mode sets permissions as octal text (\"0755\" for a script).",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "sandbox_id": {"type": "string", "minLength": 1},
          "path": {"type": "string", "minLength": 1},
          "content": {"type": "string", "description": "The whole new content (or what to append)."},
          "encoding": {"type": "string", "enum": ["utf-8", "base64"], "description": "How content is given (default utf-8)."},
          "append": {"type": "boolean", "description": "Add to the end instead of replacing (default false)."},
          "mode": {"type": "string", "minLength": 3, "maxLength": 4, "description": "Octal permissions, e.g. \"0644\" or \"0755\"."}
        },
        "required": ["sandbox_id", "path", "content"],
        "additionalProperties": false
      })json"),
      .output_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {"path": {"type": "string"}, "size": {"type": "integer"}, "mode": {"type": "string"}},
        "required": ["path", "size"]
      })json"),
      .annotations = {{"readOnlyHint", false}, {"destructiveHint", true}, {"idempotentHint", true},
                      {"openWorldHint", false}},
      .handler = WriteFile,
  });
  tools.push_back(ToolSpec{
      .name = "list_files",
      .title = "List files",
      .description =
          "Lists a directory in a sandbox: each entry's path, type (file, dir, symlink, other), size and "
          "modification time. depth 2 or more also lists subdirectories' contents (up to 10 levels); at most "
          "max_entries (default 500) come back. Default path: the workdir. To find files by name or content "
          "across a tree, search_files is better.",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "sandbox_id": {"type": "string", "minLength": 1},
          "path": {"type": "string", "minLength": 1, "description": "Directory (default: the workdir)."},
          "depth": {"type": "integer", "minimum": 1, "maximum": 10, "description": "Levels to descend (default 1)."},
          "max_entries": {"type": "integer", "minimum": 1, "maximum": 5000, "description": "Default 500."}
        },
        "required": ["sandbox_id"],
        "additionalProperties": false
      })json"),
      .output_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "path": {"type": "string"},
          "entries": {"type": "array", "items": {"type": "object", "properties": {
            "path": {"type": "string"}, "type": {"type": "string"}, "size": {"type": "integer"},
            "mtime": {"type": "string"}, "target": {"type": "string"}}, "required": ["path", "type"]}},
          "total": {"type": "integer"},
          "truncated": {"type": "boolean"}
        },
        "required": ["path", "entries", "total", "truncated"]
      })json"),
      .annotations = {{"readOnlyHint", true}, {"openWorldHint", false}},
      .handler = ListFiles,
  });
  tools.push_back(ToolSpec{
      .name = "search_files",
      .title = "Search files",
      .description =
          "Finds files in a sandbox by name and/or content under a directory (default: the workdir), recursively, "
          "skipping .git. name_glob matches file names (\"*.py\", \"test_*\"); content_regex is a POSIX "
          "extended regex (grep -E) matched line by line in text files (binary files are skipped), and returns "
          "path, line number and the line (cut at 500 bytes). With both, only files whose name matches are "
          "searched. Stops after max_results (default 100) and after timeout_s (default 30).",
      .input_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "sandbox_id": {"type": "string", "minLength": 1},
          "path": {"type": "string", "minLength": 1, "description": "Directory to search (default: the workdir)."},
          "name_glob": {"type": "string", "minLength": 1, "description": "Shell pattern for the file name (not the path)."},
          "content_regex": {"type": "string", "minLength": 1, "description": "Extended regular expression to look for."},
          "case_insensitive": {"type": "boolean", "description": "Default false."},
          "max_results": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Default 100."},
          "timeout_s": {"type": "integer", "minimum": 1, "maximum": 300, "description": "Default 30."}
        },
        "required": ["sandbox_id"],
        "additionalProperties": false
      })json"),
      .output_schema = ParseSchema(R"json({
        "type": "object",
        "properties": {
          "path": {"type": "string"},
          "matches": {"type": "array", "items": {"type": "object", "properties": {
            "path": {"type": "string"}, "line": {"type": "integer"}, "text": {"type": "string"}}, "required": ["path"]}},
          "count": {"type": "integer"},
          "truncated": {"type": "boolean"},
          "timed_out": {"type": "boolean"}
        },
        "required": ["path", "matches", "count", "truncated", "timed_out"]
      })json"),
      .annotations = {{"readOnlyHint", true}, {"openWorldHint", false}},
      .handler = SearchFiles,
  });
}

}  // namespace bulkhead::mcp
