// A Clock that moves only when told to, or when someone waits on it: WaitUntil moves it to
// the deadline at once, so code that waits out a backoff or a round's deadline runs
// through it without sleeping, and a test reads how long it would have waited.
#ifndef FEDLGC_TESTS_CORE_FAKE_CLOCK_H_
#define FEDLGC_TESTS_CORE_FAKE_CLOCK_H_

#include <chrono>

#include "absl/synchronization/mutex.h"
#include "core/clock.h"

namespace fedlgc::core {

class FakeClock final : public Clock {
 public:
  // Starts at an arbitrary, fixed instant of each clock.
  FakeClock()
      : now_(time_point() + std::chrono::hours(1000)),
        wall_(std::chrono::system_clock::time_point() + std::chrono::hours(500000)) {}

  time_point Now() const override {
    absl::MutexLock l(&mu_);
    return now_;
  }
  std::chrono::system_clock::time_point WallNow() const override {
    absl::MutexLock l(&mu_);
    return wall_;
  }
  void WaitUntil(absl::CondVar*, absl::Mutex*, time_point until) override {
    absl::MutexLock l(&mu_);
    if (until > now_) Move(until - now_);
  }

  void Advance(duration d) {
    absl::MutexLock l(&mu_);
    Move(d);
  }
  template <typename Rep, typename Period>
  void Advance(std::chrono::duration<Rep, Period> d) {
    Advance(std::chrono::duration_cast<duration>(d));
  }

 private:
  void Move(duration d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    now_ += d;
    wall_ += std::chrono::duration_cast<std::chrono::system_clock::duration>(d);
  }

  mutable absl::Mutex mu_;
  time_point now_ ABSL_GUARDED_BY(mu_);
  std::chrono::system_clock::time_point wall_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::core

#endif  // FEDLGC_TESTS_CORE_FAKE_CLOCK_H_
