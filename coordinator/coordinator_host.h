// What the coordinator process lends a round's driver (RoundHost, round_driver.h): its
// engine, service, metrics, compressed downlink and model guard, and the one place the
// round loop sleeps. A chunk or report that arrives (WakeUp) and Stop end any wait early.
#ifndef FEDLGC_COORDINATOR_COORDINATOR_HOST_H_
#define FEDLGC_COORDINATOR_COORDINATOR_HOST_H_

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/round_driver.h"

namespace fedlgc::coordinator {

class CoordinatorService;
class Downlinks;
class Progress;

// The parts a host drives; none owned, all outlive the host.
struct HostParts {
  RoundEngine* engine = nullptr;
  monitoring::Metrics* metrics = nullptr;
  CoordinatorService* service = nullptr;
  const Downlinks* downlinks = nullptr;  // null: models go down as float32
  ModelGuard* guard = nullptr;           // the round loop's thread only
  Progress* progress = nullptr;          // written to <state_dir>/progress.json
  std::string state_dir;
  core::Clock* clock = nullptr;
};

// Thread-safe: the round loop's thread runs the driver through it; WakeUp and Stop come
// from any thread (the service's on a chunk, a signal handler's).
class CoordinatorHost final : public RoundHost {
 public:
  explicit CoordinatorHost(HostParts parts) : parts_(std::move(parts)) {}

  // Any wait of the round loop (WaitUntil, Nap) returns now and checks its condition.
  void WakeUp();
  // Ends every wait for good: stopped() is true from now on.
  void Stop();
  // Sleeps until `until`, a wake-up or Stop, whichever comes first.
  void Nap(Clock::time_point until);
  // <state_dir>/progress.json, when due (progress.h) or `force`d; a failure is logged
  // once and costs nothing else.
  void WriteProgress(bool force = false);

  // RoundHost.
  RoundEngine& engine() override { return *parts_.engine; }
  monitoring::Metrics& metrics() override { return *parts_.metrics; }
  absl::Status StartRound(const std::vector<std::string>& participants, Clock::time_point deadline,
                          std::shared_ptr<Collector> collector,
                          const std::set<std::string>* uploaders) override;
  absl::Status StartRollingRound(const std::vector<std::string>& participants,
                                 Clock::time_point deadline,
                                 std::shared_ptr<Collector> collector) override;
  absl::StatusOr<size_t> AskMore(const std::vector<std::string>& clients,
                                 Clock::time_point deadline) override;
  void WaitUntil(Clock::time_point deadline, const std::function<bool()>& done,
                 const std::function<void()>& tick) override;
  bool stopped() const override { return stop_; }
  std::vector<std::string> Connected() const override;
  std::set<std::string> Vanished(const std::set<std::string>& watched,
                                 Clock::time_point since) const override;
  bool Push(const std::string& client, const protos::ServerEvent& event) override;
  double LinkBytesPerSecond(const std::string& client) const override;
  absl::StatusOr<GuardVerdict> CheckModel(std::span<const float> candidate) override;
  void Quarantine(const std::set<std::string>& clients, const std::string& why) override;
  std::vector<float> ServedModel() const override;
  Clock::time_point Now() const override { return parts_.clock->Now(); }

 private:
  const HostParts parts_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> progress_error_logged_{false};
  absl::Mutex mu_;  // only for cv_: the waits' state is stop_ and the callers' `done`
  absl::CondVar cv_;
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_COORDINATOR_HOST_H_
