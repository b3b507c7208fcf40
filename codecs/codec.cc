// Frame-level decoding helpers shared by every codec.
#include "codecs/codec.h"

#include <algorithm>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/input_error.h"

namespace fedlgc::codecs {

absl::Status DecodeFrameInto(const Codec& codec, std::span<const uint8_t> bytes,
                             const FrameLimits& limits, std::span<float> out, FrameView* parsed) {
  FEDLGC_ASSIGN_OR_RETURN(FrameView view, ParseFrame(bytes, limits));
  if (parsed != nullptr) *parsed = view;
  if (view.spec != codec.wire_spec()) {
    return WrongCodecError(
        StrCat("frame was encoded with \"", view.spec, "\", expected \"", codec.wire_spec(), "\""));
  }
  if (view.dim != out.size()) {
    return absl::OutOfRangeError(
        StrCat("frame is for a vector of ", view.dim, " coordinates, expected ", out.size()));
  }
  return codec.Decode(view, out.subspan(view.begin, view.length));
}

absl::Status DecodeFrameInto(const Codec& codec, std::string_view bytes, const FrameLimits& limits,
                             std::span<float> out, FrameView* parsed) {
  return DecodeFrameInto(
      codec, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      limits, out, parsed);
}

absl::StatusOr<std::vector<uint64_t>> RequiredBounds(std::span<const uint64_t> cuts, uint64_t n) {
  std::vector<uint64_t> bounds{0};
  for (uint64_t c : cuts) {
    if (c <= bounds.back() || c >= n) {
      return absl::InvalidArgumentError(
          StrCat("frame cut at ", c, " is not increasing inside (0, ", n, ")"));
    }
    bounds.push_back(c);
  }
  bounds.push_back(n);
  return bounds;
}

absl::Status DecodeAll(const Codec& codec, std::span<const Frame> frames, std::span<float> out) {
  // The frames of one Encode call tile the vector and overwrite every coordinate; only
  // a partial set needs the zero fill.
  uint64_t covered = 0;
  for (const Frame& f : frames) covered += f.length;
  if (covered != out.size()) std::fill(out.begin(), out.end(), 0.0f);
  FrameLimits limits;
  limits.max_dim = std::max<uint64_t>(limits.max_dim, out.size());
  limits.max_frame_bytes = ~uint64_t{0};
  for (const Frame& f : frames) {
    FEDLGC_RETURN_IF_ERROR(DecodeFrameInto(codec, f.bytes, limits, out));
  }
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
