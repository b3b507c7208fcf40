// Two-phase PowerSGD at the edge (codecs/powersgd_two_phase.h): in a round of
// powersgd(..., phases=2) the client trains, keeps M = update + residual in its residual
// and sends P = M Q for the round's query; when the round's factor P^ arrives (the
// PowerSgdFactor event, or RoundStart for a client that reconnects after it went out) it
// sends Q = M^T P^ and its dense tensors as a new update that replaces the first, and keeps
// M - P^ Q^T as its residual. Its receipt says whether that counted; what did not goes back
// into the residual, so nothing the client computed is lost. A client whose RoundStart
// already carries P^ (it reconnected after the factor went out) skips phase 1; a pending
// update made against a query or P^ the round no longer has (a restarted coordinator's new
// ones) goes back into the residual and M goes out again against the current ones.
#ifndef FEDLGC_MODES_FEDAVG_POWERSGD_CLIENT_H_
#define FEDLGC_MODES_FEDAVG_POWERSGD_CLIENT_H_

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codecs/powersgd_two_phase.h"
#include "edge_client/client_mode.h"
#include "modes/fedavg/client_protocol.h"
#include "modes/in_flight.h"

namespace fedlgc::protos {
class PowerSgdFactor;
}

namespace fedlgc::modes {

// The pending update's place in its round: 1 P sent (the residual holds all of M), 2 Q
// sent against `factor` (M - P^ Q^T in the residual; restored when it does not count).
struct PowerSgdInFlight {
  uint32_t phase = 0;
  std::vector<float> factor;

  bool operator==(const PowerSgdInFlight&) const = default;
};

// A round protocol of FedAvgClient's (client_protocol.h): the rounds of the job codec
// powersgd(..., phases=2), whose frames are its own. Not thread-safe: the event loop's.
class PowerSgdClient final : public ClientProtocol {
 public:
  // `residual_changed` runs after every change to the state's residual.
  PowerSgdClient(edge_client::ClientEnv& env, std::function<void()> residual_changed)
      : env_(env), residual_changed_(std::move(residual_changed)) {}

  bool Runs(const protos::RoundStart& start, const codecs::RoundKind& kind) const override;
  bool UsesRoundCodec() const override { return false; }
  absl::Status OnRoundStart(const protos::RoundStart& start, bool /*trained*/) override {
    return OnRoundStart(start);
  }
  std::optional<absl::Status> OnModeEvent(const protos::ModeEvent& event) override;
  absl::Status Load(const pb::FedAvgClientState* slot,
                    const edge_client::ClientState& state) override;
  void Save(const edge_client::ClientState& state, pb::FedAvgClientState* slot) const override;

  // A round of powersgd(..., phases=2); an update of an earlier round is restored first.
  absl::Status OnRoundStart(const protos::RoundStart& start);
  absl::Status OnFactor(const protos::PowerSgdFactor& factor);
  // The receipt of a pending update of this protocol.
  absl::Status OnReceipt(const protos::RoundReceipt& receipt) override;
  // Puts what pending update `p` sent back into the residual (it did not count).
  absl::Status Restore(const edge_client::PendingUpdate& p) override;
  // Whether the pending update is one of this protocol's.
  bool Owns(const edge_client::ClientState& state) const override {
    return in_flight_.Of(state) != nullptr;
  }
  // Kept in FedAvgClient's slot.
  InFlight<PowerSgdInFlight>& in_flight() { return in_flight_; }
  const InFlight<PowerSgdInFlight>& in_flight() const { return in_flight_; }

 private:
  absl::Status EnsureMath(const std::string& spec);
  // Phase 1: P against `query` from the residual (which holds M), as the round's update.
  absl::Status SendProjection(uint64_t round, uint64_t model_version, std::span<const float> query);
  // Phase 2: the message against `factor` from the residual (which holds M), as the
  // round's update.
  absl::Status SendMessage(uint64_t round, uint64_t model_version, std::vector<float> factor);

  edge_client::ClientEnv& env_;
  const std::function<void()> residual_changed_;
  std::optional<codecs::PowerSgdTwoPhase> math_;
  std::string spec_;                  // math_'s, as the round named it
  InFlight<PowerSgdInFlight> in_flight_;
  edge_client::SystemTime deadline_;  // of the round being run
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_POWERSGD_CLIENT_H_
