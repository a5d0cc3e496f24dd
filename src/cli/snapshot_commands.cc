#include "cli/snapshot_commands.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <vector>

#include "cli/local_files.h"
#include "cli/output_format.h"
#include "client/api_client.h"
#include "client/server_url.h"
#include "common/unique_fd.h"

namespace bulkhead::cli {

using nlohmann::json;

int SnapshotCreateCommand(Session& session) {
  const CommandLine& line = session.line;
  json body = json::object();
  if (line.snapshot_name) body["name"] = *line.snapshot_name;
  if (line.memory) body["memory"] = true;
  auto snapshot = session.api.Call(HttpMethod::kPost, SandboxPath(line.sandbox_id) + "/snapshots", body);
  if (!snapshot.ok()) return session.Fail(snapshot.error());
  session.Out(line.json ? DumpJson(*snapshot, 2) + "\n" : snapshot->value("id", "") + "\n");
  return 0;
}

int SnapshotListCommand(Session& session) {
  auto listing = session.api.Call(HttpMethod::kGet, "/v1/snapshots");
  if (!listing.ok()) return session.Fail(listing.error());
  if (session.line.json) {
    session.Out(DumpJson(*listing, 2) + "\n");
    return 0;
  }
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "SANDBOX", "RUNTIME", "MEMORY", "SIZE", "CREATED"}};
  for (const json& snapshot : listing->value("snapshots", json::array())) {
    const json& name = snapshot.contains("name") ? snapshot["name"] : json();
    rows.push_back({snapshot.value("id", ""), name.is_string() ? name.get<std::string>() : "-",
                    snapshot.value("sandbox_id", ""), snapshot.value("runtime", "native"),
                    snapshot.value("memory", false) ? "yes" : "no", FormatBytes(snapshot.value("size_bytes", int64_t{0})),
                    DescribeCreated(snapshot.value("created_at", ""), now)});
  }
  session.Out(FormatTable(rows));
  return 0;
}

int SnapshotRemoveCommand(Session& session) {
  int exit_code = 0;
  for (const std::string& id : session.line.snapshot_ids) {
    auto removed = session.api.Call(HttpMethod::kDelete, "/v1/snapshots/" + PercentEncode(id));
    if (!removed.ok()) {
      Error error = removed.error();
      error.message = id + ": " + error.message;
      exit_code = session.Fail(error);
      continue;
    }
    session.Out(id + "\n");
  }
  return exit_code;
}

int SnapshotExportCommand(Session& session) {
  const std::string& path = session.line.archive_path;
  auto body = session.api.Download("/v1/snapshots/" + PercentEncode(session.line.snapshot_id) + "/export",
                                   "application/zstd");
  if (!body.ok()) return session.Fail(body.error());
  if (path == "-") {
    if (auto written = Drain(*body, session.io.stdout_fd); !written.ok()) return session.Fail(written.error());
    return 0;
  }
  UniqueFd file(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!file) return session.Fail(SystemError("creating " + path, errno));
  Status written = Drain(*body, file.get());
  if (written.ok() && ::close(file.release()) != 0) written = SystemError("writing " + path, errno);
  if (!written.ok()) {
    ::unlink(path.c_str());
    return session.Fail(written.error());
  }
  return 0;
}

int SnapshotImportCommand(Session& session) {
  const std::string& path = session.line.archive_path;
  UniqueFd opened;
  int fd = session.io.stdin_fd;
  std::optional<uint64_t> size;
  if (path != "-") {
    opened.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!opened) return session.Fail(SystemError("opening " + path, errno));
    struct stat info {};
    if (::fstat(opened.get(), &info) != 0) return session.Fail(SystemError(path, errno));
    if (S_ISREG(info.st_mode)) size = static_cast<uint64_t>(info.st_size);
    fd = opened.get();
  }
  auto snapshot = session.api.Upload(
      session.line.files_only ? "/v1/snapshots/import?memory=false" : "/v1/snapshots/import", "application/zstd", size,
      [&](const BodyChunkSink& sink) { return SendFile(fd, size, path == "-" ? "stdin" : path, sink); },
      HttpMethod::kPost);
  if (!snapshot.ok()) return session.Fail(snapshot.error());
  session.Out(session.line.json ? DumpJson(*snapshot, 2) + "\n" : snapshot->value("id", "") + "\n");
  return 0;
}

int ForkCommand(Session& session) {
  const CommandLine& line = session.line;
  json body = {{"count", line.fork_count}};
  if (line.memory) body["memory"] = true;
  auto forks = session.api.Call(HttpMethod::kPost, SandboxPath(line.sandbox_id) + "/fork", body);
  if (!forks.ok()) return session.Fail(forks.error());
  if (line.json) {
    session.Out(DumpJson(*forks, 2) + "\n");
    return 0;
  }
  std::string ids;
  for (const json& sandbox : forks->value("sandboxes", json::array())) ids += sandbox.value("id", "") + "\n";
  session.Out(ids);
  return 0;
}

}  // namespace bulkhead::cli
