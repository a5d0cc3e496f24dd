#include "e2b/envd.h"

namespace bulkhead::e2b {

// Being written: /files.
boost::asio::awaitable<void> ServeFiles(EnvdRequest& request) {
  co_await SendE2bError(request.exchange, 501, "/files is not served yet");
}

}  // namespace bulkhead::e2b
