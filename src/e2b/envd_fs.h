// What envd's filesystem service and /files share: whom an operation is for and where its
// relative paths start (the user's home, from the sandbox's own /etc/passwd), running file
// operations inside the sandbox (core/file_operation.h: a worker there, as the sandbox's root
// the way envd runs, what it creates given to the user; no path, symlink or ".." reaches a
// host file), and envd's error codes for their failures.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/result.h"
#include "core/file_operation.h"
#include "core/sandbox_manager.h"
#include "e2b/connect_rpc.h"
#include "e2b/entry_info.h"
#include "e2b/envd_paths.h"

namespace bulkhead::e2b {

// An operation's JSON answer (an Entry, a small summary) is at most this long...
constexpr size_t kMaxFileAnswerBytes = 1024 * 1024;
// ...and a listing (up to ctl::kMaxListEntries entries) this.
constexpr size_t kMaxListingAnswerBytes = 64 * 1024 * 1024;

class SandboxFiles {
 public:
  // Whom the operations of a request run as: `user` (Basic auth, ?username=) or else the
  // sandbox's own. 401 (kUnauthorized) "invalid username: '…'" for a name the sandbox's
  // /etc/passwd does not have.
  static boost::asio::awaitable<Result<SandboxFiles>> Open(core::SandboxManager& manager, const std::string& sandbox_id,
                                                           const std::optional<std::string>& user);

  const std::string& user() const { return user_; }
  const std::string& home() const { return home_; }
  const std::string& sandbox_id() const { return sandbox_id_; }
  // envd's path: "~" expanded, relative to the home, cleaned (envd_paths.h). 400 if bad.
  Result<std::string> Resolve(std::string_view path) const { return ResolveEnvdPath(path, home_); }

  // Starts one file operation (ctl_protocol.h "File operations") as envd would for the
  // user: as root, what it creates given to the user ("owner").
  boost::asio::awaitable<Result<std::unique_ptr<core::FileOperation>>> Start(const nlohmann::json& op, bool with_input);
  // Runs one operation without input to its end: the JSON line it answered (null if none).
  boost::asio::awaitable<Result<nlohmann::json>> Run(const nlohmann::json& op, size_t max_answer = kMaxFileAnswerBytes);
  // envd's EntryInfo for a worker Entry (the group names are read on first use).
  boost::asio::awaitable<Result<nlohmann::json>> Info(const nlohmann::json& entry);
  // The sandbox's users and groups, as Info names owners (valid while this lives).
  boost::asio::awaitable<Result<const Accounts*>> EntryAccounts();
  // The Entry of `path` (a symlink reported, not followed; what it leads to in its
  // "target_type", see FollowedType).
  boost::asio::awaitable<Result<nlohmann::json>> Stat(const std::string& path);
  // OK if `path` is a directory or a symlink to one; else not_found, or 400 with the
  // worker's "not_a_directory" (envd: "path is not a directory").
  boost::asio::awaitable<Status> CheckDirectory(const std::string& path);

 private:
  SandboxFiles() = default;

  core::SandboxManager* manager_ = nullptr;
  std::string sandbox_id_;
  std::string user_;
  std::string home_;
  struct FileOwner {
    uint32_t uid = 0;
    uint32_t gid = 0;
  };
  std::optional<FileOwner> owner_;  // the user's ids, unless the sandbox does not know them
  Accounts accounts_;
  bool groups_read_ = false;
};

// The type of what a worker Entry leads to: its own, or a symlink's target's ("" for one that
// leads nowhere).
std::string FollowedType(const nlohmann::json& entry);

// A watch operation that reported ready, and whatever it wrote after that line.
struct StartedWatch {
  std::unique_ptr<core::FileOperation> operation;
  std::string pending;
};
// What a WatchDir / CreateWatcher asks for: envd's recursive, include_entry (create, write
// and chmod events carry the entry's info) and allow_network_mounts.
struct WatchOptions {
  bool recursive = false;
  bool include_entry = false;
  bool allow_network_mounts = false;
};
// Starts watching the directory `path` (resolved). not_found / invalid_argument (as envd)
// for a path that is missing or not a directory, or on a network mount unless allowed.
boost::asio::awaitable<Result<StartedWatch>> StartWatch(SandboxFiles& files, const std::string& path,
                                                        const WatchOptions& options);

// envd's Connect error for a failed file operation (by the worker's code: not_found,
// exists -> already_exists, permission_denied, not_a_directory -> invalid_argument, ...).
RpcError FileRpcError(const Error& error);
// The HTTP status /files answers for it (400, 401, 403, 404, 409, 507, 500).
int FileHttpStatus(const Error& error);

}  // namespace bulkhead::e2b
