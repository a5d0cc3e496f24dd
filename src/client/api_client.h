// The daemon's API (API.md) as calls that return JSON or an Error carrying the API's
// error code and message.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "client/exec_stream.h"
#include "client/http_client.h"
#include "common/result.h"

namespace bulkhead::cli {

// A non-2xx response as an Error: the API's {"error": {"code", "message"}} when the body
// has it, else the HTTP status.
Error ErrorFromResponse(const HttpResponse& response);

// JSON as text; bytes that are not UTF-8 are replaced rather than throwing.
std::string DumpJson(const nlohmann::json& value, int indent = -1);

class ApiClient {
 public:
  // `api_key_source` names where the key came from, for the hint on a 401.
  ApiClient(HttpClient http, std::string api_key_source);

  // A JSON call: the parsed body of a 2xx answer (null when empty, e.g. 204).
  Result<nlohmann::json> Call(HttpMethod method, const std::string& target,
                              const std::optional<nlohmann::json>& body = std::nullopt) const;

  // POST /v1/sandboxes/{id}/exec, streamed: output goes to `printer` as it arrives.
  // Returns how the command ended.
  Result<CommandOutcome> Exec(const std::string& sandbox_id, const nlohmann::json& request,
                              ExecOutputPrinter& printer) const;

  // A streamed body, PUT by default (image import, file writes; snapshot import POSTs).
  Result<nlohmann::json> Upload(const std::string& target, const std::string& content_type,
                                std::optional<uint64_t> content_length, const BodyProducer& produce,
                                HttpMethod method = HttpMethod::kPut) const;

  // GET whose body the caller reads as it arrives (file downloads, tar and event streams).
  // A non-2xx answer becomes its Error.
  Result<StreamedResponse> Download(const std::string& target, const std::string& accept) const;

  const HttpClient& http() const { return http_; }

  // A copy whose requests `canceller` can end from another thread.
  ApiClient WithCanceller(std::shared_ptr<RequestCanceller> canceller) const {
    return ApiClient(http_.WithCanceller(std::move(canceller)), api_key_source_);
  }

 private:
  Result<nlohmann::json> JsonFrom(Result<HttpResponse> response) const;
  Error WithHint(Error error) const;

  HttpClient http_;
  std::string api_key_source_;
};

// "/v1/sandboxes/" + the id, percent-encoded.
std::string SandboxPath(const std::string& sandbox_id);
// /v1/sandboxes/{id}/processes/{pid or tag}
std::string ProcessPath(const std::string& sandbox_id, const std::string& process);

// The code shown after an error message: the API's snake_case code when there is one.
inline std::string CodeOf(const Error& error) {
  return error.detail_code.empty() ? ErrorName(error.code) : error.detail_code;
}

}  // namespace bulkhead::cli
