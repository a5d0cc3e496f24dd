#include "cli/output_format.h"
#include "cli/file_commands.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <vector>

#include "cli/copy_plan.h"
#include "cli/local_files.h"
#include "cli/listing_format.h"
#include "storage/tar_stream.h"
#include "cli/tar_unpack.h"
#include "client/line_splitter.h"
#include "common/scope_guard.h"
#include "common/unique_fd.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;
using storage::StreamDirectoryAsTar;

// /v1/sandboxes/{id}/files{route}?path=...
std::string FilesTarget(const std::string& sandbox_id, std::string_view route, const std::string& path) {
  return SandboxPath(sandbox_id) + "/files" + std::string(route) + "?path=" + PercentEncode(path);
}

// The Entry at `path` in the sandbox; nullopt when nothing is there.
Result<std::optional<json>> StatInSandbox(const Session& session, const std::string& sandbox_id,
                                          const std::string& path) {
  auto entry = session.api.Call(HttpMethod::kGet, FilesTarget(sandbox_id, "/stat", path));
  if (!entry.ok()) {
    // The worker's "not_found" is about the path; "sandbox_not_found" stays an error.
    if (entry.error().detail_code == "not_found") return std::optional<json>();
    return entry.error();
  }
  if (!entry->is_object()) {
    return MakeError(ErrorCode::kInternal, "unexpected answer from the daemon: stat is not an object", "bad_response");
  }
  return std::optional<json>(std::move(*entry));
}

PathKind KindOfEntry(const std::optional<json>& entry) {
  if (!entry) return PathKind::kMissing;
  return StringField(*entry, "type") == "dir" ? PathKind::kDirectory : PathKind::kFile;
}

// What is at a local path (symlinks followed, as cp does for its arguments).
Result<PathKind> LocalKind(const std::string& path) {
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return PathKind::kMissing;
    return SystemError(path, errno);
  }
  return S_ISDIR(info.st_mode) ? PathKind::kDirectory : PathKind::kFile;
}

std::string ParentOf(const std::string& path) {
  std::string trimmed = WithoutTrailingDot(path);
  size_t slash = trimmed.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return trimmed.substr(0, slash);
}

// Streams the download into a temporary file beside `path`, then renames it over `path`:
// a failed copy leaves nothing half-written, and an existing symlink at `path` is
// replaced rather than written through.
Status SaveFile(StreamedResponse& body, const std::string& path, int64_t mode) {
  std::string directory = ParentOf(path);
  std::string temporary = JoinPath(directory, "." + BaseName(path) + ".bulkhead-XXXXXX");
  UniqueFd file(::mkostemp(temporary.data(), O_CLOEXEC));
  if (!file) return SystemError("creating a file in " + directory, errno);
  ScopeGuard remove_temporary([&temporary] { ::unlink(temporary.c_str()); });
  BH_TRY(Drain(body, file.get()));
  // Permission bits as in the sandbox, as an unpacked file gets them (never setuid/setgid).
  if (::fchmod(file.get(), HostPermissions(static_cast<mode_t>(mode), false)) != 0) {
    return SystemError("chmod " + temporary, errno);
  }
  if (::close(file.release()) != 0) return SystemError("writing " + path, errno);
  if (::rename(temporary.c_str(), path.c_str()) != 0) return SystemError("renaming onto " + path, errno);
  remove_temporary.Dismiss();
  return {};
}

// Makes `directory` unless it exists as one; its parent must exist (like docker cp).
Status EnsureLocalDirectory(const std::string& directory) {
  if (::mkdir(directory.c_str(), 0755) == 0) return {};
  int err = errno;
  struct stat info{};
  if (err == EEXIST && ::stat(directory.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) return {};
  if (err == EEXIST) {
    return MakeError(ErrorCode::kConflict, directory + " exists and is not a directory", "not_a_directory");
  }
  return SystemError("creating " + directory, err);
}

TarWarningHandler Warner(const Session& session) {
  return [&session](const std::string& warning) { session.Err("bulkhead: warning: " + warning + "\n"); };
}

int CopyFromSandbox(Session& session, const CopyLocation& source, const CopyLocation& destination) {
  auto entry = StatInSandbox(session, source.sandbox_id, source.path);
  if (!entry.ok()) return session.Fail(entry.error());
  if (!*entry) {
    return session.Fail(MakeError(ErrorCode::kNotFound, "no such file or directory in sandbox " +
                                                            source.sandbox_id + ": " + source.path,
                                  "not_found"));
  }
  bool is_directory = KindOfEntry(*entry) == PathKind::kDirectory;
  // Send the path without a trailing "/.": that form only chooses where the copy lands.
  std::string remote_path = WithoutTrailingDot(source.path);

  if (destination.kind == CopyLocation::Kind::kStdio) {
    // A file's bytes, or a directory as a tar stream (as docker cp does).
    auto body = session.api.Download(FilesTarget(source.sandbox_id, is_directory ? "/archive" : "", remote_path),
                                     is_directory ? "application/x-tar" : "application/octet-stream");
    if (!body.ok()) return session.Fail(body.error());
    Status drained = Drain(*body, session.io.stdout_fd);
    return drained.ok() ? 0 : session.Fail(drained.error());
  }

  auto local_kind = LocalKind(destination.path);
  if (!local_kind.ok()) return session.Fail(local_kind.error());
  if (!is_directory) {
    auto target = FileCopyDestination(source.path, destination.path, *local_kind);
    if (!target.ok()) return session.UsageError(target.error());
    auto body = session.api.Download(FilesTarget(source.sandbox_id, "", remote_path), "application/octet-stream");
    if (!body.ok()) return session.Fail(body.error());
    auto mode = entry->value()["mode"];
    Status saved = SaveFile(*body, *target, mode.is_number_integer() ? mode.get<int64_t>() : 0644);
    return saved.ok() ? 0 : session.Fail(saved.error());
  }

  auto target = DirectoryCopyDestination(source.path, destination.path, *local_kind);
  if (!target.ok()) return session.UsageError(target.error());
  if (Status made = EnsureLocalDirectory(*target); !made.ok()) return session.Fail(made.error());
  auto body = session.api.Download(FilesTarget(source.sandbox_id, "/archive", remote_path), "application/x-tar");
  if (!body.ok()) return session.Fail(body.error());
  Status unpacked = UnpackTar([&body] { return body->Read(); }, *target, Warner(session));
  return unpacked.ok() ? 0 : session.Fail(unpacked.error());
}

int CopyIntoSandbox(Session& session, const CopyLocation& source, const CopyLocation& destination) {
  const std::string& sandbox_id = destination.sandbox_id;
  auto entry = StatInSandbox(session, sandbox_id, destination.path);
  if (!entry.ok()) return session.Fail(entry.error());
  PathKind remote_kind = KindOfEntry(*entry);
  std::string remote_path = destination.path;

  if (source.kind == CopyLocation::Kind::kStdio) {
    if (remote_kind == PathKind::kDirectory) {
      return session.UsageError(destination.path + " is a directory in the sandbox; name the file to write");
    }
    auto written = session.api.Upload(FilesTarget(sandbox_id, "", remote_path), "application/octet-stream",
                                      std::nullopt, [&session](const BodyChunkSink& sink) {
                                        return SendFile(session.io.stdin_fd, std::nullopt, "stdin", sink);
                                      });
    return written.ok() ? 0 : session.Fail(written.error());
  }

  struct stat info{};
  if (::stat(source.path.c_str(), &info) != 0) {
    if (errno == ENOENT) {
      return session.Fail(MakeError(ErrorCode::kNotFound, "no such file or directory: " + source.path, "not_found"));
    }
    return session.Fail(SystemError(source.path, errno));
  }
  if (S_ISDIR(info.st_mode)) {
    auto target = DirectoryCopyDestination(source.path, remote_path, remote_kind);
    if (!target.ok()) return session.UsageError(target.error());
    std::string root = source.path;
    auto written = session.api.Upload(FilesTarget(sandbox_id, "/archive", *target), "application/x-tar",
                                      std::nullopt, [&](const BodyChunkSink& sink) {
                                        return StreamDirectoryAsTar(root, sink, Warner(session));
                                      });
    return written.ok() ? 0 : session.Fail(written.error());
  }
  if (!S_ISREG(info.st_mode)) {
    return session.UsageError(source.path + " is neither a regular file nor a directory");
  }
  auto target = FileCopyDestination(source.path, remote_path, remote_kind);
  if (!target.ok()) return session.UsageError(target.error());
  UniqueFd file(::open(source.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file) return session.Fail(SystemError("opening " + source.path, errno));
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(info.st_mode & 07777));
  uint64_t size = static_cast<uint64_t>(info.st_size);
  auto written = session.api.Upload(FilesTarget(sandbox_id, "", *target) + "&mode=" + mode,
                                    "application/octet-stream", size, [&](const BodyChunkSink& sink) {
                                      return SendFile(file.get(), size, source.path, sink);
                                    });
  return written.ok() ? 0 : session.Fail(written.error());
}

}  // namespace

int CopyCommand(Session& session) {
  CopyLocation source = ParseCopyLocation(session.line.copy_source);
  CopyLocation destination = ParseCopyLocation(session.line.copy_destination);
  bool from_sandbox = source.kind == CopyLocation::Kind::kSandbox;
  bool into_sandbox = destination.kind == CopyLocation::Kind::kSandbox;
  if (from_sandbox == into_sandbox) {
    return session.UsageError(from_sandbox ? "copying between two sandbox paths is not supported; copy through "
                                             "this machine"
                                           : "one side must be a sandbox path, ID:PATH");
  }
  return from_sandbox ? CopyFromSandbox(session, source, destination)
                      : CopyIntoSandbox(session, source, destination);
}

int FileListCommand(Session& session) {
  const CommandLine& line = session.line;
  if (line.state_filter || !line.metadata_filter.empty()) {
    return session.UsageError("--state and --metadata filter the list of sandboxes; they do not apply to files");
  }
  std::string path = line.path.empty() ? "." : line.path;
  auto entry = StatInSandbox(session, line.sandbox_id, path);
  if (!entry.ok()) return session.Fail(entry.error());
  if (!*entry) {
    return session.Fail(MakeError(ErrorCode::kNotFound, "no such file or directory: " + path, "not_found"));
  }
  json listing = {{"entries", json::array({**entry})}, {"truncated", false}};
  std::string type = StringField(**entry, "type");
  if (type == "dir" || type == "symlink") {
    std::string target = FilesTarget(line.sandbox_id, "/list", path) + "&depth=" + std::to_string(line.depth.value_or(1));
    auto listed = session.api.Call(HttpMethod::kGet, target);
    bool link_to_non_directory =
        !listed.ok() && type == "symlink" && listed.error().detail_code == "not_a_directory";
    if (listed.ok() && listed->is_object()) {
      listing = std::move(*listed);
    } else if (!link_to_non_directory) {  // such a link is shown as itself
      return session.Fail(listed.ok() ? MakeError(ErrorCode::kInternal, "unexpected answer from the daemon: the "
                                                                        "listing is not an object", "bad_response")
                                      : listed.error());
    }
  }
  if (line.json) {
    session.Out(DumpJson(listing, 2) + "\n");
    return 0;
  }
  std::string root = type == "file" || type == "other" ? "" : StringField(**entry, "path");
  session.Out(FormatFileListing(listing["entries"], root));
  if (listing["truncated"].is_boolean() && listing["truncated"].get<bool>()) {
    session.Err("bulkhead: warning: the listing was cut short; list a subdirectory or use a smaller --depth\n");
  }
  return 0;
}

int WatchCommand(Session& session) {
  const CommandLine& line = session.line;
  std::string path = line.path.empty() ? "." : line.path;
  std::string target = FilesTarget(line.sandbox_id, "/watch", path) +
                       "&recursive=" + (line.no_recursive ? "false" : "true");
  auto events = session.api.Download(target, "application/x-ndjson");
  if (!events.ok()) return session.Fail(events.error());
  // The daemon answers once the watch is set: from here on every change is reported.
  session.Err("watching " + path + (line.no_recursive ? "" : " and below") + " (Ctrl-C to stop)\n");

  LineSplitter splitter;
  auto print = [&session, &line](std::string_view text) -> Status {
    if (line.json) return WriteAll(session.io.stdout_fd, std::string(text) + "\n");
    json event = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (event.is_discarded() || !event.is_object()) {
      return MakeError(ErrorCode::kInternal, "unexpected answer from the daemon: an event is not JSON", "bad_response");
    }
    if (event.contains("error")) return ErrorFromJson(event, ErrorCode::kInternal);
    std::string type = StringField(event, "type");
    type.resize(std::max<size_t>(type.size(), 6), ' ');
    bool is_directory = event["dir"].is_boolean() && event["dir"].get<bool>();
    return WriteAll(session.io.stdout_fd, type + " " + StringField(event, "path") + (is_directory ? "/" : "") + "\n");
  };
  for (;;) {
    auto piece = events->Read();
    if (!piece.ok()) return session.Fail(piece.error());
    if (piece->empty()) break;
    if (Status printed = splitter.Feed(*piece, print); !printed.ok()) return session.Fail(printed.error());
  }
  if (Status printed = splitter.Finish(print); !printed.ok()) return session.Fail(printed.error());
  return session.Fail(MakeError(ErrorCode::kUnavailable, "the daemon ended the watch", "stream_ended"));
}

}  // namespace bulkhead::cli
