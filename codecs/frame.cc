// Frame header writing and validating parsing (layout in frame.h).
#include "codecs/frame.h"

#include <cstring>

#include "base/crc32c.h"
#include "base/spec.h"
#include "base/str.h"

namespace fedlgc::codecs {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out->append(buf, sizeof(T));
}

template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

constexpr size_t kBodyLenFromBodyStart = 4;  // the u32 body length sits just before the body

}  // namespace

size_t BeginFrame(std::string_view spec, uint64_t dim, uint64_t begin, uint64_t length,
                  std::string* out) {
  out->clear();
  Put<uint32_t>(out, kFrameMagic);
  Put<uint8_t>(out, kFrameFormatVersion);
  Put<uint8_t>(out, 0);
  Put<uint16_t>(out, static_cast<uint16_t>(spec.size()));
  out->append(spec);
  Put<uint64_t>(out, dim);
  Put<uint64_t>(out, begin);
  Put<uint64_t>(out, length);
  Put<uint32_t>(out, 0);  // body length, patched by FinishFrame
  return out->size();
}

void FinishFrame(size_t body_offset, std::string* out) {
  const uint32_t body_len = static_cast<uint32_t>(out->size() - body_offset);
  std::memcpy(out->data() + body_offset - kBodyLenFromBodyStart, &body_len, 4);
  Put<uint32_t>(out, Crc32c(out->data(), out->size()));
}

absl::StatusOr<FrameView> ParseFrame(std::span<const uint8_t> bytes, const FrameLimits& limits) {
  const size_t n = bytes.size();
  if (n > limits.max_frame_bytes) {
    return absl::ResourceExhaustedError(
        StrCat("frame of ", n, " bytes exceeds the limit of ", limits.max_frame_bytes));
  }
  if (n < kFrameFixedBytes) {
    return absl::InvalidArgumentError(
        StrCat("truncated frame: ", n, " bytes, a header needs ", kFrameFixedBytes));
  }
  const uint8_t* p = bytes.data();
  if (Get<uint32_t>(p) != kFrameMagic) {
    return absl::InvalidArgumentError("not a fedlgc frame (bad magic)");
  }
  if (p[4] != kFrameFormatVersion) {
    return absl::UnimplementedError(StrCat("frame format version ", p[4],
                                           " is not supported (this build reads ",
                                           kFrameFormatVersion, ")"));
  }
  if (p[5] != 0) return absl::InvalidArgumentError("frame header: reserved byte is not 0");
  const size_t spec_len = Get<uint16_t>(p + 6);
  if (spec_len == 0 || spec_len > kMaxSpecLength) {
    return absl::InvalidArgumentError(
        StrCat("frame spec length ", spec_len, " is outside [1, ", kMaxSpecLength, "]"));
  }
  if (n < FrameOverhead(spec_len)) {
    return absl::InvalidArgumentError(
        StrCat("truncated frame: ", n, " bytes, header needs ", FrameOverhead(spec_len)));
  }
  const uint8_t* q = p + 8 + spec_len;
  FrameView view;
  view.spec = std::string_view(reinterpret_cast<const char*>(p + 8), spec_len);
  view.dim = Get<uint64_t>(q);
  view.begin = Get<uint64_t>(q + 8);
  view.length = Get<uint64_t>(q + 16);
  const uint32_t body_len = Get<uint32_t>(q + 24);
  const size_t expected = FrameOverhead(spec_len) + body_len;
  if (n != expected) {
    return absl::InvalidArgumentError(StrCat(n < expected ? "truncated" : "oversized",
                                             " frame: ", n, " bytes, header says ", expected));
  }
  const uint32_t crc = Get<uint32_t>(p + n - 4);
  if (Crc32c(p, n - 4) != crc) {
    return absl::DataLossError("frame checksum (CRC32C) mismatch");
  }
  if (view.dim > limits.max_dim) {
    return absl::ResourceExhaustedError(
        StrCat("frame dimension ", view.dim, " exceeds the limit of ", limits.max_dim));
  }
  if (view.begin > view.dim || view.length > view.dim - view.begin) {
    return absl::OutOfRangeError(StrCat("frame range [", view.begin, ", +", view.length,
                                        ") lies outside the vector of ", view.dim));
  }
  view.body = bytes.subspan(FrameOverhead(spec_len) - 4, body_len);
  return view;
}

}  // namespace fedlgc::codecs
