// What the LGC aggregator must not lose across a restart, in <state_dir>/lgc-<round>.bin
// beside the round's checkpoint: its autoencoder, who led when, and when stage 3 began.
#ifndef FEDLGC_MODES_LGC_LGC_STATE_H_
#define FEDLGC_MODES_LGC_LGC_STATE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace fedlgc::modes {

struct LgcState {
  uint64_t ae_steps = 0;                // the autoencoder's training steps so far
  std::string autoencoder;              // Autoencoder::Serialize(); empty without one
  std::map<std::string, uint64_t> led;  // the last LGC round each client led
  uint64_t switch_round = 0;            // the first stage-3 round; 0: not yet

  bool operator==(const LgcState&) const = default;
};

absl::Status SaveLgcState(const std::string& state_dir, uint64_t round, const LgcState& state);
absl::StatusOr<LgcState> LoadLgcState(const std::string& state_dir, uint64_t round);

}  // namespace fedlgc::modes

#endif  // FEDLGC_MODES_LGC_LGC_STATE_H_
