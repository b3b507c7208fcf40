// DenseCodec: base for codecs that map a value sequence to a body of bytes (fp32, fp16,
// QSGD, TernGrad, ...). It implements framing and chunking once: chunk boundaries fall
// on multiples of block() coordinates, and each chunk is one frame. Sparse codecs reuse
// a DenseCodec's body functions for their values.
#ifndef FEDLGC_CODECS_DENSE_CODEC_H_
#define FEDLGC_CODECS_DENSE_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codecs/codec.h"

namespace fedlgc::codecs {

// Where a body sits in the whole stream, so randomness is keyed globally.
struct BodyContext {
  uint64_t seed = 0;
  uint64_t first_block = 0;  // global block index of the body's first value
  float shared_scale = 0;
  std::span<const float> fresh;  // EncodeOptions::fresh over the body's values, or empty
  // What Fit chose from the whole input (alq's levels; a sparse codec fits its value codec
  // on all kept values), or empty: a body that needs it then fits its own values.
  std::span<const float> fitted;
};

// Thread-safe: dense codecs hold no mutable state.
class DenseCodec : public Codec {
 public:
  CodecTraits traits() const override { return traits_; }
  uint64_t MaxFrameBytes(uint64_t n) const override {
    return FrameOverhead(wire_spec().size()) + MaxBodyBytes(n);
  }
  absl::Status Encode(std::span<const float> x, const EncodeOptions& opts,
                      std::vector<Frame>* frames) override;
  absl::Status Decode(const FrameView& frame, std::span<float> out) const override;

  // Body bytes for n values: exact for fixed-size codecs, else an upper bound.
  virtual uint64_t MaxBodyBytes(uint64_t n) const = 0;
  // Appends the body for `values` to *out. Fails on non-finite values.
  virtual absl::Status EncodeBody(std::span<const float> values, const BodyContext& ctx,
                                  std::string* out) const = 0;
  // Decodes a body of exactly out.size() values; fails unless it consumes exactly `body`
  // and every decoded value is finite.
  virtual absl::Status DecodeBody(std::span<const uint8_t> body, std::span<float> out) const = 0;

  // Parameters chosen from the whole input before it is cut into bodies, so that every
  // body of one Encode uses the same ones (each body that needs them carries them).
  // On non-finite input it leaves `fitted` empty (the bodies refuse that input). Default:
  // none.
  virtual absl::Status Fit(std::span<const float> /*x*/, std::vector<float>* /*fitted*/) const {
    return absl::OkStatus();
  }

  // Bits per coordinate the information in a body needs (for benchmark reporting):
  // code bits plus per-block scales.
  virtual double BoundBitsPerCoord() const = 0;

 protected:
  DenseCodec(std::string spec, CodecTraits traits) : Codec(std::move(spec)), traits_(traits) {}

  // OK when a fixed-size body for n values has exactly MaxBodyBytes(n) bytes.
  absl::Status ExpectBodyBytes(std::span<const uint8_t> body, uint64_t n) const;
  // Shared error for values that are NaN or infinite.
  static absl::Status NonFiniteInput(std::span<const float> values);

 private:
  CodecTraits traits_;
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_DENSE_CODEC_H_
