// What a build does inside its step sandboxes, as blocking calls for the build's thread: each
// runs its coroutine on an io executor and waits for it. Everything goes through the sandbox's
// init (commands, file workers), so a path resolves as the sandbox's own programs see it and
// never reaches a host file.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/any_io_executor.hpp>

#include "core/sandbox_manager.h"

namespace bulkhead::api {

class BuildSandbox {
 public:
  BuildSandbox(core::SandboxManager& manager, boost::asio::any_io_executor io, std::string id)
      : manager_(manager), io_(std::move(io)), id_(std::move(id)) {}
  const std::string& id() const { return id_; }

  // Runs the command to its end; `on_output` gets each piece of its output (stderr: true) on an
  // io thread. Answers how it ended.
  Result<core::ExitStatus> Run(core::ExecRequest request,
                               std::function<void(bool is_stderr, std::string_view data)> on_output);
  // Unpacks the tar at host path `tar_path` under the directory `dir` (created with parents),
  // every entry given to `owner` ({uid, gid}) if set. As root.
  Status Extract(const std::string& dir, const std::string& tar_path, std::optional<std::pair<uint32_t, uint32_t>> owner);
  // Writes a tar of `path` (a directory's contents, or one file under its name) to the host
  // file `out_path`; with `one_file_system`, what is mounted below is left out. As root.
  Status Archive(const std::string& path, bool one_file_system, const std::string& out_path);
  // A small file's content; nullopt if it does not exist. As root.
  Result<std::optional<std::string>> Read(const std::string& path);
  // What `path` is, a symlink followed: "file", "dir" or "other"; nullopt if nothing is there.
  Result<std::optional<std::string>> TypeOf(const std::string& path);
  // mkdir -p, the directories it makes given to `owner` if set. As root.
  Status MakeDirectory(const std::string& path, std::optional<std::pair<uint32_t, uint32_t>> owner);

 private:
  core::SandboxManager& manager_;
  boost::asio::any_io_executor io_;
  std::string id_;
};

}  // namespace bulkhead::api
