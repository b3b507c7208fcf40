// FedAvg (McMahan et al. 2017; docs/modes.md) at the coordinator: every participant
// uploads its update (new minus old weights, through the round's codec); the round
// collects the updates (a partial one counts for the ranges that arrived), clips them and
// aggregates them with the job's aggregator (weighted mean by default; docs/robustness.md),
// and at quorum or deadline the aggregate goes through the server optimizer (SGD with
// server lr and momentum; lr 1 without momentum is plain FedAvg). With --dp its rounds are
// DP-FedAvg's (dp_rounds.h).
#ifndef FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_
#define FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_

#include <functional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "coordinator/robust.h"
#include "coordinator/round_driver.h"
#include "modes/fedavg/buffered_rounds.h"
#include "modes/fedavg/dp_rounds.h"
#include "modes/fedavg/gradiveq_bases.h"
#include "modes/fedavg/powersgd_rounds.h"
#include "modes/fedavg/secagg_rounds.h"
#include "modes/fedavg/terngrad_rounds.h"

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

// One FedAvg round: opens it collecting each client's update (or, with the streaming
// aggregator, a running weighted sum), waits until every participant has sent every
// chunk or the deadline, clips and aggregates (coordinator/robust.h), and commits the
// result through `optimizer` under the model guard: a candidate the guard refuses is
// tried again without the largest updates, whose senders are quarantined. LGC's
// warm-up rounds run the same. Report figures: "clip_bound", "clipped", the guard's
// (ChooseUnderGuard), per client "update_norm".
// `tick` (when given) runs while the round waits (RoundHost::WaitUntil).
absl::Status RunSummedRound(coordinator::RoundHost& host,
                            const std::vector<std::string>& participants,
                            coordinator::Clock::time_point deadline,
                            const coordinator::ServerOptimizer& optimizer,
                            const coordinator::AggregatorOptions& robust, SummedRoundState* state,
                            coordinator::CommitResult* commit, RoundReport* report,
                            const std::function<void()>& tick = nullptr);

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

// With a gradiveq job codec, the driver also fits, serves and saves its bases
// (gradiveq_bases.h): blob "gradiveq-basis". With powersgd(..., phases=2) its rounds are
// two-phase rounds (powersgd_rounds.h); with terngrad(shared=1) the participants agree on
// each round's scale first (terngrad_rounds.h); with --secagg its rounds are secure
// aggregation's (secagg_rounds.h).
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
  absl::Status Save(uint64_t round) override;
  size_t KeepVersions() const override {
    return buffered_ ? buffered_->options().MaxStaleness() : 0;
  }
  std::optional<std::string> Exhausted() const override {
    return dp_ ? dp_->Exhausted() : std::nullopt;
  }

 private:
  FedAvgDriver(const FedAvgOptions& options, const coordinator::AggregatorOptions& robust,
               codecs::ModelLayout layout)
      : optimizer_(options.optimizer()), robust_(robust), layout_(std::move(layout)) {}

  // A secure aggregation round; with distributed DP, of a Poisson sample, charged to the
  // privacy account once its noised sum is unmasked.
  absl::Status RunSecAggRound(coordinator::RoundHost& host,
                              const std::vector<std::string>& participants,
                              coordinator::Clock::time_point deadline,
                              coordinator::CommitResult* commit, RoundReport* report);
  // A round whose codec draws its kept set from the round's seed (randk(seed=round)):
  // names the seed in the round's spec and decodes with that codec, whose codes add up
  // (returned; nullptr for other rounds).
  absl::StatusOr<const codecs::LinearCode*> UseRoundSeed(coordinator::RoundEngine& engine,
                                                         uint64_t round);

  const coordinator::ServerOptimizer optimizer_;
  const coordinator::AggregatorOptions robust_;
  const codecs::ModelLayout layout_;
  bool seeded_ = false;                        // the last round named its seed (UseCodec in force)
  SummedRoundState state_;                     // the round loop's thread only
  std::unique_ptr<GradiveqBases> bases_;       // gradiveq jobs only
  std::unique_ptr<PowerSgdRounds> two_phase_;  // powersgd(..., phases=2) jobs only
  std::unique_ptr<TernGradRounds> shared_scale_;  // terngrad(shared=1) jobs only
  std::unique_ptr<BufferedRounds> buffered_;      // --rounds-mode buffered(...) only
  std::unique_ptr<DpRounds> dp_;                  // --dp only
  std::unique_ptr<SecAggRounds> secagg_;          // --secagg only
  double fit_bound_ = 0, coded_bound_ = 0;        // their streaming clip bounds
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_FEDAVG_DRIVER_H_
