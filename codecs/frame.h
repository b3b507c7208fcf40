// The frame: the unit fedlgc sends on the wire. Every encoded update is one or more
// self-contained frames; each covers a coordinate range [begin, begin + length) of a
// vector of `dim` coordinates and decodes alone.
//
// Layout (little-endian):
//   u32  magic 'FLGC' (0x43474C46)
//   u8   frame format version (kFrameFormatVersion)
//   u8   reserved, 0
//   u16  spec length S (1..kMaxSpecLength)
//   S    canonical versioned codec spec, e.g. "qsgd/1(bits=4,bucket=512,norm=l2,elias=0)"
//   u64  dim      total coordinates of the vector
//   u64  begin    first coordinate this frame covers
//   u64  length   coordinates covered
//   u32  body length B
//   B    codec body
//   u32  CRC32C of every byte above
#ifndef FEDLGC_CODECS_FRAME_H_
#define FEDLGC_CODECS_FRAME_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fedlgc::codecs {

inline constexpr uint32_t kFrameMagic = 0x43474C46;  // "FLGC"
inline constexpr uint8_t kFrameFormatVersion = 1;
// Bytes a frame adds around its spec and body.
inline constexpr size_t kFrameFixedBytes = 4 + 1 + 1 + 2 + 8 + 8 + 8 + 4 + 4;

// A body's length is a u32.
inline constexpr uint64_t kMaxBodyBytes = 0xFFFFFFFFull;

inline size_t FrameOverhead(size_t spec_len) { return kFrameFixedBytes + spec_len; }

// An encoded frame as produced by Codec::Encode.
struct Frame {
  uint64_t begin = 0;
  uint64_t length = 0;
  std::string bytes;
};

// What a receiver accepts. Everything beyond is rejected before any decoding work.
struct FrameLimits {
  uint64_t max_dim = uint64_t{1} << 31;           // coordinates in a vector
  uint64_t max_frame_bytes = uint64_t{64} << 20;  // a whole frame
};

// A parsed, checksum-verified frame. Views into the caller's bytes.
struct FrameView {
  std::string_view spec;
  uint64_t dim = 0;
  uint64_t begin = 0;
  uint64_t length = 0;
  std::span<const uint8_t> body;
};

// Writes the header for `spec` into `out` (cleared first) and returns the offset of the
// body; the caller appends the body and then calls FinishFrame.
size_t BeginFrame(std::string_view spec, uint64_t dim, uint64_t begin, uint64_t length,
                  std::string* out);
// Patches the body length and appends the CRC32C.
void FinishFrame(size_t body_offset, std::string* out);

// Checks magic, format version, lengths, limits and CRC, then returns views into `bytes`.
// The range [begin, begin+length) is verified to lie inside [0, dim).
absl::StatusOr<FrameView> ParseFrame(std::span<const uint8_t> bytes, const FrameLimits& limits);
inline absl::StatusOr<FrameView> ParseFrame(std::string_view bytes, const FrameLimits& limits) {
  return ParseFrame(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      limits);
}

}  // namespace fedlgc::codecs

#endif  // FEDLGC_CODECS_FRAME_H_
