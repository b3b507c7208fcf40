// FedAvg's --algorithm: what the clients' local objective adds to their own loss
// (docs/algorithms.md). fedavg: nothing; fedprox(mu=M): Li et al. 2020's proximal term
// (M / 2) ||w - w_round||^2, which holds each client near the round's model on skewed data;
// scaffold: Karimireddy et al. 2020's control variates, which correct each local step by
// the difference between the server's estimate of the global gradient and the client's
// (modes/fedavg/scaffold_rounds.h, scaffold_client.h).
#ifndef FEDLGC_MODES_FEDAVG_ALGORITHM_H_
#define FEDLGC_MODES_FEDAVG_ALGORITHM_H_

#include <string>

#include "absl/status/statusor.h"

namespace fedlgc::modes {

// SCAFFOLD's server control variate c, as clients download it (float32, the model's
// dimension; ModelRequest.blob, at RoundStart.objective.scaffold.control_version).
inline constexpr char kScaffoldControlBlob[] = "scaffold-control";

struct Algorithm {
  enum class Kind { kFedAvg, kFedProx, kScaffold };
  Kind kind = Kind::kFedAvg;
  double mu = 0.01;  // FedProx's (the reference's default)

  // "fedavg", "fedprox", "fedprox(mu=M)" (M in (0, 1000]) or "scaffold"; INVALID_ARGUMENT
  // says what is wrong, naming --algorithm.
  static absl::StatusOr<Algorithm> Parse(const std::string& text);
  std::string ToString() const;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_ALGORITHM_H_
