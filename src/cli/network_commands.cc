#include "cli/network_commands.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/output_format.h"
#include "client/api_client.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

std::string Text(const json& entry, const char* field) {
  auto it = entry.find(field);
  if (it == entry.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

void PrintPolicy(Session& session, const json& sandbox) {
  const json network = sandbox.value("network", json::object());
  std::string line = "mode: " + network.value("mode", std::string("none")) + "\n";
  for (const char* list : {"allow", "deny"}) {
    for (const auto& entry : network.value(list, json::array())) {
      if (entry.is_string()) line += std::string(list) + ": " + entry.get<std::string>() + "\n";
    }
  }
  session.Out(line);
}

}  // namespace

int NetworkCommand(Session& session) {
  const CommandLine& line = session.line;
  if (!line.network_mode) {
    if (!line.sandbox.allow.empty() || !line.sandbox.deny.empty()) {
      return session.UsageError("--allow and --deny need a MODE (allowlist or open)");
    }
    auto sandbox = session.api.Call(HttpMethod::kGet, SandboxPath(line.sandbox_id));
    if (!sandbox.ok()) return session.Fail(sandbox.error());
    PrintPolicy(session, *sandbox);
    return 0;
  }
  const json body = {{"mode", *line.network_mode}, {"allow", line.sandbox.allow}, {"deny", line.sandbox.deny}};
  auto sandbox = session.api.Call(HttpMethod::kPut, SandboxPath(line.sandbox_id) + "/network", body);
  if (!sandbox.ok()) return session.Fail(sandbox.error());
  PrintPolicy(session, *sandbox);
  return 0;
}

int EgressCommand(Session& session) {
  const CommandLine& line = session.line;
  std::string target = SandboxPath(line.sandbox_id) + "/egress";
  if (line.egress_limit) target += "?limit=" + std::to_string(*line.egress_limit);
  auto log = session.api.Call(HttpMethod::kGet, target);
  if (!log.ok()) return session.Fail(log.error());
  if (line.json) {
    session.Out(DumpJson(*log, 2) + "\n");
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"TIME", "PROTO", "VERDICT", "DESTINATION", "OUT", "IN", "NOTE"}};
  for (const json& entry : log->value("entries", json::array())) {
    std::string destination = Text(entry, "name");
    const std::string address = Text(entry, "address");
    if (destination.empty()) {
      destination = address;
    } else if (!address.empty()) {
      destination += " (" + address + ")";
    }
    if (Text(entry, "protocol") == "dns") {
      destination += " " + Text(entry, "query_type");
    } else {
      destination += ":" + Text(entry, "port");
    }
    std::string note = Text(entry, "reason");
    if (entry.value("open", false)) note = note.empty() ? "open" : "open; " + note;
    rows.push_back({Text(entry, "time"), Text(entry, "protocol"), Text(entry, "verdict"), destination,
                    Text(entry, "bytes_out"), Text(entry, "bytes_in"), note});
  }
  session.Out(FormatTable(rows));
  return 0;
}

}  // namespace bulkhead::cli
