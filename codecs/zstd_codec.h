// A lossless stage after any stateless codec: the inner codec's frame body, compressed with
// Zstandard (Collet, RFC 8878; Debian's libzstd).
//
//   zstd(inner, level=3)      e.g. zstd(qsgd(bits=4,norm=linf)), ef(zstd(topk(ratio=0.01)))
//
// Quantizer codes are far from uniform (most of a bucket's coordinates sit on the low
// levels), so their packed bits compress: 4-bit deltas of a model lose about a third of
// their bytes (docs/results.md). Decoding gives exactly what the inner codec decodes.
//
// Body: u8 mode, then the inner body as is (mode 0, taken when compression does not make
// it smaller) or one zstd frame with its content size (mode 1). A receiver decompresses
// at most the inner codec's MaxFrameBytes for the frame's length and refuses anything
// that does not fill exactly that many bytes or leaves bytes over, so a small frame
// cannot expand into unbounded memory. Error feedback belongs outside: ef(zstd(...)).
#ifndef FEDLGC_CODECS_ZSTD_CODEC_H_
#define FEDLGC_CODECS_ZSTD_CODEC_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codecs/codec.h"
#include "codecs/registry.h"

namespace fedlgc::codecs {

// The body transform on its own, for formats outside this library (LGC's compact codes,
// modes/lgc/lgc_codes.h): u8 mode, then `body` as is (mode 0) or one zstd frame with its
// content size (mode 1), whichever is shorter.
absl::StatusOr<std::string> ZstdPack(std::span<const uint8_t> body, int level);
// The body ZstdPack packed. Refuses an unknown mode, anything but one regular zstd frame
// with its content size, and a content size above `cap` (checked before inflating).
absl::StatusOr<std::vector<uint8_t>> ZstdUnpack(std::span<const uint8_t> packed, uint64_t cap);

// Thread-safety: as the inner codec (stateless, so Encode and Decode may run concurrently).
class ZstdCodec final : public Codec {
 public:
  static absl::StatusOr<std::unique_ptr<Codec>> Create(const SpecNode& node,
                                                       const CodecContext& context);

  const std::string& wire_spec() const override { return wire_spec_; }
  CodecTraits traits() const override;
  uint64_t MaxFrameBytes(uint64_t n) const override;
  absl::Status Encode(std::span<const float> x, const EncodeOptions& opts,
                      std::vector<Frame>* frames) override;
  absl::Status Decode(const FrameView& frame, std::span<float> out) const override;

  const Codec& inner() const { return *inner_; }
  int level() const { return level_; }

 private:
  ZstdCodec(std::string spec, std::string wire_spec, std::unique_ptr<Codec> inner, int level);

  // Bytes a frame of this codec has beyond the inner codec's frame (longer spec, mode byte).
  uint64_t ExtraBytes() const;

  const std::string wire_spec_;
  const std::unique_ptr<Codec> inner_;
  const int level_;
};

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_ZSTD_CODEC_H_
