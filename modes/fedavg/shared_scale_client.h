// Shared-scale TernGrad at the edge (the coordinator's half: terngrad_rounds.h). In a round
// of terngrad(shared=1) the client trains, adds the update to its residual (where it waits:
// a restart finds it there), reports the scale it would use, and once the round's scale is
// known (its RoundStart, or the TernGradScale event) encodes the residual with it and sends.
#ifndef FEDLGC_MODES_FEDAVG_SHARED_SCALE_CLIENT_H_
#define FEDLGC_MODES_FEDAVG_SHARED_SCALE_CLIENT_H_

#include <cstdint>
#include <memory>

#include "modes/fedavg/client_protocol.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

class SharedScaleClient final : public ClientProtocol {
 public:
  explicit SharedScaleClient(FedAvgClientCore& core) : core_(core) {}

  bool Runs(const protos::RoundStart& start, const codecs::RoundKind& kind) const override;
  absl::Status OnRoundStart(const protos::RoundStart& start, bool trained) override;
  std::optional<absl::Status> OnModeEvent(const protos::ModeEvent& event) override;
  // What waited in the residual went out with the update.
  void OnEncoded() override { scale_round_ = scale_version_ = 0; }
  absl::Status Load(const pb::FedAvgClientState* slot,
                    const edge_client::ClientState& state) override;
  void Save(const edge_client::ClientState& state, pb::FedAvgClientState* slot) const override;

 private:
  absl::Status OnScale(const protos::TernGradScale& scale);
  // Encodes the residual with the round's shared scale and uploads it.
  absl::Status SendWithScale(float scale);

  FedAvgClientCore& core_;
  // The round being run, while it waits for its scale.
  std::unique_ptr<protos::RoundStart> scale_start_;
  // The round whose update was added to the residual, where it waits for the round's
  // shared scale (0: none), and the model version it was trained from.
  uint64_t scale_round_ = 0;
  uint64_t scale_version_ = 0;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_SHARED_SCALE_CLIENT_H_
