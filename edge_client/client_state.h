// What an edge client must not lose across a restart: its error-feedback residual (and the
// codec's other sender state, such as DGC's momentum), the update it is uploading (its
// frames, so a resumed upload sends the very same bytes and the coordinator's receipts
// refer to them) and each mode's own state (an LSGD or SGP client's model, LGC's support,
// two-phase PowerSGD's phase), which the mode writes and reads in its own slot.
// Written atomically after every encode, receipt, pull, mixing step and local period.
#ifndef FEDLGC_EDGE_CLIENT_CLIENT_STATE_H_
#define FEDLGC_EDGE_CLIENT_CLIENT_STATE_H_

#include <cstdint>
#include <map>
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
  // Chunk i's part of the update (UpdateChunk.part; empty: all 0, the model update).
  std::vector<uint32_t> parts;
  // The job id (JoinReply) of the coordinator it was made for; empty in files older than
  // version 9. A client that fails over to another coordinator gives it up.
  std::string job;

  bool operator==(const PendingUpdate&) const = default;
};

// What client state files before version 12 kept of the modes in fields of their own.
// LoadClientState fills it from such a file; each mode takes its part (ClientMode::
// LoadState) while its slot is empty, and the next write keeps it in the slot instead.
struct LegacyModeFields {
  // The update in flight's LGC stage (0: a codec update), support and values sent on it.
  uint32_t lgc_stage = 0;
  std::vector<uint32_t> lgc_support;
  std::vector<float> lgc_values;
  // The update in flight's two-phase PowerSGD phase (0: none) and factor.
  uint32_t psgd_phase = 0;
  std::vector<float> psgd_factor;
  // terngrad(shared=1): the round waiting for its shared scale and its model version.
  uint64_t scale_round = 0;
  uint64_t scale_version = 0;
  // LSGD's and SGP's local model (modes/local_model.h).
  std::vector<float> x;
  double w = 1;
  uint64_t trained_round = 0;
  uint64_t pulled_round = 0;
  double loss = 0;
  uint64_t inbox_applied = 0;
  std::vector<float> contributed;
  double share_pw = 0;
  std::vector<float> share;

  bool operator==(const LegacyModeFields&) const = default;
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
  // Each mode's own state, keyed by a name the mode picks (its ClientMode writes it with
  // every Persist and reads it once, at LoadState); the file keeps the bytes as they are.
  std::map<std::string, std::string> modes;
  // The job all of the above was made in: its id and instance (JoinReply); empty and 0
  // until a Join names them (and in a file of before). Join gives the rest up when the
  // same job comes back as another instance (started afresh).
  std::string job;
  uint64_t job_instance = 0;
  // From a file older than version 12 only.
  std::optional<LegacyModeFields> legacy;

  bool operator==(const ClientState&) const = default;
};

absl::Status SaveClientState(const std::string& path, const ClientState& state);
// An empty state when the file does not exist.
absl::StatusOr<ClientState> LoadClientState(const std::string& path);

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_CLIENT_STATE_H_
