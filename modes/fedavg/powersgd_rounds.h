// Two-phase PowerSGD rounds at the coordinator (codecs/powersgd_two_phase.h), for FedAvg
// jobs whose codec is powersgd(..., phases=2). A round:
//   1. opens with a PayloadCollector; each RoundStart names the round's query Q;
//   2. once every participant's P is in, or half of the round's time is gone and at least
//      one P is, averages the P_i (weighted, each clipped to the clip multiplier x their
//      lower median norm, so one client cannot steer the subspace alone), orthonormalizes
//      the columns (P^) and pushes P^ to the participants (PowerSgdFactor; RoundStart
//      carries it from then on, for clients that reconnect);
//   3. waits for every participant's Q (a payload that replaces its P) or the deadline;
//   4. aggregates the clients' P^ Q_i^T with the job's aggregator under the model guard
//      (AggregateAndCommit: a message's norm is its update's, P^ being orthonormal); with
//      --aggregator streaming the messages are summed and rebuilt once (report figure
//      "summed_code_floats");
//   5. keeps the weighted mean Q of the counted clients as the next round's query (warm
//      start; after a round that counted nothing, the query before), saved beside the
//      checkpoint so a restarted coordinator continues it.
// The next query is clipped the same way, so no one client sets it either. Clients that
// sent only P do not count (their receipt says so, and they keep their
// update in their residual). Report figures: "powersgd_p_in" (P payloads the factor was
// made from), "powersgd_factor_s" (seconds from the round's start to the factor),
// "powersgd_warm" (1: the query was last round's mean Q).
#ifndef FEDLGC_MODES_FEDAVG_POWERSGD_ROUNDS_H_
#define FEDLGC_MODES_FEDAVG_POWERSGD_ROUNDS_H_

#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "codecs/powersgd_two_phase.h"
#include "coordinator/robust.h"
#include "coordinator/round_driver.h"

namespace fedlgc::coordinator {
class PayloadCollector;
}

namespace fedlgc::modes {

// RunRound and Save run on the round loop's thread; Decorate and the payload checks on
// any thread.
class PowerSgdRounds {
 public:
  static absl::StatusOr<std::unique_ptr<PowerSgdRounds>> Create(const std::string& spec,
                                                                const codecs::ModelLayout& layout,
                                                                std::string state_dir,
                                                                uint64_t committed_round);

  absl::Status RunRound(coordinator::RoundHost& host, const std::vector<std::string>& participants,
                        coordinator::Clock::time_point deadline,
                        const coordinator::ServerOptimizer& optimizer,
                        const coordinator::AggregatorOptions& robust,
                        coordinator::CommitResult* commit, RoundReport* report);
  // Fills RoundStart.fedavg.powersgd for the round being run.
  void Decorate(protos::RoundStart* start);
  absl::Status Save(uint64_t round) const;

  const codecs::PowerSgdTwoPhase& math() const { return math_; }

 private:
  PowerSgdRounds(codecs::PowerSgdTwoPhase math, std::string state_dir)
      : math_(std::move(math)), state_dir_(std::move(state_dir)) {}
  // Each client's Q message, and the update it stands for when an aggregator needs it.
  struct Message {
    std::string client;
    double weight = 0;
    std::vector<float> values;
    std::vector<float> rebuilt;  // buffered aggregators other than the means
  };

  absl::Status Load(uint64_t round);
  // Waits until every participant's Q message is in or the deadline: once every P is in,
  // or half of the round's time is gone and one is, pushes P^ (phase 2).
  void WaitForMessages(coordinator::RoundHost& host, uint64_t round,
                       const std::vector<std::string>& participants,
                       coordinator::Clock::time_point deadline, double clip,
                       const coordinator::PayloadCollector& payloads, RoundReport* report);
  // The Q messages made against `factor` (tagged `tag`); none before phase 2.
  std::vector<Message> ReadMessages(const coordinator::PayloadCollector& payloads,
                                    std::span<const float> factor, uint32_t tag) const;
  // A buffered aggregator: each message rebuilt (or filled on demand for the means),
  // aggregated and committed under the model guard. `counted`: the clients it counted.
  absl::Status CommitBuffered(coordinator::RoundHost& host, std::vector<Message>& messages,
                              std::span<const float> factor,
                              const coordinator::ServerOptimizer& optimizer,
                              const coordinator::AggregatorOptions& robust,
                              coordinator::CommitResult* commit, RoundReport* report,
                              std::set<std::string>* counted) const;
  // The streaming aggregator: the messages' clipped weighted mean, rebuilt once (they add
  // up under the shared P^), committed under the model guard as a whole. `counted`: the
  // clients it counted.
  absl::Status CommitSummed(coordinator::RoundHost& host, const std::vector<Message>& messages,
                            std::span<const float> factor,
                            const coordinator::ServerOptimizer& optimizer,
                            const coordinator::AggregatorOptions& robust,
                            coordinator::CommitResult* commit, RoundReport* report,
                            std::set<std::string>* counted) const;
  // Checks a payload of `round` against the open round (PayloadCollector's validator):
  // one made against another query or P^ than the round's now, or for a round that closed,
  // is stale (FAILED_PRECONDITION: the client's RoundStart or factor event brings the
  // current ones).
  absl::Status Validate(uint64_t round, std::string_view spec, std::span<const uint8_t> body);
  // P^ from the P payloads in, or empty when none is.
  std::vector<float> Factor(const coordinator::PayloadCollector& payloads, double clip,
                            int* used) const;
  // The weighted mean of `values`, each scaled down to at most `clip` x their lower median
  // norm (clip 0: as they are); empty when the weights sum to 0.
  static std::vector<float> ClippedMean(const std::vector<std::span<const float>>& values,
                                        const std::vector<double>& weights, double clip);

  const codecs::PowerSgdTwoPhase math_;
  const std::string state_dir_;
  std::vector<float> next_query_;  // the round loop's; empty: the next round draws one

  mutable absl::Mutex mu_;
  struct Open {
    uint64_t round = 0;
    std::vector<float> query, factor;  // factor: empty until phase 2
    uint32_t query_tag = 0, factor_tag = 0;
  };
  Open open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_POWERSGD_ROUNDS_H_
