#include "daemon/refusal_budget.h"

namespace bulkhead::api {

bool RefusalBudget::Admit(const std::string& source, int64_t now_ms) {
  std::lock_guard lock(mu_);
  auto it = windows_.find(source);
  if (it == windows_.end()) {
    if (windows_.size() >= kMaxSources) it = windows_.try_emplace("*", Window{now_ms, 0}).first;
    else it = windows_.emplace(source, Window{now_ms, 0}).first;
  }
  Window& window = it->second;
  if (now_ms - window.start_ms >= kWindowMs && window.refusals <= kPerWindow) window = {now_ms, 0};
  return ++window.refusals <= kPerWindow;
}

std::vector<RefusalBudget::Counted> RefusalBudget::TakeCounted(int64_t now_ms) {
  std::vector<Counted> out;
  std::lock_guard lock(mu_);
  for (auto it = windows_.begin(); it != windows_.end();) {
    const Window& window = it->second;
    if (now_ms - window.start_ms < kWindowMs) {
      ++it;
      continue;
    }
    if (window.refusals > kPerWindow) out.push_back({it->first, window.refusals - kPerWindow, window.start_ms});
    it = windows_.erase(it);
  }
  return out;
}

}  // namespace bulkhead::api
