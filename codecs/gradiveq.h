// GradiVeQ (Yu et al., "GradiVeQ: Vector Quantization for Bandwidth-Efficient Gradient
// Aggregation in Distributed CNN Training", NeurIPS 2018): a linear PCA code of gradient
// slices, so the codes of many senders add up before one decode.
//
//   gradiveq(dims=8, slice=64, refit=10)
//
// It needs the model's layout (layout.h). A tensor of two or more dimensions with at least
// `slice` full slices of `slice` consecutive coordinates is compressed; each slice g goes
// out as c = U^T g (dims fp32 values), U (slice x dims, orthonormal columns) the tensor's
// basis, and comes back as U c. The tensor's last size mod slice coordinates, and every
// other tensor, go as fp32.
//
// The bases are fitted by PCA (SliceBasis::Fit) to a vector every party already holds:
// the coordinator fits them to the mean update of a round that went uncompressed, serves
// them to the clients, and names them in the round's spec:
//   gradiveq/1(dims=8,slice=64,refit=10,layout=l<hash>,basis=v<version>h<hash>)
// A codec built without a basis (no basis= in its spec) sends everything fp32: the rounds
// bases are fitted from (the first, and one every `refit` rounds, which the coordinator
// schedules). A frame made against another basis names another spec and is refused; a
// spec that names a basis builds only with that very basis (CodecContext::basis).
//
// Frames cut on slice boundaries inside compressed tensors and anywhere in fp32 parts.
// Body: the frame's code, in coordinate order: per slice of a compressed tensor its dims
// values, per fp32 coordinate its value; a receiver refuses code values beyond 1e30.
// Biased (a projection), but senders keep no compression error (no_error_feedback): what a
// basis does not span would pile up in the residual until a fit round sent it all at once.
// Summable (LinearCode): the code of a vector is the concatenation of its frames' codes.
#ifndef FEDLGC_CODECS_GRADIVEQ_H_
#define FEDLGC_CODECS_GRADIVEQ_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/codec.h"
#include "codecs/layout.h"
#include "codecs/registry.h"

namespace fedlgc::codecs {

// The name under which a coordinator serves a job's bases (version: the basis's).
inline constexpr char kGradiveqBasisBlob[] = "gradiveq-basis";

// A tensor GradiVeQ compresses: its index in the layout and its full slices.
struct SlicedTensor {
  size_t tensor = 0;
  uint64_t offset = 0;  // first coordinate
  uint64_t size = 0;    // of the tensor
  uint64_t slices = 0;  // full slices; the last size - slices * slice coordinates go fp32
};
// The tensors of `layout` that slices of `slice` compress to `dims` values: two or more
// dimensions and at least `slice` full slices (enough samples to fit a basis).
std::vector<SlicedTensor> SlicedTensors(const ModelLayout& layout, uint32_t slice, uint32_t dims);

// The bases of a job: per sliced tensor, U (slice x dims, row-major, orthonormal columns).
// Immutable; thread-safe.
class SliceBasis {
 public:
  // Fits to `sample` (a vector over the layout): per sliced tensor, the top `dims`
  // eigenvectors of (1/S) sum_s g_s g_s^T over its S slices (cyclic Jacobi in double).
  // `version` names the fit (the coordinator uses the round it was fitted from).
  static absl::StatusOr<SliceBasis> Fit(const ModelLayout& layout, uint32_t slice, uint32_t dims,
                                        uint64_t version, std::span<const float> sample);
  // Reads Serialize()'s bytes for `layout`; refuses another layout, a wrong size,
  // non-finite values and columns that are not orthonormal (|U^T U - I| > 1e-3).
  static absl::StatusOr<SliceBasis> Parse(std::string_view bytes, const ModelLayout& layout);

  // u32 magic 'GVQB', u32 format 1, u64 layout hash, u64 version, u32 slice, u32 dims,
  // u32 tensors, then per sliced tensor u32 its layout index and slice x dims floats.
  const std::string& bytes() const { return bytes_; }
  uint64_t version() const { return version_; }
  uint64_t layout_hash() const { return layout_hash_; }
  uint32_t slice() const { return slice_; }
  uint32_t dims() const { return dims_; }
  // "v<version>h<16 hex digits of FNV-1a of bytes()>": the value of a spec's basis=.
  const std::string& word() const { return word_; }
  const std::vector<SlicedTensor>& tensors() const { return tensors_; }
  // U of tensors()[i].
  std::span<const float> u(size_t i) const { return u_[i]; }
  // Per sliced tensor, the share of the sample's slice energy the basis keeps (Fit only;
  // empty after Parse).
  const std::vector<double>& kept() const { return kept_; }

 private:
  void Seal(uint64_t layout_hash);

  uint64_t version_ = 0, layout_hash_ = 0;
  uint32_t slice_ = 0, dims_ = 0;
  std::vector<SlicedTensor> tensors_;
  std::vector<std::vector<float>> u_;
  std::vector<double> kept_;
  std::string bytes_, word_;
};

// The (version, word) a gradiveq spec's basis= names; nullopt when `spec` is not
// gradiveq (possibly inside ef(...)) or names no basis. Outside codecs/, read it as
// RoundKindOf(spec).basis_named.
std::optional<std::pair<uint64_t, std::string>> GradiveqBasisOf(std::string_view spec);

// Decode is const and thread-safe; Encode is stateless.
class GradiVeQ final : public Codec, public LinearCode {
 public:
  static absl::StatusOr<std::unique_ptr<Codec>> Create(const SpecNode& node,
                                                       const CodecContext& context);

  CodecTraits traits() const override;
  // Exact for the whole vector in one frame; an upper bound for any other n.
  uint64_t MaxFrameBytes(uint64_t n) const override;
  absl::Status Encode(std::span<const float> x, const EncodeOptions& opts,
                      std::vector<Frame>* frames) override;
  absl::Status Decode(const FrameView& frame, std::span<float> out) const override;

  uint64_t code_size() const override { return code_size_; }
  absl::StatusOr<uint64_t> ReadCode(const FrameView& frame,
                                    std::vector<float>* code) const override;
  absl::Status DecodeCode(std::span<const float> code, std::span<float> out) const override;

  // The basis it codes with; null for the fp32 rounds bases are fitted from.
  const std::shared_ptr<const SliceBasis>& basis() const { return basis_; }
  uint32_t refit() const { return refit_; }
  uint32_t slice() const { return slice_; }
  uint32_t dims() const { return dims_; }

 private:
  // A run of coordinates coded alike: `unit` coordinates to `per_unit` code values (a
  // slice to dims values through basis `u`, or one fp32 value).
  struct Segment {
    uint64_t begin = 0, end = 0;  // coordinates
    uint64_t code = 0;            // index of its first code value
    uint64_t unit = 1, per_unit = 1;
    int u = -1;  // index into basis_->tensors(); -1: fp32
  };
  GradiVeQ(std::string spec, const ModelLayout& layout, uint32_t slice, uint32_t dims,
           uint32_t refit, std::shared_ptr<const SliceBasis> basis);
  // The code range of coordinates [begin, end), which must fall on unit boundaries.
  absl::StatusOr<std::pair<uint64_t, uint64_t>> CodeRange(uint64_t begin, uint64_t end) const;
  // The whole code of x (dim_ values): U^T g per slice, the value per fp32 coordinate.
  std::vector<float> Project(std::span<const float> x) const;
  // Where the frames of an update start and end, [0, ..., dim_]: as many whole units per
  // frame as opts.max_frame_bytes holds, and the caller's cuts (P3's slices).
  absl::StatusOr<std::vector<uint64_t>> FrameCuts(const EncodeOptions& opts) const;
  // Rebuilds coordinates [begin, end) from their code (starting at code index cb).
  void Expand(uint64_t begin, uint64_t end, uint64_t cb, const float* code, float* out) const;

  uint64_t dim_ = 0;
  uint32_t slice_, dims_, refit_;
  std::shared_ptr<const SliceBasis> basis_;
  std::vector<Segment> segments_;
  uint64_t code_size_ = 0;
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_GRADIVEQ_H_
