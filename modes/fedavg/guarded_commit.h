// The last step of a FedAvg round, shared by its kinds of rounds: commits the model the
// guard chose (coordinator/round_driver.h ChooseUnderGuard), or, when it refused every
// candidate, the model as it was, counting no update (the clients keep theirs).
#ifndef FEDLGC_MODES_FEDAVG_GUARDED_COMMIT_H_
#define FEDLGC_MODES_FEDAVG_GUARDED_COMMIT_H_

#include <set>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "coordinator/round_driver.h"

namespace fedlgc::modes {

// `delta`: the round's mean update; `counted` (may be null: every update held): whose
// updates count.
absl::Status CommitGuarded(coordinator::RoundEngine& engine, uint64_t round,
                           const coordinator::GuardedChoice& choice, std::span<const float> delta,
                           const coordinator::ServerOptimizer& optimizer,
                           const std::set<std::string>* counted, coordinator::CommitResult* commit);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_GUARDED_COMMIT_H_
