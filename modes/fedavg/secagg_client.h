// Secure aggregation rounds of FedAvg at the edge (secagg_rounds.h has the coordinator's
// half; docs/privacy.md). In a round whose RoundStart carries fedavg.secagg the client:
//   1. makes its round's keys (privacy::SecAggClient) and reports them;
//   2. given its neighbours' keys (SecAggKeys), reports its boxes of shares, then trains:
//      the update goes into its residual, where it waits until a receipt counts it;
//   3. given its peers' boxes (SecAggShares), codes its residual on the round's grid
//      (codecs/sum_code.h: cut to the clip, rotated, rounded), adds its share of the
//      round's Skellam noise when asked (distributed DP: privacy/skellam.h), masks the code
//      in Z_(2^width) and uploads it as zmod frames (resumable like any upload);
//   4. asked (SecAggUnmask), reveals its shares of its peers' secrets.
// Without masks it trains, codes and uploads at once. A receipt that counts the update
// empties the residual (what it sent was the residual, cut and rounded: the cut and the
// rounding are not fed back); any other end leaves the update in the residual for a later
// round, so nothing trained is lost. A client that restarts mid-round has lost its keys:
// it sits the round out (its update stays in its residual) unless the round starts over.
// Not thread-safe: the event loop calls it, as it calls its FedAvgClient.
#ifndef FEDLGC_MODES_FEDAVG_SECAGG_CLIENT_H_
#define FEDLGC_MODES_FEDAVG_SECAGG_CLIENT_H_

#include <functional>
#include <optional>

#include "edge_client/client_mode.h"
#include "modes/fedavg/client_protocol.h"
#include "privacy/secagg.h"
#include "protos/fedlgc.pb.h"

namespace fedlgc::modes {

// A round protocol of FedAvgClient's (client_protocol.h): the rounds whose RoundStart
// carries fedavg.secagg.
class SecAggClientRounds final : public ClientProtocol {
 public:
  // `residual_changed` runs whenever this changes env.state().residual.
  SecAggClientRounds(edge_client::ClientEnv& env, std::function<void()> residual_changed)
      : env_(env), residual_changed_(std::move(residual_changed)) {}

  bool Runs(const protos::RoundStart& start, const codecs::RoundKind& kind) const override;
  // A secure round sends only its own masked code.
  bool ResendsOthers() const override { return false; }
  // Whether the update in flight is a secure round's masked code.
  bool Owns(const edge_client::ClientState& state) const override {
    return update_id_ != 0 && state.pending && state.pending->update_id == update_id_;
  }
  // `trained`: this round's update is in the residual already (the caller restored an
  // update of this round that was in flight).
  absl::Status OnRoundStart(const protos::RoundStart& start, bool trained) override;
  // SecAggKeys, SecAggShares and SecAggUnmask (nullopt for others).
  std::optional<absl::Status> OnModeEvent(const protos::ModeEvent& event) override;
  absl::Status OnReceipt(const protos::RoundReceipt& receipt) override;
  // The update in flight went stale without a receipt: it is in the residual already.
  absl::Status Restore(const edge_client::PendingUpdate& /*p*/) override {
    update_id_ = 0;
    return absl::OkStatus();
  }
  // What survives a restart (the fedavg slot): the round whose update is in the residual
  // and its model version, and the update id of the masked code in flight.
  absl::Status Load(const pb::FedAvgClientState* slot,
                    const edge_client::ClientState& state) override;
  void Save(const edge_client::ClientState& state, pb::FedAvgClientState* slot) const override;

 private:
  struct Session {
    protos::RoundStart start;
    privacy::SecAggClient secagg;
    bool shared = false;  // its boxes are out
    bool masked = false;  // its masked code is made
  };

  absl::Status OnKeys(const protos::SecAggKeys& keys);
  absl::Status OnShares(const protos::SecAggShares& shares);
  absl::Status OnUnmask(const protos::SecAggUnmask& unmask);
  // Sends this round's keys (a new session's, or again after the round started over).
  absl::Status SendKeys();
  // Trains the round's update into the residual unless it is there already. False: the
  // round moved on before it could train.
  absl::StatusOr<bool> EnsureTrained(const protos::RoundStart& start);
  // Codes the residual on the round's grid, masks it (with a session) and uploads it.
  absl::Status SendCode(const protos::RoundStart& start, const Session* session);
  // Gives up this round's session with why (the update stays in the residual).
  absl::Status SitOut(const absl::Status& why);

  edge_client::ClientEnv& env_;  // outlives this
  std::function<void()> residual_changed_;
  std::optional<Session> session_;
  uint64_t trained_round_ = 0, trained_version_ = 0;
  uint64_t update_id_ = 0;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_SECAGG_CLIENT_H_
