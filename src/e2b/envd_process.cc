#include "e2b/connect_rpc.h"
#include "e2b/envd.h"

namespace bulkhead::e2b {

// Being written: the process service.
boost::asio::awaitable<void> ServeProcessService(EnvdRequest& request, std::string_view method) {
  co_await SendUnaryError(request.exchange, {"unimplemented", "process." + std::string(method) + " is not served yet"});
}

}  // namespace bulkhead::e2b
