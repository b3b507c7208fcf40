// FedAvg (McMahan et al. 2017; docs/modes.md) at the coordinator: every participant
// uploads its update (new minus old weights, through the round's codec); the round
// collects the updates (a partial one counts for the ranges that arrived), clips them and
// aggregates them with the job's aggregator (weighted mean by default; docs/robustness.md),
// and at quorum or deadline the aggregate goes through the server optimizer (SGD with
// server lr and momentum; lr 1 without momentum is plain FedAvg). With --dp its rounds are
// DP-FedAvg's (dp_rounds.h). What else makes a round of a job differ from the plain summed
// round is a round protocol (round_protocol.h).
#ifndef FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_
#define FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_

#include <functional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "coordinator/robust.h"
#include "coordinator/round_driver.h"
#include "modes/fedavg/round_protocol.h"

namespace fedlgc::modes {

struct FedAvgOptions {
  float server_lr = 1.0f;
  float server_momentum = 0.0f;
  // --rounds-mode: "sync" (rounds that wait for their participants) or buffered(...)
  // (buffered_rounds.h).
  std::string rounds_mode = "sync";
  // --dp, --dp-epsilon, --dp-delta, --dp-max-epsilon: user-level differential privacy
  // (dp_rounds.h); "" or "none": off.
  std::string dp;
  double dp_epsilon = 0;
  double dp_delta = 1e-5;
  double dp_max_epsilon = 0;
  // --secagg: secure aggregation of the updates' integer codes (secagg_rounds.h); "" or
  // "none": off.
  std::string secagg;
  // --algorithm: fedavg, fedprox(mu=M) or scaffold (algorithm.h).
  std::string algorithm = "fedavg";

  absl::Status Validate() const;
  coordinator::ServerOptimizer optimizer() const { return {server_lr, server_momentum}; }
  bool operator==(const FedAvgOptions&) const = default;
};

// What a summed round keeps between rounds: the streaming aggregator's clip bound for
// the next round (its multiplier x the lower median of this round's update norms).
struct SummedRoundState {
  double next_bound = 0;  // 0: none yet
  // The round's codec when its codes are summed without decoding (GradiVeQ), set by the
  // driver before each round; null: chunks are decoded as they arrive.
  const codecs::LinearCode* code = nullptr;
};

// What a round protocol makes of the summed round's collector before the round opens
// (SCAFFOLD: a PartCollector of it, as part 0, and of its control variates' changes).
using CollectorWrap = std::function<std::shared_ptr<coordinator::Collector>(
    std::shared_ptr<coordinator::Collector> model_part)>;

// One FedAvg round: opens it collecting each client's update (or, with the streaming
// aggregator, a running weighted sum), waits until every participant has sent every
// chunk or the deadline, clips and aggregates (coordinator/robust.h), and commits the
// result through `optimizer` under the model guard: a candidate the guard refuses is
// tried again without the largest updates, whose senders are quarantined. LGC's
// warm-up rounds run the same. Report figures: "clip_bound", "clipped", the guard's
// (ChooseUnderGuard), per client "update_norm".
// `tick` (when given) runs while the round waits (RoundHost::WaitUntil). `wrap` (when
// given) makes the collector the round opens with from the aggregator's, which collects
// part 0 (the model update) as it would alone; the commit is the aggregator's, of part 0.
absl::Status RunSummedRound(coordinator::RoundHost& host,
                            const std::vector<std::string>& participants,
                            coordinator::Clock::time_point deadline,
                            const coordinator::ServerOptimizer& optimizer,
                            const coordinator::AggregatorOptions& robust, SummedRoundState* state,
                            coordinator::CommitResult* commit, RoundReport* report,
                            const std::function<void()>& tick = nullptr,
                            const CollectorWrap& wrap = nullptr);

// What a buffered round does once its updates are in: clips `all` (the job's clip
// multiplier x the lower median norm), aggregates them with the job's aggregator and
// commits the result through `optimizer` under the model guard, leaving out the largest
// updates (at most a minority, quarantined) when it refuses. `counted` (may be null): the
// clients whose update the committed aggregate weighed (none when nothing passed).
absl::Status AggregateAndCommit(coordinator::RoundHost& host,
                                std::span<const coordinator::Contribution> all,
                                const coordinator::ServerOptimizer& optimizer,
                                const coordinator::AggregatorOptions& robust,
                                coordinator::CommitResult* commit, RoundReport* report,
                                std::set<std::string>* counted);

// Opens the round with `collector` and waits for every update or the deadline, then
// freezes the engine's round (the aggregate and the receipts cover the same chunks).
// False when the coordinator stops.
absl::StatusOr<bool> CollectRound(coordinator::RoundHost& host,
                                  const std::vector<std::string>& participants,
                                  coordinator::Clock::time_point deadline,
                                  std::shared_ptr<coordinator::Collector> collector,
                                  RoundReport* report, const std::function<void()>& tick);

// The FedAvg driver runs each round over the job's round protocols (round_protocol.h,
// assembled from round_protocols.cc's table): with none, the plain summed round.
class FedAvgDriver final : public coordinator::RoundDriver {
 public:
  // What this mode answers about itself (coordinator/mode_traits.h).
  static const coordinator::ModeTraits& Traits();
  static absl::StatusOr<std::unique_ptr<FedAvgDriver>> Create(const FedAvgOptions& options,
                                                              const coordinator::DriverEnv& env);

  Mode mode() const override { return Mode::kFedAvg; }
  absl::Status RunRound(coordinator::RoundHost& host, const std::vector<std::string>& participants,
                        coordinator::Clock::time_point deadline, coordinator::CommitResult* commit,
                        RoundReport* report) override;
  void DecorateRoundStart(const std::string& client, protos::RoundStart* start) override;
  absl::Status AcceptReport(const std::string& client,
                            const protos::ProgressReport& report) override;
  absl::StatusOr<std::shared_ptr<const coordinator::ModelBlob>> Blob(const std::string& client,
                                                                     const std::string& name,
                                                                     uint64_t version) override;
  // A protocol's blob that it broadcasts (RoundProtocol::Broadcasts).
  bool Broadcasts(const std::string& name) const override;
  absl::Status Save(uint64_t round) override;
  size_t KeepVersions() const override;
  std::optional<std::string> Exhausted() const override;
  bool AllowsClientStatistics() const override;

  // The job's protocols, in the order a round consults them.
  std::vector<ProtocolId> protocols() const;

 private:
  FedAvgDriver(const FedAvgOptions& options, const coordinator::AggregatorOptions& robust)
      : optimizer_(options.optimizer()), robust_(robust) {}

  const coordinator::ServerOptimizer optimizer_;
  const coordinator::AggregatorOptions robust_;
  std::vector<std::unique_ptr<RoundProtocol>> protocols_;
  SummedRoundState state_;  // the round loop's thread only
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_
