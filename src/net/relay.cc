#include "net/relay.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/unique_fd.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames, whose
// awaitable_frame_base brings its own matching operator new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

// Results of co_await go into named variables before they are tested: g++ 12 miscompiles
// `if (!co_await f()) co_return ...;` (the coroutine resumes into an invalid state).

namespace bulkhead::net {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using WaitType = asio::socket_base::wait_type;

constexpr int kPipeBytes = 1 << 20;          // asked for; the kernel may give less
constexpr size_t kCopyBytes = 64 * 1024;     // the buffer of the read/write fallback
// A direction whose source always has data would keep its thread to itself: it lets the
// other direction and other connections run after this many bytes without waiting.
constexpr int64_t kBytesBeforeYield = 4 << 20;

// What the two directions share. Both run on the relay's executor (one strand), so plain
// fields do.
struct RelayState {
  RelayState(StreamSocket& a_socket, StreamSocket& b_socket, const asio::any_io_executor& executor)
      : a(a_socket), b(b_socket), spawned_done(executor) {}

  // A direction failed (reset, error) or a socket was cut from outside: both directions end.
  void End() {
    ending = true;
    error_code ignored;
    a.cancel(ignored);
    b.cancel(ignored);
  }

  StreamSocket& a;
  StreamSocket& b;
  bool ending = false;
  bool spawned_running = true;
  asio::steady_timer spawned_done;  // cancelled when the spawned direction has finished
};

// One direction, `from` -> `to`. With a pipe it splices (socket -> pipe -> socket, no copy
// through user space); without one it reads and writes through `buffer`.
struct Direction {
  StreamSocket& from;
  StreamSocket& to;
  std::atomic<int64_t>& count;
  UniqueFd pipe_read;
  UniqueFd pipe_write;
  size_t pipe_capacity = 0;
  std::vector<char> buffer;
  int64_t since_yield = 0;

  bool splicing() const { return pipe_write.valid(); }

  // Sets up splicing; copying if no pipe can be had (out of descriptors).
  void Open(bool allow_splice) {
    int fds[2];
    if (allow_splice && pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
      pipe_read.reset(fds[0]);
      pipe_write.reset(fds[1]);
      fcntl(pipe_write.get(), F_SETPIPE_SZ, kPipeBytes);  // best effort: the default is 64 KiB
      const int capacity = fcntl(pipe_write.get(), F_GETPIPE_SZ);
      pipe_capacity = capacity > 0 ? size_t(capacity) : 64 * 1024;
      return;
    }
    SwitchToCopying();
  }

  // splice(2) is not supported by one of the sockets (EINVAL): read and write instead.
  void SwitchToCopying() {
    pipe_read.reset();
    pipe_write.reset();
    buffer.resize(kCopyBytes);
  }
};

// Waits until `socket` is ready for `what`. False when the relay is ending: the wait was
// cancelled, the socket closed, or the other direction failed meanwhile.
asio::awaitable<bool> Wait(RelayState& state, StreamSocket& socket, WaitType what) {
  if (state.ending) co_return false;
  error_code ec;
  co_await socket.async_wait(what, asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec && !state.ending;
}

asio::awaitable<void> CountAndMaybeYield(Direction& d, size_t moved) {
  d.count.fetch_add(int64_t(moved), std::memory_order_relaxed);
  d.since_yield += int64_t(moved);
  if (d.since_yield >= kBytesBeforeYield) {
    d.since_yield = 0;
    const asio::any_io_executor executor = co_await asio::this_coro::executor;
    co_await asio::post(executor, asio::use_awaitable);
  }
}

// Writes all of `data` to `to` (non-blocking, waiting for room). False on failure.
asio::awaitable<bool> WriteAll(RelayState& state, Direction& d, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(d.to.native_handle(), data, size, MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      size -= size_t(n);
      co_await CountAndMaybeYield(d, size_t(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      d.since_yield = 0;
      const bool writable = co_await Wait(state, d.to, WaitType::wait_write);
      if (!writable) co_return false;
    } else {
      co_return false;
    }
  }
  co_return true;
}

// Moves the `pending` bytes in the pipe on to `to`. False on failure.
asio::awaitable<bool> DrainPipe(RelayState& state, Direction& d, size_t pending) {
  while (pending > 0) {
    const ssize_t n = splice(d.pipe_read.get(), nullptr, d.to.native_handle(), nullptr, pending,
                             SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      pending -= size_t(n);
      co_await CountAndMaybeYield(d, size_t(n));
      continue;
    }
    const int err = n < 0 ? errno : EIO;  // 0 with bytes in the pipe: nothing sensible to retry
    if (err == EINTR) continue;
    if (err == EAGAIN) {
      d.since_yield = 0;
      const bool writable = co_await Wait(state, d.to, WaitType::wait_write);
      if (!writable) co_return false;
      continue;
    }
    if (err != EINVAL) co_return false;
    // The destination takes no splice: its bytes go the long way, and so does the rest.
    std::vector<char> rest(pending);
    size_t got = 0;
    while (got < pending) {
      const ssize_t r = read(d.pipe_read.get(), rest.data() + got, pending - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) co_return false;
      got += size_t(r);
    }
    d.SwitchToCopying();
    co_return co_await WriteAll(state, d, rest.data(), rest.size());
  }
  co_return true;
}

// Relays one direction until its EOF, which it passes on as shutdown(SHUT_WR). False if it
// failed or was cut: the whole relay ends then.
asio::awaitable<bool> RunDirection(RelayState& state, Direction& d) {
  for (;;) {
    if (state.ending) co_return false;
    ssize_t n;
    if (d.splicing()) {
      // The pipe is empty here: each read is drained before the next.
      n = splice(d.from.native_handle(), nullptr, d.pipe_write.get(), nullptr, d.pipe_capacity,
                 SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    } else {
      n = read(d.from.native_handle(), d.buffer.data(), d.buffer.size());
    }
    if (n > 0) {
      bool delivered;
      if (d.splicing()) {
        delivered = co_await DrainPipe(state, d, size_t(n));
      } else {
        delivered = co_await WriteAll(state, d, d.buffer.data(), size_t(n));
      }
      if (!delivered) co_return false;
      continue;
    }
    if (n == 0) break;
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      d.since_yield = 0;
      const bool readable = co_await Wait(state, d.from, WaitType::wait_read);
      if (!readable) co_return false;
      continue;
    }
    if (err == EINVAL && d.splicing()) {
      d.SwitchToCopying();
      continue;
    }
    co_return false;  // reset, or the socket was closed under us
  }
  shutdown(d.to.native_handle(), SHUT_WR);
  co_return true;
}

asio::awaitable<void> RunDirectionEndingAllOnFailure(RelayState& state, Direction& direction) {
  bool finished = false;
  try {
    finished = co_await RunDirection(state, direction);
  } catch (...) {
    // Out of memory and the like: end the relay rather than let it hang.
  }
  if (!finished) state.End();
}

asio::awaitable<void> RelayWith(StreamSocket& a, StreamSocket& b, RelayCounters& counters, bool allow_splice) {
  try {
    const asio::any_io_executor executor = co_await asio::this_coro::executor;
    error_code ignored;
    a.native_non_blocking(true, ignored);
    b.native_non_blocking(true, ignored);
    auto state = std::make_shared<RelayState>(a, b, executor);
    auto a_to_b = std::make_shared<Direction>(Direction{a, b, counters.a_to_b});
    auto b_to_a = std::make_shared<Direction>(Direction{b, a, counters.b_to_a});
    a_to_b->Open(allow_splice);
    b_to_a->Open(allow_splice);

    // b -> a runs beside this coroutine (same executor, so the two never run at once);
    // a -> b runs here. The relay ends when both ended.
    asio::co_spawn(
        executor,
        [state, b_to_a]() -> asio::awaitable<void> {
          co_await RunDirectionEndingAllOnFailure(*state, *b_to_a);
          state->spawned_running = false;
          state->spawned_done.cancel();
        },
        asio::detached);
    co_await RunDirectionEndingAllOnFailure(*state, *a_to_b);
    while (state->spawned_running) {
      state->spawned_done.expires_at(asio::steady_timer::time_point::max());
      co_await state->spawned_done.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
  } catch (...) {
    // Never throws: the sockets are closed below whatever happened.
  }
  error_code ignored;
  a.close(ignored);
  b.close(ignored);
}

}  // namespace

asio::awaitable<void> Relay(StreamSocket& a, StreamSocket& b, std::shared_ptr<RelayCounters> counters) {
  if (!counters) counters = std::make_shared<RelayCounters>();
  co_await RelayWith(a, b, *counters, /*allow_splice=*/true);
}

asio::awaitable<void> RelayCopying(StreamSocket& a, StreamSocket& b, std::shared_ptr<RelayCounters> counters) {
  if (!counters) counters = std::make_shared<RelayCounters>();
  co_await RelayWith(a, b, *counters, /*allow_splice=*/false);
}

}  // namespace bulkhead::net
