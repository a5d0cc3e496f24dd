// init's end of the sudo socket (sudo_protocol.h): accepts the `sudo` program's requests from
// the uids the sandbox's spec allows and runs each command as its target user, with the
// client's own stdin/stdout/stderr, like every other command (workload cgroup, seccomp).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "init/poller.h"

namespace bulkhead::init {

class SudoServer {
 public:
  // Does nothing until Allow().
  explicit SudoServer(Poller& poller);
  ~SudoServer();
  SudoServer(const SudoServer&) = delete;
  SudoServer& operator=(const SudoServer&) = delete;

  // Who may use sudo from now on (ctl::kSudoUsers): names and uids; names are looked up in
  // the sandbox's /etc/passwd when a client connects. The first call creates the socket;
  // false (with a message on stderr) if it cannot.
  bool Allow(std::vector<std::string> allowed);

  static bool OwnsToken(uint64_t token) { return (token & kTokenBit) != 0; }
  void OnEvent(uint64_t token);
  // Returns true if `pid` was a sudo command (its client is told how it ended).
  bool OnChildExit(pid_t pid, int wait_status);
  // Init is shutting down: every command's process group is killed.
  void KillAll();

 private:
  struct Client;
  static constexpr uint64_t kTokenBit = uint64_t(1) << 62;

  bool Listen();
  void Accept();
  void HandleRequest(Client& client);
  void HandleSignalMessage(Client& client);
  void Reply(Client& client, const std::string& json_text);
  void Remove(uint64_t id);
  void UpdateListener();
  bool Allowed(uid_t uid) const;

  Poller& poller_;
  std::vector<std::string> allowed_;
  PolledFd listener_;
  AcceptBackoff accept_backoff_;
  std::map<uint64_t, std::unique_ptr<Client>> clients_;
  uint64_t next_id_ = 1;
};

}  // namespace bulkhead::init
