// The model guard (see model_guard.h).
#include "coordinator/model_guard.h"

#include <cmath>

#include "base/str.h"

namespace fedlgc::coordinator {

absl::Status GuardOptions::Validate() const {
  if (!(max_growth > 1) || !std::isfinite(max_growth)) {
    return absl::InvalidArgumentError("--guard-max-growth must be > 1");
  }
  if (!(max_loss_ratio >= 1) || !std::isfinite(max_loss_ratio)) {
    return absl::InvalidArgumentError("--guard-max-loss-ratio must be >= 1");
  }
  return absl::OkStatus();
}

std::string_view GuardCheckName(GuardCheck check) {
  switch (check) {
    case GuardCheck::kPassed:
      return "passed";
    case GuardCheck::kNonFinite:
      return "nonfinite";
    case GuardCheck::kNorm:
      return "norm";
    case GuardCheck::kLoss:
      return "loss";
  }
  return "?";
}

ModelGuard::ModelGuard(GuardOptions options, LossFn loss, double frozen_norm_sq)
    : options_(options), loss_(std::move(loss)), frozen_norm_sq_(frozen_norm_sq) {}

absl::StatusOr<GuardVerdict> ModelGuard::Check(std::span<const float> model, uint64_t version,
                                               std::span<const float> candidate) {
  GuardVerdict v;
  if (!options_.enabled) return v;
  if (candidate.size() != model.size()) {
    return absl::InternalError(
        StrCat("a candidate of ", candidate.size(), " values for a model of ", model.size()));
  }
  double step_sq = 0, norm_sq = frozen_norm_sq_, candidate_sq = frozen_norm_sq_;
  for (size_t i = 0; i < candidate.size(); ++i) {
    if (!std::isfinite(candidate[i])) {
      v.check = GuardCheck::kNonFinite;
      v.detail = StrCat("coordinate ", i, " is ", candidate[i]);
      return v;
    }
    const double d = double(candidate[i]) - model[i];
    step_sq += d * d;
    norm_sq += double(model[i]) * model[i];
    candidate_sq += double(candidate[i]) * candidate[i];
  }
  const double base = std::max(1.0, std::sqrt(norm_sq));
  v.step = std::sqrt(step_sq) / base;
  v.growth = std::sqrt(candidate_sq) / base;
  if (!std::isfinite(v.growth) || v.growth > options_.max_growth) {
    v.check = GuardCheck::kNorm;
    v.detail = StrCat("the model's norm would grow ", v.growth, "x in one round (at most ",
                      options_.max_growth, "x)");
    return v;
  }
  if (!loss_ || options_.samples == 0) return v;
  if (!model_loss_ || model_loss_->first != version) {
    auto base = loss_(model);
    if (!base.ok()) return base.status();
    model_loss_ = {version, *base};
  }
  auto loss = loss_(candidate);
  if (!loss.ok()) return loss.status();
  v.loss = *loss;
  const double limit = options_.max_loss_ratio * model_loss_->second + 0.1;
  if (!std::isfinite(v.loss) || v.loss > limit) {
    v.check = GuardCheck::kLoss;
    v.detail = StrCat("guard-set loss ", v.loss, " after ", model_loss_->second, " (at most ",
                      limit, ")");
  }
  return v;
}

}  // namespace fedlgc::coordinator
