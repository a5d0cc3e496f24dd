#include "client/api_client.h"

#include <algorithm>
#include <utility>

#include "client/server_url.h"

namespace bulkhead::cli {
namespace {

using nlohmann::json;

ErrorCode CodeForStatus(int status) {
  switch (status) {
    case 400: return ErrorCode::kBadRequest;
    case 401: return ErrorCode::kUnauthorized;
    case 403: return ErrorCode::kForbidden;
    case 404: return ErrorCode::kNotFound;
    case 405: return ErrorCode::kMethodNotAllowed;
    case 409: return ErrorCode::kConflict;
    case 413: return ErrorCode::kTooLarge;
    case 422: return ErrorCode::kInvalid;
    case 429: return ErrorCode::kTooMany;
    case 502: return ErrorCode::kBadGateway;
    case 503: return ErrorCode::kUnavailable;
    case 507: return ErrorCode::kDiskFull;
    default: return status >= 400 && status < 500 ? ErrorCode::kBadRequest : ErrorCode::kInternal;
  }
}

Error BadResponse(const std::string& why) {
  return MakeError(ErrorCode::kInternal, "unexpected answer from the daemon: " + why, "bad_response");
}

}  // namespace

Error ErrorFromResponse(const HttpResponse& response) {
  ErrorCode code = CodeForStatus(response.status);
  json body = json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_discarded() && body.is_object() && body.contains("error")) {
    return ErrorFromJson(body, code);
  }
  // Not the API's error shape (a proxy, or not bulkhead at all): the first line of a
  // plain-text body may help; an HTML page would not.
  std::string text = response.body.substr(0, std::min<size_t>(response.body.find_first_of("\r\n"), 200));
  std::string message = "the daemon answered HTTP " + std::to_string(response.status);
  if (!text.empty() && text[0] != '<') message += ": " + text;
  return MakeError(code, message, ErrorName(code));
}

std::string DumpJson(const json& value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

std::string SandboxPath(const std::string& sandbox_id) { return "/v1/sandboxes/" + PercentEncode(sandbox_id); }

std::string ProcessPath(const std::string& sandbox_id, const std::string& process) {
  return SandboxPath(sandbox_id) + "/processes/" + PercentEncode(process);
}

ApiClient::ApiClient(HttpClient http, std::string api_key_source)
    : http_(std::move(http)), api_key_source_(std::move(api_key_source)) {}

Error ApiClient::WithHint(Error error) const {
  if (error.code == ErrorCode::kUnauthorized) {
    error.message += api_key_source_ == "BULKHEAD_API_KEY"
                         ? "; the key sent came from BULKHEAD_API_KEY"
                         : "; the key is read from " + api_key_source_ +
                               " (readable by the daemon's user only), or set BULKHEAD_API_KEY";
  }
  return error;
}

Result<json> ApiClient::JsonFrom(Result<HttpResponse> response) const {
  if (!response.ok()) return response.error();
  if (!response->ok()) return WithHint(ErrorFromResponse(*response));
  if (response->body.empty()) return json(nullptr);
  json body = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return BadResponse("the body is not JSON");
  return body;
}

Result<json> ApiClient::Call(HttpMethod method, const std::string& target, const std::optional<json>& body) const {
  return JsonFrom(http_.Send(method, target, body ? DumpJson(*body) : std::string()));
}

Result<json> ApiClient::Upload(const std::string& target, const std::string& content_type,
                               std::optional<uint64_t> content_length, const BodyProducer& produce,
                               HttpMethod method) const {
  return JsonFrom(http_.SendStreamingBody(method, target, content_type, content_length, produce));
}

Result<StreamedResponse> ApiClient::Download(const std::string& target, const std::string& accept) const {
  Result<StreamedResponse> response = http_.Open(HttpMethod::kGet, target, accept);
  if (!response.ok() || response->ok()) return response;
  Result<HttpResponse> answer = response->ReadRest();
  if (!answer.ok()) return answer.error();
  return WithHint(ErrorFromResponse(*answer));
}

Result<CommandOutcome> ApiClient::Exec(const std::string& sandbox_id, const json& request,
                                       ExecOutputPrinter& printer) const {
  Result<HttpResponse> response =
      http_.SendForLines(HttpMethod::kPost, SandboxPath(sandbox_id) + "/exec", DumpJson(request),
                         [&printer](std::string_view line) { return printer.HandleLine(line); });
  if (!response.ok()) return response.error();
  if (!response->ok()) return WithHint(ErrorFromResponse(*response));
  if (response->content_type != "application/x-ndjson") {
    // A daemon that does not stream answers with the whole result at once.
    json result = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (result.is_discarded()) return BadResponse("the exec result is not JSON");
    BH_TRY(printer.HandleResult(result));
  }
  if (!printer.outcome()) {
    return MakeError(ErrorCode::kUnavailable, "the exec stream ended before the command exited", "stream_ended");
  }
  return *printer.outcome();
}

}  // namespace bulkhead::cli
