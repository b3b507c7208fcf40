#include "core/clock.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace fedlgc::core {
namespace {

class RealClock final : public Clock {
 public:
  time_point Now() const override { return std::chrono::steady_clock::now(); }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::now();
  }
  void WaitUntil(absl::CondVar* cv, absl::Mutex* mu, time_point until) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const auto left = until - Now();
    if (left <= duration::zero()) return;
    cv->WaitWithTimeout(mu, absl::FromChrono(left));
  }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace fedlgc::core
