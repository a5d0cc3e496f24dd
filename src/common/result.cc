#include "common/result.h"

#include <cstring>

namespace bulkhead {

int HttpStatus(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadRequest: return 400;
    case ErrorCode::kUnauthorized: return 401;
    case ErrorCode::kForbidden: return 403;
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kMethodNotAllowed: return 405;
    case ErrorCode::kConflict: return 409;
    case ErrorCode::kTooLarge: return 413;
    case ErrorCode::kInvalid: return 422;
    case ErrorCode::kTooMany: return 429;
    case ErrorCode::kInternal: return 500;
    case ErrorCode::kUnavailable: return 503;
    case ErrorCode::kDiskFull: return 507;
    case ErrorCode::kBadGateway: return 502;
  }
  return 500;
}

const char* ErrorName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadRequest: return "bad_request";
    case ErrorCode::kUnauthorized: return "unauthorized";
    case ErrorCode::kForbidden: return "forbidden";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kMethodNotAllowed: return "method_not_allowed";
    case ErrorCode::kConflict: return "conflict";
    case ErrorCode::kTooLarge: return "payload_too_large";
    case ErrorCode::kInvalid: return "invalid_argument";
    case ErrorCode::kTooMany: return "too_many_requests";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kDiskFull: return "disk_full";
    case ErrorCode::kBadGateway: return "bad_gateway";
  }
  return "internal";
}

Error SystemError(const std::string& what, int err) {
  ErrorCode code = ErrorCode::kInternal;
  if (err == ENOSPC || err == EDQUOT) code = ErrorCode::kDiskFull;
  return Error{code, what + ": " + std::strerror(err), {}};
}

}  // namespace bulkhead
