// TernGrad (Wen et al., NeurIPS 2017): per bucket, clip to +-c*sigma, take the scale
// s = max|g|, and send s * sign(g) * b with b ~ Bernoulli(|g| / s): 2 bits per coordinate
// plus a float32 scale per bucket. Unbiased without clipping.
//
//   terngrad(bucket=4096, clip=2.5, shared=0)
//
// clip=0 disables clipping. shared=1 uses EncodeOptions::shared_scale for every bucket
// (TernGrad's scaler sharing: every worker uses max_i s_i, which makes the ternary codes
// of all workers integer-summable); values beyond it are clipped to it.
// Codes: 0 -> 0, 1 -> +s, 2 -> -s; code 3 is invalid.
#ifndef FEDLGC_CODECS_TERNGRAD_H_
#define FEDLGC_CODECS_TERNGRAD_H_

#include <memory>

#include "absl/status/statusor.h"
#include "codecs/dense_codec.h"
#include "codecs/spec.h"

namespace fedlgc::codecs {

class TernGrad final : public DenseCodec {
 public:
  static absl::StatusOr<std::unique_ptr<Codec>> Create(const SpecNode& node);

  uint64_t MaxBodyBytes(uint64_t n) const override;
  absl::Status EncodeBody(std::span<const float> values, const BodyContext& ctx,
                          std::string* out) const override;
  absl::Status DecodeBody(std::span<const uint8_t> body, std::span<float> out) const override;
  double BoundBitsPerCoord() const override;

  // The scale this worker would use (max over buckets of max|clipped g|): what workers
  // exchange to agree on a shared scale.
  float LocalScale(std::span<const float> values) const;

 private:
  TernGrad(std::string spec, uint32_t bucket, float clip, bool shared);
  // Clipping bound of one bucket (infinity when clipping is off).
  float ClipBound(std::span<const float> x) const;

  uint32_t bucket_;
  float clip_;
  bool shared_;
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_TERNGRAD_H_
