// What the compressed downlink keeps per published version, so that a restarted
// coordinator serves the same chains: <state_dir>/<prefix>-<version>.bin (prefix
// "downlink", or "downlink-<blob>" for a mode's blob).
#ifndef FEDLGC_COORDINATOR_DOWNLINK_STATE_H_
#define FEDLGC_COORDINATOR_DOWNLINK_STATE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace fedlgc::coordinator {

struct DownlinkState {
  std::string codec;      // the downlink codec's spec as the job gave it
  std::string job;        // the job key
  uint32_t true_crc = 0;  // CRC32C of the true model the held one follows
  std::string encoder;    // codecs::BroadcastEncoder::SaveState()

  bool operator==(const DownlinkState&) const = default;
};

absl::Status SaveDownlinkState(const std::string& state_dir, const std::string& prefix,
                               uint64_t version, const DownlinkState& state);
absl::StatusOr<DownlinkState> LoadDownlinkState(const std::string& state_dir,
                                                const std::string& prefix, uint64_t version);

}  // namespace fedlgc::coordinator

#endif  // FEDLGC_COORDINATOR_DOWNLINK_STATE_H_
