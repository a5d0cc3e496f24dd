// The audit trail (issue 24): one record for every call that changed something, and for every
// refused authentication, written before the call is answered: a call the client saw answered
// is on record even if the daemon is SIGKILLed the next instant (the write has reached the
// kernel; a power cut may still lose what the kernel had not flushed).
//
// <state>/audit.log, root-only, one JSON object per line, append-only:
//   {"seq": 7, "time": "2026-12-06T11:00:00.123Z", "key": "admin", "source": "127.0.0.1",
//    "action": "POST /v1/sandboxes/{id}/exec", "target": "sb-…", "outcome": 200,
//    "detail": {"cmd": ["ls"]}, "prev": "<hash of record 6>", "hash": "<this record's>"}
// hash = hex SHA-256 of prev, a newline, and the record without "hash" as compact JSON (keys
// sorted, the form this file stores), so editing, removing or reordering a record breaks the
// chain from there on: Verify finds it. Cutting records off the end leaves a shorter chain
// that holds: what catches that is a head (seq and hash) kept elsewhere, e.g. by the SIEM the
// records are exported to, and handed to Verify.
//
// Erasure (Erase, a tenant's purge) blanks a tenant's records in place: each keeps its seq,
// time, prev and hash and names the erase record that follows ({"erased_by": N}), which holds
// how many it blanked and a digest of their seqs and hashes. Verify checks a blanked record's
// place in the chain (its content is gone) and that its erase record accounts for it, so a
// record blanked any other way is reported. (Whoever can write the file can also forge an
// erase record at its end: the defence is the copy a SIEM took before.)
//
// Retention (KeepFor) removes the oldest records and appends a record of the removal,
// {"action": "audit prune", "detail": {"removed_through": N, "head": <record N's hash>}}, in
// the chain: a log that starts past record 1 verifies only with such a record accounting for
// the start.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/unique_fd.h"

namespace bulkhead::core {

class AuditLog {
 public:
  // What one call did. The log adds seq, time, prev and hash.
  struct Entry {
    std::string key;     // which API key ("admin": the host's; a tenant's key id; "" if none was valid)
    std::string tenant;  // the key's tenant ("" for the host's key or none)
    std::string source;  // the client's address ("unix" on the unix socket)
    std::string action;  // "<METHOD> <route pattern>", e.g. "DELETE /v1/sandboxes/{id}"
    std::string target;  // the object: a sandbox id, a volume or image name ("" if none)
    int outcome = 0;     // the HTTP status answered
    nlohmann::json detail = nlohmann::json::object();  // e.g. {"cmd": [...]}, {"path": "..."}
  };

  struct Filter {
    uint64_t after = 0;  // records with seq > after
    size_t limit = 100;
    std::string action, target, tenant, key;  // exact matches, if not empty
    std::string since, until;    // RFC 3339 times (compared as text: the log writes one form)
  };

  // The chain's start: the "prev" of record 1.
  static constexpr char kGenesis[] = "0000000000000000000000000000000000000000000000000000000000000000";
  static constexpr char kPruneAction[] = "audit prune";
  static constexpr char kEraseAction[] = "audit erase";
  // A detail longer than this as JSON is cut to {"truncated": <its first bytes>}.
  static constexpr size_t kMaxDetailBytes = 8192;

  // Opens (creates, mode 0600) the log at `path` and takes up its chain where it ends.
  static Result<std::unique_ptr<AuditLog>> Open(const std::string& path);

  // Appends the record; answers it as written.
  Result<nlohmann::json> Append(const Entry& entry);
  // Removes the records older than `before` (an RFC 3339 time in the log's form), replacing
  // the file whole, and records that it did; answers how many went.
  Result<size_t> Prune(const std::string& before);
  // Blanks every record of `tenant` (made with its keys, or a call on /v1/tenants/{it}) and
  // records that it did; answers how many went. The tenant's name is in no record it writes.
  Result<size_t> Erase(const std::string& tenant);
  // From now on, once at the call and then hourly, prunes what is older than `keep`.
  void KeepFor(std::chrono::seconds keep);
  // Records in seq order that pass the filter. A page `after` a seq starts where a binary search
  // over the file finds it, not at the file's start.
  Result<std::vector<nlohmann::json>> Read(const Filter& filter) const;

  struct Verdict {
    uint64_t records = 0;  // records that hold, from the first
    std::string head;      // the hash of the last of them (kGenesis if none)
    std::string problem;   // empty if the whole file holds
  };
  // Checks every record of the log at `path`: each line a record, seq 1, 2, 3..., each prev the
  // hash before it, each hash its own. With `expected_head` ("<seq>:<hash>", as `bulkhead audit
  // verify` printed it once), the record with that seq must still carry that hash.
  static Result<Verdict> Verify(const std::string& path, const std::string& expected_head = "");

  // The hash a record (without "hash") gets after `prev`.
  static std::string HashOf(const std::string& prev, const nlohmann::json& record);

 private:
  AuditLog(std::string path, UniqueFd fd, uint64_t seq, std::string head);
  Result<nlohmann::json> AppendLocked(const Entry& entry);
  // Replaces the file whole with `lines` (a crash leaves the old or the new one).
  Status ReplaceLocked(const std::vector<std::string>& lines);

  const std::string path_;
  mutable std::mutex mu_;  // one writer at a time: seq and head follow the file
  UniqueFd fd_;            // O_APPEND
  uint64_t seq_;           // the last record's
  std::string head_;       // the last record's hash
  std::condition_variable_any retention_wake_;
  std::jthread retention_;  // KeepFor's; stopped (and joined) first on destruction
};

}  // namespace bulkhead::core
