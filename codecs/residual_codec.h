// A sender-side codec that keeps a residual: what it computed but has not sent (yet).
// Error feedback (ef(...)) and DGC (dgc(...)) are such codecs. Frames of a residual codec
// are decoded by its wire codec; a frame the receiver did not count goes back into the
// residual with Restore(), so nothing the sender computed is lost.
//
// State beyond the residual (DGC's momentum and warm-up position) travels through
// SaveState()/LoadState() as opaque bytes tagged with the codec's spec and a version, so
// that a sender restarted from its state file continues exactly where it stopped and a
// state written for another codec or another version is refused instead of misread.
#ifndef FEDLGC_CODECS_RESIDUAL_CODEC_H_
#define FEDLGC_CODECS_RESIDUAL_CODEC_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "codecs/byte_io.h"
#include "codecs/codec.h"
#include "codecs/layout.h"
#include "codecs/registry.h"

namespace fedlgc::codecs {

// Not thread-safe: one sender owns it.
class ResidualCodec : public Codec {
 public:
  // Adds the decoded content of a frame this codec produced back into the residual
  // (for a frame the receiver did not count).
  absl::Status Restore(std::string_view frame_bytes);
  // Like Restore, for a frame of any codec with this dimension (e.g. one encoded before
  // the job switched codecs after its warm-up rounds); `layout` builds per-tensor codecs,
  // `basis` a gradiveq codec whose spec names it.
  absl::Status RestoreAny(std::string_view frame_bytes, const ModelLayout* layout = nullptr,
                          std::shared_ptr<const SliceBasis> basis = nullptr);

  // The residual; empty before the first Encode.
  std::span<const float> residual() const { return residual_; }
  // Replaces the residual (e.g. after a restart). Its size fixes the dimension.
  void SetResidual(std::span<const float> r) { residual_.assign(r.begin(), r.end()); }

  // State other than the residual, empty when the codec has none. LoadState accepts what
  // SaveState of a codec with the same spec wrote, and refuses anything else unchanged.
  virtual std::string SaveState() const { return {}; }
  virtual absl::Status LoadState(std::string_view bytes);

 protected:
  explicit ResidualCodec(std::string spec) : Codec(std::move(spec)) {}

  // Sizes the residual to n zeros on first use; an error when it holds another dimension.
  absl::Status PrepareResidual(size_t n);

  // The start of a SaveState blob: u32 magic, u32 version, u32 spec length, the spec.
  std::string BeginState(uint32_t magic, uint32_t version) const;
  // Reads that start back, refusing another magic (`kind` names the expected state),
  // version or spec.
  absl::Status ReadStateStart(ByteReader& r, uint32_t magic, uint32_t version,
                              std::string_view kind) const;
  // The error for a state LoadState refuses.
  absl::Status RefuseState(std::string_view why) const;

  std::vector<float> residual_;
  std::vector<float> scratch_;  // per-encode work space, or a restored frame
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_RESIDUAL_CODEC_H_
