// What the decentralised modes (LSGD, SGP) share at the edge: the model a client keeps
// between rounds (ClientState::local), started from the run's model on its first round,
// and the job's codec without error feedback (an SGP sender keeps what the codec loses,
// and an LSGD leader's next upload, its model minus the reference, carries it).
#ifndef FEDLGC_MODES_LOCAL_MODEL_H_
#define FEDLGC_MODES_LOCAL_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "codecs/codec.h"
#include "edge_client/client_mode.h"

namespace fedlgc::modes {

// The local model: downloaded on the first round (false: the round moved on first).
absl::StatusOr<bool> EnsureLocalModel(edge_client::ClientEnv& env, const protos::RoundStart& start);

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

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LOCAL_MODEL_H_
