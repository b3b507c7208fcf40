// LGC at the edge (docs/lgc.md): warm-up rounds are FedAvg rounds (FedAvgClient); in
// stages 2 and 3 the round's leader sends its payload on its own top-k, the others wait
// for it (LgcLatent) and send how their values differ from it; a follower is promoted to
// lead when the coordinator asks (LgcPromote). What a payload does not carry stays in the
// error-feedback residual.
#ifndef FEDLGC_MODES_LGC_LGC_CLIENT_H_
#define FEDLGC_MODES_LGC_LGC_CLIENT_H_

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "autoencoder/autoencoder.h"
#include "modes/fedavg/fedavg_client.h"
#include "modes/in_flight.h"
#include "modes/lgc/lgc_payload.h"
#include "modes/lgc/lgc_plan.h"

namespace fedlgc::protos {
class LgcPromote;
class LgcLatent;
}  // namespace fedlgc::protos

namespace fedlgc::modes {

// The LGC part of the update in flight: its stage (cells or autoencoder), the round's support and
// the values the coordinator rebuilds on it (restored into the residual when it does not count).
struct LgcInFlight {
  lgc::LgcStage stage = lgc::LgcStage::kCells;
  std::vector<uint32_t> support;
  std::vector<float> values;

  bool operator==(const LgcInFlight&) const = default;
};

class LgcClient final : public edge_client::ClientMode {
 public:
  explicit LgcClient(ClientEnv& env) : env_(env), plain_(env) {}

  absl::Status OnRoundStart(const protos::RoundStart& start) override;
  absl::Status OnReceipt(const protos::RoundReceipt& receipt) override;
  absl::Status OnModeEvent(const protos::ModeEvent& event) override;
  // The warm-up rounds' state (FedAvgClient's slot) and the update in flight's LGC part
  // (the slot "lgc").
  absl::Status LoadState(const edge_client::ClientState& state) override;
  absl::Status SaveState(std::map<std::string, std::string>* slots) const override;

 private:
  absl::Status EnsurePlan(const std::string& codec);
  // A stage-2 or stage-3 round: values on the round's support, as leader or follower.
  absl::Status RunPayloadRound(const protos::RoundStart& start);
  // Trains and makes the round's update: its frame now (the leader), or a follower's wait
  // for the leader's payload. No pending update when the round moved on.
  absl::Status BeginUpdate(const protos::RoundStart& start);
  // The update `u` (+ residual) as this round's leader payload.
  absl::Status SendAsLeader(const protos::RoundStart& start, std::vector<float> u, PendingUpdate p,
                            LgcInFlight f);
  // The round ran out of time before `u` (update + residual) could be sent: it all goes
  // into the residual.
  absl::Status KeepForLater(std::vector<float> u);
  // A follower still waiting, told the round again (after a reconnect).
  absl::Status ResumeWaiting(const protos::RoundStart& start);
  // Puts an update that did not count back into the residual.
  absl::Status Restore(const PendingUpdate& p);
  // This client leads the LGC round it has an update for now: resend as leader.
  absl::Status OnPromote(const protos::LgcPromote& promote);
  // The leader's payload arrived; a follower waiting for it sends its correction.
  absl::Status OnLatent(const protos::LgcLatent& latent);
  // The frame of `round`'s leader update: `u` the update plus residual, f->values u on
  // the support; sets f->support and f->values to what the coordinator will rebuild.
  absl::StatusOr<std::string> LeaderFrame(uint64_t round, uint64_t encoder_version,
                                          std::span<const float> u, LgcInFlight* f);
  absl::StatusOr<std::string> LeaderBody(uint64_t round, uint64_t encoder_version,
                                         std::span<const float> u, LgcInFlight* f);
  // Stage 3: this client's prediction of its values `v` on the support from `latent`
  // (its own decoder), and the gain and innovation it sends; logs the miss.
  absl::StatusOr<lgc::Correction> PredictAndCorrect(uint64_t round, std::span<const float> v,
                                                    std::span<const float> latent,
                                                    uint64_t encoder_version, bool leader);
  // The residual after an LGC frame: u, minus f.values on the support.
  void SetResidual(std::span<const float> u, const LgcInFlight& f);
  // One rounds.jsonl line: |v - sent| / |v| of an LGC update (sent: what the coordinator
  // rebuilt or will rebuild).
  void LogMiss(uint64_t round, std::span<const float> v, std::span<const float> sent, bool leader);
  // The LGC encoder (leaders) or this client's decoder of `version` for
  // supports of k values, downloaded unless held.
  absl::Status EnsureWeights(bool decoder, uint64_t version, size_t k);
  size_t support_size() const { return plan_->SupportSize(env_.dim()); }
  // The support size of the round being run: the round start's (the ramp widens it) or
  // the plan's.
  size_t round_support_size() const {
    return round_k_ > 0 && round_k_ <= env_.dim() ? round_k_ : support_size();
  }

  ClientEnv& env_;      // outlives this mode
  FedAvgClient plain_;  // warm-up rounds, and the codec's residual
  InFlight<LgcInFlight> in_flight_;
  std::string spec_;
  std::optional<lgc::LgcPlan> plan_;
  std::unique_ptr<autoencoder::Autoencoder> encoder_;
  uint64_t encoder_version_ = 0;
  std::unique_ptr<autoencoder::Autoencoder> decoder_;  // this client's
  uint64_t decoder_version_ = 0;
  uint64_t round_encoder_version_ = 0;  // of the last stage-2/3 round start
  uint64_t round_k_ = 0;                // its support_size
  SystemTime deadline_;                 // of the round being run
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LGC_LGC_CLIENT_H_
