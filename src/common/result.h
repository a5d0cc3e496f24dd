// Errors as values at module edges. An Error carries a code that maps 1:1 onto the
// API's HTTP status and snake_case error code, so the api layer never guesses.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace bulkhead {

enum class ErrorCode {
  kBadRequest,       // 400 malformed
  kUnauthorized,     // 401
  kForbidden,        // 403
  kNotFound,         // 404
  kMethodNotAllowed, // 405
  kConflict,         // 409 wrong state
  kTooLarge,         // 413
  kInvalid,          // 422 valid JSON, invalid values
  kTooMany,          // 429 quota
  kInternal,         // 500 a bug or an unexpected system failure
  kBadGateway,       // 502 what we proxy to did not answer (a sandbox port, an upstream)
  kUnavailable,      // 503 overloaded or shutting down
  kDiskFull,         // 507
};

int HttpStatus(ErrorCode code);
const char* ErrorName(ErrorCode code);  // e.g. "not_found"

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  // A more specific snake_case code for the API ("sandbox_not_found"); empty = ErrorName(code).
  std::string detail_code;
};

inline Error MakeError(ErrorCode code, std::string message, std::string detail_code = {}) {
  return Error{code, std::move(message), std::move(detail_code)};
}

// Result<T>: a value or an Error. Status = Result<void>.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error error) : v_(std::move(error)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}
  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *error_; }

 private:
  std::optional<Error> error_;
};
using Status = Result<void>;

// An Error from errno, for system calls that failed unexpectedly.
Error SystemError(const std::string& what, int err);

}  // namespace bulkhead

#define BH_TRY(expr)                              \
  do {                                            \
    auto bh_status_ = (expr);                     \
    if (!bh_status_.ok()) return bh_status_.error(); \
  } while (0)
