// Reading what a file operation (core/file_operation.h) writes to its stdout: its first line
// (a read's {"size": N}, a watch's {"type": "ready"}) and its one-object JSON answers. Shared
// by the file routes (file_handler.cc) and the E2B front's envd (src/e2b/).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>

#include "api/http_exchange.h"
#include "common/result.h"
#include "core/file_operation.h"

namespace bulkhead::api {

// The first line of a read ({"size": N}) and of a watch ({"type": "ready"}) is short.
constexpr size_t kMaxFirstLineBytes = 4096;

// 500: the sandbox's file worker did something it never should (`what`).
Error FileWorkerBroken(std::string_view what);

// The worker's JSON answer (an Entry, a listing, a summary): passed through as the worker
// wrote it (a listing can be large) once it is known to be one well-formed JSON object;
// answered with one trailing newline.
Result<std::string> JsonAnswer(std::string text);

// Reads the operation's output up to its first newline: the line (without the newline) and
// what followed it.
boost::asio::awaitable<Result<std::pair<std::string, std::string>>> ReadFirstLine(core::FileOperation& operation);

// Sends a read's content after its {"size": N} line: `first` (what followed the line), then
// the operation's output piece by piece, each read only once the previous one was written, as
// the body of a response of exactly `size` bytes (whose header is sent here). A file that grew
// or shrank, or a worker that failed, cuts the body short and ends the connection.
boost::asio::awaitable<void> SendAnnouncedBody(HttpExchange& exchange, core::FileOperation& operation,
                                               std::string first, uint64_t size);

}  // namespace bulkhead::api
