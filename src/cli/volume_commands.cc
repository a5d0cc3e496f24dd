#include "cli/volume_commands.h"

#include <ctime>
#include <vector>

#include "cli/output_format.h"
#include "client/api_client.h"
#include "client/server_url.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

Error BadVolumeFlag(const std::string& text) {
  return MakeError(ErrorCode::kBadRequest, "--volume '" + text + "' is not NAME:/PATH or NAME:/PATH:ro", "usage");
}


}  // namespace

Result<json> ParseVolumeFlag(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos || colon == 0) return BadVolumeFlag(text);
  std::string path = text.substr(colon + 1);
  bool read_only = false;
  if (const size_t mode = path.rfind(':'); mode != std::string::npos) {
    const std::string flag = path.substr(mode + 1);
    if (flag != "ro" && flag != "rw") return BadVolumeFlag(text);
    read_only = flag == "ro";
    path.erase(mode);
  }
  if (path.empty()) return BadVolumeFlag(text);
  return json{{"name", text.substr(0, colon)}, {"path", path}, {"read_only", read_only}};
}

int VolumeCreateCommand(Session& session) {
  const CommandLine& line = session.line;
  json body = {{"name", line.volume_names.at(0)}};
  if (line.volume_size_mb) body["size_mb"] = *line.volume_size_mb;
  if (!line.for_tenant.empty()) body["tenant"] = line.for_tenant;
  auto volume = session.api.Call(HttpMethod::kPost, "/v1/volumes", body);
  if (!volume.ok()) return session.Fail(volume.error());
  session.Out(line.json ? DumpJson(*volume, 2) + "\n" : line.volume_names.at(0) + "\n");
  return 0;
}

int VolumeListCommand(Session& session) {
  auto listing = session.api.Call(HttpMethod::kGet, "/v1/volumes" + session.TenantQuery());
  if (!listing.ok()) return session.Fail(listing.error());
  if (session.line.json) {
    session.Out(DumpJson(*listing, 2) + "\n");
    return 0;
  }
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  const json volumes = listing->value("volumes", json::array());
  // A TENANT column when any volume is a tenant's (the host's key sees every tenant's).
  bool tenants = false;
  for (const json& volume : volumes) tenants = tenants || volume.value("tenant", json()).is_string();
  std::vector<std::vector<std::string>> rows = {{"NAME", "SIZE", "USED", "CREATED", "MOUNTED BY"}};
  if (tenants) rows[0].insert(rows[0].begin() + 1, "TENANT");
  for (const json& volume : volumes) {
    std::string users;
    for (const json& id : volume.value("mounted_by", json::array()))
      users += (users.empty() ? "" : ",") + id.get<std::string>();
    std::vector<std::string> row = {volume.value("name", ""), FormatBytes(volume.value("size_mb", int64_t{0}) << 20),
                                    FormatBytes(volume.value("used_bytes", int64_t{0})),
                                    DescribeCreated(volume.value("created_at", ""), now), users.empty() ? "-" : users};
    const json tenant = volume.value("tenant", json());
    if (tenants) row.insert(row.begin() + 1, tenant.is_string() ? tenant.get<std::string>() : "-");
    rows.push_back(std::move(row));
  }
  session.Out(FormatTable(rows));
  return 0;
}

int VolumeRemoveCommand(Session& session) {
  int exit_code = 0;
  for (const std::string& name : session.line.volume_names) {
    const std::string path = "/v1/volumes/" + PercentEncode(name) + session.TenantQuery();
    auto removed = session.api.Call(HttpMethod::kDelete, path);
    if (!removed.ok()) {
      exit_code = session.Fail(removed.error());
      continue;
    }
    session.Out(name + "\n");
  }
  return exit_code;
}

}  // namespace bulkhead::cli
