// fp32 / fp16 / bf16 codecs.
#include "codecs/float_codecs.h"

#include <algorithm>
#include <cstring>

#include "base/status_macros.h"
#include "base/str.h"
#include "codecs/input_error.h"
#include "codecs/params.h"
#include "codecs/simd.h"

namespace fedlgc::codecs {

uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7FFFFFFFu;
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7BFFu);  // >= 65520: saturate
  if (a < 0x38800000u) {
    // Result is a half subnormal (or zero): scale into the integer grid and round.
    if (a < 0x33000000u) return static_cast<uint16_t>(sign);  // below half of the smallest
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24 (value = m * 2^(e-150), unit 2^-24)
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits.
  a -= 0x38000000u;  // (127 - 15) << 23
  uint32_t h = a >> 13;
  const uint32_t rem = a & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0) {
    // Zero or subnormal: m * 2^-24.
    const float v = static_cast<float>(m) * (1.0f / 16777216.0f);
    return BitsFloat(FloatBits(v) | sign);
  }
  if (e == 31) return BitsFloat(sign | 0x7F800000u | (m << 13));
  return BitsFloat(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t FloatToBf16(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t rounded = x + 0x7FFFu + ((x >> 16) & 1u);
  // A finite value that would round to infinity saturates to the largest bf16.
  if ((rounded & 0x7F800000u) == 0x7F800000u && (x & 0x7F800000u) != 0x7F800000u) {
    return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7F7Fu);
  }
  return static_cast<uint16_t>(rounded >> 16);
}

float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

namespace {

FEDLGC_MULTIVERSION void EncodeHalf(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}
FEDLGC_MULTIVERSION uint32_t DecodeHalf(const uint16_t* in, size_t n, float* out) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    bad |= ((in[i] & 0x7C00u) == 0x7C00u) ? 1u : 0u;
    out[i] = HalfToFloat(in[i]);
  }
  return bad;
}
FEDLGC_MULTIVERSION void EncodeBf16(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}
FEDLGC_MULTIVERSION uint32_t DecodeBf16(const uint16_t* in, size_t n, float* out) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    bad |= ((in[i] & 0x7F80u) == 0x7F80u) ? 1u : 0u;
    out[i] = Bf16ToFloat(in[i]);
  }
  return bad;
}

const char* FormatName(FloatFormat f) {
  switch (f) {
    case FloatFormat::kFp32:
      return "fp32";
    case FloatFormat::kFp16:
      return "fp16";
    case FloatFormat::kBf16:
      return "bf16";
  }
  return "?";
}

}  // namespace

FloatCodec::FloatCodec(std::string spec, FloatFormat format)
    : DenseCodec(std::move(spec), CodecTraits{.fixed_size = true,
                                              .unbiased = format == FloatFormat::kFp32,
                                              .stateful = false,
                                              .block = 1}),
      format_(format),
      bytes_(format == FloatFormat::kFp32 ? 4 : 2) {}

absl::StatusOr<std::unique_ptr<Codec>> FloatCodec::Create(FloatFormat format,
                                                          const SpecNode& node) {
  ParamReader params(node, {});
  FEDLGC_RETURN_IF_ERROR(params.status());
  return std::unique_ptr<Codec>(new FloatCodec(StrCat(FormatName(format), "/1"), format));
}

absl::Status FloatCodec::EncodeBody(std::span<const float> values, const BodyContext&,
                                    std::string* out) const {
  if (FindNonFinite(values) != values.size()) return NonFiniteInput(values);
  if (values.empty()) return absl::OkStatus();  // a sparse frame that keeps nothing
  const size_t base = out->size();
  out->resize(base + MaxBodyBytes(values.size()));
  uint8_t* dst = reinterpret_cast<uint8_t*>(out->data() + base);
  switch (format_) {
    case FloatFormat::kFp32:
      std::memcpy(dst, values.data(), values.size() * 4);
      break;
    case FloatFormat::kFp16:
    case FloatFormat::kBf16: {
      // The body is not 2-byte aligned inside the frame: convert through an aligned block.
      uint16_t tmp[1024];
      for (size_t i = 0; i < values.size(); i += 1024) {
        const size_t m = std::min<size_t>(1024, values.size() - i);
        if (format_ == FloatFormat::kFp16) {
          EncodeHalf(values.data() + i, m, tmp);
        } else {
          EncodeBf16(values.data() + i, m, tmp);
        }
        std::memcpy(dst + 2 * i, tmp, 2 * m);
      }
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status FloatCodec::DecodeBody(std::span<const uint8_t> body, std::span<float> out) const {
  FEDLGC_RETURN_IF_ERROR(ExpectBodyBytes(body, out.size()));
  if (out.empty()) return absl::OkStatus();  // a sparse frame that keeps nothing
  bool bad = false;
  switch (format_) {
    case FloatFormat::kFp32:
      std::memcpy(out.data(), body.data(), body.size());
      bad = FindNonFinite(out) != out.size();
      break;
    case FloatFormat::kFp16: {
      // The body may be unaligned for uint16_t: decode from an aligned copy per block.
      uint16_t tmp[1024];
      for (size_t i = 0; i < out.size(); i += 1024) {
        const size_t m = std::min<size_t>(1024, out.size() - i);
        std::memcpy(tmp, body.data() + 2 * i, 2 * m);
        bad |= DecodeHalf(tmp, m, out.data() + i) != 0;
      }
      break;
    }
    case FloatFormat::kBf16: {
      uint16_t tmp[1024];
      for (size_t i = 0; i < out.size(); i += 1024) {
        const size_t m = std::min<size_t>(1024, out.size() - i);
        std::memcpy(tmp, body.data() + 2 * i, 2 * m);
        bad |= DecodeBf16(tmp, m, out.data() + i) != 0;
      }
      break;
    }
  }
  if (bad) return NonFiniteError(StrCat(spec(), ": payload holds a non-finite value"));
  return absl::OkStatus();
}

}  // namespace fedlgc::codecs
