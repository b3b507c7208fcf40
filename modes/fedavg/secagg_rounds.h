// Secure aggregation rounds of FedAvg at the coordinator (--secagg; docs/privacy.md):
// every participant sends its update as an integer code on a grid the round shares
// (codecs/sum_code.h: cut to norm C, rotated, rounded onto QSGD's or TernGrad's levels),
// masked in Z_(2^b) so that the coordinator learns only the sum of the codes of the
// clients whose input arrived (SecAgg+, privacy/secagg.h), and decodes that sum once. A
// round:
//   1. opens with a ZmodSumCollector; each RoundStart carries the round's grid (levels,
//      clip, kappa, rotation seed) and the words' width b = ceil(log2(2 n s + 1)) + margin
//      for its n participants, so no sum of their codes can wrap;
//   2. keys: once every participant still there (not gone 3 s) has reported its public
//      keys, or a tenth of the round's time is gone, the neighbour graph is drawn over
//      those who did and each gets its neighbours' keys (SecAggKeys);
//   3. shares: once every one of them still there has reported its boxes of shares, or a
//      fifth of the round's time is gone, each who did gets the boxes its peers sent it
//      (SecAggShares) and only they may upload;
//   4. masked input: until every one of them is whole or gone, or eight tenths of the
//      round's time; the engine then freezes;
//   5. unmasking: each client whose input is whole is asked for its shares (SecAggUnmask)
//      until every seed and key the sum needs can be rebuilt, or the deadline; the masks
//      are removed, the sum decoded and divided by the number of inputs (every update
//      weighs one: a weight by sample count would leak through the sum's scale), and the
//      mean commits through the server optimizer under the model guard, which may refuse
//      it whole (a sum cannot leave a client out). Shares off a secret that checked out
//      are left out and reported; a dealer proven to have lied (its shares agree on a
//      secret its commitment refutes) is quarantined. The masks come off outside the
//      lock.
// A round that cannot finish (fewer than 2 inputs, too few holders of some secret, too
// few shares by the deadline) commits nothing: every client keeps its update in its
// residual for a later round. With masks=0 the same codes go unmasked, in their own
// width, without phases: the same sum, the cost of the masks apart.
// What it cannot run with is refused when the job starts (its round protocol's entry,
// secagg_protocol.cc): clipping moves to the clients, so nothing at the coordinator may
// clip, weigh or pick among updates.
// With quantile=Q the clients also sum a histogram of their update norms (half-octave
// bins), and each round after the first clips at the top of the bin where the last round's
// Q-quantile fell: the coordinator learns how the round's norms spread, not whose is
// whose. Report figures: "clip_bound" (the round's clip), "secagg_next_clip",
// "secagg_width_bits", "secagg_keyed", "secagg_shared", "secagg_masked",
// "secagg_dropped" (shared but no whole input), "secagg_degree", "secagg_threshold",
// "secagg_unmask_s" (seconds the masks took off), "secagg_liars" (dealers proven),
// "secagg_off_shares" (and per client "secagg_off_share"); labels "secagg_failed" (why a
// round counted nothing) and "secagg_histogram_refused".
#ifndef FEDLGC_MODES_FEDAVG_SECAGG_ROUNDS_H_
#define FEDLGC_MODES_FEDAVG_SECAGG_ROUNDS_H_

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "codecs/sum_code.h"
#include "coordinator/round_driver.h"
#include "privacy/secagg.h"

namespace fedlgc::protos {
class ProgressReport;
class RoundStart;
class SecAggKeys;
class SecAggShares;
class SecAggUnmask;
}  // namespace fedlgc::protos

namespace fedlgc::modes {

class ZmodSumCollector;

struct SecAggOptions {
  double clip = 0;         // C: each client cuts its update to this L2 norm
  int degree = 0;          // neighbours=: the graph's degree (0: privacy::DefaultDegree)
  double threshold = 0.5;  // the share of a client's k + 1 shares that rebuilds its secrets
  double kappa = 4;        // the grid's span in standard deviations
  int margin = 0;          // extra bits of each word
  // > 0: every round after the first clips at this quantile of the last round's update
  // norms, from a histogram the clients sum beside their codes (the first clips at `clip`).
  double quantile = 0;
  bool masks = true;       // false: the codes go unmasked (what the masks cost)
  bool operator==(const SecAggOptions&) const = default;
};

// --secagg "secagg(clip=C, quantile=Q, neighbours=K, threshold=F, kappa=A, margin=M,
// masks=0|1)";
// "" or "none": off (nullopt). INVALID_ARGUMENT says what is wrong.
absl::StatusOr<std::optional<SecAggOptions>> ParseSecAgg(const std::string& spec);

// RunRound runs on the round loop's thread; Accept and Decorate on gRPC threads.
class SecAggRounds {
 public:
  // `spec`: the job's codec (its levels).
  static absl::StatusOr<std::unique_ptr<SecAggRounds>> Create(const SecAggOptions& options,
                                                              const std::string& spec,
                                                              uint64_t dim);

  absl::Status RunRound(coordinator::RoundHost& host, const std::vector<std::string>& participants,
                        coordinator::Clock::time_point deadline,
                        const coordinator::ServerOptimizer& optimizer,
                        coordinator::CommitResult* commit, RoundReport* report);
  // A participant's phase message (FedAvgProgress's secagg): FAILED_PRECONDITION when it
  // is not for the open round's phase, INVALID_ARGUMENT for bad content (privacy/secagg.h).
  absl::Status Accept(const std::string& client, const protos::ProgressReport& report);
  // Fills RoundStart.fedavg.secagg for the round being run.
  void Decorate(const std::string& client, protos::RoundStart* start);

  const SecAggOptions& options() const { return options_; }
  // Distributed DP (dp_rounds.h, skellam): the rounds from now on ask their participants
  // for Skellam noise that adds up to `sum_variance` on each coordinate of the sum (in grid
  // steps squared), and widen the words to hold it (6 standard deviations); `on_sum` runs
  // as soon as a round's noised sum is unmasked, before the guard sees it, with the inputs
  // it holds and the participants asked.
  void UseNoise(double sum_variance, std::function<void(size_t inputs, size_t asked)> on_sum);

 private:
  SecAggRounds(const SecAggOptions& options, int levels, uint64_t dim, uint64_t kept)
      : options_(options), levels_(levels), dim_(dim), kept_(kept), clip_(options.clip) {}
  enum class Phase { kNone, kKeys, kShares, kMasked, kUnmask, kFailed };
  // A round as it opened: its number, grid, collector, the sums' width and the norm
  // histogram's bins (0: none).
  struct Opened {
    uint64_t round = 0;
    codecs::SumCode code;
    std::shared_ptr<ZmodSumCollector> collector;
    int sum_bits = 0;
    uint64_t bins = 0;
  };

  // Opens the engine's round with a fresh collector (and, with masks, a fresh
  // SecAggServer) and sends the RoundStarts.
  absl::StatusOr<Opened> Open(coordinator::RoundHost& host,
                              const std::vector<std::string>& participants,
                              coordinator::Clock::time_point deadline);
  // The round is over: its state goes.
  void Close();
  // Waits through the keys and shares phases for the masked input; an error says why the
  // round cannot be unmasked.
  absl::Status GatherInputs(coordinator::RoundHost& host, coordinator::Clock::time_point deadline,
                            const ZmodSumCollector& collector);
  // The phases' figures; returns the clients whose input counts.
  std::set<std::string> ReportPhases(const ZmodSumCollector& collector, RoundReport* report) const;
  // Decodes the unmasked `sum` into the mean of the `counted` clients' updates and commits
  // it under the guard; with a norm histogram, sets the next round's clip.
  absl::Status CommitSum(coordinator::RoundHost& host, const Opened& opened,
                         std::span<const uint64_t> sum, const std::set<std::string>& counted,
                         const coordinator::ServerOptimizer& optimizer,
                         coordinator::CommitResult* commit, RoundReport* report);

  // While the round waits: closes the keys and shares phases when due, pushing their
  // events (at host.Now()).
  void Advance(coordinator::RoundHost& host);
  // A client's phase events: its neighbours' keys, its peers' boxes, what it must reveal.
  void FillKeysLocked(const std::string& client, protos::SecAggKeys* keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillSharesLocked(const std::string& client, protos::SecAggShares* shares) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillUnmaskLocked(const std::string& client, protos::SecAggUnmask* unmask) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes a phase that could not: the round counts nothing. REQUIRES mu_.
  void FailLocked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The top of the half-octave bin where `quantile` of the norms the histogram counts fell
  // (`clip` when it counts none).
  double QuantileClip(std::span<const int64_t> histogram, double clip) const;
  // Asks U3 for its shares, waits, unmasks; the sum of the codes in *sum.
  absl::Status Unmask(coordinator::RoundHost& host, coordinator::Clock::time_point deadline,
                      std::vector<uint64_t>* sum, RoundReport* report);

  const SecAggOptions options_;
  const int levels_;
  const uint64_t dim_;
  const uint64_t kept_;  // coordinates a code keeps (randk: k; else dim)
  double sum_variance_ = 0;  // the round loop's thread only
  std::function<void(size_t, size_t)> on_sum_;
  mutable absl::Mutex mu_;
  double clip_ ABSL_GUARDED_BY(mu_);  // this round's (quantile=: the last round's quantile)
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kNone;
  std::string failed_ ABSL_GUARDED_BY(mu_);
  uint64_t rotation_seed_ ABSL_GUARDED_BY(mu_) = 0;
  int width_ ABSL_GUARDED_BY(mu_) = 0;
  double client_variance_ ABSL_GUARDED_BY(mu_) = 0;
  coordinator::Clock::time_point opened_ ABSL_GUARDED_BY(mu_), deadline_ ABSL_GUARDED_BY(mu_);
  // When the keys and the shares phases closed (the phases' seconds in the round report).
  coordinator::Clock::time_point keys_closed_ ABSL_GUARDED_BY(mu_),
      shares_closed_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> participants_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> gone_ ABSL_GUARDED_BY(mu_);  // of the participants, vanished
  std::unique_ptr<privacy::SecAggServer> server_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ZmodSumCollector> collector_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_SECAGG_ROUNDS_H_
