// The masks of secure aggregation over Z_(2^b) (SecAgg, Bonawitz et al. 2017; SecAgg+, Bell
// et al. 2020): a client adds to the integer code of its update a mask of its own seed and,
// for each neighbour, the mask of the seed they share (key_agreement.h), added by the one
// whose identity sorts first and subtracted by the other, so that the pairwise masks cancel
// in the sum of everyone's codes and the coordinator learns only that sum once it removes
// the clients' own masks (their seeds rebuilt from shares, shamir.h). A mask is the
// keystream of its seed (keystream.h: AES-256-CTR), the fewest whole bytes that hold b
// bits a value (1, 2, 4 or 8, little-endian), cut to b bits.
#ifndef FEDLGC_PRIVACY_MASK_H_
#define FEDLGC_PRIVACY_MASK_H_

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "privacy/key_agreement.h"

namespace fedlgc::privacy {

// values[i] = values[i] + sign x mask_i(seed) mod 2^bits, sign +1 or -1, bits in [1, 64];
// the inputs are taken mod 2^bits. INVALID_ARGUMENT for other bits or signs.
absl::Status ApplyMask(const Key32& seed, int bits, int sign, std::span<uint64_t> values);

// One mask of many: its seed and the sign it is applied with.
struct MaskTerm {
  Key32 seed{};
  int sign = 1;
};
// Every term's mask applied as ApplyMask would, in one pass over `values` (each value
// read and written once, however many terms): what a client does with its own seed and
// every neighbour's, and the coordinator with the seeds it rebuilt.
absl::Status ApplyMasks(std::span<const MaskTerm> terms, int bits, std::span<uint64_t> values);

// The sign with which `self` applies the mask it shares with `peer`: +1 if self's identity
// sorts before peer's, else -1 (the two never sort equal).
int PairSign(std::string_view self, std::string_view peer);

}  // namespace fedlgc::privacy

#endif  // FEDLGC_PRIVACY_MASK_H_
