// net::Relay between real sockets (unix socket pairs and loopback TCP): bytes and counts
// both ways, half-close, resets and cuts from outside, with splice and with the read/write
// fallback. Also prints the relay's throughput over loopback TCP (a figure, not a check).
#include "net/relay.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "common/unique_fd.h"

// g++ 12 at -O2 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::net {
namespace {

namespace asio = boost::asio;
using Protocol = asio::generic::stream_protocol;

enum class Transport { kUnix, kTcp };
enum class Mode { kSplice, kCopy };

// Two connected sockets: `near` for the test, `far` for the relay.
struct Connection {
  UniqueFd near;
  UniqueFd far;
};

Connection UnixPair() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Connection TcpPair() {
  UniqueFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  EXPECT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(listen(listener.get(), 1), 0);
  EXPECT_EQ(getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
  UniqueFd near(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(connect(near.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  UniqueFd far(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  EXPECT_TRUE(far.valid());
  return {std::move(near), std::move(far)};
}

std::string RandomBytes(size_t size, unsigned seed) {
  std::mt19937 generator(seed);
  std::string data(size, '\0');
  for (char& c : data) c = static_cast<char>(generator());
  return data;
}

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << strerror(errno);
    data.remove_prefix(size_t(n));
  }
}

// Reads until EOF (or an error, reported through `error`).
std::string ReadToEnd(int fd, int* error = nullptr) {
  std::string data;
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (error) *error = n < 0 ? errno : 0;
      return data;
    }
    data.append(buffer, size_t(n));
  }
}

// x <-> [a  relay  b] <-> y: the test talks on x and y, the relay runs on its own thread.
class RelayRig {
 public:
  RelayRig(Transport transport, Mode mode)
      : a_(io_), b_(io_), counters_(std::make_shared<RelayCounters>()) {
    signal(SIGPIPE, SIG_IGN);
    Connection left = transport == Transport::kUnix ? UnixPair() : TcpPair();
    Connection right = transport == Transport::kUnix ? UnixPair() : TcpPair();
    const Protocol protocol = transport == Transport::kUnix ? Protocol(AF_UNIX, 0) : Protocol(AF_INET, IPPROTO_TCP);
    x_ = std::move(left.near);
    y_ = std::move(right.near);
    a_.assign(protocol, left.far.release());
    b_.assign(protocol, right.far.release());
    asio::co_spawn(
        io_,
        [this, mode]() -> asio::awaitable<void> {
          if (mode == Mode::kSplice) {
            co_await Relay(a_, b_, counters_);
          } else {
            co_await RelayCopying(a_, b_, counters_);
          }
          std::lock_guard lock(mutex_);
          done_ = true;
          changed_.notify_all();
        },
        asio::detached);
    runner_ = std::thread([this] { io_.run(); });
  }

  ~RelayRig() {
    io_.stop();
    runner_.join();
  }

  int x() const { return x_.get(); }
  int y() const { return y_.get(); }
  UniqueFd& x_fd() { return x_; }
  UniqueFd& y_fd() { return y_; }
  const RelayCounters& counters() const { return *counters_; }

  // Whether the relay has returned within `timeout` (a guard against a hang, not a timing).
  bool WaitDone(std::chrono::seconds timeout = std::chrono::seconds(20)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return done_; });
  }
  bool done() {
    std::lock_guard lock(mutex_);
    return done_;
  }

  // Closes the relay's `a` socket on its executor, as a cut from outside does.
  void CloseAFromOutside() {
    asio::post(io_, [this] {
      boost::system::error_code ignored;
      a_.close(ignored);
    });
  }

 private:
  asio::io_context io_;
  StreamSocket a_;
  StreamSocket b_;
  std::shared_ptr<RelayCounters> counters_;
  UniqueFd x_;
  UniqueFd y_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool done_ = false;
  std::thread runner_;
};

class RelayTest : public testing::TestWithParam<std::tuple<Transport, Mode>> {
 protected:
  Transport transport() const { return std::get<0>(GetParam()); }
  Mode mode() const { return std::get<1>(GetParam()); }
};

TEST_P(RelayTest, CarriesBytesBothWaysAndCountsThemExactly) {
  RelayRig rig(transport(), mode());
  const std::string forward = RandomBytes(5 * 1024 * 1024 + 17, 1);
  const std::string backward = RandomBytes(3 * 1024 * 1024 + 5, 2);
  std::string at_y, at_x;
  std::thread write_x([&] {
    WriteAll(rig.x(), forward);
    shutdown(rig.x(), SHUT_WR);
  });
  std::thread write_y([&] {
    WriteAll(rig.y(), backward);
    shutdown(rig.y(), SHUT_WR);
  });
  std::thread read_y([&] { at_y = ReadToEnd(rig.y()); });
  at_x = ReadToEnd(rig.x());
  read_y.join();
  write_x.join();
  write_y.join();
  ASSERT_TRUE(rig.WaitDone());
  EXPECT_TRUE(at_y == forward) << "y got " << at_y.size() << " bytes of " << forward.size();
  EXPECT_TRUE(at_x == backward) << "x got " << at_x.size() << " bytes of " << backward.size();
  EXPECT_EQ(rig.counters().a_to_b.load(), int64_t(forward.size()));
  EXPECT_EQ(rig.counters().b_to_a.load(), int64_t(backward.size()));
}

TEST_P(RelayTest, HalfCloseIsPassedOnAndTheOtherDirectionGoesOn) {
  RelayRig rig(transport(), mode());
  WriteAll(rig.x(), "request");
  shutdown(rig.x(), SHUT_WR);
  EXPECT_EQ(ReadToEnd(rig.y()), "request");  // y saw the EOF
  EXPECT_FALSE(rig.done());
  // The other direction still carries bytes after the first one ended.
  WriteAll(rig.y(), "late answer");
  char buffer[64];
  const ssize_t n = read(rig.x(), buffer, sizeof(buffer));
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buffer, size_t(n)), "late answer");
  shutdown(rig.y(), SHUT_WR);
  EXPECT_EQ(ReadToEnd(rig.x()), "");
  ASSERT_TRUE(rig.WaitDone());
  EXPECT_EQ(rig.counters().a_to_b.load(), 7);
  EXPECT_EQ(rig.counters().b_to_a.load(), 11);
}

TEST_P(RelayTest, ClosingASocketFromOutsideEndsBothDirections) {
  RelayRig rig(transport(), mode());
  WriteAll(rig.x(), "ping");
  char buffer[16];
  ASSERT_EQ(read(rig.y(), buffer, sizeof(buffer)), 4);
  rig.CloseAFromOutside();
  ASSERT_TRUE(rig.WaitDone());
  // The relay closed b: y sees the end.
  EXPECT_EQ(ReadToEnd(rig.y()), "");
  // And a is closed: x sees the end or a reset.
  int error = 0;
  EXPECT_EQ(ReadToEnd(rig.x(), &error), "");
}

INSTANTIATE_TEST_SUITE_P(TransportsAndModes, RelayTest,
                         testing::Combine(testing::Values(Transport::kUnix, Transport::kTcp),
                                          testing::Values(Mode::kSplice, Mode::kCopy)),
                         [](const testing::TestParamInfo<RelayTest::ParamType>& info) {
                           return std::string(std::get<0>(info.param) == Transport::kUnix ? "Unix" : "Tcp") +
                                  (std::get<1>(info.param) == Mode::kSplice ? "Splice" : "Copy");
                         });

class RelayResetTest : public testing::TestWithParam<Mode> {};

TEST_P(RelayResetTest, AResetOnOneSideEndsBothDirections) {
  RelayRig rig(Transport::kTcp, GetParam());
  WriteAll(rig.x(), "hello");
  char buffer[16];
  ASSERT_EQ(read(rig.y(), buffer, sizeof(buffer)), 5);
  // y goes away with a reset (linger 0): the relay's b reads ECONNRESET.
  const linger reset{1, 0};
  ASSERT_EQ(setsockopt(rig.y(), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)), 0);
  rig.y_fd().reset();
  ASSERT_TRUE(rig.WaitDone());
  // x's direction ended too, though x never closed: x sees the end.
  int error = 0;
  EXPECT_EQ(ReadToEnd(rig.x(), &error), "");
  EXPECT_EQ(rig.counters().a_to_b.load(), 5);
}

INSTANTIATE_TEST_SUITE_P(Modes, RelayResetTest, testing::Values(Mode::kSplice, Mode::kCopy),
                         [](const testing::TestParamInfo<Mode>& info) {
                           return std::string(info.param == Mode::kSplice ? "Splice" : "Copy");
                         });

// A figure for the record: 4 GiB one way over loopback TCP through the splice relay.
TEST(RelayThroughput, FourGiBOverLoopbackTcp) {
  constexpr int64_t kTotal = int64_t{4} << 30;
  RelayRig rig(Transport::kTcp, Mode::kSplice);
  const std::string block(1 << 20, 'x');
  const auto started = std::chrono::steady_clock::now();
  std::thread writer([&] {
    for (int64_t sent = 0; sent < kTotal; sent += int64_t(block.size())) WriteAll(rig.x(), block);
    shutdown(rig.x(), SHUT_WR);
  });
  int64_t received = 0;
  std::vector<char> buffer(1 << 20);
  for (;;) {
    const ssize_t n = read(rig.y(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    received += n;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  writer.join();
  shutdown(rig.y(), SHUT_WR);
  ASSERT_TRUE(rig.WaitDone());
  EXPECT_EQ(received, kTotal);
  EXPECT_EQ(rig.counters().a_to_b.load(), kTotal);
  std::printf("[ figure   ] relay: 4 GiB over loopback TCP in %.2f s = %.2f GiB/s\n", seconds,
              double(kTotal) / double(1 << 30) / seconds);
}

}  // namespace
}  // namespace bulkhead::net
