// Error feedback (Seide et al. 2014; Karimireddy et al., "Error Feedback Fixes SignSGD",
// ICML 2019) as a decorator around any codec: the sender adds its residual e to the
// input, sends C(x + e), and keeps e' = x + e - D(C(x + e)). So, exactly in real
// arithmetic, the sum of what was sent plus the residual equals the sum of the inputs.
//
//   ef(inner)          e.g. ef(topk(ratio=0.01, values=qsgd(bits=8)))
//   ef(inner, error=0) keeps only what Restore() gives back, not the compression error:
//                      for unbiased codecs whose variance exceeds the input's norm (QSGD
//                      with few levels), feeding the error back does not contract and the
//                      residual grows without bound (Karimireddy et al. assume a
//                      contractive compressor).
//
// Frames carry the inner codec's spec: error feedback is the sender's business and the
// receiver decodes with the inner codec. Frames that never got counted (lost, late) go
// back into the residual with Restore() (residual_codec.h).
#ifndef FEDLGC_CODECS_ERROR_FEEDBACK_H_
#define FEDLGC_CODECS_ERROR_FEEDBACK_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/registry.h"
#include "codecs/residual_codec.h"

namespace fedlgc::codecs {

// Not thread-safe: one sender owns it.
class ErrorFeedback final : public ResidualCodec {
 public:
  static absl::StatusOr<std::unique_ptr<Codec>> Create(const SpecNode& node,
                                                       const CodecContext& context);
  ErrorFeedback(std::string spec, std::unique_ptr<Codec> inner, bool feed_back_error = true);

  const std::string& wire_spec() const override { return inner_->wire_spec(); }
  CodecTraits traits() const override;
  uint64_t MaxFrameBytes(uint64_t n) const override { return inner_->MaxFrameBytes(n); }
  absl::Status Encode(std::span<const float> x, const EncodeOptions& opts,
                      std::vector<Frame>* frames) override;
  absl::Status Decode(const FrameView& frame, std::span<float> out) const override {
    return inner_->Decode(frame, out);
  }

  const Codec& inner() const { return *inner_; }

 private:
  std::unique_ptr<Codec> inner_;
  const bool feed_back_error_;
  std::vector<float> recon_;  // what the receiver decodes
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_ERROR_FEEDBACK_H_
