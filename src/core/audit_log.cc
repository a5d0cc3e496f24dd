#include "core/audit_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <map>

#include <spdlog/spdlog.h>

#include "common/digest.h"
#include "common/time_format.h"

namespace bulkhead::core {
namespace {

using json = nlohmann::json;

// Records are written and hashed in one form: compact, keys sorted (nlohmann's objects are),
// text that is not UTF-8 replaced rather than refused (an argv may hold any bytes).
std::string Compact(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// A line of the log as a record; nullopt if it is not one.
std::optional<json> ParseRecord(const std::string& line) {
  json record = json::parse(line, nullptr, false);
  if (!record.is_object() || !record.contains("seq") || !record["seq"].is_number_unsigned() ||
      !record.contains("hash") || !record["hash"].is_string() || !record.contains("prev") || !record["prev"].is_string())
    return std::nullopt;
  return record;
}

// The last record of the file at fd, read from its end (a record is a few KiB at most).
std::optional<json> LastRecord(int fd, off_t size) {
  constexpr off_t kWindow = 64 * 1024;
  const off_t start = size > kWindow ? size - kWindow : 0;
  std::string tail(static_cast<size_t>(size - start), '\0');
  if (::pread(fd, tail.data(), tail.size(), start) != static_cast<ssize_t>(tail.size())) return std::nullopt;
  size_t end = tail.size();
  while (end > 0) {
    const size_t begin = tail.rfind('\n', end - 1);
    const size_t from = begin == std::string::npos ? 0 : begin + 1;
    if (auto record = ParseRecord(tail.substr(from, end - from))) return record;
    if (begin == std::string::npos) break;
    end = begin;
  }
  return std::nullopt;
}

// Where to start reading for the records with seq > `after`: the start of a line at or before
// the first such record. The lines are in seq order, so a binary search over byte offsets finds
// it in a few reads however long the log is (a page of a SIEM's export does not scan what it
// has read); lines that are not records are stepped over, and the last stretch is read through.
std::streamoff StartAfter(std::ifstream& in, uint64_t after) {
  constexpr std::streamoff kLinear = 64 * 1024;
  in.seekg(0, std::ios::end);
  std::streamoff lo = 0, hi = in.tellg();  // a line starting before lo holds seq <= after; none from hi does
  std::string line;
  while (hi - lo > kLinear) {
    const std::streamoff mid = lo + (hi - lo) / 2;
    in.clear();
    in.seekg(mid);
    std::getline(in, line);  // the rest of the line mid falls in
    std::streamoff start = in.tellg();
    std::optional<json> record;
    while (in && start < hi && std::getline(in, line) && !(record = ParseRecord(line))) start = in.tellg();
    if (!record || start >= hi) {
      hi = mid;
    } else if ((*record)["seq"].get<uint64_t>() <= after) {
      const std::streamoff end = in.tellg();  // (-1 past a last line without its newline)
      lo = end < 0 ? hi : end;
    } else {
      hi = start;
    }
  }
  in.clear();
  return lo;
}

// A record the log makes of its own doing (a prune, an erasure).
AuditLog::Entry DaemonEntry(const char* action, json detail) {
  AuditLog::Entry entry;
  entry.key = "daemon";
  entry.source = "daemon";
  entry.action = action;
  entry.outcome = 200;
  entry.detail = std::move(detail);
  return entry;
}

Status WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return SystemError("write the audit log", errno);
    done += static_cast<size_t>(n);
  }
  return {};
}

}  // namespace

AuditLog::AuditLog(std::string path, UniqueFd fd, uint64_t seq, std::string head)
    : path_(std::move(path)), fd_(std::move(fd)), seq_(seq), head_(std::move(head)) {}

std::string AuditLog::HashOf(const std::string& prev, const json& record) {
  return HexEncode(Sha256(prev + "\n" + Compact(record)));
}

Result<std::unique_ptr<AuditLog>> AuditLog::Open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return SystemError("open " + path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return SystemError("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return MakeError(ErrorCode::kInternal, path + " is not a regular file");
  if ((st.st_mode & 077) != 0 && ::fchmod(fd.get(), 0600) != 0) return SystemError("chmod " + path, errno);
  uint64_t seq = 0;
  std::string head = kGenesis;
  if (st.st_size > 0) {
    char last = '\n';
    if (::pread(fd.get(), &last, 1, st.st_size - 1) != 1) return SystemError("read " + path, errno);
    if (last != '\n') {
      // A record cut short (a power cut mid-write, or an edit): it stays, for Verify to report,
      // and the next record starts on a line of its own.
      spdlog::warn("{}: its last line is cut short; `bulkhead audit verify` will report it", path);
      BH_TRY(WriteAll(fd.get(), "\n"));
    }
    auto record = LastRecord(fd.get(), st.st_size);
    if (!record) return MakeError(ErrorCode::kInternal, path + ": no audit record found at its end");
    seq = (*record)["seq"].get<uint64_t>();
    head = (*record)["hash"].get<std::string>();
  }
  return std::unique_ptr<AuditLog>(new AuditLog(path, std::move(fd), seq, std::move(head)));
}

Result<json> AuditLog::Append(const Entry& entry) {
  std::lock_guard lock(mu_);
  return AppendLocked(entry);
}

Result<json> AuditLog::AppendLocked(const Entry& entry) {
  json record = {{"key", entry.key}, {"source", entry.source}, {"action", entry.action}, {"target", entry.target},
                 {"outcome", entry.outcome}};
  if (!entry.tenant.empty()) record["tenant"] = entry.tenant;
  if (!entry.detail.empty()) {
    const std::string detail = Compact(entry.detail);
    record["detail"] = detail.size() <= kMaxDetailBytes ? entry.detail : json{{"truncated", detail.substr(0, kMaxDetailBytes)}};
  }
  // (Taken under the lock: the file's times never go backwards, which Prune relies on.)
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  record["time"] = Rfc3339Millis(now);
  record["seq"] = seq_ + 1;
  record["prev"] = head_;
  const std::string hash = HashOf(head_, record);
  record["hash"] = hash;
  BH_TRY(WriteAll(fd_.get(), Compact(record) + "\n"));
  seq_++;
  head_ = hash;
  return record;
}

Result<size_t> AuditLog::Prune(const std::string& before) {
  std::lock_guard lock(mu_);
  std::ifstream in(path_);
  if (!in) return SystemError("open " + path_, errno);
  std::vector<std::string> kept;
  uint64_t removed_through = 0;
  std::string removed_head;
  size_t removed = 0;
  for (std::string line; std::getline(in, line);) {
    std::optional<json> record = kept.empty() ? ParseRecord(line) : std::nullopt;
    if (record && record->value("time", "") < before) {
      removed_through = (*record)["seq"].get<uint64_t>();
      removed_head = (*record)["hash"].get<std::string>();
      removed++;
    } else {
      kept.push_back(std::move(line));
    }
  }
  if (removed == 0) return size_t{0};
  BH_TRY(ReplaceLocked(kept));
  // On record, in the chain: what went, and the hash the first record kept follows.
  BH_TRY(AppendLocked(DaemonEntry(
      kPruneAction, {{"removed_through", removed_through}, {"head", removed_head}, {"before", before}})));
  return removed;
}

Status AuditLog::ReplaceLocked(const std::vector<std::string>& lines) {
  const std::string next_path = path_ + ".next";
  UniqueFd next(::open(next_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!next) return SystemError("open " + next_path, errno);
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  BH_TRY(WriteAll(next.get(), text));
  if (::fsync(next.get()) != 0) return SystemError("fsync " + next_path, errno);
  if (::rename(next_path.c_str(), path_.c_str()) != 0) return SystemError("rename " + next_path, errno);
  UniqueFd reopened(::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW));
  if (!reopened) return SystemError("open " + path_, errno);
  fd_ = std::move(reopened);
  return {};
}

Result<size_t> AuditLog::Erase(const std::string& tenant) {
  if (tenant.empty()) return MakeError(ErrorCode::kInvalid, "erase names a tenant");
  std::lock_guard lock(mu_);
  std::ifstream in(path_);
  if (!in) return SystemError("open " + path_, errno);
  const uint64_t by = seq_ + 1;  // the erase record's seq
  std::vector<std::string> lines;
  std::string erased_text;  // "seq:hash\n" of each record blanked, for the digest
  size_t erased = 0;
  for (std::string line; std::getline(in, line);) {
    std::optional<json> record = ParseRecord(line);
    // Its calls, and the calls on the tenant itself (a volume or sandbox may share its name).
    const bool on_tenant = record && record->value("target", "") == tenant &&
                           record->value("action", "").find("/v1/tenants") != std::string::npos;
    if (record && !record->contains("erased_by") && (record->value("tenant", "") == tenant || on_tenant)) {
      const uint64_t seq = (*record)["seq"].get<uint64_t>();
      const std::string hash = (*record)["hash"].get<std::string>();
      line = Compact({{"seq", seq}, {"time", record->value("time", "")}, {"prev", (*record)["prev"]},
                      {"hash", hash}, {"erased_by", by}});
      erased_text += std::to_string(seq) + ":" + hash + "\n";
      erased++;
    }
    lines.push_back(std::move(line));
  }
  if (erased == 0) return size_t{0};
  BH_TRY(ReplaceLocked(lines));
  BH_TRY(AppendLocked(DaemonEntry(kEraseAction, {{"erased", erased}, {"digest", HexEncode(Sha256(erased_text))}})));
  return erased;
}

void AuditLog::KeepFor(std::chrono::seconds keep) {
  retention_ = std::jthread([this, keep](std::stop_token stop) {
    for (;;) {
      const int64_t cutoff_ms = UnixMillis() - std::chrono::duration_cast<std::chrono::milliseconds>(keep).count();
      auto pruned = Prune(Rfc3339Millis(cutoff_ms));
      if (!pruned.ok()) spdlog::error("audit log retention: {}", pruned.error().message);
      else if (*pruned > 0) spdlog::info("audit log: {} records older than {} s removed", *pruned, keep.count());
      std::mutex idle;
      std::unique_lock lock(idle);
      retention_wake_.wait_for(lock, stop, std::chrono::hours(1), [] { return false; });
      if (stop.stop_requested()) return;
    }
  });
}

Result<std::vector<json>> AuditLog::Read(const Filter& filter) const {
  std::ifstream in(path_);
  if (!in) return SystemError("open " + path_, errno);
  if (filter.after > 0) in.seekg(StartAfter(in, filter.after));
  std::vector<json> records;
  for (std::string line; records.size() < filter.limit && std::getline(in, line);) {
    auto record = ParseRecord(line);
    if (!record || (*record)["seq"].get<uint64_t>() <= filter.after) continue;
    const std::string time = record->value("time", "");
    if (!filter.action.empty() && record->value("action", "") != filter.action) continue;
    if (!filter.target.empty() && record->value("target", "") != filter.target) continue;
    if (!filter.tenant.empty() && record->value("tenant", "") != filter.tenant) continue;
    if (!filter.key.empty() && record->value("key", "") != filter.key) continue;
    if (!filter.since.empty() && time < filter.since) continue;
    if (!filter.until.empty() && time >= filter.until) continue;
    records.push_back(std::move(*record));
  }
  return records;
}

Result<AuditLog::Verdict> AuditLog::Verify(const std::string& path, const std::string& expected_head) {
  std::ifstream in(path);
  if (!in) return SystemError("open " + path, errno);
  uint64_t head_seq = 0;
  std::string head_hash;
  if (!expected_head.empty()) {
    const size_t colon = expected_head.find(':');
    try {
      head_seq = colon == std::string::npos ? 0 : std::stoull(expected_head.substr(0, colon));
    } catch (const std::exception&) {
      head_seq = 0;
    }
    if (head_seq == 0) return MakeError(ErrorCode::kInvalid, "a head is <seq>:<hash>, as verify printed it");
    head_hash = expected_head.substr(colon + 1);
  }
  Verdict verdict;
  verdict.head = kGenesis;
  uint64_t line_number = 0;
  // A log that starts past record 1 must hold the prune record that removed what came before.
  std::optional<std::pair<uint64_t, std::string>> start_unaccounted;
  uint64_t pruned_through = 0;  // (the records before the log's first)
  // Blanked records by the seq of the erase record they name: how many, and "seq:hash\n" each.
  std::map<uint64_t, std::pair<uint64_t, std::string>> erased;
  for (std::string line; std::getline(in, line);) {
    line_number++;
    auto record = ParseRecord(line);
    if (record && line_number == 1 && (*record)["seq"].get<uint64_t>() > 1) {
      verdict.records = (*record)["seq"].get<uint64_t>() - 1;
      verdict.head = (*record)["prev"].get<std::string>();
      start_unaccounted.emplace(verdict.records, verdict.head);
      pruned_through = verdict.records;
    }
    const uint64_t due = verdict.records + 1;
    if (!record) {
      verdict.problem = "line " + std::to_string(line_number) + " is not an audit record (cut short or edited)";
      return verdict;
    }
    const uint64_t seq = (*record)["seq"].get<uint64_t>();
    if (seq != due) {
      verdict.problem = "line " + std::to_string(line_number) + " holds record " + std::to_string(seq) + " where " +
                        std::to_string(due) + " was due (records removed or reordered)";
      return verdict;
    }
    const std::string hash = (*record)["hash"].get<std::string>();
    if ((*record)["prev"].get<std::string>() != verdict.head) {
      verdict.problem = "record " + std::to_string(seq) + " does not follow record " + std::to_string(seq - 1) +
                        "'s hash (a record before it was removed, edited or moved)";
      return verdict;
    }
    if (record->contains("erased_by")) {
      // Blanked: its place in the chain holds; its erase record, further on, must account for it.
      const json& by = (*record)["erased_by"];
      if (!by.is_number_unsigned() || by.get<uint64_t>() <= seq || record->size() != 5) {
        verdict.problem = "record " + std::to_string(seq) + " is blanked in a form no erasure writes (edited)";
        return verdict;
      }
      auto& group = erased[by.get<uint64_t>()];
      group.first++;
      group.second += std::to_string(seq) + ":" + hash + "\n";
      if (seq == head_seq && hash != head_hash) {
        verdict.problem = "record " + std::to_string(seq) + " is not the one the head given names (replaced)";
        return verdict;
      }
      verdict.records = seq;
      verdict.head = hash;
      continue;
    }
    record->erase("hash");
    if (HashOf(verdict.head, *record) != hash) {
      verdict.problem = "record " + std::to_string(seq) + " does not match its hash (edited)";
      return verdict;
    }
    if (seq == head_seq && hash != head_hash) {
      verdict.problem = "record " + std::to_string(seq) + " is not the one the head given names (replaced)";
      return verdict;
    }
    verdict.records = seq;
    verdict.head = hash;
    if (record->value("action", "") == kEraseAction) {
      // It accounts for the records that name it, all of them (less those pruned since).
      const auto group = erased.extract(seq);
      const uint64_t count = group ? group.mapped().first : 0;
      const json detail = record->value("detail", json::object());
      const bool pruned_some = pruned_through > 0 && detail.value("erased", uint64_t{0}) > count;
      if (!pruned_some && (detail.value("erased", uint64_t{0}) != count ||
                           detail.value("digest", "") != HexEncode(Sha256(group ? group.mapped().second : "")))) {
        verdict.problem = "record " + std::to_string(seq) + " (an erasure) does not account for the records it blanked";
        return verdict;
      }
    }
    if (start_unaccounted && record->value("action", "") == kPruneAction && record->contains("detail") &&
        (*record)["detail"].value("removed_through", uint64_t{0}) == start_unaccounted->first &&
        (*record)["detail"].value("head", "") == start_unaccounted->second)
      start_unaccounted.reset();
  }
  if (!erased.empty()) {
    verdict.problem = "records were blanked with no erase record accounting for them (the first names record " +
                      std::to_string(erased.begin()->first) + ")";
    return verdict;
  }
  if (start_unaccounted) {
    verdict.problem = "the log starts after record " + std::to_string(start_unaccounted->first) +
                      " and no prune record of the daemon's accounts for the ones before (removed)";
    verdict.records = 0;
    verdict.head = kGenesis;
    return verdict;
  }
  if (head_seq > verdict.records) {
    verdict.problem = "the log ends at record " + std::to_string(verdict.records) + ", before the head given (" +
                      std::to_string(head_seq) + "): records were cut off its end";
  }
  return verdict;
}

}  // namespace bulkhead::core
