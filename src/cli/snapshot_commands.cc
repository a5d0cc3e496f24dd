#include "cli/snapshot_commands.h"

#include <ctime>
#include <vector>

#include "cli/output_format.h"
#include "client/api_client.h"
#include "client/server_url.h"

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
