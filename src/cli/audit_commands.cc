#include "cli/audit_commands.h"

#include <string>

#include "cli/output_format.h"
#include "client/api_client.h"
#include "core/audit_log.h"

namespace bulkhead::cli {

using nlohmann::json;

int AuditVerifyCommand(Session& session) {
  const std::string path = session.line.state_dir + "/audit.log";
  auto verdict = core::AuditLog::Verify(path, session.line.audit_head);
  if (!verdict.ok()) return session.Fail(verdict.error());
  const std::string head = std::to_string(verdict->records) + ":" + verdict->head;
  if (!verdict->problem.empty()) {
    session.Err("bulkhead: " + path + ": " + verdict->problem + "; the " + std::to_string(verdict->records) +
                " records before it hold (head " + head + ")\n");
    return kExitError;
  }
  session.Out(path + ": " + std::to_string(verdict->records) + " records, chain intact; head " + head + "\n");
  return 0;
}

int AuditExportCommand(Session& session) {
  uint64_t after = session.line.audit_after;
  for (;;) {
    auto page = session.api.Call(HttpMethod::kGet, "/v1/audit?limit=1000&after=" + std::to_string(after));
    if (!page.ok()) return session.Fail(page.error());
    for (const json& record : page->value("records", json::array())) session.Out(DumpJson(record, -1) + "\n");
    const json next = page->value("next", json());
    if (!next.is_number_unsigned()) return 0;
    after = next.get<uint64_t>();
  }
}

}  // namespace bulkhead::cli
