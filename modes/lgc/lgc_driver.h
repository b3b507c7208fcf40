// LGC (learned gradient compression; docs/lgc.md) at the coordinator: the round protocol
// around LgcAggregator. Stage-1 rounds (--codec-warmup, if any) are FedAvg rounds with the
// warm-up codec. Stage-2 and stage-3 rounds collect one payload per client
// (PayloadCollector): the round's leader, chosen by --lgc-leader or the best measured
// link, sends first; when it vanishes, or has not delivered by half the time it was
// given, the next best participant is promoted (LgcPromote). The coordinator pushes the
// first leader payload (stage 2: its body; stage 3: its support and latent) to the other
// participants (LgcLatent) so they can send against it.
//
// Report figures: lgc_stage, ae_reconstruction, ae_similarity, lgc_values_cosine,
// lgc_rebuild_mismatches, ae_seconds; label lgc_leader.
#ifndef FEDLGC_MODES_LGC_LGC_DRIVER_H_
#define FEDLGC_MODES_LGC_LGC_DRIVER_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/round_driver.h"
#include "modes/fedavg/fedavg_driver.h"
#include "modes/lgc/lgc_aggregator.h"

namespace fedlgc::modes {

struct LgcOptions {
  std::string leader;              // the leader client; empty: the best measured link
  std::string ae_device = "auto";  // where the autoencoder trains: cpu, cuda or auto
  int ae_nice = 10;                // the training thread's nice value (0 to 19)

  absl::Status Validate() const;
  bool operator==(const LgcOptions&) const = default;
};

// Thread-safe as RoundDriver says.
class LgcDriver final : public coordinator::RoundDriver {
 public:
  using RoundHost = coordinator::RoundHost;
  using Clock = coordinator::Clock;

  // What this mode answers about itself (coordinator/mode_traits.h).
  static const coordinator::ModeTraits& Traits();
  // The plan comes from env.plan's codec (lgc(...)) and warm-up codecs.
  static absl::StatusOr<std::unique_ptr<LgcDriver>> Create(const LgcOptions& options,
                                                           const coordinator::ServerOptimizer& opt,
                                                           const coordinator::DriverEnv& env);

  Mode mode() const override { return Mode::kLgc; }
  absl::Status RunRound(RoundHost& host, const std::vector<std::string>& participants,
                        Clock::time_point deadline, coordinator::CommitResult* commit,
                        RoundReport* report) override;
  void DecorateRoundStart(const std::string& client, protos::RoundStart* start) override;
  // "encoder" and "lgc-decoder" (stage 3).
  absl::StatusOr<std::shared_ptr<const ModelBlob>> Blob(const std::string& client,
                                                        const std::string& name,
                                                        uint64_t version) override;
  absl::Status Save(uint64_t round) override { return agg_->Save(round); }

  LgcAggregator& aggregator() { return *agg_; }

 private:
  // Who leads a stage-2 or stage-3 round, and what the coordinator did about it so far.
  struct LeaderWatch {
    std::string leader;
    std::set<std::string> tried;  // every client asked to lead this round
    Clock::time_point seen, asked;
    std::string pushed;  // whose payload went out
  };

  LgcDriver(LgcOptions options, coordinator::ServerOptimizer optimizer,
            coordinator::AggregatorOptions robust, std::unique_ptr<LgcAggregator> agg);
  absl::Status RunPlainRound(RoundHost& host, const std::vector<std::string>& participants,
                             Clock::time_point deadline, coordinator::CommitResult* commit,
                             RoundReport* report);
  absl::Status RunLeaderRound(RoundHost& host, LgcStage stage,
                              const std::vector<std::string>& participants,
                              Clock::time_point deadline, coordinator::CommitResult* commit,
                              RoundReport* report);
  // After the round froze: the leader's round aggregated (LgcAggregator) under the model
  // guard, reported and committed.
  absl::Status CommitLeaderRound(RoundHost& host, uint64_t round, LeaderWatch* watch,
                                 coordinator::CommitResult* commit, RoundReport* report);
  // While a stage-2/3 round waits: pushes the leader's payload, promotes a new leader
  // when the current one vanished or is late.
  absl::Status WatchLeader(RoundHost& host, uint64_t round, LgcStage stage,
                           const std::vector<std::string>& participants, Clock::time_point deadline,
                           LeaderWatch* w);
  // Once a payload of one of the round's leaders is in, sends it (LeaderPayloadBytes) to
  // the other participants and keeps it for RoundStart.
  absl::Status PushLatent(RoundHost& host, uint64_t round,
                          const std::vector<std::string>& participants,
                          const std::map<std::string, coordinator::PayloadCollector::Payload>& in,
                          LeaderWatch* w);
  // The leader among `candidates`, skipping `tried` (docs/lgc.md, Leaders): --lgc-leader;
  // else the last leader while its link is at least half the best's; else the best
  // measured link. Empty when none is left.
  std::string ChooseLeader(const RoundHost& host, const std::vector<std::string>& candidates,
                           const std::set<std::string>& tried) const;
  void PublishEncoder();
  bool encoder_published() {
    absl::MutexLock lock(&mu_);
    return encoder_ != nullptr;
  }

  const LgcOptions options_;
  const coordinator::ServerOptimizer optimizer_;
  const coordinator::AggregatorOptions robust_;
  const std::unique_ptr<LgcAggregator> agg_;
  SummedRoundState summed_;  // of the warm-up rounds; the round loop's thread only
  std::shared_ptr<coordinator::PayloadCollector> payloads_;  // of the round being run

  absl::Mutex mu_;
  // What RoundStart tells the participants of the open round.
  struct RoundState {
    uint64_t round = 0;
    LgcStage stage = LgcStage::kWarmUp;
    std::string leader;
    // What was pushed to the round's clients: stage 3 the leader's support and latent,
    // stage 2 its body.
    std::string support, latent, cells;
  };
  RoundState round_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ModelBlob> encoder_ ABSL_GUARDED_BY(mu_);  // served from stage 3
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LGC_LGC_DRIVER_H_
