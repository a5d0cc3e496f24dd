#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/audit_log.h"
#include "support/file_contents.h"
#include "support/temp_state_dir.h"

namespace bulkhead::core {
namespace {

using json = nlohmann::json;

AuditLog::Entry Call(const std::string& action, const std::string& target, int outcome = 200) {
  AuditLog::Entry entry;
  entry.key = "admin";
  entry.source = "127.0.0.1";
  entry.action = action;
  entry.target = target;
  entry.outcome = outcome;
  return entry;
}

std::vector<std::string> Lines(const std::string& path) {
  std::istringstream in(testing::FileContents(path));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void WriteLines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path, std::ios::trunc);
  for (const auto& line : lines) out << line << "\n";
}

class AuditLogTest : public ::testing::Test {
 protected:
  // Five records: create, exec (with its argv), delete, a refused key, a volume.
  void SetUp() override {
    auto log = AuditLog::Open(path_);
    ASSERT_TRUE(log.ok()) << log.error().message;
    ASSERT_TRUE((*log)->Append(Call("POST /v1/sandboxes", "sb-1", 201)).ok());
    AuditLog::Entry exec = Call("POST /v1/sandboxes/{id}/exec", "sb-1");
    exec.detail = {{"cmd", {"sh", "-c", "echo \xff not utf-8"}}};
    ASSERT_TRUE((*log)->Append(exec).ok());
    ASSERT_TRUE((*log)->Append(Call("DELETE /v1/sandboxes/{id}", "sb-1", 204)).ok());
    AuditLog::Entry refused = Call("POST /v1/sandboxes", "", 401);
    refused.key = "";
    ASSERT_TRUE((*log)->Append(refused).ok());
    ASSERT_TRUE((*log)->Append(Call("POST /v1/volumes", "data", 201)).ok());
  }

  std::string Problem(const std::string& head = "") {
    auto verdict = AuditLog::Verify(path_, head);
    EXPECT_TRUE(verdict.ok());
    return verdict.ok() ? verdict->problem : "<verify failed>";
  }

  testing::TempStateDir dir_;
  std::string path_ = dir_.path() + "/audit.log";
};

TEST_F(AuditLogTest, AnUntouchedLogVerifiesAndIsReadableByRootAlone) {
  auto verdict = AuditLog::Verify(path_);
  ASSERT_TRUE(verdict.ok());
  EXPECT_EQ(verdict->problem, "");
  EXPECT_EQ(verdict->records, 5u);
  EXPECT_EQ(verdict->head, json::parse(Lines(path_).back())["hash"]);
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(AuditLogTest, EachRecordChainsToTheOneBefore) {
  const auto lines = Lines(path_);
  ASSERT_EQ(lines.size(), 5u);
  std::string prev = AuditLog::kGenesis;
  for (size_t i = 0; i < lines.size(); ++i) {
    json record = json::parse(lines[i]);
    EXPECT_EQ(record["seq"], i + 1);
    EXPECT_EQ(record["prev"], prev);
    const std::string hash = record["hash"];
    record.erase("hash");
    EXPECT_EQ(AuditLog::HashOf(prev, record), hash);
    prev = hash;
  }
  const json exec = json::parse(lines[1]);
  EXPECT_EQ(exec["detail"]["cmd"][2], "echo \xef\xbf\xbd not utf-8");  // kept, the bad byte replaced
  EXPECT_EQ(exec["action"], "POST /v1/sandboxes/{id}/exec");
  EXPECT_EQ(json::parse(lines[3])["outcome"], 401);
}

TEST_F(AuditLogTest, AnEditedRecordIsFound) {
  auto lines = Lines(path_);
  lines[2].replace(lines[2].find("sb-1"), 4, "sb-2");
  WriteLines(path_, lines);
  EXPECT_EQ(Problem(), "record 3 does not match its hash (edited)");
}

TEST_F(AuditLogTest, AnEditedRecordWithItsHashRecomputedBreaksTheNextLink) {
  auto lines = Lines(path_);
  json record = json::parse(lines[1]);
  record["detail"]["cmd"] = {"true"};
  record.erase("hash");
  record["hash"] = AuditLog::HashOf(record["prev"], record);
  lines[1] = record.dump();
  WriteLines(path_, lines);
  EXPECT_EQ(Problem(), "record 3 does not follow record 2's hash (a record before it was removed, edited or moved)");
}

TEST_F(AuditLogTest, ARemovedRecordIsFound) {
  auto lines = Lines(path_);
  lines.erase(lines.begin() + 1);
  WriteLines(path_, lines);
  EXPECT_EQ(Problem(), "line 2 holds record 3 where 2 was due (records removed or reordered)");
}

TEST_F(AuditLogTest, ReorderedRecordsAreFound) {
  auto lines = Lines(path_);
  std::swap(lines[2], lines[3]);
  WriteLines(path_, lines);
  EXPECT_EQ(Problem(), "line 3 holds record 4 where 3 was due (records removed or reordered)");
}

TEST_F(AuditLogTest, RecordsCutOffTheEndAreFoundAgainstAHeadKeptElsewhere) {
  auto verdict = AuditLog::Verify(path_);
  ASSERT_TRUE(verdict.ok());
  const std::string head = std::to_string(verdict->records) + ":" + verdict->head;
  EXPECT_EQ(Problem(head), "");
  auto lines = Lines(path_);
  lines.pop_back();
  WriteLines(path_, lines);
  EXPECT_EQ(Problem(), "");  // what is left holds...
  EXPECT_EQ(Problem(head), "the log ends at record 4, before the head given (5): records were cut off its end");
  EXPECT_FALSE(AuditLog::Verify(path_, "not a head").ok());
}

TEST_F(AuditLogTest, AReopenedLogGoesOnWithTheChain) {
  auto log = AuditLog::Open(path_);
  ASSERT_TRUE(log.ok());
  auto record = (*log)->Append(Call("POST /v1/sandboxes/{id}/pause", "sb-3"));
  ASSERT_TRUE(record.ok());
  EXPECT_EQ((*record)["seq"], 6);
  EXPECT_EQ(Problem(), "");
}

TEST_F(AuditLogTest, ALastLineCutShortStaysReportedAndTheChainGoesOnAfterIt) {
  std::string text = testing::FileContents(path_);
  std::ofstream(path_, std::ios::app) << R"({"seq": 6, "time": "2026-)";
  auto log = AuditLog::Open(path_);
  ASSERT_TRUE(log.ok()) << log.error().message;
  auto record = (*log)->Append(Call("POST /v1/volumes", "more"));
  ASSERT_TRUE(record.ok());
  EXPECT_EQ((*record)["seq"], 6);
  EXPECT_EQ(Problem(), "line 6 is not an audit record (cut short or edited)");
  EXPECT_EQ(Lines(path_).size(), 7u);
}

TEST_F(AuditLogTest, ReadFiltersAndPages) {
  auto log = AuditLog::Open(path_);
  ASSERT_TRUE(log.ok());
  AuditLog::Filter filter;
  filter.target = "sb-1";
  auto records = (*log)->Read(filter);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 3u);
  EXPECT_EQ((*records)[2]["action"], "DELETE /v1/sandboxes/{id}");

  AuditLog::Filter page;
  page.limit = 2;
  page.after = 2;
  records = (*log)->Read(page);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0]["seq"], 3);
  EXPECT_EQ((*records)[1]["seq"], 4);

  AuditLog::Filter by_action;
  by_action.action = "POST /v1/volumes";
  records = (*log)->Read(by_action);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0]["target"], "data");

  AuditLog::Filter future;
  future.since = "2999-01-01T00:00:00Z";
  records = (*log)->Read(future);
  ASSERT_TRUE(records.ok());
  EXPECT_TRUE(records->empty());
}

TEST_F(AuditLogTest, ALongDetailIsCutToABoundedOne) {
  auto log = AuditLog::Open(path_);
  ASSERT_TRUE(log.ok());
  AuditLog::Entry entry = Call("POST /v1/sandboxes/{id}/exec", "sb-1");
  entry.detail = {{"cmd", {"echo", std::string(100000, 'x')}}};
  auto record = (*log)->Append(entry);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ((*record)["detail"]["truncated"].get<std::string>().size(), AuditLog::kMaxDetailBytes);
  EXPECT_EQ(Problem(), "");
}

TEST_F(AuditLogTest, ARemovedStartIsFoundUnlessAPruneRecordAccountsForIt) {
  auto lines = Lines(path_);
  lines.erase(lines.begin(), lines.begin() + 2);
  WriteLines(path_, lines);
  EXPECT_EQ(Problem(), "the log starts after record 2 and no prune record of the daemon's accounts for the ones before (removed)");
}

TEST(AuditLogPrune, RemovesTheOldestAndRecordsThatItDidInTheChain) {
  testing::TempStateDir dir;
  const std::string path = dir.path() + "/audit.log";
  auto log = AuditLog::Open(path);
  ASSERT_TRUE(log.ok());
  ASSERT_TRUE((*log)->Append(Call("POST /v1/volumes", "old-1")).ok());
  ASSERT_TRUE((*log)->Append(Call("POST /v1/volumes", "old-2")).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto third = (*log)->Append(Call("POST /v1/volumes", "new-3"));
  ASSERT_TRUE(third.ok());
  ASSERT_TRUE((*log)->Append(Call("POST /v1/volumes", "new-4")).ok());

  auto removed = (*log)->Prune((*third)["time"]);
  ASSERT_TRUE(removed.ok()) << removed.error().message;
  EXPECT_EQ(*removed, 2u);
  const auto lines = Lines(path);
  ASSERT_EQ(lines.size(), 3u);  // records 3 and 4, then the prune's
  EXPECT_EQ(json::parse(lines[0])["target"], "new-3");
  const json prune = json::parse(lines[2]);
  EXPECT_EQ(prune["seq"], 5);
  EXPECT_EQ(prune["action"], AuditLog::kPruneAction);
  EXPECT_EQ(prune["detail"]["removed_through"], 2);
  EXPECT_EQ(prune["detail"]["head"], json::parse(lines[0])["prev"]);
  auto verdict = AuditLog::Verify(path);
  ASSERT_TRUE(verdict.ok());
  EXPECT_EQ(verdict->problem, "");
  EXPECT_EQ(verdict->records, 5u);

  // Nothing older: nothing goes, nothing is recorded. The log goes on after a prune.
  removed = (*log)->Prune((*third)["time"]);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 0u);
  ASSERT_TRUE((*log)->Append(Call("POST /v1/volumes", "new-6")).ok());
  EXPECT_EQ(Lines(path).size(), 4u);
  EXPECT_EQ(AuditLog::Verify(path)->problem, "");

  // Everything older: the prune record alone remains, and holds.
  removed = (*log)->Prune("2999-01-01T00:00:00.000Z");
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 4u);
  ASSERT_EQ(Lines(path).size(), 1u);
  verdict = AuditLog::Verify(path);
  ASSERT_TRUE(verdict.ok());
  EXPECT_EQ(verdict->problem, "");
  EXPECT_EQ(verdict->records, 7u);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace bulkhead::core

namespace bulkhead::core {
namespace {

// A log with two tenants' calls and the host's: team-a's records, and the host's on team-a.
class AuditLogEraseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto log = AuditLog::Open(path_);
    ASSERT_TRUE(log.ok());
    log_ = std::move(*log);
    ASSERT_TRUE(log_->Append(Call("PATCH /v1/tenants/{tenant}", "team-a")).ok());         // 1: on team-a
    ASSERT_TRUE(log_->Append(Tenants("team-a", "POST /v1/sandboxes/{id}/exec")).ok());     // 2
    ASSERT_TRUE(log_->Append(Tenants("team-b", "POST /v1/sandboxes/{id}/exec")).ok());     // 3
    ASSERT_TRUE(log_->Append(Tenants("team-a", "DELETE /v1/sandboxes/{id}")).ok());         // 4
    ASSERT_TRUE(log_->Append(Call("POST /v1/volumes", "team-a", 201)).ok());                // 5: a volume so named
  }

  static AuditLog::Entry Tenants(const std::string& tenant, const std::string& action) {
    AuditLog::Entry entry = Call(action, "sb-" + tenant);
    entry.key = "key-of-" + tenant;
    entry.tenant = tenant;
    entry.detail = {{"cmd", {"cat", "/home/" + tenant + "/secret"}}};
    return entry;
  }

  std::string Problem() { return AuditLog::Verify(path_)->problem; }

  testing::TempStateDir dir_;
  std::string path_ = dir_.path() + "/audit.log";
  std::unique_ptr<AuditLog> log_;
};

TEST_F(AuditLogEraseTest, ATenantsRecordsAreBlankedInTheirPlaceAndTheChainHolds) {
  auto erased = log_->Erase("team-a");
  ASSERT_TRUE(erased.ok()) << erased.error().message;
  EXPECT_EQ(*erased, 3u);
  const auto lines = Lines(path_);
  EXPECT_EQ(json::parse(lines[4])["target"], "team-a");  // the host's volume of that name is no call of the tenant's
  EXPECT_EQ(lines[5].find("team-a"), std::string::npos) << lines[5];  // the erase record names no tenant
  ASSERT_EQ(lines.size(), 6u);
  for (int i : {0, 1, 3}) {
    const json blank = json::parse(lines[i]);
    EXPECT_EQ(blank.size(), 5u) << blank;
    EXPECT_EQ(blank["erased_by"], 6) << blank;
  }
  EXPECT_EQ(json::parse(lines[2])["tenant"], "team-b");
  const json erase = json::parse(lines[5]);
  EXPECT_EQ(erase["action"], AuditLog::kEraseAction);
  EXPECT_EQ(erase["detail"]["erased"], 3);
  auto verdict = AuditLog::Verify(path_);
  ASSERT_TRUE(verdict.ok());
  EXPECT_EQ(verdict->problem, "");
  EXPECT_EQ(verdict->records, 6u);
  // Nothing left of it: nothing more goes. The log goes on, and a second erasure holds too.
  EXPECT_EQ(*log_->Erase("team-a"), 0u);
  ASSERT_TRUE(log_->Append(Call("POST /v1/volumes", "more", 201)).ok());
  EXPECT_EQ(*log_->Erase("team-b"), 1u);
  EXPECT_EQ(Problem(), "");
  // Reads skip blanked records under any filter.
  AuditLog::Filter filter;
  filter.action = "POST /v1/sandboxes/{id}/exec";
  EXPECT_TRUE(log_->Read(filter)->empty());
}

TEST_F(AuditLogEraseTest, ARecordBlankedWithoutAnEraseRecordIsFound) {
  auto lines = Lines(path_);
  json blank = json::parse(lines[1]);
  blank = {{"seq", blank["seq"]}, {"time", blank["time"]}, {"prev", blank["prev"]}, {"hash", blank["hash"]},
           {"erased_by", 9}};
  lines[1] = blank.dump();
  WriteLines(path_, lines);
  EXPECT_EQ(Problem(), "records were blanked with no erase record accounting for them (the first names record 9)");
}

TEST_F(AuditLogEraseTest, AnEraseRecordMustAccountForExactlyTheRecordsItBlanked) {
  ASSERT_TRUE(log_->Erase("team-a").ok());
  // One more record blanked, made to name the same erase record.
  auto lines = Lines(path_);
  json other = json::parse(lines[2]);
  lines[2] = json{{"seq", other["seq"]}, {"time", other["time"]}, {"prev", other["prev"]}, {"hash", other["hash"]},
                  {"erased_by", 6}}.dump();
  WriteLines(path_, lines);
  EXPECT_EQ(Problem(), "record 6 (an erasure) does not account for the records it blanked");
  // A blank that keeps some of the record is no blank.
  lines = Lines(path_);
  json kept = json::parse(lines[4]);
  kept["erased_by"] = 6;
  lines[4] = kept.dump();
  WriteLines(path_, lines);
  EXPECT_EQ(Problem(), "record 5 is blanked in a form no erasure writes (edited)");
}

}  // namespace
}  // namespace bulkhead::core

namespace bulkhead::core {
namespace {

TEST(AuditLogRead, APageAfterASeqIsFoundWithoutReadingFromTheStart) {
  testing::TempStateDir dir;
  const std::string path = dir.path() + "/audit.log";
  auto log = AuditLog::Open(path);
  ASSERT_TRUE(log.ok());
  for (int i = 1; i <= 3000; ++i) {
    AuditLog::Entry entry = Call("POST /v1/sandboxes/{id}/exec", "sb-" + std::to_string(i));
    entry.detail = {{"cmd", {"echo", std::string(static_cast<size_t>(i % 97), 'x')}}};  // lines of many lengths
    ASSERT_TRUE((*log)->Append(entry).ok());
  }
  auto seqs = [&](uint64_t after, size_t limit) {
    AuditLog::Filter filter;
    filter.after = after;
    filter.limit = limit;
    std::vector<uint64_t> out;
    const auto records = (*log)->Read(filter);
    EXPECT_TRUE(records.ok());
    for (const json& record : *records) out.push_back(record["seq"].get<uint64_t>());
    return out;
  };
  for (uint64_t after : {1u, 2u, 777u, 1500u, 2996u})
    EXPECT_EQ(seqs(after, 3), (std::vector<uint64_t>{after + 1, after + 2, after + 3})) << after;
  EXPECT_EQ(seqs(2999, 3), std::vector<uint64_t>{3000});
  EXPECT_TRUE(seqs(3000, 5).empty());
  EXPECT_TRUE(seqs(123456, 5).empty());
  EXPECT_EQ(seqs(0, 2), (std::vector<uint64_t>{1, 2}));
  // Lines that are not records (an edit, a cut) are stepped over.
  auto lines = Lines(path);
  lines[1200] = "not a record";
  lines[1201] = "";
  WriteLines(path, lines);
  EXPECT_EQ(seqs(1199, 2), (std::vector<uint64_t>{1200, 1203}));  // (1201 and 1202 were those lines)
  EXPECT_EQ(seqs(1200, 2), (std::vector<uint64_t>{1203, 1204}));
  EXPECT_EQ(seqs(1500, 1), std::vector<uint64_t>{1501});
}

}  // namespace
}  // namespace bulkhead::core
