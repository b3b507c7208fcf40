// --algorithm fedprox(mu=M) as a round protocol (Li et al. 2020): every participant's
// RoundStart carries the proximal term's mu (RoundStart.objective), which the client adds
// to its local objective, (mu / 2) ||w - w_round||^2 (core::TrainOptions::prox_mu; a Python
// loop adds fedlgc.proximal_term). Nothing changes at the coordinator: the round is summed,
// sampled, masked or buffered as the other protocols run it.
#include "modes/fedavg/fedavg_driver.h"
#include "modes/fedavg/round_protocol.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {
namespace {

class FedProx final : public RoundProtocol {
 public:
  explicit FedProx(double mu) : mu_(static_cast<float>(mu)) {}
  ProtocolId id() const override { return ProtocolId::kFedProx; }

  // Runs on gRPC threads: reads only mu_, set once.
  void DecorateRoundStart(const std::string& /*client*/, protos::RoundStart* start) override {
    start->mutable_objective()->set_prox_mu(mu_);
  }

 private:
  const float mu_;
};

}  // namespace

const ProtocolEntry& FedProxProtocol() {
  static const ProtocolEntry kEntry{
      .id = ProtocolId::kFedProx,
      .name = "--algorithm fedprox",
      .wanted =
          [](const ProtocolJob& job) { return job.algorithm.kind == Algorithm::Kind::kFedProx; },
      .make = [](const ProtocolJob& job) -> absl::StatusOr<std::unique_ptr<RoundProtocol>> {
        return std::make_unique<FedProx>(job.algorithm.mu);
      },
  };
  return kEntry;
}

}  // namespace fedlgc::modes
