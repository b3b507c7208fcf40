// Batch normalisation statistics re-estimated after each commit (--bn-stats on;
// docs/your-model.md, Buffers). Under a codec that moves part of the weights a round (top-k,
// LGC), the statistics averaged beside them stop belonging to them, and a BatchNorm
// model evaluates far below what its weights can do. After round r commits as version v
// and its checkpoint is on disk, the clients the commit counted download v, pass their
// training examples forward (core::Model::ReestimateStatistics; a Python client its
// statistics hook) and report each channel's mean and variance (StatisticsStart,
// StatisticsReport); the coordinator pools them into the statistics of the union of their
// data (core::PoolStatistics; the channel-wise median under a robust aggregator), writes
// them into v's weights and commits that as version v + 1 (RoundEngine::Rebase keeping the
// server momentum), publishes its downlink and writes the checkpoint again. Evaluation,
// export and the next round then see statistics that belong to the weights, and the
// coordinator holds no data for it.
//
// A coordinator killed during the phase restarts at v, whose checkpoint records that its
// statistics are not committed (EngineState::statistics_round): it runs the phase again
// before the next round. A client killed during it is waited for 3 s after it vanishes.
#ifndef FEDLGC_COORDINATOR_STATISTICS_PHASE_H_
#define FEDLGC_COORDINATOR_STATISTICS_PHASE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"
#include "core/round_report.h"
#include "core/statistics.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::coordinator {

using Clock = core::Clock;
class Downlinks;
class RoundEngine;
class RoundHost;
struct CoordinatorOptions;
struct ModeTraits;

// One phase's answers. Thread-safe: Accept from the service's threads, the rest from the
// round loop.
class StatsBook {
 public:
  explicit StatsBook(uint64_t channels) : channels_(channels) {}

  // `ask` (a round's model, its version) goes to `clients` (the book's one open phase).
  void Ask(const protos::StatisticsStart& ask, const std::set<std::string>& clients);
  // The open phase's ask when `client` was asked and has not answered: sent again with
  // the catch-up of an event stream it opens (a reconnect would otherwise leave the
  // phase waiting for it until its deadline).
  std::optional<protos::ServerEvent> AskFor(const std::string& client) const;
  // `client` was not asked after all, or is gone: not waited for.
  void Withdraw(const std::string& client);
  // A client's answer. INVALID_ARGUMENT naming what does not add up (sizes, a value not
  // finite, a negative variance, no examples); FAILED_PRECONDITION when it was not asked
  // (that round and version) or has answered already.
  absl::Status Accept(const std::string& client, const protos::StatisticsReport& report);
  // The asked clients that have not answered.
  std::set<std::string> Waiting() const;

  struct Answer {
    uint64_t examples = 0;
    std::vector<float> mean, var;
    std::vector<uint32_t> skipped;
  };
  struct Answers {
    std::map<std::string, Answer> estimates;
    size_t asked = 0, declined = 0;
  };
  // Closes the phase and returns what came.
  Answers Take();

 private:
  const uint64_t channels_;
  mutable absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  protos::StatisticsStart ask_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> asked_ ABSL_GUARDED_BY(mu_);
  Answers answers_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> answered_ ABSL_GUARDED_BY(mu_);
};

// What the phase commits through: the coordinator's downlinks (null: models go down as
// float32), its state folder and job key (the checkpoint).
struct StatisticsPersist {
  Downlinks* downlinks = nullptr;
  std::string state_dir, job_key;
};

// Whether --bn-stats auto runs the phase: where the job compresses its updates (any
// codec but a float format, LGC's lgc(...) included, or a codec ladder: a sparse or
// coarse update moves the statistics apart from the weights they belong to), in a mode
// that commits one model every client starts from (`summed`), at the root, and where the
// driver lets clients send their statistics (RoundDriver::AllowsClientStatistics).
bool StatisticsAutomatic(const CoordinatorOptions& o, const ModeTraits& traits, bool driver_allows);

// The round loop's thread only (the book inside is thread-safe).
class StatisticsPhase {
 public:
  // Null with --bn-stats off, under auto where `automatic` is false (StatisticsAutomatic),
  // or for a model without statistics pairs (told in the log under on). `median`: a
  // robust aggregator's job (each channel's median, not the weighted pool).
  static std::unique_ptr<StatisticsPhase> Create(const CoordinatorOptions& o,
                                                 const codecs::ModelLayout& layout, bool median,
                                                 bool automatic, StatisticsPersist persist);

  StatsBook& book() { return book_; }
  // Whether the engine's committed round still lacks its statistics (a restart during
  // the phase): true when a round has committed since the last statistics commit.
  static bool Pending(RoundEngine& engine);
  // Runs the phase for round `round`, committed as the engine's current version with its
  // checkpoint on disk, asking `clients` (those the commit counted). Figures and the label
  // bn_stats (committed, none, refused:<guard check>) go into `rep`. An error only where
  // the commit could not be persisted.
  absl::Status Run(uint64_t round, const std::vector<std::string>& clients, RoundHost& host,
                   RoundReport* rep);

 private:
  StatisticsPhase(const CoordinatorOptions& o, std::vector<core::StatisticsPair> pairs, bool median,
                  StatisticsPersist persist);
  // The pooled statistics written into `model`; false when nothing came.
  bool Pool(const StatsBook::Answers& answers, std::vector<float>* model) const;

  const CoordinatorOptions& options_;
  const std::vector<core::StatisticsPair> pairs_;
  const bool median_;
  const StatisticsPersist persist_;
  StatsBook book_;
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_STATISTICS_PHASE_H_
