#include "core/lifecycle.h"

#include <array>
#include <utility>

namespace bulkhead::core {
namespace {

constexpr std::array<std::pair<State, std::string_view>, 7> kNames = {{
    {State::kStarting, "starting"},
    {State::kPooled, "pooled"},
    {State::kRunning, "running"},
    {State::kPaused, "paused"},
    {State::kStopped, "stopped"},
    {State::kError, "error"},
    {State::kDeleting, "deleting"},
}};

struct Move {
  State from, to;
};

// Every move but the ones to kDeleting, which any state may take.
constexpr std::array<Move, 12> kMoves = {{
    {State::kStarting, State::kPooled},   // a warm-pool sandbox, booted and waiting
    {State::kStarting, State::kRunning},  // a create's own sandbox
    {State::kPooled, State::kRunning},    // handed out
    {State::kRunning, State::kPaused},
    {State::kPaused, State::kRunning},
    {State::kRunning, State::kStopped},
    {State::kPaused, State::kStopped},
    {State::kError, State::kStopped},
    {State::kRunning, State::kError},  // its init died under it
    {State::kPaused, State::kError},
    {State::kStopped, State::kRunning},  // booted again
    {State::kError, State::kRunning},
}};

}  // namespace

std::string_view StateName(State state) {
  for (const auto& [s, name] : kNames)
    if (s == state) return name;
  return "error";
}

std::optional<State> ParseState(std::string_view name) {
  for (const auto& [s, n] : kNames)
    if (n == name) return s;
  return std::nullopt;
}

bool CanMove(State from, State to) {
  if (to == State::kDeleting || from == to) return true;
  for (const Move& m : kMoves)
    if (m.from == from && m.to == to) return true;
  return false;
}

Plan PlanFor(Call call, State state, bool on_disk) {
  if (state == State::kPaused && on_disk) {
    switch (call) {
      case Call::kPause:
      case Call::kHibernate: return {Step::kNothing, {}};
      case Call::kResume:
      case Call::kStart: return {Step::kBoot, {}};
      case Call::kStop: return {Step::kEnd, {}};
      case Call::kSnapshot: return {Step::kCapture, {}};
    }
  }
  switch (call) {
    case Call::kPause:
      if (state == State::kRunning) return {Step::kFreeze, {}};
      if (state == State::kPaused) return {Step::kNothing, {}};
      return {Step::kRefuse, "only a running sandbox can be paused"};
    case Call::kResume:
      if (state == State::kPaused) return {Step::kThaw, {}};
      if (state == State::kRunning) return {Step::kNothing, {}};
      return {Step::kRefuse, "only a paused sandbox can be resumed (POST .../start boots a stopped one)"};
    case Call::kStop:
      if (state == State::kStopped) return {Step::kNothing, {}};
      if (state == State::kRunning || state == State::kPaused || state == State::kError) return {Step::kEnd, {}};
      return {Step::kRefuse, "it is not running"};
    case Call::kStart:
      if (state == State::kRunning) return {Step::kNothing, {}};
      if (state == State::kPaused) return {Step::kThaw, {}};
      if (state == State::kStopped || state == State::kError) return {Step::kBoot, {}};
      return {Step::kRefuse, "it is not stopped"};
    case Call::kSnapshot:
      if (state == State::kRunning || state == State::kPaused || state == State::kStopped) return {Step::kCapture, {}};
      return {Step::kRefuse, "only a running, paused or stopped sandbox has files to capture"};
    case Call::kHibernate:
      if (state == State::kRunning || state == State::kPaused) return {Step::kHibernate, {}};
      return {Step::kRefuse, "only a running or paused sandbox has memory to write to disk"};
  }
  return {Step::kRefuse, "unknown call"};
}

}  // namespace bulkhead::core
