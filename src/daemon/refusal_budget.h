// How many refused keys from one client address get an audit record each. A client that sends
// bad keys fast would otherwise fill the audit log and slow every call behind its writes: the
// first kPerWindow refusals of a source in a window are recorded one by one, the rest only
// counted, and the count is recorded once (TakeCounted) when the window ends. Thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace bulkhead::api {

class RefusalBudget {
 public:
  static constexpr int64_t kPerWindow = 20;
  static constexpr int64_t kWindowMs = 60'000;
  // Past this many sources in a window, new ones share one entry ("*"): many addresses must
  // not make the map as big as one address makes the log.
  static constexpr size_t kMaxSources = 10'000;

  // Whether this refusal from `source` gets a record of its own; if not, it is counted.
  bool Admit(const std::string& source, int64_t now_ms);

  struct Counted {
    std::string source;
    int64_t refusals = 0;  // refusals without a record of their own
    int64_t window_start_ms = 0;
  };
  // The windows ended by `now_ms` with refusals counted, each once; their sources start anew.
  std::vector<Counted> TakeCounted(int64_t now_ms);

 private:
  struct Window {
    int64_t start_ms = 0;
    int64_t refusals = 0;  // all of them, recorded or not
  };
  std::mutex mu_;
  std::map<std::string, Window> windows_;  // by source
};

}  // namespace bulkhead::api
