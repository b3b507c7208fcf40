// Plain float codecs: fp32 (identity), fp16 (IEEE half, saturating) and bf16 (bfloat16,
// round to nearest even). Deterministic; fp32 is exact.
#ifndef FEDLGC_CODECS_FLOAT_CODECS_H_
#define FEDLGC_CODECS_FLOAT_CODECS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "base/spec.h"
#include "codecs/dense_codec.h"

namespace fedlgc::codecs {

enum class FloatFormat { kFp32, kFp16, kBf16 };

class FloatCodec final : public DenseCodec {
 public:
  static absl::StatusOr<std::unique_ptr<Codec>> Create(FloatFormat format, const SpecNode& node);

  uint64_t MaxBodyBytes(uint64_t n) const override { return n * bytes_; }
  absl::Status EncodeBody(std::span<const float> values, const BodyContext& ctx,
                          std::string* out) const override;
  absl::Status DecodeBody(std::span<const uint8_t> body, std::span<float> out) const override;
  double BoundBitsPerCoord() const override { return 8.0 * bytes_; }

 private:
  FloatCodec(std::string spec, FloatFormat format);

  FloatFormat format_;
  size_t bytes_;
};

// Conversions, exposed for tests. FloatToHalf saturates to +-65504 and rounds to nearest
// even; HalfToFloat is exact.
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_FLOAT_CODECS_H_
