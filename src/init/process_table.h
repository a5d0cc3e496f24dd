// Init's table of background processes (ctl_protocol.h): started by a kExec with
// "background", listed by kProcList, found by kProcAttach. The table, not a connection, owns
// them: a process lives on when the connection that started it closes.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/result.h"
#include "init/background_process.h"
#include "init/exec_request.h"
#include "init/poller.h"

namespace bulkhead::init {

class ProcessTable {
 public:
  explicit ProcessTable(Poller& poller) : poller_(poller) {}
  ~ProcessTable();

  // Epoll tokens of processes have this bit set; session tokens never do.
  static bool OwnsToken(uint64_t token) { return (token & kTokenBit) != 0; }

  // Spawns the command (its stdin always open) and registers it. Errors as SpawnCommand's.
  Result<std::shared_ptr<BackgroundProcess>> Start(ExecRequest request);
  // nullptr if no process with that pid is listed.
  std::shared_ptr<BackgroundProcess> Find(pid_t pid) const;
  // {"processes": [Process...]} sorted by pid.
  ctl::ProcessList List() const;

  void OnEvent(uint64_t token);
  // Returns true if `pid` was one of the table's running processes.
  bool OnChildExit(pid_t pid, int wait_status);
  // SIGKILLs the process group of every process not reaped yet (init is shutting down).
  void KillAll();

  // True if some process produced output, exited or drained its stdin since the last call:
  // attached connections may have something to do.
  bool TakeChanged() { return std::exchange(changed_, false); }

 private:
  static constexpr uint64_t kTokenBit = uint64_t(1) << 63;

  struct Entry {
    std::shared_ptr<BackgroundProcess> process;
    uint64_t done_order = 0;  // 0 while not done; else the order in which processes finished
  };

  // Notes a process that just finished and forgets the oldest finished ones beyond the cap.
  void Settle(Entry& entry);
  // Sheds output beyond ctl::kOutputBudgetBytes: the longest-finished process's first, then
  // the biggest running one's.
  void KeepOutputWithinBudget();

  Poller& poller_;
  std::map<uint64_t, Entry> entries_;  // by id; the token of a process's fd is kTokenBit | id << 8 | ProcessFd
  uint64_t next_id_ = 1;
  uint64_t next_done_order_ = 1;
  size_t done_count_ = 0;
  bool changed_ = false;
};

}  // namespace bulkhead::init
