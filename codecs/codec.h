// The Codec interface: turns a float vector into self-contained frames and back.
//
// A codec is built from a spec by the Registry (registry.h). Its canonical spec carries
// every parameter and the wire version of each codec in it, and is written into every
// frame, so a receiver knows exactly what produced a frame and refuses anything else.
//
// Encoding is deterministic for a given EncodeOptions::seed: stochastic codecs draw their
// randomness from (seed, block index), so a chunked encoding decodes to exactly the
// same values as the unchunked one.
#ifndef FEDLGC_CODECS_CODEC_H_
#define FEDLGC_CODECS_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codecs/frame.h"

namespace fedlgc::codecs {

struct EncodeOptions {
  // Seeds stochastic rounding and random selection. Same seed, same bytes.
  uint64_t seed = 0;
  // Largest frame in bytes; 0 encodes the whole vector as one frame. Too small a budget
  // for the codec's smallest self-contained unit is an error.
  uint64_t max_frame_bytes = 0;
  // A scale agreed between all workers of a round (TernGrad's shared scaler); 0 = none.
  float shared_scale = 0;
  // The update alone, when a decorator (error feedback) added its residual to it: the
  // same size as the input, or empty. AdaComp's soft threshold reads it; others ignore it.
  std::span<const float> fresh;
  // Coordinates where a frame must end, strictly increasing, each in (0, n): P3's slicing,
  // with the model's tensor boundaries (ModelLayout::TensorCuts), makes every frame lie in
  // one tensor so that the frames of a tensor tile it. Frames still respect
  // max_frame_bytes and the codec's block, which restarts after each cut; a cut the codec
  // cannot honour (inside a PowerSGD row, a GradiVeQ slice) is an error. Empty: no cuts,
  // and a chunked encoding decodes exactly like the unchunked one.
  std::span<const uint64_t> cuts;
};

struct CodecTraits {
  bool fixed_size = true;  // MaxFrameBytes is exact for every input
  bool unbiased = false;   // E[Decode(Encode(x))] = x over the seed
  bool stateful = false;   // Encode changes the codec (e.g. error feedback residual)
  uint64_t block = 1;      // chunk boundaries fall on multiples of this many coordinates
  // Codes add up without decoding: the codec is a LinearCode (below), and a receiver may
  // sum the codes of many senders and decode the sum once.
  bool summable = false;
  // Senders keep no compression error, only what did not count, although the codec is
  // biased: GradiVeQ, whose dropped part (outside the basis) would pile up until a refit
  // round delivered it all at once.
  bool no_error_feedback = false;
};

// Thread-safety: Decode is const and may run concurrently; Encode of a stateful codec
// must be serialized by the caller. Codecs are not copyable.
class Codec {
 public:
  virtual ~Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  // Canonical, versioned spec of this codec (what the registry would rebuild it from).
  const std::string& spec() const { return spec_; }
  // Spec written into the frames this codec produces. Differs from spec() for
  // sender-side decorators such as error feedback, whose frames the inner codec decodes.
  virtual const std::string& wire_spec() const { return spec_; }
  virtual CodecTraits traits() const = 0;

  // Bytes of the single frame encoding n coordinates: exact when traits().fixed_size,
  // otherwise an upper bound.
  virtual uint64_t MaxFrameBytes(uint64_t n) const = 0;
  // Bytes of any frame that covers n coordinates of a longer vector (a chunk): the same as
  // MaxFrameBytes(n) unless what a frame holds per coordinate varies (a sparse codec's
  // chunk of a dense region keeps more than its share).
  virtual uint64_t MaxRangeFrameBytes(uint64_t n) const { return MaxFrameBytes(n); }

  // Encodes x into frames (appended to *frames) whose ranges partition [0, x.size()),
  // each at most opts.max_frame_bytes when that is set.
  // Fails on non-finite input and on a budget too small for one block.
  virtual absl::Status Encode(std::span<const float> x, const EncodeOptions& opts,
                              std::vector<Frame>* frames) = 0;

  // Decodes one frame whose header was verified by ParseFrame and whose spec equals
  // wire_spec(); `out` covers the frame's range (out.size() == frame.length).
  // Never reads outside frame.body and never writes outside out.
  virtual absl::Status Decode(const FrameView& frame, std::span<float> out) const = 0;

 protected:
  explicit Codec(std::string spec) : spec_(std::move(spec)) {}

 private:
  std::string spec_;
};

// A codec whose frames carry a linear code of the vector: Decode(a c1 + b c2) =
// a Decode(c1) + b Decode(c2), and the code of a frame is the slice of the whole vector's
// code that its range maps to. A receiver sums the codes of many senders (weighted) and
// decodes once (GradiVeQ's PCA codes: traits().summable). Codes keep norms: ||code|| equals
// the norm of what it decodes to, so clipping can work on codes.
class LinearCode {
 public:
  virtual ~LinearCode() = default;
  // Floats in the code of a whole vector.
  virtual uint64_t code_size() const = 0;
  // The code a frame carries (*code) and the index of its first float in the whole
  // vector's code; checks what Decode checks (the frame's header was verified by
  // ParseFrame, its spec equals wire_spec()).
  virtual absl::StatusOr<uint64_t> ReadCode(const FrameView& frame,
                                            std::vector<float>* code) const = 0;
  // Decodes the code of a whole vector (code_size() floats) into out (the dimension).
  virtual absl::Status DecodeCode(std::span<const float> code, std::span<float> out) const = 0;
};

// The frame boundaries a codec must keep: [0, cuts..., n]. Fails unless the cuts are
// strictly increasing and inside (0, n).
absl::StatusOr<std::vector<uint64_t>> RequiredBounds(std::span<const uint64_t> cuts, uint64_t n);

// Block key of a frame's first block, unique over one encoding: begin / block for a frame
// that starts on a block, and past every such key (by its begin) for one that starts at a
// cut between blocks, so no two blocks of an encoding draw the same random stream.
inline uint64_t FirstBlockKey(uint64_t begin, uint64_t block, uint64_t n) {
  return begin % block == 0 ? begin / block : (n + block - 1) / block + begin;
}

// Parses `bytes`, checks that it was produced by `codec` for a vector of out.size()
// coordinates, and decodes it into its range of `out`. Coordinates outside the frame's
// range are left untouched. `parsed`, when given, receives the frame's header.
absl::Status DecodeFrameInto(const Codec& codec, std::span<const uint8_t> bytes,
                             const FrameLimits& limits, std::span<float> out,
                             FrameView* parsed = nullptr);
absl::Status DecodeFrameInto(const Codec& codec, std::string_view bytes, const FrameLimits& limits,
                             std::span<float> out, FrameView* parsed = nullptr);

// Decodes a whole encoding (all frames of one Encode call) into `out`. Coordinates no
// frame covers are zero. Convenience for senders and tests.
absl::Status DecodeAll(const Codec& codec, std::span<const Frame> frames, std::span<float> out);

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_CODEC_H_
