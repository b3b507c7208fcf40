// The integer code that secure aggregation sums (modes/fedavg/secagg_rounds.h,
// docs/privacy.md): a client cuts its update to L2 norm `clip`, rotates it with the
// round's public rotation (rotation.h), and rounds each coordinate stochastically onto a
// grid shared by every client of the round: code c in [-s, s] stands for c x step, with
//   step = kappa x clip / (sqrt(d) x s).
// After the rotation a coordinate of an update of norm at most `clip` is close to
// N(0, clip^2 / d), so the grid's span, kappa standard deviations, fits nearly all of them;
// the few beyond it are cut to +-s (counted). Rounding is unbiased on the grid:
// E[c x step] is the rotated coordinate (Suresh et al. 2017; the shape of Kairouz et al.
// 2021's DDGauss pipeline). Because every client shares the grid, codes add up: the sum of
// n codes, in [-n s, n s], decodes once to the sum of what they code (DecodeSum), and a
// masked sum that the masks leave exactly equal decodes to the same floats bit for bit.
//
// The level count comes from the job's codec: qsgd(bits=B) is QSGD's uniform levels,
// s = 2^(B-1) - 1, on the round's grid instead of each bucket's norm (so a 4-bit code is
// -7..7); terngrad(...) is s = 1. randk(ratio=r | k=K, values=qsgd(...) | terngrad(...),
// seed=...) codes only k coordinates of the rotated update, the same k for every client
// of the round (drawn from the rotation's seed), and the decoded sum scales them by d / k
// (rand-k's unbiased estimate): the code has k words, not d.
//
// Thread-safety: immutable after Create; Encode and DecodeSum may run concurrently.
#ifndef FEDLGC_CODECS_SUM_CODE_H_
#define FEDLGC_CODECS_SUM_CODE_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/rotation.h"

namespace fedlgc::codecs {

class SumCode {
 public:
  // The levels s of a job codec secure aggregation can sum: qsgd(bits=B | s=S, ...) without
  // elias, or terngrad(...). INVALID_ARGUMENT for any other codec, with what would do.
  static absl::StatusOr<int> LevelsOf(std::string_view codec_spec);
  // The coordinates a code of `codec_spec` keeps of `dim`: k for randk(...), else dim.
  static absl::StatusOr<uint64_t> KeptOf(std::string_view codec_spec, uint64_t dim);
  // Codes in [-levels, levels] for vectors of `dim` coordinates cut to norm `clip`, on a
  // grid of kappa standard deviations, rotated by the rotation of `rotation_seed`.
  // INVALID_ARGUMENT for levels outside [1, 2^20], clip or kappa not finite and > 0.
  // `kept` (0: dim) coordinates of the rotated update, drawn from the rotation's seed.
  static absl::StatusOr<SumCode> Create(uint64_t dim, int levels, double clip, double kappa,
                                        uint64_t rotation_seed, uint64_t kept = 0);

  uint64_t dim() const { return rotation_.dim(); }
  // Words in a code: the coordinates kept.
  uint64_t code_size() const { return support_.empty() ? dim() : support_.size(); }
  int levels() const { return levels_; }
  double clip() const { return clip_; }
  double step() const { return step_; }
  // Bits of one code in two's complement: ceil(log2(2s + 1)).
  int code_bits() const { return SumBits(levels_, 1); }
  // Bits that hold any sum of n codes of s levels: ceil(log2(2 n s + 1)).
  static int SumBits(int levels, uint64_t n);
  // A histogram of update norms that a round can sum beside the codes (one word a bin,
  // each client adding 1 to its norm's bin): half-octave bins, bin b holding the norms in
  // [2^((b - 40) / 2), 2^((b - 39) / 2)), the first and last open-ended.
  static constexpr int kNormBins = 80;
  static int NormBin(double norm);
  // The top of bin b: 2^((b - 39) / 2).
  static double NormBinTop(int bin);

  struct Encoded {
    std::vector<int32_t> code;  // code_size() codes in [-s, s]
    double norm = 0;            // of the update before the cut
    bool clipped = false;       // the update was cut to `clip`
    uint64_t saturated = 0;     // rotated coordinates beyond the grid, cut to +-s
  };
  // The code of `x` (dim() values), its rounding drawn from `seed`. INVALID_ARGUMENT for
  // another size or a value that is not finite.
  absl::StatusOr<Encoded> Encode(std::span<const float> x, uint64_t seed) const;
  // What `sum` (code_size() sums of codes) codes, divided by `divisor`, into out (dim()
  // values).
  // INVALID_ARGUMENT for other sizes or a divisor that is not > 0.
  absl::Status DecodeSum(std::span<const int64_t> sum, double divisor, std::span<float> out) const;

 private:
  SumCode(Rotation rotation, int levels, double clip, double step, std::vector<uint32_t> support)
      : rotation_(std::move(rotation)),
        levels_(levels),
        clip_(clip),
        step_(step),
        support_(std::move(support)) {}

  Rotation rotation_;
  int levels_;
  double clip_;
  double step_;
  std::vector<uint32_t> support_;  // sorted; empty: every coordinate
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_SUM_CODE_H_
