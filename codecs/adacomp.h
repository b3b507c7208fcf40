// AdaComp (Chen et al., "AdaComp: Adaptive Residual Gradient Compression for Data-Parallel
// Distributed Training", AAAI 2018): the vector is cut into bins of `bin` coordinates; in
// each bin every coordinate whose soft-thresholded value |H_i| = |G_i + g_i| reaches the
// bin's largest |G_j| is sent (at least one per bin: the largest |G| when none qualifies;
// zeros never, having no sign), as its sign times one scale per 64 bins (the mean |G| of
// what those bins send). G is the error-corrected input (residual +
// update), g the update alone, so that a coordinate whose latest update pushes it further
// goes out before it has grown to the bin's maximum.
//
//   ef(adacomp(bin=50))   AdaComp with its residual: error feedback passes the update g
//                         to the codec (EncodeOptions::fresh) and keeps G - sent. The
//                         edge client persists that residual like every ef(...) codec's.
//   adacomp(bin=500)      without ef: H = G, only each bin's largest magnitudes are sent.
//
// Body of a frame, per group of 64 bins: the scale (float32), then per bin a mode bit and
// either the count (bit_width(bin) bits) and the positions in the bin (ceil(log2 bin) bits
// each, ascending) or a bitmap of the bin, whichever is shorter, then one sign bit per sent
// coordinate; the last byte's padding is zero. A group that sends nothing has scale +0.
// Frames hold whole groups, so a chunked encoding decodes like the whole. Biased: use it
// with error feedback. The paper's bins: about 50 for convolutions, 500 for dense layers
// (here 2 to 4,096).
#ifndef FEDLGC_CODECS_ADACOMP_H_
#define FEDLGC_CODECS_ADACOMP_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/spec.h"
#include "codecs/bit_io.h"
#include "codecs/dense_codec.h"

namespace fedlgc::codecs {

class AdaComp final : public DenseCodec {
 public:
  static absl::StatusOr<std::unique_ptr<Codec>> Create(const SpecNode& node);

  uint64_t MaxBodyBytes(uint64_t n) const override;
  absl::Status EncodeBody(std::span<const float> values, const BodyContext& ctx,
                          std::string* out) const override;
  absl::Status DecodeBody(std::span<const uint8_t> body, std::span<float> out) const override;
  // Worst case: a mode bit, a full bitmap and every sign, and a scale per 64 bins.
  double BoundBitsPerCoord() const override { return 2.0 + (1.0 + 32.0 / kBinsPerScale) / bin_; }

  uint32_t bin() const { return bin_; }

  // Bins that share one scale.
  static constexpr size_t kBinsPerScale = 64;

 private:
  AdaComp(std::string spec, uint32_t bin);

  absl::Status Malformed(size_t bin, std::string_view what) const;
  static void WriteBin(std::span<const uint32_t> picked, size_t len, std::span<const float> values,
                       BitWriter* w);
  absl::Status ReadBin(size_t len, size_t bin, BitReader* r, std::vector<uint32_t>* p) const;

  uint32_t bin_;
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_ADACOMP_H_
