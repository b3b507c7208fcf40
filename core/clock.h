// The time a process reads, as a seam (LevelDB's Env in small): the coordinator, its round
// engine and drivers, the stream registry and the edge client's transport ask a Clock for
// the time and wait on it, so a test moves a fake one (tests/core/fake_clock.h) instead of
// sleeping across a deadline.
//
// Thread-safe.
#ifndef FEDLGC_CORE_CLOCK_H_
#define FEDLGC_CORE_CLOCK_H_

#include <chrono>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace fedlgc::core {

class Clock {
 public:
  // Deadlines and durations are steady; only what crosses the wire (a round's deadline in
  // Unix milliseconds, a gRPC call's deadline) is wall time.
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;

  virtual time_point Now() const = 0;
  virtual std::chrono::system_clock::time_point WallNow() const = 0;
  // Waits on `cv` (with `mu` held) until it is signalled or `until` passes; may wake
  // early, so callers loop on their condition. A fake clock moves to `until` instead.
  virtual void WaitUntil(absl::CondVar* cv, absl::Mutex* mu, time_point until)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // The process's clock: std::chrono's steady and system clocks.
  static Clock* Real();
};

// Seconds from `t0` to the clock's now.
inline double SecondsSince(const Clock& clock, Clock::time_point t0) {
  return std::chrono::duration<double>(clock.Now() - t0).count();
}

// A wall-clock time as the wire's *_unix_ms fields carry it.
inline int64_t UnixMs(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_CLOCK_H_
