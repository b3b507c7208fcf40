// FedAvg (McMahan et al. 2017; docs/modes.md) at the coordinator: every participant
// uploads its update (new minus old weights, through the round's codec); the round
// collects the updates (a partial one counts for the ranges that arrived), clips them and
// aggregates them with the job's aggregator (weighted mean by default; docs/robustness.md),
// and at quorum or deadline the aggregate goes through the server optimizer (SGD with
// server lr and momentum; lr 1 without momentum is plain FedAvg).
#ifndef FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_
#define FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_

#include <string>
#include <vector>

#include "coordinator/robust.h"
#include "coordinator/round_driver.h"

namespace fedlgc::modes {

struct FedAvgOptions {
  float server_lr = 1.0f;
  float server_momentum = 0.0f;

  absl::Status Validate() const;
  coordinator::ServerOptimizer optimizer() const { return {server_lr, server_momentum}; }
  bool operator==(const FedAvgOptions&) const = default;
};

// What a summed round keeps between rounds: the streaming aggregator's clip bound for
// the next round (its multiplier x the lower median of this round's update norms).
struct SummedRoundState {
  double next_bound = 0;  // 0: none yet
};

// One FedAvg round: opens it collecting each client's update (or, with the streaming
// aggregator, a running weighted sum), waits until every participant has sent every
// chunk or the deadline, clips and aggregates (coordinator/robust.h), and commits the
// result through `optimizer` under the model guard: a candidate the guard refuses is
// tried again without the largest updates, whose senders are quarantined. LGC's
// warm-up rounds run the same. Report figures: "clip_bound", "clipped", the guard's
// (ChooseUnderGuard), per client "update_norm".
absl::Status RunSummedRound(coordinator::RoundHost& host,
                            const std::vector<std::string>& participants,
                            coordinator::Clock::time_point deadline,
                            const coordinator::ServerOptimizer& optimizer,
                            const coordinator::AggregatorOptions& robust, SummedRoundState* state,
                            coordinator::CommitResult* commit, RoundReport* report);

class FedAvgDriver final : public coordinator::RoundDriver {
 public:
  FedAvgDriver(const FedAvgOptions& options, const coordinator::AggregatorOptions& robust)
      : optimizer_(options.optimizer()), robust_(robust) {}

  Mode mode() const override { return Mode::kFedAvg; }
  absl::Status RunRound(coordinator::RoundHost& host, const std::vector<std::string>& participants,
                        coordinator::Clock::time_point deadline, coordinator::CommitResult* commit,
                        RoundReport* report) override {
    return RunSummedRound(host, participants, deadline, optimizer_, robust_, &state_, commit,
                          report);
  }
  void DecorateRoundStart(const std::string& client, protos::RoundStart* start) override;
  absl::Status Save(uint64_t) override { return absl::OkStatus(); }  // nothing beyond the engine

 private:
  const coordinator::ServerOptimizer optimizer_;
  const coordinator::AggregatorOptions robust_;
  SummedRoundState state_;  // the round loop's thread only
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_
