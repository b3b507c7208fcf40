// Authenticated encryption of what one client of a secure aggregation round sends another
// through the coordinator (SecAgg, Bonawitz et al. 2017: its shares of a seed and a key):
// AES-256-GCM under the seed the two agree (key_agreement.h), with a fresh random 96-bit
// nonce, and associated data that names the round, the sender and the receiver, so that
// a box relayed to anyone else, or replayed into another round, does not open. A box is
// nonce (12 bytes) || ciphertext || tag (16 bytes). Through OpenSSL.
#ifndef FEDLGC_PRIVACY_SHARE_BOX_H_
#define FEDLGC_PRIVACY_SHARE_BOX_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "privacy/key_agreement.h"

namespace fedlgc::privacy {

inline constexpr size_t kBoxOverhead = 12 + 16;

// INTERNAL if OpenSSL fails.
absl::StatusOr<std::string> SealBox(const Key32& key, std::string_view aad,
                                    std::span<const uint8_t> plaintext);
// The plaintext of `box`; INVALID_ARGUMENT for a box too short, or one that does not
// authenticate under `key` and `aad` (tampered, misrouted or replayed).
absl::StatusOr<std::vector<uint8_t>> OpenBox(const Key32& key, std::string_view aad,
                                             std::string_view box);

}  // namespace fedlgc::privacy

#endif  // FEDLGC_PRIVACY_SHARE_BOX_H_
