// What the decentralised modes (LSGD, SGP) share at the edge: the model a client keeps
// between rounds (LocalModel, in the mode's slot of the client state file), started from
// the run's model on its first round, and the job's codec without error feedback (an SGP
// sender keeps what the codec loses, and an LSGD leader's next upload, its model minus the
// reference, carries it).
#ifndef FEDLGC_MODES_LOCAL_MODEL_H_
#define FEDLGC_MODES_LOCAL_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/codec.h"
#include "edge_client/client_mode.h"

namespace fedlgc::modes {

// LSGD and SGP: the model the client keeps between rounds, and where it stands.
struct LocalModel {
  std::vector<float> x;        // empty: not started (the first round downloads one)
  double w = 1;                // SGP: push-sum weight; the client trains on x / w
  uint64_t trained_round = 0;  // last round whose local period ran
  uint64_t pulled_round = 0;   // LSGD: last round whose pulls were applied
  double loss = 0;             // running loss after trained_round
  uint64_t inbox_applied = 0;  // SGP: last round whose relayed shares were added
  // SGP: what this client brought into the network: the model it started from plus every
  // change local training made to x. Push-sum conserves the sum of x, so over all clients
  // and the coordinator's mailboxes, sum of x = sum of contributed.
  std::vector<float> contributed;
  // SGP: the share in flight (its frames are the pending update, already taken out of x
  // and w): given up once its receipt says it was delivered, added back when it was not.
  double share_pw = 0;
  std::vector<float> share;

  bool operator==(const LocalModel&) const = default;
};

// The mode's slot in the client state (`slot`: "lsgd" or "sgp"): written with every
// Persist, read at LoadState. A state without the slot gives the fields of a file older
// than slots (state.legacy), or a model not started.
absl::Status SaveLocalModel(const LocalModel& m, const std::string& slot,
                            std::map<std::string, std::string>* slots);
absl::StatusOr<LocalModel> LoadLocalModel(const edge_client::ClientState& state,
                                          const std::string& slot);

// The local model: downloaded on the first round (false: the round moved on first).
absl::StatusOr<bool> EnsureLocalModel(edge_client::ClientEnv& env, const protos::RoundStart& start,
                                      LocalModel* m);

// A download or report that cannot finish because the round moved on or ended.
bool RoundOver(const absl::Status& st);

// The round's codec without error feedback, made again only when the spec changes.
class PlainCodec {
 public:
  absl::StatusOr<codecs::Codec*> Get(const std::string& spec);

 private:
  std::unique_ptr<codecs::Codec> codec_;
  std::string spec_;
};

// How a client encodes what it sends in a round: the round's seed and chunk size, and the
// model's scale cuts (ClientEnv::scale_cuts).
codecs::EncodeOptions RoundEncodeOptions(uint64_t seed, uint32_t max_chunk_bytes,
                                         const edge_client::ClientEnv& env);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LOCAL_MODEL_H_
