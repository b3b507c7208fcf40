// FedAvg (McMahan et al. 2017; docs/modes.md) at the coordinator: every participant
// uploads its update (new minus old weights, through the round's codec); the round
// collects a weighted sum per coordinate (WeightedSumCollector, weights = samples), so a
// partial update counts for the ranges that arrived; at quorum or deadline the mean goes
// through the server optimizer (SGD with server lr and momentum; lr 1 without momentum is
// plain FedAvg). No report figures of its own.
#ifndef FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_
#define FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_

#include <string>
#include <vector>

#include "coordinator/round_driver.h"

namespace fedlgc::modes {

struct FedAvgOptions {
  float server_lr = 1.0f;
  float server_momentum = 0.0f;

  absl::Status Validate() const;
  coordinator::ServerOptimizer optimizer() const { return {server_lr, server_momentum}; }
  bool operator==(const FedAvgOptions&) const = default;
};

// One FedAvg round: opens it collecting a weighted sum, waits until every participant
// has sent every chunk or the deadline, and commits the mean through `optimizer`. LGC's
// warm-up rounds run the same.
absl::Status RunSummedRound(coordinator::RoundHost& host,
                            const std::vector<std::string>& participants,
                            coordinator::Clock::time_point deadline,
                            const coordinator::ServerOptimizer& optimizer,
                            coordinator::CommitResult* commit, RoundReport* report);

class FedAvgDriver final : public coordinator::RoundDriver {
 public:
  explicit FedAvgDriver(const FedAvgOptions& options) : optimizer_(options.optimizer()) {}

  Mode mode() const override { return Mode::kFedAvg; }
  absl::Status RunRound(coordinator::RoundHost& host, const std::vector<std::string>& participants,
                        coordinator::Clock::time_point deadline, coordinator::CommitResult* commit,
                        RoundReport* report) override {
    return RunSummedRound(host, participants, deadline, optimizer_, commit, report);
  }
  void DecorateRoundStart(const std::string& client, protos::RoundStart* start) override;
  absl::Status Save(uint64_t) override { return absl::OkStatus(); }  // nothing beyond the engine

 private:
  const coordinator::ServerOptimizer optimizer_;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_
