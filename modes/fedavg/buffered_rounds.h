// Buffered asynchronous FedAvg (FedBuff, Nguyen et al. 2022; docs/modes.md#buffered-rounds):
// `concurrency` clients train at once, each from the model version current when it was
// asked; the coordinator commits a new version every `k` updates that arrive, each scaled
// by s(tau) = (1 + tau)^-a, tau the versions committed since its client was asked, and
// asks idle clients as others finish, so a slow link holds up only its own update.
//
// The engine runs one rolling round (round_engine.h) for the whole job: each commit is a
// round (its number, checkpoint, report and receipts), and the clients still training go
// on into the next. The commit's updates are clipped, aggregated with the job's
// aggregator and committed under the model guard as a synchronous round's are
// (AggregateAndCommit). Nothing of the buffer is checkpointed: after a restart a client
// whose update was not committed finds no receipt for it and restores it into its residual
// when it is asked again, so every update counts exactly once.
#ifndef FEDLGC_MODES_FEDAVG_BUFFERED_ROUNDS_H_
#define FEDLGC_MODES_FEDAVG_BUFFERED_ROUNDS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/collectors.h"
#include "coordinator/robust.h"
#include "coordinator/round_driver.h"

namespace fedlgc::modes {

struct BufferedOptions {
  uint32_t k = 10;             // updates per commit
  uint32_t concurrency = 20;   // clients training at once
  double staleness_exp = 0.5;  // a in s(tau) = (1 + tau)^-a; 0: stale updates weigh as fresh
  // Updates more versions behind than this are dropped (their clients restore them into
  // their residual) and the same many superseded versions stay downloadable.
  uint32_t max_staleness = 0;  // 0: 4 x ceil(concurrency / k)
  // When a client's place frees for the next one: as soon as its update arrives (FedBuff),
  // or only once a commit takes it (refill=commit: at most `concurrency` updates asked and
  // not yet committed, so with k = concurrency every update is fresh).
  bool refill_at_commit = false;

  uint32_t MaxStaleness() const;
  // The weight of an update tau versions behind.
  double Scale(uint64_t tau) const;
  bool operator==(const BufferedOptions&) const = default;
};

// --rounds-mode: "sync" (nullopt) or
// "buffered(k=K, concurrency=C, staleness=poly(A), max_staleness=M, refill=arrival|commit)"
// (staleness=none: a=0), every argument optional; INVALID_ARGUMENT says what is wrong.
absl::StatusOr<std::optional<BufferedOptions>> ParseRoundsMode(const std::string& spec);
std::string FormatRoundsMode(const std::optional<BufferedOptions>& options);

// The buffered rounds of a FedAvg job; the round loop's thread only.
class BufferedRounds {
 public:
  explicit BufferedRounds(const BufferedOptions& options) : options_(options) {}

  // One commit: opens the rolling round the first time (asking from `candidates`, the
  // coordinator's seeded sample, first, then the other connected clients), keeps
  // `concurrency` clients training, and once `k` updates are complete (or at `deadline`,
  // with those there are) commits them. Report figures: "buffered_k", "in_flight",
  // "released" (clients dropped since the last commit: gone, late or too stale),
  // "staleness_mean", "staleness_max", per client "staleness".
  absl::Status RunRound(coordinator::RoundHost& host, const std::vector<std::string>& candidates,
                        coordinator::Clock::time_point deadline,
                        const coordinator::ServerOptimizer& optimizer,
                        const coordinator::AggregatorOptions& robust,
                        coordinator::CommitResult* commit, RoundReport* report);

  const BufferedOptions& options() const { return options_; }

 private:
  // Drops participants that are gone, late or too stale, and asks idle clients until
  // `concurrency` are training (refill=commit: until `concurrency` are asked and not yet
  // committed).
  void Refill(coordinator::RoundHost& host, const std::vector<std::string>& candidates);
  // Of `candidates` then the other connected clients (seeded order), those not asked now.
  std::vector<std::string> Idle(coordinator::RoundHost& host,
                                const std::vector<std::string>& candidates,
                                const std::map<std::string, coordinator::RoundEngine::Asked>& asked,
                                size_t want) const;

  // A commit's updates as contributions (pointing into `updates` and `scaled`, so it is
  // filled in place and never moved), and each one's staleness.
  struct Commit {
    std::map<std::string, coordinator::PerClientCollector::Update> updates;
    std::map<std::string, std::vector<float>> scaled;  // dense updates, scaled
    std::vector<coordinator::Contribution> all;
    std::map<std::string, double> staleness;
  };
  // The updates of `settle`: weights capped among them, each scaled by s(tau).
  void Gather(coordinator::RoundEngine& engine, const std::set<std::string>& settle, bool compact,
              Commit* c) const;

  const BufferedOptions options_;
  std::shared_ptr<coordinator::PerClientCollector> collector_;  // of the rolling round
  coordinator::Clock::duration timeout_{};                      // a client's time to upload
  size_t released_ = 0;                                         // since the last commit
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_BUFFERED_ROUNDS_H_
