// A RoundHost for unit tests of a driver's parts, which override what they watch: the
// engine and the metrics abort (a test that needs them runs a coordinator), the rest does
// nothing (no clients, no pushes, every model passes). Its clock (a FakeClock) stands
// still until the test moves it.
#ifndef FEDLGC_TESTS_COORDINATOR_FAKE_ROUND_HOST_H_
#define FEDLGC_TESTS_COORDINATOR_FAKE_ROUND_HOST_H_

#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "coordinator/round_driver.h"
#include "tests/core/fake_clock.h"

namespace fedlgc::testing {

class FakeRoundHost : public coordinator::RoundHost {
 public:
  coordinator::RoundEngine& engine() override { std::abort(); }
  monitoring::Metrics& metrics() override { std::abort(); }
  absl::Status StartRound(const std::vector<std::string>&, coordinator::Clock::time_point,
                          std::shared_ptr<coordinator::Collector>,
                          const std::set<std::string>*) override {
    return absl::OkStatus();
  }
  absl::Status StartRollingRound(const std::vector<std::string>&, coordinator::Clock::time_point,
                                 std::shared_ptr<coordinator::Collector>) override {
    return absl::OkStatus();
  }
  absl::StatusOr<size_t> AskMore(const std::vector<std::string>&,
                                 coordinator::Clock::time_point) override {
    return 0;
  }
  void WaitUntil(coordinator::Clock::time_point, const std::function<bool()>&,
                 const std::function<void()>&) override {}
  bool stopped() const override { return false; }
  std::vector<std::string> Connected() const override { return {}; }
  std::set<std::string> Vanished(const std::set<std::string>&,
                                 coordinator::Clock::time_point) const override {
    return {};
  }
  bool Push(const std::string&, const protos::ServerEvent&) override { return false; }
  double LinkBytesPerSecond(const std::string&) const override { return 0; }
  absl::StatusOr<coordinator::GuardVerdict> CheckModel(std::span<const float>) override {
    return coordinator::GuardVerdict();
  }
  void Quarantine(const std::set<std::string>& clients, const std::string&) override {
    quarantined_.insert(clients.begin(), clients.end());
  }
  // Every client Quarantine barred.
  const std::set<std::string>& quarantined() const { return quarantined_; }
  std::vector<float> ServedModel() const override { return {}; }
  coordinator::Clock::time_point Now() const override { return clock.Now(); }

  core::FakeClock clock;

 private:
  std::set<std::string> quarantined_;
};

}  // namespace fedlgc::testing

#endif  // FEDLGC_TESTS_COORDINATOR_FAKE_ROUND_HOST_H_
