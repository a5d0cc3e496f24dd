// Moving bytes both ways between two connected stream sockets until both directions end,
// with splice(2) through a pipe per direction (no copy through user space) and byte counts.
// Used by the egress proxy (sandbox <-> upstream) and the port proxy (API client <-> sandbox).
#pragma once
#include <utility>  // before boost/asio/awaitable.hpp (Boost 1.74 uses std::exchange unincluded)

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <cstdint>
#include <memory>

namespace bulkhead::net {

using StreamSocket = boost::asio::generic::stream_protocol::socket;

// Live counters of one relay, readable from any thread while it runs (the egress log's
// "bytes so far" of an open connection).
struct RelayCounters {
  std::atomic<int64_t> a_to_b{0};
  std::atomic<int64_t> b_to_a{0};
};

// Relays until both directions reached EOF (each EOF is passed on as shutdown(SHUT_WR)), one
// side reset, or `a`/`b` is closed/cancelled from outside (how a connection is cut). `a`'s
// bytes that were already read before the relay began (e.g. a peeked ClientHello or a request
// head) must have been written to `b` by the caller. Both sockets are closed when it returns.
// Never throws.
// `a` and `b` belong to the awaiting coroutine's executor, which must be a strand (or a
// one-thread io_context); closing or cancelling them from outside happens on it too.
boost::asio::awaitable<void> Relay(StreamSocket& a, StreamSocket& b, std::shared_ptr<RelayCounters> counters);

// The same relay with read(2)/write(2) only: what Relay falls back to for a socket that
// splice(2) does not support. Separate so tests exercise the fallback on any kernel.
boost::asio::awaitable<void> RelayCopying(StreamSocket& a, StreamSocket& b, std::shared_ptr<RelayCounters> counters);

}  // namespace bulkhead::net
