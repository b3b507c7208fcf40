// signSGD (Bernstein et al., ICML 2018) and its majority vote (ICLR 2019): one sign bit
// per coordinate, optionally scaled by the bucket's mean magnitude (scale=l1), so the
// decoded value is +-||v||_1 / |bucket| or +-1 (scale=none). Biased; meant for
// majority-vote aggregation or error feedback.
//
//   sign(bucket=4096, scale=l1|none)
#ifndef FEDLGC_CODECS_SIGN_H_
#define FEDLGC_CODECS_SIGN_H_

#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "base/spec.h"
#include "codecs/dense_codec.h"

namespace fedlgc::codecs {

class SignCodec final : public DenseCodec {
 public:
  static absl::StatusOr<std::unique_ptr<Codec>> Create(const SpecNode& node);

  uint64_t MaxBodyBytes(uint64_t n) const override;
  absl::Status EncodeBody(std::span<const float> values, const BodyContext& ctx,
                          std::string* out) const override;
  absl::Status DecodeBody(std::span<const uint8_t> body, std::span<float> out) const override;
  double BoundBitsPerCoord() const override { return 1.0 + (scaled_ ? 32.0 / bucket_ : 0.0); }

 private:
  SignCodec(std::string spec, uint32_t bucket, bool scaled);

  uint32_t bucket_;
  bool scaled_;
};

// Majority vote of n workers' decoded sign vectors: out_i = sign(sum_w sign(votes[w]_i)),
// +1 or -1, and 0 on a tie (possible only for an even number of workers). A vote of
// exactly 0 counts as +1, as in the encoder. REQUIRES: every vote has out.size() values.
void SignMajorityVote(std::span<const std::span<const float>> votes, std::span<float> out);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_SIGN_H_
