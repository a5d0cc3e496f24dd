#include "e2b/envd_fs.h"

#include <charconv>

#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "common/bounded_json.h"
#include "service/file_output.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::e2b {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// envd runs as root: every file operation runs so, and what one creates is then given to the
// request's user (see SandboxFiles::Start). /etc/passwd and /etc/group are read so too.
constexpr std::string_view kRoot = "0";
constexpr size_t kMaxAccountsFile = 4 * 1024 * 1024;

// A whole (small) file of the sandbox, read as root. "" if it does not exist.
asio::awaitable<Result<std::string>> ReadSandboxFile(core::InitConnection connection, const std::string& path) {
  const json op = {{"op", "read"}, {"path", path}};
  Result<std::unique_ptr<core::FileOperation>> started =
      co_await core::FileOperation::Start(std::move(connection), op, std::string(kRoot), false);
  if (!started.ok()) co_return started.error();
  Result<std::string> output = co_await (*started)->Finish(kMaxAccountsFile + api::kMaxFirstLineBytes);
  if (!output.ok()) {
    if (output.error().detail_code == "not_found") co_return std::string();
    co_return output.error();
  }
  // {"size": N}\n, then the bytes.
  const size_t newline = output->find('\n');
  if (newline == std::string::npos) co_return api::FileWorkerBroken("did not announce the file's size");
  co_return output->substr(newline + 1);
}

std::optional<uint32_t> Number(std::string_view text) {
  uint32_t number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return number;
}

// The uid a user spec ("name", "1000", "1000:1000") names, if numeric.
std::optional<uint32_t> NumericUid(std::string_view spec) { return Number(spec.substr(0, spec.find(':'))); }

// The gid of a numeric spec "1000:1000", if it has one.
std::optional<uint32_t> NumericGid(std::string_view spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  return Number(spec.substr(colon + 1));
}

}  // namespace

asio::awaitable<Result<SandboxFiles>> SandboxFiles::Open(core::SandboxManager& manager, const std::string& sandbox_id,
                                                         const std::optional<std::string>& user) {
  auto executor = co_await asio::this_coro::executor;
  Result<core::InitConnection> connection = co_await manager.ConnectInit(executor, sandbox_id);
  if (!connection.ok()) co_return connection.error();
  SandboxFiles files;
  files.manager_ = &manager;
  files.sandbox_id_ = sandbox_id;
  files.user_ = user.value_or(connection->spec.user);
  Result<std::string> passwd = co_await ReadSandboxFile(std::move(connection.value()), "/etc/passwd");
  if (!passwd.ok()) co_return passwd.error();
  files.accounts_.users = ParsePasswd(*passwd);

  const Account* account = files.accounts_.FindName(files.user_);
  if (user) {
    // envd looks a requested user up by name only (Go's user.Lookup).
    if (!account) co_return MakeError(ErrorCode::kUnauthorized, fmt::format("invalid username: '{}'", *user));
  } else if (!account) {
    // The sandbox's own user may be numeric ("1000", "1000:1000").
    if (std::optional<uint32_t> uid = NumericUid(files.user_)) account = files.accounts_.FindUid(*uid);
  }
  if (account) {
    files.home_ = CleanAbsolutePath(account->home);
    files.owner_ = FileOwner{account->uid, account->gid};
  } else if (std::optional<uint32_t> uid = NumericUid(files.user_)) {
    files.home_ = *uid == 0 ? "/root" : "/";
    files.owner_ = FileOwner{*uid, NumericGid(files.user_).value_or(*uid)};
  } else if (files.user_ == "root") {
    files.home_ = "/root";
    files.owner_ = FileOwner{0, 0};
  } else {
    files.home_ = "/";  // a name the sandbox does not know: init refuses it
  }
  co_return files;
}

asio::awaitable<Result<std::unique_ptr<core::FileOperation>>> SandboxFiles::Start(const json& op, bool with_input) {
  auto executor = co_await asio::this_coro::executor;
  Result<core::InitConnection> connection = co_await manager_->ConnectInit(executor, sandbox_id_);
  if (!connection.ok()) co_return connection.error();
  // Entries as envd describes them: a symlink by what it leads to (EntryInfoJson).
  json with_details = op;
  with_details["resolve_links"] = true;
  with_details["xattr_prefix"] = kMetadataXattrPrefix;
  // As envd: the sandbox is the boundary, not the user inside it. The operation runs as root,
  // and the file and directories it creates are the user's.
  if (!owner_) co_return co_await core::FileOperation::Start(std::move(connection.value()), with_details, user_, with_input);
  const std::string kind = op.value("op", "");
  if (kind == "write" || kind == "mkdir") with_details["owner"] = {{"uid", owner_->uid}, {"gid", owner_->gid}};
  co_return co_await core::FileOperation::Start(std::move(connection.value()), with_details, std::string(kRoot),
                                                with_input);
}

asio::awaitable<Result<json>> SandboxFiles::Run(const json& op, size_t max_answer) {
  Result<std::unique_ptr<core::FileOperation>> started = co_await Start(op, false);
  if (!started.ok()) co_return started.error();
  Result<std::string> output = co_await (*started)->Finish(max_answer);
  if (!output.ok()) co_return output.error();
  size_t end = output->size();
  while (end > 0 && ((*output)[end - 1] == '\n' || (*output)[end - 1] == ' ')) --end;
  if (end == 0) co_return json(nullptr);
  json answer = ParseBoundedJson(std::string_view(*output).substr(0, end));
  if (!answer.is_object()) co_return api::FileWorkerBroken("answered malformed JSON");
  co_return answer;
}

asio::awaitable<Result<json>> SandboxFiles::Info(const json& entry) {
  Result<const Accounts*> accounts = co_await EntryAccounts();
  if (!accounts.ok()) co_return accounts.error();
  co_return EntryInfoJson(entry, **accounts);
}

asio::awaitable<Result<const Accounts*>> SandboxFiles::EntryAccounts() {
  if (!groups_read_) {
    auto executor = co_await asio::this_coro::executor;
    Result<core::InitConnection> connection = co_await manager_->ConnectInit(executor, sandbox_id_);
    if (!connection.ok()) co_return connection.error();
    Result<std::string> group = co_await ReadSandboxFile(std::move(connection.value()), "/etc/group");
    if (!group.ok()) co_return group.error();
    accounts_.groups = ParseGroup(*group);
    groups_read_ = true;
  }
  co_return &accounts_;
}

asio::awaitable<Result<json>> SandboxFiles::Stat(const std::string& path) {
  const json op = {{"op", "stat"}, {"path", path}};
  co_return co_await Run(op);
}

std::string FollowedType(const json& entry) {
  const std::string type = entry.value("type", "");
  return type == "symlink" ? entry.value("target_type", "") : type;
}

asio::awaitable<Status> SandboxFiles::CheckDirectory(const std::string& path) {
  Result<json> entry = co_await Stat(path);
  if (!entry.ok()) co_return entry.error();
  const std::string type = FollowedType(*entry);
  if (type == "dir") co_return Status{};
  // Followed as envd's os.Stat does: a symlink that leads nowhere is not there.
  if (type.empty()) co_return MakeError(ErrorCode::kNotFound, fmt::format("path {} not found", path), "not_found");
  co_return MakeError(ErrorCode::kConflict, fmt::format("path is not a directory: {}", path), "not_a_directory");
}

asio::awaitable<Result<StartedWatch>> StartWatch(SandboxFiles& files, const std::string& path,
                                                 const WatchOptions& options) {
  if (Status directory = co_await files.CheckDirectory(path); !directory.ok()) co_return directory.error();
  const json op = {{"op", "watch"},
                   {"path", path},
                   {"recursive", options.recursive},
                   {"entries", options.include_entry},
                   {"allow_network_mounts", options.allow_network_mounts}};
  Result<std::unique_ptr<core::FileOperation>> started = co_await files.Start(op, false);
  if (!started.ok()) co_return started.error();
  Result<std::pair<std::string, std::string>> first = co_await api::ReadFirstLine(**started);
  if (!first.ok()) co_return first.error();
  const json ready = ParseBoundedJson(first->first);
  if (!ready.is_object() || ready.value("type", json()) != "ready") {
    co_return api::FileWorkerBroken("did not report its watch ready");
  }
  co_return StartedWatch{std::move(started.value()), std::move(first->second)};
}

RpcError FileRpcError(const Error& error) {
  const std::string& code = error.detail_code;
  if (code == "not_found") return {"not_found", error.message};
  if (code == "exists") return {"already_exists", error.message};
  if (code == "permission_denied" || code == "read_only") return {"permission_denied", error.message};
  if (code == "not_a_directory" || code == "is_a_directory" || code == "invalid_argument" || code == "too_large") {
    return {"invalid_argument", error.message};
  }
  if (code == "not_empty") return {"failed_precondition", error.message};
  if (code == "disk_full") return {"resource_exhausted", error.message};
  return ToRpcError(error);
}

int FileHttpStatus(const Error& error) {
  const std::string& code = error.detail_code;
  if (code == "not_found") return 404;
  if (code == "permission_denied" || code == "read_only") return 403;
  if (code == "disk_full") return 507;
  if (code == "not_a_directory" || code == "is_a_directory" || code == "invalid_argument" || code == "too_large") {
    return 400;
  }
  if (code == "exists" || code == "not_empty") return 409;
  switch (error.code) {
    case ErrorCode::kInvalid: return 400;
    default: return HttpStatus(error.code);
  }
}

}  // namespace bulkhead::e2b
