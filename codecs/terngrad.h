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

#include <atomic>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "base/spec.h"
#include "codecs/dense_codec.h"

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
  uint32_t bucket() const { return bucket_; }
  bool shared() const { return shared_; }

 private:
  TernGrad(std::string spec, uint32_t bucket, float clip, bool shared);
  // Clipping bound of one bucket (infinity when clipping is off).
  float ClipBound(std::span<const float> x) const;

  uint32_t bucket_;
  float clip_;
  bool shared_;
};

// terngrad(..., shared=1) is a round protocol of FedAvg (modes/fedavg/terngrad_rounds.h):
// the round's scale is agreed before anyone encodes (RoundKind::shared_scale).

// The decoder of one round of terngrad(shared=1) at the coordinator. Once the round's
// shared scale is set (SetScale, from any thread), it is what every bucket of every frame
// must carry; a frame before it, or with another, is refused (INVALID_ARGUMENT, a wrong
// codec: the sender chose its own scale). Its codes are the frames' values, each the
// shared scale times -1, 0 or 1: every sender's code is an integer multiple of one scale,
// so codes add up (summable; a code's norm is its values').
class TernGradRoundCodec final : public Codec, public LinearCode {
 public:
  // `spec`: terngrad(..., shared=1); `dim`: the coordinates of a whole update.
  static absl::StatusOr<std::shared_ptr<TernGradRoundCodec>> Create(std::string_view spec,
                                                                    uint64_t dim);
  void SetScale(float scale) { scale_.store(scale); }
  float scale() const { return scale_.load(); }

  CodecTraits traits() const override;
  uint64_t MaxFrameBytes(uint64_t n) const override { return inner_->MaxFrameBytes(n); }
  // Encodes with the round's scale (what a client of the round sends).
  absl::Status Encode(std::span<const float> x, const EncodeOptions& opts,
                      std::vector<Frame>* frames) override;
  absl::Status Decode(const FrameView& frame, std::span<float> out) const override;

  // LinearCode.
  uint64_t code_size() const override { return dim_; }
  absl::StatusOr<uint64_t> ReadCode(const FrameView& frame,
                                    std::vector<float>* code) const override;
  absl::Status DecodeCode(std::span<const float> code, std::span<float> out) const override;

 private:
  TernGradRoundCodec(std::unique_ptr<Codec> inner, uint64_t dim)
      : Codec(inner->spec()), inner_(std::move(inner)), dim_(dim) {}

  std::unique_ptr<Codec> inner_;  // the TernGrad of the spec
  const uint64_t dim_;
  std::atomic<float> scale_{0};
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_TERNGRAD_H_
