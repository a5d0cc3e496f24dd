// Percent-encoding of a URL component (RFC 3986): what is not an unreserved character
// (ALPHA, DIGIT, "-", ".", "_", "~") becomes %XX, upper-case hex. Its inverse is
// http/request_target.h's PercentDecode.
#pragma once
#include <string>
#include <string_view>

namespace bulkhead {

std::string PercentEncode(std::string_view text);

}  // namespace bulkhead
