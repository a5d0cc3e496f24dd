#include "init/process_table.h"

#include <signal.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "common/ctl_protocol.h"
#include "init/exit_report.h"
#include "init/spawn.h"

namespace bulkhead::init {
namespace {

timespec RealtimeNow() {
  timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  return now;
}

}  // namespace

ProcessTable::~ProcessTable() {
  // Attached connections may outlive the table's references; none may touch the poller later.
  for (auto& [id, entry] : entries_) entry.process->Close();
}

Result<std::shared_ptr<BackgroundProcess>> ProcessTable::Start(ExecRequest request) {
  request.stdin_enabled = true;  // a background process's stdin is always open
  timespec started = MonotonicNow();
  timespec started_real = RealtimeNow();
  auto command = SpawnCommand(request);
  if (!command.ok()) return command.error();
  pid_t pid = command->pid;

  try {
    // The pid of a listed exited process was reused: the new process takes its place.
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.process->pid() != pid) continue;
      it->second.process->Close();
      if (it->second.done_order != 0) --done_count_;
      entries_.erase(it);
      break;
    }
    uint64_t id = next_id_++;
    auto process = std::make_shared<BackgroundProcess>(kTokenBit | (id << 8), poller_, std::move(*command), request,
                                                       started, started_real);
    entries_.emplace(id, Entry{process});
    return process;
  } catch (const std::exception&) {
    ::kill(-pid, SIGKILL);  // out of memory: nobody would own it
    return MakeError(ErrorCode::kInternal, "out of memory registering the process");
  }
}

std::shared_ptr<BackgroundProcess> ProcessTable::Find(pid_t pid) const {
  for (const auto& [id, entry] : entries_) {
    if (entry.process->pid() == pid) return entry.process;
  }
  return nullptr;
}

ctl::ProcessList ProcessTable::List() const {
  std::vector<const BackgroundProcess*> sorted;
  for (const auto& [id, entry] : entries_) sorted.push_back(entry.process.get());
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->pid() < b->pid(); });
  ctl::ProcessList list;
  for (const auto* process : sorted) list.processes.push_back(process->Info());
  return list;
}

void ProcessTable::OnEvent(uint64_t token) {
  auto it = entries_.find((token & ~kTokenBit) >> 8);
  if (it == entries_.end()) return;  // a stale event for a process already forgotten
  it->second.process->OnEvent(ProcessFd(token & 0xff));
  changed_ = true;
  Settle(it->second);
  KeepOutputWithinBudget();
}

void ProcessTable::KeepOutputWithinBudget() {
  size_t total = 0;
  for (const auto& [id, entry] : entries_) total += entry.process->output().bytes();
  while (total > ctl::kOutputBudgetBytes) {
    // Candidates in order of preference; one whose holder blocks it is passed over.
    std::vector<Entry*> order;
    for (auto& [id, entry] : entries_) {
      if (entry.process->output().bytes() > 0) order.push_back(&entry);
    }
    std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
      if ((a->done_order != 0) != (b->done_order != 0)) return a->done_order != 0;
      if (a->done_order != 0) return a->done_order < b->done_order;
      return a->process->output().bytes() > b->process->output().bytes();
    });
    size_t dropped = 0;
    for (Entry* entry : order) {
      if ((dropped = entry->process->ShedOutput()) > 0) break;
    }
    if (dropped == 0) return;  // all held: the holders bound it (they stop the reading)
    total -= dropped;
  }
}

bool ProcessTable::OnChildExit(pid_t pid, int wait_status) {
  for (auto& [id, entry] : entries_) {
    if (entry.process->OnChildExit(pid, wait_status)) {
      changed_ = true;
      Settle(entry);
      return true;
    }
  }
  return false;
}

void ProcessTable::Settle(Entry& entry) {
  if (entry.done_order != 0 || !entry.process->done()) return;
  entry.done_order = next_done_order_++;
  ++done_count_;
  while (done_count_ > ctl::kMaxExitedProcesses) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.done_order != 0 &&
          (oldest == entries_.end() || it->second.done_order < oldest->second.done_order)) {
        oldest = it;
      }
    }
    oldest->second.process->Close();
    entries_.erase(oldest);
    --done_count_;
  }
}

void ProcessTable::KillAll() {
  for (auto& [id, entry] : entries_) entry.process->Signal(SIGKILL);
}

}  // namespace bulkhead::init
