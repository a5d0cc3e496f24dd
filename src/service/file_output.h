// Reading what a file operation (core/file_operation.h) writes to its stdout: its first line
// (a read's {"size": N}, a watch's {"type": "ready"}) and its one-object JSON answers. Shared
// by the file routes (file_handler.cc) and the E2B front's envd (src/e2b/).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>

#include "common/result.h"
#include "core/file_operation.h"
#include "http/http_exchange.h"

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

// A read's first line: {"size": N}, or {} for a file whose size is not known ahead (a
// kernel filesystem's: procfs, sysfs), which is then read to its end.
Result<std::optional<uint64_t>> ParseReadSize(const std::string& line);

// Sends a read's content after its first line: `first` (what followed the line), then the
// operation's output piece by piece, each read only once the previous one was written, as the
// body of a response (whose header is sent here) of exactly `size` bytes, or chunked to the
// end when the size is not known. A file that grew or shrank, or a worker that failed, cuts
// the body short and ends the connection.
boost::asio::awaitable<void> SendReadBody(HttpExchange& exchange, core::FileOperation& operation, std::string first,
                                          std::optional<uint64_t> size);

}  // namespace bulkhead::api
