// What an edge client must not lose across a restart: its error-feedback residual (and the
// codec's other sender state, such as DGC's momentum), the
// update it is uploading (its frames, so a resumed upload sends the very same bytes and
// the coordinator's receipts refer to them) and, in LSGD and SGP jobs, its own model.
// Written atomically after every encode, receipt, pull, mixing step and local period.
#ifndef FEDLGC_EDGE_CLIENT_CLIENT_STATE_H_
#define FEDLGC_EDGE_CLIENT_CLIENT_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::edge_client {

struct PendingUpdate {
  uint64_t round = 0;
  uint64_t model_version = 0;
  uint64_t update_id = 0;
  uint64_t num_samples = 0;
  std::vector<std::string> frames;  // chunk i is frames[i]
  std::vector<float> scales;        // LSGD leads and SGP shares: chunk i's scale (empty: 1)
  // LGC rounds: the stage, the round's support and the values sent on it (restored into
  // the residual when the update does not count). lgc_stage 0: a codec update.
  uint32_t lgc_stage = 0;
  std::vector<uint32_t> lgc_support;
  std::vector<float> lgc_values;
  // SGP: a push-sum share (sent through Gossip; ClientState::local holds what it moves,
  // already taken out of x and w until a receipt says it was not delivered).
  bool gossip = false;
  // LSGD: a leader's model minus its group's reference, coded without error feedback (the
  // reference holds what the coordinator decoded, so the next upload carries the error).
  bool lead = false;
  // Two-phase PowerSGD (modes/fedavg/powersgd_client.h): 1 P sent (the residual holds
  // all of M), 2 Q sent against psgd_factor (restored into the residual when it does not
  // count); 0: another kind of update.
  uint32_t psgd_phase = 0;
  std::vector<float> psgd_factor;
  // The job id (JoinReply) of the coordinator it was made for; empty in files older than
  // version 9. A client that fails over to another coordinator gives it up.
  std::string job;

  bool operator==(const PendingUpdate&) const = default;
};

// LSGD and SGP: the model the client keeps between rounds, and where it stands.
struct LocalModel {
  std::vector<float> x;        // empty: not started (the first round downloads one)
  double w = 1;                // SGP: push-sum weight; the client trains on x / w
  uint64_t trained_round = 0;  // last round whose local period ran
  uint64_t pulled_round = 0;   // LSGD: last round whose pulls were applied
  double loss = 0;             // LSGD: running loss after trained_round
  uint64_t inbox_applied = 0;  // SGP: last round whose relayed shares were added
  // SGP: what this client brought into the network: the model it started from plus every
  // change local training made to x. Push-sum conserves the sum of x, so over all clients
  // and the coordinator's mailboxes, sum of x = sum of contributed.
  std::vector<float> contributed;
  // SGP: the share in flight (its frames are the pending update): given up once its
  // receipt says it was delivered.
  double share_pw = 0;
  std::vector<float> share;

  bool operator==(const LocalModel&) const = default;
};

struct ClientState {
  std::string codec;            // spec the residual belongs to
  std::vector<float> residual;  // error-feedback residual (empty before the first round)
  // The codec's sender state besides the residual (DGC's momentum and warm-up position;
  // codecs/residual_codec.h), written by the codec of `codec`; empty for most codecs.
  std::string codec_state;
  // What `codec` was built with besides its spec: GradiVeQ's basis, as the coordinator
  // served it (codecs/gradiveq.h), so frames of an update in flight decode after a restart
  // even when the coordinator has moved on to another basis. Empty for most codecs.
  std::string codec_basis;
  std::optional<PendingUpdate> pending;
  LocalModel local;
  // A round of terngrad(shared=1) (modes/fedavg/terngrad_rounds.h) whose update was added
  // to the residual, where it waits for the round's shared scale (0: none), and the model
  // version it was trained from.
  uint64_t scale_round = 0;
  uint64_t scale_version = 0;

  bool operator==(const ClientState&) const = default;
};

absl::Status SaveClientState(const std::string& path, const ClientState& state);
// An empty state when the file does not exist.
absl::StatusOr<ClientState> LoadClientState(const std::string& path);

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_CLIENT_STATE_H_
