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

#include "edge_client/client_mode.h"
#include "modes/fedavg/powersgd_client.h"
#include "modes/fedavg/secagg_client.h"

namespace fedlgc::codecs {
class ResidualCodec;
class SliceBasis;
}  // namespace fedlgc::codecs
namespace fedlgc::protos {
class TernGradScale;
}

namespace fedlgc::modes {

using edge_client::ClientEnv;
using edge_client::PendingUpdate;
using edge_client::SystemTime;

// Downloads the round's model and trains on it: the update (new minus old weights), or an
// empty vector when the round moved on meanwhile (another version is served, or the
// deadline passed).
absl::StatusOr<std::vector<float>> TrainUpdate(ClientEnv& env, const protos::RoundStart& start,
                                               SystemTime deadline);

class FedAvgClient final : public edge_client::ClientMode {
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
  // Another mode changed state().residual: the codec's residual follows.
  void ResidualChanged();
  // Whether the pending update is of a round protocol that restores itself (two-phase
  // PowerSGD, secure aggregation).
  bool OwnsPending() const { return two_phase_.Owns(env_.state()) || secagg_.Owns(env_.state()); }

  // The shared-scale round, two-phase PowerSGD's and secure aggregation's update in flight,
  // in the slot "fedavg".
  absl::Status LoadState(const edge_client::ClientState& state) override;
  absl::Status SaveState(std::map<std::string, std::string>* slots) const override;

 private:
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
  // A round of terngrad(shared=1) (terngrad_rounds.h): trains (unless `trained`: its
  // update is in the residual already) into the residual, reports the scale it would
  // use, and sends once the round's scale is known (its RoundStart or TernGradScale).
  absl::Status OnSharedScaleRound(const protos::RoundStart& start, bool trained);
  absl::Status OnScale(const protos::TernGradScale& scale);
  // Encodes the residual with the round's shared scale and uploads it.
  absl::Status SendWithScale(float scale);
  // Encodes `update` (with the residual) as the round of `start`'s update, and uploads it.
  absl::Status EncodeAndUpload(const protos::RoundStart& start, std::span<const float> update,
                               float shared_scale);

  ClientEnv& env_;  // outlives this mode
  std::unique_ptr<codecs::ResidualCodec> codec_;
  std::string codec_spec_;
  std::shared_ptr<const codecs::SliceBasis> basis_;
  PowerSgdClient two_phase_;  // rounds of powersgd(..., phases=2)
  SecAggClientRounds secagg_;  // rounds of --secagg
  // The terngrad(shared=1) round being run, while it waits for its scale.
  std::unique_ptr<protos::RoundStart> scale_start_;
  // A round of terngrad(shared=1) (terngrad_rounds.h) whose update was added to the
  // residual, where it waits for the round's shared scale (0: none), and the model
  // version it was trained from.
  uint64_t scale_round_ = 0;
  uint64_t scale_version_ = 0;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_FEDAVG_CLIENT_H_
