// Sparsifying codecs: keep k coordinates, code their indices with Elias-Fano and pass
// their values through any dense codec.
//
//   topk(ratio=0.01 | k=N, values=fp32, sampled=0, sample=0.01)
//       the k largest magnitudes; sampled=1 finds the same set faster through a sampled
//       threshold (DGC, Lin et al. ICLR 2018). Biased: use it under ef(...).
//   randk(ratio=0.01 | k=N, values=fp32, scale=1, seed=S | seed=round)
//       k uniformly random coordinates; scale=1 multiplies them by d/k (unbiased).
//       Without seed, each sender draws its own set from EncodeOptions::seed. With seed=S
//       every sender keeps the same set, drawn from S: frames carry no indices, and the
//       codes of many senders add up (a LinearCode: the kept values in index order).
//       seed=round is the plan's form: the coordinator names each round's S in the
//       round's spec, and a codec built from seed=round encodes nothing.
//
// Frame body: u32 m (coordinates kept in this frame), Elias-Fano code of their offsets
// in [0, frame length), then the value codec's body for the m values; with seed=S only
// the value codec's body (m follows from S and the frame's range). A chunked encoding
// splits the kept set at multiples of the value codec's block, so every frame decodes
// alone and all frames together decode exactly like the unchunked encoding.
#ifndef FEDLGC_CODECS_SPARSE_CODEC_H_
#define FEDLGC_CODECS_SPARSE_CODEC_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/dense_codec.h"
#include "codecs/params.h"
#include "codecs/registry.h"

namespace fedlgc::codecs {

// The dense codec named by `values=` (fp32 when absent), for codecs that send kept values.
absl::StatusOr<std::unique_ptr<DenseCodec>> ReadValueCodec(const ParamReader& params,
                                                           const CodecContext& context);

// Coordinates a ratio keeps out of n: round(ratio * n), at least 1 (0 when n is 0).
uint64_t KeptForRatio(double ratio, uint64_t n);

// The largest seed a randk spec names (numbers in specs are doubles: exact below 2^53).
inline constexpr uint64_t kMaxSharedSeed = (uint64_t{1} << 52) - 1;

// `spec` (a canonical plan spec whose randk draws from the round's seed,
// RoundKind::round_seed: canonical specs write it `seed=round`)
// with seed=round replaced by `seed`.
std::string WithRoundSeed(std::string_view spec, uint64_t seed);

// Thread-safe like DenseCodec: no mutable state.
class SparseCodec final : public Codec, public LinearCode {
 public:
  static absl::StatusOr<std::unique_ptr<Codec>> CreateTopK(const SpecNode& node,
                                                           const CodecContext& context);
  static absl::StatusOr<std::unique_ptr<Codec>> CreateRandomK(const SpecNode& node,
                                                              const CodecContext& context);

  // A codec whose sender chooses the kept set of every encode (DGC): frames of `spec`
  // with any number of kept values; Encode fails, EncodeSelected writes the frames.
  static std::unique_ptr<SparseCodec> ForGivenSets(std::string spec,
                                                   std::unique_ptr<DenseCodec> values);

  CodecTraits traits() const override;
  uint64_t MaxFrameBytes(uint64_t n) const override;
  // Every coordinate of the range kept.
  uint64_t MaxRangeFrameBytes(uint64_t n) const override { return FrameBytes(n, n); }
  absl::Status Encode(std::span<const float> x, const EncodeOptions& opts,
                      std::vector<Frame>* frames) override;
  absl::Status Decode(const FrameView& frame, std::span<float> out) const override;

  // Encodes the coordinates idx (ascending, distinct, each < x.size()) of x exactly as
  // Encode encodes the set it selects.
  absl::Status EncodeSelected(std::span<const float> x, std::span<const uint32_t> idx,
                              const EncodeOptions& opts, std::vector<Frame>* frames) const;

  // LinearCode, for randk with seed=S built with a layout (traits().summable): the code
  // is the kept values in index order.
  uint64_t code_size() const override { return KeptCount(dim_); }
  absl::StatusOr<uint64_t> ReadCode(const FrameView& frame,
                                    std::vector<float>* code) const override;
  absl::Status DecodeCode(std::span<const float> code, std::span<float> out) const override;

  // Coordinates kept out of n.
  uint64_t KeptCount(uint64_t n) const;
  // The kept index set for x (sorted), as Encode chooses it.
  void Select(std::span<const float> x, uint64_t seed, std::vector<uint32_t>* idx) const;
  // Information bound in bits for n coordinates: k values at the value codec's bound
  // plus log2 C(n, k) for the index set.
  double BoundBits(uint64_t n) const;
  const DenseCodec& values() const { return *values_; }

 private:
  enum class Kind { kTopK, kRandomK, kGiven };
  SparseCodec(std::string spec, Kind kind, double ratio, uint64_t k,
              std::unique_ptr<DenseCodec> values, bool sampled, double sample, bool scale);

  // randk with seed=S: the kept set of a vector of n coordinates (the one drawn at
  // construction when n is the layout's dimension, else drawn into *scratch).
  std::span<const uint32_t> SharedSet(uint64_t n, std::vector<uint32_t>* scratch) const;
  // randk with seed=S: the kept positions [first, last) of the set that fall in the
  // frame's range.
  std::pair<uint64_t, uint64_t> SharedRange(const FrameView& frame,
                                            std::span<const uint32_t> set) const;
  // The value codec's body for vals.size() values, checked for size, into vals.
  absl::Status ReadValues(std::span<const uint8_t> body, std::span<float> vals) const;

  absl::Status CheckInput(std::span<const float> x, uint64_t k, const EncodeOptions& opts) const;
  absl::Status WriteFrames(std::span<const float> x, std::span<const uint32_t> idx,
                           const EncodeOptions& opts, std::vector<Frame>* frames) const;
  // One frame of an n-coordinate update: coordinates [begin, end) with the kept values
  // vals[p, p + m) at idx[p, p + m); `fitted`: the value codec's parameters (Fit).
  absl::StatusOr<Frame> MakeFrame(uint64_t n, uint64_t begin, uint64_t end,
                                  std::span<const uint32_t> idx, std::span<const float> vals,
                                  uint64_t p, uint64_t m, const EncodeOptions& opts,
                                  std::span<const float> fitted) const;

  // Bytes of a frame holding m kept values over a range of u coordinates.
  uint64_t FrameBytes(uint64_t m, uint64_t u) const;

  Kind kind_;
  double ratio_;  // used when k_ == 0
  uint64_t k_;
  std::unique_ptr<DenseCodec> values_;
  bool sampled_;
  double sample_;
  bool scale_;
  uint64_t seed_ = 0;        // randk's shared seed; 0: each sender draws its own set
  bool round_seed_ = false;  // seed=round: the plan's form, which encodes nothing
  bool has_dim_ = false;     // built with a layout: dim_ is the vector's dimension
  uint64_t dim_ = 0;
  std::vector<uint32_t> shared_;  // the kept set for dim_ (seed_ != 0 and has_dim_)
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_SPARSE_CODEC_H_
