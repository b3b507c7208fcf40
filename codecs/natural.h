// Natural compression C_nat (Horvath et al., "Natural Compression for Distributed Deep
// Learning", arXiv 1905.10988): each value t with 2^a <= |t| < 2^(a+1) becomes
// sign(t) * 2^a with probability (2^(a+1) - |t|) / 2^a, else sign(t) * 2^(a+1).
// Unbiased, E|C(t)|^2 <= 9/8 t^2. Wire: 8-bit exponent per value, then the sign bits:
// 9 bits per coordinate.
//
//   natural()
//
// Subnormal inputs round the same way between 0 and 2^-126; values in the top binade
// (|t| >= 2^127) round down only, which is the one place the codec is biased.
#ifndef FEDLGC_CODECS_NATURAL_H_
#define FEDLGC_CODECS_NATURAL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "base/spec.h"
#include "codecs/dense_codec.h"

namespace fedlgc::codecs {

class NaturalCompression final : public DenseCodec {
 public:
  static absl::StatusOr<std::unique_ptr<Codec>> Create(const SpecNode& node);

  uint64_t MaxBodyBytes(uint64_t n) const override { return n + (n + 7) / 8; }
  absl::Status EncodeBody(std::span<const float> values, const BodyContext& ctx,
                          std::string* out) const override;
  absl::Status DecodeBody(std::span<const uint8_t> body, std::span<float> out) const override;
  double BoundBitsPerCoord() const override { return 9.0; }

  // Randomness is keyed per block of this many values.
  static constexpr uint32_t kBlock = 1024;

 private:
  NaturalCompression();
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_NATURAL_H_
