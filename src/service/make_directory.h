// Making a directory inside a sandbox through its file worker (core/file_operation.h).
#pragma once
#include <string>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>

#include "common/result.h"
#include "core/sandbox_manager.h"

namespace bulkhead::api {

// mkdir -p `path` inside the sandbox as `user` (the workdir a new sandbox asked for).
boost::asio::awaitable<Status> MakeDirectoryInside(core::SandboxManager& manager, const std::string& sandbox_id,
                                                   const std::string& path, const std::string& user);

}  // namespace bulkhead::api
