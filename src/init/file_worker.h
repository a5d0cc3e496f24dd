// File operations (ctl_protocol.h, "File operations"), run by a worker process that init
// forks for a kExec with "file_op". The worker is an ordinary sandbox process (the request's
// user, the sandbox's namespaces), so a path reaches exactly what the sandbox's own programs
// reach. Its streams are fds 0, 1 and 2; it may allocate freely (a fork of a single-threaded
// process).
//
// file_worker.cc   dispatch, arguments, errors, Entry JSON, output
// file_ops.cc      read, write, stat, list, mkdir, move, remove
// file_archive.cc  archive_create, archive_extract (libarchive)
// file_watch.cc    watch (inotify)
// file_connect.cc  connect (the port proxy's relay to the sandbox's loopback)
#pragma once
#include <map>
#include <sys/stat.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bulkhead::init {

// Runs the operation described by the "file_op" JSON text. Returns the worker's exit status:
// 0 on success, 1 after the error line {"code","message"} went to stderr.
int RunFileOp(const std::string& file_op_json);

// ---- Shared by the operations ----

// An error with one of the worker's codes ("not_found", "exists", ...) as its detail_code and
// the matching ErrorCode (so its HTTP status is the API's).
Error FileError(std::string_view code, std::string message);
// `what` failed with errno `err` on `path`: the errno mapped to a worker code, the message
// naming the path ("open /workspace/a: No such file or directory").
Error ErrnoError(int err, std::string_view what, std::string_view path);
// The worker code of an error (its detail_code).
std::string FileErrorCode(const Error& error);

// Whom a file or directory is given to (chown).
struct FileOwner {
  uid_t uid = 0;
  gid_t gid = 0;
};

// The arguments of one operation: the "file_op" object, with checked accessors.
class FileOpArgs {
 public:
  explicit FileOpArgs(const nlohmann::json& doc) : doc_(doc) {}
  // A required path: absolute, no NUL, at most 4096 bytes. Normalized: repeated slashes, "."
  // components and a trailing slash removed ("//a/./b/" -> "/a/b").
  Result<std::string> Path(const char* key) const;
  Result<bool> Bool(const char* key, bool fallback) const;
  // Permission bits 0..07777, absent or null -> nullopt.
  Result<std::optional<mode_t>> Mode(const char* key) const;
  Result<int> Int(const char* key, int fallback, int min, int max) const;
  // A string of at most `max_bytes` bytes, absent or null -> "".
  Result<std::string> String(const char* key, size_t max_bytes) const;
  // An object of strings, absent or null -> empty.
  Result<std::map<std::string, std::string>> StringMap(const char* key) const;
  // "owner" {"uid", "gid"}: whom what the operation creates is given to; absent -> nullopt.
  Result<std::optional<FileOwner>> Owner(const char* key) const;

 private:
  const nlohmann::json& doc_;
};

// What an operation's Entries say beyond their basic fields, as its "resolve_links" and
// "xattr_prefix" ask (ctl_protocol.h).
struct EntryDetails {
  bool resolve_links = false;
  std::string xattr_prefix;  // "": no "xattrs"
};
Result<EntryDetails> EntryDetailsOf(const FileOpArgs& args);

// The Entry JSON of `path` described by `st` (lstat-style); `target` for a symlink.
nlohmann::json EntryJson(const std::string& path, const struct stat& st, const std::optional<std::string>& target);
// The Entry of `name` inside the directory `dir_fd`, never following a symlink; `path` is
// what the entry reports (and where its `details` are looked up).
Result<nlohmann::json> EntryAt(int dir_fd, const std::string& name, const std::string& path,
                               const EntryDetails& details = {});
// The Entry of an absolute path, never following a final symlink.
Result<nlohmann::json> EntryOf(const std::string& path, const EntryDetails& details = {});

// Blocking writes of all of `data` to `fd` (stdout is a pipe: it applies backpressure).
Status WriteAll(int fd, std::string_view data);
// One JSON value and a newline on stdout.
Status WriteJsonLine(const nlohmann::json& value);

// "/a/b" -> {"/a", "b"}; "/a" -> {"/", "a"}. The path must be normalized (FileOpArgs::Path)
// and not "/".
std::pair<std::string, std::string> SplitParent(const std::string& path);
// `dir` + "/" + `name`, without doubling the slash of "/".
std::string JoinPath(const std::string& dir, const std::string& name);
// The names in the directory `dir_fd` (without "." and ".."), sorted; `path` names it in errors.
Result<std::vector<std::string>> DirectoryNames(int dir_fd, const std::string& path);
// Creates `path` and its missing parents as directories (mode 0755 for the parents, `mode`
// for the last); an existing directory anywhere is fine. Something else at `path` itself is
// "exists", or "not_a_directory" when `path` is where something else is to go (a parent).
// Each directory it creates is given to `owner`, if any.
Status MakeDirectories(const std::string& path, mode_t mode, bool path_is_a_parent = false,
                       const std::optional<FileOwner>& owner = std::nullopt);

// ---- The operations (ctl_protocol.h lists their arguments and output) ----
Status ReadFileOp(const FileOpArgs& args);
Status WriteFileOp(const FileOpArgs& args);
// The name prefix of the named temporary a write builds its content in (when the
// filesystem has no O_TMPFILE); the watch hides such files. The letter after it says how the
// watch reports the rename that commits the write (file_watch.cc):
constexpr std::string_view kWriteTempPrefix = ".bulkhead-write-";
constexpr char kWriteAsWriter = 'w';     // create, write: written by whoever the worker runs as
constexpr char kWriteNewOwned = 'n';     // create, chmod, write: a new file given to its "owner"
constexpr char kWriteReplaceOwned = 'r';  // chmod, write: a file replaced and given to its "owner"
Status StatOp(const FileOpArgs& args);
Status ListOp(const FileOpArgs& args);
Status MkdirOp(const FileOpArgs& args);
Status MoveOp(const FileOpArgs& args);
Status RemoveOp(const FileOpArgs& args);
Status ArchiveCreateOp(const FileOpArgs& args);
Status ArchiveExtractOp(const FileOpArgs& args);
Status WatchOp(const FileOpArgs& args);
Status ConnectOp(const FileOpArgs& args);

}  // namespace bulkhead::init
