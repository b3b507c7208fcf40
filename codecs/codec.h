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
};

struct CodecTraits {
  bool fixed_size = true;  // MaxFrameBytes is exact for every input
  bool unbiased = false;   // E[Decode(Encode(x))] = x over the seed
  bool stateful = false;   // Encode changes the codec (e.g. error feedback residual)
  uint64_t block = 1;      // chunk boundaries fall on multiples of this many coordinates
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
