// A learned entropy model for LGC's compact codes: context-adaptive binary probabilities
// driving a range coder, over what the stage-2 bodies carry (lgc_codes.h): the leader's
// support as a bitmap, its 4-bit cells, and a follower's b-bit correction codes. Lossless:
// what decodes is exactly what was coded, so only bytes can change.
//
// The model. Every coded symbol is split into binary decisions; each decision has a
// context (what the coder has already seen), and each context keeps two probabilities that
// learn from every decision coded in it, one fast (rate 1/16) and one slow (rate 1/128);
// a decision is coded with their mean. Contexts:
//   - support bitmap, coordinate i: how many of the 8 coordinates before i are in the
//     support (0-8), and, when a prior support is given, whether i was in it;
//   - a cell's sign: the sign before it, and whether it sits next to the one before it;
//   - a cell's 3-bit magnitude, most significant bit first: the bits above it and the
//     cell before it;
//   - a correction code, most significant bit first: the bits above it, the code before
//     it and the leader's cell at that position (its magnitude, in four bands).
// An EntropyModel is the state of every probability. It starts even (Fresh), or from a
// model trained on past rounds (the state a coder ended a body with), which both ends
// must then hold; coding a body trains the model it is given.
//
// Thread-compatible: the functions keep no state of their own.
#ifndef FEDLGC_MODES_LGC_LGC_ENTROPY_H_
#define FEDLGC_MODES_LGC_LGC_ENTROPY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fedlgc::lgc {

// The probabilities of one family of contexts, two 16-bit estimates of P(bit = 0) each.
struct EntropyModel {
  std::vector<uint16_t> fast, slow;

  // `contexts` contexts, every probability at one half.
  static EntropyModel Fresh(size_t contexts);
  size_t contexts() const { return fast.size(); }
};

// The models of a leader's body: its support bitmap and its cells.
struct LeaderModels {
  EntropyModel support, sign, magnitude;
  static LeaderModels Fresh();
};

// The models of a follower's `bits`-bit correction codes.
EntropyModel FreshCorrectionModel(int bits);

// A leader's support (ascending, < dim, `prior`'s size dim or empty) and its 4-bit cell
// codes (bit 3 the sign, bits 0-2 the magnitude cell; one per index), range-coded; the
// models are trained on them. Codes above 15 or a support not ascending within dim are a
// caller's error (checked by debug asserts only; the bitmap never runs past dim, so such
// a support gives a stream that does not decode to it, not a hang).
std::string EncodeSupportAndCells(std::span<const uint32_t> support, std::span<const uint8_t> codes,
                                  uint64_t dim, std::span<const uint8_t> prior,
                                  LeaderModels* models);

struct SupportAndCells {
  std::vector<uint32_t> support;
  std::vector<uint8_t> codes;
};

// The inverse of EncodeSupportAndCells for a support of exactly k indices of dim, with the
// same prior and models as the encoder's. A stream that does not yield k indices, ends
// before its decoder does, or leaves bytes unread is refused with
// InvalidArgumentError; the models are then in no defined state.
absl::StatusOr<SupportAndCells> DecodeSupportAndCells(std::span<const uint8_t> stream, size_t k,
                                                      uint64_t dim, std::span<const uint8_t> prior,
                                                      LeaderModels* models);

// A follower's `bits`-bit codes (1, 2 or 4; each < 2^bits), range-coded; with the leader's
// cell codes at the same positions as a context (`leader_codes`, the same length), or
// without it (empty: the code before is the only context).
std::string EncodeCorrectionCodes(std::span<const uint8_t> codes, int bits,
                                  std::span<const uint8_t> leader_codes, EntropyModel* model);
absl::StatusOr<std::vector<uint8_t>> DecodeCorrectionCodes(std::span<const uint8_t> stream,
                                                           size_t count, int bits,
                                                           std::span<const uint8_t> leader_codes,
                                                           EntropyModel* model);

}  // namespace fedlgc::lgc

#endif  // FEDLGC_MODES_LGC_LGC_ENTROPY_H_
