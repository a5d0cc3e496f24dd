#include "e2b/connect_rpc.h"
#include "e2b/envd.h"

namespace bulkhead::e2b {

// Being written: the filesystem service.
boost::asio::awaitable<void> ServeFilesystemService(EnvdRequest& request, std::string_view method) {
  co_await SendUnaryError(request.exchange,
                          {"unimplemented", "filesystem." + std::string(method) + " is not served yet"});
}

}  // namespace bulkhead::e2b
