// Stochastic quantization of each bucket of B coordinates onto a level set scaled by the
// bucket's norm (Alistarh et al., "QSGD", NeurIPS 2017; Ramezani-Kebrya et al., NUQSGD;
// Horvath et al., "Natural Compression", natural dithering). With magnitude levels
// 0 = l_0 < l_1 < ... < l_s = 1 and r = |v_i| / ||v||, a coordinate with
// l_j <= r < l_{j+1} becomes l_{j+1} with probability (r - l_j) / (l_{j+1} - l_j), else
// l_j; the output is sign(v_i) * ||v|| * level, so E[Q(v)] = v.
//
//   qsgd(bits=4 | s=7, bucket=512, norm=l2|linf, elias=0)   uniform levels j/s
//   nuqsgd(bits=4 | s=7, p=0.5, bucket=512, norm=l2, elias=0)  levels p^(s-j), j >= 1
//   natdither(s=8, bucket=512, norm=l2|linf, elias=0)       levels 2^(j-s), j >= 1
//
// Wire format: one float32 norm per bucket, then per bucket either ceil(log2(2s+1))-bit
// codes (code = s +- level index) or, with elias=1, an Elias-gamma stream per bucket:
// gamma(nnz+1), then per nonzero gamma(gap+1), a sign bit and gamma(level).
#ifndef FEDLGC_CODECS_LEVEL_QUANTIZER_H_
#define FEDLGC_CODECS_LEVEL_QUANTIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/spec.h"
#include "codecs/dense_codec.h"

namespace fedlgc::codecs {

enum class NormKind { kL2, kLinf };

class ParamReader;

// The parameters every level quantizer spec shares: bits | s, bucket, norm, elias.
struct LevelParams {
  int s = 0;
  NormKind norm = NormKind::kL2;
  uint32_t bucket = 512;
  bool elias = false;
  std::string bits_or_s;  // canonical spelling of the level count
};
// `allow_bits`: the level count may be given as bits (s = 2^(bits-1) - 1).
absl::StatusOr<LevelParams> ReadLevelParams(const ParamReader& params, bool allow_bits,
                                            int def_bits, int def_s);
// ",bucket=...,norm=...,elias=...)": the end of a canonical spec.
std::string LevelParamsSuffix(const LevelParams& c);

class LevelQuantizer final : public DenseCodec {
 public:
  static absl::StatusOr<std::unique_ptr<Codec>> CreateQsgd(const SpecNode& node);
  static absl::StatusOr<std::unique_ptr<Codec>> CreateNuqsgd(const SpecNode& node);
  static absl::StatusOr<std::unique_ptr<Codec>> CreateNatDither(const SpecNode& node);
  // A quantizer onto `levels` (0 = l_0 < ... < l_s = 1, which the caller checks), for
  // codecs that choose their levels per encode (alq, amq); `spec` names it in messages.
  static std::unique_ptr<LevelQuantizer> WithLevels(std::string spec, std::vector<float> levels,
                                                    NormKind norm, uint32_t bucket, bool elias);

  uint64_t MaxBodyBytes(uint64_t n) const override;
  absl::Status EncodeBody(std::span<const float> values, const BodyContext& ctx,
                          std::string* out) const override;
  absl::Status DecodeBody(std::span<const uint8_t> body, std::span<float> out) const override;
  double BoundBitsPerCoord() const override;

  // Magnitude levels l_0 = 0 < ... < l_s = 1.
  const std::vector<float>& levels() const { return levels_; }
  int s() const { return s_; }
  int bits() const { return bits_; }
  uint32_t bucket() const { return bucket_; }
  NormKind norm() const { return norm_; }

 private:
  enum class Kind { kUniform, kExp2, kTable };
  LevelQuantizer(std::string spec, Kind kind, std::vector<float> levels, NormKind norm,
                 uint32_t bucket, bool elias);

  float BucketNorm(std::span<const float> x) const;
  void Quantize(std::span<const float> x, float norm, uint32_t key, uint8_t* codes) const;
  absl::Status DecodeElias(std::span<const uint8_t> body, std::span<float> out) const;

  Kind kind_;
  std::vector<float> levels_;
  std::vector<float> code_value_;  // value of each code for a unit norm
  int s_;
  int bits_;
  NormKind norm_;
  uint32_t bucket_;
  bool elias_;
};

// The per-level step for uniform levels: norm / s, rounded down where needed so that
// s * step <= norm. Shared by every uniform decoder (CPU, Elias, GPU) so all agree.
float UniformLevelScale(float norm, int s);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_LEVEL_QUANTIZER_H_
