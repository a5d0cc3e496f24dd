// A sandbox's lifecycle as a state machine: its states, the moves between them, and what each
// lifecycle call does in each state. Plain logic (tests/unit/core_lifecycle_test.cc); the
// manager does the work and calls MoveTo for every change of state.
//
//   starting -> pooled -> running <-> paused      (pause / resume)
//                  \________^  |  \      |
//                              v   v     v
//                           error -> stopped -> running   (stop / start)
//   any state -> deleting (and the sandbox is gone)
//
// A paused sandbox may be paused to disk (hibernated): its memory and processes written out by
// its tier and its processes ended, so it holds no RAM and outlives a host reboot. It stays
// "paused"; a resume (or start) boots it again from that image, a stop drops the image.
#pragma once
#include <optional>
#include <string_view>

namespace bulkhead::core {

enum class State { kStarting, kPooled, kRunning, kPaused, kStopped, kError, kDeleting };

// The state as the API and the state database spell it ("running", ...).
std::string_view StateName(State state);
std::optional<State> ParseState(std::string_view name);

// Whether a sandbox may go from `from` to `to` (the transition table).
bool CanMove(State from, State to);

// The lifecycle calls of the API.
enum class Call { kPause, kResume, kStop, kStart, kSnapshot, kHibernate };

// What a call does to a sandbox in a state.
enum class Step {
  kNothing,   // it is there already: answer the sandbox as it is
  kFreeze,    // freeze every process (running -> paused)
  kThaw,      // thaw them (paused -> running)
  kEnd,       // end every process, keep the files (-> stopped)
  kBoot,      // boot it again on its files, or from its memory on disk (-> running)
  kCapture,   // capture its files (frozen meanwhile if running)
  kHibernate, // write its memory and processes to disk, end them (-> paused, on disk)
  kRefuse,    // 409: Plan::why says why
};

struct Plan {
  Step step;
  std::string_view why;  // for kRefuse
};

// `on_disk`: a paused sandbox's memory is on disk (hibernated), no process runs.
Plan PlanFor(Call call, State state, bool on_disk = false);

}  // namespace bulkhead::core
