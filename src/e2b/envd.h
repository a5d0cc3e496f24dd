// The envd surface of the E2B front: what an E2B sandbox's in-sandbox daemon serves, here
// answered by bulkhead's init through the SandboxManager. front.cc authenticates and routes;
// each service lives in its own file.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>

#include "e2b/front.h"
#include "http/http_exchange.h"
#include "http/request_target.h"

namespace bulkhead::e2b {

struct EnvdRequest {
  api::HttpExchange& exchange;
  E2bContext& context;
  std::string sandbox_id;
  // The user of "Authorization: Basic base64(user:)"; nullopt = the sandbox's own user.
  std::optional<std::string> user;
  std::string path;  // decoded, without the query: "/process.Process/Start", "/files"
  api::QueryParams query;
};

// POST /process.Process/{method}: Start, Connect, List, SendInput, StreamInput, SendSignal,
// CloseStdin, Update (envd_process.cc).
boost::asio::awaitable<void> ServeProcessService(EnvdRequest& request, std::string_view method);
// POST /filesystem.Filesystem/{method}: Stat, ListDir, MakeDir, Move, Remove, WatchDir,
// CreateWatcher, GetWatcherEvents, RemoveWatcher (envd_filesystem.cc).
boost::asio::awaitable<void> ServeFilesystemService(EnvdRequest& request, std::string_view method);
// GET and POST /files (envd_files.cc).
boost::asio::awaitable<void> ServeFiles(EnvdRequest& request);

}  // namespace bulkhead::e2b
