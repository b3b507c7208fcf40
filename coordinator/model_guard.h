// The model guard (docs/robustness.md): the last check before a round commits. A
// candidate model is refused when a coordinate is not finite, when its norm grew more
// than the job allows in one round, or when its loss on a small guard set exploded. The driver then looks for the updates that caused it (coordinator/guard.h).
//
// Not thread-safe: the round loop's thread uses it.
#ifndef FEDLGC_COORDINATOR_MODEL_GUARD_H_
#define FEDLGC_COORDINATOR_MODEL_GUARD_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace fedlgc::coordinator {

struct GuardOptions {
  bool enabled = true;
  // A round's model may have an L2 norm of at most max_growth x max(|model|, 1). Both
  // norms include the frozen parameters' (ModelGuard's frozen_norm_sq): the model is all
  // of them. Adapters that start at zero beside a frozen pretrained model would otherwise
  // grow without bound relative to themselves in their first round.
  double max_growth = 3.0;
  // loss(candidate) may be at most max_loss_ratio x loss(model) + 0.1 on the guard set.
  double max_loss_ratio = 2.0;
  uint32_t samples = 512;  // examples of the guard set; 0: no loss check

  absl::Status Validate() const;
};

// Which check refused a candidate (metric label).
enum class GuardCheck { kPassed, kNonFinite, kNorm, kLoss };
std::string_view GuardCheckName(GuardCheck check);

struct GuardVerdict {
  GuardCheck check = GuardCheck::kPassed;
  std::string detail;  // what was measured, for logs
  double step = 0;     // |candidate - model| / max(|model|, 1), reported
  double growth = 0;   // |candidate| / max(|model|, 1), frozen parameters included
  double loss = -1;    // the candidate's guard loss; -1: not measured
  bool passed() const { return check == GuardCheck::kPassed; }
};

class ModelGuard {
 public:
  // `loss` evaluates a flat model on the guard set; null: no loss check. `frozen_norm_sq`:
  // the squared L2 norm of the model's frozen parameters, which are in no flat vector and
  // never change (the squares of core::FrozenValues).
  using LossFn = std::function<absl::StatusOr<double>(std::span<const float> model)>;
  ModelGuard(GuardOptions options, LossFn loss, double frozen_norm_sq = 0);

  // Judges `candidate` against `model` (the committed one, of `version`). An error only
  // when the loss cannot be evaluated (a bug, not a verdict).
  absl::StatusOr<GuardVerdict> Check(std::span<const float> model, uint64_t version,
                                     std::span<const float> candidate);

  const GuardOptions& options() const { return options_; }

 private:
  const GuardOptions options_;
  const LossFn loss_;
  const double frozen_norm_sq_;
  std::optional<std::pair<uint64_t, double>> model_loss_;  // (version, loss) cached
};

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_MODEL_GUARD_H_
