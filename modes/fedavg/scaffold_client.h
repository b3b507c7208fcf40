// SCAFFOLD at the edge (Karimireddy et al. 2020, option II; the coordinator's half:
// scaffold_rounds.h). In a round whose RoundStart carries objective.scaffold the client:
//   1. downloads the round's model x and the server control variate c (blob
//      "scaffold-control" at the round's version; through the compressed downlink when the
//      job has one, as the model comes);
//   2. trains from x with the correction c - c_i: after each optimizer step the trainable
//      parameters move by -lr (c - c_i), outside the momentum (core::TrainOptions::
//      correction; a Python loop: fedlgc.scaffold_step), and learns the K steps' learning
//      rates (ClientEnv::TrainLocalWith);
//   3. with y the trained weights, its control variate becomes c_i+ = c_i - c + (x - y) /
//      (K lr), over the trainable coordinates (ControlChange);
//   4. sends one update of two parts: part 0 the model update y - x through FedAvgClient's
//      codec and residual (EncodeAndUpload), part 1 the change delta c_i = c_i+ - c_i
//      through the round's codec with full error feedback and a residual of its own, its
//      frames appended to the same update in flight (UpdateChunk.part = 1) before it is
//      persisted: c_i+, both residuals and the update's frames reach the state file in one
//      write.
// A receipt puts the chunks it does not count back: part 0's into FedAvgClient's residual
// (FedAvgClientCore::RestoreFrames), part 1's into the changes' residual. c_i has moved
// by the whole change already; what of it did not reach the coordinator waits in that
// residual, so that the coordinator's sum of the clients' control variates is always
// theirs less their residuals.
// Not thread-safe: the event loop calls it, as it calls its FedAvgClient.
#ifndef FEDLGC_MODES_FEDAVG_SCAFFOLD_CLIENT_H_
#define FEDLGC_MODES_FEDAVG_SCAFFOLD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "modes/fedavg/client_protocol.h"

namespace fedlgc::codecs {
class ResidualCodec;
}

namespace fedlgc::modes {

// Option II's change of a client's control variate (Karimireddy et al. 2020, eq. (4)):
// c_i+ - c_i = -c + (x - y) / (K lr) over the coordinates [0, trainable_end) (the flat
// vector holds averaged buffers after them, which no step corrects: 0 there). `lr_sum`:
// the K steps' learning rates added up (K x lr at a fixed lr); not > 0 (no step taken):
// all 0, c_i stays. A value that is not finite: codecs::NonFiniteError.
absl::StatusOr<std::vector<float>> ControlChange(std::span<const float> x, std::span<const float> y,
                                                 std::span<const float> c, double lr_sum,
                                                 uint64_t trainable_end);

// Where the flat vector's trainable coordinates end: its first averaged buffer (the first
// of the model's scale cuts, ClientEnv::scale_cuts), else its end.
uint64_t TrainableEnd(const edge_client::ClientEnv& env);

class ScaffoldClient final : public ClientProtocol {
 public:
  explicit ScaffoldClient(FedAvgClientCore& core);
  ~ScaffoldClient() override;

  bool Runs(const protos::RoundStart& start, const codecs::RoundKind& kind) const override;
  // An update in flight of this round without a change of c_i (a plain one) goes back into
  // the residual: the round sends both parts again, part 1 from the changes' residual.
  bool ResendsOthers() const override { return false; }
  // `trained`: this round's update went back into the residuals already (both parts).
  absl::Status OnRoundStart(const protos::RoundStart& start, bool trained) override;

  // Whether the update in flight has a part 1: its receipt and its restore are this
  // protocol's then, whatever the job's algorithm now (FedAvgClient would put its part 1
  // into the model's residual).
  bool Owns(const edge_client::ClientState& state) const override;
  absl::Status OnReceipt(const protos::RoundReceipt& receipt) override;
  // Every chunk of `p` goes back (its round ended without a receipt reaching us).
  absl::Status Restore(const edge_client::PendingUpdate& p) override;
  // The round's part 1, encoded before EncodeAndUpload, joins the update in flight.
  void OnEncoded() override;

  // c_i and the changes' residual, in the slot "fedavg".
  absl::Status Load(const pb::FedAvgClientState* slot,
                    const edge_client::ClientState& state) override;
  void Save(const edge_client::ClientState& state, pb::FedAvgClientState* slot) const override;

 private:
  // What a round sends: the model update and the change of c_i.
  struct Trained {
    std::vector<float> update;
    std::vector<float> change;
  };
  // Part 1 of the round being encoded, and the state it leaves, until it joins the update
  // in flight (OnEncoded) or the encode fails.
  struct Staged {
    std::vector<std::string> frames;
    std::vector<float> control;   // c_i+
    std::vector<float> residual;  // the changes' residual after the encode
    uint64_t round = 0;
  };

  // Downloads x and c and trains; nullopt when the round moved on (another version is
  // served, or the deadline passed).
  absl::StatusOr<std::optional<Trained>> Train(const protos::RoundStart& start,
                                               edge_client::SystemTime deadline);
  // The changes' codec for `spec`: ef(spec) (full error feedback: see scaffold_rounds.h's
  // invariant), its residual ours.
  absl::Status EnsureCodec(const std::string& spec);
  // Sets the codec's residual to ours (zeros when we hold none of `n` values).
  void LoadResidual(size_t n);
  // Encodes `change` plus the residual into staged_.
  absl::Status Stage(const protos::RoundStart& start, std::span<const float> change);
  // Puts the chunks of `p` not `counted` back: part 0's into FedAvgClient's residual, part
  // 1's into ours. Returns how many went back.
  absl::StatusOr<uint64_t> RestoreUncounted(const edge_client::PendingUpdate& p,
                                            const std::vector<bool>& counted);

  FedAvgClientCore& core_;
  std::unique_ptr<codecs::ResidualCodec> codec_;
  std::string codec_spec_;
  std::vector<float> control_;   // c_i; empty: zeros
  std::vector<float> residual_;  // of the changes' codec; empty: zeros
  uint64_t round_ = 0;           // the round of the last change (0: none)
  std::optional<Staged> staged_;
};

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_FEDAVG_SCAFFOLD_CLIENT_H_
