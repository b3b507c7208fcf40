// FedAvg at the edge: each round the client downloads the round's model, trains on its
// shard, adds its error-feedback residual to the update (new minus old weights), encodes
// it with the round's codec into self-contained chunks and uploads them. Chunks the
// coordinator did not count (its receipt says which) go back into the residual, so
// nothing the client computed is lost.
#ifndef FEDLGC_MODES_FEDAVG_FEDAVG_CLIENT_H_
#define FEDLGC_MODES_FEDAVG_FEDAVG_CLIENT_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codecs/frame.h"
#include "edge_client/client_mode.h"
#include "modes/fedavg/client_protocol.h"

namespace fedlgc::codecs {
class ResidualCodec;
class SliceBasis;
}  // namespace fedlgc::codecs

namespace fedlgc::modes {

using edge_client::ClientEnv;
using edge_client::PendingUpdate;
using edge_client::SystemTime;

// Downloads the round's model and trains on it: the update (new minus old weights), or an
// empty vector when the round moved on meanwhile (another version is served, or the
// deadline passed).
absl::StatusOr<std::vector<float>> TrainUpdate(ClientEnv& env, const protos::RoundStart& start,
                                               SystemTime deadline);

// The codec a FedAvg client sends with for `spec`: `spec` itself when it keeps a residual
// of its own (dgc(...)), else wrapped in error feedback: ef(spec) for a biased codec or
// with `full_error_feedback`, ef(spec,error=0) (only what did not count) for an unbiased
// one and for GradiVeQ (codecs/gradiveq.h). `basis`: the GradiVeQ basis `spec` names.
absl::StatusOr<std::unique_ptr<codecs::ResidualCodec>> MakeSenderCodec(
    const std::string& spec, const codecs::ModelLayout& layout,
    std::shared_ptr<const codecs::SliceBasis> basis, bool full_error_feedback = false);

// Encodes `x` (plus `codec`'s residual, which the encode moves) as a round's update of
// `start`: its chunk size, its upload order (P3: what matters most first; under "layer"
// every frame within one tensor) and the model's scale cuts, with randomness from `seed`
// and TernGrad's agreed `shared_scale` (0: none).
absl::StatusOr<std::vector<codecs::Frame>> EncodeRoundFrames(codecs::ResidualCodec& codec,
                                                             ClientEnv& env,
                                                             const protos::RoundStart& start,
                                                             std::span<const float> x,
                                                             float shared_scale, uint64_t seed);

// A round whose codec or RoundStart asks for more is run by one of its round protocols
// (client_protocol.h): two-phase PowerSGD, secure aggregation, shared-scale TernGrad.
class FedAvgClient final : public edge_client::ClientMode, public FedAvgClientCore {
 public:
  explicit FedAvgClient(ClientEnv& env);
  ~FedAvgClient() override;

  absl::Status OnRoundStart(const protos::RoundStart& start) override;
  absl::Status OnReceipt(const protos::RoundReceipt& receipt) override;
  absl::Status OnModeEvent(const protos::ModeEvent& event) override;

  // For modes built on this one (LGC's warm-up rounds):
  // An update whose round ended without a receipt reaching us: all of it goes back into
  // the residual.
  absl::Status Restore(const PendingUpdate& p);
  // Whether the pending update is of a round protocol that restores itself (two-phase
  // PowerSGD, secure aggregation).
  bool OwnsPending() const { return Owner() != nullptr; }

  // The protocols' state (the shared-scale round, two-phase PowerSGD's and secure
  // aggregation's update in flight), in the slot "fedavg".
  absl::Status LoadState(const edge_client::ClientState& state) override;
  absl::Status SaveState(std::map<std::string, std::string>* slots) const override;

  // FedAvgClientCore, for the protocols (and LGC's warm-up rounds: ResidualChanged).
  ClientEnv& env() override { return env_; }
  std::span<const float> residual() const override;
  // Another mode changed state().residual: the codec's residual follows.
  void ResidualChanged() override;
  absl::Status EncodeAndUpload(const protos::RoundStart& start, std::span<const float> update,
                               float shared_scale, core::Clock::time_point encode_began) override;
  absl::Status RestoreFrames(const PendingUpdate& p, std::span<const uint32_t> chunks) override;

 private:
  // The protocol whose update is in flight; null: none, or a plain round's.
  ClientProtocol* Owner() const;
  // The codec of `spec` wrapped in error feedback (unless it keeps its own residual, as
  // dgc(...) does), its residual and sender state the client's.
  absl::Status EnsureCodec(const std::string& spec);
  // The GradiVeQ basis `spec` names (nullptr when it names none): the one held, the one
  // saved with the client state, or, given a deadline, the coordinator's blob.
  absl::StatusOr<std::shared_ptr<const codecs::SliceBasis>> BasisFor(
      const std::string& spec, std::optional<SystemTime> deadline);
  // Copies the codec's residual into the client state.
  void KeepResidual();
  // Adds a frame that did not count back into the residual (RestoreAny); one coded
  // against a basis that is not held is dropped with a message instead of stalling.
  absl::Status RestoreFrame(const std::string& frame);

  ClientEnv& env_;  // outlives this mode
  std::unique_ptr<codecs::ResidualCodec> codec_;
  std::string codec_spec_;
  std::shared_ptr<const codecs::SliceBasis> basis_;
  // MakeClientProtocols' (client_protocols.cc), in the order a round asks them.
  std::vector<std::unique_ptr<ClientProtocol>> protocols_;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_FEDAVG_CLIENT_H_
