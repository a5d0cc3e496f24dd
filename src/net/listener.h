// The TCP listeners ConfigureNetns made in a sandbox's namespace, served by the egress proxy:
// an acceptor over the descriptor, and a loop handing each connection to its server on a
// strand of its own.
#pragma once
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <boost/asio/awaitable.hpp>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>

#include "common/result.h"
#include "common/unique_fd.h"
#include "net/relay.h"

namespace bulkhead::net {

using Acceptor = boost::asio::basic_socket_acceptor<boost::asio::generic::stream_protocol>;

// Takes over a bound TCP socket (listening, or made to listen here).
Result<std::shared_ptr<Acceptor>> AdoptListener(const boost::asio::any_io_executor& executor, UniqueFd fd);

// Accepts until `acceptor` is closed (from its executor); each connection gets a new strand of
// `io` as its executor and is handed to `serve`.
boost::asio::awaitable<void> AcceptLoop(std::shared_ptr<Acceptor> acceptor, boost::asio::io_context& io,
                                        std::function<void(StreamSocket)> serve);

}  // namespace bulkhead::net
