// A FedAvg round's commit under the model guard (see guarded_commit.h).
#include "modes/fedavg/guarded_commit.h"

#include "base/log.h"

namespace fedlgc::modes {

absl::Status CommitGuarded(coordinator::RoundEngine& engine, uint64_t round,
                           const coordinator::GuardedChoice& choice, std::span<const float> delta,
                           const coordinator::ServerOptimizer& optimizer,
                           const std::set<std::string>* counted, coordinator::CommitResult* commit) {
  absl::StatusOr<coordinator::CommitResult> committed;
  if (choice.model.empty()) {
    log::Warning(
        "coordinator",
        "round %llu: the model guard refused every candidate (%s): the round counts nothing",
        static_cast<unsigned long long>(round), choice.first.detail);
    committed = engine.CommitModel(engine.ModelVector(), {});
  } else {
    committed = engine.CommitDelta(delta, optimizer, counted);
  }
  if (!committed.ok()) return committed.status();
  *commit = *std::move(committed);
  return absl::OkStatus();
}

}  // namespace fedlgc::modes
