// LGC's compact codes (stage 2 in lgc_plan.h; docs/lgc.md), without libtorch:
//
// - The support as a set: the leader's k coordinates in ascending order, Elias-Fano coded
//   (codecs/elias_fano.h, within about 2 bits per index of log2 C(dim, k)). Any order the
//   autoencoder needs is derived at both ends from the decoded values, never sent.
// - Cells: the leader's values on it as a sign and a 3-bit cell of log-magnitude (8 cells
//   evenly spaced in log |v| between the smallest and the largest nonzero |v|), each cell
//   sent as the mean magnitude of its members: 4 bits a value and 32 bytes.
// - Bit corrections: a follower's miss r = v - g p against the prediction p (the leader's
//   decoded values), g the least-squares gain, in `bits` bits a value (1, 2 or 4) with one
//   float step per group of kGroup values. Levels are mid-rise (c - (2^bits - 1) / 2 for
//   code c); the step of a group is fitted to its levels by least squares, so every group's
//   |r - sent| <= |r|: a follower's residual cannot grow through the code (exact error
//   feedback keeps what it misses).
//
// Leader body (lgc-leader/2): u32 k, the Elias-Fano code of the support
// (EliasFanoBytes(k, dim) bytes), then the cells: 8 f32 means, ceil(k / 2) bytes of
// 4-bit codes (low nibble first; bit 3 the sign, bits 0-2 the cell).
// With zstd=1 (the default) either body travels packed: u8 mode, then the body as is (0) or
// one zstd frame of it (1), whichever is shorter (codecs::ZstdPack).
// Follower body (lgc-correction/2): u32 reference (ReferenceOf(support, leader's decoded
// values)), f32 gain, u8 bits, u32 CRC32C of the rebuilt values, ceil(k / kGroup) f32
// steps, then k codes of `bits` bits (codecs/bit_io.h order).
#ifndef FEDLGC_MODES_LGC_LGC_CODES_H_
#define FEDLGC_MODES_LGC_LGC_CODES_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "modes/lgc/lgc_plan.h"

namespace fedlgc::lgc {

inline constexpr int kCells = 8;
inline constexpr size_t kGroup = 128;

// The k largest |u| coordinates (ties to the lower index), in ascending index order.
std::vector<uint32_t> SelectSupportSet(std::span<const float> u, size_t k);

// Appends the cells of `v` to *out; the values they decode to go to *decoded when given.
void EncodeCells(std::span<const float> v, std::string* out, std::vector<float>* decoded);
// Size of the cells of k values.
size_t CellsBytes(size_t k);

struct LeaderCells {
  std::vector<uint32_t> support;  // ascending
  std::vector<float> values;      // as decoded, in support order
};
// `support` ascending, `v` the leader's values on it. *sent gets the decoded values.
std::string EncodeLeaderCells(std::span<const uint32_t> support, std::span<const float> v,
                              uint64_t dim, std::vector<float>* sent);
// Refuses another k than `k`, a support not strictly ascending or out of range, negative
// or non-finite means, truncated or trailing bytes.
absl::StatusOr<LeaderCells> DecodeLeaderCells(std::span<const uint8_t> body, uint64_t dim,
                                              size_t k);

// The order the autoencoder reads the support in: positions of `values` by value
// ascending, ties by position (both ends hold the decoded values).
std::vector<uint32_t> ValueOrder(std::span<const float> values);

struct BitCorrection {
  uint32_t reference = 0;
  float gain = 0;
  uint8_t bits = 1;
  uint32_t sent_crc = 0;
  std::vector<float> steps;       // one per group of kGroup values
  std::vector<uint8_t> codes;     // one per value, < 2^bits
  std::vector<float> correction;  // steps[j / kGroup] * level(codes[j]): what Rebuild adds
  std::vector<float> sent;        // Rebuild(gain, prediction, correction); client side only
};
// The client's side: v its values on the support, p the prediction (same length).
BitCorrection CorrectBits(std::span<const float> v, std::span<const float> prediction, int bits);
absl::StatusOr<std::string> EncodeBitCorrection(const BitCorrection& c);
// Fills every field but `sent`. Refuses bits other than 1, 2 or 4, a non-finite gain or
// step, a negative step, truncated or trailing bytes.
absl::StatusOr<BitCorrection> DecodeBitCorrection(std::span<const uint8_t> body, size_t k);

// The 4-bit cell codes of a leader body EncodeLeaderCells made for k indices of dim (bit 3
// the sign, bits 0-2 the cell), in support order.
std::vector<uint8_t> LeaderCellCodes(std::string_view body, size_t k, uint64_t dim);

// How a stage-2 body travels (lgc_plan.h; docs/lgc.md "The lossless stage"). With
// entropy=1 (the default): a byte 2 and the body's entropy form (lgc_entropy.h: the
// leader's support as a context-coded bitmap and its cells, a follower's codes, under
// probabilities each body learns as it goes; headers, means and steps as they are), or a
// byte 0 and the body itself when that is shorter. With entropy=0 and zstd=1: a byte 0 and
// the body, or a byte 1 and one Zstandard frame of it (codecs::ZstdPack, level 3). With
// both 0: the body itself. Packing takes the body its encoder made and what it was made
// of; unpacking gives the body back byte for byte before decoding it, so every check of
// DecodeLeaderCells and DecodeBitCorrection still applies. A zstd frame that would inflate
// beyond the largest body of its kind (LeaderCellsBytes, BitCorrectionBytes) is refused
// before it is inflated; an entropy stream costs at most dim + 4k decisions (k x bits
// for a correction), whatever its bytes.
absl::StatusOr<std::string> PackLeaderCells(const LgcPlan& plan, std::string body,
                                            std::span<const uint32_t> support, uint64_t dim);
absl::StatusOr<std::string> PackBitCorrection(const LgcPlan& plan, std::string body,
                                              const BitCorrection& c);
absl::StatusOr<LeaderCells> UnpackLeaderCells(const LgcPlan& plan, std::span<const uint8_t> body,
                                              uint64_t dim, size_t k);
absl::StatusOr<BitCorrection> UnpackBitCorrection(const LgcPlan& plan,
                                                  std::span<const uint8_t> body, size_t k);
// Body sizes: a leader's for k of dim, a follower's for k values at `bits`.
size_t LeaderCellsBytes(size_t k, uint64_t dim);
size_t BitCorrectionBytes(size_t k, int bits);

}  // namespace fedlgc::lgc

#endif  // FEDLGC_MODES_LGC_LGC_CODES_H_
