// InitListener (src/runtime/init_listener.h), and init's side of it: an init whose fd 3 is the
// control directory dials the daemon there and keeps connections waiting (init/main.cc).
#include "runtime/init_listener.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without including it
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "init_client.h"

// g++ 12 reports a false -Wmismatched-new-delete on asio's coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace bulkhead::runtime {
namespace {
namespace asio = boost::asio;
using init_testing::Client;

// One Dial, run for at most `budget`: the connection, or an empty fd (nothing came in time, or
// the Dial failed: `error` says which).
UniqueFd DialFor(const InitListener& listener, std::chrono::milliseconds budget, std::string* error = nullptr) {
  asio::io_context io;
  UniqueFd got;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto socket = co_await listener.Dial(io.get_executor());
    if (socket.ok()) {
      got.reset(::dup(socket->native_handle()));
    } else if (error) {
      *error = socket.error().message;
    }
  }, asio::detached);
  io.run_for(budget);
  return got;
}

UniqueFd ConnectTo(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return UniqueFd();
  return fd;
}

class InitListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/bulkhead-listener-test-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/" + ctl::kDaemonSocketName;
  }
  void TearDown() override {
    if (init_pid_ > 0) {
      ::kill(init_pid_, SIGTERM);
      int status = 0;
      ::waitpid(init_pid_, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "init did not exit 0 on SIGTERM";
    }
    std::filesystem::remove_all(dir_);
  }

  // bulkhead-init with fd 3 the control directory, as self_contain.h leaves it under gVisor.
  void StartDialingInit() {
    ASSERT_TRUE(std::filesystem::exists(init_testing::InitBinary()));
    init_pid_ = ::fork();
    ASSERT_GE(init_pid_, 0);
    if (init_pid_ == 0) {
      const int null_fd = ::open("/dev/null", O_RDWR);
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
      const int dir = ::open(dir_.c_str(), O_PATH | O_DIRECTORY);
      ::dup2(dir, ctl::kListenFd);
      const std::string binary = init_testing::InitBinary().string();
      char* argv[] = {const_cast<char*>("bulkhead-init"), nullptr};
      ::execv(binary.c_str(), argv);
      ::_exit(127);
    }
  }

  // Pings through a connection the listener hands out.
  static bool Pings(const InitListener& listener) {
    Client client(DialFor(listener, std::chrono::seconds(5)));
    if (!client.connected()) return false;
    client.Send(ctl::kPing);
    auto pong = client.Read(std::chrono::seconds(5));
    return pong && pong->type == ctl::kPong;
  }

  std::string dir_, path_;
  pid_t init_pid_ = -1;
};

TEST_F(InitListenerTest, HandsOutAConnectionFromTheSandboxsUidAndKeepsTheSocketItsAlone) {
  auto listener = InitListener::Listen(path_, ::getuid());
  ASSERT_TRUE(listener->status().ok());
  struct stat socket_file {};
  ASSERT_EQ(::stat(path_.c_str(), &socket_file), 0);
  EXPECT_TRUE(S_ISSOCK(socket_file.st_mode));
  EXPECT_EQ(socket_file.st_mode & 0777, 0600u);
  EXPECT_EQ(socket_file.st_uid, ::getuid());

  EXPECT_FALSE(listener->WaitForInit(std::chrono::milliseconds(10)));
  UniqueFd init_side = ConnectTo(path_);
  ASSERT_TRUE(init_side);
  EXPECT_TRUE(listener->WaitForInit(std::chrono::milliseconds(1000)));
  UniqueFd daemon_side = DialFor(*listener, std::chrono::seconds(2));
  ASSERT_TRUE(daemon_side);
  ASSERT_EQ(::write(daemon_side.get(), "x", 1), 1);
  char byte = 0;
  EXPECT_EQ(::read(init_side.get(), &byte, 1), 1);
  EXPECT_EQ(byte, 'x');
}

TEST_F(InitListenerTest, AConnectionFromAnotherUidIsNotInit) {
  // The socket is the sandbox's uid's (here nobody's); root's connection stands in for
  // anyone else's that reaches it.
  auto listener = InitListener::Listen(path_, 65534);
  ASSERT_TRUE(listener->status().ok());
  struct stat socket_file {};
  ASSERT_EQ(::stat(path_.c_str(), &socket_file), 0);
  EXPECT_EQ(socket_file.st_uid, 65534u);
  UniqueFd impostor = ConnectTo(path_);
  ASSERT_TRUE(impostor);
  EXPECT_FALSE(DialFor(*listener, std::chrono::milliseconds(300)));
  // It was closed, not kept.
  char byte = 0;
  EXPECT_EQ(::read(impostor.get(), &byte, 1), 0);
}

TEST_F(InitListenerTest, ASocketThatCannotBeMadeFailsEachDialWithWhy) {
  auto listener = InitListener::Listen(dir_ + "/" + std::string(120, 'x'), ::getuid());
  EXPECT_FALSE(listener->status().ok());
  std::string error;
  EXPECT_FALSE(DialFor(*listener, std::chrono::seconds(1), &error));
  EXPECT_NE(error.find("too long"), std::string::npos) << error;
}

TEST_F(InitListenerTest, InitDialsKeepsConnectionsWaitingAndDialsAgainAfterTheDaemonsRestart) {
  auto listener = InitListener::Listen(path_, ::getuid());
  StartDialingInit();
  ASSERT_TRUE(listener->WaitForInit(std::chrono::seconds(5)));
  // More requests in flight than init keeps connections waiting: each gets a connection of
  // its own (the daemon sends its request as soon as it has one, and init then dials another).
  std::vector<Client> clients;
  for (int i = 0; i < 6; i++) {
    clients.emplace_back(DialFor(*listener, std::chrono::seconds(5)));
    ASSERT_TRUE(clients.back().connected()) << i;
    clients.back().Send(ctl::kPing);
  }
  for (auto& client : clients) {
    auto pong = client.Read(std::chrono::seconds(5));
    ASSERT_TRUE(pong && pong->type == ctl::kPong);
  }
  // The daemon restarts: its socket goes, and a new one listens at the same path. Init drops
  // the connections the old one never took and dials the new one.
  listener.reset();
  listener = InitListener::Listen(path_, ::getuid());
  EXPECT_TRUE(Pings(*listener));
  EXPECT_TRUE(Pings(*listener));
}

}  // namespace
}  // namespace bulkhead::runtime
