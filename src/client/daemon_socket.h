// Opening a connection to the daemon (unix socket or TCP), shared by the HTTP client and
// the WebSocket attach, with messages that tell the user what to do when nothing answers.
#pragma once
#include <boost/asio/generic/stream_protocol.hpp>

#include "client/server_url.h"
#include "common/result.h"

namespace bulkhead::cli {

// Connects `socket` (not yet open) to the daemon at `address`; blocking.
Status ConnectToDaemon(const ServerAddress& address, boost::asio::generic::stream_protocol::socket& socket);

}  // namespace bulkhead::cli
