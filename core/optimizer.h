// The client's local optimizer as a spec in the codecs' grammar (base/spec.h):
//   sgd(lr=0.05, momentum=0.9, weight_decay=0, nesterov=0)
//   adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0)
// An SGD that names no lr takes the round's (the coordinator's --lr); Adam's lr is 0.001
// unless named. Parsed without libtorch, so flags are checked before anything loads.
#ifndef FEDLGC_CORE_OPTIMIZER_H_
#define FEDLGC_CORE_OPTIMIZER_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace fedlgc::core {

struct OptimizerSpec {
  enum class Kind { kSgd, kAdam };
  Kind kind = Kind::kSgd;
  std::optional<double> lr;  // unset: the round's (SGD), 0.001 (Adam)
  double momentum = 0.9;
  double weight_decay = 0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

  // "" is sgd() with the round's lr and momentum 0.9.
  static absl::StatusOr<OptimizerSpec> Parse(const std::string& text);
  // The learning rate for a round whose lr is `round_lr`.
  double LearningRate(double round_lr) const;
  std::string ToString() const;
};

}  // namespace fedlgc::core

#endif  // FEDLGC_CORE_OPTIMIZER_H_
