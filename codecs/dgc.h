// Deep Gradient Compression (Lin et al., "Deep Gradient Compression: Reducing the
// Communication Bandwidth for Distributed Training", ICLR 2018) as a sender-side codec:
//
//   dgc(ratio=0.001, momentum=0, clip=0, warmup=4, sample=0.01, values=fp32)
//
// Each Encode of an update g (the client's new minus old weights in FedAvg):
//   1. local clipping: g is scaled down to L2 norm `clip` when longer (clip=0: off);
//   2. momentum correction: u <- momentum * u + g, then v <- v + u (v is the residual);
//   3. the kept set is the top `ratio` of |v|, found through a threshold estimated on a
//      sample of `sample` * d magnitudes (at least 1,024) and refined to the exact set;
//   4. the kept coordinates of v go out (Elias-Fano positions, values through `values`);
//      v keeps what the receiver does not decode (zero on the kept set with fp32 values);
//   5. momentum-factor masking: u is zeroed on the kept set.
// Warm-up: the sender's first `warmup` encodes keep ratio^((t+1)/(warmup+1)) for encode
// t = 0, 1, ...: with the defaults 25%, 6.3%, 1.6%, 0.4%, then 0.1% (the paper's
// exponential schedule of 75% to 99.9% sparsity over its first epochs).
//
// So that the sum is conserved: over any run, what was sent plus v equals the sum of the
// momenta u_t (with momentum=0: of the clipped updates). `momentum` applies the momentum
// of the optimizer at the receiver on the sender's side, before sparsification: run the
// coordinator without server momentum (--server-momentum 0) when the codec has it, or the
// step applies momentum twice. It defaults to 0, the momentum of a FedAvg coordinator:
// FedAvg clients already train with momentum, and the paper's 0.9 on top of that (server
// momentum 0.9 in effect) made the FedAvg benchmark unstable (docs/results.md). Biased,
// and keeps its own residual (no ef(...) around it).
//
// Frames are those of a top-k codec whose kept count the sender chose, tagged with the
// wire spec dgc/1(values=...): a receiver needs nothing of the sender's schedule. The
// momentum and the warm-up position are sender state (SaveState), persisted with the
// residual by the edge client so a restart continues the schedule.
#ifndef FEDLGC_CODECS_DGC_H_
#define FEDLGC_CODECS_DGC_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/registry.h"
#include "codecs/residual_codec.h"
#include "codecs/sparse_codec.h"

namespace fedlgc::codecs {

// Not thread-safe: one sender owns it (Decode is const and may run concurrently).
class Dgc final : public ResidualCodec {
 public:
  static absl::StatusOr<std::unique_ptr<Codec>> Create(const SpecNode& node,
                                                       const CodecContext& context);

  const std::string& wire_spec() const override { return wire_->spec(); }
  CodecTraits traits() const override;
  uint64_t MaxFrameBytes(uint64_t n) const override { return wire_->MaxFrameBytes(n); }
  absl::Status Encode(std::span<const float> x, const EncodeOptions& opts,
                      std::vector<Frame>* frames) override;
  absl::Status Decode(const FrameView& frame, std::span<float> out) const override {
    return wire_->Decode(frame, out);
  }

  // u32 magic 'DGCS', u32 version 1, u32 spec length, spec, u64 encodes, u64 n, n floats u.
  // LoadState("") resets the codec to a sender that has not encoded yet.
  std::string SaveState() const override;
  absl::Status LoadState(std::string_view bytes) override;

  // The fraction kept by encode number t (0 = the first).
  double RatioAt(uint64_t t) const;
  // Coordinates kept out of n by encode number t.
  uint64_t KeptCount(uint64_t n, uint64_t t) const;
  // Information bound in bits of the latest encode's frames for n coordinates: its k
  // values at the value codec's bound plus log2 C(n, k) for the kept set.
  double BoundBits(uint64_t n) const;
  uint64_t encodes() const { return encodes_; }
  std::span<const float> momentum_buffer() const { return u_; }

 private:
  Dgc(std::string spec, std::unique_ptr<SparseCodec> wire, double ratio, double momentum,
      double clip, uint32_t warmup, double sample);

  std::unique_ptr<SparseCodec> wire_;
  const double ratio_;
  const double momentum_;
  const double clip_;
  const uint32_t warmup_;
  const double sample_;
  const bool exact_values_;  // fp32 values: what is kept decodes exactly
  uint64_t encodes_ = 0;
  std::vector<float> u_;       // momentum, empty before the first encode
  std::vector<float> next_u_;  // u of the current encode, committed once it succeeded
  std::vector<float> recon_;   // what the receiver decodes
  std::vector<uint32_t> idx_;  // the kept set
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_DGC_H_
