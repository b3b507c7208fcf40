// What an edge client must not lose across a restart: its error-feedback residual and
// the update it is uploading (its frames, so a resumed upload sends the very same bytes
// and the coordinator's receipts refer to them). Written atomically after every encode
// and every receipt.
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
  // LGC rounds: the stage, the round's support and the values sent on it (restored into
  // the residual when the update does not count). lgc_stage 0: a codec update.
  uint32_t lgc_stage = 0;
  std::vector<uint32_t> lgc_support;
  std::vector<float> lgc_values;
};

struct ClientState {
  std::string codec;            // spec the residual belongs to
  std::vector<float> residual;  // error-feedback residual (empty before the first round)
  std::optional<PendingUpdate> pending;
};

absl::Status SaveClientState(const std::string& path, const ClientState& state);
// An empty state when the file does not exist.
absl::StatusOr<ClientState> LoadClientState(const std::string& path);

}  // namespace fedlgc::edge_client

#endif  // FEDLGC_EDGE_CLIENT_CLIENT_STATE_H_
