// The vsock device dialer against a fake device speaking Firecracker's host-side handshake.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/detached.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <chrono>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "runtime/tier.h"
#include "runtime/vsock_dialer.h"

namespace bulkhead::runtime {
namespace {
namespace asio = boost::asio;

// A device whose connections, in order, are each handed to `serve` once their request line was read.
class ScriptedDevice {
 public:
  using Serve = std::function<void(int connection)>;
  explicit ScriptedDevice(std::vector<Serve> serves) {
    char dir[] = "/tmp/vsock-dialer-XXXXXX";
    dir_ = ::mkdtemp(dir);
    path_ = dir_ + "/vsock.sock";
    listener_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    EXPECT_EQ(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listener_.get(), 4), 0);
    thread_ = std::thread([this, serves] {
      for (const Serve& serve : serves) {
        UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        std::string request;
        char c;
        while (::read(conn.get(), &c, 1) == 1 && c != '\n') request.push_back(c);
        requests_.push_back(request);
        serve(conn.get());
      }
    });
  }
  ~ScriptedDevice() {
    if (thread_.joinable()) thread_.join();
    std::filesystem::remove_all(dir_);
  }
  const std::string& path() const { return path_; }
  // The request line of the first connection, once all were served.
  std::string request() {
    thread_.join();
    return requests_.empty() ? "" : requests_.front();
  }

 private:
  std::string dir_, path_;
  std::vector<std::string> requests_;
  UniqueFd listener_;
  std::thread thread_;
};

// A device that answers one connection with `answer` (then closes it).
class FakeDevice : public ScriptedDevice {
 public:
  explicit FakeDevice(std::string answer)
      : ScriptedDevice({[answer](int connection) {
          (void)!::send(connection, answer.data(), answer.size(), MSG_NOSIGNAL);
        }}) {}
};

// Dials, and reads what follows the handshake until the device closes.
Result<std::string> DialAndRead(const std::string& path, uint32_t port, uid_t device_uid = 0) {
  asio::io_context io;
  std::optional<Result<std::string>> result;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto socket = co_await VsockDeviceDialer(path, port, device_uid)->Dial(io.get_executor());
        if (!socket) {
          result = socket.error();
          co_return;
        }
        std::string rest;
        boost::system::error_code ec;
        asio::read(*socket, asio::dynamic_buffer(rest), ec);  // until the device closes
        result = rest;
      },
      asio::detached);
  io.run();
  return result.value_or(MakeError(ErrorCode::kInternal, "the dial never finished"));
}

TEST(VsockDeviceDialer, SendsConnectAndLeavesWhatFollowsTheAnswerToTheCaller) {
  FakeDevice device("OK 1073741824\ninit speaks first");
  auto rest = DialAndRead(device.path(), 1024);
  ASSERT_TRUE(rest) << rest.error().message;
  EXPECT_EQ(*rest, "init speaks first");
  EXPECT_EQ(device.request(), "CONNECT 1024");
}

TEST(VsockDeviceDialer, AClosedPortIsTheSandboxBeingUnreachable) {
  FakeDevice device("");  // the device closes: nothing listens on that port in the guest
  auto rest = DialAndRead(device.path(), 1024);
  ASSERT_FALSE(rest);
  EXPECT_EQ(rest.error().detail_code, "sandbox_unreachable");
  EXPECT_NE(rest.error().message.find("vsock port 1024 refused"), std::string::npos) << rest.error().message;
}

TEST(VsockDeviceDialer, AnythingButOkIsRefused) {
  for (const std::string& answer : {std::string("NO 5\n"), std::string(100, 'O') + "\n", std::string("OK 1")}) {
    FakeDevice device(answer);
    auto rest = DialAndRead(device.path(), 7);
    EXPECT_FALSE(rest) << answer;
  }
}

TEST(VsockDeviceDialer, ADeviceServedByAnotherUidIsRefusedBeforeTheHandshake) {
  FakeDevice device("OK 1\nnot the sandbox's init");  // served by this test's uid, not 4242
  auto rest = DialAndRead(device.path(), 1024, 4242);
  ASSERT_FALSE(rest);
  EXPECT_EQ(rest.error().detail_code, "sandbox_unreachable");
  EXPECT_NE(rest.error().message.find("not served by the sandbox's device"), std::string::npos) << rest.error().message;
}

TEST(VsockDeviceDialer, ADeviceServedByTheExpectedUidIsDialed) {
  FakeDevice device("OK 1\nhello");
  auto rest = DialAndRead(device.path(), 1024, ::getuid() == 0 ? 0 : ::getuid());
  ASSERT_TRUE(rest) << rest.error().message;
  EXPECT_EQ(*rest, "hello");
}

// vhost-device-vsock 0.3.0 ends its device when it answers a connection already closed: a dial
// given up on before the answer must leave its connection open until the answer came.
TEST(VsockDeviceDialer, ADialGivenUpOnBeforeTheAnswerIsHeldOpenUntilTheAnswerComes) {
  std::promise<void> given_up;
  std::promise<std::pair<ssize_t, ssize_t>> answered;  // what the answer's send and the read after it got
  ScriptedDevice device({[&](int connection) {
    given_up.get_future().wait();
    const ssize_t sent = ::send(connection, "OK 1\n", 5, MSG_NOSIGNAL);
    timeval wait{10, 0};
    ::setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    char byte;
    answered.set_value({sent, ::read(connection, &byte, 1)});
  }});
  {
    asio::io_context io;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { (void)co_await VsockDeviceDialer(device.path(), 1024)->Dial(io.get_executor()); },
        asio::detached);
    io.run_for(std::chrono::milliseconds(200));  // the caller's timeout: the dial, unanswered, ends with io
  }
  given_up.set_value();
  auto [sent, after] = answered.get_future().get();
  EXPECT_EQ(sent, 5) << "the answer met a closed connection: " << std::strerror(errno);
  EXPECT_EQ(after, 0) << "the held connection was not closed once answered";
}

TEST(WaitForGuestPort, TriesAgainWhileTheGuestRefusesUntilItsListenerAccepts) {
  ScriptedDevice device({[](int) {}, [](int) {}, [](int connection) { (void)!::send(connection, "OK 9\n", 5, MSG_NOSIGNAL); }});
  Status served = WaitForGuestPort(device.path(), 1024, [] { return true; },
                                   std::chrono::steady_clock::now() + std::chrono::seconds(20));
  EXPECT_TRUE(served) << served.error().message;
}

TEST(WaitForGuestPort, ADeadlineLeavesTheUnansweredConnectionHeldAndSaysSo) {
  std::promise<ssize_t> answered;
  std::promise<void> timed_out;
  ScriptedDevice device({[&](int connection) {
    timed_out.get_future().wait();
    answered.set_value(::send(connection, "OK 9\n", 5, MSG_NOSIGNAL));
  }});
  Status served = WaitForGuestPort(device.path(), 1024, [] { return true; },
                                   std::chrono::steady_clock::now() + std::chrono::milliseconds(300));
  ASSERT_FALSE(served);
  EXPECT_NE(served.error().message.find("did not serve in time"), std::string::npos) << served.error().message;
  timed_out.set_value();
  EXPECT_EQ(answered.get_future().get(), 5);
}

TEST(WaitForGuestPort, AGuestThatStoppedEndsTheWait) {
  ScriptedDevice device({[](int) {}});
  Status served = WaitForGuestPort(device.path(), 1024, [] { return false; },
                                   std::chrono::steady_clock::now() + std::chrono::seconds(20));
  ASSERT_FALSE(served);
  EXPECT_NE(served.error().message.find("stopped"), std::string::npos) << served.error().message;
}

TEST(VsockDeviceDialer, NoDeviceIsUnreachable) {
  auto rest = DialAndRead("/nonexistent/vsock.sock", 1024);
  ASSERT_FALSE(rest);
  EXPECT_EQ(rest.error().detail_code, "sandbox_unreachable");
}

}  // namespace
}  // namespace bulkhead::runtime
